//! libFuzzer entry of [`weft_fuzz::tuning_table`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_fuzz::tuning_table::check(data);
});

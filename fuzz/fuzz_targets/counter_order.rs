//! libFuzzer entry of [`weft_fuzz::counter_order`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_fuzz::counter_order::check(data);
});

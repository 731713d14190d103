//! libFuzzer entry of [`weft_fuzz::plan_loader`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_fuzz::plan_loader::check(data);
});

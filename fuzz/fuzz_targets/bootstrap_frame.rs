//! libFuzzer entry of [`weft_fuzz::bootstrap_frame`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_fuzz::bootstrap_frame::check(data);
});

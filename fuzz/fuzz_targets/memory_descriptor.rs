//! libFuzzer entry of [`weft_fuzz::memory_descriptor`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_fuzz::memory_descriptor::check(data);
});

//! libFuzzer entry of [`weft_fuzz::proxy_wire`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    weft_fuzz::proxy_wire::check(data);
});

//! NVRTC compiles weft-core's kernels (the test kernels of `device/tests/`), the layout probe,
//! the FIFO probe and the transfer probe for sm_90, without a GPU. When NVRTC is missing the tests say so and pass,
//! unless `WEFT_REQUIRE_NVRTC=1` (set by scripts/test.sh, which installs the NVRTC wheels): then
//! a missing NVRTC fails them.

use weft_core::{KernelLibrary, device_code};

fn library() -> Option<KernelLibrary> {
    device_code::nvrtc_test_library(&device_code::TEST_KERNELS)
        .unwrap_or_else(|e| panic!("NVRTC is required here: {e}"))
}

#[test]
fn every_test_kernel_compiles_for_sm_90_and_the_second_compile_is_a_cache_hit() {
    let Some(library) = library() else { return };
    assert_eq!(library.compile_every_variant("sm_90").unwrap(), device_code::TEST_KERNELS.units.len());
    for (name, defines) in device_code::TEST_KERNELS.programs() {
        let first = library.compile_with(name, "sm_90", &defines).unwrap();
        let second = library.compile_with(name, "sm_90", &defines).unwrap();
        assert!(first.from_cache && second.from_cache, "{name} {defines:?} was compiled again");
        assert_eq!(first.cubin, second.cubin);
    }
}

#[test]
fn the_layout_probe_compiles_and_a_wrong_layout_does_not() {
    let Some(library) = library() else { return };
    library.compile_layout_probe("sm_90").unwrap();
    let mut wrong = device_code::layout_probe_source();
    wrong.text = wrong.text.replacen(") == 0, \"rust: offsetof", ") == 1, \"rust: offsetof", 1);
    let options = weft_gpu::CompileOptions { arch: "sm_90".into(), extra: vec![] };
    let dir = std::env::temp_dir().join(format!("weft-nvrtc-wrong-{}", std::process::id()));
    let err = weft_gpu::compile(&wrong, &options, &dir).unwrap_err().to_string();
    assert!(err.contains("rust: offsetof"), "{err}");
}

#[test]
fn the_fifo_device_functions_compile_for_sm_90() {
    let Some(_) = library() else { return };
    let options = weft_gpu::CompileOptions { arch: "sm_90".into(), extra: vec![] };
    let dir = std::env::temp_dir().join(format!("weft-nvrtc-fifo-{}", std::process::id()));
    let compiled = weft_gpu::compile(&device_code::fifo_probe_source(), &options, &dir)
        .unwrap_or_else(|e| panic!("fifo probe: {e}"));
    assert!(compiled.cubin.starts_with(b"\x7fELF"));
}

#[test]
fn the_transfer_encoders_compile_for_sm_90_and_match_the_host_encoding() {
    let Some(_) = library() else { return };
    let options = weft_gpu::CompileOptions { arch: "sm_90".into(), extra: vec![] };
    let dir = std::env::temp_dir().join(format!("weft-nvrtc-transfer-{}", std::process::id()));
    let probe = device_code::transfer_probe_source();
    assert!(probe.text.matches("static_assert").count() >= 30, "{}", probe.text);
    let compiled = weft_gpu::compile(&probe, &options, &dir).unwrap_or_else(|e| panic!("transfer probe: {e}"));
    assert!(compiled.cubin.starts_with(b"\x7fELF"));
    // The assertions bite: a control word off by one fails the compile.
    let mut wrong = device_code::transfer_probe_source();
    let at = wrong.text.find(".control == ").unwrap() + ".control == ".len();
    let end = at + wrong.text[at..].find('u').unwrap();
    let value: u64 = wrong.text[at..end].parse().unwrap();
    wrong.text.replace_range(at..end, &(value + 1).to_string());
    let err = weft_gpu::compile(&wrong, &options, &dir).unwrap_err().to_string();
    assert!(err.contains("rust: transfer_write(1023"), "{err}");
}

#[test]
fn a_kernel_with_an_error_reports_the_nvrtc_log() {
    let Some(_) = library() else { return };
    let source = weft_gpu::KernelSource { name: "broken.cu".into(), text: "this is not C++".into(), headers: vec![] };
    let options = weft_gpu::CompileOptions { arch: "sm_90".into(), extra: vec![] };
    let err = weft_gpu::compile(&source, &options, &std::env::temp_dir()).unwrap_err().to_string();
    assert!(err.contains("broken.cu"), "{err}");
}

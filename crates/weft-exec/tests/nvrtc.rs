//! NVRTC compiles every variant of the plan executor's kernel for sm_90, without a GPU. When
//! NVRTC is missing the test says so and passes, unless `WEFT_REQUIRE_NVRTC=1` (set by
//! scripts/test.sh, which installs the NVRTC wheels): then a missing NVRTC fails it.

use weft_core::device_code::nvrtc_test_library;
use weft_exec::device_code::KERNELS;

#[test]
fn every_executor_variant_compiles_for_sm_90() {
    let library = nvrtc_test_library(&KERNELS).unwrap_or_else(|e| panic!("NVRTC is required here: {e}"));
    let Some(library) = library else { return };
    let compiled = library.compile_every_variant("sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(compiled, KERNELS.programs().len());
}

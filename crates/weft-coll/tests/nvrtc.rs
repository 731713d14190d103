//! NVRTC compiles every variant of every collective kernel for sm_90, without a GPU, and each
//! algorithm file on its own (it includes what it uses). When NVRTC is missing the tests say so
//! and pass, unless `WEFT_REQUIRE_NVRTC=1` (set by scripts/test.sh, which installs the NVRTC
//! wheels): then a missing NVRTC fails them.

use weft_coll::device_code::KERNELS;
use weft_core::KernelLibrary;
use weft_core::device_code::{KernelSet, compiled_once, nvrtc_test_library, type_defines};
use weft_types::{DataType, ReduceOp};

fn library(kernels: &'static KernelSet) -> Option<KernelLibrary> {
    nvrtc_test_library(kernels).unwrap_or_else(|e| panic!("NVRTC is required here: {e}"))
}

#[test]
fn every_collective_variant_compiles_for_sm_90() {
    let Some(library) = library(&KERNELS) else { return };
    let compiled = library.compile_every_variant("sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(compiled, KERNELS.programs().len());
}

/// The collective set with every algorithm file as a unit of its own.
static ALGORITHMS_ALONE: KernelSet = KernelSet { units: KERNELS.includes, variants: compiled_once, ..KERNELS };

#[test]
fn every_algorithm_file_compiles_on_its_own() {
    let Some(library) = library(&ALGORITHMS_ALONE) else { return };
    let defines = type_defines(DataType::Bf16, ReduceOp::Sum);
    for (name, _) in KERNELS.includes.iter().filter(|(n, _)| n.ends_with(".cu")) {
        library.compile_with(name, "sm_90", &defines).unwrap_or_else(|e| panic!("{name} alone: {e}"));
    }
}

/// The variants the trace tests compile: the type instantiations that differ most (a one-byte
/// integer, bf16, f64, FP8 with a wider accumulator) with sum, and the operators with a
/// finishing or premultiplying step (average, PreMulSum). Every variant of both kinds would
/// triple the set's cold compile time in CI for no new code path: the marks are the same lines
/// in every instantiation.
fn representative(name: &str) -> Vec<Vec<String>> {
    if name != weft_coll::device_code::REDUCTIONS {
        return compiled_once(name);
    }
    let cases = [
        (DataType::I8, ReduceOp::Sum),
        (DataType::Bf16, ReduceOp::Sum),
        (DataType::F64, ReduceOp::Sum),
        (DataType::F8E4M3, ReduceOp::Sum),
        (DataType::I32, ReduceOp::Avg),
        (DataType::Bf16, ReduceOp::PreMulSum),
    ];
    cases.into_iter().map(|(t, op)| type_defines(t, op)).collect()
}

/// The collective set over [`representative`] variants.
static REPRESENTATIVE: KernelSet = KernelSet { variants: representative, ..KERNELS };

/// The traced variant (`WEFT_TRACE_ENABLED`) of the representative collective programs
/// compiles for sm_90.
#[test]
fn every_traced_collective_variant_compiles_for_sm_90() {
    let Some(library) = library(&REPRESENTATIVE) else { return };
    let traced = [weft_core::trace::TRACE_DEFINE.to_string()];
    let compiled = library.compile_every_variant_with("sm_90", &traced).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(compiled, REPRESENTATIVE.programs().len());
}

/// Untraced, the trace marks compile to nothing: each representative variant's CUBIN equals
/// that of its source without them.
#[test]
fn the_trace_marks_compile_away_untraced() {
    let Some(library) = library(&REPRESENTATIVE) else { return };
    let compared = library.check_marks_compile_away("sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(compared, REPRESENTATIVE.programs().len());
}

//! The plan executor's kernel (`device/kernels/exec/executor.cu`), embedded here, in the crate
//! that launches it: one translation unit, compiled once per (element type, operator) it folds
//! with, and again with a plan's operations compiled in (`static_ops_defines`).

use weft_core::device_code::{KernelSet, type_variants};
use weft_types::ReduceOp;

/// The executor's translation unit.
pub const EXECUTOR: &str = "executor.cu";

/// The executor's kernel source.
pub const KERNELS: KernelSet = KernelSet {
    dir: "device/kernels/exec",
    units: &[(EXECUTOR, include_str!("../../../device/kernels/exec/executor.cu"))],
    includes: &[("geometry.cuh", include_str!("../../../device/kernels/exec/geometry.cuh"))],
    variants,
};

/// Once per (element type, operator) with an operator the executor folds with: it folds partial
/// results in the element type, so it has no `avg` and no `premulsum` ([`crate::supports_op`]).
fn variants(_name: &str) -> Vec<Vec<String>> {
    type_variants(&[ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_executor_source_in_the_tree_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.files_on_disk(&root).unwrap(), KERNELS.embedded_files());
    }

    #[test]
    fn the_variants_are_the_operators_the_executor_supports() {
        for op in ReduceOp::ALL {
            let compiled = KERNELS.programs().iter().any(|(_, d)| d.contains(&format!("WEFT_REDOP={}", op as u32)));
            assert_eq!(compiled, crate::supports_op(op), "{op:?}");
        }
    }
}

//! The plan executor's kernel (`device/kernels/exec/executor.cu`), embedded here, in the crate
//! that launches it: one translation unit, compiled once per (element type, operator) it folds
//! with, and again with a plan's operations compiled in (`static_ops_defines`). Its parameter
//! list is declared once, below: a launch takes [`Execute`], and
//! `device/include/weft/generated/kernels/exec.cuh`, generated from it, holds the prototype the
//! definition is compiled against, the same in every variant.

use weft_core::device_code::{KernelSet, type_variants};
use weft_types::{ExecContext, PeerBuffers, ReduceOp};

weft_gpu::device_kernels! {
    /// The executor's parameter list.
    pub(crate) fn signatures;

    /// One launch of this rank's plan.
    pub(crate) struct Execute for ["weft_execute"] {
        /// The rank's plan tables, buffers and the call's geometry.
        c: ExecContext => "weft::ExecContext",
        /// Every rank's output as this GPU addresses it (zero-copy plans), or zeros; a
        /// `__grid_constant__`, so the blocks read it in place.
        outputs: PeerBuffers => "const __grid_constant__ weft::PeerBuffers",
    }
}

/// The executor's translation unit.
pub const EXECUTOR: &str = "executor.cu";

/// The executor's kernel source.
pub const KERNELS: KernelSet = KernelSet {
    dir: "device/kernels/exec",
    units: &[(EXECUTOR, include_str!("../../../device/kernels/exec/executor.cu"))],
    includes: &[("geometry.cuh", include_str!("../../../device/kernels/exec/geometry.cuh"))],
    variants,
    signatures,
    prototypes: "weft/generated/kernels/exec.cuh",
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
    fn the_executor_matches_its_declaration() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.prototype_problems(&root), Vec::<String>::new());
    }

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

//! The GIN kernels (`device/kernels/gin/`: the examples and the benchmark's probes), embedded here, in the crate that declares
//! their parameter lists (`crate::launch`): one translation unit, `gin.cu`, compiled once.

use weft_core::device_code::{KernelSet, compiled_once};

/// The translation unit of every GIN kernel.
pub const UNIT: &str = "gin.cu";

/// Every GIN kernel source.
pub const KERNELS: KernelSet = KernelSet {
    dir: "device/kernels/gin",
    units: &[(UNIT, include_str!("../../../device/kernels/gin/gin.cu"))],
    includes: &[
        ("call.cuh", include_str!("../../../device/kernels/gin/call.cuh")),
        ("alltoall.cu", include_str!("../../../device/kernels/gin/alltoall.cu")),
        ("ring_allgather.cu", include_str!("../../../device/kernels/gin/ring_allgather.cu")),
        ("halo.cu", include_str!("../../../device/kernels/gin/halo.cu")),
        ("ping_pong.cu", include_str!("../../../device/kernels/gin/ping_pong.cu")),
        ("put_stream.cu", include_str!("../../../device/kernels/gin/put_stream.cu")),
    ],
    variants: compiled_once,
    signatures: crate::launch::signatures,
    prototypes: "weft/generated/kernels/gin.cuh",
};

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn every_gin_source_in_the_tree_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.files_on_disk(&root).unwrap(), KERNELS.embedded_files());
    }

    #[test]
    fn the_gin_kernels_match_their_declarations() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.prototype_problems(&root), Vec::<String>::new());
    }

    #[test]
    fn every_gin_kernel_compiles_for_sm_90() {
        let Some(library) = weft_core::device_code::nvrtc_test_library(&KERNELS).unwrap() else { return };
        assert_eq!(library.compile_every_variant("sm_90").unwrap(), 1);
        let kernels = library.resources(UNIT, "sm_90", &[]).unwrap();
        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        for name in [
            "weft_gin_alltoall",
            "weft_gin_ring_allgather",
            "weft_gin_halo",
            "weft_gin_ping_pong",
            "weft_gin_put_stream",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        // Every kernel launches with blocks of COOP_BLOCK threads (the SM's 64 Ki registers) and
        // spills nothing; its only local memory is the Gin object (the handle and the proxy
        // ordering state: 144 + 8 * GIN_MAX_RANKS bytes), which the puts' hot path reads from L1.
        let frame = 144 + 8 * weft_types::GIN_MAX_RANKS as u32;
        for k in kernels.iter().filter(|k| k.name.starts_with("weft_gin_")) {
            assert!(k.registers * crate::examples::COOP_BLOCK <= 65536, "{k:?}");
            assert!(k.spill_store_bytes == 0 && k.stack_frame_bytes <= frame, "{k:?}");
        }
    }
}

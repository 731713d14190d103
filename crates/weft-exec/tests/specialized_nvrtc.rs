//! NVRTC compiles the specialized executor kernel (a rank's operations compiled in) for sm_90,
//! without a GPU, for shipped plans that between them use every kind of operation: packets,
//! waits for other thread blocks and plan barriers, staged inputs, port channels. (Every
//! shipped plan runs specialized in `weft selftest --only plan`; a compilation takes seconds.) When NVRTC is missing the test says so and passes,
//! unless `WEFT_REQUIRE_NVRTC=1` (scripts/test.sh).

use weft_core::{KernelLibrary, device_code};
use weft_exec::{lower, static_ops_defines};
use weft_plan::plans;
use weft_types::{DataType, ReduceOp};

fn library() -> Option<KernelLibrary> {
    if let Err(e) = weft_gpu::nvrtc_version() {
        assert!(std::env::var("WEFT_REQUIRE_NVRTC").as_deref() != Ok("1"), "NVRTC is required here: {e}");
        eprintln!("skipping: {e}");
        return None;
    }
    let dir = std::env::var_os("WEFT_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("weft-exec-nvrtc-test-{}", std::process::id())));
    Some(KernelLibrary::new(dir))
}

#[test]
fn shipped_plans_compile_specialized_for_one_rank() {
    let Some(library) = library() else { return };
    let programs =
        [plans::hierarchical_allreduce(4, 2, 1), plans::two_step_alltoall(4, 2, 1), plans::allpairs_allreduce_ll(4, 1)];
    let mut shipped: Vec<_> = programs.into_iter().map(|p| p.unwrap().compile().unwrap()).collect();
    shipped.push(plans::port_allpairs_allreduce(4).unwrap().compile().unwrap());
    for plan in shipped {
        let lowered = lower(&plan).unwrap();
        let mut defines = device_code::type_defines(DataType::Bf16, ReduceOp::Sum);
        defines.extend(static_ops_defines(&lowered, 1));
        let compiled = library
            .compile_with("executor.cu", "sm_90", &defines)
            .unwrap_or_else(|e| panic!("{} specialized for rank 1: {e}", plan.name));
        assert!(compiled.cubin.starts_with(b"\x7fELF"), "{} is not a CUBIN", plan.name);
    }
}

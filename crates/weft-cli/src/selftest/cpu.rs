//! The part of the suite that needs no GPU: NVRTC compiles every kernel, the specialized
//! executor kernels of the shipped plans and the layout probe for sm_90, ptxas's local-memory
//! report of the collective kernels stays within budget, and the bootstrap's collectives run
//! between threads.

use std::sync::Arc;

use weft_bootstrap::{Bootstrap, InProcessBootstrap};
use weft_coll::PlanId;
use weft_core::{Env, KernelLibrary, device_code};
use weft_types::{DataType, ReduceOp};

use super::report::RankReport;

/// Runs the CPU checks. `skipped` collects what could not run here, with the reason.
pub(crate) fn run(env: &Env, report: &mut RankReport, skipped: &mut Vec<String>) {
    match weft_gpu::nvrtc_version() {
        Ok(_) => {
            // Every crate's kernels, each compiled by a library of its own set.
            let tests = KernelLibrary::new(env.cache_dir.clone(), &device_code::TEST_KERNELS);
            let coll = KernelLibrary::new(env.cache_dir.clone(), &weft_coll::device_code::KERNELS);
            let exec = KernelLibrary::new(env.cache_dir.clone(), &weft_exec::device_code::KERNELS);
            let ep = KernelLibrary::new(env.cache_dir.clone(), &weft_ep::device_code::KERNELS);
            let gin = KernelLibrary::new(env.cache_dir.clone(), &weft_gin::device_code::KERNELS);
            let kernels: Vec<(&KernelLibrary, &str, Vec<Vec<String>>)> = [&tests, &coll, &exec, &ep, &gin]
                .into_iter()
                .flat_map(|l| l.kernels().units.iter().map(move |(name, _)| (l, *name, (l.kernels().variants)(name))))
                .collect();
            // Minutes on a small machine with a cold cache: a bar on a terminal, nothing otherwise.
            let bar = compile_bar(kernels.iter().map(|(_, _, v)| v.len() as u64).sum());
            for (library, name, variants) in &kernels {
                bar.set_message(name.to_string());
                let result = on_every_core(variants, |d| {
                    let compiled = library.compile_with(name, "sm_90", d).map(|_| ());
                    bar.inc(1);
                    compiled
                });
                report.record(format!("NVRTC compiles {name} for sm_90 ({} variants)", variants.len()), result);
            }
            bar.finish_and_clear();
            report.record(
                "layout probe: sizeof/offsetof of every weft-types struct under NVRTC",
                tests.compile_layout_probe("sm_90"),
            );
            report.record(
                format!("collective kernels use at most {LOCAL_FRAME_BUDGET} bytes of local memory per thread (ptxas)"),
                local_memory_within_budget(&coll, &exec),
            );
            report.record(
                "NVRTC compiles the specialized executor kernel of every shipped plan specialized at 2 ranks",
                specialized_plans_compile(&exec),
            );
        }
        // A machine that must compile (CI sets WEFT_REQUIRE_NVRTC=1) fails instead of skipping.
        Err(e) if std::env::var("WEFT_REQUIRE_NVRTC").as_deref() == Ok("1") => {
            report.record("NVRTC compile checks (WEFT_REQUIRE_NVRTC=1)", Err(e.to_string()))
        }
        Err(e) => skipped.push(format!("NVRTC compile checks: {e} (run scripts/cuda-wheels.sh or set WEFT_CUDA_HOME)")),
    }
    report.record("in-process bootstrap: all_gather, broadcast, barrier over 4 threads", bootstrap_smoke(4));
}

/// Most local memory (ptxas's stack frame) a collective kernel may use per thread. The HB
/// kernels run 1024-thread blocks on every SM, so every thread of the grid pays for its frame:
/// a store functor with run-time-indexed pointer arrays once grew the HB AllReduce's frame to
/// 656 bytes (104 spilled) and made it 45% slower at 4 MB on a 4×H200 machine. The kernels as
/// measured fast use at most 256 bytes in every type.
const LOCAL_FRAME_BUDGET: u32 = 320;

/// Compiles the collective kernels for the type variants that differ most (a one-byte integer,
/// bf16, f64, FP8 with a wider accumulator; sum), the plan executor (1024-thread blocks on every
/// SM too) for the first three, and the movement kernels, and fails naming every kernel whose
/// frame is over [`LOCAL_FRAME_BUDGET`]. `coll` and `exec`: libraries of weft-coll's and
/// weft-exec's kernels.
fn local_memory_within_budget(coll: &KernelLibrary, exec: &KernelLibrary) -> Result<(), String> {
    use rayon::prelude::*;
    use weft_coll::device_code::{MOVEMENT, REDUCTIONS};
    let types = [DataType::I8, DataType::Bf16, DataType::F64, DataType::F8E4M3];
    let mut programs: Vec<(&KernelLibrary, &str, Vec<String>)> =
        types.into_iter().map(|t| (coll, REDUCTIONS, device_code::type_defines(t, ReduceOp::Sum))).collect();
    programs.extend(
        types[..3]
            .iter()
            .map(|&t| (exec, weft_exec::device_code::EXECUTOR, device_code::type_defines(t, ReduceOp::Sum))),
    );
    programs.push((coll, MOVEMENT, Vec::new()));
    let reports: Vec<_> =
        programs.par_iter().map(|(library, name, defines)| library.resources(name, "sm_90", defines)).collect();
    let mut over = Vec::new();
    for ((_, name, defines), report) in programs.iter().zip(reports) {
        for kernel in report.map_err(|e| e.to_string())? {
            if kernel.stack_frame_bytes > LOCAL_FRAME_BUDGET {
                over.push(format!(
                    "{name} [{}] {}: {} bytes ({} spilled)",
                    defines.join(" "),
                    kernel.name,
                    kernel.stack_frame_bytes,
                    kernel.spill_store_bytes
                ));
            }
        }
    }
    if over.is_empty() { Ok(()) } else { Err(format!("over the local-memory budget: {}", over.join("; "))) }
}

/// Runs `f` on every item, spread over the machine's cores (NVRTC compiles independent
/// programs concurrently; a cold kernel cache is minutes of single-core work otherwise), and
/// returns the first error in item order.
/// A progress bar over `total` kernel compilations on stderr, drawn only when stderr is a
/// terminal.
fn compile_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("NVRTC {wide_bar} {pos}/{len} kernels ({msg}, eta {eta})")
    {
        bar.set_style(style);
    }
    bar
}

fn on_every_core<T: Sync, E: Send>(items: &[T], f: impl Fn(&T) -> Result<(), E> + Sync + Send) -> Result<(), E> {
    use rayon::prelude::*;
    // An ordered collect keeps "first error" meaning first in item order.
    let results: Vec<Result<(), E>> = items.par_iter().map(f).collect();
    results.into_iter().collect()
}

fn bootstrap_smoke(ranks: usize) -> Result<(), String> {
    let group = InProcessBootstrap::group(ranks).map_err(|e| e.to_string())?;
    let handles: Vec<_> = group
        .into_iter()
        .map(|b| {
            let b = Arc::new(b);
            std::thread::spawn(move || -> Result<(), String> {
                let me = b.rank();
                let all = b.all_gather(&[me as u8; 3]).map_err(|e| e.to_string())?;
                if all.iter().enumerate().any(|(r, v)| *v != vec![r as u8; 3]) {
                    return Err(format!("rank {me}: all_gather returned {all:?}"));
                }
                let root = b.broadcast(ranks - 1, Some(b"root")).map_err(|e| e.to_string())?;
                if root != b"root" {
                    return Err(format!("rank {me}: broadcast returned {root:?}"));
                }
                b.barrier().map_err(|e| e.to_string())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a bootstrap thread panicked".to_string())??;
    }
    Ok(())
}

/// Compiles, for 2 ranks, the specialized executor kernel (operations compiled in, bf16 sum) of
/// rank 0 of every shipped plan whose ranks all get one: the kernels a plan launch builds on
/// first use, checked without a GPU. `library`: a library of weft-exec's kernels.
fn specialized_plans_compile(library: &KernelLibrary) -> Result<(), String> {
    let ranks = 2;
    let mut programs = Vec::new();
    for id in PlanId::all().filter(|id| id.specializes_on_every_rank(ranks)) {
        let plan = id.plan(ranks, 0)?;
        let lowered = weft_exec::lower(&plan).map_err(|e| e.to_string())?;
        let mut defines = device_code::type_defines(DataType::Bf16, ReduceOp::Sum);
        defines.extend(weft_exec::static_ops_defines(&lowered, 0));
        programs.push((plan.name.clone(), defines));
    }
    if programs.is_empty() {
        return Err("no shipped plan is specialized at 2 ranks".into());
    }
    on_every_core(&programs, |(name, defines)| {
        library
            .compile_with(weft_exec::device_code::EXECUTOR, "sm_90", defines)
            .map(|_| ())
            .map_err(|e| format!("{name}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_and_the_first_error_in_order_wins() {
        let seen = std::sync::Mutex::new(Vec::new());
        let items: Vec<u32> = (0..100).collect();
        let r = on_every_core(&items, |&i| {
            seen.lock().unwrap().push(i);
            if i % 40 == 39 { Err(i) } else { Ok(()) }
        });
        assert_eq!(r, Err(39));
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, items);
        assert_eq!(on_every_core(&[] as &[u32], |_| Err::<(), ()>(())), Ok(()));
    }
}

//! The part of the suite that needs no GPU: NVRTC compiles every kernel and the layout probe for
//! sm_90, and the bootstrap's collectives run between threads.

use std::sync::Arc;

use weft_bootstrap::{Bootstrap, InProcessBootstrap};
use weft_core::{Env, KernelLibrary, device_code};

use super::report::RankReport;

/// Runs the CPU checks. `skipped` collects what could not run here, with the reason.
pub(crate) fn run(env: &Env, report: &mut RankReport, skipped: &mut Vec<String>) {
    match weft_gpu::nvrtc_version() {
        Ok(_) => {
            let library = KernelLibrary::new(env.cache_dir.clone());
            for (name, _) in device_code::KERNELS {
                let variants = device_code::variants(name);
                let result = variants.iter().try_for_each(|d| library.compile_with(name, "sm_90", d).map(|_| ()));
                report.record(format!("NVRTC compiles {name} for sm_90 ({} variants)", variants.len()), result);
            }
            report.record(
                "layout probe: sizeof/offsetof of every weft-types struct under NVRTC",
                library.compile_layout_probe("sm_90"),
            );
        }
        Err(e) => skipped.push(format!("NVRTC compile checks: {e}")),
    }
    report.record("in-process bootstrap: all_gather, broadcast, barrier over 4 threads", bootstrap_smoke(4));
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

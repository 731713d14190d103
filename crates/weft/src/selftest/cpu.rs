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
                let result = on_every_core(&variants, |d| library.compile_with(name, "sm_90", d).map(|_| ()));
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

/// Runs `f` on every item, spread over the machine's cores (NVRTC compiles independent
/// programs concurrently; a cold kernel cache is minutes of single-core work otherwise), and
/// returns the first error in item order.
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

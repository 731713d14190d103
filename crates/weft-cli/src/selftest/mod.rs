//! `weft selftest`: the GPU suite.
//!
//! With GPUs it runs the suite twice by default: once with one process per GPU (the ranks meet
//! over the TCP bootstrap, memory crosses processes as POSIX file descriptors) and once with one
//! process driving every GPU from threads (in-process bootstrap, peer pointers). It prints every
//! test, the per-pair latency and bandwidth, then `N passed, M failed`. Without a GPU it says so,
//! runs the CPU part (NVRTC compiles and layout probe, bootstrap) and exits 0 unless that fails
//! (a step named with `--only` is then listed as skipped). The `multinode` step runs only when
//! named: it launches its own rank counts (one per layout of virtual nodes).

mod collectives;
mod cpu;
mod direct;
mod ep;
mod gin;
mod mismatch;
mod multinode;
mod port;
mod reduce_check;
mod report;
mod suite;
mod tcp;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_core::{Env, KernelLibrary};
use weft_gpu::Device;

use crate::harness::launch;
pub use crate::harness::launch::Mode;

pub use report::{Metric, Outcome, RankReport, Summary};

/// A group of tests `--only` can select.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Step {
    /// Semaphore ping-pong (latency).
    Semaphore,
    /// HB put/get correctness.
    Hb,
    /// Put bandwidth.
    Bandwidth,
    /// LL8/LL16 round trips, eager and in CUDA graphs.
    Ll,
    /// The deliberate timeout.
    Timeout,
    /// Reduction helpers.
    Reduce,
    /// The collective matrix: every collective, native algorithm, type and operator.
    Coll,
    /// The same matrix for every execution plan of the registry (`plan:<name>`), run by the
    /// plan executor.
    Plan,
    /// PortChannels through the proxy and the copy engine.
    Port,
    /// The TCP transport with device memory (each rank on its own GPU, over loopback).
    Tcp,
    /// MoE expert parallelism: weft-ep's normal-mode layout, dispatch (with and without a
    /// cached handle) and combine against its CPU model.
    Ep,
    /// The GIN examples (AllToAll, ring AllGather, halo exchange) within one node (LSA) and
    /// across virtual nodes (the proxy over TCP and the emulated NIC), eager and in graphs.
    Gin,
    /// The AllReduces that cross nodes (`nvrar`, `2ph`, the NVRAR and 2PH plans, `port_ring`, `port_allpairs`) at
    /// 2 nodes x 1 and x 2 ranks and 4 nodes x 1 (virtual nodes, the emulated NIC in chaos
    /// mode): the collective matrix at 2 and 4 ranks (or `--ranks`), ranks sharing GPUs in the
    /// thread mode where there are fewer. Runs only when named.
    Multinode,
}

impl Step {
    const ALL: [Step; 13] = [
        Step::Semaphore,
        Step::Hb,
        Step::Bandwidth,
        Step::Ll,
        Step::Timeout,
        Step::Reduce,
        Step::Coll,
        Step::Plan,
        Step::Port,
        Step::Tcp,
        Step::Ep,
        Step::Gin,
        Step::Multinode,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::Semaphore => "semaphore",
            Step::Hb => "hb",
            Step::Bandwidth => "bandwidth",
            Step::Ll => "ll",
            Step::Timeout => "timeout",
            Step::Reduce => "reduce",
            Step::Coll => "coll",
            Step::Plan => "plan",
            Step::Port => "port",
            Step::Tcp => "tcp",
            Step::Ep => "ep",
            Step::Gin => "gin",
            Step::Multinode => "multinode",
        }
    }

    /// Whether it runs only when `--only` names it (it launches rank counts of its own).
    fn only_when_named(self) -> bool {
        self == Step::Multinode
    }

    /// Parses the comma list workers receive in `WEFT_SELFTEST_ONLY`.
    fn parse_list(list: &str) -> Result<Vec<Step>, String> {
        list.split(',')
            .filter(|s| !s.is_empty())
            .map(|name| {
                Self::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| format!("unknown step {name:?}"))
            })
            .collect()
    }
}

/// Options of `weft selftest`.
#[derive(Clone, Debug)]
pub struct SelftestOptions {
    /// GPUs to use (all visible when `None`).
    pub gpus: Option<usize>,
    /// Process layout.
    pub mode: Mode,
    /// Steps to run (every step when empty).
    pub only: Vec<Step>,
    /// Ranks, on the GPUs round-robin (`None`: one per GPU).
    pub ranks: Option<usize>,
}

const WORKER_ONLY: &str = "WEFT_SELFTEST_ONLY";
/// GPUs the worker processes are spread over.
const WORKER_GPUS: &str = "WEFT_SELFTEST_GPUS";
/// Bound of a whole multi-process run; children still running then are killed.
const PROCESS_DEADLINE: Duration = Duration::from_secs(900);

type BoxError = Box<dyn std::error::Error>;

/// Runs the suite and prints the summary; the exit code says whether everything passed.
pub fn run(options: &SelftestOptions) -> Result<ExitCode, BoxError> {
    let env = Env::from_process()?;
    let mut cpu_report = RankReport::default();
    let mut skipped = Vec::new();
    cpu::run(&env, &mut cpu_report, &mut skipped);
    let mut summary = Summary::merge(&[cpu_report]);
    summary.skipped = skipped;

    let available = match Device::count() {
        Ok(n) => n,
        Err(e) => {
            println!("no GPU: {e}");
            0
        }
    };
    if available == 0 {
        println!(
            "No GPU is available here: ran only the CPU part of the suite (NVRTC compile checks, layout probe, bootstrap)."
        );
        summary.skipped.extend(options.only.iter().map(|s| format!("step {}: needs a GPU, not run", s.name())));
        return Ok(finish(&summary));
    }
    let gpus = options.gpus.unwrap_or(available);
    if gpus == 0 || gpus > available {
        return Err(format!("--gpus {gpus}: this machine has {available} GPU(s)").into());
    }
    let device = Device::new(0)?;
    let started = Instant::now();
    let compiled = KernelLibrary::new(env.cache_dir.clone(), &weft_core::device_code::TEST_KERNELS)
        .compile("selftest.cu", &device.arch()?)?;
    println!(
        "selftest kernels for {}: {} in {:.1} ms",
        device.arch()?,
        if compiled.from_cache { "read from the cache" } else { "compiled" },
        started.elapsed().as_secs_f64() * 1e3
    );
    drop(device);
    let ranks = options.ranks.unwrap_or(gpus);
    if ranks == 0 {
        return Err("--ranks 0: the suite needs at least one rank".into());
    }
    let named = |s: &Step| s.only_when_named();
    let multinode = options.only.contains(&Step::Multinode);
    let suite_steps: Vec<Step> = options.only.iter().copied().filter(|s| !named(s)).collect();
    if !options.only.is_empty() && suite_steps.is_empty() {
        summary.extend(run_multinode(options, gpus, &env)?);
        return Ok(finish(&summary));
    }
    let options = &SelftestOptions { only: suite_steps, ..options.clone() };
    if matches!(options.mode, Mode::Processes | Mode::Both) {
        if ranks == gpus {
            println!("running the suite with one process per GPU on {gpus} GPU(s)...");
        } else {
            println!("running the suite with {ranks} processes on {gpus} GPU(s), placed round-robin...");
        }
        summary.extend(run_processes(ranks, gpus, &options.only)?);
    }
    if matches!(options.mode, Mode::Threads | Mode::Both) {
        let mut env = env.clone();
        if ranks > gpus {
            // Threads of one process run their kernels side by side on a shared GPU.
            env.share_gpus = true;
            println!(
                "running the suite with one process driving {ranks} ranks on {gpus} GPU(s) from threads (ranks share GPUs: checks hold, timings do not)..."
            );
        } else {
            println!("running the suite with one process driving {ranks} GPU(s) from threads...");
        }
        summary.extend(run_threads(ranks, gpus, &env, &options.only)?);
    }
    if multinode {
        summary.extend(run_multinode(options, gpus, &env)?);
    }
    Ok(finish(&summary))
}

/// The `multinode` step, at each rank count of its layouts (2 and 4, or `--ranks`) on at most
/// `gpus` GPUs, in the processes and threads of `options.mode`. Ranks sharing a GPU run as
/// threads of one process only: processes would time-slice it.
fn run_multinode(options: &SelftestOptions, gpus: usize, env: &Env) -> Result<Summary, BoxError> {
    let mut summary = Summary { skipped: multinode::left_out(options.ranks), ..Summary::default() };
    let only = [Step::Multinode];
    for ranks in multinode::rank_counts(options.ranks) {
        let gpus = gpus.min(ranks);
        if matches!(options.mode, Mode::Processes | Mode::Both) {
            if ranks > gpus {
                summary.skipped.push(format!(
                    "[processes] multinode at {ranks} ranks: {gpus} GPU(s), and ranks share a GPU only as threads of one process (--mode threads or both)"
                ));
            } else {
                println!("running the multinode step with {ranks} processes on {gpus} GPU(s)...");
                summary.extend(run_processes(ranks, gpus, &only)?);
            }
        }
        if matches!(options.mode, Mode::Threads | Mode::Both) {
            let mut env = env.clone();
            env.share_gpus |= ranks > gpus;
            println!(
                "running the multinode step with one process driving {ranks} ranks on {gpus} GPU(s) from threads..."
            );
            summary.extend(run_threads(ranks, gpus, &env, &only)?);
        }
    }
    Ok(summary)
}

fn finish(summary: &Summary) -> ExitCode {
    summary.print();
    if summary.counts().1 == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn steps(only: &[Step]) -> Vec<Step> {
    if only.is_empty() { Step::ALL.into_iter().filter(|s| !s.only_when_named()).collect() } else { only.to_vec() }
}

fn run_threads(ranks: usize, gpus: usize, env: &Env, only: &[Step]) -> Result<Summary, BoxError> {
    let (env, steps) = (env.clone(), steps(only));
    let outcomes = launch::run_rank_threads(ranks, "weft-rank", move |rank, bootstrap| {
        suite::run_rank(bootstrap, rank % gpus, &env, "[threads] ", &steps)
    })?;
    let reports: Vec<RankReport> = outcomes
        .into_iter()
        .enumerate()
        .map(|(rank, outcome)| {
            outcome.unwrap_or_else(|_| {
                let mut r = RankReport::default();
                r.record("[threads] rank thread finished", Err(format!("rank {rank} panicked")));
                r
            })
        })
        .collect();
    Ok(Summary::merge(&reports))
}

fn run_processes(ranks: usize, gpus: usize, only: &[Step]) -> Result<Summary, BoxError> {
    let only_list: Vec<&str> = steps(only).iter().map(|s| s.name()).collect();
    let envs = [(WORKER_ONLY, only_list.join(",")), (WORKER_GPUS, gpus.to_string())];
    let finished = launch::run_ranks(ranks, &["selftest-worker"], &envs, PROCESS_DEADLINE)?;
    let mut reports = Vec::new();
    for (rank, status) in finished.statuses.iter().enumerate() {
        let report = finished
            .report(rank)
            .and_then(|bytes| serde_json::from_slice::<RankReport>(&bytes).ok())
            .unwrap_or_else(|| {
                let mut r = RankReport::default();
                r.record(
                    format!("[processes] rank {rank} process reported"),
                    Err(format!("exited with {status} and no report")),
                );
                r
            });
        reports.push(report);
    }
    Ok(Summary::merge(&reports))
}

/// Entry point of one `selftest-worker` process (torchrun-style variables).
pub fn run_worker() -> Result<ExitCode, BoxError> {
    let env = Env::from_process()?;
    let torchrun = TorchrunEnv::from_env()?;
    // Round-robin over the GPUs the launcher used (more ranks than GPUs: see `--ranks`).
    let gpus: usize =
        std::env::var(WORKER_GPUS).ok().and_then(|v| v.parse().ok()).filter(|&g| g > 0).unwrap_or(usize::MAX);
    let ordinal = torchrun.local_rank.unwrap_or(torchrun.rank) % gpus;
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::builder().from_env()?);
    let only = Step::parse_list(&std::env::var(WORKER_ONLY).unwrap_or_default())?;
    let report = suite::run_rank(Arc::clone(&bootstrap), ordinal, &env, "[processes] ", &steps(&only));
    launch::write_report(torchrun.rank, &serde_json::to_vec(&report)?)?;
    Ok(ExitCode::SUCCESS)
}

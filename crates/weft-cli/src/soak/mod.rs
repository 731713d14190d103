//! `weft soak`: random collectives for a bounded time, every element of every call checked on
//! every rank. Each call is drawn from the seed ([`case`]): collective, count (odd ones
//! included), element type, operator, in or out of place, eager or captured in a CUDA graph
//! and replayed, and an algorithm forced at random through the selector. The ranks run as one
//! process per GPU or as threads of this process, and may share GPUs (`--ranks` more than
//! `--gpus`), as `weft selftest` lays them out. The run ends with one line ([`tally`]): calls,
//! bytes, wrong elements, the slowest call with the command that replays it alone, and the
//! seed; the exit code is nonzero on any wrong element or failed call. Without a GPU, the calls
//! that weft-plan's CPU reference interpreter can run run there instead, and the output says so
//! ([`cpu`]).

mod case;
mod cpu;
mod gpu;
mod tally;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_core::Env;
use weft_gpu::Device;

use crate::harness::launch;
use crate::harness::launch::Mode;
use tally::Tally;

/// Options of `weft soak`, as the workers receive them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoakOptions {
    /// Minutes to run for (the last call starts before they are up).
    pub minutes: f64,
    /// Seed of the calls (the same seed draws the same calls).
    pub seed: u64,
    /// Run only this call of the seed's sequence.
    pub only_call: Option<u64>,
    /// Largest buffer of a call, in bytes.
    pub max_bytes: usize,
}

/// The longest soak (a year): a deadline further out than a clock can add is a panic.
const MAX_MINUTES: f64 = 365.0 * 24.0 * 60.0;

impl SoakOptions {
    /// Refuses options no soak can run with.
    fn check(&self) -> Result<(), BoxError> {
        if !(self.minutes.is_finite() && (0.0..=MAX_MINUTES).contains(&self.minutes)) {
            return Err(format!("--minutes {}: give a number of minutes from 0 to {MAX_MINUTES}", self.minutes).into());
        }
        if self.max_bytes == 0 {
            return Err("--max-bytes: a call needs at least one byte".into());
        }
        Ok(())
    }

    /// How long to run (checked options: at most [`MAX_MINUTES`]).
    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.minutes.clamp(0.0, MAX_MINUTES) * 60.0)
    }
}

/// Where the ranks of `weft soak` run.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// GPUs to use (all visible when `None`).
    pub gpus: Option<usize>,
    /// Ranks, on the GPUs round-robin (`None`: one per GPU).
    pub ranks: Option<usize>,
    /// One process per rank, or threads of this process (`Both`: processes, then threads).
    pub mode: Mode,
}

/// The variable that hands a soak worker its options (JSON).
const WORKER_OPTIONS: &str = "WEFT_SOAK_OPTIONS";
/// GPUs the worker processes are spread over.
const WORKER_GPUS: &str = "WEFT_SOAK_GPUS";
/// How long the launcher waits past the soak's minutes (set-up, kernel compiles, the last
/// call) before it kills the workers as hung.
const GRACE: Duration = Duration::from_secs(600);

type BoxError = Box<dyn std::error::Error>;

/// Runs the soak and prints its summary; the exit code says whether every call was right.
pub fn run(options: &SoakOptions, layout: &Layout) -> Result<ExitCode, BoxError> {
    options.check()?;
    if layout.ranks == Some(0) {
        return Err("--ranks 0: a soak needs at least one rank".into());
    }
    let available = Device::count().unwrap_or(0);
    if available == 0 {
        return cpu::run(options, layout.ranks.unwrap_or(4));
    }
    let gpus = layout.gpus.unwrap_or(available);
    if gpus == 0 || gpus > available {
        return Err(format!("--gpus {gpus}: this machine has {available} GPU(s)").into());
    }
    let ranks = layout.ranks.unwrap_or(gpus);
    let what = match options.only_call {
        Some(k) => format!("call #{k} of seed {}", options.seed),
        None => format!("{} minutes of random calls, seed {}", options.minutes, options.seed),
    };
    let replay = tally::Replay { seed: options.seed, ranks, max_bytes: options.max_bytes };
    let mut passed = true;
    if matches!(layout.mode, Mode::Processes | Mode::Both) {
        println!("soak: {what}, {ranks} processes on {gpus} GPU(s){}", sharing(ranks, gpus));
        passed &= conclude(&run_processes(options, ranks, gpus)?, &replay);
    }
    if matches!(layout.mode, Mode::Threads | Mode::Both) {
        println!("soak: {what}, {ranks} ranks as threads on {gpus} GPU(s){}", sharing(ranks, gpus));
        passed &= conclude(&run_threads(options, ranks, gpus)?, &replay);
    }
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// How ranks share GPUs, for the opening line.
fn sharing(ranks: usize, gpus: usize) -> &'static str {
    if ranks > gpus { " (ranks share GPUs, WEFT_SHARE_GPUS=1: checks hold, timings do not)" } else { "" }
}

/// Prints every rank's failures and the summary line; whether the soak passed.
fn conclude(per_rank: &[Tally], replay: &tally::Replay) -> bool {
    let all = Tally::merge(per_rank);
    for f in all.failures.iter().take(20) {
        match f.index {
            Some(k) => {
                println!("FAIL call #{k} on rank {}: {}: {} (replay: {})", f.rank, f.case, f.detail, replay.command(k))
            }
            None => println!("FAIL rank {}, {}: {}", f.rank, f.case, f.detail),
        }
    }
    if all.failures.len() > 20 {
        println!("... and {} more failures", all.failures.len() - 20);
    }
    println!("{}", all.line(replay));
    all.passed()
}

fn run_threads(options: &SoakOptions, ranks: usize, gpus: usize) -> Result<Vec<Tally>, BoxError> {
    let mut env = Env::from_process()?;
    // Threads of one process run their kernels side by side on a shared GPU.
    env.share_gpus |= ranks > gpus;
    let options = options.clone();
    let outcomes = launch::run_rank_threads(ranks, "weft-soak", move |rank, bootstrap| {
        let mut progress = Progress::new();
        gpu::run_rank(bootstrap, rank % gpus, &env, &options, &mut progress)
    })?;
    Ok(outcomes
        .into_iter()
        .enumerate()
        .map(|(rank, outcome)| {
            let outcome = outcome.unwrap_or_else(|_| Err("the rank's thread panicked".to_string()));
            rank_tally(rank, outcome)
        })
        .collect())
}

fn run_processes(options: &SoakOptions, ranks: usize, gpus: usize) -> Result<Vec<Tally>, BoxError> {
    let mut envs = vec![(WORKER_OPTIONS, serde_json::to_string(options)?), (WORKER_GPUS, gpus.to_string())];
    if ranks > gpus {
        // Processes sharing a GPU: their kernels time-slice, and weft must know they share it.
        envs.push(("WEFT_SHARE_GPUS", "1".to_string()));
    }
    let finished = launch::run_ranks(ranks, &["soak-worker"], &envs, options.duration() + GRACE)?;
    Ok(finished
        .statuses
        .iter()
        .enumerate()
        .map(|(rank, status)| {
            let report = finished
                .report(rank)
                .and_then(|bytes| serde_json::from_slice::<Result<Tally, String>>(&bytes).ok())
                .unwrap_or_else(|| Err(format!("exited with {status} and no report")));
            rank_tally(rank, report)
        })
        .collect())
}

/// A rank's tally, or for a rank that failed outside any call, a tally of that failure alone.
fn rank_tally(rank: usize, outcome: Result<Tally, String>) -> Tally {
    outcome.unwrap_or_else(|detail| Tally {
        failures: vec![tally::Failure { rank, index: None, case: "outside any call".into(), detail }],
        ..Tally::default()
    })
}

/// Entry point of one `soak-worker` process (started by [`run`], torchrun-style variables).
pub fn run_worker() -> Result<ExitCode, BoxError> {
    let launch::Started::Launcher(torchrun) = launch::started_from_env()? else {
        return Err("this is one rank of `weft soak`, started by it: run `weft soak`".into());
    };
    let options: SoakOptions = serde_json::from_str(&std::env::var(WORKER_OPTIONS)?)?;
    let gpus: usize = std::env::var(WORKER_GPUS)?.parse()?;
    let result = worker(&options, &torchrun, gpus.max(1));
    launch::write_report(torchrun.rank, &serde_json::to_vec(&result)?)?;
    Ok(if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn worker(options: &SoakOptions, torchrun: &TorchrunEnv, gpus: usize) -> Result<Tally, String> {
    let env = Env::from_process().map_err(|e| e.to_string())?;
    let bootstrap: Arc<dyn Bootstrap> =
        Arc::new(TcpBootstrap::builder().from_env().map_err(|e| format!("bootstrap: {e}"))?);
    let ordinal = torchrun.local_rank.unwrap_or(torchrun.rank) % gpus;
    gpu::run_rank(bootstrap, ordinal, &env, options, &mut Progress::new())
}

/// Rank 0's progress: a line every [`Progress::EVERY`], so a long soak shows it is alive.
pub(crate) struct Progress {
    started: Instant,
    last: Instant,
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(60);

    fn new() -> Self {
        Self { started: Instant::now(), last: Instant::now() }
    }

    fn update(&mut self, tally: &Tally) {
        if self.last.elapsed() >= Self::EVERY {
            self.last = Instant::now();
            println!(
                "soak: {:.0} s: {} calls, {} wrong elements, {} failed calls so far",
                self.started.elapsed().as_secs_f64(),
                tally.calls,
                tally.wrong,
                tally.failures.len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_no_soak_can_run_with_are_refused_before_anything_runs() {
        let layout = Layout { gpus: None, ranks: Some(1), mode: Mode::Threads };
        let options = SoakOptions { minutes: 0.0, seed: 1, only_call: Some(0), max_bytes: 4096 };
        for minutes in [-1.0, f64::NAN, f64::INFINITY, MAX_MINUTES * 2.0, 1e300] {
            let error = run(&SoakOptions { minutes, ..options.clone() }, &layout).unwrap_err().to_string();
            assert!(error.starts_with("--minutes"), "{minutes}: {error}");
        }
        let error = run(&SoakOptions { max_bytes: 0, ..options.clone() }, &layout).unwrap_err().to_string();
        assert!(error.starts_with("--max-bytes"), "{error}");
        // With or without a GPU (the CPU backend ran one rank instead).
        let error = run(&options, &Layout { ranks: Some(0), ..layout }).unwrap_err().to_string();
        assert!(error.starts_with("--ranks 0"), "{error}");
        assert_eq!(SoakOptions { minutes: MAX_MINUTES, ..options }.duration().as_secs(), 365 * 24 * 3600);
    }
}

//! `weft bench`: nccl-tests-style tables of weft's collectives, with NCCL measured in the same
//! run (`--nccl`; every size warmed up, then timed in interleaved trials: the median and the
//! spread of each contender), every element checked against a float64 / exact-integer host
//! reference (`--check`), JSON (`--json`) and a PNG plot (`--plot`). One process per GPU,
//! launched by the command itself, or started by torchrun ([`run_torchrun`]: each process is the
//! rank torchrun made it, on GPU `LOCAL_RANK`, and rank 0 gathers the rows and reports); a
//! progress bar on stderr follows the sweep.

pub mod cpu;
pub mod ep;
pub mod ep_floor;
mod ep_report;
pub mod gin;
mod plot;
pub mod proxy;
mod report;
mod trace;
mod worker;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub use report::Line;

use serde::{Deserialize, Serialize};
use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_types::{DataType, ReduceOp};

use crate::harness::sweep::{by_name, sizes_between};
use crate::harness::trials::{DEFAULT_TRIALS, Timing};
use crate::harness::workers::{run_workers, worker_main};
use crate::harness::{Collective, launch, progress};

/// Options of `weft bench`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchOptions {
    /// The collective.
    pub collective: Collective,
    /// Smallest message in bytes.
    pub min_bytes: usize,
    /// Largest message in bytes.
    pub max_bytes: usize,
    /// Size multiplier between rows.
    pub factor: usize,
    /// Element type.
    #[serde(with = "by_name::dtype")]
    pub dtype: DataType,
    /// Operator.
    #[serde(with = "by_name::op")]
    pub op: ReduceOp,
    /// Time calls captured in a CUDA graph instead of eager launches.
    pub graph: bool,
    /// Check every element (out of place, in place, and graph replays with `--graph`), of NCCL's
    /// outputs too with `nccl`.
    pub check: bool,
    /// Measure NCCL in the same run.
    pub nccl: bool,
    /// Register weft's buffers as windows (`Collectives::register_window`), so eager calls
    /// write straight into the peers' buffers too.
    #[serde(default)]
    pub windows: bool,
    /// Also measure NCCL with its buffers from its `ncclMemAlloc` registered as symmetric
    /// windows (`ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)`: NCCL 2.28's symmetric
    /// kernels), in its own column.
    #[serde(default)]
    pub nccl_windows: bool,
    /// Time calls in place (nccl-tests' layout: the input inside the output, or the output
    /// inside the input) instead of out of place.
    #[serde(default)]
    pub in_place: bool,
    /// Also time (and with `check`, check) this weft algorithm of the collective in the same
    /// run, e.g. the native kernel a plan implements (`--versus ring` against
    /// `WEFT_ALGO_ALLREDUCE=plan:ring_allreduce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus: Option<String>,
    /// GPUs (default: all).
    pub gpus: usize,
    /// Ranks, when more than `gpus`: threads of one process sharing the GPUs round-robin
    /// (`WEFT_SHARE_GPUS`), to compare two algorithms of one run on fewer GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// Timed trials per size and contender, interleaved (see [`crate::harness::trials`]).
    #[serde(default = "default_trials")]
    pub trials: usize,
    /// Record the traced kernels and write a Chrome trace per row and weft contender here
    /// (`trace::traced_env`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<std::path::PathBuf>,
    /// Collectives across nodes: the parameters of `weft model calibrate` whose network the
    /// model column uses (`--model`; default: the emulated NIC's variables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<weft_model::params::ParamsFile>,
    /// The root of Broadcast and Reduce (weft's call, NCCL's and the reference); below the
    /// ranks ([`check_root`]).
    #[serde(default)]
    pub root: u32,
}

fn default_trials() -> usize {
    DEFAULT_TRIALS
}

impl BenchOptions {
    /// Ranks of the run: one per GPU unless `ranks` shares them.
    pub fn world(&self) -> usize {
        self.ranks.unwrap_or(self.gpus).max(self.gpus)
    }

    /// Whether ranks share GPUs (timings then compare algorithms of one run, nothing else).
    pub fn shares_gpus(&self) -> bool {
        self.world() > self.gpus
    }
}

/// What a row times: weft, and what it is measured against in the same run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// weft's call (`--windows`: on buffers in windows).
    Weft,
    /// NCCL's call (`--nccl`).
    Nccl,
    /// NCCL with its buffers in symmetric windows (`--nccl-windows`).
    NcclWindows,
    /// The `--versus` algorithm.
    Versus,
}

impl Contender {
    /// Every contender, in the order a row times them.
    pub const ALL: [Contender; 4] = [Contender::Weft, Contender::Nccl, Contender::NcclWindows, Contender::Versus];
}

/// One row, as one rank measured it. Times are µs per call: the median of the trials, with the
/// fastest and the slowest trial in the `_min_us` and `_max_us` fields.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Message bytes (nccl-tests' size: the larger of input and output).
    pub bytes: usize,
    /// Elements passed to the call (nccl-tests' count).
    pub count: usize,
    /// Algorithm weft used.
    pub algorithm: String,
    /// weft microseconds per call (the median trial, as every time of a row).
    pub weft_us: f64,
    /// Fastest weft trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weft_min_us: Option<f64>,
    /// Slowest weft trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weft_max_us: Option<f64>,
    /// NCCL microseconds per call.
    pub nccl_us: Option<f64>,
    /// Fastest NCCL trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_min_us: Option<f64>,
    /// Slowest NCCL trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_max_us: Option<f64>,
    /// NCCL microseconds per call with its buffers in symmetric windows (`--nccl-windows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_windows_us: Option<f64>,
    /// Fastest NCCL-with-windows trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_windows_min_us: Option<f64>,
    /// Slowest NCCL-with-windows trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_windows_max_us: Option<f64>,
    /// Wrong elements of NCCL's outputs with windows, when checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_windows_wrong: Option<u64>,
    /// Microseconds per call of the `versus` algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_us: Option<f64>,
    /// Fastest `versus` trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_min_us: Option<f64>,
    /// Slowest `versus` trial, µs per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_max_us: Option<f64>,
    /// The α-β model's microseconds per call, when the call crosses nodes (the emulated NIC's
    /// variables or `--model`'s network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_us: Option<f64>,
    /// Elements of weft's outputs that differ from the reference (all checked trials).
    pub wrong: u64,
    /// The same for NCCL's outputs, when checked (`--check --nccl`): a nonzero count means the
    /// reference or the harness is wrong, not weft. In place only where NCCL defines it (not its
    /// AllToAll and SendRecv groups, `harness::rank::nccl_launches`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_wrong: Option<u64>,
    /// Whether every rank got bitwise the same result (always true for collectives whose
    /// outputs differ between ranks).
    pub identical: bool,
}

impl Row {
    /// `contender`'s median and spread, if it was measured (a row without its min and max has
    /// a spread of zero).
    pub fn timing(&self, contender: Contender) -> Option<Timing> {
        let (median, min, max) = match contender {
            Contender::Weft => (Some(self.weft_us), self.weft_min_us, self.weft_max_us),
            Contender::Nccl => (self.nccl_us, self.nccl_min_us, self.nccl_max_us),
            Contender::NcclWindows => (self.nccl_windows_us, self.nccl_windows_min_us, self.nccl_windows_max_us),
            Contender::Versus => (self.versus_us, self.versus_min_us, self.versus_max_us),
        };
        median.map(|median| Timing { median, min: min.unwrap_or(median), max: max.unwrap_or(median) })
    }

    /// Records `contender`'s median and spread.
    pub fn set_timing(&mut self, contender: Contender, t: Timing) {
        let (median, spread) = (Some(t.median), (Some(t.min), Some(t.max)));
        match contender {
            Contender::Weft => (self.weft_us, (self.weft_min_us, self.weft_max_us)) = (t.median, spread),
            Contender::Nccl => (self.nccl_us, (self.nccl_min_us, self.nccl_max_us)) = (median, spread),
            Contender::NcclWindows => {
                (self.nccl_windows_us, (self.nccl_windows_min_us, self.nccl_windows_max_us)) = (median, spread)
            }
            Contender::Versus => (self.versus_us, (self.versus_min_us, self.versus_max_us)) = (median, spread),
        }
    }
}

const WORKER_OPTIONS: &str = "WEFT_BENCH_OPTIONS";

/// Refuses a root that is no rank of a run of `ranks` ranks.
pub fn check_root(root: u32, ranks: usize) -> Result<(), String> {
    if (root as usize) < ranks {
        Ok(())
    } else {
        Err(format!("--root {root}: the root is a rank, from 0 to {} on {ranks} ranks", ranks.saturating_sub(1)))
    }
}

/// The message sizes of a sweep.
pub fn sizes(options: &BenchOptions) -> Vec<usize> {
    sizes_between(options.min_bytes, options.max_bytes, options.factor)
}

/// Runs the benchmark on `options.gpus` processes (or, when ranks share GPUs, on threads of this
/// process), prints the table and writes the JSON and PNG files asked for.
pub fn run(
    options: &BenchOptions,
    json: Option<&Path>,
    plot: Option<&Path>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    check_root(options.root, options.world())?;
    let mut envs = vec![(WORKER_OPTIONS, serde_json::to_string(options)?)];
    let network = nccl_on_network(options, |k| std::env::var(k).ok());
    if let Some(vars) = &network {
        envs.extend(vars.iter().map(|&(k, v)| (k, v.to_string())));
    }
    let per_rank: Vec<Vec<Row>> = if options.shares_gpus() {
        if options.nccl {
            return Err("--nccl needs a GPU per rank: NCCL refuses ranks that share a GPU".into());
        }
        println!(
            "# {} ranks share {} GPU(s) as threads of one process (WEFT_SHARE_GPUS): compare the algorithms of this run with each other, not with other machines",
            options.world(),
            options.gpus
        );
        worker::run_threads(options, options.world())?
    } else {
        run_workers(options.gpus, "bench-worker", &envs, &sizes(options), Duration::from_secs(3600))?
    };
    if let Some(vars) = &network {
        println!(
            "# virtual nodes (WEFT_RANKS_PER_NODE): NCCL ran on its network transport ({}), as weft's nodes talk over a network",
            vars.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        );
    }
    report(options, &per_rank, json, plot)
}

/// Runs this process as one rank of a job torchrun started (`torchrun`: its variables), on GPU
/// `LOCAL_RANK`, with `options` from its own command line (`gpus`: the world size): the rows go
/// to rank 0, which alone draws the progress bar, prints the table and writes the JSON and PNG
/// files; every rank exits with the job's verdict.
pub fn run_torchrun(
    options: &BenchOptions,
    torchrun: &TorchrunEnv,
    json: Option<&Path>,
    plot: Option<&Path>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    check_root(options.root, torchrun.world_size)?;
    let lead = torchrun.rank == 0;
    if let Some(vars) = nccl_on_network(options, |k| std::env::var(k).ok()).filter(|_| lead) {
        println!(
            "# virtual nodes (WEFT_RANKS_PER_NODE): under torchrun, set {} yourself to put NCCL on the network weft's nodes use",
            vars.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        );
    }
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::builder().from_env()?);
    let bar = lead.then(|| progress::Bar::new(&sizes(options)));
    let mut done = 0;
    let rows = worker::run_on(options, Arc::clone(&bootstrap), torchrun, &mut |_| {
        done += 1;
        bar.iter().for_each(|b| b.show(done));
    });
    if let Some(bar) = bar {
        bar.finish();
    }
    launch::conclude(&*bootstrap, rows.map_err(|e| e.to_string()), |per_rank| report(options, &per_rank, json, plot))
}

/// Merges every rank's rows, prints the table and writes the JSON and PNG files asked for;
/// fails when an element was wrong or the ranks' results differed.
fn report(
    options: &BenchOptions,
    per_rank: &[Vec<Row>],
    json: Option<&Path>,
    plot: Option<&Path>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let lines = report::lines(options, &merge(per_rank));
    print!("{}", report::table(options, &lines)?);
    if let Some(path) = json {
        report::write_json(path, options, &lines)?;
    }
    if let Some(path) = plot {
        plot::render(path, &report::title(options), &lines)?;
    }
    let wrong: u64 = lines.iter().map(|l| l.row.wrong + l.row.nccl_wrong.unwrap_or(0)).sum();
    let differ = lines.iter().any(|l| !l.row.identical);
    Ok(if wrong == 0 && !differ { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The variables that put NCCL on its socket transport.
const NCCL_SOCKET_VARS: [(&str, &str); 3] =
    [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NET", "Socket")];

/// The variables that put NCCL on its InfiniBand transport (for weft's `WEFT_NET=ib`).
const NCCL_IB_VARS: [(&str, &str); 3] = [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NET", "IB")];

/// With virtual nodes (`WEFT_RANKS_PER_NODE`) and `--nccl`, NCCL would still use NVLink
/// between every pair, so the comparison needs it on the network weft's nodes use (sockets,
/// or InfiniBand under `WEFT_NET=ib`): the variables to give the workers, unless the user set
/// any of them (`var` reads the environment).
fn nccl_on_network(
    options: &BenchOptions,
    var: impl Fn(&str) -> Option<String>,
) -> Option<[(&'static str, &'static str); 3]> {
    let virtual_nodes = var("WEFT_RANKS_PER_NODE").is_some_and(|v| !v.trim().is_empty());
    let user_set = NCCL_SOCKET_VARS.iter().any(|(k, _)| var(k).is_some());
    let vars = if var("WEFT_NET").is_some_and(|v| v.trim() == "ib") { NCCL_IB_VARS } else { NCCL_SOCKET_VARS };
    (options.nccl && virtual_nodes && !user_set).then_some(vars)
}

/// Merges ranks' rows: the slowest rank's median, min and max of each contender, the total of
/// wrong elements, identical only if all agree.
fn merge(per_rank: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = per_rank.first() else { return Vec::new() };
    first
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut m = row.clone();
            for other in per_rank.iter().skip(1).filter_map(|rows| rows.get(i)) {
                for c in Contender::ALL {
                    let slowest = match (m.timing(c), other.timing(c)) {
                        (Some(a), Some(b)) => Some(a.slowest(b)),
                        (a, b) => a.or(b),
                    };
                    if let Some(t) = slowest {
                        m.set_timing(c, t);
                    }
                }
                m.wrong += other.wrong;
                let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                m.nccl_wrong = sum(m.nccl_wrong, other.nccl_wrong);
                m.nccl_windows_wrong = sum(m.nccl_windows_wrong, other.nccl_windows_wrong);
                m.identical &= other.identical;
            }
            m
        })
        .collect()
}

/// Entry of one `bench-worker` process.
pub fn run_worker() -> Result<ExitCode, Box<dyn std::error::Error>> {
    worker_main(WORKER_OPTIONS, |options, torchrun| {
        worker::run_on(options, Arc::new(TcpBootstrap::builder().from_env()?), torchrun, &mut progress::record)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_virtual_nodes_nccl_goes_on_weft_s_network_unless_the_user_chose() {
        let mut options = report::tests::options(Collective::AllReduce);
        options.nccl = true;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(name, _)| *name == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(nccl_on_network(&options, env(&[("WEFT_RANKS_PER_NODE", "2")])), Some(NCCL_SOCKET_VARS));
        assert_eq!(nccl_on_network(&options, env(&[])), None);
        assert_eq!(nccl_on_network(&options, env(&[("WEFT_RANKS_PER_NODE", " ")])), None);
        let ib = env(&[("WEFT_RANKS_PER_NODE", "2"), ("WEFT_NET", "ib")]);
        assert_eq!(nccl_on_network(&options, ib), Some(NCCL_IB_VARS));
        let chosen = env(&[("WEFT_RANKS_PER_NODE", "2"), ("NCCL_NET", "IB")]);
        assert_eq!(nccl_on_network(&options, chosen), None);
        options.nccl = false;
        assert_eq!(nccl_on_network(&options, env(&[("WEFT_RANKS_PER_NODE", "2")])), None);
    }

    #[test]
    fn a_sweep_s_sizes_go_from_the_smallest_to_the_largest() {
        let o = BenchOptions {
            collective: Collective::AllReduce,
            min_bytes: 1024,
            max_bytes: 8192,
            factor: 2,
            dtype: DataType::Bf16,
            op: ReduceOp::Sum,
            graph: false,
            check: false,
            nccl: false,
            windows: false,
            nccl_windows: false,
            in_place: false,
            versus: None,
            model: None,
            gpus: 2,
            ranks: None,
            trials: DEFAULT_TRIALS,
            trace: None,
            root: 0,
        };
        assert_eq!(sizes(&o), vec![1024, 2048, 4096, 8192]);
    }

    #[test]
    fn the_root_is_one_of_the_ranks() {
        assert!(check_root(0, 1).is_ok() && check_root(3, 4).is_ok());
        let e = check_root(4, 4).unwrap_err();
        assert!(e.contains("--root 4") && e.contains("0 to 3"), "{e}");
        // A run refuses it before starting anything.
        let mut options = report::tests::options(Collective::Broadcast);
        options.root = 4;
        assert!(run(&options, None, None).unwrap_err().to_string().contains("--root 4"));
    }

    /// Three ranks as threads, rank `r` measuring `1 + r` µs and `wrong[r]` wrong elements,
    /// concluding as under torchrun: every rank's exit code and rank 0's JSON document.
    fn conclude_rows(wrong: [u64; 3]) -> (Vec<ExitCode>, serde_json::Value) {
        let dir =
            std::env::temp_dir().join(format!("weft-conclude-{}-{}", std::process::id(), wrong.iter().sum::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("rows.json");
        let path = json.clone();
        let codes = launch::run_rank_threads(3, "conclude-rows", move |rank, bootstrap| {
            let mut options = report::tests::options(Collective::AllReduce);
            options.gpus = 3;
            let row = Row {
                bytes: 1024,
                count: 512,
                algorithm: "ring".into(),
                weft_us: 1.0 + rank as f64,
                wrong: wrong[rank],
                identical: true,
                ..Row::default()
            };
            launch::conclude(&*bootstrap, Ok(vec![row]), |per_rank| report(&options, &per_rank, Some(&path), None))
                .unwrap()
        })
        .unwrap();
        let doc = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        (codes.into_iter().map(|c| c.unwrap()).collect(), doc)
    }

    #[test]
    fn under_torchrun_rank_0_merges_every_rank_s_rows_and_all_exit_with_the_checks() {
        let (codes, doc) = conclude_rows([0, 0, 0]);
        assert_eq!(codes, vec![ExitCode::SUCCESS; 3]);
        assert_eq!((doc["rows"][0]["weft_us"].as_f64(), doc["rows"][0]["wrong"].as_u64()), (Some(3.0), Some(0)));
        assert_eq!(doc["rows"].as_array().map(Vec::len), Some(1));
        let (codes, doc) = conclude_rows([0, 0, 2]);
        assert_eq!(codes, vec![ExitCode::FAILURE; 3], "a wrong element on rank 2 fails every rank");
        assert_eq!(doc["rows"][0]["wrong"].as_u64(), Some(2));
    }

    #[test]
    fn merging_takes_the_slowest_rank_and_sums_errors() {
        let a = vec![Row {
            bytes: 8,
            weft_us: 1.0,
            nccl_us: Some(2.0),
            versus_us: Some(5.0),
            wrong: 1,
            identical: true,
            ..Row::default()
        }];
        let b = vec![Row {
            bytes: 8,
            weft_us: 3.0,
            nccl_us: Some(1.0),
            versus_us: Some(6.0),
            wrong: 2,
            nccl_wrong: Some(4),
            identical: false,
            ..Row::default()
        }];
        let m = merge(&[a, b]);
        assert_eq!(
            (m[0].weft_us, m[0].nccl_us, m[0].versus_us, m[0].wrong, m[0].nccl_wrong, m[0].identical),
            (3.0, Some(2.0), Some(6.0), 3, Some(4), false)
        );
    }

    #[test]
    fn merging_takes_each_rank_s_slowest_median_min_and_max() {
        let timed = |weft: Timing, nccl: Option<Timing>| {
            let mut row = Row { bytes: 8, identical: true, ..Row::default() };
            row.set_timing(Contender::Weft, weft);
            if let Some(t) = nccl {
                row.set_timing(Contender::Nccl, t);
            }
            vec![row]
        };
        let t = |median, min, max| Timing { median, min, max };
        let a = timed(t(4.0, 3.0, 9.0), Some(t(6.0, 5.0, 7.0)));
        let b = timed(t(5.0, 2.0, 6.0), None);
        let m = &merge(&[a, b])[0];
        assert_eq!(m.timing(Contender::Weft), Some(t(5.0, 3.0, 9.0)));
        assert_eq!(m.timing(Contender::Nccl), Some(t(6.0, 5.0, 7.0)), "a contender one rank lacks keeps the other's");
        assert_eq!((m.weft_us, m.weft_min_us, m.weft_max_us), (5.0, Some(3.0), Some(9.0)));
        assert_eq!(m.timing(Contender::Versus), None);
    }

    #[test]
    fn a_row_without_min_and_max_has_no_spread() {
        let row = Row { weft_us: 4.0, nccl_windows_us: Some(3.0), ..Row::default() };
        assert_eq!(row.timing(Contender::Weft), Some(Timing { median: 4.0, min: 4.0, max: 4.0 }));
        assert_eq!(row.timing(Contender::NcclWindows), Some(Timing { median: 3.0, min: 3.0, max: 3.0 }));
        assert_eq!(row.timing(Contender::Nccl), None);
    }
}

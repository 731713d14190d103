//! `weft bench`: nccl-tests-style tables of weft's collectives, with NCCL measured in the same
//! run (`--nccl`), every element checked against a float64 / exact-integer host reference
//! (`--check`), JSON (`--json`) and a PNG plot (`--plot`). One process per GPU, launched by the
//! command itself, or started by torchrun ([`run_torchrun`]: each process is the rank torchrun
//! made it, on GPU `LOCAL_RANK`, and rank 0 gathers the rows and reports); a progress bar on
//! stderr follows the sweep.

mod collective;
pub mod cpu;
pub(crate) mod data;
mod plot;
pub(crate) mod progress;
pub mod proxy;
mod report;
pub(crate) mod worker;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub use collective::{Collective, NcclTests, ROOT, Shape, Source};
pub use report::Line;

use serde::{Deserialize, Serialize};
use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_types::{DataType, ReduceOp};

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

/// One row, as one rank measured it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Message bytes (nccl-tests' size: the larger of input and output).
    pub bytes: usize,
    /// Elements passed to the call (nccl-tests' count).
    pub count: usize,
    /// Algorithm weft used.
    pub algorithm: String,
    /// weft microseconds per call.
    pub weft_us: f64,
    /// NCCL microseconds per call.
    pub nccl_us: Option<f64>,
    /// NCCL microseconds per call with its buffers in symmetric windows (`--nccl-windows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_windows_us: Option<f64>,
    /// Wrong elements of NCCL's outputs with windows, when checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_windows_wrong: Option<u64>,
    /// Microseconds per call of the `versus` algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_us: Option<f64>,
    /// The α-β model's microseconds per call, when the call crosses the emulated NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_us: Option<f64>,
    /// Elements of weft's outputs that differ from the reference (all checked trials).
    pub wrong: u64,
    /// The same for NCCL's outputs, when checked (`--check --nccl`): a nonzero count means the
    /// reference or the harness is wrong, not weft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_wrong: Option<u64>,
    /// Whether every rank got bitwise the same result (always true for collectives whose
    /// outputs differ between ranks).
    pub identical: bool,
}

/// Serde by name for the weft-types enums (which depend on nothing, serde included).
pub(crate) mod by_name {
    macro_rules! by_name {
        ($m:ident, $t:ty, $parse:path) => {
            pub(crate) mod $m {
                pub(crate) fn serialize<S: serde::Serializer>(v: &$t, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_str(v.name())
                }
                pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                    let name = <String as serde::Deserialize>::deserialize(d)?;
                    $parse(&name).map_err(serde::de::Error::custom)
                }
            }
        };
    }
    by_name!(dtype, weft_types::DataType, crate::bench::parse_dtype);
    by_name!(op, weft_types::ReduceOp, crate::bench::parse_op);
}

const WORKER_OPTIONS: &str = "WEFT_BENCH_OPTIONS";

/// The size units [`parse_size`] reads (any case), with their shifts: the one table its parser
/// and its error message are made from.
const SIZE_UNITS: [(&str, u32); 11] = [
    ("", 0),
    ("B", 0),
    ("K", 10),
    ("KB", 10),
    ("KiB", 10),
    ("M", 20),
    ("MB", 20),
    ("MiB", 20),
    ("G", 30),
    ("GB", 30),
    ("GiB", 30),
];

/// Parses `1K`, `64M`, `1G`, `512` into bytes (units of 1024: see [`SIZE_UNITS`]).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().map_err(|_| format!("size {s:?}: expected a whole number and a unit, e.g. 1K"))?;
    let Some(&(_, shift)) = SIZE_UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        let units: Vec<&str> = SIZE_UNITS.iter().map(|(u, _)| *u).filter(|u| !u.is_empty()).collect();
        return Err(format!("size {s:?}: unknown unit {unit:?} (one of {}, or none for bytes)", units.join(", ")));
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("size {s:?} overflows"))
}

/// Parses a sweep's `-b` and `-e`: both sizes, each error naming its flag, and the smallest no
/// larger than the largest.
pub fn parse_size_range(min: &str, max: &str) -> Result<(usize, usize), String> {
    let lo = parse_size(min).map_err(|e| format!("-b/--min-bytes: {e}"))?;
    let hi = parse_size(max).map_err(|e| format!("-e/--max-bytes: {e}"))?;
    if lo > hi {
        return Err(format!("-b {min} is larger than -e {max}: the sweep would have no size"));
    }
    Ok((lo, hi))
}

/// Formats bytes the way [`parse_size`] reads them: `1K`, `64M`, `1G`; one decimal when not a
/// whole unit (`1.5K`).
pub fn format_size(bytes: f64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        let v = bytes / f64::from(1u32 << shift);
        if v >= 1.0 {
            return if v.fract() == 0.0 { format!("{v}{unit}") } else { format!("{v:.1}{unit}") };
        }
    }
    format!("{bytes}")
}

/// Parses a data type name; the error lists every type.
pub fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = DataType::ALL.iter().map(|t| t.name()).collect();
        format!("unknown dtype {s:?} (one of {})", names.join(", "))
    })
}

/// Parses an operator name; the error lists every operator.
pub fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
        format!("unknown op {s:?} (one of {})", names.join(", "))
    })
}

/// The message sizes of a sweep.
pub fn sizes(options: &BenchOptions) -> Vec<usize> {
    sizes_between(options.min_bytes, options.max_bytes, options.factor)
}

/// `min`, `min × factor`, ... up to `max` (just `min` when the factor is below 2).
pub fn sizes_between(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        if factor <= 1 {
            break;
        }
        s = s.saturating_mul(factor);
    }
    out
}

/// Runs the benchmark on `options.gpus` processes (or, when ranks share GPUs, on threads of this
/// process), prints the table and writes the JSON and PNG files asked for.
pub fn run(
    options: &BenchOptions,
    json: Option<&Path>,
    plot: Option<&Path>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
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
    crate::launch::conclude(&*bootstrap, rows.map_err(|e| e.to_string()), |per_rank| {
        report(options, &per_rank, json, plot)
    })
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
    report::print_table(options, &lines);
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

/// Runs `worker` on `gpus` processes with the variables `envs` set (the options variable
/// among them), draws a bar over `items` (the byte sizes rank 0 records as it finishes them),
/// and returns every rank's report, in rank order: each worker writes `Result<T, String>` as
/// JSON.
pub(crate) fn run_workers<T: serde::de::DeserializeOwned>(
    gpus: usize,
    worker: &str,
    envs: &[(&str, String)],
    items: &[usize],
    deadline: Duration,
) -> Result<Vec<T>, Box<dyn std::error::Error>> {
    let mut bar = progress::Bar::new(items);
    let finished = crate::launch::run_ranks_watching(gpus, &[worker], envs, deadline, &mut |dir| bar.update(dir));
    bar.finish();
    let finished = finished?;
    let mut per_rank = Vec::new();
    for (rank, status) in finished.statuses.iter().enumerate() {
        let report = finished
            .report(rank)
            .and_then(|b| serde_json::from_slice::<Result<T, String>>(&b).ok())
            .ok_or_else(|| format!("rank {rank} exited with {status} and no report"))?
            .map_err(|e| format!("rank {rank}: {e}"))?;
        per_rank.push(report);
    }
    Ok(per_rank)
}

/// Merges ranks' rows: slowest rank's time, total wrong elements, identical only if all agree.
fn merge(per_rank: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = per_rank.first() else { return Vec::new() };
    first
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut m = row.clone();
            for other in per_rank.iter().skip(1).filter_map(|rows| rows.get(i)) {
                let slowest = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                m.weft_us = m.weft_us.max(other.weft_us);
                m.nccl_us = slowest(m.nccl_us, other.nccl_us);
                m.versus_us = slowest(m.versus_us, other.versus_us);
                m.nccl_windows_us = slowest(m.nccl_windows_us, other.nccl_windows_us);
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

/// The body of a worker process: reads its options (JSON) from the variable `options`, runs
/// `run` and writes `Result<T, String>` as the rank's report for [`run_workers`].
pub(crate) fn worker_main<O: serde::de::DeserializeOwned, T: Serialize>(
    options: &str,
    run: impl FnOnce(&O, &TorchrunEnv) -> Result<T, Box<dyn std::error::Error>>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let crate::launch::Started::Launcher(torchrun) = crate::launch::started_from_env()? else {
        return Err(
            "this is one rank of `weft bench`, started by it: run `weft bench` (alone, or under torchrun)".into()
        );
    };
    let options: O = serde_json::from_str(&std::env::var(options)?)?;
    let result = run(&options, &torchrun).map_err(|e| e.to_string());
    let failed = result.is_err();
    if let Err(e) = &result {
        eprintln!("rank {}: {e}", torchrun.rank);
    }
    crate::launch::write_report(torchrun.rank, &serde_json::to_vec(&result)?)?;
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
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
    fn sizes_parse_and_sweep() {
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("7").unwrap(), 7);
        assert!(parse_size("1Q").is_err());
        assert_eq!(parse_size("2gib").unwrap(), 2 << 30);
        let unit = parse_size_range("1X", "1G").unwrap_err();
        assert!(unit.starts_with("-b/--min-bytes") && unit.contains("\"X\"") && unit.contains("K, KB"), "{unit}");
        assert!(parse_size_range("1K", "x").unwrap_err().starts_with("-e/--max-bytes"));
        let inverted = parse_size_range("64K", "1K").unwrap_err();
        assert!(inverted.contains("-b 64K") && inverted.contains("-e 1K"), "{inverted}");
        assert_eq!(parse_size_range("1K", "1K").unwrap(), (1024, 1024));
        let dtype = parse_dtype("f17").unwrap_err();
        assert!(DataType::ALL.iter().all(|t| dtype.contains(t.name())), "{dtype}");
        let op = parse_op("xor").unwrap_err();
        assert!(ReduceOp::ALL.iter().all(|o| op.contains(o.name())), "{op}");
        for s in ["1K", "64M", "1G", "512"] {
            assert_eq!(format_size(parse_size(s).unwrap() as f64), s);
        }
        assert_eq!(format_size(1536.0), "1.5K");
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
            gpus: 2,
            ranks: None,
        };
        assert_eq!(sizes(&o), vec![1024, 2048, 4096, 8192]);
    }

    /// Three ranks as threads, rank `r` measuring `1 + r` µs and `wrong[r]` wrong elements,
    /// concluding as under torchrun: every rank's exit code and rank 0's JSON document.
    fn conclude_rows(wrong: [u64; 3]) -> (Vec<ExitCode>, serde_json::Value) {
        let dir =
            std::env::temp_dir().join(format!("weft-conclude-{}-{}", std::process::id(), wrong.iter().sum::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("rows.json");
        let path = json.clone();
        let codes = crate::launch::run_rank_threads(3, "conclude-rows", move |rank, bootstrap| {
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
            crate::launch::conclude(&*bootstrap, Ok(vec![row]), |per_rank| {
                report(&options, &per_rank, Some(&path), None)
            })
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
}

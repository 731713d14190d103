//! `weft bench`: nccl-tests-style tables of weft's collectives, with NCCL measured in the same
//! run (`--nccl`) and every element checked against a float64 / exact-integer host reference
//! (`--check`). One process per GPU, launched by the command itself.

mod data;
mod worker;

use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weft_types::{DataType, ReduceOp};

/// Options of `weft bench`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchOptions {
    /// Collective name (`allreduce`).
    pub collective: String,
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
    /// Check every element (out of place, in place, and graph replays with `--graph`).
    pub check: bool,
    /// Measure NCCL in the same run.
    pub nccl: bool,
    /// GPUs (default: all).
    pub gpus: usize,
}

/// One row, as one rank measured it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Message bytes.
    pub bytes: usize,
    /// Elements.
    pub count: usize,
    /// Algorithm weft used.
    pub algorithm: String,
    /// weft microseconds per call.
    pub weft_us: f64,
    /// NCCL microseconds per call.
    pub nccl_us: Option<f64>,
    /// Elements that differ from the reference (all checked trials).
    pub wrong: u64,
    /// Whether every rank got bitwise the same result.
    pub identical: bool,
}

/// Serde by name for the weft-types enums (which depend on nothing, serde included).
mod by_name {
    macro_rules! by_name {
        ($m:ident, $t:ty, $parse:path) => {
            pub(super) mod $m {
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

/// Parses `1K`, `64M`, `1G`, `512` into bytes.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().map_err(|_| format!("size {s:?}"))?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("size unit {unit:?}")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("size {s:?} overflows"))
}

/// Parses a data type name.
pub fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| format!("unknown dtype {s:?}"))
}

/// Parses an operator name.
pub fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| format!("unknown op {s:?}"))
}

/// The message sizes of a sweep.
pub fn sizes(options: &BenchOptions) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = options.min_bytes.max(1);
    while s <= options.max_bytes {
        out.push(s);
        if options.factor <= 1 {
            break;
        }
        s = s.saturating_mul(options.factor);
    }
    out
}

/// Runs the benchmark on `options.gpus` processes and prints the table.
pub fn run(options: &BenchOptions, json: Option<&std::path::Path>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if options.collective != "allreduce" {
        return Err(format!("weft bench {}: only allreduce is implemented so far", options.collective).into());
    }
    let encoded = serde_json::to_string(options)?;
    let finished = crate::launch::run_ranks(
        options.gpus,
        &["bench-worker"],
        &[(WORKER_OPTIONS, encoded)],
        Duration::from_secs(3600),
    )?;
    let mut per_rank: Vec<Vec<Row>> = Vec::new();
    for (rank, status) in finished.statuses.iter().enumerate() {
        let rows = finished
            .report(rank)
            .and_then(|b| serde_json::from_slice::<Result<Vec<Row>, String>>(&b).ok())
            .ok_or_else(|| format!("rank {rank} exited with {status} and no report"))?
            .map_err(|e| format!("rank {rank}: {e}"))?;
        per_rank.push(rows);
    }
    let rows = merge(&per_rank);
    print_table(options, &rows);
    if let Some(path) = json {
        let doc = serde_json::json!({ "options": options, "rows": rows });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
    }
    let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
    let differ = rows.iter().any(|r| !r.identical);
    Ok(if wrong == 0 && !differ { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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
                m.weft_us = m.weft_us.max(other.weft_us);
                m.nccl_us = match (m.nccl_us, other.nccl_us) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                m.wrong += other.wrong;
                m.identical &= other.identical;
            }
            m
        })
        .collect()
}

fn print_table(options: &BenchOptions, rows: &[Row]) {
    let n = options.gpus as f64;
    let bus = 2.0 * (n - 1.0) / n;
    println!(
        "# weft bench {} {} {} on {} GPUs, {} timing{}",
        options.collective,
        options.dtype.name(),
        options.op.name(),
        options.gpus,
        if options.graph { "CUDA-graph" } else { "eager" },
        if options.check { ", every element checked" } else { "" }
    );
    println!(
        "{:>12} {:>12} {:>4} | {:>10} {:>9} {:>9} {:>7} | {:>10} {:>9} | {:>6}",
        "size", "count", "algo", "weft us", "algbw", "busbw", "#wrong", "nccl us", "busbw", "ratio"
    );
    for r in rows {
        let algbw = r.bytes as f64 / r.weft_us / 1e3;
        let (nccl_us, nccl_bus, ratio) = match r.nccl_us {
            Some(t) => {
                (format!("{t:.2}"), format!("{:.2}", r.bytes as f64 / t / 1e3 * bus), format!("{:.2}", t / r.weft_us))
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        let wrong =
            if options.check { format!("{}{}", r.wrong, if r.identical { "" } else { "!" }) } else { "-".into() };
        println!(
            "{:>12} {:>12} {:>4} | {:>10.2} {:>9.2} {:>9.2} {:>7} | {:>10} {:>9} | {:>6}",
            r.bytes,
            r.count,
            r.algorithm,
            r.weft_us,
            algbw,
            algbw * bus,
            wrong,
            nccl_us,
            nccl_bus,
            ratio
        );
    }
    let ratios: Vec<f64> = rows.iter().filter_map(|r| r.nccl_us.map(|t| t / r.weft_us)).collect();
    if !ratios.is_empty() {
        let geomean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        println!("# geomean speedup over NCCL (time ratio nccl/weft): {geomean:.3}");
    }
    if options.check {
        let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
        println!("# {wrong} wrong elements; ranks bitwise identical: {}", rows.iter().all(|r| r.identical));
    }
}

/// Entry of one `bench-worker` process.
pub fn run_worker() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let options: BenchOptions = serde_json::from_str(&std::env::var(WORKER_OPTIONS)?)?;
    let torchrun = weft_bootstrap::TorchrunEnv::from_env()?;
    let result = worker::run(&options, &torchrun).map_err(|e| e.to_string());
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
    fn sizes_parse_and_sweep() {
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("7").unwrap(), 7);
        assert!(parse_size("1Q").is_err());
        let o = BenchOptions {
            collective: "allreduce".into(),
            min_bytes: 1024,
            max_bytes: 8192,
            factor: 2,
            dtype: DataType::Bf16,
            op: ReduceOp::Sum,
            graph: false,
            check: false,
            nccl: false,
            gpus: 2,
        };
        assert_eq!(sizes(&o), vec![1024, 2048, 4096, 8192]);
    }

    #[test]
    fn merging_takes_the_slowest_rank_and_sums_errors() {
        let a = vec![Row { bytes: 8, weft_us: 1.0, nccl_us: Some(2.0), wrong: 1, identical: true, ..Row::default() }];
        let b = vec![Row { bytes: 8, weft_us: 3.0, nccl_us: Some(1.0), wrong: 2, identical: false, ..Row::default() }];
        let m = merge(&[a, b]);
        assert_eq!((m[0].weft_us, m[0].nccl_us, m[0].wrong, m[0].identical), (3.0, Some(2.0), 3, false));
    }
}

//! The results of a sweep as a person reads them: merged rows with their bandwidths (one
//! computation shared by the table, the JSON file and the plot), the nccl-tests-style table,
//! and the JSON document.

use std::path::Path;

use serde::Serialize;

use super::{BenchOptions, Row};
use crate::harness::{Collective, NcclTests, ROOT};

/// One merged row with the numbers derived from it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Line {
    /// The measurements (slowest rank's times, every rank's wrong elements).
    #[serde(flatten)]
    pub row: Row,
    /// weft algorithm bandwidth, GB/s (bytes / time).
    pub algbw: f64,
    /// weft bus bandwidth, GB/s (algbw × the collective's nccl-tests factor).
    pub busbw: f64,
    /// NCCL algorithm bandwidth, GB/s.
    pub nccl_algbw: Option<f64>,
    /// NCCL bus bandwidth, GB/s.
    pub nccl_busbw: Option<f64>,
    /// NCCL time / weft time (above 1: weft is faster).
    pub ratio: Option<f64>,
    /// NCCL-with-windows time / weft time (`--nccl-windows`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_ratio: Option<f64>,
    /// weft time / the `versus` algorithm's time (above 1: the versus algorithm is faster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versus_ratio: Option<f64>,
}

/// GB/s of `bytes` moved in `us` microseconds.
fn gbps(bytes: usize, us: f64) -> f64 {
    bytes as f64 / us / 1e3
}

/// The lines of merged `rows`.
pub(super) fn lines(options: &BenchOptions, rows: &[Row]) -> Vec<Line> {
    let factor = options.collective.bus_factor(options.world());
    rows.iter()
        .map(|r| {
            let algbw = gbps(r.bytes, r.weft_us);
            let nccl_algbw = r.nccl_us.map(|t| gbps(r.bytes, t));
            Line {
                row: r.clone(),
                algbw,
                busbw: algbw * factor,
                nccl_algbw,
                nccl_busbw: nccl_algbw.map(|b| b * factor),
                ratio: r.nccl_us.map(|t| t / r.weft_us),
                windows_ratio: r.nccl_windows_us.map(|t| t / r.weft_us),
                versus_ratio: r.versus_us.map(|t| r.weft_us / t),
            }
        })
        .collect()
}

/// Geometric mean of the NCCL/weft time ratios, if NCCL was measured.
pub(super) fn geomean_ratio(lines: &[Line]) -> Option<f64> {
    geomean(lines.iter().filter_map(|l| l.ratio))
}

/// Geometric mean of `ratios`, if there are any.
fn geomean(ratios: impl Iterator<Item = f64>) -> Option<f64> {
    let ratios: Vec<f64> = ratios.collect();
    (!ratios.is_empty()).then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
}

/// One line describing the run (the table's header and the plot's title).
pub(super) fn title(options: &BenchOptions) -> String {
    let c = options.collective;
    let mut t = format!("weft bench {} {}", c.name(), options.dtype.name());
    if c.reduces() {
        t += &format!(" {}", options.op.name());
    }
    if matches!(c, Collective::Broadcast | Collective::Reduce) {
        t += &format!(" root {}", ROOT);
    }
    if options.shares_gpus() {
        t += &format!(" on {} ranks sharing {} GPU(s)", options.world(), options.gpus);
    } else {
        t += &format!(" on {} GPUs", options.gpus);
    }
    t += &format!(", {} timing", if options.graph { "CUDA-graph" } else { "eager" });
    if options.in_place {
        t += ", in place";
    }
    t
}

/// Prints the nccl-tests-style table.
pub(super) fn print_table(options: &BenchOptions, lines: &[Line]) {
    println!("# {}{}", title(options), if options.check { ", every element checked" } else { "" });
    println!(
        "{:>12} {:>12} {:>4} | {:>10} {:>9} {:>9} {:>7} | {:>10} {:>9} {:>7} | {:>6}",
        "size", "count", "algo", "weft us", "algbw", "busbw", "#wrong", "nccl us", "busbw", "#wrong", "ratio"
    );
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    for l in lines {
        let r = &l.row;
        let wrong =
            if options.check { format!("{}{}", r.wrong, if r.identical { "" } else { "!" }) } else { "-".into() };
        println!(
            "{:>12} {:>12} {:>4} | {:>10.2} {:>9.2} {:>9.2} {:>7} | {:>10} {:>9} {:>7} | {:>6}",
            r.bytes,
            r.count,
            r.algorithm,
            r.weft_us,
            l.algbw,
            l.busbw,
            wrong,
            opt(r.nccl_us),
            opt(l.nccl_busbw),
            r.nccl_wrong.map_or_else(|| "-".to_string(), |w| w.to_string()),
            opt(l.ratio)
        );
    }
    if let Some(g) = geomean_ratio(lines) {
        println!("# geomean speedup over NCCL (time ratio nccl/weft): {g:.3}");
    }
    if options.nccl_windows {
        print_nccl_windows(options, lines);
    }
    if let Some(versus) = &options.versus {
        print_versus(versus, lines);
    }
    if lines.iter().any(|l| l.row.model_us.is_some()) {
        print_model(lines);
    }
    if options.check {
        let wrong: u64 = lines.iter().map(|l| l.row.wrong).sum();
        let identical = lines.iter().all(|l| l.row.identical);
        if options.collective.same_output_everywhere() {
            println!("# {wrong} wrong elements; ranks bitwise identical: {identical}");
        } else {
            println!("# {wrong} wrong elements");
        }
        let nccl_wrong: u64 = lines.iter().filter_map(|l| l.row.nccl_wrong).sum();
        if nccl_wrong > 0 {
            println!("# NCCL: {nccl_wrong} wrong elements: the reference or the harness is wrong, not only weft");
        }
    }
}

/// Prints NCCL with its buffers in symmetric windows against weft, row by row.
fn print_nccl_windows(options: &BenchOptions, lines: &[Line]) {
    println!("# NCCL with symmetric windows (ncclMemAlloc + ncclCommWindowRegister) in the same run");
    println!("{:>12} {:>10} | {:>14} {:>7} | {:>6}", "size", "weft us", "nccl-win us", "#wrong", "ratio");
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    for l in lines {
        let r = &l.row;
        let wrong =
            if options.check { r.nccl_windows_wrong.map_or_else(|| "-".into(), |w| w.to_string()) } else { "-".into() };
        println!(
            "{:>12} {:>10.2} | {:>14} {:>7} | {:>6}",
            r.bytes,
            r.weft_us,
            opt(r.nccl_windows_us),
            wrong,
            opt(l.windows_ratio)
        );
    }
    if let Some(g) = geomean(lines.iter().filter_map(|l| l.windows_ratio)) {
        println!("# geomean speedup over NCCL with windows (time ratio nccl-win/weft): {g:.3}");
    }
}

/// Prints the weft algorithm against the `versus` one measured in the same run: both times,
/// the difference and the overhead (the executor's targets are stated in these terms).
fn print_versus(versus: &str, lines: &[Line]) {
    println!("# against {versus} in the same run");
    println!("{:>12} {:>24} {:>10} {:>10} {:>10} {:>9}", "size", "algo", "us", "versus us", "diff us", "overhead");
    for l in lines {
        let (r, Some(v), Some(ratio)) = (&l.row, l.row.versus_us, l.versus_ratio) else { continue };
        println!(
            "{:>12} {:>24} {:>10.2} {:>10.2} {:>10.2} {:>8.1}%",
            r.bytes,
            r.algorithm,
            r.weft_us,
            v,
            r.weft_us - v,
            (ratio - 1.0) * 100.0
        );
    }
}

/// Prints the measured time next to the α-β model of the emulated NIC the calls crossed.
fn print_model(lines: &[Line]) {
    println!("# against the α-β model of the emulated NIC (WEFT_EMU_NET_LATENCY_US, WEFT_EMU_NET_GBPS)");
    println!("{:>12} {:>10} {:>10} {:>11}", "size", "weft us", "model us", "weft/model");
    for l in lines {
        let Some(model) = l.row.model_us else { continue };
        println!("{:>12} {:>10.2} {:>10.2} {:>11.2}", l.row.bytes, l.row.weft_us, model, l.row.weft_us / model);
    }
}

/// Writes `{"options", "bus_factor", "rows"}` to `path`.
pub(super) fn write_json(path: &Path, options: &BenchOptions, lines: &[Line]) -> Result<(), String> {
    let doc = serde_json::json!({
        "options": options,
        "bus_factor": options.collective.bus_factor(options.world()),
        "rows": lines,
    });
    let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use weft_types::{DataType, ReduceOp};

    /// Options of a fake 4-GPU sweep.
    pub(crate) fn options(collective: Collective) -> BenchOptions {
        BenchOptions {
            collective,
            min_bytes: 1024,
            max_bytes: 1 << 30,
            factor: 4,
            dtype: DataType::Bf16,
            op: ReduceOp::Sum,
            graph: true,
            check: true,
            nccl: true,
            windows: false,
            nccl_windows: false,
            in_place: false,
            versus: None,
            gpus: 4,
            ranks: None,
        }
    }

    /// Fake merged rows: 1 KiB … 1 GiB, latency-bound then bandwidth-bound.
    pub(crate) fn rows() -> Vec<Row> {
        (0..11)
            .map(|i| {
                let bytes = 1024usize << (2 * i);
                let t = 5.0 + bytes as f64 / 300e3;
                Row {
                    bytes,
                    count: bytes / 2,
                    algorithm: "hb".into(),
                    weft_us: t,
                    nccl_us: Some(t * 1.2),
                    wrong: 0,
                    nccl_wrong: Some(0),
                    identical: true,
                    ..Row::default()
                }
            })
            .collect()
    }

    #[test]
    fn bandwidths_use_the_collective_factor() {
        let row = Row { bytes: 3_000_000, weft_us: 10.0, nccl_us: Some(20.0), ..Row::default() };
        let l = &lines(&options(Collective::AllGather), &[row])[0];
        assert_eq!(
            (l.algbw, l.busbw, l.nccl_algbw, l.nccl_busbw, l.ratio),
            (300.0, 225.0, Some(150.0), Some(112.5), Some(2.0))
        );
        assert!((geomean_ratio(&lines(&options(Collective::AllReduce), &rows())).unwrap() - 1.2).abs() < 1e-9);
    }

    #[test]
    fn the_versus_ratio_is_this_algorithm_over_the_other() {
        let row = Row { bytes: 1 << 20, weft_us: 10.5, versus_us: Some(10.0), ..Row::default() };
        let l = &lines(&options(Collective::AllReduce), &[row])[0];
        assert!((l.versus_ratio.unwrap() - 1.05).abs() < 1e-12);
        assert_eq!(lines(&options(Collective::AllReduce), &rows())[0].versus_ratio, None);
    }

    #[test]
    fn json_keeps_the_row_fields_and_adds_bandwidths() {
        let dir = std::env::temp_dir().join(format!("weft-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rows.json");
        let o = options(Collective::ReduceScatter);
        write_json(&path, &o, &lines(&o, &rows())).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["options"]["collective"], "reducescatter");
        assert_eq!(doc["bus_factor"], 0.75);
        let first = &doc["rows"][0];
        for key in ["bytes", "count", "algorithm", "weft_us", "nccl_us", "wrong", "identical", "busbw", "nccl_busbw"] {
            assert!(!first[key].is_null(), "{key} missing");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The results of a sweep as a person reads them: merged rows with their bandwidths (one
//! computation shared by the table, the JSON file and the plot), the nccl-tests-style table
//! (each time the median of the trials, next to their min-max), and the JSON document.

use std::fmt::{self, Write};
use std::path::Path;

use serde::Serialize;

use super::{BenchOptions, Contender, Row};
use crate::harness::NcclTests;
use crate::harness::trials::Timing;

/// One merged row with the numbers derived from it (from the median times).
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
    t += &c.at_root(options.root);
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

/// A value with two decimals, or `-`.
fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// The fastest and slowest trial of a timing as `min-max`, or `-`.
fn spread(t: Option<Timing>) -> String {
    t.map_or_else(|| "-".to_string(), |t| format!("{:.2}-{:.2}", t.min, t.max))
}

/// Width of a `min-max` column: room for two times of a second each.
const SPREAD: usize = 17;

/// The line that says how the times were measured.
pub(super) fn method(options: &BenchOptions) -> String {
    let batch = if options.graph { "3 replays of a CUDA graph of its calls" } else { "a batch of eager calls" };
    format!(
        "# every size: each contender warmed up, then timed in {} interleaved trials (the order reversed every \
         round), each trial {batch} after a barrier and a start line (an untimed one-element AllReduce; \
         WEFT_BENCH_START_LINE=0 leaves it out); us = median per call, min-max = fastest and slowest trial",
        options.trials
    )
}

/// The nccl-tests-style table, with the tables `--nccl-windows`, `--versus` and the emulated
/// NIC add, and the check's verdict.
pub(super) fn table(options: &BenchOptions, lines: &[Line]) -> Result<String, fmt::Error> {
    let mut text = String::new();
    let out = &mut text;
    writeln!(out, "# {}{}", title(options), if options.check { ", every element checked" } else { "" })?;
    writeln!(out, "{}", method(options))?;
    writeln!(
        out,
        "{:>12} {:>12} {:>4} | {:>10} {:>SPREAD$} {:>9} {:>9} {:>7} | {:>10} {:>SPREAD$} {:>9} {:>7} | {:>6}",
        "size",
        "count",
        "algo",
        "weft us",
        "min-max",
        "algbw",
        "busbw",
        "#wrong",
        "nccl us",
        "min-max",
        "busbw",
        "#wrong",
        "ratio"
    )?;
    for l in lines {
        let r = &l.row;
        let wrong =
            if options.check { format!("{}{}", r.wrong, if r.identical { "" } else { "!" }) } else { "-".into() };
        writeln!(
            out,
            "{:>12} {:>12} {:>4} | {:>10.2} {:>SPREAD$} {:>9.2} {:>9.2} {:>7} | {:>10} {:>SPREAD$} {:>9} {:>7} | {:>6}",
            r.bytes,
            r.count,
            r.algorithm,
            r.weft_us,
            spread(r.timing(Contender::Weft)),
            l.algbw,
            l.busbw,
            wrong,
            opt(r.nccl_us),
            spread(r.timing(Contender::Nccl)),
            opt(l.nccl_busbw),
            r.nccl_wrong.map_or_else(|| "-".to_string(), |w| w.to_string()),
            opt(l.ratio)
        )?;
    }
    if let Some(g) = geomean_ratio(lines) {
        writeln!(out, "# geomean speedup over NCCL (time ratio nccl/weft): {g:.3}")?;
    }
    if options.nccl_windows {
        nccl_windows_table(out, options, lines)?;
    }
    if let Some(versus) = &options.versus {
        versus_table(out, versus, lines)?;
    }
    if lines.iter().any(|l| l.row.model_us.is_some()) {
        model_table(out, options, lines)?;
    }
    if options.check {
        let wrong: u64 = lines.iter().map(|l| l.row.wrong).sum();
        let identical = lines.iter().all(|l| l.row.identical);
        if options.collective.same_output_everywhere() {
            writeln!(out, "# {wrong} wrong elements; ranks bitwise identical: {identical}")?;
        } else {
            writeln!(out, "# {wrong} wrong elements")?;
        }
        let nccl_wrong: u64 = lines.iter().filter_map(|l| l.row.nccl_wrong).sum();
        if nccl_wrong > 0 {
            writeln!(out, "# NCCL: {nccl_wrong} wrong elements: the reference or the harness is wrong, not only weft")?;
        }
    }
    Ok(text)
}

/// NCCL with its buffers in symmetric windows against weft, row by row.
fn nccl_windows_table(out: &mut String, options: &BenchOptions, lines: &[Line]) -> fmt::Result {
    writeln!(out, "# NCCL with symmetric windows (ncclMemAlloc + ncclCommWindowRegister) in the same run")?;
    writeln!(
        out,
        "{:>12} {:>10} | {:>14} {:>SPREAD$} {:>7} | {:>6}",
        "size", "weft us", "nccl-win us", "min-max", "#wrong", "ratio"
    )?;
    for l in lines {
        let r = &l.row;
        let wrong =
            if options.check { r.nccl_windows_wrong.map_or_else(|| "-".into(), |w| w.to_string()) } else { "-".into() };
        writeln!(
            out,
            "{:>12} {:>10.2} | {:>14} {:>SPREAD$} {:>7} | {:>6}",
            r.bytes,
            r.weft_us,
            opt(r.nccl_windows_us),
            spread(r.timing(Contender::NcclWindows)),
            wrong,
            opt(l.windows_ratio)
        )?;
    }
    if let Some(g) = geomean(lines.iter().filter_map(|l| l.windows_ratio)) {
        writeln!(out, "# geomean speedup over NCCL with windows (time ratio nccl-win/weft): {g:.3}")?;
    }
    Ok(())
}

/// The weft algorithm against the `versus` one measured in the same run: both times,
/// the difference and the overhead (the executor's targets are stated in these terms).
fn versus_table(out: &mut String, versus: &str, lines: &[Line]) -> fmt::Result {
    writeln!(out, "# against {versus} in the same run")?;
    writeln!(
        out,
        "{:>12} {:>24} {:>10} {:>SPREAD$} {:>10} {:>SPREAD$} {:>10} {:>9}",
        "size", "algo", "us", "min-max", "versus us", "min-max", "diff us", "overhead"
    )?;
    for l in lines {
        let (r, Some(v), Some(ratio)) = (&l.row, l.row.versus_us, l.versus_ratio) else { continue };
        writeln!(
            out,
            "{:>12} {:>24} {:>10.2} {:>SPREAD$} {:>10.2} {:>SPREAD$} {:>10.2} {:>8.1}%",
            r.bytes,
            r.algorithm,
            r.weft_us,
            spread(r.timing(Contender::Weft)),
            v,
            spread(r.timing(Contender::Versus)),
            r.weft_us - v,
            (ratio - 1.0) * 100.0
        )?;
    }
    Ok(())
}

/// The measured time next to the α-β model of the network the calls crossed.
fn model_table(out: &mut String, options: &BenchOptions, lines: &[Line]) -> fmt::Result {
    match &options.model {
        Some(file) => {
            let beta = file.net_gbps.map_or("uncapped".to_string(), |g| format!("{g:.1} GB/s"));
            let port = file.port_alpha_us.map_or(String::new(), |a| format!(", PortChannel α {a:.2} µs"));
            writeln!(
                out,
                "# against the α-β model of the calibrated network (--model: α {:.2} µs, β {beta}{port}, proxy {:.2} µs per put)",
                file.net_alpha_us, file.proxy_us
            )?
        }
        None => {
            writeln!(out, "# against the α-β model of the emulated NIC (WEFT_EMU_NET_LATENCY_US, WEFT_EMU_NET_GBPS)")?
        }
    }
    writeln!(out, "{:>12} {:>10} {:>10} {:>11}", "size", "weft us", "model us", "weft/model")?;
    for l in lines {
        let Some(model) = l.row.model_us else { continue };
        writeln!(out, "{:>12} {:>10.2} {:>10.2} {:>11.2}", l.row.bytes, l.row.weft_us, model, l.row.weft_us / model)?;
    }
    Ok(())
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
    use crate::harness::Collective;
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
            trace: None,
            in_place: false,
            versus: None,
            model: None,
            gpus: 4,
            ranks: None,
            trials: 7,
            root: 0,
        }
    }

    #[test]
    fn the_title_names_the_root_of_a_rooted_collective() {
        let mut o = options(Collective::Reduce);
        o.root = 2;
        assert!(title(&o).contains("reduce bf16 sum root 2 on 4 GPUs"), "{}", title(&o));
        o.collective = Collective::AllReduce;
        assert!(!title(&o).contains("root"), "{}", title(&o));
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

    /// `rows()` with trials spread ±5% around weft's median and ±10% around NCCL's.
    fn spread_rows() -> Vec<Row> {
        rows()
            .into_iter()
            .map(|mut r| {
                let spread =
                    |median: f64, by: f64| Timing { median, min: median * (1.0 - by), max: median * (1.0 + by) };
                r.set_timing(Contender::Weft, spread(r.weft_us, 0.05));
                r.set_timing(Contender::Nccl, spread(r.nccl_us.unwrap(), 0.1));
                r
            })
            .collect()
    }

    #[test]
    fn the_table_shows_each_median_with_its_min_max_in_aligned_columns() {
        let o = options(Collective::AllReduce);
        let mut rows = spread_rows();
        rows[0].set_timing(Contender::Weft, Timing { median: 3.82, min: 3.71, max: 4.1 });
        rows[0].set_timing(Contender::Nccl, Timing { median: 7.64, min: 6.5, max: 11.25 });
        let text = table(&o, &lines(&o, &rows)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("7 interleaved trials") && lines[1].contains("CUDA graph"), "{}", lines[1]);
        let header = lines[2];
        let first = lines[3];
        for column in ["weft us", "min-max", "nccl us", "ratio"] {
            assert!(header.contains(column), "{column} missing from {header}");
        }
        let cells: Vec<&str> = first.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "1024",
                "512",
                "hb",
                "|",
                "3.82",
                "3.71-4.10",
                "0.27",
                "0.40",
                "0",
                "|",
                "7.64",
                "6.50-11.25",
                "0.20",
                "0",
                "|",
                "2.00"
            ]
        );
        // nccl-tests-like alignment: every row puts its separators where the header does, the
        // 1 GB row (four-digit times) too.
        let bars = |line: &str| line.match_indices('|').map(|(i, _)| i).collect::<Vec<_>>();
        let rows_of_table = &lines[3..3 + rows.len()];
        assert!(rows_of_table.iter().all(|l| bars(l) == bars(header)), "misaligned:\n{text}");
        assert!(rows_of_table.last().unwrap().starts_with("  1073741824"));
        assert!(text.contains("# geomean speedup over NCCL (time ratio nccl/weft): "));
    }

    #[test]
    fn the_windows_and_versus_tables_show_their_spreads() {
        let mut o = options(Collective::AllReduce);
        o.nccl_windows = true;
        o.versus = Some("ring".into());
        o.graph = false;
        let mut rows = spread_rows();
        for r in &mut rows {
            r.set_timing(Contender::NcclWindows, Timing { median: 5.0, min: 4.5, max: 5.5 });
            r.set_timing(Contender::Versus, Timing { median: 6.0, min: 5.25, max: 6.75 });
        }
        let text = table(&o, &lines(&o, &rows)).unwrap();
        assert!(text.contains("a batch of eager calls"), "{text}");
        let windows = text.lines().skip_while(|l| !l.starts_with("# NCCL with symmetric windows")).nth(2).unwrap();
        assert!(windows.contains(" 5.00 ") && windows.contains(" 4.50-5.50 "), "{windows}");
        let versus = text.lines().skip_while(|l| !l.starts_with("# against ring")).nth(2).unwrap();
        assert!(versus.contains(" 4.75-5.25 ") && versus.contains(" 5.25-6.75 "), "{versus}");
    }

    #[test]
    fn json_rows_keep_the_median_fields_and_add_min_and_max() {
        let dir = std::env::temp_dir().join(format!("weft-json-spread-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rows.json");
        let o = options(Collective::AllReduce);
        let mut rows = spread_rows();
        rows[0].set_timing(Contender::Weft, Timing { median: 4.0, min: 3.5, max: 6.0 });
        write_json(&path, &o, &lines(&o, &rows)).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let first = &doc["rows"][0];
        assert_eq!(
            [&first["weft_us"], &first["weft_min_us"], &first["weft_max_us"]].map(|v| v.as_f64()),
            [Some(4.0), Some(3.5), Some(6.0)]
        );
        for key in ["nccl_us", "nccl_min_us", "nccl_max_us"] {
            assert!(first[key].is_f64(), "{key} missing");
        }
        assert!(first["nccl_windows_min_us"].is_null() && first["versus_max_us"].is_null(), "unmeasured: left out");
        assert_eq!(doc["options"]["trials"], 7);
        assert_eq!(first["ratio"].as_f64(), Some(rows[0].nccl_us.unwrap() / 4.0), "the ratio is of the medians");
        std::fs::remove_dir_all(&dir).unwrap();
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

//! The results of `weft bench ep` as a person reads them: the table, the JSON lines and the
//! plot (DeepEP's GB/s of the normal mode and µs of the low-latency mode per operation, a
//! series per SM count).

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use super::plot::{self, PALETTE, Panel, Series, XAxis};

/// One measured line.
#[derive(Clone, Debug, Serialize)]
pub struct EpLine {
    /// Rank that measured it.
    pub rank: usize,
    /// `dispatch`, `combine`, `ll-dispatch` or `ll-combine`.
    pub op: &'static str,
    /// `fp8` or `bf16`.
    pub payload: &'static str,
    /// SMs of the kernel.
    pub sms: u32,
    /// Rows this rank received (low-latency: its selected (token, expert) pairs).
    pub recv_tokens: usize,
    /// Average time of a call in µs.
    pub us: f64,
    /// DeepEP's NVLink GB/s.
    pub gbps: f64,
    /// Between nodes: the bytes this rank's call puts through its NIC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_bytes: Option<u64>,
    /// Between nodes: the call's α-β floor on the emulated NIC in µs
    /// ([`super::ep_floor::net_floor`], [`super::ep_floor::rail_floor`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_us: Option<f64>,
}

impl EpLine {
    /// The operation as the table and the plot name it, e.g. `dispatch fp8`.
    fn operation(&self) -> String {
        format!("{} {}", self.op, self.payload)
    }

    fn low_latency(&self) -> bool {
        self.op.starts_with("ll-")
    }
}

/// Prints `lines` under `title`, a row each.
pub(super) fn print_table(title: &str, lines: &[EpLine]) {
    println!("{title}");
    for line in table(lines) {
        println!("{line}");
    }
}

/// The table's header and rows; where some line has a floor between nodes, its bytes through
/// the NIC, the floor and measured / floor follow.
fn table(lines: &[EpLine]) -> Vec<String> {
    let floors = lines.iter().any(|l| l.floor_us.is_some());
    let mut header =
        format!("{:>4} {:>11} {:>5} {:>5} {:>10} {:>10} {:>9}", "rank", "op", "type", "SMs", "recv rows", "µs", "GB/s");
    if floors {
        header += &format!(" {:>11} {:>9} {:>7}", "net bytes", "floor µs", "×floor");
    }
    let mut out = vec![header];
    for l in lines {
        let mut row = format!(
            "{:>4} {:>11} {:>5} {:>5} {:>10} {:>10.1} {:>9.1}",
            l.rank, l.op, l.payload, l.sms, l.recv_tokens, l.us, l.gbps
        );
        if let (Some(bytes), Some(floor)) = (l.net_bytes, l.floor_us) {
            row += &format!(" {bytes:>11} {floor:>9.1} {:>7.2}", l.us / floor);
        }
        out.push(row);
    }
    out
}

/// Writes `lines` to `path` as a JSON array.
pub(super) fn write_json(path: &Path, lines: &[EpLine]) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(lines).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Plots `lines` into `path` (PNG, or SVG for `.svg`), titled `title`.
pub(super) fn write_plot(path: &Path, title: &str, lines: &[EpLine]) -> Result<(), String> {
    plot::write(path, title, &panels(lines))
}

/// The normal mode's GB/s and the low-latency mode's µs, each an operation per category and a
/// series per SM count, every point the mean over the ranks; a mode without lines is left out.
fn panels(lines: &[EpLine]) -> Vec<Panel> {
    let sms: BTreeSet<u32> = lines.iter().map(|l| l.sms).collect();
    let ranks = lines.iter().map(|l| l.rank).collect::<BTreeSet<_>>().len();
    let panel = |low_latency: bool, caption: &str, y_desc: &'static str, value: fn(&EpLine) -> f64| {
        let mode: Vec<&EpLine> = lines.iter().filter(|l| l.low_latency() == low_latency).collect();
        let mut operations: Vec<String> = Vec::new();
        for l in &mode {
            if !operations.contains(&l.operation()) {
                operations.push(l.operation());
            }
        }
        let series = sms
            .iter()
            .enumerate()
            .map(|(i, &sms)| Series {
                name: format!("{sms} SMs"),
                color: PALETTE[i % PALETTE.len()],
                points: operations
                    .iter()
                    .enumerate()
                    .filter_map(|(x, op)| {
                        let values: Vec<f64> =
                            mode.iter().filter(|l| l.sms == sms && l.operation() == *op).map(|l| value(l)).collect();
                        (!values.is_empty()).then(|| (x as f64, values.iter().sum::<f64>() / values.len() as f64))
                    })
                    .collect(),
                band: Vec::new(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        Panel {
            caption: format!("{caption} (mean of {ranks} ranks)"),
            x: XAxis::Categories(operations),
            y_desc,
            series,
        }
    };
    [
        panel(false, "normal mode: DeepEP's GB/s", "GB/s", |l| l.gbps),
        panel(true, "low latency: time per call", "µs", |l| l.us),
    ]
    .into_iter()
    .filter(|p| !p.series.is_empty())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ranks' lines at 24 and 64 SMs; rank 1 is 10% slower.
    fn lines() -> Vec<EpLine> {
        let mut out = Vec::new();
        for rank in 0..2 {
            for sms in [24, 64] {
                let slow = 1.0 + 0.1 * rank as f64;
                let base = 24.0 / f64::from(sms);
                for (op, payload, us) in
                    [("dispatch", "fp8", 300.0), ("dispatch", "bf16", 400.0), ("combine", "bf16", 600.0)]
                {
                    let us = us * base.sqrt() * slow;
                    out.push(EpLine {
                        rank,
                        op,
                        payload,
                        sms,
                        recv_tokens: 8000,
                        us,
                        gbps: 8000.0 * 14336.0 / us / 1e3,
                        net_bytes: None,
                        floor_us: None,
                    });
                }
                for (op, payload, us) in [("ll-dispatch", "fp8", 40.0), ("ll-combine", "bf16", 60.0)] {
                    out.push(EpLine {
                        rank,
                        op,
                        payload,
                        sms,
                        recv_tokens: 1024,
                        us: us * slow,
                        gbps: 1.0,
                        net_bytes: None,
                        floor_us: None,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn each_sm_count_is_a_series_of_each_mode() {
        let lines = lines();
        let panels = panels(&lines);
        assert_eq!(panels.len(), 2);
        let ops = |p: &Panel| match &p.x {
            XAxis::Categories(names) => names.clone(),
            XAxis::Bytes => panic!("an EP panel is against operations"),
        };
        assert_eq!(ops(&panels[0]), ["dispatch fp8", "dispatch bf16", "combine bf16"]);
        assert_eq!(ops(&panels[1]), ["ll-dispatch fp8", "ll-combine bf16"]);
        for p in &panels {
            let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["24 SMs", "64 SMs"], "{}", p.caption);
            assert_ne!(p.series[0].color, p.series[1].color);
        }
        // The low-latency µs of 24 SMs: the mean of the two ranks (40, 44) and (60, 66).
        assert_eq!(panels[1].series[0].points, [(0.0, 42.0), (1.0, 63.0)]);
        let mean_gbps = (lines[0].gbps + lines[10].gbps) / 2.0;
        assert_eq!((lines[10].rank, lines[10].sms, lines[10].op), (1, 24, "dispatch"));
        assert!((panels[0].series[0].points[0].1 - mean_gbps).abs() < 1e-9);
        assert!(panels[0].series[1].points[0].1 > panels[0].series[0].points[0].1, "64 SMs are faster here");
    }

    #[test]
    fn the_floor_columns_appear_with_a_floor_only() {
        let mut lines = lines();
        assert!(table(&lines).iter().all(|row| !row.contains("floor")));
        lines[3].net_bytes = Some(3_793_920);
        lines[3].floor_us = Some(20.0); // the line's 40 µs is twice the floor
        let rows = table(&lines);
        assert!(rows[0].ends_with("net bytes  floor µs  ×floor"), "{}", rows[0]);
        assert!(rows[4].ends_with("    3793920      20.0    2.00"), "{}", rows[4]);
        assert!(!rows[1].contains("20.0"), "a line without a floor leaves its columns empty");
    }

    #[test]
    fn a_mode_without_lines_has_no_panel() {
        let normal: Vec<EpLine> = lines().into_iter().filter(|l| !l.low_latency()).collect();
        let panels = panels(&normal);
        assert_eq!(panels.len(), 1);
        assert!(panels[0].caption.starts_with("normal mode"));
        assert!(super::panels(&[]).is_empty());
    }

    #[test]
    fn the_plot_is_written_as_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("weft-ep-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("ep.png");
        write_plot(&png, "weft bench ep", &lines()).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "suspiciously small: {} bytes", bytes.len());
        let svg = dir.join("ep.svg");
        write_plot(&svg, "weft bench ep", &lines()).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        for expected in ["<svg", "64 SMs", "combine bf16", "ll-dispatch fp8"] {
            assert!(text.contains(expected), "the SVG lacks {expected:?}");
        }
        assert!(write_plot(&dir.join("empty.png"), "empty", &[]).is_err());
        let json = dir.join("ep.json");
        write_json(&json, &lines()).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!((doc[3]["sms"].as_u64(), doc[3]["op"].as_str()), (Some(24), Some("ll-dispatch")));
        assert!(doc[3].get("floor_us").is_none(), "a line on one node has no floor");
        let mut between = lines();
        between[3].net_bytes = Some(3_793_920);
        between[3].floor_us = Some(77.9);
        write_json(&json, &between).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!((doc[3]["net_bytes"].as_u64(), doc[3]["floor_us"].as_f64()), (Some(3_793_920), Some(77.9)));
        if std::env::var_os("WEFT_KEEP_PLOT").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

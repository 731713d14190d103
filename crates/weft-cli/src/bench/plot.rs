//! `--plot` of `weft bench`: a collective sweep's time per call and bus bandwidth against
//! message size, drawn by [`crate::harness::plot`].

use std::path::Path;

use plotters::style::RGBColor;

use super::Contender;
use super::report::Line;
pub(super) use crate::harness::plot::{PALETTE, Panel, Series, XAxis, write};

const WEFT: RGBColor = PALETTE[0];
const NCCL: RGBColor = PALETTE[1];

/// The contenders a collective sweep's plot draws, with their names and colors.
const CONTENDERS: [(Contender, &str, RGBColor); 4] = [
    (Contender::Weft, "weft", WEFT),
    (Contender::Nccl, "NCCL", NCCL),
    (Contender::NcclWindows, "NCCL windows", PALETTE[2]),
    (Contender::Versus, "versus", PALETTE[3]),
];

/// Renders a collective sweep's `lines` into `path`, titled `title`: time per call and bus
/// bandwidth against message size, of every contender measured, each median in a band from
/// its fastest to its slowest trial.
pub(super) fn render(path: &Path, title: &str, lines: &[Line]) -> Result<(), String> {
    // Bus bandwidth at `us` µs per call of a line's size: inversely proportional to the time.
    let busbw = |l: &Line, us: f64| l.busbw * l.row.weft_us / us;
    let series = |value: &dyn Fn(&Line, f64) -> f64| -> Vec<Series> {
        CONTENDERS
            .iter()
            .filter_map(|&(contender, name, color)| {
                let measured: Vec<(f64, f64, f64, f64)> = lines
                    .iter()
                    .filter_map(|l| {
                        let t = l.row.timing(contender)?;
                        let (fast, slow) = (value(l, t.min), value(l, t.max));
                        Some((l.row.bytes as f64, value(l, t.median), fast.min(slow), fast.max(slow)))
                    })
                    .collect();
                let spread = measured.iter().any(|&(_, _, low, high)| high > low);
                (!measured.is_empty()).then(|| Series {
                    name: name.into(),
                    color,
                    points: measured.iter().map(|&(x, y, _, _)| (x, y)).collect(),
                    band: if spread {
                        measured.iter().map(|&(x, _, low, high)| (x, low, high)).collect()
                    } else {
                        Vec::new()
                    },
                })
            })
            .collect()
    };
    let panel = |caption: &str, y_desc, series| Panel { caption: caption.into(), x: XAxis::Bytes, y_desc, series };
    write(
        path,
        title,
        &[panel("time per call", "µs", series(&|_, us| us)), panel("bus bandwidth", "GB/s", series(&busbw))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{lines, tests, title};
    use crate::bench::{Contender, Row};
    use crate::harness::Collective;
    use crate::harness::trials::Timing;

    #[test]
    fn a_sweep_renders_to_a_png() {
        let dir = std::env::temp_dir().join(format!("weft-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let options = tests::options(Collective::AllReduce);
        for (name, nccl) in [("both.png", true), ("weft-only.png", false)] {
            let mut rows = tests::rows();
            if !nccl {
                rows.iter_mut().for_each(|r| r.nccl_us = None);
            }
            let path = dir.join(name);
            render(&path, &title(&options), &lines(&options, &rows)).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name} is not a PNG");
            assert!(bytes.len() > 10_000, "{name} is suspiciously small: {} bytes", bytes.len());
        }
        let svg = dir.join("sweep.svg");
        render(&svg, &title(&options), &lines(&options, &tests::rows())).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("NCCL"), "not an SVG of the sweep");
        assert!(render(&dir.join("empty.png"), "empty", &[]).is_err());
        if std::env::var_os("WEFT_KEEP_PLOT").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// The SVG of `rows` rendered as an AllReduce sweep.
    fn svg_of(rows: &[Row], name: &str) -> String {
        let dir = std::env::temp_dir().join(format!("weft-plot-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let options = tests::options(Collective::AllReduce);
        let path = dir.join(name);
        render(&path, &title(&options), &lines(&options, rows)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        svg
    }

    #[test]
    fn each_contender_s_trials_are_drawn_as_a_band_around_its_median() {
        let plain = tests::rows();
        let mut spread = plain.clone();
        for r in &mut spread {
            let t = |median: f64| Timing { median, min: median * 0.9, max: median * 1.3 };
            r.set_timing(Contender::Weft, t(r.weft_us));
            r.set_timing(Contender::Nccl, t(r.nccl_us.unwrap()));
        }
        // Without a spread no band; with one, a band per contender in each of the two panels.
        assert_eq!(svg_of(&plain, "plain.svg").matches("<polygon").count(), 0);
        assert_eq!(svg_of(&spread, "spread.svg").matches("<polygon").count(), 4);
        spread.iter_mut().for_each(|r| r.nccl_us = None);
        assert_eq!(svg_of(&spread, "weft-only.svg").matches("<polygon").count(), 2);
    }

    #[test]
    fn a_band_widens_the_value_axis_to_fit() {
        let mut rows = tests::rows();
        rows.truncate(2);
        let plain = svg_of(&rows, "fit-plain.svg");
        // A slowest trial 1000× the median stays on the chart: the axis grows to label it.
        let median = rows[0].weft_us;
        rows[0].set_timing(Contender::Weft, Timing { median, min: median, max: 5000.0 });
        let wide = svg_of(&rows, "fit-wide.svg");
        let label = "\n1000\n";
        assert!(!plain.contains(label) && wide.contains(label), "the axis did not grow to the band");
    }
}

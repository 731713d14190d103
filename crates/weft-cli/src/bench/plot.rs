//! `weft bench --plot`: a PNG with two log-log panels against message size: time per call and
//! bus bandwidth, weft and (when measured) NCCL. Text is drawn with an embedded DejaVu Sans,
//! so no system font or fontconfig is needed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::Line;
use crate::harness::sweep::format_size;

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 640;
const WEFT: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const NCCL: RGBColor = RGBColor(0xd6, 0x27, 0x28);

/// Registers the embedded font as `sans-serif` (once per process).
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded DejaVu Sans font did not load".to_string())
        })
        .clone()
}

/// One series: its name, color, and (size, value) points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// Draws one log-log panel of `series` against size on `area`.
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    caption: &str,
    y_desc: &str,
    series: &[Series<'_>],
) -> Result<(), Box<dyn std::error::Error>> {
    let points = || series.iter().flat_map(|s| s.2.iter().copied());
    let (x_min, x_max) = points().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let (y_min, y_max) = points().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
    let y_min = y_min.max(1e-3);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(
            ((x_min / 1.5)..(x_max * 1.5)).log_scale().base(2.0),
            ((y_min / 1.5)..(y_max.max(y_min) * 1.5)).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format_size(*x))
        .y_label_formatter(&|y| if *y >= 10.0 { format!("{y:.0}") } else { format!("{}", (y * 1e3).round() / 1e3) })
        .label_style(("sans-serif", 16))
        .draw()?;
    for (name, color, points) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 18))
        .draw()?;
    Ok(())
}

/// Renders `lines` into the PNG `path`, titled `title`.
pub(super) fn render(path: &Path, title: &str, lines: &[Line]) -> Result<(), String> {
    if lines.is_empty() {
        return Err("no rows to plot".into());
    }
    register_font()?;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 28))?;
        let (left, right) = root.split_horizontally(WIDTH / 2);
        let series = |weft: &dyn Fn(&Line) -> f64, nccl: &dyn Fn(&Line) -> Option<f64>| -> Vec<Series<'static>> {
            let mut out = vec![("weft", WEFT, lines.iter().map(|l| (l.row.bytes as f64, weft(l))).collect())];
            let theirs: Vec<(f64, f64)> =
                lines.iter().filter_map(|l| nccl(l).map(|v| (l.row.bytes as f64, v))).collect();
            if !theirs.is_empty() {
                out.push(("NCCL", NCCL, theirs));
            }
            out
        };
        panel(&left, "time per call", "µs", &series(&|l| l.row.weft_us, &|l| l.row.nccl_us))?;
        panel(&right, "bus bandwidth", "GB/s", &series(&|l| l.busbw, &|l| l.nccl_busbw))?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("plot {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{lines, tests, title};
    use crate::harness::Collective;

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
        assert!(render(&dir.join("empty.png"), "empty", &[]).is_err());
        if std::env::var_os("WEFT_KEEP_PLOT").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

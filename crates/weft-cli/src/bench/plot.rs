//! `--plot` of `weft bench`: figures of side-by-side panels, each series a line against message
//! size (log-log) or dots, one per category (e.g. an EP operation, on a linear value axis).
//! `.svg` files are SVG, any other name PNG. Text is drawn with an embedded DejaVu Sans, so
//! no system font or fontconfig is needed.

use std::error::Error;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;

use super::report::Line;
use crate::harness::sweep::format_size;

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 640;
const WEFT: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const NCCL: RGBColor = RGBColor(0xd6, 0x27, 0x28);
/// Colors of series that are not weft-against-NCCL, in order.
pub(super) const PALETTE: [RGBColor; 6] = [
    WEFT,
    NCCL,
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// What a panel's horizontal axis shows.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum XAxis {
    /// Message sizes in bytes (log 2); series are lines.
    Bytes,
    /// Named categories at x = 0, 1, …; series are dots, side by side within a category.
    Categories(Vec<String>),
}

/// One series: its name, color, and (x, value) points.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Series {
    pub name: String,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// One panel of a figure.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Panel {
    pub caption: String,
    pub x: XAxis,
    pub y_desc: &'static str,
    pub series: Vec<Series>,
}

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

/// Writes `panels` side by side under `title` into `path` (SVG for `.svg`, else PNG).
pub(super) fn write(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    if panels.iter().all(|p| p.series.iter().all(|s| s.points.is_empty())) {
        return Err("no rows to plot".into());
    }
    register_font()?;
    let svg = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    let drawn = if svg {
        figure(SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area(), title, panels)
    } else {
        figure(BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area(), title, panels)
    };
    drawn.map_err(|e| format!("plot {}: {e}", path.display()))
}

fn figure<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, panels: &[Panel]) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 28))?;
    let panels: Vec<&Panel> = panels.iter().filter(|p| p.series.iter().any(|s| !s.points.is_empty())).collect();
    for (area, panel) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

/// Draws `panel` on `area`: its axes, then its series.
fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let points = || panel.series.iter().flat_map(|s| s.points.iter().copied());
    let (x_min, x_max) = points().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let (y_min, y_max) = points().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
    match &panel.x {
        XAxis::Bytes => chart(
            area,
            panel,
            ((x_min / 1.5)..(x_max * 1.5)).log_scale().base(2.0),
            ((y_min.max(1e-3) / 1.5)..(y_max.max(1e-3) * 1.5)).log_scale(),
            ("message size (bytes)", 0, &|x| format_size(*x)),
            |points| points.to_vec(),
        ),
        XAxis::Categories(names) => {
            // Series side by side within a category: at most 0.6 of the gap between two.
            let n = panel.series.len() as f64;
            let step = if n > 1.0 { 0.6 / (n - 1.0) } else { 0.0 };
            let label = |x: &f64| {
                let i = x.round();
                let on_category = (x - i).abs() < 1e-6 && i >= 0.0;
                on_category.then(|| names.get(i as usize).cloned()).flatten().unwrap_or_default()
            };
            let mut index = 0.0;
            // Values of a few categories lie close together: a linear axis from 0 shows them.
            let y_range = 0.0..(y_max.max(0.0) * 1.15).max(1e-3);
            chart(area, panel, -0.5..(names.len() as f64 - 0.5), y_range, ("", names.len(), &label), |points| {
                let dx = (index - (n - 1.0) / 2.0) * step;
                index += 1.0;
                points.iter().map(|&(x, y)| (x + dx, y)).collect()
            })
        }
    }
}

/// The x axis of [`chart`]: its description, label count (0: plotters chooses) and labels.
type XLabels<'a> = (&'a str, usize, &'a dyn Fn(&f64) -> String);

/// Draws `panel` on `area` against `x_range` and `y_range`, each series' points moved by
/// `place` (called once per series, in order); lines only against sizes.
fn chart<DB: DrawingBackend, X: AsRangedCoord<Value = f64>, Y: AsRangedCoord<Value = f64>>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_range: X,
    y_range: Y,
    (x_desc, x_labels, x_format): XLabels<'_>,
    mut place: impl FnMut(&[(f64, f64)]) -> Vec<(f64, f64)>,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.caption, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_range, y_range)?;
    let mut mesh = chart.configure_mesh();
    if x_labels > 0 {
        mesh.x_labels(x_labels);
    }
    mesh.x_desc(x_desc)
        .y_desc(panel.y_desc)
        .x_label_formatter(x_format)
        .y_label_formatter(&|y| if *y >= 10.0 { format!("{y:.0}") } else { format!("{}", (y * 1e3).round() / 1e3) })
        .label_style(("sans-serif", 16))
        .draw()?;
    let lines = panel.x == XAxis::Bytes;
    for series in &panel.series {
        let (color, points) = (series.color, place(&series.points));
        let legend = move |(x, y): (i32, i32)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2));
        if lines {
            chart.draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?;
        }
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 5, color.filled())))?
            .label(&series.name)
            .legend(legend);
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

/// Renders a collective sweep's `lines` into `path`, titled `title`: time per call and bus
/// bandwidth against message size, weft and (when measured) NCCL.
pub(super) fn render(path: &Path, title: &str, lines: &[Line]) -> Result<(), String> {
    let series = |weft: &dyn Fn(&Line) -> f64, nccl: &dyn Fn(&Line) -> Option<f64>| -> Vec<Series> {
        let mut out = vec![Series {
            name: "weft".into(),
            color: WEFT,
            points: lines.iter().map(|l| (l.row.bytes as f64, weft(l))).collect(),
        }];
        let theirs: Vec<(f64, f64)> = lines.iter().filter_map(|l| nccl(l).map(|v| (l.row.bytes as f64, v))).collect();
        if !theirs.is_empty() {
            out.push(Series { name: "NCCL".into(), color: NCCL, points: theirs });
        }
        out
    };
    let panel = |caption: &str, y_desc, series| Panel { caption: caption.into(), x: XAxis::Bytes, y_desc, series };
    write(
        path,
        title,
        &[
            panel("time per call", "µs", series(&|l| l.row.weft_us, &|l| l.row.nccl_us)),
            panel("bus bandwidth", "GB/s", series(&|l| l.busbw, &|l| l.nccl_busbw)),
        ],
    )
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
        let svg = dir.join("sweep.svg");
        render(&svg, &title(&options), &lines(&options, &tests::rows())).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("NCCL"), "not an SVG of the sweep");
        assert!(render(&dir.join("empty.png"), "empty", &[]).is_err());
        if std::env::var_os("WEFT_KEEP_PLOT").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

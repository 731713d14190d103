//! `--plot` of `weft bench`: figures of side-by-side panels, each series a line against message
//! size (log-log) or dots, one per category (e.g. an EP operation, on a linear value axis),
//! with its spread (e.g. the fastest and slowest of a row's trials) as a shaded band around
//! the line or error bars on the dots.
//! `.svg` files are SVG, any other name PNG. Text is drawn with an embedded DejaVu Sans, so
//! no system font or fontconfig is needed.

use std::error::Error;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;

use super::Contender;
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

/// One series: its name, color, (x, value) points, and the spread around them as (x, low,
/// high), empty where it has none.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Series {
    pub name: String,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64, f64)>,
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
    let band = || panel.series.iter().flat_map(|s| s.band.iter().flat_map(|&(x, low, high)| [(x, low), (x, high)]));
    let (x_min, x_max) = points().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let (y_min, y_max) = points().chain(band()).fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
    match &panel.x {
        XAxis::Bytes => chart(
            area,
            panel,
            ((x_min / 1.5)..(x_max * 1.5)).log_scale().base(2.0),
            ((y_min.max(1e-3) / 1.5)..(y_max.max(1e-3) * 1.5)).log_scale(),
            ("message size (bytes)", 0, &|x| format_size(*x)),
            || 0.0,
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
            chart(area, panel, -0.5..(names.len() as f64 - 0.5), y_range, ("", names.len(), &label), || {
                let dx = (index - (n - 1.0) / 2.0) * step;
                index += 1.0;
                dx
            })
        }
    }
}

/// The x axis of [`chart`]: its description, label count (0: plotters chooses) and labels.
type XLabels<'a> = (&'a str, usize, &'a dyn Fn(&f64) -> String);

/// Draws `panel` on `area` against `x_range` and `y_range`, each series moved right by
/// `offset` (called once per series, in order); against sizes, lines in shaded bands, else
/// dots with error bars.
fn chart<DB: DrawingBackend, X: AsRangedCoord<Value = f64>, Y: AsRangedCoord<Value = f64>>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_range: X,
    y_range: Y,
    (x_desc, x_labels, x_format): XLabels<'_>,
    mut offset: impl FnMut() -> f64,
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
        let (color, dx) = (series.color, offset());
        let points: Vec<(f64, f64)> = series.points.iter().map(|&(x, y)| (x + dx, y)).collect();
        let band = series.band.iter().map(|&(x, low, high)| (x + dx, low, high));
        let legend = move |(x, y): (i32, i32)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2));
        if lines {
            // The band's outline: along the lows, then back along the highs.
            let outline: Vec<(f64, f64)> =
                band.clone().map(|(x, low, _)| (x, low)).chain(band.rev().map(|(x, _, high)| (x, high))).collect();
            if !outline.is_empty() {
                chart.draw_series(std::iter::once(Polygon::new(outline, color.mix(0.2).filled())))?;
            }
            chart.draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?;
        } else {
            chart.draw_series(band.map(|(x, low, high)| {
                ErrorBar::new_vertical(x, low, (low + high) / 2.0, high, color.stroke_width(2), 8)
            }))?;
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
    fn categories_draw_their_spread_as_error_bars() {
        let dir = std::env::temp_dir().join(format!("weft-plot-bars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let panel = |band: Vec<(f64, f64, f64)>| Panel {
            caption: "time".into(),
            x: XAxis::Categories(vec!["dispatch".into(), "combine".into()]),
            y_desc: "µs",
            series: vec![Series { name: "24 SMs".into(), color: WEFT, points: vec![(0.0, 10.0), (1.0, 12.0)], band }],
        };
        let lines_of = |band, name: &str| {
            let path = dir.join(name);
            write(&path, "bars", &[panel(band)]).unwrap();
            std::fs::read_to_string(&path).unwrap().matches("<polyline").count()
        };
        let without = lines_of(Vec::new(), "without.svg");
        let with = lines_of(vec![(0.0, 9.0, 11.0), (1.0, 11.5, 14.0)], "with.svg");
        assert!(with > without, "no error bars drawn: {with} lines against {without}");
        std::fs::remove_dir_all(&dir).unwrap();
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

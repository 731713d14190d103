//! Figures of side-by-side panels, each series a line against message size (log-log) or dots,
//! one per category (e.g. an EP operation, on a linear value axis), with its spread (e.g. the
//! fastest and slowest of a row's trials) as a shaded band around the line or error bars on the
//! dots: what `weft bench --plot` and `weft model predict --plot` draw.
//! `.svg` files are SVG, any other name PNG. Text is drawn with an embedded DejaVu Sans, so
//! no system font or fontconfig is needed.

use std::error::Error;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;

use crate::harness::sweep::format_size;

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 640;
/// Colors of series, in order (the first two are weft's and NCCL's in `weft bench`).
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// What a panel's horizontal axis shows.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum XAxis {
    /// Message sizes in bytes (log 2); series are lines.
    Bytes,
    /// Named categories at x = 0, 1, …; series are dots, side by side within a category.
    Categories(Vec<String>),
}

/// One series: its name, color, (x, value) points, and the spread around them as (x, low,
/// high), empty where it has none.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    pub name: String,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64, f64)>,
}

/// One panel of a figure.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Panel {
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
pub(crate) fn write(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_draw_their_spread_as_error_bars() {
        let dir = std::env::temp_dir().join(format!("weft-plot-bars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let panel = |band: Vec<(f64, f64, f64)>| Panel {
            caption: "time".into(),
            x: XAxis::Categories(vec!["dispatch".into(), "combine".into()]),
            y_desc: "µs",
            series: vec![Series {
                name: "24 SMs".into(),
                color: PALETTE[0],
                points: vec![(0.0, 10.0), (1.0, 12.0)],
                band,
            }],
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
}

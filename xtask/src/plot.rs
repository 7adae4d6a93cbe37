//! PNG charts for the benchmark reports, drawn with `plotters`: [`lines`] (one
//! line per series over shared linear axes) and [`bars`] (grouped bars, one
//! group per category). Shared by every benchmark that plots, so the figures
//! look alike.
//!
//! Text needs a TrueType font, and `plotters` finds none by itself without
//! pulling in a system font library: [`FONT_PATH`] (Debian's fonts-dejavu-core,
//! which `cargo xtask setup` installs) is registered once, and a missing font
//! is an error that names the package rather than a chart without labels.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context as _, Result, anyhow, bail};
use plotters::prelude::*;

/// The font every chart's text is set in (Debian package fonts-dejavu-core).
pub(crate) const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The family name the font is registered under.
const FONT: &str = "sans-serif";

/// Pixel size of every chart.
const SIZE: (u32, u32) = (1000, 600);

/// Series colours, in order (colour-blind-safe, Okabe-Ito).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// One named line of a [`lines`] chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// The legend's label.
    pub name: String,
    /// (x, y) points, drawn in the order given.
    pub points: Vec<(f64, f64)>,
}

/// One named set of bars of a [`bars`] chart: one value per category.
#[derive(Debug, Clone)]
pub(crate) struct BarGroup {
    /// The legend's label.
    pub name: String,
    /// One value per category, in the categories' order.
    pub values: Vec<f64>,
}

/// Registers [`FONT_PATH`] once; later calls return the first outcome.
fn font() -> Result<()> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH).map_err(|e| {
                format!(
                    "the charts need the font {FONT_PATH} (Debian package fonts-dejavu-core; `cargo xtask setup` installs it): {e}"
                )
            })?;
            // plotters keeps the font for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT, FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH} is not a font plotters can read"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// The range `values` span, widened a little (and made non-empty).
fn span(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut low, mut high) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !low.is_finite() {
        (low, high) = (0.0, 1.0);
    }
    if from_zero {
        low = low.min(0.0);
    }
    if high - low < 1e-12 {
        high = low + 1.0;
    }
    let pad = (high - low) * 0.05;
    (
        if from_zero && low >= 0.0 {
            low
        } else {
            low - pad
        },
        high + pad,
    )
}

/// Draws `series` as lines (with a dot at each point) over linear axes; y
/// starts at zero. Writes a PNG to `path`.
pub(crate) fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    font()?;
    if series.iter().all(|s| s.points.is_empty()) {
        bail!("{}: nothing to plot", path.display());
    }
    let (x0, x1) = span(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        false,
    );
    let (y0, y1) = span(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        true,
    );
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 18))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let style = colour(i).stroke_width(2);
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour(i).stroke_width(3))
                });
            chart.draw_series(
                s.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, colour(i).filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 16))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("drawing {}: {e}", path.display()))
}

/// Draws grouped bars: for each of `categories`, one bar per group, side by
/// side, each from zero (downward for negative values). Writes a PNG to `path`.
pub(crate) fn bars(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    groups: &[BarGroup],
) -> Result<()> {
    font()?;
    if categories.is_empty() || groups.is_empty() {
        bail!("{}: nothing to plot", path.display());
    }
    if let Some(g) = groups.iter().find(|g| g.values.len() != categories.len()) {
        bail!(
            "{}: group {} has {} values for {} categories",
            path.display(),
            g.name,
            g.values.len(),
            categories.len()
        );
    }
    let (y0, y1) = span(groups.iter().flat_map(|g| g.values.iter().copied()), true);
    let n = categories.len();
    // The legend goes over the half of the chart whose bars are lower.
    let half_max = |range: std::ops::Range<usize>| {
        groups
            .iter()
            .flat_map(|g| g.values[range.clone()].iter().copied())
            .fold(f64::MIN, f64::max)
    };
    let legend = if half_max(0..n / 2) < half_max(n / 2..n) {
        SeriesLabelPosition::UpperLeft
    } else {
        SeriesLabelPosition::UpperRight
    };
    let width = 0.8 / groups.len() as f64;
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    categories.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .disable_x_mesh()
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 18))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for (g, group) in groups.iter().enumerate() {
            let left = |c: usize| c as f64 - 0.4 + g as f64 * width;
            chart
                .draw_series(group.values.iter().enumerate().map(|(c, &v)| {
                    Rectangle::new(
                        [(left(c), 0.0), (left(c) + width * 0.95, v)],
                        colour(g).filled(),
                    )
                }))?
                .label(group.name.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour(g).filled())
                });
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 16))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(legend)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("drawing {}: {e}", path.display()))
}

/// Fails unless the chart font is there; for benchmarks to call before they
/// spend minutes measuring.
pub(crate) fn check_font() -> Result<()> {
    font().context("checking the chart font")
}

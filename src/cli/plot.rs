//! SVG plots of sweeps (plotters, SVG backend): one x series, several y series, log-scale x as
//! in the figures of the papers.

use plotters::prelude::*;
use std::path::Path;

/// A named series of (x, y) points.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
    /// Half-widths of vertical error bars, one per point (empty: no bars).
    pub error: Vec<f64>,
}

impl Series {
    /// `label`: one point per row of a sweep, at x = `x(row)`, y = `y(row)`, no error bars.
    pub fn of<R>(label: &str, rows: &[R], x: impl Fn(&R) -> f64, y: impl Fn(&R) -> f64) -> Self {
        Series {
            label: label.into(),
            points: rows.iter().map(|r| (x(r), y(r))).collect(),
            error: Vec::new(),
        }
    }

    /// With vertical error bars of half-width `e(row)`.
    pub fn with_error<R>(mut self, rows: &[R], e: impl Fn(&R) -> f64) -> Self {
        self.error = rows.iter().map(e).collect();
        self
    }
}

/// Why a plot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Nothing to plot.
    #[error("no points to plot")]
    Empty,
    /// The drawing backend failed (usually the file could not be written).
    #[error("cannot draw {path}: {msg}")]
    Draw {
        /// Output file.
        path: String,
        /// Backend message.
        msg: String,
    },
}

/// The distinct x values of `series`, ascending.
fn measured_xs(series: &[Series]) -> Vec<f64> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, _)| x))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs
}

/// Draw `series` as lines with markers over a log2 x axis into an SVG file.
pub fn log_x_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), PlotError> {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    for s in series {
        for (&(_, y), e) in s.points.iter().zip(&s.error) {
            y1 = y1.max(y + e);
        }
    }
    if x0 > x1 {
        return Err(PlotError::Empty);
    }
    if x0 >= x1 {
        // One x (a single job size): an empty log range; widen it an octave each way.
        (x0, x1) = (x0 / 2.0, x1 * 2.0);
    }
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.display().to_string(),
        msg: e.to_string(),
    };
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (x0.max(1.0)..x1.max(2.0))
                .log_scale()
                // Ticks at the measured sizes only: a log axis's own ticks (every hundred)
                // collide near the top and label none of the powers of two.
                .with_key_points(measured_xs(series)),
            0f64..(y1 * 1.1).max(1.0),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|x| format!("{x}"))
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(s.points.iter().zip(&s.error).map(|(&(x, y), &e)| {
                ErrorBar::new_vertical(x, (y - e).max(0.0), y, y + e, color.filled(), 8)
            }))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

//! PNG line plots for the benchmarks (plotters, bitmap backend, a system TrueType font).

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// One line on a plot.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// Axis options.
#[derive(Clone, Copy, Default)]
pub struct Axes {
    pub log_x: bool,
    pub log_y: bool,
    /// Start the y axis at zero (otherwise it hugs the data).
    pub y_from_zero: bool,
}

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

fn ensure_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                // The font must live for the whole program: plotters keeps a reference.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{p} is not a usable TrueType font"));
            }
        }
        Err(format!(
            "no TrueType font found for plots (looked in {}); install fonts-dejavu-core",
            FONT_PATHS.join(", ")
        ))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Draw `series` as lines with markers into a PNG at `path`.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    axes: Axes,
) -> Result<()> {
    ensure_font()?;
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return Err(anyhow!("plot {title}: no points"));
    }
    if axes.y_from_zero && !axes.log_y {
        y0 = y0.min(0.0);
    }
    let pad = |a: f64, b: f64, log: bool| -> (f64, f64) {
        if log {
            (a.max(1e-12) / 1.3, b.max(1e-12) * 1.3)
        } else if (b - a).abs() < 1e-12 {
            (a - 1.0, b + 1.0)
        } else {
            let d = (b - a) * 0.05;
            (
                if axes.y_from_zero && a >= 0.0 {
                    a.max(0.0)
                } else {
                    a - d
                },
                b + d,
            )
        }
    };
    let (x0, x1) = pad(x0, x1, axes.log_x);
    let (y0, y1) = pad(y0, y1, axes.log_y);

    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .label_style(("sans-serif", 15))
                .draw()?;
            for (i, s) in series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        color.stroke_width(2),
                    ))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
                chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .position(SeriesLabelPosition::UpperRight)
                .draw()?;
        }};
    }
    match (axes.log_x, axes.log_y) {
        (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1)?),
        (true, false) => draw!(b.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?),
        (false, true) => draw!(b.build_cartesian_2d(x0..x1, (y0..y1).log_scale())?),
        (true, true) => draw!(b.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?),
    }
    root.present()
        .with_context(|| format!("writing plot {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_png() {
        let dir = std::env::temp_dir().join(format!("fp-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.png");
        let s = vec![
            Series::new("a", vec![(1.0, 2.0), (2.0, 3.0), (4.0, 5.0)]),
            Series::new("b", vec![(1.0, 1.0), (2.0, 4.0), (4.0, 4.5)]),
        ];
        lines(
            &p,
            "test",
            "x",
            "y",
            &s,
            Axes {
                log_x: true,
                ..Default::default()
            },
        )
        .unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Line charts as inline SVG text (plotters' SVG backend; no fonts are loaded: the browser
//! renders the `<text>` elements), for the HTML report and the HTML comparison.

use anyhow::anyhow;
use plotters::prelude::*;

/// How the x axis is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XScale {
    /// Linear.
    Linear,
    /// Base-2 logarithmic, ticks at powers of two (concurrency C).
    Log2,
}

/// One line of a chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in data units, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// A label drawn next to each point (same length as `points`), e.g. `C=8`.
    pub point_labels: Option<Vec<String>>,
    /// Colour index (series with the same index share a colour).
    pub color: usize,
    /// Dashed line (a second percentile, or a second file in a comparison).
    pub dashed: bool,
}

/// A chart description.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// x-axis description with unit.
    pub x_desc: &'a str,
    /// y-axis description with unit.
    pub y_desc: &'a str,
    /// x scaling.
    pub x_scale: XScale,
    /// The lines.
    pub series: Vec<Series>,
}

/// Text safe inside SVG `<text>` (plotters writes it as given).
fn svg_text(s: &str) -> String {
    s.replace('&', "and").replace(['<', '>', '"'], "")
}

/// A colour of a fixed, readable palette.
pub fn color(i: usize) -> RGBColor {
    const P: [(u8, u8, u8); 8] = [
        (31, 119, 180),
        (214, 39, 40),
        (44, 160, 44),
        (148, 103, 189),
        (255, 127, 14),
        (23, 190, 207),
        (140, 86, 75),
        (127, 127, 127),
    ];
    let (r, g, b) = P[i % P.len()];
    RGBColor(r, g, b)
}

/// The chart as an `<svg>` element (600 × 360 px), or `None` when no series has a point.
///
/// # Errors
/// A drawing error from plotters.
pub fn line_chart(chart: &Chart<'_>) -> anyhow::Result<Option<String>> {
    let fx = |x: f64| match chart.x_scale {
        XScale::Linear => x,
        XScale::Log2 => x.max(1e-9).log2(),
    };
    let pts: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (fx(x), y)))
        // values past ±1e300 leave no room for the axis padding (f64::MAX × 1.12 is inf, and
        // the plotting library then never finishes its ticks: break-it round 7); such a value
        // is no measurement, so it is not drawn
        .filter(|(x, y)| x.abs() <= 1e300 && y.abs() <= 1e300)
        .collect();
    if pts.is_empty() {
        return Ok(None);
    }
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = pts.iter().fold(0.0f64, |a, p| a.max(p.1));
    let y0 = pts.iter().fold(0.0f64, |a, p| a.min(p.1));
    if x1 - x0 < 1e-9 {
        x0 -= 1.0;
        x1 += 1.0;
    } else if chart.x_scale == XScale::Linear {
        let pad = (x1 - x0) * 0.05;
        x0 -= pad;
        x1 += pad;
    } else {
        x0 -= 0.25;
        x1 += 0.25;
    }
    let y1 = if y1 <= y0 { y0 + 1.0 } else { y1 * 1.12 };
    let mut buf = String::new();
    {
        let e = |e: &dyn std::fmt::Display| anyhow!("drawing the chart {:?}: {e}", chart.title);
        let root = SVGBackend::with_string(&mut buf, (600, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut c = ChartBuilder::on(&root)
            .caption(svg_text(chart.title), ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|x| e(&x))?;
        let log2 = chart.x_scale == XScale::Log2;
        let xfmt = move |v: &f64| -> String {
            if log2 {
                if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
                    format!("{}", 2f64.powf(v.round()) as u64)
                } else {
                    String::new()
                }
            } else {
                short_num(*v)
            }
        };
        let yfmt = |v: &f64| short_num(*v);
        let n_x = if log2 {
            ((x1 - x0).ceil() as usize + 1).max(2)
        } else {
            8
        };
        c.configure_mesh()
            .x_desc(svg_text(chart.x_desc))
            .y_desc(svg_text(chart.y_desc))
            .x_labels(n_x)
            .y_labels(8)
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt)
            .light_line_style(RGBColor(238, 238, 238))
            .draw()
            .map_err(|x| e(&x))?;
        let mut any_legend = false;
        for s in &chart.series {
            let col = color(s.color);
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| (fx(x), y))
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            if points.is_empty() {
                continue;
            }
            let style = col.stroke_width(2);
            let anno = if s.dashed {
                c.draw_series(DashedLineSeries::new(points.clone(), 6, 4, style))
                    .map_err(|x| e(&x))?
            } else {
                c.draw_series(LineSeries::new(points.clone(), style))
                    .map_err(|x| e(&x))?
            };
            if !s.name.is_empty() {
                any_legend = true;
                let dashed = s.dashed;
                anno.label(svg_text(&s.name)).legend(move |(x, y)| {
                    if dashed {
                        PathElement::new(vec![(x, y), (x + 6, y)], col.stroke_width(2))
                    } else {
                        PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2))
                    }
                });
            }
            c.draw_series(points.iter().map(|&p| Circle::new(p, 3, col.filled())))
                .map_err(|x| e(&x))?;
            if let Some(labels) = &s.point_labels {
                c.draw_series(points.iter().zip(labels).map(|(&p, l)| {
                    EmptyElement::at(p)
                        + Text::new(svg_text(l), (5, -12), ("sans-serif", 11).into_font())
                }))
                .map_err(|x| e(&x))?;
            }
        }
        if any_legend {
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    Ok(Some(buf))
}

/// Axis numbers: `0.5`, `12`, `1.2k`, `3M`.
fn short_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(points: Vec<(f64, f64)>) -> Chart<'static> {
        Chart {
            title: "t",
            x_desc: "C",
            y_desc: "tok/s",
            x_scale: XScale::Log2,
            series: vec![Series {
                name: "x".into(),
                points,
                point_labels: None,
                color: 0,
                dashed: false,
            }],
        }
    }

    /// Break-it round 7: `report --format html` spun forever on an `aggregate_tps` of f64::MAX.
    #[test]
    fn values_without_room_for_an_axis_are_not_drawn() {
        let bad = chart(vec![(1.0, f64::MAX), (2.0, f64::INFINITY), (4.0, f64::NAN)]);
        assert_eq!(line_chart(&bad).unwrap(), None);
        let some = chart(vec![(1.0, f64::MAX), (2.0, 1e300), (4.0, 3.0)]);
        assert!(line_chart(&some).unwrap().is_some());
    }
}

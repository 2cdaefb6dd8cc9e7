//! SVG charts (plotters, SVG backend only: no system font libraries; text is left to the browser).
//!
//! * [`runtime_and_overhead`]: runtimes of primal/vjp/jvp against n or k (solid lines, left log
//!   axis) with the AD overhead on a second y-axis (dashed lines), as in the thesis' figures;
//! * [`bars`]: one bar per label (overheads per workload x backend x mode, memory ratios);
//! * [`trend`]: a metric per case over the runs of a history.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// A named line: (x, y) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

const SIZE: (u32, u32) = (760, 420);

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A chart that says there is nothing to draw (keeps the report's layout when data is missing).
pub fn placeholder(title: &str, why: &str) -> String {
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"80\" viewBox=\"0 0 {w} 80\">\
         <text x=\"10\" y=\"30\" font-family=\"sans-serif\" font-size=\"16\">{}</text>\
         <text x=\"10\" y=\"58\" font-family=\"sans-serif\" font-size=\"13\" fill=\"#666\">{}</text></svg>",
        esc(title),
        esc(why),
        w = SIZE.0
    )
}

fn finite_positive(s: &[Series]) -> impl Iterator<Item = (f64, f64)> + '_ {
    s.iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && *x > 0.0 && *y > 0.0)
}

/// Padded log range covering `lo..hi`.
fn log_range(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let (lo, hi) = if lo == hi { (lo / 2.0, hi * 2.0) } else { (lo, hi) };
    lo / 1.3..hi * 1.3
}

fn err(e: impl std::fmt::Display) -> String {
    format!("chart: {e}")
}

/// Runtime (seconds, shown in ms) and overhead against a size parameter, log-log, two y-axes.
pub fn runtime_and_overhead(
    title: &str,
    x_label: &str,
    runtimes: &[Series],
    overheads: &[Series],
) -> Result<String, String> {
    let pts: Vec<(f64, f64)> = finite_positive(runtimes).collect();
    let opts: Vec<(f64, f64)> = finite_positive(overheads).collect();
    if pts.is_empty() {
        return Ok(placeholder(title, "no timings to plot"));
    }
    let (x0, x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1 * 1e3), b.max(p.1 * 1e3)));
    let o1 = opts.iter().fold(1.0f64, |a, p| a.max(p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .right_y_label_area_size(56)
            .build_cartesian_2d(log_range(x0, x1).log_scale(), log_range(y0, y1).log_scale())
            .map_err(err)?
            .set_secondary_coord(log_range(x0, x1).log_scale(), 0.0..o1 * 1.15);
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("runtime (ms), solid")
            .x_label_formatter(&|x| format!("{x:.0e}"))
            .y_label_formatter(&|y| format!("{y:.3}"))
            .draw()
            .map_err(err)?;
        chart.configure_secondary_axes().y_desc("overhead (x), dashed").draw().map_err(err)?;
        for (i, s) in runtimes.iter().enumerate() {
            let c = color(i);
            let p: Vec<(f64, f64)> =
                s.points.iter().map(|&(x, y)| (x, y * 1e3)).filter(|(x, y)| *x > 0.0 && *y > 0.0).collect();
            chart
                .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart.draw_series(p.into_iter().map(|pt| Circle::new(pt, 3, c.filled()))).map_err(err)?;
        }
        for (i, s) in overheads.iter().enumerate() {
            let c = color(i + 1);
            let p: Vec<(f64, f64)> = s.points.iter().copied().filter(|(x, y)| *x > 0.0 && y.is_finite()).collect();
            chart
                .draw_secondary_series(DashedLineSeries::new(p, 6, 4, c.stroke_width(2)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 6, y), (x + 10, y), (x + 18, y)], c.stroke_width(1))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One horizontal bar per (label, value), labels on the left so they stay readable; an optional
/// dashed reference line (e.g. overhead 1).
pub fn bars(title: &str, x_label: &str, values: &[(String, f64)], reference: Option<f64>) -> Result<String, String> {
    let vals: Vec<(String, f64)> = values.iter().filter(|(_, v)| v.is_finite()).cloned().collect();
    if vals.is_empty() {
        return Ok(placeholder(title, "no values to plot"));
    }
    let n = vals.len();
    let top = vals.iter().fold(reference.unwrap_or(0.0), |a, (_, v)| a.max(*v)) * 1.12;
    let height = 90 + 22 * n as u32;
    let labels: Vec<String> = vals.iter().map(|(l, _)| l.clone()).collect();
    let longest = labels.iter().map(|l| l.len()).max().unwrap_or(10) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size((longest * 7 + 10).min(SIZE.0 / 2))
            .build_cartesian_2d(0.0..top.max(1e-12), (0usize..n).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(x_label)
            .y_labels(n)
            .y_label_style(("sans-serif", 12))
            .y_label_formatter(&|v| match v {
                // Top to bottom in the given order.
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    labels.get(n.wrapping_sub(1).wrapping_sub(*i)).cloned().unwrap_or_default()
                }
                SegmentValue::Last => String::new(),
            })
            .draw()
            .map_err(err)?;
        chart
            .draw_series(vals.iter().enumerate().map(|(i, (_, v))| {
                let row = n - 1 - i;
                let mut bar = Rectangle::new(
                    [(0.0, SegmentValue::Exact(row)), (*v, SegmentValue::Exact(row + 1))],
                    color(0).mix(0.8).filled(),
                );
                bar.set_margin(3, 3, 0, 0);
                bar
            }))
            .map_err(err)?;
        chart
            .draw_series(vals.iter().enumerate().map(|(i, (_, v))| {
                Text::new(format!("{v:.2}"), (*v, SegmentValue::CenterOf(n - 1 - i)), ("sans-serif", 11))
            }))
            .map_err(err)?;
        if let Some(r) = reference {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(r, SegmentValue::Exact(0)), (r, SegmentValue::Last)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A metric per series over run indices 1..=runs (history trends).
pub fn trend(title: &str, y_label: &str, series: &[Series], runs: usize) -> Result<String, String> {
    let pts: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().copied()).filter(|(_, y)| y.is_finite()).collect();
    if pts.is_empty() || runs == 0 {
        return Ok(placeholder(title, "no history to plot"));
    }
    let top = pts.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.5..runs as f64 + 0.5, 0.0..top.max(1e-12))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("run (oldest first)")
            .y_desc(y_label)
            .x_labels(runs.min(12))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, pts: &[(f64, f64)]) -> Series {
        Series { name: name.into(), points: pts.to_vec() }
    }

    #[test]
    fn runtime_chart_has_both_axes_labels_and_every_series() {
        let svg = runtime_and_overhead(
            "hist-add vs k",
            "k (bins)",
            &[
                s("primal", &[(10.0, 1e-3), (1e3, 2e-3), (1e6, 9e-3)]),
                s("vjp", &[(10.0, 2e-3), (1e3, 4e-3), (1e6, 2e-2)]),
            ],
            &[s("vjp/primal", &[(10.0, 2.0), (1e3, 2.0), (1e6, 2.2)])],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"));
        for needle in
            ["hist-add vs k", "runtime (ms), solid", "overhead (x), dashed", "primal", "vjp/primal", "k (bins)"]
        {
            assert!(svg.contains(needle), "missing {needle}");
        }
        assert!(
            svg.contains("stroke-dasharray") || svg.matches("<polyline").count() + svg.matches("<line").count() > 6
        );
    }

    #[test]
    fn bars_label_each_value_and_empty_data_gives_a_placeholder() {
        let svg =
            bars("overhead", "x", &[("hist-add cpu vjp".into(), 2.1), ("hist-mul cpu vjp".into(), 2.9)], Some(1.0))
                .unwrap();
        assert!(svg.contains("hist-add cpu vjp") && svg.contains("hist-mul cpu vjp"));
        assert!(svg.matches("<rect").count() >= 3, "background + 2 bars");
        let empty = bars("overhead", "x", &[("nan".into(), f64::NAN)], None).unwrap();
        assert!(empty.contains("no values to plot"));
        let t = trend("trend", "x", &[s("a", &[(1.0, 2.0), (2.0, 2.5)])], 2).unwrap();
        assert!(t.contains("run (oldest first)"));
    }
}

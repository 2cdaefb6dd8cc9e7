//! SVG charts (plotters, SVG backend only: no system font libraries; text is left to the browser).
//!
//! * [`runtime_and_overhead`]: runtimes of primal/vjp/jvp against n or k (solid lines, left log
//!   axis) with the AD overhead on a second y-axis (dashed lines), as in the thesis' figures;
//! * [`bars`]: one bar per label (overheads per workload x backend x mode, memory ratios), on a
//!   linear or a log axis;
//! * [`trend`]: a metric per case over the runs of a history, each run labelled with its date
//!   and commit.
//!
//! Legends are not drawn inside the plots, where they cover data: [`legend`] renders them as
//! HTML next to the chart, in the same colours and dashes ([`color_hex`]).

use plotters::coord::ranged1d::{AsRangedCoord, SegmentValue, ValueFormatter};
use plotters::prelude::*;

/// A named line: (x, y) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Twelve distinguishable colours (Tableau's 10 and two darker ones); series beyond twelve
/// repeat them, which is why trend charts state how many series they show.
const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(0, 60, 110),
    RGBColor(110, 0, 30),
];

/// How many series a chart tells apart by colour.
pub const DISTINCT_SERIES: usize = PALETTE.len();

const SIZE: (u32, u32) = (760, 420);

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The colour of series `i` as CSS (`#rrggbb`), for legends drawn in HTML.
pub fn color_hex(i: usize) -> String {
    let RGBColor(r, g, b) = color(i);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// A legend in HTML: one swatch (solid or dashed line in the series' colour) and name per
/// entry `(name, colour index, dashed)`.
pub fn legend(entries: &[(String, usize, bool)]) -> String {
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let mut h = String::from("<ul class=\"legend\">");
    for (name, i, dashed) in entries {
        let dash = if *dashed { " stroke-dasharray=\"5 3\"" } else { "" };
        h.push_str(&format!(
            "<li><svg width=\"22\" height=\"10\"><line x1=\"0\" y1=\"5\" x2=\"22\" y2=\"5\" stroke=\"{}\" stroke-width=\"3\"{dash}/></svg>{}</li>",
            color_hex(*i),
            esc(name)
        ));
    }
    h.push_str("</ul>");
    h
}

/// A tick label people read at a glance: up to three significant digits, no trailing zeros
/// (`10`, `2.5`, `0.012`), and powers of ten outside 0.001..10^4 (`1e5`, `3e-4`).
pub fn tick(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if !(1e-3..1e4).contains(&a) {
        let s = format!("{v:.1e}");
        // 1.0e5 -> 1e5
        return s.replace(".0e", "e");
    }
    let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
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
/// Runtime `i` is drawn in colour `i`, overhead `i` in colour `i + 1`, dashed (see [`legend`]).
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
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(err)?;
        chart
            .configure_secondary_axes()
            .y_desc("overhead (x), dashed")
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(err)?;
        for (i, s) in runtimes.iter().enumerate() {
            let c = color(i);
            let p: Vec<(f64, f64)> =
                s.points.iter().map(|&(x, y)| (x, y * 1e3)).filter(|(x, y)| *x > 0.0 && *y > 0.0).collect();
            chart.draw_series(LineSeries::new(p.clone(), c.stroke_width(2))).map_err(err)?;
            chart.draw_series(p.into_iter().map(|pt| Circle::new(pt, 3, c.filled()))).map_err(err)?;
        }
        // Overhead i is of derivative i + 1 (vjp, jvp): the same colour, dashed.
        for (i, s) in overheads.iter().enumerate() {
            let c = color(i + 1);
            let p: Vec<(f64, f64)> = s.points.iter().copied().filter(|(x, y)| *x > 0.0 && y.is_finite()).collect();
            chart.draw_secondary_series(DashedLineSeries::new(p, 6, 4, c.stroke_width(2))).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One horizontal bar per (label, value), labels on the left so they stay readable; an optional
/// dashed reference line (e.g. overhead 1). On a `log` axis (ratios spanning decades) bars start
/// at half the smallest value, and values must be positive.
pub fn bars(
    title: &str,
    x_label: &str,
    values: &[(String, f64)],
    reference: Option<f64>,
    log: bool,
) -> Result<String, String> {
    let vals: Vec<(String, f64)> =
        values.iter().filter(|(_, v)| v.is_finite() && (!log || *v > 0.0)).cloned().collect();
    if vals.is_empty() {
        return Ok(placeholder(title, "no values to plot"));
    }
    if log {
        let lo = vals.iter().fold(reference.unwrap_or(f64::MAX), |a, (_, v)| a.min(*v)) / 2.0;
        let hi = vals.iter().fold(reference.unwrap_or(0.0), |a, (_, v)| a.max(*v)) * 2.0;
        draw_bars(title, x_label, &vals, reference, (lo..hi).log_scale(), lo)
    } else {
        let top = vals.iter().fold(reference.unwrap_or(0.0), |a, (_, v)| a.max(*v)) * 1.12;
        draw_bars(title, x_label, &vals, reference, 0.0..top.max(1e-12), 0.0)
    }
}

/// [`bars`] on the value axis `x` (linear or log), bars starting at `base`.
fn draw_bars<X>(
    title: &str,
    x_label: &str,
    vals: &[(String, f64)],
    reference: Option<f64>,
    x: X,
    base: f64,
) -> Result<String, String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let n = vals.len();
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
            .build_cartesian_2d(x, (0usize..n).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(x_label)
            .y_labels(n)
            .y_label_style(("sans-serif", 12))
            .x_label_formatter(&|x| tick(*x))
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
                    [(base, SegmentValue::Exact(row)), (*v, SegmentValue::Exact(row + 1))],
                    color(0).mix(0.8).filled(),
                );
                bar.set_margin(3, 3, 0, 0);
                bar
            }))
            .map_err(err)?;
        chart
            .draw_series(
                vals.iter().enumerate().map(|(i, (_, v))| {
                    Text::new(tick(*v), (*v, SegmentValue::CenterOf(n - 1 - i)), ("sans-serif", 11))
                }),
            )
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

/// A metric per series over the runs of a history: x = run index 1..=runs, each labelled by
/// `run_labels[i - 1]` (date and commit). Series `i` is drawn in colour `i` (see [`legend`]).
pub fn trend(title: &str, y_label: &str, series: &[Series], run_labels: &[String]) -> Result<String, String> {
    let runs = run_labels.len();
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
            .margin_right(40)
            .x_label_area_size(56)
            .y_label_area_size(64)
            .build_cartesian_2d(0.5..runs as f64 + 0.5, 0.0..top.max(1e-12))
            .map_err(err)?;
        // One tick per run (at most 12 labelled, evenly spread).
        let step = runs.div_ceil(12).max(1);
        chart
            .configure_mesh()
            .x_desc("run (date, commit), oldest first")
            .y_desc(y_label)
            .x_labels(runs.min(12) * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 1.0 || i as usize > runs || !(i as usize - 1).is_multiple_of(step) {
                    return String::new();
                }
                run_labels[i as usize - 1].clone()
            })
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let c = color(i);
            chart.draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2))).map_err(err)?;
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
        }
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
    fn ticks_read_at_a_glance() {
        assert_eq!(tick(10.0), "10");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.0125), "0.0125");
        assert_eq!(tick(123.456), "123");
        assert_eq!(tick(1e5), "1e5");
        assert_eq!(tick(0.0003), "3e-4");
        assert_eq!(tick(0.0), "0");
    }

    #[test]
    fn legends_name_every_series_in_its_colour_and_dash() {
        let h = legend(&[("primal".into(), 0, false), ("vjp/primal <x>".into(), 1, true)]);
        assert!(h.contains(&color_hex(0)) && h.contains(&color_hex(1)));
        assert_eq!(h.matches("stroke-dasharray").count(), 1);
        assert!(h.contains("vjp/primal &lt;x&gt;"));
        assert_eq!(color_hex(0), "#1f77b4");
        assert_eq!(color_hex(DISTINCT_SERIES), color_hex(0));
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
        for needle in ["hist-add vs k", "runtime (ms), solid", "overhead (x), dashed", "k (bins)"] {
            assert!(svg.contains(needle), "missing {needle}");
        }
        assert!(
            svg.contains("stroke-dasharray") || svg.matches("<polyline").count() + svg.matches("<line").count() > 6
        );
    }

    #[test]
    fn bars_label_each_value_and_empty_data_gives_a_placeholder() {
        let values = [("hist-add cpu vjp".to_string(), 2.1), ("hist-mul cpu vjp".to_string(), 2.9)];
        for log in [false, true] {
            let svg = bars("overhead", "x", &values, Some(1.0), log).unwrap();
            assert!(svg.contains("hist-add cpu vjp") && svg.contains("hist-mul cpu vjp"));
            assert!(svg.matches("<rect").count() >= 3, "background + 2 bars");
            assert!(svg.contains(">\n2.1\n<") && svg.contains(">\n2.9\n<"), "values as ticks read: {svg}");
        }
        let empty = bars("overhead", "x", &[("nan".into(), f64::NAN)], None, false).unwrap();
        assert!(empty.contains("no values to plot"));
        // A log axis cannot show a zero ratio: it is left out, not drawn at -infinity.
        let zero = bars("memory", "x", &[("zero".into(), 0.0)], None, true).unwrap();
        assert!(zero.contains("no values to plot"));
        let labels = vec!["11-22 abc1234".to_string(), "11-23 def5678".to_string()];
        let t = trend("trend", "x", &[s("a", &[(1.0, 2.0), (2.0, 2.5)])], &labels).unwrap();
        assert!(t.contains("run (date, commit)") && t.contains("11-22 abc1234") && t.contains("11-23 def5678"));
    }
}

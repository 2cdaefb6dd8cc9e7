//! SVG charts (plotters, SVG backend only: no system font libraries; text is left to the browser).
//!
//! * [`lines`]: series of (x, y) points, each axis linear or logarithmic (runtimes against n or
//!   k, as in the thesis' figures);
//! * [`trend`]: a metric per series over the runs of a history, each run labelled with its date
//!   and commit.
//!
//! Charts are drawn at the size the report shows them ([`WIDTH`] x [`HEIGHT`] px, two side by side
//! at 1280 px), so that their text keeps its size (>= 12 px). Axes are computed from the data's
//! extremes alone, never by stepping over the data's range: a logarithmic axis is drawn as a
//! linear axis over log10 of the values, with ticks at 1, 2 and 5 times powers of ten chosen
//! from the range's decades (at most a few dozen, whatever the values, 1e-308 or 1e308 included).
//! Legends are not drawn inside the plots, where they cover data: [`legend`] renders them as
//! HTML next to the chart, in the same colours and dashes ([`color_hex`]).

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;

/// A named line: (x, y) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Twelve distinguishable colours (Tableau's 10 and two darker ones); series beyond twelve
/// repeat them, which is why charts state how many series they show.
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

/// The size a chart is drawn and shown at (px): two fit side by side in the report's 1200 px.
pub const WIDTH: u32 = 580;
pub const HEIGHT: u32 = 340;

/// Font sizes of a chart's title, axis descriptions and tick labels, as plotters takes them: it
/// writes text at 1 / 1.24 of the size given, so these are 14.5, 12.9 and 12.1 px on the page.
const TITLE_PX: u32 = 18;
const LABEL_PX: u32 = 16;
const TICK_PX: u32 = 15;

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The colour of series `i` as CSS (`#rrggbb`), for legends drawn in HTML.
pub fn color_hex(i: usize) -> String {
    let RGBColor(r, g, b) = color(i);
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A legend in HTML: one swatch (solid or dashed line in the series' colour) and name per
/// entry `(name, colour index, dashed)`. Names wrap rather than being cut.
pub fn legend(entries: &[(String, usize, bool)]) -> String {
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

/// One time unit for a chart of times in seconds: the one in which the middle of the values'
/// range (geometrically) reads between 1 and 1000, as (the factor seconds are multiplied by, its
/// name). Ticks then read `2`, `50`, `0.5` in it, not `5e-4` seconds.
pub fn time_unit(seconds: impl IntoIterator<Item = f64>) -> (f64, &'static str) {
    let logs: Vec<f64> = seconds.into_iter().filter(|s| s.is_finite() && *s > 0.0).map(f64::log10).collect();
    let (Some(lo), Some(hi)) = (logs.iter().copied().reduce(f64::min), logs.iter().copied().reduce(f64::max)) else {
        return (1e3, "ms");
    };
    match 10f64.powf((lo + hi) / 2.0) {
        m if m >= 1.0 => (1.0, "s"),
        m if m >= 1e-3 => (1e3, "ms"),
        m if m >= 1e-6 => (1e6, "µs"),
        _ => (1e9, "ns"),
    }
}

/// A chart that says there is nothing to draw (keeps the report's layout when data is missing).
pub fn placeholder(title: &str, why: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"80\" viewBox=\"0 0 {w} 80\">\
         <text x=\"10\" y=\"30\" font-family=\"sans-serif\" font-size=\"{TITLE_PX}\">{}</text>\
         <text x=\"10\" y=\"58\" font-family=\"sans-serif\" font-size=\"{LABEL_PX}\" fill=\"#555\">{}</text></svg>",
        esc(title),
        esc(why),
        w = WIDTH
    )
}

fn err(e: impl std::fmt::Display) -> String {
    format!("chart: {e}")
}

/// One axis: the coordinate range (log10 of the values on a log axis) and the tick positions in
/// those coordinates, computed from the data's extremes alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub log: bool,
    pub range: std::ops::Range<f64>,
    pub ticks: Vec<f64>,
}

impl Axis {
    /// An axis covering `lo..=hi` (finite; positive on a log axis), padded a little.
    pub fn new(lo: f64, hi: f64, log: bool) -> Axis {
        if log { Axis::log(lo.log10(), hi.log10()) } else { Axis::linear(lo, hi) }
    }

    /// A coordinate of a value (log10 on a log axis).
    pub fn at(&self, v: f64) -> f64 {
        if self.log { v.log10() } else { v }
    }

    /// The value of a coordinate, for its tick label.
    pub fn value(&self, c: f64) -> f64 {
        if self.log { 10f64.powf(c) } else { c }
    }

    /// Log axis over the decades `lo..hi` (log10 values): ticks at 1, 2 and 5 times powers of
    /// ten when the range spans at most a few decades, at every k-th power of ten beyond, and at
    /// finer steps when the range lies within one decade, so that at least two are labelled.
    fn log(lo: f64, hi: f64) -> Axis {
        let (lo, hi) = if hi - lo < 0.05 { (lo - 0.15, hi + 0.15) } else { (lo, hi) };
        let pad = (hi - lo) * 0.06;
        let range = (lo - pad)..(hi + pad);
        let (first, last) = (range.start.floor() as i64, range.end.ceil() as i64);
        let decades = (last - first).max(1);
        let inside = |c: &f64| range.contains(c);
        let at = |mantissas: &[f64], every: i64| -> Vec<f64> {
            let mut out = Vec::new();
            // Powers of ten that are multiples of `every`: at most ~10 of them, by its choice.
            let mut d = first.div_euclid(every) * every;
            while d <= last {
                out.extend(mantissas.iter().map(|m| d as f64 + m.log10()).filter(inside));
                d += every;
            }
            out
        };
        let every = [1, 2, 5, 10, 20, 50, 100, 200, 500].into_iter().find(|e| e * 8 >= decades).unwrap_or(1000);
        let mut ticks = if decades > 8 { at(&[1.0], every) } else { at(&[1.0, 2.0, 5.0], 1) };
        if ticks.len() < 3 && decades <= 8 {
            ticks = at(&[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 1);
        }
        if ticks.len() < 2 {
            // Within a fraction of a decade: both ends and the middle.
            ticks = vec![range.start + pad, (range.start + range.end) / 2.0, range.end - pad];
        }
        Axis { log: true, range, ticks }
    }

    /// Linear axis from 0 (or below, for negative values) to a little over `hi`, ticks at 1, 2 or
    /// 5 times a power of ten: about six of them.
    fn linear(lo: f64, hi: f64) -> Axis {
        let lo = lo.min(0.0);
        let hi = if hi > lo { hi } else { lo + 1.0 };
        // Near the largest doubles the width or the padded top overflow: cap them.
        let width = (hi - lo).min(f64::MAX);
        let top = (hi + width * 0.08).min(f64::MAX);
        let raw = width / 6.0;
        let power = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|s| *s >= raw).unwrap_or(10.0 * power);
        let mut ticks = Vec::new();
        let mut k = (lo / step).ceil();
        // At most ~7 steps by the choice of step; the bound keeps it so for any float.
        while k * step <= top && ticks.len() < 12 {
            ticks.push(k * step);
            k += 1.0;
        }
        Axis { log: false, range: lo..top, ticks }
    }
}

/// An axis as plotters draws it: linear over `range`, with exactly the given ticks (plotters'
/// own log coordinates step over the decades of the range to place theirs).
struct Ticked {
    range: std::ops::Range<f64>,
    ticks: Vec<f64>,
}

impl From<&Axis> for Ticked {
    fn from(a: &Axis) -> Ticked {
        Ticked { range: a.range.clone(), ticks: a.ticks.clone() }
    }
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = (v - self.range.start) / (self.range.end - self.range.start);
        let pixels = f64::from(limit.1 - limit.0) * share.clamp(-1.0, 2.0);
        limit.0 + if pixels.is_finite() { pixels.round() as i32 } else { 0 }
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.clone()
    }
}

/// The axis for finite values (positive ones on a log axis), or None without any.
fn axis_of(values: impl Iterator<Item = f64>, log: bool) -> Option<Axis> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    (lo <= hi).then(|| Axis::new(lo, hi, log))
}

/// Series drawn as lines with markers, on the given axes; points outside an axis's domain
/// (non-finite, or not positive on a log axis) are left out. Series `i` is drawn in colour `i`
/// (see [`legend`]).
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    (x_log, y_log): (bool, bool),
) -> Result<String, String> {
    let ok = |(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!x_log || *x > 0.0) && (!y_log || *y > 0.0);
    let pts = || series.iter().flat_map(|s| s.points.iter().copied()).filter(ok);
    let (Some(xa), Some(ya)) = (axis_of(pts().map(|p| p.0), x_log), axis_of(pts().map(|p| p.1), y_log)) else {
        return Ok(placeholder(title, "nothing to plot"));
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", TITLE_PX))
            .margin(10)
            .margin_right(18)
            .x_label_area_size(44)
            .y_label_area_size(62)
            .build_cartesian_2d(Ticked::from(&xa), Ticked::from(&ya))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .axis_desc_style(("sans-serif", LABEL_PX))
            .label_style(("sans-serif", TICK_PX))
            .x_label_formatter(&|c| tick(xa.value(*c)))
            .y_label_formatter(&|c| tick(ya.value(*c)))
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let c = color(i);
            let p: Vec<(f64, f64)> = s.points.iter().filter(|p| ok(p)).map(|&(x, y)| (xa.at(x), ya.at(y))).collect();
            chart.draw_series(LineSeries::new(p.clone(), c.stroke_width(2))).map_err(err)?;
            chart.draw_series(p.into_iter().map(|pt| Circle::new(pt, 3, c.filled()))).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A metric per series over the runs of a history: x = run index 1..=runs, each labelled by
/// `run_labels[i - 1]` (date, time and commit; as many labelled, evenly spread, as fit side by
/// side without touching). Series `i` is drawn
/// in colour `i` (see [`legend`]); `log` puts the metric on a log axis.
pub fn trend(
    title: &str,
    y_label: &str,
    series: &[Series],
    run_labels: &[String],
    log: bool,
) -> Result<String, String> {
    let runs = run_labels.len();
    let ok = |(_, y): &(f64, f64)| y.is_finite() && (!log || *y > 0.0);
    let Some(ya) = axis_of(series.iter().flat_map(|s| s.points.iter().copied()).filter(ok).map(|p| p.1), log) else {
        return Ok(placeholder(title, "no history to plot"));
    };
    if runs == 0 {
        return Ok(placeholder(title, "no history to plot"));
    }
    // Tick labels are about 7 px per character at their size; the plot is the chart less its
    // margins and y-axis area (about 112 px).
    let longest = run_labels.iter().map(|l| l.chars().count()).max().unwrap_or(1);
    let fit = ((WIDTH as usize - 112) / (longest * 7 + 14)).max(2);
    let step = runs.div_ceil(fit).max(1);
    let xticks: Vec<f64> = (1..=runs).filter(|i| (i - 1) % step == 0).map(|i| i as f64).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", TITLE_PX))
            .margin(10)
            .margin_right(40)
            .x_label_area_size(50)
            .y_label_area_size(62)
            .build_cartesian_2d(Ticked { range: 0.5..runs as f64 + 0.5, ticks: xticks }, Ticked::from(&ya))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("run (UTC date and time, commit), oldest first")
            .y_desc(y_label)
            .axis_desc_style(("sans-serif", LABEL_PX))
            .label_style(("sans-serif", TICK_PX))
            .x_label_formatter(&|x| run_labels.get((x.round() as usize).wrapping_sub(1)).cloned().unwrap_or_default())
            .y_label_formatter(&|c| tick(ya.value(*c)))
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let c = color(i);
            let p: Vec<(f64, f64)> = s.points.iter().filter(|p| ok(p)).map(|&(x, y)| (x, ya.at(y))).collect();
            chart.draw_series(LineSeries::new(p.clone(), c.stroke_width(2))).map_err(err)?;
            chart.draw_series(p.into_iter().map(|pt| Circle::new(pt, 3, c.filled()))).map_err(err)?;
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
        assert_eq!(tick(1e308), "1e308");
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

    fn labels(axis: &Axis) -> Vec<String> {
        axis.ticks.iter().map(|c| tick(axis.value(*c))).collect()
    }

    /// Log axes label their ticks: 1-2-5 steps over a few decades, finer within one decade,
    /// every few powers of ten over many; the values are the data's, whatever their size.
    #[test]
    fn log_axes_have_labelled_ticks_at_any_scale() {
        assert_eq!(
            labels(&Axis::new(10.0, 1e6, true)),
            [
                "10", "20", "50", "100", "200", "500", "1000", "2000", "5000", "1e4", "2e4", "5e4", "1e5", "2e5",
                "5e5", "1e6"
            ]
        );
        // 1.2 .. 1.9: within one decade, still labelled.
        assert_eq!(labels(&Axis::new(1.2, 1.9, true)), ["1.2", "1.51", "1.9"]);
        assert_eq!(labels(&Axis::new(1.2, 4.0, true)), ["1.5", "2", "3", "4"]);
        // 1e-300 .. 1e300: one tick every 100 decades.
        assert_eq!(
            labels(&Axis::new(1e-300, 1e300, true)),
            ["1e-300", "1e-200", "1e-100", "1", "1e100", "1e200", "1e300"]
        );
        // One value at the top of the doubles: a finite axis around it.
        let top = Axis::new(1e308, 1e308, true);
        assert!(top.range.start.is_finite() && top.range.end.is_finite() && top.range.contains(&308.0));
        assert!(!top.ticks.is_empty());
        let lin = Axis::new(0.0, 1e308, false);
        assert!(lin.range.end.is_finite() && lin.ticks.len() >= 3, "{lin:?}");
        assert_eq!(labels(&Axis::new(0.0, 2.3, false)), ["0", "0.5", "1", "1.5", "2"]);
    }

    #[test]
    fn line_charts_label_both_axes_and_draw_every_series() {
        let svg = lines(
            "hist-add vs k",
            "k (bins)",
            "vjp (ms)",
            &[s("cpu f32 auto", &[(10.0, 1.0), (1e3, 2.0), (1e6, 9.0)]), s("cpu f64 auto", &[(10.0, 2.0), (1e3, 4.0)])],
            (true, true),
        )
        .unwrap();
        assert!(svg.starts_with("<svg"));
        for needle in ["hist-add vs k", "k (bins)", "vjp (ms)", ">\n1000\n<", ">\n1e6\n<"] {
            assert!(svg.contains(needle), "missing {needle}");
        }
        // The second series in the second colour (plotters writes it in capitals).
        assert!(svg.contains(&color_hex(1).to_uppercase()), "{svg}");
        let empty = lines("t", "x", "y", &[s("nan", &[(f64::NAN, 1.0)])], (false, false)).unwrap();
        assert!(empty.contains("nothing to plot"));
        // A log axis cannot show a zero: left out, not drawn at -infinity.
        let zero = lines("t", "x", "y", &[s("zero", &[(1.0, 0.0)])], (false, true)).unwrap();
        assert!(zero.contains("nothing to plot"));
        let labels = vec!["11-22 abc1234".to_string(), "11-23 def5678".to_string()];
        let t = trend("trend", "x", &[s("a", &[(1.0, 2.0), (2.0, 2.5)])], &labels, false).unwrap();
        assert!(
            t.contains("run (UTC date and time, commit)") && t.contains("11-22 abc1234") && t.contains("11-23 def5678")
        );
    }
}

//! The self-contained HTML report: one `index.html` with inline SVG and CSS, no JavaScript and no
//! network access, rebuilt from result files alone.
//!
//! It reads like a dashboard, most urgent first: the verdict (the gate's, against the same
//! baseline `adgauge gate` takes, with the speed verdicts counted and the worst regressions),
//! the findings grouped per cause, a table of every case with its change since the baseline
//! (ratio of medians, bootstrap interval, verdict) and its samples' spread, AD overhead as
//! workload × rule grids per mode, a status grid (workload × tool × mode), the tools side by
//! side, trends over the history's runs, scaling charts per workload, the environment of the
//! runs compared, and, collapsed, the cases' peak memory and the validation table. Everything is
//! laid out for 1280 px: text of 12 px or more, charts drawn at the size shown.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::charts::{self, Series};
use crate::gate::{Baseline, GateConfig, GateReport, gate_runs};
use crate::roofline::{self, Roofline};
use crate::schema::{ResultRow, RunInfo, Status, Timing};
use crate::verdict::{Change, Verdict};

/// HTML text, control characters escaped (a tool's stderr in a message): `crate::text::html`.
fn esc(s: &str) -> String {
    crate::text::html(s)
}

fn anchor(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

fn ms(x: Option<f64>) -> String {
    x.map(|s| charts::tick(s * 1e3)).unwrap_or_else(|| "–".into())
}

fn ratio(x: Option<f64>) -> String {
    x.map(charts::tick).unwrap_or_else(|| "–".into())
}

fn chart_or_note(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| format!("<p class=\"note\">{}</p>", esc(&e)))
}

const CSS: &str = "body{font-family:system-ui,sans-serif;font-size:14px;margin:0 auto;max-width:1200px;padding:0 16px;color:#222}\
h1{margin:16px 0 4px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin:28px 0 8px}\
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ddd;padding:2px 5px;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}.ok{color:#1a7f37}.bad{color:#c62828;font-weight:bold}\
.better{color:#1a7f37;font-weight:bold}.nj{color:#8a6d00}.skip{color:#888}.warn{color:#9a6700}.note{color:#555}\
nav{margin:6px 0}nav a{margin-right:12px}small{color:#555;font-size:11px}\
.charts{display:flex;flex-wrap:wrap;gap:4px 16px}.chart{width:580px}.chart>svg{display:block}\
.grids{display:flex;flex-wrap:wrap;gap:0 16px;align-items:flex-start}table.grid td{min-width:56px}\
table.changes td{white-space:nowrap}\
.verdict{font-size:14px;padding:10px 14px;border-radius:6px;margin:12px 0}.verdict b{font-size:19px}\
.verdict.pass{background:#e6f4ea;color:#1a5f2f}.verdict.fail{background:#fdecea;color:#8e1c1c}\
.verdict.warn{background:#fff8e1;color:#6b4a00}.verdict ul{margin:6px 0 0}.verdict table{background:#fff;color:#222}\
ul.legend{list-style:none;padding:0;margin:0 0 10px;font-size:12px;columns:2}ul.legend li{break-inside:avoid}\
ul.legend svg{margin-right:4px;vertical-align:middle}td.grid{font-family:ui-monospace,monospace;text-align:center}\
.diff td{background:#fff8e1}details summary{cursor:pointer;margin:8px 0}\
.scroll{overflow-x:auto;max-width:100%}.scroll>table{margin:0}.scroll{margin:8px 0}\
.scroll td:first-child,.scroll th:first-child{white-space:nowrap;position:sticky;left:0;background:#fff;z-index:1}\
.scroll th:first-child{background:#f4f4f4}td.wrap,table.changes td.wrap{white-space:normal;min-width:240px}td.env{overflow-wrap:anywhere;min-width:300px;max-width:520px}";

/// Mean of logs (geometric mean) of positive finite values.
fn geo_mean(xs: &[f64]) -> Option<f64> {
    let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite() && *x > 0.0).collect();
    if v.is_empty() { None } else { Some((v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()) }
}

fn status_class(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Skipped => "skip",
        _ => "bad",
    }
}

/// The parameter that varies within a group of rows (n or k), if any.
fn varying(rows: &[&ResultRow]) -> Option<&'static str> {
    ["k", "n"].into_iter().find(|p| rows.iter().filter_map(|r| r.params.get(*p)).collect::<BTreeSet<_>>().len() > 1)
}

/// The runs as a trend chart labels them: date and time (month-day hour:minute, UTC) and short
/// commit; runs of one day and commit are told apart by their time, and runs of one minute by
/// their seconds.
fn run_labels(runs: &[&RunInfo]) -> Vec<String> {
    let label = |info: &RunInfo, end: usize| {
        let when = info.timestamp.get(5..end).map(|t| t.replace('T', " ")).unwrap_or_else(|| info.timestamp.clone());
        let rev: String = info.git_revision.chars().take(7).collect();
        format!("{when} {rev}")
    };
    let minutes: Vec<String> = runs.iter().map(|i| label(i, 16)).collect();
    runs.iter()
        .zip(&minutes)
        .map(|(info, m)| if minutes.iter().filter(|x| *x == m).count() > 1 { label(info, 19) } else { m.clone() })
        .collect()
}

/// A case without its tool: workload and parameters, dtype and rule (rows of the same case by
/// different tools share it).
fn case_without_tool(r: &ResultRow) -> String {
    let p: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    named_case(&r.workload, &p, &r.dtype, &r.rule)
}

/// `workload[params] dtype rule`, leaving out what says nothing: no brackets without
/// parameters, no rule for a workload that has none (`-`): `lstm f64`, not `lstm[] f64 -`.
fn named_case(workload: &str, params: &[String], dtype: &str, rule: &str) -> String {
    let mut s = workload.to_string();
    if !params.is_empty() {
        s.push_str(&format!("[{}]", params.join(",")));
    }
    s.push(' ');
    s.push_str(dtype);
    if rule != "-" && !rule.is_empty() {
        s.push(' ');
        s.push_str(rule);
    }
    s
}

/// How one mode of a row ended, for the status grid.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ModeState {
    Ok,
    NotRun,
    Skipped,
    Failed,
}

/// The mode's state: a failed check counts against the modes it names (`fd-vjp` → vjp; checks
/// naming no mode, such as the dot-product test or ties, against both derivatives).
fn mode_state(r: &ResultRow, mode: &str) -> ModeState {
    let timed = match mode {
        "primal" => r.primal.is_some(),
        "vjp" => r.vjp.is_some(),
        _ => r.jvp.is_some(),
    };
    match r.status {
        Status::Error | Status::Timeout => ModeState::Failed,
        Status::Skipped => ModeState::Skipped,
        Status::Failed => {
            let names_mode = |name: &str| ["primal", "vjp", "jvp"].iter().any(|m| name.contains(m));
            let hit = r
                .checks
                .iter()
                .filter(|c| !c.passed)
                .any(|c| if names_mode(&c.name) { c.name.contains(mode) } else { mode != "primal" });
            // A failed row whose failure names no check (e.g. a tool's bad output) fails every mode.
            if hit || r.checks.iter().all(|c| c.passed) { ModeState::Failed } else { ModeState::Ok }
        }
        Status::Ok if timed => ModeState::Ok,
        Status::Ok => ModeState::NotRun,
    }
}

/// The exit code the gate gives a report (0 pass, 1 failed, 2 nothing compared, 3 slower).
fn exit_code(report: &GateReport) -> u8 {
    if report.failed() {
        1
    } else if report.compared == 0 {
        2
    } else if report.slower() {
        3
    } else {
        0
    }
}

/// Renders the report for a history (oldest run first): the newest run, compared with
/// `baseline` the way `adgauge gate` compares them (the gate's rules and default thresholds),
/// or on its own without one.
pub fn render(history: &[(RunInfo, Vec<ResultRow>)], baseline: Option<&Baseline>) -> String {
    render_with_paired(history, baseline, None)
}

/// A paired comparison (`adgauge compare`) as read from its file.
pub type Paired = (crate::paired::PairedHeader, Vec<crate::paired::PairedRow>);

/// [`render`] with the newest paired comparison of the history, shown in its own section.
pub fn render_with_paired(
    history: &[(RunInfo, Vec<ResultRow>)],
    baseline: Option<&Baseline>,
    paired: Option<&Paired>,
) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>adgauge report</title><style>{CSS}</style></head><body>"
    );
    let Some((info, rows)) = history.last() else {
        h.push_str("<h1>adgauge report</h1><p>The history holds no runs.</p></body></html>");
        return h;
    };
    let report = baseline.map(|b| gate_runs(b, info, rows, &GateConfig::default()));
    let workloads: BTreeSet<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    let _ = write!(
        h,
        "<h1>adgauge report</h1><p class=\"note\">Run <b>{}</b> (suite {}, {}, commit {}, {}), the newest of {} in this history.</p>",
        esc(&info.run_id),
        esc(if info.suite.is_empty() { "?" } else { &info.suite }),
        esc(&info.timestamp),
        esc(&info.git_revision),
        esc(&info.machine),
        history.len()
    );
    verdict(&mut h, rows, baseline, report.as_ref());
    // The sections in order, each its anchor (the section's `id` and its entry in the navigation)
    // and its writer: the navigation is made from this one list, so it names every section.
    type Section<'a> = (&'static str, Box<dyn Fn(&mut String) + 'a>);
    let mut sections: Vec<Section<'_>> = Vec::new();
    if let Some(p) = paired {
        sections.push(("paired", Box::new(move |h: &mut String| paired_section(h, p))));
    }
    let report = report.as_ref();
    let roofline = info.roofline.as_ref();
    let workloads = &workloads;
    let always: [Section<'_>; 10] = [
        ("findings", Box::new(move |h: &mut String| findings(h, rows, report))),
        ("changes", Box::new(move |h: &mut String| changes(h, rows, report, roofline))),
        ("overheads", Box::new(move |h: &mut String| overhead_grids(h, rows))),
        ("grid", Box::new(move |h: &mut String| status_grid(h, rows, workloads))),
        ("tools", Box::new(move |h: &mut String| tools_compared(h, rows))),
        ("trends", Box::new(move |h: &mut String| trends(h, history, workloads))),
        ("scaling", Box::new(move |h: &mut String| scaling(h, rows, workloads))),
        ("environment", Box::new(move |h: &mut String| environment(h, info, rows, baseline))),
        ("memory", Box::new(move |h: &mut String| memory(h, rows))),
        ("validation", Box::new(move |h: &mut String| validation(h, rows))),
    ];
    sections.extend(always);
    h.push_str("<nav>");
    for (anchor, _) in &sections {
        let _ = write!(h, "<a href=\"#{anchor}\">{anchor}</a>");
    }
    h.push_str("</nav>");
    for (_, section) in &sections {
        section(&mut h);
    }
    h.push_str(
        "<p class=\"note\">Generated by adgauge from result files alone; no scripts, no network.</p></body></html>",
    );
    boxed_tables(&h)
}

/// Every table in its own box that scrolls sideways, its first column pinned: however wide a
/// table grows (long case names, many columns), the page itself never gets wider than the
/// window (1280 px screens included).
fn boxed_tables(html: &str) -> String {
    html.replace("<table", "<div class=\"scroll\"><table").replace("</table>", "</table></div>")
}

/// The paired comparison: the baseline and the candidate timed interleaved in one job; one row
/// per case and mode, regressions first, with the change, its interval and the verdict.
fn paired_section(h: &mut String, (header, rows): &Paired) {
    let count = |v: &str| rows.iter().filter(|r| r.verdict == v).count();
    let _ = write!(
        h,
        "<h2 id=\"paired\">Paired comparison</h2><p class=\"note\">{} against the baseline {}, timed interleaved in fresh pairs of processes ({}, suite {}, {} on {}, load {} to {}): <b>{} regressed</b>, {} improved, {} no change, {} not judged of {} timing(s). A change is the candidate's time per baseline time, the median over the pairs, with its {:.0}% interval; regressed means beyond {}x with the interval above it and a sign-test p under {}.</p>",
        esc(&header.candidate),
        esc(&header.baseline),
        esc(&header.timestamp),
        esc(&header.suite),
        esc(&header.cpu_model),
        esc(&header.machine),
        header.load_start.map_or("?".into(), |l| format!("{l:.2}")),
        header.load_end.map_or("?".into(), |l| format!("{l:.2}")),
        count("regressed"),
        count("improved"),
        count("no change"),
        count("not judged"),
        rows.len(),
        header.confidence * 100.0,
        header.max_slowdown,
        header.alpha,
    );
    if !header.complete {
        h.push_str("<p class=\"warn\">This comparison was interrupted: the rows are the cases it finished.</p>");
    }
    let rank = |v: &str| match v {
        "regressed" => 0,
        "not judged" => 1,
        "improved" => 2,
        _ => 3,
    };
    let mut sorted: Vec<&crate::paired::PairedRow> = rows.iter().collect();
    sorted.sort_by_key(|r| rank(&r.verdict));
    h.push_str("<table><tr><th class=\"l\">case</th><th class=\"l\">mode</th><th>baseline ms</th><th>candidate ms</th><th>change</th><th>interval</th><th>pairs</th><th class=\"l\">verdict</th></tr>");
    let ms = |x: Option<f64>| x.map_or("–".to_string(), |s| format!("{:.4}", s * 1e3));
    for r in sorted {
        let class = match r.verdict.as_str() {
            "regressed" => " class=\"bad\"",
            "improved" => " class=\"better\"",
            _ => "",
        };
        let interval = match (r.ci_low, r.ci_high) {
            (Some(lo), Some(hi)) => format!("[{lo:.3}, {hi:.3}]"),
            _ => "–".into(),
        };
        let _ = write!(
            h,
            "<tr{class}><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{interval}</td><td>{}</td><td class=\"l\" title=\"{}\">{}</td></tr>",
            esc(&r.case_id),
            esc(&r.mode),
            ms(r.baseline_s),
            ms(r.candidate_s),
            r.ratio.map_or("–".into(), |x| format!("{x:.3}x")),
            r.pairs,
            esc(&r.why),
            esc(&r.verdict),
        );
    }
    h.push_str("</table>");
}

/// The first thing on the page: the gate's verdict against the baseline, the cases' statuses,
/// the speed verdicts counted (not judged included), and the worst regressions.
fn verdict(h: &mut String, rows: &[ResultRow], baseline: Option<&Baseline>, report: Option<&GateReport>) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *counts.entry(r.status.name()).or_default() += 1;
    }
    let n = |s: &str| counts.get(s).copied().unwrap_or(0);
    let broken = n("failed") + n("error") + n("timeout");
    let (class, headline) = match report {
        Some(r) => {
            let code = exit_code(r);
            let class = match code {
                0 if r.count(Verdict::NotJudged) == 0 => "pass",
                0 | 2 | 3 => "warn",
                _ => "fail",
            };
            (class, r.headline(code))
        }
        None if broken > 0 => ("fail", format!("FAIL: {broken} case(s) failed, errored or timed out")),
        None => ("warn", "PASS on checks; speed NOT JUDGED: no earlier run of this suite to compare with".into()),
    };
    let _ = write!(
        h,
        "<div class=\"verdict {class}\" id=\"verdict\"><b>{}</b><ul><li>{} cases: {} ok, {} failed, {} error, {} timeout, {} skipped</li>",
        esc(&headline),
        rows.len(),
        n("ok"),
        n("failed"),
        n("error"),
        n("timeout"),
        n("skipped")
    );
    if let (Some(b), Some(r)) = (baseline, report) {
        let _ = write!(
            h,
            "<li>against {}: {} case(s) compared, {} finding(s) in {} group(s), {} note(s)</li><li>{}",
            esc(&b.label),
            r.compared,
            r.findings.len(),
            r.groups(false).len(),
            r.notes.len(),
            esc(&r.speed_summary())
        );
        if r.count(Verdict::NotJudged) > 0 {
            let _ = write!(h, " (not judged: {})", esc(&r.not_judged_reasons()));
        }
        let _ = write!(
            h,
            "; ratios of medians with {:.0}% bootstrap intervals ({} resamples)</li>",
            r.confidence * 100.0,
            r.resamples
        );
    }
    if let Some(w) = report.and_then(GateReport::both_ways) {
        let _ = write!(h, "<li><b>warning:</b> {}</li>", esc(&w));
    }
    if let Some(w) = report.and_then(|r| r.machine_changed.as_ref()) {
        let _ = write!(h, "<li><b>warning:</b> {}</li>", esc(w));
    }
    h.push_str("</ul>");
    if let Some(r) = report {
        let mut regressed: Vec<&Change> = r.changes.iter().filter(|c| c.verdict == Verdict::Regressed).collect();
        regressed.sort_by(|a, b| b.ratio.total_cmp(&a.ratio));
        if !regressed.is_empty() {
            let _ = write!(
                h,
                "<table class=\"top\"><tr><th class=\"l\">regressed ({})</th><th>mode</th><th>baseline ms</th><th>now ms</th><th>ratio [CI]</th></tr>",
                regressed.len()
            );
            for c in regressed.iter().take(10) {
                let _ = write!(
                    h,
                    "<tr><td class=\"l\"><a href=\"#c-{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class=\"bad\">{}</td></tr>",
                    anchor(&c.case_id),
                    esc(&c.case_id),
                    c.mode,
                    ms(Some(c.baseline_s)),
                    ms(Some(c.current_s)),
                    esc(&c.ratio_text())
                );
            }
            if regressed.len() > 10 {
                let _ = write!(
                    h,
                    "<tr><td class=\"l\" colspan=\"5\">{} more in the table of changes</td></tr>",
                    regressed.len() - 10
                );
            }
            h.push_str("</table>");
        }
    }
    h.push_str("</div>");
}

/// The gate's findings, one line per cause (a crashing tool's cases together), then the notes;
/// without a baseline, the run's broken cases. Skipped cases follow, collapsed.
fn findings(h: &mut String, rows: &[ResultRow], report: Option<&GateReport>) {
    h.push_str("<h2 id=\"findings\">Findings</h2>");
    let line = |h: &mut String, class: &str, kind: &str, summary: &str, cases: &[String]| {
        let shown: Vec<String> =
            cases.iter().take(8).map(|c| format!("<a href=\"#c-{}\">{}</a>", anchor(c), esc(c))).collect();
        let more = if cases.len() > 8 { format!(" and {} more", cases.len() - 8) } else { String::new() };
        let list =
            if cases.len() > 1 { format!("<br><small>{}{more}</small>", shown.join(", ")) } else { String::new() };
        let _ =
            write!(h, "<tr><td class=\"l {class}\">{}</td><td class=\"l\">{}{list}</td></tr>", esc(kind), esc(summary));
    };
    match report {
        Some(r) => {
            let (groups, notes) = (r.groups(false), r.groups(true));
            if groups.is_empty() && notes.is_empty() {
                // "Nothing regressed" only where every timing was judged.
                let speed = if r.count(Verdict::NotJudged) == 0 { ", nothing regressed" } else { "" };
                let _ = write!(h, "<p class=\"ok\">None: the checks hold, nothing is missing{speed}.</p>");
            } else {
                h.push_str("<table><tr><th class=\"l\">kind</th><th class=\"l\">what (cases)</th></tr>");
                for g in groups.iter().filter(|g| g.kind != "slower") {
                    line(h, "bad", g.kind, &g.summary, &g.cases);
                }
                // Regressions have their own tables (the verdict's, the table of changes).
                let slower: Vec<String> =
                    groups.iter().filter(|g| g.kind == "slower").flat_map(|g| g.cases.clone()).collect();
                if !slower.is_empty() {
                    let summary = format!(
                        "{} timing(s) regressed: the largest in the verdict above, each with its interval in the table of changes",
                        slower.len()
                    );
                    line(h, "warn", "slower", &summary, &[]);
                }
                for g in &notes {
                    line(h, "note", &format!("note: {}", g.kind), &g.summary, &g.cases);
                }
                h.push_str("</table>");
            }
        }
        None => {
            let broken: Vec<&ResultRow> =
                rows.iter().filter(|r| matches!(r.status, Status::Failed | Status::Error | Status::Timeout)).collect();
            if broken.is_empty() {
                h.push_str("<p class=\"ok\">None: every case that ran passed its checks.</p>");
            } else {
                h.push_str("<table><tr><th class=\"l\">kind</th><th class=\"l\">what (cases)</th></tr>");
                for r in broken {
                    let failing: Vec<String> = r
                        .checks
                        .iter()
                        .filter(|c| !c.passed)
                        .map(|c| format!("{} worst {:.2e} > {:.0e}", c.name, c.worst, c.tolerance))
                        .collect();
                    let why = [r.message.clone().unwrap_or_default(), failing.join("; ")]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(" — ");
                    line(h, "bad", r.status.name(), &format!("{}: {why}", r.case_id), &[]);
                }
                h.push_str("</table>");
            }
        }
    }
    let skipped: Vec<&ResultRow> = rows.iter().filter(|r| r.status == Status::Skipped).collect();
    if !skipped.is_empty() {
        // One line per tool and reason: a tool that could not start is said once, with the
        // cases it took with it.
        let mut reasons: Vec<((&str, &str), Vec<String>)> = Vec::new();
        for r in &skipped {
            let key = (r.backend.as_str(), r.message.as_deref().unwrap_or("skipped"));
            match reasons.iter_mut().find(|(k, _)| *k == key) {
                Some((_, cases)) => cases.push(case_without_tool(r)),
                None => reasons.push((key, vec![case_without_tool(r)])),
            }
        }
        let _ = write!(
            h,
            "<details><summary>{} skipped case(s) (unsupported, or a tool unavailable), for {} reason(s)</summary><table><tr><th class=\"l\">tool</th><th class=\"l\">why</th><th class=\"l\">cases</th></tr>",
            skipped.len(),
            reasons.len()
        );
        for ((tool, why), cases) in reasons {
            let shown: Vec<String> = cases.iter().take(6).map(|c| esc(c)).collect();
            let more = if cases.len() > 6 { format!(" and {} more", cases.len() - 6) } else { String::new() };
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l skip wrap\">{}</td><td class=\"l wrap\">{} case(s): <small>{}{more}</small></td></tr>",
                esc(tool),
                esc(why),
                cases.len(),
                shown.join(", ")
            );
        }
        h.push_str("</table></details>");
    }
}

/// A timing's spread: the samples' (max - min) / median, and their count.
/// The sample count is shown where it differs from `usual` (the table's note states that one).
fn spread(t: &Timing, usual: usize) -> String {
    let n = t.sample_s.len().max(t.samples);
    let count = if n == usual { String::new() } else { format!(" n={n}") };
    if t.median_s > 0.0 && t.max_s.is_finite() && t.min_s.is_finite() {
        format!("±{}%{count}", charts::tick(50.0 * (t.max_s - t.min_s) / t.median_s))
    } else {
        count.trim_start().to_string()
    }
}

/// The most common sample count of the rows' timings.
fn usual_samples(rows: &[&ResultRow]) -> usize {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for t in rows.iter().flat_map(|r| [&r.primal, &r.vjp, &r.jvp]).flatten() {
        *counts.entry(t.sample_s.len().max(t.samples)).or_default() += 1;
    }
    counts.into_iter().max_by_key(|(n, c)| (*c, *n)).map_or(0, |(n, _)| n)
}

/// Every case: per mode, the median now, its spread, and the change against the baseline
/// (ratio of medians, bootstrap interval, verdict); regressions first, then what could not be
/// judged, each by ratio. Where the run has histograms, a `roofline` column: each histogram
/// primal's achieved bandwidth and its fraction of the run's measured sequential read rate.
fn changes(h: &mut String, rows: &[ResultRow], report: Option<&GateReport>, roof: Option<&Roofline>) {
    const MODES: [&str; 3] = ["primal", "vjp", "jvp"];
    let by_case: BTreeMap<(&str, &str), &Change> = report
        .map(|r| r.changes.iter().map(|c| ((c.case_id.as_str(), c.mode.as_str()), c)).collect())
        .unwrap_or_default();
    let worst = |r: &ResultRow| {
        MODES
            .iter()
            .filter_map(|m| by_case.get(&(r.case_id.as_str(), *m)))
            .map(|c| (c.verdict, -c.ratio))
            .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
    };
    let fixed = fixed_params(rows);
    let mut sorted: Vec<&ResultRow> = rows.iter().filter(|r| r.status != Status::Skipped).collect();
    let usual = usual_samples(&sorted);
    // Cases with a verdict first (worst verdict, then largest ratio), then the rest in run order.
    sorted.sort_by(|a, b| match (worst(a), worst(b)) {
        (Some(x), Some(y)) => x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    h.push_str("<h2 id=\"changes\">Changes since the baseline</h2>");
    let histograms = sorted.iter().any(|r| roofline::is_histogram(r));
    let roofline_note = if histograms {
        " Roofline: a histogram primal's achieved GB/s (n × (index + value bytes) + 2 × k × value bytes over its median) and its fraction of the run's measured sequential read bandwidth (– where the run measured none, or the tool computes on another device); then, where the run measured random updates at the case's k, the bound: the time the slower ceiling allows (those bytes at the sequential rate, or the in-range elements at the update rate) over the median."
    } else {
        ""
    };
    let _ = write!(
        h,
        "<p class=\"note\">Per case and mode: the median time now (ms), the samples' spread ((max - min) / 2 over the median) and count, and the change against the baseline: current / baseline median with its bootstrap interval, coloured by verdict (<span class=\"bad\">regressed</span>, <span class=\"better\">improved</span>, no change, <span class=\"nj\">not judged</span>: hover for why). {} cases, {usual} samples per mode unless said (n); regressions first.{}{roofline_note}</p>",
        sorted.len(),
        fixed_note(&fixed)
    );
    h.push_str("<table class=\"changes\"><tr><th class=\"l\">case</th><th class=\"l\">tool</th>");
    for m in MODES {
        let _ = write!(h, "<th>{m} ms</th><th>{m} change</th>");
    }
    if histograms {
        h.push_str("<th>roofline</th>");
    }
    h.push_str("<th class=\"l\">status</th></tr>");
    for r in sorted {
        let _ = write!(
            h,
            "<tr id=\"c-{}\"><td class=\"l\">{}</td><td class=\"l\">{}</td>",
            anchor(&r.case_id),
            esc(&case_label(r, &fixed)),
            esc(&r.backend)
        );
        for (m, t) in MODES.iter().zip([&r.primal, &r.vjp, &r.jvp]) {
            match t {
                Some(t) => {
                    let _ = write!(h, "<td>{} <small>{}</small></td>", ms(Some(t.median_s)), esc(&spread(t, usual)));
                }
                None => h.push_str("<td>–</td>"),
            }
            match by_case.get(&(r.case_id.as_str(), *m)) {
                Some(c) => {
                    let class = match c.verdict {
                        Verdict::Regressed => "bad",
                        Verdict::Improved => "better",
                        Verdict::NoChange => "",
                        Verdict::NotJudged => "nj",
                    };
                    let text = match c.ci {
                        Some((lo, hi)) => {
                            format!("{}x [{}, {}]", charts::tick(c.ratio), charts::tick(lo), charts::tick(hi))
                        }
                        None => format!("{}x", charts::tick(c.ratio)),
                    };
                    let _ = write!(
                        h,
                        "<td class=\"{class}\" title=\"{}: {}\">{}</td>",
                        c.verdict.name(),
                        esc(&c.why),
                        esc(&text)
                    );
                }
                None => h.push_str("<td>–</td>"),
            }
        }
        if histograms {
            let cell = match roofline::achieved_gb_s(r) {
                Some(_) => roofline::cell(r, roof).replace(" -", " –"),
                None => "–".into(),
            };
            let _ = write!(h, "<td>{}</td>", esc(&cell));
        }
        let _ = write!(
            h,
            "<td class=\"l wrap {}\">{}</td></tr>",
            status_class(r.status),
            esc(&format!("{}{}", r.status.name(), r.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default()))
        );
    }
    h.push_str("</table>");
}

/// Per workload of several cases, the parameters with one value in all of them: labels leave
/// them out (a note says them), so that tables and legends fit the page.
type Fixed = BTreeMap<String, BTreeMap<String, String>>;

fn fixed_params(rows: &[ResultRow]) -> Fixed {
    let mut values: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    let mut cases: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *cases.entry(&r.workload).or_default() += 1;
        for (k, v) in &r.params {
            values.entry(&r.workload).or_default().entry(k).or_default().insert(v);
        }
    }
    let mut fixed = Fixed::new();
    for (w, params) in values {
        if cases[w] < 2 {
            continue;
        }
        for (k, vs) in params {
            let present = rows.iter().filter(|r| r.workload == w && r.params.contains_key(k)).count();
            if vs.len() == 1 && present == cases[w] {
                fixed
                    .entry(w.to_string())
                    .or_default()
                    .insert(k.to_string(), vs.iter().next().expect("one").to_string());
            }
        }
    }
    fixed
}

/// The note that says which parameters the labels leave out.
fn fixed_note(fixed: &Fixed) -> String {
    // Workloads with the same fixed parameters together: `hist-add, hist-mul: n=100000 oob=0.05`.
    let mut by_set: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (w, params) in fixed {
        let set: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        by_set.entry(set.join(" ")).or_default().push(w);
    }
    if by_set.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by_set.iter().map(|(set, ws)| format!("{}: {set}", ws.join(", "))).collect();
    format!(" The same in every case of the workload, so left out of the labels: {}.", esc(&parts.join("; ")))
}

/// A case as the table names it: workload, the parameters that vary, dtype, rule, and the rule
/// `auto` ran.
fn case_label(r: &ResultRow, fixed: &Fixed) -> String {
    let omit = fixed.get(&r.workload);
    let p: Vec<String> = r
        .params
        .iter()
        .filter(|(k, _)| !omit.is_some_and(|o| o.contains_key(*k)))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let case = named_case(&r.workload, &p, &r.dtype, &r.rule);
    match r.auto_took() {
        Some(used) => format!("{case} (auto ran {used})"),
        None => case,
    }
}

/// A heat colour for a ratio: white at 1x, deeper red up to 8x and beyond, green below 1x.
fn heat(x: f64) -> String {
    let t = (x.max(1e-300).log2() / 3.0).clamp(-1.0, 1.0);
    let (r, g, b) = if t >= 0.0 {
        (255.0, 255.0 - 150.0 * t, 255.0 - 170.0 * t)
    } else {
        (255.0 + 110.0 * t, 255.0 + 20.0 * t, 255.0 + 110.0 * t)
    };
    format!("#{:02x}{:02x}{:02x}", r as u8, g as u8, b as u8)
}

/// AD overhead and memory as workload × rule grids, one per mode: each cell the geometric mean
/// over the group's cases of derivative / primal (time or peak memory) on the same tool in the
/// same run, shaded from 1x (white) to 8x (red). Groups with a failed check are marked and kept.
fn overhead_grids(h: &mut String, rows: &[ResultRow]) {
    h.push_str("<h2 id=\"overheads\">AD overhead</h2><p class=\"note\">Geometric mean over the cases of each workload, tool and rule: derivative / primal, in time and in peak memory (inputs and outputs included). White is 1x, red 8x or more; * marks a group with a failed check (kept), ~ one whose time ratio rests on a noisy timing (samples spread over more than ±25% of their median: read it with care). Hover a cell for its case count.</p><div class=\"grids\">");
    let ran: Vec<&ResultRow> = rows.iter().filter(|r| matches!(r.status, Status::Ok | Status::Failed)).collect();
    let rules: BTreeSet<&str> = ran.iter().map(|r| r.rule.as_str()).collect();
    let groups: BTreeSet<(&str, &str)> = ran.iter().map(|r| (r.workload.as_str(), r.backend.as_str())).collect();
    type Pick = fn(&ResultRow) -> Option<f64>;
    // The timings a time ratio rests on: the primal and the derivative (none for memory).
    type Timings = fn(&ResultRow) -> [&Option<Timing>; 2];
    let grids: [(&str, Pick, Option<Timings>); 4] = [
        ("vjp / primal time", ResultRow::vjp_overhead, Some(|r| [&r.primal, &r.vjp])),
        ("jvp / primal time", ResultRow::jvp_overhead, Some(|r| [&r.primal, &r.jvp])),
        ("vjp / primal memory", ResultRow::vjp_memory_ratio, None),
        ("jvp / primal memory", ResultRow::jvp_memory_ratio, None),
    ];
    let noisy =
        |t: &Option<Timing>| t.as_ref().is_some_and(|t| t.median_s > 0.0 && (t.max_s - t.min_s) / t.median_s > 0.5);
    for (title, pick, timings) in grids {
        if !ran.iter().any(|r| pick(r).is_some_and(|x| x.is_finite() && x > 0.0)) {
            continue;
        }
        let _ = write!(h, "<table class=\"grid\"><tr><th class=\"l\">{title}</th>");
        for rule in &rules {
            let _ = write!(h, "<th>{}</th>", esc(rule));
        }
        h.push_str("</tr>");
        for (w, tool) in &groups {
            let _ = write!(h, "<tr><td class=\"l\">{} <small>{}</small></td>", esc(w), esc(tool));
            for rule in &rules {
                let cases: Vec<&&ResultRow> =
                    ran.iter().filter(|r| r.workload == *w && r.backend == *tool && r.rule == *rule).collect();
                let values: Vec<f64> = cases.iter().filter_map(|r| pick(r)).collect();
                match geo_mean(&values) {
                    Some(m) => {
                        let failed = if cases.iter().any(|r| r.status == Status::Failed) { "*" } else { "" };
                        let shaky = timings.is_some_and(|ts| cases.iter().any(|r| ts(r).into_iter().any(noisy)));
                        let mark = format!("{failed}{}", if shaky { "~" } else { "" });
                        let _ = write!(
                            h,
                            "<td style=\"background:{}\" title=\"{} case(s)\">{}{mark}</td>",
                            heat(m),
                            values.len(),
                            charts::tick(m)
                        );
                    }
                    None => h.push_str("<td class=\"skip\">–</td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
    h.push_str("</div>");
}

/// Workload × tool, one cell per tool with its primal, VJP and JVP: how many of the cases'
/// modes passed.
fn status_grid(h: &mut String, rows: &[ResultRow], workloads: &BTreeSet<&str>) {
    let tools: BTreeSet<&str> = rows.iter().map(|r| r.backend.as_str()).collect();
    h.push_str("<h2 id=\"grid\">Status</h2><p class=\"note\">Per workload and tool, for primal · vjp · jvp: modes passed / cases. ✗ marks a failed mode (a failed check names it, or the case errored), – one not run, s one skipped.</p><table><tr><th class=\"l\">workload</th>");
    for t in &tools {
        let _ = write!(h, "<th>{}<br><small>primal · vjp · jvp</small></th>", esc(t));
    }
    h.push_str("</tr>");
    for w in workloads {
        let _ = write!(h, "<tr><td class=\"l\">{}</td>", esc(w));
        for t in &tools {
            let mine: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == *w && r.backend == *t).collect();
            if mine.is_empty() {
                h.push_str("<td class=\"grid skip\"></td>");
                continue;
            }
            let cells: Vec<String> = ["primal", "vjp", "jvp"]
                .iter()
                .map(|m| {
                    let states: Vec<ModeState> = mine.iter().map(|r| mode_state(r, m)).collect();
                    let ok = states.iter().filter(|s| **s == ModeState::Ok).count();
                    let worst = states.iter().copied().max().unwrap_or(ModeState::NotRun);
                    let (class, mark) = match worst {
                        ModeState::Failed => ("bad", "✗"),
                        ModeState::Skipped if ok == 0 => ("skip", "s"),
                        ModeState::NotRun if ok == 0 => ("skip", "–"),
                        _ => ("ok", "✓"),
                    };
                    format!("<span class=\"{class}\">{mark}{ok}/{}</span>", states.len())
                })
                .collect();
            let _ = write!(h, "<td class=\"grid\">{}</td>", cells.join(" · "));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

/// Where several tools ran the same case: each tool's times, relative to adgauge's CPU engine,
/// its overhead and its finding.
fn tools_compared(h: &mut String, rows: &[ResultRow]) {
    let mut groups: Vec<(String, Vec<&ResultRow>)> = Vec::new();
    for r in rows {
        let key = case_without_tool(r);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups.retain(|(_, g)| g.iter().map(|r| &r.backend).collect::<BTreeSet<_>>().len() > 1);
    h.push_str("<h2 id=\"tools\">Tools compared</h2>");
    if groups.is_empty() {
        h.push_str("<p class=\"note\">Every case ran on one tool only.</p>");
        return;
    }
    h.push_str("<p class=\"note\">Median ms; in brackets, the time relative to adgauge's engine on the CPU (below 1: faster). Findings as in docs/protocol.md: wrong, convention, unsupported.</p><table><tr><th class=\"l\">case</th><th class=\"l\">tool</th><th>primal</th><th>vjp</th><th>jvp</th><th>vjp/primal</th><th>jvp/primal</th><th class=\"l\">finding</th></tr>");
    for (key, g) in &groups {
        let reference = g.iter().find(|r| r.backend == "cpu").copied();
        for (i, r) in g.iter().enumerate() {
            let cell = |t: Option<f64>, base: Option<f64>| match (t, base) {
                (Some(t), Some(b)) if b > 0.0 && r.backend != "cpu" => {
                    format!("{} ({}x)", charts::tick(t * 1e3), charts::tick(t / b))
                }
                (t, _) => ms(t),
            };
            let med = |r: Option<&ResultRow>, mode: usize| {
                let r = r?;
                [&r.primal, &r.vjp, &r.jvp][mode].as_ref().map(|t| t.median_s)
            };
            let message = r.message.as_deref().unwrap_or("");
            let (class, finding) = match r.status {
                Status::Ok if message.contains(": convention:") => ("ok", format!("convention — {message}")),
                Status::Ok if message.is_empty() => ("ok", "ok".to_string()),
                Status::Ok => ("ok", format!("ok — {message}")),
                Status::Failed => ("bad", format!("wrong — {message}")),
                Status::Skipped if message.starts_with("unsupported") => ("skip", format!("unsupported — {message}")),
                s => (status_class(s), format!("{} — {message}", s.name())),
            };
            let label = if i == 0 { esc(key) } else { String::new() };
            let _ = write!(
                h,
                "<tr><td class=\"l\">{label}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l {class}\">{}</td></tr>",
                esc(&r.backend),
                cell(med(Some(r), 0), med(reference, 0)),
                cell(med(Some(r), 1), med(reference, 1)),
                cell(med(Some(r), 2), med(reference, 2)),
                ratio(r.vjp_overhead()),
                ratio(r.jvp_overhead()),
                esc(&finding)
            );
        }
    }
    h.push_str("</table>");
}

/// Over the history's runs, per workload: the geometric mean of the vjp overhead, and of the
/// primal median, over the workload's cases that ran (every tool and rule; the newest run's
/// cases), against each run's date and commit.
fn trends(h: &mut String, history: &[(RunInfo, Vec<ResultRow>)], workloads: &BTreeSet<&str>) {
    let labels = run_labels(&history.iter().map(|(i, _)| i).collect::<Vec<_>>());
    h.push_str("<h2 id=\"trends\">History trends</h2><p class=\"note\">One line per workload and tool: the geometric mean over the cases of the workload that ran on the tool in each run (all rules), against each run's time (UTC) and commit.</p><div class=\"charts\">");
    // The newest run's tools of each workload: a line per pair that is still measured.
    let newest = history.last().map(|(_, rs)| rs.as_slice()).unwrap_or_default();
    let pairs: BTreeSet<(&str, &str)> = newest
        .iter()
        .filter(|r| workloads.contains(r.workload.as_str()))
        .map(|r| (r.workload.as_str(), r.backend.as_str()))
        .collect();
    let tools: BTreeSet<&str> = pairs.iter().map(|(_, t)| *t).collect();
    type Pick = fn(&ResultRow) -> Option<f64>;
    let metrics: [(&str, &str, Pick, bool); 2] = [
        ("vjp overhead over runs", "vjp / primal", ResultRow::vjp_overhead, false),
        ("primal median over runs", "primal", |r| r.primal.as_ref().map(|t| t.median_s), true),
    ];
    for (title, y_label, pick, is_time) in metrics {
        let mut series: Vec<Series> = pairs
            .iter()
            .map(|(w, tool)| Series {
                // The tool is named where the history has several.
                name: if tools.len() > 1 { format!("{w} on {tool}") } else { w.to_string() },
                points: history
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (_, rs))| {
                        let v: Vec<f64> = rs
                            .iter()
                            .filter(|r| {
                                r.workload == *w
                                    && r.backend == *tool
                                    && matches!(r.status, Status::Ok | Status::Failed)
                            })
                            .filter_map(pick)
                            .collect();
                        geo_mean(&v).map(|m| ((i + 1) as f64, m))
                    })
                    .collect(),
            })
            .collect();
        let y_label = if is_time {
            let (factor, unit) = charts::time_unit(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
            for s in &mut series {
                for p in &mut s.points {
                    p.1 *= factor;
                }
            }
            format!("{y_label} ({unit})")
        } else {
            y_label.to_string()
        };
        chart_with_legend(h, charts::trend(title, &y_label, &series, &labels, is_time), &series);
    }
    h.push_str("</div>");
}

/// A chart and its legend (series in the chart's colours), with a note where colours repeat.
fn chart_with_legend(h: &mut String, chart: Result<String, String>, series: &[Series]) {
    h.push_str("<div class=\"chart\">");
    h.push_str(&chart_or_note(chart));
    let entries: Vec<(String, usize, bool)> =
        series.iter().enumerate().map(|(i, s)| (s.name.clone(), i, false)).collect();
    h.push_str(&charts::legend(&entries));
    if series.len() > charts::DISTINCT_SERIES {
        let _ = write!(
            h,
            "<p class=\"note\">{} series; colours repeat after {} (the legend's order is the colours' order).</p>",
            series.len(),
            charts::DISTINCT_SERIES
        );
    }
    h.push_str("</div>");
}

/// Per workload whose cases vary a size (n or k): the vjp median against it, log-log, one line
/// per tool, dtype, rule and other parameters.
fn scaling(h: &mut String, rows: &[ResultRow], workloads: &BTreeSet<&str>) {
    let fixed = fixed_params(rows);
    let _ = write!(
        h,
        "<h2 id=\"scaling\">Scaling</h2><p class=\"note\">Per workload, the vjp median against the size its cases vary, one line per tool, dtype, rule and other varying parameters.{}</p><div class=\"charts\">",
        fixed_note(&fixed)
    );
    let mut any = false;
    for w in workloads {
        let mine: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == *w).collect();
        let Some(p) = varying(&mine) else { continue };
        any = true;
        let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in &mine {
            let (Some(x), Some(t)) = (r.params.get(p).and_then(|v| v.parse::<f64>().ok()), &r.vjp) else { continue };
            let omit = fixed.get(*w);
            let others: Vec<String> = r
                .params
                .iter()
                .filter(|(k, _)| *k != p && !omit.is_some_and(|o| o.contains_key(*k)))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let key = format!("{} {} {} {}", r.backend, r.dtype, r.rule, others.join(" "));
            lines.entry(key.trim_end().to_string()).or_default().push((x, t.median_s));
        }
        let (factor, unit) = charts::time_unit(lines.values().flatten().map(|p| p.1));
        let series: Vec<Series> = lines
            .into_iter()
            .map(|(name, mut points)| {
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                let points = points.into_iter().map(|(x, y)| (x, y * factor)).collect();
                Series { name, points }
            })
            .collect();
        let y_label = format!("vjp median ({unit})");
        let chart = charts::lines(&format!("{w}: vjp median vs {p}"), p, &y_label, &series, (true, true));
        chart_with_legend(h, chart, &series);
    }
    if !any {
        h.push_str("<p class=\"note\">No workload varies a size in this run.</p>");
    }
    h.push_str("</div>");
}

/// The run's environment next to the baseline's newest run, differences highlighted, and the
/// hosts that measured the rows (CPU, cores, compiler, target features).
fn environment(h: &mut String, info: &RunInfo, rows: &[ResultRow], baseline: Option<&Baseline>) {
    fn fields(info: &RunInfo, rows: &[ResultRow]) -> Vec<(&'static str, String)> {
        let join = |v: BTreeSet<String>| v.into_iter().collect::<Vec<_>>().join(", ");
        let hosts: BTreeSet<String> = rows
            .iter()
            .map(|r| match &r.host {
                Some(h) if !h.target_features.is_empty() => format!("{} [{}]", h.describe(), h.target_features),
                Some(h) => h.describe(),
                None => format!("{} ({} cores)", info.cpu_model, info.cores),
            })
            .collect();
        vec![
            ("run id", info.run_id.clone()),
            ("time (UTC)", info.timestamp.clone()),
            ("git revision", info.git_revision.clone()),
            ("adgauge", info.adgauge_version.clone()),
            ("machine", info.machine.clone()),
            ("hosts (CPU, cores, compiler [target features])", join(hosts)),
            ("frequency governor", info.governor.clone()),
            ("tools", join(rows.iter().map(|r| r.backend.clone()).collect())),
            ("threads", join(rows.iter().map(|r| r.threads.to_string()).collect())),
            ("dtypes", join(rows.iter().map(|r| r.dtype.clone()).collect())),
            ("seeds", join(rows.iter().map(|r| r.seed.to_string()).collect())),
            ("roofline (CPU, before the cases)", roofline_text(info.roofline.as_ref())),
        ]
    }
    h.push_str("<h2 id=\"environment\">Environment</h2>");
    let now = fields(info, rows);
    match baseline.and_then(|b| b.runs.last().map(|i| (b, i))) {
        Some((b, binfo)) => {
            let before = fields(binfo, &b.rows);
            h.push_str("<p class=\"note\">Highlighted: what differs from the baseline's newest run (run id, time and revision always do).</p><table><tr><th class=\"l\"></th><th class=\"l\">this run</th><th class=\"l\">baseline</th></tr>");
            for ((k, v), (_, old)) in now.iter().zip(&before) {
                let class = if v != old { " class=\"diff\"" } else { "" };
                let _ = write!(
                    h,
                    "<tr{class}><th class=\"l\">{k}</th><td class=\"l env\">{}</td><td class=\"l env\">{}</td></tr>",
                    esc(v),
                    esc(old)
                );
            }
        }
        None => {
            h.push_str("<table>");
            for (k, v) in &now {
                let _ = write!(h, "<tr><th class=\"l\">{k}</th><td class=\"l env\">{}</td></tr>", esc(v));
            }
        }
    }
    h.push_str("</table>");
}

/// The run's roofline in words: sequential read GB/s, threads, the random rates per bin count and
/// the tools it applies to.
fn roofline_text(roof: Option<&Roofline>) -> String {
    let Some(r) = roof else { return "not measured (no histogram case on a CPU device)".into() };
    let random: Vec<String> =
        r.random.iter().map(|x| format!("k={} {:.3e}/{:.3e}", x.bins, x.reads_per_s, x.updates_per_s)).collect();
    format!(
        "{} GB/s sequential read on {} threads; random 4-byte reads/updates per s: {}; for {}",
        charts::tick(r.seq_read_gb_s),
        r.threads,
        random.join(", "),
        r.tools.join(", ")
    )
}

/// Every case's peak memory per mode (MB) and the derivatives' ratios to the primal, collapsed.
fn memory(h: &mut String, rows: &[ResultRow]) {
    let measured: Vec<&ResultRow> = rows
        .iter()
        .filter(|r| r.primal_peak_bytes.is_some() || r.vjp_peak_bytes.is_some() || r.jvp_peak_bytes.is_some())
        .collect();
    let fixed = fixed_params(rows);
    let _ = write!(
        h,
        "<h2 id=\"memory\">Memory</h2><details><summary>peak memory of {} case(s): MB per mode (resident inputs and outputs included) and derivative / primal</summary><table><tr><th class=\"l\">case</th><th class=\"l\">tool</th><th>primal MB</th><th>vjp MB</th><th>jvp MB</th><th>vjp/primal</th><th>jvp/primal</th></tr>",
        measured.len()
    );
    let mb = |b: Option<u64>| b.map(|b| charts::tick(b as f64 / 1e6)).unwrap_or_else(|| "–".into());
    for r in measured {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&case_label(r, &fixed)),
            esc(&r.backend),
            mb(r.primal_peak_bytes),
            mb(r.vjp_peak_bytes),
            mb(r.jvp_peak_bytes),
            ratio(r.vjp_memory_ratio()),
            ratio(r.jvp_memory_ratio())
        );
    }
    h.push_str("</table></details>");
}

/// Every check of the run, collapsed: failed ones first.
fn validation(h: &mut String, rows: &[ResultRow]) {
    let total: usize = rows.iter().map(|r| r.checks.len()).sum();
    let failed: usize = rows.iter().map(|r| r.checks.iter().filter(|c| !c.passed).count()).sum();
    let _ = write!(
        h,
        "<h2 id=\"validation\">Validation</h2><details><summary>{total} checks, {failed} failed (failed first)</summary><table><tr><th class=\"l\">case</th><th class=\"l\">check</th><th>worst</th><th>tolerance</th><th class=\"l\">result</th></tr>"
    );
    let mut checks: Vec<(&ResultRow, &crate::schema::Check)> =
        rows.iter().flat_map(|r| r.checks.iter().map(move |c| (r, c))).collect();
    checks.sort_by_key(|(_, c)| c.passed);
    for (r, c) in &checks {
        let (class, word) = if c.passed { ("ok", "pass") } else { ("bad", "FAIL") };
        let _ = write!(
            h,
            "<tr><td class=\"l\"><a href=\"#c-{}\">{}</a></td><td class=\"l\">{}</td><td>{:.2e}</td><td>{:.0e}</td><td class=\"l {class}\">{word}</td></tr>",
            anchor(&r.case_id),
            esc(&r.case_id),
            esc(&c.name),
            c.worst,
            c.tolerance
        );
    }
    if checks.is_empty() {
        h.push_str("<tr><td class=\"l\" colspan=\"5\">no checks in this run</td></tr>");
    }
    h.push_str("</table></details>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Check;

    /// A timing of `ms` milliseconds with seven samples within ±1%.
    fn t(ms: f64) -> Option<Timing> {
        let m = ms * 1e-3;
        Some(Timing {
            min_s: m * 0.99,
            median_s: m,
            max_s: m * 1.01,
            batch: 1,
            samples: 7,
            cv: 0.006,
            sample_s: vec![m, m * 1.01, m * 0.99, m * 1.005, m * 0.995, m * 1.002, m * 0.998],
        })
    }

    fn row(workload: &str, k: u64, vjp_ms: f64, passed: bool) -> ResultRow {
        let mut params = BTreeMap::new();
        params.insert("k".to_string(), k.to_string());
        params.insert("n".to_string(), "1000000".to_string());
        let mut r = ResultRow::unmeasured(workload, params, "cpu", "f32", "auto", 2, 7);
        (r.primal, r.vjp, r.jvp) = (t(1.0), t(vjp_ms), t(1.5));
        (r.primal_peak_bytes, r.vjp_peak_bytes, r.jvp_peak_bytes) = (Some(1_000_000), Some(3_000_000), Some(2_000_000));
        r.checks.push(Check { name: "fd-vjp".into(), worst: if passed { 1e-9 } else { 0.3 }, tolerance: 1e-6, passed });
        if !passed {
            r.status = Status::Failed;
            r.message = Some("fd-vjp worst 3.000e-1".into());
        }
        r
    }

    fn info(id: &str, day: u32, rev: &str) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            timestamp: format!("2026-11-{day:02}T05:00:00Z"),
            git_revision: rev.into(),
            adgauge_version: "0.1.0".into(),
            machine: "host <x>".into(),
            cpu_model: "cpu".into(),
            cores: 2,
            governor: "unknown".into(),
            suite: "quick".into(),
            roofline: None,
            interrupted: None,
            selection: None,
        }
    }

    fn two_runs() -> Vec<(RunInfo, Vec<ResultRow>)> {
        let first =
            vec![row("hist-add", 10, 2.0, true), row("hist-add", 1000, 2.0, true), row("hist-mul", 10, 2.5, true)];
        let mut second =
            vec![row("hist-add", 10, 5.0, true), row("hist-add", 1000, 2.0, true), row("hist-mul", 10, 2.5, false)];
        second[1].rule_used = Some("general-chunked".into());
        vec![(info("r1", 22, "abc1234def"), first), (info("r2", 23, "fed4321cba"), second)]
    }

    /// The report as `adgauge report` renders a history: against its previous run.
    fn report(runs: &[(RunInfo, Vec<ResultRow>)]) -> String {
        let base = runs
            .len()
            .checked_sub(2)
            .map(|i| Baseline::run("previous run".into(), runs[i].0.clone(), runs[i].1.clone()));
        render(runs, base.as_ref())
    }

    fn position(html: &str, needle: &str) -> usize {
        html.find(needle).unwrap_or_else(|| panic!("missing {needle}"))
    }

    /// What kept the quick suite's report from fitting a 1280 px screen, or from reading well:
    /// every table scrolls in its own box; a chart's times are in one unit it chooses (ms here,
    /// not seconds as `1e-3`); trends have a line per workload and tool, and runs of one day are
    /// told apart by their time; a tool that could not start is said once; a case without
    /// parameters or rule reads `lstm f64`.
    #[test]
    fn the_report_fits_the_screen_and_says_things_once() {
        let mut runs = two_runs();
        runs[1].0.timestamp = "2026-11-22T17:45:00Z".into();
        runs[1].0.git_revision = "abc1234def".into();
        for (_, rows) in &mut runs {
            let mut other = row("hist-add", 10, 4.0, true);
            other.backend = "jax".into();
            other.case_id = other.case_id.replace("/cpu/", "/jax/");
            rows.push(other);
            for k in [10, 1000, 100_000] {
                let mut missing = row("hist-mul", k, 1.0, true);
                missing.backend = "pytorch".into();
                missing.case_id = missing.case_id.replace("/cpu/", "/pytorch/");
                missing.status = Status::Skipped;
                missing.message = Some("tool pytorch unavailable: python3 cannot import torch".into());
                (missing.primal, missing.vjp, missing.jvp) = (None, None, None);
                rows.push(missing);
            }
            let mut lstm = ResultRow::unmeasured("lstm", BTreeMap::new(), "cpu", "f64", "-", 2, 7);
            (lstm.primal, lstm.vjp, lstm.jvp) = (t(3.0), t(9.0), t(6.0));
            rows.push(lstm);
        }
        let html = report(&runs);
        // Every table is boxed; the page's own width is the body's.
        assert_eq!(html.matches("<table").count(), html.matches("<div class=\"scroll\"><table").count());
        assert!(CSS.contains(".scroll{overflow-x:auto") && CSS.contains("position:sticky"));
        // Trends: one line per workload and tool, labelled by time and commit.
        let trends = &html[position(&html, "id=\"trends\"")..position(&html, "id=\"scaling\"")];
        assert!(trends.contains("hist-add on cpu</li>") && trends.contains("hist-add on jax</li>"), "{trends}");
        assert!(trends.contains("11-22 05:00 abc1234") && trends.contains("11-22 17:45 abc1234"), "{trends}");
        // The primal medians are 1-4 ms: the axis says ms, and no tick is in seconds.
        assert!(trends.contains("primal (ms)"), "{trends}");
        assert!(!trends.contains("primal (s)") && !trends.contains("e-3<"), "{trends}");
        // The scaling chart of hist-add (k = 10 and 1000) in ms too.
        let scaling = &html[position(&html, "id=\"scaling\"")..position(&html, "id=\"environment\"")];
        assert!(scaling.contains("vjp median (ms)"), "{scaling}");
        // The unavailable tool: one line for its three cases.
        let findings = &html[position(&html, "id=\"findings\"")..position(&html, "id=\"changes\"")];
        assert_eq!(findings.matches("python3 cannot import torch").count(), 1, "{findings}");
        assert!(findings.contains("3 case(s)"), "{findings}");
        // A case without parameters or rule.
        let changes = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
        assert!(changes.contains("<td class=\"l\">lstm f64</td>"), "{changes}");
        assert!(!html.contains("lstm[]") && !html.contains("f64 -<"), "no empty brackets or rule");
        assert_eq!(named_case("hist-add", &["k=10".into()], "f32", "auto"), "hist-add[k=10] f32 auto");
    }

    #[test]
    fn runs_of_one_minute_are_labelled_by_their_seconds() {
        let (mut a, mut b, c) = (info("a", 22, "abc1234def"), info("b", 22, "abc1234def"), info("c", 23, "abc1234def"));
        a.timestamp = "2026-11-22T05:00:07Z".into();
        b.timestamp = "2026-11-22T05:00:41Z".into();
        assert_eq!(
            run_labels(&[&a, &b, &c]),
            ["11-22 05:00:07 abc1234", "11-22 05:00:41 abc1234", "11-23 05:00 abc1234"]
        );
    }

    #[test]
    fn a_chart_picks_the_time_unit_its_values_read_best_in() {
        assert_eq!(charts::time_unit([2e-3, 5e-3]), (1e3, "ms"));
        assert_eq!(charts::time_unit([2e-6, 9e-6]), (1e6, "µs"));
        assert_eq!(charts::time_unit([1.5, 30.0]), (1.0, "s"));
        assert_eq!(charts::time_unit([3e-9]), (1e9, "ns"));
        // The middle of a wide range: 1 µs to 1 s reads in ms.
        assert_eq!(charts::time_unit([1e-6, 1.0]), (1e3, "ms"));
        assert_eq!(charts::time_unit([f64::NAN, 0.0]), (1e3, "ms"));
    }

    #[test]
    fn the_paired_comparison_has_its_section_with_regressions_first() {
        use crate::paired::{PAIRED_SCHEMA, PairedHeader, PairedRow};
        let header = PairedHeader {
            schema: PAIRED_SCHEMA.into(),
            id: "p1".into(),
            timestamp: "2026-11-28T02:00:00Z".into(),
            baseline: "bin:/base/adgauge".into(),
            candidate: "bin:/cand/<adgauge>".into(),
            suite: "quick".into(),
            machine: "host".into(),
            cpu_model: "cpu".into(),
            cores: 2,
            load_start: Some(2.5),
            load_end: Some(3.25),
            max_slowdown: 1.1,
            alpha: 0.01,
            confidence: 0.95,
            wall_s: 60.0,
            complete: false,
        };
        let paired_row = |id: &str, verdict: &str, ratio: f64| PairedRow {
            case_id: id.into(),
            workload: "hist-add".into(),
            tool: "cpu".into(),
            dtype: "f32".into(),
            rule: "auto".into(),
            mode: "primal".into(),
            verdict: verdict.into(),
            ratio: Some(ratio),
            ci_low: Some(ratio - 0.05),
            ci_high: Some(ratio + 0.05),
            p: Some(1e-4),
            pairs: 16,
            processes: 4,
            runs_per_block: 10,
            baseline_s: Some(1e-3),
            candidate_s: Some(ratio * 1e-3),
            why: format!("{verdict} because"),
            baseline_blocks: vec![],
            candidate_blocks: vec![],
            block_process: vec![],
        };
        let rows = vec![paired_row("quiet-case", "no change", 1.0), paired_row("slow-case", "regressed", 1.25)];
        let history = vec![(info("r1", 28, "abc"), vec![row("hist-add", 10, 2.0, true)])];
        let html = render_with_paired(&history, None, Some(&(header, rows)));
        assert!(html.contains("<a href=\"#paired\">paired</a>"));
        let section = &html[html.find("id=\"paired\"").unwrap()..html.find("id=\"findings\"").unwrap()];
        assert!(
            section.contains("<b>1 regressed</b>, 0 improved, 1 no change, 0 not judged of 2 timing(s)"),
            "{section}"
        );
        assert!(section.contains("bin:/cand/&lt;adgauge&gt;"), "{section}");
        assert!(section.contains("load 2.50 to 3.25"), "{section}");
        assert!(section.contains("This comparison was interrupted"), "{section}");
        assert!(section.find("slow-case").unwrap() < section.find("quiet-case").unwrap(), "{section}");
        assert!(
            section.contains("<td>1.0000</td><td>1.2500</td><td>1.250x</td><td>[1.200, 1.300]</td><td>16</td>"),
            "{section}"
        );
        // Without a paired comparison: no section, no link.
        let plain = render(&history, None);
        assert!(!plain.contains("id=\"paired\"") && !plain.contains("#paired"));
    }

    #[test]
    fn the_report_opens_with_the_verdict_and_the_regressions_then_the_findings() {
        let html = report(&two_runs());
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>"));
        for id in [
            "verdict",
            "findings",
            "changes",
            "overheads",
            "grid",
            "trends",
            "scaling",
            "environment",
            "memory",
            "validation",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "missing section {id}");
            assert!(id == "verdict" || html.contains(&format!("href=\"#{id}\"")), "missing link to {id}");
        }
        // The verdict comes first: the gate's (a failed check: exit 1), with the speed verdicts
        // counted, and the one regression with its interval.
        let verdict = &html[position(&html, "class=\"verdict fail\"")..position(&html, "<nav>")];
        assert!(verdict.contains("<b>FAIL (exit 1)</b>") && verdict.contains("3 cases: 2 ok, 1 failed"), "{verdict}");
        assert!(verdict.contains("against previous run: 3 case(s) compared"), "{verdict}");
        assert!(
            verdict.contains("speed: 1 regressed, 0 improved, 5 no change, 0 not judged of 6 timing(s)"),
            "{verdict}"
        );
        assert!(verdict.contains("95% bootstrap intervals (10000 resamples)"), "{verdict}");
        let top = &verdict[position(verdict, "regressed (1)")..];
        assert!(top.contains("hist-add[k=10,n=1000000]/cpu/f32/auto</a></td><td>vjp</td><td>2</td><td>5</td><td class=\"bad\">2.500x ["), "{top}");
        // Then the findings, one line per cause.
        let findings = &html[position(&html, "id=\"findings\"")..position(&html, "id=\"changes\"")];
        assert!(
            findings.contains("hist-mul[k=10,n=1000000]/cpu/f32/auto: check fd-vjp passed in the baseline"),
            "{findings}"
        );
        assert!(findings.contains("1 timing(s) regressed: the largest in the verdict above"), "{findings}");
        // Peak memory per case, collapsed: 1, 3 and 2 MB, ratios 3 and 2.
        let memory = &html[position(&html, "id=\"memory\"")..position(&html, "id=\"validation\"")];
        assert!(memory.contains("<details><summary>peak memory of 3 case(s)"), "{memory}");
        assert!(memory.contains("<td class=\"l\">hist-mul[k=10,n=1000000] f32 auto</td><td class=\"l\">cpu</td><td>1</td><td>3</td><td>2</td><td>3</td><td>2</td>"), "{memory}");
        // The validation table is collapsed, failed checks first.
        let validation = &html[position(&html, "id=\"validation\"")..];
        assert!(validation.starts_with("id=\"validation\">Validation</h2><details><summary>3 checks, 1 failed"));
        assert!(position(validation, "FAIL") < position(validation, "pass"));
        assert!(html.contains("host &lt;x&gt;"), "text is escaped");
        // Nothing is fetched: no scripts, no external references (the SVG namespace URI is a name).
        assert!(!html.contains("<script"));
        for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
            assert!(!html.contains(external), "external reference {external}");
        }
    }

    /// Every case has a row: its medians with their spread, and per mode the change with its
    /// interval, coloured by verdict; the regressed case first.
    #[test]
    fn the_table_of_changes_lists_every_case_with_ratio_interval_and_spread() {
        let html = report(&two_runs());
        let table = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
        assert_eq!(table.matches("<tr id=\"c-").count(), 3);
        let first = &table[position(table, "<tr id=\"c-")..];
        let first = &first[..position(first, "</tr>")];
        // n is the same in both hist-add cases: the label leaves it out, the note says it.
        assert!(first.contains("hist-add[k=10] f32 auto"), "regressed first: {first}");
        assert!(table.contains("left out of the labels: hist-add: n=1000000."), "{table}");
        assert!(first.contains("<td>5 <small>±1%</small></td><td class=\"bad\" title=\"regressed: 95% CI"), "{first}");
        assert!(first.contains("<td class=\"\" title=\"no change: 95% CI"), "{first}");
        assert!(table.contains("3 cases, 7 samples per mode unless said (n)"), "{table}");
        // The rule auto ran, where the row says.
        assert!(table.contains("hist-add[k=1000] f32 auto (auto ran general-chunked)"), "rule taken");
        // The failed case was not judged on speed: it has no change cells, but its medians.
        let mul = &table[position(table, "hist-mul[k=10,n=1000000] f32 auto")..];
        assert!(mul[..position(mul, "</tr>")].contains("<td>–</td>"), "{mul}");
    }

    /// The quick suite: three samples a side cannot be judged; the banner says so and
    /// never "nothing regressed".
    #[test]
    fn a_run_judged_on_nothing_is_not_passed_as_nothing_regressed() {
        let mut runs = two_runs();
        for (_, rows) in &mut runs {
            rows.retain(|r| r.workload == "hist-add");
            for r in rows.iter_mut() {
                for t in [&mut r.primal, &mut r.vjp, &mut r.jvp].into_iter().flatten() {
                    t.sample_s.truncate(3);
                }
            }
        }
        let html = report(&runs);
        let verdict = &html[position(&html, "id=\"verdict\"")..position(&html, "<nav>")];
        assert!(
            verdict.contains("PASS on checks and coverage; speed NOT JUDGED: none of 6 timing(s) could be judged"),
            "{verdict}"
        );
        assert!(verdict.contains("(not judged: 6 too few samples)"), "{verdict}");
        assert!(html.contains("class=\"verdict warn\""));
        assert!(!html.contains("nothing regressed"));
    }

    #[test]
    fn the_status_grid_fails_only_the_modes_a_failed_check_names() {
        let html = report(&two_runs());
        let grid = &html[position(&html, "id=\"grid\"")..position(&html, "id=\"tools\"")];
        let mul = &grid[position(grid, ">hist-mul<")..];
        let cell = &mul[..position(mul, "</tr>")];
        // fd-vjp failed: primal and jvp passed (1 of 1), vjp failed (0 of 1).
        assert!(
            cell.contains(
                "<span class=\"ok\">✓1/1</span> · <span class=\"bad\">✗0/1</span> · <span class=\"ok\">✓1/1</span>"
            ),
            "{cell}"
        );
        let add = &grid[position(grid, ">hist-add<")..];
        assert!(add[..position(add, "</tr>")].matches("✓2/2").count() == 3, "{add}");
    }

    /// Overheads are workload × rule grids per mode, cells shaded by the ratio; a group with a
    /// failed check is kept and marked.
    #[test]
    fn overheads_are_grids_of_workload_and_rule_with_failed_groups_marked() {
        let html = report(&two_runs());
        let grids = &html[position(&html, "id=\"overheads\"")..position(&html, "id=\"grid\"")];
        for title in ["vjp / primal time", "jvp / primal time", "vjp / primal memory", "jvp / primal memory"] {
            assert!(grids.contains(&format!("<th class=\"l\">{title}</th><th>auto</th>")), "{title}");
        }
        // hist-add vjp: 5 ms and 2 ms over 1 ms primals, geometric mean sqrt(10) = 3.16; hist-mul
        // 2.5, failed (marked).
        let vjp = &grids[..position(grids, "jvp / primal time")];
        assert!(
            vjp.contains(&format!("<td style=\"background:{}\" title=\"2 case(s)\">3.16</td>", heat(10f64.sqrt()))),
            "{vjp}"
        );
        assert!(vjp.contains("title=\"1 case(s)\">2.5*</td>"), "{vjp}");
        // A ratio resting on a timing whose samples spread over ±40%: marked, in time not memory.
        let mut runs = two_runs();
        let t = runs[1].1[2].vjp.as_mut().unwrap();
        (t.min_s, t.max_s) = (t.median_s * 0.6, t.median_s * 1.4);
        let html = report(&runs);
        let grids = &html[position(&html, "id=\"overheads\"")..position(&html, "id=\"grid\"")];
        assert!(grids.contains("title=\"1 case(s)\">2.5*~</td>"), "{grids}");
        assert_eq!(grids.matches("~</td>").count(), 1, "only the vjp time grid: {grids}");
        assert_eq!(heat(1.0), "#ffffff");
        assert_eq!(heat(8.0), "#ff6955");
    }

    #[test]
    fn tools_are_compared_case_by_case_relative_to_the_cpu_engine() {
        let mut cpu = row("hist-max", 10, 2.0, true);
        cpu.checks.clear();
        let mut jax = cpu.clone();
        jax.backend = "jax".into();
        jax.case_id = jax.case_id.replace("/cpu/", "/jax/");
        jax.vjp = t(8.0);
        jax.message = Some("ties: convention: tie-policy split".into());
        let mut pytorch = cpu.clone();
        pytorch.backend = "pytorch".into();
        pytorch.status = Status::Skipped;
        pytorch.message = Some("unsupported: tool pytorch could not evaluate hist.jvp".into());
        let html = render(&[(info("r1", 23, "abc"), vec![cpu, jax, pytorch])], None);
        let tools = &html[position(&html, "id=\"tools\"")..position(&html, "id=\"trends\"")];
        let jax_row = &tools[position(tools, ">jax<")..];
        let jax_row = &jax_row[..position(jax_row, "</tr>")];
        assert!(jax_row.contains("<td>8 (4x)</td>"), "vjp 8 ms, 4x the CPU's 2 ms: {jax_row}");
        assert!(jax_row.contains("<td>1 (1x)</td>"), "{jax_row}");
        assert!(jax_row.contains("convention — ties: convention: tie-policy split"), "{jax_row}");
        assert!(tools.contains("unsupported — unsupported: tool pytorch"), "{tools}");
        // One run: nothing to judge speed against, and the verdict says so.
        assert!(html.contains("PASS on checks; speed NOT JUDGED: no earlier run of this suite to compare with"));
        assert!(html.contains("class=\"verdict warn\""));
    }

    /// Histogram rows get a roofline column: n = 10^6, k = 1000, f32 values and (rows without
    /// the index dtype column) 8-byte indices move 10^6 x 12 + 2 x 1000 x 4 = 12 008 000 bytes;
    /// in the primal's 1 ms that is 12.008 GB/s, 30% of a measured 40 GB/s; its 10^6 updates at
    /// the measured 1.25 x 10^9/s need 0.8 ms, the slower ceiling: bound 80%. The run's roofline
    /// is in the environment; without one, the fraction is blank, and tables without
    /// histograms have no such column.
    #[test]
    fn histogram_rows_show_their_achieved_bandwidth_and_fraction_of_the_roofline() {
        let mut runs = two_runs();
        runs[1].0.roofline = Some(Roofline {
            threads: 2,
            seq_read_gb_s: 40.0,
            random: vec![crate::RandomRate { bins: 1000, reads_per_s: 2.5e9, updates_per_s: 1.25e9 }],
            tools: vec!["cpu".into()],
        });
        let html = report(&runs);
        let changes = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
        assert!(changes.contains("<th>roofline</th>"), "{changes}");
        let line = &changes[position(changes, "id=\"c-hist-add-k-1000")..];
        let line = &line[..position(line, "</tr>")];
        assert!(line.contains("<td>12.0 GB/s 30%, bound 80%</td>"), "{line}");
        let env = &html[position(&html, "id=\"environment\"")..];
        assert!(
            env.contains("40 GB/s sequential read on 2 threads; random 4-byte reads/updates per s: k=1000 2.500e9/1.250e9; for cpu"),
            "{env}"
        );
        runs[1].0.roofline = None;
        let html = report(&runs);
        let changes = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
        let line = &changes[position(changes, "id=\"c-hist-add-k-1000")..];
        assert!(line[..position(line, "</tr>")].contains("<td>12.0 GB/s –</td>"), "{line}");
        let env = &html[position(&html, "id=\"environment\"")..];
        assert!(env.contains("not measured (no histogram case on a CPU device)"), "{env}");
        for r in &mut runs[1].1 {
            r.workload = "kmeans".into();
        }
        let html = report(&runs);
        assert!(!html.contains("<th>roofline</th>"));
    }

    #[test]
    fn the_environment_of_the_runs_compared_is_diffed_and_trends_are_dated() {
        let mut runs = two_runs();
        for r in &mut runs[1].1 {
            r.threads = 1;
        }
        let html = report(&runs);
        let env = &html[position(&html, "id=\"environment\"")..];
        assert!(
            env.contains(
                "<tr class=\"diff\"><th class=\"l\">threads</th><td class=\"l env\">1</td><td class=\"l env\">2</td></tr>"
            ),
            "{env}"
        );
        assert!(env.contains("<tr><th class=\"l\">hosts (CPU, cores, compiler [target features])</th><td class=\"l env\">cpu (2 cores)</td>"), "{env}");
        let trends = &html[position(&html, "id=\"trends\"")..position(&html, "id=\"scaling\"")];
        assert!(
            trends.contains("11-22 05:00 abc1234") && trends.contains("11-23 05:00 fed4321"),
            "dated and committed ticks"
        );
        assert!(trends.contains("<ul class=\"legend\">") && trends.contains("hist-add</li>"), "{trends}");
    }

    #[test]
    fn every_scaling_series_is_drawn_and_repeated_colours_are_said() {
        let mut rows = Vec::new();
        for rule in 0..15 {
            for k in [10, 100] {
                let mut r = row("hist-add", k, 2.0, true);
                r.rule = format!("rule{rule:02}");
                rows.push(r);
            }
        }
        let html = render(&[(info("r1", 22, "a"), rows)], None);
        let scaling = &html[position(&html, "id=\"scaling\"")..position(&html, "id=\"environment\"")];
        assert_eq!(scaling.matches("<li>").count(), 15, "every series in the legend");
        assert!(scaling.contains("15 series; colours repeat after 12"));
        assert!(scaling.contains("hist-add: vjp median vs k"));
    }

    /// A history whose medians are 1e308 s (hand-edited, or a broken clock) renders, with
    /// finite axes labelled at its values, instead of looping over the decades (issue 36).
    #[test]
    fn a_history_of_huge_times_renders_with_labelled_axes() {
        let huge = |k: u64| {
            let mut r = row("hist-add", k, 1.0, true);
            for t in [&mut r.primal, &mut r.vjp, &mut r.jvp].into_iter().flatten() {
                *t = Timing {
                    min_s: 1e308,
                    median_s: 1e308,
                    max_s: 1e308,
                    batch: 1,
                    samples: 7,
                    cv: 0.0,
                    sample_s: vec![1e308; 8],
                };
            }
            r
        };
        let runs =
            vec![(info("r1", 22, "a"), vec![huge(10), huge(100)]), (info("r2", 23, "b"), vec![huge(10), huge(100)])];
        let html = report(&runs);
        let scaling = &html[position(&html, "id=\"scaling\"")..position(&html, "id=\"environment\"")];
        assert!(scaling.contains(">\n1e308\n<"), "the time axis is labelled at 1e308: {scaling}");
        assert!(html.contains("speed: 0 regressed, 0 improved, 6 no change"), "identical runs");
    }

    #[test]
    fn an_empty_history_still_renders() {
        assert!(render(&[], None).contains("holds no runs"));
    }
}

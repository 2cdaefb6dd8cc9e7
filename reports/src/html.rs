//! The self-contained HTML report: one `index.html` with inline SVG and CSS, no JavaScript and no
//! network access, rebuilt from result files alone.
//!
//! It reads like a dashboard, most urgent first: the verdict (pass or fail, with its reasons),
//! what needs attention (failed, broken and regressed cases, then skipped ones), a status grid
//! (workload × tool × mode), the tools side by side, AD overheads, trends over the history's
//! runs (by date and commit), the environment of the two runs compared, one section per
//! workload, and the validation table, collapsed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::charts::{self, Series};
use crate::gate::{Finding, GateConfig, GateReport, gate};
use crate::schema::{ResultRow, RunInfo, Status};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
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

fn mb(bytes: Option<u64>) -> String {
    bytes.map(|b| charts::tick(b as f64 / 1e6)).unwrap_or_else(|| "–".into())
}

fn chart_or_note(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| format!("<p class=\"note\">{}</p>", esc(&e)))
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#222}\
h1{margin:20px 0 4px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:32px}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}.ok{color:#1a7f37}.bad{color:#c62828;font-weight:bold}\
.skip{color:#888}.warn{color:#9a6700}nav a{margin-right:12px}.note{color:#666}\
.charts{display:flex;flex-wrap:wrap;gap:4px 16px}.charts svg{max-width:100%;height:auto;margin:6px 0 0}\
.chart{flex:1 1 560px;max-width:592px}.chart>svg{width:100%}.chart.wide{flex-basis:100%;max-width:100%}.chart.wide>svg{width:auto}\
.verdict{font-size:20px;padding:10px 14px;border-radius:6px;margin:12px 0}.verdict.pass{background:#e6f4ea;color:#1a7f37}\
.verdict.fail{background:#fdecea;color:#c62828}.verdict.warn{background:#fff8e1;color:#9a6700}.verdict ul{font-size:14px;margin:6px 0 0}\
ul.legend{list-style:none;padding:0;margin:0 0 10px;font-size:12px;columns:2}ul.legend li{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}\
ul.legend svg{margin-right:4px;vertical-align:middle}td.grid{font-family:ui-monospace,monospace;text-align:center}\
.diff td{background:#fff8e1}details summary{cursor:pointer;margin:8px 0}";

/// Per group of cases: vjp and jvp time overheads, vjp and jvp memory ratios.
type Ratios = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

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

/// A run as a trend chart labels it: its date (month-day) and short commit.
fn run_label(info: &RunInfo) -> String {
    let date = info.timestamp.get(5..10).unwrap_or(&info.timestamp);
    let rev: String = info.git_revision.chars().take(7).collect();
    format!("{date} {rev}")
}

/// A case without its tool: workload and parameters, dtype and rule (rows of the same case by
/// different tools share it).
fn case_without_tool(r: &ResultRow) -> String {
    let p: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}[{}] {} {}", r.workload, p.join(","), r.dtype, r.rule)
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

/// Renders the report for a history (oldest run first; the newest is the one reported on,
/// compared with the run before it).
pub fn render(history: &[(RunInfo, Vec<ResultRow>)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>adgauge report</title><style>{CSS}</style></head><body>"
    );
    let Some((info, rows)) = history.last() else {
        h.push_str("<h1>adgauge report</h1><p>The history holds no runs.</p></body></html>");
        return h;
    };
    let previous = history.len().checked_sub(2).map(|i| &history[i]);
    let report = previous.map(|(_, prev)| gate(prev, rows, &GateConfig::default()));
    let workloads: BTreeSet<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    let _ = write!(
        h,
        "<h1>adgauge report</h1><p class=\"note\">Run <b>{}</b> ({}, commit {}, {}), the newest of {} in this history.</p>",
        esc(&info.run_id),
        esc(&info.timestamp),
        esc(&info.git_revision),
        esc(&info.machine),
        history.len()
    );
    verdict(&mut h, rows, previous.map(|(i, _)| i), report.as_ref());
    h.push_str("<nav>");
    for a in ["attention", "grid", "tools", "overheads", "trends", "environment", "validation"] {
        let _ = write!(h, "<a href=\"#{a}\">{a}</a>");
    }
    for w in &workloads {
        let _ = write!(h, "<a href=\"#w-{}\">{}</a>", anchor(w), esc(w));
    }
    h.push_str("</nav>");
    attention(&mut h, rows, report.as_ref());
    status_grid(&mut h, rows, &workloads);
    tools_compared(&mut h, rows);
    overheads(&mut h, rows);
    trends(&mut h, history, &workloads);
    environment(&mut h, info, rows, previous);
    for w in &workloads {
        workload_section(&mut h, w, rows);
    }
    validation(&mut h, rows);
    h.push_str(
        "<p class=\"note\">Generated by adgauge from result files alone; no scripts, no network.</p></body></html>",
    );
    h
}

/// The first thing on the page: pass or fail, and why.
fn verdict(h: &mut String, rows: &[ResultRow], previous: Option<&RunInfo>, report: Option<&GateReport>) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *counts.entry(r.status.name()).or_default() += 1;
    }
    let n = |s: &str| counts.get(s).copied().unwrap_or(0);
    let broken = n("failed") + n("error") + n("timeout");
    let (missing, slower, regressed) = match report {
        Some(r) => (
            r.findings.iter().filter(|f| matches!(f, Finding::Missing { .. } | Finding::Skipped { .. })).count(),
            r.findings.iter().filter(|f| matches!(f, Finding::Slower { .. })).count(),
            r.findings
                .iter()
                .filter(|f| {
                    matches!(
                        f,
                        Finding::Broken { .. }
                            | Finding::CheckRegressed { .. }
                            | Finding::ToolLost { .. }
                            | Finding::EnvChanged { .. }
                    )
                })
                .count(),
        ),
        None => (0, 0, 0),
    };
    let mut reasons = Vec::new();
    if broken > 0 {
        reasons.push(format!("{} failed, {} error, {} timeout", n("failed"), n("error"), n("timeout")));
    }
    if let Some(p) = previous {
        if missing > 0 {
            reasons.push(format!("{missing} case(s) of run {} missing or skipped now", p.run_id));
        }
        if regressed > broken {
            reasons.push(format!("{} correctness finding(s) against run {}", regressed, p.run_id));
        }
        if slower > 0 {
            reasons.push(format!("{slower} timing(s) slower than run {} beyond threshold and noise", p.run_id));
        }
    }
    let fail = broken > 0 || missing > 0 || regressed > 0;
    let class = if fail {
        "fail"
    } else if slower > 0 {
        "warn"
    } else {
        "pass"
    };
    let word = match class {
        "fail" => "FAIL",
        "warn" => "SLOWER",
        _ => "PASS",
    };
    let compared = match (previous, report) {
        (Some(p), Some(r)) => format!("; {} case(s) compared with run {}", r.compared, esc(&p.run_id)),
        _ => "; one run only, nothing to compare with".to_string(),
    };
    let _ = write!(
        h,
        "<div class=\"verdict {class}\" id=\"verdict\"><b>{word}</b> — {} cases: {} ok, {} failed, {} error, {} timeout, {} skipped{compared}",
        rows.len(),
        n("ok"),
        n("failed"),
        n("error"),
        n("timeout"),
        n("skipped")
    );
    if !reasons.is_empty() {
        h.push_str("<ul>");
        for r in &reasons {
            let _ = write!(h, "<li>{}</li>", esc(r));
        }
        h.push_str("</ul>");
    }
    h.push_str("</div>");
}

/// Failures first: broken cases, the gate's findings against the previous run, then the
/// skipped cases (collapsed).
fn attention(h: &mut String, rows: &[ResultRow], report: Option<&GateReport>) {
    h.push_str("<h2 id=\"attention\">Needs attention</h2>");
    let rank = |s: Status| match s {
        Status::Failed => 0,
        Status::Error => 1,
        Status::Timeout => 2,
        _ => 3,
    };
    let mut broken: Vec<&ResultRow> =
        rows.iter().filter(|r| matches!(r.status, Status::Failed | Status::Error | Status::Timeout)).collect();
    broken.sort_by_key(|r| rank(r.status));
    let findings: Vec<&Finding> = report
        .map(|r| r.findings.iter().filter(|f| !broken.iter().any(|b| b.case_id == f.case_id())).collect())
        .unwrap_or_default();
    if broken.is_empty() && findings.is_empty() {
        h.push_str("<p class=\"ok\">Nothing: every case that ran passed its checks, and nothing regressed.</p>");
    } else {
        h.push_str("<table><tr><th class=\"l\">case</th><th class=\"l\">tool</th><th class=\"l\">status</th><th class=\"l\">why</th></tr>");
        for r in &broken {
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
            let _ = write!(
                h,
                "<tr><td class=\"l\"><a href=\"#c-{}\">{}</a></td><td class=\"l\">{}</td><td class=\"l bad\">{}</td><td class=\"l\">{}</td></tr>",
                anchor(&r.case_id),
                esc(&case_without_tool(r)),
                esc(&r.backend),
                r.status.name(),
                esc(&why)
            );
        }
        let mut slower: Vec<&&Finding> = findings.iter().collect();
        slower.sort_by(|a, b| match (a, b) {
            (Finding::Slower { ratio: x, .. }, Finding::Slower { ratio: y, .. }) => y.total_cmp(x),
            (Finding::Slower { .. }, _) => std::cmp::Ordering::Greater,
            (_, Finding::Slower { .. }) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Equal,
        });
        for f in slower {
            let (class, word, why) = match f {
                Finding::Broken { detail, .. } => ("bad", "regressed", detail.clone()),
                Finding::CheckRegressed { check, detail, .. } => {
                    ("bad", "check regressed", format!("{check}: {detail}"))
                }
                Finding::Missing { .. } => ("bad", "missing", "in the previous run, not in this one".to_string()),
                Finding::Skipped { reason, .. } => ("bad", "skipped now", reason.clone()),
                Finding::ToolLost { tool, reason } => ("bad", "tool lost", format!("{tool}: {reason}")),
                Finding::EnvChanged { what, baseline, current } => {
                    ("bad", "environment", format!("{what}: {baseline} → {current}"))
                }
                Finding::Slower { metric, baseline, current, ratio, evidence, .. } => (
                    "warn",
                    "slower",
                    format!(
                        "{metric}: {} ms → {} ms ({}x; {evidence})",
                        charts::tick(baseline * 1e3),
                        charts::tick(current * 1e3),
                        charts::tick(*ratio),
                    ),
                ),
            };
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\"></td><td class=\"l {class}\">{word}</td><td class=\"l\">{}</td></tr>",
                esc(f.case_id()),
                esc(&why)
            );
        }
        h.push_str("</table>");
    }
    let skipped: Vec<&ResultRow> = rows.iter().filter(|r| r.status == Status::Skipped).collect();
    if !skipped.is_empty() {
        let _ = write!(
            h,
            "<details><summary>{} skipped case(s) (unsupported, or a tool unavailable)</summary><table>",
            skipped.len()
        );
        for r in skipped {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l skip\">{}</td></tr>",
                esc(&case_without_tool(r)),
                esc(&r.backend),
                esc(r.message.as_deref().unwrap_or("skipped"))
            );
        }
        h.push_str("</table></details>");
    }
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
        let _ = write!(h, "<tr><td class=\"l\"><a href=\"#w-{}\">{}</a></td>", anchor(w), esc(w));
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

/// Overhead bars: geometric mean over each workload's cases per tool × rule. Cases with a failed
/// check keep their timings (the group is marked), so a broken case does not vanish from them.
fn overheads(h: &mut String, rows: &[ResultRow]) {
    let mut groups: BTreeMap<String, Ratios> = BTreeMap::new();
    let mut marked: BTreeSet<String> = BTreeSet::new();
    for r in rows.iter().filter(|r| matches!(r.status, Status::Ok | Status::Failed)) {
        let key = format!("{} {} {}", r.workload, r.backend, r.rule);
        if r.status == Status::Failed {
            marked.insert(key.clone());
        }
        let g = groups.entry(key).or_default();
        g.0.extend(r.vjp_overhead());
        g.1.extend(r.jvp_overhead());
        g.2.extend(r.vjp_memory_ratio());
        g.3.extend(r.jvp_memory_ratio());
    }
    let bar_set = |pick: &dyn Fn(&Ratios) -> &Vec<f64>, mode: &str| -> Vec<(String, f64)> {
        groups
            .iter()
            .filter_map(|(k, g)| {
                let mark = if marked.contains(k) { " (failed check)" } else { "" };
                geo_mean(pick(g)).map(|m| (format!("{k} {mode}{mark}"), m))
            })
            .collect()
    };
    h.push_str("<h2 id=\"overheads\">AD overhead</h2><p class=\"note\">Geometric mean over each workload's cases: derivative time / primal time on the same tool in the same run, and peak-memory ratios (derivative footprint / primal footprint, inputs and outputs included; absolute MB in each workload's table). Groups with a failed check are marked and kept.</p><div class=\"charts\">");
    let mut time_bars = bar_set(&|g| &g.0, "vjp");
    time_bars.extend(bar_set(&|g| &g.1, "jvp"));
    h.push_str("<div class=\"chart wide\">");
    h.push_str(&chart_or_note(charts::bars(
        "AD overhead (derivative time / primal time)",
        "overhead (x)",
        &time_bars,
        Some(1.0),
        false,
    )));
    h.push_str("</div><div class=\"chart wide\">");
    let mut mem_bars = bar_set(&|g| &g.2, "vjp");
    mem_bars.extend(bar_set(&|g| &g.3, "jvp"));
    h.push_str(&chart_or_note(charts::bars(
        "Memory (derivative peak / primal peak), log axis",
        "ratio (x)",
        &mem_bars,
        Some(1.0),
        true,
    )));
    h.push_str("</div></div>");
}

/// Per workload, the vjp overhead of every case over the history's runs, against each run's date
/// and commit. Every series is drawn; colours repeat beyond [`charts::DISTINCT_SERIES`], which
/// the note then says.
fn trends(h: &mut String, history: &[(RunInfo, Vec<ResultRow>)], workloads: &BTreeSet<&str>) {
    let labels: Vec<String> = history.iter().map(|(i, _)| run_label(i)).collect();
    h.push_str("<h2 id=\"trends\">History trends</h2><div class=\"charts\">");
    for w in workloads {
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (i, (_, rs)) in history.iter().enumerate() {
            for r in rs.iter().filter(|r| &r.workload == w && (r.rule == "auto" || r.rule == "-")) {
                if let Some(o) = r.vjp_overhead() {
                    let label = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
                    series.entry(format!("{} {} {label}", r.backend, r.dtype)).or_default().push(((i + 1) as f64, o));
                }
            }
        }
        let s: Vec<Series> = series.into_iter().map(|(name, points)| Series { name, points }).collect();
        h.push_str("<div class=\"chart\">");
        h.push_str(&chart_or_note(charts::trend(&format!("{w}: vjp overhead over runs"), "vjp / primal", &s, &labels)));
        let entries: Vec<(String, usize, bool)> =
            s.iter().enumerate().map(|(i, s)| (s.name.clone(), i, false)).collect();
        h.push_str(&charts::legend(&entries));
        if s.len() > charts::DISTINCT_SERIES {
            let _ = write!(
                h,
                "<p class=\"note\">{} series; colours repeat after {} (the legend's order is the colours' order).</p>",
                s.len(),
                charts::DISTINCT_SERIES
            );
        }
        h.push_str("</div>");
    }
    h.push_str("</div>");
}

/// The run's environment, next to the compared run's, differences highlighted.
fn environment(h: &mut String, info: &RunInfo, rows: &[ResultRow], previous: Option<&(RunInfo, Vec<ResultRow>)>) {
    fn fields(info: &RunInfo, rows: &[ResultRow]) -> Vec<(&'static str, String)> {
        let join = |v: BTreeSet<String>| v.into_iter().collect::<Vec<_>>().join(", ");
        vec![
            ("run id", info.run_id.clone()),
            ("time (UTC)", info.timestamp.clone()),
            ("git revision", info.git_revision.clone()),
            ("adgauge", info.adgauge_version.clone()),
            ("machine", info.machine.clone()),
            ("CPU", info.cpu_model.clone()),
            ("cores", info.cores.to_string()),
            ("frequency governor", info.governor.clone()),
            ("tools", join(rows.iter().map(|r| r.backend.clone()).collect())),
            ("threads", join(rows.iter().map(|r| r.threads.to_string()).collect())),
            ("dtypes", join(rows.iter().map(|r| r.dtype.clone()).collect())),
            ("seeds", join(rows.iter().map(|r| r.seed.to_string()).collect())),
        ]
    }
    h.push_str("<h2 id=\"environment\">Environment</h2>");
    let now = fields(info, rows);
    match previous {
        Some((pinfo, prows)) => {
            let before = fields(pinfo, prows);
            h.push_str("<p class=\"note\">Highlighted: what differs between the two runs compared (run id, time and revision always do).</p><table><tr><th class=\"l\"></th><th class=\"l\">this run</th><th class=\"l\">previous run</th></tr>");
            for ((k, v), (_, b)) in now.iter().zip(&before) {
                let class = if v != b { " class=\"diff\"" } else { "" };
                let _ = write!(
                    h,
                    "<tr{class}><th class=\"l\">{k}</th><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                    esc(v),
                    esc(b)
                );
            }
        }
        None => {
            h.push_str("<table>");
            for (k, v) in &now {
                let _ = write!(h, "<tr><th class=\"l\">{k}</th><td class=\"l\">{}</td></tr>", esc(v));
            }
        }
    }
    h.push_str("</table>");
}

/// A workload's charts (runtime and overhead against the size that varies) and its cases.
fn workload_section(h: &mut String, w: &str, rows: &[ResultRow]) {
    let mine: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == w).collect();
    let _ = write!(h, "<h2 id=\"w-{}\">{}</h2><div class=\"charts\">", anchor(w), esc(w));
    let mut by_group: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    for r in &mine {
        by_group.entry(format!("{} {} {}", r.backend, r.dtype, r.rule)).or_default().push(r);
    }
    for (g, rs) in &by_group {
        let Some(p) = varying(rs) else { continue };
        let x = |r: &ResultRow| r.params.get(p).and_then(|v| v.parse::<f64>().ok());
        let line = |pick: &dyn Fn(&ResultRow) -> Option<f64>| -> Vec<(f64, f64)> {
            let mut v: Vec<(f64, f64)> = rs.iter().filter_map(|r| Some((x(r)?, pick(r)?))).collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        };
        let runtimes = vec![
            Series { name: "primal".into(), points: line(&|r| r.primal.as_ref().map(|t| t.median_s)) },
            Series { name: "vjp".into(), points: line(&|r| r.vjp.as_ref().map(|t| t.median_s)) },
            Series { name: "jvp".into(), points: line(&|r| r.jvp.as_ref().map(|t| t.median_s)) },
        ];
        let overheads = vec![
            Series { name: "vjp/primal".into(), points: line(&|r| r.vjp_overhead()) },
            Series { name: "jvp/primal".into(), points: line(&|r| r.jvp_overhead()) },
        ];
        let title = format!("{w} {g}: runtime and overhead vs {p}");
        h.push_str("<div class=\"chart\">");
        h.push_str(&chart_or_note(charts::runtime_and_overhead(&title, p, &runtimes, &overheads)));
        let mut entries: Vec<(String, usize, bool)> =
            runtimes.iter().enumerate().map(|(i, s)| (format!("{} (ms)", s.name), i, false)).collect();
        entries.extend(overheads.iter().enumerate().map(|(i, s)| (s.name.clone(), i + 1, true)));
        h.push_str(&charts::legend(&entries));
        h.push_str("</div>");
    }
    h.push_str("</div><table><tr><th class=\"l\">case</th><th>primal ms</th><th>vjp ms</th><th>jvp ms</th><th>vjp/primal</th><th>jvp/primal</th><th>primal MB</th><th>vjp MB</th><th>jvp MB</th><th>mem vjp/primal</th><th>mem jvp/primal</th><th class=\"l\">status</th></tr>");
    for r in &mine {
        let _ = write!(
            h,
            "<tr id=\"c-{}\"><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l {}\">{}</td></tr>",
            anchor(&r.case_id),
            esc(&case_and_rule_taken(r)),
            ms(r.primal.as_ref().map(|t| t.median_s)),
            ms(r.vjp.as_ref().map(|t| t.median_s)),
            ms(r.jvp.as_ref().map(|t| t.median_s)),
            ratio(r.vjp_overhead()),
            ratio(r.jvp_overhead()),
            mb(r.primal_peak_bytes),
            mb(r.vjp_peak_bytes),
            mb(r.jvp_peak_bytes),
            ratio(r.vjp_memory_ratio()),
            ratio(r.jvp_memory_ratio()),
            status_class(r.status),
            esc(&format!("{}{}", r.status.name(), r.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default()))
        );
    }
    h.push_str("</table>");
}

/// A case's id and, where it named `auto`, the rule it ran.
fn case_and_rule_taken(r: &ResultRow) -> String {
    match r.auto_took() {
        Some(used) => format!("{} (auto ran {used})", r.case_id),
        None => r.case_id.clone(),
    }
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
    use crate::schema::{Check, Timing};

    fn t(ms: f64) -> Option<Timing> {
        Some(Timing {
            min_s: ms * 0.99e-3,
            median_s: ms * 1e-3,
            max_s: ms * 1.01e-3,
            batch: 1,
            samples: 5,
            cv: 0.01,
            sample_s: vec![],
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
            suite: String::new(),
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

    fn position(html: &str, needle: &str) -> usize {
        html.find(needle).unwrap_or_else(|| panic!("missing {needle}"))
    }

    #[test]
    fn the_report_opens_with_the_verdict_and_lists_what_broke_before_anything_else() {
        let html = render(&two_runs());
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>"));
        for id in ["verdict", "attention", "grid", "tools", "overheads", "trends", "environment", "validation"] {
            assert!(html.contains(&format!("id=\"{id}\"")), "missing section {id}");
        }
        for id in ["attention", "grid", "tools", "overheads", "trends", "environment", "validation", "w-hist-add"] {
            assert!(html.contains(&format!("href=\"#{id}\"")), "missing link to {id}");
        }
        // The verdict comes first and says why: one failed case, one timing 2.5x slower.
        let verdict = &html[position(&html, "class=\"verdict fail\"")..position(&html, "<nav>")];
        assert!(verdict.contains("FAIL") && verdict.contains("3 cases: 2 ok, 1 failed"), "{verdict}");
        assert!(verdict.contains("3 case(s) compared with run r1"), "{verdict}");
        assert!(verdict.contains("1 timing(s) slower than run r1"), "{verdict}");
        // Then the failures, with the failing check, then the regression with its numbers.
        let attention = &html[position(&html, "id=\"attention\"")..position(&html, "id=\"grid\"")];
        let failed = position(attention, "hist-mul[k=10,n=1000000] f32 auto");
        assert!(attention[failed..].contains("fd-vjp worst 3.00e-1 &gt; 1e-6"), "{attention}");
        let slower = position(attention, "hist-add[k=10,n=1000000]/cpu/f32/auto");
        assert!(failed < slower, "failures before regressions");
        assert!(attention.contains("vjp median: 2 ms → 5 ms (2.5x"), "{attention}");
        // The validation table is collapsed, failed checks first.
        let validation = &html[position(&html, "id=\"validation\"")..];
        assert!(validation.starts_with("id=\"validation\">Validation</h2><details><summary>3 checks, 1 failed"));
        assert!(position(validation, "FAIL") < position(validation, "pass"));
        assert!(html.contains("host &lt;x&gt;"), "text is escaped");
        // The workload's table says which rule auto ran, where the row says.
        assert!(html.contains("hist-add[k=1000,n=1000000]/cpu/f32/auto (auto ran general-chunked)"), "rule taken");
        assert!(!html.contains("hist-add[k=10,n=1000000]/cpu/f32/auto (auto ran"), "no rule where none is recorded");
        // Nothing is fetched: no scripts, no external references (the SVG namespace URI is a name).
        assert!(!html.contains("<script"));
        for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
            assert!(!html.contains(external), "external reference {external}");
        }
    }

    #[test]
    fn the_status_grid_fails_only_the_modes_a_failed_check_names() {
        let html = render(&two_runs());
        let grid = &html[position(&html, "id=\"grid\"")..position(&html, "id=\"tools\"")];
        let mul = &grid[position(grid, ">hist-mul</a>")..];
        let cell = &mul[..position(mul, "</tr>")];
        // fd-vjp failed: primal and jvp passed (1 of 1), vjp failed (0 of 1).
        assert!(
            cell.contains(
                "<span class=\"ok\">✓1/1</span> · <span class=\"bad\">✗0/1</span> · <span class=\"ok\">✓1/1</span>"
            ),
            "{cell}"
        );
        let add = &grid[position(grid, ">hist-add</a>")..];
        assert!(add[..position(add, "</tr>")].matches("✓2/2").count() == 3, "{add}");
    }

    #[test]
    fn failed_cases_stay_in_the_overhead_charts_marked() {
        let html = render(&two_runs());
        let overheads = &html[position(&html, "id=\"overheads\"")..position(&html, "id=\"trends\"")];
        assert!(overheads.contains("hist-mul cpu auto vjp (failed check)"), "kept and marked");
        assert!(overheads.contains("hist-add cpu auto vjp"));
        assert!(overheads.contains("log axis"));
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
        let html = render(&[(info("r1", 23, "abc"), vec![cpu, jax, pytorch])]);
        let tools = &html[position(&html, "id=\"tools\"")..position(&html, "id=\"overheads\"")];
        let jax_row = &tools[position(tools, ">jax<")..];
        let jax_row = &jax_row[..position(jax_row, "</tr>")];
        assert!(jax_row.contains("<td>8 (4x)</td>"), "vjp 8 ms, 4x the CPU's 2 ms: {jax_row}");
        assert!(jax_row.contains("<td>1 (1x)</td>"), "{jax_row}");
        assert!(jax_row.contains("convention — ties: convention: tie-policy split"), "{jax_row}");
        assert!(tools.contains("unsupported — unsupported: tool pytorch"), "{tools}");
        // One run: the verdict says so.
        assert!(html.contains("one run only, nothing to compare with"));
        assert!(html.contains("class=\"verdict pass\""));
    }

    #[test]
    fn the_environment_of_the_two_runs_is_diffed_and_trends_are_dated() {
        let mut runs = two_runs();
        for r in &mut runs[1].1 {
            r.threads = 1;
        }
        let html = render(&runs);
        let env = &html[position(&html, "id=\"environment\"")..];
        assert!(
            env.contains(
                "<tr class=\"diff\"><th class=\"l\">threads</th><td class=\"l\">1</td><td class=\"l\">2</td></tr>"
            ),
            "{env}"
        );
        assert!(env.contains("<tr><th class=\"l\">CPU</th>"), "unchanged rows are plain");
        let trends = &html[position(&html, "id=\"trends\"")..position(&html, "id=\"environment\"")];
        assert!(trends.contains("11-22 abc1234") && trends.contains("11-23 fed4321"), "dated and committed ticks");
        assert!(trends.contains("<ul class=\"legend\">") && trends.contains("cpu f32 k=10 n=1000000"));
    }

    #[test]
    fn every_trend_series_is_drawn_and_repeated_colours_are_said() {
        let rows: Vec<ResultRow> = (0..15).map(|i| row("hist-add", 10 + i, 2.0, true)).collect();
        let html = render(&[(info("r1", 22, "a"), rows.clone()), (info("r2", 23, "b"), rows)]);
        let trends = &html[position(&html, "id=\"trends\"")..position(&html, "id=\"environment\"")];
        assert_eq!(trends.matches("<li>").count(), 15, "every series in the legend");
        assert!(trends.contains("15 series; colours repeat after 12"));
    }

    #[test]
    fn an_empty_history_still_renders() {
        assert!(render(&[]).contains("holds no runs"));
    }
}

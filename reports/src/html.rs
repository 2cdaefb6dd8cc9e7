//! The self-contained HTML report: one `index.html` with inline SVG and CSS, no JavaScript and no
//! network access, rebuilt from result files alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::charts::{self, Series};
use crate::gate::{Finding, GateConfig, gate};
use crate::schema::{ResultRow, RunInfo, Status};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn anchor(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

fn ms(x: Option<f64>) -> String {
    x.map(|s| format!("{:.3}", s * 1e3)).unwrap_or_else(|| "–".into())
}

fn ratio(x: Option<f64>) -> String {
    x.map(|r| format!("{r:.2}")).unwrap_or_else(|| "–".into())
}

fn chart_or_note(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| format!("<p class=\"note\">{}</p>", esc(&e)))
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#222}\
h1{margin-top:24px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:36px}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}.ok{color:#1a7f37}.bad{color:#c62828;font-weight:bold}\
.skip{color:#888}nav a{margin-right:12px}.note{color:#666}.charts svg{max-width:100%;height:auto;margin:6px 0}\
.summary td{font-size:15px}";

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

/// Renders the report for a history (oldest run first; the newest is the one reported on).
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
    let workloads: BTreeSet<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    let _ = write!(
        h,
        "<h1>adgauge report</h1><p>Run <b>{}</b> of {} in this history.</p><nav>",
        esc(&info.run_id),
        history.len()
    );
    for a in ["summary", "environment", "overheads", "validation", "trends"] {
        let _ = write!(h, "<a href=\"#{a}\">{a}</a>");
    }
    for w in &workloads {
        let _ = write!(h, "<a href=\"#w-{}\">{}</a>", anchor(w), esc(w));
    }
    h.push_str("</nav>");

    // Summary: status counts and what regressed against the previous run.
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *counts.entry(r.status.name()).or_default() += 1;
    }
    h.push_str("<h2 id=\"summary\">Summary</h2><table class=\"summary\"><tr>");
    for s in ["ok", "failed", "error", "timeout", "skipped"] {
        let _ = write!(h, "<th>{s}</th>");
    }
    h.push_str("</tr><tr>");
    for s in ["ok", "failed", "error", "timeout", "skipped"] {
        let n = counts.get(s).copied().unwrap_or(0);
        let class = match (s, n) {
            ("ok", _) | (_, 0) => "ok",
            ("skipped", _) => "skip",
            _ => "bad",
        };
        let _ = write!(h, "<td class=\"{class}\">{n}</td>");
    }
    h.push_str("</tr></table>");
    if history.len() >= 2 {
        let (prev_info, prev) = &history[history.len() - 2];
        let report = gate(prev, rows, &GateConfig::default());
        let _ = write!(
            h,
            "<p>Compared with the previous run <b>{}</b>: {} cases, ",
            esc(&prev_info.run_id),
            report.compared
        );
        let mut slower: Vec<&Finding> =
            report.findings.iter().filter(|f| matches!(f, Finding::Slower { .. })).collect();
        slower.sort_by(|a, b| match (a, b) {
            (Finding::Slower { ratio: x, .. }, Finding::Slower { ratio: y, .. }) => y.total_cmp(x),
            _ => std::cmp::Ordering::Equal,
        });
        let broken = report.findings.iter().filter(|f| matches!(f, Finding::Broken { .. })).count();
        let _ = write!(h, "{} slower beyond threshold and noise, {broken} broken.</p>", slower.len());
        if !slower.is_empty() {
            h.push_str("<table><tr><th class=\"l\">worst regressions</th><th>metric</th><th>before ms</th><th>now ms</th><th>ratio</th></tr>");
            for f in slower.iter().take(10) {
                if let Finding::Slower { case_id, metric, baseline, current, ratio, .. } = f {
                    let _ = write!(
                        h,
                        "<tr><td class=\"l\">{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td class=\"bad\">{ratio:.2}</td></tr>",
                        esc(case_id),
                        esc(metric),
                        baseline * 1e3,
                        current * 1e3
                    );
                }
            }
            h.push_str("</table>");
        }
    } else {
        h.push_str("<p class=\"note\">One run only: no comparison yet.</p>");
    }

    // Environment.
    h.push_str("<h2 id=\"environment\">Environment</h2><table>");
    let threads: BTreeSet<usize> = rows.iter().map(|r| r.threads).collect();
    let seeds: BTreeSet<u64> = rows.iter().map(|r| r.seed).collect();
    let env = [
        ("run id", info.run_id.clone()),
        ("time (UTC)", info.timestamp.clone()),
        ("git revision", info.git_revision.clone()),
        ("adgauge", info.adgauge_version.clone()),
        ("machine", info.machine.clone()),
        ("CPU", info.cpu_model.clone()),
        ("cores", info.cores.to_string()),
        ("frequency governor", info.governor.clone()),
        ("threads", threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")),
        ("seeds", seeds.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")),
    ];
    for (k, v) in env {
        let _ = write!(h, "<tr><th class=\"l\">{k}</th><td class=\"l\">{}</td></tr>", esc(&v));
    }
    h.push_str("</table>");

    // Overhead bars: geometric mean over each workload's cases per backend x mode x rule.
    let mut groups: BTreeMap<String, Ratios> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.status == Status::Ok) {
        let g = groups.entry(format!("{} {} {}", r.workload, r.backend, r.rule)).or_default();
        g.0.extend(r.vjp_overhead());
        g.1.extend(r.jvp_overhead());
        g.2.extend(r.vjp_memory_ratio());
        g.3.extend(r.jvp_memory_ratio());
    }
    let bar_set = |pick: &dyn Fn(&Ratios) -> &Vec<f64>, mode: &str| -> Vec<(String, f64)> {
        groups.iter().filter_map(|(k, g)| geo_mean(pick(g)).map(|m| (format!("{k} {mode}"), m))).collect()
    };
    h.push_str("<h2 id=\"overheads\">AD overhead</h2><p class=\"note\">Geometric mean over each workload's cases; derivative time / primal time on the same device in the same run, and peak memory ratios.</p><div class=\"charts\">");
    let mut time_bars = bar_set(&|g| &g.0, "vjp");
    time_bars.extend(bar_set(&|g| &g.1, "jvp"));
    h.push_str(&chart_or_note(charts::bars(
        "AD overhead (derivative time / primal time)",
        "overhead (x)",
        &time_bars,
        Some(1.0),
    )));
    let mut mem_bars = bar_set(&|g| &g.2, "vjp");
    mem_bars.extend(bar_set(&|g| &g.3, "jvp"));
    h.push_str(&chart_or_note(charts::bars(
        "Memory overhead (peak bytes / primal peak bytes)",
        "ratio (x)",
        &mem_bars,
        Some(1.0),
    )));
    h.push_str("</div>");

    // Validation details.
    h.push_str("<h2 id=\"validation\">Validation</h2><table><tr><th class=\"l\">case</th><th class=\"l\">check</th><th>worst</th><th>tolerance</th><th class=\"l\">result</th></tr>");
    let mut any = false;
    for r in rows {
        for c in &r.checks {
            any = true;
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
    }
    if !any {
        h.push_str("<tr><td class=\"l\" colspan=\"5\">no checks in this run</td></tr>");
    }
    h.push_str("</table>");

    // History trends: vjp overhead per case over the runs (auto rule, to keep charts readable).
    h.push_str("<h2 id=\"trends\">History trends</h2><div class=\"charts\">");
    for w in &workloads {
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (i, (_, rs)) in history.iter().enumerate() {
            for r in rs.iter().filter(|r| &r.workload == w && (r.rule == "auto" || r.rule == "-")) {
                if let Some(o) = r.vjp_overhead() {
                    let label = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
                    series.entry(format!("{} {} {label}", r.backend, r.dtype)).or_default().push(((i + 1) as f64, o));
                }
            }
        }
        let s: Vec<Series> = series.into_iter().take(6).map(|(name, points)| Series { name, points }).collect();
        h.push_str(&chart_or_note(charts::trend(
            &format!("{w}: vjp overhead over runs"),
            "vjp / primal",
            &s,
            history.len(),
        )));
    }
    h.push_str("</div>");

    // Per-workload sections.
    for w in &workloads {
        let mine: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == *w).collect();
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
            h.push_str(&chart_or_note(charts::runtime_and_overhead(&title, p, &runtimes, &overheads)));
        }
        h.push_str("</div><table><tr><th class=\"l\">case</th><th>primal ms</th><th>vjp ms</th><th>jvp ms</th><th>vjp/primal</th><th>jvp/primal</th><th>mem vjp</th><th>mem jvp</th><th class=\"l\">status</th></tr>");
        for r in &mine {
            let _ = write!(
                h,
                "<tr id=\"c-{}\"><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l {}\">{}</td></tr>",
                anchor(&r.case_id),
                esc(&r.case_id),
                ms(r.primal.as_ref().map(|t| t.median_s)),
                ms(r.vjp.as_ref().map(|t| t.median_s)),
                ms(r.jvp.as_ref().map(|t| t.median_s)),
                ratio(r.vjp_overhead()),
                ratio(r.jvp_overhead()),
                ratio(r.vjp_memory_ratio()),
                ratio(r.jvp_memory_ratio()),
                status_class(r.status),
                esc(&format!(
                    "{}{}",
                    r.status.name(),
                    r.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default()
                ))
            );
        }
        h.push_str("</table>");
    }
    h.push_str(
        "<p class=\"note\">Generated by adgauge from result files alone; no scripts, no network.</p></body></html>",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Check, Timing};

    fn row(workload: &str, k: u64, vjp_ms: f64, passed: bool) -> ResultRow {
        let t = |ms: f64| {
            Some(Timing {
                min_s: ms * 0.9e-3,
                median_s: ms * 1e-3,
                max_s: ms * 1.1e-3,
                batch: 1,
                samples: 5,
                cv: 0.05,
                sample_s: vec![],
            })
        };
        let mut params = BTreeMap::new();
        params.insert("k".to_string(), k.to_string());
        params.insert("n".to_string(), "1000000".to_string());
        ResultRow {
            schema_version: crate::SCHEMA_VERSION,
            case_id: format!("{workload}[k={k},n=1000000]/cpu/f32/auto"),
            workload: workload.into(),
            params,
            backend: "cpu".into(),
            dtype: "f32".into(),
            rule: "auto".into(),
            threads: 2,
            seed: 7,
            primal: t(1.0),
            vjp: t(vjp_ms),
            jvp: t(1.5),
            primal_peak_bytes: Some(1000),
            vjp_peak_bytes: Some(3000),
            jvp_peak_bytes: Some(2000),
            checks: vec![Check {
                name: "fd-vjp".into(),
                worst: if passed { 1e-9 } else { 0.3 },
                tolerance: 1e-6,
                passed,
            }],
            status: if passed { Status::Ok } else { Status::Failed },
            message: None,
            compile_s: None,
            tool_version: None,
        }
    }

    fn info(id: &str) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            timestamp: "2026-11-22T05:00:00Z".into(),
            git_revision: "abc".into(),
            adgauge_version: "0.1.0".into(),
            machine: "host <x>".into(),
            cpu_model: "cpu".into(),
            cores: 2,
            governor: "unknown".into(),
            suite: String::new(),
        }
    }

    #[test]
    fn the_report_has_every_section_charts_for_both_runs_and_no_scripts() {
        let first =
            vec![row("hist-add", 10, 2.0, true), row("hist-add", 1000, 2.0, true), row("hist-mul", 10, 2.5, true)];
        let second =
            vec![row("hist-add", 10, 5.0, true), row("hist-add", 1000, 2.0, true), row("hist-mul", 10, 2.5, false)];
        let html = render(&[(info("r1"), first), (info("r2"), second)]);
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>"));
        for id in ["summary", "environment", "overheads", "validation", "trends", "w-hist-add", "w-hist-mul"] {
            assert!(html.contains(&format!("id=\"{id}\"")), "missing section {id}");
            assert!(html.contains(&format!("href=\"#{id}\"")), "missing link to {id}");
        }
        // Runtime-vs-k chart for hist-add, 2 bar charts, 2 trend charts.
        assert!(html.matches("<svg").count() >= 5, "{}", html.matches("<svg").count());
        assert!(html.contains("runtime and overhead vs k"));
        // The 2.5x slower vjp of the k=10 case is listed among the regressions; the failed check shows.
        assert!(html.contains("worst regressions") && html.contains("hist-add[k=10,n=1000000]/cpu/f32/auto"));
        assert!(html.contains("FAIL"));
        assert!(html.contains("host &lt;x&gt;"), "text is escaped");
        // Nothing is fetched: no scripts, no external references (the SVG namespace URI is a name).
        assert!(!html.contains("<script"));
        for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
            assert!(!html.contains(external), "external reference {external}");
        }
        // The trend chart shows both runs.
        assert!(html.contains("vjp overhead over runs"));
    }

    #[test]
    fn an_empty_history_still_renders() {
        assert!(render(&[]).contains("holds no runs"));
    }
}

//! Regression gates: a current run against a baseline run, case by case (matched by case id).
//!
//! * correctness: a case whose checks fail now, or that passed in the baseline and now fails,
//!   errors, times out or is skipped (a tool that became unavailable loses coverage), or whose
//!   times or check values are not finite, fails the gate (exit 1); so does a baseline case the
//!   current run lacks;
//! * speed: a case regressed when its median time (per mode) or its overhead grew beyond
//!   `max_slowdown` AND beyond the noise — the relative spread (max - min) / median of the
//!   baseline's and the current samples, whichever is larger — so that a noisy case does not
//!   flag on noise alone (exit 3). Cases whose baseline median is under `min_seconds` are too
//!   short to time reliably and are not judged on speed.

use std::collections::BTreeMap;

use crate::schema::{ResultRow, Status, Timing};

/// Gate thresholds.
#[derive(Clone, Copy, Debug)]
pub struct GateConfig {
    pub max_slowdown: f64,
    pub min_seconds: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig { max_slowdown: 1.15, min_seconds: 0.0 }
    }
}

/// What the gate found for one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// A correctness failure in the current run (check failed, or ok -> error/timeout).
    Broken { case_id: String, detail: String },
    /// A metric that got slower beyond threshold and noise.
    Slower { case_id: String, metric: String, baseline: f64, current: f64, ratio: f64, noise: f64 },
    /// A case of the baseline that the current run lacks.
    Missing { case_id: String },
}

impl Finding {
    pub fn case_id(&self) -> &str {
        match self {
            Finding::Broken { case_id, .. } | Finding::Slower { case_id, .. } | Finding::Missing { case_id } => case_id,
        }
    }
}

/// The gate's verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateReport {
    pub findings: Vec<Finding>,
    /// Cases compared.
    pub compared: usize,
}

impl GateReport {
    pub fn broken(&self) -> bool {
        self.findings.iter().any(|f| matches!(f, Finding::Broken { .. }))
    }
    pub fn slower(&self) -> bool {
        self.findings.iter().any(|f| matches!(f, Finding::Slower { .. }))
    }
    pub fn missing(&self) -> bool {
        self.findings.iter().any(|f| matches!(f, Finding::Missing { .. }))
    }
}

fn spread(t: &Timing) -> f64 {
    if t.median_s > 0.0 { (t.max_s - t.min_s) / t.median_s } else { 0.0 }
}

/// A timing that is not a finite non-negative time (corrupted or hand-edited results).
fn bad_timing(r: &ResultRow) -> Option<String> {
    for (mode, t) in [("primal", &r.primal), ("vjp", &r.vjp), ("jvp", &r.jvp)] {
        if let Some(t) = t
            && [t.min_s, t.median_s, t.max_s].iter().any(|x| !x.is_finite() || *x < 0.0)
        {
            return Some(format!("{mode} timing is not a finite non-negative time (median {})", t.median_s));
        }
    }
    None
}

fn failed(r: &ResultRow) -> Option<String> {
    if let Some(c) = r.checks.iter().find(|c| !c.passed) {
        return Some(format!("check {} worst {:.3e} > tolerance {:.1e}", c.name, c.worst, c.tolerance));
    }
    // A NaN worst value compares false with its tolerance: it must not read as a pass.
    if let Some(c) = r.checks.iter().find(|c| c.worst.is_nan()) {
        return Some(format!("check {}: worst value is NaN", c.name));
    }
    if let Some(bad) = bad_timing(r) {
        return Some(bad);
    }
    match r.status {
        Status::Failed | Status::Error | Status::Timeout => {
            Some(format!("status {}: {}", r.status.name(), r.message.clone().unwrap_or_default()))
        }
        Status::Ok | Status::Skipped => None,
    }
}

/// Compares `current` against `baseline`.
pub fn gate(baseline: &[ResultRow], current: &[ResultRow], cfg: &GateConfig) -> GateReport {
    let cur: BTreeMap<&str, &ResultRow> = current.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let mut report = GateReport::default();
    // Failing checks in the current run fail the gate whatever the baseline says.
    for r in current {
        if let Some(detail) = failed(r) {
            report.findings.push(Finding::Broken { case_id: r.case_id.clone(), detail });
        }
    }
    for b in baseline {
        let Some(c) = cur.get(b.case_id.as_str()) else {
            report.findings.push(Finding::Missing { case_id: b.case_id.clone() });
            continue;
        };
        report.compared += 1;
        if failed(c).is_some() {
            continue; // already reported
        }
        // A baseline that cannot be compared with (an infinite time would hide any slowdown).
        if let Some(bad) = bad_timing(b) {
            report.findings.push(Finding::Broken { case_id: b.case_id.clone(), detail: format!("baseline's {bad}") });
            continue;
        }
        if b.status == Status::Ok && c.status == Status::Skipped {
            let why = c.message.clone().unwrap_or_default();
            report
                .findings
                .push(Finding::Broken { case_id: b.case_id.clone(), detail: format!("was ok, now skipped: {why}") });
            continue;
        }
        let timings = [("primal", &b.primal, &c.primal), ("vjp", &b.vjp, &c.vjp), ("jvp", &b.jvp, &c.jvp)];
        for (mode, tb, tc) in timings {
            let (Some(tb), Some(tc)) = (tb, tc) else {
                continue;
            };
            if tb.median_s < cfg.min_seconds || !(tb.median_s > 0.0 && tb.median_s.is_finite()) {
                continue;
            }
            let ratio = tc.median_s / tb.median_s;
            let noise = spread(tb).max(spread(tc));
            if ratio > cfg.max_slowdown && ratio - 1.0 > noise {
                report.findings.push(Finding::Slower {
                    case_id: b.case_id.clone(),
                    metric: format!("{mode} median"),
                    baseline: tb.median_s,
                    current: tc.median_s,
                    ratio,
                    noise,
                });
            }
        }
    }
    report
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A JUnit XML summary: one test case per compared case id, failures for findings.
pub fn junit(report: &GateReport, case_ids: &[String]) -> String {
    let mut by_case: BTreeMap<&str, Vec<&Finding>> = BTreeMap::new();
    for f in &report.findings {
        by_case.entry(f.case_id()).or_default().push(f);
    }
    let mut ids: Vec<&str> = case_ids.iter().map(String::as_str).collect();
    for f in &report.findings {
        if !ids.contains(&f.case_id()) {
            ids.push(f.case_id());
        }
    }
    let failures = ids.iter().filter(|id| by_case.contains_key(*id)).count();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"adgauge gate\" tests=\"{}\" failures=\"{failures}\">\n",
        ids.len()
    );
    for id in ids {
        s.push_str(&format!("  <testcase classname=\"adgauge\" name=\"{}\"", xml_escape(id)));
        match by_case.get(id) {
            None => s.push_str("/>\n"),
            Some(fs) => {
                s.push_str(">\n");
                for f in fs {
                    let (kind, msg) = match f {
                        Finding::Broken { detail, .. } => ("broken", detail.clone()),
                        Finding::Slower { metric, baseline, current, ratio, noise, .. } => (
                            "slower",
                            format!(
                                "{metric}: {baseline:.3e} s -> {current:.3e} s ({ratio:.2}x, noise {:.0}%)",
                                noise * 100.0
                            ),
                        ),
                        Finding::Missing { .. } => ("missing", "the case is missing from the current run".to_string()),
                    };
                    s.push_str(&format!("    <failure type=\"{kind}\" message=\"{}\"/>\n", xml_escape(&msg)));
                }
                s.push_str("  </testcase>\n");
            }
        }
    }
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Check;

    fn row(id: &str, median: f64, spread: f64) -> ResultRow {
        let t = Timing {
            min_s: median * (1.0 - spread / 2.0),
            median_s: median,
            max_s: median * (1.0 + spread / 2.0),
            batch: 1,
            samples: 5,
            cv: spread / 4.0,
        };
        ResultRow {
            schema_version: crate::SCHEMA_VERSION,
            case_id: id.into(),
            workload: "w".into(),
            params: BTreeMap::new(),
            backend: "cpu".into(),
            dtype: "f32".into(),
            rule: "auto".into(),
            threads: 2,
            seed: 1,
            primal: Some(t.clone()),
            vjp: Some(t),
            jvp: None,
            primal_peak_bytes: None,
            vjp_peak_bytes: None,
            jvp_peak_bytes: None,
            checks: vec![Check { name: "fd-vjp".into(), worst: 1e-9, tolerance: 1e-6, passed: true }],
            status: Status::Ok,
            message: None,
            compile_s: None,
        }
    }

    #[test]
    fn identical_runs_pass() {
        let a = vec![row("a", 1e-3, 0.05), row("b", 2e-3, 0.05)];
        let r = gate(&a, &a, &GateConfig::default());
        assert_eq!(r.compared, 2);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn a_two_times_slower_case_is_flagged_but_noise_is_not() {
        let base = vec![row("a", 1e-3, 0.05), row("noisy", 1e-3, 0.9)];
        let cur = vec![row("a", 2e-3, 0.05), row("noisy", 1.5e-3, 0.9)];
        let r = gate(&base, &cur, &GateConfig::default());
        assert!(r.slower() && !r.broken());
        let slow: Vec<&str> = r.findings.iter().map(|f| f.case_id()).collect();
        assert_eq!(slow, vec!["a", "a"]); // primal and vjp
        let short = gate(&base, &cur, &GateConfig { min_seconds: 0.01, ..GateConfig::default() });
        assert!(short.findings.is_empty());
    }

    #[test]
    fn a_failing_check_breaks_the_gate_and_shows_in_junit() {
        let base = vec![row("a", 1e-3, 0.05)];
        let mut bad = row("a", 1e-3, 0.05);
        bad.checks[0].passed = false;
        bad.checks[0].worst = 0.5;
        let r = gate(&base, &[bad], &GateConfig::default());
        assert!(r.broken());
        let xml = junit(&r, &["a".to_string(), "b<c".to_string()]);
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
        assert!(xml.contains("<failure type=\"broken\" message=\"check fd-vjp worst 5.000e-1"), "{xml}");
        assert!(xml.contains("name=\"b&lt;c\"/>"), "{xml}");
    }

    #[test]
    fn a_case_missing_from_the_current_run_is_reported() {
        let r = gate(&[row("a", 1e-3, 0.0)], &[], &GateConfig::default());
        assert_eq!(r.findings, vec![Finding::Missing { case_id: "a".into() }]);
        assert!(r.missing());
    }

    #[test]
    fn lost_coverage_and_non_finite_results_break_the_gate() {
        let base = vec![row("a", 1e-3, 0.05), row("b", 1e-3, 0.05), row("c", 1e-3, 0.05)];
        let mut skipped = row("a", 1e-3, 0.05);
        skipped.status = Status::Skipped;
        skipped.message = Some("backend opencl unavailable: no platform".into());
        let mut nan_time = row("b", 1e-3, 0.05);
        nan_time.primal.as_mut().unwrap().median_s = f64::NAN;
        let mut nan_check = row("c", 1e-3, 0.05);
        nan_check.checks[0].worst = f64::NAN;
        nan_check.checks[0].passed = true;
        let r = gate(&base, &[skipped, nan_time, nan_check], &GateConfig::default());
        let broken: Vec<(&str, &str)> = r
            .findings
            .iter()
            .filter_map(|f| match f {
                Finding::Broken { case_id, detail } => Some((case_id.as_str(), detail.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(broken.len(), 3, "{:?}", r.findings);
        assert!(broken.iter().any(|(id, d)| *id == "a" && d.starts_with("was ok, now skipped: backend opencl")));
        assert!(broken.iter().any(|(id, d)| *id == "b" && d.contains("primal timing is not a finite")));
        assert!(broken.iter().any(|(id, d)| *id == "c" && d.contains("worst value is NaN")));
        // An infinite baseline would hide any slowdown: it breaks the gate instead.
        let mut inf = row("a", 1e-3, 0.05);
        inf.primal.as_mut().unwrap().median_s = f64::INFINITY;
        let r = gate(&[inf], &[row("a", 1e-3, 0.05)], &GateConfig::default());
        assert!(r.broken(), "{:?}", r.findings);
    }
}

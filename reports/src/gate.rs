//! Regression gates: a current run against a baseline, case by case (matched by case id).
//! `docs/gate.md` is the reference; in short, these are failures (exit 1):
//!
//! * a check that fails now, a status of failed/error/timeout, or a time or check value that is
//!   not finite ([`Finding::Broken`]);
//! * a check that passed in the baseline and now fails or no longer runs ([`Finding::CheckRegressed`]);
//! * a baseline case missing from the current run, or skipped now where it ran in the baseline
//!   ([`Finding::Missing`], [`Finding::Skipped`]; notes instead with `allow_missing`);
//! * a tool whose cases ran in the baseline and are all skipped now ([`Finding::ToolLost`]);
//! * a change of environment: CPU model, cores, governor, suite, the dtypes run, a case's
//!   threads or a tool's version ([`Finding::EnvChanged`]; notes with `allow_env_change`, and
//!   speed is then judged anyway).
//!
//! Speed (exit 3, [`Finding::Slower`]): a mode's median grew beyond `max_slowdown` AND a one-sided
//! Mann-Whitney rank test on the samples says the current samples are larger (p < `alpha`), with
//! at least `min_samples` on both sides; cases whose baseline median is under `min_seconds` are
//! not judged (timer resolution and scheduling dominate there). Rows without samples (schema 1
//! and 2 files) fall back to the median against the spread (max - min) / median of both sides.
//! The caller refuses a comparison of zero cases (nothing ran in both runs).

use std::collections::{BTreeMap, BTreeSet};

use crate::schema::{ResultRow, RunInfo, Status, Timing};

/// Gate thresholds and waivers.
#[derive(Clone, Copy, Debug)]
pub struct GateConfig {
    /// Largest accepted ratio of current to baseline median time.
    pub max_slowdown: f64,
    /// Baseline medians shorter than this are not judged on speed.
    pub min_seconds: f64,
    /// Significance level of the rank test.
    pub alpha: f64,
    /// Samples needed on each side for the rank test.
    pub min_samples: usize,
    /// Missing and skipped cases are notes, not failures.
    pub allow_missing: bool,
    /// Environment changes are notes, not failures.
    pub allow_env_change: bool,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            max_slowdown: 1.15,
            min_seconds: 1e-3,
            alpha: 0.01,
            min_samples: 5,
            allow_missing: false,
            allow_env_change: false,
        }
    }
}

/// What the gate found.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// A correctness failure in the current run (check failed, or ok -> error/timeout).
    Broken { case_id: String, detail: String },
    /// A check that passed in the baseline and fails now, or no longer runs.
    CheckRegressed { case_id: String, check: String, detail: String },
    /// A metric that got slower beyond threshold, with statistical evidence.
    Slower { case_id: String, metric: String, baseline: f64, current: f64, ratio: f64, evidence: String },
    /// A case of the baseline that the current run lacks.
    Missing { case_id: String },
    /// A case that ran in the baseline and is skipped now (its tool or backend is unavailable).
    Skipped { case_id: String, reason: String },
    /// A tool whose cases ran in the baseline and are all skipped now.
    ToolLost { tool: String, reason: String },
    /// Something about the machine or the run's set-up that makes the runs unlike.
    EnvChanged { what: String, baseline: String, current: String },
}

impl Finding {
    /// The case (or pseudo-case, for tools and the environment) a finding is about.
    pub fn case_id(&self) -> &str {
        match self {
            Finding::Broken { case_id, .. }
            | Finding::CheckRegressed { case_id, .. }
            | Finding::Slower { case_id, .. }
            | Finding::Missing { case_id }
            | Finding::Skipped { case_id, .. } => case_id,
            Finding::ToolLost { .. } => "(tools)",
            Finding::EnvChanged { .. } => "(environment)",
        }
    }

    /// A short kind name (JSON, JUnit, the text lines).
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::Broken { .. } => "broken",
            Finding::CheckRegressed { .. } => "check-regressed",
            Finding::Slower { .. } => "slower",
            Finding::Missing { .. } => "missing",
            Finding::Skipped { .. } => "skipped",
            Finding::ToolLost { .. } => "tool-lost",
            Finding::EnvChanged { .. } => "env-changed",
        }
    }

    /// One line saying what was found.
    pub fn describe(&self) -> String {
        match self {
            Finding::Broken { case_id, detail } => format!("{case_id}: {detail}"),
            Finding::CheckRegressed { case_id, detail, .. } => format!("{case_id}: {detail}"),
            Finding::Slower { case_id, metric, baseline, current, ratio, evidence } => format!(
                "{case_id}: {metric} {:.3} ms -> {:.3} ms ({ratio:.2}x; {evidence})",
                baseline * 1e3,
                current * 1e3
            ),
            Finding::Missing { case_id } => format!("{case_id}: in the baseline, missing from the current run"),
            Finding::Skipped { case_id, reason } => format!("{case_id}: ran in the baseline, skipped now: {reason}"),
            Finding::ToolLost { tool, reason } => {
                format!("tool {tool}: its cases ran in the baseline, all are skipped now: {reason}")
            }
            Finding::EnvChanged { what, baseline, current } => format!("{what}: {baseline} -> {current}"),
        }
    }
}

/// The gate's verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateReport {
    /// What fails the gate.
    pub findings: Vec<Finding>,
    /// What was waived (`allow_missing`, `allow_env_change`): reported, not failing.
    pub notes: Vec<Finding>,
    /// Cases compared: present in both runs and run (not skipped) in the baseline.
    pub compared: usize,
    /// Case ids the two runs share.
    pub shared: usize,
    /// Mode timings not judged on speed (too short, or too few samples), with why.
    pub not_judged: Vec<String>,
}

impl GateReport {
    /// Any correctness, coverage or environment finding: exit 1.
    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| !matches!(f, Finding::Slower { .. }))
    }
    pub fn broken(&self) -> bool {
        self.findings.iter().any(|f| matches!(f, Finding::Broken { .. } | Finding::CheckRegressed { .. }))
    }
    pub fn slower(&self) -> bool {
        self.findings.iter().any(|f| matches!(f, Finding::Slower { .. }))
    }
    pub fn missing(&self) -> bool {
        self.findings.iter().any(|f| matches!(f, Finding::Missing { .. } | Finding::Skipped { .. }))
    }
}

/// A baseline: the rows to compare with and the runs they come from.
#[derive(Clone, Debug)]
pub struct Baseline {
    /// How it was chosen, for the report (e.g. `previous run 2026...`, `best of 7 runs`).
    pub label: String,
    pub runs: Vec<RunInfo>,
    pub rows: Vec<ResultRow>,
}

impl Baseline {
    /// One run as the baseline.
    pub fn run(label: String, info: RunInfo, rows: Vec<ResultRow>) -> Baseline {
        Baseline { label, runs: vec![info], rows }
    }

    /// The per-case best of several runs (oldest first): the cases of the newest run, each mode's
    /// timing replaced by the lowest-median timing any of the runs measured for that case (in a
    /// run where the case did not fail). A slow drift, each night a little slower than the last,
    /// then adds up against the best night of the window instead of moving the baseline with it.
    pub fn best_of(runs: Vec<(RunInfo, Vec<ResultRow>)>) -> Option<Baseline> {
        let (_, newest) = runs.last()?;
        let mut rows = newest.clone();
        for row in &mut rows {
            for (mode, slot) in [("primal", 0), ("vjp", 1), ("jvp", 2)] {
                let best = runs
                    .iter()
                    .flat_map(|(_, rs)| rs.iter().filter(|r| r.case_id == row.case_id))
                    .filter(|r| matches!(r.status, Status::Ok))
                    .filter_map(|r| [&r.primal, &r.vjp, &r.jvp][slot].as_ref())
                    .filter(|t| t.median_s.is_finite() && t.median_s > 0.0)
                    .min_by(|a, b| a.median_s.total_cmp(&b.median_s))
                    .cloned();
                let field = match mode {
                    "primal" => &mut row.primal,
                    "vjp" => &mut row.vjp,
                    _ => &mut row.jvp,
                };
                if best.is_some() {
                    *field = best;
                }
            }
        }
        let n = runs.len();
        let ids: Vec<String> = runs.iter().map(|(i, _)| i.run_id.clone()).collect();
        Some(Baseline {
            label: format!("best of {n} run(s) ({} .. {})", ids[0], ids[n - 1]),
            runs: runs.into_iter().map(|(i, _)| i).collect(),
            rows,
        })
    }
}

fn spread(t: &Timing) -> f64 {
    if t.median_s > 0.0 { (t.max_s - t.min_s) / t.median_s } else { 0.0 }
}

/// A timing that is not a finite non-negative time (corrupted or hand-edited results).
fn bad_timing(r: &ResultRow) -> Option<String> {
    for (mode, t) in [("primal", &r.primal), ("vjp", &r.vjp), ("jvp", &r.jvp)] {
        if let Some(t) = t
            && [t.min_s, t.median_s, t.max_s].iter().chain(&t.sample_s).any(|x| !x.is_finite() || *x < 0.0)
        {
            return Some(format!("{mode} timing is not a finite non-negative time (median {})", t.median_s));
        }
    }
    None
}

/// Why a current row is broken, whatever the baseline says.
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

/// The exact upper tail P(U >= u) of the Mann-Whitney U statistic for sample sizes `m` and `n`
/// under the null hypothesis (no ties), by counting rank arrangements; a normal approximation
/// (continuity-corrected) where the table would be large.
pub fn mann_whitney_upper_tail(u: f64, m: usize, n: usize) -> f64 {
    if m == 0 || n == 0 {
        return 1.0;
    }
    let max = m * n;
    if max > 4096 {
        let mean = max as f64 / 2.0;
        let sd = ((m * n * (m + n + 1)) as f64 / 12.0).sqrt();
        let z = (u - mean - 0.5) / sd;
        return 0.5 * erfc(z / std::f64::consts::SQRT_2);
    }
    // counts[i][j][k]: arrangements of i current and j baseline values with U = k. Built row by
    // row: the largest value is either a current one (beating all j baseline values) or not.
    let mut prev: Vec<Vec<f64>> = vec![vec![1.0]; n + 1]; // i = 0: U = 0 for any j
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]); // j = 0
        for j in 1..=n {
            let mut v = vec![0.0; i * j + 1];
            for (k, c) in prev[j].iter().enumerate() {
                v[k + j] += c;
            }
            for (k, c) in cur[j - 1].iter().enumerate() {
                v[k] += c;
            }
            cur.push(v);
        }
        prev = cur;
    }
    let dist = &prev[n];
    let total: f64 = dist.iter().sum();
    // Ties give half-integer U: count from its floor, the conservative side.
    let from = u.floor().max(0.0) as usize;
    dist.iter().skip(from).sum::<f64>() / total
}

/// Complementary error function (Numerical Recipes' erfcc, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// One-sided Mann-Whitney test that `current` tends to be larger than `baseline`: (U, p).
pub fn mann_whitney_greater(current: &[f64], baseline: &[f64]) -> (f64, f64) {
    let mut u = 0.0;
    for c in current {
        for b in baseline {
            u += if c > b {
                1.0
            } else if c == b {
                0.5
            } else {
                0.0
            };
        }
    }
    (u, mann_whitney_upper_tail(u, current.len(), baseline.len()))
}

/// Judges one mode's timing: a finding, a reason it was not judged, or neither.
fn judge_speed(
    case_id: &str,
    mode: &str,
    tb: &Timing,
    tc: &Timing,
    cfg: &GateConfig,
) -> Result<Option<Finding>, String> {
    if !(tb.median_s > 0.0 && tb.median_s.is_finite()) {
        return Err(format!("{case_id} {mode}: baseline median is not a positive time"));
    }
    if tb.median_s < cfg.min_seconds {
        return Err(format!(
            "{case_id} {mode}: {:.3} ms is under the {:.3} ms minimum",
            tb.median_s * 1e3,
            cfg.min_seconds * 1e3
        ));
    }
    let ratio = tc.median_s / tb.median_s;
    let evidence = if !tb.sample_s.is_empty() && !tc.sample_s.is_empty() {
        let (nb, nc) = (tb.sample_s.len(), tc.sample_s.len());
        if nb < cfg.min_samples || nc < cfg.min_samples {
            return Err(format!("{case_id} {mode}: {nb} and {nc} samples, the rank test needs {}", cfg.min_samples));
        }
        let (_, p) = mann_whitney_greater(&tc.sample_s, &tb.sample_s);
        if !(ratio > cfg.max_slowdown && p < cfg.alpha) {
            return Ok(None);
        }
        format!("Mann-Whitney p = {p:.4} over {nc} and {nb} samples")
    } else {
        // Files without samples (schema 1 and 2): beyond the spread of either side's samples.
        let noise = spread(tb).max(spread(tc));
        if !(ratio > cfg.max_slowdown && ratio - 1.0 > noise) {
            return Ok(None);
        }
        format!("no samples stored; beyond the {:.0}% spread", noise * 100.0)
    };
    Ok(Some(Finding::Slower {
        case_id: case_id.to_string(),
        metric: format!("{mode} median"),
        baseline: tb.median_s,
        current: tc.median_s,
        ratio,
        evidence,
    }))
}

/// Differences between the runs' environments: machine-level values of the runs' information,
/// the dtypes run, and for the cases both ran, their threads and their tools' versions.
pub fn environment_changes(
    base_runs: &[RunInfo],
    baseline: &[ResultRow],
    current_run: &RunInfo,
    current: &[ResultRow],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut diff = |what: &str, b: BTreeSet<String>, c: BTreeSet<String>| {
        let b: BTreeSet<String> = b.into_iter().filter(|s| !s.is_empty()).collect();
        let c: BTreeSet<String> = c.into_iter().filter(|s| !s.is_empty()).collect();
        // A value older files did not record (empty) is no evidence of change.
        if !b.is_empty() && !c.is_empty() && b != c {
            let join = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>().join(", ");
            out.push(Finding::EnvChanged { what: what.into(), baseline: join(b), current: join(c) });
        }
    };
    let runs = |f: fn(&RunInfo) -> String| -> (BTreeSet<String>, BTreeSet<String>) {
        (base_runs.iter().map(f).collect(), [f(current_run)].into())
    };
    for (what, f) in [
        ("CPU model", (|r: &RunInfo| r.cpu_model.clone()) as fn(&RunInfo) -> String),
        ("cores", |r| r.cores.to_string()),
        ("frequency governor", |r| r.governor.clone()),
        ("suite", |r| r.suite.clone()),
    ] {
        let (b, c) = runs(f);
        diff(what, b, c);
    }
    let dtypes = |rows: &[ResultRow]| rows.iter().map(|r| r.dtype.clone()).collect::<BTreeSet<_>>();
    diff("dtypes", dtypes(baseline), dtypes(current));
    let cur: BTreeMap<&str, &ResultRow> = current.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let pairs: Vec<(&ResultRow, &ResultRow)> =
        baseline.iter().filter_map(|b| cur.get(b.case_id.as_str()).map(|c| (b, *c))).collect();
    // Rows that did not run record no threads of their tool (0): no evidence either way.
    let ran: Vec<&(&ResultRow, &ResultRow)> = pairs.iter().filter(|p| p.0.threads > 0 && p.1.threads > 0).collect();
    diff(
        "threads",
        ran.iter().map(|p| p.0.threads.to_string()).collect(),
        ran.iter().map(|p| p.1.threads.to_string()).collect(),
    );
    let mut tools: BTreeMap<&str, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for (b, c) in &pairs {
        if let (Some(vb), Some(vc)) = (&b.tool_version, &c.tool_version) {
            let e = tools.entry(b.backend.as_str()).or_default();
            e.0.insert(vb.clone());
            e.1.insert(vc.clone());
        }
    }
    for (tool, (b, c)) in tools {
        diff(&format!("tool {tool} version"), b, c);
    }
    out
}

/// Compares `current` against `baseline` rows (no environment check: see [`gate_runs`]).
pub fn gate(baseline: &[ResultRow], current: &[ResultRow], cfg: &GateConfig) -> GateReport {
    let cur: BTreeMap<&str, &ResultRow> = current.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let base: BTreeMap<&str, &ResultRow> = baseline.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let mut report = GateReport::default();
    let mut waivable: Vec<Finding> = Vec::new();
    // Failing checks in the current run fail the gate whatever the baseline says; a check that
    // passed in the baseline is reported as such below instead.
    for r in current {
        let regressed = base.get(r.case_id.as_str()).is_some_and(|b| {
            r.checks.iter().any(|c| !c.passed && b.checks.iter().any(|bc| bc.name == c.name && bc.passed))
        });
        if let Some(detail) = failed(r)
            && !(regressed && detail.starts_with("check "))
        {
            report.findings.push(Finding::Broken { case_id: r.case_id.clone(), detail });
        }
    }
    for b in baseline {
        let Some(c) = cur.get(b.case_id.as_str()) else {
            waivable.push(Finding::Missing { case_id: b.case_id.clone() });
            continue;
        };
        report.shared += 1;
        if b.status == Status::Skipped {
            continue; // nothing to compare with
        }
        report.compared += 1;
        if c.status == Status::Skipped {
            let why = c.message.clone().unwrap_or_default();
            waivable.push(Finding::Skipped { case_id: b.case_id.clone(), reason: why });
            continue;
        }
        for bc in b.checks.iter().filter(|c| c.passed && !c.worst.is_nan()) {
            let detail = match c.checks.iter().find(|cc| cc.name == bc.name) {
                Some(cc) if cc.passed => continue,
                Some(cc) => format!(
                    "check {} passed in the baseline (worst {:.3e}), fails now (worst {:.3e} > tolerance {:.1e})",
                    bc.name, bc.worst, cc.worst, cc.tolerance
                ),
                None => format!("check {} passed in the baseline and did not run now", bc.name),
            };
            report.findings.push(Finding::CheckRegressed {
                case_id: b.case_id.clone(),
                check: bc.name.clone(),
                detail,
            });
        }
        if failed(c).is_some() {
            continue; // already reported
        }
        // A baseline that cannot be compared with (an infinite time would hide any slowdown).
        if let Some(bad) = bad_timing(b) {
            report.findings.push(Finding::Broken { case_id: b.case_id.clone(), detail: format!("baseline's {bad}") });
            continue;
        }
        let timings = [("primal", &b.primal, &c.primal), ("vjp", &b.vjp, &c.vjp), ("jvp", &b.jvp, &c.jvp)];
        for (mode, tb, tc) in timings {
            let (Some(tb), Some(tc)) = (tb, tc) else {
                continue;
            };
            match judge_speed(&b.case_id, mode, tb, tc, cfg) {
                Ok(Some(f)) => report.findings.push(f),
                Ok(None) => {}
                Err(why) => report.not_judged.push(why),
            }
        }
    }
    // A tool whose cases all ran in the baseline's and are all skipped now lost its availability;
    // that is not waived by allow_missing, which is for cases leaving the suite.
    let mut tools: BTreeMap<&str, (usize, usize, Option<&str>)> = BTreeMap::new();
    for b in baseline.iter().filter(|b| b.status != Status::Skipped) {
        if let Some(c) = cur.get(b.case_id.as_str()) {
            let e = tools.entry(b.backend.as_str()).or_default();
            e.0 += 1;
            if c.status == Status::Skipped {
                e.1 += 1;
                e.2 = e.2.or(c.message.as_deref());
            }
        }
    }
    for (tool, (ran, skipped, why)) in tools {
        if ran > 0 && skipped == ran {
            report.findings.push(Finding::ToolLost { tool: tool.into(), reason: why.unwrap_or("").to_string() });
        }
    }
    if cfg.allow_missing {
        report.notes.extend(waivable);
    } else {
        report.findings.extend(waivable);
    }
    report
}

/// The whole gate: rows against the baseline, and the environments of the runs.
pub fn gate_runs(baseline: &Baseline, current_run: &RunInfo, current: &[ResultRow], cfg: &GateConfig) -> GateReport {
    let env = environment_changes(&baseline.runs, &baseline.rows, current_run, current);
    let mut report = gate(&baseline.rows, current, cfg);
    if cfg.allow_env_change {
        report.notes.extend(env);
    } else if !env.is_empty() {
        // Unlike runs: their times do not compare, so speed findings would be noise.
        report.findings.retain(|f| !matches!(f, Finding::Slower { .. }));
        report.findings.extend(env);
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
                    let msg = match f {
                        Finding::Broken { detail, .. } | Finding::CheckRegressed { detail, .. } => detail.clone(),
                        _ => f.describe(),
                    };
                    s.push_str(&format!("    <failure type=\"{}\" message=\"{}\"/>\n", f.kind(), xml_escape(&msg)));
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

    fn timing(median: f64, spread: f64, samples: Vec<f64>) -> Timing {
        Timing {
            min_s: median * (1.0 - spread / 2.0),
            median_s: median,
            max_s: median * (1.0 + spread / 2.0),
            batch: 1,
            samples: samples.len().max(5),
            cv: spread / 4.0,
            sample_s: samples,
        }
    }

    /// A case timed without stored samples (as schema 1 and 2 files are).
    fn row(id: &str, median: f64, spread: f64) -> ResultRow {
        let t = timing(median, spread, vec![]);
        ResultRow {
            schema_version: crate::SCHEMA_VERSION,
            case_id: id.into(),
            workload: "w".into(),
            params: BTreeMap::new(),
            backend: "cpu".into(),
            dtype: "f32".into(),
            rule: "auto".into(),
            rule_used: None,
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
            tool_version: Some("adgauge 0.1.0".into()),
        }
    }

    /// A case whose primal has these samples (seconds); no other mode.
    fn sampled(id: &str, samples: &[f64]) -> ResultRow {
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let median = s[s.len() / 2];
        let t = Timing {
            min_s: s[0],
            median_s: median,
            max_s: s[s.len() - 1],
            batch: 1,
            samples: s.len(),
            cv: 0.0,
            sample_s: samples.to_vec(),
        };
        ResultRow { primal: Some(t), vjp: None, ..row(id, 1.0, 0.0) }
    }

    fn info(id: &str) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            timestamp: "2026-11-22T05:00:00Z".into(),
            git_revision: "abc".into(),
            adgauge_version: "0.1.0".into(),
            machine: "host".into(),
            cpu_model: "CPU A".into(),
            cores: 2,
            governor: "performance".into(),
            suite: "quick".into(),
        }
    }

    #[test]
    fn identical_runs_pass() {
        let a = vec![row("a", 1e-3, 0.05), row("b", 2e-3, 0.05)];
        let r = gate(&a, &a, &GateConfig::default());
        assert_eq!(r.compared, 2);
        assert!(r.findings.is_empty());
    }

    /// Hand-counted null distributions: for m = n = 2 the six arrangements give U = 0, 1, 2, 2,
    /// 3, 4; for m = n = 5 only one of the C(10, 5) = 252 puts every current value on top.
    #[test]
    fn the_rank_test_matches_hand_counted_distributions() {
        assert_eq!(mann_whitney_upper_tail(1.0, 1, 1), 0.5);
        assert_eq!(mann_whitney_upper_tail(3.0, 2, 2), 2.0 / 6.0);
        assert_eq!(mann_whitney_upper_tail(2.0, 2, 2), 4.0 / 6.0);
        assert_eq!(mann_whitney_upper_tail(0.0, 2, 2), 1.0);
        assert!((mann_whitney_upper_tail(25.0, 5, 5) - 1.0 / 252.0).abs() < 1e-15);
        let (u, p) = mann_whitney_greater(&[2.0, 2.1, 2.2, 2.3, 2.4], &[1.0, 1.1, 1.2, 1.3, 1.4]);
        assert_eq!(u, 25.0);
        assert!((p - 1.0 / 252.0).abs() < 1e-15);
        // The normal approximation (large samples) agrees with the exact tail at the centre.
        assert!((mann_whitney_upper_tail(5000.5, 100, 100) - 0.5).abs() < 1e-3);
    }

    #[test]
    fn a_two_times_slower_case_is_flagged_by_the_rank_test() {
        let base = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3];
        let slow: Vec<f64> = base.iter().map(|x| x * 2.0).collect();
        let r = gate(&[sampled("a", &base)], &[sampled("a", &slow)], &GateConfig::default());
        match r.findings.as_slice() {
            [Finding::Slower { metric, ratio, evidence, .. }] => {
                assert_eq!(metric, "primal median");
                assert!((ratio - 2.0).abs() < 1e-12);
                // All 7 current samples above all 7 baseline ones: p = 1 / C(14, 7) = 1/3432.
                assert!(evidence.starts_with("Mann-Whitney p = 0.0003 over 7 and 7"), "{evidence}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Noise: both runs drawn from one bimodal distribution (a CPU that runs some samples at a
    /// lower clock: ~1.0 ms or ~1.3 ms). The baseline happened to draw only fast samples, the
    /// current one four slow ones of seven, so its median is 1.30x. The old rule (median ratio
    /// against the spread (max - min) / median) flags that; the rank test does not (p ~ 0.05).
    #[test]
    fn runs_from_one_distribution_are_not_flagged() {
        let base = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3];
        let cur = [0.99e-3, 1.01e-3, 1.00e-3, 1.30e-3, 1.31e-3, 1.29e-3, 1.32e-3];
        let r = gate(&[sampled("a", &base)], &[sampled("a", &cur)], &GateConfig::default());
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        assert_eq!(r.compared, 1);
        let (u, p) = mann_whitney_greater(&cur, &base);
        assert_eq!(u, 37.5);
        assert!(p > 0.01 && p < 0.1, "{p}");
        // The same medians and extremes without samples: the spread rule calls it slower.
        let strip = |mut r: ResultRow| {
            r.primal.as_mut().unwrap().sample_s.clear();
            r
        };
        let old = gate(&[strip(sampled("a", &base))], &[strip(sampled("a", &cur))], &GateConfig::default());
        assert!(old.slower(), "{:?}", old.findings);
    }

    #[test]
    fn short_cases_and_few_samples_are_not_judged_on_speed() {
        let base = [1e-4, 1.01e-4, 0.99e-4, 1.02e-4, 0.98e-4];
        let slow: Vec<f64> = base.iter().map(|x| x * 5.0).collect();
        let r = gate(&[sampled("a", &base)], &[sampled("a", &slow)], &GateConfig::default());
        assert!(r.findings.is_empty());
        assert_eq!(r.not_judged, vec!["a primal: 0.100 ms is under the 1.000 ms minimum".to_string()]);
        let base = [1e-2, 1.01e-2, 0.99e-2, 1.02e-2];
        let slow: Vec<f64> = base.iter().map(|x| x * 5.0).collect();
        let r = gate(&[sampled("a", &base)], &[sampled("a", &slow)], &GateConfig::default());
        assert!(r.findings.is_empty());
        assert_eq!(r.not_judged, vec!["a primal: 4 and 4 samples, the rank test needs 5".to_string()]);
    }

    #[test]
    fn without_samples_a_two_times_slower_case_is_flagged_but_spread_is_not() {
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
        assert!(
            xml.contains("<failure type=\"check-regressed\" message=\"check fd-vjp passed in the baseline (worst 1.000e-9), fails now (worst 5.000e-1"),
            "{xml}"
        );
        assert!(xml.contains("name=\"b&lt;c\"/>"), "{xml}");
    }

    #[test]
    fn a_check_that_passed_and_now_fails_or_no_longer_runs_is_named() {
        let mut base = row("a", 1e-3, 0.05);
        base.checks.push(Check { name: "oracle-vjp".into(), worst: 0.0, tolerance: 1e-6, passed: true });
        let mut cur = row("a", 1e-3, 0.05);
        cur.checks[0] = Check { name: "fd-vjp".into(), worst: 2e-3, tolerance: 1e-6, passed: false };
        cur.status = Status::Failed;
        let r = gate(std::slice::from_ref(&base), &[cur], &GateConfig::default());
        let found: Vec<(&str, String)> = r
            .findings
            .iter()
            .map(|f| match f {
                Finding::CheckRegressed { check, detail, .. } => (check.as_str(), detail.clone()),
                other => ("other", format!("{other:?}")),
            })
            .collect();
        assert_eq!(
            found,
            vec![
                ("fd-vjp", "check fd-vjp passed in the baseline (worst 1.000e-9), fails now (worst 2.000e-3 > tolerance 1.0e-6)".to_string()),
                ("oracle-vjp", "check oracle-vjp passed in the baseline and did not run now".to_string()),
            ]
        );
        assert!(r.failed() && r.broken());
    }

    #[test]
    fn a_case_missing_from_the_current_run_is_reported_or_waived() {
        let r = gate(&[row("a", 1e-3, 0.0), row("b", 1e-3, 0.0)], &[row("b", 1e-3, 0.0)], &GateConfig::default());
        assert_eq!(r.findings, vec![Finding::Missing { case_id: "a".into() }]);
        assert!(r.missing() && r.failed());
        let cfg = GateConfig { allow_missing: true, ..GateConfig::default() };
        let r = gate(&[row("a", 1e-3, 0.0), row("b", 1e-3, 0.0)], &[row("b", 1e-3, 0.0)], &cfg);
        assert!(r.findings.is_empty() && !r.failed());
        assert_eq!(r.notes, vec![Finding::Missing { case_id: "a".into() }]);
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
        let got: Vec<(&str, &str, String)> = r.findings.iter().map(|f| (f.kind(), f.case_id(), f.describe())).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got.iter().any(|(k, id, d)| *k == "skipped"
            && *id == "a"
            && d.ends_with("skipped now: backend opencl unavailable: no platform")));
        assert!(
            got.iter().any(|(k, id, d)| *k == "broken" && *id == "b" && d.contains("primal timing is not a finite"))
        );
        assert!(got.iter().any(|(k, id, d)| *k == "broken" && *id == "c" && d.contains("worst value is NaN")));
        // An infinite baseline would hide any slowdown: it breaks the gate instead.
        let mut inf = row("a", 1e-3, 0.05);
        inf.primal.as_mut().unwrap().median_s = f64::INFINITY;
        let r = gate(&[inf], &[row("a", 1e-3, 0.05)], &GateConfig::default());
        assert!(r.broken(), "{:?}", r.findings);
    }

    #[test]
    fn a_tool_whose_cases_all_skip_now_is_lost_even_with_allow_missing() {
        let mut base = vec![row("a", 1e-3, 0.05), row("b", 1e-3, 0.05), row("c", 1e-3, 0.05)];
        base[2].backend = "opencl".into();
        let mut cur = base.clone();
        cur[2].status = Status::Skipped;
        cur[2].message = Some("no OpenCL platform".into());
        let cfg = GateConfig { allow_missing: true, ..GateConfig::default() };
        let r = gate(&base, &cur, &cfg);
        assert_eq!(r.findings, vec![Finding::ToolLost { tool: "opencl".into(), reason: "no OpenCL platform".into() }]);
        assert_eq!(r.notes.len(), 1); // the skipped case itself, waived
    }

    /// Nothing to compare: every shared case was skipped in the baseline (a typo in a suite's
    /// tool list), so the caller refuses the comparison instead of passing it.
    #[test]
    fn cases_skipped_in_the_baseline_are_not_compared() {
        let mut a = row("a", 1e-3, 0.05);
        a.status = Status::Skipped;
        let r = gate(std::slice::from_ref(&a), &[a.clone()], &GateConfig::default());
        assert_eq!((r.shared, r.compared), (1, 0));
        assert!(r.findings.is_empty());
    }

    #[test]
    fn environment_changes_fail_unless_allowed_and_then_are_listed() {
        let base = Baseline::run("b".into(), info("r1"), vec![row("a", 1e-3, 0.05)]);
        let mut cur_info = info("r2");
        cur_info.cpu_model = "CPU B".into();
        let mut cur = row("a", 2e-3, 0.05);
        cur.threads = 1;
        cur.tool_version = Some("adgauge 0.2.0".into());
        let r = gate_runs(&base, &cur_info, std::slice::from_ref(&cur), &GateConfig::default());
        let env: Vec<String> = r.findings.iter().map(Finding::describe).collect();
        assert_eq!(
            env,
            ["CPU model: CPU A -> CPU B", "threads: 2 -> 1", "tool cpu version: adgauge 0.1.0 -> adgauge 0.2.0"]
        );
        // The 2x slower times are not judged across unlike machines...
        assert!(!r.slower() && r.failed());
        // ...unless the change is allowed: then they are, and the changes are notes.
        let cfg = GateConfig { allow_env_change: true, ..GateConfig::default() };
        let r = gate_runs(&base, &cur_info, &[cur], &cfg);
        assert!(r.slower() && !r.failed());
        assert_eq!(r.notes.len(), 3);
    }

    /// Each night 5% slower than the one before: against the previous night no step exceeds
    /// 1.15x, against the best of the last 5 nights the drift adds up to 1.22x.
    #[test]
    fn best_of_n_catches_slow_drift_that_the_previous_run_misses() {
        let night = |k: i32| {
            let m = 1e-3 * 1.05f64.powi(k);
            sampled("a", &[m, m * 1.01, m * 0.99, m * 1.005, m * 0.995, m * 1.002, m * 0.998])
        };
        let runs: Vec<(RunInfo, Vec<ResultRow>)> = (0..5).map(|k| (info(&format!("r{k}")), vec![night(k)])).collect();
        let current = vec![night(5)];
        let previous = Baseline::run("previous".into(), runs[4].0.clone(), runs[4].1.clone());
        let r = gate_runs(&previous, &info("r5"), &current, &GateConfig::default());
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        let best = Baseline::best_of(runs).unwrap();
        assert_eq!(best.rows[0].primal.as_ref().unwrap().median_s, 1e-3);
        let r = gate_runs(&best, &info("r5"), &current, &GateConfig::default());
        match r.findings.as_slice() {
            [Finding::Slower { ratio, .. }] => assert!((ratio - 1.05f64.powi(5)).abs() < 1e-9, "{ratio}"),
            other => panic!("{other:?}"),
        }
    }
}

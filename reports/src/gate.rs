//! Regression gates: a current run against a baseline, case by case (matched by case id).
//! `docs/gate.md` is the reference; in short, these are failures (exit 1):
//!
//! * a check that fails now, a status of failed/error/timeout, or a time or check value that is
//!   not finite ([`Finding::Broken`]);
//! * a check that passed in the baseline and now fails or no longer runs ([`Finding::CheckRegressed`];
//!   not for a case that errored or timed out now, whose checks could not run: its `Broken`
//!   finding says it);
//! * a baseline case missing from the current run, skipped now where it ran in the baseline,
//!   or a mode the baseline timed that is not timed now ([`Finding::Missing`],
//!   [`Finding::Skipped`], [`Finding::MissingMode`]; notes instead with `allow_missing`), and a
//!   current run that is partial ([`Finding::Incomplete`]; a note with `allow_missing`);
//! * a tool whose cases ran in the baseline and are all skipped now ([`Finding::ToolLost`]);
//! * a change of the run's set-up: frequency governor, suite, the dtypes run, a case's threads
//!   against its own baseline's, or a tool's version ([`Finding::EnvChanged`]; notes with `allow_env_change`, and speed is
//!   then judged anyway).
//!
//! Speed (exit 3, [`Finding::Slower`]): each mode both runs timed gets a [`Change`] from
//! [`crate::verdict`] (ratio of medians, bootstrap interval, rank test, verdict); a `regressed`
//! verdict is a finding, and every `not judged` is counted. A case is compared only with a
//! baseline measured on the same host (CPU model, cores, rustc, target features; see
//! [`Host`]): best-of baselines pick, per case, among the runs of the current row's host; a case
//! with no such baseline is not judged on speed and says why (a mixed-CPU merge of shards is
//! normal, not an environment change). Where most timings moved with the run's own bandwidth
//! probe, the machine changed and no timing is judged ([`machine_change`]). Rows without
//! samples (schema 1 and 2) fall back to the median against the spread (max - min) / median of
//! both sides.
//!
//! Findings of one cause (a crashing tool's cases, a check failing on many cases) are reported
//! as one group listing the cases ([`GateReport::groups`]); JUnit keeps one entry per case.
//! The caller refuses a comparison of zero cases (nothing ran in both runs).

use std::collections::{BTreeMap, BTreeSet};

use crate::schema::{Host, ResultRow, RunInfo, Status, Timing};
use crate::verdict::{self, Change, SpeedConfig, Verdict};

/// Gate thresholds and waivers.
#[derive(Clone, Copy, Debug, Default)]
pub struct GateConfig {
    /// How a mode's speed is judged (threshold, noise, significance, interval, minimum time).
    pub speed: SpeedConfig,
    /// Missing and skipped cases are notes, not failures.
    pub allow_missing: bool,
    /// Environment changes are notes, not failures; speed is then judged across hosts too.
    pub allow_env_change: bool,
}

/// What the gate found.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// A correctness failure in the current run (check failed, or ok -> error/timeout).
    Broken { case_id: String, tool: String, detail: String },
    /// A check that passed in the baseline and fails now, or no longer runs.
    CheckRegressed { case_id: String, tool: String, check: String, detail: String },
    /// A mode whose speed verdict is `regressed`.
    Slower {
        case_id: String,
        metric: String,
        baseline: f64,
        current: f64,
        ratio: f64,
        /// The bootstrap interval of the ratio (None for files without samples).
        ci: Option<(f64, f64)>,
        evidence: String,
    },
    /// A case of the baseline that the current run lacks.
    Missing { case_id: String, tool: String },
    /// A mode the baseline timed that the current run, which ran the case, did not time.
    MissingMode { case_id: String, tool: String, mode: String },
    /// A case that ran in the baseline and is skipped now (its tool or backend is unavailable).
    Skipped { case_id: String, tool: String, reason: String },
    /// A tool whose cases ran in the baseline and are all skipped now.
    ToolLost { tool: String, reason: String },
    /// Something about the run's set-up that makes the runs unlike.
    EnvChanged { what: String, baseline: String, current: String },
    /// A run that lacks cases it selected (interrupted, or merged from a killed run's rows): the
    /// current run (a finding) or a baseline run named explicitly (a note).
    Incomplete { run_id: String, detail: String },
}

impl Finding {
    /// The case (or pseudo-case, for tools and the environment) a finding is about.
    pub fn case_id(&self) -> &str {
        match self {
            Finding::Broken { case_id, .. }
            | Finding::CheckRegressed { case_id, .. }
            | Finding::Slower { case_id, .. }
            | Finding::Missing { case_id, .. }
            | Finding::MissingMode { case_id, .. }
            | Finding::Skipped { case_id, .. } => case_id,
            Finding::ToolLost { .. } => "(tools)",
            Finding::EnvChanged { .. } => "(environment)",
            Finding::Incomplete { .. } => "(run)",
        }
    }

    /// A short kind name (JSON, JUnit, the text lines).
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::Broken { .. } => "broken",
            Finding::CheckRegressed { .. } => "check-regressed",
            Finding::Slower { .. } => "slower",
            Finding::Missing { .. } | Finding::MissingMode { .. } => "missing",
            Finding::Skipped { .. } => "skipped",
            Finding::ToolLost { .. } => "tool-lost",
            Finding::EnvChanged { .. } => "env-changed",
            Finding::Incomplete { .. } => "incomplete",
        }
    }

    /// One line saying what was found.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.subject(), self.cause())
    }

    /// What the finding is about: a case, a tool, or the environment's aspect.
    fn subject(&self) -> String {
        match self {
            Finding::ToolLost { tool, .. } => format!("tool {tool}"),
            Finding::EnvChanged { what, .. } => what.clone(),
            Finding::Incomplete { run_id, .. } => format!("run {run_id}"),
            other => other.case_id().to_string(),
        }
    }

    /// What was found, without the case (a failing check's worst value included; grouping
    /// leaves such numbers out: see `group_key`).
    pub fn cause(&self) -> String {
        match self {
            Finding::Broken { detail, .. } | Finding::CheckRegressed { detail, .. } => detail.clone(),
            Finding::Slower { metric, baseline, current, ratio, evidence, .. } => {
                format!("{metric} {:.3} ms -> {:.3} ms ({ratio:.2}x; {evidence})", baseline * 1e3, current * 1e3)
            }
            Finding::Missing { .. } => "in the baseline, missing from the current run".to_string(),
            Finding::MissingMode { mode, .. } => format!("{mode} was timed in the baseline, not timed now"),
            Finding::Skipped { reason, .. } => format!("ran in the baseline, skipped now: {reason}"),
            Finding::ToolLost { reason, .. } => {
                format!("its cases ran in the baseline, all are skipped now: {reason}")
            }
            Finding::EnvChanged { baseline, current, .. } => format!("{baseline} -> {current}"),
            Finding::Incomplete { detail, .. } => detail.clone(),
        }
    }

    /// The tool a case finding is about.
    fn tool(&self) -> Option<&str> {
        match self {
            Finding::Broken { tool, .. }
            | Finding::CheckRegressed { tool, .. }
            | Finding::Missing { tool, .. }
            | Finding::MissingMode { tool, .. }
            | Finding::Skipped { tool, .. }
            | Finding::ToolLost { tool, .. } => Some(tool),
            Finding::Slower { .. } | Finding::EnvChanged { .. } | Finding::Incomplete { .. } => None,
        }
    }

    /// The key that groups findings of one cause: kind, tool and cause, with a failing check's
    /// numbers left out (`check fd-vjp worst 3e-1 > ...` on many cases is one cause). Slower and
    /// environment findings stand alone: each has its own numbers.
    fn group_key(&self) -> Option<(&'static str, String, String)> {
        let cause = match self {
            Finding::Slower { .. }
            | Finding::EnvChanged { .. }
            | Finding::ToolLost { .. }
            | Finding::Incomplete { .. } => return None,
            Finding::Broken { detail, .. } if detail.starts_with("check ") => {
                detail.split(" worst").next().unwrap_or(detail).to_string() + " fails"
            }
            Finding::CheckRegressed { check, detail, .. } if detail.ends_with("did not run now") => {
                format!("check {check} passed in the baseline and did not run now")
            }
            Finding::CheckRegressed { check, .. } => format!("check {check} passed in the baseline, fails now"),
            other => other.cause(),
        };
        Some((self.kind(), self.tool().unwrap_or("").to_string(), cause))
    }
}

/// Findings of one cause: a kind, the tool, what was found, and the cases.
#[derive(Clone, Debug, PartialEq)]
pub struct FindingGroup {
    pub kind: &'static str,
    /// One line: the finding's own for a single case, `tool T: cause (N cases)` for a group.
    pub summary: String,
    pub cases: Vec<String>,
}

/// The gate's verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateReport {
    /// What fails the gate.
    pub findings: Vec<Finding>,
    /// What was waived (`allow_missing`, `allow_env_change`), or is worth knowing without
    /// failing (cases measured on other hosts than their baseline): reported, not failing.
    pub notes: Vec<Finding>,
    /// Cases compared: present in both runs and run (not skipped) in the baseline.
    pub compared: usize,
    /// Case ids the two runs share.
    pub shared: usize,
    /// Every mode timing of the compared cases, with its speed verdict.
    pub changes: Vec<Change>,
    /// The bootstrap's confidence level and resamples the verdicts used.
    pub confidence: f64,
    pub resamples: usize,
    /// Why the timings were not judged as the code's: they moved one way with the run's own
    /// bandwidth probe ([`machine_change`]).
    pub machine_changed: Option<String>,
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
        self.findings
            .iter()
            .any(|f| matches!(f, Finding::Missing { .. } | Finding::MissingMode { .. } | Finding::Skipped { .. }))
    }

    /// Timings of the baseline that the current run did not take (its case ran): findings, or
    /// notes with `allow_missing`.
    pub fn lost_timings(&self) -> usize {
        self.findings.iter().chain(&self.notes).filter(|f| matches!(f, Finding::MissingMode { .. })).count()
    }

    /// How many timings got each verdict.
    pub fn count(&self, v: Verdict) -> usize {
        self.changes.iter().filter(|c| c.verdict == v).count()
    }

    /// The timings not judged on speed, each as `case mode: why`.
    pub fn not_judged(&self) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| c.verdict == Verdict::NotJudged)
            .map(|c| format!("{} {}: {}", c.case_id, c.mode, c.why))
            .collect()
    }

    /// One line for the speed verdicts: `speed: 3 regressed, 1 improved, 280 no change, 10 not
    /// judged of 294 timings`.
    pub fn speed_summary(&self) -> String {
        let mut s = format!(
            "speed: {} regressed, {} improved, {} no change, {} not judged of {} timing(s)",
            self.count(Verdict::Regressed),
            self.count(Verdict::Improved),
            self.count(Verdict::NoChange),
            self.count(Verdict::NotJudged),
            self.changes.len()
        );
        if self.lost_timings() > 0 {
            s.push_str(&format!("; {} timed in the baseline and not now", self.lost_timings()));
        }
        s
    }

    /// A warning where many timings moved both ways at once (at least 5 regressed and 5
    /// improved): what a change of the machine's load between the runs does, which the samples
    /// of one run cannot show (docs/gate.md).
    pub fn both_ways(&self) -> Option<String> {
        let (up, down) = (self.count(Verdict::Regressed), self.count(Verdict::Improved));
        (up >= 5 && down >= 5).then(|| {
            format!(
                "{up} timings regressed and {down} improved at once: a change of the machine's load between the runs moves timings both ways; compare on a quiet machine before trusting either"
            )
        })
    }

    /// The findings (or notes, `notes = true`) grouped per cause, in order of first appearance.
    pub fn groups(&self, notes: bool) -> Vec<FindingGroup> {
        group(if notes { &self.notes } else { &self.findings })
    }
}

fn group(findings: &[Finding]) -> Vec<FindingGroup> {
    let mut order: Vec<Option<(&'static str, String, String)>> = Vec::new();
    let mut members: Vec<Vec<&Finding>> = Vec::new();
    for f in findings {
        let key = f.group_key();
        match order.iter().position(|k| key.is_some() && *k == key) {
            Some(i) => members[i].push(f),
            None => {
                order.push(key);
                members.push(vec![f]);
            }
        }
    }
    order
        .into_iter()
        .zip(members)
        .map(|(key, fs)| {
            let cases: Vec<String> = fs.iter().map(|f| f.case_id().to_string()).collect();
            let summary = match (&key, fs.as_slice()) {
                (_, [one]) => one.describe(),
                (Some((_, tool, cause)), _) => format!("tool {tool}: {cause} ({} cases)", fs.len()),
                (None, _) => unreachable!("findings without a key stand alone"),
            };
            FindingGroup { kind: fs[0].kind(), summary, cases }
        })
        .collect()
}

/// A baseline: the rows to compare with and the runs they come from.
#[derive(Clone, Debug)]
pub struct Baseline {
    /// How it was chosen, for the report (e.g. `previous run 2026...`, `best of 7 runs`).
    pub label: String,
    pub runs: Vec<RunInfo>,
    /// The window's cases, each mode's timing the best of the window's (see [`Baseline::best_of`]).
    pub rows: Vec<ResultRow>,
    /// Every run's rows, oldest first, hosts filled in: where the current row's host differs from
    /// `rows`', its timings come from the window's rows of that host.
    window: Vec<Vec<ResultRow>>,
}

/// The rows with the run's CPU model and cores as the host of those that record none (files of
/// schema 1 to 4 read per run, rows built in memory).
fn with_hosts(info: &RunInfo, mut rows: Vec<ResultRow>) -> Vec<ResultRow> {
    for r in &mut rows {
        r.host.get_or_insert_with(|| Host { cpu_model: info.cpu_model.clone(), cores: info.cores, ..Host::default() });
    }
    rows
}

/// The timing of `mode` (0 primal, 1 vjp, 2 jvp).
fn mode_timing(r: &ResultRow, slot: usize) -> Option<&Timing> {
    [&r.primal, &r.vjp, &r.jvp][slot].as_ref()
}

fn mode_timing_mut(r: &mut ResultRow, slot: usize) -> &mut Option<Timing> {
    match slot {
        0 => &mut r.primal,
        1 => &mut r.vjp,
        _ => &mut r.jvp,
    }
}

/// Per mode, the lowest-median timing of the rows given (those of the case that did not fail).
fn best_timings<'a>(row: &mut ResultRow, candidates: impl Iterator<Item = &'a ResultRow> + Clone) {
    for slot in 0..3 {
        let best = candidates
            .clone()
            .filter(|r| matches!(r.status, Status::Ok))
            .filter_map(|r| mode_timing(r, slot))
            .filter(|t| t.median_s.is_finite() && t.median_s > 0.0)
            .min_by(|a, b| a.median_s.total_cmp(&b.median_s))
            .cloned();
        if best.is_some() {
            *mode_timing_mut(row, slot) = best;
        }
    }
}

impl Baseline {
    /// One run as the baseline.
    pub fn run(label: String, info: RunInfo, rows: Vec<ResultRow>) -> Baseline {
        let rows = with_hosts(&info, rows);
        Baseline { label, runs: vec![info], window: vec![rows.clone()], rows }
    }

    /// The per-case best of several runs (oldest first): every case of the runs, each with the
    /// row of the newest run that ran it (or, where none did, of the newest that lists it), each
    /// mode's timing replaced by the lowest-median timing any of the runs measured for that case
    /// (in a run where the case did not fail). A case skipped on the newest night is still
    /// compared with the nights that ran it. A slow drift, each night a little slower than the last,
    /// then adds up against the best night of the window instead of moving the baseline with it.
    pub fn best_of(runs: Vec<(RunInfo, Vec<ResultRow>)>) -> Option<Baseline> {
        let window: Vec<Vec<ResultRow>> = runs.iter().map(|(i, rs)| with_hosts(i, rs.clone())).collect();
        window.last()?;
        // Every case of the window: its row from the newest run that ran it (not skipped), else
        // from the newest run that lists it; the newest run's cases first.
        let mut rows: Vec<ResultRow> = Vec::new();
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        for row in window.iter().rev().flatten() {
            match at.get(&row.case_id) {
                None => {
                    at.insert(row.case_id.clone(), rows.len());
                    rows.push(row.clone());
                }
                Some(&i) if rows[i].status == Status::Skipped && row.status != Status::Skipped => {
                    rows[i] = row.clone();
                }
                Some(_) => {}
            }
        }
        for row in &mut rows {
            // The best of the runs that measured the case on the same host.
            let (id, host) = (row.case_id.clone(), row.host.clone().unwrap_or_default());
            let same =
                |r: &&ResultRow| r.case_id == id && r.host.clone().unwrap_or_default().differences(&host).is_empty();
            best_timings(row, window.iter().flatten().filter(same));
        }
        let n = runs.len();
        let ids: Vec<String> = runs.iter().map(|(i, _)| i.run_id.clone()).collect();
        Some(Baseline {
            label: format!("best of {n} run(s) ({} .. {})", ids[0], ids[n - 1]),
            runs: runs.into_iter().map(|(i, _)| i).collect(),
            rows,
            window,
        })
    }

    /// The baseline rows to compare `current` with: for each case, where the current row's host
    /// differs from the baseline row's, the best timings the window holds from the current row's
    /// host, if any (a mixed-CPU history: each shard lands on any runner). A case the window never
    /// ran on that host keeps the baseline row, whose host then differs.
    pub fn rows_for(&self, current_run: &RunInfo, current: &[ResultRow]) -> Vec<ResultRow> {
        let cur: BTreeMap<&str, &ResultRow> = current.iter().map(|r| (r.case_id.as_str(), r)).collect();
        let default_host =
            Host { cpu_model: current_run.cpu_model.clone(), cores: current_run.cores, ..Host::default() };
        let mut rows = self.rows.clone();
        for row in &mut rows {
            let Some(c) = cur.get(row.case_id.as_str()) else { continue };
            let want = c.host.as_ref().unwrap_or(&default_host);
            let host_of = |r: &ResultRow| r.host.clone().unwrap_or_default();
            if host_of(row).differences(want).is_empty() {
                continue;
            }
            let same: Vec<&ResultRow> = self
                .window
                .iter()
                .flatten()
                .filter(|r| r.case_id == row.case_id && host_of(r).differences(want).is_empty())
                .collect();
            if let Some(newest) = same.last() {
                let mut picked = (*newest).clone();
                if self.window.len() > 1 {
                    best_timings(&mut picked, same.iter().copied());
                }
                *row = picked;
            }
        }
        rows
    }
}

/// The run-to-run factor of a case's medians in consecutive baseline runs (oldest first): the
/// largest move between neighbours once the two largest are dropped (keeping at least one). One
/// odd night makes at most two moves (into it and out of it), so from four runs on it cannot set
/// the bar; a regression that started within the window makes one move, which is dropped as
/// well. None with fewer than two medians.
pub fn robust_move(medians: &[f64]) -> Option<f64> {
    let mut moves: Vec<f64> = medians.windows(2).map(|w| (w[1] / w[0]).ln().abs()).collect();
    if moves.is_empty() {
        return None;
    }
    moves.sort_by(|a, b| b.total_cmp(a));
    let drop = 2.min(moves.len() - 1);
    Some(moves[drop].exp())
}

impl Baseline {
    /// For each current case and mode, the run-to-run factor ([`robust_move`]) of its medians in
    /// consecutive runs of the window that measured it on the current row's host (in runs where
    /// it was `ok`); only where two or more such runs exist. The current run is never one of
    /// them.
    pub fn run_to_run(&self, current_run: &RunInfo, current: &[ResultRow]) -> RunToRun {
        let default_host =
            Host { cpu_model: current_run.cpu_model.clone(), cores: current_run.cores, ..Host::default() };
        let mut out = RunToRun::new();
        for c in current {
            let want = c.host.as_ref().unwrap_or(&default_host);
            for (slot, mode) in ["primal", "vjp", "jvp"].iter().enumerate() {
                let medians: Vec<f64> = self
                    .window
                    .iter()
                    .filter_map(|run| {
                        run.iter().find(|r| {
                            r.case_id == c.case_id
                                && r.status == Status::Ok
                                && r.host.clone().unwrap_or_default().differences(want).is_empty()
                        })
                    })
                    .filter_map(|r| mode_timing(r, slot).map(|t| t.median_s))
                    .filter(|m| m.is_finite() && *m > 0.0)
                    .collect();
                if let Some(f) = robust_move(&medians) {
                    out.insert((c.case_id.clone(), mode.to_string()), f);
                }
            }
        }
        out
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

/// Judges one mode's timing: a [`Change`] with its verdict. Rows without samples (schema 1 and
/// 2 files) are judged by the median against the spread of both sides, without an interval.
fn judge_speed(
    case_id: &str,
    mode: &str,
    tb: &Timing,
    tc: &Timing,
    cfg: &SpeedConfig,
    run_to_run: Option<f64>,
) -> Change {
    if !tb.sample_s.is_empty() && !tc.sample_s.is_empty() {
        return verdict::judge_between_runs(case_id, mode, tb, tc, cfg, run_to_run);
    }
    let ratio = tc.median_s / tb.median_s;
    // No stored samples: the counts are the timings' own.
    let mut change = Change {
        samples: (tb.samples, tc.samples),
        verdict: Verdict::NoChange,
        ..Change::unjudged(case_id, mode, tb, tc, String::new())
    };
    // As with samples: a baseline sample (median x calls per sample) too short to time.
    if !(tb.median_s > 0.0 && tb.median_s.is_finite()) {
        change.verdict = Verdict::NotJudged;
        change.why = format!("the baseline median {} s is not a positive time", tb.median_s);
        return change;
    }
    let sample = tb.median_s * tb.batch.max(1) as f64;
    if sample < cfg.min_seconds {
        change.verdict = Verdict::NotJudged;
        change.why = format!(
            "a baseline sample lasts {:.3} ms, under the {:.3} ms minimum",
            sample * 1e3,
            cfg.min_seconds * 1e3
        );
        return change;
    }
    // Files without samples (schema 1 and 2): beyond the spread of either side's samples.
    let noise = spread(tb).max(spread(tc));
    if ratio > cfg.max_slowdown && ratio - 1.0 > noise {
        change.verdict = Verdict::Regressed;
        change.why = format!("no samples stored; beyond the {:.0}% spread", noise * 100.0);
    } else if ratio < 1.0 / cfg.max_slowdown && 1.0 - ratio > noise {
        change.verdict = Verdict::Improved;
        change.why = format!("no samples stored; beyond the {:.0}% spread", noise * 100.0);
    } else {
        change.why = format!("no samples stored; within threshold or the {:.0}% spread", noise * 100.0);
    }
    change
}

/// Differences between the runs' set-ups: the frequency governor and suite of the runs, the
/// dtypes run, and for the cases both ran, each case's threads against its own baseline's and
/// their tools' versions. The machine
/// (CPU model, cores, compiler) is a row's own [`Host`]: see [`gate_runs`].
pub fn environment_changes(
    base_runs: &[RunInfo],
    baseline: &[ResultRow],
    current_run: &RunInfo,
    current: &[ResultRow],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let diff = |out: &mut Vec<Finding>, what: &str, b: BTreeSet<String>, c: BTreeSet<String>| {
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
        ("frequency governor", (|r: &RunInfo| r.governor.clone()) as fn(&RunInfo) -> String),
        ("suite", |r| r.suite.clone()),
    ] {
        let (b, c) = runs(f);
        diff(&mut out, what, b, c);
    }
    let dtypes = |rows: &[ResultRow]| rows.iter().map(|r| r.dtype.clone()).collect::<BTreeSet<_>>();
    diff(&mut out, "dtypes", dtypes(baseline), dtypes(current));
    let cur: BTreeMap<&str, &ResultRow> = current.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let pairs: Vec<(&ResultRow, &ResultRow)> =
        baseline.iter().filter_map(|b| cur.get(b.case_id.as_str()).map(|c| (b, *c))).collect();
    // Each case's threads against its own baseline's, grouped per change. Rows that did not
    // run record no threads of their tool (0): no evidence either way.
    let mut threads: BTreeMap<(usize, usize), Vec<&str>> = BTreeMap::new();
    for (b, c) in pairs.iter().filter(|p| p.0.threads > 0 && p.1.threads > 0 && p.0.threads != p.1.threads) {
        threads.entry((b.threads, c.threads)).or_default().push(&b.case_id);
    }
    for ((tb, tc), ids) in threads {
        let mut named = ids.iter().take(3).copied().collect::<Vec<_>>().join(", ");
        if ids.len() > 3 {
            named.push_str(&format!(" and {} more", ids.len() - 3));
        }
        out.push(Finding::EnvChanged {
            what: format!("threads of {} case(s) ({named})", ids.len()),
            baseline: tb.to_string(),
            current: tc.to_string(),
        });
    }
    let mut tools: BTreeMap<&str, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for (b, c) in &pairs {
        if let (Some(vb), Some(vc)) = (&b.tool_version, &c.tool_version) {
            let e = tools.entry(b.backend.as_str()).or_default();
            e.0.insert(vb.clone());
            e.1.insert(vc.clone());
        }
    }
    for (tool, (b, c)) in tools {
        diff(&mut out, &format!("tool {tool} version"), b, c);
    }
    out
}

/// Compares `current` against `baseline` rows (no environment check: see [`gate_runs`]). Hosts
/// are compared where both rows record one.
pub fn gate(baseline: &[ResultRow], current: &[ResultRow], cfg: &GateConfig) -> GateReport {
    gate_with_noise(baseline, current, cfg, &RunToRun::new())
}

/// Per case id and mode, the run-to-run factor of a baseline's window ([`robust_move`], see
/// [`Baseline::run_to_run`]).
pub type RunToRun = BTreeMap<(String, String), f64>;

/// [`gate`] with the baseline window's run-to-run noise per case and mode, which raises the bar
/// a speed verdict must clear ([`verdict::judge_between_runs`]).
pub fn gate_with_noise(
    baseline: &[ResultRow],
    current: &[ResultRow],
    cfg: &GateConfig,
    noise: &RunToRun,
) -> GateReport {
    let cur: BTreeMap<&str, &ResultRow> = current.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let base: BTreeMap<&str, &ResultRow> = baseline.iter().map(|r| (r.case_id.as_str(), r)).collect();
    let mut report =
        GateReport { confidence: cfg.speed.confidence, resamples: cfg.speed.resamples, ..GateReport::default() };
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
            report.findings.push(Finding::Broken { case_id: r.case_id.clone(), tool: r.backend.clone(), detail });
        }
    }
    // Per pair of hosts: the cases measured on different hosts, not judged on speed.
    let mut unlike: BTreeMap<(String, String), usize> = BTreeMap::new();
    for b in baseline {
        let tool = b.backend.clone();
        let Some(c) = cur.get(b.case_id.as_str()) else {
            waivable.push(Finding::Missing { case_id: b.case_id.clone(), tool });
            continue;
        };
        report.shared += 1;
        if b.status == Status::Skipped {
            continue; // nothing to compare with
        }
        report.compared += 1;
        if c.status == Status::Skipped {
            let why = c.message.clone().unwrap_or_default();
            waivable.push(Finding::Skipped { case_id: b.case_id.clone(), tool, reason: why });
            continue;
        }
        // A case that errored or timed out ran none of its checks: its Broken finding says so.
        let crashed = matches!(c.status, Status::Error | Status::Timeout);
        for bc in b.checks.iter().filter(|c| c.passed && !c.worst.is_nan()) {
            let detail = match c.checks.iter().find(|cc| cc.name == bc.name) {
                Some(cc) if cc.passed => continue,
                Some(cc) => format!(
                    "check {} passed in the baseline (worst {:.3e}), fails now (worst {:.3e} > tolerance {:.1e})",
                    bc.name, bc.worst, cc.worst, cc.tolerance
                ),
                None if crashed => continue,
                None => format!("check {} passed in the baseline and did not run now", bc.name),
            };
            report.findings.push(Finding::CheckRegressed {
                case_id: b.case_id.clone(),
                tool: tool.clone(),
                check: bc.name.clone(),
                detail,
            });
        }
        if failed(c).is_some() {
            continue; // already reported
        }
        // A baseline that cannot be compared with (an infinite time would hide any slowdown).
        if let Some(bad) = bad_timing(b) {
            report.findings.push(Finding::Broken {
                case_id: b.case_id.clone(),
                tool,
                detail: format!("baseline's {bad}"),
            });
            continue;
        }
        let host_differences = match (&b.host, &c.host) {
            (Some(hb), Some(hc)) if !cfg.allow_env_change => hb.differences(hc),
            _ => Vec::new(),
        };
        let timings = [("primal", &b.primal, &c.primal), ("vjp", &b.vjp, &c.vjp), ("jvp", &b.jvp, &c.jvp)];
        for (mode, tb, tc) in timings {
            if tb.is_some() && tc.is_none() {
                waivable.push(Finding::MissingMode {
                    case_id: b.case_id.clone(),
                    tool: tool.clone(),
                    mode: mode.to_string(),
                });
            }
        }
        if !host_differences.is_empty() {
            let what: Vec<String> = host_differences.iter().map(|(w, x, y)| format!("{w} {x} -> {y}")).collect();
            let (hb, hc) = (b.host.as_ref().expect("compared"), c.host.as_ref().expect("compared"));
            *unlike.entry((hb.describe(), hc.describe())).or_default() += 1;
            for (mode, tb, tc) in timings {
                let (Some(tb), Some(tc)) = (tb, tc) else { continue };
                let why = format!("no baseline measured on this host ({})", what.join("; "));
                report.changes.push(Change::unjudged(&b.case_id, mode, tb, tc, why));
            }
            continue;
        }
        for (mode, tb, tc) in timings {
            let (Some(tb), Some(tc)) = (tb, tc) else {
                continue;
            };
            let run_to_run = noise.get(&(b.case_id.clone(), mode.to_string())).copied();
            let change = judge_speed(&b.case_id, mode, tb, tc, &cfg.speed, run_to_run);
            if change.verdict == Verdict::Regressed {
                report.findings.push(Finding::Slower {
                    case_id: b.case_id.clone(),
                    metric: format!("{mode} median"),
                    baseline: tb.median_s,
                    current: tc.median_s,
                    ratio: change.ratio,
                    ci: change.ci,
                    evidence: change.why.clone(),
                });
            }
            report.changes.push(change);
        }
    }
    for ((hb, hc), n) in unlike {
        report.notes.push(Finding::EnvChanged {
            what: format!("host of {n} case(s), not judged on speed"),
            baseline: hb,
            current: hc,
        });
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

/// The whole gate: rows against the baseline (per case, one measured on the same host where the
/// baseline's window has one), and the set-ups of the runs.
pub fn gate_runs(baseline: &Baseline, current_run: &RunInfo, current: &[ResultRow], cfg: &GateConfig) -> GateReport {
    let current = with_hosts(current_run, current.to_vec());
    let rows = baseline.rows_for(current_run, &current);
    let env = environment_changes(&baseline.runs, &rows, current_run, &current);
    let mut report = gate_with_noise(&rows, &current, cfg, &baseline.run_to_run(current_run, &current));
    // A run that lacks cases it selected is never complete: the current one is a finding (its
    // missing cases are findings too), a baseline run named explicitly a note.
    if let Some(why) = current_run.partial_reason() {
        let f = Finding::Incomplete {
            run_id: current_run.run_id.clone(),
            detail: format!("the current run is partial ({why}): the cases it lacks were not measured"),
        };
        if cfg.allow_missing { report.notes.push(f) } else { report.findings.push(f) }
    }
    for r in &baseline.runs {
        if let Some(why) = r.partial_reason() {
            report.notes.push(Finding::Incomplete {
                run_id: r.run_id.clone(),
                detail: format!(
                    "the baseline run is partial ({why}), named explicitly: the cases it lacks are not compared"
                ),
            });
        }
    }
    if cfg.allow_env_change {
        report.notes.extend(env);
    } else if !env.is_empty() {
        // Unlike runs: their times do not compare, so speed verdicts would be noise.
        report.findings.retain(|f| !matches!(f, Finding::Slower { .. }));
        let why = format!(
            "the runs' set-ups differ ({}): times of unlike runs do not compare",
            env.iter().map(Finding::describe).collect::<Vec<_>>().join("; ")
        );
        for c in &mut report.changes {
            c.verdict = Verdict::NotJudged;
            c.why = why.clone();
        }
        report.findings.extend(env);
        return report;
    }
    if let Some((warning, why)) = machine_change(&baseline.runs, current_run, &report.changes, &cfg.speed) {
        report.findings.retain(|f| !matches!(f, Finding::Slower { .. }));
        for c in &mut report.changes {
            c.verdict = Verdict::NotJudged;
            c.why = why.clone();
        }
        report.machine_changed = Some(warning);
    }
    report
}

/// The bandwidth probe's change between the runs below which it says nothing (25%).
pub const PROBE_CHANGE: f64 = 1.25;

/// Whether the machine, not the code, moved the timings: the run's own sequential read
/// bandwidth probe (`roofline_seq_read_gb_s`) moved by more than [`PROBE_CHANGE`] against the
/// baseline runs' (their median), at least three quarters of the timings moved the way the probe
/// did, and their median ratio lies beyond the threshold. Then `(warning, why)`: the warning
/// names the probe's figures, `why` is each timing's not-judged reason. None where a side has no
/// probe.
pub fn machine_change(
    base_runs: &[RunInfo],
    current_run: &RunInfo,
    changes: &[Change],
    cfg: &SpeedConfig,
) -> Option<(String, String)> {
    let mut probes: Vec<f64> = base_runs
        .iter()
        .filter_map(|r| r.roofline.as_ref().map(|p| p.seq_read_gb_s))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    let now = current_run.roofline.as_ref().map(|p| p.seq_read_gb_s).filter(|x| x.is_finite() && *x > 0.0)?;
    if probes.is_empty() {
        return None;
    }
    probes.sort_by(f64::total_cmp);
    let n = probes.len();
    let before = if n % 2 == 1 { probes[n / 2] } else { 0.5 * (probes[n / 2 - 1] + probes[n / 2]) };
    let probe = now / before;
    if (probe.ln().abs()) <= PROBE_CHANGE.ln() {
        return None;
    }
    // Less bandwidth: the timings would be slower (ratio > 1), and the reverse.
    let slower = probe < 1.0;
    let mut ratios: Vec<f64> = changes.iter().map(|c| c.ratio).filter(|r| r.is_finite() && *r > 0.0).collect();
    if ratios.len() < 3 {
        return None;
    }
    let moved = ratios.iter().filter(|&&r| if slower { r > 1.0 } else { r < 1.0 }).count();
    ratios.sort_by(f64::total_cmp);
    let m = ratios.len();
    let median = if m % 2 == 1 { ratios[m / 2] } else { (ratios[m / 2 - 1] * ratios[m / 2]).sqrt() };
    let beyond = if slower { median > cfg.max_slowdown } else { median < 1.0 / cfg.max_slowdown };
    if moved * 4 < m * 3 || !beyond {
        return None;
    }
    let figures = format!("the run's sequential read bandwidth moved {before:.2} -> {now:.2} GB/s ({probe:.3}x)");
    let warning = format!(
        "machine changed: {moved} of {m} timings moved one way (median {median:.3}x) while {figures}: the machine, not the code, changed between the runs; speed not judged (rerun both on a quiet machine, or compare them side by side)"
    );
    Some((warning, format!("machine changed: {figures}, and the timings with it")))
}

/// The kind of reason a timing was not judged, for counts: too short, too few samples, too
/// noisy (its samples), too noisy between runs (the baseline window), no baseline from its host,
/// unlike runs, machine changed, baseline not a positive time.
pub fn not_judged_reason(why: &str) -> &'static str {
    if why.starts_with("a baseline sample lasts") || why.contains("ms minimum") {
        "too short"
    } else if why.contains("samples: the rank test cannot reach") {
        "too few samples"
    } else if why.starts_with("too noisy between runs") {
        "too noisy between runs"
    } else if why.starts_with("too noisy") {
        "too noisy"
    } else if why.starts_with("no baseline measured on this host") {
        "no baseline from its host"
    } else if why.starts_with("the runs' set-ups differ") {
        "unlike runs"
    } else if why.starts_with("machine changed") {
        "machine changed"
    } else if why.starts_with("the baseline median") {
        "baseline not a positive time"
    } else {
        "other"
    }
}

impl GateReport {
    /// The not-judged timings counted per reason: `12 too noisy, 3 too short`.
    pub fn not_judged_reasons(&self) -> String {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for c in self.changes.iter().filter(|c| c.verdict == Verdict::NotJudged) {
            *counts.entry(not_judged_reason(&c.why)).or_default() += 1;
        }
        counts.into_iter().map(|(why, n)| format!("{n} {why}")).collect::<Vec<_>>().join(", ")
    }

    /// The verdict in one line for an exit code (0 pass, 1 failed, 2 nothing to compare, 3
    /// slower). A pass says how much of the speed was judged: never "nothing regressed" when
    /// nothing could be judged.
    pub fn headline(&self, exit_code: u8) -> String {
        let n = self.changes.len();
        let not_judged = self.count(Verdict::NotJudged);
        let judged = n - not_judged;
        let lost = match self.lost_timings() {
            0 => String::new(),
            k => format!("; {k} timing(s) of the baseline not timed now"),
        };
        let pass = match exit_code {
            0 if n == 0 => "PASS: checks and coverage hold; no timings to compare".to_string(),
            0 if judged == 0 => {
                format!("PASS on checks and coverage; speed NOT JUDGED: none of {n} timing(s) could be judged")
            }
            0 if not_judged > 0 => {
                format!("PASS: nothing regressed among {judged} judged timing(s); {not_judged} of {n} not judged")
            }
            0 => format!("PASS: nothing regressed; all {n} timing(s) judged"),
            1 => return "FAIL (exit 1)".to_string(),
            3 => return format!("SLOWER (exit 3): {} timing(s) regressed", self.count(Verdict::Regressed)),
            _ => return "NOTHING COMPARED (exit 2)".to_string(),
        };
        pass + &lost
    }

    /// The gate's text output: the comparison, the speed counts, one line per group of findings
    /// and of notes, and the headline.
    pub fn text(&self, baseline: &Baseline, current: &RunInfo, exit_code: u8) -> Vec<String> {
        let groups = self.groups(false);
        let mut out = vec![format!(
            "compared {} cases; {} finding(s); current run {} against {}",
            self.compared,
            self.findings.len(),
            current.run_id,
            baseline.label
        )];
        for g in &groups {
            out.push(format!("{:<16} {}", g.kind.to_uppercase(), g.summary));
            if g.cases.len() > 1 {
                out.push(format!("{:<16} cases: {}", "", g.cases.join(", ")));
            }
        }
        for g in self.groups(true) {
            out.push(format!("note: {:<10} {}", g.kind, g.summary));
        }
        let mut speed = self.speed_summary();
        if self.count(Verdict::NotJudged) > 0 {
            speed.push_str(&format!(" (not judged: {}; --json lists them)", self.not_judged_reasons()));
        }
        out.push(speed);
        if let Some(w) = self.both_ways() {
            out.push(format!("warning: {w}"));
        }
        if let Some(w) = &self.machine_changed {
            out.push(format!("warning: {w}"));
        }
        out.push(format!("verdict: {}", self.headline(exit_code)));
        out
    }

    /// The gate's verdict as Markdown (a CI job's step summary): the headline, the regressions
    /// (largest first), the grouped findings and notes, and what was not judged.
    pub fn markdown(&self, baseline: &Baseline, current: &RunInfo, exit_code: u8) -> String {
        let mut s = format!(
            "## adgauge gate: {}\n\nCurrent run `{}` (suite {}) against {}: {} cases compared, {} finding(s) in {} group(s), {} note(s). {}.\n\n",
            self.headline(exit_code),
            current.run_id,
            if current.suite.is_empty() { "?" } else { &current.suite },
            baseline.label,
            self.compared,
            self.findings.len(),
            self.groups(false).len(),
            self.notes.len(),
            self.speed_summary()
        );
        let cell = |t: &str| t.replace('|', "\\|").replace('\n', " ");
        let mut regressed: Vec<&Change> = self.changes.iter().filter(|c| c.verdict == Verdict::Regressed).collect();
        regressed.sort_by(|a, b| b.ratio.total_cmp(&a.ratio));
        if !regressed.is_empty() {
            s.push_str(
                "### Regressions\n\n| case | mode | baseline ms | current ms | ratio [CI] |\n|---|---|---|---|---|\n",
            );
            for c in regressed.iter().take(20) {
                s.push_str(&format!(
                    "| `{}` | {} | {:.3} | {:.3} | {} |\n",
                    cell(&c.case_id),
                    c.mode,
                    c.baseline_s * 1e3,
                    c.current_s * 1e3,
                    c.ratio_text()
                ));
            }
            if regressed.len() > 20 {
                s.push_str(&format!("\n{} more in the JSON output.\n", regressed.len() - 20));
            }
            s.push('\n');
        }
        for (title, notes) in [("Findings", false), ("Notes (not failing)", true)] {
            let groups = self.groups(notes);
            if groups.is_empty() {
                continue;
            }
            s.push_str(&format!("### {title}\n\n| kind | what | cases |\n|---|---|---|\n"));
            for g in groups {
                let cases: Vec<String> = g.cases.iter().take(10).map(|c| format!("`{}`", cell(c))).collect();
                let more = if g.cases.len() > 10 { format!(" and {} more", g.cases.len() - 10) } else { String::new() };
                s.push_str(&format!("| {} | {} | {}{more} |\n", g.kind, cell(&g.summary), cases.join(", ")));
            }
            s.push('\n');
        }
        if self.count(Verdict::NotJudged) > 0 {
            s.push_str(&format!("Not judged on speed: {}.\n\n", self.not_judged_reasons()));
        }
        if let Some(w) = self.both_ways() {
            s.push_str(&format!("**Warning:** {w}.\n\n"));
        }
        if let Some(w) = &self.machine_changed {
            s.push_str(&format!("**Warning:** {w}.\n\n"));
        }
        s
    }

    /// The gate's answer as one JSON object.
    pub fn json(&self, baseline: &Baseline, current: &RunInfo, exit_code: u8) -> serde_json::Value {
        let change = |c: &Change| {
            serde_json::json!({
                "case_id": c.case_id,
                "mode": c.mode,
                "baseline_s": c.baseline_s,
                "current_s": c.current_s,
                "ratio": c.ratio,
                "ci_low": c.ci.map(|x| x.0),
                "ci_high": c.ci.map(|x| x.1),
                "p_slower": c.p_slower,
                "samples": [c.samples.0, c.samples.1],
                "verdict": c.verdict.name(),
                "why": c.why,
            })
        };
        let groups = |notes: bool| {
            self.groups(notes)
                .into_iter()
                .map(|g| serde_json::json!({"kind": g.kind, "summary": g.summary, "cases": g.cases}))
                .collect::<Vec<_>>()
        };
        serde_json::json!({
            "verdict": self.headline(exit_code),
            "baseline": baseline.label,
            "baseline_runs": baseline.runs.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(),
            "current": current.run_id,
            "compared": self.compared,
            "shared": self.shared,
            "findings": self.findings.iter().map(finding_json).collect::<Vec<_>>(),
            "groups": groups(false),
            "notes": self.notes.iter().map(finding_json).collect::<Vec<_>>(),
            "note_groups": groups(true),
            "speed": {
                "timings": self.changes.len(),
                "regressed": self.count(Verdict::Regressed),
                "improved": self.count(Verdict::Improved),
                "no_change": self.count(Verdict::NoChange),
                "not_judged": self.count(Verdict::NotJudged),
                "confidence": self.confidence,
                "resamples": self.resamples,
            },
            "changes": self.changes.iter().map(change).collect::<Vec<_>>(),
            "not_judged": self.not_judged(),
            "machine_changed": self.machine_changed,
            "exit_code": exit_code,
        })
    }
}

/// One finding as JSON: kind, case, detail, and the kind's own fields.
pub fn finding_json(f: &Finding) -> serde_json::Value {
    let mut v = serde_json::json!({"kind": f.kind(), "case_id": f.case_id(), "detail": f.describe()});
    match f {
        Finding::Slower { metric, baseline, current, ratio, ci, evidence, .. } => {
            v["metric"] = metric.clone().into();
            v["baseline_s"] = (*baseline).into();
            v["current_s"] = (*current).into();
            v["ratio"] = (*ratio).into();
            v["ci_low"] = ci.map(|c| c.0).into();
            v["ci_high"] = ci.map(|c| c.1).into();
            v["evidence"] = evidence.clone().into();
        }
        Finding::CheckRegressed { check, tool, .. } => {
            v["check"] = check.clone().into();
            v["tool"] = tool.clone().into();
        }
        Finding::Broken { tool, .. } | Finding::Missing { tool, .. } | Finding::Skipped { tool, .. } => {
            v["tool"] = tool.clone().into()
        }
        Finding::MissingMode { tool, mode, .. } => {
            v["tool"] = tool.clone().into();
            v["mode"] = mode.clone().into();
        }
        Finding::ToolLost { tool, .. } => v["tool"] = tool.clone().into(),
        Finding::Incomplete { run_id, .. } => v["run_id"] = run_id.clone().into(),
        Finding::EnvChanged { what, baseline, current } => {
            v["what"] = what.clone().into();
            v["baseline"] = baseline.clone().into();
            v["current"] = current.clone().into();
        }
    }
    v
}

/// Control characters too (a tool's stderr in a message): `crate::text::xml`.
fn xml_escape(s: &str) -> String {
    crate::text::xml(s)
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
            host: None,
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
            roofline: None,
            interrupted: None,
            selection: None,
        }
    }

    fn host(cpu: &str) -> Option<Host> {
        Some(Host { cpu_model: cpu.into(), cores: 4, rustc: "rustc 1.91.0".into(), target_features: "sse2".into() })
    }

    const STEADY: [f64; 7] = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3];

    fn scaled(k: f64) -> Vec<f64> {
        STEADY.iter().map(|x| x * k).collect()
    }

    #[test]
    fn identical_runs_pass() {
        let a = vec![row("a", 1e-3, 0.05), row("b", 2e-3, 0.05)];
        let r = gate(&a, &a, &GateConfig::default());
        assert_eq!(r.compared, 2);
        assert!(r.findings.is_empty());
        assert_eq!(r.headline(0), "PASS: nothing regressed; all 4 timing(s) judged");
    }

    #[test]
    fn a_two_times_slower_case_regresses_with_its_interval() {
        let r = gate(&[sampled("a", &STEADY)], &[sampled("a", &scaled(2.0))], &GateConfig::default());
        match r.findings.as_slice() {
            [Finding::Slower { metric, ratio, ci: Some((lo, hi)), evidence, .. }] => {
                assert_eq!(metric, "primal median");
                assert!((ratio - 2.0).abs() < 1e-12);
                assert!(*lo > 1.9 && *hi < 2.1, "{lo} {hi}");
                // All 7 current samples above all 7 baseline ones: p = 1 / C(14, 7) = 1/3432.
                assert!(evidence.ends_with("Mann-Whitney p = 2.91e-4 over 7 and 7 samples"), "{evidence}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.count(Verdict::Regressed), 1);
        assert_eq!(r.headline(3), "SLOWER (exit 3): 1 timing(s) regressed");
    }

    /// The quick suite: 3 samples a side can never reach p < 0.01 (1 / C(6, 3) = 1/20),
    /// so every timing is not judged, and the headline says so instead of "nothing regressed".
    #[test]
    fn three_samples_a_side_are_counted_as_not_judged_never_passed_as_nothing_regressed() {
        let (base, slow) = (&STEADY[..3], scaled(4.7));
        let r = gate(&[sampled("a", base)], &[sampled("a", &slow[..3])], &GateConfig::default());
        assert!(r.findings.is_empty());
        assert_eq!(r.count(Verdict::NotJudged), 1);
        assert_eq!(
            r.not_judged(),
            vec!["a primal: 3 and 3 samples: the rank test cannot reach p < 0.01 (needs 5 on each side)".to_string()]
        );
        assert_eq!(r.not_judged_reasons(), "1 too few samples");
        let headline = r.headline(0);
        assert!(headline.contains("speed NOT JUDGED: none of 1 timing(s)"), "{headline}");
        assert!(!headline.contains("nothing regressed"), "{headline}");
    }

    #[test]
    fn without_samples_a_two_times_slower_case_is_flagged_but_spread_is_not() {
        let base = vec![row("a", 1e-3, 0.05), row("noisy", 1e-3, 0.9)];
        let cur = vec![row("a", 2e-3, 0.05), row("noisy", 1.5e-3, 0.9)];
        let r = gate(&base, &cur, &GateConfig::default());
        assert!(r.slower() && !r.broken());
        let slow: Vec<&str> = r.findings.iter().map(|f| f.case_id()).collect();
        assert_eq!(slow, vec!["a", "a"]); // primal and vjp
        let cfg =
            GateConfig { speed: SpeedConfig { min_seconds: 0.01, ..SpeedConfig::default() }, ..GateConfig::default() };
        let short = gate(&base, &cur, &cfg);
        assert!(short.findings.is_empty());
        assert_eq!(short.count(Verdict::NotJudged), 4);
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

    /// The count: a tool crashing on 3 cases gave 33 findings (a broken finding per case
    /// and a "did not run now" per check and case). Now each case has one finding, and the three
    /// are one group naming the tool, the cause and the cases.
    #[test]
    fn a_crashing_tool_is_one_group_of_findings_listing_its_cases() {
        let checks: Vec<Check> =
            (0..10).map(|i| Check { name: format!("check-{i}"), worst: 1e-9, tolerance: 1e-6, passed: true }).collect();
        let ids = ["a", "b", "c"];
        let base: Vec<ResultRow> = ids
            .iter()
            .map(|id| ResultRow { backend: "jax".into(), checks: checks.clone(), ..row(id, 1e-3, 0.05) })
            .collect();
        let cur: Vec<ResultRow> = base
            .iter()
            .map(|b| ResultRow {
                status: Status::Error,
                message: Some("tool jax exited with signal 11".into()),
                checks: vec![],
                primal: None,
                vjp: None,
                ..b.clone()
            })
            .collect();
        let r = gate(&base, &cur, &GateConfig::default());
        assert_eq!(r.findings.len(), 3, "{:?}", r.findings);
        let groups = r.groups(false);
        assert_eq!(
            groups,
            vec![FindingGroup {
                kind: "broken",
                summary: "tool jax: status error: tool jax exited with signal 11 (3 cases)".into(),
                cases: vec!["a".into(), "b".into(), "c".into()],
            }]
        );
        // A check failing on two cases with different worst values is one cause too.
        let fail = |id: &str, worst: f64| {
            let mut r = row(id, 1e-3, 0.05);
            r.checks = vec![Check { name: "dot".into(), worst, tolerance: 1e-6, passed: false }];
            r.status = Status::Failed;
            r
        };
        let r = gate(&[], &[fail("x", 0.1), fail("y", 0.2)], &GateConfig::default());
        assert_eq!(r.groups(false)[0].summary, "tool cpu: check dot fails (2 cases)");
        let text = r.text(&Baseline::run("b".into(), info("r1"), vec![]), &info("r2"), 1);
        assert!(text.contains(&"BROKEN           tool cpu: check dot fails (2 cases)".to_string()), "{text:?}");
        assert!(text.contains(&"                 cases: x, y".to_string()), "{text:?}");
    }

    #[test]
    fn a_case_missing_from_the_current_run_is_reported_or_waived() {
        let missing = Finding::Missing { case_id: "a".into(), tool: "cpu".into() };
        let r = gate(&[row("a", 1e-3, 0.0), row("b", 1e-3, 0.0)], &[row("b", 1e-3, 0.0)], &GateConfig::default());
        assert_eq!(r.findings, vec![missing.clone()]);
        assert!(r.missing() && r.failed());
        let cfg = GateConfig { allow_missing: true, ..GateConfig::default() };
        let r = gate(&[row("a", 1e-3, 0.0), row("b", 1e-3, 0.0)], &[row("b", 1e-3, 0.0)], &cfg);
        assert!(r.findings.is_empty() && !r.failed());
        assert_eq!(r.notes, vec![missing]);
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
    fn set_up_changes_fail_unless_allowed_and_then_are_listed() {
        let base = Baseline::run("b".into(), info("r1"), vec![sampled("a", &STEADY)]);
        let mut cur_info = info("r2");
        cur_info.governor = "powersave".into();
        let mut cur = sampled("a", &scaled(2.0));
        cur.threads = 1;
        cur.tool_version = Some("adgauge 0.2.0".into());
        let r = gate_runs(&base, &cur_info, std::slice::from_ref(&cur), &GateConfig::default());
        let env: Vec<String> = r.findings.iter().map(Finding::describe).collect();
        assert_eq!(
            env,
            [
                "frequency governor: performance -> powersave",
                "threads of 1 case(s) (a): 2 -> 1",
                "tool cpu version: adgauge 0.1.0 -> adgauge 0.2.0"
            ]
        );
        // The 2x slower times are not judged across unlike runs, and say why...
        assert!(!r.slower() && r.failed());
        assert_eq!(r.count(Verdict::NotJudged), 1);
        assert_eq!(r.not_judged_reasons(), "1 unlike runs");
        // ...unless the change is allowed: then they are, and the changes are notes.
        let cfg = GateConfig { allow_env_change: true, ..GateConfig::default() };
        let r = gate_runs(&base, &cur_info, &[cur], &cfg);
        assert!(r.slower() && !r.failed());
        assert_eq!(r.notes.len(), 3);
    }

    /// The hosted runners: the baseline's shards ran on AMD and Intel machines, the
    /// current run's on the opposite ones or the same. A mixed-CPU run is no environment change:
    /// each case is compared with a baseline from its own host, and one with none is not judged
    /// on speed, saying why, without failing the gate.
    #[test]
    fn each_case_is_compared_only_with_a_baseline_from_its_host() {
        let on = |id: &str, cpu: &str, k: f64| ResultRow { host: host(cpu), ..sampled(id, &scaled(k)) };
        let mut merged_info = info("r1");
        merged_info.cpu_model = "AMD EPYC + Intel Xeon".into();
        let base =
            Baseline::run("b".into(), merged_info.clone(), vec![on("a", "AMD EPYC", 1.0), on("b", "Intel Xeon", 1.0)]);
        let mut cur_info = info("r2");
        cur_info.cpu_model = "AMD EPYC + Intel Xeon".into();
        // a: same host, 2x slower; b: now on AMD where the baseline measured it on Intel.
        let cur = vec![on("a", "AMD EPYC", 2.0), on("b", "AMD EPYC", 3.0)];
        let r = gate_runs(&base, &cur_info, &cur, &GateConfig::default());
        assert!(!r.failed(), "{:?}", r.findings);
        let slower: Vec<&str> = r.findings.iter().map(Finding::case_id).collect();
        assert_eq!(slower, ["a"]);
        let b = r.changes.iter().find(|c| c.case_id == "b").unwrap();
        assert_eq!(b.verdict, Verdict::NotJudged);
        assert_eq!(b.why, "no baseline measured on this host (CPU model Intel Xeon -> AMD EPYC)");
        assert_eq!(
            r.notes.iter().map(Finding::describe).collect::<Vec<_>>(),
            [
                "host of 1 case(s), not judged on speed: Intel Xeon (4 cores, rustc 1.91.0) -> AMD EPYC (4 cores, rustc 1.91.0)"
            ]
        );
        // With a window that ran b on AMD once, b is judged against that night.
        let older = vec![on("a", "AMD EPYC", 1.0), on("b", "AMD EPYC", 1.0)];
        let best = Baseline::best_of(vec![(info("r0"), older), (merged_info, base.rows.clone())]).unwrap();
        let r = gate_runs(&best, &cur_info, &cur, &GateConfig::default());
        let slower: Vec<&str> = r.findings.iter().map(Finding::case_id).collect();
        assert_eq!(slower, ["a", "b"], "{:?}", r.changes);
        // A different compiler is another host as well.
        let mut newer = on("a", "AMD EPYC", 1.0);
        newer.host.as_mut().unwrap().rustc = "rustc 1.92.0".into();
        let r = gate_runs(&base, &cur_info, &[newer], &GateConfig::default());
        assert_eq!(r.changes[0].why, "no baseline measured on this host (compiler rustc 1.91.0 -> rustc 1.92.0)");
    }

    /// Five cases 2x slower and five 2x faster: the gate calls them so, and warns that timings
    /// moving both ways at once are what load on the machine does.
    #[test]
    fn timings_moving_both_ways_at_once_are_warned_about() {
        let ids: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        let base: Vec<ResultRow> = ids.iter().map(|id| sampled(id, &STEADY)).collect();
        let cur: Vec<ResultRow> =
            ids.iter().enumerate().map(|(i, id)| sampled(id, &scaled(if i < 5 { 2.0 } else { 0.5 }))).collect();
        let r = gate(&base, &cur, &GateConfig::default());
        assert_eq!((r.count(Verdict::Regressed), r.count(Verdict::Improved)), (5, 5));
        let text = r.text(&Baseline::run("b".into(), info("r1"), base.clone()), &info("r2"), 3);
        assert!(text.iter().any(|l| l.starts_with("warning: 5 timings regressed and 5 improved at once")), "{text:?}");
        // Four of each: no warning.
        let r = gate(&base[1..9], &cur[1..9], &GateConfig::default());
        assert_eq!(r.both_ways(), None);
    }

    /// Each night 5% slower than the one before: against the previous night no step exceeds
    /// 1.15x, against the best of the last 5 nights the drift adds up to 1.22x.
    #[test]
    fn best_of_n_catches_slow_drift_that_the_previous_run_misses() {
        let night = |k: i32| sampled("a", &scaled(1.05f64.powi(k)));
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

    /// Case `a` of a night `f` times the 10 ms of a quiet one (`STEADY` x 10, clear of the 1 ms
    /// minimum).
    fn night(f: f64) -> ResultRow {
        sampled("a", &scaled(10.0 * f))
    }

    /// Nights of case `a` (see [`night`]), oldest first.
    fn nights(factors: &[f64]) -> Vec<(RunInfo, Vec<ResultRow>)> {
        factors.iter().enumerate().map(|(k, f)| (info(&format!("r{k}")), vec![night(*f)])).collect()
    }

    /// Issue 44, class 1: the run-to-run factor was the largest move in the window, so a 3x
    /// regression flagged one night read "too noisy between runs" from the next night on (the
    /// move into the regressed night became the bar), and one loaded night among quiet ones hid a
    /// real 30% slowdown the same way.
    #[test]
    fn a_persisting_regression_and_one_loaded_night_do_not_raise_the_bar() {
        let cfg = GateConfig::default();
        // Night 6 regressed 3x; tonight it still is.
        let best = Baseline::best_of(nights(&[1.0, 1.02, 0.99, 1.01, 1.0, 3.0])).unwrap();
        let r = gate_runs(&best, &info("r6"), &[night(3.0)], &cfg);
        assert_eq!(r.count(Verdict::Regressed), 1, "{:?}", r.changes);
        assert!((r.changes[0].ratio - 3.0 / 0.99).abs() < 1e-9, "{:?}", r.changes);
        // Two nights in the window: the one move is the regression's own; the bar is capped.
        let best = Baseline::best_of(nights(&[1.0, 3.0])).unwrap();
        let r = gate_runs(&best, &info("r2"), &[night(3.0)], &cfg);
        assert_eq!(r.count(Verdict::Regressed), 1, "{:?}", r.changes);
        // Under the capped bar (1.15 x 1.739 = 2), and the reason says it is capped.
        let r = gate_runs(&best, &info("r2"), &[night(1.9)], &cfg);
        assert!(
            r.changes[0].why.starts_with(
                "too noisy between runs: 1.900x is within the 1.739x run-to-run bar (capped; the case moved 3.000x"
            ),
            "{:?}",
            r.changes
        );
        // One loaded night (2x) among quiet ones; tonight is 1.3x slower.
        let best = Baseline::best_of(nights(&[1.0, 1.02, 2.0, 0.99, 1.01, 1.0])).unwrap();
        let noise = best.run_to_run(&info("r6"), &[night(1.3)]);
        let f = noise[&("a".to_string(), "primal".to_string())];
        assert!((f - 1.01 / 0.99).abs() < 1e-9, "the third largest of the moves 1.02, 1.96, 2.02, 1.0202, 1.0099: {f}");
        let r = gate_runs(&best, &info("r6"), &[night(1.3)], &cfg);
        assert_eq!(r.count(Verdict::Regressed), 1, "{:?}", r.changes);
        // A case that moves 1.5x every night keeps its bar: 1.5x tonight is not judged.
        let best = Baseline::best_of(nights(&[1.0, 1.5, 1.0, 1.5, 1.0, 1.5])).unwrap();
        let r = gate_runs(&best, &info("r6"), &[night(1.5)], &cfg);
        assert_eq!(r.count(Verdict::NotJudged), 1, "{:?}", r.changes);
        assert!(r.changes[0].why.starts_with("too noisy between runs: 1.500x is within the 1.500x"), "{:?}", r.changes);
        // Counted under its own cause, not with the samples' noise (it read "1 too noisy").
        assert_eq!(r.not_judged_reasons(), "1 too noisy between runs");
    }

    /// Issue 44, class 3: best-of took its cases and statuses from the newest run of the window,
    /// so a case skipped on the newest night and 3x slower tonight was neither compared nor
    /// counted.
    #[test]
    fn best_of_takes_the_cases_of_every_run_in_the_window() {
        let mut skipped = sampled("a", &STEADY);
        skipped.status = Status::Skipped;
        skipped.primal = None;
        let runs = vec![
            (info("r0"), vec![sampled("a", &STEADY), sampled("b", &STEADY)]),
            (info("r1"), vec![skipped, sampled("b", &STEADY)]),
        ];
        let best = Baseline::best_of(runs).unwrap();
        let cur = vec![sampled("a", &scaled(3.0)), sampled("b", &STEADY)];
        let r = gate_runs(&best, &info("r2"), &cur, &GateConfig::default());
        assert_eq!(r.compared, 2, "{:?}", r.changes);
        let slower: Vec<&str> = r.findings.iter().map(Finding::case_id).collect();
        assert_eq!(slower, ["a"]);
        // A case of an older night only that is absent tonight is missing.
        let runs = vec![
            (info("r0"), vec![sampled("a", &STEADY), sampled("b", &STEADY)]),
            (info("r1"), vec![sampled("b", &STEADY)]),
        ];
        let best = Baseline::best_of(runs).unwrap();
        let r = gate_runs(&best, &info("r2"), &[sampled("b", &STEADY)], &GateConfig::default());
        assert_eq!(r.findings, vec![Finding::Missing { case_id: "a".into(), tool: "cpu".into() }]);
    }

    /// Issue 44, class 4: a mode timed in the baseline and no longer timed was skipped silently
    /// ("all 1 timing(s) judged").
    #[test]
    fn a_mode_timed_in_the_baseline_and_not_now_is_a_finding() {
        let base = row("a", 1e-3, 0.05);
        let mut cur = row("a", 1e-3, 0.05);
        cur.vjp = None;
        let r = gate(std::slice::from_ref(&base), std::slice::from_ref(&cur), &GateConfig::default());
        let found: Vec<(&str, String)> = r.findings.iter().map(|f| (f.kind(), f.describe())).collect();
        assert_eq!(found, [("missing", "a: vjp was timed in the baseline, not timed now".to_string())]);
        assert!(r.failed() && r.missing());
        assert_eq!(
            r.speed_summary(),
            "speed: 0 regressed, 0 improved, 1 no change, 0 not judged of 1 timing(s); 1 timed in the baseline and not now"
        );
        let cfg = GateConfig { allow_missing: true, ..GateConfig::default() };
        let r = gate(&[base], &[cur], &cfg);
        assert!(!r.failed() && r.notes.len() == 1, "{:?}", r.notes);
        assert_eq!(
            r.headline(0),
            "PASS: nothing regressed; all 1 timing(s) judged; 1 timing(s) of the baseline not timed now"
        );
    }

    /// Issue 44, class 9: the threads were compared as sets over all cases, so two cases that
    /// swapped their thread counts read as no change.
    #[test]
    fn threads_are_compared_case_by_case() {
        let with = |id: &str, threads: usize| ResultRow { threads, ..sampled(id, &STEADY) };
        let base = Baseline::run("b".into(), info("r1"), vec![with("a", 1), with("b", 2)]);
        let r = gate_runs(&base, &info("r2"), &[with("a", 2), with("b", 1)], &GateConfig::default());
        let env: Vec<String> = r.findings.iter().map(Finding::describe).collect();
        assert_eq!(env, ["threads of 1 case(s) (a): 1 -> 2", "threads of 1 case(s) (b): 2 -> 1"]);
        assert!(r.failed());
        let r = gate_runs(&base, &info("r2"), &[with("a", 1), with("b", 2)], &GateConfig::default());
        assert!(r.findings.is_empty(), "{:?}", r.findings);
    }

    fn probed(id: &str, gb_s: f64) -> RunInfo {
        let roofline = crate::Roofline { threads: 2, seq_read_gb_s: gb_s, random: vec![], tools: vec!["cpu".into()] };
        RunInfo { roofline: Some(roofline), ..info(id) }
    }

    /// Issue 44, class 10: every timing 1.6x slower while the run's own bandwidth probe fell
    /// from 34.7 to 20.6 GB/s read as 10 regressions; it is the machine, not the code.
    #[test]
    fn timings_moving_with_the_bandwidth_probe_are_a_machine_change() {
        let ids: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        let base_rows: Vec<ResultRow> = ids.iter().map(|id| sampled(id, &STEADY)).collect();
        let cur: Vec<ResultRow> = ids.iter().map(|id| sampled(id, &scaled(1.6))).collect();
        let base = Baseline::run("b".into(), probed("r1", 34.7), base_rows.clone());
        let r = gate_runs(&base, &probed("r2", 20.6), &cur, &GateConfig::default());
        assert!(!r.slower() && !r.failed(), "{:?}", r.findings);
        assert_eq!(r.count(Verdict::NotJudged), 10);
        assert_eq!(r.not_judged_reasons(), "10 machine changed");
        let text = r.text(&base, &probed("r2", 20.6), 0);
        assert!(
            text.iter().any(|l| l.starts_with(
                "warning: machine changed: 10 of 10 timings moved one way (median 1.600x) while the run's sequential read bandwidth moved 34.70 -> 20.60 GB/s (0.594x)"
            )),
            "{text:?}"
        );
        // The same slowdown with the probe unchanged is the code's: 10 regressed.
        let base = Baseline::run("b".into(), probed("r1", 34.7), base_rows.clone());
        let r = gate_runs(&base, &probed("r2", 34.0), &cur, &GateConfig::default());
        assert_eq!(r.count(Verdict::Regressed), 10);
        // Without a probe on either side nothing can be told: regressed as before.
        let base = Baseline::run("b".into(), info("r1"), base_rows);
        let r = gate_runs(&base, &info("r2"), &cur, &GateConfig::default());
        assert_eq!(r.count(Verdict::Regressed), 10);
    }

    /// Issue 44, class 11: reasons that named the wrong cause. A 1.5x ratio far beyond the
    /// 1.05x run-to-run bar, not judged because its interval is wide, read "too noisy between
    /// runs: 1.500x is within the 1.050x"; a baseline median of 0 (no samples stored) read "a
    /// baseline sample lasts 0.000 ms, under the minimum"; and "not a positive time" was
    /// counted as "other".
    #[test]
    fn not_judged_reasons_name_their_cause() {
        let wide = [9e-3, 15e-3, 15e-3, 15e-3, 26e-3, 9.5e-3, 16e-3];
        let best = Baseline::best_of(nights(&[1.0, 1.05, 1.0, 1.05, 1.0])).unwrap();
        let r = gate_runs(&best, &info("r5"), &[sampled("a", &wide)], &GateConfig::default());
        let c = &r.changes[0];
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:?}");
        assert!((c.ratio - 1.5).abs() < 1e-9, "{c:?}");
        assert!(c.why.starts_with("too noisy: the 95% CI ["), "{}", c.why);
        assert_eq!(r.not_judged_reasons(), "1 too noisy");
        // No samples stored, a baseline median of 0.
        let mut zero = row("a", 1e-3, 0.0);
        zero.primal.as_mut().unwrap().median_s = 0.0;
        zero.vjp = None;
        let mut cur = row("a", 1e-3, 0.0);
        cur.vjp = None;
        let r = gate(&[zero], &[cur], &GateConfig::default());
        assert_eq!(r.changes[0].why, "the baseline median 0 s is not a positive time");
        assert_eq!(r.not_judged_reasons(), "1 baseline not a positive time");
    }
}

//! The report's view models: per section, a plain struct of what the section shows, computed
//! from the results by the builder functions here. Every figure is decided in this file: the
//! counts, ratios and geometric means, the sorting and grouping of rows, the thresholds, and
//! which CSS class a cell takes; numbers arrive in the structs already formatted as the page
//! prints them. `markup.rs` only lays these structs out, and `mod.rs` strings the two together.
//!
//! Text that came from outside (case ids, messages, a tool's stderr) is held as [`Text`], which
//! the templates write escaped by `crate::text::html`; formatted figures, CSS classes and
//! anchors are made here from known characters and held as plain strings.

use std::collections::{BTreeMap, BTreeSet};

use crate::charts::{self, Series};
use crate::gate::{Baseline, GateConfig, GateReport, gate_runs};
use crate::roofline::{self, Roofline};
use crate::schema::{ResultRow, RunInfo, Status, Timing};
use crate::verdict::{Change, Verdict};

use super::Paired;

/// Text shown as written: the templates escape it as `crate::text::html` does (control
/// characters included, which the template engine's own escaping leaves raw).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Text(pub String);

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(s.to_string())
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(s)
    }
}

/// The modes in the order every table lists them.
pub(super) const MODES: [&str; 3] = ["primal", "vjp", "jvp"];

/// The whole page: nothing to show, or a run's report.
pub(super) enum Report {
    Empty,
    Run(Box<RunReport>),
}

/// The report of a history's newest run: its header, the verdict, and the sections in order.
pub(super) struct RunReport {
    pub header: Header,
    pub verdict: VerdictView,
    /// The sections in page order: the navigation and the body are both laid out from this
    /// one list, so the navigation names every section.
    pub sections: Vec<Section>,
}

/// One section of the report, with what it shows.
pub(super) enum Section {
    Paired(Box<PairedView>),
    Findings(FindingsView),
    Changes(ChangesView),
    Overheads(OverheadsView),
    Grid(StatusGridView),
    Tools(ToolsView),
    Trends(ChartsView),
    Scaling(ScalingView),
    Environment(EnvironmentView),
    Memory(MemoryView),
    Validation(ValidationView),
}

impl Section {
    /// The section's anchor: its heading's `id` and its entry in the navigation.
    pub(super) fn anchor(&self) -> &'static str {
        match self {
            Section::Paired(_) => "paired",
            Section::Findings(_) => "findings",
            Section::Changes(_) => "changes",
            Section::Overheads(_) => "overheads",
            Section::Grid(_) => "grid",
            Section::Tools(_) => "tools",
            Section::Trends(_) => "trends",
            Section::Scaling(_) => "scaling",
            Section::Environment(_) => "environment",
            Section::Memory(_) => "memory",
            Section::Validation(_) => "validation",
        }
    }

    /// The section's heading.
    pub(super) fn title(&self) -> &'static str {
        match self {
            Section::Paired(_) => "Paired comparison",
            Section::Findings(_) => "Findings",
            Section::Changes(_) => "Changes since the baseline",
            Section::Overheads(_) => "AD overhead",
            Section::Grid(_) => "Status",
            Section::Tools(_) => "Tools compared",
            Section::Trends(_) => "History trends",
            Section::Scaling(_) => "Scaling",
            Section::Environment(_) => "Environment",
            Section::Memory(_) => "Memory",
            Section::Validation(_) => "Validation",
        }
    }
}

/// Builds the report of a history (oldest run first): the newest run, compared with `baseline`
/// the way `adgauge gate` compares them, and the paired comparison where there is one.
pub(super) fn report(
    history: &[(RunInfo, Vec<ResultRow>)],
    baseline: Option<&Baseline>,
    paired: Option<&Paired>,
) -> Report {
    let Some((info, rows)) = history.last() else { return Report::Empty };
    let gate = baseline.map(|b| gate_runs(b, info, rows, &GateConfig::default()));
    let gate = gate.as_ref();
    let workloads: BTreeSet<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    let mut sections = Vec::new();
    if let Some(p) = paired {
        sections.push(Section::Paired(Box::new(paired_view(p))));
    }
    sections.extend([
        Section::Findings(findings(rows, gate)),
        Section::Changes(changes(rows, gate, info.roofline.as_ref())),
        Section::Overheads(overheads(rows)),
        Section::Grid(status_grid(rows, &workloads)),
        Section::Tools(tools_compared(rows)),
        Section::Trends(trends(history, &workloads)),
        Section::Scaling(scaling(rows, &workloads)),
        Section::Environment(environment(info, rows, baseline)),
        Section::Memory(memory(rows)),
        Section::Validation(validation(rows)),
    ]);
    Report::Run(Box::new(RunReport {
        header: header(info, history.len()),
        verdict: verdict(rows, baseline, gate),
        sections,
    }))
}

/// The run the report is about, under the page's title.
pub(super) struct Header {
    pub run_id: Text,
    pub suite: Text,
    pub timestamp: Text,
    pub revision: Text,
    pub machine: Text,
    /// Runs in the history.
    pub runs: usize,
}

fn header(info: &RunInfo, runs: usize) -> Header {
    Header {
        run_id: info.run_id.as_str().into(),
        suite: if info.suite.is_empty() { "?" } else { info.suite.as_str() }.into(),
        timestamp: info.timestamp.as_str().into(),
        revision: info.git_revision.as_str().into(),
        machine: info.machine.as_str().into(),
        runs,
    }
}

/// `#c-…`: a case's row in the table of changes, from its id.
pub(super) fn anchor(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// Seconds as milliseconds at the page's precision; – for none.
fn ms(x: Option<f64>) -> String {
    x.map(|s| charts::tick(s * 1e3)).unwrap_or_else(|| "–".into())
}

fn ratio(x: Option<f64>) -> String {
    x.map(charts::tick).unwrap_or_else(|| "–".into())
}

/// Mean of logs (geometric mean) of positive finite values.
pub(super) fn geo_mean(xs: &[f64]) -> Option<f64> {
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

/// The first thing on the page: the gate's verdict, the cases' statuses counted, the comparison
/// with the baseline, warnings, and the worst regressions.
pub(super) struct VerdictView {
    /// `pass`, `warn` or `fail`: the banner's colour.
    pub class: &'static str,
    pub headline: Text,
    pub statuses: StatusCounts,
    pub comparison: Option<Comparison>,
    pub warnings: Vec<Text>,
    pub regressed: Option<TopRegressions>,
}

/// The run's cases per status.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct StatusCounts {
    pub cases: usize,
    pub ok: usize,
    pub failed: usize,
    pub error: usize,
    pub timeout: usize,
    pub skipped: usize,
}

/// What the gate compared against the baseline.
pub(super) struct Comparison {
    pub baseline: Text,
    pub compared: usize,
    pub findings: usize,
    pub groups: usize,
    pub notes: usize,
    /// The speed verdicts counted.
    pub speed: Text,
    /// Why timings were not judged, where some were not.
    pub not_judged: Option<Text>,
    /// The intervals' confidence in percent.
    pub confidence_pct: String,
    pub resamples: usize,
}

/// The largest regressions, at most ten, and how many more the table of changes has.
pub(super) struct TopRegressions {
    pub count: usize,
    pub rows: Vec<TopRegression>,
    pub more: Option<usize>,
}

pub(super) struct TopRegression {
    pub anchor: String,
    pub case_id: Text,
    pub mode: Text,
    pub baseline_ms: String,
    pub now_ms: String,
    /// The ratio with its interval.
    pub ratio: Text,
}

fn status_counts(rows: &[ResultRow]) -> StatusCounts {
    let n = |s: Status| rows.iter().filter(|r| r.status == s).count();
    StatusCounts {
        cases: rows.len(),
        ok: n(Status::Ok),
        failed: n(Status::Failed),
        error: n(Status::Error),
        timeout: n(Status::Timeout),
        skipped: n(Status::Skipped),
    }
}

pub(super) fn verdict(rows: &[ResultRow], baseline: Option<&Baseline>, report: Option<&GateReport>) -> VerdictView {
    let statuses = status_counts(rows);
    let broken = statuses.failed + statuses.error + statuses.timeout;
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
    let comparison = baseline.zip(report).map(|(b, r)| Comparison {
        baseline: b.label.as_str().into(),
        compared: r.compared,
        findings: r.findings.len(),
        groups: r.groups(false).len(),
        notes: r.notes.len(),
        speed: r.speed_summary().into(),
        not_judged: (r.count(Verdict::NotJudged) > 0).then(|| r.not_judged_reasons().into()),
        confidence_pct: format!("{:.0}", r.confidence * 100.0),
        resamples: r.resamples,
    });
    let warnings =
        report.into_iter().flat_map(|r| [r.both_ways(), r.machine_changed.clone()]).flatten().map(Text::from).collect();
    let regressed = report.and_then(|r| {
        let mut regressed: Vec<&Change> = r.changes.iter().filter(|c| c.verdict == Verdict::Regressed).collect();
        regressed.sort_by(|a, b| b.ratio.total_cmp(&a.ratio));
        (!regressed.is_empty()).then(|| TopRegressions {
            count: regressed.len(),
            rows: regressed
                .iter()
                .take(10)
                .map(|c| TopRegression {
                    anchor: anchor(&c.case_id),
                    case_id: c.case_id.as_str().into(),
                    mode: c.mode.as_str().into(),
                    baseline_ms: ms(Some(c.baseline_s)),
                    now_ms: ms(Some(c.current_s)),
                    ratio: c.ratio_text().into(),
                })
                .collect(),
            more: regressed.len().checked_sub(10).filter(|n| *n > 0),
        })
    });
    VerdictView { class, headline: headline.into(), statuses, comparison, warnings, regressed }
}

/// The gate's findings, one line per cause, then the notes; without a baseline, the run's broken
/// cases. Skipped cases follow.
pub(super) struct FindingsView {
    pub body: FindingsBody,
    pub skipped: Option<SkippedView>,
}

pub(super) enum FindingsBody {
    /// Against a baseline, nothing found; `speed_judged`: every timing was judged, so nothing
    /// regressed can be said too.
    Clear {
        speed_judged: bool,
    },
    /// Without a baseline, every case that ran passed.
    ClearOnItsOwn,
    Lines(Vec<FindingLine>),
}

/// One cause: its kind, a line saying it, and where it spans several cases, the first eight
/// linked and how many more.
pub(super) struct FindingLine {
    /// `bad`, `warn` or `note`.
    pub class: &'static str,
    pub kind: Text,
    pub summary: Text,
    pub cases: Vec<CaseLink>,
    pub more: Option<usize>,
}

pub(super) struct CaseLink {
    pub anchor: String,
    pub case_id: Text,
}

/// Skipped cases, one line per tool and reason.
pub(super) struct SkippedView {
    pub cases: usize,
    pub reasons: Vec<SkipReason>,
}

pub(super) struct SkipReason {
    pub tool: Text,
    pub why: Text,
    pub cases: usize,
    /// The first six cases, named without their tool.
    pub shown: Vec<Text>,
    pub more: Option<usize>,
}

impl SkippedView {
    pub(super) fn reason_count(&self) -> usize {
        self.reasons.len()
    }
}

fn finding_line(class: &'static str, kind: &str, summary: &str, cases: &[String]) -> FindingLine {
    let listed = cases.len() > 1;
    FindingLine {
        class,
        kind: kind.into(),
        summary: summary.into(),
        cases: if listed {
            cases.iter().take(8).map(|c| CaseLink { anchor: anchor(c), case_id: c.as_str().into() }).collect()
        } else {
            Vec::new()
        },
        more: (listed && cases.len() > 8).then(|| cases.len() - 8),
    }
}

pub(super) fn findings(rows: &[ResultRow], report: Option<&GateReport>) -> FindingsView {
    let body = match report {
        Some(r) => {
            let (groups, notes) = (r.groups(false), r.groups(true));
            if groups.is_empty() && notes.is_empty() {
                FindingsBody::Clear { speed_judged: r.count(Verdict::NotJudged) == 0 }
            } else {
                let mut lines: Vec<FindingLine> = groups
                    .iter()
                    .filter(|g| g.kind != "slower")
                    .map(|g| finding_line("bad", g.kind, &g.summary, &g.cases))
                    .collect();
                // Regressions have their own tables (the verdict's, the table of changes).
                let slower = groups.iter().filter(|g| g.kind == "slower").map(|g| g.cases.len()).sum::<usize>();
                if slower > 0 {
                    let summary = format!(
                        "{slower} timing(s) regressed: the largest in the verdict above, each with its interval in the table of changes"
                    );
                    lines.push(finding_line("warn", "slower", &summary, &[]));
                }
                lines.extend(
                    notes.iter().map(|g| finding_line("note", &format!("note: {}", g.kind), &g.summary, &g.cases)),
                );
                FindingsBody::Lines(lines)
            }
        }
        None => {
            let broken: Vec<&ResultRow> =
                rows.iter().filter(|r| matches!(r.status, Status::Failed | Status::Error | Status::Timeout)).collect();
            if broken.is_empty() {
                FindingsBody::ClearOnItsOwn
            } else {
                FindingsBody::Lines(
                    broken.iter().map(|r| finding_line("bad", r.status.name(), &broken_case(r), &[])).collect(),
                )
            }
        }
    };
    FindingsView { body, skipped: skipped(rows) }
}

/// A broken case in one line: its id, its message and its failed checks.
fn broken_case(r: &ResultRow) -> String {
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
    format!("{}: {why}", r.case_id)
}

/// One line per tool and reason: a tool that could not start is said once, with the cases it
/// took with it.
fn skipped(rows: &[ResultRow]) -> Option<SkippedView> {
    let skipped: Vec<&ResultRow> = rows.iter().filter(|r| r.status == Status::Skipped).collect();
    if skipped.is_empty() {
        return None;
    }
    let mut reasons: Vec<((&str, &str), Vec<String>)> = Vec::new();
    for r in &skipped {
        let key = (r.backend.as_str(), r.message.as_deref().unwrap_or("skipped"));
        match reasons.iter_mut().find(|(k, _)| *k == key) {
            Some((_, cases)) => cases.push(case_without_tool(r)),
            None => reasons.push((key, vec![case_without_tool(r)])),
        }
    }
    let reasons = reasons
        .into_iter()
        .map(|((tool, why), cases)| SkipReason {
            tool: tool.into(),
            why: why.into(),
            cases: cases.len(),
            shown: cases.iter().take(6).map(|c| c.as_str().into()).collect(),
            more: (cases.len() > 6).then(|| cases.len() - 6),
        })
        .collect();
    Some(SkippedView { cases: skipped.len(), reasons })
}

/// A case without its tool: workload and parameters, dtype and rule (rows of the same case by
/// different tools share it).
fn case_without_tool(r: &ResultRow) -> String {
    let p: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    named_case(&r.workload, &p, &r.dtype, &r.rule)
}

/// `workload[params] dtype rule`, leaving out what says nothing: no brackets without
/// parameters, no rule for a workload that has none (`-`): `lstm f64`, not `lstm[] f64 -`.
pub(super) fn named_case(workload: &str, params: &[String], dtype: &str, rule: &str) -> String {
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

/// Every case that ran: per mode, the median now, its spread, and the change against the
/// baseline; regressions first.
pub(super) struct ChangesView {
    pub cases: usize,
    /// The most common sample count (a cell says its own where it differs).
    pub usual_samples: usize,
    /// The parameters the labels leave out, per workload (`hist-add: n=1000000`).
    pub fixed: Option<Text>,
    /// Whether the run has histograms: then a roofline column.
    pub histograms: bool,
    pub rows: Vec<ChangeRow>,
}

pub(super) struct ChangeRow {
    pub anchor: String,
    pub label: Text,
    pub tool: Text,
    /// Per mode of [`MODES`].
    pub modes: [ModeCells; 3],
    /// The roofline cell, where the table has the column.
    pub roofline: Option<Text>,
    pub status_class: &'static str,
    pub status: Text,
}

/// A mode's median with its spread (none: not timed), and its change (none: not compared).
pub(super) struct ModeCells {
    pub time: Option<TimeCell>,
    pub change: Option<ChangeCell>,
}

pub(super) struct TimeCell {
    pub median_ms: String,
    pub spread: Text,
}

pub(super) struct ChangeCell {
    /// `bad`, `better`, `nj` or empty.
    pub class: &'static str,
    pub verdict: &'static str,
    pub why: Text,
    /// The ratio with its interval.
    pub text: Text,
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

fn change_cell(c: &Change) -> ChangeCell {
    let class = match c.verdict {
        Verdict::Regressed => "bad",
        Verdict::Improved => "better",
        Verdict::NoChange => "",
        Verdict::NotJudged => "nj",
    };
    let text = match c.ci {
        Some((lo, hi)) => format!("{}x [{}, {}]", charts::tick(c.ratio), charts::tick(lo), charts::tick(hi)),
        None => format!("{}x", charts::tick(c.ratio)),
    };
    ChangeCell { class, verdict: c.verdict.name(), why: c.why.as_str().into(), text: text.into() }
}

/// Cases with a verdict first (worst verdict, then largest ratio), then the rest in run order.
/// Where the run has histograms, each histogram primal's achieved bandwidth and its fraction of
/// the run's measured roofline.
pub(super) fn changes(rows: &[ResultRow], report: Option<&GateReport>, roof: Option<&Roofline>) -> ChangesView {
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
    sorted.sort_by(|a, b| match (worst(a), worst(b)) {
        (Some(x), Some(y)) => x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let histograms = sorted.iter().any(|r| roofline::is_histogram(r));
    let rows = sorted
        .iter()
        .map(|r| {
            let timings = [&r.primal, &r.vjp, &r.jvp];
            let modes = std::array::from_fn(|i| ModeCells {
                time: timings[i]
                    .as_ref()
                    .map(|t| TimeCell { median_ms: ms(Some(t.median_s)), spread: spread(t, usual).into() }),
                change: by_case.get(&(r.case_id.as_str(), MODES[i])).map(|c| change_cell(c)),
            });
            let roofline = histograms.then(|| match roofline::achieved_gb_s(r) {
                Some(_) => roofline::cell(r, roof).replace(" -", " –").into(),
                None => "–".into(),
            });
            let message = r.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default();
            ChangeRow {
                anchor: anchor(&r.case_id),
                label: case_label(r, &fixed).into(),
                tool: r.backend.as_str().into(),
                modes,
                roofline,
                status_class: status_class(r.status),
                status: format!("{}{message}", r.status.name()).into(),
            }
        })
        .collect();
    ChangesView { cases: sorted.len(), usual_samples: usual, fixed: fixed_text(&fixed), histograms, rows }
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

/// Which parameters the labels leave out, workloads with the same ones together:
/// `hist-add, hist-mul: n=100000 oob=0.05`; none where no label leaves any out.
fn fixed_text(fixed: &Fixed) -> Option<Text> {
    let mut by_set: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (w, params) in fixed {
        let set: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        by_set.entry(set.join(" ")).or_default().push(w);
    }
    if by_set.is_empty() {
        return None;
    }
    let parts: Vec<String> = by_set.iter().map(|(set, ws)| format!("{}: {set}", ws.join(", "))).collect();
    Some(parts.join("; ").into())
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

/// AD overhead and memory as workload × rule grids, one per mode and measure.
pub(super) struct OverheadsView {
    pub grids: Vec<OverheadGrid>,
}

pub(super) struct OverheadGrid {
    pub title: &'static str,
    pub rules: Vec<Text>,
    pub rows: Vec<OverheadRow>,
}

pub(super) struct OverheadRow {
    pub workload: Text,
    pub tool: Text,
    /// Per rule: the group's cell, none where the group has no such case.
    pub cells: Vec<Option<HeatCell>>,
}

/// A geometric mean shaded by its size.
pub(super) struct HeatCell {
    /// `#rrggbb`.
    pub colour: String,
    pub cases: usize,
    pub value: String,
    /// `*` for a failed check in the group, `~` for a noisy timing under a time ratio.
    pub marks: &'static str,
}

/// A heat colour for a ratio: white at 1x, deeper red up to 8x and beyond, green below 1x.
pub(super) fn heat(x: f64) -> String {
    let t = (x.max(1e-300).log2() / 3.0).clamp(-1.0, 1.0);
    let (r, g, b) = if t >= 0.0 {
        (255.0, 255.0 - 150.0 * t, 255.0 - 170.0 * t)
    } else {
        (255.0 + 110.0 * t, 255.0 + 20.0 * t, 255.0 + 110.0 * t)
    };
    format!("#{:02x}{:02x}{:02x}", r as u8, g as u8, b as u8)
}

/// Each cell the geometric mean over the group's cases of derivative / primal (time or peak
/// memory) on the same tool in the same run; grids without any such ratio are left out.
pub(super) fn overheads(rows: &[ResultRow]) -> OverheadsView {
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
    // Samples spread over more than ±25% of their median.
    let noisy =
        |t: &Option<Timing>| t.as_ref().is_some_and(|t| t.median_s > 0.0 && (t.max_s - t.min_s) / t.median_s > 0.5);
    let grids = grids
        .into_iter()
        .filter(|(_, pick, _)| ran.iter().any(|r| pick(r).is_some_and(|x| x.is_finite() && x > 0.0)))
        .map(|(title, pick, timings)| OverheadGrid {
            title,
            rules: rules.iter().map(|r| Text::from(*r)).collect(),
            rows: groups
                .iter()
                .map(|(w, tool)| OverheadRow {
                    workload: (*w).into(),
                    tool: (*tool).into(),
                    cells: rules
                        .iter()
                        .map(|rule| {
                            let cases: Vec<&&ResultRow> = ran
                                .iter()
                                .filter(|r| r.workload == *w && r.backend == *tool && r.rule == *rule)
                                .collect();
                            let values: Vec<f64> = cases.iter().filter_map(|r| pick(r)).collect();
                            geo_mean(&values).map(|m| {
                                let failed = cases.iter().any(|r| r.status == Status::Failed);
                                let shaky =
                                    timings.is_some_and(|ts| cases.iter().any(|r| ts(r).into_iter().any(noisy)));
                                HeatCell {
                                    colour: heat(m),
                                    cases: values.len(),
                                    value: charts::tick(m),
                                    marks: match (failed, shaky) {
                                        (true, true) => "*~",
                                        (true, false) => "*",
                                        (false, true) => "~",
                                        (false, false) => "",
                                    },
                                }
                            })
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    OverheadsView { grids }
}

/// Workload × tool: per cell, for primal, vjp and jvp, how many of the cases' modes passed.
pub(super) struct StatusGridView {
    pub tools: Vec<Text>,
    pub rows: Vec<StatusGridRow>,
}

pub(super) struct StatusGridRow {
    pub workload: Text,
    /// Per tool: its three modes' tallies, none where the tool ran no case of the workload.
    pub cells: Vec<Option<[ModeTally; 3]>>,
}

/// A mode's tally over a workload's cases on a tool.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ModeTally {
    /// `ok`, `bad` or `skip`.
    pub class: &'static str,
    /// `✓`, `✗`, `s` (skipped) or `–` (not run).
    pub mark: &'static str,
    pub passed: usize,
    pub cases: usize,
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
            let names_mode = |name: &str| MODES.iter().any(|m| name.contains(m));
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

fn mode_tally(rows: &[&ResultRow], mode: &str) -> ModeTally {
    let states: Vec<ModeState> = rows.iter().map(|r| mode_state(r, mode)).collect();
    let passed = states.iter().filter(|s| **s == ModeState::Ok).count();
    let worst = states.iter().copied().max().unwrap_or(ModeState::NotRun);
    let (class, mark) = match worst {
        ModeState::Failed => ("bad", "✗"),
        ModeState::Skipped if passed == 0 => ("skip", "s"),
        ModeState::NotRun if passed == 0 => ("skip", "–"),
        _ => ("ok", "✓"),
    };
    ModeTally { class, mark, passed, cases: states.len() }
}

pub(super) fn status_grid(rows: &[ResultRow], workloads: &BTreeSet<&str>) -> StatusGridView {
    let tools: BTreeSet<&str> = rows.iter().map(|r| r.backend.as_str()).collect();
    StatusGridView {
        tools: tools.iter().map(|t| Text::from(*t)).collect(),
        rows: workloads
            .iter()
            .map(|w| StatusGridRow {
                workload: (*w).into(),
                cells: tools
                    .iter()
                    .map(|t| {
                        let mine: Vec<&ResultRow> =
                            rows.iter().filter(|r| r.workload == *w && r.backend == *t).collect();
                        (!mine.is_empty()).then(|| MODES.map(|m| mode_tally(&mine, m)))
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Where several tools ran the same case: each tool's times relative to adgauge's CPU engine,
/// its overheads and its finding.
pub(super) struct ToolsView {
    /// Empty: every case ran on one tool only.
    pub cases: Vec<ToolsCase>,
}

pub(super) struct ToolsCase {
    /// The case without its tool.
    pub case: Text,
    pub tools: Vec<ToolRow>,
}

pub(super) struct ToolRow {
    pub tool: Text,
    /// Per mode: the median in ms, and its ratio to the CPU engine's in brackets.
    pub times: [String; 3],
    pub vjp_overhead: String,
    pub jvp_overhead: String,
    /// `ok`, `bad` or `skip`.
    pub class: &'static str,
    pub finding: Text,
}

pub(super) fn tools_compared(rows: &[ResultRow]) -> ToolsView {
    let mut groups: Vec<(String, Vec<&ResultRow>)> = Vec::new();
    for r in rows {
        let key = case_without_tool(r);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups.retain(|(_, g)| g.iter().map(|r| &r.backend).collect::<BTreeSet<_>>().len() > 1);
    let median = |r: Option<&ResultRow>, mode: usize| {
        let r = r?;
        [&r.primal, &r.vjp, &r.jvp][mode].as_ref().map(|t| t.median_s)
    };
    let cases = groups
        .into_iter()
        .map(|(case, g)| {
            let reference = g.iter().find(|r| r.backend == "cpu").copied();
            let tools = g
                .iter()
                .map(|r| {
                    let time = |mode: usize| match (median(Some(r), mode), median(reference, mode)) {
                        (Some(t), Some(b)) if b > 0.0 && r.backend != "cpu" => {
                            format!("{} ({}x)", charts::tick(t * 1e3), charts::tick(t / b))
                        }
                        (t, _) => ms(t),
                    };
                    let (class, finding) = tool_finding(r);
                    ToolRow {
                        tool: r.backend.as_str().into(),
                        times: [time(0), time(1), time(2)],
                        vjp_overhead: ratio(r.vjp_overhead()),
                        jvp_overhead: ratio(r.jvp_overhead()),
                        class,
                        finding: finding.into(),
                    }
                })
                .collect();
            ToolsCase { case: case.into(), tools }
        })
        .collect();
    ToolsView { cases }
}

/// A tool's finding on a case, as docs/protocol.md names them (wrong, convention, unsupported),
/// with its message.
fn tool_finding(r: &ResultRow) -> (&'static str, String) {
    let message = r.message.as_deref().unwrap_or("");
    match r.status {
        Status::Ok if message.contains(": convention:") => ("ok", format!("convention — {message}")),
        Status::Ok if message.is_empty() => ("ok", "ok".to_string()),
        Status::Ok => ("ok", format!("ok — {message}")),
        Status::Failed => ("bad", format!("wrong — {message}")),
        Status::Skipped if message.starts_with("unsupported") => ("skip", format!("unsupported — {message}")),
        s => (status_class(s), format!("{} — {message}", s.name())),
    }
}

/// Charts side by side, each with its legend.
pub(super) struct ChartsView {
    pub charts: Vec<ChartView>,
}

pub(super) struct ChartView {
    pub chart: Chart,
    /// The legend's markup (`crate::charts::legend`, its text escaped there).
    pub legend: String,
    /// Where there are more series than colours: the series and the colours.
    pub colours_repeat: Option<(usize, usize)>,
}

/// A chart drawn (inline SVG from `crate::charts`), or why it could not be.
pub(super) enum Chart {
    Svg(String),
    Note(Text),
}

fn chart_view(chart: Result<String, String>, series: &[Series]) -> ChartView {
    let entries: Vec<(String, usize, bool)> =
        series.iter().enumerate().map(|(i, s)| (s.name.clone(), i, false)).collect();
    ChartView {
        chart: match chart {
            Ok(svg) => Chart::Svg(svg),
            Err(why) => Chart::Note(why.into()),
        },
        legend: charts::legend(&entries),
        colours_repeat: (series.len() > charts::DISTINCT_SERIES).then_some((series.len(), charts::DISTINCT_SERIES)),
    }
}

/// The runs as a trend chart labels them: date and time (month-day hour:minute, UTC) and short
/// commit; runs of one day and commit are told apart by their time, and runs of one minute by
/// their seconds.
pub(super) fn run_labels(runs: &[&RunInfo]) -> Vec<String> {
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

/// Over the history's runs, per workload and tool: the geometric mean of the vjp overhead, and
/// of the primal median, over the workload's cases that ran (every rule; the newest run's
/// workloads and tools), against each run's date and commit.
pub(super) fn trends(history: &[(RunInfo, Vec<ResultRow>)], workloads: &BTreeSet<&str>) -> ChartsView {
    let labels = run_labels(&history.iter().map(|(i, _)| i).collect::<Vec<_>>());
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
    let charts = metrics
        .into_iter()
        .map(|(title, y_label, pick, is_time)| {
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
            chart_view(charts::trend(title, &y_label, &series, &labels, is_time), &series)
        })
        .collect();
    ChartsView { charts }
}

/// Per workload whose cases vary a size (n or k): the vjp median against it.
pub(super) struct ScalingView {
    /// The parameters the legends leave out, as in the table of changes.
    pub fixed: Option<Text>,
    /// Empty: no workload varies a size.
    pub charts: Vec<ChartView>,
}

/// The parameter that varies within a group of rows (n or k), if any.
fn varying(rows: &[&ResultRow]) -> Option<&'static str> {
    ["k", "n"].into_iter().find(|p| rows.iter().filter_map(|r| r.params.get(*p)).collect::<BTreeSet<_>>().len() > 1)
}

/// Log-log, one line per tool, dtype, rule and other varying parameters.
pub(super) fn scaling(rows: &[ResultRow], workloads: &BTreeSet<&str>) -> ScalingView {
    let fixed = fixed_params(rows);
    let mut charts = Vec::new();
    for w in workloads {
        let mine: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == *w).collect();
        let Some(p) = varying(&mine) else { continue };
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
        charts.push(chart_view(chart, &series));
    }
    ScalingView { fixed: fixed_text(&fixed), charts }
}

/// The run's environment, next to the baseline's newest run where there is one.
pub(super) enum EnvironmentView {
    Alone(Vec<(&'static str, Text)>),
    Compared(Vec<EnvironmentDiff>),
}

pub(super) struct EnvironmentDiff {
    pub field: &'static str,
    pub now: Text,
    pub baseline: Text,
    pub differs: bool,
}

/// The fields of a run's environment, and the hosts that measured its rows (CPU, cores,
/// compiler, target features).
fn environment_fields(info: &RunInfo, rows: &[ResultRow]) -> Vec<(&'static str, String)> {
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

pub(super) fn environment(info: &RunInfo, rows: &[ResultRow], baseline: Option<&Baseline>) -> EnvironmentView {
    let now = environment_fields(info, rows);
    match baseline.and_then(|b| b.runs.last().map(|i| (b, i))) {
        Some((b, binfo)) => EnvironmentView::Compared(
            now.into_iter()
                .zip(environment_fields(binfo, &b.rows))
                .map(|((field, v), (_, old))| EnvironmentDiff {
                    field,
                    differs: v != old,
                    now: v.into(),
                    baseline: old.into(),
                })
                .collect(),
        ),
        None => EnvironmentView::Alone(now.into_iter().map(|(k, v)| (k, v.into())).collect()),
    }
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

/// Every measured case's peak memory per mode (MB) and the derivatives' ratios to the primal.
pub(super) struct MemoryView {
    pub rows: Vec<MemoryRow>,
}

pub(super) struct MemoryRow {
    pub label: Text,
    pub tool: Text,
    /// Per mode: MB, – where not measured.
    pub mb: [String; 3],
    pub vjp_ratio: String,
    pub jvp_ratio: String,
}

impl MemoryView {
    pub(super) fn cases(&self) -> usize {
        self.rows.len()
    }
}

pub(super) fn memory(rows: &[ResultRow]) -> MemoryView {
    let fixed = fixed_params(rows);
    let mb = |b: Option<u64>| b.map(|b| charts::tick(b as f64 / 1e6)).unwrap_or_else(|| "–".into());
    MemoryView {
        rows: rows
            .iter()
            .filter(|r| r.primal_peak_bytes.is_some() || r.vjp_peak_bytes.is_some() || r.jvp_peak_bytes.is_some())
            .map(|r| MemoryRow {
                label: case_label(r, &fixed).into(),
                tool: r.backend.as_str().into(),
                mb: [mb(r.primal_peak_bytes), mb(r.vjp_peak_bytes), mb(r.jvp_peak_bytes)],
                vjp_ratio: ratio(r.vjp_memory_ratio()),
                jvp_ratio: ratio(r.jvp_memory_ratio()),
            })
            .collect(),
    }
}

/// Every check of the run, failed ones first.
pub(super) struct ValidationView {
    pub total: usize,
    pub failed: usize,
    pub rows: Vec<CheckRow>,
}

pub(super) struct CheckRow {
    pub anchor: String,
    pub case_id: Text,
    pub check: Text,
    pub worst: String,
    pub tolerance: String,
    pub passed: bool,
}

impl CheckRow {
    /// The result's class and word.
    pub(super) fn result(&self) -> (&'static str, &'static str) {
        if self.passed { ("ok", "pass") } else { ("bad", "FAIL") }
    }
}

pub(super) fn validation(rows: &[ResultRow]) -> ValidationView {
    let mut checks: Vec<(&ResultRow, &crate::schema::Check)> =
        rows.iter().flat_map(|r| r.checks.iter().map(move |c| (r, c))).collect();
    checks.sort_by_key(|(_, c)| c.passed);
    ValidationView {
        total: checks.len(),
        failed: checks.iter().filter(|(_, c)| !c.passed).count(),
        rows: checks
            .iter()
            .map(|(r, c)| CheckRow {
                anchor: anchor(&r.case_id),
                case_id: r.case_id.as_str().into(),
                check: c.name.as_str().into(),
                worst: format!("{:.2e}", c.worst),
                tolerance: format!("{:.0e}", c.tolerance),
                passed: c.passed,
            })
            .collect(),
    }
}

/// The paired comparison (`adgauge compare`): the baseline and the candidate timed interleaved
/// in one job; one row per case and mode, regressions first.
pub(super) struct PairedView {
    pub candidate: Text,
    pub baseline: Text,
    pub timestamp: Text,
    pub suite: Text,
    pub cpu_model: Text,
    pub machine: Text,
    /// The load average at the start and the end, two decimals; `?` where not known.
    pub load_start: String,
    pub load_end: String,
    pub regressed: usize,
    pub improved: usize,
    pub no_change: usize,
    pub not_judged: usize,
    pub timings: usize,
    pub confidence_pct: String,
    pub max_slowdown: String,
    pub alpha: String,
    /// False: interrupted, the rows are the cases it finished.
    pub complete: bool,
    pub rows: Vec<PairedRowView>,
}

pub(super) struct PairedRowView {
    /// `bad` for regressed, `better` for improved.
    pub class: Option<&'static str>,
    pub case_id: Text,
    pub mode: Text,
    pub baseline_ms: String,
    pub candidate_ms: String,
    pub change: String,
    pub interval: String,
    pub pairs: usize,
    pub why: Text,
    pub verdict: Text,
}

pub(super) fn paired_view((header, rows): &Paired) -> PairedView {
    let count = |v: &str| rows.iter().filter(|r| r.verdict == v).count();
    let rank = |v: &str| match v {
        "regressed" => 0,
        "not judged" => 1,
        "improved" => 2,
        _ => 3,
    };
    let mut sorted: Vec<&crate::paired::PairedRow> = rows.iter().collect();
    sorted.sort_by_key(|r| rank(&r.verdict));
    let ms = |x: Option<f64>| x.map_or("–".to_string(), |s| format!("{:.4}", s * 1e3));
    let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    PairedView {
        candidate: header.candidate.as_str().into(),
        baseline: header.baseline.as_str().into(),
        timestamp: header.timestamp.as_str().into(),
        suite: header.suite.as_str().into(),
        cpu_model: header.cpu_model.as_str().into(),
        machine: header.machine.as_str().into(),
        load_start: load(header.load_start),
        load_end: load(header.load_end),
        regressed: count("regressed"),
        improved: count("improved"),
        no_change: count("no change"),
        not_judged: count("not judged"),
        timings: rows.len(),
        confidence_pct: format!("{:.0}", header.confidence * 100.0),
        max_slowdown: header.max_slowdown.to_string(),
        alpha: header.alpha.to_string(),
        complete: header.complete,
        rows: sorted
            .into_iter()
            .map(|r| PairedRowView {
                class: match r.verdict.as_str() {
                    "regressed" => Some("bad"),
                    "improved" => Some("better"),
                    _ => None,
                },
                case_id: r.case_id.as_str().into(),
                mode: r.mode.as_str().into(),
                baseline_ms: ms(r.baseline_s),
                candidate_ms: ms(r.candidate_s),
                change: r.ratio.map_or("–".into(), |x| format!("{x:.3}x")),
                interval: match (r.ci_low, r.ci_high) {
                    (Some(lo), Some(hi)) => format!("[{lo:.3}, {hi:.3}]"),
                    _ => "–".into(),
                },
                pairs: r.pairs,
                why: r.why.as_str().into(),
                verdict: r.verdict.as_str().into(),
            })
            .collect(),
    }
}

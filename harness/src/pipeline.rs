//! The one case pipeline, for every workload and every tool: validate at the validation size
//! (with the suite's tolerance overrides) → time each mode at the case's size (warm-up, batching,
//! the time budget) → peak memory per mode → one result row. The per-case time limit is checked
//! between phases and modes (a case past it ends with status `timeout`); errors become `error`
//! rows, unsupported combinations `skipped` rows, and panics are caught and reported the same
//! way everywhere, so one failing case never ends a run.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use adgauge_backends::{DType, OpError};
use adgauge_reports::{Check, ResultRow, Status, Timing};
use adgauge_workloads::{CheckSettings, Mode, ParamKind, Params, Workload, WorkloadError};

use crate::timing::Budget;
use crate::tool::Tool;
use crate::tools::Tools;
use crate::validation::{self, CheckKind, Outcome};

/// One case: a workload's parameters, evaluated by one tool in one dtype (and rule).
#[derive(Clone)]
pub struct Case {
    pub workload: &'static dyn Workload,
    /// The workload name of the row (`hist-add`, `kmeans`, ...).
    pub name: String,
    pub params: Params,
    /// The reverse-mode rule ("-" for workloads without rules).
    pub rule: String,
    pub dtype: DType,
    pub tool: String,
    /// The modes to time.
    pub modes: Vec<Mode>,
    pub validate: bool,
    pub seed: u64,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id())
    }
}

impl PartialEq for Case {
    fn eq(&self, other: &Case) -> bool {
        self.id() == other.id()
            && self.modes == other.modes
            && self.validate == other.validate
            && self.seed == other.seed
    }
}

impl Case {
    /// The parameters as result-row columns (the schema says which key goes to which column).
    pub fn row_params(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for spec in self.workload.schema() {
            let columns: Vec<(&str, &str)> = match (&spec.kind, spec.column) {
                (ParamKind::Tuples { names, .. }, _) => names.iter().map(|n| (*n, *n)).collect(),
                (_, Some(column)) => vec![(spec.key, column)],
                (_, None) => Vec::new(),
            };
            for (key, column) in columns {
                if let Some(v) = self.params.0.get(key) {
                    out.insert(column.to_string(), v.to_string());
                }
            }
        }
        out
    }

    /// The stable case id.
    pub fn id(&self) -> String {
        adgauge_reports::case_id(&self.name, &self.row_params(), &self.tool, self.dtype.name(), &self.rule)
    }

    /// The id of the first case that repeats an earlier one's, if any: two cases with one id
    /// would write one result row and be compared against each other's history.
    pub fn first_duplicate(cases: &[Case]) -> Option<String> {
        let mut seen = std::collections::BTreeSet::new();
        cases.iter().map(Case::id).find(|id| !seen.insert(id.clone()))
    }

    /// A row with the case's identity and nothing measured.
    pub fn empty_row(&self, threads: usize) -> ResultRow {
        ResultRow::unmeasured(
            &self.name,
            self.row_params(),
            &self.tool,
            self.dtype.name(),
            &self.rule,
            threads,
            self.seed,
        )
    }

    pub fn check_settings(&self, s: &Settings, conventions: BTreeMap<String, String>) -> CheckSettings {
        CheckSettings {
            dtype: self.dtype,
            rule: self.rule.clone(),
            seed: self.seed,
            fault: s.fault.clone(),
            conventions,
            thorough: s.thorough,
        }
    }
}

/// What to do with each case (a suite's settings).
#[derive(Clone, Debug)]
pub struct Settings {
    pub time: bool,
    pub budget: Budget,
    /// Per-case time limit.
    pub case_limit: Duration,
    /// Tolerance overrides: (check, dtype) -> tolerance.
    pub tolerances: BTreeMap<(CheckKind, DType), f64>,
    /// Fault injection (tests of the validator), e.g. `drop-dest-adjoint`.
    pub fault: Option<String>,
    /// `check --thorough` (see `CheckSettings::thorough`).
    pub thorough: bool,
}

/// Fault injection for testing crash isolation: a case whose id contains the value of this
/// variable aborts the process, as a driver segfault would.
pub const CRASH_ENV: &str = "ADGAUGE_INJECT_CRASH";

/// Whether an error says the combination is not supported (rather than broken).
pub fn is_unsupported(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(c.downcast_ref::<OpError>(), Some(OpError::Unsupported(_)))
            || c.downcast_ref::<WorkloadError>().is_some_and(WorkloadError::is_unsupported)
    })
}

/// Why `tool` cannot run `case` at all (unavailable, or outside its capabilities), if it cannot.
pub fn cannot_run(tool: &dyn Tool, case: &Case) -> Option<String> {
    if let Err(why) = tool.availability() {
        return Some(format!("backend {} unavailable: {why}", tool.name()));
    }
    let caps = tool.capabilities();
    let modes: &[Mode] = if case.modes.is_empty() { &[Mode::Primal] } else { &case.modes };
    modes
        .iter()
        .find_map(|&m| caps.unsupported(case.workload, m, case.dtype))
        .map(|why| format!("unsupported by {}: {why}", tool.name()))
}

/// The checks of `case` on its tool (at validation size), with the tolerance overrides applied.
pub fn validate(tool: &dyn Tool, case: &Case, settings: &Settings) -> anyhow::Result<Vec<Outcome>> {
    let small = case.workload.validation_params(&case.params);
    let problem = case.workload.generate(&small, case.seed)?;
    let conventions = tool.capabilities().conventions;
    let v = tool.validation(case.workload, problem.as_ref(), &case.check_settings(settings, conventions))?;
    let mut outcomes = validation::run_checks(&v, case.dtype, case.seed)?;
    for o in &mut outcomes {
        if let Some(&t) = settings.tolerances.get(&(o.kind, case.dtype)) {
            o.tolerance = t;
        }
    }
    Ok(outcomes)
}

/// Runs one case; never panics.
pub fn run_case(tools: &Tools, case: &Case, settings: &Settings) -> ResultRow {
    if std::env::var(CRASH_ENV).is_ok_and(|pat| !pat.is_empty() && case.id().contains(&pat)) {
        eprintln!("{CRASH_ENV}: aborting in case {}", case.id());
        std::process::abort();
    }
    let Some(tool) = tools.get(&case.tool) else {
        let mut row = case.empty_row(0);
        row.status = Status::Error;
        row.message = Some(format!("unknown tool '{}'", case.tool));
        return row;
    };
    let mut row = case.empty_row(tool.threads());
    if let Some(why) = cannot_run(tool, case) {
        row.status = Status::Skipped;
        row.message = Some(why);
        row.tool_version = Some(tool.version());
        return row;
    }
    let started = Instant::now();
    let compiled_before = tool.compile_time();
    let outcome = catch_unwind(AssertUnwindSafe(|| run_phases(tool, case, settings, started, &mut row)));
    row.compile_s = compiled_before.and_then(|before| Some(tool.compile_time()?.saturating_sub(before).as_secs_f64()));
    // Asked after the phases: an external tool knows its version once it has started.
    row.tool_version = Some(tool.version());
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            // A rule, mode or dtype the tool turns down while running is a skip, not a failure.
            row.status = if is_unsupported(&e) { Status::Skipped } else { Status::Error };
            row.message = Some(format!("{e:#}"));
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            row.status = Status::Error;
            row.message = Some(format!("panicked: {what}"));
        }
    }
    row
}

fn run_phases(
    tool: &dyn Tool,
    case: &Case,
    settings: &Settings,
    started: Instant,
    row: &mut ResultRow,
) -> anyhow::Result<()> {
    let over = |row: &mut ResultRow, phase: &str| {
        if started.elapsed() > settings.case_limit {
            row.status = Status::Timeout;
            row.message = Some(format!("time limit of {:?} reached before {phase}", settings.case_limit));
            true
        } else {
            false
        }
    };
    if case.validate {
        let outcomes = validate(tool, case, settings)?;
        record_checks(row, &outcomes);
        tool.verdict(row.status != Status::Failed, row.message.clone());
    }
    if !settings.time {
        return Ok(());
    }
    if over(row, "timing") {
        return Ok(());
    }
    let problem = case.workload.generate(&case.params, case.seed)?;
    let mut prepared = tool.prepare(case.workload, problem.as_ref(), case.dtype, &case.rule)?;
    row.rule_used = prepared.rule_taken();
    let timed: Vec<Mode> =
        Mode::TIMED.into_iter().filter(|&m| case.modes.contains(&m) && prepared.supports(m)).collect();
    let mut timings: [Option<Timing>; 3] = [None, None, None];
    let mut untimed = Vec::new();
    let mut traces = Vec::new();
    for &mode in &timed {
        if over(row, &format!("timing {mode}")) {
            return Ok(());
        }
        match prepared.timing(mode, &settings.budget) {
            Ok(t) => {
                timings[slot(mode)] = Some(t);
                traces.extend(prepared.trace_note().map(|note| format!("{mode} {note}")));
            }
            // A mode the tool turns down leaves its column empty; the others are still measured.
            Err(e) if is_unsupported(&e) => {
                untimed.push(mode);
                let note = format!("{mode} not timed: {e:#}");
                row.message = Some(row.message.take().map_or(note.clone(), |m| format!("{m}; {note}")));
            }
            Err(e) => return Err(e),
        }
        [row.primal, row.vjp, row.jvp] = timings.clone();
    }
    if !traces.is_empty() {
        let note = traces.join("; ");
        row.message = Some(row.message.take().map_or(note.clone(), |m| format!("{m}; {note}")));
    }
    // A tool's own timings that its exchanges' wall times make implausible fail the row.
    if let Some((check, message)) = prepared.timing_check() {
        if !check.passed {
            row.status = Status::Failed;
            if let Some(m) = message {
                row.message = Some(row.message.take().map_or(m.clone(), |earlier| format!("{earlier}; {m}")));
            }
        }
        row.checks.push(check);
    }
    let mut peaks: [Option<u64>; 3] = [None, None, None];
    for &mode in timed.iter().filter(|m| !untimed.contains(m)) {
        if over(row, &format!("memory {mode}")) {
            return Ok(());
        }
        peaks[slot(mode)] = prepared.peak_bytes(mode)?;
        [row.primal_peak_bytes, row.vjp_peak_bytes, row.jvp_peak_bytes] = peaks;
    }
    Ok(())
}

/// The row column of a timed mode.
fn slot(mode: Mode) -> usize {
    Mode::TIMED.iter().position(|&m| m == mode).unwrap_or(0)
}

/// Adds the outcomes to the row; the first failed check makes the row `failed` with its message.
pub fn record_checks(row: &mut ResultRow, outcomes: &[Outcome]) {
    for o in outcomes {
        row.checks.push(Check {
            name: o.kind.name().into(),
            worst: o.worst,
            tolerance: o.tolerance,
            passed: o.passed(),
        });
    }
    if let Some(bad) = outcomes.iter().find(|o| !o.passed()) {
        row.status = Status::Failed;
        let mut message = format!("{} worst {:.3e} > tolerance {:.1e}", bad.kind.name(), bad.worst, bad.tolerance);
        if !bad.parts.is_empty() {
            message.push_str(&format!(" ({})", bad.parts_text()));
        }
        row.message = Some(message);
    } else {
        let notes: Vec<String> = outcomes
            .iter()
            .filter_map(|o| Some(format!("{}: convention: {}", o.kind.name(), o.convention.as_ref()?)))
            .collect();
        if !notes.is_empty() {
            row.message = Some(notes.join("; "));
        }
    }
}

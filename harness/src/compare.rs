//! `adgauge compare`: a baseline and a candidate timed interleaved, in one job, and judged from
//! the pairs (`adgauge_reports::paired`).
//!
//! Both sides are tools in their own processes, driven over GradBench's protocol
//! (`external.rs`), so that they run under the same conditions: a `bin:PATH` side is another
//! adgauge build serving its engine (`PATH tool --backend DEVICE --dtype DTYPE`, one process per
//! device and dtype of the suite's cases), a `tool:COMMAND` side any tool that speaks the
//! protocol. Each side times its own runs in process and reports them; the exchange's wall time
//! is measured here too, so a tool's timings pass the plausibility rule of `run`
//! (`external::Plausibility`).
//!
//! Per case and mode, pairs of processes (both sides started afresh, in alternating order):
//! two warm-up exchanges of one run each side (the second, with the first block, gives the
//! plausibility of the tool's timings), a calibration of the runs per block from the fastest
//! runs ([`MIN_RUNS_PER_BLOCK`] or more, enough for `--block-ms` on the slower side, fixed by
//! the first pair of processes), then `--pairs` rounds of one block per side, the order of the
//! sides alternating from one round to the next (AB, BA, AB, ...). A block's time is its fastest
//! run; a pair is the two blocks of one round. A timing the pairs leave too noisy to judge gets
//! two more pairs of processes at a time, up to `--max-processes`. The sign test counts pairs of
//! processes, not pairs (`paired` says why), so a change needs at least eight of them. A
//! regression or an improvement is then put to `--confirm-processes` fresh pairs of processes,
//! each of which must lean its way beyond the noise band on its own
//! ([`adgauge_reports::paired::confirmation`]); if one does not, the timing is not judged.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value as Json;

use adgauge_backends::Cpu;
use adgauge_reports::paired::{
    PAIRED_SCHEMA, PairedConfig, PairedHeader, PairedRow, confirmation, judge_grouped_pairs, median, write_paired,
};
use adgauge_reports::verdict::Verdict;
use adgauge_workloads::Mode;

use crate::exit::{Code, bad_input, unavailable};
use crate::external::{DEFAULT_MAX_RESPONSE_BYTES, ExternalSpec, Plausibility, ProcessTool, RemoteCase};
use crate::pipeline::Case;
use crate::sinks::Console;
use crate::tool::Tool;
use crate::tools::Tools;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The baseline: `bin:PATH` (another adgauge build, serving each case's device as `PATH tool`)
    /// or `tool:COMMAND` (any tool speaking GradBench's protocol; f64 cases only).
    #[arg(long)]
    pub baseline: String,
    /// The candidate, written as --baseline (default: this binary, `bin:` its own path).
    #[arg(long)]
    pub candidate: Option<String>,
    /// Suite file (YAML); default: the embedded default suite.
    #[arg(long)]
    pub suite: Option<PathBuf>,
    /// Only cases whose id contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// One JSON object per case and mode instead of the table.
    #[arg(long)]
    pub json: bool,
    /// An environment variable of the baseline's processes, NAME=VALUE (repeatable).
    #[arg(long = "baseline-env", value_parser = parse_env)]
    pub baseline_env: Vec<(String, String)>,
    /// An environment variable of the candidate's processes, NAME=VALUE (repeatable).
    #[arg(long = "candidate-env", value_parser = parse_env)]
    pub candidate_env: Vec<(String, String)>,
    /// Pairs of blocks per pair of processes. The noise is mostly between the pairs of one pair
    /// of processes, not between pairs of processes (docs/gate.md), so more pairs each make
    /// every pair of processes' median, which the sign test counts, surer: with 4, a 1.25x tool
    /// under two busy processes was flagged on 2 of 6 timings, with 12 on every one.
    #[arg(long, default_value_t = 12)]
    pub pairs: usize,
    /// Pairs of processes per timing before the first verdict: each starts both sides afresh,
    /// so that what belongs to one process (its memory layout) is not taken for the code.
    #[arg(long, default_value_t = 4)]
    pub processes: usize,
    /// Most pairs of processes per timing: one too noisy to judge gets two more at a time, up
    /// to this.
    #[arg(long, default_value_t = 10)]
    pub max_processes: usize,
    /// Fresh pairs of processes that must each lean the way of a change before it is reported
    /// (0: report it unconfirmed).
    #[arg(long, default_value_t = 4)]
    pub confirm_processes: usize,
    /// Least time of one block of runs, in ms (on the slower side).
    #[arg(long, default_value_t = 20.0)]
    pub block_ms: f64,
    /// The smallest slowdown that matters (candidate / baseline).
    #[arg(long, default_value_t = 1.10)]
    pub max_slowdown: f64,
    /// Changes within this relative band are noise.
    #[arg(long, default_value_t = 0.02)]
    pub noise_threshold: f64,
    /// Significance level of the sign test.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Confidence level of the bootstrap interval.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Seconds one exchange with a side may take.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_s: f64,
    /// Also write the verdicts into this history directory (`<id>.paired.jsonl`), where
    /// `adgauge report` shows them.
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("'{s}' is not NAME=VALUE"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("'{name}' is not an environment variable name"));
    }
    Ok((name.to_string(), value.to_string()))
}

/// One side of the comparison, as written.
#[derive(Clone, Debug, PartialEq)]
pub enum SideSpec {
    /// Another adgauge build.
    Bin(PathBuf),
    /// A tool's command line.
    Tool(String),
}

impl SideSpec {
    pub fn parse(s: &str, option: &str) -> Result<SideSpec, String> {
        if let Some(path) = s.strip_prefix("bin:") {
            if path.is_empty() {
                return Err(format!("{option}: 'bin:' needs a path"));
            }
            Ok(SideSpec::Bin(PathBuf::from(path)))
        } else if let Some(command) = s.strip_prefix("tool:") {
            if command.trim().is_empty() {
                return Err(format!("{option}: 'tool:' needs a command"));
            }
            Ok(SideSpec::Tool(command.to_string()))
        } else {
            Err(format!("{option}: '{s}' is neither bin:PATH nor tool:COMMAND"))
        }
    }

    fn describe(&self) -> String {
        match self {
            SideSpec::Bin(p) => format!("bin:{}", p.display()),
            SideSpec::Tool(c) => format!("tool:{c}"),
        }
    }
}

/// A word for the shell: single-quoted.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command line of `side` for `case`, or why the side cannot run it.
fn command_for(spec: &SideSpec, env: &[(String, String)], case: &Case) -> Result<String, String> {
    let program = match spec {
        SideSpec::Bin(path) => {
            if !Tools::builtin_names().contains(&case.tool.as_str()) {
                return Err(format!(
                    "its tool {} is not adgauge's engine (compare an external tool with tool:COMMAND)",
                    case.tool
                ));
            }
            format!(
                "exec {} tool --backend {} --dtype {}",
                sh_quote(&path.display().to_string()),
                sh_quote(&case.tool),
                case.dtype.name()
            )
        }
        SideSpec::Tool(command) => {
            if case.dtype.name() != "f64" {
                return Err(format!(
                    "a tool: side computes in f64 (protocol numbers are doubles), the case is {}",
                    case.dtype
                ));
            }
            command.clone()
        }
    };
    if env.is_empty() {
        return Ok(program);
    }
    let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={}", sh_quote(v))).collect();
    Ok(format!("export {}; {program}", vars.join(" ")))
}

/// The extra input fields of a case for an adgauge side: its rule and index dtype where they are
/// not what `adgauge tool` takes without them (only workloads with rules have a rule other than
/// `-`, and only they read the fields: the `hist` module), so that a build that predates the
/// fields still serves the default cases.
fn extra_fields(case: &Case) -> Vec<(&'static str, Json)> {
    let mut extra = Vec::new();
    if case.rule != "auto" && case.rule != "-" {
        extra.push(("rule", Json::String(case.rule.clone())));
    }
    if case.rule != "-" && case.row_params().get("index_dtype").is_some_and(|t| t == "i64") {
        extra.push(("index_dtype", Json::String("i64".into())));
    }
    extra
}

/// A row of `case`'s `mode` with nothing measured, `why` the reason.
fn not_judged(case: &Case, mode: &str, why: String) -> PairedRow {
    PairedRow {
        case_id: case.id(),
        workload: case.name.clone(),
        tool: case.tool.clone(),
        dtype: case.dtype.name().into(),
        rule: case.rule.clone(),
        mode: mode.into(),
        verdict: Verdict::NotJudged.name().into(),
        ratio: None,
        ci_low: None,
        ci_high: None,
        p: None,
        pairs: 0,
        processes: 0,
        runs_per_block: 0,
        baseline_s: None,
        candidate_s: None,
        why,
        baseline_blocks: Vec::new(),
        candidate_blocks: Vec::new(),
        block_process: Vec::new(),
    }
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// Both sides: what they run and how.
struct Sides {
    specs: [SideSpec; 2],
    env: [Vec<(String, String)>; 2],
    timeout: Duration,
    cpu: Cpu,
}

const NAMES: [&str; 2] = ["baseline", "candidate"];

impl Sides {
    /// A fresh process of `side` for `case` (started on first use), or why the side cannot run
    /// the case.
    fn fresh(&self, side: usize, case: &Case) -> Result<ProcessTool, String> {
        let command = command_for(&self.specs[side], &self.env[side], case)?;
        let spec = ExternalSpec {
            name: NAMES[side].into(),
            command,
            timeout: self.timeout,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            in_process: None,
        };
        Ok(ProcessTool::new(spec, self.cpu.clone()))
    }
}

/// The fastest run of one exchange of `runs` runs, its runs and its wall time.
///
/// The fastest, not the median: what a busy machine does to a run only adds time (a preempted
/// worker thread, a cache another process evicted), so the least time of a block is the run
/// that had the machine, the estimator Chen and Revels argue for ("Robust benchmarking in noisy
/// environments", the Julia BenchmarkTools' default). Measured under two busy processes and
/// builds (load 8-11) on this 2-core VM, block medians left 56 of 78 copy-against-copy timings
/// too noisy to judge: with two worker threads per run, most runs of a block wait for one.
fn block(side: &mut RemoteCase, mode: Mode, runs: u64) -> anyhow::Result<(f64, Vec<f64>, Duration)> {
    let (times, wall) = side.runs(mode, runs)?;
    Ok((fastest(&times), times, wall))
}

/// The least of `times` (infinity for none).
fn fastest(times: &[f64]) -> f64 {
    times.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Fewest runs in a block: the fastest of at least this many runs is one the machine left alone
/// on a busy runner. With one run of the planted tool (~20 ms) per block, under two busy
/// processes, 2 of 6 timings of a 1.25x slowdown stayed too noisy after 10 pairs of processes.
pub const MIN_RUNS_PER_BLOCK: u64 = 5;

/// Runs per block for both sides, from calibration exchanges: 5 runs, then enough for
/// `block_s` at the fastest run so far (2 to 16 times the runs before), until an exchange's
/// reported runs add up to `block_s` on both sides, or the exchanges have taken a second.
///
/// Enough runs for `block_s` at the slower side's fastest run, so that a block holds a run the
/// machine left alone; no more than `4 block_s` at its typical run, so that a block of a busy
/// machine, where many runs wait for a core, stays a few tens of ms; at least
/// [`MIN_RUNS_PER_BLOCK`]. The typical run is the median reported run, or the wall time one more
/// run adds to an exchange when that is ten times longer: a tool that reports its dispatch, not
/// its work, would otherwise be given blocks of minutes. Runs sized by one warm-up run left blocks
/// of 2-6 runs whenever that run had waited for a core (46 of 96 copy-against-copy timings too
/// noisy to judge under two busy processes).
fn calibrate(pair: &mut [RemoteCase; 2], order: [usize; 2], mode: Mode, block_s: f64) -> anyhow::Result<u64> {
    let mut all: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    // Each side's first exchange (runs, wall) and the wall time one more run adds after it.
    let mut first: [Option<(u64, f64)>; 2] = [None, None];
    let mut per_run = [0.0f64; 2];
    let mut runs = MIN_RUNS_PER_BLOCK;
    let mut spent = 0.0;
    for _ in 0..8 {
        let mut reported = [0.0f64; 2];
        for i in order {
            let (_, times, wall) = block(&mut pair[i], mode, runs)?;
            let wall = wall.as_secs_f64();
            reported[i] = times.iter().sum();
            all[i].extend(times);
            spent += wall;
            match first[i] {
                None => first[i] = Some((runs, wall)),
                Some((r0, w0)) if runs > r0 => per_run[i] = ((wall - w0) / (runs - r0) as f64).max(0.0),
                Some(_) => {}
            }
        }
        if reported[0].min(reported[1]) >= block_s || spent >= 1.0 {
            break;
        }
        let wanted = (block_s / fastest(&all[0]).max(fastest(&all[1])).max(1e-9)).ceil().min(1e9) as u64;
        runs = wanted.clamp(2 * runs, 16 * runs);
    }
    let fast = fastest(&all[0]).max(fastest(&all[1]));
    // The wall time per run stands for the run only when it is far beyond what was reported:
    // an exchange's own time (the input parsed, a large output printed) varies by milliseconds
    // on a busy machine, and over a few tens of runs that noise reads as a run's time.
    let reported = median(&all[0]).max(median(&all[1]));
    let walled = per_run[0].max(per_run[1]);
    let typical = if walled > 10.0 * reported { walled } else { reported };
    Ok(runs_per_block(block_s, fast, typical))
}

/// [`calibrate`]'s rule, from the slower side's fastest and typical run, in seconds.
fn runs_per_block(block_s: f64, fastest: f64, typical: f64) -> u64 {
    let runs = |budget_s: f64, run_s: f64| {
        if run_s.is_finite() && run_s > 0.0 { (budget_s / run_s).ceil().min(1e9) as u64 } else { MIN_RUNS_PER_BLOCK }
    };
    runs(block_s, fastest).min(runs(4.0 * block_s, typical)).clamp(MIN_RUNS_PER_BLOCK, 100_000)
}

/// Whether a side's timings of `mode` are implausible (the median run far below the wall time
/// the runs account for), confirmed as `run` confirms it: the same pair of exchanges again.
fn implausible(
    side: &mut RemoteCase,
    mode: Mode,
    warm_wall: Duration,
    first: (&[f64], Duration),
    runs: u64,
) -> anyhow::Result<Option<String>> {
    let p = Plausibility::new(mode, warm_wall, first.1, first.0);
    if !p.implausible() {
        return Ok(None);
    }
    let (_, _, warm) = block(side, mode, 1)?;
    let (_, times, wall) = block(side, mode, runs)?;
    let second = Plausibility::new(mode, warm, wall, &times);
    Ok(p.confirmed_by(&second).then(|| p.finding()))
}

struct Settings {
    cfg: PairedConfig,
    /// Pairs of processes per timing before the first verdict.
    epochs: usize,
    /// Most pairs of processes per timing before a verdict.
    max_epochs: usize,
    /// Fresh pairs of processes that must confirm a change.
    confirm: usize,
    /// Pairs of blocks per pair of processes.
    pairs: usize,
    block_s: f64,
}

/// What one mode has gathered so far.
struct Gathered {
    /// Runs per block, fixed by the first pair of processes.
    runs: Option<u64>,
    times: [Vec<f64>; 2],
    /// The pair of processes of each pair.
    group: Vec<usize>,
}

/// One pair of processes: both sides started fresh (in alternating order), the case put on
/// them, two warm-up exchanges each, then `pairs` rounds of one block each, the order of the
/// sides alternating. `Ok(Some(why))`: the mode cannot be judged (implausible timings, no
/// function for it).
fn epoch(
    case: &Case,
    mode: Mode,
    problem: &dyn adgauge_workloads::Problem,
    sides: &Sides,
    s: &Settings,
    e: usize,
    got: &mut Gathered,
) -> anyhow::Result<Option<String>> {
    let order = if e.is_multiple_of(2) { [0, 1] } else { [1, 0] };
    let extra = extra_fields(case);
    let mut prepared: [Option<RemoteCase>; 2] = [None, None];
    for i in order {
        let tool = sides.fresh(i, case).map_err(|why| anyhow::anyhow!(NotRun(format!("{}: {why}", NAMES[i]))))?;
        tool.availability().map_err(|why| unavailable(format!("{} unavailable: {why}", NAMES[i])))?;
        let extra: &[(&str, Json)] = if matches!(sides.specs[i], SideSpec::Bin(_)) { &extra } else { &[] };
        prepared[i] = Some(tool.prepare_remote(case.workload, problem, extra)?);
    }
    let [Some(a), Some(b)] = prepared else { anyhow::bail!("a side was not prepared") };
    let mut pair = [a, b];
    if !(pair[0].supports(mode) && pair[1].supports(mode)) {
        return Ok(Some(format!("the module has no function for {mode}")));
    }
    let mut warm_wall = [Duration::ZERO; 2];
    for i in order {
        block(&mut pair[i], mode, 1)?;
        let (_, _, wall) = block(&mut pair[i], mode, 1)?;
        warm_wall[i] = wall;
    }
    let runs = match got.runs {
        Some(runs) => runs,
        None => *got.runs.insert(calibrate(&mut pair, order, mode, s.block_s)?),
    };
    for r in 0..s.pairs {
        let order = if (r + e).is_multiple_of(2) { [0, 1] } else { [1, 0] };
        let mut m = [0.0; 2];
        for i in order {
            let (median, all, wall) = block(&mut pair[i], mode, runs)?;
            if e == 0
                && r == 0
                && let Some(why) = implausible(&mut pair[i], mode, warm_wall[i], (&all, wall), runs)?
            {
                return Ok(Some(format!("{}'s {why}", NAMES[i])));
            }
            m[i] = median;
        }
        got.times[0].push(m[0]);
        got.times[1].push(m[1]);
        got.group.push(e);
        if crate::interrupt::signal().is_some() {
            anyhow::bail!("interrupted");
        }
    }
    Ok(None)
}

/// A side that cannot run a case at all (not an error of the side).
#[derive(Debug)]
struct NotRun(String);

impl std::fmt::Display for NotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRun {}

/// Compares one mode of one case: pairs of processes until the pairs judge it or the limit.
fn compare_mode(
    case: &Case,
    mode: Mode,
    problem: &dyn adgauge_workloads::Problem,
    sides: &Sides,
    s: &Settings,
) -> anyhow::Result<PairedRow> {
    let mut row = not_judged(case, mode.name(), String::new());
    let mut got = Gathered { runs: None, times: [Vec::new(), Vec::new()], group: Vec::new() };
    let (mut done, mut target) = (0, s.epochs);
    let mut change = loop {
        while done < target {
            if let Some(why) = epoch(case, mode, problem, sides, s, done, &mut got)? {
                row.why = why;
                return Ok(row);
            }
            done += 1;
        }
        let change = judge_grouped_pairs(&case.id(), mode.name(), &got.times[0], &got.times[1], &got.group, &s.cfg);
        let noisy = change.verdict == Verdict::NotJudged && change.why.starts_with("too noisy");
        if !noisy || target + 2 > s.max_epochs {
            break change;
        }
        target += 2;
    };
    // A change is put to fresh pairs of processes before it is reported (`paired::confirmation`):
    // over a suite of hundreds of timings, the first test alone expects a few false alarms.
    if matches!(change.verdict, Verdict::Regressed | Verdict::Improved) && s.confirm > 0 {
        let first = got.group.len();
        for _ in 0..s.confirm {
            if let Some(why) = epoch(case, mode, problem, sides, s, done, &mut got)? {
                row.why = why;
                return Ok(row);
            }
            done += 1;
        }
        let fresh =
            confirmation(&got.times[0][first..], &got.times[1][first..], &got.group[first..], change.verdict, &s.cfg);
        change.why = match fresh {
            Ok(read) => format!("{}; confirmed: {read}", change.why),
            Err(read) => {
                let before = std::mem::replace(&mut change.verdict, Verdict::NotJudged);
                format!("not confirmed: {read}, where the first pairs read {}: {}", before.name(), change.why)
            }
        };
    }
    let finite = |x: f64| x.is_finite().then_some(x);
    row.verdict = change.verdict.name().into();
    row.ratio = finite(change.ratio);
    row.ci_low = change.ci.map(|c| c.0);
    row.ci_high = change.ci.map(|c| c.1);
    row.p = change.p;
    row.pairs = change.pairs;
    row.processes = done;
    row.runs_per_block = got.runs.unwrap_or(0);
    row.block_process = got.group;
    row.baseline_s = finite(median(&got.times[0]));
    row.candidate_s = finite(median(&got.times[1]));
    row.why = change.why;
    [row.baseline_blocks, row.candidate_blocks] = got.times;
    Ok(row)
}

/// Compares every timed mode of one case; a side that cannot run it, or fails, makes its modes
/// `not judged` with the reason (`true`: a side failed).
fn compare_case(case: &Case, sides: &Sides, s: &Settings) -> (Vec<PairedRow>, bool) {
    let modes: Vec<Mode> = Mode::TIMED.into_iter().filter(|m| case.modes.contains(m)).collect();
    let problem = match case.workload.generate(&case.params, case.seed) {
        Ok(p) => p,
        Err(e) => {
            let why = format!("error: cannot generate the case: {e:#}");
            return (modes.iter().map(|m| not_judged(case, m.name(), why.clone())).collect(), true);
        }
    };
    let mut rows = Vec::new();
    let mut failed = false;
    for &mode in &modes {
        match compare_mode(case, mode, problem.as_ref(), sides, s) {
            Ok(row) => rows.push(row),
            Err(e) => {
                let text = format!("{e:#}");
                let why = if let Some(not_run) = e.downcast_ref::<NotRun>() {
                    format!("not run: {not_run}")
                } else if crate::pipeline::is_unsupported(&e) {
                    // A side that says it cannot evaluate the case is a skip, not a failure.
                    format!("unsupported: {text}")
                } else {
                    failed = true;
                    format!("error: {text}")
                };
                rows.push(not_judged(case, mode.name(), why));
            }
        }
    }
    (rows, failed)
}

/// The table's lines.
fn table(rows: &[PairedRow]) -> Vec<String> {
    let width = rows.iter().map(|r| r.case_id.len()).max().unwrap_or(4).clamp(4, 60);
    let mut out = vec![format!(
        "{:<width$}  {:<6}  {:>10}  {:>10}  {:<26}  {:>5}  verdict",
        "case", "mode", "base ms", "cand ms", "change [95% CI]", "pairs"
    )];
    let ms = |x: Option<f64>| x.map_or("-".to_string(), |s| format!("{:.4}", s * 1e3));
    for r in rows {
        let id = if r.case_id.len() > width {
            format!("…{}", &r.case_id[r.case_id.len() - (width - 1)..])
        } else {
            r.case_id.clone()
        };
        let change = match (r.ratio, r.ci_low, r.ci_high) {
            (Some(x), Some(lo), Some(hi)) => format!("{x:.3}x [{lo:.3}, {hi:.3}]"),
            (Some(x), _, _) => format!("{x:.3}x"),
            _ => "-".into(),
        };
        out.push(format!(
            "{id:<width$}  {:<6}  {:>10}  {:>10}  {change:<26}  {:>5}  {}",
            r.mode,
            ms(r.baseline_s),
            ms(r.candidate_s),
            r.pairs,
            r.verdict.to_uppercase()
        ));
    }
    out
}

/// `regressed R, improved I, no change N, not judged J of T timing(s)`, with the reasons of
/// the ones not judged.
pub fn summary(rows: &[PairedRow]) -> String {
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v.name()).count();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.verdict == Verdict::NotJudged.name()) {
        let reason = r.why.split(':').next().unwrap_or("").to_string();
        *reasons.entry(reason).or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let judged = rows.len() - count(Verdict::NotJudged);
    format!(
        "compare: {} regressed, {} improved, {} no change, {} not judged of {} timing(s) ({:.0}% judged){}",
        count(Verdict::Regressed),
        count(Verdict::Improved),
        count(Verdict::NoChange),
        count(Verdict::NotJudged),
        rows.len(),
        if rows.is_empty() { 0.0 } else { 100.0 * judged as f64 / rows.len() as f64 },
        if reasons.is_empty() { String::new() } else { format!(" (not judged: {})", reasons.join(", ")) }
    )
}

pub fn compare(args: &CompareArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let baseline = SideSpec::parse(&args.baseline, "--baseline").map_err(bad_input)?;
    let candidate = match &args.candidate {
        Some(c) => SideSpec::parse(c, "--candidate").map_err(bad_input)?,
        None => SideSpec::Bin(std::env::current_exe().map_err(|e| unavailable(format!("this binary's path: {e}")))?),
    };
    for (spec, option) in [(&baseline, "--baseline"), (&candidate, "--candidate")] {
        if let SideSpec::Bin(path) = spec
            && !path.is_file()
        {
            return Err(unavailable(format!("{option}: {} is not a file", path.display())));
        }
    }
    if !(args.max_slowdown > 1.0 && args.max_slowdown.is_finite()) {
        return Err(bad_input(format!("--max-slowdown {}: must be a number above 1", args.max_slowdown)));
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0 && args.confidence > 0.0 && args.confidence < 1.0) {
        return Err(bad_input("--alpha and --confidence must lie strictly between 0 and 1"));
    }
    if !(args.block_ms > 0.0 && args.block_ms.is_finite() && args.timeout_s > 0.0 && args.timeout_s <= 86_400.0) {
        return Err(bad_input("--block-ms and --timeout-s must be positive (--timeout-s at most a day)"));
    }
    if args.pairs == 0 || args.processes == 0 || args.max_processes < args.processes {
        return Err(bad_input(format!(
            "--pairs {} --processes {} --max-processes {}: need pairs >= 1 and 1 <= processes <= max-processes",
            args.pairs, args.processes, args.max_processes
        )));
    }
    let suite = crate::run::load_suite(&args.suite, &[])?;
    let mut cases = suite.cases.clone();
    if let Some(f) = &args.filter {
        cases.retain(|c| c.id().contains(f.as_str()));
        if cases.is_empty() {
            return Err(bad_input(format!("--filter '{f}' matches no case (see `adgauge run --list`)")));
        }
    }
    let mut notes = Vec::new();
    let tool_sides = [&baseline, &candidate].iter().filter(|s| matches!(s, SideSpec::Tool(_))).count();
    if tool_sides > 0 {
        // A tool: side computes in f64 and takes neither the case's tool nor its rule.
        let before = cases.len();
        cases.retain(|c| c.dtype.name() == "f64");
        if cases.len() < before {
            notes.push(format!(
                "{} case(s) left out: a tool: side computes in f64 (protocol numbers are doubles)",
                before - cases.len()
            ));
        }
        if tool_sides == 2 {
            let mut seen = std::collections::BTreeSet::new();
            let before = cases.len();
            cases.retain(|c| {
                let mut key = c.clone();
                key.tool = "-".into();
                key.rule = "-".into();
                seen.insert(key.id())
            });
            if cases.len() < before {
                notes.push(format!(
                    "{} case(s) left out: they differ only in their tool or rule, which tool: sides do not take",
                    before - cases.len()
                ));
            }
        }
        if cases.is_empty() {
            return Err(bad_input(format!("nothing to compare: {}", notes.join("; "))));
        }
    }
    suite.check_memory(&cases).map_err(bad_input)?;
    let cpu = Cpu::new(threads)?;
    let settings = Settings {
        cfg: PairedConfig {
            max_slowdown: args.max_slowdown,
            noise_threshold: args.noise_threshold,
            alpha: args.alpha,
            confidence: args.confidence,
            ..PairedConfig::default()
        },
        epochs: args.processes,
        max_epochs: args.max_processes,
        confirm: args.confirm_processes,
        pairs: args.pairs,
        block_s: args.block_ms * 1e-3,
    };
    let info = crate::environment::run_info();
    let mut header = PairedHeader {
        schema: PAIRED_SCHEMA.into(),
        id: info.run_id.clone(),
        timestamp: info.timestamp.clone(),
        baseline: baseline.describe(),
        candidate: candidate.describe(),
        suite: suite.name.clone(),
        machine: info.machine.clone(),
        cpu_model: info.cpu_model.clone(),
        cores: info.cores,
        load_start: load_average(),
        load_end: None,
        max_slowdown: args.max_slowdown,
        alpha: args.alpha,
        confidence: args.confidence,
        wall_s: 0.0,
        complete: false,
    };
    let sides = Sides {
        specs: [baseline, candidate],
        env: [args.baseline_env.clone(), args.candidate_env.clone()],
        timeout: Duration::from_secs_f64(args.timeout_s),
        cpu,
    };
    let console = Console::new(cases.len(), args.quiet || args.json);
    if !args.json {
        console.line(&format!(
            "adgauge compare: baseline {}, candidate {}; suite {} ({} case(s)); load {}",
            header.baseline,
            header.candidate,
            header.suite,
            cases.len(),
            header.load_start.map_or("unknown".into(), |l| format!("{l:.2}"))
        ));
        for note in &notes {
            console.line(&format!("note: {note}"));
        }
    }
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut code = Code::Success;
    for (i, case) in cases.iter().enumerate() {
        if crate::interrupt::signal().is_some() {
            break;
        }
        if !args.quiet && !args.json {
            eprintln!("[{}/{}] {}", i + 1, cases.len(), case.id());
        }
        let (case_rows, failed) = compare_case(case, &sides, &settings);
        if failed {
            code = code.combine(Code::Failed);
        }
        for r in &case_rows {
            if args.json {
                console.line(&serde_json::to_string(r)?);
            }
        }
        rows.extend(case_rows);
    }
    header.load_end = load_average();
    header.complete = crate::interrupt::signal().is_none();
    header.wall_s = started.elapsed().as_secs_f64();
    if !args.json {
        for line in table(&rows) {
            console.line(&line);
        }
        let notes: Vec<&PairedRow> = rows.iter().filter(|r| r.verdict != Verdict::NoChange.name()).collect();
        if !notes.is_empty() {
            console.line("");
            for r in notes {
                console.line(&format!("{} {}: {}: {}", r.case_id, r.mode, r.verdict, r.why));
            }
        }
        console.line("");
        console.line(&summary(&rows));
        console.line(&format!(
            "load {} -> {}; {:.1} s",
            header.load_start.map_or("unknown".into(), |l| format!("{l:.2}")),
            header.load_end.map_or("unknown".into(), |l| format!("{l:.2}")),
            header.wall_s
        ));
    }
    if let Some(dir) = &args.history {
        let path = write_paired(dir, &header, &rows).map_err(|e| anyhow::anyhow!(e))?;
        if !args.json {
            console.line(&format!("saved {}", path.display()));
        }
    }
    if rows.iter().any(|r| r.verdict == Verdict::Regressed.name()) {
        code = code.combine(Code::Regression);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_parse_and_refuse_what_they_are_not() {
        assert_eq!(SideSpec::parse("bin:/x/adgauge", "--baseline"), Ok(SideSpec::Bin("/x/adgauge".into())));
        assert_eq!(SideSpec::parse("tool:python3 t.py", "--baseline"), Ok(SideSpec::Tool("python3 t.py".into())));
        let e = SideSpec::parse("/x/adgauge", "--baseline").unwrap_err();
        assert!(e.contains("--baseline: '/x/adgauge' is neither"), "{e}");
        assert!(SideSpec::parse("bin:", "--candidate").unwrap_err().contains("needs a path"));
        assert!(SideSpec::parse("tool:  ", "--candidate").unwrap_err().contains("needs a command"));
        assert_eq!(parse_env("A_1=x=y"), Ok(("A_1".into(), "x=y".into())));
        assert!(parse_env("A-1=x").is_err() && parse_env("novalue").is_err());
    }

    #[test]
    fn a_side_s_command_serves_the_case_s_device_and_dtype() {
        let suite = crate::suite::parse_suite(
            "name: t\ncases:\n  - {workload: hist, ops: [add], rules: [general-sort], n: [100], k: [10], dtypes: [f32], index_dtypes: [i64], tools: [cpu-staged]}\n",
            "s.yaml",
        )
        .unwrap();
        let case = &suite.cases[0];
        let bin = SideSpec::Bin("/o'k/adgauge".into());
        assert_eq!(
            command_for(&bin, &[], case).unwrap(),
            r"exec '/o'\''k/adgauge' tool --backend 'cpu-staged' --dtype f32"
        );
        let env = vec![("X".to_string(), "a b".to_string())];
        assert_eq!(
            command_for(&bin, &env, case).unwrap(),
            r"export X='a b'; exec '/o'\''k/adgauge' tool --backend 'cpu-staged' --dtype f32"
        );
        let tool = SideSpec::Tool("python3 t.py".into());
        assert!(command_for(&tool, &[], case).unwrap_err().contains("computes in f64"));
        let extra = extra_fields(case);
        assert_eq!(
            extra,
            vec![("rule", Json::String("general-sort".into())), ("index_dtype", Json::String("i64".into()))]
        );
    }

    #[test]
    fn a_block_holds_a_fast_run_without_growing_long_on_a_busy_machine() {
        // A quiet machine: runs of 60 us, fastest and median alike: 20 ms of them.
        assert_eq!(runs_per_block(0.02, 60e-6, 61e-6), 334);
        // A busy one: 0.1 ms when both threads have a core, 3.5 ms when one waits: 80 ms of the
        // median run (23 runs), not the 200 that 20 ms of the fastest would take.
        assert_eq!(runs_per_block(0.02, 1e-4, 3.5e-3), 23);
        // Long runs: at least five.
        assert_eq!(runs_per_block(0.02, 0.05, 0.06), MIN_RUNS_PER_BLOCK);
        // Runs reported as zero or not at all fall back to five; tiny ones are capped.
        assert_eq!(runs_per_block(0.02, 0.0, f64::NAN), MIN_RUNS_PER_BLOCK);
        assert_eq!(runs_per_block(0.02, 1e-12, 1e-12), 100_000);
    }

    #[test]
    fn the_summary_counts_every_verdict_and_reason() {
        let suite = crate::suite::parse_suite(
            "name: t\ncases:\n  - {workload: hist, ops: [add], n: [100], k: [10], dtypes: [f64]}\n",
            "s.yaml",
        )
        .unwrap();
        let case = &suite.cases[0];
        let mut rows = vec![
            not_judged(case, "primal", "too noisy: x".into()),
            not_judged(case, "vjp", "error: baseline: died".into()),
            not_judged(case, "jvp", "x".into()),
        ];
        rows[2].verdict = "regressed".into();
        let s = summary(&rows);
        assert_eq!(
            s,
            "compare: 1 regressed, 0 improved, 0 no change, 2 not judged of 3 timing(s) (33% judged) (not judged: 1 error, 1 too noisy)"
        );
    }
}

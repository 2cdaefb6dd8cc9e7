//! `adgauge run` (the default command) and `adgauge check`.

use std::path::PathBuf;

use clap::Args;

use adgauge_backends::{Cpu, DType, Device};
use adgauge_reports::{ResultRow, Status};
use adgauge_workloads::Mode;

use crate::exit::{Code, bad_input, unavailable};
use crate::external::{ExternalSpec, parse_tool_cmd};
use crate::pipeline::{Case, Settings, cannot_run, is_unsupported, run_case, validate};
use crate::sinks::{
    Console, Fanout, HistorySink, JsonLinesSink, ProgressSink, RunStart, Sink, TableSink, ToolsComparedSink,
};
use crate::suite::{DEFAULT_SEED, Suite, default_suite, parse_suite_with};
use crate::tools::Tools;
use crate::validation::Outcome;

#[derive(Args, Debug, Default)]
pub struct RunArgs {
    /// Suite file (YAML); default: the embedded default suite.
    #[arg(long)]
    pub suite: Option<PathBuf>,
    /// Only cases whose id contains this text (ids: `adgauge run --list`).
    #[arg(long)]
    pub filter: Option<String>,
    /// List the suite's case ids and exit.
    #[arg(long)]
    pub list: bool,
    /// Print the run's rows as JSON lines instead of the table: one object per case and mode,
    /// with the run file's columns (schema 7), typed.
    #[arg(long)]
    pub json: bool,
    /// Write the run as `<run id>.csv` into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Append the run to this history directory (earlier runs are never rewritten). Without
    /// --out or --history, runs go to `./adgauge-results` (or $ADGAUGE_RESULTS) unless --no-save.
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Do not write the run anywhere (only print it).
    #[arg(long)]
    pub no_save: bool,
    /// Run only shard I of N (1-based, e.g. 2/4): cases are dealt round-robin, deterministically.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<(usize, usize)>,
    /// No progress bar (it is also hidden when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
    /// Run every case in a child process: a crash (e.g. a driver segfault) becomes an error row,
    /// and the per-case time limit is enforced by killing the child.
    #[arg(long)]
    pub isolate: bool,
    /// An external tool speaking GradBench's protocol, NAME=COMMAND (repeatable); a suite's
    /// `tools:` may then name it.
    #[arg(long = "tool-cmd", value_parser = parse_tool_cmd)]
    pub tool_cmd: Vec<ExternalSpec>,
    /// The full terminal table: min and median times, every ratio, whole messages (wider than
    /// 100 columns).
    #[arg(long)]
    pub wide: bool,
    /// Only the case with exactly this id (used by --isolate for its children).
    #[arg(long, hide = true)]
    pub exact: Option<String>,
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let (i, n) = s.split_once('/').ok_or_else(|| format!("'{s}' is not I/N"))?;
    let i: usize = i.trim().parse().map_err(|_| format!("'{i}' is not a shard number"))?;
    let n: usize = n.trim().parse().map_err(|_| format!("'{n}' is not a shard count"))?;
    if n == 0 || i == 0 || i > n {
        return Err(format!("shard {i}/{n}: need 1 <= I <= N"));
    }
    Ok((i, n))
}

#[derive(Args, Debug, Default)]
pub struct CheckArgs {
    /// Tool (backend) to validate: cpu, cpu-staged, cpu-traced, cpu-jit, cpu-jit-flush, opencl or cuda (`adgauge backends`
    /// lists them).
    #[arg(long, alias = "tool", default_value = "cpu")]
    pub backend: String,
    /// Only these workloads (repeatable), e.g. --workload hist-add.
    #[arg(long)]
    pub workload: Vec<String>,
    /// Only this dtype (default: both).
    #[arg(long)]
    pub dtype: Option<DType>,
    /// An external tool speaking GradBench's protocol, NAME=COMMAND (repeatable): `--backend
    /// NAME` then validates it.
    #[arg(long = "tool-cmd", value_parser = parse_tool_cmd)]
    pub tool_cmd: Vec<ExternalSpec>,
    /// Fault injection to show the checks catch a broken rule: `drop-dest-adjoint` zeroes dest's
    /// adjoint in every VJP; `drop-dest-primal` makes the histograms' device primals forget
    /// dest; `confused-nesting` takes the nested workloads' `ff` inner gradient
    /// with one tag for both levels (perturbation confusion).
    #[arg(long, hide = true)]
    pub inject_fault: Option<String>,
    /// Also the checks too long for every run (the nightly's): the histograms' largest size
    /// switches, the extreme bins at every size of the sweep, every operator's scans at the
    /// parallel size.
    #[arg(long)]
    pub thorough: bool,
}

fn code_for(row: &ResultRow) -> Code {
    match row.status {
        Status::Ok | Status::Skipped => Code::Success,
        Status::Failed | Status::Error | Status::Timeout => Code::Failed,
    }
}

/// The largest suite file read (the shipped ones are a few KB).
const MAX_SUITE_BYTES: u64 = 16 << 20;

pub(crate) fn load_suite(path: &Option<PathBuf>, external: &[ExternalSpec]) -> anyhow::Result<Suite> {
    match path {
        None => Ok(default_suite()),
        Some(p) => {
            let name = p.display();
            let size = std::fs::metadata(p).map_err(|e| bad_input(format!("{name}: cannot read: {e}")))?.len();
            if size > MAX_SUITE_BYTES {
                return Err(bad_input(format!("{name}: {size} bytes, larger than a suite may be ({MAX_SUITE_BYTES})")));
            }
            let bytes = std::fs::read(p).map_err(|e| bad_input(format!("{name}: cannot read: {e}")))?;
            let text = String::from_utf8(bytes).map_err(|e| {
                let at = e.utf8_error().valid_up_to();
                let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
                bad_input(format!("{name}:{line}: not UTF-8 text (invalid byte at offset {at})"))
            })?;
            parse_suite_with(&text, &p.display().to_string(), external).map_err(bad_input)
        }
    }
}

fn settings(suite: &Suite) -> Settings {
    Settings {
        time: true,
        budget: suite.budget,
        case_limit: suite.case_limit,
        tolerances: suite.tolerances.clone(),
        fault: None,
        thorough: false,
    }
}

pub fn run(args: &RunArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let suite = load_suite(&args.suite, &args.tool_cmd)?;
    let mut cases = suite.cases.clone();
    if let Some((i, n)) = args.shard {
        cases = cases.into_iter().enumerate().filter(|(j, _)| j % n == i - 1).map(|(_, c)| c).collect();
    }
    if let Some(id) = &args.exact {
        cases.retain(|c| &c.id() == id);
        if cases.is_empty() {
            return Err(bad_input(format!("--exact '{id}' is not a case of the suite")));
        }
    }
    if let Some(f) = &args.filter {
        cases.retain(|c| c.id().contains(f.as_str()));
        if cases.is_empty() {
            return Err(bad_input(format!("--filter '{f}' matches no case (see `adgauge run --list`)")));
        }
    }
    let console = Console::new(cases.len(), args.quiet || args.list);
    if args.list {
        for c in &cases {
            console.line(&c.id());
        }
        return Ok(Code::Success);
    }
    // Sizes are checked after the selection: what --filter and --shard leave out never counts.
    suite.check_memory(&cases).map_err(bad_input)?;
    let cpu = Cpu::new(threads)?;
    // Every tool opens on first use; one that cannot start makes its cases skipped rows.
    let tools = Tools::with_external(threads, cpu.clone(), &suite.external);
    let mut info = crate::environment::run_info();
    info.suite = suite.name.clone();
    // A run of part of the suite says which part: it is never the baseline of a whole run.
    let part: Vec<String> = args
        .filter
        .iter()
        .map(|f| format!("filter {f}"))
        .chain(args.shard.map(|(i, n)| format!("shard {i}/{n}")))
        .collect();
    info.selection = (!part.is_empty()).then(|| part.join(", "));
    // The roofline, once, before the cases (never in a child of --isolate: its parent measured
    // it). A measurement that fails leaves the run without one; the cases still run.
    let sizes = crate::environment::roofline_sizes().map_err(bad_input)?;
    if args.exact.is_none() {
        info.roofline = crate::environment::run_roofline(&cpu, &cases, sizes).unwrap_or_else(|e| {
            eprintln!("adgauge: the CPU roofline was not measured: {e}");
            None
        });
    }
    let mut sink = Fanout::default();
    sink.push(ProgressSink(console.clone()));
    if args.json && args.exact.is_some() {
        // A child of --isolate reports its one row to the parent in the rows' own JSON.
        sink.push(JsonLinesSink::new(console.clone()));
    } else if args.json {
        sink.push(crate::sinks::FileRowsJsonSink::new(console.clone()));
    } else {
        sink.push(TableSink::new(console.clone(), args.wide));
        sink.push(ToolsComparedSink::new(console.clone()));
    }
    let mut dirs: Vec<PathBuf> = args.out.iter().chain(&args.history).cloned().collect();
    // Children of --isolate (--exact) report to their parent, which saves the run.
    if dirs.is_empty() && !args.no_save && args.exact.is_none() {
        dirs.push(crate::history::default_history());
    }
    if !dirs.is_empty() {
        sink.push(HistorySink::new(dirs, info.clone())?);
    }
    let settings = settings(&suite);
    // The header names every tool of the run: what it runs on, or why it cannot.
    let mut named: Vec<&str> = Vec::new();
    for c in &cases {
        if !named.contains(&c.tool.as_str()) {
            named.push(&c.tool);
        }
    }
    let tool_lines = named
        .iter()
        .map(|&name| {
            let detail = match tools.get(name) {
                Some(t) => match t.availability() {
                    Ok(what) => format!("{what}; {}", t.version()),
                    Err(why) => format!("unavailable: {why}"),
                },
                None => "unknown tool".to_string(),
            };
            (name.to_string(), detail)
        })
        .collect();
    sink.run_started(&RunStart {
        info: &info,
        suite: &suite.name,
        description: suite.description.as_deref(),
        cases: cases.len(),
        tools: tool_lines,
        seed: suite.seed,
    })?;
    let mut code = Code::Success;
    let (mut finished, mut measured) = (0, 0);
    for c in &cases {
        if crate::interrupt::signal().is_some() {
            break;
        }
        sink.case_started(&c.id());
        let mut row = if args.isolate {
            run_isolated(args, threads, c, &settings, cpu.threads())
        } else {
            run_case(&tools, c, &settings)
        };
        // A case cut short by the interruption measured nothing worth keeping.
        if crate::interrupt::signal().is_some() {
            break;
        }
        // The host that measured the row: a merge of shards keeps each row's (docs/gate.md).
        row.host.get_or_insert_with(crate::environment::host);
        code = code.combine(code_for(&row));
        measured += usize::from(row.status != Status::Skipped);
        sink.case_finished(&row)?;
        finished += 1;
    }
    // The run's tools that cannot start, with why.
    let down: Vec<(&str, String)> =
        named.iter().filter_map(|&n| Some((n, tools.get(n)?.availability().err()?))).collect();
    if finished > 0 && measured == 0 && crate::interrupt::signal().is_none() {
        // A run that measured nothing must not read as a pass (a nightly on a machine that
        // lost its device would): 4 when a tool of the run cannot start, else 2 (the suite
        // asks only for what its tools do not support).
        let (why, all_skipped) = if down.is_empty() {
            (Code::BadInput, "every case was skipped as unsupported by its tool".to_string())
        } else {
            let names: Vec<&str> = down.iter().map(|(n, _)| *n).collect();
            (Code::Unavailable, format!("every case was skipped: unavailable: {}", names.join(", ")))
        };
        eprintln!("adgauge: nothing was measured: {all_skipped}");
        code = code.combine(why);
    } else if finished > 0 && crate::interrupt::signal().is_none() {
        // A tool the suite names that cannot start is an error even when other tools measured:
        // its cases are skipped rows, and a nightly that silently lost a tool is no pass.
        for (name, why) in &down {
            eprintln!("adgauge: tool {name} is unavailable, its cases were skipped: {why}");
            code = code.combine(Code::Unavailable);
        }
    }
    // The tools' processes end before the run's files are written.
    drop(tools);
    sink.run_finished()?;
    if let Some(signal) = crate::interrupt::signal() {
        eprintln!(
            "adgauge: interrupted by {}: {finished} of {} case(s) measured and written",
            crate::interrupt::name(signal),
            cases.len()
        );
    }
    Ok(code)
}

/// Validation cases: every selected workload name at its validation size, in every dtype and
/// rule, on one tool. A tool that ignores the rule (`reads_rule` false) gets the first rule
/// only: its answers would be the same under every rule name.
fn check_cases(args: &CheckArgs, reads_rule: bool) -> anyhow::Result<Vec<Case>> {
    let names: Vec<String> = if args.workload.is_empty() {
        adgauge_workloads::all_names()
    } else {
        for name in &args.workload {
            if adgauge_workloads::find(name).is_none() {
                let known = adgauge_workloads::all_names().join(", ");
                return Err(bad_input(format!("--workload: unknown workload '{name}' (known: {known})")));
            }
        }
        args.workload.clone()
    };
    let dtypes: Vec<DType> = args.dtype.map(|d| vec![d]).unwrap_or_else(|| DType::ALL.to_vec());
    let mut out = Vec::new();
    for name in names {
        let Some(workload) = adgauge_workloads::find(&name) else { continue };
        let rules = workload.check_rules(&name);
        let mut rules = if rules.is_empty() { vec!["-".to_string()] } else { rules };
        if !reads_rule {
            rules.truncate(1);
        }
        for params in workload.check_param_sets(&name) {
            for &dtype in &dtypes {
                for rule in &rules {
                    out.push(Case {
                        workload,
                        name: name.clone(),
                        params: params.clone(),
                        rule: rule.clone(),
                        dtype,
                        tool: args.backend.clone(),
                        modes: Mode::TIMED.to_vec(),
                        validate: true,
                        seed: DEFAULT_SEED,
                    });
                }
            }
        }
    }
    // The registries name every case: a repeat means a workload declared two rules (or
    // parameter sets) under one label, and its results would be indistinguishable.
    if let Some(dup) = Case::first_duplicate(&out) {
        anyhow::bail!(
            "internal error: check would run case {dup} twice (a workload's rules or parameters share a label)"
        );
    }
    Ok(out)
}

pub fn check(args: &CheckArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let fault = match args.inject_fault.as_deref() {
        None => None,
        Some(f) if adgauge_workloads::FAULTS.contains(&f) => Some(f.to_string()),
        Some(other) => {
            return Err(bad_input(format!(
                "unknown fault '{other}' (known: {})",
                adgauge_workloads::FAULTS.join(", ")
            )));
        }
    };
    let tools = Tools::with_external(threads, Cpu::new(threads)?, &args.tool_cmd);
    let tool = tools.get(&args.backend).ok_or_else(|| {
        let mut known: Vec<String> = Tools::builtin_names().iter().map(|s| s.to_string()).collect();
        known.extend(args.tool_cmd.iter().map(|t| t.name.clone()));
        bad_input(format!("--backend: unknown tool '{}' (known: {})", args.backend, known.join(", ")))
    })?;
    if let Err(why) = tool.availability() {
        return Err(unavailable(format!("backend {} is unavailable: {why}", args.backend)));
    }
    let cases = check_cases(args, tool.reads_rule())?;
    let settings = Settings {
        time: false,
        budget: Default::default(),
        case_limit: std::time::Duration::MAX,
        tolerances: Default::default(),
        fault,
        thorough: args.thorough,
    };
    // Lines go through a console so that `adgauge check | head` ends quietly.
    let console = Console::new(0, true);
    let mut failures = Vec::new();
    let mut skipped = 0;
    let mut judged = 0;
    // Cases with at least one check that ran (a case whose every check was skipped validated
    // nothing).
    let mut validated = 0;
    for c in &cases {
        if crate::interrupt::signal().is_some() {
            break;
        }
        let id = c.id();
        let result = match cannot_run(tool, c) {
            Some(why) => Err(anyhow::Error::new(adgauge_backends::OpError::Unsupported(why))),
            None => validate(tool, c, &settings),
        };
        // A case cut short by the interruption has no verdict.
        if crate::interrupt::signal().is_some() {
            break;
        }
        judged += 1;
        match result {
            Ok(outcomes) => {
                validated += usize::from(outcomes.iter().any(|o| o.skipped.is_none()));
                print_outcomes(&console, &id, &outcomes, &mut failures)
            }
            Err(e) if is_unsupported(&e) => {
                skipped += 1;
                console.line(&format!("{id:<62} skipped: {e:#}"));
            }
            Err(e) => {
                console.line(&format!("{id:<62} ERROR {e:#}"));
                failures.push(format!("{id}: error: {e:#}"));
            }
        }
    }
    if let Some(signal) = crate::interrupt::signal() {
        eprintln!(
            "adgauge: interrupted by {}: {judged} of {} case(s) judged, {} failure(s) among them",
            crate::interrupt::name(signal),
            cases.len(),
            failures.len()
        );
    }
    if failures.is_empty() {
        let passed = judged - skipped;
        console.line(&format!("{passed} cases passed every check ({skipped} skipped as unsupported)"));
        if validated == 0 && crate::interrupt::signal().is_none() {
            // A check that validated nothing is no pass: the selection asked only for what the
            // tool does not support (as `run` whose every case is skipped).
            // (`check_cases` never selects nothing: every workload has a validation case.)
            eprintln!(
                "adgauge: nothing was validated: {}",
                if skipped == judged {
                    format!("{} skipped every one of its {judged} case(s) as unsupported", args.backend)
                } else {
                    format!("every check of the {judged} case(s) on {} was skipped", args.backend)
                }
            );
            return Ok(Code::BadInput);
        }
        Ok(Code::Success)
    } else {
        eprintln!("{} failure(s):", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
        Ok(Code::Failed)
    }
}

/// One line per check; failures are collected to be repeated at the end.
fn print_outcomes(console: &Console, id: &str, outcomes: &[Outcome], failures: &mut Vec<String>) {
    for o in outcomes {
        let state = match (&o.skipped, o.passed(), &o.convention) {
            (Some(why), _, _) => format!("skipped ({why})"),
            (None, true, Some(convention)) => format!("ok (convention: {convention})"),
            (None, true, None) => "ok".into(),
            (None, false, _) => "FAILED".into(),
        };
        console.line(&format!(
            "{id:<62} {:<15} worst {:>10.3e}  tol {:>7.1e}  {state}",
            o.kind.name(),
            o.worst,
            o.tolerance
        ));
        if !o.passed() {
            let mut failure = format!("{id}: {} worst {:.3e} > tolerance {:.1e}", o.kind.name(), o.worst, o.tolerance);
            if !o.parts.is_empty() {
                failure.push_str(&format!(" ({})", o.parts_text()));
            }
            failures.push(failure);
        }
    }
}

/// Runs one case in a child `adgauge run --exact ID --json` and reads its row; a crash or a kill
/// at the time limit becomes an error or timeout row, so one failing case never ends the run.
fn run_isolated(
    args: &RunArgs,
    threads: Option<usize>,
    case: &Case,
    settings: &Settings,
    nthreads: usize,
) -> ResultRow {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let fail = |status: Status, message: String| {
        let mut row = case.empty_row(nthreads);
        row.status = status;
        row.message = Some(message);
        row
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(Status::Error, format!("cannot find the adgauge executable: {e}")),
    };
    let mut cmd = Command::new(exe);
    cmd.args(["run", "--json", "--quiet", "--exact", &case.id()]);
    if let Some(s) = &args.suite {
        cmd.arg("--suite").arg(s);
    }
    if let Some(t) = threads {
        cmd.arg("--threads").arg(t.to_string());
    }
    for t in &args.tool_cmd {
        cmd.arg("--tool-cmd").arg(format!("{}={}", t.name, t.command));
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Registered, so that an interruption stops the child (which stops its own tools).
    let spawned = crate::interrupt::spawn_registered(false, || {
        let child = cmd.spawn().map_err(|e| format!("cannot start a child process: {e}"))?;
        let pid = child.id();
        Ok((child, pid))
    });
    let (mut child, pid) = match spawned {
        Ok(c) => c,
        Err(e) => return fail(Status::Error, e),
    };
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    // The child enforces the limit between phases; the parent stops it a little later (its
    // grace: a tenth of the limit, between 1 and 10 s): SIGTERM first, so that it kills its
    // tools (`interrupt.rs`), and SIGKILL if it has not ended 2 s after that.
    let grace = (settings.case_limit / 10).clamp(Duration::from_secs(1), Duration::from_secs(10));
    let limit = settings.case_limit.saturating_add(grace);
    let started = Instant::now();
    let mut terminated: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {
                let interrupted = crate::interrupt::signal().is_some();
                if terminated.is_none() && (interrupted || started.elapsed() > limit) {
                    terminated = Some(Instant::now());
                    #[cfg(unix)]
                    // SAFETY: kill(2) of the child this function started and has not reaped.
                    unsafe {
                        libc::kill(pid, libc::SIGTERM);
                    }
                }
                if terminated.is_some_and(|t| t.elapsed() > Duration::from_secs(2)) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                crate::interrupt::unregister(pid);
                return fail(Status::Error, format!("lost the child process: {e}"));
            }
        }
    };
    crate::interrupt::unregister(pid);
    let status = if terminated.is_some() { None } else { status };
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let Some(status) = status else {
        return fail(Status::Timeout, format!("killed after {:?} (the case time limit)", limit));
    };
    // The child's row is its one JSON object line; one that does not read as a row is said so
    // (a row's every real reads back: `adgauge_reports::real`).
    let objects = || stdout.lines().filter(|l| l.trim_start().starts_with('{'));
    if let Some(row) = objects().find_map(|l| serde_json::from_str::<ResultRow>(l).ok()) {
        return row;
    }
    match objects().next().and_then(|l| serde_json::from_str::<ResultRow>(l).err()) {
        Some(e) => {
            fail(Status::Error, format!("the case's process printed a row that does not read back ({status}): {e}"))
        }
        None => {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            fail(Status::Error, format!("the case's process ended without a result ({status}): {last}"))
        }
    }
}

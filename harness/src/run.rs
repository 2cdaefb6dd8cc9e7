//! `adgauge run` (the default command) and `adgauge check`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use adgauge_backends::{Cpu, Cuda, DType, Device, HistRule, OpenCl};
use adgauge_datasets::hist::IndexDist;
use adgauge_reports::{ResultRow, Status, Timing};
use adgauge_workloads::HistWorkload;

use crate::devices::open_device;
use crate::exit::{Code, bad_input};
use crate::history::RunWriter;
use crate::runner::{Options, is_unsupported, run_case, unavailable_row, validate};
use crate::suite::{Case, CaseSpec, DEFAULT_SEED, Mode, Suite, default_suite, parse_suite};

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
    /// Print one JSON result row per case (JSON lines) instead of the table.
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
    /// Backend to validate.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Only these workloads (repeatable), e.g. --workload hist-add.
    #[arg(long)]
    pub workload: Vec<String>,
    /// Only this dtype (default: both).
    #[arg(long)]
    pub dtype: Option<DType>,
    /// Fault injection to show the checks catch a broken rule: `drop-dest-adjoint` zeroes dest's
    /// adjoint in every VJP.
    #[arg(long, hide = true)]
    pub inject_fault: Option<String>,
}

fn ms(t: &Option<Timing>, f: impl Fn(&Timing) -> f64) -> String {
    t.as_ref().map(|t| format!("{:.3}", f(t) * 1e3)).unwrap_or_else(|| "-".into())
}

fn ratio(x: Option<f64>) -> String {
    x.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into())
}

fn header() -> String {
    format!(
        "{:<15} {:>9} {:>8} {:<6} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7}  check",
        "workload",
        "n",
        "k",
        "device",
        "rule",
        "type",
        "thr",
        "primal ms min/med",
        "vjp ms min/med",
        "jvp ms min/med",
        "vjp/pri",
        "jvp/pri",
        "mem vjp",
        "mem jvp"
    )
}

fn table_row(row: &ResultRow) -> String {
    let p = |k: &str| row.params.get(k).cloned().unwrap_or_default();
    // The classic workloads have a dimension too.
    let workload = match (row.params.get("d"), row.params.get("l"), row.params.get("c")) {
        (Some(d), _, _) => format!("{} d={d}", row.workload),
        (None, Some(l), Some(c)) => format!("{} l={l} c={c}", row.workload),
        (None, None, None) if row.params.contains_key("p") => format!("{} p={}", row.workload, p("p")),
        _ => row.workload.clone(),
    };
    let both = |t: &Option<Timing>| format!("{}/{}", ms(t, |t| t.min_s), ms(t, |t| t.median_s));
    let status = match row.status {
        Status::Ok => "ok".to_string(),
        other => format!("{}: {}", other.name().to_uppercase(), row.message.clone().unwrap_or_default()),
    };
    format!(
        "{:<15} {:>9} {:>8} {:<6} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7}  {}",
        workload,
        p("n"),
        p("k"),
        row.backend,
        row.rule,
        row.dtype,
        row.threads,
        both(&row.primal),
        both(&row.vjp),
        both(&row.jvp),
        ratio(row.vjp_overhead()),
        ratio(row.jvp_overhead()),
        ratio(row.vjp_memory_ratio()),
        ratio(row.jvp_memory_ratio()),
        status
    )
}

fn code_for(row: &ResultRow) -> Code {
    match row.status {
        Status::Ok | Status::Skipped => Code::Success,
        Status::Failed | Status::Error | Status::Timeout => Code::Failed,
    }
}

fn load_suite(path: &Option<PathBuf>) -> anyhow::Result<Suite> {
    match path {
        None => Ok(default_suite()),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| bad_input(format!("{}: cannot read: {e}", p.display())))?;
            parse_suite(&text, &p.display().to_string()).map_err(bad_input)
        }
    }
}

/// A progress bar on stderr, only when stderr is a terminal and not `--quiet`.
fn progress(len: usize, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    if quiet || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    } else if let Ok(style) =
        ProgressStyle::with_template("{bar:30} {pos}/{len} cases  elapsed {elapsed}  eta {eta}  {msg}")
    {
        bar.set_style(style);
    }
    bar
}

pub fn run(args: &RunArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let suite = load_suite(&args.suite)?;
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
    if args.list {
        for c in &cases {
            println!("{}", c.id());
        }
        return Ok(Code::Success);
    }
    let cpu = Cpu::new(threads)?;
    // Other backends open on first use; one that cannot start makes its cases skipped rows.
    let gpus = Gpus::default();
    let info = crate::environment::run_info();
    if !args.json {
        println!(
            "adgauge {} — suite {} ({} cases) on {}, seed {}, run {}",
            env!("CARGO_PKG_VERSION"),
            suite.name,
            cases.len(),
            cpu.device_name(),
            suite.seed,
            info.run_id
        );
        if let Some(d) = &suite.description {
            println!("{d}");
        }
        println!("{}", header());
    }
    let opts = Options::from_suite(&suite);
    let mut dirs: Vec<PathBuf> = args.out.iter().chain(&args.history).cloned().collect();
    // Children of --isolate (--exact) report to their parent, which saves the run.
    if dirs.is_empty() && !args.no_save && args.exact.is_none() {
        dirs.push(std::env::var_os("ADGAUGE_RESULTS").map(PathBuf::from).unwrap_or_else(|| "adgauge-results".into()));
    }
    let mut writer = if dirs.is_empty() { None } else { Some(RunWriter::new(dirs, info.clone())?) };
    let bar = progress(cases.len(), args.quiet);
    let mut code = Code::Success;
    for c in &cases {
        bar.set_message(c.id());
        let row = if args.isolate {
            run_isolated(args, threads, c, &opts, cpu.threads())
        } else {
            run_on(&cpu, &gpus, c, &opts)
        };
        code = code.combine(code_for(&row));
        let line = if args.json { serde_json::to_string(&row)? } else { table_row(&row) };
        bar.suspend(|| {
            println!("{line}");
            let _ = std::io::stdout().flush();
        });
        if let Some(w) = writer.as_mut() {
            w.push(row)?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(w) = writer {
        for path in w.finish()? {
            eprintln!("wrote run {} to {}", info.run_id, path.display());
        }
    }
    Ok(code)
}

/// The classic validation cases (k-means, GMM, LSTM) selected by `--workload` and `--dtype`.
fn classic_check_cases(args: &CheckArgs) -> Vec<crate::classic::ClassicSpec> {
    let wanted = |w: &str| args.workload.is_empty() || args.workload.iter().any(|x| x == w);
    let dtypes: Vec<DType> = args.dtype.map(|d| vec![d]).unwrap_or_else(|| DType::ALL.to_vec());
    let mut classic = Vec::new();
    for &dtype in &dtypes {
        for (name, kind) in [
            ("kmeans", crate::classic::ClassicKind::Kmeans { n: 200, k: 5, d: 4 }),
            ("gmm", crate::classic::ClassicKind::Gmm { d: 3, k: 3, n: 50 }),
            ("lstm", crate::classic::ClassicKind::Lstm { l: 2, c: 6, b: 4 }),
            ("ba", crate::classic::ClassicKind::Ba { n: 3, m: 10, p: 30 }),
        ] {
            if wanted(name) {
                classic.push(crate::classic::ClassicSpec {
                    kind,
                    dtype,
                    seed: DEFAULT_SEED,
                    backend: args.backend.clone(),
                    modes: vec![Mode::Primal, Mode::Vjp, Mode::Jvp],
                    validate: true,
                });
            }
        }
    }
    classic
}

/// Validation cases: every selected workload x rule x dtype at validation size.
fn check_cases(args: &CheckArgs) -> anyhow::Result<Vec<CaseSpec>> {
    let workloads: Vec<HistWorkload> = if args.workload.is_empty() {
        HistWorkload::all()
    } else {
        args.workload
            .iter()
            .filter(|name| !matches!(name.as_str(), "kmeans" | "gmm" | "lstm" | "ba"))
            .map(|name| {
                HistWorkload::parse(name).ok_or_else(|| {
                    let known: Vec<String> = HistWorkload::all().iter().map(|w| w.name()).collect();
                    bad_input(format!("unknown workload '{name}' (known: {}, kmeans, gmm, lstm, ba)", known.join(", ")))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let dtypes: Vec<DType> = args.dtype.map(|d| vec![d]).unwrap_or_else(|| DType::ALL.to_vec());
    let mut out = Vec::new();
    for &workload in &workloads {
        for &dtype in &dtypes {
            for rule in HistRule::ALL {
                out.push(CaseSpec {
                    workload,
                    n: 2000,
                    k: 64,
                    dist: IndexDist::Uniform,
                    out_of_range: 0.05,
                    dtype,
                    rule,
                    seed: DEFAULT_SEED,
                    backend: args.backend.clone(),
                    modes: vec![Mode::Primal, Mode::Vjp, Mode::Jvp],
                    validate: true,
                });
            }
        }
    }
    Ok(out)
}

pub fn check(args: &CheckArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let drop_dest_adjoint = match args.inject_fault.as_deref() {
        None => false,
        Some("drop-dest-adjoint") => true,
        Some(other) => {
            return Err(bad_input(format!("unknown fault '{other}' (known: drop-dest-adjoint)")));
        }
    };
    let cases = check_cases(args)?;
    let classic = classic_check_cases(args);
    let device = open_device(&args.backend, threads)?;
    crate::with_device!(&device, |d| check_on(d, &cases, &classic, threads, drop_dest_adjoint))
}

/// One line per check; failures are collected to be repeated at the end.
fn print_outcomes(id: &str, outcomes: &[crate::validation::Outcome], failures: &mut Vec<String>) {
    for o in outcomes {
        let state = match (&o.skipped, o.passed()) {
            (Some(why), _) => format!("skipped ({why})"),
            (None, true) => "ok".into(),
            (None, false) => "FAILED".into(),
        };
        println!("{id:<62} {:<15} worst {:>10.3e}  tol {:>7.1e}  {state}", o.kind.name(), o.worst, o.tolerance);
        if !o.passed() {
            failures.push(format!("{id}: {} worst {:.3e} > tolerance {:.1e}", o.kind.name(), o.worst, o.tolerance));
        }
    }
}

/// Runs the validation cases on one device.
fn check_on<D: Device>(
    device: &D,
    cases: &[CaseSpec],
    classic: &[crate::classic::ClassicSpec],
    threads: Option<usize>,
    drop_dest_adjoint: bool,
) -> anyhow::Result<Code> {
    let mut failures = Vec::new();
    let mut skipped = 0;
    // One line per check, or the reason a case was skipped or failed to run.
    let mut report = |id: String, result: anyhow::Result<Vec<crate::validation::Outcome>>| match result {
        Ok(outcomes) => print_outcomes(&id, &outcomes, &mut failures),
        Err(e) if is_unsupported(&e) => {
            skipped += 1;
            println!("{id:<62} skipped: {e:#}");
        }
        Err(e) => {
            println!("{id:<62} ERROR {e:#}");
            failures.push(format!("{id}: error: {e:#}"));
        }
    };
    for c in cases {
        report(c.id(), validate(device, c, drop_dest_adjoint));
    }
    if !classic.is_empty() {
        // The f64 reference values for finite differences come from the CPU.
        let cpu = Cpu::new(threads)?;
        for c in classic {
            report(c.id(), crate::classic::validate(&cpu, device, c));
        }
    }
    let total = cases.len() + classic.len();
    if failures.is_empty() {
        println!("{} cases passed every check ({skipped} skipped as unsupported)", total - skipped);
        Ok(Code::Success)
    } else {
        eprintln!("{} failure(s):", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
        Ok(Code::Failed)
    }
}

/// The GPU devices of a run, each opened on first use (`None`: it cannot start).
#[derive(Default)]
struct Gpus {
    opencl: std::cell::OnceCell<Option<OpenCl>>,
    cuda: std::cell::OnceCell<Option<Cuda>>,
}

/// Runs one case on the device of its backend (opened on first use).
fn run_on(cpu: &Cpu, gpus: &Gpus, case: &Case, opts: &Options) -> ResultRow {
    let case = match case {
        Case::Hist(c) => c,
        Case::Classic(c) => {
            return match c.backend.as_str() {
                "cpu" => crate::classic::run_case(cpu, cpu, c, &opts.budget),
                "opencl" => match gpus.opencl.get_or_init(|| OpenCl::new().ok()) {
                    Some(d) => crate::classic::run_case(cpu, d, c, &opts.budget),
                    None => unavailable_row(c.empty_row(cpu.threads()), "opencl"),
                },
                "cuda" => match gpus.cuda.get_or_init(|| Cuda::new().ok()) {
                    Some(d) => crate::classic::run_case(cpu, d, c, &opts.budget),
                    None => unavailable_row(c.empty_row(cpu.threads()), "cuda"),
                },
                other => unavailable_row(c.empty_row(cpu.threads()), other),
            };
        }
    };
    match case.backend.as_str() {
        "opencl" => match gpus.opencl.get_or_init(|| OpenCl::new().ok()) {
            Some(d) => run_case(d, case, opts),
            // The CPU device reports the unavailable backend as a skipped row with the reason.
            None => run_case(cpu, case, opts),
        },
        "cuda" => match gpus.cuda.get_or_init(|| Cuda::new().ok()) {
            Some(d) => run_case(d, case, opts),
            None => run_case(cpu, case, opts),
        },
        _ => run_case(cpu, case, opts),
    }
}

/// Runs one case in a child `adgauge run --exact ID --json` and reads its row; a crash or a kill
/// at the time limit becomes an error or timeout row, so one failing case never ends the run.
fn run_isolated(args: &RunArgs, threads: Option<usize>, case: &Case, opts: &Options, nthreads: usize) -> ResultRow {
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
    let mut child = match cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return fail(Status::Error, format!("cannot start a child process: {e}")),
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
    // The child enforces the limit between phases; the parent kills it a little later.
    let limit = opts.case_limit + Duration::from_secs(10);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return fail(Status::Error, format!("lost the child process: {e}")),
        }
    };
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let Some(status) = status else {
        return fail(Status::Timeout, format!("killed after {:?} (the case time limit)", limit));
    };
    match stdout.lines().find_map(|l| serde_json::from_str::<ResultRow>(l).ok()) {
        Some(row) => row,
        None => {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            fail(Status::Error, format!("the case's process ended without a result ({status}): {last}"))
        }
    }
}

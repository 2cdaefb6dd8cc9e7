//! The `adgauge` command line: evaluate single inputs, run suites, list backends.

use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use adgauge_harness::exit::{Code, bad_input, code_of};
use adgauge_harness::{compare, environment, eval, history, interrupt, memory, run, serve, sinks, tools};

#[global_allocator]
static ALLOCATOR: memory::Counting = memory::Counting;

/// adgauge: a benchmark and validation suite for automatic differentiation.
///
/// Without a subcommand, runs the embedded default suite.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Worker threads of the CPU device (default: all cores; at most 1024).
    #[arg(long, global = true, value_parser = parse_threads)]
    threads: Option<usize>,
    /// The most memory one case or input may need (bytes, or with K, M, G, T): sizes that would
    /// need more are refused before anything is allocated (default: the least of half the
    /// physical memory, the address-space limit RLIMIT_AS and the cgroup's memory limit).
    #[arg(long, global = true, value_parser = adgauge_datasets::limits::parse_bytes)]
    max_memory: Option<u64>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Evaluate one explicit input (JSON) and print one JSON object.
    Eval(eval::EvalArgs),
    /// Run the embedded default suite: validation and timing, one row per case (the default).
    Run(run::RunArgs),
    /// Validate derivatives only: one line per case and check; exit 1 on any failure.
    Check(run::CheckArgs),
    /// Compare a run against a baseline: exit 1 on failing checks, 3 on slowdowns.
    Gate(history::GateArgs),
    /// Time a baseline and a candidate interleaved, in pairs, and judge every timing: exit 3 on
    /// a regression.
    Compare(compare::CompareArgs),
    /// Query a history: the trend of cases, the best of the last N runs, regressions since a date.
    History(history::HistoryArgs),
    /// Write the self-contained HTML report of a history.
    Report(history::ReportArgs),
    /// Combine runs (shards, machines) into one run.
    Merge(history::MergeArgs),
    /// Serve adgauge's engine as a GradBench tool: the protocol's JSON lines on stdin/stdout.
    Tool(serve::ToolArgs),
    /// List devices with their availability.
    Backends {
        /// One JSON object per device.
        #[arg(long)]
        json: bool,
        /// Also time device-to-device copies of BYTES (K, M, G, T suffixes; default 1G) on every
        /// available GPU device, checked by reading the copy back: the roofline of
        /// memory-bound kernels (docs/gpu.md).
        #[arg(long, value_name = "BYTES", num_args = 0..=1, default_missing_value = "1G",
              value_parser = adgauge_datasets::limits::parse_bytes)]
        bandwidth: Option<u64>,
        /// Also measure the CPU's roofline for histograms on its threads (`--threads`): the
        /// sequential read rate and the random 4-byte read and update rates in working sets of
        /// 10 to 10^6 bins (seeded, well under a second).
        #[arg(long)]
        roofline: bool,
    },
}

/// Most worker threads accepted: more only costs start-up time (100000 threads took minutes).
const MAX_THREADS: usize = 1024;

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(t) if (1..=MAX_THREADS).contains(&t) => Ok(t),
        _ => Err(format!("'{s}' is not a thread count in [1, {MAX_THREADS}]")),
    }
}

/// Every workload's own `eval` flags, each once (workloads may share one: `--inner`).
fn eval_options() -> Vec<adgauge_workloads::EvalOption> {
    let mut out: Vec<adgauge_workloads::EvalOption> = Vec::new();
    for o in adgauge_workloads::registry().iter().flat_map(|w| w.eval_options()) {
        if !out.iter().any(|seen| seen.flag == o.flag) {
            out.push(o);
        }
    }
    out
}

/// The command line with every workload's own `eval` flags added.
fn command() -> clap::Command {
    Cli::command().mut_subcommand("eval", |mut eval| {
        for o in eval_options() {
            let arg = Arg::new(o.flag).long(o.flag).help(o.help);
            eval = eval.arg(if o.takes_value { arg.action(ArgAction::Set) } else { arg.action(ArgAction::SetTrue) });
        }
        eval
    })
}

/// The workload flags given to `eval` (flag -> value, "" for a switch).
fn workload_options(eval: &ArgMatches) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for o in eval_options() {
        if o.takes_value {
            if let Some(v) = eval.get_one::<String>(o.flag) {
                out.insert(o.flag.to_string(), v.clone());
            }
        } else if eval.get_flag(o.flag) {
            out.insert(o.flag.to_string(), String::new());
        }
    }
    out
}

/// An error message fit to print: every word (run of non-blank characters) longer than
/// `WORD` characters is cut to its start and its length, and the whole to `TOTAL` characters
/// (head and tail kept), so that a 10 MB string or a 1 MB op name in an input is not echoed.
fn bounded(message: &str) -> String {
    const WORD: usize = 200;
    const TOTAL: usize = 4000;
    let mut out = String::with_capacity(message.len().min(2 * TOTAL));
    let mut rest = message;
    while !rest.is_empty() {
        let blank = rest.find(|c: char| !c.is_whitespace()).unwrap_or(rest.len());
        out.push_str(&rest[..blank]);
        rest = &rest[blank..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..end];
        if word.chars().count() > WORD {
            let head: String = word.chars().take(WORD / 2).collect();
            out.push_str(&format!("{head}... ({} bytes)", word.len()));
        } else {
            out.push_str(word);
        }
        rest = &rest[end..];
    }
    let chars = out.chars().count();
    if chars > TOTAL {
        let head: String = out.chars().take(TOTAL / 2).collect();
        let tail: String = out.chars().skip(chars - TOTAL / 4).collect();
        out = format!("{head} ... ({} characters cut) ... {tail}", chars - TOTAL / 2 - TOTAL / 4);
    }
    out
}

/// Timed copies per device for `backends --bandwidth` (after one warm-up copy).
const BANDWIDTH_COPIES: usize = 20;

/// `adgauge backends`: every device's availability; with `--bandwidth BYTES`, the copy rate of
/// every available GPU device too (a copy that fails or reads back wrong makes the exit code 1);
/// with `--roofline`, the CPU's roofline on the cpu line.
fn backends(json: bool, bandwidth: Option<u64>, roofline: bool, threads: Option<usize>) -> anyhow::Result<Code> {
    if let Some(bytes) = bandwidth {
        // The host holds the uploaded pattern and the copy read back.
        adgauge_datasets::limits::check("backends --bandwidth", 2 * u128::from(bytes)).map_err(bad_input)?;
    }
    // Tools open their devices on first use: listing versions opens nothing.
    let cpu = adgauge_backends::Cpu::new(threads)?;
    let roofline =
        roofline.then(|| cpu.roofline(&adgauge_backends::cpu::roofline::DEFAULT_BINS, environment::ROOFLINE_SEED));
    let tools = tools::Tools::builtin(threads, cpu);
    let console = sinks::Console::new(0, true);
    let width = adgauge_backends::DEVICES.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let mut code = Code::Success;
    for kind in adgauge_backends::DEVICES {
        let d = (kind.probe)();
        let copy = match (bandwidth, kind.copy_bandwidth) {
            (Some(bytes), Some(measure)) if d.available => {
                let bytes = usize::try_from(bytes).map_err(|_| bad_input(format!("--bandwidth {bytes}: too large")))?;
                Some(measure(bytes, BANDWIDTH_COPIES))
            }
            _ => None,
        };
        if matches!(copy, Some(Err(_))) {
            code = code.combine(Code::Failed);
        }
        let roof = roofline.as_ref().filter(|_| d.name == "cpu");
        if matches!(roof, Some(Err(_))) {
            code = code.combine(Code::Failed);
        }
        if json {
            let version = tools.get(d.name).map(|t| t.version());
            let mut v =
                serde_json::json!({"name": d.name, "available": d.available, "detail": d.detail, "version": version});
            match &copy {
                Some(Ok(c)) => {
                    v["copy_bandwidth"] = serde_json::json!({"bytes": c.bytes, "copies": c.copies, "best_s": c.best_s,
                        "median_s": c.median_s, "best_bytes_per_s": c.best_bytes_per_s(),
                        "median_bytes_per_s": c.median_bytes_per_s()});
                }
                Some(Err(e)) => v["copy_bandwidth_error"] = serde_json::json!(e.to_string()),
                None => {}
            }
            match roof {
                Some(Ok(r)) => {
                    let random: Vec<_> = r
                        .random
                        .iter()
                        .map(|x| {
                            serde_json::json!({"bins": x.bins, "reads_per_s": x.reads_per_s,
                            "updates_per_s": x.updates_per_s})
                        })
                        .collect();
                    v["roofline"] = serde_json::json!({"threads": r.threads, "seq_bytes": r.seq_bytes,
                        "seq_read_bytes_per_s": r.seq_read_bytes_per_s, "random_4_byte": random,
                        "seed": environment::ROOFLINE_SEED, "elapsed_s": r.elapsed_s});
                }
                Some(Err(e)) => v["roofline_error"] = serde_json::json!(e.to_string()),
                None => {}
            }
            console.line(&v.to_string());
        } else {
            let state = if d.available { "available" } else { "unavailable" };
            console.line(&format!("{:<width$} {:<12} {}", d.name, state, d.detail));
            match &copy {
                Some(Ok(c)) => console.line(&format!(
                    "{:<width$} {:<12} device-to-device copy of {} bytes, {} copies, checked: best {:.3} ms = {:.1} GB/s, \
                     median {:.3} ms = {:.1} GB/s (bytes read + written)",
                    d.name,
                    "bandwidth",
                    c.bytes,
                    c.copies,
                    c.best_s * 1e3,
                    c.best_bytes_per_s() / 1e9,
                    c.median_s * 1e3,
                    c.median_bytes_per_s() / 1e9
                )),
                Some(Err(e)) => console.line(&format!("{:<width$} {:<12} FAILED: {e}", d.name, "bandwidth")),
                None => {}
            }
            match roof {
                Some(Ok(r)) => {
                    console.line(&format!(
                        "{:<width$} {:<12} {} threads: sequential read {:.1} GB/s ({} MiB, best pass); random 4-byte \
                         reads / updates per second (M), each thread its own bins:",
                        d.name,
                        "roofline",
                        r.threads,
                        r.seq_read_bytes_per_s / 1e9,
                        r.seq_bytes >> 20
                    ));
                    for x in &r.random {
                        console.line(&format!(
                            "{:<width$} {:<12}   k = {:<9} {:>8.1} / {:>8.1}",
                            "",
                            "",
                            x.bins,
                            x.reads_per_s / 1e6,
                            x.updates_per_s / 1e6
                        ));
                    }
                }
                Some(Err(e)) => console.line(&format!("{:<width$} {:<12} FAILED: {e}", d.name, "roofline")),
                None => {}
            }
        }
    }
    Ok(code)
}

fn main() -> ExitCode {
    memory::keep_freed_pages();
    let matches = command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Some(Command::Eval(args)), Some(("eval", eval))) = (cli.command.as_mut(), matches.subcommand()) {
        args.options = workload_options(eval);
    }
    // Without --max-memory the default is read from the system at the first size check and kept
    // (`limits::max_bytes`), not at start-up: gate, report and history never need it.
    if let Some(bytes) = cli.max_memory {
        adgauge_datasets::limits::set_max_bytes(bytes);
    }
    let command = cli.command.unwrap_or(Command::Run(run::RunArgs::default()));
    // The commands that start tools stop them, and keep what they measured, when interrupted.
    if matches!(command, Command::Run(_) | Command::Check(_) | Command::Compare(_)) {
        interrupt::install();
    }
    let result = match command {
        Command::Eval(args) => eval::run(&args, cli.threads).map(|json| {
            sinks::Console::new(0, true).line(&json);
            Code::Success
        }),
        Command::Run(args) => run::run(&args, cli.threads),
        Command::Check(args) => run::check(&args, cli.threads),
        Command::Tool(args) => serve::serve(&args, cli.threads),
        Command::Gate(args) => history::gate_command(&args),
        Command::Compare(args) => compare::compare(&args, cli.threads),
        Command::Merge(args) => history::merge_command(&args),
        Command::Report(args) => history::report_command(&args),
        Command::History(args) => history::history_command(&args),
        Command::Backends { json, bandwidth, roofline } => backends(json, bandwidth, roofline, cli.threads),
    };
    if let Some(signal) = interrupt::signal() {
        if let Err(e) = &result {
            eprintln!("error: {}", bounded(&format!("{e:#}")));
        }
        return ExitCode::from(interrupt::exit_code(signal));
    }
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("error: {}", bounded(&format!("{e:#}")));
            code_of(&e).into()
        }
    }
}

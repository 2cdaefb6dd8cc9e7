//! `adgauge run` (the default command) and `adgauge check`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use adgauge_backends::{Cpu, DType, Device};
use adgauge_reports::{ResultRow, Status, Timing};
use adgauge_workloads::HistWorkload;

use crate::devices::open_cpu;
use crate::exit::{Code, bad_input};
use crate::history::RunWriter;
use crate::runner::{Options, is_unsupported, run_case, validate};
use crate::suite::{CaseSpec, default_suite};

#[derive(Args, Debug, Default)]
pub struct RunArgs {
    /// Only cases whose id contains this text (ids: `adgauge run --list`).
    #[arg(long)]
    pub filter: Option<String>,
    /// List the suite's case ids and exit.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON result row per case (JSON lines) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Backend to run on.
    #[arg(long, default_value = "cpu")]
    pub backend: Option<String>,
    /// Write the run as `<run id>.csv` into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Append the run to this history directory (earlier runs are never rewritten).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Run only shard I of N (1-based, e.g. 2/4): cases are dealt round-robin, deterministically.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<(usize, usize)>,
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("'{s}' is not I/N"))?;
    let i: usize = i
        .trim()
        .parse()
        .map_err(|_| format!("'{i}' is not a shard number"))?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| format!("'{n}' is not a shard count"))?;
    if n == 0 || i == 0 || i > n {
        return Err(format!("shard {i}/{n}: need 1 <= I <= N"));
    }
    Ok((i, n))
}

#[derive(Args, Debug, Default)]
pub struct CheckArgs {
    /// Backend to validate.
    #[arg(long, default_value = "cpu")]
    pub backend: Option<String>,
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
    t.as_ref()
        .map(|t| format!("{:.3}", f(t) * 1e3))
        .unwrap_or_else(|| "-".into())
}

fn ratio(x: Option<f64>) -> String {
    x.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into())
}

fn print_header() {
    println!(
        "{:<15} {:>8} {:>6} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7}  check",
        "workload",
        "n",
        "k",
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
    );
}

fn print_row(row: &ResultRow) {
    let p = |k: &str| row.params.get(k).cloned().unwrap_or_default();
    let both = |t: &Option<Timing>| format!("{}/{}", ms(t, |t| t.min_s), ms(t, |t| t.median_s));
    let status = match row.status {
        Status::Ok => "ok".to_string(),
        other => format!(
            "{}: {}",
            other.name().to_uppercase(),
            row.message.clone().unwrap_or_default()
        ),
    };
    println!(
        "{:<15} {:>8} {:>6} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7}  {}",
        row.workload,
        p("n"),
        p("k"),
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
    );
}

fn code_for(row: &ResultRow) -> Code {
    match row.status {
        Status::Ok | Status::Skipped => Code::Success,
        Status::Failed | Status::Error | Status::Timeout => Code::Failed,
    }
}

pub fn run(args: &RunArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let mut cases = default_suite();
    if let Some((i, n)) = args.shard {
        cases = cases
            .into_iter()
            .enumerate()
            .filter(|(j, _)| j % n == i - 1)
            .map(|(_, c)| c)
            .collect();
    }
    if let Some(f) = &args.filter {
        cases.retain(|c| c.id("cpu").contains(f.as_str()));
        if cases.is_empty() {
            return Err(bad_input(format!(
                "--filter '{f}' matches no case (see `adgauge run --list`)"
            )));
        }
    }
    if args.list {
        for c in &cases {
            println!("{}", c.id("cpu"));
        }
        return Ok(Code::Success);
    }
    let cpu = open_cpu(args.backend.as_deref().unwrap_or("cpu"), threads)?;
    if !args.json {
        println!(
            "adgauge {} on {} — {} cases, seed {}",
            env!("CARGO_PKG_VERSION"),
            cpu.device_name(),
            cases.len(),
            crate::suite::DEFAULT_SEED
        );
        print_header();
    }
    let opts = Options::default();
    let info = crate::environment::run_info();
    let dirs: Vec<PathBuf> = args.out.iter().chain(&args.history).cloned().collect();
    let mut writer = if dirs.is_empty() {
        None
    } else {
        Some(RunWriter::new(dirs, info.clone())?)
    };
    let mut code = Code::Success;
    for c in &cases {
        let row = run_case(&cpu, c, &opts);
        code = code.combine(code_for(&row));
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            print_row(&row);
        }
        std::io::stdout().flush()?;
        if let Some(w) = writer.as_mut() {
            w.push(row)?;
        }
    }
    if let Some(w) = writer {
        for path in w.finish()? {
            eprintln!("wrote run {} to {}", info.run_id, path.display());
        }
    }
    Ok(code)
}

/// Validation cases: every selected workload x rule x dtype, at validation sizes.
fn check_cases(args: &CheckArgs) -> anyhow::Result<Vec<CaseSpec>> {
    let workloads: Vec<HistWorkload> = if args.workload.is_empty() {
        HistWorkload::all()
    } else {
        args.workload
            .iter()
            .map(|name| {
                HistWorkload::parse(name).ok_or_else(|| {
                    let known: Vec<String> = HistWorkload::all().iter().map(|w| w.name()).collect();
                    bad_input(format!(
                        "unknown workload '{name}' (known: {})",
                        known.join(", ")
                    ))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let dtypes: Vec<DType> = args
        .dtype
        .map(|d| vec![d])
        .unwrap_or_else(|| DType::ALL.to_vec());
    let mut out = Vec::new();
    for c in default_suite() {
        if workloads.contains(&c.workload) && c.k == 1000 {
            for &dtype in &dtypes {
                out.push(CaseSpec { dtype, ..c.clone() });
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
            return Err(bad_input(format!(
                "unknown fault '{other}' (known: drop-dest-adjoint)"
            )));
        }
    };
    let cases = check_cases(args)?;
    let cpu: Cpu = open_cpu(args.backend.as_deref().unwrap_or("cpu"), threads)?;
    let mut failures = Vec::new();
    for c in &cases {
        let id = c.id("cpu");
        match validate(&cpu, c, drop_dest_adjoint) {
            Ok(outcomes) => {
                for o in outcomes {
                    let state = match (&o.skipped, o.passed()) {
                        (Some(why), _) => format!("skipped ({why})"),
                        (None, true) => "ok".into(),
                        (None, false) => "FAILED".into(),
                    };
                    println!(
                        "{id:<60} {:<15} worst {:>10.3e}  tol {:>7.1e}  {state}",
                        o.kind.name(),
                        o.worst,
                        o.tolerance
                    );
                    if !o.passed() {
                        failures.push(format!(
                            "{id}: {} worst {:.3e} > tolerance {:.1e}",
                            o.kind.name(),
                            o.worst,
                            o.tolerance
                        ));
                    }
                }
            }
            Err(e) if is_unsupported(&e) => {
                println!("{id:<60} skipped: {e:#}");
            }
            Err(e) => {
                println!("{id:<60} ERROR {e:#}");
                failures.push(format!("{id}: error: {e:#}"));
            }
        }
    }
    if failures.is_empty() {
        println!("all {} cases passed every check", cases.len());
        Ok(Code::Success)
    } else {
        eprintln!("{} failure(s):", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
        Ok(Code::Failed)
    }
}

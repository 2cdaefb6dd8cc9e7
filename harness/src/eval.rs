//! `adgauge eval <workload> --input FILE`: evaluates one explicit input in one mode and prints
//! one JSON object on stdout. The workload (found in the registry) reads the input and writes
//! the JSON; this module picks the device and turns errors into exit codes. Workload-specific
//! flags are declared by the workloads ([`adgauge_workloads::EvalOption`]) and added to the
//! command line at start-up (`main.rs`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use adgauge_backends::{AnyDevice, DType, OpError, open_device};
use adgauge_workloads::{EvalRequest, Mode, WorkloadError};

use crate::exit::{bad_input, unavailable};

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// Workload: `hist-<op>` (add, mul, min, max, logaddexp, hypot, ...) or a classic workload
    /// (`adgauge check` lists every name).
    pub workload: String,
    /// The case file; `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Mode: primal, vjp, jvp or hessian-diag, as the workload offers (default: its first).
    #[arg(long)]
    pub mode: Option<Mode>,
    /// Backend (tool): cpu, cpu-staged, cpu-traced, cpu-jit, cpu-jit-flush, opencl or cuda (`adgauge backends` lists them
    /// with availability).
    #[arg(long, alias = "tool", default_value = "cpu")]
    pub backend: String,
    /// Reverse-mode rule, for workloads that have rules (histograms: auto, special,
    /// general-sort or general-chunked; default auto).
    #[arg(long)]
    pub rule: Option<String>,
    /// Element type of values: f64 or f32.
    #[arg(long, default_value = "f64")]
    pub dtype: DType,
    /// Largest input accepted, in bytes (inputs are read whole; `--input /dev/zero` must end).
    /// Default: the least of 4 GiB and a quarter of the memory limit.
    #[arg(long)]
    pub max_input_bytes: Option<u64>,
    /// The workloads' own flags that were given (filled from the command line in `main.rs`).
    #[arg(skip)]
    pub options: BTreeMap<String, String>,
}

/// The most `--max-input-bytes` defaults to: 4 GiB, above ADBench's largest file (ba20, about
/// 1.2 GB).
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 4 << 30;

/// The most bytes of input read whole (an `eval` file, a line of `adgauge tool`), and how to
/// raise it (for the refusal): `--max-input-bytes` where given, else the least of
/// [`DEFAULT_MAX_INPUT_BYTES`] and a quarter of the memory limit. The input is read whole into
/// a buffer that grows by doubling (to twice its length while it is copied) and is then parsed
/// into values about as large again: an input of more than a quarter of the limit cannot be
/// evaluated within it, and reading it would abort on allocation instead of refusing it.
pub fn input_bound(given: Option<u64>) -> (u64, String) {
    let raise = "raise --max-input-bytes to read it";
    match given {
        Some(bytes) => (bytes, raise.into()),
        None => {
            let limit = adgauge_datasets::limits::max_bytes();
            if limit / 4 < DEFAULT_MAX_INPUT_BYTES {
                let why = format!("a quarter of the memory limit {limit}: raise --max-memory, or {raise}");
                (limit / 4, why)
            } else {
                (DEFAULT_MAX_INPUT_BYTES, raise.into())
            }
        }
    }
}

/// Reads the input whole, refusing more than `max` bytes (`raise` says how to raise it).
fn read_input(path: &PathBuf, max: u64, raise: &str) -> anyhow::Result<(String, String)> {
    let name = path.display().to_string();
    let (name, reader): (String, Box<dyn Read>) = if name == "-" {
        ("<stdin>".into(), Box::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(path).map_err(|e| bad_input(format!("{name}: cannot open: {e}")))?;
        (name, Box::new(f))
    };
    let mut bytes = Vec::new();
    reader
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| bad_input(format!("{name}: cannot read: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(bad_input(format!("{name}: larger than {max} bytes ({raise})")));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        bad_input(format!("{name}: not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })?;
    Ok((name, text))
}

/// Opens the device of `--backend NAME`: an unknown name is bad usage (exit 2), a device that
/// cannot start is unavailable (exit 4, with the reason).
pub fn open_backend(name: &str, threads: Option<usize>) -> anyhow::Result<AnyDevice> {
    open_device(name, threads).map_err(|e| match e {
        OpError::Unsupported(msg) => bad_input(msg),
        other => unavailable(format!("backend {name} is unavailable: {other}")),
    })
}

pub fn run(args: &EvalArgs, threads: Option<usize>) -> anyhow::Result<String> {
    let workload =
        adgauge_workloads::find(&args.workload).filter(|w| w.names().contains(&args.workload)).ok_or_else(|| {
            let known = adgauge_workloads::all_names().join(", ");
            bad_input(format!("unknown workload '{}' (known: {known})", args.workload))
        })?;
    let modes = workload.eval_modes();
    if let Some(mode) = args.mode
        && !modes.contains(&mode)
    {
        let offered: Vec<&str> = modes.iter().map(|m| m.name()).collect();
        return Err(bad_input(format!(
            "{}: --mode {mode} is not offered (offered: {})",
            args.workload,
            offered.join(", ")
        )));
    }
    let rules = workload.rules();
    if let Some(rule) = &args.rule {
        if rules.is_empty() {
            return Err(bad_input(format!("{}: --rule: this workload has no rules", args.workload)));
        }
        if !rules.contains(rule) {
            return Err(bad_input(format!("--rule: unknown rule '{rule}' (known: {})", rules.join(", "))));
        }
    }
    let own: Vec<&str> = workload.eval_options().iter().map(|o| o.flag).collect();
    if let Some(flag) = args.options.keys().find(|f| !own.contains(&f.as_str())) {
        return Err(bad_input(format!("--{flag} does not apply to workload {}", args.workload)));
    }
    let (max, raise) = input_bound(args.max_input_bytes);
    let (source, text) = read_input(&args.input, max, &raise)?;
    let device = open_backend(&args.backend, threads)?;
    let request = EvalRequest {
        name: args.workload.clone(),
        text,
        source,
        mode: args.mode,
        dtype: args.dtype,
        rule: args.rule.clone(),
        options: args.options.clone(),
    };
    workload.eval(&request, &device).map_err(|e| match e {
        WorkloadError::BadInput(msg) => bad_input(msg),
        WorkloadError::Op(op) => anyhow::Error::new(op),
    })
}

//! `adgauge eval <workload> --input FILE`: evaluates one explicit input in one mode and prints
//! one JSON object on stdout.

use std::io::Read;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use adgauge_backends::{DType, HistRule, OpError, Ops};
use adgauge_workloads::HistWorkload;

use crate::case_json::HistCase;
use crate::case_json::{format_object, parse_hist_case};
use crate::devices::open_device;
use crate::exit::bad_input;

/// Which derivative mode to evaluate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// The objective only.
    Primal,
    /// Reverse mode: adjoints of the inputs for a given output adjoint.
    Vjp,
    /// Forward mode: the output tangent for given input tangents.
    Jvp,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// Workload: hist-add, hist-mul, hist-min, hist-max, hist-logaddexp or hist-hypot.
    pub workload: String,
    /// The case file (JSON); `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    #[arg(long, value_enum, default_value = "primal")]
    pub mode: Mode,
    /// Backend: cpu or opencl (`adgauge backends` lists them with availability).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// reduce_by_index reverse rule: auto, special, general-sort or general-chunked.
    #[arg(long, default_value = "auto")]
    pub rule: HistRule,
    /// Element type of values: f64 or f32.
    #[arg(long, default_value = "f64")]
    pub dtype: DType,
}

/// Op errors that come from the input (lengths, dtypes, indices, unsupported rules) are bad input.
pub fn input_error(e: OpError) -> anyhow::Error {
    match e {
        OpError::Device(_) | OpError::Foreign(_) => anyhow::Error::new(e),
        other => bad_input(other.to_string()),
    }
}

fn read_input(path: &PathBuf) -> anyhow::Result<(String, String)> {
    let name = path.display().to_string();
    let mut text = String::new();
    if name == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(|e| bad_input(format!("standard input: {e}")))?;
        return Ok(("<stdin>".into(), text));
    }
    let mut f = std::fs::File::open(path).map_err(|e| bad_input(format!("{name}: cannot open: {e}")))?;
    f.read_to_string(&mut text).map_err(|e| bad_input(format!("{name}: cannot read: {e}")))?;
    Ok((name, text))
}

pub fn run(args: &EvalArgs, threads: Option<usize>) -> anyhow::Result<String> {
    let workload = HistWorkload::parse(&args.workload).ok_or_else(|| {
        let known: Vec<String> = HistWorkload::all().iter().map(|w| w.name()).collect();
        bad_input(format!("unknown workload '{}' (known: {})", args.workload, known.join(", ")))
    })?;
    let (source, text) = read_input(&args.input)?;
    let case = parse_hist_case(&text, &source, workload.op.name())?;
    let device = open_device(&args.backend, threads)?;
    crate::with_device!(&device, |d| eval_on(d, args, workload, &case, &source))
}

/// Evaluates the case on one device.
fn eval_on<D: Ops>(
    device: &D,
    args: &EvalArgs,
    workload: HistWorkload,
    case: &HistCase,
    source: &str,
) -> anyhow::Result<String> {
    let dt = args.dtype;
    let x = workload.upload(device, &case.data, dt).map_err(input_error)?;
    let out = match args.mode {
        Mode::Primal => {
            let hist = device.to_vec(&workload.primal(device, &x).map_err(input_error)?)?;
            format_object(&[("hist", &hist)], dt)
        }
        Mode::Vjp => {
            let bar = case
                .hist_bar
                .as_ref()
                .ok_or_else(|| bad_input(format!("{source}: field hist_bar: required for --mode vjp")))?;
            let bar = device.tensor(bar, &[bar.len()], dt).map_err(input_error)?;
            let r = workload.vjp(device, args.rule, &x, &bar).map_err(input_error)?;
            let (hist, vals_bar, dest_bar) =
                (device.to_vec(&r.hist)?, device.to_vec(&r.vals_bar)?, device.to_vec(&r.dest_bar)?);
            format_object(&[("hist", &hist), ("vals_bar", &vals_bar), ("dest_bar", &dest_bar)], dt)
        }
        Mode::Jvp => {
            let missing = |f: &str| bad_input(format!("{source}: field {f}: required for --mode jvp"));
            let vd = case.vals_dot.as_ref().ok_or_else(|| missing("vals_dot"))?;
            let dd = case.dest_dot.as_ref().ok_or_else(|| missing("dest_dot"))?;
            let vd = device.tensor(vd, &[vd.len()], dt).map_err(input_error)?;
            let dd = device.tensor(dd, &[dd.len()], dt).map_err(input_error)?;
            let (hist, hist_dot) = workload.jvp(device, &x, &dd, &vd).map_err(input_error)?;
            format_object(&[("hist", &device.to_vec(&hist)?), ("hist_dot", &device.to_vec(&hist_dot)?)], dt)
        }
    };
    Ok(out)
}

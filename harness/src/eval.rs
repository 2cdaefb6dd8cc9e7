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
    /// Workload: hist-add, hist-mul, hist-min, hist-max, hist-logaddexp, hist-hypot, kmeans, gmm, lstm or ba.
    pub workload: String,
    /// The case file (JSON); `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Mode (default: primal; for kmeans everything: cost, gradient, Hessian diagonal, dir).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Backend: cpu or opencl (`adgauge backends` lists them with availability).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// reduce_by_index reverse rule: auto, special, general-sort or general-chunked.
    #[arg(long, default_value = "auto")]
    pub rule: HistRule,
    /// Element type of values: f64 or f32.
    #[arg(long, default_value = "f64")]
    pub dtype: DType,
    /// gmm: the file holds one point line for all n points (detected when absent).
    #[arg(long)]
    pub gmm_replicate_point: bool,
    /// gmm: ADBench's objective (default) or GradBench's revision (the prior's sign; the
    /// gradient printed as {"alpha", "mu", "q", "l"}).
    #[arg(long, default_value = "adbench")]
    pub gmm_variant: adgauge_workloads::gmm::GmmVariant,
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
    if args.workload == "kmeans" {
        return run_kmeans(args, threads);
    }
    if args.workload == "gmm" {
        return run_gmm(args, threads);
    }
    if args.workload == "lstm" {
        return run_lstm(args, threads);
    }
    if args.workload == "ba" {
        return crate::ba_case::run_eval(args, threads);
    }
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
    let out = match args.mode.unwrap_or(Mode::Primal) {
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

/// `adgauge eval kmeans`: without `--mode` (or with vjp) the cost, the gradient (reverse mode),
/// the Hessian diagonal (forward over reverse) and the Newton direction; `--mode primal` the
/// cost only. Forward mode alone is not offered for k-means.
fn run_kmeans(args: &EvalArgs, threads: Option<usize>) -> anyhow::Result<String> {
    let (source, text) = read_input(&args.input)?;
    let data = crate::kmeans_case::parse_kmeans_case(&text, &source)?;
    let device = open_device(&args.backend, threads)?;
    crate::with_device!(&device, |d| kmeans_on(d, args, &data))
}

fn kmeans_on<D: Ops>(
    device: &D,
    args: &EvalArgs,
    data: &adgauge_datasets::kmeans::KmeansData,
) -> anyhow::Result<String> {
    use adgauge_workloads::kmeans;
    let dt = args.dtype;
    let x = kmeans::upload(device, data, dt).map_err(input_error)?;
    match args.mode {
        Some(Mode::Primal) => {
            let c = device.to_vec(&kmeans::cost(device, &x.points, &x.centres).map_err(input_error)?)?;
            Ok(format!("{{\"cost\": {}}}", crate::case_json::format_number(c[0], dt)))
        }
        Some(Mode::Jvp) => Err(bad_input(
            "kmeans: --mode jvp is not offered (the gradient is by reverse mode, the Hessian diagonal by \
             forward over reverse; omit --mode)",
        )),
        None | Some(Mode::Vjp) => {
            let out = kmeans::evaluate(device, &x).map_err(input_error)?;
            Ok(crate::kmeans_case::format_kmeans(&out, data.d, dt))
        }
    }
}

/// `adgauge eval gmm --input <ADBench .txt>`: `{"objective": x}` (primal), with
/// `"gradient": [alphas, means, icf]` by reverse mode (vjp) or by one forward sweep per
/// parameter (jvp).
fn run_gmm(args: &EvalArgs, threads: Option<usize>) -> anyhow::Result<String> {
    let replicate = if args.gmm_replicate_point { Some(true) } else { None };
    let g = adgauge_datasets::gmm::GmmInput::read(&args.input, replicate).map_err(|e| bad_input(e.to_string()))?;
    let device = open_device(&args.backend, threads)?;
    crate::with_device!(&device, |d| gmm_on(d, args, &g))
}

fn gmm_on<D: Ops>(device: &D, args: &EvalArgs, g: &adgauge_datasets::gmm::GmmInput) -> anyhow::Result<String> {
    use adgauge_workloads::gmm;
    let dt = args.dtype;
    let mut x = gmm::upload(device, g, dt).map_err(input_error)?;
    x.variant = args.gmm_variant;
    let with_gradient = |(f, gr): (f64, Vec<f64>)| match args.gmm_variant {
        gmm::GmmVariant::Adbench => objective_json(f, Some(&gr), dt),
        gmm::GmmVariant::GradBench => gradbench_gmm_json(f, &gr, g.d, g.k, dt),
    };
    Ok(match args.mode.unwrap_or(Mode::Primal) {
        Mode::Primal => objective_json(device.to_vec(&gmm::objective(device, &x).map_err(input_error)?)?[0], None, dt),
        Mode::Vjp => with_gradient(gmm::gradient(device, &x).map_err(input_error)?),
        Mode::Jvp => with_gradient(gmm::gradient_forward(device, &x).map_err(input_error)?),
    })
}

/// `adgauge eval lstm --input <ADBench .txt>`: `{"objective": x}` (primal), with
/// `"gradient": [main, extra]` by reverse mode (vjp) or by one forward sweep per parameter (jvp).
fn run_lstm(args: &EvalArgs, threads: Option<usize>) -> anyhow::Result<String> {
    let s = adgauge_datasets::lstm::LstmInput::read(&args.input).map_err(|e| bad_input(e.to_string()))?;
    let device = open_device(&args.backend, threads)?;
    crate::with_device!(&device, |d| lstm_on(d, args, &s))
}

fn lstm_on<D: Ops>(device: &D, args: &EvalArgs, s: &adgauge_datasets::lstm::LstmInput) -> anyhow::Result<String> {
    use adgauge_workloads::lstm;
    let dt = args.dtype;
    let x = lstm::upload(device, s, dt).map_err(input_error)?;
    let with_gradient = |(f, gr): (f64, Vec<f64>)| objective_json(f, Some(&gr), dt);
    Ok(match args.mode.unwrap_or(Mode::Primal) {
        Mode::Primal => objective_json(device.to_vec(&lstm::objective(device, &x).map_err(input_error)?)?[0], None, dt),
        Mode::Vjp => with_gradient(lstm::gradient(device, &x).map_err(input_error)?),
        Mode::Jvp => with_gradient(lstm::gradient_forward(device, &x).map_err(input_error)?),
    })
}

/// GradBench's GMM output: `{"objective": x, "gradient": {"alpha": [K], "mu": [[d]..K],
/// "q": [[d]..K], "l": [[d(d-1)/2]..K]}}` (l per component in ADBench's column-by-column order).
fn gradbench_gmm_json(f: f64, grad: &[f64], d: usize, k: usize, dt: DType) -> String {
    use crate::case_json::{format_array, format_number, format_rows};
    let [alpha, mu, q, l] = adgauge_workloads::gmm::split_gradbench(d, k, grad);
    format!(
        "{{\"objective\": {}, \"gradient\": {{\"alpha\": {}, \"mu\": {}, \"q\": {}, \"l\": {}}}}}",
        format_number(f, dt),
        format_array(&alpha, dt),
        format_rows(&mu, k, dt),
        format_rows(&q, k, dt),
        format_rows(&l, k, dt)
    )
}

/// `{"objective": x}`, with `"gradient": [...]` when there is one (GMM, LSTM).
fn objective_json(f: f64, gradient: Option<&[f64]>, dt: DType) -> String {
    let num = |v: f64| crate::case_json::format_number(v, dt);
    match gradient {
        None => format!("{{\"objective\": {}}}", num(f)),
        Some(g) => {
            let parts: Vec<String> = g.iter().map(|&v| num(v)).collect();
            format!("{{\"objective\": {}, \"gradient\": [{}]}}", num(f), parts.join(", "))
        }
    }
}

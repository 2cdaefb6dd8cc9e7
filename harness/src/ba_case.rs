//! Bundle adjustment in the harness: `adgauge eval ba` (an ADBench BA file in, one JSON object
//! out), the BA case of suites and `adgauge check` (validation through [`FlatFn`] and against the
//! hand-derived Jacobian, timing of the objective and of both Jacobians). `classic.rs` dispatches
//! its `ClassicKind::Ba` arms here.
//!
//! JSON of `adgauge eval ba`: `{"reproj_err": [2p], "w_err": [p]}` (primal), with
//! `"jacobian": {"nrows", "ncols", "rows", "cols", "vals"}` (ADBench's CSR layout, see
//! `adgauge_workloads::ba`) by reverse sweeps (vjp) or forward sweeps (jvp).

use adgauge_backends::{Cpu, DType, Device, Ops};
use adgauge_datasets::ba::BaInput;
use adgauge_workloads::ba::{self, BaInputs, BaOutput};

use crate::case_json::format_array;
use crate::eval::{EvalArgs, Mode as EvalMode, input_error};
use crate::exit::bad_input;
use crate::suite::Mode;
use crate::validation::{self, CheckKind, FlatFn, Outcome};

/// Most Jacobian entries `adgauge eval ba` prints (31 per observation): ADBench's largest file
/// (ba20, p = 28987644) would need about 14 GB for its Jacobian and a JSON text many times that.
pub const MAX_EVAL_JACOBIAN_ENTRIES: usize = 1 << 27;

/// `adgauge eval ba --input <ADBench .txt>`.
pub fn run_eval(args: &EvalArgs, threads: Option<usize>) -> anyhow::Result<String> {
    let b = BaInput::read(&args.input).map_err(|e| bad_input(e.to_string()))?;
    let entries = (2 * ba::N_GATHERED + 1).saturating_mul(b.p);
    if args.mode.is_some_and(|m| m != EvalMode::Primal) && entries > MAX_EVAL_JACOBIAN_ENTRIES {
        return Err(bad_input(format!(
            "{}: the Jacobian of p = {} observations has {entries} entries, more than eval prints \
             ({MAX_EVAL_JACOBIAN_ENTRIES}); use --mode primal, or time it in a suite (workload: ba)",
            args.input.display(),
            b.p
        )));
    }
    let device = crate::devices::open_device(&args.backend, threads)?;
    crate::with_device!(&device, |d| eval_on(d, args, &b))
}

fn eval_on<D: Ops>(device: &D, args: &EvalArgs, b: &BaInput) -> anyhow::Result<String> {
    let dt = args.dtype;
    let x = ba::upload(device, b, dt).map_err(input_error)?;
    let out = match args.mode.unwrap_or(EvalMode::Primal) {
        EvalMode::Primal => ba::objective(device, &x),
        EvalMode::Vjp => ba::jacobian_reverse(device, &x),
        EvalMode::Jvp => ba::jacobian_forward(device, &x),
    }
    .map_err(input_error)?;
    Ok(format_output(&out, dt))
}

/// The JSON object of `adgauge eval ba`.
pub fn format_output(out: &BaOutput, dt: DType) -> String {
    let ints = |xs: &[usize]| format!("[{}]", xs.iter().map(usize::to_string).collect::<Vec<_>>().join(", "));
    let mut s =
        format!("{{\"reproj_err\": {}, \"w_err\": {}", format_array(&out.reproj_err, dt), format_array(&out.w_err, dt));
    if let Some(j) = &out.jacobian {
        s += &format!(
            ", \"jacobian\": {{\"nrows\": {}, \"ncols\": {}, \"rows\": {}, \"cols\": {}, \"vals\": {}}}",
            j.pattern.nrows,
            j.pattern.ncols,
            ints(&j.pattern.rows),
            ints(&j.pattern.cols),
            format_array(&j.vals, dt)
        );
    }
    s + "}"
}

/// BA as a flat function: x = [cams (11n), points (3m), weights (p)], y = [reproj_err (2p, x and
/// y per observation), w_err (p)], at a point rounded to the dtype under test.
///
/// BA's parameters span four orders of magnitude (rotations about 0.05, focal lengths about
/// 1000), and the finite differences of `validation.rs` take one step for all coordinates,
/// scaled by the largest: a step suited to f would swamp the rotations in truncation error. So
/// the flat function sees every coordinate in its own unit, a power of two `scale[k]` near its
/// magnitude (x = scale * x_flat). Scaling by powers of two is exact, so the checks validate
/// exactly J diag(scale): `jvp(v) = J (scale * v)`, `vjp(w) = scale * J^T w`.
pub struct BaFlat<D: Ops> {
    /// Runs the derivatives (the device under test).
    device: D,
    /// Runs the f64 primal for finite differences.
    cpu: Cpu,
    dtype: DType,
    input: BaInput,
    scale: Vec<f64>,
    x0: Vec<f64>,
}

impl<D: Ops> BaFlat<D> {
    pub fn new(device: D, cpu: Cpu, dtype: DType, input: &BaInput) -> BaFlat<D> {
        let round = |xs: &[f64]| -> Vec<f64> { xs.iter().map(|&x| dtype.round(x)).collect() };
        let input = BaInput {
            cams: round(&input.cams),
            x: round(&input.x),
            w: round(&input.w),
            feats: round(&input.feats),
            ..input.clone()
        };
        let raw: Vec<f64> = input.cams.iter().chain(&input.x).chain(&input.w).copied().collect();
        let scale: Vec<f64> = raw.iter().map(|&v| 2f64.powi(v.abs().max(1.0).log2().round() as i32)).collect();
        let x0 = raw.iter().zip(&scale).map(|(v, s)| v / s).collect();
        BaFlat { device, cpu, dtype, input, scale, x0 }
    }

    fn at(&self, x: &[f64]) -> BaInput {
        let x: Vec<f64> = x.iter().zip(&self.scale).map(|(v, s)| v * s).collect();
        let (nc, nx) = (self.input.cams.len(), self.input.x.len());
        BaInput { cams: x[..nc].to_vec(), x: x[nc..nc + nx].to_vec(), w: x[nc + nx..].to_vec(), ..self.input.clone() }
    }

    fn uploaded(&self) -> anyhow::Result<BaInputs<D>> {
        Ok(ba::upload(&self.device, &self.input, self.dtype)?)
    }

    /// The dense Jacobians (row-major 3p x n_in) by reverse sweeps, by forward sweeps and by hand.
    pub fn jacobians(&self) -> anyhow::Result<[Vec<f64>; 3]> {
        let x = self.uploaded()?;
        let dense = |o: BaOutput| o.jacobian.map(|j| j.to_dense()).unwrap_or_default();
        Ok([
            dense(ba::jacobian_reverse(&self.device, &x)?),
            dense(ba::jacobian_forward(&self.device, &x)?),
            dense(ba::manual_in(&self.input, self.dtype)),
        ])
    }
}

impl<D: Ops> FlatFn for BaFlat<D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        3 * self.input.p
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> anyhow::Result<Vec<f64>> {
        let b = ba::upload(&self.cpu, &self.at(x), DType::F64)?;
        let out = ba::objective(&self.cpu, &b)?;
        Ok(out.reproj_err.into_iter().chain(out.w_err).collect())
    }
    fn vjp(&self, w: &[f64]) -> anyhow::Result<Vec<f64>> {
        let g = ba::vjp(&self.device, &self.uploaded()?, w)?;
        Ok(g.iter().zip(&self.scale).map(|(g, s)| g * s).collect())
    }
    fn jvp(&self, v: &[f64]) -> anyhow::Result<Vec<f64>> {
        let v: Vec<f64> = v.iter().zip(&self.scale).map(|(v, s)| v * s).collect();
        Ok(ba::jvp(&self.device, &self.uploaded()?, &v)?)
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        // Smooth near x0: the only branch (the small-angle fallback) is taken at a rotation of
        // exactly zero, and the validation problems have none.
        None
    }
}

/// The validation checks at size (n, m, p) on a problem with distinct cameras, points and
/// observations (replicated values would hide indexing mistakes): dot-product test, finite
/// differences, the full Jacobian by one-hot VJPs against one-hot JVPs, and the sparse
/// Jacobians by reverse and by forward sweeps against the hand-derived one. The derivatives run
/// on `device`, the f64 primal of the finite differences on `cpu`.
pub fn validate<D: Ops>(
    device: &D,
    cpu: &Cpu,
    (n, m, p): (usize, usize, usize),
    dt: DType,
    seed: u64,
) -> anyhow::Result<Vec<Outcome>> {
    let f = BaFlat::new(device.clone(), cpu.clone(), dt, &BaInput::generate_varied(n, m, p, seed));
    let mut out = vec![validation::dot_product_test(&f, dt, seed)?];
    let fd = validation::finite_difference(&f, dt, seed)?;
    out.push(validation::fd_jvp_test(&f, dt, &fd)?);
    out.push(validation::fd_vjp_test(&f, dt, &fd)?);
    let mut full = validation::full_jacobian_test(&f, dt)?;
    if dt == DType::F32 {
        // In f32 the rotation columns are ill-conditioned: d err / d r is a sum of terms about a
        // hundred times larger than itself (cancellation in d Xc / d r), so two correct f32
        // sweeps (one-hot VJPs and JVPs) differ by up to about 2e-5 there, as each differs from
        // the f64 Jacobian. The f32 bound of the comparisons with a reference applies.
        full.tolerance = validation::tolerance(CheckKind::Manual, DType::F32);
    }
    out.push(full);
    let [reverse, forward, manual] = f.jacobians()?;
    out.push(validation::compare(CheckKind::Manual, dt, &reverse, &manual));
    out.push(validation::compare(CheckKind::ManualJvp, dt, &forward, &manual));
    Ok(out)
}

/// A suite case's problem: ADBench-like (replicated, as the ADBench files are) at its size.
pub fn prepare<D: Device>(
    device: &D,
    (n, m, p): (usize, usize, usize),
    dt: DType,
    seed: u64,
) -> anyhow::Result<BaInputs<D>> {
    Ok(ba::upload(device, &BaInput::generate(n, m, p, seed), dt)?)
}

/// One timed evaluation: primal = the residuals, vjp = the Jacobian by reverse sweeps, jvp = by
/// forward sweeps (results read back and dropped).
pub fn evaluate<D: Device>(device: &D, x: &BaInputs<D>, mode: Mode) -> anyhow::Result<()> {
    drop(match mode {
        Mode::Primal => ba::objective(device, x)?,
        Mode::Vjp => ba::jacobian_reverse(device, x)?,
        Mode::Jvp => ba::jacobian_forward(device, x)?,
    });
    Ok(())
}

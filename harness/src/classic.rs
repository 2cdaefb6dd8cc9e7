//! The classic AD workloads in suites and `adgauge check`: k-means (gradient and, by
//! forward-over-reverse, the Hessian diagonal), GMM and LSTM (ADBench's objectives and
//! gradients). Each case is validated at a small size through [`FlatFn`] (dot-product test,
//! finite differences, and the hand-derived "manual" derivative as an independent oracle) with
//! the derivatives computed on the device under test and the f64 reference values on the CPU,
//! and timed at its size on the device: primal = the objective, vjp = objective + gradient by
//! reverse mode, jvp = one directional derivative by forward mode.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use adgauge_backends::{Cpu, DType, Device, Forward, Ops, TensorMeta};
use adgauge_datasets::gmm::GmmInput;
use adgauge_datasets::kmeans::{KmeansData, generate as generate_kmeans};
use adgauge_datasets::lstm::LstmInput;
use adgauge_reports::{ResultRow, Status, Timing};
use adgauge_workloads::{gmm, kmeans, lstm};

use crate::kmeans_case::KmeansFlat;
use crate::memory::peak_during;
use crate::suite::Mode;
use crate::timing::{Budget, measure};
use crate::validation::{self, CheckKind, FlatFn, Outcome};

/// Which classic workload, with its sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassicKind {
    /// n points in d dimensions, k centres.
    Kmeans { n: usize, k: usize, d: usize },
    /// n points in d dimensions, k components (ADBench's generator).
    Gmm { d: usize, k: usize, n: usize },
    /// l layers, c characters of b bits (ADBench's D-LSTM; its files have b = 14).
    Lstm { l: usize, c: usize, b: usize },
    /// Bundle adjustment: n cameras, m points, p observations (see `ba_case.rs`).
    Ba { n: usize, m: usize, p: usize },
}

/// One classic case of a suite.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassicSpec {
    pub kind: ClassicKind,
    pub dtype: DType,
    pub seed: u64,
    pub backend: String,
    pub modes: Vec<Mode>,
    pub validate: bool,
}

impl ClassicSpec {
    pub fn workload(&self) -> &'static str {
        match self.kind {
            ClassicKind::Kmeans { .. } => "kmeans",
            ClassicKind::Gmm { .. } => "gmm",
            ClassicKind::Lstm { .. } => "lstm",
            ClassicKind::Ba { .. } => "ba",
        }
    }

    pub fn params(&self) -> BTreeMap<String, String> {
        let sizes = match self.kind {
            ClassicKind::Kmeans { n, k, d } | ClassicKind::Gmm { d, k, n } => [("n", n), ("k", k), ("d", d)],
            ClassicKind::Lstm { l, c, b } => [("l", l), ("c", c), ("b", b)],
            ClassicKind::Ba { n, m, p } => [("n", n), ("m", m), ("p", p)],
        };
        sizes.into_iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    pub fn id(&self) -> String {
        adgauge_reports::case_id(self.workload(), &self.params(), &self.backend, self.dtype.name(), "-")
    }

    pub fn empty_row(&self, threads: usize) -> ResultRow {
        ResultRow::unmeasured(self.workload(), self.params(), &self.backend, self.dtype.name(), "-", threads, self.seed)
    }

    /// The same case at validation size (small enough for finite differences on every
    /// coordinate and a full Jacobian).
    fn small(&self) -> ClassicKind {
        match self.kind {
            ClassicKind::Kmeans { n, k, d } => ClassicKind::Kmeans { n: n.min(200), k: k.min(5), d: d.min(4) },
            ClassicKind::Gmm { d, k, n } => ClassicKind::Gmm { d: d.min(3), k: k.min(3), n: n.min(50) },
            ClassicKind::Lstm { l, c, b } => ClassicKind::Lstm { l: l.min(2), c: c.min(6), b: b.min(4) },
            ClassicKind::Ba { n, m, p } => ClassicKind::Ba { n: n.min(3), m: m.min(10), p: p.min(30) },
        }
    }
}

/// A classic workload whose output is one objective of a flat parameter vector (GMM, LSTM):
/// what [`ObjectiveFlat`] needs to validate it.
pub trait ScalarObjective {
    type Input: Clone;
    /// The input with every number rounded to `dtype` (derivatives are taken at that point).
    fn rounded(input: &Self::Input, dtype: DType) -> Self::Input;
    /// The parameters, flat, in the gradient's layout.
    fn params(input: &Self::Input) -> Vec<f64>;
    /// The input with other parameters (same layout as [`ScalarObjective::params`]).
    fn with_params(input: &Self::Input, x: &[f64]) -> Self::Input;
    /// The objective in f64 on the CPU.
    fn objective_f64(cpu: &Cpu, input: &Self::Input) -> adgauge_backends::Result<f64>;
    /// The gradient by reverse mode on `device` in `dtype`.
    fn gradient<D: Device>(device: &D, input: &Self::Input, dtype: DType) -> adgauge_backends::Result<Vec<f64>>;
    /// The derivative along `v` by one forward sweep on `device` in `dtype`.
    fn directional<D: Device>(
        device: &D,
        input: &Self::Input,
        dtype: DType,
        v: &[f64],
    ) -> adgauge_backends::Result<f64>;
    /// The hand-derived gradient in `dtype`.
    fn manual_gradient(input: &Self::Input, dtype: DType) -> Vec<f64>;
}

/// GMM: parameters [alphas, means, icf].
pub struct GmmObjective;

impl ScalarObjective for GmmObjective {
    type Input = GmmInput;
    fn rounded(g: &GmmInput, dtype: DType) -> GmmInput {
        let round = |xs: &[f64]| -> Vec<f64> { xs.iter().map(|&x| dtype.round(x)).collect() };
        GmmInput { alphas: round(&g.alphas), means: round(&g.means), icf: round(&g.icf), x: round(&g.x), ..g.clone() }
    }
    fn params(g: &GmmInput) -> Vec<f64> {
        g.alphas.iter().chain(&g.means).chain(&g.icf).copied().collect()
    }
    fn with_params(g: &GmmInput, x: &[f64]) -> GmmInput {
        let (a, rest) = x.split_at(g.alphas.len());
        let (m, q) = rest.split_at(g.means.len());
        GmmInput { alphas: a.to_vec(), means: m.to_vec(), icf: q.to_vec(), ..g.clone() }
    }
    fn objective_f64(cpu: &Cpu, g: &GmmInput) -> adgauge_backends::Result<f64> {
        Ok(cpu.to_vec(&gmm::objective(cpu, &gmm::upload(cpu, g, DType::F64)?)?)?[0])
    }
    fn gradient<D: Device>(d: &D, g: &GmmInput, dtype: DType) -> adgauge_backends::Result<Vec<f64>> {
        Ok(gmm::gradient(d, &gmm::upload(d, g, dtype)?)?.1)
    }
    fn directional<D: Device>(d: &D, g: &GmmInput, dtype: DType, v: &[f64]) -> adgauge_backends::Result<f64> {
        Ok(gmm::directional(d, &gmm::upload(d, g, dtype)?, v)?.1)
    }
    fn manual_gradient(g: &GmmInput, dtype: DType) -> Vec<f64> {
        gmm::manual_in(g, dtype).1
    }
}

/// LSTM: parameters [main, extra].
pub struct LstmObjective;

impl ScalarObjective for LstmObjective {
    type Input = LstmInput;
    fn rounded(s: &LstmInput, dtype: DType) -> LstmInput {
        let round = |xs: &[f64]| -> Vec<f64> { xs.iter().map(|&x| dtype.round(x)).collect() };
        LstmInput {
            main_params: round(&s.main_params),
            extra_params: round(&s.extra_params),
            state: round(&s.state),
            sequence: round(&s.sequence),
            ..s.clone()
        }
    }
    fn params(s: &LstmInput) -> Vec<f64> {
        s.main_params.iter().chain(&s.extra_params).copied().collect()
    }
    fn with_params(s: &LstmInput, x: &[f64]) -> LstmInput {
        let (m, e) = x.split_at(s.main_params.len());
        LstmInput { main_params: m.to_vec(), extra_params: e.to_vec(), ..s.clone() }
    }
    fn objective_f64(cpu: &Cpu, s: &LstmInput) -> adgauge_backends::Result<f64> {
        Ok(cpu.to_vec(&lstm::objective(cpu, &lstm::upload(cpu, s, DType::F64)?)?)?[0])
    }
    fn gradient<D: Device>(d: &D, s: &LstmInput, dtype: DType) -> adgauge_backends::Result<Vec<f64>> {
        Ok(lstm::gradient(d, &lstm::upload(d, s, dtype)?)?.1)
    }
    fn directional<D: Device>(d: &D, s: &LstmInput, dtype: DType, v: &[f64]) -> adgauge_backends::Result<f64> {
        Ok(lstm::directional(d, &lstm::upload(d, s, dtype)?, v)?.1)
    }
    fn manual_gradient(s: &LstmInput, dtype: DType) -> Vec<f64> {
        lstm::manual_in(s, dtype).1
    }
}

/// A [`ScalarObjective`] as a flat function with one output: derivatives on `device` in the
/// dtype, f64 values on the CPU. Both objectives are smooth everywhere (logsumexp with its
/// maximum subtracted; sigmoid, tanh, exp and the log of a positive sum), so finite differences
/// are always meaningful.
pub struct ObjectiveFlat<W: ScalarObjective, D: Device> {
    cpu: Cpu,
    device: D,
    dtype: DType,
    input: W::Input,
    x0: Vec<f64>,
}

impl<W: ScalarObjective, D: Device> ObjectiveFlat<W, D> {
    pub fn new(cpu: Cpu, device: D, dtype: DType, input: &W::Input) -> Self {
        let input = W::rounded(input, dtype);
        let x0 = W::params(&input);
        ObjectiveFlat { cpu, device, dtype, input, x0 }
    }

    pub fn manual_gradient(&self) -> Vec<f64> {
        W::manual_gradient(&self.input, self.dtype)
    }
}

impl<W: ScalarObjective, D: Device> FlatFn for ObjectiveFlat<W, D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        1
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> anyhow::Result<Vec<f64>> {
        Ok(vec![W::objective_f64(&self.cpu, &W::with_params(&self.input, x))?])
    }
    fn vjp(&self, w: &[f64]) -> anyhow::Result<Vec<f64>> {
        Ok(W::gradient(&self.device, &self.input, self.dtype)?.into_iter().map(|v| v * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> anyhow::Result<Vec<f64>> {
        Ok(vec![W::directional(&self.device, &self.input, self.dtype, v)?])
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        None
    }
}

/// The validation checks of a classic case: derivatives on `device` (the device under test),
/// finite differences in f64 on `cpu`.
pub fn validate<D: Device>(cpu: &Cpu, device: &D, spec: &ClassicSpec) -> anyhow::Result<Vec<Outcome>> {
    let dt = spec.dtype;
    let mut out = Vec::new();
    let standard = |f: &dyn FlatFn, manual: Vec<f64>, out: &mut Vec<Outcome>| -> anyhow::Result<()> {
        out.push(validation::dot_product_test(f, dt, spec.seed)?);
        let fd = validation::finite_difference(f, dt, spec.seed)?;
        out.push(validation::fd_jvp_test(f, dt, &fd)?);
        out.push(validation::fd_vjp_test(f, dt, &fd)?);
        out.push(validation::compare(CheckKind::Manual, dt, &f.vjp(&[1.0])?, &manual));
        Ok(())
    };
    match spec.small() {
        ClassicKind::Kmeans { n, k, d } => {
            let f = KmeansFlat::new(cpu.clone(), device.clone(), dt, &generate_kmeans(n, k, d, spec.seed));
            standard(&f, f.manual_gradient(), &mut out)?;
            let (ad, manual) = f.hessians()?;
            out.push(validation::compare(CheckKind::ManualHessian, dt, &ad, &manual));
        }
        ClassicKind::Gmm { d, k, n } => {
            let f = ObjectiveFlat::<GmmObjective, _>::new(
                cpu.clone(),
                device.clone(),
                dt,
                &GmmInput::generate(d, k, n, spec.seed),
            );
            standard(&f, f.manual_gradient(), &mut out)?;
        }
        ClassicKind::Lstm { l, c, b } => {
            let input = LstmInput::generate(l, c, b, spec.seed);
            let f = ObjectiveFlat::<LstmObjective, _>::new(cpu.clone(), device.clone(), dt, &input);
            standard(&f, f.manual_gradient(), &mut out)?;
        }
        ClassicKind::Ba { n, m, p } => out = crate::ba_case::validate(device, cpu, (n, m, p), dt, spec.seed)?,
    }
    Ok(out)
}

enum Prepared<D: Ops> {
    Kmeans(kmeans::KmeansInputs<D>),
    Gmm(gmm::GmmInputs<D>),
    Lstm(lstm::LstmInputs<D>),
    Ba(adgauge_workloads::ba::BaInputs<D>),
}

fn prepare<D: Device>(device: &D, spec: &ClassicSpec) -> anyhow::Result<Prepared<D>> {
    Ok(match spec.kind {
        ClassicKind::Kmeans { n, k, d } => {
            let data: KmeansData = generate_kmeans(n, k, d, spec.seed);
            Prepared::Kmeans(kmeans::upload(device, &data, spec.dtype)?)
        }
        ClassicKind::Gmm { d, k, n } => {
            Prepared::Gmm(gmm::upload(device, &GmmInput::generate(d, k, n, spec.seed), spec.dtype)?)
        }
        ClassicKind::Lstm { l, c, b } => {
            Prepared::Lstm(lstm::upload(device, &LstmInput::generate(l, c, b, spec.seed), spec.dtype)?)
        }
        ClassicKind::Ba { n, m, p } => Prepared::Ba(crate::ba_case::prepare(device, (n, m, p), spec.dtype, spec.seed)?),
    })
}

/// One evaluation of `mode` (results dropped; the device synchronised).
fn evaluate<D: Device>(device: &D, p: &Prepared<D>, mode: Mode) -> anyhow::Result<()> {
    match (p, mode) {
        (Prepared::Kmeans(x), Mode::Primal) => drop(kmeans::cost(device, &x.points, &x.centres)?),
        (Prepared::Kmeans(x), Mode::Vjp) => drop(kmeans::gradient(device, x)?),
        (Prepared::Kmeans(x), Mode::Jvp) => {
            let f = Forward::new(device.clone());
            let ones = device.full(x.centres.shape(), 1.0, x.centres.dtype())?;
            let c = f.dual(x.centres.clone(), ones)?;
            drop(kmeans::cost(&f, &f.lift(x.points.clone()), &c)?);
        }
        (Prepared::Gmm(g), Mode::Primal) => drop(gmm::objective(device, g)?),
        (Prepared::Gmm(g), Mode::Vjp) => drop(gmm::gradient(device, g)?),
        (Prepared::Gmm(g), Mode::Jvp) => {
            let np = g.k + g.k * g.d + g.k * adgauge_datasets::gmm::icf_size(g.d);
            let _ = gmm::directional(device, g, &vec![1.0; np])?;
        }
        (Prepared::Lstm(x), Mode::Primal) => drop(lstm::objective(device, x)?),
        (Prepared::Lstm(x), Mode::Vjp) => drop(lstm::gradient(device, x)?),
        (Prepared::Lstm(x), Mode::Jvp) => drop(lstm::directional(device, x, &vec![1.0; x.num_params()])?),
        (Prepared::Ba(x), mode) => crate::ba_case::evaluate(device, x, mode)?,
    }
    device.synchronize()?;
    Ok(())
}

/// Runs one classic case (validation, timing and memory on `device`; f64 references on the
/// CPU); never panics.
pub fn run_case<D: Device>(cpu: &Cpu, device: &D, spec: &ClassicSpec, budget: &Budget) -> ResultRow {
    let mut row = spec.empty_row(device.threads());
    let compiled_before = device.kernel_compile_time();
    let result = catch_unwind(AssertUnwindSafe(|| -> anyhow::Result<()> {
        if spec.validate {
            let outcomes = validate(cpu, device, spec)?;
            crate::runner::record_checks(&mut row, &outcomes);
        }
        let p = prepare(device, spec)?;
        let mut times: [Option<Timing>; 3] = [None, None, None];
        let mut peaks: [Option<u64>; 3] = [None, None, None];
        for (i, mode) in [Mode::Primal, Mode::Vjp, Mode::Jvp].into_iter().enumerate() {
            if spec.modes.contains(&mode) {
                times[i] = Some(measure(budget, || evaluate(device, &p, mode))?);
                device.trim_cache();
                let (r, bytes) = peak_during(|| evaluate(device, &p, mode));
                r?;
                peaks[i] = Some(bytes as u64);
            }
        }
        [row.primal, row.vjp, row.jvp] = times;
        [row.primal_peak_bytes, row.vjp_peak_bytes, row.jvp_peak_bytes] = peaks;
        Ok(())
    }));
    row.compile_s = crate::runner::compile_seconds(device, compiled_before);
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            // An unsupported dtype on the device (f64 without fp64) is a skip, as for histograms.
            row.status = if crate::runner::is_unsupported(&e) { Status::Skipped } else { Status::Error };
            row.message = Some(format!("{e:#}"));
        }
        Err(_) => {
            row.status = Status::Error;
            row.message = Some("panicked".into());
        }
    }
    row
}

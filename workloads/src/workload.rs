//! The [`Workload`] trait: everything the harness needs to know about a workload, so that suites,
//! `check`, `run`, `eval` and the result table work through the registry ([`crate::registry`])
//! and never name a workload.
//!
//! A workload is seen in three ways:
//! * as a **schema** ([`Workload::schema`]): the keys a suite entry `workload: <family>` may set,
//!   with defaults and bounds; a suite entry expands into the product of its lists;
//! * as a **problem** ([`Problem`]), generated from parameters and a seed (or read from an `eval`
//!   input): it can be put on a device for timing ([`Problem::prepare`] → [`Prepared`]) and
//!   validated there ([`Problem::validation`] → [`Validation`]: the case as a flat function for the
//!   generic checks, plus comparisons with the workload's own references);
//! * as a **JSON interface** ([`Workload::eval`]): one explicit input in, one JSON object out.
//!
//! The checks themselves (dot-product test, finite differences, tolerances) are the harness's;
//! a workload only supplies what they run on.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use adgauge_backends::{AnyDevice, Cpu, DType, OpError};

/// What a workload's operations can fail with: bad input (exit 2 in the harness) or an op error
/// (a device failure, or an unsupported combination that becomes a skip).
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The input (a file, a JSON field, a parameter) is malformed; the message names it.
    #[error("{0}")]
    BadInput(String),
    #[error(transparent)]
    Op(#[from] OpError),
}

impl WorkloadError {
    /// An op error met while evaluating user input: errors that come from the input (lengths,
    /// dtypes, indices, unsupported rules) are bad input; device failures stay op errors.
    pub fn from_input(e: OpError) -> WorkloadError {
        match e {
            OpError::Device(_) | OpError::Foreign(_) => WorkloadError::Op(e),
            other => WorkloadError::BadInput(other.to_string()),
        }
    }

    /// Whether this says the combination is not supported (a skip, not a failure).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, WorkloadError::Op(OpError::Unsupported(_)))
    }
}

/// Result of workload operations.
pub type WResult<T> = std::result::Result<T, WorkloadError>;

/// A mode of evaluation. Suites time the first three (a result row has a column for each); a
/// workload may offer named extras in `eval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// The objective only.
    Primal,
    /// Reverse mode: the objective and the adjoints of the inputs (a gradient or J^T w).
    Vjp,
    /// Forward mode: a directional derivative (J v).
    Jvp,
    /// A Hessian diagonal by forward over reverse (k-means).
    HessianDiag,
}

impl Mode {
    /// The modes a suite times, in row order.
    pub const TIMED: [Mode; 3] = [Mode::Primal, Mode::Vjp, Mode::Jvp];
    pub const ALL: [Mode; 4] = [Mode::Primal, Mode::Vjp, Mode::Jvp, Mode::HessianDiag];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Primal => "primal",
            Mode::Vjp => "vjp",
            Mode::Jvp => "jvp",
            Mode::HessianDiag => "hessian-diag",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mode '{s}' (known: {})", names.join(", "))
        })
    }
}

/// One value of a case parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    Name(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(x) => write!(f, "{x}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Name(s) => f.write_str(s),
        }
    }
}

/// A case's parameters, by key (after a suite entry is expanded: one value per key).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params(pub BTreeMap<String, Value>);

impl Params {
    pub fn new(pairs: &[(&str, Value)]) -> Params {
        Params(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    /// A whole-number parameter. Expansion guarantees the schema's keys are present, so a
    /// missing one is a programming error reported as bad input rather than a panic.
    pub fn int(&self, key: &str) -> WResult<usize> {
        match self.0.get(key) {
            Some(Value::Int(x)) => usize::try_from(*x).map_err(|_| bad(format!("{key} = {x} does not fit"))),
            other => Err(bad(format!("parameter {key}: expected a whole number, got {other:?}"))),
        }
    }

    pub fn float(&self, key: &str) -> WResult<f64> {
        match self.0.get(key) {
            Some(Value::Float(x)) => Ok(*x),
            Some(Value::Int(x)) => Ok(*x as f64),
            other => Err(bad(format!("parameter {key}: expected a number, got {other:?}"))),
        }
    }

    pub fn name(&self, key: &str) -> WResult<&str> {
        match self.0.get(key) {
            Some(Value::Name(s)) => Ok(s),
            other => Err(bad(format!("parameter {key}: expected a name, got {other:?}"))),
        }
    }

    /// `key` set to `value` (a copy).
    pub fn with(&self, key: &str, value: Value) -> Params {
        let mut p = self.clone();
        p.0.insert(key.to_string(), value);
        p
    }

    /// Whole-number parameters from (key, value) pairs (a validation size).
    pub fn ints(pairs: &[(&str, u64)]) -> Params {
        Params(pairs.iter().map(|&(k, v)| (k.to_string(), Value::Int(v))).collect())
    }

    /// Every whole-number parameter of `caps` capped at its value (the validation-size variant).
    pub fn capped_by(&self, caps: &[(&str, u64)]) -> Params {
        caps.iter().fold(self.clone(), |p, &(key, max)| p.capped(key, max))
    }

    /// A whole-number parameter capped at `max` (validation sizes).
    pub fn capped(&self, key: &str, max: u64) -> Params {
        match self.0.get(key) {
            Some(Value::Int(x)) => self.with(key, Value::Int((*x).min(max))),
            _ => self.clone(),
        }
    }
}

fn bad(message: String) -> WorkloadError {
    WorkloadError::BadInput(message)
}

/// What a suite key holds.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamKind {
    /// A list of whole numbers in `[min, max]`, one product dimension.
    Ints { min: u64, max: u64 },
    /// One number in `[min, max]` (not a list).
    Float { min: f64, max: f64 },
    /// A list of names from `choices`, one product dimension.
    Names { choices: Vec<String> },
    /// A list of tuples of whole numbers in `[min, max]`, one product dimension: each tuple sets
    /// the parameters `names` together (sizes that do not combine as a product).
    Tuples { names: &'static [&'static str], min: u64, max: u64 },
}

/// One key a suite entry may set.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// The suite key.
    pub key: &'static str,
    pub kind: ParamKind,
    /// The value when the key is absent, as JSON (e.g. `[14]`, `0.05`); `None`: required.
    pub default: Option<&'static str>,
    /// The result-row column of the value (`None`: not a row parameter, e.g. the operator that
    /// is part of the workload's name).
    pub column: Option<&'static str>,
    /// The value of the column in rows recorded before the parameter existed (their rows lack
    /// the column), as the row writes it: the gate reads such rows as cases with that value, so
    /// that a new parameter does not leave every earlier case without a baseline. `None`: the
    /// parameter was there from the start, or no single value describes what came before.
    pub legacy: Option<&'static str>,
    pub doc: &'static str,
}

/// A list of sizes (whole numbers in `[min, max]`) shown in the row column of the same name.
pub fn sizes(key: &'static str, min: u64, max: u64, doc: &'static str) -> ParamSpec {
    ParamSpec { key, kind: ParamKind::Ints { min, max }, default: None, column: Some(key), legacy: None, doc }
}

/// A flag of `adgauge eval` that belongs to one workload (e.g. GMM's objective variant).
#[derive(Clone, Debug, PartialEq)]
pub struct EvalOption {
    /// The flag without dashes.
    pub flag: &'static str,
    /// Whether it takes a value (`--flag VALUE`) or is a switch.
    pub takes_value: bool,
    pub help: &'static str,
}

/// One explicit input for `adgauge eval`.
#[derive(Clone, Debug)]
pub struct EvalRequest {
    /// The workload name as given (`hist-add`, `kmeans`, ...).
    pub name: String,
    /// The input's text and where it came from (a path, or `<stdin>`), for messages.
    pub text: String,
    pub source: String,
    /// `None`: the workload's default.
    pub mode: Option<Mode>,
    pub dtype: DType,
    /// The reverse-mode rule, for workloads that have rules.
    pub rule: Option<String>,
    /// The workload's own flags ([`EvalOption`]) that were given: flag -> value ("" for a switch).
    pub options: BTreeMap<String, String>,
}

/// How a case is validated: its settings.
#[derive(Clone, Debug)]
pub struct CheckSettings {
    pub dtype: DType,
    /// The rule under test ("-" for workloads without rules).
    pub rule: String,
    pub seed: u64,
    /// A fault to inject (tests of the validator), e.g. `drop-dest-adjoint`.
    pub fault: Option<String>,
    /// The conventions the tool under test declares (e.g. `tie-policy`: `one-winner`, `split`).
    pub conventions: BTreeMap<String, String>,
    /// `check --thorough`: also the checks too long for every run of `check` (the histograms'
    /// largest size switches, the extreme bins at every size, the scans at the parallel size).
    pub thorough: bool,
}

/// The checks, as named in results and in the tolerance table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckKind {
    DotProduct,
    FdJvp,
    FdVjp,
    FullJacobian,
    OracleVjp,
    OracleJvp,
    /// The primal computed on the device under test (its primal, the primal its VJP rules and
    /// its JVP return) against the sequential f64 oracle, rounded to the dtype; a NaN where the
    /// oracle has NaN is right. Every other check takes the primal from the CPU in f64.
    OraclePrimal,
    RuleAgreement,
    /// Against a hand-derived ("manual") derivative (the reverse-mode one where both modes are
    /// compared).
    Manual,
    /// The forward-mode derivative against the hand-derived one (BA's Jacobian by 15 sweeps).
    ManualJvp,
    /// A Hessian (diagonal) by forward-over-reverse against a hand-derived one.
    ManualHessian,
    /// Min/max adjoints on data with exact ties (between elements and with dest) against the
    /// oracle of the tool's declared tie policy; another valid subgradient passes as a
    /// convention.
    Ties,
    /// Oracle on data built to see rule bugs (histograms): ties between elements and with dest,
    /// neutral elements (-inf for logaddexp, zeros for hypot and `*`), empty bins, and n above
    /// the parallel threshold, so that several chunks and interleaved sub-histograms are merged.
    /// Compared elementwise with the sequential oracle, never with finite differences.
    Stress,
    /// Histograms at the extreme values the guide's Histogram rules section defines (three-way ties at 1e16
    /// and 1e308, +inf, NaN in the values and in dest, a NaN bin with a zero adjoint): the
    /// tool's rule, every other rule and the forward rule against the sequential oracle, where
    /// NaN must stand where the oracle's NaN stands (and counts as equal there).
    Extremes,
    /// A whole Jacobian against central finite differences of the primal, column by column
    /// (each coordinate its own step): a reference that shares nothing with the derivative code,
    /// not even the sparsity pattern (BA).
    FdJacobian,
    /// Misuse of nested engines on the device under test: d/dx [x * d/dy (x + y)] by forward
    /// over forward must be 1 (perturbation confusion gives 2), and a tensor carrying another
    /// forward engine's tangent, or another tape's variable, must be refused, not mixed in. For
    /// the nested workloads (`particle`, `saddle`): every variant's nested gradient and the value
    /// computed under it against the inner gradient in closed form's ([`crate::nested`]).
    Perturbation,
    /// The histogram operator's scans (inclusive, exclusive, reversed, segmented), its
    /// reduction and its histogram with a constant dest, by the reverse and forward engines on
    /// the device under test, against the oracle: what no workload differentiates otherwise.
    Primitives,
    /// A Hessian-vector product through a histogram, by forward over reverse and by reverse
    /// over forward, against central differences of the f64 gradient: the second-order rules.
    SecondOrder,
    /// On the staged CPU device: its VJP and JVP against the eager CPU device's at the same
    /// seeded vectors (the same scalar kernels in the same order: they agree to rounding).
    StagedEager,
    /// On a traced device: what a recorded VJP and JVP read back when replayed, against what
    /// their eager run read back while being recorded (the same calls of the same device:
    /// exactly equal); and the recordings a timed call replays, every timed mode, recorded
    /// (their first replay checked bit for bit) and replayed.
    TracedEager,
    /// On a traced device: every primitive call of a VJP and of a JVP made to fail in turn
    /// (every call up to 64, else 64 evenly spaced; up to 512 under `--thorough`): each must
    /// end the derivative with an error, neither a value nor a panic, and the device must
    /// compute the same derivative as before once disarmed.
    Faults,
}

impl CheckKind {
    pub const ALL: [CheckKind; 21] = [
        CheckKind::DotProduct,
        CheckKind::FdJvp,
        CheckKind::FdVjp,
        CheckKind::FullJacobian,
        CheckKind::OracleVjp,
        CheckKind::OracleJvp,
        CheckKind::OraclePrimal,
        CheckKind::RuleAgreement,
        CheckKind::Manual,
        CheckKind::ManualJvp,
        CheckKind::ManualHessian,
        CheckKind::Ties,
        CheckKind::Stress,
        CheckKind::Extremes,
        CheckKind::FdJacobian,
        CheckKind::Perturbation,
        CheckKind::Primitives,
        CheckKind::SecondOrder,
        CheckKind::StagedEager,
        CheckKind::TracedEager,
        CheckKind::Faults,
    ];

    pub fn from_name(name: &str) -> Option<CheckKind> {
        CheckKind::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn names() -> Vec<&'static str> {
        CheckKind::ALL.iter().map(|k| k.name()).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            CheckKind::DotProduct => "dot-product",
            CheckKind::FdJvp => "fd-jvp",
            CheckKind::FdVjp => "fd-vjp",
            CheckKind::FullJacobian => "full-jacobian",
            CheckKind::OracleVjp => "oracle-vjp",
            CheckKind::OracleJvp => "oracle-jvp",
            CheckKind::OraclePrimal => "oracle-primal",
            CheckKind::RuleAgreement => "rule-agreement",
            CheckKind::Manual => "manual",
            CheckKind::ManualJvp => "manual-jvp",
            CheckKind::ManualHessian => "manual-hessian",
            CheckKind::Ties => "ties",
            CheckKind::Stress => "stress",
            CheckKind::Extremes => "extremes",
            CheckKind::FdJacobian => "fd-jacobian",
            CheckKind::Perturbation => "perturbation",
            CheckKind::Primitives => "primitives",
            CheckKind::SecondOrder => "second-order",
            CheckKind::StagedEager => "staged-eager",
            CheckKind::TracedEager => "traced-eager",
            CheckKind::Faults => "faults",
        }
    }
}

/// A case seen as a differentiable function of one flat input vector: inputs x in R^n, outputs
/// y in R^m. Every workload is validated through this view.
pub trait FlatFn {
    fn n_in(&self) -> usize;
    fn n_out(&self) -> usize;
    /// The point derivatives are taken at (already rounded to the dtype under test).
    fn x0(&self) -> &[f64];
    /// The primal in f64 at any x (for finite differences).
    fn eval_f64(&self, x: &[f64]) -> adgauge_backends::Result<Vec<f64>>;
    /// J^T w at x0, in the dtype under test.
    fn vjp(&self, w: &[f64]) -> adgauge_backends::Result<Vec<f64>>;
    /// J v at x0, in the dtype under test.
    fn jvp(&self, v: &[f64]) -> adgauge_backends::Result<Vec<f64>>;
    /// Why finite differences would be meaningless at x0 (a kink within the step), if they are.
    fn fd_unsafe(&self, h: f64) -> Option<String>;
    /// The arguments the input vector concatenates, as (name, length) in order (a histogram's
    /// `vals` then `dest`), so that a failing reverse-mode check can say whose adjoint is wrong.
    /// Empty: one argument.
    fn input_parts(&self) -> Vec<(&'static str, usize)> {
        Vec::new()
    }
}

/// A flat function whose Jacobian came from a tool (dense, row-major): the point, the f64 primal
/// and the finite-difference guard are `flat`'s, J^T w and J v are products with `dense`. Where
/// `flat` sees each input in its own unit (BA's `scale`), `column_scale[c]` converts column c of
/// the tool's Jacobian into it.
pub struct GivenJacobian<F: FlatFn> {
    pub flat: F,
    pub dense: Vec<f64>,
    pub column_scale: Option<Vec<f64>>,
}

impl<F: FlatFn> GivenJacobian<F> {
    fn scale(&self, c: usize) -> f64 {
        self.column_scale.as_ref().map_or(1.0, |s| s[c])
    }
}

impl<F: FlatFn> FlatFn for GivenJacobian<F> {
    fn n_in(&self) -> usize {
        self.flat.n_in()
    }
    fn n_out(&self) -> usize {
        self.flat.n_out()
    }
    fn x0(&self) -> &[f64] {
        self.flat.x0()
    }
    fn eval_f64(&self, x: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
        self.flat.eval_f64(x)
    }
    fn vjp(&self, w: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
        let (nr, nc) = (self.n_out(), self.n_in());
        Ok((0..nc).map(|c| (0..nr).map(|r| self.dense[r * nc + c] * w[r]).sum::<f64>() * self.scale(c)).collect())
    }
    fn jvp(&self, v: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
        let (nr, nc) = (self.n_out(), self.n_in());
        Ok((0..nr).map(|r| (0..nc).map(|c| self.dense[r * nc + c] * v[c] * self.scale(c)).sum()).collect())
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        self.flat.fd_unsafe(h)
    }
}

/// A derivative computed on the device under test next to an independent value of the same
/// quantity (an oracle, a hand-derived derivative, another rule).
pub struct Comparison {
    pub check: CheckKind,
    pub got: Vec<f64>,
    pub want: Vec<f64>,
    /// Set when `got` differs from adgauge's reference but is right under a convention (the
    /// workload has then judged it, and `want` is what the convention gives): its name.
    pub convention: Option<String>,
}

/// The full-Jacobian check of a case: one-hot VJPs against one-hot JVPs on `flat`.
pub struct FullJacobian {
    pub flat: Box<dyn FlatFn>,
    /// Whose tolerance applies (normally [`CheckKind::FullJacobian`]'s).
    pub tolerance_of: CheckKind,
}

/// What the harness validates a case with: the generic checks on `flat` (dot-product and
/// finite differences; the forward-mode ones when its JVP is supported), the full Jacobian where
/// small enough, and the workload's comparisons (each compared with the check's metric; several
/// comparisons of one check report the worst).
pub struct Validation {
    pub flat: Box<dyn FlatFn>,
    pub full_jacobian: Option<FullJacobian>,
    pub comparisons: Vec<Comparison>,
}

/// A tool outside adgauge's engine that evaluates a workload's functions in GradBench's shapes
/// (a process speaking GradBench's protocol): `call(function, input)` returns the output.
pub trait Remote {
    fn call(&self, function: &str, input: serde_json::Value) -> WResult<serde_json::Value>;
}

/// One call of a workload's GradBench module: the function and its input.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteCall {
    pub function: String,
    pub input: serde_json::Value,
}

/// One trace cell per timed mode: a traced device records each mode's body once per prepared
/// case and replays it after (`Device::run_traced`); other devices leave them empty.
#[derive(Default)]
pub struct ModeTraces([adgauge_backends::TraceCell; 4]);

impl ModeTraces {
    /// One timed call of `mode`: `body` through the device's trace of that mode, then a
    /// synchronisation (a timing ends when the device has finished).
    pub fn run<D: adgauge_backends::Device, E: From<adgauge_backends::OpError>>(
        &self,
        device: &D,
        mode: Mode,
        body: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        device.run_traced(self.get(mode), body)?;
        Ok(device.synchronize()?)
    }

    fn get(&self, mode: Mode) -> &adgauge_backends::TraceCell {
        let i = match mode {
            Mode::Primal => 0,
            Mode::Vjp => 1,
            Mode::Jvp => 2,
            Mode::HessianDiag => 3,
        };
        &self.0[i]
    }
}

/// A problem resident on a device, ready for timed evaluation.
pub trait Prepared {
    /// One evaluation of `mode` (results dropped); returns after the device has finished.
    fn run(&self, mode: Mode) -> WResult<()>;
    /// The derivative rule the evaluations run, where the workload has rules: what `auto`
    /// resolved to on this device at these sizes (a named rule is itself).
    fn rule_taken(&self) -> Option<String> {
        None
    }
}

/// One problem of a workload (generated or read), in f64 on the host.
pub trait Problem: Send + Sync {
    /// Puts the problem on `device` in `dtype` for timed evaluations with `rule`.
    fn prepare(&self, device: &AnyDevice, dtype: DType, rule: &str) -> WResult<Box<dyn Prepared>>;
    /// The problem's validation: derivatives on `device`, the f64 primal of finite differences
    /// on `cpu`.
    fn validation(&self, device: &AnyDevice, cpu: &Cpu, settings: &CheckSettings) -> WResult<Validation>;
    /// The GradBench call that evaluates `mode` on this problem, where its module has one.
    fn remote_call(&self, _mode: Mode) -> Option<RemoteCall> {
        None
    }
    /// The problem's validation with the derivatives computed by `remote` (in f64) and the
    /// primal of finite differences on `cpu`.
    fn remote_validation(
        &self,
        _remote: std::sync::Arc<dyn Remote>,
        _cpu: &Cpu,
        _settings: &CheckSettings,
    ) -> WResult<Validation> {
        Err(WorkloadError::Op(OpError::Unsupported("this workload has no GradBench module".into())))
    }
}

/// The bytes a case needs (inputs, outputs, the reverse-mode tape; measured per element on the
/// CPU and rounded down), the parameter it grows with, and the formula, for the refusal message.
#[derive(Clone, Debug, PartialEq)]
pub struct Footprint {
    pub bytes: u128,
    pub key: &'static str,
    pub formula: &'static str,
}

impl Footprint {
    /// `Err("<formula> = N bytes, more than the memory limit L ...")` beyond the limit.
    pub fn check(&self) -> Result<(), String> {
        adgauge_datasets::limits::check(&format!("this case ({})", self.formula), self.bytes)
    }
}

/// A workload: see the module documentation.
pub trait Workload: Send + Sync {
    /// The suite tag (`workload: <family>`); also the name of a single-workload family.
    fn family(&self) -> &'static str;
    /// One line for listings.
    fn about(&self) -> &'static str;
    /// The workload names of this family (`eval`, `check --workload`, result rows).
    fn names(&self) -> Vec<String> {
        vec![self.family().to_string()]
    }
    /// The names `adgauge check` validates when no `--workload` is given.
    fn check_names(&self) -> Vec<String> {
        self.names()
    }
    /// The keys of a suite entry, in expansion order (the first is the outermost loop).
    fn schema(&self) -> Vec<ParamSpec>;
    /// The reverse-mode rules a case may choose (`rules:` in a suite); empty when the workload
    /// has none (its rows say `-`).
    fn rules(&self) -> Vec<String> {
        Vec::new()
    }
    /// The rules `adgauge check` runs on the workload `name`: every rule that applies to it
    /// (a rule that cannot apply would be counted as skipped, hiding a misdispatched one).
    fn check_rules(&self, _name: &str) -> Vec<String> {
        self.rules()
    }
    /// The modes `eval` offers, the first being its default.
    fn eval_modes(&self) -> Vec<Mode> {
        vec![Mode::Primal, Mode::Vjp, Mode::Jvp]
    }
    /// The workload's own `eval` flags.
    fn eval_options(&self) -> Vec<EvalOption> {
        Vec::new()
    }
    /// The name of the case with these (expanded) parameters.
    fn case_name(&self, _params: &Params) -> String {
        self.family().to_string()
    }
    /// The validation-size variant of a case: small enough for finite differences on every
    /// coordinate and a full Jacobian.
    fn validation_params(&self, params: &Params) -> Params;
    /// The case `adgauge check` validates for `name` (at validation size).
    fn check_params(&self, name: &str) -> Params;
    /// Every case `adgauge check` validates for `name`: [`Workload::check_params`] alone unless
    /// the workload checks several parameter sets (the histograms: both index dtypes).
    fn check_param_sets(&self, name: &str) -> Vec<Params> {
        vec![self.check_params(name)]
    }
    /// What a case of these parameters will allocate, estimated before anything is generated
    /// and checked against the memory limit (`--max-memory`): see [`Footprint`]. `None`: small
    /// by construction.
    fn footprint(&self, _params: &Params) -> Option<Footprint> {
        None
    }
    /// The problem of these parameters, from a seeded generator.
    fn generate(&self, params: &Params, seed: u64) -> WResult<Box<dyn Problem>>;
    /// Evaluates one explicit input on `device` and returns one JSON object.
    fn eval(&self, request: &EvalRequest, device: &AnyDevice) -> WResult<String>;
    /// The GradBench module (its eval's name) this workload serves and drives, if any.
    fn gradbench_module(&self) -> Option<&'static str> {
        None
    }
    /// Evaluates `function` of the GradBench module on `input` (the module's JSON shapes; the
    /// protocol's `min_runs` and `min_seconds` already removed) on `device` in `dtype`; returns
    /// the output as JSON text.
    fn gradbench_evaluate(
        &self,
        function: &str,
        _input: &serde_json::Value,
        _device: &AnyDevice,
        _dtype: DType,
    ) -> WResult<String> {
        Err(WorkloadError::BadInput(format!("{}: no GradBench function '{function}'", self.family())))
    }
    /// `function` on `input` as a call that a served tool (`adgauge tool`) times run by run:
    /// the input is parsed and put on `device` once, outside the timings, as GradBench's own
    /// tools convert their inputs before timing. The default parses and prints inside every run
    /// (through [`Workload::gradbench_evaluate`]); workloads with large inputs override it.
    fn gradbench_prepare<'a>(
        &'a self,
        function: &'a str,
        input: &'a serde_json::Value,
        device: &'a AnyDevice,
        dtype: DType,
    ) -> WResult<Box<dyn GradbenchCall + 'a>> {
        Ok(Box::new(WholeCall { workload: self, function, input, device, dtype, output: None }))
    }
    /// The workload column of the result table for a row of `name` with these row parameters
    /// (n and k have columns of their own).
    fn table_label(&self, name: &str, _row_params: &BTreeMap<String, String>) -> String {
        name.to_string()
    }
}

/// One GradBench `evaluate` of a workload's function, prepared: [`GradbenchCall::run`] is what
/// a served tool times (it returns after the device has finished), [`GradbenchCall::output`]
/// reads the last run's results back and prints them once.
pub trait GradbenchCall {
    fn run(&mut self) -> WResult<()>;
    fn output(&mut self) -> WResult<String>;
}

/// The default [`GradbenchCall`]: every run evaluates the whole function, parsing included.
struct WholeCall<'a, W: ?Sized> {
    workload: &'a W,
    function: &'a str,
    input: &'a serde_json::Value,
    device: &'a AnyDevice,
    dtype: DType,
    output: Option<String>,
}

impl<W: Workload + ?Sized> GradbenchCall for WholeCall<'_, W> {
    fn run(&mut self) -> WResult<()> {
        self.output = Some(self.workload.gradbench_evaluate(self.function, self.input, self.device, self.dtype)?);
        Ok(())
    }
    fn output(&mut self) -> WResult<String> {
        if self.output.is_none() {
            self.run()?;
        }
        Ok(self.output.clone().unwrap_or_default())
    }
}

/// The input rounded to `dtype` (derivatives are taken at representable points).
pub fn rounded(xs: &[f64], dtype: DType) -> Vec<f64> {
    xs.iter().map(|&x| dtype.round(x)).collect()
}

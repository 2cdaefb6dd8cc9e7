//! The histogram workloads `hist-<op>`: `hist = reduce_by_index(dest, op, inds, vals)`,
//! differentiated with respect to `vals` and `dest`.
//!
//! Inputs come from the seeded generator in `adgauge_datasets::hist` (n, k, index distribution,
//! out-of-range fraction) with values shaped for the operator, or from an explicit case file.
//!
//! [`HistFamily`] is the [`Workload`] of the registry: one family (`workload: hist` in suites)
//! whose `ops` key picks the operator, and whose cases have a reverse-mode rule. Validation
//! adds the sequential oracle and the agreement of every rule to the generic checks.

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, Cpu, DType, Device, Dual, Extremum, Forward, HistOp, HistRule, IndexDType, Operand, Ops,
    Result, Reverse, ScanSpec, oracle, with_device,
};
use adgauge_datasets::hist::{HistData, HistSpec, IndexDist, Values, generate};

use std::sync::Arc;

use serde_json::Value as Json;

use crate::json::{format_object, number_json, parse_hist_case, parse_number};
use crate::workload::{
    CheckKind, CheckSettings, Comparison, EvalOption, FlatFn, FullJacobian, Mode, ModeTraces, ParamKind, ParamSpec,
    Params, Prepared, Problem, Remote, RemoteCall, Validation, Value, WResult, Workload, WorkloadError, rounded,
};

/// One histogram workload: the operator fixes the name (`hist-<op>`) and the value shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistWorkload {
    pub op: HistOp,
}

/// A histogram case resident on an engine's device.
pub struct HistInputs<O: Ops> {
    pub dest: O::T,
    pub inds: O::I,
    pub vals: O::T,
}

/// The result of a reverse-mode evaluation.
pub struct HistVjp<O: Ops> {
    pub hist: O::T,
    pub dest_bar: O::T,
    pub vals_bar: O::T,
}

impl HistWorkload {
    /// The histogram workloads, in display order: the special operators, then the shipped
    /// general operators `logaddexp` and `hypot`.
    pub fn all() -> Vec<HistWorkload> {
        let mut ops = HistOp::ALL.to_vec();
        ops.extend(["logaddexp", "hypot"].iter().filter_map(|n| n.parse::<HistOp>().ok()));
        ops.into_iter().map(|op| HistWorkload { op }).collect()
    }

    /// `hist-add` -> the `+` workload. Any named operator is accepted (also `hist-general-min`,
    /// the general-operator version of min, which runs the general rules only).
    pub fn parse(name: &str) -> Option<HistWorkload> {
        let op = name.strip_prefix("hist-")?.parse().ok()?;
        Some(HistWorkload { op })
    }

    pub fn name(&self) -> String {
        format!("hist-{}", self.op.name())
    }

    /// The value shape the generator uses for this operator.
    pub fn values(&self) -> Values {
        match self.op.name() {
            // (general-mul too: products of values from [-1, 1] underflow in long bins.)
            "mul" | "general-mul" => Values::Product,
            "min" | "max" => Values::Separated,
            "logaddexp" => Values::Logs,
            "hypot" => Values::Magnitudes,
            _ => Values::Sum,
        }
    }

    /// The generator parameters of a case of this workload.
    pub fn spec(&self, n: usize, k: usize, dist: IndexDist, out_of_range: f64, seed: u64) -> HistSpec {
        HistSpec { n, k, dist, out_of_range, values: self.values(), seed }
    }

    /// Puts a case on the engine's device, values rounded to `dtype`, indices of `index`.
    pub fn upload<O: Ops>(&self, o: &O, data: &HistData, dtype: DType, index: IndexDType) -> Result<HistInputs<O>> {
        Ok(HistInputs {
            dest: o.tensor(&data.dest, &[data.dest.len()], dtype)?,
            inds: o.index_as(&data.inds, index)?,
            vals: o.tensor(&data.vals, &[data.vals.len()], dtype)?,
        })
    }

    /// The objective: the histogram itself.
    pub fn primal<O: Ops>(&self, o: &O, x: &HistInputs<O>) -> Result<O::T> {
        self.primal_on(o, &x.dest, &x.inds, &x.vals)
    }

    /// Reverse mode: the histogram and the adjoints of dest and vals for `hist_bar`, with the
    /// reduce_by_index rule `rule`. Runs the forward sweep, tapes it, and runs the reverse sweep.
    pub fn vjp<B: Ops>(&self, b: &B, rule: HistRule, x: &HistInputs<B>, hist_bar: &B::T) -> Result<HistVjp<B>> {
        let r = Reverse::new(b.clone()).with_hist_rule(rule);
        let dest = r.var(x.dest.clone());
        let vals = r.var(x.vals.clone());
        let hist = self.primal_on(&r, &dest, &x.inds, &vals)?;
        let grads = r.backward(&hist, hist_bar.clone())?;
        Ok(HistVjp {
            dest_bar: grads.get_or_zeros(b, &dest)?,
            vals_bar: grads.get_or_zeros(b, &vals)?,
            hist: hist.value().clone(),
        })
    }

    /// Forward mode: the histogram and its tangent for tangents of dest and vals.
    pub fn jvp<B: Ops>(&self, b: &B, x: &HistInputs<B>, dest_dot: &B::T, vals_dot: &B::T) -> Result<(B::T, B::T)> {
        let f = Forward::new(b.clone());
        let dest = f.dual(x.dest.clone(), dest_dot.clone())?;
        let vals = f.dual(x.vals.clone(), vals_dot.clone())?;
        let hist = self.primal_on(&f, &dest, &x.inds, &vals)?;
        Ok((f.primal(&hist).clone(), f.tangent(&hist)?))
    }

    fn primal_on<O: Ops>(&self, o: &O, dest: &O::T, inds: &O::I, vals: &O::T) -> Result<O::T> {
        o.reduce_by_index(dest, self.op, inds, vals)
    }
}

/// Validation sizes: large enough for every bin to see several elements, small enough for
/// finite differences with well-separated values and for a full Jacobian.
const CHECK_N: u64 = 2000;
const CHECK_K: u64 = 64;
const JACOBIAN_N: usize = 40;
const JACOBIAN_K: usize = 6;

/// The histogram workloads as one registry entry.
pub struct HistFamily;

/// The index dtype of a case given as data (`adgauge tool`, `eval` without `--index-dtype`):
/// i32 when every index fits it (JAX's and PyTorch's usual indices), else i64.
pub fn index_dtype_for(inds: &[i64]) -> IndexDType {
    if IndexDType::I32.check(inds).is_ok() { IndexDType::I32 } else { IndexDType::I64 }
}

/// The suite key of the index dtypes and its row column (`param.index_dtype`).
const INDEX_KEY: &str = "index_dtypes";

/// The rule a case names. Rows and history are keyed by the name, so a name that parses to a
/// rule of another name (a parser mapping names wrongly) would label every result of that
/// rule with the wrong one: refused here, and `check` fails on it.
fn rule_of(name: &str) -> WResult<HistRule> {
    let rule: HistRule = name.parse().map_err(WorkloadError::BadInput)?;
    if rule.name() != name {
        let why = format!("internal error: rule '{name}' parsed as '{}'", rule.name());
        return Err(WorkloadError::Op(adgauge_backends::OpError::Device(why)));
    }
    Ok(rule)
}

impl HistFamily {
    fn workload(params: &Params) -> WResult<HistWorkload> {
        let op: HistOp = params.name("ops")?.parse().map_err(WorkloadError::BadInput)?;
        Ok(HistWorkload { op })
    }

    fn index_dtype(params: &Params) -> WResult<IndexDType> {
        params.name(INDEX_KEY)?.parse().map_err(WorkloadError::BadInput)
    }

    fn workload_named(name: &str) -> WResult<HistWorkload> {
        HistWorkload::parse(name)
            .ok_or_else(|| WorkloadError::BadInput(format!("'{name}' is not a histogram workload")))
    }
}

impl Workload for HistFamily {
    fn family(&self) -> &'static str {
        "hist"
    }
    fn about(&self) -> &'static str {
        "hist = reduce_by_index(dest, op, inds, vals), differentiated with respect to vals and dest"
    }
    fn names(&self) -> Vec<String> {
        HistOp::named().into_iter().map(|op| HistWorkload { op }.name()).collect()
    }
    fn check_names(&self) -> Vec<String> {
        // general-mul besides the shipped operators: a general operator without a total form,
        // so `check` sees `auto` send such an operator to general-chunked (with only logaddexp
        // and hypot, both of which have special rules, that dispatch was invisible to it).
        let mut ws = HistWorkload::all();
        ws.push(HistWorkload { op: HistOp::General(&adgauge_backends::general::MUL) });
        ws.iter().map(HistWorkload::name).collect()
    }
    fn schema(&self) -> Vec<ParamSpec> {
        let ops = HistOp::named().into_iter().map(|op| op.name().to_string()).collect();
        let dists = [IndexDist::Uniform, IndexDist::Skewed].iter().map(|d| d.name().to_string()).collect();
        vec![
            ParamSpec {
                key: "ops",
                kind: ParamKind::Names { choices: ops },
                default: None,
                column: None,
                legacy: None,
                doc: "operators (the workload hist-<op>)",
            },
            ParamSpec {
                key: "n",
                kind: ParamKind::Ints { min: 0, max: 1 << 32 },
                default: None,
                column: Some("n"),
                legacy: None,
                doc: "values",
            },
            ParamSpec {
                key: "k",
                kind: ParamKind::Ints { min: 1, max: 1 << 32 },
                default: None,
                column: Some("k"),
                legacy: None,
                doc: "bins",
            },
            ParamSpec {
                key: "dist",
                kind: ParamKind::Names { choices: dists },
                default: Some(r#"["uniform"]"#),
                column: Some("dist"),
                legacy: None,
                doc: "index distribution",
            },
            ParamSpec {
                key: "out_of_range",
                kind: ParamKind::Float { min: 0.0, max: 1.0 },
                default: Some("0.05"),
                column: Some("oob"),
                legacy: None,
                doc: "fraction of indices outside [0, k) (half -1, half >= k)",
            },
            ParamSpec {
                key: INDEX_KEY,
                kind: ParamKind::Names { choices: IndexDType::ALL.iter().map(|t| t.name().to_string()).collect() },
                default: Some(r#"["i32"]"#),
                column: Some("index_dtype"),
                // Indices were i64 before they had a dtype of their own.
                legacy: Some("i64"),
                doc: "index dtypes (i32 reads 4 bytes per index, i64 8)",
            },
        ]
    }
    /// `hist-add i32`: the index dtype, when the row has one (rows from before it was a
    /// parameter have none), tells the two rows of a case apart.
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("index_dtype") {
            Some(t) => format!("{name} {t}"),
            None => name.to_string(),
        }
    }
    fn eval_options(&self) -> Vec<EvalOption> {
        vec![EvalOption {
            flag: "index-dtype",
            takes_value: true,
            help: "hist: the indices' dtype, i32 or i64 (default: i32 when every index fits it, else i64)",
        }]
    }
    fn rules(&self) -> Vec<String> {
        HistRule::ALL.iter().map(|r| r.name().to_string()).collect()
    }
    fn check_rules(&self, name: &str) -> Vec<String> {
        let applies = |r: HistRule| HistWorkload::parse(name).is_none_or(|w| r.applies_to(w.op));
        HistRule::ALL.into_iter().filter(|&r| applies(r)).map(|r| r.name().to_string()).collect()
    }
    fn case_name(&self, params: &Params) -> String {
        params.name("ops").map(|op| format!("hist-{op}")).unwrap_or_else(|_| "hist".into())
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped("n", CHECK_N).capped("k", CHECK_K)
    }
    fn check_params(&self, name: &str) -> Params {
        self.check_param_sets(name).swap_remove(0)
    }
    /// One case per index dtype: every check runs on i32 and on i64 indices.
    fn check_param_sets(&self, name: &str) -> Vec<Params> {
        let op = name.strip_prefix("hist-").unwrap_or(name);
        IndexDType::ALL
            .iter()
            .map(|t| {
                Params::new(&[
                    ("ops", Value::Name(op.into())),
                    ("n", Value::Int(CHECK_N)),
                    ("k", Value::Int(CHECK_K)),
                    ("dist", Value::Name("uniform".into())),
                    ("out_of_range", Value::Float(0.05)),
                    (INDEX_KEY, Value::Name(t.name().into())),
                ])
            })
            .collect()
    }
    /// Measured in f64 (harness/tests/it/footprints.rs), the widest dtype, per operator: the
    /// generator's f64 values and i64 indices, the inputs on the device, the adjoints and
    /// tangents, and the private rows of the parallel fold (chunks x k, at most n / 2 entries).
    fn footprint(&self, params: &Params) -> Option<crate::workload::Footprint> {
        let (n, k) = (params.int("n").ok()? as u128, params.int("k").ok()? as u128);
        let op = HistFamily::workload(params).ok()?.op;
        let (per_n, per_k, formula) = match op {
            HistOp::Add => (56, 128, "56 bytes per element and 128 per bin (56n + 128k)"),
            HistOp::Min | HistOp::Max => (64, 256, "64 bytes per element and 256 per bin (64n + 256k)"),
            // `*` and the general operators (logaddexp, hypot, ...): their rules keep more per bin.
            _ => (64, 384, "64 bytes per element and 384 per bin (64n + 384k)"),
        };
        Some(crate::workload::Footprint {
            bytes: per_n * n + per_k * k,
            key: if per_n * n >= per_k * k { "n" } else { "k" },
            formula,
        })
    }
    fn generate(&self, params: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        let w = HistFamily::workload(params)?;
        let dist: IndexDist = params.name("dist")?.parse().map_err(WorkloadError::BadInput)?;
        let spec = w.spec(params.int("n")?, params.int("k")?, dist, params.float("out_of_range")?, seed);
        let index_dtype = HistFamily::index_dtype(params)?;
        Ok(Box::new(HistProblem { w, data: generate(&spec), spec, index_dtype }))
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("hist")
    }
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let (mode, op) = gradbench_call(function, input)?;
        let request = crate::workload::EvalRequest {
            name: format!("hist-{op}"),
            text: input.to_string(),
            source: format!("hist.{function} input"),
            mode: Some(mode),
            dtype,
            rule: None,
            options: Default::default(),
        };
        HistFamily::workload_named(&request.name)?;
        self.eval(&request, device)
    }
    /// Parsed and uploaded once; each run computes the mode on the resident inputs.
    fn gradbench_prepare<'a>(
        &'a self,
        function: &'a str,
        input: &'a Json,
        device: &'a AnyDevice,
        dtype: DType,
    ) -> WResult<Box<dyn crate::workload::GradbenchCall + 'a>> {
        let (mode, op) = gradbench_call(function, input)?;
        let w = HistFamily::workload_named(&format!("hist-{op}"))?;
        let source = format!("hist.{function} input");
        let case = crate::json::hist_case_with_fields(input, &source, w.op.name(), &MODULE_OPTIONS)?;
        case.check_representable(&source, dtype)?;
        check_domain(w, &case, &source)?;
        let options = ModuleOptions::read(input, &source, &case.data.inds)?;
        with_device!(device, |d| {
            Ok(Box::new(HistCall::new(d.clone(), w, mode, &case, &source, dtype, options)?)
                as Box<dyn crate::workload::GradbenchCall + 'a>)
        })
    }
    fn eval(&self, req: &crate::workload::EvalRequest, device: &AnyDevice) -> WResult<String> {
        let w = HistFamily::workload_named(&req.name)?;
        let rule = rule_of(req.rule.as_deref().unwrap_or("auto"))?;
        let case = parse_hist_case(&req.text, &req.source, w.op.name())?;
        case.check_representable(&req.source, req.dtype)?;
        check_domain(w, &case, &req.source)?;
        with_device!(device, |d| eval_on(d, w, rule, req, &case))
    }
}

/// The `hist` module's optional fields beyond GradBench's (adgauge's extension, so that `adgauge
/// compare` times the rule and index dtype of a suite's case): `rule` (the reverse-mode rule,
/// default `auto`) and `index_dtype` (default: i32 where every index fits, as `eval` chooses).
const MODULE_OPTIONS: [&str; 2] = ["rule", "index_dtype"];

/// The values of [`MODULE_OPTIONS`] in a `hist` module input.
#[derive(Clone, Copy, Debug)]
struct ModuleOptions {
    rule: HistRule,
    index_dtype: IndexDType,
}

impl ModuleOptions {
    fn read(input: &Json, source: &str, inds: &[i64]) -> WResult<ModuleOptions> {
        let text = |field: &str| -> WResult<Option<&str>> {
            match input.get(field) {
                None => Ok(None),
                Some(Json::String(s)) => Ok(Some(s.as_str())),
                Some(other) => {
                    Err(WorkloadError::BadInput(format!("{source}: field {field}: expected a string, found {other}")))
                }
            }
        };
        let rule = match text("rule")? {
            None => HistRule::Auto,
            Some(name) => rule_of(name).map_err(|e| WorkloadError::BadInput(format!("{source}: field rule: {e}")))?,
        };
        let index_dtype = match text("index_dtype")? {
            None => index_dtype_for(inds),
            Some(name) => {
                let t: IndexDType = name
                    .parse()
                    .map_err(|e: String| WorkloadError::BadInput(format!("{source}: field index_dtype: {e}")))?;
                if let Err(adgauge_backends::OpError::IndexOverflow { position, value, dtype }) = t.check(inds) {
                    return Err(WorkloadError::BadInput(format!(
                        "{source}: field inds[{position}]: {value} does not fit index_dtype {dtype}"
                    )));
                }
                t
            }
        };
        Ok(ModuleOptions { rule, index_dtype })
    }
}

/// `adgauge eval hist-<op>`: `{"hist"}` (primal), with `"vals_bar", "dest_bar"` (vjp), or with
/// `"hist_dot"` (jvp).
/// The mode of a `hist` module function and the operator its input names.
fn gradbench_call<'a>(function: &str, input: &'a Json) -> WResult<(Mode, &'a str)> {
    let mode = match function {
        "primal" => Mode::Primal,
        "vjp" => Mode::Vjp,
        "jvp" => Mode::Jvp,
        other => {
            return Err(WorkloadError::BadInput(format!("hist: no function '{other}' (known: primal, vjp, jvp)")));
        }
    };
    let Some(Json::String(op)) = input.get("op") else {
        return Err(WorkloadError::BadInput("hist: input field op: required (the operator's name)".into()));
    };
    Ok((mode, op))
}

/// hypot's bins are magnitudes: its neutral element 0 is neutral only on [0, inf), so a
/// negative dest has no meaning every rule agrees on (the sequential fold keeps an empty bin's
/// -3, a parallel reduction from 0 gives hypot(-3, 0) = 3). Such a dest is refused, naming it.
fn check_domain(w: HistWorkload, case: &crate::json::HistCase, source: &str) -> WResult<()> {
    if w.op == HistOp::General(&adgauge_backends::general::HYPOT)
        && let Some((i, x)) = case.data.dest.iter().enumerate().find(|(_, x)| **x < 0.0)
    {
        return Err(WorkloadError::BadInput(format!(
            "{source}: field dest[{i}]: {x} is outside hypot's domain [0, inf) (its bins are magnitudes)"
        )));
    }
    Ok(())
}

fn eval_on<D: Device>(
    device: &D,
    w: HistWorkload,
    rule: HistRule,
    req: &crate::workload::EvalRequest,
    case: &crate::json::HistCase,
) -> WResult<String> {
    let dt = req.dtype;
    let input = WorkloadError::from_input;
    let source = &req.source;
    let index = match req.options.get("index-dtype") {
        Some(t) => t.parse().map_err(|e: String| WorkloadError::BadInput(format!("--index-dtype: {e}")))?,
        None => index_dtype_for(&case.data.inds),
    };
    if let Err(adgauge_backends::OpError::IndexOverflow { position, value, dtype }) = index.check(&case.data.inds) {
        return Err(WorkloadError::BadInput(format!(
            "{source}: field inds[{position}]: {value} does not fit --index-dtype {dtype} (use i64)"
        )));
    }
    let x = w.upload(device, &case.data, dt, index).map_err(input)?;
    Ok(match req.mode.unwrap_or(Mode::Primal) {
        Mode::Primal => {
            let hist = device.to_vec(&w.primal(device, &x).map_err(input)?)?;
            format_object(&[("hist", &hist)], dt)
        }
        Mode::Vjp => {
            let bar = case
                .hist_bar
                .as_ref()
                .ok_or_else(|| WorkloadError::BadInput(format!("{source}: field hist_bar: required for --mode vjp")))?;
            let bar = device.tensor(bar, &[bar.len()], dt).map_err(input)?;
            let r = w.vjp(device, rule, &x, &bar).map_err(input)?;
            let (hist, vals_bar, dest_bar) =
                (device.to_vec(&r.hist)?, device.to_vec(&r.vals_bar)?, device.to_vec(&r.dest_bar)?);
            format_object(&[("hist", &hist), ("vals_bar", &vals_bar), ("dest_bar", &dest_bar)], dt)
        }
        Mode::Jvp | Mode::HessianDiag => {
            let missing = |f: &str| WorkloadError::BadInput(format!("{source}: field {f}: required for --mode jvp"));
            let vd = case.vals_dot.as_ref().ok_or_else(|| missing("vals_dot"))?;
            let dd = case.dest_dot.as_ref().ok_or_else(|| missing("dest_dot"))?;
            let vd = device.tensor(vd, &[vd.len()], dt).map_err(input)?;
            let dd = device.tensor(dd, &[dd.len()], dt).map_err(input)?;
            let (hist, hist_dot) = w.jvp(device, &x, &dd, &vd).map_err(input)?;
            format_object(&[("hist", &device.to_vec(&hist)?), ("hist_dot", &device.to_vec(&hist_dot)?)], dt)
        }
    })
}

/// A GradBench `hist` call with its inputs resident on the device (see
/// [`crate::workload::GradbenchCall`]); `auto` rule.
struct HistCall<D: Device> {
    device: D,
    w: HistWorkload,
    mode: Mode,
    dtype: DType,
    x: HistInputs<D>,
    /// The reverse-mode rule.
    rule: HistRule,
    /// The mode's seed: `hist_bar` (vjp) or `[vals_dot, dest_dot]` (jvp).
    seeds: Vec<D::T>,
    /// The last run's named outputs, on the device.
    last: Vec<(&'static str, D::T)>,
}

impl<D: Device> HistCall<D> {
    fn new(
        device: D,
        w: HistWorkload,
        mode: Mode,
        case: &crate::json::HistCase,
        source: &str,
        dtype: DType,
        options: ModuleOptions,
    ) -> WResult<HistCall<D>> {
        let input = WorkloadError::from_input;
        let x = w.upload(&device, &case.data, dtype, options.index_dtype).map_err(input)?;
        let field = |v: &Option<Vec<f64>>, name: &str| {
            v.clone().ok_or_else(|| WorkloadError::BadInput(format!("{source}: field {name}: required for {mode}")))
        };
        let mut seeds = Vec::new();
        match mode {
            Mode::Vjp => seeds.push(field(&case.hist_bar, "hist_bar")?),
            Mode::Jvp | Mode::HessianDiag => {
                seeds.push(field(&case.vals_dot, "vals_dot")?);
                seeds.push(field(&case.dest_dot, "dest_dot")?);
            }
            Mode::Primal => {}
        }
        let seeds =
            seeds.iter().map(|v| device.tensor(v, &[v.len()], dtype).map_err(input)).collect::<WResult<Vec<_>>>()?;
        Ok(HistCall { device, w, mode, dtype, x, rule: options.rule, seeds, last: Vec::new() })
    }
}

impl<D: Device> crate::workload::GradbenchCall for HistCall<D> {
    fn run(&mut self) -> WResult<()> {
        let (d, w) = (&self.device, self.w);
        self.last = match (self.mode, self.seeds.as_slice()) {
            (Mode::Primal, _) => vec![("hist", w.primal(d, &self.x)?)],
            (Mode::Vjp, [bar]) => {
                let r = w.vjp(d, self.rule, &self.x, bar)?;
                vec![("hist", r.hist), ("vals_bar", r.vals_bar), ("dest_bar", r.dest_bar)]
            }
            (_, [vals_dot, dest_dot]) => {
                let (hist, hist_dot) = w.jvp(d, &self.x, dest_dot, vals_dot)?;
                vec![("hist", hist), ("hist_dot", hist_dot)]
            }
            _ => return Err(WorkloadError::BadInput(format!("hist: no seeds for {}", self.mode))),
        };
        Ok(d.synchronize()?)
    }
    fn output(&mut self) -> WResult<String> {
        if self.last.is_empty() {
            self.run()?;
        }
        let values =
            self.last.iter().map(|(name, t)| Ok((*name, self.device.to_vec(t)?))).collect::<WResult<Vec<_>>>()?;
        let fields: Vec<(&str, &[f64])> = values.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        Ok(format_object(&fields, self.dtype))
    }
}

/// A generated histogram case.
struct HistProblem {
    w: HistWorkload,
    spec: HistSpec,
    data: HistData,
    index_dtype: IndexDType,
}

impl Problem for HistProblem {
    fn prepare(&self, device: &AnyDevice, dtype: DType, rule: &str) -> WResult<Box<dyn Prepared>> {
        let rule = rule_of(rule)?;
        with_device!(device, |d| {
            let (n, k) = (self.data.vals.len(), self.data.k);
            Ok(Box::new(HistPrepared {
                device: d.clone(),
                w: self.w,
                rule,
                x: self.w.upload(d, &self.data, dtype, self.index_dtype)?,
                bar: d.full(&[k], 1.0, dtype)?,
                vals_dot: d.full(&[n], 1.0, dtype)?,
                dest_dot: d.full(&[k], 1.0, dtype)?,
                traces: ModeTraces::default(),
            }) as Box<dyn Prepared>)
        })
    }

    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        with_device!(device, |d| self.validation_on(d, cpu, s))
    }

    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let (n, k) = (self.data.vals.len(), self.data.k);
        let (ones_n, ones_k) = (vec![1.0; n], vec![1.0; k]);
        let (function, extra): (&str, Vec<(&str, &[f64])>) = match mode {
            Mode::Primal => ("primal", vec![]),
            Mode::Vjp => ("vjp", vec![("hist_bar", &ones_k)]),
            Mode::Jvp => ("jvp", vec![("vals_dot", &ones_n), ("dest_dot", &ones_k)]),
            Mode::HessianDiag => return None,
        };
        Some(RemoteCall { function: function.into(), input: module_input(self.w.op, &self.data, &extra) })
    }

    /// The tool's VJP and JVP against finite differences (f64 primal on the CPU), the oracle, and
    /// each other (dot-product test, full Jacobian at a tiny size). The tool computes in f64.
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        let f = RemoteHistFlat::new(remote.clone(), cpu.clone(), self.w.op, &self.data);
        let local = HistFlat::new(cpu.clone(), cpu.clone(), self.w, HistRule::Auto, DType::F64, &self.data);
        let mut rng = adgauge_datasets::rng(s.seed ^ 0x04ac1e);
        let mut random =
            |n: usize| -> Vec<f64> { (0..n).map(|_| rand::RngExt::random_range(&mut rng, -1.0..1.0)).collect() };
        let bar = random(self.data.k);
        let v = random(f.n_in());
        let mut comparisons = Vec::new();
        match f.primal() {
            Ok(got) => comparisons.push(Comparison {
                check: CheckKind::OraclePrimal,
                got,
                want: local.oracle_primal(),
                convention: None,
            }),
            Err(adgauge_backends::OpError::Unsupported(_)) => {}
            Err(e) => return Err(e.into()),
        }
        // A tool without reverse mode (dual numbers) says so (unsupported): its reverse-mode
        // checks are left out; a tool with neither mode is unsupported.
        let reverse = match f.vjp(&bar) {
            Ok(got) => {
                comparisons.push(Comparison {
                    check: CheckKind::OracleVjp,
                    got,
                    want: local.oracle_vjp(&bar),
                    convention: None,
                });
                if let Some((tie, tie_bar)) = tie_case(self.w.op) {
                    let t = RemoteHistFlat::new(remote.clone(), cpu.clone(), self.w.op, &tie);
                    comparisons.push(judge_ties(self.w.op, &tie, &tie_bar, t.vjp(&tie_bar)?, &s.conventions));
                }
                None
            }
            Err(adgauge_backends::OpError::Unsupported(why)) => Some(why),
            Err(e) => return Err(e.into()),
        };
        // A tool without forward mode says so (unsupported): its forward-mode checks are left out.
        let mut full_jacobian = None;
        match f.jvp(&v) {
            Ok(got) => {
                comparisons.push(Comparison {
                    check: CheckKind::OracleJvp,
                    got,
                    want: local.oracle_jvp(&v),
                    convention: None,
                });
                let tiny =
                    generate(&HistSpec { n: self.spec.n.min(JACOBIAN_N), k: self.spec.k.min(JACOBIAN_K), ..self.spec });
                let g = RemoteHistFlat::new(remote, cpu.clone(), self.w.op, &tiny);
                full_jacobian = Some(FullJacobian { flat: Box::new(g), tolerance_of: CheckKind::FullJacobian });
            }
            Err(adgauge_backends::OpError::Unsupported(why)) => {
                if let Some(reverse) = reverse {
                    return Err(adgauge_backends::OpError::Unsupported(format!("{reverse}; {why}")).into());
                }
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Validation { flat: Box::new(f), full_jacobian, comparisons })
    }
}

impl HistProblem {
    /// The generic checks on [vals, dest] -> hist, the oracle for a random adjoint and tangent,
    /// every other rule's VJP, and the full Jacobian at a tiny size.
    fn validation_on<D: Device>(&self, device: &D, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        let (dt, rule) = (s.dtype, rule_of(&s.rule)?);
        // Every flat view of the case's data and of the check's own data: the rule, dtype,
        // index dtype and injected fault under test.
        let flat = |data: &HistData| {
            let mut f = HistFlat::new(device.clone(), cpu.clone(), self.w, rule, dt, data);
            f.drop_dest_adjoint = s.fault.as_deref() == Some(DROP_DEST_ADJOINT);
            f.drop_dest_primal = s.fault.as_deref() == Some(DROP_DEST_PRIMAL);
            f.index_dtype = self.index_dtype;
            f
        };
        let f = flat(&self.data);
        let mut rng = adgauge_datasets::rng(s.seed ^ 0x04ac1e);
        let mut random = |n: usize| -> Vec<f64> {
            (0..n).map(|_| dt.round(rand::RngExt::random_range(&mut rng, -1.0..1.0))).collect()
        };
        let bar = random(self.data.k);
        let got = f.vjp(&bar)?;
        let mut comparisons = vec![Comparison {
            check: CheckKind::OracleVjp,
            got: got.clone(),
            want: f.oracle_vjp(&bar),
            convention: None,
        }];
        comparisons.extend(f.primal_comparisons(&[rule])?);
        for other in HistRule::ALL.into_iter().filter(|&r| r != rule) {
            match f.vjp_parts(other, &bar) {
                Ok((vb, db)) => comparisons.push(Comparison {
                    check: CheckKind::RuleAgreement,
                    got: got.clone(),
                    want: vb.into_iter().chain(db).collect(),
                    convention: None,
                }),
                Err(adgauge_backends::OpError::Unsupported(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if let Some((tie, tie_bar)) = tie_case(self.w.op) {
            let t = flat(&tie);
            comparisons.push(judge_ties(self.w.op, &tie, &tie_bar, t.vjp(&tie_bar)?, &s.conventions));
        }
        comparisons.push(perturbation_probe(device, dt)?);
        comparisons.push(primitives_probe(device, self.w.op, dt, s.seed)?);
        // Once per operator and device (the scans take no rule), in f64: in f32 the rounding of
        // folds of 131072 terms depends on their order (6e-4 apart from the f64 chain rule for
        // `+`, 8e-4 for `*`), beyond the tolerance, while the code paths are the same.
        if s.thorough && rule == HistRule::Auto && dt == DType::F64 {
            comparisons.push(scans_at_size_probe(device, self.w.op, dt, s.seed)?);
        }
        // Rules built from fused kernels without derivative rules of their own (general-sort,
        // general-chunked, the total forms, logaddexp's) cannot be nested; the scan part still
        // runs where the histogram part cannot.
        match second_order_probe(device, cpu, self.w.op, rule, dt, s.seed) {
            Ok(c) => comparisons.push(c),
            Err(adgauge_backends::OpError::NotDifferentiable(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(stress) = stress_case(self.w.op, s.seed) {
            let t = flat(&stress);
            comparisons.extend(stress_comparisons(&t, s.seed)?);
            comparisons.extend(t.primal_comparisons(&HistRule::ALL)?);
        }
        let t = flat(&extremes_case(self.w.op));
        comparisons.extend(extremes_comparisons(&t)?);
        comparisons.extend(t.primal_comparisons(&HistRule::ALL)?);
        for data in size_sweep_cases(self.w, s.seed, s.thorough) {
            let t = flat(&data);
            comparisons.extend(size_sweep_comparisons(&t, rule == HistRule::Auto, s.seed)?);
            comparisons.extend(t.primal_comparisons(&[rule])?);
            if !s.thorough {
                continue;
            }
            if let Some((extreme, planted)) = extremes_at_size(self.w.op, &data) {
                comparisons.extend(extremes_at_size_comparisons(&flat(&extreme), planted, s.seed)?);
            }
        }
        let n_in = f.n_in();
        let mut full_jacobian = None;
        if f.jvp(&vec![0.0; n_in]).is_ok() {
            let v = random(n_in);
            comparisons.push(Comparison {
                check: CheckKind::OracleJvp,
                got: f.jvp(&v)?,
                want: f.oracle_jvp(&v),
                convention: None,
            });
            let tiny =
                generate(&HistSpec { n: self.spec.n.min(JACOBIAN_N), k: self.spec.k.min(JACOBIAN_K), ..self.spec });
            full_jacobian = Some(FullJacobian { flat: Box::new(flat(&tiny)), tolerance_of: CheckKind::FullJacobian });
        }
        Ok(Validation { flat: Box::new(f), full_jacobian, comparisons })
    }
}

/// The fault (`check --inject-fault`) that zeroes dest's adjoint ([`HistFlat::drop_dest_adjoint`]).
pub const DROP_DEST_ADJOINT: &str = "drop-dest-adjoint";

/// The fault (`check --inject-fault`) whose device primals forget dest ([`HistFlat::drop_dest_primal`]).
pub const DROP_DEST_PRIMAL: &str = "drop-dest-primal";

/// A histogram case resident on a device with an all-ones adjoint and tangents.
struct HistPrepared<D: Device> {
    device: D,
    w: HistWorkload,
    rule: HistRule,
    x: HistInputs<D>,
    bar: D::T,
    vals_dot: D::T,
    dest_dot: D::T,
    traces: ModeTraces,
}

impl<D: Device> Prepared for HistPrepared<D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, w) = (&self.device, self.w);
        self.traces.run(d, mode, &mut || -> WResult<()> {
            match mode {
                Mode::Primal => drop(w.primal(d, &self.x)?),
                Mode::Vjp => drop(w.vjp(d, self.rule, &self.x, &self.bar)?),
                Mode::Jvp | Mode::HessianDiag => drop(w.jvp(d, &self.x, &self.dest_dot, &self.vals_dot)?),
            }
            Ok(())
        })
    }

    fn rule_taken(&self) -> Option<String> {
        let (n, k) = (self.vals_dot.numel(), self.bar.numel());
        Some(adgauge_backends::rules::hist::resolved_rule(&self.device, self.rule, self.w.op, n, k).name().to_string())
    }
}

/// One histogram case as a flat function (x = [vals, dest], y = hist) at a point rounded to the
/// dtype under test: derivatives on `device`, the f64 primal on `cpu`.
pub struct HistFlat<D: Ops> {
    device: D,
    cpu: Cpu,
    pub workload: HistWorkload,
    pub rule: HistRule,
    pub dtype: DType,
    /// The indices' dtype on `device` (i64 unless set).
    pub index_dtype: IndexDType,
    pub data: HistData,
    /// Fault injection for testing the validator: zero dest's adjoint (a broken `+` rule).
    pub drop_dest_adjoint: bool,
    /// Fault injection for testing the validator: the device's primals fold the values into
    /// the operator's neutral element instead of dest (a primal that forgets dest), while every
    /// derivative sees the true data.
    pub drop_dest_primal: bool,
    x0: Vec<f64>,
}

impl<D: Ops> HistFlat<D> {
    pub fn new(device: D, cpu: Cpu, workload: HistWorkload, rule: HistRule, dtype: DType, data: &HistData) -> Self {
        let data = HistData {
            k: data.k,
            inds: data.inds.clone(),
            vals: rounded(&data.vals, dtype),
            dest: rounded(&data.dest, dtype),
        };
        let x0 = data.vals.iter().chain(&data.dest).copied().collect();
        HistFlat {
            device,
            cpu,
            workload,
            rule,
            dtype,
            index_dtype: IndexDType::I64,
            data,
            drop_dest_adjoint: false,
            drop_dest_primal: false,
            x0,
        }
    }

    fn n(&self) -> usize {
        self.data.vals.len()
    }

    fn at(&self, x: &[f64]) -> HistData {
        HistData {
            k: self.data.k,
            inds: self.data.inds.clone(),
            vals: x[..self.n()].to_vec(),
            dest: x[self.n()..].to_vec(),
        }
    }

    /// (vals_bar, dest_bar) for the output adjoint `w`, under `rule`.
    pub fn vjp_parts(&self, rule: HistRule, w: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let d = &self.device;
        let x = self.workload.upload(d, &self.data, self.dtype, self.index_dtype)?;
        let bar = d.tensor(w, &[w.len()], self.dtype)?;
        let r = self.workload.vjp(d, rule, &x, &bar)?;
        Ok((d.to_vec(&r.vals_bar)?, d.to_vec(&r.dest_bar)?))
    }

    /// The oracle's J^T w, flattened like `vjp`.
    pub fn oracle_vjp(&self, w: &[f64]) -> Vec<f64> {
        let (_, db, vb) = oracle::hist_vjp(self.workload.op, &self.data.dest, &self.data.inds, &self.data.vals, w);
        vb.into_iter().chain(db).collect()
    }

    /// The oracle's primal (the sequential f64 fold) at the point, rounded to the dtype.
    pub fn oracle_primal(&self) -> Vec<f64> {
        let d = &self.data;
        oracle::hist(self.workload.op, &d.dest, &d.inds, &d.vals).into_iter().map(|x| self.dtype.round(x)).collect()
    }

    /// Every primal the device computes for this case: its primal, the primal the VJP of each
    /// rule of `rules` returns (rules it does not support are left out) and its JVP's (where it
    /// has forward mode), each named.
    pub fn device_primals(&self, rules: &[HistRule]) -> Result<Vec<(String, Vec<f64>)>> {
        let d = &self.device;
        let (n, k) = (self.n(), self.data.k);
        let forgetful;
        let data = if self.drop_dest_primal {
            forgetful = HistData { dest: vec![self.workload.op.neutral(); k], ..self.data.clone() };
            &forgetful
        } else {
            &self.data
        };
        let x = self.workload.upload(d, data, self.dtype, self.index_dtype)?;
        let mut out = vec![("primal".to_string(), d.to_vec(&self.workload.primal(d, &x)?)?)];
        let bar = d.tensor(&vec![1.0; k], &[k], self.dtype)?;
        for &rule in rules {
            match self.workload.vjp(d, rule, &x, &bar) {
                Ok(r) => out.push((format!("{} vjp", rule.name()), d.to_vec(&r.hist)?)),
                Err(adgauge_backends::OpError::Unsupported(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let (vals_dot, dest_dot) =
            (d.tensor(&vec![1.0; n], &[n], self.dtype)?, d.tensor(&vec![1.0; k], &[k], self.dtype)?);
        match self.workload.jvp(d, &x, &dest_dot, &vals_dot) {
            Ok((hist, _)) => out.push(("jvp".to_string(), d.to_vec(&hist)?)),
            Err(adgauge_backends::OpError::Unsupported(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(out)
    }

    /// The `oracle-primal` comparisons: each of [`Self::device_primals`] against the oracle.
    fn primal_comparisons(&self, rules: &[HistRule]) -> Result<Vec<Comparison>> {
        let want = self.oracle_primal();
        Ok(self
            .device_primals(rules)?
            .into_iter()
            .map(|(_, got)| Comparison { check: CheckKind::OraclePrimal, got, want: want.clone(), convention: None })
            .collect())
    }

    /// The oracle's J v for v = [vals_dot, dest_dot].
    pub fn oracle_jvp(&self, v: &[f64]) -> Vec<f64> {
        let d = &self.data;
        let (vals_dot, dest_dot) = v.split_at(d.vals.len());
        oracle::hist_jvp(self.workload.op, &d.dest, &d.inds, &d.vals, dest_dot, vals_dot).1
    }
}

impl<D: Ops> FlatFn for HistFlat<D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        self.data.k
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        let x = self.workload.upload(&self.cpu, &self.at(x), DType::F64, IndexDType::I64)?;
        self.cpu.to_vec(&self.workload.primal(&self.cpu, &x)?)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let (vb, mut db) = self.vjp_parts(self.rule, w)?;
        if self.drop_dest_adjoint {
            db.iter_mut().for_each(|x| *x = 0.0);
        }
        Ok(vb.into_iter().chain(db).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let d = &self.device;
        let x = self.workload.upload(d, &self.data, self.dtype, self.index_dtype)?;
        let (vals_dot, dest_dot) = v.split_at(self.n());
        let vd = d.tensor(vals_dot, &[vals_dot.len()], self.dtype)?;
        let dd = d.tensor(dest_dot, &[dest_dot.len()], self.dtype)?;
        let (_, hist_dot) = self.workload.jvp(d, &x, &dd, &vd)?;
        d.to_vec(&hist_dot)
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        tie_within_step(self.workload.op, &self.data, h)
    }
}

/// For min/max: a bin whose winner does not beat every other competitor by more than the step
/// moves them (|v_i| <= 1, so by 2h), where a finite difference would straddle a kink.
fn tie_within_step(op: HistOp, d: &HistData, h: f64) -> Option<String> {
    let ext = op.tie_break()?;
    let k = d.k;
    let mut best = d.dest.clone();
    let mut second = vec![if ext == Extremum::Min { f64::INFINITY } else { f64::NEG_INFINITY }; k];
    let better = |a: f64, b: f64| if ext == Extremum::Min { a < b } else { a > b };
    for (&b, &v) in d.inds.iter().zip(&d.vals) {
        if b < 0 || b as usize >= k {
            continue;
        }
        let b = b as usize;
        if better(v, best[b]) {
            second[b] = best[b];
            best[b] = v;
        } else if better(v, second[b]) || v == best[b] {
            second[b] = v;
        }
    }
    (0..k).find(|&b| second[b].is_finite() && (best[b] - second[b]).abs() <= 2.0 * h).map(|b| {
        format!("bin {b}: competing values {} and {} are within the step 2h = {:.1e}", best[b], second[b], 2.0 * h)
    })
}

/// A small min/max case with exact ties, and an adjoint that splits exactly: two elements tied
/// (bin 0), dest tied with an element (bin 1), three elements tied (bin 2), dest alone (bin 3),
/// and out-of-range indices. `None` for operators without a tie policy.
fn tie_case(op: HistOp) -> Option<(HistData, Vec<f64>)> {
    let sign = if op.tie_break()? == Extremum::Max { 1.0 } else { -1.0 };
    let scaled = |xs: &[f64]| xs.iter().map(|x| x * sign).collect();
    let data = HistData {
        k: 4,
        inds: vec![0, 0, 1, 1, 2, 2, 2, 3, -1, 7],
        vals: scaled(&[3.0, 3.0, 2.0, 1.0, 0.5, 0.5, 0.5, -2.0, 9.0, 9.0]),
        dest: scaled(&[1.0, 2.0, 0.0, -1.0]),
    };
    Some((data, vec![2.0, -4.0, 3.0, 0.5]))
}

/// The size of the stress data: above the CPU device's parallel threshold (2^16 elements, and at
/// least 2^15 per chunk: two chunks of four interleaved sub-histograms at k = 64) and far above
/// the GPU devices' (chunks of 1024), so that chunk carries and the merge of private rows run.
const STRESS_N: usize = 100_000;
const STRESS_K: usize = 64;

/// Data built to see the bugs that random well-separated values hide (the `stress` check): values
/// from a small set, so min/max tie between elements and with dest in almost every bin (and
/// logaddexp ties exactly); the operator's neutral or degenerate elements (-inf for logaddexp,
/// whole bins of -inf included; zeros for hypot, whole bins of zeros included; for `*` bins with
/// one zero, two zeros, or a zero dest); empty bins (every seventh); out-of-range indices. Only
/// compared with the oracle: finite differences would straddle the kinks and infinities.
/// `None` for operators without a designed value set.
pub fn stress_case(op: HistOp, seed: u64) -> Option<HistData> {
    use rand::RngExt;
    let (n, k) = (STRESS_N, STRESS_K);
    let name = op.name();
    let mut rng = adgauge_datasets::rng(seed ^ 0x57_2e55);
    let mut pick = |set: &[f64]| set[rng.random_range(0..set.len())];
    let vals_set: &[f64] = match name {
        "add" => &[-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0],
        // Mostly +-1 so that products over ~1500 elements stay far from overflow in f32.
        "mul" => &[-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 2.0, -0.5],
        "min" | "max" => &[-2.0, -1.0, 0.0, 1.0, 2.0],
        "logaddexp" => &[f64::NEG_INFINITY, -1.0, 0.0, 1.0],
        "hypot" => &[0.0, 0.0, -2.0, -1.0, 1.0, 3.0],
        _ => return None,
    };
    let dest_set: &[f64] = match name {
        "logaddexp" => &[f64::NEG_INFINITY, 0.0, 1.0],
        "hypot" => &[0.0, 1.0, 2.0],
        _ => vals_set,
    };
    let mut vals: Vec<f64> = (0..n).map(|_| pick(vals_set)).collect();
    let mut dest: Vec<f64> = (0..k).map(|_| pick(dest_set)).collect();
    let mut rng = adgauge_datasets::rng(seed ^ 0x57_2e56);
    let inds: Vec<i64> = (0..n)
        .map(|i| match rng.random_range(0..100u32) {
            0..=2 => -1,
            3..=4 => (k + i % 3) as i64,
            _ => {
                // Every seventh bin stays empty.
                let b = rng.random_range(0..k);
                if b % 7 == 6 { b as i64 - 1 } else { b as i64 }
            }
        })
        .collect();
    // Degenerate bins: every fifth holds only the neutral element (logaddexp's -inf,
    // hypot's 0), and for `*` bins with one zero, two zeros or a zero dest.
    let mut zeros_seen = vec![0usize; k];
    // logaddexp: in every fifth bin (from the third) an exact tie of dest and one value at 1e16,
    // the other values -inf: the tied pair's adjoints are 1/2 each, where a rule that reads the
    // rounded total (1e16 + log 2 rounds to 1e16, in f32 and f64) gives 1 to both.
    const HUGE: f64 = 1e16;
    for (i, &b) in inds.iter().enumerate() {
        if b < 0 || b as usize >= k {
            continue;
        }
        let b = b as usize;
        match name {
            "logaddexp" if b % 5 == 4 => vals[i] = f64::NEG_INFINITY,
            "logaddexp" if b % 5 == 2 => {
                vals[i] = if zeros_seen[b] == 0 { HUGE } else { f64::NEG_INFINITY };
                zeros_seen[b] += 1;
            }
            "hypot" if b % 5 == 4 => vals[i] = 0.0,
            "mul" => {
                let zeros = [0, 1, 2, 0][b % 4];
                vals[i] = if zeros_seen[b] < zeros { 0.0 } else { vals[i] };
                zeros_seen[b] += 1;
            }
            _ => {}
        }
    }
    for (b, d) in dest.iter_mut().enumerate() {
        match name {
            "logaddexp" if b % 5 == 4 => *d = f64::NEG_INFINITY,
            "logaddexp" if b % 5 == 2 => *d = HUGE,
            "hypot" if b % 5 == 4 => *d = 0.0,
            "mul" => *d = if b % 4 == 3 { 0.0 } else { [1.0, -1.0][b % 2] },
            _ => {}
        }
    }
    Some(HistData { k, inds, vals, dest })
}

/// The bins of the `extremes` check, one per situation the guide's Histogram rules section defines:
/// (dest, values in index order, hist_bar).
const EXTREME_BINS: [(f64, &[f64], f64); 18] = [
    (1e16, &[1e16, 1e16], 1.5),                        // three-way tie with dest at 1e16
    (0.5, &[1e16, 1e16, 1e16], -2.0),                  // three tied values at 1e16
    (1e308, &[1e308, 1e308], 1.25),                    // three-way tie at 1e308 (+inf in f32)
    (0.5, &[f64::INFINITY, 1.0, f64::INFINITY], 1.0),  // two +inf values
    (1.0, &[2.0, f64::NAN, 3.0], 0.75),                // a NaN value
    (f64::NAN, &[1.0, 2.0], -2.5),                     // a NaN dest
    (f64::NEG_INFINITY, &[f64::NEG_INFINITY; 2], 1.0), // -inf only
    (2.0, &[f64::NEG_INFINITY, 1.0], 3.0),             // a -inf value
    (1.0, &[f64::NAN, 0.0, 5.0], 1.0),                 // a NaN and a zero
    (1.0, &[f64::INFINITY, f64::NAN], 0.5),            // +inf, then NaN
    (f64::INFINITY, &[f64::INFINITY, 3.0], 2.0),       // +inf dest and value
    (1.0, &[f64::NAN, 2.0], 0.0),                      // a NaN bin whose adjoint is 0
    (3.0, &[f64::INFINITY, 2.0], 1.0),                 // one +inf value
    (2.0, &[f64::INFINITY, 0.0, 3.0], 0.5),            // +inf and a zero
    (2.0, &[0.0, f64::NEG_INFINITY], 1.0),             // a zero and -inf
    (f64::INFINITY, &[2.0, 3.0], -1.0),                // +inf dest, finite values
    (2.0, &[f64::INFINITY, 3.0], 0.0),                 // an infinite bin whose adjoint is 0
    (0.0, &[f64::INFINITY, 2.0], 1.5),                 // a zero dest and +inf
];

/// An `EXTREME_BINS` value as `op` takes it: hypot's bins are magnitudes (absolute values);
/// `*` gets 2 for finite magnitudes of 1e16 and more, since its finite products out of range
/// (1e16 cubed in f32, 1e308 squared) are outside what its rules agree on (guide, Histogram
/// rules: keep finite products in range); its infinite and NaN bins stay.
fn extreme_value(op: HistOp, x: f64) -> f64 {
    if std::ptr::eq(adgauge_backends::general::as_general(op), &adgauge_backends::general::HYPOT) {
        x.abs()
    } else if std::ptr::eq(adgauge_backends::general::as_general(op), &adgauge_backends::general::MUL)
        && x.is_finite()
        && x.abs() >= 1e16
    {
        2.0
    } else {
        x
    }
}

/// The data of the `extremes` check for `op` (hypot's bins are magnitudes: absolute values;
/// `*` gets 2 for finite magnitudes of 1e16 and more, and keeps its infinities):
/// the bins of `EXTREME_BINS` with their elements interleaved (so chunks, sorts and the
/// parallel folds move them), and an out-of-range NaN and +inf that must be ignored.
pub fn extremes_case(op: HistOp) -> HistData {
    let magnitude = |x: f64| extreme_value(op, x);
    let k = EXTREME_BINS.len();
    let mut data =
        HistData { k, inds: vec![], vals: vec![], dest: EXTREME_BINS.iter().map(|b| magnitude(b.0)).collect() };
    let longest = EXTREME_BINS.iter().map(|b| b.1.len()).max().unwrap_or(0);
    for r in 0..longest {
        for (b, (_, vals, _)) in EXTREME_BINS.iter().enumerate() {
            if let Some(&v) = vals.get(r) {
                data.inds.push(b as i64);
                data.vals.push(magnitude(v));
            }
        }
        if r == 0 {
            data.inds.extend([-1, k as i64]);
            data.vals.extend([f64::NAN, f64::INFINITY]);
        }
    }
    data
}

/// The `extremes` comparisons of one rule and engine: its VJP, every other rule's VJP and the
/// forward rule's JVP (tangents 1, 2, 3, ...) against the sequential oracle.
fn extremes_comparisons<D: Ops>(f: &HistFlat<D>) -> Result<Vec<Comparison>> {
    let extremes =
        |got: Vec<f64>, want: Vec<f64>| Comparison { check: CheckKind::Extremes, got, want, convention: None };
    let bar: Vec<f64> = EXTREME_BINS.iter().map(|b| b.2).collect();
    let want = f.oracle_vjp(&bar);
    let mut out = vec![extremes(f.vjp(&bar)?, want.clone())];
    for other in HistRule::ALL.into_iter().filter(|&r| r != f.rule) {
        match f.vjp_parts(other, &bar) {
            Ok((vb, db)) => out.push(extremes(vb.into_iter().chain(db).collect(), want.clone())),
            Err(adgauge_backends::OpError::Unsupported(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let v: Vec<f64> = (0..f.n_in()).map(|i| 1.0 + i as f64).collect();
    match f.jvp(&v) {
        Ok(got) => out.push(extremes(got, f.oracle_jvp(&v))),
        Err(adgauge_backends::OpError::Unsupported(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// A size-sweep case with the extreme bins planted in it: its first bins take the bins of
/// `EXTREME_BINS` (dest and values as `extreme_value` makes them), then a bin of a single
/// element and an empty bin; their elements sit at positions spread evenly over the whole input
/// (so the infinities and NaNs fall into different chunks, sub-histograms and parallel merges),
/// and the elements those bins held before go to the other bins, which keep their values. The
/// planted bins' count is the second item. None where the case is too small to hold them with
/// one ordinary bin besides (k < 2, or fewer elements than planted ones).
pub fn extremes_at_size(op: HistOp, data: &HistData) -> Option<(HistData, usize)> {
    let k = data.k;
    let planted = (EXTREME_BINS.len() + 2).min(k.checked_sub(1)?);
    if planted == 0 {
        return None;
    }
    // Each planted bin's values: the single-element bin holds one 1.5, the empty bin none.
    let bin_values = |b: usize| -> Vec<f64> {
        match b.checked_sub(EXTREME_BINS.len()) {
            None => EXTREME_BINS[b].1.iter().map(|&v| extreme_value(op, v)).collect(),
            Some(0) => vec![1.5],
            Some(_) => vec![],
        }
    };
    let values: Vec<(usize, f64)> = (0..planted).flat_map(|b| bin_values(b).into_iter().map(move |v| (b, v))).collect();
    let n = data.vals.len();
    if n < values.len() {
        return None;
    }
    let mut d = data.clone();
    let ordinary = k - planted;
    for (i, b) in d.inds.iter_mut().enumerate() {
        if *b >= 0 && (*b as usize) < planted {
            *b = (planted + i % ordinary) as i64;
        }
    }
    for (t, &(b, v)) in values.iter().enumerate() {
        let at = t * n / values.len() + (n / values.len()) / 2;
        d.inds[at] = b as i64;
        d.vals[at] = v;
    }
    for (b, dest) in d.dest.iter_mut().enumerate().take(planted) {
        *dest = match EXTREME_BINS.get(b) {
            Some(bin) => extreme_value(op, bin.0),
            None => 0.5,
        };
    }
    Some((d, planted))
}

/// The oracle's VJP and JVP of an [`extremes_at_size`] case in O(n): the linear oracle
/// ([`stress_oracle_vjp`], [`partials_times`]) for the ordinary bins, and the sequential oracle
/// on the planted bins alone, which its answers replace (the linear oracle multiplies partials
/// plainly, where an infinite partial meets a zero as the semantics say it must not).
fn extremes_at_size_oracle(op: HistOp, d: &HistData, planted: usize, bar: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let n = d.vals.len();
    let mut vjp = stress_oracle_vjp(op, d, bar);
    let mut jvp = partials_times(op, d, v);
    let members: Vec<usize> = (0..n).filter(|&i| d.inds[i] >= 0 && (d.inds[i] as usize) < planted).collect();
    let sub_inds: Vec<i64> = members.iter().map(|&i| d.inds[i]).collect();
    let sub_vals: Vec<f64> = members.iter().map(|&i| d.vals[i]).collect();
    let sub_dest = &d.dest[..planted];
    let (_, dest_bar, vals_bar) = oracle::hist_vjp(op, sub_dest, &sub_inds, &sub_vals, &bar[..planted]);
    let vals_dot: Vec<f64> = members.iter().map(|&i| v[i]).collect();
    let (_, hist_dot) = oracle::hist_jvp(op, sub_dest, &sub_inds, &sub_vals, &v[n..n + planted], &vals_dot);
    for (j, &i) in members.iter().enumerate() {
        vjp[i] = vals_bar[j];
    }
    vjp[n..n + planted].copy_from_slice(&dest_bar);
    jvp[..planted].copy_from_slice(&hist_dot);
    (vjp, jvp)
}

/// The `extremes` comparisons of one rule and engine at one size of the sweep
/// ([`extremes_at_size`]): this rule's VJP, every other rule's, the JVP and every primal the
/// device computes, against the oracle. Adjoints: the planted bins' own, random elsewhere;
/// tangents positive.
fn extremes_at_size_comparisons<D: Ops>(f: &HistFlat<D>, planted: usize, seed: u64) -> Result<Vec<Comparison>> {
    use rand::RngExt;
    let d = &f.data;
    let (n, k) = (d.vals.len(), d.k);
    let mut rng = adgauge_datasets::rng(seed ^ 0xe7_5e1f);
    let dt = f.dtype;
    let mut random = |len: usize| -> Vec<f64> { (0..len).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect() };
    let mut bar = random(k);
    for (b, g) in bar.iter_mut().enumerate().take(planted.min(EXTREME_BINS.len())) {
        *g = EXTREME_BINS[b].2;
    }
    // Tangents of one sign, as in `extremes`: with `*`'s infinite partials, tangents of both
    // signs make a sum of infinities whose value (+-inf or NaN) depends on the order of the sum.
    let v: Vec<f64> = (0..n + k).map(|i| dt.round(0.5 + (i % 7) as f64 * 0.25)).collect();
    let (want_vjp, want_jvp) = extremes_at_size_oracle(f.workload.op, d, planted, &bar, &v);
    let extremes = |got: Vec<f64>, want: &[f64]| Comparison {
        check: CheckKind::Extremes,
        got,
        want: want.to_vec(),
        convention: None,
    };
    let mut out = vec![extremes(f.vjp(&bar)?, &want_vjp)];
    for other in HistRule::ALL.into_iter().filter(|&r| r != f.rule) {
        match f.vjp_parts(other, &bar) {
            Ok((vb, db)) => out.push(extremes(vb.into_iter().chain(db).collect(), &want_vjp)),
            Err(adgauge_backends::OpError::Unsupported(_)) => {}
            Err(e) => return Err(e),
        }
    }
    match f.jvp(&v) {
        Ok(got) => out.push(extremes(got, &want_jvp)),
        Err(adgauge_backends::OpError::Unsupported(_)) => {}
        Err(e) => return Err(e),
    }
    out.extend(f.primal_comparisons(&HistRule::ALL)?);
    Ok(out)
}

/// Bins past which a size switch is crossed by `check --thorough` only.
const THOROUGH_BINS: usize = 1 << 18;
/// Elements past which a size switch is crossed by `check --thorough` only.
const THOROUGH_N: usize = 1 << 17;

/// Seeded data on both sides of every size switch of the histogram code
/// (`adgauge_backends::sizes::hist_size_switches`, the one list the code's thresholds are
/// registered in): the sizes at which a device or `auto` takes another path. Without
/// `thorough`, the switches past 2^18 bins or 2^17 elements are left out (`check --thorough`
/// crosses them).
pub fn size_sweep_cases(w: HistWorkload, seed: u64, thorough: bool) -> Vec<HistData> {
    adgauge_backends::sizes::hist_size_switches()
        .into_iter()
        .filter(|s| s.op.is_none_or(|op| op == w.op))
        .filter(|s| thorough || (s.past.1 <= THOROUGH_BINS && s.past.0 <= THOROUGH_N))
        .flat_map(|s| [s.before, s.past])
        .map(|(n, k)| generate(&w.spec(n, k, IndexDist::Uniform, 0.05, seed ^ 0x512e5 ^ ((n as u64) << 20) ^ k as u64)))
        .collect()
}

/// The `stress` comparisons at one size of the sweep: this rule's VJP for a random adjoint
/// against the O(n) oracle, and with `with_jvp` (once per workload and dtype: under `auto`)
/// the forward rule's JVP.
fn size_sweep_comparisons<D: Ops>(f: &HistFlat<D>, with_jvp: bool, seed: u64) -> Result<Vec<Comparison>> {
    use rand::RngExt;
    let d = &f.data;
    let (n, k) = (d.vals.len(), d.k);
    let mut rng = adgauge_datasets::rng(seed ^ 0x512e6);
    let dt = f.dtype;
    let mut random = |len: usize| -> Vec<f64> { (0..len).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect() };
    let (bar, v) = (random(k), random(n + k));
    let stress = |got: Vec<f64>, want: Vec<f64>| Comparison { check: CheckKind::Stress, got, want, convention: None };
    let mut out = vec![stress(f.vjp(&bar)?, stress_oracle_vjp(f.workload.op, d, &bar))];
    if with_jvp {
        match f.jvp(&v) {
            Ok(got) => out.push(stress(got, partials_times(f.workload.op, d, &v))),
            Err(adgauge_backends::OpError::Unsupported(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// J v from the oracle's partials in O(n): each input moves only its own bin, so J v is the
/// oracle's VJP for an all-ones adjoint times v, summed per bin.
fn partials_times(op: HistOp, d: &HistData, v: &[f64]) -> Vec<f64> {
    let (n, k) = (d.vals.len(), d.k);
    let ones = stress_oracle_vjp(op, d, &vec![1.0; k]);
    let mut want: Vec<f64> = (0..k).map(|b| ones[n + b] * v[n + b]).collect();
    for (i, &b) in d.inds.iter().enumerate() {
        if b >= 0 && (b as usize) < k {
            want[b as usize] += ones[i] * v[i];
        }
    }
    want
}

/// The `stress` comparisons of one rule and engine: its VJP for a random adjoint and its JVP for
/// a random tangent against the sequential oracle, and every other rule's VJP against the
/// oracle too (rule agreement on the same data).
fn stress_comparisons<D: Ops>(f: &HistFlat<D>, seed: u64) -> Result<Vec<Comparison>> {
    use rand::RngExt;
    let d = &f.data;
    let (n, k) = (d.vals.len(), d.k);
    let mut rng = adgauge_datasets::rng(seed ^ 0x57_2e57);
    let dt = f.dtype;
    let mut random = |len: usize| -> Vec<f64> { (0..len).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect() };
    let (bar, v) = (random(k), random(n + k));
    let stress = |got: Vec<f64>, want: Vec<f64>| Comparison { check: CheckKind::Stress, got, want, convention: None };
    let want = stress_oracle_vjp(f.workload.op, d, &bar);
    let mut out = vec![stress(f.vjp(&bar)?, want.clone())];
    for other in HistRule::ALL.into_iter().filter(|&r| r != f.rule) {
        match f.vjp_parts(other, &bar) {
            Ok((vb, db)) => out.push(stress(vb.into_iter().chain(db).collect(), want.clone())),
            Err(adgauge_backends::OpError::Unsupported(_)) => {}
            Err(e) => return Err(e),
        }
    }
    match f.jvp(&v) {
        // O(n), where the oracle's JVP is O(n k).
        Ok(got) => out.push(stress(got, partials_times(f.workload.op, d, &v))),
        Err(adgauge_backends::OpError::Unsupported(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// The scans' and the whole reduction's length in [`scans_at_size_probe`]: the CPU's parallel
/// scans with carries start here (and its parallel reductions well before).
const SCAN_AT_SIZE_N: usize = adgauge_backends::sizes::parallel_scan_min();

/// A scan in O(n), for [`scans_at_size_probe`]: the scan of `x` (see [`ScanSpec`]; with `keys`,
/// each run of equal keys on its own), its tangent for `dot` by the chain rule along the
/// sweep, and the adjoint of `x` for `bar` by the same chain run backwards. It multiplies
/// partials plainly, which is right away from the operators' special points (the probe's
/// values stay away from them; the sequential oracle, O(n^2) and more, checks them at 40).
fn linear_scan(op: HistOp, x: &[f64], spec: ScanSpec, keys: Option<&[i64]>, dot: &[f64], bar: &[f64]) -> [Vec<f64>; 3] {
    let n = x.len();
    let order: Vec<usize> = if spec.reverse { (0..n).rev().collect() } else { (0..n).collect() };
    let starts: Vec<bool> = (0..n).map(|t| t == 0 || keys.is_some_and(|k| k[order[t]] != k[order[t - 1]])).collect();
    let (mut y, mut y_dot, mut x_bar) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    // The state before each element joins it (the neutral element at a segment's start).
    let mut before = vec![0.0; n];
    let (mut state, mut state_dot) = (op.neutral(), 0.0);
    for t in 0..n {
        let p = order[t];
        if starts[t] {
            (state, state_dot) = (op.neutral(), 0.0);
        }
        before[t] = state;
        let after = op.combine(state, x[p]);
        let after_dot =
            op.partial(Operand::Left, state, x[p]) * state_dot + op.partial(Operand::Right, state, x[p]) * dot[p];
        (y[p], y_dot[p]) = if spec.exclusive { (state, state_dot) } else { (after, after_dot) };
        (state, state_dot) = (after, after_dot);
    }
    // The adjoint of the state after element t: its own output's (inclusive) or the next
    // element's (exclusive), plus what flows back from the state after it.
    let mut carry = 0.0;
    for t in (0..n).rev() {
        let p = order[t];
        let last = t + 1 == n || starts[t + 1];
        if last {
            carry = 0.0;
        }
        let mut state_bar = carry;
        if !spec.exclusive {
            state_bar += bar[p];
        } else if !last {
            state_bar += bar[order[t + 1]];
        }
        x_bar[p] = state_bar * op.partial(Operand::Right, before[t], x[p]);
        carry = state_bar * op.partial(Operand::Left, before[t], x[p]);
    }
    [y, y_dot, x_bar]
}

/// The `primitives` check at the size where the CPU scans in parallel blocks with carries
/// ([`SCAN_AT_SIZE_N`]), which no histogram rule reaches there (general-sort takes its fused
/// sorted adjoint): the operator's scans (inclusive and exclusive, forwards and reversed, plain
/// and segmented in runs of 1 to 5000 that cross the blocks) and its whole reduction, each's
/// value, VJP and JVP on the device under test against [`linear_scan`]. The values are
/// distinct magnitudes (no min/max ties: the tie policy is the small probe's), within 1 +- 2^-10
/// for `*` (products of 131072 factors stay in range), +-[0.5, 1.5] otherwise.
fn scans_at_size_probe<D: Ops>(d: &D, op: HistOp, dt: DType, seed: u64) -> Result<Comparison> {
    use rand::RngExt;
    use rand::seq::SliceRandom;
    let n = SCAN_AT_SIZE_N;
    let mut rng = adgauge_datasets::rng(seed ^ 0x5ca7_512e);
    let product = std::ptr::eq(adgauge_backends::general::as_general(op), &adgauge_backends::general::MUL);
    let mut magnitudes: Vec<usize> = (0..n).collect();
    magnitudes.shuffle(&mut rng);
    let x: Vec<f64> = magnitudes
        .iter()
        .map(|&m| {
            let u = m as f64 / n as f64;
            let size = if product { 1.0 + (u - 0.5) / 1024.0 } else { 0.5 + u };
            dt.round(if rng.random_bool(0.5) { size } else { -size })
        })
        .collect();
    let mut random = |len: usize| -> Vec<f64> { (0..len).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect() };
    let (bar, dot) = (random(n), random(n));
    let mut keys = Vec::with_capacity(n);
    while keys.len() < n {
        let run = rng.random_range(1..=5000).min(n - keys.len());
        let key = keys.len() as i64;
        keys.extend(std::iter::repeat_n(key, run));
    }
    let key_index = d.index(&keys)?;
    let tensor = |v: &[f64]| d.tensor(v, &[v.len()], dt);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for (spec, segments) in scan_forms(&keys) {
        let seg = segments.map(|_| &key_index);
        let [y, y_dot, x_bar] = linear_scan(op, &x, spec, segments, &dot, &bar);
        got.extend(d.to_vec(&d.scan(op, &tensor(&x)?, spec, seg)?)?);
        want.extend(y);
        let r = Reverse::new(d.clone());
        let xv = r.var(tensor(&x)?);
        let grads = r.backward(&r.scan(op, &xv, spec, seg)?, tensor(&bar)?)?;
        got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
        want.extend(x_bar);
        let f = Forward::new(d.clone());
        let y = f.scan(op, &f.dual(tensor(&x)?, tensor(&dot)?)?, spec, seg)?;
        got.extend(d.to_vec(&f.tangent(&y)?)?);
        want.extend(y_dot);
    }
    // The sorts at this size: the segment keys reversed in order of runs (so that the
    // permutation moves every element; more keys than `COUNTING_MAX`: the radix passes), and
    // the same modulo 1000 (the parallel counting pass); every 97th key out of range.
    let last_key = keys[n - 1];
    let reversed: Vec<i64> =
        keys.iter().enumerate().map(|(i, &k)| if i % 97 == 5 { -1 } else { last_key - k }).collect();
    let folded: Vec<i64> = reversed.iter().map(|&k| if k < 0 { k } else { k % 1000 }).collect();
    for (sort_keys, num_keys) in [(reversed, last_key as usize + 1), (folded, 1000)] {
        let (g, w) = sort_parts(d, &sort_keys, num_keys)?;
        got.extend(g);
        want.extend(w);
    }
    // The whole reduction: the inclusive scan's last element, its adjoint that scan's for a
    // one-hot adjoint there.
    let mut last = vec![0.0; n];
    last[n - 1] = bar[0];
    let [y, y_dot, x_bar] = linear_scan(op, &x, ScanSpec::INCLUSIVE, None, &dot, &last);
    got.extend(d.to_vec(&d.reduce(op, &tensor(&x)?)?)?);
    want.push(y[n - 1]);
    let r = Reverse::new(d.clone());
    let xv = r.var(tensor(&x)?);
    let total = r.reduce(op, &xv)?;
    let grads = r.backward(&total, d.tensor(&bar[..1], total.value().shape(), dt)?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
    want.extend(x_bar);
    let f = Forward::new(d.clone());
    let total = f.reduce(op, &f.dual(tensor(&x)?, tensor(&dot)?)?)?;
    got.extend(d.to_vec(&f.tangent(&total)?)?);
    want.push(y_dot[n - 1]);
    Ok(Comparison { check: CheckKind::Primitives, got, want, convention: None })
}

/// Every form of a scan the probes differentiate: inclusive and exclusive, forwards and
/// reversed, each plain and segmented by `keys`.
fn scan_forms(keys: &[i64]) -> Vec<(ScanSpec, Option<&[i64]>)> {
    let specs = [false, true]
        .into_iter()
        .flat_map(|exclusive| [false, true].into_iter().map(move |reverse| ScanSpec { exclusive, reverse }));
    specs.flat_map(|spec| [(spec, None), (spec, Some(keys))]).collect()
}

/// Length of the `primitives` check's vector: the oracle refolds each prefix (O(n^3) for a VJP).
const SCAN_N: usize = 40;
/// Segment keys of the segmented scans: runs of 1, 9, 2, 13 and 15 elements (a run of one
/// included: its scan is the element itself, or the neutral element when exclusive).
const SCAN_RUNS: [usize; 5] = [1, 9, 2, 13, 15];

/// The `primitives` check on `d`: the operator's scans (inclusive and exclusive, forwards and
/// reversed, each plain and segmented), its reduction, its histogram with a constant dest and
/// with constant values, the operator elementwise, differentiated by the reverse engine
/// (for a random adjoint) and the forward engine (for a random tangent) on the device under
/// test, all laid out in one vector against the oracle's. No workload differentiates these on
/// the CPU otherwise, so a scan VJP run in the wrong direction or a reduction rule taken for
/// the wrong operator would pass every other check. Values are random in +-[0.5, 1.5] (no ties:
/// the scans' tie policy is the conformance suite's), with two zeros for `*`.
fn primitives_probe<D: Ops>(d: &D, op: HistOp, dt: DType, seed: u64) -> Result<Comparison> {
    use rand::RngExt;
    let mut rng = adgauge_datasets::rng(seed ^ 0x5ca7);
    let mut random = |len: usize| -> Vec<f64> {
        (0..len).map(|_| dt.round(rng.random_range(0.5..1.5) * if rng.random_bool(0.5) { 1.0 } else { -1.0 })).collect()
    };
    let mut x = random(SCAN_N);
    if op == HistOp::Mul {
        (x[7], x[23]) = (0.0, 0.0);
    }
    let (bar, dot) = (random(SCAN_N), random(SCAN_N));
    let keys: Vec<i64> =
        SCAN_RUNS.iter().enumerate().flat_map(|(s, &len)| std::iter::repeat_n(s as i64, len)).collect();
    let key_index = d.index(&keys)?;
    let tensor = |v: &[f64]| d.tensor(v, &[v.len()], dt);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for (spec, segments) in scan_forms(&keys) {
        let seg = segments.map(|_| &key_index);
        let r = Reverse::new(d.clone());
        let xv = r.var(tensor(&x)?);
        let y = r.scan(op, &xv, spec, seg)?;
        let grads = r.backward(&y, tensor(&bar)?)?;
        got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
        want.extend(oracle::scan_vjp(op, &x, spec, segments, &bar));
        let f = Forward::new(d.clone());
        let y = f.scan(op, &f.dual(tensor(&x)?, tensor(&dot)?)?, spec, seg)?;
        got.extend(d.to_vec(&f.tangent(&y)?)?);
        want.extend(oracle::scan_jvp(op, &x, spec, segments, &dot));
    }
    // The reduction is the inclusive scan's last element: its adjoint is that scan's VJP for
    // a one-hot adjoint, its tangent the scan's JVP there.
    let mut last = vec![0.0; SCAN_N];
    last[SCAN_N - 1] = bar[0];
    let r = Reverse::new(d.clone());
    let xv = r.var(tensor(&x)?);
    let y = r.reduce(op, &xv)?;
    let grads = r.backward(&y, d.tensor(&bar[..1], y.value().shape(), dt)?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
    want.extend(oracle::scan_vjp(op, &x, ScanSpec::INCLUSIVE, None, &last));
    let f = Forward::new(d.clone());
    let y = f.reduce(op, &f.dual(tensor(&x)?, tensor(&dot)?)?)?;
    got.extend(d.to_vec(&f.tangent(&y)?)?);
    want.push(oracle::scan_jvp(op, &x, ScanSpec::INCLUSIVE, None, &dot)[SCAN_N - 1]);
    // The histogram with a constant dest (one-sided: only vals carries a tangent or adjoint),
    // the case every other check misses by differentiating both inputs: dest = x[..5], the
    // values x[5..] into five bins, one index out of range.
    let (dest, vals) = x.split_at(5);
    let inds = inds_of_len(vals.len());
    let ix = d.index(&inds)?;
    let f = Forward::new(d.clone());
    let h = f.reduce_by_index(&f.tensor(dest, &[5], dt)?, op, &ix, &f.dual(tensor(vals)?, tensor(&dot[5..])?)?)?;
    got.extend(d.to_vec(&f.tangent(&h)?)?);
    want.extend(oracle::hist_jvp(op, dest, &inds, vals, &[0.0; 5], &dot[5..]).1);
    let r = Reverse::new(d.clone());
    let vv = r.var(tensor(vals)?);
    let h = r.reduce_by_index(&r.tensor(dest, &[5], dt)?, op, &ix, &vv)?;
    let grads = r.backward(&h, tensor(&bar[..5])?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &vv)?)?);
    want.extend(oracle::hist_vjp(op, dest, &inds, vals, &bar[..5]).2);
    // And with constant values (only dest moves): a rule that takes dest's tangent for the
    // histogram's, right for `+` only, passes everything else.
    let f = Forward::new(d.clone());
    let h =
        f.reduce_by_index(&f.dual(tensor(dest)?, tensor(&dot[..5])?)?, op, &ix, &f.tensor(vals, &[vals.len()], dt)?)?;
    got.extend(d.to_vec(&f.tangent(&h)?)?);
    want.extend(oracle::hist_jvp(op, dest, &inds, vals, &dot[..5], &vec![0.0; vals.len()]).1);
    let r = Reverse::new(d.clone());
    let dv = r.var(tensor(dest)?);
    let h = r.reduce_by_index(&dv, op, &ix, &r.tensor(vals, &[vals.len()], dt)?)?;
    let grads = r.backward(&h, tensor(&bar[..5])?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &dv)?)?);
    want.extend(oracle::hist_vjp(op, dest, &inds, vals, &bar[..5]).1);
    // The operator elementwise (`combine`, as the general rules and the scans use it) and, for
    // min/max, the elementwise binary operator too (the histogram rules route through their own
    // kernels, so nothing else differentiates it): tangents and adjoints against the
    // operator's partials (the left operand wins ties, as in both).
    let half = SCAN_N / 2;
    let (a, c) = x.split_at(half);
    let (da, dc) = dot.split_at(half);
    let part = |side: Operand, i: usize| op.partial(side, a[i], c[i]);
    let binary = match op {
        HistOp::Min => Some(BinaryOp::Min),
        HistOp::Max => Some(BinaryOp::Max),
        _ => None,
    };
    for binary in std::iter::once(None).chain(binary.map(Some)) {
        let f = Forward::new(d.clone());
        let y = elementwise(&f, op, binary, &f.dual(tensor(a)?, tensor(da)?)?, &f.dual(tensor(c)?, tensor(dc)?)?)?;
        got.extend(d.to_vec(&f.tangent(&y)?)?);
        want.extend((0..half).map(|i| part(Operand::Left, i) * da[i] + part(Operand::Right, i) * dc[i]));
        let r = Reverse::new(d.clone());
        let (av, cv) = (r.var(tensor(a)?), r.var(tensor(c)?));
        let grads = r.backward(&elementwise(&r, op, binary, &av, &cv)?, tensor(&bar[..half])?)?;
        got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
        got.extend(d.to_vec(&grads.get_or_zeros(d, &cv)?)?);
        want.extend((0..half).map(|i| part(Operand::Left, i) * bar[i]));
        want.extend((0..half).map(|i| part(Operand::Right, i) * bar[i]));
    }
    // A one-element operand's tangent broadcast to the result (a + c with only c moving).
    let f = Forward::new(d.clone());
    let y = f.add(&f.tensor(a, &[half], dt)?, &f.dual(tensor(&c[..1])?, tensor(&dc[..1])?)?)?;
    got.extend(d.to_vec(&f.tangent(&y)?)?);
    want.extend(std::iter::repeat_n(dc[0], half));
    if op == HistOp::Mul {
        let (g, w) = prod_kernel_parts(d, dt, &x, &inds_of_len(SCAN_N), &bar, &dot)?;
        got.extend(g);
        want.extend(w);
    }
    // The sorts: a few keys with one out of range (a counting pass), and keys spread over more
    // than `COUNTING_MAX` (the radix passes).
    let wide = adgauge_backends::sizes::COUNTING_MAX + 1;
    let spread: Vec<i64> = (0..SCAN_N).map(|i| if i == 11 { -3 } else { (i * 104_729 % wide) as i64 }).collect();
    for (keys, num_keys) in [(inds_of_len(SCAN_N), 5), (spread, wide)] {
        let (g, w) = sort_parts(d, &keys, num_keys)?;
        got.extend(g);
        want.extend(w);
    }
    Ok(Comparison { check: CheckKind::Primitives, got, want, convention: None })
}

/// Five bins for `len` values, one index out of range (the histogram parts of `primitives`).
fn inds_of_len(len: usize) -> Vec<i64> {
    (0..len).map(|i| if i == 3 { 5 } else { (i * 7 % 5) as i64 }).collect()
}

/// The device's stable sort by key against the host's: `sort_by_key`'s permutation,
/// `sort_by_key_ranked`'s permutation and ranks (its inverse), and `gather_index` of the keys by
/// that permutation with two indices out of range (-1 each). Keys outside `[0, num_keys)` sort
/// last in index order. On the CPU only the histogram rules' own kernels sort otherwise, so
/// nothing else in `check` reaches the counting and radix passes.
fn sort_parts<D: Ops>(d: &D, keys: &[i64], num_keys: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = keys.len();
    let bucket = |i: usize| if keys[i] >= 0 && (keys[i] as usize) < num_keys { keys[i] as usize } else { num_keys };
    let mut perm: Vec<usize> = (0..n).collect();
    perm.sort_by_key(|&i| bucket(i));
    let mut ranks = vec![0; n];
    for (r, &p) in perm.iter().enumerate() {
        ranks[p] = r;
    }
    let as_f64 = |v: &[usize]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let widen = |v: Vec<i64>| v.into_iter().map(|x| x as f64).collect::<Vec<f64>>();
    let key_index = d.index(keys)?;
    let mut got = widen(d.index_to_vec(&d.sort_by_key(&key_index, num_keys)?)?);
    let mut want = as_f64(&perm);
    let (p, r) = d.sort_by_key_ranked(&key_index, num_keys)?;
    got.extend(widen(d.index_to_vec(&p)?));
    got.extend(widen(d.index_to_vec(&r)?));
    want.extend(as_f64(&perm));
    want.extend(as_f64(&ranks));
    let idx: Vec<i64> = perm.iter().map(|&p| p as i64).chain([n as i64, -1]).collect();
    got.extend(widen(d.index_to_vec(&d.gather_index(&key_index, &d.index(&idx)?)?)?));
    want.extend(perm.iter().map(|&p| keys[p] as f64).chain([-1.0, -1.0]));
    Ok((got, want))
}

/// `*`'s rule kernel `prod_vals_adjoint` (`out_i = v_i == 0 ? c1[bin_i] : (v_i infinite ?
/// c2[bin_i] sign(v_i) : c0[bin_i] / v_i)`, 0 out of range) differentiated one argument at a
/// time in both engines, against its partials, on `vals` with a +inf and a -inf put in.
/// `*`'s pullback always moves c0, c1 and c2 together, so only this sees a forward rule that
/// drops the tangent of one coefficient row when another has none (a one-sided nesting through
/// `*`'s pullback).
fn prod_kernel_parts<D: Ops>(
    d: &D,
    dt: DType,
    vals: &[f64],
    inds: &[i64],
    bar: &[f64],
    dot: &[f64],
) -> Result<(Vec<f64>, Vec<f64>)> {
    let k = 5;
    let (c0, c1, c2) = (&bar[..k], &dot[k..2 * k], &bar[k..2 * k]);
    let mut vals = vals.to_vec();
    for (i, x) in [(1, f64::INFINITY), (6, f64::NEG_INFINITY)] {
        if let Some(v) = vals.get_mut(i) {
            *v = x;
        }
    }
    let vals = &vals[..];
    let ix = d.index(inds)?;
    let tensor = |v: &[f64]| d.tensor(v, &[v.len()], dt);
    let bin = |i: usize| usize::try_from(inds[i]).ok().filter(|&b| b < k);
    // Which branch of the kernel element i takes: 0 finite non-zero, 1 zero, 2 infinite.
    let branch = |i: usize| {
        if vals[i] == 0.0 {
            1
        } else if vals[i].is_infinite() {
            2
        } else {
            0
        }
    };
    let (mut got, mut want) = (Vec::new(), Vec::new());
    // Forward: a tangent on one argument only (vals, c0, c1, c2).
    for moving in 0..4 {
        let f = Forward::new(d.clone());
        let arg = |j: usize, x: &[f64], len: usize| -> Result<Dual<D>> {
            if j == moving { f.dual(tensor(x)?, tensor(&dot[..len])?) } else { f.tensor(x, &[len], dt) }
        };
        let y =
            f.prod_vals_adjoint(&ix, &arg(0, vals, vals.len())?, &arg(1, c0, k)?, &arg(2, c1, k)?, &arg(3, c2, k)?)?;
        got.extend(d.to_vec(&f.tangent(&y)?)?);
        want.extend((0..vals.len()).map(|i| match (bin(i), branch(i), moving) {
            (None, _, _) => 0.0,
            (Some(b), 0, 0) => -c0[b] / (vals[i] * vals[i]) * dot[i],
            (Some(b), 0, 1) => dot[b] / vals[i],
            (Some(b), 1, 2) => dot[b],
            (Some(b), 2, 3) => dot[b] * vals[i].signum(),
            _ => 0.0,
        }));
    }
    // Reverse: every argument's adjoint for a random output adjoint.
    let r = Reverse::new(d.clone());
    let (vv, c0v, c1v, c2v) = (r.var(tensor(vals)?), r.var(tensor(c0)?), r.var(tensor(c1)?), r.var(tensor(c2)?));
    let y = r.prod_vals_adjoint(&ix, &vv, &c0v, &c1v, &c2v)?;
    let g = &dot[..vals.len()];
    let grads = r.backward(&y, tensor(g)?)?;
    for v in [&vv, &c0v, &c1v, &c2v] {
        got.extend(d.to_vec(&grads.get_or_zeros(d, v)?)?);
    }
    let mut c_bar = [vec![0.0; k], vec![0.0; k], vec![0.0; k]];
    for i in 0..vals.len() {
        if let Some(b) = bin(i) {
            c_bar[branch(i)][b] += match branch(i) {
                0 => g[i] / vals[i],
                1 => g[i],
                _ => g[i] * vals[i].signum(),
            };
        }
    }
    want.extend((0..vals.len()).map(|i| match bin(i) {
        Some(b) if branch(i) == 0 => -g[i] * c0[b] / (vals[i] * vals[i]),
        _ => 0.0,
    }));
    want.extend(c_bar.into_iter().flatten());
    Ok((got, want))
}

/// `a op c` elementwise on any engine: the histogram operator (`combine`), or `binary` where
/// given (min/max as a [`BinaryOp`]).
fn elementwise<O: Ops>(o: &O, op: HistOp, binary: Option<BinaryOp>, a: &O::T, c: &O::T) -> Result<O::T> {
    match binary {
        Some(b) => o.binary(b, a, c),
        None => o.combine(op, a, c),
    }
}

/// Sizes of the `second-order` check's histogram.
const SECOND_N: usize = 40;
const SECOND_K: usize = 6;

/// A scalar function of flat inputs that the `second-order` check differentiates twice, written
/// once for every engine (the nested ones included).
trait NestedScalar {
    fn eval<O: Ops>(&self, o: &O, inputs: &[O::T], dt: DType) -> Result<O::T>;
}

/// s = sum_b w_b hist_b (hist_b + 1) over inputs [vals, dest]. The square makes the Hessian
/// non-zero for every operator (J^T diag(2w) J); the rule's own second-order terms enter through
/// the adjoint w (2 hist + 1), which is non-zero in `*`'s bins that hold a zero.
struct HistSquare<'a> {
    op: HistOp,
    inds: &'a [i64],
    w: &'a [f64],
}

impl NestedScalar for HistSquare<'_> {
    fn eval<O: Ops>(&self, o: &O, x: &[O::T], dt: DType) -> Result<O::T> {
        let h = o.reduce_by_index(&x[1], self.op, &o.index(self.inds)?, &x[0])?;
        o.sum(&o.mul(&o.tensor(self.w, &[self.w.len()], dt)?, &square_plus_linear(o, &h, dt)?)?)
    }
}

/// s = sum_j w_j y_j (y_j + 1) with y the operator's inclusive scan of the one input: the scan's
/// partials (`combine_partial`) differentiated again.
struct ScanSquare<'a> {
    op: HistOp,
    w: &'a [f64],
}

impl NestedScalar for ScanSquare<'_> {
    fn eval<O: Ops>(&self, o: &O, x: &[O::T], dt: DType) -> Result<O::T> {
        let y = o.scan(self.op, &x[0], ScanSpec::INCLUSIVE, None)?;
        o.sum(&o.mul(&o.tensor(self.w, &[self.w.len()], dt)?, &square_plus_linear(o, &y, dt)?)?)
    }
}

/// y (y + 1): the square makes the second derivative flow through the rule's adjoints, and the
/// linear term keeps the adjoint reaching the rule non-zero where y is 0 (`*`'s bins with a zero
/// factor), so that the tangents of adjoints which are 0 there are seen too.
fn square_plus_linear<O: Ops>(o: &O, y: &O::T, dt: DType) -> Result<O::T> {
    o.mul(y, &o.add(y, &o.full(y.shape(), 1.0, dt)?)?)
}

/// The Hessian-vector product of `f` at `x` along `v` (both flat, laid out input by input) by
/// forward over reverse (`Reverse<Forward<D>>`: the reverse rules differentiated forwards) and
/// by reverse over forward (`Forward<Reverse<D>>`: the forward rules differentiated backwards),
/// with `rule`, each next to central differences of the CPU's f64 gradient along v (the
/// first-order reverse mode, which the other checks validate). Returns (got, want) for the
/// nestings the rule supports; `NotDifferentiable` when it supports neither (its fused kernels
/// have no derivative rules).
fn nested_hvps<D: Ops, F: NestedScalar>(
    d: &D,
    cpu: &Cpu,
    rule: HistRule,
    dt: DType,
    f: &F,
    x: &[Vec<f64>],
    v: &[Vec<f64>],
) -> Result<(Vec<f64>, Vec<f64>)> {
    let forward_over_reverse = || -> Result<Vec<f64>> {
        let fw = Forward::new(d.clone());
        let r = Reverse::new(fw.clone()).with_hist_rule(rule);
        let vars = x
            .iter()
            .zip(v)
            .map(|(x, v)| Ok(r.var(fw.dual(d.tensor(x, &[x.len()], dt)?, d.tensor(v, &[v.len()], dt)?)?)))
            .collect::<Result<Vec<_>>>()?;
        let s = f.eval(&r, &vars, dt)?;
        let g = r.backward(&s, fw.full(s.value().shape(), 1.0, dt)?)?;
        let mut out = Vec::new();
        for var in &vars {
            out.extend(d.to_vec(&fw.tangent(&g.get_or_zeros(&fw, var)?)?)?);
        }
        Ok(out)
    };
    let reverse_over_forward = || -> Result<Vec<f64>> {
        let r = Reverse::new(d.clone()).with_hist_rule(rule);
        let fw = Forward::new(r.clone());
        let vars = x.iter().map(|x| Ok(r.var(d.tensor(x, &[x.len()], dt)?))).collect::<Result<Vec<_>>>()?;
        let duals = vars
            .iter()
            .zip(v)
            .map(|(var, v)| fw.dual(var.clone(), r.tensor(v, &[v.len()], dt)?))
            .collect::<Result<Vec<_>>>()?;
        let directional = fw.tangent(&f.eval(&fw, &duals, dt)?)?;
        let g = r.backward(&directional, d.full(directional.value().shape(), 1.0, dt)?)?;
        let mut out = Vec::new();
        for var in &vars {
            out.extend(d.to_vec(&g.get_or_zeros(d, var)?)?);
        }
        Ok(out)
    };
    // Reverse over reverse: the gradient on an inner tape whose values live on an outer one,
    // then the outer gradient of <gradient, v>; the reverse rules' own reverse rules (`*`'s
    // `prod_nonzero_by_index_vjp`) are taken only here.
    let reverse_over_reverse = || -> Result<Vec<f64>> {
        let outer = Reverse::new(d.clone()).with_hist_rule(rule);
        let inner = Reverse::new(outer.clone()).with_hist_rule(rule);
        let outer_vars = x.iter().map(|x| Ok(outer.var(d.tensor(x, &[x.len()], dt)?))).collect::<Result<Vec<_>>>()?;
        let vars: Vec<_> = outer_vars.iter().map(|o| inner.var(o.clone())).collect();
        let s = f.eval(&inner, &vars, dt)?;
        let g = inner.backward(&s, outer.full(s.value().shape(), 1.0, dt)?)?;
        let mut dot: Option<adgauge_backends::Var<D>> = None;
        for (var, v) in vars.iter().zip(v) {
            let term = outer.sum(&outer.mul(&g.get_or_zeros(&outer, var)?, &outer.tensor(v, &[v.len()], dt)?)?)?;
            dot = Some(match dot {
                None => term,
                Some(acc) => outer.add(&acc, &term)?,
            });
        }
        let Some(dot) = dot else { return Ok(Vec::new()) };
        let h = outer.backward(&dot, d.full(&[1], 1.0, dt)?)?;
        let mut out = Vec::new();
        for var in &outer_vars {
            out.extend(d.to_vec(&h.get_or_zeros(d, var)?)?);
        }
        Ok(out)
    };
    let gradient = |shift: f64| -> Result<Vec<f64>> {
        let r = Reverse::new(cpu.clone());
        let vars = x
            .iter()
            .zip(v)
            .map(|(x, v)| {
                let moved: Vec<f64> = x.iter().zip(v).map(|(a, b)| a + shift * b).collect();
                Ok(r.var(cpu.tensor(&moved, &[moved.len()], DType::F64)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let s = f.eval(&r, &vars, DType::F64)?;
        let g = r.backward(&s, cpu.full(s.value().shape(), 1.0, DType::F64)?)?;
        let mut out = Vec::new();
        for var in &vars {
            out.extend(cpu.to_vec(&g.get_or_zeros(cpu, var)?)?);
        }
        Ok(out)
    };
    // The nestings first: the reference is only worth computing for one that runs.
    let nested = supported([forward_over_reverse(), reverse_over_forward(), reverse_over_reverse()])?;
    let h = 1e-5;
    let (plus, minus) = (gradient(h)?, gradient(-h)?);
    let hv: Vec<f64> = plus.iter().zip(&minus).map(|(p, m)| (p - m) / (2.0 * h)).collect();
    let want = nested.iter().flat_map(|_| hv.iter().copied()).collect();
    Ok((nested.concat(), want))
}

/// The parts that ran, in order; `NotDifferentiable` (a rule that cannot nest) drops a part, and
/// is the error only when every part was dropped. Any other error is returned as it is.
fn supported<P>(parts: impl IntoIterator<Item = Result<P>>) -> Result<Vec<P>> {
    let (mut ran, mut refused) = (Vec::new(), None);
    for part in parts {
        match part {
            Ok(p) => ran.push(p),
            Err(e @ adgauge_backends::OpError::NotDifferentiable(_)) => refused = Some(e),
            Err(e) => return Err(e),
        }
    }
    match refused {
        Some(e) if ran.is_empty() => Err(e),
        _ => Ok(ran),
    }
}

/// The `second-order` check on `d`: Hessian-vector products through the case's histogram (with
/// its rule) and through the operator's scan, by both nestings, against differences of
/// gradients (see [`nested_hvps`]). Nothing else nests AD through these, so the second-order
/// rules (`combine_partial_*`, the rules of the rules' own primitives) are seen only here.
/// Values in +-[0.5, 1.5] (no ties, zeros or neutral elements, where the functions are smooth),
/// then the same with the operator's special points among them ([`singular_point`]).
/// `NotDifferentiable` where neither the histogram nor the scan can be nested.
fn second_order_probe<D: Ops>(
    d: &D,
    cpu: &Cpu,
    op: HistOp,
    rule: HistRule,
    dt: DType,
    seed: u64,
) -> Result<Comparison> {
    use rand::RngExt;
    let mut rng = adgauge_datasets::rng(seed ^ 0x05ec_000d);
    let mut random = |len: usize| -> Vec<f64> {
        (0..len).map(|_| dt.round(rng.random_range(0.5..1.5) * if rng.random_bool(0.5) { 1.0 } else { -1.0 })).collect()
    };
    let (dest, vals, w) = (random(SECOND_K), random(SECOND_N), random(SECOND_K));
    let (dest_dir, vals_dir) = (random(SECOND_K), random(SECOND_N));
    let (scan_w, scan_x, scan_dir) = (random(SECOND_K), random(SECOND_K), random(SECOND_K));
    // Two of the forty fall outside [0, k): ignored by the histogram, zero in every derivative.
    let inds: Vec<i64> =
        (0..SECOND_N).map(|i| if i % 19 == 18 { SECOND_K as i64 } else { (i * 5 % SECOND_K) as i64 }).collect();
    let hist = HistSquare { op, inds: &inds, w: &w };
    let scan = ScanSquare { op, w: &scan_w };
    let mut runs = vec![
        nested_hvps(d, cpu, rule, dt, &hist, &[vals.clone(), dest.clone()], &[vals_dir.clone(), dest_dir.clone()]),
        nested_hvps(d, cpu, rule, dt, &scan, std::slice::from_ref(&scan_x), std::slice::from_ref(&scan_dir)),
    ];
    // Again through the operator's special points, where its rules take other branches and the
    // function is still smooth: `*`'s zeros (one in bin 0, two in bin 1, a zero dest in bin 2:
    // a product is multilinear), logaddexp's -inf (its neutral element: flat, a zero gradient
    // at every order) and hypot's zeros beside non-zero inputs.
    if let Some(point) = singular_point(op) {
        let (mut vals, mut dest, mut scan_x) = (vals, dest, scan_x);
        // Positions 0, 5 and 11: bins 0, 1 and 1 (inds = 5 i mod 6).
        for i in [0, 5, 11] {
            vals[i] = point;
        }
        dest[2] = point;
        scan_x[1] = point;
        scan_x[3] = point;
        runs.push(nested_hvps(d, cpu, rule, dt, &hist, &[vals, dest], &[vals_dir, dest_dir]));
        runs.push(nested_hvps(d, cpu, rule, dt, &scan, &[scan_x], &[scan_dir]));
    }
    let parts = supported(runs)?;
    let (got, want): (Vec<Vec<f64>>, Vec<Vec<f64>>) = parts.into_iter().unzip();
    Ok(Comparison { check: CheckKind::SecondOrder, got: got.concat(), want: want.concat(), convention: None })
}

/// The input at which `op`'s rules take their special branches while a Hessian-vector product
/// through it stays smooth (see [`second_order_probe`]); None for operators without one.
fn singular_point(op: HistOp) -> Option<f64> {
    let g = adgauge_backends::general::as_general(op);
    if std::ptr::eq(g, &adgauge_backends::general::MUL) || std::ptr::eq(g, &adgauge_backends::general::HYPOT) {
        Some(0.0)
    } else if std::ptr::eq(g, &adgauge_backends::general::LOGADDEXP) {
        Some(f64::NEG_INFINITY)
    } else {
        None
    }
}

/// The `perturbation` check on `d`: [d/dx (x * d/dy (x + y)) by forward over forward at x = 2,
/// y = 3, whether a dual of another forward engine is refused, whether a variable of another
/// tape is refused] against [1, 1, 1]. A confused nesting gives 2 in the first; an engine that
/// mixes a foreign tangent or tape in gives 0 in the others.
fn perturbation_probe<D: Ops>(d: &D, dt: DType) -> Result<Comparison> {
    let c = |x: f64| d.full(&[1], x, dt);
    let f = Forward::new(d.clone());
    let f2 = Forward::new(f.clone());
    let x = f2.dual(f.lift(c(2.0)?), f.lift(c(1.0)?))?;
    let y = f.dual(c(3.0)?, c(1.0)?)?;
    // The inner level: d/dy (x + y), x a constant of that level.
    let inner = f.add(x.value(), &y)?;
    let d_dy = f2.lift(f.lift(f.tangent(&inner)?));
    let z = f2.mul(&x, &d_dy)?;
    let nested = d.to_vec(f.primal(&f2.tangent(&z)?))?[0];
    let other = Forward::new(d.clone());
    let foreign = f.dual(c(1.0)?, c(1.0)?)?;
    let forward_refused = matches!(other.neg(&foreign), Err(adgauge_backends::OpError::Foreign(_)));
    let (r1, r2) = (Reverse::new(d.clone()), Reverse::new(d.clone()));
    let v = r1.var(c(1.0)?);
    let reverse_refused = matches!(r2.neg(&v), Err(adgauge_backends::OpError::Foreign(_)));
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    Ok(Comparison {
        check: CheckKind::Perturbation,
        got: vec![nested, flag(forward_refused), flag(reverse_refused)],
        want: vec![1.0, 1.0, 1.0],
        convention: None,
    })
}

/// The oracle's J^T w laid out [vals_bar, dest_bar], in O(n) for general operators too: the
/// oracle refolds each element's l and r from scratch (O(m^2) per bin of m elements: minutes
/// at the stress size in a debug build), here l is the running left fold (the same operations in
/// the same order) and r the fold of the later elements from the bin's end (equal by
/// associativity, to rounding). The formula is the oracle's: d2(l, a) d1(l op a, r) hist_bar.
fn stress_oracle_vjp(op: HistOp, d: &HistData, bar: &[f64]) -> Vec<f64> {
    let (n, k) = (d.vals.len(), d.k);
    let HistOp::General(_) = op else {
        let (_, db, vb) = oracle::hist_vjp(op, &d.dest, &d.inds, &d.vals, bar);
        return vb.into_iter().chain(db).collect();
    };
    let mut members = vec![Vec::new(); k];
    for (i, &b) in d.inds.iter().enumerate() {
        if b >= 0 && (b as u64) < k as u64 {
            members[b as usize].push(i);
        }
    }
    let mut out = vec![0.0; n + k];
    for (b, ms) in members.iter().enumerate() {
        let g = bar[b];
        if g == 0.0 {
            continue;
        }
        let m = ms.len();
        // logaddexp's and hypot's partials at the inputs relative to the bin's largest, as the
        // oracle's.
        let inputs: Vec<f64> = std::iter::once(d.dest[b]).chain(ms.iter().map(|&i| d.vals[i])).collect();
        let inputs = oracle::relative_inputs(op, &inputs);
        let (dest_b, vals_b) = (inputs[0], &inputs[1..]);
        // suffix[j] = a_j op ... op a_{m-1}, suffix[m] = the neutral element.
        let mut suffix = vec![op.neutral(); m + 1];
        for j in (0..m).rev() {
            suffix[j] = op.combine(vals_b[j], suffix[j + 1]);
        }
        out[n + b] = op.partial(Operand::Left, dest_b, suffix[0]) * g;
        let mut l = dest_b;
        for (j, &i) in ms.iter().enumerate() {
            let a = vals_b[j];
            let la = op.combine(l, a);
            out[i] = op.partial(Operand::Right, l, a) * op.partial(Operand::Left, la, suffix[j + 1]) * g;
            l = la;
        }
    }
    out
}

/// The adjoint of an even split of each bin's adjoint between its tied winners (JAX's and
/// PyTorch's convention), laid out [vals_bar, dest_bar].
fn split_ties(op: HistOp, d: &HistData, bar: &[f64]) -> Vec<f64> {
    let winners = tied_winners(op, d);
    let mut out = vec![0.0; d.vals.len() + d.k];
    for (b, w) in winners.iter().enumerate() {
        for &i in w {
            out[i] = bar[b] / w.len() as f64;
        }
    }
    out
}

/// Per bin, the positions in [vals, dest] layout of the entries equal to the bin's extremum.
fn tied_winners(op: HistOp, d: &HistData) -> Vec<Vec<usize>> {
    let n = d.vals.len();
    let best = oracle::hist_vjp(op, &d.dest, &d.inds, &d.vals, &vec![0.0; d.k]).0;
    (0..d.k)
        .map(|b| {
            let mut w: Vec<usize> = (0..n).filter(|&i| d.inds[i] == b as i64 && d.vals[i] == best[b]).collect();
            if d.dest[b] == best[b] {
                w.push(n + b);
            }
            w
        })
        .collect()
}

/// Judges min/max adjoints `got` at ties: the oracle of the declared tie policy (adgauge's one
/// winner unless the tool declares `split`) is the reference; adjoints that differ from it but
/// hand each bin's adjoint out among its tied winners only, as a convex combination, are a
/// valid subgradient and pass as a convention; anything else is compared, and fails.
fn judge_ties(
    op: HistOp,
    d: &HistData,
    bar: &[f64],
    got: Vec<f64>,
    conventions: &std::collections::BTreeMap<String, String>,
) -> Comparison {
    let one_winner = {
        let (_, db, vb) = oracle::hist_vjp(op, &d.dest, &d.inds, &d.vals, bar);
        vb.into_iter().chain(db).collect::<Vec<f64>>()
    };
    let split = split_ties(op, d, bar);
    let declared = conventions.get("tie-policy").map(String::as_str).unwrap_or("one-winner");
    let want = if declared == "split" { split.clone() } else { one_winner.clone() };
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6 * y.abs().max(1.0));
    let named = if close(&got, &one_winner) {
        "one-winner"
    } else if close(&got, &split) {
        "split"
    } else {
        "a subgradient"
    };
    let valid = got.len() == want.len()
        && tied_winners(op, d).iter().enumerate().all(|(b, w)| {
            let sum: f64 = w.iter().map(|&i| got[i]).sum();
            let convex = w.iter().all(|&i| got[i] * bar[b] >= 0.0 && got[i].abs() <= bar[b].abs() * (1.0 + 1e-6));
            convex && (sum - bar[b]).abs() <= 1e-6 * bar[b].abs().max(1.0)
        })
        && (0..got.len()).all(|i| tied_winners(op, d).iter().any(|w| w.contains(&i)) || got[i].abs() <= 1e-12);
    match (close(&got, &want), valid) {
        (true, _) if named == "one-winner" => Comparison { check: CheckKind::Ties, got, want, convention: None },
        (true, _) | (false, true) => Comparison {
            check: CheckKind::Ties,
            want: got.clone(),
            got,
            convention: Some(format!("tie-policy {named} (adgauge's is one-winner; declared {declared})")),
        },
        (false, false) => Comparison { check: CheckKind::Ties, got, want, convention: None },
    }
}

/// The `hist` module's input for a case (GradBench has no histogram eval; `docs/protocol.md`
/// documents this one): the eval JSON of `adgauge eval hist-<op>` with the operator named.
fn module_input(op: HistOp, d: &HistData, extra: &[(&str, &[f64])]) -> Json {
    let mut input = serde_json::json!({"op": op.name(), "k": d.k, "inds": d.inds, "vals": numbers(&d.vals), "dest": numbers(&d.dest)});
    for (key, xs) in extra {
        input[*key] = numbers(xs);
    }
    input
}

/// Numbers as JSON, non-finite ones as the strings `eval` uses.
fn numbers(xs: &[f64]) -> Json {
    Json::Array(xs.iter().map(|&x| number_json(x)).collect())
}

/// A histogram case as a flat function whose derivatives come from a tool in another process.
struct RemoteHistFlat {
    remote: Arc<dyn Remote>,
    /// The same case on the CPU in f64: the primal of finite differences, the sizes, the point.
    local: HistFlat<Cpu>,
}

impl RemoteHistFlat {
    fn new(remote: Arc<dyn Remote>, cpu: Cpu, op: HistOp, data: &HistData) -> RemoteHistFlat {
        let local = HistFlat::new(cpu.clone(), cpu, HistWorkload { op }, HistRule::Auto, DType::F64, data);
        RemoteHistFlat { remote, local }
    }

    /// The tool's primal (its `primal` function's `hist`).
    fn primal(&self) -> Result<Vec<f64>> {
        Ok(self.call("primal", &[], &[("hist", self.local.data.k)])?.concat())
    }

    fn call(&self, function: &str, extra: &[(&str, &[f64])], fields: &[(&str, usize)]) -> Result<Vec<Vec<f64>>> {
        let input = module_input(self.local.workload.op, &self.local.data, extra);
        let out = self.remote.call(function, input).map_err(remote_error)?;
        fields.iter().map(|&(name, len)| output_numbers(&out, name, len)).collect()
    }
}

/// A remote failure seen by validation: a device-level error (the tool, not the input, failed).
fn remote_error(e: WorkloadError) -> adgauge_backends::OpError {
    match e {
        WorkloadError::Op(op) => op,
        WorkloadError::BadInput(m) => adgauge_backends::OpError::Device(m),
    }
}

/// Field `name` of a tool's output: `len` numbers (or the strings "inf", "-inf", "nan").
fn output_numbers(out: &Json, name: &str, len: usize) -> Result<Vec<f64>> {
    let bad = |m: String| adgauge_backends::OpError::Device(format!("output field {name}: {m}"));
    let Some(Json::Array(xs)) = out.get(name) else {
        return Err(bad(format!("missing or not an array in {}", crate::json::kind(out))));
    };
    if xs.len() != len {
        return Err(bad(format!("has {} elements, expected {len}", xs.len())));
    }
    xs.iter().map(|v| parse_number(v).map_err(&bad)).collect()
}

impl FlatFn for RemoteHistFlat {
    fn n_in(&self) -> usize {
        self.local.n_in()
    }
    fn n_out(&self) -> usize {
        self.local.n_out()
    }
    fn x0(&self) -> &[f64] {
        self.local.x0()
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        self.local.eval_f64(x)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let (n, k) = (self.local.data.vals.len(), self.local.data.k);
        let parts = self.call("vjp", &[("hist_bar", w)], &[("vals_bar", n), ("dest_bar", k)])?;
        Ok(parts.concat())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let (vals_dot, dest_dot) = v.split_at(self.local.data.vals.len());
        let parts =
            self.call("jvp", &[("vals_dot", vals_dot), ("dest_dot", dest_dot)], &[("hist_dot", self.local.data.k)])?;
        Ok(parts.concat())
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        self.local.fd_unsafe(h)
    }
    fn input_parts(&self) -> Vec<(&'static str, usize)> {
        vec![("vals", self.local.data.vals.len()), ("dest", self.local.data.k)]
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::{Cpu, oracle};
    use adgauge_datasets::hist::generate;

    use super::*;

    /// A served call (parsed and uploaded once, run twice) gives what one whole evaluation
    /// gives, and both are the hand-computed histogram and adjoints.
    #[test]
    fn a_prepared_gradbench_call_equals_the_whole_evaluation_and_the_hand_values() {
        let device = AnyDevice::Cpu(Cpu::new(Some(1)).unwrap());
        // max over bins 0..3: bin 0 folds dest 2 with 2, 2, 1 (tie: dest wins), bin 1 dest 1
        // with 0.5, bin 2 dest 3 with 3 (tie: dest wins); indices -1 and 5 are ignored.
        let input = serde_json::json!({"op": "max", "k": 3, "inds": [0, 1, 0, 2, -1, 5, 0],
            "vals": [2, 0.5, 2, 3, 9, 9, 1], "dest": [2, 1, 3], "hist_bar": [1, 2, 3],
            "vals_dot": [1, 1, 1, 1, 1, 1, 1], "dest_dot": [10, 20, 30]});
        let family = HistFamily;
        let parse = |s: &str| serde_json::from_str::<Json>(s).unwrap();
        let mut outputs = Vec::new();
        for function in ["primal", "vjp", "jvp"] {
            let whole = family.gradbench_evaluate(function, &input, &device, DType::F64).unwrap();
            let mut call = family.gradbench_prepare(function, &input, &device, DType::F64).unwrap();
            call.run().unwrap();
            call.run().unwrap();
            let served = call.output().unwrap();
            assert_eq!(parse(&served), parse(&whole), "{function}");
            outputs.push(parse(&served));
        }
        assert_eq!(outputs[0]["hist"], serde_json::json!([2.0, 1.0, 3.0]));
        assert_eq!(outputs[1]["dest_bar"], serde_json::json!([1.0, 2.0, 3.0]));
        assert_eq!(outputs[1]["vals_bar"], serde_json::json!([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]));
        // The winners are the dests: the tangent of each bin is its dest's.
        assert_eq!(outputs[2]["hist_dot"], serde_json::json!([10.0, 20.0, 30.0]));
        let missing = serde_json::json!({"op": "max", "k": 1, "inds": [0], "vals": [1], "dest": [0]});
        let err = family.gradbench_prepare("vjp", &missing, &device, DType::F64).err().unwrap();
        assert!(err.to_string().contains("field hist_bar: required"), "{err}");
    }

    /// The stress data hold what the check needs to see rule bugs: ties (between elements and
    /// with dest), whole bins of the neutral element, zeros for `*`, empty bins, and more
    /// elements than three chunks of the CPU device (2^15 each) hold.
    #[test]
    fn stress_data_hold_ties_neutral_elements_empty_bins_and_several_chunks() {
        const { assert!(STRESS_N > 3 << 15) };
        let by_bin = |d: &HistData| {
            let mut bins = vec![Vec::new(); d.k];
            for (i, &b) in d.inds.iter().enumerate() {
                if b >= 0 && (b as usize) < d.k {
                    bins[b as usize].push(d.vals[i]);
                }
            }
            bins
        };
        for name in ["min", "max"] {
            let op: HistOp = name.parse().unwrap();
            let d = stress_case(op, 7).unwrap();
            let best = oracle::hist(op, &d.dest, &d.inds, &d.vals);
            let bins = by_bin(&d);
            let tied = (0..d.k).filter(|&b| bins[b].iter().filter(|&&v| v == best[b]).count() >= 2).count();
            let with_dest = (0..d.k).filter(|&b| d.dest[b] == best[b] && bins[b].contains(&best[b])).count();
            assert!(tied > 30 && with_dest > 5, "{name}: {tied} bins with tied elements, {with_dest} tied with dest");
            assert!(bins[6].is_empty() && bins[13].is_empty(), "{name}: empty bins");
        }
        let lae = stress_case("logaddexp".parse().unwrap(), 7).unwrap();
        let bins = by_bin(&lae);
        assert!(lae.dest[4] == f64::NEG_INFINITY && bins[4].iter().all(|&v| v == f64::NEG_INFINITY));
        assert!(bins[0].contains(&f64::NEG_INFINITY) && bins[0].contains(&1.0));
        // Bin 2: dest and exactly one value at 1e16, the rest -inf; the oracle splits the tie.
        assert_eq!((lae.dest[2], bins[2].iter().filter(|&&v| v == 1e16).count()), (1e16, 1));
        assert!(bins[2].len() > 100 && bins[2].iter().all(|&v| v == 1e16 || v == f64::NEG_INFINITY));
        let bar: Vec<f64> = (0..lae.k).map(|b| if b == 2 { 1.0 } else { 0.0 }).collect();
        let got = stress_oracle_vjp("logaddexp".parse().unwrap(), &lae, &bar);
        let tied = (0..lae.vals.len()).find(|&i| lae.inds[i] == 2 && lae.vals[i] == 1e16).unwrap();
        assert_eq!((got[tied], got[lae.vals.len() + 2]), (0.5, 0.5));
        let hyp = stress_case("hypot".parse().unwrap(), 7).unwrap();
        let bins = by_bin(&hyp);
        assert!(hyp.dest[4] == 0.0 && bins[4].len() > 100 && bins[4].iter().all(|&v| v == 0.0));
        let mul = stress_case(HistOp::Mul, 7).unwrap();
        let zeros = |b: usize| by_bin(&mul)[b].iter().filter(|&&v| v == 0.0).count();
        assert_eq!((zeros(0), zeros(1), zeros(2), mul.dest[3]), (0, 1, 2, 0.0));
        assert!(stress_case(HistOp::Add, 7).is_some());
    }

    /// The stress check's O(n) oracle equals the oracle's O(m^2) one (l and r refolded from
    /// scratch) on a slice of the stress data, -inf and zeros included.
    #[test]
    fn extremes_at_size_plants_every_extreme_bin_across_the_input_and_its_oracle_is_the_oracle() {
        for name in ["add", "mul", "min", "max", "logaddexp", "hypot", "general-mul"] {
            let w = HistWorkload::parse(&format!("hist-{name}")).unwrap();
            let data = generate(&w.spec(3000, 40, IndexDist::Uniform, 0.05, 11));
            let (d, planted) = extremes_at_size(w.op, &data).unwrap();
            assert_eq!(planted, EXTREME_BINS.len() + 2, "{name}");
            let members = |b: usize| (0..d.inds.len()).filter(|&i| d.inds[i] == b as i64).collect::<Vec<_>>();
            // Every planted bin holds its values, no more, spread over the whole input.
            for (b, (dest, vals, _)) in EXTREME_BINS.iter().enumerate() {
                let ms = members(b);
                let got: Vec<f64> = ms.iter().map(|&i| d.vals[i]).collect();
                let want: Vec<f64> = vals.iter().map(|&v| extreme_value(w.op, v)).collect();
                assert_eq!(format!("{got:?}"), format!("{want:?}"), "{name} bin {b}");
                assert_eq!(d.dest[b].to_bits(), extreme_value(w.op, *dest).to_bits(), "{name} bin {b}");
            }
            assert_eq!(members(EXTREME_BINS.len()).len(), 1, "{name}: the single-element bin");
            assert!(members(EXTREME_BINS.len() + 1).is_empty(), "{name}: the empty bin");
            let planted_at: Vec<usize> = (0..d.inds.len()).filter(|&i| (d.inds[i] as usize) < planted).collect();
            assert!(planted_at[0] < 100 && *planted_at.last().unwrap() > 2900, "{name}: {planted_at:?}");
            // Infinities and NaNs stand only in the planted bins; the ordinary ones keep theirs.
            for (i, &b) in d.inds.iter().enumerate() {
                if b >= planted as i64 && b < d.k as i64 && data.inds[i] == b {
                    assert_eq!(d.vals[i].to_bits(), data.vals[i].to_bits(), "{name} at {i}");
                }
            }
            // The composed oracle equals the sequential one on the whole case, NaN for NaN.
            let bar: Vec<f64> = (0..d.k).map(|b| (b as f64 - 20.0) * 0.125).collect();
            let v: Vec<f64> = (0..d.vals.len() + d.k).map(|i| ((i % 7) as f64 - 3.0) * 0.25).collect();
            let (vjp, jvp) = extremes_at_size_oracle(w.op, &d, planted, &bar, &v);
            let (_, db, vb) = oracle::hist_vjp(w.op, &d.dest, &d.inds, &d.vals, &bar);
            let want_vjp: Vec<f64> = vb.into_iter().chain(db).collect();
            let (vals_dot, dest_dot) = v.split_at(d.vals.len());
            let (_, want_jvp) = oracle::hist_jvp(w.op, &d.dest, &d.inds, &d.vals, dest_dot, vals_dot);
            let same =
                |x: &f64, y: &f64| (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-12 * y.abs().max(1.0);
            for (got, want, what) in [(&vjp, &want_vjp, "vjp"), (&jvp, &want_jvp, "jvp")] {
                let bad: Vec<usize> = (0..want.len()).filter(|&i| !same(&got[i], &want[i])).collect();
                assert!(
                    bad.is_empty(),
                    "{name} {what}: {:?}",
                    bad.iter().map(|&i| (i, got[i], want[i])).collect::<Vec<_>>()
                );
            }
            // The planted bins reach the primal: NaN and infinite bins among finite ones.
            let hist = oracle::hist(w.op, &d.dest, &d.inds, &d.vals);
            assert!(hist.iter().any(|x| x.is_nan()) && hist.iter().any(|x| x.is_infinite()), "{name}: {hist:?}");
        }
        // Too small to hold them with an ordinary bin besides: none.
        let w = HistWorkload::parse("hist-add").unwrap();
        assert!(extremes_at_size(w.op, &generate(&w.spec(3000, 1, IndexDist::Uniform, 0.0, 1))).is_none());
        assert!(extremes_at_size(w.op, &generate(&w.spec(10, 100, IndexDist::Uniform, 0.0, 1))).is_none());
        // A few bins: as many extreme bins as fit beside one ordinary bin.
        let (_, planted) = extremes_at_size(w.op, &generate(&w.spec(3000, 5, IndexDist::Uniform, 0.0, 1))).unwrap();
        assert_eq!(planted, 4);
    }

    #[test]
    fn the_linear_stress_oracle_equals_the_oracle() {
        for name in ["logaddexp", "hypot", "mul", "min", "add"] {
            let op: HistOp = name.parse().unwrap();
            let full = stress_case(op, 3).unwrap();
            let d = HistData {
                k: full.k,
                inds: full.inds[..4000].to_vec(),
                vals: full.vals[..4000].to_vec(),
                dest: full.dest.clone(),
            };
            let bar: Vec<f64> = (0..d.k).map(|b| (b as f64 - 20.0) * 0.125).collect();
            let got = stress_oracle_vjp(op, &d, &bar);
            let (_, db, vb) = oracle::hist_vjp(op, &d.dest, &d.inds, &d.vals, &bar);
            let want: Vec<f64> = vb.into_iter().chain(db).collect();
            assert!(got.iter().all(|x| x.is_finite()), "{name}");
            let close = got.iter().zip(&want).all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs().max(1.0));
            assert!(close, "{name}");
        }
    }

    #[test]
    fn names_round_trip() {
        for w in HistWorkload::all() {
            assert_eq!(HistWorkload::parse(&w.name()), Some(w));
        }
        assert_eq!(HistWorkload::parse("hist-nope"), None);
        assert_eq!(HistWorkload::parse("add"), None);
    }

    /// `check` validates every histogram on both index dtypes; suites default to i32; a case
    /// given as data takes i32 unless an index needs i64.
    #[test]
    fn index_dtypes_of_check_suites_and_given_cases() {
        let sets = HistFamily.check_param_sets("hist-add");
        let dtypes: Vec<IndexDType> = sets.iter().map(|p| HistFamily::index_dtype(p).unwrap()).collect();
        assert_eq!(dtypes, IndexDType::ALL);
        assert_eq!(HistFamily.check_params("hist-add"), sets[0]);
        let spec = HistFamily.schema().into_iter().find(|s| s.key == INDEX_KEY).unwrap();
        assert_eq!((spec.default, spec.column), (Some(r#"["i32"]"#), Some("index_dtype")));
        assert_eq!(index_dtype_for(&[0, -1, i32::MAX as i64, i32::MIN as i64]), IndexDType::I32);
        assert_eq!(index_dtype_for(&[0, 1 << 31]), IndexDType::I64);
        assert_eq!(index_dtype_for(&[-(1 << 31) - 1]), IndexDType::I64);
    }

    #[test]
    fn generated_cases_evaluate_to_the_oracle() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for (w, it) in HistWorkload::all().into_iter().flat_map(|w| IndexDType::ALL.map(|it| (w, it))) {
            let data = generate(&w.spec(3000, 17, IndexDist::Skewed, 0.05, 11));
            let x = w.upload(&cpu, &data, DType::F64, it).unwrap();
            assert_eq!(x.inds.index_dtype(), it);
            let bar: Vec<f64> = (0..17).map(|b| (b as f64 - 8.0) * 0.25).collect();
            let bar_t = cpu.tensor(&bar, &[17], DType::F64).unwrap();
            let out = w.vjp(&cpu, HistRule::Auto, &x, &bar_t).unwrap();
            let (h, db, vb) = oracle::hist_vjp(w.op, &data.dest, &data.inds, &data.vals, &bar);
            let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs().max(1.0));
            assert!(close(&cpu.to_vec(&out.hist).unwrap(), &h), "{} hist", w.name());
            assert!(close(&cpu.to_vec(&out.dest_bar).unwrap(), &db), "{} dest_bar", w.name());
            assert!(close(&cpu.to_vec(&out.vals_bar).unwrap(), &vb), "{} vals_bar", w.name());
            assert!(close(&cpu.to_vec(&w.primal(&cpu, &x).unwrap()).unwrap(), &h));
            let vd: Vec<f64> = (0..data.vals.len()).map(|i| ((i * 37) % 11) as f64 * 0.1 - 0.5).collect();
            let dd: Vec<f64> = (0..17).map(|b| b as f64 * 0.05).collect();
            let (hist, hist_dot) = w
                .jvp(
                    &cpu,
                    &x,
                    &cpu.tensor(&dd, &[17], DType::F64).unwrap(),
                    &cpu.tensor(&vd, &[vd.len()], DType::F64).unwrap(),
                )
                .unwrap();
            let (h2, hd) = oracle::hist_jvp(w.op, &data.dest, &data.inds, &data.vals, &dd, &vd);
            assert!(close(&cpu.to_vec(&hist).unwrap(), &h2), "{} jvp hist", w.name());
            assert!(close(&cpu.to_vec(&hist_dot).unwrap(), &hd), "{} hist_dot", w.name());
        }
    }
}

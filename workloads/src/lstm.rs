//! The LSTM objective exactly as ADBench defines it (`lstm_objective` in its C++ `lstm.h`): a
//! "D-LSTM" whose weights are diagonal (every gate multiplies elementwise), over l layers of
//! width b, run over a sequence of c characters of b bits.
//!
//! ```text
//! for t in 0..c-1:
//!     input = x_t * in_weight
//!     for each layer j (input = the hidden state just computed by layer j-1 for j > 0):
//!         forget  = sigmoid(input  * w_forget + b_forget)
//!         ingate  = sigmoid(hidden * w_ingate + b_ingate)     (hidden: layer j's previous one)
//!         outgate = sigmoid(input  * w_outgate + b_outgate)
//!         change  = tanh(hidden * w_change + b_change)
//!         cell    = cell * forget + ingate * change
//!         hidden  = outgate * tanh(cell)
//!     ypred = hidden_{l-1} * out_weight + out_bias
//!     ynorm = ypred - log(sum(exp(ypred)) + 2)
//!     total += sum(x_{t+1} * ynorm)
//! f = -total / ((c-1) b)
//! ```
//!
//! Two of ADBench's choices are kept on purpose and are not bugs of this port:
//! - the "+2" inside the log-sum-exp (ADBench's `logsumexp` adds 2 to the sum of exponentials,
//!   and takes no maximum out; the predictions are bounded since |hidden| < 1, so nothing
//!   overflows for ADBench's parameters);
//! - the forget and output gates read the layer's input while the input gate and the change
//!   read the layer's previous hidden state.
//!
//! With c = 1 there is no prediction and f = -0/0 = NaN, as in ADBench.
//!
//! Each layer's step is one op, `lstm_cell` (input, state `[h; c]`, the layer's 8 rows of
//! parameters): the engines record one node with one fused rule per cell instead of seventeen
//! tiny ops, the LSTM's cost being per-op overhead (`DenseOps::lstm_cell` composes it from the
//! ops above where a device has no fused kernel). The predictions do not feed back into the
//! recurrence, so they run once, over the last layer's hidden states stacked into a
//! `[c-1, b]` tensor (`IndexOps::stack`), instead of ten tiny ops per step: the same
//! arithmetic, with `total` summed over all steps at once (rounding differs from ADBench's
//! running sum in the last bits).
//!
//! Parameters are main (2l rows of 4b: per layer the weight row then the bias row, gates
//! forget/input/output/change) and extra (in_weight, out_weight, out_bias); the gradient is laid
//! out as ADBench's: [main (8lb), extra (3b)]. The state and the sequence are constants.

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, DType, Device, Elem, Forward, Ops, OutOfRange, Result, Reverse, UnaryOp, with_device,
};
use adgauge_datasets::lstm::LstmInput;

use serde_json::Value as Json;

use crate::json::{format_array, format_number, objective_json, parse_rows, rows_json};
use crate::objective::{ObjectiveProblem, RemoteModule, ScalarObjective};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalRequest, Mode, ParamKind, ParamSpec, Params, Problem, WResult, Workload, WorkloadError, rounded, sizes,
};

/// An LSTM problem on an engine's device.
pub struct LstmInputs<O: Ops> {
    pub l: usize,
    pub c: usize,
    pub b: usize,
    /// 8lb main parameters, flat.
    pub main: O::T,
    /// 3b extra parameters, flat.
    pub extra: O::T,
    /// l tensors of [2, b]: per layer the hidden row then the cell row (constants).
    pub state: Vec<O::T>,
    /// c tensors of b (constants).
    pub sequence: Vec<O::T>,
    /// Index tensor j selects the j-th run of b values of a flat tensor (j < 3: the extra
    /// parameters' rows; j = 0 also the hidden row of a state).
    rows: Vec<O::I>,
    /// Index tensor j selects layer j's 8b parameters of main.
    layers: Vec<O::I>,
}

/// Puts a problem on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, s: &LstmInput, dtype: DType) -> Result<LstmInputs<O>> {
    let b = s.b;
    let row = |v: &[f64]| o.tensor(v, &[b], dtype);
    Ok(LstmInputs {
        l: s.l,
        c: s.c,
        b,
        main: o.tensor(&s.main_params, &[8 * s.l * b], dtype)?,
        extra: o.tensor(&s.extra_params, &[3 * b], dtype)?,
        state: s.state.chunks(2 * b).map(|v| o.tensor(v, &[2, b], dtype)).collect::<Result<_>>()?,
        sequence: s.sequence.chunks(b).map(row).collect::<Result<_>>()?,
        rows: (0..3)
            .map(|j| o.index(&((j * b) as i64..((j + 1) * b) as i64).collect::<Vec<_>>()))
            .collect::<Result<_>>()?,
        layers: (0..s.l)
            .map(|j| o.index(&((8 * j * b) as i64..(8 * (j + 1) * b) as i64).collect::<Vec<_>>()))
            .collect::<Result<_>>()?,
    })
}

impl<O: Ops> LstmInputs<O> {
    /// Number of parameters (the gradient's length): 8lb main then 3b extra.
    pub fn num_params(&self) -> usize {
        8 * self.l * self.b + 3 * self.b
    }

    /// The objective on engine `P` (built over this problem's device, sharing its index tensors)
    /// with the given parameters, state (l tensors of [2, b]) and sequence (c tensors of b).
    pub fn objective_on<P: Ops<I = O::I>>(
        &self,
        p: &P,
        main: &P::T,
        extra: &P::T,
        state: &[P::T],
        sequence: &[P::T],
    ) -> Result<P::T> {
        use adgauge_backends::TensorMeta;
        let (l, c, b) = (self.l, self.c, self.b);
        let dt = main.dtype();
        let row = |t: &P::T, j: usize| p.gather(t, &self.rows[j], OutOfRange::Error);
        let layers: Vec<P::T> = (0..l)
            .map(|j| p.reshape(&p.gather(main, &self.layers[j], OutOfRange::Error)?, &[8, b]))
            .collect::<Result<_>>()?;
        let (in_w, out_w, out_b) = (row(extra, 0)?, row(extra, 1)?, row(extra, 2)?);
        let mut state: Vec<P::T> = state.to_vec();
        // The recurrence runs step by step; the predictions do not feed back, so they run once
        // over the stacked hidden states of the last layer (c-1 rows of b).
        let mut hidden = Vec::with_capacity(c.saturating_sub(1));
        for x in &sequence[..c.saturating_sub(1)] {
            let mut input = p.mul(x, &in_w)?;
            for (j, params) in layers.iter().enumerate() {
                state[j] = p.lstm_cell(&input, &state[j], params)?;
                input = row(&state[j], 0)?; // the new hidden row
            }
            hidden.push(input);
        }
        let total = if hidden.is_empty() {
            p.scalar(0.0, dt)?
        } else {
            let hidden = p.stack(&hidden)?; // [c-1, b]
            let targets = p.stack(&sequence[1..c])?;
            let ypred =
                p.broadcast_binary(BinaryOp::Add, &p.broadcast_binary(BinaryOp::Mul, &hidden, &out_w)?, &out_b)?;
            // ADBench's log-sum-exp per step: log(sum(exp(y)) + 2), no maximum subtracted.
            let sums = p.sum_axis(&p.unary(UnaryOp::Exp, &ypred)?, 1)?; // [c-1, 1]
            let lse = p.unary(UnaryOp::Log, &p.add(&sums, &p.scalar(2.0, dt)?)?)?;
            let ynorm = p.broadcast_binary(BinaryOp::Sub, &ypred, &lse)?;
            p.sum(&p.mul(&targets, &ynorm)?)?
        };
        let count = (c.saturating_sub(1) * b) as f64;
        // -total / count; with count = 0 this is -0/0 = NaN, as in ADBench.
        p.div(&p.neg(&total)?, &p.scalar(count, dt)?)
    }
}

/// The objective, shape `[1]`.
pub fn objective<O: Ops>(o: &O, x: &LstmInputs<O>) -> Result<O::T> {
    x.objective_on(o, &x.main, &x.extra, &x.state, &x.sequence)
}

/// Objective and gradient [main, extra] by reverse mode.
pub fn gradient<B: Ops>(b: &B, x: &LstmInputs<B>) -> Result<(f64, Vec<f64>)> {
    use adgauge_backends::TensorMeta;
    let r = Reverse::new(b.clone());
    let (m, e) = (r.var(x.main.clone()), r.var(x.extra.clone()));
    let state: Vec<_> = x.state.iter().map(|t| r.lift(t.clone())).collect();
    let seq: Vec<_> = x.sequence.iter().map(|t| r.lift(t.clone())).collect();
    let f = x.objective_on(&r, &m, &e, &state, &seq)?;
    let gr = r.backward(&f, b.full(&[1], 1.0, f.dtype())?)?;
    let mut out = b.to_vec(&gr.get_or_zeros(b, &m)?)?;
    out.extend(b.to_vec(&gr.get_or_zeros(b, &e)?)?);
    Ok((b.to_vec(f.value())?[0], out))
}

/// The directional derivative of f along `v` (laid out like the gradient) by one forward sweep:
/// `(f, f'(v))`.
pub fn directional<B: Ops>(b: &B, x: &LstmInputs<B>, v: &[f64]) -> Result<(f64, f64)> {
    use adgauge_backends::TensorMeta;
    let f = Forward::new(b.clone());
    let dt = x.main.dtype();
    let nm = 8 * x.l * x.b;
    if v.len() != x.num_params() {
        return Err(adgauge_backends::OpError::Shape {
            op: "lstm directional",
            detail: format!("direction has {} entries, expected {}", v.len(), x.num_params()),
        });
    }
    let (vm, ve) = v.split_at(nm);
    let m = f.dual(x.main.clone(), b.tensor(vm, &[nm], dt)?)?;
    let e = f.dual(x.extra.clone(), b.tensor(ve, &[3 * x.b], dt)?)?;
    let state: Vec<_> = x.state.iter().map(|t| f.lift(t.clone())).collect();
    let seq: Vec<_> = x.sequence.iter().map(|t| f.lift(t.clone())).collect();
    let y = x.objective_on(&f, &m, &e, &state, &seq)?;
    Ok((b.to_vec(f.primal(&y))?[0], b.to_vec(&f.tangent(&y)?)?[0]))
}

/// Objective and gradient by forward mode: one sweep per parameter.
pub fn gradient_forward<B: Ops>(b: &B, x: &LstmInputs<B>) -> Result<(f64, Vec<f64>)> {
    let np = x.num_params();
    let mut out = Vec::with_capacity(np);
    let mut value = f64::NAN;
    let mut e = vec![0.0; np];
    for j in 0..np {
        e[j] = 1.0;
        let (y, dy) = directional(b, x, &e)?;
        e[j] = 0.0;
        value = y;
        out.push(dy);
    }
    Ok((value, out))
}

/// One layer's saved forward values at one time step (each b long).
struct Saved<T> {
    input: Vec<T>,
    hidden: Vec<T>,
    cell: Vec<T>,
    gates: [Vec<T>; 4],
    tanh_cell: Vec<T>,
}

fn sigmoid<T: Elem>(x: T) -> T {
    T::one() / (T::one() + (-x).exp())
}

/// The hand-derived objective and gradient in `T` (reverse mode written out: a forward sweep
/// saving every layer's input, previous state, gates and tanh(cell), then the adjoint sweep
/// backwards in time and down the layers). With s = -1/((c-1) b) and E = sum(exp(y)) + 2, the
/// prediction's adjoint at step t is `dy_k = s (x_{t+1,k} - sum(x_{t+1}) exp(y_k) / E)`.
pub fn manual<T: Elem>(s: &LstmInput) -> (f64, Vec<f64>) {
    let (l, c, b) = (s.l, s.c, s.b);
    let t = |v: &[f64]| v.iter().map(|&x| T::of_f64(x)).collect::<Vec<T>>();
    let (main, extra, state, seq) = (t(&s.main_params), t(&s.extra_params), t(&s.state), t(&s.sequence));
    let wrow = |j: usize, g: usize| &main[(8 * j + g) * b..(8 * j + g + 1) * b];
    let brow = |j: usize, g: usize| &main[(8 * j + 4 + g) * b..(8 * j + 5 + g) * b];
    let (in_w, out_w, out_b) = (&extra[..b], &extra[b..2 * b], &extra[2 * b..]);
    let xrow = |i: usize| &seq[i * b..(i + 1) * b];
    let steps = c.saturating_sub(1);
    let mut hidden: Vec<Vec<T>> = (0..l).map(|j| state[2 * j * b..(2 * j + 1) * b].to_vec()).collect();
    let mut cell: Vec<Vec<T>> = (0..l).map(|j| state[(2 * j + 1) * b..(2 * j + 2) * b].to_vec()).collect();
    let mut saved: Vec<Saved<T>> = Vec::with_capacity(steps * l);
    let mut preds: Vec<Vec<T>> = Vec::with_capacity(steps);
    let mut total = T::zero();
    for ti in 0..steps {
        let mut input: Vec<T> = xrow(ti).iter().zip(in_w).map(|(&x, &w)| x * w).collect();
        for j in 0..l {
            let z = |g: usize, v: &[T], k: usize| v[k] * wrow(j, g)[k] + brow(j, g)[k];
            let (hp, cp) = (hidden[j].clone(), cell[j].clone());
            let f: Vec<T> = (0..b).map(|k| sigmoid(z(0, &input, k))).collect();
            let i: Vec<T> = (0..b).map(|k| sigmoid(z(1, &hp, k))).collect();
            let o: Vec<T> = (0..b).map(|k| sigmoid(z(2, &input, k))).collect();
            let g: Vec<T> = (0..b).map(|k| z(3, &hp, k).tanh()).collect();
            let cn: Vec<T> = (0..b).map(|k| cp[k] * f[k] + i[k] * g[k]).collect();
            let tc: Vec<T> = cn.iter().map(|v| v.tanh()).collect();
            let hn: Vec<T> = (0..b).map(|k| o[k] * tc[k]).collect();
            saved.push(Saved { input, hidden: hp, cell: cp, gates: [f, i, o, g], tanh_cell: tc });
            cell[j] = cn;
            hidden[j] = hn.clone();
            input = hn;
        }
        let y: Vec<T> = (0..b).map(|k| input[k] * out_w[k] + out_b[k]).collect();
        let lse = (y.iter().fold(T::zero(), |a, &v| a + v.exp()) + T::of_f64(2.0)).ln();
        total = xrow(ti + 1).iter().zip(&y).fold(total, |a, (&x, &v)| a + x * (v - lse));
        preds.push(y);
    }
    let count = T::of_f64((steps * b) as f64);
    let f = -total / count;

    // Adjoint sweep.
    let sc = -T::one() / count;
    let mut gmain = vec![T::zero(); 8 * l * b];
    let mut gextra = vec![T::zero(); 3 * b];
    let mut dh = vec![vec![T::zero(); b]; l];
    let mut dc = vec![vec![T::zero(); b]; l];
    for ti in (0..steps).rev() {
        let y = &preds[ti];
        let xn = xrow(ti + 1);
        let e: T = y.iter().fold(T::zero(), |a, &v| a + v.exp()) + T::of_f64(2.0);
        let sx = xn.iter().fold(T::zero(), |a, &v| a + v);
        let top = saved[ti * l + l - 1].gates[2].iter().zip(&saved[ti * l + l - 1].tanh_cell);
        for (k, (&o, &tc)) in top.enumerate() {
            let dy = sc * (xn[k] - sx * y[k].exp() / e);
            gextra[b + k] = gextra[b + k] + dy * o * tc;
            gextra[2 * b + k] = gextra[2 * b + k] + dy;
            dh[l - 1][k] = dh[l - 1][k] + dy * out_w[k];
        }
        for j in (0..l).rev() {
            let sv = &saved[ti * l + j];
            let [f, i, o, g] = &sv.gates;
            let mut dinput = vec![T::zero(); b];
            for k in 0..b {
                let tc = sv.tanh_cell[k];
                let dhn = dh[j][k];
                let d_o = dhn * tc;
                let dcn = dc[j][k] + dhn * o[k] * (T::one() - tc * tc);
                let (df, di, dg) = (dcn * sv.cell[k], dcn * g[k], dcn * i[k]);
                let dz = [
                    df * f[k] * (T::one() - f[k]),
                    di * i[k] * (T::one() - i[k]),
                    d_o * o[k] * (T::one() - o[k]),
                    dg * (T::one() - g[k] * g[k]),
                ];
                // Gates 0 and 2 read the input, gates 1 and 3 the previous hidden state.
                let mut dhp = T::zero();
                for (gate, &d) in dz.iter().enumerate() {
                    let src = if gate % 2 == 0 { sv.input[k] } else { sv.hidden[k] };
                    let wpos = (8 * j + gate) * b + k;
                    gmain[wpos] = gmain[wpos] + d * src;
                    gmain[wpos + 4 * b] = gmain[wpos + 4 * b] + d;
                    if gate % 2 == 0 {
                        dinput[k] = dinput[k] + d * main[wpos];
                    } else {
                        dhp = dhp + d * main[wpos];
                    }
                }
                dh[j][k] = dhp;
                dc[j][k] = dcn * f[k];
            }
            if j > 0 {
                for k in 0..b {
                    dh[j - 1][k] = dh[j - 1][k] + dinput[k];
                }
            } else {
                for k in 0..b {
                    gextra[k] = gextra[k] + dinput[k] * xrow(ti)[k];
                }
            }
        }
    }
    let grad = gmain.into_iter().chain(gextra).map(|v| v.as_f64()).collect();
    (f.as_f64(), grad)
}

/// The objective alone in plain `T` (the manual primal, the speed reference for the objective).
pub fn manual_objective<T: Elem>(s: &LstmInput) -> f64 {
    let (l, c, b) = (s.l, s.c, s.b);
    let t = |v: &[f64]| v.iter().map(|&x| T::of_f64(x)).collect::<Vec<T>>();
    let (main, extra, state, seq) = (t(&s.main_params), t(&s.extra_params), t(&s.state), t(&s.sequence));
    let mut st = state;
    let mut total = T::zero();
    let (mut input, mut y) = (vec![T::zero(); b], vec![T::zero(); b]);
    for ti in 0..c.saturating_sub(1) {
        for k in 0..b {
            input[k] = seq[ti * b + k] * extra[k];
        }
        for j in 0..l {
            let p = &main[8 * j * b..8 * (j + 1) * b];
            let (hidden, cell) = st[2 * j * b..2 * (j + 1) * b].split_at_mut(b);
            for k in 0..b {
                let f = sigmoid(input[k] * p[k] + p[4 * b + k]);
                let i = sigmoid(hidden[k] * p[b + k] + p[5 * b + k]);
                let o = sigmoid(input[k] * p[2 * b + k] + p[6 * b + k]);
                let g = (hidden[k] * p[3 * b + k] + p[7 * b + k]).tanh();
                cell[k] = cell[k] * f + i * g;
                hidden[k] = o * cell[k].tanh();
                input[k] = hidden[k];
            }
        }
        for k in 0..b {
            y[k] = input[k] * extra[b + k] + extra[2 * b + k];
        }
        let lse = (y.iter().fold(T::zero(), |a, &v| a + v.exp()) + T::of_f64(2.0)).ln();
        total = seq[(ti + 1) * b..(ti + 2) * b].iter().zip(&y).fold(total, |a, (&x, &v)| a + x * (v - lse));
    }
    (-total / T::of_f64((c.saturating_sub(1) * b) as f64)).as_f64()
}

/// [`manual`] in the dtype under test.
pub fn manual_in(s: &LstmInput, dtype: DType) -> (f64, Vec<f64>) {
    match dtype {
        DType::F32 => manual::<f32>(s),
        DType::F64 => manual::<f64>(s),
    }
}

/// LSTM in the registry: `workload: lstm` with l layers and c characters of b bits.
pub struct Lstm;

/// Validation size: every parameter gets a finite difference.
const CHECK: [(&str, u64); 3] = [("l", 2), ("c", 6), ("b", 4)];

impl Workload for Lstm {
    fn family(&self) -> &'static str {
        "lstm"
    }
    fn about(&self) -> &'static str {
        "ADBench's D-LSTM objective and its gradient"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![
            sizes("l", 1, 1 << 10, "layers"),
            sizes("c", 2, 1 << 24, "characters (at least 2: one prediction)"),
            ParamSpec {
                key: "b",
                kind: ParamKind::Ints { min: 1, max: 1 << 16 },
                default: Some("[14]"),
                column: Some("b"),
                legacy: None,
                doc: "bits per character (ADBench's files: 14)",
            },
        ]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        Ok(Box::new(ObjectiveProblem::<LstmObjective>(LstmInput::generate(
            p.int("l")?,
            p.int("c")?,
            p.int("b")?,
            seed,
        ))))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let s = LstmInput::parse(&req.text, &req.source).map_err(|e| WorkloadError::BadInput(e.to_string()))?;
        crate::validate::validate(&s, &req.source, req.dtype)?;
        let dt = req.dtype;
        let input = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &s, dt).map_err(input)?;
            let with_gradient = |(f, gr): (f64, Vec<f64>)| objective_json(f, Some(&gr), dt);
            Ok(match req.mode.unwrap_or(Mode::Primal) {
                Mode::Primal => objective_json(d.to_vec(&objective(d, &x).map_err(input)?)?[0], None, dt),
                Mode::Vjp => with_gradient(gradient(d, &x).map_err(input)?),
                Mode::Jvp | Mode::HessianDiag => with_gradient(gradient_forward(d, &x).map_err(input)?),
            })
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("lstm")
    }
    /// GradBench's `lstm`: `objective` returns the loss, `jacobian` its gradient [main, extra].
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("lstm.{function} input");
        let s = parse_gradbench_input(input, &source)?;
        crate::validate::validate(&s, &source, dtype)?;
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &s, dtype).map_err(bad)?;
            match function {
                "objective" => Ok(format_number(d.to_vec(&objective(d, &x).map_err(bad)?)?[0], dtype)),
                "jacobian" => Ok(format_array(&gradient(d, &x).map_err(bad)?.1, dtype)),
                other => {
                    Err(WorkloadError::BadInput(format!("lstm: no function '{other}' (known: objective, jacobian)")))
                }
            }
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match (row.get("l"), row.get("c")) {
            (Some(l), Some(c)) => format!("{name} l={l} c={c}"),
            _ => name.to_string(),
        }
    }
}

/// GradBench's `lstm` input: the four matrices as rows (main 2l x 4b, extra 3 x b, state 2l x b,
/// sequence c x b).
pub fn gradbench_input(s: &LstmInput) -> Json {
    serde_json::json!({
        "main_params": rows_json(&s.main_params, 4 * s.b),
        "extra_params": rows_json(&s.extra_params, s.b),
        "state": rows_json(&s.state, s.b),
        "sequence": rows_json(&s.sequence, s.b),
    })
}

/// Reads GradBench's `lstm` input (the sizes follow from the matrices, as in GradBench).
pub fn parse_gradbench_input(input: &Json, source: &str) -> WResult<LstmInput> {
    let (rows, width, main_params) = parse_rows(input, "main_params", source, None)?;
    let b = width / 4;
    let (_, _, extra_params) = parse_rows(input, "extra_params", source, Some(b))?;
    let (_, _, state) = parse_rows(input, "state", source, Some(b))?;
    let (c, _, sequence) = parse_rows(input, "sequence", source, Some(b))?;
    let s = LstmInput { l: rows / 2, c, b, main_params, extra_params, state, sequence };
    s.validate().map_err(|e| WorkloadError::BadInput(format!("{source}: {e}")))?;
    Ok(s)
}

/// LSTM as a scalar objective of [main, extra].
pub struct LstmObjective;

impl ScalarObjective for LstmObjective {
    type Remote = Self;
    type Resident<D: Device> = LstmInputs<D>;
    type Input = LstmInput;
    fn rounded(s: &LstmInput, dtype: DType) -> LstmInput {
        LstmInput {
            main_params: rounded(&s.main_params, dtype),
            extra_params: rounded(&s.extra_params, dtype),
            state: rounded(&s.state, dtype),
            sequence: rounded(&s.sequence, dtype),
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
    fn upload<D: Device>(d: &D, input: &LstmInput, dtype: DType) -> Result<LstmInputs<D>> {
        upload(d, input, dtype)
    }
    fn objective<D: Device>(d: &D, x: &LstmInputs<D>) -> Result<D::T> {
        objective(d, x)
    }
    fn gradient<D: Device>(d: &D, x: &LstmInputs<D>) -> Result<Vec<f64>> {
        Ok(gradient(d, x)?.1)
    }
    fn directional<D: Device>(d: &D, x: &LstmInputs<D>, v: &[f64]) -> Result<f64> {
        Ok(directional(d, x, v)?.1)
    }
    fn manual_gradient(s: &LstmInput, dtype: DType) -> Vec<f64> {
        manual_in(s, dtype).1
    }
    fn remote(s: &LstmInput) -> Option<RemoteModule> {
        Some(RemoteModule { primal: "objective", gradient: "jacobian", input: gradbench_input(s) })
    }
}

impl CheckedInput for LstmInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![
            ("main_params", &self.main_params),
            ("extra_params", &self.extra_params),
            ("state", &self.state),
            ("sequence", &self.sequence),
        ]
    }
    fn sizes(&self) -> Result<(), String> {
        if self.c < 2 {
            return Err(format!(
                "field sequence: {} character(s); at least 2 (the loss predicts each character from the one before)",
                self.c
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;
    use adgauge_testkit::adbench_file;

    use super::*;

    #[test]
    fn gradbench_inputs_round_trip_and_malformed_ones_name_the_field() {
        let s = LstmInput::generate(2, 6, 4, 1);
        let json = gradbench_input(&s);
        assert_eq!(json["main_params"].as_array().unwrap().len(), 4);
        assert_eq!(json["main_params"][0].as_array().unwrap().len(), 16);
        assert_eq!(parse_gradbench_input(&json, "in").unwrap(), s);
        let mut bad = json.clone();
        bad["state"][1] = serde_json::json!([1.0]);
        match parse_gradbench_input(&bad, "in") {
            Err(WorkloadError::BadInput(m)) => {
                assert!(m.contains("field state[1]: has 1 elements but expected 4"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * (x.abs() + y.abs()).max(1.0))
    }

    /// A deterministic pseudo-random vector in [-1, 1).
    fn direction(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    fn set_param(s: &mut LstmInput, j: usize, v: f64) {
        let nm = s.main_params.len();
        if j < nm { s.main_params[j] = v } else { s.extra_params[j - nm] = v }
    }

    fn get_param(s: &LstmInput, j: usize) -> f64 {
        let nm = s.main_params.len();
        if j < nm { s.main_params[j] } else { s.extra_params[j - nm] }
    }

    /// Reverse vs manual (all coordinates), central differences of the manual objective on
    /// `coords`, forward directional derivatives vs the reverse gradient (dot-product test).
    fn check_problem(s: &LstmInput, coords: &[usize], tol: f64) -> (f64, Vec<f64>) {
        let cpu = Cpu::new(Some(2)).unwrap();
        let x = upload(&cpu, s, DType::F64).unwrap();
        let f_primal = cpu.to_vec(&objective(&cpu, &x).unwrap()).unwrap()[0];
        let (f_ad, g_ad) = gradient(&cpu, &x).unwrap();
        let (f_m, g_m) = manual::<f64>(s);
        assert_eq!(manual_objective::<f64>(s), f_m);
        assert!(close(&[f_ad, f_primal], &[f_m, f_m], tol), "objective {f_ad} / {f_primal} vs manual {f_m}");
        assert!(close(&g_ad, &g_m, tol), "gradient vs manual:\n{g_ad:?}\n{g_m:?}");
        let h = 1e-5;
        for &j in coords {
            let at = |d: f64| {
                let mut p = s.clone();
                set_param(&mut p, j, get_param(s, j) + d);
                manual::<f64>(&p).0
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            assert!((fd - g_ad[j]).abs() <= 1e-7 * fd.abs().max(1.0), "coordinate {j}: {} vs fd {fd}", g_ad[j]);
        }
        for seed in 0..3 {
            let v = direction(g_ad.len(), seed);
            let (fy, dy) = directional(&cpu, &x, &v).unwrap();
            let dot: f64 = g_ad.iter().zip(&v).map(|(a, b)| a * b).sum();
            assert!(close(&[fy], &[f_m], tol));
            assert!((dy - dot).abs() <= tol * dot.abs().max(1.0), "jvp {dy} vs <grad, v> {dot}");
        }
        (f_ad, g_ad)
    }

    #[test]
    fn generated_problems_agree_with_manual_forward_and_differences() {
        for (seed, (l, c, b)) in [(1, 5, 3), (2, 8, 4), (3, 6, 14)].into_iter().enumerate() {
            let s = LstmInput::generate(l, c, b, seed as u64 + 10);
            let all: Vec<usize> = (0..8 * l * b + 3 * b).collect();
            check_problem(&s, &all, 1e-11);
        }
    }

    #[test]
    fn full_forward_gradient_matches_reverse() {
        let s = LstmInput::generate(2, 4, 3, 7);
        let cpu = Cpu::new(Some(2)).unwrap();
        let x = upload(&cpu, &s, DType::F64).unwrap();
        let (f_r, g_r) = gradient(&cpu, &x).unwrap();
        let (f_f, g_f) = gradient_forward(&cpu, &x).unwrap();
        assert!(close(&[f_r], &[f_f], 1e-12));
        assert!(close(&g_r, &g_f, 1e-11));
        assert_eq!(g_r.len(), 8 * 2 * 3 + 3 * 3);
    }

    #[test]
    fn one_step_matches_a_hand_computation() {
        // l = 1, c = 2, b = 1: every quantity is a scalar.
        let s = LstmInput {
            l: 1,
            c: 2,
            b: 1,
            main_params: vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
            extra_params: vec![0.9, 1.1, 1.2],
            state: vec![0.25, 0.75],
            sequence: vec![1.0, 1.0],
        };
        let sg = |x: f64| 1.0 / (1.0 + (-x).exp());
        let input = 0.9;
        let (f, i, o, g) =
            (sg(input * 0.1 + 0.5), sg(0.25 * 0.2 + 0.6), sg(input * 0.3 + 0.7), (0.25f64 * 0.4 + 0.8).tanh());
        let cell = 0.75 * f + i * g;
        let y = o * cell.tanh() * 1.1 + 1.2;
        let want = -(y - (y.exp() + 2.0).ln());
        let (got, _) = manual::<f64>(&s);
        assert!((got - want).abs() < 1e-15, "{got} vs {want}");
        let cpu = Cpu::new(Some(1)).unwrap();
        let x = upload(&cpu, &s, DType::F64).unwrap();
        let ad = cpu.to_vec(&objective(&cpu, &x).unwrap()).unwrap()[0];
        assert!((ad - want).abs() < 1e-15, "{ad} vs {want}");
    }

    #[test]
    fn a_single_character_gives_nan_as_in_adbench() {
        let s = LstmInput::generate(1, 1, 3, 0);
        assert!(manual::<f64>(&s).0.is_nan());
        let cpu = Cpu::new(Some(1)).unwrap();
        let x = upload(&cpu, &s, DType::F64).unwrap();
        assert!(cpu.to_vec(&objective(&cpu, &x).unwrap()).unwrap()[0].is_nan());
    }

    #[test]
    fn adbench_l2_c1024_agrees_with_manual_forward_and_differences() {
        let Some(path) = adbench_file("lstm/lstm_l2_c1024.txt") else { return };
        let s = LstmInput::read(&path).unwrap();
        let n = 8 * s.l * s.b + 3 * s.b;
        // A spread of coordinates over every block (weights, biases of each layer, extras).
        let coords: Vec<usize> = (0..n).step_by(7).chain([n - 1]).collect();
        let (f, g) = check_problem(&s, &coords, 1e-10);
        assert!(f.is_finite() && g.iter().all(|v| v.is_finite()));
        eprintln!("lstm_l2_c1024: objective {f}");
    }

    #[test]
    fn f32_runs_agree_with_the_f32_manual() {
        let s = LstmInput::generate(2, 30, 14, 4);
        let rounded = LstmInput {
            main_params: s.main_params.iter().map(|&v| v as f32 as f64).collect(),
            extra_params: s.extra_params.iter().map(|&v| v as f32 as f64).collect(),
            state: s.state.iter().map(|&v| v as f32 as f64).collect(),
            ..s.clone()
        };
        let cpu = Cpu::new(Some(2)).unwrap();
        let x = upload(&cpu, &s, DType::F32).unwrap();
        let (f, gr) = gradient(&cpu, &x).unwrap();
        let (fm, gm) = manual::<f32>(&rounded);
        let (f64m, g64m) = manual::<f64>(&rounded);
        assert!(close(&[f], &[fm], 1e-5), "{f} vs {fm}");
        assert!(close(&gr, &gm, 1e-4));
        assert!(close(&[f], &[f64m], 1e-5));
        assert!(close(&gr, &g64m, 1e-4));
        let v = direction(gr.len(), 9);
        let (_, dy) = directional(&cpu, &x, &v).unwrap();
        let dot: f64 = gr.iter().zip(&v).map(|(a, b)| a * b).sum();
        assert!((dy - dot).abs() <= 1e-4 * dot.abs().max(1.0), "{dy} vs {dot}");
    }
}

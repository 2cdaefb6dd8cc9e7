//! The LSTM cell ([`crate::DenseOps::lstm_cell`]): its shape check, its composition from
//! other ops (what a device without a fused kernel runs), and its two rule kernels composed the
//! same way ([`crate::RuleKernels::lstm_cell_vjp`] and `lstm_cell_jvp`).
//!
//! With `a_f = x w_f + b_f`, `a_i = h w_i + b_i`, `a_o = x w_o + b_o`, `a_c = h w_c + b_c`,
//! `f = sigmoid(a_f)`, `i = sigmoid(a_i)`, `o = sigmoid(a_o)`, `z = tanh(a_c)`,
//! `c' = c f + i z`, `t = tanh(c')` and `h' = o t`, the adjoints for `(h'_bar, c'_bar)` are
//!
//! ```text
//! cbar  = c'_bar + (h'_bar o) (1 - t^2)          (all of c' flows through here)
//! af_bar = (cbar c) f (1 - f)     ai_bar = (cbar z) i (1 - i)
//! ao_bar = (h'_bar t) o (1 - o)   ac_bar = (cbar i) (1 - z^2)
//! x_bar = af_bar w_f + ao_bar w_o     h_bar = ai_bar w_i + ac_bar w_c     c_bar = cbar f
//! w_bar = [af_bar x, ai_bar h, ao_bar x, ac_bar h]      b_bar = [af_bar, ai_bar, ao_bar, ac_bar]
//! ```
//!
//! and the tangent is the same chain forwards (`dc' = (dc f + c df) + (di z + i dz)`,
//! `dh' = do t + o (1 - t^2) dc'`). The CPU's fused kernels (`cpu/lstm.rs`) perform these
//! operations in this order, so the fused and composed forms round alike.

use crate::Result;
use crate::shape::{lstm_cell_width, same_shape};
use crate::{DenseOps, TensorMeta, UnaryOp};

/// The `n` rows of `b` of a tensor with `n b` elements, as tensors of `[b]` (device ops only:
/// no index tensor to upload).
fn rows<B: DenseOps>(o: &B, t: &B::T, n: usize, b: usize) -> Result<Vec<B::T>> {
    o.unstack(&o.reshape(t, &[n, b])?)
}

/// The values the cell's rules read, its rows split: operands, and gates from the forward
/// computation or from a device's saved gates ([`crate::RuleKernels::lstm_cell_gates`]).
struct CellValues<T> {
    x: T,
    h: T,
    c: T,
    /// Weights then biases, gates forget/input/output/change.
    p: Vec<T>,
    /// Gate values f, i, o, z.
    gates: [T; 4],
    tanh_c_new: T,
}

/// The cell computed op by op: its values and the new cell row `c'`.
fn cell_values<B: DenseOps>(o: &B, x: &B::T, state: &B::T, params: &B::T) -> Result<(CellValues<B::T>, B::T, usize)> {
    let b = lstm_cell_width("lstm_cell", x.shape(), state.shape(), params.shape())?;
    let s = rows(o, state, 2, b)?;
    let p = rows(o, params, 8, b)?;
    let (h, c) = (s[0].clone(), s[1].clone());
    let gate = |u: UnaryOp, input: &B::T, j: usize| o.unary(u, &o.add(&o.mul(input, &p[j])?, &p[4 + j])?);
    let gates = [
        gate(UnaryOp::Sigmoid, x, 0)?,
        gate(UnaryOp::Sigmoid, &h, 1)?,
        gate(UnaryOp::Sigmoid, x, 2)?,
        gate(UnaryOp::Tanh, &h, 3)?,
    ];
    let c_new = o.add(&o.mul(&c, &gates[0])?, &o.mul(&gates[1], &gates[3])?)?;
    let tanh_c_new = o.unary(UnaryOp::Tanh, &c_new)?;
    Ok((CellValues { x: x.clone(), h, c, p, gates, tanh_c_new }, c_new, b))
}

/// The cell's values from its saved gates `[5, b]` (f, i, o, z, tanh(c')), checked against
/// the operands' width; `op` names the rule kernel in errors.
fn saved_values<B: DenseOps>(
    o: &B,
    op: &'static str,
    x: &B::T,
    state: &B::T,
    params: &B::T,
    gates: &B::T,
) -> Result<(CellValues<B::T>, usize)> {
    let b = lstm_cell_width(op, x.shape(), state.shape(), params.shape())?;
    same_shape(op, "the saved gates", gates.shape(), &[5, b])?;
    let s = rows(o, state, 2, b)?;
    let [f, i, og, z, t] = <[B::T; 5]>::try_from(rows(o, gates, 5, b)?).map_err(|r| crate::OpError::Shape {
        op,
        detail: format!("the saved gates unstacked into {} rows, expected 5", r.len()),
    })?;
    let values = CellValues {
        x: x.clone(),
        h: s[0].clone(),
        c: s[1].clone(),
        p: rows(o, params, 8, b)?,
        gates: [f, i, og, z],
        tanh_c_new: t,
    };
    Ok((values, b))
}

/// [`DenseOps::lstm_cell`] composed from unstack, elementwise ops and stack (the operations
/// of the `lstm` workload's layer, in its order).
pub fn lstm_cell_composed<B: DenseOps>(o: &B, x: &B::T, state: &B::T, params: &B::T) -> Result<B::T> {
    let (v, c_new, _) = cell_values(o, x, state, params)?;
    let h_new = o.mul(&v.gates[2], &v.tanh_c_new)?;
    o.stack(&[h_new, c_new])
}

/// The cell's gates `[5, b]` (f, i, o, z, tanh(c')) composed from other ops: what
/// [`crate::RuleKernels::lstm_cell_gates`] saves, in the same operations as the cell.
pub fn lstm_cell_gates_composed<B: DenseOps>(o: &B, x: &B::T, state: &B::T, params: &B::T) -> Result<B::T> {
    let (v, _, _) = cell_values(o, x, state, params)?;
    let [f, i, og, z] = v.gates;
    o.stack(&[f, i, og, z, v.tanh_c_new])
}

/// `1 - y^2` (tanh's derivative from its value) and `y (1 - y)` (sigmoid's).
fn tanh_slope<B: DenseOps>(o: &B, y: &B::T) -> Result<B::T> {
    o.sub(&o.scalar(1.0, y.dtype())?, &o.unary(UnaryOp::Square, y)?)
}
fn sigmoid_slope<B: DenseOps>(o: &B, y: &B::T) -> Result<B::T> {
    o.mul(y, &o.sub(&o.scalar(1.0, y.dtype())?, y)?)
}

/// The adjoints `(x_bar [b], state_bar [2, b], params_bar [8, b])` of an LSTM cell for the
/// adjoint `g` `[2, b]` of its new state, composed from other ops (module docs: the formulas).
pub fn lstm_cell_vjp_composed<B: DenseOps>(
    o: &B,
    x: &B::T,
    state: &B::T,
    params: &B::T,
    g: &B::T,
) -> Result<(B::T, B::T, B::T)> {
    let (v, _, b) = cell_values(o, x, state, params)?;
    same_shape("lstm_cell_vjp", "the adjoint", g.shape(), &[2, b])?;
    vjp_of_values(o, &v, g, b)
}

/// [`lstm_cell_vjp_composed`] reading the gates saved by the forward sweep instead of
/// recomputing them (the same operations on the same values, so the same bits).
pub fn lstm_cell_vjp_saved_composed<B: DenseOps>(
    o: &B,
    x: &B::T,
    state: &B::T,
    params: &B::T,
    gates: &B::T,
    g: &B::T,
) -> Result<(B::T, B::T, B::T)> {
    let (v, b) = saved_values(o, "lstm_cell_vjp_saved", x, state, params, gates)?;
    same_shape("lstm_cell_vjp_saved", "the adjoint", g.shape(), &[2, b])?;
    vjp_of_values(o, &v, g, b)
}

fn vjp_of_values<B: DenseOps>(o: &B, v: &CellValues<B::T>, g: &B::T, b: usize) -> Result<(B::T, B::T, B::T)> {
    let gr = rows(o, g, 2, b)?;
    let (gh, gc) = (&gr[0], &gr[1]);
    let [f, i, og, z] = &v.gates;
    let t = &v.tanh_c_new;
    let cbar = o.add(gc, &o.mul(&o.mul(gh, og)?, &tanh_slope(o, t)?)?)?;
    let af = o.mul(&o.mul(&cbar, &v.c)?, &sigmoid_slope(o, f)?)?;
    let ai = o.mul(&o.mul(&cbar, z)?, &sigmoid_slope(o, i)?)?;
    let ao = o.mul(&o.mul(gh, t)?, &sigmoid_slope(o, og)?)?;
    let ac = o.mul(&o.mul(&cbar, i)?, &tanh_slope(o, z)?)?;
    let p = &v.p;
    let x_bar = o.add(&o.mul(&af, &p[0])?, &o.mul(&ao, &p[2])?)?;
    let h_bar = o.add(&o.mul(&ai, &p[1])?, &o.mul(&ac, &p[3])?)?;
    let c_bar = o.mul(&cbar, f)?;
    let params_bar = [o.mul(&af, &v.x)?, o.mul(&ai, &v.h)?, o.mul(&ao, &v.x)?, o.mul(&ac, &v.h)?, af, ai, ao, ac];
    Ok((x_bar, o.stack(&[h_bar, c_bar])?, o.stack(&params_bar)?))
}

/// The operands' tangents `(dx [b], dstate [2, b], dparams [8, b])`, checked by `op`.
type Tangents<'a, T> = (&'a T, &'a T, &'a T);

fn check_tangents<T: TensorMeta>(op: &'static str, (dx, dstate, dparams): Tangents<T>, b: usize) -> Result<()> {
    same_shape(op, "the input's tangent", dx.shape(), &[b])?;
    same_shape(op, "the state's tangent", dstate.shape(), &[2, b])?;
    same_shape(op, "the parameters' tangent", dparams.shape(), &[8, b])
}

/// The tangent `[2, b]` of an LSTM cell's new state for tangents of its three operands (each of
/// its operand's shape), composed from other ops (module docs: the formulas).
pub fn lstm_cell_jvp_composed<B: DenseOps>(
    o: &B,
    x: &B::T,
    state: &B::T,
    params: &B::T,
    dx: &B::T,
    dstate: &B::T,
    dparams: &B::T,
) -> Result<B::T> {
    let (v, _, b) = cell_values(o, x, state, params)?;
    check_tangents("lstm_cell_jvp", (dx, dstate, dparams), b)?;
    jvp_of_values(o, &v, (dx, dstate, dparams), b)
}

/// [`lstm_cell_jvp_composed`] reading the gates saved by the primal instead of recomputing
/// them (the same operations on the same values, so the same bits).
#[allow(clippy::too_many_arguments)]
pub fn lstm_cell_jvp_saved_composed<B: DenseOps>(
    o: &B,
    x: &B::T,
    state: &B::T,
    params: &B::T,
    gates: &B::T,
    dx: &B::T,
    dstate: &B::T,
    dparams: &B::T,
) -> Result<B::T> {
    let (v, b) = saved_values(o, "lstm_cell_jvp_saved", x, state, params, gates)?;
    check_tangents("lstm_cell_jvp_saved", (dx, dstate, dparams), b)?;
    jvp_of_values(o, &v, (dx, dstate, dparams), b)
}

fn jvp_of_values<B: DenseOps>(
    o: &B,
    v: &CellValues<B::T>,
    (dx, dstate, dparams): Tangents<B::T>,
    b: usize,
) -> Result<B::T> {
    let ds = rows(o, dstate, 2, b)?;
    let dp = rows(o, dparams, 8, b)?;
    let (dh, dc) = (&ds[0], &ds[1]);
    let p = &v.p;
    // d(input w + bias) = (d input w + input d w) + d bias.
    let pre = |input: &B::T, dinput: &B::T, j: usize| {
        o.add(&o.add(&o.mul(dinput, &p[j])?, &o.mul(input, &dp[j])?)?, &dp[4 + j])
    };
    let [f, i, og, z] = &v.gates;
    let df = o.mul(&pre(&v.x, dx, 0)?, &sigmoid_slope(o, f)?)?;
    let di = o.mul(&pre(&v.h, dh, 1)?, &sigmoid_slope(o, i)?)?;
    let dog = o.mul(&pre(&v.x, dx, 2)?, &sigmoid_slope(o, og)?)?;
    let dz = o.mul(&pre(&v.h, dh, 3)?, &tanh_slope(o, z)?)?;
    let dc_new = o.add(&o.add(&o.mul(dc, f)?, &o.mul(&v.c, &df)?)?, &o.add(&o.mul(&di, z)?, &o.mul(i, &dz)?)?)?;
    let t = &v.tanh_c_new;
    let dt_new = o.mul(&dc_new, &tanh_slope(o, t)?)?;
    let dh_new = o.add(&o.mul(&dog, t)?, &o.mul(og, &dt_new)?)?;
    o.stack(&[dh_new, dc_new])
}

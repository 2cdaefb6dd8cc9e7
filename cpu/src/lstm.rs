//! The CPU's fused LSTM cell: the primal, its adjoints and its tangent, each one pass over the
//! cell's `b` lanes (the formulas and their order of operations are `rules/lstm.rs`'s, so the
//! fused and composed forms round alike). Slices are laid out as the op's operands: state
//! `[h, c]`, params `[w_f, w_i, w_o, w_c, b_f, b_i, b_o, b_c]`, each row `b` long.

use super::simd;
use super::vmath::{sigmoid, tanh};
use crate::Elem;

/// The gates of one lane and `tanh(c')`: what the adjoint and the tangent read.
struct Gates<T> {
    f: T,
    i: T,
    o: T,
    z: T,
    t: T,
}

// The same functions as the CPU's unary ops (`kernels::unary`), inlined, so that the loops
// over the lanes vectorise (with the AVX2 copies below where the CPU has it).
/// Lane `j`'s gates and new cell `c'`.
#[inline(always)]
fn lane<T: Elem>(x: &[T], s: &[T], p: &[T], b: usize, j: usize) -> (Gates<T>, T) {
    let (h, c) = (s[j], s[b + j]);
    let pre = |input: T, g: usize| input * p[g * b + j] + p[(4 + g) * b + j];
    let f = sigmoid(pre(x[j], 0));
    let i = sigmoid(pre(h, 1));
    let o = sigmoid(pre(x[j], 2));
    let z = tanh(pre(h, 3));
    let c_new = c * f + i * z;
    (Gates { f, i, o, z, t: tanh(c_new) }, c_new)
}

/// Lane `j`'s gates as [`cell_gates`] saved them (rows f, i, o, z, tanh(c') of `[5, b]`).
#[inline(always)]
fn saved<T: Elem>(gates: &[T], b: usize, j: usize) -> Gates<T> {
    Gates { f: gates[j], i: gates[b + j], o: gates[2 * b + j], z: gates[3 * b + j], t: gates[4 * b + j] }
}

#[inline(always)]
fn tanh_slope<T: Elem>(y: T) -> T {
    T::one() - y * y
}

#[inline(always)]
fn sigmoid_slope<T: Elem>(y: T) -> T {
    y * (T::one() - y)
}

/// The new state `[h', c']` (`out`: 2b).
pub fn cell<T: Elem>(x: &[T], s: &[T], p: &[T], out: &mut [T]) {
    simd::dispatch!(cell_base | cell_avx2(x, s, p, out))
}

#[inline(always)]
fn cell_base<T: Elem>(x: &[T], s: &[T], p: &[T], out: &mut [T]) {
    let b = x.len();
    for j in 0..b {
        let (l, c_new) = lane(x, s, p, b, j);
        out[j] = l.o * l.t;
        out[b + j] = c_new;
    }
}

/// [`cell`], also writing the gates the adjoint and the tangent read (`gates`: 5b; rows f, i,
/// o, z, tanh(c')). This and the `_saved` kernels below repeat their siblings' signatures on
/// purpose: one kernel with the gates as an `Option` vectorised none of its loops (2.5x slower
/// per cell, with or without gates), and one device function per pair with an `Option` made
/// the LSTM's objective and gradient 2-10% slower.
pub fn cell_gates<T: Elem>(x: &[T], s: &[T], p: &[T], out: &mut [T], gates: &mut [T]) {
    simd::dispatch!(cell_gates_base | cell_gates_avx2(x, s, p, out, gates))
}

#[inline(always)]
fn cell_gates_base<T: Elem>(x: &[T], s: &[T], p: &[T], out: &mut [T], gates: &mut [T]) {
    let b = x.len();
    for j in 0..b {
        let (l, c_new) = lane(x, s, p, b, j);
        out[j] = l.o * l.t;
        out[b + j] = c_new;
        for (r, v) in [l.f, l.i, l.o, l.z, l.t].into_iter().enumerate() {
            gates[r * b + j] = v;
        }
    }
}

/// The adjoints of lane `j` (module docs of `rules/lstm.rs`: the formulas, in this order).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn lane_vjp<T: Elem>(
    l: Gates<T>,
    x: &[T],
    s: &[T],
    p: &[T],
    g: &[T],
    gx: &mut [T],
    gs: &mut [T],
    gp: &mut [T],
    j: usize,
) {
    let b = x.len();
    let (h, c, gh, gc) = (s[j], s[b + j], g[j], g[b + j]);
    let cbar = gc + (gh * l.o) * tanh_slope(l.t);
    let af = (cbar * c) * sigmoid_slope(l.f);
    let ai = (cbar * l.z) * sigmoid_slope(l.i);
    let ao = (gh * l.t) * sigmoid_slope(l.o);
    let ac = (cbar * l.i) * tanh_slope(l.z);
    gx[j] = af * p[j] + ao * p[2 * b + j];
    gs[j] = ai * p[b + j] + ac * p[3 * b + j];
    gs[b + j] = cbar * l.f;
    for (r, v) in [af * x[j], ai * h, ao * x[j], ac * h, af, ai, ao, ac].into_iter().enumerate() {
        gp[r * b + j] = v;
    }
}

/// The adjoints of the input (b), the state (2b) and the parameters (8b) for the adjoint `g`
/// (2b) of the new state.
pub fn cell_vjp<T: Elem>(x: &[T], s: &[T], p: &[T], g: &[T], gx: &mut [T], gs: &mut [T], gp: &mut [T]) {
    simd::dispatch!(cell_vjp_base | cell_vjp_avx2(x, s, p, g, gx, gs, gp))
}

#[inline(always)]
fn cell_vjp_base<T: Elem>(x: &[T], s: &[T], p: &[T], g: &[T], gx: &mut [T], gs: &mut [T], gp: &mut [T]) {
    let b = x.len();
    for j in 0..b {
        lane_vjp(lane(x, s, p, b, j).0, x, s, p, g, gx, gs, gp, j);
    }
}

/// [`cell_vjp`] reading the gates [`cell_gates`] saved.
#[allow(clippy::too_many_arguments)]
pub fn cell_vjp_saved<T: Elem>(
    x: &[T],
    s: &[T],
    p: &[T],
    gates: &[T],
    g: &[T],
    gx: &mut [T],
    gs: &mut [T],
    gp: &mut [T],
) {
    simd::dispatch!(cell_vjp_saved_base | cell_vjp_saved_avx2(x, s, p, gates, g, gx, gs, gp))
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn cell_vjp_saved_base<T: Elem>(
    x: &[T],
    s: &[T],
    p: &[T],
    gates: &[T],
    g: &[T],
    gx: &mut [T],
    gs: &mut [T],
    gp: &mut [T],
) {
    let b = x.len();
    for j in 0..b {
        lane_vjp(saved(gates, b, j), x, s, p, g, gx, gs, gp, j);
    }
}

/// The tangent of lane `j`'s new state (module docs of `rules/lstm.rs`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn lane_jvp<T: Elem>(l: Gates<T>, x: &[T], s: &[T], p: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T], j: usize) {
    let b = x.len();
    let (h, c, dh, dc) = (s[j], s[b + j], ds[j], ds[b + j]);
    let pre = |input: T, dinput: T, g: usize| (dinput * p[g * b + j] + input * dp[g * b + j]) + dp[(4 + g) * b + j];
    let df = pre(x[j], dx[j], 0) * sigmoid_slope(l.f);
    let di = pre(h, dh, 1) * sigmoid_slope(l.i);
    let d_o = pre(x[j], dx[j], 2) * sigmoid_slope(l.o);
    let dz = pre(h, dh, 3) * tanh_slope(l.z);
    let dc_new = (dc * l.f + c * df) + (di * l.z + l.i * dz);
    let dt = dc_new * tanh_slope(l.t);
    out[j] = d_o * l.t + l.o * dt;
    out[b + j] = dc_new;
}

/// The tangent (2b) of the new state for tangents of the input (b), state (2b) and parameters
/// (8b).
pub fn cell_jvp<T: Elem>(x: &[T], s: &[T], p: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T]) {
    simd::dispatch!(cell_jvp_base | cell_jvp_avx2(x, s, p, dx, ds, dp, out))
}

#[inline(always)]
fn cell_jvp_base<T: Elem>(x: &[T], s: &[T], p: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T]) {
    let b = x.len();
    for j in 0..b {
        lane_jvp(lane(x, s, p, b, j).0, x, s, p, dx, ds, dp, out, j);
    }
}

/// [`cell_jvp`] reading the gates [`cell_gates`] saved.
#[allow(clippy::too_many_arguments)]
pub fn cell_jvp_saved<T: Elem>(x: &[T], s: &[T], p: &[T], gates: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T]) {
    simd::dispatch!(cell_jvp_saved_base | cell_jvp_saved_avx2(x, s, p, gates, dx, ds, dp, out))
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn cell_jvp_saved_base<T: Elem>(x: &[T], s: &[T], p: &[T], gates: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T]) {
    let b = x.len();
    for j in 0..b {
        lane_jvp(saved(gates, b, j), x, s, p, dx, ds, dp, out, j);
    }
}

simd::wider!(cell_base, cell_avx2, <T: Elem>(x: &[T], s: &[T], p: &[T], out: &mut [T]));
simd::wider!(cell_gates_base, cell_gates_avx2, <T: Elem>(x: &[T], s: &[T], p: &[T], out: &mut [T], gates: &mut [T]));
simd::wider!(cell_vjp_base, cell_vjp_avx2, <T: Elem>(x: &[T], s: &[T], p: &[T], g: &[T], gx: &mut [T], gs: &mut [T], gp: &mut [T]));
simd::wider!(cell_vjp_saved_base, cell_vjp_saved_avx2, <T: Elem>(x: &[T], s: &[T], p: &[T], gates: &[T], g: &[T], gx: &mut [T], gs: &mut [T], gp: &mut [T]));
simd::wider!(cell_jvp_base, cell_jvp_avx2, <T: Elem>(x: &[T], s: &[T], p: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T]));
simd::wider!(cell_jvp_saved_base, cell_jvp_saved_avx2, <T: Elem>(x: &[T], s: &[T], p: &[T], gates: &[T], dx: &[T], ds: &[T], dp: &[T], out: &mut [T]));

/// The CPU device's LSTM-cell ops (called from its `DenseOps` and `RuleKernels`).
pub(super) mod device {
    use super::super::{Cpu, CpuElem, CpuTensor};
    use crate::checks::same_dtype;
    use crate::shape::{lstm_cell_width, same_shape};
    use crate::{DType, Result};

    fn width(op: &'static str, x: &CpuTensor, s: &CpuTensor, p: &CpuTensor) -> Result<(DType, usize)> {
        let b = lstm_cell_width(op, &x.shape, &s.shape, &p.shape)?;
        same_dtype(op, x, s)?;
        Ok((same_dtype(op, x, p)?, b))
    }

    fn cell_t<T: CpuElem>(c: &Cpu, x: &CpuTensor, s: &CpuTensor, p: &CpuTensor, b: usize) -> Result<CpuTensor> {
        let mut out = c.pool().take::<T>(2 * b);
        super::cell(x.slice::<T>()?, s.slice::<T>()?, p.slice::<T>()?, &mut out);
        Ok(c.wrap(out, vec![2, b]))
    }

    pub fn lstm_cell_op(c: &Cpu, x: &CpuTensor, s: &CpuTensor, p: &CpuTensor) -> Result<CpuTensor> {
        let (dt, b) = width("lstm_cell", x, s, p)?;
        match dt {
            DType::F32 => cell_t::<f32>(c, x, s, p, b),
            DType::F64 => cell_t::<f64>(c, x, s, p, b),
        }
    }

    fn gates_t<T: CpuElem>(
        c: &Cpu,
        x: &CpuTensor,
        s: &CpuTensor,
        p: &CpuTensor,
        b: usize,
    ) -> Result<(CpuTensor, Option<CpuTensor>)> {
        let (mut out, mut gates) = (c.pool().take::<T>(2 * b), c.pool().take::<T>(5 * b));
        super::cell_gates(x.slice::<T>()?, s.slice::<T>()?, p.slice::<T>()?, &mut out, &mut gates);
        Ok((c.wrap(out, vec![2, b]), Some(c.wrap(gates, vec![5, b]))))
    }

    pub fn lstm_cell_gates_op(
        c: &Cpu,
        x: &CpuTensor,
        s: &CpuTensor,
        p: &CpuTensor,
    ) -> Result<(CpuTensor, Option<CpuTensor>)> {
        let (dt, b) = width("lstm_cell", x, s, p)?;
        match dt {
            DType::F32 => gates_t::<f32>(c, x, s, p, b),
            DType::F64 => gates_t::<f64>(c, x, s, p, b),
        }
    }

    /// Checks the saved gates of a `*_saved` kernel: `[5, b]`, the operands' dtype.
    fn check_gates(op: &'static str, x: &CpuTensor, gates: &CpuTensor, b: usize) -> Result<()> {
        same_dtype(op, x, gates)?;
        same_shape(op, "the saved gates", &gates.shape, &[5, b])
    }

    type Adjoints = (CpuTensor, CpuTensor, CpuTensor);

    fn vjp_saved_t<T: CpuElem>(c: &Cpu, [x, s, p, gates, g]: [&CpuTensor; 5], b: usize) -> Result<Adjoints> {
        let (mut gx, mut gs, mut gp) = (c.pool().take::<T>(b), c.pool().take::<T>(2 * b), c.pool().take::<T>(8 * b));
        let (xs, ss, ps) = (x.slice::<T>()?, s.slice::<T>()?, p.slice::<T>()?);
        super::cell_vjp_saved(xs, ss, ps, gates.slice::<T>()?, g.slice::<T>()?, &mut gx, &mut gs, &mut gp);
        Ok((c.wrap(gx, vec![b]), c.wrap(gs, vec![2, b]), c.wrap(gp, vec![8, b])))
    }

    pub fn lstm_cell_vjp_saved_op(c: &Cpu, operands: [&CpuTensor; 5]) -> Result<Adjoints> {
        let [x, s, p, gates, g] = operands;
        let op = "lstm_cell_vjp_saved";
        let (dt, b) = width(op, x, s, p)?;
        check_gates(op, x, gates, b)?;
        same_dtype(op, x, g)?;
        same_shape(op, "the adjoint", &g.shape, &[2, b])?;
        match dt {
            DType::F32 => vjp_saved_t::<f32>(c, operands, b),
            DType::F64 => vjp_saved_t::<f64>(c, operands, b),
        }
    }

    fn vjp_t<T: CpuElem>(
        c: &Cpu,
        x: &CpuTensor,
        s: &CpuTensor,
        p: &CpuTensor,
        g: &CpuTensor,
        b: usize,
    ) -> Result<Adjoints> {
        let (mut gx, mut gs, mut gp) = (c.pool().take::<T>(b), c.pool().take::<T>(2 * b), c.pool().take::<T>(8 * b));
        let (xs, ss, ps, gv) = (x.slice::<T>()?, s.slice::<T>()?, p.slice::<T>()?, g.slice::<T>()?);
        super::cell_vjp(xs, ss, ps, gv, &mut gx, &mut gs, &mut gp);
        Ok((c.wrap(gx, vec![b]), c.wrap(gs, vec![2, b]), c.wrap(gp, vec![8, b])))
    }

    pub fn lstm_cell_vjp_op(c: &Cpu, x: &CpuTensor, s: &CpuTensor, p: &CpuTensor, g: &CpuTensor) -> Result<Adjoints> {
        let (dt, b) = width("lstm_cell_vjp", x, s, p)?;
        same_dtype("lstm_cell_vjp", x, g)?;
        same_shape("lstm_cell_vjp", "the adjoint", &g.shape, &[2, b])?;
        match dt {
            DType::F32 => vjp_t::<f32>(c, x, s, p, g, b),
            DType::F64 => vjp_t::<f64>(c, x, s, p, g, b),
        }
    }

    /// The operands and their tangents, in the op's order.
    pub type Duals<'a> = [&'a CpuTensor; 6];

    fn jvp_t<T: CpuElem>(c: &Cpu, [x, s, p, dx, ds, dp]: Duals, b: usize) -> Result<CpuTensor> {
        let mut out = c.pool().take::<T>(2 * b);
        let (xs, ss, ps) = (x.slice::<T>()?, s.slice::<T>()?, p.slice::<T>()?);
        super::cell_jvp(xs, ss, ps, dx.slice::<T>()?, ds.slice::<T>()?, dp.slice::<T>()?, &mut out);
        Ok(c.wrap(out, vec![2, b]))
    }

    /// The operands' width and dtype, their tangents checked against them.
    fn check_duals(op: &'static str, [x, s, p, dx, ds, dp]: Duals) -> Result<(DType, usize)> {
        let (dt, b) = width(op, x, s, p)?;
        for (what, t, shape) in [
            ("the input's tangent", dx, &[b][..]),
            ("the state's tangent", ds, &[2, b][..]),
            ("the parameters' tangent", dp, &[8, b][..]),
        ] {
            same_dtype(op, x, t)?;
            same_shape(op, what, &t.shape, shape)?;
        }
        Ok((dt, b))
    }

    pub fn lstm_cell_jvp_op(c: &Cpu, duals: Duals) -> Result<CpuTensor> {
        match check_duals("lstm_cell_jvp", duals)? {
            (DType::F32, b) => jvp_t::<f32>(c, duals, b),
            (DType::F64, b) => jvp_t::<f64>(c, duals, b),
        }
    }

    fn jvp_saved_t<T: CpuElem>(
        c: &Cpu,
        [x, s, p, dx, ds, dp]: Duals,
        gates: &CpuTensor,
        b: usize,
    ) -> Result<CpuTensor> {
        let mut out = c.pool().take::<T>(2 * b);
        let (xs, ss, ps, gs) = (x.slice::<T>()?, s.slice::<T>()?, p.slice::<T>()?, gates.slice::<T>()?);
        super::cell_jvp_saved(xs, ss, ps, gs, dx.slice::<T>()?, ds.slice::<T>()?, dp.slice::<T>()?, &mut out);
        Ok(c.wrap(out, vec![2, b]))
    }

    pub fn lstm_cell_jvp_saved_op(c: &Cpu, duals: Duals, gates: &CpuTensor) -> Result<CpuTensor> {
        let op = "lstm_cell_jvp_saved";
        let (dt, b) = check_duals(op, duals)?;
        check_gates(op, duals[0], gates, b)?;
        match dt {
            DType::F32 => jvp_saved_t::<f32>(c, duals, gates, b),
            DType::F64 => jvp_saved_t::<f64>(c, duals, gates, b),
        }
    }
}

//! Hand tracking (HT) as ADBench defines it (`hand_objective` in ADBench's C++, GradBench's
//! `ht.hpp`), simple and complicated, with its Jacobian in GradBench's shape.
//!
//! The pose theta (26 numbers) maps to per-bone Euler angles: bone i reads column i + 3 of
//! ADBench's 3 x (bones + 3) `pose_params`, whose columns 0 and 2 are the global rotation and
//! translation and whose columns 5 to 24 take, per finger, x and z of the knuckle bone then x
//! of the next two bones, one bone skipped between fingers (so the wrist, each finger's first
//! bone and the forearm stay at zero). Then:
//!
//! ```text
//! R_i          = Rz(z_i) Rx(x_i)                      (ADBench's Rz Ry Rx with y = 0)
//! relative_i   = base_relative_i [R_i 0; 0 1]
//! absolute_i   = absolute_parent(i) relative_i        (relative_i at a root)
//! transform_i  = absolute_i inverse_base_absolute_i
//! vertex_v     = sum_i weight_vi (transform_i base_position_v)[0..3]   (x negated if mirrored)
//! posed_v      = G vertex_v + t                       G = angle_axis(theta[0..3]) (identity
//!                                                     below a norm of 1e-4), t = theta[3..6]
//! simple:      err_p = point_p - posed_(corr p)
//! complicated: err_p = point_p - (u0 posed_a + u1 posed_b + (1 - u0 - u1) posed_c),
//!              (a, b, c) = triangle corr p, (u0, u1) = us_p
//! ```
//!
//! The outputs are 3 per point (x, y, z of each point in turn). On the engine the bones are
//! vectors (the Euler angles are a constant selection matrix times theta), the chain is pointer
//! doubling (3 batched products for ADBench's hand instead of one per bone), and the skinning blends the transforms per vertex first (weights x
//! transforms, one matrix product) and applies each blend to its vertex (a batched product):
//! the same sums in another order than ADBench's loop over bones.
//!
//! GradBench's `jacobian` is 3c rows of, for the complicated variant, d/du0 and d/du1 of the
//! point's own coordinates (its `us` block of the full Jacobian is block diagonal, so two
//! columns hold it), then the 26 columns of theta. adgauge computes it by forward mode: one
//! sweep per theta coordinate and one per `us` column (tangent 1 on every point's u0, then on
//! every u1: each point's residuals depend on its own us only). [`host_objective`] is an
//! independent f64 model in ADBench's own order (per-bone 4x4 matrices, the loop over bones),
//! differentiated by host dual numbers ([`host_jacobian`]): the reference of `check`.

use std::ops::{Add, Div, Mul, Neg, Sub};
use std::sync::Arc;

use adgauge_backends::{
    AnyDevice, BinaryOp, Cpu, DType, Device, Forward, OpError, Ops, OutOfRange, Result, Reverse, TensorMeta, UnaryOp,
    with_device,
};
use adgauge_datasets::ht::{HandInput, HandModel, N_THETA};
use serde_json::Value as Json;

use crate::json::{format_array, format_rows, kind, parse_number};
use crate::validate::CheckedInput;
use crate::workload::{
    CheckKind, CheckSettings, Comparison, EvalOption, EvalRequest, FlatFn, Footprint, FullJacobian, GradbenchCall,
    Mode, ModeTraces, ParamKind, ParamSpec, Params, Prepared, Problem, Remote, RemoteCall, Validation, Value, WResult,
    Workload, WorkloadError, rounded, sizes,
};

/// Below this norm of the global rotation ADBench takes the identity.
const SMALL_ROTATION: f64 = 1e-4;

/// The model's constants on one engine.
#[derive(Clone)]
struct Consts<T> {
    /// Bones x 26: row i selects bone i's x (resp. z) Euler angle from theta.
    select_x: T,
    select_z: T,
    /// Bones x 4 x 4.
    base_relatives: T,
    inverse_base_absolutes: T,
    /// Vertices x bones.
    weights: T,
    /// Vertices x 4 x 1.
    base_positions: T,
    /// Bones zeros and ones (the constant entries of the posed rotations).
    zeros: T,
    ones: T,
    /// Single elements 0 and 1.
    zero: T,
    one: T,
    /// x sign per homogeneous coordinate (4 x vertices), when the model is mirrored.
    mirror: Option<T>,
    /// Points x 3, flat.
    points: T,
    /// Per round of the chain's pointer doubling (bones x 4 x 4): 1 where a bone's transform is
    /// already its absolute one (it keeps it), else 0.
    chain_done: Vec<T>,
}

impl<T> Consts<T> {
    fn map<U>(&self, f: impl Fn(&T) -> U) -> Consts<U> {
        Consts {
            select_x: f(&self.select_x),
            select_z: f(&self.select_z),
            base_relatives: f(&self.base_relatives),
            inverse_base_absolutes: f(&self.inverse_base_absolutes),
            weights: f(&self.weights),
            base_positions: f(&self.base_positions),
            zeros: f(&self.zeros),
            ones: f(&self.ones),
            zero: f(&self.zero),
            one: f(&self.one),
            mirror: self.mirror.as_ref().map(&f),
            points: f(&self.points),
            chain_done: self.chain_done.iter().map(&f).collect(),
        }
    }
}

/// The index tensors of a problem (shared by every engine over one device).
struct Indices<I> {
    /// Bones x 16: the posed rotations' 16 stacked components (16 x bones) read bone by bone.
    transpose: I,
    /// theta[0], theta[1], theta[2] (one each) and theta[3..6].
    rotation: [I; 3],
    translation: I,
    /// 3 x vertices: the first three homogeneous coordinates of every vertex.
    xyz: I,
    /// Per point and coordinate (3c): the coordinate of its vertex (simple, one) or of its
    /// triangle's three vertices (complicated).
    corners: Vec<I>,
    /// Per point and coordinate (3c): the point's u0 and u1 (complicated).
    us: Option<[I; 2]>,
    /// Per round of the chain's pointer doubling (16 x bones): each bone's current ancestor's
    /// transform, read entry by entry (a bone already done reads its own).
    chain_up: Vec<I>,
}

/// An HT problem on an engine's device.
pub struct HtInputs<O: Ops> {
    pub npts: usize,
    pub complicated: bool,
    pub theta: O::T,
    /// Points x 2, flat (complicated).
    pub us: Option<O::T>,
    consts: Consts<O::T>,
    index: Indices<O::I>,
    bones: usize,
}

/// The posed rotation's 16 entries per bone as the stacked rows are built: `[R 0; 0 1]`.
const POSED: usize = 16;

/// Puts a problem on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, h: &HandInput, dtype: DType) -> Result<HtInputs<O>> {
    let bad = |detail: String| OpError::Shape { op: "ht upload", detail };
    let m = &h.model;
    m.check_sizes().map_err(bad)?;
    let (nb, nv, c) = (m.bones(), m.vertices(), h.points());
    let complicated = h.complicated();
    if h.theta.len() != N_THETA || h.points.len() != 3 * c || (complicated && h.us.len() != 2 * c) {
        return Err(bad(format!(
            "theta {}, points {}, us {} numbers for {c} points",
            h.theta.len(),
            h.points.len(),
            h.us.len()
        )));
    }
    let (mut select_x, mut select_z) = (vec![0.0; nb * N_THETA], vec![0.0; nb * N_THETA]);
    for (bone, x, z) in pose_map() {
        select_x[bone * N_THETA + x] = 1.0;
        if let Some(z) = z {
            select_z[bone * N_THETA + z] = 1.0;
        }
    }
    let mut mirror = None;
    if m.is_mirrored {
        let signs: Vec<f64> = (0..4 * nv).map(|k| if k % 4 == 0 { -1.0 } else { 1.0 }).collect();
        mirror = Some(o.tensor(&signs, &[4 * nv], dtype)?);
    }
    // Relative to absolute transforms by pointer doubling: each round multiplies every bone's
    // transform by its current ancestor's from the left and doubles the distance to the next
    // ancestor, so ceil(log2(depth + 1)) rounds (3 for ADBench's hand) replace the sequential
    // chain of one product per bone.
    let mut ancestor: Vec<Option<usize>> = m.parents.iter().map(|&p| usize::try_from(p).ok()).collect();
    let (mut chain_up, mut chain_done) = (Vec::new(), Vec::new());
    while ancestor.iter().any(Option::is_some) {
        let up: Vec<i64> = (0..16 * nb).map(|k| (16 * ancestor[k / 16].unwrap_or(k / 16) + k % 16) as i64).collect();
        let done: Vec<f64> = (0..16 * nb).map(|k| if ancestor[k / 16].is_none() { 1.0 } else { 0.0 }).collect();
        chain_up.push(o.index(&up)?);
        chain_done.push(o.tensor(&done, &[nb, 4, 4], dtype)?);
        ancestor = ancestor.iter().map(|a| a.and_then(|q| ancestor[q])).collect();
    }
    let consts = Consts {
        select_x: o.tensor(&select_x, &[nb, N_THETA], dtype)?,
        select_z: o.tensor(&select_z, &[nb, N_THETA], dtype)?,
        base_relatives: o.tensor(&m.base_relatives, &[nb, 4, 4], dtype)?,
        inverse_base_absolutes: o.tensor(&m.inverse_base_absolutes, &[nb, 4, 4], dtype)?,
        weights: o.tensor(&m.weights, &[nv, nb], dtype)?,
        base_positions: o.tensor(&m.base_positions, &[nv, 4, 1], dtype)?,
        zeros: o.full(&[nb], 0.0, dtype)?,
        ones: o.full(&[nb], 1.0, dtype)?,
        zero: o.scalar(0.0, dtype)?,
        one: o.scalar(1.0, dtype)?,
        mirror,
        points: o.tensor(&h.points, &[3 * c], dtype)?,
        chain_done,
    };
    let per_point =
        |f: &dyn Fn(usize, usize) -> usize| -> Vec<i64> { (0..3 * c).map(|k| f(k / 3, k % 3) as i64).collect() };
    let corners = if complicated {
        let tri = |i: usize| m.triangles.get(h.correspondences[i]).copied();
        if let Some(i) = (0..c).find(|&i| tri(i).is_none()) {
            return Err(bad(format!("correspondence {i}: triangle {} of {}", h.correspondences[i], m.triangles.len())));
        }
        (0..3).map(|k| o.index(&per_point(&|i, j| 3 * tri(i).map_or(0, |t| t[k]) + j))).collect::<Result<Vec<_>>>()?
    } else {
        if let Some(i) = (0..c).find(|&i| h.correspondences[i] >= nv) {
            return Err(bad(format!("correspondence {i}: vertex {} of {nv}", h.correspondences[i])));
        }
        vec![o.index(&per_point(&|i, j| 3 * h.correspondences[i] + j))?]
    };
    let us = if complicated {
        Some([o.index(&per_point(&|i, _| 2 * i))?, o.index(&per_point(&|i, _| 2 * i + 1))?])
    } else {
        None
    };
    let index = Indices {
        transpose: o.index(&(0..nb * POSED).map(|k| ((k % POSED) * nb + k / POSED) as i64).collect::<Vec<_>>())?,
        rotation: [o.index(&[0])?, o.index(&[1])?, o.index(&[2])?],
        translation: o.index(&[3, 4, 5])?,
        xyz: o.index(&(0..3 * nv).map(|k| (4 * (k / 3) + k % 3) as i64).collect::<Vec<_>>())?,
        corners,
        us,
        chain_up,
    };
    Ok(HtInputs {
        npts: c,
        complicated,
        theta: o.tensor(&h.theta, &[N_THETA], dtype)?,
        us: if complicated { Some(o.tensor(&h.us, &[2 * c], dtype)?) } else { None },
        consts,
        index,
        bones: nb,
    })
}

/// ADBench's `to_pose_params` as (bone, theta index of its x angle, of its z angle).
fn pose_map() -> Vec<(usize, usize, Option<usize>)> {
    let mut out = Vec::new();
    let (mut t, mut bone) = (6, 2);
    for _finger in 0..5 {
        for joint in 0..3 {
            let z = (joint == 0).then_some(t + 1);
            out.push((bone, t, z));
            t += if joint == 0 { 2 } else { 1 };
            bone += 1;
        }
        bone += 1;
    }
    out
}

/// The residuals (3c, point by point) on engine `P` at `theta` (26) and `us` (2c, complicated).
fn residuals_on<P: Ops>(
    p: &P,
    c: &Consts<P::T>,
    ix: &Indices<P::I>,
    nb: usize,
    theta: &P::T,
    us: Option<&P::T>,
) -> Result<P::T> {
    let un = |op: UnaryOp, x: &P::T| p.unary(op, x);
    // Per-bone Euler angles and the posed rotations [Rz Rx 0; 0 1].
    let column = p.reshape(theta, &[N_THETA, 1])?;
    let angle = |select: &P::T| -> Result<P::T> { p.reshape(&p.matmul(select, false, &column, false)?, &[nb]) };
    let (ax, az) = (angle(&c.select_x)?, angle(&c.select_z)?);
    let (cx, sx, cz, sz) =
        (un(UnaryOp::Cos, &ax)?, un(UnaryOp::Sin, &ax)?, un(UnaryOp::Cos, &az)?, un(UnaryOp::Sin, &az)?);
    let (z, o) = (&c.zeros, &c.ones);
    let rows = [
        cz.clone(),
        p.neg(&p.mul(&sz, &cx)?)?,
        p.mul(&sz, &sx)?,
        z.clone(),
        sz.clone(),
        p.mul(&cz, &cx)?,
        p.neg(&p.mul(&cz, &sx)?)?,
        z.clone(),
        z.clone(),
        sx,
        cx,
        z.clone(),
        z.clone(),
        z.clone(),
        z.clone(),
        o.clone(),
    ];
    let stacked = p.reshape(&p.stack(&rows)?, &[POSED * nb])?;
    let posed = p.reshape(&p.gather(&stacked, &ix.transpose, OutOfRange::Error)?, &[nb, 4, 4])?;
    let mut absolutes = p.matmul(&c.base_relatives, false, &posed, false)?;
    for (up, done) in ix.chain_up.iter().zip(&c.chain_done) {
        let ancestors =
            p.reshape(&p.gather(&p.reshape(&absolutes, &[16 * nb])?, up, OutOfRange::Error)?, &[nb, 4, 4])?;
        absolutes = p.select(done, &absolutes, &p.matmul(&ancestors, false, &absolutes, false)?)?;
    }
    let transforms = p.matmul(&absolutes, false, &c.inverse_base_absolutes, false)?;
    // Linear blend skinning: per vertex the weighted transform, applied to the vertex.
    let nv = c.weights.shape()[0];
    let blended = p.matmul(&c.weights, false, &p.reshape(&transforms, &[nb, 16])?, false)?;
    let skinned = p.matmul(&p.reshape(&blended, &[nv, 4, 4])?, false, &c.base_positions, false)?;
    let mut skinned = p.reshape(&skinned, &[4 * nv])?;
    if let Some(signs) = &c.mirror {
        skinned = p.mul(&skinned, signs)?;
    }
    let xyz = p.reshape(&p.gather(&skinned, &ix.xyz, OutOfRange::Error)?, &[nv, 3])?;
    // The global rotation (angle-axis; the identity below SMALL_ROTATION) and translation.
    let global = global_rotation(p, c, ix, theta)?;
    let translation = p.reshape(&p.gather(theta, &ix.translation, OutOfRange::Error)?, &[1, 3])?;
    let posed_vertices = p.broadcast_binary(BinaryOp::Add, &p.matmul(&xyz, false, &global, true)?, &translation)?;
    let posed_vertices = p.reshape(&posed_vertices, &[3 * nv])?;
    let corner = |k: usize| p.gather(&posed_vertices, &ix.corners[k], OutOfRange::Error);
    let hand_points = match (us, &ix.us) {
        (Some(us), Some([i0, i1])) => {
            let u0 = p.gather(us, i0, OutOfRange::Error)?;
            let u1 = p.gather(us, i1, OutOfRange::Error)?;
            let u2 = p.sub(&p.sub(&c.one, &u0)?, &u1)?;
            p.add(&p.add(&p.mul(&u0, &corner(0)?)?, &p.mul(&u1, &corner(1)?)?)?, &p.mul(&u2, &corner(2)?)?)?
        }
        _ => corner(0)?,
    };
    p.sub(&c.points, &hand_points)
}

/// ADBench's `angle_axis_to_rotation_matrix` of theta[0..3] (3 x 3): both branches evaluated and
/// one selected, the rotation branch at a norm of 1 where the norm is small (its value is
/// discarded there, and a division by zero would put NaN into the adjoints).
fn global_rotation<P: Ops>(p: &P, c: &Consts<P::T>, ix: &Indices<P::I>, theta: &P::T) -> Result<P::T> {
    let [a0, a1, a2] = [0, 1, 2].map(|k| p.gather(theta, &ix.rotation[k], OutOfRange::Error));
    let (a0, a1, a2) = (a0?, a1?, a2?);
    let sq = |x: &P::T| p.unary(UnaryOp::Square, x);
    let norm = p.unary(UnaryOp::Sqrt, &p.add(&p.add(&sq(&a0)?, &sq(&a1)?)?, &sq(&a2)?)?)?;
    let small = p.binary(BinaryOp::Lt, &norm, &p.scalar(SMALL_ROTATION, norm.dtype())?)?;
    let norm = p.select(&small, &c.one, &norm)?;
    let (x, y, z) = (p.div(&a0, &norm)?, p.div(&a1, &norm)?, p.div(&a2, &norm)?);
    let (s, co) = (p.unary(UnaryOp::Sin, &norm)?, p.unary(UnaryOp::Cos, &norm)?);
    let omc = p.sub(&c.one, &co)?;
    let diag = |u: &P::T| -> Result<P::T> {
        let uu = p.mul(u, u)?;
        p.add(&uu, &p.mul(&p.sub(&c.one, &uu)?, &co)?)
    };
    // u v (1 - c) + sign w s
    let off = |u: &P::T, v: &P::T, w: &P::T, plus: bool| -> Result<P::T> {
        let a = p.mul(&p.mul(u, v)?, &omc)?;
        let b = p.mul(w, &s)?;
        if plus { p.add(&a, &b) } else { p.sub(&a, &b) }
    };
    let entries = [
        diag(&x)?,
        off(&x, &y, &z, false)?,
        off(&x, &z, &y, true)?,
        off(&x, &y, &z, true)?,
        diag(&y)?,
        off(&y, &z, &x, false)?,
        off(&x, &z, &y, false)?,
        off(&z, &y, &x, true)?,
        diag(&z)?,
    ];
    let picked = entries
        .iter()
        .enumerate()
        .map(|(k, e)| p.select(&small, if k % 4 == 0 { &c.one } else { &c.zero }, e))
        .collect::<Result<Vec<_>>>()?;
    p.reshape(&p.stack(&picked)?, &[3, 3])
}

impl<O: Ops> HtInputs<O> {
    /// Inputs of the whole function (theta, then us) and outputs (3c).
    pub fn sizes(&self) -> (usize, usize) {
        (N_THETA + if self.complicated { 2 * self.npts } else { 0 }, 3 * self.npts)
    }

    /// Columns of GradBench's Jacobian: (2 if complicated) + 26.
    pub fn jacobian_cols(&self) -> usize {
        N_THETA + if self.complicated { 2 } else { 0 }
    }

    fn residuals_lifted<P: Ops<I = O::I>>(
        &self,
        p: &P,
        lift: impl Fn(&O::T) -> P::T,
        theta: &P::T,
        us: Option<&P::T>,
    ) -> Result<P::T> {
        residuals_on(p, &self.consts.map(lift), &self.index, self.bones, theta, us)
    }
}

/// The residuals on the device (3c).
pub fn objective<B: Ops>(b: &B, x: &HtInputs<B>) -> Result<Vec<f64>> {
    b.to_vec(&residuals_on(b, &x.consts, &x.index, x.bones, &x.theta, x.us.as_ref())?)
}

/// The residuals and GradBench's Jacobian (3c rows of [d/du0, d/du1 (complicated),] d/dtheta,
/// row-major) by forward sweeps: one per theta coordinate, one per us column.
pub fn jacobian_forward<B: Ops>(b: &B, x: &HtInputs<B>) -> Result<(Vec<f64>, Vec<f64>)> {
    let dt = x.theta.dtype();
    let (nrows, ncols) = (3 * x.npts, x.jacobian_cols());
    let mut jac = vec![0.0; nrows * ncols];
    let mut values = Vec::new();
    let first = ncols - N_THETA;
    let mut sweep = |col: usize, theta_t: Option<Vec<f64>>, us_t: Option<Vec<f64>>| -> Result<()> {
        let f = Forward::new(b.clone());
        let theta = match theta_t {
            Some(t) => f.dual(x.theta.clone(), b.tensor(&t, &[N_THETA], dt)?)?,
            None => f.lift(x.theta.clone()),
        };
        let us = match (&x.us, us_t) {
            (Some(u), Some(t)) => Some(f.dual(u.clone(), b.tensor(&t, &[t.len()], dt)?)?),
            (Some(u), None) => Some(f.lift(u.clone())),
            (None, _) => None,
        };
        let out = x.residuals_lifted(&f, |t| f.lift(t.clone()), &theta, us.as_ref())?;
        let d = b.to_vec(&f.tangent(&out)?)?;
        for (r, v) in d.into_iter().enumerate() {
            jac[r * ncols + col] = v;
        }
        if values.is_empty() {
            values = b.to_vec(f.primal(&out))?;
        }
        Ok(())
    };
    if x.complicated {
        for k in 0..2 {
            let t: Vec<f64> = (0..2 * x.npts).map(|i| if i % 2 == k { 1.0 } else { 0.0 }).collect();
            sweep(k, None, Some(t))?;
        }
    }
    for k in 0..N_THETA {
        let mut t = vec![0.0; N_THETA];
        t[k] = 1.0;
        sweep(first + k, Some(t), None)?;
    }
    Ok((values, jac))
}

/// J^T w of the whole function (theta, then us) by one reverse sweep.
pub fn vjp<B: Ops>(b: &B, x: &HtInputs<B>, w: &[f64]) -> Result<Vec<f64>> {
    let dt = x.theta.dtype();
    if w.len() != 3 * x.npts {
        return Err(OpError::Shape { op: "ht vjp", detail: format!("{} adjoints, expected {}", w.len(), 3 * x.npts) });
    }
    let r = Reverse::new(b.clone());
    let theta = r.var(x.theta.clone());
    let us = x.us.as_ref().map(|u| r.var(u.clone()));
    let out = x.residuals_lifted(&r, |t| r.lift(t.clone()), &theta, us.as_ref())?;
    let grads = r.backward(&out, b.tensor(w, &[w.len()], dt)?)?;
    let mut res = b.to_vec(&grads.get_or_zeros(b, &theta)?)?;
    if let Some(u) = &us {
        res.extend(b.to_vec(&grads.get_or_zeros(b, u)?)?);
    }
    Ok(res)
}

/// The gradient of half the squared residuals (J^T err, Gauss-Newton's gradient) by one reverse
/// sweep: the timed `vjp` mode.
pub fn gradient<B: Ops>(b: &B, x: &HtInputs<B>) -> Result<Vec<f64>> {
    let r = Reverse::new(b.clone());
    let theta = r.var(x.theta.clone());
    let us = x.us.as_ref().map(|u| r.var(u.clone()));
    let out = x.residuals_lifted(&r, |t| r.lift(t.clone()), &theta, us.as_ref())?;
    let grads = r.backward(&out, out.value().clone())?;
    let mut res = b.to_vec(&grads.get_or_zeros(b, &theta)?)?;
    if let Some(u) = &us {
        res.extend(b.to_vec(&grads.get_or_zeros(b, u)?)?);
    }
    Ok(res)
}

/// J v of the whole function (v: theta, then us) by one forward sweep.
pub fn jvp<B: Ops>(b: &B, x: &HtInputs<B>, v: &[f64]) -> Result<Vec<f64>> {
    let dt = x.theta.dtype();
    let (n_in, _) = x.sizes();
    if v.len() != n_in {
        return Err(OpError::Shape { op: "ht jvp", detail: format!("{} tangents, expected {n_in}", v.len()) });
    }
    let f = Forward::new(b.clone());
    let theta = f.dual(x.theta.clone(), b.tensor(&v[..N_THETA], &[N_THETA], dt)?)?;
    let us = match &x.us {
        Some(u) => Some(f.dual(u.clone(), b.tensor(&v[N_THETA..], &[n_in - N_THETA], dt)?)?),
        None => None,
    };
    let out = x.residuals_lifted(&f, |t| f.lift(t.clone()), &theta, us.as_ref())?;
    b.to_vec(&f.tangent(&out)?)
}

/// GradBench's compressed Jacobian (3c x ncols, row-major) as the full one (3c x (26 + 2c)):
/// the us columns placed on the block diagonal.
pub fn full_jacobian(jac: &[f64], npts: usize, complicated: bool) -> Vec<f64> {
    let ncols = N_THETA + if complicated { 2 } else { 0 };
    let n_in = N_THETA + if complicated { 2 * npts } else { 0 };
    let first = ncols - N_THETA;
    let mut out = vec![0.0; 3 * npts * n_in];
    for r in 0..3 * npts {
        for k in 0..N_THETA {
            out[r * n_in + k] = jac[r * ncols + first + k];
        }
        if complicated {
            let i = r / 3;
            out[r * n_in + N_THETA + 2 * i] = jac[r * ncols];
            out[r * n_in + N_THETA + 2 * i + 1] = jac[r * ncols + 1];
        }
    }
    out
}

// ---- the independent host model ----

/// What [`host_objective`] computes in: f64, or a dual number.
pub trait Scalar:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    fn cst(x: f64) -> Self;
    fn value(self) -> f64;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn sqrt(self) -> Self;
}

impl Scalar for f64 {
    fn cst(x: f64) -> f64 {
        x
    }
    fn value(self) -> f64 {
        self
    }
    fn sin(self) -> f64 {
        f64::sin(self)
    }
    fn cos(self) -> f64 {
        f64::cos(self)
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
}

/// A dual number: a value and one directional derivative.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dual1 {
    pub v: f64,
    pub d: f64,
}

impl Add for Dual1 {
    type Output = Dual1;
    fn add(self, o: Dual1) -> Dual1 {
        Dual1 { v: self.v + o.v, d: self.d + o.d }
    }
}
impl Sub for Dual1 {
    type Output = Dual1;
    fn sub(self, o: Dual1) -> Dual1 {
        Dual1 { v: self.v - o.v, d: self.d - o.d }
    }
}
impl Mul for Dual1 {
    type Output = Dual1;
    fn mul(self, o: Dual1) -> Dual1 {
        Dual1 { v: self.v * o.v, d: self.d * o.v + self.v * o.d }
    }
}
impl Div for Dual1 {
    type Output = Dual1;
    fn div(self, o: Dual1) -> Dual1 {
        Dual1 { v: self.v / o.v, d: (self.d * o.v - self.v * o.d) / (o.v * o.v) }
    }
}
impl Neg for Dual1 {
    type Output = Dual1;
    fn neg(self) -> Dual1 {
        Dual1 { v: -self.v, d: -self.d }
    }
}
impl Scalar for Dual1 {
    fn cst(x: f64) -> Dual1 {
        Dual1 { v: x, d: 0.0 }
    }
    fn value(self) -> f64 {
        self.v
    }
    fn sin(self) -> Dual1 {
        Dual1 { v: self.v.sin(), d: self.d * self.v.cos() }
    }
    fn cos(self) -> Dual1 {
        Dual1 { v: self.v.cos(), d: -self.d * self.v.sin() }
    }
    fn sqrt(self) -> Dual1 {
        let r = self.v.sqrt();
        Dual1 { v: r, d: self.d / (2.0 * r) }
    }
}

type M4<S> = [[S; 4]; 4];

fn mat4<S: Scalar>(xs: &[f64]) -> M4<S> {
    std::array::from_fn(|r| std::array::from_fn(|c| S::cst(xs[4 * r + c])))
}

fn mul4<S: Scalar>(a: &M4<S>, b: &M4<S>) -> M4<S> {
    std::array::from_fn(|r| std::array::from_fn(|c| (1..4).fold(a[r][0] * b[0][c], |acc, k| acc + a[r][k] * b[k][c])))
}

/// ADBench's hand objective in plain `S`, in ADBench's order of operations (`ht.hpp`): the
/// pose parameters, per bone Rz Ry Rx and the chain of 4x4 products, every bone's transform
/// applied to every vertex and accumulated with its weight, the global transform, the residuals.
#[allow(clippy::needless_range_loop)] // index loops mirror ADBench's
pub fn host_objective<S: Scalar>(h: &HandInput, theta: &[S], us: &[S]) -> Vec<S> {
    let m = &h.model;
    let (nb, nv) = (m.bones(), m.vertices());
    let (zero, one) = (S::cst(0.0), S::cst(1.0));
    // to_pose_params: 3 x (bones + 3), column by column.
    let mut pose = vec![[zero; 3]; nb + 3];
    pose[0] = [theta[0], theta[1], theta[2]];
    pose[1] = [one; 3];
    pose[2] = [theta[3], theta[4], theta[5]];
    let (mut i_theta, mut i_pose) = (6, 5);
    for _finger in 0..5 {
        for i in 2..=4 {
            pose[i_pose][0] = theta[i_theta];
            i_theta += 1;
            if i == 2 {
                pose[i_pose][1] = theta[i_theta];
                i_theta += 1;
            }
            i_pose += 1;
        }
        i_pose += 1;
    }
    // get_posed_relatives: euler_angles_to_rotation_matrix(xzy) = Rz Ry Rx.
    let relatives: Vec<M4<S>> = (0..nb)
        .map(|i| {
            let (tx, ty, tz) = (pose[i + 3][0], pose[i + 3][2], pose[i + 3][1]);
            let mut rx = mat4::<S>(&IDENTITY);
            rx[1][1] = tx.cos();
            rx[2][1] = tx.sin();
            rx[1][2] = -rx[2][1];
            rx[2][2] = rx[1][1];
            let mut ry = mat4::<S>(&IDENTITY);
            ry[0][0] = ty.cos();
            ry[0][2] = ty.sin();
            ry[2][0] = -ry[0][2];
            ry[2][2] = ry[0][0];
            let mut rz = mat4::<S>(&IDENTITY);
            rz[0][0] = tz.cos();
            rz[1][0] = tz.sin();
            rz[0][1] = -rz[1][0];
            rz[1][1] = rz[0][0];
            let tr = mul4(&mul4(&rz, &ry), &rx);
            mul4(&mat4(&m.base_relatives[16 * i..16 * i + 16]), &tr)
        })
        .collect();
    let mut absolutes: Vec<M4<S>> = Vec::with_capacity(nb);
    for i in 0..nb {
        let a = if m.parents[i] < 0 { relatives[i] } else { mul4(&absolutes[m.parents[i] as usize], &relatives[i]) };
        absolutes.push(a);
    }
    let mut positions = vec![[zero; 3]; nv];
    for (b, abs) in absolutes.iter().enumerate() {
        let t = mul4(abs, &mat4(&m.inverse_base_absolutes[16 * b..16 * b + 16]));
        for (v, pos) in positions.iter_mut().enumerate() {
            let bp = &m.base_positions[4 * v..4 * v + 4];
            for (i, p) in pos.iter_mut().enumerate() {
                let curr = (1..4).fold(t[i][0] * S::cst(bp[0]), |acc, k| acc + t[i][k] * S::cst(bp[k]));
                *p = *p + curr * S::cst(m.weights[v * nb + b]);
            }
        }
    }
    if m.is_mirrored {
        for p in &mut positions {
            p[0] = -p[0];
        }
    }
    // apply_global_transform (the scale column is ones).
    let a = pose[0];
    let norm = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt();
    let r: [[S; 3]; 3] = if norm.value() < SMALL_ROTATION {
        std::array::from_fn(|i| std::array::from_fn(|j| if i == j { one } else { zero }))
    } else {
        let (x, y, z) = (a[0] / norm, a[1] / norm, a[2] / norm);
        let (s, c) = (norm.sin(), norm.cos());
        [
            [x * x + (one - x * x) * c, x * y * (one - c) - z * s, x * z * (one - c) + y * s],
            [x * y * (one - c) + z * s, y * y + (one - y * y) * c, y * z * (one - c) - x * s],
            [x * z * (one - c) - y * s, z * y * (one - c) + x * s, z * z + (one - z * z) * c],
        ]
    };
    let posed: Vec<[S; 3]> = positions
        .iter()
        .map(|p| std::array::from_fn(|i| r[i][0] * p[0] + r[i][1] * p[1] + r[i][2] * p[2] + pose[2][i]))
        .collect();
    let mut err = Vec::with_capacity(3 * h.points());
    for (i, &corr) in h.correspondences.iter().enumerate() {
        for j in 0..3 {
            let hand = if h.complicated() {
                let t = m.triangles[corr];
                let (u0, u1) = (us[2 * i], us[2 * i + 1]);
                u0 * posed[t[0]][j] + u1 * posed[t[1]][j] + (one - u0 - u1) * posed[t[2]][j]
            } else {
                posed[corr][j]
            };
            err.push(S::cst(h.points[3 * i + j]) - hand);
        }
    }
    err
}

const IDENTITY: [f64; 16] = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0];

/// The host model's residuals and GradBench's Jacobian (row-major, as [`jacobian_forward`]) by
/// dual numbers: one evaluation per theta coordinate and one per us column.
pub fn host_jacobian(h: &HandInput) -> (Vec<f64>, Vec<f64>) {
    let complicated = h.complicated();
    let ncols = N_THETA + if complicated { 2 } else { 0 };
    let nrows = 3 * h.points();
    let mut jac = vec![0.0; nrows * ncols];
    let first = ncols - N_THETA;
    let duals = |xs: &[f64], hot: &dyn Fn(usize) -> bool| -> Vec<Dual1> {
        xs.iter().enumerate().map(|(i, &v)| Dual1 { v, d: if hot(i) { 1.0 } else { 0.0 } }).collect()
    };
    let mut write = |col: usize, out: Vec<Dual1>| {
        for (r, e) in out.into_iter().enumerate() {
            jac[r * ncols + col] = e.d;
        }
    };
    if complicated {
        for k in 0..2 {
            write(k, host_objective(h, &duals(&h.theta, &|_| false), &duals(&h.us, &|i| i % 2 == k)));
        }
    }
    for k in 0..N_THETA {
        write(first + k, host_objective(h, &duals(&h.theta, &|i| i == k), &duals(&h.us, &|_| false)));
    }
    (host_objective::<f64>(h, &h.theta, &h.us), jac)
}

// ---- GradBench's message shapes ----

/// GradBench's `ht` input (`HTInput`: theta, data {model, correspondences, points}, us) for `h`.
pub fn gradbench_input(h: &HandInput) -> Json {
    let m = &h.model;
    let mats = |xs: &[f64]| -> Json {
        Json::Array(xs.chunks(16).map(|b| Json::Array(b.chunks(4).map(|r| Json::from(r.to_vec())).collect())).collect())
    };
    let rows = crate::json::rows_json;
    let triangles: Vec<Vec<usize>> = m.triangles.iter().map(|t| t.to_vec()).collect();
    let us = if h.complicated() { rows(&h.us, 2) } else { Json::Array(Vec::new()) };
    serde_json::json!({
        "theta": h.theta,
        "data": {
            "model": {
                "bone_count": m.bones(),
                "bone_names": m.bone_names,
                "parents": m.parents,
                "base_relatives": mats(&m.base_relatives),
                "inverse_base_absolutes": mats(&m.inverse_base_absolutes),
                "base_positions": rows(&m.base_positions, 4),
                "weights": rows(&m.weights, m.bones()),
                "triangles": triangles,
                "is_mirrored": m.is_mirrored,
            },
            "correspondences": h.correspondences,
            "points": rows(&h.points, 3),
        },
        "us": us,
    })
}

/// Reads GradBench's `ht` input; errors name the field (`data.model.weights[3][1]`).
pub fn parse_gradbench_input(input: &Json, source: &str) -> WResult<HandInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let get = |v: &'_ Json, path: &str| -> WResult<Json> {
        path.split('.').try_fold(v, |v, k| v.get(k)).cloned().ok_or_else(|| bad(format!("field {path}: missing")))
    };
    // A nested array of numbers with the given dimensions (None: any), flattened.
    fn numbers(
        v: &Json,
        field: &str,
        dims: &[Option<usize>],
        out: &mut Vec<f64>,
    ) -> std::result::Result<usize, String> {
        let Some((first, rest)) = dims.split_first() else {
            let x = parse_number(v).map_err(|m| format!("field {field}: {m}"))?;
            if !x.is_finite() {
                return Err(format!("field {field}: must be finite, got {x}"));
            }
            out.push(x);
            return Ok(0);
        };
        let Json::Array(xs) = v else {
            return Err(format!("field {field}: expected an array, found {}", kind(v)));
        };
        if let Some(n) = first
            && xs.len() != *n
        {
            return Err(format!("field {field}: {} elements, expected {n}", xs.len()));
        }
        let mut width = None;
        for (i, x) in xs.iter().enumerate() {
            let before = out.len();
            numbers(x, &format!("{field}[{i}]"), rest, out)?;
            let w = out.len() - before;
            if *width.get_or_insert(w) != w {
                return Err(format!("field {field}[{i}]: {w} numbers, but {field}[0] has {}", width.unwrap_or(0)));
            }
        }
        Ok(xs.len())
    }
    let floats = |path: &str, dims: &[Option<usize>]| -> WResult<(usize, Vec<f64>)> {
        let mut out = Vec::new();
        let n = numbers(&get(input, path)?, path, dims, &mut out).map_err(bad)?;
        Ok((n, out))
    };
    let ints = |path: &str, min: i64| -> WResult<Vec<i64>> {
        let v = get(input, path)?;
        let Json::Array(xs) = &v else {
            return Err(bad(format!("field {path}: expected an array of whole numbers, found {}", kind(&v))));
        };
        xs.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_i64()
                    .filter(|&x| x >= min)
                    .ok_or_else(|| bad(format!("field {path}[{i}]: expected a whole number >= {min}, got {x}")))
            })
            .collect()
    };
    let (nb, _) = floats("data.model.base_relatives", &[None, Some(4), Some(4)])?;
    let bone_names = match get(input, "data.model.bone_names")? {
        Json::Array(xs) => xs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("field data.model.bone_names[{i}]: expected a string")))
            })
            .collect::<WResult<Vec<_>>>()?,
        other => {
            return Err(bad(format!(
                "field data.model.bone_names: expected an array of strings, found {}",
                kind(&other)
            )));
        }
    };
    match get(input, "data.model.bone_count")?.as_u64() {
        Some(n) if n as usize == bone_names.len() => {}
        _ => return Err(bad(format!("field data.model.bone_count: expected {} (the bone names)", bone_names.len()))),
    }
    if nb != bone_names.len() {
        return Err(bad(format!("field data.model.base_relatives: {nb} matrices for {} bones", bone_names.len())));
    }
    let (_, base_relatives) = floats("data.model.base_relatives", &[Some(nb), Some(4), Some(4)])?;
    let (_, inverse_base_absolutes) = floats("data.model.inverse_base_absolutes", &[Some(nb), Some(4), Some(4)])?;
    let (nv, base_positions) = floats("data.model.base_positions", &[None, Some(4)])?;
    let (_, weights) = floats("data.model.weights", &[Some(nv), Some(nb)])?;
    let triangles = match get(input, "data.model.triangles")? {
        Json::Array(ts) => ts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let v: Option<Vec<usize>> = t
                    .as_array()
                    .filter(|a| a.len() == 3)
                    .and_then(|a| a.iter().map(|x| x.as_u64().map(|x| x as usize)).collect());
                v.map(|v| [v[0], v[1], v[2]])
                    .ok_or_else(|| bad(format!("field data.model.triangles[{i}]: expected 3 vertex indices, got {t}")))
            })
            .collect::<WResult<Vec<_>>>()?,
        other => return Err(bad(format!("field data.model.triangles: expected an array, found {}", kind(&other)))),
    };
    let Some(is_mirrored) = get(input, "data.model.is_mirrored")?.as_bool() else {
        return Err(bad("field data.model.is_mirrored: expected true or false".into()));
    };
    let model = HandModel {
        bone_names,
        parents: ints("data.model.parents", -1)?,
        base_relatives,
        inverse_base_absolutes,
        base_positions,
        weights,
        triangles,
        is_mirrored,
    };
    let correspondences: Vec<usize> = ints("data.correspondences", 0)?.into_iter().map(|c| c as usize).collect();
    let c = correspondences.len();
    let (_, points) = floats("data.points", &[Some(c), Some(3)])?;
    let (_, theta) = floats("theta", &[Some(N_THETA)])?;
    let us = match get(input, "us")? {
        Json::Array(a) if a.is_empty() => Vec::new(),
        _ => floats("us", &[Some(c), Some(2)])?.1,
    };
    let h = HandInput { model, correspondences, points, theta, us };
    check_ht(&h).map_err(bad)?;
    Ok(h)
}

/// GradBench's outputs: `objective` a flat array of 3c numbers, `jacobian` 3c rows.
fn gradbench_output(values: &[f64], jac: Option<&[f64]>, npts: usize, dt: DType) -> String {
    match jac {
        None => format_array(values, dt),
        Some(j) => format_rows(j, 3 * npts, dt),
    }
}

/// A tool's `jacobian` output: 3c rows of `ncols` numbers, row-major.
fn remote_jacobian(out: &Json, nrows: usize, ncols: usize) -> Result<Vec<f64>> {
    let bad = |m: String| OpError::Device(format!("ht.jacobian output: {m}"));
    let Json::Array(rows) = out else {
        return Err(bad(format!("expected an array of rows, found {}", kind(out))));
    };
    if rows.len() != nrows {
        return Err(bad(format!("{} rows, expected 3 per point = {nrows}", rows.len())));
    }
    let mut dense = Vec::with_capacity(nrows * ncols);
    for (r, row) in rows.iter().enumerate() {
        match row {
            Json::Array(xs) if xs.len() == ncols => {
                for (k, x) in xs.iter().enumerate() {
                    let v = parse_number(x).map_err(|m| bad(format!("row {r}[{k}]: {m}")))?;
                    dense.push(v);
                }
            }
            _ => return Err(bad(format!("row {r}: expected {ncols} numbers ((2 if us) + 26), got {row}"))),
        }
    }
    Ok(dense)
}

/// A tool's `objective` output: 3c numbers.
fn remote_objective(out: &Json, nrows: usize) -> Result<Vec<f64>> {
    let bad = |m: String| OpError::Device(format!("ht.objective output: {m}"));
    match out {
        Json::Array(xs) if xs.len() == nrows => {
            xs.iter().enumerate().map(|(i, x)| parse_number(x).map_err(|m| bad(format!("[{i}]: {m}")))).collect()
        }
        _ => Err(bad(format!("expected an array of 3 per point = {nrows} numbers, found {}", kind(out)))),
    }
}

// ---- the workload ----

/// Validation size: points per case (18 residuals, 26 + 12 inputs).
const CHECK_POINTS: u64 = 6;
const VARIANTS: [&str; 2] = ["simple", "complicated"];

/// HT's memory: about 2 KB per point (its residuals, gathers and the tape) on top of the model's
/// products (vertices x bones x 16).
pub(crate) fn ht_footprint(c: usize) -> Footprint {
    Footprint {
        bytes: 1536 * c as u128 + (1 << 19),
        key: "c",
        formula: "about 1.5 KB per point (c*1536) + 512 KB for the small hand model",
    }
}

/// Hand tracking in the registry: `workload: ht` with `variant` (simple, complicated) and `c`
/// (points), on ADBench's small hand model with seeded poses and points.
pub struct Ht;

impl Workload for Ht {
    fn family(&self) -> &'static str {
        "ht"
    }
    fn about(&self) -> &'static str {
        "ADBench's hand tracking residuals (simple and complicated) and their Jacobian"
    }
    fn names(&self) -> Vec<String> {
        VARIANTS.iter().map(|v| format!("ht-{v}")).collect()
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![
            ParamSpec {
                key: "variant",
                kind: ParamKind::Names { choices: VARIANTS.iter().map(|v| v.to_string()).collect() },
                default: Some(r#"["complicated"]"#),
                column: None,
                legacy: None,
                doc: "simple (points on vertices) or complicated (points on triangles, with us): the workload ht-<variant>",
            },
            sizes("c", 1, 1 << 20, "points (correspondences)"),
        ]
    }
    fn eval_modes(&self) -> Vec<Mode> {
        vec![Mode::Primal, Mode::Jvp, Mode::Vjp]
    }
    fn eval_options(&self) -> Vec<EvalOption> {
        vec![EvalOption {
            flag: "ht-model",
            takes_value: true,
            help: "ht: the model directory of an ADBench hand file (default: model/ beside it)",
        }]
    }
    fn case_name(&self, params: &Params) -> String {
        params.name("variant").map(|v| format!("ht-{v}")).unwrap_or_else(|_| "ht".into())
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped("c", CHECK_POINTS)
    }
    fn check_params(&self, name: &str) -> Params {
        let variant = name.strip_prefix("ht-").unwrap_or("complicated");
        Params::new(&[("variant", Value::Name(variant.into())), ("c", Value::Int(CHECK_POINTS))])
    }
    fn footprint(&self, p: &Params) -> Option<Footprint> {
        Some(ht_footprint(p.int("c").ok()?))
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        let complicated = match p.name("variant")? {
            "simple" => false,
            "complicated" => true,
            other => {
                return Err(WorkloadError::BadInput(format!("ht: variant '{other}' (known: simple, complicated)")));
            }
        };
        Ok(Box::new(HtProblem { c: p.int("c")?, complicated, seed }))
    }
    /// An ADBench hand file (its model from `--ht-model` or `model/` beside it) or GradBench's
    /// `ht` input as JSON; prints `{"objective": [3c]}`, with `"jacobian": [3c rows]` (jvp, by
    /// forward sweeps) or `"gradient": [26 (+ 2c)]` (vjp: J^T objective, by one reverse sweep).
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let h = if req.text.trim_start().starts_with('{') {
            parse_gradbench_input(&crate::json::parse_json(&req.text, &req.source)?, &req.source)?
        } else {
            let path = std::path::Path::new(&req.source);
            let model_dir = req.options.get("ht-model").map(std::path::PathBuf::from);
            let beside = path.parent().unwrap_or(std::path::Path::new(".")).join("model");
            let model = HandModel::read_dir(model_dir.as_deref().unwrap_or(&beside))
                .map_err(|e| WorkloadError::BadInput(e.to_string()))?;
            HandInput::parse(&req.text, &req.source, model).map_err(|e| WorkloadError::BadInput(e.to_string()))?
        };
        crate::validate::validate(&h, &req.source, req.dtype)?;
        let variant = if h.complicated() { "complicated" } else { "simple" };
        if req.name != format!("ht-{variant}") {
            return Err(WorkloadError::BadInput(format!(
                "{}: the input is ht-{variant} ({} us), not {}",
                req.source,
                if h.complicated() { "with" } else { "without" },
                req.name
            )));
        }
        let (dt, mode) = (req.dtype, req.mode.unwrap_or(Mode::Primal));
        let input = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &h, dt).map_err(input)?;
            Ok(match mode {
                Mode::Primal => format!("{{\"objective\": {}}}", format_array(&objective(d, &x).map_err(input)?, dt)),
                Mode::Vjp | Mode::HessianDiag => {
                    let values = objective(d, &x).map_err(input)?;
                    let g = gradient(d, &x).map_err(input)?;
                    format!("{{\"objective\": {}, \"gradient\": {}}}", format_array(&values, dt), format_array(&g, dt))
                }
                Mode::Jvp => {
                    let (values, jac) = jacobian_forward(d, &x).map_err(input)?;
                    format!(
                        "{{\"objective\": {}, \"jacobian\": {}}}",
                        format_array(&values, dt),
                        format_rows(&jac, 3 * x.npts, dt)
                    )
                }
            })
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("ht")
    }
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let mut call = self.gradbench_prepare(function, input, device, dtype)?;
        call.run()?;
        call.output()
    }
    /// The input parsed and put on the device once; each run evaluates the function.
    fn gradbench_prepare<'a>(
        &'a self,
        function: &'a str,
        input: &'a Json,
        device: &'a AnyDevice,
        dtype: DType,
    ) -> WResult<Box<dyn GradbenchCall + 'a>> {
        let jacobian = match function {
            "objective" => false,
            "jacobian" => true,
            other => {
                return Err(WorkloadError::BadInput(format!("ht: no function '{other}' (known: objective, jacobian)")));
            }
        };
        let source = format!("ht.{function} input");
        let h = parse_gradbench_input(input, &source)?;
        crate::validate::validate(&h, &source, dtype)?;
        with_device!(device, |d| {
            let x = upload(d, &h, dtype).map_err(WorkloadError::from_input)?;
            Ok(Box::new(HtCall { device: d.clone(), x, jacobian, dtype, last: None }) as Box<dyn GradbenchCall + 'a>)
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("c") {
            Some(c) => format!("{name} c={c}"),
            None => name.to_string(),
        }
    }
}

/// One prepared GradBench call of `ht`.
struct HtCall<D: Device> {
    device: D,
    x: HtInputs<D>,
    jacobian: bool,
    dtype: DType,
    last: Option<(Vec<f64>, Option<Vec<f64>>)>,
}

impl<D: Device> GradbenchCall for HtCall<D> {
    fn run(&mut self) -> WResult<()> {
        let (d, x) = (&self.device, &self.x);
        let out = if self.jacobian {
            let (v, j) = jacobian_forward(d, x).map_err(WorkloadError::from_input)?;
            (v, Some(j))
        } else {
            (objective(d, x).map_err(WorkloadError::from_input)?, None)
        };
        self.last = Some(out);
        Ok(())
    }
    fn output(&mut self) -> WResult<String> {
        if self.last.is_none() {
            self.run()?;
        }
        let (values, jac) = self.last.as_ref().map(|(v, j)| (v.as_slice(), j.as_deref())).unwrap_or_default();
        Ok(gradbench_output(values, jac, self.x.npts, self.dtype))
    }
}

/// An HT case: the seeded problem on ADBench's small model.
struct HtProblem {
    c: usize,
    complicated: bool,
    seed: u64,
}

impl HtProblem {
    fn input(&self) -> HandInput {
        HandInput::generate(&HandModel::adbench_small(), self.c, self.complicated, self.seed)
    }
}

impl Problem for HtProblem {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        let h = self.input();
        with_device!(device, |d| Ok(Box::new(HtPrepared {
            device: d.clone(),
            x: upload(d, &h, dtype)?,
            traces: ModeTraces::default()
        }) as Box<dyn Prepared>))
    }

    /// GradBench's `ht`: `objective` as primal, `jacobian` as jvp (its Jacobian is forward
    /// sweeps here); the module has no reverse-mode function.
    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let function = match mode {
            Mode::Primal => "objective",
            Mode::Jvp => "jacobian",
            Mode::Vjp | Mode::HessianDiag => return None,
        };
        Some(RemoteCall { function: function.into(), input: gradbench_input(&self.input()) })
    }

    /// The tool's objective and Jacobian against the host model's, and its Jacobian in the
    /// generic checks (finite differences of the f64 primal on the CPU, dot products).
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, _s: &CheckSettings) -> WResult<Validation> {
        let h = self.input();
        let (nrows, complicated) = (3 * h.points(), h.complicated());
        let ncols = N_THETA + if complicated { 2 } else { 0 };
        let values = remote_objective(&remote.call("objective", gradbench_input(&h))?, nrows)?;
        let jac = remote_jacobian(&remote.call("jacobian", gradbench_input(&h))?, nrows, ncols)?;
        let (want_values, want_jac) = host_jacobian(&h);
        let manual = Comparison {
            check: CheckKind::Manual,
            got: values.into_iter().chain(jac.iter().copied()).collect(),
            want: want_values.into_iter().chain(want_jac).collect(),
            convention: None,
        };
        let flat = HtFlat::new(cpu.clone(), cpu.clone(), DType::F64, &h);
        let dense = full_jacobian(&jac, h.points(), complicated);
        let flat = crate::workload::GivenJacobian { flat, dense, column_scale: None };
        Ok(Validation { flat: Box::new(flat), full_jacobian: None, comparisons: vec![manual] })
    }

    /// The generic checks, the full Jacobian by one-hot VJPs against one-hot JVPs, and the
    /// residuals with GradBench's Jacobian (forward sweeps) against the host model's (manual).
    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        let h = self.input();
        with_device!(device, |d| {
            let dt = s.dtype;
            let flat = HtFlat::new(d.clone(), cpu.clone(), dt, &h);
            let x = upload(d, &flat.input, dt)?;
            let (values, jac) = jacobian_forward(d, &x)?;
            let (want_values, want_jac) = host_jacobian(&flat.input);
            let manual = Comparison {
                check: CheckKind::Manual,
                got: values.into_iter().chain(jac).collect(),
                want: want_values.into_iter().chain(want_jac).collect(),
                convention: None,
            };
            let full = HtFlat::new(d.clone(), cpu.clone(), dt, &h);
            Ok(Validation {
                flat: Box::new(flat),
                full_jacobian: Some(FullJacobian { flat: Box::new(full), tolerance_of: CheckKind::FullJacobian }),
                comparisons: vec![manual],
            })
        })
    }
}

/// Timed modes: primal = the residuals, vjp = J^T err by one reverse sweep, jvp = GradBench's
/// Jacobian by forward sweeps.
struct HtPrepared<D: Device> {
    device: D,
    x: HtInputs<D>,
    traces: ModeTraces,
}

impl<D: Device> Prepared for HtPrepared<D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, x) = (&self.device, &self.x);
        self.traces.run(d, mode, &mut || -> WResult<()> {
            match mode {
                Mode::Primal => drop(objective(d, x)?),
                Mode::Vjp | Mode::HessianDiag => drop(gradient(d, x)?),
                Mode::Jvp => drop(jacobian_forward(d, x)?),
            }
            Ok(())
        })
    }
}

/// HT as a flat function: x = [theta (26), us (2c, complicated)], y = the residuals (3c), at a
/// point rounded to the dtype under test.
pub struct HtFlat<D: Ops> {
    device: D,
    cpu: Cpu,
    dtype: DType,
    input: HandInput,
    x0: Vec<f64>,
}

impl<D: Ops> HtFlat<D> {
    pub fn new(device: D, cpu: Cpu, dtype: DType, h: &HandInput) -> HtFlat<D> {
        let m = &h.model;
        let model = HandModel {
            base_relatives: rounded(&m.base_relatives, dtype),
            inverse_base_absolutes: rounded(&m.inverse_base_absolutes, dtype),
            base_positions: rounded(&m.base_positions, dtype),
            weights: rounded(&m.weights, dtype),
            ..m.clone()
        };
        let input = HandInput {
            model,
            points: rounded(&h.points, dtype),
            theta: rounded(&h.theta, dtype),
            us: rounded(&h.us, dtype),
            correspondences: h.correspondences.clone(),
        };
        let x0 = input.theta.iter().chain(&input.us).copied().collect();
        HtFlat { device, cpu, dtype, input, x0 }
    }

    fn at(&self, x: &[f64]) -> HandInput {
        HandInput { theta: x[..N_THETA].to_vec(), us: x[N_THETA..].to_vec(), ..self.input.clone() }
    }
}

impl<D: Ops> FlatFn for HtFlat<D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        3 * self.input.points()
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        objective(&self.cpu, &upload(&self.cpu, &self.at(x), DType::F64)?)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        vjp(&self.device, &upload(&self.device, &self.input, self.dtype)?, w)
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        jvp(&self.device, &upload(&self.device, &self.input, self.dtype)?, v)
    }
    /// The one kink: the global rotation switches to the identity at a norm of 1e-4.
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        let t = &self.x0;
        let norm = (t[0] * t[0] + t[1] * t[1] + t[2] * t[2]).sqrt();
        ((norm - SMALL_ROTATION).abs() <= 2.0 * h).then(|| {
            format!("the global rotation's norm {norm} is within the step of ADBench's switch to the identity at 1e-4")
        })
    }
    fn input_parts(&self) -> Vec<(&'static str, usize)> {
        if self.input.complicated() { vec![("theta", N_THETA), ("us", self.x0.len() - N_THETA)] } else { Vec::new() }
    }
}

impl CheckedInput for HandInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        let m = &self.model;
        vec![
            ("theta", &self.theta),
            ("us", &self.us),
            ("data.points", &self.points),
            ("data.model.base_relatives", &m.base_relatives),
            ("data.model.inverse_base_absolutes", &m.inverse_base_absolutes),
            ("data.model.base_positions", &m.base_positions),
            ("data.model.weights", &m.weights),
        ]
    }
    fn sizes(&self) -> Result<(), String> {
        check_ht(self)
    }
    fn footprint(&self) -> Option<(String, crate::workload::Footprint)> {
        Some((format!("field data.correspondences: c = {}", self.points()), crate::ht::ht_footprint(self.points())))
    }
}

/// HT's rule (GradBench's field names): the model's sizes ([`HandInput::model`]'s
/// `check_sizes`), 26 pose parameters, 3 coordinates per point, us empty (simple) or 2 per
/// point, correspondences within the vertices (simple) or triangles (complicated), and every
/// number finite.
pub fn check_ht(h: &HandInput) -> Result<(), String> {
    h.model.check_sizes().map_err(|e| e.replacen("field model.", "field data.model.", 1))?;
    let c = h.points();
    if h.theta.len() != N_THETA {
        return Err(format!("field theta: {} numbers, expected {N_THETA}", h.theta.len()));
    }
    if h.points.len() != 3 * c {
        return Err(format!(
            "field data.points: {} numbers, expected 3 per correspondence = {}",
            h.points.len(),
            3 * c
        ));
    }
    if !h.us.is_empty() && h.us.len() != 2 * c {
        return Err(format!("field us: {} numbers, expected none (simple) or 2 per point = {}", h.us.len(), 2 * c));
    }
    let (limit, what) =
        if h.complicated() { (h.model.triangles.len(), "triangles") } else { (h.model.vertices(), "vertices") };
    if let Some(i) = h.correspondences.iter().position(|&k| k >= limit) {
        return Err(format!("field data.correspondences[{i}]: {}, but there are {limit} {what}", h.correspondences[i]));
    }
    for (field, xs) in h.float_fields() {
        if let Some(i) = xs.iter().position(|x| !x.is_finite()) {
            return Err(format!("field {field}[{i}]: must be finite, got {}", xs[i]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use adgauge_datasets::ht::vendored;
    use adgauge_testkit::ht_file;

    use super::*;

    fn cpu() -> Cpu {
        Cpu::new(Some(2)).unwrap()
    }

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs() / (x.abs() + y.abs()).max(1.0)).fold(0.0, f64::max)
    }

    /// 22 bones, every one a child of bone 0, identity base transforms; three vertices on the
    /// axes: v0 = e_x on bone 0, v1 = e_y on bone 2 (the thumb's knuckle: x = theta[6], z =
    /// theta[7]), v2 = e_z half on bone 3 (x = theta[8]) and half on bone 0.
    fn tiny(complicated: bool, theta: Vec<f64>) -> HandInput {
        let nb = 22;
        let id: Vec<f64> = (0..nb).flat_map(|_| IDENTITY).collect();
        let mut weights = vec![0.0; 3 * nb];
        weights[0] = 1.0;
        weights[nb + 2] = 1.0;
        weights[2 * nb + 3] = 0.5;
        weights[2 * nb] = 0.5;
        let model = HandModel {
            bone_names: (0..nb).map(|i| format!("b{i}")).collect(),
            parents: (0..nb as i64).map(|i| if i == 0 { -1 } else { 0 }).collect(),
            base_relatives: id.clone(),
            inverse_base_absolutes: id,
            base_positions: vec![1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0],
            weights,
            triangles: vec![[0, 1, 2]],
            is_mirrored: false,
        };
        let (correspondences, us) = if complicated { (vec![0], vec![0.2, 0.3]) } else { (vec![0, 1, 2], vec![]) };
        let points = vec![0.0; 3 * correspondences.len()];
        HandInput { model, correspondences, points, theta, us }
    }

    /// The residuals (points at 0: minus the posed vertices) computed by hand: bone 2 turns e_y
    /// to Rz(g) Rx(a) e_y = (-sin g cos a, cos g cos a, sin a), bone 3 turns e_z to (0, -sin b,
    /// cos b), blended half and half with e_z; the global rotation (0, 0, pi/2) maps (x, y, z)
    /// to (-y, x, z); then the translation t.
    #[test]
    fn residuals_of_a_hand_made_model_match_the_hand_computed_values() {
        let (a, g, b) = (0.3f64, -0.4f64, 0.7f64);
        let t = [0.5, -1.0, 2.0];
        let mut theta = vec![0.0; N_THETA];
        theta[2] = std::f64::consts::FRAC_PI_2;
        theta[3..6].copy_from_slice(&t);
        theta[6] = a;
        theta[7] = g;
        theta[8] = b;
        let local = [
            [1.0, 0.0, 0.0],
            [-g.sin() * a.cos(), g.cos() * a.cos(), a.sin()],
            [0.0, -0.5 * b.sin(), 0.5 * (b.cos() + 1.0)],
        ];
        let posed: Vec<[f64; 3]> = local.iter().map(|v| [-v[1] + t[0], v[0] + t[1], v[2] + t[2]]).collect();
        let want_simple: Vec<f64> = posed.iter().flat_map(|p| p.map(|x| -x)).collect();
        let want_complicated: Vec<f64> =
            (0..3).map(|j| -(0.2 * posed[0][j] + 0.3 * posed[1][j] + 0.5 * posed[2][j])).collect();
        let cpu = cpu();
        for (complicated, want) in [(false, want_simple), (true, want_complicated)] {
            let h = tiny(complicated, theta.clone());
            let got = objective(&cpu, &upload(&cpu, &h, DType::F64).unwrap()).unwrap();
            assert!(max_rel(&got, &want) < 1e-15, "{got:?} vs {want:?}");
            let host = host_objective::<f64>(&h, &h.theta, &h.us);
            assert!(max_rel(&host, &want) < 1e-15, "{host:?} vs {want:?}");
        }
        // At theta = 0 the posed vertices are the base positions: the residuals are minus them.
        let h = tiny(false, vec![0.0; N_THETA]);
        let got = objective(&cpu, &upload(&cpu, &h, DType::F64).unwrap()).unwrap();
        assert_eq!(got, [-1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0].map(|x: f64| x + 0.0));
    }

    /// The host model's dual-number Jacobian against central differences of its f64 primal.
    #[test]
    fn the_host_jacobian_matches_differences_of_the_host_model() {
        let h = HandInput::read(&vendored("complicated_hand1_t26_c100.txt"), None).unwrap();
        let h = HandInput {
            correspondences: h.correspondences[..10].to_vec(),
            points: h.points[..30].to_vec(),
            us: h.us[..20].to_vec(),
            ..h
        };
        let (_, jac) = host_jacobian(&h);
        let full = full_jacobian(&jac, 10, true);
        let x0: Vec<f64> = h.theta.iter().chain(&h.us).copied().collect();
        let n_in = x0.len();
        let f = |x: &[f64]| host_objective::<f64>(&h, &x[..N_THETA], &x[N_THETA..]);
        for col in 0..n_in {
            let (mut xp, mut xm) = (x0.clone(), x0.clone());
            xp[col] += 1e-6;
            xm[col] -= 1e-6;
            let (fp, fm) = (f(&xp), f(&xm));
            for r in 0..30 {
                let fd = (fp[r] - fm[r]) / 2e-6;
                let ad = full[r * n_in + col];
                assert!((fd - ad).abs() < 1e-6 * fd.abs().max(1.0), "J[{r}][{col}] = {ad}, fd {fd}");
            }
        }
    }

    fn engine_against_host(h: &HandInput, tol: f64) {
        let cpu = cpu();
        let x = upload(&cpu, h, DType::F64).unwrap();
        let (want_values, want_jac) = host_jacobian(h);
        let values = objective(&cpu, &x).unwrap();
        assert!(max_rel(&values, &want_values) < tol, "{}", max_rel(&values, &want_values));
        let (fvalues, jac) = jacobian_forward(&cpu, &x).unwrap();
        assert!(max_rel(&fvalues, &want_values) < tol);
        assert!(max_rel(&jac, &want_jac) < tol, "{}", max_rel(&jac, &want_jac));
    }

    #[test]
    fn the_engine_matches_the_host_model_on_the_adbench_inputs() {
        for name in ["simple_hand1_t26_c100.txt", "complicated_hand1_t26_c100.txt"] {
            engine_against_host(&HandInput::read(&vendored(name), None).unwrap(), 1e-12);
        }
        for variant in ["simple", "complicated"] {
            let Some(path) = ht_file(&format!("{variant}_small/hand8_t26_c6400.txt")) else { return };
            engine_against_host(&HandInput::read(&path, None).unwrap(), 1e-12);
        }
    }

    #[test]
    fn a_mirrored_model_and_a_rotation_below_the_threshold_agree_with_the_host_model() {
        let mut h = HandInput::generate(&HandModel::adbench_small(), 7, true, 5);
        h.model.is_mirrored = true;
        engine_against_host(&h, 1e-12);
        // Below a norm of 1e-4 the rotation is the identity and its derivative zero (no NaN).
        h.theta[..3].copy_from_slice(&[3e-5, -2e-5, 1e-5]);
        engine_against_host(&h, 1e-12);
        let cpu = cpu();
        let (_, jac) = jacobian_forward(&cpu, &upload(&cpu, &h, DType::F64).unwrap()).unwrap();
        assert!(jac.chunks(28).all(|row| row[2..5] == [0.0; 3]));
        let g = vjp(&cpu, &upload(&cpu, &h, DType::F64).unwrap(), &[1.0; 21]).unwrap();
        assert!(g.iter().all(|v| v.is_finite()) && g[..3] == [0.0; 3]);
    }

    #[test]
    fn vjp_jvp_and_the_gradient_agree_with_the_jacobian() {
        let cpu = cpu();
        for complicated in [false, true] {
            let h = HandInput::generate(&HandModel::adbench_small(), 5, complicated, 9);
            let x = upload(&cpu, &h, DType::F64).unwrap();
            let (values, jac) = jacobian_forward(&cpu, &x).unwrap();
            let full = full_jacobian(&jac, 5, complicated);
            let (n_in, n_out) = x.sizes();
            let v: Vec<f64> = (0..n_in).map(|k| ((k * 7 % 11) as f64 - 5.0) / 5.0).collect();
            let w: Vec<f64> = (0..n_out).map(|k| ((k * 5 % 13) as f64 - 6.0) / 6.0).collect();
            let want_jv: Vec<f64> = (0..n_out).map(|r| (0..n_in).map(|c| full[r * n_in + c] * v[c]).sum()).collect();
            let want_jtw: Vec<f64> = (0..n_in).map(|c| (0..n_out).map(|r| full[r * n_in + c] * w[r]).sum()).collect();
            assert!(max_rel(&jvp(&cpu, &x, &v).unwrap(), &want_jv) < 1e-12);
            assert!(max_rel(&vjp(&cpu, &x, &w).unwrap(), &want_jtw) < 1e-12);
            let want_g: Vec<f64> =
                (0..n_in).map(|c| (0..n_out).map(|r| full[r * n_in + c] * values[r]).sum()).collect();
            assert!(max_rel(&gradient(&cpu, &x).unwrap(), &want_g) < 1e-12);
        }
    }

    #[test]
    fn gradbench_inputs_round_trip_and_bad_fields_are_named() {
        for complicated in [false, true] {
            let h = HandInput::generate(&HandModel::adbench_small(), 4, complicated, 2);
            let json = gradbench_input(&h);
            assert_eq!(json["us"].as_array().unwrap().len(), if complicated { 4 } else { 0 });
            assert_eq!(json["data"]["model"]["base_positions"][0], serde_json::json!(h.model.base_positions[..4]));
            assert_eq!(parse_gradbench_input(&json, "in").unwrap(), h);
        }
        let h = HandInput::generate(&HandModel::adbench_small(), 4, true, 2);
        let err = |edit: &dyn Fn(&mut Json)| {
            let mut j = gradbench_input(&h);
            edit(&mut j);
            parse_gradbench_input(&j, "in").unwrap_err().to_string()
        };
        let e = err(&|j| j["data"]["model"]["weights"][3][1] = Json::from("x"));
        assert!(e.contains("in: field data.model.weights[3][1]"), "{e}");
        let e = err(&|j| j["data"]["correspondences"][2] = Json::from(5000));
        assert!(e.contains("field data.correspondences[2]: 5000, but there are 1084 triangles"), "{e}");
        let e = err(&|j| j["theta"] = serde_json::json!([1.0, 2.0]));
        assert!(e.contains("field theta: 2 elements, expected 26"), "{e}");
        let e = err(&|j| j["data"]["model"]["parents"][3] = Json::from(7));
        assert!(e.contains("field data.model.parents[3]: 7; a parent is -1 or an earlier bone"), "{e}");
        let e = err(&|j| j["us"][1] = serde_json::json!([0.5]));
        assert!(e.contains("field us[1]: 1 elements, expected 2"), "{e}");
        let e = err(&|j| j["data"]["points"][0][2] = Json::from("nan"));
        assert!(e.contains("field data.points[0][2]: must be finite"), "{e}");
    }

    /// GradBench's outputs: the objective flat, the Jacobian 3c rows of 28 (complicated), which
    /// read back as the tool outputs `remote_validation` takes.
    #[test]
    fn gradbench_outputs_have_its_shapes_and_read_back() {
        let h = HandInput::generate(&HandModel::adbench_small(), 3, true, 4);
        let device = AnyDevice::Cpu(cpu());
        let input = gradbench_input(&h);
        let obj: Json =
            serde_json::from_str(&Ht.gradbench_evaluate("objective", &input, &device, DType::F64).unwrap()).unwrap();
        let jac: Json =
            serde_json::from_str(&Ht.gradbench_evaluate("jacobian", &input, &device, DType::F64).unwrap()).unwrap();
        let (want_values, want_jac) = host_jacobian(&h);
        assert!(max_rel(&remote_objective(&obj, 9).unwrap(), &want_values) < 1e-12);
        assert!(max_rel(&remote_jacobian(&jac, 9, 28).unwrap(), &want_jac) < 1e-12);
        assert!(remote_jacobian(&jac, 9, 26).unwrap_err().to_string().contains("row 0: expected 26 numbers"));
        let e = Ht.gradbench_evaluate("gradient", &input, &device, DType::F64).unwrap_err().to_string();
        assert!(e.contains("ht: no function 'gradient'"), "{e}");
    }

    #[test]
    fn the_validator_names_the_field_of_a_bad_value_or_size() {
        let h = HandInput::generate(&HandModel::adbench_small(), 3, false, 1);
        let err = |edit: &dyn Fn(&mut HandInput), dtype: DType| {
            let mut bad = h.clone();
            edit(&mut bad);
            crate::validate::validate(&bad, "in", dtype).unwrap_err().to_string()
        };
        assert!(crate::validate::validate(&h, "in", DType::F32).is_ok());
        let e = err(&|b| b.model.weights[5] = 1e39, DType::F32);
        assert!(e.contains("in: field data.model.weights[5]: 1e39 overflows f32"), "{e}");
        let e = err(&|b| b.correspondences[1] = 544, DType::F64);
        assert!(e.contains("in: field data.correspondences[1]: 544, but there are 544 vertices"), "{e}");
        let e = err(&|b| b.us = vec![0.5; 4], DType::F64);
        assert!(e.contains("field us: 4 numbers, expected none (simple) or 2 per point = 6"), "{e}");
        let e = err(&|b| b.theta.truncate(25), DType::F64);
        assert!(e.contains("field theta: 25 numbers, expected 26"), "{e}");
        let e = err(&|b| b.points[2] = f64::NAN, DType::F64);
        assert!(e.contains("field data.points[2]: must be finite"), "{e}");
        let e = err(&|b| b.model.parents[0] = 3, DType::F64);
        assert!(e.contains("field data.model.parents[0]: 3; a parent is -1 or an earlier bone"), "{e}");
    }

    #[test]
    fn the_pose_map_is_adbench_to_pose_params() {
        let map = pose_map();
        assert_eq!(map.len(), 15);
        assert_eq!(map[0], (2, 6, Some(7)));
        assert_eq!(map[1], (3, 8, None));
        assert_eq!(map[3], (6, 10, Some(11)));
        assert_eq!(map[14], (20, 25, None));
    }
}

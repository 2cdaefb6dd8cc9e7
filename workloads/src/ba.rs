//! Bundle adjustment (BA) exactly as ADBench defines it (`ba_objective` and its helpers in
//! ADBench's C++ `ba.h`), with its sparse Jacobian.
//!
//! For observation i of camera `c = obs[i].0` (11 parameters: Rodrigues rotation r, centre C,
//! focal length f, principal point (u0, v0), radial distortion k1, k2), point `X = x[obs[i].1]`,
//! weight w_i and feature (observed pixel) feat_i:
//!
//! ```text
//! Xc    = rodrigues_rotate(r, X - C)
//!         sqtheta = |r|^2; if sqtheta != 0: theta = sqrt(sqtheta), a = r / theta,
//!             Xc = Xo cos(theta) + (a x Xo) sin(theta) + a (a . Xo)(1 - cos(theta))
//!         else (the small-angle fallback): Xc = Xo + r x Xo
//! (u, v)= (Xc_0 / Xc_2, Xc_1 / Xc_2)
//! L     = 1 + k1 rsq + k2 rsq^2,  rsq = u^2 + v^2
//! proj  = (u, v) L f + (u0, v0)
//! reproj_err_i = w_i (proj - feat_i)       (2 values)
//! w_err_i      = 1 - w_i^2
//! ```
//!
//! The inputs are cams (11n), x (3m) and w (p); the outputs reproj_err (2p, x then y per
//! observation) then w_err (p).
//!
//! # The Jacobian (ADBench's `BASparseMat`, verified against its `insert_reproj_err_block` and
//! `insert_w_err_block`)
//!
//! CSR, 3p rows x (11n + 3m + p) columns. Rows 2i and 2i+1 (reprojection x and y of observation
//! i) hold 15 entries each, in this order: the 11 columns of camera c (11c .. 11c+10), the 3
//! columns of point j (11n + 3j ..), the column of weight i (11n + 3m + i). Rows 2p + i (weight
//! error of observation i) hold 1 entry, at column 11n + 3m + i. `rows` are the 3p + 1 row
//! pointers (15 per reprojection row, 1 per weight row). Structural zeros (e.g. d err_x / d v0)
//! are stored, as in ADBench.
//!
//! Each observation's outputs depend only on its own 15 parameters, so the Jacobian is taken
//! with respect to the gathered parameters: 15 vectors of length p (the columns of the p x 15
//! block of per-observation parameters; separate vectors so that every op is a contiguous
//! elementwise pass). Reverse mode records the objective once and sweeps back three times, with
//! seed 1 on every reprojection-x output, then every reprojection-y output (each giving 15
//! entries per observation), then every weight error (a two-node sweep); forward mode makes 15
//! sweeps, one per gathered parameter with a tangent of ones. [`manual`] is the hand-derived
//! Jacobian in plain Rust (rayon), the oracle independent of the AD engines and the speed
//! reference.

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, Cpu, DType, Device, Elem, Forward, OpError, Ops, OutOfRange, Result, Reverse, TensorMeta,
    UnaryOp, with_device,
};
use adgauge_datasets::ba::{BaInput, N_CAM_PARAMS};
use rayon::prelude::*;
use std::sync::Arc;

use serde_json::Value as Json;

use crate::json::{format_array, format_number, parse_number, parse_rows, rows_json};
use crate::validate::CheckedInput;
use crate::workload::{
    CheckKind, CheckSettings, Comparison, EvalRequest, FlatFn, FullJacobian, Mode, ModeTraces, ParamKind, ParamSpec,
    Params, Prepared, Problem, Remote, RemoteCall, Validation, WResult, Workload, WorkloadError, rounded,
};

/// Parameters each observation depends on: 11 camera, 3 point, 1 weight.
pub const N_GATHERED: usize = N_CAM_PARAMS + 3 + 1;

/// A BA problem on an engine's device.
pub struct BaInputs<O: Ops> {
    pub n: usize,
    pub m: usize,
    pub p: usize,
    /// Cameras, 11n, flat.
    pub cams: O::T,
    /// Points, 3m, flat.
    pub x: O::T,
    /// Weights, p.
    pub w: O::T,
    /// Features, x then y coordinates, p each (constants).
    pub feats: [O::T; 2],
    /// The Jacobian's sparsity pattern.
    pub pattern: BaPattern,
    /// Gathers parameter k of every observation: cams[11 c_i + k] for k < 11, x[3 j_i + k - 11]
    /// for 11 <= k < 14.
    gather_index: Vec<O::I>,
}

/// The sparsity pattern of the Jacobian (see the module documentation for the layout). It
/// depends only on the sizes and the observations, so it is built once per problem (at
/// [`upload`]) and shared by every Jacobian of that problem, which then writes its values only.
#[derive(Clone, Debug, PartialEq)]
pub struct BaPattern {
    pub nrows: usize,
    pub ncols: usize,
    /// Row pointers, nrows + 1.
    pub rows: Arc<[usize]>,
    pub cols: Arc<[usize]>,
}

impl BaPattern {
    /// The ADBench layout for n cameras, m points and observations `obs`.
    pub fn new(n: usize, m: usize, obs: &[(usize, usize)]) -> BaPattern {
        let p = obs.len();
        let per_obs = 2 * N_GATHERED;
        let wcol = N_CAM_PARAMS * n + 3 * m;
        let mut cols = vec![0usize; per_obs * p + p];
        let (rcols, wcols) = cols.split_at_mut(per_obs * p);
        rcols.par_chunks_mut(per_obs).enumerate().with_min_len(MIN_OBS_PER_TASK).for_each(|(i, c)| {
            let (cam, pt) = obs[i];
            for row in c.chunks_mut(N_GATHERED) {
                for (k, col) in row[..N_CAM_PARAMS].iter_mut().enumerate() {
                    *col = N_CAM_PARAMS * cam + k;
                }
                for k in 0..3 {
                    row[N_CAM_PARAMS + k] = N_CAM_PARAMS * n + 3 * pt + k;
                }
                row[N_GATHERED - 1] = wcol + i;
            }
        });
        for (i, c) in wcols.iter_mut().enumerate() {
            *c = wcol + i;
        }
        let rows: Vec<usize> = (0..=2 * p).map(|r| r * N_GATHERED).chain((1..=p).map(|r| per_obs * p + r)).collect();
        BaPattern { nrows: 3 * p, ncols: wcol + p, rows: rows.into(), cols: cols.into() }
    }

    /// A Jacobian of this pattern: `block(i, out)` fills the 30 values of observation i (row
    /// 2i's 15 then row 2i+1's 15, each in the order camera 11, point 3, weight 1) and `wd(i)`
    /// is d w_err_i / d w_i.
    pub fn fill(&self, block: impl Fn(usize, &mut [f64]) + Sync, wd: impl Fn(usize) -> f64 + Sync) -> SparseJacobian {
        let p = self.nrows / 3;
        let per_obs = 2 * N_GATHERED;
        let mut vals = vec![0.0; per_obs * p + p];
        let (rvals, wvals) = vals.split_at_mut(per_obs * p);
        rvals.par_chunks_mut(per_obs).enumerate().with_min_len(MIN_OBS_PER_TASK).for_each(|(i, v)| block(i, v));
        for (i, v) in wvals.iter_mut().enumerate() {
            *v = wd(i);
        }
        SparseJacobian { pattern: self.clone(), vals }
    }
}

/// A sparse Jacobian in CSR form: the pattern's row pointers and columns, and the values.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseJacobian {
    pub pattern: BaPattern,
    pub vals: Vec<f64>,
}

/// What BA evaluations return: reproj_err (2p, x and y per observation), w_err (p) and, for the
/// derivative modes, the Jacobian.
#[derive(Clone, Debug, PartialEq)]
pub struct BaOutput {
    pub reproj_err: Vec<f64>,
    pub w_err: Vec<f64>,
    pub jacobian: Option<SparseJacobian>,
}

/// Observations per rayon task (large enough that scheduling is negligible).
const MIN_OBS_PER_TASK: usize = 1024;

impl SparseJacobian {
    /// The dense matrix, row-major (for small problems).
    pub fn to_dense(&self) -> Vec<f64> {
        let BaPattern { nrows, ncols, rows, cols } = &self.pattern;
        let mut out = vec![0.0; nrows * ncols];
        for r in 0..*nrows {
            for k in rows[r]..rows[r + 1] {
                out[r * ncols + cols[k]] += self.vals[k];
            }
        }
        out
    }
}

/// Puts a problem on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, b: &BaInput, dtype: DType) -> Result<BaInputs<O>> {
    b.validate().map_err(|e| OpError::Shape { op: "ba upload", detail: e.to_string() })?;
    let p = b.p;
    let gather_index = (0..N_GATHERED - 1)
        .map(|k| {
            let idx: Vec<i64> = if k < N_CAM_PARAMS {
                b.obs.iter().map(|&(c, _)| (N_CAM_PARAMS * c + k) as i64).collect()
            } else {
                b.obs.iter().map(|&(_, j)| (3 * j + k - N_CAM_PARAMS) as i64).collect()
            };
            o.index(&idx)
        })
        .collect::<Result<_>>()?;
    let fx: Vec<f64> = b.feats.iter().step_by(2).copied().collect();
    let fy: Vec<f64> = b.feats.iter().skip(1).step_by(2).copied().collect();
    Ok(BaInputs {
        n: b.n,
        m: b.m,
        p,
        cams: o.tensor(&b.cams, &[b.cams.len()], dtype)?,
        x: o.tensor(&b.x, &[b.x.len()], dtype)?,
        w: o.tensor(&b.w, &[p], dtype)?,
        feats: [o.tensor(&fx, &[p], dtype)?, o.tensor(&fy, &[p], dtype)?],
        pattern: BaPattern::new(b.n, b.m, &b.obs),
        gather_index,
    })
}

/// The residuals of every observation on some engine: reprojection x, y and weight error, p each.
pub struct Residuals<T> {
    pub err: [T; 2],
    pub w_err: T,
}

impl<O: Ops> BaInputs<O> {
    /// Number of inputs (11n + 3m + p) and outputs (3p) of the whole function.
    pub fn sizes(&self) -> (usize, usize) {
        (N_CAM_PARAMS * self.n + 3 * self.m + self.p, 3 * self.p)
    }

    /// The 15 per-observation parameter vectors (camera 11, point 3, weight) gathered from
    /// `cams`, `x` and `w` on engine `P` (sharing this problem's index tensors).
    pub fn gather_on<P: Ops<I = O::I>>(&self, p: &P, cams: &P::T, x: &P::T, w: &P::T) -> Result<Vec<P::T>> {
        let mut g = Vec::with_capacity(N_GATHERED);
        for (k, idx) in self.gather_index.iter().enumerate() {
            let src = if k < N_CAM_PARAMS { cams } else { x };
            g.push(p.gather(src, idx, OutOfRange::Error)?);
        }
        g.push(w.clone());
        Ok(g)
    }
}

/// ADBench's residuals on engine `P` from the 15 gathered parameter vectors `g` (order of the
/// Jacobian's columns) and the feature coordinates.
pub fn residuals_on<P: Ops>(p: &P, g: &[P::T], feats: &[P::T; 2]) -> Result<Residuals<P::T>> {
    let [r0, r1, r2, c0, c1, c2, f, u0, v0, k1, k2, x0, x1, x2, w] = g else {
        return Err(OpError::Shape {
            op: "ba residuals",
            detail: format!("{} parameter vectors, expected 15", g.len()),
        });
    };
    let dt = w.dtype();
    let sq = |t: &P::T| p.unary(UnaryOp::Square, t);
    let one = p.scalar(1.0, dt)?;
    let xo = [p.sub(x0, c0)?, p.sub(x1, c1)?, p.sub(x2, c2)?];
    let cross = |a: [&P::T; 3], b: &[P::T; 3]| -> Result<[P::T; 3]> {
        Ok([
            p.sub(&p.mul(a[1], &b[2])?, &p.mul(a[2], &b[1])?)?,
            p.sub(&p.mul(a[2], &b[0])?, &p.mul(a[0], &b[2])?)?,
            p.sub(&p.mul(a[0], &b[1])?, &p.mul(a[1], &b[0])?)?,
        ])
    };
    // Rodrigues' rotation, both branches evaluated and one selected per observation.
    let sqtheta = p.add(&p.add(&sq(r0)?, &sq(r1)?)?, &sq(r2)?)?;
    let small = p.binary(BinaryOp::Eq, &sqtheta, &p.scalar(0.0, dt)?)?;
    // Where sqtheta == 0 the rotation branch would divide by zero; its value is discarded by the
    // select below, but a NaN there would still reach the adjoints (0 * NaN = NaN), so that
    // branch sees sqtheta = 1 instead.
    let theta = p.unary(UnaryOp::Sqrt, &p.select(&small, &one, &sqtheta)?)?;
    let (cos, sin) = (p.unary(UnaryOp::Cos, &theta)?, p.unary(UnaryOp::Sin, &theta)?);
    let inv = p.unary(UnaryOp::Recip, &theta)?;
    let axis = [p.mul(r0, &inv)?, p.mul(r1, &inv)?, p.mul(r2, &inv)?];
    let dot = p.add(&p.add(&p.mul(&axis[0], &xo[0])?, &p.mul(&axis[1], &xo[1])?)?, &p.mul(&axis[2], &xo[2])?)?;
    let tmp = p.mul(&dot, &p.sub(&one, &cos)?)?;
    let axo = cross([&axis[0], &axis[1], &axis[2]], &xo)?;
    let rxo = cross([r0, r1, r2], &xo)?;
    let mut xc = Vec::with_capacity(3);
    for i in 0..3 {
        let big = p.add(&p.add(&p.mul(&xo[i], &cos)?, &p.mul(&axo[i], &sin)?)?, &p.mul(&axis[i], &tmp)?)?;
        let fallback = p.add(&xo[i], &rxo[i])?;
        xc.push(p.select(&small, &fallback, &big)?);
    }
    // Projection, radial distortion, focal length and principal point.
    let u = p.div(&xc[0], &xc[2])?;
    let v = p.div(&xc[1], &xc[2])?;
    let rsq = p.add(&sq(&u)?, &sq(&v)?)?;
    let l = p.add(&p.add(&one, &p.mul(k1, &rsq)?)?, &p.mul(&p.mul(k2, &rsq)?, &rsq)?)?;
    let proj_u = p.add(&p.mul(&p.mul(&u, &l)?, f)?, u0)?;
    let proj_v = p.add(&p.mul(&p.mul(&v, &l)?, f)?, v0)?;
    let err = [p.mul(w, &p.sub(&proj_u, &feats[0])?)?, p.mul(w, &p.sub(&proj_v, &feats[1])?)?];
    let w_err = p.sub(&one, &p.mul(w, w)?)?;
    Ok(Residuals { err, w_err })
}

/// Reprojection errors interleaved (x, y per observation) from the two coordinate vectors.
fn interleave(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).flat_map(|(&a, &b)| [a, b]).collect()
}

/// The objective on the device: reproj_err and w_err (no Jacobian).
pub fn objective<B: Ops>(b: &B, x: &BaInputs<B>) -> Result<BaOutput> {
    let g = x.gather_on(b, &x.cams, &x.x, &x.w)?;
    let r = residuals_on(b, &g, &x.feats)?;
    let (ex, ey) = (b.to_vec(&r.err[0])?, b.to_vec(&r.err[1])?);
    Ok(BaOutput { reproj_err: interleave(&ex, &ey), w_err: b.to_vec(&r.w_err)?, jacobian: None })
}

/// Assembles the Jacobian from per-parameter columns: `dx[k][i]`, `dy[k][i]` = derivative of
/// observation i's x / y reprojection error with respect to its gathered parameter k.
fn assemble_columns<B: Ops>(x: &BaInputs<B>, dx: &[Vec<f64>], dy: &[Vec<f64>], wd: &[f64]) -> SparseJacobian {
    x.pattern.fill(
        |i, out| {
            for k in 0..N_GATHERED {
                out[k] = dx[k][i];
                out[N_GATHERED + k] = dy[k][i];
            }
        },
        |i| wd[i],
    )
}

/// Residuals and the Jacobian by reverse mode: one recording, then sweeps seeded with ones on
/// the x errors, on the y errors and on the weight errors.
pub fn jacobian_reverse<B: Ops>(b: &B, x: &BaInputs<B>) -> Result<BaOutput> {
    let g = x.gather_on(b, &x.cams, &x.x, &x.w)?;
    let r = Reverse::new(b.clone());
    let vars: Vec<_> = g.into_iter().map(|t| r.var(t)).collect();
    let feats = [r.lift(x.feats[0].clone()), r.lift(x.feats[1].clone())];
    let out = residuals_on(&r, &vars, &feats)?;
    let ones = b.full(&[x.p], 1.0, x.w.dtype())?;
    let column = |seeded: &adgauge_backends::Grads<B>| -> Result<Vec<Vec<f64>>> {
        vars.iter().map(|v| b.to_vec(&seeded.get_or_zeros(b, v)?)).collect()
    };
    let dx = column(&r.backward(&out.err[0], ones.clone())?)?;
    let dy = column(&r.backward(&out.err[1], ones.clone())?)?;
    let wd = b.to_vec(&r.backward(&out.w_err, ones)?.get_or_zeros(b, &vars[N_GATHERED - 1])?)?;
    let (ex, ey) = (b.to_vec(out.err[0].value())?, b.to_vec(out.err[1].value())?);
    Ok(BaOutput {
        reproj_err: interleave(&ex, &ey),
        w_err: b.to_vec(out.w_err.value())?,
        jacobian: Some(assemble_columns(x, &dx, &dy, &wd)),
    })
}

/// Residuals and the Jacobian by forward mode: 15 sweeps, sweep k with a tangent of ones on
/// gathered parameter k (and none on the others).
pub fn jacobian_forward<B: Ops>(b: &B, x: &BaInputs<B>) -> Result<BaOutput> {
    let g = x.gather_on(b, &x.cams, &x.x, &x.w)?;
    let ones = b.full(&[x.p], 1.0, x.w.dtype())?;
    let (mut dx, mut dy) = (Vec::with_capacity(N_GATHERED), Vec::with_capacity(N_GATHERED));
    let mut values = None;
    let mut wd = Vec::new();
    for k in 0..N_GATHERED {
        let f = Forward::new(b.clone());
        let ins: Vec<_> = g
            .iter()
            .enumerate()
            .map(|(j, t)| if j == k { f.dual(t.clone(), ones.clone()) } else { Ok(f.lift(t.clone())) })
            .collect::<Result<_>>()?;
        let feats = [f.lift(x.feats[0].clone()), f.lift(x.feats[1].clone())];
        let out = residuals_on(&f, &ins, &feats)?;
        dx.push(b.to_vec(&f.tangent(&out.err[0])?)?);
        dy.push(b.to_vec(&f.tangent(&out.err[1])?)?);
        if k == N_GATHERED - 1 {
            wd = b.to_vec(&f.tangent(&out.w_err)?)?;
        }
        if values.is_none() {
            let (ex, ey) = (b.to_vec(f.primal(&out.err[0]))?, b.to_vec(f.primal(&out.err[1]))?);
            values = Some((interleave(&ex, &ey), b.to_vec(f.primal(&out.w_err))?));
        }
    }
    let (reproj_err, w_err) = values.unwrap_or_default();
    Ok(BaOutput { reproj_err, w_err, jacobian: Some(assemble_columns(x, &dx, &dy, &wd)) })
}

/// Splits a flat vector [cams (11n), x (3m), w (p)] of the whole function's inputs.
fn split_inputs<B: Ops>(x: &BaInputs<B>, v: &[f64]) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let (nc, nx) = (N_CAM_PARAMS * x.n, 3 * x.m);
    if v.len() != nc + nx + x.p {
        return Err(OpError::Shape {
            op: "ba",
            detail: format!("input vector has {} entries, expected {}", v.len(), nc + nx + x.p),
        });
    }
    Ok((v[..nc].to_vec(), v[nc..nc + nx].to_vec(), v[nc + nx..].to_vec()))
}

/// J^T wbar of the whole function (inputs [cams, x, w], outputs [reproj_err interleaved, w_err])
/// by one reverse sweep through the gathers: the general VJP the dot-product and
/// finite-difference checks use.
pub fn vjp<B: Ops>(b: &B, x: &BaInputs<B>, wbar: &[f64]) -> Result<Vec<f64>> {
    if wbar.len() != 3 * x.p {
        return Err(OpError::Shape { op: "ba vjp", detail: format!("{} adjoints, expected {}", wbar.len(), 3 * x.p) });
    }
    let dt = x.w.dtype();
    let r = Reverse::new(b.clone());
    let (cams, pts, w) = (r.var(x.cams.clone()), r.var(x.x.clone()), r.var(x.w.clone()));
    let g = x.gather_on(&r, &cams, &pts, &w)?;
    let feats = [r.lift(x.feats[0].clone()), r.lift(x.feats[1].clone())];
    let out = residuals_on(&r, &g, &feats)?;
    let seed = |v: Vec<f64>| -> Result<_> { Ok(r.lift(b.tensor(&v, &[x.p], dt)?)) };
    let wx = seed(wbar[..2 * x.p].iter().step_by(2).copied().collect())?;
    let wy = seed(wbar[..2 * x.p].iter().skip(1).step_by(2).copied().collect())?;
    let ww = seed(wbar[2 * x.p..].to_vec())?;
    let s = r.add(
        &r.add(&r.sum(&r.mul(&out.err[0], &wx)?)?, &r.sum(&r.mul(&out.err[1], &wy)?)?)?,
        &r.sum(&r.mul(&out.w_err, &ww)?)?,
    )?;
    let grads = r.backward(&s, b.full(&[1], 1.0, dt)?)?;
    let mut res = b.to_vec(&grads.get_or_zeros(b, &cams)?)?;
    res.extend(b.to_vec(&grads.get_or_zeros(b, &pts)?)?);
    res.extend(b.to_vec(&grads.get_or_zeros(b, &w)?)?);
    Ok(res)
}

/// J v of the whole function by one forward sweep through the gathers.
pub fn jvp<B: Ops>(b: &B, x: &BaInputs<B>, v: &[f64]) -> Result<Vec<f64>> {
    let (vc, vx, vw) = split_inputs(x, v)?;
    let dt = x.w.dtype();
    let f = Forward::new(b.clone());
    let cams = f.dual(x.cams.clone(), b.tensor(&vc, &[vc.len()], dt)?)?;
    let pts = f.dual(x.x.clone(), b.tensor(&vx, &[vx.len()], dt)?)?;
    let w = f.dual(x.w.clone(), b.tensor(&vw, &[x.p], dt)?)?;
    let g = x.gather_on(&f, &cams, &pts, &w)?;
    let feats = [f.lift(x.feats[0].clone()), f.lift(x.feats[1].clone())];
    let out = residuals_on(&f, &g, &feats)?;
    let (dx, dy) = (b.to_vec(&f.tangent(&out.err[0])?)?, b.to_vec(&f.tangent(&out.err[1])?)?);
    let mut res = interleave(&dx, &dy);
    res.extend(b.to_vec(&f.tangent(&out.w_err)?)?);
    Ok(res)
}

/// One observation by hand: the two reprojection errors and their derivatives with respect to
/// the 15 gathered parameters (row x then row y), following ADBench's operation order for the
/// values. With G = d err / d Xc (2 x 3) and R = d Xc / d Xo:
/// d/dX = G R, d/dC = -G R, d/dr = G d Xc / d r, d/df = w (u L, v L), d/du0 = (w, 0),
/// d/dv0 = (0, w), d/dk1 = w f rsq (u, v), d/dk2 = w f rsq^2 (u, v), d/dw = proj - feat.
#[allow(clippy::needless_range_loop)] // index loops mirror the formulas
fn observation<T: Elem>(cam: &[T], pt: &[T], w: T, feat: [T; 2]) -> ([T; 2], [[T; N_GATHERED]; 2]) {
    let (zero, one, two) = (T::zero(), T::one(), T::of_f64(2.0));
    let cross =
        |a: [T; 3], b: [T; 3]| [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let r = [cam[0], cam[1], cam[2]];
    let xo = [pt[0] - cam[3], pt[1] - cam[4], pt[2] - cam[5]];
    let sqtheta = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    // xc, R = d xc / d xo (row-major) and d xc / d r (column j: derivative along r_j).
    let (xc, rot, drot): ([T; 3], [[T; 3]; 3], [[T; 3]; 3]) = if sqtheta != zero {
        let theta = sqtheta.sqrt();
        let (c, s) = (theta.cos(), theta.sin());
        let inv = one / theta;
        let a = [r[0] * inv, r[1] * inv, r[2] * inv];
        let axo = cross(a, xo);
        let dot = a[0] * xo[0] + a[1] * xo[1] + a[2] * xo[2];
        let tmp = dot * (one - c);
        let xc = std::array::from_fn(|i| xo[i] * c + axo[i] * s + a[i] * tmp);
        // R = c I + s [a]x + (1 - c) a a^T.
        let ax = [[zero, -a[2], a[1]], [a[2], zero, -a[0]], [-a[1], a[0], zero]];
        let rot = std::array::from_fn(|i| {
            std::array::from_fn(|k| {
                let id = if i == k { c } else { zero };
                id + s * ax[i][k] + (one - c) * a[i] * a[k]
            })
        });
        // d theta / d r_j = a_j, d a / d r_j = (e_j - a a_j) / theta.
        let mut drot = [[zero; 3]; 3];
        for j in 0..3 {
            let da: [T; 3] = std::array::from_fn(|i| ((if i == j { one } else { zero }) - a[i] * a[j]) * inv);
            let daxo = cross(da, xo);
            let ddot = da[0] * xo[0] + da[1] * xo[1] + da[2] * xo[2];
            for i in 0..3 {
                drot[i][j] = -s * a[j] * xo[i]
                    + c * a[j] * axo[i]
                    + s * daxo[i]
                    + s * a[j] * dot * a[i]
                    + (one - c) * (ddot * a[i] + dot * da[i]);
            }
        }
        (xc, rot, drot)
    } else {
        // Small-angle fallback: xc = xo + r x xo; R = I + [r]x; d xc / d r_j = e_j x xo.
        let rxo = cross(r, xo);
        let xc = std::array::from_fn(|i| xo[i] + rxo[i]);
        let rot = [[one, -r[2], r[1]], [r[2], one, -r[0]], [-r[1], r[0], one]];
        let drot = [[zero, xo[2], -xo[1]], [-xo[2], zero, xo[0]], [xo[1], -xo[0], zero]];
        (xc, rot, drot)
    };
    let (f, k1, k2) = (cam[6], cam[9], cam[10]);
    let z = xc[2];
    let (u, v) = (xc[0] / z, xc[1] / z);
    let rsq = u * u + v * v;
    let l = one + k1 * rsq + k2 * rsq * rsq;
    let (pu, pv) = (u * l, v * l);
    let proj = [pu * f + cam[7], pv * f + cam[8]];
    let err = [w * (proj[0] - feat[0]), w * (proj[1] - feat[1])];
    // d (pu, pv) / d (u, v), scaled by w f.
    let lp = k1 + two * k2 * rsq;
    let wf = w * f;
    let a = [
        [wf * (l + two * u * u * lp), wf * (two * u * v * lp)],
        [wf * (two * u * v * lp), wf * (l + two * v * v * lp)],
    ];
    // G = A d (u, v) / d xc with d u / d xc = (1/z, 0, -u/z), d v / d xc = (0, 1/z, -v/z).
    let g: [[T; 3]; 2] = std::array::from_fn(|o| [a[o][0] / z, a[o][1] / z, -(a[o][0] * u + a[o][1] * v) / z]);
    let mut jac = [[zero; N_GATHERED]; 2];
    let dist = [u, v];
    for o in 0..2 {
        let row = &mut jac[o];
        for j in 0..3 {
            row[j] = g[o][0] * drot[0][j] + g[o][1] * drot[1][j] + g[o][2] * drot[2][j];
            let gr = g[o][0] * rot[0][j] + g[o][1] * rot[1][j] + g[o][2] * rot[2][j];
            row[3 + j] = -gr;
            row[11 + j] = gr;
        }
        row[6] = w * (if o == 0 { pu } else { pv });
        row[7] = if o == 0 { w } else { zero };
        row[8] = if o == 0 { zero } else { w };
        row[9] = wf * dist[o] * rsq;
        row[10] = wf * dist[o] * rsq * rsq;
        row[14] = proj[o] - feat[o];
    }
    (err, jac)
}

/// The hand-derived residuals and Jacobian in `T` (rayon over observations).
pub fn manual<T: Elem>(b: &BaInput) -> BaOutput {
    manual_with::<T>(b, &BaPattern::new(b.n, b.m, &b.obs))
}

/// [`manual`] with the problem's pattern built beforehand (as [`upload`] does for the AD
/// engines): each observation's residuals and 30 Jacobian entries are written in place.
pub fn manual_with<T: Elem>(b: &BaInput, pattern: &BaPattern) -> BaOutput {
    let t = |v: &[f64]| v.iter().map(|&x| T::of_f64(x)).collect::<Vec<T>>();
    let (cams, pts, w, feats) = (t(&b.cams), t(&b.x), t(&b.w), t(&b.feats));
    let per_obs = 2 * N_GATHERED;
    let mut vals = vec![0.0; per_obs * b.p + b.p];
    let mut reproj_err = vec![0.0; 2 * b.p];
    let (rvals, wvals) = vals.split_at_mut(per_obs * b.p);
    rvals
        .par_chunks_mut(per_obs)
        .zip(reproj_err.par_chunks_mut(2))
        .enumerate()
        .with_min_len(MIN_OBS_PER_TASK)
        .for_each(|(i, (v, e))| {
            let (c, j) = b.obs[i];
            let (err, jac) = observation(
                &cams[N_CAM_PARAMS * c..N_CAM_PARAMS * (c + 1)],
                &pts[3 * j..3 * j + 3],
                w[i],
                [feats[2 * i], feats[2 * i + 1]],
            );
            for (dst, src) in v.iter_mut().zip(jac.iter().flatten()) {
                *dst = src.as_f64();
            }
            e[0] = err[0].as_f64();
            e[1] = err[1].as_f64();
        });
    for (v, &wi) in wvals.iter_mut().zip(&w) {
        *v = (-T::of_f64(2.0) * wi).as_f64();
    }
    BaOutput {
        reproj_err,
        w_err: w.iter().map(|&x| (T::one() - x * x).as_f64()).collect(),
        jacobian: Some(SparseJacobian { pattern: pattern.clone(), vals }),
    }
}

/// The residuals alone in plain `T` (the manual primal).
pub fn manual_objective<T: Elem>(b: &BaInput) -> (Vec<f64>, Vec<f64>) {
    let t = |v: &[f64]| v.iter().map(|&x| T::of_f64(x)).collect::<Vec<T>>();
    let (cams, pts, w, feats) = (t(&b.cams), t(&b.x), t(&b.w), t(&b.feats));
    let reproj: Vec<f64> = (0..b.p)
        .into_par_iter()
        .with_min_len(MIN_OBS_PER_TASK)
        .flat_map_iter(|i| {
            let (c, j) = b.obs[i];
            let cam = &cams[N_CAM_PARAMS * c..N_CAM_PARAMS * (c + 1)];
            let proj = project(cam, &pts[3 * j..3 * j + 3]);
            [(w[i] * (proj[0] - feats[2 * i])).as_f64(), (w[i] * (proj[1] - feats[2 * i + 1])).as_f64()]
        })
        .collect();
    (reproj, w.iter().map(|&x| (T::one() - x * x).as_f64()).collect())
}

/// ADBench's `project` in `T`.
fn project<T: Elem>(cam: &[T], pt: &[T]) -> [T; 2] {
    let one = T::one();
    let cross =
        |a: [T; 3], b: [T; 3]| [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let r = [cam[0], cam[1], cam[2]];
    let xo = [pt[0] - cam[3], pt[1] - cam[4], pt[2] - cam[5]];
    let sqtheta = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    let xc: [T; 3] = if sqtheta != T::zero() {
        let theta = sqtheta.sqrt();
        let (c, s) = (theta.cos(), theta.sin());
        let inv = one / theta;
        let a = [r[0] * inv, r[1] * inv, r[2] * inv];
        let axo = cross(a, xo);
        let tmp = (a[0] * xo[0] + a[1] * xo[1] + a[2] * xo[2]) * (one - c);
        std::array::from_fn(|i| xo[i] * c + axo[i] * s + a[i] * tmp)
    } else {
        let rxo = cross(r, xo);
        std::array::from_fn(|i| xo[i] + rxo[i])
    };
    let (u, v) = (xc[0] / xc[2], xc[1] / xc[2]);
    let rsq = u * u + v * v;
    let l = one + cam[9] * rsq + cam[10] * rsq * rsq;
    [u * l * cam[6] + cam[7], v * l * cam[6] + cam[8]]
}

/// [`manual`] in the dtype under test.
pub fn manual_in(b: &BaInput, dtype: DType) -> BaOutput {
    match dtype {
        DType::F32 => manual::<f32>(b),
        DType::F64 => manual::<f64>(b),
    }
}

/// Most Jacobian entries `adgauge eval ba` prints (31 per observation): ADBench's largest file
/// (ba20, p = 28987644) would need about 14 GB for its Jacobian and a JSON text many times that.
pub const MAX_EVAL_JACOBIAN_ENTRIES: usize = 1 << 27;

/// Validation size, on a problem with distinct values (see [`BaFlat`]).
const CHECK: [(&str, u64); 3] = [("n", 3), ("m", 10), ("p", 30)];

/// BA's memory: about 1700 bytes per observation (its residuals, the tape of the projection and
/// the gathered parameters; p = 4e7 took more than 23 GB in primal mode) plus the cameras and
/// points.
pub(crate) fn ba_footprint(n: usize, m: usize, p: usize) -> crate::workload::Footprint {
    let (n, m, p) = (n as u128, m as u128, p as u128);
    crate::workload::Footprint {
        bytes: 1700 * p + 8 * (11 * n + 3 * m),
        key: "sizes",
        formula: "about 1700 bytes per observation (p*1700) + 8*(11n + 3m)",
    }
}

/// Bundle adjustment in the registry: `workload: ba` with listed (n cameras, m points, p
/// observations) triples, generated as ADBench's replicated files are.
pub struct Ba;

impl Workload for Ba {
    fn family(&self) -> &'static str {
        "ba"
    }
    fn about(&self) -> &'static str {
        "ADBench's bundle adjustment residuals and their sparse Jacobian"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![ParamSpec {
            key: "sizes",
            kind: ParamKind::Tuples { names: &["n", "m", "p"], min: 1, max: 1 << 30 },
            default: None,
            column: None,
            legacy: None,
            doc: "(n cameras, m points, p observations) triples, listed (not a product)",
        }]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn footprint(&self, p: &Params) -> Option<crate::workload::Footprint> {
        Some(ba_footprint(p.int("n").ok()?, p.int("m").ok()?, p.int("p").ok()?))
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        Ok(Box::new(BaProblem { n: p.int("n")?, m: p.int("m")?, p: p.int("p")?, seed }))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let b = BaInput::parse(&req.text, &req.source).map_err(|e| WorkloadError::BadInput(e.to_string()))?;
        let mode = req.mode.unwrap_or(Mode::Primal);
        crate::validate::validate(&b, &req.source, req.dtype)?;
        let entries = (2 * N_GATHERED + 1).saturating_mul(b.p);
        if mode != Mode::Primal && entries > MAX_EVAL_JACOBIAN_ENTRIES {
            return Err(WorkloadError::BadInput(format!(
                "{}: the Jacobian of p = {} observations has {entries} entries, more than eval prints \
                 ({MAX_EVAL_JACOBIAN_ENTRIES}); use --mode primal, or time it in a suite (workload: ba)",
                req.source, b.p
            )));
        }
        let dt = req.dtype;
        let input = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &b, dt).map_err(input)?;
            let out = match mode {
                Mode::Primal => objective(d, &x),
                Mode::Vjp => jacobian_reverse(d, &x),
                Mode::Jvp | Mode::HessianDiag => jacobian_forward(d, &x),
            }
            .map_err(input)?;
            Ok(format_output(&out, dt))
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("ba")
    }
    /// GradBench's `ba`: `objective` and `jacobian`, on its replicated input (outputs in its
    /// compressed shapes) or on adgauge's extension with full arrays (outputs in full); see
    /// [`parse_gradbench_input`].
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("ba.{function} input");
        let mode = match function {
            "objective" => Mode::Primal,
            "jacobian" => Mode::Vjp,
            other => {
                return Err(WorkloadError::BadInput(format!("ba: no function '{other}' (known: objective, jacobian)")));
            }
        };
        let (b, full) = parse_gradbench_input(input, &source)?;
        crate::validate::validate(&b, &source, dtype)?;
        let entries = (2 * N_GATHERED + 1).saturating_mul(b.p);
        if mode == Mode::Vjp && entries > MAX_EVAL_JACOBIAN_ENTRIES {
            return Err(WorkloadError::BadInput(format!(
                "{source}: the Jacobian of p = {} observations has {entries} entries, more than adgauge computes \
                 for one message ({MAX_EVAL_JACOBIAN_ENTRIES})",
                b.p
            )));
        }
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &b, dtype).map_err(bad)?;
            let out = match mode {
                Mode::Primal => objective(d, &x),
                _ => jacobian_reverse(d, &x),
            }
            .map_err(bad)?;
            Ok(gradbench_output(&out, full, dtype))
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("p") {
            Some(p) => format!("{name} p={p}"),
            None => name.to_string(),
        }
    }
}

/// The JSON object of `adgauge eval ba`: `{"reproj_err": [2p], "w_err": [p]}`, with
/// `"jacobian": {"nrows", "ncols", "rows", "cols", "vals"}` (ADBench's CSR layout) when computed.
pub fn format_output(out: &BaOutput, dt: DType) -> String {
    let mut s =
        format!("{{\"reproj_err\": {}, \"w_err\": {}", format_array(&out.reproj_err, dt), format_array(&out.w_err, dt));
    if let Some(j) = &out.jacobian {
        s += &format!(", \"jacobian\": {}", jacobian_json(j, dt));
    }
    s + "}"
}

/// A sparse Jacobian as `{"nrows", "ncols", "rows", "cols", "vals"}` (ADBench's CSR layout).
fn jacobian_json(j: &SparseJacobian, dt: DType) -> String {
    format!(
        "{{\"nrows\": {}, \"ncols\": {}, \"rows\": {}, \"cols\": {}, \"vals\": {}}}",
        j.pattern.nrows,
        j.pattern.ncols,
        ints_json(&j.pattern.rows),
        ints_json(&j.pattern.cols),
        format_array(&j.vals, dt)
    )
}

fn ints_json(xs: &[usize]) -> String {
    format!("[{}]", xs.iter().map(usize::to_string).collect::<Vec<_>>().join(", "))
}

/// Entries GradBench keeps of BA's Jacobian (in each of rows, cols and vals): the first 30
/// (observation 0's two rows) and the last.
pub const GRADBENCH_KEPT: usize = 2 * N_GATHERED + 1;

/// GradBench's `ba` input for a problem: `{"n", "m", "p", "cam": [11], "x": [3], "w", "feat":
/// [2]}`, which stands for the problem that replicates them (observation i = (i mod n, i mod m)).
/// With `full`, adgauge's extension is added: `"full": {"cams": [n rows of 11], "x": [m rows of
/// 3], "w": [p], "feats": [p rows of 2], "obs": [p rows of 2 (camera, point)]}`, the problem
/// itself (GradBench's fields then hold its first camera, point, weight and feature, so that a
/// tool that does not know the extension still reads a well-formed input).
pub fn gradbench_input(b: &BaInput, full: bool) -> Json {
    let mut input = serde_json::json!({
        "n": b.n, "m": b.m, "p": b.p,
        "cam": &b.cams[..N_CAM_PARAMS.min(b.cams.len())], "x": &b.x[..3.min(b.x.len())],
        "w": b.w.first().copied().unwrap_or(1.0), "feat": &b.feats[..2.min(b.feats.len())],
    });
    if full {
        let obs: Vec<[usize; 2]> = b.obs.iter().map(|&(c, j)| [c, j]).collect();
        input["full"] = serde_json::json!({
            "cams": rows_json(&b.cams, N_CAM_PARAMS), "x": rows_json(&b.x, 3), "w": b.w,
            "feats": rows_json(&b.feats, 2), "obs": obs,
        });
    }
    input
}

/// Reads GradBench's `ba` input (see [`gradbench_input`]): the problem, and whether it came as
/// adgauge's extension with full arrays.
pub fn parse_gradbench_input(input: &Json, source: &str) -> WResult<(BaInput, bool)> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let size = |f: &str| {
        input
            .get(f)
            .and_then(Json::as_u64)
            .filter(|&v| v > 0)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| bad(format!("field {f}: expected a positive whole number")))
    };
    let (n, m, p) = (size("n")?, size("m")?, size("p")?);
    // Before anything is replicated (the whole check is `validate`'s, after parsing).
    ba_footprint(n, m, p).check().map_err(|msg| bad(format!("sizes n m p = {n} {m} {p}: {msg}")))?;
    let numbers = |v: Option<&Json>, field: &str, len: Option<usize>| -> WResult<Vec<f64>> {
        let Some(Json::Array(xs)) = v else {
            return Err(bad(format!("field {field}: expected an array of numbers")));
        };
        if len.is_some_and(|l| l != xs.len()) {
            return Err(bad(format!("field {field}: {} numbers, expected {}", xs.len(), len.unwrap_or(0))));
        }
        xs.iter()
            .enumerate()
            .map(|(i, x)| match parse_number(x) {
                Ok(x) if x.is_finite() => Ok(x),
                Ok(x) => Err(bad(format!("field {field}[{i}]: must be finite, got {x}"))),
                Err(e) => Err(bad(format!("field {field}[{i}]: {e}"))),
            })
            .collect()
    };
    let cam = numbers(input.get("cam"), "cam", Some(N_CAM_PARAMS))?;
    let x = numbers(input.get("x"), "x", Some(3))?;
    let feat = numbers(input.get("feat"), "feat", Some(2))?;
    let w = match input.get("w").map(parse_number) {
        Some(Ok(w)) if w.is_finite() => w,
        _ => return Err(bad("field w: expected a finite number".into())),
    };
    let b = match input.get("full") {
        None => {
            // The replication is built in memory: bound it as ADBench's reader does.
            let elements = (N_CAM_PARAMS as u64)
                .saturating_mul(n as u64)
                .saturating_add(3 * m as u64)
                .saturating_add(5 * p as u64);
            if elements > adgauge_datasets::MAX_REPLICATED_ELEMENTS {
                return Err(bad(format!(
                    "n = {n}, m = {m}, p = {p} replicate to {elements} numbers, more than {}",
                    adgauge_datasets::MAX_REPLICATED_ELEMENTS
                )));
            }
            BaInput {
                n,
                m,
                p,
                cams: cam.repeat(n),
                x: x.repeat(m),
                w: vec![w; p],
                obs: (0..p).map(|i| (i % n, i % m)).collect(),
                feats: feat.repeat(p),
            }
        }
        Some(full) => {
            let src = format!("{source}: full");
            let rows = |field: &str, width: usize, want: usize, what: &str| -> WResult<Vec<f64>> {
                let (count, _, xs) = parse_rows(full, field, &src, Some(width))?;
                if count != want {
                    return Err(bad(format!("field full.{field}: {count} rows, expected {what} = {want}")));
                }
                Ok(xs)
            };
            let cams = rows("cams", N_CAM_PARAMS, n, "n")?;
            let pts = rows("x", 3, m, "m")?;
            let feats = rows("feats", 2, p, "p")?;
            let ws = numbers(full.get("w"), "full.w", Some(p))?;
            let Some(Json::Array(obs)) = full.get("obs") else {
                return Err(bad("field full.obs: expected p rows of 2 whole numbers (camera, point)".into()));
            };
            if obs.len() != p {
                return Err(bad(format!("field full.obs: {} rows, expected p = {p}", obs.len())));
            }
            let obs = obs
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    let pair = o.as_array().filter(|a| a.len() == 2).map(|a| (a[0].as_u64(), a[1].as_u64()));
                    match pair {
                        Some((Some(c), Some(j))) if (c as usize) < n && (j as usize) < m => {
                            Ok((c as usize, j as usize))
                        }
                        _ => Err(bad(format!(
                            "field full.obs[{i}]: expected [camera < n = {n}, point < m = {m}], got {o}"
                        ))),
                    }
                })
                .collect::<WResult<_>>()?;
            BaInput { n, m, p, cams, x: pts, w: ws, obs, feats }
        }
    };
    b.validate().map_err(|e| bad(e.to_string()))?;
    Ok((b, input.get("full").is_some()))
}

/// GradBench's `ba` outputs. Full (adgauge's extension): `objective` is `{"reproj_err": [2p],
/// "w_err": [p]}` and `jacobian` `{"nrows", "ncols", "rows", "cols", "vals"}` (ADBench's CSR,
/// as `adgauge eval ba`). Compressed (GradBench's, for its replicated input): `objective` is
/// `{"reproj_error": {"elements": [2], "repeated": p}, "w_err": {"element", "repeated": p}}`
/// and `jacobian` keeps the first 30 and the last entry of rows, cols and vals.
fn gradbench_output(out: &BaOutput, full: bool, dt: DType) -> String {
    match (&out.jacobian, full) {
        (None, true) => format_output(out, dt),
        (Some(j), true) => jacobian_json(j, dt),
        (None, false) => format!(
            "{{\"reproj_error\": {{\"elements\": {}, \"repeated\": {}}}, \"w_err\": {{\"element\": {}, \"repeated\": {}}}}}",
            format_array(&out.reproj_err[..2.min(out.reproj_err.len())], dt),
            out.reproj_err.len() / 2,
            format_number(out.w_err.first().copied().unwrap_or(f64::NAN), dt),
            out.w_err.len()
        ),
        (Some(j), false) => {
            let kept = |len: usize| (0..len.min(GRADBENCH_KEPT - 1)).chain(len.checked_sub(1)).collect::<Vec<_>>();
            let rows: Vec<usize> = kept(j.pattern.rows.len()).into_iter().map(|i| j.pattern.rows[i]).collect();
            let cols: Vec<usize> = kept(j.pattern.cols.len()).into_iter().map(|i| j.pattern.cols[i]).collect();
            let vals: Vec<f64> = kept(j.vals.len()).into_iter().map(|i| j.vals[i]).collect();
            format!(
                "{{\"rows\": {}, \"cols\": {}, \"vals\": {}}}",
                ints_json(&rows),
                ints_json(&cols),
                format_array(&vals, dt)
            )
        }
    }
}

/// A tool's `jacobian` output as a dense matrix (row-major, 3p x (11n + 3m + p)) of the problem
/// `b` it was asked about. Full outputs may be any CSR of that size (entries of one cell are
/// added); GradBench's compressed output (31 entries, for a replicated problem) must keep
/// ADBench's layout, and observation 0's block and the last weight derivative stand for all
/// (the replication the format assumes). `Ok(None)`: the output is compressed but `b` was sent
/// in full (the tool does not read adgauge's extension).
fn remote_jacobian(out: &Json, b: &BaInput, full: bool) -> Result<Option<Vec<f64>>> {
    let bad = |m: String| OpError::Device(format!("ba.jacobian output: {m}"));
    let ints = |field: &str| -> Result<Vec<usize>> {
        let Some(Json::Array(xs)) = out.get(field) else {
            return Err(bad(format!("field {field}: missing or not an array in {}", crate::json::kind(out))));
        };
        xs.iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .ok_or_else(|| bad(format!("field {field}[{i}]: expected a whole number, got {v}")))
            })
            .collect()
    };
    let (rows, cols) = (ints("rows")?, ints("cols")?);
    let Some(Json::Array(vals)) = out.get("vals") else {
        return Err(bad("field vals: missing or not an array".into()));
    };
    let vals: Vec<f64> = vals
        .iter()
        .enumerate()
        .map(|(i, v)| parse_number(v).map_err(|e| bad(format!("field vals[{i}]: {e}"))))
        .collect::<Result<_>>()?;
    // adgauge's problems project every point in front of every camera: the Jacobian is finite,
    // and a NaN or infinity is a broken output, named here rather than as a check's infinite
    // discrepancy.
    if let Some((i, v)) = vals.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(bad(format!("field vals[{i}]: {v} (the Jacobian is finite at this point)")));
    }
    let pattern = BaPattern::new(b.n, b.m, &b.obs);
    let (nrows, ncols) = (pattern.nrows, pattern.ncols);
    if cols.len() != vals.len() {
        return Err(bad(format!("fields cols and vals: {} and {} entries, expected as many", cols.len(), vals.len())));
    }
    let compressed = b.p > 1 && cols.len() == GRADBENCH_KEPT;
    if compressed {
        if full {
            return Ok(None);
        }
        // The layout is ADBench's: the kept entries of the pattern, exactly.
        let kept = |xs: &[usize]| xs.iter().take(GRADBENCH_KEPT - 1).chain(xs.last()).copied().collect::<Vec<_>>();
        for (field, got, want) in [("rows", &rows, kept(&pattern.rows)), ("cols", &cols, kept(&pattern.cols))] {
            if *got != want {
                return Err(bad(format!("field {field}: {got:?} is not ADBench's layout {want:?}")));
            }
        }
        let block = &vals[..GRADBENCH_KEPT - 1];
        let wd = vals[GRADBENCH_KEPT - 1];
        return Ok(Some(pattern.fill(|_, out| out.copy_from_slice(block), |_| wd).to_dense()));
    }
    if rows.len() != nrows + 1 {
        return Err(bad(format!("field rows: {} row pointers, expected 3p + 1 = {}", rows.len(), nrows + 1)));
    }
    if rows[0] != 0 || rows.windows(2).any(|w| w[0] > w[1]) || rows[nrows] != cols.len() {
        return Err(bad(format!(
            "field rows: not CSR row pointers (from 0, non-decreasing, ending at the {} entries)",
            cols.len()
        )));
    }
    if let Some((i, c)) = cols.iter().enumerate().find(|(_, c)| **c >= ncols) {
        return Err(bad(format!("field cols[{i}]: column {c}, but there are {ncols} (11n + 3m + p)")));
    }
    let mut dense = vec![0.0; nrows * ncols];
    for r in 0..nrows {
        for k in rows[r]..rows[r + 1] {
            dense[r * ncols + cols[k]] += vals[k];
        }
    }
    Ok(Some(dense))
}

/// The validation of a tool's Jacobian of `b`: the generic checks on it and the comparison with
/// the hand-derived Jacobian (labelled with `convention` where the input was replicated).
fn given_jacobian_validation(cpu: &Cpu, b: &BaInput, dense: Vec<f64>, convention: Option<String>) -> Validation {
    let flat = BaFlat::new(cpu.clone(), cpu.clone(), DType::F64, b);
    let want = manual::<f64>(b).jacobian.map(|j| j.to_dense()).unwrap_or_default();
    let manual = Comparison { check: CheckKind::Manual, got: dense.clone(), want, convention };
    // The tool's columns are in the input's units; BaFlat's in its own (`scale`).
    let column_scale = Some(flat.scale.clone());
    let flat = crate::workload::GivenJacobian { flat, dense, column_scale };
    Validation { flat: Box::new(flat), full_jacobian: None, comparisons: vec![manual] }
}

/// A BA case: problems are generated when needed, ADBench-like (replicated, as the ADBench
/// files are) for timing and with distinct values for validation (replicated values would hide
/// indexing mistakes).
struct BaProblem {
    n: usize,
    m: usize,
    p: usize,
    seed: u64,
}

impl Problem for BaProblem {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        let BaProblem { n, m, p, seed } = *self;
        let input = BaInput::generate(n, m, p, seed);
        with_device!(device, |d| Ok(Box::new(BaPrepared {
            device: d.clone(),
            x: upload(d, &input, dtype)?,
            traces: ModeTraces::default()
        }) as Box<dyn Prepared>))
    }

    /// GradBench's `ba` on the timed problem (replicated, as GradBench sends it): `objective` as
    /// primal, `jacobian` as vjp (the module has one Jacobian: no forward mode of its own).
    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let function = match mode {
            Mode::Primal => "objective",
            Mode::Vjp => "jacobian",
            Mode::Jvp | Mode::HessianDiag => return None,
        };
        let BaProblem { n, m, p, seed } = *self;
        Some(RemoteCall { function: function.into(), input: gradbench_input(&BaInput::generate(n, m, p, seed), false) })
    }

    /// The tool's Jacobian on the problem with distinct values (sent with adgauge's `full`
    /// extension) against finite differences of the f64 primal and the hand-derived Jacobian,
    /// and in the dot-product test. A tool that answers in GradBench's compressed shape does not
    /// read the extension: it is validated on the replicated problem instead, and the comparison
    /// says so (a convention: replicated values cannot show indexing mistakes).
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, _s: &CheckSettings) -> WResult<Validation> {
        let BaProblem { n, m, p, seed } = *self;
        let varied = BaInput::generate_varied(n, m, p, seed);
        let out = remote.call("jacobian", gradbench_input(&varied, true))?;
        if let Some(dense) = remote_jacobian(&out, &varied, true)? {
            return Ok(given_jacobian_validation(cpu, &varied, dense, None));
        }
        let replicated = BaInput::generate(n, m, p, seed);
        let out = remote.call("jacobian", gradbench_input(&replicated, false))?;
        let dense = remote_jacobian(&out, &replicated, false)?
            .ok_or_else(|| OpError::Device("ba.jacobian output: compressed for a replicated input".into()))?;
        let note =
            "replicated input only (the tool answers GradBench's compressed Jacobian, not adgauge's full arrays)";
        Ok(given_jacobian_validation(cpu, &replicated, dense, Some(note.into())))
    }

    /// The generic checks, the full Jacobian by one-hot VJPs against one-hot JVPs, and the sparse
    /// Jacobians by reverse and by forward sweeps against the hand-derived one.
    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        let BaProblem { n, m, p, seed } = *self;
        let input = BaInput::generate_varied(n, m, p, seed);
        with_device!(device, |d| {
            let dt = s.dtype;
            let f = BaFlat::new(d.clone(), cpu.clone(), dt, &input);
            let [reverse, forward, manual] = f.jacobians()?;
            let fd = f.fd_jacobian()?;
            let comparisons = vec![
                Comparison { check: CheckKind::Manual, got: reverse.clone(), want: manual.clone(), convention: None },
                Comparison { check: CheckKind::ManualJvp, got: forward.clone(), want: manual, convention: None },
                Comparison { check: CheckKind::FdJacobian, got: reverse, want: fd.clone(), convention: None },
                Comparison { check: CheckKind::FdJacobian, got: forward, want: fd, convention: None },
            ];
            // In f32 the rotation columns are ill-conditioned: d err / d r is a sum of terms about
            // a hundred times larger than itself (cancellation in d Xc / d r), so two correct f32
            // sweeps (one-hot VJPs and JVPs) differ by up to about 2e-5 there, as each differs
            // from the f64 Jacobian. The f32 bound of the comparisons with a reference applies.
            let tolerance_of = if dt == DType::F32 { CheckKind::Manual } else { CheckKind::FullJacobian };
            let full = BaFlat::new(d.clone(), cpu.clone(), dt, &input);
            Ok(Validation {
                flat: Box::new(f),
                full_jacobian: Some(FullJacobian { flat: Box::new(full), tolerance_of }),
                comparisons,
            })
        })
    }
}

/// Timed modes: primal = the residuals, vjp = the Jacobian by reverse sweeps, jvp = by forward
/// sweeps (results read back and dropped).
struct BaPrepared<D: Device> {
    device: D,
    x: BaInputs<D>,
    traces: ModeTraces,
}

impl<D: Device> Prepared for BaPrepared<D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, x) = (&self.device, &self.x);
        self.traces.run(d, mode, &mut || -> WResult<()> {
            drop(match mode {
                Mode::Primal => objective(d, x)?,
                Mode::Vjp => jacobian_reverse(d, x)?,
                Mode::Jvp | Mode::HessianDiag => jacobian_forward(d, x)?,
            });
            Ok(())
        })
    }
}

/// BA as a flat function: x = [cams (11n), points (3m), weights (p)], y = [reproj_err (2p, x and
/// y per observation), w_err (p)], at a point rounded to the dtype under test.
///
/// BA's parameters span four orders of magnitude (rotations about 0.05, focal lengths about
/// 1000), and the finite differences of validation take one step for all coordinates, scaled by
/// the largest: a step suited to f would swamp the rotations in truncation error. So the flat
/// function sees every coordinate in its own unit, a power of two `scale[k]` near its magnitude
/// (x = scale * x_flat). Scaling by powers of two is exact, so the checks validate exactly
/// J diag(scale): `jvp(v) = J (scale * v)`, `vjp(w) = scale * J^T w`.
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
        let input = BaInput {
            cams: rounded(&input.cams, dtype),
            x: rounded(&input.x, dtype),
            w: rounded(&input.w, dtype),
            feats: rounded(&input.feats, dtype),
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

    fn uploaded(&self) -> Result<BaInputs<D>> {
        upload(&self.device, &self.input, self.dtype)
    }

    /// The dense Jacobian (row-major 3p x n_in) by central finite differences of the f64
    /// residuals on the CPU, one column at a time, each coordinate with its own step
    /// h = cbrt(eps) max(|x|, 1) made representable: the reverse, forward and hand-derived
    /// Jacobians are all assembled through the sparsity pattern, so this is the reference that
    /// sees a pattern bug (a column block with the wrong stride).
    pub fn fd_jacobian(&self) -> Result<Vec<f64>> {
        let raw: Vec<f64> = self.x0.iter().zip(&self.scale).map(|(v, s)| v * s).collect();
        let (n_in, n_out) = (raw.len(), self.n_out());
        let residuals = |x: &[f64]| -> Result<Vec<f64>> {
            let unit: Vec<f64> = x.iter().zip(&self.scale).map(|(v, s)| v / s).collect();
            self.eval_f64(&unit)
        };
        let mut dense = vec![0.0; n_out * n_in];
        for c in 0..n_in {
            let s = raw[c].abs().max(1.0);
            let h = (s + f64::EPSILON.cbrt() * s) - s;
            let mut x = raw.clone();
            x[c] = raw[c] + h;
            let plus = residuals(&x)?;
            x[c] = raw[c] - h;
            let minus = residuals(&x)?;
            for r in 0..n_out {
                dense[r * n_in + c] = (plus[r] - minus[r]) / (2.0 * h);
            }
        }
        Ok(dense)
    }

    /// The dense Jacobians (row-major 3p x n_in) by reverse sweeps, by forward sweeps and by hand.
    pub fn jacobians(&self) -> Result<[Vec<f64>; 3]> {
        let x = self.uploaded()?;
        let dense = |o: BaOutput| o.jacobian.map(|j| j.to_dense()).unwrap_or_default();
        Ok([
            dense(jacobian_reverse(&self.device, &x)?),
            dense(jacobian_forward(&self.device, &x)?),
            dense(manual_in(&self.input, self.dtype)),
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
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        let b = upload(&self.cpu, &self.at(x), DType::F64)?;
        let out = objective(&self.cpu, &b)?;
        Ok(out.reproj_err.into_iter().chain(out.w_err).collect())
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let g = vjp(&self.device, &self.uploaded()?, w)?;
        Ok(g.iter().zip(&self.scale).map(|(g, s)| g * s).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let v: Vec<f64> = v.iter().zip(&self.scale).map(|(v, s)| v * s).collect();
        jvp(&self.device, &self.uploaded()?, &v)
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        // Smooth near x0: the only branch (the small-angle fallback) is taken at a rotation of
        // exactly zero, and the validation problems have none.
        None
    }
}

impl CheckedInput for BaInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("cams", &self.cams), ("x", &self.x), ("w", &self.w), ("feats", &self.feats)]
    }
    fn footprint(&self) -> Option<(String, crate::workload::Footprint)> {
        let fields = format!("sizes n m p = {} {} {}", self.n, self.m, self.p);
        Some((fields, crate::ba::ba_footprint(self.n, self.m, self.p)))
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;
    use adgauge_testkit::adbench_file;

    use super::*;

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs() / (x.abs() + y.abs()).max(1.0)).fold(0.0, f64::max)
    }

    fn cpu() -> Cpu {
        Cpu::new(Some(2)).unwrap()
    }

    /// The finite-difference Jacobian (no sparsity pattern) is the hand-derived one, and tells a
    /// pattern whose point columns have the wrong stride (2 for 3), which every Jacobian built
    /// through the pattern shares, from the right one.
    #[test]
    fn the_fd_jacobian_matches_the_manual_one_and_sees_a_wrong_pattern_stride() {
        let b = BaInput::generate_varied(3, 10, 30, 4);
        let f = BaFlat::new(cpu(), cpu(), DType::F64, &b);
        let fd = f.fd_jacobian().unwrap();
        let good = manual_with::<f64>(&b, &BaPattern::new(b.n, b.m, &b.obs)).jacobian.unwrap().to_dense();
        assert!(max_rel(&fd, &good) < 1e-6, "{}", max_rel(&fd, &good));
        let pattern = BaPattern::new(b.n, b.m, &b.obs);
        let first_point = N_CAM_PARAMS * b.n;
        let cols: Vec<usize> = pattern
            .cols
            .iter()
            .map(|&c| {
                if (first_point..first_point + 3 * b.m).contains(&c) {
                    first_point + (c - first_point) / 3 * 2 + (c - first_point) % 3
                } else {
                    c
                }
            })
            .collect();
        let bad = BaPattern { cols: cols.into(), ..pattern };
        let wrong = manual_with::<f64>(&b, &bad).jacobian.unwrap().to_dense();
        assert!(max_rel(&fd, &wrong) > 0.1, "{}", max_rel(&fd, &wrong));
    }

    /// The columns row `r` of the ADBench layout must hold, in order.
    fn expected_cols(b: &BaInput, r: usize) -> Vec<usize> {
        let wcol = 11 * b.n + 3 * b.m;
        if r >= 2 * b.p {
            return vec![wcol + r - 2 * b.p];
        }
        let i = r / 2;
        let (c, j) = b.obs[i];
        (11 * c..11 * c + 11).chain(wcol - 3 * b.m + 3 * j..wcol - 3 * b.m + 3 * j + 3).chain([wcol + i]).collect()
    }

    fn check_structure(b: &BaInput, j: &SparseJacobian) {
        let pat = &j.pattern;
        assert_eq!((pat.nrows, pat.ncols), (3 * b.p, 11 * b.n + 3 * b.m + b.p));
        assert_eq!(pat.rows.len(), 3 * b.p + 1);
        for r in 0..=2 * b.p {
            assert_eq!(pat.rows[r], 15 * r);
        }
        for r in 0..pat.nrows {
            assert_eq!(pat.cols[pat.rows[r]..pat.rows[r + 1]], expected_cols(b, r), "row {r}");
        }
        assert_eq!(*pat.rows.last().unwrap(), 31 * b.p);
        assert_eq!((pat.cols.len(), j.vals.len()), (31 * b.p, 31 * b.p));
    }

    /// The whole function [cams, x, w] -> [reproj_err, w_err] of the manual primal in f64.
    fn eval_flat(b: &BaInput, v: &[f64]) -> Vec<f64> {
        let (nc, nx) = (11 * b.n, 3 * b.m);
        let q = BaInput { cams: v[..nc].to_vec(), x: v[nc..nc + nx].to_vec(), w: v[nc + nx..].to_vec(), ..b.clone() };
        let (mut r, w) = manual_objective::<f64>(&q);
        r.extend(w);
        r
    }

    fn flat_inputs(b: &BaInput) -> Vec<f64> {
        b.cams.iter().chain(&b.x).chain(&b.w).copied().collect()
    }

    /// Central differences of the primal along column `col`, compared with the dense Jacobian.
    fn check_fd_columns(b: &BaInput, dense: &[f64], ncols: usize, cols: &[usize], tol: f64) {
        let x0 = flat_inputs(b);
        for &c in cols {
            let h = 1e-6 * x0[c].abs().max(1.0);
            let (mut xp, mut xm) = (x0.clone(), x0.clone());
            xp[c] += h;
            xm[c] -= h;
            let (fp, fm) = (eval_flat(b, &xp), eval_flat(b, &xm));
            for r in 0..3 * b.p {
                let fd = (fp[r] - fm[r]) / (2.0 * h);
                let ad = dense[r * ncols + c];
                assert!((fd - ad).abs() <= tol * fd.abs().max(ad.abs()).max(1.0), "J[{r}][{c}] = {ad}, fd {fd}");
            }
        }
    }

    #[test]
    fn reverse_forward_and_manual_jacobians_agree_on_varied_problems() {
        let cpu = cpu();
        for (seed, (n, m, p)) in [(1u64, (3, 10, 30)), (2, (5, 7, 40)), (3, (1, 1, 3))] {
            let b = BaInput::generate_varied(n, m, p, seed);
            let x = upload(&cpu, &b, DType::F64).unwrap();
            let man = manual::<f64>(&b);
            let jm = man.jacobian.as_ref().unwrap();
            check_structure(&b, jm);
            let (want_r, want_w) = manual_objective::<f64>(&b);
            assert_eq!((man.reproj_err.clone(), man.w_err.clone()), (want_r.clone(), want_w.clone()));
            let prim = objective(&cpu, &x).unwrap();
            assert!(max_rel(&prim.reproj_err, &want_r) < 1e-13 && max_rel(&prim.w_err, &want_w) < 1e-15);
            for out in [jacobian_reverse(&cpu, &x).unwrap(), jacobian_forward(&cpu, &x).unwrap()] {
                assert!(max_rel(&out.reproj_err, &want_r) < 1e-13);
                let j = out.jacobian.unwrap();
                check_structure(&b, &j);
                assert!(max_rel(&j.vals, &jm.vals) < 1e-12, "{}", max_rel(&j.vals, &jm.vals));
            }
            // The weight rows: d(1 - w^2)/dw = -2w.
            for i in 0..p {
                assert_eq!(jm.vals[30 * p + i], -2.0 * b.w[i]);
            }
        }
    }

    #[test]
    fn gradbench_inputs_round_trip_in_both_forms() {
        let rep = BaInput::generate(3, 4, 7, 2);
        let (back, full) = parse_gradbench_input(&gradbench_input(&rep, false), "in").unwrap();
        assert_eq!((back, full), (rep.clone(), false));
        let varied = BaInput::generate_varied(3, 4, 7, 2);
        let (back, full) = parse_gradbench_input(&gradbench_input(&varied, true), "in").unwrap();
        assert_eq!((back, full), (varied.clone(), true));
        // Malformed inputs name the field.
        let mut bad = gradbench_input(&varied, true);
        bad["full"]["obs"][2] = serde_json::json!([3, 0]);
        let e = parse_gradbench_input(&bad, "in").unwrap_err().to_string();
        assert!(e.contains("full.obs[2]") && e.contains("camera < n = 3"), "{e}");
        let mut bad = gradbench_input(&varied, true);
        bad["full"]["w"] = serde_json::json!([1.0]);
        assert!(parse_gradbench_input(&bad, "in").unwrap_err().to_string().contains("full.w: 1 numbers, expected 7"));
        let mut bad = gradbench_input(&rep, false);
        bad["cam"] = serde_json::json!([1, 2]);
        assert!(parse_gradbench_input(&bad, "in").unwrap_err().to_string().contains("field cam: 2 numbers"));
        bad["p"] = serde_json::json!(0);
        assert!(parse_gradbench_input(&bad, "in").unwrap_err().to_string().contains("field p"));
    }

    /// GradBench's compressed Jacobian keeps observation 0's 30 entries and the last one; read
    /// back it stands for the whole replicated Jacobian. A full one reads back as it is.
    #[test]
    fn tool_jacobians_read_back_in_both_shapes_and_bad_ones_name_the_field() {
        let p = 12;
        let rep = BaInput::generate(2, 3, p, 4);
        let man = manual::<f64>(&rep);
        let j = man.jacobian.clone().unwrap();
        let compressed: Json = serde_json::from_str(&gradbench_output(&man, false, DType::F64)).unwrap();
        // Row pointers: 15 per reprojection row (2p rows), then 1 per weight row; 31p in all.
        let rows: Vec<usize> =
            (0..30).map(|r| if r <= 2 * p { 15 * r } else { 30 * p + r - 2 * p }).chain([31 * p]).collect();
        assert_eq!(compressed["rows"], serde_json::json!(rows));
        // The last column is the last weight's: 11n + 3m + p - 1.
        assert_eq!(compressed["cols"][30], 22 + 9 + p - 1);
        assert_eq!(compressed["cols"].as_array().unwrap().len(), 31);
        // (serde_json reads decimals to within an ulp, not always exactly.)
        assert!((compressed["vals"][30].as_f64().unwrap() + 2.0 * rep.w[p - 1]).abs() < 1e-15);
        let dense = remote_jacobian(&compressed, &rep, false).unwrap().unwrap();
        assert!(max_rel(&dense, &j.to_dense()) < 1e-15);
        // Sent in full but answered compressed: the tool does not read the extension.
        assert_eq!(remote_jacobian(&compressed, &rep, true).unwrap(), None);
        let full: Json = serde_json::from_str(&gradbench_output(&man, true, DType::F64)).unwrap();
        assert!(max_rel(&remote_jacobian(&full, &rep, true).unwrap().unwrap(), &j.to_dense()) < 1e-15);
        let mut bad = full.clone();
        bad["cols"][3] = Json::from(1000);
        let e = remote_jacobian(&bad, &rep, true).unwrap_err().to_string();
        assert!(e.contains("field cols[3]: column 1000"), "{e}");
        let mut bad = full.clone();
        bad["vals"][0] = Json::from("oops");
        assert!(remote_jacobian(&bad, &rep, true).unwrap_err().to_string().contains("field vals[0]"));
        bad["vals"][0] = Json::from(0.5);
        bad["vals"][7] = Json::from("nan");
        let e = remote_jacobian(&bad, &rep, true).unwrap_err().to_string();
        assert!(e.contains("field vals[7]: NaN"), "{e}");
        let mut bad = full;
        bad["rows"] = serde_json::json!([0, 1]);
        assert!(remote_jacobian(&bad, &rep, true).unwrap_err().to_string().contains("field rows: 2 row pointers"));
    }

    #[test]
    fn manual_jacobian_matches_finite_differences_on_every_column() {
        let b = BaInput::generate_varied(3, 10, 30, 7);
        let j = manual::<f64>(&b).jacobian.unwrap();
        let cols: Vec<usize> = (0..j.pattern.ncols).collect();
        check_fd_columns(&b, &j.to_dense(), j.pattern.ncols, &cols, 1e-6);
    }

    #[test]
    fn whole_function_vjp_and_jvp_agree_with_the_sparse_jacobian() {
        let cpu = cpu();
        let b = BaInput::generate_varied(4, 9, 25, 3);
        let x = upload(&cpu, &b, DType::F64).unwrap();
        let j = jacobian_reverse(&cpu, &x).unwrap().jacobian.unwrap();
        let dense = j.to_dense();
        let (nr, nc) = (j.pattern.nrows, j.pattern.ncols);
        let v: Vec<f64> = (0..nc).map(|k| ((k * 7 % 11) as f64 - 5.0) / 5.0).collect();
        let wbar: Vec<f64> = (0..nr).map(|k| ((k * 5 % 13) as f64 - 6.0) / 6.0).collect();
        let jv = jvp(&cpu, &x, &v).unwrap();
        let jtw = vjp(&cpu, &x, &wbar).unwrap();
        let want_jv: Vec<f64> = (0..nr).map(|r| (0..nc).map(|c| dense[r * nc + c] * v[c]).sum()).collect();
        let want_jtw: Vec<f64> = (0..nc).map(|c| (0..nr).map(|r| dense[r * nc + c] * wbar[r]).sum()).collect();
        assert!(max_rel(&jv, &want_jv) < 1e-12);
        assert!(max_rel(&jtw, &want_jtw) < 1e-12);
    }

    #[test]
    fn the_small_angle_branch_is_taken_and_differentiated_at_zero_rotation() {
        let mut b = BaInput::generate_varied(2, 5, 12, 9);
        for c in 0..b.n {
            b.cams[11 * c..11 * c + 3].fill(0.0);
        }
        let cpu = cpu();
        let x = upload(&cpu, &b, DType::F64).unwrap();
        let man = manual::<f64>(&b);
        let jm = man.jacobian.as_ref().unwrap();
        // At r = 0: xc = xo, so the projection is a pinhole one.
        let (c, j) = b.obs[0];
        let (cam, pt) = (&b.cams[11 * c..11 * c + 11], &b.x[3 * j..3 * j + 3]);
        let xo = [pt[0] - cam[3], pt[1] - cam[4], pt[2] - cam[5]];
        let (u, v) = (xo[0] / xo[2], xo[1] / xo[2]);
        let rsq = u * u + v * v;
        let l = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
        let want = b.w[0] * (u * l * cam[6] + cam[7] - b.feats[0]);
        assert!((man.reproj_err[0] - want).abs() < 1e-12 * want.abs().max(1.0));
        for out in [jacobian_reverse(&cpu, &x).unwrap(), jacobian_forward(&cpu, &x).unwrap()] {
            let jad = out.jacobian.unwrap();
            assert!(jad.vals.iter().all(|v| v.is_finite()));
            assert!(max_rel(&jad.vals, &jm.vals) < 1e-12);
        }
        // The fallback x + r x X is first-order exact, so differences across r = 0 agree too.
        let rot_cols: Vec<usize> = (0..b.n).flat_map(|c| 11 * c..11 * c + 3).collect();
        check_fd_columns(&b, &jm.to_dense(), jm.pattern.ncols, &rot_cols, 1e-6);
    }

    #[test]
    fn f32_runs_agree_with_the_f32_manual() {
        let b = BaInput::generate_varied(3, 10, 30, 5);
        let cpu = cpu();
        let x = upload(&cpu, &b, DType::F32).unwrap();
        let want = manual::<f32>(&b);
        let want64 = manual::<f64>(&b);
        let (jm, jm64) = (want.jacobian.unwrap(), want64.jacobian.unwrap());
        for out in [jacobian_reverse(&cpu, &x).unwrap(), jacobian_forward(&cpu, &x).unwrap()] {
            assert!(max_rel(&out.reproj_err, &want.reproj_err) < 1e-4);
            let j = out.jacobian.unwrap();
            // Relative to the row's scale: f32 Jacobian entries span 1e-3 .. 1e3.
            assert!(max_rel(&j.vals, &jm.vals) < 1e-3, "{}", max_rel(&j.vals, &jm.vals));
            let l2 = |a: &[f64], b: &[f64]| {
                (a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f64>() / b.iter().map(|y| y * y).sum::<f64>())
                    .sqrt()
            };
            assert!(l2(&j.vals, &jm.vals) < 1e-5 && l2(&j.vals, &jm64.vals) < 1e-5);
        }
    }

    #[test]
    fn adbench_test_file_agrees_with_manual_and_differences() {
        let Some(path) = adbench_file("ba/test.txt") else { return };
        let b = BaInput::read(&path).unwrap();
        let cpu = cpu();
        let x = upload(&cpu, &b, DType::F64).unwrap();
        let man = manual::<f64>(&b);
        let jm = man.jacobian.unwrap();
        for out in [jacobian_reverse(&cpu, &x).unwrap(), jacobian_forward(&cpu, &x).unwrap()] {
            assert!(max_rel(&out.reproj_err, &man.reproj_err) < 1e-13);
            assert!(max_rel(&out.jacobian.unwrap().vals, &jm.vals) < 1e-12);
        }
        let cols: Vec<usize> = (0..jm.pattern.ncols).collect();
        check_fd_columns(&b, &jm.to_dense(), jm.pattern.ncols, &cols, 1e-6);
    }
}

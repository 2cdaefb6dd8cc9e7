//! The Gaussian mixture model objective exactly as ADBench defines it (`gmm_objective` in its
//! C++ tools): for n points x_i in d dimensions and K components with weights alpha, means mu_k
//! and inverse covariance factors icf_k,
//!
//! ```text
//! Q_k   = lower triangular: diagonal exp(q_k) (q_k = icf_k[..d], the log-diagonal), strictly
//!         lower part l_k = icf_k[d..] filled column by column (column 0 rows 1..d, column 1 rows
//!         2..d, ...)
//! main  = alpha_k + sum(q_k) - 0.5 ||Q_k (x_i - mu_k)||^2
//! f     = -n d/2 log(2 pi) + sum_i logsumexp_k(main_ik) - n logsumexp(alpha)
//!         + sum_k [0.5 gamma^2 (||exp(q_k)||^2 + ||l_k||^2) - m sum(q_k)] - K C
//! C     = n' d (log gamma - 0.5 log 2) - log Gamma_d(n'/2),  n' = d + m + 1
//! ```
//!
//! with every logsumexp taken with its maximum subtracted and log Gamma_d the multivariate log
//! gamma function (0.25 d (d-1) log pi + sum_j lgamma(a + (1-j)/2)). The constants are f64 host
//! numbers. The gradient is laid out as ADBench's: [alphas (K), means (K x d), icf (K x
//! d(d+1)/2)].
//!
//! # GradBench's variant ([`GmmVariant::GradBench`])
//!
//! GradBench's `gmm` eval (its C++ `gmm.hpp` and PyTorch `gmm_objective.py`, which take in
//! ADBench pull request 211) differs from ADBench in exactly these points:
//!
//! 1. The Wishart prior enters with the opposite sign: f adds the log prior
//!    `-sum_k [0.5 gamma^2 (||exp(q_k)||^2 + ||l_k||^2) - m sum(q_k)] + K C` where ADBench adds
//!    `+sum_k [...] - K C`. ADBench's value is therefore not a log posterior; GradBench's is
//!    log likelihood + log prior. (GradBench's README calls the objective the *negative* log
//!    posterior, but its reference implementations return the log posterior itself; we follow
//!    the implementations, whose outputs its validator compares against.)
//! 2. The gradient is split into `alpha` (K), `mu` (K x d), `q` (K x d, the log-diagonals
//!    icf_k[..d]) and `l` (K x d(d-1)/2, icf_k[d..], kept in ADBench's column-by-column order).
//!
//! The likelihood term, its constant -n d/2 log(2 pi), the parametrisation of Q and the input
//! file are the same. [`GmmInputs::variant`] selects the variant; the split of the gradient is
//! the caller's (see [`split_gradbench`]).

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, DType, Device, Elem, Forward, Ops, OutOfRange, Result, Reverse, TensorMeta, UnaryOp,
    with_device,
};
use adgauge_datasets::gmm::{GmmInput, Wishart, icf_size};
use rayon::prelude::*;

use serde_json::Value as Json;

use crate::json::{format_array, format_number, format_rows, objective_json, parse_number, parse_rows, rows_json};
use crate::objective::{ObjectiveProblem, RemoteModule, ScalarObjective};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalOption, EvalRequest, Mode, ParamSpec, Params, Problem, WResult, Workload, WorkloadError, rounded, sizes,
};

/// Which definition of the objective: ADBench's (the default) or GradBench's revision (see the
/// module documentation for every difference).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GmmVariant {
    #[default]
    Adbench,
    GradBench,
}

impl GmmVariant {
    /// The factor of ADBench's prior term (and of its constant K C) in this variant.
    fn prior_sign(self) -> f64 {
        match self {
            GmmVariant::Adbench => 1.0,
            GmmVariant::GradBench => -1.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GmmVariant::Adbench => "adbench",
            GmmVariant::GradBench => "gradbench",
        }
    }
}

impl std::str::FromStr for GmmVariant {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "adbench" => Ok(GmmVariant::Adbench),
            "gradbench" => Ok(GmmVariant::GradBench),
            other => Err(format!("unknown GMM variant '{other}' (known: adbench, gradbench)")),
        }
    }
}

/// A GMM problem on an engine's device.
pub struct GmmInputs<O: Ops> {
    /// ADBench's objective or GradBench's (set after [`upload`]; ADBench's by default).
    pub variant: GmmVariant,
    pub d: usize,
    pub k: usize,
    pub n: usize,
    pub alphas: O::T,
    pub means: O::T,
    pub icf: O::T,
    /// n x d, constant.
    pub x: O::T,
    pub wishart: Wishart,
    /// Gathers Q (K x d x d) from icf: the raw entry of each position (-1 above the diagonal).
    q_index: O::I,
    /// 1 on the diagonal of each Q_k.
    diag_mask: O::T,
    /// Positions of the log-diagonal entries and of the strictly lower entries in icf.
    logdiag_index: O::I,
    lower_index: O::I,
}

/// ln Gamma(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error about 1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let s = G[1..].iter().enumerate().fold(G[0], |s, (i, g)| s + g / (x + 1.0 + i as f64));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + s.ln()
}

/// log Gamma_p(a), the multivariate log gamma function.
pub fn log_gamma_distrib(a: f64, p: usize) -> f64 {
    let p = p as f64;
    let mut out = 0.25 * p * (p - 1.0) * std::f64::consts::PI.ln();
    for j in 1..=(p as usize) {
        out += ln_gamma(a + 0.5 * (1.0 - j as f64));
    }
    out
}

/// The constant terms of f: -n d/2 log(2 pi) - K C (ADBench) or -n d/2 log(2 pi) + K C
/// (GradBench).
pub fn constants(d: usize, k: usize, n: usize, w: Wishart, variant: GmmVariant) -> f64 {
    let (df, kf, nf) = (d as f64, k as f64, n as f64);
    let np = df + w.m as f64 + 1.0;
    let c = np * df * (w.gamma.ln() - 0.5 * 2f64.ln()) - log_gamma_distrib(0.5 * np, d);
    -nf * df * 0.5 * (2.0 * std::f64::consts::PI).ln() - variant.prior_sign() * kf * c
}

/// Splits a gradient in ADBench's layout [alphas, means, icf] into GradBench's
/// (alpha, mu, q, l), each flat and row-major per component.
pub fn split_gradbench(d: usize, k: usize, grad: &[f64]) -> [Vec<f64>; 4] {
    let sz = icf_size(d);
    let (alpha, rest) = grad.split_at(k.min(grad.len()));
    let (mu, icf) = rest.split_at((k * d).min(rest.len()));
    let q = icf.chunks(sz).flat_map(|c| c[..d.min(c.len())].to_vec()).collect();
    let l = icf.chunks(sz).flat_map(|c| c[d.min(c.len())..].to_vec()).collect();
    [alpha.to_vec(), mu.to_vec(), q, l]
}

/// Position in icf_k of Q_k[r][c] (r >= c): r on the diagonal, d + (index of (r, c) in the
/// column-by-column order of the strictly lower part) below it.
fn icf_pos(d: usize, r: usize, c: usize) -> usize {
    if r == c {
        r
    } else {
        // Columns 0..c hold (d-1) + (d-2) + ... + (d-c) entries.
        d + c * d - c * (c + 1) / 2 + (r - c - 1)
    }
}

/// Puts a problem on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, g: &GmmInput, dtype: DType) -> Result<GmmInputs<O>> {
    let (d, k) = (g.d, g.k);
    let sz = icf_size(d);
    let mut q_index = Vec::with_capacity(k * d * d);
    let mut mask = Vec::with_capacity(k * d * d);
    for kk in 0..k {
        for r in 0..d {
            for c in 0..d {
                q_index.push(if c <= r { (kk * sz + icf_pos(d, r, c)) as i64 } else { -1 });
                mask.push(if r == c { 1.0 } else { 0.0 });
            }
        }
    }
    let logdiag: Vec<i64> = (0..k).flat_map(|kk| (0..d).map(move |r| (kk * sz + r) as i64)).collect();
    let lower: Vec<i64> = (0..k).flat_map(|kk| (d..sz).map(move |j| (kk * sz + j) as i64)).collect();
    Ok(GmmInputs {
        variant: GmmVariant::Adbench,
        d,
        k,
        n: g.n,
        alphas: o.tensor(&g.alphas, &[k], dtype)?,
        means: o.tensor(&g.means, &[k, d], dtype)?,
        icf: o.tensor(&g.icf, &[k, sz], dtype)?,
        x: o.tensor(&g.x, &[g.n, d], dtype)?,
        wishart: g.wishart,
        q_index: o.index(&q_index)?,
        diag_mask: o.tensor(&mask, &[k, d, d], dtype)?,
        logdiag_index: o.index(&logdiag)?,
        lower_index: o.index(&lower)?,
    })
}

impl<O: Ops> GmmInputs<O> {
    /// The same problem with other parameters (tensors of the engine `P` built from this one's
    /// index tensors), for AD engines over O.
    pub fn objective_on<P: Ops<I = O::I>>(
        &self,
        p: &P,
        alphas: &P::T,
        means: &P::T,
        icf: &P::T,
        x: &P::T,
        diag_mask: &P::T,
    ) -> Result<P::T> {
        let (d, k, n) = (self.d, self.k, self.n);
        let dt = alphas.dtype();
        let flat = p.reshape(icf, &[icf.numel()])?;
        let logdiag = p.reshape(&p.gather(&flat, &self.logdiag_index, OutOfRange::Error)?, &[k, d])?;
        let lower = p.gather(&flat, &self.lower_index, OutOfRange::Error)?;
        let sum_qs = p.sum_axis(&logdiag, 1)?; // K x 1
        let qdiag = p.unary(UnaryOp::Exp, &logdiag)?;
        let raw = p.reshape(&p.gather(&flat, &self.q_index, OutOfRange::Fill(0.0))?, &[k, d, d])?;
        let q = p.select(diag_mask, &p.unary(UnaryOp::Exp, &raw)?, &raw)?; // K x d x d
        // Q_k x_i for all i, k: x (n x d) times the rows of all Q_k (K d x d), transposed.
        let qx = p.reshape(&p.matmul(x, false, &p.reshape(&q, &[k * d, d])?, true)?, &[n, k, d])?;
        // Q_k mu_k.
        let qm = p.sum_axis(&p.broadcast_binary(BinaryOp::Mul, &q, &p.reshape(means, &[k, 1, d])?)?, 2)?;
        // |Q_k x_i - Q_k mu_k|^2: one primitive (no n x K x d differences recorded).
        let sq = p.reshape(&p.sum_sq_diff(&qx, &p.reshape(&qm, &[1, k, d])?)?, &[n, k])?;
        let bias = p.reshape(&p.add(&p.reshape(alphas, &[k, 1])?, &sum_qs)?, &[1, k])?;
        let main = p.broadcast_binary(BinaryOp::Sub, &bias, &p.scale(&sq, 0.5)?)?; // n x K
        let slse = p.sum(&p.logsumexp_axis(&main, 1)?)?;
        let lse_alphas = p.reshape(&p.logsumexp_axis(&p.reshape(alphas, &[1, k])?, 1)?, &[1])?;
        let w = self.wishart;
        let frob = p.add(&p.sum(&p.unary(UnaryOp::Square, &qdiag)?)?, &p.sum(&p.unary(UnaryOp::Square, &lower)?)?)?;
        let sign = self.variant.prior_sign();
        let prior =
            p.sub(&p.scale(&frob, sign * 0.5 * w.gamma * w.gamma)?, &p.scale(&p.sum(&sum_qs)?, sign * w.m as f64)?)?;
        let c = p.scalar(constants(d, k, n, w, self.variant), dt)?;
        p.add(&p.add(&c, &p.sub(&slse, &p.scale(&lse_alphas, n as f64)?)?)?, &prior)
    }
}

/// The objective, shape `[1]`.
pub fn objective<O: Ops>(o: &O, g: &GmmInputs<O>) -> Result<O::T> {
    g.objective_on(o, &g.alphas, &g.means, &g.icf, &g.x, &g.diag_mask)
}

/// Objective and gradient [alphas, means, icf] by reverse mode.
pub fn gradient<B: Ops>(b: &B, g: &GmmInputs<B>) -> Result<(f64, Vec<f64>)> {
    let r = Reverse::new(b.clone());
    let (a, m, q) = (r.var(g.alphas.clone()), r.var(g.means.clone()), r.var(g.icf.clone()));
    let f = g.objective_on(&r, &a, &m, &q, &r.lift(g.x.clone()), &r.lift(g.diag_mask.clone()))?;
    let gr = r.backward(&f, b.full(&[1], 1.0, f.dtype())?)?;
    let mut out = b.to_vec(&gr.get_or_zeros(b, &a)?)?;
    out.extend(b.to_vec(&gr.get_or_zeros(b, &m)?)?);
    out.extend(b.to_vec(&gr.get_or_zeros(b, &q)?)?);
    Ok((b.to_vec(f.value())?[0], out))
}

/// The directional derivative of f along `v` (laid out like the gradient) by one forward sweep.
pub fn directional<B: Ops>(b: &B, g: &GmmInputs<B>, v: &[f64]) -> Result<(f64, f64)> {
    let f = Forward::new(b.clone());
    let (k, d) = (g.k, g.d);
    let dt = g.alphas.dtype();
    let (va, rest) = v.split_at(k);
    let (vm, vq) = rest.split_at(k * d);
    let a = f.dual(g.alphas.clone(), b.tensor(va, &[k], dt)?)?;
    let m = f.dual(g.means.clone(), b.tensor(vm, &[k, d], dt)?)?;
    let q = f.dual(g.icf.clone(), b.tensor(vq, &[k, icf_size(d)], dt)?)?;
    let y = g.objective_on(&f, &a, &m, &q, &f.lift(g.x.clone()), &f.lift(g.diag_mask.clone()))?;
    Ok((b.to_vec(f.primal(&y))?[0], b.to_vec(&f.tangent(&y)?)?[0]))
}

/// Objective and gradient by forward mode: one sweep per parameter.
pub fn gradient_forward<B: Ops>(b: &B, g: &GmmInputs<B>) -> Result<(f64, Vec<f64>)> {
    let np = g.k + g.k * g.d + g.k * icf_size(g.d);
    let mut out = Vec::with_capacity(np);
    let mut value = 0.0;
    for j in 0..np {
        let mut e = vec![0.0; np];
        e[j] = 1.0;
        let (y, dy) = directional(b, g, &e)?;
        value = y;
        out.push(dy);
    }
    if np == 0 {
        value = b.to_vec(&objective(b, g)?)?[0];
    }
    Ok((value, out))
}

/// Points per chunk of the manual reference (fixed: results do not depend on the thread count).
const CHUNK: usize = 64;

/// The hand-derived objective and gradient in `T`. With p_ik the softmax over k of main_ik,
/// z = Q_k (x_i - mu_k) and xc = x_i - mu_k:
/// df/dalpha_k = sum_i p_ik - n softmax(alpha)_k; df/dmu_k = sum_i p_ik Q_k^T z;
/// df/dq_kr = sum_i p_ik (1 - z_r xc_r exp(q_kr)) + gamma^2 exp(q_kr)^2 - m;
/// df/dl_k(r,c) = -sum_i p_ik z_r xc_c + gamma^2 l_k(r,c).
pub fn manual<T: Elem>(g: &GmmInput) -> (f64, Vec<f64>) {
    manual_variant::<T>(g, GmmVariant::Adbench)
}

/// [`manual`] for either variant (GradBench's negates the prior's terms).
pub fn manual_variant<T: Elem>(g: &GmmInput, variant: GmmVariant) -> (f64, Vec<f64>) {
    let (d, k, n) = (g.d, g.k, g.n);
    let sz = icf_size(d);
    let t = |v: &[f64]| v.iter().map(|&x| T::of_f64(x)).collect::<Vec<T>>();
    let (alphas, means, icf, x) = (t(&g.alphas), t(&g.means), t(&g.icf), t(&g.x));
    let qdiag: Vec<T> = (0..k).flat_map(|kk| (0..d).map(|r| icf[kk * sz + r].exp()).collect::<Vec<_>>()).collect();
    let sum_qs: Vec<T> = (0..k).map(|kk| icf[kk * sz..kk * sz + d].iter().fold(T::zero(), |s, &v| s + v)).collect();
    let half = T::of_f64(0.5);
    // Per chunk of points: sum of logsumexps and the gradient of that sum (alphas, means, icf).
    let per_chunk = |c0: usize| {
        let mut slse = T::zero();
        let mut ga = vec![T::zero(); k];
        let mut gm = vec![T::zero(); k * d];
        let mut gq = vec![T::zero(); k * sz];
        let (mut xc, mut z, mut main) = (vec![T::zero(); k * d], vec![T::zero(); k * d], vec![T::zero(); k]);
        for i in c0..(c0 + CHUNK).min(n) {
            let xi = &x[i * d..(i + 1) * d];
            for kk in 0..k {
                let (xc, z) = (&mut xc[kk * d..(kk + 1) * d], &mut z[kk * d..(kk + 1) * d]);
                for r in 0..d {
                    xc[r] = xi[r] - means[kk * d + r];
                }
                for r in 0..d {
                    let mut s = qdiag[kk * d + r] * xc[r];
                    for c in 0..r {
                        s = s + icf[kk * sz + icf_pos(d, r, c)] * xc[c];
                    }
                    z[r] = s;
                }
                let sq = z.iter().fold(T::zero(), |s, &v| s + v * v);
                main[kk] = alphas[kk] + sum_qs[kk] - half * sq;
            }
            let mx = main.iter().fold(T::neg_infinity(), |m, &v| if v > m { v } else { m });
            let se = main.iter().fold(T::zero(), |s, &v| s + (v - mx).exp());
            let lse = se.ln() + mx;
            slse = slse + lse;
            for kk in 0..k {
                let pk = (main[kk] - lse).exp();
                ga[kk] = ga[kk] + pk;
                let (xc, z) = (&xc[kk * d..(kk + 1) * d], &z[kk * d..(kk + 1) * d]);
                for r in 0..d {
                    // (Q^T z)_c = sum_{r >= c} Q[r][c] z_r, accumulated per row r.
                    gm[kk * d + r] = gm[kk * d + r] + pk * qdiag[kk * d + r] * z[r];
                    for c in 0..r {
                        let pos = icf_pos(d, r, c);
                        gm[kk * d + c] = gm[kk * d + c] + pk * icf[kk * sz + pos] * z[r];
                        gq[kk * sz + pos] = gq[kk * sz + pos] - pk * z[r] * xc[c];
                    }
                    gq[kk * sz + r] = gq[kk * sz + r] + pk * (T::one() - z[r] * xc[r] * qdiag[kk * d + r]);
                }
            }
        }
        (slse, ga, gm, gq)
    };
    let starts: Vec<usize> = (0..n).step_by(CHUNK).collect();
    let parts: Vec<_> = starts.par_iter().map(|&c0| per_chunk(c0)).collect();
    let (mut slse, mut ga, mut gm, mut gq) =
        (T::zero(), vec![T::zero(); k], vec![T::zero(); k * d], vec![T::zero(); k * sz]);
    for (s, a, m, q) in parts {
        slse = slse + s;
        ga.iter_mut().zip(a).for_each(|(x, y)| *x = *x + y);
        gm.iter_mut().zip(m).for_each(|(x, y)| *x = *x + y);
        gq.iter_mut().zip(q).for_each(|(x, y)| *x = *x + y);
    }
    // -n logsumexp(alpha) and the prior.
    let nf = T::of_f64(n as f64);
    let amax = alphas.iter().fold(T::neg_infinity(), |m, &v| if v > m { v } else { m });
    let ase = alphas.iter().fold(T::zero(), |s, &v| s + (v - amax).exp());
    let lse_a = ase.ln() + amax;
    for kk in 0..k {
        ga[kk] = ga[kk] - nf * (alphas[kk] - lse_a).exp();
    }
    let w = g.wishart;
    let sign = T::of_f64(variant.prior_sign());
    let (g2, m) = (T::of_f64(w.gamma * w.gamma), T::of_f64(w.m as f64));
    let mut frob = T::zero();
    for kk in 0..k {
        for r in 0..d {
            let qd = qdiag[kk * d + r];
            frob = frob + qd * qd;
            gq[kk * sz + r] = gq[kk * sz + r] + sign * (g2 * qd * qd - m);
        }
        for j in d..sz {
            let l = icf[kk * sz + j];
            frob = frob + l * l;
            gq[kk * sz + j] = gq[kk * sz + j] + sign * g2 * l;
        }
    }
    let sum_all_qs = sum_qs.iter().fold(T::zero(), |s, &v| s + v);
    let prior = sign * (half * g2 * frob - m * sum_all_qs);
    let f = T::of_f64(constants(d, k, n, w, variant)) + slse - nf * lse_a + prior;
    let grad = ga.into_iter().chain(gm).chain(gq).map(|v| v.as_f64()).collect();
    (f.as_f64(), grad)
}

/// [`manual`] in the dtype under test.
pub fn manual_in(g: &GmmInput, dtype: DType) -> (f64, Vec<f64>) {
    manual_variant_in(g, dtype, GmmVariant::Adbench)
}

/// [`manual_variant`] in the dtype under test.
pub fn manual_variant_in(g: &GmmInput, dtype: DType, variant: GmmVariant) -> (f64, Vec<f64>) {
    match dtype {
        DType::F32 => manual_variant::<f32>(g, variant),
        DType::F64 => manual_variant::<f64>(g, variant),
    }
}

/// GMM's memory: about 100 bytes per point, component and dimension (the reverse-mode tape of
/// the per-point, per-component residuals; 107 to 200 measured at d, k in {1, 4}) plus the
/// parameters.
pub(crate) fn gmm_footprint(d: usize, k: usize, n: usize) -> crate::workload::Footprint {
    let (d, k, n) = (d as u128, k as u128, n as u128);
    crate::workload::Footprint {
        bytes: 100 * n * k * d + 8 * k * d * d,
        key: "n",
        formula: "about 100 bytes per point, component and dimension (n*k*d*100) + the parameters",
    }
}

/// GMM in the registry: `workload: gmm` with n points in d dimensions and k components
/// (ADBench's generator).
pub struct Gmm;

/// Validation size: every parameter gets a finite difference.
const CHECK: [(&str, u64); 3] = [("n", 50), ("k", 3), ("d", 3)];

impl Workload for Gmm {
    fn family(&self) -> &'static str {
        "gmm"
    }
    fn about(&self) -> &'static str {
        "ADBench's Gaussian mixture model objective and its gradient"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![
            sizes("n", 1, 1 << 30, "points"),
            sizes("k", 1, 1 << 16, "components"),
            sizes("d", 1, 1 << 12, "dimensions"),
        ]
    }
    fn eval_options(&self) -> Vec<EvalOption> {
        vec![
            EvalOption {
                flag: "gmm-replicate-point",
                takes_value: false,
                help: "gmm: the file holds one point line for all n points (detected when absent)",
            },
            EvalOption {
                flag: "gmm-variant",
                takes_value: true,
                help: "gmm: adbench (default) or gradbench (the prior's sign; the gradient printed as \
                       {\"alpha\", \"mu\", \"q\", \"l\"})",
            },
        ]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn footprint(&self, p: &Params) -> Option<crate::workload::Footprint> {
        let (d, k, n) = (p.int("d").ok()?, p.int("k").ok()?, p.int("n").ok()?);
        Some(gmm_footprint(d, k, n))
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        Ok(Box::new(ObjectiveProblem::<GmmObjective>(GmmInput::generate(p.int("d")?, p.int("k")?, p.int("n")?, seed))))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let replicate = req.options.contains_key("gmm-replicate-point").then_some(true);
        let variant: GmmVariant = match req.options.get("gmm-variant") {
            Some(v) => v.parse().map_err(WorkloadError::BadInput)?,
            None => GmmVariant::Adbench,
        };
        let g =
            GmmInput::parse(&req.text, &req.source, replicate).map_err(|e| WorkloadError::BadInput(e.to_string()))?;
        crate::validate::validate(&g, &req.source, req.dtype)?;
        let dt = req.dtype;
        let input = WorkloadError::from_input;
        with_device!(device, |dev| {
            let mut x = upload(dev, &g, dt).map_err(input)?;
            x.variant = variant;
            let with_gradient = |(f, gr): (f64, Vec<f64>)| match variant {
                GmmVariant::Adbench => objective_json(f, Some(&gr), dt),
                GmmVariant::GradBench => gradbench_json(f, &gr, g.d, g.k, dt),
            };
            Ok(match req.mode.unwrap_or(Mode::Primal) {
                Mode::Primal => objective_json(dev.to_vec(&objective(dev, &x).map_err(input)?)?[0], None, dt),
                Mode::Vjp => with_gradient(gradient(dev, &x).map_err(input)?),
                Mode::Jvp | Mode::HessianDiag => with_gradient(gradient_forward(dev, &x).map_err(input)?),
            })
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("gmm")
    }
    /// GradBench's `gmm` (its variant of the objective): `objective`, and `jacobian` as
    /// `{"alpha", "mu", "q", "l"}`.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("gmm.{function} input");
        let g = parse_gradbench_input(input, &source)?;
        crate::validate::validate(&g, &source, dtype)?;
        let bad = WorkloadError::from_input;
        with_device!(device, |dev| {
            let x = GmmGradBenchObjective::upload(dev, &g, dtype).map_err(bad)?;
            match function {
                "objective" => Ok(format_number(dev.to_vec(&objective(dev, &x).map_err(bad)?)?[0], dtype)),
                "jacobian" => Ok(gradbench_gradient_json(&gradient(dev, &x).map_err(bad)?.1, g.d, g.k, dtype)),
                other => {
                    Err(WorkloadError::BadInput(format!("gmm: no function '{other}' (known: objective, jacobian)")))
                }
            }
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("d") {
            Some(d) => format!("{name} d={d}"),
            None => name.to_string(),
        }
    }
}

/// GradBench's GMM output: `{"objective": x, "gradient": {"alpha": [K], "mu": [[d]..K],
/// "q": [[d]..K], "l": [[d(d-1)/2]..K]}}` (l per component in ADBench's column-by-column order).
fn gradbench_json(f: f64, grad: &[f64], d: usize, k: usize, dt: DType) -> String {
    format!("{{\"objective\": {}, \"gradient\": {}}}", format_number(f, dt), gradbench_gradient_json(grad, d, k, dt))
}

/// GradBench's GMM gradient: `{"alpha": [K], "mu": [[d]..K], "q": [[d]..K], "l": [[d(d-1)/2]..K]}`.
fn gradbench_gradient_json(grad: &[f64], d: usize, k: usize, dt: DType) -> String {
    let [alpha, mu, q, l] = split_gradbench(d, k, grad);
    format!(
        "{{\"alpha\": {}, \"mu\": {}, \"q\": {}, \"l\": {}}}",
        format_array(&alpha, dt),
        format_rows(&mu, k, dt),
        format_rows(&q, k, dt),
        format_rows(&l, k, dt)
    )
}

/// GradBench's `gmm` input: sizes, the parameters split as alpha (k), mu, q and l (k rows each),
/// the points (n rows) and the Wishart prior.
pub fn gradbench_input(g: &GmmInput) -> Json {
    let [alpha, mu, q, l] = split_gradbench(g.d, g.k, &GmmObjective::params(g));
    let lw = g.d * g.d.saturating_sub(1) / 2;
    serde_json::json!({
        "d": g.d, "k": g.k, "n": g.n,
        "alpha": alpha, "mu": rows_json(&mu, g.d), "q": rows_json(&q, g.d), "l": rows_json(&l, lw),
        "x": rows_json(&g.x, g.d), "gamma": g.wishart.gamma, "m": g.wishart.m,
    })
}

/// Reads GradBench's `gmm` input.
pub fn parse_gradbench_input(input: &Json, source: &str) -> WResult<GmmInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let size = |f: &str| {
        input
            .get(f)
            .and_then(Json::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| bad(format!("field {f}: expected a whole number")))
    };
    let (d, k, n) = (size("d")?, size("k")?, size("n")?);
    let alphas: Vec<f64> = match input.get("alpha") {
        Some(Json::Array(a)) => {
            a.iter().map(|v| parse_number(v).map_err(|m| bad(format!("field alpha: {m}")))).collect::<WResult<_>>()?
        }
        _ => return Err(bad("field alpha: expected an array".into())),
    };
    let (_, _, mu) = parse_rows(input, "mu", source, Some(d))?;
    let (_, _, q) = parse_rows(input, "q", source, Some(d))?;
    // d = 1 has no lower entries: GradBench sends k empty rows.
    let l = if d > 1 { parse_rows(input, "l", source, Some(d * (d - 1) / 2))?.2 } else { Vec::new() };
    let (_, _, x) = parse_rows(input, "x", source, Some(d))?;
    let gamma =
        input.get("gamma").and_then(Json::as_f64).ok_or_else(|| bad("field gamma: expected a number".into()))?;
    let m = input.get("m").and_then(Json::as_i64).ok_or_else(|| bad("field m: expected a whole number".into()))?;
    let lw = d * d.saturating_sub(1) / 2;
    if alphas.len() != k || mu.len() != k * d || q.len() != k * d || l.len() != k * lw || x.len() != n * d {
        return Err(bad(format!("sizes do not match d = {d}, k = {k}, n = {n}")));
    }
    let icf = (0..k)
        .flat_map(|c| q[c * d..(c + 1) * d].iter().chain(&l[c * lw..(c + 1) * lw]).copied().collect::<Vec<_>>())
        .collect();
    let m = i32::try_from(m).map_err(|_| bad(format!("field m: {m} is out of range")))?;
    let g = GmmInput { d, k, n, alphas, means: mu, icf, x, wishart: Wishart { gamma, m } };
    g.validate().map_err(|e| bad(e.to_string()))?;
    Ok(g)
}

/// The gradient in GradBench's output `{"alpha", "mu", "q", "l"}`, flat as [alphas, means, icf].
fn parse_gradbench_gradient(out: &Json, d: usize, k: usize) -> Result<Vec<f64>> {
    let device = |m: String| adgauge_backends::OpError::Device(format!("gmm.jacobian output: {m}"));
    let flat = |field: &str, len: usize| -> Result<Vec<f64>> {
        let v = out.get(field).ok_or_else(|| device(format!("field {field}: missing")))?;
        let xs: Vec<f64> = match v {
            Json::Array(a) if a.iter().all(Json::is_array) => a
                .iter()
                .flat_map(|r| r.as_array().cloned().unwrap_or_default())
                .map(|x| parse_number(&x).map_err(&device))
                .collect::<Result<_>>()?,
            Json::Array(a) => a.iter().map(|x| parse_number(x).map_err(&device)).collect::<Result<_>>()?,
            other => {
                return Err(device(format!("field {field}: expected an array, found {}", crate::json::kind(other))));
            }
        };
        if xs.len() != len {
            return Err(device(format!("field {field}: {} numbers, expected {len}", xs.len())));
        }
        Ok(xs)
    };
    let lw = d * d.saturating_sub(1) / 2;
    let (alpha, mu, q, l) = (flat("alpha", k)?, flat("mu", k * d)?, flat("q", k * d)?, flat("l", k * lw)?);
    let icf =
        (0..k).flat_map(|c| q[c * d..(c + 1) * d].iter().chain(&l[c * lw..(c + 1) * lw]).copied().collect::<Vec<_>>());
    Ok(alpha.into_iter().chain(mu).chain(icf).collect())
}

/// GMM as a scalar objective of [alphas, means, icf]: ADBench's objective
/// ([`GmmObjective`]) or GradBench's, whose Wishart prior has the opposite sign
/// ([`GmmGradBenchObjective`]: what GradBench's `gmm` module computes, so a tool speaking it is
/// judged by that variant's references).
pub struct GmmOf<const GRADBENCH: bool>;

/// ADBench's GMM objective.
pub type GmmObjective = GmmOf<false>;
/// GradBench's GMM objective.
pub type GmmGradBenchObjective = GmmOf<true>;

impl<const GRADBENCH: bool> GmmOf<GRADBENCH> {
    const VARIANT: GmmVariant = if GRADBENCH { GmmVariant::GradBench } else { GmmVariant::Adbench };
}

impl<const GRADBENCH: bool> ScalarObjective for GmmOf<GRADBENCH> {
    type Remote = GmmGradBenchObjective;
    type Resident<D: Device> = GmmInputs<D>;
    type Input = GmmInput;
    fn rounded(g: &GmmInput, dtype: DType) -> GmmInput {
        GmmInput {
            alphas: rounded(&g.alphas, dtype),
            means: rounded(&g.means, dtype),
            icf: rounded(&g.icf, dtype),
            x: rounded(&g.x, dtype),
            ..g.clone()
        }
    }
    fn params(g: &GmmInput) -> Vec<f64> {
        g.alphas.iter().chain(&g.means).chain(&g.icf).copied().collect()
    }
    fn with_params(g: &GmmInput, x: &[f64]) -> GmmInput {
        let (a, rest) = x.split_at(g.alphas.len());
        let (m, q) = rest.split_at(g.means.len());
        GmmInput { alphas: a.to_vec(), means: m.to_vec(), icf: q.to_vec(), ..g.clone() }
    }
    fn upload<D: Device>(d: &D, input: &GmmInput, dtype: DType) -> Result<GmmInputs<D>> {
        let mut x = upload(d, input, dtype)?;
        x.variant = Self::VARIANT;
        Ok(x)
    }
    fn objective<D: Device>(d: &D, x: &GmmInputs<D>) -> Result<D::T> {
        objective(d, x)
    }
    fn gradient<D: Device>(d: &D, x: &GmmInputs<D>) -> Result<Vec<f64>> {
        Ok(gradient(d, x)?.1)
    }
    fn directional<D: Device>(d: &D, x: &GmmInputs<D>, v: &[f64]) -> Result<f64> {
        Ok(directional(d, x, v)?.1)
    }
    fn manual_gradient(g: &GmmInput, dtype: DType) -> Vec<f64> {
        manual_variant_in(g, dtype, Self::VARIANT).1
    }
    fn forward_gradient<D: Device>(d: &D, x: &GmmInputs<D>, _n: usize) -> Option<Result<(f64, Vec<f64>)>> {
        Some(gradient_forward(d, x))
    }
    fn remote(g: &GmmInput) -> Option<RemoteModule> {
        GRADBENCH.then(|| RemoteModule { primal: "objective", gradient: "jacobian", input: gradbench_input(g) })
    }
    fn remote_gradient(output: &Json, g: &GmmInput) -> Result<Vec<f64>> {
        parse_gradbench_gradient(output, g.d, g.k)
    }
}

impl CheckedInput for GmmInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("alpha", &self.alphas), ("means", &self.means), ("icf", &self.icf), ("x", &self.x)]
    }
    fn footprint(&self) -> Option<(String, crate::workload::Footprint)> {
        let fields = format!("sizes d k n = {} {} {}", self.d, self.k, self.n);
        Some((fields, crate::gmm::gmm_footprint(self.d, self.k, self.n)))
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;
    use adgauge_testkit::adbench_file;

    use super::*;

    #[test]
    fn gradbench_inputs_and_gradients_round_trip() {
        let g = GmmInput::generate(3, 2, 5, 7);
        let json = gradbench_input(&g);
        assert_eq!(json["l"][0].as_array().unwrap().len(), 3);
        assert_eq!(parse_gradbench_input(&json, "in").unwrap(), g);
        // A gradient laid out as [alphas, means, icf] survives GradBench's split and back.
        let flat: Vec<f64> = (0..GmmObjective::params(&g).len()).map(|i| i as f64).collect();
        let printed = gradbench_json(0.0, &flat, g.d, g.k, DType::F64);
        let v: Json = serde_json::from_str(&printed).unwrap();
        assert_eq!(parse_gradbench_gradient(&v["gradient"], g.d, g.k).unwrap(), flat);
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * (x.abs() + y.abs()).max(1.0))
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        assert!((ln_gamma(1.0)).abs() < 1e-14);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-14);
        assert!((ln_gamma(10.0) - 362880f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(2.5) - (1.329_340_388_179_137f64).ln()).abs() < 1e-14);
    }

    #[test]
    fn lower_entries_are_filled_column_by_column() {
        // d = 4: column 0 rows 1..4 -> 4, 5, 6; column 1 rows 2, 3 -> 7, 8; column 2 row 3 -> 9.
        let got: Vec<usize> =
            [(1, 0), (2, 0), (3, 0), (2, 1), (3, 1), (3, 2)].iter().map(|&(r, c)| icf_pos(4, r, c)).collect();
        assert_eq!(got, vec![4, 5, 6, 7, 8, 9]);
    }

    fn check_problem(g: &GmmInput, tol: f64) {
        check_variant(g, tol, GmmVariant::Adbench);
        check_variant(g, tol, GmmVariant::GradBench);
    }

    fn check_variant(g: &GmmInput, tol: f64, variant: GmmVariant) {
        let cpu = Cpu::new(Some(2)).unwrap();
        let mut x = upload(&cpu, g, DType::F64).unwrap();
        x.variant = variant;
        let (f_ad, g_ad) = gradient(&cpu, &x).unwrap();
        let (f_m, g_m) = manual_variant::<f64>(g, variant);
        assert!(close(&[f_ad], &[f_m], tol), "objective {f_ad} vs manual {f_m}");
        assert!(close(&g_ad, &g_m, tol), "gradient vs manual:\n{g_ad:?}\n{g_m:?}");
        let (f_fw, g_fw) = gradient_forward(&cpu, &x).unwrap();
        assert!(close(&[f_fw], &[f_m], tol));
        assert!(close(&g_fw, &g_m, tol), "forward gradient vs manual");
        // Central differences of the manual objective, coordinate by coordinate.
        let h = 1e-6;
        for (j, &got) in g_ad.iter().enumerate() {
            let shifted = |s: f64| {
                let mut p = g.clone();
                let (ka, kd) = (g.k, g.k * g.d);
                let slot = if j < ka {
                    &mut p.alphas[j]
                } else if j < ka + kd {
                    &mut p.means[j - ka]
                } else {
                    &mut p.icf[j - ka - kd]
                };
                *slot += s * h;
                manual_variant::<f64>(&p, variant).0
            };
            let fd = (shifted(1.0) - shifted(-1.0)) / (2.0 * h);
            assert!((fd - got).abs() <= 1e-5 * fd.abs().max(1.0), "coordinate {j}: {got} vs fd {fd}");
        }
    }

    #[test]
    fn generated_problems_agree_with_manual_forward_and_differences() {
        check_problem(&GmmInput::generate(3, 4, 20, 5), 1e-10);
        let mut g = GmmInput::generate(2, 3, 7, 6);
        g.wishart = Wishart { gamma: 0.7, m: 2 };
        check_problem(&g, 1e-10);
    }

    /// The variants differ only in the prior's sign: their sum is twice the likelihood part
    /// (which does not depend on the Wishart parameters) and their difference twice ADBench's
    /// prior, written here from the formula.
    #[test]
    fn gradbench_variant_negates_exactly_the_prior() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let value = |g: &GmmInput, v: GmmVariant| {
            let mut x = upload(&cpu, g, DType::F64).unwrap();
            x.variant = v;
            cpu.to_vec(&objective(&cpu, &x).unwrap()).unwrap()[0]
        };
        let mut g = GmmInput::generate(3, 4, 9, 11);
        let mut sums = Vec::new();
        for w in [Wishart { gamma: 1.0, m: 0 }, Wishart { gamma: 0.3, m: 4 }] {
            g.wishart = w;
            let (ab, gb) = (value(&g, GmmVariant::Adbench), value(&g, GmmVariant::GradBench));
            sums.push(ab + gb);
            let (d, k) = (g.d, g.k);
            let sz = icf_size(d);
            let mut prior = 0.0;
            for kk in 0..k {
                let icf = &g.icf[kk * sz..(kk + 1) * sz];
                let frob: f64 =
                    icf[..d].iter().map(|q| (2.0 * q).exp()).sum::<f64>() + icf[d..].iter().map(|l| l * l).sum::<f64>();
                prior += 0.5 * w.gamma * w.gamma * frob - w.m as f64 * icf[..d].iter().sum::<f64>();
            }
            let np = d as f64 + w.m as f64 + 1.0;
            let c = np * d as f64 * (w.gamma / 2f64.sqrt()).ln() - log_gamma_distrib(0.5 * np, d);
            let expected = 2.0 * (prior - k as f64 * c);
            assert!((ab - gb - expected).abs() <= 1e-9 * expected.abs().max(1.0), "{ab} - {gb} vs {expected}");
        }
        assert!((sums[0] - sums[1]).abs() <= 1e-9 * sums[0].abs(), "likelihood part moved: {sums:?}");
    }

    #[test]
    fn gradbench_split_takes_log_diagonals_and_lower_entries_apart() {
        // d = 3, k = 2: icf_k = [q0 q1 q2 l10 l20 l21]; the values name their slot.
        let grad: Vec<f64> = (0..2 + 6 + 12).map(|i| i as f64).collect();
        let [a, mu, q, l] = split_gradbench(3, 2, &grad);
        assert_eq!(a, vec![0.0, 1.0]);
        assert_eq!(mu, (2..8).map(|i| i as f64).collect::<Vec<_>>());
        assert_eq!(q, vec![8.0, 9.0, 10.0, 14.0, 15.0, 16.0]);
        assert_eq!(l, vec![11.0, 12.0, 13.0, 17.0, 18.0, 19.0]);
    }

    #[test]
    fn adbench_test_file_agrees_with_manual_and_differences() {
        let Some(path) = adbench_file("gmm/test.txt") else { return };
        let g = GmmInput::read(&path, None).unwrap();
        check_problem(&g, 1e-10);
    }

    #[test]
    fn f32_runs_agree_with_the_f32_manual() {
        let g = GmmInput::generate(4, 5, 50, 8);
        let cpu = Cpu::new(Some(2)).unwrap();
        let x = upload(&cpu, &g, DType::F32).unwrap();
        let (f, gr) = gradient(&cpu, &x).unwrap();
        let rounded = GmmInput {
            alphas: g.alphas.iter().map(|&v| v as f32 as f64).collect(),
            means: g.means.iter().map(|&v| v as f32 as f64).collect(),
            icf: g.icf.iter().map(|&v| v as f32 as f64).collect(),
            x: g.x.iter().map(|&v| v as f32 as f64).collect(),
            ..g.clone()
        };
        let (fm, gm) = manual::<f32>(&rounded);
        assert!(close(&[f], &[fm], 1e-4), "{f} vs {fm}");
        assert!(close(&gr, &gm, 1e-3));
    }
}

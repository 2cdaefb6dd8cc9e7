//! Derivative validation (docs/ARCHITECTURE.md, harness): every check works on a flattened view of a case —
//! inputs x in R^n, outputs y in R^m — so that every workload is validated the same way.
//!
//! * dot-product test: <v, J^T w> vs <J v, w> for random v, w, accumulated in f64, relative to the
//!   sum of |terms|;
//! * central finite differences, directional (random v), evaluated in f64 on inputs rounded to the
//!   dtype under test, step h = cbrt(eps_f64) * max(|x|_inf, 1) made representable
//!   (h = (s + h) - s); compared with J v from the JVP and, through w, with J^T w from the VJP;
//! * full Jacobians at small sizes: one-hot VJPs (rows) against one-hot JVPs (columns);
//! * against a reference (the oracle, or another rule) elementwise.
//!
//! Metrics: rho(x, y) = |x - y| / max(1, |x| + |y|) elementwise (ADBench's), and the relative L2
//! error ||x - y|| / ||y||, which catches errors on gradients much smaller than 1 that rho lets
//! pass. A check passes when both are within [`tolerance`].

use adgauge_backends::DType;
use adgauge_workloads::Validation;
pub use adgauge_workloads::{CheckKind, FlatFn};
use rand::RngExt;

/// The one tolerance table (docs/guide.md, Validation, repeats it): the largest accepted metric
/// per check and dtype. Finite differences carry O(h^2) truncation error and, in f32, the f32
/// rounding of the derivative under test; everything else compares two computations of the same
/// quantity.
pub fn tolerance(check: CheckKind, dtype: DType) -> f64 {
    match (check, dtype) {
        (CheckKind::DotProduct, DType::F64) => 1e-12,
        (CheckKind::DotProduct, DType::F32) => 1e-5,
        (CheckKind::FdJvp | CheckKind::FdVjp | CheckKind::FdJacobian | CheckKind::SecondOrder, DType::F64) => 1e-6,
        (CheckKind::FdJvp | CheckKind::FdVjp | CheckKind::FdJacobian | CheckKind::SecondOrder, DType::F32) => 1e-3,
        (CheckKind::TracedEager | CheckKind::Faults, _) => 0.0,
        (CheckKind::FullJacobian | CheckKind::StagedEager, DType::F64) => 1e-12,
        (CheckKind::FullJacobian | CheckKind::StagedEager, DType::F32) => 1e-5,
        (
            CheckKind::OracleVjp
            | CheckKind::OracleJvp
            | CheckKind::OraclePrimal
            | CheckKind::RuleAgreement
            | CheckKind::Manual
            | CheckKind::ManualJvp
            | CheckKind::ManualHessian
            | CheckKind::Ties
            | CheckKind::Stress
            | CheckKind::Extremes
            | CheckKind::Perturbation
            | CheckKind::Primitives,
            DType::F64,
        ) => 1e-10,
        (
            CheckKind::OracleVjp
            | CheckKind::OracleJvp
            | CheckKind::OraclePrimal
            | CheckKind::RuleAgreement
            | CheckKind::Manual
            | CheckKind::ManualJvp
            | CheckKind::ManualHessian
            | CheckKind::Ties
            | CheckKind::Stress
            | CheckKind::Extremes
            | CheckKind::Perturbation
            | CheckKind::Primitives,
            DType::F32,
        ) => 1e-4,
    }
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub kind: CheckKind,
    /// The worst metric (max of rho and relative L2, or the dot-product discrepancy).
    pub worst: f64,
    pub tolerance: f64,
    /// Set when the check could not run meaningfully (e.g. a kink within the FD step).
    pub skipped: Option<String>,
    /// Set when the derivative differs from adgauge's reference but is right under a
    /// convention (e.g. a tie policy): which.
    pub convention: Option<String>,
    /// A failed reverse-mode check, argument by argument ([`FlatFn::input_parts`]): each
    /// argument's own worst value, so a report can say which adjoint is wrong.
    pub parts: Vec<(&'static str, f64)>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.skipped.is_some() || self.worst <= self.tolerance
    }

    /// The per-argument breakdown of a failure, e.g. `vals 0.000e0 ok, dest 9.648e-1 wrong`
    /// (empty when there is none).
    pub fn parts_text(&self) -> String {
        let part = |(name, worst): &(&str, f64)| {
            format!("{name} {worst:.3e} {}", if *worst <= self.tolerance { "ok" } else { "wrong" })
        };
        self.parts.iter().map(part).collect::<Vec<_>>().join(", ")
    }
    fn new(kind: CheckKind, dtype: DType, worst: f64) -> Outcome {
        Outcome { kind, worst, tolerance: tolerance(kind, dtype), skipped: None, convention: None, parts: Vec::new() }
    }
}

/// max_i rho(x_i, y_i); NaN anywhere counts as infinitely wrong.
pub fn rho(x: &[f64], y: &[f64]) -> f64 {
    if x.len() != y.len() {
        return f64::INFINITY;
    }
    x.iter()
        .zip(y)
        .map(|(a, b)| {
            if a == b {
                0.0 // also equal infinities
            } else {
                let r = (a - b).abs() / (a.abs() + b.abs()).max(1.0);
                if r.is_nan() { f64::INFINITY } else { r }
            }
        })
        .fold(0.0, f64::max)
}

/// ||x - y|| / ||y|| (0 when both are zero; infinite when only y is).
pub fn rel_l2(x: &[f64], y: &[f64]) -> f64 {
    if x.len() != y.len() {
        return f64::INFINITY;
    }
    let diff: f64 = x.iter().zip(y).map(|(a, b)| if a == b { 0.0 } else { (a - b) * (a - b) }).sum();
    let norm: f64 = y.iter().map(|b| b * b).sum();
    if diff == 0.0 {
        0.0
    } else if diff.is_nan() || norm == 0.0 {
        f64::INFINITY
    } else {
        (diff / norm).sqrt()
    }
}

/// The metric compared with tolerances: the worse of rho and relative L2.
pub fn discrepancy(got: &[f64], want: &[f64]) -> f64 {
    rho(got, want).max(rel_l2(got, want))
}

fn dot(a: &[f64], b: &[f64]) -> (f64, f64) {
    a.iter().zip(b).fold((0.0, 0.0), |(s, m), (x, y)| (s + x * y, m + (x * y).abs()))
}

fn random_vec(rng: &mut impl RngExt, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Rounds a direction to the dtype so that both modes see exactly the same v and w.
fn rounded(dt: DType, v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| dt.round(x)).collect()
}

/// <v, J^T w> vs <J v, w>, relative to the sum of |terms| of both.
pub fn dot_product_test(f: &dyn FlatFn, dtype: DType, seed: u64) -> anyhow::Result<Outcome> {
    let mut rng = adgauge_datasets::rng(seed);
    let v = rounded(dtype, random_vec(&mut rng, f.n_in()));
    let w = rounded(dtype, random_vec(&mut rng, f.n_out()));
    let (a, ma) = dot(&v, &f.vjp(&w)?);
    let (b, mb) = dot(&f.jvp(&v)?, &w);
    let scale = ma + mb;
    let worst = if a == b {
        0.0
    } else if scale == 0.0 {
        f64::INFINITY
    } else {
        (a - b).abs() / scale
    };
    Ok(Outcome::new(CheckKind::DotProduct, dtype, if worst.is_nan() { f64::INFINITY } else { worst }))
}

/// A directional central difference at x0: random directions v (inputs) and w (outputs),
/// rounded to the dtype, and fd ~ J v computed in f64.
pub struct Directional {
    pub v: Vec<f64>,
    pub w: Vec<f64>,
    pub fd: Vec<f64>,
    /// The step.
    pub h: f64,
}

/// Computes [`Directional`], or says why finite differences would straddle a kink at x0.
pub fn finite_difference(f: &dyn FlatFn, dtype: DType, seed: u64) -> anyhow::Result<Result<Directional, String>> {
    let mut rng = adgauge_datasets::rng(seed ^ 0x005e_edfd);
    let x = f.x0();
    let v = rounded(dtype, random_vec(&mut rng, f.n_in()));
    let w = rounded(dtype, random_vec(&mut rng, f.n_out()));
    let s = x.iter().fold(1.0f64, |m, a| m.max(a.abs()));
    let h = f64::EPSILON.cbrt() * s;
    let h = (s + h) - s; // representable step
    if let Some(why) = f.fd_unsafe(h) {
        return Ok(Err(why));
    }
    let fd = central_difference(f, &v, h)?;
    Ok(Ok(Directional { v, w, fd, h }))
}

/// (f(x0 + h v) - f(x0 - h v)) / 2h in f64.
fn central_difference(f: &dyn FlatFn, v: &[f64], h: f64) -> anyhow::Result<Vec<f64>> {
    let x = f.x0();
    let plus: Vec<f64> = x.iter().zip(v).map(|(a, d)| a + h * d).collect();
    let minus: Vec<f64> = x.iter().zip(v).map(|(a, d)| a - h * d).collect();
    let (fp, fm) = (f.eval_f64(&plus)?, f.eval_f64(&minus)?);
    Ok(fp.iter().zip(&fm).map(|(p, m)| (p - m) / (2.0 * h)).collect())
}

fn skipped(kind: CheckKind, dtype: DType, why: &str) -> Outcome {
    Outcome { skipped: Some(why.to_string()), ..Outcome::new(kind, dtype, 0.0) }
}

/// J v from the JVP against the finite difference, elementwise.
pub fn fd_jvp_test(f: &dyn FlatFn, dtype: DType, d: &Result<Directional, String>) -> anyhow::Result<Outcome> {
    let d = match d {
        Ok(d) => d,
        Err(why) => return Ok(skipped(CheckKind::FdJvp, dtype, why)),
    };
    Ok(Outcome::new(CheckKind::FdJvp, dtype, discrepancy(&f.jvp(&d.v)?, &d.fd)))
}

/// <J^T w, v> from the VJP against <fd, w>, as one number relative to the sum of |terms|.
pub fn fd_vjp_test(f: &dyn FlatFn, dtype: DType, d: &Result<Directional, String>) -> anyhow::Result<Outcome> {
    let d = match d {
        Ok(d) => d,
        Err(why) => return Ok(skipped(CheckKind::FdVjp, dtype, why)),
    };
    let vjp = f.vjp(&d.w)?;
    let mut o = Outcome::new(CheckKind::FdVjp, dtype, fd_vjp_error(&vjp, &d.v, &d.fd, &d.w));
    if !o.passed() {
        // Whose adjoint: the same test with the direction restricted to each argument in turn.
        let mut start = 0;
        for (name, len) in f.input_parts() {
            let mut v = vec![0.0; d.v.len()];
            v[start..start + len].copy_from_slice(&d.v[start..start + len]);
            let fd = central_difference(f, &v, d.h)?;
            o.parts.push((name, fd_vjp_error(&vjp, &v, &fd, &d.w)));
            start += len;
        }
    }
    Ok(o)
}

/// <vjp, v> against <fd, w>, relative to the sum of |terms| (infinite when NaN).
fn fd_vjp_error(vjp: &[f64], v: &[f64], fd: &[f64], w: &[f64]) -> f64 {
    let (a, ma) = dot(vjp, v);
    let (b, mb) = dot(fd, w);
    let err = if a == b { 0.0 } else { (a - b).abs() / (ma + mb).max(f64::MIN_POSITIVE) };
    if err.is_nan() { f64::INFINITY } else { err }
}

/// The whole Jacobian both ways (n_in JVPs, n_out VJPs); only for small cases.
pub fn full_jacobian_test(f: &dyn FlatFn, dtype: DType) -> anyhow::Result<Outcome> {
    let (n, m) = (f.n_in(), f.n_out());
    let mut by_rows = vec![0.0; n * m]; // row-major m x n from VJPs
    for r in 0..m {
        let mut e = vec![0.0; m];
        e[r] = 1.0;
        by_rows[r * n..(r + 1) * n].copy_from_slice(&f.vjp(&e)?);
    }
    let mut by_cols = vec![0.0; n * m];
    for c in 0..n {
        let mut e = vec![0.0; n];
        e[c] = 1.0;
        for (r, x) in f.jvp(&e)?.into_iter().enumerate() {
            by_cols[r * n + c] = x;
        }
    }
    Ok(Outcome::new(CheckKind::FullJacobian, dtype, discrepancy(&by_rows, &by_cols)))
}

/// Compares two results of the same quantity. In the `extremes` and `oracle-primal` checks a NaN
/// where the reference has NaN is right (guide, Histogram rules: NaN propagates), so such pairs
/// count as equal; everywhere else NaN is infinitely wrong.
pub fn compare(kind: CheckKind, dtype: DType, got: &[f64], want: &[f64]) -> Outcome {
    if matches!(kind, CheckKind::Extremes | CheckKind::OraclePrimal) && got.len() == want.len() {
        let (got, want): (Vec<f64>, Vec<f64>) =
            got.iter().zip(want).map(|(&a, &b)| if a.is_nan() && b.is_nan() { (0.0, 0.0) } else { (a, b) }).unzip();
        return Outcome::new(kind, dtype, discrepancy(&got, &want));
    }
    Outcome::new(kind, dtype, discrepancy(got, want))
}

/// Runs every check of a workload's [`Validation`], in the order results list them: the
/// dot-product test when the flat function has both modes, fd-jvp when it has a JVP, fd-vjp when
/// it has a VJP (or neither), the full Jacobian when it has both, then the workload's comparisons (one outcome per check, the worst of its
/// comparisons).
pub fn run_checks(v: &Validation, dtype: DType, seed: u64) -> anyhow::Result<Vec<Outcome>> {
    let f = v.flat.as_ref();
    let mut out = Vec::new();
    let has_jvp = f.jvp(&vec![0.0; f.n_in()]).is_ok();
    // A tool with forward mode only (dual numbers) is checked in forward mode alone.
    let has_vjp = f.vjp(&vec![0.0; f.n_out()]).is_ok();
    let fd = finite_difference(f, dtype, seed)?;
    if has_jvp && has_vjp {
        out.push(dot_product_test(f, dtype, seed)?);
    }
    if has_jvp {
        out.push(fd_jvp_test(f, dtype, &fd)?);
    }
    if has_vjp || !has_jvp {
        out.push(fd_vjp_test(f, dtype, &fd)?);
    }
    if let Some(full) = &v.full_jacobian
        && has_vjp
    {
        let mut o = full_jacobian_test(full.flat.as_ref(), dtype)?;
        o.tolerance = tolerance(full.tolerance_of, dtype);
        out.push(o);
    }
    let parts = f.input_parts();
    for c in &v.comparisons {
        let mut o = Outcome { convention: c.convention.clone(), ..compare(c.check, dtype, &c.got, &c.want) };
        // A failed adjoint of the whole input, argument by argument.
        if !o.passed() && c.check == CheckKind::OracleVjp && c.got.len() == f.n_in() && c.want.len() == f.n_in() {
            let mut start = 0;
            for &(name, len) in &parts {
                let range = start..start + len;
                o.parts.push((name, discrepancy(&c.got[range.clone()], &c.want[range])));
                start += len;
            }
        }
        match out.iter_mut().find(|x| x.kind == c.check) {
            Some(prev) => {
                prev.worst = prev.worst.max(o.worst);
                prev.convention = prev.convention.take().or(o.convention);
                if prev.parts.is_empty() {
                    prev.parts = o.parts;
                }
            }
            None => out.push(o),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use adgauge_workloads::Comparison;

    use super::*;

    /// f(x) = [x0 * x1, sin(x2)] with an optional bug in the VJP.
    struct Toy {
        x: Vec<f64>,
        wrong_vjp: bool,
    }

    impl FlatFn for Toy {
        fn n_in(&self) -> usize {
            3
        }
        fn n_out(&self) -> usize {
            2
        }
        fn x0(&self) -> &[f64] {
            &self.x
        }
        fn eval_f64(&self, x: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            Ok(vec![x[0] * x[1], x[2].sin()])
        }
        fn vjp(&self, w: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            let x = &self.x;
            let d0 = if self.wrong_vjp { 0.0 } else { w[0] * x[1] };
            Ok(vec![d0, w[0] * x[0], w[1] * x[2].cos()])
        }
        fn jvp(&self, v: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            let x = &self.x;
            Ok(vec![v[0] * x[1] + v[1] * x[0], v[2] * x[2].cos()])
        }
        fn fd_unsafe(&self, _h: f64) -> Option<String> {
            None
        }
        fn input_parts(&self) -> Vec<(&'static str, usize)> {
            vec![("ab", 2), ("c", 1)]
        }
    }

    #[test]
    fn correct_derivatives_pass_every_check() {
        let f = Toy { x: vec![0.5, -2.0, 1.25], wrong_vjp: false };
        assert!(dot_product_test(&f, DType::F64, 1).unwrap().passed());
        let d = finite_difference(&f, DType::F64, 1).unwrap();
        for o in [fd_jvp_test(&f, DType::F64, &d).unwrap(), fd_vjp_test(&f, DType::F64, &d).unwrap()] {
            assert!(o.passed(), "{o:?}");
            assert!(o.worst < 1e-8, "{o:?}");
        }
        let j = full_jacobian_test(&f, DType::F64).unwrap();
        assert_eq!(j.worst, 0.0);
    }

    #[test]
    fn a_wrong_vjp_fails_the_dot_product_fd_and_jacobian_checks() {
        let f = Toy { x: vec![0.5, -2.0, 1.25], wrong_vjp: true };
        assert!(!dot_product_test(&f, DType::F64, 1).unwrap().passed());
        let d = finite_difference(&f, DType::F64, 1).unwrap();
        let (jvp, vjp) = (fd_jvp_test(&f, DType::F64, &d).unwrap(), fd_vjp_test(&f, DType::F64, &d).unwrap());
        assert!(jvp.passed() && !vjp.passed(), "{jvp:?} {vjp:?}");
        assert!(!full_jacobian_test(&f, DType::F64).unwrap().passed());
    }

    /// The bug is in x0's adjoint: the failing fd-vjp names argument "ab" (x0, x1) wrong and
    /// "c" (x2) right, and so does a failing oracle comparison of the whole adjoint.
    #[test]
    fn a_failed_reverse_check_says_which_argument_is_wrong() {
        let f = Toy { x: vec![0.5, -2.0, 1.25], wrong_vjp: true };
        let d = finite_difference(&f, DType::F64, 1).unwrap();
        let o = fd_vjp_test(&f, DType::F64, &d).unwrap();
        assert_eq!(o.parts.iter().map(|p| p.0).collect::<Vec<_>>(), ["ab", "c"]);
        assert!(o.parts[0].1 > 1e-3 && o.parts[1].1 < 1e-8, "{:?}", o.parts);
        assert!(o.parts_text().contains("ab") && o.parts_text().ends_with(" ok"), "{}", o.parts_text());
        let right = Toy { wrong_vjp: false, ..f };
        let w = [0.25, -1.5];
        let comparisons = vec![Comparison {
            check: CheckKind::OracleVjp,
            got: Toy { x: right.x.clone(), wrong_vjp: true }.vjp(&w).unwrap(),
            want: right.vjp(&w).unwrap(),
            convention: None,
        }];
        let v = Validation { flat: Box::new(right), full_jacobian: None, comparisons };
        let outcomes = run_checks(&v, DType::F64, 1).unwrap();
        let oracle = outcomes.iter().find(|o| o.kind == CheckKind::OracleVjp).unwrap();
        // got [0, 0.125] against want [-0.5, 0.125] on "ab": relative L2 0.5 / |want|
        // (above rho's 0.5); "c" equal.
        let want_ab = 0.5 / (0.5f64 * 0.5 + 0.125 * 0.125).sqrt();
        assert_eq!(oracle.parts.iter().map(|p| p.0).collect::<Vec<_>>(), ["ab", "c"]);
        assert!((oracle.parts[0].1 - want_ab).abs() < 1e-12 && oracle.parts[1].1 == 0.0, "{:?}", oracle.parts);
        // The right flat function passes its own checks: no breakdown there.
        assert!(outcomes.iter().filter(|o| o.kind != CheckKind::OracleVjp).all(|o| o.passed() && o.parts.is_empty()));
    }

    #[test]
    fn metrics_catch_small_gradients_that_rho_alone_lets_pass() {
        let want = [1e-6, 2e-6];
        let got = [2e-6, 4e-6];
        assert!(rho(&got, &want) < 1e-5);
        assert!(rel_l2(&got, &want) > 0.9);
        assert_eq!(discrepancy(&want, &want), 0.0);
        assert_eq!(discrepancy(&[f64::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(discrepancy(&[f64::INFINITY], &[f64::INFINITY]), 0.0);
        assert_eq!(discrepancy(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }
}

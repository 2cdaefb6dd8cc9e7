//! Rules of scans and linear recurrences.
//!
//! A forward scan is the recurrence below, from the neutral element (prev = j-1; j+1 for a
//! reverse scan; restarting at each segment). Its derivatives are linear recurrences with the
//! multipliers m (how the state passes on) and the input weights c (how the element enters),
//! where `Y[prev]` is the exclusive scan:
//!
//! ```text
//! Y[j] = Y[prev] op x[j],   m[j] = d1(Y[prev], x[j]),   c[j] = d2(Y[prev], x[j])
//! ```
//!
//! * JVP (lifting): `dY[j] = c[j] dx[j] + m[j] dY[prev]`, a recurrence in the scan's direction.
//! * VJP: with `z[j]` the adjoint of the state `Y[j]`, `z[j] = ybar[j] + m[next] z[next]` runs
//!   the other way, and `x_bar = c * z`. Writing `u[j] = m[j] z[j]` makes the multiplier line up
//!   with its element: `u[j] = m[j] ybar[j] + m[j] u[next]`, so `z = ybar + (exclusive u)`. For
//!   an exclusive scan, whose output at j is `Y[prev]`, z is directly the exclusive recurrence
//!   of ybar with multipliers m.
//!
//! Both recurrences are [`crate::ScanOps::linear_recurrence`], the scan of affine maps. For `+` the
//! multipliers are 1 and the VJP is the scan of the adjoint in the other direction (suffix sums).
//! Asymmetric min/max partials give ties to the left operand, the earlier state, matching the
//! scan's own tie policy.

use crate::ops::{TensorMeta, TensorOps};
use crate::{HistOp, Operand, Ops, Result, ScanSpec};

/// A scan's pullback: the adjoint of x from the adjoint of the scan.
pub type ScanPullback<B> = Box<dyn Fn(&B, &<B as TensorOps>::T) -> Result<<B as TensorOps>::T>>;

/// The adjoint of the inclusive states of a recurrence with multipliers `m`, from the adjoint
/// `ybar` of its outputs (inclusive or exclusive per `spec`).
fn state_adjoints<B: Ops>(b: &B, m: &B::T, ybar: &B::T, spec: ScanSpec, segments: Option<&B::I>) -> Result<B::T> {
    let back = ScanSpec { exclusive: true, reverse: !spec.reverse };
    if spec.exclusive {
        b.linear_recurrence(ybar, m, back, segments)
    } else {
        let u = b.linear_recurrence(&b.mul(m, ybar)?, m, back, segments)?;
        b.add(ybar, &u)
    }
}

/// The multipliers and input weights `(m, c)` of a scan, from the exclusive scan.
fn scan_partials<B: Ops>(
    b: &B,
    op: HistOp,
    x: &B::T,
    y: &B::T,
    spec: ScanSpec,
    segments: Option<&B::I>,
) -> Result<(B::T, B::T)> {
    let prev = if spec.exclusive { y.clone() } else { b.scan(op, x, spec.to_exclusive(), segments)? };
    Ok((b.combine_partial(op, Operand::Left, &prev, x)?, b.combine_partial(op, Operand::Right, &prev, x)?))
}

/// Runs the scan and returns it with its pullback.
pub fn scan_vjp<B: Ops>(
    b: &B,
    op: HistOp,
    x: &B::T,
    spec: ScanSpec,
    segments: Option<&B::I>,
) -> Result<(B::T, ScanPullback<B>)> {
    let y = b.scan(op, x, spec, segments)?;
    let segs = segments.cloned();
    if op == HistOp::Add {
        return Ok((y, Box::new(move |b: &B, g: &B::T| b.scan(HistOp::Add, g, spec.flipped(), segs.as_ref()))));
    }
    let (m, c) = scan_partials(b, op, x, &y, spec, segments)?;
    let pullback = move |b: &B, g: &B::T| {
        let z = state_adjoints(b, &m, g, spec, segs.as_ref())?;
        b.mul(&c, &z)
    };
    Ok((y, Box::new(pullback)))
}

/// The tangent of `y = scan(op, x)` for the tangent `dx`.
pub fn scan_jvp<B: Ops>(
    b: &B,
    op: HistOp,
    x: &B::T,
    y: &B::T,
    dx: &B::T,
    spec: ScanSpec,
    segments: Option<&B::I>,
) -> Result<B::T> {
    if op == HistOp::Add {
        return b.scan(HistOp::Add, dx, spec, segments);
    }
    let (m, c) = scan_partials(b, op, x, y, spec, segments)?;
    b.linear_recurrence(&b.mul(&c, dx)?, &m, spec, segments)
}

/// A linear recurrence's pullback: the adjoints of a and b.
pub type RecurrencePullback<B> =
    Box<dyn Fn(&B, &<B as TensorOps>::T) -> Result<(<B as TensorOps>::T, <B as TensorOps>::T)>>;

fn recurrence_prev<B: Ops>(
    b: &B,
    a: &B::T,
    m: &B::T,
    y: &B::T,
    spec: ScanSpec,
    segments: Option<&B::I>,
) -> Result<B::T> {
    if spec.exclusive { Ok(y.clone()) } else { b.linear_recurrence(a, m, spec.to_exclusive(), segments) }
}

/// Runs `y = linear_recurrence(a, m)` and returns it with its pullback: `a_bar = z` (the state
/// adjoints), `m_bar = z * y[prev]`.
pub fn linear_recurrence_vjp<B: Ops>(
    b: &B,
    a: &B::T,
    m: &B::T,
    spec: ScanSpec,
    segments: Option<&B::I>,
) -> Result<(B::T, RecurrencePullback<B>)> {
    let y = b.linear_recurrence(a, m, spec, segments)?;
    let prev = recurrence_prev(b, a, m, &y, spec, segments)?;
    let (m, segs) = (m.clone(), segments.cloned());
    let pullback = move |b: &B, g: &B::T| {
        let z = state_adjoints(b, &m, g, spec, segs.as_ref())?;
        let m_bar = b.mul(&z, &prev)?;
        Ok((z, m_bar))
    };
    Ok((y, Box::new(pullback)))
}

/// The tangent of `y = linear_recurrence(a, m)`: the recurrence of `da + dm * y[prev]`.
#[allow(clippy::too_many_arguments)]
pub fn linear_recurrence_jvp<B: Ops>(
    b: &B,
    a: &B::T,
    m: &B::T,
    y: &B::T,
    da: Option<&B::T>,
    dm: Option<&B::T>,
    spec: ScanSpec,
    segments: Option<&B::I>,
) -> Result<B::T> {
    let drive = match (da, dm) {
        (da, Some(dm)) => {
            let prev = recurrence_prev(b, a, m, y, spec, segments)?;
            let t = b.mul(dm, &prev)?;
            match da {
                Some(da) => b.add(da, &t)?,
                None => t,
            }
        }
        (Some(da), None) => da.clone(),
        (None, None) => return b.zeros_like(y),
    };
    debug_assert_eq!(drive.shape(), y.shape());
    b.linear_recurrence(&drive, m, spec, segments)
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use proptest::prelude::*;

    use super::*;
    use crate::{Cpu, DType, Forward, Reverse, oracle};

    const SPECS: [ScanSpec; 4] = [
        ScanSpec { exclusive: false, reverse: false },
        ScanSpec { exclusive: true, reverse: false },
        ScanSpec { exclusive: false, reverse: true },
        ScanSpec { exclusive: true, reverse: true },
    ];

    fn close(what: &str, got: &[f64], want: &[f64], op: HistOp, dt: DType) {
        let tol = if op.tie_break().is_some() { 0.0 } else { 64.0 * dt.epsilon() };
        assert_eq!(got.len(), want.len(), "{what}");
        for (j, (&a, &e)) in got.iter().zip(want).enumerate() {
            let ok = a == dt.round(e) || (a - e).abs() <= tol * e.abs().max(1.0);
            assert!(ok, "{what}[{j}]: got {a}, want {e}");
        }
    }

    /// Reverse and forward scans against the oracle's values, VJP and JVP.
    fn check(op: HistOp, dt: DType, x: &[f64], segments: Option<&[i64]>) {
        let c = Cpu::new(Some(1)).unwrap();
        let x: Vec<f64> = x.iter().map(|&v| dt.round(v)).collect();
        let n = x.len();
        let ybar: Vec<f64> = (0..n).map(|j| dt.round(1.0 - 0.25 * j as f64)).collect();
        let xdot: Vec<f64> = (0..n).map(|j| dt.round(0.5 + 0.125 * j as f64)).collect();
        let segs = segments.map(|s| c.index(s).unwrap());
        for spec in SPECS {
            let tag = format!("{op} {dt} {spec:?} segmented={}", segments.is_some());
            let r = Reverse::new(c.clone());
            let xv = r.var(c.tensor(&x, &[n], dt).unwrap());
            let y = r.scan(op, &xv, spec, segs.as_ref()).unwrap();
            close(&format!("{tag} y"), &c.to_vec(y.value()).unwrap(), &oracle::scan(op, &x, spec, segments), op, dt);
            let g = r.backward(&y, c.tensor(&ybar, &[n], dt).unwrap()).unwrap();
            close(
                &format!("{tag} x_bar"),
                &c.to_vec(&g.get_or_zeros(&c, &xv).unwrap()).unwrap(),
                &oracle::scan_vjp(op, &x, spec, segments, &ybar),
                op,
                dt,
            );
            let f = Forward::new(c.clone());
            let xd = f.dual(c.tensor(&x, &[n], dt).unwrap(), c.tensor(&xdot, &[n], dt).unwrap()).unwrap();
            let yd = f.scan(op, &xd, spec, segs.as_ref()).unwrap();
            close(
                &format!("{tag} y_dot"),
                &c.to_vec(&f.tangent(&yd).unwrap()).unwrap(),
                &oracle::scan_jvp(op, &x, spec, segments, &xdot),
                op,
                dt,
            );
        }
    }

    #[test]
    fn scans_of_every_operator_match_the_oracle_with_ties_and_segments() {
        let x = [1.0, 0.5, 0.5, -2.0, 0.0, 3.0, 3.0, 0.0, 1.5];
        let keys = [0, 0, 0, 4, 4, -1, -1, -1, 2];
        for op in HistOp::named() {
            for dt in DType::ALL {
                check(op, dt, &x, None);
                check(op, dt, &x, Some(&keys));
                check(op, dt, &[], None);
                check(op, dt, &[2.5], Some(&[7]));
            }
        }
    }

    #[test]
    fn min_scan_gives_a_tie_to_the_earlier_element() {
        let c = Cpu::new(Some(1)).unwrap();
        let r = Reverse::new(c.clone());
        let x = r.var(c.tensor(&[2.0, 1.0, 1.0, 3.0], &[4], DType::F64).unwrap());
        let y = r.scan(HistOp::Min, &x, ScanSpec::INCLUSIVE, None).unwrap();
        assert_eq!(c.to_vec(y.value()).unwrap(), vec![2.0, 1.0, 1.0, 1.0]);
        let g = r.backward(&y, c.full(&[4], 1.0, DType::F64).unwrap()).unwrap();
        assert_eq!(c.to_vec(g.get(&x).unwrap()).unwrap(), vec![1.0, 3.0, 0.0, 0.0]);
    }

    #[test]
    fn linear_recurrence_rules_pass_the_dot_product_test() {
        let c = Cpu::new(Some(1)).unwrap();
        let dt = DType::F64;
        let n = 9;
        let v = |f: &dyn Fn(usize) -> f64| c.tensor(&(0..n).map(f).collect::<Vec<_>>(), &[n], dt);
        let a = v(&|j| 0.3 * j as f64 - 1.0).unwrap();
        let m = v(&|j| 0.9 - 0.2 * (j % 4) as f64).unwrap();
        let da = v(&|j| 1.0 + 0.1 * j as f64).unwrap();
        let dm = v(&|j| 0.5 - 0.07 * j as f64).unwrap();
        let w = v(&|j| (j as f64 * 0.7).sin()).unwrap();
        let segs = c.index(&[0, 0, 0, 1, 1, 1, 1, 2, 2]).unwrap();
        for spec in SPECS {
            for s in [None, Some(&segs)] {
                let f = Forward::new(c.clone());
                let y = f
                    .linear_recurrence(
                        &f.dual(a.clone(), da.clone()).unwrap(),
                        &f.dual(m.clone(), dm.clone()).unwrap(),
                        spec,
                        s,
                    )
                    .unwrap();
                let jv = c.to_vec(&f.tangent(&y).unwrap()).unwrap();
                let r = Reverse::new(c.clone());
                let (av, mv) = (r.var(a.clone()), r.var(m.clone()));
                let y = r.linear_recurrence(&av, &mv, spec, s).unwrap();
                let g = r.backward(&y, w.clone()).unwrap();
                let (ga, gm) = (c.to_vec(g.get(&av).unwrap()).unwrap(), c.to_vec(g.get(&mv).unwrap()).unwrap());
                let wv = c.to_vec(&w).unwrap();
                let lhs: f64 = wv.iter().zip(&jv).map(|(x, y)| x * y).sum();
                let (dav, dmv) = (c.to_vec(&da).unwrap(), c.to_vec(&dm).unwrap());
                let rhs: f64 = ga.iter().zip(&dav).map(|(x, y)| x * y).sum::<f64>()
                    + gm.iter().zip(&dmv).map(|(x, y)| x * y).sum::<f64>();
                assert!((lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0), "{spec:?}: {lhs} vs {rhs}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
        #[test]
        fn random_scans_match_the_oracle(
            x in proptest::collection::vec((-3i32..4).prop_map(|v| v as f64 * 0.5), 0..12),
            seg_seed in 0u64..1000,
        ) {
            let keys: Vec<i64> = (0..x.len()).map(|j| ((j as u64 * 7 + seg_seed) / 5 % 3) as i64).collect();
            for op in HistOp::named() {
                for dt in DType::ALL {
                    check(op, dt, &x, Some(&keys));
                }
            }
        }
    }
}

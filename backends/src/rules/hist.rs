//! Derivative rules of `reduce_by_index` (the generalised histogram).
//!
//! `hist = reduce_by_index(dest, op, inds, vals)`; each bin is a left fold starting with dest
//! (position -1) and taking the bin's elements in index order; out-of-range indices are ignored.
//! Reverse rules (re-derived from the MSc thesis in shared/seeds, chapters 3-4):
//!
//! * `+`: dest_bar = hist_bar; vals_bar[i] = hist_bar[inds[i]] (0 when out of range): a gather.
//! * min/max: the forward sweep is the arg-histogram over (value, position) pairs, ties to the
//!   lowest position so dest (-1) wins ties; exactly one winner per bin receives the adjoint.
//! * `*`: the forward sweep keeps, per bin, the product p of the non-zero values and the number z
//!   of zeros, so h = (z > 0 ? 0 : p) and hist = dest * h. dest_bar = h * hist_bar and
//!   vals_bar[i] = dest * hist_bar * (z == 0 ? p / v_i : (z == 1 and v_i == 0 ? p : 0)), which
//!   never divides by zero (the v_i == 0 case takes the other branch).

use std::fmt;
use std::str::FromStr;

use crate::ops::{Extremum, OutOfRange, TensorMeta};
use crate::{HistOp, OpError, Ops, Result};

/// Which reverse rule `reduce_by_index` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistRule {
    /// The cheapest correct rule for the operator.
    Auto,
    /// The operator's own rule (+, min/max, *; the total form for general operators).
    Special,
    /// The general rule with l and r from a stable sort by bin and segmented scans.
    GeneralSort,
    /// The general rule with l and r from fixed chunks and per-chunk running arrays.
    GeneralChunked,
}

impl HistRule {
    pub const ALL: [HistRule; 4] = [
        HistRule::Auto,
        HistRule::Special,
        HistRule::GeneralSort,
        HistRule::GeneralChunked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HistRule::Auto => "auto",
            HistRule::Special => "special",
            HistRule::GeneralSort => "general-sort",
            HistRule::GeneralChunked => "general-chunked",
        }
    }
}

impl fmt::Display for HistRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HistRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        HistRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown rule '{s}' (expected auto, special, general-sort or general-chunked)"
                )
            })
    }
}

/// The pullback of a histogram: `(dest_bar, vals_bar)` from `hist_bar`.
pub type HistPullback<B> =
    Box<dyn Fn(&B, &<B as Ops>::T) -> Result<(<B as Ops>::T, <B as Ops>::T)>>;

/// Runs the forward sweep of `reduce_by_index` under `rule` and returns the histogram with its
/// pullback.
pub fn reduce_by_index_vjp<B: Ops>(
    b: &B,
    rule: HistRule,
    dest: &B::T,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    match rule {
        HistRule::Auto | HistRule::Special => {}
        HistRule::GeneralSort | HistRule::GeneralChunked => {
            return Err(OpError::Unsupported(format!(
                "the {rule} rule is not implemented yet (it arrives with the general operators)"
            )));
        }
    }
    match op {
        HistOp::Add => add_rule(b, dest, inds, vals),
        HistOp::Mul => mul_rule(b, dest, inds, vals),
        HistOp::Min => extremum_rule(b, dest, Extremum::Min, inds, vals),
        HistOp::Max => extremum_rule(b, dest, Extremum::Max, inds, vals),
    }
}

fn add_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let hist = b.reduce_by_index(dest, HistOp::Add, inds, vals)?;
    let (inds, vals_shape) = (inds.clone(), vals.shape().to_vec());
    let pullback = move |b: &B, g: &B::T| {
        let vals_bar = b.gather(g, &inds, OutOfRange::Fill(0.0))?;
        Ok((g.clone(), b.reshape(&vals_bar, &vals_shape)?))
    };
    Ok((hist, Box::new(pullback)))
}

fn extremum_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    ext: Extremum,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let (hist, winners) = b.arg_reduce_by_index(dest, ext, inds, vals)?;
    let (n, vals_shape) = (vals.numel(), vals.shape().to_vec());
    let pullback = move |b: &B, g: &B::T| {
        let (dest_bar, vals_bar) = winner_pullback(b, &winners, n, g)?;
        Ok((dest_bar, b.reshape(&vals_bar, &vals_shape)?))
    };
    Ok((hist, Box::new(pullback)))
}

/// Routes each bin's adjoint to its single winner: dest when the winner is -1, else the element
/// at the winning position (a scatter of k values into n zeros; -1 is out of range and ignored).
pub fn winner_pullback<B: Ops>(b: &B, winners: &B::I, n: usize, g: &B::T) -> Result<(B::T, B::T)> {
    let dt = g.dtype();
    let zero = b.scalar(0.0, dt)?;
    let dest_won = b.index_eq(winners, -1, dt)?;
    let dest_won = b.reshape(&dest_won, g.shape())?;
    let dest_bar = b.select(&dest_won, g, &zero)?;
    let flat_g = b.reshape(g, &[g.numel()])?;
    let vals_bar = b.scatter(&b.full(&[n], 0.0, dt)?, winners, &flat_g)?;
    Ok((dest_bar, vals_bar))
}

fn mul_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let (dt, k) = (dest.dtype(), dest.numel());
    let (p, zeros) = b.prod_nonzero_by_index(inds, vals, k)?;
    let p = b.reshape(&p, dest.shape())?;
    let zero = b.scalar(0.0, dt)?;
    let no_zero = b.reshape(&b.index_eq(&zeros, 0, dt)?, dest.shape())?;
    let one_zero = b.reshape(&b.index_eq(&zeros, 1, dt)?, dest.shape())?;
    let h = b.select(&no_zero, &p, &zero)?;
    let hist = b.mul(dest, &h)?;
    let (dest, inds, vals) = (dest.clone(), inds.clone(), vals.clone());
    let pullback = move |b: &B, g: &B::T| {
        let dest_bar = b.mul(&h, g)?;
        // Per bin: c0 serves bins without zeros (divided by v_i), c1 the zero of one-zero bins.
        let sp = b.mul(&b.mul(&dest, g)?, &p)?;
        let c0 = b.select(&no_zero, &sp, &zero)?;
        let c1 = b.select(&one_zero, &sp, &zero)?;
        let vals_bar = b.prod_vals_adjoint(&inds, &vals, &c0, &c1)?;
        Ok((dest_bar, vals_bar))
    };
    Ok((hist, Box::new(pullback)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Cpu, DType, Ops, Reverse, oracle};

    struct Out {
        hist: Vec<f64>,
        dest_bar: Vec<f64>,
        vals_bar: Vec<f64>,
    }

    fn run(
        cpu: &Cpu,
        op: HistOp,
        dt: DType,
        dest: &[f64],
        inds: &[i64],
        vals: &[f64],
        hist_bar: &[f64],
    ) -> Out {
        let r = Reverse::new(cpu.clone()).with_hist_rule(HistRule::Special);
        let d = r.var(cpu.tensor(dest, &[dest.len()], dt).unwrap());
        let v = r.var(cpu.tensor(vals, &[vals.len()], dt).unwrap());
        let ix = cpu.index(inds).unwrap();
        let h = r.reduce_by_index(&d, op, &ix, &v).unwrap();
        let g = r
            .backward(&h, cpu.tensor(hist_bar, &[hist_bar.len()], dt).unwrap())
            .unwrap();
        Out {
            hist: cpu.to_vec(h.value()).unwrap(),
            dest_bar: cpu.to_vec(&g.get_or_zeros(cpu, &d).unwrap()).unwrap(),
            vals_bar: cpu.to_vec(&g.get_or_zeros(cpu, &v).unwrap()).unwrap(),
        }
    }

    fn round(dt: DType, xs: &[f64]) -> Vec<f64> {
        xs.iter().map(|&x| dt.round(x)).collect()
    }

    /// Compares with the oracle on dtype-rounded inputs: exactly for min/max, to a few ulps of
    /// the dtype otherwise (the device folds chunks in another order than the oracle).
    fn check(
        cpu: &Cpu,
        op: HistOp,
        dt: DType,
        dest: &[f64],
        inds: &[i64],
        vals: &[f64],
        hist_bar: &[f64],
    ) {
        let (dest, vals, hist_bar) = (round(dt, dest), round(dt, vals), round(dt, hist_bar));
        let got = run(cpu, op, dt, &dest, inds, &vals, &hist_bar);
        let (h, db, vb) = oracle::hist_vjp(op, &dest, inds, &vals, &hist_bar);
        let exact = matches!(op, HistOp::Min | HistOp::Max);
        let tol = if exact { 0.0 } else { 64.0 * dt.epsilon() };
        for (name, g, w) in [
            ("hist", &got.hist, &h),
            ("dest_bar", &got.dest_bar, &db),
            ("vals_bar", &got.vals_bar, &vb),
        ] {
            assert_eq!(g.len(), w.len(), "{op} {dt} {name} length");
            for (j, (&a, &e)) in g.iter().zip(w.iter()).enumerate() {
                let scale = e.abs().max(1.0);
                let ok = if exact {
                    a == dt.round(e)
                } else {
                    (a - e).abs() <= tol * scale
                };
                assert!(ok, "{op} {dt} {name}[{j}]: got {a}, oracle {e}");
            }
        }
    }

    fn cpu() -> Cpu {
        Cpu::new(Some(2)).unwrap()
    }

    #[test]
    fn add_sends_every_in_range_element_its_bins_adjoint() {
        let c = cpu();
        let got = run(
            &c,
            HistOp::Add,
            DType::F64,
            &[1.0, 2.0],
            &[0, 1, 1, 2, -1, 0],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &[10.0, 20.0],
        );
        assert_eq!(got.hist, vec![8.0, 7.0]);
        assert_eq!(got.dest_bar, vec![10.0, 20.0]);
        assert_eq!(got.vals_bar, vec![10.0, 20.0, 20.0, 0.0, 0.0, 10.0]);
    }

    #[test]
    fn min_and_max_give_ties_to_dest_then_to_the_lowest_position() {
        let c = cpu();
        // bin 0: dest 1 ties element 0 -> dest wins; bin 1: elements 1 and 3 tie at 0.5 ->
        // position 1 wins; bin 2: empty -> dest.
        let dest = [1.0, 2.0, -3.0];
        let inds = [0, 1, 0, 1, 5];
        let vals = [1.0, 0.5, 4.0, 0.5, -100.0];
        let got = run(
            &c,
            HistOp::Min,
            DType::F32,
            &dest,
            &inds,
            &vals,
            &[1.0, 2.0, 3.0],
        );
        assert_eq!(got.hist, vec![1.0, 0.5, -3.0]);
        assert_eq!(got.dest_bar, vec![1.0, 0.0, 3.0]);
        assert_eq!(got.vals_bar, vec![0.0, 2.0, 0.0, 0.0, 0.0]);
        let got = run(
            &c,
            HistOp::Max,
            DType::F64,
            &[4.0, 0.5, -3.0],
            &inds,
            &vals,
            &[1.0, 2.0, 3.0],
        );
        assert_eq!(got.hist, vec![4.0, 0.5, -3.0]);
        assert_eq!(got.dest_bar, vec![1.0, 2.0, 3.0]);
        assert_eq!(got.vals_bar, vec![0.0; 5]);
    }

    #[test]
    fn mul_handles_bins_with_zero_one_and_two_zeros_without_dividing_by_zero() {
        let c = cpu();
        // bin 0: no zeros (2*3); bin 1: one zero; bin 2: two zeros; bin 3: empty.
        let dest = [0.5, 2.0, 3.0, 7.0];
        let inds = [0, 1, 2, 0, 1, 2, 2];
        let vals = [2.0, 0.0, 0.0, 3.0, 5.0, 0.0, 4.0];
        for dt in DType::ALL {
            let got = run(
                &c,
                HistOp::Mul,
                dt,
                &dest,
                &inds,
                &vals,
                &[1.0, 1.0, 1.0, 1.0],
            );
            assert_eq!(got.hist, vec![3.0, 0.0, 0.0, 7.0]);
            assert_eq!(got.dest_bar, vec![6.0, 0.0, 0.0, 1.0]);
            // d/dv0 = 0.5*3, d/dv3 = 0.5*2; the lone zero of bin 1 gets 2*5; nothing else.
            assert_eq!(got.vals_bar, vec![1.5, 10.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
            assert!(got.vals_bar.iter().all(|x| x.is_finite()));
        }
    }

    #[test]
    fn edge_shapes_n0_k1_and_all_out_of_range() {
        let c = cpu();
        for op in HistOp::ALL {
            for dt in DType::ALL {
                check(&c, op, dt, &[1.5, -2.0], &[], &[], &[1.0, 1.0]);
                check(
                    &c,
                    op,
                    dt,
                    &[0.25],
                    &[0, 0, 0, 0],
                    &[1.0, 2.0, -1.0, 0.5],
                    &[3.0],
                );
                check(
                    &c,
                    op,
                    dt,
                    &[1.0, 2.0],
                    &[-1, 2, 99, i64::MIN, i64::MAX],
                    &[1.0, 2.0, 3.0, 4.0, 5.0],
                    &[1.0, 1.0],
                );
            }
        }
        // k = 0: every index is out of range.
        let got = run(&c, HistOp::Add, DType::F64, &[], &[0, 1], &[1.0, 2.0], &[]);
        assert!(got.hist.is_empty() && got.dest_bar.is_empty());
        assert_eq!(got.vals_bar, vec![0.0, 0.0]);
    }

    #[test]
    fn large_inputs_use_many_chunks_and_still_match_the_oracle() {
        let c = cpu();
        let n = 200_000;
        let k = 37;
        let inds: Vec<i64> = (0..n)
            .map(|i| ((i as u64 * 2_654_435_761) % (k as u64 + 4)) as i64 - 2)
            .collect();
        let vals: Vec<f64> = (0..n)
            .map(|i| 1.0 + ((i * 7919) % 2001) as f64 * 1e-6 - 1e-3)
            .collect();
        let dest: Vec<f64> = (0..k).map(|b| 0.5 + b as f64 * 0.01).collect();
        let bar: Vec<f64> = (0..k).map(|b| 1.0 - b as f64 * 0.02).collect();
        for op in HistOp::ALL {
            check(&c, op, DType::F64, &dest, &inds, &vals, &bar);
        }
        // Ties everywhere: many equal values per bin; the first one of each bin must win.
        let tied: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
        check(&c, HistOp::Min, DType::F32, &dest, &inds, &tied, &bar);
        check(&c, HistOp::Max, DType::F32, &dest, &inds, &tied, &bar);
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let n = 300_000;
        let inds: Vec<i64> = (0..n).map(|i| ((i as u64 * 40503) % 1000) as i64).collect();
        let vals: Vec<f64> = (0..n).map(|i| ((i * 31) % 997) as f64 * 0.001).collect();
        let dest = vec![0.0; 1000];
        let bar = vec![1.0; 1000];
        let a = run(
            &Cpu::new(Some(1)).unwrap(),
            HistOp::Add,
            DType::F32,
            &dest,
            &inds,
            &vals,
            &bar,
        );
        let b = run(
            &Cpu::new(Some(3)).unwrap(),
            HistOp::Add,
            DType::F32,
            &dest,
            &inds,
            &vals,
            &bar,
        );
        assert_eq!(a.hist, b.hist);
    }

    fn case() -> impl Strategy<Value = (usize, Vec<i64>, Vec<f64>, Vec<f64>)> {
        (1usize..6, 0usize..40).prop_flat_map(|(k, n)| {
            (
                Just(k),
                proptest::collection::vec(-1i64..(k as i64 + 1), n),
                // Small integers make ties and zeros common.
                proptest::collection::vec((-3i32..4).prop_map(|x| x as f64 * 0.5), n),
                proptest::collection::vec((-3i32..4).prop_map(|x| x as f64 * 0.5), k),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn every_special_rule_matches_the_oracle((k, inds, vals, dest) in case()) {
            let c = Cpu::new(Some(1)).unwrap();
            let bar: Vec<f64> = (0..k).map(|b| 1.0 + b as f64).collect();
            for op in HistOp::ALL {
                for dt in DType::ALL {
                    check(&c, op, dt, &dest, &inds, &vals, &bar);
                }
            }
        }
    }
}

//! Peers whose AD works on scalars: the histogram as the semantics' sequential fold (each bin
//! starts at dest and folds its values in index order), written once over [`Scalar`] and run
//! on each crate's number type. num-dual's `Dual64` gives forward mode; ad_trait's `adfn<1>`
//! forward and its taped `adr` reverse mode (one sweep from the scalar <hist_bar, hist>).
//!
//! Where the crate has a primitive (ad_trait's `max`, `min`, `hypot`) the fold uses it, so the
//! crate's own derivative rule is what is judged; num-dual has no max/min without its nalgebra
//! feature, so the fold compares the real parts and keeps the first extremum (one winner,
//! dest first, like adgauge). logaddexp is max-shifted, `m + ln(e^(a-m) + e^(b-m))`, whose
//! derivative is right whichever side the max picks at a tie, with -inf (its neutral element)
//! passed through.

use serde_json::Value as Json;

use adgauge_workloads::Mode;
use adgauge_workloads::json::HistCase;

use super::{HistPeer, in_range, output};
use crate::endpoint::Call;

/// The operators a scalar fold expresses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarOp {
    Add,
    Mul,
    Min,
    Max,
    LogAddExp,
    Hypot,
}

impl ScalarOp {
    fn parse(op: &str) -> Result<ScalarOp, String> {
        Ok(match op {
            "add" => ScalarOp::Add,
            "mul" => ScalarOp::Mul,
            "min" => ScalarOp::Min,
            "max" => ScalarOp::Max,
            "logaddexp" => ScalarOp::LogAddExp,
            "hypot" => ScalarOp::Hypot,
            other => {
                return Err(format!(
                    "operator {other} is not expressed by this peer (add, mul, min, max, logaddexp, hypot)"
                ));
            }
        })
    }
}

/// A number type of an AD crate.
pub trait Scalar: Clone {
    fn value(&self) -> f64;
    fn add(&self, o: &Self) -> Self;
    fn sub(&self, o: &Self) -> Self;
    fn mul(&self, o: &Self) -> Self;
    fn exp(&self) -> Self;
    fn ln(&self) -> Self;
    fn max(&self, o: &Self) -> Self;
    fn min(&self, o: &Self) -> Self;
    fn hypot(&self, o: &Self) -> Self;
}

fn combine<S: Scalar>(op: ScalarOp, a: &S, b: &S) -> S {
    match op {
        ScalarOp::Add => a.add(b),
        ScalarOp::Mul => a.mul(b),
        ScalarOp::Min => a.min(b),
        ScalarOp::Max => a.max(b),
        ScalarOp::LogAddExp if a.value() == f64::NEG_INFINITY => b.clone(),
        ScalarOp::LogAddExp if b.value() == f64::NEG_INFINITY => a.clone(),
        ScalarOp::LogAddExp => {
            let m = a.max(b);
            m.add(&a.sub(&m).exp().add(&b.sub(&m).exp()).ln())
        }
        ScalarOp::Hypot => a.hypot(b),
    }
}

/// The fold: per bin, dest then its values in index order.
fn fold<S: Scalar>(op: ScalarOp, bins: &[usize], positions: &[usize], vals: &[S], dest: &[S]) -> Vec<S> {
    let mut hist = dest.to_vec();
    for (&b, &i) in bins.iter().zip(positions) {
        hist[b] = combine(op, &hist[b], &vals[i]);
    }
    hist
}

/// A case's fields for the calls.
struct Prepared {
    op: ScalarOp,
    positions: Vec<usize>,
    bins: Vec<usize>,
    case: HistCase,
}

impl Prepared {
    fn new(op: &str, case: &HistCase) -> Result<Prepared, String> {
        let (positions, bins) = in_range(case);
        Ok(Prepared { op: ScalarOp::parse(op)?, positions, bins, case: case.clone() })
    }
}

impl Scalar for f64 {
    fn value(&self) -> f64 {
        *self
    }
    fn add(&self, o: &f64) -> f64 {
        self + o
    }
    fn sub(&self, o: &f64) -> f64 {
        self - o
    }
    fn mul(&self, o: &f64) -> f64 {
        self * o
    }
    fn exp(&self) -> f64 {
        f64::exp(*self)
    }
    fn ln(&self) -> f64 {
        f64::ln(*self)
    }
    fn max(&self, o: &f64) -> f64 {
        if *o > *self { *o } else { *self }
    }
    fn min(&self, o: &f64) -> f64 {
        if *o < *self { *o } else { *self }
    }
    fn hypot(&self, o: &f64) -> f64 {
        f64::hypot(*self, *o)
    }
}

/// The primal in f64 (every scalar peer's primal function).
struct PrimalCall {
    p: Prepared,
    hist: Vec<f64>,
}

impl Call for PrimalCall {
    fn run(&mut self) -> Result<(), String> {
        let d = &self.p.case.data;
        self.hist = fold(self.p.op, &self.p.bins, &self.p.positions, &d.vals, &d.dest);
        Ok(())
    }
    fn output(&mut self) -> Result<Json, String> {
        Ok(output(&[("hist", &self.hist)]))
    }
}

#[cfg(feature = "num-dual")]
pub use num_dual_peer::NumDualHist;

#[cfg(feature = "num-dual")]
mod num_dual_peer {
    use num_dual::{Dual64, DualNum};

    use super::*;

    impl Scalar for Dual64 {
        fn value(&self) -> f64 {
            self.re
        }
        fn add(&self, o: &Self) -> Self {
            *self + *o
        }
        fn sub(&self, o: &Self) -> Self {
            *self - *o
        }
        fn mul(&self, o: &Self) -> Self {
            *self * *o
        }
        fn exp(&self) -> Self {
            DualNum::exp(self)
        }
        fn ln(&self) -> Self {
            DualNum::ln(self)
        }
        fn max(&self, o: &Self) -> Self {
            if o.re > self.re { *o } else { *self }
        }
        fn min(&self, o: &Self) -> Self {
            if o.re < self.re { *o } else { *self }
        }
        fn hypot(&self, o: &Self) -> Self {
            DualNum::sqrt(&(*self * *self + *o * *o))
        }
    }

    /// num-dual: forward mode only.
    pub struct NumDualHist;

    impl HistPeer for NumDualHist {
        fn tool(&self) -> (&'static str, &'static str) {
            ("num-dual", "0.15.1")
        }
        fn prepare(&self, mode: Mode, op: &str, case: &HistCase) -> Result<Box<dyn Call>, String> {
            let p = Prepared::new(op, case)?;
            match mode {
                Mode::Primal => Ok(Box::new(PrimalCall { p, hist: Vec::new() })),
                Mode::Jvp => Ok(Box::new(JvpCall { p, hist: Vec::new(), dot: Vec::new() })),
                _ => Err("num-dual has forward mode only (dual numbers): no vjp".into()),
            }
        }
    }

    struct JvpCall {
        p: Prepared,
        hist: Vec<f64>,
        dot: Vec<f64>,
    }

    impl Call for JvpCall {
        fn run(&mut self) -> Result<(), String> {
            let c = &self.p.case;
            let dual = |x: &[f64], dx: &Option<Vec<f64>>| -> Vec<Dual64> {
                x.iter().zip(dx.as_deref().unwrap_or_default()).map(|(&x, &d)| Dual64::new(x, d)).collect()
            };
            let vals = dual(&c.data.vals, &c.vals_dot);
            let dest = dual(&c.data.dest, &c.dest_dot);
            let h = fold(self.p.op, &self.p.bins, &self.p.positions, &vals, &dest);
            self.hist = h.iter().map(|x| x.re).collect();
            self.dot = h.iter().map(|x| x.eps).collect();
            Ok(())
        }
        fn output(&mut self) -> Result<Json, String> {
            Ok(output(&[("hist", &self.hist), ("hist_dot", &self.dot)]))
        }
    }
}

#[cfg(feature = "ad-trait")]
pub use ad_trait_peer::AdTraitHist;

#[cfg(feature = "ad-trait")]
mod ad_trait_peer {
    use ad_trait::AD;
    use ad_trait::forward_ad::adfn::adfn;
    use ad_trait::nalgebra::{ComplexField, RealField};
    use ad_trait::reverse_ad::adr::adr;

    use super::*;

    macro_rules! float_scalar {
        ($t:ty) => {
            impl Scalar for $t {
                fn value(&self) -> f64 {
                    <$t>::value(self)
                }
                fn add(&self, o: &Self) -> Self {
                    *self + *o
                }
                fn sub(&self, o: &Self) -> Self {
                    *self - *o
                }
                fn mul(&self, o: &Self) -> Self {
                    *self * *o
                }
                fn exp(&self) -> Self {
                    ComplexField::exp(*self)
                }
                fn ln(&self) -> Self {
                    ComplexField::ln(*self)
                }
                fn max(&self, o: &Self) -> Self {
                    RealField::max(*self, *o)
                }
                fn min(&self, o: &Self) -> Self {
                    RealField::min(*self, *o)
                }
                fn hypot(&self, o: &Self) -> Self {
                    ComplexField::hypot(*self, *o)
                }
            }
        };
    }
    float_scalar!(adr);
    float_scalar!(adfn<1>);

    /// ad_trait: reverse mode by its tape (`adr`), forward mode by `adfn<1>`.
    pub struct AdTraitHist;

    impl HistPeer for AdTraitHist {
        fn tool(&self) -> (&'static str, &'static str) {
            ("ad_trait", "0.3.1")
        }
        fn prepare(&self, mode: Mode, op: &str, case: &HistCase) -> Result<Box<dyn Call>, String> {
            let p = Prepared::new(op, case)?;
            Ok(match mode {
                Mode::Primal => Box::new(PrimalCall { p, hist: Vec::new() }),
                Mode::Vjp => Box::new(VjpCall { p, out: Vec::new() }),
                Mode::Jvp => Box::new(JvpCall { p, hist: Vec::new(), dot: Vec::new() }),
                other => return Err(format!("hist has no {other} function")),
            })
        }
    }

    struct VjpCall {
        p: Prepared,
        /// hist, vals_bar, dest_bar.
        out: Vec<Vec<f64>>,
    }

    impl Call for VjpCall {
        fn run(&mut self) -> Result<(), String> {
            let c = &self.p.case;
            // The first variable resets ad_trait's (thread-local) tape.
            let mut first = true;
            let mut var = |x: f64| {
                let v = adr::new_variable(x, first);
                first = false;
                v
            };
            let vals: Vec<adr> = c.data.vals.iter().map(|&x| var(x)).collect();
            let dest: Vec<adr> = c.data.dest.iter().map(|&x| var(x)).collect();
            let hist = fold(self.p.op, &self.p.bins, &self.p.positions, &vals, &dest);
            let bar = c.hist_bar.as_deref().unwrap_or_default();
            let mut s = adr::constant(0.0);
            for (h, &w) in hist.iter().zip(bar) {
                s += *h * adr::constant(w);
            }
            let grad = s.get_backwards_mode_grad();
            self.out = vec![
                hist.iter().map(|h| h.value()).collect(),
                vals.iter().map(|v| grad.wrt(v)).collect(),
                dest.iter().map(|v| grad.wrt(v)).collect(),
            ];
            Ok(())
        }
        fn output(&mut self) -> Result<Json, String> {
            let [h, v, d] = &self.out[..] else { return Err("no run".into()) };
            Ok(output(&[("hist", h), ("vals_bar", v), ("dest_bar", d)]))
        }
    }

    struct JvpCall {
        p: Prepared,
        hist: Vec<f64>,
        dot: Vec<f64>,
    }

    impl Call for JvpCall {
        fn run(&mut self) -> Result<(), String> {
            let c = &self.p.case;
            let dual = |x: &[f64], dx: &Option<Vec<f64>>| -> Vec<adfn<1>> {
                x.iter().zip(dx.as_deref().unwrap_or_default()).map(|(&x, &d)| adfn::new(x, [d])).collect()
            };
            let vals = dual(&c.data.vals, &c.vals_dot);
            let dest = dual(&c.data.dest, &c.dest_dot);
            let h = fold(self.p.op, &self.p.bins, &self.p.positions, &vals, &dest);
            self.hist = h.iter().map(|x| x.value()).collect();
            self.dot = h.iter().map(|x| x.tangent()[0]).collect();
            Ok(())
        }
        fn output(&mut self) -> Result<Json, String> {
            Ok(output(&[("hist", &self.hist), ("hist_dot", &self.dot)]))
        }
    }
}

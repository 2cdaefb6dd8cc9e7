//! The histogram workloads `hist-<op>`: `hist = reduce_by_index(dest, op, inds, vals)`,
//! differentiated with respect to `vals` and `dest`.
//!
//! Inputs come from the seeded generator in `adgauge_datasets::hist` (n, k, index distribution,
//! out-of-range fraction) with values shaped for the operator, or from an explicit case file.

use adgauge_backends::{DType, Forward, HistOp, HistRule, Ops, Result, Reverse};
use adgauge_datasets::hist::{HistData, HistSpec, IndexDist, Values};

/// One histogram workload: the operator fixes the name (`hist-<op>`) and the value shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistWorkload {
    pub op: HistOp,
}

/// A histogram case resident on an engine's device.
pub struct HistInputs<O: Ops> {
    pub dest: O::T,
    pub inds: O::I,
    pub vals: O::T,
}

/// The result of a reverse-mode evaluation.
pub struct HistVjp<O: Ops> {
    pub hist: O::T,
    pub dest_bar: O::T,
    pub vals_bar: O::T,
}

impl HistWorkload {
    /// The histogram workloads, in display order: the special operators, then the shipped
    /// general operators `logaddexp` and `hypot`.
    pub fn all() -> Vec<HistWorkload> {
        let mut ops = HistOp::ALL.to_vec();
        ops.extend(["logaddexp", "hypot"].iter().filter_map(|n| n.parse::<HistOp>().ok()));
        ops.into_iter().map(|op| HistWorkload { op }).collect()
    }

    /// `hist-add` -> the `+` workload. Any named operator is accepted (also `hist-general-min`,
    /// the general-operator version of min, which runs the general rules only).
    pub fn parse(name: &str) -> Option<HistWorkload> {
        let op = name.strip_prefix("hist-")?.parse().ok()?;
        Some(HistWorkload { op })
    }

    pub fn name(&self) -> String {
        format!("hist-{}", self.op.name())
    }

    /// The value shape the generator uses for this operator.
    pub fn values(&self) -> Values {
        match self.op.name() {
            "mul" => Values::Product,
            "min" | "max" => Values::Separated,
            "logaddexp" => Values::Logs,
            "hypot" => Values::Magnitudes,
            _ => Values::Sum,
        }
    }

    /// The generator parameters of a case of this workload.
    pub fn spec(&self, n: usize, k: usize, dist: IndexDist, out_of_range: f64, seed: u64) -> HistSpec {
        HistSpec { n, k, dist, out_of_range, values: self.values(), seed }
    }

    /// Puts a case on the engine's device, rounded to `dtype`.
    pub fn upload<O: Ops>(&self, o: &O, data: &HistData, dtype: DType) -> Result<HistInputs<O>> {
        Ok(HistInputs {
            dest: o.tensor(&data.dest, &[data.dest.len()], dtype)?,
            inds: o.index(&data.inds)?,
            vals: o.tensor(&data.vals, &[data.vals.len()], dtype)?,
        })
    }

    /// The objective: the histogram itself.
    pub fn primal<O: Ops>(&self, o: &O, x: &HistInputs<O>) -> Result<O::T> {
        self.primal_on(o, &x.dest, &x.inds, &x.vals)
    }

    /// Reverse mode: the histogram and the adjoints of dest and vals for `hist_bar`, with the
    /// reduce_by_index rule `rule`. Runs the forward sweep, tapes it, and runs the reverse sweep.
    pub fn vjp<B: Ops>(&self, b: &B, rule: HistRule, x: &HistInputs<B>, hist_bar: &B::T) -> Result<HistVjp<B>> {
        let r = Reverse::new(b.clone()).with_hist_rule(rule);
        let dest = r.var(x.dest.clone());
        let vals = r.var(x.vals.clone());
        let hist = self.primal_on(&r, &dest, &x.inds, &vals)?;
        let grads = r.backward(&hist, hist_bar.clone())?;
        Ok(HistVjp {
            dest_bar: grads.get_or_zeros(b, &dest)?,
            vals_bar: grads.get_or_zeros(b, &vals)?,
            hist: hist.value().clone(),
        })
    }

    /// Forward mode: the histogram and its tangent for tangents of dest and vals.
    pub fn jvp<B: Ops>(&self, b: &B, x: &HistInputs<B>, dest_dot: &B::T, vals_dot: &B::T) -> Result<(B::T, B::T)> {
        let f = Forward::new(b.clone());
        let dest = f.dual(x.dest.clone(), dest_dot.clone())?;
        let vals = f.dual(x.vals.clone(), vals_dot.clone())?;
        let hist = self.primal_on(&f, &dest, &x.inds, &vals)?;
        Ok((f.primal(&hist).clone(), f.tangent(&hist)?))
    }

    fn primal_on<O: Ops>(&self, o: &O, dest: &O::T, inds: &O::I, vals: &O::T) -> Result<O::T> {
        o.reduce_by_index(dest, self.op, inds, vals)
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::{Cpu, oracle};
    use adgauge_datasets::hist::generate;

    use super::*;

    #[test]
    fn names_round_trip() {
        for w in HistWorkload::all() {
            assert_eq!(HistWorkload::parse(&w.name()), Some(w));
        }
        assert_eq!(HistWorkload::parse("hist-nope"), None);
        assert_eq!(HistWorkload::parse("add"), None);
    }

    #[test]
    fn generated_cases_evaluate_to_the_oracle() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for w in HistWorkload::all() {
            let data = generate(&w.spec(3000, 17, IndexDist::Skewed, 0.05, 11));
            let x = w.upload(&cpu, &data, DType::F64).unwrap();
            let bar: Vec<f64> = (0..17).map(|b| (b as f64 - 8.0) * 0.25).collect();
            let bar_t = cpu.tensor(&bar, &[17], DType::F64).unwrap();
            let out = w.vjp(&cpu, HistRule::Auto, &x, &bar_t).unwrap();
            let (h, db, vb) = oracle::hist_vjp(w.op, &data.dest, &data.inds, &data.vals, &bar);
            let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs().max(1.0));
            assert!(close(&cpu.to_vec(&out.hist).unwrap(), &h), "{} hist", w.name());
            assert!(close(&cpu.to_vec(&out.dest_bar).unwrap(), &db), "{} dest_bar", w.name());
            assert!(close(&cpu.to_vec(&out.vals_bar).unwrap(), &vb), "{} vals_bar", w.name());
            assert!(close(&cpu.to_vec(&w.primal(&cpu, &x).unwrap()).unwrap(), &h));
            let vd: Vec<f64> = (0..data.vals.len()).map(|i| ((i * 37) % 11) as f64 * 0.1 - 0.5).collect();
            let dd: Vec<f64> = (0..17).map(|b| b as f64 * 0.05).collect();
            let (hist, hist_dot) = w
                .jvp(
                    &cpu,
                    &x,
                    &cpu.tensor(&dd, &[17], DType::F64).unwrap(),
                    &cpu.tensor(&vd, &[vd.len()], DType::F64).unwrap(),
                )
                .unwrap();
            let (h2, hd) = oracle::hist_jvp(w.op, &data.dest, &data.inds, &data.vals, &dd, &vd);
            assert!(close(&cpu.to_vec(&hist).unwrap(), &h2), "{} jvp hist", w.name());
            assert!(close(&cpu.to_vec(&hist_dot).unwrap(), &hd), "{} hist_dot", w.name());
        }
    }
}

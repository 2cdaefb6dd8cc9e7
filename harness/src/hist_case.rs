//! The histogram workloads as flat functions for validation: x = [vals, dest], y = hist.

use adgauge_backends::{DType, HistRule, Ops, oracle};
use adgauge_datasets::hist::HistData;
use adgauge_workloads::HistWorkload;

use crate::validation::FlatFn;

/// One histogram case on a device, at a point rounded to the dtype under test.
pub struct HistFlat<D: Ops> {
    pub cpu: D,
    pub workload: HistWorkload,
    pub rule: HistRule,
    pub dtype: DType,
    pub data: HistData,
    /// Fault injection for testing the validator: zero dest's adjoint (a broken `+` rule).
    pub drop_dest_adjoint: bool,
    x0: Vec<f64>,
}

impl<D: Ops> HistFlat<D> {
    pub fn new(cpu: D, workload: HistWorkload, rule: HistRule, dtype: DType, data: &HistData) -> HistFlat<D> {
        let round = |xs: &[f64]| -> Vec<f64> { xs.iter().map(|&x| dtype.round(x)).collect() };
        let data = HistData { k: data.k, inds: data.inds.clone(), vals: round(&data.vals), dest: round(&data.dest) };
        let x0 = data.vals.iter().chain(&data.dest).copied().collect();
        HistFlat { cpu, workload, rule, dtype, data, drop_dest_adjoint: false, x0 }
    }

    fn n(&self) -> usize {
        self.data.vals.len()
    }

    fn at(&self, x: &[f64]) -> HistData {
        HistData {
            k: self.data.k,
            inds: self.data.inds.clone(),
            vals: x[..self.n()].to_vec(),
            dest: x[self.n()..].to_vec(),
        }
    }

    /// (vals_bar, dest_bar) for the output adjoint `w`, under `rule`.
    pub fn vjp_parts(&self, rule: HistRule, w: &[f64]) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let x = self.workload.upload(&self.cpu, &self.data, self.dtype)?;
        let bar = self.cpu.tensor(w, &[w.len()], self.dtype)?;
        let r = self.workload.vjp(&self.cpu, rule, &x, &bar)?;
        Ok((self.cpu.to_vec(&r.vals_bar)?, self.cpu.to_vec(&r.dest_bar)?))
    }

    /// The oracle's J^T w, flattened like `vjp`.
    pub fn oracle_vjp(&self, w: &[f64]) -> Vec<f64> {
        let (_, db, vb) = oracle::hist_vjp(self.workload.op, &self.data.dest, &self.data.inds, &self.data.vals, w);
        vb.into_iter().chain(db).collect()
    }
}

impl<D: Ops> HistFlat<D> {
    /// The oracle's J v for v = [vals_dot, dest_dot].
    pub fn oracle_jvp(&self, v: &[f64]) -> Vec<f64> {
        let d = &self.data;
        let (vals_dot, dest_dot) = v.split_at(d.vals.len());
        oracle::hist_jvp(self.workload.op, &d.dest, &d.inds, &d.vals, dest_dot, vals_dot).1
    }
}

impl<D: Ops> FlatFn for HistFlat<D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        self.data.k
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> anyhow::Result<Vec<f64>> {
        let x = self.workload.upload(&self.cpu, &self.at(x), DType::F64)?;
        Ok(self.cpu.to_vec(&self.workload.primal(&self.cpu, &x)?)?)
    }
    fn vjp(&self, w: &[f64]) -> anyhow::Result<Vec<f64>> {
        let (vb, mut db) = self.vjp_parts(self.rule, w)?;
        if self.drop_dest_adjoint {
            db.iter_mut().for_each(|x| *x = 0.0);
        }
        Ok(vb.into_iter().chain(db).collect())
    }
    fn jvp(&self, v: &[f64]) -> anyhow::Result<Vec<f64>> {
        let x = self.workload.upload(&self.cpu, &self.data, self.dtype)?;
        let (vals_dot, dest_dot) = v.split_at(self.n());
        let vd = self.cpu.tensor(vals_dot, &[vals_dot.len()], self.dtype)?;
        let dd = self.cpu.tensor(dest_dot, &[dest_dot.len()], self.dtype)?;
        let (_, hist_dot) = self.workload.jvp(&self.cpu, &x, &dd, &vd)?;
        Ok(self.cpu.to_vec(&hist_dot)?)
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        let ext = self.workload.op.tie_break()?;
        // Each bin's winner must beat every other competitor by more than the step moves them
        // (|v_i| <= 1, so by 2h), or the finite difference straddles a kink.
        let d = &self.data;
        let k = d.k;
        let mut best = d.dest.clone();
        let mut second =
            vec![if ext == adgauge_backends::Extremum::Min { f64::INFINITY } else { f64::NEG_INFINITY }; k];
        let better = |a: f64, b: f64| {
            if ext == adgauge_backends::Extremum::Min { a < b } else { a > b }
        };
        for (&b, &v) in d.inds.iter().zip(&d.vals) {
            if b < 0 || b as usize >= k {
                continue;
            }
            let b = b as usize;
            if better(v, best[b]) {
                second[b] = best[b];
                best[b] = v;
            } else if better(v, second[b]) || v == best[b] {
                second[b] = v;
            }
        }
        (0..k).find(|&b| second[b].is_finite() && (best[b] - second[b]).abs() <= 2.0 * h).map(|b| {
            format!("bin {b}: competing values {} and {} are within the step 2h = {:.1e}", best[b], second[b], 2.0 * h)
        })
    }
}

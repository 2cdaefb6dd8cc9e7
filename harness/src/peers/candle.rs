//! candle-core 0.11.1: the histogram as `dest.scatter_add(bins, vals, 0)` (tool `candle`) or
//! `dest.index_add(bins, vals, 0)` (tool `candle-index-add`), differentiated by candle's
//! backprop. The operators with a sum underneath are expressed too, through the same
//! primitive with dest as its initial tensor: logaddexp as `ln(scatter_add(e^dest, e^vals))`
//! (candle has no scatter max to shift by: inputs beyond ~700 overflow) and hypot as
//! `sqrt(scatter_add(dest², vals²))`. candle has no forward mode, and no scatter product, min
//! or max. Out-of-range positions are dropped first by `index_select` (differentiable: their
//! adjoints are zero by candle's own rule).

use candle_core::{DType, Device, Tensor, Var};
use serde_json::Value as Json;

use adgauge_workloads::Mode;
use adgauge_workloads::json::HistCase;

use super::{HistPeer, in_range, output};
use crate::endpoint::Call;

pub struct CandleHist {
    pub index_add: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Sum {
    Add,
    LogAddExp,
    Hypot,
}

/// candle's error without the backtrace it carries when `RUST_BACKTRACE` is set.
fn err(e: candle_core::Error) -> String {
    let text = e.to_string();
    format!("candle: {}", text.lines().next().unwrap_or_default())
}

impl HistPeer for CandleHist {
    fn tool(&self) -> (&'static str, &'static str) {
        ("candle-core", "0.11.1")
    }
    fn prepare(&self, mode: Mode, op: &str, case: &HistCase) -> Result<Box<dyn Call>, String> {
        let sum = match op {
            "add" => Sum::Add,
            "logaddexp" => Sum::LogAddExp,
            "hypot" => Sum::Hypot,
            other => {
                return Err(format!("candle has no scatter/index reduction for {other} (add, logaddexp, hypot only)"));
            }
        };
        if mode == Mode::Jvp {
            return Err("candle has no forward mode: no jvp".into());
        }
        let d = &case.data;
        let (positions, bins) = in_range(case);
        let dev = Device::Cpu;
        let u32s = |xs: &[usize]| xs.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let m = positions.len();
        let call = CandleCall {
            index_add: self.index_add,
            sum,
            positions: Tensor::from_vec(u32s(&positions), m, &dev).map_err(err)?,
            bins: Tensor::from_vec(u32s(&bins), m, &dev).map_err(err)?,
            vals: Var::from_vec(d.vals.clone(), d.vals.len(), &dev).map_err(err)?,
            dest: Var::from_vec(d.dest.clone(), d.k, &dev).map_err(err)?,
            bar: match (&case.hist_bar, mode) {
                (Some(b), Mode::Vjp) => Some(Tensor::from_vec(b.clone(), d.k, &dev).map_err(err)?),
                _ => None,
            },
            out: Vec::new(),
        };
        Ok(Box::new(call))
    }
}

struct CandleCall {
    index_add: bool,
    sum: Sum,
    positions: Tensor,
    bins: Tensor,
    vals: Var,
    dest: Var,
    /// The adjoint (vjp only).
    bar: Option<Tensor>,
    out: Vec<Vec<f64>>,
}

impl CandleCall {
    fn hist(&self) -> candle_core::Result<Tensor> {
        let lift = |t: &Tensor| match self.sum {
            Sum::Add => Ok(t.clone()),
            Sum::LogAddExp => t.exp(),
            Sum::Hypot => t.sqr(),
        };
        let init = lift(self.dest.as_tensor())?;
        let summed = if self.positions.dim(0)? == 0 {
            init
        } else {
            let src = lift(&self.vals.as_tensor().index_select(&self.positions, 0)?)?;
            if self.index_add { init.index_add(&self.bins, &src, 0)? } else { init.scatter_add(&self.bins, &src, 0)? }
        };
        match self.sum {
            Sum::Add => Ok(summed),
            Sum::LogAddExp => summed.log(),
            Sum::Hypot => summed.sqrt(),
        }
    }

    fn run_candle(&mut self) -> candle_core::Result<()> {
        let hist = self.hist()?;
        let h = hist.to_vec1::<f64>()?;
        let Some(bar) = &self.bar else {
            self.out = vec![h];
            return Ok(());
        };
        let grads = hist.mul(bar)?.sum_all()?.backward()?;
        let grad = |v: &Var| match grads.get(v.as_tensor()) {
            Some(g) => g.to_dtype(DType::F64)?.to_vec1::<f64>(),
            // No path from the loss to this input: its adjoint is zero.
            None => Ok(vec![0.0; v.as_tensor().elem_count()]),
        };
        self.out = vec![h, grad(&self.vals)?, grad(&self.dest)?];
        Ok(())
    }
}

impl Call for CandleCall {
    fn run(&mut self) -> Result<(), String> {
        self.run_candle().map_err(err)
    }
    fn output(&mut self) -> Result<Json, String> {
        match &self.out[..] {
            [h] => Ok(output(&[("hist", h)])),
            [h, v, d] => Ok(output(&[("hist", h), ("vals_bar", v), ("dest_bar", d)])),
            _ => Err("no run".into()),
        }
    }
}

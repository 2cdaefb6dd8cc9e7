//! burn 0.22.1: the histogram as `dest.scatter(0, bins, vals, op)` with
//! `IndexingUpdateOp::{Add, Mul, Min, Max}` on the ndarray backend under burn's autodiff,
//! differentiated by `backward`. burn has no forward mode, and no scatter for logaddexp or
//! hypot. Out-of-range positions are dropped first by `select` (differentiable). burn panics on
//! what it does not support; the endpoint turns a panic into an unsuccessful response.

use burn_tensor::{DType, Device, IndexingUpdateOp, Int, Tensor, TensorData};
use serde_json::Value as Json;

use adgauge_workloads::Mode;
use adgauge_workloads::json::HistCase;

use super::{HistPeer, in_range, output};
use crate::endpoint::Call;

pub struct BurnHist {
    device: Device,
}

impl BurnHist {
    pub fn new() -> BurnHist {
        // `Autodiff<NdArray>`: burn's CPU backend that the findings concern (burn
        // deprecates ndarray for its `flex` backend; the autodiff rules are the backend's
        // decorator either way).
        #[allow(deprecated)]
        let device = Device::ndarray().autodiff();
        BurnHist { device }
    }
}

fn floats(xs: &[f64], device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(xs.to_vec(), [xs.len()]), (device, DType::F64))
}

fn ints(xs: &[usize], device: &Device) -> Tensor<1, Int> {
    let v: Vec<i64> = xs.iter().map(|&x| x as i64).collect();
    Tensor::<1, Int>::from_data(TensorData::new(v, [xs.len()]), (device, DType::I64))
}

fn to_f64(t: Tensor<1>) -> Result<Vec<f64>, String> {
    t.into_data().convert::<f64>().try_into_vec::<f64>().map_err(|e| format!("burn: {e:?}"))
}

impl HistPeer for BurnHist {
    fn tool(&self) -> (&'static str, &'static str) {
        ("burn", "0.22.1")
    }
    fn prepare(&self, mode: Mode, op: &str, case: &HistCase) -> Result<Box<dyn Call>, String> {
        let update = match op {
            "add" => IndexingUpdateOp::Add,
            "mul" => IndexingUpdateOp::Mul,
            "min" => IndexingUpdateOp::Min,
            "max" => IndexingUpdateOp::Max,
            other => return Err(format!("burn has no scatter for {other} (add, mul, min, max only)")),
        };
        if mode == Mode::Jvp {
            return Err("burn has no forward mode: no jvp".into());
        }
        let d = &case.data;
        let (positions, bins) = in_range(case);
        let device = &self.device;
        Ok(Box::new(BurnCall {
            update,
            positions: ints(&positions, device),
            bins: ints(&bins, device),
            empty: positions.is_empty(),
            vals: floats(&d.vals, device),
            dest: floats(&d.dest, device),
            bar: match (&case.hist_bar, mode) {
                (Some(b), Mode::Vjp) => Some(floats(b, device)),
                _ => None,
            },
            out: Vec::new(),
        }))
    }
}

struct BurnCall {
    update: IndexingUpdateOp,
    positions: Tensor<1, Int>,
    bins: Tensor<1, Int>,
    empty: bool,
    vals: Tensor<1>,
    dest: Tensor<1>,
    bar: Option<Tensor<1>>,
    out: Vec<Vec<f64>>,
}

impl Call for BurnCall {
    fn run(&mut self) -> Result<(), String> {
        let tracked = self.bar.is_some();
        let (vals, dest) = if tracked {
            (self.vals.clone().require_grad(), self.dest.clone().require_grad())
        } else {
            (self.vals.clone(), self.dest.clone())
        };
        let hist = if self.empty {
            dest.clone()
        } else {
            let src = vals.clone().select(0, self.positions.clone());
            dest.clone().scatter(0, self.bins.clone(), src, self.update)
        };
        let Some(bar) = &self.bar else {
            self.out = vec![to_f64(hist)?];
            return Ok(());
        };
        let grads = (hist.clone() * bar.clone()).sum().backward();
        let grad = |t: &Tensor<1>| match t.grad(&grads) {
            Some(g) => to_f64(g),
            None => Ok(vec![0.0; t.dims()[0]]),
        };
        self.out = vec![to_f64(hist)?, grad(&vals)?, grad(&dest)?];
        Ok(())
    }
    fn output(&mut self) -> Result<Json, String> {
        match &self.out[..] {
            [h] => Ok(output(&[("hist", h)])),
            [h, v, d] => Ok(output(&[("hist", h), ("vals_bar", v), ("dest_bar", d)])),
            _ => Err("no run".into()),
        }
    }
}

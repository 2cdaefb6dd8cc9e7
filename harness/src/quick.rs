//! The default command until the suite runner lands: a small fixed set of histogram cases, each
//! checked against the oracle at a small size and timed (primal and vjp) at a larger one.

use adgauge_backends::{Cpu, DType, Device, HistRule, Ops, oracle};
use adgauge_datasets::hist::{IndexDist, generate};
use adgauge_workloads::HistWorkload;

use crate::exit::Code;
use crate::timing::{Budget, measure};

const SEED: u64 = 20261122;

/// Worst relative difference of `got` from `want`, relative to max(1, |want|).
fn worst(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0.0, f64::max)
}

/// Checks one workload against the oracle on a small generated case; returns the worst error.
fn check(cpu: &Cpu, w: &HistWorkload, dt: DType) -> anyhow::Result<f64> {
    let data = generate(&w.spec(5000, 50, IndexDist::Uniform, 0.05, SEED));
    let round = |xs: &[f64]| -> Vec<f64> { xs.iter().map(|&x| dt.round(x)).collect() };
    let (dest, vals) = (round(&data.dest), round(&data.vals));
    let bar: Vec<f64> = (0..data.k)
        .map(|b| dt.round(1.0 + 0.01 * b as f64))
        .collect();
    let x = w.upload(cpu, &data, dt)?;
    let r = w.vjp(
        cpu,
        HistRule::Auto,
        &x,
        &cpu.tensor(&bar, &[bar.len()], dt)?,
    )?;
    let (h, db, vb) = oracle::hist_vjp(w.op, &dest, &data.inds, &vals, &bar);
    Ok(worst(&cpu.to_vec(&r.hist)?, &h)
        .max(worst(&cpu.to_vec(&r.dest_bar)?, &db))
        .max(worst(&cpu.to_vec(&r.vals_bar)?, &vb)))
}

/// Sizes of the timed cases.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of values of the timed cases.
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    /// Number of bins of the timed cases.
    #[arg(long, default_value_t = 1000)]
    pub k: usize,
    /// Element type of the timed cases.
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            n: 1_000_000,
            k: 1000,
            dtype: DType::F32,
        }
    }
}

pub fn run(args: &RunArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let cpu = Cpu::new(threads)?;
    let (n, k, dt) = (args.n, args.k, args.dtype);
    println!(
        "adgauge {} — histogram cases on {}, seed {SEED}",
        env!("CARGO_PKG_VERSION"),
        cpu.device_name()
    );
    println!(
        "{:<10} {:>9} {:>6} {:<6} {:<4} {:>11} {:>11} {:>8} {:>10} {:>10}",
        "workload",
        "n",
        "k",
        "rule",
        "type",
        "primal ms",
        "vjp ms",
        "vjp/pri",
        "err f64",
        "err f32"
    );
    let budget = Budget::default();
    let mut code = Code::Success;
    for w in HistWorkload::all() {
        let e64 = check(&cpu, &w, DType::F64)?;
        let e32 = check(&cpu, &w, DType::F32)?;
        let ok = e64 <= 1e-12 && e32 <= 1e-5;
        if !ok {
            code = code.combine(Code::Failed);
        }
        let data = generate(&w.spec(n, k, IndexDist::Uniform, 0.05, SEED));
        let x = w.upload(&cpu, &data, dt)?;
        let bar = cpu.full(&[k], 1.0, dt)?;
        let primal = measure(&budget, || w.primal(&cpu, &x).map(drop))?;
        let vjp = measure(&budget, || w.vjp(&cpu, HistRule::Auto, &x, &bar).map(drop))?;
        println!(
            "{:<10} {:>9} {:>6} {:<6} {:<4} {:>11.3} {:>11.3} {:>8.2} {:>10.1e} {:>10.1e}{}",
            w.name(),
            n,
            k,
            "auto",
            dt.name(),
            primal.median_s * 1e3,
            vjp.median_s * 1e3,
            vjp.median_s / primal.median_s,
            e64,
            e32,
            if ok { "" } else { "  FAILED" }
        );
    }
    Ok(code)
}

//! What one op costs the engine when the arithmetic costs nothing: a chain of `n` steps
//! `y = y * a + b` (two ops a step) on a one-element f64 tensor, in nanoseconds per op, on each
//! CPU device:
//! - `eager`: the ops run as they are called;
//! - `reverse`: recorded under `Reverse` and differentiated (the forward sweep, the tape and the
//!   backward sweep, per op of the primal chain);
//! - `replay`: the reverse gradient recorded once by a traced device and replayed call by call
//!   (`cpu-traced` over the CPU, `cpu-jit` over the staged CPU with `ADGAUGE_JIT=replay`);
//! - `compiled`: the chain, and its reverse gradient, recorded once and run as compiled host
//!   programs (`cpu-jit`: `Traced::compiling`).
//!
//! Scalar programs (GradBench's particle and ode at small n) pay this per op, where JAX's jitted
//! function pays it once per call: `scripts/per_op_jax.py` measures JAX's eager and jitted
//! dispatch on the same chain, to run beside this on an idle machine.
//!
//! `cargo run --release -p adgauge-backends --example per_op_overhead -- [n] [reps]`
//! (n default 1000, reps default 20; each figure the median of the repetitions).

use std::time::Instant;

use adgauge_backends::prelude::*;
use adgauge_backends::{Cpu, CpuStaged, DType, Device, Result, Reverse, TraceCell, Traced};

/// The chain: `n` steps of `y = y * a + b` from `x`.
fn chain<O: Ops>(o: &O, x: &O::T, n: usize) -> Result<O::T> {
    let (a, b) = (o.scalar(1.000_000_1, DType::F64)?, o.scalar(0.5, DType::F64)?);
    let mut y = x.clone();
    for _ in 0..n {
        y = o.add(&o.mul(&y, &a)?, &b)?;
    }
    Ok(y)
}

/// The chain's derivative at `x` (the tape and both sweeps), read back.
fn gradient<D: Device>(d: &D, x: &D::T, n: usize) -> Result<Vec<f64>> {
    let r = Reverse::new(d.clone());
    let xv = r.var(x.clone());
    let y = chain(&r, &xv, n)?;
    let grads = r.backward(&y, d.tensor(&[1.0], &[1], DType::F64)?)?;
    d.to_vec(&grads.get_or_zeros(d, &xv)?)
}

/// The median of `reps` timings of `f`, in seconds.
fn median(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[reps / 2])
}

/// Eager and reverse on `d`: ns per op of the chain (2 n ops).
fn eager_and_reverse<D: Device>(name: &str, d: &D, n: usize, reps: usize) -> Result<()> {
    let x = d.tensor(&[0.25], &[1], DType::F64)?;
    let ops = (2 * n) as f64;
    let eager = median(reps, || {
        let y = chain(d, &x, n)?;
        d.synchronize()?;
        std::hint::black_box(d.to_vec(&y)?);
        Ok(())
    })?;
    let reverse = median(reps, || {
        std::hint::black_box(gradient(d, &x, n)?);
        Ok(())
    })?;
    println!("{name:<12} eager {:>9.1} ns/op   reverse {:>9.1} ns/op", eager * 1e9 / ops, reverse * 1e9 / ops);
    Ok(())
}

/// The reverse gradient recorded once by `Traced` over `inner`, then replayed: ns per op.
fn replay<D: adgauge_backends::traced::Traceable>(name: &str, inner: D, n: usize, reps: usize) -> Result<()> {
    let d = Traced::new(inner);
    let x = d.tensor(&[0.25], &[1], DType::F64)?;
    let cell = TraceCell::default();
    // The first call records (and runs eagerly, checked by a replay); the timed ones replay.
    d.run_traced(&cell, &mut || -> Result<()> { gradient(&d, &x, n).map(|_| ()) })?;
    let replay = median(reps, || d.run_traced(&cell, &mut || -> Result<()> { gradient(&d, &x, n).map(|_| ()) }))?;
    println!("{name:<12} replay {:>8.1} ns/op (the reverse gradient)", replay * 1e9 / (2 * n) as f64);
    Ok(())
}

/// The chain and its reverse gradient, each recorded once and compiled, then run: ns per op
/// of the primal chain (the program's instruction count beside it).
fn compiled<D: adgauge_backends::traced::Traceable>(name: &str, inner: D, n: usize, reps: usize) -> Result<()> {
    let d = Traced::compiling(inner);
    let x = d.tensor(&[0.25], &[1], DType::F64)?;
    let ops = (2 * n) as f64;
    let mut line = format!("{name:<12}");
    for (what, grad) in [("the chain", false), ("the reverse gradient", true)] {
        let cell = TraceCell::default();
        let mut body = || -> Result<()> {
            let y = if grad { gradient(&d, &x, n)? } else { d.to_vec(&chain(&d, &x, n)?)? };
            std::hint::black_box(y);
            Ok(())
        };
        d.run_traced(&cell, &mut body)?;
        let program = d.last_trace().and_then(|t| t.compiled).ok_or_else(|| {
            adgauge_backends::OpError::Unsupported(format!("not compiled: {:?}", d.last_compile_note()))
        })?;
        let t = median(reps, || d.run_traced(&cell, &mut body))?;
        line += &format!(" compiled {:>6.1} ns/op ({what}, {program} instructions)", t * 1e9 / ops);
    }
    println!("{line}");
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(1000).max(1);
    let reps = args.get(1).copied().unwrap_or(20).max(1);
    let cpu = Cpu::new(Some(1))?;
    let staged = CpuStaged::on(cpu.clone())?;
    println!("a chain of {n} steps (2 ops each) on one f64 element, median of {reps}, 1 CPU thread");
    eager_and_reverse("cpu", &cpu, n, reps)?;
    eager_and_reverse("cpu-staged", &staged, n, reps)?;
    replay("cpu-traced", cpu, n, reps)?;
    replay("cpu-jit", staged.clone(), n, reps)?;
    compiled("cpu-jit", staged, n, reps)?;
    Ok(())
}

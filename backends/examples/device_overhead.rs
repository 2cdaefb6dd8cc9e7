//! AD overhead of the histogram rules on one device (vjp time / primal time, minimum of a few
//! repetitions, synchronised), and for OpenCL the kernel compile time of first use apart.
//!
//! `cargo run --release -p adgauge-backends --example device_overhead -- cpu|opencl|cuda [n] [k] [op...]`

use std::time::Instant;

use adgauge_backends::prelude::*;
use adgauge_backends::{Cpu, Cuda, DType, Device, HistOp, HistRule, OpenCl, Reverse};

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn run<D: Device>(dev: &D, n: usize, k: usize, ops: &[HistOp]) {
    let dt = DType::F32;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let inds: Vec<i64> = (0..n).map(|_| (next() % k as u64) as i64).collect();
    let vals: Vec<f64> = (0..n).map(|_| (next() % 1000) as f64 * 1e-3 + 0.5).collect();
    let ix = dev.index(&inds).unwrap();
    let v = dev.tensor(&vals, &[n], dt).unwrap();
    let bar = dev.full(&[k], 1.0, dt).unwrap();
    println!("{} n={n} k={k}", dev.device_name());
    for &op in ops {
        let dest = dev.full(&[k], if op == HistOp::Mul { 1.0 } else { 0.5 }, dt).unwrap();
        let first = Instant::now();
        dev.reduce_by_index(&dest, op, &ix, &v).unwrap();
        dev.synchronize().unwrap();
        let first = first.elapsed().as_secs_f64();
        let primal = best(5, || {
            dev.reduce_by_index(&dest, op, &ix, &v).unwrap();
            dev.synchronize().unwrap();
        });
        let mut line = format!("{:<12} first use {:7.1} ms, primal {:7.2} ms", op.name(), first * 1e3, primal * 1e3);
        for rule in HistRule::ALL {
            let go = || -> adgauge_backends::Result<()> {
                let r = Reverse::new(dev.clone()).with_hist_rule(rule);
                let (d, x) = (r.var(dest.clone()), r.var(v.clone()));
                let h = r.reduce_by_index(&d, op, &ix, &x)?;
                r.backward(&h, bar.clone())?;
                dev.synchronize()
            };
            if go().is_err() {
                line += &format!("  {rule}: -");
                continue;
            }
            let t = best(3, || go().unwrap());
            line += &format!("  {rule}: {:.2}", t / primal);
        }
        println!("{line}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let backend = args.first().map(String::as_str).unwrap_or("cpu");
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let k: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let ops: Vec<HistOp> = if args.len() > 3 {
        args[3..].iter().map(|s| s.parse().unwrap()).collect()
    } else {
        vec![HistOp::Add, HistOp::Mul, HistOp::Min, HistOp::Max, "logaddexp".parse().unwrap(), "hypot".parse().unwrap()]
    };
    match backend {
        "opencl" => match OpenCl::new() {
            Ok(d) => {
                run(&d, n, k, &ops);
                println!("kernel compile time (all programs): {:.2} s", d.compile_time().as_secs_f64());
            }
            Err(e) => println!("opencl unavailable: {e}"),
        },
        "cuda" => match Cuda::new() {
            Ok(d) => {
                run(&d, n, k, &ops);
                println!("kernel compile time (all programs): {:.2} s", d.compile_time().as_secs_f64());
            }
            Err(e) => println!("cuda unavailable: {e}"),
        },
        _ => run(&Cpu::new(None).unwrap(), n, k, &ops),
    }
}

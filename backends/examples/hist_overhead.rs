//! Rough AD overhead of the histogram rules on the CPU: vjp time (forward sweep, taping and
//! reverse sweep) over primal time, minimum of a few repetitions. The suite's own timing lives
//! in the harness; this is a quick probe for rule development.
//!
//! `cargo run --release -p adgauge-backends --example hist_overhead -- [n] [k] [op...]`

use std::time::Instant;

use adgauge_backends::{Cpu, DType, HistOp, HistRule, Ops, Reverse};

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(10_000_000);
    let k: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let ops: Vec<HistOp> =
        if args.len() > 2 { args[2..].iter().map(|s| s.parse().unwrap()).collect() } else { HistOp::named() };
    let cpu = Cpu::new(None).unwrap();
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
    let ix = cpu.index(&inds).unwrap();
    let v = cpu.tensor(&vals, &[n], dt).unwrap();
    let bar = cpu.full(&[k], 1.0, dt).unwrap();
    println!("n={n} k={k} threads={}", rayon::current_num_threads());
    for op in ops {
        let dest = cpu.full(&[k], if op == HistOp::Mul { 1.0 } else { 0.5 }, dt).unwrap();
        let primal = best(5, || {
            cpu.reduce_by_index(&dest, op, &ix, &v).unwrap();
        });
        let mut line = format!("{:<12} primal {:7.1} ms", op.name(), primal * 1e3);
        for rule in HistRule::ALL {
            let run = || -> adgauge_backends::Result<()> {
                let r = Reverse::new(cpu.clone()).with_hist_rule(rule);
                let (d, x) = (r.var(dest.clone()), r.var(v.clone()));
                let h = r.reduce_by_index(&d, op, &ix, &x)?;
                r.backward(&h, bar.clone())?;
                Ok(())
            };
            if run().is_err() {
                line += &format!("  {rule}: -");
                continue;
            }
            let t = best(3, || run().unwrap());
            line += &format!("  {rule}: {:.2}", t / primal);
        }
        println!("{line}");
    }
}

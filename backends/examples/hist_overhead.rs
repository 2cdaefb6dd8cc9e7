//! AD overhead of the histogram rules on the CPU: per operator, the primal time (plain
//! `reduce_by_index`), and per rule the vjp time (forward sweep, taping and reverse sweep) and
//! vjp/primal, plus the jvp time (Forward engine, tangents for vals and dest) and jvp/primal.
//! Minimum of several repetitions; 5% of the indices are out of range. The suite's own timing
//! lives in the harness; this is a quick probe for rule development.
//!
//! `cargo run --release -p adgauge-backends --example hist_overhead -- [n] [k] [op...]`
//! (`ADGAUGE_DTYPE=f64` for f64, `ADGAUGE_INDEX=i64` for i64 indices (default i32),
//! `ADGAUGE_REPS=r` for the repetitions, `ADGAUGE_RULES=auto,special` for only those rules.)

use std::time::Instant;

use adgauge_backends::prelude::*;
use adgauge_backends::{Cpu, DType, Forward, HistOp, HistRule, IndexDType, Reverse};

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
    let dt: DType = std::env::var("ADGAUGE_DTYPE").ok().and_then(|s| s.parse().ok()).unwrap_or(DType::F32);
    let it: IndexDType = std::env::var("ADGAUGE_INDEX").ok().and_then(|s| s.parse().ok()).unwrap_or(IndexDType::I32);
    let reps: usize = std::env::var("ADGAUGE_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rules: Vec<HistRule> = match std::env::var("ADGAUGE_RULES") {
        Ok(names) => names.split(',').map(|s| s.parse().expect("ADGAUGE_RULES: a rule name")).collect(),
        Err(_) => HistRule::ALL.to_vec(),
    };
    let cpu = Cpu::new(None).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // 5% out of range: half of them -1, half k + something.
    let inds: Vec<i64> = (0..n)
        .map(|_| {
            let r = next();
            if r % 100 < 5 {
                if r % 2 == 0 { -1 } else { k as i64 + (r % 7) as i64 }
            } else {
                ((r >> 8) % k as u64) as i64
            }
        })
        .collect();
    let vals: Vec<f64> = (0..n).map(|_| (next() % 1000) as f64 * 1e-3 + 0.5).collect();
    let tang: Vec<f64> = (0..n).map(|_| (next() % 1000) as f64 * 1e-3 - 0.5).collect();
    let ix = cpu.index_as(&inds, it).unwrap();
    let v = cpu.tensor(&vals, &[n], dt).unwrap();
    let vd = cpu.tensor(&tang, &[n], dt).unwrap();
    let bar = cpu.full(&[k], 1.0, dt).unwrap();
    let dd = cpu.full(&[k], 0.25, dt).unwrap();
    println!("n={n} k={k} dtype={dt} index={it} threads={} reps={reps}", rayon::current_num_threads());
    println!(
        "{:<12} {:>9} {:<16} {:>9} {:>7} {:>9} {:>7}",
        "op", "primal ms", "rule", "vjp ms", "vjp/p", "jvp ms", "jvp/p"
    );
    for op in ops {
        let dest = cpu.full(&[k], if op == HistOp::Mul { 1.0 } else { 0.5 }, dt).unwrap();
        let primal = best(reps, || {
            cpu.reduce_by_index(&dest, op, &ix, &v).unwrap();
        });
        let fwd = || -> adgauge_backends::Result<()> {
            let f = Forward::new(cpu.clone());
            let (d, x) = (f.dual(dest.clone(), dd.clone())?, f.dual(v.clone(), vd.clone())?);
            let h = f.reduce_by_index(&d, op, &ix, &x)?;
            f.tangent(&h)?;
            Ok(())
        };
        fwd().unwrap();
        let jvp = best(reps, || fwd().unwrap());
        for &rule in &rules {
            let run = || -> adgauge_backends::Result<()> {
                let r = Reverse::new(cpu.clone()).with_hist_rule(rule);
                let (d, x) = (r.var(dest.clone()), r.var(v.clone()));
                let h = r.reduce_by_index(&d, op, &ix, &x)?;
                r.backward(&h, bar.clone())?;
                Ok(())
            };
            if run().is_err() {
                println!("{:<12} {:>9.1} {:<16} {:>9} {:>7}", op.name(), primal * 1e3, rule.name(), "-", "-");
                continue;
            }
            let t = best(reps.min(3), || run().unwrap());
            println!(
                "{:<12} {:>9.1} {:<16} {:>9.1} {:>7.2} {:>9.1} {:>7.2}",
                op.name(),
                primal * 1e3,
                rule.name(),
                t * 1e3,
                t / primal,
                jvp * 1e3,
                jvp / primal
            );
        }
    }
}

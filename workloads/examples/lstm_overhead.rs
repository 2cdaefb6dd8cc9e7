//! LSTM AD overhead on the CPU in f64: objective time, AD gradient (reverse mode) time and manual
//! gradient time (minimum of repeated runs, inputs resident) for ADBench's l{2,4} c{1024,4096}
//! files (generated inputs of the same sizes when the files are absent).
//! `cargo run --release -p adgauge-workloads --example lstm_overhead [-- --threads N]`.

mod common;

use common::best;

use adgauge_backends::prelude::*;
use adgauge_backends::{Cpu, DType};
use adgauge_datasets::lstm::LstmInput;
use adgauge_workloads::lstm;

fn main() {
    let threads = std::env::args().skip_while(|a| a != "--threads").nth(1).and_then(|s| s.parse().ok());
    let cpu = Cpu::new(threads).unwrap();
    let dir = adgauge_testkit::adbench_location().join("lstm");
    for (l, c) in [(2, 1024), (2, 4096), (4, 1024), (4, 4096)] {
        let path = dir.join(format!("lstm_l{l}_c{c}.txt"));
        let (s, source) = match LstmInput::read(&path) {
            Ok(s) => (s, "ADBench"),
            Err(_) => (LstmInput::generate(l, c, 14, 1), "generated"),
        };
        let x = lstm::upload(&cpu, &s, DType::F64).unwrap();
        let p = best(|| drop(cpu.to_vec(&lstm::objective(&cpu, &x).unwrap()).unwrap()));
        let ad = best(|| drop(lstm::gradient(&cpu, &x).unwrap()));
        let m = best(|| drop(lstm::manual::<f64>(&s)));
        let mp = best(|| {
            std::hint::black_box(lstm::manual_objective::<f64>(&s));
        });
        println!(
            "lstm l{l} c{c} ({source:<9}) objective {:>9.3} ms  AD gradient {:>9.3} ms  manual {:>7.3} ms  \
             manual objective {:>7.3} ms  AD/objective {:>5.2}  AD/manual {:>6.1}",
            p * 1e3,
            ad * 1e3,
            m * 1e3,
            mp * 1e3,
            ad / p,
            ad / m
        );
    }
}

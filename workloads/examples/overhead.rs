//! AD overhead on the CPU in f64: objective time, AD gradient time, manual gradient time (minimum
//! of repeated runs, inputs resident). `cargo run --release -p adgauge-workloads --example
//! overhead [-- --threads N]`; GMM cases read ADBench's 1k files when present.

mod common;

use common::best;

use adgauge_backends::prelude::*;
use adgauge_backends::{Cpu, DType};
use adgauge_datasets::gmm::GmmInput;
use adgauge_workloads::{gmm, kmeans};

fn row(name: &str, primal: f64, ad: f64, manual: f64) {
    println!(
        "{name:<28} objective {:>9.3} ms  AD gradient {:>9.3} ms  manual {:>9.3} ms  AD/objective {:>5.2}  AD/manual {:>5.2}",
        primal * 1e3,
        ad * 1e3,
        manual * 1e3,
        ad / primal,
        ad / manual
    );
}

fn main() {
    let threads = std::env::args().skip_while(|a| a != "--threads").nth(1).and_then(|s| s.parse().ok());
    let cpu = Cpu::new(threads).unwrap();
    let dt = DType::F64;
    for (n, k, d) in [(100_000, 5, 35), (10_000, 100, 16), (100_000, 100, 8), (10_000, 1024, 256)] {
        let data = adgauge_datasets::kmeans::generate(n, k, d, 1);
        let x = kmeans::upload(&cpu, &data, dt).unwrap();
        let p = best(|| drop(kmeans::cost(&cpu, &x.points, &x.centres).unwrap()));
        let g = best(|| drop(kmeans::gradient(&cpu, &x).unwrap()));
        let m = best(|| drop(kmeans::manual::<f64>(&data)));
        row(&format!("kmeans n{n} k{k} d{d}"), p, g, m);
        let h = best(|| drop(kmeans::hessian_diag(&cpu, &x).unwrap()));
        println!(
            "{:<28} gradient + Hessian diagonal (forward over reverse) {:>9.3} ms ({:.2} x objective)",
            "",
            h * 1e3,
            h / p
        );
    }
    let dir = adgauge_testkit::adbench_location().join("gmm/1k");
    for (d, k) in [(2, 5), (10, 5), (10, 50), (20, 5), (20, 50), (20, 200)] {
        let path = dir.join(format!("gmm_d{d}_K{k}.txt"));
        let g = match GmmInput::read(&path, None) {
            Ok(g) => g,
            Err(_) => GmmInput::generate(d, k, 1000, 1),
        };
        let x = gmm::upload(&cpu, &g, dt).unwrap();
        let p = best(|| drop(cpu.to_vec(&gmm::objective(&cpu, &x).unwrap()).unwrap()));
        let ad = best(|| drop(gmm::gradient(&cpu, &x).unwrap()));
        let m = best(|| drop(gmm::manual::<f64>(&g)));
        row(&format!("gmm 1k d{d} K{k}"), p, ad, m);
    }
}

//! criterion benches of every histogram workload and reduce_by_index rule, primal and vjp, on
//! the CPU device (names: `cpu/<workload>/<mode>/<rule>/k=<k>`). Sizes: n = 10^6 by default,
//! `ADGAUGE_BENCH_N` overrides (the nightly uses 10^7). Rules a workload does not support yet
//! are skipped with a printed reason.

// The same allocator as the adgauge binary (see harness/src/memory.rs for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};

use adgauge_backends::prelude::*;
use adgauge_backends::{Cpu, DType, HistRule};
use adgauge_datasets::hist::{IndexDist, generate};
use adgauge_workloads::HistWorkload;

fn hist(c: &mut Criterion) {
    let n: usize = std::env::var("ADGAUGE_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let cpu = Cpu::new(None).expect("CPU device");
    let dt = DType::F32;
    for w in HistWorkload::all() {
        for k in [10usize, 1000, 1_000_000] {
            let data = generate(&w.spec(n, k, IndexDist::Uniform, 0.05, 1));
            let x = w.upload(&cpu, &data, dt, adgauge_backends::IndexDType::I64).expect("upload");
            let bar = cpu.full(&[k], 1.0, dt).expect("adjoint");
            let mut group = c.benchmark_group(format!("cpu/{}", w.name()));
            group.sample_size(10);
            group.bench_function(format!("primal/k={k}"), |b| b.iter(|| w.primal(&cpu, &x).expect("primal")));
            for rule in HistRule::ALL {
                if let Err(e) = w.vjp(&cpu, rule, &x, &bar) {
                    println!("skipping cpu/{}/vjp/{rule}/k={k}: {e}", w.name());
                    continue;
                }
                group.bench_function(format!("vjp/{rule}/k={k}"), |b| {
                    b.iter(|| w.vjp(&cpu, rule, &x, &bar).expect("vjp"))
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, hist);
criterion_main!(benches);

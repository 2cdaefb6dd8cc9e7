//! criterion benches of AD against the hand-derived gradients (issue 14's "AD <= 1.3x the
//! hand-derived gradient"): for each classic workload at the sizes of the JAX table in
//! docs/performance.md, the reverse-mode gradient on the CPU device (`cpu/<workload>/ad`) next
//! to the workload's hand-derived reference (`cpu/<workload>/manual`), both f64 and both
//! returning host values, and the same gradient recorded once and replayed on `cpu-traced`
//! (`cpu/<workload>/ad-traced`; the replay reads the gradient back as the eager call does).
//! Inputs are generated (seeded) at ADBench's sizes.
//! `cargo bench -p adgauge --bench classic`; `ADGAUGE_BENCH_FILTER=lstm` runs one workload.

// The same allocator as the adgauge binary (see harness/src/memory.rs for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime};

use adgauge_backends::{Cpu, DType, Device, TraceCell, Traced};
use adgauge_datasets::{ba::BaInput, gmm::GmmInput, kmeans, lstm::LstmInput};
use adgauge_workloads::{ba, gmm, lstm};

fn wanted(name: &str) -> bool {
    std::env::var("ADGAUGE_BENCH_FILTER").map_or(true, |f| name.contains(&f))
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(format!("cpu/{name}"));
    g.sample_size(10);
    g
}

/// One replay of `body`'s recording on `device` (recorded at the first call).
fn replayed(device: &Traced<Cpu>, cell: &TraceCell, body: impl Fn() -> adgauge_backends::Result<()>) {
    device.run_traced(cell, &mut || body()).expect("traced call");
}

fn classic(c: &mut Criterion) {
    let cpu = Cpu::new(None).expect("CPU device");
    let traced = Traced::new(cpu.clone());
    let dt = DType::F64;
    for (d, k) in [(2, 5), (10, 5), (20, 25), (64, 50)] {
        let name = format!("gmm/d={d},k={k},n=1000");
        if !wanted(&name) {
            continue;
        }
        let input = GmmInput::generate(d, k, 1000, 1);
        let x = gmm::upload(&cpu, &input, dt).expect("upload");
        let mut g = group(c, &name);
        g.bench_function("ad", |b| b.iter(|| black_box(gmm::gradient(&cpu, &x).expect("gradient"))));
        g.bench_function("manual", |b| b.iter(|| black_box(gmm::manual::<f64>(&input))));
        let (xt, cell) = (gmm::upload(&traced, &input, dt).expect("upload"), TraceCell::default());
        g.bench_function("ad-traced", |b| {
            b.iter(|| replayed(&traced, &cell, || gmm::gradient(&traced, &xt).map(drop)))
        });
        g.finish();
    }
    for l in [2, 4] {
        let name = format!("lstm/l={l},c=1024,b=14");
        if !wanted(&name) {
            continue;
        }
        let input = LstmInput::generate(l, 1024, 14, 1);
        let x = lstm::upload(&cpu, &input, dt).expect("upload");
        let mut g = group(c, &name);
        g.bench_function("ad", |b| b.iter(|| black_box(lstm::gradient(&cpu, &x).expect("gradient"))));
        g.bench_function("manual", |b| b.iter(|| black_box(lstm::manual::<f64>(&input))));
        let (xt, cell) = (lstm::upload(&traced, &input, dt).expect("upload"), TraceCell::default());
        g.bench_function("ad-traced", |b| {
            b.iter(|| replayed(&traced, &cell, || lstm::gradient(&traced, &xt).map(drop)))
        });
        g.finish();
    }
    let name = "kmeans/n=100000,k=5,d=35";
    if wanted(name) {
        let data = kmeans::generate(100_000, 5, 35, 1);
        let x = adgauge_workloads::kmeans::upload(&cpu, &data, dt).expect("upload");
        let mut g = group(c, name);
        g.bench_function("ad", |b| {
            b.iter(|| black_box(adgauge_workloads::kmeans::gradient(&cpu, &x).expect("gradient")))
        });
        g.bench_function("manual", |b| b.iter(|| black_box(adgauge_workloads::kmeans::manual::<f64>(&data))));
        // The Hessian diagonal (forward over reverse; `adgauge eval kmeans`'s default mode),
        // whose adjoint products have one-hot left operands.
        g.bench_function("ad-hessian-diag", |b| {
            b.iter(|| black_box(adgauge_workloads::kmeans::hessian_diag(&cpu, &x).expect("hessian diagonal")))
        });
        g.finish();
    }
    let name = "ba/n=49,m=7776,p=31843";
    if wanted(name) {
        let input = BaInput::generate(49, 7776, 31843, 1);
        let x = ba::upload(&cpu, &input, dt).expect("upload");
        let mut g = group(c, name);
        g.bench_function("ad", |b| b.iter(|| black_box(ba::jacobian_reverse(&cpu, &x).expect("jacobian"))));
        g.bench_function("manual", |b| b.iter(|| black_box(ba::manual::<f64>(&input))));
        let (xt, cell) = (ba::upload(&traced, &input, dt).expect("upload"), TraceCell::default());
        g.bench_function("ad-traced", |b| {
            b.iter(|| replayed(&traced, &cell, || ba::jacobian_reverse(&traced, &xt).map(drop)))
        });
        g.finish();
    }
}

criterion_group!(benches, classic);
criterion_main!(benches);

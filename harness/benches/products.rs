//! criterion benches of the CPU device's matrix product at the shapes the classic workloads
//! give it (issue 14: the product is half of GMM's gradient at d = 64 and a third of its
//! objective at d = 20). Each case names `m x k x n` and the operand read transposed; the
//! operands are seeded pseudo-random f64. `cargo bench -p adgauge --bench products`;
//! `ADGAUGE_BENCH_FILTER=d=64` runs the matching cases.

// The same allocator as the adgauge binary (see harness/src/memory.rs for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use adgauge_backends::{Cpu, DType, DenseOps, TensorOps};

fn wanted(name: &str) -> bool {
    std::env::var("ADGAUGE_BENCH_FILTER").map_or(true, |f| name.contains(&f))
}

fn products(c: &mut Criterion) {
    let cpu = Cpu::new(None).expect("CPU device");
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    // GMM with n = 1000 points: the objective's x Q^T ([n, d] x [K d, d]^T) and the gradient's
    // Q adjoint g^T x ([n, K d]^T x [n, d]; also with g's zeros and subnormals) and x adjoint
    // g Q ([n, K d] x [K d, d]).
    for (d, k) in [(20, 25), (64, 50)] {
        let n = 1000;
        let cases = [
            (format!("gmm d={d}/x q^T"), [n, d], false, [k * d, d], true),
            (format!("gmm d={d}/g^T x"), [n, k * d], true, [n, d], false),
            (format!("gmm d={d}/g^T x, g with underflow"), [n, k * d], true, [n, d], false),
            (format!("gmm d={d}/g q"), [n, k * d], false, [k * d, d], false),
        ];
        for (name, ashape, ta, bshape, tb) in cases {
            if !wanted(&name) {
                continue;
            }
            let mut data = |shape: [usize; 2]| {
                let v: Vec<f64> = (0..shape[0] * shape[1]).map(|_| rng.random_range(-1.0..1.0)).collect();
                cpu.tensor(&v, &shape, DType::F64).expect("upload")
            };
            let (a, b) = (data(ashape), data(bshape));
            let a = if name.ends_with("underflow") {
                // Like GMM's adjoint, whose posterior weights underflow: three blocks of 64 in
                // eight zero, one value in 31 subnormal.
                let mut v = cpu.to_vec(&a).expect("download");
                for (i, x) in v.iter_mut().enumerate() {
                    if (i / 64) % 8 < 3 {
                        *x = 0.0;
                    } else if i % 31 == 0 {
                        *x = 1e-310;
                    }
                }
                cpu.tensor(&v, &ashape, DType::F64).expect("upload")
            } else {
                a
            };
            let mut g = c.benchmark_group("cpu/matmul");
            g.sample_size(20);
            g.bench_function(&name, |bench| bench.iter(|| black_box(cpu.matmul(&a, ta, &b, tb).expect("product"))));
            g.finish();
        }
    }
}

criterion_group!(benches, products);
criterion_main!(benches);

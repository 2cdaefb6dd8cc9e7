//! What the overhead examples share: the binary's allocator (see harness/src/memory.rs for why
//! it is mimalloc) and the timing loop.

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The minimum seconds of `f` over at least 5 runs after one warm-up, repeated for up to 2 s
/// (and at most 50 runs): inputs stay resident, so the minimum is the least disturbed run.
pub fn best(mut f: impl FnMut()) -> f64 {
    f();
    let (mut best, start) = (f64::INFINITY, Instant::now());
    let mut runs = 0;
    while runs < 5 || (start.elapsed() < Duration::from_secs(2) && runs < 50) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    best
}

//! Every workload's footprint estimate (`Workload::footprint`, what `--max-memory` checks before
//! a case is generated) is an upper bound of what the case allocates, and not a loose one: over
//! a sweep of sizes, the estimate is at least the peak the counting allocator measures (the
//! generated problem, its inputs put on the CPU, and the largest of its modes run from an empty
//! buffer cache) in every dtype, and at most [`MAX_OVER`] times it in f64 (one estimate covers
//! every dtype, so it follows the widest).
//! An estimate below the peak lets in a case that aborts the run under a hard limit (ode's was
//! 2.4x under what its reverse mode took); one far above refuses cases that fit.
//!
//! Measured in a process of its own ([`common::alone`]): the counting allocator's figures are
//! process-wide.

use adgauge_backends::{AnyDevice, Cpu};
use adgauge_harness::memory::allocations_during;
use adgauge_harness::suite::parse_suite;

use crate::common;

/// The most an estimate may exceed the measured f64 peak ("about 2x": the peaks vary by mode and
/// operator, and one estimate covers them all).
const MAX_OVER: f64 = 2.5;

/// Sizes where the data dominates the fixed costs (the buffers of a few KB every case has),
/// small enough for a debug build: each workload with an estimate, in both dtypes where it has
/// them, every mode.
const SUITE: &str = "name: footprints
cases:
  - {workload: hist, ops: [add, mul, min, max, logaddexp, hypot], rules: [auto], n: [200000, 800000], k: [10, 50000], dtypes: [f32, f64], validate: false}
  - {workload: llsq, n: [20000, 80000], m: [16, 64], dtypes: [f64], validate: false}
  - {workload: gmm, d: [2, 10], k: [5, 20], n: [2000], dtypes: [f64], validate: false}
  - {workload: ba, sizes: [[10, 2000, 8000], [20, 8000, 32000]], dtypes: [f64], validate: false}
  - {workload: ht, variant: [simple, complicated], c: [200, 800], dtypes: [f64], validate: false}
  - {workload: lse, n: [100000, 400000], dtypes: [f32, f64], validate: false}
  - {workload: ode, n: [1000, 4000], s: [10, 40], dtypes: [f64], validate: false}
";

#[test]
fn every_footprint_estimate_bounds_its_measured_peak_within_a_factor() {
    common::alone("footprints::every_footprint_estimate_bounds_its_measured_peak_within_a_factor", || {
        let suite = parse_suite(SUITE, "footprints.yaml").unwrap_or_else(|e| panic!("{e}"));
        let device = AnyDevice::Cpu(Cpu::new(Some(2)).expect("a CPU device"));
        let mut lines = Vec::new();
        let mut wrong = Vec::new();
        for case in &suite.cases {
            let id = case.id();
            let estimate = case.workload.footprint(&case.params).unwrap_or_else(|| panic!("{id}: no estimate")).bytes;
            // One measurement from the generator to the last mode; each mode starts from an empty
            // buffer cache, as `run` measures a row's peak (the cache would lend one mode's buffers
            // to the next).
            // The previous case's buffers went back to the device's cache: emptied, so that this
            // case allocates (and is counted for) every buffer it uses.
            device.trim_cache();
            let (result, seen) = allocations_during(|| -> Result<usize, String> {
                let problem = case.workload.generate(&case.params, case.seed).map_err(|e| e.to_string())?;
                let prepared = problem.prepare(&device, case.dtype, &case.rule).map_err(|e| e.to_string())?;
                let mut ran = 0;
                for &mode in &case.modes {
                    device.trim_cache();
                    match prepared.run(mode) {
                        Ok(()) => ran += 1,
                        Err(e) if e.is_unsupported() => {}
                        Err(e) => return Err(format!("{mode}: {e}")),
                    }
                }
                Ok(ran)
            });
            let ran = result.unwrap_or_else(|e| panic!("{id}: {e}"));
            assert!(ran > 0, "{id}: no mode ran");
            let peak = seen.peak as u128;
            let over = estimate as f64 / peak.max(1) as f64;
            let line = format!("{id}: estimate {estimate} B, peak {peak} B, {over:.2}x");
            // One estimate covers every dtype (it is checked before the dtype is known): it must
            // bound them all, and be tight for the widest, f64.
            if estimate < peak || (case.dtype == adgauge_backends::DType::F64 && over > MAX_OVER) {
                wrong.push(line.clone());
            }
            lines.push(line);
        }
        println!("{}", lines.join("\n"));
        assert!(wrong.is_empty(), "estimates below the peak or over {MAX_OVER}x it:\n{}", wrong.join("\n"));
    });
}

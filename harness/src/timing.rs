//! Timing methodology (docs/ARCHITECTURE.md, harness): inputs are resident on the device and excluded; the
//! timed closure includes everything a user pays for (forward sweep, taping, reverse sweep,
//! allocation) and ends with a device synchronisation; warm-up calls (at least one, and until
//! `warm_up` has passed), then one call whose time sizes the batch (a first call may record or
//! compile); calls are batched until a sample lasts at least `min_sample`; samples are kept
//! until `samples` are taken or `time_limit` has passed (at least one sample is always taken).

use std::time::{Duration, Instant};

use adgauge_reports::Timing;

/// How long and how often to measure.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub min_sample: Duration,
    pub samples: usize,
    pub time_limit: Duration,
    /// How long to keep calling before timing: one call is not always enough. A GMM d = 20
    /// objective took 1.1-1.5 ms a call for its first 50 ms of calls and 0.76-0.81 after, so
    /// five samples of 20 ms medianed the transient (docs/performance.md).
    pub warm_up: Duration,
}

impl Budget {
    /// The warm-up a budget gets unless it sets one: five minimum samples.
    pub fn default_warm_up(min_sample: Duration) -> Duration {
        min_sample * 5
    }
}

impl Default for Budget {
    fn default() -> Self {
        let min_sample = Duration::from_millis(5);
        Budget {
            min_sample,
            samples: 7,
            time_limit: Duration::from_secs(2),
            warm_up: Budget::default_warm_up(min_sample),
        }
    }
}

/// Measures `f` (which must synchronise the device before returning) under `budget`.
pub fn measure<E>(budget: &Budget, mut f: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    let start = Instant::now();
    f()?; // warm-up: first-touch pages, caches, lazily built kernels, a traced device's recording
    // More warm-up calls until `warm_up` has passed since the first one ended (the first may be
    // a recording or a compile, which warms nothing of the steady state).
    let warm = Instant::now();
    while warm.elapsed() < budget.warm_up && start.elapsed() < budget.time_limit {
        f()?;
    }
    // The batch comes from a second, steady call: sized by the warm-up, a call after a 50 ms
    // recording ran unbatched under a 20 ms minimum sample.
    let t0 = Instant::now();
    f()?;
    let first = t0.elapsed();
    let batch = if first >= budget.min_sample {
        1
    } else {
        (budget.min_sample.as_secs_f64() / first.as_secs_f64().max(1e-9)).ceil().min(1e6) as usize
    };
    let mut per_call = Vec::with_capacity(budget.samples);
    while per_call.len() < budget.samples.max(1) {
        let t = Instant::now();
        for _ in 0..batch {
            f()?;
        }
        per_call.push(t.elapsed().as_secs_f64() / batch as f64);
        if start.elapsed() >= budget.time_limit {
            break;
        }
    }
    Ok(summarize(per_call, batch).expect("at least one sample is always taken"))
}

/// Min, median, max and coefficient of variation of per-call seconds (`None` without samples).
pub fn summarize(mut per_call: Vec<f64>, batch: usize) -> Option<Timing> {
    if per_call.is_empty() {
        return None;
    }
    let sample_s = per_call.clone(); // in measured order, for the gate's rank test
    per_call.sort_by(f64::total_cmp);
    let m = per_call.len();
    let median = if m % 2 == 1 { per_call[m / 2] } else { 0.5 * (per_call[m / 2 - 1] + per_call[m / 2]) };
    let mean = per_call.iter().sum::<f64>() / m as f64;
    let var = per_call.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / m as f64;
    let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    Some(Timing { min_s: per_call[0], median_s: median, max_s: per_call[m - 1], batch, samples: m, cv, sample_s })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(min_sample_ms: u64, samples: usize, warm_up: Duration) -> Budget {
        Budget {
            min_sample: Duration::from_millis(min_sample_ms),
            samples,
            time_limit: Duration::from_secs(5),
            warm_up,
        }
    }

    #[test]
    fn fast_calls_are_batched_and_order_statistics_are_consistent() {
        let budget = budget(2, 5, Duration::ZERO);
        let mut calls = 0usize;
        let t = measure::<()>(&budget, || {
            calls += 1;
            std::hint::black_box((0..100).sum::<u64>());
            Ok(())
        })
        .unwrap();
        assert!(t.batch > 1, "a call of well under 2 ms must be batched, batch = {}", t.batch);
        assert_eq!(t.samples, 5);
        assert_eq!(calls, 2 + t.batch * t.samples);
        assert!(t.min_s <= t.median_s && t.median_s <= t.max_s);
    }

    #[test]
    fn a_slow_first_call_does_not_size_the_batch() {
        // A first call that records or compiles (here: sleeps 30 ms) before fast ones.
        let budget = budget(5, 3, Duration::ZERO);
        let mut calls = 0usize;
        let t = measure::<()>(&budget, || {
            calls += 1;
            if calls == 1 {
                std::thread::sleep(Duration::from_millis(30));
            }
            std::hint::black_box((0..100).sum::<u64>());
            Ok(())
        })
        .unwrap();
        assert!(t.batch > 1, "fast calls after a slow first one must be batched, batch = {}", t.batch);
        assert!(t.max_s < 0.005, "the slow first call is not a sample: {}", t.max_s);
    }

    #[test]
    fn calls_slow_for_a_while_are_warmed_up_before_the_samples() {
        // Calls that take 3 ms for their first 40 ms, then 0.2 ms: a transient of several calls
        // (caches, pages, clocks) that one warm-up call does not cover.
        let run = |warm_up: Duration| {
            let budget = budget(2, 5, warm_up);
            let start = Instant::now();
            measure::<()>(&budget, || {
                let slow = start.elapsed() < Duration::from_millis(40);
                std::thread::sleep(Duration::from_micros(if slow { 3000 } else { 200 }));
                Ok(())
            })
            .unwrap()
        };
        let warmed = run(Duration::from_millis(60));
        assert!(warmed.max_s < 0.0025, "a slow call was sampled after the warm-up: {:?}", warmed.sample_s);
        // Without it the transient lands in the samples, which is what the warm-up is for.
        let cold = run(Duration::ZERO);
        assert!(cold.max_s >= 0.0025, "the transient should show without a warm-up: {:?}", cold.sample_s);
    }

    #[test]
    fn errors_stop_the_measurement() {
        let r = measure(&Budget::default(), || Err::<(), _>("device lost"));
        assert_eq!(r.unwrap_err(), "device lost");
    }
}

//! Seeded inputs for the histogram workloads: `hist = reduce_by_index(dest, op, inds, vals)`.
//!
//! The generator is parameterised by n (values), k (bins), the index distribution and the
//! fraction of out-of-range indices (half of them -1, half >= k). Values are shaped for the
//! operator they will meet, so that derivatives stay meaningful and checkable:
//!
//! * [`Values::Sum`]: uniform in [-1, 1).
//! * [`Values::Product`]: `exp(u)` with u uniform in (-a, a), a = min(0.5, 3 / sqrt(m)) where m is
//!   the expected bin size, so a bin's product is e^(sum of u) with a standard deviation below
//!   about 1.7 in the exponent: it neither overflows nor underflows, even in f32 and at n/k = 10^6.
//!   Each value is zero with probability min(0.5, 1/m), so the number of zeros per bin is about
//!   Poisson(1): roughly 37% of the bins have none, 37% one and 26% two or more, and all three
//!   branches of the `*` rule are exercised.
//! * [`Values::Separated`] (min/max): dest and values together are a random permutation of an
//!   even grid of n + k points in [-1, 1), so no two competing values tie and, for n + k up to
//!   10^5, any two are more than 2h apart for the finite-difference step h = cbrt(eps_f64) used by
//!   validation (the grid spacing is 2 / (n + k) >= 2e-5 > 2h = 1.2e-5).
//! * [`Values::Logs`] (logaddexp): uniform in [-5, 5).
//! * [`Values::Magnitudes`] (hypot): uniform in [0, 1): hypot's neutral element 0 is neutral
//!   only on magnitudes.

use rand::RngExt;

/// How bin indices are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexDist {
    /// Every bin equally likely.
    Uniform,
    /// bin = floor(k * u^3) for u uniform in [0, 1): bin 0 gets about k^(-1/3) of the mass, the
    /// density falling like b^(-2/3) (hot bins, as in real histograms).
    Skewed,
}

impl IndexDist {
    pub fn name(self) -> &'static str {
        match self {
            IndexDist::Uniform => "uniform",
            IndexDist::Skewed => "skewed",
        }
    }
}

impl std::str::FromStr for IndexDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(IndexDist::Uniform),
            "skewed" => Ok(IndexDist::Skewed),
            _ => Err(format!("unknown index distribution '{s}' (expected uniform or skewed)")),
        }
    }
}

/// Which value shape the generator produces (one per operator family; see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Values {
    Sum,
    Product,
    Separated,
    Logs,
    Magnitudes,
}

/// Parameters of a generated histogram case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistSpec {
    pub n: usize,
    pub k: usize,
    pub dist: IndexDist,
    /// Fraction of indices outside [0, k), in [0, 1].
    pub out_of_range: f64,
    pub values: Values,
    pub seed: u64,
}

/// A generated (or parsed) histogram input, in f64 (rounded to the dtype when uploaded).
#[derive(Clone, Debug, PartialEq)]
pub struct HistData {
    pub k: usize,
    pub inds: Vec<i64>,
    pub vals: Vec<f64>,
    pub dest: Vec<f64>,
}

/// Generates the case `spec` describes. The same spec always gives the same data.
pub fn generate(spec: &HistSpec) -> HistData {
    let HistSpec { n, k, dist, out_of_range, values, seed } = *spec;
    let mut rng = crate::rng(seed);
    let oob = out_of_range.clamp(0.0, 1.0);
    let inds: Vec<i64> = (0..n)
        .map(|_| {
            if k == 0 || rng.random::<f64>() < oob {
                // Half below, half above the valid range.
                if rng.random::<bool>() { -1 } else { k as i64 + rng.random_range(0..4) }
            } else {
                match dist {
                    IndexDist::Uniform => rng.random_range(0..k) as i64,
                    IndexDist::Skewed => {
                        let u: f64 = rng.random();
                        ((k as f64 * u * u * u) as usize).min(k - 1) as i64
                    }
                }
            }
        })
        .collect();
    let in_range = (n as f64 * (1.0 - oob)).max(1.0);
    let mean_bin = (in_range / k.max(1) as f64).max(1.0);
    let (vals, dest) = match values {
        Values::Sum => (uniform(&mut rng, n, -1.0, 1.0), uniform(&mut rng, k, -1.0, 1.0)),
        Values::Logs => (uniform(&mut rng, n, -5.0, 5.0), uniform(&mut rng, k, -5.0, 5.0)),
        Values::Magnitudes => (uniform(&mut rng, n, 0.0, 1.0), uniform(&mut rng, k, 0.0, 1.0)),
        Values::Product => {
            let a = (3.0 / mean_bin.sqrt()).min(0.5);
            let p_zero = (1.0 / mean_bin).min(0.5);
            let vals = (0..n)
                .map(|_| {
                    let zero = rng.random::<f64>() < p_zero;
                    let v = rng.random_range(-a..a).exp();
                    if zero { 0.0 } else { v }
                })
                .collect();
            let dest = (0..k).map(|_| rng.random_range(-0.5..0.5f64).exp()).collect();
            (vals, dest)
        }
        Values::Separated => {
            let total = n + k;
            let mut grid: Vec<f64> = (0..total).map(|j| -1.0 + 2.0 * (j as f64 + 0.5) / total as f64).collect();
            // Fisher-Yates with the seeded generator.
            for j in (1..total).rev() {
                let r = rng.random_range(0..=j);
                grid.swap(j, r);
            }
            let vals = grid.split_off(k);
            (vals, grid)
        }
    };
    HistData { k, inds, vals, dest }
}

fn uniform(rng: &mut impl RngExt, len: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..len).map(|_| rng.random_range(lo..hi)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n: usize, k: usize, values: Values) -> HistSpec {
        HistSpec { n, k, dist: IndexDist::Uniform, out_of_range: 0.05, values, seed: 7 }
    }

    #[test]
    fn the_same_seed_gives_the_same_case_and_another_seed_another() {
        let a = generate(&spec(1000, 10, Values::Sum));
        assert_eq!(a, generate(&spec(1000, 10, Values::Sum)));
        let b = generate(&HistSpec { seed: 8, ..spec(1000, 10, Values::Sum) });
        assert_ne!(a.vals, b.vals);
    }

    #[test]
    fn out_of_range_indices_come_in_both_directions_at_the_requested_rate() {
        let d = generate(&spec(100_000, 50, Values::Sum));
        let below = d.inds.iter().filter(|&&b| b < 0).count();
        let above = d.inds.iter().filter(|&&b| b >= 50).count();
        let rate = (below + above) as f64 / 1e5;
        assert!((rate - 0.05).abs() < 0.005, "rate {rate}");
        assert!(below > 1000 && above > 1000, "below {below} above {above}");
    }

    #[test]
    fn skewed_indices_favour_low_bins() {
        let d = generate(&HistSpec { dist: IndexDist::Skewed, out_of_range: 0.0, ..spec(100_000, 1000, Values::Sum) });
        let low = d.inds.iter().filter(|&&b| b < 100).count();
        // P(u^3 < 0.1) = 0.1^(1/3) = 0.46
        assert!((low as f64 / 1e5 - 0.464).abs() < 0.01, "low {low}");
        assert!(d.inds.iter().all(|&b| (0..1000).contains(&b)));
    }

    #[test]
    fn products_have_bins_with_zero_one_and_several_zeros_and_stay_in_range() {
        for &(n, k) in &[(10_000usize, 100usize), (1_000_000, 10)] {
            let d = generate(&HistSpec { out_of_range: 0.0, ..spec(n, k, Values::Product) });
            let mut zeros = vec![0usize; k];
            let mut log_prod = vec![0.0f64; k];
            for (&b, &v) in d.inds.iter().zip(&d.vals) {
                if v == 0.0 {
                    zeros[b as usize] += 1;
                } else {
                    log_prod[b as usize] += v.ln();
                }
            }
            let frac = |f: &dyn Fn(usize) -> bool| zeros.iter().filter(|&&z| f(z)).count() as f64 / k as f64;
            if k >= 100 {
                assert!(frac(&|z| z == 0) > 0.2 && frac(&|z| z == 1) > 0.2 && frac(&|z| z >= 2) > 0.1);
            }
            assert!(log_prod.iter().all(|l| l.abs() < 30.0), "a product would leave f32's range");
        }
    }

    #[test]
    fn separated_values_never_tie_and_are_far_apart() {
        let d = generate(&spec(5000, 20, Values::Separated));
        let mut all: Vec<f64> = d.vals.iter().chain(&d.dest).map(|&x| x as f32 as f64).collect();
        all.sort_by(f64::total_cmp);
        let h = f64::EPSILON.cbrt();
        assert!(all.windows(2).all(|w| w[1] - w[0] > 2.0 * h));
    }
}

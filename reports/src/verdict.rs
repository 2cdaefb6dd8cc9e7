//! The speed verdict of one mode of one case: the current run's timing samples against the
//! baseline's. The gate ([`crate::gate`]) asks it for every mode both runs timed, and the report
//! shows its answer per case.
//!
//! The change is the ratio of the medians (current / baseline) with a bootstrap confidence
//! interval, criterion's way: both sides' samples are resampled with replacement by a seeded
//! ChaCha generator, the ratio of the two resampled medians is taken per resample, and the
//! interval is read off the percentiles of those ratios. A resample's median is drawn from its
//! exact distribution instead of by drawing all of its indices: the k-th smallest of m indices
//! drawn uniformly from `0..m` is `floor(m U)` with `U` the k-th smallest of m uniforms, which
//! is Beta(k, m - k + 1)-distributed; so a resample costs the same at 5 samples as at 10^6.
//!
//! A one-sided Mann-Whitney rank test (sort-based, O((m + n) log(m + n))) says whether the
//! current samples tend to be larger (or smaller) at all. With the threshold `t` (the largest
//! accepted slowdown) and the noise threshold `e`, the verdict is:
//!
//! * **regressed**: the median ratio exceeds `t`, the interval lies above `1 + e`, and the rank
//!   test says slower (p < alpha);
//! * **improved**: the mirror image (ratio under `1 / t`, interval under `1 / (1 + e)`, p < alpha);
//! * **no change**: the interval's upper end is at most `t`: a slowdown beyond the threshold is
//!   ruled out at the confidence level;
//! * **not judged**: too few samples for the rank test to reach `alpha` at all, a baseline sample
//!   too short to time, or too noisy: the interval admits a slowdown beyond `t` that the data do
//!   not establish. Every such timing is counted, so that a gate never reads as "nothing
//!   regressed" when it could not tell.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Distribution};

use crate::schema::Timing;

/// How a speed verdict is reached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpeedConfig {
    /// Largest accepted ratio of current to baseline median time (`t`).
    pub max_slowdown: f64,
    /// Relative changes within this band are noise (`e`; criterion's default, 0.01).
    pub noise_threshold: f64,
    /// Significance level of the rank test.
    pub alpha: f64,
    /// Confidence level of the bootstrap interval.
    pub confidence: f64,
    /// Bootstrap resamples per timing.
    pub resamples: usize,
    /// Baseline samples (median time per call x calls per sample) shorter than this are not
    /// judged: timer resolution and scheduling dominate there.
    pub min_seconds: f64,
}

impl Default for SpeedConfig {
    fn default() -> Self {
        SpeedConfig {
            max_slowdown: 1.15,
            noise_threshold: 0.01,
            alpha: 0.01,
            confidence: 0.95,
            resamples: 10_000,
            min_seconds: 1e-3,
        }
    }
}

/// What the comparison of one mode concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Regressed,
    NotJudged,
    Improved,
    NoChange,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::NoChange => "no change",
            Verdict::NotJudged => "not judged",
        }
    }
}

/// One mode of one case, current against baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub case_id: String,
    /// `primal`, `vjp` or `jvp`.
    pub mode: String,
    pub baseline_s: f64,
    pub current_s: f64,
    /// current / baseline median.
    pub ratio: f64,
    /// Bootstrap interval of the ratio at the configured confidence (None: not computed).
    pub ci: Option<(f64, f64)>,
    /// One-sided rank-test p-values: current slower, current faster (None: no samples).
    pub p_slower: Option<f64>,
    pub p_faster: Option<f64>,
    /// Samples of the baseline and the current side.
    pub samples: (usize, usize),
    pub verdict: Verdict,
    /// Why not judged, or the evidence of the verdict, in words.
    pub why: String,
}

impl Change {
    /// A change not judged (yet): the medians' ratio and the sample counts, `why` the reason.
    pub fn unjudged(case_id: &str, mode: &str, tb: &Timing, tc: &Timing, why: String) -> Change {
        Change {
            case_id: case_id.to_string(),
            mode: mode.to_string(),
            baseline_s: tb.median_s,
            current_s: tc.median_s,
            ratio: tc.median_s / tb.median_s,
            ci: None,
            p_slower: None,
            p_faster: None,
            samples: (tb.sample_s.len(), tc.sample_s.len()),
            verdict: Verdict::NotJudged,
            why,
        }
    }

    /// `1.32x [1.20, 1.45]`: the ratio and its interval.
    pub fn ratio_text(&self) -> String {
        match self.ci {
            Some((lo, hi)) => format!("{:.3}x [{lo:.3}, {hi:.3}]", self.ratio),
            None => format!("{:.3}x", self.ratio),
        }
    }
}

/// The exact upper tail P(U >= u) of the Mann-Whitney U statistic for sample sizes `m` and `n`
/// under the null hypothesis (no ties), by counting rank arrangements; a normal approximation
/// (continuity-corrected; `tie_term` is the tie correction sum(t^3 - t) over groups of tied
/// values) where the table would be large.
pub fn mann_whitney_upper_tail(u: f64, m: usize, n: usize, tie_term: f64) -> f64 {
    if m == 0 || n == 0 {
        return 1.0;
    }
    let max = m * n;
    if max > 4096 {
        let (mf, nf) = (m as f64, n as f64);
        let total = mf + nf;
        let var = mf * nf / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
        if var <= 0.0 {
            // Every value tied: no evidence either way.
            return 1.0;
        }
        let z = (u - mf * nf / 2.0 - 0.5) / var.sqrt();
        return 0.5 * erfc(z / std::f64::consts::SQRT_2);
    }
    // Ties give half-integer U: count from its floor, the conservative side.
    let from = (u.floor().max(0.0) as usize).min(max + 1);
    exact_upper_tails(m, n)[from]
}

/// P(U >= k) for k = 0..=m n + 1 under the null hypothesis, by counting rank arrangements;
/// computed once per pair of sample sizes (a gate compares hundreds of timings of equal counts).
fn exact_upper_tails(m: usize, n: usize) -> std::rc::Rc<Vec<f64>> {
    type Tails = std::collections::HashMap<(usize, usize), std::rc::Rc<Vec<f64>>>;
    thread_local! {
        static TAILS: std::cell::RefCell<Tails> = Default::default();
    }
    if let Some(t) = TAILS.with(|c| c.borrow().get(&(m, n)).cloned()) {
        return t;
    }
    // counts[i][j][k]: arrangements of i current and j baseline values with U = k. Built row by
    // row: the largest value is either a current one (beating all j baseline values) or not.
    let mut prev: Vec<Vec<f64>> = vec![vec![1.0]; n + 1]; // i = 0: U = 0 for any j
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]); // j = 0
        for j in 1..=n {
            let mut v = vec![0.0; i * j + 1];
            for (k, c) in prev[j].iter().enumerate() {
                v[k + j] += c;
            }
            for (k, c) in cur[j - 1].iter().enumerate() {
                v[k] += c;
            }
            cur.push(v);
        }
        prev = cur;
    }
    let dist = &prev[n];
    let total: f64 = dist.iter().sum();
    // Suffix sums of the counts, then one division each (exact where the counts are).
    let mut tails = vec![0.0; dist.len() + 1];
    for k in (0..dist.len()).rev() {
        tails[k] = tails[k + 1] + dist[k];
    }
    for t in &mut tails {
        *t /= total;
    }
    let tails = std::rc::Rc::new(tails);
    TAILS.with(|c| c.borrow_mut().insert((m, n), tails.clone()));
    tails
}

/// Complementary error function (Numerical Recipes' erfcc, relative error < 1.2e-7).
pub(crate) fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// The Mann-Whitney U of `current` against `baseline` (pairs where the current value is larger,
/// ties counting half) and the tie term sum(t^3 - t), from one sort of both samples with
/// mid-ranks for ties: O((m + n) log(m + n)) instead of comparing all m n pairs.
pub fn mann_whitney_u(current: &[f64], baseline: &[f64]) -> (f64, f64) {
    let mut all: Vec<(f64, bool)> =
        current.iter().map(|&x| (x, true)).chain(baseline.iter().map(|&x| (x, false))).collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut rank_sum, mut tie_term) = (0.0, 0.0);
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Positions i..=j (ranks i + 1 ..= j + 1) share the mid-rank.
        let mid = (i + j + 2) as f64 / 2.0;
        let ties = (j - i + 1) as f64;
        let current_here = all[i..=j].iter().filter(|(_, c)| *c).count() as f64;
        rank_sum += mid * current_here;
        tie_term += ties * ties * ties - ties;
        i = j + 1;
    }
    let m = current.len() as f64;
    (rank_sum - m * (m + 1.0) / 2.0, tie_term)
}

/// One-sided Mann-Whitney test that `current` tends to be larger than `baseline`: (U, p).
pub fn mann_whitney_greater(current: &[f64], baseline: &[f64]) -> (f64, f64) {
    let (u, ties) = mann_whitney_u(current, baseline);
    (u, mann_whitney_upper_tail(u, current.len(), baseline.len(), ties))
}

/// The smallest p-value the rank test can give with `m` and `n` samples: every current value
/// above every baseline one, 1 / C(m + n, m).
pub fn smallest_p(m: usize, n: usize) -> f64 {
    let (small, total) = (m.min(n), m + n);
    // C(total, small) as a running product; stops once it is past any useful significance.
    let mut c = 1.0f64;
    for i in 0..small {
        c = c * (total - i) as f64 / (i + 1) as f64;
        if c > 1e12 {
            break;
        }
    }
    1.0 / c
}

/// The fewest samples per side (equal on both) with which the rank test can reach p < `alpha`:
/// 5 at alpha = 0.01 (1 / C(10, 5) = 1/252), 4 at 0.05 (1/70).
pub fn min_samples(alpha: f64) -> usize {
    (1..64).find(|&k| smallest_p(k, k) < alpha).unwrap_or(64)
}

/// Draws the median of a resample (with replacement) of `sorted` directly: the k-th smallest of
/// m uniform indices is `floor(m U_(k))`, `U_(k)` ~ Beta(k, m - k + 1); for an even count the
/// next one is `U_(k) + (1 - U_(k)) V`, V ~ Beta(1, m - k) (the smallest of the m - k uniforms
/// above `U_(k)`).
pub(crate) struct ResampledMedian<'a> {
    sorted: &'a [f64],
    first: Option<Beta<f64>>,
    next: Option<Beta<f64>>,
}

impl<'a> ResampledMedian<'a> {
    pub(crate) fn new(sorted: &'a [f64]) -> ResampledMedian<'a> {
        let m = sorted.len();
        let k = m.div_ceil(2); // 1-based rank of the (lower) middle value
        let first = (m > 1).then(|| Beta::new(k as f64, (m - k + 1) as f64).expect("positive shape parameters"));
        let next =
            (m > 1 && m.is_multiple_of(2)).then(|| Beta::new(1.0, (m - k) as f64).expect("positive shape parameters"));
        ResampledMedian { sorted, first, next }
    }

    pub(crate) fn draw(&self, rng: &mut ChaCha8Rng) -> f64 {
        let m = self.sorted.len();
        let Some(first) = &self.first else {
            return self.sorted[0];
        };
        let index = |u: f64| ((u * m as f64) as usize).min(m - 1);
        let u = first.sample(rng);
        match &self.next {
            None => self.sorted[index(u)],
            Some(next) => {
                let v = u + (1.0 - u) * next.sample(rng);
                // Halves first: the sum of two times near f64::MAX overflows.
                0.5 * self.sorted[index(u)] + 0.5 * self.sorted[index(v)]
            }
        }
    }
}

/// The bootstrap interval of median(current) / median(baseline) at `confidence`, from
/// `resamples` resamples of both sides drawn by a ChaCha8 generator seeded with `seed`.
pub fn bootstrap_ratio_ci(
    baseline: &[f64],
    current: &[f64],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<(f64, f64)> {
    if baseline.is_empty() || current.is_empty() || resamples == 0 {
        return None;
    }
    let sort = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_by(f64::total_cmp);
        v
    };
    let (b, c) = (sort(baseline), sort(current));
    let (mb, mc) = (ResampledMedian::new(&b), ResampledMedian::new(&c));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ratios: Vec<f64> = (0..resamples).map(|_| mc.draw(&mut rng) / mb.draw(&mut rng)).collect();
    Some(percentile_interval(ratios, confidence))
}

/// The central `confidence` interval of bootstrap statistics: their (1 - confidence) / 2 and
/// (1 + confidence) / 2 percentiles (`stats` is not empty).
pub(crate) fn percentile_interval(mut stats: Vec<f64>, confidence: f64) -> (f64, f64) {
    stats.sort_by(f64::total_cmp);
    let n = stats.len();
    let tail = (1.0 - confidence) / 2.0;
    let at = |q: f64| stats[((q * n as f64).floor() as usize).min(n - 1)];
    (at(tail), at(1.0 - tail))
}

/// A seed per case and mode (FNV-1a of both): the same comparison gives the same interval on
/// every machine and run, and the cases' resamples are independent of each other.
pub fn seed_for(case_id: &str, mode: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in case_id.bytes().chain([0u8]).chain(mode.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A p-value in words: `= 2.91e-4`, or `< 1e-12` where the normal approximation's tail is
/// beyond what its accuracy supports.
fn p_text(p: f64) -> String {
    if p < 1e-12 { "< 1e-12".to_string() } else { format!("= {p:.2e}") }
}

/// The highest bar the run-to-run factor may raise a regression's ratio to (`t * f`): a ratio of
/// 2 or more whose interval lies above `(1 + e) * 2 / t` is always a regression, whatever the
/// window did.
pub const MAX_BAR: f64 = 2.0;

/// [`judge_between_runs`] without an estimate of the run-to-run noise.
pub fn judge(case_id: &str, mode: &str, tb: &Timing, tc: &Timing, cfg: &SpeedConfig) -> Change {
    judge_between_runs(case_id, mode, tb, tc, cfg, None)
}

/// Judges one mode: the baseline's timing `tb` against the current `tc` (both with samples;
/// see [`crate::gate`] for files without).
///
/// `run_to_run`: how far the case's median moves between consecutive runs of the baseline's
/// window (`gate::robust_move`: the largest move once the two largest are dropped, >= 1), where
/// the window holds two or more; it is capped so that the bar `t * f` never exceeds
/// [`MAX_BAR`]. The samples of one
/// run cannot see what changes between runs (the machine's load, the process's memory layout):
/// two runs of the quick suite with no change between them, on an otherwise idle 2-core VM,
/// differed by up to 2x with intervals that excluded 1. A regression (or an improvement) must
/// then clear the thresholds times that factor; what falls within it is not judged.
pub fn judge_between_runs(
    case_id: &str,
    mode: &str,
    tb: &Timing,
    tc: &Timing,
    cfg: &SpeedConfig,
    run_to_run: Option<f64>,
) -> Change {
    let (nb, nc) = (tb.sample_s.len(), tc.sample_s.len());
    let mut change = Change::unjudged(case_id, mode, tb, tc, String::new());
    if !(tb.median_s > 0.0 && tb.median_s.is_finite()) {
        change.why = format!("the baseline median {} s is not a positive time", tb.median_s);
        return change;
    }
    let sample_s = tb.median_s * tb.batch.max(1) as f64;
    if sample_s < cfg.min_seconds {
        change.why = format!(
            "a baseline sample lasts {:.3} ms ({} call(s) of {:.4} ms), under the {:.3} ms minimum",
            sample_s * 1e3,
            tb.batch.max(1),
            tb.median_s * 1e3,
            cfg.min_seconds * 1e3
        );
        return change;
    }
    if smallest_p(nb, nc) >= cfg.alpha {
        change.why = format!(
            "{nb} and {nc} samples: the rank test cannot reach p < {} (needs {} on each side)",
            cfg.alpha,
            min_samples(cfg.alpha)
        );
        return change;
    }
    let (_, p_slower) = mann_whitney_greater(&tc.sample_s, &tb.sample_s);
    let (_, p_faster) = mann_whitney_greater(&tb.sample_s, &tc.sample_s);
    let (lo, hi) =
        bootstrap_ratio_ci(&tb.sample_s, &tc.sample_s, cfg.resamples, cfg.confidence, seed_for(case_id, mode))
            .expect("samples on both sides");
    change.ci = Some((lo, hi));
    change.p_slower = Some(p_slower);
    change.p_faster = Some(p_faster);
    let (t, e) = (cfg.max_slowdown, 1.0 + cfg.noise_threshold);
    // The bar never exceeds MAX_BAR: a regression that persists cannot raise it past that by
    // the move it made into the window.
    let moved = run_to_run.filter(|f| f.is_finite()).unwrap_or(1.0).max(1.0);
    let f = moved.min((MAX_BAR / t).max(1.0));
    let level = format!("{:.0}%", cfg.confidence * 100.0);
    let evidence = |p: f64| {
        format!(
            "{level} CI [{lo:.3}, {hi:.3}] from {} bootstrap resamples; Mann-Whitney p {} over {nc} and {nb} samples",
            cfg.resamples,
            p_text(p)
        )
    };
    let beyond_noise =
        |why: String| if f > 1.0 { format!("{why}; beyond the baseline runs' run-to-run {f:.3}x") } else { why };
    if change.ratio > t * f && lo > e * f && p_slower < cfg.alpha {
        change.verdict = Verdict::Regressed;
        change.why = beyond_noise(evidence(p_slower));
    } else if change.ratio < 1.0 / (t * f) && hi < 1.0 / (e * f) && p_faster < cfg.alpha {
        change.verdict = Verdict::Improved;
        change.why = beyond_noise(evidence(p_faster));
    } else if f > 1.0
        && ((change.ratio > t && change.ratio <= t * f) || (change.ratio < 1.0 / t && change.ratio >= 1.0 / (t * f)))
    {
        // Only a ratio the run-to-run bar explains is called noise between runs; one beyond
        // it that is not judged is so for its own samples' interval (below).
        let within = if moved > f {
            format!("the {f:.3}x run-to-run bar (capped; the case moved {moved:.3}x between consecutive baseline runs)")
        } else {
            format!("the {f:.3}x the case moved between consecutive baseline runs")
        };
        change.why =
            format!("too noisy between runs: {:.3}x is within {within} ({level} CI [{lo:.3}, {hi:.3}])", change.ratio);
    } else if hi <= t {
        change.verdict = Verdict::NoChange;
        change.why = format!("{level} CI [{lo:.3}, {hi:.3}] rules out a slowdown beyond {t}x");
    } else {
        change.why = format!(
            "too noisy: the {level} CI [{lo:.3}, {hi:.3}] admits a slowdown beyond {t}x that the samples do not establish (Mann-Whitney p {})",
            p_text(p_slower)
        );
    }
    change
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    /// The median of sorted values (the mean of the middle two for an even count), as the
    /// timing's own summary takes it.
    fn median_sorted(s: &[f64]) -> f64 {
        let m = s.len();
        if m % 2 == 1 { s[m / 2] } else { 0.5 * (s[m / 2 - 1] + s[m / 2]) }
    }

    fn timing(samples: &[f64]) -> Timing {
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Timing {
            min_s: s[0],
            median_s: median_sorted(&s),
            max_s: s[s.len() - 1],
            batch: 1,
            samples: s.len(),
            cv: 0.0,
            sample_s: samples.to_vec(),
        }
    }

    /// Hand-counted null distributions: for m = n = 2 the six arrangements give U = 0, 1, 2, 2,
    /// 3, 4; for m = n = 5 only one of the C(10, 5) = 252 puts every current value on top.
    #[test]
    fn the_rank_test_matches_hand_counted_distributions() {
        assert_eq!(mann_whitney_upper_tail(1.0, 1, 1, 0.0), 0.5);
        assert_eq!(mann_whitney_upper_tail(3.0, 2, 2, 0.0), 2.0 / 6.0);
        assert_eq!(mann_whitney_upper_tail(2.0, 2, 2, 0.0), 4.0 / 6.0);
        assert_eq!(mann_whitney_upper_tail(0.0, 2, 2, 0.0), 1.0);
        assert!((mann_whitney_upper_tail(25.0, 5, 5, 0.0) - 1.0 / 252.0).abs() < 1e-15);
        let (u, p) = mann_whitney_greater(&[2.0, 2.1, 2.2, 2.3, 2.4], &[1.0, 1.1, 1.2, 1.3, 1.4]);
        assert_eq!(u, 25.0);
        assert!((p - 1.0 / 252.0).abs() < 1e-15);
        // The normal approximation (large samples) agrees with the exact tail at the centre.
        assert!((mann_whitney_upper_tail(5000.5, 100, 100, 0.0) - 0.5).abs() < 1e-3);
    }

    /// The sort-based U equals the count over all pairs (ties half), on samples with ties.
    #[test]
    fn the_sorted_u_equals_the_pairwise_count() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (m, n) in [(1, 1), (3, 8), (20, 13), (64, 70)] {
            // Values from a small set, so that ties within and across the samples are common.
            let draw = |rng: &mut ChaCha8Rng, k: usize| -> Vec<f64> {
                (0..k).map(|_| f64::from(rng.random_range(0..6u32))).collect()
            };
            let (c, b) = (draw(&mut rng, m), draw(&mut rng, n));
            let pairwise: f64 = c
                .iter()
                .flat_map(|x| {
                    b.iter().map(move |y| {
                        if x > y {
                            1.0
                        } else if x == y {
                            0.5
                        } else {
                            0.0
                        }
                    })
                })
                .sum();
            assert_eq!(mann_whitney_u(&c, &b).0, pairwise, "m = {m}, n = {n}");
        }
        // Ties: current 1, 1 against 1, 2: two half-wins; groups of 3 and 1: sum(t^3 - t) = 24.
        assert_eq!(mann_whitney_u(&[1.0, 1.0], &[1.0, 2.0]), (1.0, 24.0));
    }

    #[test]
    fn the_fewest_samples_follow_from_alpha() {
        assert_eq!(smallest_p(5, 5), 1.0 / 252.0);
        assert_eq!(smallest_p(3, 3), 1.0 / 20.0);
        assert_eq!(min_samples(0.01), 5);
        assert_eq!(min_samples(0.05), 4);
        assert_eq!(min_samples(0.001), 7); // 1 / C(14, 7) = 1/3432
    }

    /// The drawn median has the distribution of a resample's median: for [1, 2, 3] a resample's
    /// median is 1 with probability P(at least 2 of 3 draws are the 1) = 7/27, 3 likewise, 2
    /// with 13/27.
    #[test]
    fn a_drawn_median_has_the_resampled_median_distribution() {
        let sorted = [1.0, 2.0, 3.0];
        let d = ResampledMedian::new(&sorted);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let trials = 200_000;
        let mut counts = [0usize; 3];
        for _ in 0..trials {
            counts[d.draw(&mut rng) as usize - 1] += 1;
        }
        for (got, want) in counts.iter().zip([7.0 / 27.0, 13.0 / 27.0, 7.0 / 27.0]) {
            let f = *got as f64 / trials as f64;
            // Binomial standard error ~0.001; 5 of them.
            assert!((f - want).abs() < 0.005, "{counts:?}");
        }
        // Even count [1, 2]: the median of two draws is 1 (1/4), 1.5 (1/2) or 2 (1/4).
        let d = ResampledMedian::new(&[1.0, 2.0]);
        let mut halves = 0;
        for _ in 0..trials {
            if d.draw(&mut rng) == 1.5 {
                halves += 1;
            }
        }
        assert!((halves as f64 / trials as f64 - 0.5).abs() < 0.005, "{halves}");
    }

    #[test]
    fn a_two_times_slower_mode_regresses_with_its_interval() {
        let base = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3];
        let slow: Vec<f64> = base.iter().map(|x| x * 2.0).collect();
        let c = judge("a", "vjp", &timing(&base), &timing(&slow), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::Regressed, "{c:?}");
        assert!((c.ratio - 2.0).abs() < 1e-12);
        let (lo, hi) = c.ci.unwrap();
        // Every resampled ratio is (2 x a baseline sample) / (a baseline sample): within
        // [2 x 0.98 / 1.02, 2 x 1.02 / 0.98].
        assert!(lo >= 2.0 * 0.98 / 1.02 && hi <= 2.0 * 1.02 / 0.98 && lo < 2.0 && hi > 2.0, "{lo} {hi}");
        assert_eq!(c.p_slower, Some(1.0 / 3432.0));
        assert!(c.why.contains("95% CI") && c.why.contains("10000 bootstrap resamples"), "{}", c.why);
        // The same samples the other way round: improved.
        let c = judge("a", "vjp", &timing(&slow), &timing(&base), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::Improved, "{c:?}");
    }

    /// Noise: both runs drawn from one bimodal distribution (~1.0 ms or ~1.3 ms). The current
    /// run drew four slow samples of seven, so its median is 1.30x; the interval reaches down to
    /// no change, so it is not called a regression, and not "no change" either.
    #[test]
    fn a_bimodal_mode_is_too_noisy_to_judge_not_regressed() {
        let base = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3];
        let cur = [0.99e-3, 1.01e-3, 1.00e-3, 1.30e-3, 1.31e-3, 1.29e-3, 1.32e-3];
        let c = judge("a", "primal", &timing(&base), &timing(&cur), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::NotJudged, "{c:?}");
        assert!(c.why.starts_with("too noisy"), "{}", c.why);
        let (lo, hi) = c.ci.unwrap();
        assert!(lo < 1.01 && hi > 1.15, "{lo} {hi}");
    }

    #[test]
    fn a_steady_mode_within_threshold_is_no_change() {
        let base = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3];
        let cur: Vec<f64> = base.iter().map(|x| x * 1.03).collect();
        let c = judge("a", "primal", &timing(&base), &timing(&cur), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::NoChange, "{c:?}");
        assert!(c.ci.unwrap().1 <= 1.15);
    }

    #[test]
    fn too_few_or_too_short_samples_are_not_judged() {
        let base = [1e-2, 1.01e-2, 0.99e-2, 1.02e-2];
        let slow: Vec<f64> = base.iter().map(|x| x * 5.0).collect();
        let c = judge("a", "primal", &timing(&base), &timing(&slow), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::NotJudged);
        assert_eq!(c.why, "4 and 4 samples: the rank test cannot reach p < 0.01 (needs 5 on each side)");
        // Five against four can: 1 / C(9, 4) = 1/126.
        let mut five = base.to_vec();
        five.push(1e-2);
        let c = judge("a", "primal", &timing(&five), &timing(&slow), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::Regressed, "{c:?}");
        // 0.1 ms calls, one per sample: too short to time.
        let short = [1e-4, 1.01e-4, 0.99e-4, 1.02e-4, 0.98e-4];
        let c = judge("a", "primal", &timing(&short), &timing(&short), &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::NotJudged);
        assert!(c.why.starts_with("a baseline sample lasts 0.100 ms (1 call(s)"), "{}", c.why);
        // A zero baseline (no time to compare with), even with no minimum.
        let zero = timing(&[0.0; 5]);
        let cfg = SpeedConfig { min_seconds: 0.0, ..SpeedConfig::default() };
        let c = judge("a", "primal", &zero, &timing(&short), &cfg);
        assert_eq!((c.verdict, c.why.as_str()), (Verdict::NotJudged, "the baseline median 0 s is not a positive time"));
        // The same calls batched 20 to a sample (2 ms) are judged.
        let mut batched = timing(&short);
        batched.batch = 20;
        let c = judge("a", "primal", &batched, &batched, &SpeedConfig::default());
        assert_eq!(c.verdict, Verdict::NoChange, "{c:?}");
    }

    #[test]
    fn the_interval_is_reproducible_and_narrows_with_more_samples() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let noisy = |rng: &mut ChaCha8Rng, k: usize, scale: f64| -> Vec<f64> {
            (0..k).map(|_| scale * (1.0 + 0.1 * rng.random::<f64>())).collect()
        };
        let (b, c) = (noisy(&mut rng, 10, 1.0), noisy(&mut rng, 10, 1.2));
        let one = bootstrap_ratio_ci(&b, &c, 10_000, 0.95, 5).unwrap();
        assert_eq!(one, bootstrap_ratio_ci(&b, &c, 10_000, 0.95, 5).unwrap());
        let (b, c) = (noisy(&mut rng, 1000, 1.0), noisy(&mut rng, 1000, 1.2));
        let many = bootstrap_ratio_ci(&b, &c, 10_000, 0.95, 5).unwrap();
        assert!(many.1 - many.0 < (one.1 - one.0) / 3.0, "{one:?} {many:?}");
        // Both contain the true ratio of the medians, 1.2 x 1.05 / 1.05.
        assert!(many.0 < 1.2 && many.1 > 1.2, "{many:?}");
    }

    /// A 1.3x slowdown with a tight interval is a regression by the samples alone, and not
    /// judged when the baseline's runs moved 1.5x between each other; a 2x one clears that too.
    #[test]
    fn run_to_run_noise_raises_the_bar_and_says_so() {
        let base: Vec<f64> = (0..10).map(|i| 1e-2 * (1.0 + 0.001 * i as f64)).collect();
        let slow: Vec<f64> = base.iter().map(|x| x * 1.3).collect();
        let cfg = SpeedConfig::default();
        let alone = judge_between_runs("a", "vjp", &timing(&base), &timing(&slow), &cfg, None);
        assert_eq!(alone.verdict, Verdict::Regressed, "{alone:?}");
        let noisy = judge_between_runs("a", "vjp", &timing(&base), &timing(&slow), &cfg, Some(1.5));
        assert_eq!(noisy.verdict, Verdict::NotJudged, "{noisy:?}");
        assert!(noisy.why.starts_with("too noisy between runs: 1.300x is within the 1.500x"), "{}", noisy.why);
        let faster: Vec<f64> = base.iter().map(|x| x / 1.3).collect();
        let noisy = judge_between_runs("a", "vjp", &timing(&base), &timing(&faster), &cfg, Some(1.5));
        assert_eq!(noisy.verdict, Verdict::NotJudged, "{noisy:?}");
        let twice: Vec<f64> = base.iter().map(|x| x * 2.0).collect();
        let clear = judge_between_runs("a", "vjp", &timing(&base), &timing(&twice), &cfg, Some(1.5));
        assert_eq!(clear.verdict, Verdict::Regressed, "{clear:?}");
        assert!(clear.why.ends_with("beyond the baseline runs' run-to-run 1.500x"), "{}", clear.why);
        // Quiet baseline runs (a factor of 1) change nothing.
        let quiet = judge_between_runs("a", "vjp", &timing(&base), &timing(&slow), &cfg, Some(1.0));
        assert_eq!((quiet.verdict, quiet.why.clone()), (alone.verdict, alone.why.clone()));
    }
}

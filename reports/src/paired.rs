//! The paired speed verdict of `adgauge compare`: a baseline and a candidate timed in the same
//! process tree, block by block in alternating order, judged from the pairs.
//!
//! Each pair is one block of runs of the baseline and one of the candidate taken back to back,
//! so both feel the same state of the machine (its load, its clock, what else runs); the ratio
//! of a pair cancels what both feel. The blocks alternate their order (AB, BA, AB, ...), so a
//! drift within a pair (a machine speeding up or slowing down as it goes) falls on either side
//! as often, and its effect on the pairs' median cancels.
//!
//! From the pairs' log ratios `d_i = ln(candidate_i / baseline_i)`:
//! - the change is `exp(median d)`, the candidate's time per baseline time;
//! - its interval is the bootstrap percentile interval of that median: the pairs are resampled
//!   with replacement (a ChaCha8 generator seeded from the case and mode, so the same pairs give
//!   the same interval on every machine), and a resample's median is drawn from its exact
//!   distribution as in [`crate::verdict`]. Pairs that come in groups (the pairs of one pair of
//!   processes) are resampled group by group ([`cluster_bootstrap_median_ci`]);
//! - a two-sided exact sign test asks whether the groups lean one way more often than chance
//!   ([`sign_test`] of the groups' median log ratios; groups with a zero median are left out).
//!   The group, not the pair, is the unit: a process's own memory layout moves all of its pairs
//!   together, so the pairs of one pair of processes are not independent (a copy against
//!   itself read 1.16x, sign-test p = 0.002 over 32 pairs from 8 pairs of processes, and was
//!   not judged when measured again).
//!
//! The verdict, with the threshold `t` (the smallest slowdown that matters), the noise band `e`
//! and the level `alpha`:
//! - **regressed**: the change exceeds `t`, the interval lies above `1 + e`, there are enough
//!   groups for the test to reach alpha ([`min_pairs`]), and p < alpha or the interval lies
//!   above `t` itself;
//! - **improved**: the mirror image (change under `1 / t`, interval under `1 / (1 + e)`, and
//!   p < alpha or the interval under `1 / t`);
//! - **no change**: the interval lies within `[1 / t, t]`: a change that matters, either way, is
//!   ruled out at the confidence level;
//! - **not judged**: too few pairs, or too noisy (the interval admits a slowdown, or a speed-up,
//!   beyond `t` that the groups do not establish). `compare` answers the second by taking more
//!   pairs of processes, up to its limit.
//!
//! A change is then put to fresh pairs of processes ([`confirmation`]): each must lean the same
//! way beyond the noise band on its own, so that the chance of a false alarm is the product of
//! two small ones rather than one.
//!
//! docs/gate.md gives the thresholds' reasons and the measured sensitivity.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::verdict::{ResampledMedian, Verdict, percentile_interval, seed_for};

/// How a paired verdict is reached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairedConfig {
    /// The smallest slowdown (candidate / baseline) that matters (`t`).
    pub max_slowdown: f64,
    /// Relative changes within this band are noise (`e`).
    pub noise_threshold: f64,
    /// Significance level of the sign test (two-sided).
    pub alpha: f64,
    /// Confidence level of the bootstrap interval.
    pub confidence: f64,
    /// Bootstrap resamples per timing.
    pub resamples: usize,
}

impl Default for PairedConfig {
    fn default() -> Self {
        PairedConfig { max_slowdown: 1.10, noise_threshold: 0.02, alpha: 0.01, confidence: 0.95, resamples: 10_000 }
    }
}

/// What the pairs of one mode of one case concluded.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedChange {
    /// Candidate / baseline: exp of the median log ratio (NaN without pairs).
    pub ratio: f64,
    /// Bootstrap interval of the ratio (None: too few pairs to compute one).
    pub ci: Option<(f64, f64)>,
    /// Two-sided sign-test p-value (None: no non-zero pair).
    pub p: Option<f64>,
    /// Pairs judged.
    pub pairs: usize,
    /// Groups (pairs of processes) the pairs came from: the sign test's unit.
    pub groups: usize,
    pub verdict: Verdict,
    /// Why not judged, or the evidence of the verdict, in words.
    pub why: String,
}

impl PairedChange {
    /// `1.250x [1.231, 1.266]`: the ratio and its interval.
    pub fn ratio_text(&self) -> String {
        match self.ci {
            Some((lo, hi)) => format!("{:.3}x [{lo:.3}, {hi:.3}]", self.ratio),
            None if self.ratio.is_finite() => format!("{:.3}x", self.ratio),
            None => "-".into(),
        }
    }
}

/// The median of `xs` (NaN for none): a block's times summarised on either side.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    median_sorted(&sorted)
}

/// The median of a sorted, non-empty slice.
fn median_sorted(s: &[f64]) -> f64 {
    let m = s.len();
    if m % 2 == 1 { s[m / 2] } else { 0.5 * s[m / 2 - 1] + 0.5 * s[m / 2] }
}

/// The bootstrap interval of the median of `d` at `confidence` (`resamples` resamples by a
/// ChaCha8 generator seeded with `seed`); None for an empty `d`.
pub fn bootstrap_median_ci(d: &[f64], resamples: usize, confidence: f64, seed: u64) -> Option<(f64, f64)> {
    if d.is_empty() || resamples == 0 {
        return None;
    }
    let mut sorted = d.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = ResampledMedian::new(&sorted);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let medians: Vec<f64> = (0..resamples).map(|_| median.draw(&mut rng)).collect();
    Some(percentile_interval(medians, confidence))
}

/// The exact two-sided sign test of `d` (zeros left out): whether the pairs lean one way more
/// often than a fair coin would. Returns the number of positive differences and p = the
/// probability, under a fair coin, of a count at least as far from n / 2. None when no
/// difference is non-zero.
///
/// The sign test, not Wilcoxon's signed-rank test: it asks about the median, which is what the
/// change and its interval are, and a few pairs of any size cannot outweigh the rest. Under two
/// busy processes, a 1.25x slowdown measured 1.26x with the interval [1.23, 1.29] over 40 pairs,
/// yet signed-rank p = 0.015: the few pairs a busy machine had disturbed against the candidate
/// were the largest in size, and took the top ranks.
pub fn sign_test(d: &[f64]) -> Option<(usize, f64)> {
    let n = d.iter().filter(|x| **x != 0.0 && !x.is_nan()).count();
    if n == 0 {
        return None;
    }
    let positive = d.iter().filter(|x| **x > 0.0).count();
    let fewer = positive.min(n - positive);
    // P(X <= fewer) for X ~ Binomial(n, 1/2), summed in logs (n may be in the thousands).
    let mut ln_term = -(n as f64) * std::f64::consts::LN_2;
    let mut tail = ln_term.exp();
    for i in 1..=fewer {
        ln_term += ((n - i + 1) as f64).ln() - (i as f64).ln();
        tail += ln_term.exp();
    }
    Some((positive, (2.0 * tail).min(1.0)))
}

/// The fewest pairs whose sign test can reach `alpha` (two-sided): every sign alike gives
/// p = 2 / 2^n.
pub fn min_pairs(alpha: f64) -> usize {
    (1..=64usize).find(|&n| 2.0 / 2f64.powi(n as i32) < alpha).unwrap_or(64)
}

/// The bootstrap interval of the median of `d` when the values come in groups that share more
/// than chance (`group[i]` is the group of `d[i]`: the pairs of one pair of processes): groups
/// are resampled with replacement, then values within each chosen group. A difference between
/// groups then widens the interval as it should, where resampling the values alone would take
/// a few groups' values for many independent ones.
pub fn cluster_bootstrap_median_ci(
    d: &[f64],
    group: &[usize],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<(f64, f64)> {
    if d.is_empty() || resamples == 0 || group.len() != d.len() {
        return None;
    }
    let mut groups: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (x, g) in d.iter().zip(group) {
        groups.entry(*g).or_default().push(*x);
    }
    let groups: Vec<Vec<f64>> = groups.into_values().collect();
    if groups.len() == d.len() {
        return bootstrap_median_ci(d, resamples, confidence, seed);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sample = Vec::with_capacity(d.len());
    let medians: Vec<f64> = (0..resamples)
        .map(|_| {
            sample.clear();
            for _ in 0..groups.len() {
                let g = &groups[rng.random_range(0..groups.len())];
                sample.extend((0..g.len()).map(|_| g[rng.random_range(0..g.len())]));
            }
            sample.sort_by(f64::total_cmp);
            median_sorted(&sample)
        })
        .collect();
    Some(percentile_interval(medians, confidence))
}

/// Judges one mode of one case from its pairs: `baseline[i]` and `candidate[i]` are the i-th
/// pair's times (seconds, positive), each pair its own group. `case_id` and `mode` seed the
/// bootstrap.
pub fn judge_pairs(case_id: &str, mode: &str, baseline: &[f64], candidate: &[f64], cfg: &PairedConfig) -> PairedChange {
    let group: Vec<usize> = (0..baseline.len()).collect();
    judge_grouped_pairs(case_id, mode, baseline, candidate, &group, cfg)
}

/// [`judge_pairs`] for pairs that come in groups (`group[i]`: the pair of processes that
/// measured pair i): the interval is the groups' bootstrap ([`cluster_bootstrap_median_ci`]).
pub fn judge_grouped_pairs(
    case_id: &str,
    mode: &str,
    baseline: &[f64],
    candidate: &[f64],
    group: &[usize],
    cfg: &PairedConfig,
) -> PairedChange {
    let (d, group) = log_ratios(baseline, candidate, group);
    let pairs = d.len();
    let medians = group_medians(&d, &group);
    let groups = medians.len();
    let mut change = PairedChange {
        ratio: f64::NAN,
        ci: None,
        p: None,
        pairs,
        groups,
        verdict: Verdict::NotJudged,
        why: String::new(),
    };
    if pairs == 0 {
        change.why = "no pair of positive times".into();
        return change;
    }
    let mut sorted = d.clone();
    sorted.sort_by(f64::total_cmp);
    change.ratio = median_sorted(&sorted).exp();
    let needed = min_pairs(cfg.alpha);
    if pairs < needed {
        change.why = format!("{pairs} pair(s): the sign test cannot reach p < {} (needs {needed})", cfg.alpha);
        return change;
    }
    let (lo, hi) = cluster_bootstrap_median_ci(&d, &group, cfg.resamples, cfg.confidence, seed_for(case_id, mode))
        .map(|(lo, hi)| (lo.exp(), hi.exp()))
        .expect("pairs present");
    change.ci = Some((lo, hi));
    let p = sign_test(&medians).map_or(1.0, |(_, p)| p);
    change.p = Some(p);
    let (t, e) = (cfg.max_slowdown, 1.0 + cfg.noise_threshold);
    let unit = if groups == pairs { "pairs".to_string() } else { format!("pairs of processes ({pairs} pairs)") };
    let evidence = format!(
        "{:.0}% CI [{lo:.3}, {hi:.3}] of the median pair ratio, sign-test p = {p:.2e} over {groups} {unit}",
        cfg.confidence * 100.0
    );
    let r = change.ratio;
    // A change is established by the sign test, or by an interval that lies beyond `t` itself
    // (a copy against itself would need its interval's far side past 1.1x: under two busy
    // processes, of 96 such intervals none was). The second takes what the test, counting
    // signs, leaves: a 1.25x tool read [1.11, 1.27] over 40 pairs with 13 of them disturbed the
    // wrong way, sign-test p = 0.017. Either needs as many groups as the test needs to reach
    // alpha: a bootstrap over a handful of groups is too narrow to stand alone.
    let enough = groups >= needed;
    let slower = enough && (lo > t || p < cfg.alpha);
    let faster = enough && (hi < 1.0 / t || p < cfg.alpha);
    (change.verdict, change.why) = if r > t && lo > e && slower {
        (Verdict::Regressed, format!("{r:.3}x slower than the baseline, beyond {t}x: {evidence}"))
    } else if r < 1.0 / t && hi < 1.0 / e && faster {
        (Verdict::Improved, format!("{:.3}x faster than the baseline, beyond {t}x: {evidence}", 1.0 / r))
    } else if hi <= t && lo >= 1.0 / t {
        (Verdict::NoChange, format!("a change beyond {t}x either way is ruled out: {evidence}"))
    } else if hi <= t {
        // Faster, but not surely beyond the threshold: a speed-up the pairs do not establish.
        (
            Verdict::NotJudged,
            format!(
                "too noisy: the interval admits a speed-up beyond {t}x that the {unit} do not establish: {evidence}"
            ),
        )
    } else {
        (
            Verdict::NotJudged,
            format!(
                "too noisy: the interval admits a slowdown beyond {t}x that the {unit} do not establish: {evidence}"
            ),
        )
    };
    change
}

/// The pairs' log ratios `ln(candidate / baseline)` with their groups, pairs without two
/// positive finite times left out.
fn log_ratios(baseline: &[f64], candidate: &[f64], group: &[usize]) -> (Vec<f64>, Vec<usize>) {
    baseline
        .iter()
        .zip(candidate)
        .zip(group)
        .filter(|((b, c), _)| **b > 0.0 && **c > 0.0 && b.is_finite() && c.is_finite())
        .map(|((b, c), g)| ((c / b).ln(), *g))
        .unzip()
}

/// The median log ratio of each group, in the order of the groups' numbers.
fn group_medians(d: &[f64], group: &[usize]) -> Vec<f64> {
    let mut groups: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (x, g) in d.iter().zip(group) {
        groups.entry(*g).or_default().push(*x);
    }
    groups
        .into_values()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            median_sorted(&v)
        })
        .collect()
}

/// Whether fresh groups confirm a change that [`judge_grouped_pairs`] found: `direction` is
/// [`Verdict::Regressed`] or [`Verdict::Improved`], the times and groups those of the fresh pairs
/// of processes only. Every fresh group's median ratio must lie beyond the noise band in that
/// direction. `Ok` and `Err` both say what the fresh groups read.
///
/// Why fresh groups, each on its own: the first verdict is reached by testing many timings at
/// alpha, so a suite of hundreds of timings expects a few false alarms from it alone; a copy
/// against itself then passes four fresh groups all leaning one way beyond the band less than
/// once in 16 times. A real change of 1.15x moves every group beyond 1.02 unless a group is
/// more than 11% below it by itself.
pub fn confirmation(
    baseline: &[f64],
    candidate: &[f64],
    group: &[usize],
    direction: Verdict,
    cfg: &PairedConfig,
) -> Result<String, String> {
    let (d, group) = log_ratios(baseline, candidate, group);
    let ratios: Vec<f64> = group_medians(&d, &group).into_iter().map(f64::exp).collect();
    let e = 1.0 + cfg.noise_threshold;
    let beyond = |r: &f64| match direction {
        Verdict::Regressed => *r > e,
        Verdict::Improved => *r < 1.0 / e,
        _ => false,
    };
    let agree = ratios.iter().filter(|r| beyond(r)).count();
    let list = ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(", ");
    let text = format!("{agree} of {} fresh pairs of processes beyond {e}x that way ({list})", ratios.len());
    if !ratios.is_empty() && agree == ratios.len() { Ok(text) } else { Err(text) }
}

/// One mode of one case, compared: a line of `--json` and of the history's paired file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PairedRow {
    pub case_id: String,
    pub workload: String,
    pub tool: String,
    pub dtype: String,
    pub rule: String,
    pub mode: String,
    /// `regressed`, `improved`, `no change` or `not judged`.
    pub verdict: String,
    /// Candidate / baseline (absent where no pair was taken).
    pub ratio: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// Two-sided sign-test p-value.
    pub p: Option<f64>,
    pub pairs: usize,
    /// Pairs of processes (fresh processes of both sides) the pairs came from.
    pub processes: usize,
    pub runs_per_block: u64,
    /// Medians of the sides' block times, in seconds.
    pub baseline_s: Option<f64>,
    pub candidate_s: Option<f64>,
    pub why: String,
    /// Every pair's block times (seconds; the baseline's, the candidate's) and the pair of
    /// processes that took it, so that a verdict can be audited or judged again by another rule.
    /// Empty in files of schema 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_blocks: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_blocks: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_process: Vec<usize>,
}

/// The first line of a paired file: what was compared, where and when.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PairedHeader {
    /// `adgauge-paired 2` (`adgauge-paired 1` is still read).
    pub schema: String,
    pub id: String,
    pub timestamp: String,
    pub baseline: String,
    pub candidate: String,
    pub suite: String,
    pub machine: String,
    pub cpu_model: String,
    pub cores: usize,
    /// The 1-minute load average at the start and the end (Linux; None elsewhere).
    pub load_start: Option<f64>,
    pub load_end: Option<f64>,
    pub max_slowdown: f64,
    pub alpha: f64,
    pub confidence: f64,
    pub wall_s: f64,
    /// Whether every selected case was compared (false: interrupted; the rows are those done).
    pub complete: bool,
}

/// The schema tag of a paired file's header.
pub const PAIRED_SCHEMA: &str = "adgauge-paired 2";

/// Older schema tags this build still reads (version 1 rows have no block times).
const PAIRED_SCHEMAS_READ: [&str; 2] = ["adgauge-paired 1", PAIRED_SCHEMA];

/// The file suffix of paired verdicts in a history directory.
pub const PAIRED_SUFFIX: &str = ".paired.jsonl";

/// Writes a paired file (`<header id>.paired.jsonl`) into `dir`: the header, then one row a
/// line. Written whole and renamed, so a reader never sees half a file.
pub fn write_paired(dir: &Path, header: &PairedHeader, rows: &[PairedRow]) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let path = dir.join(format!("{}{PAIRED_SUFFIX}", header.id));
    let mut text = json_line(header)?;
    for r in rows {
        text.push_str(&json_line(r)?);
    }
    let tmp = dir.join(format!(".{}{PAIRED_SUFFIX}.tmp", header.id));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: cannot write: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
    Ok(path)
}

/// One JSON line of `v`.
fn json_line<T: Serialize>(v: &T) -> Result<String, String> {
    let mut line = serde_json::to_string(v).map_err(|e| format!("cannot write a paired line: {e}"))?;
    line.push('\n');
    Ok(line)
}

/// Reads a paired file: its header and rows; errors name the file and line.
pub fn read_paired(path: &Path) -> Result<(PairedHeader, Vec<PairedRow>), String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().ok_or_else(|| format!("{name}: empty"))?;
    let header: PairedHeader =
        serde_json::from_str(first).map_err(|e| format!("{name}:1: not a paired header: {e}"))?;
    if !PAIRED_SCHEMAS_READ.contains(&header.schema.as_str()) {
        return Err(format!("{name}:1: schema '{}' (this build reads '{PAIRED_SCHEMA}')", header.schema));
    }
    let rows = lines
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{name}:{}: not a paired row: {e}", i + 1)))
        .collect::<Result<Vec<PairedRow>, String>>()?;
    Ok((header, rows))
}

/// The newest paired file of a history directory (ids sort by time), if any.
pub fn newest_paired(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(PAIRED_SUFFIX) && !n.starts_with('.'))
        })
        .collect();
    files.sort();
    files.pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_test_counts_signs_exactly_and_ignores_sizes() {
        // n = 10, all positive: p = 2 / 1024.
        let all: Vec<f64> = (1..=10).map(|i| i as f64).collect();
        let (k, p) = sign_test(&all).unwrap();
        assert_eq!(k, 10);
        assert!((p - 2.0 / 1024.0).abs() < 1e-15, "{p}");
        // Two negative of 10: P(X <= 2) = (1 + 10 + 45) / 1024, two-sided 112 / 1024, whatever
        // the negative ones' sizes.
        for size in [1.0, 1e6] {
            let mixed: Vec<f64> = (1..=10).map(|i| if i <= 2 { -size } else { i as f64 }).collect();
            let (k, p) = sign_test(&mixed).unwrap();
            assert_eq!(k, 8);
            assert!((p - 112.0 / 1024.0).abs() < 1e-12, "{p}");
        }
        // Balanced signs: p = 1.
        let (_, p) = sign_test(&[1.0, -2.0, -3.0, 4.0]).unwrap();
        assert!((p - 1.0).abs() < 1e-12, "{p}");
        // Zeros are left out; nothing left: no test.
        assert!(sign_test(&[0.0, 0.0]).is_none());
        assert_eq!(sign_test(&[0.0, 3.0]).unwrap(), (1, 1.0));
        // 40 pairs, 32 positive: P(X <= 8) for Binomial(40, 1/2) is 9.1083e-5 (the sum of
        // C(40, i) for i <= 8 over 2^40), p = 1.8217e-4.
        let lean: Vec<f64> = (0..40).map(|i| if i < 32 { 0.2 } else { -5.0 }).collect();
        let (_, p) = sign_test(&lean).unwrap();
        assert!((p - 1.821_66e-4).abs() < 1e-8, "{p}");
        // Thousands of pairs do not underflow: 3000 pairs, half and half.
        let half: Vec<f64> = (0..3000).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 }).collect();
        let (_, p) = sign_test(&half).unwrap();
        assert!((p - 1.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn paired_files_read_back_and_name_their_faults() {
        let dir = std::env::temp_dir().join(format!("adgauge-paired-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let header = PairedHeader {
            schema: PAIRED_SCHEMA.into(),
            id: "20261128T000000Z-1-00000001".into(),
            timestamp: "2026-11-28T00:00:00Z".into(),
            baseline: "bin:/a".into(),
            candidate: "bin:/b".into(),
            suite: "quick".into(),
            machine: "m".into(),
            cpu_model: "c".into(),
            cores: 2,
            load_start: Some(1.5),
            load_end: None,
            max_slowdown: 1.1,
            alpha: 0.01,
            confidence: 0.95,
            wall_s: 3.0,
            complete: true,
        };
        let row = PairedRow {
            case_id: "hist-add[k=10]/cpu/f32/auto".into(),
            workload: "hist-add".into(),
            tool: "cpu".into(),
            dtype: "f32".into(),
            rule: "auto".into(),
            mode: "vjp".into(),
            verdict: "regressed".into(),
            ratio: Some(1.25),
            ci_low: Some(1.2),
            ci_high: Some(1.3),
            p: Some(3e-5),
            pairs: 16,
            processes: 4,
            runs_per_block: 100,
            baseline_s: Some(1e-3),
            candidate_s: Some(1.25e-3),
            why: "slower".into(),
            baseline_blocks: vec![1e-3, 1.1e-3],
            candidate_blocks: vec![1.25e-3, 1.3e-3],
            block_process: vec![0, 1],
        };
        let path = write_paired(&dir, &header, std::slice::from_ref(&row)).unwrap();
        assert_eq!(path.file_name().unwrap(), "20261128T000000Z-1-00000001.paired.jsonl");
        assert_eq!(read_paired(&path).unwrap(), (header.clone(), vec![row.clone()]));
        // A file of schema 1 has no block times and still reads.
        let old = dir.join("old.paired.jsonl");
        let mut v1 = serde_json::to_value(&row).unwrap();
        for field in ["baseline_blocks", "candidate_blocks", "block_process"] {
            v1.as_object_mut().unwrap().remove(field);
        }
        let h1 = PairedHeader { schema: "adgauge-paired 1".into(), ..header.clone() };
        std::fs::write(&old, format!("{}\n{v1}\n", serde_json::to_string(&h1).unwrap())).unwrap();
        let (_, rows) = read_paired(&old).unwrap();
        assert!(rows[0].baseline_blocks.is_empty() && rows[0].verdict == "regressed");
        std::fs::remove_file(&old).unwrap();
        assert_eq!(newest_paired(&dir), Some(path.clone()));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}{{\"case_id\": 3}}\n")).unwrap();
        let e = read_paired(&path).unwrap_err();
        assert!(
            e.ends_with(
                ".paired.jsonl:3: not a paired row: invalid type: integer `3`, expected a string at line 1 column 13"
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn min_pairs_is_where_the_test_can_reach_alpha() {
        // 2 / 2^8 = 0.0078 < 0.01; 2 / 2^7 = 0.0156 is not.
        assert_eq!(min_pairs(0.01), 8);
        assert_eq!(min_pairs(0.05), 6);
    }

    fn pairs(seed: u64, n: usize, factor: f64, spread: f64) -> (Vec<f64>, Vec<f64>) {
        // Each pair shares a machine state (a load factor up to 3x); within a pair each side
        // has its own small jitter.
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut b, mut c) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let state = 1.0 + 2.0 * rng.random::<f64>();
            b.push(1e-3 * state * (1.0 + spread * (rng.random::<f64>() - 0.5)));
            c.push(1e-3 * factor * state * (1.0 + spread * (rng.random::<f64>() - 0.5)));
        }
        (b, c)
    }

    #[test]
    fn pairs_see_through_a_shared_load() {
        let cfg = PairedConfig::default();
        // 25% slower under a load that moves both sides by up to 3x: regressed.
        let (b, c) = pairs(1, 16, 1.25, 0.04);
        let slower = judge_pairs("case", "vjp", &b, &c, &cfg);
        assert_eq!(slower.verdict, Verdict::Regressed, "{slower:?}");
        assert!((slower.ratio - 1.25).abs() < 0.03, "{slower:?}");
        let (lo, hi) = slower.ci.unwrap();
        assert!(lo > 1.2 && hi < 1.3, "{slower:?}");
        // Swapped: improved.
        let faster = judge_pairs("case", "vjp", &c, &b, &cfg);
        assert_eq!(faster.verdict, Verdict::Improved, "{faster:?}");
        // The same code on both sides: no change.
        let (b, c) = pairs(2, 16, 1.0, 0.04);
        let same = judge_pairs("case", "vjp", &b, &c, &cfg);
        assert_eq!(same.verdict, Verdict::NoChange, "{same:?}");
        // Unpaired, the same samples would tell nothing: each side spans the load's 3x.
        let spread = |s: &[f64]| s.iter().cloned().fold(0.0, f64::max) / s.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread(&b) > 2.0, "{b:?}");
    }

    #[test]
    fn too_few_or_too_noisy_pairs_are_not_judged() {
        let cfg = PairedConfig::default();
        let (b, c) = pairs(3, 7, 2.0, 0.01);
        let few = judge_pairs("case", "primal", &b, &c, &cfg);
        assert_eq!(few.verdict, Verdict::NotJudged);
        assert!(few.why.contains("7 pair(s)") && few.why.contains("needs 8"), "{}", few.why);
        assert!((few.ratio - 2.0).abs() < 0.02, "{few:?}");
        // Pairs that disagree by +-40%: the interval reaches past 1.10 without a finding.
        let (b, c) = pairs(4, 10, 1.0, 0.8);
        let noisy = judge_pairs("case", "primal", &b, &c, &cfg);
        assert_eq!(noisy.verdict, Verdict::NotJudged, "{noisy:?}");
        assert!(noisy.why.starts_with("too noisy"), "{}", noisy.why);
        // Faster by 0.6x in half the pairs, unchanged in the others: not "no change".
        let b = vec![1e-3; 12];
        let c: Vec<f64> = (0..12).map(|i| if i % 2 == 0 { 0.6e-3 } else { 1.0e-3 * (1.0 + 1e-3 * i as f64) }).collect();
        let faster = judge_pairs("case", "primal", &b, &c, &cfg);
        assert_eq!(faster.verdict, Verdict::NotJudged, "{faster:?}");
        assert!(faster.why.contains("a speed-up beyond 1.1x"), "{}", faster.why);
        // Non-positive or non-finite times are no pair.
        let none = judge_pairs("case", "primal", &[0.0, f64::NAN], &[1.0, 1.0], &cfg);
        assert_eq!(none.pairs, 0);
        assert_eq!(none.verdict, Verdict::NotJudged);
    }

    #[test]
    fn an_interval_beyond_the_threshold_is_a_change_whatever_the_signs_of_the_disturbed_pairs() {
        let cfg = PairedConfig::default();
        // 40 pairs: 28 at 1.25x (within 1%), 12 a busy machine disturbed against the candidate
        // (0.5x): the sign test's p is 0.017, but the median's interval lies above 1.1.
        let b = vec![1e-3; 40];
        let c: Vec<f64> =
            (0..40).map(|i| if i % 3 == 0 && i < 36 { 0.5e-3 } else { 1.25e-3 * (1.0 + 1e-4 * i as f64) }).collect();
        let (_, p) = sign_test(&b.iter().zip(&c).map(|(b, c)| (c / b).ln()).collect::<Vec<_>>()).unwrap();
        assert!(p > cfg.alpha, "{p}");
        let slower = judge_pairs("case", "primal", &b, &c, &cfg);
        assert!(slower.ci.unwrap().0 > 1.1, "{slower:?}");
        assert_eq!(slower.verdict, Verdict::Regressed, "{slower:?}");
        // The mirror image: improved.
        let faster = judge_pairs("case", "primal", &c, &b, &cfg);
        assert_eq!(faster.verdict, Verdict::Improved, "{faster:?}");
        // Without a majority beyond the threshold the interval does not lie past it: 20 of 40.
        let half: Vec<f64> = (0..40).map(|i| if i % 2 == 0 { 0.5e-3 } else { 1.25e-3 }).collect();
        assert_eq!(judge_pairs("case", "primal", &b, &half, &cfg).verdict, Verdict::NotJudged);
    }

    #[test]
    fn groups_that_disagree_widen_the_interval() {
        let cfg = PairedConfig::default();
        // Four pairs of processes, four pairs each: within a group the pairs agree to 1%, but
        // the groups sit at 0.9, 1.0, 1.05 and 1.2 (a process's own layout, not the code).
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let (mut b, mut c, mut g) = (Vec::new(), Vec::new(), Vec::new());
        for (i, level) in [0.9, 1.0, 1.05, 1.2].into_iter().enumerate() {
            for _ in 0..4 {
                b.push(1e-3);
                c.push(1e-3 * level * (1.0 + 0.01 * (rng.random::<f64>() - 0.5)));
                g.push(i);
            }
        }
        let alone = judge_pairs("case", "vjp", &b, &c, &cfg);
        let grouped = judge_grouped_pairs("case", "vjp", &b, &c, &g, &cfg);
        let width = |ch: &PairedChange| ch.ci.unwrap().1 - ch.ci.unwrap().0;
        assert!(width(&grouped) > 1.5 * width(&alone), "{alone:?} {grouped:?}");
        // The groups' spread reaches past 1.10: not a finding, and not "no change" either.
        assert!(grouped.ci.unwrap().1 > 1.1, "{grouped:?}");
        assert_eq!(grouped.verdict, Verdict::NotJudged, "{grouped:?}");
        // Four groups that agree on 1.25x are not yet a regression: four signs alike give
        // p = 0.125. Eight are.
        let agreeing = |groups: usize, rng: &mut ChaCha8Rng| {
            let (mut b, mut c, mut g) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..groups {
                for _ in 0..4 {
                    b.push(1e-3);
                    c.push(1.25e-3 * (1.0 + 0.02 * (rng.random::<f64>() - 0.5)));
                    g.push(i);
                }
            }
            judge_grouped_pairs("case", "vjp", &b, &c, &g, &cfg)
        };
        let four = agreeing(4, &mut rng);
        assert_eq!(four.verdict, Verdict::NotJudged, "{four:?}");
        assert_eq!((four.groups, four.pairs), (4, 16));
        assert!(four.why.contains("that the pairs of processes (16 pairs) do not establish"), "{}", four.why);
        assert!((four.p.unwrap() - 0.125).abs() < 1e-12, "{four:?}");
        let eight = agreeing(8, &mut rng);
        assert_eq!(eight.verdict, Verdict::Regressed, "{eight:?}");
        assert!((eight.p.unwrap() - 2.0 / 256.0).abs() < 1e-12, "{eight:?}");
    }

    #[test]
    fn pairs_of_one_pair_of_processes_count_once_in_the_test() {
        let cfg = PairedConfig::default();
        // A copy against itself, as measured: eight pairs of processes of four pairs each; each
        // pair of processes sits where its two layouts put it (here 1.15-1.3x in six, 0.95-0.97x
        // in two), its pairs within 1% of that.
        let levels = [1.18, 1.2, 0.95, 1.15, 1.25, 0.97, 1.16, 1.3];
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (mut b, mut c, mut g) = (Vec::new(), Vec::new(), Vec::new());
        for (i, level) in levels.into_iter().enumerate() {
            for _ in 0..4 {
                b.push(1e-3);
                c.push(1e-3 * level * (1.0 + 0.01 * (rng.random::<f64>() - 0.5)));
                g.push(i);
            }
        }
        // Counted pair by pair the signs are 24 to 8, p = 0.007: a regression at alpha 0.01.
        let d: Vec<f64> = b.iter().zip(&c).map(|(b, c)| (c / b).ln()).collect();
        let (positive, p_pairs) = sign_test(&d).unwrap();
        assert_eq!(positive, 24);
        assert!(p_pairs < cfg.alpha, "{p_pairs}");
        // Counted by pair of processes they are 6 to 2, p = 0.29: not established.
        let change = judge_grouped_pairs("case", "vjp", &b, &c, &g, &cfg);
        assert!(change.ratio > cfg.max_slowdown, "{change:?}");
        assert_eq!(change.groups, 8);
        assert!((change.p.unwrap() - 2.0 * 37.0 / 256.0).abs() < 1e-12, "{change:?}");
        assert_eq!(change.verdict, Verdict::NotJudged, "{change:?}");
        assert!(change.why.starts_with("too noisy: the interval admits a slowdown"), "{}", change.why);
    }

    #[test]
    fn a_change_stands_only_where_every_fresh_pair_of_processes_leans_its_way() {
        let cfg = PairedConfig::default();
        let b = vec![1e-3; 8];
        let g = [0, 0, 1, 1, 2, 2, 3, 3];
        // Four fresh pairs of processes at 1.2x: confirmed, with what they read.
        let c = vec![1.2e-3; 8];
        let ok = confirmation(&b, &c, &g, Verdict::Regressed, &cfg).unwrap();
        assert_eq!(ok, "4 of 4 fresh pairs of processes beyond 1.02x that way (1.200, 1.200, 1.200, 1.200)");
        // The same is no confirmation of an improvement.
        assert!(confirmation(&b, &c, &g, Verdict::Improved, &cfg).unwrap_err().starts_with("0 of 4"));
        // One pair of processes within the noise band (1.01x) withholds it.
        let mut c = c;
        c[6] = 1.01e-3;
        c[7] = 1.01e-3;
        let e = confirmation(&b, &c, &g, Verdict::Regressed, &cfg).unwrap_err();
        assert!(e.starts_with("3 of 4 fresh") && e.ends_with("1.010)"), "{e}");
        // Improvements mirror it; nothing confirms from no pair.
        let fast = vec![0.8e-3; 8];
        assert!(confirmation(&b, &fast, &g, Verdict::Improved, &cfg).is_ok());
        assert!(confirmation(&[], &[], &[], Verdict::Regressed, &cfg).is_err());
    }

    #[test]
    fn the_interval_is_seeded_and_holds_the_change() {
        let cfg = PairedConfig::default();
        let (b, c) = pairs(5, 12, 1.05, 0.1);
        let one = judge_pairs("case", "vjp", &b, &c, &cfg);
        assert_eq!(one, judge_pairs("case", "vjp", &b, &c, &cfg));
        let (lo, hi) = one.ci.unwrap();
        assert!(lo <= one.ratio && one.ratio <= hi, "{one:?}");
        // The interval's ends are medians of resamples: within the pairs' smallest and largest.
        let ratios: Vec<f64> = b.iter().zip(&c).map(|(b, c)| c / b).collect();
        let (min, max) = (ratios.iter().cloned().fold(f64::MAX, f64::min), ratios.iter().cloned().fold(0.0, f64::max));
        assert!(lo >= min * (1.0 - 1e-12) && hi <= max * (1.0 + 1e-12), "{one:?} {ratios:?}");
    }
}

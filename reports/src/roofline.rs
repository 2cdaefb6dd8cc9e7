//! The histogram roofline of a run: what `adgauge run` measured of the CPU (sequential read
//! bandwidth on all the run's threads, and random 4-byte read and update rates in working sets
//! of k bins), kept in the run's information ([`RunInfo::roofline`](crate::RunInfo)), and how
//! close a histogram's primal came to it.
//!
//! A histogram primal reads n indices and n values in sequence, reads the k bins of `dest` and
//! writes k results: [`primal_bytes`] is that traffic, [`achieved_gb_s`] the traffic over the
//! primal's median time, and [`fraction`] that rate over the run's measured sequential read
//! rate. The fraction needs the run's roofline and a row of a tool that computes on the CPU
//! threads that measured it (adgauge's CPU devices share the run's thread pool; another tool's
//! device, a GPU or a tool process with threads of its own, has another roofline): elsewhere it
//! is absent, never a guess. Rows of files older than the index dtype column (all of which had
//! 8-byte indices, the only index dtype adgauge's engine had then) count 8 bytes per index.

use serde::{Deserialize, Serialize};

use crate::schema::ResultRow;

/// Random access rates at one working set of `bins` 4-byte bins, all threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomRate {
    pub bins: usize,
    /// Random 4-byte reads per second.
    #[serde(with = "crate::real::number")]
    pub reads_per_s: f64,
    /// Random 4-byte read-modify-writes (`bin += 1`, each thread on its own table) per second.
    #[serde(with = "crate::real::number")]
    pub updates_per_s: f64,
}

/// The CPU roofline a run measured before its cases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// Threads that measured it: the run's CPU device's.
    pub threads: usize,
    /// Sequential read bandwidth, GB/s (10^9 bytes per second).
    #[serde(with = "crate::real::number")]
    pub seq_read_gb_s: f64,
    /// One entry per bin count measured (the k of the run's histogram cases), ascending.
    pub random: Vec<RandomRate>,
    /// The run's tools that compute on the measured threads: their histogram rows get a
    /// [`fraction`].
    pub tools: Vec<String>,
}

/// Whether a row's workload is a histogram (`hist-<op>`): the rows that get a bandwidth, and
/// the cases for which `adgauge run` measures the roofline.
pub fn is_histogram_workload(workload: &str) -> bool {
    workload.starts_with("hist-")
}

/// Whether a row is a histogram's ([`is_histogram_workload`]).
pub fn is_histogram(row: &ResultRow) -> bool {
    is_histogram_workload(&row.workload)
}

/// Bytes of one value of `dtype` (`f32`, `f64`).
fn value_bytes(dtype: &str) -> Option<u64> {
    match dtype {
        "f32" => Some(4),
        "f64" => Some(8),
        _ => None,
    }
}

/// Bytes of one index: the row's `index_dtype` (`i32`, `i64`); rows without the column (files
/// from before it) had i64 indices.
fn index_bytes(row: &ResultRow) -> Option<u64> {
    match row.params.get("index_dtype").map(String::as_str) {
        Some("i32") => Some(4),
        Some("i64") | None => Some(8),
        Some(_) => None,
    }
}

/// The bytes a histogram primal must move: n x (index bytes + value bytes) read in sequence,
/// plus 2 x k x value bytes (`dest` read, the result written). None for a row that is not a
/// histogram's or lacks n, k or a known dtype.
pub fn primal_bytes(row: &ResultRow) -> Option<u64> {
    if !is_histogram(row) {
        return None;
    }
    let size = |key: &str| row.params.get(key)?.parse::<u64>().ok();
    let (n, k) = (size("n")?, size("k")?);
    let value = value_bytes(&row.dtype)?;
    n.checked_mul(index_bytes(row)? + value)?.checked_add(k.checked_mul(2 * value)?)
}

/// The primal's achieved bandwidth, GB/s: [`primal_bytes`] over the primal's median time.
pub fn achieved_gb_s(row: &ResultRow) -> Option<f64> {
    let median = row.primal.as_ref()?.median_s;
    let rate = primal_bytes(row)? as f64 / median / 1e9;
    (median > 0.0 && rate.is_finite()).then_some(rate)
}

/// The run's roofline where it applies to the row: measured (a sequential rate) on the threads
/// the row's tool computes on.
fn applying<'a>(row: &ResultRow, roofline: Option<&'a Roofline>) -> Option<&'a Roofline> {
    roofline.filter(|r| r.tools.contains(&row.backend) && r.seq_read_gb_s > 0.0)
}

/// The primal's achieved bandwidth over the run's measured sequential read bandwidth, where the
/// run measured one and the row's tool computes on the threads that measured it.
pub fn fraction(row: &ResultRow, roofline: Option<&Roofline>) -> Option<f64> {
    let roofline = applying(row, roofline)?;
    Some(achieved_gb_s(row)? / roofline.seq_read_gb_s)
}

/// The in-range elements of a histogram primal, each a random update of its bin: n x (1 - the
/// row's out-of-range fraction `oob`; 0 where the row has none).
fn primal_updates(row: &ResultRow) -> Option<f64> {
    let n: f64 = row.params.get("n")?.parse().ok()?;
    let oob: f64 = row.params.get("oob").map_or(Some(0.0), |s| s.parse().ok())?;
    (0.0..=1.0).contains(&oob).then_some(n * (1.0 - oob))
}

/// How close the primal came to the slower of the run's two ceilings: the time that ceiling
/// allows over the primal's median. The primal needs at least [`primal_bytes`] at the sequential
/// read rate, and at least its in-range updates at the random update rate the run measured at
/// the row's k; whichever takes longer binds. Absent where [`fraction`] is, or where the run
/// measured no update rate at this k. Above 1 where the code beats a measured rate: at k = 10
/// the CPU folds into interleaved sub-histograms, while the measurement updates one table per
/// thread, whose hot bins chain each update on the last.
pub fn bound_fraction(row: &ResultRow, roofline: Option<&Roofline>) -> Option<f64> {
    let roofline = applying(row, roofline)?;
    let k: usize = row.params.get("k")?.parse().ok()?;
    let rate = roofline.random.iter().find(|r| r.bins == k).map(|r| r.updates_per_s).filter(|r| *r > 0.0)?;
    let median = row.primal.as_ref()?.median_s;
    let by_bytes = primal_bytes(row)? as f64 / (roofline.seq_read_gb_s * 1e9);
    let by_updates = primal_updates(row)? / rate;
    let f = by_bytes.max(by_updates) / median;
    (median > 0.0 && f.is_finite()).then_some(f)
}

/// The largest fraction of a ceiling printed as it is. Beyond it the case ran faster than the
/// probe says the machine can (its data stayed in a cache the probe's did not, or the probe was
/// disturbed): the number says more about the probe than about the case, and is flagged.
pub const PLAUSIBLE_FRACTION: f64 = 1.5;

/// A fraction of a ceiling as a table shows it: `85%`, or `implausible (>150%)` beyond
/// [`PLAUSIBLE_FRACTION`].
pub fn percent(f: f64) -> String {
    if f > PLAUSIBLE_FRACTION {
        format!("implausible (>{:.0}%)", PLAUSIBLE_FRACTION * 100.0)
    } else {
        format!("{:.0}%", f * 100.0)
    }
}

/// The `roofline` cell of tables: `11.0 GB/s 32%` (the fraction of the sequential read rate),
/// followed by `, bound 85%` ([`bound_fraction`]) where the run measured the update rate at
/// the row's k; `11.0 GB/s -` without a fraction, `-` for a row without an achieved bandwidth.
/// Fractions beyond [`PLAUSIBLE_FRACTION`] read `implausible` ([`percent`]).
pub fn cell(row: &ResultRow, roofline: Option<&Roofline>) -> String {
    match achieved_gb_s(row) {
        None => "-".into(),
        Some(gb_s) => {
            let part = fraction(row, roofline).map(percent).unwrap_or_else(|| "-".into());
            match bound_fraction(row, roofline) {
                Some(b) => format!("{gb_s:.1} GB/s {part}, bound {}", percent(b)),
                None => format!("{gb_s:.1} GB/s {part}"),
            }
        }
    }
}

/// The lower middle of `xs` (the median of an odd count): one odd measurement among the parts
/// moves it no further than the next one.
fn lower_median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[(xs.len() - 1) / 2]
}

/// The roofline of runs merged into one (`adgauge merge`, for shards of a suite on one machine):
/// each rate is the lower median of the parts that measured it (per bin count for the random
/// rates, bin counts ascending), and the tools are every part's. None without a part that
/// measured one, or where the parts measured on different numbers of threads: their rates are
/// then not of one machine's configuration, and no row gets a fraction rather than a wrong one.
pub fn merged(parts: &[Roofline]) -> Option<Roofline> {
    let threads = parts.first()?.threads;
    if parts.iter().any(|p| p.threads != threads) {
        return None;
    }
    let mut bins: Vec<usize> = parts.iter().flat_map(|p| p.random.iter().map(|r| r.bins)).collect();
    bins.sort_unstable();
    bins.dedup();
    let random = bins
        .into_iter()
        .map(|bins| {
            let at: Vec<&RandomRate> = parts.iter().flat_map(|p| p.random.iter().filter(|r| r.bins == bins)).collect();
            RandomRate {
                bins,
                reads_per_s: lower_median(at.iter().map(|r| r.reads_per_s).collect()),
                updates_per_s: lower_median(at.iter().map(|r| r.updates_per_s).collect()),
            }
        })
        .collect();
    let mut tools: Vec<String> = Vec::new();
    for t in parts.iter().flat_map(|p| &p.tools) {
        if !tools.contains(t) {
            tools.push(t.clone());
        }
    }
    Some(Roofline {
        threads,
        seq_read_gb_s: lower_median(parts.iter().map(|p| p.seq_read_gb_s).collect()),
        random,
        tools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Timing;

    fn hist(dtype: &str, index: Option<&str>, n: u64, k: u64, primal_s: Option<f64>) -> ResultRow {
        let mut params: std::collections::BTreeMap<String, String> =
            [("n", n.to_string()), ("k", k.to_string())].into_iter().map(|(a, b)| (a.to_string(), b)).collect();
        if let Some(t) = index {
            params.insert("index_dtype".into(), t.into());
        }
        let mut r = ResultRow::unmeasured("hist-add", params, "cpu", dtype, "auto", 2, 1);
        r.primal = primal_s.map(|s| Timing {
            min_s: s,
            median_s: s,
            max_s: s,
            batch: 1,
            samples: 3,
            cv: 0.0,
            sample_s: vec![],
        });
        r
    }

    fn roofline(seq_read_gb_s: f64, tools: &[&str]) -> Roofline {
        Roofline { threads: 2, seq_read_gb_s, random: vec![], tools: tools.iter().map(|t| t.to_string()).collect() }
    }

    #[test]
    fn primal_bytes_count_indices_values_and_both_passes_over_the_bins() {
        // 10^7 x (4 + 4) + 2 x 1000 x 4 = 80 008 000 bytes.
        assert_eq!(primal_bytes(&hist("f32", Some("i32"), 10_000_000, 1000, None)), Some(80_008_000));
        // 10^7 x (8 + 8) + 2 x 1000 x 8 = 160 016 000 bytes.
        assert_eq!(primal_bytes(&hist("f64", Some("i64"), 10_000_000, 1000, None)), Some(160_016_000));
        // i32 with f64: 10^6 x 12 + 2 x 10^6 x 8.
        assert_eq!(primal_bytes(&hist("f64", Some("i32"), 1_000_000, 1_000_000, None)), Some(28_000_000));
        // A row from before the index dtype column: 8-byte indices.
        assert_eq!(primal_bytes(&hist("f32", None, 100, 10, None)), Some(100 * 12 + 80));
        let mut other = hist("f32", Some("i32"), 100, 10, None);
        other.workload = "kmeans".into();
        assert_eq!(primal_bytes(&other), None);
        assert_eq!(primal_bytes(&hist("bf16", Some("i32"), 100, 10, None)), None);
        assert_eq!(primal_bytes(&hist("f32", Some("u8"), 100, 10, None)), None);
    }

    #[test]
    fn achieved_bandwidth_and_fraction_by_hand() {
        // 80 008 000 bytes / 7.3 ms = 10.960 GB/s; over 34.25 GB/s measured: 32.0%.
        let r = hist("f32", Some("i32"), 10_000_000, 1000, Some(7.3e-3));
        let gb_s = achieved_gb_s(&r).unwrap();
        assert!((gb_s - 10.960_000).abs() < 1e-5, "{gb_s}");
        let roof = roofline(34.25, &["cpu", "cpu-traced"]);
        let f = fraction(&r, Some(&roof)).unwrap();
        assert!((f - 0.320_000).abs() < 1e-6, "{f}");
        assert_eq!(cell(&r, Some(&roof)), "11.0 GB/s 32%");
        // f64 values, i64 indices: 160 016 000 bytes / 20 ms = 8.0008 GB/s; 8.0008 / 20 = 40%.
        let r = hist("f64", Some("i64"), 10_000_000, 1000, Some(0.02));
        assert!((achieved_gb_s(&r).unwrap() - 8.0008).abs() < 1e-9);
        assert_eq!(cell(&r, Some(&roofline(20.0, &["cpu"]))), "8.0 GB/s 40%");
    }

    #[test]
    fn the_bound_is_the_slower_ceiling_by_hand() {
        // n = 10^7, k = 1000, 5% out of range, i32 + f32, primal 5 ms; sequential 40 GB/s,
        // 2.5 x 10^9 updates/s at k = 1000. Bytes: 80 008 000 / 40e9 = 2.0002 ms; updates:
        // 9.5 x 10^6 / 2.5e9 = 3.8 ms, the slower: 3.8 / 5 = 76%. Achieved 16.0016 GB/s, 40%.
        let mut r = hist("f32", Some("i32"), 10_000_000, 1000, Some(5e-3));
        r.params.insert("oob".into(), "0.05".into());
        let mut roof = roofline(40.0, &["cpu"]);
        roof.random = vec![
            RandomRate { bins: 10, reads_per_s: 1e9, updates_per_s: 0.8e9 },
            RandomRate { bins: 1000, reads_per_s: 3e9, updates_per_s: 2.5e9 },
        ];
        let b = bound_fraction(&r, Some(&roof)).unwrap();
        assert!((b - 0.76).abs() < 1e-12, "{b}");
        assert_eq!(cell(&r, Some(&roof)), "16.0 GB/s 40%, bound 76%");
        // A probe 12 times too slow: the case beats its ceiling by a factor no cache explains.
        assert_eq!(percent(11.89), "implausible (>150%)");
        assert_eq!(percent(1.5), "150%");
        assert_eq!(percent(0.004), "0%");
        // At 10^10 updates/s the bytes bind: 2.0002 / 5 = 40.004%.
        roof.random[1].updates_per_s = 1e10;
        assert!((bound_fraction(&r, Some(&roof)).unwrap() - 0.400_04).abs() < 1e-12);
        // No update rate measured at this k, or another device's row: no bound.
        roof.random.remove(1);
        assert_eq!(bound_fraction(&r, Some(&roof)), None);
        assert_eq!(cell(&r, Some(&roof)), "16.0 GB/s 40%");
        roof.random.push(RandomRate { bins: 1000, reads_per_s: 3e9, updates_per_s: 2.5e9 });
        r.backend = "cuda".into();
        assert_eq!(bound_fraction(&r, Some(&roof)), None);
        // Without `oob` every element is an update: 10^7 / 2.5e9 = 4 ms, 80%.
        r.backend = "cpu".into();
        r.params.remove("oob");
        assert!((bound_fraction(&r, Some(&roof)).unwrap() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn without_a_roofline_or_on_another_device_the_fraction_is_blank() {
        let r = hist("f32", Some("i32"), 10_000_000, 1000, Some(7.3e-3));
        assert_eq!(fraction(&r, None), None);
        assert_eq!(cell(&r, None), "11.0 GB/s -");
        let mut gpu = r.clone();
        gpu.backend = "cuda".into();
        assert_eq!(cell(&gpu, Some(&roofline(34.25, &["cpu"]))), "11.0 GB/s -");
        // No primal timing, or no time at all: no bandwidth either.
        assert_eq!(cell(&hist("f32", Some("i32"), 100, 10, None), Some(&roofline(1.0, &["cpu"]))), "-");
        assert_eq!(achieved_gb_s(&hist("f32", Some("i32"), 100, 10, Some(0.0))), None);
    }

    fn rate(bins: usize, reads_per_s: f64, updates_per_s: f64) -> RandomRate {
        RandomRate { bins, reads_per_s, updates_per_s }
    }

    #[test]
    fn merged_rooflines_take_the_lower_median_of_each_rate_and_every_tool() {
        let mut a = roofline(35.0, &["cpu"]);
        a.random = vec![rate(10, 4.0e9, 0.9e9), rate(1000, 4.5e9, 2.4e9)];
        let mut b = roofline(64.0, &["cpu", "cpu-traced"]);
        b.random = vec![rate(1000, 4.7e9, 2.9e9), rate(1_000_000, 1.8e9, 1.3e9)];
        let mut c = roofline(34.0, &["cpu-staged"]);
        c.random = vec![rate(1000, 4.6e9, 2.6e9)];
        let m = merged(&[a.clone(), b.clone(), c]).unwrap();
        assert_eq!(m.threads, 2);
        // 34, 35, 64: the odd 64 GB/s of one part moves nothing.
        assert_eq!(m.seq_read_gb_s, 35.0);
        assert_eq!(m.random, vec![rate(10, 4.0e9, 0.9e9), rate(1000, 4.6e9, 2.6e9), rate(1_000_000, 1.8e9, 1.3e9)],);
        assert_eq!(m.tools, ["cpu", "cpu-traced", "cpu-staged"]);
        // Two parts: the lower of the two.
        let two = merged(&[b.clone(), a.clone()]).unwrap();
        assert_eq!(two.seq_read_gb_s, 35.0);
        assert_eq!(two.random[1], rate(1000, 4.5e9, 2.4e9));
        // One part is kept as it is.
        assert_eq!(merged(std::slice::from_ref(&a)), Some(a.clone()));
        // Nothing measured, or measured on other thread counts: none.
        assert_eq!(merged(&[]), None);
        b.threads = 4;
        assert_eq!(merged(&[a, b]), None);
    }
}

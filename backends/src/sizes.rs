//! The sizes at which a device or a rule takes another code path for a histogram of n values
//! into k bins: one list ([`hist_size_switches`]) built from the constants the code itself
//! reads, which `adgauge check` sweeps (every histogram case runs on both sides of every switch,
//! compared with the oracle) and which a test holds complete: every size constant of the
//! histogram code is a switch here or is named in [`NOT_SWITCHES`] with the reason
//! (`size_constants_are_switches_or_say_why_not`). A new threshold that no `check` case crosses
//! therefore fails that test until it is listed.

use crate::HistOp;
pub use adgauge_cpu::hist_sizes::{AUTO_MUL_MAX_N, AUTO_MUL_VALUES_PER_BIN, COUNTING_MAX};
use adgauge_cpu::hist_sizes::{
    MIN_CHUNK, PAR_MIN, PARALLEL_SCAN_MIN, PARTITION_MIN_BINS_BYTES, SMALL_K, SPLIT_PAIR_ROW_BYTES, STAGE_MIN,
};
pub use adgauge_kernels::gpu::{LOCAL_MAX_K as GPU_LOCAL_MAX_K, MIN_CHUNK as GPU_MIN_CHUNK};

/// One size switch: a histogram just before it and one just past it (with f32 and f64 values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeSwitch {
    /// The constants that place it (as the code names them).
    pub constants: &'static [&'static str],
    /// The path taken past it.
    pub path: &'static str,
    /// (n, k) on the other path.
    pub before: (usize, usize),
    /// (n, k) on the path.
    pub past: (usize, usize),
    /// The operator it concerns; None for every operator.
    pub op: Option<HistOp>,
}

/// Elements from which the CPU scans in parallel blocks with carries: `check` runs every
/// operator's scans and reduction at this length (no histogram rule scans there: general-sort
/// takes its fused sorted adjoint on the CPU devices).
pub const fn parallel_scan_min() -> usize {
    PARALLEL_SCAN_MIN
}

/// Every size switch of the histogram code, both sides of each small enough for `check`.
pub fn hist_size_switches() -> Vec<SizeSwitch> {
    // The partitioned adjoint starts at a byte size of the running array: k = 2^17 for f64 and
    // 2^18 for f32; the sides are before for both dtypes and past for both.
    let partition_f64 = PARTITION_MIN_BINS_BYTES / 8;
    let partition_f32 = PARTITION_MIN_BINS_BYTES / 4;
    let counting_n = 4096;
    // The forward histograms of + and logaddexp fold two scalar rows from 2 k values' bytes:
    // k = 393216 for f64 and 786432 for f32; the sides are before for both and past for both.
    // A tiny n keeps them cheap at that k.
    let split_pair = |op| SizeSwitch {
        constants: &["cpu::hist::SPLIT_PAIR_ROW_BYTES"],
        path: "CPU: the forward histogram in two scalar passes (values, then tangents)",
        before: (2048, SPLIT_PAIR_ROW_BYTES / 16 - 1),
        past: (2048, SPLIT_PAIR_ROW_BYTES / 8),
        op: Some(op),
    };
    vec![
        split_pair(HistOp::Add),
        split_pair(HistOp::General(&crate::general::LOGADDEXP)),
        SizeSwitch {
            constants: &["cpu::kernels::PAR_MIN", "cpu::hist::MIN_CHUNK"],
            path: "CPU: several chunks of private rows, folded in parallel and merged",
            before: (PAR_MIN - 1, 256),
            past: (PAR_MIN.max(2 * MIN_CHUNK), 256),
            op: None,
        },
        SizeSwitch {
            constants: &["cpu::hist::SMALL_K"],
            path: "CPU: interleaved sub-histograms per chunk",
            // n = PAR_MIN + 3: two chunks of 32770 and 32769 elements, each ending in a tail of
            // fewer than four that the four rows take one element each (a chunk after the
            // first starts its rows' lanes afresh).
            before: (PAR_MIN + 3, SMALL_K + 1),
            past: (PAR_MIN + 3, SMALL_K),
            op: None,
        },
        SizeSwitch {
            constants: &["cpu::kernels::PAR_MIN"],
            path: "CPU: the chunks' private rows merged in parallel (from PAR_MIN bins)",
            // Two chunks at both sides (n / 2k rows' worth of elements each).
            before: (4 * PAR_MIN, PAR_MIN - 1),
            past: (4 * PAR_MIN, PAR_MIN),
            op: None,
        },
        SizeSwitch {
            constants: &["cpu::hist::PARTITION_MIN_BINS_BYTES"],
            path: "CPU: the chunked adjoint partitioned by bin window",
            before: (4096, partition_f64 - 1),
            past: (4096, partition_f32),
            op: None,
        },
        SizeSwitch {
            constants: &["cpu::sort::COUNTING_MAX"],
            path: "CPU: the sort by bin in radix passes",
            before: (counting_n, COUNTING_MAX - 2),
            past: (counting_n, COUNTING_MAX + 1),
            op: None,
        },
        SizeSwitch {
            constants: &["cpu::AUTO_MUL_MAX_N", "cpu::AUTO_MUL_VALUES_PER_BIN"],
            path: "CPU: auto takes general-chunked for *",
            before: (4096, 4096 / AUTO_MUL_VALUES_PER_BIN - 1),
            past: (4096, 4096 / AUTO_MUL_VALUES_PER_BIN),
            op: Some(HistOp::Mul),
        },
        SizeSwitch {
            constants: &["cpu::staged::STAGE_MIN"],
            path: "cpu-staged: elementwise work deferred and fused",
            before: (STAGE_MIN - 1, 16),
            past: (STAGE_MIN, 16),
            op: None,
        },
        SizeSwitch {
            constants: &["gpu::LOCAL_MAX_K"],
            path: "GPU: sub-histograms in local memory",
            before: (4 * GPU_LOCAL_MAX_K + 4, GPU_LOCAL_MAX_K + 1),
            past: (4 * GPU_LOCAL_MAX_K + 4, GPU_LOCAL_MAX_K),
            op: None,
        },
        SizeSwitch {
            constants: &["gpu::MIN_CHUNK"],
            path: "GPU: more than one chunk in the chunked kernels",
            before: (2 * GPU_MIN_CHUNK - 1, 16),
            past: (2 * GPU_MIN_CHUNK, 16),
            op: None,
        },
        SizeSwitch {
            constants: &["cpu::scan::PARALLEL_SCAN_MIN"],
            path: "CPU: scans in parallel blocks with carries (also crossed by check's scans of this length)",
            before: (PARALLEL_SCAN_MIN - 1, 256),
            past: (PARALLEL_SCAN_MIN, 256),
            op: None,
        },
    ]
}

/// The size constants of the histogram code that select no path, with why: sizes of blocks,
/// caps and counts that change how work is split, never which code runs (or not for
/// histograms). The completeness test reads this list.
pub const NOT_SWITCHES: &[(&str, &str)] = &[
    ("cpu::hist::MAX_CHUNKS", "a cap on the chunk count: the chunked path is the same"),
    ("cpu::hist::SUBS", "how many sub-histograms SMALL_K selects"),
    ("cpu::hist::MERGE_BLOCK", "bins per merge task"),
    ("cpu::hist::LARGE_ROW_BINS", "halves the chunk count past it: the same chunked path, fewer rows"),
    (
        "cpu::hist::STAGE_LEN",
        "the staging block of staged_bin_totals: the same loop at any length; a partial last block is reached at every n it does not divide (check's n = 2000)",
    ),
    ("cpu::hist::WINDOW_BYTES", "the window size of the partitioned path PARTITION_MIN_BINS_BYTES selects"),
    ("cpu::kernels::BLOCK", "the block of the parallel reductions PAR_MIN selects"),
    (
        "cpu::kernels::REDUCE_LANES",
        "the reductions' accumulators: a length below it is a left fold of its tail alone, one code path",
    ),
    (
        "cpu::kernels::SHORT_FOLD",
        "which copy of fold_lanes runs (baseline, AVX2, AVX-512), all with the same order of operations",
    ),
    (
        "cpu::kernels::EXTREMUM_LANES",
        "the vector min/max folds' lanes: their tail is a left fold, and lengths either side are in their own test",
    ),
    ("cpu::scan::SCAN_BLOCK", "the block of the parallel scans PARALLEL_SCAN_MIN selects"),
    ("cpu::kernels::PAR_MIN_WORK", "matrix products (PAR_MIN times 8), not histograms"),
    ("cpu::sort::MAX_SORT_CHUNKS", "a cap on the counting pass's chunks"),
    ("cpu::sort::MIN_SORT_CHUNK", "the counting pass's chunks: parallel past PAR_MIN's size, as the histograms"),
    ("cpu::segments::MAX_CHUNKS", "a cap on the counting pass's chunks"),
    ("cpu::segments::MIN_CHUNK", "the counting pass's chunks: parallel past PAR_MIN's size, as the histograms"),
    ("cpu::segments::GROUPS", "bin groups of the segment pass"),
    ("cpu::staged::LANES", "the register width of the fused programs"),
    ("cpu::staged::TASK_BLOCKS", "blocks per task of a fused program"),
    ("cpu::staged::MIN_TASKS", "tasks of a parallel fused program"),
    ("cpu::staged::MAX_DEFERRED", "a cap on a region's deferred nodes"),
    ("gpu::GROUP", "the work-group size of GPU_LOCAL_MAX_K's local path"),
    ("gpu::CHUNK_GROUP", "a launch shape"),
    ("gpu::MAX_CHUNKS", "a cap on the chunk count"),
    ("gpu::ROWS_BUDGET", "a cap on chunks times k (reached only past 2^24 / 256 bins)"),
    ("gpu::MAX_CHUNK_GROUP", "a cap on the cooperative group"),
    ("gpu::RADIX_BITS", "bits per radix pass of the sort"),
    ("gpu::AXIS_BLOCK", "dense ops along an axis, not histograms"),
    ("gpu::MATMUL_GROUPS", "matrix products, not histograms"),
    ("gpu::MATMUL_MIN_SPLIT", "matrix products, not histograms"),
    (
        "gpu::MIN_CHUNK_GROUP",
        "cooperative chunk groups: from the device's local memory; the conformance suite runs both forms (with_group_chunks)",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The files whose `const NAME: usize` declarations are histogram size constants, with the
    /// module path the lists name them by.
    const FILES: &[(&str, &str)] = &[
        ("cpu", include_str!("../../cpu/src/lib.rs")),
        ("cpu::hist", include_str!("../../cpu/src/hist.rs")),
        ("cpu::kernels", include_str!("../../cpu/src/kernels.rs")),
        ("cpu::lae", include_str!("../../cpu/src/lae.rs")),
        ("cpu::scan", include_str!("../../cpu/src/scan.rs")),
        ("cpu::sort", include_str!("../../cpu/src/sort.rs")),
        ("cpu::segments", include_str!("../../cpu/src/segments.rs")),
        ("cpu::staged", include_str!("../../cpu/src/staged.rs")),
        ("gpu", include_str!("../../kernels/src/gpu/mod.rs")),
    ];

    fn declared() -> Vec<String> {
        let mut out = Vec::new();
        for (module, source) in FILES {
            for line in source.lines() {
                let line = line.trim_start();
                let line = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub ")).unwrap_or(line);
                if let Some(rest) = line.strip_prefix("const ")
                    && let Some((name, ty)) = rest.split_once(':')
                    && ty.trim_start().starts_with("usize")
                    && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                {
                    out.push(format!("{module}::{name}"));
                }
            }
        }
        out
    }

    #[test]
    fn size_constants_are_switches_or_say_why_not() {
        let switches: Vec<&str> = hist_size_switches().iter().flat_map(|s| s.constants.iter().copied()).collect();
        let not: Vec<&str> = NOT_SWITCHES.iter().map(|(name, _)| *name).collect();
        let declared = declared();
        assert!(declared.len() > 20, "the scan found too few constants: {declared:?}");
        for name in &declared {
            assert!(
                switches.contains(&name.as_str()) || not.contains(&name.as_str()),
                "{name}: a size constant of the histogram code that is neither a switch that `check` \
                 crosses (sizes::hist_size_switches) nor listed in sizes::NOT_SWITCHES with why"
            );
        }
        // And every listed name still exists.
        for name in switches.iter().chain(&not) {
            assert!(declared.iter().any(|d| d == name), "{name} is listed but not declared");
        }
    }

    #[test]
    fn each_switch_has_its_sides_in_order_and_small_enough_for_check() {
        for s in hist_size_switches() {
            assert_ne!(s.before, s.past, "{}", s.path);
            assert!(s.past.0 <= 1 << 18 && s.past.1 <= 1 << 20 && s.before.0 <= 1 << 18, "{}: {s:?}", s.path);
        }
        // The forward histograms' two passes: before for both dtypes, past for both.
        use adgauge_cpu::hist_sizes::split_pair_rows;
        let split: Vec<SizeSwitch> =
            hist_size_switches().into_iter().filter(|s| s.constants == ["cpu::hist::SPLIT_PAIR_ROW_BYTES"]).collect();
        assert_eq!(split.len(), 2);
        for s in split {
            assert!(!split_pair_rows::<f64>(s.before.1) && !split_pair_rows::<f32>(s.before.1), "{s:?}");
            assert!(split_pair_rows::<f64>(s.past.1) && split_pair_rows::<f32>(s.past.1), "{s:?}");
        }
        // The CPU's choices on each side (the device's own predicates, not the list's numbers).
        let cpu = crate::Cpu::new(Some(1)).unwrap();
        use crate::HistOps;
        let auto = hist_size_switches().into_iter().find(|s| s.op == Some(HistOp::Mul)).unwrap();
        assert_eq!(cpu.auto_hist_rule(HistOp::Mul, auto.before.0, auto.before.1), None);
        assert!(cpu.auto_hist_rule(HistOp::Mul, auto.past.0, auto.past.1).is_some());
        let plan = |(n, k)| adgauge_cpu::hist_sizes::Plan::new(n, k);
        let par = &hist_size_switches()[2];
        assert_eq!(plan(par.before).chunks, 1);
        assert!(plan(par.past).chunks > 1);
        let small = &hist_size_switches()[3];
        assert_eq!((plan(small.before).subs, plan(small.past).subs), (1, adgauge_cpu::hist_sizes::SUBS));
        // The parallel merge: several rows on both sides, k crossing PAR_MIN.
        let merge = hist_size_switches().into_iter().find(|s| s.path.contains("merged in parallel")).unwrap();
        assert!(plan(merge.before).rows() > 1 && plan(merge.past).rows() > 1);
        assert!(merge.before.1 < PAR_MIN && merge.past.1 >= PAR_MIN);
        // Past it, several chunks, each ending in a partial group of four (the rows' tail).
        let (n, p) = (small.past.0, plan(small.past));
        let last = n - (p.chunks - 1) * p.chunk_len;
        assert!(p.chunks > 1 && p.chunk_len % 4 != 0 && last % 4 != 0, "{p:?}, last chunk {last}");
        let win = |(n, k): (usize, usize), f64: bool| {
            if f64 {
                adgauge_cpu::hist_sizes::adjoint_window_bins::<f64>(k, n)
            } else {
                adgauge_cpu::hist_sizes::adjoint_window_bins::<f32>(k, n)
            }
        };
        let part =
            hist_size_switches().into_iter().find(|s| s.constants == ["cpu::hist::PARTITION_MIN_BINS_BYTES"]).unwrap();
        for f64 in [true, false] {
            assert_eq!(win(part.before, f64), 0);
            assert!(win(part.past, f64) > 0);
        }
    }
}

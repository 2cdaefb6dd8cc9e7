//! A suite's sizes are checked against the memory limit after `--filter` and `--shard` select
//! the cases: a case left out never refuses the run (a nightly suite's largest cases need not
//! fit a small runner that runs only other shards), and a selected one still does, with exit 2
//! naming the suite's line.

use crate::common;

use common::{adgauge, temp_file};

const SUITE: &str = "name: selection\ntiming: {samples: 1, min_sample_ms: 1, time_limit_s: 0.05}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [100]\n    k: [10]\n    modes: [primal]\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [4294967296]\n    k: [10]\n    modes: [primal]\n";

/// `adgauge run` of the suite (written to `file`: tests run in parallel) with `extra` arguments.
fn run(file: &str, extra: &[&str]) -> (Option<i32>, String) {
    let suite = temp_file("selection", file, SUITE);
    let mut args = vec!["--max-memory", "1G", "run", "--suite", suite.to_str().unwrap(), "--no-save", "--quiet"];
    args.extend_from_slice(extra);
    let out = adgauge(&args);
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_filter_or_shard_that_leaves_the_oversized_case_out_runs() {
    let (code, err) = run("left-out-filter.yaml", &["--filter", "n=100,"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = run("left-out-shard.yaml", &["--shard", "1/2"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_selected_oversized_case_is_refused_naming_its_line() {
    for extra in [&[][..], &["--shard", "2/2"][..], &["--filter", "n=4294967296"][..]] {
        let (code, err) = run("selected.yaml", extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(
            err.contains("selected.yaml:13:8: cases[1].n: ") && err.contains("more than the memory limit 1073741824"),
            "{extra:?}: {err}"
        );
    }
}

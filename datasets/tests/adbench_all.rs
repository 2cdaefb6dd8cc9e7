//! Reads every ADBench file found in the data directory through the public API.
//!
//! Ignored by default (the largest BA and GMM-replicate files expand to about 1.5 GB);
//! run with `cargo test -p adgauge-datasets --release -- --ignored`.

use std::path::{Path, PathBuf};

use adgauge_datasets::ba::BaInput;
use adgauge_datasets::gmm::GmmInput;
use adgauge_datasets::lstm::LstmInput;

fn txt_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "txt") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Sizes encoded in an ADBench file name, e.g. `ba1_n49_m7776_p31843` -> n = 49.
fn name_size(path: &Path, key: char) -> Option<usize> {
    let stem = path.file_stem()?.to_str()?;
    stem.split('_').find_map(|part| part.strip_prefix(key)?.parse().ok())
}

#[test]
#[ignore = "reads about 6 MB of text expanding to over a GB; run with --release -- --ignored"]
fn every_adbench_file_parses() {
    let Some(dir) = adgauge_testkit::found(
        adgauge_testkit::adbench_location(),
        "adbench",
        "the ADBench data directory",
        "set ADGAUGE_ADBENCH_DIR to it",
    ) else {
        return;
    };
    let mut count = 0;
    for path in txt_files(&dir.join("gmm")) {
        let g = GmmInput::read(&path, None).unwrap_or_else(|e| panic!("{e}"));
        if let Some(d) = name_size(&path, 'd') {
            assert_eq!(g.d, d, "{}", path.display());
        }
        if let Some(k) = name_size(&path, 'K') {
            assert_eq!(g.k, k, "{}", path.display());
        }
        if path.parent().is_some_and(|p| p.ends_with("2.5M")) {
            assert_eq!(g.n, 2_500_000);
            assert!(g.points_replicated());
        }
        eprintln!("{}: d={} k={} n={}", path.display(), g.d, g.k, g.n);
        count += 1;
    }
    for path in txt_files(&dir.join("ba")) {
        let b = BaInput::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(b.is_replicated());
        if let (Some(n), Some(m)) = (name_size(&path, 'n'), name_size(&path, 'm')) {
            assert_eq!((b.n, b.m), (n, m), "{}", path.display());
        }
        eprintln!("{}: n={} m={} p={}", path.display(), b.n, b.m, b.p);
        count += 1;
    }
    for path in txt_files(&dir.join("lstm")) {
        let s = LstmInput::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Some(s.l), name_size(&path, 'l'), "{}", path.display());
        assert_eq!(Some(s.c), name_size(&path, 'c'), "{}", path.display());
        eprintln!("{}: l={} c={} b={}", path.display(), s.l, s.c, s.b);
        count += 1;
    }
    eprintln!("{count} files parsed");
    assert!(count > 0, "no ADBench files under {}", dir.display());
}

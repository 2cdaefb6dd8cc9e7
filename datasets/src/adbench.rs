//! Where the real ADBench data files live, and the skip-or-fail rule for tests that read them.
//!
//! The files are never part of this repository. Tests look for them in
//! `$ADGAUGE_ADBENCH_DIR` when that variable is set and non-empty, otherwise in
//! `../shared/datasets/adbench` relative to the workspace root. When a file is missing the test
//! prints why it is skipped and passes — unless `ADGAUGE_REQUIRE` (a comma-separated list of
//! words) contains `adbench`, in which case the test fails.
//!
//! ```no_run
//! // In any crate's test:
//! let Some(path) = adgauge_datasets::adbench::adbench_file("gmm/test.txt") else { return };
//! ```

use std::path::{Path, PathBuf};

/// Overrides the location of the ADBench data directory.
pub const ADBENCH_DIR_ENV: &str = "ADGAUGE_ADBENCH_DIR";
/// Comma-separated list of optional resources whose absence must fail tests (e.g. `adbench`).
pub const REQUIRE_ENV: &str = "ADGAUGE_REQUIRE";
/// The word in [`REQUIRE_ENV`] that makes the ADBench files mandatory.
pub const REQUIRE_WORD: &str = "adbench";

/// Where the ADBench data directory is expected, whether or not it exists:
/// `$ADGAUGE_ADBENCH_DIR` if set and non-empty, else `<workspace>/../shared/datasets/adbench`.
pub fn adbench_location() -> PathBuf {
    match std::env::var_os(ADBENCH_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets/adbench"),
    }
}

/// The ADBench data directory, when it exists.
pub fn adbench_dir() -> Option<PathBuf> {
    let dir = adbench_location();
    dir.is_dir().then_some(dir)
}

/// Whether `word` is listed in `ADGAUGE_REQUIRE` (comma-separated, case-insensitive, spaces
/// around words ignored).
pub fn is_required(word: &str) -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|list| list_contains(&list, word))
}

fn list_contains(list: &str, word: &str) -> bool {
    list.split(',').any(|w| w.trim().eq_ignore_ascii_case(word))
}

/// Returns true when `path` exists. Otherwise prints `skipped: <what> not found at <path>` to
/// stderr and returns false — or panics when `ADGAUGE_REQUIRE` contains `adbench`.
///
/// # Panics
/// When `path` does not exist and the ADBench files are required.
pub fn require_or_skip(what: &str, path: &Path) -> bool {
    if path.exists() {
        return true;
    }
    let reason = format!("{what} not found at {} (set {ADBENCH_DIR_ENV} to their directory)", path.display());
    if is_required(REQUIRE_WORD) {
        panic!("{REQUIRE_ENV} contains '{REQUIRE_WORD}' but the ADBench files are missing: {reason}");
    }
    eprintln!("skipped: {reason}");
    false
}

/// The path of the ADBench file `relative` (e.g. `"gmm/1k/gmm_d2_K5.txt"`) when present; `None`
/// after printing a skip reason when absent (see [`require_or_skip`], which may panic instead).
pub fn adbench_file(relative: &str) -> Option<PathBuf> {
    let path = adbench_location().join(relative);
    require_or_skip(&format!("ADBench file {relative}"), &path).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_list_is_comma_separated_words() {
        assert!(list_contains("adbench", "adbench"));
        assert!(list_contains("opencl, ADBench ,cuda", "adbench"));
        assert!(!list_contains("adbenchx,opencl", "adbench"));
        assert!(!list_contains("", "adbench"));
    }

    #[test]
    fn a_missing_file_is_skipped_unless_required() {
        let missing = Path::new("/nonexistent/adgauge/adbench/file.txt");
        if is_required(REQUIRE_WORD) {
            let r = std::panic::catch_unwind(|| require_or_skip("(self-test) a missing file", missing));
            assert!(r.is_err(), "a required missing file must fail");
        } else {
            assert!(!require_or_skip("(self-test) a missing file", missing));
        }
        assert!(require_or_skip("this crate", Path::new(env!("CARGO_MANIFEST_DIR"))));
    }
}

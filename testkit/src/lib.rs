//! adgauge's test support: finding the optional pieces a test needs (the ADBench and HT files
//! beside the clone, a device, a Python with some module) and skipping, visibly, where one is
//! absent.
//!
//! A test that lacks something calls [`skip`] (or a finder that calls it) and returns. The skip
//! is a failure instead when `ADGAUGE_REQUIRE` (comma-separated words) lists the piece: CI sets
//! it for what it installs, so a skip there is never silent. Otherwise the skip is recorded, and
//! when the test binary exits it prints, on its own stderr and so without `--nocapture`, one
//! line per skipped test with the reason and what would make it run, and the count of skips so
//! far in the same `cargo test` (every binary of one `cargo test` adds to one ledger file named
//! after cargo's process, whose path the line gives).
//!
//! No dependencies, and no adgauge crate: any crate's tests use it as a dev-dependency without
//! bending the one-way crate graph (docs/ARCHITECTURE.md).

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Comma-separated words naming the optional pieces whose absence fails a test.
pub const REQUIRE_ENV: &str = "ADGAUGE_REQUIRE";
/// Overrides the location of the ADBench data directory.
pub const ADBENCH_DIR_ENV: &str = "ADGAUGE_ADBENCH_DIR";
/// Overrides the location of the HT data directory (GradBench's `evals/ht/data` layout:
/// `simple_small/`, `complicated_small/`, each with `model/` and `handN_t26_cC.txt`).
pub const HT_DIR_ENV: &str = "ADGAUGE_HT_DIR";

/// Whether `word` is listed in `ADGAUGE_REQUIRE` (case-insensitive, spaces around words
/// ignored).
pub fn is_required(word: &str) -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|list| list_contains(&list, word))
}

fn list_contains(list: &str, word: &str) -> bool {
    list.split(',').any(|w| w.trim().eq_ignore_ascii_case(word))
}

/// One skipped test: its name, why, and what would make it run.
#[derive(Clone, Debug, PartialEq)]
struct Skip {
    test: String,
    why: String,
    to_run: String,
}

static SKIPS: Mutex<Vec<Skip>> = Mutex::new(Vec::new());
static REPORT_AT_EXIT: Once = Once::new();

unsafe extern "C" {
    // The C library's: the test harness returns from `main` or calls `exit`, and both run it.
    fn atexit(callback: extern "C" fn()) -> std::os::raw::c_int;
}

/// The running test skips: it lacks `word` (`why` says what is missing), and `to_run` says
/// what would make it run. Records the skip for the binary's closing summary.
///
/// # Panics
/// When `ADGAUGE_REQUIRE` lists `word`: then the absence is a failure.
pub fn skip(word: &str, why: impl Display, to_run: impl Display) {
    skip_into(word, &why.to_string(), &to_run.to_string(), Some(&ledger_path()));
}

/// [`skip`], appending to `ledger` when given (the self-tests keep theirs out of the run's).
fn skip_into(word: &str, why: &str, to_run: &str, ledger: Option<&Path>) {
    let why = one_line(why);
    assert!(!is_required(word), "{REQUIRE_ENV} has {word}, but {why}");
    let to_run = one_line(to_run);
    // The harness names each test's thread after the test.
    let test = std::thread::current().name().unwrap_or("(unnamed test)").to_string();
    // Seen at once with --nocapture, in the summary without it.
    eprintln!("skipped: {why} (to run it: {to_run})");
    let skip = Skip { test, why, to_run };
    if let Some(ledger) = ledger {
        append_to_ledger(ledger, &skip);
    }
    SKIPS.lock().unwrap_or_else(|e| e.into_inner()).push(skip);
    REPORT_AT_EXIT.call_once(|| {
        // SAFETY: `report` is a plain function that lives as long as the process.
        unsafe {
            atexit(report);
        }
    });
}

/// A device (`opencl`, `cuda`) that cannot start: a [`skip`] under the device's name, saying
/// what would make it start.
///
/// # Panics
/// When `ADGAUGE_REQUIRE` lists the device.
pub fn device_unavailable(device: &str, why: impl Display) {
    let to_run = match device {
        "opencl" => "scripts/setup-opencl.sh (PoCL, a CPU OpenCL)",
        "cuda" => "an NVIDIA GPU and its driver",
        _ => "the device's runtime",
    };
    skip(device, format!("the {device} device cannot start: {why}"), to_run);
}

/// `path` when it exists; otherwise a [`skip`] (`what` was not found there) and `None`.
///
/// # Panics
/// When `path` is missing and `ADGAUGE_REQUIRE` lists `word`.
pub fn found(path: PathBuf, word: &str, what: &str, to_run: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    skip(word, format!("{what} not found at {}", path.display()), to_run);
    None
}

/// Where the ADBench data directory is expected, whether or not it exists:
/// `$ADGAUGE_ADBENCH_DIR` if set and non-empty, else `<workspace>/../shared/datasets/adbench`.
pub fn adbench_location() -> PathBuf {
    location(ADBENCH_DIR_ENV, "adbench")
}

/// The ADBench data directory, when it exists.
pub fn adbench_dir() -> Option<PathBuf> {
    let dir = adbench_location();
    dir.is_dir().then_some(dir)
}

/// The ADBench file `relative` (e.g. `"gmm/1k/gmm_d2_K5.txt"`), or a skip (`adbench`).
pub fn adbench_file(relative: &str) -> Option<PathBuf> {
    found(
        adbench_location().join(relative),
        "adbench",
        &format!("ADBench file {relative}"),
        &format!("set {ADBENCH_DIR_ENV} to the ADBench data directory"),
    )
}

/// Where the HT data directory is expected: `$ADGAUGE_HT_DIR` if set and non-empty, else
/// `<workspace>/../shared/datasets/ht`.
pub fn ht_location() -> PathBuf {
    location(HT_DIR_ENV, "ht")
}

/// The HT data file `relative` (e.g. `"simple_small/hand1_t26_c100.txt"`), or a skip. The HT
/// files are ADBench's: `adbench` in `ADGAUGE_REQUIRE` makes their absence a failure.
pub fn ht_file(relative: &str) -> Option<PathBuf> {
    found(
        ht_location().join(relative),
        "adbench",
        &format!("HT file {relative}"),
        &format!("set {HT_DIR_ENV} to GradBench's evals/ht/data directory"),
    )
}

fn location(var: &str, folder: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets").join(folder),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// This test binary's name, without the hash cargo appends (`eval_ba-0123abcd` is `eval_ba`).
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe.as_deref().and_then(Path::file_stem).map(|s| s.to_string_lossy().into_owned());
    let stem = stem.unwrap_or_else(|| "this test binary".into());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => stem,
    }
}

/// The ledger of this `cargo test`: one file per cargo process (its id and, on Linux, its
/// start time, so that a reused id starts a new ledger).
fn ledger_path() -> PathBuf {
    let parent = std::os::unix::process::parent_id();
    let started = std::fs::read_to_string(format!("/proc/{parent}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(19).map(str::to_string)))
        .unwrap_or_default();
    std::env::temp_dir().join(format!("adgauge-test-skips-{parent}-{started}.txt"))
}

fn append_to_ledger(ledger: &Path, skip: &Skip) {
    let line = format!("{}\t{}\t{}\n", binary_name(), skip.test, skip.why);
    // A ledger that cannot be written leaves the binary's own summary, which is enough.
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(ledger) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The closing summary of one binary's skips, and the count of the ledger's.
fn summary(binary: &str, skips: &[Skip], ledger: Option<(&Path, &str)>) -> String {
    let mut out = format!("\n{} test(s) of {binary} skipped:\n", skips.len());
    for s in skips {
        out.push_str(&format!("  skipped {}: {}\n    to run it: {}\n", s.test, s.why, s.to_run));
    }
    if let Some((path, text)) = ledger {
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        let mut binaries: Vec<&str> = lines.iter().filter_map(|l| l.split('\t').next()).collect();
        binaries.sort_unstable();
        binaries.dedup();
        out.push_str(&format!(
            "  so far in this cargo test: {} test(s) skipped in {} binar{} (listed in {})\n",
            lines.len(),
            binaries.len(),
            if binaries.len() == 1 { "y" } else { "ies" },
            path.display()
        ));
    }
    out
}

extern "C" fn report() {
    let skips = match SKIPS.try_lock() {
        Ok(s) => s.clone(),
        Err(_) => return,
    };
    if skips.is_empty() {
        return;
    }
    let path = ledger_path();
    let ledger = std::fs::read_to_string(&path).ok();
    let text = summary(&binary_name(), &skips, ledger.as_deref().map(|t| (path.as_path(), t)));
    // Straight to the process's stderr: the harness captures only the print macros.
    let _ = std::io::stderr().write_all(text.as_bytes());
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
    fn a_skip_is_recorded_under_the_test_s_name_and_a_found_path_is_not_a_skip() {
        let word = "testkit-self-test";
        assert!(!is_required(word));
        let ledger = std::env::temp_dir().join(format!("adgauge-testkit-self-test-{}.txt", std::process::id()));
        let _ = std::fs::remove_file(&ledger);
        skip_into(word, "(self-test) a missing\nfile", "nothing", Some(&ledger));
        let mine =
            |s: &Skip| s.test.ends_with("a_skip_is_recorded_under_the_test_s_name_and_a_found_path_is_not_a_skip");
        let mut skips = SKIPS.lock().unwrap();
        let at = skips.iter().position(mine).expect("the skip is recorded under the test's name");
        assert_eq!(skips[at].why, "(self-test) a missing file");
        // Taken back out: this binary's summary is for real skips.
        skips.remove(at);
        drop(skips);
        let line = std::fs::read_to_string(&ledger).unwrap();
        assert!(line.ends_with("\t(self-test) a missing file\n") && line.contains("a_skip_is_recorded"), "{line}");
        let _ = std::fs::remove_file(&ledger);
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(found(here.clone(), word, "this crate", "nothing"), Some(here));
    }

    #[test]
    fn the_summary_lists_each_skip_with_its_remedy_and_counts_the_ledger() {
        let skips = [
            Skip { test: "a".into(), why: "no GPU".into(), to_run: "lend one".into() },
            Skip { test: "b".into(), why: "no data".into(), to_run: "set X".into() },
        ];
        let ledger = "eval_ba\ta\tno GPU\neval_ba\tb\tno data\nconformance\tc\tno PoCL\n";
        let text = summary("eval_ba", &skips, Some((Path::new("/tmp/l.txt"), ledger)));
        assert_eq!(
            text,
            "\n2 test(s) of eval_ba skipped:\n  skipped a: no GPU\n    to run it: lend one\n  skipped b: no data\n    to run it: set X\n  so far in this cargo test: 3 test(s) skipped in 2 binaries (listed in /tmp/l.txt)\n"
        );
        assert_eq!(one_line("two\nlines\t and  tabs"), "two lines and tabs");
    }
}

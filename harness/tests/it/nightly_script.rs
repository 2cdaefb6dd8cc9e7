//! `scripts/nightly.sh` finds the binary where cargo put it: under `CARGO_TARGET_DIR` when that is
//! set. The script runs here with a stand-in `cargo` (first on PATH, it builds nothing) and a
//! stand-in `adgauge` at `$CARGO_TARGET_DIR/release/adgauge` that logs its arguments, so the test
//! checks the script's wiring (which binary, which commands, which exit code) without a release
//! build.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn nightly_uses_the_binary_under_cargo_target_dir() {
    let dir = std::env::temp_dir().join(format!("adgauge-nightly-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin_dir = dir.join("bin");
    let target = dir.join("elsewhere");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(target.join("release")).unwrap();
    let log = dir.join("calls.log");
    script(&bin_dir.join("cargo"), "exit 0");
    // The stand-in adds a run file on `run`, so the script's gate step has a current run.
    script(
        &target.join("release/adgauge"),
        &format!(
            "echo \"$*\" >> '{}'\ncase \"$*\" in *\" run \"*|run*) touch \"$ADGAUGE_HISTORY/20261127T000000Z-run.csv\";; esac\nexit 0",
            log.display()
        ),
    );
    let history = dir.join("history");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/nightly.sh"))
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .env("ADGAUGE_HISTORY", &history)
        .env("ADGAUGE_SUITE", "suites/quick.yaml")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "nightly.sh failed: {stderr}");
    let calls = std::fs::read_to_string(&log).unwrap_or_else(|_| panic!("the stand-in was never called: {stderr}"));
    let calls: Vec<&str> = calls.lines().collect();
    assert!(calls[0].contains("run --suite suites/quick.yaml"), "{calls:?}");
    assert!(calls.iter().any(|c| c.starts_with("report --history")), "{calls:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nightly_times_the_last_nightly_s_build_against_this_one() {
    let root = repo_root();
    let rev = |spec: &str| {
        let out = Command::new("git").args(["rev-parse", spec]).current_dir(&root).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let (Some(head), Some(parent)) = (rev("HEAD"), rev("HEAD~1")) else {
        adgauge_testkit::skip(
            "git-history",
            "the checkout has no git history with a parent commit (a shallow clone?)",
            "a clone with at least two commits (git fetch --deepen=1)",
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("adgauge-nightly-paired-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (bin_dir, target, cache) = (dir.join("bin"), dir.join("target"), dir.join("baselines"));
    for d in [&bin_dir, &target.join("release"), &target.join("aligned/release"), &cache.join(&parent).join("aligned")]
    {
        std::fs::create_dir_all(d).unwrap();
    }
    let log = dir.join("calls.log");
    script(&bin_dir.join("cargo"), "exit 0");
    // The stand-in `compare` finds a regression (exit 3); everything else succeeds.
    let stand_in = format!(
        "echo \"$0 $*\" >> '{}'\ncase \"$*\" in *\" run \"*|run*) touch \"$ADGAUGE_HISTORY/20261127T000000Z-run.csv\";; *compare*) exit 3;; esac\nexit 0",
        log.display()
    );
    script(&target.join("release/adgauge"), &stand_in);
    // The aligned build of this commit (scripts/aligned-build.sh), which times the pairs.
    script(&target.join("aligned/release/adgauge"), &stand_in);
    // The baseline binary is in the cache already: nothing is built.
    script(&cache.join(&parent).join("aligned/adgauge"), &stand_in);
    let history = dir.join("history");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let nightly = |baseline: Option<&str>| {
        let mut c = Command::new("bash");
        c.arg(root.join("scripts/nightly.sh"))
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target)
            .env("ADGAUGE_HISTORY", &history)
            .env("ADGAUGE_SUITE", "suites/quick.yaml")
            .env("ADGAUGE_FILTER", "hist-add")
            .env("ADGAUGE_BASELINE_CACHE", &cache)
            .env_remove("ADGAUGE_BASELINE_REV");
        if let Some(b) = baseline {
            c.env("ADGAUGE_BASELINE_REV", b);
        }
        c.output().unwrap()
    };
    // The first night has no baseline: no paired step; it records its commit.
    let out = nightly(None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("paired step: no baseline revision yet"));
    assert_eq!(std::fs::read_to_string(history.join("last-nightly-commit")).unwrap().trim(), head);
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(!calls.contains("compare"), "{calls}");
    assert!(calls.lines().next().unwrap().contains("run --suite suites/quick.yaml --filter hist-add"), "{calls}");
    // With the parent as the baseline: the current commit's aligned build runs `compare`
    // against the cached aligned baseline binary, saving into the history, and its regression
    // (3) is the night's code.
    std::fs::remove_file(&log).unwrap();
    let out = nightly(Some(&parent));
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let calls = std::fs::read_to_string(&log).unwrap();
    let compare = calls.lines().find(|c| c.contains(" compare ")).unwrap_or_else(|| panic!("{calls}"));
    let expected = format!(
        "compare --baseline bin:{} --suite suites/quick.yaml --filter hist-add --history {} --quiet",
        cache.join(&parent).join("aligned/adgauge").display(),
        history.display()
    );
    assert!(compare.starts_with(&target.join("aligned/release/adgauge").display().to_string()), "{compare}");
    assert!(compare.ends_with(&expected), "{compare}\n{expected}");
    // The paired step runs before the report, which shows it.
    let order: Vec<&str> = calls.lines().map(|c| c.split_whitespace().nth(1).unwrap_or("")).collect();
    let at = |w: &str| order.iter().position(|c| *c == w).unwrap_or_else(|| panic!("{order:?}"));
    assert!(at("compare") < at("report"), "{order:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

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

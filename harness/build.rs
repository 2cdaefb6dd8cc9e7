//! Embeds the git revision the binary was built from (`ADGAUGE_BUILD_GIT_REV`): result files name
//! the code that produced them, not whatever checkout the binary happens to run in. The revision
//! ends in `-dirty` when the sources the build reads (the workspace's crates, its manifests and
//! lock file, `.cargo` and the embedded suites: [`SOURCES`]) differ from HEAD when this script
//! runs. Cargo reruns it whenever anything under those paths changes, HEAD moves or the index
//! changes, so a build after an unstaged edit is labelled `-dirty` and a build after the edit is
//! undone or committed is not (`harness/tests/it/build_label.rs` builds a copy of this script to
//! show it). Outside a git checkout (a source tarball, `cargo install` from a registry) or
//! without git it is "unknown"; the build never fails for want of git.
//!
//! It also embeds the compiler (`ADGAUGE_BUILD_RUSTC`: `$RUSTC -V`, the rustc cargo builds with)
//! and the target features the code was compiled for (`ADGAUGE_BUILD_TARGET_FEATURES`): both
//! change generated code, so each result row names them and the gate compares timings only
//! between rows of the same build host (docs/gate.md).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

/// What the build reads, relative to the workspace root: the crates (sources, embedded data,
/// manifests), the root manifest and lock file, cargo's configuration and the embedded suites.
/// Paths that do not exist are left out (cargo would rerun the script on every build for them).
const SOURCES: [&str; 13] = [
    "Cargo.toml",
    "Cargo.lock",
    ".cargo",
    "ops",
    "ad",
    "cpu",
    "kernels",
    "backends",
    "datasets",
    "workloads",
    "reports",
    "harness",
    "suites",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest_dir.parent().map(PathBuf::from).unwrap_or_default();
    let sources: Vec<PathBuf> = SOURCES.iter().map(|s| root.join(s)).filter(|p| p.exists()).collect();
    let revision = match git(&["rev-parse", "HEAD"]) {
        Some(rev) => {
            // Tracked sources that differ from HEAD make the binary's code something no commit
            // names: say so. `--no-optional-locks`: reading the state must not rewrite the
            // index, whose change would rerun this script on the next build.
            let changed = Command::new("git")
                .args(["--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--"])
                .args(&sources)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| !o.stdout.is_empty());
            // A status that cannot be read is not a clean one.
            if changed == Some(false) { rev } else { format!("{rev}-dirty") }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=ADGAUGE_BUILD_GIT_REV={revision}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(&rustc)
        .arg("-V")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ADGAUGE_BUILD_RUSTC={version}");
    // Cargo lists the enabled target features (`-C target-cpu`, `-C target-feature`) to build
    // scripts; the same flags reach the crate, so they name the code that runs.
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    println!("cargo:rustc-env=ADGAUGE_BUILD_TARGET_FEATURES={features}");
    // Rerun when a source changes (a directory is watched with everything under it)...
    for p in &sources {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    // ...when HEAD moves (checkout, commit) or the index changes (add, commit); the paths come
    // from git itself, so worktrees (where `.git` is a file) work too.
    for what in ["HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", what]) {
            println!("cargo:rerun-if-changed={}", PathBuf::from(p).display());
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &r])
    {
        println!("cargo:rerun-if-changed={}", PathBuf::from(p).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}

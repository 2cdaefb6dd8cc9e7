//! Embeds the git revision the binary was built from (`ADGAUGE_BUILD_GIT_REV`): result files name
//! the code that produced them, not whatever checkout the binary happens to run in. Outside a git
//! checkout (a source tarball, `cargo install` from a registry) or without git it is "unknown";
//! the build never fails for want of git.
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

fn main() {
    let revision = match git(&["rev-parse", "HEAD"]) {
        Some(rev) => {
            // Tracked files that differ from HEAD (as of this build script's last run) make the
            // binary's code something no commit names: say so.
            let dirty = Command::new("git")
                .args(["diff-index", "--quiet", "HEAD", "--"])
                .status()
                .map(|s| !s.success())
                .unwrap_or(false);
            if dirty { format!("{rev}-dirty") } else { rev }
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
    // Rerun when HEAD moves (checkout, commit) or the index changes (add, commit); the paths come
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

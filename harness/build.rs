//! Embeds the git revision the binary was built from (`ADGAUGE_BUILD_GIT_REV`): result files name
//! the code that produced them, not whatever checkout the binary happens to run in. Outside a git
//! checkout (a source tarball, `cargo install` from a registry) or without git it is "unknown";
//! the build never fails for want of git.

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

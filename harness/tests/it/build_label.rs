//! The build label is honest: a binary built after an unstaged edit of its sources records
//! `<revision>-dirty`, one built after the edit is undone records the bare revision, and an
//! edit outside what the build reads (the docs) leaves the label alone.
//!
//! Building adgauge itself in a scratch clone would take minutes, so the test builds a tiny
//! workspace laid out like this one (a `harness` crate beside a `backends` folder) whose build
//! script is a byte-for-byte copy of `harness/build.rs`, with the same cargo that runs the test.
//! What is tested is the script's logic and cargo's rerun of it, which is where the label went
//! wrong (cargo did not rerun the script after an edit, so the label stayed clean).
//!
//! Skipped, saying why, without git (a failure when `ADGAUGE_REQUIRE` lists `git`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=adgauge", "-c", "user.email=adgauge@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Builds the scratch workspace and returns the label its binary prints.
fn build_and_read_label(root: &Path, target: &Path) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--quiet", "--offline"])
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo build: {}", String::from_utf8_lossy(&out.stderr));
    let bin = target.join("debug/labelled");
    let out = Command::new(&bin).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(path: PathBuf, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_build_after_an_unstaged_edit_is_labelled_dirty_and_one_after_undoing_it_is_not() {
    if Command::new("git").arg("--version").output().is_err() {
        adgauge_testkit::skip("git", "git does not run (the build label is git's revision)", "install git");
        return;
    }
    let scratch = std::env::temp_dir().join(format!("adgauge-build-label-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let root = scratch.join("repo");
    let target = scratch.join("target");
    write(root.join("Cargo.toml"), "[workspace]\nresolver = \"3\"\nmembers = [\"harness\"]\n");
    write(
        root.join("harness/Cargo.toml"),
        "[package]\nname = \"labelled\"\nversion = \"0.1.0\"\nedition = \"2024\"\nbuild = \"build.rs\"\n",
    );
    let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs")).unwrap();
    write(root.join("harness/build.rs"), &script);
    let main = "fn main() {\n    println!(\"{}\", env!(\"ADGAUGE_BUILD_GIT_REV\"));\n}\n";
    write(root.join("harness/src/main.rs"), main);
    write(root.join("backends/src/lib.rs"), "pub fn f() {}\n");
    write(root.join("docs/notes.md"), "notes\n");
    write(root.join(".gitignore"), "Cargo.lock\n");
    git(&root, &["init", "-q"]);
    git(&root, &["add", "."]);
    git(&root, &["commit", "-q", "-m", "first"]);
    let rev = git(&root, &["rev-parse", "HEAD"]);

    assert_eq!(build_and_read_label(&root, &target), rev, "a clean tree");
    // Cargo compares modification times; a second's gap makes the edits newer on every file
    // system.
    let pause = || std::thread::sleep(std::time::Duration::from_millis(1100));
    pause();
    write(root.join("harness/src/main.rs"), &format!("{main}// an unstaged edit\n"));
    assert_eq!(build_and_read_label(&root, &target), format!("{rev}-dirty"), "an unstaged edit of the crate");
    pause();
    write(root.join("harness/src/main.rs"), main);
    assert_eq!(build_and_read_label(&root, &target), rev, "the edit undone");
    pause();
    // A sibling crate's source: the binary's code depends on it as on its own.
    write(root.join("backends/src/lib.rs"), "pub fn f() {}\npub fn g() {}\n");
    assert_eq!(build_and_read_label(&root, &target), format!("{rev}-dirty"), "an edit of another crate");
    // Committed, the edit is the new revision, clean.
    git(&root, &["commit", "-q", "-am", "second"]);
    let second = git(&root, &["rev-parse", "HEAD"]);
    assert_ne!(second, rev);
    assert_eq!(build_and_read_label(&root, &target), second, "the edit committed");
    pause();
    // What the build does not read does not make its code dirty.
    write(root.join("docs/notes.md"), "other notes\n");
    assert_eq!(build_and_read_label(&root, &target), second, "a docs edit");
    let _ = std::fs::remove_dir_all(&scratch);
}

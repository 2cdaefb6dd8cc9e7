//! The staged CPU device (`cpu-staged`) against the eager one: `check` passes on it with every
//! elementwise op deferred (`ADGAUGE_STAGE_MIN=0`, so even the small validation cases run
//! through compiled, fused programs), and `eval` on ADBench's files gives the eager device's
//! numbers exactly (both compute every element with the same scalar kernels in the same order).

use crate::common;

use std::process::{Command, Output};

use adgauge_testkit::adbench_file;
use common::{stderr, stdout};

fn staged(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adgauge")).args(args).env("ADGAUGE_STAGE_MIN", "0").output().unwrap()
}

#[test]
#[ignore = "slow tier, 365 s in a debug build on 2 cores: .ci/run runs it"]
fn check_passes_on_the_staged_device_with_every_elementwise_op_fused() {
    let out = staged(&["check", "--backend", "cpu-staged"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("cases passed every check (0 skipped as unsupported)"), "{}", stdout(&out));
    assert!(stdout(&out).contains("/cpu-staged/f64/"), "{}", stdout(&out));
    // Every case compared its derivatives with the eager device's.
    let text = stdout(&out);
    let cases: usize = text.lines().last().unwrap().split(' ').next().unwrap().parse().unwrap();
    let staged_eager: Vec<&str> = text.lines().filter(|l| l.contains(" staged-eager ")).collect();
    assert_eq!(staged_eager.len(), cases, "{text}");
    assert!(staged_eager.iter().all(|l| l.ends_with(" ok")), "{text}");
}

#[test]
fn eval_on_the_staged_device_gives_the_eager_numbers() {
    for (workload, file, modes) in [
        ("gmm", "gmm/test.txt", &["primal", "vjp", "jvp"][..]),
        ("ba", "ba/test.txt", &["primal", "vjp", "jvp"][..]),
        ("lstm", "lstm/lstm_l2_c1024.txt", &["primal", "vjp"][..]),
    ] {
        let Some(path) = adbench_file(file) else { return };
        let p = path.to_str().unwrap();
        for mode in modes {
            let args = ["eval", workload, "--input", p, "--mode", mode];
            let eager = staged(&args);
            let fused = staged(&[&args[..], &["--backend", "cpu-staged"]].concat());
            assert_eq!(eager.status.code(), Some(0), "{workload} {mode}: {}", stderr(&eager));
            assert_eq!(fused.status.code(), Some(0), "{workload} {mode}: {}", stderr(&fused));
            assert!(stdout(&eager).len() > 20, "{workload} {mode}: {}", stdout(&eager));
            assert_eq!(stdout(&fused), stdout(&eager), "{workload} {mode}");
        }
    }
}

#[test]
fn a_bad_stage_threshold_is_an_error_naming_the_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["check", "--backend", "cpu-staged", "--workload", "gmm"])
        .env("ADGAUGE_STAGE_MIN", "lots")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("ADGAUGE_STAGE_MIN: 'lots'"), "{}", stderr(&out));
}

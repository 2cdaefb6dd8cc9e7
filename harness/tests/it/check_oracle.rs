//! `adgauge check` as a test: every registered workload, both dtypes, on the CPU. It is the
//! oracle of the nightly mutation testing (`.cargo/mutants.toml`): a mutant of a rule that this
//! test does not fail survives, and is a bug `check` cannot see.

use crate::common;

use common::{adgauge, stderr, stdout};

#[test]
#[ignore = "slow tier, 268 s in a debug build on 2 cores: .ci/run runs it"]
fn check_passes_on_every_workload_in_both_dtypes() {
    let out = adgauge(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    // Every registered workload and rule runs on the CPU: a case skipped as unsupported there
    // is a rule dispatched wrongly (a mutant that sent hypot's special rule to an error passed
    // when this only read the exit code).
    assert!(stdout(&out).contains("cases passed every check (0 skipped as unsupported)"), "{}", stdout(&out));
}

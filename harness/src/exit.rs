//! Exit codes, the same for every command (README.md lists them):
//! 0 success; 1 a derivative check or a case failed; 2 bad usage or bad input (clap's own code for
//! usage errors); 3 performance regression (gate); 4 a requested backend is unavailable.
//! When several apply, the lowest non-zero wins. An interrupted `run` or `check` (SIGHUP,
//! SIGINT, SIGTERM) exits with 128 + the signal's number (129, 130, 143) whatever else applies,
//! after stopping its tools and writing the rows it measured (`interrupt.rs`).

use std::fmt;

/// A process exit code from docs/ARCHITECTURE.md's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    Success = 0,
    Failed = 1,
    BadInput = 2,
    Regression = 3,
    Unavailable = 4,
}

impl Code {
    /// Combines two outcomes: the lowest non-zero code wins.
    pub fn combine(self, other: Code) -> Code {
        match (self, other) {
            (Code::Success, c) | (c, Code::Success) => c,
            (a, b) => a.min(b),
        }
    }
}

impl From<Code> for std::process::ExitCode {
    fn from(c: Code) -> Self {
        std::process::ExitCode::from(c as u8)
    }
}

/// An error that carries its exit code. Errors without one exit with 1.
#[derive(Debug)]
pub struct Failure {
    pub code: Code,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Bad input or usage: exit 2.
pub fn bad_input(message: impl Into<String>) -> anyhow::Error {
    Failure { code: Code::BadInput, message: message.into() }.into()
}

/// A requested backend is unavailable: exit 4.
pub fn unavailable(message: impl Into<String>) -> anyhow::Error {
    Failure { code: Code::Unavailable, message: message.into() }.into()
}

/// The exit code an error maps to.
pub fn code_of(e: &anyhow::Error) -> Code {
    e.chain().find_map(|c| c.downcast_ref::<Failure>().map(|f| f.code)).unwrap_or(Code::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_non_zero_code_wins() {
        assert_eq!(Code::Success.combine(Code::Unavailable), Code::Unavailable);
        assert_eq!(Code::Unavailable.combine(Code::Failed), Code::Failed);
        assert_eq!(Code::Regression.combine(Code::BadInput), Code::BadInput);
        assert_eq!(Code::Success.combine(Code::Success), Code::Success);
    }

    #[test]
    fn codes_survive_context() {
        let e = bad_input("field k: must be an integer").context("reading case.json");
        assert_eq!(code_of(&e), Code::BadInput);
        assert_eq!(code_of(&anyhow::anyhow!("boom")), Code::Failed);
    }
}

//! The harness as a library: everything behind the `adgauge` command line (`main.rs` holds only
//! its argument parsing), so that other programs reach the same entry points without a process
//! in between: the fuzz targets (`fuzz/`, the suite parser among them) and Rust crates that
//! implement [`tool::Tool`] for an AD tool of their own.
//!
//! The binary keeps the process-wide pieces: the counting global allocator that
//! [`memory`] reads is installed there, so a library user measures memory only if it installs
//! [`memory::Counting`] too.

pub mod compare;
pub mod console;
pub mod endpoint;
pub mod environment;
pub mod eval;
pub mod exit;
pub mod external;
pub mod history;
pub mod interrupt;
pub mod memory;
pub mod peers;
pub mod pipeline;
pub mod protocol;
pub mod run;
pub mod serve;
pub mod sinks;
pub mod suite;
pub mod timing;
pub mod tool;
pub mod tools;
pub mod validation;

//! adgauge's end-to-end tests, one test binary (cargo links each `tests/*.rs` as a binary of its
//! own, and 30 of them took most of a fresh `cargo test`): each module is what was a binary,
//! and most run the built `adgauge` binary as a user does.
//!
//! The binary counts its allocations ([`Counting`]), which the allocator's own tests and the
//! workloads' footprint bounds measure, each in a process of its own ([`common::alone`]).

use adgauge_harness::memory::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

mod common;

mod allocations;
mod build_label;
mod check_oracle;
mod commands;
mod eval;
mod eval_ba;
mod eval_gmm;
mod eval_llsq;
mod eval_lstm;
mod external;
mod footprints;
mod fuzz_smoke;
mod gate;
mod gpu_kit;
mod gradbench_basic;
mod hardening;
mod history;
mod ht;
mod judge;
mod memory;
mod memory_limit;
mod nested;
mod nightly_script;
mod peers;
mod pipeline;
mod python_snippet;
mod python_tools;
mod query;
mod report_width;
mod results_files;
mod staged;
mod suite_selection;
mod traced;

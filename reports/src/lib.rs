//! adgauge's reports: the results schema (owned here, so that a report can be rebuilt from result
//! files alone), and later the results history, charts and the HTML report.
//!
//! This crate depends on no other adgauge crate.

pub mod charts;
pub mod columns;
pub mod gate;
pub mod html;
pub mod paired;
pub mod parquet;
pub mod query;
pub mod real;
pub mod roofline;
pub mod schema;
pub mod store;
pub mod text;
pub mod verdict;

pub use roofline::{RandomRate, Roofline};
pub use schema::{Check, Host, PARTIAL_RUN_SUFFIX, ResultRow, RunInfo, SCHEMA_VERSION, Status, Timing, case_id};

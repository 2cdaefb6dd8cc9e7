//! adgauge's reports: the results schema (owned here, so that a report can be rebuilt from result
//! files alone), and later the results history, charts and the HTML report.
//!
//! This crate depends on no other adgauge crate.

pub mod schema;

pub use schema::{Check, ResultRow, SCHEMA_VERSION, Status, Timing, case_id};

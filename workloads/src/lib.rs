//! adgauge's workloads, each written once against the op API ([`adgauge_backends::Ops`]) so
//! that every engine (primal, reverse, forward) and every device runs the same definition.
//! One workload per file.

pub mod ba;
pub mod gmm;
pub mod hist;
pub mod kmeans;
pub mod lstm;

pub use hist::{HistInputs, HistVjp, HistWorkload};

//! Derivative rules (VJP for [`crate::Reverse`], JVP for [`crate::Forward`]), one file per
//! primitive family. Each rule is written in the ops of the engine
//! it runs on (`B: Ops`), so it runs on every device and under every outer engine; each file
//! keeps its rules next to their tests.

pub mod dense;
pub mod elementwise;
pub mod hist;
pub mod indexing;
// The LSTM cell's rules are its rule kernels (composed in `adgauge_ops::composed::lstm`); only
// their tests live here.
mod lstm;
pub mod reduce;
pub mod scan;

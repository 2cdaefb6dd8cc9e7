//! The composed forms of the fused kernels: each fused primitive and rule kernel of the op API
//! written as other ops of the same engine. They are the default of a device without the fused
//! kernel, the definition a fused kernel keeps the order of operations of (so that both round
//! alike, and the conformance suite compares them bit for bit), and what an AD engine runs so
//! that an outer engine differentiates through the kernel.

pub mod dense;
pub mod elementwise;
pub mod hist;
pub mod indexing;
pub mod lstm;

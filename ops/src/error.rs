//! Errors of the op API. Every op returns `Result`: bad user input that reaches a device (an
//! out-of-range gather index, mismatched lengths, a dtype mix) and device failures are values,
//! never panics.

use crate::{DType, IndexDType};

/// What can go wrong when an op runs.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum OpError {
    /// Two operands disagree on length or shape.
    #[error("shape mismatch in {op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// Two operands have different element types.
    #[error("dtype mismatch in {op}: {left} vs {right}")]
    DType { op: &'static str, left: DType, right: DType },
    /// A gather that requires in-range indices met one outside `[0, len)`.
    #[error("{op}: index {index} at position {position} is outside [0, {len})")]
    IndexOutOfRange { op: &'static str, index: i64, position: usize, len: usize },
    /// An index tensor of `dtype` was asked to hold a value it cannot (i32: outside
    /// `[-2^31, 2^31)`).
    #[error("index {value} at position {position} does not fit {dtype} (use i64 indices)")]
    IndexOverflow { position: usize, value: i64, dtype: IndexDType },
    /// The op exists but not with these arguments (an unsupported rule, dtype or operator).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The op has no derivative rule for a tracked input.
    #[error("{0} has no derivative rule in this engine")]
    NotDifferentiable(String),
    /// A tensor from another engine, tape or device was passed in.
    #[error("foreign tensor: {0}")]
    Foreign(String),
    /// The device itself failed (driver error, out of memory, ...).
    #[error("device error: {0}")]
    Device(String),
}

/// Result alias used throughout the op API.
pub type Result<T, E = OpError> = std::result::Result<T, E>;

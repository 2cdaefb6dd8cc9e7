//! The base of every op family: the engine's tensor types, creation, read-back and layout.
//! Tensors made here are constants (no AD engine tracks them).

use crate::{DType, IndexDType, Result};

/// Shape and dtype of a value tensor.
pub trait TensorMeta {
    fn shape(&self) -> &[usize];
    fn dtype(&self) -> DType;
    fn numel(&self) -> usize {
        self.shape().iter().product()
    }
}

/// Length and dtype of an index tensor (always one-dimensional).
pub trait IndexMeta {
    fn len(&self) -> usize;
    fn index_dtype(&self) -> IndexDType;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Tensor types, creation, read-back and layout: what every other op family builds on. Ops take
/// `&self` and return new tensors; tensors are immutable, cheap-to-clone handles.
pub trait TensorOps: Clone + 'static {
    /// A value tensor (f32 or f64).
    type T: Clone + TensorMeta + 'static;
    /// An index tensor (i32 or i64, one-dimensional).
    type I: Clone + IndexMeta + 'static;

    /// A short name for the engine stack, e.g. `reverse(cpu)`.
    fn engine_name(&self) -> String;

    /// Whether this engine's tensors may carry derivatives (an AD engine, or anything not known
    /// to hold values alone). A rule whose extra work only feeds the tangents of results that
    /// are exactly 0 (`*`'s bins with a zero factor) skips it where this is false: a device, or
    /// a trace of one, which nothing differentiates.
    fn carries_derivatives(&self) -> bool {
        true
    }

    // ---- creation and read-back (constants; never tracked) ----
    /// A tensor of `dtype` from f64 data (rounded to the dtype).
    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<Self::T>;
    /// A tensor filled with one value.
    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<Self::T>;
    /// An index tensor of `dtype`; an entry that `dtype` cannot hold (i32: outside
    /// `[-2^31, 2^31)`) is an [`crate::OpError::IndexOverflow`] naming its position and value.
    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<Self::I>;
    /// An i64 index tensor (what workloads that build positions internally use).
    fn index(&self, data: &[i64]) -> Result<Self::I> {
        self.index_as(data, IndexDType::I64)
    }
    /// The values of a tensor (primal values, for AD engines), widened to f64.
    fn to_vec(&self, t: &Self::T) -> Result<Vec<f64>>;
    /// The entries of an index tensor, widened to i64.
    fn index_to_vec(&self, i: &Self::I) -> Result<Vec<i64>>;

    // ---- layout ----
    /// Same data, new shape with the same number of elements.
    fn reshape(&self, t: &Self::T, shape: &[usize]) -> Result<Self::T>;

    /// Zeros of `t`'s shape and dtype.
    fn zeros_like(&self, t: &Self::T) -> Result<Self::T> {
        self.full(t.shape(), 0.0, t.dtype())
    }
    /// A one-element tensor of `dtype`.
    fn scalar(&self, value: f64, dtype: DType) -> Result<Self::T> {
        self.full(&[1], value, dtype)
    }
}

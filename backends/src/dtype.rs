//! Element types. Values are `f32` or `f64` (validation in f64, GPU benchmarks default to f32);
//! indices are always `i64`. Tensors carry their dtype at run time (as candle's storage does) so
//! one code path serves both; kernels are written once, generic over [`Elem`].

use std::fmt;
use std::str::FromStr;

use num_traits::Float;

/// Run-time element type of a value tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 2] = [DType::F32, DType::F64];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }

    /// Machine epsilon of the type.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F32 => f32::EPSILON as f64,
            DType::F64 => f64::EPSILON,
        }
    }

    /// Rounds an f64 to the nearest value of this type (and back to f64).
    pub fn round(self, x: f64) -> f64 {
        match self {
            DType::F32 => x as f32 as f64,
            DType::F64 => x,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(DType::F32),
            "f64" => Ok(DType::F64),
            other => Err(format!("unknown dtype '{other}' (expected f32 or f64)")),
        }
    }
}

/// A value element type that kernels are generic over.
pub trait Elem: Float + Default + Send + Sync + fmt::Debug + fmt::Display + 'static {
    const DTYPE: DType;
    fn of_f64(x: f64) -> Self;
    fn as_f64(self) -> f64;
    /// A general operator's functions for this type.
    fn general_fns(op: &crate::GeneralOp) -> &crate::general::GeneralFns<Self>;
}

impl Elem for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn of_f64(x: f64) -> Self {
        x as f32
    }
    #[inline]
    fn as_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn general_fns(op: &crate::GeneralOp) -> &crate::general::GeneralFns<Self> {
        &op.f32
    }
}

impl Elem for f64 {
    const DTYPE: DType = DType::F64;
    #[inline]
    fn of_f64(x: f64) -> Self {
        x
    }
    #[inline]
    fn as_f64(self) -> f64 {
        self
    }
    #[inline]
    fn general_fns(op: &crate::GeneralOp) -> &crate::general::GeneralFns<Self> {
        &op.f64
    }
}

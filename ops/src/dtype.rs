//! Element types. Values are `f32` or `f64` (validation in f64, GPU benchmarks default to f32);
//! indices are `i32` or `i64` ([`IndexDType`]). Tensors carry their dtype at run time (as
//! candle's storage does) so one code path serves both; kernels are written once, generic over
//! [`Elem`] and [`IndexElem`].

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

/// Run-time element type of an index tensor. `i32` halves the bytes a histogram reads for its
/// indices (JAX's and PyTorch's usual choice); `i64` holds any position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexDType {
    I32,
    I64,
}

impl IndexDType {
    pub const ALL: [IndexDType; 2] = [IndexDType::I32, IndexDType::I64];

    pub fn name(self) -> &'static str {
        match self {
            IndexDType::I32 => "i32",
            IndexDType::I64 => "i64",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            IndexDType::I32 => 4,
            IndexDType::I64 => 8,
        }
    }

    /// Does `value` fit this type?
    pub fn holds(self, value: i64) -> bool {
        match self {
            IndexDType::I32 => i32::try_from(value).is_ok(),
            IndexDType::I64 => true,
        }
    }

    /// The first entry of `data` this type cannot hold, as an [`crate::OpError::IndexOverflow`]
    /// naming its position and value.
    pub fn check(self, data: &[i64]) -> crate::Result<()> {
        if self == IndexDType::I64 {
            return Ok(());
        }
        match data.iter().position(|&v| !self.holds(v)) {
            Some(position) => Err(crate::OpError::IndexOverflow { position, value: data[position], dtype: self }),
            None => Ok(()),
        }
    }
}

impl fmt::Display for IndexDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IndexDType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "i32" => Ok(IndexDType::I32),
            "i64" => Ok(IndexDType::I64),
            other => Err(format!("unknown index dtype '{other}' (expected i32 or i64)")),
        }
    }
}

/// An index element type that kernels are generic over: the hot loops read `Self` (4 bytes for
/// `i32`) and widen each entry to i64 in a register.
pub trait IndexElem: Copy + Default + PartialEq + Send + Sync + fmt::Debug + 'static {
    const DTYPE: IndexDType;
    /// The entry, widened.
    fn idx(self) -> i64;
    /// An entry from a value known to fit (positions below a length this type holds).
    fn of_idx(v: i64) -> Self;
    /// The bin this entry names when it lies in `[0, k)`.
    #[inline(always)]
    fn bin(self, k: usize) -> Option<usize> {
        let b = self.idx();
        if (b as u64) < k as u64 { Some(b as usize) } else { None }
    }
}

impl IndexElem for i32 {
    const DTYPE: IndexDType = IndexDType::I32;
    #[inline(always)]
    fn idx(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn of_idx(v: i64) -> Self {
        v as i32
    }
}

impl IndexElem for i64 {
    const DTYPE: IndexDType = IndexDType::I64;
    #[inline(always)]
    fn idx(self) -> i64 {
        self
    }
    #[inline(always)]
    fn of_idx(v: i64) -> Self {
        v
    }
}

//! adgauge's op API: what workloads are written against, what every device implements and what
//! the AD engines decorate. One op family per file (burn's layout):
//! [`TensorOps`] (tensor types, creation, read-back, layout) under [`ElementwiseOps`],
//! [`ReduceOps`], [`IndexOps`], [`HistOps`], [`ScanOps`] and [`DenseOps`], each with its
//! conveniences as provided methods, and [`RuleKernels`], the fused kernels the derivative rules
//! call. [`Ops`] is all of them at once: workloads and rules take `B: Ops`.
//!
//! A device implements every family directly — running ops on a device *is* primal evaluation,
//! so the `Primal` engine is the device itself ([`Primal`]). The AD engines are decorators over
//! any `Ops` (as burn's `Autodiff<B>` is over a backend, in the crate `adgauge-ad`): `Reverse` records a tape and
//! applies each op's VJP rule, written in the inner engine's ops, so every rule runs on every
//! device, and engines nest (`Reverse<Forward<Cpu>>` is forward-over-reverse) without
//! perturbation confusion, because each nesting level is a distinct type with its own tangents.
//! A decorator implements the six differentiable families with their rules and [`Decorator`];
//! it gets [`RuleKernels`] from one blanket implementation that runs the inner engine's kernel
//! on untracked inputs, so a new rule kernel touches neither decorator.
//!
//! No family has a default body that computes on the host: a provided method composes other
//! ops of the same engine, and a device that lacks a primitive returns
//! [`OpError::Unsupported`] naming it. This crate depends on no other adgauge crate, so no op
//! family can name a device or an engine.
//!
//! Value tensors (`T`) are differentiable; index tensors (`I`, i64) never are.
//!
//! Beside the op families: [`DType`] and the index dtypes, [`OpError`], the shape arithmetic
//! devices and rules share ([`shape`]), associative operators as data ([`GeneralOp`]), the
//! sequential f64 reference [`oracle`], the [`Device`] trait the harness times through, and the
//! composed forms of the rule kernels ([`composed`]), which are both a device's default and the
//! reference its fused kernels are tested against.

pub mod checks;
pub mod composed;
mod dense;
pub mod device;
mod dtype;
mod elementwise;
mod error;
pub mod general;
mod hist;
mod index;
pub mod oracle;
mod reduce;
mod rule_kernels;
mod scan;
pub mod shape;
mod tensor;

pub use composed::hist::Relative;
pub use dense::DenseOps;
pub use device::{Device, DeviceMemory, DeviceStatus, TraceCell, Transfers};
pub use dtype::{DType, Elem, IndexDType, IndexElem};
pub use elementwise::{BinaryOp, ElementwiseOps, Operand, UnaryOp};
pub use error::{OpError, Result};
pub use general::GeneralOp;
pub use hist::{Extremum, HistOp, HistOps, HistRule};
pub use index::{IndexOps, OutOfRange};
pub use reduce::ReduceOps;
pub use rule_kernels::{ChunkedHist, Decorator, RuleKernels};
pub use scan::{ScanOps, ScanSpec};
pub use tensor::{IndexMeta, TensorMeta, TensorOps};

/// The op API's traits, for calling ops on a concrete engine (`use adgauge_ops::prelude::*`);
/// code generic over `B: Ops` needs none of them.
pub mod prelude {
    pub use crate::{
        DenseOps, ElementwiseOps, HistOps, IndexMeta, IndexOps, Ops, ReduceOps, RuleKernels, ScanOps, TensorMeta,
        TensorOps,
    };
}

/// The whole op API: every op family and the rule kernels. Implemented for every engine that
/// implements them all; nothing implements it by hand.
pub trait Ops: ElementwiseOps + ReduceOps + IndexOps + HistOps + ScanOps + DenseOps + RuleKernels {}

impl<E: ElementwiseOps + ReduceOps + IndexOps + HistOps + ScanOps + DenseOps + RuleKernels> Ops for E {}

/// The primal engine: a device runs ops directly, so primal evaluation is the device itself.
pub type Primal<D> = D;

//! The op API that workloads are written against, one op family per file (burn's layout):
//! [`TensorOps`] (tensor types, creation, read-back, layout) under [`ElementwiseOps`],
//! [`ReduceOps`], [`IndexOps`], [`HistOps`], [`ScanOps`] and [`DenseOps`], each with its
//! conveniences as provided methods, and [`RuleKernels`], the fused kernels the derivative rules
//! call. [`Ops`] is all of them at once: workloads and rules take `B: Ops`.
//!
//! A device implements every family directly — running ops on a device *is* primal evaluation,
//! so the `Primal` engine is the device itself ([`Primal`]). The AD engines are decorators over
//! any `Ops` (as burn's `Autodiff<B>` is over a backend): [`crate::Reverse`] records a tape and
//! applies each op's VJP rule, written in the inner engine's ops, so every rule runs on every
//! device, and engines nest (`Reverse<Forward<Cpu>>` is forward-over-reverse) without
//! perturbation confusion, because each nesting level is a distinct type with its own tangents.
//! A decorator implements the six differentiable families with their rules and [`Decorator`];
//! it gets [`RuleKernels`] from one blanket implementation that runs the inner engine's kernel
//! on untracked inputs, so a new rule kernel touches neither decorator.
//!
//! No family has a default body that computes on the host: a provided method composes other
//! ops of the same engine, and a device that lacks a primitive returns
//! [`crate::OpError::Unsupported`] naming it. The ops modules never name a device.
//!
//! Value tensors (`T`) are differentiable; index tensors (`I`, i64) never are.

mod dense;
mod elementwise;
mod hist;
mod index;
mod reduce;
mod rule_kernels;
mod scan;
mod tensor;

pub use dense::DenseOps;
pub use elementwise::{BinaryOp, ElementwiseOps, Operand, UnaryOp};
pub use hist::{Extremum, HistOp, HistOps};
pub use index::{IndexOps, OutOfRange};
pub use reduce::ReduceOps;
pub use rule_kernels::{ChunkedHist, Decorator, RuleKernels};
pub use scan::{ScanOps, ScanSpec};
pub use tensor::{IndexMeta, TensorMeta, TensorOps};

/// The whole op API: every op family and the rule kernels. Implemented for every engine that
/// implements them all; nothing implements it by hand.
pub trait Ops: ElementwiseOps + ReduceOps + IndexOps + HistOps + ScanOps + DenseOps + RuleKernels {}

impl<E: ElementwiseOps + ReduceOps + IndexOps + HistOps + ScanOps + DenseOps + RuleKernels> Ops for E {}

/// The primal engine: a device runs ops directly, so primal evaluation is the device itself.
pub type Primal<D> = D;

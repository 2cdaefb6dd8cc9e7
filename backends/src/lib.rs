//! adgauge's backends: devices that execute array primitives, the op API workloads are written
//! against, and the AD engines that give that API its modes.
//!
//! * [`Ops`] is the op API: one trait per op family ([`TensorOps`], [`ElementwiseOps`],
//!   [`ReduceOps`], [`IndexOps`], [`HistOps`], [`ScanOps`], [`DenseOps`]) and the fused
//!   [`RuleKernels`] of the derivative rules. A [`Device`] implements it directly, so primal
//!   evaluation runs on the device itself ([`Primal`]); [`prelude`] brings the traits into scope
//!   for calls on a concrete engine. [`shape`] holds the shape arithmetic devices and ops share.
//! * [`Forward`] decorates any `Ops` with tangents (dual numbers) and applies per-primitive JVP
//!   rules; `Reverse<Forward<D>>` (forward over reverse) gives Hessian-vector products.
//! * [`GeneralOp`] describes an associative operator as data (`logaddexp`, `hypot`, ...); it
//!   plugs into reductions, scans and `reduce_by_index` as [`HistOp::General`].
//! * [`Reverse`] decorates any `Ops` with a tape and applies per-primitive VJP rules
//!   (see [`rules`]); rules are written in the inner engine's ops, so they run on every device.
//! * [`oracle`] is a sequential f64 reference straight from the semantics, used by tests and by
//!   the harness's validation.
//!
//! * [`gpu::KernelDevice`] implements the op API once over a small kernel runtime; the
//!   [`OpenCl`] and [`Cuda`] devices are it over their runtimes, running one shared kernel
//!   source ([`kernel_source`]).
//!
//! This crate depends on no other adgauge crate.

mod checks;
pub mod cpu;
pub mod cuda;
pub mod device;
mod dtype;
mod error;
pub mod forward;
pub mod general;
pub mod gpu;
pub mod kernel_source;
pub mod opencl;
mod ops;
pub mod oracle;
pub mod registry;
pub mod reverse;
pub mod rules;
pub mod shape;
pub mod sizes;
pub mod traced;

pub use cpu::Cpu;
pub use cpu::staged::CpuStaged;
pub use cuda::Cuda;
pub use device::{Device, DeviceMemory, DeviceStatus, TraceCell, Transfers, probe_devices};
pub use dtype::{DType, Elem, IndexDType, IndexElem};
pub use error::{OpError, Result};
pub use forward::{Dual, Forward};
pub use general::GeneralOp;
pub use opencl::OpenCl;
pub use ops::{
    BinaryOp, ChunkedHist, Decorator, DenseOps, ElementwiseOps, Extremum, HistOp, HistOps, IndexMeta, IndexOps,
    Operand, Ops, OutOfRange, Primal, ReduceOps, RuleKernels, ScanOps, ScanSpec, TensorMeta, TensorOps, UnaryOp,
};

/// The op API's traits, for calling ops on a concrete engine (`use adgauge_backends::prelude::*`);
/// code generic over `B: Ops` needs none of them.
pub mod prelude {
    pub use crate::ops::{
        DenseOps, ElementwiseOps, HistOps, IndexMeta, IndexOps, Ops, ReduceOps, RuleKernels, ScanOps, TensorMeta,
        TensorOps,
    };
}
pub use registry::{AnyDevice, DEVICES, DeviceKind, device_kind, device_names, open_device};
pub use reverse::{Grads, Reverse, Var};
pub use rules::hist::HistRule;
pub use traced::Traced;

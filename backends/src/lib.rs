//! adgauge's backends, as workloads and the harness see them: one facade over the crates that
//! follow the layers of the engine (docs/ARCHITECTURE.md).
//!
//! * `adgauge-ops`: the op API ([`Ops`], one trait per op family, and the fused [`RuleKernels`]),
//!   dtypes, errors, shapes, general operators ([`GeneralOp`]), the f64 [`oracle`], the [`Device`]
//!   trait and the composed forms of the fused kernels ([`composed`]).
//! * `adgauge-ad`: the AD engines [`Forward`] and [`Reverse`], decorators over any `Ops`, and
//!   their per-primitive [`rules`]. It depends on the op API only.
//! * `adgauge-cpu`: the CPU device ([`Cpu`], and [`CpuStaged`], which fuses elementwise chains).
//! * `adgauge-kernels`: the kernel device over one shared kernel source ([`gpu::KernelDevice`]),
//!   as [`OpenCl`] and [`Cuda`].
//!
//! This crate adds what needs several of them: the device registry ([`DEVICES`], [`AnyDevice`]),
//! the traced wrapper ([`Traced`], which records a timed body's ops once and replays them) and the
//! list of size switches ([`sizes`]) that `check` sweeps. The devices and the engines never see
//! each other: the compiler keeps the layers apart, since none of those crates depends on
//! another but the op API.

pub mod registry;
pub mod sizes;
pub mod traced;

pub use adgauge_ad::{Dual, Forward, Grads, Reverse, Var, forward, reverse, rules};
pub use adgauge_cpu as cpu;
pub use adgauge_cpu::{Cpu, CpuStaged};
pub use adgauge_kernels::{Cuda, OpenCl, cuda, gpu, kernel_source, opencl};
pub use adgauge_ops::*;
pub use registry::{AnyDevice, DEVICES, DeviceKind, device_kind, device_names, open_device, probe_devices};
pub use traced::Traced;

// The op API under the paths this crate's code names it by (`crate::ops::TensorOps`).
use adgauge_ops as ops;

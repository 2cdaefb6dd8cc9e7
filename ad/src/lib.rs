//! adgauge's AD engines: decorators over any engine of the op API (`adgauge-ops`), as burn's
//! `Autodiff<B>` is over a backend.
//!
//! * [`Forward`] decorates any `Ops` with tangents (dual numbers) and applies per-primitive JVP
//!   rules; `Reverse<Forward<D>>` (forward over reverse) gives Hessian-vector products.
//! * [`Reverse`] decorates any `Ops` with a tape and applies per-primitive VJP rules.
//! * [`rules`]: the rules, one file per op family, written in the inner engine's ops, so that they
//!   run on every device and under every outer engine.
//!
//! This crate depends on the op API only: the compiler keeps the engines off every device, and a
//! device off the engines. The rules' tests run on the CPU device (a dev-dependency).

pub mod forward;
pub mod reverse;
pub mod rules;

pub use forward::{Dual, Forward};
pub use reverse::{Grads, Reverse, Var};

// The op API under the paths the engines and rules name it by (`crate::HistOp`,
// `crate::ops::TensorOps`, `crate::prelude::*`): it is this crate's whole vocabulary.
use adgauge_ops as ops;
#[allow(unused_imports)]
use adgauge_ops::*;

// The rules' tests run on the CPU device.
#[cfg(test)]
use adgauge_cpu::{self as cpu, Cpu};

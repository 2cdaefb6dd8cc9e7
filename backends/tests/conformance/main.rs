//! Conformance suite: every primitive and every `reduce_by_index` rule (reverse: auto, special,
//! general-sort, general-chunked; forward) on every available device, against the CPU device
//! and the sequential oracle, for f32 and f64, on adversarial inputs (ties with dest, 0/1/2
//! zeros in a bin, out-of-range indices -1 and >= k, empty bins, n = 0, k = 1) and on larger
//! random ones (both histogram strategies, many chunks).
//!
//! The device tests are one suite instantiated per kernel device (`opencl::*`, `cuda::*`, see
//! `device_suite!`). Devices that cannot start are skipped with the reason printed, unless
//! `ADGAUGE_REQUIRE` (comma-separated) names them: then the skip is a failure. CUDA runs only
//! where a CUDA device opens; CI (no GPU) runs OpenCL on PoCL, which executes the same kernel
//! source.
//!
//! One test binary, a module per family of checks.

use adgauge_backends::cpu::CpuTensor;
use adgauge_backends::general::{HYPOT, LOGADDEXP};
use adgauge_backends::gpu::{KernelDevice, KernelRuntime};
use adgauge_backends::prelude::*;
use adgauge_backends::traced::Traceable;
use adgauge_backends::{
    BinaryOp, Cpu, CpuStaged, DType, Device, DeviceMemory, Extremum, Forward, HistOp, HistRule, IndexDType, OpError,
    Operand, Ops, OutOfRange, Result, Reverse, ScanSpec, TensorMeta, TraceCell, Traced, Transfers, UnaryOp, oracle,
};

mod cpu;
mod dense;
mod hist;
mod kernel;
mod primitives;
mod staged;
mod support;
mod traced;

use dense::*;
use hist::*;
use primitives::*;
use staged::*;
use support::*;

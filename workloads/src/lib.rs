//! adgauge's workloads, each written once against the op API ([`adgauge_backends::Ops`]) so
//! that every engine (primal, reverse, forward) and every device runs the same definition.
//!
//! One workload per file, each implementing [`Workload`] (see [`workload`] for what that covers:
//! the suite schema, seeded generation, timed evaluation, validation, `eval`'s JSON), and one
//! line in [`registry`]: the harness finds workloads only through it.

pub mod ba;
pub mod det;
pub mod gmm;
pub mod hello;
pub mod hist;
pub mod ht;
pub mod json;
pub mod kmeans;
pub mod llsq;
pub mod lse;
pub mod lstm;
pub mod nested;
pub mod objective;
pub mod ode;
pub mod particle;
pub mod primitives;
pub mod saddle;
pub mod validate;
pub mod workload;

pub use hist::{HistInputs, HistVjp, HistWorkload};
pub use workload::{
    CheckKind, CheckSettings, Comparison, EvalOption, EvalRequest, FlatFn, FullJacobian, GradbenchCall, Mode,
    ParamKind, ParamSpec, Params, Prepared, Problem, Remote, RemoteCall, Validation, Value, WResult, Workload,
    WorkloadError,
};

/// Every workload, in the order listings, `adgauge check` and the docs use. Adding a workload is
/// one file and one line here.
pub fn registry() -> &'static [&'static dyn Workload] {
    &[
        &hist::HistFamily,
        &kmeans::Kmeans,
        &gmm::Gmm,
        &lstm::Lstm,
        &ba::Ba,
        &llsq::Llsq,
        &ht::Ht,
        &hello::Hello,
        &lse::Lse,
        &det::Det,
        &ode::Ode,
        &particle::Particle,
        &saddle::Saddle,
    ]
}

/// Every fault `check --inject-fault` can plant, each named by the workload that reads it; the
/// harness takes the list from here so that it never names a workload itself.
pub const FAULTS: &[&str] = &[hist::DROP_DEST_ADJOINT, hist::DROP_DEST_PRIMAL, nested::CONFUSED_NESTING];

/// The workload that answers to `name` (a family's suite tag, or one of its workload names).
pub fn find(name: &str) -> Option<&'static dyn Workload> {
    registry().iter().copied().find(|w| w.family() == name || w.names().iter().any(|n| n == name))
}

/// Every workload name (`eval`, `check --workload`), for messages listing the valid ones.
pub fn all_names() -> Vec<String> {
    registry().iter().flat_map(|w| w.check_names()).collect()
}

/// The workload that serves GradBench module `module`.
pub fn by_module(module: &str) -> Option<&'static dyn Workload> {
    registry().iter().copied().find(|w| w.gradbench_module() == Some(module))
}

/// Every suite tag (`workload:` in a suite entry).
pub fn families() -> Vec<&'static str> {
    registry().iter().map(|w| w.family()).collect()
}

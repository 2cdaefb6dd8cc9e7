//! Runs cases: validation at small sizes, then timing and peak memory at the case's size. A case
//! that errors or panics becomes an error row and the run goes on; a case past its time limit
//! stops at the next phase boundary with status `timeout`.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use adgauge_backends::{DType, Device, HistRule, OpError};
use adgauge_datasets::hist::{HistData, generate};
use adgauge_reports::{Check, ResultRow, Status, Timing};

use crate::hist_case::HistFlat;
use crate::memory::peak_during;
use crate::suite::{CaseSpec, Mode, Suite};
use crate::timing::{Budget, measure};
use crate::validation::{self, CheckKind, Outcome};

/// What to do with each case (a suite's settings).
#[derive(Clone, Debug)]
pub struct Options {
    pub time: bool,
    pub budget: Budget,
    /// Per-case time limit.
    pub case_limit: Duration,
    /// Tolerance overrides: (check, dtype) -> tolerance.
    pub tolerances: BTreeMap<(CheckKind, DType), f64>,
    /// Fault injection (tests of the validator): drop dest's adjoint.
    pub drop_dest_adjoint: bool,
}

impl Options {
    pub fn from_suite(suite: &Suite) -> Options {
        Options {
            time: true,
            budget: suite.budget,
            case_limit: suite.case_limit,
            tolerances: suite.tolerances.clone(),
            drop_dest_adjoint: false,
        }
    }
}

/// Validation sizes: large enough for every bin to see several elements, small enough for
/// finite differences with well-separated values and for a full Jacobian.
const CHECK_N: usize = 2000;
const CHECK_K: usize = 64;
const JACOBIAN_N: usize = 40;
const JACOBIAN_K: usize = 6;

pub fn empty_row(threads: usize, spec: &CaseSpec) -> ResultRow {
    let (workload, dtype) = (spec.workload.name(), spec.dtype.name());
    ResultRow::unmeasured(&workload, spec.params(), &spec.backend, dtype, spec.rule.name(), threads, spec.seed)
}

/// Whether an error says the rule or mode is not supported (rather than broken).
pub fn is_unsupported(e: &anyhow::Error) -> bool {
    e.chain().any(|c| matches!(c.downcast_ref::<OpError>(), Some(OpError::Unsupported(_))))
}

/// Fault injection for testing crash isolation: a case whose id contains the value of this
/// variable aborts the process, as a driver segfault would.
pub const CRASH_ENV: &str = "ADGAUGE_INJECT_CRASH";

/// Runs one case; never panics.
pub fn run_case<D: Device>(cpu: &D, spec: &CaseSpec, opts: &Options) -> ResultRow {
    if std::env::var(CRASH_ENV).is_ok_and(|pat| !pat.is_empty() && spec.id().contains(&pat)) {
        eprintln!("{CRASH_ENV}: aborting in case {}", spec.id());
        std::process::abort();
    }
    let mut row = empty_row(cpu.threads(), spec);
    if spec.backend != cpu.engine_name() {
        // The caller picks the device by the case's backend; a mismatch means it could not
        // open that backend: report why it is unavailable.
        return unavailable_row(row, &spec.backend);
    }
    let started = Instant::now();
    let compiled_before = cpu.kernel_compile_time();
    let outcome = catch_unwind(AssertUnwindSafe(|| run_phases(cpu, spec, opts, started, &mut row)));
    row.compile_s = compile_seconds(cpu, compiled_before);
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            // A rule or mode the workload does not support is a skip, not a failure (e.g. the
            // `special` rule of an operator without a total form).
            row.status = if is_unsupported(&e) { Status::Skipped } else { Status::Error };
            row.message = Some(format!("{e:#}"));
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            row.status = Status::Error;
            row.message = Some(format!("panicked: {what}"));
        }
    }
    row
}

/// `row` skipped because `backend` cannot run, with the probe's reason.
pub fn unavailable_row(mut row: ResultRow, backend: &str) -> ResultRow {
    let why = adgauge_backends::probe_devices()
        .into_iter()
        .find(|d| d.name == backend)
        .map(|d| if d.available { "could not be opened".to_string() } else { d.detail })
        .unwrap_or_else(|| format!("unknown backend '{backend}'"));
    row.status = Status::Skipped;
    row.message = Some(format!("backend {backend} unavailable: {why}"));
    row
}

/// Seconds `device` spent compiling kernels since it reported `before` (None on devices that
/// compile nothing).
pub fn compile_seconds<D: Device>(device: &D, before: Option<std::time::Duration>) -> Option<f64> {
    Some(device.kernel_compile_time()?.saturating_sub(before?).as_secs_f64())
}

fn run_phases<D: Device>(
    cpu: &D,
    spec: &CaseSpec,
    opts: &Options,
    started: Instant,
    row: &mut ResultRow,
) -> anyhow::Result<()> {
    let over = |row: &mut ResultRow, phase: &str| {
        if started.elapsed() > opts.case_limit {
            row.status = Status::Timeout;
            row.message = Some(format!("time limit of {:?} reached before {phase}", opts.case_limit));
            true
        } else {
            false
        }
    };
    if spec.validate {
        let mut outcomes = validate(cpu, spec, opts.drop_dest_adjoint)?;
        for o in &mut outcomes {
            if let Some(&t) = opts.tolerances.get(&(o.kind, spec.dtype)) {
                o.tolerance = t;
            }
        }
        record_checks(row, &outcomes);
    }
    if opts.time {
        if over(row, "timing") {
            return Ok(());
        }
        let data = generate(&spec.workload.spec(spec.n, spec.k, spec.dist, spec.out_of_range, spec.seed));
        let (primal, vjp, jvp) = time_case(cpu, spec, &data, &opts.budget)?;
        (row.primal, row.vjp, row.jvp) = (primal, vjp, jvp);
        if over(row, "memory") {
            return Ok(());
        }
        let (p, v, j) = memory_case(cpu, spec, &data)?;
        (row.primal_peak_bytes, row.vjp_peak_bytes, row.jvp_peak_bytes) = (p, v, j);
    }
    Ok(())
}

/// Adds the outcomes to the row; the first failed check makes the row `failed` with its message.
pub fn record_checks(row: &mut ResultRow, outcomes: &[Outcome]) {
    for o in outcomes {
        row.checks.push(Check {
            name: o.kind.name().into(),
            worst: o.worst,
            tolerance: o.tolerance,
            passed: o.passed(),
        });
    }
    if let Some(bad) = outcomes.iter().find(|o| !o.passed()) {
        row.status = Status::Failed;
        row.message = Some(format!("{} worst {:.3e} > tolerance {:.1e}", bad.kind.name(), bad.worst, bad.tolerance));
    }
}

/// All checks of a case at validation sizes.
pub fn validate<D: Device>(cpu: &D, spec: &CaseSpec, drop_dest_adjoint: bool) -> anyhow::Result<Vec<Outcome>> {
    let w = spec.workload;
    let dt = spec.dtype;
    let small = generate(&w.spec(spec.n.min(CHECK_N), spec.k.min(CHECK_K), spec.dist, spec.out_of_range, spec.seed));
    let mut f = HistFlat::new(cpu.clone(), w, spec.rule, dt, &small);
    f.drop_dest_adjoint = drop_dest_adjoint;
    let mut out = Vec::new();
    let fd = validation::finite_difference(&f, dt, spec.seed)?;
    out.push(validation::fd_vjp_test(&f, dt, &fd)?);
    // Against the oracle, for a random adjoint.
    let mut rng = adgauge_datasets::rng(spec.seed ^ 0x04ac1e);
    let bar: Vec<f64> = (0..small.k).map(|_| dt.round(rand::RngExt::random_range(&mut rng, -1.0..1.0))).collect();
    let got = validation::FlatFn::vjp(&f, &bar)?;
    out.push(validation::compare(CheckKind::OracleVjp, dt, &got, &f.oracle_vjp(&bar)));
    // Every other rule must agree with this one.
    let mut worst = Outcome {
        kind: CheckKind::RuleAgreement,
        worst: 0.0,
        tolerance: validation::tolerance(CheckKind::RuleAgreement, dt),
        skipped: None,
    };
    for other in HistRule::ALL.into_iter().filter(|&r| r != spec.rule) {
        let (vb, db) = match f.vjp_parts(other, &bar) {
            Ok(parts) => parts,
            Err(e) if is_unsupported(&e) => continue,
            Err(e) => return Err(e),
        };
        let theirs: Vec<f64> = vb.into_iter().chain(db).collect();
        worst.worst = worst.worst.max(validation::discrepancy(&got, &theirs));
    }
    out.push(worst);
    // Forward-mode checks need the JVP.
    if validation::FlatFn::jvp(&f, &vec![0.0; f.data.vals.len() + f.data.k]).is_ok() {
        out.push(validation::dot_product_test(&f, dt, spec.seed)?);
        out.push(validation::fd_jvp_test(&f, dt, &fd)?);
        let v: Vec<f64> = (0..f.data.vals.len() + f.data.k)
            .map(|_| dt.round(rand::RngExt::random_range(&mut rng, -1.0..1.0)))
            .collect();
        out.push(validation::compare(CheckKind::OracleJvp, dt, &validation::FlatFn::jvp(&f, &v)?, &f.oracle_jvp(&v)));
        let tiny =
            generate(&w.spec(spec.n.min(JACOBIAN_N), spec.k.min(JACOBIAN_K), spec.dist, spec.out_of_range, spec.seed));
        let mut g = HistFlat::new(cpu.clone(), w, spec.rule, dt, &tiny);
        g.drop_dest_adjoint = drop_dest_adjoint;
        out.push(validation::full_jacobian_test(&g, dt)?);
    }
    Ok(out)
}

/// Timings of the modes the case asks for, at its size, inputs resident.
fn time_case<D: Device>(
    cpu: &D,
    spec: &CaseSpec,
    data: &HistData,
    budget: &Budget,
) -> anyhow::Result<(Option<Timing>, Option<Timing>, Option<Timing>)> {
    let w = spec.workload;
    let x = w.upload(cpu, data, spec.dtype)?;
    let bar = cpu.full(&[spec.k], 1.0, spec.dtype)?;
    let primal = if spec.times(Mode::Primal) {
        Some(measure(budget, || {
            w.primal(cpu, &x)?;
            cpu.synchronize()
        })?)
    } else {
        None
    };
    let vjp = if spec.times(Mode::Vjp) {
        Some(measure(budget, || {
            w.vjp(cpu, spec.rule, &x, &bar)?;
            cpu.synchronize()
        })?)
    } else {
        None
    };
    let jvp = if spec.times(Mode::Jvp) {
        let (vd, dd) = tangents(cpu, spec, data)?;
        Some(measure(budget, || {
            w.jvp(cpu, &x, &dd, &vd)?;
            cpu.synchronize()
        })?)
    } else {
        None
    };
    Ok((primal, vjp, jvp))
}

/// Unit tangents for every value and dest entry (resident, excluded from timing).
fn tangents<D: Device>(cpu: &D, spec: &CaseSpec, data: &HistData) -> anyhow::Result<(D::T, D::T)> {
    Ok((cpu.full(&[data.vals.len()], 1.0, spec.dtype)?, cpu.full(&[data.k], 1.0, spec.dtype)?))
}

/// Peak bytes above the resident inputs of one evaluation per mode (buffer cache emptied first,
/// so that every allocation the mode needs is counted).
fn memory_case<D: Device>(
    cpu: &D,
    spec: &CaseSpec,
    data: &HistData,
) -> anyhow::Result<(Option<u64>, Option<u64>, Option<u64>)> {
    let w = spec.workload;
    let x = w.upload(cpu, data, spec.dtype)?;
    let bar = cpu.full(&[spec.k], 1.0, spec.dtype)?;
    let (vd, dd) = tangents(cpu, spec, data)?;
    let peak = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<u64> {
        cpu.trim_cache();
        let (r, bytes) = peak_during(f);
        r?;
        Ok(bytes as u64)
    };
    let primal = if spec.times(Mode::Primal) { Some(peak(&mut || Ok(w.primal(cpu, &x).map(drop)?))?) } else { None };
    let vjp =
        if spec.times(Mode::Vjp) { Some(peak(&mut || Ok(w.vjp(cpu, spec.rule, &x, &bar).map(drop)?))?) } else { None };
    let jvp = if spec.times(Mode::Jvp) { Some(peak(&mut || Ok(w.jvp(cpu, &x, &dd, &vd).map(drop)?))?) } else { None };
    cpu.trim_cache();
    Ok((primal, vjp, jvp))
}

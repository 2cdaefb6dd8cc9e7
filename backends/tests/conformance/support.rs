//! Shared by the suite's modules: opening a device, the mismatch collector, tolerances, comparisons
//! with the CPU device, and running a check for every dtype and index dtype.

use crate::*;

/// The kernel device of runtime R, or `None` (with the reason printed) when it cannot start.
pub(crate) fn open<R: KernelRuntime>() -> Option<KernelDevice<R>> {
    let name = R::ENGINE;
    match KernelDevice::<R>::new() {
        Ok(d) => Some(d),
        Err(e) => {
            adgauge_testkit::device_unavailable(name, e);
            None
        }
    }
}

pub(crate) fn cpu() -> Cpu {
    Cpu::new(Some(1)).unwrap()
}

/// Collects mismatches so one run reports all of them.
#[derive(Default)]
pub(crate) struct Fails(pub(crate) Vec<String>);

impl Fails {
    pub(crate) fn check(&mut self, what: &str, got: &[f64], want: &[f64], tol: f64) {
        if got.len() != want.len() {
            self.0.push(format!("{what}: length {} vs {}", got.len(), want.len()));
            return;
        }
        for (j, (&a, &e)) in got.iter().zip(want).enumerate() {
            let ok = a == e || (a.is_nan() && e.is_nan()) || (tol > 0.0 && (a - e).abs() <= tol * e.abs().max(1.0));
            if !ok {
                self.0.push(format!("{what}[{j}]: got {a}, want {e}"));
                return;
            }
        }
    }

    pub(crate) fn finish(self, label: &str) {
        if !self.0.is_empty() {
            let shown: Vec<&String> = self.0.iter().take(40).collect();
            panic!(
                "{label}: {} mismatches:\n{}",
                self.0.len(),
                shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
            );
        }
    }
}

pub(crate) fn tol(op: Option<HistOp>, dt: DType) -> f64 {
    if op.is_some_and(|o| o.tie_break().is_some()) {
        return 0.0;
    }
    match dt {
        DType::F32 => 2e-4,
        DType::F64 => 1e-10,
    }
}

/// Compares a device result with the CPU's; both failing is agreement (same unsupported case).
pub(crate) fn cmp<D: Ops>(
    f: &mut Fails,
    what: &str,
    d: &D,
    got: Result<D::T>,
    c: &Cpu,
    want: Result<CpuTensor>,
    t: f64,
) {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            if g.shape() != w.shape() {
                f.0.push(format!("{what}: shape {:?} vs {:?}", g.shape(), w.shape()));
            }
            f.check(what, &d.to_vec(&g).unwrap(), &c.to_vec(&w).unwrap(), t)
        }
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => f.0.push(format!("{what}: the CPU fails ({e}) but the device does not")),
        (Err(e), Ok(_)) => f.0.push(format!("{what}: device error {e}")),
    }
}

pub(crate) fn cmp_index<D: Ops>(
    f: &mut Fails,
    what: &str,
    d: &D,
    got: Result<D::I>,
    c: &Cpu,
    want: Result<<Cpu as TensorOps>::I>,
) {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            let (g, w) = (d.index_to_vec(&g).unwrap(), c.index_to_vec(&w).unwrap());
            if g != w {
                f.0.push(format!("{what}: {g:?} vs {w:?}"));
            }
        }
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => f.0.push(format!("{what}: the CPU fails ({e}) but the device does not")),
        (Err(e), Ok(_)) => f.0.push(format!("{what}: device error {e}")),
    }
}

pub(crate) fn round(dt: DType, xs: &[f64]) -> Vec<f64> {
    xs.iter().map(|&x| dt.round(x)).collect()
}

pub(crate) fn hist_ops() -> Vec<HistOp> {
    vec![HistOp::Add, HistOp::Mul, HistOp::Min, HistOp::Max, HistOp::General(&LOGADDEXP), HistOp::General(&HYPOT)]
}

/// An index-taking check run for both index dtypes (the device's indices; the CPU reference keeps
/// i64, so the CPU device's i32 kernels are held to its i64 ones), each mismatch tagged with its
/// index dtype.
pub(crate) fn both_index<D: Ops>(
    check: fn(&D, DType, IndexDType, &mut Fails),
) -> impl Fn(&D, DType, &mut Fails) + Copy {
    move |d, dt, f| {
        for it in IndexDType::ALL {
            let before = f.0.len();
            check(d, dt, it, f);
            for m in &mut f.0[before..] {
                *m = format!("[{it} indices] {m}");
            }
        }
    }
}

/// Runs `check` for both dtypes; f64 on a device without it must be reported as unsupported.
pub(crate) fn each_dtype<D: Ops>(d: &D, f64_ok: bool, label: &str, check: impl Fn(&D, DType, &mut Fails)) {
    let mut f = Fails::default();
    for dt in DType::ALL {
        if dt == DType::F64 && !f64_ok {
            match d.full(&[2], 1.0, dt) {
                Err(OpError::Unsupported(_)) => {
                    eprintln!("{label}: f64 unsupported on {} (reported as such)", d.engine_name())
                }
                other => f.0.push(format!("f64 without fp64 should be unsupported, got {:?}", other.map(|_| ()))),
            }
            continue;
        }
        check(d, dt, &mut f);
    }
    f.finish(label);
}

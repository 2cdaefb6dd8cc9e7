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

use adgauge_backends::cpu::CpuTensor;
use adgauge_backends::general::{HYPOT, LOGADDEXP};
use adgauge_backends::gpu::{KernelDevice, KernelRuntime};
use adgauge_backends::prelude::*;
use adgauge_backends::traced::Traceable;
use adgauge_backends::{
    BinaryOp, Cpu, CpuStaged, DType, Device, DeviceMemory, Extremum, Forward, HistOp, HistRule, IndexDType, OpError,
    Operand, Ops, OutOfRange, Result, Reverse, ScanSpec, TensorMeta, TraceCell, Traced, Transfers, UnaryOp, oracle,
};

/// The kernel device of runtime R, or `None` (with the reason printed) when it cannot start.
fn open<R: KernelRuntime>() -> Option<KernelDevice<R>> {
    let name = R::ENGINE;
    match KernelDevice::<R>::new() {
        Ok(d) => Some(d),
        Err(e) => {
            adgauge_testkit::device_unavailable(name, e);
            None
        }
    }
}

fn cpu() -> Cpu {
    Cpu::new(Some(1)).unwrap()
}

/// Collects mismatches so one run reports all of them.
#[derive(Default)]
struct Fails(Vec<String>);

impl Fails {
    fn check(&mut self, what: &str, got: &[f64], want: &[f64], tol: f64) {
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

    fn finish(self, label: &str) {
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

fn tol(op: Option<HistOp>, dt: DType) -> f64 {
    if op.is_some_and(|o| o.tie_break().is_some()) {
        return 0.0;
    }
    match dt {
        DType::F32 => 2e-4,
        DType::F64 => 1e-10,
    }
}

/// Compares a device result with the CPU's; both failing is agreement (same unsupported case).
fn cmp<D: Ops>(f: &mut Fails, what: &str, d: &D, got: Result<D::T>, c: &Cpu, want: Result<CpuTensor>, t: f64) {
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

fn cmp_index<D: Ops>(
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

/// A histogram case: dest, indices, values, an adjoint for the result.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    dest: Vec<f64>,
    inds: Vec<i64>,
    vals: Vec<f64>,
    hist_bar: Vec<f64>,
}

fn bar(k: usize) -> Vec<f64> {
    // One zero adjoint (bin 1) exercises the "0 where g == 0" paths.
    (0..k).map(|b| if b == 1 { 0.0 } else { 1.0 + 0.5 * b as f64 }).collect()
}

fn cases() -> Vec<Case> {
    let mut out = vec![
        // bin 0: ties with dest (2) and between elements, no zero; bin 1: one zero and a tie with
        // dest; bin 2: two zeros and a tie with dest; bin 3: one zero; bin 4: empty;
        // indices -1, 5 and 7 are out of range.
        Case {
            name: "adversarial".into(),
            dest: vec![2.0, 1.0, 3.0, 0.5, 4.0],
            inds: vec![0, 1, 2, 2, -1, 0, 5, 1, 2, 3, 7, 0, 1, 3],
            vals: vec![2.0, 0.0, 3.0, 0.0, 9.0, 1.5, 6.0, 1.0, 0.0, 0.0, -2.0, 2.0, 0.5, 0.25],
            hist_bar: bar(5),
        },
        Case {
            name: "k=1".into(),
            dest: vec![1.0],
            inds: vec![0, 0, -1, 1, 0],
            vals: vec![1.0, 0.5, 3.0, 2.0, 1.0],
            hist_bar: vec![1.5],
        },
        Case { name: "n=0".into(), dest: vec![1.0, 2.0], inds: vec![], vals: vec![], hist_bar: vec![1.0, 0.0] },
        Case {
            name: "all out of range".into(),
            dest: vec![0.5, 2.0, 1.0],
            inds: vec![-1, 3, 100, -7],
            vals: vec![1.0, 2.0, 3.0, 4.0],
            hist_bar: bar(3),
        },
    ];
    // Larger random cases: small k (local sub-histograms), large k (global atomics), many chunks,
    // and chunk rows too wide for a work-group's local memory (one work-item per chunk).
    for (n, k) in [(3000usize, 37usize), (2000, 3000), (40_000, 16), (30_000, 20_000)] {
        let inds: Vec<i64> = (0..n)
            .map(|i| {
                let h = (i as u64).wrapping_mul(2654435761) % (k as u64 + 3);
                h as i64 - 1 // -1 and k, k+1 are out of range
            })
            .collect();
        let vals: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64 * 0.25 - 1.5).collect();
        let dest: Vec<f64> = (0..k).map(|b| ((b * 31) % 7) as f64 * 0.5 - 1.0).collect();
        out.push(Case { name: format!("random n={n} k={k}"), dest, inds, vals, hist_bar: bar(k) });
    }
    out
}

/// The extreme-value case, one bin per situation the guide's Histogram rules section defines (elements of
/// the bins interleaved, so chunks and sorts move them; an out-of-range NaN and inf ignored):
/// [`EXTREME_BINS`] in order.
fn extreme_case() -> Case {
    let k = EXTREME_BINS.len();
    let mut out = Case { name: "extremes".into(), dest: vec![], inds: vec![], vals: vec![], hist_bar: vec![] };
    for (_, dest, _, g) in EXTREME_BINS {
        out.dest.push(dest);
        out.hist_bar.push(g);
    }
    let longest = EXTREME_BINS.iter().map(|b| b.2.len()).max().unwrap_or(0);
    for r in 0..longest {
        for (b, (_, _, vals, _)) in EXTREME_BINS.iter().enumerate() {
            if let Some(&v) = vals.get(r) {
                out.inds.push(b as i64);
                out.vals.push(v);
            }
        }
        if r == 0 {
            out.inds.extend([-1, k as i64]);
            out.vals.extend([f64::NAN, f64::INFINITY]);
        }
    }
    out
}

const X16: f64 = 1e16;
const X308: f64 = 1e308;
const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

/// (what, dest, values in index order, hist_bar) per bin of [`extreme_case`].
const EXTREME_BINS: [(&str, f64, &[f64], f64); 18] = [
    ("3-way tie with dest at 1e16", X16, &[X16, X16], 1.5),
    ("3-way tie of values at 1e16", 0.5, &[X16, X16, X16], 2.0),
    ("3-way tie with dest at 1e308", X308, &[X308, X308], 1.25),
    ("two +inf values", 0.5, &[INF, 1.0, INF], 1.0),
    ("a NaN value", 1.0, &[2.0, NAN, 3.0], 0.75),
    ("a NaN dest", NAN, &[1.0, 2.0], 2.5),
    ("-inf only", -INF, &[-INF, -INF], 1.0),
    ("a -inf value", 2.0, &[-INF, 1.0], 3.0),
    ("a NaN value and a zero", 1.0, &[NAN, 0.0, 5.0], 1.0),
    ("+inf then NaN", 1.0, &[INF, NAN], 0.5),
    ("+inf dest and value", INF, &[INF, 3.0], 2.0),
    ("a NaN value, hist_bar 0", 1.0, &[NAN, 2.0], 0.0),
    ("one +inf value", 3.0, &[INF, 2.0], 1.0),
    ("+inf and a zero", 2.0, &[INF, 0.0, 3.0], 0.5),
    ("a zero and -inf", 2.0, &[0.0, -INF], 1.0),
    ("+inf dest, finite values", INF, &[2.0, 3.0], -1.0),
    ("+inf value, hist_bar 0", 2.0, &[INF, 3.0], 0.0),
    ("zero dest, +inf value", 0.0, &[INF, 2.0], 1.5),
];

/// The cases the rules run: the adversarial and random ones and the extreme values.
fn rule_cases() -> Vec<Case> {
    let mut out = cases();
    out.push(extreme_case());
    out
}

/// The case adapted to an operator's domain: `*` gets values near 1 (with zeros kept) so long
/// products stay finite; hypot's bins are magnitudes.
fn for_op(c: &Case, op: HistOp) -> Case {
    let mut c = c.clone();
    if op == HistOp::Mul && c.name == "extremes" {
        // Finite products out of range (1e16 cubed in f32, 1e308 squared) are outside what `*`'s
        // rules agree on (guide, Histogram rules: keep finite products in range); infinities stay.
        let finite = |x: &f64| if x.is_finite() && x.abs() >= X16 { 2.0 } else { *x };
        c.dest = c.dest.iter().map(finite).collect();
        c.vals = c.vals.iter().map(finite).collect();
    }
    if op == HistOp::Mul && c.vals.len() > 100 {
        c.vals = c.vals.iter().enumerate().map(|(i, v)| if i % 97 == 0 { 0.0 } else { 1.0 + 0.02 * v }).collect();
    }
    if op == HistOp::General(&HYPOT) {
        c.dest = c.dest.iter().map(|x| x.abs()).collect();
        c.vals = c.vals.iter().map(|x| x.abs()).collect();
    }
    c
}

fn round(dt: DType, xs: &[f64]) -> Vec<f64> {
    xs.iter().map(|&x| dt.round(x)).collect()
}

fn hist_ops() -> Vec<HistOp> {
    vec![HistOp::Add, HistOp::Mul, HistOp::Min, HistOp::Max, HistOp::General(&LOGADDEXP), HistOp::General(&HYPOT)]
}

/// Every primitive the device implements, against the CPU device.
fn primitives<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
    let c = &cpu();
    let tag = |s: &str| format!("{} {dt} {s}", d.engine_name());
    let xs = round(dt, &[0.5, -1.25, 2.0, 0.0, -0.0, 3.5, -7.0, 1e-3, 10.0, -0.5]);
    let ys = round(dt, &[1.5, -1.25, 0.5, 2.0, 0.0, -3.5, 2.0, 4.0, 10.0, 0.25]);
    let pos: Vec<f64> = xs.iter().map(|x| x.abs() + 0.25).collect();
    let t = |v: &[f64]| (d.tensor(v, &[v.len()], dt).unwrap(), c.tensor(v, &[v.len()], dt).unwrap());
    let (x, cx) = t(&xs);
    let (y, cy) = t(&ys);
    let (p, cp) = t(&pos);
    let (one, cone) = t(&[0.75]);
    cmp(f, &tag("tensor"), d, Ok(x.clone()), c, Ok(cx.clone()), 0.0);
    cmp(f, &tag("full"), d, d.full(&[2, 3], -2.5, dt), c, c.full(&[2, 3], -2.5, dt), 0.0);
    cmp(f, &tag("full empty"), d, d.full(&[0], 1.0, dt), c, c.full(&[0], 1.0, dt), 0.0);
    cmp(f, &tag("reshape"), d, d.reshape(&x, &[2, 5]), c, c.reshape(&cx, &[2, 5]), 0.0);
    let ut = tol(None, dt);
    for op in UnaryOp::ALL {
        let (a, ca) = if matches!(op, UnaryOp::Log | UnaryOp::Sqrt) { (&p, &cp) } else { (&x, &cx) };
        cmp(f, &tag(&format!("unary {op:?}")), d, d.unary(op, a), c, c.unary(op, ca), ut);
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Min,
        BinaryOp::Max,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::Eq,
    ] {
        let (a, ca) = if op == BinaryOp::Pow { (&p, &cp) } else { (&x, &cx) };
        cmp(f, &tag(&format!("binary {op:?}")), d, d.binary(op, a, &y), c, c.binary(op, ca, &cy), ut);
        cmp(f, &tag(&format!("binary {op:?} bcast right")), d, d.binary(op, a, &one), c, c.binary(op, ca, &cone), ut);
        cmp(f, &tag(&format!("binary {op:?} bcast left")), d, d.binary(op, &one, a), c, c.binary(op, &cone, ca), ut);
    }
    // The donated forms (an operand the caller gives up, which a device may write into): the
    // values of the plain forms, whichever operand is given up and whichever broadcasts, and a
    // donor something else still holds keeps its values.
    for op in UnaryOp::ALL {
        let (a, ca) = if matches!(op, UnaryOp::Log | UnaryOp::Sqrt) { (&pos, &cp) } else { (&xs, &cx) };
        let want = c.unary(op, ca);
        cmp(f, &tag(&format!("unary_donated {op:?}")), d, d.unary_donated(op, t(a).0), c, want.clone(), ut);
        let held = t(a).0;
        cmp(f, &tag(&format!("unary_donated {op:?} held")), d, d.unary_donated(op, held.clone()), c, want, ut);
        cmp(f, &tag(&format!("unary_donated {op:?} leaves the holder")), d, Ok(held), c, Ok(ca.clone()), 0.0);
    }
    for op in [BinaryOp::Sub, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Lt, BinaryOp::Max] {
        let (a, ca) = if op == BinaryOp::Pow { (&pos, &cp) } else { (&xs, &cx) };
        let name = |s: &str| tag(&format!("binary_donated {op:?} {s}"));
        let want = c.binary(op, ca, &cy);
        cmp(f, &name("left"), d, d.binary_donated(op, t(a).0, &y, true), c, want.clone(), ut);
        cmp(f, &name("right"), d, d.binary_donated(op, t(&ys).0, &t(a).0, false), c, want.clone(), ut);
        let held = t(a).0;
        cmp(f, &name("held"), d, d.binary_donated(op, held.clone(), &y, true), c, want, ut);
        cmp(f, &name("leaves the holder"), d, Ok(held), c, Ok(ca.clone()), 0.0);
        let (o, co) = t(&[0.75]);
        cmp(f, &name("other bcast"), d, d.binary_donated(op, t(a).0, &o, true), c, c.binary(op, ca, &co), ut);
        cmp(f, &name("other bcast left"), d, d.binary_donated(op, t(a).0, &o, false), c, c.binary(op, &co, ca), ut);
        // A one-element donor cannot hold the result.
        cmp(f, &name("donor bcast"), d, d.binary_donated(op, t(&[0.75]).0, &y, true), c, c.binary(op, &co, &cy), ut);
    }
    // accumulate (a + c into a tensor the caller gives up): a tensor that something else
    // still holds keeps its values; a one-element c broadcasts and a dtype mix fails, as add.
    let sum = c.add(&cx, &cy);
    cmp(f, &tag("accumulate"), d, d.accumulate(t(&xs).0, &y), c, sum.clone(), 0.0);
    let held = t(&xs).0;
    cmp(f, &tag("accumulate held"), d, d.accumulate(held.clone(), &y), c, sum, 0.0);
    cmp(f, &tag("accumulate leaves the holder"), d, Ok(held), c, Ok(cx.clone()), 0.0);
    cmp(f, &tag("accumulate bcast"), d, d.accumulate(t(&xs).0, &one), c, c.add(&cx, &cone), 0.0);
    let other = if dt == DType::F64 { DType::F32 } else { DType::F64 };
    let (dm, cmx) = (d.tensor(&xs, &[xs.len()], other), c.tensor(&xs, &[xs.len()], other));
    if let (Ok(dm), Ok(cmx)) = (dm, cmx) {
        cmp(f, &tag("accumulate dtype mix"), d, d.accumulate(dm, &y), c, c.add(&cmx, &cy), 0.0);
    }
    let (m, cm) = t(&round(dt, &[1.0, 0.0, 0.0, 2.0, -1.0, 0.0, 1.0, 0.0, 0.5, 0.0]));
    cmp(f, &tag("select"), d, d.select(&m, &x, &y), c, c.select(&cm, &cx, &cy), 0.0);
    cmp(f, &tag("select bcast"), d, d.select(&m, &one, &y), c, c.select(&cm, &cone, &cy), 0.0);
    let idx = [3i64, -1, 0, 9, 10, 3, 2, -5, 1, 0];
    let (di, ci) = (d.index_as(&idx, it).unwrap(), c.index(&idx).unwrap());
    cmp_index(f, &tag("index"), d, Ok(di.clone()), c, Ok(ci.clone()));
    cmp(f, &tag("index_eq"), d, d.index_eq(&di, 3, dt), c, c.index_eq(&ci, 3, dt), 0.0);
    cmp(f, &tag("index_eq -1"), d, d.index_eq(&di, -1, dt), c, c.index_eq(&ci, -1, dt), 0.0);
    for op in hist_ops() {
        let (a, ca) = if op == HistOp::General(&HYPOT) { (&p, &cp) } else { (&x, &cx) };
        cmp(f, &tag(&format!("reduce {op}")), d, d.reduce(op, a), c, c.reduce(op, ca), tol(Some(op), dt));
        let (e, ce) = (d.full(&[0], 0.0, dt).unwrap(), c.full(&[0], 0.0, dt).unwrap());
        cmp(f, &tag(&format!("reduce {op} empty")), d, d.reduce(op, &e), c, c.reduce(op, &ce), 0.0);
        let big: Vec<f64> = (0..5000).map(|i| dt.round(((i * 37) % 101) as f64 * 0.01)).collect();
        let (b, cb) = t(&big);
        cmp(f, &tag(&format!("reduce {op} n=5000")), d, d.reduce(op, &b), c, c.reduce(op, &cb), tol(Some(op), dt));
        cmp(f, &tag(&format!("combine {op}")), d, d.combine(op, a, &p), c, c.combine(op, ca, &cp), ut);
        cmp(f, &tag(&format!("combine {op} bcast")), d, d.combine(op, a, &one), c, c.combine(op, ca, &cone), ut);
        for side in [Operand::Left, Operand::Right] {
            cmp(
                f,
                &tag(&format!("combine_partial {op} {side:?}")),
                d,
                d.combine_partial(op, side, a, &p),
                c,
                c.combine_partial(op, side, ca, &cp),
                ut,
            );
        }
        let (g, cg) = t(&round(dt, &[1.0, 0.0, 2.0, 0.5, 1.0, 3.0, 0.0, 1.0, 1.0, 2.0]));
        cmp(
            f,
            &tag(&format!("fold_adjoint {op}")),
            d,
            d.fold_adjoint(op, a, &p, &y, &g),
            c,
            c.fold_adjoint(op, ca, &cp, &cy, &cg),
            ut,
        );
        let k = 4;
        let (h, ch) = t(&round(dt, &[2.0, 3.0, 0.5, 1.0]));
        let (hb, chb) = t(&round(dt, &[1.0, 0.0, 2.0, -1.0]));
        cmp(
            f,
            &tag(&format!("total_form_adjoint {op}")),
            d,
            d.total_form_adjoint(op, &di, &p, &h, &hb),
            c,
            c.total_form_adjoint(op, &ci, &cp, &ch, &chb),
            ut,
        );
        for spec in
            [ScanSpec::INCLUSIVE, ScanSpec::EXCLUSIVE, ScanSpec::INCLUSIVE.flipped(), ScanSpec::EXCLUSIVE.flipped()]
        {
            let segs = [0i64, 0, 1, 1, 1, 2, 3, 3, 3, 3];
            let (ds, cs) = (d.index_as(&segs, it).unwrap(), c.index(&segs).unwrap());
            cmp(
                f,
                &tag(&format!("scan {op} {spec:?}")),
                d,
                d.scan(op, a, spec, None),
                c,
                c.scan(op, ca, spec, None),
                ut,
            );
            cmp(
                f,
                &tag(&format!("scan {op} {spec:?} segmented")),
                d,
                d.scan(op, a, spec, Some(&ds)),
                c,
                c.scan(op, ca, spec, Some(&cs)),
                ut,
            );
            if op == HistOp::Add {
                cmp(
                    f,
                    &tag(&format!("linear_recurrence {spec:?}")),
                    d,
                    d.linear_recurrence(&x, &y, spec, Some(&ds)),
                    c,
                    c.linear_recurrence(&cx, &cy, spec, Some(&cs)),
                    ut,
                );
            }
        }
        let _ = k;
    }
    // Indexing.
    let (src, csrc) = t(&round(dt, &[10.0, 20.0, 30.0, 40.0]));
    let gi = [3i64, 0, -1, 4, 2, 2, 100];
    let (dg, cg) = (d.index_as(&gi, it).unwrap(), c.index(&gi).unwrap());
    cmp(
        f,
        &tag("gather fill"),
        d,
        d.gather(&src, &dg, OutOfRange::Fill(-9.0)),
        c,
        c.gather(&csrc, &cg, OutOfRange::Fill(-9.0)),
        0.0,
    );
    match d.gather(&src, &dg, OutOfRange::Error) {
        Err(OpError::IndexOutOfRange { index: -1, position: 2, len: 4, .. }) => {}
        other => f.0.push(format!("{}: gather error: {:?}", tag(""), other.map(|_| ()))),
    }
    let ok = [3i64, 0, 1];
    let (dok, cok) = (d.index_as(&ok, it).unwrap(), c.index(&ok).unwrap());
    cmp(
        f,
        &tag("gather in range"),
        d,
        d.gather(&src, &dok, OutOfRange::Error),
        c,
        c.gather(&csrc, &cok, OutOfRange::Error),
        0.0,
    );
    // The gather's adjoint: g summed into src's shape, repeats added, out-of-range reads dropped.
    let (ga, _) = t(&round(dt, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]));
    let (_, want) = t(&[2.0, 0.0, 11.0, 1.0]);
    cmp(f, &tag("gather_adjoint"), d, d.gather_adjoint(&src, &dg, &ga), c, Ok(want), 0.0);
    let (s_src, cs_src) = (d.index_as(&[5, 6, 7, 8], it).unwrap(), c.index(&[5, 6, 7, 8]).unwrap());
    cmp_index(f, &tag("gather_index"), d, d.gather_index(&s_src, &dg), c, c.gather_index(&cs_src, &cg));
    let si = [1i64, 3, 1, -1, 4, 0, 3];
    let (dsi, csi) = (d.index_as(&si, it).unwrap(), c.index(&si).unwrap());
    let (sv, csv) = t(&round(dt, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]));
    cmp(f, &tag("scatter last wins"), d, d.scatter(&src, &dsi, &sv), c, c.scatter(&csrc, &csi, &csv), 0.0);
    let keys = [2i64, 0, 1, 2, -1, 0, 5, 1, 1];
    let (dk, ck) = (d.index_as(&keys, it).unwrap(), c.index(&keys).unwrap());
    cmp_index(f, &tag("sort_by_key"), d, d.sort_by_key(&dk, 3), c, c.sort_by_key(&ck, 3));
    let (dp, dr) = d.sort_by_key_ranked(&dk, 3).unwrap();
    let (cpm, cr) = c.sort_by_key_ranked(&ck, 3).unwrap();
    cmp_index(f, &tag("sort ranked perm"), d, Ok(dp), c, Ok(cpm));
    cmp_index(f, &tag("sort ranked ranks"), d, Ok(dr), c, Ok(cr));
}

/// Histogram primitives (raw, not through the rules) against the CPU device.
fn hist_primitives<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
    let c = &cpu();
    for case in cases() {
        for op in hist_ops() {
            let case = for_op(&case, op);
            let tag = format!("{} {dt} {} {op}", d.engine_name(), case.name);
            let (dest, vals) = (round(dt, &case.dest), round(dt, &case.vals));
            let k = dest.len();
            let dd = d.tensor(&dest, &[k], dt).unwrap();
            let cd = c.tensor(&dest, &[k], dt).unwrap();
            let dv = d.tensor(&vals, &[vals.len()], dt).unwrap();
            let cv = c.tensor(&vals, &[vals.len()], dt).unwrap();
            let (di, ci) = (d.index_as(&case.inds, it).unwrap(), c.index(&case.inds).unwrap());
            let t = tol(Some(op), dt);
            cmp(
                f,
                &format!("{tag} reduce_by_index"),
                d,
                d.reduce_by_index(&dd, op, &di, &dv),
                c,
                c.reduce_by_index(&cd, op, &ci, &cv),
                t,
            );
            if let Some(ext) = op.extremum() {
                let got = d.arg_reduce_by_index(&dd, ext, &di, &dv).unwrap();
                let want = c.arg_reduce_by_index(&cd, ext, &ci, &cv).unwrap();
                cmp(f, &format!("{tag} arg values"), d, Ok(got.0), c, Ok(want.0), 0.0);
                cmp_index(f, &format!("{tag} arg positions"), d, Ok(got.1), c, Ok(want.1));
                let w = oracle::winners(op, &dest, &case.inds, &vals);
                let gw = d.index_to_vec(&d.arg_reduce_by_index(&dd, ext, &di, &dv).unwrap().1).unwrap();
                if gw != w {
                    f.0.push(format!("{tag} winners vs oracle: {gw:?} vs {w:?}"));
                }
            }
            if op == HistOp::Mul {
                let (gp, gz, gm) = d.prod_nonzero_by_index(&di, &dv, k).unwrap();
                let (wp, wz, wm) = c.prod_nonzero_by_index(&ci, &cv, k).unwrap();
                cmp(f, &format!("{tag} prod_nonzero p"), d, Ok(gp), c, Ok(wp), t);
                cmp_index(f, &format!("{tag} prod_nonzero z"), d, Ok(gz), c, Ok(wz));
                cmp_index(f, &format!("{tag} prod_nonzero infs"), d, Ok(gm), c, Ok(wm));
                let c0: Vec<f64> = (0..k).map(|b| dt.round(1.0 + b as f64)).collect();
                let c1: Vec<f64> = (0..k).map(|b| dt.round(-2.0 + 0.5 * b as f64)).collect();
                let c2: Vec<f64> = (0..k).map(|b| dt.round(3.0 - 0.75 * b as f64)).collect();
                let [d0, d1, d2] = [&c0, &c1, &c2].map(|r| d.tensor(r, &[k], dt).unwrap());
                let [w0, w1, w2] = [&c0, &c1, &c2].map(|r| c.tensor(r, &[k], dt).unwrap());
                cmp(
                    f,
                    &format!("{tag} prod_vals_adjoint"),
                    d,
                    d.prod_vals_adjoint(&di, &dv, &d0, &d1, &d2),
                    c,
                    c.prod_vals_adjoint(&ci, &cv, &w0, &w1, &w2),
                    t,
                );
            }
            if op.tie_break().is_none() {
                let dd_dot: Vec<f64> = (0..k).map(|b| dt.round(0.5 - 0.25 * b as f64)).collect();
                let dv_dot: Vec<f64> = (0..vals.len()).map(|i| dt.round(1.0 + 0.125 * (i % 16) as f64)).collect();
                let got = d.reduce_by_index_dual(
                    &dd,
                    &d.tensor(&dd_dot, &[k], dt).unwrap(),
                    op,
                    &di,
                    &dv,
                    &d.tensor(&dv_dot, &[vals.len()], dt).unwrap(),
                );
                let want = c.reduce_by_index_dual(
                    &cd,
                    &c.tensor(&dd_dot, &[k], dt).unwrap(),
                    op,
                    &ci,
                    &cv,
                    &c.tensor(&dv_dot, &[vals.len()], dt).unwrap(),
                );
                match (got, want) {
                    (Ok(g), Ok(w)) => {
                        cmp(f, &format!("{tag} dual hist"), d, Ok(g.0), c, Ok(w.0), t);
                        cmp(f, &format!("{tag} dual tangent"), d, Ok(g.1), c, Ok(w.1), t);
                    }
                    (g, w) => f.0.push(format!("{tag} dual: {:?} vs {:?}", g.err(), w.err())),
                }
            }
        }
    }
}

struct RuleOut {
    hist: Vec<f64>,
    dest_bar: Vec<f64>,
    vals_bar: Vec<f64>,
}

fn run_rule<D: Ops>(d: &D, rule: HistRule, op: HistOp, dt: DType, it: IndexDType, c: &Case) -> Result<RuleOut> {
    let r = Reverse::new(d.clone()).with_hist_rule(rule);
    let dest = r.var(d.tensor(&c.dest, &[c.dest.len()], dt)?);
    let vals = r.var(d.tensor(&c.vals, &[c.vals.len()], dt)?);
    let ix = d.index_as(&c.inds, it)?;
    let h = r.reduce_by_index(&dest, op, &ix, &vals)?;
    let g = r.backward(&h, d.tensor(&c.hist_bar, &[c.hist_bar.len()], dt)?)?;
    Ok(RuleOut {
        hist: d.to_vec(h.value())?,
        dest_bar: d.to_vec(&g.get_or_zeros(d, &dest)?)?,
        vals_bar: d.to_vec(&g.get_or_zeros(d, &vals)?)?,
    })
}

/// Every reverse rule and the forward rule, against the CPU device and the oracle.
fn rules<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
    let c = cpu();
    for case in rule_cases() {
        for op in hist_ops() {
            let case = for_op(&case, op);
            let case = Case {
                dest: round(dt, &case.dest),
                vals: round(dt, &case.vals),
                hist_bar: round(dt, &case.hist_bar),
                ..case
            };
            let t = tol(Some(op), dt);
            // The oracle is quadratic per bin: only for cases up to a few thousand elements.
            let use_oracle = case.vals.len() <= 5000;
            let (wh, wdb, wvb) = if use_oracle {
                oracle::hist_vjp(op, &case.dest, &case.inds, &case.vals, &case.hist_bar)
            } else {
                Default::default()
            };
            for rule in HistRule::ALL {
                let tag = format!("{} {dt} {} {op} {rule}", d.engine_name(), case.name);
                let got = match run_rule(d, rule, op, dt, it, &case) {
                    Ok(g) => g,
                    Err(e) => {
                        f.0.push(format!("{tag}: {e}"));
                        continue;
                    }
                };
                let want = run_rule(&c, rule, op, dt, IndexDType::I64, &case).unwrap();
                f.check(&format!("{tag} hist vs cpu"), &got.hist, &want.hist, t);
                f.check(&format!("{tag} dest_bar vs cpu"), &got.dest_bar, &want.dest_bar, t);
                f.check(&format!("{tag} vals_bar vs cpu"), &got.vals_bar, &want.vals_bar, t);
                // The oracle runs in f64 on the rounded inputs: the f32 device is compared at
                // the f32 tolerance.
                let ot = if t == 0.0 { if dt == DType::F32 { 1e-6 } else { 0.0 } } else { t };
                if !use_oracle {
                    continue;
                }
                f.check(&format!("{tag} hist vs oracle"), &got.hist, &wh, ot);
                f.check(&format!("{tag} dest_bar vs oracle"), &got.dest_bar, &wdb, ot);
                f.check(&format!("{tag} vals_bar vs oracle"), &got.vals_bar, &wvb, ot);
            }
            // Forward mode.
            let tag = format!("{} {dt} {} {op} jvp", d.engine_name(), case.name);
            let k = case.dest.len();
            let dd: Vec<f64> = (0..k).map(|b| dt.round(0.5 - 0.25 * b as f64)).collect();
            let dv: Vec<f64> = (0..case.vals.len()).map(|i| dt.round(1.0 + 0.125 * (i % 16) as f64)).collect();
            let fw = Forward::new(d.clone());
            let de = fw.dual(d.tensor(&case.dest, &[k], dt).unwrap(), d.tensor(&dd, &[k], dt).unwrap()).unwrap();
            let va = fw
                .dual(d.tensor(&case.vals, &[dv.len()], dt).unwrap(), d.tensor(&dv, &[dv.len()], dt).unwrap())
                .unwrap();
            let ix = d.index_as(&case.inds, it).unwrap();
            match fw.reduce_by_index(&de, op, &ix, &va) {
                Ok(h) => {
                    let (wh, wdot) = if use_oracle {
                        oracle::hist_jvp(op, &case.dest, &case.inds, &case.vals, &dd, &dv)
                    } else {
                        // Large cases: the CPU device's forward rule is the reference.
                        let cf = Forward::new(c.clone());
                        let de =
                            cf.dual(c.tensor(&case.dest, &[k], dt).unwrap(), c.tensor(&dd, &[k], dt).unwrap()).unwrap();
                        let va = cf
                            .dual(
                                c.tensor(&case.vals, &[dv.len()], dt).unwrap(),
                                c.tensor(&dv, &[dv.len()], dt).unwrap(),
                            )
                            .unwrap();
                        let h = cf.reduce_by_index(&de, op, &c.index(&case.inds).unwrap(), &va).unwrap();
                        (c.to_vec(h.value()).unwrap(), c.to_vec(&cf.tangent(&h).unwrap()).unwrap())
                    };
                    let ot = if t == 0.0 && dt == DType::F32 { 1e-6 } else { t };
                    f.check(&format!("{tag} hist"), &d.to_vec(h.value()).unwrap(), &wh, ot);
                    f.check(&format!("{tag} tangent"), &d.to_vec(&fw.tangent(&h).unwrap()).unwrap(), &wdot, ot.max(t));
                }
                Err(e) => f.0.push(format!("{tag}: {e}")),
            }
        }
    }
}

/// The extreme-value semantics of the guide's Histogram rules section, derived by hand (not from the
/// oracle or a device), for every operator, every reverse rule and the forward rule on `d`:
/// three-way ties split logaddexp's adjoint 1/3 each (hypot's 1/sqrt 3) at 1e16 and 1e308;
/// +inf inputs share logaddexp's adjoint evenly (hypot's: 1/sqrt of their number each); a bin with a NaN input is NaN in every mode,
/// its inputs' adjoints NaN under `*`, logaddexp and hypot, hist_bar under `+`, and min/max's
/// adjoint goes to the first NaN (dest first); a bin whose adjoint is 0 gives 0.
fn extremes<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
    let case = extreme_case();
    let members: Vec<Vec<usize>> =
        (0..EXTREME_BINS.len()).map(|b| (0..case.inds.len()).filter(|&i| case.inds[i] == b as i64).collect()).collect();
    let third = 1.0 / 3.0;
    let lae = HistOp::General(&LOGADDEXP);
    let hyp = HistOp::General(&HYPOT);
    // (bin, weight of dest, weights of the values in index order): d hist / d input.
    let mut weights: Vec<(HistOp, usize, f64, Vec<f64>)> = vec![
        (lae, 0, third, vec![third, third]),
        (lae, 1, 0.0, vec![third, third, third]),
        (lae, 2, third, vec![third, third]),
        (lae, 3, 0.0, vec![0.5, 0.0, 0.5]),
        (lae, 6, 0.0, vec![0.0, 0.0]),
        (lae, 10, 0.5, vec![0.5, 0.0]),
        (hyp, 0, 3f64.sqrt().recip(), vec![3f64.sqrt().recip(); 2]),
        (hyp, 1, 0.0, vec![3f64.sqrt().recip(); 3]),
        (hyp, 3, 0.0, vec![2f64.sqrt().recip(), 0.0, 2f64.sqrt().recip()]),
        (hyp, 10, 2f64.sqrt().recip(), vec![2f64.sqrt().recip(), 0.0]),
    ];
    if dt == DType::F64 {
        // (1e308 is +inf in f32: there bin 2 is a tie of three +inf, which logaddexp splits
        // evenly too.)
        weights.push((hyp, 2, 3f64.sqrt().recip(), vec![3f64.sqrt().recip(); 2]));
    }
    for (i, &(what, dest, _, g)) in EXTREME_BINS.iter().enumerate() {
        if !what.contains("NaN") {
            continue;
        }
        let m = &members[i];
        for op in hist_ops() {
            // NaN propagates: `+`'s partials are 1, min/max's winner is the first NaN (dest
            // first), the other operators' partials are NaN.
            let (dest_w, vals_w): (f64, Vec<f64>) = match op {
                HistOp::Add => (1.0, vec![1.0; m.len()]),
                HistOp::Min | HistOp::Max if dest.is_nan() => (1.0, vec![0.0; m.len()]),
                HistOp::Min | HistOp::Max => {
                    let first = m.iter().position(|&j| case.vals[j].is_nan());
                    (0.0, (0..m.len()).map(|p| if Some(p) == first { 1.0 } else { 0.0 }).collect())
                }
                _ => (NAN, vec![NAN; m.len()]),
            };
            // A zero adjoint gives 0, NaN partials or not.
            let bar = |w: f64| if g == 0.0 { 0.0 } else { w * g };
            let vals_bar: Vec<f64> = vals_w.iter().map(|&w| bar(w)).collect();
            expect_bin(d, dt, it, f, &case, &members, op, i, Some(NAN), bar(dest_w), &vals_bar);
        }
    }
    for (op, bin, dw, vw) in weights {
        let g = EXTREME_BINS[bin].3;
        expect_bin(d, dt, it, f, &case, &members, op, bin, None, dw * g, &vw.iter().map(|w| w * g).collect::<Vec<_>>());
    }
    // `*` with infinite factors: each factor's adjoint is hist_bar times the absorbing product
    // of the others (bin, hist, dest_bar, vals_bar), worked out by hand.
    let mul_case = for_op(&case, HistOp::Mul);
    let mul_bins: [(usize, f64, f64, &[f64]); 10] = [
        (3, INF, INF, &[INF, INF, INF]),
        (6, -INF, INF, &[INF, INF]),
        (7, -INF, -INF, &[6.0, -INF]),
        (10, INF, INF, &[INF, INF]),
        (12, INF, INF, &[6.0, INF]),
        (13, 0.0, 0.0, &[0.0, INF, 0.0]),
        (14, 0.0, 0.0, &[-INF, 0.0]),
        (15, INF, -6.0, &[-INF, -INF]),
        (16, INF, 0.0, &[0.0, 0.0]),
        (17, 0.0, INF, &[0.0, 0.0]),
    ];
    for (bin, hist, dest_bar, vals_bar) in mul_bins {
        expect_bin(d, dt, it, f, &mul_case, &members, HistOp::Mul, bin, Some(hist), dest_bar, vals_bar);
    }
}

/// Checks one bin of the extreme case under every reverse rule and the forward rule: its hist
/// (`hist`: Some(NaN) for a NaN bin, None to skip: magnitudes are the oracle's to check) and its
/// inputs' adjoints; the forward rule's tangent with tangents 1, 2, 3, ... on dest and the values
/// is the adjoints' weighted sum (NaN where any adjoint is NaN).
#[allow(clippy::too_many_arguments)]
fn expect_bin<D: Ops>(
    d: &D,
    dt: DType,
    it: IndexDType,
    f: &mut Fails,
    case: &Case,
    members: &[Vec<usize>],
    op: HistOp,
    bin: usize,
    hist: Option<f64>,
    dest_bar: f64,
    vals_bar: &[f64],
) {
    let case = Case { dest: round(dt, &case.dest), vals: round(dt, &case.vals), ..case.clone() };
    let t = match dt {
        DType::F32 => 1e-6,
        DType::F64 => 1e-14,
    };
    let tag = |what: &str| format!("{} {dt} extremes bin {bin} ({}) {op} {what}", d.engine_name(), EXTREME_BINS[bin].0);
    let m = &members[bin];
    for rule in HistRule::ALL {
        if !rule.applies_to(op) {
            continue;
        }
        match run_rule(d, rule, op, dt, it, &case) {
            Ok(got) => {
                if let Some(h) = hist {
                    f.check(&tag(&format!("{rule} hist")), &got.hist[bin..=bin], &[h], 0.0);
                }
                f.check(&tag(&format!("{rule} dest_bar")), &got.dest_bar[bin..=bin], &[dest_bar], t);
                let vb: Vec<f64> = m.iter().map(|&j| got.vals_bar[j]).collect();
                f.check(&tag(&format!("{rule} vals_bar")), &vb, vals_bar, t);
            }
            Err(e) => f.0.push(format!("{}: {e}", tag(rule.name()))),
        }
    }
    // Forward mode: tangents 1 on dest, 2, 3, ... on the bin's values (0 elsewhere).
    let k = case.dest.len();
    let mut dd = vec![0.0; k];
    dd[bin] = 1.0;
    let mut dv = vec![0.0; case.vals.len()];
    for (p, &j) in m.iter().enumerate() {
        dv[j] = 2.0 + p as f64;
    }
    let g = EXTREME_BINS[bin].3;
    if g == 0.0 {
        return; // a zero adjoint says nothing about the tangent
    }
    let want = (dest_bar + vals_bar.iter().enumerate().map(|(p, w)| w * (2.0 + p as f64)).sum::<f64>()) / g;
    let fw = Forward::new(d.clone());
    let jvp = || -> Result<(Vec<f64>, Vec<f64>)> {
        let de = fw.dual(d.tensor(&case.dest, &[k], dt)?, d.tensor(&dd, &[k], dt)?)?;
        let va = fw.dual(d.tensor(&case.vals, &[dv.len()], dt)?, d.tensor(&dv, &[dv.len()], dt)?)?;
        let h = fw.reduce_by_index(&de, op, &d.index_as(&case.inds, it)?, &va)?;
        Ok((d.to_vec(h.value())?, d.to_vec(&fw.tangent(&h)?)?))
    };
    match jvp() {
        Ok((h, dot)) => {
            if let Some(want_h) = hist {
                f.check(&tag("jvp hist"), &h[bin..=bin], &[want_h], 0.0);
            }
            f.check(&tag("jvp tangent"), &dot[bin..=bin], &[want], t);
        }
        Err(e) => f.0.push(format!("{}: {e}", tag("jvp"))),
    }
}

/// The rules that run the chunked kernels against the CPU device, every case and operator: the
/// `general-chunked` reverse rule and the forward rule (the dual-number histogram). Run on a
/// kernel device with and without a work-group per chunk (`KernelDevice::with_group_chunks`).
fn chunked_rule<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
    let c = cpu();
    for case in rule_cases() {
        for op in hist_ops() {
            let case = for_op(&case, op);
            let case = Case {
                dest: round(dt, &case.dest),
                vals: round(dt, &case.vals),
                hist_bar: round(dt, &case.hist_bar),
                ..case
            };
            let (t, rule) = (tol(Some(op), dt), HistRule::GeneralChunked);
            let tag = format!("{} {dt} {} {op} {rule}", d.engine_name(), case.name);
            match run_rule(d, rule, op, dt, it, &case) {
                Ok(got) => {
                    let want = run_rule(&c, rule, op, dt, IndexDType::I64, &case).unwrap();
                    f.check(&format!("{tag} hist vs cpu"), &got.hist, &want.hist, t);
                    f.check(&format!("{tag} dest_bar vs cpu"), &got.dest_bar, &want.dest_bar, t);
                    f.check(&format!("{tag} vals_bar vs cpu"), &got.vals_bar, &want.vals_bar, t);
                }
                Err(e) => f.0.push(format!("{tag}: {e}")),
            }
            let tag = format!("{} {dt} {} {op} jvp", d.engine_name(), case.name);
            let k = case.dest.len();
            let dd: Vec<f64> = (0..k).map(|b| dt.round(0.5 - 0.25 * b as f64)).collect();
            let dv: Vec<f64> = (0..case.vals.len()).map(|i| dt.round(1.0 + 0.125 * (i % 16) as f64)).collect();
            let jvp = |d: &D| -> Result<(Vec<f64>, Vec<f64>)> {
                let fw = Forward::new(d.clone());
                let de = fw.dual(d.tensor(&case.dest, &[k], dt)?, d.tensor(&dd, &[k], dt)?)?;
                let va = fw.dual(d.tensor(&case.vals, &[dv.len()], dt)?, d.tensor(&dv, &[dv.len()], dt)?)?;
                let h = fw.reduce_by_index(&de, op, &d.index_as(&case.inds, it)?, &va)?;
                Ok((d.to_vec(h.value())?, d.to_vec(&fw.tangent(&h)?)?))
            };
            let cpu_jvp = || -> Result<(Vec<f64>, Vec<f64>)> {
                let fw = Forward::new(c.clone());
                let de = fw.dual(c.tensor(&case.dest, &[k], dt)?, c.tensor(&dd, &[k], dt)?)?;
                let va = fw.dual(c.tensor(&case.vals, &[dv.len()], dt)?, c.tensor(&dv, &[dv.len()], dt)?)?;
                let h = fw.reduce_by_index(&de, op, &c.index(&case.inds)?, &va)?;
                Ok((c.to_vec(h.value())?, c.to_vec(&fw.tangent(&h)?)?))
            };
            match jvp(d) {
                Ok((h, dot)) => {
                    let (wh, wdot) = cpu_jvp().unwrap();
                    f.check(&format!("{tag} hist vs cpu"), &h, &wh, t);
                    f.check(&format!("{tag} tangent vs cpu"), &dot, &wdot, t);
                }
                Err(e) => f.0.push(format!("{tag}: {e}")),
            }
        }
    }
}

/// Sorts and scans large enough to cross many chunks (work-items) of the kernel devices, with n
/// a prime (no chunk length divides it), against the CPU: sorts with out-of-range keys (-1, k,
/// i64::MIN, i64::MAX) and long runs of equal keys (stability: the permutation is compared
/// exactly), scans in all four directions/kinds, plain and segmented, with segments crossing
/// chunk boundaries (short runs, then one run over many chunks). Scan values are small
/// integers (and +-1 for mul), so add and mul are exact in any order.
fn large_sorts_and_scans<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
    let c = &cpu();
    let tag = |s: &str| format!("{} {dt} {s}", d.engine_name());
    let n = 100_003usize;
    let hash = |i: usize, m: u64| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) % m;
    // The sort has no dtype: once is enough.
    if dt == DType::F32 {
        for k in [0usize, 1, 7, 1000, 70_000, 3_000_000] {
            let mut keys: Vec<i64> = (0..n).map(|i| hash(i, k as u64 + 2) as i64 - 1).collect();
            // The extreme keys of the index dtype (out of range, sorted last).
            let (lo, hi) = match it {
                IndexDType::I32 => (i32::MIN as i64, i32::MAX as i64),
                IndexDType::I64 => (i64::MIN, i64::MAX),
            };
            keys[17] = lo;
            keys[50_001] = hi;
            let (dk, ck) = (d.index_as(&keys, it).unwrap(), c.index(&keys).unwrap());
            cmp_index(f, &tag(&format!("large sort_by_key k={k}")), d, d.sort_by_key(&dk, k), c, c.sort_by_key(&ck, k));
            let (dp, dr) = d.sort_by_key_ranked(&dk, k).unwrap();
            let (cpm, cr) = c.sort_by_key_ranked(&ck, k).unwrap();
            cmp_index(f, &tag(&format!("large sort ranked perm k={k}")), d, Ok(dp), c, Ok(cpm));
            cmp_index(f, &tag(&format!("large sort ranked ranks k={k}")), d, Ok(dr), c, Ok(cr));
        }
        // Every key equal: the identity, from a single pass.
        let same = vec![3i64; n];
        let (dk, ck) = (d.index_as(&same, it).unwrap(), c.index(&same).unwrap());
        cmp_index(f, &tag("large sort_by_key equal keys"), d, d.sort_by_key(&dk, 5), c, c.sort_by_key(&ck, 5));
    }
    let ints: Vec<f64> = (0..n).map(|i| hash(i * 7 + 3, 7) as f64 - 3.0).collect();
    let signs: Vec<f64> = (0..n).map(|i| if hash(i + 11, 2) == 0 { 1.0 } else { -1.0 }).collect();
    let segs: Vec<i64> = (0..n).map(|i| if i < n / 2 { (i / 3001) as i64 } else { -7 }).collect();
    let (ds, cs) = (d.index_as(&segs, it).unwrap(), c.index(&segs).unwrap());
    let ops = [HistOp::Add, HistOp::Mul, HistOp::Min, HistOp::Max, HistOp::General(&LOGADDEXP)];
    for op in ops {
        let xs = if op == HistOp::Mul { &signs } else { &ints };
        let (x, cx) = (d.tensor(xs, &[n], dt).unwrap(), c.tensor(xs, &[n], dt).unwrap());
        let t = tol(Some(op), dt);
        for spec in
            [ScanSpec::INCLUSIVE, ScanSpec::EXCLUSIVE, ScanSpec::INCLUSIVE.flipped(), ScanSpec::EXCLUSIVE.flipped()]
        {
            let what = tag(&format!("large scan {op} {spec:?}"));
            cmp(f, &what, d, d.scan(op, &x, spec, None), c, c.scan(op, &cx, spec, None), t);
            let what = tag(&format!("large scan {op} {spec:?} segmented"));
            cmp(f, &what, d, d.scan(op, &x, spec, Some(&ds)), c, c.scan(op, &cx, spec, Some(&cs)), t);
        }
    }
    // Linear recurrences across chunks: multipliers in {0, 1/2, -1, 1} keep the states dyadic
    // and bounded, and the zeros cut the dependence (also inside chunk heads).
    let mults: Vec<f64> = (0..n).map(|i| [0.0, 0.5, -1.0, 1.0][hash(i + 5, 4) as usize]).collect();
    let (a, ca) = (d.tensor(&ints, &[n], dt).unwrap(), c.tensor(&ints, &[n], dt).unwrap());
    let (b, cb) = (d.tensor(&mults, &[n], dt).unwrap(), c.tensor(&mults, &[n], dt).unwrap());
    let ones = vec![1.0; n];
    let (b1, cb1) = (d.tensor(&ones, &[n], dt).unwrap(), c.tensor(&ones, &[n], dt).unwrap());
    let t = tol(Some(HistOp::Add), dt);
    for spec in [ScanSpec::INCLUSIVE, ScanSpec::EXCLUSIVE, ScanSpec::INCLUSIVE.flipped(), ScanSpec::EXCLUSIVE.flipped()]
    {
        for (name, m, cm) in [("mixed", &b, &cb), ("ones", &b1, &cb1)] {
            for (segmented, dsg, csg) in [("", None, None), (" segmented", Some(&ds), Some(&cs))] {
                let what = tag(&format!("large linear_recurrence {name} {spec:?}{segmented}"));
                cmp(f, &what, d, d.linear_recurrence(&a, m, spec, dsg), c, c.linear_recurrence(&ca, cm, spec, csg), t);
            }
        }
    }
}

/// Small dyadic values (multiples of 1/4 in [-2.5, 3]): sums and products of a few thousand of
/// them are exact in f32 and f64 in any order, so dense results compare exactly.
fn dyadic(n: usize, salt: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 + salt * 13 + i / 5) % 23) as f64 * 0.25 - 2.5).collect()
}

/// `op(a) op(b)` per batch by the definition, for shapes `[batch?, rows, cols]`.
#[allow(clippy::too_many_arguments)]
fn naive_matmul(
    a: &[f64],
    ta: bool,
    b: &[f64],
    tb: bool,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    ab: bool,
    bb: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; batch * m * n];
    for s in 0..batch {
        let (ao, bo) = (if ab { s * m * k } else { 0 }, if bb { s * k * n } else { 0 });
        for i in 0..m {
            for j in 0..n {
                out[s * m * n + i * n + j] = (0..k)
                    .map(|l| {
                        let x = if ta { a[ao + l * m + i] } else { a[ao + i * k + l] };
                        let y = if tb { b[bo + j * k + l] } else { b[bo + l * n + j] };
                        if x == 0.0 { 0.0 } else { x * y }
                    })
                    .sum();
            }
        }
    }
    out
}

/// The dense ops (broadcast_to, sum_to, matmul, arg_reduce_axis and the conveniences composed
/// from them) on adversarial shapes, against the CPU device (and matmul against its
/// definition): size-1 dimensions, broadcasts at either end and in the middle, several
/// broadcast runs, empty tensors, sizes around and off the tile size (16), long reductions
/// that the kernel devices cut into blocks, and a large batch.
fn dense_ops<D: Ops>(d: &D, dt: DType, f: &mut Fails) {
    let c = &cpu();
    let tag = |s: &str| format!("{} {dt} {s}", d.engine_name());
    let both = |v: &[f64], shape: &[usize]| (d.tensor(v, shape, dt).unwrap(), c.tensor(v, shape, dt).unwrap());
    let n_of = |s: &[usize]| s.iter().product::<usize>();
    let pairs: &[(&[usize], &[usize])] = &[
        (&[1], &[1]),
        (&[1], &[7]),
        (&[3], &[4, 3]),
        (&[4, 1], &[4, 3]),
        (&[1, 3], &[4, 3]),
        (&[1], &[2, 3]),
        (&[2, 1, 3], &[2, 5, 3]),
        (&[1, 5, 1], &[2, 5, 3]),
        (&[2, 1, 3, 1], &[2, 4, 3, 2]),
        (&[1, 4, 1, 2], &[3, 4, 5, 2]),
        (&[1, 1], &[1, 1]),
        (&[2, 3], &[2, 3]),
        (&[1, 1, 1], &[4, 1, 5]),
        (&[5], &[0, 5]),
        (&[3, 1], &[3, 5000]),
        (&[1, 2], &[10_007, 2]),
        (&[1], &[9000]),
        (&[17, 1], &[17, 33]),
    ];
    for &(small, big) in pairs {
        let what = format!("{small:?} <-> {big:?}");
        let (x, cx) = both(&dyadic(n_of(small), 1), small);
        cmp(f, &tag(&format!("broadcast_to {what}")), d, d.broadcast_to(&x, big), c, c.broadcast_to(&cx, big), 0.0);
        let (g, cg) = both(&dyadic(n_of(big), 2), big);
        cmp(f, &tag(&format!("sum_to {what}")), d, d.sum_to(&g, small), c, c.sum_to(&cg, small), 0.0);
    }
    // Shapes that do not broadcast fail on both.
    let (x, cx) = both(&[1.0, 2.0], &[2]);
    cmp(f, &tag("broadcast_to [2] -> [3]"), d, d.broadcast_to(&x, &[3]), c, c.broadcast_to(&cx, &[3]), 0.0);
    let (y, cy) = both(&dyadic(6, 3), &[2, 3]);
    cmp(f, &tag("sum_to [2, 3] -> [3, 1]"), d, d.sum_to(&y, &[3, 1]), c, c.sum_to(&cy, &[3, 1]), 0.0);

    // Matrix products: (m, k, n) around the tile (16), with every transpose and batch form;
    // (5, 1000, 3) and (2, 600, 17) have few output tiles and a long inner dimension, which the
    // kernel devices split into chunks.
    let sizes = [
        (1, 1, 1),
        (5, 3, 4),
        (16, 16, 16),
        (17, 33, 15),
        (31, 1, 47),
        (3, 70, 2),
        (1, 40, 1),
        (2, 0, 3),
        (0, 4, 3),
        (5, 1000, 3),
        (2, 600, 17),
    ];
    for (m, k, n) in sizes {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (batch, ab, bb) in [(1, false, false), (3, true, true), (2, true, false), (2, false, true)] {
                let mat = |rows: usize, cols: usize, t: bool, batched: bool| -> Vec<usize> {
                    let mut s = if batched { vec![batch] } else { vec![] };
                    s.extend(if t { [cols, rows] } else { [rows, cols] });
                    s
                };
                let (sa, sb) = (mat(m, k, ta, ab), mat(k, n, tb, bb));
                let (av, bv) = (dyadic(n_of(&sa), 4), dyadic(n_of(&sb), 5));
                let ((a, ca), (b, cb)) = (both(&av, &sa), both(&bv, &sb));
                let what = tag(&format!("matmul {sa:?} t={ta} x {sb:?} t={tb}"));
                let got = d.matmul(&a, ta, &b, tb);
                if let Ok(g) = &got {
                    let want = naive_matmul(&av, ta, &bv, tb, batch, m, k, n, ab, bb);
                    f.check(&format!("{what} vs definition"), &d.to_vec(g).unwrap(), &want, 0.0);
                }
                cmp(f, &what, d, got, c, c.matmul(&ca, ta, &cb, tb), 0.0);
            }
        }
    }
    // A large batch of small products, and one product over many tiles in every direction.
    for (sa, sb) in [([300usize, 3, 4], [300usize, 4, 5]), ([1, 130, 67], [1, 67, 150])] {
        let ((a, ca), (b, cb)) = (both(&dyadic(n_of(&sa), 6), &sa), both(&dyadic(n_of(&sb), 7), &sb));
        let what = tag(&format!("matmul {sa:?} x {sb:?}"));
        cmp(f, &what, d, d.matmul(&a, false, &b, false), c, c.matmul(&ca, false, &cb, false), 0.0);
    }
    // Zero entries of op(a) are skipped, so an infinity they meet in b never makes a NaN.
    let (a, ca) = both(&[0.0, 1.0, 1.0, 0.0], &[2, 2]);
    let (b, cb) = both(&[f64::INFINITY, 2.0, 3.0, 4.0], &[2, 2]);
    let got = d.matmul(&a, false, &b, false);
    if let Ok(g) = &got {
        f.check(&tag("matmul skips zeros"), &d.to_vec(g).unwrap(), &[3.0, 4.0, f64::INFINITY, 2.0], 0.0);
    }
    cmp(f, &tag("matmul skips zeros vs cpu"), d, got, c, c.matmul(&ca, false, &cb, false), 0.0);
    // Mismatched inner or batch dimensions fail on both.
    let ((a, ca), (b, cb)) = (both(&dyadic(6, 1), &[2, 3]), both(&dyadic(8, 1), &[4, 2]));
    cmp(f, &tag("matmul bad inner"), d, d.matmul(&a, false, &b, false), c, c.matmul(&ca, false, &cb, false), 0.0);
    let ((a, ca), (b, cb)) = (both(&dyadic(12, 1), &[2, 2, 3]), both(&dyadic(18, 1), &[3, 3, 2]));
    cmp(f, &tag("matmul bad batch"), d, d.matmul(&a, false, &b, false), c, c.matmul(&ca, false, &cb, false), 0.0);

    // Squared distances between rows vs their definition (a device composing the expanded form
    // agrees to rounding; these dyadic values make both exact), with empty sides, an empty row
    // length, rows off and on the eight-lane width and a long row; mismatched rows fail on both.
    for (n, k, l) in [(1, 1, 1), (7, 3, 5), (40, 6, 35), (0, 3, 4), (3, 0, 4), (5, 4, 0), (300, 2, 17), (2, 3, 1000)] {
        let (av, cv) = (dyadic(n * l, 11), dyadic(k * l, 12));
        let ((a, ca), (b, cb)) = (both(&av, &[n, l]), both(&cv, &[k, l]));
        let what = tag(&format!("sq_dist [{n}, {l}] x [{k}, {l}]"));
        let got = d.sq_dist(&a, &b);
        if let Ok(g) = &got {
            let want: Vec<f64> =
                (0..n * k).map(|ij| (0..l).map(|p| (av[ij / k * l + p] - cv[ij % k * l + p]).powi(2)).sum()).collect();
            f.check(&format!("{what} vs definition"), &d.to_vec(g).unwrap(), &want, tol(None, dt));
        }
        cmp(f, &what, d, got, c, c.sq_dist(&ca, &cb), tol(None, dt));
    }
    let ((a, ca), (b, cb)) = (both(&dyadic(6, 1), &[2, 3]), both(&dyadic(8, 1), &[2, 4]));
    cmp(f, &tag("sq_dist bad rows"), d, d.sq_dist(&a, &b), c, c.sq_dist(&ca, &cb), 0.0);

    // Sums of squared differences along the last axis, with b broadcast on the leading axes
    // and not at all; a broadcasting as well composes; mismatched rows fail on both.
    for (sa, sb) in [
        (vec![5, 3, 4], vec![1, 3, 4]),
        (vec![7, 9], vec![9]),
        (vec![40, 25, 20], vec![1, 25, 20]),
        (vec![2, 3], vec![2, 3]),
        (vec![4, 1, 3], vec![2, 3]),
        (vec![3, 4], vec![5]),
    ] {
        let ((a, ca), (b, cb)) = (both(&dyadic(n_of(&sa), 21), &sa), both(&dyadic(n_of(&sb), 22), &sb));
        let what = tag(&format!("sum_sq_diff {sa:?} - {sb:?}"));
        cmp(f, &what, d, d.sum_sq_diff(&a, &b), c, c.sum_sq_diff(&ca, &cb), tol(None, dt));
        if let Ok(y) = c.sum_sq_diff(&ca, &cb) {
            let shape = y.shape().to_vec();
            let (g, cg) = both(&dyadic(n_of(&shape), 23), &shape);
            let what = tag(&format!("sum_sq_diff_adjoint {sa:?} - {sb:?}"));
            cmp(f, &what, d, d.sum_sq_diff_adjoint(&a, &b, &g), c, c.sum_sq_diff_adjoint(&ca, &cb, &cg), tol(None, dt));
        }
    }

    // Stacks of parts of several shapes and their rows back; mismatched parts fail on both.
    for (n, shape) in [(1, vec![1]), (3, vec![5]), (4, vec![2, 3]), (2, vec![0]), (70, vec![14])] {
        let m: usize = shape.iter().product();
        let parts: Vec<_> = (0..n).map(|j| both(&dyadic(m, 20 + j), &shape)).collect();
        let (dp, cp): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        let what = tag(&format!("stack {n} x {shape:?}"));
        let (got, want) = (d.stack(&dp), c.stack(&cp));
        if let (Ok(g), Ok(w)) = (&got, &want) {
            match (d.unstack(g), c.unstack(w)) {
                (Ok(rows), Ok(crows)) if rows.len() == n && crows.len() == n => {
                    for (j, (r, cr)) in rows.into_iter().zip(crows).enumerate() {
                        cmp(f, &format!("{what} unstack row {j}"), d, Ok(r), c, Ok(cr), 0.0);
                    }
                }
                (r, cr) => f.0.push(format!("{what} unstack: {:?} vs {:?}", r.map(|v| v.len()), cr.map(|v| v.len()))),
            }
        }
        cmp(f, &what, d, got, c, want, 0.0);
    }
    let ((a, ca), (b, cb)) = (both(&dyadic(3, 1), &[3]), both(&dyadic(4, 1), &[4]));
    cmp(f, &tag("stack mismatched"), d, d.stack(&[a, b]), c, c.stack(&[ca, cb]), 0.0);

    // The LSTM cell, its adjoints and its tangent (fused kernels or the composed defaults)
    // against the CPU's, at widths off and on the lane widths; bad shapes fail on both.
    for b in [1, 5, 14, 33] {
        let vals = |n: usize, salt: usize| -> Vec<f64> { dyadic(n, salt).iter().map(|v| v * 0.75 - 0.2).collect() };
        let ((x, cx), (s, cs), (p, cp)) =
            (both(&vals(b, 13), &[b]), both(&vals(2 * b, 14), &[2, b]), both(&vals(8 * b, 15), &[8, b]));
        let t = tol(None, dt);
        cmp(f, &tag(&format!("lstm_cell b={b}")), d, d.lstm_cell(&x, &s, &p), c, c.lstm_cell(&cx, &cs, &cp), t);
        let (g, cg) = both(&vals(2 * b, 16), &[2, b]);
        match (d.lstm_cell_vjp(&x, &s, &p, &g), c.lstm_cell_vjp(&cx, &cs, &cp, &cg)) {
            (Ok((gx, gs, gp)), Ok((wx, ws, wp))) => {
                for (what, got, want) in [("x", gx, wx), ("state", gs, ws), ("params", gp, wp)] {
                    cmp(f, &tag(&format!("lstm_cell_vjp b={b} {what}")), d, Ok(got), c, Ok(want), t);
                }
            }
            (got, want) => f.0.push(tag(&format!("lstm_cell_vjp b={b}: {:?} vs {:?}", got.err(), want.err()))),
        }
        let ((dx, cdx), (ds, cds), (dp, cdp)) =
            (both(&vals(b, 17), &[b]), both(&vals(2 * b, 18), &[2, b]), both(&vals(8 * b, 19), &[8, b]));
        let what = tag(&format!("lstm_cell_jvp b={b}"));
        cmp(
            f,
            &what,
            d,
            d.lstm_cell_jvp(&x, &s, &p, &dx, &ds, &dp),
            c,
            c.lstm_cell_jvp(&cx, &cs, &cp, &cdx, &cds, &cdp),
            t,
        );
        cmp(
            f,
            &tag(&format!("lstm_cell b={b} bad params")),
            d,
            d.lstm_cell(&x, &s, &s),
            c,
            c.lstm_cell(&cx, &cs, &cs),
            0.0,
        );
    }

    // Arg-reductions on every axis: values from a small set (many ties), NaN first in a line,
    // after a number, and whole lines of NaN; long lines cut into blocks.
    let nan_mix = |n: usize, salt: usize| -> Vec<f64> {
        (0..n)
            .map(|i| match (i * 31 + salt) % 11 {
                0 => f64::NAN,
                v => (v % 4) as f64 - 1.5,
            })
            .collect()
    };
    let shapes: &[&[usize]] = &[&[1], &[7], &[3, 4], &[4, 1, 5], &[2, 3, 4], &[3, 5000], &[5000, 2], &[1, 9000]];
    for &shape in shapes {
        let mut vals = nan_mix(n_of(shape), shape.len());
        if shape == [3, 4] {
            // Line 0 all NaN; line 2 starts with NaN.
            vals[0..4].fill(f64::NAN);
            vals[8] = f64::NAN;
        }
        let (x, cx) = both(&vals, shape);
        for axis in 0..shape.len() {
            for ext in [Extremum::Min, Extremum::Max] {
                let what = tag(&format!("arg_reduce_axis {ext:?} {shape:?} axis {axis}"));
                match (d.arg_reduce_axis(ext, &x, axis), c.arg_reduce_axis(ext, &cx, axis)) {
                    (Ok((v, p)), Ok((cv, cp))) => {
                        cmp(f, &format!("{what} values"), d, Ok(v), c, Ok(cv), 0.0);
                        cmp_index(f, &format!("{what} positions"), d, Ok(p), c, Ok(cp));
                    }
                    (g, w) => f.0.push(format!("{what}: {:?} vs {:?}", g.err(), w.err())),
                }
            }
            let (y, cy) = both(&dyadic(n_of(shape), axis), shape);
            let t = tol(None, dt);
            cmp(f, &tag(&format!("sum_axis {shape:?} {axis}")), d, d.sum_axis(&y, axis), c, c.sum_axis(&cy, axis), 0.0);
            cmp(f, &tag(&format!("max_axis {shape:?} {axis}")), d, d.max_axis(&y, axis), c, c.max_axis(&cy, axis), 0.0);
            cmp(f, &tag(&format!("min_axis {shape:?} {axis}")), d, d.min_axis(&y, axis), c, c.min_axis(&cy, axis), 0.0);
            let what = tag(&format!("logsumexp_axis {shape:?} {axis}"));
            cmp(f, &what, d, d.logsumexp_axis(&y, axis), c, c.logsumexp_axis(&cy, axis), t);
        }
        let (x, cx) = both(&vals, shape);
        let axis = shape.len();
        let what = tag(&format!("arg_reduce_axis {shape:?} axis {axis} (out of range)"));
        match (d.arg_reduce_axis(Extremum::Max, &x, axis), c.arg_reduce_axis(Extremum::Max, &cx, axis)) {
            (Err(_), Err(_)) => {}
            _ => f.0.push(format!("{what}: should fail on both")),
        }
    }
    // An empty axis is an error; a broadcast with a one-element operand keeps working.
    let (e, ce) = both(&[], &[2, 0]);
    match (d.arg_reduce_axis(Extremum::Min, &e, 1), c.arg_reduce_axis(Extremum::Min, &ce, 1)) {
        (Err(_), Err(_)) => {}
        _ => f.0.push(tag("arg_reduce_axis over an empty axis should fail on both")),
    }
    let ((p, cp), (q, cq)) = (both(&dyadic(12, 8), &[4, 1, 3]), both(&dyadic(5, 9), &[5, 1]));
    let what = tag("broadcast_binary [4,1,3] - [5,1]");
    cmp(f, &what, d, d.broadcast_binary(BinaryOp::Sub, &p, &q), c, c.broadcast_binary(BinaryOp::Sub, &cp, &cq), 0.0);
}

/// A scalar function through every dense op: matrix products in both batch forms with
/// transposes, broadcasts both ways, max/min/logsumexp along axes, sum_to, squared distances.
fn dense_function<O: Ops>(o: &O, x: &O::T, w: &O::T) -> Result<O::T> {
    // x: [5, 3]; w: [2, 3, 4].
    let xw = o.unary(UnaryOp::Tanh, &o.matmul(x, false, w, false)?)?; // [2, 5, 4]
    let m = o.max_axis(&xw, 2)?; // [2, 5, 1]
    let l = o.logsumexp_axis(&xw, 1)?; // [2, 1, 4]
    let t = o.broadcast_binary(BinaryOp::Mul, &o.broadcast_binary(BinaryOp::Add, &m, &l)?, &xw)?; // [2, 5, 4]
    let u = o.matmul(&t, true, &t, false)?; // [2, 4, 4]
    let v = o.sum_to(&u, &[1, 4])?;
    let low = o.min_axis(x, 0)?; // [1, 3]
    let xx = o.matmul(x, true, x, false)?; // [3, 3]
    let s = o.sum(&o.broadcast_binary(BinaryOp::Mul, &low, &o.broadcast_to(&o.sum_axis(&xx, 0)?, &[2, 3])?)?)?;
    // Squared distances between x's rows and the rows of w's first batch, both moving.
    let rows = o.reshape(&o.unary(UnaryOp::Tanh, w)?, &[8, 3])?;
    let dist = o.sum(&o.unary(UnaryOp::Sqrt, &o.sq_dist(x, &rows)?)?)?; // x: [5, 3] vs [8, 3]
    o.add(&o.add(&o.sum(&o.unary(UnaryOp::Square, &v)?)?, &s)?, &dist)
}

/// Gradient and Hessian-vector product of [`dense_function`] by forward over reverse
/// (`Reverse<Forward<D>>`) at the base point moved by `shift` along the direction v: (value,
/// gradient of x then w, H v).
fn dense_hvp<D: Ops>(d: &D, dt: DType, shift: f64) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let vx: Vec<f64> = (0..15).map(|i| dt.round(1.0 - 0.1 * i as f64)).collect();
    let vw: Vec<f64> = (0..24).map(|i| dt.round(0.05 * i as f64 - 0.5)).collect();
    let xs: Vec<f64> =
        (0..15).map(|i| dt.round(0.3 * ((i * 5 % 7) as f64) - 0.8 + 0.01 * i as f64 + shift * vx[i])).collect();
    let ws: Vec<f64> =
        (0..24).map(|i| dt.round(0.25 * ((i * 3 % 11) as f64) - 1.1 + 0.003 * i as f64 + shift * vw[i])).collect();
    let fw = Forward::new(d.clone());
    let r = Reverse::new(fw.clone());
    let x = r.var(fw.dual(d.tensor(&xs, &[5, 3], dt)?, d.tensor(&vx, &[5, 3], dt)?)?);
    let w = r.var(fw.dual(d.tensor(&ws, &[2, 3, 4], dt)?, d.tensor(&vw, &[2, 3, 4], dt)?)?);
    let y = dense_function(&r, &x, &w)?;
    let g = r.backward(&y, fw.full(&[1], 1.0, dt)?)?;
    let (gx, gw) = (g.get_or_zeros(&fw, &x)?, g.get_or_zeros(&fw, &w)?);
    let mut grad = d.to_vec(fw.primal(&gx))?;
    grad.extend(d.to_vec(fw.primal(&gw))?);
    let mut hv = d.to_vec(&fw.tangent(&gx)?)?;
    hv.extend(d.to_vec(&fw.tangent(&gw)?)?);
    Ok((d.to_vec(fw.primal(y.value()))?, grad, hv))
}

/// Nested AD through the dense ops: the device's Hessian-vector product against the CPU's.
fn nested_dense_ad<D: Ops>(d: &D, dt: DType, f: &mut Fails) {
    let tag = |s: &str| format!("{} {dt} {s}", d.engine_name());
    let (wy, wg, wh) = dense_hvp(&cpu(), dt, 0.0).unwrap();
    match dense_hvp(d, dt, 0.0) {
        Ok((y, g, h)) => {
            let t = tol(None, dt) * 10.0;
            f.check(&tag("dense f (forward over reverse)"), &y, &wy, t);
            f.check(&tag("dense gradient (forward over reverse)"), &g, &wg, t);
            f.check(&tag("dense Hessian-vector product"), &h, &wh, t);
        }
        Err(e) => f.0.push(tag(&format!("dense Hessian-vector product: {e}"))),
    }
}

#[test]
fn cpu_dense_hessian_vector_product_matches_differences_of_gradients() {
    // The reference the devices are compared with: H v against central differences of the
    // gradient along v (f64; the point is away from ties of the max/min, so f is smooth there).
    let c = cpu();
    let (_, _, hv) = dense_hvp(&c, DType::F64, 0.0).unwrap();
    let h = 1e-6;
    let (_, gp, _) = dense_hvp(&c, DType::F64, h).unwrap();
    let (_, gm, _) = dense_hvp(&c, DType::F64, -h).unwrap();
    assert!(hv.iter().any(|&v| v.abs() > 1e-3), "degenerate H v: {hv:?}");
    for j in 0..hv.len() {
        let want = (gp[j] - gm[j]) / (2.0 * h);
        assert!((hv[j] - want).abs() < 1e-5 * want.abs().max(1.0), "Hv[{j}] {} vs {want}", hv[j]);
    }
}

/// The kernel device's transfer counter and buffer accounting, on buffers of known sizes
/// (every device buffer takes at least 8 bytes).
fn transfers_and_memory<R: KernelRuntime>(d: &KernelDevice<R>) {
    let (dt, fb) = (DType::F32, 4);
    // A freshly opened device has its own counters: other tests' traffic does not show here.
    assert_eq!(d.transfers(), Some(Transfers::default()));
    assert_eq!(d.device_memory(), Some(DeviceMemory::default()));
    // Filled by a kernel: memory, but no transfer.
    let a = d.full(&[1000], 1.0, dt).unwrap();
    assert_eq!(d.transfers(), Some(Transfers::default()));
    let b = d.tensor(&[0.5; 250], &[250], dt).unwrap();
    let i = d.index(&[0, 2, 249]).unwrap();
    // Empty: nothing moves, but the buffer still takes the minimum.
    let e = d.tensor(&[], &[0], dt).unwrap();
    let up = (250 * fb + 3 * 8) as u64;
    assert_eq!(d.transfers(), Some(Transfers { uploads: 2, downloads: 0, bytes_up: up, bytes_down: 0 }));
    let live = 1000 * fb + 250 * fb + 3 * 8 + 8;
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak: live }));
    // A gather that rejects out-of-range indices, with an uploaded index (whose range is known
    // and fits): no check is read back.
    let g = d.gather(&b, &i, OutOfRange::Error).unwrap();
    assert_eq!(d.transfers().unwrap().count(), 2);
    assert_eq!(d.to_vec(&g).unwrap(), vec![0.5; 3]);
    assert_eq!(d.transfers(), Some(Transfers { uploads: 2, downloads: 1, bytes_up: up, bytes_down: 3 * fb as u64 }));
    let peak = live + 3 * fb;
    drop(a);
    let live = peak - 1000 * fb;
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak }));
    d.reset_peak_device_memory();
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak: live }));
    // A temporary of 4000 bytes raises the peak, not the bytes in use.
    drop(d.full(&[1000], 0.0, dt).unwrap());
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak: live + 1000 * fb }));
    // The dense ops run on the device: nothing moves.
    let before = d.transfers().unwrap();
    let m = d.matmul(&d.reshape(&b, &[25, 10]).unwrap(), true, &d.reshape(&b, &[25, 10]).unwrap(), false).unwrap();
    let s = d.sum_to(&d.broadcast_to(&m, &[3, 10, 10]).unwrap(), &[1, 10]).unwrap();
    let (mx, at) = d.arg_reduce_axis(Extremum::Max, &m, 0).unwrap();
    let back = d.gather(&d.reshape(&m, &[100]).unwrap(), &at, OutOfRange::Error).unwrap();
    assert_eq!(d.transfers(), Some(before));
    // 25 * 0.25 = 6.25 per product entry; summed over 10 rows and 3 copies of the batch: 187.5.
    assert_eq!(d.to_vec(&s).unwrap(), vec![187.5; 10]);
    assert_eq!(d.to_vec(&mx).unwrap(), vec![6.25; 10]);
    assert_eq!(d.to_vec(&back).unwrap(), vec![6.25; 10]);
    assert_eq!(d.index_to_vec(&at).unwrap(), (0..10).collect::<Vec<i64>>());
    // An out-of-range index is found by the device-side check: its verdict and then the index
    // are read back (two downloads) to name the culprit.
    let bad = d.index(&[1, 250]).unwrap();
    let before = d.transfers().unwrap();
    match d.gather(&b, &bad, OutOfRange::Error) {
        Err(OpError::IndexOutOfRange { index: 250, position: 1, len: 250, .. }) => {}
        other => panic!("expected index 250 at position 1 out of range, got {other:?}"),
    }
    let after = d.transfers().unwrap().since(&before);
    assert_eq!((after.uploads, after.downloads), (0, 2));
    // Clones share the counters; everything dropped, nothing is left in use.
    let twin = d.clone();
    drop((b, i, e, g, m, s, mx, at, back, bad));
    assert_eq!(twin.device_memory().unwrap().in_use, 0);
}

/// An index-taking check run for both index dtypes (the device's indices; the CPU reference keeps
/// i64, so the CPU device's i32 kernels are held to its i64 ones), each mismatch tagged with its
/// index dtype.
fn both_index<D: Ops>(check: fn(&D, DType, IndexDType, &mut Fails)) -> impl Fn(&D, DType, &mut Fails) + Copy {
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
fn each_dtype<D: Ops>(d: &D, f64_ok: bool, label: &str, check: impl Fn(&D, DType, &mut Fails)) {
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

/// i32 index tensors refuse entries outside `[-2^31, 2^31)` with an error naming the first
/// such entry's position and value; the bounds themselves are held exactly, and i64 holds all.
fn index_overflow_is_refused<D: Ops>(d: &D) {
    let label = d.engine_name();
    let big = 1i64 << 31;
    for (data, position, value) in [(vec![0, 5, big, big + 1], 2, big), (vec![-big - 1], 0, -big - 1)] {
        match d.index_as(&data, IndexDType::I32) {
            Err(e @ OpError::IndexOverflow { .. }) => {
                assert_eq!(e, OpError::IndexOverflow { position, value, dtype: IndexDType::I32 }, "{label}");
                let shown = e.to_string();
                assert!(shown.contains(&value.to_string()) && shown.contains("i32"), "{label}: {shown}");
            }
            other => panic!("{label}: {data:?} as i32 should be refused, got {:?}", other.map(|i| i.len())),
        }
        let wide = d.index_as(&data, IndexDType::I64).unwrap();
        assert_eq!(wide.index_dtype(), IndexDType::I64);
        assert_eq!(d.index_to_vec(&wide).unwrap(), data, "{label}");
    }
    let edges = [i32::MIN as i64, -1, 0, i32::MAX as i64];
    let narrow = d.index_as(&edges, IndexDType::I32).unwrap();
    assert_eq!((narrow.index_dtype(), narrow.len()), (IndexDType::I32, 4), "{label}");
    assert_eq!(d.index_to_vec(&narrow).unwrap(), edges, "{label}");
    // An i32 histogram drops the extreme entries as out of range, as an i64 one does.
    let dest = d.tensor(&[0.0, 0.0], &[2], DType::F32).unwrap();
    let vals = d.tensor(&[1.0, 2.0, 4.0, 8.0], &[4], DType::F32).unwrap();
    let h = d.reduce_by_index(&dest, HistOp::Add, &narrow, &vals).unwrap();
    assert_eq!(d.to_vec(&h).unwrap(), [4.0, 0.0], "{label}");
}

#[test]
fn i32_indices_beyond_2_pow_31_are_refused_with_the_position_and_value() {
    let c = cpu();
    index_overflow_is_refused(&c);
    for d in staged_devices() {
        index_overflow_is_refused(&d);
    }
    index_overflow_is_refused(&Reverse::new(c.clone()));
    index_overflow_is_refused(&Forward::new(c.clone()));
    let traced = Traced::new(c);
    index_overflow_is_refused(&traced);
    let cell = TraceCell::default();
    for _ in 0..2 {
        traced
            .run_traced(&cell, &mut || -> Result<()> {
                index_overflow_is_refused(&traced);
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn cpu_dense_ops_match_their_definitions() {
    // The CPU against itself, and its matrix products against the definition.
    let c = cpu();
    each_dtype(&c, true, "cpu dense ops", dense_ops::<Cpu>);
}

#[test]
fn cpu_gather_adjoint_is_the_composed_histogram_bit_for_bit() {
    // Fused where the histogram is one sequential fold (n 14 into k 28: the LSTM's rows), the
    // composed form elsewhere (interleaved rows at k <= 64, chunks from 2^16 elements).
    let c = cpu();
    for dt in DType::ALL {
        for (n, k) in [(14, 28), (14, 56), (3, 1), (40, 3), (5000, 1000), (100_000, 64), (70_000, 300)] {
            // Values of many magnitudes, so the order of the additions shows in the bits.
            let vals: Vec<f64> =
                (0..n).map(|i| ((i * 7919) % 1013) as f64 * 1.37e-3 * 10f64.powi((i % 7) as i32 - 3)).collect();
            let inds: Vec<i64> = (0..n as i64).map(|i| (i * 37 + i / 3) % (k as i64 + 3) - 1).collect();
            let g = c.tensor(&vals, &[n], dt).unwrap();
            let src = c.full(&[k], 5.0, dt).unwrap();
            let idx = c.index(&inds).unwrap();
            let fused = c.to_vec(&c.gather_adjoint(&src, &idx, &g).unwrap()).unwrap();
            let composed = adgauge_backends::rules::indexing::gather_adjoint_composed(&c, &src, &idx, &g).unwrap();
            let composed = c.to_vec(&composed).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fused), bits(&composed), "{dt} n {n} k {k}");
            // And against the definition, in f64 (the order may differ in the last bits).
            let mut want = vec![0.0; k];
            for (i, &b) in inds.iter().enumerate() {
                if b >= 0 && (b as usize) < k {
                    want[b as usize] += dt.round(vals[i]);
                }
            }
            for (got, want) in fused.iter().zip(&want) {
                assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{dt} n {n} k {k}: {got} vs {want}");
            }
        }
        // Errors are the composed form's: a length mismatch names reduce_by_index.
        let e = c.gather_adjoint(
            &c.full(&[4], 0.0, dt).unwrap(),
            &c.index(&[1, 2]).unwrap(),
            &c.full(&[3], 1.0, dt).unwrap(),
        );
        assert!(matches!(e, Err(OpError::Shape { op: "reduce_by_index", .. })), "{e:?}");
    }
}

#[test]
fn cpu_accumulate_adds_into_a_given_up_tensor_and_never_into_a_held_one() {
    let c = cpu();
    for dt in DType::ALL {
        for n in [10, 300_000] {
            // Values whose sums round alike in f32 and f64 arithmetic (exact in f64).
            let xs = round(dt, &(0..n).map(|i| ((i * 7) % 13) as f64 * 0.25 - 1.5).collect::<Vec<_>>());
            let ys = round(dt, &(0..n).map(|i| ((i * 5) % 11) as f64 * 0.125 + 0.5).collect::<Vec<_>>());
            let want: Vec<f64> = xs.iter().zip(&ys).map(|(a, b)| dt.round(a + b)).collect();
            let t = |v: &[f64]| c.tensor(v, &[v.len()], dt).unwrap();
            let y = t(&ys);
            assert_eq!(c.to_vec(&c.accumulate(t(&xs), &y).unwrap()).unwrap(), want, "{dt} n {n}");
            let held = t(&xs);
            assert_eq!(c.to_vec(&c.accumulate(held.clone(), &y).unwrap()).unwrap(), want, "{dt} n {n} held");
            assert_eq!(c.to_vec(&held).unwrap(), xs, "{dt} n {n}: the holder's values changed");
            let one = t(&[2.0]);
            let bcast: Vec<f64> = xs.iter().map(|a| dt.round(a + 2.0)).collect();
            assert_eq!(c.to_vec(&c.accumulate(t(&xs), &one).unwrap()).unwrap(), bcast, "{dt} n {n} bcast");
        }
        let other = if dt == DType::F64 { DType::F32 } else { DType::F64 };
        let mixed = c.tensor(&[1.0, 2.0], &[2], other).unwrap();
        let e = c.accumulate(mixed, &c.tensor(&[1.0, 2.0], &[2], dt).unwrap()).unwrap_err();
        assert!(e.to_string().contains("dtype"), "{e}");
    }
}

#[test]
fn cpu_donated_elementwise_ops_equal_the_plain_ones_bit_for_bit_at_every_size() {
    // Sizes below and above the parallel threshold, and not multiples of the in-place unary
    // loop's runs of 256, so the runs' seams and the vector loops' tails both move.
    let c = cpu();
    for dt in DType::ALL {
        for n in [13, 1000, 300_001] {
            let xs: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 * 0.173 - 8.0).collect();
            let ys: Vec<f64> = (0..n).map(|i| ((i * 11) % 23) as f64 * 0.31 + 0.05).collect();
            let t = |v: &[f64]| c.tensor(v, &[v.len()], dt).unwrap();
            let bits = |x: &CpuTensor| c.to_vec(x).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let y = t(&ys);
            for op in UnaryOp::ALL {
                let arg = if matches!(op, UnaryOp::Log | UnaryOp::Sqrt) { &ys } else { &xs };
                let want = bits(&c.unary(op, &t(arg)).unwrap());
                assert_eq!(bits(&c.unary_donated(op, t(arg)).unwrap()), want, "{dt} n {n} {op:?}");
            }
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Min, BinaryOp::Ge] {
                let want = bits(&c.binary(op, &t(&xs), &y).unwrap());
                assert_eq!(bits(&c.binary_donated(op, t(&xs), &y, true).unwrap()), want, "{dt} n {n} {op:?}");
                let want = bits(&c.binary(op, &y, &t(&xs)).unwrap());
                assert_eq!(bits(&c.binary_donated(op, t(&xs), &y, false).unwrap()), want, "{dt} n {n} {op:?} right");
            }
            let held = t(&xs);
            let _ = c.binary_donated(BinaryOp::Mul, held.clone(), &y, true).unwrap();
            let _ = c.unary_donated(UnaryOp::Exp, held.clone()).unwrap();
            assert_eq!(c.to_vec(&held).unwrap(), c.to_vec(&t(&xs)).unwrap(), "{dt} n {n}: the holder's values changed");
        }
    }
}

#[test]
fn cpu_follows_the_extreme_value_semantics() {
    each_dtype(&cpu(), true, "cpu extremes", both_index(extremes::<Cpu>));
}

#[test]
fn cpu_conforms_to_itself_and_the_oracle() {
    // The suite's own sanity check: the reference device against the oracle.
    let c = cpu();
    each_dtype(&c, true, "cpu rules", both_index(rules::<Cpu>));
}

/// The staged CPU device with every elementwise op deferred (threshold 0), so each case runs
/// through compiled, fused programs; and with the default threshold, where small ops run at once.
fn staged_devices() -> [CpuStaged; 2] {
    let d = CpuStaged::on(Cpu::new(Some(2)).unwrap()).unwrap();
    [d.clone().with_stage_min(0), d.with_stage_min(adgauge_backends::cpu::staged::STAGE_MIN)]
}

#[test]
fn staged_primitives_match_the_cpu() {
    for d in staged_devices() {
        each_dtype(&d, true, "cpu-staged primitives", both_index(primitives::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged histogram primitives", both_index(hist_primitives::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged dense ops", dense_ops::<CpuStaged>);
        each_dtype(&d, true, "cpu-staged nested dense AD", nested_dense_ad::<CpuStaged>);
    }
}

#[test]
fn staged_rules_match_the_cpu_and_the_oracle() {
    for d in staged_devices() {
        each_dtype(&d, true, "cpu-staged rules", both_index(rules::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged extremes", both_index(extremes::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged chunked rule", both_index(chunked_rule::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged large sorts and scans", both_index(large_sorts_and_scans::<CpuStaged>));
    }
}

/// A conformance check on a traced device, twice: outside any recording (where the device is its
/// inner one), then as the body of a recording, which checks its first replay bit for bit
/// against that eager run (`Device::run_traced`); the trace is replayed once more.
fn traced_check<D: Traceable>(d: &Traced<D>, label: &str, check: impl Fn(&Traced<D>, DType, &mut Fails) + Copy) {
    each_dtype(d, true, label, check);
    recorded_check(d, label, check);
}

/// A conformance check as the body of a recording only (see [`traced_check`]).
fn recorded_check<D: Traceable>(d: &Traced<D>, label: &str, check: impl Fn(&Traced<D>, DType, &mut Fails)) {
    let cell = TraceCell::default();
    let recorded = format!("{label}, recorded");
    let mut bodies = 0;
    for _ in 0..2 {
        let r = d.run_traced(&cell, &mut || -> Result<()> {
            bodies += 1;
            each_dtype(d, true, &recorded, &check);
            Ok(())
        });
        assert!(r.is_ok(), "{label}: {r:?}");
    }
    assert_eq!(bodies, 1, "{label}: the second call replays");
    let stats = d.last_trace().expect("a trace was recorded");
    assert!(stats.instructions > 0 && stats.verified > 0, "{label}: {stats:?}");
}

/// The traced devices: over the CPU, and over the staged CPU with every elementwise op staged
/// (replays then run fused programs). The rules run recorded on one of them, and the
/// large-input checks (chunked rule, large sorts and scans) not at all: they exercise the inner
/// device's kernels, which the CPU and staged suites cover, and each recorded run of them costs
/// tens of seconds of an unoptimised test build.
#[test]
fn traced_devices_match_the_cpu_eagerly_and_in_replays() {
    let on_cpu = Traced::new(Cpu::new(Some(2)).unwrap());
    traced_check(&on_cpu, "cpu-traced primitives", both_index(primitives::<Traced<Cpu>>));
    traced_check(&on_cpu, "cpu-traced histogram primitives", both_index(hist_primitives::<Traced<Cpu>>));
    traced_check(&on_cpu, "cpu-traced dense ops", dense_ops::<Traced<Cpu>>);
    traced_check(&on_cpu, "cpu-traced nested dense AD", nested_dense_ad::<Traced<Cpu>>);
    let [staged, _] = staged_devices();
    let jit = Traced::new(staged);
    traced_check(&jit, "cpu-jit primitives", both_index(primitives::<Traced<CpuStaged>>));
    traced_check(&jit, "cpu-jit dense ops", dense_ops::<Traced<CpuStaged>>);
    traced_check(&jit, "cpu-jit nested dense AD", nested_dense_ad::<Traced<CpuStaged>>);
    // Every histogram rule, recorded and replayed (eagerly it is the staged suite's).
    recorded_check(&jit, "cpu-jit rules", both_index(rules::<Traced<CpuStaged>>));
    traced_check(&on_cpu, "cpu-traced extremes", both_index(extremes::<Traced<Cpu>>));
    recorded_check(&jit, "cpu-jit extremes", both_index(extremes::<Traced<CpuStaged>>));
}

#[test]
fn staged_bad_arguments_are_errors_at_the_call() {
    let [d, _] = staged_devices();
    let x = d.tensor(&[1.0, 2.0], &[2], DType::F32).unwrap();
    let y = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F32).unwrap();
    let z = d.tensor(&[1.0, 2.0], &[2], DType::F64).unwrap();
    // Deferred ops check their arguments when called, as the eager device does.
    assert!(matches!(d.binary(BinaryOp::Add, &x, &y), Err(OpError::Shape { .. })));
    assert!(matches!(d.binary(BinaryOp::Add, &x, &z), Err(OpError::DType { .. })));
    assert!(matches!(d.select(&x, &y, &x), Err(OpError::Shape { .. })));
    let e = d.unary(UnaryOp::Exp, &x).unwrap();
    assert!(matches!(d.reshape(&e, &[3]), Err(OpError::Shape { .. })));
    assert!(matches!(d.unary_adjoint(UnaryOp::Exp, &x, &e, &y), Err(OpError::Shape { .. })));
}

/// The device tests, instantiated once per kernel device.
macro_rules! device_suite {
    ($module:ident, $runtime:ty) => {
        mod $module {
            use super::*;

            type D = KernelDevice<$runtime>;

            #[test]
            fn primitives_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " primitives"), both_index(primitives::<D>));
            }

            #[test]
            fn histogram_primitives_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(
                    &d,
                    f64_ok,
                    concat!(stringify!($module), " histogram primitives"),
                    both_index(hist_primitives::<D>),
                );
            }

            #[test]
            fn histogram_rules_match_the_cpu_and_the_oracle() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " rules"), both_index(rules::<D>));
                // The chunked rule's kernels both ways: a work-group per chunk, one work-item per chunk.
                let (groups, single) = (d.clone().with_group_chunks(true), d.with_group_chunks(false));
                each_dtype(
                    &groups,
                    f64_ok,
                    concat!(stringify!($module), " rules, chunk groups"),
                    both_index(chunked_rule::<D>),
                );
                each_dtype(
                    &single,
                    f64_ok,
                    concat!(stringify!($module), " rules, no chunk groups"),
                    both_index(chunked_rule::<D>),
                );
            }

            #[test]
            fn extreme_values_follow_the_stated_semantics() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " extremes"), both_index(extremes::<D>));
                let (groups, single) = (d.clone().with_group_chunks(true), d.with_group_chunks(false));
                each_dtype(
                    &groups,
                    f64_ok,
                    concat!(stringify!($module), " extremes, chunk groups"),
                    both_index(extremes::<D>),
                );
                each_dtype(
                    &single,
                    f64_ok,
                    concat!(stringify!($module), " extremes, no chunk groups"),
                    both_index(extremes::<D>),
                );
            }

            #[test]
            fn large_sorts_and_scans_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(
                    &d,
                    f64_ok,
                    concat!(stringify!($module), " large sorts and scans"),
                    both_index(large_sorts_and_scans::<D>),
                );
            }

            #[test]
            fn dense_ops_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " dense ops"), dense_ops::<D>);
            }

            #[test]
            fn nested_ad_through_dense_ops_matches_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " nested dense AD"), nested_dense_ad::<D>);
            }

            #[test]
            fn i32_indices_beyond_2_pow_31_are_refused() {
                let Some(d) = open::<$runtime>() else { return };
                index_overflow_is_refused(&d);
            }

            #[test]
            fn counts_transfers_and_device_memory() {
                let Some(d) = open::<$runtime>() else { return };
                transfers_and_memory(&d);
            }

            #[test]
            fn builds_every_kernel_of_every_program() {
                let Some(d) = open::<$runtime>() else { return };
                let before = d.compile_time();
                for dt in DType::ALL {
                    if dt == DType::F64 && !d.has_f64() {
                        continue;
                    }
                    for (op, it) in HistOp::named().into_iter().flat_map(|op| IndexDType::ALL.map(|it| (op, it))) {
                        let names = d.build_program(dt, op, it).unwrap_or_else(|e| panic!("{dt} {op} {it}: {e}"));
                        assert_eq!(names, adgauge_backends::kernel_source::kernel_names(dt));
                    }
                }
                let spent = d.compile_time() - before;
                eprintln!("{} kernel compile time (programs built here): {spent:?}", stringify!($module));
            }

            #[test]
            fn unavailable_f64_and_bad_arguments_are_errors_not_panics() {
                let Some(d) = open::<$runtime>() else { return };
                let x = d.tensor(&[1.0, 2.0], &[2], DType::F32).unwrap();
                let y = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F32).unwrap();
                assert!(matches!(d.binary(BinaryOp::Add, &x, &y), Err(OpError::Shape { .. })));
                let i = d.index(&[0]).unwrap();
                assert!(matches!(d.reduce_by_index(&x, HistOp::Add, &i, &y), Err(OpError::Shape { .. })));
                assert!(d.total_form_adjoint(HistOp::Min, &i, &x, &x, &x).is_err());
                let _ = Extremum::Min;
            }
        }
    };
}

device_suite!(opencl, adgauge_backends::opencl::ClRuntime);
device_suite!(cuda, adgauge_backends::cuda::CudaRuntime);

/// Where CUDA cannot start (every machine without an NVIDIA driver), the probe and the
/// constructor report why instead of panicking.
#[test]
fn cuda_probe_gives_a_reason_and_never_panics() {
    let status = adgauge_backends::probe_devices().into_iter().find(|d| d.name == "cuda").expect("cuda is probed");
    assert!(!status.detail.is_empty());
    match adgauge_backends::Cuda::new() {
        Ok(_) => assert!(status.available, "the device opened but the probe says: {}", status.detail),
        Err(e) => {
            assert!(!status.available);
            assert!(e.to_string().contains(&status.detail), "{e} vs {}", status.detail);
        }
    }
}

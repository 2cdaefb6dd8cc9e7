//! The histogram cases (adversarial, random and extreme values) and their checks: the raw histogram
//! primitives, every reverse rule and the forward rule, the extreme-value semantics, the chunked
//! kernels, and sorts and scans across many chunks.

use crate::*;

/// A histogram case: dest, indices, values, an adjoint for the result.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) dest: Vec<f64>,
    pub(crate) inds: Vec<i64>,
    pub(crate) vals: Vec<f64>,
    pub(crate) hist_bar: Vec<f64>,
}

pub(crate) fn bar(k: usize) -> Vec<f64> {
    // One zero adjoint (bin 1) exercises the "0 where g == 0" paths.
    (0..k).map(|b| if b == 1 { 0.0 } else { 1.0 + 0.5 * b as f64 }).collect()
}

pub(crate) fn cases() -> Vec<Case> {
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
pub(crate) fn extreme_case() -> Case {
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

pub(crate) const X16: f64 = 1e16;
pub(crate) const X308: f64 = 1e308;
pub(crate) const INF: f64 = f64::INFINITY;
pub(crate) const NAN: f64 = f64::NAN;

/// (what, dest, values in index order, hist_bar) per bin of [`extreme_case`].
pub(crate) const EXTREME_BINS: [(&str, f64, &[f64], f64); 18] = [
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
pub(crate) fn rule_cases() -> Vec<Case> {
    let mut out = cases();
    out.push(extreme_case());
    out
}

/// The case adapted to an operator's domain: `*` gets values near 1 (with zeros kept) so long
/// products stay finite; hypot's bins are magnitudes.
pub(crate) fn for_op(c: &Case, op: HistOp) -> Case {
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

/// Histogram primitives (raw, not through the rules) against the CPU device.
pub(crate) fn hist_primitives<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
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

pub(crate) struct RuleOut {
    pub(crate) hist: Vec<f64>,
    pub(crate) dest_bar: Vec<f64>,
    pub(crate) vals_bar: Vec<f64>,
}

pub(crate) fn run_rule<D: Ops>(
    d: &D,
    rule: HistRule,
    op: HistOp,
    dt: DType,
    it: IndexDType,
    c: &Case,
) -> Result<RuleOut> {
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
pub(crate) fn rules<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
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
pub(crate) fn extremes<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
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
pub(crate) fn expect_bin<D: Ops>(
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
pub(crate) fn chunked_rule<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
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
pub(crate) fn large_sorts_and_scans<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
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

//! Every primitive a device implements against the CPU device, and the index dtypes' range.

use crate::*;

/// Every primitive the device implements, against the CPU device.
pub(crate) fn primitives<D: Ops>(d: &D, dt: DType, it: IndexDType, f: &mut Fails) {
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
    for op in BinaryOp::ALL {
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

/// i32 index tensors refuse entries outside `[-2^31, 2^31)` with an error naming the first
/// such entry's position and value; the bounds themselves are held exactly, and i64 holds all.
pub(crate) fn index_overflow_is_refused<D: Ops>(d: &D) {
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

//! The dense ops against the CPU device and their definitions, and nested AD through them.

use crate::*;

/// Small dyadic values (multiples of 1/4 in [-2.5, 3]): sums and products of a few thousand of
/// them are exact in f32 and f64 in any order, so dense results compare exactly.
pub(crate) fn dyadic(n: usize, salt: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 + salt * 13 + i / 5) % 23) as f64 * 0.25 - 2.5).collect()
}

/// `op(a) op(b)` per batch by the definition, for shapes `[batch?, rows, cols]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn naive_matmul(
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
pub(crate) fn dense_ops<D: Ops>(d: &D, dt: DType, f: &mut Fails) {
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
pub(crate) fn dense_function<O: Ops>(o: &O, x: &O::T, w: &O::T) -> Result<O::T> {
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
pub(crate) fn dense_hvp<D: Ops>(d: &D, dt: DType, shift: f64) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
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
pub(crate) fn nested_dense_ad<D: Ops>(d: &D, dt: DType, f: &mut Fails) {
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

#[test]
fn cpu_dense_ops_match_their_definitions() {
    // The CPU against itself, and its matrix products against the definition.
    let c = cpu();
    each_dtype(&c, true, "cpu dense ops", dense_ops::<Cpu>);
}

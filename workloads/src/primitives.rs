//! The engine's elementwise primitives that no workload differentiates, as one `primitives`
//! comparison of `check` (run by k-means next to its dense products): every differentiable
//! binary op in every broadcast layout and with either operand constant, the comparisons and
//! `select` (their masks used as values too, so that an adjoint reaches the comparison), `sign`,
//! and `scatter`, by the reverse and the forward engine and, for the binary ops, to second order
//! (forward over reverse), against derivatives by hand.
//!
//! The workloads use `+`, `-`, `*` and `/` mostly on equal shapes with both operands moving;
//! `pow`, `min` and `max`, the comparisons' rules and a scatter's pullback are reached by no
//! workload at all. A rule that forgets to sum a broadcast operand's adjoint, saves the wrong
//! operand when only one moves, or breaks a tie the other way than its forward rule passes every
//! other check; here it fails.

use adgauge_backends::prelude::*;
use adgauge_backends::{BinaryOp, DType, Extremum, Forward, Ops, Result, Reverse, UnaryOp};
use rand::RngExt;

use crate::workload::{CheckKind, Comparison};

/// The differentiable binary ops (the comparisons have their own part).
const BINARY: [BinaryOp; 7] =
    [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min, BinaryOp::Max];

/// Operand shapes, each pair broadcast to the larger: equal, a scalar on either side, and a row
/// against a matrix on either side. Output element `o` reads element `o % numel` of each
/// operand in every one of these layouts.
const LAYOUTS: [(&[usize], &[usize]); 5] =
    [(&[12], &[12]), (&[12], &[1]), (&[1], &[12]), (&[3, 4], &[4]), (&[4], &[3, 4])];

/// `[f, df/da, df/dc, d2f/da2, d2f/dadc, d2f/dc2]` of `f = a op c`, by hand. Ties go to the
/// left operand in `min` and `max`, as the engine's rules define.
fn binary_derivatives(op: BinaryOp, a: f64, c: f64) -> [f64; 6] {
    match op {
        BinaryOp::Add => [a + c, 1.0, 1.0, 0.0, 0.0, 0.0],
        BinaryOp::Sub => [a - c, 1.0, -1.0, 0.0, 0.0, 0.0],
        BinaryOp::Mul => [a * c, c, a, 0.0, 1.0, 0.0],
        BinaryOp::Div => [a / c, 1.0 / c, -a / (c * c), 0.0, -1.0 / (c * c), 2.0 * a / (c * c * c)],
        BinaryOp::Pow => {
            let (y, ln) = (a.powf(c), a.ln());
            [
                y,
                c * a.powf(c - 1.0),
                y * ln,
                c * (c - 1.0) * a.powf(c - 2.0),
                a.powf(c - 1.0) * (1.0 + c * ln),
                y * ln * ln,
            ]
        }
        BinaryOp::Min if a <= c => [a, 1.0, 0.0, 0.0, 0.0, 0.0],
        BinaryOp::Min => [c, 0.0, 1.0, 0.0, 0.0, 0.0],
        BinaryOp::Max if a >= c => [a, 1.0, 0.0, 0.0, 0.0, 0.0],
        BinaryOp::Max => [c, 0.0, 1.0, 0.0, 0.0, 0.0],
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq => [0.0; 6],
    }
}

/// `a cmp c` as 1 or 0.
fn compare(cmp: BinaryOp, a: f64, c: f64) -> f64 {
    let holds = match cmp {
        BinaryOp::Lt => a < c,
        BinaryOp::Le => a <= c,
        BinaryOp::Gt => a > c,
        BinaryOp::Ge => a >= c,
        _ => a == c,
    };
    if holds { 1.0 } else { 0.0 }
}

/// The elementwise `primitives` comparison on `d` (module docs), at inputs seeded by `seed`.
pub fn elementwise_probe<D: Ops>(d: &D, dt: DType, seed: u64) -> Result<Comparison> {
    let mut rng = adgauge_datasets::rng(seed ^ 0xe1e3e7);
    let mut uniform =
        |len: usize, lo: f64, hi: f64| -> Vec<f64> { (0..len).map(|_| dt.round(rng.random_range(lo..hi))).collect() };
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let numel = |s: &[usize]| s.iter().product::<usize>();
    for op in BINARY {
        for (sa, sc) in LAYOUTS {
            let out: &[usize] = if numel(sa) >= numel(sc) { sa } else { sc };
            let (na, nc, no) = (numel(sa), numel(sc), numel(out));
            // Both in [0.5, 1.5] (pow's base and div's divisor away from 0), every third
            // right operand equal to its left one, so that min and max meet ties.
            let a = uniform(na, 0.5, 1.5);
            let mut c = uniform(nc, 0.5, 1.5);
            if na == nc {
                c.iter_mut().step_by(3).zip(a.iter().step_by(3)).for_each(|(c, a)| *c = *a);
            }
            let (w, da, dc) = (uniform(no, -1.0, 1.0), uniform(na, -1.0, 1.0), uniform(nc, -1.0, 1.0));
            let parts: Vec<[f64; 6]> = (0..no).map(|o| binary_derivatives(op, a[o % na], c[o % nc])).collect();
            for need in [[true, true], [true, false], [false, true]] {
                // Reverse: the gradient of sum(w * (a op c)) with respect to the moving operands.
                let r = Reverse::new(d.clone());
                let moving = |m: bool, x: &[f64], s: &[usize]| -> Result<_> {
                    let t = d.tensor(x, s, dt)?;
                    Ok(if m { r.var(t) } else { r.lift(t) })
                };
                let (av, cv) = (moving(need[0], &a, sa)?, moving(need[1], &c, sc)?);
                let y = r.sum(&r.mul(&r.broadcast_binary(op, &av, &cv)?, &r.tensor(&w, out, dt)?)?)?;
                let grads = r.backward(&y, d.full(&[1], 1.0, dt)?)?;
                for (side, (v, n)) in [(&av, na), (&cv, nc)].into_iter().enumerate() {
                    if !need[side] {
                        continue;
                    }
                    got.extend(d.to_vec(&grads.get_or_zeros(d, v)?)?);
                    let mut bar = vec![0.0; n];
                    (0..no).for_each(|o| bar[o % n] += w[o] * parts[o][1 + side]);
                    want.extend(bar);
                }
                // Forward: the tangent of a op c along the moving operands' tangents.
                let f = Forward::new(d.clone());
                let dual = |m: bool, x: &[f64], dx: &[f64], s: &[usize]| -> Result<_> {
                    let t = d.tensor(x, s, dt)?;
                    if m { f.dual(t, d.tensor(dx, s, dt)?) } else { Ok(f.lift(t)) }
                };
                let y = f.broadcast_binary(op, &dual(need[0], &a, &da, sa)?, &dual(need[1], &c, &dc, sc)?)?;
                got.extend(d.to_vec(&f.tangent(&y)?)?);
                want.extend((0..no).map(|o| {
                    let ta = if need[0] { parts[o][1] * da[o % na] } else { 0.0 };
                    let tc = if need[1] { parts[o][2] * dc[o % nc] } else { 0.0 };
                    ta + tc
                }));
            }
            if na != nc {
                continue;
            }
            // Second order: the gradient's tangent along (da, dc), by forward over reverse.
            let fw = Forward::new(d.clone());
            let r = Reverse::new(fw.clone());
            let av = r.var(fw.dual(d.tensor(&a, sa, dt)?, d.tensor(&da, sa, dt)?)?);
            let cv = r.var(fw.dual(d.tensor(&c, sc, dt)?, d.tensor(&dc, sc, dt)?)?);
            let y = r.sum(&r.mul(&r.binary(op, &av, &cv)?, &r.tensor(&w, out, dt)?)?)?;
            let grads = r.backward(&y, fw.full(&[1], 1.0, dt)?)?;
            for v in [&av, &cv] {
                got.extend(d.to_vec(&fw.tangent(&grads.get_or_zeros(&fw, v)?)?)?);
            }
            want.extend((0..no).map(|o| w[o] * (parts[o][3] * da[o] + parts[o][4] * dc[o])));
            want.extend((0..no).map(|o| w[o] * (parts[o][4] * da[o] + parts[o][5] * dc[o])));
        }
    }
    let n = 12;
    let a = uniform(n, -1.0, 1.0);
    let mut c = uniform(n, -1.0, 1.0);
    c.iter_mut().step_by(3).zip(a.iter().step_by(3)).for_each(|(c, a)| *c = *a);
    let (w, da, dc) = (uniform(n, -1.0, 1.0), uniform(n, -1.0, 1.0), uniform(n, -1.0, 1.0));
    // Comparisons and select: z = m * a + select(m, a, c) with m = (a cmp c), whose mask is
    // also a value (the product's adjoint reaches the comparison, whose own adjoints are zero):
    // dz/da = 2m, dz/dc = 1 - m.
    for cmp in [BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge, BinaryOp::Eq] {
        let m: Vec<f64> = (0..n).map(|i| compare(cmp, a[i], c[i])).collect();
        let r = Reverse::new(d.clone());
        let (av, cv) = (r.var(d.tensor(&a, &[n], dt)?), r.var(d.tensor(&c, &[n], dt)?));
        let mask = r.binary(cmp, &av, &cv)?;
        let z = r.add(&r.mul(&mask, &av)?, &r.select(&mask, &av, &cv)?)?;
        let grads = r.backward(&r.sum(&r.mul(&z, &r.tensor(&w, &[n], dt)?)?)?, d.full(&[1], 1.0, dt)?)?;
        got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
        got.extend(d.to_vec(&grads.get_or_zeros(d, &cv)?)?);
        want.extend((0..n).map(|i| 2.0 * w[i] * m[i]));
        want.extend((0..n).map(|i| w[i] * (1.0 - m[i])));
        let f = Forward::new(d.clone());
        let (ad, cd) = (
            f.dual(d.tensor(&a, &[n], dt)?, d.tensor(&da, &[n], dt)?)?,
            f.dual(d.tensor(&c, &[n], dt)?, d.tensor(&dc, &[n], dt)?)?,
        );
        let mask = f.binary(cmp, &ad, &cd)?;
        let z = f.add(&f.mul(&mask, &ad)?, &f.select(&mask, &ad, &cd)?)?;
        got.extend(d.to_vec(&f.tangent(&z)?)?);
        want.extend((0..n).map(|i| m[i] * da[i] + if m[i] == 1.0 { da[i] } else { dc[i] }));
    }
    // sign: z = sign(a) * a has dz/da = sign(a) (sign's own derivative is zero), at nonzero a.
    let s: Vec<f64> = a
        .iter()
        .map(|&x| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        })
        .collect();
    let r = Reverse::new(d.clone());
    let av = r.var(d.tensor(&a, &[n], dt)?);
    let z = r.mul(&r.unary(UnaryOp::Sign, &av)?, &av)?;
    let grads = r.backward(&r.sum(&r.mul(&z, &r.tensor(&w, &[n], dt)?)?)?, d.full(&[1], 1.0, dt)?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
    want.extend((0..n).map(|i| w[i] * s[i]));
    let f = Forward::new(d.clone());
    let ad = f.dual(d.tensor(&a, &[n], dt)?, d.tensor(&da, &[n], dt)?)?;
    got.extend(d.to_vec(&f.tangent(&f.mul(&f.unary(UnaryOp::Sign, &ad)?, &ad)?)?)?);
    want.extend((0..n).map(|i| s[i] * da[i]));
    // scatter(dest, idx, vals), distinct positions: dest's adjoint is w off the positions, the
    // values' is w at them; the tangent is the scatter of the tangents (dest's alone when the
    // values are constant).
    let idx: Vec<i64> = vec![7, 2, 10, 0, 5];
    let k = idx.len();
    let (vals, dvals) = (uniform(k, -1.0, 1.0), uniform(k, -1.0, 1.0));
    let ix = d.index(&idx)?;
    let r = Reverse::new(d.clone());
    let (dv, vv) = (r.var(d.tensor(&a, &[n], dt)?), r.var(d.tensor(&vals, &[k], dt)?));
    let z = r.scatter(&dv, &ix, &vv)?;
    let grads = r.backward(&r.sum(&r.mul(&z, &r.tensor(&w, &[n], dt)?)?)?, d.full(&[1], 1.0, dt)?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &dv)?)?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &vv)?)?);
    let scattered = |dest: &[f64], vals: &[f64]| {
        let mut out = dest.to_vec();
        idx.iter().zip(vals).for_each(|(&i, &v)| out[i as usize] = v);
        out
    };
    want.extend(scattered(&w, &vec![0.0; k]));
    want.extend(idx.iter().map(|&i| w[i as usize]));
    let f = Forward::new(d.clone());
    for values_move in [true, false] {
        let vals_t = d.tensor(&vals, &[k], dt)?;
        let vd = if values_move { f.dual(vals_t, d.tensor(&dvals, &[k], dt)?)? } else { f.lift(vals_t) };
        let z = f.scatter(&f.dual(d.tensor(&a, &[n], dt)?, d.tensor(&da, &[n], dt)?)?, &ix, &vd)?;
        got.extend(d.to_vec(&f.tangent(&z)?)?);
        want.extend(scattered(&da, if values_move { &dvals } else { &[0.0; 5] }));
    }
    Ok(Comparison { check: CheckKind::Primitives, got, want, convention: None })
}

/// Small integers (-2..=2) as `len` values: every sum and product the dense probe forms of them
/// is exact in f32 and f64, so a device's order of additions cannot move it, and ties abound.
fn small_integers(rng: &mut impl rand::Rng, len: usize) -> Vec<f64> {
    (0..len).map(|_| rng.random_range(-2i32..=2) as f64).collect()
}

/// The dense `primitives` comparison on `d`: the dense kernels past the sizes where the CPU
/// changes path (`PAR_MIN` elements, `R_BLOCK` long sums, `MM_PAR_MIN` multiply-adds), and in
/// the layouts no workload forms (a broadcast in two separate runs, a logsumexp along a leading
/// axis, a squared difference of rows longer than four or broadcast along the middle), each
/// with its reverse rule, against host loops. The inputs are small integers, so the
/// comparison is exact whatever the order of the device's sums; inputs cost at most 90 000
/// elements.
pub fn dense_switches_probe<D: Ops>(d: &D, dt: DType, seed: u64) -> Result<Comparison> {
    let mut rng = adgauge_datasets::rng(seed ^ 0xd5e5);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let numel = |s: &[usize]| s.iter().product::<usize>();
    // The offset in a broadcast operand (shape `small`, right-aligned) of element `i` of `big`.
    let offset = |small: &[usize], big: &[usize], mut i: usize| {
        let (mut off, mut stride) = (0, 1);
        for (j, &n) in big.iter().enumerate().rev() {
            let digit = i % n;
            i /= n;
            let sj = (j + small.len()).checked_sub(big.len()).map_or(1, |j| small[j]);
            if sj != 1 {
                off += digit * stride;
            }
            stride *= sj;
        }
        off
    };
    // broadcast_to and its adjoint sum_to: a row down many rows (parallel copies), a column
    // across them (q = 1), two outputs of 40 000 terms each (blocked sums) and twenty of 4 000,
    // and a broadcast in two runs (no (o, r, q) view).
    let layouts: [(&[usize], &[usize]); 5] = [
        (&[1, 300], &[300, 300]),
        (&[300, 1], &[300, 300]),
        (&[2, 1], &[2, 40_000]),
        (&[20, 1], &[20, 4_000]),
        (&[1, 40, 1], &[30, 40, 60]),
    ];
    for (small, big) in layouts {
        let (x, w) = (small_integers(&mut rng, numel(small)), small_integers(&mut rng, numel(big)));
        let r = Reverse::new(d.clone());
        let xv = r.var(d.tensor(&x, small, dt)?);
        let y = r.broadcast_to(&xv, big)?;
        let grads = r.backward(&r.sum(&r.mul(&y, &r.tensor(&w, big, dt)?)?)?, d.full(&[1], 1.0, dt)?)?;
        got.extend(d.to_vec(y.value())?);
        got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
        want.extend((0..numel(big)).map(|i| x[offset(small, big, i)]));
        let mut bar = vec![0.0; x.len()];
        (0..numel(big)).for_each(|i| bar[offset(small, big, i)] += w[i]);
        want.extend(bar);
    }
    // Maxima and minima along an axis, in parallel lines, with ties (the lowest position wins)
    // and their adjoints (the winners' scatter).
    for (shape, axis) in [([300usize, 300, 1], 1usize), ([4, 200, 100], 1), ([300, 300, 1], 0)] {
        let (o, len, q) =
            (shape[..axis].iter().product::<usize>(), shape[axis], shape[axis + 1..].iter().product::<usize>());
        let x = small_integers(&mut rng, numel(&shape));
        for ext in [Extremum::Max, Extremum::Min] {
            let w = small_integers(&mut rng, o * q);
            let r = Reverse::new(d.clone());
            let xv = r.var(d.tensor(&x, &shape, dt)?);
            let y = if ext == Extremum::Max { r.max_axis(&xv, axis)? } else { r.min_axis(&xv, axis)? };
            let mut kept = shape.to_vec();
            kept[axis] = 1;
            let grads = r.backward(&r.sum(&r.mul(&y, &r.tensor(&w, &kept, dt)?)?)?, d.full(&[1], 1.0, dt)?)?;
            got.extend(d.to_vec(y.value())?);
            got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
            let mut bar = vec![0.0; x.len()];
            for a in 0..o {
                for c in 0..q {
                    let at = |b: usize| (a * len + b) * q + c;
                    let better = |u: f64, v: f64| if ext == Extremum::Max { u > v } else { u < v };
                    let best = (1..len).fold(0, |best, b| if better(x[at(b)], x[at(best)]) { b } else { best });
                    want.push(x[at(best)]);
                    bar[at(best)] += w[a * q + c];
                }
            }
            want.extend(bar);
        }
    }
    // A product past MM_PAR_MIN (64 x 128 x 64 multiply-adds), both operands moving.
    let (m, k, n) = (64, 128, 64);
    let (a, b, g) = (small_integers(&mut rng, m * k), small_integers(&mut rng, k * n), small_integers(&mut rng, m * n));
    let r = Reverse::new(d.clone());
    let (av, bv) = (r.var(d.tensor(&a, &[m, k], dt)?), r.var(d.tensor(&b, &[k, n], dt)?));
    let y = r.matmul(&av, false, &bv, false)?;
    let grads = r.backward(&y, d.tensor(&g, &[m, n], dt)?)?;
    got.extend(d.to_vec(y.value())?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &bv)?)?);
    want.extend((0..m * n).map(|o| (0..k).map(|p| a[(o / n) * k + p] * b[p * n + o % n]).sum::<f64>()));
    want.extend((0..m * k).map(|o| (0..n).map(|j| g[(o / k) * n + j] * b[(o % k) * n + j]).sum::<f64>()));
    want.extend((0..k * n).map(|o| (0..m).map(|i| a[i * k + o / n] * g[i * n + o % n]).sum::<f64>()));
    // Small products in parallel by batch (three of 32 x 32 x 32: one task per batch).
    let (batch, side) = (3, 32);
    let cube = batch * side * side;
    let (a, b, g) = (small_integers(&mut rng, cube), small_integers(&mut rng, cube), small_integers(&mut rng, cube));
    let r = Reverse::new(d.clone());
    let shape = [batch, side, side];
    let (av, bv) = (r.var(d.tensor(&a, &shape, dt)?), r.var(d.tensor(&b, &shape, dt)?));
    let y = r.matmul(&av, false, &bv, false)?;
    let grads = r.backward(&y, d.tensor(&g, &shape, dt)?)?;
    got.extend(d.to_vec(y.value())?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &bv)?)?);
    let at = |t: usize, i: usize, j: usize| (t * side + i) * side + j;
    let (mut y, mut a_bar, mut b_bar) = (vec![0.0; cube], vec![0.0; cube], vec![0.0; cube]);
    for t in 0..batch {
        for i in 0..side {
            for j in 0..side {
                for p in 0..side {
                    y[at(t, i, j)] += a[at(t, i, p)] * b[at(t, p, j)];
                    a_bar[at(t, i, p)] += g[at(t, i, j)] * b[at(t, p, j)];
                    b_bar[at(t, p, j)] += a[at(t, i, p)] * g[at(t, i, j)];
                }
            }
        }
    }
    want.extend(y);
    want.extend(a_bar);
    want.extend(b_bar);
    // A unary op's adjoint past PAR_MIN elements (parallel blocks): sum(w * tanh(x)).
    let len = 70_000;
    let x: Vec<f64> = (0..len).map(|i| dt.round((i % 97) as f64 / 48.0 - 1.0)).collect();
    let w = small_integers(&mut rng, len);
    let r = Reverse::new(d.clone());
    let xv = r.var(d.tensor(&x, &[len], dt)?);
    let grads = r.backward(
        &r.sum(&r.mul(&r.unary(UnaryOp::Tanh, &xv)?, &r.tensor(&w, &[len], dt)?)?)?,
        d.full(&[1], 1.0, dt)?,
    )?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
    want.extend(x.iter().zip(&w).map(|(x, w)| w * (1.0 - x.tanh().powi(2))));
    // Squared distances past the parallel size, rows of 11 (eight lanes and a tail).
    let (rows, centres, len) = (512, 24, 11);
    let (a, c, g) = (
        small_integers(&mut rng, rows * len),
        small_integers(&mut rng, centres * len),
        small_integers(&mut rng, rows * centres),
    );
    let r = Reverse::new(d.clone());
    let (av, cv) = (r.var(d.tensor(&a, &[rows, len], dt)?), r.var(d.tensor(&c, &[centres, len], dt)?));
    let y = r.sq_dist(&av, &cv)?;
    let grads = r.backward(&y, d.tensor(&g, &[rows, centres], dt)?)?;
    got.extend(d.to_vec(y.value())?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &cv)?)?);
    let diff = |i: usize, j: usize, l: usize| a[i * len + l] - c[j * len + l];
    want.extend((0..rows * centres).map(|o| (0..len).map(|l| diff(o / centres, o % centres, l).powi(2)).sum::<f64>()));
    let (mut a_bar, mut c_bar) = (vec![0.0; a.len()], vec![0.0; c.len()]);
    for i in 0..rows {
        for j in 0..centres {
            for l in 0..len {
                a_bar[i * len + l] += 2.0 * g[i * centres + j] * diff(i, j, l);
                c_bar[j * len + l] -= 2.0 * g[i * centres + j] * diff(i, j, l);
            }
        }
    }
    want.extend(a_bar);
    want.extend(c_bar);
    // sum over the last axis of (a - b)^2: rows of 5 (no unrolled form) with b broadcast along
    // the middle axis (not cyclic), and rows of 3 against one shared row past the parallel size.
    for (sa, sb) in [(&[4usize, 4_000, 5][..], &[4usize, 1, 5][..]), (&[30_000, 3], &[1, 3])] {
        let (a, b) = (small_integers(&mut rng, numel(sa)), small_integers(&mut rng, numel(sb)));
        let width = *sa.last().unwrap_or(&1);
        let out = numel(sa) / width;
        let g = small_integers(&mut rng, out);
        let r = Reverse::new(d.clone());
        let (av, bv) = (r.var(d.tensor(&a, sa, dt)?), r.var(d.tensor(&b, sb, dt)?));
        let y = r.sum_sq_diff(&av, &bv)?;
        let kept = [&sa[..sa.len() - 1], &[1]].concat();
        let grads = r.backward(&y, d.tensor(&g, &kept, dt)?)?;
        got.extend(d.to_vec(y.value())?);
        got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
        got.extend(d.to_vec(&grads.get_or_zeros(d, &bv)?)?);
        let pair = |i: usize| (a[i], b[offset(sb, sa, i)]);
        want.extend(
            (0..out).map(|o| (0..width).map(|l| (pair(o * width + l).0 - pair(o * width + l).1).powi(2)).sum::<f64>()),
        );
        let mut b_bar = vec![0.0; b.len()];
        want.extend((0..numel(sa)).map(|i| {
            let (x, z) = pair(i);
            b_bar[offset(sb, sa, i)] -= 2.0 * g[i / width] * (x - z);
            2.0 * g[i / width] * (x - z)
        }));
        want.extend(b_bar);
    }
    // logsumexp along a leading axis (lines strided by q = 3) and its adjoint.
    let shape = [5usize, 7, 3];
    let x: Vec<f64> = (0..numel(&shape)).map(|_| dt.round(rng.random_range(-3.0..3.0))).collect();
    let g: Vec<f64> = (0..15).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect();
    let r = Reverse::new(d.clone());
    let xv = r.var(d.tensor(&x, &shape, dt)?);
    let y = r.logsumexp_axis(&xv, 1)?;
    let grads = r.backward(&y, d.tensor(&g, &[5, 1, 3], dt)?)?;
    got.extend(d.to_vec(y.value())?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &xv)?)?);
    let lse: Vec<f64> =
        (0..15).map(|o| (0..7).map(|b| x[((o / 3) * 7 + b) * 3 + o % 3].exp()).sum::<f64>().ln()).collect();
    want.extend(lse.iter().copied());
    want.extend((0..x.len()).map(|i| {
        let (a, c) = (i / 21, i % 3);
        g[a * 3 + c] * (x[i] - lse[a * 3 + c]).exp()
    }));
    Ok(Comparison { check: CheckKind::Primitives, got, want, convention: None })
}

/// The LSTM cell's fused adjoint and tangent kernels, on `d`: the ones that recompute the gates
/// (which an engine calls when its inner device saved none: the staged device, nested engines)
/// and, where the device saves gates, the ones that read them, against the cell's composed
/// rules (`adgauge_ops::composed::lstm`, elementwise ops each checked on their own) on the same
/// device. The workload's engines take the gate-reading kernels on the CPU, so the recomputing
/// ones are reached here only.
pub fn lstm_cell_probe<D: Ops>(d: &D, dt: DType, seed: u64) -> Result<Comparison> {
    use adgauge_backends::composed::lstm as composed;
    let mut rng = adgauge_datasets::rng(seed ^ 0x15c3);
    let b = 6;
    let mut tensor = |shape: &[usize]| -> Result<D::T> {
        let x: Vec<f64> = (0..shape.iter().product()).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect();
        d.tensor(&x, shape, dt)
    };
    let (x, s, p, g) = (tensor(&[b])?, tensor(&[2, b])?, tensor(&[8, b])?, tensor(&[2, b])?);
    let (dx, ds, dp) = (tensor(&[b])?, tensor(&[2, b])?, tensor(&[8, b])?);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let mut both = |fused: &[&D::T], reference: &[&D::T]| -> Result<()> {
        for (f, r) in fused.iter().zip(reference) {
            got.extend(d.to_vec(f)?);
            want.extend(d.to_vec(r)?);
        }
        Ok(())
    };
    let (fx, fs, fp) = d.lstm_cell_vjp(&x, &s, &p, &g)?;
    let (cx, cs, cp) = composed::lstm_cell_vjp_composed(d, &x, &s, &p, &g)?;
    both(&[&fx, &fs, &fp], &[&cx, &cs, &cp])?;
    let (fj, cj) =
        (d.lstm_cell_jvp(&x, &s, &p, &dx, &ds, &dp)?, composed::lstm_cell_jvp_composed(d, &x, &s, &p, &dx, &ds, &dp)?);
    both(&[&fj], &[&cj])?;
    let (y, gates) = d.lstm_cell_gates(&x, &s, &p)?;
    both(&[&y], &[&composed::lstm_cell_composed(d, &x, &s, &p)?])?;
    if let Some(gates) = gates {
        both(&[&gates], &[&composed::lstm_cell_gates_composed(d, &x, &s, &p)?])?;
        let (fx, fs, fp) = d.lstm_cell_vjp_saved(&x, &s, &p, &gates, &g)?;
        both(&[&fx, &fs, &fp], &[&cx, &cs, &cp])?;
        both(&[&d.lstm_cell_jvp_saved(&x, &s, &p, &gates, &dx, &ds, &dp)?], &[&cj])?;
    }
    Ok(Comparison { check: CheckKind::Primitives, got, want, convention: None })
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;

    use super::*;

    /// Every value of the comparison within `tol`, relative where the reference exceeds 1.
    fn assert_within(c: &Comparison, dt: DType, tol: f64) {
        for (i, (g, w)) in c.got.iter().zip(&c.want).enumerate() {
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "{dt} value {i}: {g} vs {w}");
        }
    }

    #[test]
    fn every_rule_of_the_probe_agrees_with_the_derivatives_by_hand() {
        let cpu = Cpu::new(Some(1)).unwrap();
        for (dt, tol) in [(DType::F64, 1e-13), (DType::F32, 1e-5)] {
            let c = elementwise_probe(&cpu, dt, 7).unwrap();
            assert_eq!(c.got.len(), c.want.len());
            // 7 ops x (3 equal-shape and 12 broadcast checks' values), 5 comparisons x 36,
            // sign 24, scatter 53: the length says every part ran.
            let per_op: usize = [(12, 12), (12, 1), (1, 12), (12, 4), (4, 12)]
                .iter()
                .map(|&(na, nc): &(usize, usize)| {
                    let no = na.max(nc);
                    (na + nc + no) + (na + no) + (nc + no) + if na == nc { 2 * no } else { 0 }
                })
                .sum();
            assert_eq!(c.want.len(), 7 * per_op + 5 * 36 + 24 + 12 + 5 + 24);
            // Most partials are away from zero: the comparison is not of zeros with zeros.
            assert!(c.want.iter().filter(|x| x.abs() > 1e-3).count() > c.want.len() / 2);
            assert_within(&c, dt, tol);
        }
    }

    #[test]
    fn the_dense_kernels_past_their_size_switches_agree_with_host_loops() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for dt in DType::ALL {
            let c = dense_switches_probe(&cpu, dt, 3).unwrap();
            assert_eq!(c.got.len(), c.want.len());
            assert!(c.want.len() > 700_000, "{}", c.want.len());
            let tol = if dt == DType::F64 { 1e-13 } else { 1e-5 };
            assert_within(&c, dt, tol);
        }
    }

    #[test]
    fn the_lstm_cell_kernels_agree_with_the_composed_rules() {
        let cpu = Cpu::new(Some(1)).unwrap();
        for dt in DType::ALL {
            let c = lstm_cell_probe(&cpu, dt, 5).unwrap();
            // Recomputing VJP (6 + 12 + 48) and JVP (12), the cell (12), and on the CPU the
            // saved gates (30) and the gate-reading VJP and JVP.
            assert_eq!(c.want.len(), 66 + 12 + 12 + 30 + 66 + 12);
            assert!(c.want.iter().filter(|x| x.abs() > 1e-3).count() > c.want.len() / 2);
            assert_eq!(c.got, c.want, "{dt}: the CPU's fused kernels are the composed forms' operations in order");
        }
    }

    #[test]
    fn min_and_max_give_ties_to_the_left_operand() {
        // The hand-derived reference the probe judges by: a tie's whole derivative goes left.
        assert_eq!(binary_derivatives(BinaryOp::Min, 0.5, 0.5)[1..3], [1.0, 0.0]);
        assert_eq!(binary_derivatives(BinaryOp::Max, 0.5, 0.5)[1..3], [1.0, 0.0]);
        assert_eq!(binary_derivatives(BinaryOp::Min, 0.7, 0.5)[1..3], [0.0, 1.0]);
        // pow's second derivatives against central differences of its first ones.
        let (a, c, h) = (1.3, -0.6, 1e-6);
        let p = |a, c| binary_derivatives(BinaryOp::Pow, a, c);
        let faa = (p(a + h, c)[1] - p(a - h, c)[1]) / (2.0 * h);
        let fac = (p(a, c + h)[1] - p(a, c - h)[1]) / (2.0 * h);
        let fcc = (p(a, c + h)[2] - p(a, c - h)[2]) / (2.0 * h);
        for (fd, hand) in [(faa, p(a, c)[3]), (fac, p(a, c)[4]), (fcc, p(a, c)[5])] {
            assert!((fd - hand).abs() < 1e-8, "{fd} vs {hand}");
        }
    }
}

//! k-means: the cost of centres C for points P is f(C) = sum over points p of min over centres c
//! of ||p - c||^2. Its gradient comes from reverse mode; its Hessian is diagonal (each centre
//! coordinate appears only in its own squared distances, and each point's piece is a quadratic
//! 2 * count * I away from ties), so one Hessian-vector product with a vector of ones, by forward
//! over reverse, gives the Hessian diagonal. The Newton direction is gradient / Hessian diagonal
//! as in GradBench's `kmeans` `dir`, with 0 for a centre that no point picks (empty cluster:
//! gradient and Hessian are both 0 there, and the centre stays where it is).
//!
//! The objective is written with a matrix product: ||p - c||^2 = ||p||^2 + ||c||^2 - 2 p.c, so
//! the distances cost one n x d x k product instead of an n x k x d tensor. Ties go to the lowest
//! centre index. The hand-derived reference ([`manual`]) loops over points with the direct
//! difference form, in parallel over fixed chunks of points (f32 or f64).

use adgauge_backends::{BinaryOp, DType, Elem, Forward, Ops, Result, Reverse, TensorMeta, UnaryOp};
use adgauge_datasets::kmeans::KmeansData;
use rayon::prelude::*;

/// A k-means case on an engine's device.
pub struct KmeansInputs<O: Ops> {
    /// n x d.
    pub points: O::T,
    /// k x d.
    pub centres: O::T,
}

/// Cost, gradient, Hessian diagonal and Newton direction (the last three k x d, row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct KmeansOut {
    pub cost: f64,
    pub gradient: Vec<f64>,
    pub hessian_diag: Vec<f64>,
    pub dir: Vec<f64>,
}

/// Puts a case on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, data: &KmeansData, dtype: DType) -> Result<KmeansInputs<O>> {
    Ok(KmeansInputs {
        points: o.tensor(&data.points, &[data.n, data.d], dtype)?,
        centres: o.tensor(&data.centres, &[data.k, data.d], dtype)?,
    })
}

/// The cost, shape `[1]`.
pub fn cost<O: Ops>(o: &O, points: &O::T, centres: &O::T) -> Result<O::T> {
    let (n, k) = (points.shape()[0], centres.shape()[0]);
    let pc = o.matmul(points, false, centres, true)?; // n x k
    let pn = o.sum_axis(&o.unary(UnaryOp::Square, points)?, 1)?; // n x 1
    let cn = o.reshape(&o.sum_axis(&o.unary(UnaryOp::Square, centres)?, 1)?, &[1, k])?; // 1 x k
    let dist =
        o.broadcast_binary(BinaryOp::Add, &o.broadcast_binary(BinaryOp::Add, &pn, &cn)?, &o.scale(&pc, -2.0)?)?;
    debug_assert_eq!(dist.shape(), &[n, k]);
    o.sum(&o.min_axis(&dist, 1)?)
}

/// Cost and gradient (reverse mode).
pub fn gradient<B: Ops>(b: &B, x: &KmeansInputs<B>) -> Result<(B::T, B::T)> {
    let r = Reverse::new(b.clone());
    let c = r.var(x.centres.clone());
    let f = cost(&r, &r.lift(x.points.clone()), &c)?;
    let g = r.backward(&f, b.full(&[1], 1.0, f.dtype())?)?;
    Ok((f.value().clone(), g.get_or_zeros(b, &c)?))
}

/// Cost, gradient and Hessian diagonal: one Hessian-vector product with a vector of ones, by
/// forward over reverse (`Reverse<Forward<B>>`).
pub fn hessian_diag<B: Ops>(b: &B, x: &KmeansInputs<B>) -> Result<(B::T, B::T, B::T)> {
    let fw = Forward::new(b.clone());
    let ones = b.full(x.centres.shape(), 1.0, x.centres.dtype())?;
    let r = Reverse::new(fw.clone());
    let c = r.var(fw.dual(x.centres.clone(), ones)?);
    let f = cost(&r, &r.lift(fw.lift(x.points.clone())), &c)?;
    let g = r.backward(&f, fw.full(&[1], 1.0, f.dtype())?)?;
    let g = g.get_or_zeros(&fw, &c)?;
    Ok((fw.primal(f.value()).clone(), fw.primal(&g).clone(), fw.tangent(&g)?))
}

/// Newton direction gradient / Hessian diagonal, 0 where the Hessian diagonal is 0.
pub fn newton_dir<B: Ops>(b: &B, g: &B::T, h: &B::T) -> Result<B::T> {
    let zero = b.scalar(0.0, h.dtype())?;
    let nonzero = b.binary(BinaryOp::Gt, h, &zero)?;
    let one = b.scalar(1.0, h.dtype())?;
    let safe = b.select(&nonzero, h, &one)?;
    b.select(&nonzero, &b.div(g, &safe)?, &zero)
}

/// Everything `adgauge eval kmeans` prints, by AD on the engine's device.
pub fn evaluate<B: Ops>(b: &B, x: &KmeansInputs<B>) -> Result<KmeansOut> {
    let (f, g, h) = hessian_diag(b, x)?;
    let dir = newton_dir(b, &g, &h)?;
    Ok(KmeansOut { cost: b.to_vec(&f)?[0], gradient: b.to_vec(&g)?, hessian_diag: b.to_vec(&h)?, dir: b.to_vec(&dir)? })
}

/// Points per chunk of the manual reference (fixed: results do not depend on the thread count).
const CHUNK: usize = 1024;

/// The hand-derived reference in `T` (f32 or f64): per point the nearest centre (lowest index on
/// ties) by direct differences; gradient 2 * (count * c - sum of its points), Hessian diagonal
/// 2 * count, direction gradient / Hessian (0 for empty clusters).
pub fn manual<T: Elem>(data: &KmeansData) -> KmeansOut {
    let (k, d) = (data.k, data.d);
    let p: Vec<T> = data.points.iter().map(|&v| T::of_f64(v)).collect();
    let c: Vec<T> = data.centres.iter().map(|&v| T::of_f64(v)).collect();
    // Per chunk: cost, per-centre sums of points and counts.
    let per_chunk = |chunk: &[T]| {
        let mut cost = T::zero();
        let mut sums = vec![T::zero(); k * d];
        let mut counts = vec![0usize; k];
        for pt in chunk.chunks(d.max(1)) {
            let (mut best, mut at) = (T::infinity(), 0);
            for j in 0..k {
                let cj = &c[j * d..(j + 1) * d];
                let dist = pt.iter().zip(cj).fold(T::zero(), |s, (&a, &b)| s + (a - b) * (a - b));
                if dist < best {
                    (best, at) = (dist, j);
                }
            }
            if k == 0 {
                continue;
            }
            cost = cost + best;
            counts[at] += 1;
            sums[at * d..(at + 1) * d].iter_mut().zip(pt).for_each(|(s, &v)| *s = *s + v);
        }
        (cost, sums, counts)
    };
    let parts: Vec<_> = if d == 0 { Vec::new() } else { p.par_chunks(CHUNK * d).map(per_chunk).collect() };
    let mut cost = T::zero();
    let mut sums = vec![T::zero(); k * d];
    let mut counts = vec![0usize; k];
    for (pc, ps, pn) in parts {
        cost = cost + pc;
        sums.iter_mut().zip(ps).for_each(|(s, v)| *s = *s + v);
        counts.iter_mut().zip(pn).for_each(|(s, v)| *s += v);
    }
    let two = T::of_f64(2.0);
    let mut out = KmeansOut { cost: cost.as_f64(), gradient: vec![], hessian_diag: vec![], dir: vec![] };
    for j in 0..k {
        let cnt = T::of_f64(counts[j] as f64);
        for l in 0..d {
            let g = two * (cnt * c[j * d + l] - sums[j * d + l]);
            let h = two * cnt;
            out.gradient.push(g.as_f64());
            out.hessian_diag.push(h.as_f64());
            out.dir.push(if counts[j] == 0 { 0.0 } else { (g / h).as_f64() });
        }
    }
    out
}

/// [`manual`] in the dtype under test.
pub fn manual_in(data: &KmeansData, dtype: DType) -> KmeansOut {
    match dtype {
        DType::F32 => manual::<f32>(data),
        DType::F64 => manual::<f64>(data),
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;
    use adgauge_datasets::kmeans::generate;

    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * (x.abs() + y.abs()).max(1.0))
    }

    #[test]
    fn ad_matches_the_manual_derivatives_in_both_dtypes() {
        let cpu = Cpu::new(Some(2)).unwrap();
        let data = generate(3000, 7, 5, 3);
        for (dt, tol) in [(DType::F64, 1e-10), (DType::F32, 1e-4)] {
            let x = upload(&cpu, &data, dt).unwrap();
            let ad = evaluate(&cpu, &x).unwrap();
            let rounded = KmeansData {
                points: data.points.iter().map(|&v| dt.round(v)).collect(),
                centres: data.centres.iter().map(|&v| dt.round(v)).collect(),
                ..data.clone()
            };
            let m = manual_in(&rounded, dt);
            assert!(close(&[ad.cost], &[m.cost], tol), "{dt} cost {} vs {}", ad.cost, m.cost);
            assert!(close(&ad.gradient, &m.gradient, tol), "{dt} gradient");
            assert_eq!(ad.hessian_diag, m.hessian_diag, "{dt} Hessian diagonal (2 * counts, exact)");
            assert!(close(&ad.dir, &m.dir, tol), "{dt} dir");
            let (_, g) = gradient(&cpu, &x).unwrap();
            assert_eq!(cpu.to_vec(&g).unwrap(), ad.gradient, "{dt}: reverse alone and nested agree");
        }
    }

    #[test]
    fn gradient_matches_central_differences() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let data = generate(200, 4, 3, 11);
        let x = upload(&cpu, &data, DType::F64).unwrap();
        let (_, g) = gradient(&cpu, &x).unwrap();
        let g = cpu.to_vec(&g).unwrap();
        let f = |c: &[f64]| manual::<f64>(&KmeansData { centres: c.to_vec(), ..data.clone() }).cost;
        let h = 1e-6;
        for i in 0..data.centres.len() {
            let mut up = data.centres.clone();
            let mut dn = data.centres.clone();
            up[i] += h;
            dn[i] -= h;
            let fd = (f(&up) - f(&dn)) / (2.0 * h);
            assert!((fd - g[i]).abs() < 1e-6 * fd.abs().max(1.0), "coordinate {i}: {} vs {fd}", g[i]);
        }
    }

    #[test]
    fn empty_clusters_get_a_zero_direction() {
        let cpu = Cpu::new(Some(1)).unwrap();
        // Centre 1 is far from both points.
        let data = KmeansData { n: 2, k: 2, d: 1, points: vec![0.0, 1.0], centres: vec![0.25, 100.0] };
        let out = evaluate(&cpu, &upload(&cpu, &data, DType::F64).unwrap()).unwrap();
        assert_eq!(out.cost, 0.0625 + 0.5625);
        assert_eq!(out.gradient, vec![2.0 * (2.0 * 0.25 - 1.0), 0.0]);
        assert_eq!(out.hessian_diag, vec![4.0, 0.0]);
        assert_eq!(out.dir, vec![-0.25, 0.0]);
        assert_eq!(manual::<f64>(&data), out);
    }

    #[test]
    fn no_perturbation_confusion_in_nested_modes() {
        // d/dx [x * d/dy (x + y)] = 1 everywhere, elementwise over a tensor of points.
        let c = Cpu::new(Some(1)).unwrap();
        let xs = [-2.0, 0.0, 0.5, 3.0, 1e3];
        let fw = Forward::new(c.clone());
        let x = fw.dual(c.tensor(&xs, &[5], DType::F64).unwrap(), c.full(&[5], 1.0, DType::F64).unwrap()).unwrap();
        let r = Reverse::new(fw.clone());
        let y = r.var(fw.tensor(&[0.7, -1.0, 2.0, 0.0, 5.0], &[5], DType::F64).unwrap());
        let s = r.sum(&r.add(&r.lift(x.clone()), &y).unwrap()).unwrap();
        let dy = r.backward(&s, fw.full(&[1], 1.0, DType::F64).unwrap()).unwrap().get_or_zeros(&fw, &y).unwrap();
        let z = fw.mul(&x, &dy).unwrap();
        assert_eq!(c.to_vec(fw.primal(&z)).unwrap(), xs.to_vec());
        assert_eq!(c.to_vec(&fw.tangent(&z).unwrap()).unwrap(), vec![1.0; 5]);
    }
}

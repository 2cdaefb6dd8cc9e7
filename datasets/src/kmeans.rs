//! k-means inputs: n points and k centres in d dimensions, row-major. The generator draws points
//! around k true centres and starts the centres at k of the points, slightly moved, so every
//! centre has points nearby and distances to the two nearest centres differ (no ties).

use rand::RngExt;

/// A k-means case: `points` is n x d, `centres` is k x d, both row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct KmeansData {
    pub n: usize,
    pub k: usize,
    pub d: usize,
    pub points: Vec<f64>,
    pub centres: Vec<f64>,
}

/// A seeded case.
pub fn generate(n: usize, k: usize, d: usize, seed: u64) -> KmeansData {
    let mut rng = crate::rng(seed);
    let truth: Vec<f64> = (0..k * d).map(|_| rng.random_range(-4.0..4.0)).collect();
    let mut points = Vec::with_capacity(n * d);
    for _ in 0..n {
        let c = rng.random_range(0..k.max(1));
        for j in 0..d {
            let centre = if k > 0 { truth[c * d + j] } else { 0.0 };
            points.push(centre + rng.random_range(-1.0..1.0));
        }
    }
    let centres = (0..k)
        .flat_map(|c| {
            let p = if n > 0 { (c * 7919) % n } else { 0 };
            (0..d).map(move |j| (p, j)).collect::<Vec<_>>()
        })
        .map(|(p, j)| points.get(p * d + j).copied().unwrap_or(0.0) + rng.random_range(-0.1..0.1))
        .collect();
    KmeansData { n, k, d, points, centres }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_seeded_and_shaped() {
        let a = generate(50, 4, 3, 7);
        assert_eq!((a.points.len(), a.centres.len()), (150, 12));
        assert_eq!(a, generate(50, 4, 3, 7));
        assert_ne!(a, generate(50, 4, 3, 8));
    }
}

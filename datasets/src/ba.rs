//! Bundle adjustment inputs in the ADBench text format, and seeded generators.
//!
//! # Format (verified against ADBench's `data/ba` files and `read_ba_instance`)
//!
//! ```text
//! n m p                                 cameras, points, observations
//! r1 r2 r3 C1 C2 C3 f u0 v0 k1 k2       ONE camera: rotation (axis-angle), centre, focal
//!                                       length, principal point, radial distortion
//! X1 X2 X3                              ONE point
//! w                                     ONE weight
//! u v                                   ONE feature (observed pixel)
//! ```
//!
//! The file describes a *replicated* problem, built exactly as ADBench's reader does: all n
//! cameras equal the camera, all m points the point, all p weights the weight, all p features
//! the feature, and observation i is (camera i mod n, point i mod m). The expanded problem is
//! limited to [`MAX_REPLICATED_ELEMENTS`] numbers
//! (11n + 3m + p weights + 2p feature values + 2p observation indices).
//!
//! Consequently only replicated problems can be written ([`BaInput::is_replicated`]);
//! [`BaInput::generate`] makes such problems, and [`BaInput::generate_varied`] makes problems
//! with distinct cameras, points and observations (for checking derivatives, where replicated
//! values would hide indexing mistakes), which have no ADBench text form.
//!
//! Note: ADBench's `ba20_n13682_m4456117_p2987644.txt` announces p = 28987644 in its header
//! (not the 2987644 of its name); the header is what the file means.

use std::io::Write;
use std::path::Path;

use crate::error::{DatasetError, Result};
use crate::text::{self, MAX_REPLICATED_ELEMENTS, TextReader, product, write_row};

/// Parameters per camera: rotation (3), centre (3), focal length, principal point (2),
/// radial distortion (2).
pub const N_CAM_PARAMS: usize = 11;

/// A bundle adjustment problem.
#[derive(Clone, Debug, PartialEq)]
pub struct BaInput {
    /// Number of cameras.
    pub n: usize,
    /// Number of points.
    pub m: usize,
    /// Number of observations.
    pub p: usize,
    /// Cameras, n rows of [`N_CAM_PARAMS`].
    pub cams: Vec<f64>,
    /// Points, m rows of 3.
    pub x: Vec<f64>,
    /// Weights, one per observation.
    pub w: Vec<f64>,
    /// Observation i sees point `obs[i].1` from camera `obs[i].0`.
    pub obs: Vec<(usize, usize)>,
    /// Observed features, p rows of 2.
    pub feats: Vec<f64>,
}

const SOURCE_IN_MEMORY: &str = "<BA input>";

fn rodrigues_rotate(rot: &[f64], v: [f64; 3]) -> [f64; 3] {
    let cross =
        |a: &[f64], b: [f64; 3]| [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let sqtheta = rot.iter().map(|r| r * r).sum::<f64>();
    if sqtheta != 0.0 {
        let theta = sqtheta.sqrt();
        let (s, c) = theta.sin_cos();
        let w = [rot[0] / theta, rot[1] / theta, rot[2] / theta];
        let wxv = cross(&w, v);
        let tmp = (w[0] * v[0] + w[1] * v[1] + w[2] * v[2]) * (1.0 - c);
        std::array::from_fn(|i| v[i] * c + wxv[i] * s + w[i] * tmp)
    } else {
        let rxv = cross(rot, v);
        std::array::from_fn(|i| v[i] + rxv[i])
    }
}

/// ADBench's camera projection in plain f64 (used to make generated features consistent):
/// rotate `x - C` by the Rodrigues vector, divide by depth, apply radial distortion
/// `1 + k1 r^2 + k2 r^4`, scale by f and add the principal point.
pub fn project(cam: &[f64; N_CAM_PARAMS], x: &[f64; 3]) -> [f64; 2] {
    let xo = [x[0] - cam[3], x[1] - cam[4], x[2] - cam[5]];
    let xc = rodrigues_rotate(&cam[0..3], xo);
    let (u, v) = (xc[0] / xc[2], xc[1] / xc[2]);
    let rsq = u * u + v * v;
    let l = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
    [u * l * cam[6] + cam[7], v * l * cam[6] + cam[8]]
}

impl BaInput {
    /// Reads an ADBench BA file, expanding it to the replicated problem.
    pub fn read(path: &Path) -> Result<Self> {
        let text = text::read_file(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses ADBench BA text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let mut r = TextReader::new(text, source);
        let (h, [n, m, p]) = r.header(["n", "m", "p"])?;
        let total =
            product(&[n, N_CAM_PARAMS as u64]).saturating_add(product(&[m, 3])).saturating_add(product(&[p, 5]));
        r.check_limit(h, "numbers after replication (11n + 3m + 5p)", total, MAX_REPLICATED_ELEMENTS)?;
        r.check_memory(h, &format!("header 'n m p' = {n} {m} {p}: the replicated problem ((11n + 3m + 5p)*8)"), total)?;
        let (n, m, p) = (n as usize, m as usize, p as usize);
        let mut cam = Vec::with_capacity(N_CAM_PARAMS);
        r.numbers(N_CAM_PARAMS, &|| format!("the camera replicated {n} times"), &mut cam)?;
        let mut point = Vec::with_capacity(3);
        r.numbers(3, &|| format!("the point replicated {m} times"), &mut point)?;
        let mut weight = Vec::with_capacity(1);
        r.numbers(1, &|| format!("the weight replicated {p} times"), &mut weight)?;
        let mut feat = Vec::with_capacity(2);
        r.numbers(2, &|| format!("the feature replicated {p} times"), &mut feat)?;
        r.finish()?;
        Ok(BaInput {
            n,
            m,
            p,
            cams: cam.repeat(n),
            x: point.repeat(m),
            w: weight.repeat(p),
            obs: (0..p).map(|i| (i % n, i % m)).collect(),
            feats: feat.repeat(p),
        })
    }

    /// Checks that the sizes are positive, the vectors match them, observations index existing
    /// cameras and points, and every number is finite.
    pub fn validate(&self) -> Result<()> {
        let invalid = |what: String| DatasetError::Invalid { file: SOURCE_IN_MEMORY.into(), what };
        let (n, m, p) = (self.n, self.m, self.p);
        if n == 0 || m == 0 || p == 0 {
            return Err(invalid(format!("sizes must be positive (n = {n}, m = {m}, p = {p})")));
        }
        let sizes = [
            ("cams", self.cams.len(), n.checked_mul(N_CAM_PARAMS)),
            ("x", self.x.len(), m.checked_mul(3)),
            ("w", self.w.len(), Some(p)),
            ("obs", self.obs.len(), Some(p)),
            ("feats", self.feats.len(), p.checked_mul(2)),
        ];
        for (name, len, want) in sizes {
            if Some(len) != want {
                return Err(invalid(format!(
                    "{name} has {len} entries, expected {want:?} for n = {n}, m = {m}, p = {p}"
                )));
            }
        }
        if let Some((i, o)) = self.obs.iter().enumerate().find(|(_, o)| o.0 >= n || o.1 >= m) {
            return Err(invalid(format!("observation {i} = {o:?} is out of range")));
        }
        let all = [&self.cams, &self.x, &self.w, &self.feats];
        if let Some(v) = all.iter().flat_map(|v| v.iter()).find(|v| !v.is_finite()) {
            return Err(invalid(format!("non-finite value {v}")));
        }
        Ok(())
    }

    /// Whether the problem is the replication of its first camera, point, weight and feature
    /// with observation i = (i mod n, i mod m) — the only problems the text format can hold.
    pub fn is_replicated(&self) -> bool {
        fn same_rows(v: &[f64], width: usize) -> bool {
            let first = &v[..width.min(v.len())];
            v.chunks(width.max(1)).all(|r| r.iter().zip(first).all(|(a, b)| a.to_bits() == b.to_bits()))
        }
        let (n, m) = (self.n.max(1), self.m.max(1));
        same_rows(&self.cams, N_CAM_PARAMS)
            && same_rows(&self.x, 3)
            && same_rows(&self.w, 1)
            && same_rows(&self.feats, 2)
            && self.obs.iter().enumerate().all(|(i, &o)| o == (i % n, i % m))
    }

    fn check_writable(&self) -> Result<()> {
        self.validate()?;
        if !self.is_replicated() {
            return Err(DatasetError::Invalid {
                file: SOURCE_IN_MEMORY.into(),
                what: "the ADBench BA format holds only replicated problems (one camera, point, \
                       weight and feature; observation i = (i mod n, i mod m))"
                    .into(),
            });
        }
        Ok(())
    }

    fn write_body<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        writeln!(out, "{} {} {}", self.n, self.m, self.p)?;
        write_row(out, &self.cams[..N_CAM_PARAMS])?;
        write_row(out, &self.x[..3])?;
        write_row(out, &self.w[..1])?;
        write_row(out, &self.feats[..2])
    }

    /// Writes the ADBench format (numbers in shortest round-trip form, so parsing the output
    /// gives back exactly `self`). Fails with `Invalid` unless [`is_replicated`](Self::is_replicated).
    pub fn write<W: Write>(&self, out: W) -> Result<()> {
        self.check_writable()?;
        text::write_named("<output>", out, |w| self.write_body(w))
    }

    /// [`write`](Self::write) into a new file at `path`.
    pub fn write_file(&self, path: &Path) -> Result<()> {
        self.check_writable()?;
        text::write_path(path, |w| self.write_body(w))
    }

    /// [`write`](Self::write) into a String.
    pub fn to_text(&self) -> Result<String> {
        self.check_writable()?;
        Ok(text::write_string(|w| self.write_body(w)))
    }

    /// A seeded replicated problem (what the ADBench files describe): one camera, point,
    /// weight and feature drawn as in [`generate_varied`](Self::generate_varied), replicated,
    /// with observation i = (i mod n, i mod m). Writable in the ADBench format.
    ///
    /// # Panics
    /// When n, m or p is zero.
    pub fn generate(n: usize, m: usize, p: usize, seed: u64) -> Self {
        assert!(n > 0 && m > 0 && p > 0, "BA sizes must be positive (n = {n}, m = {m}, p = {p})");
        let mut rng = crate::rng(seed);
        let cam = random_camera(&mut rng);
        let point = random_point(&mut rng);
        let w = random_weight(&mut rng);
        let feat = random_feature(&mut rng, &cam, &point);
        BaInput {
            n,
            m,
            p,
            cams: cam.repeat(n),
            x: point.repeat(m),
            w: vec![w; p],
            obs: (0..p).map(|i| (i % n, i % m)).collect(),
            feats: feat.repeat(p),
        }
    }

    /// A seeded problem with distinct values, all projections finite:
    ///
    /// * cameras: rotation vector entries uniform in [-0.05, 0.05) (under 0.09 rad), centre
    ///   uniform in [-1, 1)^3, f uniform in [500, 1000), principal point uniform in
    ///   [-10, 10)^2, k1 uniform in [-0.1, 0.1), k2 uniform in [-0.01, 0.01);
    /// * points: x, y uniform in [-2, 2), z uniform in [6, 10), so every point lies at depth
    ///   above 3.9 in every camera, within about 45 degrees of its axis (|u|, |v| < 1.1) and
    ///   the distortion factor stays in [0.7, 1.3];
    /// * observation i: camera uniform in [0, n), point i mod m (each point observed about
    ///   p/m times);
    /// * weights uniform in [0.5, 1.5); features = the projection plus noise uniform in
    ///   [-2, 2) pixels per coordinate.
    ///
    /// Draw order: cameras, points, then per observation (camera, weight, noise).
    ///
    /// # Panics
    /// When n, m or p is zero.
    pub fn generate_varied(n: usize, m: usize, p: usize, seed: u64) -> Self {
        use rand::RngExt;
        assert!(n > 0 && m > 0 && p > 0, "BA sizes must be positive (n = {n}, m = {m}, p = {p})");
        let mut rng = crate::rng(seed);
        let cams: Vec<f64> = (0..n).flat_map(|_| random_camera(&mut rng)).collect();
        let x: Vec<f64> = (0..m).flat_map(|_| random_point(&mut rng)).collect();
        let mut obs = Vec::with_capacity(p);
        let mut w = Vec::with_capacity(p);
        let mut feats = Vec::with_capacity(2 * p);
        for i in 0..p {
            let (c, j) = (rng.random_range(0..n), i % m);
            obs.push((c, j));
            w.push(random_weight(&mut rng));
            let cam = cams[c * N_CAM_PARAMS..][..N_CAM_PARAMS].try_into().unwrap();
            let point = x[j * 3..][..3].try_into().unwrap();
            feats.extend(random_feature(&mut rng, cam, point));
        }
        BaInput { n, m, p, cams, x, w, obs, feats }
    }
}

fn random_camera(rng: &mut impl rand::RngExt) -> [f64; N_CAM_PARAMS] {
    let ranges = [
        (-0.05, 0.05),
        (-0.05, 0.05),
        (-0.05, 0.05),
        (-1.0, 1.0),
        (-1.0, 1.0),
        (-1.0, 1.0),
        (500.0, 1000.0),
        (-10.0, 10.0),
        (-10.0, 10.0),
        (-0.1, 0.1),
        (-0.01, 0.01),
    ];
    ranges.map(|(lo, hi)| text::uniform(rng, lo, hi))
}

fn random_point(rng: &mut impl rand::RngExt) -> [f64; 3] {
    [(-2.0, 2.0), (-2.0, 2.0), (6.0, 10.0)].map(|(lo, hi)| text::uniform(rng, lo, hi))
}

fn random_weight(rng: &mut impl rand::RngExt) -> f64 {
    text::uniform(rng, 0.5, 1.5)
}

fn random_feature(rng: &mut impl rand::RngExt, cam: &[f64; N_CAM_PARAMS], point: &[f64; 3]) -> [f64; 2] {
    project(cam, point).map(|c| c + text::uniform(rng, -2.0, 2.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use adgauge_testkit::adbench_file;

    fn read(rel: &str) -> Option<BaInput> {
        let path = adbench_file(rel)?;
        Some(BaInput::read(&path).unwrap_or_else(|e| panic!("{e}")))
    }

    fn check_replication(b: &BaInput) {
        assert_eq!(b.cams.len(), b.n * 11);
        assert_eq!(b.x.len(), b.m * 3);
        assert_eq!((b.w.len(), b.obs.len(), b.feats.len()), (b.p, b.p, 2 * b.p));
        for (i, &o) in b.obs.iter().enumerate() {
            assert_eq!(o, (i % b.n, i % b.m));
        }
        assert!(b.cams.chunks(11).all(|c| c == &b.cams[..11]));
        assert!(b.x.chunks(3).all(|c| c == &b.x[..3]));
        assert!(b.w.iter().all(|&w| w == b.w[0]));
        assert!(b.feats.chunks(2).all(|c| c == &b.feats[..2]));
        assert!(b.is_replicated());
    }

    #[test]
    fn reads_adbench_test_file() {
        let Some(b) = read("ba/test.txt") else {
            return;
        };
        assert_eq!((b.n, b.m, b.p), (2, 10, 10));
        assert_eq!(b.cams[0], 1.797201);
        assert_eq!(&b.cams[6..11], [211.628116, -0.284531, -14.762924, 0.058931, 0.069976]);
        assert_eq!(&b.x[..3], [4.173048, 5.586898, 1.403869]);
        assert_eq!(b.w[9], 0.417022);
        assert_eq!(&b.feats[18..], [-525.672849, 161.811929]);
        check_replication(&b);
    }

    #[test]
    fn reads_adbench_ba1() {
        let Some(b) = read("ba/ba1_n49_m7776_p31843.txt") else {
            return;
        };
        assert_eq!((b.n, b.m, b.p), (49, 7776, 31843));
        assert_eq!(&b.cams[..3], [-0.758453, -1.109613, -0.845551]);
        assert_eq!(b.cams[11 * 48 + 6], 419.194514);
        assert_eq!(&b.x[3 * 7775..], [7.203245, 0.001144, 3.023326]);
        assert_eq!(b.w[0], 0.417022);
        assert_eq!(&b.feats[..2], [271.760969, 834.209256]);
        assert_eq!(b.obs[31842], (31842 % 49, 31842 % 7776));
        check_replication(&b);
        // The file's problem round-trips through the writer.
        let text = b.to_text().unwrap();
        assert_eq!(BaInput::parse(&text, "ba1").unwrap(), b);
    }

    #[test]
    fn round_trips_generated_inputs_exactly() {
        for (seed, (n, m, p)) in [(1, 1, 1), (2, 10, 10), (5, 3, 17), (49, 100, 300)].into_iter().enumerate() {
            let b = BaInput::generate(n, m, p, seed as u64);
            check_replication(&b);
            let text = b.to_text().unwrap();
            assert_eq!(text.lines().count(), 5);
            assert_eq!(BaInput::parse(&text, "gen").unwrap(), b);
        }
        let b = BaInput::generate(3, 4, 5, 1);
        let dir = std::env::temp_dir().join(format!("adgauge-ba-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.txt");
        b.write_file(&path).unwrap();
        assert_eq!(BaInput::read(&path).unwrap(), b);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generators_are_deterministic_per_seed() {
        assert_eq!(BaInput::generate(3, 5, 9, 4), BaInput::generate(3, 5, 9, 4));
        assert_ne!(BaInput::generate(3, 5, 9, 4), BaInput::generate(3, 5, 9, 5));
        let v = BaInput::generate_varied(7, 50, 200, 4);
        assert_eq!(v, BaInput::generate_varied(7, 50, 200, 4));
        assert_ne!(v, BaInput::generate_varied(7, 50, 200, 5));
    }

    #[test]
    fn varied_problems_are_valid_distinct_and_project_near_their_features() {
        let b = BaInput::generate_varied(20, 300, 1000, 11);
        b.validate().unwrap();
        assert!(!b.is_replicated());
        assert!(matches!(b.to_text(), Err(DatasetError::Invalid { .. })));
        assert!(b.cams.chunks(11).skip(1).all(|c| c != &b.cams[..11]));
        let mut seen = vec![false; b.n];
        for (i, &(c, j)) in b.obs.iter().enumerate() {
            seen[c] = true;
            assert_eq!(j, i % b.m);
            let cam: &[f64; 11] = b.cams[c * 11..][..11].try_into().unwrap();
            let pt: &[f64; 3] = b.x[j * 3..][..3].try_into().unwrap();
            let proj = project(cam, pt);
            for k in 0..2 {
                let r = proj[k] - b.feats[2 * i + k];
                assert!(proj[k].is_finite() && proj[k].abs() < 3000.0, "{proj:?}");
                assert!(r.abs() <= 2.0, "residual {r}");
            }
        }
        assert!(seen.iter().all(|&s| s), "every camera observed");
    }

    #[test]
    fn projection_matches_a_hand_computed_case() {
        // No rotation, camera at the origin: u = f * x/z * (1 + k1 r^2 + k2 r^4) + u0.
        let mut cam = [0.0; 11];
        cam[6] = 100.0;
        cam[7] = 1.0;
        cam[8] = 2.0;
        cam[9] = 0.5;
        cam[10] = 0.25;
        let p = project(&cam, &[1.0, 2.0, 4.0]);
        let (u, v) = (0.25, 0.5);
        let l = 1.0 + 0.5 * 0.3125 + 0.25 * 0.3125 * 0.3125;
        assert_eq!(p, [100.0 * u * l + 1.0, 100.0 * v * l + 2.0]);
        // A quarter turn about z maps x to y.
        let mut cam = [0.0; 11];
        cam[2] = std::f64::consts::FRAC_PI_2;
        cam[6] = 1.0;
        let p = project(&cam, &[1.0, 0.0, 1.0]);
        assert!(p[0].abs() < 1e-15 && (p[1] - 1.0).abs() < 1e-15, "{p:?}");
    }

    /// Header line 1, camera 2, point 3, weight 4, feature 5.
    fn sample() -> Vec<String> {
        let text = BaInput::generate(2, 3, 4, 0).to_text().unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn parse_err(lines: &[String]) -> DatasetError {
        let e = BaInput::parse(&(lines.join("\n") + "\n"), "bad.txt").unwrap_err();
        assert_eq!(e.file(), "bad.txt");
        e
    }

    #[test]
    fn malformed_inputs_name_the_line() {
        let lines = sample();
        // Truncated.
        let e = BaInput::parse("", "bad.txt").unwrap_err();
        assert_eq!(e.line(), Some(1), "{e}");
        for cut in 1..5 {
            let e = parse_err(&lines[..cut]);
            assert_eq!(e.line(), Some(cut + 1), "{e}");
            assert!(e.to_string().contains("end of file"), "{e}");
        }
        // A letter where a number belongs.
        let mut bad = lines.clone();
        bad[1] = bad[1].replacen(' ', " q ", 1);
        let mut bad2 = lines.clone();
        bad2[1] = bad2[1].replacen(' ', " q", 1);
        assert_eq!(parse_err(&bad).line(), Some(2));
        assert_eq!(parse_err(&bad2).line(), Some(2));
        // Wrong count.
        let mut bad = lines.clone();
        bad[2] = "1.0 2.0".into();
        let e = parse_err(&bad);
        assert_eq!(e.line(), Some(3), "{e}");
        assert!(e.to_string().contains("expected 3 numbers"), "{e}");
        // Non-finite.
        for v in ["nan", "inf", "-1e400"] {
            let mut bad = lines.clone();
            bad[3] = v.into();
            let e = parse_err(&bad);
            assert_eq!(e.line(), Some(4), "{e}");
        }
        // Trailing garbage.
        let mut bad = lines.clone();
        bad.push("0".into());
        assert_eq!(parse_err(&bad).line(), Some(6));
        // Bad header.
        for h in ["2 3", "2 3 4 5", "0 3 4", "2 3 -4", "2 3 x"] {
            let mut bad = lines.clone();
            bad[0] = h.into();
            assert_eq!(parse_err(&bad).line(), Some(1), "{h}");
        }
    }

    #[test]
    fn huge_headers_fail_before_allocating() {
        let lines = sample();
        for h in [
            "2 3 1000000000000",
            "1000000000000 3 4",
            "2 1000000000000 4",
            "2 3 429496730",
            "18446744073709551615 18446744073709551615 18446744073709551615",
        ] {
            let mut bad = lines.clone();
            bad[0] = h.into();
            let e = parse_err(&bad);
            assert!(matches!(e, DatasetError::TooLarge { line: 1, .. }), "{h}: {e}");
        }
    }

    #[test]
    fn writer_rejects_inconsistent_problems() {
        let mut b = BaInput::generate(2, 3, 4, 0);
        b.obs[1] = (5, 0);
        assert!(matches!(b.validate(), Err(DatasetError::Invalid { .. })));
        let mut b = BaInput::generate(2, 3, 4, 0);
        b.w.push(1.0);
        assert!(b.to_text().is_err());
        let mut b = BaInput::generate(2, 3, 4, 0);
        b.obs.swap(0, 1);
        assert!(b.validate().is_ok() && b.to_text().is_err());
    }
}

//! Gaussian mixture model inputs in the ADBench text format, and a seeded generator.
//!
//! # Format (verified against ADBench's `data/gmm` files and `read_gmm_instance`)
//!
//! ```text
//! d k n                      sizes: dimension, components, points
//! alpha_0                    k lines, one number each
//! ...
//! mu_0,0 ... mu_0,d-1        k lines of d numbers (means)
//! ...
//! q_0 .. q_d-1 l_0 .. l_t-1  k lines of d + d(d-1)/2 numbers (inverse covariance factor: the
//! ...                        log-diagonal, then the strictly lower entries column by column)
//! x_0,0 ... x_0,d-1          n lines of d numbers (points) -- or ONE line, see below
//! ...
//! gamma m                    Wishart prior: a number and an integer (every ADBench file: 1.000000 0)
//! ```
//!
//! ADBench writes `%f` values with a trailing space on most lines; whitespace and blank lines do
//! not matter to this reader (see the crate's text rules), but every non-blank line must hold
//! exactly its count of numbers.
//!
//! **Replicate-point mode**: the `2.5M/` files announce n = 2 500 000 but hold a single point
//! line, which the reader copies n times (ADBench's `-rep` option). [`GmmInput::parse`] takes
//! `replicate_point: Option<bool>`: `Some(true)`/`Some(false)` force the mode; `None` detects it
//! — replicated exactly when n > 1 and the file holds exactly two non-blank lines (one point, the
//! Wishart line) after the icf block. The replicated size is limited to
//! [`MAX_REPLICATED_ELEMENTS`] numbers in total.

use std::io::Write;
use std::path::Path;

use crate::error::{DatasetError, Result};
use crate::text::{self, MAX_REPLICATED_ELEMENTS, TextReader, product, write_row};

impl Wishart {
    /// The prior is defined only for gamma > 0 (its log enters the objective) and m >= -1 (the
    /// degrees of freedom d + m + 1 must exceed d - 1 for the multivariate gamma function);
    /// outside that the objective is NaN, which used to pass as a result.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.gamma.is_nan() || self.gamma <= 0.0 {
            return Err("a positive Wishart gamma (its log enters the objective)".into());
        }
        if self.m < -1 {
            return Err("Wishart m >= -1 (the degrees of freedom d + m + 1 must exceed d - 1)".into());
        }
        Ok(())
    }
}

/// Parameters of the Wishart prior on the precision matrices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Wishart {
    pub gamma: f64,
    pub m: i32,
}

/// A GMM problem: parameters (alphas, means, icf), data points and the Wishart prior.
#[derive(Clone, Debug, PartialEq)]
pub struct GmmInput {
    /// Dimension of the points.
    pub d: usize,
    /// Number of mixture components.
    pub k: usize,
    /// Number of points.
    pub n: usize,
    /// Mixture weights before the softmax, length k.
    pub alphas: Vec<f64>,
    /// Component means, k rows of d (row-major).
    pub means: Vec<f64>,
    /// Inverse covariance factors, k rows of [`icf_size`]`(d)` (row-major).
    pub icf: Vec<f64>,
    /// Points, n rows of d (row-major).
    pub x: Vec<f64>,
    pub wishart: Wishart,
}

/// Numbers per component in `icf`: d log-diagonal entries and d(d-1)/2 lower entries.
pub fn icf_size(d: usize) -> usize {
    d * (d + 1) / 2
}

const SOURCE_IN_MEMORY: &str = "<GMM input>";

impl GmmInput {
    /// Reads an ADBench GMM file (see the module docs for `replicate_point`).
    pub fn read(path: &Path, replicate_point: Option<bool>) -> Result<Self> {
        let text = text::read_file(path)?;
        Self::parse(&text, &path.display().to_string(), replicate_point)
    }

    /// Parses ADBench GMM text; `source` names it in errors.
    pub fn parse(text: &str, source: &str, replicate_point: Option<bool>) -> Result<Self> {
        let mut r = TextReader::new(text, source);
        let (h, [d, k, n]) = r.header(["d", "k", "n"])?;
        let icf_sz = u128::from(d) * (u128::from(d) + 1) / 2; // < 2^127: no overflow
        let params = product(&[k]).saturating_mul(icf_sz.saturating_add(u128::from(d) + 1));
        r.check_fits(h, "numbers announced for alphas, means and icf (k*(1 + d + d(d+1)/2))", params)?;
        // The checks bound k, d and the icf size by the text length: they fit in usize.
        let (d, k, icf_sz) = (d as usize, k as usize, icf_sz as usize);

        let mut alphas = Vec::with_capacity(k);
        for i in 0..k {
            r.numbers(1, &|| format!("alpha {} of {k}", i + 1), &mut alphas)?;
        }
        let mut means = Vec::with_capacity(k * d);
        for i in 0..k {
            r.numbers(d, &|| format!("mean {} of {k}", i + 1), &mut means)?;
        }
        let mut icf = Vec::with_capacity(k * icf_sz);
        for i in 0..k {
            r.numbers(icf_sz, &|| format!("icf {} of {k}", i + 1), &mut icf)?;
        }

        let replicate = replicate_point.unwrap_or_else(|| n > 1 && r.remaining_lines() == 2);
        let points = product(&[n, d as u64]);
        let x = if replicate {
            r.check_limit(
                h,
                "numbers after replicating the point (k*(1 + d + d(d+1)/2) + n*d)",
                params.saturating_add(points),
                MAX_REPLICATED_ELEMENTS,
            )?;
            r.check_memory(h, &format!("header 'd k n' = {d} {k} {n}: the replicated points (n*d*8)"), points)?;
            let n = n as usize;
            let mut point = Vec::with_capacity(d);
            r.numbers(d, &|| format!("the point replicated {n} times"), &mut point)?;
            let mut x = Vec::with_capacity(n * d);
            for _ in 0..n {
                x.extend_from_slice(&point);
            }
            x
        } else {
            r.check_fits(h, "numbers announced (k*(1 + d + d(d+1)/2) + n*d)", params.saturating_add(points))?;
            let n = n as usize;
            let mut x = Vec::with_capacity(n * d);
            for i in 0..n {
                r.numbers(d, &|| format!("point {} of {n}", i + 1), &mut x)?;
            }
            x
        };

        let what = "Wishart parameters 'gamma m'";
        let (line, [gamma, m]) = r.fields::<2>(what)?;
        let gamma = r.float(line, gamma, &|| "number (Wishart gamma)".to_string())?;
        let m = m.parse::<i32>().map_err(|_| r.error(line, "an integer (Wishart m)", text::quote(m)))?;
        if let Err(why) = (Wishart { gamma, m }).check() {
            return Err(r.error(line, &why, format!("gamma {gamma}, m {m}")));
        }
        r.finish()?;
        Ok(GmmInput { d, k, n: n as usize, alphas, means, icf, x, wishart: Wishart { gamma, m } })
    }

    /// Checks that the sizes are positive, the vectors match them and every number is finite
    /// (what the reader guarantees, and the writer needs to produce a readable file).
    pub fn validate(&self) -> Result<()> {
        let invalid = |what: String| DatasetError::Invalid { file: SOURCE_IN_MEMORY.into(), what };
        if self.d == 0 || self.k == 0 || self.n == 0 {
            return Err(invalid(format!("sizes must be positive (d = {}, k = {}, n = {})", self.d, self.k, self.n)));
        }
        let sizes = [
            ("alphas", self.alphas.len(), Some(self.k)),
            ("means", self.means.len(), self.k.checked_mul(self.d)),
            ("icf", self.icf.len(), self.k.checked_mul(icf_size(self.d))),
            ("x", self.x.len(), self.n.checked_mul(self.d)),
        ];
        for (name, len, want) in sizes {
            if Some(len) != want {
                return Err(invalid(format!(
                    "{name} has {len} numbers, expected {want:?} for d = {}, k = {}, n = {}",
                    self.d, self.k, self.n
                )));
            }
        }
        let all = [&self.alphas, &self.means, &self.icf, &self.x];
        if let Some(v) = all.iter().flat_map(|v| v.iter()).find(|v| !v.is_finite()) {
            return Err(invalid(format!("non-finite value {v}")));
        }
        if !self.wishart.gamma.is_finite() {
            return Err(invalid("non-finite Wishart gamma".into()));
        }
        self.wishart.check().map_err(|why| invalid(format!("Wishart parameters: expected {why}")))?;
        Ok(())
    }

    /// Whether all points are bitwise equal (the input can be written in replicate-point mode).
    pub fn points_replicated(&self) -> bool {
        let d = self.d.max(1);
        let first = &self.x[..d.min(self.x.len())];
        self.x.chunks(d).all(|p| p.iter().zip(first).all(|(a, b)| a.to_bits() == b.to_bits()))
    }

    fn write_body<W: Write>(&self, out: &mut W, replicate_point: bool) -> std::io::Result<()> {
        writeln!(out, "{} {} {}", self.d, self.k, self.n)?;
        for a in &self.alphas {
            write_row(out, std::slice::from_ref(a))?;
        }
        for row in self.means.chunks(self.d) {
            write_row(out, row)?;
        }
        for row in self.icf.chunks(icf_size(self.d)) {
            write_row(out, row)?;
        }
        let points = if replicate_point { &self.x[..self.d] } else { &self.x[..] };
        for row in points.chunks(self.d) {
            write_row(out, row)?;
        }
        writeln!(out, "{:?} {}", self.wishart.gamma, self.wishart.m)
    }

    fn check_writable(&self, replicate_point: bool) -> Result<()> {
        self.validate()?;
        if replicate_point && !self.points_replicated() {
            return Err(DatasetError::Invalid {
                file: SOURCE_IN_MEMORY.into(),
                what: "replicate-point mode needs all points equal".into(),
            });
        }
        Ok(())
    }

    /// Writes the ADBench format, numbers in shortest round-trip form, so that parsing the
    /// output gives back exactly `self`. With `replicate_point`, writes the one point line of
    /// the `2.5M/` files (all points must be equal).
    pub fn write<W: Write>(&self, out: W, replicate_point: bool) -> Result<()> {
        self.check_writable(replicate_point)?;
        text::write_named("<output>", out, |w| self.write_body(w, replicate_point))
    }

    /// [`write`](Self::write) into a new file at `path`.
    pub fn write_file(&self, path: &Path, replicate_point: bool) -> Result<()> {
        self.check_writable(replicate_point)?;
        text::write_path(path, |w| self.write_body(w, replicate_point))
    }

    /// [`write`](Self::write) into a String.
    pub fn to_text(&self, replicate_point: bool) -> Result<String> {
        self.check_writable(replicate_point)?;
        Ok(text::write_string(|w| self.write_body(w, replicate_point)))
    }

    /// A seeded problem shaped like ADBench's generated files: alphas ~ N(0, 1), means uniform
    /// in [0, 1), icf entries ~ N(0, 1), points ~ N(0, 1), Wishart gamma = 1, m = 0. Draw order:
    /// alphas, means, icf, points (so [`generate_replicated`](Self::generate_replicated) with
    /// the same seed has the same parameters).
    ///
    /// # Panics
    /// When d, k or n is zero.
    pub fn generate(d: usize, k: usize, n: usize, seed: u64) -> Self {
        Self::generate_impl(d, k, n, seed, false)
    }

    /// Like [`generate`](Self::generate) but with one N(0, 1) point replicated n times, as in
    /// ADBench's `2.5M/` files.
    ///
    /// # Panics
    /// When d, k or n is zero.
    pub fn generate_replicated(d: usize, k: usize, n: usize, seed: u64) -> Self {
        Self::generate_impl(d, k, n, seed, true)
    }

    fn generate_impl(d: usize, k: usize, n: usize, seed: u64, replicate: bool) -> Self {
        assert!(d > 0 && k > 0 && n > 0, "GMM sizes must be positive (d = {d}, k = {k}, n = {n})");
        let mut rng = crate::rng(seed);
        let alphas = (0..k).map(|_| text::normal(&mut rng)).collect();
        let means = (0..k * d).map(|_| text::uniform(&mut rng, 0.0, 1.0)).collect();
        let icf = (0..k * icf_size(d)).map(|_| text::normal(&mut rng)).collect();
        let x = if replicate {
            let point: Vec<f64> = (0..d).map(|_| text::normal(&mut rng)).collect();
            point.repeat(n)
        } else {
            (0..n * d).map(|_| text::normal(&mut rng)).collect()
        };
        GmmInput { d, k, n, alphas, means, icf, x, wishart: Wishart { gamma: 1.0, m: 0 } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use adgauge_testkit::adbench_file;

    fn read(rel: &str, replicate: Option<bool>) -> Option<GmmInput> {
        let path = adbench_file(rel)?;
        Some(GmmInput::read(&path, replicate).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn reads_adbench_test_file() {
        let Some(g) = read("gmm/test.txt", None) else {
            return;
        };
        assert_eq!((g.d, g.k, g.n), (2, 3, 1));
        assert_eq!(g.alphas, [-0.649014, 1.181166, -0.758453]);
        assert_eq!(&g.means[..2], [0.092339, 0.186260]);
        assert_eq!(&g.icf[..3], [0.586443, -0.851887, 0.800321]);
        assert_eq!(g.icf.len(), 9);
        assert_eq!(g.x, [1.175171, 2.029160]);
        assert_eq!(g.wishart, Wishart { gamma: 1.0, m: 0 });
    }

    #[test]
    fn reads_adbench_1k_file() {
        let Some(g) = read("gmm/1k/gmm_d2_K5.txt", None) else {
            return;
        };
        assert_eq!((g.d, g.k, g.n), (2, 5, 1000));
        assert_eq!(g.alphas[4], -0.845551);
        assert_eq!(&g.means[8..], [0.670468, 0.417305]);
        assert_eq!(&g.icf[12..], [1.402162, -1.367747, -0.292535]);
        assert_eq!(&g.x[..2], [1.270848, 0.066009]);
        assert_eq!(&g.x[1998..], [0.388815, -0.447613]);
        assert!(!g.points_replicated());
        // Forcing the non-replicated mode reads the same thing.
        let path = adbench_file("gmm/1k/gmm_d2_K5.txt").unwrap();
        assert_eq!(GmmInput::read(&path, Some(false)).unwrap(), g);
        // Forcing replicate mode on a full file leaves 999 point lines unread.
        let e = GmmInput::read(&path, Some(true)).unwrap_err();
        assert_eq!(e.line(), Some(18), "{e}");
    }

    #[test]
    fn reads_adbench_10k_files() {
        if let Some(g) = read("gmm/10k/gmm_d2_K10.txt", None) {
            assert_eq!((g.d, g.k, g.n), (2, 10, 10_000));
            assert_eq!(&g.means[..2], [0.204452, 0.878117]);
            assert_eq!(&g.icf[..3], [1.270848, 0.066009, 0.451290]);
            assert_eq!(&g.x[g.x.len() - 2..], [-0.412796, 0.545528]);
        }
        if let Some(g) = read("gmm/10k/gmm_d10_K5.txt", None) {
            assert_eq!((g.d, g.k, g.n), (10, 5, 10_000));
            assert_eq!(g.icf.len(), 5 * 55);
            assert_eq!(&g.means[..2], [0.345561, 0.396767]);
            assert_eq!(&g.icf[..2], [-2.018691, 0.199740]);
            assert_eq!(&g.x[..3], [0.522585, 0.887144, 0.016548]);
            assert_eq!(&g.x[g.x.len() - 10..g.x.len() - 8], [0.008394, -0.469321]);
        }
    }

    #[test]
    fn reads_adbench_2_5m_file_in_replicate_mode() {
        let Some(g) = read("gmm/2.5M/gmm_d2_K5.txt", None) else {
            return;
        };
        assert_eq!((g.d, g.k, g.n), (2, 5, 2_500_000));
        assert_eq!(g.x.len(), 5_000_000);
        assert!(g.x.chunks(2).all(|p| p == [1.270848, 0.066009]));
        assert_eq!(g.wishart, Wishart { gamma: 1.0, m: 0 });
        let path = adbench_file("gmm/2.5M/gmm_d2_K5.txt").unwrap();
        assert_eq!(GmmInput::read(&path, Some(true)).unwrap(), g);
        // Forcing full mode: the file cannot hold 2.5M points.
        let e = GmmInput::read(&path, Some(false)).unwrap_err();
        assert!(matches!(e, DatasetError::TooLarge { line: 1, .. }), "{e}");
    }

    #[test]
    fn round_trips_generated_inputs_exactly() {
        for (seed, (d, k, n)) in [(1, 1, 1), (2, 3, 5), (5, 2, 17), (10, 4, 3), (3, 7, 2)].into_iter().enumerate() {
            let seed = seed as u64;
            let g = GmmInput::generate(d, k, n, seed);
            g.validate().unwrap();
            let text = g.to_text(false).unwrap();
            assert_eq!(GmmInput::parse(&text, "gen", None).unwrap(), g);
            assert_eq!(GmmInput::parse(&text, "gen", Some(false)).unwrap(), g);

            let r = GmmInput::generate_replicated(d, k, n, seed);
            assert!(r.points_replicated());
            assert_eq!((&r.alphas, &r.means, &r.icf), (&g.alphas, &g.means, &g.icf));
            let text = r.to_text(true).unwrap();
            assert_eq!(text.lines().count(), 1 + k * 3 + 1 + 1);
            assert_eq!(GmmInput::parse(&text, "gen", None).unwrap(), r);
            assert_eq!(GmmInput::parse(&text, "gen", Some(true)).unwrap(), r);
            let full = r.to_text(false).unwrap();
            assert_eq!(GmmInput::parse(&full, "gen", None).unwrap(), r);
        }
    }

    #[test]
    fn round_trips_extreme_values_and_files() {
        let mut g = GmmInput::generate(2, 2, 3, 9);
        g.alphas = vec![f64::MAX, f64::MIN_POSITIVE];
        g.means = vec![5e-324, -0.0, 1e-300, -1e300];
        g.x[0] = 0.1 + 0.2;
        g.wishart = Wishart { gamma: 2.5, m: 7 };
        let text = g.to_text(false).unwrap();
        let back = GmmInput::parse(&text, "gen", None).unwrap();
        assert_eq!(back, g);
        assert!(back.means[1].is_sign_negative());

        let dir = std::env::temp_dir().join(format!("adgauge-gmm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("g.txt");
        g.write_file(&path, false).unwrap();
        assert_eq!(GmmInput::read(&path, None).unwrap(), g);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generator_is_deterministic_per_seed() {
        assert_eq!(GmmInput::generate(3, 4, 50, 7), GmmInput::generate(3, 4, 50, 7));
        assert_ne!(GmmInput::generate(3, 4, 50, 7), GmmInput::generate(3, 4, 50, 8));
        let g = GmmInput::generate(3, 4, 2000, 1);
        assert!(g.means.iter().all(|&m| (0.0..1.0).contains(&m)));
        let mean = g.x.iter().sum::<f64>() / g.x.len() as f64;
        let var = g.x.iter().map(|v| v * v).sum::<f64>() / g.x.len() as f64;
        assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.1, "{mean} {var}");
    }

    #[test]
    fn writer_rejects_what_it_cannot_write() {
        let g = GmmInput::generate(2, 2, 3, 0);
        assert!(matches!(g.to_text(true), Err(DatasetError::Invalid { .. })));
        let mut bad = g.clone();
        bad.x.pop();
        assert!(matches!(bad.to_text(false), Err(DatasetError::Invalid { .. })));
        let mut bad = g.clone();
        bad.icf[0] = f64::NAN;
        assert!(matches!(bad.to_text(false), Err(DatasetError::Invalid { .. })));
    }

    /// A small valid text: header line 1, alphas 2-3, means 4-5, icf 6-7, points 8-10, Wishart 11.
    fn sample() -> Vec<String> {
        let text = GmmInput::generate(2, 2, 3, 4).to_text(false).unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn parse_lines(lines: &[String], replicate: Option<bool>) -> Result<GmmInput> {
        GmmInput::parse(&(lines.join("\n") + "\n"), "bad.txt", replicate)
    }

    fn parse_err(lines: &[String], replicate: Option<bool>) -> DatasetError {
        let e = parse_lines(lines, replicate).unwrap_err();
        assert_eq!(e.file(), "bad.txt");
        e
    }

    /// A prior outside its domain made the objective NaN and the run exit 0.
    #[test]
    fn wishart_parameters_outside_the_priors_domain_are_refused_at_their_line() {
        for (line, why) in
            [("-1.0 0", "positive Wishart gamma"), ("0 0", "positive Wishart gamma"), ("1.0 -2", "m >= -1")]
        {
            let mut lines = sample();
            lines[10] = line.to_string();
            let e = parse_err(&lines, None).to_string();
            assert!(e.contains("bad.txt:11") && e.contains(why), "{line}: {e}");
        }
        let mut lines = sample();
        lines[10] = "2.5 -1".to_string();
        assert_eq!(parse_lines(&lines, None).unwrap().wishart, Wishart { gamma: 2.5, m: -1 });
        let mut g = GmmInput::generate(2, 2, 3, 0);
        g.wishart.gamma = -1.0;
        assert!(matches!(g.validate(), Err(DatasetError::Invalid { .. })));
    }

    #[test]
    fn accepts_blank_lines_trailing_spaces_and_crlf() {
        let lines = sample();
        let want = parse_lines(&lines, None).unwrap();
        let spaced: Vec<String> = lines.iter().map(|l| format!("  {l} \r\n")).collect();
        let text = spaced.join("\n");
        assert_eq!(GmmInput::parse(&text, "x", None).unwrap(), want);
    }

    #[test]
    fn truncated_file_is_an_error_at_the_end() {
        let lines = sample();
        let e = parse_err(&lines[..10], None);
        assert_eq!(e.line(), Some(11), "{e}");
        assert!(e.to_string().contains("Wishart"), "{e}");
        let e = parse_err(&lines[..9], Some(false));
        assert_eq!(e.line(), Some(10), "{e}");
        assert!(e.to_string().contains("point 3 of 3"), "{e}");
        let e = parse_err(&lines[..3], None);
        assert_eq!(e.line(), Some(4), "{e}");
        let e = GmmInput::parse("", "bad.txt", None).unwrap_err();
        assert_eq!(e.line(), Some(1), "{e}");
    }

    #[test]
    fn letter_instead_of_number_names_the_line() {
        let mut lines = sample();
        lines[4] = "0.5 abc".into();
        let e = parse_err(&lines, None);
        assert_eq!(e.line(), Some(5), "{e}");
        assert!(e.to_string().contains("'abc'"), "{e}");
        let mut lines = sample();
        lines[10] = "1.0 zero".into();
        assert_eq!(parse_err(&lines, None).line(), Some(11));
        let mut lines = sample();
        lines[0] = "2 x 3".into();
        assert_eq!(parse_err(&lines, None).line(), Some(1));
    }

    #[test]
    fn wrong_count_on_a_line_names_the_line() {
        let mut lines = sample();
        lines[5].push_str(" 1.0");
        let e = parse_err(&lines, None);
        assert_eq!(e.line(), Some(6), "{e}");
        assert!(e.to_string().contains("expected 3 numbers"), "{e}");
        let mut lines = sample();
        lines[8] = "1.0".into();
        assert_eq!(parse_err(&lines, None).line(), Some(9));
        let mut lines = sample();
        lines[0] = "2 2".into();
        assert_eq!(parse_err(&lines, None).line(), Some(1));
    }

    #[test]
    fn huge_headers_fail_before_allocating() {
        let mut lines = sample();
        lines[0] = "2 2 1000000000000".into();
        for mode in [None, Some(false), Some(true)] {
            let e = parse_err(&lines, mode);
            assert!(matches!(e, DatasetError::TooLarge { line: 1, .. }), "{e}");
        }
        for header in ["1000000000000 2 3", "2 1000000000000 3", "4294967296 4294967296 1"] {
            lines[0] = header.into();
            let e = parse_err(&lines, None);
            assert!(matches!(e, DatasetError::TooLarge { line: 1, .. }), "{e}");
        }
        lines[0] = "18446744073709551615 18446744073709551615 18446744073709551615".into();
        assert!(matches!(parse_err(&lines, None), DatasetError::TooLarge { line: 1, .. }));
        lines[0] = "18446744073709551616 2 3".into();
        assert!(matches!(parse_err(&lines, None), DatasetError::Parse { line: 1, .. }));
    }

    #[test]
    fn replicated_size_is_limited() {
        let mut lines = sample();
        lines.drain(8..10); // keep one point line
        lines[0] = "2 2 1073741824".into(); // 2^31 point numbers plus parameters
        let e = parse_err(&lines, None);
        assert!(matches!(e, DatasetError::TooLarge { line: 1, .. }), "{e}");
    }

    #[test]
    fn non_finite_numbers_are_rejected_with_their_line() {
        for bad in ["nan", "NaN", "inf", "-inf", "infinity", "1e999"] {
            let mut lines = sample();
            lines[8] = format!("0.5 {bad}");
            let e = parse_err(&lines, None);
            assert_eq!(e.line(), Some(9), "{e}");
            assert!(e.to_string().contains("finite"), "{e}");
        }
        let mut lines = sample();
        lines[10] = "nan 0".into();
        assert_eq!(parse_err(&lines, None).line(), Some(11));
    }

    #[test]
    fn zero_or_negative_sizes_and_trailing_garbage_are_errors() {
        for header in ["0 2 3", "2 -2 3", "2 2 0", "2.0 2 3"] {
            let mut lines = sample();
            lines[0] = header.into();
            assert_eq!(parse_err(&lines, None).line(), Some(1), "{header}");
        }
        let mut lines = sample();
        lines.push(String::new());
        lines.push("1 2".into());
        let e = parse_err(&lines, None);
        assert_eq!(e.line(), Some(13), "{e}");
        assert!(e.to_string().contains("end of file"), "{e}");
    }

    #[test]
    fn mangled_texts_never_panic() {
        use rand::RngExt;
        let text = GmmInput::generate(3, 2, 4, 1).to_text(false).unwrap();
        let mut rng = crate::rng(99);
        for _ in 0..2000 {
            let mut bytes = text.clone().into_bytes();
            for _ in 0..rng.random_range(1..4usize) {
                let i = rng.random_range(0..bytes.len());
                match rng.random_range(0..3u8) {
                    0 => bytes[i] = b"0123456789 \n-.eE+x"[rng.random_range(0..18usize)],
                    1 => bytes.truncate(i),
                    _ => {
                        bytes.remove(i);
                    }
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let s = String::from_utf8(bytes).unwrap();
            for mode in [None, Some(true), Some(false)] {
                if let Err(e) = GmmInput::parse(&s, "m", mode) {
                    assert!(e.to_string().len() < 300, "{e}");
                }
            }
        }
    }
}

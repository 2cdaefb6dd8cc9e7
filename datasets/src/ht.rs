//! ADBench's hand-tracking (HT) model and inputs, and a seeded generator of inputs on its model.
//!
//! # Formats (verified against GradBench's `evals/ht/io.py` and ADBench's `data/hand` files)
//!
//! A model is a directory of `:`-separated text files (one record per line):
//!
//! ```text
//! bones.txt      name:parent:16 numbers:16 numbers    per bone: its parent (-1 for the root, else
//!                                                     an earlier bone), the base relative
//!                                                     transform and the inverse base absolute
//!                                                     transform, each a 4x4 matrix row by row
//! vertices.txt   x:y:z:nx:ny:nz:u:v:count:(bone:weight) x count
//!                                                     per vertex: its position, 5 numbers the
//!                                                     objective does not read, and its skinning
//!                                                     weights (bones not listed weigh 0)
//! triangles.txt  a:b:c                                per triangle: three vertex indices
//! ```
//!
//! An input (`handN_t26_cC.txt`) is whitespace-separated: a header `npts ntheta`, `npts` lines
//! `correspondence x y z` (the observed point and the vertex, or for the complicated variant
//! the triangle, it corresponds to), for the complicated variant `npts` lines `u0 u1` (the
//! point's barycentric coordinates on its triangle), then `ntheta` lines of one number (the
//! pose). The variant is read from the line count: simple files have `ntheta` lines after the
//! points, complicated ones `npts + ntheta`. Errors name the file and the 1-based line.
//!
//! The model's `is_mirrored` is not in the files: GradBench's reader sets it to false, as here.
//! [`HandModel::adbench_small`] is ADBench's small model, vendored in `datasets/data/ht`
//! (MIT; provenance in its `SOURCE.md`); tests find the full data set with
//! `adgauge_testkit::ht_file`.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::text::{self, TextReader, normal, quote, uniform};

/// Pose parameters: global rotation (3), global translation (3), and per finger the knuckle's
/// two angles and the two upper joints' one (4 x 5).
pub const N_THETA: usize = 26;
/// Bones the pose parameters address: ADBench's mapping writes the angles of bones 2 to 21.
pub const MIN_BONES: usize = 22;

/// A hand model: the skeleton, the skinned mesh and its triangles.
#[derive(Clone, Debug, PartialEq)]
pub struct HandModel {
    pub bone_names: Vec<String>,
    /// Per bone: -1 for a root, else the index of an earlier bone.
    pub parents: Vec<i64>,
    /// Per bone a 4x4 matrix, row by row (16 numbers per bone).
    pub base_relatives: Vec<f64>,
    /// Per bone a 4x4 matrix, row by row (16 numbers per bone).
    pub inverse_base_absolutes: Vec<f64>,
    /// Per vertex its homogeneous position (4 numbers; the files' vertices get w = 1).
    pub base_positions: Vec<f64>,
    /// Vertices x bones, row by row.
    pub weights: Vec<f64>,
    pub triangles: Vec<[usize; 3]>,
    pub is_mirrored: bool,
}

/// One HT problem: the model, the observed points, their correspondences and the parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct HandInput {
    pub model: HandModel,
    /// Per point the vertex (simple) or triangle (complicated) it corresponds to.
    pub correspondences: Vec<usize>,
    /// Points x 3, row by row.
    pub points: Vec<f64>,
    /// The pose, [`N_THETA`] numbers.
    pub theta: Vec<f64>,
    /// Points x 2 barycentric coordinates (complicated), or empty (simple).
    pub us: Vec<f64>,
}

impl HandModel {
    pub fn bones(&self) -> usize {
        self.bone_names.len()
    }

    pub fn vertices(&self) -> usize {
        self.base_positions.len() / 4
    }

    /// Reads `bones.txt`, `vertices.txt` and `triangles.txt` from the directory `dir`.
    pub fn read_dir(dir: &Path) -> Result<HandModel> {
        let read = |name: &str| -> Result<(String, String)> {
            let path = dir.join(name);
            Ok((text::read_file(&path)?, path.display().to_string()))
        };
        let (bones, vertices, triangles) = (read("bones.txt")?, read("vertices.txt")?, read("triangles.txt")?);
        HandModel::parse((&bones.0, &bones.1), (&vertices.0, &vertices.1), (&triangles.0, &triangles.1))
    }

    /// ADBench's small hand model (22 bones, 544 vertices, 1084 triangles), vendored.
    pub fn adbench_small() -> HandModel {
        const DIR: &str = "datasets/data/ht/model";
        HandModel::parse(
            (include_str!("../data/ht/model/bones.txt"), &format!("{DIR}/bones.txt")),
            (include_str!("../data/ht/model/vertices.txt"), &format!("{DIR}/vertices.txt")),
            (include_str!("../data/ht/model/triangles.txt"), &format!("{DIR}/triangles.txt")),
        )
        .unwrap_or_else(|e| unreachable!("the vendored hand model is well-formed: {e}"))
    }

    /// Parses the three model files, each given as (text, source name for errors).
    pub fn parse(bones: (&str, &str), vertices: (&str, &str), triangles: (&str, &str)) -> Result<HandModel> {
        let mut m = HandModel {
            bone_names: Vec::new(),
            parents: Vec::new(),
            base_relatives: Vec::new(),
            inverse_base_absolutes: Vec::new(),
            base_positions: Vec::new(),
            weights: Vec::new(),
            triangles: Vec::new(),
            is_mirrored: false,
        };
        let (text, file) = bones;
        let r = TextReader::new(text, file);
        for (line, fields) in records(text) {
            if fields.len() != 34 {
                return Err(r.error(
                    line,
                    "34 ':'-separated fields (name, parent, 16 + 16 numbers)",
                    fields_found(&fields),
                ));
            }
            let i = m.bone_names.len();
            let parent = match fields[1].trim().parse::<i64>() {
                Ok(p) if p == -1 || (0..i as i64).contains(&p) => p,
                _ => {
                    return Err(r.error(
                        line,
                        format!("a parent: -1 or an earlier bone (0 to {})", i as i64 - 1),
                        quote(fields[1]),
                    ));
                }
            };
            m.bone_names.push(fields[0].trim().to_string());
            m.parents.push(parent);
            for (k, tok) in fields[2..].iter().enumerate() {
                let v = r.float(line, tok.trim(), &|| format!("number {} of 32 of bone {i}", k + 1))?;
                if k < 16 { m.base_relatives.push(v) } else { m.inverse_base_absolutes.push(v) }
            }
        }
        if m.bones() == 0 {
            return Err(r.error(1, "at least one bone", "no records"));
        }
        let nb = m.bones();
        let (text, file) = vertices;
        let r = TextReader::new(text, file);
        for (line, fields) in records(text) {
            let count = fields.get(8).and_then(|t| t.trim().parse::<usize>().ok());
            if count.is_none_or(|c| fields.len() != 9 + 2 * c) {
                return Err(r.error(
                    line,
                    "x:y:z, 5 numbers, a weight count and that many bone:weight pairs",
                    fields_found(&fields),
                ));
            }
            let v = m.vertices();
            for (k, tok) in fields[..3].iter().enumerate() {
                m.base_positions.push(r.float(line, tok.trim(), &|| format!("coordinate {k} of vertex {v}"))?);
            }
            m.base_positions.push(1.0);
            let row = m.weights.len();
            m.weights.resize(row + nb, 0.0);
            for pair in fields[9..].chunks(2) {
                let bone = match pair[0].trim().parse::<usize>() {
                    Ok(b) if b < nb => b,
                    _ => return Err(r.error(line, format!("a bone index below {nb}"), quote(pair[0]))),
                };
                m.weights[row + bone] = r.float(line, pair[1].trim(), &|| format!("weight of bone {bone}"))?;
            }
        }
        if m.vertices() == 0 {
            return Err(r.error(1, "at least one vertex", "no records"));
        }
        let nv = m.vertices();
        let (text, file) = triangles;
        let r = TextReader::new(text, file);
        for (line, fields) in records(text) {
            let idx: Vec<usize> =
                fields.iter().filter_map(|t| t.trim().parse::<usize>().ok()).filter(|&v| v < nv).collect();
            if fields.len() != 3 || idx.len() != 3 {
                return Err(r.error(
                    line,
                    format!("three ':'-separated vertex indices below {nv}"),
                    fields_found(&fields),
                ));
            }
            m.triangles.push([idx[0], idx[1], idx[2]]);
        }
        Ok(m)
    }

    /// The rule a model's sizes obey, for inputs that did not come through [`HandModel::parse`]
    /// (a protocol message): `Err` names the field.
    pub fn check_sizes(&self) -> std::result::Result<(), String> {
        let nb = self.bones();
        if nb < MIN_BONES {
            return Err(format!(
                "field model.bone_names: {nb} bones; the {N_THETA} pose parameters address bones 0 to {}",
                MIN_BONES - 1
            ));
        }
        let count = |field: &str, got: usize, want: usize, what: &str| {
            if got == want { Ok(()) } else { Err(format!("field {field}: {got} numbers, expected {what} = {want}")) }
        };
        count("model.parents", self.parents.len(), nb, "bones")?;
        count("model.base_relatives", self.base_relatives.len(), 16 * nb, "16 x bones")?;
        count("model.inverse_base_absolutes", self.inverse_base_absolutes.len(), 16 * nb, "16 x bones")?;
        if self.base_positions.is_empty() || !self.base_positions.len().is_multiple_of(4) {
            return Err(format!(
                "field model.base_positions: {} numbers, expected rows of 4 (homogeneous positions), at least one",
                self.base_positions.len()
            ));
        }
        count("model.weights", self.weights.len(), nb * self.vertices(), "vertices x bones")?;
        for (i, &p) in self.parents.iter().enumerate() {
            if p != -1 && !(0..i as i64).contains(&p) {
                return Err(format!("field model.parents[{i}]: {p}; a parent is -1 or an earlier bone"));
            }
        }
        let nv = self.vertices();
        for (i, t) in self.triangles.iter().enumerate() {
            if let Some(k) = t.iter().position(|&v| v >= nv) {
                return Err(format!("field model.triangles[{i}][{k}]: vertex {}, but there are {nv}", t[k]));
            }
        }
        Ok(())
    }
}

impl HandInput {
    /// Points (correspondences).
    pub fn points(&self) -> usize {
        self.correspondences.len()
    }

    /// Whether this is the complicated variant (points on triangles, with `us`).
    pub fn complicated(&self) -> bool {
        !self.us.is_empty()
    }

    /// Reads an ADBench hand input; its model from `model_dir`, or else from the directory
    /// `model` beside the file.
    pub fn read(path: &Path, model_dir: Option<&Path>) -> Result<HandInput> {
        let text = text::read_file(path)?;
        let beside = path.parent().unwrap_or(Path::new(".")).join("model");
        let model = HandModel::read_dir(model_dir.unwrap_or(&beside))?;
        HandInput::parse(&text, &path.display().to_string(), model)
    }

    /// Parses an ADBench hand input (the variant from its line count) on `model`.
    pub fn parse(text: &str, source: &str, model: HandModel) -> Result<HandInput> {
        let mut r = TextReader::new(text, source);
        let (h, [npts, ntheta]) = r.header(["npts", "ntheta"])?;
        if ntheta as usize != N_THETA {
            return Err(r.error(h, format!("ntheta = {N_THETA} (ADBench's pose)"), ntheta.to_string()));
        }
        r.check_fits(h, "numbers announced (4 npts + ntheta)", u128::from(npts) * 4 + u128::from(ntheta))?;
        let npts = npts as usize;
        let remaining = r.remaining_lines();
        let complicated = if remaining == npts + N_THETA {
            false
        } else if remaining == 2 * npts + N_THETA {
            true
        } else {
            return Err(r.error(
                h + 1,
                format!(
                    "{} lines (simple: npts + ntheta) or {} (complicated: 2 npts + ntheta) after the header",
                    npts + N_THETA,
                    2 * npts + N_THETA
                ),
                format!("{remaining} lines"),
            ));
        };
        let limit = if complicated { model.triangles.len() } else { model.vertices() };
        let what = if complicated { "triangle" } else { "vertex" };
        let mut correspondences = Vec::with_capacity(npts);
        let mut points = Vec::with_capacity(3 * npts);
        let mut row = Vec::with_capacity(4);
        for i in 0..npts {
            row.clear();
            let line = r.numbers(4, &|| format!("point {i}: {what} x y z"), &mut row)?;
            let c = row[0];
            if c < 0.0 || c.fract() != 0.0 || c >= limit as f64 {
                return Err(r.error(line, format!("a {what} index below {limit}"), format!("{c}")));
            }
            correspondences.push(c as usize);
            points.extend_from_slice(&row[1..]);
        }
        let mut us = Vec::new();
        if complicated {
            us.reserve(2 * npts);
            for i in 0..npts {
                r.numbers(2, &|| format!("us of point {i}"), &mut us)?;
            }
        }
        let mut theta = Vec::with_capacity(N_THETA);
        for i in 0..N_THETA {
            r.numbers(1, &|| format!("theta[{i}]"), &mut theta)?;
        }
        r.finish()?;
        Ok(HandInput { model, correspondences, points, theta, us })
    }

    /// A seeded problem of `npts` points on `model`: correspondences uniform over the vertices
    /// (or triangles, `complicated`), points and the pose standard normal (as in ADBench's
    /// files), barycentric coordinates uniform on the triangle.
    pub fn generate(model: &HandModel, npts: usize, complicated: bool, seed: u64) -> HandInput {
        let mut rng = crate::rng(seed);
        let limit = if complicated { model.triangles.len() } else { model.vertices() };
        let correspondences = (0..npts).map(|_| rng.random_range(0..limit.max(1))).collect();
        let points = (0..3 * npts).map(|_| normal(&mut rng)).collect();
        let theta = (0..N_THETA).map(|_| normal(&mut rng)).collect();
        let us = if complicated {
            (0..npts)
                .flat_map(|_| {
                    let u0 = uniform(&mut rng, 0.0, 1.0);
                    let u1 = uniform(&mut rng, 0.0, 1.0 - u0);
                    [u0, u1]
                })
                .collect()
        } else {
            Vec::new()
        };
        HandInput { model: model.clone(), correspondences, points, theta, us }
    }
}

use rand::RngExt;

/// The non-blank lines of a model file as (1-based line, ':'-separated fields).
fn records(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_ascii().is_empty())
        .map(|(i, l)| (i + 1, l.trim_ascii().split(':').collect()))
}

fn fields_found(fields: &[&str]) -> String {
    format!("{} fields ({})", fields.len(), quote(&fields.join(":")))
}

/// The vendored inputs (`datasets/data/ht`), for tests: the path of `name` there.
pub fn vendored(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/ht").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_model_and_inputs_read_with_adbench_sizes_and_values() {
        let m = HandModel::adbench_small();
        assert_eq!((m.bones(), m.vertices(), m.triangles.len()), (22, 544, 1084));
        assert_eq!((m.bone_names[0].as_str(), m.parents[0]), ("wrist", -1));
        assert_eq!((m.bone_names[21].as_str(), m.parents[21]), ("forearm", 0));
        assert_eq!(m.parents[4], 3);
        // bones.txt line 2 (thumb1): the relative transform's first number and the translation
        // in its last column, then the inverse absolute's first number.
        assert_eq!(m.base_relatives[16], 0.6583698987960815);
        assert_eq!(m.base_relatives[16 + 7], 0.003628205507993698);
        assert_eq!(m.inverse_base_absolutes[16], 0.3320039212703705);
        // vertices.txt line 1: 4 weights, bone 2 weighs 0.2707933843876052, bone 1 none.
        assert_eq!(&m.base_positions[..4], &[0.028303472325205803, 0.07706871628761292, 0.01739514246582985, 1.0]);
        assert_eq!((m.weights[2], m.weights[0], m.weights[1]), (0.2707933843876052, 0.3625080610927875, 0.0));
        assert_eq!((m.triangles[0], m.triangles[1]), ([290, 412, 289], [3, 5, 4]));

        let s = HandInput::read(&vendored("simple_hand1_t26_c100.txt"), None).unwrap();
        assert_eq!((s.points(), s.complicated()), (100, false));
        assert_eq!((s.correspondences[1], &s.points[3..6]), (315, &[0.783658, 0.189070, 0.729577][..]));
        assert_eq!((s.theta[0], s.theta[25]), (0.368313, 0.878251));
        let c = HandInput::read(&vendored("complicated_hand1_t26_c100.txt"), Some(&vendored("model"))).unwrap();
        assert_eq!((c.points(), c.complicated(), c.us.len()), (100, true, 200));
        assert_eq!((c.correspondences[0], c.correspondences[99], &c.us[..2]), (516, 46, &[0.348857, 0.449636][..]));
    }

    #[test]
    fn malformed_files_name_the_file_and_line() {
        let m = HandModel::adbench_small();
        let e = HandInput::parse(&format!("2 26\n1 0 0 0\n{}", " ".repeat(99)), "h.txt", m.clone())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("h.txt:2: expected 28 lines") && e.contains("found 1 lines"), "{e}");
        let mut text = String::from("1 26\n600 1 2 3\n");
        text += &"0.5\n".repeat(26);
        let e = HandInput::parse(&text, "h.txt", m.clone()).unwrap_err().to_string();
        assert!(e.contains("h.txt:2: expected a vertex index below 544, found 600"), "{e}");
        let e = HandInput::parse("1 25\n", "h.txt", m).unwrap_err().to_string();
        assert!(e.contains("h.txt:1: expected ntheta = 26"), "{e}");
        let bone = format!("root:-1{}", ":0".repeat(32));
        let e = HandModel::parse((&format!("{bone}\nb:1{}", ":0".repeat(32)), "bones.txt"), ("", "v"), ("", "t"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bones.txt:2: expected a parent: -1 or an earlier bone (0 to 0), found '1'"), "{e}");
        let e = HandModel::parse((&bone, "b"), ("0:0:0:0:0:0:0:0:1:1:0.5", "vertices.txt"), ("", "t"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vertices.txt:1: expected a bone index below 1, found '1'"), "{e}");
        let e = HandModel::parse((&bone, "b"), ("0:0:0:0:0:0:0:0:0\n1:x:0:0:0:0:0:0:0", "vertices.txt"), ("", "t"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vertices.txt:2: expected a decimal coordinate 1 of vertex 1, found 'x'"), "{e}");
        let e = HandModel::parse((&bone, "b"), ("0:0:0:0:0:0:0:0:0", "v"), ("0:0:1", "triangles.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("triangles.txt:1: expected three ':'-separated vertex indices below 1"), "{e}");
    }

    #[test]
    fn generated_inputs_are_seeded_and_in_range() {
        let m = HandModel::adbench_small();
        let a = HandInput::generate(&m, 50, true, 3);
        assert_eq!(a, HandInput::generate(&m, 50, true, 3));
        assert_ne!(a.theta, HandInput::generate(&m, 50, true, 4).theta);
        assert!(a.correspondences.iter().all(|&t| t < 1084));
        assert!(a.us.chunks(2).all(|u| u[0] >= 0.0 && u[1] >= 0.0 && u[0] + u[1] <= 1.0));
        let s = HandInput::generate(&m, 50, false, 3);
        assert!(s.us.is_empty() && s.correspondences.iter().all(|&v| v < 544));
        assert_eq!(m.check_sizes(), Ok(()));
    }
}

//! GradBench's `det` eval (after cmpad's `det_by_minor`): the determinant of an l x l matrix A by
//! expansion by minors along the first row, and its gradient with respect to A.
//!
//! cmpad's recursion expands the minor of the rows r..l-1 and a set S of columns (|S| = l - r)
//! along its first row: `det(r, S) = sum_j (-1)^j A[r, c_j] det(r + 1, S \ {c_j})` over the
//! columns c_0 < c_1 < ... of S, with `det(l - 1, {c}) = A[l - 1, c]`. A minor depends only on
//! its row and column set, so the recursion (about e l! calls) evaluates each of the 2^l minors
//! many times; here each is evaluated once, level by level from the bottom row, as array ops:
//! level m holds the C(l, m) minors of the last m rows, and one level is two gathers (the
//! entries A[l - m, c_j] and the sub-minors det(S \ {c_j}), C(l, m) x m each), their product,
//! and a matrix product with the signs (+1, -1, +1, ...) that adds each row's terms in column
//! order. Each minor is the same sum of the same products in the same order as cmpad's, so on a
//! device that adds a row of the matrix product in order (the CPU) the determinant is bit for
//! bit the recursion's. The work is about l 2^(l-1) products instead of e l!.
//!
//! The hand-derived gradient is the cofactor matrix, `d det / d A_ij = (-1)^(i+j) det(M_ij)`,
//! each minor's determinant computed on the host in f64 by Gaussian elimination with partial
//! pivoting: a different algorithm from the expansion. GradBench's inputs are `{"A": [l^2
//! numbers, row-major], "ell": l}` (uniform in [0, 1) in its eval, l = 5 to 11); `adgauge eval
//! det` reads the same object and prints `{"objective": det A}`, with `"gradient"` (row-major)
//! in vjp and jvp (one forward sweep per entry) modes.

use adgauge_backends::prelude::*;
use adgauge_backends::{AnyDevice, BinaryOp, DType, Device, Forward, Ops, OutOfRange, Result, Reverse, with_device};
use rand::RngExt;
use serde_json::Value as Json;

use crate::lse::{finite_array, input_object};
use crate::objective::{
    ObjectiveProblem, RemoteModule, ScalarObjective, gradient_by_unit_directions, scalar_eval_json,
};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalRequest, GradbenchCall, Mode, ParamSpec, Params, Problem, WResult, Workload, WorkloadError, rounded, sizes,
};

/// The largest edge: level l/2 then has C(18, 9) = 48620 minors, and the levels together
/// 18 2^17 = 2.4 million gathered entries (GradBench's largest default is 11).
pub const MAX_ELL: usize = 18;

/// Validation size: 25 entries, each with its own finite difference and forward sweep.
const CHECK: [(&str, u64); 1] = [("ell", 5)];

/// One det input: the matrix, row-major, and its edge.
#[derive(Clone, Debug, PartialEq)]
pub struct DetInput {
    pub a: Vec<f64>,
    pub ell: usize,
}

impl DetInput {
    /// GradBench's generator shape: entries uniform in [0, 1), from the seeded generator.
    pub fn generate(ell: usize, seed: u64) -> DetInput {
        let mut rng = adgauge_datasets::rng(seed);
        DetInput { a: (0..ell * ell).map(|_| rng.random::<f64>()).collect(), ell }
    }
}

impl CheckedInput for DetInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("A", &self.a)]
    }
    fn sizes(&self) -> std::result::Result<(), String> {
        if self.ell == 0 || self.ell > MAX_ELL {
            return Err(format!("field ell: {} is outside [1, {MAX_ELL}]", self.ell));
        }
        if self.a.len() != self.ell * self.ell {
            return Err(format!(
                "field A: {} entries, but ell = {} needs {}",
                self.a.len(),
                self.ell,
                self.ell * self.ell
            ));
        }
        Ok(())
    }
}

/// One level of the expansion: the minors of the last m rows.
pub struct Level<O: Ops> {
    /// Entry A[l - m, c_j] of each minor's term j, minor-major (C(l, m) x m).
    entries: O::I,
    /// The position of sub-minor S \ {c_j} in the level below, same layout.
    subminors: O::I,
    /// (+1, -1, +1, ...), m x 1.
    signs: O::T,
    minors: usize,
    m: usize,
}

/// A det problem on an engine's device: the matrix (l^2) and the expansion's index tables.
pub struct DetResident<O: Ops> {
    pub a: O::T,
    /// The bottom row's entries, the minors of size 1.
    bottom: O::I,
    levels: Vec<Level<O>>,
}

/// The column sets of size m of {0, .., l-1} as bit masks, in increasing order.
fn subsets(ell: usize, m: usize) -> Vec<u32> {
    (0u32..1 << ell).filter(|s| s.count_ones() as usize == m).collect()
}

/// Puts the matrix on the engine's device, rounded to `dtype`, with the index tables.
pub fn upload<O: Ops>(o: &O, input: &DetInput, dtype: DType) -> Result<DetResident<O>> {
    let ell = input.ell;
    // Where each column set of the previous level sits in it.
    let mut position = vec![0i64; 1 << ell];
    for (p, s) in subsets(ell, 1).into_iter().enumerate() {
        position[s as usize] = p as i64;
    }
    let bottom: Vec<i64> = (0..ell).map(|c| ((ell - 1) * ell + c) as i64).collect();
    let mut levels = Vec::with_capacity(ell.saturating_sub(1));
    for m in 2..=ell {
        let row = ell - m;
        let sets = subsets(ell, m);
        let (mut entries, mut subminors) = (Vec::with_capacity(sets.len() * m), Vec::with_capacity(sets.len() * m));
        for &s in &sets {
            for c in (0..ell).filter(|&c| s & (1 << c) != 0) {
                entries.push((row * ell + c) as i64);
                subminors.push(position[(s & !(1 << c)) as usize]);
            }
        }
        for (p, &s) in sets.iter().enumerate() {
            position[s as usize] = p as i64;
        }
        let signs: Vec<f64> = (0..m).map(|j| if j % 2 == 0 { 1.0 } else { -1.0 }).collect();
        levels.push(Level {
            entries: o.index(&entries)?,
            subminors: o.index(&subminors)?,
            signs: o.tensor(&signs, &[m, 1], dtype)?,
            minors: sets.len(),
            m,
        });
    }
    Ok(DetResident { a: o.tensor(&input.a, &[ell * ell], dtype)?, bottom: o.index(&bottom)?, levels })
}

/// det A by expansion by minors, shape `[1]`, on engine `P` (the device itself, or an AD engine
/// over it), with `a` the matrix on `P` and `signs` each level's signs lifted to `P`.
pub fn objective_on<O: Ops, P: Ops<I = O::I>>(p: &P, a: &P::T, signs: &[P::T], x: &DetResident<O>) -> Result<P::T> {
    let mut minors = p.gather(a, &x.bottom, OutOfRange::Error)?;
    for (level, sign) in x.levels.iter().zip(signs) {
        let entries = p.gather(a, &level.entries, OutOfRange::Error)?;
        let subminors = p.gather(&minors, &level.subminors, OutOfRange::Error)?;
        let terms = p.reshape(&p.binary(BinaryOp::Mul, &entries, &subminors)?, &[level.minors, level.m])?;
        minors = p.reshape(&p.matmul(&terms, false, sign, false)?, &[level.minors])?;
    }
    Ok(minors)
}

pub fn objective<B: Ops>(b: &B, x: &DetResident<B>) -> Result<B::T> {
    let signs: Vec<B::T> = x.levels.iter().map(|l| l.signs.clone()).collect();
    objective_on(b, &x.a, &signs, x)
}

/// det A and its gradient by reverse mode.
pub fn gradient<B: Ops>(b: &B, x: &DetResident<B>) -> Result<(f64, Vec<f64>)> {
    let r = Reverse::new(b.clone());
    let a = r.var(x.a.clone());
    let signs: Vec<_> = x.levels.iter().map(|l| r.lift(l.signs.clone())).collect();
    let y = objective_on(&r, &a, &signs, x)?;
    let g = r.backward(&y, b.full(&[1], 1.0, x.a.dtype())?)?;
    Ok((b.to_vec(y.value())?[0], b.to_vec(&g.get_or_zeros(b, &a)?)?))
}

/// det A and its derivative along `v` (row-major) by one forward sweep.
pub fn directional<B: Ops>(b: &B, x: &DetResident<B>, v: &[f64]) -> Result<(f64, f64)> {
    let f = Forward::new(b.clone());
    let a = f.dual(x.a.clone(), b.tensor(v, &[v.len()], x.a.dtype())?)?;
    let signs: Vec<_> = x.levels.iter().map(|l| f.lift(l.signs.clone())).collect();
    let y = objective_on(&f, &a, &signs, x)?;
    Ok((b.to_vec(f.primal(&y))?[0], b.to_vec(&f.tangent(&y)?)?[0]))
}

/// det A and its gradient by forward mode: one sweep per entry.
pub fn gradient_forward<B: Ops>(b: &B, x: &DetResident<B>) -> Result<(f64, Vec<f64>)> {
    let value = b.to_vec(&objective(b, x)?)?[0];
    gradient_by_unit_directions(x.a.numel(), value, |e| directional(b, x, e))
}

/// The determinant of the l x l row-major matrix `a` by Gaussian elimination with partial
/// pivoting, in f64.
pub fn det_by_elimination(a: &[f64], ell: usize) -> f64 {
    let mut m = a.to_vec();
    let mut det = 1.0;
    for k in 0..ell {
        let pivot = (k..ell).max_by(|&i, &j| m[i * ell + k].abs().total_cmp(&m[j * ell + k].abs())).unwrap_or(k);
        if m[pivot * ell + k] == 0.0 {
            return 0.0;
        }
        if pivot != k {
            for c in 0..ell {
                m.swap(k * ell + c, pivot * ell + c);
            }
            det = -det;
        }
        let d = m[k * ell + k];
        det *= d;
        for i in k + 1..ell {
            let factor = m[i * ell + k] / d;
            for c in k..ell {
                m[i * ell + c] -= factor * m[k * ell + c];
            }
        }
    }
    det
}

/// The hand-derived gradient: the cofactor matrix, row-major, `(-1)^(i+j) det(M_ij)` with each
/// minor's determinant by elimination in f64.
pub fn cofactors(a: &[f64], ell: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(ell * ell);
    for i in 0..ell {
        for j in 0..ell {
            let minor: Vec<f64> = (0..ell)
                .filter(|&r| r != i)
                .flat_map(|r| (0..ell).filter(move |&c| c != j).map(move |c| a[r * ell + c]))
                .collect();
            let sign = if (i + j) % 2 == 0 { 1.0 } else { -1.0 };
            out.push(sign * det_by_elimination(&minor, ell - 1));
        }
    }
    out
}

/// Parses GradBench's input `{"A": [l^2 numbers], "ell": l}`.
pub fn parse_input(value: &Json, source: &str) -> WResult<DetInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let obj = input_object(value, &["A", "ell"], &bad)?;
    let ell = match obj.get("ell") {
        None => return Err(bad("field ell: missing".into())),
        Some(v) => v
            .as_u64()
            .filter(|&l| (1..=MAX_ELL as u64).contains(&l))
            .ok_or_else(|| bad(format!("field ell: expected a whole number in [1, {MAX_ELL}], got {v}")))?,
    } as usize;
    let a = finite_array(obj, "A", &bad)?;
    let input = DetInput { a, ell };
    input.sizes().map_err(bad)?;
    Ok(input)
}

/// det in the registry: `workload: det` with edge ell.
pub struct Det;

impl Workload for Det {
    fn family(&self) -> &'static str {
        "det"
    }
    fn about(&self) -> &'static str {
        "GradBench's determinant by expansion by minors and its gradient, the cofactor matrix"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![sizes("ell", 1, MAX_ELL as u64, "edge of the matrix")]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        Ok(Box::new(ObjectiveProblem::<DetObjective>(DetInput::generate(p.int("ell")?, seed))))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let input = parse_input(&crate::json::parse_json(&req.text, &req.source)?, &req.source)?;
        crate::validate::validate(&input, &req.source, req.dtype)?;
        let (dt, mode) = (req.dtype, req.mode.unwrap_or(Mode::Primal));
        with_device!(device, |d| {
            let x = upload(d, &input, dt).map_err(WorkloadError::from_input)?;
            scalar_eval_json(d, mode, dt, &x, objective, gradient, gradient_forward)
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("ell") {
            Some(v) => format!("{name} ell={v}"),
            None => name.to_string(),
        }
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("det")
    }
    /// GradBench's `det` functions: `primal` returns the objective, `gradient` the gradient.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        self.gradbench_prepare(function, input, device, dtype)?.output()
    }
    /// The input parsed, validated and put on the device once, before the timed runs.
    fn gradbench_prepare<'a>(
        &'a self,
        function: &'a str,
        input: &'a Json,
        device: &'a AnyDevice,
        dtype: DType,
    ) -> WResult<Box<dyn GradbenchCall + 'a>> {
        let source = format!("det.{function} input");
        let input = parse_input(input, &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        crate::objective::primal_or_gradient_call::<DetObjective>("det", function, &input, device, dtype)
    }
}

/// det as a scalar objective of the matrix entries.
struct DetObjective;

impl ScalarObjective for DetObjective {
    type Remote = Self;
    type Resident<D: Device> = DetResident<D>;
    type Input = DetInput;
    fn rounded(input: &DetInput, dtype: DType) -> DetInput {
        DetInput { a: rounded(&input.a, dtype), ell: input.ell }
    }
    fn params(input: &DetInput) -> Vec<f64> {
        input.a.clone()
    }
    fn with_params(input: &DetInput, a: &[f64]) -> DetInput {
        DetInput { a: a.to_vec(), ell: input.ell }
    }
    fn upload<D: Device>(d: &D, input: &DetInput, dtype: DType) -> Result<DetResident<D>> {
        upload(d, input, dtype)
    }
    fn objective<D: Device>(d: &D, x: &DetResident<D>) -> Result<D::T> {
        objective(d, x)
    }
    fn gradient<D: Device>(d: &D, x: &DetResident<D>) -> Result<Vec<f64>> {
        Ok(gradient(d, x)?.1)
    }
    fn directional<D: Device>(d: &D, x: &DetResident<D>, v: &[f64]) -> Result<f64> {
        Ok(directional(d, x, v)?.1)
    }
    fn manual_gradient(input: &DetInput, _dtype: DType) -> Vec<f64> {
        cofactors(&input.a, input.ell)
    }
    fn forward_gradient<D: Device>(d: &D, x: &DetResident<D>, _n: usize) -> Option<Result<(f64, Vec<f64>)>> {
        Some(gradient_forward(d, x))
    }
    fn remote(input: &DetInput) -> Option<RemoteModule> {
        Some(RemoteModule {
            primal: "primal",
            gradient: "gradient",
            input: serde_json::json!({"A": input.a, "ell": input.ell}),
        })
    }
    fn full_jacobian() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;

    use super::*;

    /// cmpad's recursion (GradBench's det.hpp), written independently over index lists: the
    /// minor of rows r.. and columns `cols`, expanded along its first row.
    fn recursive(a: &[f64], ell: usize, r: usize, cols: &[usize]) -> f64 {
        if cols.len() == 1 {
            return a[r * ell + cols[0]];
        }
        let mut det = 0.0;
        for (j, &c) in cols.iter().enumerate() {
            let rest: Vec<usize> = cols.iter().copied().filter(|&k| k != c).collect();
            let term = a[r * ell + c] * recursive(a, ell, r + 1, &rest);
            det = if j % 2 == 0 { det + term } else { det - term };
        }
        det
    }

    fn on_cpu(input: &DetInput) -> (f64, Vec<f64>) {
        let cpu = Cpu::new(Some(1)).unwrap();
        gradient(&cpu, &upload(&cpu, input, DType::F64).unwrap()).unwrap()
    }

    /// [[2, 0, 1], [1, 3, 2], [1, 1, 2]]: det = 2 (6 - 2) - 0 + 1 (1 - 3) = 6; the cofactors by
    /// hand, row by row: (4, 0, -2), (1, 3, -2), (-3, -3, 6).
    #[test]
    fn a_three_by_three_matches_the_hand_computation() {
        let input = DetInput { a: vec![2.0, 0.0, 1.0, 1.0, 3.0, 2.0, 1.0, 1.0, 2.0], ell: 3 };
        let want = [4.0, 0.0, -2.0, 1.0, 3.0, -2.0, -3.0, -3.0, 6.0];
        let (y, g) = on_cpu(&input);
        assert_eq!(y, 6.0);
        assert_eq!(g, want);
        let cpu = Cpu::new(Some(1)).unwrap();
        let (fy, fg) = gradient_forward(&cpu, &upload(&cpu, &input, DType::F32).unwrap()).unwrap();
        assert_eq!((fy, fg.as_slice()), (6.0, &want[..]));
        let c = cofactors(&input.a, 3);
        assert!(c.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-14), "{c:?}");
        assert!((det_by_elimination(&input.a, 3) - 6.0).abs() < 1e-14);
    }

    #[test]
    fn small_edges_are_their_closed_forms() {
        assert_eq!(on_cpu(&DetInput { a: vec![-2.5], ell: 1 }), (-2.5, vec![1.0]));
        // [[a, b], [c, d]]: ad - bc, gradient (d, -c, -b, a).
        assert_eq!(
            on_cpu(&DetInput { a: vec![3.0, 5.0, 7.0, 11.0], ell: 2 }),
            (33.0 - 35.0, vec![11.0, -7.0, -5.0, 3.0])
        );
        // A permutation matrix's determinant is its sign: (0 1 2 3) -> (1 0 3 2) is even.
        let mut p = vec![0.0; 16];
        for (r, c) in [(0, 1), (1, 0), (2, 3), (3, 2)] {
            p[r * 4 + c] = 1.0;
        }
        assert_eq!(on_cpu(&DetInput { a: p, ell: 4 }).0, 1.0);
    }

    #[test]
    fn the_expansion_is_the_recursion_bit_for_bit_and_the_gradient_the_cofactors() {
        for ell in [4, 7] {
            let input = DetInput::generate(ell, 31337 + ell as u64);
            let cols: Vec<usize> = (0..ell).collect();
            let (y, g) = on_cpu(&input);
            assert_eq!(y, recursive(&input.a, ell, 0, &cols), "ell {ell}");
            let want = cofactors(&input.a, ell);
            assert!(g.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12), "ell {ell}: {g:?} vs {want:?}");
            // Expansion along row i with the cofactors gives det A for every i.
            for i in 0..ell {
                let along: f64 = (0..ell).map(|j| input.a[i * ell + j] * want[i * ell + j]).sum();
                assert!((along - y).abs() < 1e-12, "row {i}: {along} vs {y}");
            }
        }
    }

    #[test]
    fn malformed_inputs_name_their_field() {
        let msg = |v: Json| match parse_input(&v, "in.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert!(msg(serde_json::json!({"A": [1]})).contains("field ell: missing"));
        assert!(msg(serde_json::json!({"A": [1], "ell": 0})).contains("field ell: expected a whole number in [1, 18]"));
        assert!(msg(serde_json::json!({"A": [1], "ell": 19})).contains("field ell"));
        assert!(msg(serde_json::json!({"A": [1, 2, 3], "ell": 2})).contains("field A: 3 entries, but ell = 2 needs 4"));
        assert!(msg(serde_json::json!({"A": [1, "nan", 3, 4], "ell": 2})).contains("field A[1]: must be finite"));
        assert!(msg(serde_json::json!({"a": [1], "ell": 1})).contains("unknown field 'a'"));
        let ok = parse_input(&serde_json::json!({"A": [1, 2, 3, 4], "ell": 2, "min_runs": 3}), "in").unwrap();
        assert_eq!(ok, DetInput { a: vec![1.0, 2.0, 3.0, 4.0], ell: 2 });
    }
}

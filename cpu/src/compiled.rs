//! Compiled host programs: a straight-line program of f64 tensors (a traced device's recording,
//! lowered by `adgauge_backends::Traced` on `cpu-jit`), optimised once and then run by a
//! register-style interpreter over one flat buffer, with no tensor handles, allocations or
//! dispatch per op.
//!
//! What building a program does, as the ops arrive ([`Builder`]):
//! - constants (fills) go into one pool, interned by their bits, so a constant recorded a
//!   thousand times is stored once; inputs (uploads, tensors made outside the recording) are
//!   interned too, but never folded;
//! - an op whose operands are all constants runs at once, by the same kernels the interpreter
//!   uses, and its result is a constant (constant folding);
//! - exact identities: `x * 1`, `x / 1`, `x + (-0)` and `x - 0` are `x` for every value,
//!   NaN and -0 included; reshapes, and the rows of a stack taken apart again, are views of
//!   their operand, not copies;
//! - an op on the same operands as an earlier one is that one (common subexpressions);
//! - a constant of one value repeated is read as that one element by the ops that broadcast;
//! - the one-bin arg-histogram (the rules of `reduce(max)` and `reduce(min)`) holds its
//!   winner's position in an f64 value, which a one-value scatter and gather read.
//!
//! [`Builder::finish`] then keeps only what a read-back or an output needs (dead code), fuses
//! runs of elementwise ops of one length (at least [`FUSE_MIN`] elements) into loops that take
//! each block of elements through every op while it is in L1, results that nothing after the
//! loop reads kept in the loop's registers (a gather whose bins are a few runs of consecutive
//! indices is a copy; one of the loop's own values by a shift, as ode's `y[i - 1]`, reads the
//! block where the loop computes it and keeps the last elements for the next block, and where
//! it can, is a view of its source's register rather than a copy; the adjoint of such a shift,
//! a shift the other way, is a step of a loop whose blocks run from the last, so that ode's
//! backward pass is one loop, not one per RK4 stage), and
//! gives every other value a place in one f64 buffer, reused after its last reader: the
//! working set of a scalar program of millions of ops is a few kilobytes. Loops and
//! reductions long enough to split run on a pool of the device's thread count, in blocks
//! fixed by the length alone; a task of a loop with shifts first runs the blocks before its
//! own that its shifts reach back to (a warm-up that stores nothing), so ode's RK4 steps are
//! one loop at every length.
//!
//! Blocks are as long as keep a loop's registers in L1, and values of eight or more elements
//! start on a cache line. A division by one value repeated takes `quotient`'s fast path, the
//! divide's bits without the divide.
//!
//! Every element is computed by the CPU device's own kernels in the eager order (their
//! results never depend on how work is split, and the staged device computes each element as
//! the CPU does), so a compiled run repeats the eager run's bits — but for which NaN an op on
//! two NaNs returns, which is the machine code's choice of operand order; the traced device
//! checks that on every new program before it times one.

mod asm;
mod native;

use std::collections::HashMap;
use std::sync::Mutex;

use std::sync::Arc;

use crate::shape::{MatmulPlan, matmul_plan};
use crate::{BinaryOp, Extremum, HistOp, OpError, OutOfRange, Pool, Result, UnaryOp, dense, kernels, quotient};

/// The most elements a value of a compiled program may have (the buffer's places are `u32`;
/// 2^24 f64 are 128 MiB a value).
pub const MAX_LEN: usize = 1 << 24;

/// The most elements a program's buffer may have (2 GiB of f64; places must fit a `u32`).
pub const BUFFER_MAX: usize = 1 << 28;

/// Values shorter than this are computed op by op, not fused: a loop's per-block dispatch
/// costs more than the memory passes it saves on a few elements (particle's programs are
/// millions of ops on one or two).
pub const FUSE_MIN: usize = 32;

/// The fewest elements per block of a fused loop (the staged device's width). A loop's blocks
/// are this times a power of two ([`Loop::lanes`]), so that blocks of every loop start on
/// these ones' bounds.
const LOOP_LANES: usize = crate::staged::LANES;

/// The most elements per block of a fused loop.
const LOOP_LANES_MAX: usize = 8 * LOOP_LANES;

/// The bytes a loop's registers for one block may take: a block is as long as keeps them
/// within this, so that they stay in L1 (48 KiB on the machines measured) with room for the
/// block's inputs, and every step pays its dispatch over as many elements as that allows.
/// ode's RK4 loop at n = 1000 (nine registers) measured, min of six interleaved rounds: blocks
/// of 256, 0.301 ms; of 512, 0.231 ms (within 40 KiB, not 32); of 1024 (eight registers
/// then, 64 KiB), no faster than 512.
const REGISTERS_L1: usize = 40 << 10;

// A loop's tasks of BLOCK elements are whole blocks, each a whole number of a sum's lane
// groups but the last (`kernels::SumLanes`).
const _: () =
    assert!(kernels::BLOCK.is_multiple_of(LOOP_LANES_MAX) && LOOP_LANES.is_multiple_of(kernels::REDUCE_LANES));

/// f64 to a cache line: values of at least this many elements start on a line, in a buffer
/// that starts on one ([`Lines`]), so a loop's 64-byte vectors never straddle two lines.
const LINE: usize = 8;

/// The most elements of a loop's own values that gathers in the loop may read: they are
/// stored, in places the loop holds till it ends (ode's RK4 steps would otherwise chain
/// into one loop that stores every stage of every step).
const GATHERED_MAX: usize = 1 << 14;

/// Blocks per parallel task of a long fused loop.
const TASK_BLOCKS: usize = 64;

/// The most elements of warm-up a task of a loop with sums (whose tasks are `kernels::BLOCK`s)
/// may run; more, and the loop runs on one thread.
const WARM_MAX: usize = kernels::BLOCK / 8;

/// A value of a program being built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Val(u32);

/// An index table of a program being built (an upload of indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Idx(u32);

/// Where a value lives while the program is built.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// `len` elements of the constant pool from `at`.
    Const { at: u32 },
    /// `len` elements of the inputs from `at`: copied into the buffer at each run, never folded.
    Input { at: u32 },
    /// The result of node `node`.
    Node { node: u32 },
    /// `len` elements of node `node`'s result from `at` (a row of a stack, taken apart).
    View { node: u32, at: u32 },
}

#[derive(Clone, Copy, Debug)]
struct ValInfo {
    len: u32,
    place: Place,
}

/// What a node computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Select,
    Reduce(HistOp),
    /// The one-bin arg-histogram of the second operand from the first (one element): the
    /// winning value, then its position as an f64 (-1 when the first wins).
    ArgReduce(Extremum),
    /// The first operand with the element at the position the second holds (one element; -1
    /// or past the end: none) replaced by the third (one element).
    ScatterAt,
    /// The element of the first operand at the position the second holds (one element), or
    /// `fill` (bits) out of range.
    GatherAt {
        fill: u64,
    },
    /// From table `table` (bins of the source's length), `fill` (bits) out of range.
    Gather {
        table: u32,
        fill: u64,
    },
    /// The adjoint of a gather: the cotangents summed into zeros, in order.
    GatherAdjoint {
        table: u32,
    },
    UnaryAdjoint(UnaryOp),
    /// A broadcast from the first shape of `shapes` entry `shapes` to the second.
    Broadcast {
        shapes: u32,
    },
    /// The sum of the first shape of the entry down to the second.
    SumTo {
        shapes: u32,
    },
    /// A matrix product by plan `plan`.
    Matmul {
        plan: u32,
    },
    /// The operands one after the other.
    Stack,
    /// A copy for the caller, in program order.
    ReadBack,
}

struct Node {
    kind: Kind,
    args: Vec<Val>,
    len: u32,
}

/// A program being built: ops arrive in the eager run's order.
#[derive(Default)]
pub struct Builder {
    vals: Vec<ValInfo>,
    consts: Vec<f64>,
    const_of: HashMap<Vec<u64>, Val>,
    inputs: Vec<f64>,
    input_of: HashMap<Vec<u64>, Val>,
    nodes: Vec<Node>,
    /// Nodes by kind, operands and length (a broadcast of one-element operands has the length
    /// of the value it stands for).
    cse: HashMap<(Kind, Vec<Val>, u32), Val>,
    /// Constants of one value repeated, and that value as a one-element constant.
    splat_of: HashMap<Val, Val>,
    /// Index uploads, interned.
    indices: Vec<Vec<i64>>,
    index_of: HashMap<Vec<i64>, Idx>,
    /// Bins of an index upload at a source length (`u32::MAX` out of range), interned.
    table_of: HashMap<(Idx, u32), u32>,
    /// Bins, shape pairs of broadcasts and sums, and matrix products' plans, interned.
    side: Side,
    shape_of: HashMap<(Vec<usize>, Vec<usize>), u32>,
    plan_of: HashMap<(Vec<usize>, bool, Vec<usize>, bool), u32>,
    /// Values that must be computed though nothing reads them, with the caller's tag.
    outputs: Vec<(Val, u64)>,
    /// Threads of the pool that long loops and reductions split over (0: rayon's default,
    /// one per core).
    threads: usize,
    /// Subnormals flushed to zero while the program runs ([`Builder::set_flush_subnormals`]).
    flush: bool,
}

fn unsupported(what: String) -> OpError {
    OpError::Unsupported(format!("not compiled: {what}"))
}

fn len_u32(n: usize) -> Result<u32> {
    if n > MAX_LEN {
        return Err(unsupported(format!("a value of {n} elements (at most {MAX_LEN})")));
    }
    Ok(n as u32)
}

impl Builder {
    /// An empty program.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Long loops and reductions split over `threads` threads (the device's count), as the
    /// device's own kernels do.
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads;
    }

    /// Subnormals flushed to zero while the program runs, on every thread it runs on (the
    /// device's mode, whose eager run it must equal; `subnormals`).
    pub fn set_flush_subnormals(&mut self, flush: bool) {
        self.flush = flush;
    }

    /// The number of elements of `v`.
    pub fn len(&self, v: Val) -> usize {
        self.vals[v.0 as usize].len as usize
    }

    /// Ops kept so far (after folding, identities and common subexpressions).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn push_val(&mut self, len: u32, place: Place) -> Val {
        self.vals.push(ValInfo { len, place });
        Val(self.vals.len() as u32 - 1)
    }

    /// The constant `data` (interned by its bits).
    pub fn constant(&mut self, data: &[f64]) -> Result<Val> {
        self.interned(data, false)
    }

    /// An input of the program: the data a run starts from (an upload, a tensor made outside
    /// the recording). Unlike a constant it is copied in at each run and nothing computed from
    /// it is folded, as a jitted function's arguments are not: the run does the work. Equal
    /// inputs are one input.
    pub fn input(&mut self, data: &[f64]) -> Result<Val> {
        self.interned(data, true)
    }

    /// `data` in the inputs or the constants, once per distinct bits.
    fn interned(&mut self, data: &[f64], input: bool) -> Result<Val> {
        let len = len_u32(data.len())?;
        let key: Vec<u64> = data.iter().map(|x| x.to_bits()).collect();
        let (pool, map) =
            if input { (&mut self.inputs, &mut self.input_of) } else { (&mut self.consts, &mut self.const_of) };
        if let Some(&v) = map.get(&key) {
            return Ok(v);
        }
        if pool.len() + data.len() > BUFFER_MAX {
            return Err(unsupported(format!("constants or inputs past {BUFFER_MAX} elements")));
        }
        if data.len() >= LINE {
            pool.resize(pool.len().next_multiple_of(LINE), 0.0);
        }
        let at = pool.len() as u32;
        pool.extend_from_slice(data);
        let v = self.push_val(len, if input { Place::Input { at } } else { Place::Const { at } });
        let repeated = !input && key.len() > 1 && key.iter().all(|&b| b == key[0]);
        if input { &mut self.input_of } else { &mut self.const_of }.insert(key, v);
        if repeated {
            let one = self.constant(&data[..1])?;
            self.splat_of.insert(v, one);
        }
        Ok(v)
    }

    /// An upload of indices.
    pub fn index(&mut self, data: &[i64]) -> Idx {
        if let Some(&i) = self.index_of.get(data) {
            return i;
        }
        self.indices.push(data.to_vec());
        let i = Idx(self.indices.len() as u32 - 1);
        self.index_of.insert(data.to_vec(), i);
        i
    }

    fn const_data(&self, v: Val) -> Option<&[f64]> {
        let info = self.vals[v.0 as usize];
        match info.place {
            Place::Const { at } => Some(&self.consts[at as usize..(at + info.len) as usize]),
            _ => None,
        }
    }

    fn table(&mut self, idx: Idx, src_len: u32) -> u32 {
        if let Some(&t) = self.table_of.get(&(idx, src_len)) {
            return t;
        }
        let bins =
            self.indices[idx.0 as usize].iter().map(|&b| if (b as u64) < src_len as u64 { b as u32 } else { u32::MAX });
        let bins: Vec<u32> = bins.collect();
        self.side.runs.push(Runs::of(&bins));
        self.side.shifts.push(Shift::of(&bins));
        self.side.antis.push(AntiShift::of(&bins, src_len));
        self.side.bins.push(bins);
        let t = self.side.bins.len() as u32 - 1;
        self.table_of.insert((idx, src_len), t);
        t
    }

    /// A node of `kind` over `args` with `len` elements: folded when every operand is a
    /// constant, else the earlier equal node or a new one.
    fn node(&mut self, kind: Kind, args: Vec<Val>, len: usize) -> Result<Val> {
        let len = len_u32(len)?;
        let key = (kind, args, len);
        if let Some(&v) = self.cse.get(&key) {
            return Ok(v);
        }
        let (kind, args, _) = key;
        if kind != Kind::ReadBack && args.iter().all(|&a| self.const_data(a).is_some()) {
            let ins: Vec<&[f64]> = args.iter().map(|&a| self.const_data(a).unwrap_or(&[])).collect();
            let mut out = vec![0.0; len as usize];
            compute(kind, &ins, &mut out, &self.side);
            let v = self.constant(&out)?;
            self.cse.insert((kind, args, len), v);
            return Ok(v);
        }
        self.nodes.push(Node { kind, args: args.clone(), len });
        let v = self.push_val(len, Place::Node { node: self.nodes.len() as u32 - 1 });
        if kind != Kind::ReadBack {
            self.cse.insert((kind, args, len), v);
        }
        Ok(v)
    }

    fn shape_pair(&mut self, from: &[usize], to: &[usize]) -> u32 {
        let key = (from.to_vec(), to.to_vec());
        if let Some(&i) = self.shape_of.get(&key) {
            return i;
        }
        self.side.shapes.push(key.clone());
        self.shape_of.insert(key, self.side.shapes.len() as u32 - 1);
        self.side.shapes.len() as u32 - 1
    }

    fn check_len(&self, x: Val, shape: &[usize], what: &str) -> Result<()> {
        if self.len(x) != shape.iter().product::<usize>() {
            return Err(unsupported(format!("{what} of {} elements as shape {shape:?}", self.len(x))));
        }
        Ok(())
    }

    /// `x` of shape `from` broadcast to `to` (the CPU device's `broadcast_to`).
    pub fn broadcast_to(&mut self, x: Val, from: &[usize], to: &[usize]) -> Result<Val> {
        self.shape_op(x, from, to, true)
    }

    /// `x` of shape `from` summed down to `to` (the CPU device's `sum_to`).
    pub fn sum_to(&mut self, x: Val, from: &[usize], to: &[usize]) -> Result<Val> {
        self.shape_op(x, from, to, false)
    }

    /// A broadcast (`widen`) or a sum down to a shape. The shapes are checked here, once, by
    /// the kernel itself on zeros: at run time it cannot fail.
    fn shape_op(&mut self, x: Val, from: &[usize], to: &[usize], widen: bool) -> Result<Val> {
        self.check_len(x, from, if widen { "a broadcast" } else { "a sum" })?;
        let n: usize = to.iter().product();
        let (zeros, mut out) = (vec![0.0f64; self.len(x)], vec![0.0; n]);
        if widen {
            dense::broadcast_to(&zeros, from, to, &mut out)?;
        } else {
            dense::sum_to(&zeros, from, to, &mut out)?;
        }
        let shapes = self.shape_pair(from, to);
        let kind = if widen { Kind::Broadcast { shapes } } else { Kind::SumTo { shapes } };
        self.node(kind, vec![x], n)
    }

    /// `op(a) op(b)` (the CPU device's `matmul`).
    pub fn matmul(&mut self, a: Val, a_shape: &[usize], ta: bool, b: Val, b_shape: &[usize], tb: bool) -> Result<Val> {
        self.check_len(a, a_shape, "a matrix")?;
        self.check_len(b, b_shape, "a matrix")?;
        let key = (a_shape.to_vec(), ta, b_shape.to_vec(), tb);
        let plan = match self.plan_of.get(&key) {
            Some(&p) => p,
            None => {
                self.side.plans.push((matmul_plan(a_shape, ta, b_shape, tb)?, ta, tb));
                self.plan_of.insert(key, self.side.plans.len() as u32 - 1);
                self.side.plans.len() as u32 - 1
            }
        };
        let n = self.side.plans[plan as usize].0.out_shape.iter().product();
        self.node(Kind::Matmul { plan }, vec![a, b], n)
    }

    pub fn unary(&mut self, op: UnaryOp, x: Val) -> Result<Val> {
        let n = self.len(x);
        self.node(Kind::Unary(op), vec![x], n)
    }

    /// `a op b`, a one-element operand broadcast (the CPU device's `binary`).
    pub fn binary(&mut self, op: BinaryOp, a: Val, b: Val) -> Result<Val> {
        let (la, lb) = (self.len(a), self.len(b));
        let n = la.max(lb);
        if (la != n && la != 1) || (lb != n && lb != 1) {
            return Err(unsupported(format!("binary operands of {la} and {lb} elements")));
        }
        // Identities exact for every x: the result is x itself.
        let is_all = |s: Option<&[f64]>, bits: u64| s.is_some_and(|s| s.iter().all(|v| v.to_bits() == bits));
        let (one, neg_zero, zero) = (1f64.to_bits(), (-0f64).to_bits(), 0f64.to_bits());
        let keeps_a = la == n
            && match op {
                BinaryOp::Mul | BinaryOp::Div => is_all(self.const_data(b), one),
                BinaryOp::Add => is_all(self.const_data(b), neg_zero),
                BinaryOp::Sub => is_all(self.const_data(b), zero),
                _ => false,
            };
        if keeps_a {
            return Ok(a);
        }
        let keeps_b = lb == n
            && match op {
                BinaryOp::Mul => is_all(self.const_data(a), one),
                BinaryOp::Add => is_all(self.const_data(a), neg_zero),
                _ => false,
            };
        if keeps_b {
            return Ok(b);
        }
        let (a, b) = (self.splat(a), self.splat(b));
        self.node(Kind::Binary(op), vec![a, b], n)
    }

    /// `v` as one element where it is a constant of one value repeated (every element the
    /// same bits): the ops that broadcast a one-element operand then read that element, not a
    /// pass over the repeats (the adjoint of a sum broadcasts by adding a scalar to zeros).
    /// (Found when the constant is interned, whose key holds its bits already.)
    fn splat(&self, v: Val) -> Val {
        self.splat_of.get(&v).copied().unwrap_or(v)
    }

    /// `mask != 0 ? a : b`, `a` and `b` of the mask's length or one element.
    pub fn select(&mut self, mask: Val, a: Val, b: Val) -> Result<Val> {
        let n = self.len(mask);
        for x in [a, b] {
            if self.len(x) != n && self.len(x) != 1 {
                return Err(unsupported(format!("select of {} elements under a mask of {n}", self.len(x))));
            }
        }
        let (a, b) = (self.splat(a), self.splat(b));
        self.node(Kind::Select, vec![mask, a, b], n)
    }

    /// The whole of `x` reduced by `op`, one element.
    pub fn reduce(&mut self, op: HistOp, x: Val) -> Result<Val> {
        if let HistOp::General(_) = op {
            return Err(unsupported("a reduction by a general operator".into()));
        }
        self.node(Kind::Reduce(op), vec![x], 1)
    }

    /// `src[idx[i]]`: out of range an error (`OutOfRange::Error`, as the eager op: the
    /// recording would have failed) or the fill value.
    pub fn gather(&mut self, src: Val, idx: Idx, oob: OutOfRange) -> Result<Val> {
        let k = self.len(src) as u32;
        let table = self.table(idx, k);
        let fill = match oob {
            OutOfRange::Fill(v) => v,
            OutOfRange::Error => {
                if self.side.bins[table as usize].contains(&u32::MAX) {
                    return Err(unsupported("a gather out of range".into()));
                }
                0.0
            }
        };
        let n = self.side.bins[table as usize].len();
        self.node(Kind::Gather { table, fill: fill.to_bits() }, vec![src], n)
    }

    /// The adjoint of gathering from `src_len` elements: `g` summed by index into zeros, in
    /// order (the CPU's one-row path: the caller checks the size plan takes it).
    pub fn gather_adjoint(&mut self, src_len: usize, idx: Idx, g: Val) -> Result<Val> {
        let table = self.table(idx, len_u32(src_len)?);
        if self.side.bins[table as usize].len() != self.len(g) {
            return Err(unsupported("a gather adjoint of another length than its indices".into()));
        }
        self.node(Kind::GatherAdjoint { table }, vec![g], src_len)
    }

    /// The one-bin arg-histogram (the CPU device's `arg_reduce_by_index` with one bin, as the
    /// rules of `reduce(max)` and `reduce(min)` call it): the winner among `dest` (one element,
    /// position -1) and `vals` in order, ties to the earliest, a NaN beating every number. The
    /// winning value, and its position as an f64 value (exact: positions are below 2^24), each
    /// one element. Every index of `idx` must be 0, one per value.
    pub fn arg_reduce(&mut self, ext: Extremum, dest: Val, idx: Idx, vals: Val) -> Result<(Val, Val)> {
        if self.len(dest) != 1 {
            return Err(unsupported(format!("an arg-histogram of {} bins", self.len(dest))));
        }
        let bins = &self.indices[idx.0 as usize];
        if bins.len() != self.len(vals) || bins.iter().any(|&b| b != 0) {
            return Err(unsupported("an arg-histogram with an index other than 0".into()));
        }
        let both = self.node(Kind::ArgReduce(ext), vec![dest, vals], 2)?;
        Ok((self.slice(both, 0, 1)?, self.slice(both, 1, 1)?))
    }

    /// `dest` with the element at position `pos` (one element, a position as
    /// [`Builder::arg_reduce`] gives it; out of range: no element) replaced by `v` (one
    /// element): the CPU device's `scatter` of one value.
    pub fn scatter_at(&mut self, dest: Val, pos: Val, v: Val) -> Result<Val> {
        if self.len(pos) != 1 || self.len(v) != 1 {
            return Err(unsupported(format!("a scatter of {} values", self.len(v))));
        }
        let n = self.len(dest);
        let dest = self.splat(dest);
        self.node(Kind::ScatterAt, vec![dest, pos, v], n)
    }

    /// `src[pos]` for a position held in a value (one element, as [`Builder::arg_reduce`]
    /// gives it), the fill value out of range (`OutOfRange::Error` is not compiled: the
    /// eager op fails there, and a run cannot).
    pub fn gather_at(&mut self, src: Val, pos: Val, oob: OutOfRange) -> Result<Val> {
        let OutOfRange::Fill(fill) = oob else {
            return Err(unsupported("a gather at a computed position that may fail".into()));
        };
        if self.len(pos) != 1 {
            return Err(unsupported(format!("a gather at {} computed positions", self.len(pos))));
        }
        self.node(Kind::GatherAt { fill: fill.to_bits() }, vec![src, pos], 1)
    }

    /// The adjoint kernel of a unary op, `g` times its derivative at `x` (result `y`).
    pub fn unary_adjoint(&mut self, op: UnaryOp, x: Val, y: Val, g: Val) -> Result<Val> {
        let n = self.len(g);
        if self.len(x) != n || self.len(y) != n {
            return Err(unsupported("a unary adjoint of unequal lengths".into()));
        }
        self.node(Kind::UnaryAdjoint(op), vec![x, y, g], n)
    }

    /// The parts one after the other.
    pub fn stack(&mut self, parts: &[Val]) -> Result<Val> {
        let n = parts.iter().map(|&p| self.len(p)).sum();
        self.node(Kind::Stack, parts.to_vec(), n)
    }

    /// `len` elements of `x` from `at` (a row of `unstack`).
    pub fn slice(&mut self, x: Val, at: usize, len: usize) -> Result<Val> {
        let info = self.vals[x.0 as usize];
        if at + len > info.len as usize {
            return Err(unsupported("a slice past its operand".into()));
        }
        if at == 0 && len == info.len as usize {
            return Ok(x);
        }
        // A row of a stack is its part again.
        if let Place::Node { node } = info.place {
            let stacked = &self.nodes[node as usize];
            if stacked.kind == Kind::Stack {
                let mut start = 0;
                for &p in &stacked.args {
                    let pl = self.len(p);
                    if start == at && pl == len {
                        return Ok(p);
                    }
                    start += pl;
                }
            }
        }
        let place = match info.place {
            Place::Const { at: c } => {
                let data = self.consts[(c as usize + at)..(c as usize + at + len)].to_vec();
                return self.constant(&data);
            }
            Place::Input { at: i } => Place::Input { at: i + at as u32 },
            Place::Node { node } => Place::View { node, at: at as u32 },
            Place::View { node, at: a } => Place::View { node, at: a + at as u32 },
        };
        Ok(self.push_val(len as u32, place))
    }

    /// A copy of `x` for the caller, in program order (a read-back).
    pub fn read_back(&mut self, x: Val) -> Result<()> {
        let n = self.len(x);
        self.node(Kind::ReadBack, vec![x], n).map(drop)
    }

    /// `x` must be computed though nothing reads it (a result the caller drops): a check run
    /// shows it to the caller with `tag`.
    pub fn output(&mut self, x: Val, tag: u64) {
        self.outputs.push((x, tag));
    }

    /// The program: dead nodes dropped, elementwise runs fused into loops, places in one
    /// buffer assigned by liveness.
    /// Refused (an `Unsupported` error) when the buffer would pass [`BUFFER_MAX`] elements.
    pub fn finish(self) -> Result<Program> {
        let Builder { mut vals, consts, inputs, mut nodes, outputs, mut side, threads, flush, .. } = self;
        let mut live = liveness(&nodes, &vals, &outputs);
        if batch_products(&mut nodes, &live, &mut vals, &mut side)? {
            live = liveness(&nodes, &vals, &outputs);
        }
        let node_of = |v: Val| node_of(&vals, v);
        let items = schedule(&nodes, &live, &vals, &side);
        // A value is stored (given a place in the buffer) unless it is a fused op's result that
        // only later ops of its own loop read, directly: those live in the loop's registers.
        let mut item_of = vec![u32::MAX; nodes.len()];
        let mut fused = vec![false; nodes.len()];
        for (k, item) in items.iter().enumerate() {
            for &i in item.nodes() {
                item_of[i] = k as u32;
                fused[i] = matches!(item, Item::Loop(_));
            }
        }
        // A loop's sum is written to the buffer once the loop ends, whoever reads it.
        let mut stored: Vec<bool> =
            (0..nodes.len()).map(|i| live[i] && (!fused[i] || sums_in_loop(&nodes[i]))).collect();
        let mut last_use: Vec<u32> = item_of.clone();
        for &(v, _) in &outputs {
            if let Some(n) = node_of(v) {
                stored[n] = true;
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            if !live[i] {
                continue;
            }
            for (k, &a) in n.args.iter().enumerate() {
                let Some(j) = node_of(a) else { continue };
                let direct = matches!(vals[a.0 as usize].place, Place::Node { .. });
                // A gather reads its source from the buffer, its loop's own values too, but
                // for a shift's (its step keeps the elements before the block).
                let same_loop = fused[i] && item_of[i] == item_of[j] && direct;
                let gathered = match n.kind {
                    Kind::Gather { .. } if k == 0 => !(same_loop && side.shift(n.kind).is_some()),
                    _ => false,
                };
                if !same_loop || gathered {
                    stored[j] = true;
                }
                last_use[j] = last_use[j].max(item_of[i]);
            }
        }
        let mut ends: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
        for j in 0..nodes.len() {
            if stored[j] && nodes[j].kind != Kind::ReadBack {
                ends[last_use[j] as usize].push(j);
            }
        }
        // Outputs are observed right after their item runs, so they need no longer life.
        let mut free: HashMap<u32, Vec<u32>> = HashMap::new();
        // The buffer: constants, inputs, then the computed values.
        let inputs_at = consts.len().next_multiple_of(LINE) as u32;
        // Places are u64 while they are handed out, so that a buffer past the limit is refused
        // below rather than wrapped.
        let mut top = inputs_at as u64 + inputs.len() as u64;
        let mut at_of = vec![u32::MAX; nodes.len()];
        let mut pc_of = vec![0u32; nodes.len()];
        let (mut code, mut wide, mut loops) = (Vec::new(), Vec::new(), Vec::new());
        let loc = |v: Val, at_of: &[u32]| -> u32 {
            let info = vals[v.0 as usize];
            match info.place {
                Place::Const { at } => at,
                Place::Input { at } => inputs_at + at,
                Place::Node { node } => at_of[node as usize],
                Place::View { node, at } => at_of[node as usize] + at,
            }
        };
        let mut place = |len: u32, free: &mut HashMap<u32, Vec<u32>>| {
            free.get_mut(&len).and_then(|f| f.pop()).unwrap_or_else(|| {
                if len as usize >= LINE {
                    top = top.next_multiple_of(LINE as u64);
                }
                top += u64::from(len);
                (top - u64::from(len)) as u32
            })
        };
        let mut scratch_len = 0;
        for (k, item) in items.iter().enumerate() {
            match item {
                Item::One(i) => {
                    let (i, n) = (*i, &nodes[*i]);
                    let args: Vec<(u32, u32)> =
                        n.args.iter().map(|&a| (loc(a, &at_of), vals[a.0 as usize].len)).collect();
                    let out = if n.kind == Kind::ReadBack { 0 } else { place(n.len, &mut free) };
                    at_of[i] = out;
                    encode(n.kind, &args, out, n.len, &mut code, &mut wide);
                    // The node's value is complete after its last instruction.
                    pc_of[i] = code.len() as u32 - 1;
                }
                Item::Loop(members) => {
                    for &m in members {
                        if stored[m] {
                            at_of[m] = place(nodes[m].len, &mut free);
                        }
                    }
                    let body = fuse(members, &nodes, &vals, &stored, &|v| loc(v, &at_of), &at_of, &side);
                    scratch_len = scratch_len.max(body.scratch_len());
                    loops.push(body);
                    code.push(Ins { code: Code::Loop, op: 0, n: 0, a: loops.len() as u32 - 1, b: 0, out: 0 });
                    for &m in members {
                        pc_of[m] = code.len() as u32 - 1;
                    }
                }
            }
            for &j in &ends[k] {
                free.entry(nodes[j].len).or_default().push(at_of[j]);
            }
        }
        // Where each output is, and after which instruction to look (constants: before any).
        let mut observed: Vec<Observed> = outputs
            .iter()
            .map(|&(v, tag)| {
                let len = vals[v.0 as usize].len;
                let after = node_of(v).map(|n| pc_of[n]);
                Observed { after, at: loc(v, &at_of), len, tag }
            })
            .collect();
        observed.sort_by_key(|o| o.after.map_or(0, |p| p as u64 + 1));
        let mut init = consts;
        init.resize(inputs_at as usize, 0.0);
        init.extend_from_slice(&inputs);
        // The loops' registers for a run on one thread follow the values.
        let top = top.next_multiple_of(LINE as u64);
        let total = top + scratch_len as u64;
        if total > BUFFER_MAX as u64 {
            return Err(unsupported(format!("a buffer of {total} elements (at most {BUFFER_MAX})")));
        }
        let scratch = top as usize;
        init.resize(scratch + scratch_len, 0.0);
        // A pool of the device's size, for the loops and reductions (and the matrix products'
        // rows) long enough to split.
        let pool = (nodes.iter().zip(&live).any(|(n, &l)| l && n.len as usize >= kernels::PAR_MIN)
            || loops.iter().any(|l| l.task_span().is_some())
            || side
                .plans
                .iter()
                .any(|(p, ..)| [p.m, p.k, p.n].iter().fold(p.batch, |w, &d| w.saturating_mul(d)) >= kernels::PAR_MIN))
        .then(|| {
            let b = rayon::ThreadPoolBuilder::new().num_threads(threads);
            let b = if flush { b.start_handler(|_| crate::subnormals::flush_this_thread()) } else { b };
            b.build().ok()
        })
        .flatten();
        let (buffer, read_back_store) = (Mutex::new(Lines::default()), Mutex::new(Vec::new()));
        Ok(Program { code, wide, loops, init, scratch, side, observed, pool, flush, buffer, read_back_store })
    }
}

/// The node whose result holds `v` (none: a constant or an input).
fn node_of(vals: &[ValInfo], v: Val) -> Option<usize> {
    match vals[v.0 as usize].place {
        Place::Node { node } | Place::View { node, .. } => Some(node as usize),
        Place::Const { .. } | Place::Input { .. } => None,
    }
}

/// Live nodes: read-backs, outputs, and what they read.
fn liveness(nodes: &[Node], vals: &[ValInfo], outputs: &[(Val, u64)]) -> Vec<bool> {
    let mut live: Vec<bool> = nodes.iter().map(|n| n.kind == Kind::ReadBack).collect();
    for &(v, _) in outputs {
        if let Some(n) = node_of(vals, v) {
            live[n] = true;
        }
    }
    for i in (0..nodes.len()).rev() {
        if live[i] {
            for &a in &nodes[i].args {
                if let Some(n) = node_of(vals, a) {
                    live[n] = true;
                }
            }
        }
    }
    live
}

/// The most groups of products [`batch_products`] looks at (each costs a pass over the
/// program).
const PRODUCT_GROUPS_MAX: usize = 64;

/// Matrix products of one plan (two-dimensional operands) that share an operand and do not
/// feed one another become one product: what vector forward mode does to a Jacobian's sweeps,
/// done on the recording (ht's Jacobian multiplies the one weight matrix by a tangent per
/// coordinate of theta, 26 products each too small to run near the machine's speed alone).
/// - A shared left operand `a`: `a b_1, .., a b_K` is one batched product of `a` by the right
///   operands stacked, which packs `a` once for all of them (`dense::matmul`).
/// - A shared right operand `b`: `a_1 b, .., a_K b` is one product of the left operands
///   stacked as rows.
///
/// Each member's result is a view of the batched one, and each of its elements is the same
/// chain of multiply-adds as in the member's own product, so the bits do not change. The
/// batched product runs where the last member stood; whatever read the earlier members'
/// results moves after it, by a stable topological order that keeps read-backs in theirs. A
/// member whose varying operand depends on an earlier member stays a product of its own.
/// Whether any products were batched (the nodes renumbered).
fn batch_products(nodes: &mut Vec<Node>, live: &[bool], vals: &mut Vec<ValInfo>, side: &mut Side) -> Result<bool> {
    // (plan, shared operand, shared on the left) -> the products, in order.
    let mut groups: HashMap<(u32, Val, bool), Vec<usize>> = HashMap::new();
    let mut keys = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let Kind::Matmul { plan } = n.kind else { continue };
        let (p, ta, _) = &side.plans[plan as usize];
        if !live[i] || p.batch != 1 {
            continue;
        }
        // Left operands are stacked as rows, so they must not be transposed.
        for (shared_left, ok) in [(true, true), (false, !ta)] {
            if ok {
                let key = (plan, n.args[usize::from(!shared_left)], shared_left);
                let members = groups.entry(key).or_default();
                if members.is_empty() {
                    keys.push(key);
                }
                members.push(i);
            }
        }
    }
    let mut taken = vec![false; nodes.len()];
    let mut depends = vec![false; nodes.len()];
    let mut merges: Vec<(u32, Val, bool, Vec<usize>)> = Vec::new();
    for key in keys {
        let (plan, shared, shared_left) = key;
        let candidates: Vec<usize> = groups[&key].iter().copied().filter(|&i| !taken[i]).collect();
        if candidates.len() < 2 {
            continue;
        }
        if merges.len() == PRODUCT_GROUPS_MAX {
            break;
        }
        let (p, ..) = &side.plans[plan as usize];
        let varying_len = if shared_left { p.k * p.n } else { p.m * p.k };
        let most = MAX_LEN / (p.m * p.n).max(varying_len).max(1);
        // A member joins unless its varying operand depends on a member already in.
        let first = candidates[0];
        depends.fill(false);
        let (mut members, mut next) = (Vec::new(), 0);
        for i in first..nodes.len() {
            let reads = |v: Val| node_of(vals, v).is_some_and(|j| depends[j]);
            if candidates.get(next) == Some(&i) {
                next += 1;
                let joins = members.len() < most && !reads(nodes[i].args[usize::from(shared_left)]);
                if joins {
                    members.push(i);
                }
                depends[i] = joins || nodes[i].args.iter().any(|&a| reads(a));
                if next == candidates.len() {
                    break;
                }
                continue;
            }
            depends[i] = nodes[i].args.iter().any(|&a| reads(a));
        }
        if members.len() >= 2 {
            for &m in &members {
                taken[m] = true;
            }
            merges.push((plan, shared, shared_left, members));
        }
    }
    if merges.is_empty() {
        return Ok(false);
    }
    // The nodes in their first order, each group's members out and its stack and batched
    // product where its last member stood.
    let mut member_of = vec![None; nodes.len()];
    let mut last_of = HashMap::new();
    for (g, (.., members)) in merges.iter().enumerate() {
        for (k, &m) in members.iter().enumerate() {
            member_of[m] = Some((g, k));
        }
        last_of.insert(*members.last().expect("two members"), g);
    }
    let old_vals = vals.len();
    let mut order: Vec<Node> = Vec::with_capacity(nodes.len());
    let mut new_at = vec![u32::MAX; nodes.len()];
    let mut product_at = vec![(0u32, 0u32); merges.len()];
    for i in 0..nodes.len() {
        if let Some(&g) = last_of.get(&i) {
            let (plan, shared, shared_left, members) = &merges[g];
            let (p, ta, tb) = side.plans[*plan as usize].clone();
            let count = members.len();
            let varying = usize::from(*shared_left);
            let len = (members.iter().map(|&m| vals[nodes[m].args[varying].0 as usize].len as usize)).sum::<usize>();
            order.push(Node {
                kind: Kind::Stack,
                args: members.iter().map(|&m| nodes[m].args[varying]).collect(),
                len: len as u32,
            });
            vals.push(ValInfo { len: len as u32, place: Place::Node { node: order.len() as u32 - 1 } });
            let stacked = Val(vals.len() as u32 - 1);
            let (batched, args) = if *shared_left {
                let plan = MatmulPlan {
                    batch: count,
                    a_batched: false,
                    b_batched: true,
                    out_shape: vec![count, p.m, p.n],
                    ..p
                };
                ((plan, ta, tb), vec![*shared, stacked])
            } else {
                let plan = MatmulPlan { m: count * p.m, out_shape: vec![count * p.m, p.n], ..p };
                ((plan, false, tb), vec![stacked, *shared])
            };
            let out = (p.m * p.n) as u32;
            side.plans.push(batched);
            let plan = side.plans.len() as u32 - 1;
            order.push(Node { kind: Kind::Matmul { plan }, args, len: count as u32 * out });
            product_at[g] = (order.len() as u32 - 1, out);
        }
        if member_of[i].is_none() {
            new_at[i] = order.len() as u32;
            order.push(Node { kind: nodes[i].kind, args: std::mem::take(&mut nodes[i].args), len: nodes[i].len });
        }
    }
    let moved = |node: u32, at: u32| match member_of[node as usize] {
        Some((g, k)) => Place::View { node: product_at[g].0, at: at + k as u32 * product_at[g].1 },
        None if at == 0 => Place::Node { node: new_at[node as usize] },
        None => Place::View { node: new_at[node as usize], at },
    };
    for v in &mut vals[..old_vals] {
        v.place = match v.place {
            Place::Node { node } => moved(node, 0),
            Place::View { node, at } => moved(node, at),
            other => other,
        };
    }
    // Then a stable topological order: ready nodes run in their first order, read-backs one
    // after another.
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); order.len()];
    let mut waits = vec![0u32; order.len()];
    let mut last_read_back = None;
    for (i, n) in order.iter().enumerate() {
        for &a in &n.args {
            if let Some(j) = node_of(vals, a) {
                readers[j].push(i as u32);
                waits[i] += 1;
            }
        }
        if n.kind == Kind::ReadBack
            && let Some(j) = last_read_back.replace(i)
        {
            readers[j].push(i as u32);
            waits[i] += 1;
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<u32>> =
        (0..order.len() as u32).filter(|&i| waits[i as usize] == 0).map(std::cmp::Reverse).collect();
    let mut rank = vec![u32::MAX; order.len()];
    let mut ranked = 0;
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        rank[i as usize] = ranked;
        ranked += 1;
        for &r in &readers[i as usize] {
            waits[r as usize] -= 1;
            if waits[r as usize] == 0 {
                ready.push(std::cmp::Reverse(r));
            }
        }
    }
    if ranked as usize != order.len() {
        // Cannot happen (no member's operand reads a member), but a program refused is run
        // op by op by the traced device, where a wrong order would be a wrong answer.
        return Err(unsupported("products batched into a cycle".into()));
    }
    for v in vals.iter_mut() {
        if let Place::Node { node } | Place::View { node, .. } = &mut v.place {
            *node = rank[*node as usize];
        }
    }
    let mut sorted: Vec<Option<Node>> = (0..order.len()).map(|_| None).collect();
    for (i, n) in order.into_iter().enumerate() {
        sorted[rank[i] as usize] = Some(n);
    }
    *nodes = sorted.into_iter().map(|n| n.expect("every node ranked")).collect();
    Ok(true)
}

/// What [`Builder::finish`] runs, in order: a node alone, or a loop fusing elementwise nodes.
enum Item {
    One(usize),
    Loop(Vec<usize>),
}

impl Item {
    fn nodes(&self) -> &[usize] {
        match self {
            Item::One(i) => std::slice::from_ref(i),
            Item::Loop(m) => m,
        }
    }
}

/// Whether a node is a sum that joins the loop computing its operand, added up block by block
/// ([`kernels::SumLanes`]) rather than read back in a pass of its own.
fn sums_in_loop(n: &Node) -> bool {
    n.kind == Kind::Reduce(HistOp::Add)
}

/// Whether a node can be a step of a fused loop: elementwise (a gather reads its whole source,
/// which the loop must not write) and long enough that a loop pays for itself.
fn fusible(n: &Node) -> bool {
    n.len as usize >= FUSE_MIN
        && matches!(
            n.kind,
            Kind::Unary(_)
                | Kind::Binary(_)
                | Kind::Select
                | Kind::UnaryAdjoint(_)
                | Kind::Gather { .. }
                | Kind::ScatterAt
        )
}

/// The live nodes in the order they run, runs of fusible nodes of one length gathered into
/// loops. One loop is open at a time: a fusible node of its length joins it unless it reads a
/// value of the loop other than elementwise (a gather's source, or a view into a result); a
/// node that reads the loop's values closes it first; any other node runs before it (it reads
/// nothing the loop computes, and the loop runs where its last step stood). A loop of one step
/// too short to split runs as that node alone.
fn schedule(nodes: &[Node], live: &[bool], vals: &[ValInfo], side: &Side) -> Vec<Item> {
    let mut items = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut in_open = vec![false; nodes.len()];
    // The elements of the open loop's values that gathers in it read (stored for them).
    let mut gathered = 0usize;
    // The order the open loop's blocks must run in, once a member needs one.
    let mut order = Order::Any;
    let close = |open: &mut Vec<usize>, in_open: &mut [bool], items: &mut Vec<Item>, gathered: &mut usize| {
        *gathered = 0;
        for &m in open.iter() {
            in_open[m] = false;
        }
        match open.len() {
            0 => {}
            1 if (nodes[open[0]].len as usize) < kernels::PAR_MIN => items.push(Item::One(open[0])),
            _ => items.push(Item::Loop(std::mem::take(open))),
        }
        open.clear();
    };
    for (i, n) in nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let mut reads_open = false;
        let mut only_elementwise = true;
        let mut gathers_open = 0;
        // An adjoint by an anti-shift needs the blocks from the last; a shift of the loop's
        // own value, a causal gather of it or a sum, from the first (`Order`).
        let anti = side.anti(n.kind).is_some();
        let mut needs = if anti { Order::FromLast } else { Order::Any };
        if sums_in_loop(n) {
            needs = Order::FromFirst;
        }
        for (k, &a) in n.args.iter().enumerate() {
            let (node, direct) = match vals[a.0 as usize].place {
                Place::Node { node } => (node as usize, true),
                Place::View { node, .. } => (node as usize, false),
                _ => continue,
            };
            if in_open[node] {
                reads_open = true;
                if matches!(n.kind, Kind::Gather { .. }) && k == 0 {
                    needs = Order::FromFirst;
                }
                // A gather of the loop's own value joins where it reads no later element (the
                // loop then runs its blocks in order), within a budget of stored elements; a sum
                // of the loop is complete only after the loop.
                let whole = match n.kind {
                    Kind::Gather { .. } if k == 0 && side.shift(n.kind).is_some() => false,
                    Kind::Gather { table, .. } if k == 0 => {
                        gathers_open = nodes[node].len as usize;
                        !(gathered + gathers_open <= GATHERED_MAX
                            && (nodes[node].len as usize) < kernels::PAR_MIN
                            && causal(&side.bins[table as usize]))
                    }
                    _ => sums_in_loop(&nodes[node]),
                };
                only_elementwise &= direct && !whole;
            }
        }
        let loop_len = open.first().map(|&m| nodes[m].len);
        // An adjoint by an anti-shift that cannot join reading nothing of the loop runs before
        // it, as other nodes do, rather than closing it.
        let fusible = fusible(n) || (anti && (open.is_empty() || reads_open || order.with(needs).is_some()));
        let joins = only_elementwise
            && order.with(needs).is_some()
            && if sums_in_loop(n) {
                reads_open && loop_len == Some(vals[n.args[0].0 as usize].len)
            } else {
                fusible && loop_len == Some(n.len)
            };
        if joins {
            in_open[i] = true;
            open.push(i);
            gathered += gathers_open;
            order = order.with(needs).unwrap_or(order);
            continue;
        }
        if reads_open || (fusible && !open.is_empty()) {
            close(&mut open, &mut in_open, &mut items, &mut gathered);
            order = Order::Any;
        }
        if fusible {
            in_open[i] = true;
            open.push(i);
            // Its operands are now outside the loop: only an anti-shift's order remains.
            order = if anti { Order::FromLast } else { Order::Any };
        } else {
            items.push(Item::One(i));
        }
    }
    close(&mut open, &mut in_open, &mut items, &mut gathered);
    items
}

/// The order a fused loop's blocks run in, as its members need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Any,
    /// First to last: a shift's carry passes forward, a causal gather reads the blocks
    /// before, a sum adds up in `kernels::reduce`'s order.
    FromFirst,
    /// Last to first: an anti-shift's carry passes backward.
    FromLast,
}

impl Order {
    /// The order of a loop of this order that takes a member needing `needs`: none where the
    /// two disagree.
    fn with(self, needs: Order) -> Option<Order> {
        match (self, needs) {
            (a, Order::Any) => Some(a),
            (Order::Any, b) => Some(b),
            (a, b) => (a == b).then_some(a),
        }
    }
}

/// Whether every bin of a gather's table reads an element at or before its own (or none):
/// such a gather can read a value of its own loop, whose blocks then run in order, each
/// reading what this block and the ones before it stored.
fn causal(bins: &[u32]) -> bool {
    bins.iter().enumerate().all(|(i, &b)| b == u32::MAX || b as usize <= i)
}

/// The body of a fused loop over `members` (elementwise nodes of one length, in order): each
/// step's operands are registers (results of earlier steps no one else reads), the buffer
/// at the block (stored results and values from outside), one element (a broadcast scalar)
/// or, for a gather, its whole source; registers are reused after their last reader.
fn fuse(
    members: &[usize],
    nodes: &[Node],
    vals: &[ValInfo],
    stored: &[bool],
    loc: &dyn Fn(Val) -> u32,
    at_of: &[u32],
    side: &Side,
) -> Loop {
    let n = nodes[members[0]].len;
    let pos: HashMap<usize, usize> = members.iter().enumerate().map(|(x, &m)| (m, x)).collect();
    let member = |a: Val| match vals[a.0 as usize].place {
        Place::Node { node } => pos.get(&(node as usize)).map(|&x| (node as usize, x)),
        _ => None,
    };
    let mut last_read: Vec<usize> = (0..members.len()).collect();
    for (x, &m) in members.iter().enumerate() {
        for &a in &nodes[m].args {
            if let Some((_, y)) = member(a) {
                last_read[y] = x;
            }
        }
    }
    // Shifts read as views: a shift by `d` of a register's value, kept in no register of its
    // own, whose readers read the source's register `d` elements back; its step writes only
    // the `d` elements before the block (the carry, and exceptions that land there). The
    // source's register then lives as long as the view's readers. Not for a shift of a view,
    // a second view of one source, a stored result, or exceptions past the block's first `d`
    // elements (for every block length: LOOP_LANES_MAX is a multiple of all).
    let mut view_of_src: Vec<Option<u32>> = vec![None; members.len()];
    let mut viewed = vec![false; members.len()];
    for (x, &m) in members.iter().enumerate() {
        let node = &nodes[m];
        let (Some(shift), Some((j, y))) = (side.shift(node.kind), node.args.first().and_then(|&a| member(a))) else {
            continue;
        };
        let in_prefix = shift.exceptions.iter().all(|&(i, _)| (i as usize) % LOOP_LANES_MAX < shift.d as usize);
        if !stored[j] && !stored[m] && view_of_src[y].is_none() && !viewed[y] && in_prefix {
            viewed[y] = true;
            view_of_src[x] = Some(y as u32);
            last_read[y] = last_read[y].max(last_read[x]);
        }
    }
    let (mut reg_of, mut spare, mut registers) = (HashMap::new(), Vec::new(), 0u32);
    // Views' sources freed at the previous step: spare only after this step's result has its
    // register, so that a pair of the two (`pair_up`) does not write the register it views.
    let mut freed_views: Vec<u32> = Vec::new();
    let mut steps = Vec::with_capacity(members.len());
    let mut sums = Vec::new();
    let mut in_order = false;
    // How far back (in elements) each member's value reads through the loop's shifts.
    let mut depth = vec![0usize; members.len()];
    let mut carries = 0u32;
    for (x, &m) in members.iter().enumerate() {
        let node = &nodes[m];
        let mut src = [Src::Vec(0); 3];
        let shift = side.shift(node.kind).filter(|_| member(node.args[0]).is_some());
        // A shift of the loop's own value and an anti-shift keep a carry between blocks.
        let carry = if shift.is_some() || side.anti(node.kind).is_some() {
            carries += 1;
            carries - 1
        } else {
            NO_CARRY
        };
        for (k, &a) in node.args.iter().enumerate() {
            let len = vals[a.0 as usize].len;
            if let Some((_, y)) = member(a) {
                depth[x] = depth[x].max(depth[y] + shift.map_or(0, |s| s.d as usize));
            }
            in_order |= matches!(node.kind, Kind::Gather { .. }) && member(a).is_some() && shift.is_none();
            src[k] = match member(a) {
                Some((j, y)) if let Some(from) = view_of_src[y] => {
                    let d = side.shift(nodes[j].kind).map_or(0, |s| s.d);
                    Src::View(reg_of[&members[from as usize]], d)
                }
                Some((j, _)) if !stored[j] => Src::Reg(reg_of[&j]),
                _ if matches!(node.kind, Kind::Gather { .. }) && shift.is_none() => Src::Whole(loc(a), len),
                _ if len != n => Src::One(loc(a)),
                _ => Src::Vec(loc(a)),
            };
        }
        let dst = if sums_in_loop(node) {
            sums.push(at_of[m]);
            Dst::Sum(sums.len() as u32 - 1)
        } else if stored[m] {
            Dst::Mem(at_of[m])
        } else if view_of_src[x].is_some() {
            // The source's register (read for the listing; the step writes before its block).
            match src[0] {
                Src::Reg(r) => Dst::Reg(r),
                _ => Dst::Reg(0),
            }
        } else {
            let r = spare.pop().unwrap_or_else(|| {
                registers += 1;
                registers - 1
            });
            reg_of.insert(m, r);
            Dst::Reg(r)
        };
        steps.push(Step {
            kind: node.kind,
            src,
            nargs: node.args.len() as u8,
            dst,
            carry,
            then: None,
            view: view_of_src[x].is_some(),
        });
        spare.append(&mut freed_views);
        // Registers whose value this step read last (or a result no step reads) are free.
        let mut done: Vec<usize> =
            node.args.iter().filter_map(|&a| member(a)).filter(|&(_, y)| last_read[y] == x).map(|(j, _)| j).collect();
        if last_read[x] == x {
            done.push(m);
        }
        // A view's source lives as long as the view's readers, and a step more.
        for &a in &node.args {
            if let Some((_, v)) = member(a)
                && let Some(y) = view_of_src[v]
                && last_read[y as usize] == x
                && let Some(r) = reg_of.remove(&members[y as usize])
            {
                freed_views.push(r);
            }
        }
        for j in done {
            if let Some(r) = reg_of.remove(&j) {
                spare.push(r);
            }
        }
    }
    let registers = registers as usize;
    // The warm-up: the steps again, each stored result that later steps read kept in a register
    // of its own (a shadow) rather than the buffer, whose elements there are another task's to
    // write; results only read after the loop, and sums, are left out.
    let reach = depth.iter().copied().max().unwrap_or(0);
    let mut read_in_loop = vec![false; members.len()];
    for &m in members.iter().filter(|&&m| !sums_in_loop(&nodes[m])) {
        for &a in &nodes[m].args {
            if let Some((_, y)) = member(a) {
                read_in_loop[y] = true;
            }
        }
    }
    // Shadows are reused after their value's last reader, as registers are.
    let (mut shadow_of, mut spare, mut shadows) = (HashMap::new(), Vec::new(), 0u32);
    let mut warm_steps = Vec::new();
    if reach > 0 && !in_order {
        for (x, st) in steps.iter().enumerate() {
            let src = st.src.map(|a| match a {
                Src::Vec(p) => shadow_of.get(&p).map_or(a, |&k| Src::Reg(k)),
                a => a,
            });
            let dst = match st.dst {
                Dst::Sum(_) => None,
                Dst::Mem(_) if !read_in_loop[x] => None,
                Dst::Mem(p) => {
                    let k = spare.pop().unwrap_or_else(|| {
                        shadows += 1;
                        registers as u32 + shadows - 1
                    });
                    shadow_of.insert(p, k);
                    Some(Dst::Reg(k))
                }
                d => Some(d),
            };
            if let Some(dst) = dst {
                warm_steps.push(Step { dst, src, ..*st });
            }
            // Shadows whose value this step read last are free (after its result has its own).
            for &a in &nodes[members[x]].args {
                let last = member(a).filter(|&(_, y)| last_read[y] == x);
                if let Some(k) = last.and_then(|(j, _)| shadow_of.remove(&at_of[j])) {
                    spare.push(k);
                }
            }
        }
    }
    let shadows = shadows as usize;
    // An anti-shift's loop runs from its last block, on one thread.
    let from_last = members.iter().any(|&m| side.anti(nodes[m].kind).is_some());
    // Too many shadows: the loop runs in order on one thread, its carries passed block to block.
    let in_order = in_order || from_last || shadows > SHADOWS_MAX;
    let (steps, warm_steps) = (pair_up(steps), pair_up(warm_steps));
    let lanes = lanes_for(registers + shadows);
    let warm = if in_order { 0 } else { reach.div_ceil(lanes) };
    let native = sums.is_empty().then(|| native::Kernel::compile(&steps, side, registers, from_last)).flatten();
    Loop {
        n,
        lanes,
        registers,
        steps,
        sums,
        in_order,
        from_last,
        shadows,
        carries: carries as usize,
        warm,
        warm_steps,
        native,
    }
}

/// Elements per block of a loop of `registers` registers: [`LOOP_LANES`] doubled while they
/// stay within [`REGISTERS_L1`].
fn lanes_for(registers: usize) -> usize {
    let mut lanes = LOOP_LANES;
    while lanes < LOOP_LANES_MAX && 2 * lanes * registers.max(1) * size_of::<f64>() <= REGISTERS_L1 {
        lanes *= 2;
    }
    lanes
}

/// An instruction: 16 bytes, so that a scalar program of millions of them streams as little
/// code as it can (the code, not the arithmetic, is what a run of particle's reads most). `a`,
/// `b`, `out` are places in the buffer, `n` the result's length (an operand of `BinarySV` /
/// `BinaryVS` broadcasts its one element; `Reduce`'s is its operand's), `op` the operator's
/// index in [`UnaryOp::ALL`], [`BinaryOp::ALL`] or [`HistOp::ALL`]. A unary adjoint (three
/// operands) takes a second instruction for its cotangent and result. Everything else is a
/// [`Wide`] instruction, `a` its index: a 56-byte record more to stream.
#[derive(Clone, Copy, Debug)]
struct Ins {
    code: Code,
    op: u8,
    n: u16,
    a: u32,
    b: u32,
    out: u32,
}

const _: () = assert!(std::mem::size_of::<Ins>() == 16);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    Add1,
    Sub1,
    Mul1,
    Div1,
    Binary1,
    Unary1,
    Unary,
    BinaryVV,
    BinarySV,
    BinaryVS,
    Reduce,
    Copy,
    /// Both operands one element, the result `n` copies of `op` of them.
    BinarySS,
    /// `n` elements from `a` read back.
    ReadBack,
    /// A unary op's adjoint: `a` its operand, `b` its result, the cotangent at the next
    /// instruction's `a` (an [`Code::Operand`]).
    UnaryAdjoint,
    /// The third operand of the instruction before it; runs nothing.
    Operand,
    Wide,
    /// A fused loop, `a` its index.
    Loop,
}

fn op_index<X: PartialEq + Copy>(all: &[X], op: X) -> u8 {
    all.iter().position(|&o| o == op).unwrap_or(0) as u8
}

/// An instruction with more operands or parameters than an [`Ins`] holds: its node's kind,
/// up to three operands (place, length) and its result's place and length, run by [`compute`].
#[derive(Clone, Copy, Debug)]
struct Wide {
    kind: Kind,
    args: [(u32, u32); 3],
    nargs: u32,
    out: u32,
    n: u32,
}

/// The instructions of a node whose operands lie at `args` (place, length) and whose result
/// goes to `out`.
fn encode(kind: Kind, args: &[(u32, u32)], out: u32, n: u32, code: &mut Vec<Ins>, wide: &mut Vec<Wide>) {
    let at = |k: usize| args[k].0;
    let len = |k: usize| args[k].1;
    let ins = |code: Code, op: u8, n: u32, a: u32, b: u32| Ins { code, op, n: n as u16, a, b, out };
    // An `Ins` holds lengths below 2^16; longer ops are wide (a stack's parts are copied in
    // pieces).
    let short = |x: u32| x <= u32::from(u16::MAX);
    if kind == Kind::Stack {
        let mut to = out;
        for &(src, len) in args {
            for from in (0..len).step_by(usize::from(u16::MAX)) {
                let piece = (len - from).min(u32::from(u16::MAX));
                code.push(Ins { code: Code::Copy, op: 0, n: piece as u16, a: src + from, b: 0, out: to + from });
            }
            to += len;
        }
        return;
    }
    let kind_is_short = short(n) && args.iter().all(|&(_, len)| short(len));
    let last = match kind {
        _ if !kind_is_short => {
            let mut inline = [(0, 0); 3];
            inline[..args.len()].copy_from_slice(args);
            wide.push(Wide { kind, args: inline, nargs: args.len() as u32, out, n });
            Ins { code: Code::Wide, op: 0, n: 0, a: wide.len() as u32 - 1, b: 0, out }
        }
        Kind::Binary(op) if n == 1 => {
            let c = match op {
                BinaryOp::Add => Code::Add1,
                BinaryOp::Sub => Code::Sub1,
                BinaryOp::Mul => Code::Mul1,
                BinaryOp::Div => Code::Div1,
                _ => Code::Binary1,
            };
            ins(c, op_index(&BinaryOp::ALL, op), 1, at(0), at(1))
        }
        Kind::Binary(op) if len(0) == 1 && len(1) == 1 => {
            ins(Code::BinarySS, op_index(&BinaryOp::ALL, op), n, at(0), at(1))
        }
        Kind::Binary(_) if len(0) != n && len(1) != n => wide_ins(kind, args, out, n, wide),
        Kind::Binary(op) => {
            let c = match (len(0) == n, len(1) == n) {
                (true, true) => Code::BinaryVV,
                (false, _) => Code::BinarySV,
                (true, false) => Code::BinaryVS,
            };
            ins(c, op_index(&BinaryOp::ALL, op), n, at(0), at(1))
        }
        Kind::Unary(op) if n == 1 => ins(Code::Unary1, op_index(&UnaryOp::ALL, op), 1, at(0), 0),
        Kind::Unary(op) => ins(Code::Unary, op_index(&UnaryOp::ALL, op), n, at(0), 0),
        Kind::Reduce(op) => ins(Code::Reduce, op_index(&HistOp::ALL, op), len(0), at(0), 0),
        Kind::ReadBack => Ins { code: Code::ReadBack, op: 0, n: len(0) as u16, a: at(0), b: 0, out: 0 },
        // Two instructions, where a wide one was 16 bytes and a 56-byte record (particle's
        // programs are a sixth unary adjoints, and stream their code).
        Kind::UnaryAdjoint(op) => {
            code.push(ins(Code::UnaryAdjoint, op_index(&UnaryOp::ALL, op), n, at(0), at(1)));
            Ins { code: Code::Operand, op: 0, n: 0, a: at(2), b: 0, out }
        }
        Kind::Select
        | Kind::ArgReduce(_)
        | Kind::ScatterAt
        | Kind::GatherAt { .. }
        | Kind::Gather { .. }
        | Kind::GatherAdjoint { .. }
        | Kind::Broadcast { .. }
        | Kind::SumTo { .. }
        | Kind::Matmul { .. } => wide_ins(kind, args, out, n, wide),
        Kind::Stack => unreachable!("stacks are copies, above"),
    };
    code.push(last);
}

/// An instruction that runs `kind` by [`compute`] over `args` (place, length).
fn wide_ins(kind: Kind, args: &[(u32, u32)], out: u32, n: u32, wide: &mut Vec<Wide>) -> Ins {
    let mut inline = [(0, 0); 3];
    inline[..args.len()].copy_from_slice(args);
    wide.push(Wide { kind, args: inline, nargs: args.len() as u32, out, n });
    Ins { code: Code::Wide, op: 0, n: 0, a: wide.len() as u32 - 1, b: 0, out }
}

/// An operand of a fused loop's step.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// A register: the result of an earlier step of the loop that nothing else reads.
    Reg(u32),
    /// The buffer from this place, at the block's elements.
    Vec(u32),
    /// One element of the buffer, broadcast.
    One(u32),
    /// A gather's source: all its elements from this place.
    Whole(u32, u32),
    /// A shift's view: register `.0` from `.1` elements before the block.
    View(u32, u32),
}

/// Where a fused loop's step puts its result.
#[derive(Clone, Copy, Debug)]
enum Dst {
    Reg(u32),
    /// The buffer from this place, at the block's elements (a result read after the loop).
    Mem(u32),
    /// The loop's `k`-th sum: its operand added up block by block, the total stored at
    /// `Loop::sums[k]` once the loop ends.
    Sum(u32),
}

#[derive(Clone, Copy, Debug)]
struct Step {
    kind: Kind,
    src: [Src; 3],
    nargs: u8,
    dst: Dst,
    /// A shift's carry (the loop's `carry`-th), or [`NO_CARRY`].
    carry: u32,
    /// A pair ([`pair_up`]): the result is `then(kind's result, src[2])`.
    then: Option<BinaryOp>,
    /// A shift read as a view ([`fuse`]): the step writes the elements before its source's
    /// block; its readers read [`Src::View`].
    view: bool,
}

/// A step that keeps no carry.
const NO_CARRY: u32 = u32::MAX;

impl Step {
    /// The ops the step runs (two for a pair).
    fn ops(&self) -> usize {
        1 + usize::from(self.then.is_some())
    }
}

/// The binary ops a pair may hold: those `pair` has loops for.
fn pairable(op: BinaryOp) -> bool {
    matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)
}

/// Steps with a binary op whose result only the next step reads, itself a binary op, made one
/// step (a pair, `then`): each element's intermediate stays in a register of the CPU, not a
/// loop register, so a pair makes one pass over the block where the two steps made two (two
/// loads and a store saved per element; ode's RK4 steps are mostly such pairs: a scaling then
/// an addition). The intermediate is the second op's left operand, or its right one where the
/// op commutes (IEEE addition and multiplication do, bit for bit).
fn pair_up(steps: Vec<Step>) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        let first = steps[i];
        if let (Some(second), Kind::Binary(op1), Dst::Reg(t)) = (steps.get(i + 1), first.kind, first.dst)
            && let Kind::Binary(op2) = second.kind
            && pairable(op1)
            && pairable(op2)
            && first.then.is_none()
        {
            let is_t = |a: Src| matches!(a, Src::Reg(r) | Src::View(r, _) if r == t);
            let (left, right) = (is_t(second.src[0]), is_t(second.src[1]));
            let commutes = matches!(op2, BinaryOp::Add | BinaryOp::Mul);
            // No later step reads the intermediate before its register is written again.
            let unread_after = steps[i + 2..]
                .iter()
                .take_while(|s| s.view || !matches!(s.dst, Dst::Reg(r) if r == t))
                .all(|s| !s.src[..s.nargs as usize].iter().any(|&a| is_t(a)));
            let other = if left { second.src[1] } else { second.src[0] };
            // A view read and written in one pass would read elements the pass has written.
            let viewed = |a: Src| matches!((a, second.dst), (Src::View(r, _), Dst::Reg(w)) if r == w);
            let in_place_view = [first.src[0], first.src[1], other].into_iter().any(viewed);
            if left != right && (left || commutes) && unread_after && !in_place_view {
                out.push(Step { src: [first.src[0], first.src[1], other], dst: second.dst, then: Some(op2), ..first });
                i += 2;
                continue;
            }
        }
        out.push(first);
        i += 1;
    }
    out
}

/// The most stored values a loop's warm-up keeps in registers of its own; a loop that would
/// need more runs in order.
const SHADOWS_MAX: usize = 256;

/// Elementwise ops of one length fused into one loop: each block of `lanes` elements goes
/// through every step before the next block starts.
struct Loop {
    n: u32,
    /// Elements per block: [`LOOP_LANES`] times a power of two ([`lanes_for`]).
    lanes: usize,
    registers: usize,
    steps: Vec<Step>,
    /// Where each sum's total goes.
    sums: Vec<u32>,
    /// A gather reads a value of the loop, not by a shift: the blocks run in order, on one
    /// thread.
    in_order: bool,
    /// An adjoint by an anti-shift is a step: the blocks run in order from the last (and
    /// `in_order` holds).
    from_last: bool,
    /// Registers of the warm-up's own, after `registers`.
    shadows: usize,
    /// The shifts' carries: `SHIFT_MAX` elements each, after the shadows.
    carries: usize,
    /// Blocks each task but the first runs `warm_steps` over before its own, so that its
    /// shifts' carries hold what the blocks before its own compute: as many as the longest
    /// chain of shifts reaches back.
    warm: usize,
    warm_steps: Vec<Step>,
    /// The steps as native code, where they compile (`native`): a task runs its blocks
    /// there after its warm-up.
    native: Option<native::Kernel>,
}

impl Loop {
    /// Elements of the scratch a task of the loop works in: its registers, its warm-up's
    /// shadows, then its carries.
    fn scratch_len(&self) -> usize {
        (self.registers + self.shadows) * (self.lanes + SHIFT_MAX) + self.carries * SHIFT_MAX
    }

    /// The elements of each task where the loop is worth splitting (as the staged device's
    /// loops: by the whole work, not only the length; at least eight tasks while blocks last).
    fn task_span(&self) -> Option<usize> {
        let n = self.n as usize;
        if self.in_order {
            return None;
        }
        if !self.sums.is_empty() {
            // A sum's order is `kernels::reduce`'s: one lane sum of the whole below PAR_MIN,
            // else one per BLOCK, so tasks are BLOCKs or the whole.
            return (n >= kernels::PAR_MIN && self.warm * self.lanes <= WARM_MAX).then_some(kernels::BLOCK);
        }
        let work = n.saturating_mul(self.steps.len());
        // A task at least eight times its warm-up.
        let span = (LOOP_LANES * TASK_BLOCKS.min(n.div_ceil(LOOP_LANES * 8).max(1)))
            .max(8 * self.warm * self.lanes)
            .next_multiple_of(self.lanes);
        let split = (n >= kernels::PAR_MIN || work >= kernels::PAR_MIN_WORK) && n > span;
        split.then_some(span)
    }
}

/// The buffer's address, shared by the tasks of a parallel loop.
#[derive(Clone, Copy)]
struct Base(*mut f64);

// SAFETY: the tasks of a loop write disjoint blocks of the buffer (`run_loop`).
unsafe impl Send for Base {}
unsafe impl Sync for Base {}

impl Base {
    /// The address (a method, so that closures capture the `Base`, not its field).
    fn ptr(self) -> *mut f64 {
        self.0
    }
}

/// Runs `l` over the buffer at `base`, with `scratch` (room for its registers) when it runs
/// on this thread; long loops split into tasks of whole blocks on the current pool, each with
/// registers of its own.
///
/// # Safety
/// Every place of `l` lies in the buffer, `scratch` holds `l.scratch_len()` elements
/// apart from every place, and a step's result is disjoint from its operands.
unsafe fn run_loop(l: &Loop, base: *mut f64, scratch: *mut f64, side: &Side) {
    let n = l.n as usize;
    let base = Base(base);
    // The elements [lo, hi) block by block, after the warm-up where `warm_up` (the carries
    // at `lo` not yet there); the sums' lanes of the task come back.
    let blocks = move |lo: usize, hi: usize, regs: *mut f64, warm_up: bool| {
        let mut sums = vec![kernels::SumLanes::default(); l.sums.len()];
        // SAFETY: the caller's contract: the scratch holds the carries after the registers.
        let carries = unsafe { regs.add((l.registers + l.shadows) * (l.lanes + SHIFT_MAX)) };
        // The warm-up (a task but the first): the blocks before `lo` that the carries at `lo`
        // depend on, their stored results in shadows, their sums dropped.
        let mut start = if warm_up { lo.saturating_sub(l.warm * l.lanes) } else { lo };
        while start < lo {
            for s in &l.warm_steps {
                // SAFETY: the caller's contract; the warm-up writes only the task's scratch.
                unsafe { run_step(s, base.ptr(), regs, l.lanes, carries, start, l.lanes, side, &mut sums) };
            }
            start += l.lanes;
        }
        if let Some(kernel) = &l.native {
            // SAFETY: the caller's contract; the kernel keeps the carries as `run_step` does.
            unsafe { kernel.run(base.ptr(), carries, start, hi, n) };
            return sums;
        }
        if l.from_last {
            // On this thread (`in_order`): the blocks of [lo, hi), the last first.
            let mut end = hi;
            while end > lo {
                let start = lo + (end - lo - 1) / l.lanes * l.lanes;
                for s in &l.steps {
                    // SAFETY: the caller's contract.
                    unsafe { run_step(s, base.ptr(), regs, l.lanes, carries, start, end - start, side, &mut sums) };
                }
                end = start;
            }
            return sums;
        }
        while start < hi {
            let len = l.lanes.min(hi - start);
            for s in &l.steps {
                // SAFETY: the caller's contract; a block's elements are its task's alone.
                unsafe { run_step(s, base.ptr(), regs, l.lanes, carries, start, len, side, &mut sums) };
            }
            start += len;
        }
        sums
    };
    let put = |k: usize, v: f64| {
        // SAFETY: the caller's contract (a sum's place is in the buffer, apart from the loop's
        // operands).
        unsafe { *base.ptr().add(l.sums[k] as usize) = v };
    };
    let tasks: Vec<Vec<kernels::SumLanes>> = match l.task_span() {
        // On this thread, in order (the carries pass from block to block): one lane sum of
        // the whole below PAR_MIN, else one per BLOCK, as `kernels::reduce`.
        None if l.sums.is_empty() || n < kernels::PAR_MIN => {
            for (k, lanes) in blocks(0, n, scratch, false).iter().enumerate() {
                put(k, lanes.total());
            }
            return;
        }
        None => (0..n.div_ceil(kernels::BLOCK))
            .map(|t| blocks(t * kernels::BLOCK, ((t + 1) * kernels::BLOCK).min(n), scratch, false))
            .collect(),
        Some(span) => {
            use rayon::prelude::*;
            (0..n.div_ceil(span))
                .into_par_iter()
                .map(|t| {
                    let mut regs = Lines::zeros(l.scratch_len());
                    blocks(t * span, ((t + 1) * span).min(n), regs.as_mut_slice().as_mut_ptr(), true)
                })
                .collect()
        }
    };
    // As `kernels::reduce`: the BLOCKs' sums folded in order from the neutral element.
    for k in 0..l.sums.len() {
        put(k, tasks.iter().fold(HistOp::Add.neutral(), |s, t| s + t[k].total()));
    }
}

/// Where register `r` of a loop of blocks of `lanes` starts in its scratch: registers are
/// `SHIFT_MAX` elements before their block and the block, so that a shift's view reads a
/// register from up to `SHIFT_MAX` elements back.
fn reg_at(r: u32, lanes: usize) -> usize {
    r as usize * (lanes + SHIFT_MAX) + SHIFT_MAX
}

/// One step of a loop over elements `[start, start + len)`.
///
/// # Safety
/// As [`run_loop`]'s, `regs` the registers of this block, `lanes` elements apart.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_step(
    s: &Step,
    base: *mut f64,
    regs: *mut f64,
    lanes: usize,
    carries: *mut f64,
    start: usize,
    len: usize,
    side: &Side,
    sums: &mut [kernels::SumLanes],
) {
    // SAFETY (both): the caller's contract.
    let at = |p: *mut f64, from: usize, n: usize| -> &[f64] { unsafe { std::slice::from_raw_parts(p.add(from), n) } };
    let at_mut = |p: *mut f64, from: usize, n: usize| -> &mut [f64] {
        unsafe { std::slice::from_raw_parts_mut(p.add(from), n) }
    };
    if s.view {
        // SAFETY: the caller's contract; a view's source is a register, whose SHIFT_MAX
        // elements before the block are its own.
        if let (Src::Reg(r), Some(shift)) = (s.src[0], side.shift(s.kind)) {
            let d = shift.d as usize;
            let fill = match s.kind {
                Kind::Gather { fill, .. } => f64::from_bits(fill),
                _ => 0.0,
            };
            let carry = at_mut(carries, s.carry as usize * SHIFT_MAX, SHIFT_MAX);
            shift.before(at_mut(regs, reg_at(r, lanes) - d, d + len), fill, start, carry);
        }
        return;
    }
    let src = |k: usize| match s.src[k] {
        Src::Reg(r) => at(regs, reg_at(r, lanes), len),
        Src::View(r, d) => at(regs, reg_at(r, lanes) - d as usize, len),
        Src::Vec(p) => at(base, p as usize + start, len),
        Src::One(p) => at(base, p as usize, 1),
        Src::Whole(p, n) => at(base, p as usize, n as usize),
    };
    let out = match s.dst {
        Dst::Reg(r) => at_mut(regs, reg_at(r, lanes), len),
        Dst::Mem(p) => at_mut(base, p as usize + start, len),
        Dst::Sum(k) => {
            sums[k as usize].add(src(0));
            return;
        }
    };
    match (s.kind, s.nargs) {
        (Kind::Binary(op), _) if let Some(then) = s.then => pair(op, src(0), src(1), then, src(2), out),
        // A step has a carry only where its table is a shift.
        (Kind::Gather { fill, .. }, _) if s.carry != NO_CARRY => {
            if let Some(shift) = side.shift(s.kind) {
                let carry = at_mut(carries, s.carry as usize * SHIFT_MAX, SHIFT_MAX);
                shift.take(src(0), f64::from_bits(fill), start, carry, out);
            }
        }
        (Kind::Gather { table, fill }, _) => side.gather(table, f64::from_bits(fill), src(0), start, out),
        // Every adjoint in a loop is an anti-shift's, with a carry (`fuse`).
        (Kind::GatherAdjoint { .. }, _) => {
            if let Some(anti) = side.anti(s.kind) {
                anti.take(src(0), start, at_mut(carries, s.carry as usize * SHIFT_MAX, SHIFT_MAX), out);
            }
        }
        (Kind::ScatterAt, _) => scatter_at(src(0), src(1)[0], src(2)[0], start, out),
        (kind, 1) => compute(kind, &[src(0)], out, side),
        (kind, 2) => compute(kind, &[src(0), src(1)], out, side),
        (kind, _) => compute(kind, &[src(0), src(1), src(2)], out, side),
    }
}

/// A gather's bins as runs of consecutive sources (or of out-of-range bins), where they are
/// few: ode's `y[i - 1]` is two runs, so its gathers are copies, not a load per element.
struct Runs {
    /// Where each run starts in the result, ascending, then `n`.
    dst: Vec<u32>,
    /// Its first source (`u32::MAX`: the fill value).
    src: Vec<u32>,
    /// The gather's adjoint, stretch by stretch in the element order ([`Runs::add_back`]).
    stretches: Vec<Stretch>,
    /// The adjoint's elements below `covered` that no bin names (zeros), as ranges.
    gaps: Vec<(u32, u32)>,
    /// One past the largest bin named.
    covered: u32,
}

/// Cotangents `g[from..from + len]` added into the adjoint's elements `to..to + len`, each the
/// first term its element receives (`first`: written as `0 + g`, the sum's first add, which
/// needs no zeros stored before it) or a later one.
#[derive(Clone, Copy, Debug)]
struct Stretch {
    from: u32,
    to: u32,
    len: u32,
    first: bool,
}

impl Runs {
    /// The runs of `bins`, if there are at most one per 16 bins.
    fn of(bins: &[u32]) -> Option<Runs> {
        let (mut dst, mut src) = (Vec::new(), Vec::new());
        for (i, &b) in bins.iter().enumerate() {
            let continues = i > 0
                && match (bins[i - 1], b) {
                    (u32::MAX, u32::MAX) => true,
                    (a, b) => a != u32::MAX && b == a.wrapping_add(1),
                };
            if !continues {
                if dst.len() > bins.len() / 16 {
                    return None;
                }
                dst.push(i as u32);
                src.push(b);
            }
        }
        dst.push(bins.len() as u32);
        let covered = bins.iter().filter(|&&b| b != u32::MAX).map(|&b| b + 1).max().unwrap_or(0);
        let mut touched = vec![false; covered as usize];
        let mut stretches: Vec<Stretch> = Vec::new();
        for (k, &b) in bins.iter().enumerate() {
            if b == u32::MAX {
                continue;
            }
            let (k, first) = (k as u32, !std::mem::replace(&mut touched[b as usize], true));
            match stretches.last_mut() {
                Some(s) if s.first == first && s.from + s.len == k && s.to + s.len == b => s.len += 1,
                _ => stretches.push(Stretch { from: k, to: b, len: 1, first }),
            }
        }
        let mut gaps: Vec<(u32, u32)> = Vec::new();
        for (t, _) in touched.iter().enumerate().filter(|(_, t)| !**t) {
            match gaps.last_mut() {
                Some(g) if g.1 == t as u32 => g.1 += 1,
                _ => gaps.push((t as u32, t as u32 + 1)),
            }
        }
        Some(Runs { dst, src, stretches, gaps, covered })
    }

    /// The gather's adjoint: `g` summed into zeros, each element's terms in the order of the
    /// element loop, so the sums have its bits. In one pass: an element's first term is
    /// written as `0 + g` (what adding it to the zero gives, `-0` becoming `+0`), the others
    /// added, and only the elements no bin names are zeroed (ode's shifts: one pass over the
    /// result where the zeroing and the adds took two, a fifth of its VJP's backward loops).
    fn add_back(&self, g: &[f64], out: &mut [f64]) {
        let zero = HistOp::Add.neutral();
        out[self.covered as usize..].fill(zero);
        for &(a, b) in &self.gaps {
            out[a as usize..b as usize].fill(zero);
        }
        for s in &self.stretches {
            let (from, to, len) = (s.from as usize, s.to as usize, s.len as usize);
            let pairs = out[to..to + len].iter_mut().zip(&g[from..from + len]);
            if s.first {
                pairs.for_each(|(o, &v)| *o = zero + v);
            } else {
                pairs.for_each(|(o, &v)| *o += v);
            }
        }
    }

    /// Result elements `[start, start + out.len())` gathered from `from`.
    fn copy(&self, from: &[f64], fill: f64, start: usize, out: &mut [f64]) {
        let end = start + out.len();
        let mut r = self.dst.partition_point(|&d| d as usize <= start) - 1;
        let mut at = start;
        while at < end {
            let (run_start, run_end) = (self.dst[r] as usize, (self.dst[r + 1] as usize).min(end));
            let part = &mut out[at - start..run_end - start];
            match self.src[r] {
                u32::MAX => part.fill(fill),
                s => {
                    let s = s as usize + (at - run_start);
                    part.copy_from_slice(&from[s..s + part.len()]);
                }
            }
            at = run_end;
            r += 1;
        }
    }
}

/// A gather's bins as a shift: element `i` reads element `i - d` of the source, but for a few
/// exceptions, each reading an element of its own block of [`LOOP_LANES`] (or none: the
/// fill). ode's `y[i - 1]` is a shift by one whose one exception is element 0 (it reads
/// element 0). In a loop, such a gather reads its source's block where the loop computes it
/// and the `d` elements before the block from a carry the step kept of the previous block:
/// the source needs no place in the buffer, and the loop's blocks need not run in order, given
/// a warm-up before each task ([`Loop::warm`]).
struct Shift {
    d: u32,
    /// (element, bin) for each element that does not read `element - d`, ascending.
    exceptions: Vec<(u32, u32)>,
}

/// The largest shift a loop's gather may have: its carry holds that many elements.
const SHIFT_MAX: usize = 8;

/// The most exceptions a shift may have.
const SHIFT_EXCEPTIONS: usize = 8;

impl Shift {
    fn of(bins: &[u32]) -> Option<Shift> {
        // The shift is what the last bin says; every other bin must agree or be an exception.
        let last = bins.len().checked_sub(1)?;
        let d = (last as u64).checked_sub(u64::from(*bins.last()?)).filter(|&d| d as usize <= SHIFT_MAX)? as u32;
        let mut exceptions = Vec::new();
        for (i, &b) in bins.iter().enumerate() {
            if (i as u64).checked_sub(u64::from(d)) == Some(u64::from(b)) {
                continue;
            }
            let same_block = b as usize <= i && b as usize / LOOP_LANES == i / LOOP_LANES;
            if exceptions.len() == SHIFT_EXCEPTIONS || !(b == u32::MAX || same_block) {
                return None;
            }
            exceptions.push((i as u32, b));
        }
        Some(Shift { d, exceptions })
    }

    /// The `d` elements before the source's block (`block` is those, then the block's `len`)
    /// for a view of the shift: the previous block's last `d` (the carry), and exceptions,
    /// which all land there (`fuse`); the carry then takes this block's last elements.
    fn before(&self, block: &mut [f64], fill: f64, start: usize, carry: &mut [f64]) {
        let d = self.d as usize;
        let len = block.len() - d;
        block[..d].copy_from_slice(&carry[SHIFT_MAX - d..]);
        let from = self.exceptions.partition_point(|&(i, _)| (i as usize) < start);
        for &(i, b) in &self.exceptions[from..] {
            let i = i as usize;
            if i >= start + d.min(len) {
                break;
            }
            block[i - start] = if b == u32::MAX { fill } else { block[d + b as usize - start] };
        }
        if len >= SHIFT_MAX {
            carry.copy_from_slice(&block[d + len - SHIFT_MAX..]);
        }
    }

    /// Result elements `[start, start + src.len())` from the block's source `src` and the
    /// `carry` of the previous block, whose last `SHIFT_MAX` source elements then replace
    /// the carry. `start` is a multiple of [`LOOP_LANES`].
    fn take(&self, src: &[f64], fill: f64, start: usize, carry: &mut [f64], out: &mut [f64]) {
        let (d, len) = (self.d as usize, src.len());
        let head = d.min(len);
        out[..head].copy_from_slice(&carry[SHIFT_MAX - d..SHIFT_MAX - d + head]);
        out[head..].copy_from_slice(&src[..len - head]);
        let from = self.exceptions.partition_point(|&(i, _)| (i as usize) < start);
        for &(i, b) in &self.exceptions[from..] {
            let i = i as usize;
            if i >= start + len {
                break;
            }
            out[i - start] = if b == u32::MAX { fill } else { src[b as usize - start] };
        }
        if len >= SHIFT_MAX {
            carry.copy_from_slice(&src[len - SHIFT_MAX..]);
        }
    }
}

/// A gather's adjoint as a shift the other way: where the gather's element `i` reads element
/// `i - d` (a [`Shift`]), its adjoint's element `j` is `0 + g[j + d]` (the sum's first add,
/// `-0` becoming `+0`; `0` where `j + d` is past the end), but for a few exceptions, each
/// summing terms of its own block of [`LOOP_LANES`] in element order. ode's backward pass is
/// one such adjoint per RK4 stage: in a loop whose blocks run from the last, it reads its
/// cotangent's block where the loop computes it and the `d` elements after the block from a
/// carry the step kept of the block before (the next one in memory), so the stages' loops are
/// one loop.
struct AntiShift {
    d: u32,
    /// The adjoint's length (the gather's, and its source's).
    n: u32,
    /// (element, first term, one past its last) for each exception, ascending; the terms (the
    /// positions of `g` summed, ascending) are `terms[first..last]`.
    exceptions: Vec<(u32, u32, u32)>,
    terms: Vec<u32>,
}

/// The most terms an anti-shift's exceptions may sum in all.
const ANTI_TERMS_MAX: usize = 64;

impl AntiShift {
    /// The adjoint of gathering by `bins` from as many elements as there are bins, as an
    /// anti-shift, where it is one.
    fn of(bins: &[u32], src_len: u32) -> Option<AntiShift> {
        let n = bins.len();
        if n != src_len as usize || !(FUSE_MIN..kernels::PAR_MIN).contains(&n) {
            return None;
        }
        let last = *bins.last()?;
        let d = (n as u64 - 1).checked_sub(u64::from(last)).filter(|&d| d as usize <= SHIFT_MAX)? as usize;
        // How many bins name each element, and the first that does.
        let (mut count, mut first) = (vec![0u32; n], vec![u32::MAX; n]);
        for (i, &b) in bins.iter().enumerate() {
            if b != u32::MAX {
                count[b as usize] += 1;
                first[b as usize] = first[b as usize].min(i as u32);
            }
        }
        let regular = |j: usize| match count[j] {
            0 => j + d >= n,
            1 => first[j] as usize == j + d,
            _ => false,
        };
        let odd: Vec<usize> = (0..n).filter(|&j| !regular(j)).take(SHIFT_EXCEPTIONS + 1).collect();
        if odd.len() > SHIFT_EXCEPTIONS || odd.iter().map(|&j| count[j] as usize).sum::<usize>() > ANTI_TERMS_MAX {
            return None;
        }
        let (mut exceptions, mut terms) = (Vec::new(), Vec::new());
        for &j in &odd {
            let from = terms.len() as u32;
            for (i, &b) in bins.iter().enumerate() {
                if b as usize == j {
                    // Every term lies in the element's own block, which the loop computes with it.
                    if i / LOOP_LANES != j / LOOP_LANES {
                        return None;
                    }
                    terms.push(i as u32);
                }
            }
            exceptions.push((j as u32, from, terms.len() as u32));
        }
        Some(AntiShift { d: d as u32, n: n as u32, exceptions, terms })
    }

    /// The adjoint's elements `[start, start + g.len())` from the block's cotangents `g` and
    /// the `carry` of the block after it (the first `d` cotangents there: none after the last
    /// block), which then takes this block's first `d`.
    fn take(&self, g: &[f64], start: usize, carry: &mut [f64], out: &mut [f64]) {
        let zero = HistOp::Add.neutral();
        let (d, len) = (self.d as usize, g.len());
        let mut after = [zero; SHIFT_MAX];
        if start + len < self.n as usize {
            after[..d].copy_from_slice(&carry[..d]);
        }
        let head = len.saturating_sub(d);
        for (o, &v) in out[..head].iter_mut().zip(&g[d..]) {
            *o = zero + v;
        }
        for (k, o) in out.iter_mut().enumerate().skip(head) {
            let e = k + d;
            *o = zero + if e < len { g[e] } else { after[e - len] };
        }
        let from = self.exceptions.partition_point(|&(j, ..)| (j as usize) < start);
        for &(j, a, b) in &self.exceptions[from..] {
            let j = j as usize;
            if j >= start + len {
                break;
            }
            out[j - start] = self.terms[a as usize..b as usize].iter().fold(zero, |s, &t| s + g[t as usize - start]);
        }
        for (k, c) in carry[..d].iter_mut().enumerate() {
            *c = if k < len { g[k] } else { after[k - len] };
        }
    }
}

/// What instructions read besides the buffer: gathers' bins, shapes, matrix plans, and the
/// pool the matrix product takes its transposed copies from.
struct Side {
    bins: Vec<Vec<u32>>,
    /// Each table's runs, where they are few.
    runs: Vec<Option<Runs>>,
    /// Each table as a shift, where it is one.
    shifts: Vec<Option<Shift>>,
    /// Each table's adjoint as an anti-shift, where it is one.
    antis: Vec<Option<AntiShift>>,
    shapes: Vec<(Vec<usize>, Vec<usize>)>,
    plans: Vec<(MatmulPlan, bool, bool)>,
    pool: Arc<Pool>,
}

impl Side {
    /// The shift a gather of `kind` reads by, where its table is one.
    fn shift(&self, kind: Kind) -> Option<&Shift> {
        match kind {
            Kind::Gather { table, .. } => self.shifts[table as usize].as_ref(),
            _ => None,
        }
    }

    /// The anti-shift an adjoint of `kind` sums by, where its table's adjoint is one.
    fn anti(&self, kind: Kind) -> Option<&AntiShift> {
        match kind {
            Kind::GatherAdjoint { table } => self.antis[table as usize].as_ref(),
            _ => None,
        }
    }

    /// Elements `[start, start + out.len())` of the gather from `from` by table `table`: run
    /// by run where the table has runs, else element by element.
    fn gather(&self, table: u32, fill: f64, from: &[f64], start: usize, out: &mut [f64]) {
        match &self.runs[table as usize] {
            Some(runs) => runs.copy(from, fill, start, out),
            None => gather_bins(&self.bins[table as usize][start..], fill, from, out),
        }
    }
}

/// `out[i] = from[bins[i]]`, or `fill` where the bin is `u32::MAX` (every other bin is in
/// range: the tables are built for their source's length).
fn gather_bins(bins: &[u32], fill: f64, from: &[f64], out: &mut [f64]) {
    if from.is_empty() {
        out.fill(fill);
        return;
    }
    crate::simd::dispatch!(gather_bins_base | gather_bins_avx2(bins, fill, from, out))
}

/// [`gather_bins`] for a source of at least one element, as a loop that vectorises (AVX2's
/// gathers; ht's Jacobian gathers its 3 corners and 2 weights per point in each sweep): the
/// bin clamped into the source, so that the load needs no branch, and the fill selected.
#[inline(always)]
fn gather_bins_base(bins: &[u32], fill: f64, from: &[f64], out: &mut [f64]) {
    let last = from.len() - 1;
    for (o, &b) in out.iter_mut().zip(bins) {
        // SAFETY: the index is at most `last`, below the source's length (the caller's check
        // that it is not empty); the bounds check the compiler kept stopped the vector loop.
        let v = unsafe { *from.get_unchecked((b as usize).min(last)) };
        *o = if b == u32::MAX { fill } else { v };
    }
}
crate::simd::wider!(gather_bins_base, gather_bins_avx2, (bins: &[u32], fill: f64, from: &[f64], out: &mut [f64]));

impl Default for Side {
    fn default() -> Side {
        Side {
            bins: Vec::new(),
            runs: Vec::new(),
            shifts: Vec::new(),
            antis: Vec::new(),
            shapes: Vec::new(),
            plans: Vec::new(),
            pool: Pool::new(),
        }
    }
}

struct Observed {
    /// The instruction after which the value is complete (none: a constant).
    after: Option<u32>,
    at: u32,
    len: u32,
    tag: u64,
}

/// A compiled program (module docs).
pub struct Program {
    code: Vec<Ins>,
    wide: Vec<Wide>,
    loops: Vec<Loop>,
    /// The buffer a run starts from: the constants, the inputs, then room for the computed
    /// values.
    init: Vec<f64>,
    /// Where the registers of a loop run on one thread start in it.
    scratch: usize,
    side: Side,
    /// The threads long loops and reductions split over (none: no value is long enough).
    pool: Option<rayon::ThreadPool>,
    /// Subnormals flushed to zero on every thread the program runs on.
    flush: bool,
    observed: Vec<Observed>,
    /// The last run's buffer (a run that finds it taken works in a copy of `init`).
    buffer: Mutex<Lines>,
    /// Where a timed run copies its read-backs, one after the other, kept between runs.
    read_back_store: Mutex<Vec<f64>>,
}

/// Where a run's read-backs go: each into a vector of its own, for the caller, or one after
/// the other into a store a timed run keeps between runs (the copies are made either way; a
/// scalar program of thousands of read-backs would otherwise time an allocation for each).
enum ReadBacks<'a> {
    Each(&'a mut Vec<Vec<f64>>),
    Store(&'a mut Vec<f64>),
}

impl ReadBacks<'_> {
    fn push(&mut self, values: &[f64]) {
        match self {
            ReadBacks::Each(each) => each.push(values.to_vec()),
            ReadBacks::Store(store) => store.extend_from_slice(values),
        }
    }
}

/// What a run gives back: the read-backs in order and, on request, the outputs by tag.
pub struct Ran {
    pub read_backs: Vec<Vec<f64>>,
    pub outputs: Vec<(u64, Vec<f64>)>,
}

impl Program {
    /// Instructions the program runs.
    pub fn instructions(&self) -> usize {
        self.code.len()
    }

    /// Fused loops, and the ops they hold.
    pub fn loops(&self) -> (usize, usize) {
        (self.loops.len(), self.loops.iter().flat_map(|l| &l.steps).map(Step::ops).sum())
    }

    /// The program as text, an instruction a line (a loop's steps indented under it): what
    /// fused, what is stored (`Mem`) and what stays in the loop's registers (`Reg`), for
    /// reading why a program runs as it does (`ADGAUGE_JIT=listing` prints it).
    pub fn listing(&self) -> String {
        let mut text = String::new();
        for ins in &self.code {
            let line = match ins.code {
                Code::Wide => {
                    let w = &self.wide[ins.a as usize];
                    format!(
                        "{:?} of {} -> {} (operands at, length: {:?})",
                        w.kind,
                        w.n,
                        w.out,
                        &w.args[..w.nargs as usize]
                    )
                }
                Code::Loop => {
                    let l = &self.loops[ins.a as usize];
                    let order = match (l.from_last, l.in_order) {
                        (true, _) => ", in order from the last",
                        (false, true) => ", in order",
                        (false, false) => "",
                    };
                    let order = match &l.native {
                        Some(k) => format!("{order}, native ({} vectors in flight)", k.in_flight()),
                        None => order.to_string(),
                    };
                    let mut head = format!(
                        "loop of {} in blocks of {}{order}, {} registers",
                        l.n,
                        l.lanes,
                        l.registers + l.shadows
                    );
                    for s in &l.steps {
                        let then = s.then.map(|t| format!(" then {t:?} {:?}", s.src[2])).unwrap_or_default();
                        let view = if s.view { " (a view: writes before the block)" } else { "" };
                        head +=
                            &format!("\n    {:?} {:?}{then} -> {:?}{view}", s.kind, &s.src[..s.nargs as usize], s.dst);
                    }
                    head
                }
                code => format!("{code:?} #{} of {}: {}, {} -> {}", ins.op, ins.n, ins.a, ins.b, ins.out),
            };
            text += &line;
            text.push('\n');
        }
        text
    }

    /// Elements of the buffer a run works in (constants included).
    pub fn buffer_len(&self) -> usize {
        self.init.len()
    }

    /// Runs the program, keeping the outputs when `observe`. The buffer of the last run is
    /// reused (no instruction writes a constant's place, and each place is written before it
    /// is read).
    pub fn run(&self, observe: bool) -> Ran {
        let mut read_backs = Vec::new();
        let outputs = self.run_on_pool(observe, &mut ReadBacks::Each(&mut read_backs));
        Ran { read_backs, outputs }
    }

    /// Runs the program as a timed replay does: every read-back is copied out, as in
    /// [`Program::run`], but into a store the program keeps, and nothing is returned.
    pub fn run_timed(&self) {
        let mut held = self.read_back_store.try_lock().ok();
        let mut own = Vec::new();
        let store = held.as_deref_mut().unwrap_or(&mut own);
        store.clear();
        self.run_on_pool(false, &mut ReadBacks::Store(store));
    }

    fn run_on_pool(&self, observe: bool, read_backs: &mut ReadBacks) -> Vec<(u64, Vec<f64>)> {
        match &self.pool {
            Some(pool) => pool.install(|| self.run_here(observe, read_backs)),
            None => self.run_here(observe, read_backs),
        }
    }

    fn run_here(&self, observe: bool, read_backs: &mut ReadBacks) -> Vec<(u64, Vec<f64>)> {
        let _mode = crate::subnormals::Mode::enter(self.flush);
        let mut held = self.buffer.try_lock().ok();
        let mut fresh;
        let buffer: &mut [f64] = match held.as_deref_mut() {
            // The inputs are where the first run put them: nothing writes their places, as a
            // jitted function's arguments stay where they are between calls.
            Some(b) if b.len == self.init.len() => b.as_mut_slice(),
            Some(b) => {
                *b = Lines::from(&self.init[..]);
                b.as_mut_slice()
            }
            None => {
                fresh = Lines::from(&self.init[..]);
                fresh.as_mut_slice()
            }
        };
        let mut outputs = Vec::new();
        let mut next = 0;
        let mut look = |buffer: &[f64], after: Option<u32>, outputs: &mut Vec<(u64, Vec<f64>)>| {
            while next < self.observed.len() && self.observed[next].after == after {
                let o = &self.observed[next];
                outputs.push((o.tag, buffer[o.at as usize..(o.at + o.len) as usize].to_vec()));
                next += 1;
            }
        };
        if observe {
            look(buffer, None, &mut outputs);
        }
        let base = buffer.as_mut_ptr();
        let parts = Parts { wide: &self.wide, loops: &self.loops, side: &self.side, scratch: self.scratch };
        for (pc, ins) in self.code.iter().enumerate() {
            // SAFETY: every place lies inside the buffer (`finish` assigned them below its
            // length, the registers after them), and a result's place is disjoint from its
            // operands' (an operand's place is freed only after the instruction that reads it
            // last has been given its own).
            unsafe { step(ins, &parts, base, read_backs) };
            if observe {
                look(buffer, Some(pc as u32), &mut outputs);
            }
        }
        drop(held);
        outputs
    }
}

/// A buffer of f64 that starts on a cache line.
#[derive(Default)]
struct Lines {
    lines: Vec<Line>,
    len: usize,
}

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([f64; LINE]);

impl Lines {
    fn zeros(len: usize) -> Lines {
        Lines { lines: vec![Line::default(); len.div_ceil(LINE)], len }
    }

    fn as_mut_slice(&mut self) -> &mut [f64] {
        // SAFETY: a `Line` is `LINE` f64 with no padding (its size is its alignment, 64 bytes),
        // and the lines hold at least `len` of them.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f64>(), self.len) }
    }
}

impl From<&[f64]> for Lines {
    fn from(data: &[f64]) -> Lines {
        let mut out = Lines::zeros(data.len());
        out.as_mut_slice().copy_from_slice(data);
        out
    }
}

/// What instructions read besides their own fields.
struct Parts<'a> {
    wide: &'a [Wide],
    loops: &'a [Loop],
    side: &'a Side,
    scratch: usize,
}

/// Runs one instruction.
///
/// # Safety
/// `ins`'s places lie inside the buffer at `base`, its result's disjoint from its operands'.
#[inline(always)]
unsafe fn step(ins: &Ins, parts: &Parts, base: *mut f64, read_backs: &mut ReadBacks) {
    let (wide, side) = (parts.wide, parts.side);
    // SAFETY (all four): the caller's contract.
    let get = |at: u32| unsafe { *base.add(at as usize) };
    let put = |at: u32, v: f64| unsafe { *base.add(at as usize) = v };
    let slice =
        |at: u32, n: u32| -> &[f64] { unsafe { std::slice::from_raw_parts(base.add(at as usize), n as usize) } };
    let slice_mut = |at: u32, n: u32| -> &mut [f64] {
        unsafe { std::slice::from_raw_parts_mut(base.add(at as usize), n as usize) }
    };
    let Ins { code, op, n, a, b, out } = *ins;
    let n = n as u32;
    match code {
        Code::Add1 => put(out, get(a) + get(b)),
        Code::Sub1 => put(out, get(a) - get(b)),
        Code::Mul1 => put(out, get(a) * get(b)),
        Code::Div1 => put(out, get(a) / get(b)),
        Code::Binary1 => put(out, kernels::binary(BinaryOp::ALL[op as usize], get(a), get(b))),
        Code::Unary1 => put(out, kernels::unary(UnaryOp::ALL[op as usize], get(a))),
        Code::Unary => kernels::unary_map(UnaryOp::ALL[op as usize], slice(a, n), slice_mut(out, n)),
        Code::BinaryVV => binary(BinaryOp::ALL[op as usize], slice(a, n), slice(b, n), slice_mut(out, n)),
        Code::BinarySV => binary(BinaryOp::ALL[op as usize], slice(a, 1), slice(b, n), slice_mut(out, n)),
        Code::BinaryVS => binary(BinaryOp::ALL[op as usize], slice(a, n), slice(b, 1), slice_mut(out, n)),
        Code::Reduce => put(out, kernels::reduce(HistOp::ALL[op as usize], slice(a, n))),
        Code::Copy => slice_mut(out, n).copy_from_slice(slice(a, n)),
        Code::BinarySS => binary_ss(op, get(a), get(b), slice_mut(out, n)),
        Code::ReadBack => read_back(read_backs, slice(a, n)),
        Code::UnaryAdjoint => {
            // SAFETY: `encode` puts the cotangent's `Operand` right after every `UnaryAdjoint`.
            let next = unsafe { &*(ins as *const Ins).add(1) };
            debug_assert!(matches!(next.code, Code::Operand), "a unary adjoint without its operand");
            unary_adjoint(op, slice(a, n), slice(b, n), slice(next.a, n), slice_mut(next.out, n))
        }
        Code::Operand => {}
        // SAFETY: the caller's contract; the registers follow every place.
        Code::Loop => unsafe { run_loop(&parts.loops[a as usize], base, base.add(parts.scratch), side) },
        Code::Wide => {
            let w = &wide[a as usize];
            let arg = |k: usize| slice(w.args[k].0, w.args[k].1);
            // `matches!`, not `==`: the derived comparison of a `Kind` was an out-of-line call
            // per wide instruction, a tenth of particle's scalar programs.
            if matches!(w.kind, Kind::ReadBack) {
                read_backs.push(arg(0));
                return;
            }
            let out = slice_mut(w.out, w.n);
            match w.nargs {
                1 => compute(w.kind, &[arg(0)], out, side),
                2 => compute(w.kind, &[arg(0), arg(1)], out, side),
                _ => compute(w.kind, &[arg(0), arg(1), arg(2)], out, side),
            }
        }
    }
}

// The rarer instructions' bodies, out of `step`'s line: inlined there, they made every
// instruction of a one-element chain slower (the per-op benchmark's chain, 6.6-7.2 -> 10.5-10.8
// ns an op), though none of them runs in it.

#[inline(never)]
fn binary_ss(op: u8, a: f64, b: f64, out: &mut [f64]) {
    out.fill(kernels::binary(BinaryOp::ALL[op as usize], a, b));
}

#[inline(never)]
fn read_back(read_backs: &mut ReadBacks, values: &[f64]) {
    read_backs.push(values);
}

#[inline(never)]
fn unary_adjoint(op: u8, x: &[f64], y: &[f64], g: &[f64], out: &mut [f64]) {
    kernels::unary_adjoint_map(UnaryOp::ALL[op as usize], x, y, g, out);
}

/// One op over host slices: the CPU device's kernels on their sequential paths.
fn compute(kind: Kind, ins: &[&[f64]], out: &mut [f64], side: &Side) {
    let tables = &side.bins;
    match kind {
        Kind::Unary(op) => kernels::unary_map(op, ins[0], out),
        Kind::Binary(op) => binary(op, ins[0], ins[1], out),
        Kind::Select => {
            let (m, a, b) = (ins[0], ins[1], ins[2]);
            let n = out.len();
            let (sa, sb) = (usize::from(a.len() == n && n != 1), usize::from(b.len() == n && n != 1));
            for (i, o) in out.iter_mut().enumerate() {
                *o = if m[i] != 0.0 { a[i * sa] } else { b[i * sb] };
            }
        }
        Kind::Reduce(op) => out[0] = kernels::reduce(op, ins[0]),
        Kind::ArgReduce(ext) => {
            let (value, pos) = arg_reduce(ext, ins[0][0], ins[1]);
            out.copy_from_slice(&[value, pos]);
        }
        Kind::ScatterAt => scatter_at(ins[0], ins[1][0], ins[2][0], 0, out),
        Kind::GatherAt { fill } => {
            out[0] = position(ins[1][0], ins[0].len()).map_or(f64::from_bits(fill), |p| ins[0][p]);
        }
        Kind::Gather { table, fill } => side.gather(table, f64::from_bits(fill), ins[0], 0, out),
        Kind::GatherAdjoint { table } => match &side.runs[table as usize] {
            Some(runs) => runs.add_back(ins[0], out),
            None => {
                out.fill(HistOp::Add.neutral());
                for (&g, &b) in ins[0].iter().zip(&tables[table as usize]) {
                    if b != u32::MAX {
                        out[b as usize] += g;
                    }
                }
            }
        },
        Kind::UnaryAdjoint(op) => kernels::unary_adjoint_map(op, ins[0], ins[1], ins[2], out),
        // The shapes were checked when the node was made.
        Kind::Broadcast { shapes } => {
            let (from, to) = &side.shapes[shapes as usize];
            let _ = dense::broadcast_to(ins[0], from, to, out);
        }
        Kind::SumTo { shapes } => {
            let (from, to) = &side.shapes[shapes as usize];
            let _ = dense::sum_to(ins[0], from, to, out);
        }
        Kind::Matmul { plan } => {
            let (p, ta, tb) = &side.plans[plan as usize];
            dense::matmul(ins[0], *ta, ins[1], *tb, p, out, &side.pool);
        }
        Kind::Stack => {
            let mut at = 0;
            for p in ins {
                out[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
        }
        Kind::ReadBack => {}
    }
}

/// Elements `start..start + out.len()` of a scatter of `v` at position `pos`, from `dest`'s
/// same elements (or its one element, repeated).
fn scatter_at(dest: &[f64], pos: f64, v: f64, start: usize, out: &mut [f64]) {
    match dest.len() {
        1 => out.fill(dest[0]),
        _ => out.copy_from_slice(dest),
    }
    if let Some(p) = position(pos, start + out.len()).filter(|&p| p >= start) {
        out[p - start] = v;
    }
}

/// A position held as an f64 (as [`arg_reduce`] gives it), if it lies in `0..len`.
fn position(p: f64, len: usize) -> Option<usize> {
    (p >= 0.0 && p < len as f64).then_some(p as usize)
}

/// The winner among `dest` (position -1) and `x` in order, by `ext`: the earliest of the best,
/// a NaN beating every number (`Extremum::beats`, the arg-histogram's order), as the value and
/// its position (an f64). Each block's best value comes from the CPU's own reduction, which
/// keeps the earliest of equals, and its position is that of the first element equal to it
/// (the first NaN, for NaN); the blocks then meet from the left.
fn arg_reduce(ext: Extremum, dest: f64, x: &[f64]) -> (f64, f64) {
    use rayon::prelude::*;
    let op = match ext {
        Extremum::Max => HistOp::Max,
        Extremum::Min => HistOp::Min,
    };
    let block_best = |(b, s): (usize, &[f64])| -> (f64, usize) {
        let best = kernels::fold_lanes(op, s);
        let at = if best.is_nan() { s.iter().position(|v| v.is_nan()) } else { s.iter().position(|&v| v == best) };
        // The reduction's result is one of the block's elements: `at` is found.
        let at = at.unwrap_or(0);
        (s[at], b * kernels::BLOCK + at)
    };
    let bests: Vec<(f64, usize)> = if x.len() < kernels::PAR_MIN {
        x.chunks(kernels::BLOCK).enumerate().map(block_best).collect()
    } else {
        x.par_chunks(kernels::BLOCK).enumerate().map(block_best).collect()
    };
    let mut winner = (dest, -1i64);
    for (v, p) in bests {
        if !ext.beats(winner.0, winner.1, v, p as i64) {
            winner = (v, p as i64);
        }
    }
    (winner.0, winner.1 as f64)
}

/// `out = a op b`, a one-element operand broadcast: the operator's own loop, as the CPU
/// device's `binary` (`per_binary_op!`), four or eight f64 to a vector where the CPU has AVX2
/// or AVX-512 (only the width changes, not a bit of the results: `simd`).
fn binary(op: BinaryOp, a: &[f64], b: &[f64], out: &mut [f64]) {
    if out.len() < 8 {
        return binary_base(op, a, b, out);
    }
    if let Some(d) = divisor(op, a, b, out) {
        return quotient::div_then(a, d, None, &[], out);
    }
    crate::simd::dispatch!(binary_base | binary_avx2(op, a, b, out))
}

crate::simd::widest!(binary_base, binary_avx2, (op: BinaryOp, a: &[f64], b: &[f64], out: &mut [f64]));

#[inline(always)]
fn binary_base(op: BinaryOp, a: &[f64], b: &[f64], out: &mut [f64]) {
    #[inline(always)]
    fn zip(a: &[f64], b: &[f64], out: &mut [f64], f: impl Fn(f64, f64) -> f64) {
        let n = out.len();
        match (a.len() == n, b.len() == n) {
            (true, true) => {
                for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                    *o = f(x, y);
                }
            }
            (false, true) => {
                let x = a[0];
                for (o, &y) in out.iter_mut().zip(b) {
                    *o = f(x, y);
                }
            }
            (true, false) => {
                let y = b[0];
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = f(x, y);
                }
            }
            // Both broadcast: a value of one element repeated (`Builder::splat`).
            (false, false) => out.fill(f(a[0], b[0])),
        }
    }
    match op {
        BinaryOp::Add => zip(a, b, out, |x, y| x + y),
        BinaryOp::Sub => zip(a, b, out, |x, y| x - y),
        BinaryOp::Mul => zip(a, b, out, |x, y| x * y),
        BinaryOp::Div => zip(a, b, out, |x, y| x / y),
        other => zip(a, b, out, |x, y| kernels::binary(other, x, y)),
    }
}

/// The divisor of `a / b` where `b` is one element, `a` is not and `quotient`'s fast path
/// takes it (the same bits as the divide instruction, several times faster).
fn divisor(op: BinaryOp, a: &[f64], b: &[f64], out: &[f64]) -> Option<quotient::Divisor> {
    (op == BinaryOp::Div && b.len() == 1 && a.len() == out.len() && quotient::available())
        .then(|| quotient::Divisor::of(b[0]))
        .flatten()
}

/// `out = then(a op b, c)`, one-element operands broadcast, each op rounded on its own (no
/// contraction into a fused multiply-add): the bits of `binary` twice.
fn pair(op: BinaryOp, a: &[f64], b: &[f64], then: BinaryOp, c: &[f64], out: &mut [f64]) {
    if out.len() < 8 {
        return pair_base(op, a, b, then, c, out);
    }
    if let Some(d) = divisor(op, a, b, out) {
        return quotient::div_then(a, d, Some(then), c, out);
    }
    crate::simd::dispatch!(pair_base | pair_avx2(op, a, b, then, c, out))
}

crate::simd::widest!(pair_base, pair_avx2, (op: BinaryOp, a: &[f64], b: &[f64], then: BinaryOp, c: &[f64], out: &mut [f64]));

#[inline(always)]
fn pair_base(op: BinaryOp, a: &[f64], b: &[f64], then: BinaryOp, c: &[f64], out: &mut [f64]) {
    /// The loop for one shape of operands: `S*` a one-element operand.
    #[inline(always)]
    fn shaped<const SA: bool, const SB: bool, const SC: bool>(
        a: &[f64],
        b: &[f64],
        c: &[f64],
        out: &mut [f64],
        f: impl Fn(f64, f64) -> f64,
        g: impl Fn(f64, f64) -> f64,
    ) {
        let n = out.len();
        let (a, b, c) = (&a[..if SA { 1 } else { n }], &b[..if SB { 1 } else { n }], &c[..if SC { 1 } else { n }]);
        for (i, o) in out.iter_mut().enumerate() {
            let x = if SA { a[0] } else { a[i] };
            let y = if SB { b[0] } else { b[i] };
            let z = if SC { c[0] } else { c[i] };
            *o = g(f(x, y), z);
        }
    }
    #[inline(always)]
    fn ops(a: &[f64], b: &[f64], c: &[f64], out: &mut [f64], f: impl Fn(f64, f64) -> f64, g: impl Fn(f64, f64) -> f64) {
        let n = out.len();
        match (a.len() != n, b.len() != n, c.len() != n) {
            (false, false, false) => shaped::<false, false, false>(a, b, c, out, f, g),
            (false, false, true) => shaped::<false, false, true>(a, b, c, out, f, g),
            (false, true, false) => shaped::<false, true, false>(a, b, c, out, f, g),
            (false, true, true) => shaped::<false, true, true>(a, b, c, out, f, g),
            (true, false, false) => shaped::<true, false, false>(a, b, c, out, f, g),
            (true, false, true) => shaped::<true, false, true>(a, b, c, out, f, g),
            (true, true, false) => shaped::<true, true, false>(a, b, c, out, f, g),
            (true, true, true) => shaped::<true, true, true>(a, b, c, out, f, g),
        }
    }
    macro_rules! second {
        ($f:expr) => {
            match then {
                BinaryOp::Add => ops(a, b, c, out, $f, |t, z| t + z),
                BinaryOp::Sub => ops(a, b, c, out, $f, |t, z| t - z),
                BinaryOp::Mul => ops(a, b, c, out, $f, |t, z| t * z),
                _ => ops(a, b, c, out, $f, |t, z| t / z),
            }
        };
    }
    // `pair_up` pairs only these four.
    match op {
        BinaryOp::Add => second!(|x, y| x + y),
        BinaryOp::Sub => second!(|x, y| x - y),
        BinaryOp::Mul => second!(|x, y| x * y),
        _ => second!(|x, y| x / y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cpu, DType, TensorOps};
    use adgauge_ops::{DenseOps, ElementwiseOps, HistOps, IndexOps, ReduceOps, RuleKernels};

    /// Values with ties, signed zeros, a NaN and infinities among ordinary numbers.
    fn awkward(n: usize, salt: usize) -> Vec<f64> {
        let special = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0, -1.0];
        (0..n)
            .map(|i| match (i * 7 + salt) % 13 {
                k if k < special.len() && i % 3 == 0 => special[k],
                k => (k as f64 - 6.0) * 0.37 + salt as f64 * 0.01,
            })
            .collect()
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The same bits, or both NaN: which of two NaNs an op returns is the machine code's choice.
    fn same_or_both_nan(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// The gather's adjoint by runs, in one pass, equals the zeros with every cotangent added
    /// in element order, bit for bit: on shifts (ode's), runs that name a bin twice, bins no
    /// element names, fills and a `-0` among the cotangents (whose first add gives `+0`).
    #[test]
    fn adjoint_by_runs_equals_the_element_loop_bit_for_bit() {
        let n = 64usize;
        let shift: Vec<u32> = (0..n as u32).map(|i| i.saturating_sub(1)).collect();
        let twice: Vec<u32> = (0..n as u32).map(|i| if i < 32 { i } else { i - 32 }).collect();
        let gaps: Vec<u32> = (0..n as u32).map(|i| if i < 40 { i + 3 } else { u32::MAX }).collect();
        let back: Vec<u32> = (0..n as u32).map(|i| if i < 20 { u32::MAX } else { i - 20 }).collect();
        let g: Vec<f64> = (0..n).map(|i| if i % 5 == 0 { -0.0 } else { (i as f64 - 30.0) * 0.1 }).collect();
        let mut checked = 0;
        for bins in [shift, twice, gaps, back] {
            let runs = Runs::of(&bins).expect("few runs");
            let len = n + 4;
            let mut want = vec![0.0; len];
            for (&v, &b) in g.iter().zip(&bins) {
                if b != u32::MAX {
                    want[b as usize] += v;
                }
            }
            let mut got = vec![f64::NAN; len];
            runs.add_back(&g, &mut got);
            assert_eq!(bits(&got), bits(&want), "bins {bins:?}");
            checked += 1;
        }
        assert_eq!(checked, 4);
        // The -0 cotangent of an element that is its bin's only term gives +0, as 0 + -0.
        let mut one = vec![f64::NAN; 2];
        Runs::of(&[0, 1]).unwrap().add_back(&[-0.0, 1.0], &mut one);
        assert_eq!(one[0].to_bits(), 0.0f64.to_bits());
    }

    /// Adjoints of shifts (ode's `y[i - 1]`, whose element 0 reads element 0, and a shift by
    /// two with fills) in a chain of elementwise ops are steps of one loop whose blocks run
    /// from the last, each adjoint reading the block where the loop computes it and the block
    /// after it through its carry; the results are the element loop's sums, bit for bit (a
    /// `-0` cotangent's first add giving `+0`), at lengths of one block, of blocks and a
    /// part, and of whole blocks. At `PAR_MIN` and more, the adjoints run alone.
    #[test]
    fn adjoints_of_shifts_join_a_loop_that_runs_from_its_last_block() {
        let both_nan_or_same = |got: &[f64], want: &[f64], what: &str| {
            assert_eq!(got.len(), want.len(), "{what}");
            for (k, (a, b)) in got.iter().zip(want).enumerate() {
                assert!(same_or_both_nan(*a, *b), "{what}: element {k}: {a} {b}");
            }
        };
        // The adjoint of gathering by `bins`: the cotangents added into zeros in element order.
        let adjoint = |bins: &[i64], g: &[f64]| {
            let mut out = vec![0.0; g.len()];
            for (&v, &b) in g.iter().zip(bins) {
                if b >= 0 {
                    out[b as usize] += v;
                }
            }
            out
        };
        let zip = |a: &[f64], b: &[f64], f: fn(f64, f64) -> f64| -> Vec<f64> {
            a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
        };
        for n in [FUSE_MIN, FUSE_MIN + 5, 3 * LOOP_LANES + 17, 4 * LOOP_LANES_MAX, kernels::PAR_MIN + 1000] {
            let xs = awkward(n, 3);
            let previous: Vec<i64> = (0..n as i64).map(|i| (i - 1).max(0)).collect();
            let back2: Vec<i64> = (0..n as i64).map(|i| if i < 2 { -1 } else { i - 2 }).collect();
            let mut b = Builder::new();
            b.set_threads(2);
            let (x, h) = (b.input(&xs).unwrap(), b.input(&[0.75]).unwrap());
            let (prev, two) = (b.index(&previous), b.index(&back2));
            let g0 = b.binary(BinaryOp::Mul, x, h).unwrap();
            let a = b.gather_adjoint(n, prev, g0).unwrap();
            let ax = b.binary(BinaryOp::Mul, a, x).unwrap();
            let c = b.binary(BinaryOp::Sub, ax, x).unwrap();
            let d = b.gather_adjoint(n, two, c).unwrap();
            let e = b.gather_adjoint(n, prev, d).unwrap();
            let f = b.binary(BinaryOp::Mul, e, h).unwrap();
            b.read_back(a).unwrap();
            b.read_back(f).unwrap();
            let program = b.finish().unwrap();
            let wg0: Vec<f64> = xs.iter().map(|&v| v * 0.75).collect();
            let wa = adjoint(&previous, &wg0);
            let wc = zip(&zip(&wa, &xs, |p, q| p * q), &xs, |p, q| p - q);
            let wf: Vec<f64> = adjoint(&previous, &adjoint(&back2, &wc)).iter().map(|&v| v * 0.75).collect();
            if n < kernels::PAR_MIN {
                let from_last: Vec<bool> = program.loops.iter().map(|l| l.from_last).collect();
                assert_eq!(from_last, [true], "n = {n}");
                assert_eq!(program.loops(), (1, 7), "n = {n}");
                assert_eq!(program.loops[0].carries, 3, "n = {n}");
                // Native code runs it where it can, from the last vector.
                assert_eq!(program.loops[0].native.is_some(), native::enabled(), "n = {n}");
            } else {
                // The adjoints alone, the ops between them in loops that need no order.
                assert!(program.loops.iter().all(|l| !l.from_last && !l.in_order), "n = {n}");
                assert_eq!(program.loops().1, 4, "n = {n}");
            }
            for _ in 0..2 {
                let ran = program.run(false);
                both_nan_or_same(&ran.read_backs[0], &wa, &format!("n = {n}: a"));
                both_nan_or_same(&ran.read_backs[1], &wf, &format!("n = {n}: f"));
            }
            // The interpreter alone gives the same.
            let mut interpreted = program;
            for l in &mut interpreted.loops {
                l.native = None;
            }
            let ran = interpreted.run(false);
            both_nan_or_same(&ran.read_backs[0], &wa, &format!("n = {n}: a, interpreted"));
            both_nan_or_same(&ran.read_backs[1], &wf, &format!("n = {n}: f, interpreted"));
        }
        // Element 0's two terms and a -0 cotangent, in one block: 0 + -0 is +0.
        let anti = AntiShift::of(&[0, 0, 1, 2], 4);
        assert!(anti.is_none(), "shorter than a loop's fewest elements");
        let bins: Vec<u32> = (0..FUSE_MIN as u32).map(|i| i.saturating_sub(1)).collect();
        let anti = AntiShift::of(&bins, FUSE_MIN as u32).expect("a shift's adjoint");
        assert_eq!((anti.d, anti.exceptions.len()), (1, 1));
        let mut g = vec![2.0; FUSE_MIN];
        g[5] = -0.0;
        let (mut out, mut carry) = (vec![f64::NAN; FUSE_MIN], vec![f64::NAN; SHIFT_MAX]);
        anti.take(&g, 0, &mut carry, &mut out);
        assert_eq!(out[0], 4.0);
        assert_eq!(out[4].to_bits(), 0.0f64.to_bits());
        assert_eq!(out[FUSE_MIN - 1].to_bits(), 0.0f64.to_bits());
        assert_eq!(carry[0], 2.0);
    }

    /// A program built to flush subnormals flushes them on every thread it runs on, the loop
    /// split over the pool's threads and the reduction included, and leaves the calling
    /// thread's mode as it was; one built without keeps IEEE subnormals.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_flushing_program_flushes_subnormals_on_every_thread() {
        let n = 3 * kernels::PAR_MIN + 5;
        let x: Vec<f64> = (0..n).map(|i| if i % 3 == 0 { 1.5 } else { -1e-310 * (1 + i % 7) as f64 }).collect();
        for flush in [false, true] {
            let mut b = Builder::new();
            b.set_threads(2);
            b.set_flush_subnormals(flush);
            let v = b.input(&x).unwrap();
            let half = b.constant(&[0.5]).unwrap();
            let y = b.binary(BinaryOp::Mul, v, half).unwrap();
            let y = b.binary(BinaryOp::Add, y, v).unwrap();
            let total = b.reduce(HistOp::Add, y).unwrap();
            b.read_back(y).unwrap();
            b.read_back(total).unwrap();
            let program = b.finish().unwrap();
            assert!(program.listing().contains("loop of"), "{}", program.listing());
            let ran = program.run(false);
            assert!(!crate::subnormals::flushing(), "the caller's mode is restored");
            // Flushed, a subnormal operand reads as a zero of its sign: (-0 * 0.5) + -0 is -0.
            let want: Vec<f64> = x
                .iter()
                .map(|&v| if flush && v.abs() < f64::MIN_POSITIVE { 0.0f64.copysign(v) } else { v * 0.5 + v })
                .collect();
            assert_eq!(bits(&ran.read_backs[0]), bits(&want), "flush {flush}");
            // Each lane's sum of 2.25s is exact, and a subnormal is absorbed either way.
            assert_eq!(ran.read_backs[1], vec![2.25 * n.div_ceil(3) as f64], "flush {flush}");
        }
    }

    /// Products sharing an operand (the left one, plain and with b transposed; the right one)
    /// run as one product per group, each read back between them as recorded, with the bits
    /// of the CPU device's products one by one; a product whose operand reads an earlier
    /// member's result stays a product of its own.
    #[test]
    fn products_sharing_an_operand_run_as_one_with_their_own_bits() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let (m, k, n) = (6, 5, 3);
        let up = |v: &[f64], shape: &[usize]| cpu.tensor(v, shape, DType::F64).unwrap();
        let e = |r: Result<crate::CpuTensor>| r.unwrap();
        let mut b = Builder::new();
        let a_data = awkward(m * k, 1);
        let (a, ca) = (b.input(&a_data).unwrap(), up(&a_data, &[m, k]));
        let g_data = awkward(n * k, 2);
        let (g, cg) = (b.input(&g_data).unwrap(), up(&g_data, &[n, k]));
        let mut want: Vec<Vec<f64>> = Vec::new();
        let mut first = None;
        for s in 0..4 {
            // b_s = a tangent-like input times 2 (a node, as a sweep's tangent is).
            let t_data = awkward(k * n, 3 + s);
            let (t, ct) = (b.input(&t_data).unwrap(), up(&t_data, &[k, n]));
            let two = b.constant(&[2.0]).unwrap();
            let (bs, cbs) =
                (b.binary(BinaryOp::Mul, t, two).unwrap(), e(cpu.binary(BinaryOp::Mul, &ct, &up(&[2.0], &[1]))));
            // The last sweep's operand reads the first sweep's product: it cannot join.
            let (bs, cbs) = match (s, first.clone()) {
                (3, Some((p0, cp0))) => {
                    let head = b.slice(p0, 0, k * n).unwrap();
                    let c_head = up(&cpu.to_vec(&cp0).unwrap()[..k * n], &[k, n]);
                    (b.binary(BinaryOp::Add, bs, head).unwrap(), e(cpu.binary(BinaryOp::Add, &cbs, &c_head)))
                }
                _ => (bs, cbs),
            };
            let p = b.matmul(a, &[m, k], false, bs, &[k, n], false).unwrap();
            let cp = e(cpu.matmul(&ca, false, &cbs, false));
            let q = b.matmul(a, &[m, k], false, g, &[n, k], true).unwrap();
            let _ = q;
            let bt_data = awkward(n * k, 9 + s);
            let (bt, cbt) = (b.input(&bt_data).unwrap(), up(&bt_data, &[n, k]));
            let bt = b.binary(BinaryOp::Sub, bt, two).unwrap();
            let cbt = e(cpu.binary(BinaryOp::Sub, &cbt, &up(&[2.0], &[1])));
            let q = b.matmul(a, &[m, k], false, bt, &[n, k], true).unwrap();
            let cq = e(cpu.matmul(&ca, false, &cbt, true));
            // Right operand shared: x_s g^T.
            let x_data = awkward(m * k, 20 + s);
            let (x, cx) = (b.input(&x_data).unwrap(), up(&x_data, &[m, k]));
            let x = b.unary(UnaryOp::Sin, x).unwrap();
            let cx = e(cpu.unary(UnaryOp::Sin, &cx));
            let r = b.matmul(x, &[m, k], false, g, &[n, k], true).unwrap();
            let cr = e(cpu.matmul(&cx, false, &cg, true));
            for (v, c) in [(p, &cp), (q, &cq), (r, &cr)] {
                let v = b.unary(UnaryOp::Cos, v).unwrap();
                b.read_back(v).unwrap();
                want.push(cpu.to_vec(&e(cpu.unary(UnaryOp::Cos, c))).unwrap());
            }
            first.get_or_insert((p, cp));
        }
        let program = b.finish().unwrap();
        let products = program.wide.iter().filter(|w| matches!(w.kind, Kind::Matmul { .. })).count();
        // a b_s (three, and the fourth alone), a b_s^T (four), x_s g^T (four), a g^T (dead).
        assert_eq!(products, 4, "one per group and the product that could not join");
        let ran = program.run(false);
        assert_eq!(ran.read_backs.len(), want.len());
        for (i, (got, want)) in ran.read_backs.iter().zip(&want).enumerate() {
            let same = got.iter().zip(want).all(|(&g, &w)| same_or_both_nan(g, w));
            assert!(same, "read-back {i}: {got:?} against {want:?}");
        }
    }

    /// Every op the compiler knows, on inputs (which it must not fold), against the eager CPU
    /// device on the same data: the read-backs agree bit for bit.
    #[test]
    fn a_program_repeats_the_cpu_device_bit_for_bit() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let n = 23;
        let (xs, ys, one, other) = (awkward(n, 0), awkward(n, 5), vec![0.75], vec![-2.0]);
        let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
        let (cx, cy, c1, ct) = (up(&xs), up(&ys), up(&one), up(&other));
        let mut b = Builder::new();
        let (x, y, s) = (b.input(&xs).unwrap(), b.input(&ys).unwrap(), b.input(&one).unwrap());
        let t = b.input(&other).unwrap();
        // A constant of one value repeated, which the ops read as one element: with `s`, both
        // operands of a binary op are one element and the result `n`.
        let (k, ck) = (b.constant(&vec![1.5; n]).unwrap(), up(&vec![1.5; n]));
        let mut want: Vec<Vec<f64>> = Vec::new();
        let mut read = |b: &mut Builder, v: Val, eager: Vec<f64>| {
            b.read_back(v).unwrap();
            want.push(eager);
        };
        for op in UnaryOp::ALL {
            let v = b.unary(op, s).unwrap();
            read(&mut b, v, cpu.to_vec(&cpu.unary(op, &c1).unwrap()).unwrap());
            let v = b.unary(op, x).unwrap();
            read(&mut b, v, cpu.to_vec(&cpu.unary(op, &cx).unwrap()).unwrap());
            let adj = cpu.unary_adjoint(op, &cx, &cpu.unary(op, &cx).unwrap(), &cy).unwrap();
            if let Some(adj) = adj {
                let v = b.unary_adjoint(op, x, v, y).unwrap();
                read(&mut b, v, cpu.to_vec(&adj).unwrap());
            }
        }
        for op in BinaryOp::ALL {
            for (l, r, cl, cr) in
                [(x, y, &cx, &cy), (s, y, &c1, &cy), (x, s, &cx, &c1), (s, t, &c1, &ct), (s, k, &c1, &ck)]
            {
                let v = b.binary(op, l, r).unwrap();
                read(&mut b, v, cpu.to_vec(&cpu.binary(op, cl, cr).unwrap()).unwrap());
            }
        }
        let mask = b.binary(BinaryOp::Lt, x, y).unwrap();
        let cmask = cpu.binary(BinaryOp::Lt, &cx, &cy).unwrap();
        for (l, r, cl, cr) in [(x, y, &cx, &cy), (s, y, &c1, &cy), (x, s, &cx, &c1)] {
            let v = b.select(mask, l, r).unwrap();
            read(&mut b, v, cpu.to_vec(&cpu.select(&cmask, cl, cr).unwrap()).unwrap());
        }
        for op in HistOp::ALL {
            let v = b.reduce(op, y).unwrap();
            read(&mut b, v, cpu.to_vec(&cpu.reduce(op, &cy).unwrap()).unwrap());
        }
        let idx: Vec<i64> = (0..40).map(|i| (i * 5) % 29 - 3).collect();
        let cidx = cpu.index(&idx).unwrap();
        let i = b.index(&idx);
        let v = b.gather(x, i, OutOfRange::Fill(-2.5)).unwrap();
        read(&mut b, v, cpu.to_vec(&cpu.gather(&cx, &cidx, OutOfRange::Fill(-2.5)).unwrap()).unwrap());
        let g = b.input(&awkward(40, 2)).unwrap();
        let cg = up(&awkward(40, 2));
        let v = b.gather_adjoint(n, i, g).unwrap();
        read(&mut b, v, cpu.to_vec(&cpu.gather_adjoint(&cx, &cidx, &cg).unwrap()).unwrap());
        // Dense ops: a broadcast and its sum, products with either operand transposed.
        let m = b.input(&awkward(24, 3)).unwrap();
        let cm = cpu.tensor(&awkward(24, 3), &[4, 6], DType::F64).unwrap();
        let row = b.input(&awkward(6, 4)).unwrap();
        let crow = cpu.tensor(&awkward(6, 4), &[1, 6], DType::F64).unwrap();
        let v = b.broadcast_to(row, &[1, 6], &[4, 6]).unwrap();
        read(&mut b, v, cpu.to_vec(&cpu.broadcast_to(&crow, &[4, 6]).unwrap()).unwrap());
        let v = b.sum_to(m, &[4, 6], &[1, 6]).unwrap();
        read(&mut b, v, cpu.to_vec(&cpu.sum_to(&cm, &[1, 6]).unwrap()).unwrap());
        let v = b.sum_to(m, &[4, 6], &[4, 1]).unwrap();
        read(&mut b, v, cpu.to_vec(&cpu.sum_to(&cm, &[4, 1]).unwrap()).unwrap());
        for (ta, tb) in [(false, true), (true, false)] {
            let v = b.matmul(m, &[4, 6], ta, m, &[4, 6], tb).unwrap();
            read(&mut b, v, cpu.to_vec(&cpu.matmul(&cm, ta, &cm, tb).unwrap()).unwrap());
        }
        assert!(b.matmul(m, &[4, 6], false, m, &[4, 6], false).is_err(), "6 against 4");
        let stacked = b.stack(&[x, y, s]).unwrap();
        let v = b.slice(stacked, n, n).unwrap();
        assert_eq!(v, y, "a row of a stack is its part");
        let v = b.slice(stacked, 3, 30).unwrap();
        let mut cat = xs.clone();
        cat.extend_from_slice(&ys);
        read(&mut b, v, cat[3..33].to_vec());
        let program = b.finish().unwrap();
        let ran = program.run(false);
        assert_eq!(ran.read_backs.len(), want.len());
        for (k, (got, want)) in ran.read_backs.iter().zip(&want).enumerate() {
            assert_eq!(bits(got), bits(want), "read-back {k}");
        }
        // A second run in the same buffer gives the same.
        let again = program.run(false);
        for (a, b) in again.read_backs.iter().zip(&ran.read_backs) {
            assert_eq!(bits(a), bits(b));
        }
    }

    /// The one-bin arg-histogram (the rules of `reduce(max)` and `reduce(min)`), the scatter
    /// of one value at its winner and the gather from it repeat the CPU device's ops bit for
    /// bit: ties to the earliest (across blocks too), a NaN beating every number, dest winning
    /// ties and carrying position -1, on one block, several and a split over threads.
    #[test]
    fn one_bin_arg_histograms_and_their_winners_repeat_the_cpu_device_bit_for_bit() {
        let cpu = Cpu::new(Some(2)).unwrap();
        let block = kernels::BLOCK;
        let par = kernels::PAR_MIN + 3 * block + 7;
        let with = |n: usize, set: &[(usize, f64)]| {
            let mut v: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 * 0.25 - 12.0).collect();
            for &(i, x) in set {
                v[i] = x;
            }
            v
        };
        let cases: Vec<(f64, Vec<f64>)> = vec![
            (f64::NEG_INFINITY, awkward(23, 1)),
            (f64::INFINITY, awkward(23, 1)),
            (f64::NEG_INFINITY, vec![-0.0, 0.0, -0.0]),
            (f64::INFINITY, vec![0.0, -0.0, 0.0]),
            (0.0, vec![-0.0, -1.0]),
            (f64::NEG_INFINITY, vec![f64::NEG_INFINITY; 5]),
            (f64::NAN, vec![1.0, f64::NAN]),
            (5.0, vec![]),
            // Equal best values in blocks 0 and 2, and the same again past a split.
            (f64::NEG_INFINITY, with(3 * block + 9, &[(2 * block + 3, 40.0), (17, 40.0)])),
            (f64::INFINITY, with(3 * block + 9, &[(2 * block + 3, -40.0), (block + 1, -40.0)])),
            (f64::NEG_INFINITY, with(par, &[(par - 2, 40.0), (block * 5 + 2, 40.0)])),
            (-3.0, with(par, &[(par - 3, f64::NAN), (par - 1, f64::NAN), (4, 99.0)])),
        ];
        for (case, (dest, vals)) in cases.iter().enumerate() {
            let n = vals.len();
            let zeros = vec![0i64; n];
            let cd = cpu.tensor(&[*dest], &[1], DType::F64).unwrap();
            let cv = cpu.tensor(vals, &[n], DType::F64).unwrap();
            let cidx = cpu.index(&zeros).unwrap();
            let cg = cpu.tensor(&[-2.5], &[1], DType::F64).unwrap();
            let cz = cpu.full(&[n], 0.0, DType::F64).unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let (d, v, g) = (b.input(&[*dest]).unwrap(), b.input(vals).unwrap(), b.input(&[-2.5]).unwrap());
            let z = b.constant(&vec![0.0; n]).unwrap();
            let i = b.index(&zeros);
            let mut want = Vec::new();
            for ext in [Extremum::Max, Extremum::Min] {
                let (cw, cpos) = cpu.arg_reduce_by_index(&cd, ext, &cidx, &cv).unwrap();
                let (w, pos) = b.arg_reduce(ext, d, i, v).unwrap();
                let p = cpu.index_to_vec(&cpos).unwrap()[0];
                b.read_back(w).unwrap();
                want.push(cpu.to_vec(&cw).unwrap());
                b.read_back(pos).unwrap();
                want.push(vec![p as f64]);
                let scattered = b.scatter_at(z, pos, g).unwrap();
                b.read_back(scattered).unwrap();
                want.push(cpu.to_vec(&cpu.scatter(&cz, &cpos, &cg).unwrap()).unwrap());
                let gathered = b.gather_at(v, pos, OutOfRange::Fill(7.5)).unwrap();
                b.read_back(gathered).unwrap();
                want.push(cpu.to_vec(&cpu.gather(&cv, &cpos, OutOfRange::Fill(7.5)).unwrap()).unwrap());
            }
            let ran = b.finish().unwrap().run(false);
            for (k, (got, want)) in ran.read_backs.iter().zip(&want).enumerate() {
                assert_eq!(bits(got), bits(want), "case {case}, read-back {k}");
            }
            assert_eq!(ran.read_backs.len(), want.len());
        }
        // The adjoint's pattern at the length of a split: the scatter into zeros joins the loop
        // that adds it, reading the zeros as one element, as does a scalar added to zeros.
        let (dest, vals) = &cases[11];
        let n = vals.len();
        let mut b = Builder::new();
        b.set_threads(2);
        let (d, v, g) = (b.input(&[*dest]).unwrap(), b.input(vals).unwrap(), b.input(&[-2.5]).unwrap());
        let z = b.constant(&vec![0.0; n]).unwrap();
        let i = b.index(&vec![0; n]);
        let (_, pos) = b.arg_reduce(Extremum::Max, d, i, v).unwrap();
        let spread = b.binary(BinaryOp::Add, z, g).unwrap();
        let scattered = b.scatter_at(z, pos, g).unwrap();
        let total = b.binary(BinaryOp::Add, spread, scattered).unwrap();
        let total = b.binary(BinaryOp::Mul, total, v).unwrap();
        b.read_back(total).unwrap();
        let program = b.finish().unwrap();
        let listing = program.listing();
        assert!(listing.contains("loop of"), "{listing}");
        assert!(listing.contains("ScatterAt [One("), "the zeros are one element: {listing}");
        assert_eq!(listing.matches("Vec(").count(), 1, "the loop reads the values alone: {listing}");
        let mut want = vec![-2.5; n];
        want[par - 3] = -5.0;
        let want: Vec<f64> = want.iter().zip(vals).map(|(w, x)| w * x).collect();
        assert_eq!(bits(&program.run(false).read_backs[0]), bits(&want));
        // The positions the cases reach, by hand: the earliest of equal maxima across blocks,
        // dest's -1 on a tie, the first of two NaNs past a split.
        let at = |dest: f64, vals: &[f64], ext| {
            let mut b = Builder::new();
            b.set_threads(2);
            let (d, v) = (b.input(&[dest]).unwrap(), b.input(vals).unwrap());
            let i = b.index(&vec![0; vals.len()]);
            let (_, pos) = b.arg_reduce(ext, d, i, v).unwrap();
            b.read_back(pos).unwrap();
            b.finish().unwrap().run(false).read_backs[0][0]
        };
        assert_eq!(at(cases[8].0, &cases[8].1, Extremum::Max), 17.0);
        assert_eq!(at(cases[9].0, &cases[9].1, Extremum::Min), (block + 1) as f64);
        assert_eq!(at(cases[10].0, &cases[10].1, Extremum::Max), (block * 5 + 2) as f64);
        assert_eq!(at(cases[11].0, &cases[11].1, Extremum::Max), (par - 3) as f64);
        assert_eq!(at(cases[5].0, &cases[5].1, Extremum::Max), -1.0);
        assert_eq!(at(cases[3].0, &cases[3].1, Extremum::Min), 0.0);
        assert_eq!(at(cases[2].0, &cases[2].1, Extremum::Max), 0.0);
        // Only one bin, indices 0, compiles.
        let mut b = Builder::new();
        let (d, v) = (b.input(&[0.0, 1.0]).unwrap(), b.input(&[2.0, 3.0]).unwrap());
        let i = b.index(&[0, 1]);
        assert!(b.arg_reduce(Extremum::Max, d, i, v).is_err(), "two bins");
        let d = b.input(&[0.0]).unwrap();
        assert!(b.arg_reduce(Extremum::Max, d, i, v).is_err(), "an index of 1");
        let pos = b.input(&[0.0]).unwrap();
        assert!(b.gather_at(v, pos, OutOfRange::Error).is_err(), "a gather that may fail");
    }

    /// Short reductions (the baseline copy, called directly) repeat the CPU device's at every
    /// length about the lanes' width, for every operator; a timed run copies the read-backs one
    /// after the other into a store it keeps, with the bits a plain run returns.
    #[test]
    fn short_reductions_and_timed_runs_repeat_the_plain_run() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let mut b = Builder::new();
        let mut want = Vec::new();
        for n in 1..=kernels::SHORT_FOLD + 1 {
            let xs = awkward(n, n);
            let x = b.input(&xs).unwrap();
            let cx = cpu.tensor(&xs, &[n], DType::F64).unwrap();
            for op in HistOp::ALL {
                let v = b.reduce(op, x).unwrap();
                b.read_back(v).unwrap();
                want.extend(cpu.to_vec(&cpu.reduce(op, &cx).unwrap()).unwrap());
            }
        }
        let program = b.finish().unwrap();
        assert_eq!(bits(&program.run(false).read_backs.concat()), bits(&want));
        program.run_timed();
        let first = program.read_back_store.lock().unwrap().as_ptr();
        program.run_timed();
        let store = program.read_back_store.lock().unwrap();
        assert_eq!(bits(&store), bits(&want));
        assert_eq!(store.as_ptr(), first, "the store is kept, not made again");
    }

    /// Constants fold, inputs do not; the identities hold only where exact; a repeated op is
    /// the first.
    #[test]
    fn constants_fold_and_repeats_and_identities_vanish() {
        let mut b = Builder::new();
        let two = b.constant(&[2.0, 2.0]).unwrap();
        let folded = b.unary(UnaryOp::Sqrt, two).unwrap();
        assert_eq!(b.nodes(), 0, "an op on constants runs at once");
        assert_eq!(b.const_data(folded), Some(&[2f64.sqrt(), 2f64.sqrt()][..]));
        let x = b.input(&[-0.0, 3.0]).unwrap();
        assert_eq!(b.input(&[-0.0, 3.0]).unwrap(), x, "equal inputs are one");
        assert_ne!(b.input(&[0.0, 3.0]).unwrap(), x, "inputs are told apart by their bits");
        let (one, zero, neg_zero) =
            (b.constant(&[1.0]).unwrap(), b.constant(&[0.0]).unwrap(), b.constant(&[-0.0]).unwrap());
        assert_eq!(b.binary(BinaryOp::Mul, x, one).unwrap(), x);
        assert_eq!(b.binary(BinaryOp::Mul, one, x).unwrap(), x);
        assert_eq!(b.binary(BinaryOp::Div, x, one).unwrap(), x);
        assert_eq!(b.binary(BinaryOp::Add, x, neg_zero).unwrap(), x);
        assert_eq!(b.binary(BinaryOp::Sub, x, zero).unwrap(), x);
        assert_eq!(b.nodes(), 0);
        // -0 + 0 is +0: not an identity, so a node.
        let plus_zero = b.binary(BinaryOp::Add, x, zero).unwrap();
        let sq = b.unary(UnaryOp::Square, x).unwrap();
        assert_eq!(b.unary(UnaryOp::Square, x).unwrap(), sq, "the same op on the same operand is the first");
        assert_eq!(b.nodes(), 2);
        b.read_back(plus_zero).unwrap();
        b.read_back(sq).unwrap();
        let ran = b.finish().unwrap().run(false);
        assert_eq!(bits(&ran.read_backs[0]), bits(&[0.0, 3.0]));
        assert_eq!(ran.read_backs[1], vec![0.0, 9.0]);
    }

    /// Only what a read-back or an output needs runs; outputs are computed and shown to a
    /// checking run; places are reused, so a long chain works in a small buffer.
    #[test]
    fn dead_ops_drop_outputs_stay_and_places_are_reused() {
        let mut b = Builder::new();
        let x = b.input(&[0.5; 4]).unwrap();
        let mut y = x;
        for _ in 0..1000 {
            y = b.unary(UnaryOp::Sin, y).unwrap();
        }
        let unused = b.unary(UnaryOp::Exp, x).unwrap();
        let dropped = b.unary(UnaryOp::Cos, x).unwrap();
        b.output(dropped, 7);
        b.read_back(y).unwrap();
        let _ = unused;
        let program = b.finish().unwrap();
        assert_eq!(program.instructions(), 1000 + 1 + 1, "the chain, the output, the read-back");
        assert!(program.buffer_len() <= 4 + 3 * 4, "buffer of {} elements", program.buffer_len());
        let ran = program.run(true);
        let mut want = 0.5f64;
        for _ in 0..1000 {
            want = crate::kernels::unary(UnaryOp::Sin, want);
        }
        assert_eq!(ran.read_backs, vec![vec![want; 4]]);
        assert_eq!(ran.outputs, vec![(7, vec![crate::kernels::unary(UnaryOp::Cos, 0.5); 4])]);
        assert!(program.run(false).outputs.is_empty());
    }

    /// Two binary ops where the second alone reads the first's result are one step (a pair),
    /// for every pair of `+ - * /`, every shape of operands (vectors, one-element ones) and
    /// either side of the second op where it commutes: the eager device's bits, awkward
    /// values (signed zeros, NaN, infinities) included. Where the intermediate is the right
    /// operand of `-` or `/`, the steps stay two.
    #[test]
    fn pairs_of_binary_ops_repeat_the_cpu_device_bit_for_bit() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let n = LOOP_LANES + 45;
        let (xs, ys, zs) = (awkward(n, 1), awkward(n, 2), awkward(n, 3));
        let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
        let e = |t: Result<crate::CpuTensor>| t.unwrap();
        for (op1, op2) in ops.iter().flat_map(|&a| ops.iter().map(move |&b| (a, b))) {
            // Operand shapes: (a, b, c) each a vector or the one element -0.75.
            for shape in 0..8u32 {
                if shape & 3 == 3 {
                    continue; // a and b both one element: a one-element result, no loop
                }
                for t_left in [true, false] {
                    let pick = |bit: u32, v: &[f64]| if shape & bit != 0 { vec![-0.75] } else { v.to_vec() };
                    let (av, bv, cv) = (pick(1, &xs), pick(2, &ys), pick(4, &zs));
                    let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
                    let et = e(cpu.binary(op1, &up(&av), &up(&bv)));
                    let er = if t_left { e(cpu.binary(op2, &et, &up(&cv))) } else { e(cpu.binary(op2, &up(&cv), &et)) };
                    let mut b = Builder::new();
                    let (a, bb, c) = (b.input(&av).unwrap(), b.input(&bv).unwrap(), b.input(&cv).unwrap());
                    let t = b.binary(op1, a, bb).unwrap();
                    let r = if t_left { b.binary(op2, t, c) } else { b.binary(op2, c, t) }.unwrap();
                    // A third op, which reads the pair's result on the right of `-`: no pair.
                    let r = b.binary(BinaryOp::Sub, a, r).unwrap();
                    b.read_back(r).unwrap();
                    let program = b.finish().unwrap();
                    let paired = t_left || matches!(op2, BinaryOp::Add | BinaryOp::Mul);
                    let what = format!("{op1:?} then {op2:?}, shape {shape}, t left {t_left}");
                    assert_eq!(program.loops(), (1, 3), "{what}");
                    assert_eq!(program.loops[0].steps.len(), if paired { 2 } else { 3 }, "{what}");
                    let er = e(cpu.binary(BinaryOp::Sub, &up(&av), &er));
                    // Any NaN for any NaN: which of two NaNs an op returns is the machine's choice.
                    let nan_blind =
                        |v: &[f64]| bits(&v.iter().map(|&x| if x.is_nan() { f64::NAN } else { x }).collect::<Vec<_>>());
                    let want = nan_blind(&cpu.to_vec(&er).unwrap());
                    assert_eq!(nan_blind(&program.run(false).read_backs[0]), want, "{what}");
                    assert!(
                        want.iter().any(|&w| f64::from_bits(w).is_nan())
                            && want.iter().any(|&w| f64::from_bits(w).is_finite()),
                        "{what}"
                    );
                }
            }
        }
    }

    /// ode's RK4 loop (shift views with an exception at element 0 and fills, pairs, a
    /// division by a one-element constant and one by an input) compiled to native code gives
    /// the interpreter's bits and the CPU device's: at lengths that end on a vector and inside
    /// one, and long enough to split into tasks (each warming up on the interpreter); over values
    /// that send the quotient to the divide instruction (zeros, subnormals, infinities, NaN,
    /// magnitudes beyond its range) and a divisor outside its range.
    #[test]
    fn native_loops_repeat_the_interpreter_and_the_cpu_device_bit_for_bit() {
        let cpu = Cpu::new(Some(2)).unwrap();
        let lengths =
            [FUSE_MIN, FUSE_MIN + 3, 8 * 13, 8 * 13 + 7, 1000, 3 * LOOP_LANES_MAX + 5, kernels::PAR_MIN + 1001];
        for (case, &n) in lengths.iter().enumerate() {
            // Moderate values, with zeros of both signs, subnormals and magnitudes beyond the
            // quotient's range spread through, and an infinity and a NaN at the end (so that
            // what they spread to leaves most results finite).
            let mut xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37 + case as f64).sin() * 0.5).collect();
            for (i, x) in xs.iter_mut().enumerate() {
                match i % 29 {
                    1 => *x = 0.0,
                    2 => *x = -0.0,
                    3 => *x = f64::MIN_POSITIVE / 16.0,
                    7 => *x = 1e290,
                    11 => *x = -3e-290,
                    _ => {}
                }
            }
            xs[n - 1] = f64::NAN;
            xs[n - 2] = f64::INFINITY;
            // The divisor of the second division: outside the fast path's range in one case.
            let c = if case % 2 == 0 { 3.0 } else { 2f64.powi(61) };
            let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
            // Back 1 (element 0 reads itself), back 2 (the first two the fill).
            let back1: Vec<i64> = (0..n as i64).map(|i| (i - 1).max(0)).collect();
            let back2: Vec<i64> = (0..n as i64).map(|i| if i < 2 { -1 } else { i - 2 }).collect();
            let (cx, ch, c6, cc) = (up(&xs), up(&[0.125]), up(&[6.0]), up(&[c]));
            let (c1, c2) = (cpu.index(&back1).unwrap(), cpu.index(&back2).unwrap());
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let (x, h, six, cv) = (
                b.input(&xs).unwrap(),
                b.input(&[0.125]).unwrap(),
                b.constant(&[6.0]).unwrap(),
                b.input(&[c]).unwrap(),
            );
            let (t1, t2) = (b.index(&back1), b.index(&back2));
            // f(y) = x * y[i - 1] + y[i - 2] / c (fill 0.5), RK4 with step h, four steps.
            let ef = |y: &crate::CpuTensor| {
                let s1 = e(cpu.gather(y, &c1, OutOfRange::Error));
                let s2 = e(cpu.gather(y, &c2, OutOfRange::Fill(0.5)));
                e(cpu.binary(
                    BinaryOp::Add,
                    &e(cpu.binary(BinaryOp::Mul, &cx, &s1)),
                    &e(cpu.binary(BinaryOp::Div, &s2, &cc)),
                ))
            };
            let f = |b: &mut Builder, y: Val| {
                let s1 = b.gather(y, t1, OutOfRange::Error).unwrap();
                let s2 = b.gather(y, t2, OutOfRange::Fill(0.5)).unwrap();
                let p = b.binary(BinaryOp::Mul, x, s1).unwrap();
                let q = b.binary(BinaryOp::Div, s2, cv).unwrap();
                b.binary(BinaryOp::Add, p, q).unwrap()
            };
            // y starts as x * h (signed zeros kept), computed in the loop: a shift of an input
            // is a gather from the buffer, which native code does not take.
            let (mut ey, mut y) = (e(cpu.binary(BinaryOp::Mul, &cx, &ch)), b.binary(BinaryOp::Mul, x, h).unwrap());
            // Its quotients by c read back as they are (signed zeros and all).
            let eq = e(cpu.binary(BinaryOp::Div, &ey, &cc));
            let q = b.binary(BinaryOp::Div, y, cv).unwrap();
            for _ in 0..4 {
                let ek1 = ef(&ey);
                let ek2 = ef(&e(cpu.binary(BinaryOp::Add, &ey, &e(cpu.binary(BinaryOp::Mul, &ek1, &ch)))));
                let ek3 = ef(&e(cpu.binary(BinaryOp::Add, &ey, &e(cpu.binary(BinaryOp::Mul, &ek2, &ch)))));
                let ek4 = ef(&e(cpu.binary(BinaryOp::Add, &ey, &e(cpu.binary(BinaryOp::Mul, &ek3, &ch)))));
                let es = e(cpu.binary(
                    BinaryOp::Add,
                    &e(cpu.binary(BinaryOp::Add, &ek1, &ek2)),
                    &e(cpu.binary(BinaryOp::Add, &ek3, &ek4)),
                ));
                ey = e(cpu.binary(
                    BinaryOp::Add,
                    &ey,
                    &e(cpu.binary(BinaryOp::Div, &e(cpu.binary(BinaryOp::Mul, &es, &ch)), &c6)),
                ));
                let k1 = f(&mut b, y);
                let a = b.binary(BinaryOp::Mul, k1, h).unwrap();
                let a = b.binary(BinaryOp::Add, y, a).unwrap();
                let k2 = f(&mut b, a);
                let a = b.binary(BinaryOp::Mul, k2, h).unwrap();
                let a = b.binary(BinaryOp::Add, y, a).unwrap();
                let k3 = f(&mut b, a);
                let a = b.binary(BinaryOp::Mul, k3, h).unwrap();
                let a = b.binary(BinaryOp::Add, y, a).unwrap();
                let k4 = f(&mut b, a);
                let s12 = b.binary(BinaryOp::Add, k1, k2).unwrap();
                let s34 = b.binary(BinaryOp::Add, k3, k4).unwrap();
                let s = b.binary(BinaryOp::Add, s12, s34).unwrap();
                let s = b.binary(BinaryOp::Mul, s, h).unwrap();
                let s = b.binary(BinaryOp::Div, s, six).unwrap();
                y = b.binary(BinaryOp::Add, y, s).unwrap();
            }
            b.read_back(y).unwrap();
            b.read_back(q).unwrap();
            let program = b.finish().unwrap();
            assert_eq!(program.loops.len(), 1, "n = {n}");
            if n >= kernels::PAR_MIN {
                assert!(program.loops[0].task_span().is_some(), "n = {n}: the loop runs as one task");
            }
            if !native::enabled() {
                println!("skipped the native half: no AVX-512 and FMA here (or ADGAUGE_JIT=interpret)");
            } else {
                assert!(
                    program.loops[0].native.is_some(),
                    "n = {n}: the loop did not compile to native code:\n{}",
                    program.listing()
                );
            }
            let want = [cpu.to_vec(&ey).unwrap(), cpu.to_vec(&eq).unwrap()].concat();
            let native = program.run(false).read_backs.concat();
            let mut interpreted = program;
            for l in &mut interpreted.loops {
                l.native = None;
            }
            let plain = interpreted.run(false).read_backs.concat();
            assert_eq!((native.len(), plain.len()), (2 * n, 2 * n));
            for (i, ((&w, &a), &p)) in want.iter().zip(&native).zip(&plain).enumerate() {
                assert!(same_or_both_nan(w, p), "n = {n}, element {i}: interpreter {p:e}, cpu {w:e}");
                assert!(same_or_both_nan(w, a), "n = {n}, element {i}: native {a:e}, cpu {w:e}");
            }
            assert!(
                want.iter().filter(|v| v.is_finite()).count() > n / 4,
                "n = {n}: too few finite results to mean much"
            );
        }
    }

    /// A gather of the loop's own value by a shift (ode's `y[i - 1]`) joins the loop at every
    /// length, its source kept in no place of the buffer; long loops still split, each task
    /// warming up over the block before its own: the eager device's bits, at lengths that end
    /// inside a block. A gather that reads a later element (`y[i + 1]`) closes the loop.
    #[test]
    fn shifted_gathers_of_a_loop_join_it_at_every_length() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for n in [FUSE_MIN, 3 * LOOP_LANES + 17, kernels::PAR_MIN + 1000] {
            let xs: Vec<f64> = (0..n).map(|i| 0.25 + (i as f64 * 0.37).sin() * 0.5).collect();
            let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
            let previous: Vec<i64> = (0..n as i64).map(|i| (i - 1).max(0)).collect();
            let next: Vec<i64> = (0..n as i64).map(|i| i + 1).collect();
            let (cx, ch, cprev, cnext) =
                (up(&xs), up(&[0.125]), cpu.index(&previous).unwrap(), cpu.index(&next).unwrap());
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let (x, h) = (b.input(&xs).unwrap(), b.input(&[0.125]).unwrap());
            let (prev, nxt) = (b.index(&previous), b.index(&next));
            // Three explicit Euler steps of y_i' = x_i y_{i-1} + x_i, from y = x.
            let (mut ey, mut y) = (cx.clone(), x);
            for _ in 0..3 {
                let eg = e(cpu.gather(&ey, &cprev, OutOfRange::Error));
                let ek = e(cpu.binary(BinaryOp::Add, &e(cpu.binary(BinaryOp::Mul, &cx, &eg)), &cx));
                ey = e(cpu.binary(BinaryOp::Add, &ey, &e(cpu.binary(BinaryOp::Mul, &ek, &ch))));
                let g = b.gather(y, prev, OutOfRange::Error).unwrap();
                let xg = b.binary(BinaryOp::Mul, x, g).unwrap();
                let k = b.binary(BinaryOp::Add, xg, x).unwrap();
                let hk = b.binary(BinaryOp::Mul, k, h).unwrap();
                y = b.binary(BinaryOp::Add, y, hk).unwrap();
            }
            // Then a gather of a later element, and one more op on it.
            let ez = e(cpu.binary(BinaryOp::Mul, &e(cpu.gather(&ey, &cnext, OutOfRange::Fill(0.5))), &cx));
            let z = b.gather(y, nxt, OutOfRange::Fill(0.5)).unwrap();
            let z = b.binary(BinaryOp::Mul, z, x).unwrap();
            b.read_back(y).unwrap();
            b.read_back(z).unwrap();
            let program = b.finish().unwrap();
            // The three steps in one loop, its blocks in any order; the gather of `y[i + 1]`
            // starts the second.
            let in_order: Vec<bool> = program.loops.iter().map(|l| l.in_order).collect();
            assert_eq!(in_order, [false, false], "n = {n}");
            assert_eq!(program.loops(), (2, 3 * 5 + 2), "n = {n}");
            let first = &program.loops[0];
            // The first gather reads the input; the other two are shifts by one, two back.
            assert_eq!((first.carries, first.warm), (2, 1), "n = {n}");
            assert_eq!(first.task_span().is_some(), n >= kernels::PAR_MIN, "n = {n}");
            for _ in 0..2 {
                let ran = program.run(false);
                assert_eq!(bits(&ran.read_backs[0]), bits(&cpu.to_vec(&ey).unwrap()), "n = {n}: y");
                assert_eq!(bits(&ran.read_backs[1]), bits(&cpu.to_vec(&ez).unwrap()), "n = {n}: z");
            }
        }
    }

    /// A gather of the loop's own value that reads no later element but is no shift
    /// (`y[i / 2]`) joins the loop below PAR_MIN elements, whose blocks then run in order on
    /// one thread; at PAR_MIN and more (where loops split) it closes the loop.
    #[test]
    fn causal_gathers_that_are_no_shift_join_in_order() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for n in [FUSE_MIN, 3 * LOOP_LANES + 17, kernels::PAR_MIN + 1000] {
            let xs: Vec<f64> = (0..n).map(|i| 0.5 + (i as f64 * 0.61).cos() * 0.25).collect();
            let half: Vec<i64> = (0..n as i64).map(|i| i / 2).collect();
            let (cx, chalf) = (cpu.tensor(&xs, &[n], DType::F64).unwrap(), cpu.index(&half).unwrap());
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let x = b.input(&xs).unwrap();
            let halves = b.index(&half);
            let (mut ey, mut y) = (cx.clone(), x);
            for _ in 0..2 {
                let eg = e(cpu.gather(&e(cpu.binary(BinaryOp::Mul, &ey, &cx)), &chalf, OutOfRange::Error));
                ey = e(cpu.binary(BinaryOp::Sub, &ey, &eg));
                let yx = b.binary(BinaryOp::Mul, y, x).unwrap();
                let g = b.gather(yx, halves, OutOfRange::Error).unwrap();
                y = b.binary(BinaryOp::Sub, y, g).unwrap();
            }
            b.read_back(y).unwrap();
            let program = b.finish().unwrap();
            let in_order: Vec<bool> = program.loops.iter().map(|l| l.in_order).collect();
            if n < kernels::PAR_MIN {
                assert_eq!(in_order, [true], "n = {n}");
                assert_eq!(program.loops(), (1, 6), "n = {n}");
            } else {
                // Each gather closes a loop: mul; gather, sub, mul; gather, sub.
                assert_eq!(in_order, [false; 3], "n = {n}");
                assert_eq!(program.loops(), (3, 6), "n = {n}");
            }
            assert_eq!(bits(&program.run(false).read_backs[0]), bits(&cpu.to_vec(&ey).unwrap()), "n = {n}");
        }
    }

    /// Shifts of up to `SHIFT_MAX` elements, with exceptions (the fill value, a bin of the same
    /// block) at the start, chained further back than a block: the warm-up runs two blocks,
    /// keeps the stored results that later steps read in shadows and drops the sums, and the
    /// results (a stored value, a sum, the last value) have the eager device's bits, split or
    /// not.
    #[test]
    fn chains_of_shifts_warm_up_over_blocks() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for n in [3 * LOOP_LANES + 17, kernels::PAR_MIN + 1000, 2 * kernels::BLOCK + 333] {
            let xs: Vec<f64> = (0..n).map(|i| 0.125 + (i as f64 * 0.13).sin() * 0.75).collect();
            // Back 8 (fill for the first 8); back 3 (element 0 reads 0, 1 reads 1, 2 the fill).
            let back8: Vec<i64> = (0..n as i64).map(|i| if i < 8 { -1 } else { i - 8 }).collect();
            let back3: Vec<i64> = (0..n as i64).map(|i| [0, 1, -1].get(i as usize).copied().unwrap_or(i - 3)).collect();
            let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
            let (cx, c8, c3) = (up(&xs), cpu.index(&back8).unwrap(), cpu.index(&back3).unwrap());
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let x = b.input(&xs).unwrap();
            let (t8, t3) = (b.index(&back8), b.index(&back3));
            let (mut ey, mut y) = (cx.clone(), x);
            let (mut ekept, mut kept) = (None, None);
            // 25 rounds of both shifts, more than a block back.
            for round in 0..25 {
                let eg = e(cpu.gather(&ey, &c8, OutOfRange::Fill(0.5)));
                let eg = e(cpu.gather(&e(cpu.binary(BinaryOp::Mul, &eg, &cx)), &c3, OutOfRange::Fill(-0.25)));
                ey = e(cpu.binary(BinaryOp::Sub, &ey, &e(cpu.binary(BinaryOp::Mul, &eg, &cx))));
                let g = b.gather(y, t8, OutOfRange::Fill(0.5)).unwrap();
                let gx = b.binary(BinaryOp::Mul, g, x).unwrap();
                let g = b.gather(gx, t3, OutOfRange::Fill(-0.25)).unwrap();
                let gx = b.binary(BinaryOp::Mul, g, x).unwrap();
                y = b.binary(BinaryOp::Sub, y, gx).unwrap();
                if round == 12 {
                    // Read by the loop's later steps and after it: stored, a shadow in the
                    // warm-up.
                    (ekept, kept) = (Some(ey.clone()), Some(y));
                }
            }
            let esum = e(cpu.reduce(HistOp::Add, &ey));
            let (kept, ekept) = (kept.unwrap(), ekept.unwrap());
            let sum = b.reduce(HistOp::Add, y).unwrap();
            b.read_back(y).unwrap();
            b.read_back(kept).unwrap();
            b.read_back(sum).unwrap();
            let program = b.finish().unwrap();
            assert_eq!(program.loops(), (1, 25 * 5 + 1), "n = {n}");
            let l = &program.loops[0];
            // The first gather reads the input: 49 shifts, 3 + 24 * (8 + 3) = 267 elements back.
            assert_eq!(
                (l.carries, l.warm, l.shadows, l.in_order),
                (49, 267usize.div_ceil(l.lanes), 1, false),
                "n = {n}"
            );
            // Left out of the warm-up: the sum, and the last value, stored and read in the
            // loop only by the sum.
            assert_eq!(l.warm_steps.len(), 25 * 5 - 1, "n = {n}");
            assert_eq!(l.task_span().is_some(), n >= kernels::PAR_MIN, "n = {n}");
            for _ in 0..2 {
                let ran = program.run(false);
                assert_eq!(bits(&ran.read_backs[0]), bits(&cpu.to_vec(&ey).unwrap()), "n = {n}: y");
                assert_eq!(bits(&ran.read_backs[1]), bits(&cpu.to_vec(&ekept).unwrap()), "n = {n}: kept");
                assert_eq!(bits(&ran.read_backs[2]), bits(&cpu.to_vec(&esum).unwrap()), "n = {n}: sum");
            }
        }
    }

    /// A shift of a register's value whose exceptions land before the block is a view: its
    /// readers read the source's register a few elements back, with no copy. ode's pattern
    /// (`y[i - 1]`, element 0 reading element 0) and a shift with fill values both are; one
    /// with an exception inside the block, or of a view, is a copy. No step writes a register
    /// it reads through a view, and every result is the eager CPU's, over one block, several,
    /// and a last block shorter than a shift's carry.
    #[test]
    fn shifts_whose_exceptions_precede_the_block_are_views() {
        let cpu = Cpu::new(Some(1)).unwrap();
        for n in [FUSE_MIN + 13, 3 * LOOP_LANES + 17, 2 * LOOP_LANES_MAX + 5] {
            let xs: Vec<f64> = (0..n).map(|i| 0.375 + (i as f64 * 0.21).cos() * 0.5).collect();
            // Back 1, element 0 reading 0 (ode); back 2, the first two the fill; back 1 with
            // element 40 reading itself (an exception inside the block: a copy).
            let back1: Vec<i64> = (0..n as i64).map(|i| (i - 1).max(0)).collect();
            let back2: Vec<i64> = (0..n as i64).map(|i| if i < 2 { -1 } else { i - 2 }).collect();
            let odd: Vec<i64> = (0..n as i64).map(|i| if i == 0 || i == 40 { i } else { i - 1 }).collect();
            let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
            let (cx, c1, c2, codd) =
                (up(&xs), cpu.index(&back1).unwrap(), cpu.index(&back2).unwrap(), cpu.index(&odd).unwrap());
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let mut b = Builder::new();
            let x = b.input(&xs).unwrap();
            let (t1, t2, todd) = (b.index(&back1), b.index(&back2), b.index(&odd));
            let (mut ey, mut y) = (cx.clone(), x);
            for _ in 0..12 {
                // y = (shift1(y * x) + x) * 0.5 + shift2(y) * x - shift_odd(shift1(y))
                let ep = e(cpu.binary(BinaryOp::Mul, &ey, &cx));
                let es1 = e(cpu.gather(&ep, &c1, OutOfRange::Fill(0.0)));
                let es2 = e(cpu.gather(&ey, &c2, OutOfRange::Fill(0.75)));
                let eo = e(cpu.gather(&e(cpu.gather(&ey, &c1, OutOfRange::Fill(0.0))), &codd, OutOfRange::Fill(0.0)));
                let half = up(&[0.5]);
                let ea = e(cpu.binary(BinaryOp::Mul, &e(cpu.binary(BinaryOp::Add, &es1, &cx)), &half));
                let ea = e(cpu.binary(BinaryOp::Add, &ea, &e(cpu.binary(BinaryOp::Mul, &es2, &cx))));
                ey = e(cpu.binary(BinaryOp::Sub, &ea, &eo));
                let p = b.binary(BinaryOp::Mul, y, x).unwrap();
                let s1 = b.gather(p, t1, OutOfRange::Fill(0.0)).unwrap();
                let s2 = b.gather(y, t2, OutOfRange::Fill(0.75)).unwrap();
                let y1 = b.gather(y, t1, OutOfRange::Fill(0.0)).unwrap();
                let o = b.gather(y1, todd, OutOfRange::Fill(0.0)).unwrap();
                let h = b.constant(&[0.5]).unwrap();
                let s1x = b.binary(BinaryOp::Add, s1, x).unwrap();
                let a = b.binary(BinaryOp::Mul, s1x, h).unwrap();
                let s2x = b.binary(BinaryOp::Mul, s2, x).unwrap();
                let a = b.binary(BinaryOp::Add, a, s2x).unwrap();
                y = b.binary(BinaryOp::Sub, a, o).unwrap();
            }
            b.read_back(y).unwrap();
            let program = b.finish().unwrap();
            let l = &program.loops[0];
            let views = l.steps.iter().filter(|s| s.view).count();
            let copies = l.steps.iter().filter(|s| !s.view && s.carry != NO_CARRY).count();
            // Each round shifts y * x by 1 (a view), y by 2 (a view, but in the first round,
            // whose y is the input: a gather from the buffer, no shift of the loop), y by 1
            // (y's second shift: a copy; the same first), and that by one with an exception
            // inside the block (a copy).
            assert_eq!((views, copies), (1 + 11 * 2, 1 + 11 * 2), "n = {n}");
            for st in &l.steps {
                let writes = match st.dst {
                    Dst::Reg(w) if !st.view => Some(w),
                    _ => None,
                };
                assert!(
                    !st.src[..st.nargs as usize + usize::from(st.then.is_some())]
                        .iter()
                        .any(|a| matches!(a, Src::View(r, _) if Some(*r) == writes)),
                    "n = {n}: {st:?} writes a register it views"
                );
            }
            for _ in 0..2 {
                let ran = program.run(false);
                assert_eq!(bits(&ran.read_backs[0]), bits(&cpu.to_vec(&ey).unwrap()), "n = {n}");
            }
        }
    }

    /// A block is as long as keeps the loop's registers within `REGISTERS_L1` bytes, from
    /// LOOP_LANES up to LOOP_LANES_MAX, always a power of two times LOOP_LANES (so a whole
    /// number of blocks makes a `kernels::BLOCK`).
    #[test]
    fn blocks_are_as_long_as_the_registers_fit_in_l1() {
        // 40 KiB of f64: 5120 elements over the registers.
        for (registers, lanes) in
            [(0, 2048), (1, 2048), (2, 2048), (3, 1024), (5, 1024), (6, 512), (10, 512), (11, 256), (100, 256)]
        {
            assert_eq!(lanes_for(registers), lanes, "{registers} registers");
            assert!(kernels::BLOCK.is_multiple_of(lanes) && lanes.is_multiple_of(LOOP_LANES));
        }
    }

    /// A loop with sums whose shifts reach back further than `WARM_MAX` elements does not split:
    /// it runs in order on one thread, and past PAR_MIN elements its sums still go by BLOCK,
    /// as `kernels::reduce`'s, so the bits stay the eager device's.
    #[test]
    fn sums_of_loops_too_long_to_warm_up_keep_the_reduce_order() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for n in [3 * LOOP_LANES + 17, kernels::PAR_MIN + 1000] {
            let xs: Vec<f64> = (0..n).map(|i| 0.5 + (i as f64 * 0.29).sin() * 0.375).collect();
            let back8: Vec<i64> = (0..n as i64).map(|i| if i < 8 { -1 } else { i - 8 }).collect();
            let (cx, c8) = (cpu.tensor(&xs, &[n], DType::F64).unwrap(), cpu.index(&back8).unwrap());
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let x = b.input(&xs).unwrap();
            let t8 = b.index(&back8);
            let (mut ey, mut y) = (cx.clone(), x);
            // 300 shifts by 8: 2392 elements back, past WARM_MAX.
            for _ in 0..300 {
                let eg = e(cpu.gather(&ey, &c8, OutOfRange::Fill(0.25)));
                ey = e(cpu.binary(BinaryOp::Add, &e(cpu.binary(BinaryOp::Mul, &eg, &cx)), &cx));
                let g = b.gather(y, t8, OutOfRange::Fill(0.25)).unwrap();
                let gx = b.binary(BinaryOp::Mul, g, x).unwrap();
                y = b.binary(BinaryOp::Add, gx, x).unwrap();
            }
            let esum = e(cpu.reduce(HistOp::Add, &ey));
            let sum = b.reduce(HistOp::Add, y).unwrap();
            b.read_back(sum).unwrap();
            let program = b.finish().unwrap();
            let l = &program.loops[0];
            assert_eq!((program.loops.len(), l.warm, l.sums.len()), (1, 2392usize.div_ceil(l.lanes), 1), "n = {n}");
            assert!(l.warm * l.lanes > WARM_MAX, "n = {n}");
            assert_eq!(l.task_span(), None, "n = {n}");
            for _ in 0..2 {
                let ran = program.run(false);
                assert_eq!(bits(&ran.read_backs[0]), bits(&cpu.to_vec(&esum).unwrap()), "n = {n}");
            }
        }
    }

    /// Tables are shifts where every bin but at most `SHIFT_EXCEPTIONS` reads `d` elements
    /// back, `d` at most `SHIFT_MAX`, and each exception reads the fill or an element of its
    /// own block at or before it.
    #[test]
    fn shifts_are_recognised_with_their_exceptions() {
        let back = |d: u32, n: u32| -> Vec<u32> { (0..n).map(|i| i.checked_sub(d).unwrap_or(u32::MAX)).collect() };
        let s = Shift::of(&back(1, 100)).unwrap();
        assert_eq!((s.d, s.exceptions), (1, vec![(0, u32::MAX)]));
        let s = Shift::of(&back(0, 100)).unwrap();
        assert_eq!((s.d, s.exceptions.len()), (0, 0));
        assert!(Shift::of(&back(9, 100)).is_none(), "too far back");
        let mut bins = back(2, 1000);
        bins[0] = 0;
        bins[600] = 512;
        let s = Shift::of(&bins).unwrap();
        assert_eq!((s.d, s.exceptions), (2, vec![(0, 0), (1, u32::MAX), (600, 512)]));
        bins[600] = 500;
        assert!(Shift::of(&bins).is_none(), "an exception reading the block before its own");
        bins[600] = 601;
        assert!(Shift::of(&bins).is_none(), "an exception reading a later element");
        let mut bins = back(1, 1000);
        for i in (100..1000).step_by(100) {
            bins[i] = u32::MAX;
        }
        assert!(Shift::of(&bins).is_none(), "ten exceptions");
        assert!(Shift::of(&[]).is_none());
        assert!(Shift::of(&[3, u32::MAX]).is_none(), "the last bin out of range");
    }

    /// Sums that join the loop computing their operand give `kernels::reduce`'s bits: below
    /// PAR_MIN one lane sum of the whole, above it one per BLOCK folded in order (tasks of
    /// BLOCK elements, not the loop's usual span), at lengths that end inside a block and a
    /// group.
    /// A value that reads a sum waits for the loop to end.
    #[test]
    fn fused_sums_repeat_the_cpu_reduce_bit_for_bit() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for n in
            [FUSE_MIN + 3, 3 * LOOP_LANES + 17, kernels::PAR_MIN - 5, kernels::PAR_MIN + 1000, 3 * kernels::BLOCK + 77]
        {
            // Finite, of mixed signs and magnitudes, so that the order of the additions shows.
            let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 10f64.powi((i % 7) as i32 - 3)).collect();
            let ys: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos() - 0.25).collect();
            let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
            let (cx, cy, ch) = (up(&xs), up(&ys), up(&[0.5]));
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let e_d = e(cpu.binary(BinaryOp::Sub, &cx, &ch));
            let e_x = e(cpu.unary(UnaryOp::Exp, &e_d));
            let e_p = e(cpu.binary(BinaryOp::Mul, &e_d, &cy));
            let (e_s1, e_s2) = (e(cpu.reduce(HistOp::Add, &e_x)), e(cpu.reduce(HistOp::Add, &e_p)));
            let e_q = e(cpu.binary(BinaryOp::Div, &e_p, &e_s1));
            let mut b = Builder::new();
            b.set_threads(2);
            let (x, y, h) = (b.input(&xs).unwrap(), b.input(&ys).unwrap(), b.input(&[0.5]).unwrap());
            let d = b.binary(BinaryOp::Sub, x, h).unwrap();
            let ex = b.unary(UnaryOp::Exp, d).unwrap();
            let p = b.binary(BinaryOp::Mul, d, y).unwrap();
            let (s1, s2) = (b.reduce(HistOp::Add, ex).unwrap(), b.reduce(HistOp::Add, p).unwrap());
            let q = b.binary(BinaryOp::Div, p, s1).unwrap();
            b.read_back(s1).unwrap();
            b.read_back(s2).unwrap();
            b.read_back(q).unwrap();
            let program = b.finish().unwrap();
            // d, exp, p and both sums in one loop; q after it (a loop of one step, or alone).
            let loops = program.loops();
            assert!(loops == (1, 5) || loops == (2, 6), "n = {n}: {loops:?}");
            assert_eq!(program.loops[0].sums.len(), 2);
            for _ in 0..2 {
                let ran = program.run(false);
                let want = |t: &crate::CpuTensor| bits(&cpu.to_vec(t).unwrap());
                assert_eq!(bits(&ran.read_backs[0]), want(&e_s1), "n = {n}: the sum of exp");
                assert_eq!(bits(&ran.read_backs[1]), want(&e_s2), "n = {n}: the sum of a stored value");
                assert_eq!(bits(&ran.read_backs[2]), want(&e_q), "n = {n}: a value of a sum");
            }
        }
    }

    /// Chains of elementwise ops fused into loops give the eager device's bits: registers,
    /// values stored because something after the loop reads them, one-element operands on
    /// either side, gathers from outside the loop (a gather of a value the loop computes
    /// closes it; gathers by runs of consecutive bins, copied, and a gather's adjoint added
    /// back run by run), select and a rule kernel; at lengths that end inside a block, on one
    /// thread and split across threads.
    #[test]
    fn fused_loops_repeat_the_cpu_device_bit_for_bit() {
        let cpu = Cpu::new(Some(2)).unwrap();
        for n in [FUSE_MIN, 3 * LOOP_LANES + 17, kernels::PAR_MIN + 1000] {
            let up = |v: &[f64]| cpu.tensor(v, &[v.len()], DType::F64).unwrap();
            let (xs, ys) = (awkward(n, 1), awkward(n, 4));
            let shift: Vec<i64> = (0..n as i64).map(|i| (i * 7 + 3) % n as i64).collect();
            // Runs: out of range at 0 and in the last tenth, `i - 1` between, reversed at 9..13.
            let runs: Vec<i64> = (0..n as i64)
                .map(|i| match i {
                    0 => -1,
                    9..13 => 20 - i,
                    _ if i >= n as i64 * 9 / 10 => n as i64 + i,
                    _ => i - 1,
                })
                .collect();
            let (cx, cy, ch, cidx) = (up(&xs), up(&ys), up(&[0.5]), cpu.index(&shift).unwrap());
            let cruns = cpu.index(&runs).unwrap();
            // ode's `i - 1` (bin 0 twice): its adjoint adds two terms into bin 0, in order.
            let previous: Vec<i64> = (0..n as i64).map(|i| (i - 1).max(0)).collect();
            let cprevious = cpu.index(&previous).unwrap();
            let mut b = Builder::new();
            b.set_threads(2);
            let (x, y, h, idx) =
                (b.input(&xs).unwrap(), b.input(&ys).unwrap(), b.input(&[0.5]).unwrap(), b.index(&shift));
            let runs = b.index(&runs);
            let previous = b.index(&previous);
            // The eager chain, op by op.
            let e = |t: Result<crate::CpuTensor>| t.unwrap();
            let e_g = e(cpu.gather(&cx, &cidx, OutOfRange::Error));
            let e_p = e(cpu.binary(BinaryOp::Mul, &e_g, &cy));
            let e_q = e(cpu.binary(BinaryOp::Add, &ch, &e_p));
            let e_t = e(cpu.unary(UnaryOp::Tanh, &e_q));
            let e_m = e(cpu.binary(BinaryOp::Gt, &e_t, &ch));
            let e_s = e(cpu.select(&e_m, &e_q, &ch));
            let e_a = cpu.unary_adjoint(UnaryOp::Tanh, &e_q, &e_t, &e_s).unwrap().unwrap();
            let e_d = e(cpu.binary(BinaryOp::Div, &e_a, &ch));
            // A gather of the loop's own result, then more elementwise work on it.
            let e_g2 = e(cpu.gather(&e_d, &cidx, OutOfRange::Error));
            let e_r = e(cpu.binary(BinaryOp::Sub, &e_g2, &e_t));
            let e_w = e(cpu.gather(&cy, &cruns, OutOfRange::Fill(-2.5)));
            let e_r = e(cpu.binary(BinaryOp::Add, &e_r, &e_w));
            let e_sum = e(cpu.reduce(HistOp::Add, &e_r));
            let e_back = e(cpu.gather_adjoint(&cx, &cprevious, &e_r));
            // The same, compiled.
            let g = b.gather(x, idx, OutOfRange::Error).unwrap();
            let p = b.binary(BinaryOp::Mul, g, y).unwrap();
            let q = b.binary(BinaryOp::Add, h, p).unwrap();
            let t = b.unary(UnaryOp::Tanh, q).unwrap();
            let m = b.binary(BinaryOp::Gt, t, h).unwrap();
            let s = b.select(m, q, h).unwrap();
            let a = b.unary_adjoint(UnaryOp::Tanh, q, t, s).unwrap();
            let d = b.binary(BinaryOp::Div, a, h).unwrap();
            let g2 = b.gather(d, idx, OutOfRange::Error).unwrap();
            let r = b.binary(BinaryOp::Sub, g2, t).unwrap();
            let w = b.gather(y, runs, OutOfRange::Fill(-2.5)).unwrap();
            let r = b.binary(BinaryOp::Add, r, w).unwrap();
            let sum = b.reduce(HistOp::Add, r).unwrap();
            let back = b.gather_adjoint(n, previous, r).unwrap();
            b.output(p, 1);
            b.read_back(r).unwrap();
            b.read_back(sum).unwrap();
            b.read_back(back).unwrap();
            let program = b.finish().unwrap();
            // Two loops: the gather of `d` closes the first; the sum of `r` is a step of the
            // second.
            assert_eq!(program.loops(), (2, 13), "n = {n}");
            // The second table is runs where they are few: 0, 1..9, 9..13 (one each), 13..,
            // the fill at the end.
            let want_runs = if n >= 8 * 16 { Some(8) } else { None };
            assert_eq!(
                program.side.runs.iter().map(|r| r.as_ref().map(|r| r.src.len())).collect::<Vec<_>>(),
                [None, want_runs, Some(2)]
            );
            // Stored: the inputs, p (an output), t (read by the second loop), d (gathered) and
            // r (read back); the other values live in registers.
            assert!(
                program.buffer_len() <= 2 * n + 1 + 5 * n + 2 + 16 * LOOP_LANES,
                "n = {n}: {}",
                program.buffer_len()
            );
            let same = |got: &[f64], want: &crate::CpuTensor, what: &str| {
                let want = cpu.to_vec(want).unwrap();
                assert_eq!(got.len(), want.len(), "n = {n}: {what}");
                // Any NaN for any NaN: which of two NaNs an add returns is the machine's choice.
                let first = got.iter().zip(&want).position(|(&a, &b)| !same_or_both_nan(a, b));
                assert_eq!(first, None, "n = {n}: {what} differs first at {first:?}");
            };
            for _ in 0..2 {
                let ran = program.run(true);
                same(&ran.read_backs[0], &e_r, "r");
                same(&ran.read_backs[1], &e_sum, "the sum");
                same(&ran.read_backs[2], &e_back, "the gather's adjoint");
                assert_eq!(ran.outputs.len(), 1);
                same(&ran.outputs[0].1, &e_p, "p");
            }
        }
    }

    #[test]
    fn values_past_the_limit_and_gathers_out_of_range_are_refused() {
        let mut b = Builder::new();
        assert!(b.input(&vec![1.0; MAX_LEN + 1]).is_err());
        let x = b.input(&[1.0, 2.0]).unwrap();
        let i = b.index(&[0, 2]);
        let e = b.gather(x, i, OutOfRange::Error).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let a = b.input(&[1.0, 2.0, 3.0]).unwrap();
        assert!(b.binary(BinaryOp::Add, x, a).is_err(), "2 against 3 elements");
    }

    /// Folding runs the interpreter's kernels: an op on constants gives the bits the same op
    /// on inputs gives at run time, for one element and many.
    #[test]
    fn folded_constants_have_the_run_time_bits() {
        for n in [1, 9] {
            let (xs, ys) = (awkward(n, 1), awkward(n, 4));
            let (mut folded, mut run) = (Builder::new(), Builder::new());
            let (cx, cy) = (folded.constant(&xs).unwrap(), folded.constant(&ys).unwrap());
            let (ix, iy) = (run.input(&xs).unwrap(), run.input(&ys).unwrap());
            for op in UnaryOp::ALL {
                let v = folded.unary(op, cx).unwrap();
                folded.read_back(v).unwrap();
                let v = run.unary(op, ix).unwrap();
                run.read_back(v).unwrap();
            }
            for op in BinaryOp::ALL {
                let v = folded.binary(op, cx, cy).unwrap();
                folded.read_back(v).unwrap();
                let v = run.binary(op, ix, iy).unwrap();
                run.read_back(v).unwrap();
            }
            assert_eq!(folded.nodes(), UnaryOp::ALL.len() + BinaryOp::ALL.len(), "only the read-backs are left");
            let (a, b) = (folded.finish().unwrap().run(false), run.finish().unwrap().run(false));
            assert_eq!(a.read_backs.len(), b.read_backs.len());
            for (k, (x, y)) in a.read_backs.iter().zip(&b.read_backs).enumerate() {
                assert_eq!(bits(x), bits(y), "n = {n}, read-back {k}");
            }
        }
    }
}

//! Lowering a finished trace into a compiled host program ([`adgauge_cpu::compiled`]), and the
//! check that the program repeats the eager run.
//!
//! Each recorded instruction carries what it computes ([`Sym`]) where the compiler knows the op;
//! a trace with any other op (a histogram, an arg-histogram of more than one bin), a value that
//! is not an f64 tensor, or one past [`MAX_LEN`] elements is not lowered, and its replays stay
//! the recorded calls. An index tensor an op computes (a one-bin arg-histogram's winner) is a
//! position held in an f64 value, which only the ops that take one read. The program's
//! constants are the trace's uploads and fills and the tensors made outside the body, read
//! once here: a trace is only replayed on the inputs it was made with.

use std::sync::Arc;

use adgauge_cpu::compiled::{Builder, Idx, MAX_LEN, Program, Val};
use adgauge_cpu::hist_sizes::Plan;

use super::{Arg, Readback, Trace, Traceable, hash_f};
use crate::{BinaryOp, DType, Extremum, HistOp, OpError, OutOfRange, Result, TensorMeta, UnaryOp};

/// What a recorded instruction computes, for the compiler (`Opaque`: an op it does not know).
#[derive(Clone, Debug)]
pub(super) enum Sym {
    Opaque,
    Tensor(Arc<[f64]>),
    Full(f64),
    Index(Arc<[i64]>),
    ToVec,
    Reshape,
    Unary(UnaryOp),
    Binary(BinaryOp),
    Select,
    Reduce(HistOp),
    /// `arg_reduce_by_index`: compiled with one bin, its winners a position held in a value.
    ArgReduce(Extremum),
    /// `index_eq` with this value, of a computed position.
    IndexEq(i64),
    /// `scatter`, of one value at a computed position.
    Scatter,
    Gather(OutOfRange),
    GatherAdjoint,
    UnaryAdjoint(UnaryOp),
    Stack,
    Unstack,
    /// From the operand's shape to the given one.
    BroadcastTo(Arc<[usize]>, Arc<[usize]>),
    SumTo(Arc<[usize]>, Arc<[usize]>),
    /// The operands' shapes and transpositions.
    Matmul(Arc<[usize]>, bool, Arc<[usize]>, bool),
}

/// A slot's value as the recording saw it.
#[derive(Clone, Copy, Debug)]
pub(super) enum SlotKind {
    Unknown,
    /// A tensor: its element count and dtype.
    T(usize, DType),
    /// An index tensor: its length.
    I(usize),
}

/// The kind of a tensor slot of `n` elements.
pub(super) fn tensor_kind<X: TensorMeta>(n: usize, t: &X) -> SlotKind {
    SlotKind::T(n, t.dtype())
}

/// The kind of an index slot of `n` entries.
pub(super) fn index_kind<X>(n: usize, _: &X) -> SlotKind {
    SlotKind::I(n)
}

fn not_lowered(what: String) -> OpError {
    OpError::Unsupported(format!("not compiled: {what}"))
}

/// The trace as a host program; `Err` says why it cannot be one.
pub(super) fn lower<D: Traceable>(inner: &D, trace: &Trace<D>) -> Result<Program> {
    let mut b = Builder::new();
    b.set_threads(inner.threads());
    b.set_flush_subnormals(inner.flushes_subnormals());
    let mut vals: Vec<Option<Val>> = vec![None; trace.slots];
    let mut idxs: Vec<Option<Idx>> = vec![None; trace.slots];
    // Index slots computed in the program (an arg-histogram's winners): positions held as f64
    // values, which only the ops that take such a position read.
    let mut positions: Vec<Option<Val>> = vec![None; trace.slots];
    let mut ext_vals: Vec<Option<Val>> = vec![None; trace.ext_t.len()];
    let mut ext_idxs: Vec<Option<Idx>> = vec![None; trace.ext_i.len()];
    for (pc, m) in trace.meta.iter().enumerate() {
        let name = m.name;
        let mut t = |b: &mut Builder, a: Arg| -> Result<Val> {
            match a {
                Arg::Slot(s) => {
                    vals[s as usize].ok_or_else(|| not_lowered(format!("{name} reads a value never lowered")))
                }
                Arg::Ext(e) => {
                    if let Some(v) = ext_vals[e as usize] {
                        return Ok(v);
                    }
                    let x = &trace.ext_t[e as usize];
                    if x.dtype() != DType::F64 || x.numel() > MAX_LEN {
                        return Err(not_lowered(format!("an input of {} {:?} elements", x.numel(), x.dtype())));
                    }
                    let v = b.input(&inner.to_vec(x)?)?;
                    ext_vals[e as usize] = Some(v);
                    Ok(v)
                }
            }
        };
        let writes = &m.writes;
        let written_len = |k: usize| -> Result<usize> {
            match writes.get(k).map(|&w| trace.slot_kinds[w as usize]) {
                Some(SlotKind::T(n, DType::F64)) => Ok(n),
                Some(SlotKind::I(n)) => Ok(n),
                other => Err(not_lowered(format!("{name} makes {other:?}"))),
            }
        };
        let a = &m.args;
        let position = |a: Arg| match a {
            Arg::Slot(s) => positions[s as usize],
            Arg::Ext(_) => None,
        };
        let out: Option<Val> = match &m.sym {
            Sym::Opaque => return Err(not_lowered(format!("{name} (instruction {pc})"))),
            Sym::Tensor(data) => {
                written_len(0)?;
                Some(b.input(data)?)
            }
            Sym::Full(x) => Some(b.constant(&vec![*x; written_len(0)?])?),
            Sym::Index(data) => {
                written_len(0)?;
                idxs[writes[0] as usize] = Some(b.index(data));
                None
            }
            Sym::ToVec => {
                let x = t(&mut b, a[0])?;
                b.read_back(x)?;
                None
            }
            Sym::Reshape => Some(t(&mut b, a[0])?),
            Sym::Unary(op) => {
                let x = t(&mut b, a[0])?;
                Some(b.unary(*op, x)?)
            }
            Sym::Binary(op) => {
                let (x, y) = (t(&mut b, a[0])?, t(&mut b, a[1])?);
                Some(b.binary(*op, x, y)?)
            }
            Sym::Select => {
                let (mask, x, y) = (t(&mut b, a[0])?, t(&mut b, a[1])?, t(&mut b, a[2])?);
                Some(b.select(mask, x, y)?)
            }
            Sym::Reduce(op) => {
                let x = t(&mut b, a[0])?;
                Some(b.reduce(*op, x)?)
            }
            Sym::ArgReduce(ext) => {
                let (dest, x) = (t(&mut b, a[0])?, t(&mut b, a[1])?);
                let i = index(inner, trace, &idxs, &mut ext_idxs, &mut b, a[2])?;
                let (value, pos) = b.arg_reduce(*ext, dest, i, x)?;
                if writes.len() != 2 || written_len(0)? != 1 || written_len(1)? != 1 {
                    return Err(not_lowered(format!("{name} makes other than one bin")));
                }
                vals[writes[0] as usize] = Some(value);
                positions[writes[1] as usize] = Some(pos);
                None
            }
            Sym::IndexEq(c) => {
                let pos = position(a[0]).ok_or_else(|| not_lowered(format!("{name} of an index table")))?;
                // Positions are below 2^24 and -1: a value past 2^53 that rounds is equal to
                // none of them either way.
                let c = b.constant(&[*c as f64])?;
                Some(b.binary(BinaryOp::Eq, pos, c)?)
            }
            Sym::Scatter => {
                let (dest, v) = (t(&mut b, a[0])?, t(&mut b, a[1])?);
                let pos = position(a[2]).ok_or_else(|| not_lowered(format!("{name} by an index table")))?;
                Some(b.scatter_at(dest, pos, v)?)
            }
            Sym::Gather(oob) => {
                let src = t(&mut b, a[0])?;
                match position(a[1]) {
                    Some(pos) => Some(b.gather_at(src, pos, *oob)?),
                    None => {
                        let i = index(inner, trace, &idxs, &mut ext_idxs, &mut b, a[1])?;
                        Some(b.gather(src, i, *oob)?)
                    }
                }
            }
            Sym::GatherAdjoint => {
                let (src, g) = (t(&mut b, a[0])?, t(&mut b, a[1])?);
                let i = index(inner, trace, &idxs, &mut ext_idxs, &mut b, a[2])?;
                let (n, k) = (b.len(g), b.len(src));
                // The CPU's one-row kernel, as the eager call took (more rows: composed ops).
                if Plan::new(n, k).rows() > 1 {
                    return Err(not_lowered(format!("a gather adjoint of {n} into {k}")));
                }
                Some(b.gather_adjoint(k, i, g)?)
            }
            Sym::UnaryAdjoint(op) => {
                if writes.is_empty() {
                    // The device has no kernel for it: the rule composes other ops instead.
                    None
                } else {
                    let (x, y, g) = (t(&mut b, a[0])?, t(&mut b, a[1])?, t(&mut b, a[2])?);
                    Some(b.unary_adjoint(*op, x, y, g)?)
                }
            }
            Sym::BroadcastTo(from, to) => {
                let x = t(&mut b, a[0])?;
                Some(b.broadcast_to(x, from, to)?)
            }
            Sym::SumTo(from, to) => {
                let x = t(&mut b, a[0])?;
                Some(b.sum_to(x, from, to)?)
            }
            Sym::Matmul(sa, ta, sb, tb) => {
                let (x, y) = (t(&mut b, a[0])?, t(&mut b, a[1])?);
                Some(b.matmul(x, sa, *ta, y, sb, *tb)?)
            }
            Sym::Stack => {
                let parts = a.iter().map(|&p| t(&mut b, p)).collect::<Result<Vec<_>>>()?;
                Some(b.stack(&parts)?)
            }
            Sym::Unstack => {
                let x = t(&mut b, a[0])?;
                let mut at = 0;
                for (k, &w) in writes.iter().enumerate() {
                    let len = written_len(k)?;
                    vals[w as usize] = Some(b.slice(x, at, len)?);
                    at += len;
                }
                None
            }
        };
        if let Some(v) = out {
            let n = written_len(0)?;
            if b.len(v) != n || writes.len() != 1 {
                return Err(not_lowered(format!("{name} makes {} elements, the recording {n}", b.len(v))));
            }
            vals[writes[0] as usize] = Some(v);
        }
        // A value no later instruction reads is a result the body dropped or returned: it is
        // computed all the same.
        for &w in writes {
            if trace.last_use[w as usize] == pc as u32
                && let Some(v) = vals[w as usize]
            {
                b.output(v, w as u64);
            }
        }
    }
    let program = b.finish()?;
    if std::env::var("ADGAUGE_JIT").is_ok_and(|v| v == "listing") {
        eprintln!("compiled program of {} instructions:\n{}", trace.meta.len(), program.listing());
    }
    Ok(program)
}

/// The index operand `a`, interned in the program.
fn index<D: Traceable>(
    inner: &D,
    trace: &Trace<D>,
    idxs: &[Option<Idx>],
    ext_idxs: &mut [Option<Idx>],
    b: &mut Builder,
    a: Arg,
) -> Result<Idx> {
    match a {
        Arg::Slot(s) => idxs[s as usize].ok_or_else(|| not_lowered("an index never lowered".into())),
        Arg::Ext(e) => {
            if let Some(i) = ext_idxs[e as usize] {
                return Ok(i);
            }
            let i = b.index(&inner.index_to_vec(&trace.ext_i[e as usize])?);
            ext_idxs[e as usize] = Some(i);
            Ok(i)
        }
    }
}

/// Runs `program` once and holds its read-backs and final values to the eager run's, bit for
/// bit; `Err` names the first difference (a compiler bug: the case fails, as a replay that
/// differs does).
pub(super) fn check(
    program: &Program,
    meta_name: impl Fn(u32) -> &'static str,
    hashes: &std::collections::HashMap<u32, u64>,
    readbacks: &[Readback],
) -> Result<()> {
    let ran = program.run(true);
    let differs = |what: String| OpError::Device(format!("compiled program differs from the eager run: {what}"));
    if ran.read_backs.len() != readbacks.len() {
        return Err(differs(format!("{} read-backs, eager {}", ran.read_backs.len(), readbacks.len())));
    }
    for (i, (got, want)) in ran.read_backs.into_iter().zip(readbacks).enumerate() {
        if Readback::F(got) != *want {
            return Err(differs(format!("read-back {i}")));
        }
    }
    for (slot, values) in &ran.outputs {
        let slot = *slot as u32;
        if hashes.get(&slot) != Some(&hash_f(values)) {
            return Err(differs(format!("the result of {} (slot {slot})", meta_name(slot))));
        }
    }
    Ok(())
}

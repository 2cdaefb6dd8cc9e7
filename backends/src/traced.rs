//! Traced devices: a device wrapper that records the primitives one timed call issues, once,
//! and replays the recording on later calls without running the code that issued them (JAX's
//! `jit`, in Rust, over the existing op API).
//!
//! [`Traced<D>`] is a [`Device`] whose ops run on the inner device `D` as they are called. Only
//! inside [`Device::run_traced`] does it also record: the first call of a [`TraceCell`] runs its
//! body eagerly and records every primitive the body reached — the workload's own ops and, under
//! `Reverse` or `Forward`, the engine's tape, rules and reverse sweep, which all end in calls of
//! the inner device — as an instruction over numbered slots. Later calls of the same cell replay
//! the instructions in order on the inner device: no workload code, no tape, no closures of the
//! AD engines run, and each slot is released right after its last reader (liveness), so the
//! buffers return to the inner device's pool as the eager run would return them at best.
//!
//! A recording is valid for the inputs it was taken with, as a jitted function is for the shapes
//! it was traced at: tensors made outside the body (a prepared case's resident inputs) are held
//! by the trace and read again at each replay, uploads inside the body are replayed from the
//! recorded host data, and every decision the body took on the host (a rule chosen by size, a
//! loop bound) is fixed. The harness keeps one cell per prepared case and mode, so a trace never
//! meets other inputs.
//!
//! A device records one body at a time: ops that other threads issue on the same device (or
//! its clones) while a body records would be recorded into it. The harness runs a device's
//! cases one after another; the inner device's own parallel loops do not pass through here.
//!
//! Replays are checked, not trusted: right after recording, the trace is replayed once and every
//! read-back and every final value (each slot that no later instruction reads: the objective,
//! the gradient, dropped results) is compared bit for bit with the eager run, whose values were
//! hashed as it went. A difference is an error naming the instruction, and the case fails.
//!
//! A compiling device ([`Traced::compiling`], `cpu-jit`) then lowers the checked trace into a
//! host program ([`adgauge_cpu::compiled`]; the lowering is `lower.rs`) where it can, checks
//! that program against the eager run the same way, and runs it at every later call instead of
//! the recorded instructions.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::{Device, TraceCell};
use crate::ops::{ChunkedHist, Extremum, IndexMeta, Operand, OutOfRange, ScanSpec, TensorMeta};
use crate::ops::{DenseOps, ElementwiseOps, HistOps, IndexOps, ReduceOps, RuleKernels, ScanOps, TensorOps};
use crate::{BinaryOp, DType, HistOp, IndexDType, OpError, Result, UnaryOp};

mod lower;
use lower::{SlotKind, Sym, index_kind, tensor_kind};

/// An inner device a trace can wrap: its tensors are shared across threads (a trace lives in a
/// prepared case).
pub trait Traceable: Device + TensorOps<T: Send + Sync, I: Send + Sync> + Send + Sync {}

impl<D> Traceable for D
where
    D: Device + Send + Sync,
    D::T: Send + Sync,
    D::I: Send + Sync,
{
}

/// A device that records what [`Device::run_traced`] bodies issue and replays it (module docs).
pub struct Traced<D: Traceable> {
    inner: D,
    shared: Arc<Shared<D>>,
}

struct Shared<D: Traceable> {
    recording: Mutex<Option<Recording<D>>>,
    /// Generations of recordings: a slot reference belongs to the recording of its generation.
    generation: std::sync::atomic::AtomicU64,
    last: Mutex<Ledger>,
    /// Primitive calls since [`Traced::inject_fault`] last armed or disarmed the device.
    calls: std::sync::atomic::AtomicU64,
    /// The call that fails (`u64::MAX`: none).
    fail_at: std::sync::atomic::AtomicU64,
    /// Whether new traces are compiled for the host (`Traced::compiling`).
    compile: bool,
}

/// What the device's recordings leave behind.
#[derive(Default)]
struct Ledger {
    /// The size of the last trace.
    stats: Option<TraceStats>,
    /// The read-backs of the last recording's eager run (for `check`'s comparison).
    readbacks: Vec<Readback>,
    /// Time spent in recording calls (the eager run, the analysis and the checking replay),
    /// reported as this device's compile time.
    recording_time: std::time::Duration,
    /// Why the last trace was not compiled, on a compiling device.
    compile_note: Option<String>,
}

impl<D: Traceable> Clone for Traced<D> {
    fn clone(&self) -> Self {
        Traced { inner: self.inner.clone(), shared: self.shared.clone() }
    }
}

/// The size of a recorded trace, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Primitive calls recorded (each replays as one call of the inner device).
    pub instructions: usize,
    /// Values the calls produce (each lives in one slot from its producer to its last reader).
    pub slots: usize,
    /// Tensors made outside the body (resident inputs) that the trace holds and reads again at
    /// each replay.
    pub externals: usize,
    /// Values compared bit for bit between the eager run and the checking replay.
    pub verified: usize,
    /// Instructions of the compiled program replays run instead, if the trace was compiled.
    pub compiled: Option<usize>,
}

/// Where a value came from: a slot of the recording of some generation, or outside every
/// recording (numbered, so a recording holds each outside tensor once however often it is read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Slot { generation: u64, id: u32 },
    Outside(u64),
}

static OUTSIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn outside() -> Origin {
    Origin::Outside(OUTSIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// A value tensor of a traced device: the inner device's tensor and, when a recording made it,
/// its slot.
pub struct TracedTensor<D: TensorOps> {
    value: D::T,
    origin: Origin,
}

/// An index tensor of a traced device (see [`TracedTensor`]).
pub struct TracedIndex<D: TensorOps> {
    value: D::I,
    origin: Origin,
}

impl<D: TensorOps> Clone for TracedTensor<D> {
    fn clone(&self) -> Self {
        TracedTensor { value: self.value.clone(), origin: self.origin }
    }
}

impl<D: TensorOps> Clone for TracedIndex<D> {
    fn clone(&self) -> Self {
        TracedIndex { value: self.value.clone(), origin: self.origin }
    }
}

impl<D: TensorOps> TensorMeta for TracedTensor<D> {
    fn shape(&self) -> &[usize] {
        self.value.shape()
    }
    fn dtype(&self) -> DType {
        self.value.dtype()
    }
}

impl<D: TensorOps> IndexMeta for TracedIndex<D> {
    fn len(&self) -> usize {
        self.value.len()
    }
    fn index_dtype(&self) -> IndexDType {
        self.value.index_dtype()
    }
}

impl<D: TensorOps> TracedTensor<D> {
    /// The inner device's tensor.
    pub fn inner(&self) -> &D::T {
        &self.value
    }
}

/// An operand of a recorded instruction: a slot of the trace, or a tensor made outside it (an
/// entry of the trace's table of them).
#[derive(Clone, Copy, Debug)]
enum Arg {
    Slot(u32),
    Ext(u32),
}

/// The slots an instruction writes, inline for the usual one to four results: a boxed slice
/// per instruction instead made an LSTM's replayed gradient 1.13-1.17x slower (an extra
/// pointer to chase per call).
#[derive(Clone, Debug, Default)]
struct Writes {
    len: usize,
    inline: [u32; 4],
    spill: Vec<u32>,
}

impl Writes {
    fn push(&mut self, slot: u32) {
        if self.len < 4 && self.spill.is_empty() {
            self.inline[self.len] = slot;
            self.len += 1;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.inline[..self.len]);
            }
            self.spill.push(slot);
        }
    }
    fn as_slice(&self) -> &[u32] {
        if self.spill.is_empty() { &self.inline[..self.len] } else { &self.spill }
    }
}

/// A value in a replay's slot.
enum Value<D: TensorOps> {
    T(D::T),
    I(D::I),
}

/// What a replay keeps for its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keep {
    /// Nothing: a timed replay.
    Nothing,
    /// What it reads back (`check`'s comparison).
    ReadBacks,
    /// What it reads back and its final values (the checking replay of a new recording).
    All,
}

/// Final values a checking replay kept, by slot.
type Kept<D> = Vec<(u32, Value<D>)>;

type Run<D> = Box<dyn Fn(&D, &mut Frame<'_, D>) -> Result<()> + Send + Sync>;

/// What the analysis and the error messages know of an instruction (a replay reads none of it).
struct Meta {
    name: &'static str,
    writes: Vec<u32>,
    /// What the instruction computes, where the compiler knows it.
    sym: Sym,
    /// Its operands, in the op's order.
    args: Vec<Arg>,
}

impl Meta {
    /// The slots the instruction reads.
    fn reads(&self) -> impl Iterator<Item = u32> + '_ {
        self.args.iter().filter_map(|a| match a {
            Arg::Slot(s) => Some(*s),
            Arg::Ext(_) => None,
        })
    }
}

/// A host copy made inside the body (`to_vec`, `index_to_vec`).
#[derive(Clone, Debug)]
enum Readback {
    F(Vec<f64>),
    I(Vec<i64>),
}

/// Read-backs compare by bits ([`compared_bits`]): a replay must repeat the eager run exactly.
/// A replay keeps its values as read, without a converted copy (BA's reverse Jacobian reads
/// back 15 MB a call).
impl PartialEq for Readback {
    fn eq(&self, other: &Readback) -> bool {
        match (self, other) {
            (Readback::F(a), Readback::F(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| compared_bits(*x) == compared_bits(*y))
            }
            (Readback::I(a), Readback::I(b)) => a == b,
            _ => false,
        }
    }
}

struct Recording<D: Traceable> {
    generation: u64,
    runs: Vec<Run<D>>,
    meta: Vec<Meta>,
    slots: u32,
    /// Tensors made outside the body, each once, and where each outside number went.
    ext_t: Vec<D::T>,
    ext_i: Vec<D::I>,
    ext_of: HashMap<u64, u32>,
    /// The eager run's values, hashed as they were produced, by slot.
    hashes: HashMap<u32, u64>,
    readbacks: Vec<Readback>,
    /// Per slot: its element count and kind.
    slot_kinds: Vec<SlotKind>,
}

/// A finished recording, kept in a [`TraceCell`].
struct Trace<D: Traceable> {
    runs: Vec<Run<D>>,
    meta: Vec<Meta>,
    ext_t: Vec<D::T>,
    ext_i: Vec<D::I>,
    slots: usize,
    /// Per slot, the last instruction that reads it (its producer where none does).
    last_use: Vec<u32>,
    /// The slots to release after instruction `pc`: `free_list[free_at[pc]..free_at[pc + 1]]`.
    free_list: Vec<u32>,
    free_at: Vec<u32>,
    stats: TraceStats,
    /// The slots of the last replay, all released again, kept for the next: a replay allocates
    /// no slot table (a fresh one of an LSTM's thousands of slots cost a page fault per page).
    spare: Mutex<Vec<Option<Value<D>>>>,
    /// Per slot: its element count and kind (what the compiler lowers by).
    slot_kinds: Vec<SlotKind>,
    /// The trace compiled for the host (`Traced::compiling`), checked against the eager run;
    /// replays run it instead of the recorded calls.
    compiled: Option<adgauge_cpu::compiled::Program>,
}

/// The state of one replay.
struct Frame<'a, D: Traceable> {
    slots: Vec<Option<Value<D>>>,
    ext_t: &'a [D::T],
    ext_i: &'a [D::I],
    last_use: &'a [u32],
    pc: u32,
    /// What the replay read back, where its caller wants it (a timed replay drops each at once).
    readbacks: Option<Vec<Readback>>,
}

fn internal(what: String) -> OpError {
    OpError::Device(format!("traced replay: {what}"))
}

impl<D: Traceable> Frame<'_, D> {
    fn t(&self, a: Arg) -> Result<&D::T> {
        let found = match a {
            Arg::Ext(e) => self.ext_t.get(e as usize),
            Arg::Slot(s) => match self.slots.get(s as usize) {
                Some(Some(Value::T(t))) => Some(t),
                _ => None,
            },
        };
        found.ok_or_else(|| internal(format!("no tensor at {a:?}")))
    }
    fn i(&self, a: Arg) -> Result<&D::I> {
        let found = match a {
            Arg::Ext(e) => self.ext_i.get(e as usize),
            Arg::Slot(s) => match self.slots.get(s as usize) {
                Some(Some(Value::I(i))) => Some(i),
                _ => None,
            },
        };
        found.ok_or_else(|| internal(format!("no index tensor at {a:?}")))
    }
    fn tensors<const N: usize>(&self, args: &[Arg; N]) -> Result<[&D::T; N]> {
        let mut out: [Option<&D::T>; N] = [None; N];
        for (o, &a) in out.iter_mut().zip(args) {
            *o = Some(self.t(a)?);
        }
        Ok(out.map(|o| o.expect("every operand was found above")))
    }
    fn indices<const M: usize>(&self, args: &[Arg; M]) -> Result<[&D::I; M]> {
        let mut out: [Option<&D::I>; M] = [None; M];
        for (o, &a) in out.iter_mut().zip(args) {
            *o = Some(self.i(a)?);
        }
        Ok(out.map(|o| o.expect("every operand was found above")))
    }
    /// The tensor of `a`, moved out of its slot when this instruction is its last reader (so an
    /// in-place op finds it unshared, and a slice of operands costs no clones), cloned otherwise.
    /// An operand read twice by one instruction must be taken at its last reading only.
    fn take_t(&mut self, a: Arg) -> Result<D::T> {
        if let Arg::Slot(s) = a
            && self.last_use[s as usize] == self.pc
            && let Some(Some(Value::T(_))) = self.slots.get(s as usize)
            && let Some(Value::T(t)) = self.slots[s as usize].take()
        {
            return Ok(t);
        }
        self.t(a).cloned()
    }
    /// Whether this instruction is the last reader of `a`'s slot.
    fn dies_here(&self, a: Arg) -> bool {
        matches!(a, Arg::Slot(s) if self.last_use[s as usize] == self.pc)
    }
    fn put(&mut self, slot: u32, v: Value<D>) {
        self.slots[slot as usize] = Some(v);
    }
}

/// A fingerprint of a value's bits (Fx's rotate-xor-multiply per word): it only has to tell
/// a replay's value from the eager run's, not resist an adversary, and SipHash made recording
/// BA's Jacobian a tenth slower.
fn fingerprint(len: usize, words: impl Iterator<Item = u64>) -> u64 {
    words.fold(len as u64, |h, w| (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95))
}

/// The bits a replay is held to: 0 and -0 differ, but every NaN is one NaN, since which NaN an
/// op on two NaNs returns is the machine code's choice of operand order (a vector loop and a
/// scalar one may pick differently).
fn compared_bits(x: f64) -> u64 {
    if x.is_nan() { f64::NAN.to_bits() } else { x.to_bits() }
}

fn hash_f(v: &[f64]) -> u64 {
    fingerprint(v.len(), v.iter().map(|&x| compared_bits(x)))
}

fn hash_i(v: &[i64]) -> u64 {
    fingerprint(v.len(), v.iter().map(|&x| x as u64))
}

/// What a recorded primitive returns: how its values take slots while recording, and how a
/// replay stores them. `T` and `I` mark the inner device's value and index tensors.
trait Produce<D: Traceable>: Sized + 'static {
    /// The traced device's form of the result.
    type Out;
    /// The result outside a recording (no slots).
    fn plain(self) -> Self::Out;
    /// The result inside a recording: slots taken (pushed on `writes`), values hashed.
    fn record(self, rec: &mut Recording<D>, d: &D, writes: &mut Writes) -> Result<Self::Out>;
    /// A replay's result stored in the slots recorded for it (`writes`, consumed from the front).
    fn store(self, fr: &mut Frame<'_, D>, writes: &mut std::slice::Iter<'_, u32>) -> Result<()>;
}

struct T<X>(X);
struct I<X>(X);
/// A host copy of a value tensor.
struct HostF(Vec<f64>);
/// A host copy of an index tensor.
struct HostI(Vec<i64>);

fn next<'a>(writes: &mut std::slice::Iter<'a, u32>) -> Result<u32> {
    writes.next().copied().ok_or_else(|| internal("fewer slots than results".into()))
}

/// A device tensor: one slot, fingerprinted from its host copy while recording.
macro_rules! produce_tensor {
    ($mark:ident, $assoc:ident, $traced:ident, $variant:ident, $read:ident, $hash:ident, $kind:ident) => {
        impl<D: Traceable> Produce<D> for $mark<D::$assoc> {
            type Out = $traced<D>;
            fn plain(self) -> $traced<D> {
                $traced { value: self.0, origin: outside() }
            }
            fn record(self, rec: &mut Recording<D>, d: &D, writes: &mut Writes) -> Result<$traced<D>> {
                let id = rec.new_slot();
                let host = d.$read(&self.0)?;
                rec.slot_kinds[id as usize] = $kind(host.len(), &self.0);
                rec.hashes.insert(id, $hash(&host));
                writes.push(id);
                Ok($traced { value: self.0, origin: Origin::Slot { generation: rec.generation, id } })
            }
            fn store(self, fr: &mut Frame<'_, D>, writes: &mut std::slice::Iter<'_, u32>) -> Result<()> {
                fr.put(next(writes)?, Value::$variant(self.0));
                Ok(())
            }
        }
    };
}

produce_tensor!(T, T, TracedTensor, T, to_vec, hash_f, tensor_kind);
produce_tensor!(I, I, TracedIndex, I, index_to_vec, hash_i, index_kind);

/// A host copy: no slot; the recording keeps it for the checking replay, and a replay keeps it
/// only where its caller asked (`Frame::readbacks`).
macro_rules! produce_host {
    ($host:ident, $elem:ty, $variant:ident) => {
        impl<D: Traceable> Produce<D> for $host {
            type Out = Vec<$elem>;
            fn plain(self) -> Vec<$elem> {
                self.0
            }
            fn record(self, rec: &mut Recording<D>, _d: &D, _writes: &mut Writes) -> Result<Vec<$elem>> {
                rec.readbacks.push(Readback::$variant(self.0.clone()));
                Ok(self.0)
            }
            fn store(self, fr: &mut Frame<'_, D>, _writes: &mut std::slice::Iter<'_, u32>) -> Result<()> {
                if let Some(r) = fr.readbacks.as_mut() {
                    r.push(Readback::$variant(self.0));
                }
                Ok(())
            }
        }
    };
}

produce_host!(HostF, f64, F);
produce_host!(HostI, i64, I);

impl<D: Traceable> Produce<D> for () {
    type Out = ();
    fn plain(self) {}
    fn record(self, _rec: &mut Recording<D>, _d: &D, _writes: &mut Writes) -> Result<()> {
        Ok(())
    }
    fn store(self, _fr: &mut Frame<'_, D>, _writes: &mut std::slice::Iter<'_, u32>) -> Result<()> {
        Ok(())
    }
}

/// An optional result keeps its slot either way; a replay leaves it empty where the eager run
/// had none (the replay takes the same path, so nothing reads it).
impl<D: Traceable, A: Produce<D>> Produce<D> for Option<A> {
    type Out = Option<A::Out>;
    fn plain(self) -> Option<A::Out> {
        self.map(A::plain)
    }
    fn record(self, rec: &mut Recording<D>, d: &D, writes: &mut Writes) -> Result<Option<A::Out>> {
        match self {
            Some(a) => Ok(Some(a.record(rec, d, writes)?)),
            None => {
                writes.push(u32::MAX);
                Ok(None)
            }
        }
    }
    fn store(self, fr: &mut Frame<'_, D>, writes: &mut std::slice::Iter<'_, u32>) -> Result<()> {
        match self {
            Some(a) => a.store(fr, writes),
            None => next(writes).map(drop),
        }
    }
}

impl<D: Traceable, A: Produce<D>> Produce<D> for Vec<A> {
    type Out = Vec<A::Out>;
    fn plain(self) -> Vec<A::Out> {
        self.into_iter().map(A::plain).collect()
    }
    fn record(self, rec: &mut Recording<D>, d: &D, writes: &mut Writes) -> Result<Vec<A::Out>> {
        self.into_iter().map(|a| a.record(rec, d, writes)).collect()
    }
    fn store(self, fr: &mut Frame<'_, D>, writes: &mut std::slice::Iter<'_, u32>) -> Result<()> {
        if writes.len() != self.len() {
            return Err(internal(format!("{} results, {} recorded", self.len(), writes.len())));
        }
        self.into_iter().try_for_each(|a| a.store(fr, writes))
    }
}

macro_rules! produce_tuple {
    ($($a:ident $i:tt),+) => {
        impl<D: Traceable, $($a: Produce<D>),+> Produce<D> for ($($a,)+) {
            type Out = ($($a::Out,)+);
            fn plain(self) -> Self::Out {
                ($(self.$i.plain(),)+)
            }
            fn record(self, rec: &mut Recording<D>, d: &D, writes: &mut Writes) -> Result<Self::Out> {
                Ok(($(self.$i.record(rec, d, writes)?,)+))
            }
            fn store(self, fr: &mut Frame<'_, D>, writes: &mut std::slice::Iter<'_, u32>) -> Result<()> {
                $(self.$i.store(fr, writes)?;)+
                Ok(())
            }
        }
    };
}

produce_tuple!(A 0, B 1);
produce_tuple!(A 0, B 1, C 2);
produce_tuple!(A 0, B 1, C 2, E 3);

impl<D: Traceable> Recording<D> {
    fn new(generation: u64) -> Recording<D> {
        Recording {
            generation,
            runs: Vec::new(),
            meta: Vec::new(),
            slots: 0,
            ext_t: Vec::new(),
            ext_i: Vec::new(),
            ext_of: HashMap::new(),
            hashes: HashMap::new(),
            readbacks: Vec::new(),
            slot_kinds: Vec::new(),
        }
    }
    fn new_slot(&mut self) -> u32 {
        self.slot_kinds.push(SlotKind::Unknown);
        self.slots += 1;
        self.slots - 1
    }
    /// The operand `origin` in this recording: its slot, or its entry in the table of outside
    /// tensors (added on first use; a slot of an older recording is outside too).
    fn arg(&mut self, origin: Origin, value: impl FnOnce() -> Value<D>) -> Arg {
        let key = match origin {
            Origin::Slot { generation, id } if generation == self.generation => return Arg::Slot(id),
            Origin::Slot { .. } => None,
            Origin::Outside(n) => Some(n),
        };
        if let Some(&e) = key.and_then(|k| self.ext_of.get(&k)) {
            return Arg::Ext(e);
        }
        let e = match value() {
            Value::T(t) => {
                self.ext_t.push(t);
                self.ext_t.len() - 1
            }
            Value::I(i) => {
                self.ext_i.push(i);
                self.ext_i.len() - 1
            }
        } as u32;
        if let Some(k) = key {
            self.ext_of.insert(k, e);
        }
        Arg::Ext(e)
    }
    fn arg_t(&mut self, t: &TracedTensor<D>) -> Arg {
        self.arg(t.origin, || Value::T(t.value.clone()))
    }
    fn arg_i(&mut self, i: &TracedIndex<D>) -> Arg {
        self.arg(i.origin, || Value::I(i.value.clone()))
    }
    fn push(&mut self, name: &'static str, sym: Sym, args: &[Arg], writes: &Writes, run: Run<D>) {
        self.meta.push(Meta { name, writes: writes.as_slice().to_vec(), sym, args: args.to_vec() });
        self.runs.push(run);
    }

    fn finish(self) -> (Trace<D>, HashMap<u32, u64>, Vec<Readback>) {
        let slots = self.slots as usize;
        let mut last_use = vec![u32::MAX; slots];
        for (pc, m) in self.meta.iter().enumerate() {
            for &w in m.writes.iter().filter(|&&w| w != u32::MAX) {
                last_use[w as usize] = pc as u32;
            }
            for r in m.reads() {
                last_use[r as usize] = pc as u32;
            }
        }
        let mut order: Vec<u32> = (0..slots as u32).filter(|&s| last_use[s as usize] != u32::MAX).collect();
        order.sort_by_key(|&s| last_use[s as usize]);
        let mut free_at = vec![0u32; self.meta.len() + 1];
        for &s in &order {
            free_at[last_use[s as usize] as usize + 1] += 1;
        }
        for pc in 0..self.meta.len() {
            free_at[pc + 1] += free_at[pc];
        }
        let stats = TraceStats {
            instructions: self.runs.len(),
            slots,
            externals: self.ext_t.len() + self.ext_i.len(),
            verified: 0,
            compiled: None,
        };
        let trace = Trace {
            runs: self.runs,
            meta: self.meta,
            ext_t: self.ext_t,
            ext_i: self.ext_i,
            slots,
            last_use,
            free_list: order,
            free_at,
            stats,
            spare: Mutex::new(Vec::new()),
            slot_kinds: self.slot_kinds,
            compiled: None,
        };
        (trace, self.hashes, self.readbacks)
    }
}

impl<D: Traceable> Traced<D> {
    /// `inner`, traced inside [`Device::run_traced`] bodies and eager everywhere else.
    pub fn new(inner: D) -> Traced<D> {
        Traced {
            inner,
            shared: Arc::new(Shared {
                recording: Mutex::new(None),
                generation: std::sync::atomic::AtomicU64::new(0),
                last: Mutex::new(Ledger::default()),
                calls: std::sync::atomic::AtomicU64::new(0),
                fail_at: std::sync::atomic::AtomicU64::new(u64::MAX),
                compile: false,
            }),
        }
    }

    /// `inner`, traced as by [`Traced::new`], and each new trace compiled into a host program
    /// ([`adgauge_cpu::compiled`]) where every op of it has a compiled form, every value is an
    /// f64 tensor of at most [`adgauge_cpu::compiled::MAX_LEN`] elements and the inner device
    /// computes those ops as the CPU does; the program's read-backs and final values must equal
    /// the eager run's bit for bit before a replay runs it, or the recording fails naming the
    /// difference. A trace that cannot be compiled replays its recorded calls, and the reason
    /// is kept ([`Traced::last_compile_note`]).
    pub fn compiling(inner: D) -> Traced<D> {
        let mut t = Traced::new(inner);
        if let Some(shared) = Arc::get_mut(&mut t.shared) {
            shared.compile = true;
        }
        t
    }

    /// Makes primitive call `at` (counted from zero from now on, by this device and its clones)
    /// fail with an error after the inner device has run it, as a device error would surface;
    /// `None` disarms. Counting restarts either way. `check`'s `faults` check makes every call of
    /// a VJP and a JVP fail in turn: the error must come back as an error, never as a panic or
    /// a value.
    pub fn inject_fault(&self, at: Option<u64>) {
        // Relaxed: a device records one body at a time (module docs), so the count needs no
        // ordering with other memory, and every primitive call pays for it.
        use std::sync::atomic::Ordering::Relaxed;
        self.shared.fail_at.store(at.unwrap_or(u64::MAX), Relaxed);
        self.shared.calls.store(0, Relaxed);
    }

    /// Primitive calls since [`Traced::inject_fault`] last armed or disarmed the device.
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The inner device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The size of the trace recorded last by this device (or a clone), if any.
    pub fn last_trace(&self) -> Option<TraceStats> {
        lock(&self.shared.last).stats
    }

    /// What the eager run of the last recording read back, in order, as numbers (index
    /// read-backs converted).
    pub fn last_eager_readbacks(&self) -> Vec<f64> {
        flatten(&lock(&self.shared.last).readbacks)
    }

    /// Replays the trace in `cell` (recorded by this device) and returns what it read back, as
    /// [`Traced::last_eager_readbacks`] does: `check` holds the two to the same numbers.
    pub fn replay_readbacks(&self, cell: &TraceCell) -> Result<Vec<f64>> {
        let held = lock(cell.slot());
        let trace = held
            .as_ref()
            .and_then(|b| b.downcast_ref::<Trace<D>>())
            .ok_or_else(|| internal("the cell holds no trace of this device".into()))?;
        if let Some(program) = &trace.compiled {
            return Ok(program.run(false).read_backs.concat());
        }
        let (readbacks, _) = self.replay(trace, Keep::ReadBacks)?;
        self.inner.synchronize()?;
        Ok(flatten(&readbacks))
    }

    /// Why the last trace of this compiling device was not compiled ([`Traced::compiling`]);
    /// `None` when it was, or on a device that does not compile.
    pub fn last_compile_note(&self) -> Option<String> {
        lock(&self.shared.last).compile_note.clone()
    }

    /// Checks `program`, lowered from `trace`, against the eager run; the trace keeps it for
    /// its replays.
    fn adopt(
        &self,
        trace: &mut Trace<D>,
        program: adgauge_cpu::compiled::Program,
        hashes: &HashMap<u32, u64>,
        readbacks: &[Readback],
    ) -> Result<()> {
        let producer = |slot: u32| trace.meta.iter().find(|m| m.writes.contains(&slot)).map_or("?", |m| m.name);
        lower::check(&program, producer, hashes, readbacks)?;
        trace.stats.compiled = Some(program.instructions());
        trace.compiled = Some(program);
        Ok(())
    }

    fn recording(&self) -> MutexGuard<'_, Option<Recording<D>>> {
        lock(&self.shared.recording)
    }

    fn is_recording(&self) -> bool {
        self.recording().is_some()
    }

    /// Runs one primitive on the inner device and, inside a recording, records it: `ts` and
    /// `is` are its tensor and index operands, `f` the call (run now, and again at each replay
    /// with the replay's operands).
    fn op<const N: usize, const M: usize, R: Produce<D>>(
        &self,
        name: &'static str,
        ts: [&TracedTensor<D>; N],
        is: [&TracedIndex<D>; M],
        f: impl Fn(&D, [&D::T; N], [&D::I; M]) -> Result<R> + Send + Sync + 'static,
    ) -> Result<R::Out> {
        self.op_sym(name, Sym::Opaque, ts, is, f)
    }

    /// [`Traced::op`] for an op the compiler knows as `sym`.
    fn op_sym<const N: usize, const M: usize, R: Produce<D>>(
        &self,
        name: &'static str,
        sym: Sym,
        ts: [&TracedTensor<D>; N],
        is: [&TracedIndex<D>; M],
        f: impl Fn(&D, [&D::T; N], [&D::I; M]) -> Result<R> + Send + Sync + 'static,
    ) -> Result<R::Out> {
        let r = f(&self.inner, ts.map(|t| &t.value), is.map(|i| &i.value))?;
        self.record(name, sym, ts, is, r, move |targs, iargs, slots| {
            Box::new(move |d, fr| {
                let r = f(d, fr.tensors(&targs)?, fr.indices(&iargs)?)?;
                r.store(fr, &mut slots.as_slice().iter())
            })
        })
    }

    /// Records `r`, the result of a primitive already run on `ts` and `is`, inside a
    /// recording (else returns it): `replay` builds the instruction from the operands' places
    /// and the result's slots.
    fn record<const N: usize, const M: usize, R: Produce<D>>(
        &self,
        name: &'static str,
        sym: Sym,
        ts: [&TracedTensor<D>; N],
        is: [&TracedIndex<D>; M],
        r: R,
        replay: impl FnOnce([Arg; N], [Arg; M], Writes) -> Run<D>,
    ) -> Result<R::Out> {
        let call = self.shared.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if call == self.shared.fail_at.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(OpError::Device(format!("injected fault: primitive call {call} ({name}) failed")));
        }
        let mut guard = self.recording();
        let Some(rec) = guard.as_mut() else { return Ok(r.plain()) };
        let targs = ts.map(|t| rec.arg_t(t));
        let iargs = is.map(|i| rec.arg_i(i));
        let mut writes = Writes::default();
        let out = r.record(rec, &self.inner, &mut writes)?;
        let args: Vec<Arg> = targs.iter().chain(&iargs).copied().collect();
        let run = replay(targs, iargs, writes.clone());
        rec.push(name, sym, &args, &writes, run);
        Ok(out)
    }

    /// Replays `trace`. What it reads back is returned under `Keep::ReadBacks` and `Keep::All`;
    /// under `Keep::All` the final values (slots no later instruction reads) are also kept and
    /// returned by slot instead of released.
    fn replay(&self, trace: &Trace<D>, keep: Keep) -> Result<(Vec<Readback>, Kept<D>)> {
        let mut slots = std::mem::take(&mut *lock(&trace.spare));
        slots.clear();
        slots.resize_with(trace.slots, || None);
        let mut fr = Frame {
            slots,
            ext_t: &trace.ext_t,
            ext_i: &trace.ext_i,
            last_use: &trace.last_use,
            pc: 0,
            readbacks: (keep != Keep::Nothing).then(Vec::new),
        };
        let keep_finals = keep == Keep::All;
        let mut kept = Vec::new();
        for (pc, run) in trace.runs.iter().enumerate() {
            fr.pc = pc as u32;
            run(&self.inner, &mut fr).map_err(|e| match e {
                OpError::Device(m) => {
                    OpError::Device(format!("{m} (replaying {}, instruction {pc})", trace.meta[pc].name))
                }
                other => other,
            })?;
            let frees = &trace.free_list[trace.free_at[pc] as usize..trace.free_at[pc + 1] as usize];
            for &s in frees {
                let v = fr.slots[s as usize].take();
                if keep_finals
                    && trace.meta[pc].writes.contains(&s)
                    && let Some(v) = v
                {
                    kept.push((s, v));
                }
            }
        }
        // Every slot was released after its last reader (an early return above drops the
        // table instead).
        *lock(&trace.spare) = fr.slots;
        Ok((fr.readbacks.unwrap_or_default(), kept))
    }

    /// The checking replay: its read-backs and final values against the eager run's.
    fn verify(&self, trace: &mut Trace<D>, hashes: &HashMap<u32, u64>, readbacks: &[Readback]) -> Result<()> {
        let (got, kept) = self.replay(trace, Keep::All)?;
        self.inner.synchronize()?;
        let differs = |what: String| OpError::Device(format!("traced replay differs from the eager run: {what}"));
        if got.len() != readbacks.len() {
            return Err(differs(format!("{} read-backs, eager {}", got.len(), readbacks.len())));
        }
        if let Some(i) = got.iter().zip(readbacks).position(|(a, b)| a != b) {
            return Err(differs(format!("read-back {i}")));
        }
        for (slot, v) in &kept {
            let h = match v {
                Value::T(t) => hash_f(&self.inner.to_vec(t)?),
                Value::I(i) => hash_i(&self.inner.index_to_vec(i)?),
            };
            if hashes.get(slot) != Some(&h) {
                let producer = trace.meta.iter().find(|m| m.writes.contains(slot)).map_or("?", |m| m.name);
                return Err(differs(format!("the result of {producer} (slot {slot})")));
            }
        }
        trace.stats.verified = got.len() + kept.len();
        Ok(())
    }
}

fn flatten(readbacks: &[Readback]) -> Vec<f64> {
    let mut out = Vec::new();
    for r in readbacks {
        match r {
            Readback::F(v) => out.extend_from_slice(v),
            Readback::I(v) => out.extend(v.iter().map(|&i| i as f64)),
        }
    }
    out
}

/// Ends the recording when dropped: armed around a body, forgotten after it returns.
struct EndsRecording<'a, D: Traceable>(&'a Traced<D>);

impl<D: Traceable> Drop for EndsRecording<'_, D> {
    fn drop(&mut self) {
        self.0.recording().take();
    }
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type TT<D> = TracedTensor<D>;
type TI<D> = TracedIndex<D>;

impl<D: Traceable> Traced<D> {
    /// Records an op whose operands are a slice of tensors (`stack`).
    fn op_slice<R: Produce<D>>(
        &self,
        name: &'static str,
        sym: Sym,
        parts: &[TT<D>],
        f: impl Fn(&D, &[D::T]) -> Result<R> + Send + Sync + 'static,
    ) -> Result<R::Out> {
        let values: Vec<D::T> = parts.iter().map(|p| p.value.clone()).collect();
        let r = f(&self.inner, &values)?;
        let mut guard = self.recording();
        let Some(rec) = guard.as_mut() else { return Ok(r.plain()) };
        let args: Vec<Arg> = parts.iter().map(|p| rec.arg_t(p)).collect();
        let mut writes = Writes::default();
        let out = r.record(rec, &self.inner, &mut writes)?;
        let slots = writes.clone();
        if args.iter().all(|a| matches!(a, Arg::Ext(_))) {
            // Every part made outside the body (an LSTM's target rows): the list is fixed, so
            // the one built for the eager call is kept rather than cloned part by part at each
            // replay.
            let run: Run<D> = Box::new(move |d, fr| f(d, &values)?.store(fr, &mut slots.as_slice().iter()));
            rec.push(name, sym, &args, &writes, run);
            return Ok(out);
        }
        // Each operand's last occurrence in the list may be moved out of its slot; earlier ones
        // are cloned.
        let operands: Vec<(Arg, bool)> = args
            .iter()
            .enumerate()
            .map(|(k, &a)| {
                (a, !args[k + 1..].iter().any(|b| matches!((a, b), (Arg::Slot(x), Arg::Slot(y)) if x == *y)))
            })
            .collect();
        let run: Run<D> = Box::new(move |d, fr| {
            let values = operands
                .iter()
                .map(|&(a, last)| if last { fr.take_t(a) } else { fr.t(a).cloned() })
                .collect::<Result<Vec<_>>>()?;
            f(d, &values)?.store(fr, &mut slots.as_slice().iter())
        });
        rec.push(name, sym, &args, &writes, run);
        Ok(out)
    }
}

impl<D: Traceable> TensorOps for Traced<D> {
    type T = TT<D>;
    type I = TI<D>;

    fn engine_name(&self) -> String {
        format!("traced({})", self.inner.engine_name())
    }
    fn carries_derivatives(&self) -> bool {
        self.inner.carries_derivatives()
    }
    /// Outside a recording an upload copies nothing more than the inner device does; inside,
    /// the recording keeps a copy of the host data to upload again at each replay.
    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<TT<D>> {
        if !self.is_recording() {
            return Ok(T(self.inner.tensor(data, shape, dtype)?).plain());
        }
        let (data, shape) = (data.to_vec(), shape.to_vec());
        let sym = Sym::Tensor(data.clone().into());
        self.op_sym("tensor", sym, [], [], move |d, [], []| d.tensor(&data, &shape, dtype).map(T))
    }
    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<TT<D>> {
        let shape = shape.to_vec();
        self.op_sym("full", Sym::Full(value), [], [], move |d, [], []| d.full(&shape, value, dtype).map(T))
    }
    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<TI<D>> {
        if !self.is_recording() {
            return Ok(I(self.inner.index_as(data, dtype)?).plain());
        }
        let data = data.to_vec();
        let sym = Sym::Index(data.clone().into());
        self.op_sym("index", sym, [], [], move |d, [], []| d.index_as(&data, dtype).map(I))
    }
    fn to_vec(&self, t: &TT<D>) -> Result<Vec<f64>> {
        self.op_sym("to_vec", Sym::ToVec, [t], [], |d, [t], []| d.to_vec(t).map(HostF))
    }
    fn index_to_vec(&self, i: &TI<D>) -> Result<Vec<i64>> {
        self.op("index_to_vec", [], [i], |d, [], [i]| d.index_to_vec(i).map(HostI))
    }
    fn reshape(&self, t: &TT<D>, shape: &[usize]) -> Result<TT<D>> {
        let shape = shape.to_vec();
        self.op_sym("reshape", Sym::Reshape, [t], [], move |d, [t], []| d.reshape(t, &shape).map(T))
    }
}

impl<D: Traceable> ElementwiseOps for Traced<D> {
    /// A replay gives the operand up at its last reader ([`ElementwiseOps::unary_donated`]):
    /// the inner device may write the result into its buffer.
    fn unary(&self, op: UnaryOp, x: &TT<D>) -> Result<TT<D>> {
        let r = T(self.inner.unary(op, &x.value)?);
        self.record("unary", Sym::Unary(op), [x], [], r, move |[x], [], slots| {
            Box::new(move |d, fr| {
                let y = if fr.dies_here(x) { d.unary_donated(op, fr.take_t(x)?)? } else { d.unary(op, fr.t(x)?)? };
                T(y).store(fr, &mut slots.as_slice().iter())
            })
        })
    }
    /// A replay gives up an operand at its last reader, the left one first
    /// ([`ElementwiseOps::binary_donated`]); an operand read twice is not given up.
    fn binary(&self, op: BinaryOp, a: &TT<D>, b: &TT<D>) -> Result<TT<D>> {
        let r = T(self.inner.binary(op, &a.value, &b.value)?);
        self.record("binary", Sym::Binary(op), [a, b], [], r, move |[a, b], [], slots| {
            let twice = matches!((a, b), (Arg::Slot(x), Arg::Slot(y)) if x == y);
            Box::new(move |d, fr| {
                let y = if !twice && fr.dies_here(a) {
                    let donor = fr.take_t(a)?;
                    d.binary_donated(op, donor, fr.t(b)?, true)?
                } else if !twice && fr.dies_here(b) {
                    let donor = fr.take_t(b)?;
                    d.binary_donated(op, donor, fr.t(a)?, false)?
                } else {
                    d.binary(op, fr.t(a)?, fr.t(b)?)?
                };
                T(y).store(fr, &mut slots.as_slice().iter())
            })
        })
    }
    fn select(&self, mask: &TT<D>, a: &TT<D>, b: &TT<D>) -> Result<TT<D>> {
        self.op_sym("select", Sym::Select, [mask, a, b], [], |d, [m, a, b], []| d.select(m, a, b).map(T))
    }
    fn index_eq(&self, i: &TI<D>, value: i64, dtype: DType) -> Result<TT<D>> {
        self.op_sym("index_eq", Sym::IndexEq(value), [], [i], move |d, [], [i]| d.index_eq(i, value, dtype).map(T))
    }
    fn combine(&self, op: HistOp, a: &TT<D>, b: &TT<D>) -> Result<TT<D>> {
        self.op("combine", [a, b], [], move |d, [a, b], []| d.combine(op, a, b).map(T))
    }
    fn combine_partial(&self, op: HistOp, side: Operand, a: &TT<D>, b: &TT<D>) -> Result<TT<D>> {
        self.op("combine_partial", [a, b], [], move |d, [a, b], []| d.combine_partial(op, side, a, b).map(T))
    }
    /// The inner device's `accumulate`, which may add in place: a replay moves the running sum
    /// out of its slot at its last reader, so the inner device finds it unshared as the eager
    /// run did.
    fn accumulate(&self, acc: TT<D>, c: &TT<D>) -> Result<TT<D>> {
        let args = self.recording().as_mut().map(|rec| (rec.arg_t(&acc), rec.arg_t(c)));
        let r = T(self.inner.accumulate(acc.value, &c.value)?);
        let mut guard = self.recording();
        let (Some(rec), Some((acc_arg, c_arg))) = (guard.as_mut(), args) else { return Ok(r.plain()) };
        let mut writes = Writes::default();
        let out = r.record(rec, &self.inner, &mut writes)?;
        let slots = writes.clone();
        // The running sum is moved out of its slot (its last reader is this call), then the
        // contribution read in place; the sum of a value with itself takes a copy instead.
        let same = matches!((acc_arg, c_arg), (Arg::Slot(x), Arg::Slot(y)) if x == y);
        let run: Run<D> = Box::new(move |d, fr| {
            let acc = if same { fr.t(acc_arg)?.clone() } else { fr.take_t(acc_arg)? };
            let y = d.accumulate(acc, fr.t(c_arg)?)?;
            T(y).store(fr, &mut slots.as_slice().iter())
        });
        // The CPU adds `acc + c` in place or, where it cannot, by `binary`: the same sum.
        rec.push("accumulate", Sym::Binary(BinaryOp::Add), &[acc_arg, c_arg], &writes, run);
        Ok(out)
    }
}

impl<D: Traceable> ReduceOps for Traced<D> {
    fn reduce(&self, op: HistOp, x: &TT<D>) -> Result<TT<D>> {
        self.op_sym("reduce", Sym::Reduce(op), [x], [], move |d, [x], []| d.reduce(op, x).map(T))
    }
}

impl<D: Traceable> IndexOps for Traced<D> {
    fn gather(&self, src: &TT<D>, idx: &TI<D>, oob: OutOfRange) -> Result<TT<D>> {
        self.op_sym("gather", Sym::Gather(oob), [src], [idx], move |d, [s], [i]| d.gather(s, i, oob).map(T))
    }
    fn scatter(&self, dest: &TT<D>, idx: &TI<D>, vals: &TT<D>) -> Result<TT<D>> {
        self.op_sym("scatter", Sym::Scatter, [dest, vals], [idx], |d, [dest, v], [i]| d.scatter(dest, i, v).map(T))
    }
    fn sort_by_key(&self, keys: &TI<D>, num_keys: usize) -> Result<TI<D>> {
        self.op("sort_by_key", [], [keys], move |d, [], [k]| d.sort_by_key(k, num_keys).map(I))
    }
    fn sort_by_key_ranked(&self, keys: &TI<D>, num_keys: usize) -> Result<(TI<D>, TI<D>)> {
        self.op("sort_by_key_ranked", [], [keys], move |d, [], [k]| {
            d.sort_by_key_ranked(k, num_keys).map(|(a, b)| (I(a), I(b)))
        })
    }
    fn gather_index(&self, src: &TI<D>, idx: &TI<D>) -> Result<TI<D>> {
        self.op("gather_index", [], [src, idx], |d, [], [s, i]| d.gather_index(s, i).map(I))
    }
    fn stack(&self, parts: &[TT<D>]) -> Result<TT<D>> {
        self.op_slice("stack", Sym::Stack, parts, |d, parts| d.stack(parts).map(T))
    }
    fn unstack(&self, x: &TT<D>) -> Result<Vec<TT<D>>> {
        self.op_sym("unstack", Sym::Unstack, [x], [], |d, [x], []| {
            Ok(d.unstack(x)?.into_iter().map(T).collect::<Vec<_>>())
        })
    }
}

impl<D: Traceable> HistOps for Traced<D> {
    fn auto_hist_rule(&self, op: HistOp, n: usize, k: usize) -> Option<crate::HistRule> {
        self.inner.auto_hist_rule(op, n, k)
    }
    fn reduce_by_index(&self, dest: &TT<D>, op: HistOp, inds: &TI<D>, vals: &TT<D>) -> Result<TT<D>> {
        self.op("reduce_by_index", [dest, vals], [inds], move |d, [dest, v], [i]| {
            d.reduce_by_index(dest, op, i, v).map(T)
        })
    }
    fn arg_reduce_by_index(&self, dest: &TT<D>, ext: Extremum, inds: &TI<D>, vals: &TT<D>) -> Result<(TT<D>, TI<D>)> {
        self.op_sym("arg_reduce_by_index", Sym::ArgReduce(ext), [dest, vals], [inds], move |d, [dest, v], [i]| {
            d.arg_reduce_by_index(dest, ext, i, v).map(|(v, p)| (T(v), I(p)))
        })
    }
    fn prod_nonzero_by_index(&self, inds: &TI<D>, vals: &TT<D>, k: usize) -> Result<(TT<D>, TI<D>, TI<D>)> {
        self.op("prod_nonzero_by_index", [vals], [inds], move |d, [v], [i]| {
            d.prod_nonzero_by_index(i, v, k).map(|(p, z, m)| (T(p), I(z), I(m)))
        })
    }
    fn prod_vals_adjoint(&self, inds: &TI<D>, vals: &TT<D>, c0: &TT<D>, c1: &TT<D>, c2: &TT<D>) -> Result<TT<D>> {
        self.op("prod_vals_adjoint", [vals, c0, c1, c2], [inds], |d, [v, c0, c1, c2], [i]| {
            d.prod_vals_adjoint(i, v, c0, c1, c2).map(T)
        })
    }
    fn relative_inputs(
        &self,
        kind: crate::Relative,
        dest: &TT<D>,
        inds: &TI<D>,
        vals: &TT<D>,
    ) -> Result<Option<(TT<D>, TT<D>, TT<D>)>> {
        self.op("relative_inputs", [dest, vals], [inds], move |d, [dest, v], [i]| {
            d.relative_inputs(kind, dest, i, v).map(|fused| fused.map(|(a, r, w)| (T(a), T(r), T(w))))
        })
    }
    fn relative_reduce_by_index_dual(
        &self,
        kind: crate::Relative,
        dest: &TT<D>,
        dest_dot: &TT<D>,
        op: HistOp,
        inds: &TI<D>,
        vals: &TT<D>,
        vals_dot: &TT<D>,
    ) -> Result<Option<(TT<D>, TT<D>)>> {
        self.op(
            "relative_reduce_by_index_dual",
            [dest, dest_dot, vals, vals_dot],
            [inds],
            move |d, [dest, dd, v, vd], [i]| {
                d.relative_reduce_by_index_dual(kind, dest, dd, op, i, v, vd)
                    .map(|fused| fused.map(|(h, hd)| (T(h), T(hd))))
            },
        )
    }
}

impl<D: Traceable> ScanOps for Traced<D> {
    fn scan(&self, op: HistOp, x: &TT<D>, spec: ScanSpec, segments: Option<&TI<D>>) -> Result<TT<D>> {
        match segments {
            Some(s) => self.op("scan", [x], [s], move |d, [x], [s]| d.scan(op, x, spec, Some(s)).map(T)),
            None => self.op("scan", [x], [], move |d, [x], []| d.scan(op, x, spec, None).map(T)),
        }
    }
    fn linear_recurrence(&self, a: &TT<D>, b: &TT<D>, spec: ScanSpec, segments: Option<&TI<D>>) -> Result<TT<D>> {
        match segments {
            Some(s) => self.op("linear_recurrence", [a, b], [s], move |d, [a, b], [s]| {
                d.linear_recurrence(a, b, spec, Some(s)).map(T)
            }),
            None => self
                .op("linear_recurrence", [a, b], [], move |d, [a, b], []| d.linear_recurrence(a, b, spec, None).map(T)),
        }
    }
}

impl<D: Traceable> DenseOps for Traced<D> {
    fn broadcast_to(&self, x: &TT<D>, shape: &[usize]) -> Result<TT<D>> {
        let sym = Sym::BroadcastTo(x.shape().into(), shape.into());
        let shape = shape.to_vec();
        self.op_sym("broadcast_to", sym, [x], [], move |d, [x], []| d.broadcast_to(x, &shape).map(T))
    }
    fn sum_to(&self, x: &TT<D>, shape: &[usize]) -> Result<TT<D>> {
        let sym = Sym::SumTo(x.shape().into(), shape.into());
        let shape = shape.to_vec();
        self.op_sym("sum_to", sym, [x], [], move |d, [x], []| d.sum_to(x, &shape).map(T))
    }
    fn matmul(&self, a: &TT<D>, ta: bool, b: &TT<D>, tb: bool) -> Result<TT<D>> {
        let sym = Sym::Matmul(a.shape().into(), ta, b.shape().into(), tb);
        self.op_sym("matmul", sym, [a, b], [], move |d, [a, b], []| d.matmul(a, ta, b, tb).map(T))
    }
    fn arg_reduce_axis(&self, ext: Extremum, x: &TT<D>, axis: usize) -> Result<(TT<D>, TI<D>)> {
        self.op("arg_reduce_axis", [x], [], move |d, [x], []| {
            d.arg_reduce_axis(ext, x, axis).map(|(v, i)| (T(v), I(i)))
        })
    }
    fn sq_dist(&self, a: &TT<D>, c: &TT<D>) -> Result<TT<D>> {
        self.op("sq_dist", [a, c], [], |d, [a, c], []| d.sq_dist(a, c).map(T))
    }
    fn sum_sq_diff(&self, a: &TT<D>, c: &TT<D>) -> Result<TT<D>> {
        self.op("sum_sq_diff", [a, c], [], |d, [a, c], []| d.sum_sq_diff(a, c).map(T))
    }
    fn logsumexp_axis(&self, x: &TT<D>, axis: usize) -> Result<TT<D>> {
        self.op("logsumexp_axis", [x], [], move |d, [x], []| d.logsumexp_axis(x, axis).map(T))
    }
    fn lstm_cell(&self, x: &TT<D>, state: &TT<D>, params: &TT<D>) -> Result<TT<D>> {
        self.op("lstm_cell", [x, state, params], [], |d, [x, s, p], []| d.lstm_cell(x, s, p).map(T))
    }
}

type Triple<D> = (TT<D>, TT<D>, TT<D>);

impl<D: Traceable> RuleKernels for Traced<D> {
    fn unary_adjoint(&self, op: UnaryOp, x: &TT<D>, y: &TT<D>, g: &TT<D>) -> Result<Option<TT<D>>> {
        self.op_sym("unary_adjoint", Sym::UnaryAdjoint(op), [x, y, g], [], move |d, [x, y, g], []| {
            Ok(d.unary_adjoint(op, x, y, g)?.map(T))
        })
    }
    fn logsumexp_adjoint(&self, x: &TT<D>, y: &TT<D>, g: &TT<D>, axis: usize) -> Result<TT<D>> {
        self.op("logsumexp_adjoint", [x, y, g], [], move |d, [x, y, g], []| d.logsumexp_adjoint(x, y, g, axis).map(T))
    }
    fn gather_adjoint(&self, src: &TT<D>, idx: &TI<D>, g: &TT<D>) -> Result<TT<D>> {
        self.op_sym("gather_adjoint", Sym::GatherAdjoint, [src, g], [idx], |d, [src, g], [i]| {
            d.gather_adjoint(src, i, g).map(T)
        })
    }
    fn sum_sq_diff_adjoint(&self, a: &TT<D>, c: &TT<D>, g: &TT<D>) -> Result<TT<D>> {
        self.op("sum_sq_diff_adjoint", [a, c, g], [], |d, [a, c, g], []| d.sum_sq_diff_adjoint(a, c, g).map(T))
    }
    fn lstm_cell_vjp(&self, x: &TT<D>, state: &TT<D>, params: &TT<D>, g: &TT<D>) -> Result<Triple<D>> {
        self.op("lstm_cell_vjp", [x, state, params, g], [], |d, [x, s, p, g], []| {
            d.lstm_cell_vjp(x, s, p, g).map(|(a, b, c)| (T(a), T(b), T(c)))
        })
    }
    fn lstm_cell_gates(&self, x: &TT<D>, state: &TT<D>, params: &TT<D>) -> Result<(TT<D>, Option<TT<D>>)> {
        self.op("lstm_cell_gates", [x, state, params], [], |d, [x, s, p], []| {
            d.lstm_cell_gates(x, s, p).map(|(y, gates)| (T(y), gates.map(T)))
        })
    }
    fn lstm_cell_vjp_saved(
        &self,
        x: &TT<D>,
        state: &TT<D>,
        params: &TT<D>,
        gates: &TT<D>,
        g: &TT<D>,
    ) -> Result<Triple<D>> {
        self.op("lstm_cell_vjp_saved", [x, state, params, gates, g], [], |d, [x, s, p, gates, g], []| {
            d.lstm_cell_vjp_saved(x, s, p, gates, g).map(|(a, b, c)| (T(a), T(b), T(c)))
        })
    }
    fn lstm_cell_jvp_saved(
        &self,
        x: &TT<D>,
        state: &TT<D>,
        params: &TT<D>,
        gates: &TT<D>,
        dx: &TT<D>,
        dstate: &TT<D>,
        dparams: &TT<D>,
    ) -> Result<TT<D>> {
        let args = [x, state, params, gates, dx, dstate, dparams];
        self.op("lstm_cell_jvp_saved", args, [], |d, [x, s, p, gates, dx, ds, dp], []| {
            d.lstm_cell_jvp_saved(x, s, p, gates, dx, ds, dp).map(T)
        })
    }
    fn lstm_cell_jvp(
        &self,
        x: &TT<D>,
        state: &TT<D>,
        params: &TT<D>,
        dx: &TT<D>,
        dstate: &TT<D>,
        dparams: &TT<D>,
    ) -> Result<TT<D>> {
        self.op("lstm_cell_jvp", [x, state, params, dx, dstate, dparams], [], |d, [x, s, p, dx, ds, dp], []| {
            d.lstm_cell_jvp(x, s, p, dx, ds, dp).map(T)
        })
    }
    fn fold_adjoint(&self, op: HistOp, l: &TT<D>, a: &TT<D>, r: &TT<D>, g: &TT<D>) -> Result<TT<D>> {
        self.op("fold_adjoint", [l, a, r, g], [], move |d, [l, a, r, g], []| d.fold_adjoint(op, l, a, r, g).map(T))
    }
    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &TI<D>,
        vals: &TT<D>,
        hist: &TT<D>,
        hist_bar: &TT<D>,
    ) -> Result<TT<D>> {
        self.op("total_form_adjoint", [vals, hist, hist_bar], [inds], move |d, [v, h, hb], [i]| {
            d.total_form_adjoint(op, i, v, h, hb).map(T)
        })
    }
    fn sorted_vals_adjoint(
        &self,
        op: HistOp,
        inds: &TI<D>,
        vals: &TT<D>,
        dest: &TT<D>,
        hist_bar: &TT<D>,
    ) -> Result<TT<D>> {
        self.op("sorted_vals_adjoint", [vals, dest, hist_bar], [inds], move |d, [v, dest, hb], [i]| {
            d.sorted_vals_adjoint(op, i, v, dest, hb).map(T)
        })
    }
    fn reduce_by_index_dual(
        &self,
        dest: &TT<D>,
        dest_dot: &TT<D>,
        op: HistOp,
        inds: &TI<D>,
        vals: &TT<D>,
        vals_dot: &TT<D>,
    ) -> Result<(TT<D>, TT<D>)> {
        self.op("reduce_by_index_dual", [dest, dest_dot, vals, vals_dot], [inds], move |d, [dd, ddot, v, vdot], [i]| {
            d.reduce_by_index_dual(dd, ddot, op, i, v, vdot).map(|(h, hd)| (T(h), T(hd)))
        })
    }
    fn reduce_by_index_chunked(
        &self,
        dest: &TT<D>,
        op: HistOp,
        inds: &TI<D>,
        vals: &TT<D>,
    ) -> Result<ChunkedHist<TT<D>>> {
        let (hist, elements, chunk_prefix, chunk_suffix) =
            self.op("reduce_by_index_chunked", [dest, vals], [inds], move |d, [dest, v], [i]| {
                let c = d.reduce_by_index_chunked(dest, op, i, v)?;
                Ok((T(c.hist), T(c.elements), T(c.chunk_prefix), T(c.chunk_suffix)))
            })?;
        Ok(ChunkedHist { hist, elements, chunk_prefix, chunk_suffix })
    }
    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &TI<D>,
        vals: &TT<D>,
        chunk_prefix: &TT<D>,
        chunk_suffix: &TT<D>,
        hist_bar: &TT<D>,
    ) -> Result<TT<D>> {
        self.op(
            "chunked_vals_adjoint",
            [vals, chunk_prefix, chunk_suffix, hist_bar],
            [inds],
            move |d, [v, p, s, hb], [i]| d.chunked_vals_adjoint(op, i, v, p, s, hb).map(T),
        )
    }
}

impl<D: Traceable> Device for Traced<D> {
    fn device_name(&self) -> String {
        format!("{}, traced", self.inner.device_name())
    }
    fn threads(&self) -> usize {
        self.inner.threads()
    }
    /// Inside a recording, a synchronisation is an instruction too (a replay waits where the
    /// body waited).
    fn synchronize(&self) -> Result<()> {
        self.op("synchronize", [], [], |d, [], []| d.synchronize())
    }
    fn trim_cache(&self) {
        self.inner.trim_cache()
    }
    /// The inner device's compile time plus the time spent recording: the one-time cost a
    /// replay saves afterwards, as `jax.jit`'s first call is its tracing and compiling.
    fn kernel_compile_time(&self) -> Option<std::time::Duration> {
        Some(self.inner.kernel_compile_time().unwrap_or_default() + lock(&self.shared.last).recording_time)
    }
    fn transfers(&self) -> Option<crate::device::Transfers> {
        self.inner.transfers()
    }
    fn device_memory(&self) -> Option<crate::device::DeviceMemory> {
        self.inner.device_memory()
    }
    fn reset_peak_device_memory(&self) {
        self.inner.reset_peak_device_memory()
    }

    /// Replays the cell's trace, or records one: the body runs eagerly while every primitive it
    /// reaches is recorded, then the trace is replayed once and checked against the eager run
    /// (module docs). A body that fails leaves the cell empty. A body run inside another
    /// recording is part of that one.
    fn run_traced<E: From<OpError>>(
        &self,
        cell: &TraceCell,
        body: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut held = lock(cell.slot());
        if let Some(trace) = held.as_ref().and_then(|b| b.downcast_ref::<Trace<D>>()) {
            match &trace.compiled {
                Some(program) => program.run_timed(),
                None => drop(self.replay(trace, Keep::Nothing)?),
            }
            return Ok(());
        }
        let started = std::time::Instant::now();
        {
            let mut rec = self.recording();
            if rec.is_some() {
                drop(rec);
                return body();
            }
            let generation = self.shared.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            *rec = Some(Recording::new(generation));
        }
        // A body that panics (the pipeline catches panics per case and goes on with the same
        // device) must not leave the device recording: every later op would be appended to the
        // orphaned recording and no later call could record its own.
        let ending = EndsRecording(self);
        let result = body();
        std::mem::forget(ending);
        let rec = self.recording().take();
        result?;
        let rec = rec.ok_or_else(|| internal("the recording vanished".into()))?;
        self.inner.synchronize()?;
        let (mut trace, hashes, readbacks) = rec.finish();
        self.verify(&mut trace, &hashes, &readbacks)?;
        // A trace the compiler does not take replays its calls (the note says why); a program
        // that differs from the eager run is an error, as a replay that differs is.
        let compile_note = if self.shared.compile {
            match lower::lower(&self.inner, &trace) {
                Ok(program) => {
                    self.adopt(&mut trace, program, &hashes, &readbacks)?;
                    None
                }
                Err(e) => Some(e),
            }
        } else {
            None
        };
        let mut last = lock(&self.shared.last);
        last.compile_note = compile_note.map(|e| match e {
            OpError::Unsupported(why) => why,
            other => other.to_string(),
        });
        last.stats = Some(trace.stats);
        last.readbacks = readbacks;
        last.recording_time += started.elapsed();
        drop(last);
        *held = Some(Box::new(trace) as Box<dyn Any + Send>);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cpu, CpuStaged, Forward, Reverse};

    fn ramp(n: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0).collect()
    }

    fn cpu() -> Cpu {
        Cpu::new(Some(2)).unwrap()
    }

    /// The gradient of f(x) = sum(sin(x) * x * x) by reverse mode, read back inside the body:
    /// the accumulation of x's two contributions, a reduction, unary and binary ops.
    fn gradient<D: Device>(d: &D, x: &D::T) -> Result<Vec<f64>> {
        let r = Reverse::new(d.clone());
        let xv = r.var(x.clone());
        let y = r.sum(&r.mul(&r.mul(&r.unary(UnaryOp::Sin, &xv)?, &xv)?, &xv)?)?;
        let g = r.backward(&y, d.full(&[1], 1.0, x.dtype())?)?;
        d.to_vec(g.get(&xv).expect("x is a variable"))
    }

    /// [`gradient`] of `x` as the body of `cell`, called three times (recorded, then replayed):
    /// what the eager run read back.
    fn recorded_gradient<D: Traceable>(d: &Traced<D>, x: &TT<D>, cell: &TraceCell) -> Vec<f64> {
        let mut eager = Vec::new();
        for _ in 0..3 {
            d.run_traced(cell, &mut || -> Result<()> {
                eager = gradient(d, x)?;
                Ok(())
            })
            .unwrap();
        }
        eager
    }

    fn trace_of<D: Traceable>(cell: &TraceCell) -> MutexGuard<'_, Option<Box<dyn Any + Send>>> {
        let held = lock(cell.slot());
        assert!(held.as_ref().is_some_and(|b| b.is::<Trace<D>>()), "the cell holds a trace of this device");
        held
    }

    #[test]
    fn a_reverse_gradient_is_recorded_once_and_replayed_to_the_same_bits() {
        let d = Traced::new(cpu());
        let data = ramp(1000);
        let x = d.tensor(&data, &[1000], DType::F64).unwrap();
        let cell = TraceCell::default();
        let mut eager = Vec::new();
        let mut calls = 0;
        for _ in 0..3 {
            d.run_traced(&cell, &mut || -> Result<()> {
                calls += 1;
                eager = gradient(&d, &x)?;
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(calls, 1, "the body runs once; later calls replay");
        let recording = d.kernel_compile_time().unwrap();
        assert!(recording > std::time::Duration::ZERO);
        d.run_traced(&cell, &mut || -> Result<()> { unreachable!("a replay runs no body") }).unwrap();
        assert_eq!(d.kernel_compile_time().unwrap(), recording, "a replay records nothing");
        // d/dx sin(x) x^2 = cos(x) x^2 + 2 x sin(x), written out.
        for (g, x) in eager.iter().zip(&data) {
            assert!((g - (x.cos() * x * x + 2.0 * x * x.sin())).abs() < 1e-12, "{g} at {x}");
        }
        let stats = d.last_trace().unwrap();
        assert_eq!(stats.externals, 1, "x, made outside the body, is held once: {stats:?}");
        assert!(stats.instructions >= 8, "{stats:?}");
        assert!(stats.verified >= 1, "{stats:?}");
        let held = trace_of::<Cpu>(&cell);
        let trace = held.as_ref().unwrap().downcast_ref::<Trace<Cpu>>().unwrap();
        let (readbacks, _) = d.replay(trace, Keep::ReadBacks).unwrap();
        assert!(d.replay(trace, Keep::Nothing).unwrap().0.is_empty(), "a timed replay keeps nothing");
        assert_eq!(readbacks, vec![Readback::F(eager.clone())]);
        drop(held);
        assert_eq!(d.last_eager_readbacks(), eager);
        assert_eq!(d.replay_readbacks(&cell).unwrap(), eager);
    }

    /// A compiling device runs small f64 traces as host programs that repeat the eager run;
    /// others keep their recorded calls and say why.
    #[test]
    fn small_traces_compile_to_programs_that_repeat_the_eager_run() {
        fn check<D: Traceable>(d: Traced<D>) {
            let data = ramp(3);
            let x = d.tensor(&data, &[3], DType::F64).unwrap();
            let cell = TraceCell::default();
            let eager = recorded_gradient(&d, &x, &cell);
            let stats = d.last_trace().unwrap();
            assert_eq!(d.last_compile_note(), None);
            let compiled = stats.compiled.expect("compiled");
            assert!(compiled > 0 && compiled <= stats.instructions, "{stats:?}");
            assert_eq!(d.replay_readbacks(&cell).unwrap(), eager);
            for (g, x) in eager.iter().zip(&data) {
                assert!((g - (x.cos() * x * x + 2.0 * x * x.sin())).abs() < 1e-12, "{g} at {x}");
            }
            // A matrix product compiles; an op the compiler does not know does not, and says
            // why (the size limit's refusal is `compiled.rs`'s to test: 2^24 elements).
            let m = d.tensor(&ramp(6), &[2, 3], DType::F64).unwrap();
            let cell = TraceCell::default();
            let mut product = Vec::new();
            for _ in 0..2 {
                d.run_traced(&cell, &mut || -> Result<()> {
                    product = d.to_vec(&d.matmul(&m, false, &m, true)?)?;
                    Ok(())
                })
                .unwrap();
            }
            assert!(d.last_trace().unwrap().compiled.is_some(), "{:?}", d.last_compile_note());
            assert_eq!(d.replay_readbacks(&cell).unwrap(), product);
            let cell = TraceCell::default();
            d.run_traced(&cell, &mut || -> Result<()> {
                d.to_vec(&d.arg_reduce_axis(Extremum::Max, &m, 1)?.0).map(drop)
            })
            .unwrap();
            let note = d.last_compile_note();
            assert!(note.as_ref().is_some_and(|n| n.contains("arg_reduce_axis")), "{note:?}");
        }
        check(Traced::compiling(cpu()));
        check(Traced::compiling(CpuStaged::on(cpu()).unwrap()));
        // A plain traced device never compiles.
        let d = Traced::new(cpu());
        let x = d.tensor(&ramp(3), &[3], DType::F64).unwrap();
        d.run_traced(&TraceCell::default(), &mut || -> Result<()> { gradient(&d, &x).map(drop) }).unwrap();
        assert_eq!(d.last_trace().unwrap().compiled, None);
        assert_eq!(d.last_compile_note(), None);
    }

    /// The derivatives of a maximum and a minimum (a one-bin arg-histogram, its winner compared
    /// with -1, scattered into and gathered from) compile, and repeat the eager run: the
    /// gradient reaches the first of the tied extremes, the tangent is its tangent.
    #[test]
    fn the_derivatives_of_an_extremum_compile() {
        fn check<D: Traceable>(d: Traced<D>) {
            let x = d.tensor(&[1.0, 3.0, -2.0, 3.0, -2.0], &[5], DType::F64).unwrap();
            let dx = d.tensor(&[0.5, 0.25, 0.125, 2.0, 4.0], &[5], DType::F64).unwrap();
            for (ext, first) in [(HistOp::Max, 1), (HistOp::Min, 2)] {
                let (cell, mut got) = (TraceCell::default(), Vec::new());
                for _ in 0..2 {
                    d.run_traced(&cell, &mut || -> Result<()> {
                        let r = Reverse::new(d.clone());
                        let xv = r.var(x.clone());
                        let y = r.reduce(ext, &xv)?;
                        let g = r.backward(&y, d.full(&[1], 3.0, DType::F64)?)?;
                        got = d.to_vec(g.get(&xv).expect("x is a variable"))?;
                        let f = Forward::new(d.clone());
                        let y = f.reduce(ext, &f.dual(x.clone(), dx.clone())?)?;
                        got.extend(d.to_vec(&f.tangent(&y)?)?);
                        Ok(())
                    })
                    .unwrap();
                }
                let mut want = vec![0.0; 5];
                want[first] = 3.0;
                want.push([0.5, 0.25, 0.125, 2.0, 4.0][first]);
                assert_eq!(got, want, "{ext:?}");
                assert!(d.last_trace().unwrap().compiled.is_some(), "{:?}", d.last_compile_note());
                assert_eq!(d.replay_readbacks(&cell).unwrap(), got);
            }
        }
        check(Traced::compiling(cpu()));
        check(Traced::compiling(CpuStaged::on(cpu()).unwrap()));
    }

    #[test]
    fn replays_in_the_steady_state_allocate_no_large_buffer() {
        // 10^5 f64 values: every tensor of the gradient is a buffer the CPU's cache keeps.
        let d = Traced::new(cpu());
        let x = d.tensor(&ramp(100_000), &[100_000], DType::F64).unwrap();
        let cell = TraceCell::default();
        let grad = recorded_gradient(&d, &x, &cell);
        let warm = d.inner().fresh_buffers();
        assert!(warm >= 8, "the recording allocated its buffers: {warm}");
        let held = trace_of::<Cpu>(&cell);
        let trace = held.as_ref().unwrap().downcast_ref::<Trace<Cpu>>().unwrap();
        for _ in 0..3 {
            d.replay(trace, Keep::Nothing).unwrap();
        }
        assert_eq!(d.inner().fresh_buffers(), warm, "a replay allocated a buffer its predecessor had freed");
        assert_eq!(d.replay(trace, Keep::ReadBacks).unwrap().0, vec![Readback::F(grad)]);
    }

    #[test]
    fn a_replay_releases_each_value_after_its_last_reader() {
        let d = Traced::new(cpu());
        let x = d.tensor(&ramp(64), &[64], DType::F32).unwrap();
        let cell = TraceCell::default();
        d.run_traced(&cell, &mut || -> Result<()> { gradient(&d, &x).map(drop) }).unwrap();
        let held = trace_of::<Cpu>(&cell);
        let trace = held.as_ref().unwrap().downcast_ref::<Trace<Cpu>>().unwrap();
        // Every slot is released exactly once, after the last instruction that reads it.
        let mut freed = trace.free_list.clone();
        freed.sort_unstable();
        assert_eq!(freed, (0..trace.slots as u32).collect::<Vec<_>>());
        for pc in 0..trace.meta.len() {
            for &s in &trace.free_list[trace.free_at[pc] as usize..trace.free_at[pc + 1] as usize] {
                assert!(trace.meta[pc].reads().any(|r| r == s) || trace.meta[pc].writes.contains(&s));
                assert!(trace.meta[pc + 1..].iter().all(|m| m.reads().all(|r| r != s)), "slot {s} read after {pc}");
            }
        }
    }

    #[test]
    fn a_replay_that_differs_from_the_eager_run_is_an_error_naming_the_op() {
        let d = Traced::new(cpu());
        let x = d.tensor(&ramp(16), &[16], DType::F64).unwrap();
        *d.recording() = Some(Recording::new(99));
        let y = d.unary(UnaryOp::Exp, &x).unwrap();
        let _z = d.binary(BinaryOp::Mul, &y, &x).unwrap();
        let rec = d.recording().take().unwrap();
        let (mut trace, mut hashes, readbacks) = rec.finish();
        assert!(d.verify(&mut trace, &hashes, &readbacks).is_ok());
        // The final value (the product, slot 1) hashed differently in the "eager run".
        *hashes.get_mut(&1).unwrap() ^= 1;
        let e = d.verify(&mut trace, &hashes, &readbacks).unwrap_err().to_string();
        assert!(e.contains("differs from the eager run") && e.contains("binary (slot 1)"), "{e}");
        // A read-back that differs.
        *hashes.get_mut(&1).unwrap() ^= 1;
        let e = d.verify(&mut trace, &hashes, &[Readback::I(vec![1])]).unwrap_err().to_string();
        assert!(e.contains("0 read-backs, eager 1"), "{e}");
    }

    #[test]
    fn tensors_made_outside_a_recording_are_read_at_each_replay_and_uploads_inside_are_replayed() {
        let d = Traced::new(cpu());
        let x = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F64).unwrap();
        let cell = TraceCell::default();
        d.run_traced(&cell, &mut || -> Result<()> {
            let c = d.tensor(&[10.0, 20.0, 30.0], &[3], DType::F64)?;
            assert_eq!(d.to_vec(&d.binary(BinaryOp::Add, &x, &c)?)?, vec![11.0, 22.0, 33.0]);
            Ok(())
        })
        .unwrap();
        let held = trace_of::<Cpu>(&cell);
        let trace = held.as_ref().unwrap().downcast_ref::<Trace<Cpu>>().unwrap();
        assert_eq!(trace.meta.iter().map(|m| m.name).collect::<Vec<_>>(), ["tensor", "binary", "to_vec"]);
        assert_eq!(trace.ext_t.len(), 1, "x is held once");
        let (rb, _) = d.replay(trace, Keep::ReadBacks).unwrap();
        assert_eq!(rb, vec![Readback::F(vec![11.0, 22.0, 33.0])]);
    }

    #[test]
    fn each_outside_tensor_is_held_once_and_read_where_it_was_read() {
        let d = Traced::new(cpu());
        let t = |v: &[f64]| d.tensor(v, &[v.len()], DType::F64).unwrap();
        let (x, y, z) = (t(&[8.0, 6.0]), t(&[2.0, 3.0]), t(&[1.0, -1.0]));
        let i = d.index(&[1, 0]).unwrap();
        let cell = TraceCell::default();
        let body = &mut || -> Result<()> {
            // (x / y - z) gathered in reverse, then x again.
            let q = d.binary(BinaryOp::Sub, &d.binary(BinaryOp::Div, &x, &y)?, &z)?;
            let g = d.gather(&q, &i, OutOfRange::Error)?;
            assert_eq!(d.to_vec(&d.binary(BinaryOp::Sub, &g, &x)?)?, vec![3.0 - 8.0, 3.0 - 6.0]);
            Ok(())
        };
        d.run_traced(&cell, body).unwrap();
        let held = trace_of::<Cpu>(&cell);
        let trace = held.as_ref().unwrap().downcast_ref::<Trace<Cpu>>().unwrap();
        assert_eq!((trace.ext_t.len(), trace.ext_i.len()), (3, 1), "x, y, z and the index, each once");
        let (rb, _) = d.replay(trace, Keep::ReadBacks).unwrap();
        assert_eq!(rb, vec![Readback::F(vec![-5.0, -3.0])]);
    }

    #[test]
    fn a_replay_gives_operands_up_at_their_last_reader_only() {
        let d = Traced::new(cpu());
        let x = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F64).unwrap();
        let cell = TraceCell::default();
        for _ in 0..3 {
            d.run_traced(&cell, &mut || -> Result<()> {
                let a = d.unary(UnaryOp::Neg, &x)?; // x is outside: never given up
                let b = d.binary(BinaryOp::Mul, &a, &a)?; // read twice: not given up
                let c = d.binary(BinaryOp::Sub, &x, &b)?; // b's last reader: written into, on the right
                let q = d.binary(BinaryOp::Div, &a, &c)?; // a's last reader; c is read again
                let half = d.scalar(0.5, DType::F64)?;
                let e = d.binary(BinaryOp::Add, &c, &half)?; // half cannot hold the result
                let r = d.unary(UnaryOp::Neg, &e)?; // e's last reader: written into
                assert_eq!(d.to_vec(&q)?, vec![f64::NEG_INFINITY, 1.0, 0.5]);
                assert_eq!(d.to_vec(&r)?, vec![-0.5, 1.5, 5.5]);
                assert_eq!(d.to_vec(&c)?, vec![0.0, -2.0, -6.0]);
                Ok(())
            })
            .unwrap();
        }
        let held = trace_of::<Cpu>(&cell);
        let trace = held.as_ref().unwrap().downcast_ref::<Trace<Cpu>>().unwrap();
        for _ in 0..2 {
            let (rb, _) = d.replay(trace, Keep::ReadBacks).unwrap();
            assert_eq!(rb[1], Readback::F(vec![-0.5, 1.5, 5.5]));
        }
        assert_eq!(d.to_vec(&x).unwrap(), vec![1.0, 2.0, 3.0], "the outside tensor was written into");
    }

    #[test]
    fn read_backs_compare_by_bits() {
        let f = |v: &[f64]| Readback::F(v.to_vec());
        assert_eq!(f(&[f64::NAN, 1.0]), f(&[f64::NAN, 1.0]));
        assert_ne!(f(&[0.0]), f(&[-0.0]));
        assert_ne!(f(&[1.0]), f(&[1.0, 1.0]));
        assert_ne!(f(&[1.0]), Readback::I(vec![1]));
    }

    #[test]
    fn an_accumulation_of_a_value_with_itself_replays() {
        let d = Traced::new(cpu());
        let x = d.tensor(&[1.5, -2.0], &[2], DType::F64).unwrap();
        let cell = TraceCell::default();
        for _ in 0..2 {
            d.run_traced(&cell, &mut || -> Result<()> {
                let e = d.unary(UnaryOp::Neg, &x)?;
                let twice = d.accumulate(e.clone(), &e)?;
                let more = d.accumulate(twice.clone(), &x)?;
                assert_eq!(d.to_vec(&d.stack(&[twice, more])?)?, vec![-3.0, 4.0, -1.5, 2.0]);
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn a_stack_of_one_value_twice_replays() {
        let d = Traced::new(cpu());
        let x = d.tensor(&[1.0, 2.0], &[2], DType::F64).unwrap();
        let cell = TraceCell::default();
        for _ in 0..2 {
            d.run_traced(&cell, &mut || -> Result<()> {
                let e = d.unary(UnaryOp::Neg, &x)?;
                assert_eq!(d.to_vec(&d.stack(&[e.clone(), x.clone(), e])?)?, vec![-1.0, -2.0, 1.0, 2.0, -1.0, -2.0]);
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn outside_a_recording_the_device_is_the_inner_one() {
        let c = cpu();
        let d = Traced::new(c.clone());
        let data = ramp(500);
        let (x, cx) = (d.tensor(&data, &[500], DType::F32).unwrap(), c.tensor(&data, &[500], DType::F32).unwrap());
        assert_eq!(gradient(&d, &x).unwrap(), gradient(&c, &cx).unwrap());
        assert_eq!(d.last_trace(), None, "nothing was recorded");
        let f = Forward::new(d.clone());
        let y = f.unary(UnaryOp::Tanh, &f.dual(x.clone(), x.clone()).unwrap()).unwrap();
        let cf = Forward::new(c.clone());
        let cy = cf.unary(UnaryOp::Tanh, &cf.dual(cx.clone(), cx.clone()).unwrap()).unwrap();
        assert_eq!(d.to_vec(&f.tangent(&y).unwrap()).unwrap(), c.to_vec(&cf.tangent(&cy).unwrap()).unwrap());
    }

    #[test]
    fn a_staged_inner_device_replays_fused_programs_to_the_eager_bits() {
        let st = CpuStaged::on(cpu()).unwrap().with_stage_min(0);
        let d = Traced::new(st.clone());
        let data = ramp(5000);
        let x = d.tensor(&data, &[5000], DType::F64).unwrap();
        let cell = TraceCell::default();
        let mut eager = Vec::new();
        d.run_traced(&cell, &mut || -> Result<()> {
            eager = gradient(&d, &x)?;
            Ok(())
        })
        .unwrap();
        let before = st.stats().programs;
        d.run_traced(&cell, &mut || -> Result<()> { unreachable!("a replay runs no body") }).unwrap();
        assert!(st.stats().programs > before, "the replay ran the staged device's fused programs");
        let c = cpu();
        assert_eq!(eager, gradient(&c, &c.tensor(&data, &[5000], DType::F64).unwrap()).unwrap());
    }

    #[test]
    fn a_body_that_panics_ends_its_recording_and_the_next_call_records_its_own() {
        let d = Traced::new(cpu());
        let x = d.tensor(&[1.0, 2.0], &[2], DType::F64).unwrap();
        let cell = TraceCell::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = d.run_traced(&cell, &mut || -> Result<()> {
                d.unary(UnaryOp::Exp, &x)?;
                panic!("a workload bug");
            });
        }));
        assert!(panicked.is_err());
        assert!(d.recording().is_none(), "the recording ended with the panic");
        let again = TraceCell::default();
        let mut bodies = 0;
        for _ in 0..2 {
            d.run_traced(&again, &mut || -> Result<()> {
                bodies += 1;
                d.unary(UnaryOp::Neg, &x).map(drop)
            })
            .unwrap();
        }
        assert_eq!(bodies, 1, "the next cell recorded and then replayed");
        assert_eq!(d.last_trace().unwrap().instructions, 1);
    }

    #[test]
    fn a_failing_body_leaves_the_cell_empty_and_the_error_as_it_was() {
        let d = Traced::new(cpu());
        let x = d.tensor(&[1.0, 2.0], &[2], DType::F64).unwrap();
        let y = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F64).unwrap();
        let cell = TraceCell::default();
        let e = d.run_traced(&cell, &mut || -> Result<()> { d.binary(BinaryOp::Add, &x, &y).map(drop) });
        assert!(matches!(e, Err(OpError::Shape { op: "binary", .. })), "{e:?}");
        assert!(lock(cell.slot()).is_none());
        assert!(d.recording().is_none(), "the recording ended with the body");
    }

    #[test]
    fn an_injected_fault_fails_exactly_the_chosen_call_and_disarming_restores_the_device() {
        let d = Traced::new(cpu());
        let x = d.tensor(&ramp(64), &[64], DType::F64).unwrap();
        d.inject_fault(None);
        let clean = gradient(&d, &x).unwrap();
        let calls = d.calls();
        assert!(calls >= 5, "the gradient makes several primitive calls: {calls}");
        for at in 0..calls {
            d.inject_fault(Some(at));
            match gradient(&d, &x) {
                Err(OpError::Device(m)) => assert!(m.contains(&format!("primitive call {at} ")), "{m}"),
                other => panic!("call {at} of {calls}: {other:?}"),
            }
            assert!(d.calls() > at, "the counting reached the failing call");
        }
        // Past the last call nothing fails; disarmed, the same bits as before.
        d.inject_fault(Some(calls));
        assert_eq!(gradient(&d, &x).unwrap(), clean);
        d.inject_fault(None);
        assert_eq!(gradient(&d, &x).unwrap(), clean);
    }
}

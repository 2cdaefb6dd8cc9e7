//! The staged CPU device (`cpu-staged`): the CPU device with elementwise work deferred, then
//! compiled and run as fused loops.
//!
//! Elementwise ops (`unary`, `binary`, `select`, `combine`, `combine_partial`, the rule kernel
//! `unary_adjoint`) and reshapes of their results compute nothing when called: they record a
//! node (op, operands, shape, dtype). Their argument checks run at the call, so errors surface
//! where they do on the CPU device. A deferred node is computed when something needs its value:
//! any other op (reductions, matrix products, histograms, gathers: the CPU device runs those as
//! it always does), a read-back, or [`Device::synchronize`], which computes everything still
//! deferred, as a GPU queue would — a timing includes work whose result was dropped.
//!
//! Computing a node compiles the region of deferred nodes beneath it that share its element
//! count into one program: a list of elementwise instructions over registers of
//! [`LANES`] elements, registers reused as soon as their value's last reader has run (liveness),
//! run block by block over the elements (in parallel above the CPU's threshold). Only values
//! that something outside the region still holds — a variable of the workload, a tape entry, a
//! deferred node of another region — are written to memory; the rest live in the registers of
//! one block. Under `Reverse`, the forward chains and the reverse sweep's chains are recorded
//! by the same device, so a rule's elementwise work fuses with the chains that produced its
//! operands, and whatever the tape released before the values were needed is never stored.
//!
//! Every element is computed by the CPU device's own scalar kernels in the same order, so the
//! two devices agree exactly; the conformance suite and `adgauge check --backend cpu-staged`
//! hold the staged device to the same references as the eager one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rayon::prelude::*;

use super::kernels::{self, PAR_MIN, PAR_MIN_WORK, SyncPtr};
use super::{Cpu, CpuElem, CpuIndex, CpuTensor};
use crate::checks::{broadcast_shape, same_dtype, same_len};
use crate::device::Device;
use crate::{BinaryOp, DType, HistOp, IndexDType, OpError, Result, UnaryOp};
use crate::{ChunkedHist, Extremum, Operand, OutOfRange, ScanSpec, TensorMeta};
use crate::{DenseOps, ElementwiseOps, HistOps, IndexOps, ReduceOps, RuleKernels, ScanOps, TensorOps};

/// Hashes node addresses (Fx's multiplier): SipHash was a fifth of a staged LSTM.
#[derive(Default, Clone, Copy)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_usize(&mut self, i: usize) {
        self.0 = (self.0.rotate_left(5) ^ i as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type AddrMap<V> = HashMap<usize, V, std::hash::BuildHasherDefault<AddrHasher>>;
type AddrSet = std::collections::HashSet<usize, std::hash::BuildHasherDefault<AddrHasher>>;

/// Elements per block of a fused loop: a program's registers for one block stay in L1.
pub const LANES: usize = 256;
/// Results of fewer elements are computed at once: below this, compiling a region costs more
/// than the memory traffic fusion saves (the LSTM's 14-element ops ran 5-8x slower staged).
pub const STAGE_MIN: usize = 4096;
/// Blocks per parallel task of a fused loop, at most.
const TASK_BLOCKS: usize = 64;
/// Tasks a parallel fused loop is split into, at least (while blocks last).
const MIN_TASKS: usize = 8;
/// Deferred nodes after which the device computes what it holds: bounds the memory that
/// deferred work keeps alive when nothing reads it back.
const MAX_DEFERRED: usize = 1 << 14;

/// A value tensor of the staged device: a computed CPU tensor or a deferred elementwise node.
#[derive(Clone)]
pub struct StagedTensor(Repr);

#[derive(Clone)]
enum Repr {
    /// Computed when made (every op but the deferred ones): the CPU tensor itself, so an eager
    /// op costs what it costs on the CPU device (a node per result made the LSTM 1.6x slower).
    Done(CpuTensor),
    Deferred(Arc<Node>),
}

struct Node {
    /// The shape of a deferred node (a computed one's is its value's).
    shape: Vec<usize>,
    dtype: DType,
    /// The value, once computed (read without a lock: most reads are of computed nodes).
    value: OnceLock<CpuTensor>,
    /// The op of a deferred node; taken when it is computed. A node with neither a value nor
    /// an op was computed inside a fused loop and not stored: nothing outside that loop held it.
    expr: Mutex<Option<Expr>>,
}

/// A deferred elementwise op: the instruction it compiles to and its operands.
#[derive(Clone)]
struct Expr {
    op: Op,
    args: Vec<StagedTensor>,
}

impl TensorMeta for StagedTensor {
    fn shape(&self) -> &[usize] {
        match &self.0 {
            Repr::Done(v) => v.shape(),
            Repr::Deferred(n) => n.value.get().map_or(&n.shape, |v| v.shape()),
        }
    }
    fn dtype(&self) -> DType {
        match &self.0 {
            Repr::Done(v) => v.dtype(),
            Repr::Deferred(n) => n.dtype,
        }
    }
}

impl Node {
    fn expr(&self) -> MutexGuard<'_, Option<Expr>> {
        // A poisoned lock means a panic elsewhere; the op itself is always whole.
        self.expr.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_deferred(&self) -> bool {
        self.value.get().is_none() && self.expr().is_some()
    }
}

impl StagedTensor {
    /// The value, if computed.
    fn computed(&self) -> Option<&CpuTensor> {
        match &self.0 {
            Repr::Done(v) => Some(v),
            Repr::Deferred(n) => n.value.get(),
        }
    }

    /// Identity of the node, or of a computed tensor's storage.
    fn key(&self) -> usize {
        match &self.0 {
            Repr::Done(v) => Arc::as_ptr(&v.values) as usize,
            Repr::Deferred(n) => Arc::as_ptr(n) as usize,
        }
    }

    fn is_deferred(&self) -> bool {
        matches!(&self.0, Repr::Deferred(n) if n.is_deferred())
    }
}

impl std::fmt::Debug for StagedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match (self.computed(), self.is_deferred()) {
            (Some(_), _) => "done",
            (None, true) => "deferred",
            (None, false) => "fused",
        };
        write!(f, "StagedTensor({}, {:?}, {state})", self.dtype(), self.shape())
    }
}

/// The staged CPU device. Cloning is cheap and shares the CPU device and the deferred work.
#[derive(Clone)]
pub struct CpuStaged {
    cpu: Cpu,
    /// Every deferred node, in recording order (each holds exactly one reference here while it
    /// is deferred: `fuse` counts on that), and computed ones until the next compaction.
    deferred: Arc<Mutex<Queue>>,
    /// Elementwise results of fewer elements are computed at once ([`STAGE_MIN`] by default).
    stage_min: usize,
    stats: Arc<Mutex<StagedStats>>,
}

/// What the staged device has compiled and run so far (with its clones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagedStats {
    /// Fused programs run.
    pub programs: usize,
    /// Instructions (elementwise ops) in them.
    pub instructions: usize,
    /// Values they wrote to memory (the rest stayed in registers).
    pub stored: usize,
    /// The most registers one program needed.
    pub max_registers: usize,
}

/// The recorded nodes. Computed nodes leave in compactions, run when the queue has doubled
/// since the last one (a compaction per computation made recording quadratic: the LSTM's
/// primal took 9x as long).
#[derive(Default)]
struct Queue {
    nodes: Vec<StagedTensor>,
    compact_at: usize,
}

impl Queue {
    fn push(&mut self, t: StagedTensor) {
        self.nodes.push(t);
        if self.nodes.len() >= self.compact_at {
            self.nodes.retain(StagedTensor::is_deferred);
            self.compact_at = 64.max(2 * self.nodes.len());
        }
    }
}

impl CpuStaged {
    /// A staged device on `threads` worker threads (all cores when `None`).
    pub fn new(threads: Option<usize>) -> Result<CpuStaged> {
        CpuStaged::on(Cpu::new(threads)?)
    }

    /// The staged device over an open CPU device (sharing its threads and buffer cache), with
    /// the threshold from `ADGAUGE_STAGE_MIN` when set (0 defers every elementwise op: how
    /// `check` and the tests make small cases run through fused programs).
    pub fn on(cpu: Cpu) -> Result<CpuStaged> {
        let stage_min = match std::env::var("ADGAUGE_STAGE_MIN") {
            Ok(v) => v
                .trim()
                .parse()
                .map_err(|_| OpError::Unsupported(format!("ADGAUGE_STAGE_MIN: '{v}' is not a number of elements")))?,
            Err(_) => STAGE_MIN,
        };
        Ok(CpuStaged { cpu, deferred: Arc::default(), stage_min, stats: Arc::default() })
    }

    /// The same device deferring elementwise results of at least `n` elements.
    pub fn with_stage_min(mut self, n: usize) -> CpuStaged {
        self.stage_min = n;
        self
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.deferred.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the device has compiled and run so far.
    pub fn stats(&self) -> StagedStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deferred nodes not yet computed.
    pub fn deferred_count(&self) -> usize {
        self.queue().nodes.iter().filter(|t| t.is_deferred()).count()
    }

    fn done(t: CpuTensor) -> StagedTensor {
        StagedTensor(Repr::Done(t))
    }

    fn defer(&self, shape: Vec<usize>, dtype: DType, op: Op, args: &[&StagedTensor]) -> Result<StagedTensor> {
        let e = Expr { op, args: args.iter().map(|&a| a.clone()).collect() };
        let node = Node { shape, dtype, value: OnceLock::new(), expr: Mutex::new(Some(e)) };
        let t = StagedTensor(Repr::Deferred(Arc::new(node)));
        let full = {
            let mut q = self.queue();
            q.push(t.clone());
            q.nodes.len() >= MAX_DEFERRED
        };
        if full {
            self.flush()?;
        }
        Ok(t)
    }

    /// The value of `t`, computing it (and the region beneath it) if it is deferred.
    fn value<'a>(&self, t: &'a StagedTensor) -> Result<&'a CpuTensor> {
        if let Some(v) = t.computed() {
            return Ok(v);
        }
        if !t.is_deferred() {
            return Err(OpError::Device("internal: a fused value was asked for after its loop ran".into()));
        }
        self.fuse(t)?;
        t.computed().ok_or_else(|| OpError::Device("internal: a fused region did not store its root".into()))
    }

    /// Computes every deferred node: the newest first, so each is the root of the region it
    /// heads and older nodes fuse into it.
    fn flush(&self) -> Result<()> {
        let nodes = std::mem::take(&mut *self.queue()).nodes;
        for t in nodes.iter().rev() {
            if t.is_deferred() {
                self.fuse(t)?;
            }
        }
        Ok(())
    }

    /// Compiles and runs the region of deferred nodes under `root`.
    fn fuse(&self, root: &StagedTensor) -> Result<()> {
        let n = root.numel();
        let region = Region::collect(self, root, n)?;
        let program = region.compile();
        {
            let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            st.programs += 1;
            st.instructions += program.instrs.len();
            st.stored += program.stored.len();
            st.max_registers = st.max_registers.max(program.registers);
        }
        let outputs = match root.dtype() {
            DType::F32 => self.run_program::<f32>(&program, &region, n),
            DType::F64 => self.run_program::<f64>(&program, &region, n),
        }?;
        for (node, value) in outputs {
            // Another thread may have computed it meanwhile: both values are the same.
            let _ = region.nodes[node].value.set(value);
        }
        for t in &region.nodes {
            t.expr().take();
        }
        Ok(())
    }

    fn run_program<T: CpuElem>(&self, p: &Program, region: &Region, n: usize) -> Result<Vec<(usize, CpuTensor)>> {
        let leaves: Vec<&[T]> = region.leaves.iter().map(|l| l.slice::<T>()).collect::<Result<_>>()?;
        let mut outs: Vec<super::Buf<T>> = p.stored.iter().map(|_| self.cpu.pool().take::<T>(n)).collect();
        let ptrs: Vec<SyncPtr<T>> = outs.iter_mut().map(|o| SyncPtr::new(o)).collect();
        let task = |lo: usize, hi: usize| {
            let mut regs: Vec<Vec<T>> = vec![vec![T::zero(); LANES.min(n)]; p.registers];
            for &(r, l) in &p.splats {
                regs[r].fill(leaves[l][0]);
            }
            let mut start = lo;
            while start < hi {
                let len = LANES.min(hi - start);
                for ins in &p.instrs {
                    // SAFETY (the output reads and writes): every output buffer has n elements
                    // and outlives the tasks; each task touches only its own range [lo, hi) of
                    // it, and an instruction never reads the buffer it writes.
                    let src = |s: Src, regs| operand(s, regs, &leaves, &ptrs, start, len);
                    match ins.dst {
                        Dst::Out(o) => {
                            let srcs = [src(ins.srcs[0], &regs), src(ins.srcs[1], &regs), src(ins.srcs[2], &regs)];
                            exec(ins.op, srcs, unsafe { ptrs[o].slice_mut(start, len) });
                        }
                        Dst::Reg(d) => {
                            let mut out = std::mem::take(&mut regs[d]);
                            let srcs = [src(ins.srcs[0], &regs), src(ins.srcs[1], &regs), src(ins.srcs[2], &regs)];
                            exec(ins.op, srcs, &mut out[..len]);
                            regs[d] = out;
                        }
                    }
                }
                start += len;
            }
        };
        // A fused loop is worth splitting when its whole work is, not only its length: BA's
        // reverse sweeps run hundreds of instructions over 32k elements, below the threshold
        // of one elementwise op. Tasks are then smaller, so that both cores get work.
        let work = n.saturating_mul(p.instrs.len().max(1));
        let span = LANES * TASK_BLOCKS.min(n.div_ceil(LANES * MIN_TASKS).max(1));
        if (n < PAR_MIN && work < PAR_MIN_WORK) || n <= span {
            task(0, n);
        } else {
            self.cpu.install(|| {
                (0..n.div_ceil(span)).into_par_iter().for_each(|t| task(t * span, ((t + 1) * span).min(n)))
            });
        }
        Ok(p.stored
            .iter()
            .zip(outs)
            .map(|(&node, buf)| (node, self.cpu.wrap(buf, region.nodes[node].shape.clone())))
            .collect())
    }

    fn lazy_binary(&self, name: &'static str, op: Op, a: &StagedTensor, b: &StagedTensor) -> Result<StagedTensor> {
        let dt = same_dtype(name, a, b)?;
        let shape = broadcast_shape(name, a.shape(), b.shape())?;
        self.defer(shape, dt, op, &[a, b])
    }
}

/// Where an instruction reads an operand.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Src {
    /// A register (a region node's value, or a one-element leaf splat across the block).
    Reg(usize),
    /// A computed tensor of the region's length, read in place.
    Leaf(usize),
    /// An output buffer (a stored value of the region), read in place.
    Out(usize),
    /// No operand.
    None,
}

/// Where an instruction writes: a register, or the output buffer of a stored value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dst {
    Reg(usize),
    Out(usize),
}

impl Dst {
    /// The same place, read by a later instruction.
    fn src(self) -> Src {
        match self {
            Dst::Reg(r) => Src::Reg(r),
            Dst::Out(o) => Src::Out(o),
        }
    }
}

/// The elementwise op of an instruction (`Copy`: a reshape).
#[derive(Clone, Copy, Debug)]
enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Select,
    Combine(HistOp),
    Partial(HistOp, Operand),
    UnaryAdjoint(UnaryOp),
    Copy,
}

/// An operand of a region node.
#[derive(Clone, Copy, Debug)]
enum Ref {
    Node(usize),
    Leaf(usize),
    Splat(usize),
}

struct Instr {
    op: Op,
    srcs: [Src; 3],
    dst: Dst,
}

/// A region compiled: instructions in dependency order over registers of [`LANES`] elements.
struct Program {
    instrs: Vec<Instr>,
    registers: usize,
    /// (register, leaf): one-element leaves, splat into a register once per task.
    splats: Vec<(usize, usize)>,
    /// The region nodes whose values are stored, in output-buffer order.
    stored: Vec<usize>,
}

/// The deferred nodes under a root that share its element count, with their operands.
struct Region {
    /// Operands before their users; the root last.
    nodes: Vec<Arc<Node>>,
    ops: Vec<(Op, Vec<Ref>)>,
    /// Computed operands (of the region's length, or one element).
    leaves: Vec<CpuTensor>,
    /// Per node: whether its value is stored (the root, and every node something outside the
    /// region still holds).
    stored: Vec<bool>,
}

impl Region {
    fn collect(dev: &CpuStaged, root: &StagedTensor, n: usize) -> Result<Region> {
        enum Step {
            Visit(StagedTensor),
            Emit(StagedTensor, Op, Vec<StagedTensor>),
        }
        let mut index: AddrMap<usize> = AddrMap::default();
        let mut leaf_index: AddrMap<usize> = AddrMap::default();
        let mut visited = AddrSet::default();
        let (mut nodes, mut ops, mut leaves) = (Vec::new(), Vec::new(), Vec::<CpuTensor>::new());
        let mut stack = vec![Step::Visit(root.clone())];
        while let Some(step) = stack.pop() {
            match step {
                Step::Visit(t) => {
                    if !visited.insert(t.key()) {
                        continue;
                    }
                    let expr = match &t.0 {
                        Repr::Deferred(node) => node.expr().clone(),
                        Repr::Done(_) => None,
                    };
                    let Some(Expr { op, args: operands }) = expr else {
                        return Err(OpError::Device("internal: a computed node was entered as deferred".into()));
                    };
                    let inner: Vec<StagedTensor> = operands
                        .iter()
                        .filter(|o| o.numel() == n && o.is_deferred() && !visited.contains(&o.key()))
                        .cloned()
                        .collect();
                    stack.push(Step::Emit(t, op, operands));
                    stack.extend(inner.into_iter().map(Step::Visit));
                }
                Step::Emit(t, op, operands) => {
                    let mut refs = Vec::with_capacity(operands.len());
                    for o in &operands {
                        if let Some(&i) = index.get(&o.key()) {
                            refs.push(Ref::Node(i));
                            continue;
                        }
                        // A computed operand, or a deferred one of another length (one element,
                        // broadcast): computed on its own first.
                        let l = match leaf_index.get(&o.key()) {
                            Some(&l) => l,
                            None => {
                                leaves.push(dev.value(o)?.clone());
                                leaf_index.insert(o.key(), leaves.len() - 1);
                                leaves.len() - 1
                            }
                        };
                        refs.push(if o.numel() == n { Ref::Leaf(l) } else { Ref::Splat(l) });
                    }
                    drop(operands);
                    index.insert(t.key(), nodes.len());
                    let Repr::Deferred(node) = t.0 else {
                        return Err(OpError::Device("internal: a computed node was emitted as deferred".into()));
                    };
                    nodes.push(node);
                    ops.push((op, refs));
                }
            }
        }
        // Every reference to a deferred node is one of: the queue's, `nodes`', one per use by
        // a region node, or one held outside the region. Only the last kind needs the value
        // stored.
        let mut uses = vec![0usize; nodes.len()];
        for (_, refs) in &ops {
            for r in refs {
                if let Ref::Node(j) = r {
                    uses[*j] += 1;
                }
            }
        }
        let last = nodes.len() - 1;
        let stored = (0..nodes.len()).map(|i| i == last || Arc::strong_count(&nodes[i]) > 2 + uses[i]).collect();
        Ok(Region { nodes, ops, leaves, stored })
    }

    /// Registers by liveness: a node's register is freed after its last reader has run.
    fn compile(&self) -> Program {
        let count = self.nodes.len();
        let mut last_use: Vec<usize> = (0..count).collect();
        for (i, (_, refs)) in self.ops.iter().enumerate() {
            for r in refs {
                if let Ref::Node(j) = *r {
                    last_use[j] = i;
                }
            }
        }
        let mut registers = 0;
        let mut splat_reg: HashMap<usize, usize> = HashMap::new();
        let mut splats = Vec::new();
        for (_, refs) in &self.ops {
            for r in refs {
                if let Ref::Splat(l) = *r {
                    splat_reg.entry(l).or_insert_with(|| {
                        splats.push((registers, l));
                        registers += 1;
                        registers - 1
                    });
                }
            }
        }
        // A stored value is computed straight into its output buffer and read from there; the
        // others get registers.
        let (mut free, mut dst_of, mut instrs, mut stored) =
            (Vec::new(), Vec::with_capacity(count), Vec::new(), Vec::new());
        for (i, (op, refs)) in self.ops.iter().enumerate() {
            let dst = if self.stored[i] {
                stored.push(i);
                Dst::Out(stored.len() - 1)
            } else {
                Dst::Reg(free.pop().unwrap_or_else(|| {
                    registers += 1;
                    registers - 1
                }))
            };
            dst_of.push(dst);
            let mut srcs = [Src::None; 3];
            for (s, r) in srcs.iter_mut().zip(refs) {
                *s = match *r {
                    Ref::Node(j) => dst_of[j].src(),
                    Ref::Leaf(l) => Src::Leaf(l),
                    Ref::Splat(l) => Src::Reg(splat_reg[&l]),
                };
            }
            instrs.push(Instr { op: *op, srcs, dst });
            for r in refs {
                if let Ref::Node(j) = *r
                    && last_use[j] == i
                    && let Dst::Reg(reg) = dst_of[j]
                    && !free.contains(&reg)
                {
                    free.push(reg);
                }
            }
            if last_use[i] == i
                && let Dst::Reg(reg) = dst
            {
                free.push(reg);
            }
        }
        Program { instrs, registers, splats, stored }
    }
}

/// An instruction's operand over the block `[start, start + len)`.
fn operand<'a, T: CpuElem>(
    s: Src,
    regs: &'a [Vec<T>],
    leaves: &[&'a [T]],
    outs: &[SyncPtr<T>],
    start: usize,
    len: usize,
) -> &'a [T] {
    match s {
        Src::Reg(r) => &regs[r][..len],
        Src::Leaf(l) => &leaves[l][start..start + len],
        // SAFETY: every output buffer has n elements and outlives the tasks; each task touches
        // only its own range of it, and an instruction never reads the buffer it writes.
        Src::Out(o) => unsafe { outs[o].slice(start, len) },
        Src::None => &[],
    }
}

/// One instruction over one block: `out[j] = op(srcs[..][j])`, by the CPU device's scalar
/// kernels (the arithmetic operators with a loop of their own, as on the CPU device).
fn exec<T: CpuElem>(op: Op, s: [&[T]; 3], out: &mut [T]) {
    macro_rules! zip2 {
        (|$a:ident, $b:ident| $e:expr) => {
            for ((o, &$a), &$b) in out.iter_mut().zip(s[0]).zip(s[1]) {
                *o = $e;
            }
        };
    }
    match op {
        Op::Unary(u) => kernels::unary_map(u, s[0], out),
        Op::Binary(BinaryOp::Add) => zip2!(|a, b| a + b),
        Op::Binary(BinaryOp::Sub) => zip2!(|a, b| a - b),
        Op::Binary(BinaryOp::Mul) => zip2!(|a, b| a * b),
        Op::Binary(BinaryOp::Div) => zip2!(|a, b| a / b),
        Op::Binary(b) => zip2!(|x, y| kernels::binary(b, x, y)),
        Op::Combine(h) => zip2!(|x, y| kernels::combine(h, x, y)),
        Op::Partial(h, side) => zip2!(|x, y| kernels::partial(h, side, x, y)),
        Op::Select => {
            for (((o, &m), &a), &b) in out.iter_mut().zip(s[0]).zip(s[1]).zip(s[2]) {
                *o = if m != T::zero() { a } else { b };
            }
        }
        Op::UnaryAdjoint(u) => kernels::unary_adjoint_map(u, s[0], s[1], s[2], out),
        Op::Copy => out.copy_from_slice(s[0]),
    }
}

impl TensorOps for CpuStaged {
    type T = StagedTensor;
    type I = CpuIndex;

    fn engine_name(&self) -> String {
        "cpu-staged".into()
    }
    fn carries_derivatives(&self) -> bool {
        false
    }
    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.tensor(data, shape, dtype)?))
    }
    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.full(shape, value, dtype)?))
    }
    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<CpuIndex> {
        self.cpu.index_as(data, dtype)
    }
    fn to_vec(&self, t: &StagedTensor) -> Result<Vec<f64>> {
        self.cpu.to_vec(self.value(t)?)
    }
    fn index_to_vec(&self, i: &CpuIndex) -> Result<Vec<i64>> {
        self.cpu.index_to_vec(i)
    }
    fn reshape(&self, t: &StagedTensor, shape: &[usize]) -> Result<StagedTensor> {
        same_len("reshape", "element count", t.numel(), shape.iter().product())?;
        if t.is_deferred() {
            self.defer(shape.to_vec(), t.dtype(), Op::Copy, &[t])
        } else {
            Ok(Self::done(self.cpu.reshape(self.value(t)?, shape)?))
        }
    }
}

impl ElementwiseOps for CpuStaged {
    fn unary(&self, op: UnaryOp, x: &StagedTensor) -> Result<StagedTensor> {
        if x.numel() < self.stage_min {
            return Ok(Self::done(self.cpu.unary(op, self.value(x)?)?));
        }
        self.defer(x.shape().to_vec(), x.dtype(), Op::Unary(op), &[x])
    }
    fn binary(&self, op: BinaryOp, a: &StagedTensor, b: &StagedTensor) -> Result<StagedTensor> {
        if a.numel().max(b.numel()) < self.stage_min {
            return Ok(Self::done(self.cpu.binary(op, self.value(a)?, self.value(b)?)?));
        }
        self.lazy_binary("binary", Op::Binary(op), a, b)
    }
    fn select(&self, mask: &StagedTensor, a: &StagedTensor, b: &StagedTensor) -> Result<StagedTensor> {
        if mask.numel() < self.stage_min {
            return Ok(Self::done(self.cpu.select(self.value(mask)?, self.value(a)?, self.value(b)?)?));
        }
        same_dtype("select", mask, a)?;
        let dt = same_dtype("select", a, b)?;
        let n = mask.numel();
        for (what, len) in [("a", a.numel()), ("b", b.numel())] {
            if len != n && len != 1 {
                return Err(OpError::Shape { op: "select", detail: format!("mask has {n} elements, {what} {len}") });
            }
        }
        self.defer(mask.shape().to_vec(), dt, Op::Select, &[mask, a, b])
    }
    fn index_eq(&self, i: &CpuIndex, value: i64, dtype: DType) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.index_eq(i, value, dtype)?))
    }
    fn combine(&self, op: HistOp, a: &StagedTensor, b: &StagedTensor) -> Result<StagedTensor> {
        if a.numel().max(b.numel()) < self.stage_min {
            return Ok(Self::done(self.cpu.combine(op, self.value(a)?, self.value(b)?)?));
        }
        self.lazy_binary("combine", Op::Combine(op), a, b)
    }
    fn combine_partial(&self, op: HistOp, side: Operand, a: &StagedTensor, b: &StagedTensor) -> Result<StagedTensor> {
        if a.numel().max(b.numel()) < self.stage_min {
            return Ok(Self::done(self.cpu.combine_partial(op, side, self.value(a)?, self.value(b)?)?));
        }
        self.lazy_binary("combine_partial", Op::Partial(op, side), a, b)
    }
}

impl ReduceOps for CpuStaged {
    fn reduce(&self, op: HistOp, x: &StagedTensor) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.reduce(op, self.value(x)?)?))
    }
}

impl IndexOps for CpuStaged {
    fn gather(&self, src: &StagedTensor, idx: &CpuIndex, oob: OutOfRange) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.gather(self.value(src)?, idx, oob)?))
    }
    fn scatter(&self, dest: &StagedTensor, idx: &CpuIndex, vals: &StagedTensor) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.scatter(self.value(dest)?, idx, self.value(vals)?)?))
    }
    fn sort_by_key(&self, keys: &CpuIndex, num_keys: usize) -> Result<CpuIndex> {
        self.cpu.sort_by_key(keys, num_keys)
    }
    fn sort_by_key_ranked(&self, keys: &CpuIndex, num_keys: usize) -> Result<(CpuIndex, CpuIndex)> {
        self.cpu.sort_by_key_ranked(keys, num_keys)
    }
    fn gather_index(&self, src: &CpuIndex, idx: &CpuIndex) -> Result<CpuIndex> {
        self.cpu.gather_index(src, idx)
    }
    fn stack(&self, parts: &[StagedTensor]) -> Result<StagedTensor> {
        let values = parts.iter().map(|p| self.value(p).cloned()).collect::<Result<Vec<_>>>()?;
        Ok(Self::done(self.cpu.stack(&values)?))
    }
    fn unstack(&self, x: &StagedTensor) -> Result<Vec<StagedTensor>> {
        Ok(self.cpu.unstack(self.value(x)?)?.into_iter().map(Self::done).collect())
    }
}

impl HistOps for CpuStaged {
    fn auto_hist_rule(&self, op: HistOp, n: usize, k: usize) -> Option<crate::HistRule> {
        self.cpu.auto_hist_rule(op, n, k)
    }
    fn reduce_by_index(
        &self,
        dest: &StagedTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
    ) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.reduce_by_index(self.value(dest)?, op, inds, self.value(vals)?)?))
    }
    fn arg_reduce_by_index(
        &self,
        dest: &StagedTensor,
        ext: Extremum,
        inds: &CpuIndex,
        vals: &StagedTensor,
    ) -> Result<(StagedTensor, CpuIndex)> {
        let (v, p) = self.cpu.arg_reduce_by_index(self.value(dest)?, ext, inds, self.value(vals)?)?;
        Ok((Self::done(v), p))
    }
    fn prod_nonzero_by_index(
        &self,
        inds: &CpuIndex,
        vals: &StagedTensor,
        k: usize,
    ) -> Result<(StagedTensor, CpuIndex, CpuIndex)> {
        let (p, z, m) = self.cpu.prod_nonzero_by_index(inds, self.value(vals)?, k)?;
        Ok((Self::done(p), z, m))
    }
    fn prod_vals_adjoint(
        &self,
        inds: &CpuIndex,
        vals: &StagedTensor,
        c0: &StagedTensor,
        c1: &StagedTensor,
        c2: &StagedTensor,
    ) -> Result<StagedTensor> {
        let (v, c0, c1, c2) = (self.value(vals)?, self.value(c0)?, self.value(c1)?, self.value(c2)?);
        Ok(Self::done(self.cpu.prod_vals_adjoint(inds, v, c0, c1, c2)?))
    }
    fn relative_inputs(
        &self,
        kind: crate::Relative,
        dest: &StagedTensor,
        inds: &CpuIndex,
        vals: &StagedTensor,
    ) -> Result<Option<(StagedTensor, StagedTensor, StagedTensor)>> {
        let fused = self.cpu.relative_inputs(kind, self.value(dest)?, inds, self.value(vals)?)?;
        Ok(fused.map(|(a, d, v)| (Self::done(a), Self::done(d), Self::done(v))))
    }
    fn relative_reduce_by_index_dual(
        &self,
        kind: crate::Relative,
        dest: &StagedTensor,
        dest_dot: &StagedTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
        vals_dot: &StagedTensor,
    ) -> Result<Option<(StagedTensor, StagedTensor)>> {
        let (d, dd, v, vd) = (self.value(dest)?, self.value(dest_dot)?, self.value(vals)?, self.value(vals_dot)?);
        let fused = self.cpu.relative_reduce_by_index_dual(kind, d, dd, op, inds, v, vd)?;
        Ok(fused.map(|(h, hd)| (Self::done(h), Self::done(hd))))
    }
}

impl ScanOps for CpuStaged {
    fn scan(&self, op: HistOp, x: &StagedTensor, spec: ScanSpec, segments: Option<&CpuIndex>) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.scan(op, self.value(x)?, spec, segments)?))
    }
    fn linear_recurrence(
        &self,
        a: &StagedTensor,
        b: &StagedTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.linear_recurrence(self.value(a)?, self.value(b)?, spec, segments)?))
    }
}

impl DenseOps for CpuStaged {
    fn broadcast_to(&self, x: &StagedTensor, shape: &[usize]) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.broadcast_to(self.value(x)?, shape)?))
    }
    fn sum_to(&self, x: &StagedTensor, shape: &[usize]) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.sum_to(self.value(x)?, shape)?))
    }
    fn matmul(&self, a: &StagedTensor, ta: bool, b: &StagedTensor, tb: bool) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.matmul(self.value(a)?, ta, self.value(b)?, tb)?))
    }
    fn arg_reduce_axis(&self, ext: Extremum, x: &StagedTensor, axis: usize) -> Result<(StagedTensor, CpuIndex)> {
        let (v, i) = self.cpu.arg_reduce_axis(ext, self.value(x)?, axis)?;
        Ok((Self::done(v), i))
    }
    fn sq_dist(&self, a: &StagedTensor, c: &StagedTensor) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.sq_dist(self.value(a)?, self.value(c)?)?))
    }
    fn sum_sq_diff(&self, a: &StagedTensor, c: &StagedTensor) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.sum_sq_diff(self.value(a)?, self.value(c)?)?))
    }
    fn logsumexp_axis(&self, x: &StagedTensor, axis: usize) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.logsumexp_axis(self.value(x)?, axis)?))
    }
    fn lstm_cell(&self, x: &StagedTensor, state: &StagedTensor, params: &StagedTensor) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.lstm_cell(self.value(x)?, self.value(state)?, self.value(params)?)?))
    }
}

impl RuleKernels for CpuStaged {
    fn unary_adjoint(
        &self,
        op: UnaryOp,
        x: &StagedTensor,
        y: &StagedTensor,
        g: &StagedTensor,
    ) -> Result<Option<StagedTensor>> {
        if op == UnaryOp::Sign {
            return Ok(None);
        }
        if x.numel() < self.stage_min {
            let (x, y, g) = (self.value(x)?, self.value(y)?, self.value(g)?);
            return Ok(self.cpu.unary_adjoint(op, x, y, g)?.map(Self::done));
        }
        let dt = same_dtype("unary_adjoint", x, g)?;
        same_dtype("unary_adjoint", y, g)?;
        if y.numel() != x.numel() || g.numel() != x.numel() {
            return Err(OpError::Shape {
                op: "unary_adjoint",
                detail: format!("x {:?}, y {:?}, adjoint {:?}", x.shape(), y.shape(), g.shape()),
            });
        }
        self.defer(g.shape().to_vec(), dt, Op::UnaryAdjoint(op), &[x, y, g]).map(Some)
    }

    fn gather_adjoint(&self, src: &StagedTensor, idx: &CpuIndex, g: &StagedTensor) -> Result<StagedTensor> {
        Ok(Self::done(self.cpu.gather_adjoint(self.value(src)?, idx, self.value(g)?)?))
    }

    fn sum_sq_diff_adjoint(&self, a: &StagedTensor, c: &StagedTensor, g: &StagedTensor) -> Result<StagedTensor> {
        let (a, c, g) = (self.value(a)?, self.value(c)?, self.value(g)?);
        Ok(Self::done(self.cpu.sum_sq_diff_adjoint(a, c, g)?))
    }

    fn logsumexp_adjoint(
        &self,
        x: &StagedTensor,
        y: &StagedTensor,
        g: &StagedTensor,
        axis: usize,
    ) -> Result<StagedTensor> {
        let (x, y, g) = (self.value(x)?, self.value(y)?, self.value(g)?);
        Ok(Self::done(self.cpu.logsumexp_adjoint(x, y, g, axis)?))
    }

    fn lstm_cell_vjp(
        &self,
        x: &StagedTensor,
        state: &StagedTensor,
        params: &StagedTensor,
        g: &StagedTensor,
    ) -> Result<(StagedTensor, StagedTensor, StagedTensor)> {
        let (x, s, p, g) = (self.value(x)?, self.value(state)?, self.value(params)?, self.value(g)?);
        let (gx, gs, gp) = self.cpu.lstm_cell_vjp(x, s, p, g)?;
        Ok((Self::done(gx), Self::done(gs), Self::done(gp)))
    }

    fn lstm_cell_jvp(
        &self,
        x: &StagedTensor,
        state: &StagedTensor,
        params: &StagedTensor,
        dx: &StagedTensor,
        dstate: &StagedTensor,
        dparams: &StagedTensor,
    ) -> Result<StagedTensor> {
        let [x, s, p, dx, ds, dp] = [x, state, params, dx, dstate, dparams].map(|t| self.value(t));
        Ok(Self::done(self.cpu.lstm_cell_jvp(x?, s?, p?, dx?, ds?, dp?)?))
    }

    fn lstm_cell_gates(
        &self,
        x: &StagedTensor,
        state: &StagedTensor,
        params: &StagedTensor,
    ) -> Result<(StagedTensor, Option<StagedTensor>)> {
        let (y, gates) = self.cpu.lstm_cell_gates(self.value(x)?, self.value(state)?, self.value(params)?)?;
        Ok((Self::done(y), gates.map(Self::done)))
    }

    fn lstm_cell_vjp_saved(
        &self,
        x: &StagedTensor,
        state: &StagedTensor,
        params: &StagedTensor,
        gates: &StagedTensor,
        g: &StagedTensor,
    ) -> Result<(StagedTensor, StagedTensor, StagedTensor)> {
        let [x, s, p, gates, g] = [x, state, params, gates, g].map(|t| self.value(t));
        let (gx, gs, gp) = self.cpu.lstm_cell_vjp_saved(x?, s?, p?, gates?, g?)?;
        Ok((Self::done(gx), Self::done(gs), Self::done(gp)))
    }

    fn lstm_cell_jvp_saved(
        &self,
        x: &StagedTensor,
        state: &StagedTensor,
        params: &StagedTensor,
        gates: &StagedTensor,
        dx: &StagedTensor,
        dstate: &StagedTensor,
        dparams: &StagedTensor,
    ) -> Result<StagedTensor> {
        let [x, s, p, gates, dx, ds, dp] = [x, state, params, gates, dx, dstate, dparams].map(|t| self.value(t));
        Ok(Self::done(self.cpu.lstm_cell_jvp_saved(x?, s?, p?, gates?, dx?, ds?, dp?)?))
    }

    fn fold_adjoint(
        &self,
        op: HistOp,
        l: &StagedTensor,
        a: &StagedTensor,
        r: &StagedTensor,
        g: &StagedTensor,
    ) -> Result<StagedTensor> {
        let (l, a, r, g) = (self.value(l)?, self.value(a)?, self.value(r)?, self.value(g)?);
        Ok(Self::done(self.cpu.fold_adjoint(op, l, a, r, g)?))
    }

    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
        hist: &StagedTensor,
        hist_bar: &StagedTensor,
    ) -> Result<StagedTensor> {
        let (v, h, hb) = (self.value(vals)?, self.value(hist)?, self.value(hist_bar)?);
        Ok(Self::done(self.cpu.total_form_adjoint(op, inds, v, h, hb)?))
    }

    fn sorted_vals_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
        dest: &StagedTensor,
        hist_bar: &StagedTensor,
    ) -> Result<StagedTensor> {
        let (v, d, hb) = (self.value(vals)?, self.value(dest)?, self.value(hist_bar)?);
        Ok(Self::done(self.cpu.sorted_vals_adjoint(op, inds, v, d, hb)?))
    }

    fn reduce_by_index_dual(
        &self,
        dest: &StagedTensor,
        dest_dot: &StagedTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
        vals_dot: &StagedTensor,
    ) -> Result<(StagedTensor, StagedTensor)> {
        let (d, dd, v, vd) = (self.value(dest)?, self.value(dest_dot)?, self.value(vals)?, self.value(vals_dot)?);
        let (h, hd) = self.cpu.reduce_by_index_dual(d, dd, op, inds, v, vd)?;
        Ok((Self::done(h), Self::done(hd)))
    }

    fn reduce_by_index_chunked(
        &self,
        dest: &StagedTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
    ) -> Result<ChunkedHist<StagedTensor>> {
        let c = self.cpu.reduce_by_index_chunked(self.value(dest)?, op, inds, self.value(vals)?)?;
        Ok(ChunkedHist {
            hist: Self::done(c.hist),
            elements: Self::done(c.elements),
            chunk_prefix: Self::done(c.chunk_prefix),
            chunk_suffix: Self::done(c.chunk_suffix),
        })
    }

    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &StagedTensor,
        chunk_prefix: &StagedTensor,
        chunk_suffix: &StagedTensor,
        hist_bar: &StagedTensor,
    ) -> Result<StagedTensor> {
        let (v, p, s, hb) =
            (self.value(vals)?, self.value(chunk_prefix)?, self.value(chunk_suffix)?, self.value(hist_bar)?);
        Ok(Self::done(self.cpu.chunked_vals_adjoint(op, inds, v, p, s, hb)?))
    }
}

impl Device for CpuStaged {
    fn device_name(&self) -> String {
        format!("cpu-staged ({} threads)", self.cpu.threads())
    }
    fn threads(&self) -> usize {
        self.cpu.threads()
    }
    fn flushes_subnormals(&self) -> bool {
        self.cpu.flushes_subnormals()
    }
    fn synchronize(&self) -> Result<()> {
        self.flush()
    }
    fn trim_cache(&self) {
        self.cpu.trim_cache()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices() -> (Cpu, CpuStaged) {
        let cpu = Cpu::new(Some(2)).unwrap();
        (cpu.clone(), CpuStaged::on(cpu).unwrap().with_stage_min(0))
    }

    fn ramp(n: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0).collect()
    }

    #[test]
    fn a_chain_is_one_program_that_stores_only_what_is_held() {
        let (cpu, st) = devices();
        // Above the CPU's parallel threshold: the blocks run as parallel tasks.
        let n = PAR_MIN + 1000;
        let data = ramp(n);
        let x = st.tensor(&data, &[n], DType::F64).unwrap();
        let two = st.scalar(2.0, DType::F64).unwrap();
        let e = st.unary(UnaryOp::Exp, &x).unwrap();
        let y = st.binary(BinaryOp::Add, &st.binary(BinaryOp::Mul, &e, &two).unwrap(), &x).unwrap();
        assert_eq!(st.deferred_count(), 3);
        let got = st.to_vec(&y).unwrap();
        assert_eq!(st.deferred_count(), 0);
        // exp, *, +: one program; y and e (still held here) stored, e * 2 not.
        // Registers: the splat 2 and e * 2 (e and y are computed in their outputs).
        assert_eq!(st.stats(), StagedStats { programs: 1, instructions: 3, stored: 2, max_registers: 2 });
        let (cx, ctwo) = (cpu.tensor(&data, &[n], DType::F64).unwrap(), cpu.scalar(2.0, DType::F64).unwrap());
        let ce = cpu.unary(UnaryOp::Exp, &cx).unwrap();
        let want = cpu.binary(BinaryOp::Add, &cpu.binary(BinaryOp::Mul, &ce, &ctwo).unwrap(), &cx).unwrap();
        assert_eq!(got, cpu.to_vec(&want).unwrap());
        assert_eq!(st.to_vec(&e).unwrap(), cpu.to_vec(&ce).unwrap());
        assert_eq!(st.stats().programs, 1, "e was stored by the first program");
    }

    #[test]
    fn a_reverse_sweep_computes_no_adjoint_of_a_constant_and_holds_no_unread_value() {
        let (_, st) = devices();
        let n = 3000;
        let r = adgauge_ad::Reverse::new(st.clone());
        let x = r.var(st.tensor(&ramp(n), &[n], DType::F64).unwrap());
        let (one, two) = (r.lift(st.scalar(1.0, DType::F64).unwrap()), r.lift(st.scalar(2.0, DType::F64).unwrap()));
        // z = (x + 1) * 2: the rules of + and * read nothing of x + 1, and the constants' adjoints
        // (sums over n elements, reductions that would each end a region) are not wanted.
        let z = r.mul(&r.add(&x, &one).unwrap(), &two).unwrap();
        let grads = r.backward(&z, st.full(&[n], 1.0, DType::F64).unwrap()).unwrap();
        assert_eq!(st.to_vec(grads.get(&x).unwrap()).unwrap(), vec![2.0; n]);
        // One program of one instruction (adjoint * 2) storing its root; x + 1 and z stay deferred.
        let s = st.stats();
        assert_eq!((s.programs, s.instructions, s.stored), (1, 1, 1), "{s:?}");
        assert_eq!(st.deferred_count(), 2);
    }

    #[test]
    fn registers_are_reused_along_a_chain() {
        let (_, st) = devices();
        let n = 5000;
        let mut t = st.tensor(&ramp(n), &[n], DType::F32).unwrap();
        for i in 0..50 {
            let op = [UnaryOp::Sin, UnaryOp::Tanh, UnaryOp::Square][i % 3];
            t = st.unary(op, &t).unwrap();
        }
        st.to_vec(&t).unwrap();
        let s = st.stats();
        assert_eq!((s.programs, s.instructions, s.stored), (1, 50, 1));
        assert!(s.max_registers <= 2, "{s:?}");
    }

    #[test]
    fn a_long_chain_of_few_elements_runs_in_tasks_and_matches_the_cpu() {
        // 20000 elements (below PAR_MIN) x 60 instructions: split into tasks of 10 blocks, the
        // last one partial and ending in a partial block.
        let (cpu, st) = devices();
        let n = 20_000;
        let ops = [UnaryOp::Sin, UnaryOp::Tanh, UnaryOp::Square, UnaryOp::Exp];
        let mut want = cpu.tensor(&ramp(n), &[n], DType::F64).unwrap();
        let mut got = st.tensor(&ramp(n), &[n], DType::F64).unwrap();
        for i in 0..60 {
            want = cpu.unary(ops[i % 4], &want).unwrap();
            got = st.unary(ops[i % 4], &got).unwrap();
        }
        assert_eq!(st.to_vec(&got).unwrap(), cpu.to_vec(&want).unwrap());
        let s = st.stats();
        assert_eq!((s.programs, s.instructions, s.stored), (1, 60, 1));
    }

    #[test]
    fn broadcasts_reshapes_selects_and_shared_operands_match_the_cpu() {
        let (cpu, st) = devices();
        let n = 3 * LANES + 17;
        let (a, b) = (ramp(n), ramp(n + 5)[5..].to_vec());
        macro_rules! program {
            ($d:expr) => {{
                let d = $d;
                let x = d.tensor(&a, &[n], DType::F64).unwrap();
                let y = d.tensor(&b, &[n], DType::F64).unwrap();
                // A one-element operand computed in its own region and broadcast.
                let half = d.unary(UnaryOp::Sqrt, &d.scalar(0.25, DType::F64).unwrap()).unwrap();
                let s = d.binary(BinaryOp::Sub, &x, &half).unwrap();
                let sq = d.binary(BinaryOp::Mul, &s, &s).unwrap();
                let m = d.binary(BinaryOp::Lt, &x, &y).unwrap();
                let sel = d.select(&m, &sq, &half).unwrap();
                let r = d.reshape(&sel, &[n, 1]).unwrap();
                let c = d.combine(HistOp::Max, &r, &d.reshape(&y, &[n, 1]).unwrap()).unwrap();
                let p = d.combine_partial(HistOp::Min, Operand::Right, &c, &d.reshape(&x, &[n, 1]).unwrap()).unwrap();
                let ex = d.unary(UnaryOp::Exp, &s).unwrap();
                let adj = d.unary_adjoint(UnaryOp::Exp, &s, &ex, &d.reshape(&p, &[n]).unwrap()).unwrap().unwrap();
                (d.to_vec(&adj).unwrap(), d.to_vec(&c).unwrap(), c.shape().to_vec())
            }};
        }
        let got = program!(&st);
        let want = program!(&cpu);
        assert_eq!(got, want);
        assert!(st.stats().programs >= 2, "{:?}", st.stats());
    }

    #[test]
    fn synchronize_computes_dropped_work() {
        let (_, st) = devices();
        let x = st.tensor(&ramp(5000), &[5000], DType::F64).unwrap();
        drop(st.unary(UnaryOp::Log1p, &st.unary(UnaryOp::Abs, &x).unwrap()).unwrap());
        assert_eq!(st.deferred_count(), 2);
        st.synchronize().unwrap();
        assert_eq!(st.deferred_count(), 0);
        let s = st.stats();
        // The dropped result is still computed and written, as the eager device would.
        assert_eq!((s.programs, s.instructions, s.stored), (1, 2, 1));
    }

    #[test]
    fn small_results_are_computed_at_once_by_default() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let st = CpuStaged::on(cpu).unwrap().with_stage_min(STAGE_MIN);
        let x = st.tensor(&ramp(100), &[100], DType::F64).unwrap();
        let y = st.unary(UnaryOp::Exp, &x).unwrap();
        assert_eq!(st.deferred_count(), 0);
        assert_eq!(format!("{y:?}"), "StagedTensor(f64, [100], done)");
        let big = st.tensor(&ramp(STAGE_MIN), &[STAGE_MIN], DType::F64).unwrap();
        let z = st.unary(UnaryOp::Exp, &big).unwrap();
        assert_eq!(format!("{z:?}"), format!("StagedTensor(f64, [{STAGE_MIN}], deferred)"));
    }
}

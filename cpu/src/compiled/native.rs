//! Fused loops as native code: a loop of binary ops, shifts and anti-shifts compiled to
//! AVX-512 machine code that takes vectors of eight elements through every step of the loop
//! with the values in `zmm` registers.
//!
//! The interpreter ([`super::run_step`]) takes a block of hundreds of elements through one
//! step at a time: every step loads its operands from L1 and stores its result there, and
//! ode's RK4 loop (fourteen steps an RK4 step, a hundred RK4 steps) is bound by those loads
//! and stores. Here a loop register is a `zmm` register (or, where they do not all fit, a
//! spill slot: [`layout`]), a step one or two instructions on it, and only the loop's inputs
//! and its results kept after the loop touch the buffer. Several vectors are in flight, each
//! step's instructions for one after the other's, as one vector's steps are one chain of
//! dependent ops.
//!
//! A shift (ode's `y[i - 1]`, a view or a copy) is one `valignq` of the source's vector and
//! the one before it: the vector before in flight, or for the first the loop's carry (the
//! interpreter's, so the two paths hand over at any multiple of eight elements). An
//! anti-shift (a shift's adjoint, in a loop run from its last block) is `0 + ` the `valignq`
//! of the vector and the one after, and its kernel runs the vectors from the last down.
//!
//! A kernel has entries of one signature ([`Entry`]):
//! - the loop over groups of vectors in flight;
//! - one vector under a mask of lanes (a vector left over from the groups, or the last of a
//!   length that is no multiple of eight), its loads and stores masked;
//! - one entry per vector holding exceptions of a shift or an anti-shift (ode's element 0),
//!   masked as the last, with those lanes patched: a shift's from another lane of the source's
//!   vector (`vpermq`) or the fill value, an anti-shift's as `0` plus its terms in order.
//!
//! Every op is the instruction the interpreter's loops use, rounded alone (no contraction),
//! so results are bit for bit the interpreter's (any NaN for any NaN, as there: an operand
//! from memory goes second where the op commutes). A division by one value repeated takes the
//! interpreter's quotient (`crate::quotient`: the rounded reciprocal and one correction, with
//! the same range check, the divide instruction for a vector outside it).
//!
//! What a loop needs that is not here (sums, unary ops, selects, gathers other than shifts,
//! exceptions reading another vector) leaves it to the interpreter; so does a CPU without
//! AVX-512 (F, DQ, VL) and FMA, and `ADGAUGE_JIT=interpret`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use super::asm::{Arith, Asm, Executable, Gpr, Rm};
use super::{Dst, Kind, NO_CARRY, Side, Src, Step};
use crate::{BinaryOp, quotient};

/// `zmm` registers for a step's temporaries, shared by the vectors in flight; the loop's
/// registers and views take the ones below.
const T0: u8 = 28;
const T1: u8 = 29;
const T2: u8 = 30;
const T3: u8 = 31;

/// The opmask of the lanes a masked entry computes (the table's [`MASK`] word).
const K_LANES: u8 = 1;
/// The quotient's lanes outside its range.
const K_CHECK: u8 = 2;
/// A shift's exception lanes being patched.
const K_PATCH: u8 = 3;

/// The most vectors the whole-vector loop takes through the steps together. One vector alone
/// is one chain of dependent ops (ode's hundred RK4 steps, thousands of instructions long,
/// more than the CPU looks ahead), so the loop interleaves several, each step's instructions
/// for one after the other's: ode n = 1000, one vector at a time, 0.28 ms against the
/// interpreter's 0.167.
const IN_FLIGHT_MAX: usize = 4;

/// Words of the constant table every kernel starts with: the quotient's range check, then
/// the lane mask of a masked entry.
const ABS: usize = 0;
const X_MIN: usize = 1;
const SPAN: usize = 2;
const SIGN: usize = 3;
const MASK: usize = 4;
/// +0, which an anti-shift adds (`0 + g`, as the interpreter's sum starts).
const ZERO: usize = 5;

/// The most bytes of code a kernel may take.
const CODE_MAX: usize = 16 << 20;

/// `(elements at the first vector, the buffer, the carries, vectors, constant table,
/// spill slots)`.
type Entry = unsafe extern "sysv64" fn(*mut f64, *mut f64, *mut f64, usize, *const u64, *mut f64);

/// A loop compiled to native code.
pub(super) struct Kernel {
    code: Executable,
    /// The loop over groups of [`Kernel::in_flight`] vectors.
    groups: usize,
    in_flight: usize,
    /// One vector, its lanes masked by the table's [`MASK`].
    masked: usize,
    /// (vector, entry) for each vector that holds exceptions, ascending (masked as `masked`).
    peeled: Vec<(usize, usize)>,
    /// The constant table, but for the divisors, which each run reads from the buffer.
    table: Vec<u64>,
    /// (place of a one-element divisor, its table words: `c`, `1 / c`, whether the fast path
    /// takes it).
    divisors: Vec<(u32, usize)>,
    /// f64 of spill slots a run needs.
    spill: usize,
    /// The vectors run from the last (the loop's anti-shifts read the vector after).
    backward: bool,
    /// The anti-shifts' carries, zeros before the last vector (nothing lies past the end).
    anti_carries: Vec<u32>,
}

/// Whether loops compile to native code here: a CPU with the AVX-512 the widest kernels use
/// and FMA (`crate::simd`), on Unix (where the code's pages come from), unless
/// `ADGAUGE_JIT=interpret`. FMA is also what the quotient's
/// fast path needs (`quotient::available`), so every divisor in its range takes it.
pub(super) fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let interpret = std::env::var("ADGAUGE_JIT").is_ok_and(|v| v == "interpret");
        cfg!(unix) && crate::simd::avx512() && crate::simd::avx2_fma() && !interpret
    })
}

/// A 32-bit displacement of `elements` f64, where it fits.
fn disp(elements: u64) -> Option<i32> {
    i32::try_from(elements.checked_mul(8)?).ok()
}

fn arith(op: BinaryOp) -> Option<Arith> {
    match op {
        BinaryOp::Add => Some(Arith::Add),
        BinaryOp::Sub => Some(Arith::Sub),
        BinaryOp::Mul => Some(Arith::Mul),
        BinaryOp::Div => Some(Arith::Div),
        _ => None,
    }
}

/// A step's operand once resolved.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Operand {
    Z(u8),
    /// The buffer at the vector's elements, from this displacement off `rdi`.
    Vec(i32),
    /// A spill slot, this displacement off `r9`.
    Slot(i32),
    /// One element of the buffer, broadcast.
    One(i32),
}

/// Where each loop register of a vector in flight lives.
#[derive(Clone, Copy)]
enum Home {
    /// `zmm` number (of the first vector; the `k`-th in flight adds `k * per`).
    Zmm(u8),
    /// A spill slot (of the first vector; the `k`-th adds `k * spills`).
    Spill(u32),
}

/// How a body lays out its vectors in flight.
#[derive(Clone)]
struct Layout {
    homes: Vec<Home>,
    /// `zmm`s per vector in flight: its registers', then its views'.
    per: u8,
    /// Spill slots per vector in flight.
    spills: u32,
}

/// One body of the loop being emitted: the steps over `in_flight` vectors.
struct Body<'a> {
    asm: &'a mut Asm,
    table: &'a mut Vec<u64>,
    side: &'a Side,
    layout: &'a Layout,
    in_flight: usize,
    /// Loads and stores of the buffer under the lane mask.
    masked: bool,
    /// The vector whose shift exceptions this body patches.
    patch: Option<u32>,
    /// The vectors run from the last (a loop of anti-shifts): the vector after a vector in
    /// flight is the one the carry or the next in flight holds.
    backward: bool,
    /// The table word of each step's divisor (quotient steps only).
    slots: &'a [Option<usize>],
}

/// The views of one vector in flight: each register's (its shift, the `zmm` holding it), and
/// the free `zmm`s.
struct Views {
    of: Vec<Option<(u32, u8)>>,
    free: Vec<u8>,
}

impl Body<'_> {
    fn lane_mask(&self) -> u8 {
        if self.masked { K_LANES } else { 0 }
    }

    /// Register `r` of vector `k` in flight.
    fn home(&self, r: u32, k: usize) -> Option<Operand> {
        match *self.layout.homes.get(r as usize)? {
            Home::Zmm(z) => Some(Operand::Z(z + k as u8 * self.layout.per)),
            Home::Spill(j) => Some(Operand::Slot(disp(u64::from(j + k as u32 * self.layout.spills) * 8)?)),
        }
    }

    fn operand(&self, src: Src, k: usize, views: &Views) -> Option<Operand> {
        match src {
            Src::Reg(r) => self.home(r, k),
            Src::View(r, d) => match views.of.get(r as usize).copied().flatten() {
                Some((vd, z)) if vd == d => Some(Operand::Z(z)),
                _ => None,
            },
            Src::Vec(p) => Some(Operand::Vec(disp(u64::from(p) + 8 * k as u64)?)),
            Src::One(p) => Some(Operand::One(disp(p.into())?)),
            _ => None,
        }
    }

    /// The operand in a register (`tmp` if it must be loaded).
    fn in_register(&mut self, o: Operand, tmp: u8) -> u8 {
        match o {
            Operand::Z(z) => z,
            Operand::Vec(d) => {
                let k = self.lane_mask();
                self.asm.load(tmp, Rm::Mem(Gpr::Rdi, d), k);
                tmp
            }
            Operand::Slot(d) => {
                self.asm.load(tmp, Rm::Mem(Gpr::R9, d), 0);
                tmp
            }
            Operand::One(d) => {
                self.asm.broadcast(tmp, Rm::Mem(Gpr::Rsi, d), 0);
                tmp
            }
        }
    }

    /// The operand as an instruction's register-or-memory operand (loaded into `tmp` where
    /// the lane mask must guard the load).
    fn as_rm(&mut self, o: Operand, tmp: u8) -> Rm {
        match o {
            Operand::Z(z) => Rm::Z(z),
            Operand::Vec(d) if self.masked => {
                self.asm.load(tmp, Rm::Mem(Gpr::Rdi, d), K_LANES);
                Rm::Z(tmp)
            }
            Operand::Vec(d) => Rm::Mem(Gpr::Rdi, d),
            Operand::Slot(d) => Rm::Mem(Gpr::R9, d),
            Operand::One(d) => Rm::Bcst(Gpr::Rsi, d),
        }
    }

    /// Where step destination `dst` of vector `k` in flight lives.
    fn destination(&self, dst: Dst, k: usize) -> Option<Operand> {
        match dst {
            Dst::Reg(r) => self.home(r, k),
            Dst::Mem(p) => Some(Operand::Vec(disp(u64::from(p) + 8 * k as u64)?)),
            Dst::Sum(_) => None,
        }
    }

    /// The register a result for `dst` is computed in: its own, or `T2` to be stored.
    fn result_register(dst: Operand) -> u8 {
        match dst {
            Operand::Z(z) => z,
            _ => T2,
        }
    }

    /// Result `v` to `dst` (a store under the lane mask for the buffer).
    fn put(&mut self, dst: Operand, v: u8) {
        match dst {
            Operand::Z(z) => self.asm.mov(z, v),
            Operand::Vec(d) => {
                let m = self.lane_mask();
                self.asm.store(Rm::Mem(Gpr::Rdi, d), v, m);
            }
            Operand::Slot(d) => self.asm.store(Rm::Mem(Gpr::R9, d), v, 0),
            // No destination is one element (`destination`).
            Operand::One(_) => {}
        }
    }

    fn emit(&mut self, steps: &[Step]) -> Option<()> {
        let views_from = self.layout.homes.iter().filter(|h| matches!(h, Home::Zmm(_))).count() as u8;
        let mut views: Vec<Views> = (0..self.in_flight)
            .map(|k| {
                let first = k as u8 * self.layout.per;
                Views {
                    of: vec![None; self.layout.homes.len()],
                    free: (first + views_from..first + self.layout.per).rev().collect(),
                }
            })
            .collect();
        for (i, s) in steps.iter().enumerate() {
            match s.kind {
                Kind::Gather { .. } if !self.backward => {
                    self.shift(s, &mut views)?;
                    continue;
                }
                Kind::GatherAdjoint { .. } if self.backward => {
                    self.anti(s, &mut views)?;
                    continue;
                }
                Kind::Gather { .. } | Kind::GatherAdjoint { .. } => return None,
                _ => {}
            }
            for (k, views) in views.iter_mut().enumerate() {
                self.binary(i, s, k, views)?;
            }
        }
        Some(())
    }

    /// Binary step `s` (the `i`-th) for vector `k` in flight.
    fn binary(&mut self, i: usize, s: &Step, k: usize, views: &mut Views) -> Option<()> {
        let Kind::Binary(op) = s.kind else { return None };
        let op = arith(op)?;
        let then = match s.then {
            Some(t) => Some(arith(t)?),
            None => None,
        };
        if s.nargs != 2 {
            return None;
        }
        let mut a = self.operand(s.src[0], k, views)?;
        let mut b = self.operand(s.src[1], k, views)?;
        let quotient = self.slots[i].filter(|_| matches!(b, Operand::One(_)));
        // An operand from memory is the instruction's second where the op commutes (IEEE
        // addition and multiplication do, bit for bit), so that it needs no load of its own.
        if quotient.is_none()
            && matches!(op, Arith::Add | Arith::Mul)
            && !matches!(a, Operand::Z(_))
            && matches!(b, Operand::Z(_))
        {
            std::mem::swap(&mut a, &mut b);
        }
        let c = match then {
            Some(_) => Some(self.operand(s.src[2], k, views)?),
            None => None,
        };
        let dst = self.destination(s.dst, k)?;
        let into = Self::result_register(dst);
        let x = self.in_register(a, T0);
        let first = match (quotient, b) {
            (Some(slot), Operand::One(pd)) => {
                self.quotient(x, slot, pd);
                T3
            }
            _ => {
                let to = if then.is_some() { T2 } else { into };
                let rm = self.as_rm(b, T1);
                self.asm.arith(op, to, x, rm);
                to
            }
        };
        let result = match (then, c) {
            (Some(then), Some(c)) => {
                let rm = self.as_rm(c, T1);
                self.asm.arith(then, into, first, rm);
                into
            }
            _ => first,
        };
        self.put(dst, result);
        if let Dst::Reg(r) = s.dst
            && let Some((_, z)) = views.of[r as usize].take()
        {
            // The register's old value is gone; so is a view of it.
            views.free.push(z);
        }
        Some(())
    }

    /// A shift (`d` back) of register `r` for every vector in flight: its vector with the
    /// `d` elements before it from the vector before (the carry, for the first in flight),
    /// then the last one's vector into the carry. A view keeps the result in a `zmm` of its
    /// own for the steps that read it; a copy puts it at its destination.
    fn shift(&mut self, s: &Step, views: &mut [Views]) -> Option<()> {
        let (Kind::Gather { fill, .. }, Some(shift)) = (s.kind, self.side.shift(s.kind)) else { return None };
        if s.carry == NO_CARRY || !(1..=8).contains(&shift.d) {
            return None;
        }
        let Src::Reg(r) = s.src[0] else { return None };
        if matches!(s.dst, Dst::Reg(w) if w == r && !s.view) {
            // The vector after reads this one's source, which the result would overwrite.
            return None;
        }
        let carry = Rm::Mem(Gpr::Rdx, disp(u64::from(s.carry) * 8)?);
        let last = self.in_flight - 1;
        for (k, vs) in views.iter_mut().enumerate() {
            let before = match k {
                0 => carry,
                _ => match self.home(r, k - 1)? {
                    Operand::Z(z) => Rm::Z(z),
                    Operand::Slot(d) => Rm::Mem(Gpr::R9, d),
                    _ => return None,
                },
            };
            let cur = self.home(r, k)?;
            let cur = self.in_register(cur, T0);
            let dst = match s.view {
                true => None,
                false => Some(self.destination(s.dst, k)?),
            };
            let v = match dst {
                Some(dst) => Self::result_register(dst),
                None => {
                    if let Some((_, z)) = vs.of[r as usize].take() {
                        vs.free.push(z);
                    }
                    let v = vs.free.pop()?;
                    vs.of[r as usize] = Some((shift.d, v));
                    v
                }
            };
            if let (Dst::Reg(w), false) = (s.dst, s.view)
                && let Some((_, z)) = vs.of[w as usize].take()
            {
                vs.free.push(z);
            }
            self.asm.align(v, cur, before, (8 - shift.d) as u8);
            if k == last {
                self.asm.store(carry, cur, 0);
            }
            if let Some(e) = self.patch.filter(|_| self.in_flight == 1) {
                self.patch(shift, fill, e, v, cur)?;
            }
            if let Some(dst) = dst {
                self.put(dst, v);
            }
        }
        Some(())
    }

    /// An anti-shift (a shift's adjoint, `d` forward) of a register or a buffer for every
    /// vector in flight: element `j` is `0 + g[j + d]`, the `d` elements after the vector from
    /// the vector after it (the carry, for the last in flight: zeros past the end), then the
    /// first one's vector into the carry. In a masked body the lanes past the end are zeros
    /// first, as the interpreter reads no element past the end.
    fn anti(&mut self, s: &Step, views: &mut [Views]) -> Option<()> {
        let anti = self.side.anti(s.kind)?;
        if s.carry == NO_CARRY || !(1..=8).contains(&anti.d) {
            return None;
        }
        if matches!((s.src[0], s.dst), (Src::Reg(r), Dst::Reg(w)) if r == w) {
            // The vector before reads this one's source, which the result would overwrite.
            return None;
        }
        let carry = Rm::Mem(Gpr::Rdx, disp(u64::from(s.carry) * 8)?);
        let last = self.in_flight - 1;
        let source = |body: &Self, k: usize| match s.src[0] {
            Src::Reg(r) => body.home(r, k),
            Src::Vec(p) => Some(Operand::Vec(disp(u64::from(p) + 8 * k as u64)?)),
            _ => None,
        };
        // From the last in flight to the first: each reads the source of the one after, which
        // no result overwrites (the destination is not the source).
        for k in (0..self.in_flight).rev() {
            let after = match k {
                _ if k == last => carry,
                _ => match source(self, k + 1)? {
                    Operand::Z(z) => Rm::Z(z),
                    Operand::Slot(d) => Rm::Mem(Gpr::R9, d),
                    Operand::Vec(d) => Rm::Mem(Gpr::Rdi, d),
                    Operand::One(_) => return None,
                },
            };
            let cur = source(self, k)?;
            let mut cur = self.in_register(cur, T0);
            if self.masked {
                self.asm.mov_masked(T0, cur, K_LANES, true);
                cur = T0;
            }
            let dst = self.destination(s.dst, k)?;
            let v = Self::result_register(dst);
            let after = match after {
                Rm::Z(z) => z,
                mem => {
                    self.asm.load(T1, mem, 0);
                    T1
                }
            };
            self.asm.align(v, after, Rm::Z(cur), anti.d as u8);
            self.asm.arith(Arith::Add, v, v, Rm::Bcst(Gpr::R8, (ZERO * 8) as i32));
            if k == 0 {
                self.asm.store(carry, cur, 0);
            }
            if let Some(e) = self.patch.filter(|_| self.in_flight == 1) {
                self.anti_patch(anti, e, v, cur)?;
            }
            self.put(dst, v);
            if let Dst::Reg(w) = s.dst
                && let Some((_, z)) = views[k].of[w as usize].take()
            {
                views[k].free.push(z);
            }
        }
        Some(())
    }

    /// The lanes of anti-shift result `v` that are exceptions in vector `e`: `0` plus their
    /// terms (lanes of the source vector `cur`) in order.
    fn anti_patch(&mut self, anti: &super::AntiShift, e: u32, v: u8, cur: u8) -> Option<()> {
        let mine: Vec<(u32, u32, u32)> = anti.exceptions.iter().copied().filter(|&(j, ..)| j / 8 == e).collect();
        if mine.is_empty() {
            return Some(());
        }
        let lanes = mine.iter().fold(0u16, |m, &(j, ..)| m | 1 << (j % 8));
        let most = mine.iter().map(|&(_, a, b)| b - a).max().unwrap_or(0);
        self.asm.broadcast(T3, Rm::Mem(Gpr::R8, (ZERO * 8) as i32), 0);
        for m in 0..most {
            let (mut idx, mut with) = ([0u64; 8], 0u16);
            for &(j, a, b) in &mine {
                if a + m < b {
                    idx[(j % 8) as usize] = u64::from(anti.terms[(a + m) as usize] % 8);
                    with |= 1 << (j % 8);
                }
            }
            let at = disp(self.table.len() as u64)?;
            self.table.extend_from_slice(&idx);
            self.asm.load(T1, Rm::Mem(Gpr::R8, at), 0);
            self.asm.permute(T1, T1, cur, 0);
            self.asm.set_mask(K_PATCH, with);
            self.asm.arith_masked(Arith::Add, T3, T3, Rm::Z(T1), K_PATCH);
        }
        self.asm.set_mask(K_PATCH, lanes);
        self.asm.mov_masked(v, T3, K_PATCH, false);
        Some(())
    }

    /// The lanes of view `v` (of the source vector `cur`) that are exceptions of `shift` in
    /// vector `e`: from their own lane of `cur`, or the fill.
    fn patch(&mut self, shift: &super::Shift, fill: u64, e: u32, v: u8, cur: u8) -> Option<()> {
        let (mut from_lane, mut fills, mut idx) = (0u16, 0u16, [0u64; 8]);
        for &(i, b) in shift.exceptions.iter().filter(|&&(i, _)| i / 8 == e) {
            let lane = i % 8;
            if b == u32::MAX {
                fills |= 1 << lane;
            } else {
                from_lane |= 1 << lane;
                idx[lane as usize] = u64::from(b % 8);
            }
        }
        if from_lane != 0 {
            let at = disp(self.table.len() as u64)?;
            self.table.extend_from_slice(&idx);
            // `cur` may be T0 (a spilled register): the indices go to T1.
            self.asm.load(T1, Rm::Mem(Gpr::R8, at), 0);
            self.asm.set_mask(K_PATCH, from_lane);
            self.asm.permute(v, T1, cur, K_PATCH);
        }
        if fills != 0 {
            let at = disp(self.table.len() as u64)?;
            self.table.push(fill);
            self.asm.set_mask(K_PATCH, fills);
            self.asm.broadcast(v, Rm::Mem(Gpr::R8, at), K_PATCH);
        }
        Some(())
    }

    /// `T3 = x / c`, `c` the one element at `pd`, its table words at `slot`: the fast path
    /// of `crate::quotient` where the divisor and every lane of `x` are in its range, else
    /// the divide instruction.
    fn quotient(&mut self, x: u8, slot: usize, pd: i32) {
        let word = |w: usize| (w * 8) as i32;
        let a = &mut *self.asm;
        a.cmp_zero_r8(word(slot + 2));
        let no_fast_path = a.jump(0x84);
        // Lanes out of range: |x| - X_MIN above SPAN (unsigned) and |x| nonzero.
        a.and(T1, x, Rm::Bcst(Gpr::R8, word(ABS)));
        a.sub_q(T1, T1, Rm::Bcst(Gpr::R8, word(X_MIN)));
        a.cmp_uq(K_CHECK, T1, Rm::Bcst(Gpr::R8, word(SPAN)), 6);
        a.test_q(K_CHECK, x, Rm::Bcst(Gpr::R8, word(ABS)), K_CHECK);
        a.kortest(K_CHECK);
        let out_of_range = a.jump(0x85);
        // q = x * r; e = x - q * c; y = e * r + q, with q's sign bit ORed in.
        a.arith(Arith::Mul, T1, x, Rm::Bcst(Gpr::R8, word(slot + 1)));
        a.mov(T2, x);
        a.fnmadd231(T2, T1, Rm::Bcst(Gpr::R8, word(slot)));
        a.mov(T3, T1);
        a.fmadd231(T3, T2, Rm::Bcst(Gpr::R8, word(slot + 1)));
        a.ternlog(T3, T1, Rm::Bcst(Gpr::R8, word(SIGN)), 0xF8);
        let done = a.jump(0xE9);
        a.land(no_fast_path);
        a.land(out_of_range);
        a.arith(Arith::Div, T3, x, Rm::Bcst(Gpr::Rsi, pd));
        a.land(done);
    }
}

/// The most views of one vector live at once in `steps`.
fn views_max(steps: &[Step]) -> usize {
    let mut live = std::collections::HashSet::new();
    let mut most = 0;
    for s in steps {
        match (s.view, s.src[0], s.dst) {
            (true, Src::Reg(r), _) => {
                live.insert(r);
                most = most.max(live.len());
            }
            (false, _, Dst::Reg(r)) => {
                live.remove(&r);
            }
            _ => {}
        }
    }
    most
}

/// How many vectors to keep in flight and where each register lives: as many vectors as
/// there are `zmm`s for, up to [`IN_FLIGHT_MAX`], spilling the registers cheapest to keep in
/// memory (the fewest writes and reads that must load them), where spills cost at most a
/// tenth more instructions; at least two vectors, or none (the interpreter then).
fn layout(steps: &[Step], registers: usize) -> Option<(usize, Layout)> {
    let mut cost = vec![0usize; registers];
    for s in steps {
        if let Dst::Reg(r) = s.dst {
            *cost.get_mut(r as usize)? += 1;
        }
        let commutes = matches!(s.kind, Kind::Binary(BinaryOp::Add | BinaryOp::Mul));
        if let Src::Reg(r) = s.src[0]
            && (s.view || !commutes)
        {
            *cost.get_mut(r as usize)? += 1;
        }
    }
    let mut cheapest: Vec<usize> = (0..registers).collect();
    cheapest.sort_by_key(|&r| (cost[r], r));
    let views = views_max(steps);
    let plan = |in_flight: usize| -> Option<(usize, Layout, usize)> {
        let per = usize::from(T0) / in_flight;
        let in_zmm = per.checked_sub(views)?.min(registers);
        let spilled = &cheapest[..registers - in_zmm];
        let extra: usize = spilled.iter().map(|&r| cost[r]).sum();
        let mut homes = vec![Home::Zmm(0); registers];
        let (mut z, mut j) = (0u8, 0u32);
        for (r, home) in homes.iter_mut().enumerate() {
            *home = if spilled.contains(&r) {
                j += 1;
                Home::Spill(j - 1)
            } else {
                z += 1;
                Home::Zmm(z - 1)
            };
        }
        Some((in_flight, Layout { homes, per: per as u8, spills: j }, extra))
    };
    let fits = (2..=IN_FLIGHT_MAX).rev().filter_map(plan).find(|(_, _, extra)| extra * 10 <= steps.len());
    let (in_flight, layout, _) = fits.or_else(|| plan(2))?;
    Some((in_flight, layout))
}

impl Kernel {
    /// `steps` (a loop of `registers` registers) as native code, where every step is one the
    /// kernels take and the CPU has what they need.
    pub(super) fn compile(steps: &[Step], side: &Side, registers: usize, backward: bool) -> Option<Kernel> {
        if !enabled() || steps.is_empty() {
            return None;
        }
        let (in_flight, flight) = layout(steps, registers)?;
        // One vector at a time (the masked and peeled entries): every register in a `zmm`
        // where they fit.
        let single = layout_single(steps, registers).unwrap_or_else(|| flight.clone());
        let (x_min, span, sign) = quotient::range_bits();
        let mut table = vec![!sign, x_min, span, sign, 0, 0];
        // A table slot for each division by one element (the first op of its step).
        let mut divisors = Vec::new();
        let slots: Vec<Option<usize>> = steps
            .iter()
            .map(|s| match (s.kind, s.src[1]) {
                (Kind::Binary(BinaryOp::Div), Src::One(p)) if !s.view => {
                    let w = table.len();
                    table.extend_from_slice(&[0; 3]);
                    divisors.push((p, w));
                    Some(w)
                }
                _ => None,
            })
            .collect();
        // The vectors holding exceptions of a view's shift: each its own entry. An exception
        // must read its own vector or the fill.
        let mut peel = BTreeSet::new();
        for s in steps.iter().filter(|s| matches!(s.kind, Kind::Gather { .. })) {
            for &(i, b) in &side.shift(s.kind)?.exceptions {
                if b != u32::MAX && b / 8 != i / 8 {
                    return None;
                }
                peel.insert(i / 8);
            }
        }
        // So do the vectors holding an anti-shift's exceptions, whose terms must lie in theirs.
        let mut anti_carries = Vec::new();
        for s in steps.iter().filter(|s| matches!(s.kind, Kind::GatherAdjoint { .. })) {
            let anti = side.anti(s.kind)?;
            for &(j, a, b) in &anti.exceptions {
                if anti.terms[a as usize..b as usize].iter().any(|&t| t / 8 != j / 8) {
                    return None;
                }
                peel.insert(j / 8);
            }
            anti_carries.push(s.carry);
        }
        let mut asm = Asm::default();
        let body = |asm: &mut Asm, table: &mut Vec<u64>, layout: &Layout, in_flight, patch: Option<u32>| {
            let masked = in_flight == 1;
            Body { asm, table, side, layout, in_flight, masked, patch, backward, slots: &slots }.emit(steps)
        };
        let groups = asm.bytes.len();
        asm.test_rcx();
        let none = asm.jump(0x84);
        let top = asm.bytes.len();
        body(&mut asm, &mut table, &flight, in_flight, None)?;
        let stride = 64 * in_flight as i32;
        asm.add_rdi(if backward { -stride } else { stride });
        asm.dec_rcx();
        asm.jump_back(0x85, top);
        asm.land(none);
        asm.ret();
        let masked = asm.bytes.len();
        asm.mask_from_r8(K_LANES, (MASK * 8) as i32);
        body(&mut asm, &mut table, &single, 1, None)?;
        asm.ret();
        let mut peeled = Vec::new();
        for e in peel {
            peeled.push((e as usize, asm.bytes.len()));
            asm.mask_from_r8(K_LANES, (MASK * 8) as i32);
            body(&mut asm, &mut table, &single, 1, Some(e))?;
            asm.ret();
        }
        if asm.bytes.len() > CODE_MAX {
            return None;
        }
        let spill = 8 * (flight.spills as usize * in_flight).max(single.spills as usize);
        let code = Executable::new(&asm.bytes)?;
        Some(Kernel { code, groups, in_flight, masked, peeled, table, divisors, spill, backward, anti_carries })
    }

    /// The vectors the loop over whole vectors takes through the steps together.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Runs elements `[start, end)` of the loop of `n` (`start` a multiple of eight) over the
    /// buffer at `base`, the shifts' carries at `carries` as the interpreter keeps them; from
    /// the last vector where the kernel runs backward.
    ///
    /// # Safety
    /// As `run_loop`'s: every place of the loop lies in the buffer and `carries` holds the
    /// loop's carries.
    pub(super) unsafe fn run(&self, base: *mut f64, carries: *mut f64, start: usize, end: usize, n: usize) {
        debug_assert!(start.is_multiple_of(8));
        let mut table = self.table.clone();
        for &(p, w) in &self.divisors {
            // SAFETY: the caller's contract (the divisor's place is in the buffer).
            let c = unsafe { *base.add(p as usize) };
            // `enabled` implies `quotient::available`.
            if let Some(d) = quotient::Divisor::of(c) {
                let (c, r) = d.parts();
                table[w..w + 3].copy_from_slice(&[c.to_bits(), r.to_bits(), 1]);
            }
        }
        let mut spill = vec![0.0f64; self.spill];
        let mut call = |entry: usize, vector: usize, count: usize, lanes: u64| {
            table[MASK] = lanes;
            // SAFETY: `entry` is one of the kernel's entries, all of the `Entry` signature;
            // they read and write the buffer at the loop's places for `count` groups (or one
            // vector, its lanes masked) from `vector`, the carries, the table and the spill
            // slots.
            unsafe {
                let f: Entry = std::mem::transmute::<*const u8, Entry>(self.code.at(entry));
                f(base.add(vector * 8), base, carries, count, table.as_ptr(), spill.as_mut_ptr());
            }
        };
        let (full, vectors) = (end / 8, end.div_ceil(8));
        let last_lanes = if end.is_multiple_of(8) { 0xFF } else { (1 << (end % 8)) - 1 };
        let lanes = |v: usize| if v < full { 0xFF } else { last_lanes };
        let first = start / 8;
        let peeled = self.peeled.iter().copied().filter(|&(e, _)| e >= first && e < vectors);
        if self.backward {
            if end == n {
                for &c in &self.anti_carries {
                    // SAFETY: the caller's contract (the carries hold every carry's elements).
                    unsafe { std::ptr::write_bytes(carries.add(c as usize * 8), 0, 8) };
                }
            }
            // Whole vectors `[from, to)` from the last: groups, then single vectors.
            let whole = |call: &mut dyn FnMut(usize, usize, usize, u64), from: usize, to: usize| {
                let groups = (to - from) / self.in_flight;
                if groups > 0 {
                    call(self.groups, to - self.in_flight, groups, 0xFF);
                }
                for v in (from..to - groups * self.in_flight).rev() {
                    call(self.masked, v, 1, 0xFF);
                }
            };
            // The last vector first where it is partial, then whole vectors below `v`.
            if full < vectors {
                let entry = self.peeled.iter().find(|&&(e, _)| e == full).map_or(self.masked, |&(_, entry)| entry);
                call(entry, full, 1, last_lanes);
            }
            let mut v = full;
            for (e, entry) in peeled.filter(|&(e, _)| e < full).rev() {
                whole(&mut call, e + 1, v);
                call(entry, e, 1, 0xFF);
                v = e;
            }
            whole(&mut call, first, v);
            return;
        }
        // Whole vectors `[from, to)`: groups, then single vectors.
        let whole = |call: &mut dyn FnMut(usize, usize, usize, u64), from: usize, to: usize| {
            let groups = (to - from) / self.in_flight;
            call(self.groups, from, groups, 0xFF);
            for v in from + groups * self.in_flight..to {
                call(self.masked, v, 1, 0xFF);
            }
        };
        let mut v = first;
        for (e, entry) in peeled {
            whole(&mut call, v, e);
            call(entry, e, 1, lanes(e));
            v = e + 1;
        }
        if full > v {
            whole(&mut call, v, full);
            v = full;
        }
        if v < vectors {
            call(self.masked, v, 1, lanes(v));
        }
    }
}

/// Every register in a `zmm` where they and the views fit, for one vector at a time.
fn layout_single(steps: &[Step], registers: usize) -> Option<Layout> {
    let per = usize::from(T0);
    (registers + views_max(steps) <= per).then(|| Layout {
        homes: (0..registers).map(|r| Home::Zmm(r as u8)).collect(),
        per: per as u8,
        spills: 0,
    })
}

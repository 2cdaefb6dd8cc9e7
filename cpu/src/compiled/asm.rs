//! The x86-64 instructions the native loops ([`super::native`]) are made of, as bytes, and
//! the executable memory they run from.
//!
//! Only what those loops need: AVX-512 arithmetic on f64 (EVEX encoding, 512-bit vectors,
//! operands in `zmm` registers, in memory at a general register plus a 32-bit displacement,
//! or one element broadcast), the opmask compares of the quotient's range check, and the
//! scalar loop control around them. Every displacement is written as 32 bits (no compressed
//! 8-bit form), so that an instruction's length does not depend on its operand.

/// A general-purpose register, by its number in the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Gpr {
    Rdx = 2,
    Rsi = 6,
    Rdi = 7,
    R8 = 8,
    R9 = 9,
}

/// An instruction's register-or-memory operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rm {
    /// `zmm0`-`zmm31`.
    Z(u8),
    /// 64 bytes at the register plus the displacement.
    Mem(Gpr, i32),
    /// One f64 (or u64) at the register plus the displacement, in every lane.
    Bcst(Gpr, i32),
}

/// The opcode maps of the EVEX prefix.
const MAP_0F: u8 = 1;
const MAP_0F38: u8 = 2;
const MAP_0F3A: u8 = 3;

/// Code being assembled.
#[derive(Default)]
pub(super) struct Asm {
    pub(super) bytes: Vec<u8>,
}

/// A forward jump whose 32-bit offset is written once its target is known.
pub(super) struct Fixup(usize);

/// The arithmetic opcodes of `vaddpd` and its kin (map 0F).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Arith {
    Add = 0x58,
    Mul = 0x59,
    Sub = 0x5C,
    Div = 0x5E,
}

impl Asm {
    /// One EVEX-encoded 512-bit instruction with prefix 66 and W1 (every one the loops use):
    /// `reg` is ModRM.reg (a `zmm` or an opmask), `v` the second source (`zmm`, or 0 where
    /// the instruction has none), `rm` the register-or-memory operand, `mask` the opmask
    /// (`k0`: none) with zeroing where `zero`.
    #[allow(clippy::too_many_arguments)]
    fn evex(&mut self, map: u8, op: u8, reg: u8, v: u8, rm: Rm, mask: u8, zero: bool, imm: Option<u8>) {
        debug_assert!(reg < 32 && v < 32 && mask < 8);
        let (b, x, modrm_rm, modrm_mod, disp, bcst) = match rm {
            Rm::Z(r) => {
                debug_assert!(r < 32);
                ((r >> 3) & 1, (r >> 4) & 1, r & 7, 0b11, None, false)
            }
            Rm::Mem(g, d) => ((g as u8 >> 3) & 1, 0, g as u8 & 7, 0b10, Some(d), false),
            Rm::Bcst(g, d) => ((g as u8 >> 3) & 1, 0, g as u8 & 7, 0b10, Some(d), true),
        };
        let r = (reg >> 3) & 1;
        let r2 = (reg >> 4) & 1;
        let p0 = ((r ^ 1) << 7) | ((x ^ 1) << 6) | ((b ^ 1) << 5) | ((r2 ^ 1) << 4) | map;
        // W1, vvvv inverted, the fixed 1, pp = 01 (the 66 prefix).
        let p1 = 0x80 | ((!v & 0xF) << 3) | 0b100 | 0b01;
        // z, L'L = 10 (512 bits), b, V' inverted, aaa.
        let p2 = (u8::from(zero) << 7) | (0b10 << 5) | (u8::from(bcst) << 4) | ((((v >> 4) & 1) ^ 1) << 3) | mask;
        self.bytes.extend_from_slice(&[0x62, p0, p1, p2, op]);
        self.bytes.push((modrm_mod << 6) | ((reg & 7) << 3) | modrm_rm);
        if let Some(d) = disp {
            if modrm_rm == 4 {
                // rsp or r12 as the base needs a SIB byte (none of the loops' bases are).
                self.bytes.push(0x24);
            }
            self.bytes.extend_from_slice(&d.to_le_bytes());
        }
        if let Some(i) = imm {
            self.bytes.push(i);
        }
    }

    /// `vaddpd` / `vmulpd` / `vsubpd` / `vdivpd dst, a, b`.
    pub(super) fn arith(&mut self, op: Arith, dst: u8, a: u8, b: Rm) {
        self.evex(MAP_0F, op as u8, dst, a, b, 0, false, None);
    }

    /// `vaddpd` / .. `dst{k}, a, b`: lanes outside `k` keep `dst`'s value.
    pub(super) fn arith_masked(&mut self, op: Arith, dst: u8, a: u8, b: Rm, mask: u8) {
        self.evex(MAP_0F, op as u8, dst, a, b, mask, false, None);
    }

    /// `vmovapd dst{k}, src` (merging), or `dst{k}{z}, src` (zeroing) where `zero`.
    pub(super) fn mov_masked(&mut self, dst: u8, src: u8, mask: u8, zero: bool) {
        self.evex(MAP_0F, 0x28, dst, 0, Rm::Z(src), mask, zero, None);
    }

    /// `vmovupd dst{k}{z}, [mem]` (`mask` 0: no mask).
    pub(super) fn load(&mut self, dst: u8, mem: Rm, mask: u8) {
        self.evex(MAP_0F, 0x10, dst, 0, mem, mask, mask != 0, None);
    }

    /// `vmovupd [mem]{k}, src` (`mask` 0: no mask).
    pub(super) fn store(&mut self, mem: Rm, src: u8, mask: u8) {
        self.evex(MAP_0F, 0x11, src, 0, mem, mask, false, None);
    }

    /// `vmovapd dst, src`.
    pub(super) fn mov(&mut self, dst: u8, src: u8) {
        if dst != src {
            self.evex(MAP_0F, 0x28, dst, 0, Rm::Z(src), 0, false, None);
        }
    }

    /// `vbroadcastsd dst{k}, [mem]` (`mask` 0: no mask; else merging).
    pub(super) fn broadcast(&mut self, dst: u8, mem: Rm, mask: u8) {
        self.evex(MAP_0F38, 0x19, dst, 0, mem, mask, false, None);
    }

    /// `valignq dst, hi, lo, imm`: lanes `imm..imm + 8` of `hi:lo` (`hi` the upper eight).
    pub(super) fn align(&mut self, dst: u8, hi: u8, lo: Rm, imm: u8) {
        self.evex(MAP_0F3A, 0x03, dst, hi, lo, 0, false, Some(imm));
    }

    /// `vpermq dst{k}, idx, src`: lane `i` of `dst` takes lane `idx[i]` of `src` where `k`
    /// has bit `i` (merging).
    pub(super) fn permute(&mut self, dst: u8, idx: u8, src: u8, mask: u8) {
        self.evex(MAP_0F38, 0x36, dst, idx, Rm::Z(src), mask, false, None);
    }

    /// `vfmadd231pd acc, a, b`: `acc = a * b + acc`, rounded once.
    pub(super) fn fmadd231(&mut self, acc: u8, a: u8, b: Rm) {
        self.evex(MAP_0F38, 0xB8, acc, a, b, 0, false, None);
    }

    /// `vfnmadd231pd acc, a, b`: `acc = -(a * b) + acc`, rounded once.
    pub(super) fn fnmadd231(&mut self, acc: u8, a: u8, b: Rm) {
        self.evex(MAP_0F38, 0xBC, acc, a, b, 0, false, None);
    }

    /// `vpandq dst, a, b`.
    pub(super) fn and(&mut self, dst: u8, a: u8, b: Rm) {
        self.evex(MAP_0F, 0xDB, dst, a, b, 0, false, None);
    }

    /// `vpsubq dst, a, b`.
    pub(super) fn sub_q(&mut self, dst: u8, a: u8, b: Rm) {
        self.evex(MAP_0F, 0xFB, dst, a, b, 0, false, None);
    }

    /// `vpternlogq dst, a, b, imm`: each bit `f(dst, a, b)` by the truth table `imm`.
    pub(super) fn ternlog(&mut self, dst: u8, a: u8, b: Rm, imm: u8) {
        self.evex(MAP_0F3A, 0x25, dst, a, b, 0, false, Some(imm));
    }

    /// `vpcmpuq k, a, b, pred`: unsigned compare of 64-bit lanes into an opmask.
    pub(super) fn cmp_uq(&mut self, k: u8, a: u8, b: Rm, pred: u8) {
        self.evex(MAP_0F3A, 0x1E, k, a, b, 0, false, Some(pred));
    }

    /// `vptestmq k{mask}, a, b`: bit `i` where lane `i` of `a & b` is nonzero (and `mask` has it).
    pub(super) fn test_q(&mut self, k: u8, a: u8, b: Rm, mask: u8) {
        self.evex(MAP_0F38, 0x27, k, a, b, mask, false, None);
    }

    /// `kortestw k, k` (ZF where `k` is all zeros).
    pub(super) fn kortest(&mut self, k: u8) {
        self.bytes.extend_from_slice(&[0xC5, 0xF8, 0x98, 0xC0 | (k << 3) | k]);
    }

    /// `mov eax, imm32; kmovw k, eax`.
    pub(super) fn set_mask(&mut self, k: u8, bits: u16) {
        self.bytes.push(0xB8);
        self.bytes.extend_from_slice(&u32::from(bits).to_le_bytes());
        self.bytes.extend_from_slice(&[0xC5, 0xF8, 0x92, 0xC0 | (k << 3)]);
    }

    /// `kmovw k, word [r8 + disp]`.
    pub(super) fn mask_from_r8(&mut self, k: u8, disp: i32) {
        self.bytes.extend_from_slice(&[0xC4, 0xC1, 0x78, 0x90, 0x80 | (k << 3)]);
        self.bytes.extend_from_slice(&disp.to_le_bytes());
    }

    /// `cmp qword [r8 + disp], 0`.
    pub(super) fn cmp_zero_r8(&mut self, disp: i32) {
        self.bytes.extend_from_slice(&[0x49, 0x83, 0xB8]);
        self.bytes.extend_from_slice(&disp.to_le_bytes());
        self.bytes.push(0);
    }

    /// `add rdi, imm32`.
    pub(super) fn add_rdi(&mut self, imm: i32) {
        self.bytes.extend_from_slice(&[0x48, 0x81, 0xC7]);
        self.bytes.extend_from_slice(&imm.to_le_bytes());
    }

    /// `dec rcx`.
    pub(super) fn dec_rcx(&mut self) {
        self.bytes.extend_from_slice(&[0x48, 0xFF, 0xC9]);
    }

    /// `test rcx, rcx`.
    pub(super) fn test_rcx(&mut self) {
        self.bytes.extend_from_slice(&[0x48, 0x85, 0xC9]);
    }

    /// A jump (`0x84` je, `0x85` jne, `0xE9` jmp) to a target to come.
    pub(super) fn jump(&mut self, cond: u8) -> Fixup {
        if cond == 0xE9 {
            self.bytes.push(0xE9);
        } else {
            self.bytes.extend_from_slice(&[0x0F, cond]);
        }
        self.bytes.extend_from_slice(&[0; 4]);
        Fixup(self.bytes.len())
    }

    /// A jump back to `target` (`0x85`: jne).
    pub(super) fn jump_back(&mut self, cond: u8, target: usize) {
        let f = self.jump(cond);
        self.patch_to(f, target);
    }

    /// Points `f` here.
    pub(super) fn land(&mut self, f: Fixup) {
        let here = self.bytes.len();
        self.patch_to(f, here);
    }

    fn patch_to(&mut self, f: Fixup, target: usize) {
        let rel = (target as i64 - f.0 as i64) as i32;
        self.bytes[f.0 - 4..f.0].copy_from_slice(&rel.to_le_bytes());
    }

    /// `vzeroupper; ret`.
    pub(super) fn ret(&mut self) {
        self.bytes.extend_from_slice(&[0xC5, 0xF8, 0x77, 0xC3]);
    }
}

/// Machine code in pages of its own, readable and executable, never writable once filled.
pub(super) struct Executable {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pages are only read (executed) after `Executable::new` returns.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

impl Executable {
    /// `bytes` in fresh pages, or none where the system refuses them.
    #[cfg(all(target_arch = "x86_64", unix))]
    pub(super) fn new(bytes: &[u8]) -> Option<Executable> {
        let len = bytes.len().max(1);
        // SAFETY: a fresh private anonymous mapping, written within its length, then made
        // read-and-execute; the pointer is checked before use.
        unsafe {
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if ptr == libc::MAP_FAILED {
                return None;
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.cast::<u8>(), bytes.len());
            if libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_EXEC) != 0 {
                libc::munmap(ptr, len);
                return None;
            }
            Some(Executable { ptr: ptr.cast(), len })
        }
    }

    #[cfg(not(all(target_arch = "x86_64", unix)))]
    pub(super) fn new(_bytes: &[u8]) -> Option<Executable> {
        None
    }

    /// The address `offset` bytes in.
    pub(super) fn at(&self, offset: usize) -> *const u8 {
        debug_assert!(offset < self.len);
        // SAFETY: within the mapping.
        unsafe { self.ptr.add(offset) }
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        #[cfg(all(target_arch = "x86_64", unix))]
        // SAFETY: the mapping `new` made, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encodings of the loops' instructions, against the bytes GNU as 2.x gives for them
    /// (with `{disp32}`, as the loops encode every displacement).
    #[test]
    fn instructions_encode_as_the_assembler_does() {
        type Emit = Box<dyn Fn(&mut Asm)>;
        let cases: Vec<(Emit, &[u8])> = vec![
            // vaddpd zmm1, zmm2, zmm3
            (Box::new(|a| a.arith(Arith::Add, 1, 2, Rm::Z(3))), &[0x62, 0xF1, 0xED, 0x48, 0x58, 0xCB]),
            // vmulpd zmm17, zmm30, zmm9
            (Box::new(|a| a.arith(Arith::Mul, 17, 30, Rm::Z(9))), &[0x62, 0xC1, 0x8D, 0x40, 0x59, 0xC9]),
            // vdivpd zmm0, zmm1, QWORD PTR [rsi+0x1f40]{1to8}
            (
                Box::new(|a| a.arith(Arith::Div, 0, 1, Rm::Bcst(Gpr::Rsi, 0x1f40))),
                &[0x62, 0xF1, 0xF5, 0x58, 0x5E, 0x86, 0x40, 0x1F, 0x00, 0x00],
            ),
            // vmovupd zmm28{k1}{z}, ZMMWORD PTR [rdi+0x100]
            (
                Box::new(|a| a.load(28, Rm::Mem(Gpr::Rdi, 0x100), 1)),
                &[0x62, 0x61, 0xFD, 0xC9, 0x10, 0xA7, 0x00, 0x01, 0x00, 0x00],
            ),
            // vmovupd ZMMWORD PTR [rdx+0x40], zmm4
            (
                Box::new(|a| a.store(Rm::Mem(Gpr::Rdx, 0x40), 4, 0)),
                &[0x62, 0xF1, 0xFD, 0x48, 0x11, 0xA2, 0x40, 0, 0, 0],
            ),
            // valignq zmm20, zmm4, ZMMWORD PTR [rdx+0x80], 0x7
            (
                Box::new(|a| a.align(20, 4, Rm::Mem(Gpr::Rdx, 0x80), 7)),
                &[0x62, 0xE3, 0xDD, 0x48, 0x03, 0xA2, 0x80, 0, 0, 0, 0x07],
            ),
            // vfnmadd231pd zmm30, zmm29, QWORD PTR [r8+0x20]{1to8}
            (
                Box::new(|a| a.fnmadd231(30, 29, Rm::Bcst(Gpr::R8, 0x20))),
                &[0x62, 0x42, 0x95, 0x50, 0xBC, 0xB0, 0x20, 0, 0, 0],
            ),
            // vpcmpuq k2, zmm29, QWORD PTR [r8+0x10]{1to8}, 0x6
            (
                Box::new(|a| a.cmp_uq(2, 29, Rm::Bcst(Gpr::R8, 0x10), 6)),
                &[0x62, 0xD3, 0x95, 0x50, 0x1E, 0x90, 0x10, 0, 0, 0, 0x06],
            ),
            // vptestmq k2{k2}, zmm3, QWORD PTR [r8+0x0]{1to8}
            (Box::new(|a| a.test_q(2, 3, Rm::Bcst(Gpr::R8, 0), 2)), &[0x62, 0xD2, 0xE5, 0x5A, 0x27, 0x90, 0, 0, 0, 0]),
            // vpermq zmm5{k3}, zmm28, zmm7
            (Box::new(|a| a.permute(5, 28, 7, 3)), &[0x62, 0xF2, 0x9D, 0x43, 0x36, 0xEF]),
            // vbroadcastsd zmm5{k2}, QWORD PTR [r8+0x48]
            (
                Box::new(|a| a.broadcast(5, Rm::Mem(Gpr::R8, 0x48), 2)),
                &[0x62, 0xD2, 0xFD, 0x4A, 0x19, 0xA8, 0x48, 0, 0, 0],
            ),
            // vpternlogq zmm31, zmm29, QWORD PTR [r8+0x18]{1to8}, 0xf8
            (
                Box::new(|a| a.ternlog(31, 29, Rm::Bcst(Gpr::R8, 0x18), 0xF8)),
                &[0x62, 0x43, 0x95, 0x50, 0x25, 0xB8, 0x18, 0, 0, 0, 0xF8],
            ),
            // vfmadd231pd zmm31, zmm30, QWORD PTR [r8+0x28]{1to8}
            (
                Box::new(|a| a.fmadd231(31, 30, Rm::Bcst(Gpr::R8, 0x28))),
                &[0x62, 0x42, 0x8D, 0x50, 0xB8, 0xB8, 0x28, 0, 0, 0],
            ),
            // vpandq zmm29, zmm3, QWORD PTR [r8+0x0]{1to8}
            (Box::new(|a| a.and(29, 3, Rm::Bcst(Gpr::R8, 0))), &[0x62, 0x41, 0xE5, 0x58, 0xDB, 0xA8, 0, 0, 0, 0]),
            // vpsubq zmm29, zmm29, QWORD PTR [r8+0x8]{1to8}
            (Box::new(|a| a.sub_q(29, 29, Rm::Bcst(Gpr::R8, 8))), &[0x62, 0x41, 0x95, 0x50, 0xFB, 0xA8, 8, 0, 0, 0]),
            // vmovapd zmm3, zmm31
            (Box::new(|a| a.mov(3, 31)), &[0x62, 0x91, 0xFD, 0x48, 0x28, 0xDF]),
            // vmovapd zmm28{k1}{z}, zmm5
            (Box::new(|a| a.mov_masked(28, 5, 1, true)), &[0x62, 0x61, 0xFD, 0xC9, 0x28, 0xE5]),
            // vmovapd zmm7{k3}, zmm31
            (Box::new(|a| a.mov_masked(7, 31, 3, false)), &[0x62, 0x91, 0xFD, 0x4B, 0x28, 0xFF]),
            // vaddpd zmm31{k3}, zmm31, zmm29
            (Box::new(|a| a.arith_masked(Arith::Add, 31, 31, Rm::Z(29), 3)), &[0x62, 0x01, 0x85, 0x43, 0x58, 0xFD]),
            // kortestw k2, k2
            (Box::new(|a| a.kortest(2)), &[0xC5, 0xF8, 0x98, 0xD2]),
            // mov eax, 0x81; kmovw k3, eax
            (Box::new(|a| a.set_mask(3, 0x81)), &[0xB8, 0x81, 0, 0, 0, 0xC5, 0xF8, 0x92, 0xD8]),
            // kmovw k1, WORD PTR [r8+0x20]
            (Box::new(|a| a.mask_from_r8(1, 0x20)), &[0xC4, 0xC1, 0x78, 0x90, 0x88, 0x20, 0, 0, 0]),
            // cmp qword ptr [r8+0x1000], 0
            (Box::new(|a| a.cmp_zero_r8(0x1000)), &[0x49, 0x83, 0xB8, 0, 0x10, 0, 0, 0]),
            // add rdi, 256; dec rcx; test rcx, rcx; vzeroupper; ret
            (
                Box::new(|a| {
                    a.add_rdi(256);
                    a.dec_rcx();
                    a.test_rcx();
                    a.ret()
                }),
                &[0x48, 0x81, 0xC7, 0, 1, 0, 0, 0x48, 0xFF, 0xC9, 0x48, 0x85, 0xC9, 0xC5, 0xF8, 0x77, 0xC3],
            ),
            // vbroadcastsd zmm28, QWORD PTR [rsi+0x20]
            (
                Box::new(|a| a.broadcast(28, Rm::Mem(Gpr::Rsi, 0x20), 0)),
                &[0x62, 0x62, 0xFD, 0x48, 0x19, 0xA6, 0x20, 0, 0, 0],
            ),
            // vsubpd zmm3, zmm28, ZMMWORD PTR [rdi+0x1f40]
            (
                Box::new(|a| a.arith(Arith::Sub, 3, 28, Rm::Mem(Gpr::Rdi, 0x1f40))),
                &[0x62, 0xF1, 0x9D, 0x40, 0x5C, 0x9F, 0x40, 0x1F, 0, 0],
            ),
        ];
        for (k, (emit, want)) in cases.iter().enumerate() {
            let mut a = Asm::default();
            emit(&mut a);
            assert_eq!(a.bytes, *want, "instruction {k}");
        }
    }
}

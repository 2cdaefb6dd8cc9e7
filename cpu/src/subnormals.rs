//! Subnormal numbers flushed to zero, by the thread's floating-point mode: the `cpu-jit-flush`
//! device, which computes as XLA's CPU code does.
//!
//! An x86 core handles a subnormal operand or result of a multiply or a fused multiply-add by a
//! microcode assist of about a hundred cycles. A program whose values decay through the
//! subnormal range pays it on every op: ode's state vector does (x_i at time t is about
//! t^i / i!), and on this machine a third of its compiled primal was assists. XLA's CPU
//! runtime sets FTZ (results below 2^-1022 become zero) and DAZ (such operands read as zero) on
//! the threads that run its code, so JAX's jitted functions never pay it: under JAX,
//! `1e-310 * 1.0` is `0.0`. The engine's devices keep IEEE arithmetic, subnormals and all; this
//! mode is its own device, so that a side-by-side with JAX can be made in JAX's arithmetic and
//! says so by the device's name.
//!
//! The mode is per thread (MXCSR), so the device sets it on every thread that computes for it:
//! its worker pools' threads when they start ([`flush_this_thread`] as their start handler) and
//! the calling thread for the span of each call into the device ([`Mode`], restoring the
//! caller's mode after). Rust's code generation assumes the default mode, which can only show
//! where a constant is folded at compile time; the kernels fold none that a subnormal can reach.

/// MXCSR's FTZ (bit 15) and DAZ (bit 6).
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = 0x8040;

/// Whether this CPU can flush subnormals (every x86-64 CPU has FTZ and DAZ; others are not
/// supported by this mode).
pub fn available() -> bool {
    cfg!(target_arch = "x86_64")
}

#[cfg(target_arch = "x86_64")]
fn mode() -> u32 {
    let mut csr: u32 = 0;
    // SAFETY: STMXCSR stores the 32-bit MXCSR into the local.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags)) };
    csr
}

#[cfg(target_arch = "x86_64")]
fn set_mode(csr: u32) {
    // SAFETY: LDMXCSR loads a value read by STMXCSR with only FTZ and DAZ changed, both bits
    // every x86-64 CPU defines (no reserved bit is set, so it cannot fault).
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, readonly, preserves_flags)) };
}

/// Whether the calling thread flushes subnormals now.
pub fn flushing() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        mode() & FTZ_DAZ == FTZ_DAZ
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Sets the calling thread to flush subnormals for the rest of its life: a flushing device's
/// worker threads, as their pool's start handler.
pub fn flush_this_thread() {
    #[cfg(target_arch = "x86_64")]
    set_mode(mode() | FTZ_DAZ);
}

/// The calling thread in one mode (flushing subnormals or not) while this lives, then back
/// to its mode before.
#[must_use = "the mode is restored when the guard drops"]
pub struct Mode {
    #[cfg(target_arch = "x86_64")]
    before: u32,
}

impl Mode {
    /// The calling thread flushing subnormals when `flush`, keeping them (IEEE) otherwise; a
    /// guard only where that changed the mode (a thread already in it pays one read of the
    /// control register). A device enters its mode around each op it runs on the caller's
    /// thread, so that an IEEE device computes IEEE inside a flushing device's span and the
    /// other way round.
    pub fn enter(flush: bool) -> Option<Mode> {
        #[cfg(target_arch = "x86_64")]
        {
            let before = mode();
            let want = if flush { before | FTZ_DAZ } else { before & !FTZ_DAZ };
            (want != before).then(|| {
                set_mode(want);
                Mode { before }
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = flush;
            None
        }
    }
}

impl Drop for Mode {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        set_mode(self.before);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The product of a subnormal, through a function the compiler cannot fold.
    #[inline(never)]
    fn times(a: f64, b: f64) -> f64 {
        std::hint::black_box(a) * std::hint::black_box(b)
    }

    #[test]
    fn a_guard_flushes_subnormals_and_restores_the_mode() {
        let tiny = 1e-310;
        assert!(!flushing());
        assert_eq!(times(tiny, 1.0), tiny, "IEEE: a subnormal times one is itself");
        assert!(Mode::enter(false).is_none(), "already IEEE: nothing to change");
        {
            let _flush = Mode::enter(true).expect("the mode changes");
            assert!(flushing());
            // DAZ: the operand reads as zero; FTZ: a result below 2^-1022 becomes zero.
            assert_eq!(times(tiny, 1.0), 0.0);
            assert_eq!(times(f64::MIN_POSITIVE, 0.5), 0.0);
            assert_eq!(times(f64::MIN_POSITIVE, 2.0), 2.0 * f64::MIN_POSITIVE, "normal numbers are untouched");
            assert!(Mode::enter(true).is_none(), "already flushing");
            {
                // An IEEE device's op inside a flushing span.
                let _ieee = Mode::enter(false).expect("the mode changes");
                assert!(!flushing());
                assert_eq!(times(tiny, 1.0), tiny);
            }
            assert!(flushing(), "back to flushing");
            assert_eq!(times(tiny, 1.0), 0.0);
        }
        assert!(!flushing());
        assert_eq!(times(f64::MIN_POSITIVE, 0.5), f64::MIN_POSITIVE / 2.0);
    }

    #[test]
    fn a_flushed_thread_stays_flushed_and_others_do_not() {
        let flushed = std::thread::spawn(|| {
            flush_this_thread();
            (flushing(), times(1e-310, 1.0))
        })
        .join()
        .unwrap();
        assert_eq!(flushed, (true, 0.0));
        assert!(!flushing());
        assert_eq!(times(1e-310, 1.0), 1e-310);
    }
}

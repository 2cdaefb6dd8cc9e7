//! NVRTC compile test: every CUDA program (the shared kernel source behind `prelude_cuda.h`, one
//! per dtype, index dtype and operator) compiles to PTX for sm_80, and the PTX holds exactly the kernels
//! the kernel device launches. This needs only libnvrtc (in CI: the pinned
//! nvidia-cuda-nvrtc-cu12 wheel, see scripts/setup-nvrtc.sh), never libcuda or a GPU: it is
//! how CUDA code is kept compiling on machines that cannot run it.
//!
//! Without NVRTC the test prints why and passes, unless `ADGAUGE_REQUIRE` (comma-separated)
//! contains `nvrtc`: then the skip is a failure.

use std::time::Instant;

use adgauge_kernels::cuda::{compile_ptx, nvrtc_available};
use adgauge_kernels::kernel_source::kernel_names;
use adgauge_ops::general;
use adgauge_ops::{DType, IndexDType};

/// An Ampere target: any recent architecture would do; this one is fixed so results do not
/// depend on the NVRTC version's default.
const ARCH: &str = "sm_80";

/// The kernel names declared as entry points in PTX text (`.visible .entry NAME(`).
fn entries(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| l.split(".entry ").nth(1))
        .map(|rest| rest.split(['(', ' ']).next().unwrap_or(rest).trim())
        .collect()
}

/// The parameter types (`.u64`, `.u32`, `.f32`, ...) of kernel `name` in PTX text.
fn params<'p>(ptx: &'p str, name: &str) -> Vec<&'p str> {
    let head = format!(".entry {name}(");
    ptx.lines()
        .skip_while(|l| !l.contains(&head))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with(')'))
        .filter_map(|l| l.trim().strip_prefix(".param ")?.split_whitespace().next())
        .collect()
}

#[test]
fn entries_and_params_are_read_from_ptx_text() {
    let ptx = "// x\n.visible .entry fill(\n\t.param .u64 fill_param_0,\n\t.param .f32 fill_param_1\n)\n{\n}\n\
               .visible .entry hist_local(\n\t.param .u32 hist_local_param_0\n)\n";
    assert_eq!(entries(ptx), ["fill", "hist_local"]);
    assert_eq!(params(ptx, "fill"), [".u64", ".f32"]);
    assert_eq!(params(ptx, "hist_local"), [".u32"]);
}

#[test]
fn every_cuda_program_compiles_to_ptx_with_every_kernel() {
    let version = match nvrtc_available() {
        Ok(v) => v,
        Err(why) => {
            adgauge_testkit::skip(
                "nvrtc",
                format!("NVRTC is unavailable: {why}"),
                "LD_LIBRARY_PATH=\"$(scripts/setup-nvrtc.sh)\" (NVRTC from a pip wheel, no GPU needed)",
            );
            return;
        }
    };
    eprintln!("NVRTC {version}, target {ARCH}");
    let mut failures = Vec::new();
    let mut programs = 0;
    for dt in DType::ALL {
        let mut want = kernel_names(dt);
        want.sort_unstable();
        // The programs the kernel devices build: kernel_source::program_op maps every operator,
        // special or general, to one of these.
        for (it, op) in IndexDType::ALL.into_iter().flat_map(|it| general::ALL.iter().map(move |op| (it, op))) {
            let started = Instant::now();
            match compile_ptx(dt, it, op, ARCH) {
                Ok(ptx) => {
                    programs += 1;
                    eprintln!(
                        "{dt} {it} {:<12} {:>7.0} ms, {} bytes of PTX",
                        op.name,
                        started.elapsed().as_secs_f64() * 1e3,
                        ptx.len()
                    );
                    if !ptx.contains(&format!(".target {ARCH}")) {
                        failures.push(format!("{dt} {it} {}: the PTX does not target {ARCH}", op.name));
                    }
                    // Local memory: OpenCL's `LOCAL T *sub` argument is, on CUDA, the launch's
                    // dynamic shared memory plus an int placeholder at the same position (the
                    // launcher passes Arg::Local as a 4-byte 0), so host argument lists serve both.
                    if !ptx.contains(".extern .shared .align 16 .b8 adgauge_shared_[]") {
                        failures.push(format!("{dt} {it} {}: no dynamic shared memory declared", op.name));
                    }
                    let hist_local = params(&ptx, "hist_local");
                    if hist_local != [".u64", ".u64", ".u64", ".u64", ".u64", ".u32", ".u64"] {
                        failures.push(format!("{dt} {it} {}: hist_local parameters {hist_local:?}", op.name));
                    }
                    // The tiled matrix product stages both tiles in the one dynamic block.
                    let matmul = params(&ptx, "matmul_tiled");
                    let want_mm = [
                        ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".u32", ".u32", ".u64", ".u64",
                        ".u64", ".u64", ".u64", ".u32",
                    ];
                    if matmul != want_mm {
                        failures.push(format!("{dt} {it} {}: matmul_tiled parameters {matmul:?}", op.name));
                    }
                    let mut got = entries(&ptx);
                    got.sort_unstable();
                    if got != want {
                        failures.push(format!("{dt} {it} {}: PTX entries {got:?}, kernel_names {want:?}", op.name));
                    }
                }
                Err(log) => failures.push(format!("{dt} {it} {}: {log}", op.name)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} programs failed:\n{}",
        failures.len(),
        4 * general::ALL.len(),
        failures.join("\n")
    );
    assert_eq!(programs, 4 * general::ALL.len());
}

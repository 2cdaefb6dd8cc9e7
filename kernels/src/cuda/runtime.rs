//! The process-wide CUDA runtime (cudarc): one context and stream on the selected device, NVRTC
//! compilation of the shared kernel source per (dtype, operator) into a module cache, and kernel
//! launches. This is all the CUDA-specific host code: the kernel device in [`crate::gpu`] does
//! the rest.
//!
//! libcuda and libnvrtc are loaded at run time. cudarc panics when a library or a symbol is
//! missing, so presence is checked first (`is_culib_present`) and every first call into a
//! library runs under [`quietly`] (catch_unwind with the panic message silenced): a missing
//! driver is a reported state, never a crash or a backtrace on the terminal.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, UnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use crate::general::GeneralOp;
use crate::gpu::{Arg, KernelRuntime};
use crate::kernel_source::{self, Dialect};
use crate::{DType, HistOp, IndexDType, OpError, Result};

/// The environment variable that picks the CUDA device by ordinal (default 0).
pub const DEVICE_ENV: &str = "ADGAUGE_CUDA_DEVICE";

/// Threads per block when the caller does not ask for a work-group size.
const BLOCK: usize = 256;

/// Runs `f`, turning a panic into `Err(message)` without printing it (the default hook would
/// print "thread panicked at ..." for what is an expected state, e.g. no driver). The hook is
/// process-wide: a lock serialises callers (so `f` must not call `quietly` itself), and a panic
/// of another thread during these few calls would go unprinted too (it still unwinds and fails
/// as usual).
fn quietly<T>(f: impl FnOnce() -> T + UnwindSafe) -> std::result::Result<T, String> {
    static HOOK: Mutex<()> = Mutex::new(());
    let _guard = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(f);
    std::panic::set_hook(previous);
    result.map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into())
    })
}

/// The NVRTC version (`12.8`), or why NVRTC cannot be used. Never touches libcuda.
pub fn nvrtc_available() -> std::result::Result<String, String> {
    static NVRTC: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the library names cudarc knows; no symbol is called.
            if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return Err("libnvrtc.so.12 not found (NVRTC, CUDA's runtime compiler: install the CUDA \
                            toolkit, or run scripts/setup-nvrtc.sh and put the folder it prints on \
                            LD_LIBRARY_PATH)"
                    .into());
            }
            let (mut major, mut minor) = (0, 0);
            // SAFETY: nvrtcVersion writes two ints through the valid pointers given.
            let r = quietly(AssertUnwindSafe(|| unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }))
                .map_err(|e| format!("NVRTC found but unusable: {e}"))?;
            if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
                return Err(format!("NVRTC found but nvrtcVersion failed: {r:?}"));
            }
            Ok(format!("{major}.{minor}"))
        })
        .clone()
}

fn compile_error_text(e: CompileError) -> String {
    match e {
        CompileError::CompileError { nvrtc, log, .. } => format!("{nvrtc:?}:\n{}", log.to_string_lossy()),
        other => format!("{other:?}"),
    }
}

fn compile(src: &str, name: String, arch: &str) -> std::result::Result<Ptx, String> {
    nvrtc_available()?;
    let opts =
        CompileOptions { options: vec![format!("--gpu-architecture={arch}")], name: Some(name), ..Default::default() };
    quietly(AssertUnwindSafe(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts)))?.map_err(compile_error_text)
}

/// Compiles the CUDA program of (dtype, index dtype, operator) to PTX for `arch` (e.g. `sm_80`) with NVRTC and
/// returns the PTX text. Needs only libnvrtc, never libcuda or a GPU: this is how machines
/// without a GPU check that every CUDA kernel compiles.
pub fn compile_ptx(dtype: DType, index: IndexDType, op: &GeneralOp, arch: &str) -> std::result::Result<String, String> {
    let src = kernel_source::program_source(Dialect::Cuda, dtype, index, op);
    let ptx = compile(&src, format!("adgauge_{dtype}_{index}_{}.cu", op.name), arch)?;
    quietly(AssertUnwindSafe(|| ptx.to_src()))
}

/// A compiled (dtype, operator) program and the kernels looked up in it so far.
struct Prog {
    module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
}

pub struct CudaRuntime {
    pub ordinal: usize,
    pub device_name: String,
    /// Compute capability (major, minor); programs are compiled for it.
    pub capability: (i32, i32),
    pub sm_count: usize,
    pub nvrtc_version: String,
    max_threads: usize,
    shared_mem: usize,
    ctx: Arc<CudaContext>,
    /// Every command goes to this one stream, in order.
    stream: Arc<CudaStream>,
    /// Programs by (dtype, operator name); also serialises launches.
    programs: Mutex<HashMap<(DType, IndexDType, &'static str), Prog>>,
    compile_time: Mutex<Duration>,
}

static RUNTIME: OnceLock<std::result::Result<Arc<CudaRuntime>, String>> = OnceLock::new();

/// The process-wide runtime, started on first use (one context per process).
pub fn runtime() -> std::result::Result<Arc<CudaRuntime>, String> {
    RUNTIME.get_or_init(|| CudaRuntime::start().map(Arc::new)).clone()
}

fn drv_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> OpError + '_ {
    move |e| OpError::Device(format!("CUDA {what}: {e}"))
}

impl CudaRuntime {
    fn start() -> std::result::Result<CudaRuntime, String> {
        // SAFETY: only tries to dlopen the library names cudarc knows; no symbol is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("libcuda.so not found (no NVIDIA driver)".into());
        }
        let ordinal = match std::env::var(DEVICE_ENV) {
            Ok(s) if !s.trim().is_empty() => s
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("{DEVICE_ENV}={s} is not a device ordinal (0, 1, ...)"))?,
            _ => 0,
        };
        let ctx = quietly(|| CudaContext::new(ordinal))
            .map_err(|p| format!("the CUDA driver library is unusable: {p}"))?
            .map_err(|e| format!("cannot open CUDA device {ordinal}: {e}"))?;
        // A device without NVRTC cannot build programs: unavailable, with the reason.
        let nvrtc_version = nvrtc_available()?;
        let attr = |a: CUdevice_attribute| quietly(AssertUnwindSafe(|| ctx.attribute(a))).ok().and_then(|r| r.ok());
        let device_name = quietly(AssertUnwindSafe(|| ctx.name()))
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or_else(|| format!("device {ordinal}"));
        let capability = quietly(AssertUnwindSafe(|| ctx.compute_capability()))
            .map_err(|p| format!("the CUDA driver library is unusable: {p}"))?
            .map_err(|e| format!("cannot query CUDA device {ordinal}: {e}"))?;
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap_or(1).max(1) as usize;
        let max_threads =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK).unwrap_or(256).max(1) as usize;
        let shared_mem =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK).unwrap_or(0).max(0) as usize;
        // SAFETY: every buffer and launch of this runtime goes to its one stream, in order, so
        // cudarc's per-buffer events (which order work across streams) are not needed.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        Ok(CudaRuntime {
            ordinal,
            device_name,
            capability,
            sm_count,
            nvrtc_version,
            max_threads,
            shared_mem,
            ctx,
            stream,
            programs: Mutex::new(HashMap::new()),
            compile_time: Mutex::new(Duration::ZERO),
        })
    }

    /// The (dtype, index dtype, op) program from the cache, compiled (for this device's compute capability)
    /// and loaded on first use.
    fn program<'p>(
        &self,
        programs: &'p mut HashMap<(DType, IndexDType, &'static str), Prog>,
        dtype: DType,
        index: IndexDType,
        op: HistOp,
    ) -> Result<&'p mut Prog> {
        let gop = kernel_source::program_op(op);
        match programs.entry((dtype, index, gop.name)) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let src = kernel_source::program_source(Dialect::Cuda, dtype, index, gop);
                let arch = format!("compute_{}{}", self.capability.0, self.capability.1);
                let started = Instant::now();
                let ptx = compile(&src, format!("adgauge_{dtype}_{index}_{}.cu", gop.name), &arch).map_err(|log| {
                    OpError::Device(format!("NVRTC build of ({dtype}, {index}, {}) failed: {log}", gop.name))
                })?;
                let module = self.ctx.load_module(ptx).map_err(|err| {
                    OpError::Device(format!("CUDA module load of ({dtype}, {index}, {}): {err}", gop.name))
                })?;
                *self.compile_time.lock().unwrap_or_else(|e| e.into_inner()) += started.elapsed();
                Ok(e.insert(Prog { module, functions: HashMap::new() }))
            }
        }
    }

    fn function<'p>(prog: &'p mut Prog, name: &'static str) -> Result<&'p CudaFunction> {
        if !prog.functions.contains_key(name) {
            let f = prog.module.load_function(name).map_err(drv_err(name))?;
            prog.functions.insert(name, f);
        }
        prog.functions.get(name).ok_or_else(|| OpError::Device(format!("CUDA kernel {name} vanished")))
    }
}

/// A scalar argument's storage: cudarc passes arguments by address, so each must live until
/// the launch call returns.
enum Scalar {
    None,
    I64(i64),
    I32(i32),
    F32(f32),
    F64(f64),
}

impl KernelRuntime for CudaRuntime {
    type Raw = CudaSlice<u8>;

    const ENGINE: &'static str = "cuda";

    fn get() -> std::result::Result<Arc<Self>, String> {
        runtime()
    }

    fn describe(&self) -> String {
        format!("device {}: {}, sm_{}{}", self.ordinal, self.device_name, self.capability.0, self.capability.1)
    }

    fn compute_units(&self) -> usize {
        self.sm_count
    }

    fn max_group(&self) -> usize {
        self.max_threads
    }

    fn local_mem(&self) -> usize {
        self.shared_mem
    }

    /// Every CUDA device runs double precision.
    fn has_f64(&self) -> bool {
        true
    }

    fn compile_time(&self) -> Duration {
        *self.compile_time.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn alloc_bytes(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        // SAFETY: the memory is uninitialised; the kernel device writes every buffer (upload,
        // copy or a kernel) before reading it, as on OpenCL.
        unsafe { self.stream.alloc::<u8>(bytes) }.map_err(drv_err("allocation"))
    }

    fn write(&self, dst: &mut CudaSlice<u8>, src: &[u8]) -> Result<()> {
        let n = src.len();
        let dst_len = dst.len();
        let mut view = dst
            .try_slice_mut(0..n)
            .ok_or_else(|| OpError::Device(format!("CUDA upload of {n} bytes into a buffer of {dst_len}")))?;
        self.stream.memcpy_htod(src, &mut view).map_err(drv_err("upload"))?;
        // Pageable host memory: the copy may still read `src` after the call; wait for it.
        self.stream.synchronize().map_err(drv_err("upload"))
    }

    fn read(&self, src: &CudaSlice<u8>, dst: &mut [u8]) -> Result<()> {
        let n = dst.len();
        let view = src
            .try_slice(0..n)
            .ok_or_else(|| OpError::Device(format!("CUDA download of {n} bytes from a buffer of {}", src.len())))?;
        self.stream.memcpy_dtoh(&view, dst).map_err(drv_err("download"))?;
        self.stream.synchronize().map_err(drv_err("download"))
    }

    fn copy_bytes(&self, src: &CudaSlice<u8>, dst: &mut CudaSlice<u8>, bytes: usize) -> Result<()> {
        let (src_len, dst_len) = (src.len(), dst.len());
        let too_small =
            || OpError::Device(format!("CUDA copy of {bytes} bytes between buffers of {src_len} and {dst_len}"));
        let from = src.try_slice(0..bytes).ok_or_else(too_small)?;
        let mut to = dst.try_slice_mut(0..bytes).ok_or_else(too_small)?;
        self.stream.memcpy_dtod(&from, &mut to).map_err(drv_err("copy"))
    }

    fn finish(&self) -> Result<()> {
        self.stream.synchronize().map_err(drv_err("synchronize"))
    }

    /// Blocks of `local` threads (256 when not given), ceil(global / block) blocks; `Local`
    /// arguments become the launch's dynamic shared memory and an unused int placeholder.
    fn launch(
        &self,
        dtype: DType,
        op: HistOp,
        index: IndexDType,
        name: &'static str,
        global: usize,
        local: Option<usize>,
        args: &[Arg<'_, CudaSlice<u8>>],
    ) -> Result<()> {
        if global == 0 {
            return Ok(());
        }
        self.check_dtype(dtype)?;
        let block = local.unwrap_or(BLOCK).clamp(1, self.max_threads);
        let grid = u32::try_from(global.div_ceil(block))
            .map_err(|_| OpError::Device(format!("CUDA {name}: {global} threads need too many blocks")))?;
        let scalars: Vec<Scalar> = args
            .iter()
            .map(|a| match a {
                Arg::Buf(_) => Scalar::None,
                Arg::I64(v) => Scalar::I64(*v),
                Arg::I32(v) => Scalar::I32(*v),
                Arg::Val(v, DType::F32) => Scalar::F32(*v as f32),
                Arg::Val(v, DType::F64) => Scalar::F64(*v),
                Arg::Local(_) => Scalar::I32(0),
            })
            .collect();
        let shared: usize = args.iter().map(|a| if let Arg::Local(b) = a { (*b).max(8) } else { 0 }).sum();
        if shared > self.shared_mem {
            return Err(OpError::Device(format!(
                "CUDA {name}: {shared} bytes of shared memory, the device has {}",
                self.shared_mem
            )));
        }
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        let prog = self.program(&mut programs, dtype, index, op)?;
        let func = Self::function(prog, name)?;
        let mut builder = self.stream.launch_builder(func);
        for (a, s) in args.iter().zip(&scalars) {
            if let Arg::Buf(b) = a {
                builder.arg(&b.buf);
                continue;
            }
            match s {
                Scalar::I64(v) => builder.arg(v),
                Scalar::I32(v) => builder.arg(v),
                Scalar::F32(v) => builder.arg(v),
                Scalar::F64(v) => builder.arg(v),
                Scalar::None => &mut builder,
            };
        }
        let cfg =
            LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block as u32, 1, 1), shared_mem_bytes: shared as u32 };
        // SAFETY: argument types and order match the kernel signatures in kernels.cl (the same
        // argument lists run on OpenCL, where the conformance suite checks them; LOCAL_ARG keeps
        // CUDA's positions identical); buffers and scalars outlive the call, and buffers are
        // freed on the same stream, after the kernel.
        unsafe { builder.launch(cfg) }.map_err(drv_err(name))?;
        Ok(())
    }

    fn build(&self, dtype: DType, op: HistOp, index: IndexDType) -> Result<Vec<&'static str>> {
        self.check_dtype(dtype)?;
        let names = kernel_source::kernel_names(dtype);
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        let prog = self.program(&mut programs, dtype, index, op)?;
        for n in &names {
            Self::function(prog, n)?;
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quietly_turns_panics_into_their_messages_and_passes_values_through() {
        assert_eq!(quietly(|| 7), Ok(7));
        assert_eq!(quietly(|| -> i32 { panic!("no {} here", "driver") }), Err("no driver here".to_string()));
        assert_eq!(quietly(|| -> i32 { std::panic::panic_any(3u8) }), Err("unknown panic".to_string()));
        // The hook is restored each time: a second call behaves the same.
        assert_eq!(quietly(|| -> i32 { panic!("again") }), Err("again".to_string()));
    }
}

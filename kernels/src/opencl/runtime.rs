//! The process-wide OpenCL runtime: platform/device selection, one context and queue, the
//! program cache (one program per (dtype, operator), built lazily) and kernel launches.
//!
//! libOpenCL is loaded at run time (opencl3's `dynamic` feature): without it every call returns
//! an error, which becomes the device's "unavailable" reason; nothing here panics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use opencl3::command_queue::{CL_BLOCKING, CommandQueue};
use opencl3::context::Context;
use opencl3::device::{CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, Device as ClDevice};
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE, ClMem};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::cl_mem;

use crate::gpu::{Arg, KernelRuntime};
use crate::kernel_source::{self, Dialect};
use crate::{DType, HistOp, IndexDType, OpError, Result};

/// The environment variable that picks the OpenCL device: an index into the list of all
/// devices of all platforms, or a substring of "platform device" (case-insensitive).
pub const DEVICE_ENV: &str = "ADGAUGE_OPENCL_DEVICE";

fn cl_err(what: &str) -> impl Fn(opencl3::error_codes::ClError) -> OpError + '_ {
    move |e| OpError::Device(format!("OpenCL {what}: {e}"))
}

struct Prog {
    program: Program,
    kernels: HashMap<&'static str, Kernel>,
}

pub struct ClRuntime {
    pub platform: String,
    pub device_name: String,
    pub fp64: bool,
    pub compute_units: usize,
    pub max_group: usize,
    pub local_mem: usize,
    /// Whether the OpenCL device is a CPU (PoCL).
    pub is_cpu: bool,
    context: Context,
    queue: CommandQueue,
    /// Programs by (dtype, operator name); also serialises kernel argument setting and launches.
    programs: Mutex<HashMap<(DType, IndexDType, &'static str), Prog>>,
    compile_time: Mutex<Duration>,
}

// SAFETY: every use of the OpenCL handles goes through `programs`' lock (kernels) or is
// thread-safe per the OpenCL spec (context, queue, buffers).
unsafe impl Send for ClRuntime {}
// SAFETY: as for Send.
unsafe impl Sync for ClRuntime {}

static RUNTIME: OnceLock<std::result::Result<Arc<ClRuntime>, String>> = OnceLock::new();

/// The process-wide runtime, started on first use (one context per process).
pub fn runtime() -> std::result::Result<Arc<ClRuntime>, String> {
    RUNTIME.get_or_init(|| ClRuntime::start().map(Arc::new)).clone()
}

impl ClRuntime {
    fn start() -> std::result::Result<ClRuntime, String> {
        let platforms = get_platforms()
            .map_err(|e| format!("no OpenCL runtime (libOpenCL.so.1 not loadable or no ICD registered): {e}"))?;
        if platforms.is_empty() {
            return Err("no OpenCL platform: the ICD loader found no driver (install e.g. pocl-opencl-icd)".into());
        }
        let mut candidates = Vec::new();
        for p in &platforms {
            let pname = p.name().unwrap_or_else(|_| "?".into());
            for id in p.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default() {
                let d = ClDevice::new(id);
                let dname = d.name().unwrap_or_else(|_| "?".into());
                candidates.push((pname.clone(), dname, d));
            }
        }
        if candidates.is_empty() {
            return Err("OpenCL platforms found but no device".into());
        }
        let pick = match std::env::var(DEVICE_ENV) {
            Ok(sel) if !sel.trim().is_empty() => {
                let sel = sel.trim();
                let found = match sel.parse::<usize>() {
                    Ok(i) => (i < candidates.len()).then_some(i),
                    Err(_) => candidates
                        .iter()
                        .position(|(p, d, _)| format!("{p} {d}").to_lowercase().contains(&sel.to_lowercase())),
                };
                let names: Vec<String> =
                    candidates.iter().enumerate().map(|(i, (p, d, _))| format!("{i}: {p} / {d}")).collect();
                found.ok_or_else(|| format!("{DEVICE_ENV}={sel} matches no OpenCL device ({})", names.join("; ")))?
            }
            _ => 0,
        };
        let (platform, device_name, device) = candidates.swap_remove(pick);
        let fp64 = device.extensions().map(|e| e.contains("cl_khr_fp64")).unwrap_or(false);
        let int64 = device.extensions().map(|e| e.contains("cl_khr_int64_base_atomics")).unwrap_or(false);
        if !int64 {
            return Err(format!("OpenCL device {device_name} lacks cl_khr_int64_base_atomics (needed by histograms)"));
        }
        let compute_units = device.max_compute_units().unwrap_or(1).max(1) as usize;
        let max_group = device.max_work_group_size().unwrap_or(64).max(1);
        let local_mem = device.local_mem_size().unwrap_or(0) as usize;
        let is_cpu = device.dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_CPU != 0);
        let context = Context::from_device(&device)
            .map_err(|e| format!("cannot create an OpenCL context on {device_name}: {e}"))?;
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0)
            .map_err(|e| format!("cannot create an OpenCL queue on {device_name}: {e}"))?;
        Ok(ClRuntime {
            platform,
            device_name,
            fp64,
            compute_units,
            max_group,
            local_mem,
            is_cpu,
            context,
            queue,
            programs: Mutex::new(HashMap::new()),
            compile_time: Mutex::new(Duration::ZERO),
        })
    }

    /// The (dtype, index dtype, op) program from the cache, built on first use.
    fn program<'p>(
        &self,
        programs: &'p mut HashMap<(DType, IndexDType, &'static str), Prog>,
        dtype: DType,
        index: IndexDType,
        op: HistOp,
    ) -> Result<&'p mut Prog> {
        let gop = kernel_source::program_op(op);
        let key = (dtype, index, gop.name);
        match programs.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let src = kernel_source::program_source(Dialect::OpenCl, dtype, index, gop);
                let started = Instant::now();
                let program =
                    Program::create_and_build_from_source(&self.context, &src, "-cl-std=CL1.2").map_err(|log| {
                        OpError::Device(format!("OpenCL build of ({dtype}, {index}, {}) failed: {log}", gop.name))
                    })?;
                *self.compile_time.lock().unwrap_or_else(|e| e.into_inner()) += started.elapsed();
                Ok(e.insert(Prog { program, kernels: HashMap::new() }))
            }
        }
    }
}

impl KernelRuntime for ClRuntime {
    type Raw = Buffer<u8>;

    const ENGINE: &'static str = "opencl";

    fn get() -> std::result::Result<Arc<Self>, String> {
        runtime()
    }

    fn describe(&self) -> String {
        format!("{} / {}", self.platform, self.device_name)
    }

    fn compute_units(&self) -> usize {
        self.compute_units
    }

    fn max_group(&self) -> usize {
        self.max_group
    }

    fn local_mem(&self) -> usize {
        self.local_mem
    }

    fn is_cpu(&self) -> bool {
        self.is_cpu
    }

    fn has_f64(&self) -> bool {
        self.fp64
    }

    fn compile_time(&self) -> Duration {
        *self.compile_time.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_dtype(&self, dtype: DType) -> Result<()> {
        if dtype == DType::F64 && !self.fp64 {
            return Err(OpError::Unsupported(format!(
                "f64 on OpenCL device {}: it lacks cl_khr_fp64",
                self.device_name
            )));
        }
        Ok(())
    }

    fn alloc_bytes(&self, bytes: usize) -> Result<Buffer<u8>> {
        // SAFETY: no host pointer is passed, so OpenCL reads no host memory.
        unsafe { Buffer::<u8>::create(&self.context, CL_MEM_READ_WRITE, bytes, std::ptr::null_mut()) }
            .map_err(cl_err("buffer allocation"))
    }

    fn write(&self, dst: &mut Buffer<u8>, src: &[u8]) -> Result<()> {
        // SAFETY: the write is blocking, so `src` outlives it; the buffer holds at least
        // `src.len()` bytes (the kernel device sizes buffers from the same element count).
        unsafe { self.queue.enqueue_write_buffer(dst, CL_BLOCKING, 0, src, &[]) }.map_err(cl_err("upload"))?;
        Ok(())
    }

    fn read(&self, src: &Buffer<u8>, dst: &mut [u8]) -> Result<()> {
        // SAFETY: the read is blocking, so `dst` outlives it; `src` holds at least `dst.len()`
        // bytes.
        unsafe { self.queue.enqueue_read_buffer(src, CL_BLOCKING, 0, dst, &[]) }.map_err(cl_err("download"))?;
        Ok(())
    }

    fn copy_bytes(&self, src: &Buffer<u8>, dst: &mut Buffer<u8>, bytes: usize) -> Result<()> {
        // SAFETY: both buffers hold at least `bytes` bytes; OpenCL retains them until the copy
        // has run.
        unsafe { self.queue.enqueue_copy_buffer(src, dst, 0, 0, bytes, &[]) }.map_err(cl_err("copy"))?;
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        self.queue.finish().map_err(cl_err("finish"))
    }

    /// Work-items are rounded up to a multiple of `local` when it is given; otherwise OpenCL
    /// picks the work-group size for exactly `global` work-items.
    fn launch(
        &self,
        dtype: DType,
        op: HistOp,
        index: IndexDType,
        name: &'static str,
        global: usize,
        local: Option<usize>,
        args: &[Arg<'_, Buffer<u8>>],
    ) -> Result<()> {
        if global == 0 {
            return Ok(());
        }
        self.check_dtype(dtype)?;
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        let prog = self.program(&mut programs, dtype, index, op)?;
        if !prog.kernels.contains_key(name) {
            let k = Kernel::create(&prog.program, name).map_err(cl_err(name))?;
            prog.kernels.insert(name, k);
        }
        let kernel = &prog.kernels[name];
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: argument types match the kernel signatures in kernels.cl (checked by the
            // conformance tests); buffers outlive the launch (OpenCL retains them).
            let r = unsafe {
                match a {
                    Arg::Buf(b) => {
                        let m: cl_mem = b.buf.get();
                        kernel.set_arg(i, &m)
                    }
                    Arg::I64(v) => kernel.set_arg(i, v),
                    Arg::I32(v) => kernel.set_arg(i, v),
                    Arg::Val(v, DType::F32) => kernel.set_arg(i, &(*v as f32)),
                    Arg::Val(v, DType::F64) => kernel.set_arg(i, v),
                    Arg::Local(bytes) => kernel.set_arg_local_buffer(i, (*bytes).max(8)),
                }
            };
            r.map_err(|e| OpError::Device(format!("OpenCL {name} argument {i}: {e}")))?;
        }
        let (g, l) = match local {
            Some(l) => (global.div_ceil(l) * l, l),
            None => (global, 0),
        };
        let gs = [g];
        let ls = [l];
        let lp = if local.is_some() { ls.as_ptr() } else { std::ptr::null() };
        // SAFETY: every argument was set above; the size arrays outlive the call (OpenCL copies
        // them) and describe one dimension.
        unsafe { self.queue.enqueue_nd_range_kernel(kernel.get(), 1, std::ptr::null(), gs.as_ptr(), lp, &[]) }
            .map_err(cl_err(name))?;
        Ok(())
    }

    fn build(&self, dtype: DType, op: HistOp, index: IndexDType) -> Result<Vec<&'static str>> {
        self.check_dtype(dtype)?;
        let names = kernel_source::kernel_names(dtype);
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        let prog = self.program(&mut programs, dtype, index, op)?;
        for n in &names {
            if !prog.kernels.contains_key(n) {
                let k = Kernel::create(&prog.program, n).map_err(cl_err(n))?;
                prog.kernels.insert(n, k);
            }
        }
        Ok(names)
    }
}

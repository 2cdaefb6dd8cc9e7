//! Tools: the things whose derivatives adgauge measures and validates (layer 4 of docs/ARCHITECTURE.md, the
//! harness-level backend). A [`Tool`] has a name and version, says whether it is available and
//! why not, declares what it can do ([`Capabilities`]), and evaluates a workload's problem in a
//! mode, with optional self-reported timings. The case pipeline (`pipeline.rs`) drives every
//! tool the same way.
//!
//! The first family of tools is adgauge's own engine on each registered device
//! ([`EngineTool`]: `cpu`, `opencl`, `cuda`, from [`adgauge_backends::DEVICES`], the only list of
//! devices). Tools that run in another process implement the same trait.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::time::Duration;

use adgauge_backends::{AnyDevice, Cpu, DType, Device, DeviceKind};
use adgauge_workloads::{CheckKind, CheckSettings, Comparison, Mode, Prepared, Problem, Validation, Workload};

use adgauge_reports::Timing;

use crate::memory::allocations_during;
use crate::timing::{Budget, measure};

/// What a tool can do.
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    pub dtypes: Vec<DType>,
    /// The workload families it evaluates (`None`: every registered one).
    pub workloads: Option<Vec<String>>,
    pub modes: Vec<Mode>,
    /// Conventions where tools legitimately differ, declared so that comparisons can take them
    /// into account (e.g. `tie-policy` of min/max adjoints).
    pub conventions: BTreeMap<String, String>,
}

impl Capabilities {
    /// Why the tool cannot evaluate `workload` in `mode` and `dtype`, if it cannot.
    pub fn unsupported(&self, workload: &dyn Workload, mode: Mode, dtype: DType) -> Option<String> {
        if !self.dtypes.contains(&dtype) {
            let names: Vec<&str> = self.dtypes.iter().map(|d| d.name()).collect();
            return Some(format!("{dtype} is not among its dtypes ({})", names.join(", ")));
        }
        if let Some(ws) = &self.workloads
            && !ws.iter().any(|w| w == workload.family())
        {
            return Some(format!("it does not evaluate {}", workload.family()));
        }
        if !self.modes.contains(&mode) {
            return Some(format!("it has no {mode} mode"));
        }
        None
    }
}

/// One evaluation by a tool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// The outputs, where the tool returns them (the engine keeps them on its device when timed).
    pub output: Option<serde_json::Value>,
    /// The tool's own timings of the evaluation (one per run), where it reports them.
    pub timings: Vec<Duration>,
}

/// A problem a tool has prepared: resident and ready for timed evaluations.
pub trait PreparedCase {
    /// Whether the tool can evaluate `mode` on this problem (modes it cannot are left untimed).
    fn supports(&self, _mode: Mode) -> bool {
        true
    }
    /// One evaluation of `mode`.
    fn evaluate(&mut self, mode: Mode) -> anyhow::Result<Evaluation>;
    /// The timing of `mode` under `budget`: measured around [`PreparedCase::evaluate`] here;
    /// tools that time themselves report their own runs.
    fn timing(&mut self, mode: Mode, budget: &Budget) -> anyhow::Result<Timing> {
        measure(budget, || self.evaluate(mode).map(drop))
    }
    /// Peak footprint of one evaluation of `mode` (resident inputs included), where
    /// the tool can measure it.
    fn peak_bytes(&mut self, _mode: Mode) -> anyhow::Result<Option<u64>> {
        Ok(None)
    }
    /// The derivative rule the case runs, where the tool says (adgauge's engine: what `auto`
    /// resolved to); recorded beside the rule the suite named.
    fn rule_taken(&self) -> Option<String> {
        None
    }
    /// How the timed calls of the mode timed last ran, where the tool has a say in it: on
    /// `cpu-jit`, whether its recording became a compiled program (and its size) or why not.
    fn trace_note(&self) -> Option<String> {
        None
    }
    /// A check of the timings themselves, where the tool times itself (an external tool: do its
    /// reported runs fit the wall time adgauge measured around them?), with the message of a
    /// failure.
    fn timing_check(&self) -> Option<(adgauge_reports::Check, Option<String>)> {
        None
    }
}

/// A thing that computes derivatives: see the module documentation.
pub trait Tool {
    fn name(&self) -> &str;
    fn version(&self) -> String;
    /// `Ok(detail)` when the tool can run (what was found), `Err(reason)` otherwise.
    fn availability(&self) -> Result<String, String>;
    fn capabilities(&self) -> Capabilities;
    /// Worker threads the tool computes with (recorded in every row).
    fn threads(&self) -> usize;
    /// Puts `problem` (of `workload`) on the tool in `dtype` with the reverse-mode `rule`.
    fn prepare(
        &self,
        workload: &dyn Workload,
        problem: &dyn Problem,
        dtype: DType,
        rule: &str,
    ) -> anyhow::Result<Box<dyn PreparedCase>>;
    /// What the case's derivatives are validated with, as computed by this tool.
    fn validation(
        &self,
        workload: &dyn Workload,
        problem: &dyn Problem,
        settings: &CheckSettings,
    ) -> anyhow::Result<Validation>;
    /// The verdict of the case's checks (tools that take one are told; GradBench's `analysis`).
    fn verdict(&self, _valid: bool, _error: Option<String>) {}
    /// Seconds spent compiling kernels so far (kept apart from timings), where the tool compiles.
    fn compile_time(&self) -> Option<Duration> {
        None
    }
    /// Whether `prepare` and `validation` compute differently under different reverse-mode
    /// rules. A tool that ignores the rule is asked once per case, not once per rule name.
    fn reads_rule(&self) -> bool {
        true
    }
}

/// adgauge's own engine on one device, opened on first use.
pub struct EngineTool {
    kind: &'static DeviceKind,
    threads: Option<usize>,
    /// The CPU device computes the f64 reference values of validation for every device.
    cpu: Cpu,
    device: OnceCell<Result<AnyDevice, String>>,
}

impl EngineTool {
    pub fn new(kind: &'static DeviceKind, threads: Option<usize>, cpu: Cpu) -> EngineTool {
        EngineTool { kind, threads, cpu, device: OnceCell::new() }
    }

    /// The opened device, or why it cannot be opened.
    pub fn device(&self) -> Result<&AnyDevice, String> {
        self.device
            .get_or_init(|| match self.kind.on_cpu {
                // The CPU device is already open (with the run's threads); the CPU devices share
                // it, which keeps one thread pool and one buffer cache.
                Some(on_cpu) => on_cpu(self.cpu.clone()).map_err(|e| e.to_string()),
                None => (self.kind.open)(self.threads).map_err(|e| {
                    let probed = (self.kind.probe)();
                    if probed.available { e.to_string() } else { probed.detail }
                }),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn opened(&self) -> anyhow::Result<&AnyDevice> {
        self.device().map_err(|why| anyhow::anyhow!("backend {} unavailable: {why}", self.kind.name))
    }
}

impl Tool for EngineTool {
    fn name(&self) -> &str {
        self.kind.name
    }
    fn version(&self) -> String {
        engine_version()
    }
    fn availability(&self) -> Result<String, String> {
        self.device().map(AnyDevice::device_name)
    }
    fn capabilities(&self) -> Capabilities {
        let dtypes = match self.device() {
            Ok(d) => DType::ALL.into_iter().filter(|&dt| d.supports_dtype(dt).is_ok()).collect(),
            Err(_) => Vec::new(),
        };
        Capabilities {
            dtypes,
            workloads: None,
            modes: Mode::ALL.to_vec(),
            // min/max: each bin's whole adjoint goes to one winner, the lowest position, dest first.
            conventions: BTreeMap::from([("tie-policy".to_string(), "one-winner".to_string())]),
        }
    }
    fn threads(&self) -> usize {
        self.device().map(AnyDevice::threads).unwrap_or_else(|_| self.cpu.threads())
    }
    fn prepare(
        &self,
        _workload: &dyn Workload,
        problem: &dyn Problem,
        dtype: DType,
        rule: &str,
    ) -> anyhow::Result<Box<dyn PreparedCase>> {
        let device = self.opened()?.clone();
        let _mode = device.mode_guard();
        // What the prepared problem keeps resident (its inputs on the device, host and device
        // buffers alike) is part of every mode's peak: see `EnginePrepared::peak_bytes`.
        device.trim_cache();
        let device_before = device.device_memory().map(|m| m.in_use);
        let (prepared, host) = allocations_during(|| problem.prepare(&device, dtype, rule));
        let prepared = prepared?;
        let host = host.net.max(0) as usize;
        let on_device = match (device_before, device.device_memory()) {
            (Some(before), Some(after)) => after.in_use.saturating_sub(before),
            _ => 0,
        };
        Ok(Box::new(EnginePrepared { device, prepared, resident: host + on_device }))
    }
    fn validation(
        &self,
        _workload: &dyn Workload,
        problem: &dyn Problem,
        settings: &CheckSettings,
    ) -> anyhow::Result<Validation> {
        let device = self.opened()?;
        let _mode = device.mode_guard();
        let mut v = problem.validation(device, &self.cpu, settings)?;
        if let AnyDevice::CpuStaged(_) | AnyDevice::CpuJit(_) = device {
            let eager = problem.validation(&AnyDevice::Cpu(self.cpu.clone()), &self.cpu, settings)?;
            v.comparisons.push(staged_vs_eager(&v, &eager, settings.seed)?);
        }
        match device {
            AnyDevice::CpuTraced(d) => {
                v.comparisons.push(traced_vs_eager(d, &v, settings.seed)?);
                v.comparisons.push(timed_replays(d, device, problem, settings)?);
                v.comparisons.push(fault_sweep(d, &v, settings)?);
            }
            AnyDevice::CpuJit(d) => {
                v.comparisons.push(traced_vs_eager(d, &v, settings.seed)?);
                v.comparisons.push(timed_replays(d, device, problem, settings)?);
                v.comparisons.push(fault_sweep(d, &v, settings)?);
            }
            _ => {}
        }
        Ok(v)
    }
    fn compile_time(&self) -> Option<Duration> {
        self.device().ok()?.kernel_compile_time()
    }
}

/// The staged device's VJP and JVP next to the eager CPU device's, at seeded vectors whose
/// entries (multiples of 1/8) are exact in either dtype. The JVP is left out where the case
/// has none (a rule without a forward mode).
fn staged_vs_eager(staged: &Validation, eager: &Validation, seed: u64) -> anyhow::Result<Comparison> {
    let (fs, fe) = (&staged.flat, &eager.flat);
    let (w, v) = probe_vectors(&**fs, seed);
    let (mut got, mut want) = (fs.vjp(&w)?, fe.vjp(&w)?);
    if let (Ok(g), Ok(e)) = (fs.jvp(&v), fe.jvp(&v)) {
        got.extend(g);
        want.extend(e);
    }
    Ok(Comparison { check: CheckKind::StagedEager, got, want, convention: None })
}

/// Seeded vectors (w for J^T w, v for J v) whose entries, multiples of 1/8, are exact in
/// either dtype.
fn probe_vectors(f: &dyn adgauge_workloads::FlatFn, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = adgauge_datasets::rng(seed ^ 0x57a6ed);
    let mut vector = |n: usize| -> Vec<f64> {
        (0..n).map(|_| rand::RngExt::random_range(&mut rng, -8i32..=8) as f64 / 8.0).collect()
    };
    (vector(f.n_out()), vector(f.n_in()))
}

/// A traced device's recorded VJP and JVP replayed, against their eager runs: each is recorded
/// (which already checks its first replay bit for bit), then replayed once more, and what the
/// replay reads back is compared with what the eager run read back. The JVP is left out where
/// the case has none.
fn traced_vs_eager<D: adgauge_backends::traced::Traceable>(
    d: &adgauge_backends::Traced<D>,
    v: &Validation,
    seed: u64,
) -> anyhow::Result<Comparison> {
    let f = &v.flat;
    let (w, x) = probe_vectors(&**f, seed);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let vjp = adgauge_backends::TraceCell::default();
    d.run_traced(&vjp, &mut || -> anyhow::Result<()> { f.vjp(&w).map(drop).map_err(Into::into) })?;
    want.extend(d.last_eager_readbacks());
    got.extend(d.replay_readbacks(&vjp)?);
    let jvp = adgauge_backends::TraceCell::default();
    let mut has_jvp = true;
    d.run_traced(&jvp, &mut || -> anyhow::Result<()> {
        has_jvp = f.jvp(&x).is_ok();
        Ok(())
    })?;
    if has_jvp {
        want.extend(d.last_eager_readbacks());
        got.extend(d.replay_readbacks(&jvp)?);
    }
    anyhow::ensure!(!want.is_empty(), "traced-eager: the recorded VJP read nothing back");
    Ok(Comparison { check: CheckKind::TracedEager, got, want, convention: None })
}

/// The `faults` check on a traced device: the VJP and the JVP (where the case has one) run once
/// clean, counting their primitive calls, then once per chosen call with that call failing
/// (every call up to 64, else 64 evenly spaced; up to 512 under `--thorough`). Each must return an
/// error: a value means a device error was swallowed and a result computed without the failed
/// op, a panic that an error path unwraps. Then the clean derivative is computed again and
/// must equal the first, bit for bit (a failure left nothing behind in the device's buffers).
/// One value per run: 1 where it behaved, 0 where not.
fn fault_sweep<D: adgauge_backends::traced::Traceable>(
    d: &adgauge_backends::Traced<D>,
    v: &Validation,
    settings: &CheckSettings,
) -> anyhow::Result<Comparison> {
    let f = &v.flat;
    let (w, x) = probe_vectors(&**f, settings.seed);
    let derivatives: [&dyn Fn() -> adgauge_backends::Result<Vec<f64>>; 2] = [&|| f.vjp(&w), &|| f.jvp(&x)];
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for derivative in derivatives {
        d.inject_fault(None);
        let Ok(clean) = derivative() else { continue };
        let calls = d.calls();
        let most = if settings.thorough { 512 } else { 64 };
        let points: Vec<u64> = if calls <= most {
            (0..calls).collect()
        } else {
            (0..most).map(|i| i * (calls - 1) / (most - 1)).collect()
        };
        for at in points {
            d.inject_fault(Some(at));
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(derivative));
            got.push(if matches!(outcome, Ok(Err(_))) { 1.0 } else { 0.0 });
            want.push(1.0);
        }
        d.inject_fault(None);
        let again = derivative()?;
        let same = again.len() == clean.len() && again.iter().zip(&clean).all(|(a, b)| a.to_bits() == b.to_bits());
        got.push(if same { 1.0 } else { 0.0 });
        want.push(1.0);
    }
    anyhow::ensure!(!want.is_empty(), "faults: neither the VJP nor the JVP ran");
    Ok(Comparison { check: CheckKind::Faults, got, want, convention: None })
}

/// The recordings a timed call replays, on a traced device: the problem prepared as `run`
/// prepares it (resident inputs, the case's rule) and every timed mode called as a timing calls
/// it, three times: the first call records and checks its first replay against the eager run
/// bit for bit (a difference is an error naming the instruction, which fails the case), the
/// others replay. The comparison holds, per mode, whether its recording verified any value (a
/// mode that recorded nothing would time nothing); modes the workload does not have are left out.
fn timed_replays<D: adgauge_backends::traced::Traceable>(
    d: &adgauge_backends::Traced<D>,
    device: &AnyDevice,
    problem: &dyn Problem,
    settings: &CheckSettings,
) -> anyhow::Result<Comparison> {
    let prepared = problem.prepare(device, settings.dtype, &settings.rule)?;
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for mode in Mode::TIMED {
        match prepared.run(mode) {
            Ok(()) => {}
            Err(e) if e.is_unsupported() => continue,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("the timed {mode} recording"))),
        }
        let verified = d.last_trace().map_or(0, |t| t.verified);
        for _ in 0..2 {
            prepared.run(mode).map_err(|e| anyhow::Error::new(e).context(format!("a timed {mode} replay")))?;
        }
        got.push(if verified > 0 { 1.0 } else { 0.0 });
        want.push(1.0);
    }
    anyhow::ensure!(!want.is_empty(), "traced-eager: no timed mode could be recorded");
    Ok(Comparison { check: CheckKind::TracedEager, got, want, convention: None })
}

/// The version of adgauge's engine (every built-in tool's).
fn engine_version() -> String {
    format!("adgauge {}", env!("CARGO_PKG_VERSION"))
}

struct EnginePrepared {
    device: AnyDevice,
    prepared: Box<dyn Prepared>,
    /// Bytes the prepared problem holds (its resident inputs), host and device.
    resident: usize,
}

impl PreparedCase for EnginePrepared {
    fn evaluate(&mut self, mode: Mode) -> anyhow::Result<Evaluation> {
        let _mode = self.device.mode_guard();
        self.prepared.run(mode)?;
        Ok(Evaluation::default())
    }
    fn rule_taken(&self) -> Option<String> {
        self.prepared.rule_taken()
    }
    fn trace_note(&self) -> Option<String> {
        let AnyDevice::CpuJit(d) = &self.device else { return None };
        let trace = d.last_trace()?;
        Some(match trace.compiled {
            Some(n) => format!("compiled, {n} instructions from {} calls", trace.instructions),
            None => format!("replayed, {}", d.last_compile_note().unwrap_or_else(|| "not compiled".into())),
        })
    }
    /// The mode's peak footprint: its resident inputs plus the high-water mark of what the
    /// evaluation adds (outputs, tapes, temporaries). The host's counting allocator sees every
    /// host allocation of the evaluation; a device that keeps its own buffers (OpenCL, CUDA)
    /// adds the high-water mark of its buffers above the resident inputs. The buffer cache is
    /// emptied first so that every buffer the mode needs is counted. Counting the inputs makes
    /// the memory ratio (derivative peak / primal peak) compare footprints: without them a
    /// primal whose output is k = 10 numbers had a near-zero peak and ratios in the thousands.
    fn peak_bytes(&mut self, mode: Mode) -> anyhow::Result<Option<u64>> {
        self.device.trim_cache();
        self.device.reset_peak_device_memory();
        let resident = self.device.device_memory().map(|m| m.in_use);
        let _mode = self.device.mode_guard();
        let (r, host) = allocations_during(|| self.prepared.run(mode));
        r?;
        let host = host.peak;
        let device = match (resident, self.device.device_memory()) {
            (Some(before), Some(after)) => after.peak.saturating_sub(before),
            _ => 0,
        };
        Ok(Some((self.resident + host + device) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// y = a . x: one output, J^T w = a w, J v = a . v.
    struct Linear(Vec<f64>);

    impl adgauge_workloads::FlatFn for Linear {
        fn n_in(&self) -> usize {
            self.0.len()
        }
        fn n_out(&self) -> usize {
            1
        }
        fn x0(&self) -> &[f64] {
            &self.0
        }
        fn eval_f64(&self, x: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            Ok(vec![self.0.iter().zip(x).map(|(a, x)| a * x).sum()])
        }
        fn vjp(&self, w: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            Ok(self.0.iter().map(|a| a * w[0]).collect())
        }
        fn jvp(&self, v: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            self.eval_f64(v)
        }
        fn fd_unsafe(&self, _h: f64) -> Option<String> {
            None
        }
    }

    fn validation(a: &[f64]) -> Validation {
        Validation { flat: Box::new(Linear(a.to_vec())), full_jacobian: None, comparisons: Vec::new() }
    }

    #[test]
    fn staged_vs_eager_compares_both_modes_at_one_seeded_point() {
        let c = staged_vs_eager(&validation(&[1.0, 2.0, 3.0]), &validation(&[1.0, 2.0, 3.5]), 7).unwrap();
        assert_eq!(c.check, CheckKind::StagedEager);
        // Three VJP entries then one JVP entry; only the last coefficient differs.
        assert_eq!((c.got.len(), c.want.len()), (4, 4));
        assert_eq!(c.got[..2], c.want[..2]);
        assert_ne!(c.got[2], c.want[2], "w = 0 would hide the difference: {:?}", c.got);
        let again = staged_vs_eager(&validation(&[1.0, 2.0, 3.0]), &validation(&[1.0, 2.0, 3.0]), 7).unwrap();
        assert_eq!(again.got, again.want);
        assert_eq!(again.got, c.got, "the vectors are seeded");
    }

    use adgauge_backends::prelude::*;

    /// sum(x * x) on a traced CPU, its VJP by reverse mode; `swallow` turns an error into zeros
    /// (the bug the `faults` check is for), `panic_on_error` into a panic.
    struct OnTraced {
        d: adgauge_backends::Traced<Cpu>,
        x: Vec<f64>,
        swallow: bool,
        panic_on_error: bool,
    }

    impl OnTraced {
        fn gradient(&self) -> adgauge_backends::Result<Vec<f64>> {
            let r = adgauge_backends::Reverse::new(self.d.clone());
            let xv = r.var(self.d.tensor(&self.x, &[self.x.len()], DType::F64)?);
            let y = r.sum(&r.mul(&xv, &xv)?)?;
            let g = r.backward(&y, self.d.full(&[1], 1.0, DType::F64)?)?;
            self.d.to_vec(&g.get_or_zeros(&self.d, &xv)?)
        }
    }

    impl adgauge_workloads::FlatFn for OnTraced {
        fn n_in(&self) -> usize {
            self.x.len()
        }
        fn n_out(&self) -> usize {
            1
        }
        fn x0(&self) -> &[f64] {
            &self.x
        }
        fn eval_f64(&self, x: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            Ok(vec![x.iter().map(|x| x * x).sum()])
        }
        fn vjp(&self, _w: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            match self.gradient() {
                Err(_) if self.swallow => Ok(vec![0.0; self.x.len()]),
                Err(e) if self.panic_on_error => panic!("an error path that unwraps: {e}"),
                other => other,
            }
        }
        fn jvp(&self, _v: &[f64]) -> adgauge_backends::Result<Vec<f64>> {
            Err(adgauge_backends::OpError::Unsupported("no forward mode here".into()))
        }
        fn fd_unsafe(&self, _h: f64) -> Option<String> {
            None
        }
    }

    #[test]
    fn the_fault_sweep_passes_propagated_errors_and_fails_swallowed_or_panicking_ones() {
        let settings = CheckSettings {
            dtype: DType::F64,
            rule: "-".into(),
            seed: 1,
            fault: None,
            conventions: BTreeMap::new(),
            thorough: false,
        };
        let sweep = |swallow: bool, panic_on_error: bool| {
            let d = adgauge_backends::Traced::new(Cpu::new(Some(1)).unwrap());
            let flat = OnTraced { d: d.clone(), x: vec![0.5, -1.0, 2.0], swallow, panic_on_error };
            let v = Validation { flat: Box::new(flat), full_jacobian: None, comparisons: Vec::new() };
            fault_sweep(&d, &v, &settings).unwrap()
        };
        let honest = sweep(false, false);
        assert!(honest.want.len() >= 6, "every call of the VJP failed in turn, then one clean run: {:?}", honest.want);
        assert_eq!(honest.got, honest.want);
        // Every injected failure swallowed: every run but the final clean one is a 0.
        let swallowed = sweep(true, false);
        assert_eq!(swallowed.got.iter().filter(|&&g| g == 0.0).count(), swallowed.want.len() - 1);
        let panicking = sweep(false, true);
        assert_eq!(panicking.got.iter().filter(|&&g| g == 0.0).count(), panicking.want.len() - 1);
    }
}

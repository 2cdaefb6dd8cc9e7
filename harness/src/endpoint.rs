//! The tool side of GradBench's protocol, apart from its transport: an [`Endpoint`] answers
//! `start`, `define` and `evaluate` for some AD implementation, and [`answer`] turns one
//! message into its response (running a function as often as the message asks and timing each
//! run). `adgauge tool` puts adgauge's engine ([`EngineEndpoint`]) behind stdin/stdout; the
//! in-process peers (`peers/`, other Rust AD crates) are endpoints that the eval side
//! (`external.rs`) calls directly, so the same session, validation and verdict code drives a
//! process and a crate alike.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use adgauge_backends::{AnyDevice, DType};
use adgauge_workloads::WorkloadError;

use crate::protocol::{Message, Response, Timing, take_run_settings};

/// One prepared function call: its inputs converted and placed, ready to run repeatedly.
pub trait Call {
    /// One timed run of the computation.
    fn run(&mut self) -> Result<(), String>;
    /// The last run's output as the module's JSON.
    fn output(&mut self) -> Result<Json, String>;
}

/// An implementation that answers the protocol's messages.
pub trait Endpoint {
    /// The `start` response's tool name and config (version, conventions, threads).
    fn start(&mut self) -> (String, Json);
    /// Whether the module is known (`Err`: why not).
    fn define(&mut self, module: &str) -> Result<(), String>;
    /// Converts an input (its run settings removed; the endpoint keeps it, so that a large input
    /// is never copied) for repeated runs; `Err` is the reason the function cannot be evaluated
    /// (unknown, unsupported, or invalid input).
    fn prepare<'a>(&'a mut self, module: &str, function: &str, input: Json) -> Result<Box<dyn Call + 'a>, String>;
}

/// The response to one message. A panic inside the endpoint (a crate that panics on input it
/// does not support) is an unsuccessful response naming the panic, not a crash of adgauge.
pub fn answer(endpoint: &mut dyn Endpoint, message: Message) -> Response {
    let id = message.id();
    match message {
        Message::Start { .. } => {
            let (tool, config) = endpoint.start();
            Response { id, tool: Some(tool), config: Some(config), ..Default::default() }
        }
        Message::Define { module, .. } => match endpoint.define(&module) {
            Ok(()) => Response { id, success: Some(true), ..Default::default() },
            Err(e) => Response { id, success: Some(false), error: Some(e), ..Default::default() },
        },
        Message::Evaluate { module, function, input, .. } => {
            let result = catch_unwind(AssertUnwindSafe(|| evaluate(endpoint, &module, &function, input)))
                .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(panic.as_ref()))));
            match result {
                Ok((output, timings)) => Response {
                    id,
                    success: Some(true),
                    output: Some(output),
                    timings: Some(timings),
                    ..Default::default()
                },
                Err(e) => Response { id, success: Some(false), error: Some(e), ..Default::default() },
            }
        }
        Message::Analysis { .. } => Response { id, ..Default::default() },
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    text.lines().next().unwrap_or_default().chars().take(300).collect()
}

/// Runs `function` as often as the input's run settings ask; the last run's output. Inputs are
/// converted once, before the timed runs, and outputs after them.
fn evaluate(
    endpoint: &mut dyn Endpoint,
    module: &str,
    function: &str,
    input: Option<Json>,
) -> Result<(Json, Vec<Timing>), String> {
    let mut input = input.unwrap_or(Json::Null);
    let (min_runs, min_seconds) = take_run_settings(&mut input);
    let mut call = endpoint.prepare(module, function, input)?;
    let started = Instant::now();
    let mut timings = Vec::new();
    while (timings.len() as u64) < min_runs.max(1) || started.elapsed() < Duration::from_secs_f64(min_seconds) {
        let t = Instant::now();
        call.run()?;
        timings.push(Timing { name: "evaluate".into(), nanoseconds: t.elapsed().as_nanos() as u64 });
    }
    Ok((call.output()?, timings))
}

/// adgauge's engine on one device: the modules of the registered workloads.
pub struct EngineEndpoint {
    device: AnyDevice,
    backend: String,
    dtype: DType,
    /// The current call's function and input: the prepared call borrows them.
    function: String,
    input: Json,
}

impl EngineEndpoint {
    pub fn new(device: AnyDevice, backend: &str, dtype: DType) -> EngineEndpoint {
        EngineEndpoint { device, backend: backend.into(), dtype, function: String::new(), input: Json::Null }
    }
}

fn reason(e: WorkloadError) -> String {
    match e {
        WorkloadError::BadInput(m) => m,
        WorkloadError::Op(op) => op.to_string(),
    }
}

impl Endpoint for EngineEndpoint {
    fn start(&mut self) -> (String, Json) {
        let config = serde_json::json!({"backend": self.backend, "dtype": self.dtype.name(), "version": env!("CARGO_PKG_VERSION")});
        ("adgauge".into(), config)
    }
    fn define(&mut self, module: &str) -> Result<(), String> {
        match adgauge_workloads::by_module(module) {
            Some(_) => Ok(()),
            None => {
                let known: Vec<&str> =
                    adgauge_workloads::registry().iter().filter_map(|w| w.gradbench_module()).collect();
                Err(format!("unknown module '{module}' (known: {})", known.join(", ")))
            }
        }
    }
    fn prepare<'a>(&'a mut self, module: &str, function: &str, input: Json) -> Result<Box<dyn Call + 'a>, String> {
        let workload = adgauge_workloads::by_module(module).ok_or_else(|| format!("unknown module '{module}'"))?;
        // The prepared call borrows its function and input: they live here until the next one.
        self.function = function.into();
        self.input = input;
        let this: &'a EngineEndpoint = self;
        let _mode = this.device.mode_guard();
        let call = workload.gradbench_prepare(&this.function, &this.input, &this.device, this.dtype).map_err(reason)?;
        Ok(Box::new(EngineCall {
            call,
            device: &this.device,
            trace: adgauge_backends::TraceCell::default(),
            flush: this.device.flushes_subnormals(),
        }))
    }
}

/// One prepared function of the engine. Its runs go through the device's trace, as `adgauge
/// run`'s timed calls do: a traced device (`cpu-traced`, `cpu-jit`, `cpu-jit-flush`) records the
/// first run and replays it, compiled on `cpu-jit`, at the later ones, which repeat the same
/// function on the same input; the output is the recorded run's (the replays are checked
/// against it bit for bit when the trace is made). Every other device runs each call eagerly.
struct EngineCall<'a> {
    call: Box<dyn adgauge_workloads::GradbenchCall + 'a>,
    device: &'a AnyDevice,
    trace: adgauge_backends::TraceCell,
    /// The device flushes subnormals: its calls run in that mode on this thread too.
    flush: bool,
}

impl Call for EngineCall<'_> {
    fn run(&mut self) -> Result<(), String> {
        let _mode = adgauge_backends::cpu::subnormals::Mode::enter(self.flush);
        let (call, trace) = (&mut self.call, &self.trace);
        let mut body = || call.run();
        adgauge_backends::with_device!(self.device, |d| adgauge_backends::Device::run_traced(d, trace, &mut body))
            .map_err(reason)
    }
    fn output(&mut self) -> Result<Json, String> {
        let _mode = adgauge_backends::cpu::subnormals::Mode::enter(self.flush);
        let text = self.call.output().map_err(reason)?;
        serde_json::from_str(&text).map_err(|e| format!("the engine printed invalid JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use adgauge_backends::{Cpu, Traced};

    /// On a traced device the first run of a prepared function records and the later runs
    /// replay (no primitive call passes through the device again), and the output is the
    /// eager CPU device's.
    #[test]
    fn engine_calls_on_a_traced_device_record_once_then_replay() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let input = serde_json::json!({"x": [0.5, 1.0, 1.5, 2.0, 0.25, 0.75, 1.25, 1.75], "s": 2});
        let mut plain = EngineEndpoint::new(AnyDevice::Cpu(cpu.clone()), "cpu", DType::F64);
        let want = {
            let mut call = plain.prepare("ode", "gradient", input.clone()).unwrap();
            call.run().unwrap();
            call.output().unwrap()
        };
        let traced = Traced::new(cpu);
        let mut endpoint = EngineEndpoint::new(AnyDevice::CpuTraced(traced.clone()), "cpu-traced", DType::F64);
        let mut call = endpoint.prepare("ode", "gradient", input).unwrap();
        assert!(traced.last_trace().is_none());
        call.run().unwrap();
        let recorded = traced.calls();
        assert!(recorded > 0 && traced.last_trace().is_some(), "the first run records");
        for _ in 0..3 {
            call.run().unwrap();
        }
        assert_eq!(traced.calls(), recorded, "the later runs replay");
        assert_eq!(call.output().unwrap(), want);
    }
}

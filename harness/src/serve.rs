//! `adgauge tool`: adgauge's engine as a GradBench tool. It answers GradBench's protocol
//! (`protocol.rs`) on stdin/stdout, so GradBench's runner, or adgauge's own eval side
//! (`external.rs`), can drive it. Modules are the registered workloads' GradBench modules;
//! each `evaluate` runs the function at least `min_runs` times and for at least `min_seconds`,
//! and reports every run's time: the computation only, the input parsed and put on the device
//! before the runs (`Workload::gradbench_prepare`) and the output printed after them.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value as Json;

use adgauge_backends::{AnyDevice, DType};
use adgauge_workloads::WorkloadError;

use crate::exit::{Code, bad_input};
use crate::protocol::{Message, Response, Timing, take_run_settings};

#[derive(Args, Debug)]
pub struct ToolArgs {
    /// Device of adgauge's engine: cpu, opencl or cuda.
    #[arg(long, alias = "tool", default_value = "cpu")]
    pub backend: String,
    /// Element type the functions compute in (inputs and outputs are JSON numbers either way).
    #[arg(long, default_value = "f64")]
    pub dtype: DType,
}

pub fn serve(args: &ToolArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    let device = crate::eval::open_backend(&args.backend, threads)?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for (n, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| bad_input(format!("<stdin>:{}: cannot read: {e}", n + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let message: Message = serde_json::from_str(&line)
            .map_err(|e| bad_input(format!("<stdin>:{}: not a protocol message: {e}", n + 1)))?;
        let response = answer(&message, &device, args);
        let text = serde_json::to_string(&response)?;
        // The eval went away: nothing left to answer.
        if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    Ok(Code::Success)
}

fn answer(message: &Message, device: &AnyDevice, args: &ToolArgs) -> Response {
    let id = message.id();
    match message {
        Message::Start { .. } => Response {
            id,
            tool: Some("adgauge".into()),
            config: Some(
                serde_json::json!({"backend": args.backend, "dtype": args.dtype.name(), "version": env!("CARGO_PKG_VERSION")}),
            ),
            ..Default::default()
        },
        Message::Define { module, .. } => match adgauge_workloads::by_module(module) {
            Some(_) => Response { id, success: Some(true), ..Default::default() },
            None => {
                let known: Vec<&str> =
                    adgauge_workloads::registry().iter().filter_map(|w| w.gradbench_module()).collect();
                Response {
                    id,
                    success: Some(false),
                    error: Some(format!("unknown module '{module}' (known: {})", known.join(", "))),
                    ..Default::default()
                }
            }
        },
        Message::Evaluate { module, function, input, .. } => {
            match evaluate(module, function, input, device, args.dtype) {
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

/// Runs `function` as often as the input's run settings ask; the last run's output.
fn evaluate(
    module: &str,
    function: &str,
    input: &Option<Json>,
    device: &AnyDevice,
    dtype: DType,
) -> Result<(Json, Vec<Timing>), String> {
    let workload = adgauge_workloads::by_module(module).ok_or_else(|| format!("unknown module '{module}'"))?;
    let mut input = input.clone().unwrap_or(Json::Null);
    let (min_runs, min_seconds) = take_run_settings(&mut input);
    let reason = |e: WorkloadError| match e {
        WorkloadError::BadInput(m) => m,
        WorkloadError::Op(op) => op.to_string(),
    };
    // Parsing and uploading happen once, before the timed runs; reading back and printing once,
    // after them.
    let mut call = workload.gradbench_prepare(function, &input, device, dtype).map_err(reason)?;
    let started = Instant::now();
    let mut timings = Vec::new();
    while (timings.len() as u64) < min_runs.max(1) || started.elapsed() < Duration::from_secs_f64(min_seconds) {
        let t = Instant::now();
        call.run().map_err(reason)?;
        timings.push(Timing { name: "evaluate".into(), nanoseconds: t.elapsed().as_nanos() as u64 });
    }
    let output = call.output().map_err(reason)?;
    let output = serde_json::from_str(&output).map_err(|e| format!("the engine printed invalid JSON: {e}"))?;
    Ok((output, timings))
}

//! `adgauge tool`: adgauge's engine as a GradBench tool. It answers GradBench's protocol
//! (`protocol.rs`) on stdin/stdout, so GradBench's runner, or adgauge's own eval side
//! (`external.rs`), can drive it. Modules are the registered workloads' GradBench modules;
//! each `evaluate` runs the function at least `min_runs` times and for at least `min_seconds`,
//! and reports every run's time: the computation only, the input parsed and put on the device
//! before the runs (`Workload::gradbench_prepare`) and the output printed after them.
//!
//! Inputs are judged as `eval` judges them: a line is at most `--max-input-bytes` long (by
//! default the least of 4 GiB and a quarter of the memory limit, `eval::input_bound`; a longer
//! one ends the server with exit 2, naming the line and the bound), and every module's input passes
//! the workloads' own validation (ranges, sizes, the `--max-memory` footprint) before anything
//! is allocated for it; a refusal is a `success: false` naming the field. A message is parsed
//! once and moved, never copied, on its way to the engine.

use std::io::{BufRead, Read, Write};

use adgauge_backends::DType;
use clap::Args;

use crate::endpoint::{Endpoint, EngineEndpoint, answer};
use crate::exit::{Code, bad_input, unavailable};
use crate::protocol::Message;

#[derive(Args, Debug)]
pub struct ToolArgs {
    /// Device of adgauge's engine (cpu, cpu-staged, cpu-traced, cpu-jit, cpu-jit-flush, opencl, cuda), or a Rust peer
    /// compiled in (candle, candle-index-add, burn, num-dual, ad-trait).
    #[arg(long, alias = "tool", default_value = "cpu")]
    pub backend: String,
    /// Element type the functions compute in (inputs and outputs are JSON numbers either way).
    #[arg(long, default_value = "f64")]
    pub dtype: DType,
    /// Longest message line accepted, in bytes (a line is read whole). Default: the least of
    /// 4 GiB and a quarter of the memory limit.
    #[arg(long)]
    pub max_input_bytes: Option<u64>,
}

pub fn serve(args: &ToolArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    // A peer (another Rust AD crate, `peers/`) is served as it is driven in-process.
    let mut endpoint: Box<dyn Endpoint> = if crate::peers::PEERS.iter().any(|p| p.name == args.backend) {
        crate::peers::open(&args.backend).map_err(|why| unavailable(format!("backend {}: {why}", args.backend)))?
    } else {
        let device = crate::eval::open_backend(&args.backend, threads)?;
        Box::new(EngineEndpoint::new(device, &args.backend, args.dtype))
    };
    let (max_input_bytes, raise) = crate::eval::input_bound(args.max_input_bytes);
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    let mut line = Vec::new();
    for n in 1.. {
        line.clear();
        let read = (&mut input)
            .take(max_input_bytes.saturating_add(1))
            .read_until(b'\n', &mut line)
            .map_err(|e| bad_input(format!("<stdin>:{n}: cannot read: {e}")))?;
        if read == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() as u64 > max_input_bytes {
            return Err(bad_input(format!("<stdin>:{n}: a line longer than {max_input_bytes} bytes ({raise})")));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message: Message = serde_json::from_slice(&line)
            .map_err(|e| bad_input(format!("<stdin>:{n}: not a protocol message: {e}")))?;
        // The text is not needed once parsed: its memory goes before the input is converted.
        line = Vec::new();
        let response = answer(endpoint.as_mut(), message);
        let text = serde_json::to_string(&response)?;
        // The eval went away: nothing left to answer.
        if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    Ok(Code::Success)
}

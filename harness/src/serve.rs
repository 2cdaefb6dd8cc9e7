//! `adgauge tool`: adgauge's engine as a GradBench tool. It answers GradBench's protocol
//! (`protocol.rs`) on stdin/stdout, so GradBench's runner, or adgauge's own eval side
//! (`external.rs`), can drive it. Modules are the registered workloads' GradBench modules;
//! each `evaluate` runs the function at least `min_runs` times and for at least `min_seconds`,
//! and reports every run's time: the computation only, the input parsed and put on the device
//! before the runs (`Workload::gradbench_prepare`) and the output printed after them.

use std::io::{BufRead, Write};

use adgauge_backends::DType;
use clap::Args;

use crate::endpoint::{Endpoint, EngineEndpoint, answer};
use crate::exit::{Code, bad_input, unavailable};
use crate::protocol::Message;

#[derive(Args, Debug)]
pub struct ToolArgs {
    /// Device of adgauge's engine (cpu, cpu-staged, cpu-traced, cpu-jit, opencl, cuda), or a Rust peer
    /// compiled in (candle, candle-index-add, burn, num-dual, ad-trait).
    #[arg(long, alias = "tool", default_value = "cpu")]
    pub backend: String,
    /// Element type the functions compute in (inputs and outputs are JSON numbers either way).
    #[arg(long, default_value = "f64")]
    pub dtype: DType,
}

pub fn serve(args: &ToolArgs, threads: Option<usize>) -> anyhow::Result<Code> {
    // A peer (another Rust AD crate, `peers/`) is served as it is driven in-process.
    let mut endpoint: Box<dyn Endpoint> = if crate::peers::PEERS.iter().any(|p| p.name == args.backend) {
        crate::peers::open(&args.backend).map_err(|why| unavailable(format!("backend {}: {why}", args.backend)))?
    } else {
        let device = crate::eval::open_backend(&args.backend, threads)?;
        Box::new(EngineEndpoint::new(device, &args.backend, args.dtype))
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for (n, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| bad_input(format!("<stdin>:{}: cannot read: {e}", n + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let message: Message = serde_json::from_str(&line)
            .map_err(|e| bad_input(format!("<stdin>:{}: not a protocol message: {e}", n + 1)))?;
        let response = answer(endpoint.as_mut(), &message);
        let text = serde_json::to_string(&response)?;
        // The eval went away: nothing left to answer.
        if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    Ok(Code::Success)
}

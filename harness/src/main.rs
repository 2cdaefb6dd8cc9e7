//! The `adgauge` command line: evaluate single inputs, run suites, list backends.

mod ba_case;
mod case_json;
mod classic;
mod devices;
mod environment;
mod eval;
mod exit;
mod hist_case;
mod history;
mod kmeans_case;
mod memory;
mod run;
mod runner;
mod suite;
mod timing;
mod validation;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use exit::{Code, code_of};

#[global_allocator]
static ALLOCATOR: memory::Counting = memory::Counting;

/// adgauge: a benchmark and validation suite for automatic differentiation.
///
/// Without a subcommand, runs the embedded default suite.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Worker threads of the CPU device (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Evaluate one explicit input (JSON) and print one JSON object.
    Eval(eval::EvalArgs),
    /// Run the embedded default suite: validation and timing, one row per case (the default).
    Run(run::RunArgs),
    /// Validate derivatives only: one line per case and check; exit 1 on any failure.
    Check(run::CheckArgs),
    /// Compare a run against a baseline: exit 1 on failing checks, 3 on slowdowns.
    Gate(history::GateArgs),
    /// Write the self-contained HTML report of a history.
    Report(history::ReportArgs),
    /// Combine runs (shards, machines) into one run.
    Merge(history::MergeArgs),
    /// List devices with their availability.
    Backends {
        /// One JSON object per device.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Run(run::RunArgs::default()));
    let result = match command {
        Command::Eval(args) => eval::run(&args, cli.threads).map(|json| {
            println!("{json}");
            Code::Success
        }),
        Command::Run(args) => run::run(&args, cli.threads),
        Command::Check(args) => run::check(&args, cli.threads),
        Command::Gate(args) => history::gate_command(&args),
        Command::Merge(args) => history::merge_command(&args),
        Command::Report(args) => history::report_command(&args),
        Command::Backends { json } => {
            for d in adgauge_backends::probe_devices() {
                if json {
                    let v = serde_json::json!({"name": d.name, "available": d.available, "detail": d.detail});
                    println!("{v}");
                } else {
                    let state = if d.available { "available" } else { "unavailable" };
                    println!("{:<8} {:<12} {}", d.name, state, d.detail);
                }
            }
            Ok(Code::Success)
        }
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            code_of(&e).into()
        }
    }
}

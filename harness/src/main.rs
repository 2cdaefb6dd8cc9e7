//! The `adgauge` command line: evaluate single inputs, run suites, list backends.

mod case_json;
mod devices;
mod eval;
mod exit;
mod quick;
mod timing;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use exit::{Code, code_of};

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
    /// Run the embedded default suite (the default command).
    Run(quick::RunArgs),
    /// List devices with their availability.
    Backends,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli
        .command
        .unwrap_or(Command::Run(quick::RunArgs::default()));
    let result = match command {
        Command::Eval(args) => eval::run(&args, cli.threads).map(|json| {
            println!("{json}");
            Code::Success
        }),
        Command::Run(args) => quick::run(&args, cli.threads),
        Command::Backends => {
            for d in adgauge_backends::probe_devices() {
                let state = if d.available {
                    "available"
                } else {
                    "unavailable"
                };
                println!("{:<8} {:<12} {}", d.name, state, d.detail);
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

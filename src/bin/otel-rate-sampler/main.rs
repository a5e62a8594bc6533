//! `otel-rate-sampler`: check a sampling rule file, and simulate a load against it.
//!
//! ```sh
//! cargo install --path . --features cli
//! otel-rate-sampler check sampling.toml [--service NAME] [--replicas K]   # or .json, .yaml
//! otel-rate-sampler simulate sampling.toml --service checkout --rate 500 --duration 10s \
//!     [--span NAME] [--kind server] [--attr KEY=VALUE]... [--replicas K]
//! ```
//!
//! Exit codes: 0 when all is well (warnings allowed), 1 when the file does not load or a
//! lint is an error (for `simulate`, a window its sampler refuses), 2 for a bad argument
//! (always one line on stderr).

mod args;
mod check;
mod failure;
mod shown;
mod simulate;
mod tree;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use crate::failure::Failure;

/// Check a sampling rule file (TOML, Jaeger JSON, YAML or an OpenTelemetry declarative
/// configuration file) and simulate loads against it.
///
/// Exit codes: 0 all well (warnings allowed); 1 the file does not load, or a lint is an
/// error; 2 a bad argument.
#[derive(Debug, Parser)]
#[command(name = "otel-rate-sampler", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Check(check::CheckArgs),
    Simulate(simulate::SimulateArgs),
}

/// Exit code for a bad argument.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e),
    };
    let outcome = match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Simulate(args) => simulate::run(&args),
    };
    match outcome {
        Ok(code) => code,
        Err(Failure::Usage(message)) => usage(&message),
        Err(Failure::File(message)) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// One line on stderr and exit 2.
fn usage(message: &str) -> ExitCode {
    eprintln!("otel-rate-sampler: error: {message} (see --help)");
    ExitCode::from(USAGE)
}

/// Help and version as clap prints them; any other clap error on one line, exit 2.
fn clap_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            usage("a command is required: check or simulate")
        }
        _ => {
            let text = e.render().to_string();
            let line = text
                .lines()
                .map(str::trim)
                .filter(|l| {
                    !l.is_empty()
                        && !l.starts_with("Usage:")
                        && !l.starts_with("For more information")
                        && !l.starts_with("tip:")
                })
                .collect::<Vec<_>>()
                .join(" ");
            usage(line.strip_prefix("error: ").unwrap_or(&line))
        }
    }
}

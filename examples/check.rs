//! Checks a sampling configuration file and prints the effective rules per service.
//!
//! ```sh
//! cargo run --features config --example check -- examples/sampling.toml [--service NAME]
//! ```
//!
//! Exits 0 for a good file; for a bad one prints `FILE:LINE:COLUMN: KEY: MESSAGE` on
//! stderr and exits 1 (2 for bad arguments).

use std::process::ExitCode;

use otel_rate_sampler::SamplingConfig;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut service = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--service" => service = args.next(),
            _ if file.is_none() && !arg.starts_with("--") => file = Some(arg),
            _ => return usage(&format!("unexpected argument {arg:?}")),
        }
    }
    let Some(file) = file else {
        return usage("no file given");
    };
    let config = match SamplingConfig::from_path(&file) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{file}: ok");
    match service {
        Some(name) => print!("{}", config.describe(&name)),
        None => {
            for name in config.services() {
                print!("{}", config.describe(name));
            }
            print!("{}", config.describe("(any other service)"));
        }
    }
    ExitCode::SUCCESS
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("check: {problem}\nusage: check FILE [--service NAME]");
    ExitCode::from(2)
}

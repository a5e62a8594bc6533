//! Checks a sampling configuration file and prints the effective rules per service.
//!
//! ```sh
//! cargo run --features config --example check -- examples/sampling.toml [--service NAME]
//! ```
//!
//! Exits 0 for a good file; for a bad one prints `FILE:LINE:COLUMN: KEY: MESSAGE` on
//! stderr and exits 1 (2 for bad arguments).
//!
//! `--simulate "SPAN=RATE,SPAN=RATE" [--seconds N]` (with `--service`) replays an
//! offered load of root spans, each name at RATE per second spread evenly, on a manual
//! clock, and prints the traces kept per rule per second:
//!
//! ```sh
//! cargo run --features config --example check -- examples/sampling.toml \
//!     --service checkout --simulate "POST /api/pay=500,GET /=300" --seconds 3
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_RULE;
use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut service = None;
    let mut simulate = None;
    let mut seconds = 3u64;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--service" => service = args.next(),
            "--simulate" => simulate = args.next(),
            "--seconds" => match args.next().and_then(|s| s.parse().ok()) {
                Some(n) => seconds = n,
                None => return usage("--seconds takes a whole number"),
            },
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
    if let Some(load) = simulate {
        let Some(service) = service else {
            return usage("--simulate needs --service");
        };
        return run_simulation(&config, &service, &load, seconds);
    }
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
    eprintln!(
        "check: {problem}\nusage: check FILE [--service NAME [--simulate \"SPAN=RATE,...\" [--seconds N]]]"
    );
    ExitCode::from(2)
}

/// Offers each span name at its rate, evenly spread, and prints the kept traces per
/// rule in each second of the manual clock.
fn run_simulation(config: &SamplingConfig, service: &str, load: &str, seconds: u64) -> ExitCode {
    let mut offered: Vec<(String, u64)> = Vec::new();
    for part in load.split(',') {
        match part
            .rsplit_once('=')
            .and_then(|(n, r)| Some((n.trim(), r.trim().parse().ok()?)))
        {
            Some((name, rate)) if rate > 0 => offered.push((name.to_owned(), rate)),
            _ => {
                return usage(&format!(
                    "bad load {part:?}; use SPAN=RATE with a whole RATE per second"
                ))
            }
        }
    }
    let clock = ManualClock::new();
    let sampler = match RuleBasedSampler::with_clock(config, service, clock.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // Every arrival of the second, in time order.
    let mut arrivals: Vec<(u64, &str)> = offered
        .iter()
        .flat_map(|(name, rate)| (0..*rate).map(move |i| (i * 1_000_000_000 / rate, name.as_str())))
        .collect();
    arrivals.sort();
    let mut trace = 0u128;
    for second in 0..seconds {
        let mut kept: BTreeMap<String, u64> = BTreeMap::new();
        for (offset, name) in &arrivals {
            clock.set(second * 1_000_000_000 + offset);
            trace += 1;
            let id = TraceId::from(trace.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
            let result = sampler.should_sample(None, id, name, &SpanKind::Server, &[], &[]);
            if result.decision == SamplingDecision::RecordAndSample {
                let rule = result
                    .attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == SAMPLER_RULE)
                    .map_or_else(String::new, |kv| kv.value.to_string());
                *kept.entry(rule).or_default() += 1;
            }
        }
        let total: u64 = kept.values().sum();
        let per_rule: Vec<String> = kept.iter().map(|(r, n)| format!("{r}={n}")).collect();
        println!("second {second}: kept {total} ({})", per_rule.join(", "));
        clock.set((second + 1) * 1_000_000_000);
    }
    ExitCode::SUCCESS
}

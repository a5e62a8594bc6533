//! `check`: load a file, print each service's effective rules and limiters, lint it.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::NonEmptyStringValueParser;
use otel_rate_sampler::lint::{Lint, Severity};
use otel_rate_sampler::{DeclarativeSampler, SamplingConfig};

use crate::args;
use crate::failure::Failure;
use crate::shown;
use crate::tree;

/// The name shown for services the file does not list (they get the file default).
const ANY_OTHER: &str = "(any other service)";

/// Load a rule file, print each service's effective rules, the limiters they build and
/// their memory, then lint it.
///
/// Lints that are errors (exit 1): a rule that never decides (under an earlier rule
/// whose conditions imply its own), floors adding up to more than the cap or taking all
/// of it (the default then keeps nothing), a window shorter than the default clock's
/// resolution, a limit that cannot be divided by --replicas. Warnings (exit 0): a floor
/// above its rule's own limit (permits held back and never used), a cap's shared pool
/// smaller than the default's limit, a service whose limiters take over 16 MiB. A file
/// that does not load exits 1 with `file:line:column: key: message` (a rule with no
/// condition before another, a service over the memory budget, ...).
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The rule file: TOML, Jaeger sampling strategies (`.json`), YAML (`.yaml`, `.yml`),
    /// or an OpenTelemetry declarative configuration file (YAML with `file_format`: its
    /// sampler tree, composite samplers included, then the rules of its first
    /// `rate_limiting` sampler if it has one).
    file: PathBuf,
    /// Only this service (one the file does not list shows the file default).
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    service: Option<String>,
    /// Also show each limit divided across K replicas (1 to 1000), as a rate.
    // Hyphen values: `--replicas -inf` reaches `args::replicas` and is refused there.
    #[arg(long, value_name = "K", value_parser = args::replicas, default_value = "1", allow_hyphen_values = true)]
    replicas: NonZeroU32,
}

pub(crate) fn run(args: &CheckArgs) -> Result<ExitCode, Failure> {
    let tree = declarative(&args.file, args.service.as_deref())?;
    // A declarative file without a rule file (composite samplers, the SDK's): its tree
    // is all there is to show.
    let config = match &tree {
        Some(sampler) if !sampler.has_rules() => None,
        _ => Some(SamplingConfig::from_path(&args.file)?),
    };
    println!("{}: ok", args.file.display());
    if let Some(sampler) = &tree {
        println!("sampler:");
        print!("{}", tree::indented(&sampler.to_string(), 1));
    }
    let Some(config) = config else {
        println!("no rule file (a `rate_limiting` sampler): no rules to show or lint");
        println!("lints: none");
        return Ok(ExitCode::SUCCESS);
    };
    if tree.is_some() {
        println!("rules of the first rate_limiting sampler:");
    }
    let names: Vec<&str> = match &args.service {
        Some(name) => vec![name.as_str()],
        None => config.services().chain([ANY_OTHER]).collect(),
    };
    for name in &names {
        print_service(&config, name, args.replicas);
    }
    let lints = lints(&config, args.service.as_deref(), args.replicas);
    Ok(print_lints(&lints))
}

/// The lints of `service` (the whole file's with `None`), split across `replicas`: what
/// `check` prints, and where `simulate` finds the windows the sampler refuses.
pub(crate) fn lints(
    config: &SamplingConfig,
    service: Option<&str>,
    replicas: NonZeroU32,
) -> Vec<Lint> {
    let only = service.map(|name| {
        // A service the file does not list is linted as the file default ("").
        let listed = config.services().any(|s| s == name);
        if listed {
            name
        } else {
            ""
        }
    });
    config
        .lints(replicas)
        .into_iter()
        .filter(|l| only.is_none_or(|name| l.service() == name))
        .collect()
}

/// The sampler tree of a declarative configuration file for `service` (`None` for any
/// other file).
pub(crate) fn declarative(
    file: &Path,
    service: Option<&str>,
) -> Result<Option<DeclarativeSampler>, Failure> {
    Ok(DeclarativeSampler::from_path_if_declarative(
        file,
        service.unwrap_or(ANY_OTHER),
    )?)
}

fn print_service(config: &SamplingConfig, name: &str, replicas: NonZeroU32) {
    print!("{}", config.describe(name));
    let rules = config.effective_rules(name);
    let limiters = rules.limiters();
    let total: usize = limiters.iter().map(|l| l.bytes()).sum();
    match limiters.iter().max_by_key(|l| l.bytes()) {
        Some(largest) => println!(
            "  memory: {} limiters, {}; largest: {} ({}, {}), {}",
            limiters.len(),
            bytes(total),
            largest.role(),
            largest.algorithm(),
            largest.limit(),
            bytes(largest.bytes())
        ),
        None => println!("  memory: no limiters"),
    }
    // Fleet-scoped limits already hold for the whole fleet: only local ones are divided.
    if replicas.get() > 1 && rules.local_limits().next().is_some() {
        println!("  split across {replicas} replicas (each gets the rate / {replicas}):");
        for (rule, limit) in rules.local_limits() {
            match limit.per_replica(replicas) {
                Ok(each) => println!(
                    "    {rule}: {limit} -> {each} each ({}/s), {}/s together",
                    shown::rate(each.per_second_rate()),
                    shown::rate(each.per_second_rate() * f64::from(replicas.get()))
                ),
                Err(e) => println!("    {rule}: {limit} cannot be split: {e}"),
            }
        }
    }
}

/// Prints the lints and a count; exit 1 if any is an error.
fn print_lints(lints: &[Lint]) -> ExitCode {
    if lints.is_empty() {
        println!("lints: none");
        return ExitCode::SUCCESS;
    }
    println!("lints:");
    for lint in lints {
        println!("  {lint}");
    }
    let errors = lints
        .iter()
        .filter(|l| l.severity() == Severity::Error)
        .count();
    println!("{errors} error(s), {} warning(s)", lints.len() - errors);
    if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `n` bytes for people: B, KiB or MiB.
fn bytes(n: usize) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..0x10_0000 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
    }
}

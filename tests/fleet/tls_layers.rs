//! `rediss://` through the rule layer and the metrics: a rule file's `[fleet]` table
//! with `rediss://`, a CA file and a client certificate; a TLS failure counted by kind
//! in the fleet metrics. The servers and certificates are `tls.rs`'s.

use otel_rate_sampler::FleetFailure;

use crate::pki::Pki;
use crate::tls::{assert_refused, TlsServer};

/// A rule file whose `[fleet]` table is `fleet` (TOML lines), with one fleet rule.
#[cfg(feature = "config")]
fn rule_file(
    fleet: &str,
) -> Result<otel_rate_sampler::SamplingConfig, otel_rate_sampler::ConfigError> {
    let text = format!(
        "[fleet]\n{fleet}\nsync_interval = \"200ms\"\n\n[default]\nprobability = 0.0\n\n\
         [[service]]\nname = \"checkout\"\n\n[[service.rule]]\nname = \"all\"\nlimit = 10\n\
         window = \"1s\"\nscope = \"fleet\"\n"
    );
    otel_rate_sampler::SamplingConfig::from_toml_str(&text, "tls.toml")
}

/// The fleet rule's limiter of a sampler for that file.
#[cfg(feature = "config")]
fn rule_limiter(config: &otel_rate_sampler::SamplingConfig) -> otel_rate_sampler::FleetLimiter {
    let sampler = otel_rate_sampler::RuleBasedSampler::new(config, "checkout").expect("sampler");
    sampler.fleet_limiter("all").expect("a fleet limiter")
}

/// A rule file's `[fleet] redis = "rediss://…"` connects over TLS and verifies the
/// server against the platform's roots: the test CA is not among them, so the rule's
/// limiter reports `TlsUnknownCa` (and nothing reached Redis in the clear). With
/// `tls_ca_file`, and a client certificate for a server that asks for one, it leases.
#[cfg(feature = "config")]
#[test]
fn a_rule_files_fleet_table_takes_rediss_a_ca_and_a_client_certificate() {
    use crate::auth::wait_for;

    let pki = Pki::new("rule-file");
    let server = TlsServer::start(&pki, &pki.server, true);
    let redis = format!("redis = \"{}\"", server.url());
    let limiter = rule_limiter(&rule_file(&redis).expect("rule file"));
    assert_refused(&limiter, FleetFailure::TlsUnknownCa, &server);
    let quoted = |p: &std::path::Path| format!("{:?}", p.to_str().expect("UTF-8 path"));
    let with_ca = format!("{redis}\ntls_ca_file = {}", quoted(&pki.ca));
    let limiter = rule_limiter(&rule_file(&with_ca).expect("rule file"));
    assert_refused(&limiter, FleetFailure::TlsClientCert, &server);
    let cert = format!("tls_client_cert = {}", quoted(&pki.client.cert));
    let key = format!("tls_client_key = {}", quoted(&pki.client.key));
    let with_client = format!("{with_ca}\n{cert}\n{key}");
    let limiter = rule_limiter(&rule_file(&with_client).expect("rule file"));
    let stats = wait_for(&limiter, |s| s.clock_synced && s.instances == 1);
    assert_eq!(stats.last_failure, None, "{stats:?}");
    // A certificate without its key (or the reverse) is refused at load.
    let error = rule_file(&format!("{with_ca}\n{cert}")).unwrap_err();
    assert_eq!(
        error.kind(),
        otel_rate_sampler::ConfigErrorKind::MissingKey,
        "{error}"
    );
    // A file that cannot be read fails the rule's limiter, so the sampler's build.
    let missing = rule_file(&format!("{redis}\ntls_ca_file = \"/nonexistent/ca.pem\""));
    let missing = missing.expect("the file is read when the limiter is built");
    let error = otel_rate_sampler::RuleBasedSampler::new(&missing, "checkout").unwrap_err();
    assert_eq!(
        error.kind(),
        otel_rate_sampler::ConfigErrorKind::Fleet,
        "{error}"
    );
}

/// The fleet metrics count a TLS failure under its own `error.type`.
#[cfg(feature = "metrics")]
#[test]
fn a_tls_failure_is_counted_by_kind_in_the_fleet_metrics() {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use otel_rate_sampler::SamplerMetrics as M;

    use crate::tls::builder;

    let pki = Pki::new("metrics");
    let server = TlsServer::start(&pki, &pki.server, false);
    let l = builder(server.url(), "tls-metered", &pki.other_ca)
        .build()
        .expect("build");
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    M::with_meter(meters.meter("test")).register_fleet(&l);
    assert_refused(&l, FleetFailure::TlsUnknownCa, &server);
    meters.force_flush().unwrap();
    let counted = |kind: FleetFailure| {
        crate::metrics::value(
            &exporter,
            M::FLEET_CALL_FAILURES,
            &[
                (M::FLEET_KEY, "tls-metered"),
                (M::ERROR_TYPE, kind.as_str()),
            ],
        )
    };
    assert!(counted(FleetFailure::TlsUnknownCa) >= 3.0);
    assert_eq!(counted(FleetFailure::Connect), 0.0);
    assert_eq!(FleetFailure::TlsUnknownCa.as_str(), "tls_unknown_ca");
}

/// The environment's TLS files replace the rule file's, from `from_env` (here
/// `from_lookup`) and through a reload: the file names no CA (the server's is not among
/// the platform's roots), `OTEL_RATE_SAMPLER_REDIS_CA` and the client certificate
/// variables make the rule's limiter lease; a certificate without its key is refused.
#[cfg(feature = "config")]
#[test]
fn the_environment_s_tls_files_replace_the_file_s_and_survive_a_reload() {
    use std::collections::HashMap;

    use crate::auth::wait_for;
    use otel_rate_sampler::env::{
        OTEL_RATE_SAMPLER_CONFIG, OTEL_RATE_SAMPLER_REDIS, OTEL_RATE_SAMPLER_REDIS_CA,
        OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT, OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY,
    };
    use otel_rate_sampler::RuleBasedSampler;

    let pki = Pki::new("env");
    let server = TlsServer::start(&pki, &pki.server, true);
    let dir =
        std::env::temp_dir().join(format!("otel-rate-sampler-tls-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rules.toml");
    // The file's Redis is plain and wrong: the environment's URL replaces it.
    std::fs::write(
        &file,
        "[fleet]\nredis = \"redis://127.0.0.1:1\"\nsync_interval = \"200ms\"\n\n[default]\n\
         probability = 0.0\n\n[[service]]\nname = \"checkout\"\n\n[[service.rule]]\n\
         name = \"all\"\nlimit = 10\nwindow = \"1s\"\nscope = \"fleet\"\n",
    )
    .unwrap();
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8 path").to_owned();
    let vars: HashMap<&str, String> = HashMap::from([
        (OTEL_RATE_SAMPLER_CONFIG, path(&file)),
        (OTEL_RATE_SAMPLER_REDIS, server.url()),
        (OTEL_RATE_SAMPLER_REDIS_CA, path(&pki.ca)),
        (OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT, path(&pki.client.cert)),
        (OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY, path(&pki.client.key)),
    ]);
    // First, before anything reaches the server: without the client certificate it
    // refuses, as the file alone would be.
    let mut no_client = vars.clone();
    no_client.remove(OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT);
    no_client.remove(OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY);
    let sampler = RuleBasedSampler::from_lookup("checkout", |name| no_client.get(name).cloned())
        .unwrap()
        .unwrap();
    assert_refused(
        &sampler.fleet_limiter("all").unwrap(),
        FleetFailure::TlsClientCert,
        &server,
    );
    // A certificate without its key is a configuration error naming the missing one.
    let mut half = vars.clone();
    half.remove(OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY);
    let error =
        RuleBasedSampler::from_lookup("checkout", |name| half.get(name).cloned()).unwrap_err();
    assert_eq!(
        error.kind(),
        otel_rate_sampler::ConfigErrorKind::MissingKey,
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains(OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY),
        "{error}"
    );
    // With every variable, the rule's limiter leases.
    let sampler = RuleBasedSampler::from_lookup("checkout", |name| vars.get(name).cloned())
        .expect("the environment's sampler")
        .expect("a rule file is named");
    let limiter = sampler.fleet_limiter("all").expect("a fleet limiter");
    let stats = wait_for(&limiter, |s| s.clock_synced && s.instances == 1);
    assert_eq!(stats.last_failure, None, "{stats:?}");
    // A reload of the same file keeps the environment's URL and TLS files.
    sampler.reload_from_path(&file).expect("reload");
    let limiter = sampler.fleet_limiter("all").expect("a fleet limiter");
    let stats = wait_for(&limiter, |s| s.clock_synced && s.instances >= 1);
    assert_eq!(stats.last_failure, None, "{stats:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

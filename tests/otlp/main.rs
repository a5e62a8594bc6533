//! End to end over OTLP: a real receiver on loopback (gRPC on tonic, and HTTP/protobuf),
//! traffic through the SDK and through `tracing`, one service and three. The only test
//! binary that links tonic. `demo_cli` runs the demo as a user would, against it too;
//! with feature `metrics`, the samplers' metrics cross OTLP as well.

mod cross_service;
mod demo_cli;
// The demo's routes (--keys) and fair shares (--fair-by): per_key, keys_starved.
mod demo_keys;
// The demo with a declarative 1.1 file: a composite sampler, th at the receiver.
#[cfg(all(feature = "yaml", feature = "composable"))]
mod demo_composite;
// The demo binary as the tests build and run it.
#[path = "../support/demo_run.rs"]
mod demo_run;
// The fleet instruments over OTLP, against a real redis-server.
#[cfg(all(feature = "metrics", feature = "redis"))]
mod fleet_metrics;
// The fleet tests' redis-server on a free port (this binary uses only `start`).
#[cfg(all(feature = "metrics", feature = "redis"))]
#[allow(dead_code)]
#[path = "../fleet/server.rs"]
mod fleet_server;
#[cfg(feature = "metrics")]
mod metrics;
mod otlp_end_to_end;
mod receiver;
// `SkipDropped` end to end: kept traces as the plain layer sends them, propagation.
#[cfg(feature = "tracing")]
mod skip_dropped;
// Two services, one probability, the same traces at the receiver.
#[cfg(all(feature = "yaml", feature = "composable"))]
mod same_probability;
// Ids from a fixed seed, the same in two providers.
#[cfg(all(feature = "yaml", feature = "composable"))]
#[path = "../support/seeded_ids.rs"]
mod seeded_ids;

//! End to end over OTLP: a real receiver on loopback (gRPC on tonic, and HTTP/protobuf),
//! traffic through the SDK and through `tracing`, one service and three. The only test
//! binary that links tonic. `demo_cli` runs the demo as a user would, against it too;
//! with feature `metrics`, the samplers' metrics cross OTLP as well.

mod cross_service;
mod demo_cli;
#[cfg(feature = "metrics")]
mod metrics;
mod otlp_end_to_end;
mod receiver;

//! End to end over OTLP: a real receiver on loopback (gRPC on tonic, and HTTP/protobuf),
//! traffic through the SDK and through `tracing`, one service and three. The only test
//! binary that links tonic. With feature `metrics`, the samplers' metrics over OTLP too.

mod cross_service;
#[cfg(feature = "metrics")]
mod metrics;
mod otlp_end_to_end;
mod receiver;

//! Jaeger remote sampling (feature `jaeger-remote`): poll a collector's or agent's
//! sampling endpoint and apply its strategy to a [`RuleBasedSampler`] through the
//! reload path.
//!
//! [`RuleBasedSampler`]: crate::RuleBasedSampler

mod http;
mod poller;
mod response;
mod tls;
mod wire;

pub(crate) use poller::poll;
pub use poller::{JaegerRemote, JaegerRemotePoller, RemoteUpdate};

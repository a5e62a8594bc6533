//! Where rules come from at run time: the environment, a watched file (feature
//! `reload`) and a Jaeger sampling endpoint (feature `jaeger-remote`).

pub mod env;
#[cfg(feature = "jaeger-remote")]
pub(crate) mod jaeger_remote;
#[cfg(feature = "reload")]
pub(crate) mod watch;

#[cfg(feature = "jaeger-remote")]
pub use jaeger_remote::{JaegerRemote, JaegerRemotePoller, RemoteUpdate};
#[cfg(feature = "reload")]
pub use watch::{ConfigWatcher, WatchOptions};

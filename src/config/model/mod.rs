//! The configuration model every format loads into: a file-wide default, services by
//! name, each with a default policy, an optional cap and ordered rules; the key of a
//! limit in it; and the values a file may hold.

mod config;
mod fair;
mod key;
mod load;
mod report;
mod rule;
mod service;
pub(crate) mod values;

pub use config::SamplingConfig;
pub(crate) use fair::FairSpec;
pub(crate) use key::LimitOf;
pub(crate) use rule::{fleet_cap_key, fleet_floor_key, fleet_key, LimitSpec, Policy, Rule, Scope};
pub(crate) use service::{FleetSettings, ServiceConfig};

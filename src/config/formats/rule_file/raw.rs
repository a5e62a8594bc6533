//! The wire types of a rule file, the same structs (and so the same keys) for TOML and
//! YAML: what serde reads, with the span of every value for the errors.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;

use crate::config::formats::spanned::Spanned;

/// A rule file: the same structs (and so the same keys) for TOML and YAML.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub(super) default: Option<Spanned<RawBlock>>,
    #[serde(default)]
    pub(super) service: Vec<Spanned<RawBlock>>,
    pub(super) fleet: Option<Spanned<RawFleet>>,
    pub(super) limits: Option<Spanned<RawLimits>>,
}

/// `[limits]`: bounds on what the file may ask for.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) memory_budget: Option<Spanned<RawBytes>>,
}

/// `memory_budget = 134217728` or `memory_budget = "128MiB"`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawBytes {
    Bytes(i64),
    Text(String),
}

/// `[fleet]`: where fleet-scoped limits are shared.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    pub(super) redis: Option<Spanned<RawUrls>>,
    pub(super) cluster: Option<Spanned<bool>>,
    pub(super) prefix: Option<Spanned<String>>,
    pub(super) sync_interval: Option<Spanned<String>>,
    pub(super) tls_ca_file: Option<Spanned<String>>,
    pub(super) tls_client_cert: Option<Spanned<String>>,
    pub(super) tls_client_key: Option<Spanned<String>>,
}

/// `redis = "redis://a:1"` or `redis = ["redis://a:1", "redis://b:2"]`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawUrls {
    One(String),
    Many(Vec<String>),
}

/// A `deny_unknown_fields` table that can set a limit. The keys of a policy (`rate`,
/// `limit`, `window`, `algorithm`, `scope`, `probability`, `at_least`, `adaptive`, and
/// a limit's `fair_by` and `max_keys`) are
/// written here once, with
/// `policy_keys` to read them; the table's own keys follow. (`#[serde(flatten)]` would
/// share them too, but cannot be combined with `deny_unknown_fields`.)
macro_rules! limit_table {
    ($(#[$doc:meta])* struct $name:ident {
        $($(#[$attr:meta])* $field:ident: $ty:ty,)*
    }) => {
        $(#[$doc])*
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct $name {
            pub(super) rate: Option<Spanned<f64>>,
            pub(super) limit: Option<Spanned<i64>>,
            pub(super) window: Option<Spanned<String>>,
            pub(super) algorithm: Option<Spanned<String>>,
            pub(super) paced: Option<Spanned<bool>>,
            pub(super) probability: Option<Spanned<f64>>,
            pub(super) at_least: Option<Spanned<f64>>,
            pub(super) adaptive: Option<Spanned<Box<RawAdaptive>>>,
            pub(super) scope: Option<Spanned<String>>,
            pub(super) fair_by: Option<Spanned<Vec<Spanned<String>>>>,
            pub(super) max_keys: Option<Spanned<i64>>,
            $($(#[$attr])* pub(super) $field: $ty,)*
        }

        impl $name {
            pub(super) fn policy_keys(&self) -> RawPolicy<'_> {
                RawPolicy {
                    rate: &self.rate,
                    limit: &self.limit,
                    window: &self.window,
                    algorithm: &self.algorithm,
                    paced: &self.paced,
                    probability: self.probability.as_ref(),
                    at_least: self.at_least.as_ref(),
                    adaptive: self.adaptive.as_ref(),
                    scope: &self.scope,
                    fair_by: &self.fair_by,
                    max_keys: &self.max_keys,
                }
            }
        }
    };
}

limit_table! {
    /// `[default]` and each `[[service]]`.
    struct RawBlock {
        name: Option<Spanned<String>>,
        // Boxed, as `adaptive` above: rare, and large beside the rest of a block.
        cap: Option<Spanned<Box<RawCap>>>,
        remote_parents: Option<Spanned<String>>,
        inherit_default_rules: Option<Spanned<bool>>,
        #[serde(default)]
        rule: Vec<Spanned<RawRule>>,
    }
}

limit_table! {
    /// A `cap`: a limit only (a `probability` is refused).
    struct RawCap {}
}

limit_table! {
    /// A `[[rule]]`.
    struct RawRule {
        name: Option<Spanned<String>>,
        span_name: Option<Spanned<String>>,
        kind: Option<Spanned<String>>,
        parent: Option<Spanned<String>>,
        #[serde(default)]
        attributes: BTreeMap<Spanned<String>, Spanned<String>>,
        floor: Option<Spanned<i64>>,
    }
}

/// `adaptive = 100.0` (traces per second) or `adaptive = { rate = .. }` /
/// `adaptive = { limit = .., window = .. }`.
pub(super) enum RawAdaptive {
    Rate(f64),
    Table(RawAdaptiveTable),
}

// By hand rather than `#[serde(untagged)]`, which buffers the value and so loses the
// positions of the table's keys (and cannot read an integer as a rate).
impl<'de> Deserialize<'de> for RawAdaptive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawAdaptive;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "traces per second (a number) or a table with `rate`, or `limit` and `window`",
                )
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawAdaptive, E> {
                Ok(RawAdaptive::Rate(v as f64))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawAdaptive, E> {
                Ok(RawAdaptive::Rate(v as f64))
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<RawAdaptive, E> {
                Ok(RawAdaptive::Rate(v))
            }

            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                map: M,
            ) -> Result<RawAdaptive, M::Error> {
                RawAdaptiveTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawAdaptive::Table)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// The table form of `adaptive`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdaptiveTable {
    pub(super) rate: Option<Spanned<f64>>,
    pub(super) limit: Option<Spanned<i64>>,
    pub(super) window: Option<Spanned<String>>,
}

/// The policy keys every block shares.
pub(super) struct RawPolicy<'a> {
    pub(super) rate: &'a Option<Spanned<f64>>,
    pub(super) limit: &'a Option<Spanned<i64>>,
    pub(super) window: &'a Option<Spanned<String>>,
    pub(super) algorithm: &'a Option<Spanned<String>>,
    /// `paced = false` opts a limit out of pacing (see `Limit::unpaced`).
    pub(super) paced: &'a Option<Spanned<bool>>,
    pub(super) probability: Option<&'a Spanned<f64>>,
    /// A lower bound in traces per second beside a `probability`.
    pub(super) at_least: Option<&'a Spanned<f64>>,
    pub(super) adaptive: Option<&'a Spanned<Box<RawAdaptive>>>,
    pub(super) scope: &'a Option<Spanned<String>>,
    /// What makes a limit's keys for fair shares: attribute keys, `span_name`.
    pub(super) fair_by: &'a Option<Spanned<Vec<Spanned<String>>>>,
    /// The most keys `fair_by` tells apart.
    pub(super) max_keys: &'a Option<Spanned<i64>>,
}

impl RawPolicy<'_> {
    /// Each policy key with its span where it is set, `adaptive` last (the order an
    /// `adaptive` beside the others names them in).
    pub(super) fn spans(&self) -> KeySpans {
        KeySpans([
            ("rate", self.rate.as_ref().map(Spanned::span)),
            ("limit", self.limit.as_ref().map(Spanned::span)),
            ("window", self.window.as_ref().map(Spanned::span)),
            ("probability", self.probability.map(Spanned::span)),
            ("at_least", self.at_least.map(Spanned::span)),
            ("algorithm", self.algorithm.as_ref().map(Spanned::span)),
            ("paced", self.paced.as_ref().map(Spanned::span)),
            ("scope", self.scope.as_ref().map(Spanned::span)),
            ("fair_by", self.fair_by.as_ref().map(Spanned::span)),
            ("max_keys", self.max_keys.as_ref().map(Spanned::span)),
            ("adaptive", self.adaptive.map(Spanned::span)),
        ])
    }
}

/// The policy keys of a table with their spans where they are set
/// ([`RawPolicy::spans`]).
pub(super) struct KeySpans(pub(super) [(&'static str, Option<Range<usize>>); 11]);

impl KeySpans {
    /// Where `key` is set, if it is.
    pub(super) fn of(&self, key: &str) -> Option<Range<usize>> {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, s)| s.clone())
    }
}

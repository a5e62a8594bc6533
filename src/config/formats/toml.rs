//! The TOML format (primary): `[default]`, `[[service]]`, `[[service.rule]]`.
//! See `examples/sampling.toml` for a complete commented file.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use crate::config::check::budget::{self, Culprit};
use crate::config::error::{ConfigError, ConfigErrorKind, LineIndex, Pos};
use crate::config::formats::spanned::Spanned;
use crate::config::model::values::{self, Invalid};
use crate::config::model::{
    fleet_cap_key, fleet_key, FleetSettings, LimitSpec, Policy, Rule, SamplingConfig, Scope,
    ServiceConfig,
};
use crate::limiter::Algorithm;
use crate::sampler::RemoteParents;

/// A rule file: the same structs (and so the same keys) for TOML and YAML.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    default: Option<Spanned<RawBlock>>,
    #[serde(default)]
    service: Vec<Spanned<RawBlock>>,
    fleet: Option<Spanned<RawFleet>>,
    limits: Option<Spanned<RawLimits>>,
}

/// `[limits]`: bounds on what the file may ask for.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory_budget: Option<Spanned<RawBytes>>,
}

/// `memory_budget = 134217728` or `memory_budget = "128MiB"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawBytes {
    Bytes(i64),
    Text(String),
}

/// `[fleet]`: where fleet-scoped limits are shared.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    redis: Option<Spanned<RawUrls>>,
    cluster: Option<Spanned<bool>>,
    prefix: Option<Spanned<String>>,
    sync_interval: Option<Spanned<String>>,
}

/// `redis = "redis://a:1"` or `redis = ["redis://a:1", "redis://b:2"]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawUrls {
    One(String),
    Many(Vec<String>),
}

/// A `deny_unknown_fields` table that can set a limit. The keys of a policy (`rate`,
/// `limit`, `window`, `algorithm`, `scope`, `probability`, `at_least`, `adaptive`) are
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
        struct $name {
            rate: Option<Spanned<f64>>,
            limit: Option<Spanned<i64>>,
            window: Option<Spanned<String>>,
            algorithm: Option<Spanned<String>>,
            paced: Option<Spanned<bool>>,
            probability: Option<Spanned<f64>>,
            at_least: Option<Spanned<f64>>,
            adaptive: Option<Spanned<Box<RawAdaptive>>>,
            scope: Option<Spanned<String>>,
            $($(#[$attr])* $field: $ty,)*
        }

        impl $name {
            fn policy_keys(&self) -> RawPolicy<'_> {
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
enum RawAdaptive {
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
struct RawAdaptiveTable {
    rate: Option<Spanned<f64>>,
    limit: Option<Spanned<i64>>,
    window: Option<Spanned<String>>,
}

/// The policy keys every block shares.
struct RawPolicy<'a> {
    rate: &'a Option<Spanned<f64>>,
    limit: &'a Option<Spanned<i64>>,
    window: &'a Option<Spanned<String>>,
    algorithm: &'a Option<Spanned<String>>,
    /// `paced = false` opts a limit out of pacing (see `Limit::unpaced`).
    paced: &'a Option<Spanned<bool>>,
    probability: Option<&'a Spanned<f64>>,
    /// A lower bound in traces per second beside a `probability`.
    at_least: Option<&'a Spanned<f64>>,
    adaptive: Option<&'a Spanned<Box<RawAdaptive>>>,
    scope: &'a Option<Spanned<String>>,
}

/// How service `i` opts out of `[default]`'s rules, written out when an error says so.
#[derive(Clone, Copy)]
struct OptOut(usize);

impl fmt::Display for OptOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "service[{}].inherit_default_rules = false", self.0)
    }
}

/// The key path of a table or value (e.g. `service[3].rule[0].rate`), written out only
/// when an error names it: a large file has millions of keys and few errors.
#[derive(Clone, Copy)]
enum Path<'a> {
    /// `default`.
    Default,
    /// `service[i]`.
    Service(usize),
    /// `<parent>.rule[i]`.
    Rule(&'a Path<'a>, usize),
    /// `<parent>.<key>`.
    Key(&'a Path<'a>, &'static str),
    /// `<parent>.attributes."<name>"`.
    Attribute(&'a Path<'a>, &'a str),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Default => f.write_str("default"),
            Path::Service(i) => write!(f, "service[{i}]"),
            Path::Rule(parent, i) => write!(f, "{parent}.rule[{i}]"),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Attribute(parent, name) => write!(f, "{parent}.attributes.{name:?}"),
        }
    }
}

pub(super) struct Ctx<'a> {
    pub(super) text: &'a str,
    pub(super) file: &'a str,
    /// Line starts, built on the first position asked for.
    lines: std::cell::OnceCell<LineIndex<'a>>,
    /// The first `scope = "fleet"` (its span and key), for the Redis URL check.
    first_fleet: RefCell<Option<(Range<usize>, String)>>,
}

impl Ctx<'_> {
    pub(super) fn pos(&self, span: Range<usize>) -> Pos {
        // Each limit keeps the position of its window: one scan of the text in all.
        self.lines
            .get_or_init(|| LineIndex::new(self.text))
            .pos(span.start)
    }

    fn err(&self, invalid: Invalid, span: Range<usize>, key: impl fmt::Display) -> ConfigError {
        invalid.at(self.file, self.pos(span), &key.to_string())
    }

    /// `f`'s verdict on `value`; on an error, the error at `value`'s position under
    /// `key` (written out only then: loading a large file checks millions of values).
    pub(super) fn check<T, U>(
        &self,
        value: &Spanned<T>,
        key: impl fmt::Display,
        f: impl FnOnce(&T) -> Result<U, Invalid>,
    ) -> Result<U, ConfigError> {
        f(value.get_ref()).map_err(|e| self.err(e, value.span(), key))
    }

    pub(super) fn new_error(
        &self,
        kind: ConfigErrorKind,
        span: Range<usize>,
        key: impl fmt::Display,
        message: String,
    ) -> ConfigError {
        Invalid::new(kind, message).at(self.file, self.pos(span), &key.to_string())
    }

    /// The policy a block sets, if any; `None` when it sets none of the keys.
    fn policy(&self, raw: &RawPolicy<'_>, path: Path<'_>) -> Result<Option<Policy>, ConfigError> {
        let key = |k: &'static str| Path::Key(&path, k);
        if let Some(adaptive) = raw.adaptive {
            return self.adaptive(raw, adaptive, path).map(Some);
        }
        let limit = self.limit(raw, path)?;
        if let Some(l) = raw.at_least {
            if limit.is_some() {
                return Err(self.new_error(
                    ConfigErrorKind::ConflictingKeys,
                    l.span(),
                    key("at_least"),
                    "`at_least` is the lower bound of a `probability`; a limit (`rate` or `limit`) has none: remove one of the two".into(),
                ));
            }
            if raw.probability.is_none() {
                return Err(self.new_error(
                    ConfigErrorKind::MissingKey,
                    l.span(),
                    key("at_least"),
                    "`at_least` needs a `probability` beside it: keep with that probability, but at least this many traces per second".into(),
                ));
            }
        }
        match (limit, raw.probability) {
            (Some(_), Some(p)) => Err(self.new_error(
                ConfigErrorKind::ConflictingKeys,
                p.span(),
                key("probability"),
                "a block sets a limit (`rate` or `limit`) or a `probability`, not both".into(),
            )),
            (Some(spec), None) => Ok(Some(Policy::Limit(spec))),
            (None, Some(p)) => {
                if let Some(sc) = raw.scope {
                    return Err(self.new_error(
                        ConfigErrorKind::ConflictingKeys,
                        sc.span(),
                        key("scope"),
                        "`scope` applies to a limit; a `probability` is decided on the trace id, the same in every replica".into(),
                    ));
                }
                if let Some(a) = raw.algorithm {
                    return Err(self.new_error(
                        ConfigErrorKind::ConflictingKeys,
                        a.span(),
                        key("algorithm"),
                        "`algorithm` applies to a limit; a `probability` has none".into(),
                    ));
                }
                if let Some(pc) = raw.paced {
                    return Err(self.new_error(
                        ConfigErrorKind::ConflictingKeys,
                        pc.span(),
                        key("paced"),
                        "`paced` applies to a limit; a `probability` keeps traces whenever they come".into(),
                    ));
                }
                let p = self.check(p, key("probability"), |p| values::probability(*p))?;
                let Some(l) = raw.at_least else {
                    return Ok(Some(Policy::Probability(p)));
                };
                let limit = self.check(l, key("at_least"), |l| values::rate(*l))?;
                Ok(Some(Policy::AtLeast {
                    probability: p,
                    lower_bound: LimitSpec {
                        at: self.pos(l.span()),
                        ..LimitSpec::local(limit, Algorithm::FixedWindow)
                    },
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// An `adaptive` policy: alone among the policy keys (its limit is inside it).
    fn adaptive(
        &self,
        raw: &RawPolicy<'_>,
        adaptive: &Spanned<Box<RawAdaptive>>,
        path: Path<'_>,
    ) -> Result<Policy, ConfigError> {
        let key = |k: &'static str| Path::Key(&path, k);
        let others = [
            ("rate", raw.rate.as_ref().map(Spanned::span)),
            ("limit", raw.limit.as_ref().map(Spanned::span)),
            ("window", raw.window.as_ref().map(Spanned::span)),
            ("probability", raw.probability.map(Spanned::span)),
            ("at_least", raw.at_least.map(Spanned::span)),
            ("algorithm", raw.algorithm.as_ref().map(Spanned::span)),
            ("paced", raw.paced.as_ref().map(Spanned::span)),
            ("scope", raw.scope.as_ref().map(Spanned::span)),
        ];
        if let Some((name, Some(span))) = others.into_iter().find(|(_, s)| s.is_some()) {
            return Err(self.new_error(
                ConfigErrorKind::ConflictingKeys,
                span,
                key(name),
                format!("`adaptive` is a whole policy (a consistent probability under its own cap of a fixed window, local to each process); it takes no `{name}` beside it: write `adaptive = <traces per second>` or `adaptive = {{ limit = .., window = .. }}`"),
            ));
        }
        let adaptive_key = key("adaptive");
        let limit = match &**adaptive.get_ref() {
            RawAdaptive::Rate(r) => self.check(adaptive, adaptive_key, |_| values::rate(*r))?,
            RawAdaptive::Table(t) => {
                // The limit keys of a block, read as a block's, under `<path>.adaptive`.
                let (no_text, no_probability, no_flag) = (None, None, None);
                let inner = RawPolicy {
                    rate: &t.rate,
                    limit: &t.limit,
                    window: &t.window,
                    algorithm: &no_text,
                    paced: &no_flag,
                    probability: no_probability,
                    at_least: None,
                    adaptive: None,
                    scope: &no_text,
                };
                match self.limit(&inner, adaptive_key)? {
                    Some(spec) => spec.limit,
                    None => {
                        return Err(self.new_error(
                            ConfigErrorKind::MissingKey,
                            adaptive.span(),
                            adaptive_key,
                            "`adaptive` needs its cap: a `rate`, or a `limit` (with `window`)"
                                .into(),
                        ))
                    }
                }
            }
        };
        Ok(Policy::Adaptive(limit))
    }

    /// The limit a block sets (`rate`, or `limit` with an optional `window`).
    fn limit(&self, raw: &RawPolicy<'_>, path: Path<'_>) -> Result<Option<LimitSpec>, ConfigError> {
        let key = |k: &'static str| Path::Key(&path, k);
        let limit = match (raw.rate, raw.limit) {
            (Some(_), Some(l)) => {
                return Err(self.new_error(
                    ConfigErrorKind::ConflictingKeys,
                    l.span(),
                    key("limit"),
                    "set `rate` (per second, fractional) or `limit` (per `window`), not both"
                        .into(),
                ))
            }
            (Some(r), None) => {
                if let Some(w) = raw.window {
                    return Err(self.new_error(
                        ConfigErrorKind::ConflictingKeys,
                        w.span(),
                        key("window"),
                        "`window` goes with `limit`; a `rate` is per second".into(),
                    ));
                }
                self.check(r, key("rate"), |r| values::rate(*r))?
            }
            (None, Some(l)) => {
                let window = match raw.window {
                    Some(w) => self.check(w, key("window"), |w| values::limit_window(w))?,
                    None => std::time::Duration::from_secs(1),
                };
                self.check(l, key("limit"), |l| values::per_window(*l, window))?
            }
            (None, None) => {
                if let Some(w) = raw.window {
                    return Err(self.new_error(
                        ConfigErrorKind::MissingKey,
                        w.span(),
                        key("window"),
                        "`window` needs a `limit` beside it".into(),
                    ));
                }
                if raw.probability.is_none() {
                    if let Some(a) = raw.algorithm {
                        return Err(self.new_error(
                            ConfigErrorKind::MissingKey,
                            a.span(),
                            key("algorithm"),
                            "`algorithm` needs a `rate` or a `limit` beside it".into(),
                        ));
                    }
                    if let Some(sc) = raw.scope {
                        return Err(self.new_error(
                            ConfigErrorKind::MissingKey,
                            sc.span(),
                            key("scope"),
                            "`scope` needs a `rate` or a `limit` beside it".into(),
                        ));
                    }
                    if let Some(pc) = raw.paced {
                        return Err(self.new_error(
                            ConfigErrorKind::MissingKey,
                            pc.span(),
                            key("paced"),
                            "`paced` needs a `rate` or a `limit` beside it".into(),
                        ));
                    }
                }
                return Ok(None);
            }
        };
        let algorithm = match raw.algorithm {
            Some(a) => self.check(a, key("algorithm"), |a| values::algorithm(a))?,
            None => Algorithm::default(),
        };
        let scope = match raw.scope {
            Some(sc) => self.check(sc, key("scope"), |sc| values::scope(sc))?,
            None => Scope::Local,
        };
        if scope == Scope::Fleet {
            if let Some(a) = raw
                .algorithm
                .as_ref()
                .filter(|_| algorithm != Algorithm::FixedWindow)
            {
                return Err(self.new_error(
                    ConfigErrorKind::ConflictingKeys,
                    a.span(),
                    key("algorithm"),
                    format!("a fleet-scoped limit is a fixed window of Redis time; algorithm {algorithm} is local only: remove it or set \"fixed\""),
                ));
            }
            if let Some(pc) = raw.paced.as_ref().filter(|pc| *pc.get_ref()) {
                return Err(self.new_error(
                    ConfigErrorKind::ConflictingKeys,
                    pc.span(),
                    key("paced"),
                    "a fleet-scoped limit is a fixed window of Redis time and is not paced: remove `paced` or set it to false".into(),
                ));
            }
            if let Some(sc) = raw.scope {
                self.first_fleet
                    .borrow_mut()
                    .get_or_insert_with(|| (sc.span(), key("scope").to_string()));
            }
        }
        let at = raw
            .window
            .as_ref()
            .map(Spanned::span)
            .or(raw.rate.as_ref().map(Spanned::span))
            .or(raw.limit.as_ref().map(Spanned::span))
            .map_or_else(Pos::default, |span| self.pos(span));
        let paced = raw.paced.as_ref().is_none_or(|pc| *pc.get_ref());
        Ok(Some(LimitSpec {
            limit: if paced { limit } else { limit.unpaced() },
            algorithm,
            scope,
            at,
        }))
    }

    /// Checks that `name` (a service or rule name) can be part of a fleet key.
    fn fleet_name(&self, name: &Spanned<String>, key: &str) -> Result<(), ConfigError> {
        self.check(name, key, |n| values::fleet_key_part(n))
    }

    fn block(
        &self,
        raw: &Spanned<RawBlock>,
        path: Path<'_>,
        is_default: bool,
    ) -> Result<ServiceConfig, ConfigError> {
        let span = raw.span();
        let raw = raw.get_ref();
        let key = |k: &'static str| Path::Key(&path, k);
        let name = match (&raw.name, is_default) {
            (Some(n), true) => {
                return Err(self.new_error(
                    ConfigErrorKind::UnknownKey,
                    n.span(),
                    key("name"),
                    "[default] applies to every service not listed and takes no `name`; list a service with [[service]]".into(),
                ))
            }
            (None, true) => String::new(),
            (Some(n), false) => {
                self.check(n, key("name"), |n| values::name("service name", n))?;
                n.get_ref().clone()
            }
            (None, false) => {
                return Err(self.new_error(
                    ConfigErrorKind::MissingKey,
                    span,
                    key("name"),
                    "a [[service]] needs a `name`: the service.name it applies to".into(),
                ))
            }
        };
        let mut policy = self.policy(&raw.policy_keys(), path)?;
        if is_default {
            // A [default] that sets no policy keeps the built-in one.
            policy = policy.or(ServiceConfig::builtin_default().policy);
        }
        let inherit_default_rules = match (&raw.inherit_default_rules, is_default) {
            (Some(i), true) => return Err(self.new_error(
                ConfigErrorKind::UnknownKey,
                i.span(),
                key("inherit_default_rules"),
                "`inherit_default_rules` is set on a [[service]], to opt out of [default]'s rules"
                    .into(),
            )),
            (Some(i), false) => *i.get_ref(),
            (None, _) => true,
        };
        let cap = match &raw.cap {
            Some(c) => {
                let cap_path = key("cap");
                let cr = c.get_ref();
                if let Some(a) = &cr.adaptive {
                    return Err(self.new_error(
                        ConfigErrorKind::UnknownKey,
                        a.span(),
                        format!("{cap_path}.adaptive"),
                        "a cap is a limit and takes no `adaptive`; use `rate`, or `limit` with `window`".into(),
                    ));
                }
                if let Some(l) = &cr.at_least {
                    return Err(self.new_error(
                        ConfigErrorKind::UnknownKey,
                        l.span(),
                        format!("{cap_path}.at_least"),
                        "a cap is a limit and takes no `at_least`; use `rate`, or `limit` with `window`".into(),
                    ));
                }
                if let Some(p) = &cr.probability {
                    return Err(self.new_error(
                        ConfigErrorKind::UnknownKey,
                        p.span(),
                        format!("{cap_path}.probability"),
                        "a cap is a limit and takes no `probability`; use `rate`, or `limit` with `window`".into(),
                    ));
                }
                let spec = self.limit(&cr.policy_keys(), cap_path)?;
                Some(spec.ok_or_else(|| {
                    self.new_error(
                        ConfigErrorKind::MissingKey,
                        c.span(),
                        cap_path,
                        "a cap needs a `rate` or a `limit` (with `window`)".into(),
                    )
                })?)
            }
            None => None,
        };
        let remote_parents = match &raw.remote_parents {
            Some(r) => self.check(r, key("remote_parents"), |r| values::remote_parents(r))?,
            None => RemoteParents::default(),
        };
        let mut rules: Vec<Rule> = Vec::with_capacity(raw.rule.len());
        let mut names: HashSet<String> = HashSet::with_capacity(raw.rule.len());
        let mut floors = 0u64;
        // Unnamed rules are named by position, those of [default] apart from a
        // service's so that neither replaces the other when inherited.
        let unnamed = if is_default { "default-rule" } else { "rule" };
        // The first rule with no condition: no rule may follow it.
        let mut catch_all: Option<usize> = None;
        for (i, r) in raw.rule.iter().enumerate() {
            let rule_path = Path::Rule(&path, i);
            let rule = self.rule(r, rule_path, i, unnamed, remote_parents)?;
            if let Some(all) = catch_all {
                return Err(self.new_error(
                    ConfigErrorKind::UnreachableRule,
                    raw.rule[all].span(),
                    format!("{path}.rule[{all}]"),
                    format!(
                        "rule {:?} has no condition (no `span_name`, `kind`, `parent` or `attributes`) and matches every span, so rule {:?} after it never decides; give it a condition, move it last, or make it the block's own policy",
                        rules[all].name, rule.name
                    ),
                ));
            }
            if !names.insert(rule.name.clone()) {
                let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
                return Err(self.new_error(
                    ConfigErrorKind::DuplicateRule,
                    span,
                    format!("{rule_path}.name"),
                    format!(
                        "rule name {:?} is used twice in this service; rule names must be unique",
                        rule.name
                    ),
                ));
            }
            if rule.floor > 0 {
                let floor = r.get_ref().floor.as_ref().map_or(r.span(), |f| f.span());
                let Some(cap) = &cap else {
                    return Err(self.new_error(
                        ConfigErrorKind::MissingKey,
                        floor,
                        format!("{rule_path}.floor"),
                        format!("a `floor` reserves permits in the service cap; add `{path}.cap`"),
                    ));
                };
                floors += u64::from(rule.floor);
                if floors > u64::from(cap.limit.permits()) {
                    return Err(self.new_error(
                        ConfigErrorKind::InvalidLimit,
                        floor,
                        format!("{rule_path}.floor"),
                        format!(
                            "the rules' floors add up to {floors}, more than the cap's {} permits per window; floors must fit in the cap",
                            cap.limit.permits()
                        ),
                    ));
                }
            }
            if rule.matches_everything() {
                catch_all = Some(i);
            }
            rules.push(rule);
        }
        if let (false, Some(all), Some((span, k))) = (is_default, catch_all, policy_key(raw)) {
            return Err(self.unreachable_policy(span, &key(k).to_string(), &rules[all].name, ""));
        }
        self.fleet_keys(raw, path, policy.as_ref(), cap.as_ref(), &rules)?;
        Ok(ServiceConfig {
            name,
            policy,
            cap,
            remote_parents,
            rules,
            inherit_default_rules,
        })
    }

    /// Checks that the fleet-scoped limits of a block get valid, distinct fleet keys.
    fn fleet_keys(
        &self,
        raw: &RawBlock,
        path: Path<'_>,
        policy: Option<&Policy>,
        cap: Option<&LimitSpec>,
        rules: &[Rule],
    ) -> Result<(), ConfigError> {
        let fleet_policy = |p: &Policy| matches!(p, Policy::Limit(s) if s.scope == Scope::Fleet);
        let cap_fleet = cap.is_some_and(|c| c.scope == Scope::Fleet);
        let any = cap_fleet
            || policy.is_some_and(fleet_policy)
            || rules.iter().any(|r| fleet_policy(&r.policy));
        if !any {
            return Ok(());
        }
        // The file default's keys take the service name at run time.
        if let Some(n) = &raw.name {
            self.fleet_name(n, &format!("{path}.name"))?;
        }
        for (i, (rule, r)) in rules.iter().zip(&raw.rule).enumerate() {
            let fleet = fleet_policy(&rule.policy);
            if !(fleet || cap_fleet && rule.floor > 0) {
                continue;
            }
            let name_key = format!("{path}.rule[{i}].name");
            let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
            if let Some(n) = &r.get_ref().name {
                self.fleet_name(n, &name_key)?;
            }
            let other = match rule.name.as_str() {
                "cap" if cap_fleet => Some(fleet_cap_key("<service>")),
                "default" if policy.is_some_and(fleet_policy) => {
                    Some(fleet_key("<service>", "default"))
                }
                _ => None,
            };
            if let (true, Some(other)) = (fleet, other) {
                return Err(self.new_error(
                    ConfigErrorKind::DuplicateRule,
                    span,
                    &name_key,
                    format!(
                        "a fleet-scoped rule named {:?} would share the Redis key {other:?} with the service's own fleet-scoped {}; rename the rule",
                        rule.name, rule.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn rule(
        &self,
        raw: &Spanned<RawRule>,
        path: Path<'_>,
        index: usize,
        unnamed: &str,
        remote_parents: RemoteParents,
    ) -> Result<Rule, ConfigError> {
        let span = raw.span();
        let raw = raw.get_ref();
        let key = |k: &'static str| Path::Key(&path, k);
        let name = match &raw.name {
            Some(n) => {
                self.check(n, key("name"), |n| values::name("rule name", n))?;
                n.get_ref().clone()
            }
            None => format!("{unnamed}-{}", index + 1),
        };
        let span_name = match &raw.span_name {
            Some(g) => Some(self.check(g, key("span_name"), |g| values::glob(g))?),
            None => None,
        };
        let kind = match &raw.kind {
            Some(k) => Some(self.check(k, key("kind"), |k| values::span_kind(k))?),
            None => None,
        };
        let parent = match &raw.parent {
            Some(p) => {
                let origin = self.check(p, key("parent"), |p| values::parent(p))?;
                if origin == crate::sampler::Origin::Remote && remote_parents != RemoteParents::Cap
                {
                    return Err(self.new_error(
                        ConfigErrorKind::ConflictingKeys,
                        p.span(),
                        key("parent"),
                        "parent = \"remote\" never matches while remote parents are followed; set remote_parents = \"cap\" on the service".into(),
                    ));
                }
                Some(origin)
            }
            None => None,
        };
        let mut attributes = Vec::with_capacity(raw.attributes.len());
        for (k, v) in &raw.attributes {
            let attr_key = Path::Attribute(&path, k.get_ref());
            self.check(k, attr_key, |k| values::name("attribute key", k))?;
            attributes.push((
                k.get_ref().clone(),
                self.check(v, attr_key, |v| values::glob(v))?,
            ));
        }
        let policy = self.policy(&raw.policy_keys(), path)?.ok_or_else(|| {
            self.new_error(
                ConfigErrorKind::MissingKey,
                span.clone(),
                path,
                "a rule needs a `rate`, a `limit` (with `window`), a `probability` (with an optional `at_least`) or `adaptive`"
                    .into(),
            )
        })?;
        let floor = match &raw.floor {
            Some(f) => self.check(f, key("floor"), |f| {
                u32::try_from(*f).map_err(|_| {
                    Invalid::new(
                        ConfigErrorKind::InvalidLimit,
                        format!("floor {f} is not a permit count; use a whole number from 0 up to the cap's permits"),
                    )
                })
            })?,
            None => 0,
        };
        Ok(Rule {
            name,
            span_name,
            kind,
            parent,
            attributes,
            policy,
            floor,
            inherited: false,
        })
    }
}

impl SamplingConfig {
    /// Parses a TOML configuration; `file` names it in errors.
    ///
    /// ```
    /// use otel_rate_sampler::SamplingConfig;
    ///
    /// let config = SamplingConfig::from_toml_str(r#"
    ///     [default]
    ///     rate = 10.0
    ///
    ///     [[service]]
    ///     name = "checkout"
    ///     cap = { rate = 50.0 }
    ///
    ///     [[service.rule]]
    ///     name = "health"
    ///     span_name = "GET /health*"
    ///     probability = 0.0
    /// "#, "sampling.toml")?;
    /// assert_eq!(config.services().collect::<Vec<_>>(), ["checkout"]);
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `file`, the line, column and key of the first mistake.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        Self::from_toml_with(text, file, None)
    }

    /// [`from_toml_str`](Self::from_toml_str), with `redis` (from the environment), when
    /// given, replacing the `[fleet]` table's Redis URLs.
    pub(crate) fn from_toml_with(
        text: &str,
        file: &str,
        redis: Option<&[String]>,
    ) -> Result<Self, ConfigError> {
        // A UTF-8 byte order mark (some Windows editors write one) is not part of the
        // text, nor counted in columns.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let ctx = Ctx::new(text, file);
        let raw: RawFile = toml::from_str(text).map_err(|e| toml_error(&ctx, &e))?;
        ctx.config(&raw, redis)
    }
}

impl<'a> Ctx<'a> {
    /// A context for the errors of `text`, read from `file`.
    pub(super) fn new(text: &'a str, file: &'a str) -> Self {
        Ctx {
            text,
            file,
            lines: std::cell::OnceCell::new(),
            first_fleet: RefCell::new(None),
        }
    }

    /// The configuration `raw` describes, checked, with `redis` (from the environment),
    /// when given, replacing the file's Redis URLs.
    pub(super) fn config(
        &self,
        raw: &RawFile,
        redis: Option<&[String]>,
    ) -> Result<SamplingConfig, ConfigError> {
        let (ctx, file) = (self, self.file);
        let default = match &raw.default {
            Some(d) => ctx.block(d, Path::Default, true)?,
            None => ServiceConfig::builtin_default(),
        };
        let mut services: Vec<ServiceConfig> = Vec::with_capacity(raw.service.len());
        let mut index: HashMap<String, usize> = HashMap::with_capacity(raw.service.len());
        for (i, s) in raw.service.iter().enumerate() {
            let path = Path::Service(i);
            let service = ctx.block(s, path, false)?;
            if index.insert(service.name.clone(), i).is_some() {
                let span = s.get_ref().name.as_ref().map_or(s.span(), |n| n.span());
                return Err(ctx.new_error(
                    ConfigErrorKind::DuplicateService,
                    span,
                    format!("{path}.name"),
                    format!(
                        "service {:?} is listed twice; list each service once",
                        service.name
                    ),
                ));
            }
            services.push(service);
        }
        let mut fleet = match &raw.fleet {
            Some(f) => ctx.fleet(f.get_ref())?,
            None => FleetSettings::default(),
        };
        if let Some(urls) = redis {
            fleet.urls = urls.to_vec();
        }
        if let Some((span, key)) = ctx.first_fleet.take() {
            if fleet.urls.is_empty() {
                return Err(ctx.new_error(
                    ConfigErrorKind::MissingKey,
                    span,
                    &key,
                    format!("scope = \"fleet\" shares the limit through Redis, and no Redis URL is given; add `[fleet]` with `redis = \"redis://host:6379\"`, or set {}", crate::config::vars::OTEL_RATE_SAMPLER_REDIS),
                ));
            }
        }
        let mut config = SamplingConfig::indexed(file, default, services, index, fleet);
        if let Some(limits) = &raw.limits {
            if let Some(b) = &limits.get_ref().memory_budget {
                config.memory_budget = ctx.check(b, "limits.memory_budget", |b| match b {
                    RawBytes::Bytes(n) => budget::budget_bytes(*n),
                    RawBytes::Text(t) => budget::parse_budget(t),
                })?;
            }
        }
        ctx.inherited(&config, raw)?;
        if let Some(over) = config.over_budget() {
            let (span, key) = match (over.service, over.largest) {
                (_, Culprit::Inherited(j)) | (None, Culprit::Rule(j)) => {
                    (rule_span(&raw.default, j), format!("default.rule[{j}]"))
                }
                (Some(i), Culprit::Rule(j)) => (
                    raw.service[i].get_ref().rule[j].span(),
                    format!("service[{i}].rule[{j}]"),
                ),
                (Some(i), Culprit::Policy) => (raw.service[i].span(), format!("service[{i}]")),
                (Some(i), Culprit::Cap) => (
                    raw.service[i]
                        .get_ref()
                        .cap
                        .as_ref()
                        .map_or(raw.service[i].span(), |c| c.span()),
                    format!("service[{i}].cap"),
                ),
                (None, Culprit::Policy) => (block_span(&raw.default), "default".to_owned()),
                (None, Culprit::Cap) => (block_span(&raw.default), "default.cap".to_owned()),
            };
            return Err(ctx.err(over.invalid(&config), span, &key));
        }
        Ok(config)
    }
}

/// The span and name of the key that sets a block's own policy, if any.
fn policy_key(raw: &RawBlock) -> Option<(Range<usize>, &'static str)> {
    raw.rate
        .as_ref()
        .map(|r| (r.span(), "rate"))
        .or_else(|| raw.limit.as_ref().map(|l| (l.span(), "limit")))
        .or_else(|| raw.probability.as_ref().map(|p| (p.span(), "probability")))
}

/// The span of `[default]`'s rule `j` (the file's start if there is none).
fn rule_span(default: &Option<Spanned<RawBlock>>, j: usize) -> Range<usize> {
    default
        .as_ref()
        .and_then(|d| d.get_ref().rule.get(j))
        .map_or(0..0, |r| r.span())
}

/// The span of `[default]` (the file's start if there is none).
fn block_span(default: &Option<Spanned<RawBlock>>) -> Range<usize> {
    default.as_ref().map_or(0..0, |d| d.span())
}

impl Ctx<'_> {
    /// Checks what each listed service inherits from `[default]`: no inherited rule
    /// after a rule of its own that matches every span, and inherited floors that fit
    /// in its cap.
    fn inherited(&self, config: &SamplingConfig, raw: &RawFile) -> Result<(), ConfigError> {
        if config.default.rules.is_empty() {
            return Ok(());
        }
        for (i, own) in config.services.iter().enumerate() {
            let inherited = || config.inherited_rules(own).map(|(_, r)| r);
            let Some(first) = inherited().next() else {
                continue; // it opts out, or replaces every default rule by one of its own
            };
            let opt_out = OptOut(i);
            if let Some(last) = own.rules.last().filter(|r| r.matches_everything()) {
                let j = own.rules.len() - 1;
                return Err(self.new_error(
                    ConfigErrorKind::UnreachableRule,
                    raw.service[i].get_ref().rule[j].span(),
                    format!("service[{i}].rule[{j}]"),
                    format!(
                        "rule {:?} has no condition and matches every span, so the rules service {:?} inherits from [default] (first {:?}) never decide; give it a condition, make it the service's own policy, or set {opt_out}",
                        last.name, own.name, first.name
                    ),
                ));
            }
            let block = raw.service[i].get_ref();
            if let (Some(last), Some((span, k))) = (
                inherited().last().filter(|r| r.matches_everything()),
                policy_key(block),
            ) {
                return Err(self.unreachable_policy(
                    span,
                    &format!("service[{i}].{k}"),
                    &last.name,
                    &format!(", or set {opt_out} (the rule is inherited from [default])"),
                ));
            }
            self.inherited_fleet_keys(i, own, inherited, &raw.service[i], opt_out)?;
            let Some(floored) = inherited().find(|r| r.floor > 0) else {
                continue;
            };
            let floors: u64 = own
                .rules
                .iter()
                .chain(inherited())
                .map(|r| u64::from(r.floor))
                .sum();
            let block = &raw.service[i];
            match own.cap {
                None => {
                    return Err(self.new_error(
                        ConfigErrorKind::MissingKey,
                        block.span(),
                        format!("service[{i}].cap"),
                        format!(
                            "service {:?} inherits rule {:?} from [default], whose `floor` reserves permits in the service cap, and the service has no cap; add `service[{i}].cap`, or set {opt_out}",
                            own.name, floored.name
                        ),
                    ))
                }
                Some(cap) if floors > u64::from(cap.limit.permits()) => {
                    let span = block.get_ref().cap.as_ref().map_or(block.span(), |c| c.span());
                    return Err(self.new_error(
                        ConfigErrorKind::InvalidLimit,
                        span,
                        format!("service[{i}].cap"),
                        format!(
                            "the floors of service {:?}'s rules, with those it inherits from [default], add up to {floors}, more than the cap's {} permits per window; raise the cap, lower the floors, or set {opt_out}",
                            own.name,
                            cap.limit.permits()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl Ctx<'_> {
    /// A service's own policy that no span can reach: `rule` matches every span first.
    fn unreachable_policy(
        &self,
        span: Range<usize>,
        key: &str,
        rule: &str,
        hint: &str,
    ) -> ConfigError {
        self.new_error(
            ConfigErrorKind::UnreachableRule,
            span,
            key,
            format!("the service's own policy never decides: its last rule, {rule:?}, has no condition and matches every span first; remove one of the two, or give the rule a condition{hint}"),
        )
    }

    /// Checks that the fleet-scoped rules service `i` inherits get valid Redis keys of
    /// its name, distinct from its own fleet-scoped default and cap.
    fn inherited_fleet_keys<'r, I: Iterator<Item = &'r Rule>>(
        &self,
        i: usize,
        own: &ServiceConfig,
        inherited: impl Fn() -> I,
        raw: &Spanned<RawBlock>,
        opt_out: OptOut,
    ) -> Result<(), ConfigError> {
        let fleet = |p: &Policy| matches!(p, Policy::Limit(s) if s.scope == Scope::Fleet);
        let cap_fleet = own.cap.is_some_and(|c| c.scope == Scope::Fleet);
        if !inherited().any(|r| fleet(&r.policy) || cap_fleet && r.floor > 0) {
            return Ok(());
        }
        if let Some(n) = &raw.get_ref().name {
            self.fleet_name(n, &format!("service[{i}].name"))?;
        }
        let clash = inherited().find(|r| {
            fleet(&r.policy)
                && (r.name == "cap" && cap_fleet
                    || r.name == "default" && own.policy.as_ref().is_some_and(fleet))
        });
        if let Some(rule) = clash {
            return Err(self.new_error(
                ConfigErrorKind::DuplicateRule,
                raw.span(),
                format!("service[{i}]"),
                format!(
                    "service {:?} inherits the fleet-scoped rule {:?} from [default], whose Redis key would be that of the service's own fleet-scoped {}; rename the rule, or set {opt_out}",
                    own.name, rule.name, rule.name
                ),
            ));
        }
        Ok(())
    }

    /// The `[fleet]` table.
    fn fleet(&self, raw: &RawFleet) -> Result<FleetSettings, ConfigError> {
        let urls = match &raw.redis {
            Some(r) => {
                let urls = match r.get_ref() {
                    RawUrls::One(u) => vec![u.clone()],
                    RawUrls::Many(us) => us.clone(),
                };
                self.check(r, "fleet.redis", |_| values::redis_urls(&urls))?;
                urls
            }
            None => Vec::new(),
        };
        let prefix = match &raw.prefix {
            Some(p) => {
                self.check(p, "fleet.prefix", |p| values::fleet_key_part(p))?;
                Some(p.get_ref().clone())
            }
            None => None,
        };
        let sync_interval = match &raw.sync_interval {
            Some(i) => Some(self.check(i, "fleet.sync_interval", |i| values::sync_interval(i))?),
            None => None,
        };
        Ok(FleetSettings {
            urls,
            cluster: raw.cluster.as_ref().is_some_and(|c| *c.get_ref()),
            prefix,
            sync_interval,
        })
    }
}

/// A TOML syntax or shape error, with its kind worked out from serde's message.
fn toml_error(ctx: &Ctx<'_>, e: &toml::de::Error) -> ConfigError {
    let span = e.span().unwrap_or(0..0);
    let message = e.message().trim().to_owned();
    let (kind, key) = if let Some(rest) = message.strip_prefix("unknown field `") {
        // serde names the bare key; the other errors name its full path.
        let key = key_path(ctx.text, &span)
            .unwrap_or_else(|| rest.split('`').next().unwrap_or_default().to_owned());
        (ConfigErrorKind::UnknownKey, key)
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or_default().to_owned();
        (ConfigErrorKind::MissingKey, key)
    } else {
        let key = key_path(ctx.text, &span).unwrap_or_else(|| key_before(ctx.text, span.start));
        (ConfigErrorKind::Syntax, key)
    };
    ConfigError::new(kind, ctx.file, ctx.pos(span), key, message).with_source(e.clone())
}

/// The full path (`service[0].rule[1].rat`) of the key spelled at `span`, or whose value
/// is at `span`, found in the document parsed again with spans (only on this error path).
fn key_path(text: &str, span: &Range<usize>) -> Option<String> {
    fn in_table(table: &DeTable<'_>, span: &Range<usize>, path: &str) -> Option<String> {
        table.iter().find_map(|(key, value)| {
            let path = match path {
                "" => key.get_ref().to_string(),
                _ => format!("{path}.{}", key.get_ref()),
            };
            // The key itself (an unknown key), or its value (a value of the wrong type).
            if key.span() == *span || value.span() == *span {
                return Some(path);
            }
            in_value(value.get_ref(), span, &path)
        })
    }
    fn in_value(value: &DeValue<'_>, span: &Range<usize>, path: &str) -> Option<String> {
        match value {
            DeValue::Table(t) => in_table(t, span, path),
            DeValue::Array(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, v)| in_value(v.get_ref(), span, &format!("{path}[{i}]"))),
            _ => None,
        }
    }
    in_table(DeTable::parse(text).ok()?.get_ref(), span, "")
}

/// The `key` of a `key = value` line that holds byte `offset` (best effort).
fn key_before(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or_default();
    let line = before.rsplit('\n').next().unwrap_or_default();
    match line.rsplit_once('=') {
        Some((k, _)) => k
            .rsplit([',', '{'])
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"')
            .to_owned(),
        None => String::new(),
    }
}

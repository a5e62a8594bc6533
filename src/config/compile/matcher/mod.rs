//! A service's rule conditions compiled for the decision: [`Matchers::first_match`]
//! gives the first rule a span matches. Rule sets go through the [`index`] (each
//! distinct condition tested at most once per decision, the rules as bitsets); those
//! reading more attribute keys than its one pass collects through [`linear`], rule by
//! rule. Both give the same answer, the first rule whose every condition holds.

mod contains;
mod index;
mod linear;
mod prefix;
mod shapes;
mod span;
mod table;

use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use crate::config::model::Rule;
use crate::sampler::Origin;
use index::Index;
use linear::Linear;
use span::Span;

/// The conditions of every rule of a service, in rule order.
pub(crate) struct Matchers(Path);

// One per rule set, built once: its size does not matter, while a box would put a
// pointer to follow on every decision.
#[allow(clippy::large_enum_variant)]
enum Path {
    Index(Index),
    Linear(Linear),
}

impl Matchers {
    pub(crate) fn new<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Self {
        let rules: Vec<&Rule> = rules.into_iter().collect();
        Self(match Index::new(&rules) {
            Some(index) => Path::Index(index),
            None => Path::Linear(Linear::new(&rules)),
        })
    }

    /// The index of the first rule matching the span, if any.
    #[inline]
    pub(crate) fn first_match(
        &self,
        origin: Origin,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
    ) -> Option<usize> {
        let span = Span {
            origin,
            name,
            kind,
            attributes,
        };
        match &self.0 {
            Path::Index(index) => index.first_match(&span),
            Path::Linear(linear) => linear.first_match(&span),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use opentelemetry::Value;
    use proptest::prelude::*;

    use super::span::reference;
    use super::*;
    use crate::config::model::Policy;
    use crate::pattern::Pattern;

    // Small alphabets, so that random names, keys and values often meet.
    // The last, over 64 bytes, takes `*admin*` through the pattern's searcher.
    const NAMES: [&str; 9] = [
        "a",
        "ab",
        "GET /x",
        "GET /y/z",
        "b",
        "",
        "abc",
        "x/admin/y",
        "GET /a/rather/long/path/well/past/sixty/four/bytes/of/span/name/admin/x",
    ];
    const NAME_GLOBS: [&str; 10] = [
        "a",
        "ab",
        "GET /x",
        "b",
        "a*",
        "*b",
        "*admin*",
        "GET /{x,y}*",
        "?b",
        "*",
    ];
    const KEYS: [&str; 5] = ["k", "region", "http.status_code", "kk", "net.peer.name"];
    // Integers and floats are tested as numbers for exact and prefix patterns; exact
    // and prefix texts on both sides of 8 and 16 bytes (held in words up to 16).
    const VALUE_GLOBS: [&str; 22] = [
        "1",
        "5*",
        "true",
        "us-*",
        "eu",
        "*",
        "-1",
        "1.5",
        "?",
        "-*",
        "0*",
        "1*",
        "50",
        "1.50",
        "abcdefgh",
        "abcdefghijklmnop",
        "abcdefghijklmnopq",
        "abcdefghij*",
        "abcdefgh*",
        "abcdefghijklmnop*",
        "abcdefghijklmnopq*",
        "abcdefg",
    ];

    fn values() -> impl Strategy<Value = Value> {
        prop_oneof![
            prop::sample::select(vec![
                "us-east",
                "eu",
                "1",
                "5",
                "true",
                "x",
                "50",
                "-1",
                "1.50",
                "abcdefg",
                "abcdefgh",
                "abcdefgX",
                "abcdefghij",
                "abcdefghiX",
                "abcdefghijklmnop",
                "abcdefghijklmnoX",
                "Xbcdefghijklmnop",
                "abcdefghijklmnopq",
                "abcdefghijklmnopX",
                "abcdefghijXlmnopq",
                "abcdefghijklmnopqrs",
            ])
            .prop_map(Value::from),
            prop::sample::select(vec![1i64, 5, 50, -1, 500, 12, 0, -50]).prop_map(Value::I64),
            any::<bool>().prop_map(Value::Bool),
            prop::sample::select(vec![1.5f64, 0.25]).prop_map(Value::F64),
        ]
    }

    fn kinds() -> impl Strategy<Value = SpanKind> {
        prop::sample::select(vec![
            SpanKind::Client,
            SpanKind::Server,
            SpanKind::Producer,
            SpanKind::Consumer,
            SpanKind::Internal,
        ])
    }

    fn origins() -> impl Strategy<Value = Origin> {
        prop::sample::select(vec![Origin::Root, Origin::Remote])
    }

    fn rule() -> impl Strategy<Value = Rule> {
        (
            prop::option::weighted(0.6, prop::sample::select(NAME_GLOBS.to_vec())),
            prop::option::weighted(0.3, kinds()),
            prop::option::weighted(0.3, origins()),
            prop::collection::vec(
                (
                    prop::sample::select(KEYS.to_vec()),
                    prop::sample::select(VALUE_GLOBS.to_vec()),
                ),
                0..3,
            ),
        )
            .prop_map(|(name, kind, parent, attributes)| Rule {
                name: String::new(),
                named: false,
                span_name: name.map(|n| Pattern::glob(n).unwrap()),
                kind,
                parent,
                attributes: attributes
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), Pattern::glob(v).unwrap()))
                    .collect(),
                policy: Policy::Probability(1.0),
                floor: 0,
                inherited: false,
            })
    }

    fn span() -> impl Strategy<Value = (Origin, &'static str, SpanKind, Vec<KeyValue>)> {
        (
            origins(),
            prop::sample::select(NAMES.to_vec()),
            kinds(),
            prop::collection::vec(
                (prop::sample::select(KEYS.to_vec()), values())
                    .prop_map(|(k, v)| KeyValue::new(k, v)),
                // Both sides of the short spans read backwards (`table::BACKWARDS`).
                0..14,
            ),
        )
    }

    proptest! {
        /// The matcher (indexed, up to 150 rules: three chunks) finds the rule the
        /// plain semantics finds, on random rule sets and spans (repeated keys, keys
        /// absent, strings, integers, booleans, floats; spans short and long).
        #[test]
        fn the_index_finds_the_first_rule_the_plain_semantics_finds(
            rules in prop::collection::vec(rule(), 0..150),
            spans in prop::collection::vec(span(), 1..20),
        ) {
            let matchers = Matchers::new(&rules);
            prop_assert!(matches!(matchers.0, Path::Index(_)));
            for (origin, name, kind, kvs) in &spans {
                let want = rules.iter().position(|r| reference(r, *origin, name, kind, kvs));
                prop_assert_eq!(matchers.first_match(*origin, name, kind, kvs), want);
            }
        }
    }

    #[test]
    fn rules_reading_more_keys_than_one_pass_collects_go_rule_by_rule() {
        let rules: Vec<Rule> = (0..=table::MAX_KEYS)
            .map(|i| Rule {
                name: String::new(),
                named: false,
                span_name: None,
                kind: None,
                parent: None,
                attributes: vec![(format!("k{i}"), Pattern::glob("v").unwrap())],
                policy: Policy::Probability(1.0),
                floor: 0,
                inherited: false,
            })
            .collect();
        let matchers = Matchers::new(&rules);
        assert!(matches!(matchers.0, Path::Linear(_)));
        let last = format!("k{}", table::MAX_KEYS);
        let span = [KeyValue::new(last, "v"), KeyValue::new("k3", "w")];
        let got = matchers.first_match(Origin::Root, "n", &SpanKind::Server, &span);
        assert_eq!(got, Some(table::MAX_KEYS));
        assert_eq!(
            Matchers::new(&rules[1..]).first_match(Origin::Root, "n", &SpanKind::Server, &span),
            Some(table::MAX_KEYS - 1)
        );
    }
}

//! [`Index`]: the rules' conditions regrouped so that each distinct condition is
//! tested at most once per decision, whatever the number of rules using it, and only
//! while a rule that could still match needs it.
//!
//! The rules are taken 64 at a time (a [`Chunk`]); a chunk's candidates are a bitset,
//! bit `i` its `i`th rule. A decision starts from the rules accepting the span's kind
//! and parent (one load), keeps those whose exact span name is the span's (one probe
//! of a table of the exact names, shared by the chunks), clears the rules of each
//! other name pattern that does not match, then, if a rule with attribute conditions
//! is left, finds the values of every key the rules read in one pass over the span's
//! attributes and clears the rules of each condition that fails. The lowest bit left
//! is the first matching rule: the result is the rule-by-rule scan's, as every rule
//! is the conjunction of its conditions.

use opentelemetry::trace::SpanKind;

use super::contains::Needle;
use super::prefix::{self, Prefixes};
use super::shapes::Conditions;
use super::span::Span;
use super::table::{StrTable, Values, MAX_KEYS};
use crate::config::model::Rule;
use crate::pattern::Pattern;
use crate::sampler::Origin;

/// The rules a bitset of a chunk holds.
const CHUNK: usize = 64;

pub(super) struct Index {
    chunks: Box<[Chunk]>,
    /// The exact span names of every rule (a pattern without wildcard).
    exact_names: StrTable,
    /// Per exact name (by its number in `exact_names`) then per chunk, the rules
    /// whose span name it is.
    exact_rules: Box<[u64]>,
    /// The attribute keys the rules read.
    keys: StrTable,
}

struct Chunk {
    /// The index of its first rule.
    base: usize,
    /// Per span kind and parent origin ([`slot`]), the rules accepting both.
    by_kind: [u64; 10],
    /// The rules with an exact span name.
    exact_named: u64,
    /// The rules with another span name pattern (tested only if one of them is left).
    patterned: u64,
    /// The literal texts the other span name patterns start with, with the rules
    /// using them: a `prefix*` pattern's whole test, a general glob's first filter.
    prefixes: Prefixes,
    /// Each distinct `*text*` span name pattern, tested inline on a short name.
    substrings: Box<[Substring]>,
    /// Each other distinct span name pattern (not a `prefix*` one in `prefixes`), with
    /// the rules using it.
    names: Box<[(Pattern, u64)]>,
    /// The rules with attribute conditions.
    with_attributes: u64,
    /// Each distinct attribute condition (the key's number in `Index::keys`, the
    /// value's pattern), with the rules using it, grouped by the pattern's shape.
    conditions: Conditions,
}

/// A `*text*` span name pattern with the rules using it.
struct Substring {
    /// The text, looked for inline in a short name.
    needle: Needle,
    /// For a long name (the pattern's own searcher).
    pattern: Pattern,
    rules: u64,
}

const KINDS: [SpanKind; 5] = [
    SpanKind::Client,
    SpanKind::Server,
    SpanKind::Producer,
    SpanKind::Consumer,
    SpanKind::Internal,
];

/// The row of `by_kind` for a span of `kind` whose parent is `origin`.
#[inline]
fn slot(kind: &SpanKind, origin: Origin) -> usize {
    let kind = match kind {
        SpanKind::Client => 0,
        SpanKind::Server => 1,
        SpanKind::Producer => 2,
        SpanKind::Consumer => 3,
        SpanKind::Internal => 4,
    };
    kind * 2 + usize::from(origin == Origin::Remote)
}

/// `groups`' entry for `key` (appended if new), whose bitset gets `bit`.
fn add<K: PartialEq>(groups: &mut Vec<(K, u64)>, key: K, bit: u64) {
    match groups.iter_mut().find(|(k, _)| *k == key) {
        Some((_, rules)) => *rules |= bit,
        None => groups.push((key, bit)),
    }
}

/// The lowest bit of `rules` (its first rule), 0 if none.
#[inline(always)]
fn lowest(rules: u64) -> u64 {
    rules & rules.wrapping_neg()
}

/// The span name `rule` matches exactly, if its pattern has no wildcard.
fn exact_name(rule: &Rule) -> Option<&str> {
    rule.span_name.as_ref().and_then(Pattern::as_exact)
}

impl Index {
    /// The index of `rules`, or `None` if they read more attribute keys than one pass
    /// collects ([`MAX_KEYS`]).
    pub(super) fn new(rules: &[&Rule]) -> Option<Self> {
        let keys = StrTable::new(
            rules
                .iter()
                .flat_map(|r| r.attributes.iter().map(|(k, _)| k.as_str())),
        );
        if keys.len() > MAX_KEYS {
            return None;
        }
        let exact_names = StrTable::new(rules.iter().copied().filter_map(exact_name));
        let n_chunks = rules.len().div_ceil(CHUNK);
        let mut exact_rules = vec![0u64; exact_names.len() * n_chunks].into_boxed_slice();
        let mut chunks = Vec::with_capacity(n_chunks);
        for (c, group) in rules.chunks(CHUNK).enumerate() {
            for (i, rule) in group.iter().enumerate() {
                if let Some(n) = exact_name(rule).and_then(|name| exact_names.find(name)) {
                    exact_rules[n * n_chunks + c] |= 1 << i;
                }
            }
            chunks.push(Chunk::new(c * CHUNK, group, &keys));
        }
        Some(Self {
            chunks: chunks.into_boxed_slice(),
            exact_names,
            exact_rules,
            keys,
        })
    }

    /// The index of the first rule matching the span, if any.
    #[inline]
    pub(super) fn first_match(&self, span: &Span<'_>) -> Option<usize> {
        if self.chunks.is_empty() {
            return None;
        }
        let exact = if self.exact_names.len() == 0 {
            None
        } else {
            self.exact_names.find(span.name)
        };
        for c in 0..self.chunks.len() {
            let left = self.by_name(c, span, exact);
            // Attributes only if the first rule left reads them: a rule before every
            // rule that does wins whatever their attributes.
            if lowest(left) & self.chunks[c].with_attributes != 0 {
                return self.first_by_attributes(c, left, span, exact);
            }
            if left != 0 {
                return Some(self.chunks[c].first(left));
            }
        }
        None
    }

    /// [`first_match`](Self::first_match) from chunk `from`, whose rules `left` after
    /// their kind, parent and name need their attribute conditions: the keys' values
    /// are looked up here, once, and only on the decisions that need them.
    #[inline]
    fn first_by_attributes(
        &self,
        from: usize,
        mut left: u64,
        span: &Span<'_>,
        exact: Option<usize>,
    ) -> Option<usize> {
        let mut values: Values<'_> = [None; MAX_KEYS];
        self.keys.values(span.attributes, &mut values);
        for c in from..self.chunks.len() {
            if c > from {
                left = self.by_name(c, span, exact);
            }
            left = self.chunks[c].by_attributes(left, &values);
            if left != 0 {
                return Some(self.chunks[c].first(left));
            }
        }
        None
    }

    /// The rules of chunk `c` accepting the span's kind, parent and name; `exact` is
    /// the number of the span's name among the exact names, if it is one.
    #[inline(always)]
    fn by_name(&self, c: usize, span: &Span<'_>, exact: Option<usize>) -> u64 {
        let chunk = &self.chunks[c];
        let exact = exact.map_or(0, |n| self.exact_rules[n * self.chunks.len() + c]);
        let left = chunk.by_kind[slot(span.kind, span.origin)] & (!chunk.exact_named | exact);
        if left & chunk.patterned == 0 {
            return left;
        }
        chunk.by_pattern(left, span.name)
    }
}

impl Chunk {
    fn new(base: usize, rules: &[&Rule], keys: &StrTable) -> Self {
        let mut by_kind = [0u64; 10];
        let mut exact_named = 0;
        let mut patterned = 0;
        let mut names = Vec::new();
        let mut substrings = Vec::new();
        let mut prefixes = Vec::new();
        let mut with_attributes = 0;
        let mut conditions: Vec<((usize, Pattern), u64)> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let bit = 1u64 << i;
            for kind in &KINDS {
                for origin in [Origin::Root, Origin::Remote] {
                    if rule.kind.as_ref().is_none_or(|k| k == kind)
                        && rule.parent.is_none_or(|p| p == origin)
                    {
                        by_kind[slot(kind, origin)] |= bit;
                    }
                }
            }
            match &rule.span_name {
                Some(p) if p.as_exact().is_some() => exact_named |= bit,
                Some(p) => {
                    patterned |= bit;
                    match p.prefix() {
                        _ if p.substring().is_some_and(|t| !t.is_empty()) => {
                            add(&mut substrings, p.clone(), bit)
                        }
                        Some((text, whole)) if text.len() <= prefix::INLINE => {
                            add(&mut prefixes, text.to_owned(), bit);
                            if !whole {
                                add(&mut names, p.clone(), bit);
                            }
                        }
                        _ => add(&mut names, p.clone(), bit),
                    }
                }
                None => {}
            }
            for (key, pattern) in &rule.attributes {
                with_attributes |= bit;
                // Every key is in the table: it was built from these rules.
                let key = keys.find(key).unwrap_or(MAX_KEYS);
                add(&mut conditions, (key, pattern.clone()), bit);
            }
        }
        Self {
            base,
            by_kind,
            exact_named,
            patterned,
            prefixes: Prefixes::new(prefixes),
            substrings: substrings
                .into_iter()
                .filter_map(|(pattern, rules)| {
                    Some(Substring {
                        needle: Needle::new(pattern.substring()?)?,
                        pattern,
                        rules,
                    })
                })
                .collect(),
            names: names.into_boxed_slice(),
            with_attributes,
            conditions: Conditions::new(
                conditions
                    .into_iter()
                    .map(|((k, p), rules)| (k, p, rules))
                    .collect(),
            ),
        }
    }

    /// The index of the first rule of `left` (not empty).
    #[inline]
    fn first(&self, left: u64) -> usize {
        self.base + left.trailing_zeros() as usize
    }

    /// `left` without the rules whose (non-exact) span name pattern `name` fails: the
    /// prefixes, the substrings, then the other patterns.
    #[inline(always)]
    fn by_pattern(&self, left: u64, name: &str) -> u64 {
        let mut left = self.prefixes.filter(left, name);
        for s in &*self.substrings {
            if left & s.rules != 0
                && !s
                    .needle
                    .in_short(name.as_bytes())
                    .unwrap_or_else(|| s.pattern.is_match(name))
            {
                left &= !s.rules;
            }
        }
        for (pattern, rules) in &*self.names {
            if left & rules != 0 && !pattern.is_match(name) {
                left &= !rules;
            }
        }
        left
    }

    /// `left` without the rules with an attribute condition the span fails (its key
    /// absent, or its value not matching).
    #[inline]
    fn by_attributes(&self, left: u64, values: &Values<'_>) -> u64 {
        self.conditions.filter(left, values)
    }
}

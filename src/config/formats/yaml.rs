//! The YAML format (feature `yaml`): the TOML model written in YAML, deserialised into
//! the TOML loader's own structs, so every key, default and check is the same. See
//! `examples/sampling.yaml`, the YAML twin of `examples/sampling.toml`.

use serde::de::DeserializeOwned;
use serde_saphyr::budget::BudgetBreach;

use crate::config::error::{ConfigError, ConfigErrorKind, LineIndex, Pos};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::{self, Ctx, RawFile};
use crate::config::formats::spanned::{reading, Format, Spanned};
use crate::config::formats::yaml_tree::Tree;
use crate::config::model::SamplingConfig;

/// [`SamplingConfig::from_yaml_str`], with `redis` (from the environment), when
/// given, replacing the `fleet` mapping's Redis URLs.
pub(crate) fn load(
    text: &str,
    file: &str,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    let raw: RawFile = parse(text, file)?;
    rule_file::config(&Ctx::new(text, file), &raw, redis)
}

/// Deserialises YAML `text` (from `file`) with spans, into the raw structs.
pub(super) fn parse<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigError> {
    from_str(text).map_err(|e| yaml_error(&e, text, file))
}

/// The most events aliases may replay in one file: anchors and aliases that reuse a rule
/// are welcome (a rule of ten keys replays about 25 events, so some 400 uses), a
/// "billion laughs" is refused. Replay costs time linear in the events (measured: 10 000
/// events in 0.19 s in a debug build), so the limit is also the time bound.
const MAX_REPLAYED_EVENTS: usize = 10_000;

/// serde-saphyr's `from_str` with this crate's spans and alias limit. (Its other
/// defaults already refuse duplicate keys and bound the document's size and depth.)
fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.alias_limits.max_total_replayed_events = MAX_REPLAYED_EVENTS;
    let _spans = reading(Format::Yaml);
    serde_saphyr::from_str_with_options(text, options)
}

/// A serde-saphyr error as a [`ConfigError`]: its position (line and column already in
/// characters), its message without the source snippet, and the key serde names.
fn yaml_error(e: &serde_saphyr::Error, text: &str, file: &str) -> ConfigError {
    let pos = e.location().map_or(Pos::default(), |l| Pos {
        line: usize::try_from(l.line()).unwrap_or(usize::MAX),
        column: usize::try_from(l.column()).unwrap_or(usize::MAX),
    });
    let message = match e.without_snippet() {
        serde_saphyr::Error::Budget { breach, .. } => budget_message(breach),
        _ => plain_message(e),
    };
    let quoted = |prefix: &str| {
        message
            .split_once(prefix)
            .and_then(|(_, rest)| rest.split('`').next())
            .map(str::to_owned)
    };
    let (kind, key) = if let Some(key) = quoted("unknown field `") {
        // serde names the bare key; the full path is found in the document.
        (
            ConfigErrorKind::UnknownKey,
            key_path(text, pos).unwrap_or(key),
        )
    } else if let Some(key) = quoted("missing field `") {
        (ConfigErrorKind::MissingKey, key)
    } else if let Some(value) = quoted("unknown variant `") {
        (
            ConfigErrorKind::UnknownValue,
            key_path(text, pos).unwrap_or(value),
        )
    } else {
        // A value of the wrong type is named by its full path, as the checks name it
        // (a document over the reader's budget is not read again).
        let budget = matches!(e.without_snippet(), serde_saphyr::Error::Budget { .. });
        let key = (!budget)
            .then(|| key_path(text, pos))
            .flatten()
            .unwrap_or_else(|| key_on_line(text, pos.line));
        (ConfigErrorKind::Syntax, key)
    };
    kind.error(file, message).at(pos, key)
}

/// What a breach of serde-saphyr's budget means, said for the file's author (its own
/// message is the `Debug` form of the breach).
fn budget_message(breach: &BudgetBreach) -> String {
    let advice = "a configuration file needs far less; look for runaway nesting, generated content or anchors";
    match breach {
        BudgetBreach::Depth { .. } => format!(
            "mappings and sequences are nested more than {} deep, the most this reader takes; {advice}",
            serde_saphyr::Budget::default().max_depth
        ),
        BudgetBreach::Events { events } => {
            format!("the document is too large ({events} YAML events read); {advice}")
        }
        BudgetBreach::Nodes { nodes } => {
            format!("the document is too large ({nodes} values read); {advice}")
        }
        BudgetBreach::Aliases { .. }
        | BudgetBreach::Anchors { .. }
        | BudgetBreach::AliasAnchorRatio { .. }
        | BudgetBreach::MergeKeys { .. } => {
            format!("the document uses too many anchors, aliases or merge keys; {advice}")
        }
        _ => format!("the document is too large for this reader; {advice}"),
    }
}

/// The full path (`service[0].rule[1].rat`) of the key written at `pos`, or else of
/// the key whose scalar value is written at `pos` (`service[0].rule[1].limit` for its
/// `abc`: the last key on that line before it), found in the document parsed again as a
/// [`Tree`] (only on this error path).
fn key_path(text: &str, pos: Pos) -> Option<String> {
    let tree: Spanned<Tree> = from_str(text).ok()?;
    let lines = LineIndex::new(text);
    let (mut exact, mut before) = (None, None::<(Pos, String)>);
    Tree::walk(&tree, &KeyPath::Root, None, &mut |path, key, value| {
        let Some(key) = key else {
            return;
        };
        let scalar = value.get_ref().is_scalar();
        let at = lines.pos(key.span().start);
        if at == pos {
            exact.get_or_insert_with(|| path.to_string());
        } else if scalar && before.as_ref().is_none_or(|(b, _)| b.column < at.column) {
            let end = lines.pos(key.span().end);
            if end.line == pos.line && end.column < pos.column {
                before = Some((at, path.to_string()));
            }
        }
    });
    exact.or(before.map(|(_, path)| path))
}

/// The error's message alone: serde-saphyr's `Display` may add the position and a
/// snippet of the source, which [`ConfigError`] gives its own way.
fn plain_message(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    // "... at line 3, column 5" (the position is given separately).
    let first = first
        .rsplit_once(" at line ")
        .map_or(first, |(message, _)| message);
    let first = first.trim_end_matches(':').trim();
    // Advice about the library's options is not for the file's author.
    first
        .split_once(", set DuplicateKeyPolicy")
        .map_or(first, |(message, _)| message)
        .to_owned()
}

/// The key of the `key: value` on line `line` (from 1) of `text`, best effort: the key
/// whose value a type or syntax error is about.
fn key_on_line(text: &str, line: usize) -> String {
    let Some(content) = line.checked_sub(1).and_then(|i| text.lines().nth(i)) else {
        return String::new();
    };
    let content = content.trim_start().trim_start_matches("- ").trim_start();
    match content.split_once(':') {
        Some((key, _)) if !key.contains(['{', '[', '#']) => {
            key.trim().trim_matches(['"', '\'']).to_owned()
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named_by_their_full_path() {
        let text = "default:\n  rate: 1\nservice:\n  - name: a\n    rule:\n      - rate: 1\n        span_nam: x\n";
        let e = SamplingConfig::from_yaml_str(text, "t.yaml").unwrap_err();
        assert_eq!(
            (e.kind(), e.line(), e.column(), e.key()),
            (
                ConfigErrorKind::UnknownKey,
                7,
                9,
                "service[0].rule[0].span_nam"
            ),
            "{e}"
        );
        assert_eq!(
            key_path(text, Pos { line: 4, column: 5 }).as_deref(),
            Some("service[0].name")
        );
        assert_eq!(key_path(text, Pos { line: 4, column: 6 }), None);
        // A scalar value is named by its key: the last one before it on its line.
        assert_eq!(
            key_path(
                text,
                Pos {
                    line: 7,
                    column: 19
                }
            )
            .as_deref(),
            Some("service[0].rule[0].span_nam")
        );
        let flow = "a:\n  - { b: 1, c: x }\n";
        assert_eq!(
            key_path(
                flow,
                Pos {
                    line: 2,
                    column: 17
                }
            )
            .as_deref(),
            Some("a[0].c")
        );
        assert_eq!(
            key_path(
                flow,
                Pos {
                    line: 2,
                    column: 12
                }
            )
            .as_deref(),
            Some("a[0].b")
        );
    }

    #[test]
    fn aliases_replay_a_bounded_number_of_events() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            let refs = vec![format!("*a{p}"); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        // The key tree reads anything, so only the limit stops it.
        let err = from_str::<Tree>(&text).err().expect("refused");
        assert!(err.to_string().contains("alias replay limit"), "{err}");
        // A few aliases are fine.
        let ok = "a: &a { rate: 1 }\nb: *a\nc: *a\n";
        assert!(from_str::<Tree>(ok).is_ok());
    }

    #[test]
    fn messages_lose_the_library_advice_and_keys_come_from_the_line() {
        let e =
            SamplingConfig::from_yaml_str("default:\n  rate: 1\ndefault:\n  rate: 2\n", "t.yaml")
                .unwrap_err();
        assert_eq!((e.line(), e.key()), (3, "default"), "{e}");
        assert!(!e.to_string().contains("DuplicateKeyPolicy"), "{e}");
        assert_eq!(key_on_line("a:\n  - \"b c\": 1\n", 2), "b c");
        assert_eq!(key_on_line("a: {b: 1}\n", 1), "a");
        assert_eq!(key_on_line("- {b: 1}\n", 1), "");
        assert_eq!(key_on_line("", 3), "");
    }
}

//! Environment variable substitution in a declarative configuration file, as the
//! OpenTelemetry configuration data model (`configuration/data-model.md`, "Environment
//! variable substitution") defines it: `${NAME}`, `${env:NAME}`, `${NAME:-default}`
//! and the escape `$$`, in scalar values only (mapping keys are never substituted).
//!
//! The file is parsed once to find its scalar values; each one holding a reference is
//! replaced in the text by its substituted value, and the text is then parsed as usual,
//! so a node's type is resolved after substitution (`ratio: ${RATIO}` with
//! `RATIO=0.25` is the float 0.25). A plain scalar whose substituted value could not be
//! written plain (it holds a newline, `: `, ` #`, a flow indicator, ...) and every quoted
//! or block scalar is written back as a double-quoted string: a variable can never inject
//! YAML structure, and substitution is not recursive. Lines never move (a value's
//! newlines are escaped, a multi-line scalar is padded with blank lines), so every later
//! error keeps its line; a column after a substitution on the same line counts in the
//! substituted text.

use std::borrow::Cow;
use std::ops::Range;

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::Ctx;
use crate::config::formats::spanned::Spanned;
use crate::config::formats::yaml::parse;
use crate::config::formats::yaml_tree::Tree;

/// How variables are read: `lookup("NAME")`, `None` when undefined.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `text` with every substitution reference in its scalar values replaced (borrowed
/// unchanged when it has no `$`).
///
/// # Errors
///
/// A YAML syntax error, or (kind `Syntax`) an invalid reference such as `${:x}` or
/// `${1A}`, at its line and column and under its key.
pub(crate) fn substitute<'t>(
    text: &'t str,
    file: &str,
    lookup: Lookup<'_>,
) -> Result<Cow<'t, str>, ConfigError> {
    if !text.contains('$') {
        return Ok(Cow::Borrowed(text));
    }
    let tree: Spanned<Tree> = parse(text, file)?;
    let mut scalars = Vec::new();
    Tree::walk(&tree, &KeyPath::Root, None, &mut |path, _, node| {
        if let Tree::Str(value) = node.get_ref() {
            scalars.push(Scalar {
                key: path.to_string(),
                span: node.span(),
                value,
            });
        }
    });
    // Aliases replay their anchor's span: each scalar once, in text order.
    scalars.sort_by_key(|s| s.span.start);
    scalars.dedup_by_key(|s| s.span.start);
    let ctx = Ctx::new(text, file);
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for scalar in scalars {
        let Some(raw) = text.get(scalar.span.clone()) else {
            continue;
        };
        if !raw.contains('$') || scalar.span.start < done {
            continue;
        }
        let value = resolve(scalar.value, lookup).map_err(|reference| {
            let at = raw.find(reference.as_str()).unwrap_or(0) + scalar.span.start;
            ctx.new_error(
                ConfigErrorKind::Syntax,
                at..at,
                &scalar.key,
                format!("`{reference}` is not a valid substitution reference; write `${{NAME}}`, `${{env:NAME}}` or `${{NAME:-default}}` (NAME: a letter or `_`, then letters, digits or `_`), or `$$` for a `$`"),
            )
        })?;
        // A block scalar's span starts at its content: replace its header too.
        let start = block_header(&text[..scalar.span.start]).unwrap_or(scalar.span.start);
        let raw = &text[start..scalar.span.end];
        out.push_str(&text[done..start]);
        let plain = !raw.starts_with(['"', '\'', '|', '>']);
        if plain && writes_plain(&value) {
            out.push_str(&value);
        } else {
            double_quoted(&value, &mut out);
        }
        // Keep every later line where it was.
        out.extend(std::iter::repeat_n('\n', raw.matches('\n').count()));
        done = scalar.span.end;
    }
    out.push_str(&text[done..]);
    Ok(Cow::Owned(out))
}

/// Where the header (`|`, `>-`, `|2+`, ...) of a block scalar starts, if `before` (the
/// text before the scalar's content) ends with one.
fn block_header(before: &str) -> Option<usize> {
    let trimmed = before.trim_end();
    let line_start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let line = &trimmed[line_start..];
    // A comment may follow the header.
    let line = line.split(" #").next().unwrap_or(line).trim_end();
    let header = line.trim_end_matches(|c: char| c == '-' || c == '+' || c.is_ascii_digit());
    let at = header.len().checked_sub(1)?;
    let preceded = header[..at]
        .chars()
        .next_back()
        .is_none_or(char::is_whitespace);
    (header.ends_with(['|', '>']) && preceded).then_some(line_start + at)
}

/// `input` with its references replaced, left to right as the specification's
/// pseudocode does: each `$$` is a `$` that is never part of a reference, and what lies
/// between escapes is matched against `SUBSTITUTION-REF`. `Err` holds the first invalid
/// reference (`${...}` not matching `SUBSTITUTION-REF`).
pub(crate) fn resolve(input: &str, lookup: Lookup<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    loop {
        let (segment, escaped) = match rest.find("$$") {
            Some(i) => (&rest[..i], Some(&rest[i + 2..])),
            None => (rest, None),
        };
        references(segment, lookup, &mut out)?;
        match escaped {
            Some(after) => {
                out.push('$');
                rest = after;
            }
            None => return Ok(out),
        }
    }
}

/// Appends `segment` (no `$$` in it) with its `${...}` references replaced. A `${`
/// without a closing `}` is no reference (the specification's grammar needs the brace)
/// and is kept as written.
fn references(segment: &str, lookup: Lookup<'_>, out: &mut String) -> Result<(), String> {
    let mut rest = segment;
    while let Some(open) = rest.find("${") {
        let body = &rest[open + 2..];
        let Some(close) = body.find('}') else {
            break;
        };
        out.push_str(&rest[..open]);
        let content = &body[..close];
        let Some((name, default)) = reference(content) else {
            return Err(format!("${{{content}}}"));
        };
        match (lookup(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            // Undefined (or empty) without a default: the empty value.
            (None, None) => {}
        }
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    Ok(())
}

/// The name and default of a reference's content (between `${` and `}`) matching
/// `["env:"] ENV-NAME [":-" DEFAULT-VALUE]`.
fn reference(content: &str) -> Option<(&str, Option<&str>)> {
    let content = content.strip_prefix("env:").unwrap_or(content);
    let end = content
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .unwrap_or(content.len());
    let (name, tail) = content.split_at(end);
    if !name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic()) {
        return None;
    }
    if tail.is_empty() {
        return Some((name, None));
    }
    let default = tail.strip_prefix(":-")?;
    // DEFAULT-VALUE: printable characters and whitespace (no line breaks).
    (!default.contains(['\n', '\r'])).then_some((name, Some(default)))
}

/// Whether `value` reads back as itself (type aside) when written as a plain scalar in
/// a block or a flow collection: the empty value (null) or text without line breaks,
/// indicators at its start, `: ` or ` #` inside, flow indicators or edge whitespace.
fn writes_plain(value: &str) -> bool {
    value.is_empty()
        || (!value.starts_with([
            '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%',
            '@', '`',
        ]) && !value.contains(|c: char| c.is_control() || ",[]{}".contains(c))
            && !value.contains(": ")
            && !value.contains(" #")
            && !value.ends_with(':')
            && value.trim() == value)
}

/// Appends `value` as a YAML double-quoted string.
fn double_quoted(value: &str, out: &mut String) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A string scalar in value position: its key path, span and value.
struct Scalar<'a> {
    key: String,
    span: Range<usize>,
    value: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment of the specification's table.
    fn env(name: &str) -> Option<String> {
        Some(
            match name {
                "STRING_VALUE" => "value",
                "BOOL_VALUE" => "true",
                "INT_VALUE" => "1",
                "FLOAT_VALUE" => "1.1",
                "HEX_VALUE" => "0xdeadbeef",
                "INVALID_MAP_VALUE" => "value\nkey:value",
                "DO_NOT_REPLACE_ME" => "Never use this value",
                "REPLACE_ME" => "${DO_NOT_REPLACE_ME}",
                "VALUE_WITH_ESCAPE" => "value$$",
                "EMPTY" => "",
                _ => return None,
            }
            .to_owned(),
        )
    }

    fn sub(text: &str) -> Result<String, ConfigError> {
        substitute(text, "otel.yaml", &env).map(Cow::into_owned)
    }

    #[test]
    fn the_specification_table_of_references_and_escapes() {
        for (input, output) in [
            ("${STRING_VALUE}", "value"),
            ("${env:STRING_VALUE}", "value"),
            ("foo ${STRING_VALUE} ${FLOAT_VALUE}", "foo value 1.1"),
            ("${UNDEFINED_KEY}", ""),
            ("${EMPTY}", ""),
            ("${EMPTY:-fallback}", "fallback"),
            ("${UNDEFINED_KEY:-fallback}", "fallback"),
            ("${UNDEFINED_KEY:-}", ""),
            ("${REPLACE_ME}", "${DO_NOT_REPLACE_ME}"),
            ("${UNDEFINED_KEY:-${STRING_VALUE}}", "${STRING_VALUE}"),
            ("$${STRING_VALUE}", "${STRING_VALUE}"),
            ("$$${STRING_VALUE}", "$value"),
            ("$$$${STRING_VALUE}", "$${STRING_VALUE}"),
            ("$${STRING_VALUE:-fallback}", "${STRING_VALUE:-fallback}"),
            (
                "$${STRING_VALUE:-${STRING_VALUE}}",
                "${STRING_VALUE:-value}",
            ),
            (
                "${UNDEFINED_KEY:-$${UNDEFINED_KEY}}",
                "${UNDEFINED_KEY:-${UNDEFINED_KEY}}",
            ),
            ("${VALUE_WITH_ESCAPE}", "value$$"),
            ("a $$ b", "a $ b"),
            ("a $ b", "a $ b"),
            ("${VAR", "${VAR"),
        ] {
            assert_eq!(resolve(input, &env).as_deref(), Ok(output), "{input}");
        }
        for (input, reference) in [
            ("${STRING_VALUE:?error}", "${STRING_VALUE:?error}"),
            ("${1API_KEY}", "${1API_KEY}"),
            ("${API_$KEY}", "${API_$KEY}"),
            ("x ${:x} y", "${:x}"),
            ("${}", "${}"),
            ("${env:}", "${env:}"),
        ] {
            assert_eq!(resolve(input, &env), Err(reference.to_owned()), "{input}");
        }
    }

    #[test]
    fn only_values_are_substituted_and_types_are_resolved_after() {
        let text = "${STRING_VALUE}: ${STRING_VALUE}\nb: ${BOOL_VALUE} # ${X}\nc: \"${INT_VALUE}\"\nd:\n  - ${FLOAT_VALUE}\n  - '${STRING_VALUE}'\ne: ${UNDEFINED_KEY}\nf: plain\n";
        assert_eq!(
            sub(text).unwrap(),
            "${STRING_VALUE}: value\nb: true # ${X}\nc: \"1\"\nd:\n  - 1.1\n  - \"value\"\ne: \nf: plain\n"
        );
        // In a flow collection `{` and `}` are indicators, so a reference is quoted
        // there (and is then a string, as the specification says).
        assert_eq!(sub("d: [\"${INT_VALUE}\"]\n").unwrap(), "d: [\"1\"]\n");
        // No YAML structure can be injected: the value stays one string.
        assert_eq!(
            sub("a: ${INVALID_MAP_VALUE}\nb: 1\n").unwrap(),
            "a: \"value\\nkey:value\"\nb: 1\n"
        );
        assert_eq!(sub("a: ${EMPTY:-x, y}\n").unwrap(), "a: \"x, y\"\n");
        // A text without `$` is not parsed twice.
        assert!(matches!(
            substitute("a: 1\n", "f", &env),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn anchors_tags_and_comments_keep_their_places() {
        assert_eq!(
            sub("a: &x ${INT_VALUE}\nb: *x\nc: !!str ${INT_VALUE}\n# ${1A}\n").unwrap(),
            "a: &x 1\nb: *x\nc: !!str 1\n# ${1A}\n"
        );
    }

    #[test]
    fn a_multi_line_scalar_keeps_the_lines_after_it() {
        let text = "a: one\n  ${STRING_VALUE}\nb: |  # c\n  x ${INT_VALUE}\n  y\nc: 1\n";
        let out = sub(text).unwrap();
        assert_eq!(out.lines().count(), text.lines().count(), "{out}");
        assert_eq!(out.lines().nth(5), Some("c: 1"), "{out}");
        assert!(
            out.starts_with("a: one value\n\nb: \"x 1\\ny\\n\""),
            "{out}"
        );
    }

    #[test]
    fn an_invalid_reference_is_an_error_at_its_position_and_key() {
        let err = sub("tracer_provider:\n  sampler:\n    x:\n      ratio: a ${:x}\n").unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.column(), err.key()),
            (
                ConfigErrorKind::Syntax,
                4,
                16,
                "tracer_provider.sampler.x.ratio"
            ),
            "{err}"
        );
        assert!(err.to_string().contains("`${:x}`"), "{err}");
        let err = sub("a:\n  - b: [x, \"${1A}\"]\n").unwrap_err();
        assert_eq!(
            (err.line(), err.column(), err.key()),
            (2, 13, "a[0].b[1]"),
            "{err}"
        );
    }
}

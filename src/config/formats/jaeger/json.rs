//! Positions in a JSON document: serde_json's errors as `file:line:column: key`, and
//! the position of a value by its path, found by a scan of the text on the error path
//! only.

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};

/// One step of a path into a JSON document.
#[derive(Clone, Copy)]
pub(super) enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

pub(super) fn json_error(text: &str, file: &str, e: &serde_json::Error) -> ConfigError {
    let message = e.to_string();
    // serde_json appends " at line L column C"; the position is reported separately.
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or_default()
        .to_owned();
    let pos = json_pos(text, e.line(), e.column());
    // serde names the bare key: the full path is read from the text up to the error.
    let offset = json_offset(text, e.line(), e.column());
    let (kind, key) = if message.starts_with("unknown field `") {
        (ConfigErrorKind::UnknownKey, path_at(text, offset))
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let key = match path_at(text, offset) {
            at if at.is_empty() => field.to_owned(),
            at => format!("{at}.{field}"),
        };
        (ConfigErrorKind::MissingKey, key)
    } else if e.is_data() {
        (ConfigErrorKind::Syntax, path_at(text, offset))
    } else {
        (ConfigErrorKind::Syntax, String::new())
    };
    let source = serde_json::Error::io(std::io::Error::other(e.to_string()));
    kind.error(file, message).at(pos, key).with_source(source)
}

/// serde_json's line and byte column (from 1; column 0 before a line's first byte) as a
/// line and a column in characters.
fn json_pos(text: &str, line: usize, column: usize) -> Pos {
    if line == 0 {
        return Pos::default();
    }
    Pos::of_offset(text, json_offset(text, line, column))
}

/// The byte offset of serde_json's line and byte column.
fn json_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start = match line {
        0 | 1 => 0,
        _ => match memchr::memchr_iter(b'\n', text.as_bytes()).nth(line - 2) {
            Some(newline) => newline + 1,
            None => return text.len(),
        },
    };
    let line_end = memchr::memchr(b'\n', &text.as_bytes()[line_start..])
        .map_or(text.len(), |n| line_start + n);
    (line_start + column.saturating_sub(1)).min(line_end)
}

/// The path (`service_strategies[1].operation_strategies[0].typ`) of the key or value
/// the text is in at byte `offset`: the last key read in each open object, the index in
/// each open array. A scan of the text before `offset`, on the error path only.
fn path_at(text: &str, offset: usize) -> String {
    enum Frame {
        Object(Option<String>),
        Array(usize),
    }
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut key_next = false;
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'{' => {
                stack.push(Frame::Object(None));
                key_next = true;
            }
            b'[' => {
                stack.push(Frame::Array(0));
                key_next = false;
            }
            b'}' | b']' => {
                stack.pop();
                key_next = false;
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array(n)) => *n += 1,
                Some(Frame::Object(_)) => key_next = true,
                None => {}
            },
            b'"' => {
                let after = skip_string(bytes, i).unwrap_or(bytes.len());
                if key_next {
                    if let Some(Frame::Object(key)) = stack.last_mut() {
                        *key = text
                            .get(i..after)
                            .and_then(|s| serde_json::from_str(s).ok());
                    }
                    key_next = false;
                }
                i = after;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let mut out = String::new();
    for frame in &stack {
        match frame {
            Frame::Object(Some(key)) if out.is_empty() => out.push_str(key),
            Frame::Object(Some(key)) => {
                out.push('.');
                out.push_str(key);
            }
            Frame::Object(None) => {}
            Frame::Array(n) => out.push_str(&format!("[{n}]")),
        }
    }
    out
}

pub(super) fn path_string(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The byte offset of the value at `path` in a JSON document already known to parse
/// (the start of the value, or of the object holding a missing key).
pub(super) fn locate(text: &str, path: &[Step<'_>]) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = skip_ws(bytes, 0);
    for step in path {
        match (step, bytes.get(at)?) {
            (Step::Key(key), b'{') => {
                let mut i = skip_ws(bytes, at + 1);
                let mut found = None;
                while bytes.get(i) == Some(&b'"') {
                    let end = skip_string(bytes, i)?;
                    let name: String = serde_json::from_str(text.get(i..end)?).ok()?;
                    let value = skip_ws(bytes, skip_ws(bytes, end) + 1);
                    if name == *key {
                        found = Some(value);
                        break;
                    }
                    i = skip_ws(bytes, skip_value(bytes, value)?);
                    if bytes.get(i) == Some(&b',') {
                        i = skip_ws(bytes, i + 1);
                    }
                }
                match found {
                    Some(v) => at = v,
                    None => return Some(at),
                }
            }
            (Step::Index(n), b'[') => {
                let mut i = skip_ws(bytes, at + 1);
                for _ in 0..*n {
                    i = skip_ws(bytes, skip_value(bytes, i)?);
                    if bytes.get(i) == Some(&b',') {
                        i = skip_ws(bytes, i + 1);
                    }
                }
                at = i;
            }
            _ => return Some(at),
        }
    }
    Some(at)
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The offset just past the string starting at `i`.
fn skip_string(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match bytes.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The offset just past the value starting at `i`.
fn skip_value(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes.get(i)? {
        b'"' => skip_string(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match bytes.get(j)? {
                    b'"' => {
                        j = skip_string(bytes, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while bytes
                .get(j)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
            {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_byte_columns_become_character_columns() {
        let text = "{\n  \"é\": 1, \"x\": ]\n}";
        let err = serde_json::from_str::<serde_json::Value>(text).unwrap_err();
        // serde_json counts bytes ("é" is two): the `]` is byte 17, character 16.
        assert_eq!((err.line(), err.column()), (2, 17));
        assert_eq!(
            json_pos(text, err.line(), err.column()),
            Pos {
                line: 2,
                column: 16
            }
        );
        assert_eq!(json_pos(text, 0, 0), Pos::default());
        assert_eq!(json_pos(text, 9, 1), Pos { line: 3, column: 2 });
    }

    #[test]
    fn the_path_at_an_offset_names_every_enclosing_key_and_index() {
        let text = r#"{"a": [1, {"b": "x\",}", "c": {"d": 2}}], "e": 3}"#;
        let at = |needle: &str| path_at(text, text.find(needle).unwrap() + needle.len());
        assert_eq!(at("\"b\""), "a[1].b");
        assert_eq!(at("\"d\": 2"), "a[1].c.d");
        assert_eq!(at("\"e\""), "e");
        assert_eq!(path_at(text, 0), "");
    }

    #[test]
    fn locate_finds_nested_values() {
        let text = "{\"a\": [1, {\"b\": \"x\\\"}\", \"c\": 2}]}";
        let at = locate(text, &[Step::Key("a"), Step::Index(1), Step::Key("c")]).unwrap();
        assert_eq!(&text[at..at + 1], "2");
        assert_eq!(
            path_string(&[Step::Key("a"), Step::Index(1), Step::Key("c")]),
            "a[1].c"
        );
    }
}

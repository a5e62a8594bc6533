//! A sampler tree for people: the one-line description the library prints
//! (`parent_based(root: composite/development(probability(0.25)), ...)`) laid out one
//! sampler a line, each under its parent, indented.

/// Lines are at most this wide, unless one item alone is wider.
const WIDTH: usize = 80;

/// `text` (a description with balanced `()` and `[]`, quoted strings left alone) one
/// sampler a line, from `depth` levels of indentation: a group that fits in [`WIDTH`],
/// or whose content holds no further group, stays on its line.
pub(crate) fn indented(text: &str, depth: usize) -> String {
    let mut out = String::new();
    render(text, depth, "", &mut out);
    out
}

/// Writes `item` at `depth`, then `trailing` (a separating comma) after its last line.
fn render(item: &str, depth: usize, trailing: &str, out: &mut String) {
    let item = item.trim();
    let fits = 2 * depth + item.len() + trailing.len() <= WIDTH;
    let Some(open) =
        group_at_end(item).filter(|&o| !fits && has_group(&item[o + 1..item.len() - 1]))
    else {
        line(depth, &format!("{item}{trailing}"), out);
        return;
    };
    let (mut head, mut inner, mut tail) = (
        item[..=open].to_owned(),
        &item[open + 1..item.len() - 1],
        item[item.len() - 1..].to_owned(),
    );
    // `rule_based([...])`: one line for both openings, one for both closings.
    while group_at_end(inner) == Some(0) && has_group(&inner[1..inner.len() - 1]) {
        head.push_str(&inner[..1]);
        tail.insert_str(0, &inner[inner.len() - 1..]);
        inner = &inner[1..inner.len() - 1];
    }
    line(depth, &head, out);
    let parts = split_top(inner);
    for (i, part) in parts.iter().enumerate() {
        let comma = if i + 1 < parts.len() { "," } else { "" };
        render(part, depth + 1, comma, out);
    }
    line(depth, &format!("{tail}{trailing}"), out);
}

fn line(depth: usize, text: &str, out: &mut String) {
    out.push_str(&"  ".repeat(depth));
    out.push_str(text);
    out.push('\n');
}

/// The bytes of `text` outside quoted strings, with their index and nesting depth
/// before them, passed to `each` until it returns `Some`.
fn scan<T>(text: &str, mut each: impl FnMut(usize, u8, usize) -> Option<T>) -> Option<T> {
    let (mut depth, mut quoted, mut escaped) = (0usize, false, false);
    for (i, b) in text.bytes().enumerate() {
        if quoted {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => quoted = false,
                _ => {}
            }
            continue;
        }
        if let Some(found) = each(i, b, depth) {
            return Some(found);
        }
        match b {
            b'"' => quoted = true,
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Whether `text` holds a bracket outside quoted strings.
fn has_group(text: &str) -> bool {
    scan(text, |_, b, _| matches!(b, b'(' | b'[').then_some(())).is_some()
}

/// Where the group that closes at the end of `text` opens (`None`: `text` does not end
/// with a closing bracket outside a string).
fn group_at_end(text: &str) -> Option<usize> {
    if !text.ends_with([')', ']']) {
        return None;
    }
    let mut opens = Vec::new();
    let last = text.len() - 1;
    scan(text, |i, b, _| match b {
        b'(' | b'[' => {
            opens.push(i);
            None
        }
        b')' | b']' if i == last => opens.last().copied(),
        b')' | b']' => {
            opens.pop();
            None
        }
        _ => None,
    })
}

/// `text` split at its commas outside groups and strings.
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    scan(text, |i, b, depth| {
        if b == b',' && depth == 0 {
            parts.push(&text[start..i]);
            start = i + 1;
        }
        None::<()>
    });
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_groups_break_and_leaves_stay_on_their_line() {
        let text = r#"parent_based(root: composite/development(parent_threshold(root: rule_based([url.path in ["/a, (b"] => always_off, any span => probability(0.5)]))), remote_parent_sampled: always_on)"#;
        assert_eq!(
            indented(text, 0),
            r#"parent_based(
  root: composite/development(
    parent_threshold(
      root: rule_based([
        url.path in ["/a, (b"] => always_off,
        any span => probability(0.5)
      ])
    )
  ),
  remote_parent_sampled: always_on
)
"#
        );
        assert_eq!(indented("probability(0.25)", 0), "probability(0.25)\n");
        assert_eq!(indented("always_on", 1), "  always_on\n");
    }
}

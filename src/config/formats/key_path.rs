//! The path of a key in a document as errors name it (`service[0].rule[1].rate`), built
//! one step at a time by every reader that walks a document for it: the rule-file
//! lowering (the key a check is at), the TOML and YAML readers (the key a parse error is
//! at) and a declarative file's substitution (the key of a bad reference).
//!
//! A step borrows its parent: building a path costs nothing, and the text is written out
//! only when an error names it (a large file has millions of keys and few errors).

use std::fmt;

/// A key's path from the document's root, one borrowed step at a time.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyPath<'a> {
    /// The document itself: the empty path.
    Root,
    /// `<parent>.<key>` (`<key>` below the root).
    Key(&'a KeyPath<'a>, &'a str),
    /// `<parent>[i]`: item `i` of the sequence at the parent.
    Index(&'a KeyPath<'a>, usize),
    /// `<parent>.<key>[i]` in one step, so a reader names `service[3]` without keeping a
    /// step for `service`.
    Item(&'a KeyPath<'a>, &'a str, usize),
    /// `<parent>.<key>."<name>"`: a name the user wrote (an attribute key), quoted.
    Quoted(&'a KeyPath<'a>, &'a str, &'a str),
}

impl<'a> KeyPath<'a> {
    /// The key `name` of the table at this path.
    pub(crate) fn key(&'a self, name: &'a str) -> Self {
        KeyPath::Key(self, name)
    }

    /// Item `i` of the sequence at this path.
    pub(crate) fn index(&'a self, i: usize) -> Self {
        KeyPath::Index(self, i)
    }

    /// Item `i` of the sequence under the key `name` of the table at this path.
    pub(crate) fn item(&'a self, name: &'a str, i: usize) -> Self {
        KeyPath::Item(self, name, i)
    }

    /// The user-written `name` in the table under the key `table` at this path.
    pub(crate) fn quoted(&'a self, table: &'a str, name: &'a str) -> Self {
        KeyPath::Quoted(self, table, name)
    }

    /// `<parent>.` (nothing below the root), before a key.
    fn dot(parent: &KeyPath<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match parent {
            KeyPath::Root => Ok(()),
            parent => write!(f, "{parent}."),
        }
    }
}

impl fmt::Display for KeyPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            KeyPath::Root => Ok(()),
            KeyPath::Key(parent, key) => {
                Self::dot(parent, f)?;
                f.write_str(key)
            }
            KeyPath::Index(parent, i) => write!(f, "{parent}[{i}]"),
            KeyPath::Item(parent, key, i) => {
                Self::dot(parent, f)?;
                write!(f, "{key}[{i}]")
            }
            KeyPath::Quoted(parent, table, name) => {
                Self::dot(parent, f)?;
                write!(f, "{table}.{name:?}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_join_with_dots_and_items_take_their_index() {
        let root = KeyPath::Root;
        assert_eq!(root.to_string(), "");
        let service = root.key("service");
        let first = service.index(0);
        let rule = first.item("rule", 1);
        assert_eq!(rule.key("rate").to_string(), "service[0].rule[1].rate");
        let item = root.index(2);
        assert_eq!(item.key("a").to_string(), "[2].a");
        assert_eq!(root.item("service", 3).to_string(), "service[3]");
        assert_eq!(
            rule.quoted("attributes", "http.route").to_string(),
            r#"service[0].rule[1].attributes."http.route""#
        );
    }
}

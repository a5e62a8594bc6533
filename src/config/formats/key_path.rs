//! The path of a key in a document as errors name it (`service[0].rule[1].rate`), built
//! one step at a time by every reader that walks a document for it: the TOML and YAML
//! readers (the key an error is at) and a declarative file's substitution (the key of a
//! bad reference).

use std::fmt;

/// A key's path from the document's root: a key below a table is `table.key`, an item
/// of a sequence `seq[i]`; the root itself is the empty path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(String);

impl KeyPath {
    /// The document itself.
    pub(crate) fn root() -> Self {
        Self::default()
    }

    /// The key `name` of the table at this path.
    pub(crate) fn key(&self, name: impl fmt::Display) -> Self {
        if self.0.is_empty() {
            Self(name.to_string())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// Item `i` of the sequence at this path.
    pub(crate) fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<KeyPath> for String {
    fn from(path: KeyPath) -> String {
        path.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_join_with_dots_and_items_take_their_index() {
        let root = KeyPath::root();
        assert_eq!(root.to_string(), "");
        let rule = root.key("service").index(0).key("rule").index(1);
        assert_eq!(rule.key("rate").to_string(), "service[0].rule[1].rate");
        assert_eq!(root.index(2).key("a").to_string(), "[2].a");
    }
}

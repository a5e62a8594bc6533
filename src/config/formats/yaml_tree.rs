//! A YAML document as a tree of keys and values with their spans, for what serde's
//! reading into the wire types does not keep: the full path of the key an error is at
//! (the YAML reader) and the string scalars with their keys (a declarative file's
//! substitution). Both walk it through [`Tree::walk`].

use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::config::formats::key_path::KeyPath;
use crate::config::formats::spanned::Spanned;

/// A YAML node: a mapping (its keys, whatever their YAML type, as text), a sequence, a
/// string scalar or any other scalar.
pub(crate) enum Tree {
    Map(Vec<(Spanned<String>, Spanned<Tree>)>),
    Seq(Vec<Spanned<Tree>>),
    Str(String),
    Other,
}

impl Tree {
    /// Whether the node is a scalar (neither a mapping nor a sequence).
    pub(crate) fn is_scalar(&self) -> bool {
        matches!(self, Tree::Str(_) | Tree::Other)
    }

    /// Visits `node` (at `path`, under the mapping key `key` if it is a value of one),
    /// then every node below it, in the order they are written: `visit(path, key, node)`.
    pub(crate) fn walk<'a>(
        node: &'a Spanned<Tree>,
        path: &KeyPath<'_>,
        key: Option<&'a Spanned<String>>,
        visit: &mut impl FnMut(&KeyPath<'_>, Option<&'a Spanned<String>>, &'a Spanned<Tree>),
    ) {
        visit(path, key, node);
        match node.get_ref() {
            Tree::Map(entries) => {
                for (key, value) in entries {
                    Tree::walk(value, &path.key(key.get_ref()), Some(key), visit);
                }
            }
            Tree::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    Tree::walk(item, &path.index(i), None, visit);
                }
            }
            Tree::Str(_) | Tree::Other => {}
        }
    }
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TreeVisitor;

        impl<'de> Visitor<'de> for TreeVisitor {
            type Value = Tree;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
                    entries.push((key.map(|k| k.0), map.next_value()?));
                }
                Ok(Tree::Map(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Tree::Seq(items))
            }
            fn visit_str<E>(self, v: &str) -> Result<Tree, E> {
                Ok(Tree::Str(v.to_owned()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Tree, E> {
                Ok(Tree::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Tree, E> {
                Ok(Tree::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Tree, E> {
                Ok(Tree::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Tree, E> {
                Ok(Tree::Other)
            }
            fn visit_unit<E>(self) -> Result<Tree, E> {
                Ok(Tree::Other)
            }
            fn visit_none<E>(self) -> Result<Tree, E> {
                Ok(Tree::Other)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Tree, D::Error> {
                Tree::deserialize(d)
            }
        }

        deserializer.deserialize_any(TreeVisitor)
    }
}

/// A mapping key as text, whatever its YAML type (`1: x` has the key `1`).
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl Visitor<'_> for KeyVisitor {
            type Value = KeyText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_owned()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".to_owned()))
            }
        }

        deserializer.deserialize_any(KeyVisitor)
    }
}

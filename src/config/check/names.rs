//! Names that identify, each listed once: services in a file (a sampler finds its
//! settings by its service's name), rules in a service and operations in a Jaeger
//! strategy (a reload keeps a rule's limiter by its name).

use std::collections::{HashMap, HashSet};

use crate::config::error::ConfigErrorKind;
use crate::config::model::values::Invalid;

/// What a list names.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Listed {
    /// Services in a file.
    Service,
    /// Rules in a service.
    Rule,
    /// Operations in a Jaeger strategy (each one a rule).
    Operation,
}

/// A name that repeats an earlier one in its list.
#[derive(Debug)]
pub(crate) struct Repeated<'a> {
    /// The position of the repeat.
    pub(crate) at: usize,
    pub(crate) name: &'a str,
}

impl Repeated<'_> {
    /// The problem, in the words of the list it is in.
    pub(crate) fn problem(&self, listed: Listed) -> Invalid {
        let name = self.name;
        match listed {
            Listed::Service => Invalid::new(
                ConfigErrorKind::DuplicateService,
                format!("service {name:?} is listed twice; list each service once"),
            ),
            Listed::Rule => Invalid::new(
                ConfigErrorKind::DuplicateRule,
                format!(
                    "rule name {name:?} is used twice in this service; rule names must be unique"
                ),
            ),
            Listed::Operation => Invalid::new(
                ConfigErrorKind::DuplicateRule,
                format!("operation {name:?} is listed twice in this strategy; list it once"),
            ),
        }
    }
}

/// The first name of `names` that repeats an earlier one. A short list is scanned (no
/// allocation), a long one hashed once.
pub(crate) fn distinct<'a>(
    names: impl Iterator<Item = &'a str> + Clone,
) -> Result<(), Repeated<'a>> {
    const SCAN: usize = 16;
    if names.clone().nth(SCAN).is_none() {
        for (at, name) in names.clone().enumerate() {
            if names.clone().take(at).any(|earlier| earlier == name) {
                return Err(Repeated { at, name });
            }
        }
        return Ok(());
    }
    let mut seen = HashSet::new();
    match names.enumerate().find(|(_, name)| !seen.insert(*name)) {
        Some((at, name)) => Err(Repeated { at, name }),
        None => Ok(()),
    }
}

/// `names` by position, each name once (the index a configuration keeps of its
/// services, built while checking, so that each name is hashed once).
pub(crate) fn index<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
) -> Result<HashMap<String, usize>, Repeated<'a>> {
    let mut index = HashMap::with_capacity(names.len());
    for (at, name) in names.enumerate() {
        if index.insert(name.to_owned(), at).is_some() {
            return Err(Repeated { at, name });
        }
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_repeat_is_found_in_short_and_long_lists() {
        let short = ["a", "b", "a", "b"];
        let e = distinct(short.iter().copied()).unwrap_err();
        assert_eq!((e.at, e.name), (2, "a"));
        let long: Vec<String> = (0..40).map(|i| format!("r{}", i % 30)).collect();
        let e = distinct(long.iter().map(String::as_str)).unwrap_err();
        assert_eq!((e.at, e.name), (30, "r0"));
        assert!(distinct(long[..30].iter().map(String::as_str)).is_ok());
        let e = index(long.iter().map(String::as_str)).unwrap_err();
        assert_eq!((e.at, e.name), (30, "r0"));
        assert_eq!(index(["x", "y"].into_iter()).unwrap()["y"], 1);
    }
}

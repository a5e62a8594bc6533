//! A property's case count: its own default, unless `PROPTEST_CASES` is set (a longer
//! hunt, or a quicker run), which `ProptestConfig::with_cases` would ignore.

use proptest::test_runner::Config;

/// `default` cases, or `PROPTEST_CASES` where it is set; the rest as proptest reads it.
pub(crate) fn cases(default: u32) -> Config {
    let config = Config::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        config.cases
    } else {
        default
    };
    Config { cases, ..config }
}

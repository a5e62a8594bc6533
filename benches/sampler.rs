//! Placeholder: the real harness lives on the main branch.
fn main() {}

//! Placeholder: the limiters benchmarks are not on this branch yet.

fn main() {}

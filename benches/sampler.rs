//! Placeholder: the sampler benchmarks are not on this branch yet.

fn main() {}

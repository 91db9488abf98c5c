//! Criterion micro-benchmarks (skeleton).
fn main() {}

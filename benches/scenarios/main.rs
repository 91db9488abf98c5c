//! The measuring instrument: `cargo bench --bench scenarios -- [--quick] [--url URL]`.
//! (Skeleton; the scenarios are being written.)

#[path = "../../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

mod limit;
mod measure;
mod peers;

fn main() {}

//! `cargo xtask`: set up, build, test, run and benchmark the project.
fn main() {}

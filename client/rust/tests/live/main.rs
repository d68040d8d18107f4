//! The Rust client against a real parsetier server. Each test that needs a server is
//! `#[ignore]`d with the reason, so a plain `cargo test` runs only what needs none (and lists
//! the rest as ignored); `tests/test_rust_client.py` starts the servers and runs
//! `cargo test -- --include-ignored` with their addresses in the environment (PARSETIER_SERVER
//! and, for the modules that need a server of their own, PARSETIER_SECURE_*, PARSETIER_PARTS_*
//! and PARSETIER_STALLED_SERVER). A missing variable fails the test that needs it, saying so.

mod backpressure;
mod batch;
mod common;
mod logprobs;
mod mux;
mod parts;
mod render;
mod secure;
mod sessions;
mod wire_join;

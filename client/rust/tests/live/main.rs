//! The Rust client against a real parsetier server. `tests/test_rust_client.py` starts the
//! servers and runs `cargo test` with their addresses in the environment (PARSETIER_SERVER and,
//! for the modules that need a server of their own, PARSETIER_SECURE_* and PARSETIER_PARTS_*).
//! A missing variable fails the test that needs it, saying so.

mod batch;
mod common;
mod logprobs;
mod parts;
mod secure;
mod sessions;

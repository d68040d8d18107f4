//! parsetier's native engine: the same pipeline as the Python reference engine
//! (`server/parsetier/engine/`), interpreting the same bound grammar, with byte-identical output.
//!
//! No Python here: the `python/` crate binds it. The entry point is `parser::Parser`.

pub mod assembler;
pub mod call_ids;
pub mod detok;
pub mod digest;
pub mod events;
pub mod grammar;
pub mod json_scan;
pub mod keyhash;
pub mod lexer;
pub mod machine;
pub mod parser;
pub mod prefetch;
pub mod pyjson;
pub mod readers;
pub mod session;
pub mod text;
pub mod wire;

/// The crate's version, so Python can tell which core it loaded.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

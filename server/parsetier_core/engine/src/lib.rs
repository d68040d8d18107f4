//! parsetier's native engine: the same pipeline as the Python reference engine
//! (`server/parsetier/engine/`), interpreting the same bound grammar, with byte-identical output.
//!
//! No Python here: the `python/` crate binds it.

/// The crate's version, so Python can tell which core it loaded.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod detok;

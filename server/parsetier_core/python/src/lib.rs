//! `parsetier._core`: the native engine behind a small Python API. Python owns loading,
//! validation and errors; the core owns the loops.

use pyo3::prelude::*;

mod detok;
mod parser;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", parsetier_engine::VERSION)?;
    m.add_class::<detok::Vocabulary>()?;
    m.add_class::<detok::Detokenizer>()?;
    m.add_class::<detok::Scanner>()?;
    parser::register(m)?;
    Ok(())
}

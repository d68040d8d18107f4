//! `parsetier._core`: the native engine behind a small Python API. Python owns loading,
//! validation and errors; the core owns the loops.

use pyo3::prelude::*;

mod batch;
mod detok;
mod ledger;
mod parser;
mod pb;
mod reply;
mod session;
mod values;
mod wire;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", parsetier_engine::VERSION)?;
    // The boundary's version: bump it with `parsetier/core_module.py`'s whenever what crosses
    // the boundary changes, so an older build is refused as a whole, not mid-request.
    m.add("BOUNDARY", 8)?;
    m.add_class::<detok::Vocabulary>()?;
    m.add_class::<detok::Detokenizer>()?;
    m.add_class::<detok::Scanner>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<session::ToolSet>()?;
    m.add_class::<session::SessionOpener>()?;
    m.add_class::<ledger::Ledger>()?;
    m.add_class::<batch::PackedSteps>()?;
    m.add_class::<batch::SessionTable>()?;
    m.add_function(wrap_pyfunction!(batch::read_batch, m)?)?;
    m.add_class::<wire::WireRenderer>()?;
    m.add_function(wrap_pyfunction!(values::bind_events, m)?)?;
    m.add_function(wrap_pyfunction!(values::bind_values, m)?)?;
    m.add_function(wrap_pyfunction!(reply::step_reply, m)?)?;
    m.add_function(wrap_pyfunction!(session::decimal_ids, m)?)?;
    m.add_function(wrap_pyfunction!(reply::finish_reply, m)?)?;
    m.add_function(wrap_pyfunction!(ledger::bind_rules, m)?)?;
    parser::register(m)?;
    Ok(())
}

//! `_core.Session`: one request's native parse (ids → deltas and events), the core of
//! `parsetier.native.NativeSession`. Python keeps the checks, the options and the values it hands
//! out (`Delta`, `Event`, `Final`); this class owns the per-token loop.

use parsetier_engine::detok::Scanner;
use parsetier_engine::events::{DeltaKind, StepOut};
use parsetier_engine::parser::{FinishReason, Parser, ParserConfig};
use parsetier_engine::session::Session as CoreSession;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString, PyType};

use crate::detok::Detokenizer;
use crate::parser::PyGrammar;

/// (index, arguments, id, name): `ToolCallDelta`'s fields.
pub type CallTuple = (u32, String, Option<String>, Option<String>);
/// (reasoning, content, calls): `Delta`'s text fields.
pub type DeltaTuple = (String, String, Vec<CallTuple>);
/// (finish_reason, completion_tokens, reasoning_tokens, content, reasoning, calls).
pub type FinalTuple = (
    &'static str,
    u64,
    u64,
    String,
    String,
    Vec<(String, String, String)>,
);

pub fn deltas(out: &StepOut) -> Vec<DeltaTuple> {
    out.deltas
        .iter()
        .map(|d| {
            let text = out.delta_text(d.text).to_string();
            match d.kind {
                DeltaKind::Reasoning => (text, String::new(), Vec::new()),
                DeltaKind::Content => (String::new(), text, Vec::new()),
                DeltaKind::Call => {
                    let (id, name) = match d.head {
                        Some((i, n)) => (
                            Some(out.delta_text(i).to_string()),
                            Some(out.delta_text(n).to_string()),
                        ),
                        None => (None, None),
                    };
                    (
                        String::new(),
                        String::new(),
                        vec![(d.index, text, id, name)],
                    )
                }
            }
        })
        .collect()
}

/// Python's `Event` named tuple and the `EventKind` members in `EventKind`'s order, given once
/// by `native.py` (`bind_events`): the session hands out `Event` values built here.
static EVENT_TYPES: PyOnceLock<(Py<PyType>, Vec<Py<PyAny>>)> = PyOnceLock::new();

#[pyfunction]
pub fn bind_events(
    py: Python<'_>,
    event: Bound<'_, PyType>,
    kinds: Vec<Py<PyAny>>,
) -> PyResult<()> {
    if kinds.len() != 8 {
        return Err(PyValueError::new_err("EventKind has 8 members"));
    }
    let _ = EVENT_TYPES.set(py, (event.unbind(), kinds));
    Ok(())
}

/// The step's events as `Event` values: tuples of the named tuple's type, filled in place (what
/// `tuple.__new__(Event, fields)` does, without a call into Python per event).
fn event_list<'py>(py: Python<'py>, out: &StepOut) -> PyResult<Bound<'py, PyList>> {
    let (event_type, kinds) = EVENT_TYPES
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("parsetier._core.bind_events was not called"))?;
    let list = PyList::empty(py);
    for e in &out.events {
        let fields: [Bound<'py, PyAny>; 5] = [
            kinds[e.kind as usize].bind(py).clone(),
            PyString::new(py, out.event_text(e.text)).into_any(),
            e.tool_index.into_pyobject(py)?.into_any(),
            e.tokens.into_pyobject(py)?.into_any(),
            PyString::new(py, out.event_text(e.call_id)).into_any(),
        ];
        // SAFETY: a fresh tuple of the named tuple's type (a tuple subtype, refcount 1) whose
        // five slots are each set once, as PyTuple_SetItem allows; it steals each reference.
        let tuple = unsafe {
            let raw = pyo3::ffi::PyType_GenericAlloc(event_type.as_ptr().cast(), 5);
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            for (i, field) in fields.into_iter().enumerate() {
                pyo3::ffi::PyTuple_SetItem(raw, i as pyo3::ffi::Py_ssize_t, field.into_ptr());
            }
            Bound::from_owned_ptr(py, raw)
        };
        list.append(tuple)?;
    }
    Ok(list)
}

#[pyclass(name = "Session", module = "parsetier._core")]
pub struct PySession {
    core: CoreSession,
    out: StepOut,
}

impl PySession {
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<(Vec<DeltaTuple>, Bound<'py, PyList>)> {
        let step = (deltas(&self.out), event_list(py, &self.out)?);
        self.out.clear();
        Ok(step)
    }
}

#[pymethods]
impl PySession {
    /// `detokenizer`: the model's; `grammar`: its bound grammar described; `config`: the
    /// session's parser options (`describe_config`); `prompt_ids`: the prompt (its tail seeds
    /// the detokenizer).
    #[new]
    fn new(
        detokenizer: &Detokenizer,
        grammar: &PyGrammar,
        config: &str,
        prompt_ids: Vec<u32>,
    ) -> PyResult<Self> {
        let config = ParserConfig::from_json(config).map_err(PyValueError::new_err)?;
        let parser = Parser::new(grammar.inner.clone(), &config).map_err(PyValueError::new_err)?;
        let scanner = Scanner::new(
            detokenizer.vocab.clone(),
            detokenizer.marks.clone(),
            &prompt_ids,
        );
        Ok(PySession {
            core: CoreSession::new(scanner, parser),
            out: StepOut::default(),
        })
    }

    /// One step of checked ids → (deltas, events).
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        token_ids: Vec<u32>,
    ) -> PyResult<(Vec<DeltaTuple>, Bound<'py, PyList>)> {
        self.core.feed(&token_ids, &mut self.out);
        self.take(py)
    }

    /// Text in sentinel form for `tokens` tokens → (deltas, events).
    fn feed_text<'py>(
        &mut self,
        py: Python<'py>,
        text: &str,
        tokens: u32,
    ) -> PyResult<(Vec<DeltaTuple>, Bound<'py, PyList>)> {
        self.core.feed_text(text, tokens, &mut self.out);
        self.take(py)
    }

    /// End of output → (deltas, events, final).
    #[pyo3(signature = (reason, held, flush, stop_text=None))]
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
        reason: &str,
        held: &str,
        flush: bool,
        stop_text: Option<&str>,
    ) -> PyResult<(Vec<DeltaTuple>, Bound<'py, PyList>, FinalTuple)> {
        let reason = FinishReason::parse(reason)
            .ok_or_else(|| PyValueError::new_err("unknown finish reason"))?;
        let f = self
            .core
            .finish(reason, held, flush, stop_text, &mut self.out);
        let (d, e) = self.take(py)?;
        Ok((
            d,
            e,
            (
                f.finish_reason,
                f.completion_tokens,
                f.reasoning_tokens,
                f.content,
                f.reasoning,
                f.calls,
            ),
        ))
    }

    #[getter]
    fn reasoning_tokens(&self) -> u64 {
        self.core.reasoning_tokens()
    }
}

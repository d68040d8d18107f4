//! `_core.WireRenderer`: a streamed session's wire dialect rendered natively
//! (`parsetier_engine::wire`), the `Renderer` of `parsetier/engine/wire/` for native sessions: it
//! drives the dialect's `WireDialect`.
//!
//! On the per-token path the step's bytes come from the session's own step output, kept in Rust
//! (`PySession::take_keeping`): no Python value is read. Any other deltas (an annotated step with
//! logprobs or token ids, joined pieces, the finish) are read from their Python values.

use parsetier_engine::events::StepOut;
use parsetier_engine::wire::{self, Call, Finish, Logprob, Request, WireDelta, WireDialect};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PySequence, PyString};

use crate::session::PySession;

impl PySession {
    /// `take`, keeping the step's native output and its `deltas` list for the session's
    /// renderer (`WireRenderer.step` renders it when handed that same list).
    pub(crate) fn take_keeping<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let step = self.step_value(py);
        match &step {
            Ok(out) => {
                self.kept_deltas = Some(out.getattr("deltas")?.unbind());
                std::mem::swap(&mut self.out, &mut self.kept);
            }
            Err(_) => self.kept_deltas = None,
        }
        self.out.clear();
        step
    }

    /// The kept step output, when `deltas` is its list (taken: it renders once).
    fn kept_for(&mut self, deltas: &Bound<'_, PyAny>) -> Option<&StepOut> {
        match &self.kept_deltas {
            Some(kept) if kept.is(deltas) => {
                self.kept_deltas = None;
                Some(&self.kept)
            }
            _ => None,
        }
    }
}

#[pyclass(name = "WireRenderer", module = "parsetier._core")]
pub struct WireRenderer {
    renderer: Box<dyn WireDialect>,
    /// The native session whose per-token steps this renderer reads directly.
    session: Option<Py<PySession>>,
    out: String,
}

/// A `Delta`'s values, read from Python.
struct Owned {
    reasoning: String,
    content: String,
    calls: Vec<(i64, Option<String>, String, String)>,
    logprobs: Vec<Logprob>,
    token_ids: Vec<u32>,
}

fn read_deltas(py: Python<'_>, deltas: &Bound<'_, PyAny>) -> PyResult<Vec<Owned>> {
    let mut logprob_json: Option<Bound<'_, PyAny>> = None;
    let mut owned = Vec::new();
    for delta in deltas.try_iter()? {
        let delta = delta?;
        let mut calls = Vec::new();
        for call in delta.getattr("tool_calls")?.try_iter()? {
            let call = call?;
            let name: Option<String> = call.getattr("name")?.extract()?;
            calls.push((
                call.getattr("index")?.extract()?,
                call.getattr("id")?.extract()?,
                name.unwrap_or_default(),
                call.getattr("arguments")?.extract()?,
            ));
        }
        let mut logprobs = Vec::new();
        for entry in delta.getattr("logprobs")?.try_iter()? {
            let encode = match &logprob_json {
                Some(f) => f,
                None => logprob_json.insert(
                    py.import("parsetier.engine.wire.wire_json")?
                        .getattr("logprob_json")?,
                ),
            };
            let (chat, delta): (String, String) = encode.call1((entry?,))?.extract()?;
            logprobs.push(Logprob { chat, delta });
        }
        let ids = delta.getattr("token_ids")?;
        owned.push(Owned {
            reasoning: delta.getattr("reasoning")?.extract()?,
            content: delta.getattr("content")?.extract()?,
            calls,
            logprobs,
            token_ids: ids.cast::<PySequence>()?.extract()?,
        });
    }
    Ok(owned)
}

/// Renders `deltas` read from Python values with `render`.
fn with_deltas<R>(owned: &[Owned], render: impl FnOnce(&[WireDelta<'_>]) -> R) -> R {
    let calls: Vec<Vec<Call<'_>>> = owned
        .iter()
        .map(|d| {
            d.calls
                .iter()
                .map(|(index, id, name, arguments)| Call {
                    index: *index,
                    id: id.as_deref(),
                    name,
                    arguments,
                })
                .collect()
        })
        .collect();
    let deltas: Vec<WireDelta<'_>> = owned
        .iter()
        .zip(&calls)
        .map(|(d, calls)| WireDelta {
            reasoning: &d.reasoning,
            content: &d.content,
            calls,
            logprobs: &d.logprobs,
            token_ids: &d.token_ids,
        })
        .collect();
    render(&deltas)
}

#[pymethods]
impl WireRenderer {
    /// `dialect`: `openai_chat`, `anthropic_messages` or `openai_responses` (streamed);
    /// `session`: the native session whose steps it renders directly.
    #[new]
    #[pyo3(signature = (dialect, response_id, model, created, include_usage, prompt_tokens, choice_index, session=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dialect: &str,
        response_id: String,
        model: String,
        created: i64,
        include_usage: bool,
        prompt_tokens: u64,
        choice_index: i64,
        session: Option<Bound<'_, PySession>>,
    ) -> PyResult<Self> {
        let request = Request {
            response_id,
            model,
            created,
            include_usage,
            prompt_tokens,
            choice_index,
        };
        let renderer = wire::renderer(dialect, request)
            .ok_or_else(|| PyValueError::new_err(format!("no native renderer for {dialect}")))?;
        if let Some(session) = &session {
            session.borrow_mut().keep_steps = true;
        }
        Ok(WireRenderer {
            renderer,
            session: session.map(Bound::unbind),
            out: String::new(),
        })
    }

    /// `Renderer.step`.
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        deltas: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.out.clear();
        let mut native = false;
        if let Some(session) = &self.session {
            let mut session = session.bind(py).borrow_mut();
            if let Some(step) = session.kept_for(deltas) {
                self.renderer.step_native(step, &mut self.out);
                native = true;
            }
        }
        if !native {
            let owned = read_deltas(py, deltas)?;
            let (renderer, out) = (&mut self.renderer, &mut self.out);
            with_deltas(&owned, |d| renderer.step(d, out));
        }
        Ok(PyBytes::new(py, self.out.as_bytes()))
    }

    /// The `sequence_number` the next event would carry (`ResponsesRenderer.sequence`).
    #[getter]
    fn sequence(&self) -> u64 {
        self.renderer.sequence()
    }

    /// `ResponsesRenderer.fail`: the bytes that end a streamed response with an error.
    fn fail<'py>(
        &mut self,
        py: Python<'py>,
        code: &str,
        message: &str,
        failed_code: &str,
    ) -> Bound<'py, PyBytes> {
        let mut out = String::new();
        self.renderer.fail(code, message, failed_code, &mut out);
        PyBytes::new(py, out.as_bytes())
    }

    /// `Renderer.finish` (`final`: a `Final`; its finish reason and usage are read).
    #[pyo3(signature = (deltas, r#final, stop_string=None))]
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
        deltas: &Bound<'py, PyAny>,
        r#final: &Bound<'py, PyAny>,
        stop_string: Option<&str>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let reason = r#final.getattr("finish_reason")?;
        let reason = reason.cast::<PyString>()?.to_str()?.to_owned();
        let usage = r#final.getattr("usage")?;
        let finish = Finish {
            finish_reason: &reason,
            completion_tokens: usage.getattr("completion_tokens")?.extract()?,
            reasoning_tokens: usage.getattr("reasoning_tokens")?.extract()?,
            stop_string,
        };
        let owned = read_deltas(py, deltas)?;
        let mut last = String::new();
        let mut closing = String::new();
        let renderer = &mut self.renderer;
        with_deltas(&owned, |d| {
            renderer.finish(d, &finish, &mut last, &mut closing)
        });
        Ok((
            PyBytes::new(py, last.as_bytes()),
            PyBytes::new(py, closing.as_bytes()),
        ))
    }
}

//! `_core.Session`: one request's native parse (ids → deltas and events), the core of
//! `parsetier.native.NativeSession`. Python keeps the checks, the options and the values it hands
//! out (`Delta`, `Event`, `Final`); this class owns the per-token loop.

use parsetier_engine::detok::Scanner;
use std::cell::Cell;
use std::sync::Arc;

use parsetier_engine::events::{give_back_items, StepOut};
use parsetier_engine::grammar::Grammar;
use parsetier_engine::machine::Tools;
use parsetier_engine::parser::{parse_tools, Final, FinishReason, Parser, ParserConfig};
use parsetier_engine::session::Session as CoreSession;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::detok::{Detokenizer, ValidIds};
use crate::parser::PyGrammar;
use crate::values::step_output;

/// (finish_reason, completion_tokens, reasoning_tokens, content, reasoning, calls).
pub type FinalTuple = (
    &'static str,
    u64,
    u64,
    String,
    String,
    Vec<(String, String, String)>,
);

/// A session's tools, made once from the JSON of their `[name, parameters schema]` pairs and
/// shared by every session opened with them (`native.native_tools` keeps one per tools tuple).
#[pyclass(name = "Tools", module = "parsetier._core", frozen)]
pub struct ToolSet {
    inner: Arc<Tools>,
}

#[pymethods]
impl ToolSet {
    #[new]
    fn new(tools_json: &str) -> PyResult<Self> {
        Ok(ToolSet {
            inner: Arc::new(parse_tools(tools_json).map_err(PyValueError::new_err)?),
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// What makes a `Session`: the model's detokenizer and described grammar, the tools (`Tools`,
/// shared), the start state and the parser options (`ParserConfig`, `describe.describe_config`'s
/// fields, as arguments), all but a session's own (its prompt tail and call ids' seed), taken
/// once for the sessions of one model opened with one set of shared options
/// (`native._opening_parts` keeps one per model and options, `native._opener` makes them):
/// `session` then reads two arguments at an open. The one way Python makes a session.
#[pyclass(name = "SessionOpener", module = "parsetier._core", frozen)]
pub struct SessionOpener {
    detokenizer: Detokenizer,
    grammar: Arc<Grammar>,
    tools: Arc<Tools>,
    /// The parser options, with no call ids' seed (each session's own).
    config: ParserConfig,
    events: bool,
}

#[pymethods]
impl SessionOpener {
    /// The arguments described on the type: a `Session` but its prompt tail and call ids' seed.
    #[new]
    #[pyo3(signature = (
        detokenizer, grammar, tools, start, events=true, *, include_reasoning=true,
        tool_choice="auto", parallel_tool_calls=true, complete_tool_calls=false, echo=""
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        detokenizer: &Detokenizer,
        grammar: &PyGrammar,
        tools: &ToolSet,
        start: &str,
        events: bool,
        include_reasoning: bool,
        tool_choice: &str,
        parallel_tool_calls: bool,
        complete_tool_calls: bool,
        echo: &str,
    ) -> Self {
        SessionOpener {
            detokenizer: Detokenizer {
                vocab: detokenizer.vocab.clone(),
                marks: detokenizer.marks.clone(),
                valid: detokenizer.valid.clone(),
            },
            grammar: grammar.inner.clone(),
            tools: tools.inner.clone(),
            config: ParserConfig {
                start: start.to_owned(),
                tools: Vec::new(),
                include_reasoning,
                tool_choice: tool_choice.to_owned(),
                parallel_tool_calls,
                complete_tool_calls,
                call_id_seed: String::new(),
                echo: echo.to_owned(),
            },
            events,
        }
    }

    /// `Session(...)` of these arguments with `prompt_ids` (the prompt's tail) and `call_id_seed`.
    fn session(&self, prompt_ids: Vec<u32>, call_id_seed: &str) -> PyResult<PySession> {
        let config = ParserConfig {
            call_id_seed: call_id_seed.to_owned(),
            ..self.config.clone()
        };
        PySession::open(
            &self.detokenizer,
            &self.grammar,
            &self.tools,
            &config,
            &prompt_ids,
            self.events,
        )
    }
}

/// What `call_ids.prompt_digest` hashes: `",".join(map(str, ids)).encode()`, without a Python
/// `str` per id (a long prompt's ids were most of a session's open).
#[pyfunction]
pub fn decimal_ids<'py>(py: Python<'py>, ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let text = parsetier_engine::call_ids::decimal_list(&crate::detok::ids_from(ids, true)?);
    Ok(PyBytes::new(py, &text))
}

#[pyclass(name = "Session", module = "parsetier._core")]
pub struct PySession {
    core: CoreSession,
    pub(crate) out: StepOut,
    valid: Arc<ValidIds>,
    /// Steps build `Event` values (`SessionOptions.events`).
    events: bool,
    /// Whose `_checked_feed` `step` hands every call it does not take to (set by
    /// `NativeSession`: a `weakref.ref` to itself, so the session and its core hold no cycle).
    #[pyo3(get, set)]
    fallback: Option<Py<PyAny>>,
    /// `finish` ran: `step` leaves every call to the fallback's checks.
    finished: bool,
    /// Ids were fed (`Session._ids_seen`).
    ids_seen: bool,
    /// A native wire renderer reads this session's steps (`wire.rs`): `step` keeps its output.
    pub(crate) keep_steps: bool,
    /// The last `step`'s output and its `deltas` list, while `keep_steps`.
    pub(crate) kept: StepOut,
    pub(crate) kept_deltas: Option<Py<PyAny>>,
}

thread_local! {
    /// The step's ids (`step`): scratch, empty between two steps, so one buffer per thread rather
    /// than one per session (each open session held the capacity its largest step grew: 512
    /// bytes after a step of 71 ids). Taken out for a step and put back after it, so no borrow is
    /// held while Python runs.
    static STEP_IDS: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

thread_local! {
    /// The step output of the raw paths (`step_into`, `finish_raw`: the packed `ParseBatch` items,
    /// the `Parse` stream's plain messages): scratch, empty between two steps, so one per thread
    /// rather than the session's own `out`. With a thousand sessions stepped in turn, each
    /// session's four output buffers were four cache lines fetched from memory per item (and up
    /// to ~1.2 KiB of capacity it held between steps); the thread's stay in cache from one item
    /// to the next.
    /// Taken out for a step and put back after it, as `STEP_IDS`.
    static RAW_OUT: Cell<StepOut> = const { Cell::new(StepOut::new()) };
}

/// Ids the thread's step buffer keeps past a step (a larger step's capacity is given back).
const KEEP_STEP_IDS: usize = 4096;

/// Ids per call from which the parse runs with the GIL released: a large message's worker thread
/// (see the servicer) then lets the event loop serve the other streams while Rust parses. Below
/// it the release and re-acquire would cost more than they free.
const DETACH_IDS: usize = 1024;

impl PySession {
    /// A new session (`SessionOpener.session`).
    fn open(
        detokenizer: &Detokenizer,
        grammar: &Arc<Grammar>,
        tools: &Arc<Tools>,
        config: &ParserConfig,
        prompt_ids: &[u32],
        events: bool,
    ) -> PyResult<Self> {
        let parser = Parser::with_tools(grammar.clone(), config, tools.clone())
            .map_err(PyValueError::new_err)?;
        let scanner = Scanner::new(
            detokenizer.vocab.clone(),
            detokenizer.marks.clone(),
            prompt_ids,
        );
        Ok(PySession {
            core: CoreSession::new(scanner, parser),
            out: StepOut::default(),
            valid: detokenizer.valid.clone(),
            events,
            fallback: None,
            finished: false,
            ids_seen: false,
            keep_steps: false,
            kept: StepOut::default(),
            kept_deltas: None,
        })
    }

    /// Feeds `ids` into the core session, without the GIL for a large step.
    fn feed_ids(&mut self, py: Python<'_>, ids: &[u32]) {
        let (core, out) = (&mut self.core, &mut self.out);
        if ids.len() >= DETACH_IDS {
            py.detach(|| core.feed(ids, out));
        } else {
            core.feed(ids, out);
        }
    }

    /// The pending output as a `StepOutput`, built from values handed out before that nothing
    /// else holds any more (`values::Recycle`); the output is then cleared.
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let step = step_output(py, &self.out, self.events, true);
        self.out.clear();
        step
    }

    /// The pending output as a new `StepOutput` (no value reused).
    pub(crate) fn step_value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        step_output(py, &self.out, self.events, false)
    }

    /// Loads the ids of a non-empty list or tuple of ints, all valid, into `buffer`; false
    /// (for the fallback to check and refuse or feed) for anything else.
    fn load(&self, ids: &Bound<'_, PyAny>, buffer: &mut Vec<u32>) -> bool {
        let valid = &self.valid;
        buffer.clear();
        let mut one = |item: Bound<'_, PyAny>| match item.extract::<u32>() {
            Ok(id) if valid.contains(id) => {
                buffer.push(id);
                true
            }
            _ => false,
        };
        let all = if let Ok(list) = ids.cast::<PyList>() {
            list.iter().all(&mut one)
        } else if let Ok(tuple) = ids.cast::<PyTuple>() {
            tuple.iter().all(&mut one)
        } else {
            false
        };
        all && !buffer.is_empty()
    }
}

#[pymethods]
impl PySession {
    /// `NativeSession.feed` itself (bound to it): a non-empty list or tuple of valid ids on an
    /// open session, without logprobs → its `StepOutput`, in one call. Anything else (logprobs,
    /// a bad id, an empty step, a finished session) goes to `fallback` unchanged, which checks
    /// it and raises or feeds.
    #[pyo3(signature = (token_ids, logprobs=None))]
    fn step<'py>(
        slf: &Bound<'py, Self>,
        token_ids: &Bound<'py, PyAny>,
        logprobs: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fallback = {
            let mut this = slf.try_borrow_mut()?;
            let mut ids = STEP_IDS.take();
            let loaded = logprobs.is_none() && !this.finished && this.load(token_ids, &mut ids);
            if loaded {
                this.ids_seen = true;
                this.feed_ids(py, &ids);
            }
            give_back_items(&mut ids, KEEP_STEP_IDS);
            STEP_IDS.set(ids);
            if loaded {
                if this.keep_steps {
                    return this.take_keeping(py);
                }
                return this.take(py);
            }
            this.fallback.as_ref().map(|f| f.clone_ref(py))
        };
        let owner = fallback
            .ok_or_else(|| PyRuntimeError::new_err("parsetier._core.Session.fallback is not set"))?
            .bind(py)
            .call0()?;
        if owner.is_none() {
            return Err(PyRuntimeError::new_err("the session's owner is gone"));
        }
        owner.call_method1(pyo3::intern!(py, "_checked_feed"), (token_ids, logprobs))
    }

    /// One step of checked ids → `StepOutput`.
    fn feed<'py>(&mut self, py: Python<'py>, token_ids: Vec<u32>) -> PyResult<Bound<'py, PyAny>> {
        if !token_ids.is_empty() {
            self.ids_seen = true;
        }
        self.feed_ids(py, &token_ids);
        self.take(py)
    }

    /// Text in sentinel form for `tokens` tokens → `StepOutput`.
    fn feed_text<'py>(
        &mut self,
        py: Python<'py>,
        text: &str,
        tokens: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.core.feed_text(text, tokens, &mut self.out);
        self.take(py)
    }

    /// End of output (flushing the detokenizer when ids were fed) → (`StepOutput`, final).
    #[pyo3(signature = (reason, held, stop_text=None))]
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
        reason: &str,
        held: &str,
        stop_text: Option<&str>,
    ) -> PyResult<(Bound<'py, PyAny>, FinalTuple)> {
        let reason = FinishReason::parse(reason)
            .ok_or_else(|| PyValueError::new_err("unknown finish reason"))?;
        self.finished = true;
        let f = self
            .core
            .finish(reason, held, self.ids_seen, stop_text, &mut self.out);
        Ok((
            self.take(py)?,
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

    /// Ids were fed: text steps no longer read marker texts as markers.
    #[getter]
    fn ids_seen(&self) -> bool {
        self.ids_seen
    }

    #[getter]
    fn reasoning_tokens(&self) -> u64 {
        self.core.reasoning_tokens()
    }
}

/// The packed `ParseBatch` path (`batch.rs`): a step with no Python values built.
impl PySession {
    /// `step` would feed these ids: the session is open and they are all valid (and there are some).
    /// What a step of this session reaches first, asked of the memory system ahead of it
    /// (`PackedSteps.step`, for the next item while one steps).
    pub(crate) fn prefetch(&self) {
        self.core.prefetch();
    }

    pub(crate) fn accepts(&self, ids: &[u32]) -> bool {
        !self.finished && !ids.is_empty() && ids.iter().all(|&id| self.valid.contains(id))
    }

    /// Feed ids `accepts` took into the caller's scratch output (empty; emptied again after
    /// `reply`) and hand it to `reply` (`ledger::step`; the packed path steps a message's items
    /// with one output, taken from the thread once per call: `take_out`).
    #[inline]
    pub(crate) fn step_into<R>(
        &mut self,
        ids: &[u32],
        out: &mut StepOut,
        reply: impl FnOnce(&StepOut) -> R,
    ) -> R {
        self.ids_seen = true;
        self.core.feed(ids, out);
        let result = reply(out);
        out.clear();
        result
    }

    /// The thread's scratch step output (`RAW_OUT`), taken for a run of `step_into` calls; give
    /// it back with `give_back_out`.
    pub(crate) fn take_out() -> StepOut {
        RAW_OUT.take()
    }

    pub(crate) fn give_back_out(out: StepOut) {
        RAW_OUT.set(out);
    }

    /// `finish` with no held text and no stop text (`reply::finish_reply`): hand the last
    /// step's output and the final result to `reply` (then drop the output); None when the
    /// session has finished already.
    pub(crate) fn finish_raw<R>(
        &mut self,
        reason: FinishReason,
        reply: impl FnOnce(&StepOut, &Final) -> R,
    ) -> Option<R> {
        if self.finished {
            return None;
        }
        self.finished = true;
        let mut out = RAW_OUT.take();
        let last = self.core.finish(reason, "", self.ids_seen, None, &mut out);
        let result = reply(&out, &last);
        out.clear();
        RAW_OUT.set(out);
        Some(result)
    }
}

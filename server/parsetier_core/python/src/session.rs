//! `_core.Session`: one request's native parse (ids → deltas and events), the core of
//! `parsetier.native.NativeSession`. Python keeps the checks, the options and the values it hands
//! out (`Delta`, `Event`, `Final`); this class owns the per-token loop.

use parsetier_engine::detok::Scanner;
use std::sync::Arc;

use parsetier_engine::events::{Delta, DeltaKind, StepOut};
use parsetier_engine::machine::Tools;
use parsetier_engine::parser::{parse_tools, Final, FinishReason, Parser, ParserConfig};
use parsetier_engine::session::Session as CoreSession;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

use crate::detok::{Detokenizer, ValidIds};
use crate::parser::PyGrammar;

/// (finish_reason, completion_tokens, reasoning_tokens, content, reasoning, calls).
pub type FinalTuple = (
    &'static str,
    u64,
    u64,
    String,
    String,
    Vec<(String, String, String)>,
);

/// `StepOutput`, `Delta` and `ToolCallDelta` with the member descriptors of their slots (in
/// field order), given once by `native.py` (`bind_values`): the session builds the values it
/// hands out here, one allocation and one slot store per field, as `object.__new__` and the
/// classes' own `__init__` would.
struct ValueTypes {
    step_output: Py<PyType>,
    step_fields: [Py<PyAny>; 3],
    delta: Py<PyType>,
    delta_fields: [Py<PyAny>; 5],
    call: Py<PyType>,
    call_fields: [Py<PyAny>; 4],
    /// The member descriptors' `__set__` (all slots share one descriptor type).
    set: pyo3::ffi::descrsetfunc,
    empty: Py<PyString>,
}

static VALUE_TYPES: PyOnceLock<ValueTypes> = PyOnceLock::new();

fn fields<const N: usize>(list: Vec<Py<PyAny>>) -> PyResult<[Py<PyAny>; N]> {
    list.try_into()
        .map_err(|_| PyValueError::new_err(format!("expected {N} slot descriptors")))
}

#[pyfunction]
pub fn bind_values(
    py: Python<'_>,
    step_output: Bound<'_, PyType>,
    step_fields: Vec<Py<PyAny>>,
    delta: Bound<'_, PyType>,
    delta_fields: Vec<Py<PyAny>>,
    call: Bound<'_, PyType>,
    call_fields: Vec<Py<PyAny>>,
) -> PyResult<()> {
    let step_fields: [Py<PyAny>; 3] = fields(step_fields)?;
    let descr_type = step_fields[0].bind(py).get_type();
    // SAFETY: a type object's slot, read through the stable ABI; descriptors without `__set__`
    // are refused below.
    let slot = unsafe {
        pyo3::ffi::PyType_GetSlot(descr_type.as_ptr().cast(), pyo3::ffi::Py_tp_descr_set)
    };
    if slot.is_null() {
        return Err(PyValueError::new_err("slot descriptors expected"));
    }
    let all_same = |list: &[Py<PyAny>]| list.iter().all(|d| d.bind(py).get_type().is(&descr_type));
    let delta_fields: [Py<PyAny>; 5] = fields(delta_fields)?;
    let call_fields: [Py<PyAny>; 4] = fields(call_fields)?;
    if !(all_same(&step_fields) && all_same(&delta_fields) && all_same(&call_fields)) {
        return Err(PyValueError::new_err("slot descriptors expected"));
    }
    let _ = VALUE_TYPES.set(
        py,
        ValueTypes {
            step_output: step_output.unbind(),
            step_fields,
            delta: delta.unbind(),
            delta_fields,
            call: call.unbind(),
            call_fields,
            // SAFETY: the slot read above is the type's `descrsetfunc`.
            set: unsafe {
                std::mem::transmute::<*mut std::ffi::c_void, pyo3::ffi::descrsetfunc>(slot)
            },
            empty: PyString::intern(py, "").unbind(),
        },
    );
    Ok(())
}

/// Takes a new object that can hold no cycle off the cyclic GC's lists.
fn untrack(obj: &Bound<'_, PyAny>) {
    // SAFETY: `obj` is a live GC object of a type with `Py_TPFLAGS_HAVE_GC` (instances of
    // Python classes and tuples); untracking an untracked object is a no-op.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(obj.as_ptr().cast()) }
}

impl ValueTypes {
    fn get(py: Python<'_>) -> PyResult<&ValueTypes> {
        VALUE_TYPES
            .get(py)
            .ok_or_else(|| PyRuntimeError::new_err("parsetier._core.bind_values was not called"))
    }

    /// A new instance of `ty` (a slots class) with `values` stored in `slots`. `frozen`: the
    /// class is a frozen dataclass and the values are strings, ints, None or such instances, so
    /// the object can never be part of a cycle and leaves the cyclic GC's lists (as CPython does
    /// for a tuple of atomic values): a caller keeping many outputs does not pay for scanning it.
    fn make<'py, const N: usize>(
        &self,
        py: Python<'py>,
        ty: &Py<PyType>,
        slots: &[Py<PyAny>; N],
        values: [Bound<'py, PyAny>; N],
        frozen: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: `PyType_GenericAlloc` is what `object.__new__` runs for these classes; each
        // slot is then set through its member descriptor (borrowing `value`), as `__init__` does.
        unsafe {
            let raw = pyo3::ffi::PyType_GenericAlloc(ty.as_ptr().cast(), 0);
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            let obj = Bound::from_owned_ptr(py, raw);
            for (descr, value) in slots.iter().zip(values.iter()) {
                if (self.set)(descr.as_ptr(), raw, value.as_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            if frozen {
                untrack(&obj);
            }
            Ok(obj)
        }
    }

    fn text<'py>(&self, py: Python<'py>, text: &str) -> Bound<'py, PyAny> {
        if text.is_empty() {
            self.empty.bind(py).clone().into_any()
        } else {
            PyString::new(py, text).into_any()
        }
    }

    fn delta<'a, 'py>(
        &self,
        py: Python<'py>,
        out: &'a StepOut,
        d: &Delta,
        shared: &mut Texts<'a, 'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let empty = || self.empty.bind(py).clone().into_any();
        let none_tuple = || PyTuple::empty(py).into_any();
        let raw = out.delta_text(d.text);
        let text = self.text(py, raw);
        shared.keep(raw, &text);
        let (reasoning, content, calls) = match d.kind {
            DeltaKind::Reasoning => (text, empty(), none_tuple()),
            DeltaKind::Content => (empty(), text, none_tuple()),
            DeltaKind::Call => {
                let (id, name) = match d.head {
                    Some((i, n)) => (
                        self.text(py, out.delta_text(i)),
                        self.text(py, out.delta_text(n)),
                    ),
                    None => (py.None().into_bound(py), py.None().into_bound(py)),
                };
                let index = d.index.into_pyobject(py)?.into_any();
                let call = self.make(
                    py,
                    &self.call,
                    &self.call_fields,
                    [index, text, id, name],
                    true,
                )?;
                let calls = PyTuple::new(py, [call])?.into_any();
                untrack(&calls);
                (empty(), empty(), calls)
            }
        };
        self.make(
            py,
            &self.delta,
            &self.delta_fields,
            [reasoning, content, calls, none_tuple(), none_tuple()],
            true,
        )
    }

    /// The step as a `StepOutput` (its `final` None). `events`: the session builds `Event`
    /// values (else the step's `events` is a new empty list). An event whose text is a delta's
    /// (a content or argument fragment: nearly every event) shares that delta's `str`.
    fn step<'py>(
        &self,
        py: Python<'py>,
        out: &StepOut,
        events: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut shared = Texts::default();
        let deltas = PyList::empty(py);
        for d in &out.deltas {
            deltas.append(self.delta(py, out, d, &mut shared)?)?;
        }
        let events = if events {
            event_list(py, out, &shared)?
        } else {
            PyList::empty(py)
        };
        self.make(
            py,
            &self.step_output,
            &self.step_fields,
            [
                deltas.into_any(),
                events.into_any(),
                py.None().into_bound(py),
            ],
            false,
        )
    }
}

/// The `str` values a step's deltas were given, by their text, for its events to reuse (a step
/// has one or two deltas; the few first are kept).
#[derive(Default)]
struct Texts<'a, 'py> {
    seen: [Option<(&'a str, Bound<'py, PyAny>)>; 4],
    len: usize,
}

impl<'a, 'py> Texts<'a, 'py> {
    fn keep(&mut self, text: &'a str, value: &Bound<'py, PyAny>) {
        if self.len < self.seen.len() && !text.is_empty() {
            self.seen[self.len] = Some((text, value.clone()));
            self.len += 1;
        }
    }

    fn get(&self, py: Python<'py>, text: &str) -> Bound<'py, PyAny> {
        for (seen, value) in self.seen[..self.len].iter().flatten() {
            if *seen == text {
                return value.clone();
            }
        }
        PyString::new(py, text).into_any()
    }
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
fn event_list<'py>(
    py: Python<'py>,
    out: &StepOut,
    shared: &Texts<'_, 'py>,
) -> PyResult<Bound<'py, PyList>> {
    let (event_type, kinds) = EVENT_TYPES
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("parsetier._core.bind_events was not called"))?;
    let list = PyList::empty(py);
    for e in &out.events {
        let fields: [Bound<'py, PyAny>; 5] = [
            kinds[e.kind as usize].bind(py).clone(),
            shared.get(py, out.event_text(e.text)),
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
        // An `Event` holds a kind, strings and ints: no cycle (see `ValueTypes::make`).
        untrack(&tuple);
        list.append(tuple)?;
    }
    Ok(list)
}

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
    /// The step's ids (`step`), a buffer kept between steps.
    ids: Vec<u32>,
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

/// Ids per call from which the parse runs with the GIL released: a large message's worker thread
/// (see the servicer) then lets the event loop serve the other streams while Rust parses. Below
/// it the release and re-acquire would cost more than they free.
const DETACH_IDS: usize = 1024;

impl PySession {
    /// Feeds `ids` into the core session, without the GIL for a large step.
    fn feed_ids(&mut self, py: Python<'_>, ids: &[u32]) {
        let (core, out) = (&mut self.core, &mut self.out);
        if ids.len() >= DETACH_IDS {
            py.detach(|| core.feed(ids, out));
        } else {
            core.feed(ids, out);
        }
    }

    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let step = self.step_value(py);
        self.out.clear();
        step
    }

    /// The pending output as a `StepOutput`.
    pub(crate) fn step_value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ValueTypes::get(py)?.step(py, &self.out, self.events)
    }

    /// Loads the ids of a non-empty list or tuple of ints, all valid, into `self.ids`; false
    /// (for the fallback to check and refuse or feed) for anything else.
    fn load(&mut self, ids: &Bound<'_, PyAny>) -> bool {
        let valid = &self.valid;
        let buffer = &mut self.ids;
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
        all && !self.ids.is_empty()
    }
}

#[pymethods]
impl PySession {
    /// `detokenizer`: the model's; `grammar`: its bound grammar described; `tools`: the
    /// session's tools (`Tools`, shared); `start` and the keywords: the session's parser options
    /// (`ParserConfig`, `describe.describe_config`'s fields); `prompt_ids`: the prompt's tail
    /// (it seeds the detokenizer); `events`: steps build `Event` values.
    #[new]
    #[pyo3(signature = (
        detokenizer, grammar, tools, start, prompt_ids, events=true, *, include_reasoning=true,
        tool_choice="auto", parallel_tool_calls=true, complete_tool_calls=false,
        call_id_seed="", echo=""
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        detokenizer: &Detokenizer,
        grammar: &PyGrammar,
        tools: &ToolSet,
        start: &str,
        prompt_ids: Vec<u32>,
        events: bool,
        include_reasoning: bool,
        tool_choice: &str,
        parallel_tool_calls: bool,
        complete_tool_calls: bool,
        call_id_seed: &str,
        echo: &str,
    ) -> PyResult<Self> {
        let config = ParserConfig {
            start: start.to_owned(),
            tools: Vec::new(),
            include_reasoning,
            tool_choice: tool_choice.to_owned(),
            parallel_tool_calls,
            complete_tool_calls,
            call_id_seed: call_id_seed.to_owned(),
            echo: echo.to_owned(),
        };
        let parser = Parser::with_tools(grammar.inner.clone(), &config, tools.inner.clone())
            .map_err(PyValueError::new_err)?;
        let scanner = Scanner::new(
            detokenizer.vocab.clone(),
            detokenizer.marks.clone(),
            &prompt_ids,
        );
        Ok(PySession {
            core: CoreSession::new(scanner, parser),
            out: StepOut::default(),
            valid: detokenizer.valid.clone(),
            ids: Vec::new(),
            events,
            fallback: None,
            finished: false,
            ids_seen: false,
            keep_steps: false,
            kept: StepOut::default(),
            kept_deltas: None,
        })
    }

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
            if logprobs.is_none() && !this.finished && this.load(token_ids) {
                this.ids_seen = true;
                let ids = std::mem::take(&mut this.ids);
                this.feed_ids(py, &ids);
                this.ids = ids;
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
    pub(crate) fn accepts(&self, ids: &[u32]) -> bool {
        !self.finished && !ids.is_empty() && ids.iter().all(|&id| self.valid.contains(id))
    }

    /// Feed ids `accepts` took and hand the step's output to `reply` (then drop it).
    pub(crate) fn step_raw<R>(&mut self, ids: &[u32], reply: impl FnOnce(&StepOut) -> R) -> R {
        self.ids_seen = true;
        self.core.feed(ids, &mut self.out);
        let result = reply(&self.out);
        self.out.clear();
        result
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
        let last = self
            .core
            .finish(reason, "", self.ids_seen, None, &mut self.out);
        let result = reply(&self.out, &last);
        self.out.clear();
        Some(result)
    }
}

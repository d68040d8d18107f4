//! The Python values a session hands out (`StepOutput`, `Delta`, `ToolCallDelta`, `Event`), built
//! in Rust. Python gives the classes once (`native.py`: `bind_values`, `bind_events`).
//!
//! At one id per step these values are most of a step's cost (issue 21), so:
//! - a slots class's fields are written at their offsets in the instance, found once by probing
//!   (`SlotClass::bind`), not through each member descriptor's setter;
//! - steps recycle what they handed out and nothing else holds any more (`Recycle`, one per
//!   process): `StepOutput` values and their lists when their reference counts say only the pool
//!   holds them, and `Delta` values (with their `ToolCallDelta`) and `Event` values from small
//!   pools under the same rule. An object only the pool can reach cannot be observed changing
//!   (CPython's own `zip` and dict item iterators reuse their result tuple on the same rule). A
//!   caller that keeps a step's output, or any part of it, gets fresh values the next step and
//!   the kept ones never change.

use parsetier_engine::events::{Delta, DeltaKind, StepOut};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

/// A slots class (no `__dict__`, no `__weakref__`, nothing but its `N` fields) whose instances
/// the session writes directly: each field is a `PyObject *` at `offsets[i]` of the instance,
/// as its member descriptor (`T_OBJECT_EX`) reads and writes it.
struct SlotClass<const N: usize> {
    ty: Py<PyType>,
    offsets: [usize; N],
}

fn size_attr(ty: &Bound<'_, PyType>, name: &str) -> PyResult<usize> {
    ty.getattr(name)?.extract()
}

impl<const N: usize> SlotClass<N> {
    /// Finds the fields' offsets: a probe instance gets each field set through its descriptor
    /// (`descriptors`, in field order) to a value of its own (the descriptor itself), and each
    /// value is looked for among the instance's words. Refuses any class whose instances hold
    /// anything else.
    fn bind(ty: Bound<'_, PyType>, descriptors: Vec<Py<PyAny>>) -> PyResult<Self> {
        let py = ty.py();
        let descriptors: [Py<PyAny>; N] = descriptors
            .try_into()
            .map_err(|_| PyValueError::new_err(format!("expected {N} slot descriptors")))?;
        let head = std::mem::size_of::<ffi::PyObject>();
        let word = std::mem::size_of::<*mut ffi::PyObject>();
        let basic = size_attr(&ty, "__basicsize__")?;
        if basic != head + N * word
            || size_attr(&ty, "__itemsize__")? != 0
            || size_attr(&ty, "__dictoffset__")? != 0
            || size_attr(&ty, "__weakrefoffset__")? != 0
        {
            return Err(PyValueError::new_err(format!(
                "{}: a slots class of {N} fields expected",
                ty.name()?
            )));
        }
        // SAFETY: `PyType_GenericAlloc` is `object.__new__`'s allocation (zeroed fields).
        let probe = unsafe {
            let raw = ffi::PyType_GenericAlloc(ty.as_ptr().cast(), 0);
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            Bound::from_owned_ptr(py, raw)
        };
        let mut offsets = [0; N];
        for (descr, offset) in descriptors.iter().zip(offsets.iter_mut()) {
            let descr = descr.bind(py);
            if !descr.hasattr("__set__")? {
                return Err(PyValueError::new_err("slot descriptors expected"));
            }
            descr.call_method1("__set__", (&probe, descr))?;
            let found: Vec<usize> = (head..basic)
                .step_by(word)
                // SAFETY: reads the probe's own words, within its basic size.
                .filter(|&at| unsafe { read(probe.as_ptr(), at) } == descr.as_ptr())
                .collect();
            match found[..] {
                [at] => *offset = at,
                _ => return Err(PyValueError::new_err("a slot descriptor's field not found")),
            }
        }
        Ok(SlotClass {
            ty: ty.unbind(),
            offsets,
        })
    }

    fn is_type_of(&self, obj: *mut ffi::PyObject) -> bool {
        // SAFETY: `obj` is a live object.
        unsafe { ffi::Py_TYPE(obj) == self.ty.as_ptr().cast() }
    }

    /// A new instance with `values` in its fields. `atomic`: the values are strings, ints, None,
    /// empty tuples or such instances, so the object can be part of no cycle and leaves the
    /// cyclic GC's lists (as CPython does for a tuple of atomic values).
    fn instance<'py>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; N],
        atomic: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: a zeroed instance of the class (what `object.__new__` makes); each field is
        // written once with a new reference, as the member descriptor would store it.
        unsafe {
            let raw = ffi::PyType_GenericAlloc(self.ty.as_ptr().cast(), 0);
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            for (value, &at) in values.into_iter().zip(self.offsets.iter()) {
                *field(raw, at) = value.into_ptr();
            }
            if atomic {
                ffi::PyObject_GC_UnTrack(raw.cast());
            }
            Ok(Bound::from_owned_ptr(py, raw))
        }
    }

    /// Field `i` of `obj` (an instance of this class), borrowed.
    ///
    /// # Safety
    /// `obj` is a live instance of this class.
    unsafe fn get(&self, obj: *mut ffi::PyObject, i: usize) -> *mut ffi::PyObject {
        read(obj, self.offsets[i])
    }

    /// Stores `value` in field `i` of `obj`, releasing what it held.
    ///
    /// # Safety
    /// `obj` is a live instance of this class that nothing but the caller can reach.
    unsafe fn set(&self, obj: *mut ffi::PyObject, i: usize, value: Bound<'_, PyAny>) {
        let slot = field(obj, self.offsets[i]);
        let old = *slot;
        if old == value.as_ptr() {
            return;
        }
        *slot = value.into_ptr();
        ffi::Py_XDECREF(old);
    }
}

/// # Safety
/// `at` is a field offset within `obj`'s basic size.
unsafe fn field(obj: *mut ffi::PyObject, at: usize) -> *mut *mut ffi::PyObject {
    obj.cast::<u8>().add(at).cast()
}

unsafe fn read(obj: *mut ffi::PyObject, at: usize) -> *mut ffi::PyObject {
    *field(obj, at)
}

/// Nothing but the one reference the caller counts holds `obj`.
fn alone(obj: &Py<PyAny>) -> bool {
    // SAFETY: reads the reference count of a live object (under the GIL).
    unsafe { ffi::Py_REFCNT(obj.as_ptr()) == 1 }
}

/// `StepOutput`, `Delta` and `ToolCallDelta` (see `SlotClass`), given once by `native.py`.
struct ValueTypes {
    step_output: SlotClass<3>,
    delta: SlotClass<5>,
    call: SlotClass<4>,
    empty: Py<PyString>,
}

// Field indices, in the classes' field order (`native.py` passes the descriptors in it).
const DELTAS: usize = 0;
const EVENTS: usize = 1;
const FINAL: usize = 2;
const TOOL_CALLS: usize = 2;

static VALUE_TYPES: PyOnceLock<ValueTypes> = PyOnceLock::new();

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
    let types = ValueTypes {
        step_output: SlotClass::bind(step_output, step_fields)?,
        delta: SlotClass::bind(delta, delta_fields)?,
        call: SlotClass::bind(call, call_fields)?,
        empty: PyString::intern(py, "").unbind(),
    };
    let _ = VALUE_TYPES.set(py, types);
    Ok(())
}

/// Takes a new object that can hold no cycle off the cyclic GC's lists.
fn untrack(obj: &Bound<'_, PyAny>) {
    // SAFETY: `obj` is a live GC object of a type with `Py_TPFLAGS_HAVE_GC` (instances of
    // Python classes and tuples); untracking an untracked object is a no-op.
    unsafe { ffi::PyObject_GC_UnTrack(obj.as_ptr().cast()) }
}

/// `StepOutput` values handed out, kept for reuse once nothing else holds them.
const OUTPUT_POOL: usize = 2;
/// `Delta` values likewise.
const POOL: usize = 4;
/// `Event` values likewise (a step has a few).
const EVENT_POOL: usize = 8;

/// What the sessions recycle (see the module's doc): one set per process, not per session, so an
/// idle session holds none of it, and a caller stepping many sessions in turn (the service)
/// recycles across them. Each pool's new entry replaces its oldest.
pub(crate) struct Recycle {
    outputs: [Option<Py<PyAny>>; OUTPUT_POOL],
    next_output: usize,
    deltas: [Option<Py<PyAny>>; POOL],
    next: usize,
    events: [Option<Py<PyAny>>; EVENT_POOL],
    next_event: usize,
}

/// The process's `Recycle`, taken with `try_lock` while a step's values are built (under the
/// GIL nothing else holds it, unless building them ran Python code — a finalizer — that stepped
/// a session: that step builds new values instead).
static RECYCLE: std::sync::Mutex<Recycle> = std::sync::Mutex::new(Recycle {
    outputs: [const { None }; OUTPUT_POOL],
    next_output: 0,
    deltas: [const { None }; POOL],
    next: 0,
    events: [const { None }; EVENT_POOL],
    next_event: 0,
});

/// The first of `pool` that nothing else holds and `ours` accepts.
fn free<'py>(
    py: Python<'py>,
    pool: &[Option<Py<PyAny>>],
    ours: impl Fn(*mut ffi::PyObject) -> bool,
) -> Option<Bound<'py, PyAny>> {
    pool.iter()
        .flatten()
        .find(|o| alone(o) && ours(o.as_ptr()))
        .map(|o| o.bind(py).clone())
}

impl Recycle {
    fn pool(&mut self, delta: &Bound<'_, PyAny>) {
        self.deltas[self.next] = Some(delta.clone().unbind());
        self.next = (self.next + 1) % POOL;
    }

    /// A pooled `Event` of `event_type` nothing else holds: the tuple's own pointer, its one
    /// reference the pool's (so `PyTuple_SetItem` may set its items).
    fn free_event(&self, event_type: &Py<PyType>) -> Option<*mut ffi::PyObject> {
        self.events
            .iter()
            .flatten()
            // SAFETY: reads the type of a live object.
            .find(|e| alone(e) && unsafe { ffi::Py_TYPE(e.as_ptr()) } == event_type.as_ptr().cast())
            .map(|e| e.as_ptr())
    }

    fn pool_event(&mut self, event: &Bound<'_, PyAny>) {
        self.events[self.next_event] = Some(event.clone().unbind());
        self.next_event = (self.next_event + 1) % EVENT_POOL;
    }

    /// A pooled `StepOutput` nothing else holds, taken in turn from the one after the last taken:
    /// whatever a caller left in one it dropped (a list holding anything, `final`) is released
    /// within `OUTPUT_POOL` steps.
    fn free_output<'py>(
        &mut self,
        py: Python<'py>,
        ours: impl Fn(*mut ffi::PyObject) -> bool,
    ) -> Option<Bound<'py, PyAny>> {
        for k in 0..OUTPUT_POOL {
            let at = (self.next_output + k) % OUTPUT_POOL;
            if let Some(output) = &self.outputs[at] {
                if alone(output) && ours(output.as_ptr()) {
                    self.next_output = (at + 1) % OUTPUT_POOL;
                    return Some(output.bind(py).clone());
                }
            }
        }
        None
    }

    fn pool_output(&mut self, output: &Bound<'_, PyAny>) {
        self.outputs[self.next_output] = Some(output.clone().unbind());
        self.next_output = (self.next_output + 1) % OUTPUT_POOL;
    }
}

impl ValueTypes {
    fn get(py: Python<'_>) -> PyResult<&ValueTypes> {
        VALUE_TYPES
            .get(py)
            .ok_or_else(|| PyRuntimeError::new_err("parsetier._core.bind_values was not called"))
    }

    fn text<'py>(&self, py: Python<'py>, text: &str) -> Bound<'py, PyAny> {
        if text.is_empty() {
            self.empty.bind(py).clone().into_any()
        } else {
            PyString::new(py, text).into_any()
        }
    }

    fn empty<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.empty.bind(py).clone().into_any()
    }

    /// A delta's `tool_calls`: a 1-tuple of a `ToolCallDelta`, the one `reuse` (a pooled delta
    /// nothing else holds) has when nothing else holds it either.
    fn call<'py>(
        &self,
        py: Python<'py>,
        out: &StepOut,
        d: &Delta,
        text: Bound<'py, PyAny>,
        reuse: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (id, name) = match d.head {
            Some((i, n)) => (
                self.text(py, out.delta_text(i)),
                self.text(py, out.delta_text(n)),
            ),
            None => (py.None().into_bound(py), py.None().into_bound(py)),
        };
        let index = d.index.into_pyobject(py)?.into_any();
        if let Some(delta) = reuse {
            // SAFETY: `delta` is a pooled `Delta` only the pool holds; its tuple and the call in
            // it are changed only when they too are held by nothing else.
            unsafe {
                let calls = self.delta.get(delta.as_ptr(), TOOL_CALLS);
                if ffi::PyTuple_CheckExact(calls) != 0
                    && ffi::Py_REFCNT(calls) == 1
                    && ffi::PyTuple_Size(calls) == 1
                {
                    let call = ffi::PyTuple_GetItem(calls, 0);
                    if self.call.is_type_of(call) && ffi::Py_REFCNT(call) == 1 {
                        for (i, value) in [index, text, id, name].into_iter().enumerate() {
                            self.call.set(call, i, value);
                        }
                        return Ok(Bound::from_borrowed_ptr(py, calls));
                    }
                }
            }
        }
        let call = self.call.instance(py, [index, text, id, name], true)?;
        let calls = PyTuple::new(py, [call])?.into_any();
        untrack(&calls);
        Ok(calls)
    }

    fn delta<'a, 'py>(
        &self,
        py: Python<'py>,
        out: &'a StepOut,
        d: &Delta,
        shared: &mut Texts<'a, 'py>,
        recycle: Option<&mut Recycle>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let none_tuple = || PyTuple::empty(py).into_any();
        let reuse = recycle
            .as_ref()
            .and_then(|r| free(py, &r.deltas, |d| self.delta.is_type_of(d)));
        let raw = out.delta_text(d.text);
        let text = self.text(py, raw);
        shared.keep(raw, &text);
        let (reasoning, content, calls) = match d.kind {
            DeltaKind::Reasoning => (text, self.empty(py), none_tuple()),
            DeltaKind::Content => (self.empty(py), text, none_tuple()),
            DeltaKind::Call => (
                self.empty(py),
                self.empty(py),
                self.call(py, out, d, text, reuse.as_ref())?,
            ),
        };
        let values = [reasoning, content, calls, none_tuple(), none_tuple()];
        if let Some(delta) = reuse {
            for (i, value) in values.into_iter().enumerate() {
                // SAFETY: a pooled `Delta` only the pool holds (`free_delta`).
                unsafe { self.delta.set(delta.as_ptr(), i, value) };
            }
            return Ok(delta);
        }
        let delta = self.delta.instance(py, values, true)?;
        if let Some(recycle) = recycle {
            recycle.pool(&delta);
        }
        Ok(delta)
    }

    /// A list of `n` items for a field of `output` (a recycled `StepOutput`): the list it holds
    /// when nothing else holds that and it has `n` items (each set to None, releasing what it
    /// held), else a new one. Its items are set with `PyList_SetItem` after.
    fn list<'py>(
        &self,
        py: Python<'py>,
        output: Option<&Bound<'py, PyAny>>,
        field: usize,
        n: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(output) = output {
            // SAFETY: `output` is a recycled `StepOutput` (`free`); the list is changed
            // only when it is a list nothing else holds.
            unsafe {
                let list = self.step_output.get(output.as_ptr(), field);
                if ffi::PyList_CheckExact(list) != 0
                    && ffi::Py_REFCNT(list) == 1
                    && ffi::PyList_Size(list) == n as ffi::Py_ssize_t
                {
                    for i in 0..n {
                        ffi::Py_IncRef(ffi::Py_None());
                        ffi::PyList_SetItem(list, i as ffi::Py_ssize_t, ffi::Py_None());
                    }
                    return Ok(Bound::from_borrowed_ptr(py, list));
                }
            }
        }
        // SAFETY: a new list of `n` empty items, filled by the caller before any Python code
        // sees it (a list with empty items is still safe to release).
        unsafe {
            let raw = ffi::PyList_New(n as ffi::Py_ssize_t);
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, raw))
        }
    }

    /// The step as a `StepOutput` (its `final` None). `events`: the session builds `Event`
    /// values (else the step's `events` is empty). An event whose text is a delta's (a content
    /// or argument fragment: nearly every event) shares that delta's `str`. `recycle`: reuse
    /// what the session handed out and nothing else holds (see the module's doc); None: all new.
    pub(crate) fn step<'py>(
        &self,
        py: Python<'py>,
        out: &StepOut,
        events: bool,
        mut recycle: Option<&mut Recycle>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let output = recycle
            .as_deref_mut()
            .and_then(|r| r.free_output(py, |o| self.step_output.is_type_of(o)));
        let mut shared = Texts::default();
        let deltas = self.list(py, output.as_ref(), DELTAS, out.deltas.len())?;
        for (i, d) in out.deltas.iter().enumerate() {
            let delta = self.delta(py, out, d, &mut shared, recycle.as_deref_mut())?;
            // SAFETY: `deltas` has `out.deltas.len()` items (`list`); this sets item `i`.
            unsafe { ffi::PyList_SetItem(deltas.as_ptr(), i as ffi::Py_ssize_t, delta.into_ptr()) };
        }
        let n_events = if events { out.events.len() } else { 0 };
        let event_values = self.list(py, output.as_ref(), EVENTS, n_events)?;
        if events {
            fill_events(py, &event_values, out, &shared, recycle.as_deref_mut())?;
        }
        let none = py.None().into_bound(py);
        match output {
            Some(output) => {
                for (i, value) in [(DELTAS, deltas), (EVENTS, event_values), (FINAL, none)] {
                    // SAFETY: a recycled `StepOutput` nothing else holds (`free`).
                    unsafe { self.step_output.set(output.as_ptr(), i, value) };
                }
                Ok(output)
            }
            None => {
                let output = self
                    .step_output
                    .instance(py, [deltas, event_values, none], false)?;
                if let Some(recycle) = recycle {
                    recycle.pool_output(&output);
                }
                Ok(output)
            }
        }
    }
}

/// The pending output of a session as a `StepOutput` (see `ValueTypes::step`).
/// `recycle`: from the process's `Recycle` when it is free (see `RECYCLE`); else all new.
pub(crate) fn step_output<'py>(
    py: Python<'py>,
    out: &StepOut,
    events: bool,
    recycle: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let types = ValueTypes::get(py)?;
    match RECYCLE.try_lock() {
        Ok(mut pools) if recycle => types.step(py, out, events, Some(&mut pools)),
        _ => types.step(py, out, events, None),
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

/// The step's events as `Event` values in `list` (as many items as events): tuples of the named
/// tuple's type, filled in place (what `tuple.__new__(Event, fields)` does, without a call into
/// Python per event); with `recycle`, a pooled one nothing else holds when there is one (its
/// items replaced, as `PyTuple_SetItem` allows a tuple of one reference).
fn fill_events<'py>(
    py: Python<'py>,
    list: &Bound<'py, PyAny>,
    out: &StepOut,
    shared: &Texts<'_, 'py>,
    mut recycle: Option<&mut Recycle>,
) -> PyResult<()> {
    let (event_type, kinds) = EVENT_TYPES
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("parsetier._core.bind_events was not called"))?;
    for (at, e) in out.events.iter().enumerate() {
        let fields: [Bound<'py, PyAny>; 5] = [
            kinds[e.kind as usize].bind(py).clone(),
            shared.get(py, out.event_text(e.text)),
            e.tool_index.into_pyobject(py)?.into_any(),
            e.tokens.into_pyobject(py)?.into_any(),
            PyString::new(py, out.event_text(e.call_id)).into_any(),
        ];
        let reuse = recycle.as_ref().and_then(|r| r.free_event(event_type));
        // SAFETY: a fresh tuple of the named tuple's type, or a pooled one only the pool holds
        // (`free_event`): a tuple subtype of refcount 1 with 5 items, each set as
        // PyTuple_SetItem allows (it steals each reference and releases the item it replaces).
        let tuple = unsafe {
            let raw = match reuse {
                Some(raw) => raw,
                None => ffi::PyType_GenericAlloc(event_type.as_ptr().cast(), 5),
            };
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            for (i, field) in fields.into_iter().enumerate() {
                ffi::PyTuple_SetItem(raw, i as ffi::Py_ssize_t, field.into_ptr());
            }
            if reuse.is_some() {
                Bound::from_borrowed_ptr(py, raw)
            } else {
                Bound::from_owned_ptr(py, raw)
            }
        };
        if reuse.is_none() {
            // An `Event` holds a kind, strings and ints: no cycle (see `SlotClass::instance`).
            untrack(&tuple);
            if let Some(recycle) = recycle.as_deref_mut() {
                recycle.pool_event(&tuple);
            }
        }
        // SAFETY: `list` is a list of `out.events.len()` items (`ValueTypes::list`).
        unsafe { ffi::PyList_SetItem(list.as_ptr(), at as ffi::Py_ssize_t, tuple.into_ptr()) };
    }
    Ok(())
}

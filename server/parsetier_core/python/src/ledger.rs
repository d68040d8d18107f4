//! `_core.Ledger`: the counters a streaming session's protocol keeps (messages, tokens, reply
//! sequence, output digest, what was sent), held natively so the packed `ParseBatch` call
//! (`batch.rs`) can update them with no Python. `parsetier.protocol.ledger.Ledger` is the same contract
//! in Python (the reference engine's); `SessionProtocol` reads and writes either through it.

use parsetier_engine::digest::{Digest, PieceKind};
use parsetier_engine::events::StepOut;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyAnyMethods, PySequence};

use crate::session::PySession;

#[pyclass(name = "Ledger", module = "parsetier._core")]
#[derive(Default)]
pub struct Ledger {
    #[pyo3(get, set)]
    pub client_messages: u64,
    #[pyo3(get, set)]
    pub tokens: u64,
    #[pyo3(get, set)]
    pub sequence: u64,
    #[pyo3(get, set)]
    pub deltas: u64,
    #[pyo3(get, set)]
    pub events: u64,
    #[pyo3(get, set)]
    pub server_messages: u64,
    pub(crate) digest: Digest,
    /// The native session the packed path may step for this ledger's protocol (`bind`): a
    /// parse-only session with no wire dialect; None leaves every item to Python.
    pub(crate) session: Option<Py<PySession>>,
    pub(crate) want_deltas: bool,
    pub(crate) want_events: bool,
}

impl Ledger {
    /// How many of a step's deltas and events its reply carries (what `Open.output` asked for).
    pub(crate) fn wanted(&self, out: &StepOut) -> (usize, usize) {
        let deltas = if self.want_deltas {
            out.deltas.len()
        } else {
            0
        };
        let events = if self.want_events {
            out.events.len()
        } else {
            0
        };
        (deltas, events)
    }

    /// A step's reply was produced: its sequence number.
    pub(crate) fn reply(&mut self, deltas: usize, events: usize) -> u64 {
        self.sequence += 1;
        self.deltas += deltas as u64;
        self.events += events as u64;
        self.server_messages += 1;
        self.sequence
    }
}

#[pymethods]
impl Ledger {
    #[new]
    fn new() -> Self {
        Ledger::default()
    }

    /// The output digest's value (`output_digest` of the replies).
    #[getter]
    fn digest(&self) -> u32 {
        self.digest.value
    }

    #[setter]
    fn set_digest(&mut self, value: u32) {
        self.digest.value = value;
    }

    /// The tag of the last piece digested, as `parsetier.digest` keeps it.
    #[getter]
    fn digest_kind(&self) -> String {
        self.digest.kind.tag()
    }

    #[setter]
    fn set_digest_kind(&mut self, tag: &str) -> PyResult<()> {
        self.digest.kind =
            PieceKind::of_tag(tag).ok_or_else(|| PyValueError::new_err("not a digest tag"))?;
        Ok(())
    }

    /// A client message carrying `tokens` token ids arrived: the session's tokens so far.
    fn count_message(&mut self, tokens: u64) -> u64 {
        self.client_messages += 1;
        self.tokens += tokens;
        self.tokens
    }

    /// A reply carrying `deltas` deltas and `events` events goes out: its sequence number.
    fn count_reply(&mut self, deltas: usize, events: usize) -> u64 {
        self.reply(deltas, events)
    }

    /// Account for `deltas` (`messages.Delta` values, in order) in the digest: its new value.
    fn digest_deltas(&mut self, deltas: &Bound<'_, PySequence>) -> PyResult<u32> {
        let d = &mut self.digest;
        for delta in deltas.try_iter()? {
            let delta = delta?;
            d.piece(
                PieceKind::Reasoning,
                &delta.getattr("reasoning")?.extract::<String>()?,
            );
            d.piece(
                PieceKind::Content,
                &delta.getattr("content")?.extract::<String>()?,
            );
            for call in delta.getattr("tool_calls")?.try_iter()? {
                let call = call?;
                let index: u32 = call.getattr("index")?.extract()?;
                for (kind, field) in [
                    (PieceKind::CallId(index), "id"),
                    (PieceKind::CallName(index), "name"),
                    (PieceKind::CallArguments(index), "arguments"),
                ] {
                    let text: Option<String> = call.getattr(field)?.extract()?;
                    d.piece(kind, text.as_deref().unwrap_or(""));
                }
            }
        }
        Ok(d.value)
    }

    /// The session's end (its finish reason) in the digest: its new value.
    fn digest_finish(&mut self, reason: &str) -> u32 {
        self.digest.finish(reason);
        self.digest.value
    }

    /// Let the packed path step `session` (a `_core.Session`) for this ledger's protocol:
    /// `want_deltas` / `want_events` are what the session's replies carry (`Open.output`).
    fn bind(&mut self, session: Py<PySession>, want_deltas: bool, want_events: bool) {
        self.session = Some(session);
        self.want_deltas = want_deltas;
        self.want_events = want_events;
    }

    /// The session left STREAMING (`SessionProtocol._leave`): the packed path steps it no more.
    fn unbind(&mut self) {
        self.session = None;
    }
}

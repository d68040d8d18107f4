//! `_core.Ledger`: the counters a streaming session's protocol keeps (messages, tokens, reply
//! sequence, output digest, what was sent), held natively so the core can step the session's
//! plain messages with no Python. `parsetier.protocol.ledger.PyLedger` is the same contract in
//! Python (the reference engine's); `SessionProtocol` reads and writes either through it.
//!
//! The core's half of the protocol's plain path lives here, whole: `step` is the one plain step
//! of a session (checked, counted, fed, digested, its reply taken), which both the `Parse`
//! stream's `step_reply` and the packed `ParseBatch` items (`PackedSteps.step`) call with their
//! own writer; `finish` is the one plain Finish. Which messages are plain is Python's decision
//! (`parsetier.protocol.rules`): a session's ledger is bound to its native session (`bind`) only
//! while the protocol lets the core step it, and `step` declines (nothing done) whatever it
//! cannot take by the same rules. `count_message` is the one place the core counts a message.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use parsetier_engine::digest::{Digest, PieceKind};
use parsetier_engine::events::StepOut;
use parsetier_engine::parser::{Final, FinishReason};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyAnyMethods, PySequence};

use crate::session::PySession;

/// `parsetier.protocol.rules.FEED_PIECE`, bound by Python at import (`bind_rules`): the most ids
/// the core steps in one call; a longer message is Python's, fed in pieces (its thread hands the
/// GIL back between them). 0 until bound: every step is declined.
static FEED_PIECE: AtomicUsize = AtomicUsize::new(0);

/// Bind the protocol's rules the core applies (`parsetier.protocol.rules`, once at import).
#[pyfunction]
pub fn bind_rules(feed_piece: usize) {
    FEED_PIECE.store(feed_piece, Ordering::Relaxed);
}

/// What a step's reply carries once the ledger has taken it: `sequence`, and how many of the
/// step's deltas and events the client asked for (all or none of each).
pub(crate) struct Taken {
    pub sequence: u64,
    pub deltas: usize,
    pub events: usize,
}

/// What `step` (or `finish`) did with a message.
pub(crate) enum Stepped<R> {
    /// Left to Python, nothing done: an unbound ledger, an id the session does not take, the
    /// token limit, a long message, a finished session.
    Declined,
    /// Counted, stepped and answered: the writer's value.
    Done(R),
    /// The session panicked in the core (a server bug): the message counted, the session's
    /// state unknown; the caller ends it (INTERNAL).
    Failed,
}

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

    /// A client message carrying `tokens` token ids arrived: the session's tokens so far. The
    /// one place the core counts a message (`count_tokens`: the tokens of one counted already).
    pub(crate) fn count(&mut self, tokens: u64) -> u64 {
        self.client_messages += 1;
        self.tokens += tokens;
        self.tokens
    }

    /// A reply carrying `deltas` deltas and `events` events goes out: its sequence number.
    pub(crate) fn reply(&mut self, deltas: usize, events: usize) -> u64 {
        self.sequence += 1;
        self.deltas += deltas as u64;
        self.events += events as u64;
        self.server_messages += 1;
        self.sequence
    }

    /// Account for a step's output (digest, reply counts), as `SessionProtocol._taken` does:
    /// what its reply carries, or None when nothing is to be sent.
    fn take(&mut self, out: &StepOut) -> Option<Taken> {
        if !out.deltas.is_empty() {
            self.digest.step(out);
        }
        let (deltas, events) = self.wanted(out);
        if deltas == 0 && events == 0 {
            return None;
        }
        let sequence = self.reply(deltas, events);
        Some(Taken {
            sequence,
            deltas,
            events,
        })
    }
}

/// The plain step of `ledger`'s protocol, `ids`: counted (`counted`: the caller counted the
/// message already, an opening message: its tokens only), fed to the bound session with `out` as
/// scratch (empty, and emptied again), digested, and its reply taken; `write` then makes the
/// caller's reply of it (`None` taken: nothing to send). Declined, nothing done, for whatever
/// Python applies by its own rules.
#[inline]
pub(crate) fn step<R>(
    py: Python<'_>,
    ledger: &Bound<'_, Ledger>,
    ids: &[u32],
    max_tokens: u64,
    counted: bool,
    out: &mut StepOut,
    write: impl FnOnce(&Ledger, &StepOut, Option<Taken>) -> R,
) -> PyResult<Stepped<R>> {
    let mut ledger = ledger.try_borrow_mut()?;
    let Some(session) = ledger.session.as_ref().map(|s| s.bind(py).clone()) else {
        return Ok(Stepped::Declined);
    };
    let mut session = session.try_borrow_mut()?;
    let n = ids.len();
    if n > FEED_PIECE.load(Ordering::Relaxed)
        || !session.accepts(ids)
        || ledger.tokens + n as u64 > max_tokens
    {
        return Ok(Stepped::Declined);
    }
    let ledger = &mut *ledger;
    if counted {
        ledger.count_tokens(n as u64);
    } else {
        ledger.count(n as u64);
    }
    let stepped = catch_unwind(AssertUnwindSafe(|| {
        session.step_into(ids, out, |out| {
            let taken = ledger.take(out);
            write(ledger, out, taken)
        })
    }));
    Ok(stepped.map_or(Stepped::Failed, Stepped::Done))
}

/// The plain Finish of `ledger`'s protocol: counted, the bound session finished with `reason`
/// (no held text, no stop text), its last output and its end digested, and its reply (always
/// sent: it carries the final result) taken; `write` makes the caller's reply of it. Declined
/// for an unbound ledger or a finished session.
pub(crate) fn finish<R>(
    py: Python<'_>,
    ledger: &Bound<'_, Ledger>,
    reason: FinishReason,
    write: impl FnOnce(&Ledger, &StepOut, &Final, Taken) -> R,
) -> PyResult<Stepped<R>> {
    let mut ledger = ledger.try_borrow_mut()?;
    let Some(session) = ledger.session.as_ref().map(|s| s.bind(py).clone()) else {
        return Ok(Stepped::Declined);
    };
    let mut session = session.try_borrow_mut()?;
    let ledger = &mut *ledger;
    let finished = catch_unwind(AssertUnwindSafe(|| {
        session.finish_raw(reason, |out, last| {
            ledger.count(0);
            if !out.deltas.is_empty() {
                ledger.digest.step(out);
            }
            ledger.digest.finish(last.finish_reason);
            let (deltas, events) = ledger.wanted(out);
            let sequence = ledger.reply(deltas, events);
            let taken = Taken {
                sequence,
                deltas,
                events,
            };
            write(ledger, out, last, taken)
        })
    }));
    Ok(match finished {
        Ok(Some(r)) => Stepped::Done(r),
        Ok(None) => Stepped::Declined,
        Err(_) => Stepped::Failed,
    })
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

    /// The tag of the last piece digested, as `parsetier.engine.digest` keeps it.
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
        self.count(tokens)
    }

    /// `tokens` more token ids of a message counted already: the session's tokens so far.
    fn count_tokens(&mut self, tokens: u64) -> u64 {
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

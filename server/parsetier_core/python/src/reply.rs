//! A step's reply written as protobuf bytes by the core: one writer for the `Parse` stream's
//! `ParseResponse` (`step_reply`) and the packed `ParseBatch` path's `SessionOutput` (`batch.rs`),
//! whose fields are the same ones shifted by one (the `key` comes first).
//!
//! `step_reply` is the plain path of `SessionProtocol.receive_serialized`: a plain message of a
//! session bound to its ledger (`Ledger.bind`) is counted, stepped and answered in one call, with
//! no Python value built for its output. It declines (None) whatever Python must apply by its own
//! rules: an unbound ledger, an id the session does not take, the token limit, a long message.

use std::panic::{catch_unwind, AssertUnwindSafe};

use parsetier_engine::events::{DeltaKind, EventKind, StepOut};
use parsetier_engine::parser::{Final, FinishReason};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::ledger::Ledger;

/// `protocol.FEED_PIECE`: a longer message is fed in pieces by Python (its thread hands the GIL
/// back between them).
pub(crate) const FEED_PIECE: usize = 8192;

/// Bytes a reply's buffers start with: a step's reply, and most final results, fit without
/// growing them (each growth is an allocation and a copy).
const REPLY_CAPACITY: usize = 256;

/// Field numbers of a reply message: `ParseResponse`'s, or `SessionOutput`'s (one more each).
#[derive(Clone, Copy)]
pub(crate) struct Fields(u32);

/// `ParseResponse`: sequence 1, client_messages 2, deltas 3, events 4, output_digest 7.
pub(crate) const PARSE_RESPONSE: Fields = Fields(0);
/// `SessionOutput`: key 1, sequence 2, client_messages 3, deltas 4, events 5, output_digest 8.
pub(crate) const SESSION_OUTPUT: Fields = Fields(1);

/// What a step's reply carries once the ledger has taken it: `sequence`, and how many of the
/// step's deltas and events the client asked for (all or none of each).
pub(crate) struct Taken {
    pub sequence: u64,
    pub deltas: usize,
    pub events: usize,
}

/// Account for a step in the ledger (digest, reply counts), as `SessionProtocol.take_ids` does:
/// what its reply carries, or None when nothing is to be sent.
pub(crate) fn take(ledger: &mut Ledger, out: &StepOut) -> Option<Taken> {
    if !out.deltas.is_empty() {
        ledger.digest.step(out);
    }
    let (deltas, events) = ledger.wanted(out);
    if deltas == 0 && events == 0 {
        return None;
    }
    let sequence = ledger.reply(deltas, events);
    Some(Taken {
        sequence,
        deltas,
        events,
    })
}

/// Append a reply's fields (all but a `SessionOutput`'s key) to `s`; `m` is scratch.
pub(crate) fn write(
    s: &mut Vec<u8>,
    m: &mut Vec<u8>,
    f: Fields,
    t: &Taken,
    client_messages: u64,
    digest: u32,
    out: &StepOut,
) {
    let n = f.0;
    varint_field(s, 1 + n, t.sequence);
    varint_field(s, 2 + n, client_messages);
    if t.deltas > 0 {
        for d in &out.deltas {
            m.clear();
            let text = out.delta_text(d.text);
            match d.kind {
                DeltaKind::Reasoning => string_field(m, 1, text),
                DeltaKind::Content => string_field(m, 2, text),
                DeltaKind::Call => {
                    let mut call = Vec::new();
                    varint_field(&mut call, 1, d.index as u64);
                    if let Some((id, name)) = d.head {
                        string_field(&mut call, 2, out.delta_text(id));
                        string_field(&mut call, 3, out.delta_text(name));
                    }
                    string_field(&mut call, 4, text);
                    bytes_field(m, 3, &call);
                }
            }
            bytes_field(s, 3 + n, m);
        }
    }
    if t.events > 0 {
        for e in &out.events {
            m.clear();
            varint_field(m, 1, e.kind as u64 + 1);
            // A TOOL_CALL_END's text (the call as written) stays in the engine (convert.py).
            // Singular strings, left out when empty as protobuf writes them (byte-identical).
            if e.kind != EventKind::ToolCallEnd {
                text_field(m, 2, out.event_text(e.text));
            }
            // int32: a negative value is its 64-bit two's complement, as protobuf writes it.
            varint_field(m, 3, e.tool_index as i64 as u64);
            varint_field(m, 4, e.tokens as u64);
            text_field(m, 5, out.event_text(e.call_id));
            bytes_field(s, 4 + n, m);
        }
    }
    if digest != 0 {
        tag(s, 7 + n, 5);
        s.extend_from_slice(&digest.to_le_bytes());
    }
}

/// The plain message of `ledger`'s protocol, `ids` (a sequence of ints), stepped and answered:
/// the `ParseResponse` bytes to send — with `key`, a `ParseBatchResponse`'s holding that
/// session's `SessionOutput` — empty when nothing is to be sent; None when it is left to Python
/// (nothing done). `counted`: the caller counted the message already (an opening message,
/// counted before its Open was applied), so the step counts its tokens only and a decline
/// leaves nothing to undo. A panic in the core raises `RuntimeError` (a server bug).
#[pyfunction]
#[pyo3(signature = (ledger, ids, max_tokens, key=None, counted=false))]
pub fn step_reply<'py>(
    py: Python<'py>,
    ledger: &Bound<'py, PyAny>,
    ids: &Bound<'py, PyAny>,
    max_tokens: u64,
    key: Option<&str>,
    counted: bool,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let Ok(ledger) = ledger.cast::<Ledger>() else {
        return Ok(None);
    };
    let Ok(ids) = ids.extract::<Vec<u32>>() else {
        return Ok(None); // a negative or huge id: Python's checks name it
    };
    let mut ledger = ledger.try_borrow_mut()?;
    let Some(session) = ledger.session.as_ref().map(|s| s.bind(py).clone()) else {
        return Ok(None);
    };
    let mut session = session.try_borrow_mut()?;
    if ids.len() > FEED_PIECE
        || !session.accepts(&ids)
        || ledger.tokens + ids.len() as u64 > max_tokens
    {
        return Ok(None);
    }
    if !counted {
        ledger.client_messages += 1;
    }
    ledger.tokens += ids.len() as u64;
    let ledger = &mut *ledger;
    let written = catch_unwind(AssertUnwindSafe(|| {
        session.step_raw(&ids, |out| {
            let mut s = Vec::with_capacity(REPLY_CAPACITY);
            if let Some(t) = take(ledger, out) {
                let mut m = Vec::with_capacity(REPLY_CAPACITY);
                let digest = ledger.digest.value;
                let f = if let Some(key) = key {
                    string_field(&mut s, 1, key);
                    SESSION_OUTPUT
                } else {
                    PARSE_RESPONSE
                };
                write(&mut s, &mut m, f, &t, ledger.client_messages, digest, out);
                if key.is_some() {
                    let mut batch = Vec::with_capacity(s.len() + 4);
                    bytes_field(&mut batch, 2, &s);
                    return batch;
                }
            }
            s
        })
    }));
    match written {
        Ok(s) => Ok(Some(PyBytes::new(py, &s))),
        Err(_) => Err(PyRuntimeError::new_err(
            "the native session failed in a step",
        )),
    }
}

/// The plain Finish of `ledger`'s protocol (`SessionProtocol.plain_finish`), answered by the
/// core: the message counted, the session finished with `reason` (`stop`, `length` or `abort`),
/// its last output digested and the reply written with its `Final`, as `_apply` and `write` would.
/// Returns the reply's bytes — a `ParseResponse`, or with `key` a `ParseBatchResponse` holding
/// that session's `SessionOutput` — and the final result's finish reason; None when it is left
/// to Python (nothing done): an unbound ledger, a finished session, another reason. A panic in
/// the core raises `RuntimeError` (a server bug).
#[pyfunction]
#[pyo3(signature = (ledger, reason, key=None))]
pub fn finish_reply<'py>(
    py: Python<'py>,
    ledger: &Bound<'py, PyAny>,
    reason: &str,
    key: Option<&str>,
) -> PyResult<Option<(Bound<'py, PyBytes>, &'static str)>> {
    let Ok(ledger) = ledger.cast::<Ledger>() else {
        return Ok(None);
    };
    let Some(reason) = FinishReason::parse(reason) else {
        return Ok(None);
    };
    let mut ledger = ledger.try_borrow_mut()?;
    let Some(session) = ledger.session.as_ref().map(|s| s.bind(py).clone()) else {
        return Ok(None);
    };
    let mut session = session.try_borrow_mut()?;
    let ledger = &mut *ledger;
    let written = catch_unwind(AssertUnwindSafe(|| {
        session.finish_raw(reason, |out, last| {
            ledger.client_messages += 1;
            if !out.deltas.is_empty() {
                ledger.digest.step(out);
            }
            ledger.digest.finish(last.finish_reason);
            // A reply with the final result is always sent (`SessionProtocol._taken`).
            let (deltas, events) = ledger.wanted(out);
            let t = Taken {
                sequence: ledger.reply(deltas, events),
                deltas,
                events,
            };
            let mut s = Vec::with_capacity(REPLY_CAPACITY);
            let mut m = Vec::with_capacity(REPLY_CAPACITY);
            let f = if let Some(key) = key {
                string_field(&mut s, 1, key);
                SESSION_OUTPUT
            } else {
                PARSE_RESPONSE
            };
            // `write`'s fields in field order: the final result (5 + n) goes before the digest.
            let digest = ledger.digest.value;
            write(&mut s, &mut m, f, &t, ledger.client_messages, 0, out);
            m.clear();
            write_final(&mut m, last);
            bytes_field(&mut s, 5 + f.0, &m);
            if digest != 0 {
                tag(&mut s, 7 + f.0, 5);
                s.extend_from_slice(&digest.to_le_bytes());
            }
            if key.is_none() {
                return (s, last.finish_reason);
            }
            let mut batch = Vec::with_capacity(s.len() + 4);
            bytes_field(&mut batch, 2, &s);
            (batch, last.finish_reason)
        })
    }));
    match written {
        Ok(Some((s, reason))) => Ok(Some((PyBytes::new(py, &s), reason))),
        Ok(None) => Ok(None),
        Err(_) => Err(PyRuntimeError::new_err(
            "the native session failed at its finish",
        )),
    }
}

/// A `Final` with no token ids, logprobs or wire bytes, as `convert.fill_final` writes it: the
/// usage and the message always present, empty strings left out.
fn write_final(m: &mut Vec<u8>, last: &Final) {
    let reason = match last.finish_reason {
        "stop" => 1,
        "length" => 2,
        "abort" => 3,
        _ => 4, // tool_calls
    };
    varint_field(m, 1, reason);
    let mut usage = Vec::new();
    varint_field(&mut usage, 1, last.completion_tokens);
    varint_field(&mut usage, 2, last.reasoning_tokens);
    bytes_field(m, 2, &usage);
    let mut message = Vec::new();
    text_field(&mut message, 1, &last.content);
    text_field(&mut message, 2, &last.reasoning);
    let mut call = Vec::new();
    for (id, name, arguments) in &last.calls {
        call.clear();
        text_field(&mut call, 1, id);
        text_field(&mut call, 2, name);
        text_field(&mut call, 3, arguments);
        bytes_field(&mut message, 3, &call);
    }
    bytes_field(m, 3, &message);
}

/// A singular string field, omitted when empty (proto3).
fn text_field(buf: &mut Vec<u8>, field: u32, text: &str) {
    if !text.is_empty() {
        string_field(buf, field, text);
    }
}

pub(crate) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub(crate) fn tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, ((field << 3) | wire) as u64);
}

/// A varint field, omitted when 0 (proto3).
pub(crate) fn varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        tag(buf, field, 0);
        varint(buf, v);
    }
}

/// A length-delimited field, written even when empty (a repeated element, a message).
pub(crate) fn bytes_field(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(buf, field, 2);
    varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

/// A string field, written even when empty (a repeated element; an empty string in a delta reads
/// back as the default).
pub(crate) fn string_field(buf: &mut Vec<u8>, field: u32, text: &str) {
    bytes_field(buf, field, text.as_bytes());
}

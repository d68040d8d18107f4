//! A step's reply written as protobuf bytes by the core: one writer for the `Parse` stream's
//! `ParseResponse` (`step_reply`) and the packed `ParseBatch` path's `SessionOutput` (`batch.rs`),
//! whose fields are the same ones shifted by one (the `key` comes first).
//!
//! `step_reply` is the plain path of `SessionProtocol.receive_serialized`: a plain message of a
//! session bound to its ledger (`Ledger.bind`) is counted, stepped and answered in one call
//! (`ledger::step`, the one plain step), with no Python value built for its output. It declines
//! (None) whatever Python must apply by its own rules.

use parsetier_engine::events::{DeltaKind, EventKind, StepOut};
use parsetier_engine::parser::{Final, FinishReason};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::ledger::{self, Ledger, Stepped, Taken};
use crate::session::PySession;

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

/// The plain message of `ledger`'s protocol, `ids` (a sequence of ints), stepped and answered
/// (`ledger::step`): the `ParseResponse` bytes to send — with `key`, a `ParseBatchResponse`'s
/// holding that session's `SessionOutput` — empty when nothing is to be sent; None when it is
/// left to Python (nothing done). `counted`: the caller counted the message already (an opening
/// message, counted before its Open was applied), so the step counts its tokens only and a
/// decline leaves nothing to undo. A panic in the core raises `RuntimeError` (a server bug).
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
    let mut out = PySession::take_out();
    let stepped = ledger::step(
        py,
        ledger,
        &ids,
        max_tokens,
        counted,
        &mut out,
        |l, out, t| {
            let mut s = Vec::with_capacity(REPLY_CAPACITY);
            let Some(t) = t else {
                return s;
            };
            let mut m = Vec::with_capacity(REPLY_CAPACITY);
            let f = if let Some(key) = key {
                string_field(&mut s, 1, key);
                SESSION_OUTPUT
            } else {
                PARSE_RESPONSE
            };
            write(
                &mut s,
                &mut m,
                f,
                &t,
                l.client_messages,
                l.digest.value,
                out,
            );
            if key.is_none() {
                return s;
            }
            let mut batch = Vec::with_capacity(s.len() + 4);
            bytes_field(&mut batch, 2, &s);
            batch
        },
    );
    match stepped {
        Ok(Stepped::Done(s)) => {
            PySession::give_back_out(out);
            Ok(Some(PyBytes::new(py, &s)))
        }
        Ok(Stepped::Declined) => {
            PySession::give_back_out(out);
            Ok(None)
        }
        // A step that panicked may have left the scratch half written: it is dropped.
        Ok(Stepped::Failed) => Err(PyRuntimeError::new_err(
            "the native session failed in a step",
        )),
        Err(e) => Err(e),
    }
}

/// The plain Finish of `ledger`'s protocol (`SessionProtocol.finish_serialized`), answered by
/// the core (`ledger::finish`): the message counted, the session finished with `reason` (`stop`,
/// `length` or `abort`), its last output digested and the reply written with its `Final`, as
/// `_apply` and `write` would. Returns the reply's bytes — a `ParseResponse`, or with `key` a
/// `ParseBatchResponse` holding that session's `SessionOutput` — and the final result's finish
/// reason; None when it is left to Python (nothing done): an unbound ledger, a finished session,
/// another reason. A panic in the core raises `RuntimeError` (a server bug).
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
    let finished = ledger::finish(py, ledger, reason, |l, out, last, t| {
        let mut s = Vec::with_capacity(REPLY_CAPACITY);
        let mut m = Vec::with_capacity(REPLY_CAPACITY);
        let f = if let Some(key) = key {
            string_field(&mut s, 1, key);
            SESSION_OUTPUT
        } else {
            PARSE_RESPONSE
        };
        // `write`'s fields in field order: the final result (5 + n) goes before the digest.
        let digest = l.digest.value;
        write(&mut s, &mut m, f, &t, l.client_messages, 0, out);
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
    })?;
    match finished {
        Stepped::Done((s, reason)) => Ok(Some((PyBytes::new(py, &s), reason))),
        Stepped::Declined => Ok(None),
        Stepped::Failed => Err(PyRuntimeError::new_err(
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

//! A step's reply written as protobuf bytes by the core: one writer for the `Parse` stream's
//! `ParseResponse` (`step_reply`) and the packed `ParseBatch` path's `SessionOutput` (`batch.rs`),
//! whose fields are the same ones shifted by one (the `key` comes first). A step's fields are
//! written here field by field, with prost's encoding primitives, into buffers reused from step
//! to step: the generated messages (`pb`) own a `String` per text, and building them for every
//! step cost a fifth of the packed path's throughput (measured with `bench.servicebench.ab`).
//! The final result, once per session, is the generated `Final` (`final_of`).
//!
//! `step_reply` is the plain path of `SessionProtocol.receive_serialized`: a plain message of a
//! session bound to its ledger (`Ledger.bind`) is counted, stepped and answered in one call
//! (`ledger::step`, the one plain step), with no Python value built for its output. It declines
//! (None) whatever Python must apply by its own rules.

use parsetier_engine::events::{DeltaKind, EventKind, StepOut};
use parsetier_engine::parser::{Final, FinishReason};
use prost::encoding::{encode_key, encode_varint, WireType};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::ledger::{self, Ledger, Stepped, Taken};
use crate::pb;
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
    write_digest(s, f, digest);
}

/// The reply's `output_digest` (fixed32, left out when 0 as protobuf writes it).
fn write_digest(s: &mut Vec<u8>, f: Fields, digest: u32) {
    if digest != 0 {
        encode_key(7 + f.0, WireType::ThirtyTwoBit, s);
        s.extend_from_slice(&digest.to_le_bytes());
    }
}

/// `s`, a `SessionOutput` of `key` (its other fields written), as a `ParseBatchResponse`'s bytes.
fn in_batch(key: Option<&str>, s: Vec<u8>) -> Vec<u8> {
    if key.is_none() {
        return s;
    }
    let mut batch = Vec::with_capacity(s.len() + 4);
    bytes_field(&mut batch, 2, &s);
    batch
}

/// A new reply's buffer: with `key`, a `SessionOutput`'s, its key written.
fn begin(key: Option<&str>) -> (Vec<u8>, Fields) {
    let mut s = Vec::with_capacity(REPLY_CAPACITY);
    match key {
        Some(key) => {
            string_field(&mut s, 1, key);
            (s, SESSION_OUTPUT)
        }
        None => (s, PARSE_RESPONSE),
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
            let Some(t) = t else {
                return Vec::new();
            };
            let (mut s, f) = begin(key);
            let mut m = Vec::with_capacity(REPLY_CAPACITY);
            write(
                &mut s,
                &mut m,
                f,
                &t,
                l.client_messages,
                l.digest.value,
                out,
            );
            in_batch(key, s)
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
        let (mut s, f) = begin(key);
        let mut m = Vec::with_capacity(REPLY_CAPACITY);
        // `write`'s fields in field order: the final result (5 + n) goes before the digest.
        write(&mut s, &mut m, f, &t, l.client_messages, 0, out);
        prost::encoding::message::encode(5 + f.0, &final_of(last), &mut s);
        write_digest(&mut s, f, l.digest.value);
        (in_batch(key, s), last.finish_reason)
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
/// usage and the message always present.
fn final_of(last: &Final) -> pb::Final {
    let reason = match last.finish_reason {
        "stop" => pb::FinishReason::Stop,
        "length" => pb::FinishReason::Length,
        "abort" => pb::FinishReason::Abort,
        _ => pb::FinishReason::ToolCalls,
    };
    pb::Final {
        finish_reason: reason as i32,
        usage: Some(pb::Usage {
            completion_tokens: last.completion_tokens as u32,
            reasoning_tokens: last.reasoning_tokens as u32,
        }),
        message: Some(pb::AssistantMessage {
            content: last.content.clone(),
            reasoning: last.reasoning.clone(),
            tool_calls: last
                .calls
                .iter()
                .map(|(id, name, arguments)| pb::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                })
                .collect(),
        }),
        ..Default::default()
    }
}

/// A singular string field, omitted when empty (proto3).
fn text_field(buf: &mut Vec<u8>, field: u32, text: &str) {
    if !text.is_empty() {
        string_field(buf, field, text);
    }
}

/// A varint field, omitted when 0 (proto3).
fn varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        encode_key(field, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

/// A length-delimited field, written even when empty (a repeated element, a message).
pub(crate) fn bytes_field(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    encode_key(field, WireType::LengthDelimited, buf);
    encode_varint(data.len() as u64, buf);
    buf.extend_from_slice(data);
}

/// A string field, written even when empty (a repeated element; an empty string in a delta reads
/// back as the default).
pub(crate) fn string_field(buf: &mut Vec<u8>, field: u32, text: &str) {
    bytes_field(buf, field, text.as_bytes());
}

//! Wire dialects' per-step streaming bytes, natively (`parsetier/engine/wire/`, the reference):
//! OpenAI chat chunks, Anthropic Messages events and OpenAI Responses events of a streamed
//! session, byte-identical to the Python renderers. A renderer is fed every delta of its session
//! in order (`step`), then the last deltas and the final values (`finish`), as the Python ones.
//!
//! Non-streamed bodies and the completions dialect stay in Python (a body is rendered once per
//! session; completion sessions run on the reference engine). Logprobs arrive as the JSON the
//! Python renderer writes for them (`Logprob`): they come only on the annotated path, where
//! Python builds the values anyway.

mod anthropic;
mod chat;
mod responses;

use blake2::digest::consts::U12;
use blake2::digest::FixedOutput;
use blake2::digest::{KeyInit, Update};
use blake2::Blake2bMac;

use crate::events::{Delta, DeltaKind, StepOut};

/// The request-level values a dialect's events hold (`WireRequest`).
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub response_id: String,
    pub model: String,
    pub created: i64,
    pub include_usage: bool,
    pub prompt_tokens: u64,
    pub choice_index: i64,
}

/// One `ToolCallDelta`: `id` on the call's first fragment only; `name` "" when None.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    pub index: i64,
    pub id: Option<&'a str>,
    pub name: &'a str,
    pub arguments: &'a str,
}

/// One logprob entry as JSON: `chat` as `wire_json.chat_logprob` writes it (chat chunks,
/// Responses' parts), `delta` as `openai_responses.delta_logprob` (Responses' delta events).
#[derive(Clone, Debug)]
pub struct Logprob {
    pub chat: String,
    pub delta: String,
}

/// One `Delta`, borrowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct WireDelta<'a> {
    pub reasoning: &'a str,
    pub content: &'a str,
    pub calls: &'a [Call<'a>],
    pub logprobs: &'a [Logprob],
    pub token_ids: &'a [u32],
}

/// What `finish` needs of the `Final` (and the stop string that ended the output).
#[derive(Clone, Copy, Debug)]
pub struct Finish<'a> {
    pub finish_reason: &'a str,
    pub completion_tokens: u64,
    pub reasoning_tokens: u64,
    pub stop_string: Option<&'a str>,
}

/// A streamed wire dialect (`Renderer` of `parsetier/engine/wire/`): each dialect renders one
/// reply's deltas (`step`) and the events that end its stream (`end`); feeding a native step and
/// the whole `finish` are the same for every dialect, so they are written once, here.
pub trait WireDialect: Send + Sync {
    /// `Renderer.step`: the bytes of one reply's deltas, appended to `out`.
    fn step(&mut self, deltas: &[WireDelta<'_>], out: &mut String);

    /// The events after the last deltas: the finish events in `last`, the closing bytes
    /// (`Final.wire`) in `closing`.
    fn end(&mut self, finish: &Finish<'_>, last: &mut String, closing: &mut String);

    /// `Renderer.finish` (streamed): the last deltas' bytes and the finish events in `last`, the
    /// closing bytes in `closing`.
    fn finish(
        &mut self,
        deltas: &[WireDelta<'_>],
        finish: &Finish<'_>,
        last: &mut String,
        closing: &mut String,
    ) {
        self.step(deltas, last);
        self.end(finish, last, closing);
    }

    /// The `sequence_number` the next event would carry (Responses; 0 for dialects without
    /// one): an error event that ends the stream goes on from it (`engine/wire/errors.py`).
    fn sequence(&self) -> u64 {
        0
    }

    /// `ResponsesRenderer.fail`: a streamed response ended by an error, rendered in `out` (the
    /// error event, and the failed response once it had started). Only Responses has one: the
    /// other dialects' errors are written whole by `engine/wire/errors.py`.
    fn fail(&mut self, _code: &str, _message: &str, _failed_code: &str, _out: &mut String) {}

    /// `step` over a native step's deltas (one kind each), without building Python values.
    fn step_native(&mut self, step: &StepOut, out: &mut String) {
        if let [d] = step.deltas.as_slice() {
            let call = native_call(step, d);
            let delta = native_delta(step, d, &call);
            self.step(std::slice::from_ref(&delta), out);
            return;
        }
        let calls: Vec<Call<'_>> = step.deltas.iter().map(|d| native_call(step, d)).collect();
        let deltas: Vec<WireDelta<'_>> = step
            .deltas
            .iter()
            .zip(&calls)
            .map(|(d, c)| native_delta(step, d, c))
            .collect();
        self.step(&deltas, out);
    }
}

/// The renderer of a dialect (`Open.wire`'s name); None for one rendered in Python only.
pub fn renderer(dialect: &str, request: Request) -> Option<Box<dyn WireDialect>> {
    Some(match dialect {
        "openai_chat" => Box::new(chat::Chat::new(request)),
        "anthropic_messages" => Box::new(anthropic::Anthropic::new(request)),
        "openai_responses" => Box::new(responses::Responses::new(request)),
        _ => return None,
    })
}

/// A native delta's `ToolCallDelta` (unused for a text delta).
fn native_call<'a>(step: &'a StepOut, d: &Delta) -> Call<'a> {
    let (id, name) = match d.head {
        Some((i, n)) => (Some(step.delta_text(i)), step.delta_text(n)),
        None => (None, ""),
    };
    Call {
        index: i64::from(d.index),
        id,
        name,
        arguments: step.delta_text(d.text),
    }
}

/// A native delta as a `WireDelta` (a call's fragment is `call`).
fn native_delta<'a>(step: &'a StepOut, d: &Delta, call: &'a Call<'a>) -> WireDelta<'a> {
    let text = step.delta_text(d.text);
    match d.kind {
        DeltaKind::Reasoning => WireDelta {
            reasoning: text,
            ..WireDelta::default()
        },
        DeltaKind::Content => WireDelta {
            content: text,
            ..WireDelta::default()
        },
        DeltaKind::Call => WireDelta {
            calls: std::slice::from_ref(call),
            ..WireDelta::default()
        },
    }
}

// ----------------------------------------------------------------------------------- JSON
/// `wire_json.string`: `s` as a JSON string, as `json.dumps(s, ensure_ascii=False)` writes it,
/// with U+0085, U+2028 and U+2029 escaped (no SSE reader splits an event inside a string).
pub fn push_string(out: &mut String, s: &str) {
    out.push('"');
    let b = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let (esc, len): (&str, usize) = match c {
            b'"' => ("\\\"", 1),
            b'\\' => ("\\\\", 1),
            b'\n' => ("\\n", 1),
            b'\r' => ("\\r", 1),
            b'\t' => ("\\t", 1),
            0x08 => ("\\b", 1),
            0x0c => ("\\f", 1),
            0..=0x1f => ("", 1),
            0xc2 if b.get(i + 1) == Some(&0x85) => ("\\u0085", 2),
            0xe2 if b.get(i + 1) == Some(&0x80) && b.get(i + 2) == Some(&0xa8) => ("\\u2028", 3),
            0xe2 if b.get(i + 1) == Some(&0x80) && b.get(i + 2) == Some(&0xa9) => ("\\u2029", 3),
            _ => {
                i += 1;
                continue;
            }
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            out.push_str(&format!("\\u{c:04x}"));
        } else {
            out.push_str(esc);
        }
        i += len;
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_string(&mut out, s);
    out
}

/// A number's decimal digits.
fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("digits"));
}

/// `json.dumps(list_of_ints)`.
fn push_ids(out: &mut String, ids: &[u32]) {
    out.push('[');
    for (n, id) in ids.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(&id.to_string());
    }
    out.push(']');
}

/// A JSON list of entries already written as JSON.
fn push_list<'a>(out: &mut String, entries: impl Iterator<Item = &'a str>) {
    out.push('[');
    for (n, e) in entries.enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(e);
    }
    out.push(']');
}

/// `sse_event(name, payload)` with the payload written by `body`.
fn push_event(out: &mut String, name: &str, body: impl FnOnce(&mut String)) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    body(out);
    out.push_str("\n\n");
}

// ----------------------------------------------------------------------------------- ids
const ID_KEY: &[u8] = b"parsetier.v1.tool-call-id";
const ID_PREFIX: &str = "chatcmpl-tool-";

fn keyed_hex(data: &[&[u8]]) -> String {
    let mut mac = <Blake2bMac<U12> as KeyInit>::new_from_slice(ID_KEY).expect("a short key");
    for part in data {
        mac.update(part);
    }
    let digest = mac.finalize_fixed();
    let mut out = String::with_capacity(24);
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// `call_ids.api_call_id`: a session's call id in a public API's convention.
pub fn api_call_id(call_id: &str, prefix: &str) -> String {
    if let Some(rest) = call_id.strip_prefix(ID_PREFIX) {
        return format!("{prefix}{rest}");
    }
    let api_alphabet = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
    if !call_id.is_empty() && call_id.bytes().all(api_alphabet) {
        return call_id.to_string();
    }
    format!("{prefix}{}", keyed_hex(&[call_id.as_bytes()]))
}

/// `call_ids.item_id`: the id of a response's `index`-th output item.
pub fn item_id(prefix: &str, response_id: &str, index: usize) -> String {
    let tail = format!("\x00{index}");
    format!(
        "{prefix}{}",
        keyed_hex(&[response_id.as_bytes(), tail.as_bytes()])
    )
}

/// `wire_json.usage_openai`.
fn push_usage_openai(out: &mut String, prompt: u64, completion: u64, reasoning: u64) {
    out.push_str(&format!(
        "{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{},\
         \"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning}}}}}",
        prompt + completion
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_python_writes_them() {
        let s = "a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f} é\u{85}\u{2028}\u{2029}\u{2027}東京🎉";
        assert_eq!(
            json_string(s),
            "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f} é\\u0085\\u2028\\u2029\u{2027}東京🎉\""
        );
    }

    #[test]
    fn ids_match_pythons() {
        // python: call_ids.api_call_id / item_id
        assert_eq!(api_call_id("chatcmpl-tool-abc", "call_"), "call_abc");
        assert_eq!(
            api_call_id("functions.get:0", "toolu_"),
            "toolu_240e83773dab57cfe0e95d59"
        );
        assert_eq!(api_call_id("ok_id-1", "toolu_"), "ok_id-1");
        assert_eq!(item_id("rs_", "resp_1", 0), "rs_f6ea5deffc2b8c3bbdb14bef");
    }
}

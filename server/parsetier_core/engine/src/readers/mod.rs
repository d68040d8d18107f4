//! Argument readers (`engine/readers/`): how a call's arguments become JSON text fragments.
//! The machine reaches them only through `Reader` (the Python `ArgumentReader` protocol:
//! `feed`, `status`, `rest`, `unclaimed`) and they answer only through a `Sink`.

pub mod elements;
pub mod envelope;
pub mod gemma;
pub mod json_args;
pub mod params;
pub mod python_calls;

use std::borrow::Cow;

pub use crate::json_scan::Status;

/// What a reader tells the machine: argument fragments, and (readers that find the calls
/// themselves) a call's start by name and its end.
pub trait Sink {
    fn args(&mut self, fragment: &str);
    /// `args(json_string_fragment(raw))`, escaped straight into the output (no allocation).
    fn args_escaped(&mut self, raw: &str);
    fn begin(&mut self, name: &str);
    /// The reader's held text `held` (sentinel form; a bare word before `{` the notation has no
    /// place for), read up to `text[at]`: the model's own text, shown at once, so out of the call
    /// ledger (an invalid call's text must not show it again).
    fn held_shown(&mut self, held: &str, text: &str, at: usize);
    /// The call ends at `text[at]` (the machine's ledger takes the call's text up to there).
    fn end(&mut self, text: &str, at: usize);
    /// `text[start..end]` is the model's own text (a value's lead-in that is no fence): content.
    fn shown(&mut self, text: &str, start: usize, end: usize);
}

pub enum Reader {
    Json(json_args::JsonArgsReader),
    Gemma(gemma::GemmaArgsReader),
    Envelope(envelope::EnvelopeReader),
    Python(python_calls::PythonCallsReader),
    Elements(elements::ElementArgsReader),
}

impl Reader {
    pub fn status(&self) -> Status {
        match self {
            Reader::Json(r) => r.status(),
            Reader::Gemma(r) => r.status,
            Reader::Envelope(r) => r.status,
            Reader::Python(r) => r.status,
            Reader::Elements(r) => r.status,
        }
    }

    /// Consume `text` from byte `pos`; return where reading stopped.
    pub fn feed(&mut self, text: &str, pos: usize, sink: &mut dyn Sink) -> usize {
        match self {
            Reader::Json(r) => r.feed(text, pos, sink),
            Reader::Gemma(r) => r.feed(text, pos, sink),
            Reader::Envelope(r) => r.feed(text, pos, sink),
            Reader::Python(r) => r.feed(text, pos, sink),
            Reader::Elements(r) => r.feed(text, pos, sink),
        }
    }

    /// Text of the state the reader did not take: what of it is shown (as content), "" for none.
    pub fn rest<'a>(&mut self, text: &'a str) -> Cow<'a, str> {
        match self {
            Reader::Envelope(r) => r.calls.rest(text),
            Reader::Python(r) => r.calls.rest(text),
            _ => Cow::Borrowed(""),
        }
    }

    /// Leaving the state: the raw text read when no call came of it. Answers once.
    pub fn unclaimed(&mut self) -> Option<String> {
        match self {
            Reader::Envelope(r) => r.calls.unclaimed(),
            Reader::Python(r) => r.calls.unclaimed(),
            _ => None,
        }
    }

    pub fn end_of_output(&mut self) {
        match self {
            Reader::Gemma(r) => r.end_of_output(),
            Reader::Elements(r) => r.ending = true,
            Reader::Python(r) => r.ending = true,
            _ => {}
        }
    }
}

/// `CallsReader`: until a call begins the text read is kept for passthrough; after one, text in
/// the block is the model's own, its whitespace held (`space`) until text proves it inner.
#[derive(Default)]
pub struct CallsState {
    pub raw: String,
    /// Calls begun; -1 once passed through.
    pub calls: i64,
    pub space: String,
}

impl CallsState {
    /// Trailing whitespace is held until more text proves it inner (the reference's `_space`).
    pub fn rest<'a>(&mut self, text: &'a str) -> Cow<'a, str> {
        if self.calls == 0 {
            self.raw.push_str(text);
            return Cow::Borrowed("");
        }
        let shown = crate::text::py_rstrip(text);
        if self.space.is_empty() {
            let held = &text[shown.len()..];
            self.space.push_str(held);
            return Cow::Borrowed(shown);
        }
        let mut all = std::mem::take(&mut self.space);
        all.push_str(text);
        let keep = crate::text::py_rstrip(&all).len();
        self.space.push_str(&all[keep..]);
        all.truncate(keep);
        Cow::Owned(all)
    }

    pub fn unclaimed(&mut self) -> Option<String> {
        if self.calls != 0 {
            return None;
        }
        self.calls = -1;
        Some(std::mem::take(&mut self.raw))
    }
}

//! JSON envelopes that carry the name with the arguments (`engine/readers/envelope.py`): Hermes,
//! Llama 3, Mistral's list, Apertus' keyed objects.
//!
//! The reference matches the short structural parts with partial regexes (the `regex` module);
//! here each is a small hand-written matcher with the same answer: a full match if the text has
//! one, else partial if more text could still make one, else none. Their whitespace is the
//! `regex` module's `\s` (Unicode White_Space, `char::is_whitespace`).

use super::{CallsState, Sink, Status};
use crate::json_scan::JsonValueScanner;
use crate::pyjson::{self, Value, MAX_DEPTH};
use crate::text::{find_sentinel, py_lstrip};

const HEAD_LIMIT: usize = 4096;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    ListQ,
    Head,
    Next,
    NameAfter,
    Args,
    ArgsFirst,
    Tail,
}

#[derive(Debug, PartialEq, Eq)]
enum M {
    No,
    Partial,
    Full {
        end: usize,
        name: (usize, usize),
        open: bool,
        sep: Option<u8>,
    },
}

fn full(end: usize) -> M {
    named(end, (0, 0))
}

/// A full match that read a call's name (its escaped span).
fn named(end: usize, name: (usize, usize)) -> M {
    M::Full {
        end,
        name,
        open: false,
        sep: None,
    }
}

/// A cursor over the structure text; each step fails with `M::Partial` when the text runs out
/// while still consistent, `M::No` on a mismatch.
struct Cur<'a> {
    s: &'a str,
    i: usize,
}

type Step = Result<(), M>;

impl Cur<'_> {
    fn ws(&mut self) {
        for (k, c) in self.s[self.i..].char_indices() {
            if !c.is_whitespace() {
                self.i += k;
                return;
            }
        }
        self.i = self.s.len();
    }

    fn lit(&mut self, l: &str) -> Step {
        let rest = &self.s.as_bytes()[self.i..];
        if rest.starts_with(l.as_bytes()) {
            self.i += l.len();
            Ok(())
        } else if rest.len() < l.len() && l.as_bytes().starts_with(rest) {
            Err(M::Partial)
        } else {
            Err(M::No)
        }
    }

    fn lit_any(&mut self, ls: &[&str]) -> Step {
        let mut partial = false;
        for l in ls {
            match self.lit(l) {
                Ok(()) => return Ok(()),
                Err(M::Partial) => partial = true,
                Err(_) => {}
            }
        }
        Err(if partial { M::Partial } else { M::No })
    }

    /// `\s*L\s*`: a literal with optional whitespace either side.
    fn spaced(&mut self, l: &str) -> Step {
        self.ws();
        self.lit(l)?;
        self.ws();
        Ok(())
    }

    /// One of `keys` (quoted), then `\s*:\s*`.
    fn key(&mut self, keys: &[&str]) -> Step {
        self.lit_any(keys)?;
        self.spaced(":")
    }

    /// A JSON string, quotes included; its body's span (`body`).
    fn string(&mut self) -> Result<(usize, usize), M> {
        self.lit("\"")?;
        let body = self.body()?;
        self.lit("\"")?;
        Ok(body)
    }

    /// A JSON string's body up to (not including) its closing quote: `(?:[^"\\]++|\\.)*+`.
    fn body(&mut self) -> Result<(usize, usize), M> {
        let b = self.s.as_bytes();
        let start = self.i;
        let mut i = self.i;
        loop {
            match memchr::memchr2(b'"', b'\\', &b[i..]) {
                None => return Err(M::Partial),
                Some(k) => {
                    i += k;
                    if b[i] == b'"' {
                        self.i = i;
                        return Ok((start, i));
                    }
                    // a backslash and any one character
                    match self.s[i + 1..].chars().next() {
                        None => return Err(M::Partial),
                        Some(c) => i += 1 + c.len_utf8(),
                    }
                }
            }
        }
    }

    /// `(?:(?:"type"\s*:\s*"function"|"(?:id|tool_call_id)"\s*:\s*"BODY")\s*,\s*)*`
    fn skipped(&mut self) -> Step {
        loop {
            let save = self.i;
            match self.skip_item() {
                Ok(()) => continue,
                Err(M::Partial) => return Err(M::Partial),
                Err(_) => {
                    self.i = save;
                    return Ok(());
                }
            }
        }
    }

    fn skip_item(&mut self) -> Step {
        let rest = &self.s[self.i..];
        let partial_of = |l: &str| rest.len() < l.len() && l.starts_with(rest);
        if rest.starts_with("\"type\"") {
            self.i += 6;
            self.spaced(":")?;
            self.lit("\"function\"")?;
        } else if rest.starts_with("\"id\"") || rest.starts_with("\"tool_call_id\"") {
            self.i += if rest.starts_with("\"id\"") { 4 } else { 14 };
            self.spaced(":")?;
            self.string()?;
        } else if partial_of("\"type\"") || partial_of("\"id\"") || partial_of("\"tool_call_id\"") {
            return Err(M::Partial);
        } else {
            return Err(M::No);
        }
        self.spaced(",")
    }

    /// `(?=[{"])`: arguments begin as a JSON object or a JSON string holding one.
    fn arguments_start(&self) -> Step {
        match self.s.as_bytes().get(self.i) {
            None => Err(M::Partial),
            Some(b'{' | b'"') => Ok(()),
            Some(_) => Err(M::No),
        }
    }

    /// `(?=\S)` after whitespace was skipped: a character must follow.
    fn some_char(&self) -> Step {
        if self.i >= self.s.len() {
            Err(M::Partial)
        } else {
            Ok(())
        }
    }
}

const NAME_KEYS: [&str; 2] = ["\"name\"", "\"tool_name\""];
const ARG_KEYS: [&str; 3] = ["\"arguments\"", "\"parameters\"", "\"args\""];

fn run(f: impl FnOnce(&mut Cur) -> Result<M, M>, s: &str) -> M {
    let mut c = Cur { s, i: 0 };
    match f(&mut c) {
        Ok(m) | Err(m) => m,
    }
}

fn head(s: &str) -> M {
    run(
        |c| {
            c.spaced("{")?;
            c.skipped()?;
            c.key(&NAME_KEYS)?;
            let name = c.string()?;
            c.spaced(",")?;
            c.skipped()?;
            c.key(&ARG_KEYS)?;
            c.arguments_start()?;
            Ok(named(c.i, name))
        },
        s,
    )
}

fn head_args_first(s: &str) -> M {
    run(
        |c| {
            c.spaced("{")?;
            c.skipped()?;
            c.key(&ARG_KEYS)?;
            c.arguments_start()?;
            Ok(full(c.i))
        },
        s,
    )
}

fn name_after(s: &str) -> M {
    run(
        |c| {
            c.spaced(",")?;
            c.key(&NAME_KEYS)?;
            let name = c.string()?;
            Ok(named(c.i, name))
        },
        s,
    )
}

fn list_open(s: &str) -> M {
    run(
        |c| {
            c.ws();
            c.some_char()?;
            if s.as_bytes()[c.i] == b'[' {
                Ok(M::Full {
                    end: c.i + 1,
                    name: (0, 0),
                    open: true,
                    sep: None,
                })
            } else {
                Ok(full(c.i))
            }
        },
        s,
    )
}

fn list_next(s: &str) -> M {
    run(
        |c| {
            c.ws();
            c.some_char()?;
            match s.as_bytes()[c.i] {
                b @ (b',' | b';' | b']') => Ok(M::Full {
                    end: c.i + 1,
                    name: (0, 0),
                    open: false,
                    sep: Some(b),
                }),
                b'{' => Ok(full(c.i)),
                _ => Err(M::No),
            }
        },
        s,
    )
}

fn head_keyed(s: &str) -> M {
    run(
        |c| {
            c.spaced("{")?;
            let name = c.string()?;
            c.spaced(":")?;
            c.some_char()?;
            if s.as_bytes()[c.i] == b'{' {
                Ok(named(c.i, name))
            } else {
                Err(M::No)
            }
        },
        s,
    )
}

/// `{"name": N, "arguments": {...}}` (or a list of them) → call start + streamed arguments.
pub struct EnvelopeReader {
    list: bool,
    keyed: bool,
    phase: Phase,
    bracketed: bool,
    head: String,
    scanner: JsonValueScanner,
    buffer: String,
    pub calls: CallsState,
    pub status: Status,
}

impl EnvelopeReader {
    pub fn new(allow_list: bool, keyed: bool) -> EnvelopeReader {
        EnvelopeReader {
            list: allow_list,
            keyed,
            phase: if allow_list {
                Phase::ListQ
            } else {
                Phase::Head
            },
            bracketed: false,
            head: String::new(),
            scanner: JsonValueScanner::new(),
            buffer: String::new(),
            calls: CallsState::default(),
            status: Status::Open,
        }
    }

    pub fn feed(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        let n = text.len();
        while pos < n && self.status == Status::Open {
            let (start, phase) = (pos, self.phase);
            let body = matches!(phase, Phase::Args | Phase::ArgsFirst | Phase::Tail);
            pos = if body {
                self.body(text, pos, sink)
            } else {
                self.structure(text, pos, sink)
            };
            if self.calls.calls == 0 {
                self.calls.raw.push_str(&text[start..pos]);
            }
            if pos == start && self.status == Status::Open && self.phase == phase && !body {
                break;
            }
        }
        pos
    }

    fn structure(&mut self, text: &str, pos: usize, sink: &mut dyn Sink) -> usize {
        let stop_at = find_sentinel(text, pos);
        let stop = stop_at.unwrap_or(text.len());
        let before = self.head.len();
        self.head.push_str(&text[pos..stop]);
        let h = self.head.as_str();
        let mut m = if self.keyed && self.phase == Phase::Head {
            head_keyed(h)
        } else {
            match self.phase {
                Phase::ListQ => list_open(h),
                Phase::Head => head(h),
                Phase::Next => list_next(h),
                _ => name_after(h),
            }
        };
        if m == M::No && self.phase == Phase::Head && !self.keyed {
            match head_args_first(h) {
                M::Full { end, .. } => {
                    self.head.clear();
                    self.phase = Phase::ArgsFirst;
                    self.scanner = JsonValueScanner::new();
                    return pos + (end - before);
                }
                M::Partial => m = M::Partial,
                M::No => {}
            }
        }
        if m == M::No && self.phase == Phase::Next && !self.bracketed {
            // Unbracketed calls end at the first thing that is not a separator; the whitespace
            // earlier pieces left in the head is shown with it (`rest`), however it was split.
            self.calls.space.push_str(&self.head[..before]);
            self.head.clear();
            self.status = Status::Complete;
            return pos;
        }
        let end = match &m {
            M::Full { end, .. } => *end,
            _ => h.len(),
        };
        let too_long = end > HEAD_LIMIT && h[..end].chars().count() > HEAD_LIMIT;
        if m == M::No || too_long || (m == M::Partial && stop_at.is_some()) {
            // Not consumed: the text from where the structure broke is the model's (`rest`),
            // the part earlier pieces left in the head included, however the text was split.
            self.status = Status::Malformed;
            if self.calls.calls > 0 {
                self.calls.space.push_str(&self.head[..before]);
            }
            self.head.clear();
            return pos;
        }
        let M::Full {
            end,
            name,
            open,
            sep,
        } = m
        else {
            return stop;
        };
        let consumed = pos + (end - before);
        let name = self.head[name.0..name.1].to_string();
        self.head.clear();
        match self.phase {
            Phase::ListQ => {
                self.phase = Phase::Head;
                self.bracketed = open;
            }
            Phase::Next => {
                if sep == Some(b']') {
                    self.status = Status::Complete;
                } else {
                    self.phase = Phase::Head;
                }
            }
            Phase::Head => {
                self.start_call(&name, sink);
                self.phase = Phase::Args;
                self.scanner = JsonValueScanner::new();
            }
            _ => {
                self.start_call(&name, sink);
                let raw = std::mem::take(&mut self.buffer);
                sink.args(&unwrap(&raw));
                self.enter_tail();
            }
        }
        consumed
    }

    fn body(&mut self, text: &str, pos: usize, sink: &mut dyn Sink) -> usize {
        let end = self.scanner.feed(text, pos);
        let chunk = &text[pos..end];
        let status = self.scanner.status;
        if self.phase == Phase::Tail {
            if status == Status::Complete {
                sink.end(text, end);
                if self.list {
                    self.phase = Phase::Next;
                } else {
                    self.status = Status::Complete;
                }
            } else if status == Status::Malformed {
                self.status = Status::Malformed;
            }
            return end;
        }
        let buffered = self.phase == Phase::ArgsFirst || self.scanner.first == '"';
        if buffered {
            self.buffer.push_str(chunk);
        } else if !chunk.is_empty() {
            sink.args(chunk);
        }
        if status == Status::Complete {
            if self.phase == Phase::ArgsFirst {
                self.phase = Phase::NameAfter;
            } else {
                if buffered {
                    let raw = std::mem::take(&mut self.buffer);
                    sink.args(&unwrap(&raw));
                }
                self.enter_tail();
            }
        } else if status == Status::Malformed {
            self.status = Status::Malformed;
        }
        end
    }

    fn enter_tail(&mut self) {
        self.phase = Phase::Tail;
        self.scanner = JsonValueScanner::new();
        self.scanner.started = true;
        self.scanner.depth = 1;
    }

    fn start_call(&mut self, escaped_name: &str, sink: &mut dyn Sink) {
        self.calls.calls += 1;
        sink.begin(&unescape(escaped_name));
    }
}

/// Arguments written as a JSON string that holds JSON (double-encoded): unwrapped.
fn unwrap(raw: &str) -> String {
    if py_lstrip(raw).starts_with('"') {
        if let Some(Value::Str(inner)) = pyjson::loads(raw, MAX_DEPTH) {
            if pyjson::loads(&inner, MAX_DEPTH).is_some() {
                return inner;
            }
        }
    }
    raw.to_string()
}

fn unescape(body: &str) -> String {
    if !body.contains('\\') {
        return body.to_string();
    }
    match pyjson::loads(&format!("\"{body}\""), MAX_DEPTH) {
        Some(Value::Str(s)) => s,
        _ => body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_match_fully_partially_or_not() {
        assert!(matches!(
            head(r#"{"name": "f", "arguments": {"#),
            M::Full { .. }
        ));
        assert_eq!(head(r#"{"name": "f", "arguments": "#), M::Partial);
        assert_eq!(head(r#"{"type": "function", "na"#), M::Partial);
        assert_eq!(head(r#"{"type": "x", "name""#), M::No);
        assert_eq!(head(r#"{"arguments": {}"#), M::No);
        assert!(matches!(
            head_args_first(r#"{"arguments": {}"#),
            M::Full { .. }
        ));
        assert_eq!(list_open("  "), M::Partial);
        assert!(matches!(
            list_next(" ;"),
            M::Full {
                sep: Some(b';'),
                ..
            }
        ));
    }
}

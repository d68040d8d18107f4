//! Gemma 4's object notation → JSON, streamed (`engine/readers/gemma.py`):
//! `{key:<|"|>text<|"|>,n:42,o:{…},l:[…]}`.

use super::python_calls::json_scalar;
use super::{Sink, Status};
use crate::pyjson::MAX_DEPTH;
use crate::text::{is_sentinel, push_json_string, py_isspace, py_strip};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    Str,
    Obj,
    Arr,
}

pub struct GemmaArgsReader {
    quote: String,
    stack: Vec<Frame>,
    pending: String,
    expect_key: bool,
    ending: bool,
    pub emitted: bool,
    pub status: Status,
}

impl GemmaArgsReader {
    pub fn new(quote: &str) -> Self {
        GemmaArgsReader {
            quote: quote.to_string(),
            stack: Vec::new(),
            pending: String::new(),
            expect_key: false,
            ending: false,
            emitted: false,
            status: Status::Open,
        }
    }

    fn out(&mut self, text: &str, sink: &mut dyn Sink) {
        self.emitted = true;
        sink.args(text);
    }

    pub fn feed(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        let n = text.len();
        while pos < n && self.status == Status::Open {
            if self.stack.last() == Some(&Frame::Str) {
                let end = if self.quote.is_empty() {
                    None
                } else {
                    text[pos..].find(self.quote.as_str()).map(|k| pos + k)
                };
                let chunk = &text[pos..end.unwrap_or(n)];
                if !chunk.is_empty() {
                    self.emitted = true;
                    sink.args_escaped(chunk);
                }
                let Some(end) = end else { return n };
                let after = end + self.quote.len();
                match self.closes(text, after) {
                    None => return end,
                    Some(true) => {
                        self.stack.pop();
                        self.out("\"", sink);
                    }
                    Some(false) => {
                        let q = self.quote.clone();
                        self.out(&q, sink);
                    }
                }
                pos = after;
                continue;
            }
            let c = text[pos..].chars().next().expect("in range");
            if self.stack.is_empty() {
                if py_isspace(c) {
                    pos += c.len_utf8();
                    continue;
                }
                if c != '{' {
                    self.status = Status::Malformed;
                    return pos;
                }
            }
            let is_quote = !self.quote.is_empty()
                && text[pos..].starts_with(self.quote.as_str())
                && self.quote.chars().count() == 1;
            if is_quote && py_strip(&self.pending).is_empty() {
                self.pending.clear();
                self.stack.push(Frame::Str);
                self.out("\"", sink);
            } else if c == '{' || c == '[' {
                if self.stack.len() >= MAX_DEPTH {
                    self.status = Status::Malformed;
                    return pos;
                }
                if crate::text::has_visible(&self.pending) {
                    // text the notation has no place for: the model's
                    let p = std::mem::take(&mut self.pending);
                    sink.held_shown(&p, text, pos);
                }
                self.stack
                    .push(if c == '{' { Frame::Obj } else { Frame::Arr });
                self.expect_key = c == '{';
                self.pending.clear();
                self.out(if c == '{' { "{" } else { "[" }, sink);
            } else if matches!(c, ',' | '}' | ']') || (c == ':' && self.expect_key) {
                self.settle(c, sink);
                if self.status != Status::Open {
                    return pos;
                }
                if c == '}' || c == ']' {
                    self.stack.pop();
                    self.out(if c == '}' { "}" } else { "]" }, sink);
                    self.expect_key = false;
                    if self.stack.is_empty() {
                        self.status = Status::Complete;
                        return pos + 1;
                    }
                } else if c == ',' {
                    self.out(",", sink);
                    self.expect_key = self.stack.last() == Some(&Frame::Obj);
                } else {
                    self.expect_key = false;
                }
            } else if is_sentinel(c) {
                self.status = Status::Malformed;
                return pos;
            } else {
                self.pending.push(c);
            }
            pos += c.len_utf8();
        }
        pos
    }

    /// A key or bare value still being written, never settled (taken).
    pub fn unread(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    pub fn end_of_output(&mut self) {
        self.ending = true;
    }

    fn closes(&self, text: &str, at: usize) -> Option<bool> {
        let rest = &text[at..];
        let Some((k, c)) = rest.char_indices().find(|&(_, c)| !py_isspace(c)) else {
            return if self.ending { Some(true) } else { None };
        };
        Some(
            matches!(c, ',' | '}' | ']')
                || (is_sentinel(c) && !rest[k..].starts_with(self.quote.as_str())),
        )
    }

    fn settle(&mut self, delimiter: char, sink: &mut dyn Sink) {
        let token = py_strip(&self.pending).to_string();
        self.pending.clear();
        if delimiter == ':' {
            let mut s = String::new();
            push_json_string(&mut s, &token);
            s.push(':');
            self.out(&s, sink);
        } else if !token.is_empty() {
            if json_scalar(&token) {
                self.out(&token, sink);
            } else {
                let mut s = String::new();
                push_json_string(&mut s, &token);
                self.out(&s, sink);
            }
        }
    }
}

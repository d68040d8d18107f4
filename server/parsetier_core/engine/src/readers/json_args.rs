//! Arguments written as one JSON value, streamed verbatim (`engine/readers/json_args.py`).
//!
//! The value's lead-in is markup when it is whitespace and a code fence (```` ```json ````);
//! anything else there is the model's own text, shown as content (`Sink::shown`), decided word by
//! word, holding back only a fence word still being written.

use super::{Sink, Status};
use crate::json_scan::JsonValueScanner;
use crate::text::{is_sentinel, py_isspace};

/// The lead-in a value may have, in this order, each optional, whitespace around them.
const FENCE_WORDS: [&str; 2] = ["```", "json"];

#[derive(Default)]
pub struct JsonArgsReader {
    scanner: Option<JsonValueScanner>,
    /// Fence words the lead-in has passed.
    fence: usize,
    /// The lead-in holds text that is no fence: the rest of it is shown too.
    loose: bool,
    pub emitted: bool,
}

fn starts_value(c: char) -> bool {
    c == '{' || c == '[' || is_sentinel(c)
}

impl JsonArgsReader {
    pub fn status(&self) -> Status {
        self.scanner.as_ref().map_or(Status::Open, |s| s.status)
    }

    pub fn feed(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        if self.scanner.is_none() {
            pos = self.lead_in(text, pos, sink);
            match self.scanner.as_ref() {
                None => return pos,
                Some(s) if s.status == Status::Malformed => return pos,
                Some(_) => {}
            }
        }
        let scanner = self.scanner.as_mut().expect("set above");
        let end = scanner.feed(text, pos);
        if end > pos {
            self.emitted = true;
            sink.args(&text[pos..end]);
        }
        end
    }

    /// Read the lead-in from `pos`: where the value (or a marker) begins, or where a fence word
    /// still being written begins (held), or the end of `text`.
    fn lead_in(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        let n = text.len();
        while pos < n {
            let c = text[pos..].chars().next().expect("in range");
            if starts_value(c) {
                let mut scanner = JsonValueScanner::new();
                if is_sentinel(c) {
                    scanner.status = Status::Malformed;
                }
                self.scanner = Some(scanner);
                return pos;
            }
            if self.loose {
                let end = text[pos..]
                    .char_indices()
                    .find(|&(_, c)| starts_value(c))
                    .map_or(n, |(i, _)| pos + i);
                sink.shown(text, pos, end);
                pos = end;
                continue;
            }
            if py_isspace(c) {
                pos = text[pos..]
                    .char_indices()
                    .find(|&(_, c)| !py_isspace(c))
                    .map_or(n, |(i, _)| pos + i);
                continue;
            }
            let rest = &text[pos..];
            let mut word = None;
            for (k, w) in FENCE_WORDS.iter().enumerate().skip(self.fence) {
                if rest.starts_with(w) {
                    word = Some((k, w.len()));
                    break;
                }
                if w.starts_with(rest) {
                    return pos; // a fence word still being written (the machine holds it)
                }
            }
            match word {
                Some((k, len)) => {
                    self.fence = k + 1;
                    pos += len;
                }
                None => self.loose = true,
            }
        }
        pos
    }
}

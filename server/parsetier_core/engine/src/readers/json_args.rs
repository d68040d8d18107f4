//! Arguments written as one JSON value, streamed verbatim (`arguments/json_args.py`).

use super::{Sink, Status};
use crate::json_scan::JsonValueScanner;
use crate::text::is_sentinel;

#[derive(Default)]
pub struct JsonArgsReader {
    scanner: Option<JsonValueScanner>,
    pub emitted: bool,
}

impl JsonArgsReader {
    pub fn status(&self) -> Status {
        self.scanner.as_ref().map_or(Status::Open, |s| s.status)
    }

    pub fn feed(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        if self.scanner.is_none() {
            let lead = text[pos..]
                .char_indices()
                .find(|&(_, c)| c == '{' || c == '[' || is_sentinel(c));
            let Some((i, c)) = lead else {
                return text.len();
            };
            let mut scanner = JsonValueScanner::new();
            if is_sentinel(c) {
                scanner.status = Status::Malformed;
                self.scanner = Some(scanner);
                return pos + i;
            }
            pos += i;
            self.scanner = Some(scanner);
        }
        let scanner = self.scanner.as_mut().expect("set above");
        let end = scanner.feed(text, pos);
        if end > pos {
            self.emitted = true;
            sink.args(&text[pos..end]);
        }
        end
    }
}

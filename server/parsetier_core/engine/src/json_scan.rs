//! Incremental JSON value scanner (`engine/json_scan.py`): where a JSON value ends, without
//! parsing it. Inside a string everything is string content, sentinels included; outside, a
//! sentinel or a character JSON cannot contain ends the value as malformed, and so does nesting
//! deeper than `MAX_DEPTH`.

use crate::pyjson::MAX_DEPTH;
use crate::text::{is_sentinel, py_isspace};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Open,
    Complete,
    Malformed,
}

#[derive(Clone, Debug)]
pub struct JsonValueScanner {
    pub depth: usize,
    in_string: bool,
    escape: bool,
    scalar: bool,
    pub started: bool,
    pub first: char,
    pub status: Status,
}

impl Default for JsonValueScanner {
    fn default() -> Self {
        JsonValueScanner {
            depth: 0,
            in_string: false,
            escape: false,
            scalar: false,
            started: false,
            first: '\0',
            status: Status::Open,
        }
    }
}

impl JsonValueScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume `text[pos..]` until the value completes or turns out malformed; return the byte
    /// offset just past the last character that belongs to the value (or where scanning stopped).
    pub fn feed(&mut self, text: &str, mut pos: usize) -> usize {
        let n = text.len();
        let b = text.as_bytes();
        while pos < n && self.status == Status::Open {
            if !self.started {
                let mut chars = text[pos..].char_indices();
                let c = loop {
                    match chars.next() {
                        None => return n,
                        Some((i, c)) if !py_isspace(c) => {
                            pos += i;
                            break c;
                        }
                        _ => {}
                    }
                };
                self.started = true;
                self.first = c;
                if c == '{' || c == '[' {
                    self.depth = 1;
                } else if c == '"' {
                    self.in_string = true;
                } else if c.is_ascii_alphanumeric() || c == '-' {
                    // ASCII only, as inside a container: a non-ASCII letter or digit starts
                    // nothing JSON (or a Python literal) can read
                    self.scalar = true;
                } else {
                    self.status = Status::Malformed;
                    return pos;
                }
                pos += c.len_utf8();
                continue;
            }
            if self.escape {
                self.escape = false;
                pos += text[pos..].chars().next().map_or(1, |c| c.len_utf8());
                continue;
            }
            if self.in_string {
                match memchr::memchr2(b'"', b'\\', &b[pos..]) {
                    None => return n,
                    Some(k) => {
                        let c = b[pos + k];
                        pos += k + 1;
                        if c == b'\\' {
                            self.escape = true;
                        } else {
                            self.in_string = false;
                            if self.depth == 0 {
                                self.status = Status::Complete;
                            }
                        }
                    }
                }
                continue;
            }
            if self.scalar {
                for (i, c) in text[pos..].char_indices() {
                    if py_isspace(c) || c == ',' || c == '}' || c == ']' || is_sentinel(c) {
                        self.status = Status::Complete;
                        return pos + i;
                    }
                }
                return n;
            }
            // outside strings: skip ordinary characters
            let mut found = None;
            for (i, c) in text[pos..].char_indices() {
                let ordinary = !matches!(c, '{' | '}' | '[' | ']' | '"')
                    && !is_sentinel(c)
                    && (py_isspace(c)
                        || c.is_ascii_alphanumeric()
                        || matches!(c, '.' | ',' | ':' | '+' | '-'));
                if !ordinary {
                    found = Some((pos + i, c));
                    break;
                }
            }
            let Some((at, c)) = found else { return n };
            match c {
                '{' | '[' => {
                    if self.depth >= MAX_DEPTH {
                        self.status = Status::Malformed;
                        return at;
                    }
                    self.depth += 1;
                }
                '}' | ']' => {
                    self.depth = self.depth.wrapping_sub(1);
                    if self.depth == 0 {
                        self.status = Status::Complete;
                    }
                }
                '"' => self.in_string = true,
                _ => {
                    self.status = Status::Malformed;
                    return at;
                }
            }
            pos = at + c.len_utf8();
        }
        pos
    }

    /// At the end of input a bare scalar is complete; anything else open is not.
    pub fn finish_scalar(&mut self) {
        if self.status == Status::Open && self.scalar {
            self.status = Status::Complete;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_starts_with_an_ascii_letter_or_digit() {
        // `json_scan.py` tests the same: a combining mark (alphabetic to Rust), a letter of
        // another script or "²" starts nothing, as none does inside a container.
        for text in ["\u{345}x}", "\u{f1}x}", "\u{b2}}", "\u{663}}"] {
            let mut s = JsonValueScanner::new();
            assert_eq!(s.feed(text, 0), 0, "{text:?}");
            assert_eq!(s.status, Status::Malformed, "{text:?}");
        }
        for text in ["-1}", "true}", "x1}"] {
            let mut s = JsonValueScanner::new();
            assert_eq!(s.feed(text, 0), text.len() - 1);
            assert_eq!(s.status, Status::Complete);
        }
    }
}

//! Incremental literal lexer (`engine/lexer.py`): the leftmost terminal wins, the longest at that
//! position; with no match only a suffix that is a proper prefix of some terminal is held back.

/// The terminals one state listens for, longest first (the order `describe.py` gives).
pub struct TerminalSet {
    pub patterns: Vec<String>,
    /// Bytes a terminal may start with (a 256-entry table: one lookup per byte).
    starts: [bool; 256],
    longest: usize,
    non_ascii: bool,
}

/// A terminal found: its byte range in the text and its index in `patterns`.
#[derive(Clone, Copy, Debug)]
pub struct Match {
    pub start: usize,
    pub end: usize,
    pub index: usize,
}

impl TerminalSet {
    pub fn new(patterns: &[String]) -> TerminalSet {
        let mut starts = [false; 256];
        for p in patterns {
            if let Some(&b) = p.as_bytes().first() {
                starts[b as usize] = true;
            }
        }
        TerminalSet {
            patterns: patterns.to_vec(),
            starts,
            longest: patterns
                .iter()
                .map(|p| p.len())
                .max()
                .unwrap_or(1)
                .saturating_sub(1),
            non_ascii: patterns
                .iter()
                .all(|p| !p.as_bytes().first().is_some_and(|b| b.is_ascii())),
        }
    }

    /// Look in `text[pos..]`: (terminal match, hold). Text before `hold` (or before the match) is
    /// settled; with no match, `text[hold..]` must wait for more text.
    pub fn scan(&self, text: &str, pos: usize) -> (Option<Match>, usize) {
        let end = text.len();
        let b = text.as_bytes();
        if self.patterns.is_empty() || (self.non_ascii && text[pos..].is_ascii()) {
            return (None, end);
        }
        let Some(first_start) = b[pos..].iter().position(|&c| self.starts[c as usize]) else {
            return (None, end);
        };
        let first_start = pos + first_start;
        // Earliest start of a suffix that is a proper prefix of some terminal.
        let mut hold = end;
        let mut i = first_start.max(end.saturating_sub(self.longest));
        while i < end {
            if text.is_char_boundary(i) && self.starts[b[i] as usize] {
                let tail = &b[i..];
                if self
                    .patterns
                    .iter()
                    .any(|p| p.len() > tail.len() && p.as_bytes().starts_with(tail))
                {
                    hold = i;
                    break;
                }
            }
            i += 1;
        }
        // Leftmost match, longest at its position (patterns are longest first).
        let mut best: Option<Match> = None;
        let mut at = first_start;
        while at < hold.min(end) {
            if self.starts[b[at] as usize] && text.is_char_boundary(at) {
                for (index, p) in self.patterns.iter().enumerate() {
                    if b[at..].starts_with(p.as_bytes()) {
                        best = Some(Match {
                            start: at,
                            end: at + p.len(),
                            index,
                        });
                        break;
                    }
                }
                if best.is_some() {
                    break;
                }
            }
            at += 1;
        }
        match best {
            Some(m) if m.start < hold => (Some(m), hold),
            _ => (None, hold),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(p: &[&str]) -> TerminalSet {
        TerminalSet::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn holds_only_a_proper_prefix_suffix() {
        let t = set(&["</parameter>", "</function>"]);
        let (m, hold) = t.scan("abc </par", 0);
        assert!(m.is_none());
        assert_eq!(hold, 4);
        let (m, _) = t.scan("x</function>y", 0);
        assert_eq!(m.unwrap().start, 1);
    }

    #[test]
    fn a_longer_terminal_still_completing_waits() {
        let t = set(&["<ab", "<a"]);
        let (m, hold) = t.scan("x<a", 0);
        assert!(m.is_none());
        assert_eq!(hold, 1);
        let (m, _) = t.scan("x<ac", 0);
        assert_eq!(m.unwrap().index, 1);
    }
}

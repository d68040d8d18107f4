//! One request's live parse: token ids → detokenizer → parser, exactly `Session.feed`'s logic
//! (`server/parsetier/session.py`).
//!
//! A marker id (bound or dropped) is always its own piece; plain ids between markers are fed as
//! one piece standing for all of them when the parser can count such a run exactly
//! (`Parser::takes_runs`, asked again before each run), else one piece per id. A step's events
//! are delivered (turned into deltas) once, after all of its pieces, as the reference's one
//! `Assembler.add` per `Session.feed`. Ids are checked by the caller (Python refuses a bad step
//! whole before anything is parsed).

use crate::detok::Scanner;
use crate::events::{give_back, StepOut};
use crate::parser::{Final, FinishReason, Parser};

/// Bytes of text the step's piece and the decoder's strings keep between steps (`give_back`).
const KEEP_PIECE: usize = 256;

pub struct Session {
    scanner: Scanner,
    parser: Parser,
    /// The current piece (reused: a step allocates nothing once it has grown).
    piece: String,
}

impl Session {
    pub fn new(scanner: Scanner, parser: Parser) -> Session {
        Session {
            scanner,
            parser,
            piece: String::new(),
        }
    }

    /// One step's ids; its events and deltas are appended to `out`.
    pub fn feed(&mut self, ids: &[u32], out: &mut StepOut) {
        let mut start = 0;
        for (i, &id) in ids.iter().enumerate() {
            if self.scanner.marks().contains(id) {
                if i > start {
                    self.plain(&ids[start..i], out);
                }
                self.one(id, out);
                start = i + 1;
            }
        }
        if start < ids.len() {
            self.plain(&ids[start..], out);
        }
        self.parser.deliver(out);
        // A large step's piece and decoder strings are not kept while the session waits.
        give_back(&mut self.piece, KEEP_PIECE);
        self.scanner.give_back(KEEP_PIECE);
    }

    /// Already-detokenized text (markers already sentinels) standing for `tokens` tokens.
    pub fn feed_text(&mut self, text: &str, tokens: u32, out: &mut StepOut) {
        self.parser.feed(text, tokens, out);
        self.parser.deliver(out);
    }

    /// End of output: `held` is text a text step still held (fed first, for no tokens); then,
    /// when ids were fed (`flush`), what the detokenizer still holds; then the stop text when
    /// the caller includes it; then the parser finishes.
    pub fn finish(
        &mut self,
        reason: FinishReason,
        held: &str,
        flush: bool,
        stop_text: Option<&str>,
        out: &mut StepOut,
    ) -> Final {
        self.parser.feed(held, 0, out);
        if flush {
            self.piece.clear();
            self.scanner.flush(&mut self.piece);
            self.parser.feed(&self.piece, 0, out);
        }
        self.parser.finish(reason, stop_text, out)
    }

    pub fn reasoning_tokens(&self) -> u64 {
        self.parser.reasoning_tokens()
    }

    fn one(&mut self, id: u32, out: &mut StepOut) {
        self.piece.clear();
        self.scanner.piece(id, &mut self.piece);
        self.parser.feed(&self.piece, 1, out);
    }

    fn plain(&mut self, ids: &[u32], out: &mut StepOut) {
        if ids.len() > 1 && self.parser.takes_runs() {
            self.piece.clear();
            self.scanner.run(ids, &mut self.piece);
            self.parser.feed(&self.piece, ids.len() as u32, out);
        } else {
            for &id in ids {
                self.one(id, out);
            }
        }
    }
}

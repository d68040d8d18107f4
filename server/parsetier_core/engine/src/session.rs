//! One request's live parse: token ids → detokenizer → parser, exactly `Session.feed`'s logic
//! (`server/parsetier/engine/session.py`).
//!
//! A marker id (bound or dropped) is always its own piece; plain ids between markers are fed as
//! one piece standing for all of them when the parser can count such a run exactly
//! (`Parser::takes_runs`, asked again before each run), else one piece per id. A step's events
//! are delivered (turned into deltas) once, after all of its pieces, as the reference's one
//! `Assembler.add` per `Session.feed`. Ids are checked by the caller (Python refuses a bad step
//! whole before anything is parsed).

use std::cell::RefCell;

use crate::detok::Scanner;
use crate::events::{give_back, StepOut};
use crate::parser::{Final, FinishReason, Parser};

/// Bytes of text the step's piece and the decoder's strings keep between steps (`give_back`).
const KEEP_PIECE: usize = 256;

thread_local! {
    /// The current piece: scratch, empty between two steps, so one per thread rather than one
    /// per session (an open session held the capacity its last step grew, up to `KEEP_PIECE`
    /// bytes, for nothing; the thread's piece is reused by every session it steps and never
    /// reallocates once it has grown).
    static PIECE: RefCell<String> = const { RefCell::new(String::new()) };
}

pub struct Session {
    scanner: Scanner,
    parser: Parser,
}

impl Session {
    pub fn new(scanner: Scanner, parser: Parser) -> Session {
        Session { scanner, parser }
    }

    /// Ask the memory system for the buffers a step reaches first (`prefetch`), so a host that
    /// steps many sessions in turn finds them in cache when it steps this one next.
    pub fn prefetch(&self) {
        self.scanner.prefetch();
        self.parser.prefetch();
    }

    /// One step's ids; its events and deltas are appended to `out`.
    pub fn feed(&mut self, ids: &[u32], out: &mut StepOut) {
        PIECE.with_borrow_mut(|piece| {
            let mut start = 0;
            for (i, &id) in ids.iter().enumerate() {
                if self.scanner.marks().contains(id) {
                    if i > start {
                        self.plain(&ids[start..i], piece, out);
                    }
                    self.one(id, piece, out);
                    start = i + 1;
                }
            }
            if start < ids.len() {
                self.plain(&ids[start..], piece, out);
            }
            // What a large step grew of the thread's piece is not kept either (a piece that stays
            // about the same size is never touched: its last text is the measure).
            give_back(piece, KEEP_PIECE);
        });
        self.parser.deliver(out);
        // A large step's decoder strings are not kept while the session waits.
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
            PIECE.with_borrow_mut(|piece| {
                piece.clear();
                self.scanner.flush(piece);
                self.parser.feed(piece, 0, out);
            });
        }
        self.parser.finish(reason, stop_text, out)
    }

    pub fn reasoning_tokens(&self) -> u64 {
        self.parser.reasoning_tokens()
    }

    fn one(&mut self, id: u32, piece: &mut String, out: &mut StepOut) {
        piece.clear();
        self.scanner.piece(id, piece);
        self.parser.feed(piece, 1, out);
    }

    fn plain(&mut self, ids: &[u32], piece: &mut String, out: &mut StepOut) {
        if ids.len() > 1 && self.parser.takes_runs() {
            piece.clear();
            self.scanner.run(ids, piece);
            self.parser.feed(piece, ids.len() as u32, out);
        } else {
            for &id in ids {
                self.one(id, piece, out);
            }
        }
    }
}

//! The state machine (`engine/machine.py`): interprets a bound grammar over streamed text in
//! sentinel form and emits semantic events. Per state kind: what its text does, what entering
//! and leaving it does (`kind_text`, `enter`, `leave`); transition actions in `fire`. Argument
//! readers are reached only through `Reader`.
//!
//! Decisions depend only on the text seen so far: what cannot be decided yet is held back
//! (`hold`), and nothing emitted is taken back. Work per `feed` is proportional to its text plus
//! what was held.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value as Schema;

use crate::events::{Event, EventKind, StepOut};
use crate::grammar::{Action, Dialect, Follow, Grammar, Kind, Transition, Turn};
use crate::readers::elements::ElementArgsReader;
use crate::readers::envelope::EnvelopeReader;
use crate::readers::gemma::GemmaArgsReader;
use crate::readers::json_args::JsonArgsReader;
use crate::readers::params::ParamWriter;
use crate::readers::python_calls::PythonCallsReader;
use crate::readers::{Reader, Sink, Status};
use crate::text::{find_sentinel, has_visible, push_json_fragment, py_isspace, py_strip};

const CAPTURE_LIMIT: usize = 4096;

/// The tools of a session: name → parameters schema.
pub type Tools = HashMap<String, Schema>;

/// A block's text while no call is open in it (`machine._Stretch`): markers, whitespace and the
/// model's loose text. When a call begins its loose text is content; when the block ends without
/// a call and it held loose text, all of it is content, markers included.
#[derive(Default)]
pub struct Stretch {
    pieces: Vec<(String, bool)>,
    loose: bool,
    /// Whitespace pieces since the last loose text (trailing pieces), loose if more follows.
    gap: Option<usize>,
    shown: usize,
}

fn is_space(text: &str) -> bool {
    !text.is_empty() && text.chars().all(py_isspace)
}

impl Stretch {
    fn new(first: &str) -> Stretch {
        let mut s = Stretch::default();
        if !first.is_empty() {
            s.pieces.push((first.to_string(), false));
        }
        s
    }

    fn add(&mut self, text: &str, loose: bool) {
        if text.is_empty() {
            return;
        }
        if !loose {
            self.pieces.push((text.to_string(), false));
            match self.gap.as_mut() {
                Some(g) if is_space(text) => *g += 1,
                _ => self.gap = None,
            }
            return;
        }
        let body = py_strip(text);
        let lead_len = if body.is_empty() {
            text.len()
        } else {
            text.len() - text.trim_start_matches(py_isspace).len()
        };
        let lead = &text[..lead_len];
        let trail = &text[lead_len + body.len()..];
        let inner = self.gap.is_some();
        if let Some(g) = self.gap {
            let n = self.pieces.len();
            for p in &mut self.pieces[n - g..] {
                p.1 = true;
            }
        }
        if !lead.is_empty() {
            self.pieces.push((lead.to_string(), inner));
        }
        self.pieces.push((body.to_string(), true));
        self.loose = true;
        self.gap = Some(0);
        if !trail.is_empty() {
            self.pieces.push((trail.to_string(), false));
            self.gap = Some(1);
        }
    }

    fn text(&self) -> String {
        self.pieces.iter().map(|(t, _)| t.as_str()).collect()
    }

    fn loose_text(&self) -> String {
        self.pieces
            .iter()
            .filter(|(_, l)| *l)
            .map(|(t, _)| t.as_str())
            .collect()
    }

    fn take_loose(&mut self) -> String {
        let upto = self.pieces.len() - self.gap.unwrap_or(0);
        let out = self.pieces[self.shown..upto]
            .iter()
            .filter(|(_, l)| *l)
            .map(|(t, _)| t.as_str())
            .collect();
        self.shown = upto;
        out
    }
}

fn is_text_kind(k: Kind) -> bool {
    matches!(k, Kind::Content | Kind::Reasoning)
}

/// Everything about calls and events: what readers and parameter writers talk to.
pub struct Calls {
    pub out: StepOut,
    tokens: u32,
    index: i32,
    call_open: bool,
    /// Boxed, as `Machine.reader` is: only a call with parameters has one.
    params: Option<Box<ParamWriter>>,
    args_emitted: bool,
    args_closed: bool,
    current_tool: String,
    g: Arc<Grammar>,
    tools: Arc<Tools>,
    stretch: Option<Stretch>,
    inner: Option<Stretch>,
    block_called: bool,
    ending: bool,
    /// The call ledger (`Machine._raw`): the block's text (sentinel form) since it began or its
    /// last call ended that was not shown before the call, with the text shown while the call is
    /// open in place; a call's `TOOL_CALL_END` carries it.
    raw: String,
    /// While a reader feeds: where its text not yet in the ledger starts.
    span_from: usize,
}

impl Calls {
    /// The text a reader read since the last span, up to `at`: the call's text.
    fn span_to(&mut self, text: &str, at: usize) {
        if at > self.span_from {
            self.raw.push_str(&text[self.span_from..at]);
        }
        self.span_from = at;
    }

    /// Take the last `size` bytes the ledger took (a reader's held text, shown) back out of it.
    fn unledger(&mut self, size: usize) {
        let mut keep = self.raw.len().saturating_sub(size);
        while !self.raw.is_char_boundary(keep) {
            keep -= 1;
        }
        self.raw.truncate(keep);
    }

    /// Text that is no markup and belongs to no call: content, through the block's stretch.
    fn loose(&mut self, text: &str) {
        if let Some(s) = self.stretch.as_mut() {
            s.add(text, true);
        } else {
            self.emit_text(EventKind::Content, text);
        }
    }

    /// Text no state takes as its own (`_free_text`): markup when the state says so or it is
    /// whitespace, else the model's loose text.
    fn free_text(&mut self, text: &str, markup: bool) {
        let loose = !(markup || is_space(text));
        if markup {
            // whitespace is not the call's text: whether it is shown depends on what follows
            self.raw.push_str(text);
        }
        if let Some(s) = self.stretch.as_mut() {
            s.add(text, loose);
            return;
        }
        if self.inner.is_none() {
            if !loose {
                return;
            }
            self.inner = Some(Stretch::default());
        }
        let inner = self.inner.as_mut().expect("set above");
        inner.add(text, loose);
        let shown = inner.take_loose();
        self.emit_text(EventKind::Content, &shown);
    }

    fn push_restored(&mut self, text: &str) {
        let arena = &mut self.out.event_text;
        let mut from = 0;
        while let Some(at) = find_sentinel(text, from) {
            arena.push_str(&text[from..at]);
            let c = text[at..].chars().next().expect("a sentinel");
            if let Some(t) = self.g.text_of_sentinel.get(&c) {
                arena.push_str(t);
            }
            from = at + c.len_utf8();
        }
        arena.push_str(&text[from..]);
    }

    fn restore(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut from = 0;
        while let Some(at) = find_sentinel(text, from) {
            out.push_str(&text[from..at]);
            let c = text[at..].chars().next().expect("a sentinel");
            if let Some(t) = self.g.text_of_sentinel.get(&c) {
                out.push_str(t);
            }
            from = at + c.len_utf8();
        }
        out.push_str(&text[from..]);
        out
    }

    fn push_event(&mut self, kind: EventKind, start: usize, index: i32, call_id: (u32, u32)) {
        let end = self.out.event_text.len() as u32;
        self.out.events.push(Event {
            kind,
            text: (start as u32, end),
            tool_index: index,
            tokens: self.tokens,
            call_id,
        });
        self.tokens = 0;
    }

    /// A content or reasoning event; sentinels become their tokens' text again.
    fn emit_text(&mut self, kind: EventKind, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.call_open && kind == EventKind::Content {
            // shown inside the call: its text, in place (`Machine._emit_text`)
            self.raw.push_str(text);
        }
        let start = self.out.event_text.len();
        if text.is_ascii() {
            self.out.event_text.push_str(text);
        } else {
            self.push_restored(text);
        }
        self.push_event(kind, start, -1, (0, 0));
    }

    fn emit(&mut self, kind: EventKind, text: &str, index: i32, call_id: &str) {
        let start = self.out.event_text.len();
        self.out.event_text.push_str(text);
        let id_start = self.out.event_text.len();
        self.out.event_text.push_str(call_id);
        let id = (id_start as u32, self.out.event_text.len() as u32);
        let end = id_start as u32;
        self.out.events.push(Event {
            kind,
            text: (start as u32, end),
            tool_index: index,
            tokens: self.tokens,
            call_id: id,
        });
        self.tokens = 0;
    }

    fn call_begin(&mut self, name: &str, format_id: &str) {
        if self.call_open {
            self.call_end();
        }
        self.index += 1;
        if let Some(s) = self.stretch.take() {
            if s.loose {
                let t = s.loose_text();
                self.emit_text(EventKind::Content, &t);
            }
        }
        self.call_open = true;
        self.block_called = true;
        self.args_emitted = false;
        self.args_closed = false;
        self.params = None;
        let call_id = if self.g.format_ids && !format_id.is_empty() {
            format_id
        } else {
            ""
        };
        self.emit(EventKind::ToolCallStart, name, self.index, call_id);
        self.current_tool.clear();
        self.current_tool.push_str(name);
    }

    fn param_begin(&mut self, key: &str, forced: Option<&str>) {
        if !self.call_open {
            return;
        }
        let mut p = self.params.take().unwrap_or_else(|| {
            Box::new(ParamWriter::new(
                self.tools.get(&self.current_tool),
                self.g.trim_values,
            ))
        });
        p.begin(key, forced, self);
        self.params = Some(p);
    }

    fn param_value(&mut self, text: &str) {
        if let Some(mut p) = self.params.take() {
            p.value(text, self);
            self.params = Some(p);
        }
    }

    fn param_end(&mut self) {
        if let Some(mut p) = self.params.take() {
            p.end(self);
            self.params = Some(p);
        }
    }

    fn call_end(&mut self) {
        if !self.call_open {
            return;
        }
        if let Some(mut p) = self.params.take() {
            p.close(self);
        } else if !self.args_emitted {
            self.args("{}");
        }
        self.params = None;
        let raw = std::mem::take(&mut self.raw);
        let text = self.restore(&raw);
        self.raw = raw;
        self.raw.clear();
        self.emit(EventKind::ToolCallEnd, &text, self.index, "");
        self.call_open = false;
    }
}

impl Sink for Calls {
    /// A fragment of the arguments' JSON; a sentinel in it is inside a JSON string, so it
    /// becomes its token's text JSON-escaped.
    fn args(&mut self, fragment: &str) {
        if !self.call_open {
            // arguments of no call (its name was empty): the model's text
            if !fragment.is_empty() {
                let t = self.restore(fragment);
                self.loose(&t);
            }
            return;
        }
        if fragment.is_empty() {
            return;
        }
        self.args_emitted = true;
        let start = self.out.event_text.len();
        if fragment.is_ascii() || find_sentinel(fragment, 0).is_none() {
            self.out.event_text.push_str(fragment);
        } else {
            let mut from = 0;
            while let Some(at) = find_sentinel(fragment, from) {
                self.out.event_text.push_str(&fragment[from..at]);
                let c = fragment[at..].chars().next().expect("a sentinel");
                let t = self.g.text_of_sentinel.get(&c).map_or("", |s| s.as_str());
                push_json_fragment(&mut self.out.event_text, t);
                from = at + c.len_utf8();
            }
            self.out.event_text.push_str(&fragment[from..]);
        }
        self.push_event(EventKind::ToolArguments, start, self.index, (0, 0));
    }

    fn args_escaped(&mut self, raw: &str) {
        if !self.call_open {
            let mut escaped = String::new();
            push_json_fragment(&mut escaped, raw);
            self.args(&escaped);
            return;
        }
        if raw.is_empty() {
            return;
        }
        self.args_emitted = true;
        let start = self.out.event_text.len();
        let mut from = 0;
        while let Some(at) = find_sentinel(raw, from) {
            push_json_fragment(&mut self.out.event_text, &raw[from..at]);
            let c = raw[at..].chars().next().expect("a sentinel");
            let t = self.g.text_of_sentinel.get(&c).map_or("", |s| s.as_str());
            push_json_fragment(&mut self.out.event_text, t);
            from = at + c.len_utf8();
        }
        push_json_fragment(&mut self.out.event_text, &raw[from..]);
        self.push_event(EventKind::ToolArguments, start, self.index, (0, 0));
    }

    fn begin(&mut self, name: &str) {
        self.call_begin(name, "");
    }

    /// A reader's held text, read up to `text[at]`, is content; it stays in the ledger where it
    /// was written (taken out here, put back as it is shown: `emit_text`).
    fn held_shown(&mut self, held: &str, text: &str, at: usize) {
        self.span_to(text, at);
        self.unledger(held.len());
        let t = self.restore(held);
        self.loose(&t);
    }

    fn end(&mut self, text: &str, at: usize) {
        self.span_to(text, at);
        self.call_end();
    }

    fn shown(&mut self, text: &str, start: usize, end: usize) {
        self.span_to(text, start);
        self.span_from = end;
        let t = self.restore(&text[start..end]);
        self.loose(&t);
    }
}

/// One request's parse state.
pub struct Machine {
    g: Arc<Grammar>,
    state: usize,
    in_reasoning: bool,
    hold: String,
    scratch: String,
    capture: String,
    capture_len: usize,
    /// Boxed: a call's reader lives on the heap while it reads, so an idle session does not
    /// carry the largest reader's size.
    reader: Option<Box<Reader>>,
    opening: String,
    ending: bool,
    pub reasoning_tokens: u64,
    pub c: Calls,
    started: bool,
    echo: String,
    cut: bool,
}

impl Machine {
    /// The held text and the scratch it is stepped in (`Parser::prefetch`), when text is held
    /// (else a step reads neither). `c.out` is not asked for: between steps it is an empty
    /// placeholder (`Parser::feed` swaps the caller's output in).
    pub fn prefetch(&self) {
        if !self.hold.is_empty() {
            crate::prefetch::start(self.hold.as_bytes());
            crate::prefetch::start(self.scratch.as_bytes());
        }
    }

    /// `echo`: the pattern of the prompt terminal that chose `start`; written again as the
    /// output's first non-whitespace text it is markup.
    pub fn new(g: Arc<Grammar>, start: usize, tools: Arc<Tools>, echo: &str) -> Machine {
        let mut m = Machine {
            g: g.clone(),
            state: start,
            in_reasoning: g.states[start].kind == Kind::Reasoning,
            hold: String::new(),
            scratch: String::new(),
            capture: String::new(),
            capture_len: 0,
            reader: None,
            opening: String::new(),
            ending: false,
            reasoning_tokens: 0,
            started: false,
            echo: echo.to_string(),
            cut: false,
            c: Calls {
                out: StepOut::default(),
                tokens: 0,
                index: -1,
                call_open: false,
                params: None,
                args_emitted: false,
                args_closed: false,
                current_tool: String::new(),
                stretch: None,
                inner: None,
                block_called: false,
                ending: false,
                raw: String::new(),
                span_from: 0,
                g,
                tools,
            },
        };
        if !is_text_kind(m.g.states[start].kind) {
            m.c.stretch = Some(Stretch::default());
        }
        m.started = false;
        m
    }

    /// Enter the start state (its entry events, e.g. `REASONING_START`): the parser calls this
    /// with the first step's output buffer in place, so those events lead that step.
    pub fn start(&mut self) {
        if !self.started {
            self.started = true;
            self.enter(self.state, "", None);
        }
    }

    pub fn state(&self) -> usize {
        self.state
    }

    /// Consume `text` (sentinel form) produced by `tokens` output tokens; events go to `c.out`.
    pub fn feed(&mut self, text: &str, tokens: u32) {
        if self.in_reasoning {
            self.reasoning_tokens += tokens as u64;
        }
        self.c.tokens += tokens;
        if text.is_empty() {
            return;
        }
        if self.hold.is_empty() {
            self.run_buf(text);
        } else {
            self.run(text);
        }
    }

    /// Whether the next plain text may come as one piece for many tokens (`Machine.takes_runs`).
    pub fn takes_runs(&self) -> bool {
        self.g.states[self.state].run_state
            && (self.hold.is_empty() || find_sentinel(&self.hold, 0).is_none())
    }

    pub fn in_run_state(&self) -> bool {
        self.g.states[self.state].run_state
    }

    /// End of output (`cut`: by length/abort, not by the model).
    pub fn finish(&mut self, cut: bool) {
        self.ending = true;
        self.c.ending = true;
        self.cut = cut;
        if let Some(r) = self.reader.as_deref_mut() {
            r.end_of_output();
        }
        if !self.hold.is_empty() {
            let held = std::mem::take(&mut self.hold);
            self.run(&held);
            let held = std::mem::take(&mut self.hold);
            if !held.is_empty()
                && !matches!(self.g.states[self.state].kind, Kind::Skip | Kind::Capture)
            {
                self.kind_text(&held);
            }
        }
        self.unread();
        let g = self.g.clone();
        let state = self.state;
        if let Some(end) = &g.states[state].end {
            if !cut {
                self.fire(end, "", state);
            }
        }
        self.leave(None, "");
        let kind = g.states[self.state].kind;
        if self.c.stretch.is_none() && kind == Kind::Capture {
            self.c.raw.push_str(&self.capture); // a key the model stopped in
        }
        if self.c.stretch.is_some() && !is_text_kind(kind) {
            let mut captured = if kind == Kind::Capture {
                self.c.restore(&self.capture)
            } else {
                String::new()
            };
            if !has_visible(&captured) || cut {
                captured.clear();
            }
            let s = self.c.stretch.take().expect("checked");
            if !captured.is_empty() || s.loose {
                let whole = !cut && !self.c.block_called;
                let mut text = if whole { s.text() } else { s.loose_text() };
                text.push_str(&captured);
                self.c.emit_text(EventKind::Content, &text);
            }
            self.c.stretch = Some(Stretch::default());
        }
        let c = &mut self.c;
        if c.call_open {
            if !cut {
                c.call_end(); // the model stopped: its call ends there, whole or broken
            } else if c.args_closed {
            } else if let Some(mut p) = c.params.take() {
                p.close(c);
                c.params = Some(p);
            } else if !c.args_emitted {
                c.args("{}");
            }
        }
        let index = c.index;
        c.emit(EventKind::End, "", index, "");
    }

    fn run(&mut self, text: &str) {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.push_str(&self.hold);
        buf.push_str(text);
        self.hold.clear();
        self.run_buf(&buf);
        self.scratch = buf;
    }

    /// Where parsing starts in `buf` while the prompt's opener may be repeated (None: wait).
    fn settle_echo(&mut self, buf: &str) -> Option<usize> {
        let body = buf.trim_start_matches(py_isspace);
        let lead = buf.len() - body.len();
        if body.starts_with(self.echo.as_str()) {
            let skip = lead + self.echo.len();
            self.echo.clear();
            if lead > 0 {
                self.kind_text(&buf[..lead]);
            }
            return Some(skip);
        }
        if self.echo.starts_with(body) && !self.ending {
            return None;
        }
        self.echo.clear();
        Some(0)
    }

    /// What a reader held and will never write: the model's text (markup when the output was cut).
    fn unread(&mut self) {
        let text = match self.reader.as_deref_mut() {
            Some(Reader::Gemma(r)) => r.unread(),
            Some(Reader::Python(r)) => r.unread(),
            _ => return,
        };
        if !(self.ending && self.cut) {
            // shown (the reader read it up to here; shown, it goes back into the ledger in place)
            self.c.unledger(text.len());
            let t = self.c.restore(&text);
            self.c.loose(&t);
        }
    }

    fn run_buf(&mut self, buf: &str) {
        let buf = if self.echo.is_empty() {
            buf
        } else {
            match self.settle_echo(buf) {
                None => {
                    self.hold.push_str(buf);
                    return;
                }
                Some(skip) => &buf[skip..],
            }
        };
        let g = self.g.clone();
        let n = buf.len();
        let mut pos = 0;
        while pos < n {
            let state = self.state;
            let st = &g.states[state];
            if let Some(reader) = self.reader.as_deref_mut() {
                if reader.status() == Status::Open {
                    self.c.span_from = pos;
                    pos = reader.feed(buf, pos, &mut self.c);
                    self.c.span_to(buf, pos);
                    let status = reader.status();
                    let elements = matches!(reader, Reader::Elements(_));
                    if status == Status::Malformed {
                        self.unread();
                        if self.c.call_open && !elements {
                            self.c.call_end(); // the call ends where its arguments break
                        }
                    }
                    if status == Status::Complete {
                        if let Some(done) = &st.done {
                            self.fire(done, "", state);
                            continue;
                        }
                    }
                    if status == Status::Open {
                        if pos < n {
                            self.hold.push_str(&buf[pos..]);
                        }
                        return;
                    }
                    continue;
                }
            }
            let (m, hold) = st.tset.scan(buf, pos);
            if let Some(tn) = st.text_next {
                let limit = m.map_or(hold, |m| m.start);
                let first = first_non_space(buf, pos, limit);
                if first < limit {
                    if first > pos {
                        self.kind_text(&buf[pos..first]);
                    }
                    pos = first;
                    self.fire(&Transition::to(tn), "", state);
                    continue;
                }
            }
            let Some(m) = m else {
                if hold > pos {
                    self.kind_text(&buf[pos..hold]);
                }
                self.hold.push_str(&buf[hold..]);
                return;
            };
            if m.start > pos {
                self.kind_text(&buf[pos..m.start]);
            }
            let t = &st.transitions[m.index];
            let pattern = &buf[m.start..m.end];
            if let Some(f) = &t.follow {
                match self.followed(f, buf, m.end) {
                    None => {
                        self.hold.push_str(&buf[m.start..]);
                        return;
                    }
                    Some(false) => {
                        if let Some(tn) = st.text_next {
                            pos = m.start;
                            self.fire(&Transition::to(tn), "", state);
                            continue;
                        }
                        self.kind_text(pattern);
                        pos = m.end;
                        continue;
                    }
                    Some(true) => {}
                }
            }
            if let Some(turn) = &t.turn {
                match ends_turn(turn, pattern, buf, m.end, self.ending) {
                    None => {
                        self.hold.push_str(&buf[m.start..]);
                        return;
                    }
                    Some(false) => {
                        self.kind_text(pattern);
                        pos = m.end;
                        continue;
                    }
                    Some(true) => {}
                }
            }
            if t.keep {
                pos = m.start;
                self.fire(t, "", state);
            } else {
                pos = m.end;
                self.fire(t, pattern, state);
            }
        }
    }

    /// Whether what follows `buf[at..]` makes a `follow` terminal structural (None: cannot tell).
    fn followed(&self, f: &Follow, buf: &str, at: usize) -> Option<bool> {
        f.followed(buf, at, self.ending)
    }

    // ------------------------------------------------------------------ kinds
    fn kind_text(&mut self, text: &str) {
        match self.g.states[self.state].kind {
            Kind::Content => self.c.emit_text(EventKind::Content, text),
            Kind::Reasoning => self.c.emit_text(EventKind::Reasoning, text),
            Kind::Skip => {
                let markup = self.g.states[self.state].markup;
                self.c.free_text(text, markup);
            }
            Kind::Capture => {
                let room = CAPTURE_LIMIT.saturating_sub(self.capture_len);
                if room > 0 {
                    let cut = crate::text::char_offset(text, room);
                    let piece = &text[..cut];
                    self.capture.push_str(piece);
                    self.capture_len += piece.chars().count();
                }
            }
            Kind::Value => {
                self.c.raw.push_str(text);
                self.c.param_value(text);
            }
            Kind::Json | Kind::Envelope | Kind::Elements => match self.reader.as_deref_mut() {
                Some(Reader::Json(_) | Reader::Gemma(_)) => self.c.free_text(text, false),
                Some(r) => {
                    let shown = r.rest(text);
                    self.c.emit_text(EventKind::Content, &shown);
                }
                None => {}
            },
        }
    }

    fn enter(&mut self, target: usize, pattern: &str, previous: Option<Kind>) {
        let g = self.g.clone();
        let st = &g.states[target];
        match st.kind {
            Kind::Reasoning => {
                if previous != Some(Kind::Reasoning) {
                    self.c.emit(EventKind::ReasoningStart, "", -1, "");
                }
            }
            Kind::Capture => {
                self.capture.clear();
                self.capture_len = 0;
            }
            Kind::Json => {
                self.reader = Some(Box::new(if st.dialect == Dialect::Gemma {
                    Reader::Gemma(GemmaArgsReader::new(&g.quote))
                } else {
                    Reader::Json(JsonArgsReader::default())
                }));
            }
            Kind::Skip => {
                self.opening.clear();
                self.opening.push_str(pattern);
            }
            Kind::Envelope => {
                if !pattern.is_empty() || previous != Some(Kind::Skip) {
                    self.opening.clear();
                    self.opening.push_str(pattern);
                }
                self.reader = Some(Box::new(match st.dialect {
                    Dialect::Python | Dialect::PythonJson => {
                        Reader::Python(PythonCallsReader::new(st.dialect == Dialect::PythonJson))
                    }
                    _ => Reader::Envelope(EnvelopeReader::new(
                        st.allow_list,
                        st.dialect == Dialect::Keyed,
                    )),
                }));
            }
            Kind::Elements => {
                let tool = if self.c.call_open {
                    self.c.tools.get(&self.c.current_tool)
                } else {
                    None
                };
                let stops = st.stops.clone();
                self.reader = Some(Box::new(Reader::Elements(ElementArgsReader::new(
                    &g.tag, &st.item, stops, tool,
                ))));
            }
            Kind::Content | Kind::Value => {}
        }
    }

    fn leave(&mut self, target: Option<usize>, pattern: &str) {
        let g = self.g.clone();
        match g.states[self.state].kind {
            Kind::Reasoning if target.is_none_or(|t| g.states[t].kind != Kind::Reasoning) => {
                self.c.emit(EventKind::ReasoningEnd, "", -1, "");
            }
            Kind::Envelope => {
                if target.is_none()
                    && self.cut
                    && self
                        .reader
                        .as_deref()
                        .is_none_or(|r| r.status() == Status::Open)
                {
                    // the output was cut in an envelope still taking shape: a call cut before its name
                    if let Some(r) = self.reader.as_deref_mut() {
                        r.unclaimed();
                    }
                    return;
                }
                let raw = self.reader.as_deref_mut().and_then(|r| r.unclaimed());
                if let Some(raw) = raw {
                    let mut text = match self.c.stretch.as_ref() {
                        Some(s) => s.text(),
                        None => self.opening.clone(),
                    };
                    text.push_str(&raw);
                    text.push_str(pattern);
                    self.c.emit_text(EventKind::Content, &text);
                    self.c.raw.clear(); // shown
                    if self.c.stretch.is_some() {
                        self.c.stretch = Some(Stretch::default());
                    }
                }
            }
            Kind::Elements => {
                if let Some(Reader::Elements(r)) = self.reader.as_deref_mut() {
                    if self.c.call_open {
                        r.close_call(&mut self.c);
                        self.c.args_closed = true;
                    }
                }
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------------ transitions
    fn fire(&mut self, t: &Transition, pattern: &str, from: usize) {
        let g = self.g.clone();
        let st = &g.states[from];
        let mut nxt = t.next;
        let mut actions: &[Action] = &t.actions;
        let mut groups: Vec<(&str, String)> = Vec::new();
        let mut captured = String::new();
        let mut matched = true;
        if st.kind == Kind::Capture {
            if nxt == Some(from) {
                self.capture.push_str(pattern);
                return;
            }
            captured = self.c.restore(&self.capture);
            matched = false;
            for rule in &st.rules {
                if let Ok(Some(caps)) = rule.regex.captures(&captured) {
                    for name in rule.regex.capture_names().flatten() {
                        if let Some(m) = caps.name(name) {
                            let v = if st.unescape_xml {
                                xml_unescape(m.as_str())
                            } else {
                                m.as_str().to_string()
                            };
                            groups.push((name, v));
                        }
                    }
                    nxt = rule.next.or(nxt);
                    actions = &rule.actions;
                    matched = true;
                    break;
                }
            }
        }
        let Some(target) = nxt else { return };
        if is_text_kind(st.kind) {
            if !is_text_kind(g.states[target].kind) {
                // a block begins: a new ledger
                self.c.raw.clear();
                self.c.raw.push_str(pattern);
            }
        } else {
            // the capture, unless it is shown (below), and the terminal are the call's text
            if !captured.is_empty()
                && (matched
                    || self.c.stretch.is_none()
                    || is_space(&captured)
                    || actions.contains(&Action::CallBegin))
            {
                self.c.raw.push_str(&captured);
            }
            self.c.raw.push_str(pattern);
        }
        // A terminal that leads a state back to itself starts it afresh.
        let moves = target != from || !pattern.is_empty();
        if moves {
            self.leave(Some(target), pattern);
        }
        let group = |k: &str| {
            groups
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.as_str())
        };
        for a in actions {
            match a {
                Action::CallBegin => {
                    let name = py_strip(group("name").unwrap_or(&captured)).to_string();
                    let id = group("id").unwrap_or(py_strip(&captured)).to_string();
                    self.c.call_begin(&name, &id);
                }
                Action::CallEnd => self.c.call_end(),
                Action::ParamBegin => {
                    let key = py_strip(group("key").unwrap_or(&captured)).to_string();
                    let forced = if let Some(s) = group("string") {
                        Some(if s == "true" { "string" } else { "json" })
                    } else {
                        group("type").map(|t| {
                            if t == "string" || t == "str" {
                                "string"
                            } else {
                                "json"
                            }
                        })
                    };
                    self.c.param_begin(&key, forced);
                }
                Action::ParamEnd => self.c.param_end(),
            }
        }
        if !pattern.is_empty() {
            self.c.inner = None;
        }
        if !captured.is_empty() && !matched && !is_space(&captured) {
            if let Some(s) = self.c.stretch.as_mut() {
                s.add(&captured, true); // a capture that began no call, no rule read
                captured.clear();
            }
        }
        let target_kind = g.states[target].kind;
        if is_text_kind(st.kind) {
            if !is_text_kind(target_kind) {
                // a block begins
                self.c.block_called = actions.contains(&Action::CallBegin);
                self.c.stretch = if self.c.call_open {
                    None
                } else {
                    Some(Stretch::new(pattern))
                };
            }
        } else if is_text_kind(target_kind) {
            // the block ends
            if let Some(s) = self.c.stretch.take() {
                if s.loose {
                    let text = if self.c.block_called {
                        s.loose_text()
                    } else {
                        let mut t = s.text();
                        t.push_str(pattern);
                        t
                    };
                    self.c.emit_text(EventKind::Content, &text);
                }
            }
            self.c.raw.clear();
        } else if actions.contains(&Action::CallEnd) {
            self.c.stretch = Some(Stretch::default());
        } else if let Some(s) = self.c.stretch.as_mut() {
            s.add(&captured, false); // a capture a rule read: markup
            s.add(pattern, false);
        }
        if moves {
            let previous = st.kind;
            self.state = target;
            self.reader = None;
            self.in_reasoning = g.states[target].kind == Kind::Reasoning;
            self.enter(target, pattern, Some(previous));
        }
    }
}

/// Whether the calls an `ends_turn` terminal (`opener`, ending at `buf[at]`) opens end the
/// model's turn: Some(true/false), or None while the text so far cannot tell (`ending`: nothing
/// more will come). After each closer only whitespace, the opener again, or the end may follow;
/// an `unless` terminal before that says no.
pub(crate) fn ends_turn(
    turn: &Turn,
    opener: &str,
    buf: &str,
    at: usize,
    ending: bool,
) -> Option<bool> {
    let mut pos = at;
    loop {
        let found = buf[pos..].find(turn.close.as_str()).map(|i| pos + i);
        for p in &turn.unless {
            if let Some(u) = buf[pos..].find(p.as_str()).map(|i| pos + i) {
                if found.is_none_or(|c| u < c) {
                    return Some(false);
                }
            }
        }
        let Some(found) = found else {
            return ending.then_some(true);
        };
        let rest = first_non_space(buf, found + turn.close.len(), buf.len());
        if rest == buf.len() {
            return ending.then_some(true);
        }
        if buf[rest..].starts_with(opener) {
            pos = rest + opener.len();
            continue;
        }
        if opener.starts_with(&buf[rest..]) && !ending {
            return None;
        }
        return Some(false);
    }
}

fn first_non_space(text: &str, start: usize, end: usize) -> usize {
    for (i, c) in text[start..end].char_indices() {
        if !py_isspace(c) {
            return start + i;
        }
    }
    end
}

/// XML's five named entities and numeric character references; anything else stays as written.
fn xml_unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some((rep, len)) = xml_ref(rest) {
            out.push_str(&rep);
            rest = &rest[len..];
        } else {
            out.push('&');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

fn xml_ref(s: &str) -> Option<(String, usize)> {
    for (name, rep) in [
        ("amp", "&"),
        ("lt", "<"),
        ("gt", ">"),
        ("quot", "\""),
        ("apos", "'"),
    ] {
        if s[1..].starts_with(name) && s[1 + name.len()..].starts_with(';') {
            return Some((rep.to_string(), name.len() + 2));
        }
    }
    let b = s.as_bytes();
    if b.get(1) != Some(&b'#') {
        return None;
    }
    let (hex, start, max) = if matches!(b.get(2), Some(b'x' | b'X')) {
        (true, 3, 6)
    } else {
        (false, 2, 7)
    };
    let digits = b[start..]
        .iter()
        .take_while(|c| {
            if hex {
                c.is_ascii_hexdigit()
            } else {
                c.is_ascii_digit()
            }
        })
        .count();
    if digits == 0 || digits > max || b.get(start + digits) != Some(&b';') {
        return None;
    }
    let whole = &s[..start + digits + 1];
    let code = u32::from_str_radix(&s[start..start + digits], if hex { 16 } else { 10 }).ok()?;
    let rep = if code > 0 && code <= 0x10FFFF && !(0xD800..=0xDFFF).contains(&code) {
        char::from_u32(code)
            .map(String::from)
            .unwrap_or_else(|| whole.to_string())
    } else {
        whole.to_string()
    };
    Some((rep, whole.len()))
}

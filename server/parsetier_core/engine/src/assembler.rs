//! Events → OpenAI-style deltas, and the assembled final message (`parsetier/engine/assembler.py`):
//! delivery options (reasoning shown, tool_choice none, parallel_tool_calls false,
//! complete_tool_calls), call ids and delivered indices, the whitespace policy (`EdgeTrim`), and
//! one feed's deltas merged into runs.

use crate::call_ids::IdMaker;

use crate::events::{Delta, DeltaKind, EventKind, Span, StepOut};
use crate::pyjson::{self, Value, MAX_DEPTH};
use crate::text::{py_lstrip, py_rstrip};

/// What the session asked for about delivery.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub include_reasoning: bool,
    pub calls_enabled: bool,
    pub parallel_tool_calls: bool,
    pub complete_tool_calls: bool,
}

struct Call {
    id: String,
    name: String,
    arguments: String,
    delivered_index: usize,
}

/// The whitespace policy for one text stream: leading whitespace dropped, trailing whitespace
/// held until more text proves it inner.
#[derive(Default)]
pub struct EdgeTrim {
    started: bool,
    held: String,
}

impl EdgeTrim {
    /// Take `text`; append what can be emitted now to `out` (returns whether anything was).
    fn push(&mut self, text: &str, out: &mut String) -> bool {
        let mut text = text;
        if !self.started {
            text = py_lstrip(text);
            if text.is_empty() {
                return false;
            }
            self.started = true;
        }
        let body = py_rstrip(text);
        if body.is_empty() {
            self.held.push_str(text);
            return false;
        }
        out.push_str(&self.held);
        out.push_str(body);
        self.held.clear();
        self.held.push_str(&text[body.len()..]);
        true
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    None,
    Content,
    Reasoning,
    Call(usize),
}

pub struct Assembler {
    d: Delivery,
    /// Boxed: its hash state (208 bytes) is read only when a call starts, and inline it was a
    /// fifth of the session's object, which the packed path fetches whole for every item.
    make_id: Box<IdMaker>,
    content: String,
    reasoning: String,
    delivered: Vec<usize>,
    calls: Vec<Call>,
    ids: std::collections::HashSet<String>,
    /// engine tool index → call being received (index into `calls`).
    open: Vec<(i32, usize)>,
    /// `complete_tool_calls`: content shown while a call it holds is open (`Assembler._held`):
    /// the call's text has it in place; shown with the call when delivered, else in that text.
    held: String,
    content_edges: EdgeTrim,
    reasoning_edges: EdgeTrim,
    run: Run,
    run_start: usize,
    run_head: Option<(Span, Span)>,
}

impl Assembler {
    /// Where the message's texts grow (`Parser::prefetch`): a text not begun yet has no buffer
    /// to ask for (its pointer is a dangling one, whose prefetch costs a page walk for nothing),
    /// nor do the delivered calls, which grow only when a call starts.
    pub fn prefetch(&self) {
        for text in [&self.content, &self.reasoning] {
            if text.capacity() > 0 {
                crate::prefetch::text_end(text);
            }
        }
    }

    pub fn new(d: Delivery, call_id_seed: &str) -> Assembler {
        Assembler {
            d,
            make_id: Box::new(IdMaker::new(call_id_seed)),
            content: String::new(),
            reasoning: String::new(),
            delivered: Vec::new(),
            calls: Vec::new(),
            ids: Default::default(),
            open: Vec::new(),
            held: String::new(),
            content_edges: EdgeTrim::default(),
            reasoning_edges: EdgeTrim::default(),
            run: Run::None,
            run_start: 0,
            run_head: None,
        }
    }

    /// Turn `out`'s events not yet delivered into deltas (merged into runs within this call).
    pub fn add(&mut self, out: &mut StepOut) {
        let StepOut {
            events,
            event_text,
            deltas,
            delta_text,
            delivered,
        } = out;
        self.run = Run::None;
        for ev in &events[*delivered..] {
            let text = &event_text[ev.text.0 as usize..ev.text.1 as usize];
            match ev.kind {
                EventKind::Content => {
                    if self.d.complete_tool_calls && !self.open.is_empty() {
                        self.held.push_str(text);
                    } else {
                        self.show(text, deltas, delta_text);
                    }
                }
                EventKind::Reasoning => {
                    // Trimmed straight into the deltas' text (taken back out when reasoning is
                    // not shown): no scratch piece and no second copy per text event.
                    let end = delta_text.len();
                    if self.reasoning_edges.push(text, delta_text) {
                        if self.d.include_reasoning {
                            self.open_run(Run::Reasoning, deltas, end);
                            self.reasoning.push_str(&delta_text[end..]);
                        } else {
                            delta_text.truncate(end);
                        }
                    }
                }
                EventKind::ReasoningStart => self.reasoning_edges = EdgeTrim::default(),
                EventKind::ToolCallStart => {
                    let id = &event_text[ev.call_id.0 as usize..ev.call_id.1 as usize];
                    self.start(ev.tool_index, text, id, deltas, delta_text);
                }
                EventKind::ToolArguments => {
                    if let Some(&(_, at)) = self.open.iter().find(|(i, _)| *i == ev.tool_index) {
                        self.calls[at].arguments.push_str(text);
                        if !self.d.complete_tool_calls {
                            let index = self.calls[at].delivered_index;
                            if self.run != Run::Call(index) {
                                self.close_run(deltas, delta_text.len());
                                self.run = Run::Call(index);
                                self.run_start = delta_text.len();
                                self.run_head = None;
                            }
                            delta_text.push_str(text);
                        }
                    }
                }
                EventKind::ToolCallEnd => self.end(ev.tool_index, text, deltas, delta_text),
                EventKind::End => {
                    // a call the output cut off never ends: what it held is shown
                    let held = std::mem::take(&mut self.held);
                    self.show(&held, deltas, delta_text);
                }
                EventKind::ReasoningEnd => {}
            }
        }
        self.close_run(deltas, delta_text.len());
        *delivered = events.len();
    }

    /// Content through the edge policy into the message and the deltas: trimmed straight into
    /// the deltas' text, its run opened where it starts (`open_run` closes the previous run
    /// there), then copied into the message.
    fn show(&mut self, text: &str, deltas: &mut Vec<Delta>, delta_text: &mut String) {
        if text.is_empty() {
            return;
        }
        let end = delta_text.len();
        if self.content_edges.push(text, delta_text) {
            self.open_run(Run::Content, deltas, end);
            self.content.push_str(&delta_text[end..]);
        }
    }

    fn open_run(&mut self, kind: Run, deltas: &mut Vec<Delta>, end: usize) {
        if self.run != kind {
            self.close_run(deltas, end);
            self.run = kind;
            self.run_start = end;
            self.run_head = None;
        }
    }

    fn close_run(&mut self, deltas: &mut Vec<Delta>, end: usize) {
        let span = (self.run_start as u32, end as u32);
        match self.run {
            Run::None => return,
            Run::Content => deltas.push(Delta {
                kind: DeltaKind::Content,
                text: span,
                index: 0,
                head: None,
            }),
            Run::Reasoning => deltas.push(Delta {
                kind: DeltaKind::Reasoning,
                text: span,
                index: 0,
                head: None,
            }),
            Run::Call(i) => deltas.push(Delta {
                kind: DeltaKind::Call,
                text: span,
                index: i as u32,
                head: self.run_head,
            }),
        }
        self.run = Run::None;
        self.run_head = None;
    }

    /// A call's first delta (id and name): always a run of its own.
    fn call_delta(
        &mut self,
        at: usize,
        arguments: &str,
        deltas: &mut Vec<Delta>,
        delta_text: &mut String,
    ) {
        self.close_run(deltas, delta_text.len());
        let c = &self.calls[at];
        let id0 = delta_text.len();
        delta_text.push_str(&c.id);
        let name0 = delta_text.len();
        delta_text.push_str(&c.name);
        let end = delta_text.len();
        self.run = Run::Call(c.delivered_index);
        self.run_head = Some(((id0 as u32, name0 as u32), (name0 as u32, end as u32)));
        self.run_start = delta_text.len();
        delta_text.push_str(arguments);
    }

    fn start(
        &mut self,
        tool_index: i32,
        name: &str,
        call_id: &str,
        deltas: &mut Vec<Delta>,
        delta_text: &mut String,
    ) {
        if !self.d.calls_enabled {
            return;
        }
        let planned = self.delivered.len()
            + if self.d.complete_tool_calls {
                self.open.len()
            } else {
                0
            };
        if !self.d.parallel_tool_calls && planned >= 1 {
            return;
        }
        let id = if !call_id.is_empty() && !self.ids.contains(call_id) {
            call_id.to_string()
        } else {
            self.make_id.make(tool_index)
        };
        self.ids.insert(id.clone());
        let at = self.calls.len();
        self.calls.push(Call {
            id,
            name: name.to_string(),
            arguments: String::new(),
            delivered_index: self.delivered.len(),
        });
        if let Some(slot) = self.open.iter_mut().find(|(i, _)| *i == tool_index) {
            slot.1 = at;
        } else {
            self.open.push((tool_index, at));
        }
        if !self.d.complete_tool_calls {
            self.delivered.push(at);
            self.call_delta(at, "", deltas, delta_text);
        }
    }

    /// A call ends; `raw` is its text as the model wrote it, content when it is not delivered.
    fn end(
        &mut self,
        tool_index: i32,
        raw: &str,
        deltas: &mut Vec<Delta>,
        delta_text: &mut String,
    ) {
        let Some(k) = self.open.iter().position(|(i, _)| *i == tool_index) else {
            return;
        };
        let (_, at) = self.open.remove(k);
        if !self.d.complete_tool_calls {
            return;
        }
        let held = std::mem::take(&mut self.held);
        let valid = matches!(
            pyjson::loads(&self.calls[at].arguments, MAX_DEPTH + 1),
            Some(Value::Dict(_))
        );
        if !valid {
            // not delivered: the call's text as the model wrote it (what was held in place) is
            // content
            self.show(raw, deltas, delta_text);
            return;
        }
        self.show(&held, deltas, delta_text);
        self.calls[at].delivered_index = self.delivered.len();
        self.delivered.push(at);
        let args = std::mem::take(&mut self.calls[at].arguments);
        self.call_delta(at, &args, deltas, delta_text);
        self.calls[at].arguments = args;
    }

    pub fn tool_call_count(&self) -> usize {
        self.delivered.len()
    }

    pub fn content(&self) -> &str {
        &self.content
    }

    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    /// The delivered calls: (id, name, arguments).
    pub fn calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.delivered.iter().map(|&at| {
            let c = &self.calls[at];
            (c.id.as_str(), c.name.as_str(), c.arguments.as_str())
        })
    }
}

//! Semantic events and deltas (`engine/events.py`, `messages.Delta`), stored flat: each record's
//! text is a byte range of one arena string per step, so a step allocates nothing once its
//! buffers have grown.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    Content = 0,
    ReasoningStart = 1,
    Reasoning = 2,
    ReasoningEnd = 3,
    ToolCallStart = 4,
    ToolArguments = 5,
    ToolCallEnd = 6,
    End = 7,
}

impl EventKind {
    /// The Python `EventKind` value.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Content => "content",
            EventKind::ReasoningStart => "reasoning_start",
            EventKind::Reasoning => "reasoning",
            EventKind::ReasoningEnd => "reasoning_end",
            EventKind::ToolCallStart => "tool_call_start",
            EventKind::ToolArguments => "tool_arguments",
            EventKind::ToolCallEnd => "tool_call_end",
            EventKind::End => "end",
        }
    }
}

/// A byte range of a `StepOut` arena.
pub type Span = (u32, u32);

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub kind: EventKind,
    /// In `StepOut::event_text`.
    pub text: Span,
    /// The tool call's index (among the calls the model wrote), -1 outside calls.
    pub tool_index: i32,
    /// Output tokens consumed since the previous event.
    pub tokens: u32,
    /// In `StepOut::event_text`; empty unless the format names the call.
    pub call_id: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaKind {
    Reasoning,
    Content,
    /// One `ToolCallDelta`: `index`, arguments in `text`, and on its first delta id and name.
    Call,
}

#[derive(Clone, Copy, Debug)]
pub struct Delta {
    pub kind: DeltaKind,
    /// In `StepOut::delta_text`.
    pub text: Span,
    pub index: u32,
    /// The call's id and name (in `StepOut::delta_text`), on a call's first delta only.
    pub head: Option<(Span, Span)>,
}

/// One step's output: events (what the machine said) and deltas (what the client gets).
#[derive(Default, Debug)]
pub struct StepOut {
    pub events: Vec<Event>,
    pub event_text: String,
    pub deltas: Vec<Delta>,
    pub delta_text: String,
    /// Events before this index were delivered (turned into deltas) already.
    pub delivered: usize,
}

/// What a cleared `StepOut` keeps of a large step's buffers: enough for a step of a few tokens,
/// so such steps reuse them and never reallocate, while an open session between steps does not
/// hold what one large step (a prompt-sized first step, a whole call at once) grew.
const KEEP_EVENTS: usize = 16;
const KEEP_DELTAS: usize = 8;
pub(crate) const KEEP_TEXT: usize = 256;

/// Gives back what a large step grew of a buffer that lives between steps: once its capacity is
/// over `keep` and over twice its length, it shrinks to the larger of the two (its text is kept).
/// A buffer whose length stays about the same is never touched, so steady steps never reallocate.
pub fn give_back(text: &mut String, keep: usize) {
    if text.capacity() > keep && text.capacity() / 2 > text.len() {
        text.shrink_to(keep.max(text.len()));
    }
}

/// `give_back` for a buffer of items (`keep` of them).
pub fn give_back_items<T>(items: &mut Vec<T>, keep: usize) {
    if items.capacity() > keep && items.capacity() / 2 > items.len() {
        items.shrink_to(keep.max(items.len()));
    }
}

impl StepOut {
    /// An empty step (`Default`, usable in a `const`: a thread's scratch step).
    pub const fn new() -> StepOut {
        StepOut {
            events: Vec::new(),
            event_text: String::new(),
            deltas: Vec::new(),
            delta_text: String::new(),
            delivered: 0,
        }
    }

    /// Empties the step; buffers a large step grew beyond the `KEEP_*` capacities shrink back
    /// to them (one reallocation, for a step large enough that its own work dwarfs it).
    pub fn clear(&mut self) {
        self.events.clear();
        self.event_text.clear();
        self.deltas.clear();
        self.delta_text.clear();
        self.delivered = 0;
        if self.events.capacity() > KEEP_EVENTS {
            self.events.shrink_to(KEEP_EVENTS);
        }
        if self.deltas.capacity() > KEEP_DELTAS {
            self.deltas.shrink_to(KEEP_DELTAS);
        }
        if self.event_text.capacity() > KEEP_TEXT {
            self.event_text.shrink_to(KEEP_TEXT);
        }
        if self.delta_text.capacity() > KEEP_TEXT {
            self.delta_text.shrink_to(KEEP_TEXT);
        }
    }

    pub fn event_text(&self, span: Span) -> &str {
        &self.event_text[span.0 as usize..span.1 as usize]
    }

    pub fn delta_text(&self, span: Span) -> &str {
        &self.delta_text[span.0 as usize..span.1 as usize]
    }
}

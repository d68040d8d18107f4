//! Anthropic Messages, streamed (`engine/wire/anthropic.py`'s `MessagesRenderer`).

use super::{api_call_id, push_event, push_string, Finish, Request, WireDelta, WireDialect};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Thinking,
    Text,
    ToolUse,
}

pub struct Anthropic {
    request: Request,
    /// Blocks opened so far.
    blocks: usize,
    open: Option<Kind>,
    /// The open block's text delta event up to its text's value.
    text_head: String,
    started: bool,
}

impl Anthropic {
    pub fn new(request: Request) -> Anthropic {
        Anthropic {
            request,
            blocks: 0,
            open: None,
            text_head: String::new(),
            started: false,
        }
    }

    fn delta(&self, text: &str, out: &mut String) {
        out.push_str(&self.text_head);
        push_string(out, text);
        out.push_str("}}\n\n");
    }

    fn text(&mut self, kind: Kind, text: &str, out: &mut String) {
        if self.open != Some(kind) {
            self.close(out);
            let start = if kind == Kind::Thinking {
                "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"
            } else {
                "{\"type\":\"text\",\"text\":\"\"}"
            };
            self.begin(kind, start, out);
        }
        self.delta(text, out);
    }

    fn begin(&mut self, kind: Kind, start: &str, out: &mut String) {
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some(kind);
        let (delta_type, key) = match kind {
            Kind::Thinking => ("thinking_delta", "thinking"),
            Kind::Text => ("text_delta", "text"),
            Kind::ToolUse => ("input_json_delta", "partial_json"),
        };
        self.text_head = format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\
             \"delta\":{{\"type\":\"{delta_type}\",\"{key}\":"
        );
        push_event(out, "content_block_start", |out| {
            out.push_str(&format!(
                "{{\"type\":\"content_block_start\",\"index\":{index},\"content_block\":{start}}}"
            ));
        });
    }

    fn close(&mut self, out: &mut String) {
        if self.open.take().is_some() {
            let index = self.blocks - 1;
            push_event(out, "content_block_stop", |out| {
                out.push_str(&format!(
                    "{{\"type\":\"content_block_stop\",\"index\":{index}}}"
                ));
            });
        }
    }
}

impl WireDialect for Anthropic {
    fn step(&mut self, deltas: &[WireDelta<'_>], out: &mut String) {
        if !self.started {
            self.started = true;
            push_event(out, "message_start", |out| {
                out.push_str("{\"type\":\"message_start\",\"message\":{\"id\":");
                push_string(out, &self.request.response_id);
                out.push_str(",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
                push_string(out, &self.request.model);
                out.push_str(
                    ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":",
                );
                out.push_str(&self.request.prompt_tokens.to_string());
                out.push_str(",\"output_tokens\":0}}}");
            });
        }
        for delta in deltas {
            if !delta.reasoning.is_empty() {
                self.text(Kind::Thinking, delta.reasoning, out);
            }
            if !delta.content.is_empty() {
                self.text(Kind::Text, delta.content, out);
            }
            for call in delta.calls {
                if let Some(id) = call.id {
                    self.close(out);
                    let mut start = String::from("{\"type\":\"tool_use\",\"id\":");
                    push_string(&mut start, &api_call_id(id, "toolu_"));
                    start.push_str(",\"name\":");
                    push_string(&mut start, call.name);
                    start.push_str(",\"input\":{}}");
                    self.begin(Kind::ToolUse, &start, out);
                }
                if !call.arguments.is_empty() && self.open == Some(Kind::ToolUse) {
                    self.delta(call.arguments, out);
                }
            }
        }
    }

    fn end(&mut self, finish: &Finish<'_>, last: &mut String, closing: &mut String) {
        self.close(last);
        let mut reason = match finish.finish_reason {
            "tool_calls" => "tool_use",
            "length" => "max_tokens",
            _ => "end_turn",
        };
        let mut sequence = None;
        if reason == "end_turn" && finish.finish_reason == "stop" {
            if let Some(stop) = finish.stop_string {
                reason = "stop_sequence";
                sequence = Some(stop);
            }
        }
        push_event(last, "message_delta", |out| {
            out.push_str("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
            push_string(out, reason);
            out.push_str(",\"stop_sequence\":");
            match sequence {
                Some(s) => push_string(out, s),
                None => out.push_str("null"),
            }
            out.push_str(&format!(
                "}},\"usage\":{{\"output_tokens\":{}}}}}",
                finish.completion_tokens
            ));
        });
        push_event(closing, "message_stop", |out| {
            out.push_str("{\"type\":\"message_stop\"}")
        });
    }
}

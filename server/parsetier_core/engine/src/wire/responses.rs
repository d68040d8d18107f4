//! OpenAI Responses, streamed (`engine/wire/responses.py`'s `ResponsesRenderer`).

use super::{
    api_call_id, item_id, json_string, push_event, push_list, push_string, push_u64, Finish,
    Logprob, Request, WireDelta, WireDialect,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
    FunctionCall,
}

impl Kind {
    fn delta_event(self) -> &'static str {
        match self {
            Kind::Reasoning => "response.reasoning_text.delta",
            Kind::Message => "response.output_text.delta",
            Kind::FunctionCall => "response.function_call_arguments.delta",
        }
    }
}

struct Item {
    kind: Kind,
    /// The item's id as a JSON string.
    id: String,
    index: usize,
    call_id: String,
    name: String,
    text: String,
    /// Its output text's logprobs, each as `chat_logprob` JSON.
    logprobs: Vec<String>,
    /// A delta event's fields from `item_id` up to its `delta`'s value.
    at: String,
}

impl Item {
    fn new(kind: Kind, id: String, index: usize) -> Item {
        let id = json_string(&id);
        let content = if kind == Kind::FunctionCall {
            ""
        } else {
            "\"content_index\":0,"
        };
        let at = format!(",\"item_id\":{id},\"output_index\":{index},{content}\"delta\":");
        Item {
            kind,
            id,
            index,
            call_id: String::new(),
            name: String::new(),
            text: String::new(),
            logprobs: Vec::new(),
            at,
        }
    }

    fn push_part(&self, out: &mut String) {
        if self.kind == Kind::Reasoning {
            out.push_str("{\"type\":\"reasoning_text\",\"text\":");
            push_string(out, &self.text);
            out.push('}');
        } else {
            out.push_str("{\"type\":\"output_text\",\"text\":");
            push_string(out, &self.text);
            out.push_str(",\"annotations\":[],\"logprobs\":");
            push_list(out, self.logprobs.iter().map(String::as_str));
            out.push('}');
        }
    }

    fn push_body(&self, status: &str, out: &mut String) {
        out.push_str("{\"id\":");
        out.push_str(&self.id);
        match self.kind {
            Kind::Reasoning => {
                out.push_str(",\"type\":\"reasoning\",\"summary\":[],\"content\":[");
                self.push_part(out);
                out.push_str(&format!("],\"status\":\"{status}\"}}"));
            }
            Kind::Message => {
                out.push_str(&format!(
                    ",\"type\":\"message\",\"role\":\"assistant\",\"status\":\"{status}\",\"content\":["
                ));
                self.push_part(out);
                out.push_str("]}");
            }
            Kind::FunctionCall => {
                out.push_str(",\"type\":\"function_call\",\"call_id\":");
                push_string(out, &self.call_id);
                out.push_str(",\"name\":");
                push_string(out, &self.name);
                out.push_str(",\"arguments\":");
                push_string(out, &self.text);
                out.push_str(&format!(",\"status\":\"{status}\"}}"));
            }
        }
    }

    /// The item as `response.output_item.added` shows it: nothing in it yet.
    fn push_added(&self, out: &mut String) {
        out.push_str("{\"id\":");
        out.push_str(&self.id);
        match self.kind {
            Kind::FunctionCall => {
                out.push_str(",\"type\":\"function_call\",\"call_id\":");
                push_string(out, &self.call_id);
                out.push_str(",\"name\":");
                push_string(out, &self.name);
                out.push_str(",\"arguments\":\"\",\"status\":\"in_progress\"}");
            }
            Kind::Message => out.push_str(
                ",\"type\":\"message\",\"role\":\"assistant\",\"status\":\"in_progress\",\"content\":[]}",
            ),
            Kind::Reasoning => out.push_str(
                ",\"type\":\"reasoning\",\"summary\":[],\"content\":[],\"status\":\"in_progress\"}",
            ),
        }
    }
}

pub struct Responses {
    request: Request,
    items: Vec<Item>,
    /// Whether the last item is open.
    open: bool,
    started: bool,
    sequence: u64,
    /// Logprobs of tokens whose text is not out yet: they go with the next output text.
    pending: Vec<Logprob>,
}

impl Responses {
    pub fn new(request: Request) -> Responses {
        Responses {
            request,
            items: Vec::new(),
            open: false,
            started: false,
            sequence: 0,
            pending: Vec::new(),
        }
    }

    fn open_kind(&self) -> Option<Kind> {
        if self.open {
            self.items.last().map(|i| i.kind)
        } else {
            None
        }
    }

    /// One event; `fields` writes the members after `sequence_number`.
    fn event(&mut self, name: &str, out: &mut String, fields: impl FnOnce(&Self, &mut String)) {
        let sequence = self.sequence;
        self.sequence += 1;
        push_event(out, name, |out| {
            out.push_str(&format!(
                "{{\"type\":\"{name}\",\"sequence_number\":{sequence},"
            ));
            fields(self, out);
            out.push('}');
        });
    }

    /// A text delta event of the open item (its number advances by the text's length).
    fn delta(&mut self, text: &str, tail: &str, out: &mut String) {
        let sequence = self.sequence;
        let chars = text.chars().count() as u64;
        self.sequence = sequence + chars.max(1);
        let item = self.items.last().expect("an open item");
        let name = item.kind.delta_event();
        out.push_str("event: ");
        out.push_str(name);
        out.push_str("\ndata: {\"type\":\"");
        out.push_str(name);
        out.push_str("\",\"sequence_number\":");
        push_u64(out, sequence);
        out.push_str(&item.at);
        push_string(out, text);
        out.push_str(tail);
        out.push_str("}\n\n");
    }

    /// The response object; `error`: a failed response's (`code`, `message`), shown with the
    /// output so far (its last item cut short) and no usage.
    fn push_response(
        &self,
        status: &str,
        finish: Option<&Finish<'_>>,
        error: Option<(&str, &str)>,
        out: &mut String,
    ) {
        let request = &self.request;
        out.push_str("{\"id\":");
        push_string(out, &request.response_id);
        out.push_str(&format!(
            ",\"object\":\"response\",\"created_at\":{},\"model\":",
            request.created
        ));
        push_string(out, &request.model);
        out.push_str(&format!(",\"status\":\"{status}\",\"error\":"));
        match error {
            Some((code, message)) => {
                out.push_str("{\"code\":");
                push_string(out, code);
                out.push_str(",\"message\":");
                push_string(out, message);
                out.push('}');
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"incomplete_details\":");
        let incomplete = status == "incomplete";
        if finish.is_some() && incomplete {
            out.push_str("{\"reason\":\"max_output_tokens\"}");
        } else {
            out.push_str("null");
        }
        out.push_str(
            ",\"instructions\":null,\"metadata\":{},\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\
             \"tools\":[],\"temperature\":null,\"top_p\":null,\"output\":[",
        );
        let Some(finish) = finish else {
            if error.is_some() {
                let last = self.items.len().wrapping_sub(1);
                for (n, item) in self.items.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    item.push_body(if n == last { "incomplete" } else { "completed" }, out);
                }
            }
            out.push_str("],\"usage\":null}");
            return;
        };
        let last = self.items.len().wrapping_sub(1);
        for (n, item) in self.items.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let status = if n == last && incomplete {
                "incomplete"
            } else {
                "completed"
            };
            item.push_body(status, out);
        }
        let prompt = request.prompt_tokens;
        out.push_str(&format!(
            "],\"usage\":{{\"input_tokens\":{prompt},\"input_tokens_details\":{{\"cached_tokens\":0,\
             \"cache_write_tokens\":0}},\
             \"output_tokens\":{},\"output_tokens_details\":{{\"reasoning_tokens\":{}}},\"total_tokens\":{}}}}}",
            finish.completion_tokens,
            finish.reasoning_tokens,
            prompt + finish.completion_tokens
        ));
    }

    /// More text of the open reasoning or function call item, and its delta event.
    fn extend_open(&mut self, text: &str, out: &mut String) {
        self.items.last_mut().expect("open").text.push_str(text);
        self.delta(text, "", out);
    }

    /// More output text for the open message item, with the pending logprobs.
    fn text(&mut self, text: &str, out: &mut String) {
        let item = self.items.last_mut().expect("open");
        item.text.push_str(text);
        if self.pending.is_empty() {
            self.delta(text, ",\"logprobs\":[]", out);
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let mut tail = String::from(",\"logprobs\":");
        push_list(&mut tail, pending.iter().map(|l| l.delta.as_str()));
        item.logprobs.extend(pending.into_iter().map(|l| l.chat));
        self.delta(text, &tail, out);
    }

    fn ensure(&mut self, kind: Kind, out: &mut String) {
        if self.open_kind() == Some(kind) {
            return;
        }
        self.close(out, "completed");
        let index = self.items.len();
        let prefix = if kind == Kind::Reasoning {
            "rs_"
        } else {
            "msg_"
        };
        let item = Item::new(
            kind,
            item_id(prefix, &self.request.response_id, index),
            index,
        );
        self.add(item, out);
        self.event("response.content_part.added", out, |r, out| {
            let item = r.items.last().expect("open");
            out.push_str(&format!(
                "\"item_id\":{},\"output_index\":{index},\"content_index\":0,\"part\":",
                item.id
            ));
            out.push_str(if kind == Kind::Message {
                "{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":[]}"
            } else {
                "{\"type\":\"reasoning_text\",\"text\":\"\"}"
            });
        });
    }

    fn add(&mut self, item: Item, out: &mut String) {
        self.items.push(item);
        self.open = true;
        self.event("response.output_item.added", out, |r, out| {
            let item = r.items.last().expect("open");
            out.push_str(&format!("\"output_index\":{},\"item\":", item.index));
            item.push_added(out);
        });
    }

    fn close(&mut self, out: &mut String, status: &str) {
        if !std::mem::replace(&mut self.open, false) {
            return;
        }
        let kind = self.items.last().expect("an item").kind;
        let at = |r: &Self, out: &mut String| {
            let item = r.items.last().expect("an item");
            out.push_str(&format!(
                "\"item_id\":{},\"output_index\":{}",
                item.id, item.index
            ));
        };
        match kind {
            Kind::FunctionCall => {
                self.event("response.function_call_arguments.done", out, |r, out| {
                    at(r, out);
                    let item = r.items.last().expect("an item");
                    out.push_str(",\"name\":");
                    push_string(out, &item.name);
                    out.push_str(",\"arguments\":");
                    push_string(out, &item.text);
                });
            }
            Kind::Reasoning | Kind::Message => {
                let name = if kind == Kind::Reasoning {
                    "response.reasoning_text.done"
                } else {
                    "response.output_text.done"
                };
                self.event(name, out, |r, out| {
                    at(r, out);
                    let item = r.items.last().expect("an item");
                    out.push_str(",\"content_index\":0,\"text\":");
                    push_string(out, &item.text);
                    if kind == Kind::Message {
                        out.push_str(",\"logprobs\":");
                        push_list(out, item.logprobs.iter().map(String::as_str));
                    }
                });
                self.event("response.content_part.done", out, |r, out| {
                    at(r, out);
                    out.push_str(",\"content_index\":0,\"part\":");
                    r.items.last().expect("an item").push_part(out);
                });
            }
        }
        self.event("response.output_item.done", out, |r, out| {
            let item = r.items.last().expect("an item");
            out.push_str(&format!("\"output_index\":{},\"item\":", item.index));
            item.push_body(status, out);
        });
    }
}

impl WireDialect for Responses {
    fn sequence(&self) -> u64 {
        self.sequence
    }

    fn step(&mut self, deltas: &[WireDelta<'_>], out: &mut String) {
        if !self.started {
            self.started = true;
            for name in ["response.created", "response.in_progress"] {
                self.event(name, out, |r, out| {
                    out.push_str("\"response\":");
                    r.push_response("in_progress", None, None, out);
                });
            }
        }
        for delta in deltas {
            if !delta.reasoning.is_empty() {
                self.pending.clear();
                self.ensure(Kind::Reasoning, out);
                self.extend_open(delta.reasoning, out);
            }
            if !delta.logprobs.is_empty() {
                self.pending.extend_from_slice(delta.logprobs);
            }
            if !delta.content.is_empty() {
                self.ensure(Kind::Message, out);
                self.text(delta.content, out);
            }
            for call in delta.calls {
                self.pending.clear();
                if let Some(id) = call.id {
                    self.close(out, "completed");
                    let index = self.items.len();
                    let mut item = Item::new(
                        Kind::FunctionCall,
                        item_id("fc_", &self.request.response_id, index),
                        index,
                    );
                    item.call_id = api_call_id(id, "call_");
                    item.name = call.name.to_string();
                    self.add(item, out);
                }
                if !call.arguments.is_empty() && self.open_kind() == Some(Kind::FunctionCall) {
                    self.extend_open(call.arguments, out);
                }
            }
        }
    }

    fn fail(&mut self, code: &str, message: &str, failed_code: &str, out: &mut String) {
        self.event("error", out, |_, out| {
            out.push_str("\"code\":");
            push_string(out, code);
            out.push_str(",\"message\":");
            push_string(out, message);
            out.push_str(",\"param\":null");
        });
        if !self.started {
            return;
        }
        if !self.pending.is_empty() && self.open_kind() == Some(Kind::Message) {
            self.text("", out);
        }
        self.close(out, "incomplete");
        self.event("response.failed", out, |r, out| {
            out.push_str("\"response\":");
            r.push_response("failed", None, Some((failed_code, message)), out);
        });
    }

    fn end(&mut self, finish: &Finish<'_>, last: &mut String, closing: &mut String) {
        let status = match finish.finish_reason {
            "length" => "incomplete",
            "abort" => "cancelled",
            _ => "completed",
        };
        if !self.pending.is_empty() && self.open_kind() == Some(Kind::Message) {
            self.text("", last);
        }
        let item_status = if status == "incomplete" {
            "incomplete"
        } else {
            "completed"
        };
        self.close(last, item_status);
        let name = if status == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.event(name, closing, |r, out| {
            out.push_str("\"response\":");
            r.push_response(status, Some(finish), None, out);
        });
    }
}

//! OpenAI chat completions, streamed (`engine/wire/chat.py`'s `ChatRenderer`).

use super::{
    api_call_id, push_ids, push_list, push_string, push_usage_openai, Finish, Request, WireDelta,
    WireDialect,
};

const PLAIN_TAIL: &str = "},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

pub struct Chat {
    request: Request,
    /// Every chunk up to its `choices[0]`'s fields.
    head: String,
    role_sent: bool,
}

impl Chat {
    pub fn new(request: Request) -> Chat {
        let mut head = String::from("data: {\"id\":");
        push_string(&mut head, &request.response_id);
        head.push_str(",\"object\":\"chat.completion.chunk\",\"created\":");
        head.push_str(&request.created.to_string());
        head.push_str(",\"model\":");
        push_string(&mut head, &request.model);
        head.push_str(",\"choices\":[{\"index\":");
        head.push_str(&request.choice_index.to_string());
        head.push(',');
        Chat {
            request,
            head,
            role_sent: false,
        }
    }

    /// The choice's first chunk: the role alone.
    fn role(&mut self, out: &mut String) {
        if self.role_sent {
            return;
        }
        self.role_sent = true;
        out.push_str(&self.head);
        out.push_str(
            "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        );
    }

    fn chunk(&self, delta: &WireDelta<'_>, out: &mut String) {
        out.push_str(&self.head);
        if delta.calls.is_empty() && delta.logprobs.is_empty() && delta.token_ids.is_empty() {
            if delta.reasoning.is_empty() {
                out.push_str("\"delta\":{\"content\":");
                push_string(out, delta.content);
                out.push_str(PLAIN_TAIL);
                return;
            }
            if delta.content.is_empty() {
                out.push_str("\"delta\":{\"reasoning_content\":");
                push_string(out, delta.reasoning);
                out.push_str(PLAIN_TAIL);
                return;
            }
        }
        out.push_str("\"delta\":{");
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !first {
                out.push(',');
            }
            first = false;
        };
        if !delta.reasoning.is_empty() {
            sep(out);
            out.push_str("\"reasoning_content\":");
            push_string(out, delta.reasoning);
        }
        if !delta.content.is_empty() {
            sep(out);
            out.push_str("\"content\":");
            push_string(out, delta.content);
        }
        if !delta.calls.is_empty() {
            sep(out);
            out.push_str("\"tool_calls\":[");
            for (n, call) in delta.calls.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str("{\"index\":");
                out.push_str(&call.index.to_string());
                if let Some(id) = call.id {
                    out.push_str(",\"id\":");
                    push_string(out, &api_call_id(id, "call_"));
                    out.push_str(",\"type\":\"function\",\"function\":{\"name\":");
                    push_string(out, call.name);
                    out.push_str(",\"arguments\":");
                } else {
                    out.push_str(",\"function\":{\"arguments\":");
                }
                push_string(out, call.arguments);
                out.push_str("}}");
            }
            out.push(']');
        }
        out.push('}');
        if delta.logprobs.is_empty() {
            out.push_str(",\"logprobs\":null,\"finish_reason\":null");
        } else {
            out.push_str(",\"logprobs\":{\"content\":");
            push_list(out, delta.logprobs.iter().map(|l| l.chat.as_str()));
            out.push_str("},\"finish_reason\":null");
        }
        if !delta.token_ids.is_empty() {
            out.push_str(",\"token_ids\":");
            push_ids(out, delta.token_ids);
        }
        out.push_str("}]}\n\n");
    }
}

impl WireDialect for Chat {
    fn step(&mut self, deltas: &[WireDelta<'_>], out: &mut String) {
        self.role(out);
        for delta in deltas {
            self.chunk(delta, out);
        }
    }

    fn end(&mut self, finish: &Finish<'_>, last: &mut String, closing: &mut String) {
        last.push_str(&self.head);
        last.push_str("\"delta\":{},\"logprobs\":null,\"finish_reason\":");
        push_string(last, finish.finish_reason);
        last.push_str("}]}\n\n");
        let request = &self.request;
        if request.include_usage {
            closing.push_str("data: {\"id\":");
            push_string(closing, &request.response_id);
            closing.push_str(",\"object\":\"chat.completion.chunk\",\"created\":");
            closing.push_str(&request.created.to_string());
            closing.push_str(",\"model\":");
            push_string(closing, &request.model);
            closing.push_str(",\"choices\":[],\"usage\":");
            push_usage_openai(
                closing,
                request.prompt_tokens,
                finish.completion_tokens,
                finish.reasoning_tokens,
            );
            closing.push_str("}\n\n");
        }
        closing.push_str("data: [DONE]\n\n");
    }
}

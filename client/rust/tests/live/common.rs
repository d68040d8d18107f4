//! Fixtures shared by the live tests: the real Qwen3 encoding of a reasoning + two tool calls
//! output, and the client of the server the harness started.

use parsetier_client::{pb, Client, Finish, Session};

/// The real Qwen3 tokenizer's encoding (add_special_tokens=False) of
/// `<think>\nNeed weather.\n</think>\n\nChecking both cities.\n` followed by two `<tool_call>`s
/// of get_weather (Paris, Tokyo). 151667/151668 are <think>/</think>, 151657/151658
/// <tool_call>/</tool_call>.
pub const QWEN3_OUTPUT: [u32; 51] = [
    151667, 198, 23657, 9104, 624, 151668, 271, 40129, 2176, 9720, 624, 151657, 198, 4913, 606, 788, 330, 455, 69364,
    497, 330, 16370, 788, 5212, 8926, 788, 330, 59604, 95642, 151658, 198, 151657, 198, 4913, 606, 788, 330, 455,
    69364, 497, 330, 16370, 788, 5212, 8926, 788, 330, 52854, 16032, 95642, 151658,
];

/// Qwen3's `<|im_end|>`.
pub const IM_END: u32 = 151645;

pub const WEATHER_TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#;

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run these tests through tests/test_rust_client.py, which starts the servers")
    })
}

/// A plaintext client of PARSETIER_SERVER.
pub fn client() -> Client {
    Client::builder(env("PARSETIER_SERVER")).insecure().build().expect("client")
}

pub fn stop_at_im_end() -> Finish {
    Finish::stop_token(IM_END)
}

pub fn one_per_step(ids: &[u32]) -> Vec<Vec<u32>> {
    ids.iter().map(|&id| vec![id]).collect()
}

/// Sends `QWEN3_OUTPUT` to `session` one id per message, then finishes at `<|im_end|>`.
pub async fn send_output(session: &Session) {
    for step in one_per_step(&QWEN3_OUTPUT) {
        session.send([step]).await.expect("send");
    }
    session.finish(stop_at_im_end()).await.expect("finish");
}

/// Wire options of OpenAI chat's streamed dialect with `response_id`; tests set the other fields
/// with `..streamed_chat(id)`.
pub fn streamed_chat(response_id: &str) -> pb::WireOptions {
    pb::WireOptions {
        dialect: pb::WireDialect::OpenaiChat as i32,
        response_id: response_id.into(),
        stream: true,
        ..Default::default()
    }
}

/// The message the output parses to (tool call ids left out: they derive from the request).
pub fn want_message() -> pb::AssistantMessage {
    let call = |city: &str| pb::ToolCall {
        id: String::new(),
        name: "get_weather".into(),
        arguments: format!(r#"{{"city": "{city}"}}"#),
    };
    pb::AssistantMessage {
        reasoning: "Need weather.".into(),
        content: "Checking both cities.".into(),
        tool_calls: vec![call("Paris"), call("Tokyo")],
    }
}

pub fn without_ids(message: &pb::AssistantMessage) -> pb::AssistantMessage {
    let mut out = message.clone();
    for call in &mut out.tool_calls {
        call.id.clear();
    }
    out
}

/// Checks the final result of QWEN3_OUTPUT with the weather tools.
pub fn check_final(final_message: &pb::Final) {
    assert_eq!(final_message.finish_reason, pb::FinishReason::ToolCalls as i32);
    assert_eq!(
        final_message.usage,
        Some(pb::Usage { completion_tokens: QWEN3_OUTPUT.len() as u32, reasoning_tokens: 5 })
    );
    let message = final_message.message.as_ref().expect("message");
    assert_eq!(without_ids(message), want_message());
    for call in &message.tool_calls {
        assert!(call.id.starts_with("chatcmpl-tool-"), "call id {:?}", call.id);
    }
}

/// Rebuilds the assistant message from deltas as a chat-completions client would, checking the
/// fragment rules: a call's id and name arrive once, on its first fragment, in index order.
pub fn join_deltas<'a>(deltas: impl IntoIterator<Item = &'a pb::Delta>) -> pb::AssistantMessage {
    let mut joined = pb::AssistantMessage::default();
    for delta in deltas {
        joined.reasoning.push_str(&delta.reasoning);
        joined.content.push_str(&delta.content);
        for fragment in &delta.tool_calls {
            let index = fragment.index as usize;
            if index == joined.tool_calls.len() {
                assert!(!fragment.id.is_empty() && !fragment.name.is_empty(), "first fragment {fragment:?}");
                joined.tool_calls.push(pb::ToolCall {
                    id: fragment.id.clone(),
                    name: fragment.name.clone(),
                    arguments: String::new(),
                });
            } else {
                assert!(index < joined.tool_calls.len(), "call {index} started early");
                assert!(fragment.id.is_empty() && fragment.name.is_empty(), "id or name again: {fragment:?}");
            }
            joined.tool_calls[index].arguments.push_str(&fragment.arguments);
        }
    }
    joined
}

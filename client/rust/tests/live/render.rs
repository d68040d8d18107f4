//! `Render`, then the output session opened with the `Open` it returned, unchanged.

use parsetier_client::{pb, Code, RenderOptions};
use serde_json::{json, Value};

use crate::common::*;

/// Qwen3's generation prompt, the end of every chat prompt: `<|im_start|>assistant\n`.
const GENERATION_PROMPT: [u32; 3] = [151644, 77091, 198];

fn chat_body(extra: Value) -> Vec<u8> {
    let tools: Value = serde_json::from_str(WEATHER_TOOLS).expect("tools");
    let mut body = json!({
        "model": "served-name",
        "messages": [{"role": "user", "content": "Weather in Paris and Tokyo?"}],
        "tools": tools,
        "max_tokens": 64,
    });
    for (key, value) in extra.as_object().expect("an object") {
        body[key] = value.clone();
    }
    serde_json::to_vec(&body).expect("JSON")
}

/// The prompt ends in the generation prompt, the `Open` carries the request's tools and wire
/// values, and the output parses, with that `Open`, into the calls and the chat completion body.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn render_then_parse_with_its_open() {
    let client = client();
    let options = RenderOptions::new("qwen3", pb::WireDialect::OpenaiChat, chat_body(json!({})))
        .request_id("rust-render")
        .created(1_700_000_000)
        .return_prompt_text();
    let rendered = client.render(options).await.expect("render");
    let prompt = &rendered.prompt_token_ids;
    assert_eq!(prompt[prompt.len() - 3..], GENERATION_PROMPT);
    assert!(rendered.prompt_text.ends_with("<|im_start|>assistant\n"), "{}", rendered.prompt_text);
    let open = &rendered.open;
    assert_eq!((open.model.as_str(), open.request_id.as_str()), ("qwen3", "rust-render"));
    assert_eq!(&open.prompt_token_ids, prompt);
    let tools: Value = serde_json::from_str(&open.tools_json).expect("tools_json");
    assert_eq!(tools.as_array().map(Vec::len), Some(1));
    let wire = open.wire.as_ref().expect("wire");
    assert_eq!(wire.dialect, pb::WireDialect::OpenaiChat as i32);
    assert_eq!(
        (wire.model.as_str(), wire.created, wire.prompt_tokens),
        ("served-name", 1_700_000_000, prompt.len() as u32)
    );
    assert!(wire.response_id.starts_with("chatcmpl-"), "{}", wire.response_id);
    assert_eq!((rendered.sampling.max_tokens, rendered.n()), (Some(64), 1));
    assert!(rendered.sampling.stop_token_ids.contains(&IM_END));
    assert!(rendered.constraint.is_none());

    let (final_message, _) = client
        .parse_stream(rendered.open_options(), one_per_step(&QWEN3_OUTPUT), stop_at_im_end())
        .await
        .expect("parse_stream");
    assert_eq!(final_message.message.as_ref().map(without_ids), Some(want_message()));
    let body: Value = serde_json::from_slice(&final_message.wire).expect("a chat completion body");
    assert_eq!(body["id"], json!(wire.response_id));
    assert_eq!(body["model"], json!("served-name"));
    assert_eq!(body["choices"][0]["finish_reason"], json!("tool_calls"));
    assert_eq!(body["usage"]["prompt_tokens"], json!(prompt.len()));
}

/// An Anthropic Messages body renders; its `Open` answers in Anthropic's bytes.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn render_anthropic_messages() {
    let client = client();
    let body = json!({
        "model": "claude-ish", "max_tokens": 100, "system": "Be brief.",
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Tokyo?"}]}],
    });
    let options =
        RenderOptions::new("qwen3", pb::WireDialect::AnthropicMessages, serde_json::to_vec(&body).expect("JSON"));
    let rendered = client.render(options).await.expect("render");
    assert_eq!(rendered.open.wire.as_ref().map(|w| w.dialect), Some(pb::WireDialect::AnthropicMessages as i32));
    assert_eq!(rendered.sampling.max_tokens, Some(100));
    let once =
        client.parse_once(rendered.open_options(), QWEN3_OUTPUT.to_vec(), stop_at_im_end()).await.expect("parse_once");
    let message: Value = serde_json::from_slice(&once.r#final.expect("final").wire).expect("a message body");
    let kinds: Vec<&str> =
        message["content"].as_array().expect("content").iter().filter_map(|b| b["type"].as_str()).collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"], "{message}");
    assert_eq!(message["content"][2]["input"], json!({"city": "Paris"}));
    assert_eq!(message["stop_reason"], json!("tool_use"));
}

/// `n` choices are `n` sessions (`choice(i)`); a forced tool comes with its constraint.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn render_choices_and_constraint() {
    let body = chat_body(json!({"n": 3, "tool_choice": "required"}));
    let rendered =
        client().render(RenderOptions::new("qwen3", pb::WireDialect::OpenaiChat, body)).await.expect("render");
    assert_eq!(rendered.n(), 3);
    assert_eq!((rendered.choice(2).message().choice_index, rendered.open_options().message().choice_index), (2, 0));
    assert!(!rendered.constraint.expect("a required tool's constraint").lark_grammar.is_empty());
}

/// A refused request is the request's own status, with the API's error body to forward.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn render_errors_carry_the_dialects_error_body() {
    let client = client();
    let error = client
        .render(RenderOptions::new("no-such-model", pb::WireDialect::OpenaiChat, chat_body(json!({}))))
        .await
        .expect_err("an unknown model");
    assert_eq!((error.code(), error.http_status()), (Code::NotFound, 404));
    let image = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]);
    let body = chat_body(json!({"messages": image}));
    let error =
        client.render(RenderOptions::new("qwen3", pb::WireDialect::OpenaiChat, body)).await.expect_err("an image");
    assert_eq!((error.code(), error.http_status()), (Code::InvalidArgument, 400));
    let wire: Value = serde_json::from_slice(&error.wire().expect("the error body")).expect("JSON");
    assert_eq!(wire["error"]["type"], json!("invalid_request_error"));
    assert!(wire["error"]["message"].as_str().expect("message").contains("messages[0].content[0]"), "{wire}");
    let error = client
        .render(RenderOptions::new("qwen3", pb::WireDialect::Unspecified, b"{}".to_vec()))
        .await
        .expect_err("no dialect");
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(error.wire(), None);
}

//! Logprob steps resolved by the server: the proto's numbers on the deltas, and OpenAI's two
//! JSON shapes of them in the wire bytes the server writes (the client shapes none of it).

use parsetier_client::{logprob_step, logprobs, pb, rune_offset, Alternative, Finish, OpenOptions};
use serde_json::Value;

use crate::common::*;

/// Qwen3's encoding of "Hi 你好 🎉👍🏽": 11162, 236, 231 are the bytes of " 🎉" split over three
/// tokens, each of which decodes alone as U+FFFD.
const EMOJI_OUTPUT: [u32; 8] = [13048, 220, 108386, 11162, 236, 231, 144349, 145375];

/// The JSON of an entry's `bytes`, as a list of byte values.
fn json_bytes(entry: &Value) -> Vec<u8> {
    entry["bytes"].as_array().expect("bytes").iter().map(|b| b.as_u64().expect("byte") as u8).collect()
}

#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn logprob_steps_resolve_and_the_wire_carries_them() {
    let chat = streamed_chat("chatcmpl-lp");
    let session = client().open(OpenOptions::new("qwen3").return_token_ids().wire(chat)).await.expect("open");
    for (i, &id) in EMOJI_OUTPUT.iter().enumerate() {
        let top =
            vec![vec![Alternative { token_id: id, logprob: -0.25 }, Alternative { token_id: 13048, logprob: -3.0 }]];
        session.send_steps(vec![logprob_step(vec![id], vec![-(i as f32) / 4.0], &top)]).await.expect("send");
    }
    session.finish(Finish::stop()).await.expect("finish");
    let (_, mut replies) = session.split();
    let (mut deltas, mut wire) = (Vec::new(), Vec::new());
    while let Some(reply) = replies.recv().await {
        let reply = reply.expect("reply");
        wire.extend_from_slice(&reply.wire);
        if let Some(last) = &reply.r#final {
            wire.extend_from_slice(&last.wire);
        }
        deltas.extend(reply.deltas);
    }
    let resolved = logprobs(&deltas);
    assert_eq!(resolved.len(), EMOJI_OUTPUT.len());
    let tokens: Vec<_> = resolved.iter().map(|lp| lp.token.as_str()).collect();
    assert_eq!(tokens.join("|"), "Hi| |你好| ||🎉|👍|🏽");
    let bytes: Vec<u8> = resolved.iter().flat_map(|lp| lp.bytes.iter().copied()).collect();
    assert_eq!(String::from_utf8(bytes).expect("utf-8"), "Hi 你好 🎉👍🏽");
    let top = &resolved[5].top_logprobs;
    assert_eq!((top[0].token.as_str(), top[1].token.as_str()), ("🎉", "\u{fffd}Hi"));
    assert_eq!(resolved[2].logprob, -0.5);
    let ids: Vec<u32> = deltas.iter().flat_map(|d| d.token_ids.iter().copied()).collect();
    assert_eq!(ids, EMOJI_OUTPUT, "return_token_ids");

    // The chunks' logprobs.content, joined, are the same entries in OpenAI chat's shape.
    let wire = String::from_utf8(wire).expect("UTF-8");
    let mut content = Vec::new();
    for event in wire.trim().split("\n\n") {
        let data = event.strip_prefix("data: ").expect("an SSE event");
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).expect("a chunk is JSON");
        for choice in chunk["choices"].as_array().expect("choices") {
            if let Some(entries) = choice["logprobs"]["content"].as_array() {
                content.extend(entries.iter().cloned());
            }
        }
    }
    assert_eq!(content.len(), resolved.len(), "{wire}");
    for (entry, lp) in content.iter().zip(&resolved) {
        assert_eq!(entry["token"], lp.token.as_str());
        assert_eq!(entry["logprob"].as_f64(), Some(f64::from(lp.logprob)));
        assert_eq!(json_bytes(entry), lp.bytes);
        let alternatives = entry["top_logprobs"].as_array().expect("top_logprobs");
        assert_eq!(alternatives.len(), lp.top_logprobs.len());
        for (alternative, want) in alternatives.iter().zip(&lp.top_logprobs) {
            assert_eq!(alternative["token"], want.token.as_str());
            assert_eq!(alternative["logprob"].as_f64(), Some(f64::from(want.logprob)));
            assert_eq!(json_bytes(alternative), want.bytes);
        }
    }
}

/// A completion session in OpenAI completions' dialect gets the four logprob lists in the body
/// the server writes: a masked token's -inf as -9999.0 (JSON has no infinity), offsets in code
/// points (`rune_offset` slices the text there).
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn completion_logprobs_in_the_wire() {
    let wire = pb::WireOptions {
        dialect: pb::WireDialect::OpenaiCompletions as i32,
        response_id: "cmpl-lp".into(),
        ..Default::default()
    };
    let options = OpenOptions::new("qwen3").completion(true).output(pb::OutputKind::FinalOnly).wire(wire);
    let session = client().open(options).await.expect("open");
    for (i, &id) in EMOJI_OUTPUT.iter().enumerate() {
        let logprob = if i == 1 { f32::NEG_INFINITY } else { -0.5 };
        let top = vec![vec![
            Alternative { token_id: id, logprob: -0.5 },
            Alternative { token_id: 13048, logprob: f32::NEG_INFINITY },
        ]];
        session.send_steps(vec![logprob_step(vec![id], vec![logprob], &top)]).await.expect("send");
    }
    session.finish(Finish::length()).await.expect("finish");
    let (_, replies) = session.split();
    let mut pieces = replies.wire();
    let mut body = Vec::new();
    while let Some(piece) = pieces.recv().await {
        body.extend_from_slice(&piece.expect("piece"));
    }
    let body = String::from_utf8(body).expect("UTF-8");
    assert!(!body.contains("Infinity") && body.contains("-9999.0"), "{body}");
    let completion: Value = serde_json::from_str(&body).expect("the body is JSON");
    let choice = &completion["choices"][0];
    let text = choice["text"].as_str().expect("text");
    assert_eq!(text, "Hi 你好 🎉👍🏽");
    let lists = &choice["logprobs"];
    let tokens: Vec<&str> =
        lists["tokens"].as_array().expect("tokens").iter().map(|t| t.as_str().expect("token")).collect();
    assert_eq!(tokens.concat(), text);
    assert_eq!(lists["token_logprobs"][0].as_f64(), Some(-0.5));
    assert_eq!(lists["token_logprobs"][1].as_f64(), Some(-9999.0));
    for (i, offset) in lists["text_offset"].as_array().expect("text_offset").iter().enumerate() {
        let at = rune_offset(text, offset.as_u64().expect("offset") as usize).expect("offset within the text");
        assert!(text[at..].starts_with(tokens[i]), "offset {offset} of token {i}");
    }
    // The alternatives are {token: logprob}; a token text repeated keeps its last logprob.
    assert_eq!(lists["top_logprobs"][0]["Hi"].as_f64(), Some(-9999.0));
}

/// A bad logprob step is the server's InvalidArgument naming the field.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn bad_logprobs_are_invalid_argument() {
    let mut session = client().open(OpenOptions::new("qwen3")).await.expect("open");
    session.send_steps(vec![logprob_step(vec![9707, 220], vec![-0.5], &[])]).await.expect("send");
    let error = loop {
        match session.recv().await {
            Some(Err(error)) => break error,
            Some(Ok(_)) => continue,
            None => panic!("no error"),
        }
    };
    assert_eq!(error.code(), parsetier_client::Code::InvalidArgument, "{error}");
    assert!(error.message().contains("token_logprobs"), "{error}");
}

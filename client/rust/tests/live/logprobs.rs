//! Logprob steps resolved by the server, mapped onto OpenAI's two shapes.

use parsetier_client::{logprob_step, logprobs, rune_offset, to_chat, to_completion, Alternative, Finish, OpenOptions};

use crate::common::*;

/// Qwen3's encoding of "Hi 你好 🎉👍🏽": 11162, 236, 231 are the bytes of " 🎉" split over three
/// tokens, each of which decodes alone as U+FFFD.
const EMOJI_OUTPUT: [u32; 8] = [13048, 220, 108386, 11162, 236, 231, 144349, 145375];

#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn logprob_steps_resolve_in_both_openai_shapes() {
    let session = client().open(OpenOptions::new("qwen3").return_token_ids()).await.expect("open");
    for (i, &id) in EMOJI_OUTPUT.iter().enumerate() {
        let top =
            vec![vec![Alternative { token_id: id, logprob: -0.25 }, Alternative { token_id: 13048, logprob: -3.0 }]];
        session.send_steps(vec![logprob_step(vec![id], vec![-(i as f32) / 4.0], &top)]).await.expect("send");
    }
    session.finish(Finish::stop()).await.expect("finish");
    let (_, replies) = session.split();
    let mut stream = replies.deltas();
    let mut deltas = Vec::new();
    while let Some(delta) = stream.recv().await {
        deltas.push(delta.expect("delta"));
    }
    let resolved = logprobs(&deltas);
    assert_eq!(resolved.len(), EMOJI_OUTPUT.len());
    let chat = to_chat(&resolved);
    let tokens: Vec<_> = chat.content.iter().map(|c| c.token.as_str()).collect();
    assert_eq!(tokens.join("|"), "Hi| |你好| ||🎉|👍|🏽");
    let bytes: Vec<u8> = chat.content.iter().flat_map(|c| c.bytes.iter().copied()).collect();
    assert_eq!(String::from_utf8(bytes).expect("utf-8"), "Hi 你好 🎉👍🏽");
    let top = &chat.content[5].top_logprobs;
    assert_eq!((top[0].token.as_str(), top[1].token.as_str()), ("🎉", "\u{fffd}Hi"));
    assert_eq!(chat.content[2].logprob, -0.5);

    let completion = to_completion(&resolved, 0);
    let text: String = completion.tokens.concat();
    for (i, &offset) in completion.text_offset.iter().enumerate() {
        let at = rune_offset(&text, offset).expect("offset within the text");
        assert!(text[at..].starts_with(&completion.tokens[i]), "offset {offset} of token {i}");
    }
    // A token text repeated among the alternatives keeps its last logprob, as a JSON object does.
    assert_eq!(completion.top_logprobs[0].get("Hi"), Some(&-3.0));
    assert_eq!(completion.top_logprobs[1].get(" "), Some(&-0.25));
    let ids: Vec<u32> = deltas.iter().flat_map(|d| d.token_ids.iter().copied()).collect();
    assert_eq!(ids, EMOJI_OUTPUT, "return_token_ids");
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

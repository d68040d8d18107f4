//! Replies past the server's --max-reply-bytes arrive in parts; sessions and batches join them.
//! The harness starts a server with a small limit (PARSETIER_PARTS_SERVER, PARSETIER_PARTS_LIMIT).

use parsetier_client::{pb, Client, Finish, OpenOptions};
use prost::Message;
use tokio_stream::StreamExt;

use crate::common::env;

const HELLO: u32 = 9707;
const IDS: usize = 100_000; // "Hello" each: 500 kB of content, in the deltas and again in the final

fn parts_client() -> Client {
    Client::builder(env("PARSETIER_PARTS_SERVER")).insecure().build().expect("client")
}

#[tokio::test]
#[ignore = "live: needs a server with a small reply limit, PARSETIER_PARTS_* (tests/test_rust_client.py starts one)"]
async fn parts_raw_stream_is_in_parts() {
    let limit: usize = env("PARSETIER_PARTS_LIMIT").parse().expect("PARSETIER_PARTS_LIMIT");
    let request = pb::ParseRequest {
        open: Some(OpenOptions::new("qwen3").message().clone()),
        steps: vec![pb::Step { token_ids: vec![HELLO; IDS], ..Default::default() }],
        finish: Some(pb::Finish::default()),
    };
    let mut stub = parts_client().stub();
    let mut replies = stub.parse(tokio_stream::iter([request])).await.expect("parse").into_inner();
    let mut parts = 0;
    while let Some(reply) = replies.next().await {
        let reply = reply.expect("reply");
        assert!(
            reply.part.is_some() && reply.encoded_len() <= limit,
            "{} bytes, want parts within {limit}",
            reply.encoded_len()
        );
        parts += 1;
    }
    assert!(parts >= 2, "{parts} parts: the reply should exceed the limit");
}

#[tokio::test]
#[ignore = "live: needs a server with a small reply limit, PARSETIER_PARTS_* (tests/test_rust_client.py starts one)"]
async fn parts_session_joins_them() {
    let want = "Hello".repeat(IDS);
    let (final_message, deltas) = parts_client()
        .parse_stream(OpenOptions::new("qwen3"), vec![vec![HELLO; IDS]], Finish::stop())
        .await
        .expect("stream");
    let streamed: String = deltas.iter().map(|d| d.content.as_str()).collect();
    assert!(streamed == want && final_message.message.map(|m| m.content) == Some(want.clone()));
}

#[tokio::test]
#[ignore = "live: needs a server with a small reply limit, PARSETIER_PARTS_* (tests/test_rust_client.py starts one)"]
async fn parts_batch_joins_them() {
    let want = "Hello".repeat(IDS);
    let mut batch = parts_client().batch().await.expect("batch");
    batch.open("big", OpenOptions::new("qwen3"));
    batch.feed("big", vec![HELLO; IDS]);
    batch.finish("big", Finish::stop());
    let outs = batch.step().await.expect("step");
    assert_eq!(outs.len(), 1);
    let content = outs[0].r#final.as_ref().and_then(|f| f.message.as_ref()).map(|m| m.content.clone());
    assert_eq!(content, Some(want));

    // Packed items (with token_counts) whose packed outputs exceed the limit together.
    let keys: Vec<String> = (0..16).map(|i| format!("packed-{i}")).collect();
    for key in &keys {
        batch.open(key, OpenOptions::new("qwen3"));
    }
    batch.step().await.expect("open step");
    for key in &keys {
        batch.feed(key, vec![HELLO; 4000]);
    }
    let outs = batch.step().await.expect("packed step");
    let got: Vec<_> =
        outs.iter().map(|o| (o.key.clone(), o.deltas.iter().map(|d| d.content.len()).sum::<usize>())).collect();
    let want: Vec<_> = keys.iter().map(|k| (k.clone(), 5 * 4000)).collect();
    assert_eq!(got, want);
    batch.close().await.expect("close");
}

//! `WireJoin`: the sessions of a request's `n` > 1 choices joined into one response.

use parsetier_client::{pb, OpenOptions, WireJoin};
use serde_json::Value;

use crate::common::*;

/// The SSE events of a joined stream, as JSON (the last, `[DONE]`, checked and left out).
fn events(out: &str) -> Vec<Value> {
    let events: Vec<&str> = out.trim().split("\n\n").collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"), "the joined stream ends with [DONE]: {out}");
    assert_eq!(out.matches("[DONE]").count(), 1, "{out}");
    let chunks = &events[..events.len() - 1];
    chunks
        .iter()
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("an SSE event")).expect("JSON"))
        .collect()
}

/// Feeds a step's outputs to `join`, choice 1's first (keys `c0`, `c1`), gathering the bytes it
/// returns and each choice's usage.
fn feed(
    mut outputs: Vec<pb::SessionOutput>,
    join: &mut WireJoin,
    out: &mut Vec<u8>,
    usage: &mut [Option<pb::Usage>; 2],
) {
    outputs.sort_by(|a, b| b.key.cmp(&a.key));
    for output in outputs {
        let choice = if output.key == "c0" { 0 } else { 1 };
        out.extend(join.add(choice, &output).expect("add"));
        if let Some(last) = &output.r#final {
            usage[choice] = last.usage;
        }
    }
}

/// Two choices of one chat request over a `ParseBatch` stream, their outputs fed to `WireJoin`
/// with choice 1 ahead of choice 0: the joined stream starts every choice in index order, ends
/// with one usage chunk counting both and one `[DONE]`; the joined body holds both choices in
/// index order and the usage of both.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn wire_join_orders_two_choices_of_a_batch() {
    let client = client();
    for stream in [true, false] {
        let mut batch = client.batch().await.expect("batch");
        let mut join = WireJoin::new(2, stream);
        let wire = pb::WireOptions { stream, include_usage: true, ..streamed_chat("chatcmpl-n") };
        let keys = ["c0", "c1"];
        for (i, key) in keys.iter().enumerate() {
            let options = OpenOptions::new("qwen3")
                .tools_json(WEATHER_TOOLS)
                .request_id("rust-join")
                .choice(i as u32)
                .output(pb::OutputKind::FinalOnly)
                .wire(wire.clone());
            batch.open(key, options);
        }
        let mut out = Vec::new();
        let mut usage: [Option<pb::Usage>; 2] = [None, None];
        for &id in QWEN3_OUTPUT.iter() {
            batch.feed("c0", [id]);
            batch.feed("c1", [id]);
            feed(batch.step().await.expect("step"), &mut join, &mut out, &mut usage);
        }
        batch.finish("c0", stop_at_im_end());
        feed(batch.step().await.expect("step"), &mut join, &mut out, &mut usage);
        let first = usage[0].expect("choice 0 finished");
        batch.finish("c1", stop_at_im_end().with_other_choices_usage(first.completion_tokens, first.reasoning_tokens));
        feed(batch.step().await.expect("step"), &mut join, &mut out, &mut usage);
        batch.close().await.expect("close");
        assert!(join.ended(), "the join did not end");
        let total = u64::from(first.completion_tokens + usage[1].expect("choice 1 finished").completion_tokens);
        let out = String::from_utf8(out).expect("UTF-8");
        if stream {
            let mut seen = Vec::new();
            let mut usages = 0;
            for chunk in events(&out) {
                if let Some(counted) = chunk["usage"]["completion_tokens"].as_u64() {
                    usages += 1;
                    assert_eq!(counted, total, "{chunk}");
                }
                for choice in chunk["choices"].as_array().expect("choices") {
                    let index = choice["index"].as_u64().expect("index");
                    if !seen.contains(&index) {
                        seen.push(index);
                    }
                }
            }
            assert_eq!((seen, usages), (vec![0, 1], 1), "choices first seen in order, one usage chunk");
        } else {
            let body: Value = serde_json::from_str(&out).expect("one JSON body");
            let indexes: Vec<_> =
                body["choices"].as_array().expect("choices").iter().map(|c| c["index"].clone()).collect();
            assert_eq!(indexes, [0, 1], "{out}");
            assert_eq!(body["usage"]["completion_tokens"].as_u64(), Some(total), "{out}");
            assert_eq!(body["choices"][1]["finish_reason"], "tool_calls", "{out}");
        }
    }
}

/// A choice whose session fails ends the response with the error in the dialect: through
/// `fail` for a `Parse` stream's error, and nothing more comes after it.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn wire_join_ends_with_a_failed_choices_error() {
    let wire = streamed_chat("chatcmpl-e");
    let mut join = WireJoin::new(2, true);
    let session = client().open(OpenOptions::new("qwen3").wire(wire).choice(1)).await.expect("open");
    session.send([vec![9707], vec![10_000_000]]).await.expect("send");
    let (_, mut replies) = session.split();
    let mut out = Vec::new();
    let error = loop {
        match replies.recv().await {
            Some(Ok(reply)) => out.extend(join.add(1, &reply).expect("add")),
            Some(Err(error)) => break error,
            None => panic!("no error"),
        }
    };
    assert!(out.is_empty(), "choice 1's events wait for choice 0's first");
    out.extend(join.fail(&error));
    assert!(join.ended());
    let out = String::from_utf8(out).expect("UTF-8");
    assert!(out.starts_with("data: {\"error\":"), "{out}");
    let ended = pb::ParseResponse { wire: b"late".to_vec(), ..Default::default() };
    assert!(join.add(0, &ended).expect("add").is_empty());
    assert!(join.fail(&error).is_empty());
}

//! The batch API: many sessions over one ParseBatch stream, packed steps, session errors.

use std::collections::HashMap;

use parsetier_client::{pb, session_error, Code, OpenOptions};

use crate::common::*;

fn weather(request_id: &str) -> OpenOptions {
    OpenOptions::new("qwen3").tools_json(WEATHER_TOOLS).request_id(request_id)
}

/// Many sessions, one token per session per step, as an engine steps its batch: each gets the
/// expected parse, and the same deltas and final as a Parse stream fed the same steps (the same
/// request id gives the same tool call ids). The steps after the open go packed.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn batch_many_sessions_one_token_per_step() {
    let client = client();
    let mut batch = client.batch().await.expect("batch");
    let keys: Vec<String> = (0..64).map(|i| format!("req-{i}")).collect();
    for key in &keys {
        batch.open(key, weather("rust-batch"));
    }
    let mut deltas: HashMap<String, Vec<pb::Delta>> = HashMap::new();
    let mut finals: HashMap<String, pb::Final> = HashMap::new();
    for step in 0..=QWEN3_OUTPUT.len() {
        for key in &keys {
            match QWEN3_OUTPUT.get(step) {
                Some(&id) => batch.feed(key, [id]),
                None => batch.finish(key, stop_at_im_end()),
            }
        }
        for out in batch.step().await.expect("step") {
            assert!(session_error(&out).is_none(), "{out:?}");
            deltas.entry(out.key.clone()).or_default().extend(out.deltas);
            if let Some(final_message) = out.r#final {
                finals.insert(out.key.clone(), final_message);
            }
        }
    }
    batch.close().await.expect("close");
    let (final_message, streamed) = client
        .parse_stream(weather("rust-batch"), one_per_step(&QWEN3_OUTPUT), stop_at_im_end())
        .await
        .expect("stream");
    for key in &keys {
        check_final(&finals[key]);
        assert_eq!(finals[key], final_message, "{key}");
        assert_eq!(join_deltas(&deltas[key]), join_deltas(&streamed), "{key}");
    }
}

/// Packed and unpacked entries in one step (an open with steps, text, several ids, a finish)
/// come back in the order of the entries, each as a Parse stream would give it.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn batch_packed_and_unpacked_entries_in_one_step() {
    let client = client();
    let mut batch = client.batch().await.expect("batch");
    for key in ["a", "b", "c", "d"] {
        batch.open(key, OpenOptions::new("qwen3"));
    }
    batch.step().await.expect("open step");
    batch.feed("d", [9707]); // packed, one id
    batch.feed_text("a", "Hi", 1); // a text step: unpacked
    batch.feed("c", [9707, 220, 108386]); // packed, three ids (token_counts)
    batch.feed("b", [9707]);
    batch.finish("b", Finish::stop()); // a finish: unpacked
    let outs = batch.step().await.expect("mixed step");
    let keys: Vec<_> = outs.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["d", "a", "c", "b"], "outputs in the order of the entries");
    let text = |o: &pb::SessionOutput| o.deltas.iter().map(|d| d.content.clone()).collect::<String>();
    assert_eq!(text(&outs[0]), "Hello");
    assert_eq!(text(&outs[1]), "Hi");
    assert_eq!(text(&outs[2]), "Hello 你好");
    assert_eq!(outs[3].r#final.as_ref().and_then(|f| f.message.as_ref()).map(|m| m.content.as_str()), Some("Hello"));
    batch.close().await.expect("close");
}

use parsetier_client::Finish;

/// A session's error is in its output; the stream and the other sessions go on; a key is free
/// again once its session ended.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn batch_session_errors() {
    let client = client();
    let mut batch = client.batch().await.expect("batch");
    batch.open("good", weather("rust-errors"));
    batch.open("unknown", OpenOptions::new("no-such-model"));
    batch.feed("unopened", [9707]);
    batch.open("bad", OpenOptions::new("qwen3"));
    batch.feed("bad", [9707, 10_000_000]);
    batch.open("dropped", OpenOptions::new("qwen3"));
    let outs = batch.step().await.expect("step");
    let codes: HashMap<_, _> = outs.iter().map(|o| (o.key.clone(), session_error(o).map(|e| e.code()))).collect();
    assert_eq!(codes["unknown"], Some(Code::NotFound));
    assert_eq!(codes["unopened"], Some(Code::FailedPrecondition));
    assert_eq!(codes["bad"], Some(Code::InvalidArgument));
    assert!(!codes.contains_key("good"), "an open alone produced output: {outs:?}");

    batch.cancel("dropped");
    batch.open("bad", OpenOptions::new("qwen3")); // its key is free again
    batch.feed("good", QWEN3_OUTPUT);
    batch.finish("good", stop_at_im_end());
    for out in batch.step().await.expect("step") {
        match out.key.as_str() {
            "good" => check_final(out.r#final.as_ref().expect("final")),
            "dropped" => assert_eq!(session_error(&out).map(|e| e.code()), Some(Code::Cancelled)),
            _ => panic!("unexpected output {out:?}"),
        }
    }
    batch.cancel("bad");
    batch.step().await.expect("step");
    batch.close().await.expect("close");
}

/// Only the stream's own limits end the stream, and the step reports them.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn batch_empty_key_ends_the_stream() {
    let mut batch = client().batch().await.expect("batch");
    batch.feed("", [9707]);
    let error = batch.step().await.expect_err("an empty key");
    assert_eq!(error.code(), Code::InvalidArgument, "{error}");
    assert_eq!(batch.step().await.expect_err("after the end").code(), Code::InvalidArgument);
}

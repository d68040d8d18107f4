//! Multiplexed sessions (`ClientBuilder::multiplex`): the session API over one shared
//! `ParseBatch` stream. Each session's replies are its own `Parse` stream's, byte for byte
//! (client_messages included: the session's own count); a session's error stays in it.

use std::time::Duration;

use parsetier_client::{pb, wire_of, Client, Code, OpenOptions};

use crate::common::*;

fn mux_client() -> Client {
    Client::builder(env("PARSETIER_SERVER")).insecure().multiplex(Duration::ZERO).build().expect("client")
}

/// `sessions` sessions at once, each sending one token per message from a task of its own.
async fn replies_of(client: &Client, sessions: usize, wire: Option<pb::WireOptions>) -> Vec<Vec<pb::ParseResponse>> {
    let mut tasks = Vec::new();
    for i in 0..sessions {
        let client = client.clone();
        let wire = wire.clone();
        tasks.push(tokio::spawn(async move {
            let mut options = OpenOptions::new("qwen3").tools_json(WEATHER_TOOLS).request_id(format!("rust-mux-{i}"));
            if let Some(wire) = wire {
                options = options.wire(wire);
            }
            let session = client.open(options).await.expect("open");
            let (sender, mut replies) = session.split();
            let sending = tokio::spawn(async move {
                for step in one_per_step(&QWEN3_OUTPUT) {
                    sender.send([step]).await.expect("send");
                }
                sender.finish(stop_at_im_end()).await.expect("finish");
            });
            let mut all = Vec::new();
            while let Some(reply) = replies.recv().await {
                all.push(reply.expect("reply"));
            }
            sending.await.expect("sender");
            all
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.push(task.await.expect("session"));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn multiplexed_sessions_get_their_parse_streams_replies() {
    let want = replies_of(&client(), 6, None).await;
    let got = replies_of(&mux_client(), 6, None).await;
    assert_eq!(got, want);
    for replies in &got {
        check_final(replies.last().and_then(|r| r.r#final.as_ref()).expect("final"));
    }
    let chat = pb::WireOptions {
        model: "served".into(),
        include_usage: true,
        created: 1_700_000_000,
        ..streamed_chat("chatcmpl-rust-mux")
    };
    let want = replies_of(&client(), 1, Some(chat.clone())).await;
    let got = replies_of(&mux_client(), 1, Some(chat)).await;
    assert!(!wire_of(&want[0]).is_empty());
    assert_eq!(wire_of(&got[0]), wire_of(&want[0]));
}

#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn multiplexed_session_errors_stay_in_their_session() {
    let client = mux_client();
    let refused = client.open(OpenOptions::new("no-such-model")).await.err().expect("unknown model");
    assert_eq!(refused.code(), Code::NotFound, "{refused}");
    let mut bad = client.open(OpenOptions::new("qwen3")).await.expect("open");
    let mut good = client.open(OpenOptions::new("qwen3").tools_json(WEATHER_TOOLS)).await.expect("open");
    bad.send([[10_000_000u32]]).await.expect("send");
    send_output(&good).await;
    let error = loop {
        match bad.recv().await {
            Some(Ok(_)) => continue,
            Some(Err(error)) => break error,
            None => panic!("the bad session ended without its error"),
        }
    };
    assert_eq!(error.code(), Code::InvalidArgument, "{error}");
    while let Some(reply) = good.recv().await {
        reply.expect("reply");
    }
    check_final(good.final_message().expect("final"));
}

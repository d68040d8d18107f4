//! Sends are bounded: against a server that accepts a `Parse` stream and then reads nothing,
//! a session's sends stop completing once its channel (`send_capacity` messages) and HTTP/2's
//! flow-control windows are full, instead of piling the messages up in the client's memory.

use std::time::Duration;

use parsetier_client::{Client, OpenOptions};

use crate::common::env;

const IDS_PER_MESSAGE: usize = 4096; // about 12 KiB a message (151645 is a 3-byte varint)
const MESSAGES: usize = 2000; // about 24 MiB: far past any window the server announces

#[tokio::test]
#[ignore = "live: needs a server that reads nothing, PARSETIER_STALLED_SERVER (tests/test_rust_client.py starts one)"]
async fn sends_wait_when_the_server_reads_nothing() {
    let client = Client::builder(env("PARSETIER_STALLED_SERVER"))
        .insecure()
        .without_resume()
        .send_capacity(4)
        .build()
        .expect("client");
    let session = client.open(OpenOptions::new("qwen3")).await.expect("open (the server accepts it)");
    let step = vec![151645u32; IDS_PER_MESSAGE];
    let mut sent = 0;
    while sent < MESSAGES {
        match tokio::time::timeout(Duration::from_secs(2), session.send([step.clone()])).await {
            Ok(result) => result.expect("send"),
            Err(_) => break, // waiting for room: the back-pressure
        }
        sent += 1;
    }
    assert!(sent >= 4, "the channel's capacity is there: {sent} sends completed");
    assert!(sent < MESSAGES, "every one of {MESSAGES} sends completed against a server that reads nothing");
    println!("back-pressure after {sent} messages of {IDS_PER_MESSAGE} ids");
}

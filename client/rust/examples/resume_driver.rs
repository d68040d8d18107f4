//! The Rust client's driver for the resume scenario corpus (tests/resume_scenarios/README.md):
//! it reads one driver script (a JSON line) on stdin, runs its ops through the batch API or one
//! `Parse` session per key, prints `{"paused": NAME}` at each pause and waits for a line on
//! stdin, and ends with one `{"result": ...}` line. It knows no scenario: the harness
//! (tests/test_resume_scenarios.py) expands the corpus and judges the result.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use parsetier_client::{pb, Batch, Client, Error, Finish, Keepalive, OpenOptions, ResumePolicy};
use prost::Message;
use serde_json::{json, Map, Value};

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn encode(message: &impl Message) -> Value {
    Value::String(base64(&message.encode_to_vec()))
}

/// The gRPC status name of an error's code (`INVALID_ARGUMENT`...).
fn error_of(error: &Error) -> Value {
    let mut name = String::new();
    for (i, c) in format!("{:?}", error.code()).chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    json!({"code": name, "message": error.message()})
}

fn say(line: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn pause(name: &str) {
    say(json!({"paused": name}));
    let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await;
}

fn ids(value: &Value) -> Vec<u32> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_u64()).map(|v| v as u32).collect()
}

fn open_options(spec: &Value) -> OpenOptions {
    let output = match spec["output"].as_str().unwrap_or("deltas") {
        "events" => pb::OutputKind::Events,
        "both" => pb::OutputKind::DeltasAndEvents,
        "final" => pb::OutputKind::FinalOnly,
        _ => pb::OutputKind::Deltas,
    };
    OpenOptions::new(spec["model"].as_str().unwrap_or_default())
        .tools_json(spec["tools_json"].as_str().unwrap_or_default())
        .prompt_token_ids(ids(&spec["prompt_token_ids"]))
        .output(output)
        .request_id(spec["request_id"].as_str().unwrap_or_default())
}

fn finish(action: &Value) -> Finish {
    match action["reason"].as_str().unwrap_or("stop") {
        "length" => Finish::length(),
        "abort" => Finish::abort(),
        _ => Finish::stop(),
    }
}

fn client(script: &Value) -> Client {
    let mut builder = Client::builder(script["target"].as_str().unwrap_or_default()).insecure();
    if let Some(ms) = script["keepalive_ms"].as_u64() {
        let interval = Duration::from_millis(ms);
        builder = builder.keepalive(Keepalive { interval, timeout: Duration::from_secs(5), while_idle: true });
    }
    builder = if script["resume"].as_bool().unwrap_or(true) {
        builder.resume(ResumePolicy::default())
    } else {
        builder.without_resume()
    };
    if std::env::args().nth(1).as_deref() == Some("multiplex") {
        builder = builder.multiplex(Duration::ZERO); // the Parse sessions on one shared ParseBatch stream
    }
    builder.build().expect("client")
}

fn queue(batch: &mut Batch, actions: &[Value]) {
    for action in actions {
        let key = action["key"].as_str().unwrap_or_default();
        match action["op"].as_str().unwrap_or_default() {
            "open" => batch.open(key, open_options(&action["open"])),
            "feed" => batch.feed(key, ids(&action["ids"])),
            "finish" => batch.finish(key, finish(action)),
            "cancel" => batch.cancel(key),
            op => panic!("unknown op {op:?}"),
        }
    }
}

fn outputs(reply: Vec<pb::SessionOutput>) -> Value {
    Value::Object(reply.into_iter().map(|out| (out.key.clone(), encode(&out))).collect::<Map<_, _>>())
}

async fn run_batch(script: &Value) -> Value {
    let client = client(script);
    let mut replies = Vec::new();
    let mut batch = match client.batch().await {
        Ok(batch) => batch,
        Err(error) => return json!({"replies": replies, "resumes": 0, "error": error_of(&error)}),
    };
    let result: Result<(), Error> = async {
        for op in script["ops"].as_array().into_iter().flatten() {
            if let Some(actions) = op["send"].as_array() {
                queue(&mut batch, actions);
                batch.send().await?;
            } else if let Some(count) = op.get("receive") {
                let count = count.as_u64().map_or(batch.in_flight(), |n| n as usize);
                for _ in 0..count {
                    replies.push(outputs(batch.recv().await?));
                }
            } else if let Some(name) = op["pause"].as_str() {
                pause(name).await;
            }
        }
        while batch.in_flight() > 0 {
            replies.push(outputs(batch.recv().await?));
        }
        Ok(())
    }
    .await;
    let resumes = batch.resumes();
    let result = match result {
        Ok(()) => batch.close().await,
        Err(error) => Err(error),
    };
    let error = result.err().map_or(Value::Null, |e| error_of(&e));
    json!({"replies": replies, "resumes": resumes, "error": error})
}

async fn run_parse(script: &Value) -> Value {
    let client = client(script);
    let mut senders = BTreeMap::new();
    let mut readers = Vec::new();
    let mut results = Map::new();
    for op in script["ops"].as_array().into_iter().flatten() {
        for action in op["send"].as_array().into_iter().flatten() {
            let key = action["key"].as_str().unwrap_or_default().to_owned();
            match action["op"].as_str().unwrap_or_default() {
                "open" => match client.open(open_options(&action["open"])).await {
                    Ok(session) => {
                        let (sender, mut replies) = session.split();
                        senders.insert(key.clone(), sender);
                        readers.push(tokio::spawn(async move {
                            let mut got = Vec::new();
                            let mut error = Value::Null;
                            while let Some(reply) = replies.recv().await {
                                match reply {
                                    Ok(reply) => got.push(encode(&reply)),
                                    Err(e) => error = error_of(&e),
                                }
                            }
                            (key, json!({"replies": got, "resumes": replies.resumes(), "error": error}))
                        }));
                    }
                    Err(error) => {
                        results.insert(key, json!({"replies": [], "resumes": 0, "error": error_of(&error)}));
                    }
                },
                // A session that has ended says why in its replies (resume off, or its own error).
                "feed" => {
                    if let Some(sender) = senders.get(&key) {
                        let _ = sender.send([ids(&action["ids"])]).await;
                    }
                }
                "finish" => {
                    if let Some(sender) = senders.get(&key) {
                        let _ = sender.finish(finish(action)).await;
                    }
                }
                op => panic!("unknown op {op:?}"),
            }
        }
        if let Some(name) = op["pause"].as_str() {
            pause(name).await;
        }
    }
    for reader in readers {
        if let Ok((key, result)) = reader.await {
            results.insert(key, result);
        }
    }
    json!({"sessions": results})
}

#[tokio::main]
async fn main() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("a driver script on stdin");
    let script: Value = serde_json::from_str(&line).expect("the driver script is JSON");
    let timeout = Duration::from_secs_f64(script["timeout"].as_f64().unwrap_or(60.0) * 4.0);
    let run = async {
        if script["api"] == "batch" {
            run_batch(&script).await
        } else {
            run_parse(&script).await
        }
    };
    let result = tokio::time::timeout(timeout, run).await.expect("the script ran past its time");
    say(json!({"result": result}));
}

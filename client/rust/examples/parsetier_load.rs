//! Drives a parsetier server with many concurrent sessions of one recorded output and prints
//! what it achieved, for bench/client_bench.py (the Rust counterpart of Go's parsetier-load):
//!
//!     parsetier_load --server 127.0.0.1:50051 --ids output.txt --sessions 200 --concurrency 8 \
//!         --steps-per-message 1 [--batch | --multiplex] [--tools-json JSON] [--no-resume]
//!
//! The ids file holds the output's token ids separated by white space. Every session streams the
//! whole output, each token its own decode step, `--steps-per-message` steps to a message, while
//! receiving in another task, then finishes on the stop token. With `--batch`, one ParseBatch
//! stream carries `--concurrency` live sessions, each message a step of every one of them. It
//! prints one JSON line: tokens, sessions and wall-clock seconds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parsetier_client::{session_error, Client, Error, Finish, OpenOptions, Result};

const STOP_TOKEN: u32 = 151645;

struct Args {
    server: String,
    ids: Vec<u32>,
    tools: String,
    sessions: usize,
    concurrency: usize,
    per_message: usize,
    batch: bool,
    resume: bool,
    multiplex: bool,
}

fn args() -> Args {
    let mut args = Args {
        server: "127.0.0.1:50051".into(),
        ids: Vec::new(),
        tools: String::new(),
        sessions: 100,
        concurrency: 8,
        per_message: 1,
        batch: false,
        resume: true,
        multiplex: false,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => args.server = value(),
            "--ids" => {
                let text = std::fs::read_to_string(value()).expect("the ids file");
                args.ids = text.split_whitespace().map(|s| s.parse().expect("a token id")).collect();
            }
            "--tools-json" => args.tools = value(),
            "--sessions" => args.sessions = value().parse().expect("--sessions"),
            "--concurrency" => args.concurrency = value().parse().expect("--concurrency"),
            "--steps-per-message" => args.per_message = value().parse().expect("--steps-per-message"),
            "--batch" => args.batch = true,
            "--no-resume" => args.resume = false,
            "--multiplex" => args.multiplex = true, // the sessions on one shared ParseBatch stream
            _ => panic!("unknown flag {flag}"),
        }
    }
    args
}

async fn run_session(client: &Client, args: &Args) -> Result<usize> {
    let session = client.open(OpenOptions::new("qwen3").tools_json(args.tools.clone())).await?;
    let (sender, replies) = session.split();
    let (ids, per_message) = (args.ids.clone(), args.per_message);
    let sending = tokio::spawn(async move {
        for chunk in ids.chunks(per_message) {
            sender.send(chunk.iter().map(|&id| vec![id])).await?;
        }
        sender.finish(Finish::stop_token(STOP_TOKEN)).await
    });
    let mut deltas = replies.deltas();
    while let Some(delta) = deltas.recv().await {
        delta?;
    }
    sending.await.map_err(|e| Error::Protocol(e.to_string()))??;
    let usage = deltas.final_message().and_then(|f| f.usage).ok_or_else(|| Error::Protocol("no final".into()))?;
    Ok(usage.completion_tokens as usize)
}

async fn run_batch(client: &Client, args: &Args) -> Result<usize> {
    let mut batch = client.batch().await?;
    struct Slot {
        key: String,
        next: usize,
        finishing: bool,
    }
    let mut slots: Vec<Option<Slot>> = (0..args.concurrency).map(|_| None).collect();
    let (mut tokens, mut started) = (0, 0);
    loop {
        let mut live = false;
        for slot in slots.iter_mut() {
            if slot.is_none() && started < args.sessions {
                let key = format!("s{started}");
                batch.open(&key, OpenOptions::new("qwen3").tools_json(args.tools.clone()));
                *slot = Some(Slot { key, next: 0, finishing: false });
                started += 1;
            }
            let Some(s) = slot else { continue };
            live = true;
            if s.next < args.ids.len() {
                let end = args.ids.len().min(s.next + args.per_message);
                batch.feed_steps(&s.key, args.ids[s.next..end].iter().map(|&id| one_step(id)).collect());
                s.next = end;
            } else {
                batch.finish(&s.key, Finish::stop_token(STOP_TOKEN));
                s.finishing = true;
            }
        }
        if !live {
            batch.close().await?;
            return Ok(tokens);
        }
        let mut finals = HashMap::new();
        for out in batch.step().await? {
            if let Some(error) = session_error(&out) {
                return Err(error);
            }
            if let Some(usage) = out.r#final.and_then(|f| f.usage) {
                finals.insert(out.key, usage.completion_tokens as usize);
            }
        }
        for slot in slots.iter_mut() {
            if slot.as_ref().is_some_and(|s| s.finishing) {
                tokens += slot.take().and_then(|s| finals.get(&s.key).copied()).unwrap_or(0);
            }
        }
    }
}

fn one_step(id: u32) -> parsetier_client::pb::Step {
    parsetier_client::pb::Step { token_ids: vec![id], ..Default::default() }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Arc::new(args());
    let mut builder = Client::builder(args.server.as_str()).insecure();
    if !args.resume {
        builder = builder.without_resume();
    }
    if args.multiplex {
        builder = builder.multiplex(std::time::Duration::ZERO);
    }
    let client = builder.build()?;
    let start = Instant::now();
    let tokens = if args.batch {
        run_batch(&client, &args).await?
    } else {
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..args.concurrency {
            let (client, args, next) = (client.clone(), args.clone(), next.clone());
            workers.push(tokio::spawn(async move {
                let mut tokens = 0;
                while next.fetch_add(1, Ordering::Relaxed) < args.sessions {
                    tokens += run_session(&client, &args).await?;
                }
                Ok::<_, Error>(tokens)
            }));
        }
        let mut tokens = 0;
        for worker in workers {
            tokens += worker.await.map_err(|e| Error::Protocol(e.to_string()))??;
        }
        tokens
    };
    let seconds = start.elapsed().as_secs_f64();
    println!(r#"{{"tokens": {tokens}, "sessions": {}, "seconds": {seconds}}}"#, args.sessions);
    Ok(())
}

//! Drives many resuming sessions through the Rust client at once, for the fleet tests
//! (tests/test_rust_client.py): it reads a plan on stdin, streams every session one step per
//! message, prints `sent N` as the steps go out (so the test knows when to kill a backend), and
//! ends with one `result` line per session: how often it resumed and its replies (hex protobuf).
//!
//! The plan, one item per line: the target; the tools JSON; the pause between steps in ms; then
//! one session per line, tab-separated: model, request id, prompt ids and output ids (each
//! comma-separated).

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parsetier_client::{pb, Client, Finish, Keepalive, OpenOptions};
use prost::Message;

struct SessionPlan {
    model: String,
    request_id: String,
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
}

fn ids(field: &str) -> Vec<u32> {
    field.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("a token id")).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::main]
async fn main() {
    let lines: Vec<String> = std::io::stdin().lock().lines().map(|l| l.expect("stdin")).collect();
    let (target, tools, pause) = (&lines[0], lines[1].clone(), Duration::from_millis(lines[2].parse().expect("pause")));
    let plans: Vec<SessionPlan> = lines[3..]
        .iter()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            SessionPlan {
                model: fields[0].into(),
                request_id: fields[1].into(),
                prompt_ids: ids(fields[2]),
                ids: ids(fields[3]),
            }
        })
        .collect();
    // Pings every second: nginx may hold a stream's reset until the client's connection shows
    // activity (deploy/README.md, "Backend loss").
    let keepalive = Keepalive { interval: Duration::from_secs(1), timeout: Duration::from_secs(5), while_idle: true };
    let client = Client::builder(target.as_str()).insecure().keepalive(keepalive).build().expect("client");
    let sent = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for plan in plans {
        let (client, tools, sent) = (client.clone(), tools.clone(), sent.clone());
        tasks.push(tokio::spawn(async move { run(client, plan, tools, pause, sent).await }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("session task"));
    }
    let mut out = std::io::stdout().lock(); // only now: the sessions' tasks print "sent N"
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok((resumes, replies)) => {
                let _ = writeln!(out, "result {i} {resumes} {}", replies.join(","));
            }
            Err(error) => {
                let _ = writeln!(out, "error {i} {error}");
            }
        }
    }
}

async fn run(
    client: Client,
    plan: SessionPlan,
    tools: String,
    pause: Duration,
    sent: Arc<AtomicUsize>,
) -> parsetier_client::Result<(usize, Vec<String>)> {
    let options = OpenOptions::new(plan.model)
        .tools_json(tools)
        .request_id(plan.request_id)
        .prompt_token_ids(plan.prompt_ids)
        .output(pb::OutputKind::DeltasAndEvents);
    let (sender, mut replies) = client.open(options).await?.split();
    let steps = plan.ids;
    tokio::spawn(async move {
        for id in steps {
            if sender.send([[id]]).await.is_err() {
                return;
            }
            let n = sent.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(200) {
                println!("sent {n}");
            }
            tokio::time::sleep(pause).await;
        }
        let _ = sender.finish(Finish::stop()).await;
    });
    let mut all = Vec::new();
    while let Some(reply) = replies.recv().await {
        all.push(hex(&reply?.encode_to_vec()));
    }
    Ok((replies.resumes(), all))
}

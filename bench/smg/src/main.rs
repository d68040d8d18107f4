//! SMG's streaming parsers on parsetier's bench workload, timed per token.
//!
//! `bench/side_by_side.py` writes the workload (token ids per workload, the tools, the prompt tail
//! that seeds the decoder, the expected calls) and runs this program with
//! `smg-side WORKLOAD.json TOKENIZER.json RUNS`. It prints one JSON object per line, one per
//! workload and chunk size, with median CPU µs per token of:
//!
//! - `detok_parse`: what SMG's gRPC router does per chunk of generated ids, with each chunk's
//!   text made in the timed loop by the `tokenizers` stream decoder (the decoder parsetier's
//!   sessions are proven equal to): the reasoning parser's incremental parse, then, once out of
//!   reasoning, the tool parser's `parse_incremental`; at the end the reasoning parser's `flush`
//!   (through the tool parser when out of reasoning) and the tool parser's unstreamed text and
//!   arguments. Parsers are made per request from SMG's factories, inside the timed region, as the
//!   router makes them per request. Chunks that decode to no text are not fed (the router holds
//!   them).
//! - `parse`: the same chain on chunk texts decoded before the clock starts.
//! - `detok`: the stream decoder alone, one id per step.
//!
//! - `core`: parsetier's native core on the same chunks, called from Rust (`parsetier.rs`: the
//!   engine crate, no Python): per request a session made, each chunk's ids fed and its deltas
//!   read, then `finish` as `NativeSession.finish` runs it. Timed in the same rounds as
//!   `detok_parse`, the two back to back and their order alternating; `core_smg` is the median of
//!   the rounds' core / SMG ratios.
//!
//! and `calls` / `core_calls`: whether SMG's / the core's calls equal the expected ones (`exact`,
//! `whitespace` when only whitespace around string values differs, or `differ`). Nothing is
//! asserted: a bench reports, the Python side prints what differs.

mod parsetier;

use std::collections::BTreeMap;

use openai_protocol::common::Tool;
use reasoning_parser::{ParserFactory as ReasoningFactory, ReasoningParser};
use serde_json::{json, Value};
use tokenizers::{tokenizer::step_decode_stream, Tokenizer};
use tool_parser::{ParserFactory as ToolFactory, ToolParser};

/// The two parsers of one request, as the router holds them.
struct Request {
    reasoning: Box<dyn ReasoningParser>,
    tools: Box<dyn ToolParser>,
    /// Argument text per call index, and each call's name.
    calls: BTreeMap<usize, (String, String)>,
}

struct Factories {
    reasoning: ReasoningFactory,
    tools: ToolFactory,
}

impl Factories {
    fn request(&self, model: &str) -> Request {
        Request {
            reasoning: self.reasoning.create(model),
            tools: self
                .tools
                .registry()
                .create_for_model(model)
                .unwrap_or_else(|| panic!("SMG has no tool parser for {model}")),
            calls: BTreeMap::new(),
        }
    }
}

impl Request {
    async fn tool_text(&mut self, text: &str, tools: &[Tool]) {
        if text.is_empty() {
            return;
        }
        let got = self
            .tools
            .parse_incremental(text, tools)
            .await
            .expect("SMG tool parser error");
        std::hint::black_box(&got.normal_text);
        for item in got.calls {
            let call = self.calls.entry(item.tool_index).or_default();
            if let Some(name) = item.name {
                call.0.push_str(&name);
            }
            call.1.push_str(&item.parameters);
        }
    }

    /// One chunk's text through the router's chain.
    async fn chunk(&mut self, text: &str, tools: &[Tool]) {
        if text.is_empty() {
            return;
        }
        let split = self
            .reasoning
            .parse_reasoning_streaming_incremental(text)
            .expect("SMG reasoning parser error");
        std::hint::black_box(&split.reasoning_text);
        if !self.reasoning.is_in_reasoning() {
            self.tool_text(&split.normal_text, tools).await;
        }
    }

    /// End of the stream: what the reasoning parser held, then what the tool parser held.
    async fn end(&mut self, tools: &[Tool]) {
        let split = self.reasoning.flush().expect("SMG reasoning flush error");
        if !self.reasoning.is_in_reasoning() {
            self.tool_text(&split.normal_text, tools).await;
        }
        std::hint::black_box(self.tools.take_unstreamed_normal_text());
        for item in self.tools.get_unstreamed_tool_args().unwrap_or_default() {
            let call = self.calls.entry(item.tool_index).or_default();
            call.1.push_str(&item.parameters);
        }
    }
}

/// `tokenizers`' stream decoder seeded with the prompt tail (as Python's `DecodeStream(ids=...)`).
struct Decoder<'t> {
    tokenizer: &'t Tokenizer,
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl<'t> Decoder<'t> {
    fn new(tokenizer: &'t Tokenizer, prompt: &[u32]) -> Self {
        Decoder {
            tokenizer,
            ids: prompt.to_vec(),
            prefix: String::new(),
            prefix_index: 0,
        }
    }

    fn push(&mut self, id: u32, out: &mut String) {
        let piece = step_decode_stream(
            self.tokenizer,
            vec![id],
            false,
            &mut self.ids,
            &mut self.prefix,
            &mut self.prefix_index,
        )
        .expect("decode step");
        if let Some(piece) = piece {
            out.push_str(&piece);
        }
    }
}

/// The workload's ids in chunks of `size`, the stop id at the very end left out (it is not
/// detokenized: it ends the request).
fn chunks(ids: &[u32], stop: u32, size: usize) -> Vec<&[u32]> {
    let body = match ids.last() {
        Some(&last) if last == stop => &ids[..ids.len() - 1],
        _ => ids,
    };
    body.chunks(size).collect()
}

struct Workload<'a> {
    model: String,
    ids: Vec<u32>,
    tools: &'a [Tool],
    prompt: &'a [u32],
    stop: u32,
    tokenizer: &'a Tokenizer,
}

impl Workload<'_> {
    async fn detok_parse(&self, factories: &Factories, size: usize) -> Request {
        let mut request = factories.request(&self.model);
        let mut decoder = Decoder::new(self.tokenizer, self.prompt);
        let mut text = String::new();
        for chunk in chunks(&self.ids, self.stop, size) {
            text.clear();
            for &id in chunk {
                decoder.push(id, &mut text);
            }
            request.chunk(&text, self.tools).await;
        }
        request.end(self.tools).await;
        request
    }

    async fn parse(&self, factories: &Factories, texts: &[String]) -> Request {
        let mut request = factories.request(&self.model);
        for text in texts {
            request.chunk(text, self.tools).await;
        }
        request.end(self.tools).await;
        request
    }

    fn texts(&self, size: usize) -> Vec<String> {
        let mut decoder = Decoder::new(self.tokenizer, self.prompt);
        chunks(&self.ids, self.stop, size)
            .into_iter()
            .map(|chunk| {
                let mut text = String::new();
                for &id in chunk {
                    decoder.push(id, &mut text);
                }
                text
            })
            .collect()
    }

    fn detok(&self) -> usize {
        let mut decoder = Decoder::new(self.tokenizer, self.prompt);
        let mut text = String::new();
        for chunk in chunks(&self.ids, self.stop, 1) {
            decoder.push(chunk[0], &mut text);
        }
        text.len()
    }
}

fn thread_cpu_seconds() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// String values with surrounding whitespace trimmed, to tell a whitespace-only difference.
fn trimmed(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(s.trim().to_owned()),
        Value::Array(items) => Value::Array(items.iter().map(trimmed).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), trimmed(v))).collect())
        }
        other => other.clone(),
    }
}

fn compare(calls: &BTreeMap<usize, (String, String)>, expected: &Value) -> &'static str {
    let got: Value = calls
        .values()
        .map(|(name, args)| {
            json!({"name": name, "arguments": serde_json::from_str::<Value>(args).unwrap_or(Value::Null)})
        })
        .collect();
    if &got == expected {
        "exact"
    } else if trimmed(&got) == trimmed(expected) {
        "whitespace"
    } else {
        "differ"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, workload_path, tokenizer_path, runs] = args.as_slice() else {
        eprintln!("usage: smg-side WORKLOAD.json TOKENIZER.json RUNS");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(workload_path).expect("read the workload"))
            .expect("the workload is JSON");
    let tokenizer = Tokenizer::from_file(tokenizer_path).expect("load tokenizer.json");
    let tools: Vec<Tool> = serde_json::from_value(spec["tools"].clone()).expect("tools");
    let prompt: Vec<u32> = serde_json::from_value(spec["prompt_ids"].clone()).expect("prompt_ids");
    let stop = spec["stop_id"].as_u64().expect("stop_id") as u32;
    let sizes: Vec<usize> = serde_json::from_value(spec["sizes"].clone()).expect("sizes");
    let factories = Factories {
        reasoning: ReasoningFactory::new(),
        tools: ToolFactory::new(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");

    for entry in spec["workloads"].as_array().expect("workloads") {
        let workload = Workload {
            model: entry["model"].as_str().expect("model").to_owned(),
            ids: serde_json::from_value(entry["ids"].clone()).expect("ids"),
            tools: &tools,
            prompt: &prompt,
            stop,
            tokenizer: &tokenizer,
        };
        let name = entry["name"].as_str().expect("name");
        let core = parsetier::Core::new(&entry["core"]);
        let tokens = workload.ids.len() as f64;
        let parser = factories
            .tools
            .registry()
            .resolve_model_to_parser(&workload.model)
            .unwrap_or_default();
        let mut detok = Vec::new();
        for _ in 0..runs + 1 {
            let start = thread_cpu_seconds();
            std::hint::black_box(workload.detok());
            detok.push(thread_cpu_seconds() - start);
        }
        detok.remove(0);
        let detok_us = median(detok) * 1e6 / tokens;
        for &size in &sizes {
            let texts = workload.texts(size);
            let calls = runtime.block_on(async {
                let request = workload.detok_parse(&factories, size).await;
                compare(&request.calls, &entry["expected_calls"])
            });
            let core_chunks = chunks(&workload.ids, stop, size);
            let core_calls = compare(&core.run(&core_chunks), &entry["expected_calls"]);
            let (mut with_detok, mut parse_only, mut by_core) =
                (Vec::new(), Vec::new(), Vec::new());
            let time_core = || {
                let start = thread_cpu_seconds();
                std::hint::black_box(core.run(&core_chunks));
                thread_cpu_seconds() - start
            };
            // One warm-up round, then `runs` rounds, each timing SMG's two forms and the core
            // back to back, the core first in every other round.
            for round in 0..runs + 1 {
                let core_first = round % 2 == 1;
                let c = if core_first { time_core() } else { 0.0 };
                runtime.block_on(async {
                    let start = thread_cpu_seconds();
                    std::hint::black_box(workload.detok_parse(&factories, size).await.calls);
                    let a = thread_cpu_seconds() - start;
                    let start = thread_cpu_seconds();
                    std::hint::black_box(workload.parse(&factories, &texts).await.calls);
                    let b = thread_cpu_seconds() - start;
                    if round > 0 {
                        with_detok.push(a);
                        parse_only.push(b);
                    }
                });
                let c = if core_first { c } else { time_core() };
                if round > 0 {
                    by_core.push(c);
                }
            }
            let core_smg = median(
                by_core
                    .iter()
                    .zip(&with_detok)
                    .map(|(c, s)| c / s)
                    .collect(),
            );
            let line = json!({
                "workload": name,
                "size": size,
                "tool_parser": parser,
                "tokens": workload.ids.len(),
                "detok_parse": median(with_detok) * 1e6 / tokens,
                "parse": median(parse_only) * 1e6 / tokens,
                "detok": detok_us,
                "calls": calls,
                "core": median(by_core) * 1e6 / tokens,
                "core_smg": core_smg,
                "core_calls": core_calls,
            });
            println!("{line}");
        }
    }
}

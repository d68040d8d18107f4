//! parsetier's native core called from Rust, as a Rust router would link it: the pure-Rust engine
//! crate (`server/parsetier_core/engine`), no Python anywhere.
//!
//! `bench/side_by_side.py` writes, per workload, the *core session spec*: every value the Python
//! `NativeSession` builds its `_core.Session` from (the vocabulary's entries and decoder steps,
//! the bound grammar's markers and description, the tools, the start state, echo and parser
//! options, the prompt tail). This module builds the same engine values from it, once per
//! workload for what a deployment shares (vocabulary, markers, grammar, tools) and once per
//! request for the session, and drives the session as `NativeSession.feed` / `finish` do.

use std::collections::BTreeMap;
use std::sync::Arc;

use parsetier_engine::detok::{Marks, Scanner, Step, Vocab};
use parsetier_engine::events::{DeltaKind, StepOut};
use parsetier_engine::grammar::Grammar;
use parsetier_engine::machine::Tools;
use parsetier_engine::parser::{parse_tools, FinishReason, Parser, ParserConfig};
use parsetier_engine::session::Session;
use serde_json::Value;

/// What a deployment shares between the sessions of one model, and one session's options.
pub struct Core {
    vocab: Arc<Vocab>,
    marks: Arc<Marks>,
    grammar: Arc<Grammar>,
    tools: Arc<Tools>,
    config: ParserConfig,
    prompt_ids: Vec<u32>,
    finish: FinishReason,
    /// `NativeSession.finish`'s held text (its literal markers' flush) and stop text.
    held: String,
    stop_text: Option<String>,
}

/// A decoder step as `native.decoder_steps` spells it: `[kind, text, text, count, count]`
/// (the same reading as `_core.Vocabulary`'s constructor).
fn step(spec: &Value) -> Step {
    let one_char = |v: &Value| {
        let text = v.as_str().expect("a step's text");
        let mut chars = text.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => c,
            _ => panic!("{text:?} is not one character"),
        }
    };
    let count = |v: &Value| v.as_u64().expect("a step's count") as usize;
    let text = |v: &Value| v.as_str().expect("a step's text").to_owned();
    match spec[0].as_str().expect("a step's kind") {
        "ByteLevel" => Step::ByteLevel,
        "ByteFallback" => Step::ByteFallback,
        "Fuse" => Step::Fuse,
        "Replace" => Step::Replace {
            pattern: text(&spec[1]),
            content: text(&spec[2]),
        },
        "Strip" => Step::Strip {
            content: one_char(&spec[1]),
            start: count(&spec[3]),
            stop: count(&spec[4]),
        },
        "Metaspace" => Step::Metaspace {
            replacement: one_char(&spec[1]),
            prepend: count(&spec[3]) != 0,
        },
        other => panic!("unsupported decoder step {other}"),
    }
}

fn from<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> T {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("core spec {what}: {e}"))
}

impl Core {
    /// The engine's values from a workload's `core` spec (see `side_by_side.core_spec`).
    pub fn new(spec: &Value) -> Core {
        let vocab = &spec["vocabulary"];
        let tokens: Vec<Option<String>> = from(&vocab["tokens"], "tokens");
        let decoder = vocab["decoder"]
            .as_array()
            .map(|steps| steps.iter().map(step).collect());
        let added: Vec<u32> = from(&vocab["added"], "added");
        let probe: Option<u32> = from(&vocab["probe"], "probe");
        let vocab = Vocab::new(&tokens, decoder, &added, probe).expect("the vocabulary");
        let marks: Vec<(u32, String, String)> = from(&spec["marks"], "marks");
        let grammar = Grammar::from_json(spec["grammar"].as_str().expect("grammar description"))
            .expect("the grammar");
        let tools = parse_tools(spec["tools"].as_str().expect("tools JSON")).expect("the tools");
        let config = ParserConfig {
            start: from(&spec["start"], "start"),
            tools: Vec::new(),
            include_reasoning: from(&spec["include_reasoning"], "include_reasoning"),
            tool_choice: from(&spec["tool_choice"], "tool_choice"),
            parallel_tool_calls: from(&spec["parallel_tool_calls"], "parallel_tool_calls"),
            complete_tool_calls: from(&spec["complete_tool_calls"], "complete_tool_calls"),
            call_id_seed: from(&spec["call_id_seed"], "call_id_seed"),
            echo: from(&spec["echo"], "echo"),
        };
        let finish = &spec["finish"];
        Core {
            vocab: Arc::new(vocab),
            marks: Arc::new(Marks::new(marks)),
            grammar: Arc::new(grammar),
            tools: Arc::new(tools),
            config,
            prompt_ids: from(&spec["prompt_ids"], "prompt_ids"),
            finish: FinishReason::parse(finish["reason"].as_str().expect("finish reason"))
                .expect("a known finish reason"),
            held: from(&finish["held"], "held"),
            stop_text: from(&finish["stop_text"], "stop_text"),
        }
    }

    /// One request's session, as `_core.Session(...)` makes it.
    fn session(&self) -> Session {
        let parser = Parser::with_tools(self.grammar.clone(), &self.config, self.tools.clone())
            .expect("the parser");
        let scanner = Scanner::new(self.vocab.clone(), self.marks.clone(), &self.prompt_ids);
        Session::new(scanner, parser)
    }

    /// One whole request: the session made, each chunk fed and its deltas read (call argument
    /// fragments gathered per call index, as the SMG side gathers its parser's), then finished.
    /// Returns (name, arguments) per call index.
    pub fn run(&self, chunks: &[&[u32]]) -> BTreeMap<usize, (String, String)> {
        let mut session = self.session();
        let mut out = StepOut::default();
        let mut calls = BTreeMap::new();
        let mut fed = false;
        for chunk in chunks {
            // `NativeSession.feed` of an empty step returns an empty output without the core.
            if chunk.is_empty() {
                continue;
            }
            fed = true;
            session.feed(chunk, &mut out);
            read(&out, &mut calls);
            out.clear();
        }
        let last = session.finish(
            self.finish,
            &self.held,
            fed,
            self.stop_text.as_deref(),
            &mut out,
        );
        read(&out, &mut calls);
        out.clear();
        std::hint::black_box(last);
        calls
    }
}

/// A step's output as a caller reads it: every delta's text (the events, which the engine always
/// makes, as the Python caller gets them with `SessionOptions.events` on), call fragments kept.
fn read(out: &StepOut, calls: &mut BTreeMap<usize, (String, String)>) {
    std::hint::black_box(out.events.len());
    for delta in &out.deltas {
        let text = out.delta_text(delta.text);
        if delta.kind == DeltaKind::Call {
            let call: &mut (String, String) = calls.entry(delta.index as usize).or_default();
            if let Some((_, name)) = delta.head {
                call.0.push_str(out.delta_text(name));
            }
            call.1.push_str(text);
        } else {
            std::hint::black_box(text);
        }
    }
}

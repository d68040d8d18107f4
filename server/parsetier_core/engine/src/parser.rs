//! The parser of one session: machine + assembler, exactly the reference `Machine` fed by
//! `Session` and its `Assembler` (`server/parsetier/engine/machine.py`, `assembler.py`).
//!
//! # API (stable: the native session builds on it)
//!
//! ```text
//! let grammar = Arc::new(Grammar::from_json(describe_grammar_json)?);    // once per model
//! let mut p = Parser::new(grammar, &ParserConfig::from_json(config_json)?)?;
//! let mut out = StepOut::default();
//! // one session step (one `Session.feed`): any number of pieces, then one delivery
//! p.feed(piece, tokens, &mut out);   // a piece in sentinel form standing for `tokens` tokens:
//! p.feed(piece2, 1, &mut out);       //   `Machine.feed(piece, tokens)`; events → out.events
//! p.deliver(&mut out);               // `Assembler.add(events of this step)` → out.deltas
//! // read out.events / out.deltas (texts are spans of out.event_text / out.delta_text)
//! out.clear();
//! let last = p.finish(FinishReason::Stop, Some(stop_text), &mut out);  // feeds the stop text
//! // (the caller passes it only when `include_stop_text` applies), finishes, delivers
//! ```
//!
//! Deltas of one `deliver` are merged into runs as the reference merges one `Session.feed`'s
//! deltas, so a session calls `deliver` once per step, after all of its pieces.
//! `takes_runs` / `in_run_state` are `Machine.takes_runs` and `BoundGrammar.run_states`
//! membership, for the id-level fast path (a run of plain ids as one piece).

use std::sync::Arc;

use serde::Deserialize;

use crate::assembler::{Assembler, Delivery};
use crate::events::StepOut;
use crate::grammar::Grammar;
use crate::machine::{Machine, Tools};

/// A session's parser options (`describe.describe_config`).
#[derive(Deserialize, Clone, Debug)]
pub struct ParserConfig {
    /// The start state's name (`session.start_state`).
    pub start: String,
    /// (name, parameters schema) of each tool.
    #[serde(default)]
    pub tools: Vec<(String, serde_json::Value)>,
    #[serde(default = "yes")]
    pub include_reasoning: bool,
    /// `auto`, `none`, `required` or a tool's name.
    #[serde(default = "auto")]
    pub tool_choice: String,
    #[serde(default = "yes")]
    pub parallel_tool_calls: bool,
    #[serde(default)]
    pub complete_tool_calls: bool,
    /// `call_ids.call_id_seed(options)`.
    #[serde(default)]
    pub call_id_seed: String,
    /// The pattern of the prompt terminal that chose the start state (`session.start_and_echo`).
    #[serde(default)]
    pub echo: String,
}

fn yes() -> bool {
    true
}

fn auto() -> String {
    "auto".into()
}

impl ParserConfig {
    pub fn from_json(text: &str) -> Result<ParserConfig, String> {
        serde_json::from_str(text).map_err(|e| format!("parser config: {e}"))
    }
}

/// A session's tools from the JSON of their list of `[name, parameters schema]` pairs.
pub fn parse_tools(text: &str) -> Result<Tools, String> {
    let pairs: Vec<(String, serde_json::Value)> =
        serde_json::from_str(text).map_err(|e| format!("tools: {e}"))?;
    Ok(pairs.into_iter().collect())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    Abort,
}

impl FinishReason {
    pub fn parse(s: &str) -> Option<FinishReason> {
        match s {
            "stop" => Some(FinishReason::Stop),
            "length" => Some(FinishReason::Length),
            "abort" => Some(FinishReason::Abort),
            _ => None,
        }
    }
}

/// The end of a session: what `Final` holds that the parser knows (usage's completion tokens
/// are the tokens fed; the session adds what only it knows, such as logprobs).
#[derive(Debug, Clone)]
pub struct Final {
    /// `stop`, `length`, `abort` or `tool_calls`.
    pub finish_reason: &'static str,
    pub completion_tokens: u64,
    pub reasoning_tokens: u64,
    pub content: String,
    pub reasoning: String,
    /// (id, name, arguments) of each delivered call.
    pub calls: Vec<(String, String, String)>,
}

pub struct Parser {
    machine: Machine,
    assembler: Assembler,
    tokens: u64,
    named: bool,
}

impl Parser {
    /// The machine's and the assembler's buffers a step reaches first (`Session::prefetch`).
    pub fn prefetch(&self) {
        self.machine.prefetch();
        self.assembler.prefetch();
    }

    pub fn new(grammar: Arc<Grammar>, config: &ParserConfig) -> Result<Parser, String> {
        let tools: Tools = config.tools.iter().cloned().collect();
        Parser::with_tools(grammar, config, Arc::new(tools))
    }

    /// `new` with the session's tools given whole (`config.tools` is not read): many sessions
    /// of one deployment share one set of tools, made once (`parse_tools`).
    pub fn with_tools(
        grammar: Arc<Grammar>,
        config: &ParserConfig,
        tools: Arc<Tools>,
    ) -> Result<Parser, String> {
        let start = *grammar
            .state_index
            .get(&config.start)
            .ok_or_else(|| format!("unknown start state {:?}", config.start))?;
        let choice = config.tool_choice.as_str();
        let named = !matches!(choice, "auto" | "none" | "required");
        let delivery = Delivery {
            include_reasoning: config.include_reasoning,
            calls_enabled: choice != "none",
            parallel_tool_calls: config.parallel_tool_calls,
            complete_tool_calls: config.complete_tool_calls,
        };
        Ok(Parser {
            machine: Machine::new(grammar, start, tools, &config.echo),
            assembler: Assembler::new(delivery, &config.call_id_seed),
            tokens: 0,
            named,
        })
    }

    /// One piece of text in sentinel form standing for `tokens` output tokens; its events are
    /// appended to `out.events` (`Machine.feed`). Deltas come with `deliver`.
    pub fn feed(&mut self, piece: &str, tokens: u32, out: &mut StepOut) {
        self.tokens += tokens as u64;
        std::mem::swap(&mut self.machine.c.out, out);
        self.machine.start();
        self.machine.feed(piece, tokens);
        std::mem::swap(&mut self.machine.c.out, out);
    }

    /// The events of `out` not yet delivered → deltas (`Assembler.add`), merged into runs.
    pub fn deliver(&mut self, out: &mut StepOut) {
        if out.delivered < out.events.len() {
            self.assembler.add(out);
        }
    }

    pub fn takes_runs(&self) -> bool {
        self.machine.takes_runs()
    }

    pub fn in_run_state(&self) -> bool {
        self.machine.in_run_state()
    }

    pub fn reasoning_tokens(&self) -> u64 {
        self.machine.reasoning_tokens
    }

    /// End of output (`Session.finish` after its text flush): feed `stop_text` if given (the
    /// caller decides `include_stop_text`), finish the machine (cut unless `Stop`), deliver.
    pub fn finish(
        &mut self,
        reason: FinishReason,
        stop_text: Option<&str>,
        out: &mut StepOut,
    ) -> Final {
        std::mem::swap(&mut self.machine.c.out, out);
        self.machine.start();
        if let Some(t) = stop_text {
            if !t.is_empty() {
                self.machine.feed(t, 0);
            }
        }
        self.machine.finish(reason != FinishReason::Stop);
        std::mem::swap(&mut self.machine.c.out, out);
        self.deliver(out);
        let mut finish_reason = match reason {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        };
        if reason == FinishReason::Stop && self.assembler.tool_call_count() > 0 && !self.named {
            finish_reason = "tool_calls";
        }
        Final {
            finish_reason,
            completion_tokens: self.tokens,
            reasoning_tokens: self.machine.reasoning_tokens,
            content: self.assembler.content().to_string(),
            reasoning: self.assembler.reasoning().to_string(),
            calls: self
                .assembler
                .calls()
                .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
                .collect(),
        }
    }
}

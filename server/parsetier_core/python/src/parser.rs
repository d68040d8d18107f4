//! `_core.Grammar` and `_core.Parser`: the native parser at the piece level, for differential
//! tests against the reference `Machine` + `Assembler` (tests/test_native_parser.py).

use std::sync::Arc;

use parsetier_engine::events::{DeltaKind, StepOut};
use parsetier_engine::grammar::Grammar;
use parsetier_engine::parser::{FinishReason, Parser, ParserConfig};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A bound grammar loaded from `engine.describe.describe_grammar`'s JSON; shared by parsers.
#[pyclass(name = "Grammar", module = "parsetier._core", frozen)]
pub struct PyGrammar {
    pub inner: Arc<Grammar>,
}

#[pymethods]
impl PyGrammar {
    #[new]
    fn new(description: &str) -> PyResult<Self> {
        Grammar::from_json(description)
            .map(|g| PyGrammar { inner: Arc::new(g) })
            .map_err(PyValueError::new_err)
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
}

type EventTuple = (&'static str, String, i32, u32, String);
type CallTuple = (u32, String, Option<String>, Option<String>);
type DeltaTuple = (String, String, Vec<CallTuple>);
type FinalTuple = (
    &'static str,
    u64,
    u64,
    String,
    String,
    Vec<(String, String, String)>,
);

/// One session's parser: `feed(piece, tokens)` → the events of that piece; `deliver()` → the
/// deltas of every event since the last delivery; `finish(reason, stop_text)`.
#[pyclass(name = "Parser", module = "parsetier._core", unsendable)]
pub struct PyParser {
    parser: Parser,
    out: StepOut,
}

fn events_since(out: &StepOut, from: usize) -> Vec<EventTuple> {
    out.events[from..]
        .iter()
        .map(|e| {
            (
                e.kind.name(),
                out.event_text(e.text).to_string(),
                e.tool_index,
                e.tokens,
                out.event_text(e.call_id).to_string(),
            )
        })
        .collect()
}

fn deltas(out: &StepOut) -> Vec<DeltaTuple> {
    out.deltas
        .iter()
        .map(|d| {
            let text = out.delta_text(d.text).to_string();
            match d.kind {
                DeltaKind::Reasoning => (text, String::new(), Vec::new()),
                DeltaKind::Content => (String::new(), text, Vec::new()),
                DeltaKind::Call => {
                    let (id, name) = match d.head {
                        Some((i, n)) => (
                            Some(out.delta_text(i).to_string()),
                            Some(out.delta_text(n).to_string()),
                        ),
                        None => (None, None),
                    };
                    (
                        String::new(),
                        String::new(),
                        vec![(d.index, text, id, name)],
                    )
                }
            }
        })
        .collect()
}

#[pymethods]
impl PyParser {
    #[new]
    fn new(grammar: &PyGrammar, config: &str) -> PyResult<Self> {
        let config = ParserConfig::from_json(config).map_err(PyValueError::new_err)?;
        let parser = Parser::new(grammar.inner.clone(), &config).map_err(PyValueError::new_err)?;
        Ok(PyParser {
            parser,
            out: StepOut::default(),
        })
    }

    /// Feed one piece (sentinel form) for `tokens` tokens; returns its events as
    /// (kind, text, tool_index, tokens, call_id) tuples.
    fn feed(&mut self, piece: &str, tokens: u32) -> Vec<EventTuple> {
        let from = self.out.events.len();
        self.parser.feed(piece, tokens, &mut self.out);
        events_since(&self.out, from)
    }

    /// The deltas of the events fed since the last delivery, as (reasoning, content,
    /// ((index, arguments, id, name),)) tuples.
    fn deliver(&mut self) -> Vec<DeltaTuple> {
        self.parser.deliver(&mut self.out);
        let d = deltas(&self.out);
        self.out.clear();
        d
    }

    /// End of output: (events, deltas, (finish_reason, completion_tokens, reasoning_tokens,
    /// content, reasoning, calls)).
    #[pyo3(signature = (reason, stop_text=None))]
    fn finish(
        &mut self,
        reason: &str,
        stop_text: Option<&str>,
    ) -> PyResult<(Vec<EventTuple>, Vec<DeltaTuple>, FinalTuple)> {
        let reason = FinishReason::parse(reason)
            .ok_or_else(|| PyValueError::new_err("unknown finish reason"))?;
        // Events fed since the last delivery are delivered together with the finish's own, in
        // one delivery (as `Session.finish` adds its text flush and the machine's end at once):
        // their fragments of one call merge into one delta.
        let from = self.out.events.len();
        let f = self.parser.finish(reason, stop_text, &mut self.out);
        let events = events_since(&self.out, from);
        let d = deltas(&self.out);
        self.out.clear();
        Ok((
            events,
            d,
            (
                f.finish_reason,
                f.completion_tokens,
                f.reasoning_tokens,
                f.content,
                f.reasoning,
                f.calls,
            ),
        ))
    }

    /// Feed whole steps (each a list of (piece, tokens)), delivering after each, without making
    /// Python objects of the output: the engine's own cost, for bench/native_parser_bench.py.
    /// Returns how many events and deltas were made, and the nanoseconds the steps took (the
    /// conversion of the arguments from Python excluded).
    fn run_steps(&mut self, steps: Vec<Vec<(String, u32)>>) -> (usize, usize, u128) {
        let (mut events, mut deltas) = (0, 0);
        let t0 = std::time::Instant::now();
        for step in &steps {
            for (piece, tokens) in step {
                self.parser.feed(piece, *tokens, &mut self.out);
            }
            self.parser.deliver(&mut self.out);
            events += self.out.events.len();
            deltas += self.out.deltas.len();
            self.out.clear();
        }
        (events, deltas, t0.elapsed().as_nanos())
    }

    #[getter]
    fn takes_runs(&self) -> bool {
        self.parser.takes_runs()
    }

    #[getter]
    fn in_run_state(&self) -> bool {
        self.parser.in_run_state()
    }

    #[getter]
    fn reasoning_tokens(&self) -> u64 {
        self.parser.reasoning_tokens()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGrammar>()?;
    m.add_class::<PyParser>()?;
    Ok(())
}

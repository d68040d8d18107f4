//! The bound grammar, as `server/parsetier/engine/describe.py` writes it: states, transitions and
//! terminal patterns in sentinel form, plus what binding derived from them. Loading compiles the
//! lexer's terminal sets and the capture rules; a rule the regex crates cannot compile makes the
//! grammar unsupported (an error: the session falls back to the reference engine).

use std::collections::HashMap;

use serde::Deserialize;

use crate::lexer::TerminalSet;
use crate::text::has_visible;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Content,
    Reasoning,
    Skip,
    Capture,
    Value,
    Json,
    Envelope,
    Elements,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    CallBegin,
    CallEnd,
    ParamBegin,
    ParamEnd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Json,
    Gemma,
    Python,
    PythonJson,
    Keyed,
}

/// A `follow` list: the patterns one of which must come next (after optional whitespace), and
/// whether the end of the output counts too.
#[derive(Clone, Debug)]
pub struct Follow {
    pub patterns: Vec<String>,
    pub end: bool,
}

impl Follow {
    /// Whether what follows `buf[at..]` makes a `follow` terminal structural: Some(true/false), or
    /// None while the text so far cannot tell (`ending`: nothing more will come).
    pub fn followed(&self, buf: &str, at: usize, ending: bool) -> Option<bool> {
        if !self.patterns.is_empty() {
            match follow_match(&self.patterns, buf, at) {
                FollowMatch::No => return Some(false),
                FollowMatch::Full => return Some(true),
                FollowMatch::Partial => {}
            }
        } else if has_visible(&buf[at..]) {
            return Some(false);
        }
        if !ending {
            return None;
        }
        Some(self.end)
    }
}

enum FollowMatch {
    No,
    Partial,
    Full,
}

/// `\s*(?:p1|p2|…)` matched at `at` with the `regex` module's partial semantics: a full match if
/// there is one, else partial if more text could make one.
fn follow_match(patterns: &[String], buf: &str, at: usize) -> FollowMatch {
    let b = buf.as_bytes();
    let mut partial = false;
    let mut k = at;
    loop {
        let rest = &b[k..];
        for p in patterns {
            let p = p.as_bytes();
            if rest.starts_with(p) {
                return FollowMatch::Full;
            }
            if rest.len() < p.len() && p.starts_with(rest) {
                partial = true;
            }
        }
        match buf[k..].chars().next() {
            Some(c) if c.is_whitespace() => k += c.len_utf8(),
            Some(_) => break,
            None => {
                partial = true;
                break;
            }
        }
    }
    if partial {
        FollowMatch::Partial
    } else {
        FollowMatch::No
    }
}

/// An `ends_turn` check: the terminal opens calls only where they end the model's turn (after
/// each `close`, only whitespace, the terminal again, or the end of the output; no `unless`
/// terminal before that).
#[derive(Clone, Debug)]
pub struct Turn {
    pub close: String,
    pub unless: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Transition {
    /// `None`: the rule's next (capture rules with no `next` keep the terminal's).
    pub next: Option<usize>,
    pub actions: Vec<Action>,
    pub keep: bool,
    pub follow: Option<Follow>,
    pub turn: Option<Turn>,
}

impl Transition {
    pub fn to(next: usize) -> Transition {
        Transition {
            next: Some(next),
            actions: Vec::new(),
            keep: false,
            follow: None,
            turn: None,
        }
    }
}

pub struct Rule {
    pub regex: fancy_regex::Regex,
    pub next: Option<usize>,
    pub actions: Vec<Action>,
}

pub struct State {
    pub name: String,
    pub kind: Kind,
    /// The lexer's terminals, longest first; `transitions[i]` is the transition of `tset`'s i-th.
    pub tset: TerminalSet,
    pub transitions: Vec<Transition>,
    pub done: Option<Transition>,
    pub end: Option<Transition>,
    pub rules: Vec<Rule>,
    pub allow_list: bool,
    pub text_next: Option<usize>,
    pub dialect: Dialect,
    pub item: String,
    pub unescape_xml: bool,
    pub run_state: bool,
    /// Content/reasoning states nothing moves on text: the first characters of their terminals
    /// (sentinels aside) that a piece must not hold for the fast path (`plain_stops`).
    pub plain_firsts: Option<Vec<char>>,
    /// The patterns of the state's terminals in `on` order, with their `follow` checks (an
    /// elements reader stops at them).
    pub stops: Vec<(String, Option<Follow>)>,
    /// skip states: their text is markup the format consumes (else only whitespace is).
    pub markup: bool,
}

pub struct Grammar {
    pub name: String,
    pub states: Vec<State>,
    pub state_index: HashMap<String, usize>,
    pub trim_values: bool,
    pub format_ids: bool,
    pub text_of_sentinel: HashMap<char, String>,
    pub quote: String,
    pub tag: String,
}

impl Grammar {
    /// Load the JSON of `describe.describe_grammar`.
    pub fn from_json(text: &str) -> Result<Grammar, String> {
        let d: GrammarDesc =
            serde_json::from_str(text).map_err(|e| format!("grammar description: {e}"))?;
        let n = d.states.len();
        let check = |i: Option<usize>| -> Result<Option<usize>, String> {
            match i {
                Some(k) if k >= n => Err(format!("state index {k} out of range")),
                other => Ok(other),
            }
        };
        let mut states = Vec::with_capacity(n);
        for s in d.states {
            let kind = match s.kind.as_str() {
                "content" => Kind::Content,
                "reasoning" => Kind::Reasoning,
                "skip" => Kind::Skip,
                "capture" => Kind::Capture,
                "value" => Kind::Value,
                "json" => Kind::Json,
                "envelope" => Kind::Envelope,
                "elements" => Kind::Elements,
                other => return Err(format!("state {}: unknown kind {other}", s.name)),
            };
            let dialect = match s.dialect.as_str() {
                "json" => Dialect::Json,
                "gemma" => Dialect::Gemma,
                "python" => Dialect::Python,
                "python_json" => Dialect::PythonJson,
                "keyed" => Dialect::Keyed,
                other => return Err(format!("state {}: unknown dialect {other}", s.name)),
            };
            let mut transitions = Vec::with_capacity(s.terminal_set.len());
            for p in &s.terminal_set {
                let t = s.on.iter().find(|t| &t.pattern == p).ok_or_else(|| {
                    format!("state {}: terminal set pattern without transition", s.name)
                })?;
                transitions.push(t.compile(check)?);
            }
            let mut rules = Vec::new();
            for r in &s.rules {
                let regex = fancy_regex::Regex::new(&r.pattern).map_err(|e| {
                    format!(
                        "state {}: rule {:?} is not supported natively: {e}",
                        s.name, r.pattern
                    )
                })?;
                rules.push(Rule {
                    regex,
                    next: check(r.next)?,
                    actions: actions(&r.actions)?,
                });
            }
            states.push(State {
                name: s.name.clone(),
                kind,
                tset: TerminalSet::new(&s.terminal_set),
                transitions,
                done: s.done.as_ref().map(|t| t.compile(check)).transpose()?,
                end: s.end.as_ref().map(|t| t.compile(check)).transpose()?,
                rules,
                allow_list: s.allow_list,
                text_next: check(s.text_next)?,
                dialect,
                item: s.item,
                unescape_xml: s.unescape == "xml",
                run_state: s.run_state,
                plain_firsts: s
                    .plain_firsts
                    .map(|v| v.iter().filter_map(|c| c.chars().next()).collect()),
                stops: s
                    .on
                    .iter()
                    .map(|t| {
                        let f = t.has_follow.then(|| Follow {
                            patterns: t.follow.clone(),
                            end: t.follow_end,
                        });
                        (t.pattern.clone(), f)
                    })
                    .collect(),
                markup: s.markup,
            });
        }
        let state_index = states
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        let mut text_of_sentinel = HashMap::new();
        for (k, v) in d.text_of_sentinel {
            let c = k.chars().next().ok_or("empty sentinel")?;
            text_of_sentinel.insert(c, v);
        }
        Ok(Grammar {
            name: d.name,
            states,
            state_index,
            trim_values: d.trim_values,
            format_ids: d.format_ids,
            text_of_sentinel,
            quote: d.quote,
            tag: d.tag,
        })
    }
}

fn actions(names: &[String]) -> Result<Vec<Action>, String> {
    names
        .iter()
        .map(|a| match a.as_str() {
            "call_begin" => Ok(Action::CallBegin),
            "call_end" => Ok(Action::CallEnd),
            "param_begin" => Ok(Action::ParamBegin),
            "param_end" => Ok(Action::ParamEnd),
            other => Err(format!("unknown action {other}")),
        })
        .collect()
}

#[derive(Deserialize)]
struct GrammarDesc {
    name: String,
    states: Vec<StateDesc>,
    trim_values: bool,
    format_ids: bool,
    text_of_sentinel: HashMap<String, String>,
    quote: String,
    tag: String,
}

#[derive(Deserialize)]
struct StateDesc {
    name: String,
    kind: String,
    on: Vec<TransitionDesc>,
    terminal_set: Vec<String>,
    done: Option<TransitionDesc>,
    end: Option<TransitionDesc>,
    rules: Vec<RuleDesc>,
    allow_list: bool,
    text_next: Option<usize>,
    dialect: String,
    item: String,
    unescape: String,
    run_state: bool,
    plain_firsts: Option<Vec<String>>,
    #[serde(default)]
    markup: bool,
}

#[derive(Deserialize)]
struct TransitionDesc {
    next: Option<usize>,
    actions: Vec<String>,
    keep: bool,
    follow: Vec<String>,
    follow_end: bool,
    has_follow: bool,
    #[serde(default)]
    turn_close: String,
    #[serde(default)]
    turn_unless: Vec<String>,
    #[serde(default)]
    pattern: String,
}

impl TransitionDesc {
    fn compile(
        &self,
        check: impl Fn(Option<usize>) -> Result<Option<usize>, String>,
    ) -> Result<Transition, String> {
        Ok(Transition {
            next: check(self.next)?,
            actions: actions(&self.actions)?,
            keep: self.keep,
            follow: self.has_follow.then(|| Follow {
                patterns: self.follow.clone(),
                end: self.follow_end,
            }),
            turn: (!self.turn_close.is_empty()).then(|| Turn {
                close: self.turn_close.clone(),
                unless: self.turn_unless.clone(),
            }),
        })
    }
}

#[derive(Deserialize)]
struct RuleDesc {
    pattern: String,
    next: Option<usize>,
    actions: Vec<String>,
}

//! Key/value parameters (XML-style formats) → one JSON object, typed by the tool's schema
//! (`engine/readers/params.py`).

use serde_json::Value as Schema;

use super::Sink;
use crate::pyjson::{self, Value, MAX_DEPTH};
use crate::text::push_json_string;

/// The JSON types a property schema allows, as a set of names (small: a list).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Types(pub Vec<String>);

impl Types {
    pub fn has(&self, t: &str) -> bool {
        self.0.iter().any(|x| x == t)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn only(&self, t: &str) -> bool {
        !self.0.is_empty() && self.0.iter().all(|x| x == t)
    }
    fn add(&mut self, t: String) {
        if !self.has(&t) {
            self.0.push(t);
        }
    }
}

/// `schema_types`.
pub fn schema_types(schema: Option<&Schema>) -> Types {
    let mut out = Types::default();
    let Some(Schema::Object(map)) = schema else {
        return out;
    };
    if map.is_empty() {
        return out;
    }
    match map.get("type") {
        Some(Schema::String(k)) => {
            out.add(k.clone());
            return out;
        }
        Some(Schema::Array(list)) => {
            for k in list {
                out.add(py_str(k));
            }
            return out;
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Schema::Array(subs)) = map.get(key) {
            for sub in subs {
                if sub.is_object() {
                    for t in schema_types(Some(sub)).0 {
                        out.add(t);
                    }
                }
            }
        }
    }
    if out.is_empty() {
        if let Some(Schema::Array(e)) = map.get("enum") {
            if e.iter().any(|v| v.is_string()) {
                out.add("string".into());
            }
        }
    }
    out
}

/// `str(k)` of a JSON value as Python would print the value it loads to.
fn py_str(v: &Schema) -> String {
    match v {
        Schema::String(s) => s.clone(),
        Schema::Null => "None".into(),
        Schema::Bool(true) => "True".into(),
        Schema::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// `typed_value`: JSON text for a raw value the schema says is not (only) a string.
pub fn typed_value(text: &str, types: &Types) -> String {
    pyjson::dumps(&typed(text, types))
}

pub fn typed(text: &str, types: &Types) -> Value {
    let value = crate::text::py_strip(text);
    if let Some(v) = pyjson::loads(value, MAX_DEPTH) {
        return v;
    }
    match value {
        "True" => return Value::Bool(true),
        "False" => return Value::Bool(false),
        "None" => return Value::Null,
        _ => {}
    }
    if (types.has("object") || types.has("array"))
        && (value.starts_with('{') || value.starts_with('['))
    {
        if let Some(v) = crate::readers::python_calls::literal_container(value) {
            return v;
        }
    }
    Value::Str(value.to_string())
}

const NULL_SPELLINGS: [&str; 2] = ["null", "None"];

/// Key/value parameters → one JSON object, streamed. One writer per tool call.
pub struct ParamWriter {
    properties: Option<serde_json::Map<String, Schema>>,
    trim: bool,
    first: bool,
    in_value: bool,
    streaming: bool,
    types: Types,
    buffer: String,
    leading: bool,
    held_newline: bool,
    maybe_null: Option<String>,
    scratch: String,
}

impl ParamWriter {
    pub fn new(parameters: Option<&Schema>, trim_newline: bool) -> ParamWriter {
        let properties = match parameters {
            Some(Schema::Object(m)) => match m.get("properties") {
                Some(Schema::Object(p)) => Some(p.clone()),
                _ => None,
            },
            _ => None,
        };
        ParamWriter {
            properties,
            trim: trim_newline,
            first: true,
            in_value: false,
            streaming: false,
            types: Types::default(),
            buffer: String::new(),
            leading: true,
            held_newline: false,
            maybe_null: None,
            scratch: String::new(),
        }
    }

    /// Start a value; `forced` is a type the markup states (`string` or `json`).
    pub fn begin(&mut self, key: &str, forced: Option<&str>, sink: &mut dyn Sink) {
        if self.in_value {
            self.end(sink);
        }
        self.types = match forced {
            Some("string") => Types(vec!["string".into()]),
            Some("json") => Types(vec!["json".into()]),
            _ => schema_types(self.properties.as_ref().and_then(|p| p.get(key))),
        };
        self.streaming = self.types.is_empty() || self.types.has("string");
        self.in_value = true;
        self.leading = true;
        self.held_newline = false;
        self.buffer.clear();
        self.maybe_null = (self.streaming && self.types.has("null")).then(String::new);
        let mut head = String::from(if self.first { "{" } else { ", " });
        self.first = false;
        push_json_string(&mut head, key);
        head.push_str(": ");
        if self.streaming && self.maybe_null.is_none() {
            head.push('"');
        }
        sink.args(&head);
    }

    pub fn value(&mut self, text: &str, sink: &mut dyn Sink) {
        if !self.in_value || text.is_empty() {
            return;
        }
        if !self.streaming {
            self.buffer.push_str(text);
            return;
        }
        let mut t = std::mem::take(&mut self.scratch);
        t.clear();
        let mut text = text;
        if self.trim {
            if self.leading {
                self.leading = false;
                text = text.strip_prefix('\n').unwrap_or(text);
            }
            if self.held_newline {
                t.push('\n');
                self.held_newline = false;
            }
            t.push_str(text);
            if t.ends_with('\n') {
                t.pop();
                self.held_newline = true;
            }
        } else {
            t.push_str(text);
        }
        if let Some(held) = self.maybe_null.as_mut() {
            if !t.is_empty() {
                held.push_str(&t);
                if NULL_SPELLINGS.iter().any(|s| s.starts_with(held.as_str())) {
                    self.scratch = t;
                    return;
                }
                t.clear();
                t.push_str(held);
                self.maybe_null = None;
                sink.args("\"");
            }
        }
        if !t.is_empty() {
            sink.args_escaped(&t);
        }
        self.scratch = t;
    }

    pub fn end(&mut self, sink: &mut dyn Sink) {
        if !self.in_value {
            return;
        }
        self.in_value = false;
        if let Some(held) = self.maybe_null.take() {
            if NULL_SPELLINGS.contains(&held.as_str()) {
                sink.args("null");
            } else {
                let mut s = String::new();
                push_json_string(&mut s, &held);
                sink.args(&s);
            }
        } else if self.streaming {
            sink.args("\"");
        } else {
            let v = typed_value(&self.buffer, &self.types);
            sink.args(&v);
        }
    }

    /// Finish the object; a call with no parameters gets `{}`.
    pub fn close(&mut self, sink: &mut dyn Sink) {
        self.end(sink);
        sink.args(if self.first { "{}" } else { "}" });
        self.first = false;
    }
}

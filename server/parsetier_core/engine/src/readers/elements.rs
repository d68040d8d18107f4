//! One element per argument (MiniMax-M3) → one JSON object, typed by the tool's schema
//! (`engine/readers/elements.py`): `P<city>Paris P</city>P<tags>P<item>a P</item>P</tags>`.

use serde_json::Value as Schema;

use super::params::{schema_types, typed_value};
use super::{Sink, Status};
use crate::grammar::Follow;
use crate::pyjson::{self, Value, MAX_DEPTH as _JSON_DEPTH};
use crate::text::{has_visible, is_sentinel, push_json_string, py_strip};

const MAX_DEPTH: usize = 64;
const MAX_NAME: usize = 256;
const MIXED_TEXT: &str = "$text";

enum Node {
    Text(String),
    Children(Vec<(String, Node)>),
}

struct Frame {
    name: String,
    text: String,
    children: Vec<(String, Node)>,
}

impl Frame {
    fn node(self) -> Node {
        if self.children.is_empty() {
            return Node::Text(self.text);
        }
        let mut children = self.children;
        if has_visible(&self.text) {
            children.push((MIXED_TEXT.to_string(), Node::Text(self.text)));
        }
        Node::Children(children)
    }
}

pub struct ElementArgsReader {
    props: serde_json::Map<String, Schema>,
    tag: String,
    item: String,
    stops: Vec<(String, Option<Follow>)>,
    pub ending: bool,
    stack: Vec<Frame>,
    pending: Option<(String, Vec<Node>)>,
    first: bool,
    closed: bool,
    streaming: bool,
    pub status: Status,
}

/// `_TAG` at `at`: `<(/?)(name)>` → (closing, name, end).
fn tag_at(text: &str, at: usize) -> Option<(bool, &str, usize)> {
    let rest = text.get(at..)?;
    let mut it = rest.char_indices();
    if it.next()?.1 != '<' {
        return None;
    }
    let mut k = 1;
    let closing = rest[1..].starts_with('/');
    if closing {
        k = 2;
    }
    let name_start = k;
    for (count, (i, c)) in rest[k..].char_indices().enumerate() {
        if c == '>' {
            if count == 0 {
                return None;
            }
            let end = k + i;
            return Some((closing, &rest[name_start..end], at + end + 1));
        }
        let ok = if count == 0 {
            !(c == '<' || c == '/' || c.is_whitespace() || is_sentinel(c))
        } else {
            !(c == '<' || c == '\n' || is_sentinel(c))
        };
        if !ok || count >= MAX_NAME {
            return None;
        }
    }
    None
}

/// `_PARTIAL.fullmatch(text, after)`: nothing, or a tag's start still being written.
fn partial_tag(rest: &str) -> bool {
    if rest.is_empty() {
        return true;
    }
    let Some(r) = rest.strip_prefix('<') else {
        return false;
    };
    let r = r.strip_prefix('/').unwrap_or(r);
    let mut count = 0;
    for c in r.chars() {
        if c == '<' || c == '>' || c == '\n' || is_sentinel(c) {
            return false;
        }
        count += 1;
    }
    count <= MAX_NAME
}

impl ElementArgsReader {
    pub fn new(
        tag: &str,
        item: &str,
        stops: Vec<(String, Option<Follow>)>,
        tool: Option<&Schema>,
    ) -> Self {
        let props = match tool {
            Some(Schema::Object(m)) => match m.get("properties") {
                Some(Schema::Object(p)) => p.clone(),
                _ => Default::default(),
            },
            _ => Default::default(),
        };
        ElementArgsReader {
            props,
            tag: tag.to_string(),
            item: item.to_string(),
            stops,
            ending: false,
            stack: Vec::new(),
            pending: None,
            first: true,
            closed: false,
            streaming: false,
            status: Status::Open,
        }
    }

    pub fn feed(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        let n = text.len();
        if self.tag.is_empty() {
            self.text(&text[pos..], sink);
            return n;
        }
        while pos < n {
            let Some(k) = text[pos..].find(self.tag.as_str()) else {
                self.text(&text[pos..], sink);
                return n;
            };
            let at = pos + k;
            if at > pos {
                self.text(&text[pos..at], sink);
            }
            pos = at;
            let after = pos + self.tag.len();
            let m = tag_at(text, after);
            if let Some((true, name, end)) = m {
                if self.stack.iter().any(|f| f.name == name) {
                    let name = name.to_string();
                    self.close(&name, sink);
                    pos = end;
                    continue;
                }
            }
            match self.stop_at(text, pos) {
                None => return pos,
                Some(true) => {
                    self.end_all(sink);
                    self.status = Status::Complete;
                    return pos;
                }
                Some(false) => {}
            }
            if let Some((false, name, end)) = m {
                if self.stack.len() < MAX_DEPTH && !self.streaming {
                    let name = name.to_string();
                    self.open(&name, sink);
                    pos = end;
                    continue;
                }
            }
            if m.is_none()
                && partial_tag(&text[after..])
                && text[after..].chars().count() <= MAX_NAME + 2
            {
                return pos;
            }
            let end = m.map_or(after, |m| m.2);
            self.text(&text[pos..end], sink);
            pos = end;
        }
        n
    }

    fn stop_at(&self, text: &str, pos: usize) -> Option<bool> {
        let rest = &text[pos..];
        for (stop, follow) in &self.stops {
            if rest.starts_with(stop.as_str()) {
                let Some(f) = follow else { return Some(true) };
                match f.followed(text, pos + stop.len(), self.ending) {
                    Some(false) => continue,
                    verdict => return verdict,
                }
            }
            if rest.len() < stop.len() && stop.starts_with(rest) {
                return None;
            }
        }
        Some(false)
    }

    fn text(&mut self, text: &str, sink: &mut dyn Sink) {
        if self.streaming {
            sink.args_escaped(text);
        } else if let Some(top) = self.stack.last_mut() {
            top.text.push_str(text);
        }
    }

    fn head(&mut self) -> &'static str {
        let h = if self.first { "{" } else { ", " };
        self.first = false;
        h
    }

    fn open(&mut self, name: &str, sink: &mut dyn Sink) {
        if self.stack.is_empty() {
            let streams = match self.props.get(name) {
                Some(s @ Schema::Object(_)) => schema_types(Some(s)).only("string"),
                _ => false,
            };
            if self
                .pending
                .as_ref()
                .is_some_and(|(p, _)| p != name || streams)
            {
                self.write_pending(sink);
            }
            if streams {
                let mut s = String::from(self.head());
                push_json_string(&mut s, name);
                s.push_str(": \"");
                sink.args(&s);
                self.streaming = true;
            }
        }
        self.stack.push(Frame {
            name: name.to_string(),
            text: String::new(),
            children: Vec::new(),
        });
    }

    fn close(&mut self, name: &str, sink: &mut dyn Sink) {
        if self.streaming {
            self.stack.pop();
            self.streaming = false;
            sink.args("\"");
            return;
        }
        while let Some(frame) = self.stack.pop() {
            let fname = frame.name.clone();
            let node = frame.node();
            if let Some(top) = self.stack.last_mut() {
                top.children.push((fname.clone(), node));
            } else if let Some((p, nodes)) = self.pending.as_mut().filter(|(p, _)| *p == fname) {
                let _ = p;
                nodes.push(node);
            } else {
                self.write_pending(sink);
                self.pending = Some((fname.clone(), vec![node]));
            }
            if fname == name {
                return;
            }
        }
    }

    fn end_all(&mut self, sink: &mut dyn Sink) {
        if let Some(first) = self.stack.first() {
            let name = first.name.clone();
            self.close(&name, sink);
        }
    }

    /// The call ends: close what is open, write what is held, finish the object.
    pub fn close_call(&mut self, sink: &mut dyn Sink) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.end_all(sink);
        self.write_pending(sink);
        sink.args(if self.first { "{}" } else { "}" });
    }

    fn write_pending(&mut self, sink: &mut dyn Sink) {
        let Some((name, nodes)) = self.pending.take() else {
            return;
        };
        let schema = self.props.get(&name).filter(|s| s.is_object());
        let value = if nodes.len() == 1 {
            convert(&nodes[0], schema, &self.item)
        } else {
            let items = match schema {
                Some(s) if container(s) == Some("array") => s.get("items"),
                other => other,
            };
            let items = items.filter(|s| s.is_object());
            Value::List(
                nodes
                    .iter()
                    .map(|n| convert(n, items, &self.item))
                    .collect(),
            )
        };
        let mut s = String::from(self.head());
        push_json_string(&mut s, &name);
        s.push_str(": ");
        pyjson::dump(&mut s, &value);
        sink.args(&s);
    }
}

/// `_container`: `array` or `object` when the schema allows that container.
fn container(schema: &Schema) -> Option<&'static str> {
    let types = schema_types(Some(schema));
    for kind in ["array", "object"] {
        if types.has(kind) {
            return Some(kind);
        }
    }
    let Schema::Object(m) = schema else {
        return None;
    };
    if types.is_empty() {
        if m.contains_key("items") {
            return Some("array");
        }
        if m.contains_key("properties") || m.contains_key("additionalProperties") {
            return Some("object");
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Schema::Array(subs)) = m.get(key) {
            for sub in subs {
                if sub.is_object() {
                    if let Some(found) = container(sub) {
                        return Some(found);
                    }
                }
            }
        }
    }
    None
}

fn sub_schema<'a>(schema: &'a Schema, key: &str) -> Option<&'a Schema> {
    if let Some(s) = schema.get(key).filter(|s| s.is_object()) {
        return Some(s);
    }
    for arms in ["anyOf", "oneOf"] {
        if let Some(Schema::Array(list)) = schema.get(arms) {
            for arm in list {
                if let Some(s) = arm.get(key).filter(|s| s.is_object()) {
                    if arm.is_object() {
                        return Some(s);
                    }
                }
            }
        }
    }
    None
}

fn convert(node: &Node, schema: Option<&Schema>, item: &str) -> Value {
    match node {
        Node::Text(s) => {
            let Some(schema) = schema else {
                return Value::Str(s.clone());
            };
            let types = schema_types(Some(schema));
            let cont = container(schema);
            if let Some(c) = cont {
                if !types.has("string") && !has_visible(s) {
                    return if c == "array" {
                        Value::List(Vec::new())
                    } else {
                        Value::Dict(Vec::new())
                    };
                }
            }
            if types.is_empty() || types.has("string") {
                let t = py_strip(s);
                return if types.has("null") && (t == "null" || t == "None") {
                    Value::Null
                } else {
                    Value::Str(s.clone())
                };
            }
            let text = typed_value(s, &types);
            pyjson::loads(&text, _JSON_DEPTH + 1).unwrap_or(Value::Str(text))
        }
        Node::Children(children) => {
            let cont = schema.and_then(container);
            if cont == Some("array")
                || (cont.is_none() && children.iter().all(|(n, _)| n == item || n == MIXED_TEXT))
            {
                let items = schema.and_then(|s| sub_schema(s, "items"));
                return Value::List(
                    children
                        .iter()
                        .map(|(_, c)| convert(c, items, item))
                        .collect(),
                );
            }
            let props = schema.and_then(|s| sub_schema(s, "properties"));
            let extra = schema.and_then(|s| s.get("additionalProperties"));
            let mut out: Vec<(Value, Value)> = Vec::new();
            let mut repeated: Vec<String> = Vec::new();
            for (name, child) in children {
                let sub = props
                    .and_then(|p| p.get(name))
                    .or(extra)
                    .filter(|s| s.is_object());
                let value = convert(child, sub, item);
                match out.iter_mut().find(|(k, _)| k.as_str() == Some(name)) {
                    None => out.push((Value::Str(name.clone()), value)),
                    Some(slot) => {
                        if repeated.contains(name) {
                            if let Value::List(l) = &mut slot.1 {
                                l.push(value);
                            }
                        } else {
                            let old = std::mem::replace(&mut slot.1, Value::Null);
                            slot.1 = Value::List(vec![old, value]);
                            repeated.push(name.clone());
                        }
                    }
                }
            }
            Value::Dict(out)
        }
    }
}

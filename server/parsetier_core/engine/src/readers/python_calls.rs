//! Pythonic call lists (Llama 4, LFM2…) → calls with JSON arguments
//! (`engine/readers/python_calls.py`), and Python literals as JSON (`_py_scalar`, and the
//! `ast.literal_eval` of containers that `params.typed_value` falls back on).

use super::{CallsState, Sink, Status};
use crate::pyjson::{self, float_repr, Value, MAX_DEPTH, MAX_NUMBER_DIGITS};
use crate::text::{is_sentinel, push_json_fragment, push_json_string, py_isspace};

const TOKEN_LIMIT: usize = 4096;

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `JSON_SCALAR.fullmatch(token)` (`engine/readers/python_calls.py`).
pub fn json_scalar(token: &str) -> bool {
    if matches!(token, "true" | "false" | "null") {
        return true;
    }
    let b = token.as_bytes();
    // the end of the digits from `i` on
    let digits = |mut i: usize| {
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        i
    };
    let mut i = usize::from(b.first() == Some(&b'-'));
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(i),
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        let s = i + 1;
        i = digits(s);
        if i == s {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let s = i;
        i = digits(s);
        if i == s {
            return false;
        }
    }
    i == b.len()
}

/// Digits with Python's underscores (single, between digits) → the digits, else None.
fn strip_underscores(s: &str, digit: impl Fn(u8) -> bool) -> Option<String> {
    let b = s.as_bytes();
    if b.is_empty() || b[0] == b'_' || b[b.len() - 1] == b'_' {
        return None;
    }
    let mut out = String::with_capacity(s.len());
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            if b[i - 1] == b'_' {
                return None;
            }
        } else if digit(c) {
            out.push(c as char);
        } else {
            return None;
        }
    }
    Some(out)
}

/// Digits of `radix` → decimal text (a small big-integer conversion), None past the digit bound.
fn radix_to_decimal(digits: &str, radix: u32) -> Option<String> {
    let mut limbs: Vec<u32> = vec![0]; // base 1e9, little-endian
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        let mut carry = d as u64;
        for l in limbs.iter_mut() {
            let v = *l as u64 * radix as u64 + carry;
            *l = (v % 1_000_000_000) as u32;
            carry = v / 1_000_000_000;
        }
        while carry > 0 {
            limbs.push((carry % 1_000_000_000) as u32);
            carry /= 1_000_000_000;
        }
        if limbs.len() * 9 > MAX_NUMBER_DIGITS + 18 {
            return None;
        }
    }
    let mut s = limbs.last().map(|l| l.to_string()).unwrap_or_default();
    for l in limbs.iter().rev().skip(1) {
        s.push_str(&format!("{l:09}"));
    }
    (s.len() <= MAX_NUMBER_DIGITS).then_some(s)
}

/// A number's sign and the rest: (negative, body).
fn split_sign(token: &str) -> (bool, &str) {
    match token.as_bytes().first() {
        Some(b'-') => (true, &token[1..]),
        Some(b'+') => (false, &token[1..]),
        _ => (false, token),
    }
}

/// `int(token, 0)` as decimal text.
fn py_int(token: &str) -> Option<String> {
    let (neg, body) = split_sign(token);
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(r) = lower.strip_prefix("0x") {
        (16, r)
    } else if let Some(r) = lower.strip_prefix("0o") {
        (8, r)
    } else if let Some(r) = lower.strip_prefix("0b") {
        (2, r)
    } else {
        (10, lower.as_str())
    };
    let digits = if radix != 10 {
        digits.strip_prefix('_').unwrap_or(digits)
    } else {
        digits
    };
    let clean = strip_underscores(digits, |c| (c as char).is_digit(radix))?;
    let dec = if radix == 10 {
        if clean.len() > 1 && clean.starts_with('0') && clean.bytes().any(|c| c != b'0') {
            return None;
        }
        if clean.len() > MAX_NUMBER_DIGITS {
            return None;
        }
        pyjson::canonical_int(&clean)
    } else {
        radix_to_decimal(&clean, radix)?
    };
    Some(if neg && dec != "0" {
        format!("-{dec}")
    } else {
        dec
    })
}

/// `float(token)` (finite only).
fn py_float(token: &str) -> Option<f64> {
    let (neg, body) = split_sign(token);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return None;
    }
    // digits with underscores, '.', exponent
    let b = lower.as_bytes();
    let mut clean = String::new();
    let mut i = 0;
    let digits = |i: &mut usize, out: &mut String| -> Option<bool> {
        let s = *i;
        while *i < b.len() && (b[*i].is_ascii_digit() || b[*i] == b'_') {
            *i += 1;
        }
        if *i == s {
            return Some(false);
        }
        out.push_str(&strip_underscores(&lower[s..*i], |c| c.is_ascii_digit())?);
        Some(true)
    };
    let int_part = digits(&mut i, &mut clean)?;
    let mut frac = false;
    if i < b.len() && b[i] == b'.' {
        clean.push('.');
        i += 1;
        frac = digits(&mut i, &mut clean)?;
    }
    if !int_part && !frac {
        return None;
    }
    if i < b.len() && b[i] == b'e' {
        clean.push('e');
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            clean.push(b[i] as char);
            i += 1;
        }
        if !digits(&mut i, &mut clean)? {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    let v: f64 = clean.parse().ok()?;
    let v = if neg { -v } else { v };
    v.is_finite().then_some(v)
}

/// `_py_scalar`: a bare Python literal → its JSON text, or None (a variable name). Numbers are
/// Python's literal syntax: ASCII digits only (`py_int`, `py_float` read bytes).
pub fn py_scalar(token: &str, json_literals: bool) -> Option<String> {
    match token {
        "True" => return Some("true".into()),
        "False" => return Some("false".into()),
        "None" => return Some("null".into()),
        _ => {}
    }
    if (json_literals || !matches!(token, "true" | "false" | "null")) && json_scalar(token) {
        return Some(token.to_string());
    }
    if let Some(i) = py_int(token) {
        return Some(i);
    }
    py_float(token).map(float_repr)
}

/// The character a one-letter escape of a Python string stands for (`\\n`, `\\'`...); None for
/// a letter that is no escape (Python keeps its backslash). Line continuations, octal and hex
/// escapes are each reader's own.
fn simple_escape(c: char) -> Option<char> {
    Some(match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'v' => '\u{b}',
        'a' => '\u{7}',
        '\\' | '\'' | '"' => c,
        _ => return None,
    })
}

/// How many hex digits a `\\x`, `\\u` or `\\U` escape has.
fn hex_digits(kind: char) -> usize {
    match kind {
        'x' => 2,
        'u' => 4,
        _ => 8,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Open,
    Next,
    Name,
    Paren,
    Kw,
    Key,
    Eq,
    Value,
    AfterValue,
    AfterCall,
    QOpen,
    Str,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Frame {
    List,
    ListComma,
    Tuple,
    TupleComma,
    DictKey,
    DictColon,
    DictValue,
    DictComma,
}

pub struct PythonCallsReader {
    json_literals: bool,
    phase: Phase,
    bracketed: bool,
    name: String,
    token: String,
    kwargs: usize,
    stack: Vec<Frame>,
    sep: bool,
    quote: char,
    triple: bool,
    quotes: usize,
    esc: String,
    out: String,
    /// How often `out` was written (`_flushes`): a step that wrote shows in it or in `out`.
    flushes: usize,
    /// Read since the reader last wrote: lost if the list breaks (`unread`).
    pending: String,
    /// The output ended (`end_of_output`).
    pub ending: bool,
    chunk: String,
    pub calls: CallsState,
    pub status: Status,
    /// A call closed at the character just read: `end` is told where.
    ended: bool,
}

impl PythonCallsReader {
    pub fn new(json_literals: bool) -> Self {
        PythonCallsReader {
            json_literals,
            phase: Phase::Open,
            bracketed: false,
            name: String::new(),
            token: String::new(),
            kwargs: 0,
            stack: Vec::new(),
            sep: false,
            quote: '"',
            triple: false,
            quotes: 0,
            esc: String::new(),
            out: String::new(),
            flushes: 0,
            pending: String::new(),
            ending: false,
            chunk: String::new(),
            calls: CallsState::default(),
            status: Status::Open,
            ended: false,
        }
    }

    pub fn feed(&mut self, text: &str, mut pos: usize, sink: &mut dyn Sink) -> usize {
        let start = pos;
        let n = text.len();
        while pos < n && self.status == Status::Open {
            if self.phase == Phase::Str {
                pos = self.string(text, pos);
                self.pending.clear(); // string content streams
                continue;
            }
            let c = text[pos..].chars().next().expect("in range");
            if self.phase != Phase::QOpen && is_sentinel(c) {
                self.status = Status::Malformed;
                break;
            }
            let (out, flushes) = (self.out.len(), self.flushes);
            if self.step(c, sink) {
                pos += c.len_utf8();
                self.pending.push(c);
            }
            if self.out.len() != out || self.flushes != flushes {
                // what was read is written (not a scalar begun)
                self.pending.clear();
                if self.phase == Phase::Value {
                    self.pending.push_str(&self.token);
                }
            }
            if self.ended {
                self.ended = false;
                sink.end(text, pos);
            }
        }
        self.flush(sink);
        if self.calls.calls == 0 {
            self.calls.raw.push_str(&text[start..pos]);
        }
        pos
    }

    /// A list that broke, or that the output ended in, after its first call: the text read since
    /// the reader last wrote, which no argument holds (`PythonCallsReader.unread`); before the
    /// first call it is all passed through instead.
    pub fn unread(&mut self) -> String {
        let pending = std::mem::take(&mut self.pending);
        let broken =
            self.status == Status::Malformed || (self.ending && self.status == Status::Open);
        if broken && self.calls.calls > 0 {
            pending
        } else {
            String::new()
        }
    }

    fn flush(&mut self, sink: &mut dyn Sink) {
        if !self.out.is_empty() {
            self.flushes += 1;
            let out = std::mem::take(&mut self.out);
            sink.args(&out);
            self.out = out;
            self.out.clear();
        }
    }

    fn fail(&mut self) -> bool {
        self.status = Status::Malformed;
        false
    }

    fn step(&mut self, c: char, sink: &mut dyn Sink) -> bool {
        match self.phase {
            Phase::Value => return self.value(c),
            Phase::QOpen => return self.quote_open(c),
            Phase::Name => {
                if (ident(c) || c == '.') && self.name.len() < TOKEN_LIMIT {
                    self.name.push(c);
                    return true;
                }
                self.phase = Phase::Paren;
                return false;
            }
            Phase::Key => {
                if ident(c) && self.token.len() < TOKEN_LIMIT {
                    self.token.push(c);
                    return true;
                }
                self.phase = Phase::Eq;
                return false;
            }
            _ => {}
        }
        if py_isspace(c) {
            return true;
        }
        match self.phase {
            Phase::Open | Phase::Next => {
                if self.phase == Phase::Open && c == '[' && !self.bracketed {
                    self.bracketed = true;
                    return true;
                }
                self.start_word(c, Phase::Name)
            }
            Phase::Paren => {
                if c != '(' {
                    return self.fail();
                }
                self.phase = Phase::Kw;
                self.kwargs = 0;
                true
            }
            Phase::Kw => {
                if c == ')' {
                    self.close_call(sink);
                    return true;
                }
                self.start_word(c, Phase::Key)
            }
            Phase::Eq => {
                if c != '=' {
                    return self.fail();
                }
                if self.kwargs == 0 {
                    self.begin_call(sink);
                }
                self.out.push_str(if self.kwargs == 0 { "{" } else { ", " });
                push_json_string(&mut self.out, &self.token);
                self.out.push_str(": ");
                self.kwargs += 1;
                self.phase = Phase::Value;
                self.token.clear();
                self.stack.clear();
                self.sep = false;
                true
            }
            Phase::AfterValue => {
                if c == ',' {
                    self.phase = Phase::Kw;
                    return true;
                }
                if c == ')' {
                    self.close_call(sink);
                    return true;
                }
                self.fail()
            }
            _ => {
                // after_call
                if c == ',' {
                    self.phase = Phase::Next;
                    return true;
                }
                if self.bracketed {
                    if c != ']' {
                        return self.fail();
                    }
                    self.status = Status::Complete;
                    return true;
                }
                self.status = Status::Complete;
                false
            }
        }
    }

    /// An identifier (the call's name in `Phase::Name`, a keyword in `Phase::Key`) starts at `c`.
    fn start_word(&mut self, c: char, phase: Phase) -> bool {
        if !ident_start(c) {
            return self.fail();
        }
        self.phase = phase;
        if phase == Phase::Name {
            self.name.clear();
        } else {
            self.token.clear();
        }
        false
    }

    /// The call is known once its name is read and its first keyword or `)` comes.
    fn begin_call(&mut self, sink: &mut dyn Sink) {
        self.calls.calls += 1;
        let name = std::mem::take(&mut self.name);
        sink.begin(&name);
        self.name = name;
    }

    fn close_call(&mut self, sink: &mut dyn Sink) {
        if self.kwargs == 0 {
            self.begin_call(sink);
            self.out.push_str("{}");
        } else {
            self.out.push('}');
        }
        self.flush(sink);
        self.ended = true;
        self.phase = Phase::AfterCall;
    }

    fn value(&mut self, c: char) -> bool {
        if !self.token.is_empty() {
            if !(py_isspace(c) || ",:)]}".contains(c)) {
                if (c == '\'' || c == '"') && matches!(self.token.as_str(), "r" | "R" | "u" | "U") {
                    self.token.clear();
                    return self.quote(c);
                }
                if self.token.len() >= TOKEN_LIMIT && self.token.chars().count() >= TOKEN_LIMIT {
                    return self.fail();
                }
                self.token.push(c);
                return true;
            }
            return self.settle_token();
        }
        if py_isspace(c) {
            return true;
        }
        let top = self.stack.last().copied();
        match c {
            '\'' | '"' => {
                if !self.item() {
                    return self.fail();
                }
                self.quote(c)
            }
            '[' | '{' | '(' => {
                if top == Some(Frame::DictKey) || self.stack.len() >= MAX_DEPTH || !self.item() {
                    return self.fail();
                }
                self.stack.push(match c {
                    '{' => Frame::DictKey,
                    '[' => Frame::List,
                    _ => Frame::Tuple,
                });
                self.out.push(if c == '(' { '[' } else { c });
                true
            }
            ']' | ')' => {
                let ok = if c == ']' {
                    matches!(top, Some(Frame::List | Frame::ListComma))
                } else {
                    matches!(top, Some(Frame::Tuple | Frame::TupleComma))
                };
                if !ok {
                    return self.fail();
                }
                self.close_container(']')
            }
            '}' => {
                if !matches!(top, Some(Frame::DictKey | Frame::DictComma)) {
                    return self.fail();
                }
                self.close_container('}')
            }
            ',' => {
                let new = match top {
                    Some(Frame::ListComma) => Frame::List,
                    Some(Frame::TupleComma) => Frame::Tuple,
                    Some(Frame::DictComma) => Frame::DictKey,
                    _ => return self.fail(),
                };
                *self.stack.last_mut().expect("top") = new;
                self.sep = true;
                true
            }
            ':' => {
                if top != Some(Frame::DictColon) {
                    return self.fail();
                }
                *self.stack.last_mut().expect("top") = Frame::DictValue;
                self.out.push_str(": ");
                true
            }
            _ => {
                if !self.item() {
                    return self.fail();
                }
                self.token.clear();
                self.token.push(c);
                true
            }
        }
    }

    fn item(&mut self) -> bool {
        if let Some(top) = self.stack.last() {
            if !matches!(
                top,
                Frame::List | Frame::Tuple | Frame::DictKey | Frame::DictValue
            ) {
                return false;
            }
        }
        if self.sep {
            self.out.push_str(", ");
            self.sep = false;
        }
        true
    }

    fn close_container(&mut self, bracket: char) -> bool {
        self.stack.pop();
        self.sep = false;
        self.out.push(bracket);
        self.value_done();
        true
    }

    fn value_done(&mut self) {
        let Some(top) = self.stack.last_mut() else {
            self.phase = Phase::AfterValue;
            return;
        };
        self.phase = Phase::Value;
        *top = match *top {
            Frame::List => Frame::ListComma,
            Frame::Tuple => Frame::TupleComma,
            Frame::DictKey => Frame::DictColon,
            Frame::DictValue => Frame::DictComma,
            other => other,
        };
    }

    fn settle_token(&mut self) -> bool {
        let json = py_scalar(&self.token, self.json_literals);
        self.token.clear();
        let Some(json) = json else { return self.fail() };
        if self.stack.last() == Some(&Frame::DictKey) {
            push_json_string(&mut self.out, &json);
        } else {
            self.out.push_str(&json);
        }
        self.value_done();
        false
    }

    /// A string's first quote: how many follow decides a triple-quoted one (`quote_open`).
    fn quote(&mut self, c: char) -> bool {
        self.phase = Phase::QOpen;
        self.quote = c;
        self.quotes = 1;
        true
    }

    fn quote_open(&mut self, c: char) -> bool {
        if c == self.quote {
            self.quotes += 1;
            if self.quotes == 3 {
                self.open_string(true);
            }
            return true;
        }
        if self.quotes == 2 {
            self.out.push_str("\"\"");
            self.value_done();
            return false;
        }
        self.open_string(false);
        false
    }

    fn open_string(&mut self, triple: bool) {
        self.phase = Phase::Str;
        self.triple = triple;
        self.quotes = 0;
        self.esc.clear();
        self.out.push('"');
    }

    fn string(&mut self, text: &str, mut pos: usize) -> usize {
        let quote = self.quote;
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.clear();
        let n = text.len();
        while pos < n {
            let c = text[pos..].chars().next().expect("in range");
            pos += c.len_utf8();
            if !self.esc.is_empty() {
                self.escape(c, &mut chunk);
                continue;
            }
            if self.quotes > 0 && c != quote {
                for _ in 0..self.quotes {
                    chunk.push(quote);
                }
                self.quotes = 0;
            }
            if c == '\\' {
                self.esc.push('\\');
            } else if c != quote {
                chunk.push(c);
            } else if !self.triple || self.quotes == 2 {
                self.quotes = 0;
                if !chunk.is_empty() {
                    push_json_fragment(&mut self.out, &chunk);
                }
                self.out.push('"');
                self.value_done();
                self.chunk = chunk;
                return pos;
            } else {
                self.quotes += 1;
            }
        }
        if !chunk.is_empty() {
            push_json_fragment(&mut self.out, &chunk);
        }
        self.chunk = chunk;
        pos
    }

    fn escape(&mut self, c: char, chunk: &mut String) {
        if self.esc == "\\" {
            if matches!(c, 'x' | 'u' | 'U') {
                self.esc.clear();
                self.esc.push(c);
                return;
            }
            self.esc.clear();
            match (c, simple_escape(c)) {
                ('\n', _) => {}
                ('0', _) => chunk.push('\0'),
                (_, Some(ch)) => chunk.push(ch),
                (_, None) => {
                    chunk.push('\\');
                    chunk.push(c);
                }
            }
            return;
        }
        if !c.is_ascii_hexdigit() {
            chunk.push('\\');
            chunk.push_str(&self.esc);
            chunk.push(c);
            self.esc.clear();
            return;
        }
        self.esc.push(c);
        let want = hex_digits(char::from(self.esc.as_bytes()[0]));
        if self.esc.len() - 1 < want {
            return;
        }
        let code = u32::from_str_radix(&self.esc[1..], 16).unwrap_or(u32::MAX);
        match char::from_u32(code) {
            Some(ch) => chunk.push(ch),
            None => {
                chunk.push('\\');
                chunk.push_str(&self.esc);
            }
        }
        self.esc.clear();
    }
}

// ------------------------------------------------------------------------------- literal_eval

/// `json_bounds.nesting_depth`, exactly as the reference computes it (string bodies of double
/// quotes removed, brackets peeled, then runs counted).
pub fn nesting_depth(text: &str) -> usize {
    let b = text.as_bytes();
    let mut brackets: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let mut j = i + 1;
            let mut end = None;
            while j < b.len() {
                match b[j] {
                    b'\\' => {
                        if j + 1 < b.len() {
                            j += 2;
                        } else {
                            break;
                        }
                    }
                    b'"' => {
                        end = Some(j);
                        break;
                    }
                    _ => j += 1,
                }
            }
            if let Some(e) = end {
                i = e + 1;
                continue;
            }
        }
        match b[i] {
            b'[' | b'{' => brackets.push(b'['),
            b']' | b'}' => brackets.push(b']'),
            _ => {}
        }
        i += 1;
    }
    let mut peeled = 0;
    while !brackets.is_empty() && peeled < 8 {
        let mut shorter = Vec::with_capacity(brackets.len());
        let mut k = 0;
        while k < brackets.len() {
            if brackets[k] == b'[' && brackets.get(k + 1) == Some(&b']') {
                k += 2;
            } else {
                shorter.push(brackets[k]);
                k += 1;
            }
        }
        if shorter.len() == brackets.len() {
            break;
        }
        brackets = shorter;
        peeled += 1;
    }
    if brackets.is_empty() {
        return peeled;
    }
    let (mut sum, mut best) = (0i64, 0i64);
    for &c in &brackets {
        sum += if c == b'[' { 1 } else { -1 };
        best = best.max(sum);
    }
    peeled + best as usize
}

/// `ast.literal_eval` of a dict or list that `json.dumps` accepts (`params._python_container`).
pub fn literal_container(text: &str) -> Option<Value> {
    if nesting_depth(text) > MAX_DEPTH {
        return None;
    }
    let mut p = Lit { s: text, i: 0 };
    let v = p.expr()?;
    p.ws();
    if p.i != text.len() {
        return None;
    }
    match v {
        Lv::V(v @ (Value::Dict(_) | Value::List(_))) => Some(v),
        _ => None,
    }
}

/// A literal: a JSON-able value, or something `json.dumps` refuses (bytes, sets, complex, tuple
/// keys) which still parses.
enum Lv {
    V(Value),
    Opaque,
}

impl Lv {
    /// A container's value, or Opaque when any part of it was.
    fn of(v: Value, opaque: bool) -> Lv {
        if opaque {
            Lv::Opaque
        } else {
            Lv::V(v)
        }
    }
}

struct Lit<'a> {
    s: &'a str,
    i: usize,
}

impl Lit<'_> {
    fn ws(&mut self) {
        let b = self.s.as_bytes();
        while self.i < b.len() {
            match b[self.i] {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0c => self.i += 1,
                b'\\' if b.get(self.i + 1) == Some(&b'\n') => self.i += 2,
                b'#' => {
                    while self.i < b.len() && b[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    /// After white space, `close` ends the container: taken if so.
    fn closes(&mut self, close: u8) -> bool {
        self.ws();
        let closed = self.peek() == Some(close);
        if closed {
            self.i += 1;
        }
        closed
    }

    fn expr(&mut self) -> Option<Lv> {
        self.ws();
        let c = self.peek()?;
        if c == b'-' || c == b'+' {
            self.i += 1;
            let v = self.expr()?;
            return match v {
                Lv::V(Value::Int(s)) => {
                    Some(Lv::V(Value::Int(if c == b'-' { negate(&s) } else { s })))
                }
                Lv::V(Value::Float(f)) => Some(Lv::V(Value::Float(if c == b'-' { -f } else { f }))),
                Lv::V(Value::Bool(b)) => {
                    let n = if b { 1 } else { 0 };
                    Some(Lv::V(Value::Int(
                        (if c == b'-' { -n } else { n }).to_string(),
                    )))
                }
                Lv::Opaque => Some(Lv::Opaque),
                _ => None,
            };
        }
        match c {
            b'[' | b'(' => {
                let close = if c == b'[' { b']' } else { b')' };
                self.i += 1;
                let mut items = Vec::new();
                let mut opaque = false;
                let mut commas = 0;
                loop {
                    if self.closes(close) {
                        break;
                    }
                    match self.expr()? {
                        Lv::V(v) => items.push(v),
                        Lv::Opaque => opaque = true,
                    }
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.i += 1;
                            commas += 1;
                        }
                        Some(x) if x == close => {
                            self.i += 1;
                            if c == b'(' && commas == 0 && items.len() + opaque as usize == 1 {
                                // (x): just x
                                return Some(if opaque {
                                    Lv::Opaque
                                } else {
                                    Lv::V(items.pop()?)
                                });
                            }
                            break;
                        }
                        _ => return None,
                    }
                }
                Some(Lv::of(Value::List(items), opaque))
            }
            b'{' => {
                self.i += 1;
                if self.closes(b'}') {
                    return Some(Lv::V(Value::Dict(Vec::new())));
                }
                let first = self.expr()?;
                self.ws();
                if self.peek() != Some(b':') {
                    // a set
                    loop {
                        match self.peek() {
                            Some(b',') => {
                                self.i += 1;
                                if self.closes(b'}') {
                                    return Some(Lv::Opaque);
                                }
                                self.expr()?;
                                self.ws();
                            }
                            Some(b'}') => {
                                self.i += 1;
                                return Some(Lv::Opaque);
                            }
                            _ => return None,
                        }
                    }
                }
                let mut items: Vec<(Value, Value)> = Vec::new();
                let mut opaque = false;
                let mut key = first;
                loop {
                    // at ':'
                    self.i += 1;
                    let v = self.expr()?;
                    match (key, v) {
                        (Lv::V(k), Lv::V(v)) => {
                            if !matches!(
                                k,
                                Value::Str(_)
                                    | Value::Int(_)
                                    | Value::Float(_)
                                    | Value::Bool(_)
                                    | Value::Null
                            ) {
                                return None; // unhashable (a list) or refused as a key
                            }
                            if let Some(slot) = items.iter_mut().find(|(x, _)| key_eq(x, &k)) {
                                slot.1 = v;
                            } else {
                                items.push((k, v));
                            }
                        }
                        _ => opaque = true,
                    }
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.i += 1;
                            if self.closes(b'}') {
                                break;
                            }
                            key = self.expr()?;
                            self.ws();
                            if self.peek() != Some(b':') {
                                return None;
                            }
                        }
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
                Some(Lv::of(Value::Dict(items), opaque))
            }
            b'"' | b'\'' => self.strings(),
            _ => {
                // a name, a string with a prefix, or a number
                let start = self.i;
                let b = self.s.as_bytes();
                while self.i < b.len()
                    && (b[self.i].is_ascii_alphanumeric() || b[self.i] == b'_' || b[self.i] == b'.')
                {
                    // exponent signs belong to numbers
                    self.i += 1;
                    if matches!(b[self.i - 1], b'e' | b'E')
                        && b[start].is_ascii_digit() | (b[start] == b'.')
                        && !self.s[start..self.i].to_ascii_lowercase().starts_with("0x")
                        && matches!(b.get(self.i), Some(b'+' | b'-'))
                    {
                        self.i += 1;
                    }
                }
                let word = &self.s[start..self.i];
                if matches!(self.peek(), Some(b'"' | b'\'')) {
                    let lower = word.to_ascii_lowercase();
                    return match lower.as_str() {
                        "r" | "u" => {
                            let raw = lower == "r";
                            self.strings_from(raw)
                        }
                        "b" | "br" | "rb" => {
                            self.strings_from(lower != "b")?;
                            Some(Lv::Opaque)
                        }
                        _ => None,
                    };
                }
                match word {
                    "True" => return Some(Lv::V(Value::Bool(true))),
                    "False" => return Some(Lv::V(Value::Bool(false))),
                    "None" => return Some(Lv::V(Value::Null)),
                    _ => {}
                }
                let w = word.as_bytes();
                if w.is_empty() || !(w[0].is_ascii_digit() || w[0] == b'.') {
                    return None;
                }
                if matches!(w[w.len() - 1], b'j' | b'J') {
                    py_float(&word[..word.len() - 1])
                        .or_else(|| py_int(&word[..word.len() - 1]).map(|_| 0.0))?;
                    return Some(Lv::Opaque);
                }
                let lower = word.to_ascii_lowercase();
                let int_like = lower.starts_with("0x")
                    || lower.starts_with("0o")
                    || lower.starts_with("0b")
                    || !(lower.contains('.') || lower.contains('e'));
                if int_like {
                    // past the digit bound Python refuses the literal (a SyntaxError)
                    return py_int(word).map(|i| Lv::V(Value::Int(i)));
                }
                // a float literal (Python source never spells inf/nan); one that overflows to
                // infinity has no JSON (`params._python_container`: the literal stays text)
                let f: f64 = strip_float(word).filter(|f| f.is_finite())?;
                Some(Lv::V(Value::Float(f)))
            }
        }
    }

    fn strings(&mut self) -> Option<Lv> {
        self.strings_from(false)
    }

    /// One or more adjacent string literals (concatenated); the first starts at `self.i`.
    fn strings_from(&mut self, raw_first: bool) -> Option<Lv> {
        let mut out = String::new();
        let mut raw = raw_first;
        let mut bytes = false;
        loop {
            self.string(raw, &mut out)?;
            let save = self.i;
            self.ws();
            let b = self.s.as_bytes();
            let mut k = self.i;
            while k < b.len() && b[k].is_ascii_alphabetic() && k - self.i < 2 {
                k += 1;
            }
            if matches!(b.get(k), Some(b'"' | b'\'')) {
                let prefix = self.s[self.i..k].to_ascii_lowercase();
                match prefix.as_str() {
                    "" | "u" => raw = false,
                    "r" => raw = true,
                    "b" | "br" | "rb" => {
                        bytes = true;
                        raw = prefix != "b";
                    }
                    _ => return None,
                }
                self.i = k;
                continue;
            }
            self.i = save;
            break;
        }
        Some(if bytes {
            Lv::Opaque
        } else {
            Lv::V(Value::Str(out))
        })
    }

    fn string(&mut self, raw: bool, out: &mut String) -> Option<()> {
        let b = self.s.as_bytes();
        let q = b[self.i];
        let triple = b.get(self.i + 1) == Some(&q) && b.get(self.i + 2) == Some(&q);
        self.i += if triple { 3 } else { 1 };
        loop {
            let c = self.s[self.i..].chars().next()?;
            if c == q as char {
                if !triple {
                    self.i += 1;
                    return Some(());
                }
                if b.get(self.i + 1) == Some(&q) && b.get(self.i + 2) == Some(&q) {
                    self.i += 3;
                    return Some(());
                }
                out.push(c);
                self.i += 1;
                continue;
            }
            if c == '\n' && !triple {
                return None;
            }
            if c == '\\' {
                let e = self.s[self.i + 1..].chars().next()?;
                if raw {
                    out.push('\\');
                    out.push(e);
                    self.i += 1 + e.len_utf8();
                    continue;
                }
                self.i += 1 + e.len_utf8();
                match e {
                    '\n' => {}
                    '0'..='7' => {
                        let mut code = e.to_digit(8)?;
                        for _ in 0..2 {
                            match self.peek() {
                                Some(d @ b'0'..=b'7') => {
                                    code = code * 8 + (d - b'0') as u32;
                                    self.i += 1;
                                }
                                _ => break,
                            }
                        }
                        out.push(char::from_u32(code)?);
                    }
                    'x' | 'u' | 'U' => {
                        let len = hex_digits(e);
                        let h = self.s.get(self.i..self.i + len)?;
                        if !h.bytes().all(|x| x.is_ascii_hexdigit()) {
                            return None;
                        }
                        self.i += len;
                        out.push(char::from_u32(u32::from_str_radix(h, 16).ok()?)?);
                    }
                    'N' => return None,
                    other => match simple_escape(other) {
                        Some(ch) => out.push(ch),
                        None => {
                            out.push('\\');
                            out.push(other);
                        }
                    },
                }
                continue;
            }
            out.push(c);
            self.i += c.len_utf8();
        }
    }
}

fn strip_float(word: &str) -> Option<f64> {
    let lower = word.to_ascii_lowercase();
    if lower.contains("inf") || lower.contains("nan") {
        return None;
    }
    let v: f64 = {
        let b = lower.as_bytes();
        // validate the shape with py_float's rules, allowing overflow to inf (Python source does)
        let mut clean = String::new();
        for (i, &c) in b.iter().enumerate() {
            if c == b'_' {
                if i == 0
                    || i + 1 == b.len()
                    || !b[i - 1].is_ascii_digit()
                    || !b[i + 1].is_ascii_digit()
                {
                    return None;
                }
            } else {
                clean.push(c as char);
            }
        }
        if !clean.bytes().any(|c| c.is_ascii_digit()) {
            return None;
        }
        clean.parse().ok()?
    };
    Some(v)
}

fn negate(s: &str) -> String {
    if s == "0" {
        return s.to_string();
    }
    match s.strip_prefix('-') {
        Some(r) => r.to_string(),
        None => format!("-{s}"),
    }
}

/// Python dict key equality among the key kinds `json.dumps` accepts (1 == 1.0 == True).
fn key_eq(a: &Value, b: &Value) -> bool {
    fn num(v: &Value) -> Option<f64> {
        match v {
            Value::Int(s) => s.parse().ok(),
            Value::Float(f) => Some(*f),
            Value::Bool(b) => Some(*b as u8 as f64),
            _ => None,
        }
    }
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Null, Value::Null) => true,
        (Value::Int(x), Value::Int(y)) => x == y,
        _ => matches!((num(a), num(b)), (Some(x), Some(y)) if x == y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_read_as_python_reads_them() {
        assert_eq!(py_scalar("0x1F", false).as_deref(), Some("31"));
        assert_eq!(py_scalar("1_000", false).as_deref(), Some("1000"));
        assert_eq!(py_scalar("1e5", false).as_deref(), Some("1e5"));
        assert_eq!(py_scalar("1E5x", false), None);
        assert_eq!(py_scalar(".5", false).as_deref(), Some("0.5"));
        assert_eq!(py_scalar("true", false), None);
        assert_eq!(py_scalar("true", true).as_deref(), Some("true"));
        assert_eq!(py_scalar("010", false).as_deref(), Some("10.0"));
        assert_eq!(py_scalar("\u{663}", false), None); // Arabic-Indic three
        assert_eq!(py_scalar("1_\u{ff13}", false), None); // a fullwidth digit
    }

    #[test]
    fn containers_read_as_literal_eval() {
        let v = literal_container("{'a': None, 'b': [1, 2.5, (3,)], 1: 'x', True: 'y'}").unwrap();
        assert_eq!(
            pyjson::dumps(&v),
            r#"{"a": null, "b": [1, 2.5, [3]], "1": "y"}"#
        );
        assert!(literal_container("{1, 2}").is_none());
        assert!(literal_container("[b'x']").is_none());
        assert!(literal_container("[1e999]").is_none());
        assert!(literal_container("{'a': -1e999}").is_none());
        assert!(literal_container("{1e999: 1}").is_none());
    }
}

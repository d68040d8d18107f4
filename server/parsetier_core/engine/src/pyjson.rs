//! JSON values as Python's `json` module reads and writes them (`json_bounds.loads`,
//! `json.dumps(…, ensure_ascii=False)`): insertion-ordered objects whose repeated keys keep the
//! first position and the last value, integers kept as their decimal text, floats written as
//! Python's `repr`, and the bounds of `engine/json_bounds.py`.

use std::collections::HashMap;

use crate::text::push_json_string;

/// Deepest nesting of arrays and objects accepted (`json_bounds.MAX_DEPTH`).
pub const MAX_DEPTH: usize = 128;
/// Longest integer literal accepted (`json_bounds.MAX_NUMBER_DIGITS`).
pub const MAX_NUMBER_DIGITS: usize = 4300;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// An integer as its canonical decimal text (Python's `str(int)`).
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    /// Keys in insertion order; a key is any Python value `json.dumps` accepts as one.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// `json_bounds.loads(text, max_depth)`: `None` where Python raises a `ValueError`.
pub fn loads(text: &str, max_depth: usize) -> Option<Value> {
    let mut p = JsonParser {
        b: text.as_bytes(),
        s: text,
        i: 0,
        max_depth,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.b.len() {
        return None;
    }
    Some(v)
}

struct JsonParser<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
    max_depth: usize,
}

impl JsonParser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        let c = *self.b.get(self.i)?;
        match c {
            b'{' => {
                if depth + 1 > self.max_depth {
                    return None;
                }
                self.i += 1;
                let mut items: Vec<(Value, Value)> = Vec::new();
                let mut index: HashMap<String, usize> = HashMap::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Some(Value::Dict(items));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return None;
                    }
                    let key = self.string()?;
                    self.ws();
                    if self.b.get(self.i) != Some(&b':') {
                        return None;
                    }
                    self.i += 1;
                    self.ws();
                    let v = self.value(depth + 1)?;
                    if let Some(&at) = index.get(&key) {
                        items[at].1 = v;
                    } else {
                        index.insert(key.clone(), items.len());
                        items.push((Value::Str(key), v));
                    }
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Some(Value::Dict(items));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                if depth + 1 > self.max_depth {
                    return None;
                }
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Some(Value::List(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Some(Value::List(items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => self.string().map(Value::Str),
            b't' => self.word("true", Value::Bool(true)),
            b'f' => self.word("false", Value::Bool(false)),
            b'n' => self.word("null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, w: &str, v: Value) -> Option<Value> {
        if self.b[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            Some(v)
        } else {
            None
        }
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.i;
        let b = self.b;
        let mut i = self.i;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(i), Some(b'0'..=b'9')) {
                    i += 1;
                }
            }
            _ => return None, // "-Infinity" and a bare "-" are not JSON here
        }
        let int_end = i;
        let mut is_float = false;
        if b.get(i) == Some(&b'.') && matches!(b.get(i + 1), Some(b'0'..=b'9')) {
            i += 1;
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            is_float = true;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if matches!(b.get(j), Some(b'0'..=b'9')) {
                while matches!(b.get(j), Some(b'0'..=b'9')) {
                    j += 1;
                }
                i = j;
                is_float = true;
            }
        }
        self.i = i;
        let lit = &self.s[start..i];
        if is_float {
            let f: f64 = lit.parse().ok()?;
            if !f.is_finite() {
                return None;
            }
            Some(Value::Float(f))
        } else {
            let digits = &self.s[start..int_end];
            int_value(digits)
        }
    }

    fn string(&mut self) -> Option<String> {
        // at the opening quote
        self.i += 1;
        let mut out = String::new();
        loop {
            let rest = &self.b[self.i..];
            let k = rest
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            out.push_str(&self.s[self.i..self.i + k]);
            self.i += k;
            match self.b[self.i] {
                b'"' => {
                    self.i += 1;
                    return Some(out);
                }
                b'\\' => {
                    let e = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            if (0xD800..0xDC00).contains(&hi)
                                && self.b.get(self.i) == Some(&b'\\')
                                && self.b.get(self.i + 1) == Some(&b'u')
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                    out.push(char::from_u32(c)?);
                                    continue;
                                }
                                self.i = save;
                            }
                            // A lone surrogate: Python keeps it; UTF-8 cannot, U+FFFD stands in.
                            out.push(char::from_u32(hi).unwrap_or('\u{FFFD}'));
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character (strict)
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.s.get(self.i..self.i + 4)?;
        if !h.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        self.i += 4;
        u32::from_str_radix(h, 16).ok()
    }
}

/// A decimal integer literal (optional `-`) within the digit bound, canonical.
pub fn int_value(digits: &str) -> Option<Value> {
    let body = digits.strip_prefix('-').unwrap_or(digits);
    if body.len() > MAX_NUMBER_DIGITS {
        return None;
    }
    Some(Value::Int(canonical_int(digits)))
}

/// `str(int(lit))` for a decimal literal (sign, digits, maybe leading zeros or underscores gone).
pub fn canonical_int(digits: &str) -> String {
    let (neg, body) = match digits.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, digits.strip_prefix('+').unwrap_or(digits)),
    };
    let body = body.trim_start_matches('0');
    if body.is_empty() {
        return "0".to_string();
    }
    if neg {
        format!("-{body}")
    } else {
        body.to_string()
    }
}

/// Python's `repr(float)`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into(); // json.dumps spelling
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let e = format!("{:e}", f); // shortest round-trip digits: "-1.2345e17"
    let (neg, e) = match e.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, e.as_str()),
    };
    let (mant, exp) = e.split_once('e').unwrap_or((e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let decpt = exp + 1; // value = 0.d1d2... × 10^decpt
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if !(-4 < decpt && decpt <= 16) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let x = decpt - 1;
        out.push('e');
        out.push(if x < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", x.abs()));
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let d = decpt as usize;
        if digits.len() <= d {
            out.push_str(&digits);
            for _ in digits.len()..d {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..d]);
            out.push('.');
            out.push_str(&digits[d..]);
        }
    }
    out
}

/// `json.dumps(value, ensure_ascii=False)` appended to `out`.
pub fn dump(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Int(s) => out.push_str(s),
        Value::Float(f) => out.push_str(&float_repr(*f)),
        Value::Str(s) => push_json_string(out, s),
        Value::List(items) => {
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump(out, it);
            }
            out.push(']');
        }
        Value::Dict(items) => {
            out.push('{');
            for (i, (k, it)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                match k {
                    Value::Str(s) => push_json_string(out, s),
                    Value::Float(f) => push_json_string(out, &float_repr(*f)),
                    other => {
                        let mut t = String::new();
                        dump(&mut t, other);
                        push_json_string(out, &t);
                    }
                }
                out.push_str(": ");
                dump(out, it);
            }
            out.push('}');
        }
    }
}

pub fn dumps(v: &Value) -> String {
    let mut s = String::new();
    dump(&mut s, v);
    s
}

/// Whether `json.dumps` accepts the value (keys of the kinds it converts; no NaN issue: allowed).
pub fn dumpable(v: &Value) -> bool {
    match v {
        Value::List(items) => items.iter().all(dumpable),
        Value::Dict(items) => items.iter().all(|(_, it)| dumpable(it)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_repr() {
        for (f, s) in [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5, "1.5"),
            (-2.0, "-2.0"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(float_repr(f), s);
        }
    }

    #[test]
    fn loads_keeps_first_position_and_last_value() {
        let v = loads(r#"{"a": 1, "b": [true, null], "a": 2.50}"#, MAX_DEPTH).unwrap();
        assert_eq!(dumps(&v), r#"{"a": 2.5, "b": [true, null]}"#);
        assert!(loads("[1,]", MAX_DEPTH).is_none());
        assert!(loads("NaN", MAX_DEPTH).is_none());
        assert!(loads("1e999", MAX_DEPTH).is_none());
        assert_eq!(dumps(&loads("-0", MAX_DEPTH).unwrap()), "0");
        let deep = "[".repeat(129) + &"]".repeat(129);
        assert!(loads(&deep, MAX_DEPTH).is_none());
        assert!(loads(&deep, MAX_DEPTH + 1).is_some());
    }
}

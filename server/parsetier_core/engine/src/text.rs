//! Text helpers with Python's semantics: `str.isspace`, `strip`, sentinels, JSON string escaping.
//!
//! The reference engine indexes strings by code point; this crate works on UTF-8 byte offsets,
//! always at character boundaries. Where Python counts characters (capture limits, head limits)
//! the code counts characters explicitly.

/// First private-use code point a bound marker token travels as (`grammar.SENTINEL_BASE`).
pub const SENTINEL_FIRST: char = '\u{F0000}';
/// Last code point of the sentinel range (`grammar.SENTINEL_RE`).
pub const SENTINEL_LAST: char = '\u{FFFFD}';

/// `str.isspace()` for one character (Unicode whitespace plus U+001C-U+001F, as Python has it).
#[inline]
pub fn py_isspace(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\x1c'..='\x20'
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

#[inline]
pub fn is_sentinel(c: char) -> bool {
    (SENTINEL_FIRST..=SENTINEL_LAST).contains(&c)
}

/// Byte offset of the first sentinel in `s[from..]`, if any. Sentinels are 4 UTF-8 bytes starting
/// F3 B0..BF; a memchr for F3 skips everything else.
#[inline]
pub fn find_sentinel(s: &str, from: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = from;
    while let Some(k) = memchr::memchr(0xF3, &b[i..]) {
        let at = i + k;
        if at + 1 < b.len() && b[at + 1] >= 0xB0 {
            let c = s[at..].chars().next().unwrap_or('\0');
            if is_sentinel(c) {
                return Some(at);
            }
        }
        i = at + 1;
    }
    None
}

#[inline]
pub fn has_sentinel(s: &str) -> bool {
    !s.is_ascii() && find_sentinel(s, 0).is_some()
}

/// `str.strip()`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

pub fn py_lstrip(s: &str) -> &str {
    s.trim_start_matches(py_isspace)
}

pub fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(py_isspace)
}

/// Whether `s` holds any character that is not whitespace (`bool(s.strip())`).
pub fn has_visible(s: &str) -> bool {
    s.chars().any(|c| !py_isspace(c))
}

/// `json_string_fragment`: `s` escaped for the inside of a JSON string, as Python's
/// `json.dumps(s, ensure_ascii=False)` writes it, appended to `out`.
pub fn push_json_fragment(out: &mut String, s: &str) {
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc: &str = match c {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            out.push_str(&format!("\\u{:04x}", c));
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// `json.dumps(s, ensure_ascii=False)`.
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    push_json_fragment(out, s);
    out.push('"');
}

pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

/// Byte offset of the `n`-th character of `s` (or its length).
pub fn char_offset(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinels_are_found_among_other_four_byte_characters() {
        let s = "a\u{1F600}b\u{C0000}\u{F0003}x";
        assert_eq!(find_sentinel(s, 0), Some(s.find('\u{F0003}').unwrap()));
        assert!(!has_sentinel("plain \u{1F600}"));
    }

    #[test]
    fn json_fragments_escape_as_python_does() {
        let mut out = String::new();
        push_json_fragment(&mut out, "a\"b\\c\n\x01\u{7f}é");
        assert_eq!(out, "a\\\"b\\\\c\\n\\u0001\u{7f}é");
    }

    #[test]
    fn python_whitespace_includes_the_separators() {
        assert!(py_isspace('\x1c') && py_isspace('\u{3000}') && !py_isspace('\u{200b}'));
    }
}

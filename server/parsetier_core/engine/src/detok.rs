//! Token ids → text in sentinel form: the native twin of `detokenizer.py`'s `TokenScanner`.
//!
//! The reference engine steps `tokenizers`' `DecodeStream`; this module reproduces it exactly,
//! without a tokenizer: a [`Vocab`] holds every id's vocabulary entry already passed through the
//! position-independent steps of the tokenizer's decoder (for byte-level BPE: the entry's raw
//! bytes), and [`Vocab::decode`] runs the rest of the decoder over a handful of ids. On top of it
//! [`DecodeStream`] keeps the same window (`ids`, `prefix`, `prefix_index`) as the library's
//! `step_decode_stream`, so every edge rule comes out the same by construction rather than by
//! imitation: bytes of an unfinished UTF-8 character are held (a decode ending in U+FFFD waits),
//! SentencePiece's leading-space strip applies only at the start of the window, byte-fallback
//! groups that are no UTF-8 become one U+FFFD per byte, and a decode that no longer starts with
//! the settled prefix is the "invalid prefix" error [`Scanner`] restarts from, as
//! `TokenScanner._restart` does.
//!
//! [`Scanner`] adds the marker classification: a bound marker id becomes its sentinel after
//! whatever text the stream released with it (the marker's own text cut off), a special token the
//! format does not use is dropped the same way (its sentinel is empty).

use std::collections::HashMap;
use std::sync::Arc;

/// How many prompt ids seed the stream (`detokenizer.PROMPT_CONTEXT`).
pub const PROMPT_CONTEXT: usize = 8;

const REPLACEMENT: char = '\u{fffd}';

/// One step of a tokenizer's decoder (`tokenizers.decoders`), as the tokenizer's JSON names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// GPT-2's byte-level alphabet back to bytes; the whole list becomes one lossy UTF-8 string.
    ByteLevel,
    /// Every occurrence of a literal `pattern` in each token becomes `content`.
    Replace { pattern: String, content: String },
    /// Runs of `<0xAB>` tokens become their bytes: their UTF-8, or one U+FFFD per byte.
    ByteFallback,
    /// The tokens joined into one.
    Fuse,
    /// Up to `start` leading and `stop` trailing `content` characters cut from each token.
    Strip {
        content: char,
        start: usize,
        stop: usize,
    },
    /// `replacement` becomes a space, dropped in the first token when `prepend` (scheme not
    /// `never`).
    Metaspace { replacement: char, prepend: bool },
}

impl Step {
    /// A step whose result for a token depends on that token alone (never on its neighbours or
    /// its position): these are applied once per vocabulary entry, not per decode.
    fn per_token(&self) -> bool {
        matches!(self, Step::Replace { .. } | Step::Strip { .. })
    }

    fn apply_one(&self, token: &str) -> String {
        match self {
            Step::Replace { pattern, content } => token.replace(pattern.as_str(), content),
            Step::Strip {
                content,
                start,
                stop,
            } => strip(token, *content, *start, *stop),
            _ => unreachable!("only per-token steps are applied to one token"),
        }
    }
}

fn strip(token: &str, content: char, start: usize, stop: usize) -> String {
    let chars: Vec<char> = token.chars().collect();
    let mut start_cut = 0;
    for (i, &c) in chars.iter().enumerate().take(start) {
        if c == content {
            start_cut = i + 1;
        } else {
            break;
        }
    }
    let mut stop_cut = chars.len();
    for i in 0..stop.min(chars.len()) {
        let index = chars.len() - i - 1;
        if chars[index] == content {
            stop_cut = index;
        } else {
            break;
        }
    }
    if start_cut >= stop_cut {
        return String::new();
    }
    chars[start_cut..stop_cut].iter().collect()
}

/// The inverse of GPT-2's `bytes_to_unicode`: stand-in character → byte.
fn unicode_to_byte() -> HashMap<char, u8> {
    let mut keep: Vec<u32> = (u32::from('!')..=u32::from('~')).collect();
    keep.extend(0xA1..=0xAC);
    keep.extend(0xAE..=0xFF);
    let mut table: HashMap<char, u8> = keep
        .iter()
        .map(|&b| (char::from_u32(b).unwrap(), b as u8))
        .collect();
    let mut extra = 0;
    for b in 0..=255u32 {
        if !keep.contains(&b) {
            table.insert(char::from_u32(256 + extra).unwrap(), b as u8);
            extra += 1;
        }
    }
    table
}

/// `<0xAB>` → the byte, exactly as `ByteFallback` reads a token.
fn byte_piece(token: &str) -> Option<u8> {
    if token.len() == 6 && token.starts_with("<0x") && token.ends_with('>') {
        u8::from_str_radix(token.get(3..5)?, 16).ok()
    } else {
        None
    }
}

/// How a window of ids is decoded.
#[derive(Debug)]
enum Plan {
    /// The decoder is `ByteLevel` alone: every entry is bytes; a window is their lossy UTF-8.
    Bytes,
    /// The entries after the decoder's leading per-token steps, then `rest` of the decoder.
    Tokens { rest: Vec<Step> },
    /// No decoder: the entries joined by spaces.
    Spaced,
}

/// A tokenizer's vocabulary as its decoder sees it. Shared (read-only) by every session of the
/// models that use the tokenizer.
#[derive(Debug)]
pub struct Vocab {
    plan: Plan,
    /// One 16-byte entry per id (see [`Entry`]): everything the detokenizer reads about an id
    /// is on one cache line, so a step's id costs one memory load, not one per table.
    entries: Vec<Entry>,
    /// The bytes of entries too long to be held in place.
    long: Vec<u8>,
    /// The id of the probe token [`Scanner::flush`] steps with (`detokenizer.PROBE`).
    probe: Option<u32>,
    /// Some id is a byte-fallback token (see [`Entry::BYTE`]).
    bytes: bool,
}

/// An id's vocabulary entry: byte 0 its flags; an entry of at most [`Entry::INLINE_MAX`] bytes
/// has its length in byte 1 and its bytes from byte 2, a longer one its offset and length in
/// `Vocab::long` in bytes 4..8 and 8..12. Aligned so it never straddles two cache lines.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
struct Entry([u8; 16]);

impl Entry {
    /// The id has an entry (false: a gap in the id space).
    const PRESENT: u8 = 1;
    /// An added token (markers, specials).
    const ADDED: u8 = 2;
    /// A byte-fallback token (a `<0xAB>` entry, not an added token, of a decoder with a
    /// `ByteFallback` step), which the decoder decides only in whole runs
    /// (`BoundGrammar.byte_ids`).
    const BYTE: u8 = 4;
    /// The bytes are in the entry itself.
    const INLINE: u8 = 8;
    const INLINE_MAX: usize = 14;

    fn has(&self, flag: u8) -> bool {
        self.0[0] & flag != 0
    }
}

/// The text of the probe token (`detokenizer.PROBE`): plain ASCII every decoder appends as is.
pub const PROBE: &str = "a";

impl Vocab {
    /// `tokens[id]`: the vocabulary entry of `id` as `Tokenizer.id_to_token` gives it (added
    /// tokens included, None for a gap); `decoder`: the tokenizer's decoder as a list of steps
    /// (None: the tokenizer has none); `added`: the added tokens' ids; `probe`: the id of the
    /// token [`PROBE`] (`token_to_id`), if the vocabulary has it.
    pub fn new(
        tokens: &[Option<String>],
        decoder: Option<Vec<Step>>,
        added: &[u32],
        probe: Option<u32>,
    ) -> Result<Vocab, String> {
        let mut pre: Vec<Step> = Vec::new();
        let fallback = decoder
            .as_ref()
            .is_some_and(|steps| steps.contains(&Step::ByteFallback));
        let plan = match decoder {
            None => Plan::Spaced,
            Some(steps) if steps == [Step::ByteLevel] => Plan::Bytes,
            Some(steps) => {
                if steps.contains(&Step::ByteLevel) {
                    return Err("a ByteLevel step inside a decoder sequence".into());
                }
                let lead = steps.iter().take_while(|s| s.per_token()).count();
                pre.extend_from_slice(&steps[..lead]);
                Plan::Tokens {
                    rest: steps[lead..].to_vec(),
                }
            }
        };
        let table = unicode_to_byte();
        let mut is_added = vec![false; tokens.len()];
        for &id in added {
            if let Some(slot) = is_added.get_mut(id as usize) {
                *slot = true;
            }
        }
        let mut long = Vec::new();
        let mut entries = Vec::with_capacity(tokens.len());
        let mut bytes = false;
        let mut text = Vec::new();
        for (token, &added) in tokens.iter().zip(&is_added) {
            let mut entry = Entry::default();
            if let Some(token) = token {
                text.clear();
                match plan {
                    Plan::Bytes => {
                        let mapped: Option<Vec<u8>> =
                            token.chars().map(|c| table.get(&c).copied()).collect();
                        text.extend_from_slice(&mapped.unwrap_or_else(|| token.as_bytes().into()));
                    }
                    _ => {
                        let mut t = token.clone();
                        for step in &pre {
                            t = step.apply_one(&t);
                        }
                        text.extend_from_slice(t.as_bytes());
                    }
                }
                let mut flags = Entry::PRESENT;
                if added {
                    flags |= Entry::ADDED;
                } else if fallback && byte_piece(token).is_some() {
                    flags |= Entry::BYTE;
                    bytes = true;
                }
                if text.len() <= Entry::INLINE_MAX {
                    flags |= Entry::INLINE;
                    entry.0[1] = text.len() as u8;
                    entry.0[2..2 + text.len()].copy_from_slice(&text);
                } else {
                    let at = u32::try_from(long.len()).map_err(|_| "vocabulary too large")?;
                    let len = u32::try_from(text.len()).map_err(|_| "vocabulary too large")?;
                    entry.0[4..8].copy_from_slice(&at.to_le_bytes());
                    entry.0[8..12].copy_from_slice(&len.to_le_bytes());
                    long.extend_from_slice(&text);
                }
                entry.0[0] = flags;
            } else if added {
                entry.0[0] = Entry::ADDED;
            }
            entries.push(entry);
        }
        Ok(Vocab {
            plan,
            entries,
            long,
            probe,
            bytes,
        })
    }

    /// Ids in the vocabulary's id space (present or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn flags(&self, id: u32) -> u8 {
        self.entries.get(id as usize).map_or(0, |e| e.0[0])
    }

    /// Whether `id` is an added token (markers, specials).
    pub fn is_added(&self, id: u32) -> bool {
        self.flags(id) & Entry::ADDED != 0
    }

    /// Whether `id` is a byte-fallback token (see [`Entry::BYTE`]).
    pub fn is_byte(&self, id: u32) -> bool {
        self.flags(id) & Entry::BYTE != 0
    }

    /// Whether the vocabulary has byte-fallback tokens at all.
    pub fn has_bytes(&self) -> bool {
        self.bytes
    }

    fn entry(&self, id: u32) -> Option<&[u8]> {
        let e = self.entries.get(id as usize)?;
        if e.has(Entry::INLINE) {
            Some(&e.0[2..2 + e.0[1] as usize])
        } else if e.has(Entry::PRESENT) {
            let at = u32::from_le_bytes([e.0[4], e.0[5], e.0[6], e.0[7]]) as usize;
            let len = u32::from_le_bytes([e.0[8], e.0[9], e.0[10], e.0[11]]) as usize;
            Some(&self.long[at..at + len])
        } else {
            None
        }
    }

    fn text(&self, id: u32) -> Option<&str> {
        // Non-byte plans store entries that were strings: always valid UTF-8.
        self.entry(id).map(|b| std::str::from_utf8(b).unwrap_or(""))
    }

    /// A `Bytes` plan's window: the entries' bytes as lossy UTF-8, replacing `out` (in its own
    /// buffer: no allocation per call). True when the bytes were valid UTF-8, i.e. `out` is
    /// exactly their concatenation.
    fn bytes_into(&self, ids: &[u32], out: &mut String) -> bool {
        let mut bytes = std::mem::take(out).into_bytes();
        bytes.clear();
        for &id in ids {
            if let Some(e) = self.entry(id) {
                bytes.extend_from_slice(e);
            }
        }
        match String::from_utf8(bytes) {
            Ok(text) => {
                *out = text;
                true
            }
            Err(e) => {
                *out = String::from_utf8_lossy(e.as_bytes()).into_owned();
                false
            }
        }
    }

    /// A `Bytes` plan's window appended to `out` when its bytes are valid UTF-8 (true); else
    /// `out` is left as it was (false). No copy through a buffer of its own.
    fn append_valid(&self, ids: &[u32], out: &mut String) -> bool {
        let start = out.len();
        // SAFETY: bytes are appended, then either checked to be valid UTF-8 or cut off again
        // (back to `start`, the end of what was valid before), before `out` is used as a str.
        let buf = unsafe { out.as_mut_vec() };
        for &id in ids {
            if let Some(e) = self.entry(id) {
                buf.extend_from_slice(e);
            }
        }
        if std::str::from_utf8(&buf[start..]).is_ok() {
            return true;
        }
        buf.truncate(start);
        false
    }

    /// `decode`, and whether `out` is exactly the entries' bytes (a `Bytes` plan's valid window;
    /// false for every other plan).
    fn decode_exact(&self, ids: &[u32], out: &mut String) -> bool {
        match &self.plan {
            Plan::Bytes => self.bytes_into(ids, out),
            _ => {
                self.decode(ids, out);
                false
            }
        }
    }

    /// `Tokenizer.decode(ids, skip_special_tokens=False)`, replacing `out`.
    pub fn decode(&self, ids: &[u32], out: &mut String) {
        out.clear();
        match &self.plan {
            Plan::Bytes => {
                self.bytes_into(ids, out);
            }
            Plan::Spaced => {
                let mut first = true;
                for &id in ids {
                    if let Some(t) = self.text(id) {
                        if !first {
                            out.push(' ');
                        }
                        out.push_str(t);
                        first = false;
                    }
                }
            }
            Plan::Tokens { rest } => {
                let mut tokens: Vec<String> = ids
                    .iter()
                    .filter_map(|&id| self.text(id).map(str::to_owned))
                    .collect();
                for step in rest {
                    tokens = apply(step, tokens);
                }
                for t in &tokens {
                    out.push_str(t);
                }
            }
        }
    }
}

/// One decoder step over a window's tokens (`Decoder.decode_chain`).
fn apply(step: &Step, tokens: Vec<String>) -> Vec<String> {
    match step {
        Step::Replace { .. } | Step::Strip { .. } => {
            tokens.iter().map(|t| step.apply_one(t)).collect()
        }
        Step::Fuse => vec![tokens.concat()],
        Step::Metaspace {
            replacement,
            prepend,
        } => tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.chars()
                    .filter_map(|c| {
                        if c != *replacement {
                            Some(c)
                        } else if i == 0 && *prepend {
                            None
                        } else {
                            Some(' ')
                        }
                    })
                    .collect()
            })
            .collect(),
        Step::ByteFallback => {
            let mut out = Vec::with_capacity(tokens.len());
            let mut bytes: Vec<u8> = Vec::new();
            let flush = |bytes: &mut Vec<u8>, out: &mut Vec<String>| {
                if bytes.is_empty() {
                    return;
                }
                match String::from_utf8(std::mem::take(bytes)) {
                    Ok(s) => out.push(s),
                    Err(e) => {
                        let n = e.as_bytes().len();
                        out.extend(std::iter::repeat_n(REPLACEMENT.to_string(), n));
                    }
                }
            };
            for token in tokens {
                match byte_piece(&token) {
                    Some(b) => bytes.push(b),
                    None => {
                        flush(&mut bytes, &mut out);
                        out.push(token);
                    }
                }
            }
            flush(&mut bytes, &mut out);
            out
        }
        Step::ByteLevel => unreachable!("rejected by Vocab::new"),
    }
}

/// The stream refused a step: its decode no longer starts with the text already settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidPrefix;

/// `tokenizers`' `DecodeStream` (`skip_special_tokens=False`): the same window, the same rules.
#[derive(Debug, Default, Clone)]
pub struct DecodeStream {
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
    scratch: String,
    /// The text of `ids[..prefix_index]` was exactly their bytes (a `Bytes` plan's window that
    /// was valid UTF-8): `step` then decodes only the ids after it (see `step`), and `prefix`
    /// only says that there is one (its text is that of an earlier window: never read again).
    exact_prefix: bool,
}

impl DecodeStream {
    /// A stream seeded with `ids` (the prompt's tail), as `DecodeStream(ids=...)`.
    pub fn new(ids: Vec<u32>) -> DecodeStream {
        DecodeStream {
            ids,
            ..DecodeStream::default()
        }
    }

    /// `step_decode_stream`: appends the text `new` settles to `out` (nothing when it settles
    /// none yet, as `None`).
    pub fn step(
        &mut self,
        vocab: &Vocab,
        new: &[u32],
        out: &mut String,
    ) -> Result<(), InvalidPrefix> {
        if self.prefix.is_empty() && !self.ids.is_empty() {
            let exact = vocab.decode_exact(&self.ids, &mut self.scratch);
            if !self.scratch.ends_with(REPLACEMENT) {
                std::mem::swap(&mut self.prefix, &mut self.scratch);
                self.prefix_index = self.ids.len();
                self.exact_prefix = exact;
            }
        }
        if self.exact_prefix && !self.prefix.is_empty() {
            // The window's bytes start with the prefix's, valid UTF-8 that ends a character:
            // their lossy decoding is the prefix followed by the lossy decoding of the rest. So
            // the window need not be decoded whole, nor the new prefix again: the same text,
            // the same decisions, a `Bytes` vocabulary's steady state. While the prefix stays
            // exact its text is never read again (only that there is one), so a valid rest is
            // written straight to `out` and not kept.
            self.ids.extend_from_slice(new);
            let start = out.len();
            if vocab.append_valid(&self.ids[self.prefix_index..], out) {
                if out.len() > start && !out.ends_with(REPLACEMENT) {
                    self.ids.drain(..self.prefix_index);
                    self.prefix_index = self.ids.len();
                } else {
                    out.truncate(start);
                }
                return Ok(());
            }
            vocab.bytes_into(&self.ids[self.prefix_index..], &mut self.scratch);
            let rest = &self.scratch;
            if !rest.is_empty() && !rest.ends_with(REPLACEMENT) {
                out.push_str(rest);
                self.ids.drain(..self.prefix_index);
                self.prefix_index = self.ids.len();
                std::mem::swap(&mut self.prefix, &mut self.scratch);
                self.exact_prefix = false;
            }
            return Ok(());
        }
        self.ids.extend_from_slice(new);
        vocab.decode(&self.ids, &mut self.scratch);
        let text = &self.scratch;
        if text.len() > self.prefix.len() && !text.ends_with(REPLACEMENT) {
            if !text.starts_with(self.prefix.as_str()) {
                return Err(InvalidPrefix);
            }
            out.push_str(&text[self.prefix.len()..]);
            let new_prefix_index = self.ids.len() - self.prefix_index;
            self.ids.drain(..self.prefix_index);
            self.exact_prefix = vocab.decode_exact(&self.ids, &mut self.prefix);
            self.prefix_index = new_prefix_index;
        }
        Ok(())
    }
}

/// Marker ids of one bound grammar: id → (the token's text, its sentinel; "" for a special the
/// format does not use). `BoundGrammar.mark_of_id`. Every id of a step is asked whether it is a
/// marker: the answer for an id outside the markers' range (most text ids: markers are added
/// tokens, numbered after the vocabulary) costs two comparisons, inside it one bit.
#[derive(Debug, Default)]
pub struct Marks {
    by_id: HashMap<u32, (String, String)>,
    /// The smallest marker id, and one bit per id from it to the largest.
    low: u32,
    bits: Vec<u64>,
}

impl Marks {
    pub fn new(marks: impl IntoIterator<Item = (u32, String, String)>) -> Marks {
        let by_id: HashMap<u32, (String, String)> =
            marks.into_iter().map(|(id, t, s)| (id, (t, s))).collect();
        let low = by_id.keys().copied().min().unwrap_or(0);
        let high = by_id.keys().copied().max().unwrap_or(0);
        let mut bits = if by_id.is_empty() {
            Vec::new()
        } else {
            vec![0u64; ((high - low) as usize) / 64 + 1]
        };
        for &id in by_id.keys() {
            let at = (id - low) as usize;
            bits[at / 64] |= 1 << (at % 64);
        }
        Marks { by_id, low, bits }
    }

    /// Whether `id` is a marker (bound or dropped): `BoundGrammar.marker_ids`.
    pub fn contains(&self, id: u32) -> bool {
        let Some(at) = id.checked_sub(self.low) else {
            return false;
        };
        let at = at as usize;
        self.bits
            .get(at / 64)
            .is_some_and(|word| word & (1 << (at % 64)) != 0)
    }

    pub fn get(&self, id: u32) -> Option<&(String, String)> {
        if self.contains(id) {
            self.by_id.get(&id)
        } else {
            None
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// One request's detokenizer (`TokenScanner`): ids in, text in sentinel form out. For a
/// byte-fallback vocabulary it holds a run of byte ids and steps it together with the next other
/// id (`ByteGroupScanner`), so the decoder always decides a byte group whole, whatever the split.
#[derive(Debug)]
pub struct Scanner {
    vocab: Arc<Vocab>,
    marks: Arc<Marks>,
    stream: DecodeStream,
    /// Whether the vocabulary has byte-fallback ids (checked once per id, not looked up).
    groups: bool,
    /// Byte ids held until the next non-byte id.
    held: Vec<u32>,
}

impl Scanner {
    /// The decoder's window, where a step appends its ids and from where it decodes them
    /// (`Session::prefetch`); the prefix's text and the scratch only when the step reads them:
    /// while the prefix is exact (a `Bytes` vocabulary's steady state) its text is never read
    /// and the scratch only when a step's bytes are no valid UTF-8, so asking for them cost
    /// four cache lines per step that it never used.
    pub fn prefetch(&self) {
        let s = &self.stream;
        crate::prefetch::end(&s.ids);
        if !s.exact_prefix || s.prefix.is_empty() {
            crate::prefetch::lines(s.prefix.as_ptr(), s.prefix.len().min(192));
            if s.scratch.capacity() > 0 {
                crate::prefetch::start(s.scratch.as_bytes());
            }
        }
    }

    /// What a large step grew of the decoder's strings beyond `keep` bytes (`events::give_back`),
    /// and of its window's ids beyond `keep` ids (a step's ids are appended to the window before
    /// it settles, so a prompt-sized step left the window their capacity; the window is a few ids
    /// after any step, so a smaller keep would reallocate it on every steady step of more ids).
    pub fn give_back(&mut self, keep: usize) {
        crate::events::give_back(&mut self.stream.prefix, keep);
        crate::events::give_back(&mut self.stream.scratch, keep);
        crate::events::give_back_items(&mut self.stream.ids, keep);
    }

    /// The stream is seeded with the last [`PROMPT_CONTEXT`] prompt ids that are not added
    /// tokens, so the first output token decodes as it would in context.
    pub fn new(vocab: Arc<Vocab>, marks: Arc<Marks>, prompt_ids: &[u32]) -> Scanner {
        let from = prompt_ids.len().saturating_sub(PROMPT_CONTEXT);
        let tail: Vec<u32> = prompt_ids[from..]
            .iter()
            .copied()
            .filter(|&id| !vocab.is_added(id))
            .collect();
        Scanner {
            groups: vocab.has_bytes(),
            vocab,
            marks,
            stream: DecodeStream::new(tail),
            held: Vec::new(),
        }
    }

    pub fn marks(&self) -> &Marks {
        &self.marks
    }

    /// The text of plain ids (no marker among them) in one step, appended to `out`.
    pub fn run(&mut self, ids: &[u32], out: &mut String) {
        if !self.groups {
            return self.settle(ids, out);
        }
        // Trailing byte ids wait for the next non-byte id; the rest goes with what was held.
        let end = ids.len()
            - ids
                .iter()
                .rev()
                .take_while(|&&id| self.vocab.is_byte(id))
                .count();
        if end == 0 {
            self.held.extend_from_slice(ids);
            return;
        }
        if self.held.is_empty() {
            self.settle(&ids[..end], out);
        } else {
            let mut step = std::mem::take(&mut self.held);
            step.extend_from_slice(&ids[..end]);
            self.settle(&step, out);
            step.clear();
            self.held = step;
        }
        self.held.extend_from_slice(&ids[end..]);
    }

    /// The text one id settles, appended to `out`: a marker's sentinel follows the text held
    /// before it, its own text cut off.
    pub fn piece(&mut self, id: u32, out: &mut String) {
        let start = out.len();
        if self.groups && self.vocab.is_byte(id) {
            self.held.push(id);
            return;
        }
        if self.held.is_empty() {
            self.settle(&[id], out);
        } else {
            let mut step = std::mem::take(&mut self.held);
            step.push(id);
            self.settle(&step, out);
            step.clear();
            self.held = step;
        }
        if let Some((marker, sentinel)) = self.marks.get(id) {
            if out[start..].ends_with(marker.as_str()) {
                out.truncate(out.len() - marker.len());
            }
            out.push_str(sentinel);
        }
    }

    /// At the end of the output, the text the stream still holds (`TokenScanner.flush`): one
    /// more step with the probe token settles it, and the probe's text is cut off again. The
    /// scanner is spent afterwards.
    /// Held byte ids are stepped with the probe, so their group is decided whole here too.
    pub fn flush(&mut self, out: &mut String) {
        let mut step = std::mem::take(&mut self.held);
        let Some(probe) = self.vocab.probe else {
            if !step.is_empty() {
                self.settle(&step, out);
            }
            return;
        };
        let start = out.len();
        step.push(probe);
        self.settle(&step, out);
        if out[start..].ends_with(PROBE) {
            out.truncate(out.len() - PROBE.len());
        } else {
            out.truncate(start);
        }
    }

    fn settle(&mut self, ids: &[u32], out: &mut String) {
        if self.stream.step(&self.vocab, ids, out).is_ok() {
            return;
        }
        // Odd output is never an error: the held bytes become one U+FFFD and the stream starts
        // again at this step (without the prompt's context), as `TokenScanner._restart` does.
        out.push(REPLACEMENT);
        self.stream = DecodeStream::default();
        if self.stream.step(&self.vocab, ids, out).is_err() {
            self.stream = DecodeStream::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn byte_level(tokens: &[&str]) -> Arc<Vocab> {
        let tokens: Vec<Option<String>> = tokens.iter().map(|t| Some(t.to_string())).collect();
        Arc::new(Vocab::new(&tokens, Some(vec![Step::ByteLevel]), &[], None).unwrap())
    }

    fn sentencepiece(tokens: &[&str]) -> Arc<Vocab> {
        sentencepiece_with_probe(tokens, None)
    }

    fn sentencepiece_with_probe(tokens: &[&str], probe: Option<u32>) -> Arc<Vocab> {
        let tokens: Vec<Option<String>> = tokens.iter().map(|t| Some(t.to_string())).collect();
        let steps = vec![
            Step::Replace {
                pattern: "▁".into(),
                content: " ".into(),
            },
            Step::ByteFallback,
            Step::Fuse,
            Step::Strip {
                content: ' ',
                start: 1,
                stop: 0,
            },
        ];
        Arc::new(Vocab::new(&tokens, Some(steps), &[], probe).unwrap())
    }

    fn scan(vocab: &Arc<Vocab>, prompt: &[u32], ids: &[u32]) -> Vec<String> {
        let mut s = Scanner::new(vocab.clone(), Arc::new(Marks::default()), prompt);
        ids.iter()
            .map(|&id| {
                let mut out = String::new();
                s.piece(id, &mut out);
                out
            })
            .collect()
    }

    #[test]
    fn byte_level_holds_an_unfinished_character() {
        // "é" is C3 A9: in GPT-2's alphabet 'Ã' (C3) and '©' (A9).
        let v = byte_level(&["Ã", "©", "a"]);
        assert_eq!(scan(&v, &[], &[0, 1, 2]), ["", "é", "a"]);
    }

    #[test]
    fn byte_level_broken_sequence_is_one_replacement() {
        let v = byte_level(&["Ã", "a"]);
        assert_eq!(scan(&v, &[], &[0, 1]), ["", "\u{fffd}a"]);
    }

    #[test]
    fn sentencepiece_strips_the_leading_space_only_at_the_start() {
        let v = sentencepiece(&["▁Hello", "▁world"]);
        assert_eq!(scan(&v, &[], &[0, 1]), ["Hello", " world"]);
        // Seeded with a prompt token, the first output keeps its space.
        assert_eq!(scan(&v, &[0], &[1]), [" world"]);
    }

    #[test]
    fn byte_fallback_gives_one_replacement_per_byte() {
        let v = sentencepiece(&["<0xE2>", "<0x82>", "▁x"]);
        assert_eq!(scan(&v, &[], &[0, 1, 2]), ["", "", "\u{fffd}\u{fffd} x"]);
    }

    #[test]
    fn flush_settles_held_bytes() {
        let tokens: Vec<Option<String>> = ["Ã", "a"].iter().map(|t| Some(t.to_string())).collect();
        let v = Arc::new(Vocab::new(&tokens, Some(vec![Step::ByteLevel]), &[], Some(1)).unwrap());
        let mut s = Scanner::new(v, Arc::new(Marks::default()), &[]);
        let mut out = String::new();
        s.piece(0, &mut out);
        assert_eq!(out, "");
        s.flush(&mut out);
        assert_eq!(out, "\u{fffd}");
    }

    #[test]
    fn byte_fallback_groups_are_decided_whole_at_any_split() {
        // C2 80 80 then a token: one `<U+0080>` then a lone 80 if the valid prefix were settled
        // first, but the decoder decides the group whole: three U+FFFD, whatever the split.
        let v = sentencepiece_with_probe(
            &["<0xC2>", "<0x80>", "▁x", "<0xC3>", "<0xA9>", "a"],
            Some(5),
        );
        let ids = [0, 1, 1, 2, 3, 4, 2, 0, 1, 1];
        // The last group waits for the end: the flush decides it (with the probe "a").
        let whole = "\u{fffd}\u{fffd}\u{fffd} xé x\u{fffd}\u{fffd}\u{fffd}";
        assert_eq!(
            scan(&v, &[], &ids)[..4],
            ["", "", "", "\u{fffd}\u{fffd}\u{fffd} x"]
        );
        for cut in 0..=ids.len() {
            let mut s = Scanner::new(v.clone(), Arc::new(Marks::default()), &[]);
            let mut out = String::new();
            for part in [&ids[..cut], &ids[cut..]] {
                if !part.is_empty() {
                    s.run(part, &mut out);
                }
            }
            s.flush(&mut out);
            assert_eq!(out, whole, "cut at {cut}");
            let mut s = Scanner::new(v.clone(), Arc::new(Marks::default()), &[]);
            let mut out = String::new();
            ids[..cut].iter().for_each(|&id| s.piece(id, &mut out));
            s.run(&ids[cut..], &mut out);
            s.flush(&mut out);
            assert_eq!(out, whole, "one id at a time up to {cut}");
        }
    }

    #[test]
    fn only_byte_fallback_vocabularies_hold_bytes() {
        let v = byte_level(&["Ã", "©"]);
        assert!(!v.has_bytes());
        let v = sentencepiece(&["<0xC3>", "a"]);
        assert!(v.is_byte(0) && !v.is_byte(1));
    }

    #[test]
    fn markers_become_sentinels_after_held_text() {
        let tokens: Vec<Option<String>> = ["Ã", "<m>", "<s>"]
            .iter()
            .map(|t| Some(t.to_string()))
            .collect();
        let v = Arc::new(Vocab::new(&tokens, Some(vec![Step::ByteLevel]), &[1, 2], None).unwrap());
        let marks = Arc::new(Marks::new([
            (1, "<m>".to_string(), "\u{e000}".to_string()),
            (2, "<s>".to_string(), String::new()),
        ]));
        let mut s = Scanner::new(v, marks, &[]);
        let mut out = String::new();
        s.piece(0, &mut out);
        assert_eq!(out, "");
        s.piece(1, &mut out);
        assert_eq!(out, "\u{fffd}\u{e000}");
        s.piece(2, &mut out);
        assert_eq!(out, "\u{fffd}\u{e000}");
    }
}

//! The output digest (`server/parsetier/engine/digest.py`, the definition): CRC-32 (IEEE, as
//! `zlib.crc32`, chained) of the canonical byte stream of a session's output, each piece preceded
//! by its kind's tag when the kind differs from the previous piece's. The packed `ParseBatch`
//! path digests a step's deltas here, with no Python; the value must stay equal to digest.py's
//! (tests/test_native_batch.py compares both engines' replies, digests included).

use crate::events::{DeltaKind, StepOut};

/// The kind of the last piece digested; its tag is what digest.py keeps as a string
/// (`"\x01"`, `"\x03" + index + "\x00"`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PieceKind {
    #[default]
    None,
    Reasoning,
    Content,
    CallId(u32),
    CallName(u32),
    CallArguments(u32),
    Finish,
}

const REASONING: u8 = 0x01;
const CONTENT: u8 = 0x02;
const CALL_ID: u8 = 0x03;
const CALL_NAME: u8 = 0x04;
const CALL_ARGUMENTS: u8 = 0x05;
const FINISH: u8 = 0x06;

impl PieceKind {
    /// The tag digest.py keeps for this kind (empty before any piece).
    pub fn tag(self) -> String {
        let call = |tag: u8, index: u32| format!("{}{index}\u{0}", tag as char);
        match self {
            PieceKind::None => String::new(),
            PieceKind::Reasoning => (REASONING as char).to_string(),
            PieceKind::Content => (CONTENT as char).to_string(),
            PieceKind::CallId(i) => call(CALL_ID, i),
            PieceKind::CallName(i) => call(CALL_NAME, i),
            PieceKind::CallArguments(i) => call(CALL_ARGUMENTS, i),
            PieceKind::Finish => (FINISH as char).to_string(),
        }
    }

    /// The kind of a digest.py tag; None for a string that is no tag.
    pub fn of_tag(tag: &str) -> Option<PieceKind> {
        let bytes = tag.as_bytes();
        let Some((&first, rest)) = bytes.split_first() else {
            return Some(PieceKind::None);
        };
        if rest.is_empty() {
            return match first {
                REASONING => Some(PieceKind::Reasoning),
                CONTENT => Some(PieceKind::Content),
                FINISH => Some(PieceKind::Finish),
                _ => None,
            };
        }
        let index: u32 = std::str::from_utf8(rest.strip_suffix(&[0])?)
            .ok()?
            .parse()
            .ok()?;
        match first {
            CALL_ID => Some(PieceKind::CallId(index)),
            CALL_NAME => Some(PieceKind::CallName(index)),
            CALL_ARGUMENTS => Some(PieceKind::CallArguments(index)),
            _ => None,
        }
    }

    fn write_tag(self, crc: u32) -> u32 {
        let mut buf = [0u8; 16];
        let call = |buf: &mut [u8; 16], tag: u8, index: u32| {
            buf[0] = tag;
            let mut n = 1;
            for digit in index.to_string().bytes() {
                buf[n] = digit;
                n += 1;
            }
            buf[n] = 0;
            n + 1
        };
        let n = match self {
            PieceKind::None => 0,
            PieceKind::Reasoning => {
                buf[0] = REASONING;
                1
            }
            PieceKind::Content => {
                buf[0] = CONTENT;
                1
            }
            PieceKind::Finish => {
                buf[0] = FINISH;
                1
            }
            PieceKind::CallId(i) => call(&mut buf, CALL_ID, i),
            PieceKind::CallName(i) => call(&mut buf, CALL_NAME, i),
            PieceKind::CallArguments(i) => call(&mut buf, CALL_ARGUMENTS, i),
        };
        crc32(&buf[..n], crc)
    }
}

/// A session's running digest: `value` is what replies carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    pub value: u32,
    pub kind: PieceKind,
}

impl Digest {
    /// One output piece of `kind`; an empty piece changes nothing.
    pub fn piece(&mut self, kind: PieceKind, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.kind != kind {
            self.kind = kind;
            self.value = kind.write_tag(self.value);
        }
        self.value = crc32(text.as_bytes(), self.value);
    }

    /// A step's deltas, in order (digest.py's `add`).
    pub fn step(&mut self, out: &StepOut) {
        for d in &out.deltas {
            let text = out.delta_text(d.text);
            match d.kind {
                DeltaKind::Reasoning => self.piece(PieceKind::Reasoning, text),
                DeltaKind::Content => self.piece(PieceKind::Content, text),
                DeltaKind::Call => {
                    if let Some((id, name)) = d.head {
                        self.piece(PieceKind::CallId(d.index), out.delta_text(id));
                        self.piece(PieceKind::CallName(d.index), out.delta_text(name));
                    }
                    self.piece(PieceKind::CallArguments(d.index), text);
                }
            }
        }
    }

    /// The session's end: its finish reason (digest.py's `finish`, which tags even when the
    /// previous piece was a finish).
    pub fn finish(&mut self, reason: &str) {
        self.kind = PieceKind::Finish;
        self.value = PieceKind::Finish.write_tag(self.value);
        self.value = crc32(reason.as_bytes(), self.value);
    }
}

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC_TABLE: [u32; 256] = crc_table();

/// `zlib.crc32(data, crc)`: CRC-32 (IEEE, reflected), chained from `crc`.
pub fn crc32(data: &[u8], crc: u32) -> u32 {
    let mut c = !crc;
    for &b in data {
        c = CRC_TABLE[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_zlib() {
        // zlib.crc32(b"123456789") and a chained call.
        assert_eq!(crc32(b"123456789", 0), 0xCBF4_3926);
        assert_eq!(crc32(b"6789", crc32(b"12345", 0)), 0xCBF4_3926);
        assert_eq!(crc32(b"", 7), 7);
    }

    #[test]
    fn tags_round_trip() {
        for kind in [
            PieceKind::None,
            PieceKind::Reasoning,
            PieceKind::Content,
            PieceKind::CallId(0),
            PieceKind::CallName(12),
            PieceKind::CallArguments(3),
            PieceKind::Finish,
        ] {
            assert_eq!(PieceKind::of_tag(&kind.tag()), Some(kind));
        }
        assert_eq!(PieceKind::of_tag("x"), None);
        assert_eq!(PieceKind::of_tag("\u{3}1"), None);
    }

    #[test]
    fn pieces_concatenate() {
        // digest.py: "\x02" "Hello" " world" "\x03" "0\x00" "call_1" ... one stream.
        let mut d = Digest::default();
        d.piece(PieceKind::Content, "Hello");
        d.piece(PieceKind::Content, " world");
        d.piece(PieceKind::CallId(0), "call_1");
        d.finish("stop");
        let stream = b"\x02Hello world\x030\x00call_1\x06stop";
        assert_eq!(d.value, crc32(stream, 0));
        assert_eq!(d.kind, PieceKind::Finish);
    }
}

//! Tool call ids derived from the request (`parsetier/engine/call_ids.py`):
//! `"chatcmpl-tool-" + hex(BLAKE2b-96(key=ID_KEY, seed || 0x00 || decimal(call_index)))`.

use blake2::digest::consts::U12;
use blake2::digest::FixedOutput;
use blake2::digest::{KeyInit, Update};
use blake2::Blake2bMac;

const ID_KEY: &[u8] = b"parsetier.v1.tool-call-id";
const ID_PREFIX: &str = "chatcmpl-tool-";

/// A session's id function: the seed hashed once, each id one copy of that state.
#[derive(Clone)]
pub struct IdMaker {
    seeded: Blake2bMac<U12>,
}

impl IdMaker {
    /// `seed`: `call_ids.call_id_seed(options)`.
    pub fn new(seed: &str) -> IdMaker {
        let mut seeded = <Blake2bMac<U12> as KeyInit>::new_from_slice(ID_KEY).expect("a short key");
        seeded.update(seed.as_bytes());
        seeded.update(b"\x00");
        IdMaker { seeded }
    }

    pub fn make(&self, call_index: i32) -> String {
        let mut d = self.seeded.clone();
        d.update(call_index.to_string().as_bytes());
        let digest = d.finalize_fixed();
        let mut out = String::with_capacity(ID_PREFIX.len() + 24);
        out.push_str(ID_PREFIX);
        for b in digest.iter() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }
}

/// What `call_ids.prompt_digest` hashes: the ids in decimal joined by commas, as
/// `",".join(map(str, ids))` (the hashing stays in Python's `hashlib`, faster than this crate's).
pub fn decimal_list(ids: &[u32]) -> Vec<u8> {
    let mut text = Vec::with_capacity(ids.len() * 7);
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        push_decimal(&mut text, id);
    }
    text
}

/// `id` in decimal, as `str(id)` (no formatter per id: a long prompt has thousands).
fn push_decimal(out: &mut Vec<u8>, mut id: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (id % 10) as u8;
        id /= 10;
        if id == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_pythons_blake2b() {
        // python: call_ids.id_maker(SessionOptions(request_id="req-1"))(0)
        let id = IdMaker::new("req-1").make(0);
        assert_eq!(id, "chatcmpl-tool-506a6fb16450f276cd12bac1");
    }

    #[test]
    fn decimal_list_is_pythons_join() {
        assert_eq!(decimal_list(&[151644, 77091, 198]), b"151644,77091,198");
        assert_eq!(decimal_list(&[]), b"");
        let mut text = Vec::new();
        for id in [0, 7, 10, 99, 4294967295] {
            text.clear();
            push_decimal(&mut text, id);
            assert_eq!(text, id.to_string().as_bytes());
        }
    }
}

//! Tool call ids derived from the request (`parsetier/call_ids.py`):
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_pythons_blake2b() {
        // python: call_ids.id_maker(SessionOptions(request_id="req-1"))(0)
        let id = IdMaker::new("req-1").make(0);
        assert_eq!(id, "chatcmpl-tool-506a6fb16450f276cd12bac1");
    }
}

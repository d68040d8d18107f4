//! The hash of the packed path's session keys (the PyO3 crate's `batch.rs`: the stream's `SessionTable`, a
//! message's `distinct` check): each packed item's key is hashed twice per message, and std's
//! SipHash-1-3 was most of both lookups' own time at a thousand sessions (`DefaultHasher::write`
//! and its callers, ~2-3% of the packed step in a profile). Keys come from clients, so the hash
//! stays keyed by random seeds (a key set that collides in one process does not in another):
//! a folded 64×64→128-bit multiply of the key's bytes with the seeds, a few multiplies for a
//! key of up to 16 bytes (the usual keys: a session's number, a request id).

use std::hash::{BuildHasher, Hasher};

/// A `HashMap`'s / `HashSet`'s hasher state: the seeds, random per table.
#[derive(Clone, Copy)]
pub struct KeyState {
    seeds: [u64; 3],
}

impl Default for KeyState {
    fn default() -> Self {
        // std's `RandomState` is seeded from the OS per thread and stepped per instance: three
        // of its hashes are this table's seeds (once per table, never per lookup).
        let random = std::hash::RandomState::new();
        KeyState {
            seeds: [0u64, 1, 2].map(|i| random.hash_one(i) | 1),
        }
    }
}

impl BuildHasher for KeyState {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            acc: self.seeds[0],
            seeds: self.seeds,
        }
    }
}

pub struct KeyHasher {
    acc: u64,
    seeds: [u64; 3],
}

/// The high and low halves of the 128-bit product, folded: every input bit reaches the
/// output's high and low bits (hashbrown reads both).
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let wide = u128::from(a) * u128::from(b);
    (wide as u64) ^ ((wide >> 64) as u64)
}

#[inline]
fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("eight bytes"))
}

#[inline]
fn half(bytes: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(
        bytes[..4].try_into().expect("four bytes"),
    ))
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let [_, s1, s2] = self.seeds;
        let n = bytes.len();
        // Up to 16 bytes: two words read from both ends (overlapping when shorter); the length
        // is hashed too (`write_usize`, as `[u8]`'s `Hash` writes it first).
        // Longer: 16 bytes at a time, the last 16 (overlapping) as the two words.
        let (a, b) = if n > 16 {
            let mut rest = bytes;
            while rest.len() > 16 {
                self.acc = fold(word(rest) ^ s1, word(&rest[8..]) ^ s2 ^ self.acc);
                rest = &rest[16..];
            }
            (word(&bytes[n - 16..]), word(&bytes[n - 8..]))
        } else if n >= 8 {
            (word(bytes), word(&bytes[n - 8..]))
        } else if n >= 4 {
            (half(bytes), half(&bytes[n - 4..]))
        } else if n > 0 {
            (
                u64::from(bytes[0]),
                u64::from(bytes[n / 2]) << 8 | u64::from(bytes[n - 1]),
            )
        } else {
            (0, 0)
        };
        self.acc = fold(a ^ s1, b ^ s2 ^ self.acc);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.acc = self.acc.wrapping_add(n as u64).rotate_left(23);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold(self.acc, self.seeds[2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn distinct_keys_hash_apart() {
        let state = KeyState::default();
        let mut seen = HashSet::new();
        let mut keys: Vec<Vec<u8>> = (0..20_000).map(|i| format!("k{i}").into_bytes()).collect();
        keys.extend((0..40u8).map(|n| vec![b'x'; usize::from(n)]));
        keys.push(b"a\x00".to_vec());
        keys.push(b"a".to_vec());
        for key in &keys {
            assert!(seen.insert(state.hash_one(key.as_slice())), "{key:?}");
        }
    }

    #[test]
    fn the_seeds_differ_per_table() {
        let (a, b) = (KeyState::default(), KeyState::default());
        assert_ne!(a.hash_one(b"k1".as_slice()), b.hash_one(b"k1".as_slice()));
    }
}

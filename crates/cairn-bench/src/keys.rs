//! Key and value generation for the UTxO workload, and the benchmark's random-number generator.
//!
//! Owns: [`SplitMix64`], [`utxo_key`] and [`utxo_value`]. Every key and value is a pure function
//! of a `u64` id (and the run's seed), so the benchmark never stores keys: it stores ids, and
//! regenerates a key (about 5 ns) whenever it needs one. Must never touch: the engine.

/// Bytes in a UTxO key: a 32-byte transaction hash plus a 2-byte output index.
pub const KEY_BYTES: usize = 34;

/// Bytes in a UTxO value.
pub const VALUE_BYTES: usize = 60;

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, fast generator whose output function is a
/// bijection of its 64-bit state, so distinct seeds give distinct first outputs.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform number in `0..bound` (`bound > 0`), by Lemire's multiply-shift. The bias is at
    /// most `bound / 2^64`, far below anything the benchmark can observe.
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

/// The key of UTxO `id`: 34 bytes drawn from a SplitMix64 stream seeded with `id ^ seed`, so keys
/// look uniformly random (like hashes) and distinct ids always give distinct keys (their first
/// eight bytes already differ, see [`SplitMix64`]).
pub fn utxo_key(id: u64, seed: u64) -> [u8; KEY_BYTES] {
    let mut rng = SplitMix64::new(id ^ seed);
    let mut key = [0u8; KEY_BYTES];
    for chunk in key.chunks_mut(8) {
        let word = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    key
}

/// The value of UTxO `id`: the id's eight little-endian bytes repeated and cut to 60 bytes, so a
/// lookup result can be checked against the id it was asked for.
pub fn utxo_value(id: u64) -> [u8; VALUE_BYTES] {
    let word = id.to_le_bytes();
    let mut value = [0u8; VALUE_BYTES];
    for (i, byte) in value.iter_mut().enumerate() {
        *byte = word[i % 8];
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_34_bytes_and_deterministic() {
        for id in [0, 1, 42, u64::MAX] {
            let key = utxo_key(id, 1337);
            assert_eq!(key.len(), KEY_BYTES);
            assert_eq!(key, utxo_key(id, 1337));
            assert_ne!(key, utxo_key(id, 1338), "the seed changes the key");
        }
    }

    #[test]
    fn distinct_ids_give_distinct_keys() {
        let keys: HashSet<[u8; KEY_BYTES]> = (0..100_000).map(|id| utxo_key(id, 7)).collect();
        assert_eq!(keys.len(), 100_000);
    }

    #[test]
    fn key_bytes_look_uniform() {
        // The first byte of 65,536 keys: every bucket of 16 values should hold about 1/16.
        let mut buckets = [0u32; 16];
        for id in 0..65_536 {
            buckets[usize::from(utxo_key(id, 0)[0] >> 4)] += 1;
        }
        for count in buckets {
            assert!((3_600..4_600).contains(&count), "{buckets:?}");
        }
    }

    #[test]
    fn values_encode_their_id() {
        let value = utxo_value(0x0102_0304_0506_0708);
        assert_eq!(value.len(), VALUE_BYTES);
        assert_eq!(&value[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&value[56..], &0x0102_0304_0506_0708u64.to_le_bytes()[..4]);
        assert_ne!(utxo_value(1), utxo_value(2));
    }

    #[test]
    fn below_stays_in_bounds() {
        let mut rng = SplitMix64::new(3);
        for bound in [1, 2, 3, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(rng.below(bound) < bound);
            }
        }
    }
}

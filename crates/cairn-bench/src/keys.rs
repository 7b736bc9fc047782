//! Key and value generation for the UTxO workload, and the benchmark's random-number generator.
//!
//! Owns: [`SplitMix64`], [`utxo_key`] and [`utxo_value`]. Every key and value is a pure function
//! of a `u64` id (and the run's seed), so the benchmark never stores keys: it stores ids, and
//! regenerates a key (about 5 ns) whenever it needs one. Must never touch: the engine.
//!
//! The generator is `rand_xoshiro`'s SplitMix64 (the rand project's), whose sequence for a seed
//! is the one the hand-written generator it replaced gave, so the keys and choices of every
//! committed benchmark record stay the same (pinned by a test below). [`SplitMix64::below`]
//! stays a multiply-shift of our own: rand's `random_range` draws by rejection, which would
//! change which ids a batch picks, and with them what a benchmark measures.

use rand_xoshiro::rand_core::{Rng, SeedableRng};

/// Bytes in a UTxO key: a 32-byte transaction hash plus a 2-byte output index.
pub const KEY_BYTES: usize = 34;

/// Bytes in a UTxO value.
pub const VALUE_BYTES: usize = 60;

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, fast generator whose output function is a
/// bijection of its 64-bit state, so distinct seeds give distinct first outputs.
#[derive(Clone, Debug)]
pub struct SplitMix64(rand_xoshiro::SplitMix64);

impl SplitMix64 {
    /// A generator seeded with `seed` (its state is `seed`, as in the reference code).
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(rand_xoshiro::SplitMix64::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
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

    /// The sequences the committed benchmark records were made with: the generator, `below` and
    /// a key, for seed 1337 (a change here changes which keys every benchmark uses).
    #[test]
    fn sequences_are_those_of_the_committed_records() {
        let mut rng = SplitMix64::new(1337);
        let first: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            first,
            [
                0xb6a8_a9b3_13ca_a00b,
                0xcb7f_284b_67d6_05c9,
                0x3440_fccf_5408_2b5a
            ]
        );
        let mut rng = SplitMix64::new(1337);
        let picks: Vec<u64> = (0..5).map(|_| rng.below(1000)).collect();
        assert_eq!(picks, [713, 794, 204, 464, 229]);
        assert_eq!(
            hex::encode(utxo_key(42, 1337)),
            "87584af468bf0486d2003772f1d6ad2ec77201bf1301d2368f58759fdc5a20c0b646"
        );
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

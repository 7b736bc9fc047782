//! The blocked Bloom filter of a run.
//!
//! Owns: the in-memory filter ([`BloomFilter`]), its builder ([`BloomBuilder`]), its sizing
//! ([`BloomParams`]: bits per entry or target false-positive rate), the salted key hash
//! ([`key_hash`]) and the filter's serialised form (`docs/format/bloom.md`).
//!
//! May call: `std`, `xxhash-rust` (xxh3), `crate::error` and `fs` (only to read a filter file
//! straight into a filter's blocks, `BloomFilter::read_file`). Must never touch: the file
//! system otherwise, runs, pages or any other module's state. Callers hand it hashes and byte buffers; the
//! encoding is streamed through a caller-supplied sink, so where the bytes go is not its business.
//!
//! Design: every filter is an array of 512-bit blocks, one 64-byte cache line each
//! (`#[repr(C, align(64))]`). A key is hashed once with a salted 64-bit xxh3 ([`key_hash`]); the
//! high 32 bits choose the block (Lemire's multiply-high range reduction), and `k` bit positions
//! inside that block come from a multiplicative-congruential generator seeded with a mix of the
//! whole hash. All runs of a table share the salt, so one hash per key serves every run's filter.
//!
//! Cost sketch (hot path, per key):
//! - hashing: one xxh3_64 per key per lookup batch (about 20 ns for a 34-byte key), reused for
//!   the filter of every run probed;
//! - probing: one cache line (the block) per filter probed, plus `k` multiply-adds and at most
//!   `k` loads from that line, with an early exit on the first clear bit; for batched lookups
//!   call [`BloomFilter::prefetch`] for every hash first, then [`BloomFilter::contains_hash`],
//!   so the cache misses of the batch overlap;
//! - building: [`BloomBuilder`] prefetches a key's block when the key arrives and sets its bits
//!   16 keys later, so the cache misses of a filter larger than the cache overlap the merge work
//!   between keys;
//! - memory: `bits_per_entry / 8` bytes per entry (10 bits per entry: 1.25 bytes, so 200 MB for
//!   160 M keys), rounded up to whole 64-byte blocks; no syscalls.

use crate::error::{Error, Result};

/// Bits in one block: one 64-byte cache line.
pub const BLOCK_BITS: usize = 512;
/// Bytes in one block.
pub const BLOCK_BYTES: usize = BLOCK_BITS / 8;
/// The largest number of blocks a filter may have (`2^32 - 1`, so that the block choice
/// `((hash >> 32) * block_count) >> 32` fits in 64 bits). That is just under 256 GiB of filter,
/// or about 220 G entries at 10 bits per entry; a builder asked for more is clamped to this.
pub const BLOCK_COUNT_MAX: u64 = u32::MAX as u64;
/// The largest number of bit positions set per key that the format admits.
pub const HASHES_MAX: u32 = 64;
/// The magic bytes opening an encoded filter.
pub const MAGIC: [u8; 8] = *b"CRNBLOOM";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the encoded header that precedes the blocks.
pub const HEADER_LEN: usize = 40;

/// Largest chunk handed to the sink of [`BloomFilter::write_to`].
const WRITE_CHUNK_MAX: usize = 64 * 1024;
/// The name of this structure in errors.
const WHAT: &str = "bloom filter";

/// Multiplier folding the hash into the seed of the bit-position generator (2^64 / golden ratio).
const SEED_MUL: u64 = 0x9E37_79B9_7F4A_7C15;
/// Multiplier of the bit-position generator (Knuth's MMIX LCG multiplier).
const STEP_MUL: u64 = 0x5851_F42D_4C95_7F2D;
/// Increment of the bit-position generator (Knuth's MMIX LCG increment; odd).
const STEP_INC: u64 = 0x1405_7B7E_F767_814F;

/// Smallest bits per entry accepted by [`BloomParams`] constructors.
const BITS_PER_ENTRY_MIN: f64 = 1.0;
/// Largest bits per entry accepted by [`BloomParams`] constructors.
const BITS_PER_ENTRY_MAX: f64 = 64.0;
/// Largest number of hashes the sizing functions consider.
const SEARCH_HASHES_MAX: u32 = 32;
/// Smallest target false-positive rate accepted by [`BloomParams::for_fpr`].
pub(crate) const FPR_MIN: f64 = 1e-6;
/// Largest target false-positive rate accepted by [`BloomParams::for_fpr`].
const FPR_MAX: f64 = 0.5;

/// The salted 64-bit hash of a key (xxh3_64 with the salt as seed). Computed once per key per
/// lookup batch and reused for the filters of every run.
#[inline]
pub fn key_hash(salt: u64, key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, salt)
}

/// Sizing of a filter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BloomParams {
    /// Bits of filter per entry the filter is sized for.
    pub bits_per_entry: f64,
    /// Bit positions set (and tested) per key, `k`.
    pub hashes: u32,
}

impl BloomParams {
    /// No filter: a run built with these parameters gets a filter of one block with every bit
    /// set, which answers "maybe" for every key (so every lookup that reaches the run reads it)
    /// and costs 64 bytes whatever the run's size. The builder neither hashes nor sets bits.
    /// On disk it is an ordinary filter (`docs/format/bloom.md`).
    pub const NONE: BloomParams = BloomParams {
        bits_per_entry: 0.0,
        hashes: 1,
    };

    /// Whether these are [`BloomParams::NONE`] (no bits per entry).
    pub fn is_none(&self) -> bool {
        self.bits_per_entry == 0.0
    }

    /// Smallest bits-per-entry (with its best k) whose predicted FPR for a *blocked* filter is
    /// <= `fpr`. The search walks bits per entry from 1.0 to 64.0 in steps of 0.05 and, for
    /// each, k from 1 to 32. Valid `fpr`: 1e-6 ..= 0.5; else `Err(Error::InvalidConfig(..))`.
    pub fn for_fpr(fpr: f64) -> Result<BloomParams> {
        if !(FPR_MIN..=FPR_MAX).contains(&fpr) {
            return Err(Error::InvalidConfig(format!(
                "bloom filter false-positive rate {fpr} is outside {FPR_MIN} ..= {FPR_MAX}"
            )));
        }
        Self::search_fpr(fpr)
    }

    /// The smallest grid point whose predicted FPR is at most `fpr`.
    fn search_fpr(fpr: f64) -> Result<BloomParams> {
        // bits_per_entry = (20 + step) / 20, so every grid point is the nearest f64 to a
        // multiple of 0.05 (no accumulated rounding).
        let steps = ((BITS_PER_ENTRY_MAX - BITS_PER_ENTRY_MIN) * 20.0).round() as u32;
        let at = |step: u32| {
            let bits_per_entry = f64::from(20 + step) / 20.0;
            let (hashes, predicted) = best_hashes(bits_per_entry);
            (
                BloomParams {
                    bits_per_entry,
                    hashes,
                },
                predicted,
            )
        };
        if at(steps).1 > fpr {
            return Err(Error::InvalidConfig(format!(
                "bloom filter false-positive rate {fpr} is not reachable with at most \
                 {BITS_PER_ENTRY_MAX} bits per entry"
            )));
        }
        // The predicted rate falls as bits grow: binary search for the first grid point that
        // reaches `fpr` (about 11 evaluations of the model instead of up to 1,260: every table
        // creation and snapshot open sizes its filters), then step back over any rounding wobble
        // so the answer is the smallest such point.
        let (mut lo, mut hi) = (0u32, steps);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if at(mid).1 <= fpr {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        while lo > 0 && at(lo - 1).1 <= fpr {
            lo -= 1;
        }
        Ok(at(lo).0)
    }

    /// The best number of hashes (1 ..= 32) for a given bits-per-entry. Valid 1.0 ..= 64.0
    /// (finite), else `Err(Error::InvalidConfig(..))`.
    pub fn for_bits_per_entry(bits_per_entry: f64) -> Result<BloomParams> {
        if !(BITS_PER_ENTRY_MIN..=BITS_PER_ENTRY_MAX).contains(&bits_per_entry) {
            return Err(Error::InvalidConfig(format!(
                "bloom filter bits per entry {bits_per_entry} is outside \
                 {BITS_PER_ENTRY_MIN} ..= {BITS_PER_ENTRY_MAX}"
            )));
        }
        let (hashes, _) = best_hashes(bits_per_entry);
        Ok(BloomParams {
            bits_per_entry,
            hashes,
        })
    }

    /// Predicted false-positive rate of a blocked filter with these parameters (Putze, Sanders,
    /// Singler): the keys in a block are ~Poisson(512 / bits_per_entry), and a block holding `i`
    /// keys answers a foreign probe positively with probability
    /// `(1 - (1 - 1/512)^(k i))^k`. Degenerate parameters give the limit: 1.0 for `hashes == 0`
    /// or `bits_per_entry` that is NaN or <= 0, 0.0 for `bits_per_entry == +inf`.
    pub fn predicted_fpr(&self) -> f64 {
        if self.hashes == 0 || self.bits_per_entry.is_nan() || self.bits_per_entry <= 0.0 {
            return 1.0;
        }
        blocked_fpr(&PoissonWeights::new(self.bits_per_entry), self.hashes)
    }
}

/// The best `k` in 1 ..= 32 for `bits_per_entry` (the smallest on ties) and its predicted FPR.
fn best_hashes(bits_per_entry: f64) -> (u32, f64) {
    let weights = PoissonWeights::new(bits_per_entry);
    let mut best = (1, blocked_fpr(&weights, 1));
    for hashes in 2..=SEARCH_HASHES_MAX {
        let fpr = blocked_fpr(&weights, hashes);
        if fpr < best.1 {
            best = (hashes, fpr);
        }
    }
    best
}

/// The Poisson distribution of the number of keys in one block, truncated to the indices whose
/// mass is not negligible (`mean ± (12 sqrt(mean) + 50)`).
struct PoissonWeights {
    /// The index of `weights[0]`.
    first: u64,
    /// `P(i = first + j)` for each `j`.
    weights: Vec<f64>,
}

impl PoissonWeights {
    /// The weights for a filter with `bits_per_entry` bits per entry (> 0, not NaN).
    fn new(bits_per_entry: f64) -> PoissonWeights {
        let mean = BLOCK_BITS as f64 / bits_per_entry;
        if mean == 0.0 || !mean.is_finite() {
            // Infinitely many bits per entry: every block is empty. (A non-finite mean cannot
            // be reached from a positive bits_per_entry, but stay total.)
            return PoissonWeights {
                first: 0,
                weights: vec![1.0],
            };
        }
        let spread = 12.0 * mean.sqrt() + 50.0;
        let first = (mean - spread).max(0.0).floor();
        let last = (mean + spread).ceil();
        let ln_mean = mean.ln();
        // Start from the log of the first weight (never underflows: it is at least about
        // e^-(mean + 50) for first == 0 with mean < ~250, and about e^-80 otherwise), then walk
        // upwards multiplicatively.
        let mut weight = (-mean + first * ln_mean - ln_factorial(first)).exp();
        let mut weights = Vec::with_capacity((last - first) as usize + 1);
        let mut i = first;
        while i <= last {
            weights.push(weight);
            i += 1.0;
            weight *= mean / i;
        }
        PoissonWeights {
            first: first as u64,
            weights,
        }
    }
}

/// `ln(n!)` for a non-negative integral `n` (exact sum below 32, Stirling's series above).
fn ln_factorial(n: f64) -> f64 {
    if n < 32.0 {
        let mut sum = 0.0;
        let mut j = 2.0;
        while j <= n {
            sum += f64::ln(j);
            j += 1.0;
        }
        sum
    } else {
        let inv = 1.0 / n;
        let inv2 = inv * inv;
        n * n.ln() - n
            + 0.5 * (2.0 * std::f64::consts::PI * n).ln()
            + inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 / 1260.0))
    }
}

/// The predicted FPR of a blocked filter whose per-block key counts follow `weights`, with
/// `hashes` (>= 1) bits per key.
fn blocked_fpr(weights: &PoissonWeights, hashes: u32) -> f64 {
    let k = hashes as i32;
    // q = probability that one given bit stays clear after one bit-set.
    let q_k = (1.0 - 1.0 / BLOCK_BITS as f64).powi(k);
    // clear = q_k^i, the probability that a given bit of a block holding i keys is clear.
    let mut clear = q_k.powf(weights.first as f64);
    let mut sum = 0.0;
    for &w in &weights.weights {
        sum += w * (1.0 - clear).powi(k);
        clear *= q_k;
    }
    sum.clamp(0.0, 1.0)
}

/// One block: 512 bits in eight 64-bit words, aligned to (and the size of) one cache line.
/// Bit `p` (0 ..= 511) of a block is bit `p % 64` of word `p / 64`.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Block(pub(crate) [u64; 8]);

const _: () = assert!(std::mem::size_of::<Block>() == BLOCK_BYTES);
const _: () = assert!(std::mem::align_of::<Block>() == BLOCK_BYTES);

/// The seed of the bit-position generator: the high half is folded into the low half so that the
/// multiplication spreads all 64 hash bits into the high bits the generator's outputs come from.
#[inline(always)]
fn bit_seed(hash: u64) -> u64 {
    (hash ^ (hash >> 32)).wrapping_mul(SEED_MUL)
}

/// One step of the bit-position generator; the position is the top 9 bits of the new state.
#[inline(always)]
fn bit_step(state: u64) -> (u64, usize) {
    let next = state.wrapping_mul(STEP_MUL).wrapping_add(STEP_INC);
    (next, (next >> 55) as usize)
}

/// Hints the CPU to bring `block` into the cache (x86_64 `prefetcht0`; a no-op on other
/// targets).
#[inline(always)]
fn prefetch_block(block: &Block) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching has no architectural effect (it cannot fault), and `block` is a valid
    // reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (block as *const Block).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = block;
}

/// The block a hash maps to among `block_count` (1 ..= [`BLOCK_COUNT_MAX`]) blocks.
#[inline(always)]
fn block_of(hash: u64, block_count: u64) -> u64 {
    ((hash >> 32) * block_count) >> 32
}

/// `blocks` rounded up to a multiple of the largest power of two `g` with `64 * g <= blocks` (a
/// block count of 64 to 127 times `g`; at most 1/64 more): such a count has every power of two
/// up to `g` among its divisors, so a filter sized for a bound it did not reach folds to within
/// twice the blocks its entries need ([`BloomBuilder::finish_fitted`]), down to 64 blocks.
fn foldable(blocks: u64) -> u64 {
    if blocks < 128 {
        return blocks;
    }
    let g = 1u64 << (63 - (blocks / 64).leading_zeros());
    blocks.div_ceil(g).saturating_mul(g)
}

/// Builds a filter for at most `entries_max` keys (the filter is sized for that bound; for a merge
/// output the bound is the sum of the input sizes).
pub struct BloomBuilder {
    blocks: Vec<Block>,
    hashes: u32,
    salt: u64,
    entries: u64,
    /// Built from [`BloomParams::NONE`]: keys are counted, not hashed, and the one block is
    /// filled at the end.
    pass_all: bool,
    /// The hashes of the last [`INSERT_DELAY`] keys (slot `i % INSERT_DELAY` holds the `i`-th),
    /// whose blocks are prefetched but not yet set: a key's bits are set when the key
    /// [`INSERT_DELAY`] places after it arrives (or at [`BloomBuilder::finish`]), so that the
    /// cache miss of a block in a large filter overlaps the work of the keys in between.
    delayed: [u64; INSERT_DELAY],
    /// Bits per entry the filter was sized with (for [`BloomBuilder::finish_fitted`]).
    bits_per_entry: f64,
}

/// How many keys a [`BloomBuilder`] inserts late, each after prefetching its block.
const INSERT_DELAY: usize = 16;

impl BloomBuilder {
    /// A builder for a filter of `max(1, ceil(entries_max * bits_per_entry / 512))` blocks
    /// (clamped to [`BLOCK_COUNT_MAX`]; a NaN or non-positive `bits_per_entry` gives one block)
    /// setting `params.hashes` bits per key (clamped to 1 ..= [`HASHES_MAX`]). The blocks are
    /// allocated (zeroed) here: `block_count * 64` bytes. `salt` must be the salt the keys were
    /// hashed with ([`key_hash`]); it is recorded in the filter. [`BloomParams::NONE`] gives a
    /// one-block filter that answers "maybe" for every key.
    pub fn new(params: BloomParams, entries_max: u64, salt: u64) -> BloomBuilder {
        let bits = (entries_max as f64 * params.bits_per_entry / BLOCK_BITS as f64).ceil();
        // `as` saturates (NaN becomes 0), so this is total.
        let block_count = foldable(bits as u64).clamp(1, BLOCK_COUNT_MAX);
        let block_count = usize::try_from(block_count).unwrap_or(usize::MAX / BLOCK_BYTES);
        BloomBuilder {
            blocks: vec![Block::default(); block_count],
            hashes: params.hashes.clamp(1, HASHES_MAX),
            salt,
            entries: 0,
            pass_all: params.is_none(),
            delayed: [0; INSERT_DELAY],
            bits_per_entry: params.bits_per_entry,
        }
    }

    /// Adds a key, hashing it with the builder's salt unless the filter passes every key
    /// ([`BloomParams::NONE`]), which skips the hash.
    #[inline]
    pub fn insert_key(&mut self, key: &[u8]) {
        let hash = if self.pass_all {
            0 // counted only
        } else {
            key_hash(self.salt, key)
        };
        self.insert_hash(hash);
    }

    /// Adds a key by its hash ([`key_hash`] with this builder's salt). Inserting more keys than
    /// `entries_max` is allowed; the false-positive rate then rises above the prediction.
    ///
    /// Cost: a prefetch of the key's block, and the bits of the key [`INSERT_DELAY`] places
    /// earlier set (its block prefetched that long ago): `k` multiply-adds and one cache line.
    #[inline]
    pub fn insert_hash(&mut self, hash: u64) {
        if self.pass_all {
            self.entries = self.entries.saturating_add(1);
            return;
        }
        let slot = (self.entries % INSERT_DELAY as u64) as usize;
        if self.entries >= INSERT_DELAY as u64 {
            self.set_bits(self.delayed[slot]);
        }
        self.delayed[slot] = hash;
        self.prefetch_block(hash);
        self.entries = self.entries.saturating_add(1);
    }

    /// Sets the bits of `hash` in its block.
    #[inline(always)]
    fn set_bits(&mut self, hash: u64) {
        let index = block_of(hash, self.blocks.len() as u64) as usize;
        let block = &mut self.blocks[index];
        let mut state = bit_seed(hash);
        for _ in 0..self.hashes {
            let (next, bit) = bit_step(state);
            state = next;
            block.0[bit >> 6] |= 1 << (bit & 63);
        }
    }

    /// Asks the CPU to bring `hash`'s block into the cache.
    #[inline(always)]
    fn prefetch_block(&self, hash: u64) {
        prefetch_block(&self.blocks[block_of(hash, self.blocks.len() as u64) as usize]);
    }

    /// The filter built so far, folded to the size its entries need when it was sized for at
    /// least twice as many ([`BloomFilter::fold`]): a run cut short (a merge's output cut at a
    /// checkpoint) or one whose entries cancelled out gets the filter, memory and
    /// false-positive rate of a run built for the entries it holds, give or take the factor's
    /// rounding. Cost: one pass over the blocks when it folds.
    pub fn finish_fitted(self) -> BloomFilter {
        let needed = (self.entries as f64 * self.bits_per_entry / BLOCK_BITS as f64).ceil();
        let needed = (needed as u64).max(1);
        let filter = self.finish();
        let count = filter.blocks.len() as u64;
        if filter.entries == 0 || count < 2 * needed {
            return filter;
        }
        // The largest factor dividing the block count that keeps at least `needed` blocks.
        let factor = (2..=count / needed)
            .rev()
            .find(|&f| count.is_multiple_of(f));
        match factor {
            Some(factor) => filter.fold(factor),
            None => filter,
        }
    }

    /// The filter built so far (the keys still delayed are set first).
    pub fn finish(mut self) -> BloomFilter {
        if self.pass_all {
            for block in &mut self.blocks {
                block.0 = [u64::MAX; BLOCK_BITS / 64];
            }
        } else {
            let delayed = self.entries.min(INSERT_DELAY as u64) as usize;
            for slot in 0..delayed {
                self.set_bits(self.delayed[slot]);
            }
        }
        BloomFilter {
            blocks: self.blocks,
            hashes: self.hashes,
            salt: self.salt,
            entries: self.entries,
        }
    }
}

impl std::fmt::Debug for BloomBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomBuilder")
            .field("block_count", &self.blocks.len())
            .field("hashes", &self.hashes)
            .field("salt", &format_args!("{:#018x}", self.salt))
            .field("entries", &self.entries)
            .finish()
    }
}

/// An immutable filter held in memory. `Send + Sync`: probe it from any number of threads.
#[derive(Clone, PartialEq, Eq)]
pub struct BloomFilter {
    /// At least one, at most [`BLOCK_COUNT_MAX`].
    blocks: Vec<Block>,
    /// 1 ..= [`HASHES_MAX`].
    hashes: u32,
    salt: u64,
    entries: u64,
}

impl BloomFilter {
    /// The filter of `block_count / factor` blocks holding the same keys, exactly as if it had
    /// been built with that many (`factor` must divide the block count): a key's block among
    /// `n / f` blocks is its block among `n` divided by `f` (`block_of` scales the hash's high
    /// half, so `floor(floor(x * f) / f) = floor(x)`), and its bits within the block depend on
    /// the hash alone, so block `j` of the result is the OR of blocks `j * f .. (j + 1) * f`.
    /// O(blocks).
    fn fold(self, factor: u64) -> BloomFilter {
        let factor = factor as usize;
        debug_assert!(factor >= 1 && self.blocks.len().is_multiple_of(factor));
        let blocks = self
            .blocks
            .chunks_exact(factor)
            .map(|group| {
                let mut block = Block::default();
                for b in group {
                    for (word, w) in block.0.iter_mut().zip(b.0) {
                        *word |= w;
                    }
                }
                block
            })
            .collect();
        BloomFilter { blocks, ..self }
    }

    /// True if the key with this hash may be in the filter; false if it certainly is not.
    /// Touches exactly one block (one cache line).
    #[inline]
    pub fn contains_hash(&self, hash: u64) -> bool {
        let block = &self.blocks[self.block_index(hash) as usize];
        let mut state = bit_seed(hash);
        for _ in 0..self.hashes {
            let (next, bit) = bit_step(state);
            state = next;
            if block.0[bit >> 6] & (1 << (bit & 63)) == 0 {
                return false;
            }
        }
        true
    }

    /// Whether the filter answers "maybe" for every key: one block with every bit set, as
    /// [`BloomParams::NONE`] builds it (a tiny filter saturated by its keys counts too). O(1).
    #[inline]
    pub fn passes_all(&self) -> bool {
        matches!(&self.blocks[..], [only] if only.0 == [u64::MAX; BLOCK_BITS / 64])
    }

    /// The index of the only block a probe (or insertion) of `hash` touches.
    #[inline(always)]
    pub(crate) fn block_index(&self, hash: u64) -> u64 {
        block_of(hash, self.blocks.len() as u64)
    }

    /// Hints the CPU to bring the block of `hash` into cache (x86_64 `prefetcht0`; a no-op on
    /// other targets). Call it for every hash of a batch before probing any of them.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        prefetch_block(&self.blocks[self.block_index(hash) as usize]);
    }

    /// The salt the keys were hashed with.
    pub fn salt(&self) -> u64 {
        self.salt
    }

    /// Bit positions set (and tested) per key, `k` (1 ..= [`HASHES_MAX`]).
    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// Number of 512-bit blocks (1 ..= [`BLOCK_COUNT_MAX`]).
    pub fn block_count(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Keys inserted (calls to [`BloomBuilder::insert_hash`], duplicates included).
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Bytes of memory held (the blocks plus this struct).
    pub fn size_bytes(&self) -> usize {
        self.blocks.len() * BLOCK_BYTES + std::mem::size_of::<Self>()
    }

    /// Length of the encoding: [`HEADER_LEN`] + 64 bytes per block.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.blocks.len() * BLOCK_BYTES
    }

    /// The encoded header (see `docs/format/bloom.md`).
    fn header(&self) -> [u8; HEADER_LEN] {
        let mut header = [0u8; HEADER_LEN];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&self.hashes.to_le_bytes());
        header[16..24].copy_from_slice(&(self.blocks.len() as u64).to_le_bytes());
        header[24..32].copy_from_slice(&self.salt.to_le_bytes());
        header[32..40].copy_from_slice(&self.entries.to_le_bytes());
        header
    }

    /// Streams the encoding through `sink` in chunks of at most 64 KiB (so a 200 MB filter is
    /// never copied whole). Stops at, and returns, the first error of the sink.
    pub fn write_to(&self, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let mut buffer = Vec::with_capacity(WRITE_CHUNK_MAX.min(self.encoded_len()));
        buffer.extend_from_slice(&self.header());
        for block in &self.blocks {
            if buffer.len() + BLOCK_BYTES > WRITE_CHUNK_MAX {
                sink(&buffer)?;
                buffer.clear();
            }
            for word in &block.0 {
                buffer.extend_from_slice(&word.to_le_bytes());
            }
        }
        sink(&buffer)
    }

    /// The whole encoding in one buffer (the same bytes as [`BloomFilter::write_to`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&self.header());
        for block in &self.blocks {
            for word in &block.0 {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        out
    }

    /// Total decoder. Checks the magic, the version, that `hashes` is in 1 ..= 64, that the block
    /// count is in 1 ..= [`BLOCK_COUNT_MAX`] and that the body length matches it exactly. Any
    /// other input gives `Err` (`Error::Corrupt`, or `Error::UnsupportedVersion`), never a panic;
    /// nothing is allocated before the length check.
    pub fn decode(bytes: &[u8]) -> Result<BloomFilter> {
        let Some((header, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "{} bytes is shorter than the {HEADER_LEN}-byte header",
                    bytes.len()
                ),
            ));
        };
        let shape = Shape::parse(header, body.len() as u64)?;
        let blocks = body
            .chunks_exact(BLOCK_BYTES)
            .map(|chunk| {
                let mut block = Block::default();
                for (word, bytes) in block.0.iter_mut().zip(chunk.chunks_exact(8)) {
                    let mut le = [0u8; 8];
                    le.copy_from_slice(bytes);
                    *word = u64::from_le_bytes(le);
                }
                block
            })
            .collect();
        Ok(shape.with_blocks(blocks))
    }
}

/// The salt in a filter's `header`, checked as [`BloomFilter::decode`] checks it, for a filter
/// file of `file_len` bytes: what `repair` reads of a filter without reading its blocks.
///
/// Errors: as [`BloomFilter::decode`].
pub(crate) fn header_salt(header: &[u8; HEADER_LEN], file_len: u64) -> Result<u64> {
    Shape::parse(header, file_len.saturating_sub(HEADER_LEN as u64)).map(|s| s.salt)
}

/// A filter's header fields, checked.
struct Shape {
    hashes: u32,
    block_count: u64,
    salt: u64,
    entries: u64,
}

impl Shape {
    /// Checks `header` (the magic, the version, the hash count and the block count) and that a
    /// body of `body_len` bytes holds exactly that many blocks.
    fn parse(header: &[u8; HEADER_LEN], body_len: u64) -> Result<Shape> {
        let u32_at = |at: usize| {
            u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&header[at..at + 8]);
            u64::from_le_bytes(word)
        };
        if header[0..8] != MAGIC {
            return Err(Error::corrupt(
                WHAT,
                format!("bad magic {:02x?}", &header[0..8]),
            ));
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                what: WHAT,
                found: version,
                supported: VERSION,
            });
        }
        let hashes = u32_at(12);
        if !(1..=HASHES_MAX).contains(&hashes) {
            return Err(Error::corrupt(
                WHAT,
                format!("hash count {hashes} is outside 1 ..= {HASHES_MAX}"),
            ));
        }
        let block_count = u64_at(16);
        if !(1..=BLOCK_COUNT_MAX).contains(&block_count) {
            return Err(Error::corrupt(
                WHAT,
                format!("block count {block_count} is outside 1 ..= {BLOCK_COUNT_MAX}"),
            ));
        }
        if block_count.checked_mul(BLOCK_BYTES as u64) != Some(body_len) {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "body of {body_len} bytes does not match {block_count} blocks of \
                     {BLOCK_BYTES} bytes"
                ),
            ));
        }
        Ok(Shape {
            hashes,
            block_count,
            salt: u64_at(24),
            entries: u64_at(32),
        })
    }

    fn with_blocks(self, blocks: Vec<Block>) -> BloomFilter {
        BloomFilter {
            blocks,
            hashes: self.hashes,
            salt: self.salt,
            entries: self.entries,
        }
    }
}

impl BloomFilter {
    /// Reads and decodes the filter file `file` straight into the filter's blocks, and returns
    /// it with the CRC32C of the file's bytes: the checks of [`BloomFilter::decode`] (the
    /// header's, before anything is allocated from it), with one copy of the body (from the
    /// kernel into the blocks) instead of three. For opening runs, whose filters are most of
    /// what an open reads (170 MiB at 100M entries). Cost: two reads.
    pub(crate) fn read_file(file: &dyn crate::fs::ReadableFile) -> Result<(BloomFilter, u32)> {
        let len = file.len_bytes()?;
        if len < HEADER_LEN as u64 {
            let mut bytes = vec![0u8; len as usize];
            file.read_exact_at(&mut bytes, 0)?;
            return BloomFilter::decode(&bytes).map(|f| (f, crc32c::crc32c(&bytes)));
        }
        let mut header = [0u8; HEADER_LEN];
        file.read_exact_at(&mut header, 0)?;
        let shape = Shape::parse(&header, len - HEADER_LEN as u64)?;
        let mut blocks = vec![Block::default(); shape.block_count as usize];
        // SAFETY: `Block` is `repr(C)` eight `u64`s with no padding (size checked at compile
        // time), so its memory is `block_count * BLOCK_BYTES` initialised bytes, and any bytes
        // written there are valid `u64`s. The byte slice borrows `blocks` mutably and is gone
        // before `blocks` is used again.
        let body = unsafe {
            std::slice::from_raw_parts_mut(
                blocks.as_mut_ptr().cast::<u8>(),
                blocks.len() * BLOCK_BYTES,
            )
        };
        file.read_exact_at(body, HEADER_LEN as u64)?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header), body);
        // The file's words are little-endian.
        if cfg!(target_endian = "big") {
            for word in blocks.iter_mut().flat_map(|b| b.0.iter_mut()) {
                *word = u64::from_le(*word);
            }
        }
        Ok((shape.with_blocks(blocks), crc))
    }
}

impl std::fmt::Debug for BloomFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomFilter")
            .field("block_count", &self.blocks.len())
            .field("hashes", &self.hashes)
            .field("salt", &format_args!("{:#018x}", self.salt))
            .field("entries", &self.entries)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A deterministic pseudo-random 34-byte key for counter `n`.
    fn test_key(n: u64) -> [u8; 34] {
        let mut key = [0u8; 34];
        for (i, chunk) in key.chunks_mut(8).enumerate() {
            let word = xxhash_rust::xxh3::xxh3_64_with_seed(&n.to_le_bytes(), i as u64);
            chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        }
        key
    }

    /// Builds a filter over keys `0..entries` and measures its FPR over `probes` absent keys.
    fn measure_fpr(params: BloomParams, entries: u64, probes: u64, salt: u64) -> f64 {
        let mut builder = BloomBuilder::new(params, entries, salt);
        for n in 0..entries {
            builder.insert_hash(key_hash(salt, &test_key(n)));
        }
        let filter = builder.finish();
        let base = 1 << 40;
        let false_positives = (base..base + probes)
            .filter(|&n| filter.contains_hash(key_hash(salt, &test_key(n))))
            .count();
        false_positives as f64 / probes as f64
    }

    fn small_filter(salt: u64, entries: u64, bits_per_entry: f64) -> BloomFilter {
        let params = BloomParams::for_bits_per_entry(bits_per_entry).unwrap();
        let mut builder = BloomBuilder::new(params, entries, salt);
        for n in 0..entries {
            builder.insert_hash(key_hash(salt, &test_key(n)));
        }
        builder.finish()
    }

    /// Setting a key's bits [`INSERT_DELAY`] keys late (and the last ones at `finish`) builds
    /// exactly the blocks that setting them at once would, for counts around the delay.
    #[test]
    fn a_fitted_filter_is_the_filter_built_for_its_entries() {
        let params = BloomParams::for_bits_per_entry(10.0).unwrap();
        for (bound, entries) in [
            (100_000u64, 1_000u64),
            (64_000, 3_000),
            (1_000, 999),
            (5, 0),
        ] {
            let mut big = BloomBuilder::new(params, bound, 7);
            for i in 0..entries {
                big.insert_key(&i.to_le_bytes());
            }
            let fitted = big.finish_fitted();
            let count = fitted.blocks.len() as u64;
            // Same blocks as a builder made for that many blocks from the start.
            let mut exact = BloomBuilder::new(params, 1, 7);
            exact.blocks = vec![Block::default(); count as usize];
            for i in 0..entries {
                exact.insert_key(&i.to_le_bytes());
            }
            assert!(fitted == exact.finish(), "bound {bound}, {entries} entries");
            let needed = (entries * 10).div_ceil(BLOCK_BITS as u64).max(1);
            assert!(
                count >= needed && (count < 2 * needed || count < 128),
                "{count} {needed}"
            );
            for i in 0..entries {
                assert!(fitted.contains_hash(key_hash(7, &i.to_le_bytes())));
            }
        }
    }

    #[test]
    fn delayed_inserts_build_the_same_blocks() {
        let salt = 7;
        let params = BloomParams::for_bits_per_entry(10.0).unwrap();
        for n in [0u64, 1, 15, 16, 17, 31, 32, 33, 1_000] {
            let mut builder = BloomBuilder::new(params, n, salt);
            let mut want = vec![Block::default(); builder.blocks.len()];
            for i in 0..n {
                let hash = key_hash(salt, &test_key(i));
                builder.insert_hash(hash);
                let index = block_of(hash, want.len() as u64) as usize;
                let block = &mut want[index];
                let mut state = bit_seed(hash);
                for _ in 0..params.hashes {
                    let (next, bit) = bit_step(state);
                    state = next;
                    block.0[bit >> 6] |= 1 << (bit & 63);
                }
            }
            let filter = builder.finish();
            assert_eq!(filter.entries(), n);
            assert!(filter.blocks == want, "{n} keys");
        }
    }

    /// `BloomParams::NONE` builds one block that answers "maybe" for every key, however many
    /// keys were added, and is an ordinary filter on disk.
    #[test]
    fn the_none_filter_passes_every_key_in_one_block() {
        let salt = 99;
        for entries in [0u64, 1, 1_000, 100_000] {
            let mut builder = BloomBuilder::new(BloomParams::NONE, entries, salt);
            for n in 0..entries {
                builder.insert_key(&test_key(n));
            }
            let filter = builder.finish();
            assert_eq!(filter.block_count(), 1);
            assert!(filter.passes_all());
            assert_eq!(filter.entries(), entries);
            for n in 0..2_000 {
                assert!(filter.contains_hash(key_hash(salt, &test_key(n << 20))));
            }
            let back = BloomFilter::decode(&filter.encode()).unwrap();
            assert!(back == filter);
        }
        assert!(BloomParams::NONE.is_none());
        assert_eq!(BloomParams::NONE.predicted_fpr(), 1.0);
        assert!(!BloomParams::for_fpr(1e-3).unwrap().is_none());
        // `insert_key` is `insert_hash` of the salted hash for an ordinary filter.
        let params = BloomParams::for_bits_per_entry(10.0).unwrap();
        let (mut by_key, mut by_hash) = (
            BloomBuilder::new(params, 500, salt),
            BloomBuilder::new(params, 500, salt),
        );
        for n in 0..500 {
            by_key.insert_key(&test_key(n));
            by_hash.insert_hash(key_hash(salt, &test_key(n)));
        }
        let filter = by_key.finish();
        assert!(!filter.passes_all());
        assert!(filter == by_hash.finish());
    }

    #[test]
    fn false_positive_rate_matches_target() {
        for target in [1e-2, 1e-3] {
            let params = BloomParams::for_fpr(target).unwrap();
            let measured = measure_fpr(params, 200_000, 2_000_000, 0xC0FF_EE00_1234_5678);
            assert!(
                (target / 1.5..=target * 1.5).contains(&measured),
                "target {target}: params {params:?} measured {measured}"
            );
        }
    }

    #[test]
    fn false_positive_rate_matches_prediction_at_10_bits() {
        let params = BloomParams::for_bits_per_entry(10.0).unwrap();
        let predicted = params.predicted_fpr();
        let measured = measure_fpr(params, 200_000, 1_000_000, 42);
        assert!(
            (predicted / 1.5..=predicted * 1.5).contains(&measured),
            "params {params:?} predicted {predicted} measured {measured}"
        );
    }

    #[test]
    fn fpr_search_agrees_with_a_linear_scan() {
        let steps = ((BITS_PER_ENTRY_MAX - BITS_PER_ENTRY_MIN) * 20.0).round() as u32;
        for i in 0..60 {
            let target = 10f64.powf(-0.3 - f64::from(i) * 0.15);
            let linear = (0..=steps).find_map(|step| {
                let bits = f64::from(20 + step) / 20.0;
                let (hashes, predicted) = best_hashes(bits);
                (predicted <= target).then_some(BloomParams {
                    bits_per_entry: bits,
                    hashes,
                })
            });
            match (linear, BloomParams::search_fpr(target)) {
                (Some(want), Ok(got)) => assert_eq!(got, want, "{target}"),
                (None, Err(_)) => {}
                (want, got) => panic!("{target}: {want:?} vs {got:?}"),
            }
        }
    }

    #[test]
    fn for_fpr_picks_the_smallest_grid_point() {
        for target in [0.5, 0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6] {
            let params = BloomParams::for_fpr(target).unwrap();
            assert!(params.predicted_fpr() <= target, "{target}: {params:?}");
            assert!((1..=SEARCH_HASHES_MAX).contains(&params.hashes));
            if params.bits_per_entry > 1.0 {
                let (_, below) = best_hashes(params.bits_per_entry - 0.05);
                assert!(
                    below > target,
                    "{target}: {params:?} but {below} one step below"
                );
            }
            // The best k of for_bits_per_entry agrees.
            assert_eq!(
                BloomParams::for_bits_per_entry(params.bits_per_entry).unwrap(),
                params
            );
        }
    }

    #[test]
    fn predicted_fpr_is_sane() {
        // A blocked filter is a little worse than a standard one (0.82% at 10 bits, k = 7).
        let p = BloomParams::for_bits_per_entry(10.0).unwrap();
        let fpr = p.predicted_fpr();
        assert!((0.0082..0.0120).contains(&fpr), "{p:?}: {fpr}");
        // Monotone in bits per entry.
        let mut last = 1.0;
        for tenth in 10..=640 {
            let fpr = BloomParams::for_bits_per_entry(f64::from(tenth) / 10.0)
                .unwrap()
                .predicted_fpr();
            assert!(fpr <= last, "{tenth}");
            last = fpr;
        }
        // Degenerate inputs are total.
        for bits_per_entry in [f64::NAN, -1.0, 0.0, 1e-9, 0.5, f64::INFINITY, 1e300] {
            for hashes in [0, 1, 7, 64, u32::MAX] {
                let fpr = BloomParams {
                    bits_per_entry,
                    hashes,
                }
                .predicted_fpr();
                assert!(
                    (0.0..=1.0).contains(&fpr),
                    "{bits_per_entry} {hashes}: {fpr}"
                );
            }
        }
    }

    #[test]
    fn invalid_params_are_rejected() {
        for fpr in [f64::NAN, 0.0, -0.1, 1.0, 1.5, 0.51, 9e-7, f64::INFINITY] {
            assert!(
                matches!(BloomParams::for_fpr(fpr), Err(Error::InvalidConfig(_))),
                "{fpr}"
            );
        }
        for bits in [
            f64::NAN,
            0.0,
            -1.0,
            0.99,
            64.01,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert!(
                matches!(
                    BloomParams::for_bits_per_entry(bits),
                    Err(Error::InvalidConfig(_))
                ),
                "{bits}"
            );
        }
        assert!(BloomParams::for_fpr(1e-6).is_ok());
        assert!(BloomParams::for_fpr(0.5).is_ok());
        assert!(BloomParams::for_bits_per_entry(1.0).is_ok());
        assert!(BloomParams::for_bits_per_entry(64.0).is_ok());
    }

    #[test]
    fn builder_sizing() {
        let params = BloomParams::for_bits_per_entry(10.0).unwrap();
        assert_eq!(BloomBuilder::new(params, 0, 0).finish().block_count(), 1);
        assert_eq!(BloomBuilder::new(params, 51, 0).finish().block_count(), 1);
        assert_eq!(BloomBuilder::new(params, 52, 0).finish().block_count(), 2);
        assert_eq!(BloomBuilder::new(params, 100, 0).finish().block_count(), 2);
        assert_eq!(
            BloomBuilder::new(params, 1000, 0).finish().block_count(),
            20
        );
        // Degenerate params are clamped, not a panic.
        let weird = BloomParams {
            bits_per_entry: f64::NAN,
            hashes: 0,
        };
        let filter = BloomBuilder::new(weird, 1 << 40, 0).finish();
        assert_eq!((filter.block_count(), filter.hashes()), (1, 1));
        let weird = BloomParams {
            bits_per_entry: -3.0,
            hashes: 1000,
        };
        let filter = BloomBuilder::new(weird, 10, 0).finish();
        assert_eq!((filter.block_count(), filter.hashes()), (1, HASHES_MAX));
        let filter = small_filter(7, 1000, 10.0);
        assert_eq!(filter.entries(), 1000);
        assert_eq!(filter.salt(), 7);
        assert_eq!(
            filter.size_bytes(),
            20 * 64 + std::mem::size_of::<BloomFilter>()
        );
        assert_eq!(filter.encoded_len(), HEADER_LEN + 20 * 64);
    }

    #[test]
    fn block_choice_is_multiply_high_of_the_high_half() {
        let filter = small_filter(1, 1000, 10.0);
        let n = filter.block_count();
        for h in [
            0u64,
            1,
            u64::MAX,
            0xFFFF_FFFF,
            0x1_0000_0000,
            0x8000_0000_0000_0000,
        ] {
            assert_eq!(filter.block_index(h), ((h >> 32) * n) >> 32);
            assert!(filter.block_index(h) < n);
        }
        assert_eq!(block_of(u64::MAX, BLOCK_COUNT_MAX), BLOCK_COUNT_MAX - 1);
    }

    #[test]
    fn a_probe_reads_only_its_block() {
        let filter = small_filter(3, 2000, 8.0);
        let mut rng = 0x1234_5678_u64;
        for _ in 0..2000 {
            rng = rng.wrapping_mul(STEP_MUL).wrapping_add(STEP_INC);
            let hash = xxhash_rust::xxh3::xxh3_64(&rng.to_le_bytes());
            let index = filter.block_index(hash) as usize;
            let expected = filter.contains_hash(hash);
            // Every other block all ones, then all zeros: the answer must not change.
            for fill in [u64::MAX, 0] {
                let mut other = filter.clone();
                for (i, block) in other.blocks.iter_mut().enumerate() {
                    if i != index {
                        block.0 = [fill; 8];
                    }
                }
                assert_eq!(other.contains_hash(hash), expected);
            }
            // And an insertion sets bits in that block only.
            let mut builder =
                BloomBuilder::new(BloomParams::for_bits_per_entry(8.0).unwrap(), 2000, 3);
            builder.insert_hash(hash);
            let single = builder.finish();
            for (i, block) in single.blocks.iter().enumerate() {
                assert_eq!(block.0 != [0; 8], i == index);
            }
            assert!(single.contains_hash(hash));
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let filter = small_filter(0xDEAD_BEEF, 5000, 10.0);
        let bytes = filter.encode();
        assert_eq!(bytes.len(), filter.encoded_len());
        let decoded = BloomFilter::decode(&bytes).unwrap();
        assert_eq!(decoded, filter);
        assert_eq!(
            (
                decoded.salt(),
                decoded.hashes(),
                decoded.block_count(),
                decoded.entries()
            ),
            (
                filter.salt(),
                filter.hashes(),
                filter.block_count(),
                filter.entries()
            )
        );
        for n in 0..100_000u64 {
            let hash = key_hash(0xDEAD_BEEF, &test_key(n));
            assert_eq!(decoded.contains_hash(hash), filter.contains_hash(hash));
            if n < 5000 {
                assert!(decoded.contains_hash(hash));
            }
        }
        let mut streamed = Vec::new();
        filter
            .write_to(&mut |chunk| {
                streamed.extend_from_slice(chunk);
                Ok(())
            })
            .unwrap();
        assert_eq!(streamed, bytes);
    }

    #[test]
    fn write_to_streams_in_bounded_chunks() {
        // 3000 blocks, rounded up to 3008 (a multiple of 32: `foldable`): 192 512 bytes of
        // body, so several chunks.
        let filter = small_filter(9, 3000 * 512 / 10, 10.0);
        assert_eq!(filter.block_count(), 3008);
        let mut streamed = Vec::new();
        let mut chunks = 0;
        filter
            .write_to(&mut |chunk| {
                assert!(!chunk.is_empty() && chunk.len() <= 64 * 1024);
                chunks += 1;
                streamed.extend_from_slice(chunk);
                Ok(())
            })
            .unwrap();
        assert_eq!(chunks, 3);
        assert_eq!(streamed, filter.encode());
        // The first sink error stops the stream and is returned.
        let mut calls = 0;
        let result = filter.write_to(&mut |_| {
            calls += 1;
            Err(Error::InvalidConfig("sink full".into()))
        });
        assert!(matches!(result, Err(Error::InvalidConfig(_))));
        assert_eq!(calls, 1);
    }

    #[test]
    fn decode_rejects_bad_headers() {
        let good = small_filter(5, 100, 10.0).encode();
        let with = |at: usize, bytes: &[u8]| {
            let mut copy = good.clone();
            copy[at..at + bytes.len()].copy_from_slice(bytes);
            BloomFilter::decode(&copy)
        };
        assert!(matches!(with(0, b"CRNBLOOX"), Err(Error::Corrupt { .. })));
        assert!(matches!(
            with(8, &2u32.to_le_bytes()),
            Err(Error::UnsupportedVersion {
                found: 2,
                supported: 1,
                ..
            })
        ));
        assert!(matches!(
            with(12, &0u32.to_le_bytes()),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            with(12, &65u32.to_le_bytes()),
            Err(Error::Corrupt { .. })
        ));
        assert!(with(12, &64u32.to_le_bytes()).is_ok());
        assert!(matches!(
            with(16, &0u64.to_le_bytes()),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            with(16, &3u64.to_le_bytes()),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            with(16, &(1u64 << 58).to_le_bytes()),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            with(16, &u64::MAX.to_le_bytes()),
            Err(Error::Corrupt { .. })
        ));
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(
            BloomFilter::decode(&longer),
            Err(Error::Corrupt { .. })
        ));
    }

    /// Decodes `bytes`; if that succeeds, probes and prefetches a spread of hashes.
    fn decode_and_use(bytes: &[u8]) {
        if let Ok(filter) = BloomFilter::decode(bytes) {
            let mut hash = 0x0123_4567_89AB_CDEF_u64;
            for _ in 0..64 {
                hash = hash.wrapping_mul(STEP_MUL).wrapping_add(STEP_INC);
                filter.prefetch(hash);
                let _ = filter.contains_hash(hash);
            }
            for hash in [0, u64::MAX] {
                let _ = filter.contains_hash(hash);
            }
            assert_eq!(filter.encode(), bytes);
        }
    }

    #[test]
    fn decode_is_total_on_truncations_and_bit_flips() {
        let good = small_filter(11, 150, 10.0).encode();
        assert_eq!(good.len(), HEADER_LEN + 3 * BLOCK_BYTES);
        for len in 0..good.len() {
            assert!(BloomFilter::decode(&good[..len]).is_err(), "{len}");
        }
        let mut flipped = good.clone();
        for bit in 0..good.len() * 8 {
            flipped[bit / 8] ^= 1 << (bit % 8);
            decode_and_use(&flipped);
            flipped[bit / 8] ^= 1 << (bit % 8);
        }
    }

    #[test]
    fn golden_file() {
        let salt = 0x1234_5678_9abc_def0;
        let encoded = small_golden();
        assert_eq!(encoded.len(), HEADER_LEN + 2 * BLOCK_BYTES);
        let golden = crate::golden::check_golden("bloom-v1.bin", &encoded);
        let decoded = BloomFilter::decode(&golden).unwrap();
        for i in 0..100 {
            assert!(decoded.contains_hash(key_hash(salt, format!("key-{i}").as_bytes())));
        }
    }

    /// The worked example of `docs/format/bloom.md`, so the document and the code agree.
    #[test]
    fn worked_example_from_format_doc() {
        assert_eq!(key_hash(0, b""), 0x2d06_8005_38d3_94c2);
        let salt = 0x1234_5678_9abc_def0;
        let hash = key_hash(salt, b"key-0");
        assert_eq!(hash, 0xcd22_e624_8f43_4a57);
        assert_eq!(block_of(hash, 2), 1);
        let mut state = bit_seed(hash);
        assert_eq!(state, 0x688d_1004_a7c8_d96f);
        let mut positions = Vec::new();
        for _ in 0..7 {
            let (next, bit) = bit_step(state);
            state = next;
            positions.push(bit);
        }
        assert_eq!(positions, [11, 391, 156, 174, 270, 101, 140]);
        let golden = small_golden();
        for p in positions {
            // Byte p / 8, bit p % 8 of block 1 of the encoding.
            let byte = golden[HEADER_LEN + BLOCK_BYTES + p / 8];
            assert_ne!(byte & (1 << (p % 8)), 0);
        }
    }

    /// The golden filter's encoding.
    fn small_golden() -> Vec<u8> {
        let salt = 0x1234_5678_9abc_def0;
        let params = BloomParams::for_bits_per_entry(10.0).unwrap();
        let mut builder = BloomBuilder::new(params, 100, salt);
        for i in 0..100 {
            builder.insert_hash(key_hash(salt, format!("key-{i}").as_bytes()));
        }
        builder.finish().encode()
    }

    #[test]
    fn filter_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<BloomFilter>();
        check::<BloomBuilder>();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_false_negatives(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..48), 0..300),
            salt in any::<u64>(),
            bits_per_entry in 1.0f64..=24.0,
        ) {
            let params = BloomParams::for_bits_per_entry(bits_per_entry).unwrap();
            let mut builder = BloomBuilder::new(params, keys.len() as u64, salt);
            for key in &keys {
                builder.insert_hash(key_hash(salt, key));
            }
            let filter = builder.finish();
            prop_assert_eq!(filter.entries(), keys.len() as u64);
            for key in &keys {
                let hash = key_hash(salt, key);
                filter.prefetch(hash);
                prop_assert!(filter.contains_hash(hash));
            }
            let decoded = BloomFilter::decode(&filter.encode()).unwrap();
            for key in &keys {
                prop_assert!(decoded.contains_hash(key_hash(salt, key)));
            }
        }

        #[test]
        fn decode_is_total_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            decode_and_use(&bytes);
        }

        #[test]
        fn decode_is_total_on_plausible_headers(
            hashes in any::<u32>(),
            block_count in prop_oneof![0u64..8, any::<u64>()],
            salt in any::<u64>(),
            entries in any::<u64>(),
            body_blocks in 0usize..6,
        ) {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&MAGIC);
            bytes.extend_from_slice(&VERSION.to_le_bytes());
            bytes.extend_from_slice(&hashes.to_le_bytes());
            bytes.extend_from_slice(&block_count.to_le_bytes());
            bytes.extend_from_slice(&salt.to_le_bytes());
            bytes.extend_from_slice(&entries.to_le_bytes());
            bytes.resize(HEADER_LEN + body_blocks * BLOCK_BYTES, 0xA5);
            decode_and_use(&bytes);
        }
    }
}

//! The synthetic Ethereum-sync stream: block after block, the key-value pairs Geth's `rawdb`
//! writes when it imports a block (`docs/research/peers.md` 4.1), with sizes drawn around the
//! means the command line gives.
//!
//! Owns: [`Stream`], the Geth key layout ([`Kind`] and the `*_key` functions) and every value.
//! Must never touch: an engine, a table layout (which table or prefix a pair gets is
//! [`super::config`]'s business).
//!
//! Everything is a pure function of `(seed, block, index)`: the benchmark never holds the data,
//! it recomputes the expected value of any key it reads back. The only state is what
//! `--check` needs to know which write of a state key was the last ([`Stream::last_writes`]),
//! rebuilt after the load by replaying the (cheap) choice of keys, not the values.
//!
//! Per block `b` (numbered from [`FIRST_BLOCK`]), in this order:
//!
//! | kind | key | value |
//! |---|---|---|
//! | header | `h` + num + hash (41 B) | 500..600 B |
//! | canonical hash | `h` + num + `n` (10 B) | the 32-byte block hash |
//! | header number | `H` + hash (33 B) | num, 8 B big-endian |
//! | body | `b` + num + hash (41 B) | `body_bytes` ± 50 % |
//! | receipts | `r` + num + hash (41 B) | `receipts_bytes` ± 50 % |
//! | tx lookup, one per tx | `l` + txhash (33 B) | num, minimal big-endian bytes |
//! | state write, `state_writes` of them | `a` + accountHash (33 B) or `o` + accountHash + slotHash (65 B) | 60..=80 B or 32 B |
//!
//! State keys are numbered: block `b` writes the fresh keys `(b - 1) * F .. b * F` first
//! (`F` = the state writes minus the updates, `update_percent` of them), then `U` updates of
//! keys drawn uniformly from every key written so far, this block's fresh ones included. A
//! third of the keys are accounts, the rest storage slots (16 slots share an account hash).

use crate::keys::SplitMix64;

/// The number of the first block of the stream (Ethereum's genesis, block 0, has no
/// transactions; the stream starts after it).
pub const FIRST_BLOCK: u64 = 1;

/// Bytes of a header's value: uniform in `HEADER_BYTES_MIN..=HEADER_BYTES_MAX` (post-merge RLP
/// headers are about 500 to 650 bytes).
pub const HEADER_BYTES_MIN: usize = 500;
/// See [`HEADER_BYTES_MIN`].
pub const HEADER_BYTES_MAX: usize = 600;
/// Bytes of an account's value (slim RLP): uniform in `ACCOUNT_BYTES_MIN..=ACCOUNT_BYTES_MAX`.
pub const ACCOUNT_BYTES_MIN: usize = 60;
/// See [`ACCOUNT_BYTES_MIN`].
pub const ACCOUNT_BYTES_MAX: usize = 80;
/// Bytes of a storage slot's value.
pub const SLOT_BYTES: usize = 32;
/// Storage slots that share one account hash.
const SLOTS_PER_ACCOUNT: u64 = 16;

/// Which of Geth's tables a pair belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `h` + num + hash: the RLP header.
    Header,
    /// `h` + num + `n`: the canonical block hash of a number.
    Canonical,
    /// `H` + hash: the number of a block hash.
    Number,
    /// `b` + num + hash: the block body.
    Body,
    /// `r` + num + hash: the block's receipts.
    Receipts,
    /// `l` + txhash: the number of the block holding the transaction.
    TxLookup,
    /// `a` + accountHash: an account (snapshot layer).
    Account,
    /// `o` + accountHash + slotHash: a storage slot (snapshot layer).
    Storage,
}

#[cfg(test)]
impl Kind {
    /// Every kind, in the order a block writes them.
    pub const ALL: [Kind; 8] = [
        Kind::Header,
        Kind::Canonical,
        Kind::Number,
        Kind::Body,
        Kind::Receipts,
        Kind::TxLookup,
        Kind::Account,
        Kind::Storage,
    ];
}

/// One key-value pair of the stream, keyed as Geth keys it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    /// What it is.
    pub kind: Kind,
    /// Geth's key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// The shape of a stream: everything but the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Blocks in the stream.
    pub blocks: u64,
    /// Transactions per block (one lookup entry each).
    pub txs_per_block: u64,
    /// State writes per block.
    pub state_writes_per_block: u64,
    /// Percent of a block's state writes that update an earlier key (0..100).
    pub update_percent: u64,
    /// Mean bytes of a body.
    pub body_bytes: usize,
    /// Mean bytes of a block's receipts.
    pub receipts_bytes: usize,
}

/// The stream of one seed and shape.
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    seed: u64,
    shape: Shape,
}

/// Domain tags, so that no two derived quantities share a generator.
mod tag {
    pub const BLOCK_HASH: u64 = 1;
    pub const TX_HASH: u64 = 2;
    pub const HEADER: u64 = 3;
    pub const BODY: u64 = 4;
    pub const RECEIPTS: u64 = 5;
    pub const STATE_KEY: u64 = 6;
    pub const ACCOUNT_HASH: u64 = 7;
    pub const SLOT_HASH: u64 = 8;
    pub const STATE_VALUE: u64 = 9;
    pub const UPDATE: u64 = 10;
    pub const SIZE: u64 = 11;
}

impl Stream {
    /// The stream of `seed` with `shape`. `shape.update_percent` must be below 100 (a block
    /// writes at least one fresh state key when it writes any).
    pub fn new(seed: u64, shape: Shape) -> Stream {
        assert!(shape.update_percent < 100, "update_percent is below 100");
        Stream { seed, shape }
    }

    /// The stream's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> std::ops::RangeInclusive<u64> {
        FIRST_BLOCK..=FIRST_BLOCK + self.shape.blocks - 1
    }

    /// A generator for the quantity `tag` of `(a, b)`.
    fn rng(&self, tag: u64, a: u64, b: u64) -> SplitMix64 {
        let mut mix = SplitMix64::new(self.seed ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let x = mix.next_u64() ^ a;
        let mut mix = SplitMix64::new(x);
        SplitMix64::new(mix.next_u64() ^ b)
    }

    fn hash(&self, tag: u64, a: u64, b: u64) -> [u8; 32] {
        let mut rng = self.rng(tag, a, b);
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        out
    }

    fn bytes(&self, tag: u64, a: u64, b: u64, len: usize) -> Vec<u8> {
        let mut rng = self.rng(tag, a, b);
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// A length uniform in `mean / 2 .. mean / 2 + mean` (at least 1), for `(tag, block)`.
    fn spread(&self, tag: u64, block: u64, mean: usize) -> usize {
        let low = (mean / 2).max(1);
        low + self.rng(tag::SIZE, tag, block).below(mean.max(1) as u64) as usize
    }

    /// The hash of block `block`.
    pub fn block_hash(&self, block: u64) -> [u8; 32] {
        self.hash(tag::BLOCK_HASH, block, 0)
    }

    /// The hash of transaction `tx` of block `block`.
    pub fn tx_hash(&self, block: u64, tx: u64) -> [u8; 32] {
        self.hash(tag::TX_HASH, block, tx)
    }

    /// The value of block `block`'s header.
    pub fn header_value(&self, block: u64) -> Vec<u8> {
        let span = (HEADER_BYTES_MAX - HEADER_BYTES_MIN + 1) as u64;
        let len = HEADER_BYTES_MIN + self.rng(tag::SIZE, tag::HEADER, block).below(span) as usize;
        self.bytes(tag::HEADER, block, 0, len)
    }

    /// The value of block `block`'s body.
    pub fn body_value(&self, block: u64) -> Vec<u8> {
        let len = self.spread(tag::BODY, block, self.shape.body_bytes);
        self.bytes(tag::BODY, block, 0, len)
    }

    /// The value of block `block`'s receipts.
    pub fn receipts_value(&self, block: u64) -> Vec<u8> {
        let len = self.spread(tag::RECEIPTS, block, self.shape.receipts_bytes);
        self.bytes(tag::RECEIPTS, block, 0, len)
    }

    /// Fresh state keys each block writes.
    pub fn fresh_per_block(&self) -> u64 {
        let w = self.shape.state_writes_per_block;
        w - w * self.shape.update_percent / 100
    }

    /// State keys written by the end of block `block`.
    pub fn state_keys_after(&self, block: u64) -> u64 {
        (block + 1 - FIRST_BLOCK) * self.fresh_per_block()
    }

    /// The number of the state key that write `index` of block `block` writes.
    pub fn state_key_number(&self, block: u64, index: u64) -> u64 {
        let fresh = self.fresh_per_block();
        let before = self.state_keys_after(block) - fresh;
        if index < fresh {
            before + index
        } else {
            self.rng(tag::UPDATE, block, index)
                .below(self.state_keys_after(block))
        }
    }

    /// Whether state key `number` is an account (else a storage slot).
    pub fn is_account(&self, number: u64) -> bool {
        self.rng(tag::STATE_KEY, number, 0).below(3) == 0
    }

    /// Geth's key of state key `number`.
    pub fn state_key(&self, number: u64) -> Vec<u8> {
        if self.is_account(number) {
            account_key(&self.hash(tag::ACCOUNT_HASH, number, 0))
        } else {
            let owner = self.hash(tag::ACCOUNT_HASH, u64::MAX - number / SLOTS_PER_ACCOUNT, 1);
            storage_key(&owner, &self.hash(tag::SLOT_HASH, number, 0))
        }
    }

    /// The value that write `index` of block `block` gives state key `number`.
    pub fn state_value(&self, number: u64, block: u64, index: u64) -> Vec<u8> {
        let len = if self.is_account(number) {
            let span = (ACCOUNT_BYTES_MAX - ACCOUNT_BYTES_MIN + 1) as u64;
            ACCOUNT_BYTES_MIN + self.rng(tag::SIZE, block, index).below(span) as usize
        } else {
            SLOT_BYTES
        };
        self.bytes(tag::STATE_VALUE, block, index, len)
    }

    /// Appends block `block`'s pairs to `out`, in the order the table above gives.
    pub fn block_pairs(&self, block: u64, out: &mut Vec<Pair>) {
        let hash = self.block_hash(block);
        let mut push = |kind, key, value| out.push(Pair { kind, key, value });
        push(
            Kind::Header,
            header_key(block, &hash),
            self.header_value(block),
        );
        push(Kind::Canonical, canonical_key(block), hash.to_vec());
        push(
            Kind::Number,
            number_key(&hash),
            block.to_be_bytes().to_vec(),
        );
        push(Kind::Body, body_key(block, &hash), self.body_value(block));
        push(
            Kind::Receipts,
            receipts_key(block, &hash),
            self.receipts_value(block),
        );
        for tx in 0..self.shape.txs_per_block {
            let key = lookup_key(&self.tx_hash(block, tx));
            push(Kind::TxLookup, key, lookup_value(block));
        }
        for index in 0..self.shape.state_writes_per_block {
            let number = self.state_key_number(block, index);
            let kind = if self.is_account(number) {
                Kind::Account
            } else {
                Kind::Storage
            };
            let value = self.state_value(number, block, index);
            push(kind, self.state_key(number), value);
        }
    }

    /// For every state key number, the last write of the whole stream as `(block, index)`
    /// packed into a `u64` (`block << 32 | index`): the model `--check` needs. Memory: 8 bytes
    /// per state key (26 MB at 20,000 blocks of 160 fresh keys).
    pub fn last_writes(&self) -> Vec<u64> {
        let total = self.state_keys_after(*self.blocks().end());
        let mut last = vec![0u64; total as usize];
        for block in self.blocks() {
            for index in 0..self.shape.state_writes_per_block {
                let number = self.state_key_number(block, index);
                last[number as usize] = block << 32 | index;
            }
        }
        last
    }

    /// Mean bytes of the key and the value of each kind, and how many pairs of it a block
    /// writes: for sizing write buffers and for the report.
    pub fn mean_sizes(&self) -> Vec<(Kind, f64, f64)> {
        let s = self.shape;
        let writes = s.state_writes_per_block as f64;
        let account = (ACCOUNT_BYTES_MIN + ACCOUNT_BYTES_MAX) as f64 / 2.0;
        let header = (HEADER_BYTES_MIN + HEADER_BYTES_MAX) as f64 / 2.0;
        let spread = |mean: usize| (mean / 2).max(1) as f64 + (mean.max(1) as f64 - 1.0) / 2.0;
        vec![
            (Kind::Header, 41.0 + header, 1.0),
            (Kind::Canonical, 10.0 + 32.0, 1.0),
            (Kind::Number, 33.0 + 8.0, 1.0),
            (Kind::Body, 41.0 + spread(s.body_bytes), 1.0),
            (Kind::Receipts, 41.0 + spread(s.receipts_bytes), 1.0),
            (Kind::TxLookup, 33.0 + 3.0, s.txs_per_block as f64),
            (Kind::Account, 33.0 + account, writes / 3.0),
            (Kind::Storage, 65.0 + SLOT_BYTES as f64, writes * 2.0 / 3.0),
        ]
    }
}

/// `h` + num + hash.
pub fn header_key(block: u64, hash: &[u8; 32]) -> Vec<u8> {
    keyed(b'h', &block.to_be_bytes(), hash)
}

/// `h` + num + `n`.
pub fn canonical_key(block: u64) -> Vec<u8> {
    keyed(b'h', &block.to_be_bytes(), b"n")
}

/// `H` + hash.
pub fn number_key(hash: &[u8; 32]) -> Vec<u8> {
    keyed(b'H', hash, &[])
}

/// `b` + num + hash.
pub fn body_key(block: u64, hash: &[u8; 32]) -> Vec<u8> {
    keyed(b'b', &block.to_be_bytes(), hash)
}

/// `r` + num + hash.
pub fn receipts_key(block: u64, hash: &[u8; 32]) -> Vec<u8> {
    keyed(b'r', &block.to_be_bytes(), hash)
}

/// `l` + txhash.
pub fn lookup_key(tx_hash: &[u8; 32]) -> Vec<u8> {
    keyed(b'l', tx_hash, &[])
}

/// `a` + accountHash.
fn account_key(account: &[u8; 32]) -> Vec<u8> {
    keyed(b'a', account, &[])
}

/// `o` + accountHash + slotHash.
fn storage_key(account: &[u8; 32], slot: &[u8; 32]) -> Vec<u8> {
    keyed(b'o', account, slot)
}

/// A tx lookup entry's value: the block number as minimal big-endian bytes (Geth's
/// `block.Number().Bytes()`, database version 6).
pub fn lookup_value(block: u64) -> Vec<u8> {
    let bytes = block.to_be_bytes();
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    bytes[first..].to_vec()
}

/// The block number of a tx lookup entry's value; `None` if it is longer than 8 bytes.
pub fn parse_lookup_value(value: &[u8]) -> Option<u64> {
    if value.len() > 8 {
        return None;
    }
    let mut bytes = [0u8; 8];
    bytes[8 - value.len()..].copy_from_slice(value);
    Some(u64::from_be_bytes(bytes))
}

fn keyed(prefix: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + a.len() + b.len());
    key.push(prefix);
    key.extend_from_slice(a);
    key.extend_from_slice(b);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn shape() -> Shape {
        Shape {
            blocks: 20,
            txs_per_block: 7,
            state_writes_per_block: 10,
            update_percent: 20,
            body_bytes: 4_000,
            receipts_bytes: 3_000,
        }
    }

    fn all_pairs(stream: &Stream) -> Vec<(u64, Pair)> {
        let mut out = Vec::new();
        for block in stream.blocks() {
            let mut pairs = Vec::new();
            stream.block_pairs(block, &mut pairs);
            out.extend(pairs.into_iter().map(|p| (block, p)));
        }
        out
    }

    #[test]
    fn the_stream_is_a_function_of_the_seed() {
        let a = all_pairs(&Stream::new(7, shape()));
        assert_eq!(a, all_pairs(&Stream::new(7, shape())));
        let b = all_pairs(&Stream::new(8, shape()));
        assert_eq!(a.len(), b.len());
        assert_ne!(a, b);
    }

    #[test]
    fn keys_follow_geths_layout_and_sizes_their_bounds() {
        let stream = Stream::new(1, shape());
        let pairs = all_pairs(&stream);
        let per_block = 5 + 7 + 10;
        assert_eq!(pairs.len(), 20 * per_block);
        for (block, pair) in &pairs {
            let num = block.to_be_bytes();
            let hash = stream.block_hash(*block);
            let (k, v) = (&pair.key, &pair.value);
            match pair.kind {
                Kind::Header => {
                    assert_eq!((k[0], &k[1..9], &k[9..]), (b'h', &num[..], &hash[..]));
                    assert!((HEADER_BYTES_MIN..=HEADER_BYTES_MAX).contains(&v.len()));
                }
                Kind::Canonical => {
                    assert_eq!(k, &[&b"h"[..], &num, b"n"].concat());
                    assert_eq!(v, &hash);
                }
                Kind::Number => {
                    assert_eq!(k, &[&b"H"[..], &hash].concat());
                    assert_eq!(v, &num);
                }
                Kind::Body | Kind::Receipts => {
                    let (prefix, mean) = match pair.kind {
                        Kind::Body => (b'b', 4_000),
                        _ => (b'r', 3_000),
                    };
                    assert_eq!((k[0], &k[1..9], &k[9..]), (prefix, &num[..], &hash[..]));
                    assert!(
                        (mean / 2..mean / 2 + mean).contains(&v.len()),
                        "{}",
                        v.len()
                    );
                }
                Kind::TxLookup => {
                    assert_eq!((k[0], k.len()), (b'l', 33));
                    assert_eq!(v, &[*block as u8], "minimal big-endian bytes");
                    assert_eq!(parse_lookup_value(v), Some(*block));
                }
                Kind::Account => {
                    assert_eq!((k[0], k.len()), (b'a', 33));
                    assert!((ACCOUNT_BYTES_MIN..=ACCOUNT_BYTES_MAX).contains(&v.len()));
                }
                Kind::Storage => {
                    assert_eq!((k[0], k.len(), v.len()), (b'o', 65, SLOT_BYTES));
                }
            }
        }
        assert_eq!(lookup_value(0x01_0000), vec![1, 0, 0]);
        assert_eq!(parse_lookup_value(&[1, 0, 0]), Some(0x01_0000));
        assert_eq!(parse_lookup_value(&[0; 9]), None);
        // Block hashes, tx hashes and fresh state keys are distinct.
        let mut seen = std::collections::HashSet::new();
        for (_, pair) in &pairs {
            if matches!(pair.kind, Kind::Header | Kind::Number | Kind::TxLookup) {
                assert!(seen.insert(pair.key.clone()));
            }
        }
    }

    #[test]
    fn state_writes_mix_fresh_keys_and_updates_and_the_model_knows_the_last() {
        let stream = Stream::new(3, shape());
        assert_eq!(stream.fresh_per_block(), 8);
        let mut latest: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut kinds = [0usize; 2];
        for (_, pair) in all_pairs(&stream) {
            if matches!(pair.kind, Kind::Account | Kind::Storage) {
                kinds[usize::from(pair.kind == Kind::Storage)] += 1;
                latest.insert(pair.key, pair.value);
            }
        }
        assert_eq!(
            latest.len() as u64,
            stream.state_keys_after(20),
            "every key distinct"
        );
        assert!(kinds[0] > 0 && kinds[1] > kinds[0], "{kinds:?}");
        let last = stream.last_writes();
        assert_eq!(last.len(), latest.len());
        for (number, &packed) in last.iter().enumerate() {
            let (block, index) = (packed >> 32, packed & 0xffff_ffff);
            let key = stream.state_key(number as u64);
            let value = stream.state_value(number as u64, block, index);
            assert_eq!(latest[&key], value, "key {number}");
        }
    }

    #[test]
    fn mean_sizes_match_the_stream() {
        let stream = Stream::new(
            5,
            Shape {
                blocks: 400,
                ..shape()
            },
        );
        let mut bytes = 0usize;
        let mut count = 0usize;
        for (_, pair) in all_pairs(&stream) {
            bytes += pair.key.len() + pair.value.len();
            count += 1;
        }
        let means = stream.mean_sizes();
        let expected: f64 = means.iter().map(|(_, b, n)| b * n).sum::<f64>() * 400.0;
        let pairs: f64 = means.iter().map(|(_, _, n)| n).sum::<f64>() * 400.0;
        assert!(
            (bytes as f64 / expected - 1.0).abs() < 0.05,
            "{bytes} vs {expected}"
        );
        assert_eq!(count as f64, pairs);
    }
}

//! Block-ordered keys: a block-group number, big-endian, in front of a key.
//!
//! Owns: [`BlockKeys`]. May call: nothing (it only builds and splits byte strings). Must never
//! touch: tables, files.
//!
//! Chain data that a node appends block after block (headers, canonical hashes, bodies,
//! receipts) is usually keyed by hashes, so each new block's entries land all over the key
//! space and every level of an LSM-tree rewrites them. Prefixed with the number of the block's
//! group (`block / group_blocks`), big-endian, the entries of later groups sort after those of
//! earlier ones: runs written later cover key ranges above every older run's, and the merges
//! that take them in link their files instead of rewriting them. Within a group, entries keep
//! their own order (the original key after the prefix).
//!
//! Which data to key this way (see also `docs/design.md`, "Block-ordered data"):
//!
//! - **Prefix** what is written once, in block order, and read by block number or by a key
//!   whose block is known: headers, canonical hashes, bodies, receipts.
//! - **Do not prefix** what is looked up by a hash alone, without its block: transaction
//!   lookup entries (transaction hash to block number), header-number entries (block hash to
//!   number). Keep them in a table of their own, so that their random keys do not spread every
//!   new run over the whole key range of the block-ordered table.
//! - **Do not prefix** state (accounts, storage slots, trie nodes): it is updated in place, in
//!   random order; it belongs in its own table too.
//!
//! Write each block's entries (or each group's) as one batch in key order, one block after
//! another: the table's updates then arrive in ascending key order, every run it writes lies
//! above the older ones, and merges link runs instead of rewriting them. With groups of several
//! blocks written block by block, the entries of one group's blocks interleave (their keys after
//! the prefix are hashes): a run then overlaps the one before it where a group spans both, and
//! [`crate::TableConfig::part_entries`] limits the rewrite to the parts there. A group of 1 block
//! never interleaves.

use crate::error::{Error, Result};

/// Builds and splits block-ordered keys: an 8-byte big-endian block-group number, then the key.
///
/// ```
/// use cairn::BlockKeys;
/// let keys = BlockKeys::new(1_000).unwrap();
/// let header = keys.key(123_456, b"h-header-hash");
/// assert_eq!(&header[..8], &123u64.to_be_bytes());
/// assert_eq!(keys.split(&header), Some((123, &b"h-header-hash"[..])));
/// // Later groups sort after earlier ones, whatever the rest of the key.
/// assert!(keys.key(123_999, b"\xff") < keys.key(124_000, b"\x00"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockKeys {
    group_blocks: u64,
}

impl BlockKeys {
    /// Bytes of the prefix.
    pub const PREFIX_BYTES: usize = 8;

    /// Keys whose groups hold `group_blocks` consecutive blocks each (block `b` is in group
    /// `b / group_blocks`). Zero is [`Error::InvalidConfig`].
    pub fn new(group_blocks: u64) -> Result<BlockKeys> {
        if group_blocks == 0 {
            return Err(Error::InvalidConfig(
                "a block group holds at least one block".into(),
            ));
        }
        Ok(BlockKeys { group_blocks })
    }

    /// Blocks per group.
    pub fn group_blocks(&self) -> u64 {
        self.group_blocks
    }

    /// The group of block `block`.
    pub fn group(&self, block: u64) -> u64 {
        block / self.group_blocks
    }

    /// The prefix of block `block`'s keys: its group, big-endian.
    pub fn prefix(&self, block: u64) -> [u8; 8] {
        self.group(block).to_be_bytes()
    }

    /// The key of `key` written at block `block`: [`BlockKeys::prefix`] then `key`.
    /// Cost: one allocation of `8 + key.len()` bytes.
    pub fn key(&self, block: u64, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::PREFIX_BYTES + key.len());
        self.key_into(block, key, &mut out);
        out
    }

    /// As [`BlockKeys::key`], into `out` (cleared first), reusing its allocation.
    pub fn key_into(&self, block: u64, key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.prefix(block));
        out.extend_from_slice(key);
    }

    /// The group and the original key of a block-ordered key; `None` for a key shorter than
    /// the prefix.
    pub fn split<'a>(&self, key: &'a [u8]) -> Option<(u64, &'a [u8])> {
        let (prefix, rest) = key.split_first_chunk::<8>()?;
        Some((u64::from_be_bytes(*prefix), rest))
    }

    /// The smallest key of group `group`'s entries and the prefix that bounds them from above
    /// (the next group's; `None` for the last group): a range for a cursor over one group.
    pub fn group_bounds(&self, group: u64) -> ([u8; 8], Option<[u8; 8]>) {
        (
            group.to_be_bytes(),
            group.checked_add(1).map(u64::to_be_bytes),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_sort_in_block_order() {
        let keys = BlockKeys::new(4).unwrap();
        assert!(BlockKeys::new(0).is_err());
        assert_eq!(keys.group(7), 1);
        assert_eq!(keys.key(7, b"x"), [0, 0, 0, 0, 0, 0, 0, 1, b'x']);
        assert_eq!(
            keys.key(3, b"\xff\xff"),
            [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
        );
        assert!(keys.key(3, b"\xff\xff") < keys.key(4, b""));
        assert_eq!(keys.split(b"short"), None);
        assert_eq!(keys.split(&keys.key(9, b"k")), Some((2, &b"k"[..])));
        let mut buf = vec![1, 2, 3];
        keys.key_into(8, b"ab", &mut buf);
        assert_eq!(buf, keys.key(8, b"ab"));
        let (lo, hi) = keys.group_bounds(2);
        assert!(lo.as_slice() <= keys.key(8, b"").as_slice());
        assert!(keys.key(11, b"\xff").as_slice() < hi.unwrap().as_slice());
        assert_eq!(keys.group_bounds(u64::MAX).1, None);
    }
}

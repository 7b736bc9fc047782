//! The hash functions of the trie, domain-separated (`docs/format/trie.md`, "Hash functions").
//!
//! Owns: [`HashKind`], [`Hash`](type@Hash), [`Leaf`] and the five domain hashes (key path, value, blob,
//! leaf, node). Everything else in the crate, and every hash the engine computes for the trie,
//! goes through here; SHA-256 itself is `sha256`'s. Cost: one hash of 64 bytes is about 90 ns
//! with SHA-NI (80 ns BLAKE3); a leaf (96 bytes) about 94 ns (157 ns BLAKE3). Without SHA-NI
//! (the project's Xeon), a node (65 bytes) or a leaf (97) takes about 0.42 µs of SHA-256 through
//! `ring` (0.70 µs through `sha2`) against 0.13 µs of BLAKE3.

use crate::sha256;

/// A 32-byte hash: a node of the trie, a key path, a value or blob hash, a root.
pub type Hash = [u8; 32];

/// The hash of an empty subtree (and the root of an empty table): 32 zero bytes.
pub const ZERO: Hash = [0; 32];

/// Bits in a key path: the deepest a leaf can sit.
pub const KEY_PATH_BITS: usize = 256;

/// Which hash function a table (and its proofs) uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HashKind {
    /// SHA-256 with a one-byte domain prefix (the default).
    #[default]
    Sha256,
    /// BLAKE3 in keyed mode, one derived key per domain.
    Blake3,
}

impl HashKind {
    /// The kind's code in encoded proofs and metadata: 1 SHA-256, 2 BLAKE3.
    pub const fn code(self) -> u8 {
        match self {
            HashKind::Sha256 => 1,
            HashKind::Blake3 => 2,
        }
    }

    /// The kind with this code, if any.
    pub const fn from_code(code: u8) -> Option<HashKind> {
        match code {
            1 => Some(HashKind::Sha256),
            2 => Some(HashKind::Blake3),
            _ => None,
        }
    }

    /// The key path of `key`: where its leaf lives in the trie.
    pub fn key_path(self, key: &[u8]) -> Hash {
        self.hash(Domain::Key, &[key])
    }

    /// The hash of a value.
    pub fn value_hash(self, value: &[u8]) -> Hash {
        self.hash(Domain::Value, &[value])
    }

    /// The hash of a blob (a key without a blob has [`ZERO`] in its leaf instead).
    pub fn blob_hash(self, blob: &[u8]) -> Hash {
        self.hash(Domain::Blob, &[blob])
    }

    /// The hash of an internal node from its children's hashes.
    pub fn node(self, left: &Hash, right: &Hash) -> Hash {
        match self {
            HashKind::Sha256 => sha256::node(Domain::Node as u8, left, right),
            HashKind::Blake3 => self.hash(Domain::Node, &[left, right]),
        }
    }

    fn hash(self, domain: Domain, parts: &[&[u8]]) -> Hash {
        match self {
            HashKind::Sha256 => sha256::digest_prefixed(domain as u8, parts),
            HashKind::Blake3 => {
                let mut h = blake3::Hasher::new_keyed(blake3_key(domain));
                for part in parts {
                    h.update(part);
                }
                *h.finalize().as_bytes()
            }
        }
    }
}

/// The domains of `docs/format/trie.md`; the discriminant is SHA-256's prefix byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Domain {
    Key = 1,
    Value = 2,
    Blob = 3,
    Leaf = 4,
    Node = 5,
}

/// BLAKE3's key for a domain: `derive_key("cairn trie v1 <name>", "")`, derived once.
fn blake3_key(domain: Domain) -> &'static [u8; 32] {
    // Derived by `derive_keys_match_their_definition` below and pinned here, so that no lazy
    // initialisation (and no `std`) is needed.
    match domain {
        Domain::Key => &BLAKE3_KEYS[0],
        Domain::Value => &BLAKE3_KEYS[1],
        Domain::Blob => &BLAKE3_KEYS[2],
        Domain::Leaf => &BLAKE3_KEYS[3],
        Domain::Node => &BLAKE3_KEYS[4],
    }
}

#[rustfmt::skip]
const BLAKE3_KEYS: [[u8; 32]; 5] = [
    // key
    [0xcd, 0x04, 0xa9, 0xd6, 0xbe, 0x45, 0x52, 0x51, 0x88, 0x8b, 0xe7, 0x5a, 0x8b, 0xe1, 0x81, 0xe8, 0x31, 0x53, 0x98, 0xa8, 0x51, 0x47, 0xa4, 0xd1, 0x8d, 0xb6, 0x46, 0xbf, 0xcd, 0x4f, 0xce, 0x12],
    // value
    [0xb1, 0xf7, 0x14, 0x7b, 0x2b, 0x49, 0xce, 0xdc, 0x25, 0x08, 0xb0, 0x9f, 0xeb, 0xcb, 0x85, 0x54, 0xc1, 0x55, 0x33, 0x29, 0xc5, 0x1b, 0xa5, 0x0a, 0x74, 0xa7, 0x6a, 0xfc, 0x96, 0xfd, 0x91, 0x1f],
    // blob
    [0xf0, 0x6e, 0x70, 0x96, 0xe0, 0x13, 0x0c, 0x2a, 0xdc, 0x3f, 0x71, 0x67, 0x1a, 0xb5, 0xca, 0x28, 0xb0, 0xdb, 0xe0, 0x91, 0x33, 0x09, 0xbe, 0x9f, 0x22, 0x16, 0x08, 0xfa, 0x9d, 0xa7, 0xd0, 0xee],
    // leaf
    [0x51, 0xc3, 0x34, 0x34, 0x32, 0xb1, 0x7c, 0x2a, 0xe7, 0x48, 0x52, 0xb4, 0x6e, 0x71, 0x1c, 0x42, 0xb1, 0xed, 0x72, 0x5d, 0x14, 0x94, 0xe4, 0xf7, 0x98, 0xc5, 0x4e, 0xc5, 0x0d, 0x63, 0x9b, 0x52],
    // node
    [0x10, 0xfb, 0x60, 0xf7, 0x3e, 0xbe, 0x8d, 0x3e, 0xd1, 0x08, 0x03, 0x90, 0x51, 0xde, 0x13, 0xda, 0x1a, 0x16, 0x59, 0x8e, 0x0f, 0x6f, 0x52, 0x75, 0x81, 0xfa, 0xf2, 0x79, 0xde, 0x88, 0x86, 0x22],
];

/// What a leaf commits to: the key (through its path), the value and the blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Leaf {
    /// `H_key(key)`: where the leaf sits.
    pub key_path: Hash,
    /// `H_value(value)`.
    pub value_hash: Hash,
    /// `H_blob(blob)`, or [`ZERO`] for a key without a blob.
    pub blob_hash: Hash,
}

impl Leaf {
    /// The leaf of `key` holding `value` and, if given, `blob`. Cost: three hashes (four with a
    /// blob) of the inputs' lengths.
    pub fn new(kind: HashKind, key: &[u8], value: &[u8], blob: Option<&[u8]>) -> Leaf {
        Leaf {
            key_path: kind.key_path(key),
            value_hash: kind.value_hash(value),
            blob_hash: blob.map_or(ZERO, |b| kind.blob_hash(b)),
        }
    }

    /// The leaf's node hash, `H_leaf(key_path ‖ value_hash ‖ blob_hash)`; it does not depend on
    /// where the leaf sits.
    pub fn hash(&self, kind: HashKind) -> Hash {
        kind.hash(
            Domain::Leaf,
            &[&self.key_path, &self.value_hash, &self.blob_hash],
        )
    }

    /// Whether the key has a blob.
    pub fn has_blob(&self) -> bool {
        self.blob_hash != ZERO
    }
}

/// Bit `i` of a key path (most significant first): `false` goes left. `i` must be below 256.
#[inline]
pub fn bit(path: &Hash, i: usize) -> bool {
    (path[i / 8] >> (7 - i % 8)) & 1 == 1
}

/// How many leading bits two key paths share (256 when they are equal).
pub fn common_prefix_bits(a: &Hash, b: &Hash) -> usize {
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        let diff = x ^ y;
        if diff != 0 {
            return i * 8 + diff.leading_zeros() as usize;
        }
    }
    KEY_PATH_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derive_keys_match_their_definition() {
        let names = ["key", "value", "blob", "leaf", "node"];
        for (name, pinned) in names.iter().zip(BLAKE3_KEYS.iter()) {
            let context = alloc::format!("cairn trie v1 {name}");
            let derived = blake3::derive_key(&context, b"");
            assert_eq!(&derived, pinned, "{name}: {derived:?}");
        }
    }

    #[test]
    fn bits_and_prefixes() {
        let mut a = ZERO;
        a[0] = 0b1000_0000;
        assert!(bit(&a, 0));
        assert!(!bit(&a, 1));
        let mut b = a;
        b[3] = 0b0001_0000;
        assert_eq!(common_prefix_bits(&a, &b), 27);
        assert_eq!(common_prefix_bits(&a, &a), 256);
    }
}

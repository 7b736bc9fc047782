//! The history tree: an append-only Merkle tree over Cairn's commits, hashed exactly as RFC 9162
//! §2.1 (= RFC 6962 §2.1) defines it, with inclusion and consistency proofs, their encodings
//! (`docs/format/history.md`) and their verifiers.
//!
//! Owns: the RFC's hashing ([`leaf_hash`], [`node_hash`], [`EMPTY_ROOT`], [`root_of`]), Cairn's
//! leaf ([`HistoryLeaf`]), what a client keeps ([`Digest`]), the two proofs ([`InclusionProof`],
//! [`ConsistencyProof`]) and their encodings, and the verifiers ([`verify_inclusion`],
//! [`verify_consistency`], RFC 9162 §2.1.3.2 and §2.1.4.2). May call the crate's SHA-256
//! (`sha256`) and errors, nothing else: the history tree shares no hash with the state trie
//! (`hash.rs`, `trie.rs`); a leaf commits to a state root as 32 opaque bytes. A tree that makes proofs lives
//! elsewhere (`reference::MemHistory` in memory; a durable one in the ledger).
//!
//! Bounds: a tree holds at most [`SIZE_MAX`] (2^63) leaves, so every proof path holds at most
//! [`PATH_HASHES_MAX`] (64) hashes; verifying one costs at most one node hash per path entry
//! (inclusion) or two (consistency), no allocation and no recursion. Decoding allocates at most
//! 64 hashes (2 KiB). A node hash is 65 bytes in, two SHA-256 compressions: measured at 0.87 µs
//! on one core of the project's machine (no SHA-NI, niced under a running benchmark, so an upper
//! figure) when `sha2` computed it, where an inclusion proof over a million leaves (20 hashes)
//! verified in about 17 µs (`tests/history.rs`, `verify_inclusion_rate_at_a_million_leaves`);
//! through `ring` (`sha256`), 0.42 µs on the same machine, quiet.

use alloc::vec::Vec;

use crate::error::{HistoryDecodeError, HistoryProveError, HistoryVerifyError};
use crate::hash::Hash;
use crate::sha256;

/// The RFC's prefix of a leaf's data: `leaf hash = SHA-256(0x00 ‖ data)`.
pub const LEAF_PREFIX: u8 = 0x00;
/// The RFC's prefix of an internal node: `node hash = SHA-256(0x01 ‖ left ‖ right)`.
pub const NODE_PREFIX: u8 = 0x01;

/// The root of the empty tree: `SHA-256("")` (not 32 zero bytes), RFC 9162 §2.1.1.
pub const EMPTY_ROOT: Hash = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// The most leaves a history tree may hold: 2^63. It keeps every proof path within
/// [`PATH_HASHES_MAX`] hashes (a consistency proof up to 2^64 leaves could need 65); decoders
/// refuse larger sizes and verifiers refuse digests that claim them.
pub const SIZE_MAX: u64 = 1 << 63;

/// The most hashes in an inclusion or consistency proof's path, and the most a decoder reads.
pub const PATH_HASHES_MAX: usize = 64;

/// The first bytes of every encoded digest and proof of the history tree.
pub const HISTORY_MAGIC: [u8; 4] = *b"CRNH";
/// The format version of digests and proofs this build writes and reads.
pub const HISTORY_FORMAT_VERSION: u8 = 1;
/// The format version of a [`HistoryLeaf`]'s encoding (its first byte).
pub const HISTORY_LEAF_VERSION: u8 = 1;
/// Bytes of an encoded [`HistoryLeaf`]: version byte, u64, two hashes.
pub const HISTORY_LEAF_BYTES: usize = 1 + 8 + 32 + 32;
/// Bytes of an encoded [`Digest`].
pub const DIGEST_BYTES: usize = HEADER_BYTES + 8 + 32;

/// The hash-kind code of SHA-256, as in the trie's formats (`HashKind::Sha256.code()`); the
/// only one the history tree uses.
const HASH_SHA256: u8 = 1;
const TYPE_DIGEST: u8 = 1;
const TYPE_INCLUSION: u8 = 2;
const TYPE_CONSISTENCY: u8 = 3;
const HEADER_BYTES: usize = 8;
/// Header, two u64 and the path's count byte.
const PROOF_FIXED_BYTES: usize = HEADER_BYTES + 8 + 8 + 1;

/// The RFC leaf hash of `data`: `SHA-256(0x00 ‖ data)`. Cost: one SHA-256 of `len + 1` bytes.
pub fn leaf_hash(data: &[u8]) -> Hash {
    sha256::digest_prefixed(LEAF_PREFIX, &[data])
}

/// The RFC node hash: `SHA-256(0x01 ‖ left ‖ right)`. Cost: one SHA-256 of 65 bytes (two
/// compression blocks).
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    sha256::node(NODE_PREFIX, left, right)
}

/// The largest power of two strictly below `n`, where the RFC splits a tree of `n >= 2` leaves.
pub(crate) fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// The Merkle Tree Hash (RFC 9162 §2.1.1) of leaves given by their leaf hashes: the definition,
/// as a recursion. [`EMPTY_ROOT`] for none, the leaf hash itself for one, otherwise the node of
/// the first `k` leaves' root and the rest's, `k` the largest power of two below the count (the
/// last node is never duplicated). Cost: `n - 1` node hashes, recursion `⌈log₂ n⌉` deep.
pub fn root_of(leaf_hashes: &[Hash]) -> Hash {
    match leaf_hashes {
        [] => EMPTY_ROOT,
        [leaf] => *leaf,
        _ => {
            let k = split(leaf_hashes.len() as u64) as usize;
            node_hash(&root_of(&leaf_hashes[..k]), &root_of(&leaf_hashes[k..]))
        }
    }
}

/// Cairn's leaf: one commit of the ledger. Its [`encode`](HistoryLeaf::encode)d bytes are the
/// RFC leaf `data`; its [`hash`](HistoryLeaf::hash) is what the tree holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HistoryLeaf {
    /// The commit's version (its sequence number in the ledger).
    pub version: u64,
    /// The ledger's state root after the commit.
    pub ledger_root: Hash,
    /// The hash of the commit's metadata.
    pub meta: Hash,
}

impl HistoryLeaf {
    /// The leaf's data: [`HISTORY_LEAF_VERSION`], `version` as u64 big-endian, `ledger_root`,
    /// `meta` ([`HISTORY_LEAF_BYTES`] = 73 bytes).
    pub fn encode(&self) -> [u8; HISTORY_LEAF_BYTES] {
        let mut out = [0u8; HISTORY_LEAF_BYTES];
        out[0] = HISTORY_LEAF_VERSION;
        out[1..9].copy_from_slice(&self.version.to_be_bytes());
        out[9..41].copy_from_slice(&self.ledger_root);
        out[41..].copy_from_slice(&self.meta);
        out
    }

    /// The leaf from its data: exactly [`HISTORY_LEAF_BYTES`] bytes starting with
    /// [`HISTORY_LEAF_VERSION`]. Total: any bytes give a leaf or an error.
    pub fn decode(bytes: &[u8]) -> Result<HistoryLeaf, HistoryDecodeError> {
        let mut r = Reader::new(bytes);
        let version_byte = r.u8("leaf format version")?;
        if version_byte != HISTORY_LEAF_VERSION {
            return Err(HistoryDecodeError::UnsupportedVersion(version_byte));
        }
        let leaf = HistoryLeaf {
            version: r.u64("leaf version")?,
            ledger_root: r.hash("leaf ledger root")?,
            meta: r.hash("leaf meta")?,
        };
        r.finish()?;
        Ok(leaf)
    }

    /// The leaf hash the tree holds: `SHA-256(0x00 ‖ encode())`. Cost: one SHA-256 of 74 bytes
    /// (two compression blocks).
    pub fn hash(&self) -> Hash {
        leaf_hash(&self.encode())
    }
}

/// A tree's size and root: what a client keeps, and what proofs are checked against. It means
/// nothing unless it comes from a trusted source (signed, or checked consistent with one the
/// client trusts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Digest {
    /// Leaves in the tree.
    pub size: u64,
    /// The tree's Merkle Tree Hash.
    pub root: Hash,
}

impl Digest {
    /// The empty tree's digest: size 0, root [`EMPTY_ROOT`].
    pub const EMPTY: Digest = Digest {
        size: 0,
        root: EMPTY_ROOT,
    };

    /// The encoding (`docs/format/history.md`): header, size u64 big-endian, root
    /// ([`DIGEST_BYTES`] = 48 bytes). A size above [`SIZE_MAX`] encodes, but does not decode.
    pub fn encode(&self) -> [u8; DIGEST_BYTES] {
        let mut out = [0u8; DIGEST_BYTES];
        out[..HEADER_BYTES].copy_from_slice(&header(TYPE_DIGEST));
        out[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&self.size.to_be_bytes());
        out[HEADER_BYTES + 8..].copy_from_slice(&self.root);
        out
    }

    /// A digest from its encoding. Total and canonical: any bytes give a digest or an error, and
    /// a digest re-encodes to the bytes it came from.
    pub fn decode(bytes: &[u8]) -> Result<Digest, HistoryDecodeError> {
        let mut r = Reader::new(bytes);
        r.header(TYPE_DIGEST)?;
        let size = r.size("digest size")?;
        let root = r.hash("digest root")?;
        r.finish()?;
        Ok(Digest { size, root })
    }
}

/// A proof that a leaf sits at `index` in the tree of `size` leaves (RFC 9162 §2.1.3): the
/// roots of the subtrees beside the leaf's path, from the leaf up. It holds
/// `⌈log₂ size⌉` hashes or fewer (20 at a million leaves: 665 bytes encoded).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InclusionProof {
    /// The leaf's position, from 0.
    pub index: u64,
    /// The size of the tree the proof is against.
    pub size: u64,
    /// The audit path, from the leaf's sibling up.
    pub path: Vec<Hash>,
}

impl InclusionProof {
    /// Bytes of the encoding: 25 plus 32 per hash of the path.
    pub fn encoded_len(&self) -> usize {
        PROOF_FIXED_BYTES + 32 * self.path.len()
    }

    /// The encoding (`docs/format/history.md`): header, index and size as u64 big-endian, the
    /// path's count (one byte) and its hashes. A size above [`SIZE_MAX`] or a path of more than
    /// [`PATH_HASHES_MAX`] hashes encodes, but does not decode.
    pub fn encode(&self) -> Vec<u8> {
        encode_proof(TYPE_INCLUSION, self.index, self.size, &self.path)
    }

    /// A proof from its encoding. Total and canonical: any bytes give a proof or an error, a
    /// proof re-encodes to the bytes it came from, and at most [`PATH_HASHES_MAX`] hashes are
    /// allocated. It checks the form only; [`verify_inclusion`] checks the rest.
    pub fn decode(bytes: &[u8]) -> Result<InclusionProof, HistoryDecodeError> {
        let mut r = Reader::new(bytes);
        r.header(TYPE_INCLUSION)?;
        let index = r.u64("leaf index")?;
        let size = r.size("tree size")?;
        let path = r.path()?;
        r.finish()?;
        Ok(InclusionProof { index, size, path })
    }
}

/// A proof that the tree of `old_size` leaves is a prefix of the tree of `new_size` leaves
/// (RFC 9162 §2.1.4): subtree roots from which both roots are recomputed. It holds at most
/// `⌈log₂ new_size⌉ + 1` hashes (21 at a million leaves: 697 bytes encoded).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConsistencyProof {
    /// The older (smaller) tree's size.
    pub old_size: u64,
    /// The newer tree's size.
    pub new_size: u64,
    /// The consistency path, from the bottom up.
    pub path: Vec<Hash>,
}

impl ConsistencyProof {
    /// Bytes of the encoding: 25 plus 32 per hash of the path.
    pub fn encoded_len(&self) -> usize {
        PROOF_FIXED_BYTES + 32 * self.path.len()
    }

    /// The encoding (`docs/format/history.md`): header, old and new size as u64 big-endian, the
    /// path's count (one byte) and its hashes. A size above [`SIZE_MAX`] or a path of more than
    /// [`PATH_HASHES_MAX`] hashes encodes, but does not decode.
    pub fn encode(&self) -> Vec<u8> {
        encode_proof(TYPE_CONSISTENCY, self.old_size, self.new_size, &self.path)
    }

    /// A proof from its encoding. Total and canonical, as [`InclusionProof::decode`]; it checks
    /// the form only, [`verify_consistency`] checks the rest.
    pub fn decode(bytes: &[u8]) -> Result<ConsistencyProof, HistoryDecodeError> {
        let mut r = Reader::new(bytes);
        r.header(TYPE_CONSISTENCY)?;
        let old_size = r.size("old size")?;
        let new_size = r.size("new size")?;
        let path = r.path()?;
        r.finish()?;
        Ok(ConsistencyProof {
            old_size,
            new_size,
            path,
        })
    }
}

/// Checks that the leaf whose hash is `leaf_hash` sits at `proof.index` in the tree that
/// `digest` describes (RFC 9162 §2.1.3.2). `leaf_hash` is the RFC leaf hash
/// ([`HistoryLeaf::hash`]), never the raw data. The proof's size must be the digest's, the
/// index below it and the path exactly as long as that position needs (no hash more or fewer);
/// then the root recomputed from the leaf up must be the digest's.
///
/// Cost: one node hash per path entry (at most 64), no allocation.
///
/// ```
/// use cairn_proof::history::{leaf_hash, verify_inclusion};
/// use cairn_proof::reference::MemHistory;
/// let mut tree = MemHistory::new();
/// for i in 0..5u8 {
///     tree.append(leaf_hash(&[i]));
/// }
/// let proof = tree.prove_inclusion(2, 5).unwrap();
/// let digest = tree.digest();
/// assert!(verify_inclusion(&leaf_hash(&[2]), &proof, &digest).is_ok());
/// assert!(verify_inclusion(&leaf_hash(&[3]), &proof, &digest).is_err());
/// ```
pub fn verify_inclusion(
    leaf_hash: &Hash,
    proof: &InclusionProof,
    digest: &Digest,
) -> Result<(), HistoryVerifyError> {
    check_size(digest.size)?;
    if proof.size != digest.size {
        return Err(HistoryVerifyError::SizeMismatch {
            what: "tree",
            proof: proof.size,
            digest: digest.size,
        });
    }
    // Step 1: the index must be inside the tree (this also refuses the empty tree).
    if proof.index >= proof.size {
        return Err(HistoryVerifyError::IndexBeyondSize {
            index: proof.index,
            size: proof.size,
        });
    }
    let r = root_from_inclusion(leaf_hash, proof.index, proof.size, &proof.path)?;
    if r != digest.root {
        return Err(HistoryVerifyError::RootMismatch);
    }
    Ok(())
}

/// The root of the tree of `size` leaves in which the leaf whose hash is `leaf_hash` sits at
/// `index` with audit path `path` (RFC 9162 §2.1.3.2, steps 1 to 5): what
/// [`verify_inclusion`] compares with a digest's root, for a caller that has no root to
/// compare with yet (a ledger root recomputed from one table's entry, `crate::ledger`). The
/// index must be below the size and the path exactly as long as that position needs.
///
/// Cost: one node hash per path entry (at most 64), no allocation.
pub fn root_from_inclusion(
    leaf_hash: &Hash,
    index: u64,
    size: u64,
    path: &[Hash],
) -> Result<Hash, HistoryVerifyError> {
    check_size(size)?;
    if index >= size {
        return Err(HistoryVerifyError::IndexBeyondSize { index, size });
    }
    let expected = walk_steps(index, size - 1);
    if path.len() != expected {
        return Err(HistoryVerifyError::PathLength {
            expected,
            actual: path.len(),
        });
    }
    // Steps 2 to 5, as the RFC writes them (the length check above makes the `sn == 0` checks
    // redundant; they stay, as the RFC's own guard).
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf_hash;
    for p in path {
        if sn == 0 {
            return Err(path_length(expected, path.len()));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(path_length(expected, path.len()));
    }
    Ok(r)
}

/// Checks that the tree `old` describes is a prefix of the tree `new` describes (RFC 9162
/// §2.1.4.2): every leaf of the old tree is in the new one, at the same position. The proof's
/// sizes must be the digests'. Edge rules: an old size of 0 is refused (there is nothing to
/// prove from the empty tree: trust the first digest on first use, or pin it); an old size
/// above the new is refused; equal sizes need an empty path and equal roots. Otherwise the path
/// must be exactly as long as the two sizes need; both roots are recomputed from it and must be
/// the digests'.
///
/// Cost: at most two node hashes per path entry (at most 64 entries), no allocation.
///
/// ```
/// use cairn_proof::history::{leaf_hash, verify_consistency};
/// use cairn_proof::reference::MemHistory;
/// let mut tree = MemHistory::new();
/// for i in 0..3u8 {
///     tree.append(leaf_hash(&[i]));
/// }
/// let old = tree.digest();
/// for i in 3..7u8 {
///     tree.append(leaf_hash(&[i]));
/// }
/// let proof = tree.prove_consistency(3, 7).unwrap();
/// assert!(verify_consistency(&old, &tree.digest(), &proof).is_ok());
/// ```
pub fn verify_consistency(
    old: &Digest,
    new: &Digest,
    proof: &ConsistencyProof,
) -> Result<(), HistoryVerifyError> {
    check_size(old.size)?;
    check_size(new.size)?;
    if proof.old_size != old.size {
        return Err(HistoryVerifyError::SizeMismatch {
            what: "old tree",
            proof: proof.old_size,
            digest: old.size,
        });
    }
    if proof.new_size != new.size {
        return Err(HistoryVerifyError::SizeMismatch {
            what: "new tree",
            proof: proof.new_size,
            digest: new.size,
        });
    }
    if old.size == 0 {
        return Err(HistoryVerifyError::EmptyOld);
    }
    if old.size > new.size {
        return Err(HistoryVerifyError::OldAfterNew {
            old_size: old.size,
            new_size: new.size,
        });
    }
    if old.size == new.size {
        if !proof.path.is_empty() {
            return Err(path_length(0, proof.path.len()));
        }
        if old.root != new.root {
            return Err(HistoryVerifyError::RootMismatch);
        }
        return Ok(());
    }
    let expected = consistency_path_len(old.size, new.size);
    if proof.path.len() != expected {
        return Err(path_length(expected, proof.path.len()));
    }
    // Steps 1 and 2: an empty path was refused above; a power-of-two old tree is a complete
    // subtree of the new one, whose root the client already holds, so it seeds the walk.
    let mut path = proof.path.iter();
    let seed = if old.size.is_power_of_two() {
        old.root
    } else {
        match path.next() {
            Some(first) => *first,
            None => return Err(path_length(expected, 0)),
        }
    };
    // Steps 3 and 4.
    let (mut fn_, mut sn) = (old.size - 1, new.size - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    // Steps 5 and 6.
    let (mut fr, mut sr) = (seed, seed);
    for c in path {
        if sn == 0 {
            return Err(path_length(expected, proof.path.len()));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 7.
    if sn != 0 {
        return Err(path_length(expected, proof.path.len()));
    }
    if fr != old.root {
        return Err(HistoryVerifyError::OldRootMismatch);
    }
    if sr != new.root {
        return Err(HistoryVerifyError::NewRootMismatch);
    }
    Ok(())
}

/// Hashes in the inclusion proof of leaf `index` in a tree of `size` leaves (`index < size`):
/// the RFC verifier's walk, counted. At most `⌈log₂ size⌉`. Cost: at most 64 shifts.
///
/// # Panics
/// If `index >= size`.
pub fn inclusion_path_len(index: u64, size: u64) -> usize {
    assert!(
        index < size,
        "leaf index {index} is not below the size {size}"
    );
    walk_steps(index, size - 1)
}

/// Hashes in the consistency proof between trees of `old_size` and `new_size` leaves
/// (`0 < old_size <= new_size`; 0 when they are equal): the RFC verifier's walk, counted, plus
/// the seed when `old_size` is not a power of two. At most `⌈log₂ new_size⌉ + 1`. Cost: at
/// most 64 shifts.
///
/// # Panics
/// If `old_size` is 0 or above `new_size`.
pub fn consistency_path_len(old_size: u64, new_size: u64) -> usize {
    assert!(
        0 < old_size && old_size <= new_size,
        "no consistency proof from {old_size} to {new_size} leaves"
    );
    if old_size == new_size {
        return 0;
    }
    let (mut fn_, mut sn) = (old_size - 1, new_size - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    usize::from(!old_size.is_power_of_two()) + walk_steps(fn_, sn)
}

/// How many path entries the RFC's walk from `(fn, sn)` consumes before `sn` reaches 0: the
/// loops of §2.1.3.2 and §2.1.4.2 without the hashing. At most 64 (one shift per step).
fn walk_steps(mut fn_: u64, mut sn: u64) -> usize {
    let mut steps = 0;
    while sn != 0 {
        if fn_ & 1 == 0 && fn_ == sn {
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        }
        fn_ >>= 1;
        sn >>= 1;
        steps += 1;
    }
    steps
}

/// The stored nodes a prover reads: `node(level, i)` is the root of the complete subtree of
/// the `2^level` leaves from `i · 2^level` (`level` 0: the leaf hashes). Every node a proof
/// asks for is of a subtree complete in the tree proved against; an `Err` (a read that
/// failed) ends the proof with it.
pub type NodeFn<'a, E> = dyn FnMut(u32, u64) -> Result<Hash, E> + 'a;

/// The root of the first `size` leaves of a tree of `len` leaves (`size <= len`), from its
/// stored nodes: [`EMPTY_ROOT`] for 0. Cost: one node read per bit set in `size` and as many
/// node hashes less one.
pub fn root_from_nodes<E: From<HistoryProveError>>(
    len: u64,
    size: u64,
    node: &mut NodeFn<'_, E>,
) -> Result<Hash, E> {
    if size > len {
        return Err(HistoryProveError::SizeBeyondTree { size, len }.into());
    }
    if size == 0 {
        return Ok(EMPTY_ROOT);
    }
    subtree(0, size, node)
}

/// The inclusion proof of leaf `index` in the first `size` leaves of a tree of `len` leaves
/// (RFC 9162 §2.1.3.1, `PATH(m, D[n])`), from its stored nodes: `index < size <= len`. Cost:
/// at most `2·⌈log₂ size⌉` node reads and `⌈log₂ size⌉` node hashes (the subtrees along the
/// tree's right edge are hashed from their complete parts).
pub fn prove_inclusion_from<E: From<HistoryProveError>>(
    len: u64,
    index: u64,
    size: u64,
    node: &mut NodeFn<'_, E>,
) -> Result<InclusionProof, E> {
    if size > len {
        return Err(HistoryProveError::SizeBeyondTree { size, len }.into());
    }
    if index >= size {
        return Err(HistoryProveError::IndexBeyondSize { index, size }.into());
    }
    let mut path = Vec::new();
    inclusion_path(index, 0, size, node, &mut path)?;
    Ok(InclusionProof { index, size, path })
}

/// The consistency proof between the first `old_size` and the first `new_size` leaves of a
/// tree of `len` leaves (RFC 9162 §2.1.4.1, `PROOF(m, D[n])`), from its stored nodes:
/// `0 < old_size <= new_size <= len`; equal sizes give an empty path. Cost: as
/// [`prove_inclusion_from`].
pub fn prove_consistency_from<E: From<HistoryProveError>>(
    len: u64,
    old_size: u64,
    new_size: u64,
    node: &mut NodeFn<'_, E>,
) -> Result<ConsistencyProof, E> {
    if new_size > len {
        return Err(HistoryProveError::SizeBeyondTree {
            size: new_size,
            len,
        }
        .into());
    }
    if old_size == 0 {
        return Err(HistoryProveError::EmptyOld.into());
    }
    if old_size > new_size {
        return Err(HistoryProveError::OldAfterNew { old_size, new_size }.into());
    }
    let mut path = Vec::new();
    if old_size < new_size {
        subproof(old_size, 0, new_size, true, node, &mut path)?;
    }
    Ok(ConsistencyProof {
        old_size,
        new_size,
        path,
    })
}

/// `MTH(D[lo:hi])`, `lo < hi`: a stored node when the range is an aligned power of two, else
/// the RFC's split (only the ranges along a tree's right edge are not aligned).
fn subtree<E>(lo: u64, hi: u64, node: &mut NodeFn<'_, E>) -> Result<Hash, E> {
    debug_assert!(lo < hi);
    let n = hi - lo;
    if n.is_power_of_two() && lo.is_multiple_of(n) {
        let level = n.trailing_zeros();
        return node(level, lo >> level);
    }
    let k = split(n);
    Ok(node_hash(
        &subtree(lo, lo + k, node)?,
        &subtree(lo + k, hi, node)?,
    ))
}

/// `PATH(index - lo, D[lo:hi])`, appended to `out` from the bottom up.
fn inclusion_path<E>(
    index: u64,
    lo: u64,
    hi: u64,
    node: &mut NodeFn<'_, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    if hi - lo == 1 {
        return Ok(());
    }
    let mid = lo + split(hi - lo);
    if index < mid {
        inclusion_path(index, lo, mid, node, out)?;
        out.push(subtree(mid, hi, node)?);
    } else {
        inclusion_path(index, mid, hi, node, out)?;
        out.push(subtree(lo, mid, node)?);
    }
    Ok(())
}

/// `SUBPROOF(old - lo, D[lo:hi], whole)`, appended to `out` from the bottom up; `old` is the
/// old tree's size, `lo < old <= hi`.
fn subproof<E>(
    old: u64,
    lo: u64,
    hi: u64,
    whole: bool,
    node: &mut NodeFn<'_, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    if old == hi {
        if !whole {
            out.push(subtree(lo, hi, node)?);
        }
        return Ok(());
    }
    let mid = lo + split(hi - lo);
    if old <= mid {
        subproof(old, lo, mid, whole, node, out)?;
        out.push(subtree(mid, hi, node)?);
    } else {
        subproof(old, mid, hi, false, node, out)?;
        out.push(subtree(lo, mid, node)?);
    }
    Ok(())
}

/// The complete subtrees an append of leaf `index` finishes, as `(level, i)` from level 1 up:
/// one per trailing one bit of `index` (amortised one, at most 63). A durable tree stores
/// their roots with the leaf, so that every node a proof reads exists.
pub fn completed_by(index: u64) -> impl Iterator<Item = (u32, u64)> {
    (1..=index.trailing_ones()).map(move |level| (level, (index + 1) / (1u64 << level) - 1))
}

fn check_size(size: u64) -> Result<(), HistoryVerifyError> {
    if size > SIZE_MAX {
        return Err(HistoryVerifyError::SizeTooLarge { size });
    }
    Ok(())
}

fn path_length(expected: usize, actual: usize) -> HistoryVerifyError {
    HistoryVerifyError::PathLength { expected, actual }
}

fn header(ty: u8) -> [u8; HEADER_BYTES] {
    let m = HISTORY_MAGIC;
    [
        m[0],
        m[1],
        m[2],
        m[3],
        HISTORY_FORMAT_VERSION,
        HASH_SHA256,
        ty,
        0,
    ]
}

fn encode_proof(ty: u8, first: u64, second: u64, path: &[Hash]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PROOF_FIXED_BYTES + 32 * path.len());
    out.extend_from_slice(&header(ty));
    out.extend_from_slice(&first.to_be_bytes());
    out.extend_from_slice(&second.to_be_bytes());
    // A path too long to decode keeps a count the decoder refuses (255 at most).
    out.push(u8::try_from(path.len()).unwrap_or(u8::MAX));
    for h in path {
        out.extend_from_slice(h);
    }
    out
}

/// The name of a structure type code, for errors.
fn type_name(ty: u8) -> &'static str {
    match ty {
        TYPE_DIGEST => "digest",
        TYPE_INCLUSION => "inclusion proof",
        TYPE_CONSISTENCY => "consistency proof",
        _ => "unknown structure",
    }
}

/// Reads an encoding front to back; every read checks the length first.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HistoryDecodeError> {
        if n > self.remaining() {
            return Err(HistoryDecodeError::Truncated {
                what,
                needed: n - self.remaining(),
            });
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HistoryDecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, HistoryDecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_be_bytes(b))
    }

    /// A tree size: a u64 of at most [`SIZE_MAX`].
    fn size(&mut self, what: &'static str) -> Result<u64, HistoryDecodeError> {
        let size = self.u64(what)?;
        if size > SIZE_MAX {
            return Err(HistoryDecodeError::SizeTooLarge { what, size });
        }
        Ok(size)
    }

    fn hash(&mut self, what: &'static str) -> Result<Hash, HistoryDecodeError> {
        let mut h = [0u8; 32];
        h.copy_from_slice(self.take(32, what)?);
        Ok(h)
    }

    fn header(&mut self, ty: u8) -> Result<(), HistoryDecodeError> {
        if self.take(4, "magic")? != HISTORY_MAGIC {
            return Err(HistoryDecodeError::BadMagic);
        }
        let h = self.take(4, "header")?;
        if h[0] != HISTORY_FORMAT_VERSION {
            return Err(HistoryDecodeError::UnsupportedVersion(h[0]));
        }
        if h[1] != HASH_SHA256 {
            return Err(HistoryDecodeError::UnknownHashKind(h[1]));
        }
        if h[2] != ty {
            return Err(HistoryDecodeError::WrongType {
                expected: type_name(ty),
                found: h[2],
            });
        }
        if h[3] != 0 {
            return Err(HistoryDecodeError::Reserved);
        }
        Ok(())
    }

    /// A path: its count (at most [`PATH_HASHES_MAX`], checked before anything is allocated)
    /// and its hashes.
    fn path(&mut self) -> Result<Vec<Hash>, HistoryDecodeError> {
        let count = self.u8("path count")? as usize;
        if count > PATH_HASHES_MAX {
            return Err(HistoryDecodeError::PathTooLong(count));
        }
        if 32 * count > self.remaining() {
            return Err(HistoryDecodeError::Truncated {
                what: "path hashes",
                needed: 32 * count - self.remaining(),
            });
        }
        (0..count).map(|_| self.hash("path hash")).collect()
    }

    fn finish(&self) -> Result<(), HistoryDecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(HistoryDecodeError::TrailingBytes(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_root_is_sha256_of_nothing() {
        use sha2::{Digest as _, Sha256};
        let h: Hash = Sha256::digest(b"").into();
        assert_eq!(h, EMPTY_ROOT);
        assert_eq!(root_of(&[]), EMPTY_ROOT);
    }

    #[test]
    fn split_is_the_largest_power_of_two_below() {
        for n in 2u64..2000 {
            let k = split(n);
            assert!(k.is_power_of_two() && k < n && 2 * k >= n, "{n}: {k}");
        }
        assert_eq!(split(SIZE_MAX), SIZE_MAX / 2);
        assert_eq!(split(u64::MAX), SIZE_MAX);
    }

    /// The walk's counts against closed forms: an inclusion path climbs the levels where the
    /// index and the last index differ, then one level per set bit above them (a left sibling).
    #[test]
    fn path_lengths_match_their_closed_forms() {
        let inclusion = |index: u64, size: u64| {
            let inner = 64 - (index ^ (size - 1)).leading_zeros();
            (inner + (index.checked_shr(inner).unwrap_or(0)).count_ones()) as usize
        };
        let consistency = |old: u64, new: u64| {
            let shift = old.trailing_zeros();
            let inner = 64 - ((old - 1) ^ (new - 1)).leading_zeros();
            let border = ((old - 1).checked_shr(inner).unwrap_or(0)).count_ones();
            (inner - shift + border) as usize + usize::from(!old.is_power_of_two())
        };
        for size in 1u64..130 {
            for index in 0..size {
                assert_eq!(inclusion_path_len(index, size), inclusion(index, size));
            }
            for old in 1..size {
                assert_eq!(consistency_path_len(old, size), consistency(old, size));
            }
        }
        // The bounds: 64 hashes at most up to SIZE_MAX leaves.
        assert_eq!(inclusion_path_len(0, SIZE_MAX), 63);
        assert_eq!(inclusion_path_len(SIZE_MAX - 1, SIZE_MAX), 63);
        assert_eq!(consistency_path_len(3, SIZE_MAX), 64);
        assert_eq!(consistency_path_len(SIZE_MAX - 1, SIZE_MAX), 64);
        assert_eq!(inclusion_path_len(0, u64::MAX), 64);
        assert_eq!(consistency_path_len(3, u64::MAX), 65);
    }

    #[test]
    fn leaf_round_trip_and_refusals() {
        let leaf = HistoryLeaf {
            version: 0x0102_0304_0506_0708,
            ledger_root: [7; 32],
            meta: [9; 32],
        };
        let bytes = leaf.encode();
        assert_eq!(bytes[..9], [1, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(HistoryLeaf::decode(&bytes), Ok(leaf));
        assert!(matches!(
            HistoryLeaf::decode(&bytes[..72]),
            Err(HistoryDecodeError::Truncated { needed: 1, .. })
        ));
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_eq!(
            HistoryLeaf::decode(&longer),
            Err(HistoryDecodeError::TrailingBytes(1))
        );
        let mut other = bytes;
        other[0] = 2;
        assert_eq!(
            HistoryLeaf::decode(&other),
            Err(HistoryDecodeError::UnsupportedVersion(2))
        );
        assert_eq!(leaf.hash(), leaf_hash(&bytes));
    }
}

//! Cairn's state roots and proofs, with a verifier that does no I/O.
//!
//! An authenticated Cairn table commits to its contents with a **state root**: the root of a
//! binary Merkle-Patricia trie over hashed keys, which depends on the set of `(key, value,
//! blob)` it holds and on nothing else (`docs/format/trie.md`). The table answers proof requests
//! with a [`Proof`] (`docs/format/proof.md`); this crate checks one against a root, with no I/O,
//! no `unsafe` and no `std` (it needs `alloc`), so a light client or a WASM module can link it
//! alone. The engine depends on this crate, never the other way round.
//!
//! [`Proof::root_after`] is stateless block verification: from a proof of the version before
//! and a batch of [`Update`]s, the root after them, as the engine computes it, or a typed
//! error when the proof does not hold enough of the trie to know it.
//!
//! The [`history`] module holds the ledger's history tree: an append-only Merkle tree over
//! commits, hashed exactly as RFC 9162 §2.1 defines it, with inclusion and consistency proofs
//! (`docs/format/history.md`) and their verifiers; [`reference::MemHistory`] makes them.
//!
//! The [`ledger`] module holds what a ledger's client checks: the ledger root over named
//! tables, and receipts proving what keys held at a version against a trusted digest
//! (`docs/format/ledger.md`), fresh (the newest version) or of the past. The [`range`] module
//! proves a range answer over an *ordered* table complete: no key of the range left out. The
//! [`shard`] module splits the trie by key path over `2^bits` shards and combines their
//! subtrees into the one global root, lifting each shard's proofs onto it.
//!
//! ```
//! use cairn_proof::{reference::MemTrie, Claim, HashKind, Leaf};
//! let kind = HashKind::Sha256;
//! // A stand-in for a table: the reference trie over two entries.
//! let trie = MemTrie::new(kind, [(&b"alice"[..], &b"10"[..], None), (b"bob", b"20", None)]);
//! let root = trie.root();
//! let proof = trie.prove(&[b"alice", b"carol"]).encode();
//! let claims = [Claim::present(b"alice", b"10"), Claim::absent(b"carol")];
//! assert!(cairn_proof::verify(&root, &proof, &claims).is_ok());
//! assert!(cairn_proof::verify(&root, &proof, &[Claim::present(b"alice", b"11")]).is_err());
//! # let _ = Leaf::new(kind, b"k", b"v", None);
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
extern crate alloc;

pub mod block;
mod error;
pub mod hash;
pub mod history;
pub mod ledger;
mod proof;
pub mod range;
pub mod reference;
mod sha256;
pub mod shard;
mod trie;
mod update;

pub use error::{
    BuildError, DecodeError, HistoryDecodeError, HistoryProveError, HistoryVerifyError,
    LedgerError, RangeDecodeError, RangeVerifyError, ReceiptDecodeError, ReceiptVerifyError,
    RootAfterError, ShardError, VerifyError,
};
pub use hash::{Hash, HashKind, Leaf, ZERO};
pub use history::{
    verify_consistency, verify_inclusion, ConsistencyProof, Digest, HistoryLeaf, InclusionProof,
};
pub use ledger::{verify_receipt, verify_receipt_at, Receipt, ReceiptTable, TableClaims};
pub use proof::{
    verify, Claim, CompactProof, Expect, Proof, ProofNode, ProofWriter, TopWitness,
    COMPACT_LEVELS_MAX, MAGIC, PROOF_VERSION,
};
pub use range::{verify_range, verify_range_at, Link, RangeAnswer};
pub use shard::{ShardMap, ShardedRoot, Subtree, SHARD_BITS_MAX};
pub use trie::{root_of, root_of_sorted, subtree_of_sorted, Root, RootBuilder};
pub use update::{root_after, Change, Update};

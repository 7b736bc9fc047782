//! Block audits: an auditor that holds a ledger's digest and its tables' roots at some version
//! checks a *block* of the versions after it, without any of the ledger's data: every change
//! each version made, and that those changes, and nothing else, turn each table's root into
//! the next (`docs/ledger.md`, "Audit").
//!
//! Owns: [`Block`], [`BlockVersion`], [`TableChanges`], [`AuditState`], [`verify_block`].
//! May call: `history` (inclusion and consistency), `ledger` (the ledger root), the proofs'
//! [`crate::Proof::root_after`]. Must never allocate more than the block's size.
//!
//! For each version `v` of the block, in order, the auditor checks:
//!
//! 1. for each table the version changed, the multiproof of the changed keys as of `v − 1`
//!    against the table's root at `v − 1` (the one it holds), and the root after the changes
//!    ([`crate::Proof::root_after`]) equal to the root `v` records; each other table's root is
//!    unchanged;
//! 2. the ledger root of the recorded roots equal to the leaf's;
//! 3. the leaf included at index `v − 1` in the block's digest;
//!
//! and, once, the block's digest consistent with the digest it held. What passes is exactly
//! the history the ledger committed: no change left out, none added, no version skipped.

use alloc::vec::Vec;

use crate::history::{verify_consistency, verify_inclusion};
use crate::ledger::ledger_root;
use crate::update::Update;
use crate::{ConsistencyProof, Digest, HistoryLeaf, InclusionProof, Proof, Root};

/// What an auditor holds between blocks: the digest it trusts and every table's root at that
/// digest's newest version (in table-name order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditState {
    /// The digest (size = the newest version audited).
    pub digest: Digest,
    /// Each table's root at that version.
    pub roots: Vec<Root>,
}

/// The changes one version made to one table: every stored key it wrote (sorted) with its new
/// value (`None`: deleted), and a proof of those keys as of the version before.
#[derive(Clone, Debug)]
pub struct TableChanges {
    /// The table's index (in name order).
    pub index: u32,
    /// (key, new value), sorted by key, each key once.
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The keys' proof against the table's root at the version before.
    pub proof: Proof,
}

/// One version of a block.
#[derive(Clone, Debug)]
pub struct BlockVersion {
    /// Its history leaf (version, ledger root, metadata hash).
    pub leaf: HistoryLeaf,
    /// Every table's root at the version, in table-name order.
    pub roots: Vec<Root>,
    /// The tables it changed, by increasing index.
    pub changes: Vec<TableChanges>,
    /// The leaf's inclusion in the block's digest.
    pub inclusion: InclusionProof,
}

/// The versions after an auditor's digest up to a newer one.
#[derive(Clone, Debug)]
pub struct Block {
    /// The digest after the block's last version.
    pub digest: Digest,
    /// From the auditor's digest to [`Block::digest`].
    pub consistency: ConsistencyProof,
    /// Every version from the auditor's size + 1 to the digest's size, in order.
    pub versions: Vec<BlockVersion>,
}

/// Why a block was refused; `version` names the version that failed, where there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockError {
    /// The block's digest is not consistent with the auditor's.
    Consistency,
    /// The versions are not exactly those after the auditor's digest up to the block's.
    Versions,
    /// A version records a number of roots other than the tables'.
    RootCount {
        /// The version.
        version: u64,
    },
    /// A version's changes are out of order, name a table twice or one that does not exist, or
    /// list a key twice or out of order.
    Changes {
        /// The version.
        version: u64,
    },
    /// A table's changes do not turn its root into the recorded one (or their proof is not of
    /// the root before).
    Root {
        /// The version.
        version: u64,
        /// The table's index.
        table: u32,
    },
    /// A table's changes delete a key whose sibling subtree the proof gives only by its hash
    /// ([`crate::RootAfterError::SiblingNotOpened`]): the block cannot be checked (the engine's
    /// prover does not open siblings yet), which is not a finding against it.
    NeedsSiblings {
        /// The version.
        version: u64,
        /// The table's index.
        table: u32,
    },
    /// A table the version did not change has another root.
    Unchanged {
        /// The version.
        version: u64,
        /// The table's index.
        table: u32,
    },
    /// The recorded roots do not make the leaf's ledger root.
    LedgerRoot {
        /// The version.
        version: u64,
    },
    /// The leaf is not in the block's digest at its place.
    Inclusion {
        /// The version.
        version: u64,
    },
}

impl core::fmt::Display for BlockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BlockError::Consistency => write!(f, "the block's digest is not consistent"),
            BlockError::Versions => write!(f, "the block's versions do not follow the digest"),
            BlockError::RootCount { version } => write!(f, "version {version}: wrong root count"),
            BlockError::Changes { version } => write!(f, "version {version}: malformed changes"),
            BlockError::Root { version, table } => {
                write!(
                    f,
                    "version {version}: table {table}'s changes do not make its root"
                )
            }
            BlockError::NeedsSiblings { version, table } => write!(
                f,
                "version {version}: table {table} deletes a key whose sibling is not opened"
            ),
            BlockError::Unchanged { version, table } => {
                write!(
                    f,
                    "version {version}: table {table} changed without changes listed"
                )
            }
            BlockError::LedgerRoot { version } => {
                write!(
                    f,
                    "version {version}: the roots do not make the ledger root"
                )
            }
            BlockError::Inclusion { version } => {
                write!(f, "version {version}: the leaf is not in the digest")
            }
        }
    }
}

/// Checks `block` against `state` (tables named `names`, in name order) and returns the state
/// after it. Cost: one consistency check, and per version one inclusion check (`⌈log₂ n⌉` node
/// hashes), one ledger root (two hashes per table) and, per table changed, the proof's hashes
/// twice plus about 256 per key at most ([`crate::Proof::root_after`]).
pub fn verify_block(
    names: &[&[u8]],
    state: &AuditState,
    block: &Block,
) -> Result<AuditState, BlockError> {
    if state.roots.len() != names.len() {
        return Err(BlockError::RootCount {
            version: state.digest.size,
        });
    }
    if block.digest.size < state.digest.size
        || block.versions.len() as u64 != block.digest.size - state.digest.size
    {
        return Err(BlockError::Versions);
    }
    verify_consistency(&state.digest, &block.digest, &block.consistency)
        .map_err(|_| BlockError::Consistency)?;
    let mut roots = state.roots.clone();
    for (i, v) in block.versions.iter().enumerate() {
        let version = state.digest.size + 1 + i as u64;
        if v.leaf.version != version || v.inclusion.index != version - 1 {
            return Err(BlockError::Versions);
        }
        if v.roots.len() != names.len() {
            return Err(BlockError::RootCount { version });
        }
        let mut changed = v.changes.iter().peekable();
        for (t, (old, new)) in roots.iter().zip(&v.roots).enumerate() {
            match changed.next_if(|c| c.index as usize == t) {
                Some(c) => {
                    if c.writes.windows(2).any(|w| w[0].0 >= w[1].0) {
                        return Err(BlockError::Changes { version });
                    }
                    let updates: Vec<Update<'_>> = c
                        .writes
                        .iter()
                        .map(|(k, v)| Update::write(k, v.as_deref()))
                        .collect();
                    let after = c.proof.root_after(old, &updates).map_err(|e| match e {
                        crate::RootAfterError::SiblingNotOpened { .. } => {
                            BlockError::NeedsSiblings {
                                version,
                                table: t as u32,
                            }
                        }
                        _ => BlockError::Root {
                            version,
                            table: t as u32,
                        },
                    })?;
                    if after != *new {
                        return Err(BlockError::Root {
                            version,
                            table: t as u32,
                        });
                    }
                }
                None if old != new => {
                    return Err(BlockError::Unchanged {
                        version,
                        table: t as u32,
                    })
                }
                None => {}
            }
        }
        // Changes left over: out of order, repeated or beyond the tables.
        if changed.next().is_some() {
            return Err(BlockError::Changes { version });
        }
        let pairs: Vec<(&[u8], Root)> =
            names.iter().copied().zip(v.roots.iter().copied()).collect();
        let ledger = ledger_root(&pairs).map_err(|_| BlockError::LedgerRoot { version })?;
        if ledger != v.leaf.ledger_root {
            return Err(BlockError::LedgerRoot { version });
        }
        verify_inclusion(&v.leaf.hash(), &v.inclusion, &block.digest)
            .map_err(|_| BlockError::Inclusion { version })?;
        roots.clone_from(&v.roots);
    }
    Ok(AuditState {
        digest: block.digest,
        roots,
    })
}

//! Blocks for auditors: the versions after an auditor's digest, each with every change it made
//! and the proofs that let [`cairn_proof::block::verify_block`] check them with no data of its
//! own (`docs/ledger.md`, "Audit").
//!
//! Owns: [`Ledger::block`] and [`Ledger::audit_state`]. May call: the ledger's state and its
//! window (its parent module and sibling: the kept versions and their undo records),
//! `records`, the engine's tables (lookups and proofs). Must never write.
//!
//! A version's changes are the stored keys its undo record names (so the window must hold the
//! block: [`crate::LedgerConfig::history`] at least the versions between the auditor and the newest),
//! their values in the version's tables, and their proof in the tables of the version before.

use std::collections::BTreeMap;

use cairn_proof::block::{AuditState, Block, BlockVersion, TableChanges};

use super::{Ledger, State};
use crate::error::{Error, Result};
use crate::records::{undo_key, Undo};

impl Ledger {
    /// What an auditor starts from at version `version` (within the window, or the newest):
    /// the digest of that size and every table's root then. The auditor takes the digest on
    /// trust (or checks it against one it was given) and the roots from a receipt; here they
    /// come from the ledger's own record. Errors: [`Error::NoSuchVersion`],
    /// [`Error::VersionPruned`], the engine's.
    pub fn audit_state(&self, version: u64) -> Result<AuditState> {
        let info = self.version_info(version)?;
        Ok(AuditState {
            digest: self.digest_at(version)?,
            roots: info.roots.into_iter().map(|(_, r)| r).collect(),
        })
    }

    /// The versions `from + 1 ..= to` for an auditor holding the digest of size `from`: each
    /// version's leaf, roots, changes with their proofs as of the version before, and leaf
    /// inclusion in the digest of size `to`; and the consistency proof from `from` to `to`.
    /// Every version from `from` on must be in the window ([`crate::LedgerConfig::history`]).
    ///
    /// Cost per version: one undo record read, one batched lookup and one multiproof per table
    /// it changed, one inclusion proof (`⌈log₂ n⌉` history nodes).
    ///
    /// Errors: [`Error::NoSuchVersion`] for `from` 0 (an auditor starts from a version:
    /// [`Ledger::audit_state`]), `to` beyond the newest or `from > to`,
    /// [`Error::VersionPruned`] for versions the window no longer holds, [`Error::Corrupted`]
    /// for a missing undo record, the engine's.
    pub fn block(&self, from: u64, to: u64) -> Result<Block> {
        let state = self.read_state();
        let newest = state.history.size();
        if from == 0 {
            return Err(Error::NoSuchVersion { version: 0, newest });
        }
        if from > to || to > newest {
            return Err(Error::NoSuchVersion {
                version: to,
                newest,
            });
        }
        let digest = state.history.digest_at(&self.history, to)?;
        let consistency = state.history.prove_consistency(&self.history, from, to)?;
        let mut versions = Vec::with_capacity((to - from) as usize);
        for v in from + 1..=to {
            versions.push(self.block_version(&state, v, to)?);
        }
        Ok(Block {
            digest,
            consistency,
            versions,
        })
    }

    fn block_version(&self, state: &State, version: u64, to: u64) -> Result<BlockVersion> {
        let record = self.read_version(version)?;
        let undo = match self.history.get(undo_key(version))? {
            Some(bytes) => Undo::decode(&bytes)?,
            None => {
                return Err(Error::corrupted(
                    format!("version {version}"),
                    "no undo record: the window did not hold it when it was committed",
                ))
            }
        };
        let mut by_table: BTreeMap<usize, Vec<Vec<u8>>> = BTreeMap::new();
        for (t, key, _) in undo.entries {
            by_table.entry(usize::from(t)).or_default().push(key);
        }
        let now = self.tables_at(state, version)?;
        let before = self.tables_at(state, version - 1)?;
        let mut changes = Vec::with_capacity(by_table.len());
        for (t, keys) in by_table {
            let (Some(now), Some(before)) = (now.get(t), before.get(t)) else {
                return Err(Error::corrupted(
                    format!("version {version}'s undo record"),
                    format!("table {t} does not exist"),
                ));
            };
            let values = now.lookups(&keys)?;
            let proof = before.prove(&keys)?.proof;
            changes.push(TableChanges {
                index: t as u32,
                writes: keys
                    .into_iter()
                    .zip(values)
                    .map(|(k, v)| (k, v.into_value()))
                    .collect(),
                proof,
            });
        }
        let inclusion = state
            .history
            .prove_inclusion(&self.history, version - 1, to)?;
        Ok(BlockVersion {
            leaf: record.leaf,
            roots: record.roots,
            changes,
            inclusion,
        })
    }
}

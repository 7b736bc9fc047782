//! The ledger's side of sharding (`cairn_proof::shard`): what a shard's ledger gives for the
//! global root over every shard's copy of a table.
//!
//! Owns: [`Ledger::table_witness`], [`TableWitness`]. May call: the ledger's state (its parent
//! module) and its window, the engine's tables (their top witnesses). Must never write.

use cairn_proof::{Proof, Root};

use super::Ledger;
use crate::error::{Error, Result};

/// A table's root and the top levels of its trie at one version: from it
/// [`cairn_proof::ShardMap::subtree`] reads the shard's subtree that the global root combines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableWitness {
    /// The version it is of (the newest when it was read).
    pub version: u64,
    /// The table's root at that version.
    pub root: Root,
    /// The table trie's top `levels` levels at that version (a proof with no keys).
    pub top: Proof,
}

impl Ledger {
    /// Table `table`'s root and top `levels` levels (1 to 16) at the newest version, taken
    /// together (no commit between them).
    ///
    /// Cost: the top levels' trie nodes (at most `2^(levels+1)` node hashes, from memory or
    /// the page log).
    ///
    /// Errors: [`Error::NoSuchTable`]; [`Error::NoSuchVersion`] before the first commit;
    /// [`Error::InvalidConfig`] for `levels` out of range; the engine's.
    pub fn table_witness(&self, table: &str, levels: u8) -> Result<TableWitness> {
        let t = self.table_index(table)?;
        if !(1..=cairn_proof::shard::SHARD_BITS_MAX).contains(&levels) {
            return Err(Error::InvalidConfig(format!(
                "a table witness holds 1 to {} levels, not {levels}",
                cairn_proof::shard::SHARD_BITS_MAX
            )));
        }
        let state = self.read_state();
        let newest = state.history.size();
        let Some(head) = &state.head else {
            return Err(Error::NoSuchVersion {
                version: newest,
                newest,
            });
        };
        let tables = self.tables_at(&state, newest)?;
        Ok(TableWitness {
            version: newest,
            root: head.roots[t],
            top: tables[t].top_witness(levels)?,
        })
    }
}

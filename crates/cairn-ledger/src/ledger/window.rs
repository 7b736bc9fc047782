//! The window of versions kept provable (`LedgerConfig::history`): the duplicates of the tables
//! kept in memory, the undo records that rebuild them at open, and their pruning.
//!
//! Owns: [`WindowInfo`], the window's part of the ledger's state (`Retained`), undo records
//! (what a commit writes, pruning, the rebuild at open, one undo step for the audit). May call:
//! the ledger's state (its parent module), `records` (undo records and keys), the engine's
//! tables. Must never touch: the history tree or the commit protocol's order (the ledger writes
//! each undo record in its commit's first log record).
//!
//! Bounds: a commit with the window on costs one batched lookup per table it writes (the undo
//! record) and one O(1) duplicate per table; the window holds at most `history + 1` versions.
//! An open rebuilds each kept version with its undo record's updates and one trie commit per
//! table it touches.

use std::collections::BTreeSet;

use cairn::{Table, Update};

use super::{Ledger, State};
use crate::error::{Error, Result};
use crate::records::{decode_u64, undo_key, Undo, UNDO_PREFIX};

/// The window of versions kept provable ([`Ledger::window`]) and what it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowInfo {
    /// The oldest version kept provable (the newest when the window is off; 0 before the
    /// first commit).
    pub oldest: u64,
    /// The newest version.
    pub newest: u64,
    /// The versions whose undo record is stored, as `(first, last)`; `None` when there is
    /// none. With the window on they are exactly `oldest + 1 ..= newest`: each rebuilds the
    /// version before it at the next open.
    pub undo_versions: Option<(u64, u64)>,
    /// How many undo records are stored (each version at most one).
    pub undo_records: u64,
    /// The bytes of their encodings.
    pub undo_bytes: u64,
    /// The page-log segment files that some table of some version in the window reaches
    /// (the newest's included), sorted: what the window keeps of the tables' tries on disk.
    pub trie_files: Vec<std::path::PathBuf>,
}

/// What [`Ledger::undo_records`] found.
#[derive(Default)]
pub(crate) struct UndoRecords {
    pub(crate) versions: Option<(u64, u64)>,
    pub(crate) records: u64,
    pub(crate) bytes: u64,
}

/// What [`Ledger::undo_step`] rebuilt: the tables as of one version before, and those
/// (indices) whose root is not the one the version recorded.
pub(crate) struct UndoStep {
    pub(crate) tables: Vec<Table>,
    pub(crate) mismatched: Vec<usize>,
}

/// One version kept provable: a duplicate of each table as of that version.
pub(super) struct Retained {
    pub(super) version: u64,
    pub(super) tables: Vec<Table>,
}

impl Ledger {
    /// The tables as of `version`: the live ones for the newest, else the window's copies.
    pub(super) fn tables_at<'a>(
        &'a self,
        state: &'a State,
        version: u64,
    ) -> Result<&'a [cairn::Table]> {
        let newest = state.history.size();
        if version == newest {
            return Ok(&self.tables);
        }
        let oldest = state.window.front().map_or(newest, |r| r.version);
        state
            .window
            .iter()
            .find(|r| r.version == version)
            .map(|r| &r.tables[..])
            .ok_or(if version == 0 || version > newest {
                Error::NoSuchVersion { version, newest }
            } else {
                Error::VersionPruned { version, oldest }
            })
    }

    /// The window of versions kept provable and what it keeps on disk. Cost: a scan of the
    /// undo records and a walk of each kept table's segment list. The records are scanned
    /// without holding off commits: a commit meanwhile can make them one version newer than
    /// `newest`.
    ///
    /// Errors: the engine's.
    pub fn window(&self) -> Result<WindowInfo> {
        let (oldest, newest, files) = {
            // Under the read lock only what the state holds: the undo records are scanned
            // after it, so that commits do not wait for that I/O.
            let state = self.read_state();
            let newest = state.history.size();
            let oldest = state.window.front().map_or(newest, |r| r.version);
            let mut files: BTreeSet<std::path::PathBuf> = BTreeSet::new();
            for table in self
                .tables
                .iter()
                .chain(state.window.iter().flat_map(|r| &r.tables))
            {
                files.extend(table.trie_files()?);
            }
            (oldest, newest, files)
        };
        let undo = self.undo_records()?;
        Ok(WindowInfo {
            oldest,
            newest,
            undo_versions: undo.versions,
            undo_records: undo.records,
            undo_bytes: undo.bytes,
            trie_files: files.into_iter().collect(),
        })
    }

    /// The undo records stored: their first and last versions, count and bytes. Cost: a scan
    /// of them.
    pub(crate) fn undo_records(&self) -> Result<UndoRecords> {
        let mut out = UndoRecords::default();
        let mut first = None;
        for entry in self.history.prefix([UNDO_PREFIX])? {
            let entry = entry?;
            let version = decode_u64("undo record key", &entry.key[1..])?;
            let first = *first.get_or_insert(version);
            out.versions = Some((first, version));
            out.records += 1;
            out.bytes += entry.value.len() as u64;
        }
        Ok(out)
    }

    /// Keeps version `version` (the newest) provable if the window is on, and drops the
    /// versions that fall out of the window. Cost: one O(1) duplicate per table.
    pub(super) fn retain(&self, state: &mut State, version: u64) -> Result<()> {
        if self.keep == 0 {
            return Ok(());
        }
        let tables = self
            .tables
            .iter()
            .map(|t| t.duplicate())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        state.window.push_back(Retained { version, tables });
        while state
            .window
            .front()
            .is_some_and(|r| version - r.version > self.keep)
        {
            if let Some(old) = state.window.pop_front() {
                old.tables.iter().for_each(Table::close);
            }
        }
        Ok(())
    }

    /// The undo record of a commit writing the stored keys `written`: each key's value in the
    /// live tables (the newest version: called under the commit lock). Cost: one batched
    /// lookup per table written.
    pub(super) fn undo_of(&self, written: BTreeSet<(usize, Vec<u8>)>) -> Result<Undo> {
        // `written` is sorted by table, then key: one batched lookup per run of a table's
        // keys, which move into the record without a copy.
        let mut by_table: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
        for (t, key) in written {
            match by_table.last_mut() {
                Some((u, keys)) if *u == t => keys.push(key),
                _ => by_table.push((t, vec![key])),
            }
        }
        let mut entries = Vec::new();
        for (t, keys) in by_table {
            let before = self.tables[t].lookups(&keys)?;
            for (key, before) in keys.into_iter().zip(before) {
                entries.push((t as u16, key, before.into_value()));
            }
        }
        Ok(Undo { entries })
    }

    /// Deletes the undo records no window needs: those of versions up to `newest − keep`
    /// (every one with the window off), left by a larger window or by a crash between a
    /// commit's first and last records. Cost: a scan of the undo records, one write.
    pub(super) fn prune_undo(&self, newest: u64) -> Result<()> {
        if self.keep == u64::MAX {
            return Ok(());
        }
        let end = undo_key(newest.saturating_sub(self.keep).saturating_add(1));
        let start = [UNDO_PREFIX];
        let mut stale: Vec<Vec<u8>> = Vec::new();
        for entry in self.history.range(&start[..]..&end[..])? {
            stale.push(entry?.key);
        }
        if stale.is_empty() {
            return Ok(());
        }
        let updates: Vec<(&[u8], Update<'_>)> =
            stale.iter().map(|k| (&k[..], Update::Delete)).collect();
        self.history.write(&updates)?.wait()?;
        Ok(())
    }

    /// Rebuilds the window at open: a duplicate of the tables as of the newest version, then,
    /// for each older version in the window while the undo record of the version after it
    /// exists, [`Ledger::undo_step`]. Cost: per version, its undo record's updates and one
    /// trie commit per table it touched.
    ///
    /// A rebuilt version whose roots are not its record's, or an undo record that does not
    /// decode, ends the window there (the versions before it are `VersionPruned`, never
    /// answered from damaged data) with a warning through the `log` facade; the audit reports
    /// it as [`crate::AuditProblem::Undo`].
    pub(super) fn rebuild_window(&self, state: &mut State) -> Result<()> {
        let newest = state.history.size();
        if state.window.is_empty() {
            self.retain(state, newest)?;
        }
        let mut after = newest;
        while after > 1 && newest - (after - 1) <= self.keep {
            let newer = &state.window.front().expect("the newest is kept").tables;
            let step = match self.undo_step(newer, after) {
                Ok(Some(step)) => step,
                Ok(None) => break,
                Err(Error::Corrupted { what, detail }) => {
                    log::warn!(
                        "ledger {}: the window stops at version {after}: {what}: {detail}",
                        self.session.dir().display()
                    );
                    break;
                }
                Err(e) => return Err(e),
            };
            if let Some(&t) = step.mismatched.first() {
                step.tables.iter().for_each(Table::close);
                log::warn!(
                    "ledger {}: the window stops at version {after}: table {:?} rebuilt as of \
                     version {} does not have the root that version recorded",
                    self.session.dir().display(),
                    self.meta.tables[t],
                    after - 1
                );
                break;
            }
            state.window.push_front(Retained {
                version: after - 1,
                tables: step.tables,
            });
            after -= 1;
        }
        Ok(())
    }

    /// The tables as of version `after − 1`, from `newer` (as of `after`): a duplicate of
    /// each with the undo record of `after` applied and committed, and the tables whose root
    /// is not the one version `after − 1` recorded. `None` when `after` has no undo record.
    /// Cost: the record's updates and one trie commit per table it touches.
    ///
    /// Errors: [`Error::Corrupted`] (the undo record or the version record does not decode, or
    /// names a table the ledger does not have), the engine's.
    pub(crate) fn undo_step(&self, newer: &[Table], after: u64) -> Result<Option<UndoStep>> {
        let Some(bytes) = self.history.get(undo_key(after))? else {
            return Ok(None);
        };
        let undo = Undo::decode(&bytes)?;
        // Entries are sorted by table: the last names the largest.
        if (undo.entries.last()).is_some_and(|(t, _, _)| *t as usize >= self.tables.len()) {
            return Err(Error::corrupted(
                format!("undo record of version {after}"),
                "it names a table the ledger does not have",
            ));
        }
        let record = self.read_version(after - 1)?;
        let mut tables = Vec::with_capacity(self.tables.len());
        let mut mismatched = Vec::new();
        for (t, newer) in newer.iter().enumerate() {
            let table = newer.duplicate()?;
            let updates: Vec<(&[u8], Update<'_>)> = (undo.entries.iter())
                .filter(|(table, _, _)| *table as usize == t)
                .map(|(_, key, before)| {
                    let update = match before {
                        Some(value) => Update::Insert(value),
                        None => Update::Delete,
                    };
                    (&key[..], update)
                })
                .collect();
            let root = if updates.is_empty() {
                table.last_commit()?.root
            } else {
                table.updates(&updates)?;
                table.commit()?.root
            };
            if root != record.roots[t] {
                mismatched.push(t);
            }
            tables.push(table);
        }
        Ok(Some(UndoStep { tables, mismatched }))
    }
}

//! Transactions: read-modify-write across a session's durable tables with serializable
//! isolation, by optimistic concurrency control validated by value at commit.
//!
//! Owns: [`Transaction`] (its view, read set and write set) and what a transaction reads.
//!
//! May call: `batch` (its write set), `cursor` (the ranges it reads), `durable` (the view taken
//! and the validated commit, both
//! under the write order), `lsm` (reads of the view), `table` (the handles it is given),
//! `session_core` (the session it commits in), `wal` (the durability notice a commit returns).
//! Must never touch: the log's bytes, or a table's state.
//!
//! The protocol (`docs/design.md`, "Transactions"):
//!
//! 1. **Begin** ([`crate::Session::transaction`]): under the write order (no batch half
//!    applied), every durable table is duplicated (O(1) I/O each: shared runs and write
//!    buffer). The duplicates are the transaction's *view*: every read sees the tables as of
//!    that one instant, across tables.
//! 2. **Read**: a key the transaction wrote is answered from its write set; any other is read
//!    from the view once, and what was seen (value and blob, or absence) joins the read set.
//! 3. **Write**: buffered in a [`WriteBatch`] (nothing is logged or applied before commit).
//! 4. **Commit**: under the write order, every key of the read set is looked up again in the
//!    live tables (one batched lookup per table); if any differs from what was seen, the
//!    transaction fails with [`Error::TransactionConflict`] and nothing is written. Otherwise
//!    its writes are logged as one record and applied, still under the order: the transaction
//!    happened at that instant, with exactly the reads it made (validation by value), so
//!    committed transactions are serializable in log order.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::cursor::KeyRange;
use crate::durable::{Durable, Seen, TablePart, TableReads, ViewTable};
use crate::error::{Error, Result};
use crate::lsm::{Lsm, Update};
use crate::session_core::SessionCore;
use crate::table::Table;
use crate::wal::Durability;

/// What a transaction wrote to a key, for reading its own writes.
#[derive(Clone, Debug)]
enum Pending {
    /// Inserted (with a blob or not) or deleted: reads see exactly this.
    Set(Seen),
    /// Upserted, not read since: the combined upsert value, to resolve against the view's.
    Upsert(Vec<u8>),
}

/// A range read from the view: its bounds and every entry seen in it (before the
/// transaction's own writes were laid over them), validated at commit.
#[derive(Debug)]
struct RangeRead {
    bounds: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    seen: Vec<(Vec<u8>, Seen)>,
}

/// Every entry of `table` within `bounds` with what a read shows of it (value and blob bytes).
/// Cost: a cursor over the range; memory: the entries.
fn read_range(
    table: &Lsm,
    bounds: &(Bound<Vec<u8>>, Bound<Vec<u8>>),
) -> Result<Vec<(Vec<u8>, Seen)>> {
    let mut out = Vec::new();
    for entry in table.range(bounds.clone())? {
        let entry = entry?;
        let blob = match &entry.blob {
            Some(blob) => Some(blob.read()?),
            None => None,
        };
        out.push((entry.key, Some((entry.value, blob))));
    }
    Ok(out)
}

/// Whether `bounds` holds any key at all (a `BTreeMap` range over bounds that hold none
/// panics; a table's range is just empty).
fn holds_keys(bounds: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> bool {
    match bounds {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}

/// One durable table as the transaction knows it.
#[derive(Debug)]
struct Known {
    view: ViewTable,
    /// Keys read from the view and what was seen.
    reads: BTreeMap<Vec<u8>, Seen>,
    /// Ranges read from the view.
    ranges: Vec<RangeRead>,
    /// Keys written, for reading them back.
    writes: BTreeMap<Vec<u8>, Pending>,
}

/// A read-modify-write transaction across a session's durable tables, serializable
/// ([`crate::Session::transaction`]).
///
/// Reads see the tables as of the transaction's start, consistently across tables, plus the
/// transaction's own writes; writes are buffered until [`Transaction::commit`], which validates
/// that every key read still holds what was read and then writes everything as one atomic log
/// record. A transaction dropped without a commit leaves no trace.
///
/// ```
/// use cairn::{Error, Session, TableConfig};
/// # let dir = tempfile::tempdir().unwrap();
/// let session = Session::open(dir.path())?;
/// let accounts = session.table("accounts", TableConfig::default())?;
/// accounts.insert("alice", 100u64.to_le_bytes())?;
/// let balance = |v: Option<Vec<u8>>| v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
/// // Move 30 from alice to bob if alice has it; retry on a conflict.
/// let moved = session.transact(|tx| {
///     let from = balance(tx.get(&accounts, "alice")?);
///     if from < 30 {
///         return Ok(false);
///     }
///     let to = balance(tx.get(&accounts, "bob")?);
///     tx.insert(&accounts, "alice", (from - 30).to_le_bytes())?;
///     tx.insert(&accounts, "bob", (to + 30).to_le_bytes())?;
///     Ok(true)
/// })?;
/// assert!(moved.0);
/// assert_eq!(balance(accounts.get("bob")?), 30);
/// # Ok::<(), cairn::Error>(())
/// ```
///
/// Bounds: memory for the keys read and the values written; a read costs a lookup in the view
/// (the first time a key is read); the commit costs one batched lookup per table read, in the
/// live tables, while holding the session's write order (other writers wait).
#[derive(Debug)]
pub struct Transaction {
    session: Arc<SessionCore>,
    durable: Arc<Durable>,
    /// The session's durable tables as of the start, by durable id.
    tables: BTreeMap<u32, Known>,
    batch: WriteBatch,
}

impl Transaction {
    /// A transaction over a view of every durable table (see the module doc).
    pub(crate) fn begin(session: Arc<SessionCore>, durable: Arc<Durable>) -> Result<Transaction> {
        let tables = durable
            .view()?
            .into_iter()
            .map(|view| {
                let known = Known {
                    view,
                    reads: BTreeMap::new(),
                    ranges: Vec::new(),
                    writes: BTreeMap::new(),
                };
                (known.view.id, known)
            })
            .collect();
        Ok(Transaction {
            session,
            durable,
            tables,
            batch: WriteBatch::new(),
        })
    }

    fn known(&mut self, table: &Table) -> Result<&mut Known> {
        let id = crate::durable::durable_id(table.lsm())?;
        match self.tables.get_mut(&id) {
            Some(known) if known.view.live.is_same(table.lsm()) => Ok(known),
            _ => Err(Error::InvalidConfig(
                "the table is not one of the transaction's: of another session, or created \
                 after the transaction began"
                    .into(),
            )),
        }
    }

    /// The value of `key` in `table` as this transaction sees it: its own write if it wrote
    /// the key, otherwise the table as of the transaction's start. The key joins the read set
    /// (validated at commit) unless it is answered by a write alone.
    ///
    /// Errors: [`Error::NotDurable`], [`Error::InvalidConfig`] (a table that is not the
    /// transaction's), [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn get(&mut self, table: &Table, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        Ok(self.get_many(table, &[key])?.pop().flatten())
    }

    /// Whether `key` is present in `table` as this transaction sees it (see
    /// [`Transaction::get`]).
    ///
    /// Errors: as [`Transaction::get`].
    pub fn contains_key(&mut self, table: &Table, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(table, key)?.is_some())
    }

    /// The values of `keys` in `table` as this transaction sees them (see
    /// [`Transaction::get`]), with one batched lookup for the keys not read before.
    ///
    /// Errors: as [`Transaction::get`].
    pub fn get_many<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let known = self.known(table)?;
        // The keys that need the view: not read before, and not answered by a write alone.
        let mut missing: Vec<&[u8]> = keys
            .iter()
            .map(AsRef::as_ref)
            .filter(|k| {
                !known.reads.contains_key(*k)
                    && !matches!(known.writes.get(*k), Some(Pending::Set(_)))
            })
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let found = known.view.view.lookups(&missing)?;
            for (key, result) in missing.iter().zip(found) {
                known
                    .reads
                    .insert(key.to_vec(), crate::durable::seen(result)?);
            }
        }
        let resolve = &known.view.live.config().resolve;
        Ok(keys
            .iter()
            .map(|k| {
                let k = k.as_ref();
                let base = || known.reads.get(k).cloned().flatten().map(|(v, _)| v);
                match known.writes.get(k) {
                    Some(Pending::Set(s)) => s.as_ref().map(|(v, _)| v.clone()),
                    Some(Pending::Upsert(u)) => Some(match base() {
                        Some(old) => resolve.apply(u, &old),
                        None => u.clone(),
                    }),
                    None => base(),
                }
            })
            .collect())
    }

    /// The entries of `table` within `range`, in key order, as this transaction sees them: the
    /// table as of the transaction's start with the transaction's own writes laid over it.
    /// The range joins the read set: the commit fails with [`Error::TransactionConflict`] if
    /// any key in it was inserted, deleted or changed since, phantoms included, so that a
    /// decision taken on what the range held (or on its holding nothing) stays right.
    ///
    /// Cost: a cursor over the range in the view, every entry (and blob) held in memory; the
    /// commit reads the range again in the live table, under the session's write order.
    ///
    /// Errors: as [`Transaction::get`].
    pub fn range(
        &mut self,
        table: &Table,
        range: impl KeyRange,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let bounds = (
            range.start_key().map(<[u8]>::to_vec),
            range.end_key().map(<[u8]>::to_vec),
        );
        let known = self.known(table)?;
        let seen = read_range(&known.view.view, &bounds)?;
        let mut out: BTreeMap<Vec<u8>, Vec<u8>> = seen
            .iter()
            .filter_map(|(k, s)| s.as_ref().map(|(v, _)| (k.clone(), v.clone())))
            .collect();
        if holds_keys(&bounds) {
            let resolve = &known.view.live.config().resolve;
            for (key, write) in known.writes.range::<Vec<u8>, _>(bounds.clone()) {
                match write {
                    Pending::Set(Some((v, _))) => {
                        out.insert(key.clone(), v.clone());
                    }
                    Pending::Set(None) => {
                        out.remove(key);
                    }
                    Pending::Upsert(u) => {
                        let value = match out.get(key) {
                            Some(old) => resolve.apply(u, old),
                            None => u.clone(),
                        };
                        out.insert(key.clone(), value);
                    }
                }
            }
        }
        known.ranges.push(RangeRead { bounds, seen });
        Ok(out.into_iter().collect())
    }

    /// The entries of `table` whose keys start with `prefix` (see [`Transaction::range`]).
    ///
    /// Errors: as [`Transaction::get`].
    pub fn prefix(
        &mut self,
        table: &Table,
        prefix: impl AsRef<[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let prefix = prefix.as_ref();
        self.range(
            table,
            (
                Bound::Included(prefix.to_vec()),
                crate::table::prefix_end(prefix),
            ),
        )
    }

    /// Buffers `update` of `key` in `table`, to be written at commit.
    ///
    /// Errors: [`Error::NotDurable`], [`Error::InvalidConfig`] (as [`Transaction::get`]); the
    /// input errors of the update are reported by [`Transaction::commit`].
    pub fn update(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        update: Update<'_>,
    ) -> Result<()> {
        let key = key.as_ref();
        let known = self.known(table)?;
        let resolve = &known.view.live.config().resolve;
        let pending = match update {
            Update::Insert(v) => Pending::Set(Some((v.to_vec(), None))),
            Update::InsertWithBlob(v, b) => Pending::Set(Some((v.to_vec(), Some(b.to_vec())))),
            Update::Delete => Pending::Set(None),
            Update::Upsert(v) => match known.writes.get(key) {
                Some(Pending::Set(Some((old, _)))) => {
                    Pending::Set(Some((resolve.apply(v, old), None)))
                }
                Some(Pending::Set(None)) => Pending::Set(Some((v.to_vec(), None))),
                Some(Pending::Upsert(old)) => Pending::Upsert(resolve.apply(v, old)),
                None => Pending::Upsert(v.to_vec()),
            },
        };
        known.writes.insert(key.to_vec(), pending);
        self.batch.update(table, key, update);
        Ok(())
    }

    /// Buffers an insert (see [`Transaction::update`]).
    ///
    /// Errors: as [`Transaction::update`].
    pub fn insert(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.update(table, key, Update::Insert(value.as_ref()))
    }

    /// Buffers an upsert (see [`Transaction::update`]).
    ///
    /// Errors: as [`Transaction::update`].
    pub fn upsert(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.update(table, key, Update::Upsert(value.as_ref()))
    }

    /// Buffers a delete (see [`Transaction::update`]).
    ///
    /// Errors: as [`Transaction::update`].
    pub fn delete(&mut self, table: &Table, key: impl AsRef<[u8]>) -> Result<()> {
        self.update(table, key, Update::Delete)
    }

    /// Keys and ranges read so far (the read set validated at commit).
    pub fn reads(&self) -> usize {
        self.tables
            .values()
            .map(|k| k.reads.len() + k.ranges.len())
            .sum()
    }

    /// Updates buffered so far.
    pub fn writes(&self) -> usize {
        self.batch.len()
    }

    /// Validates the read set against the live tables and writes the buffered updates as one
    /// log record, atomically (see the module doc). Returns the write's
    /// [`crate::Durability`], or `None` for a transaction that wrote nothing (it is
    /// serializable at its start and needs no validation).
    ///
    /// Errors: [`Error::TransactionConflict`] when a key read changed since (nothing was
    /// written; run the transaction again, as [`crate::Session::transact`] does), the input
    /// errors of [`crate::Table::updates`] (nothing written), [`Error::TableClosed`],
    /// [`Error::TableBroken`], [`Error::LogFailed`], [`Error::Io`]. An I/O error while
    /// applying the write set to a table (a flush or merge) breaks that table *after* the record
    /// was logged: the transaction may then be recovered whole after a restart (its outcome is
    /// unknown, as with any database's I/O error at commit; never partial).
    pub fn commit(self) -> Result<Option<Durability>> {
        if self.batch.is_empty() {
            return Ok(None);
        }
        let reads: Vec<TableReads<'_>> = self
            .tables
            .values()
            .filter(|k| !k.reads.is_empty())
            .map(|k| {
                (
                    &k.view.live,
                    &k.view.name[..],
                    k.reads.iter().map(|(key, s)| (&key[..], s)).collect(),
                )
            })
            .collect();
        let parts = self.batch.parts();
        let parts: Vec<TablePart<'_>> = parts
            .iter()
            .map(|(t, updates)| (*t, &updates[..]))
            .collect();
        // Run under the write order, after the keys: every range read again in the live
        // table must hold exactly what the view held.
        let ranges = || -> Result<()> {
            for known in self.tables.values() {
                for range in &known.ranges {
                    let now = read_range(&known.view.live, &range.bounds)?;
                    if now != range.seen {
                        let key = now
                            .iter()
                            .zip(&range.seen)
                            .find(|(a, b)| a != b)
                            .map(|(a, _)| a.0.clone())
                            .or_else(|| now.get(range.seen.len()).map(|e| e.0.clone()))
                            .or_else(|| range.seen.get(now.len()).map(|e| e.0.clone()))
                            .unwrap_or_default();
                        return Err(Error::TransactionConflict {
                            table: known.view.name.clone(),
                            key,
                        });
                    }
                }
            }
            Ok(())
        };
        self.durable
            .commit_transaction(&self.session, &reads, &ranges, &parts)
            .map(Some)
    }
}

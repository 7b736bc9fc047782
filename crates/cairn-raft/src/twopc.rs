//! Transactions across shards, as each shard applies them: two-phase commit whose every step
//! is an entry of the shard's own Raft log, so each phase's record is durable on a quorum of
//! the shard before anyone acts on it (`docs/design.md`, "Transactions across shards").
//!
//! Owns: [`Locks`] (the keys held by prepared transactions, in memory, rebuilt from the
//! ledger on open), and applying [`crate::Command::Prepare`], [`crate::Command::Commit`] and
//! [`crate::Command::Abort`] to a ledger. May call: `command`, `format`, `cairn_ledger`. Must never
//! touch: Raft, the network (the coordinator, `crate::coordinator`, drives the phases).
//!
//! The records, in the ledger's raft table ([`crate::RAFT_TABLE`]; `docs/format/raft.md`),
//! each written in the same ledger version as the entry's applied log id:
//!
//! - `tx/p/<id>`: a [`PreparedTx`], from its `Prepare` until its decision here;
//! - `tx/open`: the ids of the transactions prepared and not decided, so that a node
//!   reopened rebuilds its [`Locks`] without a scan;
//! - `tx/d/<id>`: the [`Decision`] this shard made. The first decision wins: a `Commit` after
//!   an `Abort` (or the reverse) answers the decision made, and a `Prepare` after either
//!   answers it too, so a late message never undoes one. The coordinator decides at the
//!   transaction's primary shard first and tells the others only what the primary decided;
//!   so the primary's decision is the transaction's, and no shard decides otherwise.
//!
//! Locks: from its `Prepare` until its decision, a transaction holds every key it expected
//! or writes on that shard; any other command touching one of them answers
//! [`Response::Locked`] and writes nothing, and a read of one is refused until it is decided
//! (`Node::read`), so no one sees a transaction's writes on one shard and not on another.
//!
//! Bounds: a `Prepare` costs one lookup per key and one ledger version (its record, the
//! `tx/open` list rewritten: O(prepared transactions)); a decision one version with the
//! writes. Decisions are kept (about 50 bytes per transaction per shard; pruning them is
//! future work, `docs/cluster-plan.md`).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use cairn_ledger::{Ledger, LedgerBatch};

use crate::command::{Expectation, Response, Write};
use crate::format::{
    decode_decision, decode_open, decode_prepared, encode_decision, encode_open, encode_prepared,
    Decision, PreparedTx,
};
use crate::machine::{committed, KEY_APPLIED, RAFT_TABLE};

const KEY_OPEN: &[u8] = b"tx/open";

fn key_prepared(tx: &str) -> Vec<u8> {
    [b"tx/p/".as_slice(), tx.as_bytes()].concat()
}

fn key_decision(tx: &str) -> Vec<u8> {
    [b"tx/d/".as_slice(), tx.as_bytes()].concat()
}

/// The keys held by prepared transactions on one node's ledger: table → key → the
/// transaction's id (by table then key, so that a lookup borrows its key: no allocation per
/// key checked). Shared by the state machine (which changes it as it applies) and the node's
/// reads (which are refused on a held key).
#[derive(Clone, Default)]
pub struct Locks(Arc<Mutex<HashMap<String, HeldKeys>>>);

/// One table's held keys: key → the transaction's id.
type HeldKeys = HashMap<Vec<u8>, String>;

impl Locks {
    /// The locks of the transactions `ledger` holds prepared.
    ///
    /// Errors: reading the ledger fails, or a record does not decode.
    pub(crate) fn load(ledger: &Ledger) -> io::Result<Locks> {
        let locks = Locks::default();
        for tx in open_list(ledger)? {
            let bytes = ledger
                .get(RAFT_TABLE, key_prepared(&tx))
                .map_err(io::Error::other)?
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("transaction {tx:?} is listed as prepared but has no record"),
                    )
                })?;
            locks.hold(&tx, &decode_prepared(&bytes)?.held);
        }
        Ok(locks)
    }

    /// Takes `other`'s held keys in place of these (after a snapshot replaced the ledger);
    /// every clone sees them.
    pub(crate) fn replace_with(&self, other: Locks) {
        let held = std::mem::take(&mut *other.0.lock().unwrap_or_else(|p| p.into_inner()));
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = held;
    }

    /// The transaction holding one of `keys`, if one does.
    pub fn holder<'a>(
        &self,
        keys: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.is_empty() {
            return None;
        }
        keys.into_iter()
            .find_map(|(t, k)| map.get(t)?.get(k).cloned())
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.values().map(HashMap::len).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn hold(&self, tx: &str, keys: &[(String, Vec<u8>)]) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (table, key) in keys {
            let held = map.entry(table.clone()).or_default();
            held.insert(key.clone(), tx.to_string());
        }
    }

    fn release(&self, keys: &[(String, Vec<u8>)]) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (table, key) in keys {
            if let Some(held) = map.get_mut(table) {
                held.remove(key);
                if held.is_empty() {
                    map.remove(table);
                }
            }
        }
    }
}

fn open_list(ledger: &Ledger) -> io::Result<Vec<String>> {
    match ledger.get(RAFT_TABLE, KEY_OPEN).map_err(io::Error::other)? {
        Some(bytes) => Ok(decode_open(&bytes)?),
        None => Ok(Vec::new()),
    }
}

/// The ids of the transactions `ledger` holds prepared and not decided, in order.
///
/// Errors: reading the ledger fails, or the list does not decode.
pub fn prepared(ledger: &Ledger) -> io::Result<Vec<String>> {
    open_list(ledger)
}

/// The record of prepared transaction `tx` in `ledger`, if it is prepared there.
///
/// Errors: reading the ledger fails, or the record does not decode.
pub fn prepared_record(ledger: &Ledger, tx: &str) -> io::Result<Option<PreparedTx>> {
    match ledger
        .get(RAFT_TABLE, key_prepared(tx))
        .map_err(io::Error::other)?
    {
        Some(bytes) => Ok(Some(decode_prepared(&bytes)?)),
        None => Ok(None),
    }
}

/// How `ledger`'s shard decided `tx`, if it did.
///
/// Errors: reading the ledger fails, or the record does not decode.
pub fn decision(ledger: &Ledger, tx: &str) -> io::Result<Option<Decision>> {
    match ledger
        .get(RAFT_TABLE, key_decision(tx))
        .map_err(io::Error::other)?
    {
        Some(bytes) => Ok(Some(decode_decision(&bytes)?)),
        None => Ok(None),
    }
}

/// The keys a command touches, each once, in order.
pub(crate) fn touched(expects: &[Expectation], writes: &[Write]) -> Vec<(String, Vec<u8>)> {
    let mut keys: Vec<(String, Vec<u8>)> = expects
        .iter()
        .map(|e| (e.table.clone(), e.key.clone()))
        .chain(writes.iter().map(|w| (w.table.clone(), w.key.clone())))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The arguments of a [`crate::Command::Prepare`], borrowed.
pub(crate) struct Prepare<'a> {
    pub tx: &'a str,
    pub primary: u32,
    pub shards: &'a [u32],
    pub expects: &'a [Expectation],
    pub writes: &'a [Write],
    pub meta: &'a [u8],
}

/// Applies a `Prepare` (already checked by `Command::refusal`), storing `applied` in the version
/// it makes: [`Response::Decided`] if `tx` was decided here, [`Response::Prepared`] if it is
/// prepared (now or before), [`Response::Locked`] or [`Response::Conflict`] (nothing written).
pub(crate) fn apply_prepare(
    ledger: &Ledger,
    locks: &Locks,
    p: &Prepare<'_>,
    applied: &[u8],
) -> io::Result<Response> {
    if let Some(d) = decision(ledger, p.tx)? {
        return Ok(Response::Decided {
            commit: d == Decision::Commit,
        });
    }
    if prepared_record(ledger, p.tx)?.is_some() {
        return Ok(Response::Prepared {
            version: ledger.version(),
        });
    }
    let held = touched(p.expects, p.writes);
    if let Some(tx) = locks.holder(held.iter().map(|(t, k)| (t.as_str(), k.as_slice()))) {
        return Ok(Response::Locked { tx });
    }
    for (index, e) in p.expects.iter().enumerate() {
        if ledger.get(&e.table, &e.key).map_err(io::Error::other)? != e.value {
            return Ok(Response::Conflict { index });
        }
    }
    let record = PreparedTx {
        primary: p.primary,
        shards: p.shards.to_vec(),
        held,
        writes: p.writes.to_vec(),
        meta: p.meta.to_vec(),
    };
    let mut open = open_list(ledger)?;
    open.push(p.tx.to_string());
    open.sort();
    let mut batch = LedgerBatch::new();
    batch
        .insert(RAFT_TABLE, key_prepared(p.tx), encode_prepared(&record))
        .insert(RAFT_TABLE, KEY_OPEN, encode_open(&open))
        .insert(RAFT_TABLE, KEY_APPLIED, applied);
    let made = ledger.write(&batch).map_err(io::Error::other)?;
    locks.hold(p.tx, &record.held);
    Ok(Response::Prepared {
        version: made.map_or(ledger.version(), |c| c.version),
    })
}

/// Applies a `Commit` (`commit`) or an `Abort` of `tx`, storing `applied` in the version it
/// makes. The first decision here wins: a decided `tx` answers [`Response::Decided`] with it.
/// Otherwise the decision is stored, and a commit makes the prepared writes
/// ([`Response::Committed`]); a commit of a transaction not prepared here is refused (nothing
/// written); an abort answers `Decided { commit: false }`.
pub(crate) fn apply_decision(
    ledger: &Ledger,
    locks: &Locks,
    tx: &str,
    commit: bool,
    applied: &[u8],
) -> io::Result<Response> {
    if let Some(d) = decision(ledger, tx)? {
        return Ok(Response::Decided {
            commit: d == Decision::Commit,
        });
    }
    let record = prepared_record(ledger, tx)?;
    if commit && record.is_none() {
        return Ok(Response::Refused {
            reason: format!("transaction {tx:?} is not prepared here"),
        });
    }
    let mut batch = LedgerBatch::new();
    let d = if commit {
        Decision::Commit
    } else {
        Decision::Abort
    };
    batch
        .insert(RAFT_TABLE, key_decision(tx), encode_decision(d))
        .insert(RAFT_TABLE, KEY_APPLIED, applied);
    if let Some(r) = &record {
        let open: Vec<String> = open_list(ledger)?.into_iter().filter(|t| t != tx).collect();
        batch
            .delete(RAFT_TABLE, key_prepared(tx))
            .insert(RAFT_TABLE, KEY_OPEN, encode_open(&open));
        if commit {
            for w in &r.writes {
                match &w.value {
                    Some(v) => batch.insert(&w.table, &w.key, v),
                    None => batch.delete(&w.table, &w.key),
                };
            }
            if !r.meta.is_empty() {
                batch.meta(&r.meta);
            }
        }
    }
    let made = ledger.write(&batch).map_err(io::Error::other)?;
    if let Some(r) = &record {
        locks.release(&r.held);
    }
    Ok(match (commit, made) {
        (true, Some(c)) => committed(&c, None),
        (true, None) => Response::Unchanged {
            version: ledger.version(),
        },
        (false, _) => Response::Decided { commit: false },
    })
}

//! The ledger as a Raft state machine: each committed entry's [`Command`] applied to a
//! [`Ledger`], in log order, on one task, so that every node makes the same versions with the
//! same roots.
//!
//! Owns: [`LedgerMachine`] (the applied log id, the membership, applying entries, when to build
//! and install snapshots), [`SnapshotBuilder`]. May call: `command`, `twopc` (the phases of
//! transactions across shards), `snapshot` (the files and the swap), `cairn_ledger`. Must never touch: the network, the log storage.
//!
//! Determinism: an entry's effect depends only on the ledger's state and the command (the
//! expectations are checked against the replicated state; a refusal depends only on the
//! command and the ledger's fixed tables). An error of the ledger's own (I/O, a broken table)
//! is returned to openraft, which stops the node: an entry is never skipped.
//!
//! Restart: every entry that writes stores, in the same ledger version, its log id and the
//! membership then in force (table [`RAFT_TABLE`], key `applied`; `docs/format/raft.md`), so a
//! node reopened reports as applied the last entry its ledger holds, and openraft applies the
//! entries after it again. Entries that write nothing (conflicts, refusals, blanks, membership
//! changes) store nothing: applied again, they do nothing again.
//!
//! Snapshots (`snapshot`): a machine opened with a [`LedgerHome`] builds them from a view of
//! its ledger (their log id the applied state the ledger stores, so a policy-driven build is
//! skipped until a newer entry wrote) and installs them by a proved import and a swap of
//! directories; one opened without refuses both (its cluster must never purge its log).

use std::io;
use std::sync::Arc;

use futures_util::{Stream, TryStreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::entry::RaftEntry;
use openraft::storage::SnapshotMeta;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};

use cairn_ledger::{Error as LedgerError, Ledger, LedgerBatch};

use crate::command::{Command, Response};
use crate::snapshot::{self, LedgerHome, LedgerSlot, SnapshotData, Store};
use crate::twopc::{apply_decision, apply_prepare, Locks, Prepare};
use crate::TypeConfig;

/// The ledger table where applying stores the last applied log id: part of every replicated
/// ledger ([`ledger_config`]); commands may read it but never write it.
pub const RAFT_TABLE: &str = "raft";
pub(crate) const KEY_APPLIED: &[u8] = b"applied";

/// A ledger configuration for a replicated ledger of `tables`: those plus [`RAFT_TABLE`].
pub fn ledger_config<S: Into<String>>(
    tables: impl IntoIterator<Item = S>,
) -> cairn_ledger::LedgerConfig {
    let mut names: Vec<String> = tables.into_iter().map(Into::into).collect();
    if !names.iter().any(|t| t == RAFT_TABLE) {
        names.push(RAFT_TABLE.to_string());
    }
    cairn_ledger::LedgerConfig::new(names)
}

/// A [`Ledger`] driven by a Raft log.
pub struct LedgerMachine {
    slot: LedgerSlot,
    /// Where snapshots are kept and installed (`None`: refused).
    home: Option<(Arc<LedgerHome>, Arc<Store>)>,
    locks: Locks,
    applied: Option<LogIdOf<TypeConfig>>,
    membership: StoredMembershipOf<TypeConfig>,
}

impl LedgerMachine {
    /// A machine over `ledger`, which no one else writes to, resuming from the applied state
    /// the ledger stores (none for a fresh ledger).
    ///
    /// Errors: the ledger lacks [`RAFT_TABLE`] (make it with [`ledger_config`]), its stored
    /// applied state does not decode, or reading it fails.
    pub fn open(ledger: Arc<Ledger>) -> io::Result<LedgerMachine> {
        LedgerMachine::over(LedgerSlot::new(ledger), None)
    }

    /// A machine over the ledger `home` holds (opened into `slot` by the caller, with
    /// [`LedgerHome::open`]), building and installing snapshots in `home.snapshots`.
    ///
    /// Errors: as [`LedgerMachine::open`], and the snapshot directory's.
    pub fn with_home(slot: LedgerSlot, home: LedgerHome) -> io::Result<LedgerMachine> {
        let store = Store::open(&home.snapshots)?;
        LedgerMachine::over(slot, Some((Arc::new(home), Arc::new(store))))
    }

    fn over(
        slot: LedgerSlot,
        home: Option<(Arc<LedgerHome>, Arc<Store>)>,
    ) -> io::Result<LedgerMachine> {
        let ledger = slot.get();
        if !ledger.tables().iter().any(|t| t == RAFT_TABLE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a replicated ledger needs the table {RAFT_TABLE:?} (see ledger_config)"),
            ));
        }
        let (applied, membership) = stored_applied(&ledger)?;
        let locks = Locks::load(&ledger)?;
        Ok(LedgerMachine {
            slot,
            home,
            locks,
            applied,
            membership,
        })
    }

    /// The machine's ledger, which an installed snapshot replaces.
    pub fn slot(&self) -> LedgerSlot {
        self.slot.clone()
    }

    /// The keys held by transactions prepared on this machine's ledger (shared: it changes as
    /// the machine applies).
    pub fn locks(&self) -> Locks {
        self.locks.clone()
    }
}

/// Applies `command` to `ledger`, storing `applied` with the version it makes; with `prove`
/// (on the node where the client waits), also proves what it expected and wrote, at once,
/// while the version it made is the newest. Errors: the ledger's own failures (I/O, a broken
/// table), never a refusal or a conflict, which are answers, nor a failed proof (an answer
/// too: [`crate::WriteReceipts::failed`]).
fn apply_command(
    ledger: &Ledger,
    locks: &Locks,
    command: &Command,
    applied: &[u8],
    prove: bool,
) -> io::Result<Response> {
    if let Some(reason) = command.refusal(ledger) {
        return Ok(Response::Refused { reason });
    }
    match command {
        Command::Write {
            expects,
            writes,
            meta,
            ..
        } => apply_write(ledger, locks, expects, writes, meta, applied, prove)
            .map_err(io::Error::other),
        Command::Prepare {
            tx,
            primary,
            shards,
            expects,
            writes,
            meta,
        } => {
            let p = Prepare {
                tx,
                primary: *primary,
                shards,
                expects,
                writes,
                meta,
            };
            apply_prepare(ledger, locks, &p, applied)
        }
        Command::Commit { tx } => apply_decision(ledger, locks, tx, true, applied),
        Command::Abort { tx } => apply_decision(ledger, locks, tx, false, applied),
    }
}

/// Applies a [`Command::Write`]: [`Response::Locked`] if a prepared transaction holds a key it
/// touches, [`Response::Conflict`] if an expectation fails, else its writes as one version.
fn apply_write(
    ledger: &Ledger,
    locks: &Locks,
    expects: &[crate::Expectation],
    writes: &[crate::Write],
    meta: &[u8],
    applied: &[u8],
    prove: bool,
) -> Result<Response, LedgerError> {
    let keys = expects
        .iter()
        .map(|e| (e.table.as_str(), e.key.as_slice()))
        .chain(writes.iter().map(|w| (w.table.as_str(), w.key.as_slice())));
    if let Some(tx) = locks.holder(keys) {
        return Ok(Response::Locked { tx });
    }
    for (index, e) in expects.iter().enumerate() {
        if ledger.get(&e.table, &e.key)? != e.value {
            return Ok(Response::Conflict { index });
        }
    }
    if writes.is_empty() {
        return Ok(Response::Unchanged {
            version: ledger.version(),
        });
    }
    let mut batch = LedgerBatch::new();
    for w in writes {
        match &w.value {
            Some(v) => batch.insert(&w.table, &w.key, v),
            None => batch.delete(&w.table, &w.key),
        };
    }
    batch.insert(RAFT_TABLE, KEY_APPLIED, applied);
    if !meta.is_empty() {
        batch.meta(meta);
    }
    match ledger.write(&batch) {
        Ok(Some(c)) => {
            // Both against the digest of the version made (as the client checks them): the
            // expectations as of the version before, which a ledger keeps provable with a
            // window of one version or more (`cairn-server` gives a cluster's ledger one).
            let receipts = prove.then(|| {
                let reads = prove_keys(
                    ledger,
                    c.version - 1,
                    expects.iter().map(|e| (e.table.as_str(), e.key.as_slice())),
                );
                let writes = prove_keys(
                    ledger,
                    c.version,
                    writes.iter().map(|w| (w.table.as_str(), w.key.as_slice())),
                );
                Box::new(receipts_of(c.version, reads, writes))
            });
            Ok(committed(&c, receipts))
        }
        Ok(None) => Ok(Response::Unchanged {
            version: ledger.version(),
        }),
        Err(e) => match refusal_of(&e) {
            Some(reason) => Ok(Response::Refused { reason }),
            None => Err(e),
        },
    }
}

/// The answer for a version made: its number, ledger root and digest root.
pub(crate) fn committed(
    c: &cairn_ledger::Committed,
    receipts: Option<Box<crate::command::WriteReceipts>>,
) -> Response {
    Response::Committed {
        version: c.version,
        ledger_root: c.ledger_root,
        digest_root: c.digest.root,
        receipts,
    }
}

/// Proves `keys` at `version` (the newest or within the ledger's window) against the newest
/// digest, each table's keys sorted and once, as `Ledger::transact_proved` gives them: `None`
/// for no key or version 0.
fn prove_keys<'a>(
    ledger: &Ledger,
    version: u64,
    keys: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Result<Option<cairn_ledger::ProvedKeys>, LedgerError> {
    let mut by_table: std::collections::BTreeMap<&str, std::collections::BTreeSet<&[u8]>> =
        Default::default();
    for (table, key) in keys {
        by_table.entry(table).or_default().insert(key);
    }
    if by_table.is_empty() || version == 0 {
        return Ok(None);
    }
    let promises: Vec<cairn_ledger::Promise> = (by_table.into_iter())
        .map(|(table, keys)| cairn_ledger::Promise {
            version,
            table: table.to_string(),
            keys: keys.into_iter().map(<[u8]>::to_vec).collect(),
        })
        .collect();
    Ok(ledger.prove_promises(&promises)?.into_iter().next())
}

/// The receipts of a write that made `version`, or why they could not be made (the write
/// stands either way: a failed proof is a read that failed, never a reason to stop the node).
fn receipts_of(
    version: u64,
    reads: Result<Option<cairn_ledger::ProvedKeys>, LedgerError>,
    writes: Result<Option<cairn_ledger::ProvedKeys>, LedgerError>,
) -> crate::command::WriteReceipts {
    match (reads, writes) {
        (Ok(reads), Ok(writes)) => crate::command::WriteReceipts {
            reads,
            writes,
            failed: None,
        },
        (Err(e), _) | (_, Err(e)) => crate::command::WriteReceipts {
            failed: Some(format!(
                "version {version} was made, but its receipts were not: {e}"
            )),
            ..Default::default()
        },
    }
}

/// The ledger's errors that depend only on the command (so every node meets them alike).
fn refusal_of(e: &LedgerError) -> Option<String> {
    match e {
        LedgerError::NoSuchTable(_) | LedgerError::MetaTooLong(_) => Some(e.to_string()),
        LedgerError::Engine(
            cairn::Error::KeyTooLarge { .. }
            | cairn::Error::ValueTooLarge { .. }
            | cairn::Error::InvalidUpdate(_),
        ) => Some(e.to_string()),
        _ => None,
    }
}

/// What `ledger` stores as applied: the log id and membership of the last entry that wrote.
fn stored_applied(
    ledger: &Ledger,
) -> io::Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>)> {
    match ledger
        .get(RAFT_TABLE, KEY_APPLIED)
        .map_err(io::Error::other)?
    {
        Some(bytes) => {
            let (id, membership) = crate::format::decode_applied(&bytes)?;
            Ok((Some(id), membership))
        }
        None => Ok((None, StoredMembershipOf::<TypeConfig>::default())),
    }
}

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this node keeps no snapshots (started without a LedgerHome)",
    )
}

impl RaftStateMachine<TypeConfig> for LedgerMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id();
            let response = match entry.payload {
                EntryPayload::Blank => Response::Empty,
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembershipOf::<TypeConfig>::new(Some(log_id), m);
                    Response::Empty
                }
                EntryPayload::Normal(command) => {
                    let ledger = self.slot.get();
                    let locks = self.locks.clone();
                    let applied = crate::format::encode_applied(&(log_id, self.membership.clone()));
                    // Receipts only where a client waits for them.
                    let prove = responder.is_some()
                        && matches!(command, Command::Write { prove: true, .. });
                    // The ledger does blocking I/O: off the runtime's worker threads.
                    tokio::task::spawn_blocking(move || {
                        apply_command(&ledger, &locks, &command, &applied, prove)
                    })
                    .await
                    .map_err(io::Error::other)??
                }
            };
            self.applied = Some(log_id);
            if let Some(r) = responder {
                r.send(response);
            }
        }
        Ok(())
    }

    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<SnapshotBuilder> {
        let Some((_, store)) = &self.home else {
            return force.then_some(SnapshotBuilder { view: None });
        };
        let ledger = self.slot.get();
        // The applied state and the view, together: nothing applies meanwhile (this runs on
        // the machine's task).
        let view = stored_applied(&ledger).and_then(|(last, membership)| {
            if !force && store.current().is_some_and(|c| c >= last) {
                return Ok(None);
            }
            let view = ledger.export_view().map_err(io::Error::other)?;
            Ok(Some((view, last, membership)))
        });
        match view {
            Ok(None) => None,
            Ok(Some((view, last, membership))) => {
                let meta = SnapshotMeta {
                    last_log_id: last,
                    last_membership: membership,
                };
                Some(SnapshotBuilder {
                    view: Some(Ok((Arc::clone(store), meta, view))),
                })
            }
            Err(e) => Some(SnapshotBuilder {
                view: Some(Err(e.to_string())),
            }),
        }
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        match self.try_create_snapshot_builder(true).await {
            Some(b) => b,
            None => SnapshotBuilder { view: None },
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let Some((home, store)) = self.home.clone() else {
            return Err(unsupported());
        };
        let slot = self.slot.clone();
        let m = meta.clone();
        let ledger = tokio::task::spawn_blocking(move || {
            let check = |imported: &Ledger| {
                let (last, membership) = stored_applied(imported).map_err(|e| e.to_string())?;
                match last == m.last_log_id && membership == m.last_membership {
                    true => Ok(()),
                    false => Err(format!(
                        "its ledger stores applied {last:?}, its metadata names {:?}",
                        m.last_log_id
                    )),
                }
            };
            // In this order (the `snapshot` module's header): the ledger is never newer than
            // the current snapshot, whatever step a crash cuts.
            snapshot::stage(&home, &slot, &snapshot, check)?;
            snapshot::keep(&store, &snapshot, m.last_log_id)?;
            snapshot::swap(&home, &slot)
        })
        .await
        .map_err(io::Error::other)??;
        self.locks.replace_with(Locks::load(&ledger)?);
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, SnapshotData>>, io::Error> {
        let Some((_, store)) = self.home.clone() else {
            return Ok(None);
        };
        let found = tokio::task::spawn_blocking(move || store.load())
            .await
            .map_err(io::Error::other)??;
        Ok(found.map(|(meta, snapshot)| openraft::storage::Snapshot { meta, snapshot }))
    }
}

/// The snapshot builder of a [`LedgerMachine`]: a view of its ledger, written as a snapshot file
/// on a blocking thread and made the current one. Without a [`LedgerHome`] it refuses.
pub struct SnapshotBuilder {
    /// The store, the metadata and the view; or why the view could not be taken.
    #[allow(clippy::type_complexity)]
    view: Option<
        Result<
            (
                Arc<Store>,
                SnapshotMetaOf<TypeConfig>,
                cairn_ledger::LedgerExport,
            ),
            String,
        >,
    >,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, SnapshotData>, io::Error> {
        let (store, meta, view) = match self.view.take() {
            None => return Err(unsupported()),
            Some(Err(e)) => return Err(io::Error::other(e)),
            Some(Ok(parts)) => parts,
        };
        tokio::task::spawn_blocking(move || {
            let path = store.fresh("building");
            snapshot::write_file(&path, &meta, view)?;
            store.promote(&path, meta.last_log_id)?;
            // The current one: this build, or a newer one installed meanwhile.
            let (meta, snapshot) = store
                .load()?
                .ok_or_else(|| io::Error::other("the snapshot built is gone"))?;
            Ok(openraft::storage::Snapshot { meta, snapshot })
        })
        .await
        .map_err(io::Error::other)?
    }
}

//! The Raft log in Cairn: entries, the vote and the committed id kept in durable tables of a
//! Cairn session of their own, so that every append goes through Cairn's write-ahead log and
//! openraft hears that entries are on disk from the log's durability notice.
//!
//! Owns: [`DurableLog`] and the layout of what it stores (`docs/format/raft.md`; the bytes
//! are `format`'s). May call: `format`, `cairn` (a session, its durable tables, writes and their [`cairn::Durability`]). Must never
//! touch: the ledger.
//!
//! Layout: table `entries` maps an entry's index (8 bytes, big-endian, so that key order is log
//! order) to the entry; table `state` holds the vote (`vote`), the committed id (`committed`)
//! and the last purged id (`purged`). An append is one atomic write of its entries; a
//! truncation deletes the entries after the given id and a purge those up to it (with the new
//! `purged` in the same write), so recovery finds a log with no hole. Deleted entries become
//! tombstones that merges drop; the log's segments are freed by the session's checkpoints.
//!
//! Durability: an append returns as soon as its entries are readable (in the tables' memory);
//! openraft's flush callback fires from the log's syncer thread once its record is fsynced
//! (`SyncPolicy::Immediate`: at once). A vote is waited for before `save_vote` returns. A
//! truncation or purge is not waited for: the log is durable in order, so any later durable
//! record implies them, and a lost purge only keeps entries longer.
//!
//! Bounds: an append or truncation writes one record of the entries it touches; reads are one
//! range scan; memory holds only the first and last index. Each call runs on openraft's task
//! and may block it briefly: an append when the log's buffer is full (until the group being
//! written is done), a read when the entries asked for are no longer in memory.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use cairn::{LogOptions, Session, SessionOptions, SyncPolicy, Table, TableConfig, Update};
use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;

use crate::format;
use crate::TypeConfig;

const ENTRIES: &str = "entries";
const STATE: &str = "state";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_PURGED: &[u8] = b"purged";

/// A Raft log stored in a Cairn session; clones share it.
#[derive(Clone)]
pub struct DurableLog {
    inner: Arc<Inner>,
}

struct Inner {
    session: Session,
    entries: Table,
    state: Table,
    /// What is in `entries`: the last purged id and the last entry's id.
    bounds: Mutex<Bounds>,
}

#[derive(Clone, Copy, Default)]
struct Bounds {
    purged: Option<LogIdOf<TypeConfig>>,
    last: Option<LogIdOf<TypeConfig>>,
}

/// One key's update in a write.
type Change<'a> = (&'a [u8], Update<'a>);

fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn engine(e: cairn::Error) -> io::Error {
    io::Error::other(e)
}

impl DurableLog {
    /// Opens (creating if needed) the Raft log in directory `dir`, a Cairn session of its own,
    /// its write-ahead log fsyncing each group at once (`SyncPolicy::Immediate`).
    ///
    /// Errors: the session's (a locked or damaged directory), and an entry or state value that
    /// does not decode.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<DurableLog> {
        DurableLog::open_with(Arc::new(cairn::fs::RealFs), dir)
    }

    /// [`DurableLog::open`] on file system `fs` (a fault-injecting one, in tests).
    ///
    /// Errors: as [`DurableLog::open`].
    pub fn open_with(
        fs: Arc<dyn cairn::fs::FileSystem>,
        dir: impl AsRef<Path>,
    ) -> io::Result<DurableLog> {
        let mut log = LogOptions::default();
        log.sync = SyncPolicy::Immediate;
        let mut options = SessionOptions::default();
        options.log = Some(log);
        let session = Session::open_with(fs, dir, options).map_err(engine)?;
        DurableLog::with_session(session)
    }

    /// The Raft log in `session` (which must have a log), in its durable tables `entries` and
    /// `state`. Errors: as [`DurableLog::open`].
    pub fn with_session(session: Session) -> io::Result<DurableLog> {
        let entries = session
            .table(ENTRIES, TableConfig::default())
            .map_err(engine)?;
        let state = session
            .table(STATE, TableConfig::default())
            .map_err(engine)?;
        let purged = match state.get(KEY_PURGED).map_err(engine)? {
            Some(bytes) => Some(format::decode_log_id(&bytes)?),
            None => None,
        };
        let last = match entries.range(..).map_err(engine)?.next_back() {
            Some(entry) => {
                let entry = entry.map_err(engine)?;
                Some(format::decode_entry(&entry.value)?.log_id())
            }
            None => None,
        };
        Ok(DurableLog {
            inner: Arc::new(Inner {
                session,
                entries,
                state,
                bounds: Mutex::new(Bounds { purged, last }),
            }),
        })
    }

    fn bounds(&self) -> MutexGuard<'_, Bounds> {
        self.inner.bounds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the session (a node shutting down). Later calls fail.
    pub fn close(&self) {
        self.inner.session.close();
    }

    /// Deletes the entries with indexes in `from..=to`, with `extra` writes to `state` in the
    /// same record. Returns the record's durability.
    fn delete_range(
        &self,
        from: u64,
        to: u64,
        extra: &[(&[u8], Vec<u8>)],
    ) -> io::Result<cairn::Durability> {
        let keys: Vec<[u8; 8]> = (from..=to).map(key).collect();
        let deletes: Vec<Change<'_>> = keys.iter().map(|k| (&k[..], Update::Delete)).collect();
        let states: Vec<Change<'_>> = extra.iter().map(|(k, v)| (*k, Update::Insert(v))).collect();
        let mut parts: Vec<(&Table, &[Change<'_>])> = Vec::new();
        if !deletes.is_empty() {
            parts.push((&self.inner.entries, &deletes));
        }
        if !states.is_empty() {
            parts.push((&self.inner.state, &states));
        }
        self.inner.session.write(&parts).map_err(engine)
    }
}

impl RaftLogReader<TypeConfig> for DurableLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(&i) => Bound::Included(key(i).to_vec()),
            Bound::Excluded(&i) => Bound::Excluded(key(i).to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(key(i).to_vec()),
            Bound::Excluded(&i) => Bound::Excluded(key(i).to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in self.inner.entries.range((start, end)).map_err(engine)? {
            let entry = entry.map_err(engine)?;
            out.push(format::decode_entry(&entry.value)?);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        match self.inner.state.get(KEY_VOTE).map_err(engine)? {
            Some(bytes) => Ok(Some(format::decode_vote(&bytes)?)),
            None => Ok(None),
        }
    }
}

impl RaftLogStorage<TypeConfig> for DurableLog {
    type LogReader = DurableLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let b = *self.bounds();
        Ok(LogState {
            last_purged_log_id: b.purged,
            last_log_id: b.last.or(b.purged),
        })
    }

    async fn get_log_reader(&mut self) -> DurableLog {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        let value = format::encode_vote(vote);
        let durability = self
            .inner
            .session
            .write(&[(&self.inner.state, &[(KEY_VOTE, Update::Insert(&value))][..])])
            .map_err(engine)?;
        // A vote must be on disk before it is acted on.
        durability.await.map_err(engine)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        let Some(id) = committed else {
            return Ok(());
        };
        let value = format::encode_log_id(&id);
        self.inner
            .session
            .write(&[(
                &self.inner.state,
                &[(KEY_COMMITTED, Update::Insert(&value))][..],
            )])
            .map_err(engine)?
            .release();
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        match self.inner.state.get(KEY_COMMITTED).map_err(engine)? {
            Some(bytes) => Ok(Some(format::decode_log_id(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut encoded: Vec<([u8; 8], Vec<u8>)> = Vec::new();
        let mut last = None;
        for e in entries {
            last = Some(e.log_id());
            encoded.push((key(e.index()), format::encode_entry(&e)));
        }
        let Some(last) = last else {
            callback.io_completed(Ok(()));
            return Ok(());
        };
        let updates: Vec<(&[u8], Update<'_>)> = encoded
            .iter()
            .map(|(k, v)| (&k[..], Update::Insert(v)))
            .collect();
        let durability = self
            .inner
            .session
            .write(&[(&self.inner.entries, &updates)])
            .map_err(engine)?;
        self.bounds().last = Some(last);
        durability.on_durable(move |r| callback.io_completed(r.map_err(engine)));
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        let b = *self.bounds();
        let Some(end) = b.last else {
            return Ok(());
        };
        let from = last.map_or(0, |l| l.index() + 1);
        if from <= end.index() {
            self.delete_range(from, end.index(), &[])?.release();
        }
        self.bounds().last = match last {
            Some(l) if l.index() < end.index() => Some(l),
            Some(_) => Some(end),
            None => None,
        };
        Ok(())
    }

    async fn purge(&mut self, upto: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        let b = *self.bounds();
        let from = b.purged.map_or(0, |p| p.index() + 1);
        let to = match b.last {
            Some(l) => upto.index().min(l.index()),
            None => upto.index(),
        };
        let purged = format::encode_log_id(&upto);
        // `from > to` (nothing left to delete) makes an empty range: only `purged` is written.
        self.delete_range(from, to, &[(KEY_PURGED, purged)])?
            .release();
        let mut bounds = self.bounds();
        bounds.purged = Some(upto);
        if bounds.last.is_some_and(|l| l.index() <= upto.index()) {
            bounds.last = None;
        }
        Ok(())
    }
}

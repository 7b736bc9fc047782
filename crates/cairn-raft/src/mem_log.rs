//! A Raft log storage held in memory: entries, vote and committed id in a map under a lock,
//! each append "flushed" at once. For tests of the replication layer and for a cluster whose
//! durability comes from elsewhere; Cairn's write-ahead log takes its place in the durable
//! setup (issue 48's next step).
//!
//! Owns: [`MemLog`]. May call: openraft's storage traits. Must never touch: the ledger.
//!
//! Bounds: memory grows with every entry not purged; each call holds the lock for O(entries
//! it touches · log n).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;

use crate::TypeConfig;

/// A Raft log in memory; clones share it.
#[derive(Clone, Default)]
pub struct MemLog {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    vote: Option<VoteOf<TypeConfig>>,
    committed: Option<LogIdOf<TypeConfig>>,
    purged: Option<LogIdOf<TypeConfig>>,
    entries: BTreeMap<u64, EntryOf<TypeConfig>>,
}

impl MemLog {
    /// An empty log.
    pub fn new() -> MemLog {
        MemLog::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        Ok(self.lock().vote)
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = MemLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let inner = self.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id())
            .or(inner.purged);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> MemLog {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        self.lock().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        self.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        Ok(self.lock().committed)
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
        {
            let mut inner = self.lock();
            for e in entries {
                inner.entries.insert(e.index(), e);
            }
        }
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        let from = last.map_or(0, |l| l.index() + 1);
        self.lock().entries.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, upto: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        let mut inner = self.lock();
        let kept = inner.entries.split_off(&(upto.index() + 1));
        inner.entries = kept;
        inner.purged = Some(upto);
        Ok(())
    }
}

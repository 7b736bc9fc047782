//! [`Ledger`]: named authenticated durable tables committed together as numbered versions, each
//! a leaf of the durable history tree, with receipts for reads.
//!
//! Owns: [`Ledger`], [`LedgerConfig`], [`LedgerTx`], [`LedgerBatch`], [`Committed`],
//! [`VerifiedRead`], [`VersionInfo`], opening and recovery, the commit protocol. May call:
//! `history` (the tree), `records` (the ledger's own records), `window` (its child: the kept
//! versions and their undo records), the engine (sessions, durable tables, transactions),
//! `cairn_proof` (ledger roots, receipts). Must never touch: the engine's files.
//!
//! **A commit** (`docs/ledger.md`, "Commits"), under the ledger's commit lock:
//!
//! 1. the transaction's writes and a *pending* record (version `v`, the metadata) go to the log
//!    as one atomic record (the transaction's validated commit);
//! 2. every table commits its trie (a logged commit record each; a table the version did not
//!    change keeps its root at no cost);
//! 3. the ledger root (`cairn_proof::ledger`) of the tables' roots, the leaf `(v, ledger root,
//!    SHA-256(metadata))`, the history nodes it completes, the version's record and the new head
//!    are written to `_history` as one record, which also deletes the pending record.
//!
//! The log keeps this order, so the third record's [`cairn::Durability`] covers the first two.
//! A crash after step 1 leaves the pending record: opening the ledger finishes that commit
//! (steps 2 and 3, with the metadata it kept), so recovery yields a prefix of the versions
//! committed, each with the root and leaf it had (or would have had). A crash before step 1's
//! record is durable loses the version whole.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use cairn::fs::{FileSystem, RealFs};
use cairn::{Durability, Session, SessionOptions, Table, TableConfig, Update};
use cairn_proof::history::HistoryLeaf;
use cairn_proof::ledger::{ledger_path, ledger_root, Receipt, ReceiptTable};
use cairn_proof::range::RangeAnswer;
use cairn_proof::{ConsistencyProof, Digest, Hash, HashKind, InclusionProof, Root};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};
use crate::history::History;
use crate::links::{self, Writes};
use crate::records::{
    decode_u64, undo_key, version_key, LedgerMeta, Pending, VersionRecord, KEY_HEAD, KEY_META,
    KEY_PENDING,
};

mod block;
mod group;
mod shard;
mod transfer;
mod window;

pub use shard::TableWitness;
pub use transfer::{
    check_export, ExportSummary, ImportChecks, LedgerExport, EXPORT_MAGIC, FRAME_BYTES_MAX,
    FRAME_BYTES_TARGET,
};
use window::Retained;
pub use window::WindowInfo;

/// The ledger's internal durable table: its configuration, versions and history nodes. Table
/// names starting with `_` are reserved for it.
pub const HISTORY_TABLE: &str = "_history";
/// The longest commit metadata, in bytes.
pub const META_BYTES_MAX: usize = 4096;
/// Most attempts of [`Ledger::transact`] before a conflict is returned.
pub const TRANSACT_ATTEMPTS_MAX: u32 = 64;

/// How to open or create a ledger.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LedgerConfig {
    /// The ledger's tables, for a new ledger (any order; stored sorted). Opening an existing
    /// ledger with a non-empty list checks that it names exactly the ledger's tables; empty,
    /// the ledger's own list is used.
    pub tables: Vec<String>,
    /// The hash function of the tables' tries (and their proofs), for a new ledger. The
    /// history tree and the ledger root always use SHA-256.
    pub hash: HashKind,
    /// The tables' engine configuration (write buffer, Bloom filters, the trie's memory); its
    /// authentication is set by the ledger (hash from [`LedgerConfig::hash`]).
    pub table: TableConfig,
    /// Versions before the newest kept provable ([`Ledger::read_at`], [`Ledger::prove_promises`]):
    /// 0 (the default) keeps the newest only; `u64::MAX` keeps every version (an archive).
    /// The window is held in memory as one duplicate of each table per version (O(1) each:
    /// shared runs, write buffer layers and trie pages) and keeps the files those versions
    /// reach. It survives a restart: with the window on, each commit also stores what it
    /// overwrote (an *undo record*: one lookup per key written), and opening rebuilds the
    /// window's versions from the newest by applying them (one trie commit per version, each
    /// root checked against the version's record). Versions committed while the window was off
    /// have no undo record: the rebuilt window stops at the newest of them. Undo records
    /// leaving the window are deleted by the commit that moves it, or at open when the window
    /// shrank (`docs/ledger.md`, "Versions kept provable"). Measured
    /// (`docs/benchmarks/2026-11-29-ledger-window`): 110 bytes of undo record per one-key
    /// version, 1.5 to 4.3 KB of trie pages per version rebuilt at open (0.16 to 0.43 ms
    /// each), and one-key commits at 2.7 to 5.9 times the CPU time of no window.
    pub history: u64,
    /// Tables (of [`LedgerConfig::tables`]) kept *ordered*, for a new ledger: each key links to
    /// the next in key order, so that [`Ledger::read_range`] proves a range answer complete.
    /// An insert or delete also rewrites the key before it (one more write and two cursor
    /// reads); a value update costs a lookup. User keys of an ordered table are never empty.
    pub ordered: Vec<String>,
    /// Most transactions one version holds (group commit, `docs/ledger.md`, "Group commit"):
    /// concurrent [`Ledger::transact`] and [`Ledger::transact_proved`] calls whose bodies
    /// finish while a version is being committed share the next one, with one trie commit per
    /// table, one history append and one fsync. 0 and 1 (the default) make one version per
    /// transaction. A transaction with metadata always has a version of its own.
    pub group: usize,
    /// Most entries a range read answers ([`Ledger::read_range`], [`Ledger::read_range_at`],
    /// [`Ledger::range_values`]): a range holding more fails with [`Error::RangeTooLarge`]
    /// once `range_max + 1` entries are read, so that a server bounds what one request costs.
    /// 0 (the default): no limit.
    pub range_max: usize,
}

impl LedgerConfig {
    /// A configuration for a ledger of these tables, with the defaults otherwise.
    pub fn new<S: Into<String>>(tables: impl IntoIterator<Item = S>) -> LedgerConfig {
        LedgerConfig {
            tables: tables.into_iter().map(Into::into).collect(),
            ..LedgerConfig::default()
        }
    }

    /// Sets [`LedgerConfig::hash`].
    #[must_use]
    pub fn hash(mut self, hash: HashKind) -> LedgerConfig {
        self.hash = hash;
        self
    }

    /// Sets [`LedgerConfig::ordered`].
    #[must_use]
    pub fn ordered<S: Into<String>>(mut self, tables: impl IntoIterator<Item = S>) -> LedgerConfig {
        self.ordered = tables.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`LedgerConfig::group`].
    #[must_use]
    pub fn group(mut self, group: usize) -> LedgerConfig {
        self.group = group;
        self
    }

    /// Sets [`LedgerConfig::history`].
    #[must_use]
    pub fn history(mut self, history: u64) -> LedgerConfig {
        self.history = history;
        self
    }

    /// Sets [`LedgerConfig::range_max`].
    #[must_use]
    pub fn range_max(mut self, range_max: usize) -> LedgerConfig {
        self.range_max = range_max;
        self
    }

    /// Sets [`LedgerConfig::table`].
    #[must_use]
    pub fn table(mut self, table: TableConfig) -> LedgerConfig {
        self.table = table;
        self
    }
}

/// A version just committed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Committed {
    /// Its number (1 for the first commit).
    pub version: u64,
    /// Its ledger root.
    pub ledger_root: Hash,
    /// The ledger's digest with it: size `version`.
    pub digest: Digest,
    /// Fires when the version is durable (with every record it is made of).
    pub durability: Durability,
}

/// Values read at one version, with the receipt that proves them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VerifiedRead {
    /// The version read (the newest when the read ran).
    pub version: u64,
    /// The digest of that version: what the receipt verifies against.
    pub digest: Digest,
    /// For each table read, in the order asked, each key's value or `None`.
    pub values: Vec<Vec<Option<Vec<u8>>>>,
    /// For each ordered table read, what the receipt proves for each key: the stored link
    /// ([`cairn_proof::Link`]: the value and the next key), which the client claims and then
    /// decodes to check the value. Empty for a plain table, whose `values` are what it proves.
    pub proven: Vec<Vec<Option<Vec<u8>>>>,
    /// The proof ([`cairn_proof::verify_receipt`]).
    pub receipt: Receipt,
}

/// Keys of some tables with their values at one version and the receipt that proves them:
/// one side of a [`ProvedCommit`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProvedKeys {
    /// The tables (in name order) and their keys (sorted, for a commit's receipts; in the order
    /// promised, for [`Ledger::prove_promises`]): `read.values[i][j]` is the value of
    /// `keys[i].1[j]`.
    pub keys: Vec<(String, Vec<Vec<u8>>)>,
    /// The values and the receipt, against the digest of the commit's version.
    pub read: VerifiedRead,
}

/// A version made by [`Ledger::transact_proved`], with receipts for what its transaction
/// touched.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProvedCommit {
    /// The version made.
    pub committed: Committed,
    /// The keys the transaction read from the tables (not its own writes) as of the version
    /// before (`committed.version − 1`); `None` when it read none, or made version 1.
    pub reads: Option<ProvedKeys>,
    /// The keys it wrote (inserted or deleted) as of `committed.version`.
    pub writes: ProvedKeys,
}

/// A range of an ordered table read at one version, with its proof of completeness.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RangeRead {
    /// The version read (the newest when the read ran).
    pub version: u64,
    /// The digest of that version.
    pub digest: Digest,
    /// The entries, with the keys around the range ([`cairn_proof::RangeAnswer`]).
    pub answer: RangeAnswer,
    /// The proof ([`cairn_proof::verify_range`]).
    pub receipt: Receipt,
}

/// What the ledger keeps of one version.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VersionInfo {
    /// The version's history leaf (version, ledger root, metadata hash).
    pub leaf: HistoryLeaf,
    /// Each table's state root at the version, in table-name order.
    pub roots: Vec<(String, Root)>,
    /// The commit's metadata.
    pub meta: Vec<u8>,
}

/// A read the client will verify later ([`Ledger::prove_promises`]): the keys of a table it
/// read or wrote at a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promise {
    /// The version the operation saw or made.
    pub version: u64,
    /// The table.
    pub table: String,
    /// The keys.
    pub keys: Vec<Vec<u8>>,
}

struct State {
    history: History,
    /// The versions kept provable, oldest first, the newest included (empty when
    /// [`LedgerConfig::history`] is 0).
    window: std::collections::VecDeque<Retained>,
    /// The newest version's record (`None` before the first commit).
    head: Option<VersionRecord>,
    /// Set when a commit failed after its updates were logged.
    broken: Option<String>,
}

/// A verifiable ledger (see the crate doc): named authenticated durable tables committed
/// together as versions, a history tree over the versions with a digest, and reads with
/// receipts. Share it between threads (`&Ledger` or an `Arc`): commits are serialized, reads
/// run beside each other and wait only for a commit's last steps.
pub struct Ledger {
    session: Session,
    meta: LedgerMeta,
    /// The data tables, in `meta.tables` order.
    tables: Vec<Table>,
    history: Table,
    /// [`LedgerConfig::history`].
    keep: u64,
    /// [`LedgerConfig::group`], at least 1.
    group: usize,
    /// [`LedgerConfig::range_max`] (0: none).
    range_max: usize,
    /// Transactions waiting to commit (`group`).
    queue: group::Queue,
    state: RwLock<State>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("dir", &self.session.dir())
            .field("tables", &self.meta.tables)
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// Opens the ledger in `dir` on the real file system, creating it (and the directory) when
    /// there is none, with the engine's default session options (a write-ahead log with group
    /// commit). See [`Ledger::open_with`].
    ///
    /// ```
    /// use cairn_ledger::{Ledger, LedgerConfig};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let ledger = Ledger::open(dir.path(), LedgerConfig::new(["accounts"]))?;
    /// assert_eq!(ledger.version(), 0);
    /// # Ok::<(), cairn_ledger::Error>(())
    /// ```
    pub fn open(dir: impl AsRef<Path>, config: LedgerConfig) -> Result<Ledger> {
        Ledger::open_with(Arc::new(RealFs), dir, config, SessionOptions::default())
    }

    /// Opens (or creates) the ledger in `dir` on file system `fs` with session `options`
    /// (which must keep a log: the ledger's tables are durable). Recovery: the engine recovers
    /// the tables from their checkpoints and the log; then a commit whose updates were logged
    /// but whose version was not finished is finished (`docs/ledger.md`), and every table's
    /// root is checked against the newest version's record.
    ///
    /// Cost: the engine's recovery, one lookup of at most 63 history nodes, and for an
    /// unfinished commit, that commit's steps 2 and 3.
    ///
    /// Errors: [`Error::InvalidConfig`] (no tables for a new ledger, a reserved or repeated
    /// name, a list or hash that disagrees with the ledger's, no log), [`Error::Corrupted`]
    /// (the ledger's records disagree with its tables), and the engine's.
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        config: LedgerConfig,
        options: SessionOptions,
    ) -> Result<Ledger> {
        if options.log.is_none() {
            return Err(Error::InvalidConfig(
                "a ledger needs the session's write-ahead log".into(),
            ));
        }
        let mut names = config.tables.clone();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidConfig("a table name is repeated".into()));
        }
        // The configuration record counts tables in a u16 and each name's length in a byte
        // (the engine allows 64-byte names; the check comes before anything is written).
        if names.len() > usize::from(u16::MAX) {
            return Err(Error::InvalidConfig(format!(
                "{} tables; a ledger holds at most 65,535",
                names.len()
            )));
        }
        if let Some(name) = names.iter().find(|n| n.is_empty() || n.len() > 64) {
            return Err(Error::InvalidConfig(format!(
                "table name {name:?}: 1 to 64 bytes"
            )));
        }
        if let Some(name) = names.iter().find(|n| n.starts_with('_')) {
            return Err(Error::InvalidConfig(format!(
                "table name {name:?}: names starting with '_' are the ledger's"
            )));
        }
        let session = Session::open_with(fs, dir, options)?;
        let history = match session.durable_table(HISTORY_TABLE) {
            Some(history) => history,
            // Opening an existing ledger writes nothing to a directory that is not one.
            None if names.is_empty() => {
                return Err(Error::InvalidConfig(format!(
                    "{} is not a ledger (no {HISTORY_TABLE} table); name its tables to create one",
                    session.dir().display()
                )))
            }
            None => session.table(HISTORY_TABLE, TableConfig::default())?,
        };
        let meta = match history.get(KEY_META)? {
            Some(bytes) => {
                let meta = LedgerMeta::decode(&bytes)?;
                let ordered: Vec<bool> = names.iter().map(|n| config.ordered.contains(n)).collect();
                if !names.is_empty()
                    && (names != meta.tables || config.hash != meta.hash || ordered != meta.ordered)
                {
                    return Err(Error::InvalidConfig(format!(
                        "the ledger holds tables {:?} (ordered: {:?}) hashed with {:?}, not \
                         {names:?} (ordered: {:?}) with {:?}",
                        meta.tables, meta.ordered, meta.hash, config.ordered, config.hash
                    )));
                }
                meta
            }
            None => {
                if names.is_empty() {
                    return Err(Error::InvalidConfig(
                        "a new ledger needs at least one table".into(),
                    ));
                }
                // Tables first, then the record naming them, durably.
                if let Some(unknown) = config.ordered.iter().find(|o| !names.contains(o)) {
                    return Err(Error::InvalidConfig(format!(
                        "ordered table {unknown:?} is not one of the ledger's tables"
                    )));
                }
                let meta = LedgerMeta {
                    hash: config.hash,
                    ordered: names.iter().map(|n| config.ordered.contains(n)).collect(),
                    tables: names,
                };
                for name in &meta.tables {
                    session.table(name, table_config(&config.table, meta.hash))?;
                }
                history
                    .write(&[(KEY_META, Update::Insert(&meta.encode()))])?
                    .wait()?;
                meta
            }
        };
        let tables = meta
            .tables
            .iter()
            .map(|name| session.table(name, table_config(&config.table, meta.hash)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let size = match history.get(KEY_HEAD)? {
            Some(bytes) => decode_u64("head", &bytes)?,
            None => 0,
        };
        let mut state = State {
            history: History::load(&history, size)?,
            window: Default::default(),
            head: None,
            broken: None,
        };
        let ledger = Ledger {
            session,
            meta,
            tables,
            history,
            keep: config.history,
            group: config.group.max(1),
            range_max: config.range_max,
            queue: Default::default(),
            state: RwLock::new(State {
                history: History::default(),
                window: Default::default(),
                head: None,
                broken: None,
            }),
        };
        if size > 0 {
            state.head = Some(ledger.read_version(size)?);
        }
        if let Some(bytes) = ledger.history.get(KEY_PENDING)? {
            let pending = Pending::decode(&bytes)?;
            if pending.version == size + 1 {
                ledger.finish(&mut state, pending.version, &pending.meta)?;
                ledger.session.sync_log()?;
            } else if pending.version > size + 1 {
                return Err(Error::corrupted(
                    "pending commit",
                    format!("version {} after head {size}", pending.version),
                ));
            }
        }
        ledger.check_roots(&state)?;
        ledger.prune_undo(state.history.size())?;
        if ledger.keep > 0 && state.history.size() > 0 {
            ledger.rebuild_window(&mut state)?;
        }
        *ledger.state.write().expect("not poisoned") = state;
        Ok(ledger)
    }

    /// The ledger's tables, sorted.
    pub fn tables(&self) -> &[String] {
        &self.meta.tables
    }

    /// The hash function of the tables' tries.
    pub fn hash_kind(&self) -> HashKind {
        self.meta.hash
    }

    /// The newest version (0 before the first commit). O(1).
    pub fn version(&self) -> u64 {
        self.read_state().history.size()
    }

    /// The ledger's digest: the history tree's size (the newest version) and root. What a
    /// client keeps, and checks receipts and newer digests against. Cost: at most 62 node
    /// hashes, no I/O.
    pub fn digest(&self) -> Digest {
        self.read_state().history.digest()
    }

    /// The digest the ledger had at version `size` (0: the empty tree's). Cost: at most
    /// `⌈log₂ n⌉` node reads (one batched lookup) and hashes.
    ///
    /// Errors: [`Error::Prove`] for a size beyond the newest version, the engine's.
    pub fn digest_at(&self, size: u64) -> Result<Digest> {
        let state = self.read_state();
        state.history.digest_at(&self.history, size)
    }

    /// The proof that the ledger's history at `old_size` versions is a prefix of its history at
    /// `new_size` (RFC 9162): what a client holding the older digest checks a newer one with
    /// ([`cairn_proof::verify_consistency`]). `0 < old_size <= new_size <= version()`. Cost:
    /// at most `2·⌈log₂ n⌉` node reads, in one batched lookup.
    ///
    /// Errors: [`Error::Prove`] for sizes out of order or beyond the newest, the engine's.
    pub fn prove_consistency(&self, old_size: u64, new_size: u64) -> Result<ConsistencyProof> {
        let state = self.read_state();
        state
            .history
            .prove_consistency(&self.history, old_size, new_size)
    }

    /// The proof that version `version`'s leaf is in the history of `size` versions
    /// (`version <= size <= version()`). Cost: as [`Ledger::prove_consistency`].
    ///
    /// Errors: [`Error::NoSuchVersion`] for version 0, [`Error::Prove`] beyond the newest.
    pub fn prove_version(&self, version: u64, size: u64) -> Result<InclusionProof> {
        let state = self.read_state();
        if version == 0 {
            return Err(Error::NoSuchVersion {
                version,
                newest: state.history.size(),
            });
        }
        state
            .history
            .prove_inclusion(&self.history, version - 1, size)
    }

    /// The counters of the ledger's write-ahead log (records, groups, fsyncs, bytes), for
    /// monitoring. Errors: the engine's (a session without a log).
    pub fn log_stats(&self) -> Result<cairn::LogStats> {
        Ok(self.session.log_stats()?)
    }

    /// The engine's counters of table `table` (levels, runs, merges in progress, write buffer),
    /// for monitoring. Errors: [`Error::NoSuchTable`], the engine's.
    pub fn table_stats(&self, table: &str) -> Result<cairn::TableStats> {
        Ok(self.tables[self.table_index(table)?].stats()?)
    }

    /// Removes now the files no version reaches any more (normally removed a bounded step at
    /// a time by later operations): see [`Session::remove_released_files`]. For tools and
    /// tests that count files.
    ///
    /// Errors: the engine's.
    pub fn remove_released_files(&self) -> Result<()> {
        Ok(self.session.remove_released_files()?)
    }

    /// What the ledger keeps of version `version` (1 to [`Ledger::version`]): its leaf, every
    /// table's root and the metadata. Cost: one lookup.
    ///
    /// Errors: [`Error::NoSuchVersion`], [`Error::Corrupted`], the engine's.
    pub fn version_info(&self, version: u64) -> Result<VersionInfo> {
        let newest = self.version();
        if version == 0 || version > newest {
            return Err(Error::NoSuchVersion { version, newest });
        }
        let record = self.read_version(version)?;
        Ok(VersionInfo {
            leaf: record.leaf,
            roots: self.meta.tables.iter().cloned().zip(record.roots).collect(),
            meta: record.meta,
        })
    }

    /// The value of `key` in `table` as of the newest commit, unverified (no receipt): one
    /// lookup. Errors: [`Error::NoSuchTable`], the engine's.
    pub fn get(&self, table: &str, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let t = self.table_index(table)?;
        let key = key.as_ref();
        if !self.meta.ordered[t] {
            return Ok(self.tables[t].get(key)?);
        }
        check_ordered_key(key)?;
        match self.tables[t].get(key)? {
            Some(bytes) => links::value_of(key, &bytes),
            None => Ok(None),
        }
    }

    /// The values of `keys` of each table named as of the newest version, and that version,
    /// without a receipt: what a client keeps as a promise (with [`Promise`]) and verifies
    /// later with [`Ledger::prove_promises`]. Each table's keys in one batched lookup, under the
    /// read lock (so every value is of the version returned).
    ///
    /// Errors: [`Error::NoSuchTable`], the engine's (a key too large).
    pub fn read_values<K: AsRef<[u8]>>(&self, reads: &[(&str, &[K])]) -> Result<(u64, Values)> {
        let state = self.read_state();
        let mut values = Vec::with_capacity(reads.len());
        for (table, keys) in reads {
            let t = self.table_index(table)?;
            if self.meta.ordered[t] {
                keys.iter()
                    .try_for_each(|k| check_ordered_key(k.as_ref()))?;
            }
            let stored: Vec<Option<Vec<u8>>> = (self.tables[t].lookups(keys)?.into_iter())
                .map(|r| r.into_value())
                .collect();
            values.push(if self.meta.ordered[t] {
                link_values(keys, &stored)?
            } else {
                stored
            });
        }
        Ok((state.history.size(), values))
    }

    /// Reads `keys` of each table named, as of the newest version, with a receipt proving
    /// every answer (present with its value, or absent) against that version, and its digest:
    /// check it with [`cairn_proof::verify_receipt`] against a digest the client trusts (this
    /// one, once checked consistent with the last it held). Each table at most once.
    ///
    /// Cost: one batched lookup and one multiproof per table (about `log₂ n` trie nodes per key,
    /// one round of page reads per trie level below the retained ones), no history read (the
    /// newest leaf's path is on the tree's right edge). Commits wait meanwhile for their last
    /// steps.
    ///
    /// Errors: [`Error::NoSuchTable`], [`Error::InvalidConfig`] (a table named twice, no
    /// table), [`Error::NoSuchVersion`] before the first commit, the engine's (a key too large).
    pub fn read<K: AsRef<[u8]>>(&self, reads: &[(&str, &[K])]) -> Result<VerifiedRead> {
        let state = self.read_state();
        let version = state.history.size();
        self.read_in(&state, version, reads)
    }

    /// Reads `keys` of each table named as of version `version`, which may be older than the
    /// newest (within the window kept provable, [`LedgerConfig::history`]), with a receipt for
    /// that version against the newest digest: check it with
    /// [`cairn_proof::verify_receipt_at`]. Cost: as [`Ledger::read`], plus at most
    /// `2·⌈log₂ n⌉` history nodes read (one batched lookup) for an older version.
    ///
    /// Errors: [`Error::VersionPruned`] for a version older than the window,
    /// [`Error::NoSuchVersion`] for 0 or one beyond the newest, and as [`Ledger::read`].
    pub fn read_at<K: AsRef<[u8]>>(
        &self,
        version: u64,
        reads: &[(&str, &[K])],
    ) -> Result<VerifiedRead> {
        let state = self.read_state();
        self.read_in(&state, version, reads)
    }

    /// Proves a batch of promises (deferred verification): one receipt per version named, each
    /// covering every key promised at that version, against the newest digest; verify each with
    /// [`cairn_proof::verify_receipt_at`]. Returned in increasing version order, each with the
    /// keys it answers (its tables in name order, each table's keys in the order promised).
    /// Cost: one [`Ledger::read_at`] per distinct version.
    ///
    /// Errors: as [`Ledger::read_at`].
    pub fn prove_promises(&self, promises: &[Promise]) -> Result<Vec<ProvedKeys>> {
        let mut by_version: std::collections::BTreeMap<
            u64,
            std::collections::BTreeMap<&str, Vec<&[u8]>>,
        > = Default::default();
        for p in promises {
            by_version
                .entry(p.version)
                .or_default()
                .entry(p.table.as_str())
                .or_default()
                .extend(p.keys.iter().map(|k| &k[..]));
        }
        let state = self.read_state();
        by_version
            .iter()
            .map(|(&version, tables)| {
                let reads: Vec<(&str, &[&[u8]])> =
                    tables.iter().map(|(t, keys)| (*t, &keys[..])).collect();
                let read = self.read_in(&state, version, &reads)?;
                let keys = (tables.iter())
                    .map(|(t, keys)| (t.to_string(), keys.iter().map(|k| k.to_vec()).collect()))
                    .collect();
                Ok(ProvedKeys { keys, read })
            })
            .collect()
    }

    fn read_in<K: AsRef<[u8]>>(
        &self,
        state: &State,
        version: u64,
        reads: &[(&str, &[K])],
    ) -> Result<VerifiedRead> {
        if reads.is_empty() {
            return Err(Error::InvalidConfig(
                "a read names at least one table".into(),
            ));
        }
        let mut order: Vec<(usize, usize)> = Vec::with_capacity(reads.len());
        for (i, (name, _)) in reads.iter().enumerate() {
            order.push((self.table_index(name)?, i));
        }
        order.sort_unstable();
        if order.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidConfig("a read names a table twice".into()));
        }
        let newest = state.history.size();
        if version == 0 || version > newest {
            return Err(Error::NoSuchVersion { version, newest });
        }
        // The tables as of `version`: the live ones for the newest, else the window's copies.
        let tables = self.tables_at(state, version)?;
        let record = match &state.head {
            Some(head) if version == newest => head.clone(),
            None => return Err(Error::NoSuchVersion { version, newest }),
            Some(_) => self.read_version(version)?,
        };
        let pairs: Vec<(&[u8], Root)> = self
            .meta
            .tables
            .iter()
            .map(|n| n.as_bytes())
            .zip(record.roots.iter().copied())
            .collect();
        let mut values = vec![Vec::new(); reads.len()];
        let mut proven = vec![Vec::new(); reads.len()];
        let mut sections = Vec::with_capacity(reads.len());
        for &(t, i) in &order {
            let keys = reads[i].1;
            let table = &tables[t];
            let stored: Vec<Option<Vec<u8>>> = table
                .lookups(keys)?
                .into_iter()
                .map(|r| r.into_value())
                .collect();
            if self.meta.ordered[t] {
                values[i] = link_values(keys, &stored)?;
                proven[i] = stored;
            } else {
                values[i] = stored;
            }
            let proved = table.prove(keys)?;
            if proved.root != record.roots[t] {
                return Err(Error::corrupted(
                    format!("table {:?}", self.meta.tables[t]),
                    format!("its root differs from version {version}'s record"),
                ));
            }
            sections.push(ReceiptTable {
                name: self.meta.tables[t].clone(),
                root: proved.root,
                index: t as u32,
                path: ledger_path(&pairs, t).map_err(|e| Error::InvalidConfig(e.to_string()))?,
                proof: proved.proof,
            });
        }
        let inclusion = state
            .history
            .prove_inclusion(&self.history, version - 1, newest)?;
        let receipt = Receipt {
            version,
            meta: record.leaf.meta,
            table_count: self.tables.len() as u32,
            tables: sections,
            history_size: inclusion.size,
            history_path: inclusion.path,
        };
        Ok(VerifiedRead {
            version,
            digest: state.history.digest(),
            values,
            proven,
            receipt,
        })
    }

    /// Reads `keys` (by table index) as of `version` with [`Ledger::read_in`], keeping the keys
    /// beside the answer (tables in name order, keys sorted).
    fn prove_keys(
        &self,
        state: &State,
        version: u64,
        keys: BTreeMap<usize, BTreeSet<Vec<u8>>>,
    ) -> Result<ProvedKeys> {
        let keys: Vec<(String, Vec<Vec<u8>>)> = keys
            .into_iter()
            .map(|(t, keys)| (self.meta.tables[t].clone(), keys.into_iter().collect()))
            .collect();
        let reads: Vec<(&str, &[Vec<u8>])> =
            keys.iter().map(|(t, k)| (t.as_str(), &k[..])).collect();
        let read = self.read_in(state, version, &reads)?;
        Ok(ProvedKeys { keys, read })
    }

    /// Reads the keys of ordered table `table` in `[lo, hi]` (both included) as of the newest
    /// version, with the answer's proof of completeness: the key before the range and the key
    /// after, each key's link proved by the receipt. Check it with
    /// [`cairn_proof::verify_range`]: no key of the range was left out and none added.
    ///
    /// Cost: two cursors over the table, the entries read, and a receipt for `m + 1` keys (about
    /// `(m + 1)·32·(log₂ n − log₂ (m + 1) + 2)` bytes of proof).
    ///
    /// Errors: [`Error::NoSuchTable`], [`Error::InvalidConfig`] (a table that is not ordered,
    /// `lo` above `hi`), [`Error::NoSuchVersion`] before the first commit, the engine's.
    pub fn read_range(
        &self,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<RangeRead> {
        let state = self.read_state();
        let version = state.history.size();
        self.range_in(&state, version, table, lo.as_ref(), hi.as_ref())
    }

    /// [`Ledger::read_range`] as of version `version`, which may be older than the newest
    /// (within the window, [`LedgerConfig::history`]), against the newest digest: check it with
    /// [`cairn_proof::verify_range_at`]. What a deferred verifier asks for a range promised
    /// by [`Ledger::range_values`].
    ///
    /// Errors: as [`Ledger::read_range`] and [`Ledger::read_at`].
    pub fn read_range_at(
        &self,
        version: u64,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<RangeRead> {
        let state = self.read_state();
        self.range_in(&state, version, table, lo.as_ref(), hi.as_ref())
    }

    /// The entries of ordered table `table` in `[lo, hi]` as of the newest version, and that
    /// version, without a proof: what a client keeps as a promise and has proved later with
    /// [`Ledger::read_range_at`]. Cost: two cursors and the entries read.
    ///
    /// Errors: as [`Ledger::read_range`].
    pub fn range_values(
        &self,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<(u64, RangeAnswer)> {
        let t = self.ordered_index(table)?;
        let state = self.read_state();
        let answer =
            links::range_answer(&self.tables[t], lo.as_ref(), hi.as_ref(), self.range_max)?;
        Ok((state.history.size(), answer))
    }

    fn range_in(
        &self,
        state: &State,
        version: u64,
        table: &str,
        lo: &[u8],
        hi: &[u8],
    ) -> Result<RangeRead> {
        let t = self.ordered_index(table)?;
        let tables = self.tables_at(state, version)?;
        let answer = links::range_answer(&tables[t], lo, hi, self.range_max)?;
        let keys = answer.proved_keys();
        let read = self.read_in(state, version, &[(table, &keys[..])])?;
        Ok(RangeRead {
            version: read.version,
            digest: read.digest,
            answer,
            receipt: read.receipt,
        })
    }

    /// The index of ordered table `table`.
    fn ordered_index(&self, table: &str) -> Result<usize> {
        let t = self.table_index(table)?;
        if !self.meta.ordered[t] {
            return Err(Error::InvalidConfig(format!(
                "table {table:?} is not ordered: range proofs need LedgerConfig::ordered"
            )));
        }
        Ok(t)
    }

    /// Runs `body` in a read-modify-write transaction over the ledger's tables and commits
    /// what it wrote as the next version, with `meta` (at most [`META_BYTES_MAX`] bytes: a
    /// block header, a timestamp, a client's request id) hashed into its history leaf. A
    /// conflict runs `body` again (up to [`TRANSACT_ATTEMPTS_MAX`] times, with growing pauses).
    /// Returns what `body` returned and the version made (`None` when `body` wrote nothing:
    /// no version).
    ///
    /// Serializable: every read is validated at commit (the engine's transactions), and the
    /// version's ledger root covers exactly the writes of the transactions before it. Cost:
    /// the engine's transaction, then (commits are serialized) one commit of each table's trie,
    /// one ledger root (two hashes per table), one history append (amortised one node hash)
    /// and one write of the version's record and nodes.
    ///
    /// Errors: those of `body`, [`Error::MetaTooLong`], [`Error::Broken`], the engine's
    /// ([`cairn::Error::TransactionConflict`] after the last attempt). An error after the
    /// updates were logged breaks the ledger (see [`Error::Broken`]).
    pub fn transact<T>(
        &self,
        meta: &[u8],
        body: impl FnMut(&mut LedgerTx<'_>) -> Result<T>,
    ) -> Result<(T, Option<Committed>)> {
        let (out, made) = self.transact_in(meta, body, false)?;
        Ok((out, made.map(|(committed, _)| committed)))
    }

    /// [`Ledger::transact`], answered with receipts for what the transaction touched: the
    /// values of the keys it read as of the version before its own, and those of the keys it
    /// wrote as of its version, both against the digest of its version. A client that checks
    /// them (consistency from the digest it trusts to [`Committed::digest`], then
    /// [`cairn_proof::verify_receipt_at`] for the reads and [`cairn_proof::verify_receipt`]
    /// for the writes) knows the transaction saw those values and left these, which immudb's
    /// `VerifiedSet`/`VerifiedGet` cannot say of a read (`docs/ledger.md`, "Freshness").
    ///
    /// Cost: as [`Ledger::transact`], plus, under the commit lock (so commits wait for it), one
    /// [`Ledger::read`] of the keys read before the commit and one of the keys written after it,
    /// and one inclusion proof (`⌈log₂ n⌉` history nodes).
    ///
    /// Errors: as [`Ledger::transact`].
    pub fn transact_proved<T>(
        &self,
        meta: &[u8],
        body: impl FnMut(&mut LedgerTx<'_>) -> Result<T>,
    ) -> Result<(T, Option<ProvedCommit>)> {
        let (out, made) = self.transact_in(meta, body, true)?;
        Ok((
            out,
            made.map(|(committed, proved)| {
                let (reads, writes) = proved.expect("proved when asked");
                ProvedCommit {
                    committed,
                    reads,
                    writes,
                }
            }),
        ))
    }

    /// [`Ledger::transact`] and [`Ledger::transact_proved`]: with `prove`, the receipts of the
    /// keys read (as of the version before, `None` when none were read or for version 1) and
    /// written (as of the version).
    fn transact_in<T>(
        &self,
        meta: &[u8],
        mut body: impl FnMut(&mut LedgerTx<'_>) -> Result<T>,
        prove: bool,
    ) -> Result<(T, Option<Made>)> {
        if meta.len() > META_BYTES_MAX {
            return Err(Error::MetaTooLong(meta.len()));
        }
        let mut attempt = 1;
        loop {
            // A broken ledger says so before anything else can fail.
            if let Some(broken) = &self.read_state().broken {
                return Err(Error::Broken(broken.clone()));
            }
            let mut tx = LedgerTx {
                ledger: self,
                tx: self.session.transaction()?,
                ordered: BTreeMap::new(),
                written: BTreeSet::new(),
                touched: (prove || self.group > 1).then(Touched::default),
            };
            let out = body(&mut tx)?;
            if !tx.wrote() {
                return Ok((out, None));
            }
            match self.submit(tx.into_submission(meta, prove)) {
                group::Outcome::Made(made) => return Ok((out, Some(*made))),
                group::Outcome::Failed(e) => return Err(e),
                // Wrote a key an earlier member of its group wrote: the next group.
                group::Outcome::Retry(None) => std::thread::yield_now(),
                group::Outcome::Retry(Some(e)) => {
                    if attempt >= TRANSACT_ATTEMPTS_MAX {
                        return Err(e.into());
                    }
                    backoff(attempt);
                    attempt += 1;
                }
            }
        }
    }

    /// Commits `batch` as the next version (blind writes: nothing is read, so nothing
    /// conflicts, and no transaction is needed: the updates and the pending record go to the
    /// log as one of the engine's atomic batches across tables). An empty batch makes no
    /// version. Cost: as [`Ledger::transact`] without the transaction's view and validation.
    ///
    /// Errors: [`Error::NoSuchTable`], [`Error::MetaTooLong`], [`Error::Broken`], the engine's
    /// (input errors leave the ledger as it was; an error after the batch may have been logged
    /// breaks it, see [`Error::Broken`]).
    pub fn write(&self, batch: &LedgerBatch) -> Result<Option<Committed>> {
        if batch.meta.len() > META_BYTES_MAX {
            return Err(Error::MetaTooLong(batch.meta.len()));
        }
        // (table, key, value or delete)
        type Part<'a> = (usize, &'a [u8], Option<&'a [u8]>);
        let mut parts: Vec<Part<'_>> = Vec::with_capacity(batch.len());
        for (table, key, value) in &batch.updates {
            let t = self.table_index(table)?;
            if self.meta.ordered[t] {
                check_ordered_key(key)?;
            }
            parts.push((t, key, value.as_deref()));
        }
        if parts.is_empty() {
            return Ok(None);
        }
        let mut state = self.write_state();
        if let Some(broken) = &state.broken {
            return Err(Error::Broken(broken.clone()));
        }
        let version = state.history.size() + 1;
        let mut writes = cairn::WriteBatch::new();
        let mut ordered: BTreeMap<usize, Writes> = BTreeMap::new();
        // The stored keys written, for the undo record (only with the window on).
        let mut written: BTreeSet<(usize, Vec<u8>)> = BTreeSet::new();
        for &(t, key, value) in &parts {
            if self.meta.ordered[t] {
                ordered
                    .entry(t)
                    .or_default()
                    .insert(key.to_vec(), value.map(<[u8]>::to_vec));
                continue;
            }
            if self.keep > 0 {
                written.insert((t, key.to_vec()));
            }
            match value {
                Some(value) => writes.insert(&self.tables[t], key, value),
                None => writes.delete(&self.tables[t], key),
            };
        }
        for (t, table_writes) in &ordered {
            let table = &self.tables[*t];
            for (key, stored) in links::updates(table, table_writes)? {
                if self.keep > 0 {
                    written.insert((*t, key.clone()));
                }
                match stored {
                    Some(bytes) => writes.insert(table, key, bytes),
                    None => writes.delete(table, key),
                };
            }
        }
        // Version 1 needs none: version 0 is never read.
        if self.keep > 0 && version > 1 {
            let undo = self.undo_of(written)?;
            writes.insert(&self.history, undo_key(version), undo.encode());
        }
        let pending = Pending {
            version,
            meta: batch.meta.clone(),
        };
        writes.insert(&self.history, KEY_PENDING, pending.encode());
        match self.session.write_batch(&writes) {
            // Covered by the handle of the version's last record, as in `transact`.
            Ok(durability) => durability.release(),
            Err(e) => {
                if breaks(&e) {
                    state.broken = Some(e.to_string());
                }
                return Err(e.into());
            }
        }
        match self.finish(&mut state, version, &batch.meta) {
            Ok(committed) => Ok(Some(committed)),
            Err(e) => {
                state.broken = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Writes and fsyncs everything logged so far, and waits for it.
    pub fn sync(&self) -> Result<()> {
        Ok(self.session.sync_log()?)
    }

    /// Saves every table as a checkpoint and drops the log before them ([`Session::checkpoint`]).
    pub fn checkpoint(&self) -> Result<()> {
        Ok(self.session.checkpoint()?)
    }

    /// Closes the ledger's session (what is logged stays; durability as the log's policy).
    pub fn close(&self) {
        for kept in &self.read_state().window {
            kept.tables.iter().for_each(Table::close);
        }
        self.session.close();
    }

    // ---------------------------------------------------------------------------------------

    /// Steps 2 and 3 of a commit (see the module doc), for version `version` whose updates
    /// and pending record are logged.
    fn finish(&self, state: &mut State, version: u64, meta: &[u8]) -> Result<Committed> {
        let mut roots = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            // Logged before the version's record, whose handle covers it.
            let (commit, durability) = table.commit_logged()?;
            durability.into_iter().for_each(Durability::release);
            roots.push(commit.root);
        }
        let pairs: Vec<(&[u8], Root)> = self
            .meta
            .tables
            .iter()
            .map(|n| n.as_bytes())
            .zip(roots.iter().copied())
            .collect();
        let ledger_root = ledger_root(&pairs).map_err(|e| Error::InvalidConfig(e.to_string()))?;
        let leaf = HistoryLeaf {
            version,
            ledger_root,
            meta: meta_hash(meta),
        };
        let mut history = state.history.clone();
        let nodes = history.append(leaf.hash());
        let record = VersionRecord {
            leaf,
            roots,
            meta: meta.to_vec(),
        };
        let keys: Vec<Vec<u8>> = nodes
            .iter()
            .map(|&((level, index), _)| crate::records::node_key(level, index).to_vec())
            .collect();
        let record_bytes = record.encode();
        let head = version.to_be_bytes();
        let mut updates: Vec<(&[u8], Update<'_>)> = keys
            .iter()
            .zip(&nodes)
            .map(|(k, (_, hash))| (&k[..], Update::Insert(&hash[..])))
            .collect();
        let vkey = version_key(version);
        updates.push((&vkey, Update::Insert(&record_bytes)));
        updates.push((KEY_HEAD, Update::Insert(&head)));
        updates.push((KEY_PENDING, Update::Delete));
        // The window is now versions `version − keep ..= version`: rebuilding its oldest needs
        // the undo records of the versions after it only.
        let leaving = (self.keep > 0 && version > self.keep).then(|| undo_key(version - self.keep));
        if let Some(key) = &leaving {
            updates.push((&key[..], Update::Delete));
        }
        let durability = self.history.write(&updates)?;
        state.history = history;
        state.head = Some(record);
        self.retain(state, version)?;
        Ok(Committed {
            version,
            ledger_root,
            digest: state.history.digest(),
            durability,
        })
    }

    /// What an audit works on: the newest version, a duplicate of each table as of it, and
    /// its recorded roots (`None` before the first commit). Cost: one O(1) duplicate per table.
    pub(crate) fn audit_view(&self) -> Result<(u64, Vec<Table>, Option<Vec<Root>>)> {
        let state = self.read_state();
        let tables = self
            .tables
            .iter()
            .map(|t| t.duplicate())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((
            state.history.size(),
            tables,
            state.head.as_ref().map(|h| h.roots.clone()),
        ))
    }

    /// The ledger's internal table (its records and history nodes).
    pub(crate) fn history_table(&self) -> &Table {
        &self.history
    }

    /// Whether table `t` (in name order) is ordered.
    pub(crate) fn is_ordered(&self, t: usize) -> bool {
        self.meta.ordered[t]
    }

    /// Every table's last commit must be the newest version's root: anything else means the
    /// tables and the ledger's records disagree.
    fn check_roots(&self, state: &State) -> Result<()> {
        for (t, table) in self.tables.iter().enumerate() {
            let root = table.last_commit()?.root;
            let expected =
                match &state.head {
                    Some(head) => head.roots.get(t).copied().ok_or_else(|| {
                        Error::corrupted("version record", "fewer roots than tables")
                    })?,
                    None => Root::empty(self.meta.hash),
                };
            if root != expected {
                return Err(Error::corrupted(
                    format!("table {:?}", self.meta.tables[t]),
                    format!(
                        "its root differs from the one version {} recorded",
                        state.history.size()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn read_version(&self, version: u64) -> Result<VersionRecord> {
        let what = format!("version {version}");
        let bytes = self
            .history
            .get(version_key(version))?
            .ok_or_else(|| Error::corrupted(what.clone(), "missing"))?;
        let record = VersionRecord::decode(&bytes)?;
        if record.leaf.version != version || record.roots.len() != self.tables.len() {
            return Err(Error::corrupted(what, "its leaf or roots do not fit"));
        }
        Ok(record)
    }

    fn table_index(&self, name: &str) -> Result<usize> {
        self.meta
            .tables
            .binary_search_by(|n| n.as_str().cmp(name))
            .map_err(|_| Error::NoSuchTable(name.to_string()))
    }

    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        // A panic under the lock leaves the state as the last finished step left it.
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// A read-modify-write transaction over a ledger's tables ([`Ledger::transact`]): reads see
/// the tables as of its start plus its own writes; writes are buffered until the commit.
pub struct LedgerTx<'a> {
    ledger: &'a Ledger,
    tx: cairn::Transaction,
    /// Writes to ordered tables, by table: their links are made at commit.
    ordered: BTreeMap<usize, Writes>,
    /// The stored keys written, for the undo record (tracked only with the window on).
    written: BTreeSet<(usize, Vec<u8>)>,
    /// The keys read and written, by table (tracked only by [`Ledger::transact_proved`]).
    touched: Option<Touched>,
}

/// Values read, by table then key (`None`: absent).
pub type Values = Vec<Vec<Option<Vec<u8>>>>;

/// A version `Ledger::transact_in` made, with, when asked, the receipts of the keys read (as of
/// the version before) and written.
type Made = (Committed, Option<(Option<ProvedKeys>, ProvedKeys)>);

/// The keys a transaction touched, by table index: what [`Ledger::transact_proved`] proves.
#[derive(Default)]
struct Touched {
    /// Keys read from the tables (not from the transaction's own writes).
    read: BTreeMap<usize, BTreeSet<Vec<u8>>>,
    /// Keys written (inserted or deleted).
    written: BTreeMap<usize, BTreeSet<Vec<u8>>>,
}

impl LedgerTx<'_> {
    /// The value of `key` in `table` as this transaction sees it (validated at commit).
    /// Errors: [`Error::NoSuchTable`], the engine's.
    pub fn get(&mut self, table: &str, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let t = self.ledger.table_index(table)?;
        let key = key.as_ref();
        if let Some(touched) = &mut self.touched {
            // A key this transaction wrote reads its own write, not the tables.
            if !touched.written.get(&t).is_some_and(|w| w.contains(key)) {
                touched.read.entry(t).or_default().insert(key.to_vec());
            }
        }
        if !self.ledger.meta.ordered[t] {
            return Ok(self.tx.get(&self.ledger.tables[t], key)?);
        }
        check_ordered_key(key)?;
        if let Some(write) = self.ordered.get(&t).and_then(|w| w.get(key)) {
            return Ok(write.clone());
        }
        match self.tx.get(&self.ledger.tables[t], key)? {
            Some(bytes) => links::value_of(key, &bytes),
            None => Ok(None),
        }
    }

    /// Sets `key` of `table` to `value`. Errors: [`Error::NoSuchTable`], the engine's (a key
    /// or value too large).
    pub fn insert(
        &mut self,
        table: &str,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let t = self.ledger.table_index(table)?;
        self.note_touched(t, key.as_ref());
        if !self.ledger.meta.ordered[t] {
            self.tx
                .insert(&self.ledger.tables[t], key.as_ref(), value)?;
            self.note_written(t, key.as_ref());
            return Ok(());
        }
        check_ordered_key(key.as_ref())?;
        self.ordered
            .entry(t)
            .or_default()
            .insert(key.as_ref().to_vec(), Some(value.as_ref().to_vec()));
        Ok(())
    }

    /// Removes `key` from `table`. Errors: as [`LedgerTx::insert`].
    pub fn delete(&mut self, table: &str, key: impl AsRef<[u8]>) -> Result<()> {
        let t = self.ledger.table_index(table)?;
        self.note_touched(t, key.as_ref());
        if !self.ledger.meta.ordered[t] {
            self.tx.delete(&self.ledger.tables[t], key.as_ref())?;
            self.note_written(t, key.as_ref());
            return Ok(());
        }
        check_ordered_key(key.as_ref())?;
        self.ordered
            .entry(t)
            .or_default()
            .insert(key.as_ref().to_vec(), None);
        Ok(())
    }

    fn note_touched(&mut self, t: usize, key: &[u8]) {
        if let Some(touched) = &mut self.touched {
            touched.written.entry(t).or_default().insert(key.to_vec());
        }
    }

    fn note_written(&mut self, t: usize, key: &[u8]) {
        // For the undo record, and for the group's check that no key is written twice.
        if self.ledger.keep > 0 || self.ledger.group > 1 {
            self.written.insert((t, key.to_vec()));
        }
    }

    fn wrote(&self) -> bool {
        self.tx.writes() > 0 || self.ordered.values().any(|w| !w.is_empty())
    }
}

/// Whether an error writing a commit's first record leaves the ledger broken: any error but a
/// refusal of the input (which logs nothing).
fn breaks(e: &cairn::Error) -> bool {
    !matches!(
        e,
        cairn::Error::KeyTooLarge { .. }
            | cairn::Error::ValueTooLarge { .. }
            | cairn::Error::BlobTooLarge { .. }
            | cairn::Error::InvalidUpdate(_)
            | cairn::Error::InvalidConfig(_)
    )
}

/// The values of an ordered table's `keys` from their stored links (`None`: absent).
fn link_values<K: AsRef<[u8]>>(
    keys: &[K],
    stored: &[Option<Vec<u8>>],
) -> Result<Vec<Option<Vec<u8>>>> {
    keys.iter()
        .zip(stored)
        .map(|(k, stored)| match stored {
            Some(bytes) => links::value_of(k.as_ref(), bytes),
            None => Ok(None),
        })
        .collect()
}

/// An ordered table's user keys are never empty (the empty key is its head).
fn check_ordered_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidConfig(
            "the empty key is an ordered table's head; user keys are never empty".into(),
        ));
    }
    Ok(())
}

/// Blind writes to commit as one version ([`Ledger::write`]), with the version's metadata.
#[derive(Clone, Debug, Default)]
pub struct LedgerBatch {
    updates: Vec<(String, Vec<u8>, Option<Vec<u8>>)>,
    meta: Vec<u8>,
}

impl LedgerBatch {
    /// An empty batch with no metadata.
    pub fn new() -> LedgerBatch {
        LedgerBatch::default()
    }

    /// Sets `key` of `table` to `value`.
    pub fn insert(
        &mut self,
        table: &str,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.updates.push((
            table.to_string(),
            key.as_ref().to_vec(),
            Some(value.as_ref().to_vec()),
        ));
        self
    }

    /// Removes `key` from `table`.
    pub fn delete(&mut self, table: &str, key: impl AsRef<[u8]>) -> &mut Self {
        self.updates
            .push((table.to_string(), key.as_ref().to_vec(), None));
        self
    }

    /// Sets the version's metadata (at most [`META_BYTES_MAX`] bytes).
    pub fn meta(&mut self, meta: impl AsRef<[u8]>) -> &mut Self {
        self.meta = meta.as_ref().to_vec();
        self
    }

    /// Updates in the batch.
    pub fn len(&self) -> usize {
        self.updates.len()
    }

    /// Whether the batch holds no update.
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty()
    }
}

/// The hash of a commit's metadata, as its history leaf holds it: `SHA-256(meta)`.
pub fn meta_hash(meta: &[u8]) -> Hash {
    Sha256::digest(meta).into()
}

fn table_config(base: &TableConfig, hash: HashKind) -> TableConfig {
    let auth = base.auth.unwrap_or_default().hash(hash);
    base.clone().auth(Some(auth))
}

/// A pause before attempt `attempt + 1` of a transaction: a yield, then a sleep of up to
/// `2^attempt` microseconds (at most about 4 ms), spread by the clock's low bits.
fn backoff(attempt: u32) {
    std::thread::yield_now();
    if attempt > 1 {
        let cap = 1u64 << attempt.min(12);
        let spread = u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos()),
        );
        std::thread::sleep(Duration::from_micros(spread % cap));
    }
}

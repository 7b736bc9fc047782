//! LMDB (through the `heed` crate) behind the benchmark's [`Engine`] interface.
//!
//! Owns: one LMDB environment in the engine's directory (`data.mdb` and `lock.mdb`) holding the
//! table in its unnamed database, keys and values stored as raw bytes. Must never touch: the
//! workload.
//!
//! Settings, and where they come from:
//!
//! - `MDB_NORDAHEAD` (heed's `EnvFlags::NO_READ_AHEAD`). LMDB's documentation
//!   (`mdb_env_open` in `lmdb.h`): "Turn off readahead. Most operating systems perform readahead
//!   on read requests by default. This option turns it off if the OS supports it. Turning it off
//!   may help random read performance when the DB is larger than RAM and system RAM is full."
//!   The UTxO table is read at random, so readahead only wastes I/O and page cache.
//! - A 64 GiB map (`mdb_env_set_mapsize`: "The size should be a multiple of the OS page size...
//!   the size may be changed by closing and reopening the environment"). The map is sparse: it
//!   reserves address space, not disk, and is large enough for 100 million entries (about 100
//!   bytes each before B-tree overhead).
//! - `MDB_NOSYNC` (`EnvFlags::NO_SYNC`): a commit hands its pages to the operating system without
//!   an `fsync`, the same durability the peers give a write by default (RocksDB's
//!   `WriteOptions::sync = false`, fjall's `PersistMode::Buffer`, Cairn's buffered updates);
//!   without it every `update` would pay an `fsync` the other engines do not. Durability is
//!   forced once at the end of the setup ([`Engine::finish_load`]: `mdb_env_sync(force)`).
//! - Read transactions without thread-local storage (heed's `read_txn_without_tls`, LMDB's
//!   `MDB_NOTLS`), so a [`Reader`] (an open read transaction) may move to the pipelined mode's
//!   lookup thread.
//!
//! - The setup loads the table in key order with `MDB_APPEND` (heed's `PutFlags::APPEND`;
//!   `mdb_put`: "Append the given key/data pair to the end of the database. This option allows
//!   fast bulk loading when keys are already known to be in the correct order"), LMDB's bulk-load
//!   path. Random inserts wrote about 4 KiB per entry (every insert dirtied its own leaf page),
//!   which took LMDB's 100M-entry setup past an hour on this disk; appended pages are full, as
//!   after `mdb_copy -c`.
//!
//! LMDB reads through its memory map, so it has no direct-I/O mode and no cache of its own: the
//! operating system's page cache is its cache, and `--direct-io` does not apply.

use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, PutFlags, RoTxn, WithoutTls};

use crate::engines::{Engine, EngineOptions, Key, Reader, Value};
use crate::failure::{Context, Failure};

/// The map size: 64 GiB of address space (the file grows only as pages are written).
const MAP_SIZE: usize = 64 << 30;

/// The file LMDB keeps its data in, inside the engine's directory.
const DATA_FILE: &str = "data.mdb";

/// An LMDB environment holding the benchmark's table in its unnamed database.
pub struct LmdbEngine {
    env: Env<WithoutTls>,
    db: Database<'static, Bytes, Bytes>,
    settings: String,
}

impl LmdbEngine {
    /// Creates a new environment in `dir` (`create`: `dir` must not hold one yet), or opens the
    /// one a previous setup left there.
    pub fn open(dir: &Path, create: bool, options: &EngineOptions) -> Result<LmdbEngine, Failure> {
        let _ = options; // LMDB has no salt and no direct-I/O mode.
        let data = dir.join(DATA_FILE);
        if create {
            if data.exists() {
                return Err(Failure(format!(
                    "{} already holds an LMDB table: remove it or use a new directory",
                    dir.display()
                )));
            }
            std::fs::create_dir_all(dir)
                .context(|| format!("creating the directory {}", dir.display()))?;
        } else if !data.exists() {
            return Err(Failure(format!(
                "{} holds no LMDB table (run `utxo setup` first)",
                dir.display()
            )));
        }

        let mut env_options = EnvOpenOptions::new().read_txn_without_tls();
        env_options.map_size(MAP_SIZE);
        let env = {
            // SAFETY: `NO_SYNC` and `NO_READ_AHEAD` trade durability and prefetching only, never
            // memory safety (heed marks `flags` unsafe for `NO_LOCK`-style flags, not used here).
            unsafe { env_options.flags(EnvFlags::NO_READ_AHEAD | EnvFlags::NO_SYNC) };
            // SAFETY: the memory map stays valid because nothing else modifies the files of the
            // engine's own directory while it is open (LMDB's lock file guards other processes
            // using LMDB; the benchmark writes the files only through this environment).
            unsafe { env_options.open(dir) }
                .context(|| format!("opening an LMDB environment in {}", dir.display()))?
        };

        let db = if create {
            let wtxn = env
                .write_txn()
                .context(|| "starting a write transaction".to_string())?;
            let created = env.create_databases_and_commit(wtxn, |opener, wtxn| {
                opener
                    .create_database::<Bytes, Bytes>(wtxn, None)
                    .map(CommitOrAbort::<_, ()>::Commit)
            });
            match created.context(|| "creating the database".to_string())? {
                CommitOrAbort::Commit(db) => db,
                CommitOrAbort::Abort(()) => {
                    return Err(Failure("creating the database was aborted".to_string()))
                }
            }
        } else {
            let rtxn = env
                .read_txn()
                .context(|| "starting a read transaction".to_string())?;
            let opened = env.open_databases_and_commit(rtxn, |opener, rtxn| {
                opener
                    .open_database::<Bytes, Bytes>(rtxn, None)
                    .map(CommitOrAbort::<_, ()>::Commit)
            });
            match opened.context(|| "opening the database".to_string())? {
                CommitOrAbort::Commit(Some(db)) => db,
                CommitOrAbort::Commit(None) | CommitOrAbort::Abort(()) => {
                    return Err(Failure(format!(
                        "the LMDB environment in {} has no database",
                        dir.display()
                    )))
                }
            }
        };

        let settings = format!(
            "map {} GiB, MDB_NORDAHEAD (random reads), MDB_NOSYNC (sync at end of setup), \
             MDB_NOTLS read transactions, OS page cache (no direct I/O)",
            MAP_SIZE >> 30
        );
        Ok(LmdbEngine { env, db, settings })
    }

    /// Writes `inserts` and `deletes` in one write transaction.
    fn write(&self, inserts: &[(Key, Value)], deletes: &[Key], what: &str) -> Result<(), Failure> {
        let mut wtxn = self
            .env
            .write_txn()
            .context(|| format!("{what}: starting a write transaction"))?;
        for (key, value) in inserts {
            self.db
                .put(&mut wtxn, &key[..], &value[..])
                .context(|| format!("{what}: inserting"))?;
        }
        for key in deletes {
            self.db
                .delete(&mut wtxn, &key[..])
                .context(|| format!("{what}: deleting"))?;
        }
        wtxn.commit().context(|| format!("{what}: committing"))
    }
}

/// Looks up `keys` in `db` through the read transaction `txn`.
fn values(
    db: Database<'static, Bytes, Bytes>,
    txn: &RoTxn<'_, WithoutTls>,
    keys: &[Key],
) -> Result<Vec<Option<Value>>, Failure> {
    keys.iter()
        .map(|key| {
            let stored = db
                .get(txn, &key[..])
                .context(|| "looking up a key".to_string())?;
            crate::engines::value_from(stored)
        })
        .collect()
}

impl Engine for LmdbEngine {
    fn name(&self) -> &'static str {
        "lmdb"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn load(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        self.write(chunk, &[], "loading a setup chunk")
    }

    fn wants_sorted_load(&self) -> bool {
        true
    }

    fn load_sorted(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        let what = "loading a sorted setup chunk";
        let mut wtxn = self
            .env
            .write_txn()
            .context(|| format!("{what}: starting a write transaction"))?;
        for (key, value) in chunk {
            self.db
                .put_with_flags(&mut wtxn, PutFlags::APPEND, &key[..], &value[..])
                .context(|| format!("{what}: appending"))?;
        }
        wtxn.commit().context(|| format!("{what}: committing"))
    }

    fn finish_load(&self) -> Result<(), Failure> {
        self.env
            .force_sync()
            .context(|| "syncing the LMDB environment".to_string())
    }

    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        let rtxn = self
            .env
            .read_txn()
            .context(|| "starting a read transaction".to_string())?;
        values(self.db, &rtxn, keys)
    }

    fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure> {
        self.write(inserts, deletes, "applying a batch")
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>, Failure> {
        let txn = self
            .env
            .read_txn()
            .context(|| "starting a read transaction".to_string())?;
        Ok(Box::new(LmdbReader { txn, db: self.db }))
    }
}

/// An open read transaction: it sees the table as of its start, and is aborted when dropped.
struct LmdbReader<'e> {
    txn: RoTxn<'e, WithoutTls>,
    db: Database<'static, Bytes, Bytes>,
}

impl Reader for LmdbReader<'_> {
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        values(self.db, &self.txn, keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::engines::conformance;
    use crate::options::EngineKind;

    #[test]
    fn conforms() {
        conformance::check(EngineKind::Lmdb);
    }
}

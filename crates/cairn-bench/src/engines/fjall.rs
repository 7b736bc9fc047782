//! fjall behind the benchmark's [`Engine`] interface.
//!
//! Owns: one fjall database in the engine's directory, holding the table in its keyspace
//! [`KEYSPACE`] (fjall 3's name for a partition or column family). Must never touch: the
//! workload.
//!
//! Settings, and where they come from (fjall's API documentation, `fjall` 3.1):
//!
//! - Bloom filters on every level (`KeyspaceCreateOptions::filter_policy`, fjall's default
//!   policy written out: a false-positive rate of 1e-4 on the first level, 10 bits per key
//!   below it), and `expect_point_read_hits` left off, because "Enable this only if you know
//!   that point reads generally are expected to find a key-value pair" and the UTxO workload
//!   also asks for absent keys.
//! - 4 KiB data blocks (`data_block_size_policy`: "For point read heavy workloads (get) a
//!   sensible default is somewhere between 4 - 8 KiB").
//! - A 256 MiB block cache (`DatabaseBuilder::cache_size`): its documentation recommends "~20-25%
//!   of the available memory", and the benchmark's fair-memory runs give every engine 1 GiB.
//!   (With fjall's default of 32 MiB, filter and index blocks for 10M entries did not stay
//!   cached: 8,163 lookups/s, against about 45k expected on this machine.)
//! - Writes: one `WriteBatch` per setup chunk and per update, each handed to the operating
//!   system on commit (fjall's default `PersistMode::Buffer`); the setup ends with
//!   `Database::persist(PersistMode::SyncAll)`, which the documentation gives for making data
//!   "definitely durable".
//!
//! fjall reads through the operating system's page cache (it has no direct-I/O mode), so
//! `--direct-io` does not apply; it has no batched read either, so a batch is one `get` per key.

use std::path::Path;

use fjall::config::{BlockSizePolicy, BloomConstructionPolicy, FilterPolicy, FilterPolicyEntry};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, Snapshot};

use crate::engines::{Engine, EngineOptions, Key, Reader, Value};
use crate::failure::{Context, Failure};

/// The keyspace holding the table.
pub const KEYSPACE: &str = "utxo";

/// The block cache's bytes.
const CACHE_BYTES: u64 = 256 << 20;

/// Data block bytes.
const BLOCK_BYTES: u32 = 4 << 10;

/// The file fjall creates in a database's directory (its format version).
const VERSION_MARKER: &str = "version";

/// A fjall database holding the benchmark's table in one keyspace.
pub struct FjallEngine {
    // Declared before the database, so the keyspace handle goes first.
    keyspace: Keyspace,
    db: Database,
    settings: String,
}

impl FjallEngine {
    /// Creates a new database and keyspace in `dir` (`create`: `dir` must not hold a fjall
    /// database yet), or opens the one a previous setup left there.
    pub fn open(dir: &Path, create: bool, options: &EngineOptions) -> Result<FjallEngine, Failure> {
        // fjall has no salt and no direct-I/O mode.
        let exists = dir.join(VERSION_MARKER).exists();
        if create && exists {
            return Err(Failure(format!(
                "{} already holds a fjall database: remove it or use a new directory",
                dir.display()
            )));
        }
        if !create && !exists {
            return Err(Failure(format!(
                "{} holds no fjall database (run `utxo setup` first)",
                dir.display()
            )));
        }
        let db = Database::builder(dir)
            .cache_size(CACHE_BYTES)
            .open()
            .context(|| format!("opening a fjall database in {}", dir.display()))?;
        if !create && !db.keyspace_exists(KEYSPACE) {
            return Err(Failure(format!(
                "the fjall database in {} has no keyspace `{KEYSPACE}`",
                dir.display()
            )));
        }
        // The options apply when the keyspace is created; an existing one keeps its own.
        let keyspace = db
            .keyspace(KEYSPACE, || {
                KeyspaceCreateOptions::default()
                    .filter_policy(FilterPolicy::new([
                        FilterPolicyEntry::Bloom(BloomConstructionPolicy::FalsePositiveRate(
                            0.0001,
                        )),
                        FilterPolicyEntry::Bloom(BloomConstructionPolicy::BitsPerKey(10.0)),
                    ]))
                    .expect_point_read_hits(options.filters_for_hits)
                    .data_block_size_policy(BlockSizePolicy::all(BLOCK_BYTES))
            })
            .context(|| format!("opening keyspace `{KEYSPACE}`"))?;
        let settings = format!(
            "one keyspace, Bloom filters (FPR 1e-4 on L0, 10 bits/key below{}), {} KiB blocks, \
             block cache {} MiB, leveled compaction, OS page cache (no direct I/O in fjall), \
             get per key (no batched read), sync at end of setup",
            if options.filters_for_hits {
                "; none on the last level: expect_point_read_hits"
            } else {
                ""
            },
            BLOCK_BYTES >> 10,
            CACHE_BYTES >> 20,
        );
        Ok(FjallEngine {
            keyspace,
            db,
            settings,
        })
    }

    /// Writes `inserts` and `deletes` as one batch.
    fn write(&self, inserts: &[(Key, Value)], deletes: &[Key], what: &str) -> Result<(), Failure> {
        let mut batch = self.db.batch();
        for (key, value) in inserts {
            batch.insert(&self.keyspace, &key[..], &value[..]);
        }
        for key in deletes {
            batch.remove(&self.keyspace, &key[..]);
        }
        batch.commit().context(|| what.to_string())
    }
}

/// Turns a stored value into a [`Value`], failing on a wrong length.
fn value(stored: Option<fjall::UserValue>) -> Result<Option<Value>, Failure> {
    crate::engines::value_from(stored.as_deref())
}

impl Engine for FjallEngine {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn load(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        self.write(chunk, &[], "loading a setup chunk")
    }

    fn finish_load(&self) -> Result<(), Failure> {
        self.db
            .persist(PersistMode::SyncAll)
            .context(|| "persisting the fjall database".to_string())
    }

    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        keys.iter()
            .map(|key| {
                value(
                    self.keyspace
                        .get(key)
                        .context(|| "looking up a key".to_string())?,
                )
            })
            .collect()
    }

    fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure> {
        self.write(inserts, deletes, "applying a batch")
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>, Failure> {
        Ok(Box::new(FjallReader {
            snapshot: self.db.snapshot(),
            keyspace: self.keyspace.clone(),
        }))
    }
}

/// A snapshot of the database: it sees the table as of its creation, and is released when
/// dropped.
struct FjallReader {
    snapshot: Snapshot,
    keyspace: Keyspace,
}

impl Reader for FjallReader {
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        keys.iter()
            .map(|key| {
                value(
                    self.snapshot
                        .get(&self.keyspace, key)
                        .context(|| "looking up a key in a snapshot".to_string())?,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::engines::conformance;
    use crate::options::EngineKind;

    #[test]
    fn conforms() {
        conformance::check(EngineKind::Fjall);
    }
}

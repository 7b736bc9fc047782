//! Cairn behind the benchmark's [`Engine`] interface.
//!
//! Owns: the session directory layout of a benchmark table (one session; the setup is saved as
//! snapshot [`SETUP_SNAPSHOT`]). Must never touch: the workload.

use std::path::Path;
use std::sync::Arc;

use cairn::{Session, SessionOptions, SnapshotOverrides, Table, Update};

use crate::cli::DiskCacheArg;
use crate::engine::{value_from, Engine, EngineOptions, Key, Reader, Value};
use crate::failure::{Context, Failure};

/// The snapshot `setup` saves and `run` opens.
pub const SETUP_SNAPSHOT: &str = "utxo-setup";
const LABEL: &str = "utxo";

/// A Cairn session holding the benchmark's table.
#[derive(Debug)]
pub struct CairnEngine {
    // Declared before the session, so the table closes first.
    table: Table,
    /// Kept open (it holds the directory's lock) for as long as the table is used.
    _session: Session,
    settings: String,
}

impl CairnEngine {
    /// Creates a new session and empty table in `dir` (`create`), or opens the setup snapshot
    /// of the session in `dir`.
    pub fn open(dir: &Path, create: bool, options: &EngineOptions) -> Result<CairnEngine, Failure> {
        let cache = if options.direct_io {
            DiskCacheArg::None
        } else {
            DiskCacheArg::All
        };
        let config =
            crate::utxo_table_config(options.write_buffer, options.merge_batch_size, cache);
        let session_options = SessionOptions {
            salt: Some(options.seed),
            ..SessionOptions::default()
        };
        let session = Session::open_with(Arc::new(cairn::fs::RealFs), dir, session_options)
            .context(|| format!("opening a Cairn session in {}", dir.display()))?;
        let table = if create {
            if session
                .snapshot_exists(SETUP_SNAPSHOT)
                .context(|| "listing snapshots".to_string())?
            {
                return Err(Failure(format!(
                    "{} already holds a benchmark table",
                    dir.display()
                )));
            }
            session
                .new_table(config.clone())
                .context(|| "creating the table".to_string())?
        } else {
            let overrides = SnapshotOverrides {
                disk_cache: Some(config.disk_cache),
                merge_batch_size: Some(config.merge_batch_size),
                ..SnapshotOverrides::default()
            };
            session
                .open_snapshot(SETUP_SNAPSHOT, LABEL, overrides)
                .context(|| format!("opening snapshot {SETUP_SNAPSHOT} (run `utxo setup` first)"))?
        };
        let settings = format!(
            "compact index, Bloom FPR 1e-3, write buffer {}, merge batch {}, disk cache {}, I/O {}",
            config.write_buffer_entries,
            config.merge_batch_size,
            cache.name(),
            session.io_report(),
        );
        Ok(CairnEngine {
            table,
            _session: session,
            settings,
        })
    }
}

fn values(table: &Table, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
    let results = table
        .lookups(keys)
        .context(|| "looking up a batch".to_string())?;
    results.iter().map(|r| value_from(r.value())).collect()
}

impl Engine for CairnEngine {
    fn name(&self) -> &'static str {
        "cairn"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn load(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        self.table
            .inserts(chunk)
            .context(|| "inserting a setup chunk".to_string())
    }

    fn finish_load(&self) -> Result<(), Failure> {
        self.table
            .save_snapshot(SETUP_SNAPSHOT, LABEL)
            .context(|| "saving the setup snapshot".to_string())
    }

    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        values(&self.table, keys)
    }

    fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure> {
        let mut batch: Vec<(&[u8], Update<'_>)> = Vec::with_capacity(inserts.len() + deletes.len());
        batch.extend(
            inserts
                .iter()
                .map(|(k, v)| (&k[..], Update::Insert(&v[..]))),
        );
        batch.extend(deletes.iter().map(|k| (&k[..], Update::Delete)));
        self.table
            .updates(&batch)
            .context(|| "applying a batch".to_string())
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>, Failure> {
        let copy = self
            .table
            .duplicate()
            .context(|| "duplicating the table".to_string())?;
        Ok(Box::new(CairnReader(copy)))
    }
}

/// A duplicate of the table: frozen for reading, closed when dropped.
struct CairnReader(Table);

impl Reader for CairnReader {
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        values(&self.0, keys)
    }
}

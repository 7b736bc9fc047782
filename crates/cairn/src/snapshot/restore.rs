//! Opening a snapshot as a table's contents: runs linked into `active/` and verified, the write
//! buffer read back, levels and merges rebuilt and caught up with their credits, a pending union
//! replayed; and the trie of an authenticated snapshot.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{AuthMeta, ResolveTag, SnapshotMeta, UnionShape};
use super::save::read_meta;
use super::{is_checkpoint_name, snapshot_dir, validate_name, TRIE_DIR};
use crate::config::{DiskCachePolicy, Resolve, TableConfig};
use crate::error::{Error, Result};
use crate::fs::read_all;
use crate::page::Op;
use crate::pagelog::{self, Manifest, Segments};
use crate::run::{run_file_path, Run, RunCursor, RunFile, RunParams};
use crate::schedule::{IncomingShape, Levels, MergeContext};
use crate::session_core::SessionCore;
use crate::sorted::SortedRun;
use crate::union::{TableView, UnionLevel};
use crate::write_buffer::WriteBuffer;

// ------------------------------------------------------------------------------------------------
// Restoring a table

/// What may differ from a snapshot's saved configuration when it is opened.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SnapshotOverrides {
    /// The resolve function: required when the snapshot was saved with a custom one (functions
    /// cannot be stored; the snapshot records the name, which must match); for a snapshot saved
    /// with a built-in one, `None` or that same built-in (another is refused: stored upserts
    /// would combine under other semantics).
    pub resolve: Option<Resolve>,
    /// A different disk-cache policy.
    pub disk_cache: Option<DiskCachePolicy>,
    /// A different merge batch size.
    pub merge_batch_size: Option<usize>,
}

setters!(SnapshotOverrides {
    resolve: Option<Resolve>,
    disk_cache: Option<DiskCachePolicy>,
    merge_batch_size: Option<usize>,
});

/// A table's contents rebuilt from a snapshot, for [`crate::Table`] to wrap.
pub(crate) struct Restored {
    /// The trie of an authenticated table.
    pub(crate) auth: Option<AuthMeta>,
    pub(crate) config: TableConfig,
    pub(crate) params: RunParams,
    pub(crate) write_buffer: WriteBuffer,
    pub(crate) levels: Levels,
    pub(crate) union: Option<Arc<UnionLevel>>,
}

/// Opens snapshot `name` of `session`: checks name and label, links every run into `active/`
/// under fresh numbers and opens it (verifying every file's CRC32C), rebuilds the write buffer,
/// the levels (merges restart from their inputs and are caught up with their credits) and a
/// pending union (which replays the credits it was paid). On error, the links made so far are
/// removed where possible.
pub(crate) fn restore(
    session: &SessionCore,
    name: &str,
    label: &str,
    overrides: SnapshotOverrides,
) -> Result<Restored> {
    if !is_checkpoint_name(name) {
        validate_name(name)?;
    }
    let dir = snapshot_dir(session.snapshots_dir(), name);
    let result = restore_parts(session, name, &dir, label, overrides);
    if result.is_err() {
        // Runs opened before the failure were released: free their links now if possible.
        session.try_remove_released();
    }
    result
}

/// The resolve function to open snapshot `name`, saved with `saved`, given the overrides'
/// `given`: a custom function must be given (with the saved name, when one was recorded); a
/// built-in one may be given only as itself (stored upserts would combine under other
/// semantics). Errors: [`Error::InvalidConfig`].
pub(crate) fn resolve_for(
    name: &str,
    saved: ResolveTag,
    given: Option<Resolve>,
) -> Result<Resolve> {
    Ok(match (saved, given) {
        (ResolveTag::Custom(Some(saved)), Some(given)) => match &given {
            Resolve::Custom(custom) if custom.name() == saved => given,
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "snapshot {name:?} was saved with the custom resolve function {saved:?}, \
                     not {given:?}"
                )))
            }
        },
        (ResolveTag::Custom(None), Some(given @ Resolve::Custom(_))) => given,
        (saved @ (ResolveTag::KeepNewest | ResolveTag::AddU64Le), Some(given))
            if ResolveTag::of(&given) == saved =>
        {
            given
        }
        (saved, Some(given)) => {
            // Stored upserts would combine under other semantics.
            return Err(Error::InvalidConfig(format!(
                "snapshot {name:?} was saved with the resolve function {saved:?}, not {given:?}"
            )));
        }
        (ResolveTag::Custom(saved), None) => {
            let named = saved.map(|n| format!(" {n:?}")).unwrap_or_default();
            return Err(Error::InvalidConfig(format!(
                "snapshot {name:?} was saved with the custom resolve function{named}: pass it \
                 in the overrides"
            )));
        }
        (ResolveTag::AddU64Le, None) => Resolve::AddU64Le,
        (ResolveTag::KeepNewest, None) => Resolve::KeepNewest,
    })
}

/// What an error met while opening snapshot `name` becomes: damage (corruption, or a missing or
/// short file) is [`Error::SnapshotCorrupted`] blamed on `path`, the file it is in; any other
/// I/O error is the disk's, returned as it is.
pub(crate) fn blame_in(name: &str, path: &Path) -> impl Fn(Error) -> Error {
    let (name, path) = (name.to_string(), path.to_path_buf());
    move |e: Error| {
        let short = matches!(&e, Error::Io { source, .. } if matches!(
            source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof
        ));
        if short || matches!(e, Error::Corrupt { .. } | Error::CorruptFile { .. }) {
            Error::SnapshotCorrupted {
                name: name.clone(),
                path: path.clone(),
                source: Box::new(e),
            }
        } else {
            e
        }
    }
}

/// Opens the trie of authenticated snapshot `name` (its `trie/` directory): its manifest, and
/// each segment it lists adopted by the session's page log (linked into `active/`, or read in
/// place by a read-only session). Cost: one small file read, one link and one 4 KiB header
/// read per segment not open already.
pub(crate) fn restore_trie(session: &SessionCore, name: &str) -> Result<(Manifest, Segments)> {
    let fs = session.fs();
    let dir = snapshot_dir(session.snapshots_dir(), name).join(TRIE_DIR);
    if !fs.is_dir(&dir)? {
        return Err(Error::SnapshotCorrupted {
            name: name.to_string(),
            path: dir.clone(),
            source: Box::new(Error::corrupt("snapshot", "its trie directory is missing")),
        });
    }
    let blame = |path: &Path| blame_in(name, path);
    let result = (|| {
        let manifest_path = dir.join(pagelog::MANIFEST_NAME);
        let manifest = read_all(&**fs, &manifest_path)
            .and_then(|b| Manifest::decode(&b))
            .map_err(blame(&manifest_path))?;
        let mut segments = Segments::default();
        for entry in &manifest.segments {
            let source = dir.join(pagelog::segment_file_name(entry.file_id));
            let segment = session
                .page_log()
                .adopt(entry.id, entry.file_id, &source, !session.read_only())
                .map_err(blame(&source))?;
            segments.add_bytes(&segment, entry.bytes);
        }
        Ok((manifest, segments))
    })();
    if result.is_err() {
        session.try_remove_released();
    }
    result
}

fn restore_parts(
    session: &SessionCore,
    name: &str,
    dir: &Path,
    label: &str,
    overrides: SnapshotOverrides,
) -> Result<Restored> {
    let fs = session.fs().clone();
    let dir = dir.to_path_buf();
    if !fs.is_dir(&dir)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    // A missing or short file is corruption; any other I/O error is the disk's, not the
    // snapshot's, and is returned as it is (opening again may succeed).
    let corrupted = |path: PathBuf, e: Error| match e {
        Error::Io { ref source, .. }
            if !matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            e
        }
        e => Error::SnapshotCorrupted {
            name: name.to_string(),
            path,
            source: Box::new(e),
        },
    };
    let meta = read_meta(&*fs, &dir).map_err(|e| corrupted(dir.join("metadata"), e))?;
    let drops_deletes = meta.levels.iter().any(|l| {
        matches!(
            l.incoming,
            IncomingShape::Merging {
                last_level: true,
                ..
            }
        )
    });
    if meta.union.is_some() && drops_deletes {
        let e = Error::corrupt(
            "snapshot metadata",
            "a merge drops deletes above a union in progress",
        );
        return Err(corrupted(dir.join("metadata"), e));
    }
    if meta.label != label {
        return Err(Error::SnapshotLabelMismatch {
            expected: label.to_string(),
            found: meta.label,
        });
    }
    let mut config = meta.config.clone();
    config.resolve = resolve_for(name, meta.resolve.clone(), overrides.resolve)?;
    if let Some(policy) = overrides.disk_cache {
        config.disk_cache = policy;
    }
    if let Some(batch) = overrides.merge_batch_size {
        config.merge_batch_size = batch;
    }
    let params = RunParams::for_table(
        session.active_dir(),
        session.removals().clone(),
        session.salt(),
        &config,
    )?;
    let runs = open_snapshot_runs(session, &dir, &meta, &config, &params).map_err(
        |(path, e)| match path {
            Some(path) => corrupted(path, e),
            None => e,
        },
    )?;
    let write_buffer = match meta.write_buffer {
        // Read whole: a damaged page of it (found as it is read) is the snapshot's damage.
        Some(i) => write_buffer_from_run(&runs[i], &config.resolve).map_err(|e| {
            if e.is_io() {
                return e;
            }
            let file = RunFile::from_path(e.path()).unwrap_or(RunFile::KeyOps);
            corrupted(run_file_path(&dir, i as u64, file), e)
        })?,
        None => WriteBuffer::default(),
    };
    let sorted = sorted_runs(&meta, &runs).map_err(|e| corrupted(dir.join("metadata"), e))?;
    let union = match &meta.union {
        Some(shape) => Some(Arc::new(
            union_from_shape(session, &config, &params, shape, &runs, &sorted)
                .map_err(|e| corrupted(dir.join("metadata"), e))?,
        )),
        None => None,
    };
    let levels = with_merge_context(session, &config, &params, union.is_some(), |ctx| {
        Levels::from_shape(ctx, &meta.levels, &sorted)
    })
    .map_err(|e| corrupted(dir.join("metadata"), e))?;
    drop((runs, sorted));
    Ok(Restored {
        auth: meta.auth.clone(),
        config,
        params,
        write_buffer,
        levels,
        union,
    })
}

/// Links every run of the snapshot in `dir` into `active/` under fresh numbers and opens it,
/// verifying every file. On error, returns the snapshot file to blame (none when the error is
/// not the snapshot's); runs linked or opened so far are released (their links removed).
///
/// The links are made one after the other (file operations), then the runs opened (reads: most
/// of an open's time) on up to [`crate::fs::FileSystem::open_threads`] threads at once.
fn open_snapshot_runs(
    session: &SessionCore,
    dir: &Path,
    meta: &SnapshotMeta,
    config: &TableConfig,
    params: &RunParams,
) -> std::result::Result<Vec<Arc<Run>>, (Option<PathBuf>, Error)> {
    let fs = session.fs();
    prefetch_run_metadata(&**fs, dir, meta.run_count)?;
    let levels = meta.run_levels();
    let check = session.open_check();
    let snapshot_file = |i: usize, file: RunFile| run_file_path(dir, i as u64, file);
    // The snapshot file a failed open of run `i` blames.
    let blame = |i: usize, e: Error| {
        let file = RunFile::from_path(e.path()).unwrap_or(RunFile::Checksums);
        (Some(snapshot_file(i, file)), e)
    };
    let not_saved = |i: usize| {
        let e = Error::corrupt(
            "snapshot",
            format!("run {i} is not the run the snapshot saved (checksums file differs)"),
        );
        (Some(snapshot_file(i, RunFile::Checksums)), e)
    };
    if session.read_only() {
        // Opened in place: the snapshot's own files, never removed when the runs are dropped.
        let in_place = RunParams {
            dir: dir.to_path_buf(),
            ..params.clone()
        };
        let opened = in_parallel(fs.open_threads(), levels.len(), |i| {
            let caching = config.disk_cache.caches_level(levels[i]);
            let run = Run::open(fs.clone(), &in_place, i as u64, caching, check)?;
            run.keep_files();
            Ok(run)
        });
        let mut runs = Vec::with_capacity(levels.len());
        for (i, opened) in opened.into_iter().enumerate() {
            let run = opened.map_err(|e| blame(i, e))?;
            if run.checksums_crc() != meta.run_sums[i] {
                return Err(not_saved(i));
            }
            runs.push(run);
        }
        return Ok(runs);
    }
    // Removed by the session (the open fails, then removes what it can; the rest is retried
    // and reported by the next operation).
    let remove_links = |number: u64| {
        params.removals.defer(
            RunFile::ALL
                .into_iter()
                .map(|file| run_file_path(&params.dir, number, file)),
        )
    };
    let mut numbers = Vec::with_capacity(levels.len());
    for i in 0..levels.len() {
        let number = session.next_run_number();
        numbers.push(number);
        for file in RunFile::ALL {
            if let Err(e) = fs.hard_link(
                &snapshot_file(i, file),
                &run_file_path(&params.dir, number, file),
            ) {
                numbers.iter().for_each(|&n| remove_links(n));
                // A missing snapshot file is corruption; a link that failed for another reason
                // (into `active/`) is the disk's error, not the snapshot's.
                return match fs.exists(&snapshot_file(i, file)) {
                    Ok(false) => Err((Some(snapshot_file(i, file)), e)),
                    Ok(true) => Err((None, e)),
                    Err(stat) => Err((None, stat)),
                };
            }
        }
    }
    let opened = in_parallel(fs.open_threads(), numbers.len(), |i| {
        let caching = config.disk_cache.caches_level(levels[i]);
        Run::open(fs.clone(), params, numbers[i], caching, check)
    });
    let mut runs = Vec::with_capacity(numbers.len());
    let mut failure = None;
    for (i, opened) in opened.into_iter().enumerate() {
        match opened {
            // Dropping a run queues its links for removal.
            Ok(run) if run.checksums_crc() != meta.run_sums[i] => {
                failure = failure.or_else(|| Some(not_saved(i)));
            }
            Ok(run) => runs.push(run),
            Err(e) => {
                remove_links(numbers[i]);
                failure = failure.or_else(|| Some(blame(i, e)));
            }
        }
    }
    match failure {
        Some(failure) => Err(failure),
        None => Ok(runs),
    }
}

/// `work(i)` for every `i < count`, on this thread and up to `threads - 1` more at once, in
/// order of `i` in the result. A thread that cannot be started leaves its share to the others;
/// a panic in `work` is resumed here.
fn in_parallel<T: Send>(threads: usize, count: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = threads.clamp(1, count.max(1));
    if threads == 1 {
        return (0..count).map(work).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= count {
                return done;
            }
            done.push((i, work(i)));
        }
    };
    let mut all = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("cairn-open".into())
                    .spawn_scoped(scope, worker)
                    .ok()
            })
            .collect();
        let mut all = worker();
        for helper in helpers {
            match helper.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, t)| t).collect()
}

/// Asks the kernel to read every run's checksums file, filter and index ahead
/// ([`crate::fs::ReadableFile::prefetch`]), all at once, before the runs are opened one after
/// the other, so that the device serves them at its queue depth rather than one read at a time
/// (about 200 MiB for a table of 100M entries). The prefetch itself is a hint, but a file that
/// does not open is the open's failure, named as `Run::open` would name it.
fn prefetch_run_metadata(
    fs: &dyn crate::fs::FileSystem,
    dir: &Path,
    runs: usize,
) -> std::result::Result<(), (Option<PathBuf>, Error)> {
    for i in 0..runs as u64 {
        for file in [RunFile::Checksums, RunFile::Filter, RunFile::Index] {
            let path = run_file_path(dir, i, file);
            let opened = fs
                .open(&path, crate::fs::ReadOptions::default())
                .and_then(|f| f.len_bytes().map(|len| (f, len)));
            match opened {
                Ok((f, len)) => f.prefetch(0, len),
                Err(e) => return Err((Some(path), e)),
            }
        }
    }
    Ok(())
}

/// The sorted runs of a snapshot over its opened runs. A sorted run whose parts overlap or are
/// out of key order is `Corrupt`. (Version 2's list names every run, the write buffer's too.)
pub(crate) fn sorted_runs(meta: &SnapshotMeta, runs: &[Arc<Run>]) -> Result<Vec<Arc<SortedRun>>> {
    meta.sorted
        .iter()
        .map(|parts| {
            let parts = parts
                .iter()
                .map(|&i| {
                    runs.get(i).cloned().ok_or_else(|| {
                        Error::corrupt("snapshot metadata", format!("run {i} does not exist"))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            SortedRun::new(parts)?
                .ok_or_else(|| Error::corrupt("snapshot metadata", "a sorted run without parts"))
        })
        .collect()
}

/// Rebuilds a pending union from a snapshot and replays the credits it had been paid, so its
/// remaining debt is at most what it was when saved.
fn union_from_shape(
    session: &SessionCore,
    config: &TableConfig,
    params: &RunParams,
    shape: &UnionShape,
    runs: &[Arc<Run>],
    sorted: &[Arc<SortedRun>],
) -> Result<UnionLevel> {
    let run = |i: usize| {
        runs.get(i)
            .cloned()
            .ok_or_else(|| Error::corrupt("snapshot metadata", format!("run {i} does not exist")))
    };
    let sorted_run = |i: usize| {
        sorted.get(i).cloned().ok_or_else(|| {
            Error::corrupt(
                "snapshot metadata",
                format!("sorted run {i} does not exist"),
            )
        })
    };
    let mut views = Vec::with_capacity(shape.inputs.len());
    for input in &shape.inputs {
        let buffer = match input.buffer {
            Some(i) => write_buffer_from_run(&run(i)?, &config.resolve)?,
            None => WriteBuffer::default(),
        };
        let union = match &input.union {
            Some(nested) => Some(Arc::new(union_from_shape(
                session, config, params, nested, runs, sorted,
            )?)),
            None => None,
        };
        let runs = input
            .runs
            .iter()
            .map(|&i| sorted_run(i))
            .collect::<Result<Vec<_>>>()?;
        views.push(Arc::new(TableView {
            buffer,
            runs,
            union,
            epoch: 0,
        }));
    }
    let union = UnionLevel::for_table(session.fs().clone(), config, params, views);
    // A read-only session reads the union's inputs as they are: replaying its work would write.
    if shape.produced > 0 && !session.read_only() {
        union.supply_credits(shape.produced, || session.next_run_number())?;
    }
    Ok(union)
}

/// Reads a snapshot's write-buffer run back into a write buffer (blobs into memory).
fn write_buffer_from_run(run: &Arc<Run>, resolve: &Resolve) -> Result<WriteBuffer> {
    let mut write_buffer = WriteBuffer::default();
    let mut cursor = RunCursor::new(run.clone())?;
    while let Some(e) = cursor.peek()? {
        let blob = match (e.op, e.blob) {
            (Op::Insert, Some(span)) => Some(Arc::from(cursor.run().read_blob(span)?)),
            _ => None,
        };
        write_buffer.apply(e.key, e.op, e.value, blob, resolve);
        cursor.advance()?;
    }
    Ok(write_buffer)
}

/// Runs `f` with the context merges need for a table with this config. `union_below` keeps
/// deletes in every merge (older entries still live in the union below the levels).
pub(crate) fn with_merge_context<T>(
    session: &SessionCore,
    config: &TableConfig,
    params: &RunParams,
    union_below: bool,
    f: impl FnOnce(&MergeContext<'_>) -> Result<T>,
) -> Result<T> {
    let next_run_number = || session.next_run_number();
    let ctx = MergeContext {
        fs: session.fs(),
        params,
        next_run_number: &next_run_number,
        resolve: &config.resolve,
        disk_cache: config.disk_cache,
        schedule: config.merge_schedule,
        write_buffer_entries: config.write_buffer_entries as u64,
        merge_batch_size: config.merge_batch_size as u64,
        union_below,
        read_only: session.read_only(),
        background: session.background(),
        part_entries: config.part_entries,
    };
    f(&ctx)
}

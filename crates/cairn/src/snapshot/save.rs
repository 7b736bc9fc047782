//! Saving: a planned table written into a temporary directory (run files linked or copied,
//! the write buffer written as a run, the metadata), fsynced, and published by one rename.

use std::path::Path;
use std::sync::Arc;

use super::format::{ResolveTag, SnapshotMeta};
use super::plan::{PlanItem, SnapshotContents};
use super::{parent_dir, snapshot_dir, temp_dir, TRIE_DIR};
use crate::error::{Error, Result};
use crate::fs::{copy_file, read_all, FileSystem, FileWriter};
use crate::pagelog::{self, TrieFiles};
use crate::run::{run_file_path, Run, RunFile, RunParams, RunWriter};
use crate::session_core::SessionCore;
use crate::write_buffer::WriteBuffer;

/// Saves planned `contents` as snapshot `name` of `session`, with an authenticated table's trie
/// (its segments, linked, and their manifest) in `trie/` beside it: refuses contents over a
/// format limit and an existing name before writing anything, then writes into a temporary
/// directory that is renamed into place (see [`save`]), so a crash leaves the whole snapshot or
/// none of it; a failed save removes it where it can.
pub(crate) fn save_table(
    session: &SessionCore,
    params: &RunParams,
    name: &str,
    label: &str,
    contents: SnapshotContents,
    trie: Option<TrieFiles>,
) -> Result<()> {
    contents.check_limits(label)?;
    let fs = session.fs();
    let target = snapshot_dir(session.snapshots_dir(), name);
    if fs.exists(&target)? {
        return Err(Error::SnapshotExists(name.to_string()));
    }
    let tmp = temp_dir(session.snapshots_dir(), name, session.next_run_number());
    fs.create_dir_all(&tmp)?;
    let result = (|| {
        if let Some(trie) = trie {
            write_trie(fs, &tmp.join(TRIE_DIR), trie)?;
        }
        save(fs, params, &tmp, &target, label, contents)
    })();
    if result.is_err() {
        // Best effort: a leftover temporary directory is removed when the session reopens.
        let _ = fs.remove_dir_all(&tmp);
    }
    result
}

/// Writes a trie's `trie/` directory: each segment of the page log linked (and fsynced: its
/// writer never syncs), the snapshot's own segment, the manifest, then the directory.
fn write_trie(fs: &Arc<dyn FileSystem>, dir: &Path, trie: TrieFiles) -> Result<()> {
    fs.create_dir_all(dir)?;
    for segment in &trie.segments {
        let link = dir.join(pagelog::segment_file_name(segment.file_id()));
        fs.hard_link(segment.path(), &link)?;
        fs.sync_file(&link)?;
    }
    if let Some((id, bytes)) = &trie.own {
        let mut file = FileWriter::create(&**fs, &dir.join(pagelog::segment_file_name(*id)))?;
        file.write(bytes)?;
        file.finish(true)?;
    }
    let mut file = FileWriter::create(&**fs, &dir.join(pagelog::MANIFEST_NAME))?;
    file.write(&trie.manifest.encode())?;
    file.finish(true)?;
    fs.sync_dir(dir)
}

/// Links the runs into `tmp`, writes the metadata, fsyncs everything and renames `tmp` to the
/// snapshot's directory.
pub(crate) fn save(
    fs: &Arc<dyn FileSystem>,
    params: &RunParams,
    tmp: &Path,
    target: &Path,
    label: &str,
    contents: SnapshotContents,
) -> Result<()> {
    write_files(fs, params, tmp, label, contents)?;
    publish(fs, tmp, target)
}

/// Renames a fully written and synced `tmp` to `target` and syncs the parent.
fn publish(fs: &Arc<dyn FileSystem>, tmp: &Path, target: &Path) -> Result<()> {
    fs.rename(tmp, target)?;
    if let Some(parent) = target.parent() {
        fs.sync_dir(parent)?;
    }
    Ok(())
}

/// Links the runs into `tmp`, writes the metadata, fsyncs every file and the directory.
fn write_files(
    fs: &Arc<dyn FileSystem>,
    params: &RunParams,
    tmp: &Path,
    label: &str,
    contents: SnapshotContents,
) -> Result<()> {
    contents.check_limits(label)?;
    let run_count = contents.plan.len();
    let sorted = contents.plan.sorted;
    let mut run_sums = Vec::with_capacity(run_count);
    // The linked runs by index, to blame one whose fsync fails.
    let mut linked: Vec<Option<Arc<Run>>> = Vec::with_capacity(run_count);
    for (i, item) in contents.plan.items.into_iter().enumerate() {
        let sum = match item {
            PlanItem::Link(run) => {
                if run.sync_failed() {
                    copy_run(&**fs, &run, tmp, i as u64)?;
                } else {
                    run.share_files();
                    for file in RunFile::ALL {
                        fs.hard_link(&run.file_path(file), &run_file_path(tmp, i as u64, file))?;
                    }
                }
                let sum = run.checksums_crc();
                linked.push(Some(run));
                sum
            }
            PlanItem::Write(buffer) => {
                linked.push(None);
                write_buffer_run(fs, params, tmp, i as u64, &buffer)?
            }
        };
        run_sums.push(sum);
    }
    let meta = SnapshotMeta {
        label: label.to_string(),
        resolve: ResolveTag::of(&contents.config.resolve),
        config: contents.config,
        run_count,
        run_sums,
        sorted,
        write_buffer: contents.write_buffer,
        levels: contents.levels,
        union: contents.union,
        auth: contents.auth,
    };
    let mut file = FileWriter::create(&**fs, &tmp.join("metadata"))?;
    file.write(&meta.encode())?;
    file.finish(false)?; // synced below with every other file
                         // Every file, in name order, then the directory: only then is the rename published.
    for name in fs.list_dir(tmp)? {
        if fs.is_dir(&tmp.join(&name))? {
            continue; // an authenticated table's `trie/`, synced by its own save
        }
        if let Err(e) = fs.sync_file(&tmp.join(&name)) {
            // A later save must not trust a later fsync of the same file: copy it instead.
            let index = name.split('.').next().and_then(|i| i.parse::<usize>().ok());
            if let Some(Some(run)) = index.and_then(|i| linked.get(i)) {
                run.mark_sync_failed();
            }
            return Err(e);
        }
    }
    fs.sync_dir(tmp)
}

/// Copies the files of `run` into `dir` as run `number` (for a run whose fsync failed once, whose
/// files a hard link would share), checking each copied file against the run's recorded size and
/// CRC32C so that pages the kernel dropped and re-read wrong are not saved.
fn copy_run(fs: &dyn FileSystem, run: &Run, dir: &Path, number: u64) -> Result<()> {
    for file in RunFile::ALL {
        let source = run.file_path(file);
        let target = run_file_path(dir, number, file);
        let Some((size, crc)) = run.recorded_checksum(file) else {
            // The checksums file: written from the run's own record.
            let mut out = FileWriter::create(fs, &target)?;
            out.write(&run.checksums_bytes())?;
            out.finish(false)?;
            continue;
        };
        let (copied_size, actual) = copy_file(fs, &source, &target)?;
        if copied_size != size || actual != crc {
            return Err(Error::ChecksumMismatch {
                path: source,
                expected: crc,
                actual,
            });
        }
    }
    Ok(())
}

/// Writes a write buffer's entries as run `number` in `dir` (files kept when the run is dropped);
/// returns the CRC32C of its checksums file.
fn write_buffer_run(
    fs: &Arc<dyn FileSystem>,
    params: &RunParams,
    dir: &Path,
    number: u64,
    entries: &WriteBuffer,
) -> Result<u32> {
    let params = RunParams {
        dir: dir.to_path_buf(),
        ..params.clone()
    };
    let mut writer = RunWriter::new(fs.clone(), &params, number, entries.len() as u64, true)?;
    for entry in entries.iter() {
        let blob = entry.blob().map(|blob| &blob[..]);
        writer.push(entry.key(), entry.op(), entry.value(), blob)?;
    }
    match writer.finish()? {
        Some(run) => {
            run.keep_files();
            Ok(run.checksums_crc())
        }
        None => Err(Error::corrupt(
            "snapshot",
            "an empty write buffer was planned as a run",
        )),
    }
}

/// Reads and checks a snapshot's metadata, naming the file in any error.
pub(crate) fn read_meta(fs: &dyn FileSystem, dir: &Path) -> Result<SnapshotMeta> {
    let path = dir.join("metadata");
    let bytes = read_all(fs, &path)?;
    SnapshotMeta::decode(&bytes).map_err(|e| e.in_file(&path))
}

/// Copies every file of `from` into a new directory `to` (through `tmp`, renamed at the end),
/// fsyncing each file and the directory.
pub(crate) fn copy_dir(fs: &dyn FileSystem, from: &Path, tmp: &Path, to: &Path) -> Result<()> {
    let result = copy_dir_via(fs, from, tmp, to);
    if result.is_err() && fs.exists(tmp).unwrap_or(false) {
        // Best effort; a leftover `.tmp-*` under `snapshots/` is removed when the session opens.
        let _ = fs.remove_dir_all(tmp);
    }
    result
}

fn copy_dir_via(fs: &dyn FileSystem, from: &Path, tmp: &Path, to: &Path) -> Result<()> {
    copy_tree(fs, from, tmp)?;
    fs.rename(tmp, to)?;
    fs.sync_dir(&parent_dir(to))?;
    Ok(())
}

/// Copies every file of `from` into a new directory `into`, and every subdirectory (an
/// authenticated table's `trie/`) the same way, fsyncing each file and directory.
pub(super) fn copy_tree(fs: &dyn FileSystem, from: &Path, into: &Path) -> Result<()> {
    fs.create_dir_all(into)?;
    for name in fs.list_dir(from)? {
        let source = from.join(&name);
        let target = into.join(&name);
        if fs.is_dir(&source)? {
            copy_tree(fs, &source, &target)?;
            continue;
        }
        copy_file(fs, &source, &target)?;
        fs.sync_file(&target)?;
    }
    fs.sync_dir(into)
}

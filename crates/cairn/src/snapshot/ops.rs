//! A session's snapshots: list, exists, delete, export and import (the session has checked that
//! it is open).

use std::path::Path;
use std::sync::Arc;

use super::save::{copy_dir, copy_tree};
use super::{is_checkpoint_name, parent_dir, snapshot_dir, temp_dir, validate_name, TRIE_DIR};
use crate::error::{Error, Result};
use crate::fs::{read_all, FileSystem, FileWriter};
use crate::pagelog::{self, Manifest};
use crate::session_core::SessionCore;

/// Names of the saved snapshots, sorted: every directory of `snapshots/` whose name is a valid
/// snapshot name (anything else there is not a snapshot and is ignored).
pub(crate) fn list(session: &SessionCore) -> Result<Vec<String>> {
    let fs = session.fs();
    let mut names = Vec::new();
    for name in fs.list_dir(session.snapshots_dir())? {
        if validate_name(&name).is_ok() && fs.is_dir(&session.snapshots_dir().join(&name))? {
            names.push(name);
        }
    }
    Ok(names)
}

/// Names of the durable tables' checkpoints in `snapshots/` (`ckpt.<table>.<checkpoint>`),
/// sorted.
pub(crate) fn checkpoints(session: &SessionCore) -> Result<Vec<String>> {
    let fs = session.fs();
    let mut names = Vec::new();
    for name in fs.list_dir(session.snapshots_dir())? {
        if is_checkpoint_name(&name) && fs.is_dir(&session.snapshots_dir().join(&name))? {
            names.push(name);
        }
    }
    Ok(names)
}

/// Whether snapshot `name` exists.
pub(crate) fn exists(session: &SessionCore, name: &str) -> Result<bool> {
    if !is_checkpoint_name(name) {
        validate_name(name)?;
    }
    session
        .fs()
        .is_dir(&snapshot_dir(session.snapshots_dir(), name))
}

/// Deletes snapshot `name`: renamed out of the way first, so a crash never leaves a
/// half-deleted snapshot under its name (a leftover `.tmp-*` directory is removed when the
/// session opens).
pub(crate) fn delete(session: &SessionCore, name: &str) -> Result<()> {
    if !exists(session, name)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    let fs = session.fs();
    let doomed = temp_dir(session.snapshots_dir(), name, session.next_run_number());
    fs.rename(&snapshot_dir(session.snapshots_dir(), name), &doomed)?;
    fs.sync_dir(session.snapshots_dir())?;
    fs.remove_dir_all(&doomed)
}

/// Copies snapshot `name` into `target` (which must not exist; its parent must), fsynced.
pub(crate) fn export(session: &SessionCore, name: &str, target: &Path) -> Result<()> {
    if !exists(session, name)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    let fs = session.fs();
    if fs.exists(target)? {
        return Err(Error::SnapshotDirectory {
            path: target.to_path_buf(),
            reason: "the export directory already exists".into(),
        });
    }
    // The parent must exist: creating it here would leave it without an fsync of its own.
    if !fs.is_dir(&parent_dir(target))? {
        return Err(Error::SnapshotDirectory {
            path: target.to_path_buf(),
            reason: "the export directory's parent does not exist".into(),
        });
    }
    // Run numbers restart in every process: a leftover of an earlier crash may be in the way.
    let tmp = target.with_file_name(format!(".tmp-export-{}", session.next_run_number()));
    if fs.exists(&tmp)? {
        fs.remove_dir_all(&tmp)?;
    }
    copy_dir(
        &**fs,
        &snapshot_dir(session.snapshots_dir(), name),
        &tmp,
        target,
    )
}

/// Copies the snapshot exported in `source` into the session as snapshot `name`, atomically.
pub(crate) fn import(session: &SessionCore, name: &str, source: &Path) -> Result<()> {
    if exists(session, name)? {
        return Err(Error::SnapshotExists(name.to_string()));
    }
    let fs = session.fs();
    if !fs.is_dir(source)? {
        return Err(Error::SnapshotDirectory {
            path: source.to_path_buf(),
            reason: "the import directory does not exist".into(),
        });
    }
    let tmp = temp_dir(session.snapshots_dir(), name, session.next_run_number());
    let target = snapshot_dir(session.snapshots_dir(), name);
    let result = (|| {
        copy_tree(&**fs, source, &tmp)?;
        rename_trie_files(fs, &tmp.join(TRIE_DIR))?;
        fs.rename(&tmp, &target)?;
        fs.sync_dir(&parent_dir(&target))
    })();
    if result.is_err() {
        let _ = fs.remove_dir_all(&tmp);
    }
    result
}

/// Gives the segment files of an imported snapshot's `trie/` fresh names (and says so in its
/// manifest), so that they never stand in for the files of another snapshot that names the
/// same segments: two copies of one segment may differ if a copy was damaged. Pointers keep
/// naming segments by their own ids. A trie directory whose manifest is missing or does not
/// decode is left as it is (opening the snapshot reports it); a manifest that cannot be read
/// fails the import.
fn rename_trie_files(fs: &Arc<dyn FileSystem>, dir: &Path) -> Result<()> {
    if !fs.is_dir(dir)? {
        return Ok(());
    }
    let manifest_path = dir.join(pagelog::MANIFEST_NAME);
    if !fs.exists(&manifest_path)? {
        return Ok(()); // reported when the snapshot is opened
    }
    // A failed read is this import's error; only contents that do not decode are left.
    let Ok(mut manifest) = Manifest::decode(&read_all(&**fs, &manifest_path)?) else {
        return Ok(());
    };
    for entry in &mut manifest.segments {
        let from = dir.join(pagelog::segment_file_name(entry.file_id));
        if !fs.exists(&from)? {
            continue; // reported when the snapshot is opened
        }
        let file_id = loop {
            let id = pagelog::random_id(dir)?;
            if !fs.exists(&dir.join(pagelog::segment_file_name(id)))? {
                break id;
            }
        };
        fs.rename(&from, &dir.join(pagelog::segment_file_name(file_id)))?;
        entry.file_id = file_id;
    }
    fs.remove_file(&manifest_path)?;
    let mut file = FileWriter::create(&**fs, &manifest_path)?;
    file.write(&manifest.encode())?;
    file.finish(true)?;
    fs.sync_dir(dir)
}

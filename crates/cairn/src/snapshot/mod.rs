//! Snapshots: durable, named copies of a table, saved in O(runs) file operations.
//!
//! Owns: the snapshot directory layout, the snapshot metadata format (`docs/format/snapshot.md`),
//! name validation, and save / open / list / delete / export / import, one file per concept:
//! `format` (the metadata file), `plan` (what a save will write, taken at one instant), `save`
//! (writing and publishing a snapshot), `restore` (opening one as a table's contents) and
//! `ops` (a session's list, delete, export and import). May call: `fs`, `run`,
//! `sorted` (a table's sorted runs and their parts),
//! `schedule` (the level structure as [`LevelShape`]s), `write_buffer` and `page`
//! (reading a saved write buffer back), `union` (a pending union's views), `session_core` (its
//! directories, run numbers and file removals), `pagelog` (an authenticated table's segments
//! and manifest). Must never touch: page,
//! filter or index bytes (runs are linked or copied whole and verified by `Run::open`).
//!
//! Layout of `snapshots/<name>/`: `metadata`, the five files of every run as `<i>.<ext>` (hard
//! links to the table's run files, numbered from 0), and the write buffer written as one more run.
//!
//! Saving writes into `snapshots/.tmp-<name>-<n>/`, fsyncs every file and the directory, then
//! renames it to `snapshots/<name>` and fsyncs `snapshots/`: a crash leaves either no snapshot (a
//! temporary directory removed when the session is next opened) or a complete one. Cost: 5 hard
//! links and one fsync per run, the write buffer (at most B entries) written once, one metadata
//! file: O(log n) file operations for n entries.
//!
//! Opening links every file into `active/` under fresh run numbers and opens each run with
//! `Run::open`, which checks every file's size and CRC32C, so any corruption of any file is found
//! before the table is returned (O(table size) reads).

pub(crate) mod format;
mod ops;
mod plan;
mod restore;
mod save;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub use format::SNAPSHOT_LABEL_BYTES_MAX;
pub(crate) use format::{AuthMeta, ResolveTag, SnapshotMeta};
pub(crate) use ops::{checkpoints, delete, exists, export, import, list};
pub(crate) use plan::{plan, SnapshotContents};
pub use restore::SnapshotOverrides;
pub(crate) use restore::{blame_in, resolve_for, restore, restore_trie, with_merge_context};
pub(crate) use save::{read_meta, save_table};

/// The directory of a snapshot holding an authenticated table's trie: its page log segments
/// and their manifest.
pub(crate) const TRIE_DIR: &str = "trie";

/// Checks a snapshot name: 1 to 64 characters from `[a-z0-9_-]`, not a name Windows reserves.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Error::InvalidSnapshotName(format!("{name:?}: {why}"));
    if name.is_empty() || name.len() > 64 {
        return Err(bad("must be 1 to 64 characters long"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(bad("may only contain a-z, 0-9, '_' and '-'"));
    }
    let reserved = ["con", "prn", "aux", "nul"];
    let numbered = ["com", "lpt"];
    let is_numbered = numbered
        .iter()
        .any(|p| name.len() == 4 && name.starts_with(p) && name.as_bytes()[3].is_ascii_digit());
    if reserved.contains(&name) || is_numbered {
        return Err(bad("is a reserved device name"));
    }
    Ok(())
}

/// The name of a durable table's checkpoint, `ckpt.<table>.<checkpoint>`: not a valid snapshot
/// name, so users never see, open or delete it (the `durable` module owns it).
pub(crate) fn checkpoint_name(table: u32, checkpoint: u64) -> String {
    format!("ckpt.{table}.{checkpoint}")
}

/// Whether `name` is a checkpoint's name.
pub(crate) fn is_checkpoint_name(name: &str) -> bool {
    name.strip_prefix("ckpt.").is_some_and(|rest| {
        rest.split_once('.').is_some_and(|(t, c)| {
            !t.is_empty()
                && !c.is_empty()
                && (t.bytes().chain(c.bytes())).all(|b| b.is_ascii_digit())
        })
    })
}

/// The directory of snapshot `name`.
pub(crate) fn snapshot_dir(snapshots: &Path, name: &str) -> PathBuf {
    snapshots.join(name)
}

/// A fresh temporary directory under `snapshots/` (removed by the session on open if left over).
pub(crate) fn temp_dir(snapshots: &Path, name: &str, n: u64) -> PathBuf {
    snapshots.join(format!(".tmp-{name}-{n}"))
}

/// The directory holding `path`: `.` for a relative path of one component (whose
/// [`Path::parent`] is empty), `/` for the root.
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if parent.as_os_str().is_empty() => PathBuf::from("."),
        Some(parent) => parent.to_path_buf(),
        None => PathBuf::from("/"),
    }
}

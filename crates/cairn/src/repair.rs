//! Repairing a session directory whose metadata file is lost or damaged: the only thing the
//! file holds, the Bloom-filter salt, is also in the header of every run's filter file, so a
//! new metadata file is written with the salt the intact snapshots' runs agree on (`cairn
//! repair`).
//!
//! Owns: [`MetadataRepair`] and [`repair_metadata`]. May call: `session_core` (the metadata
//! file's encoding), `bloom` (a filter's header), `fs`. Must never touch: run contents, snapshots, the log.
//!
//! Bounds: reads the first 40 bytes of every filter file under `snapshots/` (checkpoints
//! included), and writes one 24-byte file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::bloom::{header_salt, HEADER_LEN};
use crate::error::{Error, Result};
use crate::fs::{write_atomic, FileSystem, ReadOptions};
use crate::session_core::{decode_metadata, encode_metadata};

/// What [`repair_metadata`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetadataRepair {
    /// The session's salt: the metadata's when it was sound, else the runs'.
    pub salt: u64,
    /// Whether the metadata file decoded (nothing to repair).
    pub was_sound: bool,
    /// Filter files whose header gave the salt.
    pub runs_read: u64,
    /// Whether a new metadata file was written (never in a dry run).
    pub written: bool,
    /// The session's directories (`active/`, `snapshots/`) that were missing and were made
    /// (or would be, in a dry run).
    pub created: Vec<PathBuf>,
}

/// Repairs the metadata file of the session in `dir` (the module's header), unless it is
/// sound; with `dry_run`, says what it would do and writes nothing. Takes the session's lock.
///
/// Errors: [`Error::SessionDirMissing`], [`Error::SessionLocked`] (a live owner: it needs no
/// repair), [`Error::UnsupportedVersion`] for metadata of a newer build (not damage: nothing is
/// touched), [`Error::SessionCorrupted`] when runs disagree on the salt, or when there are
/// snapshots but no filter file to take the salt from, [`Error::Io`].
pub fn repair_metadata(fs: &dyn FileSystem, dir: &Path, dry_run: bool) -> Result<MetadataRepair> {
    if !fs.is_dir(dir)? {
        return Err(Error::SessionDirMissing(dir.to_path_buf()));
    }
    let _lock = fs
        .try_lock(&dir.join("lock"))?
        .ok_or_else(|| Error::SessionLocked(dir.to_path_buf()))?;
    let metadata = dir.join("metadata");
    if fs.exists(&metadata)? {
        let bytes = crate::fs::read_all(fs, &metadata)?;
        match decode_metadata(&bytes) {
            Ok(salt) => {
                return Ok(MetadataRepair {
                    salt,
                    was_sound: true,
                    runs_read: 0,
                    written: false,
                    created: Vec::new(),
                })
            }
            Err(e @ Error::UnsupportedVersion { .. }) => return Err(e),
            Err(_) => {}
        }
    }
    let corrupted = |reason: String| Error::SessionCorrupted {
        path: dir.to_path_buf(),
        reason,
    };
    let snapshots = dir.join("snapshots");
    // Salt -> the filter files that carry it.
    let mut salts: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    let mut snapshot_dirs = 0u64;
    if fs.is_dir(&snapshots)? {
        for name in fs.list_dir(&snapshots)? {
            let sub = snapshots.join(&name);
            if name.starts_with(".tmp-") || !fs.is_dir(&sub)? {
                continue;
            }
            snapshot_dirs += 1;
            for file in fs.list_dir(&sub)? {
                if !file.ends_with(".filter") {
                    continue;
                }
                let path = sub.join(&file);
                if let Some(salt) = filter_salt(fs, &path)? {
                    salts.entry(salt).or_default().push(path);
                }
            }
        }
    }
    let runs_read = salts.values().map(|p| p.len() as u64).sum();
    let salt = match salts.len() {
        1 => *salts.keys().next().expect("one"),
        0 if snapshot_dirs == 0 => {
            // No run anywhere: any salt serves the runs to come.
            getrandom::u64().map_err(|e| Error::Io {
                op: "getrandom",
                path: dir.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })?
        }
        0 => {
            return Err(corrupted(format!(
                "the metadata file is lost or damaged, and none of the {snapshot_dirs} \
                 snapshots has a run whose filter file gives the salt"
            )))
        }
        _ => {
            let found: Vec<String> = (salts.iter())
                .map(|(salt, paths)| {
                    format!(
                        "{salt:#018x} in {} (e.g. {})",
                        paths.len(),
                        paths[0].display()
                    )
                })
                .collect();
            return Err(corrupted(format!(
                "the metadata file is lost or damaged, and the runs disagree on the salt: {}",
                found.join("; ")
            )));
        }
    };
    let mut created = Vec::new();
    for sub in ["active", "snapshots"] {
        let path = dir.join(sub);
        if !fs.is_dir(&path)? {
            created.push(path);
        }
    }
    if !dry_run {
        for path in &created {
            fs.create_dir_all(path)?;
        }
        write_atomic(fs, &metadata, &encode_metadata(salt))?;
    }
    Ok(MetadataRepair {
        salt,
        was_sound: false,
        runs_read,
        written: !dry_run,
        created,
    })
}

/// The salt in the header of the filter file at `path`, if the header is a sound filter's (its
/// shape checked against the file's length as a decoder checks it).
fn filter_salt(fs: &dyn FileSystem, path: &Path) -> Result<Option<u64>> {
    let file = fs.open(path, ReadOptions::default())?;
    let len = file.len_bytes()?;
    if len < HEADER_LEN as u64 {
        return Ok(None);
    }
    let mut header = [0u8; HEADER_LEN];
    file.read_exact_at(&mut header, 0)?;
    Ok(header_salt(&header, len).ok())
}

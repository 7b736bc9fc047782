//! The digest the client trusts: held in memory, persisted to a file when the caller names
//! one, loaded from it at start.
//!
//! Owns: [`Trust`] (the current digest and the lock that serializes adopting a newer one), the
//! file's format and its atomic replacement. May call: `error`, `cairn_proof` (the digest's
//! encoding), `std::fs`. Must never touch: the network (`client` fetches the consistency
//! proofs and calls [`Trust::adopt`] once they check).
//!
//! **The file** holds the digest's own encoding (`docs/format/history.md`, "Digest": magic
//! `CRNH`, version, type, size, root; 48 bytes), so it is checked when read back (a file that
//! does not decode is an error, never a digest silently dropped). It is replaced atomically: the
//! new digest is written to a temporary file beside it, synced, renamed over it, and the
//! directory synced, so a crash leaves the old digest or the new one, never a torn file.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_proof::Digest;

use crate::error::Error;

/// The trusted digest and where it is kept.
#[derive(Debug)]
pub(crate) struct Trust {
    /// The digest trusted now (`None`: none yet, the first one offered will be).
    current: std::sync::Mutex<Option<Digest>>,
    /// Held while a newer digest is checked and adopted, so adoptions happen one at a time
    /// (across the consistency proof's fetch).
    adopting: tokio::sync::Mutex<()>,
    /// Where the digest is persisted.
    file: Option<PathBuf>,
}

impl Trust {
    /// The trust to start with: the file's digest if the file exists, else `given`.
    pub(crate) fn open(file: Option<PathBuf>, given: Option<Digest>) -> Result<Trust, Error> {
        let loaded = match &file {
            Some(path) => load(path)?,
            None => None,
        };
        Ok(Trust {
            current: std::sync::Mutex::new(loaded.or(given)),
            adopting: tokio::sync::Mutex::new(()),
            file,
        })
    }

    /// The digest trusted now.
    pub(crate) fn current(&self) -> Option<Digest> {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The size trusted now (0 with none): no fresh answer may be older.
    pub(crate) fn floor(&self) -> u64 {
        self.current().map_or(0, |d| d.size)
    }

    /// Waits for the right to adopt a digest; hold the guard until [`Trust::adopt`] is done.
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.adopting.lock().await
    }

    /// Trusts `digest` from now on (the caller has checked it extends the current one, holding
    /// the guard of [`Trust::lock`]): persisted first, so that a digest is trusted only once it
    /// is kept. Errors: [`Error::Persist`] (then the trust is unchanged).
    pub(crate) async fn adopt(&self, digest: Digest) -> Result<(), Error> {
        if let Some(path) = self.file.clone() {
            let stored = tokio::task::spawn_blocking(move || store(&path, &digest));
            match stored.await {
                Ok(result) => result?,
                Err(e) => {
                    return Err(Error::Persist {
                        path: self.file.clone().unwrap_or_default(),
                        source: std::io::Error::other(e.to_string()),
                    })
                }
            }
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(digest);
        Ok(())
    }
}

/// The digest in `path`, or `None` if there is no such file. Errors: unreadable, or not a
/// digest's encoding.
pub(crate) fn load(path: &Path) -> Result<Option<Digest>, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Persist {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    Digest::decode(&bytes)
        .map(Some)
        .map_err(|e| Error::Persist {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a digest: {e}"),
            ),
        })
}

/// Replaces the file at `path` with `digest`'s encoding, atomically (see the module doc).
pub(crate) fn store(path: &Path, digest: &Digest) -> Result<(), Error> {
    let failed = |source| Error::Persist {
        path: path.to_path_buf(),
        source,
    };
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| failed(std::io::Error::other("the path names no file")))?;
    let mut temp_name = name.to_os_string();
    temp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = path.with_file_name(temp_name);
    let written = (|| {
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(&digest.encode())?;
        f.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(failed(e));
    }
    // The rename is durable once the directory is synced.
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_digest_loads_back_and_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trusted.digest");
        assert_eq!(load(&path).unwrap(), None);
        let d = Digest {
            size: 7,
            root: [9; 32],
        };
        store(&path, &d).unwrap();
        assert_eq!(load(&path).unwrap(), Some(d));
        let e = Digest {
            size: 8,
            root: [1; 32],
        };
        store(&path, &e).unwrap();
        assert_eq!(load(&path).unwrap(), Some(e));
        // Only the digest's file is left (no temporary file).
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        std::fs::write(&path, b"not a digest").unwrap();
        assert!(matches!(load(&path), Err(Error::Persist { .. })));
    }

    #[test]
    fn the_file_wins_over_the_given_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let given = Digest {
            size: 1,
            root: [1; 32],
        };
        let t = Trust::open(Some(path.clone()), Some(given)).unwrap();
        assert_eq!(t.current(), Some(given));
        let kept = Digest {
            size: 2,
            root: [2; 32],
        };
        store(&path, &kept).unwrap();
        let t = Trust::open(Some(path), Some(given)).unwrap();
        assert_eq!(t.current(), Some(kept));
        assert_eq!(t.floor(), 2);
    }
}

//! Typed errors for every fallible operation of the engine.
//!
//! Owns: the [`Error`] enum and the crate-wide [`Result`] alias.
//! Every I/O error reaches the caller with the path it concerned; decoders of on-disk structures
//! report [`Error::Corrupt`] (or [`Error::ChecksumMismatch`]) instead of panicking.
//!
//! A variant that wraps another error returns it from [`std::error::Error::source`] and does not
//! repeat it in its own message (the `thiserror` convention), so that a printer of the whole
//! chain (`anyhow`'s `{:#}`, or a loop over `source()`) shows each cause once.

use std::path::PathBuf;

/// The result type used throughout Cairn.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Cairn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with the file or directory it concerned.
    #[error("I/O error during {op} on {}", path.display())]
    Io {
        /// What the engine was doing (`"open"`, `"read"`, `"fsync"`, ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The session directory does not exist.
    #[error("session directory {} does not exist", .0.display())]
    SessionDirMissing(PathBuf),
    /// Another live session holds the directory's lock.
    #[error("session directory {} is locked by another session", .0.display())]
    SessionLocked(PathBuf),
    /// The session directory is not empty but is not a valid session either.
    #[error("session directory {} is corrupted: {reason}", path.display())]
    SessionCorrupted {
        /// The session directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The session was closed; the handle can no longer be used.
    #[error("the session is closed")]
    SessionClosed,
    /// The table was closed; the handle can no longer be used.
    #[error("the table is closed")]
    TableClosed,
    /// The cursor was closed; it can no longer be read.
    #[error("the cursor is closed")]
    CursorClosed,
    /// An earlier update of this table failed half way (an I/O error while writing a run or
    /// merging); the table's contents can no longer be trusted, so every operation fails. Close
    /// it and reopen from a snapshot.
    #[error("the table is unusable after an earlier failed update: {0}")]
    TableBroken(String),
    /// An update was rejected because it breaks a rule of the table (for example an upsert value
    /// that the table's resolve function cannot combine associatively).
    #[error("invalid update: {0}")]
    InvalidUpdate(String),
    /// A snapshot name breaks the naming rules (1 to 64 characters from `[a-z0-9_-]`).
    #[error("invalid snapshot name {0}")]
    InvalidSnapshotName(String),
    /// A snapshot of that name already exists.
    #[error("snapshot {0:?} already exists")]
    SnapshotExists(String),
    /// No snapshot of that name exists.
    #[error("snapshot {0:?} does not exist")]
    SnapshotMissing(String),
    /// The snapshot's label is not the one the caller expected.
    #[error("snapshot label mismatch: expected {expected:?}, found {found:?}")]
    SnapshotLabelMismatch {
        /// The label the caller gave.
        expected: String,
        /// The label stored in the snapshot.
        found: String,
    },
    /// A snapshot's file is missing or corrupt (the `source` says what was found wrong).
    #[error("snapshot {name:?} is corrupted in {}", path.display())]
    SnapshotCorrupted {
        /// The snapshot's name.
        name: String,
        /// The file of the snapshot that is bad.
        path: PathBuf,
        /// What was found wrong.
        #[source]
        source: Box<Error>,
    },
    /// An export or import directory is in the way, or missing.
    #[error("{}: {reason}", path.display())]
    SnapshotDirectory {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A table configuration was rejected.
    #[error("invalid table config: {0}")]
    InvalidConfig(String),
    /// A key is longer than [`crate::KEY_SIZE_MAX`].
    #[error("key of {len} bytes exceeds the maximum of {max} bytes")]
    KeyTooLarge {
        /// The key's length.
        len: usize,
        /// The largest allowed length.
        max: usize,
    },
    /// A value is longer than [`crate::VALUE_SIZE_MAX`].
    #[error("value of {len} bytes exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The largest allowed length.
        max: usize,
    },
    /// A blob is longer than [`crate::BLOB_SIZE_MAX`].
    #[error("blob of {len} bytes exceeds the maximum of {max} bytes")]
    BlobTooLarge {
        /// The blob's length.
        len: u64,
        /// The largest allowed length.
        max: u64,
    },
    /// A blob reference was made stale by a later change to its table (or the table was closed).
    #[error("blob reference is stale: the table changed after the lookup that returned it")]
    BlobRefInvalid,
    /// An on-disk or serialised structure failed to decode.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// Which structure (`"page"`, `"bloom filter"`, `"compact index"`, ...).
        what: &'static str,
        /// What exactly is wrong.
        detail: String,
    },
    /// A file's contents failed to decode.
    #[error("corrupt {what} in {}: {detail}", path.display())]
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// Which structure.
        what: &'static str,
        /// What exactly is wrong.
        detail: String,
    },
    /// A file's CRC32C does not match the checksum recorded for it.
    #[error("checksum mismatch in {}: expected {expected:08x}, computed {actual:08x}", path.display())]
    ChecksumMismatch {
        /// The file whose contents do not match.
        path: PathBuf,
        /// The recorded CRC32C.
        expected: u32,
        /// The CRC32C of the bytes read.
        actual: u32,
    },
    /// A structure carries a format version this build cannot read.
    #[error("unsupported {what} format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Which structure.
        what: &'static str,
        /// The version found on disk.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The table grew beyond what the engine can represent: a level's size in the merge
    /// accounting, or a run whose index would hold more than 4 GiB of keys.
    #[error("table too large: {0}")]
    TableTooLarge(String),
    /// A state root, proof or commit was asked of a table created without authentication
    /// ([`crate::TableConfig::auth`] is `None`).
    #[error("the table is not authenticated (TableConfig::auth is None)")]
    NotAuthenticated,
    /// The operation would write, and the session was opened read-only
    /// ([`crate::SessionOptions::read_only`]): nothing in its directory may change.
    #[error("the session is read-only: {0} is not allowed")]
    ReadOnly(&'static str),
    /// The write-ahead log failed (a write or fsync of it failed: nothing after the last
    /// durability notice may be on disk) or closed: it refuses every write and every pending
    /// notice reports this. Reopen the session to recover from the log on disk.
    #[error("the write-ahead log is unusable: {0}")]
    LogFailed(String),
    /// Recovery found damage in the write-ahead log that is not a torn tail: a bad record
    /// followed by good ones, a missing, stale or reordered segment.
    #[error("write-ahead log corrupted in {} at offset {offset}: {detail}", path.display())]
    LogCorrupted {
        /// The damaged segment.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A transaction read a key that another write changed before the transaction committed:
    /// nothing was written. Run the transaction again ([`crate::Session::transact`] does).
    #[error(
        "transaction conflict: key {} of table {table:?} changed since it was read",
        hex_key(key)
    )]
    TransactionConflict {
        /// The table of the key.
        table: String,
        /// The key (the first found changed).
        key: Vec<u8>,
    },
    /// A durable-table operation on a session opened without a log
    /// ([`crate::SessionOptions::log`]), or on a table that is not durable.
    #[error("not durable: {0}")]
    NotDurable(String),
}

/// A key for an error message: hex, cut after 32 bytes.
fn hex_key(key: &[u8]) -> String {
    let mut out = hex::encode(&key[..key.len().min(32)]);
    if key.len() > 32 {
        out.push_str("...");
    }
    out
}

impl Error {
    /// Whether the operation may succeed if simply run again: a transaction conflict.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::TransactionConflict { .. })
    }

    /// Builds an [`Error::Corrupt`].
    pub(crate) fn corrupt(what: &'static str, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            what,
            detail: detail.into(),
        }
    }

    /// Builds an [`Error::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Attaches a file's path to a decoding error ([`Error::Corrupt`] becomes
    /// [`Error::CorruptFile`]); other errors already name their file or have none.
    pub(crate) fn in_file(self, path: &std::path::Path) -> Error {
        match self {
            Error::Corrupt { what, detail } => Error::CorruptFile {
                path: path.to_path_buf(),
                what,
                detail,
            },
            other => other,
        }
    }

    /// The file a corruption or I/O error concerns, if it names one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Error::Io { path, .. }
            | Error::CorruptFile { path, .. }
            | Error::ChecksumMismatch { path, .. }
            | Error::SessionCorrupted { path, .. }
            | Error::SnapshotCorrupted { path, .. }
            | Error::LogCorrupted { path, .. } => Some(path),
            _ => None,
        }
    }

    /// True when the error came from the operating system (or the simulated file system).
    pub fn is_io(&self) -> bool {
        matches!(self, Error::Io { .. })
    }

    /// The message followed by the message of every cause, joined by `": "`: the error as one
    /// line (what `cairn` prints, and what [`Error::TableBroken`] keeps of its cause), where
    /// `to_string()` alone would drop the causes.
    pub fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            text.push_str(": ");
            text.push_str(&e.to_string());
            cause = e.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// One value of every variant. The match has no wildcard, so a new variant does not compile
    /// until it is added here.
    fn one_of_each() -> Vec<Error> {
        let io = || {
            Error::io(
                "read",
                "/s/active/3.keyops",
                std::io::Error::other("disk on fire"),
            )
        };
        let all = vec![
            io(),
            Error::SessionDirMissing("/s".into()),
            Error::SessionLocked("/s".into()),
            Error::SessionCorrupted {
                path: "/s".into(),
                reason: "no metadata".into(),
            },
            Error::SessionClosed,
            Error::TableClosed,
            Error::CursorClosed,
            Error::TableBroken("earlier failure".into()),
            Error::InvalidUpdate("8 bytes".into()),
            Error::InvalidSnapshotName("A".into()),
            Error::SnapshotExists("a".into()),
            Error::SnapshotMissing("a".into()),
            Error::SnapshotLabelMismatch {
                expected: "x".into(),
                found: "y".into(),
            },
            Error::SnapshotCorrupted {
                name: "a".into(),
                path: "/s/snapshots/a/3.keyops".into(),
                source: Box::new(io()),
            },
            Error::SnapshotCorrupted {
                name: "a".into(),
                path: "/s/snapshots/a/metadata".into(),
                source: Box::new(Error::corrupt("snapshot metadata", "bad magic")),
            },
            Error::SnapshotDirectory {
                path: "/e".into(),
                reason: "exists".into(),
            },
            Error::InvalidConfig("merge_batch_size".into()),
            Error::KeyTooLarge {
                len: 5000,
                max: 4064,
            },
            Error::ValueTooLarge { len: 5, max: 4 },
            Error::BlobTooLarge { len: 5, max: 4 },
            Error::BlobRefInvalid,
            Error::corrupt("page", "no entries"),
            Error::CorruptFile {
                path: "/f".into(),
                what: "index",
                detail: "bad magic".into(),
            },
            Error::ChecksumMismatch {
                path: "/f".into(),
                expected: 1,
                actual: 2,
            },
            Error::UnsupportedVersion {
                what: "index",
                found: 2,
                supported: 1,
            },
            Error::TableTooLarge("level 40".into()),
            Error::NotAuthenticated,
            Error::ReadOnly("an update"),
            Error::LogFailed("fsync failed".into()),
            Error::LogCorrupted {
                path: "/s/log/0000000000000001.seg".into(),
                offset: 64,
                detail: "bad record".into(),
            },
            Error::NotDurable("no log".into()),
            Error::TransactionConflict {
                table: "accounts".into(),
                key: b"alice".to_vec(),
            },
        ];
        for e in &all {
            match e {
                Error::Io { .. }
                | Error::SessionDirMissing(_)
                | Error::SessionLocked(_)
                | Error::SessionCorrupted { .. }
                | Error::SessionClosed
                | Error::TableClosed
                | Error::CursorClosed
                | Error::TableBroken(_)
                | Error::InvalidUpdate(_)
                | Error::InvalidSnapshotName(_)
                | Error::SnapshotExists(_)
                | Error::SnapshotMissing(_)
                | Error::SnapshotLabelMismatch { .. }
                | Error::SnapshotCorrupted { .. }
                | Error::SnapshotDirectory { .. }
                | Error::InvalidConfig(_)
                | Error::KeyTooLarge { .. }
                | Error::ValueTooLarge { .. }
                | Error::BlobTooLarge { .. }
                | Error::BlobRefInvalid
                | Error::Corrupt { .. }
                | Error::CorruptFile { .. }
                | Error::ChecksumMismatch { .. }
                | Error::UnsupportedVersion { .. }
                | Error::TableTooLarge(_)
                | Error::NotAuthenticated
                | Error::ReadOnly(_)
                | Error::LogFailed(_)
                | Error::LogCorrupted { .. }
                | Error::NotDurable(_)
                | Error::TransactionConflict { .. } => {}
            }
        }
        all
    }

    /// A variant with a source does not print the source's text in its own message.
    #[test]
    fn a_cause_is_printed_once() {
        let mut with_source = 0;
        for e in one_of_each() {
            let Some(source) = e.source() else {
                continue;
            };
            with_source += 1;
            let (text, cause) = (e.to_string(), source.to_string());
            assert!(
                !text.contains(&cause),
                "{text:?} repeats its source {cause:?}"
            );
            assert_eq!(e.with_causes().matches(&cause).count(), 1, "{e:?}");
        }
        assert_eq!(with_source, 3, "Io and both SnapshotCorrupted examples");
    }

    #[test]
    fn with_causes_prints_the_chain() {
        let e = Error::SnapshotCorrupted {
            name: "daily".into(),
            path: "/s/snapshots/daily/3.keyops".into(),
            source: Box::new(Error::io(
                "open",
                "/s/snapshots/daily/3.keyops",
                std::io::Error::other("disk on fire"),
            )),
        };
        assert_eq!(
            e.with_causes(),
            "snapshot \"daily\" is corrupted in /s/snapshots/daily/3.keyops: I/O error during \
             open on /s/snapshots/daily/3.keyops: disk on fire"
        );
    }
}

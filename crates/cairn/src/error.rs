//! Typed errors for every fallible operation of the engine.
//!
//! Owns: the [`Error`] enum and the crate-wide [`Result`] alias.
//! Every I/O error reaches the caller with the path it concerned; decoders of on-disk structures
//! report [`Error::Corrupt`] (or [`Error::ChecksumMismatch`]) instead of panicking.

use std::path::PathBuf;

/// The result type used throughout Cairn.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Cairn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with the file or directory it concerned.
    #[error("I/O error during {op} on {}: {source}", path.display())]
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
    /// A snapshot's file is missing or corrupt (the underlying error names the file).
    #[error("snapshot {name:?} is corrupted: {source}")]
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
}

impl Error {
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
            | Error::SnapshotCorrupted { path, .. } => Some(path),
            _ => None,
        }
    }

    /// True when the error came from the operating system (or the simulated file system).
    pub fn is_io(&self) -> bool {
        matches!(self, Error::Io { .. })
    }
}

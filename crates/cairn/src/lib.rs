//! Cairn: an LSM-tree storage engine for ledger state.
//!
//! A [`Session`] owns a directory; it holds [`Table`]s, each a sorted map from byte-string keys
//! to byte-string values with optional blobs, stored as a write buffer plus immutable runs of
//! 4 KiB pages merged incrementally (lazy levelling, size ratio 4). Batched lookups probe every
//! run's Bloom filter, then submit all page reads at once through io_uring.
//!
//! ```
//! use cairn::{Session, TableConfig, LookupResult};
//! let dir = tempfile::tempdir().unwrap();
//! let session = Session::open(dir.path()).unwrap();
//! let table = session.new_table(TableConfig::default()).unwrap();
//! table.insert(b"key", b"value").unwrap();
//! assert_eq!(table.lookup(b"key").unwrap().value(), Some(&b"value"[..]));
//! assert!(matches!(table.lookup(b"other").unwrap(), LookupResult::NotFound));
//! ```
//!
//! The design, from the API down to the bytes, is described in `docs/design.md`; every on-disk
//! format is specified in `docs/format/`.
#![warn(missing_docs)]

/// Builder-style setters for a configuration type: one method per field, named after it, that
/// sets the field and returns the value, so that a configuration reads
/// `TableConfig::default().write_buffer_entries(8).merge_batch_size(2)` (the types are
/// `#[non_exhaustive]`: new fields never break such code).
macro_rules! setters {
    ($ty:ident { $($field:ident : $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($ty), "::", stringify!($field), "`].")]
                #[must_use]
                pub fn $field(mut self, value: $t) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

mod auth;
mod background;
mod batch;
mod block_keys;

// The engine's internals. Fuzz targets reach the decoders through the `fuzzing` feature (not a
// stable API); nothing else outside the crate sees them.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod bloom;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)] // format accessors and encoders used by tests and the fuzz targets only
mod bloom;
mod config;
mod cursor;
mod durable;
mod durable_view;
mod entry;
mod error;
mod flush;
pub mod fs;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod golden;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod index;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)] // format accessors and encoders used by tests and the fuzz targets only
mod index;
pub mod inspect;
mod io;
mod kmerge;
mod log_view;
mod lookup;
mod lsm;
mod merge;
/// The names of the engine's `tracing` spans and `metrics` metrics (emitted with the `tracing`
/// and `metrics` features; `docs/observability.md`).
pub mod observe;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod page;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)] // format accessors and encoders used by tests and the fuzz targets only
mod page;
mod pagelog;
mod repair;
mod run;
mod salvage;
mod schedule;
mod scrub;
mod session;
mod session_core;
mod snapshot;
mod sorted;
mod table;
mod transaction;
mod trie;
mod union;
mod wal;
mod write_buffer;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

pub use auth::{AuthStats, Commit, CommitTime, VersionedProof};
pub use batch::WriteBatch;
pub use block_keys::BlockKeys;
/// Proof types and the verifier (the `cairn-proof` crate, re-exported).
pub use cairn_proof;
pub use cairn_proof::{HashKind, Proof, Root};
pub use config::{
    AuthConfig, BloomAlloc, CustomResolve, DiskCachePolicy, IndexType, MergeSchedule, Resolve,
    ResolveFn, TableConfig, RESOLVE_NAME_BYTES_MAX, SIZE_RATIO, WRITE_BUFFER_ENTRIES_MAX,
};
pub use cursor::{Cursor, CursorEntry, KeyRange};
pub use durable_view::{DurableView, LiveCursor, LiveEntry, LiveTable};
pub use error::{Error, Result};
pub use io::{DirectIo, IoBackendKind, IoReport};
pub use lookup::{BlobRef, LookupResult};
pub use lsm::{TableStats, Update, BLOB_SIZE_MAX};
pub use page::{KEY_SIZE_MAX, VALUE_SIZE_MAX};
pub use schedule::LevelMergeStats;
pub use scrub::{ScrubProblem, ScrubReport};
pub use session::Session;
pub use session_core::SessionOptions;
pub use snapshot::{SnapshotOverrides, SNAPSHOT_LABEL_BYTES_MAX};
pub use table::Table;
pub use transaction::Transaction;
pub use wal::{Durability, LogOptions, LogStats, RecoveryMode, SyncPolicy, LOG_RECORD_BYTES_MAX};

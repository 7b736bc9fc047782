//! The ledger's errors: the engine's, passed through, and what the ledger itself refuses.
//!
//! Owns: [`Error`], [`Result`]. May call nothing else of the crate.

/// Why a ledger operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine's error (I/O, corruption of its files, a conflict, a closed session...).
    #[error(transparent)]
    Engine(#[from] cairn::Error),
    /// A table name the ledger does not hold.
    #[error("the ledger has no table {0:?}")]
    NoSuchTable(String),
    /// A configuration the ledger refuses, or one that disagrees with the ledger on disk.
    #[error("invalid ledger configuration: {0}")]
    InvalidConfig(String),
    /// Commit metadata longer than [`crate::META_BYTES_MAX`].
    #[error("commit metadata of {0} bytes is longer than 4,096")]
    MetaTooLong(usize),
    /// A version or tree size the ledger does not have (beyond its newest, or 0 where a
    /// version is needed).
    #[error("version {version} is not in the ledger (newest {newest})")]
    NoSuchVersion {
        /// The version asked for.
        version: u64,
        /// The ledger's newest version.
        newest: u64,
    },
    /// A version outside the window of versions kept provable ([`crate::LedgerConfig::history`]):
    /// older than the oldest kept. Never answered with a proof against another version.
    #[error("version {version} is pruned (the oldest kept provable is {oldest})")]
    VersionPruned {
        /// The version asked for.
        version: u64,
        /// The oldest version kept provable.
        oldest: u64,
    },
    /// A proof the history tree cannot make for these arguments (sizes out of order, from 0).
    #[error(transparent)]
    Prove(#[from] cairn_proof::HistoryProveError),
    /// One of the ledger's own records (configuration, version records, history nodes) is
    /// damaged or missing: named, with what is wrong.
    #[error("ledger record {what} is corrupted: {detail}")]
    Corrupted {
        /// The record.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A range read found more entries than [`crate::LedgerConfig::range_max`] allows.
    #[error("the range holds more than {max} entries, the most a range read answers")]
    RangeTooLarge {
        /// The limit.
        max: usize,
    },
    /// An earlier commit failed after its updates were logged; the ledger refuses further
    /// commits until it is reopened (which finishes that commit). The first failure, as text.
    #[error("the ledger is broken by an earlier failed commit (reopen it): {0}")]
    Broken(String),
    /// An export stream ([`crate::Ledger::import_with`], [`crate::check_export`]) that does not
    /// decode, whose checksum fails, or whose ledger does not prove what the stream claims.
    #[error("bad ledger export at byte {offset}: {detail}")]
    BadExport {
        /// How many bytes of the stream were read when the fault was found.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
}

impl Error {
    /// True when running the same transaction again may succeed (a conflict).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Engine(e) if e.is_retryable())
    }

    pub(crate) fn corrupted(what: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Corrupted {
            what: what.into(),
            detail: detail.into(),
        }
    }
}

/// The ledger's result type.
pub type Result<T> = std::result::Result<T, Error>;

//! The exception classes of the Python package and the mapping from [`cairn::Error`] to them.
//!
//! Owns: the `cairn.CairnError` hierarchy, [`to_py`] (which class each engine error becomes)
//! and [`guard`], which runs engine code so that a Rust panic reaches Python as a
//! `CairnError`, never as an abort or a `PanicException`.
//!
//! May call: `cairn` (its error type). Must never touch: sessions, tables or Python objects
//! other than the exceptions it raises.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    cairn,
    CairnError,
    PyException,
    "The base class of every error the engine raises (also available as `cairn.Error`)."
);
create_exception!(
    cairn,
    LockedError,
    CairnError,
    "Another live session holds the directory's lock."
);
create_exception!(
    cairn,
    ClosedError,
    CairnError,
    "The session, table or iterator was closed and can no longer be used."
);
create_exception!(
    cairn,
    CorruptError,
    CairnError,
    "Damage found on disk: a corrupt file, checksum mismatch, corrupted session, snapshot or log."
);
create_exception!(
    cairn,
    ReadOnlyError,
    CairnError,
    "The operation would write, and the session was opened with read_only=True."
);
create_exception!(
    cairn,
    InvalidArgumentError,
    CairnError,
    "An argument was refused: a key, value or name too long or malformed, a bad table config."
);
create_exception!(
    cairn,
    NotFoundError,
    CairnError,
    "A session directory or snapshot that does not exist (an absent key raises KeyError)."
);
create_exception!(
    cairn,
    VerifyError,
    CairnError,
    "A proof that does not verify the claims against the root, or that does not decode."
);

/// The Python exception for an engine error, its message the error's with its causes.
pub(crate) fn to_py(error: cairn::Error) -> PyErr {
    use cairn::Error as E;
    let message = chain(&error);
    match error {
        E::SessionLocked(_) => LockedError::new_err(message),
        E::SessionClosed | E::TableClosed | E::CursorClosed => ClosedError::new_err(message),
        E::SessionCorrupted { .. }
        | E::SnapshotCorrupted { .. }
        | E::Corrupt { .. }
        | E::CorruptFile { .. }
        | E::ChecksumMismatch { .. }
        | E::LogCorrupted { .. }
        | E::TableBroken(_) => CorruptError::new_err(message),
        E::ReadOnly(_) => ReadOnlyError::new_err(message),
        E::SessionDirMissing(_) | E::SnapshotMissing(_) => NotFoundError::new_err(message),
        E::InvalidSnapshotName(_)
        | E::InvalidConfig(_)
        | E::InvalidUpdate(_)
        | E::KeyTooLarge { .. }
        | E::ValueTooLarge { .. }
        | E::BlobTooLarge { .. }
        | E::SnapshotLabelMismatch { .. }
        | E::SnapshotExists(_)
        | E::NotAuthenticated
        | E::NotDurable(_) => InvalidArgumentError::new_err(message),
        _ => CairnError::new_err(message),
    }
}

/// The error's message followed by each of its causes, `: `-separated.
fn chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Runs engine code `f`, mapping its error with [`to_py`] and a panic to a `CairnError` that
/// names it. Engine handles stay usable after a caught panic only as far as the engine's own
/// poisoning rules allow (a broken table reports `CorruptError` afterwards).
pub(crate) fn guard<T>(f: impl FnOnce() -> cairn::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(to_py),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(CairnError::new_err(format!(
                "internal error (a bug in cairn): {what}"
            )))
        }
    }
}

/// Adds every exception class to module `m`, with `Error` as an alias of `CairnError`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CairnError", py.get_type::<CairnError>())?;
    m.add("Error", py.get_type::<CairnError>())?;
    m.add("LockedError", py.get_type::<LockedError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("VerifyError", py.get_type::<VerifyError>())?;
    Ok(())
}

//! Sessions and tables across the C boundary: opening and closing, durable tables, snapshots,
//! checkpoints.
//!
//! Owns: the [`cairn_session`] and [`cairn_table`] handles and the functions that make and free
//! them, with the table options (`CAIRN_AUTH_*`).
//!
//! May call: `cairn` (its `Session` and `Table`), `error` (codes, the guard, argument checks).
//! Must never touch: lookups, updates, cursors or proofs (their own modules).

use std::ffi::{c_char, c_int};

use cairn::{AuthConfig, HashKind, Session, SessionOptions, SnapshotOverrides, TableConfig};

use crate::error::{arg, cairn_error, guard, put, string, Failure};

/// A table without authentication (no root, no proofs): the fastest.
pub const CAIRN_AUTH_NONE: c_int = 0;
/// An authenticated table hashed with SHA-256 (roots and proofs available).
pub const CAIRN_AUTH_SHA256: c_int = 1;
/// An authenticated table hashed with BLAKE3 (roots and proofs available).
pub const CAIRN_AUTH_BLAKE3: c_int = 2;

/// A session: the owner of one directory and of the tables in it. Made by
/// `cairn_session_open`; freed by `cairn_session_close` or `cairn_session_free`. Safe to use
/// from several threads at once.
#[allow(non_camel_case_types)]
pub struct cairn_session {
    pub(crate) inner: Session,
}

/// A table: a sorted map from byte-string keys to byte-string values. Made by
/// `cairn_table_open` or `cairn_snapshot_open`; freed by `cairn_table_free`. Safe to use from
/// several threads at once. A table keeps its session open until it is freed (unless the
/// session is closed with `cairn_session_close`: its calls then fail with `CAIRN_ERR_CLOSED`).
#[allow(non_camel_case_types)]
pub struct cairn_table {
    pub(crate) inner: cairn::Table,
}

/// The hash kind of a `CAIRN_AUTH_*` code: `None` for `CAIRN_AUTH_NONE`.
pub(crate) fn hash_kind(auth: c_int) -> Result<Option<HashKind>, Failure> {
    match auth {
        CAIRN_AUTH_NONE => Ok(None),
        CAIRN_AUTH_SHA256 => Ok(Some(HashKind::Sha256)),
        CAIRN_AUTH_BLAKE3 => Ok(Some(HashKind::Blake3)),
        other => Err(Failure::invalid(format!(
            "auth {other} is none of CAIRN_AUTH_NONE, CAIRN_AUTH_SHA256, CAIRN_AUTH_BLAKE3"
        ))),
    }
}

/// Opens the session in directory `dir` (a NUL-terminated UTF-8 path): creates the directory
/// and a new session when missing or empty, recovers the session otherwise (its write-ahead
/// log replayed). With `read_only`, the directory must be a session already, no lock is taken,
/// and every call that would write fails with `CAIRN_ERR_READ_ONLY` (durable tables cannot be
/// opened; snapshots can). On success stores the new handle in `*out`.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null pointer, a path not UTF-8),
/// `CAIRN_ERR_LOCKED` (another live session holds the directory), `CAIRN_ERR_NOT_FOUND`,
/// `CAIRN_ERR_CORRUPT`, `CAIRN_ERR_UNSUPPORTED_VERSION`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `dir` is a NUL-terminated string; `out` points to writable storage for a pointer; `err` is
/// null or points to writable storage for a pointer (so for every function taking `err`).
#[no_mangle]
pub unsafe extern "C" fn cairn_session_open(
    dir: *const c_char,
    read_only: bool,
    out: *mut *mut cairn_session,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let dir = string(dir, "dir")?;
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        let options = SessionOptions::default().read_only(read_only);
        let session = Session::open_with_options(dir, options)?;
        put(
            out,
            "out",
            Box::into_raw(Box::new(cairn_session { inner: session })),
        )
    })
}

/// Closes the session and frees its handle: a checkpoint of the durable tables first when
/// anything was logged since the last one, then every table and cursor of the session is
/// closed (their later calls fail with `CAIRN_ERR_CLOSED`; their handles must still be freed)
/// and the directory lock released. Null is allowed (nothing happens).
///
/// # Safety
/// `session` is null or a handle from `cairn_session_open` not freed yet; it must not be used
/// after this call.
#[no_mangle]
pub unsafe extern "C" fn cairn_session_close(session: *mut cairn_session) {
    if session.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `cairn_session_open`, not freed yet (caller's promise).
    let session = unsafe { Box::from_raw(session) };
    // Closing must not unwind into C; a panic here leaves the drop to do the same work.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| session.inner.close()));
}

/// Frees the session's handle without closing it: the session stays open while one of its
/// tables or cursors is alive, and closes when the last is freed. Null is allowed.
///
/// # Safety
/// As `cairn_session_close`.
#[no_mangle]
pub unsafe extern "C" fn cairn_session_free(session: *mut cairn_session) {
    if session.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `cairn_session_open`, not freed yet (caller's promise).
    let session = unsafe { Box::from_raw(session) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(session)));
}

/// Saves every durable table of the session as a new checkpoint after syncing the log, so that
/// the next open replays nothing written before.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT`, `CAIRN_ERR_NOT_DURABLE`, `CAIRN_ERR_READ_ONLY`,
/// `CAIRN_ERR_CLOSED`, `CAIRN_ERR_LOG_FAILED`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `session` is null or a live handle; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_session_checkpoint(
    session: *const cairn_session,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let session = arg(session, "session")?;
        if session.inner.is_read_only() {
            return Err(Failure::new(
                crate::error::CAIRN_ERR_READ_ONLY,
                "the session is read-only: a checkpoint is not allowed",
            ));
        }
        Ok(session.inner.checkpoint()?)
    })
}

/// Opens the durable table `name` (1 to 64 characters from `[a-z0-9_-]`), creating it when the
/// session has none of that name: its writes go through the session's write-ahead log and
/// survive a restart and a crash. `auth` is one of `CAIRN_AUTH_NONE`, `CAIRN_AUTH_SHA256`,
/// `CAIRN_AUTH_BLAKE3`, and must match an existing table's. On success stores the new handle
/// in `*out`.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a bad name, an `auth` that disagrees with the table's),
/// `CAIRN_ERR_READ_ONLY`, `CAIRN_ERR_CLOSED`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `session` is null or a live handle; `name` is a NUL-terminated string; `out` points to
/// writable storage for a pointer; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_table_open(
    session: *const cairn_session,
    name: *const c_char,
    auth: c_int,
    out: *mut *mut cairn_table,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let session = arg(session, "session")?;
        let name = string(name, "name")?;
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        let auth = hash_kind(auth)?.map(|hash| AuthConfig::default().hash(hash));
        let table = session
            .inner
            .table(name, TableConfig::default().auth(auth))?;
        put(
            out,
            "out",
            Box::into_raw(Box::new(cairn_table { inner: table })),
        )
    })
}

/// Frees a table's handle (the table itself lives on in its session when durable). Null is
/// allowed.
///
/// # Safety
/// `table` is null or a handle from this library not freed yet; it must not be used after.
#[no_mangle]
pub unsafe extern "C" fn cairn_table_free(table: *mut cairn_table) {
    if table.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in this module, not freed yet (caller's promise).
    let table = unsafe { Box::from_raw(table) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(table)));
}

/// Saves the table as snapshot `name` (1 to 64 characters from `[a-z0-9_-]`) with `label`
/// (checked when it is opened). Durable and atomic when it returns.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a bad name), `CAIRN_ERR_EXISTS`,
/// `CAIRN_ERR_READ_ONLY`, `CAIRN_ERR_CLOSED`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `table` is null or a live handle; `name` and `label` are NUL-terminated strings; `err` as in
/// `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_save(
    table: *const cairn_table,
    name: *const c_char,
    label: *const c_char,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        let name = string(name, "name")?;
        let label = string(label, "label")?;
        Ok(table.inner.save_snapshot(name, label)?)
    })
}

/// Opens snapshot `name` of the session as a new table (not durable: its updates are not
/// logged; save it again to keep them). `label` must equal the label it was saved with. Every
/// file of the snapshot is checked before the table is returned. On success stores the new
/// handle in `*out`.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a bad name), `CAIRN_ERR_NOT_FOUND`,
/// `CAIRN_ERR_LABEL_MISMATCH`, `CAIRN_ERR_CORRUPT`, `CAIRN_ERR_CLOSED`, `CAIRN_ERR_IO`.
///
/// # Safety
/// As `cairn_table_open`, with `label` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_open(
    session: *const cairn_session,
    name: *const c_char,
    label: *const c_char,
    out: *mut *mut cairn_table,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let session = arg(session, "session")?;
        let name = string(name, "name")?;
        let label = string(label, "label")?;
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        let table = session
            .inner
            .open_snapshot(name, label, SnapshotOverrides::default())?;
        put(
            out,
            "out",
            Box::into_raw(Box::new(cairn_table { inner: table })),
        )
    })
}

//! Cursors across the C boundary: a sorted, stable view of a key range, read one entry at a
//! time.
//!
//! Owns: the [`cairn_cursor`] handle, which keeps the entry last returned so that the pointers
//! handed to C stay valid until the next call on the cursor.
//!
//! May call: `cairn` (`Table::range`, `Cursor`), `error`, `session` (the table handle). Must
//! never touch: lookups, updates, proofs.

use std::ffi::c_int;
use std::ops::Bound;

use crate::error::{arg, arg_mut, bytes, cairn_error, guard, put, Failure};
use crate::session::cairn_table;

/// A cursor over a key range of a table, as the table was when the cursor was opened (later
/// updates are invisible through it). Made by `cairn_cursor_open`, freed by
/// `cairn_cursor_free`. Not to be used from two threads at once.
#[allow(non_camel_case_types)]
pub struct cairn_cursor {
    inner: cairn::Cursor,
    /// The entry last returned by `cairn_cursor_next`, which the pointers given out point into.
    current: Option<cairn::CursorEntry>,
}

/// Opens a cursor over the keys `k` with `start <= k < end` in key order. A null `start` (with
/// `start_len` 0) means from the first key; a null `end` (with `end_len` 0) means to the last.
/// (An empty but non-null bound is the empty key.) On success stores the new handle in `*out`.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null pointer with a non-zero length),
/// `CAIRN_ERR_TOO_LARGE` (a bound longer than the key maximum), `CAIRN_ERR_CLOSED`,
/// `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `table` is null or a live handle; `start` and `end` are null or hold `start_len` and
/// `end_len` bytes; `out` points to writable storage for a pointer; `err` as in
/// `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_cursor_open(
    table: *const cairn_table,
    start: *const u8,
    start_len: usize,
    end: *const u8,
    end_len: usize,
    out: *mut *mut cairn_cursor,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        let lower = match start.is_null() && start_len == 0 {
            true => Bound::Unbounded,
            false => Bound::Included(bytes(start, start_len, "start")?.to_vec()),
        };
        let upper = match end.is_null() && end_len == 0 {
            true => Bound::Unbounded,
            false => Bound::Excluded(bytes(end, end_len, "end")?.to_vec()),
        };
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        let cursor = table.inner.range((lower, upper))?;
        let handle = cairn_cursor {
            inner: cursor,
            current: None,
        };
        put(out, "out", Box::into_raw(Box::new(handle)))
    })
}

/// Reads the next entry. When there is one, stores 1 in `*has_entry` and points `*key` and
/// `*value` at its bytes (`*key_len` and `*value_len` long; a key with a blob gives its value
/// only); the bytes belong to the cursor and stay valid until the next call on it (next, seek
/// or free): copy them to keep them. At the end of the range stores 0 in `*has_entry` (and
/// nulls and zero lengths in the rest). After an error the cursor is finished.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null pointer), `CAIRN_ERR_CLOSED` (the session was
/// closed), `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `cursor` is null or a live handle used by no other thread meanwhile; the other pointers
/// point to writable storage of their types; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_cursor_next(
    cursor: *mut cairn_cursor,
    has_entry: *mut bool,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let cursor = arg_mut(cursor, "cursor")?;
        for (p, what) in [(key_len, "key_len"), (value_len, "value_len")] {
            if p.is_null() {
                return Err(Failure::invalid(format!("{what} is null")));
            }
        }
        if has_entry.is_null() || key.is_null() || value.is_null() {
            return Err(Failure::invalid("has_entry, key or value is null"));
        }
        cursor.current = cursor.inner.next().transpose()?;
        let (k, v): (&[u8], &[u8]) = match &cursor.current {
            Some(entry) => (&entry.key, &entry.value),
            None => (&[], &[]),
        };
        let null = std::ptr::null();
        let present = cursor.current.is_some();
        put(has_entry, "has_entry", present)?;
        put(key, "key", if present { k.as_ptr() } else { null })?;
        put(key_len, "key_len", k.len())?;
        put(value, "value", if present { v.as_ptr() } else { null })?;
        put(value_len, "value_len", v.len())
    })
}

/// Moves the cursor to the first entry whose key is `>= key` (within its range), forwards or
/// backwards: the next `cairn_cursor_next` returns it. The cursor keeps its view.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT`, `CAIRN_ERR_TOO_LARGE`, `CAIRN_ERR_CLOSED`,
/// `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `cursor` as in `cairn_cursor_next`; `key` is null (with `key_len` 0) or holds `key_len`
/// bytes; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_cursor_seek(
    cursor: *mut cairn_cursor,
    key: *const u8,
    key_len: usize,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let cursor = arg_mut(cursor, "cursor")?;
        let key = bytes(key, key_len, "key")?;
        cursor.current = None;
        Ok(cursor.inner.seek(key)?)
    })
}

/// Frees a cursor (and the runs it holds). Null is allowed.
///
/// # Safety
/// `cursor` is null or a handle from `cairn_cursor_open` not freed yet; not used after.
#[no_mangle]
pub unsafe extern "C" fn cairn_cursor_free(cursor: *mut cairn_cursor) {
    if cursor.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `cairn_cursor_open`, not freed yet (caller's promise).
    let cursor = unsafe { Box::from_raw(cursor) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(cursor)));
}

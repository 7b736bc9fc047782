//! Cursors across the C boundary: a sorted, stable view of a key range, read one entry at a
//! time.
//!
//! Owns: the [`cairn_cursor`] handle, which keeps the entry last returned so that the pointers
//! handed to C stay valid until the next call on the cursor, and [`cairn_entries`] (many
//! entries read in one call, in buffers the library allocates).
//!
//! May call: `cairn` (`Table::range`, `Cursor`), `error`, `session` (the table handle), `batch`
//! (its buffer helpers). Must
//! never touch: lookups, updates, proofs.

use std::ffi::c_int;
use std::ops::Bound;

use crate::batch::{leak, unleak};
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
/// only); the bytes belong to the cursor and stay valid until the next call on it (next, read,
/// seek or free): copy them to keep them. At the end of the range stores 0 in `*has_entry`
/// (and nulls and zero lengths in the rest). After an error the cursor is finished.
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

/// Entries read from a cursor in one call (`cairn_cursor_read`), in buffers the library
/// allocated: free them with `cairn_entries_free`. Entry `i` has the key
/// `keys[key_offsets[i] .. key_offsets[i + 1]]` and the value
/// `values[value_offsets[i] .. value_offsets[i + 1]]` (a key with a blob gives its value only).
#[repr(C)]
pub struct cairn_entries {
    /// The keys, end to end (null when there are none).
    pub keys: *mut u8,
    /// The length of `keys` in bytes.
    pub keys_len: usize,
    /// `count + 1` offsets into `keys`, the last equal to `keys_len`.
    pub key_offsets: *mut usize,
    /// The values, end to end (null when there are none).
    pub values: *mut u8,
    /// The length of `values` in bytes.
    pub values_len: usize,
    /// `count + 1` offsets into `values`, the last equal to `values_len`.
    pub value_offsets: *mut usize,
    /// The number of entries read.
    pub count: usize,
}

/// Reads up to `max_entries` entries at once (one call for many entries, for bindings): fills
/// `*out` with them, in buffers the library allocated (free them with `cairn_entries_free`).
/// Fewer than `max_entries` (0 included) means the cursor reached the end of its range. On
/// failure `*out` is left untouched and the cursor is finished.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null pointer, `max_entries` 0),
/// `CAIRN_ERR_CLOSED`, `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `cursor` as in `cairn_cursor_next`; `out` points to a writable `cairn_entries`; `err` as in
/// `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_cursor_read(
    cursor: *mut cairn_cursor,
    max_entries: usize,
    out: *mut cairn_entries,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let cursor = arg_mut(cursor, "cursor")?;
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        if max_entries == 0 {
            return Err(Failure::invalid("max_entries is 0"));
        }
        cursor.current = None;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        let (mut key_offsets, mut value_offsets) = (vec![0], vec![0]);
        for entry in cursor.inner.by_ref().take(max_entries) {
            let entry = entry?;
            keys.extend_from_slice(&entry.key);
            values.extend_from_slice(&entry.value);
            key_offsets.push(keys.len());
            value_offsets.push(values.len());
        }
        let entries = cairn_entries {
            count: key_offsets.len() - 1,
            keys_len: keys.len(),
            keys: leak(keys),
            key_offsets: leak(key_offsets),
            values_len: values.len(),
            values: leak(values),
            value_offsets: leak(value_offsets),
        };
        put(out, "out", entries)
    })
}

/// Frees the buffers of `entries` and clears it (a cleared or zeroed `cairn_entries` may be
/// freed again). Null is allowed.
///
/// # Safety
/// `entries` is null or was filled by `cairn_cursor_read` (or zeroed), its fields unchanged.
#[no_mangle]
pub unsafe extern "C" fn cairn_entries_free(entries: *mut cairn_entries) {
    // SAFETY: null or filled by `cairn_cursor_read` (caller's promise).
    let Some(e) = (unsafe { entries.as_mut() }) else {
        return;
    };
    // SAFETY: each pointer was made by `leak` with these lengths (the offsets hold `count + 1`
    // items), and is cleared below so that it is freed once.
    unsafe {
        unleak(e.keys, e.keys_len);
        unleak(e.values, e.values_len);
        if !e.key_offsets.is_null() {
            unleak(e.key_offsets, e.count + 1);
        }
        if !e.value_offsets.is_null() {
            unleak(e.value_offsets, e.count + 1);
        }
    }
    *e = cairn_entries {
        keys: std::ptr::null_mut(),
        keys_len: 0,
        key_offsets: std::ptr::null_mut(),
        values: std::ptr::null_mut(),
        values_len: 0,
        value_offsets: std::ptr::null_mut(),
        count: 0,
    };
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

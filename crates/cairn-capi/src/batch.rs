//! Batched lookups and updates across the C boundary, and the durability of a write.
//!
//! Owns: [`cairn_values`] (a lookup batch's results, in buffers the library allocates),
//! [`cairn_durability`] and its wait and callback, and the `CAIRN_UPDATE_*` kinds. One call
//! carries N keys as one flat buffer plus N lengths, so that a binding (cgo, say) pays its
//! crossing once per batch, not per key.
//!
//! May call: `cairn` (`Table::lookups`, `Table::updates`, `Table::write`, `Durability`),
//! `error`, `session` (the table handle). Must never touch: sessions' lifetimes, cursors, proofs.

use std::ffi::{c_int, c_void};

use cairn::{LookupResult, Update};

use crate::error::{arg, cairn_error, guard, put, slice, split, Failure};
use crate::session::cairn_table;

/// An insert: the key takes the value (replacing any it had).
pub const CAIRN_UPDATE_INSERT: u8 = 1;
/// An upsert: the value is combined with the key's current one by the table's resolve
/// function (the default one keeps the newer value, as an insert).
pub const CAIRN_UPDATE_UPSERT: u8 = 2;
/// A delete: the key is removed (its value length must be 0).
pub const CAIRN_UPDATE_DELETE: u8 = 3;

/// The results of a batched lookup (`cairn_lookups`), in buffers the library allocated: free
/// them with `cairn_values_free`. Key `i` was found when `found[i]` is 1; its value is then
/// the bytes `data[offsets[i] .. offsets[i + 1]]` (a key with a blob gives its value only).
/// An absent key has `found[i] == 0` and an empty range.
#[repr(C)]
pub struct cairn_values {
    /// The values found, laid end to end (null when there are none).
    pub data: *mut u8,
    /// The length of `data` in bytes.
    pub data_len: usize,
    /// `count + 1` offsets into `data`, non-decreasing, the last equal to `data_len`.
    pub offsets: *mut usize,
    /// `count` flags: 1 found, 0 absent.
    pub found: *mut u8,
    /// The number of keys looked up.
    pub count: usize,
}

/// A boxed slice given to C: its pointer (null when empty).
pub(crate) fn leak<T>(items: Vec<T>) -> *mut T {
    if items.is_empty() {
        return std::ptr::null_mut();
    }
    Box::into_raw(items.into_boxed_slice()).cast::<T>()
}

/// Takes back a slice given by [`leak`].
///
/// # Safety
/// `p` is null or was returned by `leak` for a vector of exactly `len` items, not freed yet.
pub(crate) unsafe fn unleak<T>(p: *mut T, len: usize) {
    if !p.is_null() && len > 0 {
        // SAFETY: `p` and `len` describe a boxed slice made by `leak` (caller's promise).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) });
    }
}

/// Looks up `count` keys at once: the keys laid end to end in `keys`, key `i` being the next
/// `key_lens[i]` bytes. All page reads of the batch are submitted together. On success fills
/// `*out` with buffers the library allocated (free them with `cairn_values_free`); on failure
/// `*out` is left untouched.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null pointer with a non-zero count or length, lengths
/// that overflow), `CAIRN_ERR_TOO_LARGE` (a key longer than the maximum), `CAIRN_ERR_CLOSED`,
/// `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `table` is null or a live handle; `keys` holds the sum of `key_lens` bytes; `key_lens`
/// holds `count` lengths; `out` points to a writable `cairn_values`; `err` as in
/// `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_lookups(
    table: *const cairn_table,
    keys: *const u8,
    key_lens: *const usize,
    count: usize,
    out: *mut cairn_values,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        let keys = split(keys, slice(key_lens, count, "key_lens")?, "keys")?;
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        let results = table.inner.lookups(&keys)?;
        let data_len = results
            .iter()
            .map(|r| r.value().map_or(0, <[u8]>::len))
            .sum();
        let mut data = Vec::with_capacity(data_len);
        let mut offsets = Vec::with_capacity(count + 1);
        let mut found = Vec::with_capacity(count);
        offsets.push(0);
        for result in &results {
            match result {
                LookupResult::Found(value) | LookupResult::FoundWithBlob(value, _) => {
                    data.extend_from_slice(value);
                    found.push(1);
                }
                _ => found.push(0),
            }
            offsets.push(data.len());
        }
        let values = cairn_values {
            data_len: data.len(),
            data: leak(data),
            offsets: leak(offsets),
            found: leak(found),
            count,
        };
        put(out, "out", values)
    })
}

/// Frees the buffers of a lookup's results and clears `values` (a cleared or zeroed
/// `cairn_values` may be freed again). Null is allowed.
///
/// # Safety
/// `values` is null or was filled by `cairn_lookups` (or zeroed), its fields unchanged since.
#[no_mangle]
pub unsafe extern "C" fn cairn_values_free(values: *mut cairn_values) {
    // SAFETY: null or a `cairn_values` filled by `cairn_lookups` (caller's promise).
    let Some(v) = (unsafe { values.as_mut() }) else {
        return;
    };
    // SAFETY: each pointer was made by `leak` with these lengths (`offsets` holds `count + 1`
    // items, at least 1; `found` holds `count`), and is cleared below so it is freed once.
    unsafe {
        unleak(v.data, v.data_len);
        if !v.offsets.is_null() {
            unleak(v.offsets, v.count + 1);
        }
        unleak(v.found, v.count);
    }
    v.data = std::ptr::null_mut();
    v.offsets = std::ptr::null_mut();
    v.found = std::ptr::null_mut();
    v.data_len = 0;
    v.count = 0;
}

/// The update batch described by the C arrays.
fn batch<'a>(
    kinds: *const u8,
    keys: *const u8,
    key_lens: *const usize,
    values: *const u8,
    value_lens: *const usize,
    count: usize,
) -> Result<Vec<(&'a [u8], Update<'a>)>, Failure> {
    let kinds = slice(kinds, count, "kinds")?;
    let keys = split(keys, slice(key_lens, count, "key_lens")?, "keys")?;
    let values = split(values, slice(value_lens, count, "value_lens")?, "values")?;
    let mut batch = Vec::with_capacity(count);
    for (i, ((&kind, key), value)) in kinds.iter().zip(keys).zip(values).enumerate() {
        let update = match kind {
            CAIRN_UPDATE_INSERT => Update::Insert(value),
            CAIRN_UPDATE_UPSERT => Update::Upsert(value),
            CAIRN_UPDATE_DELETE if value.is_empty() => Update::Delete,
            CAIRN_UPDATE_DELETE => {
                return Err(Failure::invalid(format!(
                    "update {i}: a delete with a value of {} bytes",
                    value.len()
                )))
            }
            other => {
                return Err(Failure::invalid(format!(
                    "update {i}: kind {other} is none of CAIRN_UPDATE_INSERT, _UPSERT, _DELETE"
                )))
            }
        };
        batch.push((key, update));
    }
    Ok(batch)
}

/// Applies `count` updates in order: update `i` has kind `kinds[i]` (`CAIRN_UPDATE_*`), key
/// the next `key_lens[i]` bytes of `keys`, value the next `value_lens[i]` bytes of `values`
/// (0 for a delete). The whole batch is checked before anything is applied. On a durable table
/// the batch is logged as one record; to learn when it is on disk, use `cairn_write`.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null pointer with a non-zero count or length, an
/// unknown kind, a delete with a value), `CAIRN_ERR_TOO_LARGE`, `CAIRN_ERR_READ_ONLY`,
/// `CAIRN_ERR_CLOSED`, `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_LOG_FAILED`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `table` is null or a live handle; `kinds`, `key_lens` and `value_lens` hold `count` items;
/// `keys` and `values` hold the sums of their lengths; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_updates(
    table: *const cairn_table,
    kinds: *const u8,
    keys: *const u8,
    key_lens: *const usize,
    values: *const u8,
    value_lens: *const usize,
    count: usize,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        let batch = batch(kinds, keys, key_lens, values, value_lens, count)?;
        Ok(table.inner.updates(&batch)?)
    })
}

/// The durability of one write to a durable table (from `cairn_write`): wait for it, poll it or
/// give it a callback. Free it with `cairn_durability_free` (freeing it does not cancel the
/// write, nor a callback already registered). Safe to use from several threads at once.
#[allow(non_camel_case_types)]
pub struct cairn_durability {
    inner: cairn::Durability,
}

/// A callback told that a write is durable (`code` is `CAIRN_OK`) or never will be (`code` is
/// `CAIRN_ERR_LOG_FAILED`): see `cairn_durability_on_durable`.
#[allow(non_camel_case_types)]
pub type cairn_durable_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, code: c_int)>;

/// As `cairn_updates` on a durable table (one opened with `cairn_table_open`), and stores in
/// `*out` the durability of the batch's log record. The call returns once the batch is applied
/// in memory and appended to the log's buffer; concurrent writers share fsyncs.
///
/// Errors: as `cairn_updates`, and `CAIRN_ERR_NOT_DURABLE` for a table opened from a snapshot.
///
/// # Safety
/// As `cairn_updates`; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_write(
    table: *const cairn_table,
    kinds: *const u8,
    keys: *const u8,
    key_lens: *const usize,
    values: *const u8,
    value_lens: *const usize,
    count: usize,
    out: *mut *mut cairn_durability,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        let batch = batch(kinds, keys, key_lens, values, value_lens, count)?;
        if out.is_null() {
            return Err(Failure::invalid("out is null"));
        }
        let durability = table.inner.write(&batch)?;
        let handle = Box::into_raw(Box::new(cairn_durability { inner: durability }));
        put(out, "out", handle)
    })
}

/// Blocks until the write is durable.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (null), `CAIRN_ERR_LOG_FAILED` (the log failed, or the
/// session closed, before the write was durable).
///
/// # Safety
/// `durability` is null or a live handle; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_durability_wait(
    durability: *const cairn_durability,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || Ok(arg(durability, "durability")?.inner.wait()?))
}

/// Stores in `*durable` whether the write is durable now, without blocking.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (null), `CAIRN_ERR_LOG_FAILED`.
///
/// # Safety
/// `durability` is null or a live handle; `durable` points to a writable `bool`; `err` as in
/// `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_durability_is_durable(
    durability: *const cairn_durability,
    durable: *mut bool,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let is = arg(durability, "durability")?.inner.is_durable()?;
        put(durable, "durable", is)
    })
}

/// The context of a callback, sent to the log's syncer thread.
struct Callback {
    f: unsafe extern "C" fn(*mut c_void, c_int),
    ctx: *mut c_void,
}

// SAFETY: the caller of `cairn_durability_on_durable` promises that `callback` may be called
// with `ctx` from another thread (documented there); the library never reads through `ctx`.
unsafe impl Send for Callback {}

/// Calls `callback(ctx, code)` once the write is durable (`code` is `CAIRN_OK`) or the log
/// failed first (`CAIRN_ERR_LOG_FAILED`): at once, on this thread, if that is known already;
/// otherwise later on the log's syncer thread, which the callback must not block for long, nor
/// call back into this library from. The callback runs exactly once, even if the handle is
/// freed first.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT` (a null handle or callback; the callback is then never
/// called).
///
/// # Safety
/// `durability` is null or a live handle; `callback` may be called with `ctx` from any thread,
/// and `ctx` stays valid until it has been; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_durability_on_durable(
    durability: *const cairn_durability,
    callback: cairn_durable_fn,
    ctx: *mut c_void,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let durability = arg(durability, "durability")?;
        let f = callback.ok_or_else(|| Failure::invalid("callback is null"))?;
        let callback = Callback { f, ctx };
        durability.inner.on_durable(move |result| {
            let code = match &result {
                Ok(()) => crate::error::CAIRN_OK,
                Err(e) => crate::error::code_of(e),
            };
            let callback = callback;
            // SAFETY: the caller of `cairn_durability_on_durable` promised `f` may be called
            // with `ctx` on this thread, once.
            unsafe { (callback.f)(callback.ctx, code) };
        });
        Ok(())
    })
}

/// The write's position in the log (later writes have larger ones); 0 for a null handle.
///
/// # Safety
/// `durability` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn cairn_durability_position(durability: *const cairn_durability) -> u64 {
    arg(durability, "durability").map_or(0, |d| d.inner.position())
}

/// Frees a durability handle (the write and any callback registered go on). Null is allowed.
///
/// # Safety
/// `durability` is null or a handle from `cairn_write` not freed yet; not used after.
#[no_mangle]
pub unsafe extern "C" fn cairn_durability_free(durability: *mut cairn_durability) {
    if durability.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `cairn_write`, not freed yet (caller's promise).
    let durability = unsafe { Box::from_raw(durability) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(durability)));
}

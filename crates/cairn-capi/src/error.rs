//! Errors across the C boundary: the stable codes, the `cairn_error` message handle, and the
//! guard every entry point runs its body in.
//!
//! Owns: the `CAIRN_*` error codes and their mapping from [`cairn::Error`], [`cairn_error`] and
//! its accessors, [`guard`] (no panic crosses the boundary), and the checked readers of C
//! arguments (null pointers, byte slices, strings, flat key buffers).
//!
//! May call: `cairn` (its error type). Must never touch: a session, table or cursor.

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const CAIRN_OK: c_int = 0;
/// An argument is invalid: a null pointer, a length that overflows, a string that is not UTF-8,
/// a bad table or snapshot name, an invalid table configuration or update.
pub const CAIRN_ERR_INVALID_ARGUMENT: c_int = 1;
/// An operating-system I/O error (the message names the file).
pub const CAIRN_ERR_IO: c_int = 2;
/// Data on disk failed its checks: a corrupt page, file, snapshot, session or log.
pub const CAIRN_ERR_CORRUPT: c_int = 3;
/// Another live session holds the directory's lock.
pub const CAIRN_ERR_LOCKED: c_int = 4;
/// The session, table or cursor was closed.
pub const CAIRN_ERR_CLOSED: c_int = 5;
/// Something named does not exist: the session directory, a snapshot.
pub const CAIRN_ERR_NOT_FOUND: c_int = 6;
/// Something named exists already: a snapshot.
pub const CAIRN_ERR_EXISTS: c_int = 7;
/// A key, value or blob is longer than its maximum, or the table outgrew the engine's limits.
pub const CAIRN_ERR_TOO_LARGE: c_int = 8;
/// The session was opened read-only and the call would write.
pub const CAIRN_ERR_READ_ONLY: c_int = 9;
/// A durable operation on a table or session without a write-ahead log.
pub const CAIRN_ERR_NOT_DURABLE: c_int = 10;
/// A root or proof of a table created without authentication.
pub const CAIRN_ERR_NOT_AUTHENTICATED: c_int = 11;
/// The write-ahead log failed or closed: no write after the last durability notice may be on
/// disk. Reopen the session.
pub const CAIRN_ERR_LOG_FAILED: c_int = 12;
/// An earlier update of the table failed half way; the table can no longer be used.
pub const CAIRN_ERR_TABLE_BROKEN: c_int = 13;
/// Data written by a newer build of Cairn.
pub const CAIRN_ERR_UNSUPPORTED_VERSION: c_int = 14;
/// A snapshot's label is not the one given.
pub const CAIRN_ERR_LABEL_MISMATCH: c_int = 15;
/// A transaction conflict: run the operation again.
pub const CAIRN_ERR_CONFLICT: c_int = 16;
/// A proof did not verify: it is malformed, does not hash to the root, or shows a claim false.
pub const CAIRN_ERR_PROOF_INVALID: c_int = 17;
/// A panic inside the library, caught at the boundary (a bug: please report it with the
/// message). The handle involved may be unusable.
pub const CAIRN_ERR_PANIC: c_int = 18;
/// An error of a kind this version of the C API does not name.
pub const CAIRN_ERR_OTHER: c_int = 19;

/// An error's code and message, made by a failed call when the caller passed a non-null
/// `cairn_error**`; read it with `cairn_error_code` and `cairn_error_message`, free it with
/// `cairn_error_free`.
#[allow(non_camel_case_types)]
pub struct cairn_error {
    code: c_int,
    message: CString,
}

/// A failure on its way to the caller: a code and a message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// An invalid argument.
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(CAIRN_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<cairn::Error> for Failure {
    fn from(e: cairn::Error) -> Failure {
        Failure::new(code_of(&e), e.with_causes())
    }
}

/// The stable code of an engine error.
pub(crate) fn code_of(e: &cairn::Error) -> c_int {
    use cairn::Error as E;
    match e {
        E::Io { .. } => CAIRN_ERR_IO,
        E::SessionDirMissing(_) | E::SnapshotMissing(_) => CAIRN_ERR_NOT_FOUND,
        E::SessionLocked(_) => CAIRN_ERR_LOCKED,
        E::SessionCorrupted { .. }
        | E::SnapshotCorrupted { .. }
        | E::Corrupt { .. }
        | E::CorruptFile { .. }
        | E::ChecksumMismatch { .. }
        | E::LogCorrupted { .. } => CAIRN_ERR_CORRUPT,
        E::SessionClosed | E::TableClosed | E::CursorClosed => CAIRN_ERR_CLOSED,
        E::TableBroken(_) => CAIRN_ERR_TABLE_BROKEN,
        E::InvalidUpdate(_)
        | E::InvalidSnapshotName(_)
        | E::InvalidConfig(_)
        | E::SnapshotDirectory { .. }
        | E::BlobRefInvalid => CAIRN_ERR_INVALID_ARGUMENT,
        E::SnapshotExists(_) => CAIRN_ERR_EXISTS,
        E::SnapshotLabelMismatch { .. } => CAIRN_ERR_LABEL_MISMATCH,
        E::KeyTooLarge { .. }
        | E::ValueTooLarge { .. }
        | E::BlobTooLarge { .. }
        | E::TableTooLarge(_) => CAIRN_ERR_TOO_LARGE,
        E::UnsupportedVersion { .. } => CAIRN_ERR_UNSUPPORTED_VERSION,
        E::NotAuthenticated => CAIRN_ERR_NOT_AUTHENTICATED,
        E::ReadOnly(_) => CAIRN_ERR_READ_ONLY,
        E::LogFailed(_) => CAIRN_ERR_LOG_FAILED,
        E::TransactionConflict { .. } => CAIRN_ERR_CONFLICT,
        E::NotDurable(_) => CAIRN_ERR_NOT_DURABLE,
        _ => CAIRN_ERR_OTHER,
    }
}

/// Runs `body`, catching a panic, and reports the outcome: returns its code, and on failure
/// stores a new [`cairn_error`] in `*err` when `err` is not null (on success `*err` is set to
/// null). Every entry point that can fail goes through here.
pub(crate) fn guard(
    err: *mut *mut cairn_error,
    body: impl FnOnce() -> Result<(), Failure>,
) -> c_int {
    let outcome = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(outcome) => outcome,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with no message".into());
            Err(Failure::new(
                CAIRN_ERR_PANIC,
                format!("panic in cairn: {what}"),
            ))
        }
    };
    let (code, error) = match outcome {
        Ok(()) => (CAIRN_OK, std::ptr::null_mut()),
        Err(failure) => {
            // A message with an interior NUL keeps what precedes it.
            let bytes: Vec<u8> = failure.message.bytes().take_while(|&b| b != 0).collect();
            let message = CString::new(bytes).unwrap_or_default();
            let error = cairn_error {
                code: failure.code,
                message,
            };
            (failure.code, Box::into_raw(Box::new(error)))
        }
    };
    if err.is_null() {
        if !error.is_null() {
            // SAFETY: `error` was made by `Box::into_raw` just above and given to no one.
            drop(unsafe { Box::from_raw(error) });
        }
    } else {
        // SAFETY: the caller passes either null (handled above) or a pointer to a writable
        // `cairn_error*`, as every function's documentation requires.
        unsafe { *err = error };
    }
    code
}

/// `p` as a reference, or an invalid-argument failure naming `what`.
pub(crate) fn arg<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: a non-null pointer given for a handle or value must point to a live object of
    // that type (the documented contract of every function); `as_ref` checks for null.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is null")))
}

/// `p` as a mutable reference, or an invalid-argument failure naming `what`.
pub(crate) fn arg_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: as `arg`, and the caller must not use the object from another thread meanwhile
    // (documented for cursors, the only handles taken mutably).
    unsafe { p.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} is null")))
}

/// Stores `value` through an out-pointer, or fails naming `what` when it is null.
pub(crate) fn put<T>(out: *mut T, what: &str, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid(format!("{what} is null")));
    }
    // SAFETY: non-null, and the caller passes a pointer to writable storage of type `T`.
    unsafe { out.write(value) };
    Ok(())
}

/// The `len` bytes at `p` (which may be null when `len` is 0).
pub(crate) fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is null with a length of {len}"
        )));
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!(
            "{what}: length {len} is too large"
        )));
    }
    // SAFETY: non-null, `len` fits an `isize`, and the caller promises `len` readable bytes at
    // `p` that stay unchanged for the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The `n` elements at `p` (which may be null when `n` is 0).
pub(crate) fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is null with {n} elements"
        )));
    }
    if n.checked_mul(std::mem::size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Failure::invalid(format!(
            "{what}: {n} elements is too many"
        )));
    }
    // SAFETY: non-null, the size fits an `isize`, and the caller promises `n` initialised
    // elements at `p` that stay unchanged for the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The NUL-terminated UTF-8 string at `p`.
pub(crate) fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is null")));
    }
    // SAFETY: non-null, and the caller passes a NUL-terminated string that stays unchanged
    // for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// Splits a flat buffer of `lens.len()` byte strings laid end to end (`total` bytes at `p`)
/// into its parts; the lengths must add up to no more than the buffer.
pub(crate) fn split<'a>(
    p: *const u8,
    lens: &[usize],
    what: &str,
) -> Result<Vec<&'a [u8]>, Failure> {
    let total = lens
        .iter()
        .try_fold(0usize, |sum, &len| sum.checked_add(len))
        .ok_or_else(|| Failure::invalid(format!("{what}: the lengths overflow")))?;
    let all = bytes(p, total, what)?;
    let mut parts = Vec::with_capacity(lens.len());
    let mut at = 0;
    for &len in lens {
        parts.push(&all[at..at + len]);
        at += len;
    }
    Ok(parts)
}

/// The code of an error: `CAIRN_ERR_INVALID_ARGUMENT` for a null `error`.
///
/// # Safety
/// `error` is null or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn cairn_error_code(error: *const cairn_error) -> c_int {
    // SAFETY: null or live, as the caller promises.
    match unsafe { error.as_ref() } {
        Some(e) => e.code,
        None => CAIRN_ERR_INVALID_ARGUMENT,
    }
}

/// The message of an error, NUL-terminated UTF-8, valid until the error is freed; an empty
/// string for a null `error`.
///
/// # Safety
/// `error` is null or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn cairn_error_message(error: *const cairn_error) -> *const c_char {
    // SAFETY: null or live, as the caller promises.
    match unsafe { error.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Frees an error. Null is allowed (nothing happens).
///
/// # Safety
/// `error` is null or an error from this library not freed yet.
#[no_mangle]
pub unsafe extern "C" fn cairn_error_free(error: *mut cairn_error) {
    if !error.is_null() {
        // SAFETY: made by `Box::into_raw` in `guard`, and not freed yet (caller's promise).
        drop(unsafe { Box::from_raw(error) });
    }
}

/// The name of an error code (`"CAIRN_ERR_IO"`, ...), a static NUL-terminated string;
/// `"CAIRN_ERR_UNKNOWN"` for a code this library does not define.
#[no_mangle]
pub extern "C" fn cairn_code_name(code: c_int) -> *const c_char {
    let name: &'static CStr = match code {
        CAIRN_OK => c"CAIRN_OK",
        CAIRN_ERR_INVALID_ARGUMENT => c"CAIRN_ERR_INVALID_ARGUMENT",
        CAIRN_ERR_IO => c"CAIRN_ERR_IO",
        CAIRN_ERR_CORRUPT => c"CAIRN_ERR_CORRUPT",
        CAIRN_ERR_LOCKED => c"CAIRN_ERR_LOCKED",
        CAIRN_ERR_CLOSED => c"CAIRN_ERR_CLOSED",
        CAIRN_ERR_NOT_FOUND => c"CAIRN_ERR_NOT_FOUND",
        CAIRN_ERR_EXISTS => c"CAIRN_ERR_EXISTS",
        CAIRN_ERR_TOO_LARGE => c"CAIRN_ERR_TOO_LARGE",
        CAIRN_ERR_READ_ONLY => c"CAIRN_ERR_READ_ONLY",
        CAIRN_ERR_NOT_DURABLE => c"CAIRN_ERR_NOT_DURABLE",
        CAIRN_ERR_NOT_AUTHENTICATED => c"CAIRN_ERR_NOT_AUTHENTICATED",
        CAIRN_ERR_LOG_FAILED => c"CAIRN_ERR_LOG_FAILED",
        CAIRN_ERR_TABLE_BROKEN => c"CAIRN_ERR_TABLE_BROKEN",
        CAIRN_ERR_UNSUPPORTED_VERSION => c"CAIRN_ERR_UNSUPPORTED_VERSION",
        CAIRN_ERR_LABEL_MISMATCH => c"CAIRN_ERR_LABEL_MISMATCH",
        CAIRN_ERR_CONFLICT => c"CAIRN_ERR_CONFLICT",
        CAIRN_ERR_PROOF_INVALID => c"CAIRN_ERR_PROOF_INVALID",
        CAIRN_ERR_PANIC => c"CAIRN_ERR_PANIC",
        CAIRN_ERR_OTHER => c"CAIRN_ERR_OTHER",
        _ => c"CAIRN_ERR_UNKNOWN",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in a body becomes `CAIRN_ERR_PANIC` with its message, not an unwind into C.
    #[test]
    fn a_panic_becomes_an_error_code() {
        let mut err: *mut cairn_error = std::ptr::null_mut();
        let code = guard(&mut err, || panic!("boom"));
        assert_eq!(code, CAIRN_ERR_PANIC);
        // SAFETY: `guard` stored a live error in `err`.
        unsafe {
            assert_eq!(cairn_error_code(err), CAIRN_ERR_PANIC);
            let message = CStr::from_ptr(cairn_error_message(err)).to_str().unwrap();
            assert!(message.contains("boom"), "{message}");
            cairn_error_free(err);
        }
        // Without an out-pointer, the code alone (the error is freed inside).
        assert_eq!(
            guard(std::ptr::null_mut(), || panic!("again")),
            CAIRN_ERR_PANIC
        );
    }

    /// Success clears the out-pointer; a message with a NUL keeps what precedes it.
    #[test]
    fn outcomes_reach_the_out_pointer() {
        let mut err: *mut cairn_error = std::ptr::null_mut();
        let code = guard(&mut err, || Err(Failure::invalid("bad\0rest")));
        assert_eq!(code, CAIRN_ERR_INVALID_ARGUMENT);
        // SAFETY: `guard` stored a live error in `err`.
        unsafe {
            assert_eq!(CStr::from_ptr(cairn_error_message(err)).to_bytes(), b"bad");
            cairn_error_free(err);
        }
        assert_eq!(guard(&mut err, || Ok(())), CAIRN_OK);
        assert!(err.is_null());
    }

    /// Flat buffers: lengths that overflow, or a null buffer with bytes, are refused.
    #[test]
    fn flat_buffers_are_checked() {
        let keys = b"abcde";
        let parts = split(keys.as_ptr(), &[2, 0, 3], "keys").unwrap();
        assert_eq!(parts, [&b"ab"[..], b"", b"cde"]);
        assert!(split(keys.as_ptr(), &[usize::MAX, 2], "keys").is_err());
        assert!(split(std::ptr::null(), &[1], "keys").is_err());
        assert!(split(std::ptr::null(), &[0, 0], "keys")
            .unwrap()
            .iter()
            .all(|k| k.is_empty()));
    }
}

//! State roots and proofs across the C boundary: an authenticated table's root, a multiproof
//! of N keys as bytes, and a verifier a C caller (a light client) can run on those bytes.
//!
//! Owns: [`cairn_bytes`] (a byte buffer the library allocated) and the root, prove and verify
//! functions.
//!
//! May call: `cairn` (`Table::root`, `Table::prove`), `cairn_proof` (`Proof::encode`,
//! `verify`), `error`, `session` (the table handle, the `CAIRN_AUTH_*` codes). Must never
//! touch: updates, cursors.

use std::ffi::c_int;

use cairn_proof::{Claim, Root};

use crate::error::{
    arg, bytes, cairn_error, guard, put, slice, split, Failure, CAIRN_ERR_PROOF_INVALID,
};
use crate::session::{cairn_table, hash_kind};

/// The length of a state root in bytes.
pub const CAIRN_ROOT_BYTES: usize = 32;

/// Bytes the library allocated (a proof): free them with `cairn_bytes_free`.
#[repr(C)]
pub struct cairn_bytes {
    /// The bytes (null when `len` is 0).
    pub data: *mut u8,
    /// Their length.
    pub len: usize,
}

/// Frees the bytes of `bytes` and clears it (a cleared or zeroed `cairn_bytes` may be freed
/// again). Null is allowed.
///
/// # Safety
/// `bytes` is null or was filled by this library (or zeroed), its fields unchanged since.
#[no_mangle]
pub unsafe extern "C" fn cairn_bytes_free(bytes: *mut cairn_bytes) {
    // SAFETY: null or a `cairn_bytes` filled by this library (caller's promise).
    let Some(b) = (unsafe { bytes.as_mut() }) else {
        return;
    };
    if !b.data.is_null() && b.len > 0 {
        // SAFETY: `data` and `len` describe a boxed slice made in `cairn_prove`, cleared below
        // so that it is freed once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(b.data, b.len)) });
    }
    b.data = std::ptr::null_mut();
    b.len = 0;
}

/// The `CAIRN_AUTH_*` code of a hash kind.
fn auth_code(kind: cairn::HashKind) -> c_int {
    c_int::from(kind.code())
}

/// Commits the table's pending updates (if any) and writes its state root: 32 bytes into
/// `root` (`CAIRN_ROOT_BYTES`), the version into `*version` and the hash (`CAIRN_AUTH_SHA256`
/// or `CAIRN_AUTH_BLAKE3`) into `*auth`; `version` and `auth` may be null.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT`, `CAIRN_ERR_NOT_AUTHENTICATED` (a table opened with
/// `CAIRN_AUTH_NONE`), `CAIRN_ERR_CLOSED`, `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `table` is null or a live handle; `root` points to 32 writable bytes; `version` and `auth`
/// are null or writable; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_root(
    table: *const cairn_table,
    root: *mut u8,
    version: *mut u64,
    auth: *mut c_int,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        if root.is_null() {
            return Err(Failure::invalid("root is null"));
        }
        let commit = table.inner.root()?;
        // SAFETY: `root` is non-null and points to 32 writable bytes (caller's promise).
        unsafe {
            root.cast::<[u8; CAIRN_ROOT_BYTES]>()
                .write_unaligned(commit.root.hash)
        };
        if !version.is_null() {
            put(version, "version", commit.version)?;
        }
        if !auth.is_null() {
            put(auth, "auth", auth_code(commit.root.kind))?;
        }
        Ok(())
    })
}

/// Proves `count` keys (laid end to end in `keys`, key `i` `key_lens[i]` bytes long) of the
/// table's current contents, committing pending updates first: fills `*proof` with the
/// encoded multiproof (free it with `cairn_bytes_free`) and writes the root it verifies
/// against into `root` (32 bytes) and its version into `*version` (may be null). Check it with
/// `cairn_proof_verify`.
///
/// Errors: `CAIRN_ERR_INVALID_ARGUMENT`, `CAIRN_ERR_NOT_AUTHENTICATED`, `CAIRN_ERR_TOO_LARGE`,
/// `CAIRN_ERR_CLOSED`, `CAIRN_ERR_TABLE_BROKEN`, `CAIRN_ERR_IO`.
///
/// # Safety
/// `table` is null or a live handle; `keys` holds the sum of `key_lens` bytes; `key_lens`
/// holds `count` lengths; `proof` points to a writable `cairn_bytes`; `root` to 32 writable
/// bytes; `version` is null or writable; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_prove(
    table: *const cairn_table,
    keys: *const u8,
    key_lens: *const usize,
    count: usize,
    proof: *mut cairn_bytes,
    root: *mut u8,
    version: *mut u64,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let table = arg(table, "table")?;
        let keys = split(keys, slice(key_lens, count, "key_lens")?, "keys")?;
        if proof.is_null() || root.is_null() {
            return Err(Failure::invalid("proof or root is null"));
        }
        let proved = table.inner.prove(&keys)?;
        let encoded = proved.proof.encode().into_boxed_slice();
        let len = encoded.len();
        let data = match len {
            0 => std::ptr::null_mut(),
            _ => Box::into_raw(encoded).cast::<u8>(),
        };
        // SAFETY: `root` is non-null and points to 32 writable bytes (caller's promise).
        unsafe {
            root.cast::<[u8; CAIRN_ROOT_BYTES]>()
                .write_unaligned(proved.root.hash)
        };
        if !version.is_null() {
            put(version, "version", proved.version)?;
        }
        put(proof, "proof", cairn_bytes { data, len })
    })
}

/// Verifies a proof (as `cairn_prove` makes) against a state root: `CAIRN_OK` only if it is
/// well formed, hashes to `root` (32 bytes, made with hash `auth`: `CAIRN_AUTH_SHA256` or
/// `CAIRN_AUTH_BLAKE3`) and shows every claim true. Claim `i` is about the key of `key_lens[i]`
/// bytes next in `keys`: when `present[i]` is 1, that it holds the value of `value_lens[i]`
/// bytes next in `values` (and no blob); when 0, that it is absent (its value length must be
/// 0). No I/O, no session needed.
///
/// Errors: `CAIRN_ERR_PROOF_INVALID` (the message says why), `CAIRN_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `root` points to 32 readable bytes; `proof` holds `proof_len` bytes; `key_lens`,
/// `value_lens` and `present` hold `count` items; `keys` and `values` hold the sums of their
/// lengths; `err` as in `cairn_session_open`.
#[no_mangle]
pub unsafe extern "C" fn cairn_proof_verify(
    auth: c_int,
    root: *const u8,
    proof: *const u8,
    proof_len: usize,
    keys: *const u8,
    key_lens: *const usize,
    values: *const u8,
    value_lens: *const usize,
    present: *const u8,
    count: usize,
    err: *mut *mut cairn_error,
) -> c_int {
    guard(err, || {
        let kind = hash_kind(auth)?
            .ok_or_else(|| Failure::invalid("auth is CAIRN_AUTH_NONE: nothing to verify"))?;
        let root = bytes(root, CAIRN_ROOT_BYTES, "root")?;
        let root =
            Root::from_slice(kind, root).map_err(|e| Failure::invalid(format!("root: {e}")))?;
        let proof = bytes(proof, proof_len, "proof")?;
        let keys = split(keys, slice(key_lens, count, "key_lens")?, "keys")?;
        let values = split(values, slice(value_lens, count, "value_lens")?, "values")?;
        let present = slice(present, count, "present")?;
        let mut claims = Vec::with_capacity(count);
        for (i, ((key, value), &flag)) in keys.iter().zip(&values).zip(present).enumerate() {
            claims.push(match flag {
                1 => Claim::present(key, value),
                0 if value.is_empty() => Claim::absent(key),
                0 => return Err(Failure::invalid(format!("claim {i}: absent with a value"))),
                other => {
                    return Err(Failure::invalid(format!(
                        "claim {i}: present is {other}, not 0 or 1"
                    )))
                }
            });
        }
        cairn_proof::verify(&root, proof, &claims)
            .map_err(|e| Failure::new(CAIRN_ERR_PROOF_INVALID, format!("proof rejected: {e}")))
    })
}

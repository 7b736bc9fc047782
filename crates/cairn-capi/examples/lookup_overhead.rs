//! What the C API adds to a batched lookup: the same batches of random keys looked up through
//! `Table::lookups` and through `cairn_lookups` (called from Rust, as C would call it), on the
//! same durable table (the C API's session closed before the Rust one opens, and opened again
//! after), timed apart. A baseline for the bindings built on the C API (issue 51's Go bench
//! compares a batch through Go with the same batch from Rust).
//!
//! Run: `cargo run --release -p cairn-capi --example lookup_overhead [ENTRIES [PASSES]]` (default
//! 1M entries, 1 pass): with PASSES, each figure is the best of that many passes over every
//! batch (as `bindings/go/cmd/getmany-bench` takes its figures).

use std::ffi::CString;
use std::ptr::null_mut;
use std::time::Instant;

use cairn_capi::*;

const BATCH_KEYS: usize = 1000;
const BATCHES: usize = 200;

/// Key `i`: 8 bytes, spread over the key space.
fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

/// Opens the session in `path` and its table "bench" through the C API.
fn open_c(path: &CString) -> (*mut cairn_session, *mut cairn_table) {
    let mut session = null_mut();
    let mut table = null_mut();
    // SAFETY: a valid string and out-pointers; errors are not asked for.
    unsafe {
        assert_eq!(
            cairn_session_open(path.as_ptr(), false, &mut session, null_mut()),
            0
        );
        let name = c"bench".as_ptr();
        assert_eq!(
            cairn_table_open(session, name, CAIRN_AUTH_NONE, &mut table, null_mut()),
            0
        );
    }
    (session, table)
}

/// Nanoseconds per key of the best of `passes` passes of `time_c`.
fn best_c(table: *mut cairn_table, batches: &[Vec<u8>], passes: usize) -> f64 {
    (0..passes)
        .map(|_| time_c(table, batches))
        .fold(f64::INFINITY, f64::min)
}

/// Nanoseconds per key of looking up every batch through `cairn_lookups`.
fn time_c(table: *mut cairn_table, batches: &[Vec<u8>]) -> f64 {
    let lens = vec![8usize; BATCH_KEYS];
    let start = Instant::now();
    for batch in batches {
        // SAFETY: a zeroed `cairn_values` is valid (null pointers, zero lengths).
        let mut values: cairn_values = unsafe { std::mem::zeroed() };
        // SAFETY: `table` is live; the batch holds `BATCH_KEYS` keys of 8 bytes.
        unsafe {
            let keys = batch.as_ptr();
            let code = cairn_lookups(
                table,
                keys,
                lens.as_ptr(),
                BATCH_KEYS,
                &mut values,
                null_mut(),
            );
            assert_eq!(code, 0);
            cairn_values_free(&mut values);
        }
    }
    start.elapsed().as_nanos() as f64 / (batches.len() * BATCH_KEYS) as f64
}

fn main() {
    let entries: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |n| n.parse().expect("ENTRIES is a number"));
    let passes: usize = std::env::args()
        .nth(2)
        .map_or(1, |n| n.parse().expect("PASSES is a number"));
    assert!(passes > 0, "PASSES is at least 1");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = CString::new(dir.path().to_str().expect("a UTF-8 path")).unwrap();
    let (session, table) = open_c(&path);
    let ids: Vec<u64> = (0..entries).collect();
    for chunk in ids.chunks(10_000) {
        let kinds = vec![CAIRN_UPDATE_INSERT; chunk.len()];
        let keys: Vec<u8> = chunk.iter().flat_map(|&i| key(i)).collect();
        let values: Vec<u8> = chunk.iter().flat_map(|&i| i.to_le_bytes()).collect();
        let lens = vec![8usize; chunk.len()];
        // SAFETY: every array holds `chunk.len()` items, the buffers their lengths' sums.
        let code = unsafe {
            let (k, v, l) = (keys.as_ptr(), values.as_ptr(), lens.as_ptr());
            cairn_updates(table, kinds.as_ptr(), k, l, v, l, chunk.len(), null_mut())
        };
        assert_eq!(code, 0);
    }
    let batches: Vec<Vec<u8>> = (0..BATCHES as u64)
        .map(|b| {
            let ids = (0..BATCH_KEYS as u64).map(|i| (b * 7919 + i * 104_729) % entries);
            ids.flat_map(key).collect()
        })
        .collect();
    println!(
        "{entries} entries; {BATCHES} batches of {BATCH_KEYS} random keys each way; \
         best of {passes} passes"
    );
    let c_first = best_c(table, &batches, passes);
    // SAFETY: handles made above, freed once.
    unsafe {
        cairn_table_free(table);
        cairn_session_close(session);
    }

    let session = cairn::Session::open(dir.path()).unwrap();
    let rust_table = session
        .table("bench", cairn::TableConfig::default())
        .unwrap();
    let mut rust = f64::INFINITY;
    for _ in 0..passes {
        let start = Instant::now();
        for batch in &batches {
            let keys: Vec<&[u8]> = batch.chunks(8).collect();
            let found = rust_table.lookups(&keys).unwrap();
            assert_eq!(found.len(), BATCH_KEYS);
        }
        let ns = start.elapsed().as_nanos() as f64 / (BATCHES * BATCH_KEYS) as f64;
        rust = rust.min(ns);
    }
    drop(rust_table);
    session.close();

    let (session, table) = open_c(&path);
    let c_again = best_c(table, &batches, passes);
    // SAFETY: handles made above, freed once.
    unsafe {
        cairn_table_free(table);
        cairn_session_close(session);
    }
    println!("Table::lookups: {rust:.0} ns/key");
    println!("cairn_lookups:  {c_first:.0} ns/key, then {c_again:.0} ns/key after reopening");
}

//! A snapshot whose run was rewritten (keys out of order, a span past the end of the file, an
//! index or filter that disagrees with the pages, or arbitrary byte patches) with forged
//! checksums: opening, looking up, iterating and verifying it give typed errors, never a panic;
//! verification reports every structural damage, and passes nothing that then fails to read.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn::fuzzing::hostile_snapshot(data);
});

//! The snapshot metadata decoder: any bytes give a value or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cairn::fuzzing::snapshot_metadata(data);
});

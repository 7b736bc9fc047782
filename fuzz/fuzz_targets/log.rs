//! The write-ahead log: its decoders on arbitrary bytes (segment header, record, catalog, batch
//! payload: typed errors, and whatever decodes re-encodes identically), and recovery of a real
//! log whose files the input patches (a prefix of the batches, each all or nothing, or a typed
//! error; never a panic).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cairn::fuzzing::log_decoders(data);
    cairn::fuzzing::log_recovery(data);
});

//! The records `cairn-ledger` stores (`docs/format/ledger.md`, "Stored records"): every decoder is
//! total and what it accepts survives re-encoding.
//!
//! The input goes whole to every decoder, through `cairn_ledger::fuzzing::decode_records`: the
//! configuration (format versions 1 and 2), the pending commit, the version record, the undo
//! record, the head (u64), a history node (hash), and an ordered table's stored link (as the
//! link and as the value a read returns). Nothing may panic; a value a decoder accepts must
//! re-encode to bytes that decode to the same value, and to the input itself except for a
//! configuration of format version 1 (written again as version 2). Anything else is a panic.
//!
//! Seeds: with `CAIRN_FUZZ_SEEDS=<dir>` in the environment, the target first writes one valid
//! encoding of each record there (`cairn_ledger::fuzzing::record_seeds`; `fuzz/run-all.sh` does
//! so for the corpus), checking that each is accepted.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use cairn_ledger::fuzzing::{decode_records, record_seeds};
use libfuzzer_sys::fuzz_target;

/// Each record's valid encoding, checked to be accepted.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let out: Vec<(String, Vec<u8>)> = (record_seeds().into_iter().enumerate())
        .map(|(i, input)| (format!("seed-record-{i}"), input))
        .collect();
    for (name, input) in &out {
        assert!(decode_records(input) > 0, "seed {name} is refused");
    }
    out
}

fuzz_target!(
    init: seeds::write_if_asked(seeds),
    |data: &[u8]| {
        decode_records(data);
    }
);

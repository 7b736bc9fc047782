//! What `cairn-raft` stores and receives (`docs/format/raft.md`): the input goes whole to the
//! entry, vote, log-id, applied-state and snapshot-metadata decoders and those of the records of
//! transactions across shards (`cairn_raft::format`), and, after its first
//! byte, to the JSON decoders of the two peer RPCs (append and vote requests) as a peer listener
//! receives them. Typed errors only; whatever a stored-format decoder accepts re-encodes to
//! bytes that decode to a value that encodes to the same bytes again. Seeds: the golden values
//! (`crates/cairn-raft/testdata/golden/raft-v1.txt`).
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use cairn_raft::format;
use cairn_raft::openraft::raft::{AppendEntriesRequest, VoteRequest};
use cairn_raft::TypeConfig;
use libfuzzer_sys::fuzz_target;

/// Each golden value, decoded from its hex line.
fn golden() -> Vec<(String, Vec<u8>)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/cairn-raft/testdata/golden/raft-v1.txt"
    );
    let text = std::fs::read_to_string(path).expect("the golden file");
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, hex)| {
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                .collect();
            (format!("golden-{name}"), bytes)
        })
        .collect()
}

fuzz_target!(
    init: seeds::write_if_asked(golden),
    |data: &[u8]| {
    if let Ok(e) = format::decode_entry(data) {
        let bytes = format::encode_entry(&e);
        let again = format::decode_entry(&bytes).expect("an encoded entry decodes");
        assert_eq!(format::encode_entry(&again), bytes);
    }
    if let Ok(v) = format::decode_vote(data) {
        let bytes = format::encode_vote(&v);
        assert_eq!(format::decode_vote(&bytes), Ok(v));
    }
    if let Ok(id) = format::decode_log_id(data) {
        let bytes = format::encode_log_id(&id);
        assert_eq!(format::decode_log_id(&bytes), Ok(id));
    }
    if let Ok(a) = format::decode_applied(data) {
        let bytes = format::encode_applied(&a);
        let again = format::decode_applied(&bytes).expect("an encoded applied state decodes");
        assert_eq!(format::encode_applied(&again), bytes);
    }
    if let Ok(p) = format::decode_prepared(data) {
        let bytes = format::encode_prepared(&p);
        assert_eq!(format::decode_prepared(&bytes), Ok(p));
    }
    if let Ok(d) = format::decode_decision(data) {
        assert_eq!(format::decode_decision(&format::encode_decision(d)), Ok(d));
    }
    if let Ok(ids) = format::decode_open(data) {
        assert_eq!(format::decode_open(&format::encode_open(&ids)), Ok(ids));
    }
    if let Ok(m) = format::decode_snapshot_meta(data) {
        let bytes = format::encode_snapshot_meta(&m);
        assert_eq!(format::decode_snapshot_meta(&bytes), Ok(m));
    }
    if let Some((_, body)) = data.split_first() {
        let _ = serde_json::from_slice::<AppendEntriesRequest<TypeConfig>>(body);
        let _ = serde_json::from_slice::<VoteRequest<TypeConfig>>(body);
    }
}
);

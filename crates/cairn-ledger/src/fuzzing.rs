//! Entry points for the fuzz target `ledger_records` in `fuzz/` (not a stable API): the
//! decoders of the records the ledger stores in its tables, run on arbitrary bytes.
//!
//! Owns: [`decode_records`] and its seeds, [`record_seeds`]. May call: `records` (every record's
//! encoder and decoder), `links` (an ordered table's stored value), `cairn_proof` (leaves,
//! roots, links). Must never touch: tables or files.
//!
//! A decoder must return a value or an error, never panic; a value it accepts must encode to
//! bytes it decodes to the same value, and, where the format is canonical, to the very bytes it
//! was decoded from. A failed check panics: that is a bug found.

use cairn_proof::{HashKind, Link};

use crate::links;
use crate::records::{
    decode_hash, decode_u64, samples, LedgerMeta, Pending, Samples, Undo, VersionRecord,
};

/// Runs every decoder of a stored record on `bytes`: the configuration, the pending commit, the
/// version record, the undo record, the head (u64), a history node (hash) and an ordered
/// table's stored link (as the link and as the value a read returns). Whenever one accepts,
/// checks that the value re-encodes to bytes that decode to the same value, and to `bytes`
/// themselves except for a configuration of format version 1 (written again as version 2,
/// every table plain). Returns how many decoders accepted `bytes`. Panics on a failed check.
pub fn decode_records(bytes: &[u8]) -> usize {
    let mut accepted = 0;
    if let Ok(meta) = LedgerMeta::decode(bytes) {
        accepted += 1;
        let encoded = meta.encode();
        let again = LedgerMeta::decode(&encoded).expect("a re-encoded configuration decodes");
        assert_eq!(again, meta, "a configuration changes through re-encoding");
        assert_eq!(meta.tables.len(), meta.ordered.len(), "a flag per table");
        if bytes[0] == 1 {
            assert!(
                meta.ordered.iter().all(|&o| !o),
                "a version-1 configuration has an ordered table"
            );
            assert_eq!(encoded[0], 2, "a configuration is written as version 2");
        } else {
            assert_eq!(encoded, bytes, "a configuration re-encodes to other bytes");
        }
    }
    if let Ok(pending) = Pending::decode(bytes) {
        accepted += 1;
        let encoded = pending.encode();
        assert_eq!(encoded, bytes, "a pending commit re-encodes to other bytes");
        let again = Pending::decode(&encoded).expect("a re-encoded pending commit decodes");
        assert_eq!(
            again, pending,
            "a pending commit changes through re-encoding"
        );
    }
    if let Ok(record) = VersionRecord::decode(bytes) {
        accepted += 1;
        let encoded = record.encode();
        assert_eq!(encoded, bytes, "a version record re-encodes to other bytes");
        let again = VersionRecord::decode(&encoded).expect("a re-encoded version record decodes");
        assert_eq!(
            again, record,
            "a version record changes through re-encoding"
        );
    }
    if let Ok(undo) = Undo::decode(bytes) {
        accepted += 1;
        assert!(
            undo.entries
                .windows(2)
                .all(|w| (w[0].0, &w[0].1) < (w[1].0, &w[1].1)),
            "an undo record's entries are not strictly sorted"
        );
        let encoded = undo.encode();
        assert_eq!(encoded, bytes, "an undo record re-encodes to other bytes");
        let again = Undo::decode(&encoded).expect("a re-encoded undo record decodes");
        assert_eq!(again, undo, "an undo record changes through re-encoding");
    }
    if let Ok(head) = decode_u64("head", bytes) {
        accepted += 1;
        assert_eq!(
            head.to_be_bytes(),
            bytes,
            "a head re-encodes to other bytes"
        );
    }
    if let Ok(hash) = decode_hash("history node", bytes) {
        accepted += 1;
        assert_eq!(hash, bytes, "a history node re-encodes to other bytes");
    }
    let value = links::value_of(b"key", bytes);
    match links::decode(b"key", bytes) {
        Ok(link) => {
            accepted += 1;
            let encoded = link.encode();
            assert_eq!(encoded, bytes, "a link re-encodes to other bytes");
            let again = links::decode(b"key", &encoded).expect("a re-encoded link decodes");
            assert_eq!(again, link, "a link changes through re-encoding");
            let expected = match link {
                Link::Head { .. } => None,
                Link::Entry { value, .. } => Some(value),
            };
            let value = value.expect("the value of a link that decodes");
            assert_eq!(value, expected, "a link's value is not the one it holds");
        }
        Err(_) => assert!(
            value.is_err(),
            "a value read from a link that does not decode"
        ),
    }
    accepted
}

/// One valid encoding of each stored record, every one accepted by [`decode_records`]: a
/// configuration (format version 2, one plain and one ordered table), the same configuration
/// in format version 1, a pending commit, a version record, an undo record, a head, a history
/// node, and an ordered table's head link and entry link.
pub fn record_seeds() -> Vec<Vec<u8>> {
    let Samples {
        meta,
        pending,
        record,
        undo,
    } = samples();
    let mut meta_v1 = vec![1u8, HashKind::Sha256.code(), 0, 2];
    for name in ["checking", "savings"] {
        meta_v1.push(name.len() as u8);
        meta_v1.extend_from_slice(name.as_bytes());
    }
    let head = Link::Head {
        next: Some(b"alice".to_vec()),
    };
    let entry = Link::Entry {
        value: b"50".to_vec(),
        next: Some(b"bob".to_vec()),
    };
    vec![
        meta.encode(),
        meta_v1,
        pending.encode(),
        record.encode(),
        undo.encode(),
        7u64.to_be_bytes().to_vec(),
        [5u8; 32].to_vec(),
        head.encode(),
        entry.encode(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_is_accepted_and_every_truncation_is_handled() {
        for (i, seed) in record_seeds().iter().enumerate() {
            assert!(decode_records(seed) >= 1, "seed {i} is refused");
            for cut in 0..seed.len() {
                decode_records(&seed[..cut]);
            }
        }
    }
}

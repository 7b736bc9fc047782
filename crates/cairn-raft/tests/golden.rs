//! The stored bytes of `docs/format/raft.md`, pinned: each value below encodes to the bytes in
//! `testdata/golden/raft-v1.txt` and decodes back from them. A change to any of them is a new
//! format version (with version 1 still read), never an edit of the file;
//! `CAIRN_UPDATE_GOLDEN=1` rewrites it when a value is added.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cairn_raft::format::{self, FormatError};
use cairn_raft::openraft::entry::RaftEntry;
use cairn_raft::openraft::vote::RaftLeaderId;
use cairn_raft::openraft::{EntryPayload, Membership, StoredMembership, Vote};
use cairn_raft::{Command, Expectation, Member, TypeConfig, Write};

type Entry = cairn_raft::openraft::alias::EntryOf<TypeConfig>;
type LogId = cairn_raft::openraft::alias::LogIdOf<TypeConfig>;

fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(
        cairn_raft::openraft::vote::leader_id_adv::CommittedLeaderId::new(term, node),
        index,
    )
}

fn membership() -> Membership<u64, Member> {
    let nodes: BTreeMap<u64, Member> = (1..=3)
        .map(|id| (id, Member::new(format!("127.0.0.1:700{id}"), "")))
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes).unwrap()
}

/// Members that name their client API as well (added after the first golden values: the
/// members above still encode as they did).
fn membership_with_api() -> Membership<u64, Member> {
    let nodes: BTreeMap<u64, Member> = (1..=3)
        .map(|id| {
            let api = format!("https://127.0.0.1:800{id}");
            (id, Member::new(format!("127.0.0.1:700{id}"), api))
        })
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes).unwrap()
}

/// Every pinned value, by name, encoded.
fn values() -> Vec<(&'static str, Vec<u8>)> {
    let command = Command::Write {
        expects: vec![Expectation {
            table: "checking".into(),
            key: b"alice".to_vec(),
            value: Some(b"50".to_vec()),
        }],
        writes: vec![
            Write {
                table: "checking".into(),
                key: b"alice".to_vec(),
                value: Some(b"40".to_vec()),
            },
            Write {
                table: "savings".into(),
                key: b"bob".to_vec(),
                value: None,
            },
        ],
        meta: b"transfer 10".to_vec(),
        prove: false,
    };
    let prepare = Command::Prepare {
        tx: "router-1-7".into(),
        primary: 0,
        shards: vec![0, 3],
        expects: vec![Expectation {
            table: "checking".into(),
            key: b"alice".to_vec(),
            value: Some(b"50".to_vec()),
        }],
        writes: vec![Write {
            table: "checking".into(),
            key: b"alice".to_vec(),
            value: Some(b"40".to_vec()),
        }],
        meta: b"transfer 10".to_vec(),
    };
    let prepared = format::PreparedTx {
        primary: 0,
        shards: vec![0, 3],
        held: vec![("checking".into(), b"alice".to_vec())],
        writes: vec![Write {
            table: "checking".into(),
            key: b"alice".to_vec(),
            value: Some(b"40".to_vec()),
        }],
        meta: b"transfer 10".to_vec(),
    };
    vec![
        (
            "entry-command",
            format::encode_entry(&Entry::new(log_id(3, 2, 7), EntryPayload::Normal(command))),
        ),
        (
            "entry-blank",
            format::encode_entry(&Entry::new(log_id(1, 1, 1), EntryPayload::Blank)),
        ),
        (
            "entry-membership",
            format::encode_entry(&Entry::new(
                log_id(1, 1, 2),
                EntryPayload::Membership(membership()),
            )),
        ),
        (
            "entry-membership-api",
            format::encode_entry(&Entry::new(
                log_id(1, 1, 3),
                EntryPayload::Membership(membership_with_api()),
            )),
        ),
        (
            "entry-prepare",
            format::encode_entry(&Entry::new(log_id(3, 2, 8), EntryPayload::Normal(prepare))),
        ),
        (
            "entry-commit",
            format::encode_entry(&Entry::new(
                log_id(3, 2, 9),
                EntryPayload::Normal(Command::Commit {
                    tx: "router-1-7".into(),
                }),
            )),
        ),
        (
            "entry-abort",
            format::encode_entry(&Entry::new(
                log_id(3, 2, 10),
                EntryPayload::Normal(Command::Abort {
                    tx: "router-1-8".into(),
                }),
            )),
        ),
        ("vote", format::encode_vote(&Vote::new(4, 1))),
        (
            "vote-committed",
            format::encode_vote(&Vote::new_committed(4, 1)),
        ),
        ("log-id", format::encode_log_id(&log_id(3, 2, 7))),
        (
            "applied",
            format::encode_applied(&(
                log_id(3, 2, 7),
                StoredMembership::new(Some(log_id(1, 1, 2)), membership()),
            )),
        ),
        ("tx-prepared", format::encode_prepared(&prepared)),
        (
            "tx-decision-commit",
            format::encode_decision(format::Decision::Commit),
        ),
        (
            "tx-decision-abort",
            format::encode_decision(format::Decision::Abort),
        ),
        (
            "tx-open",
            format::encode_open(&["router-1-7".into(), "router-2-1".into()]),
        ),
        (
            "snapshot-meta",
            format::encode_snapshot_meta(&cairn_raft::openraft::storage::SnapshotMeta {
                last_log_id: Some(log_id(3, 2, 7)),
                last_membership: StoredMembership::new(
                    Some(log_id(1, 1, 3)),
                    membership_with_api(),
                ),
            }),
        ),
    ]
}

fn golden_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden/raft-v1.txt")
}

#[test]
fn stored_bytes_match_the_golden_file() {
    let values = values();
    let text: String = values
        .iter()
        .map(|(name, bytes)| format!("{name} {}\n", hex(bytes)))
        .collect();
    let path = golden_path();
    if std::env::var_os("CAIRN_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        golden, text,
        "the stored bytes changed: that is a new format version"
    );
    // Each golden value decodes to a value that encodes to the same bytes.
    for (name, bytes) in &values {
        let again = match name.split('-').next().unwrap() {
            "entry" => format::encode_entry(&format::decode_entry(bytes).unwrap()),
            "vote" => format::encode_vote(&format::decode_vote(bytes).unwrap()),
            "log" => format::encode_log_id(&format::decode_log_id(bytes).unwrap()),
            "applied" => format::encode_applied(&format::decode_applied(bytes).unwrap()),
            "tx" if name.starts_with("tx-prepared") => {
                format::encode_prepared(&format::decode_prepared(bytes).unwrap())
            }
            "tx" if name.starts_with("tx-decision") => {
                format::encode_decision(format::decode_decision(bytes).unwrap())
            }
            "tx" => format::encode_open(&format::decode_open(bytes).unwrap()),
            "snapshot" => {
                format::encode_snapshot_meta(&format::decode_snapshot_meta(bytes).unwrap())
            }
            other => panic!("{other}"),
        };
        assert_eq!(&again, bytes, "{name}");
    }
}

#[test]
fn damaged_bytes_are_typed_errors() {
    assert!(matches!(
        format::decode_entry(&[]),
        Err(FormatError::Empty { .. })
    ));
    assert!(matches!(
        format::decode_vote(&[2, b'{', b'}']),
        Err(FormatError::Version { found: 2, .. })
    ));
    let entry = &values()[0].1;
    for cut in 1..entry.len() {
        assert!(matches!(
            format::decode_entry(&entry[..cut]),
            Err(FormatError::Json { .. })
        ));
    }
    // A vote is not an entry, nor a decision a prepared transaction.
    let vote = values().into_iter().find(|(n, _)| *n == "vote").unwrap().1;
    assert!(format::decode_entry(&vote).is_err());
    assert!(format::decode_prepared(&format::encode_decision(format::Decision::Commit)).is_err());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

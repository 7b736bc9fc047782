//! The audit, and what a client sees, when the stored data is rewritten by someone who also
//! fixes every checksum: a value in a table's run file, a version record, a history node; and
//! against digests a client published.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{LogOptions, SessionOptions, SyncPolicy, TableConfig};
use cairn_ledger::{AuditOptions, AuditProblem, Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::{verify_receipt, Claim, Digest, TableClaims};

const VALUE: &[u8] = b"value-of-carol-0042";
const FORGED: &[u8] = b"value-of-carol-9999";

fn options() -> SessionOptions {
    SessionOptions::default()
        .salt(Some(3))
        .log(Some(LogOptions::default().sync(SyncPolicy::Immediate)))
}

fn open(fs: &MemFs) -> Ledger {
    Ledger::open_with(
        Arc::new(fs.clone()),
        "/l",
        LedgerConfig::new(["accounts", "notes"])
            .table(TableConfig::default().write_buffer_entries(16)),
        options(),
    )
    .unwrap()
}

/// A ledger of 40 versions over two tables, checkpointed (so that the tables are in run files)
/// and closed; returns the file system and every digest it had.
fn build() -> (MemFs, Vec<Digest>) {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/l")).unwrap();
    let ledger = open(&fs);
    let mut digests = vec![Digest::EMPTY];
    for v in 0..40u32 {
        let mut batch = LedgerBatch::new();
        batch.insert("accounts", format!("user-{v:03}"), format!("balance-{v}"));
        if v == 7 {
            batch.insert("accounts", "carol", VALUE);
        }
        batch.insert("notes", format!("note-{}", v % 5), format!("{v}"));
        batch.meta(format!("block {v}"));
        digests.push(ledger.write(&batch).unwrap().unwrap().digest);
    }
    ledger.checkpoint().unwrap();
    ledger.close();
    (fs, digests)
}

/// Files under `dir` whose bytes contain `needle`.
fn files_holding(fs: &MemFs, dir: &str, needle: &[u8]) -> Vec<PathBuf> {
    fs.file_paths()
        .into_iter()
        .filter(|p| p.starts_with(dir))
        .filter(|p| {
            fs.file_bytes(p)
                .is_some_and(|b| b.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

fn replace_in(fs: &MemFs, path: &Path, from: &[u8], to: &[u8]) {
    let mut bytes = fs.file_bytes(path).unwrap();
    let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
    bytes[at..at + to.len()].copy_from_slice(to);
    fs.set_file_bytes(path, bytes);
}

#[test]
fn a_clean_ledger_audits_clean_against_every_digest_it_published() {
    let (fs, digests) = build();
    let ledger = open(&fs);
    let mut progress = 0;
    let report = ledger
        .audit(
            &AuditOptions::default().digests(digests.clone()),
            &mut |_| progress += 1,
        )
        .unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.versions, 40);
    assert_eq!(report.digest, ledger.digest());
    assert_eq!(report.digests_checked, digests.len());
    assert!(progress > 0);
}

/// Tamper (a): a value rewritten in a run file with every checksum fixed. The ledger opens
/// (nothing a checksum can see is wrong), but a client's receipt for the forged value fails,
/// and the audit names the table, the version and the key.
#[test]
fn a_value_rewritten_with_its_checksums_fixed_is_caught() {
    let (fs, _) = build();
    let files = files_holding(&fs, "/l/snapshots", VALUE);
    let keyops: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "keyops"))
        .collect();
    assert!(!keyops.is_empty(), "the value is in a run: {files:?}");
    for path in keyops {
        replace_in(&fs, path, VALUE, FORGED);
        let run: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        cairn::fuzzing::reseal_run(&fs, path.parent().unwrap(), run);
    }
    let ledger = open(&fs);
    // The forged value is what the table now answers...
    assert_eq!(
        ledger.get("accounts", "carol").unwrap().as_deref(),
        Some(FORGED)
    );
    // ...and no receipt vouches for it.
    let read = ledger.read(&[("accounts", &["carol"][..])]).unwrap();
    assert_eq!(read.values[0][0].as_deref(), Some(FORGED));
    let claims = [Claim::present(b"carol", FORGED)];
    let reads = [TableClaims {
        table: "accounts",
        claims: &claims,
    }];
    assert!(verify_receipt(&read.receipt, &reads, &read.digest).is_err());
    let report = ledger.audit(&AuditOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(report.first_bad_version, Some(40));
    match &report.problems[..] {
        [AuditProblem::TableRoot {
            table,
            version,
            keys,
            ..
        }] => {
            assert_eq!(table, "accounts");
            assert_eq!(*version, 40);
            assert_eq!(keys, &[b"carol".to_vec()]);
        }
        other => panic!("{other:?}"),
    }
}

/// A version record rewritten (its metadata, with every checksum fixed): the audit finds the
/// version, and the published digests after it disagree.
#[test]
fn a_history_record_rewritten_is_caught_against_published_digests() {
    let (fs, digests) = build();
    // Version 12's metadata is "block 11"; rewrite it in the history table's runs.
    let files = files_holding(&fs, "/l/snapshots", b"block 11");
    let runs: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "keyops"))
        .collect();
    assert!(!runs.is_empty(), "{files:?}");
    for path in runs {
        replace_in(&fs, path, b"block 11", b"block XX");
        let run: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        cairn::fuzzing::reseal_run(&fs, path.parent().unwrap(), run);
    }
    let ledger = open(&fs);
    let report = ledger
        .audit(&AuditOptions::default().digests(digests), &mut |_| {})
        .unwrap();
    assert_eq!(report.first_bad_version, Some(12), "{:?}", report.problems);
    assert!(report.problems.iter().any(
        |p| matches!(p, AuditProblem::Record { version: 12, detail } if detail.contains("metadata"))
    ));
}

/// Published digests the ledger cannot match: one beyond its newest version (a rollback) and
/// one from a fork.
#[test]
fn digests_from_a_rollback_or_a_fork_are_reported() {
    let (fs, digests) = build();
    let ledger = open(&fs);
    let beyond = Digest {
        size: 45,
        root: [1; 32],
    };
    let forked = Digest {
        size: 20,
        root: [2; 32],
    };
    let mut published = digests[..=20].to_vec();
    published[20] = forked;
    published.push(beyond);
    let report = ledger
        .audit(&AuditOptions::default().digests(published), &mut |_| {})
        .unwrap();
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(report.problems.contains(&AuditProblem::Digest {
        published: forked,
        stored: Some(digests[20]),
    }));
    assert!(report.problems.contains(&AuditProblem::Digest {
        published: beyond,
        stored: None,
    }));
    // Digests agree up to size 19: the difference is in version 20.
    assert_eq!(report.first_bad_version, Some(20));
}

/// An undo record rewritten with its checksums fixed: the window stops at the damage when the
/// ledger opens (the versions before it are pruned, never answered from forged data), and the
/// audit names the version it could not rebuild and the table.
#[test]
fn an_undo_record_rewritten_is_caught() {
    const BEFORE: &[u8] = b"dave-before-36";
    const FORGED_BEFORE: &[u8] = b"dave-BEFORE-36";
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/l")).unwrap();
    let open_kept = |fs: &MemFs| {
        Ledger::open_with(
            Arc::new(fs.clone()),
            "/l",
            LedgerConfig::new(["accounts", "notes"])
                .history(10)
                .table(TableConfig::default().write_buffer_entries(16)),
            options(),
        )
        .unwrap()
    };
    let ledger = open_kept(&fs);
    for v in 1..=40u32 {
        let mut batch = LedgerBatch::new();
        batch.insert("notes", format!("note-{}", v % 5), format!("{v}"));
        match v {
            20 => batch.insert("accounts", "dave", BEFORE),
            36 => batch.insert("accounts", "dave", "dave-after"),
            _ => batch.insert("accounts", format!("user-{v:03}"), "x"),
        };
        ledger.write(&batch).unwrap().unwrap();
    }
    let info = ledger.window().unwrap();
    assert_eq!((info.oldest, info.newest), (30, 40));
    assert_eq!(info.undo_versions, Some((31, 40)));
    ledger.checkpoint().unwrap();
    ledger.close();

    // Reopened as it is: the whole window is rebuilt, and audits clean.
    let ledger = open_kept(&fs);
    assert_eq!(ledger.window().unwrap().oldest, 30);
    let report = ledger.audit(&AuditOptions::default(), &mut |_| {}).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.versions_rebuilt, 10);
    let read = ledger.read_at(35, &[("accounts", &["dave"][..])]).unwrap();
    assert_eq!(read.values[0][0].as_deref(), Some(BEFORE));
    ledger.close();

    // The old value rewritten wherever it is stored: in the undo record of version 36 (and
    // in the table's runs, where the newer value shadows it).
    let files = files_holding(&fs, "/l/snapshots", BEFORE);
    assert!(!files.is_empty());
    for path in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "keyops"))
    {
        replace_in(&fs, path, BEFORE, FORGED_BEFORE);
        let run: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        cairn::fuzzing::reseal_run(&fs, path.parent().unwrap(), run);
    }
    let ledger = open_kept(&fs);
    assert_eq!(
        ledger.window().unwrap().oldest,
        36,
        "the window stops at the damage"
    );
    assert!(matches!(
        ledger.read_at(35, &[("accounts", &["dave"][..])]),
        Err(cairn_ledger::Error::VersionPruned {
            version: 35,
            oldest: 36
        })
    ));
    let report = ledger.audit(&AuditOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(report.versions_rebuilt, 4);
    assert_eq!(report.first_bad_version, Some(35), "{:?}", report.problems);
    assert!(
        matches!(&report.problems[..], [AuditProblem::Undo { version: 35, table: Some(t), .. }]
            if t == "accounts"),
        "{:?}",
        report.problems
    );
}

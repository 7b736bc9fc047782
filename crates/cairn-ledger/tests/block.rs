//! Block audits: an auditor holding a digest and the tables' roots checks the versions after it
//! from `Ledger::block` alone (`cairn_proof::block::verify_block`): plain and ordered tables,
//! inserts, updates and deletes of absent keys, grouped transactions, block after block; and
//! every forged block is refused: a change altered, dropped or added, a version dropped, a root
//! or leaf replaced. A delete of a present key is not checkable yet (the engine's prover does
//! not open siblings): the auditor says so (`BlockError::NeedsSiblings`), it does not accept.

use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::block::{verify_block, AuditState, Block, BlockError};

const NAMES: [&[u8]; 2] = [b"accounts", b"names"];

fn open(dir: &std::path::Path) -> Ledger {
    Ledger::open(
        dir,
        LedgerConfig::new(["accounts", "names"])
            .ordered(["names"])
            .history(1_000)
            .group(16),
    )
    .unwrap()
}

/// Version 1 loads; later versions update, insert and delete, some from concurrent clients.
fn build(ledger: &Ledger, rounds: u64) {
    let mut batch = LedgerBatch::new();
    for id in 0..64u64 {
        batch.insert("accounts", id.to_be_bytes(), 100u64.to_be_bytes());
        batch.insert("names", format!("n{id:03}"), "x");
    }
    ledger.write(&batch).unwrap();
    for round in 0..rounds {
        std::thread::scope(|s| {
            for client in 0..4u64 {
                s.spawn(move || {
                    let id = (round * 7 + client * 13) % 64;
                    ledger
                        .transact(b"", |tx| {
                            let v = tx.get("accounts", id.to_be_bytes())?.unwrap_or_default();
                            let n = u64::from_be_bytes(v.try_into().unwrap_or([0; 8]));
                            tx.insert("accounts", id.to_be_bytes(), (n + 1).to_be_bytes())?;
                            Ok(())
                        })
                        .unwrap();
                });
            }
        });
        let mut batch = LedgerBatch::new();
        batch.insert("names", format!("m{round:03}"), "new");
        batch.delete("accounts", (100 + round).to_be_bytes()); // absent: no change
        batch.insert(
            "accounts",
            (1_000 + round).to_be_bytes(),
            1u64.to_be_bytes(),
        );
        ledger.write(&batch).unwrap();
    }
}

#[test]
fn an_auditor_checks_block_after_block_from_the_blocks_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    build(&ledger, 5);
    let mut state = ledger.audit_state(1).unwrap();
    let first = ledger.version();
    let block = ledger.block(1, first).unwrap();
    state = verify_block(&NAMES, &state, &block).unwrap();
    assert_eq!(state, ledger.audit_state(first).unwrap());
    build_more(&ledger);
    let block = ledger.block(first, ledger.version()).unwrap();
    state = verify_block(&NAMES, &state, &block).unwrap();
    assert_eq!(state.digest, ledger.digest());
    // An empty block.
    let empty = ledger.block(ledger.version(), ledger.version()).unwrap();
    assert_eq!(verify_block(&NAMES, &state, &empty).unwrap(), state);
}

fn build_more(ledger: &Ledger) {
    let mut batch = LedgerBatch::new();
    batch.insert("names", "zz", "last");
    batch.insert("accounts", 5u64.to_be_bytes(), 7u64.to_be_bytes());
    ledger.write(&batch).unwrap();
}

fn refused(state: &AuditState, block: &Block) -> BlockError {
    verify_block(&NAMES, state, block).expect_err("a forged block")
}

#[test]
fn forged_blocks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    build(&ledger, 4);
    let state = ledger.audit_state(1).unwrap();
    let block = ledger.block(1, ledger.version()).unwrap();
    verify_block(&NAMES, &state, &block).unwrap();
    let with_changes = block
        .versions
        .iter()
        .position(|v| v.changes.iter().any(|c| c.writes.len() > 1))
        .unwrap();

    // A change's value altered.
    let mut forged = block.clone();
    let w = &mut forged.versions[with_changes].changes[0].writes[0];
    w.1 = Some(b"forged".to_vec());
    assert!(matches!(refused(&state, &forged), BlockError::Root { .. }));
    // A change dropped.
    let mut forged = block.clone();
    forged.versions[with_changes].changes[0].writes.pop();
    assert!(matches!(refused(&state, &forged), BlockError::Root { .. }));
    // A change added (a key the proof does not cover, or one it shows absent).
    let mut forged = block.clone();
    forged.versions[with_changes].changes[0]
        .writes
        .push((b"\xffextra".to_vec(), Some(b"v".to_vec())));
    assert!(verify_block(&NAMES, &state, &forged).is_err());
    // A table's changes dropped whole.
    let mut forged = block.clone();
    forged.versions[with_changes].changes.remove(0);
    assert!(verify_block(&NAMES, &state, &forged).is_err());
    // A version dropped.
    let mut forged = block.clone();
    forged.versions.remove(1);
    assert_eq!(refused(&state, &forged), BlockError::Versions);
    // A recorded root replaced.
    let mut forged = block.clone();
    forged.versions[with_changes].roots[0] = forged.versions[0].roots[0];
    assert!(verify_block(&NAMES, &state, &forged).is_err());
    // A leaf's ledger root replaced.
    let mut forged = block.clone();
    forged.versions[2].leaf.ledger_root = [7; 32];
    assert!(verify_block(&NAMES, &state, &forged).is_err());
    // Another digest.
    let mut forged = block.clone();
    forged.digest.root = [9; 32];
    assert!(verify_block(&NAMES, &state, &forged).is_err());
    // The auditor's own roots wrong: the first change does not apply.
    let mut wrong = state.clone();
    wrong.roots.swap(0, 1);
    assert!(verify_block(&NAMES, &wrong, &block).is_err());
    // From a version before the window's undo records, or from 0.
    assert!(ledger.block(0, 2).is_err());
}

#[test]
fn a_block_deleting_a_present_key_is_not_checkable_yet() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    build(&ledger, 1);
    let from = ledger.version();
    let state = ledger.audit_state(from).unwrap();
    ledger
        .write(LedgerBatch::new().delete("accounts", 3u64.to_be_bytes()))
        .unwrap();
    let block = ledger.block(from, ledger.version()).unwrap();
    assert!(matches!(
        refused(&state, &block),
        BlockError::NeedsSiblings { table: 0, .. }
    ));
}

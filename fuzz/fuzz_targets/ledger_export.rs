//! A ledger export stream (`docs/format/ledger-export.md`) from anyone: `check_export` and
//! `Ledger::import_with` (into a fresh directory of an in-memory file system) answer every input
//! with a value or a typed error, never a panic; and a stream `check_export` refuses is never
//! imported. Seeds: the golden stream (`crates/cairn-ledger/testdata/golden/export-v1.bin`).
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{LogOptions, SessionOptions, SyncPolicy};
use cairn_ledger::{check_export, ImportChecks, Ledger, LedgerConfig};
use libfuzzer_sys::fuzz_target;

fn golden() -> Vec<(String, Vec<u8>)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/cairn-ledger/testdata/golden/export-v1.bin"
    );
    vec![("golden-export-v1".into(), std::fs::read(path).expect("the golden stream"))]
}

fuzz_target!(
    init: seeds::write_if_asked(golden),
    |data: &[u8]| {
    let checked = check_export(&mut &data[..]);
    let fs = MemFs::new();
    fs.create_dir_all(std::path::Path::new("/l")).expect("a directory");
    let options = SessionOptions::default()
        .salt(Some(1))
        .log(Some(LogOptions::default().sync(SyncPolicy::Immediate)));
    let imported = Ledger::import_with(
        Arc::new(fs),
        "/l",
        LedgerConfig::default(),
        options,
        &mut &data[..],
        &ImportChecks::default(),
    );
    if let Ok((ledger, summary)) = imported {
        assert!(checked.is_ok(), "imported a stream the check refuses");
        assert_eq!(ledger.digest(), summary.digest);
    }
}
);

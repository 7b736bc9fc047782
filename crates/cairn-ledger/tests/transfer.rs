//! A ledger exported as a stream and imported elsewhere: the copy holds the same versions,
//! digest, values, kept versions and ordered chains, and goes on committing the same roots;
//! streams that are damaged, cut short, rewritten with a fixed checksum, or of another history
//! are refused, never imported and never a panic.

use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{LogOptions, SessionOptions, SyncPolicy, TableConfig};
use cairn_ledger::{check_export, Error, ImportChecks, Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::Digest;
use sha2::{Digest as _, Sha256};

fn options() -> SessionOptions {
    SessionOptions::default()
        .salt(Some(5))
        .log(Some(LogOptions::default().sync(SyncPolicy::Immediate)))
}

fn config() -> LedgerConfig {
    LedgerConfig::new(["accounts", "names"])
        .ordered(["names"])
        .history(3)
        .table(TableConfig::default().write_buffer_entries(8))
}

/// A ledger at `/src` of `versions` versions (inserts, updates and deletes over both tables),
/// and every digest it had.
fn build(fs: &MemFs, dir: &str, versions: u32, salt: u32) -> (Ledger, Vec<Digest>) {
    fs.create_dir_all(Path::new(dir)).unwrap();
    let ledger = Ledger::open_with(Arc::new(fs.clone()), dir, config(), options()).unwrap();
    let mut digests = vec![Digest::EMPTY];
    for v in 0..versions {
        let mut batch = LedgerBatch::new();
        for k in 0..5 {
            let key = format!("acct-{:03}", (v * 7 + k * 13 + salt) % 60);
            if (v + k) % 6 == 5 {
                batch.delete("accounts", &key);
            } else {
                batch.insert("accounts", &key, format!("{v}-{k}-{salt}"));
            }
        }
        batch.insert(
            "names",
            format!("n{:02}", (v * 3) % 25),
            format!("name {v}"),
        );
        if v % 4 == 3 {
            batch.delete("names", format!("n{:02}", (v * 5) % 25));
        }
        let c = ledger.write(&batch).unwrap().unwrap();
        c.durability.wait().unwrap();
        digests.push(c.digest);
    }
    (ledger, digests)
}

fn export(ledger: &Ledger) -> Vec<u8> {
    let mut out = Vec::new();
    let summary = ledger.export_view().unwrap().write_to(&mut out).unwrap();
    assert_eq!(summary.bytes, out.len() as u64);
    assert_eq!(summary.digest, ledger.digest());
    out
}

fn import(fs: &MemFs, dir: &str, stream: &[u8], checks: &ImportChecks) -> Result<Ledger, Error> {
    let mut input = stream;
    Ledger::import_with(
        Arc::new(fs.clone()),
        dir,
        config(),
        options(),
        &mut input,
        checks,
    )
    .map(|(ledger, _)| ledger)
}

#[test]
fn an_imported_ledger_is_the_ledger_exported() {
    let fs = MemFs::new();
    let (src, digests) = build(&fs, "/src", 40, 0);
    let stream = export(&src);
    let checked = check_export(&mut &stream[..]).unwrap();
    assert_eq!(checked.version, 40);
    assert_eq!(checked.digest, src.digest());

    // Trusting some earlier digests of the same history.
    let checks = ImportChecks::trusting([digests[1], digests[17], digests[39]]);
    let copy = import(&fs, "/copy", &stream, &checks).unwrap();
    assert_eq!(copy.version(), 40);
    assert_eq!(copy.digest(), src.digest());
    for v in 37..=40 {
        assert_eq!(copy.version_info(v).unwrap(), src.version_info(v).unwrap());
    }
    let keys: Vec<String> = (0..60).map(|k| format!("acct-{k:03}")).collect();
    let a = src.read_at(38, &[("accounts", &keys[..])]).unwrap();
    let b = copy.read_at(38, &[("accounts", &keys[..])]).unwrap();
    assert_eq!(a.values, b.values, "a kept version reads the same");
    let ra = src.read_range("names", "n00", "n99").unwrap();
    let rb = copy.read_range("names", "n00", "n99").unwrap();
    assert_eq!(ra.answer, rb.answer, "the ordered chain is the same");

    // Both go on alike.
    for ledger in [&src, &copy] {
        let mut batch = LedgerBatch::new();
        batch
            .insert("accounts", "acct-999", "x")
            .delete("names", "n03");
        ledger.write(&batch).unwrap();
    }
    assert_eq!(copy.digest(), src.digest());
    assert!(copy
        .audit(&Default::default(), &mut |_| {})
        .unwrap()
        .is_clean());

    // And the copy survives a restart.
    copy.close();
    drop(copy);
    let reopened = Ledger::open_with(Arc::new(fs.clone()), "/copy", config(), options()).unwrap();
    assert_eq!(reopened.digest(), src.digest());
}

#[test]
fn an_empty_ledger_travels_too() {
    let fs = MemFs::new();
    let (src, _) = build(&fs, "/src", 0, 0);
    let stream = export(&src);
    let copy = import(&fs, "/copy", &stream, &ImportChecks::default()).unwrap();
    assert_eq!(copy.version(), 0);
    assert_eq!(copy.digest(), Digest::EMPTY);
}

#[test]
fn a_damaged_or_short_stream_is_refused() {
    let fs = MemFs::new();
    let (src, _) = build(&fs, "/src", 12, 0);
    let stream = export(&src);
    let step = (stream.len() / 150).max(1);
    for (n, at) in (0..stream.len()).step_by(step).enumerate() {
        let mut bad = stream.clone();
        bad[at] ^= 0x20;
        assert!(
            check_export(&mut &bad[..]).is_err(),
            "flip at {at} passed the check"
        );
        let dir = format!("/flip{n}");
        assert!(
            import(&fs, &dir, &bad, &ImportChecks::default()).is_err(),
            "flip at {at} was imported"
        );
        let short = &stream[..at];
        assert!(check_export(&mut &short[..]).is_err(), "cut at {at} passed");
        let dir = format!("/cut{n}");
        assert!(import(&fs, &dir, short, &ImportChecks::default()).is_err());
    }
    let mut longer = stream.clone();
    longer.push(0);
    assert!(matches!(
        check_export(&mut &longer[..]),
        Err(Error::BadExport { .. })
    ));
}

/// The frames of a stream (tag, body), and the stream made again from frames with its
/// checksum fixed: what someone rewriting a stream can do.
fn frames(stream: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = &stream[8..];
    while !rest.is_empty() {
        let tag = rest[0];
        let len = u32::from_le_bytes(rest[1..5].try_into().unwrap()) as usize;
        out.push((tag, rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    out
}

fn reframe(magic: &[u8], frames: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = magic.to_vec();
    let mut entries = 0u64;
    for (tag, body) in frames.iter().filter(|(t, _)| *t != 4) {
        if *tag == 3 {
            let mut rest = &body[..];
            while !rest.is_empty() {
                for _ in 0..2 {
                    let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                    rest = &rest[4 + len..];
                }
                entries += 1;
            }
        }
        out.push(*tag);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
    }
    let sum = Sha256::digest(&out);
    out.push(4);
    out.extend_from_slice(&40u32.to_le_bytes());
    out.extend_from_slice(&entries.to_le_bytes());
    out.extend_from_slice(&sum);
    out
}

/// Replaces the first occurrence of `from` in any entries frame by `to` (same length).
fn rewrite(frames: &mut [(u8, Vec<u8>)], from: &[u8], to: &[u8]) {
    for (tag, body) in frames.iter_mut().filter(|(t, _)| *t == 3) {
        if let Some(at) = body.windows(from.len()).position(|w| w == from) {
            body[at..at + to.len()].copy_from_slice(to);
            let _ = tag;
            return;
        }
    }
    panic!("{:?} not in the stream", String::from_utf8_lossy(from));
}

#[test]
fn a_rewritten_stream_with_its_checksum_fixed_is_refused() {
    let fs = MemFs::new();
    let (src, _) = build(&fs, "/src", 30, 0);
    let stream = export(&src);
    let magic = &stream[..8];
    assert_eq!(
        reframe(magic, &frames(&stream)),
        stream,
        "the test's framing is the stream's"
    );
    let value = src
        .get("accounts", "acct-016")
        .unwrap()
        .expect("a live account");
    let mut forged_value = value.clone();
    forged_value[0] ^= 1;

    // A table's value changed: its root no longer is the one the history commits to.
    let mut f = frames(&stream);
    rewrite(&mut f, &value, &forged_value);
    let err = import(
        &fs,
        "/forged-value",
        &reframe(magic, &f),
        &ImportChecks::default(),
    );
    assert!(err.is_err(), "a forged value was imported");

    // The header's digest changed.
    let mut f = frames(&stream);
    f[0].1[8] ^= 1;
    let err = import(
        &fs,
        "/forged-header",
        &reframe(magic, &f),
        &ImportChecks::default(),
    );
    assert!(matches!(err, Err(Error::BadExport { .. })), "{err:?}");

    // A table dropped whole.
    let mut f = frames(&stream);
    let at = f
        .iter()
        .position(|(t, b)| *t == 2 && b == b"names")
        .unwrap();
    f.remove(at);
    while f.get(at).is_some_and(|(t, _)| *t == 3) {
        f.remove(at);
    }
    let err = import(
        &fs,
        "/dropped",
        &reframe(magic, &f),
        &ImportChecks::default(),
    );
    assert!(err.is_err(), "a stream without a table was imported");
}

#[test]
fn a_stream_of_another_history_is_refused_by_a_trusted_digest() {
    let fs = MemFs::new();
    let (mine, my_digests) = build(&fs, "/mine", 20, 0);
    let (theirs, _) = build(&fs, "/theirs", 25, 1);
    let stream = export(&theirs);
    // Sound on its own...
    import(&fs, "/plain", &stream, &ImportChecks::default()).unwrap();
    // ...but not an extension of the history this node had.
    let checks = ImportChecks::trusting([my_digests[20]]);
    let err = import(&fs, "/forked", &stream, &checks);
    assert!(matches!(err, Err(Error::BadExport { .. })), "{err:?}");
    // A digest of the same history passes.
    let (_, same) = build(&fs, "/same", 20, 1);
    import(
        &fs,
        "/extends",
        &stream,
        &ImportChecks::trusting([same[20]]),
    )
    .unwrap();
    drop(mine);
}

#[test]
fn an_import_needs_an_empty_directory() {
    let fs = MemFs::new();
    let (src, _) = build(&fs, "/src", 3, 0);
    let stream = export(&src);
    let err = import(&fs, "/src", &stream, &ImportChecks::default());
    assert!(matches!(err, Err(Error::InvalidConfig(_))), "{err:?}");
}

fn golden_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden/export-v1.bin")
}

/// The stream of a small fixed ledger, pinned byte for byte (`docs/format/ledger-export.md`):
/// a change to the format is a new version (with version 1 still read), never an edit of the
/// file; `CAIRN_UPDATE_GOLDEN=1` writes it when it is missing.
#[test]
fn the_export_format_is_pinned_by_a_golden_stream() {
    let fs = MemFs::new();
    let (src, _) = build(&fs, "/src", 3, 0);
    let stream = export(&src);
    let path = golden_path();
    if std::env::var_os("CAIRN_UPDATE_GOLDEN").is_some() && !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &stream).unwrap();
    }
    let golden = std::fs::read(&path).expect("the golden stream (CAIRN_UPDATE_GOLDEN=1 makes it)");
    assert_eq!(stream, golden, "the export of the golden ledger changed");
    let copy = import(&fs, "/golden", &golden, &ImportChecks::default()).unwrap();
    assert_eq!(copy.digest(), src.digest());
}

//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a stable API).
//!
//! Each function runs one decoder on arbitrary bytes and, when it accepts them, exercises the
//! decoded value; it must never panic. Returns whether the bytes were accepted.

/// The run checksums file decoder.
pub fn run_checksums(bytes: &[u8]) -> bool {
    match crate::run::RunChecksums::decode(bytes) {
        Ok(sums) => {
            assert_eq!(sums.encode(), bytes, "accepted bytes must be canonical");
            true
        }
        Err(_) => false,
    }
}

/// The session metadata decoder.
pub fn session_metadata(bytes: &[u8]) -> bool {
    crate::session_core::decode_metadata(bytes).is_ok()
}

/// The snapshot metadata decoder, on `bytes` as they are and on `bytes` framed as a metadata
/// body (magic, version and a valid checksum added), so the fuzzer reaches the body parser.
pub fn snapshot_metadata(bytes: &[u8]) -> bool {
    use crate::snapshot::format::{MAGIC, VERSION};
    let mut framed = MAGIC.to_vec();
    framed.extend_from_slice(&VERSION.to_le_bytes());
    framed.extend_from_slice(bytes);
    let crc = crc32c::crc32c(&framed);
    framed.extend_from_slice(&crc.to_le_bytes());
    snapshot_metadata_exact(bytes) | snapshot_metadata_exact(&framed)
}

fn snapshot_metadata_exact(bytes: &[u8]) -> bool {
    match crate::snapshot::SnapshotMeta::decode(bytes) {
        Ok(meta) => {
            let _ = meta.run_levels();
            assert_eq!(
                meta.encode(),
                bytes,
                "accepted bytes must re-encode identically"
            );
            true
        }
        Err(_) => false,
    }
}

/// What [`hostile_snapshot`] did and saw.
#[derive(Debug)]
pub struct HostileOutcome {
    /// The damage is one that must be reported (keys out of order, a span past the end of the
    /// file, an index or filter that disagrees with the pages); `false` for arbitrary byte
    /// patches, which may happen to leave a valid (if different) snapshot.
    pub must_be_damaged: bool,
    /// Whether `verify_snapshot` reported any problem.
    pub reported: bool,
    /// Whether the snapshot opened and every read of it succeeded.
    pub read_ok: bool,
}

/// Builds a small snapshot on a simulated file system, rewrites one of its runs as `input`
/// directs *with consistent checksums* (the run's checksums file and the snapshot metadata
/// recomputed), then opens it, looks keys up, iterates it, and verifies it in a read-only
/// session. Panics (a bug) if anything panics, if verification passes a damage that must be
/// reported, or if it passes a snapshot that then fails to read.
///
/// `input`: byte 0 picks the table (index kind, authenticated or not); byte 1 the run; byte 2
/// the damage: 0 swaps two keys of a page, 1 makes a span claim to run past the end of the
/// file, 2 replaces the index with one of other keys, 3 empties the filter, anything else
/// applies the rest of `input` as patches `(file, offset: u16, xor)` to the run's files.
pub fn hostile_snapshot(input: &[u8]) -> HostileOutcome {
    use std::path::Path;
    use std::sync::Arc;

    use crate::fs::{FileSystem, MemFs};
    use crate::page::{PageView, PAGE_BYTES};
    use crate::run::{run_file_path, RunFile};
    use crate::{AuthConfig, IndexType, Session, SessionOptions, TableConfig, Update};

    let byte = |i: usize| input.get(i).copied().unwrap_or(0);
    let fs = MemFs::new();
    let root = Path::new("/s");
    fs.create_dir_all(root).expect("a new directory");
    // Snapshots of ephemeral tables: no log (nor its syncer thread) per input.
    let options = SessionOptions {
        salt: Some(7),
        log: None,
        ..SessionOptions::default()
    };
    let config = TableConfig {
        write_buffer_entries: 16,
        merge_batch_size: 1,
        index: if byte(0) & 1 == 0 {
            IndexType::Compact
        } else {
            IndexType::Ordinary
        },
        auth: (byte(0) & 2 != 0).then(AuthConfig::default),
        // Runs cut into parts of 3 entries: snapshots of several parts per run (version 3).
        part_entries: (byte(0) & 4 != 0).then_some(3),
        ..TableConfig::default()
    };
    {
        let session =
            Session::open_with(Arc::new(fs.clone()), root, options.clone()).expect("open");
        let table = session.new_table(config).expect("table");
        for i in 0u32..150 {
            let key = format!("key{:05}", i * 37 % 1000);
            let value = vec![i as u8; (i as usize * 13) % 40];
            let update = match i % 11 {
                0 => Update::Delete,
                3 => Update::InsertWithBlob(&value, b"a blob"),
                5 => Update::Upsert(&value),
                _ => Update::Insert(&value),
            };
            table.updates(&[(key.as_bytes(), update)]).expect("update");
            if i % 50 == 7 {
                let long = vec![7u8; 2 * PAGE_BYTES + 100];
                table.insert(format!("long{i:03}"), &long).expect("insert");
            }
        }
        table.save_snapshot("s", "fuzz").expect("save");
    }
    let dir = root.join("snapshots").join("s");
    let meta = crate::snapshot::read_meta(&fs, &dir).expect("metadata");
    let run = byte(1) as u64 % meta.run_count as u64;
    let path = |file| run_file_path(&dir, run, file);
    let read = |file| fs.file_bytes(&path(file)).expect("a run file");
    let mut keyops = read(RunFile::KeyOps);
    // Every span: (first page, pages, first key, last key, entries).
    let mut spans = Vec::new();
    let mut page = 0;
    while page * PAGE_BYTES < keyops.len() {
        let view = PageView::new(&keyops[page * PAGE_BYTES..]).expect("a page the engine wrote");
        let pages = view.span_pages() as usize;
        let first = view.first_key().expect("a key").to_vec();
        let last = view.last_key().expect("a key").to_vec();
        spans.push((page, pages, first, last, view.len()));
        page += pages;
    }
    let mut must_be_damaged = false;
    match byte(2) {
        0 => {
            // Two keys of one page swapped (all keys of this table have the same length).
            if let Some(&(page, _, _, _, _)) =
                spans.iter().find(|s| s.4 >= 2 && s.2.len() == s.3.len())
            {
                let view = PageView::new(&keyops[page * PAGE_BYTES..]).expect("a page");
                let (k0, k1) = (
                    view.key(0).expect("key").to_vec(),
                    view.key(1).expect("key").to_vec(),
                );
                if k0.len() == k1.len() {
                    let base = page * PAGE_BYTES;
                    let at = |k: &[u8]| {
                        let p = &keyops[base..base + PAGE_BYTES];
                        p.windows(k.len())
                            .position(|w| w == k)
                            .expect("the key is on its page")
                    };
                    let (a, b) = (at(&k0), at(&k1));
                    keyops[base + a..base + a + k0.len()].copy_from_slice(&k1);
                    keyops[base + b..base + b + k1.len()].copy_from_slice(&k0);
                    must_be_damaged = true;
                }
            }
        }
        1 => {
            // The last span's values claim to end far past the end of the file.
            let &(page, _, _, _, _) = spans.last().expect("a run has a span");
            keyops[page * PAGE_BYTES + 4..page * PAGE_BYTES + 8]
                .copy_from_slice(&(u32::MAX - 5 * PAGE_BYTES as u32).to_le_bytes());
            must_be_damaged = true;
        }
        2 => {
            // An index of other keys (every key prefixed): it sends lookups to the wrong pages.
            if spans.len() >= 2 {
                let kind = crate::index::Index::decode(&read(RunFile::Index))
                    .expect("index")
                    .kind();
                let mut builder = crate::index::IndexBuilder::new(kind);
                let prefixed = |k: &[u8]| [&[0xffu8; 9][..], k].concat();
                for (_, pages, first, last, _) in &spans {
                    builder
                        .push_span(&prefixed(first), &prefixed(last), *pages as u64)
                        .expect("spans in order");
                }
                let entries = spans.iter().map(|s| s.4 as u64).sum();
                let index = builder.finish(entries).encode();
                fs.set_file_bytes(&path(RunFile::Index), index);
                must_be_damaged = true;
            }
        }
        3 => {
            // A filter with no bit set: it rules out every key of the run.
            let mut filter = read(RunFile::Filter);
            filter[40..].iter_mut().for_each(|b| *b = 0);
            fs.set_file_bytes(&path(RunFile::Filter), filter);
            must_be_damaged = true;
        }
        _ => {
            let files = [
                RunFile::KeyOps,
                RunFile::Blobs,
                RunFile::Filter,
                RunFile::Index,
            ];
            let mut other: Vec<Vec<u8>> = files[1..].iter().map(|&f| read(f)).collect();
            for patch in input[3.min(input.len())..].chunks_exact(4) {
                let offset = u16::from_le_bytes([patch[1], patch[2]]) as usize;
                let bytes = match patch[0] % 4 {
                    0 => &mut keyops,
                    i => &mut other[i as usize - 1],
                };
                let len = bytes.len().max(1);
                if let Some(b) = bytes.get_mut(offset % len) {
                    *b ^= patch[3];
                }
            }
            for (file, bytes) in files[1..].iter().zip(other) {
                fs.set_file_bytes(&path(*file), bytes);
            }
        }
    }
    fs.set_file_bytes(&path(RunFile::KeyOps), keyops);
    reseal_run(&fs, &dir, run);

    // Open it as a table, look up and iterate: typed errors, never a panic.
    let read_ok = (|| -> crate::Result<()> {
        let session = Session::open_with(Arc::new(fs.clone()), root, options.clone())?;
        let table = session.open_snapshot("s", "fuzz", Default::default())?;
        let keys: Vec<String> = (0..1000).step_by(7).map(|i| format!("key{i:05}")).collect();
        for result in table.lookups(&keys)? {
            if let Some(blob) = result.blob() {
                table.retrieve_blob(blob)?;
            }
        }
        for entry in table.cursor()? {
            entry?;
        }
        for entry in table.range("key00300".."key00600")? {
            entry?;
        }
        if table.config().auth.is_some() {
            table.root()?;
            table.prove(&keys[..5])?;
        }
        Ok(())
    })()
    .is_ok();

    let reader = Session::open_with(
        Arc::new(fs.clone()),
        root,
        SessionOptions {
            read_only: true,
            ..options
        },
    )
    .expect("a read-only session of a sound session directory");
    let report = reader
        .verify_snapshot("s", Default::default(), &mut |_| {})
        .expect("verification runs");
    let reported = !report.is_sound();
    assert!(
        reported || !must_be_damaged,
        "verify passed a damaged snapshot (damage {}): {report:?}",
        byte(2)
    );
    assert!(
        reported || read_ok,
        "verify passed a snapshot that then failed to read: {report:?}"
    );
    HostileOutcome {
        must_be_damaged,
        reported,
        read_ok,
    }
}

/// Rewrites the checksums file of run `run` of the snapshot in `dir` to match its files as they
/// are, and the snapshot's metadata to match that checksums file: what a forger does so that
/// damage passes every CRC.
pub fn reseal_run(fs: &dyn crate::fs::FileSystem, dir: &std::path::Path, run: u64) {
    use crate::run::{run_file_path, RunChecksums, RunFile};
    let read = |file| crate::fs::read_all(fs, &run_file_path(dir, run, file)).expect("a run file");
    let sums = RunChecksums::of_files(
        &read(RunFile::KeyOps),
        &read(RunFile::Blobs),
        &read(RunFile::Filter),
        &read(RunFile::Index),
    );
    let encoded = sums.encode();
    let crc = RunChecksums::pin(&encoded);
    crate::fs::write_atomic(fs, &run_file_path(dir, run, RunFile::Checksums), &encoded)
        .expect("rewrite the checksums file");
    let mut meta = crate::snapshot::read_meta(fs, dir).expect("metadata");
    meta.run_sums[run as usize] = crc;
    crate::fs::write_atomic(fs, &dir.join("metadata"), &meta.encode()).expect("rewrite metadata");
}

/// The log's decoders on arbitrary bytes: segment header, record (at every offset, with the
/// chain values the bytes give), catalog and the payloads (batch, commit, dirty keys). Accepted values re-encode
/// identically.
pub fn log_decoders(bytes: &[u8]) -> bool {
    let mut accepted = false;
    if let Ok(header) = crate::wal::SegmentHeader::decode(bytes) {
        assert_eq!(
            &header.encode()[..],
            &bytes[..crate::wal::SEGMENT_HEADER_BYTES]
        );
        accepted = true;
    }
    if bytes.len() >= crate::wal::RECORD_HEADER_BYTES {
        let seq = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let prev = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
        if let Some((record, len)) = crate::wal::decode_record(bytes, seq, prev) {
            let mut again = Vec::new();
            crate::wal::encode_record(&mut again, seq, prev, &record.payload);
            assert_eq!(again, &bytes[..len]);
            accepted = true;
        }
    }
    if let Ok(catalog) = crate::durable::Catalog::decode(bytes) {
        assert_eq!(catalog.encode(), bytes);
        accepted = true;
    }
    if let Ok(parts) = crate::durable::decode_batch(bytes) {
        let owned: Vec<Vec<(&[u8], crate::Update<'_>)>> = parts
            .iter()
            .map(|(_, u)| u.iter().map(|(k, u)| (&k[..], u.as_update())).collect())
            .collect();
        type Part<'a> = (u32, &'a [(&'a [u8], crate::Update<'a>)]);
        let borrowed: Vec<Part<'_>> = parts
            .iter()
            .zip(&owned)
            .map(|((id, _), u)| (*id, &u[..]))
            .collect();
        assert_eq!(crate::durable::encode_batch(&borrowed), bytes);
        accepted = true;
    }
    if let Ok(commit) = crate::durable::CommitRecord::decode(bytes) {
        assert_eq!(commit.encode(), bytes);
        accepted = true;
    }
    if let Ok((id, keys)) = crate::durable::decode_dirty(bytes) {
        assert_eq!(crate::durable::encode_dirty(id, &keys), bytes);
        accepted = true;
    }
    // The dispatcher accepts exactly what one of the kinds' decoders accepts.
    let _ = crate::durable::decode_payload(bytes);
    accepted
}

/// Recovery of a log whose files are made of `bytes`: a real log of a few batches (two durable
/// tables, small segments) is written, then the input patches its segments and catalog (each
/// patch `(file, offset: u16, xor)`, the file picked among the log's files), and the session is
/// opened with each recovery mode: it opens with tables holding a prefix of the batches, or
/// fails with a typed error; never a panic.
pub fn log_recovery(bytes: &[u8]) {
    use std::path::Path;
    use std::sync::Arc;

    use crate::fs::{FileSystem, MemFs};
    use crate::{LogOptions, RecoveryMode, Session, SessionOptions, TableConfig, Update};

    let fs = MemFs::new();
    let root = Path::new("/s");
    fs.create_dir_all(root).expect("a directory");
    let options = |recovery| SessionOptions {
        salt: Some(3),
        log: Some(LogOptions {
            segment_bytes: 512,
            recovery,
            ..LogOptions::default()
        }),
        ..SessionOptions::default()
    };
    let batches = 1 + bytes.first().copied().unwrap_or(0) as usize % 24;
    {
        let session = Session::open_with(
            Arc::new(fs.clone()),
            root,
            options(RecoveryMode::TolerateTornTail),
        )
        .expect("open");
        let a = session
            .create_durable_table("a", TableConfig::default())
            .expect("a");
        let b = session
            .create_durable_table("b", TableConfig::default())
            .expect("b");
        for i in 0..batches {
            let key = format!("k{i:03}");
            let ua: &[(&[u8], Update<'_>)] = &[(key.as_bytes(), Update::Insert(b"va"))];
            let ub: &[(&[u8], Update<'_>)] = &[(key.as_bytes(), Update::Insert(b"vb"))];
            session.write(&[(&a, ua), (&b, ub)]).expect("write");
            if i == batches / 2 && bytes.get(1).is_some_and(|b| b & 1 == 1) {
                session.checkpoint().expect("checkpoint");
            }
        }
        session.sync_log().expect("sync");
    }
    let dir = root.join("log");
    let mut files: Vec<_> = fs.list_dir(&dir).expect("log dir");
    files.sort();
    for patch in bytes.get(2..).unwrap_or(&[]).chunks_exact(4) {
        let path = dir.join(&files[patch[0] as usize % files.len()]);
        let mut contents = fs.file_bytes(&path).expect("a log file");
        let offset = u16::from_le_bytes([patch[1], patch[2]]) as usize;
        let len = contents.len().max(1);
        if let Some(b) = contents.get_mut(offset % len) {
            *b ^= patch[3];
        }
        fs.set_file_bytes(&path, contents);
    }
    for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::PointInTime] {
        let Ok(session) = Session::open_with(Arc::new(fs.clone()), root, options(mode)) else {
            continue;
        };
        // Both tables hold the same keys: a batch is all or nothing.
        let keys = |name: &str| -> Option<Vec<Vec<u8>>> {
            let table = session.durable_table(name)?;
            let entries = table.range_lookup(..).ok()?;
            Some(entries.into_iter().map(|e| e.key).collect())
        };
        if let (Some(a), Some(b)) = (keys("a"), keys("b")) {
            assert_eq!(a, b, "a batch was recovered in part");
            assert!(a.len() <= batches);
        }
    }
}

/// The trie's storage decoders: `bytes` as a trie manifest, and as a page log segment (its id
/// taken from its header) whose every record is decoded as the page its key names. Accepted
/// manifests and pages of the current format must re-encode to the same bytes; pages of the
/// older format 2 must re-encode to a page that reads back the same. An accepted segment
/// scanned in pieces as cleaning does (of 1, 4,097 and 65,537 bytes: one record a piece, a few,
/// the whole of a small input) must give the same records as a whole scan. (Inputs this small
/// never reach the bug such pieces once had, a run of records longer than what a piece reads:
/// `pagelog`'s unit tests build one.)
pub fn trie_pages(bytes: &[u8]) -> bool {
    use std::path::Path;

    use crate::fs::{FileSystem, MemFs, ReadOptions};
    use crate::pagelog::{scan_bytes, scan_range, Manifest, HEADER_BYTES};
    use crate::trie::{Geometry, Page, PageId};
    use cairn_proof::HashKind;
    let mut accepted = false;
    if let Ok(manifest) = Manifest::decode(bytes) {
        assert_eq!(
            manifest.encode(),
            bytes,
            "accepted manifests must be canonical"
        );
        accepted = true;
    }
    let id = bytes
        .get(16..24)
        .map_or(1, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if let Ok(records) = scan_bytes(bytes, id) {
        accepted = true;
        let fs = MemFs::new();
        let path = Path::new("/segment");
        let mut writer = fs.create(path).expect("a file in memory");
        writer.append(bytes).expect("a write in memory");
        drop(writer);
        let file = fs
            .open(path, ReadOptions::default())
            .expect("the file just written");
        let mut buf = crate::io::AlignedBuf::zeroed(0);
        for step in [1, 4_097, 65_537] {
            let (mut from, mut pieces) = (HEADER_BYTES, Vec::new());
            while from < bytes.len() as u64 {
                let (got, next) =
                    scan_range(&*file, id, from, from + step, &mut buf, &mut |_| true)
                        .expect("pieces of an accepted segment scan");
                assert!(next > from, "a scan piece moves on");
                pieces.extend(got);
                from = next;
            }
            assert_eq!(
                pieces, records,
                "pieces of {step} bytes scan as the whole does"
            );
        }
        // Every page geometry (a top page of 1 to 6 trie levels) reads the same bytes.
        let geometries = (1..=6).filter_map(Geometry::new);
        for ((_, key, page), geometry) in records
            .iter()
            .flat_map(|r| geometries.clone().map(move |g| (r, g)))
        {
            if let Some(id) = PageId::from_key(geometry, key) {
                if let Ok(decoded) = Page::decode(HashKind::Sha256, &id, page) {
                    let again = decoded
                        .encode(&id)
                        .expect("a decoded page has every pointer");
                    if again.first() == page.first() {
                        assert_eq!(&again, page, "accepted pages must be canonical");
                    } else {
                        // An older format is read, never written: it reads back the same.
                        let back = Page::decode(HashKind::Sha256, &id, &again)
                            .expect("a page written reads back");
                        assert_eq!(back, decoded, "a page of format 2 must re-encode whole");
                    }
                }
            }
        }
    }
    accepted
}

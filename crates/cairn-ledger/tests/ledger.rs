//! The ledger against a model: random commits (blind batches and read-modify-write transfers),
//! reads with receipts checked by the client's verifier, reopenings and power cuts on the
//! simulated file system; concurrent SmallBank-style transfers; and the attacks a client must
//! detect: a stale answer, a rolled-back directory, a forked history.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cairn::fs::{FileSystem, MemFs};
use cairn::{LogOptions, SessionOptions, SyncPolicy, TableConfig};
use cairn_ledger::{Error, Ledger, LedgerBatch, LedgerConfig, Promise};
use cairn_proof::history::EMPTY_ROOT;
use cairn_proof::ledger::ledger_root;
use cairn_proof::{
    root_of, verify_consistency, verify_receipt, verify_receipt_at, Claim, Digest, HashKind,
    ReceiptVerifyError, Root, TableClaims,
};
use proptest::prelude::*;

type Table = BTreeMap<Vec<u8>, Vec<u8>>;
/// The two tables' contents at a version.
type State = [Table; 2];
const NAMES: [&str; 2] = ["checking", "savings"];

fn cases(default: u32, ci: u32) -> u32 {
    if std::env::var("CI").is_ok() {
        ci
    } else {
        default
    }
}

fn options() -> SessionOptions {
    SessionOptions::default().salt(Some(9)).log(Some(
        LogOptions::default()
            .sync(SyncPolicy::Group {
                window: Duration::from_micros(200),
                bytes: 512,
            })
            .segment_bytes(8192),
    ))
}

/// Versions before the newest kept provable, unless a step changes it.
const WINDOW: u64 = 3;

fn config_with(window: u64) -> LedgerConfig {
    LedgerConfig::new(NAMES).history(window).table(
        TableConfig::default()
            .write_buffer_entries(4)
            .merge_batch_size(2),
    )
}

fn new_fs() -> MemFs {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/l")).unwrap();
    fs.sync_dir(Path::new("/")).unwrap();
    fs
}

fn open(fs: &MemFs) -> Ledger {
    open_window(fs, WINDOW)
}

fn open_window(fs: &MemFs, window: u64) -> Ledger {
    Ledger::open_with(Arc::new(fs.clone()), "/l", config_with(window), options()).unwrap()
}

/// The model of the window: the versions kept provable and the versions whose undo record is
/// stored, as the ledger's documentation defines them.
#[derive(Debug, Default)]
struct WindowModel {
    window: u64,
    kept: VecDeque<u64>,
    undo: BTreeSet<u64>,
    /// The undo records after each commit since the last opening (and at it): a power cut can
    /// lose commits that were not durable, and with them their deletions.
    past: Vec<(u64, BTreeSet<u64>)>,
}

impl WindowModel {
    /// Version `v` committed.
    fn commit(&mut self, v: u64) {
        if self.window == 0 {
            return;
        }
        if v > 1 {
            self.undo.insert(v);
        }
        if v > self.window {
            self.undo.remove(&(v - self.window));
        }
        self.kept.push_back(v);
        while self.kept.front().is_some_and(|&f| v - f > self.window) {
            self.kept.pop_front();
        }
        self.past.push((v, self.undo.clone()));
    }

    /// A power cut left version `r`, at or after the last opening: the undo records as its
    /// commit left them (those of later commits are lost with them).
    fn cut_to(&mut self, r: u64) {
        if let Some((_, undo)) = self.past.iter().rev().find(|(v, _)| *v <= r) {
            self.undo = undo.clone();
        }
    }

    /// The ledger opened at version `newest` with window `window`.
    fn open(&mut self, newest: u64, window: u64) {
        self.window = window;
        if window != u64::MAX {
            let end = newest.saturating_sub(window);
            self.undo.retain(|&v| v > end);
        }
        self.past = vec![(newest, self.undo.clone())];
        self.kept.clear();
        if window == 0 || newest == 0 {
            return;
        }
        self.kept.push_back(newest);
        let mut after = newest;
        while after > 1 && newest - (after - 1) <= window && self.undo.contains(&after) {
            after -= 1;
            self.kept.push_front(after);
        }
    }

    fn oldest(&self, newest: u64) -> u64 {
        self.kept.front().copied().unwrap_or(newest)
    }

    fn is_kept(&self, version: u64, newest: u64) -> bool {
        version == newest || self.kept.contains(&version)
    }
}

/// Checks the ledger's window against the model, and that pruning is exact: the undo records
/// stored are those of the versions after the oldest kept, and the trie segment files in the
/// session's `active/` directory are exactly those the kept versions reach.
fn check_window(fs: &MemFs, ledger: &Ledger, model: &WindowModel) {
    let info = ledger.window().unwrap();
    let newest = ledger.version();
    assert_eq!(info.newest, newest);
    assert_eq!(info.oldest, model.oldest(newest), "{model:?}");
    let undo = model.undo.first().copied().zip(model.undo.last().copied());
    assert_eq!(info.undo_versions, undo, "{model:?}");
    assert_eq!(info.undo_records, model.undo.len() as u64);
    if model.window > 0 && newest > 0 {
        let after_oldest = (info.oldest < newest).then_some((info.oldest + 1, newest));
        assert_eq!(info.undo_versions, after_oldest);
    }
    ledger.remove_released_files().unwrap();
    let on_disk: BTreeSet<String> = (fs.list_dir(Path::new("/l/active")).unwrap().into_iter())
        .filter(|name| name.ends_with(".pages"))
        .collect();
    let reached: BTreeSet<String> = (info.trie_files.iter())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        on_disk, reached,
        "segment files on disk, and reached by kept versions"
    );
}

/// Reads every key at every version the window keeps and checks values and receipts.
fn check_every_kept_version(ledger: &Ledger, model: &WindowModel, versions: &[State]) {
    let newest = ledger.version();
    let keys: Vec<Vec<u8>> = (0..14u8).map(key).collect();
    for &v in &model.kept {
        let read = ledger
            .read_at(v, &[(NAMES[0], &keys[..]), (NAMES[1], &keys[..])])
            .unwrap();
        check_read_at(&read, &versions[v as usize], &keys, &ledger.digest());
    }
    if newest > 0 {
        let read = ledger
            .read_at(newest, &[(NAMES[0], &keys[..]), (NAMES[1], &keys[..])])
            .unwrap();
        check_read_at(&read, &versions[newest as usize], &keys, &ledger.digest());
    }
}

fn key(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

fn table_root(t: &Table) -> Root {
    Root {
        kind: HashKind::Sha256,
        hash: root_of(
            HashKind::Sha256,
            t.iter().map(|(k, v)| (&k[..], &v[..], None)),
        ),
    }
}

fn expected_ledger_root(state: &State) -> [u8; 32] {
    let pairs = [
        (NAMES[0].as_bytes(), table_root(&state[0])),
        (NAMES[1].as_bytes(), table_root(&state[1])),
    ];
    ledger_root(&pairs).unwrap()
}

/// The claims of an answer: for each table, each key with the value it was given (or absent).
fn claims_of<'a>(keys: &'a [Vec<u8>], values: &'a [Vec<Option<Vec<u8>>>]) -> Vec<Vec<Claim<'a>>> {
    values
        .iter()
        .map(|vals| {
            keys.iter()
                .zip(vals)
                .map(|(k, v)| Claim::answer(k, v.as_deref()))
                .collect()
        })
        .collect()
}

/// Claims about both tables, in the order of `NAMES`.
fn both<'a>(claims: &'a [Vec<Claim<'a>>]) -> [TableClaims<'a>; 2] {
    [
        TableClaims {
            table: NAMES[0],
            claims: &claims[0],
        },
        TableClaims {
            table: NAMES[1],
            claims: &claims[1],
        },
    ]
}

/// Reads `keys` of both tables with a receipt, and checks everything a client checks: the
/// values are the model's, the receipt verifies fresh against the read's digest, that digest
/// extends `trusted` (a consistency proof), and a claim of any other value fails.
fn read_and_verify(ledger: &Ledger, state: &State, keys: &[Vec<u8>], trusted: &mut Digest) {
    let read = ledger.read(&[(NAMES[0], keys), (NAMES[1], keys)]).unwrap();
    assert_eq!(read.digest, ledger.digest());
    for (t, table) in state.iter().enumerate() {
        let want: Vec<Option<Vec<u8>>> = keys.iter().map(|k| table.get(k).cloned()).collect();
        assert_eq!(read.values[t], want, "table {t}");
    }
    if trusted.size > 0 {
        let proof = ledger
            .prove_consistency(trusted.size, read.digest.size)
            .unwrap();
        verify_consistency(trusted, &read.digest, &proof).unwrap();
    }
    *trusted = read.digest;
    let claims = claims_of(keys, &read.values);
    verify_receipt(&read.receipt, &both(&claims), &read.digest).unwrap();
    let bytes = read.receipt.encode();
    assert_eq!(cairn_proof::Receipt::decode(&bytes).unwrap(), read.receipt);
    // Any other answer for the first key is refused.
    let wrong = match &read.values[0][0] {
        Some(_) => Claim::absent(&keys[0]),
        None => Claim::present(&keys[0], b"forged"),
    };
    let forged = [TableClaims {
        table: NAMES[0],
        claims: &[wrong],
    }];
    assert!(verify_receipt(&read.receipt, &forged, &read.digest).is_err());
}

#[derive(Clone, Debug)]
enum Step {
    /// Blind writes: (table, key, value or delete).
    Batch(Vec<(usize, u8, Option<u8>)>),
    /// Move `amount` from checking[from] to savings[to] if checking[from] holds it.
    Transfer(u8, u8, u8),
    Read(Vec<u8>),
    /// Read at the version this many before the newest (kept provable or pruned).
    ReadAt(u8, Vec<u8>),
    /// Prove promises at these distances from the newest, each for these keys.
    Promises(Vec<(u8, u8)>),
    Reopen,
    /// Reopen with this window (`u8::MAX`: every version).
    Resize(u8),
    Checkpoint,
    /// Cut the power after this many more file-system primitives, then recover.
    Crash(u16, u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec((0..2usize, 0..12u8, proptest::option::of(any::<u8>())), 1..6)
            .prop_map(Step::Batch),
        3 => (0..12u8, 0..12u8, 1..100u8).prop_map(|(a, b, n)| Step::Transfer(a, b, n)),
        3 => proptest::collection::vec(0..14u8, 1..4).prop_map(Step::Read),
        2 => (0..6u8, proptest::collection::vec(0..14u8, 1..4)).prop_map(|(d, k)| Step::ReadAt(d, k)),
        1 => proptest::collection::vec((0..5u8, 0..14u8), 1..6).prop_map(Step::Promises),
        1 => Just(Step::Reopen),
        1 => prop_oneof![4 => 0..5u8, 1 => Just(u8::MAX)].prop_map(Step::Resize),
        1 => Just(Step::Checkpoint),
        1 => (0..300u16, any::<u64>()).prop_map(|(c, s)| Step::Crash(c, s)),
    ]
}

fn balance(v: Option<&Vec<u8>>) -> u64 {
    v.map_or(0, |v| u64::from(v.first().copied().unwrap_or(0)))
}

/// The state after a transfer (checking[from] -> savings[to]), or `None` if it writes nothing.
fn transfer(state: &State, from: u8, to: u8, amount: u8) -> Option<State> {
    let have = balance(state[0].get(&key(from)));
    if have < u64::from(amount) {
        return None;
    }
    let mut next = state.clone();
    next[0].insert(key(from), vec![(have - u64::from(amount)) as u8]);
    let to_have = balance(state[1].get(&key(to)));
    next[1].insert(key(to), vec![(to_have + u64::from(amount)).min(255) as u8]);
    Some(next)
}

fn run_transfer(
    ledger: &Ledger,
    from: u8,
    to: u8,
    amount: u8,
) -> cairn_ledger::Result<Option<cairn_ledger::Committed>> {
    let (moved, committed) = ledger.transact(&[from, to, amount], |tx| {
        let have = balance(tx.get(NAMES[0], key(from))?.as_ref());
        if have < u64::from(amount) {
            return Ok(false);
        }
        let to_have = balance(tx.get(NAMES[1], key(to))?.as_ref());
        tx.insert(NAMES[0], key(from), [(have - u64::from(amount)) as u8])?;
        tx.insert(
            NAMES[1],
            key(to),
            [(to_have + u64::from(amount)).min(255) as u8],
        )?;
        Ok(true)
    })?;
    assert_eq!(moved, committed.is_some());
    Ok(committed)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(64, 1000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random commits, reads, reopenings and power cuts against a model of every version.
    /// After every commit the version is the next one and its ledger root is the model's; every
    /// read's values are the model's and its receipt verifies against a digest consistent with
    /// the last one the client held. After a power cut the ledger recovers a version between the
    /// newest reported durable and the newest attempted, holding that version's contents, with
    /// the digest it had before the crash for every version up to it (a prefix of the history
    /// the client saw), and every version's record holds that version's table roots.
    #[test]
    fn ledger_against_a_model_with_crashes(steps in proptest::collection::vec(step(), 1..30)) {
        let fs = new_fs();
        let mut ledger = open(&fs);
        // versions[v]: the contents after version v; digests[v]: the digest at v.
        let mut versions: Vec<State> = vec![State::default()];
        let mut digests: Vec<Digest> = vec![Digest { size: 0, root: EMPTY_ROOT }];
        let mut durable: Vec<cairn::Durability> = Vec::new();
        let mut trusted = Digest { size: 0, root: EMPTY_ROOT };
        let mut model = WindowModel::default();
        model.open(0, WINDOW);
        for step in &steps {
            let head = versions.last().unwrap().clone();
            match step {
                Step::Batch(updates) => {
                    let mut batch = LedgerBatch::new();
                    let mut next = head.clone();
                    for &(t, k, v) in updates {
                        match v {
                            Some(v) => {
                                batch.insert(NAMES[t], key(k), [v]);
                                next[t].insert(key(k), vec![v]);
                            }
                            None => {
                                batch.delete(NAMES[t], key(k));
                                next[t].remove(&key(k));
                            }
                        }
                    }
                    batch.meta(format!("batch {}", versions.len()));
                    let c = ledger.write(&batch).unwrap().expect("a non-empty batch commits");
                    prop_assert_eq!(c.version, versions.len() as u64);
                    prop_assert_eq!(c.ledger_root, expected_ledger_root(&next));
                    versions.push(next);
                    digests.push(c.digest);
                    durable.push(c.durability);
                    model.commit(c.version);
                }
                Step::Transfer(from, to, amount) => {
                    let expect = transfer(&head, *from, *to, *amount);
                    let committed = run_transfer(&ledger, *from, *to, *amount).unwrap();
                    prop_assert_eq!(committed.is_some(), expect.is_some());
                    if let (Some(next), Some(c)) = (expect, committed) {
                        prop_assert_eq!(c.version, versions.len() as u64);
                        prop_assert_eq!(c.ledger_root, expected_ledger_root(&next));
                        versions.push(next);
                        digests.push(c.digest);
                        durable.push(c.durability);
                        model.commit(c.version);
                    }
                }
                Step::Read(keys) => {
                    if versions.len() > 1 {
                        let keys: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
                        read_and_verify(&ledger, &head, &keys, &mut trusted);
                    }
                }
                Step::ReadAt(back, keys) => {
                    let newest = versions.len() as u64 - 1;
                    let keys: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
                    if let Some(version) = newest.checked_sub(u64::from(*back)).filter(|&v| v > 0) {
                        let kept = model.is_kept(version, newest);
                        match ledger.read_at(version, &[(NAMES[0], &keys[..]), (NAMES[1], &keys[..])]) {
                            Ok(read) => {
                                prop_assert!(kept, "version {} read, outside the window", version);
                                check_read_at(&read, &versions[version as usize], &keys, &ledger.digest());
                            }
                            Err(Error::VersionPruned { version: v, oldest }) => {
                                prop_assert!(!kept, "version {} kept but pruned", version);
                                prop_assert_eq!(v, version);
                                prop_assert!(oldest > version);
                            }
                            Err(e) => panic!("read_at {version}: {e}"),
                        }
                    }
                }
                Step::Promises(promises) => {
                    let newest = versions.len() as u64 - 1;
                    let oldest = model.oldest(newest).max(1);
                    let promises: Vec<Promise> = promises
                        .iter()
                        .filter_map(|&(back, k)| {
                            let version = newest.checked_sub(u64::from(back))?;
                            (version >= oldest).then(|| Promise {
                                version,
                                table: NAMES[usize::from(k % 2)].to_string(),
                                keys: vec![key(k)],
                            })
                        })
                        .collect();
                    let proved = ledger.prove_promises(&promises).unwrap();
                    let mut versions_named: Vec<u64> = promises.iter().map(|p| p.version).collect();
                    versions_named.sort_unstable();
                    versions_named.dedup();
                    prop_assert_eq!(proved.iter().map(|r| r.read.version).collect::<Vec<_>>(), versions_named);
                    let digest = ledger.digest();
                    for read in proved.iter().map(|p| &p.read) {
                        let state = &versions[read.version as usize];
                        for (section, values) in read.receipt.tables.iter().zip(&read.values) {
                            let t = NAMES.iter().position(|n| *n == section.name).unwrap();
                            let keys: Vec<Vec<u8>> = promises
                                .iter()
                                .filter(|p| p.version == read.version && p.table == section.name)
                                .flat_map(|p| p.keys.clone())
                                .collect();
                            let claims: Vec<Claim<'_>> = keys
                                .iter()
                                .zip(values)
                                .map(|(k, v)| {
                                    prop_assert_eq!(v.as_ref(), state[t].get(k));
                                    Ok(Claim::answer(k, v.as_deref()))
                                })
                                .collect::<Result<_, TestCaseError>>()?;
                            let reads = [TableClaims { table: NAMES[t], claims: &claims }];
                            verify_receipt_at(&read.receipt, &reads, &digest).unwrap();
                        }
                    }
                }
                Step::Reopen | Step::Resize(_) => {
                    let window = match step {
                        Step::Resize(u8::MAX) => u64::MAX,
                        Step::Resize(w) => u64::from(*w),
                        _ => model.window,
                    };
                    ledger.close();
                    drop(ledger);
                    ledger = open_window(&fs, window);
                    prop_assert_eq!(ledger.digest(), *digests.last().unwrap());
                    model.open(ledger.version(), window);
                    check_every_kept_version(&ledger, &model, &versions);
                }
                Step::Checkpoint => ledger.checkpoint().unwrap(),
                Step::Crash(cut, seed) => {
                    // Attempt commits until the power goes: a blind batch each.
                    let newest_before = versions.len() as u64 - 1;
                    fs.crash_after(u64::from(*cut));
                    let mut attempted = versions.clone();
                    let mut attempted_digests = digests.clone();
                    for i in 0..20u8 {
                        let mut next = attempted.last().unwrap().clone();
                        let mut batch = LedgerBatch::new();
                        batch.insert(NAMES[(i % 2) as usize], key(i), [i]);
                        next[(i % 2) as usize].insert(key(i), vec![i]);
                        attempted.push(next);
                        match ledger.write(&batch) {
                            Ok(Some(c)) => {
                                attempted_digests.push(c.digest);
                                durable.push(c.durability);
                            }
                            _ => break,
                        }
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    fs.cut_power();
                    // The newest version reported durable.
                    let newest_durable = durable_versions(&durable, &attempted_digests);
                    drop(ledger);
                    fs.recover(*seed);
                    ledger = open_window(&fs, model.window);
                    let r = ledger.version();
                    if std::env::var("LEDGER_STATS").is_ok() {
                        eprintln!(
                            "STAT crash: durable {newest_durable} recovered {r} attempted {}",
                            attempted.len() - 1
                        );
                    }
                    prop_assert!(
                        newest_durable <= r && r < attempted.len() as u64,
                        "recovered version {} outside [{}, {}]",
                        r, newest_durable, attempted.len() - 1
                    );
                    // Versions up to r are those attempted (every version before the crash's
                    // window was committed); the digests the client could have seen agree.
                    attempted.truncate(r as usize + 1);
                    versions = attempted;
                    for v in 0..=r.min(attempted_digests.len() as u64 - 1) {
                        prop_assert_eq!(ledger.digest_at(v).unwrap(), attempted_digests[v as usize]);
                    }
                    digests = (0..=r).map(|v| ledger.digest_at(v).unwrap()).collect();
                    // The versions the crash window committed, then the opening.
                    model.cut_to(r);
                    for v in newest_before + 1..=r {
                        model.commit(v);
                    }
                    model.open(r, model.window);
                    check_every_kept_version(&ledger, &model, &versions);
                    durable.clear();
                    if trusted.size > r {
                        // The client saw a version the crash lost (it was never durable):
                        // from here it must trust the recovered history anew.
                        trusted = Digest { size: 0, root: EMPTY_ROOT };
                    }
                }
            }
            check_window(&fs, &ledger, &model);
        }
        // Every version's record holds that version's roots and leaf.
        let head = ledger.version();
        prop_assert_eq!(head, versions.len() as u64 - 1);
        for v in 1..=head {
            let info = ledger.version_info(v).unwrap();
            let state = &versions[v as usize];
            prop_assert_eq!(info.leaf.ledger_root, expected_ledger_root(state));
            prop_assert_eq!(info.roots[0].1, table_root(&state[0]));
            prop_assert_eq!(info.roots[1].1, table_root(&state[1]));
            let proof = ledger.prove_version(v, head).unwrap();
            cairn_proof::verify_inclusion(&info.leaf.hash(), &proof, &ledger.digest()).unwrap();
        }
        let state = versions.last().unwrap();
        for (t, table) in state.iter().enumerate() {
            for k in 0..14u8 {
                prop_assert_eq!(ledger.get(NAMES[t], key(k)).unwrap(), table.get(&key(k)).cloned());
            }
        }
    }
}

/// Checks a read of an older version: the values are that version's, the receipt verifies
/// against the newest digest as a read of the past, and not as a read of the present unless it
/// is the newest.
fn check_read_at(
    read: &cairn_ledger::VerifiedRead,
    state: &State,
    keys: &[Vec<u8>],
    digest: &Digest,
) {
    assert_eq!(read.digest, *digest);
    for (t, table) in state.iter().enumerate() {
        let want: Vec<Option<Vec<u8>>> = keys.iter().map(|k| table.get(k).cloned()).collect();
        assert_eq!(read.values[t], want);
    }
    let claims = claims_of(keys, &read.values);
    let reads = both(&claims);
    verify_receipt_at(&read.receipt, &reads, digest).unwrap();
    assert_eq!(
        verify_receipt(&read.receipt, &reads, digest).is_ok(),
        read.version == digest.size
    );
}

/// The newest version whose commit was reported durable, given each commit's notice in
/// version order after those before the crash window (whose digests `digests` holds).
fn durable_versions(durable: &[cairn::Durability], digests: &[Digest]) -> u64 {
    let first = digests.len() - durable.len();
    durable
        .iter()
        .enumerate()
        .filter(|(_, d)| matches!(d.is_durable(), Ok(true)))
        .map(|(i, _)| (first + i) as u64)
        .max()
        .unwrap_or(0)
}

/// SmallBank-style transfers from several threads: every transfer checked and applied
/// atomically, money conserved, one version per transfer, and a receipt for every account
/// verifying against the final digest.
#[test]
fn concurrent_transfers_conserve_money() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), LedgerConfig::new(NAMES)).unwrap();
    let accounts = 16u8;
    let mut batch = LedgerBatch::new();
    for a in 0..accounts {
        batch.insert(NAMES[0], key(a), 100u64.to_le_bytes());
        batch.insert(NAMES[1], key(a), 0u64.to_le_bytes());
    }
    ledger.write(&batch).unwrap();
    let value = |v: Option<Vec<u8>>| v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
    let threads = 4u64;
    let per_thread = 40u64;
    let moved = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let ledger = &ledger;
                s.spawn(move || {
                    let mut moved = 0u64;
                    for i in 0..per_thread {
                        let from = ((t * 7 + i * 3) % u64::from(accounts)) as u8;
                        let to = ((t * 5 + i * 11 + 1) % u64::from(accounts)) as u8;
                        let amount = 1 + (i % 30);
                        let (ok, c) = ledger
                            .transact(format!("t{t} i{i}").as_bytes(), |tx| {
                                let have = value(tx.get(NAMES[0], key(from))?);
                                if have < amount {
                                    return Ok(false);
                                }
                                let to_have = value(tx.get(NAMES[1], key(to))?);
                                tx.insert(NAMES[0], key(from), (have - amount).to_le_bytes())?;
                                tx.insert(NAMES[1], key(to), (to_have + amount).to_le_bytes())?;
                                Ok(true)
                            })
                            .unwrap();
                        assert_eq!(ok, c.is_some());
                        moved += u64::from(ok);
                    }
                    moved
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(ledger.version(), 1 + moved, "one version per transfer");
    let keys: Vec<Vec<u8>> = (0..accounts).map(key).collect();
    let read = ledger
        .read(&[(NAMES[0], &keys), (NAMES[1], &keys)])
        .unwrap();
    let total: u64 = read.values.iter().flatten().map(|v| value(v.clone())).sum();
    assert_eq!(total, 100 * u64::from(accounts));
    assert!(read.values.iter().flatten().all(Option::is_some));
    let claims = claims_of(&keys, &read.values);
    verify_receipt(&read.receipt, &both(&claims), &ledger.digest()).unwrap();
}

/// A server that answers with an older value and its older (valid) receipt is refused by a
/// client holding the newer digest; the same receipt verifies as a read of the past against
/// its own digest.
#[test]
fn a_stale_answer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), LedgerConfig::new(["accounts"])).unwrap();
    ledger
        .write(LedgerBatch::new().insert("accounts", "alice", "100"))
        .unwrap();
    let old = ledger.read(&[("accounts", &["alice"][..])]).unwrap();
    ledger
        .write(LedgerBatch::new().insert("accounts", "alice", "0"))
        .unwrap();
    let newer = ledger.digest();
    let claims = [Claim::present(b"alice", b"100")];
    let reads = [TableClaims {
        table: "accounts",
        claims: &claims,
    }];
    // Valid for version 1, against version 1's digest.
    verify_receipt(&old.receipt, &reads, &old.digest).unwrap();
    // Not a read of the present for a client at version 2.
    assert_eq!(
        verify_receipt(&old.receipt, &reads, &newer),
        Err(ReceiptVerifyError::Stale {
            version: 1,
            size: 2
        })
    );
    // Nor against version 2's digest as a read of the past: its history proof is for size 1.
    assert!(verify_receipt_at(&old.receipt, &reads, &newer).is_err());
    // The honest answer verifies.
    let now = ledger.read(&[("accounts", &["alice"][..])]).unwrap();
    let claims = [Claim::present(b"alice", b"0")];
    let reads = [TableClaims {
        table: "accounts",
        claims: &claims,
    }];
    verify_receipt(&now.receipt, &reads, &newer).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The directory replaced by an older copy: a client holding a newer digest detects it at its
/// next consistency check, whether the server shows its older history or writes a new one over
/// it (a fork: same sizes, other roots).
#[test]
fn a_rolled_back_or_forked_ledger_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let backup = dir.path().join("backup");
    let write = |ledger: &Ledger, v: &str| {
        let c = ledger
            .write(LedgerBatch::new().insert("accounts", "alice", v))
            .unwrap()
            .unwrap();
        c.durability.wait().unwrap();
        c
    };
    {
        let ledger = Ledger::open(&live, LedgerConfig::new(["accounts"])).unwrap();
        for v in ["1", "2", "3"] {
            write(&ledger, v);
        }
        ledger.close();
    }
    copy_dir(&live, &backup);
    let client = {
        let ledger = Ledger::open(&live, LedgerConfig::new(["accounts"])).unwrap();
        write(&ledger, "4");
        let d = write(&ledger, "5").digest;
        ledger.close();
        d
    };
    assert_eq!(client.size, 5);
    // Rolled back: the server's newest digest is older than the client's; it cannot prove
    // that its history extends the client's.
    std::fs::remove_dir_all(&live).unwrap();
    copy_dir(&backup, &live);
    let ledger = Ledger::open(&live, LedgerConfig::new(["accounts"])).unwrap();
    assert_eq!(ledger.version(), 3);
    assert!(ledger
        .prove_consistency(client.size, ledger.version())
        .is_err());
    // Forked: the rolled-back server writes on; its digest at the client's size differs, and no
    // consistency proof from the client's digest to its newer one verifies.
    write(&ledger, "4'");
    write(&ledger, "5'");
    let forked = write(&ledger, "6'").digest;
    let at_client_size = ledger.digest_at(client.size).unwrap();
    assert_eq!(at_client_size.size, client.size);
    assert_ne!(
        at_client_size.root, client.root,
        "a fork: same size, another root"
    );
    let proof = ledger.prove_consistency(client.size, forked.size).unwrap();
    assert!(verify_consistency(&client, &forked, &proof).is_err());
    // Equal sizes with different roots are inconsistent with any proof.
    assert!(verify_consistency(&client, &at_client_size, &proof).is_err());
    let empty = cairn_proof::ConsistencyProof {
        old_size: client.size,
        new_size: client.size,
        path: Vec::new(),
    };
    assert!(verify_consistency(&client, &at_client_size, &empty).is_err());
}

/// Configuration errors are typed, and a ledger reopens with its own table list.
#[test]
fn configuration_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Ledger::open(dir.path().join("a"), LedgerConfig::default()),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Ledger::open(dir.path().join("b"), LedgerConfig::new(["_mine"])),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Ledger::open(dir.path().join("c"), LedgerConfig::new(["x", "x"])),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Ledger::open(dir.path().join("e"), LedgerConfig::new(["x".repeat(65)])),
        Err(Error::InvalidConfig(_))
    ));
    assert!(
        !dir.path().join("e").exists(),
        "a refused configuration writes nothing"
    );
    let path = dir.path().join("d");
    {
        let ledger = Ledger::open(&path, LedgerConfig::new(["b", "a"])).unwrap();
        assert_eq!(ledger.tables(), ["a", "b"]);
        assert!(matches!(
            ledger.write(LedgerBatch::new().insert("c", "k", "v")),
            Err(Error::NoSuchTable(_))
        ));
        assert!(matches!(
            ledger.read(&[("a", &["k"][..])]),
            Err(Error::NoSuchVersion { .. })
        ));
        assert!(matches!(
            ledger.transact(&[0; 4097], |_| Ok(())),
            Err(Error::MetaTooLong(4097))
        ));
        ledger.close();
    }
    let ledger = Ledger::open(&path, LedgerConfig::default()).unwrap();
    assert_eq!(ledger.tables(), ["a", "b"]);
    ledger.close();
    drop(ledger);
    assert!(matches!(
        Ledger::open(&path, LedgerConfig::new(["a"])),
        Err(Error::InvalidConfig(_))
    ));
}

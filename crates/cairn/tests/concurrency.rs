//! Concurrency: readers on duplicates of a table (and on a cursor of the original) while another
//! thread updates the original, and handles closed while their siblings keep merging.
//!
//! Every reader checks every answer against a model frozen when its handle (or cursor) was made,
//! so any leak of a later update (or of a merge shared between handles) into a stable view shows
//! up as a mismatch. The random choices come from SplitMix64 generators seeded per thread from a
//! scenario seed; every failure message names it as `CAIRN_CONCURRENCY_SEED=0x...`, and setting
//! that variable reruns just that scenario (thread interleavings differ between runs, but every
//! check is exact whatever the interleaving).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    Cursor, CursorEntry, Error, IndexType, LookupResult, Resolve, Session, SessionOptions, Table,
    TableConfig, Update,
};

/// Keys are `key(id)` for `id` in `0..KEY_SPACE`; lookups also probe keys outside that set.
const KEY_SPACE: u64 = 6_000;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

// ------------------------------------------------------------------------------------------------
// Randomness and keys

/// SplitMix64: tiny, deterministic, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// True with probability `percent / 100`.
    fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The SplitMix64 finaliser: a bijection on `u64`.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seeds of a test's scenarios: `CAIRN_CONCURRENCY_SEED` alone if set (decimal or `0x` hex),
/// else three fixed ones. Failure messages name the scenario's seed to rerun it.
fn scenario_seeds() -> Vec<u64> {
    match std::env::var("CAIRN_CONCURRENCY_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            vec![parsed.unwrap_or_else(|_| panic!("CAIRN_CONCURRENCY_SEED={s:?} is not a u64"))]
        }
        Err(_) => (0..3).map(|n| mix(0x00C0_FFEE_D00D_2024 + n)).collect(),
    }
}

/// The seed of one thread (or phase) of a test: distinct per `tag`, reproducible from the base.
fn seed_for(base: u64, tag: u64) -> u64 {
    mix(base ^ mix(tag.wrapping_add(1)))
}

/// A 16-byte key, uniformly distributed in its first 8 bytes (as the compact index wants) and
/// unique per id.
fn key(id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&mix(id).to_be_bytes());
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// A key to probe with: mostly from the key space (present or not), sometimes 16 random bytes,
/// sometimes a short key of 0..=9 random bytes (never stored, but a valid bound and lookup key).
fn probe_key(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=6 => key(rng.below(KEY_SPACE)),
        7 | 8 => rng.next_u64().to_be_bytes().repeat(2),
        _ => {
            let len = rng.between(0, 9);
            let bytes = [rng.next_u64().to_be_bytes(), rng.next_u64().to_be_bytes()].concat();
            bytes[..len].to_vec()
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs its closure when dropped, also while unwinding: a thread that others wait on raises their
/// flags even when it panics, so a failure fails the test instead of hanging it.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

// ------------------------------------------------------------------------------------------------
// Updates, applied to a table and its model alike

enum Op {
    Insert(Vec<u8>),
    Upsert(u64),
    Delete,
}

/// The model's `AddU64Le`: add when both values are 8 bytes, else the newer value wins.
fn model_upsert(model: &mut Model, key: &[u8], add: u64) {
    let value = match model.get(key) {
        Some(old) if old.len() == 8 => u64::from_le_bytes(old[..].try_into().unwrap())
            .wrapping_add(add)
            .to_le_bytes()
            .to_vec(),
        _ => add.to_le_bytes().to_vec(),
    };
    model.insert(key.to_vec(), value);
}

/// Applies `count` random updates to `table` and `model`: inserts (mostly 8-byte values, some of
/// other lengths), `AddU64Le` upserts and deletes, sent one at a time or in mixed batches.
fn random_updates(table: &Table, model: &mut Model, rng: &mut Rng, count: usize, ctx: &str) {
    let mut done = 0;
    while done < count {
        let n = if rng.percent(40) {
            1
        } else {
            rng.between(2, 16)
        }
        .min(count - done);
        let ops: Vec<(Vec<u8>, Op)> = (0..n)
            .map(|_| {
                let k = key(rng.below(KEY_SPACE));
                let op = match rng.below(10) {
                    0..=4 => Op::Insert(if rng.percent(90) {
                        rng.next_u64().to_le_bytes().to_vec()
                    } else {
                        let len = rng.between(0, 24);
                        vec![rng.below(256) as u8; len]
                    }),
                    5..=7 => Op::Upsert(rng.below(1_000)),
                    _ => Op::Delete,
                };
                (k, op)
            })
            .collect();
        let result = if n == 1 {
            let (k, op) = &ops[0];
            match op {
                Op::Insert(v) => table.insert(k, v),
                Op::Upsert(a) => table.upsert(k, a.to_le_bytes()),
                Op::Delete => table.delete(k),
            }
        } else {
            let adds: Vec<[u8; 8]> = ops
                .iter()
                .map(|(_, op)| match op {
                    Op::Upsert(a) => a.to_le_bytes(),
                    _ => [0; 8],
                })
                .collect();
            let batch: Vec<(&[u8], Update<'_>)> = ops
                .iter()
                .zip(&adds)
                .map(|((k, op), add)| {
                    let update = match op {
                        Op::Insert(v) => Update::Insert(v),
                        Op::Upsert(_) => Update::Upsert(add),
                        Op::Delete => Update::Delete,
                    };
                    (&k[..], update)
                })
                .collect();
            table.updates(&batch)
        };
        if let Err(e) = result {
            panic!("{ctx}: update batch of {n} failed: {e}");
        }
        for (k, op) in ops {
            match op {
                Op::Insert(v) => {
                    model.insert(k, v);
                }
                Op::Upsert(a) => model_upsert(model, &k, a),
                Op::Delete => {
                    model.remove(&k);
                }
            }
        }
        done += n;
    }
}

// ------------------------------------------------------------------------------------------------
// Checks against a model

fn pairs(entries: Vec<CursorEntry>, ctx: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    entries
        .into_iter()
        .map(|e| {
            assert!(
                e.blob.is_none(),
                "{ctx}: unexpected blob at {}",
                hex(&e.key)
            );
            (e.key, e.value)
        })
        .collect()
}

/// Panics at the first difference between `got` and `want`, naming it.
fn assert_same(got: &[(Vec<u8>, Vec<u8>)], want: &[(Vec<u8>, Vec<u8>)], ctx: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w,
            "{ctx}: entry {i} differs: got {} => {}, want {} => {} ({} entries got, {} wanted)",
            hex(&g.0),
            hex(&g.1),
            hex(&w.0),
            hex(&w.1),
            got.len(),
            want.len()
        );
    }
    assert!(
        got.len() == want.len(),
        "{ctx}: got {} entries, want {}; first extra: {:?}",
        got.len(),
        want.len(),
        got.get(want.len())
            .or(want.get(got.len()))
            .map(|(k, _)| hex(k))
    );
}

fn check_lookups(table: &Table, model: &Model, keys: &[Vec<u8>], ctx: &str) {
    let results = table
        .lookups(keys)
        .unwrap_or_else(|e| panic!("{ctx}: lookups failed: {e}"));
    assert_eq!(results.len(), keys.len(), "{ctx}: result count");
    for (k, r) in keys.iter().zip(&results) {
        let want = model.get(k);
        assert!(
            r.value() == want.map(Vec::as_slice) && r.blob().is_none(),
            "{ctx}: lookup of {} gave {r:?}, want {:?}",
            hex(k),
            want.map(|v| hex(v))
        );
        assert!(
            matches!(
                (r, want),
                (LookupResult::NotFound, None) | (LookupResult::Found(_), Some(_))
            ),
            "{ctx}: lookup of {} gave {r:?}",
            hex(k)
        );
    }
}

/// What the model holds in a range; never panics, whatever the bounds.
fn model_range(model: &Model, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .range::<[u8], _>((lo, Bound::Unbounded))
        .take_while(|(k, _)| match hi {
            Bound::Included(h) => k.as_slice() <= h,
            Bound::Excluded(h) => k.as_slice() < h,
            Bound::Unbounded => true,
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn random_bound<'a>(rng: &mut Rng, key: &'a [u8]) -> Bound<&'a [u8]> {
    match rng.below(10) {
        0 => Bound::Unbounded,
        1..=5 => Bound::Included(key),
        _ => Bound::Excluded(key),
    }
}

/// One range lookup between two random keys with random bounds (sometimes reversed or empty).
fn check_random_range(table: &Table, model: &Model, rng: &mut Rng, ctx: &str) {
    let (mut a, mut b) = (probe_key(rng), probe_key(rng));
    if a > b && rng.percent(90) {
        std::mem::swap(&mut a, &mut b);
    }
    if rng.percent(5) {
        b = a.clone();
    }
    let (lo, hi) = (random_bound(rng, &a), random_bound(rng, &b));
    let got = table
        .range_lookup((lo, hi))
        .unwrap_or_else(|e| panic!("{ctx}: range_lookup failed: {e}"));
    let ctx = format!("{ctx}: range_lookup({:?}, {:?})", lo.map(hex), hi.map(hex));
    assert_same(&pairs(got, &ctx), &model_range(model, lo, hi), &ctx);
}

/// A cursor at a random key reading a random number of entries, through `take`, `next` or
/// `take_while`.
fn check_random_cursor(table: &Table, model: &Model, rng: &mut Rng, ctx: &str) {
    let start = probe_key(rng);
    let n = rng.between(0, 150);
    let mut cursor = table
        .cursor_at(&start)
        .unwrap_or_else(|e| panic!("{ctx}: cursor_at failed: {e}"));
    let mut want = model_range(model, Bound::Included(&start), Bound::Unbounded);
    let ctx = format!("{ctx}: cursor_at({}) reading {n}", hex(&start));
    let got = match rng.below(3) {
        0 => cursor
            .by_ref()
            .take(n)
            .collect::<cairn::Result<Vec<_>>>()
            .unwrap(),
        1 => (0..n)
            .map_while(|_| cursor.next().map(Result::unwrap))
            .collect(),
        _ => {
            // Up to the n-th key at or after `start`, or to the end, peeking so that the first
            // key past the end is not consumed.
            let stop = want.get(n).map(|(k, _)| k.clone());
            let mut got = Vec::new();
            while let Some(entry) = cursor.peek().unwrap() {
                if stop.as_deref().is_some_and(|s| entry.key.as_slice() >= s) {
                    break;
                }
                got.push(cursor.next().unwrap().unwrap());
            }
            // The first key that failed the predicate is still the cursor's next.
            if n < want.len() {
                let after = cursor.next().map(|e| e.unwrap().key);
                assert_eq!(
                    after.as_ref().map(|k| hex(k)),
                    want.get(n).map(|(k, _)| hex(k)),
                    "{ctx}: entry after the peeked end"
                );
            }
            got
        }
    };
    want.truncate(n);
    assert_same(&pairs(got, &ctx), &want, &ctx);
    cursor.close();
    assert!(
        matches!(cursor.next(), Some(Err(Error::CursorClosed))),
        "{ctx}: a closed cursor still reads"
    );
}

/// Lookups of every key of the key space (and a few others), a full cursor scan and a full
/// range lookup.
fn check_everything(table: &Table, model: &Model, ctx: &str) {
    let mut keys: Vec<Vec<u8>> = (0..KEY_SPACE).map(key).collect();
    keys.extend([vec![], vec![0; 16], vec![0xff; 16], b"not a key".to_vec()]);
    for chunk in keys.chunks(500) {
        check_lookups(table, model, chunk, ctx);
    }
    let want = model_range(model, Bound::Unbounded, Bound::Unbounded);
    let scanned = table
        .cursor()
        .unwrap()
        .by_ref()
        .take(usize::MAX)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap();
    assert_same(&pairs(scanned, ctx), &want, &format!("{ctx}: full scan"));
    let ranged = table.range_lookup(..).unwrap();
    assert_same(&pairs(ranged, ctx), &want, &format!("{ctx}: range .."));
}

fn config() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(64)
        .merge_batch_size(8)
        .index(IndexType::Compact)
        .resolve(Resolve::AddU64Le)
}

fn mem_session(fs: &Arc<MemFs>) -> Session {
    fs.create_dir_all(Path::new("/s")).unwrap();
    Session::open_with(fs.clone(), "/s", SessionOptions::default()).unwrap()
}

fn assert_closed(table: &Table, ctx: &str) {
    assert!(
        matches!(table.lookup(key(0)), Err(Error::TableClosed)),
        "{ctx}: lookup"
    );
    assert!(
        matches!(table.insert(key(0), [0; 8]), Err(Error::TableClosed)),
        "{ctx}: insert"
    );
    assert!(
        matches!(table.cursor(), Err(Error::TableClosed)),
        "{ctx}: cursor"
    );
    assert!(
        matches!(
            table.range_lookup((Bound::Included(&key(0)[..]), Bound::Unbounded)),
            Err(Error::TableClosed)
        ),
        "{ctx}: range_lookup"
    );
}

// ------------------------------------------------------------------------------------------------
// Readers

/// Reads `table` (never updated while this runs) for at least `min_rounds` rounds and then until
/// `stop` is set, at most `max_rounds`: each round a batch lookup, a range lookup and a cursor.
/// Every few rounds it also duplicates the table, updates the copy (whose merges are shared with
/// the table and its siblings) and checks the copy against its own model. Returns the rounds run.
fn read_frozen(
    table: &Table,
    model: &Model,
    seed: u64,
    name: &str,
    stop: &AtomicBool,
    min_rounds: usize,
    max_rounds: usize,
) -> usize {
    let mut rng = Rng::new(seed);
    for round in 0..max_rounds {
        if round >= min_rounds && stop.load(Ordering::Acquire) {
            return round;
        }
        let ctx = format!("{name} round {round}");
        let keys: Vec<Vec<u8>> = (0..rng.between(1, 64))
            .map(|_| probe_key(&mut rng))
            .collect();
        check_lookups(table, model, &keys, &ctx);
        check_random_range(table, model, &mut rng, &ctx);
        check_random_cursor(table, model, &mut rng, &ctx);
        if round % 8 == 7 {
            let copy = table.duplicate().unwrap();
            let mut copy_model = model.clone();
            let ctx = format!("{ctx}: copy");
            let count = rng.between(50, 300);
            random_updates(&copy, &mut copy_model, &mut rng, count, &ctx);
            let keys: Vec<Vec<u8>> = (0..64).map(|_| probe_key(&mut rng)).collect();
            check_lookups(&copy, &copy_model, &keys, &ctx);
            check_random_range(&copy, &copy_model, &mut rng, &ctx);
            check_random_cursor(&copy, &copy_model, &mut rng, &ctx);
            copy.close();
            // The copy's updates must not show through the table it came from.
            check_lookups(table, model, &keys, &format!("{ctx} closed"));
        }
    }
    max_rounds
}

/// Reads a cursor to its end in small steps, checking it against `model`.
fn read_cursor(cursor: &mut Cursor, model: &Model, seed: u64, name: &str) -> usize {
    let mut rng = Rng::new(seed);
    let want = model_range(model, Bound::Unbounded, Bound::Unbounded);
    let mut got = Vec::new();
    loop {
        let step = rng.between(1, 12);
        let ctx = format!("{name} after {} entries", got.len());
        let entries = cursor
            .by_ref()
            .take(step)
            .collect::<cairn::Result<Vec<_>>>()
            .unwrap_or_else(|e| panic!("{ctx}: take failed: {e}"));
        let len = entries.len();
        got.extend(pairs(entries, &ctx));
        assert_same(&got, &want[..got.len().min(want.len())], &ctx);
        if len < step {
            break;
        }
        if rng.percent(10) {
            std::thread::yield_now();
        }
    }
    assert_same(&got, &want, name);
    assert!(cursor.next().is_none(), "{name}: next after end");
    got.len()
}

// ------------------------------------------------------------------------------------------------
// Tests

/// Three duplicates made at different moments and a cursor on the original are read by four
/// threads while a fifth keeps updating the original (flushing and merging, merges shared with the
/// duplicates included). Every reader's answers equal its frozen model; afterwards the original
/// equals its final model, and closing everything leaves `active/` empty.
#[test]
fn readers_on_duplicates_see_their_snapshot_while_the_original_is_updated() {
    for seed in scenario_seeds() {
        readers_and_writer(seed);
    }
}

fn readers_and_writer(base: u64) {
    let started = Instant::now();
    let tag = format!("CAIRN_CONCURRENCY_SEED={base:#x}");
    let fs = Arc::new(MemFs::new());
    let session = mem_session(&fs);
    let original = session.new_table(config()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng::new(seed_for(base, 0));
    let setup = format!("[{tag}] setup");

    // A few thousand entries: several levels, merges in progress.
    random_updates(&original, &mut model, &mut rng, 4_000, &setup);
    let stats = original.stats().unwrap();
    assert!(stats.levels >= 3, "{setup}: {stats:?}");

    let mut duplicates: Vec<(Table, Model)> = Vec::new();
    let mut merges_shared = 0;
    let mut cursor = None;
    for d in 0..3 {
        merges_shared += original.stats().unwrap().merges_in_progress;
        duplicates.push((original.duplicate().unwrap(), model.clone()));
        random_updates(&original, &mut model, &mut rng, 600, &setup);
        if d == 1 {
            cursor = Some((original.cursor().unwrap(), model.clone()));
            random_updates(&original, &mut model, &mut rng, 300, &setup);
        }
    }
    assert!(
        merges_shared > 0,
        "{setup}: no duplicate shares a merge in progress"
    );
    // The middle duplicate also diverges by updates of its own before the readers start.
    {
        let (table, dup_model) = &mut duplicates[1];
        random_updates(table, dup_model, &mut rng, 500, &setup);
    }
    let (mut cursor, cursor_model) = cursor.unwrap();
    let before = original.stats().unwrap();

    const WRITER_STEPS: usize = 16;
    const WRITER_STEP_UPDATES: usize = 1_000;
    let writer_done = AtomicBool::new(false);
    let (rounds, cursor_entries) = std::thread::scope(|s| {
        let readers: Vec<_> = duplicates
            .iter()
            .enumerate()
            .map(|(d, (table, dup_model))| {
                let seed = seed_for(base, 10 + d as u64);
                let name = format!("[{tag}] duplicate {d}");
                let stop = &writer_done;
                s.spawn(move || read_frozen(table, dup_model, seed, &name, stop, 16, 2_000))
            })
            .collect();
        let cursor_reader = s.spawn(|| {
            let name = format!("[{tag}] cursor on the original");
            read_cursor(&mut cursor, &cursor_model, seed_for(base, 2), &name)
        });
        let writer = s.spawn(|| {
            let _done = OnDrop(|| writer_done.store(true, Ordering::Release));
            let mut rng = Rng::new(seed_for(base, 1));
            for step in 0..WRITER_STEPS {
                let ctx = format!("[{tag}] writer step {step}");
                random_updates(&original, &mut model, &mut rng, WRITER_STEP_UPDATES, &ctx);
                // Its own reads see every update so far.
                let keys: Vec<Vec<u8>> = (0..64).map(|_| probe_key(&mut rng)).collect();
                check_lookups(&original, &model, &keys, &ctx);
                check_random_range(&original, &model, &mut rng, &ctx);
                check_random_cursor(&original, &model, &mut rng, &ctx);
            }
        });
        writer.join().unwrap();
        let rounds: Vec<usize> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (rounds, cursor_reader.join().unwrap())
    });

    let after = original.stats().unwrap();
    assert_eq!(
        after.updates,
        before.updates + (WRITER_STEPS * WRITER_STEP_UPDATES) as u64,
        "[{tag}]"
    );
    assert!(
        after.merge_steps_total > before.merge_steps_total,
        "[{tag}] {before:?} {after:?}"
    );
    assert_eq!(cursor_entries, cursor_model.len(), "[{tag}]");
    check_everything(&original, &model, &format!("[{tag}] original after"));
    for (d, (table, dup_model)) in duplicates.iter().enumerate() {
        check_everything(table, dup_model, &format!("[{tag}] duplicate {d} after"));
    }

    cursor.close();
    assert!(
        matches!(cursor.next(), Some(Err(Error::CursorClosed))),
        "[{tag}]"
    );
    for (table, _) in &duplicates {
        table.close();
        assert_closed(table, &format!("[{tag}] closed duplicate"));
    }
    original.close();
    assert_closed(&original, &format!("[{tag}] closed original"));
    let leftovers = fs.list_dir(Path::new("/s/active")).unwrap();
    assert!(leftovers.is_empty(), "[{tag}] files left: {leftovers:?}");
    session.close();
    eprintln!(
        "{tag}: reader rounds {rounds:?}, {cursor_entries} cursor entries, {:?}",
        started.elapsed()
    );
}

/// Reads `table` (which nobody updates) for at least 3 rounds and until `progress` reaches 4,
/// then closes it and sets `closed`, while another thread updates a sibling handle.
fn read_then_close(
    table: &Table,
    model: &Model,
    seed: u64,
    name: &str,
    progress: &AtomicU64,
    closed: &AtomicBool,
) {
    let _closed = OnDrop(|| closed.store(true, Ordering::Release));
    let mut rng = Rng::new(seed);
    let mut round = 0;
    while round < 3 || progress.load(Ordering::Acquire) < 4 {
        let ctx = format!("{name} round {round}");
        let keys: Vec<Vec<u8>> = (0..32).map(|_| probe_key(&mut rng)).collect();
        check_lookups(table, model, &keys, &ctx);
        check_random_range(table, model, &mut rng, &ctx);
        check_random_cursor(table, model, &mut rng, &ctx);
        round += 1;
    }
    table.close();
    closed.store(true, Ordering::Release);
    assert_closed(table, &format!("{name} closed"));
}

/// Ten steps of 400 random updates to `table`, each followed by checked reads; steps 6 and later
/// wait until `closed` is set, so the sibling is closed while this thread is updating.
fn update_across_close(
    table: &Table,
    model: &mut Model,
    seed: u64,
    name: &str,
    progress: &AtomicU64,
    closed: &AtomicBool,
) {
    // Should this thread fail, the reader stops waiting for it.
    let _finished = OnDrop(|| progress.store(u64::MAX, Ordering::Release));
    let mut rng = Rng::new(seed);
    for step in 0..10 {
        if step == 6 {
            while !closed.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
        let ctx = format!("{name} step {step}");
        random_updates(table, model, &mut rng, 400, &ctx);
        progress.fetch_add(1, Ordering::Release);
        let keys: Vec<Vec<u8>> = (0..64).map(|_| probe_key(&mut rng)).collect();
        check_lookups(table, model, &keys, &ctx);
        check_random_range(table, model, &mut rng, &ctx);
        check_random_cursor(table, model, &mut rng, &ctx);
    }
}

/// A duplicate is closed by one thread while another keeps updating (and merging) the original;
/// then the original is closed while a new duplicate keeps being updated, looked up and scanned.
/// Every handle matches its model until it is closed and refuses work afterwards; closing the
/// last handle leaves `active/` empty (real file system).
#[test]
fn closing_one_handle_while_its_sibling_keeps_merging() {
    for seed in scenario_seeds() {
        close_while_sibling_merges(seed);
    }
}

fn close_while_sibling_merges(base: u64) {
    let tag = format!("CAIRN_CONCURRENCY_SEED={base:#x}");
    let dir = tempfile::tempdir().unwrap();
    let session = Session::open(dir.path()).unwrap();
    let original = session.new_table(config()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng::new(seed_for(base, 20));
    let setup = format!("[{tag}] setup");
    random_updates(&original, &mut model, &mut rng, 3_000, &setup);
    let stats = original.stats().unwrap();
    assert!(stats.levels >= 3, "{setup}: {stats:?}");

    // Phase 1: the duplicate is read, then closed, while the original is updated.
    let duplicate = original.duplicate().unwrap();
    let duplicate_model = model.clone();
    let (progress, closed) = (AtomicU64::new(0), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            let name = format!("[{tag}] writer on the original");
            update_across_close(
                &original,
                &mut model,
                seed_for(base, 21),
                &name,
                &progress,
                &closed,
            );
        });
        s.spawn(|| {
            let name = format!("[{tag}] duplicate");
            read_then_close(
                &duplicate,
                &duplicate_model,
                seed_for(base, 22),
                &name,
                &progress,
                &closed,
            );
        });
    });
    check_everything(&original, &model, &format!("[{tag}] original"));

    // Phase 2: the original is closed while a new duplicate (the survivor) is updated.
    let survivor = original.duplicate().unwrap();
    let mut survivor_model = model.clone();
    let (progress, closed) = (AtomicU64::new(0), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            let name = format!("[{tag}] writer on the survivor");
            update_across_close(
                &survivor,
                &mut survivor_model,
                seed_for(base, 23),
                &name,
                &progress,
                &closed,
            );
        });
        s.spawn(|| {
            let name = format!("[{tag}] original");
            read_then_close(
                &original,
                &model,
                seed_for(base, 24),
                &name,
                &progress,
                &closed,
            );
        });
    });
    let ctx = format!("[{tag}] survivor");
    check_everything(&survivor, &survivor_model, &ctx);
    // More updates, enough to finish the merges it once shared with the original.
    random_updates(&survivor, &mut survivor_model, &mut rng, 3_000, &ctx);
    check_everything(&survivor, &survivor_model, &ctx);
    survivor.close();
    session.close();
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("active"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(leftovers.is_empty(), "[{tag}] files left: {leftovers:?}");
}

/// Readers of the table being updated: counters only grow (`+1` upserts, or inserts of the next
/// count), and the writer raises each key's upper bound before updating it and its lower bound
/// after. Every value a reader sees, through a batch lookup, a range lookup or a cursor, lies
/// between the lower bound read before the call and the upper bound read after it: nothing is
/// lost or seen early while flushes and merges rewrite the runs underneath.
#[test]
fn readers_of_the_table_being_updated_see_linearizable_counters() {
    for seed in scenario_seeds() {
        counters(seed);
    }
}

const COUNTERS: u64 = 512;

/// The counters' keys and the bounds the writer publishes.
struct Counters {
    keys: Vec<Vec<u8>>,
    /// Key to counter number.
    index: BTreeMap<Vec<u8>, usize>,
    /// Each counter's value is at least this (stored after the update that set it).
    lo: Vec<AtomicU64>,
    /// Each counter's value is at most this (stored before the update that sets it).
    hi: Vec<AtomicU64>,
    writer_done: AtomicBool,
}

impl Counters {
    fn new() -> Counters {
        let keys: Vec<Vec<u8>> = (0..COUNTERS).map(key).collect();
        Counters {
            index: keys.iter().cloned().zip(0..).collect(),
            keys,
            lo: (0..COUNTERS).map(|_| AtomicU64::new(0)).collect(),
            hi: (0..COUNTERS).map(|_| AtomicU64::new(0)).collect(),
            writer_done: AtomicBool::new(false),
        }
    }

    fn load(bounds: &[AtomicU64]) -> Vec<u64> {
        bounds.iter().map(|b| b.load(Ordering::Acquire)).collect()
    }

    fn check(&self, got: &[(Vec<u8>, u64)], lo: &[u64], hi: &[u64], ctx: &str) {
        for (k, v) in got {
            let i = self.index[k];
            assert!(
                lo[i] <= *v && *v <= hi[i],
                "{ctx}: counter {i} is {v}, outside {}..={}",
                lo[i],
                hi[i]
            );
        }
    }

    /// Applies `updates` increments in random batches, publishing the bounds around each batch.
    fn write(&self, table: &Table, seed: u64, updates: usize) -> Vec<u64> {
        let _done = OnDrop(|| self.writer_done.store(true, Ordering::Release));
        let mut rng = Rng::new(seed);
        let mut counts = vec![0u64; COUNTERS as usize];
        let mut applied = 0;
        while applied < updates {
            let picks: Vec<usize> = (0..rng.between(1, 16))
                .map(|_| rng.below(COUNTERS) as usize)
                .collect();
            let mut next = counts.clone();
            let mut values = Vec::with_capacity(picks.len());
            for &i in &picks {
                next[i] += 1;
                values.push((rng.percent(70), next[i].to_le_bytes()));
            }
            for &i in &picks {
                self.hi[i].store(next[i], Ordering::Release);
            }
            let batch: Vec<(&[u8], Update<'_>)> = picks
                .iter()
                .zip(&values)
                .map(|(&i, (upsert, count))| {
                    let update = if *upsert {
                        Update::Upsert(&[1, 0, 0, 0, 0, 0, 0, 0])
                    } else {
                        Update::Insert(count)
                    };
                    (&self.keys[i][..], update)
                })
                .collect();
            table.updates(&batch).unwrap();
            for &i in &picks {
                self.lo[i].store(next[i], Ordering::Release);
            }
            applied += picks.len();
            counts = next;
        }
        counts
    }

    /// Reads until the writer is done (at least 10 rounds); returns the rounds run.
    fn read(&self, table: &Table, seed: u64, name: &str) -> usize {
        let value = |v: &[u8]| u64::from_le_bytes(v.try_into().unwrap());
        let mut rng = Rng::new(seed);
        let mut round = 0;
        while round < 10 || !self.writer_done.load(Ordering::Acquire) {
            let ctx = format!("{name} round {round}");
            // A batch lookup of random counters.
            let lo = Self::load(&self.lo);
            let batch: Vec<&Vec<u8>> = (0..rng.between(1, 64))
                .map(|_| &self.keys[rng.below(COUNTERS) as usize])
                .collect();
            let results = table.lookups(&batch).unwrap();
            let hi = Self::load(&self.hi);
            let found: Vec<(Vec<u8>, u64)> = results
                .iter()
                .zip(&batch)
                .map(|(r, k)| {
                    let v = r.value().unwrap_or_else(|| panic!("{ctx}: counter lost"));
                    (k.to_vec(), value(v))
                })
                .collect();
            self.check(&found, &lo, &hi, &format!("{ctx}: lookups"));

            // A range lookup, and a cursor over every counter read in steps.
            let lo = Self::load(&self.lo);
            let (a, b) = (probe_key(&mut rng), probe_key(&mut rng));
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            let ranged = table
                .range_lookup((Bound::Included(&a[..]), Bound::Excluded(&b[..])))
                .unwrap();
            let mut cursor = table.cursor().unwrap();
            let hi = Self::load(&self.hi);
            let ranged: Vec<(Vec<u8>, u64)> = ranged
                .into_iter()
                .map(|e| (e.key, value(&e.value)))
                .collect();
            let want = self
                .index
                .range::<[u8], _>((Bound::Included(&a[..]), Bound::Excluded(&b[..])));
            assert!(
                ranged.iter().map(|(k, _)| k).eq(want.map(|(k, _)| k)),
                "{ctx}: range keys"
            );
            self.check(&ranged, &lo, &hi, &format!("{ctx}: range"));
            let mut scanned = Vec::new();
            loop {
                let step = cursor
                    .by_ref()
                    .take(rng.between(1, 100))
                    .collect::<cairn::Result<Vec<_>>>()
                    .unwrap();
                if step.is_empty() {
                    break;
                }
                scanned.extend(step.into_iter().map(|e| (e.key, value(&e.value))));
            }
            assert!(
                scanned.iter().map(|(k, _)| k).eq(self.index.keys()),
                "{ctx}: cursor keys"
            );
            self.check(&scanned, &lo, &hi, &format!("{ctx}: cursor"));
            round += 1;
        }
        round
    }
}

fn counters(base: u64) {
    let tag = format!("CAIRN_CONCURRENCY_SEED={base:#x}");
    let fs = Arc::new(MemFs::new());
    let session = mem_session(&fs);
    let table = session.new_table(config()).unwrap();
    let counters = Counters::new();
    let zeros: Vec<_> = counters.keys.iter().map(|k| (k, [0u8; 8])).collect();
    table.inserts(&zeros).unwrap();
    let (counts, rounds) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (table, counters) = (&table, &counters);
                let name = format!("[{tag}] counter reader {r}");
                s.spawn(move || counters.read(table, seed_for(base, 30 + r), &name))
            })
            .collect();
        let counts = counters.write(&table, seed_for(base, 29), 12_000);
        let rounds: Vec<usize> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (counts, rounds)
    });
    let stats = table.stats().unwrap();
    assert!(stats.merge_steps_total > 0, "[{tag}] {stats:?}");
    let model: Model = counters
        .keys
        .iter()
        .zip(&counts)
        .map(|(k, c)| (k.clone(), c.to_le_bytes().to_vec()))
        .collect();
    check_everything(&table, &model, &format!("[{tag}] counters after"));
    table.close();
    session.close();
    let leftovers = fs.list_dir(Path::new("/s/active")).unwrap();
    assert!(leftovers.is_empty(), "[{tag}] files left: {leftovers:?}");
    eprintln!("{tag}: counter reader rounds {rounds:?}");
}

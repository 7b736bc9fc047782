//! The memory bound of a large batch lookup, measured with a counting allocator: one `lookups`
//! of 1M keys (half present, half absent) on a real directory holds at most one wave of pages
//! (16 MiB) at a time, plus 68 bytes of state per key, besides the results it returns. Before
//! lookups read in waves, this batch needed one arena of about 2 GiB.
//!
//! Its own test binary (the allocator is global) with a single test, so nothing else allocates
//! while it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use cairn::{LookupResult, Session, TableConfig};

/// Bytes of pages one lookup wave may hold (module `lookup`, `WAVE_PAGES_MAX` pages of 4 KiB).
const WAVE_BYTES_MAX: usize = 4096 * 4096;
/// Bytes of per-key state of a batch lookup (module `lookup`: `PARTIAL_BYTES_MAX` for what the
/// newer sources said, 4 for the next run to consult).
const STATE_BYTES_PER_KEY: usize = 64 + 4;
/// Bookkeeping per read of a wave (request, candidate, slot), at most one read per page.
const WAVE_BOOKKEEPING_BYTES_MAX: usize = 4096 * 72;
/// Allocations the test does not account for precisely (vectors rounding up, the runs list).
const SLACK_BYTES: usize = 1 << 20;

const ENTRIES: u64 = 100_000;
const BATCH_KEYS: u64 = 1_000_000;

/// Live and peak heap bytes, all allocations and those aligned like I/O arenas (4 KiB).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ARENA_LIVE: AtomicUsize = AtomicUsize::new(0);
static ARENA_PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(layout: Layout, bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
    if layout.align() >= 4096 {
        let live = ARENA_LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
        ARENA_PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn shrink(layout: Layout, bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
    if layout.align() >= 4096 {
        ARENA_LIVE.fetch_sub(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grow(layout, layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grow(layout, layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout, layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grow(layout, new_size - layout.size());
            } else {
                shrink(layout, layout.size() - new_size);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes()
}

fn value(i: u64) -> [u8; 8] {
    i.to_le_bytes()
}

/// Heap bytes the results own: the vector and every value.
fn results_bytes(results: &Vec<LookupResult>) -> usize {
    results.capacity() * std::mem::size_of::<LookupResult>()
        + results
            .iter()
            .filter_map(|r| r.value())
            .map(<[u8]>::len)
            .sum::<usize>()
}

/// The process's peak resident set size (`VmHWM`), where `/proc` has it.
fn peak_rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn lookups_of_a_million_keys_hold_one_wave_of_pages() {
    let dir = tempfile::tempdir().unwrap();
    let session = Session::open(dir.path()).unwrap();
    let table = session.new_table(TableConfig::default()).unwrap();
    let pairs: Vec<([u8; 8], [u8; 8])> = (0..ENTRIES).map(|i| (key(i), value(i))).collect();
    for chunk in pairs.chunks(10_000) {
        table.inserts(chunk).unwrap();
    }
    drop(pairs);
    // Even positions present (every entry about five times), odd ones absent.
    let keys: Vec<[u8; 8]> = (0..BATCH_KEYS)
        .map(|i| match i % 2 {
            0 => key((i / 2) % ENTRIES),
            _ => key(ENTRIES + i),
        })
        .collect();
    // Warm up: the first batch fills the engine's pools (rings, a small arena).
    table.lookups(&keys[..256]).unwrap();

    let rss_before = peak_rss_bytes();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    ARENA_PEAK.store(ARENA_LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let results = table.lookups(&keys).unwrap();
    let peak_growth = PEAK.load(Ordering::Relaxed) - base;
    let arena_peak = ARENA_PEAK.load(Ordering::Relaxed);

    let rss_growth = peak_rss_bytes()
        .zip(rss_before)
        .map(|(after, before)| after - before);
    let returned = results_bytes(&results);
    let beyond_results = peak_growth.saturating_sub(returned);
    let bound = WAVE_BYTES_MAX
        + WAVE_BOOKKEEPING_BYTES_MAX
        + STATE_BYTES_PER_KEY * BATCH_KEYS as usize
        + SLACK_BYTES;
    eprintln!(
        "1M-key lookups: peak heap growth {peak_growth} B, results {returned} B, \
         beyond the results {beyond_results} B (bound {bound} B), \
         peak of I/O arenas {arena_peak} B (bound {WAVE_BYTES_MAX} B), io: {}",
        session.io_report()
    );
    assert!(
        arena_peak <= WAVE_BYTES_MAX,
        "the I/O arenas held {arena_peak} B at once, more than one wave ({WAVE_BYTES_MAX} B)"
    );
    assert!(
        beyond_results <= bound,
        "the lookup held {beyond_results} B besides its results, more than {bound} B"
    );
    assert!(
        peak_growth < (1 << 30) / 4,
        "{peak_growth} B is far too much"
    );
    // The process's peak resident set (VmHWM) grew by no more than the heap's bound, the results
    // and some slack for the allocator's own pages: the pages read were never all resident.
    if let Some(rss_growth) = rss_growth {
        eprintln!("1M-key lookups: peak RSS grew by {rss_growth} B");
        assert!(
            rss_growth <= returned + bound + (32 << 20),
            "peak RSS grew by {rss_growth} B"
        );
    }

    for (i, result) in results.iter().enumerate() {
        let i = i as u64;
        let expected = i.is_multiple_of(2).then(|| value((i / 2) % ENTRIES));
        assert_eq!(result.value(), expected.as_ref().map(|v| &v[..]), "key {i}");
    }
}

//! Fence-pointer indexes of a run: map a search key to the only page span that can hold it.
//!
//! Owns: [`IndexType`], [`PageSpan`], [`IndexBuilder`], [`Index`] with its two kinds
//! ([`CompactIndex`], [`OrdinaryIndex`]), and their serialised form (format documented byte by
//! byte in `docs/format/index.md`).
//!
//! May call: the standard library and [`crate::error`]. Must never touch: files, pages or any
//! other engine structure. The run writer feeds spans to the builder and hands the encoded bytes
//! ([`Index::write_to`]) to its own file; the run reader decodes them ([`Index::decode`]).
//!
//! # Spans
//!
//! A run is a file of 4 KiB pages sorted by key. A *span* is either one page holding one or more
//! entries, or one page holding a single entry whose value is too large plus the overflow pages
//! continuing that value. Spans are numbered in key order and never overlap: with `f_i`/`l_i` the
//! first/last key of span `i`, `f_i <= l_i < f_{i+1}`.
//!
//! # Ordinary index (any keys)
//!
//! For each span: its last key and its first page. `search(k)` is the first span `j` with
//! `l_j >= k` (binary search), `None` if `k` is greater than the run's last key. Keys are stored
//! concatenated in one `Vec<u8>` with a `Vec<u32>` of end offsets (no per-key allocation), so
//! memory is the key bytes plus 12 bytes per span.
//!
//! # Compact index (meant for uniformly distributed keys such as hashes)
//!
//! `P(k)` (the *primary*) is the first 8 bytes of `k` read big-endian, zero-padded when `k` is
//! shorter. `P` is monotone: `k1 <= k2` implies `P(k1) <= P(k2)` (either the keys differ within
//! their first 8 bytes, in the same direction, or they agree there, or one is a prefix of the
//! other and its zero padding is `<=` any byte).
//!
//! Per **page** the index keeps `primary[page] = P(f_i)` of the span `i` the page belongs to (so
//! overflow pages repeat their span's primary and `primary` is non-decreasing), an `ltp`
//! (larger-than-page) bit set on every overflow page, and a `clash` bit set on a span's first
//! page when `P(f_i) == P(l_{i-1})` (and, by convention, on every overflow page). For every
//! span-first page whose clash bit is set the *tie-breaker* list holds that span's full first key,
//! sorted by page (which is also key order). For hash keys clashes happen with probability about
//! `n^2 / 2^65`, so the list is empty and the index costs 66 bits per page. Arbitrary keys work
//! (short or low-entropy keys just clash more and grow the tie-breaker list).
//!
//! `search(k)`, with `p = P(k)`:
//!
//! 1. `e` = the last page with `primary[e] <= p` (binary search); none: return `None` (then
//!    `P(k) < P(f_0)`, so `k < f_0`). `e` is the last page of its span `u` (a following overflow
//!    page would repeat `primary[e]`), and its first page `s` is found by scanning the `ltp`
//!    bitmap backwards a word (64 pages) at a time.
//! 2. If `primary[e] < p`: answer span `u`.
//! 3. Otherwise (`primary[e] == p`): `L` = the first page with `primary[L] == p` (binary search;
//!    a span start). The candidates are the spans starting in `L..=s`, plus the span before `L`
//!    if `clash[L]` is set. The tie-breaker entries with page in `L..=s` (a contiguous range of
//!    the list, found by binary search on pages) give the first keys of all candidates starting
//!    in `L..=s` except possibly `L` itself; answer the last one whose first key is `<= k`
//!    (binary search on keys); if there is none, answer the span before `L` when `clash[L]` is
//!    set, else the span starting at `L`. The end of an answered span is found by scanning
//!    `ltp` forwards.
//!
//! The binary searches of steps 1 and 3 over `primary` start from a *guide* (memory only,
//! derived from `primary` when the index is built or decoded): for a run of at least
//! [`GUIDE_PAGES_MIN`] pages, the first page of each of `2^b` buckets of the primaries' top `b`
//! bits, about [`GUIDE_PAGES_PER_BUCKET`] pages per bucket. A search then looks at one bucket:
//! for hash keys a few comparisons in two or three cache lines, instead of some 20 dependent
//! cache misses over the megabytes of primaries of a deep run (the largest single CPU cost of a
//! batched lookup at 100M entries before it). It costs 4 bytes per bucket, half a bit per page.
//!
//! **Why this finds the span of every present key.** Let `k` lie in span `t`:
//! `f_t <= k <= l_t`. All pages of `t` have primary `P(f_t) <= p`, so `u >= t`. If `u > t` then
//! `P(f_u) <= p = P(k) <= P(l_t) <= P(f_{t+1}) <= ... <= P(f_u)`, so all of these are equal to
//! `p`, and for every `j` in `t+1..=u`, `P(f_{j-1}) <= P(l_{j-1}) <= P(f_j)` squeezes
//! `P(l_{j-1}) = P(f_j) = p`: spans `t+1..=u` all start with primary `p` and all clash.
//! * Step 2: `primary[e] = P(f_u) < p` rules out `u > t`, so `u = t`.
//! * Step 3: if `u = t`, `t` starts in `L..=s`. If `u > t`, span `t+1` starts at a page with
//!   primary `p`, so at or after `L`, hence `t` starts in `L..=s` or `t` is the span just before
//!   `L`; in the latter case `P(l_t) = p` (squeezed as above) with `L` the start of `t+1`, so
//!   `clash[L]` is set. So `t` is a candidate. Every candidate starting in `L+1..=s` has a
//!   predecessor whose first key has primary `p`, so by the squeeze it clashes and has a
//!   tie-breaker; `L` has one exactly when `clash[L]` is set. First keys increase with span
//!   number, `f_t <= k`, and the next span has `f_{t+1} > l_t >= k`, so `t` is the last
//!   candidate whose first key is `<= k`: the tie-breaker search returns `t` when `t` has a
//!   tie-breaker, and finds nothing (every tie-breaker candidate comes after `t`) when `t` is
//!   the span before `L` (only possible with `clash[L]` set) or `t = L` without a tie-breaker
//!   (only possible with `clash[L]` clear): exactly the two fall-backs.
//!
//! For an absent key the answer may be any span (or `None` if `k < f_0`); the reader then does
//! not find the key in that span. Past the run's last key the compact index answers the last
//! span: it does not store the last key.
//!
//! This refines the "walk back over the maximal run of clashing span starts" formulation: the
//! candidates above are a subset of that run (plus the span before it) that contains `t`, found
//! in `O(log n)` instead of time linear in the length of the clash run, which matters for
//! low-entropy keys where the whole run may clash.
//!
//! # Costs (hot path: one search per lookup that passed the Bloom filter)
//!
//! * Compact: `log2(pages)` probes into an 8-byte-per-page array (about 17 cache misses at
//!   100 000 pages, fewer once the top levels are cached), 1–2 bitmap words for the span start
//!   and end, and with hash keys almost never any tie-breaker access. Memory: 8 bytes + 2 bits
//!   per page.
//! * Ordinary: `log2(spans)` key comparisons, each touching the offset array and the key bytes
//!   (two cache misses per probe). Memory: key bytes + 12 bytes per span.
//! * No system calls; nothing allocates during search.

use crate::error::{Error, Result};

/// Magic bytes opening every encoded index.
const MAGIC: [u8; 8] = *b"CRNINDEX";
/// The format version this build writes and reads.
const VERSION: u32 = 1;
/// `kind` code of the compact index.
const KIND_COMPACT: u32 = 0;
/// `kind` code of the ordinary index.
const KIND_ORDINARY: u32 = 1;
/// Largest chunk handed to a sink by [`Index::write_to`].
const CHUNK_MAX: usize = 64 * 1024;
/// Magic + version + kind.
const HEADER_LEN: usize = 16;
/// `page_count` + `entry_count`.
const FOOTER_LEN: usize = 16;
/// Smallest encoding of one tie-breaker or ordinary span entry (u64 + u16 + empty key).
const ENTRY_MIN_LEN: usize = 10;
/// `what` of the errors this module reports.
const WHAT: &str = "index";
/// Most key bytes one index holds in total (the ordinary index's last keys, or the compact
/// index's tie-breaker keys): key end offsets are `u32`, in memory and for the decoder. With
/// 4064-byte keys, one per page, an ordinary index reaches it at about a million pages (a 4 GiB
/// run), so [`IndexBuilder::push_span`] returns an error there instead of writing a run that no
/// reader could open.
const KEY_BYTES_MAX: usize = u32::MAX as usize;

/// Which fence-pointer index a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexType {
    /// About 66 bits per page; meant for uniformly distributed keys (hashes).
    Compact,
    /// Last key of every span; any keys.
    Ordinary,
}

impl IndexType {
    /// The code stored in the encoding's `kind` field (0 = compact, 1 = ordinary).
    pub fn code(self) -> u32 {
        match self {
            IndexType::Compact => KIND_COMPACT,
            IndexType::Ordinary => KIND_ORDINARY,
        }
    }

    /// The index type with the given `kind` code, if any.
    pub fn from_code(code: u32) -> Option<IndexType> {
        match code {
            KIND_COMPACT => Some(IndexType::Compact),
            KIND_ORDINARY => Some(IndexType::Ordinary),
            _ => None,
        }
    }
}

/// Pages `first..=last` of a run's key/ops file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSpan {
    /// The span's first page.
    pub first: u64,
    /// The span's last page (`>= first`).
    pub last: u64,
}

impl PageSpan {
    /// Number of pages in the span.
    pub fn pages(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }
}

/// The primary of a key: its first 8 bytes read big-endian, zero-padded. Monotone in key order.
pub(crate) fn primary(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

/// Accumulates spans in key order while a run is written.
#[derive(Debug)]
pub struct IndexBuilder {
    inner: BuilderInner,
    /// Most key bytes the index may hold ([`KEY_BYTES_MAX`]; lower in tests).
    key_bytes_max: usize,
    /// The previous span's last key, to check key order in debug builds.
    #[cfg(debug_assertions)]
    prev_last: Option<Vec<u8>>,
}

#[derive(Debug)]
enum BuilderInner {
    Compact(CompactIndex),
    Ordinary(OrdinaryIndex),
}

impl IndexBuilder {
    /// An empty builder for an index of the given kind.
    pub fn new(kind: IndexType) -> IndexBuilder {
        IndexBuilder::with_key_bytes_max(kind, KEY_BYTES_MAX)
    }

    /// An empty builder that holds at most `key_bytes_max` (at most [`KEY_BYTES_MAX`]) key bytes,
    /// so that tests reach the limit without gigabytes of keys.
    pub(crate) fn with_key_bytes_max(kind: IndexType, key_bytes_max: usize) -> IndexBuilder {
        let inner = match kind {
            IndexType::Compact => BuilderInner::Compact(CompactIndex::default()),
            IndexType::Ordinary => BuilderInner::Ordinary(OrdinaryIndex::default()),
        };
        IndexBuilder {
            inner,
            key_bytes_max: key_bytes_max.min(KEY_BYTES_MAX),
            #[cfg(debug_assertions)]
            prev_last: None,
        }
    }

    /// The kind of index being built.
    pub fn kind(&self) -> IndexType {
        match self.inner {
            BuilderInner::Compact(_) => IndexType::Compact,
            BuilderInner::Ordinary(_) => IndexType::Ordinary,
        }
    }

    /// Appends the next span: its first key, its last key and its page count (>= 1).
    /// Callers guarantee key order (`first_key <= last_key`, previous last key `< first_key`),
    /// checked in debug builds.
    ///
    /// Errors: [`Error::TableTooLarge`] when the index would hold more than 4 GiB of keys (an
    /// ordinary index's last keys, or a compact index's tie-breaker keys) or more than `u64::MAX`
    /// pages; the builder is then unchanged.
    ///
    /// # Panics
    ///
    /// If `pages` is 0 or a key is longer than `u16::MAX` bytes (the engine's keys are at most
    /// 4064 bytes).
    pub fn push_span(&mut self, first_key: &[u8], last_key: &[u8], pages: u64) -> Result<()> {
        assert!(pages >= 1, "a span has at least one page");
        assert!(
            first_key.len() <= usize::from(u16::MAX) && last_key.len() <= usize::from(u16::MAX),
            "index keys are at most {} bytes",
            u16::MAX
        );
        debug_assert!(first_key <= last_key, "span's first key > its last key");
        #[cfg(debug_assertions)]
        if let Some(prev) = &self.prev_last {
            debug_assert!(
                prev.as_slice() < first_key,
                "spans out of order: previous last key >= first key"
            );
        }
        match &mut self.inner {
            BuilderInner::Compact(c) => c.push_span(first_key, last_key, pages, self.key_bytes_max),
            BuilderInner::Ordinary(o) => o.push_span(last_key, pages, self.key_bytes_max),
        }?;
        #[cfg(debug_assertions)]
        {
            self.prev_last = Some(last_key.to_vec());
        }
        Ok(())
    }

    /// Pages pushed so far.
    pub fn page_count(&self) -> u64 {
        match &self.inner {
            BuilderInner::Compact(c) => c.page_count(),
            BuilderInner::Ordinary(o) => o.page_count,
        }
    }

    /// Spans pushed so far.
    pub fn span_count(&self) -> u64 {
        match &self.inner {
            BuilderInner::Compact(c) => c.span_count,
            BuilderInner::Ordinary(o) => o.span_count(),
        }
    }

    /// The finished index; `entries` is the run's entry count, stored in the footer for
    /// statistics (at least one per span).
    pub fn finish(self, entries: u64) -> Index {
        debug_assert!(
            entries >= self.span_count(),
            "every span holds at least one entry"
        );
        match self.inner {
            BuilderInner::Compact(mut c) => {
                c.entry_count = entries;
                c.shrink();
                c.build_guide();
                Index::Compact(c)
            }
            BuilderInner::Ordinary(mut o) => {
                o.entry_count = entries;
                o.shrink();
                Index::Ordinary(o)
            }
        }
    }
}

/// An immutable in-memory index. `Send + Sync`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Index {
    /// See [`CompactIndex`].
    Compact(CompactIndex),
    /// See [`OrdinaryIndex`].
    Ordinary(OrdinaryIndex),
}

impl Index {
    /// The index's kind.
    pub fn kind(&self) -> IndexType {
        match self {
            Index::Compact(_) => IndexType::Compact,
            Index::Ordinary(_) => IndexType::Ordinary,
        }
    }

    /// The only span that can hold `key`; `None` if `key` is outside the run's key range as far
    /// as the index knows (ordinary: below nothing, above the last key; compact: below the
    /// first key's primary). For an absent key the span may be any span.
    pub fn search(&self, key: &[u8]) -> Option<PageSpan> {
        match self {
            Index::Compact(c) => c.search(key),
            Index::Ordinary(o) => o.search(key),
        }
    }

    /// Pages of the run.
    pub fn page_count(&self) -> u64 {
        match self {
            Index::Compact(c) => c.page_count(),
            Index::Ordinary(o) => o.page_count,
        }
    }

    /// Spans of the run.
    pub fn span_count(&self) -> u64 {
        match self {
            Index::Compact(c) => c.span_count,
            Index::Ordinary(o) => o.span_count(),
        }
    }

    /// Entries of the run (statistics; as given to [`IndexBuilder::finish`]).
    pub fn entry_count(&self) -> u64 {
        match self {
            Index::Compact(c) => c.entry_count,
            Index::Ordinary(o) => o.entry_count,
        }
    }

    /// Memory held by the index, in bytes (the value itself plus its heap allocations).
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Index>()
            + match self {
                Index::Compact(c) => c.heap_bytes(),
                Index::Ordinary(o) => o.heap_bytes(),
            }
    }

    /// Length of [`Index::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + FOOTER_LEN
            + match self {
                Index::Compact(c) => c.body_len(),
                Index::Ordinary(o) => o.body_len(),
            }
    }

    /// Writes the encoding to `sink` in chunks of at most 64 KiB, stopping at the first error.
    pub fn write_to(&self, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let mut w = ChunkWriter::new(sink, self.encoded_len());
        w.put(&MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        w.put(&self.kind().code().to_le_bytes())?;
        match self {
            Index::Compact(c) => c.write_body(&mut w)?,
            Index::Ordinary(o) => o.write_body(&mut w)?,
        }
        w.put(&self.page_count().to_le_bytes())?;
        w.put(&self.entry_count().to_le_bytes())?;
        w.flush()
    }

    /// The encoding (see `docs/format/index.md`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        let result = self.write_to(&mut |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        });
        debug_assert!(result.is_ok(), "an infallible sink cannot fail");
        out
    }

    /// Decodes an index. Total: any byte string gives an index or an error, and the structure
    /// of an `Ok` index is checked so that searching it never panics.
    pub fn decode(bytes: &[u8]) -> Result<Index> {
        let mut r = Reader::new(bytes);
        if r.take(8)? != MAGIC {
            return Err(Error::corrupt(WHAT, "bad magic"));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                what: WHAT,
                found: version,
                supported: VERSION,
            });
        }
        let kind_code = r.u32()?;
        let kind = IndexType::from_code(kind_code)
            .ok_or_else(|| Error::corrupt(WHAT, format!("unknown index kind {kind_code}")))?;
        let index = match kind {
            IndexType::Compact => Index::Compact(CompactIndex::decode_body(&mut r)?),
            IndexType::Ordinary => Index::Ordinary(OrdinaryIndex::decode_body(&mut r)?),
        };
        if r.remaining() != 0 {
            return Err(Error::corrupt(
                WHAT,
                format!("{} trailing bytes", r.remaining()),
            ));
        }
        Ok(index)
    }
}

/// Compact fence-pointer index: per page a 64-bit primary and two bits, plus tie-breakers.
/// See the module documentation for the search algorithm and its correctness argument.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactIndex {
    /// Per page: primary of its span's first key. Non-decreasing.
    primaries: Vec<u64>,
    /// Per page (bit `i % 64` of word `i / 64`): clash bit. Bits past the last page are 0.
    clash: Vec<u64>,
    /// Per page: larger-than-page (overflow page) bit. Bits past the last page are 0.
    ltp: Vec<u64>,
    /// Pages of the clashing span starts, strictly increasing.
    tie_pages: Vec<u64>,
    /// Their first keys, concatenated.
    tie_keys: Vec<u8>,
    /// End offset of each tie-breaker key in `tie_keys`.
    tie_ends: Vec<u32>,
    /// Number of spans (pages whose ltp bit is clear).
    span_count: u64,
    /// Entry count (statistics).
    entry_count: u64,
    /// Primary of the last key of the last span pushed (builder only).
    prev_last_primary: Option<u64>,
    /// The search guide (module documentation): entry `h` is the first page whose primary's top
    /// `guide_bits` bits are at least `h`, for `h` in `0..=2^guide_bits`. Empty for small runs.
    guide: Vec<u32>,
    guide_bits: u32,
}

/// Runs of fewer pages get no search guide (their primaries fit in a few KiB of cache).
pub const GUIDE_PAGES_MIN: usize = 1024;

/// Pages per bucket of the search guide, on average for uniformly spread primaries.
pub const GUIDE_PAGES_PER_BUCKET: usize = 16;

/// Most bits of the guide: 2^22 buckets (16 MiB), for runs of 64M pages (256 GiB) and more.
const GUIDE_BITS_MAX: u32 = 22;

impl CompactIndex {
    fn page_count(&self) -> u64 {
        self.primaries.len() as u64
    }

    /// See [`IndexBuilder::push_span`]; checks every limit before changing anything.
    fn push_span(
        &mut self,
        first_key: &[u8],
        last_key: &[u8],
        pages: u64,
        key_bytes_max: usize,
    ) -> Result<()> {
        let p = primary(first_key);
        let pages = usize::try_from(pages)
            .map_err(|_| Error::TableTooLarge(format!("a span of {pages} pages")))?;
        let start = self.primaries.len();
        let clashes = self.prev_last_primary == Some(p);
        let tie_end = if clashes {
            let end = key_end(self.tie_keys.len(), first_key.len(), key_bytes_max);
            Some(end.ok_or_else(|| {
                Error::TableTooLarge(format!(
                    "the compact index of a run would hold more than {key_bytes_max} bytes of \
                     tie-breaker keys (first keys of spans that share their first 8 bytes with \
                     the previous span's last key); use keys that differ early, such as hashes, \
                     or the ordinary index"
                ))
            })?)
        } else {
            None
        };
        self.primaries.extend(std::iter::repeat_n(p, pages));
        let words = self.primaries.len().div_ceil(64);
        self.clash.resize(words, 0);
        self.ltp.resize(words, 0);
        if let Some(end) = tie_end {
            set_bit(&mut self.clash, start);
            self.tie_pages.push(start as u64);
            self.tie_keys.extend_from_slice(first_key);
            self.tie_ends.push(end);
        }
        for page in start + 1..self.primaries.len() {
            set_bit(&mut self.ltp, page);
            set_bit(&mut self.clash, page);
        }
        self.prev_last_primary = Some(primary(last_key));
        self.span_count += 1;
        Ok(())
    }

    /// Builds the search guide from the primaries (any order: a damaged index gives wrong
    /// answers, never a panic). O(pages + buckets).
    fn build_guide(&mut self) {
        let n = self.primaries.len();
        self.guide = Vec::new();
        self.guide_bits = 0;
        if n < GUIDE_PAGES_MIN || u32::try_from(n).is_err() {
            return;
        }
        let buckets_wanted = n / GUIDE_PAGES_PER_BUCKET; // at least 64
        let bits = (usize::BITS - 1 - buckets_wanted.leading_zeros()).min(GUIDE_BITS_MAX);
        let shift = 64 - bits;
        let mut guide = Vec::with_capacity((1usize << bits) + 1);
        let mut page = 0usize;
        for bucket in 0..1u64 << bits {
            while self
                .primaries
                .get(page)
                .is_some_and(|&p| p >> shift < bucket)
            {
                page += 1;
            }
            guide.push(page as u32);
        }
        guide.push(n as u32);
        self.guide = guide;
        self.guide_bits = bits;
    }

    /// The pages `lo..hi` whose primaries can equal `p`: every page below `lo` has a smaller
    /// primary, every page from `hi` on a larger one.
    #[inline]
    fn guided_range(&self, p: u64) -> (usize, usize) {
        let n = self.primaries.len();
        if self.guide_bits == 0 {
            return (0, n);
        }
        let bucket = (p >> (64 - self.guide_bits)) as usize;
        match (self.guide.get(bucket), self.guide.get(bucket + 1)) {
            (Some(&lo), Some(&hi)) if lo <= hi && hi as usize <= n => (lo as usize, hi as usize),
            _ => (0, n),
        }
    }

    fn shrink(&mut self) {
        self.prev_last_primary = None;
        self.primaries.shrink_to_fit();
        self.clash.shrink_to_fit();
        self.ltp.shrink_to_fit();
        self.tie_pages.shrink_to_fit();
        self.tie_keys.shrink_to_fit();
        self.tie_ends.shrink_to_fit();
    }

    fn heap_bytes(&self) -> usize {
        self.primaries.capacity() * 8
            + self.clash.capacity() * 8
            + self.ltp.capacity() * 8
            + self.tie_pages.capacity() * 8
            + self.tie_keys.capacity()
            + self.tie_ends.capacity() * 4
            + self.guide.capacity() * 4
    }

    /// Number of tie-breaker entries (clashing span starts).
    pub fn tie_breaker_count(&self) -> usize {
        self.tie_pages.len()
    }

    fn tie_key(&self, j: usize) -> &[u8] {
        key_at(&self.tie_keys, &self.tie_ends, j)
    }

    /// The first page of the span holding `page` (`page` < page count).
    fn span_start(&self, page: usize) -> usize {
        prev_clear(&self.ltp, page).unwrap_or(0)
    }

    /// The last page of the span starting at `start` (`start` < page count).
    fn span_end(&self, start: usize) -> usize {
        next_clear(&self.ltp, start + 1, self.primaries.len()) - 1
    }

    /// The span that must hold `key` if the run holds it (module documentation, "search").
    pub fn search(&self, key: &[u8]) -> Option<PageSpan> {
        let p = primary(key);
        let (lo, hi) = self.guided_range(p);
        let bucket = &self.primaries[lo..hi];
        let after = lo + bucket.partition_point(|&x| x <= p);
        let end = after.checked_sub(1)?;
        let start = self.span_start(end);
        if self.primaries[end] != p {
            return Some(page_span(start, end));
        }
        // Several spans may start with primary `p`, and the span before them may end with it.
        let low = lo + bucket.partition_point(|&x| x < p);
        let lo = self.tie_pages.partition_point(|&pg| pg < low as u64);
        let hi = self.tie_pages.partition_point(|&pg| pg <= start as u64);
        if lo < hi {
            // Last tie-breaker in lo..hi whose first key is <= key (keys are increasing).
            let (mut a, mut b) = (lo, hi);
            while a < b {
                let mid = a + (b - a) / 2;
                if self.tie_key(mid) <= key {
                    a = mid + 1;
                } else {
                    b = mid;
                }
            }
            if a > lo {
                let s = usize::try_from(self.tie_pages[a - 1]).unwrap_or(start);
                return Some(page_span(s, self.span_end(s)));
            }
        }
        if low > 0 && get_bit(&self.clash, low) {
            let prev_end = low - 1;
            Some(page_span(self.span_start(prev_end), prev_end))
        } else {
            Some(page_span(low, self.span_end(low)))
        }
    }

    fn body_len(&self) -> usize {
        8 + self.primaries.len() * 8
            + (self.clash.len() + self.ltp.len()) * 8
            + 8
            + self.tie_pages.len() * ENTRY_MIN_LEN
            + self.tie_keys.len()
    }

    fn write_body(&self, w: &mut ChunkWriter<'_>) -> Result<()> {
        w.put(&(self.primaries.len() as u64).to_le_bytes())?;
        for words in [&self.primaries, &self.clash, &self.ltp] {
            for x in words.iter() {
                w.put(&x.to_le_bytes())?;
            }
        }
        w.put(&(self.tie_pages.len() as u64).to_le_bytes())?;
        for (j, page) in self.tie_pages.iter().enumerate() {
            w.put(&page.to_le_bytes())?;
            let key = self.tie_key(j);
            w.put(&(key.len() as u16).to_le_bytes())?;
            w.put(key)?;
        }
        Ok(())
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<CompactIndex> {
        const W: &str = "compact index";
        let n = r.u64()?;
        let words = n.div_ceil(64);
        // Primaries plus both bitmaps must fit in what is left (checked before allocating).
        let need = n
            .checked_mul(8)
            .and_then(|x| x.checked_add(words.checked_mul(16)?))
            .ok_or_else(|| Error::corrupt(W, format!("page count {n} too large")))?;
        if need > r.remaining() as u64 {
            return Err(Error::corrupt(
                W,
                format!("{n} pages need {need} bytes, {} left", r.remaining()),
            ));
        }
        // Both fit in usize: they are at most the input's length.
        let n = n as usize;
        let words = words as usize;
        let primaries = r.u64s(n)?;
        let clash = r.u64s(words)?;
        let ltp = r.u64s(words)?;
        for bits in [&clash, &ltp] {
            if let Some(&last) = bits.last() {
                if !n.is_multiple_of(64) && last >> (n % 64) != 0 {
                    return Err(Error::corrupt(W, "bits set past the last page"));
                }
            }
        }
        let mut span_count = 0u64;
        let mut clashing_starts = 0u64;
        for i in 0..n {
            let (is_ltp, is_clash) = (get_bit(&ltp, i), get_bit(&clash, i));
            if i == 0 {
                if is_ltp || is_clash {
                    return Err(Error::corrupt(
                        W,
                        "first page is an overflow page or clashes",
                    ));
                }
            } else {
                let (prev, cur) = (primaries[i - 1], primaries[i]);
                if cur < prev {
                    return Err(Error::corrupt(W, format!("primary decreases at page {i}")));
                }
                if is_ltp && (cur != prev || !is_clash) {
                    return Err(Error::corrupt(
                        W,
                        format!("overflow page {i} changes primary or lacks its clash bit"),
                    ));
                }
                if !is_ltp && cur == prev && !is_clash {
                    return Err(Error::corrupt(
                        W,
                        format!("span at page {i} repeats the previous primary without clash"),
                    ));
                }
            }
            if !is_ltp {
                span_count += 1;
                clashing_starts += u64::from(is_clash);
            }
        }
        let n_ties = r.u64()?;
        if n_ties != clashing_starts {
            return Err(Error::corrupt(
                W,
                format!("{n_ties} tie-breakers for {clashing_starts} clashing spans"),
            ));
        }
        // `n_ties <= n`, so it fits in usize.
        let n_ties = n_ties as usize;
        let mut tie_pages = Vec::with_capacity(n_ties);
        let mut tie_keys = Vec::new();
        let mut tie_ends = Vec::with_capacity(n_ties);
        for j in 0..n_ties {
            let page = r.u64()?;
            let len = usize::from(r.u16()?);
            let key = r.take(len)?;
            let ok_page = usize::try_from(page)
                .ok()
                .filter(|&pg| pg < n && !get_bit(&ltp, pg) && get_bit(&clash, pg));
            let Some(pg) = ok_page else {
                return Err(Error::corrupt(
                    W,
                    format!("tie-breaker page {page} is not a clashing span start"),
                ));
            };
            if tie_pages.last().is_some_and(|&prev| prev >= page) {
                return Err(Error::corrupt(W, "tie-breaker pages not increasing"));
            }
            if primary(key) != primaries[pg] {
                return Err(Error::corrupt(
                    W,
                    format!("tie-breaker key's primary differs from page {pg}'s"),
                ));
            }
            if j > 0 && key_at(&tie_keys, &tie_ends, j - 1) >= key {
                return Err(Error::corrupt(W, "tie-breaker keys not increasing"));
            }
            tie_pages.push(page);
            push_key_checked(&mut tie_keys, &mut tie_ends, key, W)?;
        }
        let page_count = r.u64()?;
        let entry_count = r.u64()?;
        if page_count != n as u64 {
            return Err(Error::corrupt(
                W,
                format!("footer page count {page_count} but {n} pages"),
            ));
        }
        if entry_count < span_count {
            return Err(Error::corrupt(
                W,
                format!("{entry_count} entries in {span_count} spans"),
            ));
        }
        let mut index = CompactIndex {
            primaries,
            clash,
            ltp,
            tie_pages,
            tie_keys,
            tie_ends,
            span_count,
            entry_count,
            prev_last_primary: None,
            guide: Vec::new(),
            guide_bits: 0,
        };
        index.build_guide();
        Ok(index)
    }
}

/// Ordinary fence-pointer index: the last key and first page of every span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrdinaryIndex {
    /// Last keys of the spans, concatenated; strictly increasing.
    keys: Vec<u8>,
    /// End offset of each span's last key in `keys`.
    ends: Vec<u32>,
    /// First page of each span: strictly increasing, starting at 0, below `page_count`.
    first_pages: Vec<u64>,
    /// Pages of the run.
    page_count: u64,
    /// Entry count (statistics).
    entry_count: u64,
}

impl OrdinaryIndex {
    pub(crate) fn span_count(&self) -> u64 {
        self.first_pages.len() as u64
    }

    /// See [`IndexBuilder::push_span`]; checks every limit before changing anything.
    fn push_span(&mut self, last_key: &[u8], pages: u64, key_bytes_max: usize) -> Result<()> {
        let end = key_end(self.keys.len(), last_key.len(), key_bytes_max).ok_or_else(|| {
            Error::TableTooLarge(format!(
                "the ordinary index of a run would hold more than {key_bytes_max} bytes of keys \
                 (the last key of every span); use shorter keys or the compact index"
            ))
        })?;
        let page_count = self
            .page_count
            .checked_add(pages)
            .ok_or_else(|| Error::TableTooLarge("a run of more than u64::MAX pages".into()))?;
        self.first_pages.push(self.page_count);
        self.keys.extend_from_slice(last_key);
        self.ends.push(end);
        self.page_count = page_count;
        Ok(())
    }

    fn shrink(&mut self) {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.first_pages.shrink_to_fit();
    }

    fn heap_bytes(&self) -> usize {
        self.keys.capacity() + self.ends.capacity() * 4 + self.first_pages.capacity() * 8
    }

    /// The last key of span `j`.
    ///
    /// # Panics
    ///
    /// If `j` is not below the span count.
    pub fn last_key(&self, j: usize) -> &[u8] {
        key_at(&self.keys, &self.ends, j)
    }

    /// The first span whose last key is `>= key`; `None` if `key` is above the run's last key.
    pub fn search(&self, key: &[u8]) -> Option<PageSpan> {
        let n = self.first_pages.len();
        let (mut a, mut b) = (0, n);
        while a < b {
            let mid = a + (b - a) / 2;
            if self.last_key(mid) < key {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        if a == n {
            return None;
        }
        let first = self.first_pages[a];
        let last = match self.first_pages.get(a + 1) {
            Some(&next) => next - 1,
            None => self.page_count - 1,
        };
        Some(PageSpan { first, last })
    }

    fn body_len(&self) -> usize {
        8 + self.first_pages.len() * ENTRY_MIN_LEN + self.keys.len()
    }

    fn write_body(&self, w: &mut ChunkWriter<'_>) -> Result<()> {
        w.put(&(self.first_pages.len() as u64).to_le_bytes())?;
        for (j, first) in self.first_pages.iter().enumerate() {
            w.put(&first.to_le_bytes())?;
            let key = self.last_key(j);
            w.put(&(key.len() as u16).to_le_bytes())?;
            w.put(key)?;
        }
        Ok(())
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<OrdinaryIndex> {
        const W: &str = "ordinary index";
        let n = r.u64()?;
        if n > (r.remaining() / ENTRY_MIN_LEN) as u64 {
            return Err(Error::corrupt(
                W,
                format!("{n} spans cannot fit in {} bytes", r.remaining()),
            ));
        }
        let n = n as usize;
        let mut keys = Vec::new();
        let mut ends = Vec::with_capacity(n);
        let mut first_pages: Vec<u64> = Vec::with_capacity(n);
        for j in 0..n {
            let first = r.u64()?;
            let len = usize::from(r.u16()?);
            let key = r.take(len)?;
            let in_order = match first_pages.last() {
                None => first == 0,
                Some(&prev) => prev < first,
            };
            if !in_order {
                return Err(Error::corrupt(
                    W,
                    format!("span {j} starts at page {first}, out of order"),
                ));
            }
            if j > 0 && key_at(&keys, &ends, j - 1) >= key {
                return Err(Error::corrupt(
                    W,
                    format!("last key of span {j} not increasing"),
                ));
            }
            first_pages.push(first);
            push_key_checked(&mut keys, &mut ends, key, W)?;
        }
        let page_count = r.u64()?;
        let entry_count = r.u64()?;
        let pages_ok = match first_pages.last() {
            None => page_count == 0,
            Some(&last) => last < page_count,
        };
        if !pages_ok {
            return Err(Error::corrupt(
                W,
                format!("page count {page_count} does not cover the spans"),
            ));
        }
        if entry_count < n as u64 {
            return Err(Error::corrupt(
                W,
                format!("{entry_count} entries in {n} spans"),
            ));
        }
        Ok(OrdinaryIndex {
            keys,
            ends,
            first_pages,
            page_count,
            entry_count,
        })
    }
}

fn page_span(first: usize, last: usize) -> PageSpan {
    PageSpan {
        first: first as u64,
        last: last as u64,
    }
}

/// Key `j` of a concatenated key list (`j` < `ends.len()`).
fn key_at<'a>(keys: &'a [u8], ends: &[u32], j: usize) -> &'a [u8] {
    let start = if j == 0 { 0 } else { ends[j - 1] as usize };
    &keys[start..ends[j] as usize]
}

/// The end offset of a key of `key_len` bytes appended to a concatenated key list of
/// `keys_len` bytes; `None` if the list would then exceed `key_bytes_max` (or `u32::MAX`) bytes.
fn key_end(keys_len: usize, key_len: usize, key_bytes_max: usize) -> Option<u32> {
    let end = keys_len.checked_add(key_len)?;
    if end > key_bytes_max {
        return None;
    }
    u32::try_from(end).ok()
}

/// Appends a decoded key to a concatenated key list.
fn push_key_checked(
    keys: &mut Vec<u8>,
    ends: &mut Vec<u32>,
    key: &[u8],
    what: &'static str,
) -> Result<()> {
    let end = key_end(keys.len(), key.len(), KEY_BYTES_MAX)
        .ok_or_else(|| Error::corrupt(what, "keys exceed 4 GiB in total"))?;
    keys.extend_from_slice(key);
    ends.push(end);
    Ok(())
}

fn get_bit(words: &[u64], i: usize) -> bool {
    words.get(i / 64).is_some_and(|w| (w >> (i % 64)) & 1 == 1)
}

fn set_bit(words: &mut [u64], i: usize) {
    words[i / 64] |= 1 << (i % 64);
}

/// The last `i' <= i` whose bit is clear, if any.
fn prev_clear(words: &[u64], i: usize) -> Option<usize> {
    let mut w = i / 64;
    let bit = i % 64;
    let mask = if bit == 63 {
        u64::MAX
    } else {
        (1u64 << (bit + 1)) - 1
    };
    let mut cur = !words.get(w).copied().unwrap_or(0) & mask;
    loop {
        if cur != 0 {
            return Some(w * 64 + 63 - cur.leading_zeros() as usize);
        }
        w = w.checked_sub(1)?;
        cur = !words.get(w).copied().unwrap_or(0);
    }
}

/// The first `i' >= from` whose bit is clear, or `n` if none is below `n`.
fn next_clear(words: &[u64], from: usize, n: usize) -> usize {
    if from >= n {
        return n;
    }
    let mut w = from / 64;
    let mut cur = !words.get(w).copied().unwrap_or(0) & (u64::MAX << (from % 64));
    loop {
        if cur != 0 {
            return (w * 64 + cur.trailing_zeros() as usize).min(n);
        }
        w += 1;
        match words.get(w) {
            Some(&x) => cur = !x,
            None => return n,
        }
    }
}

/// Buffers output and hands it to a sink in chunks of at most [`CHUNK_MAX`] bytes.
struct ChunkWriter<'a> {
    sink: &'a mut dyn FnMut(&[u8]) -> Result<()>,
    buf: Vec<u8>,
}

impl<'a> ChunkWriter<'a> {
    fn new(sink: &'a mut dyn FnMut(&[u8]) -> Result<()>, total: usize) -> ChunkWriter<'a> {
        ChunkWriter {
            sink,
            buf: Vec::with_capacity(total.min(CHUNK_MAX)),
        }
    }

    fn put(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = data.len().min(CHUNK_MAX - self.buf.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == CHUNK_MAX {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            (self.sink)(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Bounds-checked little-endian reader over the encoding.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    fn remaining(&self) -> usize {
        self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.bytes.len() {
            return Err(Error::corrupt(
                WHAT,
                format!("truncated: need {n} bytes, {} left", self.bytes.len()),
            ));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// `n` u64 values; the caller has checked that `8 * n` bytes remain.
    fn u64s(&mut self, n: usize) -> Result<Vec<u64>> {
        let len = n
            .checked_mul(8)
            .ok_or_else(|| Error::corrupt(WHAT, "length overflow"))?;
        let bytes = self.take(len)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_le_bytes(a)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A span of the model: its keys (sorted) and its pages.
    #[derive(Clone, Debug)]
    struct ModelSpan {
        keys: Vec<Vec<u8>>,
        first_page: u64,
        pages: u64,
    }

    impl ModelSpan {
        fn page_span(&self) -> PageSpan {
            PageSpan {
                first: self.first_page,
                last: self.first_page + self.pages - 1,
            }
        }
    }

    /// Chops sorted distinct keys into spans; `shapes` (cycled) gives each span's key count
    /// (1..=5) and, for single-key spans, the page count.
    fn chop(keys: &[Vec<u8>], shapes: &[(usize, u64)]) -> Vec<ModelSpan> {
        let mut spans = Vec::new();
        let mut i = 0;
        let mut page = 0;
        let mut s = 0;
        while i < keys.len() {
            let (size, pages) = shapes[s % shapes.len()];
            s += 1;
            let size = size.clamp(1, keys.len() - i);
            let pages = if size == 1 { pages.max(1) } else { 1 };
            spans.push(ModelSpan {
                keys: keys[i..i + size].to_vec(),
                first_page: page,
                pages,
            });
            i += size;
            page += pages;
        }
        spans
    }

    fn build(kind: IndexType, spans: &[ModelSpan]) -> Index {
        let mut b = IndexBuilder::new(kind);
        let mut entries = 0;
        for s in spans {
            b.push_span(&s.keys[0], s.keys.last().unwrap(), s.pages)
                .unwrap();
            entries += s.keys.len() as u64;
        }
        assert_eq!(b.span_count(), spans.len() as u64);
        b.finish(entries)
    }

    /// Checks every present key and the given probe keys against the model.
    fn check_index(index: &Index, spans: &[ModelSpan], probes: &[Vec<u8>]) {
        let pages: u64 = spans.iter().map(|s| s.pages).sum();
        assert_eq!(index.page_count(), pages);
        assert_eq!(index.span_count(), spans.len() as u64);
        for s in spans {
            for k in &s.keys {
                assert_eq!(index.search(k), Some(s.page_span()), "key {k:?}");
            }
        }
        let first_key = spans.first().map(|s| s.keys[0].clone());
        let last_key = spans.last().map(|s| s.keys.last().unwrap().clone());
        for k in probes {
            let got = index.search(k);
            if let Some(span) = got {
                assert!(
                    spans.iter().any(|s| s.page_span() == span),
                    "{span:?} is not a span"
                );
            }
            match index.kind() {
                IndexType::Ordinary => {
                    let want = spans
                        .iter()
                        .find(|s| s.keys.last().unwrap() >= k)
                        .map(ModelSpan::page_span);
                    assert_eq!(got, want, "probe {k:?}");
                    assert_eq!(got.is_none(), last_key.as_ref().is_none_or(|l| k > l));
                }
                IndexType::Compact => {
                    let below = first_key.as_ref().is_none_or(|f| k < f);
                    if got.is_none() {
                        assert!(below, "None for {k:?} at or above the first key");
                    }
                    // A present key must be found in its span.
                    if let Some(s) = spans.iter().find(|s| s.keys.contains(k)) {
                        assert_eq!(got, Some(s.page_span()));
                    }
                }
            }
        }
    }

    fn key_set() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop_oneof![
            // Uniform 34-byte keys.
            prop::collection::btree_set(prop::collection::vec(any::<u8>(), 34), 1..150),
            // Short low-entropy keys: many share (zero-padded) primaries.
            prop::collection::btree_set(prop::collection::vec(0u8..2, 0..12), 1..150),
            // Families sharing an 8-byte prefix, with short suffixes.
            prop::collection::btree_set(
                (0u8..3, prop::collection::vec(0u8..3, 0..4)).prop_map(|(a, s)| {
                    let mut k = vec![9, 9, 9, 9, 9, 9, 9, a];
                    k.extend(s);
                    k
                }),
                1..100
            ),
        ]
        .prop_map(|s: BTreeSet<Vec<u8>>| s.into_iter().collect())
    }

    fn probe_keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u8>(), 34),
                prop::collection::vec(0u8..2, 0..12),
                prop::collection::vec(9u8..10, 6..10),
                prop::collection::vec(any::<u8>(), 0..10),
            ],
            0..40,
        )
    }

    fn shapes() -> impl Strategy<Value = Vec<(usize, u64)>> {
        prop::collection::vec(
            (1usize..=5, prop_oneof![6 => Just(1u64), 1 => 2u64..=4]),
            1..20,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn search_finds_every_present_key(
            keys in key_set(),
            shapes in shapes(),
            probes in probe_keys(),
        ) {
            let spans = chop(&keys, &shapes);
            for kind in [IndexType::Compact, IndexType::Ordinary] {
                let index = build(kind, &spans);
                check_index(&index, &spans, &probes);
                // The decoded index behaves identically.
                let bytes = index.encode();
                prop_assert_eq!(bytes.len(), index.encoded_len());
                let decoded = Index::decode(&bytes).unwrap();
                prop_assert_eq!(&decoded, &index);
                check_index(&decoded, &spans, &probes);
            }
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(
            kind in 0u32..3,
            header in any::<bool>(),
            body in prop::collection::vec(any::<u8>(), 0..400),
            probes in probe_keys(),
        ) {
            let mut bytes = Vec::new();
            if header {
                bytes.extend_from_slice(&MAGIC);
                bytes.extend_from_slice(&VERSION.to_le_bytes());
                bytes.extend_from_slice(&kind.to_le_bytes());
            }
            bytes.extend_from_slice(&body);
            if let Ok(index) = Index::decode(&bytes) {
                exercise(&index, &probes);
                prop_assert_eq!(index.encode(), bytes);
            }
        }
    }

    /// Uses a decoded index in every way; must not panic.
    fn exercise(index: &Index, probes: &[Vec<u8>]) {
        for k in probes {
            if let Some(span) = index.search(k) {
                assert!(span.first <= span.last && span.last < index.page_count());
            }
        }
        let _ = (index.span_count(), index.entry_count(), index.size_bytes());
        assert_eq!(index.encode().len(), index.encoded_len());
    }

    /// Deterministic pseudo-random numbers.
    type Rng = crate::fs::SplitMix64;

    /// A random key of `len` bytes.
    fn random_key(rng: &mut Rng, len: usize) -> Vec<u8> {
        (0..len).map(|_| rng.next_u64() as u8).collect()
    }

    /// Keys that clash heavily: a shared 8-byte prefix, short keys whose zero padding collides,
    /// and some uniform keys in between.
    fn clashing_spans() -> Vec<ModelSpan> {
        let mut keys = BTreeSet::new();
        for i in 0..40u8 {
            keys.insert([b"prefix00".as_slice(), &[i]].concat());
            keys.insert([b"prefix00".as_slice(), &[i, i]].concat());
        }
        for len in 0..10 {
            keys.insert(vec![0u8; len]);
            keys.insert(vec![1u8; len]);
        }
        keys.insert(b"prefix0".to_vec());
        keys.insert(b"prefix01".to_vec());
        let mut rng = Rng::new(7);
        for _ in 0..20 {
            keys.insert(random_key(&mut rng, 16));
        }
        let keys: Vec<_> = keys.into_iter().collect();
        chop(
            &keys,
            &[(1, 3), (2, 1), (1, 1), (3, 1), (1, 2), (5, 1), (1, 1)],
        )
    }

    #[test]
    fn compact_index_with_many_clashes() {
        let spans = clashing_spans();
        let index = build(IndexType::Compact, &spans);
        let Index::Compact(c) = &index else {
            unreachable!()
        };
        // Most spans inside the shared-prefix family clash.
        assert!(c.tie_breaker_count() > 20, "{}", c.tie_breaker_count());
        let mut probes = vec![
            b"prefix00".to_vec(),
            b"prefix00\xff".to_vec(),
            b"prefix0".to_vec(),
            b"prefix".to_vec(),
            b"prefiy".to_vec(),
            vec![0; 3],
            vec![0; 20],
            vec![],
            vec![0xff; 20],
        ];
        for i in 0..50u8 {
            probes.push([b"prefix00".as_slice(), &[i, 1]].concat());
            probes.push([b"prefix00".as_slice(), &[i, i, i]].concat());
        }
        check_index(&index, &spans, &probes);
        // Key below every primary.
        let single = build(IndexType::Compact, &spans[spans.len() - 1..]);
        assert_eq!(single.search(&[]), None);
    }

    #[test]
    fn compact_zero_padding_clashes() {
        // [], [0], [0, 0] share primary 0; [0; 9] too.
        let spans = chop(
            &[vec![], vec![0], vec![0, 0], vec![0; 9], vec![0, 1], vec![1]],
            &[(1, 2), (1, 1), (1, 1), (1, 3), (1, 1), (1, 1)],
        );
        let index = build(IndexType::Compact, &spans);
        check_index(&index, &spans, &[vec![0; 8], vec![0; 12], vec![2]]);
        let Index::Compact(c) = &index else {
            unreachable!()
        };
        assert_eq!(c.tie_breaker_count(), 3);
    }

    #[test]
    fn index_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Index>();
        check::<IndexBuilder>();
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "spans out of order")]
    fn push_span_checks_key_order() {
        let mut b = IndexBuilder::new(IndexType::Ordinary);
        b.push_span(b"b", b"c", 1).unwrap();
        b.push_span(b"c", b"d", 1).unwrap();
    }

    /// The key-byte limit (4 GiB in the engine, lowered here) gives an error, not a panic, and
    /// leaves the builder as it was: an index of everything pushed before, which decodes.
    #[test]
    fn key_bytes_limit_is_an_error() {
        // Keys of 10 bytes that share their first 8 (one primary). Ordinary: every span's last
        // key counts, so 10 spans fill a limit of 100 bytes. Compact: only tie-breakers count,
        // one for each span after the first (each clashes), so 11 spans fill it.
        let key = |i: usize| format!("same8by-{i:02}").into_bytes();
        for (kind, fitting) in [(IndexType::Ordinary, 10), (IndexType::Compact, 11)] {
            let mut b = IndexBuilder::with_key_bytes_max(kind, 100);
            for i in 0..fitting {
                b.push_span(&key(i), &key(i), 1).unwrap();
            }
            let err = b.push_span(&key(fitting), &key(fitting), 1).unwrap_err();
            assert!(matches!(err, Error::TableTooLarge(_)), "{kind:?}: {err:?}");
            assert!(err.to_string().contains("100 bytes"), "{err}");
            assert_eq!(b.span_count(), fitting as u64, "{kind:?}");
            assert_eq!(b.page_count(), fitting as u64, "{kind:?}");
            let index = b.finish(fitting as u64);
            assert_eq!(Index::decode(&index.encode()).unwrap(), index);
            for i in 0..fitting {
                assert_eq!(index.search(&key(i)).map(|s| s.first), Some(i as u64));
            }
        }
        // The engine's limit is the decoder's: key end offsets are u32.
        assert_eq!(
            IndexBuilder::new(IndexType::Ordinary).key_bytes_max,
            u32::MAX as usize
        );
        assert_eq!(key_end(0, KEY_BYTES_MAX, KEY_BYTES_MAX), Some(u32::MAX));
        assert_eq!(key_end(1, KEY_BYTES_MAX, KEY_BYTES_MAX), None);
        assert_eq!(key_end(usize::MAX, 1, KEY_BYTES_MAX), None);
    }

    #[test]
    fn empty_index() {
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            let index = IndexBuilder::new(kind).finish(0);
            assert_eq!(index.search(b"x"), None);
            assert_eq!(index.search(b""), None);
            assert_eq!(index.page_count(), 0);
            assert_eq!(index.span_count(), 0);
            let decoded = Index::decode(&index.encode()).unwrap();
            assert_eq!(decoded, index);
        }
    }

    #[test]
    fn round_trip_both_kinds() {
        let spans = clashing_spans();
        let mut rng = Rng::new(99);
        let probes: Vec<Vec<u8>> = (0..200).map(|i| random_key(&mut rng, i % 20)).collect();
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            let index = build(kind, &spans);
            let bytes = index.encode();
            assert_eq!(bytes.len(), index.encoded_len());
            let decoded = Index::decode(&bytes).unwrap();
            assert_eq!(decoded, index);
            assert_eq!(decoded.kind(), kind);
            assert_eq!(decoded.entry_count(), index.entry_count());
            for k in spans.iter().flat_map(|s| &s.keys).chain(&probes) {
                assert_eq!(decoded.search(k), index.search(k));
            }
        }
    }

    /// Small valid encodings of both kinds, with clashes and overflow pages.
    fn small_encodings() -> Vec<Vec<u8>> {
        let spans = chop(
            &[
                vec![],
                vec![0],
                b"aaaaaaaa1".to_vec(),
                b"aaaaaaaa2".to_vec(),
                b"aaaaaaaa3".to_vec(),
                b"b".to_vec(),
                b"c".to_vec(),
            ],
            &[(2, 1), (1, 2), (1, 1), (1, 1), (2, 1)],
        );
        let mut out = Vec::new();
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            out.push(build(kind, &spans).encode());
            out.push(build(kind, &clashing_spans()[..6]).encode());
        }
        out
    }

    #[test]
    fn decode_every_truncation_fails() {
        let mut encodings = small_encodings();
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            encodings.push(build(kind, &clashing_spans()).encode());
        }
        for bytes in encodings {
            assert!(Index::decode(&bytes).is_ok());
            for len in 0..bytes.len() {
                assert!(
                    Index::decode(&bytes[..len]).is_err(),
                    "prefix {len} decoded"
                );
            }
        }
    }

    #[test]
    fn decode_single_bit_flips_never_panic() {
        let mut rng = Rng::new(5);
        let probes: Vec<Vec<u8>> = (0..30)
            .map(|i| random_key(&mut rng, i % 12))
            .chain([b"aaaaaaaa2".to_vec(), vec![0], vec![0, 0]])
            .collect();
        let mut accepted = 0;
        for bytes in small_encodings() {
            for bit in 0..bytes.len() * 8 {
                let mut flipped = bytes.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                if let Ok(index) = Index::decode(&flipped) {
                    accepted += 1;
                    exercise(&index, &probes);
                    // The encoding is canonical.
                    assert_eq!(index.encode(), flipped);
                }
            }
        }
        // Flips of key bytes and entry counts are undetectable; most others are caught.
        assert!(accepted > 0);
    }

    #[test]
    fn decode_rejects_bad_headers() {
        let good = small_encodings().remove(0);
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        assert!(matches!(
            Index::decode(&bad_magic),
            Err(Error::Corrupt { .. })
        ));
        let mut bad_version = good.clone();
        bad_version[8] = 2;
        assert!(matches!(
            Index::decode(&bad_version),
            Err(Error::UnsupportedVersion {
                found: 2,
                supported: 1,
                ..
            })
        ));
        let mut bad_kind = good.clone();
        bad_kind[12] = 2;
        assert!(Index::decode(&bad_kind).is_err());
        let mut trailing = good;
        trailing.push(0);
        assert!(Index::decode(&trailing).is_err());
    }

    /// The encoding of a tiny compact index with one clash and one overflow page, by hand.
    #[test]
    fn compact_layout_by_hand() {
        let mut b = IndexBuilder::new(IndexType::Compact);
        b.push_span(b"ab", b"abc", 1).unwrap(); // page 0, primary "ab" + 6 zero bytes
        b.push_span(b"abd", b"abd", 2).unwrap(); // pages 1-2: "abc" and "abd" differ, no clash
        b.push_span(b"abe", b"abe", 1).unwrap(); // page 3
        let index = b.finish(4);
        let p = |k: &[u8]| primary(k).to_le_bytes();
        let mut want = Vec::new();
        want.extend_from_slice(b"CRNINDEX");
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&0u32.to_le_bytes());
        want.extend_from_slice(&4u64.to_le_bytes());
        for k in [&b"ab"[..], b"abd", b"abd", b"abe"] {
            want.extend_from_slice(&p(k));
        }
        want.extend_from_slice(&0b0100u64.to_le_bytes()); // clash: overflow page 2
        want.extend_from_slice(&0b0100u64.to_le_bytes()); // ltp: page 2
        want.extend_from_slice(&0u64.to_le_bytes()); // no tie-breakers
        want.extend_from_slice(&4u64.to_le_bytes()); // page_count
        want.extend_from_slice(&4u64.to_le_bytes()); // entry_count
        assert_eq!(index.encode(), want);

        // Spans whose first key shares its primary with the previous span's last key.
        let mut b = IndexBuilder::new(IndexType::Compact);
        b.push_span(b"k", b"keyfirst-a", 1).unwrap(); // page 0
        b.push_span(b"keyfirst-b", b"keyfirst-b", 1).unwrap(); // page 1: clash
        let index = b.finish(2);
        let mut want = Vec::new();
        want.extend_from_slice(b"CRNINDEX");
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&0u32.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&p(b"k"));
        want.extend_from_slice(&p(b"keyfirst"));
        want.extend_from_slice(&0b10u64.to_le_bytes()); // clash: page 1
        want.extend_from_slice(&0u64.to_le_bytes()); // ltp: none
        want.extend_from_slice(&1u64.to_le_bytes()); // one tie-breaker
        want.extend_from_slice(&1u64.to_le_bytes()); // its page
        want.extend_from_slice(&10u16.to_le_bytes());
        want.extend_from_slice(b"keyfirst-b");
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        assert_eq!(index.encode(), want);
        assert_eq!(index.search(b"keyfirst-a").map(|s| s.first), Some(0));
        assert_eq!(index.search(b"keyfirst-b").map(|s| s.first), Some(1));
    }

    #[test]
    fn ordinary_layout_by_hand() {
        let mut b = IndexBuilder::new(IndexType::Ordinary);
        b.push_span(b"a", b"b", 1).unwrap();
        b.push_span(b"c", b"c", 3).unwrap();
        let index = b.finish(3);
        let mut want = Vec::new();
        want.extend_from_slice(b"CRNINDEX");
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&0u64.to_le_bytes());
        want.extend_from_slice(&1u16.to_le_bytes());
        want.extend_from_slice(b"b");
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(&1u16.to_le_bytes());
        want.extend_from_slice(b"c");
        want.extend_from_slice(&4u64.to_le_bytes());
        want.extend_from_slice(&3u64.to_le_bytes());
        assert_eq!(index.encode(), want);
        assert_eq!(index.search(b"bb"), Some(PageSpan { first: 1, last: 3 }));
        assert_eq!(index.search(b"d"), None);
    }

    #[test]
    fn write_to_uses_bounded_chunks() {
        let mut rng = Rng::new(1);
        let mut keys: Vec<Vec<u8>> = (0..20_000).map(|_| random_key(&mut rng, 16)).collect();
        keys.sort();
        keys.dedup();
        let spans = chop(&keys, &[(1, 1), (1, 2)]);
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            let index = build(kind, &spans);
            let mut out = Vec::new();
            let mut chunks = 0;
            index
                .write_to(&mut |c| {
                    assert!(!c.is_empty() && c.len() <= CHUNK_MAX);
                    chunks += 1;
                    out.extend_from_slice(c);
                    Ok(())
                })
                .unwrap();
            assert!(chunks > 2);
            assert_eq!(out, index.encode());
            assert_eq!(out.len(), index.encoded_len());
            // A failing sink stops the write with its error.
            let err = index.write_to(&mut |_| Err(Error::corrupt("sink", "full")));
            assert!(err.is_err());
        }
    }

    /// Keys `key-000..key-099`, 5 per one-page span, except `key-050` alone in a 3-page span.
    fn golden_spans() -> Vec<ModelSpan> {
        let keys: Vec<Vec<u8>> = (0..100)
            .map(|i| format!("key-{i:03}").into_bytes())
            .collect();
        let mut spans = chop(&keys[..50], &[(5, 1)]);
        spans.push(ModelSpan {
            keys: vec![keys[50].clone()],
            first_page: 10,
            pages: 3,
        });
        for mut s in chop(&keys[51..], &[(5, 1)]) {
            s.first_page += 13;
            spans.push(s);
        }
        spans
    }

    fn check_golden(name: &str, bytes: &[u8]) {
        let want = crate::golden::check_golden(name, bytes);
        let index = Index::decode(&want).unwrap();
        check_index(
            &index,
            &golden_spans(),
            &[b"key-0500".to_vec(), b"zzz".to_vec()],
        );
    }

    #[test]
    fn golden_compact_v1() {
        let index = build(IndexType::Compact, &golden_spans());
        assert_eq!(index.page_count(), 23);
        assert_eq!(index.span_count(), 21);
        check_golden("index-compact-v1.bin", &index.encode());
    }

    #[test]
    fn golden_ordinary_v1() {
        let index = build(IndexType::Ordinary, &golden_spans());
        check_golden("index-ordinary-v1.bin", &index.encode());
    }

    /// The search guide of large compact indexes answers exactly as a plain binary search, for
    /// uniform keys, short low-entropy keys (many equal primaries, tie-breakers) and keys that
    /// share an 8-byte prefix (all in one bucket), with present and random probes.
    #[test]
    fn the_search_guide_answers_like_a_plain_search() {
        let mut rng = Rng::new(7);
        let families: Vec<Vec<Vec<u8>>> = vec![
            (0..20_000).map(|_| random_key(&mut rng, 34)).collect(),
            (0..20_000)
                .map(|_| {
                    let len = (rng.next_u64() % 12) as usize;
                    (0..len).map(|_| (rng.next_u64() % 2) as u8).collect()
                })
                .collect(),
            (0..20_000)
                .map(|_| {
                    let mut k = vec![9u8; 8];
                    k.extend(random_key(&mut rng, 4));
                    k
                })
                .collect(),
            // Skewed: most keys in a few buckets, the rest spread.
            (0..20_000)
                .map(|i| {
                    let mut k = random_key(&mut rng, 34);
                    if i % 4 != 0 {
                        k[0] = 0x80;
                        k[1] = 0;
                    }
                    k
                })
                .collect(),
        ];
        for mut keys in families {
            keys.sort();
            keys.dedup();
            let spans = chop(&keys, &[(1, 1), (2, 1), (1, 3), (3, 1)]);
            let index = build(IndexType::Compact, &spans);
            let Index::Compact(guided) = &index else {
                unreachable!()
            };
            if guided.page_count() >= GUIDE_PAGES_MIN as u64 {
                assert!(guided.guide_bits > 0, "{} pages", guided.page_count());
            }
            let mut plain = guided.clone();
            plain.guide = Vec::new();
            plain.guide_bits = 0;
            let probes: Vec<Vec<u8>> = (0..5_000)
                .map(|i| match i % 3 {
                    0 => random_key(&mut rng, 34),
                    1 => keys[(rng.next_u64() as usize) % keys.len()].clone(),
                    _ => {
                        let mut k = keys[(rng.next_u64() as usize) % keys.len()].clone();
                        k.push(1);
                        k
                    }
                })
                .collect();
            check_index(&index, &spans, &probes);
            for k in keys.iter().chain(&probes) {
                assert_eq!(guided.search(k), plain.search(k), "key {k:?}");
            }
            // Decoding builds the same guide.
            assert_eq!(&Index::decode(&index.encode()).unwrap(), &index);
        }
    }

    #[test]
    fn compact_memory_is_about_66_bits_per_page() {
        let mut rng = Rng::new(42);
        let mut keys: Vec<Vec<u8>> = (0..10_000).map(|_| random_key(&mut rng, 34)).collect();
        keys.sort();
        let spans = chop(&keys, &[(1, 1)]);
        let index = build(IndexType::Compact, &spans);
        let bits_per_page = index.size_bytes() as f64 * 8.0 / index.page_count() as f64;
        assert!(bits_per_page <= 70.0, "{bits_per_page} bits per page");
        let Index::Compact(c) = &index else {
            unreachable!()
        };
        assert_eq!(c.tie_breaker_count(), 0);
    }
}

//! The compact index: per page a 64-bit primary and two bits, plus tie-breakers for the rare
//! spans whose first key's primary equals the previous span's last key's; its search, encoding
//! and decoding.
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

use crate::error::{Error, Result};

use super::{key_at, key_end, push_key_checked, ChunkWriter, PageSpan, Reader, ENTRY_MIN_LEN};

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
    pub(super) span_count: u64,
    /// Entry count (statistics).
    pub(super) entry_count: u64,
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
    pub(super) fn page_count(&self) -> u64 {
        self.primaries.len() as u64
    }

    /// See [`IndexBuilder::push_span`](super::IndexBuilder::push_span); checks every limit before
    /// changing anything.
    pub(super) fn push_span(
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
    pub(super) fn build_guide(&mut self) {
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

    pub(super) fn shrink(&mut self) {
        self.prev_last_primary = None;
        self.primaries.shrink_to_fit();
        self.clash.shrink_to_fit();
        self.ltp.shrink_to_fit();
        self.tie_pages.shrink_to_fit();
        self.tie_keys.shrink_to_fit();
        self.tie_ends.shrink_to_fit();
    }

    pub(super) fn heap_bytes(&self) -> usize {
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

    /// The span whose last page is `last` (which must be a span's last page: the page before
    /// a span's first page, or the run's last page), `None` past the end. O(pages of the span
    /// / 64).
    pub(crate) fn span_ending_at(&self, last: u64) -> Option<PageSpan> {
        let last = usize::try_from(last)
            .ok()
            .filter(|&l| l < self.primaries.len())?;
        Some(page_span(self.span_start(last), last))
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

    pub(super) fn body_len(&self) -> usize {
        8 + self.primaries.len() * 8
            + (self.clash.len() + self.ltp.len()) * 8
            + 8
            + self.tie_pages.len() * ENTRY_MIN_LEN
            + self.tie_keys.len()
    }

    pub(super) fn write_body(&self, w: &mut ChunkWriter<'_>) -> Result<()> {
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

    pub(super) fn decode_body(r: &mut Reader<'_>) -> Result<CompactIndex> {
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

/// The primary of a key: its first 8 bytes read big-endian, zero-padded. Monotone in key order.
pub(crate) fn primary(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

fn page_span(first: usize, last: usize) -> PageSpan {
    PageSpan {
        first: first as u64,
        last: last as u64,
    }
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

#[cfg(test)]
mod tests {
    use super::super::tests::{build, check_index, chop, clashing_spans, random_key, Rng};
    use super::super::{Index, IndexBuilder, IndexType};
    use super::*;

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

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
//! The two kinds, their structure and their search (with why the compact one is right), are
//! documented in their own files: `compact.rs` and `ordinary.rs`.
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

mod compact;
mod ordinary;

pub use compact::CompactIndex;
// Public paths under the `fuzzing` feature, as before the split into files; nothing in the crate
// names them through this module, so without the feature they would be unused imports.
#[cfg(feature = "fuzzing")]
pub use compact::{GUIDE_PAGES_MIN, GUIDE_PAGES_PER_BUCKET};
pub use ordinary::OrdinaryIndex;

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

    /// The span whose last page is `last`, if a span ends there (for reading a run backwards).
    pub(crate) fn span_ending_at(&self, last: u64) -> Option<PageSpan> {
        match self {
            Index::Compact(c) => c.span_ending_at(last),
            Index::Ordinary(o) => o.span_ending_at(last),
        }
    }

    /// The run's last span (`None` for an index without pages).
    pub(crate) fn last_span(&self) -> Option<PageSpan> {
        self.page_count()
            .checked_sub(1)
            .and_then(|last| self.span_ending_at(last))
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
    pub(super) struct ModelSpan {
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
    pub(super) fn chop(keys: &[Vec<u8>], shapes: &[(usize, u64)]) -> Vec<ModelSpan> {
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

    pub(super) fn build(kind: IndexType, spans: &[ModelSpan]) -> Index {
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
    pub(super) fn check_index(index: &Index, spans: &[ModelSpan], probes: &[Vec<u8>]) {
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
    pub(super) type Rng = crate::fs::SplitMix64;

    /// A random key of `len` bytes.
    pub(super) fn random_key(rng: &mut Rng, len: usize) -> Vec<u8> {
        (0..len).map(|_| rng.next_u64() as u8).collect()
    }

    /// Keys that clash heavily: a shared 8-byte prefix, short keys whose zero padding collides,
    /// and some uniform keys in between.
    pub(super) fn clashing_spans() -> Vec<ModelSpan> {
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
}

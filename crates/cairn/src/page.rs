//! The 4 KiB page format of a run's key/ops file, built by [`PageBuilder`] and searched in place
//! by [`PageView`].
//!
//! Owns: the byte layout of pages and spans (documented byte by byte in `docs/format/page.md`),
//! the size limits that follow from it ([`KEY_SIZE_MAX`], [`VALUE_SIZE_MAX`]), the encoder
//! ([`PageBuilder`]), the zero-copy reader ([`PageView`]), the header-only [`span_pages`] used by
//! sequential readers, and the full checker [`validate`].
//!
//! May call: the standard library and [`crate::error`]. Must never touch: files, I/O buffers,
//! caches, run metadata or any other engine structure. The caller reads the bytes (aligned, from
//! disk or cache) and hands them in; this module only interprets them.
//!
//! A run's key/ops file is a sequence of pages sorted by key. A page holds one or more entries;
//! an entry whose value does not fit sits alone on its page and its value continues on raw
//! *overflow pages* (the last one zero-padded). The first page plus its overflow pages form a
//! *span*. Keys always lie entirely in the first page of their span (hence [`KEY_SIZE_MAX`]).
//!
//! Versioning: pages carry no magic or version of their own (8 bytes per page would be pure
//! overhead); the run file that contains them records [`PAGE_FORMAT_VERSION`] in its own
//! versioned header, and a reader must refuse a run whose page format version it does not know.
//!
//! Decoding is total: [`PageView::new`] checks the header in O(1); every accessor checks each
//! offset it reads and returns [`Error::Corrupt`] rather than panicking or reading out of bounds.
//! A corrupt page can make a lookup return a wrong answer (e.g. unsorted keys), never a panic;
//! [`validate`] detects every deviation from the format.
//!
//! Cost sketch (hot path): a point lookup reads one 4 KiB page (one aligned read, already in
//! memory when the page is cached), builds a [`PageView`] (reads the 8-byte header, a handful of
//! integer checks) and binary-searches it: with the UTxO shape (34-byte keys, 60-byte values,
//! 41 entries per page) that is ~log2(41) = 6 key comparisons, each reading two `u16` offsets
//! plus the key bytes (one or two 64-byte cache lines), i.e. ~12-18 cache lines of one page and
//! no allocation. Building a page copies each entry twice (into the builder, then into the output
//! page) and costs O(entries + bytes).

use std::cmp::Ordering;
use std::fmt;

use crate::error::{Error, Result};

/// Bytes in a page. Spans are whole multiples of it.
pub const PAGE_BYTES: usize = 4096;

/// The page format version, recorded by the containing run file (pages have no header magic).
pub const PAGE_FORMAT_VERSION: u32 = 1;

/// Largest key: must fit on a page together with the largest header of a one-entry page with a
/// blob (26 bytes, see `docs/format/page.md`), leaving 6 bytes of slack: 4096 - 32.
pub const KEY_SIZE_MAX: usize = 4064;

/// Largest value: `values_end` is a `u32` and a value starts within the first page, so any value
/// up to `u32::MAX - 4096` bytes is encodable; the limit keeps one more page of margin.
pub const VALUE_SIZE_MAX: usize = (u32::MAX as usize) - 2 * PAGE_BYTES;

/// The fixed part of the page header: `n`, `n_blobs`, `values_end`.
const HEADER_FIXED_BYTES: usize = 8;

/// Name of this structure in [`Error::Corrupt`].
const WHAT: &str = "page";

/// Bytes of a page before its keys: the fixed header plus the per-entry arrays.
const fn header_len(n: usize, n_blobs: usize) -> usize {
    HEADER_FIXED_BYTES + n.div_ceil(4) + n.div_ceil(8) + 12 * n_blobs + 4 * n
}

const _: () = assert!(header_len(1, 1) + KEY_SIZE_MAX <= PAGE_BYTES);
const _: () = assert!(PAGE_BYTES + VALUE_SIZE_MAX <= u32::MAX as usize);

/// The operation an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Sets the key's value (replacing any older one); may carry a blob reference.
    Insert,
    /// Combines the value with the older value of the key (resolved by the table's merge).
    Upsert,
    /// Removes the key; the value is empty.
    Delete,
}

impl Op {
    /// The 2-bit code stored in the page.
    const fn code(self) -> u8 {
        match self {
            Op::Insert => 0,
            Op::Upsert => 1,
            Op::Delete => 2,
        }
    }

    /// Decodes a 2-bit code; 3 is invalid.
    const fn from_code(code: u8) -> Option<Op> {
        match code {
            0 => Some(Op::Insert),
            1 => Some(Op::Upsert),
            2 => Some(Op::Delete),
            _ => None,
        }
    }
}

/// A reference to a blob in the run's blob file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlobSpan {
    /// Byte offset of the blob in the blob file.
    pub offset: u64,
    /// Length of the blob in bytes.
    pub len: u32,
}

/// One entry, borrowed from a page (or handed to [`PageBuilder::push`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The operation.
    pub op: Op,
    /// The value (empty for [`Op::Delete`]).
    pub value: &'a [u8],
    /// The blob reference (only with [`Op::Insert`]).
    pub blob: Option<BlobSpan>,
}

/// Accumulates the entries of one page (one span).
///
/// Typical use: for each entry in key order, `if !b.fits(..) { b.finish_into(&mut out); }`
/// then `b.push(entry)`; at the end, `finish_into` once more if the builder is not empty.
#[derive(Debug, Default)]
pub struct PageBuilder {
    /// All keys, concatenated.
    keys: Vec<u8>,
    /// End of key i in `keys`.
    key_ends: Vec<usize>,
    /// All values, concatenated.
    values: Vec<u8>,
    /// End of value i in `values`.
    value_ends: Vec<usize>,
    /// Operation and blob of entry i.
    meta: Vec<(Op, Option<BlobSpan>)>,
    /// Entries with a blob.
    n_blobs: usize,
}

impl PageBuilder {
    /// An empty builder.
    pub fn new() -> PageBuilder {
        PageBuilder::default()
    }

    /// Whether no entry was pushed since creation or the last [`finish_into`](Self::finish_into).
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Entries pushed so far.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Bytes of the encoded span before padding (`values_end`); 0 when empty.
    fn encoded_len(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        header_len(self.len(), self.n_blobs) + self.keys.len() + self.values.len()
    }

    /// Pages [`finish_into`](Self::finish_into) would append now (0 when empty).
    pub fn pages(&self) -> u64 {
        self.encoded_len().div_ceil(PAGE_BYTES) as u64
    }

    /// Whether the entry fits in the page being built. An empty builder accepts any entry (a value
    /// too large for the page spills onto overflow pages); a non-empty one accepts it only if the
    /// whole page, including the new entry, fits in [`PAGE_BYTES`].
    pub fn fits(&self, key_len: usize, value_len: usize, has_blob: bool) -> bool {
        if self.is_empty() {
            return true;
        }
        let total = header_len(self.len() + 1, self.n_blobs + usize::from(has_blob))
            .saturating_add(self.keys.len())
            .saturating_add(key_len)
            .saturating_add(self.values.len())
            .saturating_add(value_len);
        total <= PAGE_BYTES
    }

    /// Adds an entry. Callers check [`fits`](Self::fits) first and keep keys strictly increasing
    /// (both debug-asserted). A blob only with [`Op::Insert`]; [`Op::Delete`] has an empty value
    /// (debug-asserted).
    ///
    /// # Panics
    /// If the key is longer than [`KEY_SIZE_MAX`] or the value longer than [`VALUE_SIZE_MAX`]
    /// (the engine rejects those at its API; encoding them would write a corrupt run).
    #[inline]
    pub fn push(&mut self, entry: EntryRef<'_>) {
        assert!(
            entry.key.len() <= KEY_SIZE_MAX,
            "key of {} bytes exceeds KEY_SIZE_MAX",
            entry.key.len()
        );
        assert!(
            entry.value.len() <= VALUE_SIZE_MAX,
            "value of {} bytes exceeds VALUE_SIZE_MAX",
            entry.value.len()
        );
        debug_assert!(
            self.fits(entry.key.len(), entry.value.len(), entry.blob.is_some()),
            "entry does not fit in the page"
        );
        debug_assert!(
            self.last_key().is_none_or(|last| last < entry.key),
            "keys must be strictly increasing"
        );
        debug_assert!(
            entry.blob.is_none() || entry.op == Op::Insert,
            "a blob only with Op::Insert"
        );
        debug_assert!(
            entry.op != Op::Delete || entry.value.is_empty(),
            "Op::Delete has an empty value"
        );
        self.keys.extend_from_slice(entry.key);
        self.key_ends.push(self.keys.len());
        self.values.extend_from_slice(entry.value);
        self.value_ends.push(self.values.len());
        self.meta.push((entry.op, entry.blob));
        self.n_blobs += usize::from(entry.blob.is_some());
    }

    /// Key of entry i (i < len).
    fn key_at(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.keys[start..self.key_ends[i]]
    }

    /// The smallest key pushed, if any.
    pub fn first_key(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| self.key_at(0))
    }

    /// The largest (last) key pushed, if any.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.len().checked_sub(1).map(|i| self.key_at(i))
    }

    /// Appends the encoded span to `out` (a multiple of [`PAGE_BYTES`] bytes: one page, or one
    /// page plus overflow pages), clears the builder for reuse (keeping its allocations) and
    /// returns the page count. An empty builder appends nothing and returns 0.
    #[inline]
    pub fn finish_into(&mut self, out: &mut Vec<u8>) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let n = self.len();
        let n_blobs = self.n_blobs;
        let header_end = header_len(n, n_blobs);
        let values_end = self.encoded_len();
        debug_assert!(n == 1 || values_end <= PAGE_BYTES);
        let pages = values_end.div_ceil(PAGE_BYTES);
        let base = out.len();
        out.resize(base + pages * PAGE_BYTES, 0);
        let page = &mut out[base..];

        // Limits asserted in push: n <= ~940 and values_end <= u32::MAX.
        page[0..2].copy_from_slice(&(n as u16).to_le_bytes());
        page[2..4].copy_from_slice(&(n_blobs as u16).to_le_bytes());
        page[4..8].copy_from_slice(&(values_end as u32).to_le_bytes());

        let ops_off = HEADER_FIXED_BYTES;
        let bitmap_off = ops_off + n.div_ceil(4);
        let blob_offsets_off = bitmap_off + n.div_ceil(8);
        let blob_lens_off = blob_offsets_off + 8 * n_blobs;
        let offs_off = blob_lens_off + 4 * n_blobs;
        let keys_off = offs_off + 4 * n;
        debug_assert_eq!(keys_off, header_end);
        let values_off = keys_off + self.keys.len();

        let mut slot = 0;
        for (i, &(op, blob)) in self.meta.iter().enumerate() {
            page[ops_off + i / 4] |= op.code() << (2 * (i % 4));
            if let Some(b) = blob {
                page[bitmap_off + i / 8] |= 1 << (i % 8);
                let o = blob_offsets_off + 8 * slot;
                page[o..o + 8].copy_from_slice(&b.offset.to_le_bytes());
                let l = blob_lens_off + 4 * slot;
                page[l..l + 4].copy_from_slice(&b.len.to_le_bytes());
                slot += 1;
            }
            let key_start = keys_off + if i == 0 { 0 } else { self.key_ends[i - 1] };
            let value_start = values_off + if i == 0 { 0 } else { self.value_ends[i - 1] };
            let ko = offs_off + 2 * i;
            page[ko..ko + 2].copy_from_slice(&(key_start as u16).to_le_bytes());
            let vo = offs_off + 2 * (n + i);
            page[vo..vo + 2].copy_from_slice(&(value_start as u16).to_le_bytes());
        }
        page[keys_off..values_off].copy_from_slice(&self.keys);
        page[values_off..values_end].copy_from_slice(&self.values);

        self.keys.clear();
        self.key_ends.clear();
        self.values.clear();
        self.value_ends.clear();
        self.meta.clear();
        self.n_blobs = 0;
        pages as u64
    }
}

/// Pages a single-entry span needs for an entry of these sizes (1 if it fits in one page).
pub fn pages_for_single_entry(key_len: usize, value_len: usize, has_blob: bool) -> u64 {
    let total = header_len(1, usize::from(has_blob))
        .saturating_add(key_len)
        .saturating_add(value_len);
    total.div_ceil(PAGE_BYTES) as u64
}

/// The checked fields of a page header.
#[derive(Clone, Copy, Debug)]
struct Header {
    n: usize,
    n_blobs: usize,
    values_end: usize,
    header_end: usize,
}

/// Reads and checks the 8-byte header (everything checkable without the rest of the page).
fn parse_header(bytes: &[u8]) -> Result<Header> {
    let Some(h) = bytes.get(..HEADER_FIXED_BYTES) else {
        return Err(Error::corrupt(
            WHAT,
            format!("{} bytes, shorter than the page header", bytes.len()),
        ));
    };
    let n = usize::from(u16::from_le_bytes([h[0], h[1]]));
    let n_blobs = usize::from(u16::from_le_bytes([h[2], h[3]]));
    let values_end = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let values_end = usize::try_from(values_end)
        .map_err(|_| Error::corrupt(WHAT, format!("values_end {values_end} overflows usize")))?;
    if n == 0 {
        return Err(Error::corrupt(WHAT, "page has no entries"));
    }
    if n_blobs > n {
        return Err(Error::corrupt(
            WHAT,
            format!("{n_blobs} blobs for {n} entries"),
        ));
    }
    if values_end > PAGE_BYTES && n > 1 {
        return Err(Error::corrupt(
            WHAT,
            format!("values_end {values_end} beyond the page with {n} entries"),
        ));
    }
    let header_end = header_len(n, n_blobs);
    if header_end > PAGE_BYTES || header_end > values_end {
        return Err(Error::corrupt(
            WHAT,
            format!(
                "header of {header_end} bytes for {n} entries does not fit (values_end {values_end})"
            ),
        ));
    }
    Ok(Header {
        n,
        n_blobs,
        values_end,
        header_end,
    })
}

/// Pages in the span that starts with this page (reads only the header of the first page):
/// `ceil(values_end / PAGE_BYTES)`, at least 1. Used by sequential readers to know how much to
/// read. Errors on a header [`PageView::new`] would reject (whatever the length of the rest).
pub fn span_pages(first_page: &[u8]) -> Result<u64> {
    let h = parse_header(first_page)?;
    Ok(h.values_end.div_ceil(PAGE_BYTES).max(1) as u64)
}

/// A span read from disk, viewed in place.
///
/// Construction is O(1): it checks the header and that the fixed arrays lie inside the first
/// page. Accessors check every offset they read and return [`Error::Corrupt`] instead of
/// panicking or reading out of bounds. Bytes past the end of the span are ignored.
#[derive(Clone, Copy)]
pub struct PageView<'a> {
    /// The span (at least `max(PAGE_BYTES, values_end)` bytes).
    bytes: &'a [u8],
    /// Entries (>= 1).
    n: usize,
    /// Entries with a blob (<= n).
    n_blobs: usize,
    /// One past the last value byte (<= bytes.len()).
    values_end: usize,
    /// Keys start here; the arrays before it lie in the first page.
    header_end: usize,
    /// Where keys may end: min(values_end, PAGE_BYTES).
    first_page_end: usize,
    /// Start of the blob bitmap.
    bitmap_off: usize,
    /// Start of the blob offsets (then the blob lengths).
    blob_off: usize,
    /// Start of the 2n u16 offsets (key starts, then value starts).
    offs_off: usize,
}

impl fmt::Debug for PageView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageView")
            .field("span_bytes", &self.bytes.len())
            .field("n", &self.n)
            .field("n_blobs", &self.n_blobs)
            .field("values_end", &self.values_end)
            .finish()
    }
}

impl<'a> PageView<'a> {
    /// Views `bytes`, the span: [`PAGE_BYTES`], or more for a page with overflow pages. Errors if
    /// `bytes` is shorter than a page, if n == 0, if n_blobs > n, if values_end > bytes.len(), if
    /// values_end > PAGE_BYTES while n > 1, or if the offset arrays do not fit in the first page
    /// (before values_end).
    pub fn new(bytes: &'a [u8]) -> Result<PageView<'a>> {
        if bytes.len() < PAGE_BYTES {
            return Err(Error::corrupt(
                WHAT,
                format!("span of {} bytes, shorter than a page", bytes.len()),
            ));
        }
        let h = parse_header(bytes)?;
        if h.values_end > bytes.len() {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "values_end {} beyond the span of {} bytes",
                    h.values_end,
                    bytes.len()
                ),
            ));
        }
        let bitmap_off = HEADER_FIXED_BYTES + h.n.div_ceil(4);
        let blob_off = bitmap_off + h.n.div_ceil(8);
        let offs_off = blob_off + 12 * h.n_blobs;
        Ok(PageView {
            bytes,
            n: h.n,
            n_blobs: h.n_blobs,
            values_end: h.values_end,
            header_end: h.header_end,
            first_page_end: h.values_end.min(PAGE_BYTES),
            bitmap_off,
            blob_off,
            offs_off,
        })
    }

    /// Entries in the page (>= 1).
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: a page holds at least one entry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Pages in this span (`ceil(values_end / PAGE_BYTES)`).
    pub fn span_pages(&self) -> u64 {
        self.values_end.div_ceil(PAGE_BYTES).max(1) as u64
    }

    /// The j-th u16 of the offsets array (j < 2n; the array lies in the first page).
    fn off(&self, j: usize) -> usize {
        let p = self.offs_off + 2 * j;
        usize::from(u16::from_le_bytes([self.bytes[p], self.bytes[p + 1]]))
    }

    /// Errors unless i < n.
    fn check_index(&self, i: usize) -> Result<()> {
        if i < self.n {
            Ok(())
        } else {
            Err(Error::corrupt(
                WHAT,
                format!("entry index {i} out of range ({} entries)", self.n),
            ))
        }
    }

    /// The key of entry i.
    pub fn key(&self, i: usize) -> Result<&'a [u8]> {
        self.check_index(i)?;
        // i + 1 <= n < 2n: for the last key this reads the first value offset.
        let (start, end) = (self.off(i), self.off(i + 1));
        if start < self.header_end || start > end || end > self.first_page_end {
            return Err(Error::corrupt(
                WHAT,
                format!("key {i} at bad offsets {start}..{end}"),
            ));
        }
        Ok(&self.bytes[start..end])
    }

    /// The value of entry i.
    pub fn value(&self, i: usize) -> Result<&'a [u8]> {
        self.check_index(i)?;
        let start = self.off(self.n + i);
        let end = if i + 1 < self.n {
            self.off(self.n + i + 1)
        } else {
            self.values_end
        };
        if start < self.header_end || start > end || end > self.values_end || start > PAGE_BYTES {
            return Err(Error::corrupt(
                WHAT,
                format!("value {i} at bad offsets {start}..{end}"),
            ));
        }
        Ok(&self.bytes[start..end])
    }

    /// The operation of entry i.
    pub fn op(&self, i: usize) -> Result<Op> {
        self.check_index(i)?;
        let code = (self.bytes[HEADER_FIXED_BYTES + i / 4] >> (2 * (i % 4))) & 3;
        Op::from_code(code)
            .ok_or_else(|| Error::corrupt(WHAT, format!("entry {i} has invalid op code {code}")))
    }

    /// The blob reference of entry i, if any.
    pub fn blob(&self, i: usize) -> Result<Option<BlobSpan>> {
        self.check_index(i)?;
        let bitmap = &self.bytes[self.bitmap_off..self.bitmap_off + self.n.div_ceil(8)];
        let byte = bitmap[i / 8];
        let bit = i % 8;
        if (byte >> bit) & 1 == 0 {
            return Ok(None);
        }
        let below: u32 = bitmap[..i / 8].iter().map(|b| b.count_ones()).sum::<u32>()
            + (byte & ((1u8 << bit) - 1)).count_ones();
        let slot = below as usize;
        if slot >= self.n_blobs {
            return Err(Error::corrupt(
                WHAT,
                format!("entry {i} has blob slot {slot} of {}", self.n_blobs),
            ));
        }
        let o = self.blob_off + 8 * slot;
        let l = self.blob_off + 8 * self.n_blobs + 4 * slot;
        let b = self.bytes;
        let offset = u64::from_le_bytes([
            b[o],
            b[o + 1],
            b[o + 2],
            b[o + 3],
            b[o + 4],
            b[o + 5],
            b[o + 6],
            b[o + 7],
        ]);
        let len = u32::from_le_bytes([b[l], b[l + 1], b[l + 2], b[l + 3]]);
        Ok(Some(BlobSpan { offset, len }))
    }

    /// Entry i. Errors also if a blob sits on a non-insert or a delete has a value.
    pub fn entry(&self, i: usize) -> Result<EntryRef<'a>> {
        let key = self.key(i)?;
        let op = self.op(i)?;
        let value = self.value(i)?;
        let blob = self.blob(i)?;
        if blob.is_some() && op != Op::Insert {
            return Err(Error::corrupt(
                WHAT,
                format!("entry {i} has a blob with {op:?}"),
            ));
        }
        if op == Op::Delete && !value.is_empty() {
            return Err(Error::corrupt(
                WHAT,
                format!("entry {i} is a delete with a {}-byte value", value.len()),
            ));
        }
        Ok(EntryRef {
            key,
            op,
            value,
            blob,
        })
    }

    /// The entries in order.
    pub fn entries(&self) -> impl Iterator<Item = Result<EntryRef<'a>>> + '_ {
        (0..self.n).map(|i| self.entry(i))
    }

    /// Binary search by key, in place. `Ok(Some(i))` if found.
    pub fn search(&self, key: &[u8]) -> Result<Option<usize>> {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid)?.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Some(mid)),
            }
        }
        Ok(None)
    }

    /// The smallest key of the page.
    pub fn first_key(&self) -> Result<&'a [u8]> {
        self.key(0)
    }

    /// The largest key of the page.
    pub fn last_key(&self) -> Result<&'a [u8]> {
        self.key(self.n - 1)
    }
}

/// Fully validates a span (every entry decodes, keys strictly increasing, offsets contiguous,
/// unused bitmap bits and padding zero, the span exactly `span_pages` pages long); used when
/// verifying runs and in tests. O(entries + span bytes).
pub fn validate(bytes: &[u8]) -> Result<()> {
    let v = PageView::new(bytes)?;
    let expected = v.values_end.div_ceil(PAGE_BYTES) * PAGE_BYTES;
    if bytes.len() != expected {
        return Err(Error::corrupt(
            WHAT,
            format!(
                "span of {} bytes, expected {expected} for values_end {}",
                bytes.len(),
                v.values_end
            ),
        ));
    }
    let n = v.n;
    let ops = &bytes[HEADER_FIXED_BYTES..v.bitmap_off];
    if n % 4 != 0 && ops[ops.len() - 1] >> (2 * (n % 4)) != 0 {
        return Err(Error::corrupt(WHAT, "unused op bits are not zero"));
    }
    let bitmap = &bytes[v.bitmap_off..v.blob_off];
    if n % 8 != 0 && bitmap[bitmap.len() - 1] >> (n % 8) != 0 {
        return Err(Error::corrupt(WHAT, "unused blob bitmap bits are not zero"));
    }
    let blobs: u32 = bitmap.iter().map(|b| b.count_ones()).sum();
    if blobs as usize != v.n_blobs {
        return Err(Error::corrupt(
            WHAT,
            format!(
                "blob bitmap has {blobs} bits set, header says {}",
                v.n_blobs
            ),
        ));
    }
    if v.off(0) != v.header_end {
        return Err(Error::corrupt(
            WHAT,
            format!(
                "keys start at {}, header ends at {}",
                v.off(0),
                v.header_end
            ),
        ));
    }
    let mut prev = v.header_end;
    for j in 0..2 * n {
        let o = v.off(j);
        if o < prev {
            return Err(Error::corrupt(
                WHAT,
                format!("offset {j} ({o}) below the previous ({prev})"),
            ));
        }
        prev = o;
    }
    let mut prev_key: Option<&[u8]> = None;
    for i in 0..n {
        let e = v.entry(i)?;
        if e.key.len() > KEY_SIZE_MAX || e.value.len() > VALUE_SIZE_MAX {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "entry {i}: {}-byte key or {}-byte value too large",
                    e.key.len(),
                    e.value.len()
                ),
            ));
        }
        if prev_key.is_some_and(|p| p >= e.key) {
            return Err(Error::corrupt(
                WHAT,
                format!("key {i} not above the previous key"),
            ));
        }
        prev_key = Some(e.key);
    }
    if bytes[v.values_end..].iter().any(|&b| b != 0) {
        return Err(Error::corrupt(WHAT, "padding is not zero"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// An owned entry for tests.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Owned {
        key: Vec<u8>,
        op: Op,
        value: Vec<u8>,
        blob: Option<BlobSpan>,
    }

    impl Owned {
        fn as_ref(&self) -> EntryRef<'_> {
            EntryRef {
                key: &self.key,
                op: self.op,
                value: &self.value,
                blob: self.blob,
            }
        }
    }

    fn owned(key: &[u8], op: Op, value: &[u8], blob: Option<BlobSpan>) -> Owned {
        Owned {
            key: key.to_vec(),
            op,
            value: value.to_vec(),
            blob,
        }
    }

    /// One built span: its byte range in the output, its page count, the entries pushed to it.
    type BuiltSpan = (std::ops::Range<usize>, u64, Vec<Owned>);

    /// Builds spans from sorted entries, filling pages with `fits`. Returns the concatenated
    /// bytes and the spans.
    fn build(entries: &[Owned]) -> (Vec<u8>, Vec<BuiltSpan>) {
        let mut out = Vec::new();
        let mut spans = Vec::new();
        let mut b = PageBuilder::new();
        let mut cur: Vec<Owned> = Vec::new();
        let mut finish = |b: &mut PageBuilder, cur: &mut Vec<Owned>, out: &mut Vec<u8>| {
            let start = out.len();
            let expected_pages = b.pages();
            let pages = b.finish_into(out);
            assert_eq!(pages, expected_pages);
            assert!(b.is_empty());
            assert_eq!(out.len() - start, pages as usize * PAGE_BYTES);
            spans.push((start..out.len(), pages, std::mem::take(cur)));
        };
        for e in entries {
            if !b.fits(e.key.len(), e.value.len(), e.blob.is_some()) {
                finish(&mut b, &mut cur, &mut out);
            }
            b.push(e.as_ref());
            cur.push(e.clone());
            assert_eq!(b.last_key(), Some(&e.key[..]));
        }
        if !b.is_empty() {
            finish(&mut b, &mut cur, &mut out);
        }
        (out, spans)
    }

    /// Bytes of a given length derived from a seed (cheap to generate for large sizes).
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(seed) ^ (j >> 8) as u8)
            .collect()
    }

    fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            20 => proptest::collection::vec(any::<u8>(), 0..=64),
            1 => (0..=KEY_SIZE_MAX, any::<u8>()).prop_map(|(len, seed)| pattern(len, seed)),
        ]
    }

    fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            20 => proptest::collection::vec(any::<u8>(), 0..=200),
            1 => (0..=20_000usize, any::<u8>()).prop_map(|(len, seed)| pattern(len, seed)),
        ]
    }

    fn entries_strategy() -> impl Strategy<Value = Vec<Owned>> {
        let rest = (
            0u8..3,
            value_strategy(),
            proptest::option::of((any::<u64>(), any::<u32>())),
        );
        proptest::collection::btree_map(key_strategy(), rest, 0..120).prop_map(|m| {
            m.into_iter()
                .map(|(key, (op, value, blob))| match op {
                    0 => Owned {
                        key,
                        op: Op::Insert,
                        value,
                        blob: blob.map(|(offset, len)| BlobSpan { offset, len }),
                    },
                    1 => Owned {
                        key,
                        op: Op::Upsert,
                        value,
                        blob: None,
                    },
                    _ => Owned {
                        key,
                        op: Op::Delete,
                        value: Vec::new(),
                        blob: None,
                    },
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn round_trip(entries in entries_strategy(), absent in proptest::collection::vec(key_strategy(), 0..8)) {
            let (out, spans) = build(&entries);
            let all: BTreeMap<&[u8], ()> = entries.iter().map(|e| (&e.key[..], ())).collect();
            for (range, pages, pushed) in &spans {
                let bytes = &out[range.clone()];
                validate(bytes).unwrap();
                prop_assert_eq!(span_pages(bytes).unwrap(), *pages);
                if pushed.len() > 1 {
                    prop_assert_eq!(*pages, 1);
                } else {
                    let e = &pushed[0];
                    prop_assert_eq!(*pages, pages_for_single_entry(e.key.len(), e.value.len(), e.blob.is_some()));
                }
                let v = PageView::new(bytes).unwrap();
                prop_assert_eq!(v.len(), pushed.len());
                prop_assert_eq!(v.span_pages(), *pages);
                prop_assert_eq!(v.first_key().unwrap(), &pushed[0].key[..]);
                prop_assert_eq!(v.last_key().unwrap(), &pushed[pushed.len() - 1].key[..]);
                for (i, e) in pushed.iter().enumerate() {
                    prop_assert_eq!(v.entry(i).unwrap(), e.as_ref());
                    prop_assert_eq!(v.key(i).unwrap(), &e.key[..]);
                }
                prop_assert!(v.entry(pushed.len()).is_err());
                let listed: Vec<EntryRef<'_>> = v.entries().collect::<Result<_>>().unwrap();
                prop_assert_eq!(listed.len(), pushed.len());
                // Every key of the whole set: found here iff pushed to this span.
                for e in &entries {
                    let here = pushed.iter().position(|p| p.key == e.key);
                    prop_assert_eq!(v.search(&e.key).unwrap(), here);
                }
                for k in &absent {
                    if !all.contains_key(&k[..]) {
                        prop_assert_eq!(v.search(k).unwrap(), None);
                    }
                }
            }
            // Spans are sorted and disjoint in key order.
            for w in spans.windows(2) {
                prop_assert!(w[0].2.last().unwrap().key < w[1].2[0].key);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=3 * PAGE_BYTES)) {
            exercise(&bytes);
        }

        /// Random bytes behind a plausible header, so accessors get past `PageView::new`.
        #[test]
        fn plausible_header_never_panics(
            n in 1u16..=60,
            n_blobs in 0u16..=60,
            values_end in 0u32..=3 * PAGE_BYTES as u32,
            pages in 1usize..=3,
            seed in any::<u64>(),
        ) {
            let mut bytes = vec![0u8; pages * PAGE_BYTES];
            let mut x = seed | 1;
            for b in bytes.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            bytes[0..2].copy_from_slice(&n.to_le_bytes());
            bytes[2..4].copy_from_slice(&n_blobs.min(n).to_le_bytes());
            bytes[4..8].copy_from_slice(&values_end.to_le_bytes());
            exercise(&bytes);
            // Offsets pointing into a small region make keys decodable more often.
            let h = header_len(usize::from(n), usize::from(n_blobs.min(n)));
            if h < PAGE_BYTES {
                let offs = h - 4 * usize::from(n);
                for j in 0..2 * usize::from(n) {
                    let o = (h + (bytes[offs + 2 * j] as usize % 64)) as u16;
                    bytes[offs + 2 * j..offs + 2 * j + 2].copy_from_slice(&o.to_le_bytes());
                }
                exercise(&bytes);
            }
        }
    }

    /// Runs every decoder and accessor; results are ignored, panics fail the test.
    fn exercise(bytes: &[u8]) {
        let _ = span_pages(bytes);
        let _ = validate(bytes);
        if let Ok(v) = PageView::new(bytes) {
            let _ = format!("{v:?}");
            let _ = v.first_key();
            let _ = v.last_key();
            let _ = v.span_pages();
            for i in 0..=v.len() {
                let _ = v.key(i);
                let _ = v.value(i);
                let _ = v.op(i);
                let _ = v.blob(i);
                if let Ok(e) = v.entry(i) {
                    let _ = v.search(e.key);
                }
            }
            let _ = v.entries().count();
            let _ = v.search(b"");
            let _ = v.search(&[0xff; 40]);
            let _ = v.search(b"m");
        }
    }

    /// A multi-entry page (with blobs and all ops) and an overflow span.
    fn sample_spans() -> (Vec<u8>, Vec<u8>) {
        let mut entries = Vec::new();
        for i in 0u32..30 {
            let key = format!("key-{i:04}").into_bytes();
            let (op, value, blob) = match i % 4 {
                0 => (
                    Op::Insert,
                    pattern(i as usize, 1),
                    Some(BlobSpan {
                        offset: u64::from(i) * 1000,
                        len: i,
                    }),
                ),
                1 => (Op::Upsert, pattern(2 * i as usize, 2), None),
                2 => (Op::Delete, Vec::new(), None),
                _ => (Op::Insert, pattern(3, 3), None),
            };
            entries.push(owned(&key, op, &value, blob));
        }
        let (page, spans) = build(&entries);
        assert_eq!(spans.len(), 1);
        let (overflow, spans) = build(&[owned(
            b"big",
            Op::Insert,
            &pattern(6000, 9),
            Some(BlobSpan { offset: 1, len: 2 }),
        )]);
        assert_eq!(spans[0].1, 2);
        (page, overflow)
    }

    #[test]
    fn truncations_never_panic() {
        let (page, overflow) = sample_spans();
        for bytes in [&page, &overflow] {
            validate(bytes).unwrap();
            for len in 0..bytes.len() {
                let t = &bytes[..len];
                assert!(validate(t).is_err());
                exercise(t);
            }
        }
    }

    #[test]
    fn bit_flips_never_panic() {
        let (page, overflow) = sample_spans();
        for bytes in [page, overflow] {
            let mut bytes = bytes.clone();
            for bit in 0..bytes.len() * 8 {
                bytes[bit / 8] ^= 1 << (bit % 8);
                exercise(&bytes);
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }

    #[test]
    fn utxo_density() {
        let mut b = PageBuilder::new();
        let value = [0x42u8; 60];
        let mut i = 0u64;
        loop {
            let mut key = [0u8; 34];
            key[26..].copy_from_slice(&i.to_be_bytes());
            if !b.is_empty() && !b.fits(34, 60, false) {
                break;
            }
            b.push(EntryRef {
                key: &key,
                op: Op::Insert,
                value: &value,
                blob: None,
            });
            i += 1;
        }
        assert_eq!(b.len(), 41, "UTxO entries per page");
        let mut out = Vec::new();
        assert_eq!(b.finish_into(&mut out), 1);
        validate(&out).unwrap();
        assert_eq!(PageView::new(&out).unwrap().len(), 41);
    }

    #[test]
    fn key_size_max_with_blob_fits_one_page() {
        let key = pattern(KEY_SIZE_MAX, 5);
        assert_eq!(pages_for_single_entry(KEY_SIZE_MAX, 0, true), 1);
        let e = owned(&key, Op::Insert, b"", Some(BlobSpan { offset: 9, len: 9 }));
        let (out, spans) = build(std::slice::from_ref(&e));
        assert_eq!(spans[0].1, 1);
        assert_eq!(out.len(), PAGE_BYTES);
        validate(&out).unwrap();
        assert_eq!(PageView::new(&out).unwrap().entry(0).unwrap(), e.as_ref());
    }

    #[test]
    fn largest_single_page_value_and_one_more() {
        for (key_len, has_blob) in [(0, false), (8, false), (34, true), (KEY_SIZE_MAX, true)] {
            let largest = PAGE_BYTES - header_len(1, usize::from(has_blob)) - key_len;
            let blob = has_blob.then_some(BlobSpan { offset: 0, len: 0 });
            for (len, pages) in [(largest, 1), (largest + 1, 2)] {
                assert_eq!(pages_for_single_entry(key_len, len, has_blob), pages);
                let e = owned(&pattern(key_len, 1), Op::Insert, &pattern(len, 2), blob);
                let (out, spans) = build(std::slice::from_ref(&e));
                assert_eq!(spans[0].1, pages);
                assert_eq!(out.len(), pages as usize * PAGE_BYTES);
                assert_eq!(span_pages(&out).unwrap(), pages);
                validate(&out).unwrap();
                assert_eq!(PageView::new(&out).unwrap().entry(0).unwrap(), e.as_ref());
            }
        }
        assert_eq!(PAGE_BYTES - header_len(1, 0) - 8, 4074);
    }

    #[test]
    fn fits_is_exact() {
        // Two entries whose total is exactly one page, then one more byte does not fit.
        let mut b = PageBuilder::new();
        assert!(
            b.fits(usize::MAX, usize::MAX, true),
            "an empty builder accepts anything"
        );
        b.push(EntryRef {
            key: b"a",
            op: Op::Upsert,
            value: b"",
            blob: None,
        });
        let room = PAGE_BYTES - header_len(2, 0) - 1 - 1; // key "a", key "b"
        assert!(b.fits(1, room, false));
        assert!(!b.fits(1, room + 1, false));
        assert!(!b.fits(1, room - 11, true));
        assert!(b.fits(1, room - 12, true));
        b.push(EntryRef {
            key: b"b",
            op: Op::Upsert,
            value: &pattern(room, 0),
            blob: None,
        });
        let mut out = Vec::new();
        assert_eq!(b.finish_into(&mut out), 1);
        validate(&out).unwrap();
        let v = PageView::new(&out).unwrap();
        assert_eq!(v.values_end, PAGE_BYTES);
        // A single overflow entry accepts nothing more.
        b.push(EntryRef {
            key: b"c",
            op: Op::Insert,
            value: &pattern(5000, 0),
            blob: None,
        });
        assert!(!b.fits(0, 0, false));
    }

    #[test]
    fn builder_reuse_gives_identical_output() {
        let entries: Vec<Owned> = (0..10u8)
            .map(|i| owned(&[b'k', i], Op::Upsert, &[i; 7], None))
            .collect();
        let mut b = PageBuilder::new();
        let mut first = Vec::new();
        let mut second = Vec::new();
        for out in [&mut first, &mut second] {
            for e in &entries {
                b.push(e.as_ref());
            }
            assert_eq!(b.first_key(), Some(&[b'k', 0][..]));
            assert_eq!(b.finish_into(out), 1);
            assert_eq!(b.first_key(), None);
            assert_eq!(b.finish_into(out), 0, "empty builder appends nothing");
        }
        assert_eq!(first, second);
    }

    /// Writes the fixed header fields of a page.
    fn set_header(page: &mut [u8], n: u16, n_blobs: u16, values_end: u32) {
        page[0..2].copy_from_slice(&n.to_le_bytes());
        page[2..4].copy_from_slice(&n_blobs.to_le_bytes());
        page[4..8].copy_from_slice(&values_end.to_le_bytes());
    }

    #[test]
    fn header_errors() {
        let (page, overflow) = sample_spans();
        let corrupt = |bytes: &[u8]| matches!(PageView::new(bytes), Err(Error::Corrupt { .. }));
        let mut p = page.clone();
        set_header(&mut p, 0, 0, 100);
        assert!(corrupt(&p), "n == 0");
        let mut p = page.clone();
        set_header(&mut p, 2, 3, 100);
        assert!(corrupt(&p), "n_blobs > n");
        let mut p = page.clone();
        set_header(&mut p, 2, 0, PAGE_BYTES as u32 + 1);
        assert!(corrupt(&p), "values_end > PAGE_BYTES with n > 1");
        let mut p = page.clone();
        set_header(&mut p, 1000, 0, PAGE_BYTES as u32);
        assert!(corrupt(&p), "offset arrays beyond the page");
        assert!(corrupt(&overflow[..PAGE_BYTES]), "values_end > span");
        assert!(corrupt(&page[..PAGE_BYTES - 1]), "short page");
        assert_eq!(span_pages(&overflow[..8]).unwrap(), 2);
        assert!(span_pages(&overflow[..7]).is_err());
        // Extra bytes after a span are ignored by the view but rejected by validate.
        let mut longer = page.clone();
        longer.extend_from_slice(&[0; PAGE_BYTES]);
        assert_eq!(PageView::new(&longer).unwrap().len(), 30);
        assert!(validate(&longer).is_err());
    }

    #[test]
    fn validate_rejects_format_violations() {
        let mut b = PageBuilder::new();
        for (k, op) in [(b"a", Op::Insert), (b"b", Op::Upsert), (b"c", Op::Delete)] {
            let value: &[u8] = if op == Op::Delete { b"" } else { b"vv" };
            b.push(EntryRef {
                key: k,
                op,
                value,
                blob: None,
            });
        }
        let mut page = Vec::new();
        b.finish_into(&mut page);
        validate(&page).unwrap();
        let h = header_len(3, 0);
        let offs = h - 12;
        let check = |mutate: &dyn Fn(&mut Vec<u8>)| {
            let mut p = page.clone();
            mutate(&mut p);
            assert!(validate(&p).is_err());
            exercise(&p);
        };
        check(&|p| p[PAGE_BYTES - 1] = 1); // padding
        check(&|p| p[8] |= 3 << 6); // unused op bits
        check(&|p| p[8] |= 3); // op code 3 for entry 0
        check(&|p| p[9] |= 1 << 7); // unused bitmap bit
        check(&|p| p[9] |= 1); // blob bit without a blob slot
        check(&|p| p[h + 1] = b'a'); // keys "a", "a": not increasing
        check(&|p| p[offs] += 1); // keys do not start at the header end
        let mut p = page.clone();
        p[8] = (p[8] & !(3 << 2)) | (2 << 2); // "b" as delete with a value
        assert!(PageView::new(&p).unwrap().entry(1).is_err());
        assert!(validate(&p).is_err());
    }

    #[test]
    fn golden_page_v1() {
        let mut b = PageBuilder::new();
        let mut out = Vec::new();
        b.push(EntryRef {
            key: b"a",
            op: Op::Insert,
            value: b"1",
            blob: Some(BlobSpan { offset: 7, len: 3 }),
        });
        b.push(EntryRef {
            key: b"b",
            op: Op::Upsert,
            value: b"22",
            blob: None,
        });
        b.push(EntryRef {
            key: b"c",
            op: Op::Delete,
            value: b"",
            blob: None,
        });
        b.push(EntryRef {
            key: b"d",
            op: Op::Insert,
            value: b"",
            blob: None,
        });
        assert_eq!(b.finish_into(&mut out), 1);
        assert!(!b.fits(0, 5000, false) || b.is_empty());
        b.push(EntryRef {
            key: b"e",
            op: Op::Insert,
            value: &[0x5a; 5000],
            blob: None,
        });
        assert_eq!(b.finish_into(&mut out), 2);
        assert_eq!(out.len(), 3 * PAGE_BYTES);
        // The first page byte by byte (see docs/format/page.md).
        #[rustfmt::skip]
        let head: [u8; 45] = [
            4, 0,  1, 0,  45, 0, 0, 0,       // n = 4, n_blobs = 1, values_end = 45
            0b0010_0100,                     // ops: insert, upsert, delete, insert
            0b0000_0001,                     // blob bitmap: entry 0
            7, 0, 0, 0, 0, 0, 0, 0,          // blob offset 7
            3, 0, 0, 0,                      // blob length 3
            38, 0, 39, 0, 40, 0, 41, 0,      // key starts
            42, 0, 43, 0, 45, 0, 45, 0,      // value starts
            b'a', b'b', b'c', b'd',          // keys
            b'1', b'2', b'2',                // values
        ];
        assert_eq!(&out[..45], &head[..]);
        let golden = crate::golden::check_golden("page-v1.bin", &out);
        validate(&golden[..PAGE_BYTES]).unwrap();
        validate(&golden[PAGE_BYTES..]).unwrap();
        assert_eq!(span_pages(&golden[PAGE_BYTES..]).unwrap(), 2);
        let v = PageView::new(&golden[PAGE_BYTES..]).unwrap();
        assert_eq!(v.entry(0).unwrap().value, &[0x5a; 5000][..]);
        let v = PageView::new(&golden[..PAGE_BYTES]).unwrap();
        assert_eq!(v.search(b"c").unwrap(), Some(2));
        assert_eq!(
            v.entry(0).unwrap().blob,
            Some(BlobSpan { offset: 7, len: 3 })
        );
    }
}

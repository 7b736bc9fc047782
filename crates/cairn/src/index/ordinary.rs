//! The ordinary index: the last key and first page of every span, for any keys; its search,
//! encoding and decoding.
//!
//! # Ordinary index (any keys)
//!
//! For each span: its last key and its first page. `search(k)` is the first span `j` with
//! `l_j >= k` (binary search), `None` if `k` is greater than the run's last key. Keys are stored
//! concatenated in one `Vec<u8>` with a `Vec<u32>` of end offsets (no per-key allocation), so
//! memory is the key bytes plus 12 bytes per span.

use crate::error::{Error, Result};

use super::{key_at, key_end, push_key_checked, ChunkWriter, PageSpan, Reader, ENTRY_MIN_LEN};

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
    pub(super) page_count: u64,
    /// Entry count (statistics).
    pub(super) entry_count: u64,
}

impl OrdinaryIndex {
    pub(crate) fn span_count(&self) -> u64 {
        self.first_pages.len() as u64
    }

    /// See [`IndexBuilder::push_span`](super::IndexBuilder::push_span); checks every limit before
    /// changing anything.
    pub(super) fn push_span(
        &mut self,
        last_key: &[u8],
        pages: u64,
        key_bytes_max: usize,
    ) -> Result<()> {
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

    pub(super) fn shrink(&mut self) {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.first_pages.shrink_to_fit();
    }

    pub(super) fn heap_bytes(&self) -> usize {
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

    /// The span whose last page is `last` (the page before a span's first page, or the run's
    /// last page), `None` if no span ends there. O(log spans).
    pub(crate) fn span_ending_at(&self, last: u64) -> Option<PageSpan> {
        let j = self
            .first_pages
            .partition_point(|&p| p <= last)
            .checked_sub(1)?;
        let end = match self.first_pages.get(j + 1) {
            Some(&next) => next - 1,
            None => self.page_count.checked_sub(1)?,
        };
        (end == last).then_some(PageSpan {
            first: self.first_pages[j],
            last,
        })
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

    pub(super) fn body_len(&self) -> usize {
        8 + self.first_pages.len() * ENTRY_MIN_LEN + self.keys.len()
    }

    pub(super) fn write_body(&self, w: &mut ChunkWriter<'_>) -> Result<()> {
        w.put(&(self.first_pages.len() as u64).to_le_bytes())?;
        for (j, first) in self.first_pages.iter().enumerate() {
            w.put(&first.to_le_bytes())?;
            let key = self.last_key(j);
            w.put(&(key.len() as u16).to_le_bytes())?;
            w.put(key)?;
        }
        Ok(())
    }

    pub(super) fn decode_body(r: &mut Reader<'_>) -> Result<OrdinaryIndex> {
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

#[cfg(test)]
mod tests {
    use super::super::{IndexBuilder, IndexType};
    use super::*;

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
}

//! The k-way merge: one merge of sorted sources, shared by merges, cursors and unions.
//!
//! Owns: [`MergeSource`] (a sorted stream of entries with distinct keys that can be peeked at and
//! advanced), [`Head`] (a source's current entry, borrowed) and [`KMerge`] (the merge of several
//! sources given newest first). Every place that reads several sorted sources together goes
//! through [`KMerge`]: a level merge (`merge`, over run cursors), a cursor or range lookup
//! (`cursor`, over the write buffer, runs and a pending union), and a union (`union`, over the
//! resolved streams of its input tables). What differs between them is only how the entries of
//! one key are folded together, which each caller supplies.
//!
//! May call: `entry` (the newest-first fold), `page` (operation codes). Must never touch: files,
//! runs, tables or any I/O of its own (sources do their own reads).
//!
//! Costs: [`KMerge`] keeps, for every source, the first 8 bytes of its current key as a
//! big-endian integer (refreshed when the source advances, which it does only through the
//! merge). Finding the next key compares those integers (k for k sources: k is at most T + 1 = 5
//! for a level merge, and about `4 * levels + 2` for a cursor, so a linear scan beats a heap
//! here) and peeks at a source's key only where two integers tie (rare for hashed keys);
//! folding a key peeks at and advances each source from the newest holder on.

use crate::config::Resolve;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::page::Op;

/// A source's current entry, borrowed from the source.
#[derive(Debug)]
pub(crate) struct Head<'a, B> {
    /// The key.
    pub(crate) key: &'a [u8],
    /// The operation.
    pub(crate) op: Op,
    /// The value (empty for a delete).
    pub(crate) value: &'a [u8],
    /// The blob, in the source's own representation (inserts only).
    pub(crate) blob: Option<B>,
}

/// A sorted stream of entries, each key at most once, that can be peeked at and advanced.
pub(crate) trait MergeSource {
    /// How the source hands out blobs.
    type Blob;

    /// The current entry, or `None` once the source is exhausted.
    fn head(&self) -> Result<Option<Head<'_, Self::Blob>>>;

    /// Moves past the current entry (nothing happens once exhausted).
    fn advance(&mut self) -> Result<()>;
}

/// One key of a merge with its entries combined, and the number of source entries consumed.
pub(crate) type Combined<'a, B> = (&'a [u8], Entry<B>, u64);

/// The sources holding the smallest current key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// The newest source holding the key.
    pub(crate) first: usize,
    /// How many sources hold the key.
    pub(crate) holders: usize,
}

/// A merge of sorted sources, given newest first.
#[derive(Debug)]
pub(crate) struct KMerge<S> {
    sources: Vec<S>,
    /// Per source, [`key_prefix`] of its current key, `None` once it is exhausted. Kept equal to
    /// what the source's head says: sources advance only through [`KMerge::advance`] and
    /// [`KMerge::fold_group`].
    prefixes: Vec<Option<u64>>,
    /// The key of the group being folded (copied out so that sources can advance).
    key: Vec<u8>,
}

/// The first 8 bytes of `key` as a big-endian integer, zero-padded. Order-preserving but not
/// strictly: `a < b` implies `key_prefix(a) <= key_prefix(b)`, so keys with different prefixes
/// compare as their prefixes do and only equal prefixes need the keys themselves.
fn key_prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

/// The error of a merge used again after one of its sources failed to advance (its recorded key
/// prefix then no longer matches the source).
fn stale_source() -> Error {
    Error::TableBroken("a merge was used again after one of its sources failed".into())
}

fn head_prefix<S: MergeSource>(source: &S) -> Result<Option<u64>> {
    Ok(source.head()?.map(|head| key_prefix(head.key)))
}

impl<S: MergeSource> KMerge<S> {
    /// A merge of `sources`, newest first. Cost: one peek per source.
    pub(crate) fn new(sources: Vec<S>) -> Result<KMerge<S>> {
        let prefixes = sources.iter().map(head_prefix).collect::<Result<_>>()?;
        Ok(KMerge {
            sources,
            prefixes,
            key: Vec::new(),
        })
    }

    /// A merge of no sources.
    pub(crate) fn empty() -> KMerge<S> {
        KMerge {
            sources: Vec::new(),
            prefixes: Vec::new(),
            key: Vec::new(),
        }
    }

    /// The sources, newest first.
    pub(crate) fn sources(&self) -> &[S] {
        &self.sources
    }

    /// Whether every source is exhausted. Cost: O(k), no peek.
    pub(crate) fn is_exhausted(&self) -> bool {
        self.prefixes.iter().all(Option::is_none)
    }

    /// Moves source `i` past its current entry (a group with one holder needs no fold).
    pub(crate) fn advance(&mut self, i: usize) -> Result<()> {
        let source = &mut self.sources[i];
        source.advance()?;
        self.prefixes[i] = head_prefix(source)?;
        Ok(())
    }

    /// The sources holding the smallest current key, or `None` when every source is exhausted.
    /// Cost: one integer comparison per source, plus a key comparison (two peeks) per source
    /// whose key prefix ties the smallest so far.
    pub(crate) fn peek_group(&self) -> Result<Option<Group>> {
        let mut min: Option<(usize, u64)> = None;
        let mut holders = 0;
        for (i, prefix) in self.prefixes.iter().enumerate() {
            let Some(prefix) = *prefix else {
                continue;
            };
            let Some((first, min_prefix)) = min else {
                min = Some((i, prefix));
                holders = 1;
                continue;
            };
            let order = match prefix.cmp(&min_prefix) {
                std::cmp::Ordering::Equal => {
                    let (Some(current), Some(head)) =
                        (self.sources[first].head()?, self.sources[i].head()?)
                    else {
                        // Only a source whose advance failed half way gets here: a merge that
                        // failed is not used again, but if it were, this is no place to panic.
                        return Err(stale_source());
                    };
                    head.key.cmp(current.key)
                }
                order => order,
            };
            match order {
                std::cmp::Ordering::Greater => {}
                std::cmp::Ordering::Equal => holders += 1,
                std::cmp::Ordering::Less => {
                    min = Some((i, prefix));
                    holders = 1;
                }
            }
        }
        Ok(min.map(|(first, _)| Group { first, holders }))
    }

    /// Folds the current entries of every source holding `group`'s key, newest first, with
    /// `fold(accumulator, source index, entry)`, advancing each of those sources; returns the key
    /// and the accumulator. `group` must come from [`KMerge::peek_group`] with no advance since.
    pub(crate) fn fold_group<T>(
        &mut self,
        group: Group,
        init: T,
        mut fold: impl FnMut(T, usize, Head<'_, S::Blob>) -> T,
    ) -> Result<(&[u8], T)> {
        self.key.clear();
        let mut acc = init;
        let mut left = group.holders;
        for i in group.first..self.sources.len() {
            if left == 0 {
                break;
            }
            let source = &mut self.sources[i];
            let Some(head) = source.head()? else {
                continue;
            };
            if i == group.first {
                self.key.extend_from_slice(head.key);
            } else if head.key != self.key.as_slice() {
                continue;
            }
            acc = fold(acc, i, head);
            source.advance()?;
            self.prefixes[i] = head_prefix(source)?;
            left -= 1;
        }
        Ok((&self.key, acc))
    }

    /// The next key with its entries combined newest first, as a lookup resolves them (the first
    /// insert or delete ends the fold; upserts accumulate through `resolve`), and the number of
    /// source entries consumed. `None` when every source is exhausted.
    pub(crate) fn next_combined(
        &mut self,
        resolve: &Resolve,
    ) -> Result<Option<Combined<'_, S::Blob>>> {
        let Some(group) = self.peek_group()? else {
            return Ok(None);
        };
        let (key, combined) =
            self.fold_group(group, None, |newer: Option<Entry<S::Blob>>, _, head| {
                Some(match newer {
                    None => match head.op {
                        Op::Insert => Entry::Insert(head.value.to_vec(), head.blob),
                        Op::Upsert => Entry::Upsert(head.value.to_vec()),
                        Op::Delete => Entry::Delete,
                    },
                    Some(newer) => newer.combine_older(head.op, head.value, resolve),
                })
            })?;
        let Some(combined) = combined else {
            return Err(stale_source());
        };
        Ok(Some((key, combined, group.holders as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source over a sorted vector, for tests.
    struct VecSource {
        entries: Vec<(Vec<u8>, Op, Vec<u8>)>,
        next: usize,
    }

    impl MergeSource for VecSource {
        type Blob = ();
        fn head(&self) -> Result<Option<Head<'_, ()>>> {
            Ok(self.entries.get(self.next).map(|(key, op, value)| Head {
                key,
                op: *op,
                value,
                blob: None,
            }))
        }
        fn advance(&mut self) -> Result<()> {
            self.next = (self.next + 1).min(self.entries.len());
            Ok(())
        }
    }

    fn source(entries: &[(&str, Op, u64)]) -> VecSource {
        VecSource {
            entries: entries
                .iter()
                .map(|(k, op, v)| (k.as_bytes().to_vec(), *op, v.to_le_bytes().to_vec()))
                .collect(),
            next: 0,
        }
    }

    #[test]
    fn merges_newest_first_and_combines_upserts() {
        let add = Resolve::AddU64Le;
        let mut merge = KMerge::new(vec![
            source(&[("a", Op::Upsert, 1), ("c", Op::Delete, 0)]),
            source(&[("a", Op::Upsert, 2), ("b", Op::Insert, 7)]),
            source(&[
                ("a", Op::Insert, 10),
                ("c", Op::Insert, 3),
                ("d", Op::Upsert, 4),
            ]),
        ])
        .unwrap();
        let mut out = Vec::new();
        while let Some((key, entry, consumed)) = merge.next_combined(&add).unwrap() {
            out.push((String::from_utf8(key.to_vec()).unwrap(), entry, consumed));
        }
        let v = |n: u64| n.to_le_bytes().to_vec();
        assert_eq!(
            out,
            vec![
                ("a".into(), Entry::Insert(v(13), None), 3),
                ("b".into(), Entry::Insert(v(7), None), 1),
                ("c".into(), Entry::Delete, 2),
                ("d".into(), Entry::Upsert(v(4)), 1),
            ]
        );
        assert_eq!(merge.peek_group().unwrap(), None);
    }

    /// Keys that share their first 8 bytes, or are shorter than 8 bytes, or are prefixes of one
    /// another, are merged in key order: the integer prefixes only decide where they differ.
    #[test]
    fn merges_keys_with_tied_prefixes_in_order() {
        let keys: [&[u8]; 8] = [
            b"",
            b"a",
            b"a\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghA",
            b"abcdefghB",
            b"abcdefgi",
        ];
        let mut sources = Vec::new();
        // Source s holds the keys i with (i + s) % 3 != 0: every key has two or three holders.
        for s in 0..4usize {
            let entries = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| (i + s) % 3 != 0)
                .map(|(i, k)| (k.to_vec(), Op::Insert, (s * 100 + i).to_le_bytes().to_vec()))
                .collect();
            sources.push(VecSource { entries, next: 0 });
        }
        let mut merge = KMerge::new(sources).unwrap();
        let mut out = Vec::new();
        while let Some((key, entry, consumed)) = merge.next_combined(&Resolve::KeepNewest).unwrap()
        {
            // The newest holder wins: the smallest source index holding the key.
            let i = keys.iter().position(|k| *k == key).unwrap();
            let newest = (0..4usize).find(|s| (i + s) % 3 != 0).unwrap();
            let holders = (0..4usize).filter(|s| (i + s) % 3 != 0).count() as u64;
            assert_eq!(
                entry,
                Entry::Insert((newest * 100 + i).to_le_bytes().to_vec(), None)
            );
            assert_eq!(consumed, holders);
            out.push(key.to_vec());
        }
        assert_eq!(out, keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>());
        assert!(merge.is_exhausted());
    }

    #[test]
    fn groups_name_the_newest_holder() {
        let merge = KMerge::new(vec![
            source(&[("b", Op::Insert, 1)]),
            source(&[("a", Op::Insert, 1)]),
            source(&[("a", Op::Insert, 2)]),
        ])
        .unwrap();
        assert_eq!(
            merge.peek_group().unwrap(),
            Some(Group {
                first: 1,
                holders: 2
            })
        );
    }
}

//! Sorted runs: a run made of one or more parts (run files) whose key ranges are disjoint.
//!
//! Owns: [`SortedRun`] (the parts in key order), [`SortedCursor`] (reads a sorted run, or a
//! range of its parts, in key order, one part after another) and [`PartWriter`] (writes entries
//! given in key order as parts, cutting a new part every `part_entries` entries, and takes
//! whole parts of other sorted runs in between).
//!
//! A level holds sorted runs. Most are a single part; a merge makes a run of several parts when
//! some of its inputs' parts overlap no other input's: it *links* those parts (shares their
//! files) instead of rewriting them (`merge`). Data written in key order (block-ordered keys,
//! [`crate::BlockKeys`]) thus reaches the deepest level without being rewritten. A table with
//! [`crate::TableConfig::part_entries`] set also cuts every run it writes into parts of at most
//! that many entries, so that a merge rewrites only the parts that really overlap.
//!
//! May call: `fs`, `page`, `run`. Must never touch: levels, merges, tables.
//!
//! Costs: finding the part that can hold a key is a binary search over the parts' last keys
//! (O(log parts) key comparisons; none for a single part). A cursor holds one part's chunk
//! (64 KiB) at a time and opens the next part when one ends (one read).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::page::{EntryRef, Op};
use crate::run::{Run, RunCursor, RunParams, RunWriter};

/// A sorted run: one or more parts in key order, each part's keys above the previous part's.
#[derive(Debug)]
pub(crate) struct SortedRun {
    parts: Box<[Arc<Run>]>,
    entries: u64,
}

impl SortedRun {
    /// A sorted run of one part.
    pub(crate) fn single(run: Arc<Run>) -> Arc<SortedRun> {
        let entries = run.entries();
        Arc::new(SortedRun {
            parts: Box::new([run]),
            entries,
        })
    }

    /// A sorted run of `parts`, given in key order; `None` for no parts. Parts whose key ranges
    /// overlap or come out of order are [`Error::Corrupt`] (a damaged or forged snapshot).
    pub(crate) fn new(parts: Vec<Arc<Run>>) -> Result<Option<Arc<SortedRun>>> {
        if parts.is_empty() {
            return Ok(None);
        }
        for pair in parts.windows(2) {
            if pair[0].last_key() >= pair[1].first_key() {
                return Err(Error::corrupt(
                    "sorted run",
                    "parts overlap or are out of key order",
                ));
            }
        }
        let entries = parts.iter().map(|p| p.entries()).sum();
        Ok(Some(Arc::new(SortedRun {
            parts: parts.into_boxed_slice(),
            entries,
        })))
    }

    /// The parts, in key order.
    pub(crate) fn parts(&self) -> &[Arc<Run>] {
        &self.parts
    }

    /// Entries in all parts.
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// The first key of the first part.
    #[cfg(test)]
    pub(crate) fn first_key(&self) -> &[u8] {
        self.parts[0].first_key()
    }

    /// The last key of the last part.
    #[cfg(test)]
    pub(crate) fn last_key(&self) -> &[u8] {
        self.parts[self.parts.len() - 1].last_key()
    }

    /// A key `< upper` (`None`: no bound) such that the sorted run has an entry in
    /// `[key, upper)`, `None` if it has no key below `upper` ([`Run::first_key_before`] of the
    /// last part with a key below `upper`). Cost: O(log parts) plus one span read.
    pub(crate) fn first_key_before(&self, upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        let below = match upper {
            Some(u) => self.parts.partition_point(|p| p.first_key() < u),
            None => self.parts.len(),
        };
        match below.checked_sub(1) {
            Some(i) => self.parts[i].first_key_before(upper),
            None => Ok(None),
        }
    }

    /// The part that can hold `key` and its position: for a run of one part, that part (its
    /// filter and index decide, as before parts existed); otherwise the part whose key range
    /// holds `key`, if any. O(log parts) key comparisons.
    pub(crate) fn part_for(&self, key: &[u8]) -> Option<(usize, &Arc<Run>)> {
        if let [only] = &*self.parts {
            return Some((0, only));
        }
        let i = self.parts.partition_point(|p| p.last_key() < key);
        let part = self.parts.get(i)?;
        (part.first_key() <= key).then_some((i, part))
    }

    /// The position of the first part whose last key is `>= key` (the part a cursor seeking
    /// `key` starts in); `parts().len()` if none.
    pub(crate) fn first_part_from(&self, key: &[u8]) -> usize {
        self.parts.partition_point(|p| p.last_key() < key)
    }

    /// Memory held by the parts' filters and indexes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.memory_bytes()).sum()
    }
}

/// Reads a range of a sorted run's parts in key order (for merges and table cursors).
///
/// Memory: one [`RunCursor`] (a 64 KiB chunk) at a time.
#[derive(Debug)]
pub(crate) struct SortedCursor {
    run: Arc<SortedRun>,
    /// The part being read and the end of the parts to read.
    part: usize,
    end: usize,
    cursor: Option<RunCursor>,
}

impl SortedCursor {
    /// A cursor over every entry of `run`.
    pub(crate) fn new(run: Arc<SortedRun>) -> Result<SortedCursor> {
        let end = run.parts().len();
        SortedCursor::over_parts(run, 0..end)
    }

    /// A cursor over the entries of parts `parts` of `run`.
    pub(crate) fn over_parts(
        run: Arc<SortedRun>,
        parts: std::ops::Range<usize>,
    ) -> Result<SortedCursor> {
        SortedCursor::opened(run, parts, None)
    }

    /// A cursor over parts `parts` of `run`; `file`, when given, is the first part's key/ops
    /// file opened already ([`RunCursor::open_file`]).
    fn opened(
        run: Arc<SortedRun>,
        parts: std::ops::Range<usize>,
        file: Option<Arc<dyn crate::fs::ReadableFile>>,
    ) -> Result<SortedCursor> {
        let mut cursor = SortedCursor {
            run,
            part: parts.start,
            end: parts.end,
            cursor: None,
        };
        cursor.open_from(parts.start, None, file)?;
        Ok(cursor)
    }

    /// Cursors over parts of several sorted runs (each `(run, parts)`), opened together: the
    /// pages each cursor reads first are asked for ([`RunCursor::prefetch_start`]) before any
    /// cursor reads, so that the disk serves them side by side instead of one after another.
    /// A merge opens its inputs this way, on the update path when the update does the merge's
    /// first steps. Cost: as for the cursors opened one by one (one `open` and one chunk read
    /// each), plus one prefetch hint each.
    pub(crate) fn open_together(
        sources: Vec<(Arc<SortedRun>, std::ops::Range<usize>)>,
    ) -> Result<Vec<SortedCursor>> {
        let mut files = Vec::with_capacity(sources.len());
        for (run, parts) in &sources {
            let file = match run.parts().get(parts.start) {
                Some(part) if parts.start < parts.end => {
                    let file = RunCursor::open_file(part)?;
                    RunCursor::prefetch_start(part, &*file);
                    Some(file)
                }
                _ => None,
            };
            files.push(file);
        }
        sources
            .into_iter()
            .zip(files)
            .map(|((run, parts), file)| SortedCursor::opened(run, parts, file))
            .collect()
    }

    /// A cursor at the first entry whose key is `>= key`: one binary search over the parts,
    /// then [`RunCursor::seek`] in the part that can hold `key`.
    pub(crate) fn seek(run: Arc<SortedRun>, key: &[u8]) -> Result<SortedCursor> {
        let end = run.parts().len();
        SortedCursor::seek_in(run, 0..end, key)
    }

    /// A cursor over parts `parts` of `run` at the first entry whose key is `>= key`.
    pub(crate) fn seek_in(
        run: Arc<SortedRun>,
        parts: std::ops::Range<usize>,
        key: &[u8],
    ) -> Result<SortedCursor> {
        let start = run.first_part_from(key).clamp(parts.start, parts.end);
        let mut cursor = SortedCursor {
            run,
            part: start,
            end: parts.end,
            cursor: None,
        };
        cursor.open_from(start, Some(key), None)?;
        Ok(cursor)
    }

    /// Opens part `part` (seeking `key` in it, if given), moving on past parts that turn out
    /// empty from there; `file`, when given, is part `part`'s file opened already
    /// ([`RunCursor::open_file`]; not used with `key`).
    fn open_from(
        &mut self,
        mut part: usize,
        mut key: Option<&[u8]>,
        mut file: Option<Arc<dyn crate::fs::ReadableFile>>,
    ) -> Result<()> {
        while part < self.end {
            let run = self.run.parts()[part].clone();
            let cursor = match (key.take(), file.take()) {
                (Some(key), _) => RunCursor::seek(run, key)?,
                (None, Some(file)) => RunCursor::with_file(run, file)?,
                (None, None) => RunCursor::new(run)?,
            };
            if !cursor.is_done() {
                self.part = part;
                self.cursor = Some(cursor);
                return Ok(());
            }
            part += 1;
        }
        self.part = self.end;
        self.cursor = None;
        Ok(())
    }

    /// The part the current entry is in (its blobs are in that part's blob file).
    pub(crate) fn current_part(&self) -> Option<&Arc<Run>> {
        self.cursor.as_ref().map(RunCursor::run)
    }

    /// Whether every entry has been read.
    #[cfg(test)]
    pub(crate) fn is_done(&self) -> bool {
        self.cursor.is_none()
    }

    /// The current entry, or `None` at the end. O(1).
    pub(crate) fn peek(&self) -> Result<Option<EntryRef<'_>>> {
        match &self.cursor {
            Some(cursor) => cursor.peek(),
            None => Ok(None),
        }
    }

    /// Moves to the next entry (into the next part at the end of one).
    pub(crate) fn advance(&mut self) -> Result<()> {
        let Some(cursor) = &mut self.cursor else {
            return Ok(());
        };
        cursor.advance()?;
        if cursor.is_done() {
            self.open_from(self.part + 1, None, None)?;
        }
        Ok(())
    }
}

/// Writes a sorted run from entries pushed in key order, as parts of at most `part_entries`
/// entries, with whole parts of other runs linked in between ([`PartWriter::link`]).
///
/// Memory: one [`RunWriter`] at a time (its filter is sized for the smaller of `part_entries`
/// and the entries still expected, [`PartWriter::expect`]).
#[derive(Debug)]
pub(crate) struct PartWriter {
    fs: Arc<dyn FileSystem>,
    params: RunParams,
    caching: bool,
    part_entries: u64,
    /// The number of the next part; `None` once the first number (given) is used.
    first_number: Option<u64>,
    /// Entries still expected (an upper bound), for sizing the next part's filter.
    expected: u64,
    writer: Option<RunWriter>,
    parts: Vec<Arc<Run>>,
    /// Parts written (not linked) so far.
    written_parts: u64,
}

impl PartWriter {
    /// A writer whose first part is run `number`; `part_entries` of `None` writes one part.
    /// `expected` bounds the entries that will be pushed before the next call of
    /// [`PartWriter::expect`] (it sizes filters). Creates no file until the first entry.
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        expected: u64,
        part_entries: Option<u64>,
        caching: bool,
    ) -> PartWriter {
        PartWriter {
            fs,
            params: params.clone(),
            caching,
            part_entries: part_entries.unwrap_or(u64::MAX).max(1),
            first_number: Some(number),
            expected,
            writer: None,
            parts: Vec::new(),
            written_parts: 0,
        }
    }

    /// This writer, going on after `parts`, the parts of an output written so far (a merge
    /// resumed from a snapshot); nothing written yet.
    pub(crate) fn after_parts(mut self, parts: Vec<Arc<Run>>) -> PartWriter {
        self.parts = parts;
        self
    }

    /// Finishes the part being written, if any, so that every entry pushed so far is in a
    /// finished part ([`PartWriter::parts`]); the next entry starts a new part. The finished
    /// part's filter is fitted to its entries ([`crate::bloom::BloomBuilder::finish_fitted`]).
    pub(crate) fn cut(&mut self) -> Result<()> {
        self.finish_part()
    }

    /// The finished parts so far, in key order.
    pub(crate) fn parts(&self) -> &[Arc<Run>] {
        &self.parts
    }

    /// Sets the bound on the entries that will be pushed from here on (until the next call).
    pub(crate) fn expect(&mut self, entries: u64) {
        self.expected = entries;
    }

    /// Appends one entry (see [`RunWriter::push`]); keys must ascend across parts too.
    pub(crate) fn push(
        &mut self,
        key: &[u8],
        op: Op,
        value: &[u8],
        blob: Option<&[u8]>,
    ) -> Result<()> {
        if self.writer.is_none() {
            if let Some(last) = self.parts.last() {
                if key <= last.last_key() {
                    return Err(Error::corrupt(
                        "run",
                        "entries out of key order (an input run is damaged)",
                    ));
                }
            }
            let number = self
                .first_number
                .take()
                .unwrap_or_else(crate::run::next_run_number);
            let entries_max = self.expected.clamp(1, self.part_entries);
            self.writer = Some(RunWriter::new(
                self.fs.clone(),
                &self.params,
                number,
                entries_max,
                self.caching,
            )?);
        }
        let writer = self.writer.as_mut().expect("created above");
        writer.push(key, op, value, blob)?;
        self.expected = self.expected.saturating_sub(1);
        if writer.entries() >= self.part_entries {
            self.finish_part()?;
        }
        Ok(())
    }

    /// Finishes the part being written, if any.
    fn finish_part(&mut self) -> Result<()> {
        if let Some(writer) = self.writer.take() {
            if let Some(run) = writer.finish()? {
                self.parts.push(run);
                self.written_parts += 1;
            }
        }
        Ok(())
    }

    /// Appends `part` whole (no I/O): its keys must lie above every key written so far.
    pub(crate) fn link(&mut self, part: Arc<Run>) -> Result<()> {
        self.finish_part()?;
        if let Some(last) = self.parts.last() {
            if last.last_key() >= part.first_key() {
                return Err(Error::corrupt(
                    "sorted run",
                    "a linked part overlaps the output before it",
                ));
            }
        }
        self.parts.push(part);
        Ok(())
    }

    /// Parts written (not linked) so far, the one being written included.
    #[cfg(test)]
    pub(crate) fn written_parts(&self) -> u64 {
        self.written_parts + u64::from(self.writer.is_some())
    }

    /// Finishes the last part and returns the sorted run (`None` if nothing was pushed or
    /// linked).
    pub(crate) fn finish(mut self) -> Result<Option<Arc<SortedRun>>> {
        self.finish_part()?;
        SortedRun::new(std::mem::take(&mut self.parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::index::IndexType;

    fn params() -> RunParams {
        RunParams::for_tests(IndexType::Compact)
    }

    /// A run number no other test of this process uses (later parts take theirs from the
    /// same counter, so fixed numbers could collide with them).
    fn number() -> u64 {
        crate::run::next_run_number()
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key-{i:06}").into_bytes()
    }

    #[test]
    fn parts_are_cut_found_and_read_in_order() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let p = params();
        fs.create_dir_all(&p.dir).unwrap();
        let mut w = PartWriter::new(fs.clone(), &p, number(), 100, Some(30), true);
        for i in (0..200).step_by(2) {
            w.push(&key(i), Op::Insert, b"v", None).unwrap();
        }
        let run = w.finish().unwrap().unwrap();
        assert_eq!(run.parts().len(), 4);
        assert_eq!(run.entries(), 100);
        assert_eq!(run.first_key(), key(0));
        assert_eq!(run.last_key(), key(198));
        // Present keys are in the part that holds them; keys between parts are in none.
        assert_eq!(run.part_for(&key(0)).unwrap().0, 0);
        assert_eq!(run.part_for(&key(60)).unwrap().0, 1);
        assert!(run.part_for(&key(59)).is_none(), "between parts 0 and 1");
        assert!(run.part_for(b"a").is_none());
        assert!(run.part_for(b"z").is_none());
        let mut c = SortedCursor::new(run.clone()).unwrap();
        let mut n = 0;
        while let Some(e) = c.peek().unwrap() {
            assert_eq!(e.key, key(2 * n));
            n += 1;
            c.advance().unwrap();
        }
        assert_eq!(n, 100);
        for from in [0, 57, 59, 60, 61, 197, 198] {
            let c = SortedCursor::seek(run.clone(), &key(from)).unwrap();
            let want = from.div_ceil(2) * 2;
            assert_eq!(c.peek().unwrap().map(|e| e.key.to_vec()), Some(key(want)));
        }
        assert!(SortedCursor::seek(run.clone(), &key(199))
            .unwrap()
            .is_done());
        // Linking: the parts of `run` around new entries; overlaps are refused.
        let mut w = PartWriter::new(fs.clone(), &p, number(), 10, None, true);
        w.link(run.parts()[0].clone()).unwrap();
        w.push(&key(59), Op::Insert, b"w", None).unwrap();
        assert!(w.link(run.parts()[0].clone()).is_err());
        let mut w = PartWriter::new(fs.clone(), &p, number(), 10, None, true);
        w.link(run.parts()[0].clone()).unwrap();
        w.push(&key(59), Op::Insert, b"w", None).unwrap();
        w.link(run.parts()[1].clone()).unwrap();
        assert_eq!(w.written_parts(), 1);
        let linked = w.finish().unwrap().unwrap();
        assert_eq!(linked.parts().len(), 3);
        assert_eq!(linked.entries(), 30 + 1 + 30);
        assert!(SortedRun::new(vec![run.parts()[1].clone(), run.parts()[0].clone()]).is_err());
    }

    /// Cursors opened together read exactly what cursors opened one by one read: every part
    /// range (whole, from a middle part, empty, past the end) of several runs.
    #[test]
    fn cursors_opened_together_read_as_cursors_opened_alone() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let p = params();
        fs.create_dir_all(&p.dir).unwrap();
        let mut runs = Vec::new();
        for (number, step) in [(1u64, 2u32), (2, 3), (3, 5)] {
            let mut w = PartWriter::new(
                fs.clone(),
                &p,
                crate::run::next_run_number(),
                100,
                Some(25),
                true,
            );
            for i in (0..300).step_by(step as usize) {
                w.push(&key(i), Op::Insert, &number.to_le_bytes(), None)
                    .unwrap();
            }
            runs.push(w.finish().unwrap().unwrap());
        }
        let drain = |mut c: SortedCursor| {
            let mut out = Vec::new();
            while let Some(e) = c.peek().unwrap() {
                out.push((e.key.to_vec(), e.value.to_vec()));
                c.advance().unwrap();
            }
            out
        };
        let ranges = [0..4, 1..3, 2..2, 3..4, 0..1];
        let sources: Vec<_> = runs
            .iter()
            .flat_map(|run| {
                ranges
                    .iter()
                    .map(move |r| (run.clone(), r.start..r.end.min(run.parts().len())))
            })
            .collect();
        let together = SortedCursor::open_together(sources.clone()).unwrap();
        assert_eq!(together.len(), sources.len());
        for (cursor, (run, parts)) in together.into_iter().zip(sources) {
            let alone = SortedCursor::over_parts(run, parts.clone()).unwrap();
            assert_eq!(drain(cursor), drain(alone), "parts {parts:?}");
        }
    }
}

//! The commands that read a snapshot's keys: `get`, `root`, `prove` and `diff` (of two
//! snapshots, or of a snapshot and a durable table as it is now), and the key range `dump`
//! (`scan`) reads, with its prefix.
//!
//! Owns: their output layout and exit codes. May call: `commands` (opening sessions and
//! snapshots, keys, failures, `out!`), `output`, `cairn` and `cairn_proof` (verifying a proof).
//! Must never touch: the database's files directly.

use std::borrow::Cow;
use std::io::Write;
use std::ops::Bound;
use std::path::Path;

use cairn::{BlobRef, CursorEntry, LookupResult, Session, Table};
use cairn::{DurableView, LiveEntry, LiveTable};
use cairn_proof::{Claim, Expect};
use serde_json::{json, Value};

use crate::commands::{
    open_read_only, open_table, out, parse_key, write_failed, Failure, DAMAGED, FAILED,
};
use crate::output::{self, hex};
use crate::KeyFormat;

/// Exit code: a key `get` looked up is absent.
const ABSENT: u8 = 5;

/// The key range of `dump` from its options: `[from, to)` within the keys starting with
/// `prefix`.
pub fn key_range(
    from: Option<Vec<u8>>,
    to: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let mut low = from.map_or(Bound::Unbounded, Bound::Included);
    let mut high = to.map_or(Bound::Unbounded, Bound::Excluded);
    if let Some(prefix) = prefix {
        if !matches!(&low, Bound::Included(f) if *f >= prefix) {
            low = Bound::Included(prefix.clone());
        }
        if let Some(end) = prefix_end(&prefix) {
            if !matches!(&high, Bound::Excluded(t) if *t <= end) {
                high = Bound::Excluded(end);
            }
        }
    }
    (low, high)
}

/// The first key after every key starting with `prefix` (`None`: there is none, the prefix is
/// empty or all 0xff).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// One pair `dump` prints, from a snapshot or a durable table's view.
pub struct Pair {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// The blob's bytes, when they were asked for.
    pub blob: Option<Vec<u8>>,
    /// The blob's length, when the key has one and it is known.
    pub blob_bytes: Option<u64>,
}

impl Pair {
    /// A snapshot's entry, with its blob read when `blobs`.
    pub fn from_cursor(table: &Table, e: CursorEntry, blobs: bool) -> Result<Pair, Failure> {
        let blob = match (&e.blob, blobs) {
            (Some(b), true) => Some(table.retrieve_blob(b)?),
            _ => None,
        };
        Ok(Pair {
            blob_bytes: e.blob.as_ref().map(|b| b.len_bytes()),
            key: e.key,
            value: e.value,
            blob,
        })
    }

    /// A durable table's entry (its blob read if it was asked for).
    pub fn from_live(e: LiveEntry) -> Pair {
        Pair {
            blob_bytes: e.blob.as_ref().map(|b| b.len() as u64),
            key: e.key,
            value: e.value,
            blob: e.blob,
        }
    }
}

/// The durable table `name` of `view`; a failure naming the tables there are otherwise.
pub fn live_table<'a>(view: &'a DurableView, name: &str) -> Result<&'a LiveTable, Failure> {
    view.table(name).ok_or_else(|| {
        Failure::new(
            FAILED,
            format!(
                "the session has no durable table {name:?} (it has: {})",
                view.tables().join(", ")
            ),
        )
    })
}

/// The last `limit` entries of `entries` (all of them for `None`), newest key first: what
/// `dump --reverse` prints. Memory: `limit` entries.
pub fn reversed<T>(
    entries: impl Iterator<Item = Result<T, Failure>>,
    limit: Option<u64>,
) -> Result<Vec<T>, Failure> {
    let keep = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let mut last = std::collections::VecDeque::new();
    if keep == 0 {
        return Ok(Vec::new());
    }
    for entry in entries {
        if last.len() == keep {
            last.pop_front();
        }
        last.push_back(entry?);
    }
    Ok(last.into_iter().rev().collect())
}

fn show(format: KeyFormat, bytes: &[u8]) -> String {
    match format {
        KeyFormat::Hex => hex(bytes),
        KeyFormat::Text => output::escaped(bytes),
    }
}

pub fn get(
    dir: &Path,
    name: &str,
    keys: &[String],
    format: KeyFormat,
    durable: bool,
    json: bool,
) -> Result<u8, Failure> {
    let keys = parse_keys(keys)?;
    let session = open_read_only(dir)?;
    // Each key's value and blob length (when it has a blob).
    let found: Vec<(Option<Vec<u8>>, Option<u64>)> = match durable {
        false => {
            let table = open_table(&session, name)?;
            (table.lookups(&keys)?.into_iter())
                .map(|r| match r {
                    LookupResult::NotFound => (None, None),
                    LookupResult::Found(v) => (Some(v), None),
                    LookupResult::FoundWithBlob(v, b) => (Some(v), Some(b.len_bytes())),
                })
                .collect()
        }
        true => {
            let view = session.durable_view()?;
            let live = live_table(&view, name)?;
            let mut found = Vec::with_capacity(keys.len());
            for key in &keys {
                found.push(match live.get(key, true)? {
                    None => (None, None),
                    Some(e) => (Some(e.value), e.blob.map(|b| b.len() as u64)),
                });
            }
            found
        }
    };
    let mut code = 0;
    let mut answers = Vec::new();
    for (key, (value, blob)) in keys.iter().zip(&found) {
        let (value, blob) = (value.as_deref(), *blob);
        match value {
            None => code = ABSENT,
            Some(_) if json => {}
            Some(value) => match blob {
                Some(bytes) => out!(
                    "{} {} (blob of {})",
                    show(format, key),
                    show(format, value),
                    output::size(bytes)
                ),
                None => out!("{} {}", show(format, key), show(format, value)),
            },
        }
        if value.is_none() && !json {
            out!("{} absent", show(format, key));
        }
        if json {
            answers.push(json!({
                "key": hex(key),
                "value": value.map(hex),
                "blob_bytes": blob,
            }));
        }
    }
    if json {
        out!("{}", json!({ "snapshot": name, "keys": answers }));
    }
    Ok(code)
}

/// The keys given on the command line (see [`parse_key`]).
fn parse_keys(keys: &[String]) -> Result<Vec<Vec<u8>>, Failure> {
    keys.iter().map(|k| parse_key(k)).collect()
}

/// The snapshot's last commit; a failure naming the snapshot when it is not authenticated.
fn last_commit(table: &Table, name: &str) -> Result<cairn::Commit, Failure> {
    table.last_commit().map_err(|e| match e {
        cairn::Error::NotAuthenticated => Failure::new(
            FAILED,
            format!("snapshot {name:?} is not an authenticated table: it has no state root"),
        ),
        e => e.into(),
    })
}

pub fn root(dir: &Path, name: &str, json: bool) -> Result<u8, Failure> {
    let session = open_read_only(dir)?;
    let table = open_table(&session, name)?;
    let commit = last_commit(&table, name)?;
    if json {
        out!(
            "{}",
            json!({
                "snapshot": name,
                "version": commit.version,
                "hash": output::hash_name(commit.root.kind),
                "root": hex(&commit.root.hash),
            })
        );
    } else {
        out!(
            "snapshot {name:?}: version {}, state root {}",
            commit.version,
            output::root(&commit.root)
        );
    }
    Ok(0)
}

pub fn prove(
    dir: &Path,
    name: &str,
    keys: &[String],
    encoded: bool,
    json: bool,
) -> Result<u8, Failure> {
    let keys = parse_keys(keys)?;
    let session = open_read_only(dir)?;
    let table = open_table(&session, name)?;
    let commit = last_commit(&table, name)?;
    let proved = table.prove(&keys)?;
    // What the table answers, as the claims the proof must bear out.
    let found = table.lookups(&keys)?;
    let mut blob_hashes = Vec::with_capacity(keys.len());
    for result in &found {
        blob_hashes.push(match result {
            LookupResult::FoundWithBlob(_, blob) => {
                Some(commit.root.kind.blob_hash(&table.retrieve_blob(blob)?))
            }
            _ => None,
        });
    }
    let claims: Vec<Claim<'_>> = (keys.iter().zip(&found).zip(&blob_hashes))
        .map(|((key, result), blob_hash)| Claim {
            key,
            expect: match result.value() {
                Some(value) => Expect::Present {
                    value,
                    blob_hash: *blob_hash,
                },
                None => Expect::Absent,
            },
        })
        .collect();
    let verified = proved.proof.verify(&proved.root, &claims);
    let bytes = proved.proof.encode();
    if json {
        let keys: Vec<Value> = (keys.iter().zip(&found))
            .map(|(key, result)| json!({ "key": hex(key), "value": result.value().map(hex) }))
            .collect();
        let mut doc = json!({
            "snapshot": name,
            "version": proved.version,
            "hash": output::hash_name(proved.root.kind),
            "root": hex(&proved.root.hash),
            "keys": keys,
            "proof_bytes": bytes.len(),
            "verified": verified.is_ok(),
        });
        if let Err(e) = &verified {
            doc["error"] = json!(e.to_string());
        }
        if encoded {
            doc["proof"] = json!(hex(&bytes));
        }
        out!("{doc}");
    } else {
        out!(
            "snapshot {name:?}: version {}, state root {}",
            proved.version,
            output::root(&proved.root)
        );
        for (key, result) in keys.iter().zip(&found) {
            match result.value() {
                Some(value) => out!(
                    "  {} present: {}",
                    output::escaped(key),
                    output::escaped(value)
                ),
                None => out!("  {} absent", output::escaped(key)),
            }
        }
        match &verified {
            Ok(()) => out!(
                "proof of {} verified against the root",
                output::size(bytes.len() as u64)
            ),
            Err(e) => out!("the proof does NOT verify: {e}"),
        }
        if encoded {
            out!("{}", hex(&bytes));
        }
    }
    Ok(if verified.is_ok() { 0 } else { DAMAGED })
}

/// One difference `diff` reports.
enum Change {
    Removed(Pair),
    Added(Pair),
    Changed(Pair, Pair),
}

/// A pair of one side of a diff, with its blob's reference when the blob is still to be read.
type Item = (Pair, Option<BlobRef>);

/// One side of a diff: its pairs in key order. A snapshot's blobs are read only when two pairs'
/// blobs must be compared (same key, same value, blobs of the same length).
struct Side<'a> {
    /// The snapshot's table, which reads its blobs; `None` for a durable table, whose cursor
    /// hands blobs out read.
    table: Option<Table>,
    pairs: Box<dyn Iterator<Item = Result<Item, Failure>> + 'a>,
}

impl<'a> Side<'a> {
    /// The pairs of `name`: a snapshot, or with a leading `@` the durable table of that name as
    /// it is now (its checkpoint and the log after it, read through `view`).
    fn open(
        session: &Session,
        view: Option<&'a DurableView>,
        name: &str,
    ) -> Result<Side<'a>, Failure> {
        match (name.strip_prefix('@'), view) {
            (Some(table), Some(view)) => {
                let live = live_table(view, table)?;
                let cursor = live.range((Bound::Unbounded, Bound::Unbounded), true)?;
                Ok(Side {
                    table: None,
                    pairs: Box::new(cursor.map(|e| Ok((Pair::from_live(e?), None)))),
                })
            }
            _ => {
                let table = open_table(session, name)?;
                let cursor = table.cursor()?;
                Ok(Side {
                    table: Some(table),
                    pairs: Box::new(cursor.map(|e| {
                        let e = e?;
                        let pair = Pair {
                            blob_bytes: e.blob.as_ref().map(|b| b.len_bytes()),
                            key: e.key,
                            value: e.value,
                            blob: None,
                        };
                        Ok((pair, e.blob))
                    })),
                })
            }
        }
    }

    fn next(&mut self) -> Result<Option<Item>, Failure> {
        self.pairs.next().transpose()
    }

    /// The bytes of `item`'s blob, if it has one.
    fn blob<'i>(&self, item: &'i Item) -> Result<Option<Cow<'i, [u8]>>, Failure> {
        Ok(match (&item.1, &self.table) {
            (Some(blob), Some(table)) => Some(Cow::Owned(table.retrieve_blob(blob)?)),
            _ => item.0.blob.as_deref().map(Cow::Borrowed),
        })
    }
}

pub fn diff(
    dir: &Path,
    first: &str,
    second: &str,
    format: KeyFormat,
    limit: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
    let session = open_read_only(dir)?;
    let view = match first.starts_with('@') || second.starts_with('@') {
        true => Some(session.durable_view()?),
        false => None,
    };
    let (mut left, mut right) = (
        Side::open(&session, view.as_ref(), first)?,
        Side::open(&session, view.as_ref(), second)?,
    );
    let (mut l, mut r) = (left.next()?, right.next()?);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let (mut removed, mut added, mut changed, mut same) = (0u64, 0u64, 0u64, 0u64);
    let limit = limit.unwrap_or(u64::MAX);
    while removed + added + changed < limit {
        let change = match (l.take(), r.take()) {
            (None, None) => break,
            (Some(x), None) => {
                l = left.next()?;
                Change::Removed(x.0)
            }
            (None, Some(y)) => {
                r = right.next()?;
                Change::Added(y.0)
            }
            (Some(x), Some(y)) => match x.0.key.cmp(&y.0.key) {
                std::cmp::Ordering::Less => {
                    l = left.next()?;
                    r = Some(y);
                    Change::Removed(x.0)
                }
                std::cmp::Ordering::Greater => {
                    l = Some(x);
                    r = right.next()?;
                    Change::Added(y.0)
                }
                std::cmp::Ordering::Equal => {
                    l = left.next()?;
                    r = right.next()?;
                    let same_blob = x.0.blob_bytes == y.0.blob_bytes
                        && (x.0.blob_bytes.is_none() || left.blob(&x)? == right.blob(&y)?);
                    if x.0.value == y.0.value && same_blob {
                        same += 1;
                        continue;
                    }
                    Change::Changed(x.0, y.0)
                }
            },
        };
        let line = match (&change, json) {
            (Change::Removed(x), false) => {
                removed += 1;
                format!("- {} {}", show(format, &x.key), show(format, &x.value))
            }
            (Change::Added(y), false) => {
                added += 1;
                format!("+ {} {}", show(format, &y.key), show(format, &y.value))
            }
            (Change::Changed(x, y), false) => {
                changed += 1;
                format!(
                    "~ {} {} -> {}",
                    show(format, &x.key),
                    show(format, &x.value),
                    show(format, &y.value)
                )
            }
            (Change::Removed(x), true) => {
                removed += 1;
                json!({ "op": "removed", "key": hex(&x.key), "value": hex(&x.value) }).to_string()
            }
            (Change::Added(y), true) => {
                added += 1;
                json!({ "op": "added", "key": hex(&y.key), "value": hex(&y.value) }).to_string()
            }
            (Change::Changed(x, y), true) => {
                changed += 1;
                json!({
                    "op": "changed",
                    "key": hex(&x.key),
                    "old": hex(&x.value),
                    "new": hex(&y.value),
                })
                .to_string()
            }
        };
        writeln!(out, "{line}").map_err(write_failed)?;
    }
    if json {
        let summary = json!({
            "first": first,
            "second": second,
            "removed": removed,
            "added": added,
            "changed": changed,
            "same": same,
            "complete": removed + added + changed < limit,
        });
        writeln!(out, "{summary}").map_err(write_failed)?;
    } else {
        let cut = match removed + added + changed >= limit {
            true => " (stopped at --limit: the rest was not compared)",
            false => "",
        };
        writeln!(
            out,
            "{removed} removed, {added} added, {changed} changed, {same} the same{cut}"
        )
        .map_err(write_failed)?;
    }
    out.flush().map_err(write_failed)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_narrows_the_range_and_never_widens_it() {
        let v = |s: &str| s.as_bytes().to_vec();
        assert_eq!(
            key_range(None, None, Some(v("ab"))),
            (Bound::Included(v("ab")), Bound::Excluded(v("ac")))
        );
        assert_eq!(
            key_range(Some(v("abc")), Some(v("abd")), Some(v("ab"))),
            (Bound::Included(v("abc")), Bound::Excluded(v("abd")))
        );
        assert_eq!(
            key_range(Some(v("a")), Some(v("b")), Some(v("ab"))),
            (Bound::Included(v("ab")), Bound::Excluded(v("ac")))
        );
        assert_eq!(
            key_range(None, None, Some(vec![0x01, 0xff])),
            (
                Bound::Included(vec![0x01, 0xff]),
                Bound::Excluded(vec![0x02])
            )
        );
        assert_eq!(
            key_range(None, None, Some(vec![0xff])),
            (Bound::Included(vec![0xff]), Bound::Unbounded)
        );
    }
}

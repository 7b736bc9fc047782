//! Ordered tables: keeping each key's [`Link`] (its value and the next key) right as keys are
//! written and deleted, and the answers to range reads (`docs/ledger.md`, "Ordered tables").
//!
//! Owns: the link updates a commit's writes imply, the chain check, range answers. May call:
//! the engine's table reads, `cairn_proof::range` (links). Must never touch: anything but the
//! one table it is given; it writes nothing (the ledger writes what it returns, under its
//! commit lock, so the table cannot change in between).
//!
//! The chain: under [`HEAD_KEY`] the head names the first key; each key's link names the next
//! key, the last names none. The head exists exactly when the table holds a key.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use cairn::Table;
use cairn_proof::range::{Link, RangeAnswer, HEAD_KEY};

use crate::error::{Error, Result};

/// A commit's writes to one ordered table: key to new value, or `None` to delete.
pub(crate) type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// What to store: key to stored bytes, or `None` to delete.
pub(crate) type Stores = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The link stored under `key` in `table`, if any.
pub(crate) fn stored_link(table: &Table, key: &[u8]) -> Result<Option<Link>> {
    match table.get(key)? {
        None => Ok(None),
        Some(bytes) => decode(key, &bytes).map(Some),
    }
}

pub(crate) fn decode(key: &[u8], bytes: &[u8]) -> Result<Link> {
    Link::decode(bytes).map_err(|e| {
        Error::corrupted(
            format!("the link of key {}", String::from_utf8_lossy(key)),
            e.to_string(),
        )
    })
}

/// The value a stored link holds for a user (`None` for the head).
pub(crate) fn value_of(key: &[u8], bytes: &[u8]) -> Result<Option<Vec<u8>>> {
    Ok(match decode(key, bytes)? {
        Link::Head { .. } => None,
        Link::Entry { value, .. } => Some(value),
    })
}

/// The nearest key of `table` after (`forward`) or before `key` that is present once `writes`
/// are applied: from the table (skipping the head and keys `writes` deletes) or from `writes`.
/// Cost: one cursor over the table, walking past deleted keys.
fn neighbour(table: &Table, writes: &Writes, key: &[u8], forward: bool) -> Result<Option<Vec<u8>>> {
    let written = if forward {
        writes
            .range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded))
            .find(|(_, w)| w.is_some())
            .map(|(k, _)| k.clone())
    } else {
        writes
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(key)))
            .rev()
            .find(|(k, w)| w.is_some() && !k.is_empty())
            .map(|(k, _)| k.clone())
    };
    let mut cursor = if forward {
        table.range((Bound::Excluded(key), Bound::Unbounded))?
    } else {
        table.range((Bound::Unbounded, Bound::Excluded(key)))?
    };
    let mut stored = None;
    loop {
        let entry = if forward {
            cursor.next()
        } else {
            cursor.next_back()
        };
        let Some(entry) = entry else { break };
        let entry = entry?;
        if entry.key.is_empty() || matches!(writes.get(&entry.key), Some(None)) {
            continue;
        }
        stored = Some(entry.key);
        break;
    }
    Ok(match (written, stored) {
        (Some(a), Some(b)) => Some(if forward { a.min(b) } else { a.max(b) }),
        (a, b) => a.or(b),
    })
}

/// The updates to store so that `table`, with `writes` applied, holds every written value in
/// a correct chain: each written key's link, the link of each key before a written key (its
/// next may change), the head, and deletions. Returns key to stored bytes (`None`: delete).
///
/// Cost, for `w` written keys: at most `2w + 1` cursors over the table and `w` lookups.
pub(crate) fn updates(table: &Table, writes: &Writes) -> Result<Stores> {
    if writes.contains_key(HEAD_KEY) {
        return Err(Error::InvalidConfig(
            "the empty key is an ordered table's head; user keys are never empty".into(),
        ));
    }
    let mut affected: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut out: Stores = Vec::new();
    for (key, write) in writes {
        if write.is_some() {
            affected.insert(key.clone());
        } else if table.get(key)?.is_some() {
            out.push((key.clone(), None));
        }
        let before = neighbour(table, writes, key, false)?.unwrap_or_default();
        affected.insert(before);
    }
    for key in affected {
        let next = neighbour(table, writes, &key, true)?;
        let stored = table.get(&key)?;
        let link = if key.is_empty() {
            match next {
                // No key left: no head.
                None => {
                    if stored.is_some() {
                        out.push((key, None));
                    }
                    continue;
                }
                Some(next) => Link::Head { next: Some(next) },
            }
        } else {
            let value = match writes.get(&key) {
                Some(Some(value)) => value.clone(),
                _ => match stored
                    .as_deref()
                    .map(|b| value_of(&key, b))
                    .transpose()?
                    .flatten()
                {
                    Some(value) => value,
                    None => {
                        return Err(Error::corrupted(
                            format!("the link of key {}", String::from_utf8_lossy(&key)),
                            "missing where the chain needs it",
                        ))
                    }
                },
            };
            Link::Entry { value, next }
        };
        let bytes = link.encode();
        if stored.as_deref() != Some(&bytes[..]) {
            out.push((key, Some(bytes)));
        }
    }
    Ok(out)
}

/// The answer for `[lo, hi]` of `table` as it is: the key before the range, the entries, the
/// key after. Cost: two cursors over the table and the entries read.
pub(crate) fn range_answer(table: &Table, lo: &[u8], hi: &[u8], max: usize) -> Result<RangeAnswer> {
    let mut answer = RangeAnswer {
        lo: lo.to_vec(),
        hi: hi.to_vec(),
        before: Vec::new(),
        before_value: None,
        entries: Vec::new(),
        after: None,
    };
    if lo > hi {
        return Err(Error::InvalidConfig("a range's lo is above its hi".into()));
    }
    let head = stored_link(table, HEAD_KEY)?;
    let Some(head) = head else {
        // No head: the table holds no key (the verifier checks the root says so).
        return Ok(answer);
    };
    let mut before_link = head;
    if let Some(entry) = table
        .range((Bound::Unbounded, Bound::Excluded(lo)))?
        .next_back()
    {
        let entry = entry?;
        if !entry.key.is_empty() {
            let link = decode(&entry.key, &entry.value)?;
            if let Link::Entry { value, .. } = &link {
                answer.before_value = Some(value.clone());
            }
            answer.before = entry.key;
            before_link = link;
        }
    }
    let mut last_next = before_link.next().map(<[u8]>::to_vec);
    for entry in table.range((Bound::Included(lo), Bound::Included(hi)))? {
        let entry = entry?;
        if entry.key.is_empty() {
            continue;
        }
        let link = decode(&entry.key, &entry.value)?;
        last_next = link.next().map(<[u8]>::to_vec);
        if let Link::Entry { value, .. } = link {
            if max != 0 && answer.entries.len() == max {
                return Err(Error::RangeTooLarge { max });
            }
            answer.entries.push((entry.key, value));
        }
    }
    answer.after = last_next;
    Ok(answer)
}

/// Checks the chain of `table` whole: the head names the first key, each key the next, the
/// last none; every link decodes. Returns the first problem as (key, detail). Cost: one pass.
pub(crate) fn check_chain(table: &Table) -> Result<Option<(Vec<u8>, String)>> {
    let mut expected_next: Option<Option<Vec<u8>>> = None; // None: the head not seen yet
    let mut previous: Option<(Vec<u8>, Option<Vec<u8>>)> = None;
    let mut head_seen = false;
    for entry in table.cursor()? {
        let entry = entry?;
        let link = match Link::decode(&entry.value) {
            Ok(link) => link,
            Err(e) => return Ok(Some((entry.key, format!("its link does not decode: {e}")))),
        };
        if entry.key.is_empty() {
            head_seen = true;
            if !matches!(link, Link::Head { .. }) {
                return Ok(Some((entry.key, "the head's link is an entry".into())));
            }
            expected_next = Some(link.next().map(<[u8]>::to_vec));
            continue;
        }
        if matches!(link, Link::Head { .. }) {
            return Ok(Some((entry.key, "a key's link is a head".into())));
        }
        let pointed = match &previous {
            Some((_, next)) => next.clone(),
            None => expected_next.clone().flatten(),
        };
        if !head_seen {
            return Ok(Some((entry.key, "the table has keys and no head".into())));
        }
        if pointed.as_deref() != Some(&entry.key[..]) {
            let from = previous.map_or_else(
                || "the head".to_string(),
                |(k, _)| String::from_utf8_lossy(&k).into_owned(),
            );
            return Ok(Some((entry.key, format!("{from} does not link to it"))));
        }
        previous = Some((entry.key, link.next().map(<[u8]>::to_vec)));
    }
    match previous {
        Some((key, Some(next))) => Ok(Some((
            key,
            format!("the last key links to {}", String::from_utf8_lossy(&next)),
        ))),
        None if head_seen => Ok(Some((Vec::new(), "a head in a table with no key".into()))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::{Session, TableConfig};

    fn put(table: &Table, key: &[u8], link: Link) {
        table.insert(key, link.encode()).unwrap();
    }

    fn entry(value: &str, next: Option<&str>) -> Link {
        Link::Entry {
            value: value.as_bytes().to_vec(),
            next: next.map(|n| n.as_bytes().to_vec()),
        }
    }

    #[test]
    fn check_chain_finds_every_kind_of_break() {
        let dir = tempfile::tempdir().unwrap();
        let session = Session::open(dir.path()).unwrap();
        type Case<'a> = (&'a str, Vec<(&'a str, Link)>, Option<&'a str>);
        let cases: Vec<Case<'_>> = vec![
            ("empty", vec![], None),
            (
                "whole",
                vec![
                    (
                        "",
                        Link::Head {
                            next: Some(b"a".to_vec()),
                        },
                    ),
                    ("a", entry("1", Some("b"))),
                    ("b", entry("2", None)),
                ],
                None,
            ),
            ("no head", vec![("a", entry("1", None))], Some("a")),
            (
                "skips a key",
                vec![
                    (
                        "",
                        Link::Head {
                            next: Some(b"a".to_vec()),
                        },
                    ),
                    ("a", entry("1", Some("c"))),
                    ("b", entry("2", Some("c"))),
                    ("c", entry("3", None)),
                ],
                Some("b"),
            ),
            (
                "head skips the first key",
                vec![
                    (
                        "",
                        Link::Head {
                            next: Some(b"b".to_vec()),
                        },
                    ),
                    ("a", entry("1", Some("b"))),
                    ("b", entry("2", None)),
                ],
                Some("a"),
            ),
            (
                "last links on",
                vec![
                    (
                        "",
                        Link::Head {
                            next: Some(b"a".to_vec()),
                        },
                    ),
                    ("a", entry("1", Some("z"))),
                ],
                Some("a"),
            ),
            ("lone head", vec![("", Link::Head { next: None })], Some("")),
            (
                "a key holds a head",
                vec![
                    (
                        "",
                        Link::Head {
                            next: Some(b"a".to_vec()),
                        },
                    ),
                    ("a", Link::Head { next: None }),
                ],
                Some("a"),
            ),
        ];
        for (what, links, broken_at) in cases {
            let table = session.new_table(TableConfig::default()).unwrap();
            for (key, link) in links {
                put(&table, key.as_bytes(), link);
            }
            let found = check_chain(&table).unwrap().map(|(k, _)| k);
            assert_eq!(found, broken_at.map(|k| k.as_bytes().to_vec()), "{what}");
        }
        let table = session.new_table(TableConfig::default()).unwrap();
        table.insert(b"a", b"\x07junk").unwrap();
        assert!(
            check_chain(&table).unwrap().is_some(),
            "a link that does not decode"
        );
    }

    #[test]
    fn updates_keep_the_chain_against_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let session = Session::open(dir.path()).unwrap();
        let table = session
            .new_table(TableConfig::default().write_buffer_entries(4))
            .unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut rng = 12345u64;
        for round in 0..200u32 {
            let mut writes = Writes::new();
            for _ in 0..(1 + round % 5) {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = vec![b'k', (rng >> 33) as u8 % 24];
                let v = if (rng >> 40).is_multiple_of(3) {
                    None
                } else {
                    Some(vec![(rng >> 48) as u8])
                };
                writes.insert(k, v);
            }
            for (k, stored) in updates(&table, &writes).unwrap() {
                match stored {
                    Some(bytes) => table.insert(&k, bytes).unwrap(),
                    None => table.delete(&k).unwrap(),
                }
            }
            for (k, v) in writes {
                match v {
                    Some(v) => model.insert(k, v),
                    None => model.remove(&k),
                };
            }
            assert_eq!(check_chain(&table).unwrap(), None, "round {round}");
            let values: BTreeMap<Vec<u8>, Vec<u8>> = table
                .cursor()
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| !e.key.is_empty())
                .map(|e| (e.key.clone(), value_of(&e.key, &e.value).unwrap().unwrap()))
                .collect();
            assert_eq!(values, model, "round {round}");
        }
    }
}

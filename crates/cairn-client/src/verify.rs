//! The checks of the server's answers against a digest: reads, the receipts of a commit's
//! reads and writes, promises proved later, and ranges. Pure: no I/O, no lock, no clock.
//!
//! Owns: how a wire answer becomes claims for `cairn_proof`'s verifiers, which verifier runs
//! (fresh or of the past), what else must agree (tables, keys, versions, the values the client
//! wrote or saw, the links of ordered tables), and which [`Lie`] each failure is. May call:
//! `error`, `types`, `cairn_proof`, `cairn_wire`. Must never touch: the network, the
//! trusted digest (the client checks a digest's history before calling in here, and adopts it
//! after).
//!
//! **Ordered tables.** The receipt of an ordered table proves each key's stored *link* (its
//! value and the next key), which the server ships as `proven`; the client claims the links
//! and then checks each link's value is the value answered. A plain table ships no `proven`
//! and its values are claimed as they are. A server could present one kind as the other only
//! for values that happen to be a link's encoding; a client that declares its tables' kinds
//! ([`crate::ClientBuilder::ordered_tables`], [`crate::ClientBuilder::plain_tables`]) refuses
//! that too.
//!
//! Bounds: every check is linear in the answer's keys, plus the verifier's cost (about
//! `log₂ n` hashes per key, `docs/format/ledger.md`).

use std::collections::HashMap;

use cairn_proof::{
    verify_range, verify_range_at, verify_receipt, verify_receipt_at, Claim, Digest, Link,
    RangeAnswer, RangeVerifyError, Receipt, ReceiptVerifyError, TableClaims,
};
use cairn_wire as wire;

use crate::error::{receipt_lie, Lie};
use crate::types::{Expected, Values};

/// A range's entries (key, value) in key order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The tables whose kind the caller declared: `true` for ordered.
pub(crate) type Kinds = HashMap<String, bool>;

/// Which version an answer must prove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// The digest's newest ([`verify_receipt`]).
    Fresh,
    /// This version, against a digest that may be newer ([`verify_receipt_at`]).
    At(u64),
}

/// A wire digest as the verifier's. Errors: absent, or a root that is not 32 bytes.
pub(crate) fn digest_of(d: Option<&wire::Digest>, what: &str) -> Result<Digest, Lie> {
    d.ok_or_else(|| Lie::BadProof(format!("{what}: no digest")))?
        .to_proof()
        .ok_or_else(|| Lie::BadProof(format!("{what}: a digest root is not 32 bytes")))
}

fn decode_receipt(bytes: &[u8]) -> Result<Receipt, Lie> {
    Receipt::decode(bytes).map_err(|e| Lie::BadProof(format!("the receipt does not decode: {e}")))
}

/// One table of a receipt's claims: the keys, the values the client holds for them, and the
/// links the server says the receipt proves (ordered tables; empty for a plain one).
struct Section<'a> {
    table: &'a str,
    keys: &'a [Vec<u8>],
    values: &'a [Option<Vec<u8>>],
    proven: &'a [wire::Value],
}

/// Checks `receipt` proves every section against `digest` as `freshness` asks, then that each
/// ordered table's links hold the values. Errors: see the module doc.
fn check_sections(
    receipt: &Receipt,
    sections: &[Section<'_>],
    digest: &Digest,
    freshness: Freshness,
    kinds: &Kinds,
) -> Result<(), Lie> {
    for s in sections {
        let ordered = !s.proven.is_empty();
        if let Some(&declared) = kinds.get(s.table) {
            if declared != ordered && !s.keys.is_empty() {
                return Err(Lie::BadProof(format!(
                    "table {:?} is {}, the answer treats it as {}",
                    s.table,
                    kind_name(declared),
                    kind_name(ordered)
                )));
            }
        }
        if s.values.len() != s.keys.len()
            || (!s.proven.is_empty() && s.proven.len() != s.keys.len())
        {
            return Err(Lie::BadProof(format!(
                "table {:?}: {} keys, {} values, {} links",
                s.table,
                s.keys.len(),
                s.values.len(),
                s.proven.len()
            )));
        }
    }
    let claims: Vec<Vec<Claim<'_>>> = sections
        .iter()
        .map(|s| {
            let stored: Vec<Option<&[u8]>> = if s.proven.is_empty() {
                s.values.iter().map(|v| v.as_deref()).collect()
            } else {
                s.proven.iter().map(|v| v.value.as_deref()).collect()
            };
            s.keys
                .iter()
                .zip(stored)
                .map(|(k, v)| Claim::answer(k, v))
                .collect()
        })
        .collect();
    let reads: Vec<TableClaims<'_>> = sections
        .iter()
        .zip(&claims)
        .map(|(s, claims)| TableClaims {
            table: s.table,
            claims,
        })
        .collect();
    let keys_of = |table: &str| {
        sections
            .iter()
            .find(|s| s.table == table)
            .map(|s| s.keys.to_vec())
            .unwrap_or_default()
    };
    let verdict = match freshness {
        Freshness::Fresh => verify_receipt(receipt, &reads, digest),
        Freshness::At(_) => verify_receipt_at(receipt, &reads, digest),
    };
    verdict.map_err(|e| receipt_lie(e, keys_of))?;
    if let Freshness::At(version) = freshness {
        check_version(receipt.version, version)?;
    }
    for s in sections.iter().filter(|s| !s.proven.is_empty()) {
        for ((key, value), link) in s.keys.iter().zip(s.values).zip(s.proven) {
            check_link(s.table, key, value.as_deref(), link.value.as_deref())?;
        }
    }
    Ok(())
}

fn kind_name(ordered: bool) -> &'static str {
    if ordered {
        "ordered"
    } else {
        "plain"
    }
}

/// A receipt of `proved` offered for version `asked`.
fn check_version(proved: u64, asked: u64) -> Result<(), Lie> {
    if proved == asked {
        Ok(())
    } else if proved < asked {
        Err(Lie::StaleValue {
            version: proved,
            expected: asked,
        })
    } else {
        Err(Lie::BadProof(format!(
            "a receipt of version {proved} offered for version {asked}"
        )))
    }
}

/// A proved link (`None`: the key absent) holds `value`.
fn check_link(
    table: &str,
    key: &[u8],
    value: Option<&[u8]>,
    link: Option<&[u8]>,
) -> Result<(), Lie> {
    let linked = match link {
        None => None,
        Some(bytes) => match Link::decode(bytes) {
            Ok(Link::Entry { value, .. }) => Some(value),
            Ok(Link::Head { .. }) => {
                return Err(Lie::BadProof(format!(
                    "table {table:?}: key {} holds the head link",
                    hex::encode(key)
                )))
            }
            Err(e) => {
                return Err(Lie::BadProof(format!(
                    "table {table:?}: key {}'s link does not decode: {e}",
                    hex::encode(key)
                )))
            }
        },
    };
    if linked.as_deref() == value {
        Ok(())
    } else {
        Err(Lie::AlteredValue {
            table: table.to_string(),
            key: key.to_vec(),
            detail: "the value differs from the one its proved link holds".into(),
        })
    }
}

/// Checks a `get` answer for `asked` (tables and keys in the order asked) against `digest`;
/// returns the values, per table then key.
pub(crate) fn check_read(
    asked: &[(String, Vec<Vec<u8>>)],
    answer: &wire::ReadResponse,
    digest: &Digest,
    freshness: Freshness,
    kinds: &Kinds,
) -> Result<Values, Lie> {
    check_tables(asked.iter().map(|(t, _)| t.as_str()), &answer.tables)?;
    let values: Values = answer
        .tables
        .iter()
        .map(|t| t.values.iter().map(|v| v.value.clone()).collect())
        .collect();
    let sections: Vec<Section<'_>> = asked
        .iter()
        .zip(&answer.tables)
        .zip(&values)
        .map(|(((table, keys), t), values)| Section {
            table,
            keys,
            values,
            proven: &t.proven,
        })
        .collect();
    let receipt = decode_receipt(&answer.receipt)?;
    check_sections(&receipt, &sections, digest, freshness, kinds)?;
    if answer.version != receipt.version {
        return Err(Lie::BadProof(format!(
            "the answer says version {}, its receipt proves {}",
            answer.version, receipt.version
        )));
    }
    Ok(values)
}

/// The answer names exactly the tables asked, in order.
fn check_tables<'a>(
    asked: impl ExactSizeIterator<Item = &'a str>,
    answered: &[wire::TableValues],
) -> Result<(), Lie> {
    if asked.len() != answered.len() {
        return Err(Lie::BadProof(format!(
            "{} tables asked, {} answered",
            asked.len(),
            answered.len()
        )));
    }
    for (a, t) in asked.zip(answered) {
        if a != t.table {
            return Err(Lie::BadProof(format!(
                "table {:?} answered where {a:?} was asked",
                t.table
            )));
        }
    }
    Ok(())
}

/// Checks keys proved by a commit or a promises' verification: exactly the keys `expected`
/// names (tables in name order, keys sorted), holding exactly its values, at `freshness`
/// against `digest`. Returns the receipt.
pub(crate) fn check_proved(
    proved: &wire::ProvedKeys,
    expected: &Expected,
    digest: &Digest,
    freshness: Freshness,
    kinds: &Kinds,
) -> Result<Receipt, Lie> {
    let same_keys = proved.keys.len() == expected.len()
        && proved.keys.iter().zip(expected).all(|(p, (table, keys))| {
            p.table == *table && p.keys.len() == keys.len() && p.keys.iter().eq(keys.keys())
        });
    if !same_keys {
        return Err(Lie::BadProof(
            "the receipt is for other keys than the ones touched".into(),
        ));
    }
    let read = proved
        .read
        .as_ref()
        .ok_or_else(|| Lie::BadProof("keys proved without their read".into()))?;
    if digest_of(read.digest.as_ref(), "a proved read")? != *digest {
        return Err(Lie::BadProof(
            "a proved read against another digest than its answer's".into(),
        ));
    }
    check_tables(expected.keys().map(String::as_str), &read.tables)?;
    let wanted: Vec<Vec<Option<Vec<u8>>>> = expected
        .values()
        .map(|k| k.values().cloned().collect())
        .collect();
    for ((table, keys), (answered, want)) in expected.iter().zip(read.tables.iter().zip(&wanted)) {
        if answered.values.len() != want.len() {
            return Err(Lie::BadProof(format!(
                "table {table:?}: {} keys proved, {} values answered",
                want.len(),
                answered.values.len()
            )));
        }
        let differs = (answered.values.iter().zip(want)).position(|(a, w)| a.value != *w);
        if let Some(i) = differs {
            return Err(Lie::AlteredValue {
                table: table.clone(),
                key: keys.keys().nth(i).cloned().unwrap_or_default(),
                detail: "the answer's value is not the one written or seen".into(),
            });
        }
    }
    let sections: Vec<Section<'_>> = expected
        .iter()
        .zip(&proved.keys)
        .zip(read.tables.iter().zip(&wanted))
        .map(|(((table, _), p), (t, values))| Section {
            table,
            keys: &p.keys,
            values,
            proven: &t.proven,
        })
        .collect();
    let receipt = decode_receipt(&read.receipt)?;
    check_sections(&receipt, &sections, digest, freshness, kinds)?;
    if read.version != receipt.version {
        return Err(Lie::BadProof(format!(
            "a proved read says version {}, its receipt proves {}",
            read.version, receipt.version
        )));
    }
    Ok(receipt)
}

/// Checks a `range` answer for ordered table `table`, `[lo, hi]`, against `digest`; returns
/// the version and the entries.
pub(crate) fn check_range(
    table: &str,
    (lo, hi): (&[u8], &[u8]),
    answer: &wire::RangeResponse,
    digest: &Digest,
    freshness: Freshness,
    kinds: &Kinds,
) -> Result<(u64, Entries), Lie> {
    if kinds.get(table) == Some(&false) {
        return Err(Lie::BadProof(format!(
            "table {table:?} is plain: it has no range proofs"
        )));
    }
    let incomplete = |detail: String| Lie::IncompleteRange {
        table: table.to_string(),
        detail,
    };
    let receipt = decode_receipt(&answer.receipt)?;
    let range = RangeAnswer::decode(&answer.answer)
        .map_err(|e| Lie::BadProof(format!("the range answer does not decode: {e}")))?;
    let verdict = match freshness {
        Freshness::Fresh => verify_range(&receipt, table, lo, hi, &range, digest),
        Freshness::At(_) => verify_range_at(&receipt, table, lo, hi, &range, digest),
    };
    match verdict {
        Ok(()) => {}
        Err(RangeVerifyError::Shape(s)) => return Err(incomplete(s.to_string())),
        Err(RangeVerifyError::Receipt(e @ ReceiptVerifyError::Trie { .. })) => {
            return Err(match receipt_lie(e, |_| Vec::new()) {
                Lie::AlteredValue { detail, .. } => incomplete(format!(
                    "its links are not the table's (a key left out or added, or a value \
                     altered): {detail}"
                )),
                other => other,
            })
        }
        Err(RangeVerifyError::Receipt(e)) => return Err(receipt_lie(e, |_| Vec::new())),
    }
    if let Freshness::At(version) = freshness {
        check_version(receipt.version, version)?;
    }
    if answer.version != receipt.version {
        return Err(Lie::BadProof(format!(
            "the range says version {}, its receipt proves {}",
            answer.version, receipt.version
        )));
    }
    let listed = answer.entries.len() == range.entries.len()
        && answer
            .entries
            .iter()
            .zip(&range.entries)
            .all(|(w, (k, v))| w.key == *k && w.value.as_ref() == Some(v));
    if !listed {
        return Err(incomplete(
            "the entries listed are not the ones the proved answer holds".into(),
        ));
    }
    Ok((receipt.version, range.entries))
}

/// Checks a promise's answer has the shape asked (tables in order, a value per key); returns
/// the values. Nothing is proved yet: [`check_proved`] does, later.
pub(crate) fn check_promise(
    asked: &[(String, Vec<Vec<u8>>)],
    answer: &wire::ReadResponse,
) -> Result<Values, Lie> {
    check_tables(asked.iter().map(|(t, _)| t.as_str()), &answer.tables)?;
    for ((table, keys), t) in asked.iter().zip(&answer.tables) {
        if t.values.len() != keys.len() {
            return Err(Lie::BadProof(format!(
                "table {table:?}: {} keys asked, {} values promised",
                keys.len(),
                t.values.len()
            )));
        }
    }
    Ok(answer
        .tables
        .iter()
        .map(|t| t.values.iter().map(|v| v.value.clone()).collect())
        .collect())
}

/// Checks the receipt of a commit's reads: the keys read held the values `expected` as of
/// the version before `version` (none for a batch that read nothing; for version 1, every key
/// read was absent, since version 0 is the empty ledger).
pub(crate) fn check_commit_reads(
    proved: Option<&wire::ProvedKeys>,
    expected: &Expected,
    digest: &Digest,
    version: u64,
    kinds: &Kinds,
) -> Result<(), Lie> {
    match proved {
        Some(_) if expected.is_empty() => Err(Lie::BadProof(
            "a receipt of reads for a batch that read nothing".into(),
        )),
        None if expected.is_empty() => Ok(()),
        None if version == 1 => {
            for (table, keys) in expected {
                if let Some((key, _)) = keys.iter().find(|(_, v)| v.is_some()) {
                    return Err(Lie::AlteredValue {
                        table: table.clone(),
                        key: key.clone(),
                        detail: "version 1 follows the empty ledger, where the key was absent"
                            .into(),
                    });
                }
            }
            Ok(())
        }
        None => Err(Lie::BadProof("no receipt for the keys read".into())),
        Some(p) => check_proved(p, expected, digest, Freshness::At(version - 1), kinds).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_must_hold_the_values_answered() {
        let link = Link::Entry {
            value: b"Alice".to_vec(),
            next: Some(b"bob".to_vec()),
        }
        .encode();
        assert_eq!(check_link("t", b"a", Some(b"Alice"), Some(&link)), Ok(()));
        assert_eq!(check_link("t", b"a", None, None), Ok(()));
        assert!(matches!(
            check_link("t", b"a", Some(b"Alicf"), Some(&link)),
            Err(Lie::AlteredValue { .. })
        ));
        assert!(matches!(
            check_link("t", b"a", None, Some(&link)),
            Err(Lie::AlteredValue { .. })
        ));
        let head = Link::Head { next: None }.encode();
        assert!(matches!(
            check_link("t", b"a", None, Some(&head)),
            Err(Lie::BadProof(_))
        ));
        assert!(matches!(
            check_link("t", b"a", None, Some(b"\x07")),
            Err(Lie::BadProof(_))
        ));
    }

    #[test]
    fn versions_and_first_commits_are_checked() {
        assert_eq!(check_version(3, 3), Ok(()));
        assert!(matches!(
            check_version(2, 3),
            Err(Lie::StaleValue {
                version: 2,
                expected: 3
            })
        ));
        assert!(matches!(check_version(4, 3), Err(Lie::BadProof(_))));
        let digest = Digest::EMPTY;
        let mut seen = Expected::new();
        seen.entry("t".into())
            .or_default()
            .insert(b"k".to_vec(), None);
        let kinds = Kinds::new();
        // Version 1 follows the empty ledger: a key read absent needs no receipt...
        assert_eq!(check_commit_reads(None, &seen, &digest, 1, &kinds), Ok(()));
        // ...but one read with a value is a lie, and later versions need the receipt.
        assert!(matches!(
            check_commit_reads(None, &seen, &digest, 2, &kinds),
            Err(Lie::BadProof(_))
        ));
        seen.get_mut("t")
            .unwrap()
            .insert(b"k".to_vec(), Some(b"v".to_vec()));
        assert!(matches!(
            check_commit_reads(None, &seen, &digest, 1, &kinds),
            Err(Lie::AlteredValue { .. })
        ));
        assert_eq!(
            check_commit_reads(None, &Expected::new(), &digest, 5, &kinds),
            Ok(())
        );
    }

    #[test]
    fn answers_of_another_shape_are_refused() {
        let asked = vec![("t".to_string(), vec![b"k".to_vec()])];
        let mut answer = wire::ReadResponse {
            version: 1,
            digest: None,
            tables: vec![wire::TableValues {
                table: "u".into(),
                values: vec![wire::Value { value: None }],
                proven: vec![],
            }],
            receipt: vec![],
            shards: vec![],
            global: vec![],
        };
        assert!(matches!(
            check_promise(&asked, &answer),
            Err(Lie::BadProof(_))
        ));
        answer.tables[0].table = "t".into();
        assert_eq!(check_promise(&asked, &answer), Ok(vec![vec![None]]));
        answer.tables[0].values.push(wire::Value { value: None });
        assert!(matches!(
            check_promise(&asked, &answer),
            Err(Lie::BadProof(_))
        ));
        // A receipt that does not decode.
        answer.tables[0].values.pop();
        let kinds = Kinds::new();
        let e = check_read(&asked, &answer, &Digest::EMPTY, Freshness::Fresh, &kinds);
        assert!(matches!(e, Err(Lie::BadProof(_))));
    }
}

//! Complete range proofs over *ordered* tables (`docs/format/ledger.md`, "Ordered tables and
//! range proofs"): a range answer that provably leaves out no key of the range and adds none.
//!
//! Owns: [`Link`] (what an ordered table stores under each key), [`RangeAnswer`] and its
//! encoding, and the client's check ([`verify_range`], [`verify_range_at`]). May call: `ledger`
//! (receipts and their checks), `proof` (claims).
//!
//! A trie over hashed keys cannot show that a range answer omitted nothing: the keys of a range
//! are scattered over the trie. An ordered table links its keys in key order instead: under each
//! key it stores a [`Link`], the key's value and the **next key** of the table (or none, for the
//! last), and under the empty key, the *head*, the table's first key. The trie commits to the
//! links like to any value. An answer for `[lo, hi]` then shows the key before the range (the
//! head, or the largest key below `lo`) and every key from there on, each pointing to the next,
//! until a key whose next is above `hi` (or none): the chain leaves no room for a key the answer
//! omitted, and a key it added would break it. The keys are proved by the receipt's multiproof of
//! their links; so the completeness holds against the table's state root, as far as the chain
//! covers the table (the audit checks that it covers every key, `docs/ledger.md`).

use alloc::vec::Vec;

use crate::error::{RangeDecodeError, RangeVerifyError};
use crate::hash::ZERO;
use crate::history::Digest;
use crate::ledger::{verify_receipt, verify_receipt_at, Receipt, TableClaims, LEDGER_MAGIC};
use crate::proof::Claim;

/// The key of an ordered table's head (the empty key: user keys of an ordered table are never
/// empty).
pub const HEAD_KEY: &[u8] = b"";
/// The longest key a link names (Cairn's longest key).
pub const LINK_KEY_BYTES_MAX: usize = 4064;

const TAG_HEAD: u8 = 0;
const TAG_ENTRY: u8 = 1;
const TYPE_RANGE: u8 = 2;
const FORMAT_VERSION: u8 = 1;

/// What an ordered table stores under a key: the head (under [`HEAD_KEY`]) or an entry with
/// its value, and the next key of the table in key order (`None`: none follows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// The head: the table's first key.
    Head {
        /// The table's first key (`None`: the table holds no key).
        next: Option<Vec<u8>>,
    },
    /// A key's entry.
    Entry {
        /// The key's value.
        value: Vec<u8>,
        /// The next key (`None`: this is the table's last key).
        next: Option<Vec<u8>>,
    },
}

impl Link {
    /// The next key the link names.
    pub fn next(&self) -> Option<&[u8]> {
        match self {
            Link::Head { next } | Link::Entry { next, .. } => next.as_deref(),
        }
    }

    /// The encoding: tag (`0` head, `1` entry); for an entry, the value's length (u32
    /// big-endian) and the value; then `0` for no next key, or `1`, the next key's length (u16
    /// big-endian) and the key.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let next = match self {
            Link::Head { next } => {
                out.push(TAG_HEAD);
                next
            }
            Link::Entry { value, next } => {
                out.push(TAG_ENTRY);
                out.extend_from_slice(&(value.len() as u32).to_be_bytes());
                out.extend_from_slice(value);
                next
            }
        };
        match next {
            None => out.push(0),
            Some(key) => {
                out.push(1);
                out.extend_from_slice(&(key.len() as u16).to_be_bytes());
                out.extend_from_slice(key);
            }
        }
        out
    }

    /// A link from its encoding. Total and canonical: a link re-encodes to the bytes it came
    /// from; a next key is 1 to [`LINK_KEY_BYTES_MAX`] bytes.
    pub fn decode(bytes: &[u8]) -> Result<Link, RangeDecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let tag = r.u8("link tag")?;
        let value = match tag {
            TAG_HEAD => None,
            TAG_ENTRY => {
                let len = r.u32("value length")? as usize;
                Some(r.take(len, "value")?.to_vec())
            }
            _ => {
                return Err(RangeDecodeError::Field(
                    "link tag",
                    "neither head nor entry",
                ))
            }
        };
        let next = r.key_option("next key")?;
        if r.at != bytes.len() {
            return Err(RangeDecodeError::TrailingBytes(bytes.len() - r.at));
        }
        Ok(match value {
            None => Link::Head { next },
            Some(value) => Link::Entry { value, next },
        })
    }
}

/// A server's answer for the keys of an ordered table in `[lo, hi]` (both included), with what
/// the receipt's multiproof needs to show it complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeAnswer {
    /// The range's first key (included).
    pub lo: Vec<u8>,
    /// The range's last key (included).
    pub hi: Vec<u8>,
    /// The key before the range: the largest key below `lo`, or [`HEAD_KEY`].
    pub before: Vec<u8>,
    /// Its value (`None` for the head).
    pub before_value: Option<Vec<u8>>,
    /// The entries in the range, in key order.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// The key after the last entry (after `before` if there are none): above `hi`, or `None`
    /// if no key follows.
    pub after: Option<Vec<u8>>,
}

impl RangeAnswer {
    /// The links the answer claims: `before`'s, then each entry's, each pointing to the next
    /// key of the answer and the last to `after`. An empty table (no head) claims nothing here:
    /// see [`verify_range`].
    pub fn links(&self) -> Vec<(Vec<u8>, Link)> {
        let mut out = Vec::with_capacity(self.entries.len() + 1);
        let mut keys = self.entries.iter().map(|(k, _)| k.clone());
        let first_next = keys.next().or_else(|| self.after.clone());
        let before = match &self.before_value {
            None => Link::Head { next: first_next },
            Some(value) => Link::Entry {
                value: value.clone(),
                next: first_next,
            },
        };
        out.push((self.before.clone(), before));
        for (i, (key, value)) in self.entries.iter().enumerate() {
            let next = match self.entries.get(i + 1) {
                Some((k, _)) => Some(k.clone()),
                None => self.after.clone(),
            };
            out.push((
                key.clone(),
                Link::Entry {
                    value: value.clone(),
                    next,
                },
            ));
        }
        out
    }

    /// The keys a receipt for this answer must prove: `before` and every entry's.
    pub fn proved_keys(&self) -> Vec<Vec<u8>> {
        core::iter::once(self.before.clone())
            .chain(self.entries.iter().map(|(k, _)| k.clone()))
            .collect()
    }

    /// Checks the answer's shape (no proof): `lo <= hi`; `before` is the head (with no value)
    /// or a key with a value below `lo`; entries strictly increasing within `[lo, hi]`, none
    /// empty; `after`, if any, above `hi`.
    pub fn check_shape(&self) -> Result<(), RangeVerifyError> {
        if self.lo > self.hi {
            return Err(RangeVerifyError::Shape("lo is above hi"));
        }
        if self.before.is_empty() != self.before_value.is_none() {
            return Err(RangeVerifyError::Shape(
                "the key before the range is the head exactly when it has no value",
            ));
        }
        if !self.before.is_empty() && self.before >= self.lo {
            return Err(RangeVerifyError::Shape(
                "the key before the range is not below lo",
            ));
        }
        let mut previous: &[u8] = &self.before;
        for (key, _) in &self.entries {
            if key.is_empty() || key.as_slice() <= previous {
                return Err(RangeVerifyError::Shape(
                    "entries are not in increasing key order",
                ));
            }
            if *key < self.lo || *key > self.hi {
                return Err(RangeVerifyError::Shape("an entry is outside the range"));
            }
            previous = key;
        }
        if let Some(after) = &self.after {
            if *after <= self.hi {
                return Err(RangeVerifyError::Shape(
                    "the key after the range is not above hi",
                ));
            }
        }
        Ok(())
    }

    /// The encoding (`docs/format/ledger.md`): magic `CRNL`, format version 1, type 2, two
    /// zero bytes; `lo`, `hi`, `before` (each a u16 big-endian length and bytes); `before`'s
    /// value (`0`, or `1`, a u32 length and bytes); the entry count (u32) and each entry (u16
    /// key length, key, u32 value length, value); `after` (`0`, or `1`, u16 length, key).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&LEDGER_MAGIC);
        out.extend_from_slice(&[FORMAT_VERSION, TYPE_RANGE, 0, 0]);
        for key in [&self.lo, &self.hi, &self.before] {
            push_key(&mut out, key);
        }
        match &self.before_value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                push_value(&mut out, v);
            }
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for (k, v) in &self.entries {
            push_key(&mut out, k);
            push_value(&mut out, v);
        }
        match &self.after {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                push_key(&mut out, k);
            }
        }
        out
    }

    /// An answer from its encoding. Total and canonical; checks the encoding only (bounds,
    /// lengths), [`verify_range`] the rest. Allocates at most about the input's length.
    pub fn decode(bytes: &[u8]) -> Result<RangeAnswer, RangeDecodeError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4, "magic")? != LEDGER_MAGIC {
            return Err(RangeDecodeError::BadMagic);
        }
        let version = r.u8("format version")?;
        if version != FORMAT_VERSION {
            return Err(RangeDecodeError::UnsupportedVersion(version));
        }
        let ty = r.u8("structure type")?;
        if ty != TYPE_RANGE {
            return Err(RangeDecodeError::WrongType(ty));
        }
        if r.take(2, "reserved")? != [0, 0] {
            return Err(RangeDecodeError::Field("reserved", "not zero"));
        }
        let lo = r.key("lo")?;
        let hi = r.key("hi")?;
        let before = r.key("before")?;
        let before_value = match r.u8("before's value flag")? {
            0 => None,
            1 => Some(r.value("before's value")?),
            _ => return Err(RangeDecodeError::Field("before's value flag", "not 0 or 1")),
        };
        let count = r.u32("entry count")? as usize;
        // Each entry takes at least 6 bytes: refuse counts the input cannot hold.
        if count > (bytes.len() - r.at) / 6 {
            return Err(RangeDecodeError::Field(
                "entry count",
                "more than the bytes hold",
            ));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let key = r.key("entry key")?;
            let value = r.value("entry value")?;
            entries.push((key, value));
        }
        let after = r.key_option("after")?;
        if r.at != bytes.len() {
            return Err(RangeDecodeError::TrailingBytes(bytes.len() - r.at));
        }
        Ok(RangeAnswer {
            lo,
            hi,
            before,
            before_value,
            entries,
            after,
        })
    }
}

/// Checks that `answer` is exactly the keys of ordered table `table` in `[lo, hi]`, the range
/// the client asked for, at the digest's newest version: the answer must be for that range
/// (a true answer for another range, say a narrower one, is refused), its shape
/// ([`RangeAnswer::check_shape`]), then the receipt ([`verify_receipt`]) with the answer's links
/// as claims (`before`'s and each entry's, chained). An answer whose `before` is the head with no
/// entry and nothing after claims the head absent instead, which only an empty table's root (all
/// zeros) allows.
///
/// Cost: as [`verify_receipt`] with one claim per entry plus one.
pub fn verify_range(
    receipt: &Receipt,
    table: &str,
    lo: &[u8],
    hi: &[u8],
    answer: &RangeAnswer,
    digest: &Digest,
) -> Result<(), RangeVerifyError> {
    check(receipt, table, (lo, hi), answer, digest, true)
}

/// As [`verify_range`], for an answer at the receipt's version, which may be older than the
/// digest's newest ([`verify_receipt_at`]).
pub fn verify_range_at(
    receipt: &Receipt,
    table: &str,
    lo: &[u8],
    hi: &[u8],
    answer: &RangeAnswer,
    digest: &Digest,
) -> Result<(), RangeVerifyError> {
    check(receipt, table, (lo, hi), answer, digest, false)
}

fn check(
    receipt: &Receipt,
    table: &str,
    (lo, hi): (&[u8], &[u8]),
    answer: &RangeAnswer,
    digest: &Digest,
    fresh: bool,
) -> Result<(), RangeVerifyError> {
    if answer.lo != lo || answer.hi != hi {
        return Err(RangeVerifyError::Shape(
            "the answer is for another range than the one asked",
        ));
    }
    answer.check_shape()?;
    let links = answer.links();
    let encoded: Vec<Vec<u8>> = links.iter().map(|(_, l)| l.encode()).collect();
    let empty = answer.before.is_empty() && answer.entries.is_empty() && answer.after.is_none();
    let claims: Vec<Claim<'_>> = if empty {
        // No head: the table must be empty, which its root shows.
        let section =
            receipt
                .tables
                .iter()
                .find(|t| t.name == table)
                .ok_or(RangeVerifyError::Shape(
                    "the receipt has no section for the table",
                ))?;
        if section.root.hash != ZERO {
            // A table with keys has a head: the answer must show it.
            return Err(RangeVerifyError::Shape(
                "a table with keys answered as empty",
            ));
        }
        alloc::vec![Claim::absent(HEAD_KEY)]
    } else {
        links
            .iter()
            .zip(&encoded)
            .map(|((key, _), bytes)| Claim::present(key, bytes))
            .collect()
    };
    let reads = [TableClaims {
        table,
        claims: &claims,
    }];
    let verified = if fresh {
        verify_receipt(receipt, &reads, digest)
    } else {
        verify_receipt_at(receipt, &reads, digest)
    };
    verified.map_err(RangeVerifyError::Receipt)
}

fn push_key(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(&(key.len().min(u16::MAX as usize) as u16).to_be_bytes());
    out.extend_from_slice(key);
}

fn push_value(out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(&(value.len().min(u32::MAX as usize) as u32).to_be_bytes());
    out.extend_from_slice(value);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RangeDecodeError> {
        let remaining = self.bytes.len() - self.at;
        if n > remaining {
            return Err(RangeDecodeError::Truncated {
                what,
                needed: n - remaining,
            });
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, RangeDecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, RangeDecodeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_be_bytes(b))
    }

    fn key(&mut self, what: &'static str) -> Result<Vec<u8>, RangeDecodeError> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2, what)?);
        let len = usize::from(u16::from_be_bytes(b));
        if len > LINK_KEY_BYTES_MAX {
            return Err(RangeDecodeError::Field(what, "longer than a key may be"));
        }
        Ok(self.take(len, what)?.to_vec())
    }

    fn key_option(&mut self, what: &'static str) -> Result<Option<Vec<u8>>, RangeDecodeError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => {
                let key = self.key(what)?;
                if key.is_empty() {
                    return Err(RangeDecodeError::Field(
                        what,
                        "an empty key is never a next key",
                    ));
                }
                Ok(Some(key))
            }
            _ => Err(RangeDecodeError::Field(what, "flag not 0 or 1")),
        }
    }

    fn value(&mut self, what: &'static str) -> Result<Vec<u8>, RangeDecodeError> {
        let len = self.u32(what)? as usize;
        Ok(self.take(len, what)?.to_vec())
    }
}

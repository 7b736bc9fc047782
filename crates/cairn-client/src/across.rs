//! The check of a router's read across shards (`docs/server.md`, "Lifted proofs"): each
//! shard's own answer against the digest it names, then each table's lifted proof against the
//! table's global root, bound to the shards' receipts. Pure: no I/O, no lock, no clock.
//!
//! Owns: how a router's `get` answer (with `lift`) splits into the shards' answers, which
//! shard each key belongs to as the client computes it, and what binds the global root to the
//! shards' receipts. May call: `verify` (each shard's answer), `error`, `types`,
//! `cairn_proof`, `cairn_wire`. Must never touch: the network, the trusted digest (a router's
//! shards each have their own history; the caller compares their digests with ones it trusts).
//!
//! **What is checked.** For each shard the read touched, its answer proves its keys' values
//! against its digest (as [`crate::Client::get`] checks a server's, the digest taken as
//! shown). For each table, the lifted proof proves every key's value against the global root,
//! and for every shard it touched the proof shows, at that shard's position, the subtree whose
//! table root is the one in that shard's receipt: so the global root holds the proved shards at
//! the versions their receipts prove. The shards the read did not touch enter the global root
//! only as hashes, which this read does not check against their digests.
//!
//! Bounds: linear in the answer's keys and shards, plus the verifiers' cost (about `log₂ n`
//! hashes per key and proof, once per shard's receipt and once per lifted proof).

use cairn_proof::{Claim, Digest, HashKind, Proof, Receipt, Root, ShardMap, SHARD_BITS_MAX};
use cairn_wire as wire;

use crate::error::Lie;
use crate::types::Values;
use crate::verify::{self, Freshness, Kinds};

/// One shard's part of a verified read across shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardPart {
    /// The shard.
    pub shard: u32,
    /// The version of the shard's ledger its answer proves.
    pub version: u64,
    /// The shard's digest its receipt was checked against (as the router passed it on; compare
    /// it with one trusted for that shard).
    pub digest: Digest,
}

/// One table's global root in a verified read across shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalRoot {
    /// The table.
    pub table: String,
    /// The table's global root: the root one table holding every shard's contents would have.
    pub root: Root,
    /// Each shard's version the root was built from, shard 0 first.
    pub versions: Vec<u64>,
}

/// What a verified read across shards proved: values, each shard's part, each table's root.
pub(crate) struct Checked {
    pub(crate) values: Values,
    pub(crate) shards: Vec<ShardPart>,
    pub(crate) global: Vec<GlobalRoot>,
}

/// Tables and their keys, in the order asked.
type Asked = Vec<(String, Vec<Vec<u8>>)>;

fn bad(what: impl Into<String>) -> Lie {
    Lie::BadProof(what.into())
}

/// Checks a router's `get` answer for `asked` (tables and keys in the order asked), asked with
/// `lift`. Errors: [`Lie::BadProof`] for an answer of another shape, a lifted proof that does
/// not verify or is not bound to a shard's receipt; each shard's answer as
/// [`crate::Client::get`] refuses it.
pub(crate) fn check_across(
    asked: &[(String, Vec<Vec<u8>>)],
    answer: &wire::ReadResponse,
    kinds: &Kinds,
) -> Result<Checked, Lie> {
    if answer.global.len() != asked.len() {
        return Err(bad(format!(
            "{} tables asked, {} global proofs answered",
            asked.len(),
            answer.global.len()
        )));
    }
    let shards = answer.global[0].versions.len();
    let bits = shards.trailing_zeros();
    if !shards.is_power_of_two() || bits > u32::from(SHARD_BITS_MAX) {
        return Err(bad(format!("{shards} shards is not a power of two")));
    }
    let mut proofs = Vec::with_capacity(asked.len());
    for ((table, _), g) in asked.iter().zip(&answer.global) {
        if g.table != *table || g.versions.len() != shards {
            return Err(bad(format!(
                "the global proof of {:?} ({} shards) answered for {table:?}",
                g.table,
                g.versions.len()
            )));
        }
        let proof = Proof::decode(&g.proof)
            .map_err(|e| bad(format!("table {table:?}: the global proof: {e}")))?;
        proofs.push(proof);
    }
    let kind: HashKind = proofs[0].kind();
    let map = ShardMap::new(kind, bits as u8).map_err(|e| bad(e.to_string()))?;

    // Each shard's part of the request, split as the router splits it.
    let mut parts: Vec<(u32, Asked)> = Vec::new();
    for (table, keys) in asked {
        for key in keys {
            let shard = map.shard_of(key);
            let at = match parts.binary_search_by_key(&shard, |p| p.0) {
                Ok(at) => at,
                Err(at) => {
                    parts.insert(at, (shard, Vec::new()));
                    at
                }
            };
            let part = &mut parts[at].1;
            match part.iter_mut().find(|(t, _)| t == table) {
                Some((_, ks)) => ks.push(key.clone()),
                None => part.push((table.clone(), vec![key.clone()])),
            }
        }
    }
    if answer.shards.len() != parts.len()
        || (answer.shards.iter().zip(&parts)).any(|(s, p)| s.shard != p.0)
    {
        return Err(bad("the shards answered are not those the keys belong to"));
    }

    // Each shard's answer against its own digest.
    let mut checked = Vec::with_capacity(parts.len());
    let mut shard_parts = Vec::with_capacity(parts.len());
    for (s, (shard, part)) in answer.shards.iter().zip(&parts) {
        let read = (s.read.as_ref()).ok_or_else(|| bad(format!("shard {shard}: no answer")))?;
        let what = format!("shard {shard}'s read");
        let digest = verify::digest_of(read.digest.as_ref(), &what)?;
        let values = verify::check_read(part, read, &digest, Freshness::Fresh, kinds)?;
        let receipt =
            Receipt::decode(&read.receipt).map_err(|e| bad(format!("{what}: the receipt: {e}")))?;
        for g in &answer.global {
            if g.versions[*shard as usize] != read.version {
                return Err(bad(format!(
                    "table {:?}'s global root holds shard {shard} at version {}, its answer \
                     proves {}",
                    g.table, g.versions[*shard as usize], read.version
                )));
            }
        }
        shard_parts.push(ShardPart {
            shard: *shard,
            version: read.version,
            digest,
        });
        checked.push((part, read, values, receipt));
    }

    // The values in the order asked, and each table's lifted proof.
    let mut values: Values = Vec::with_capacity(asked.len());
    let mut global = Vec::with_capacity(asked.len());
    for (((table, keys), g), proof) in asked.iter().zip(&answer.global).zip(&proofs) {
        let mut out = Vec::with_capacity(keys.len());
        let mut claims: Vec<Claim<'_>> = Vec::with_capacity(keys.len());
        let mut next = vec![0usize; checked.len()];
        for key in keys {
            let shard = map.shard_of(key);
            let at = (parts.iter().position(|p| p.0 == shard))
                .ok_or_else(|| bad("a key's shard was not answered"))?;
            let (part, read, part_values, _) = &checked[at];
            let t = (part.iter().position(|(t, _)| t == table))
                .ok_or_else(|| bad("a table's part was not answered"))?;
            let i = next[at];
            next[at] += 1;
            let value = &part_values[t][i];
            // An ordered table's proof claims the stored link, checked against the value
            // with the shard's receipt.
            let stored = match read.tables[t].proven.get(i) {
                Some(link) => link.value.as_deref(),
                None => value.as_deref(),
            };
            claims.push(Claim::answer(key, stored));
            out.push(value.clone());
        }
        let hash: [u8; 32] = (g.root[..].try_into())
            .map_err(|_| bad(format!("table {table:?}: a global root is not 32 bytes")))?;
        let root = Root { kind, hash };
        proof
            .verify(&root, &claims)
            .map_err(|e| bad(format!("table {table:?}: the global proof: {e}")))?;
        for (part, (shard, _)) in checked.iter().zip(&parts) {
            let Some(section) = part.3.tables.iter().find(|s| s.name == *table) else {
                continue;
            };
            let shown = map
                .table_root_in(*shard, proof)
                .map_err(|e| bad(format!("table {table:?}: the global proof: {e}")))?;
            if shown != section.root.hash {
                return Err(bad(format!(
                    "table {table:?}: the global proof holds another shard {shard} than its \
                     receipt proves"
                )));
            }
        }
        values.push(out);
        global.push(GlobalRoot {
            table: table.clone(),
            root,
            versions: g.versions.clone(),
        });
    }
    Ok(Checked {
        values,
        shards: shard_parts,
        global,
    })
}

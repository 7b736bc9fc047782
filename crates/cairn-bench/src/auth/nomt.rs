//! NOMT 1.0 under `auth` (`--features nomt`).
//!
//! Settings, from its documentation and examples (`Options` docs, `examples/commit_batch`,
//! benchtop's defaults): a hash table sized at creation (`--nomt-buckets`, default one 4 KiB
//! bucket per 4 keys: its pages, depth-6 subtrees, hold about 6 keys each at these sizes, so
//! the table is about two-thirds full, below the 90% past which it degrades), preallocated (its
//! default); `warm_up(true)`, which its docs say to
//! enable for `Session::warm_up` to fetch anything; one commit worker per core (2 here) and its
//! default 3 I/O workers, its page and leaf caches at their defaults of 256 MiB each unless
//! `--nomt-page-cache-mib` / `--nomt-leaf-cache-mib` say otherwise (under a memory limit they
//! must leave room for the rest), and 2 upper page-cache levels (its default). A commit is `Session::finish` with the sorted writes, then
//! `FinishedSession::commit`, which returns once the commit is synced (NOMT has no unsynced
//! mode). Proofs are `Session::prove` (a `PathProof`; multiproofs from
//! `MultiProof::from_path_proofs`), measured in their Borsh encoding and verified with
//! `nomt-core`'s verifier.

use std::path::Path;

use bitvec::prelude::*;
use nomt::hasher::{Blake3Hasher, Sha2Hasher, ValueHasher};
use nomt::proof::{MultiProof, PathProof};
use nomt::trie::LeafData;
use nomt::{KeyReadWrite, Nomt, Options, Session, SessionParams};

use super::{AuthEngine, AuthProof, Change, KeyPath, Value};
use crate::cli::{AuthArgs, AuthHashArg};
use crate::failure::Failure;

/// Opens a new NOMT database in `dir` with the hash function of `args`.
pub fn open(dir: &Path, args: &AuthArgs) -> Result<Box<dyn AuthEngine>, Failure> {
    let buckets = if args.nomt_buckets > 0 {
        args.nomt_buckets
    } else {
        u32::try_from(args.keys.div_ceil(4).max(64_000)).unwrap_or(u32::MAX)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut o = Options::new();
    o.path(dir.join("nomt"));
    o.hashtable_buckets(buckets);
    o.commit_concurrency(cores);
    o.warm_up(true);
    o.page_cache_size(args.nomt_page_cache_mib);
    o.leaf_cache_size(args.nomt_leaf_cache_mib);
    let settings = format!(
        "{buckets} hash-table buckets (preallocated, {:.1} GiB), commit concurrency {cores}, 3 I/O \
         workers (default), warm-up on, page cache {} MiB, leaf cache {} MiB (defaults 256 and \
         256), 2 upper page-cache levels (default)",
        buckets as f64 * 4096.0 / (1u64 << 30) as f64,
        args.nomt_page_cache_mib,
        args.nomt_leaf_cache_mib
    );
    Ok(match args.hash {
        AuthHashArg::Sha256 => Box::new(NomtAuth::<Sha2Hasher>::open(o, settings)?),
        AuthHashArg::Blake3 => Box::new(NomtAuth::<Blake3Hasher>::open(o, settings)?),
    })
}

fn failed(what: &str) -> impl FnOnce(anyhow::Error) -> Failure + '_ {
    move |e| Failure(format!("nomt: {what}: {e:#}"))
}

/// The engine: the database and the session the next commit finishes (begun by a warm-up).
struct NomtAuth<H: nomt::hasher::NodeHasher + ValueHasher + Send + Sync + 'static> {
    nomt: Nomt<H>,
    session: Option<Session<H>>,
    settings: String,
}

impl<H> NomtAuth<H>
where
    H: nomt::hasher::NodeHasher + ValueHasher + Send + Sync + 'static,
{
    fn open(o: Options, settings: String) -> Result<Self, Failure> {
        let nomt = Nomt::<H>::open(o).map_err(failed("opening"))?;
        Ok(NomtAuth {
            nomt,
            session: None,
            settings,
        })
    }

    /// Ends the open session, if any, without committing it: finished with no reads or writes,
    /// which also stops its warm-up worker (a session dropped unfinished makes that worker
    /// panic).
    fn end_session(&mut self) -> Result<(), Failure> {
        if let Some(session) = self.session.take() {
            session
                .finish(Vec::new())
                .map_err(failed("ending a session"))?;
        }
        Ok(())
    }

    fn session(&mut self) -> &Session<H> {
        self.session
            .get_or_insert_with(|| self.nomt.begin_session(SessionParams::default()))
    }
}

impl<H> AuthEngine for NomtAuth<H>
where
    H: nomt::hasher::NodeHasher + ValueHasher + Send + Sync + 'static,
{
    fn name(&self) -> &'static str {
        "nomt"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn warm_up(&mut self, keys: &[KeyPath]) -> Result<(), Failure> {
        let session = self.session();
        for key in keys {
            session.warm_up(*key);
        }
        Ok(())
    }

    fn warm_up_reads(&mut self, keys: &[KeyPath]) -> Result<(), Failure> {
        self.warm_up(keys)
    }

    fn commit(&mut self, changes: &[Change]) -> Result<[u8; 32], Failure> {
        if changes.is_empty() {
            self.end_session()?;
            return Ok(self.nomt.root().into_inner());
        }
        let session = match self.session.take() {
            Some(session) => session,
            None => self.nomt.begin_session(SessionParams::default()),
        };
        let actuals: Vec<(KeyPath, KeyReadWrite)> = changes
            .iter()
            .map(|(k, v)| (*k, KeyReadWrite::Write(v.map(|v| v.to_vec()))))
            .collect();
        let finished = session.finish(actuals).map_err(failed("finishing"))?;
        let root = finished.root().into_inner();
        finished.commit(&self.nomt).map_err(failed("committing"))?;
        Ok(root)
    }

    fn lookups(&mut self, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
        let session = self.session();
        keys.iter()
            .map(|key| session.read(*key).map_err(failed("reading")))
            .collect()
    }

    fn prove(&mut self, key: &KeyPath) -> Result<Box<dyn AuthProof>, Failure> {
        let proof = self.session().prove(*key).map_err(failed("proving"))?;
        Ok(Box::new(NomtPathProof::<H> {
            proof,
            hasher: std::marker::PhantomData,
        }))
    }

    fn prove_many(&mut self, keys: &[KeyPath]) -> Result<Box<dyn AuthProof>, Failure> {
        let session = self.session();
        let mut proofs = Vec::with_capacity(keys.len());
        for key in keys {
            proofs.push(session.prove(*key).map_err(failed("proving"))?);
        }
        Ok(Box::new(NomtMultiProof::<H> {
            proof: MultiProof::from_path_proofs(proofs),
            hasher: std::marker::PhantomData,
        }))
    }
}

fn leaf<H: ValueHasher>(key: &KeyPath, value: &Value) -> LeafData {
    LeafData {
        key_path: *key,
        value_hash: H::hash_value(value),
    }
}

impl<H> Drop for NomtAuth<H>
where
    H: nomt::hasher::NodeHasher + ValueHasher + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let Err(e) = self.end_session() {
            eprintln!("{}", e.0);
        }
    }
}

/// A claim's check by a verified proof: out of its scope, or showing another value, is a
/// rejection.
fn confirmed(check: Result<bool, nomt::proof::KeyOutOfScope>) -> Result<(), String> {
    match check {
        Ok(true) => Ok(()),
        Ok(false) => Err("the proof shows another value".to_string()),
        Err(e) => Err(format!("{e:?}")),
    }
}

struct NomtPathProof<H> {
    proof: PathProof,
    hasher: std::marker::PhantomData<H>,
}

impl<H: nomt::hasher::NodeHasher + ValueHasher> AuthProof for NomtPathProof<H> {
    fn encoded_len(&self) -> usize {
        borsh::to_vec(&self.proof).map_or(0, |b| b.len())
    }

    fn verify(&self, root: &[u8; 32], claims: &[(KeyPath, Option<Value>)]) -> Result<(), String> {
        for (key, value) in claims {
            let verified = self
                .proof
                .verify::<H>(key.view_bits::<Msb0>(), *root)
                .map_err(|e| format!("{e:?}"))?;
            confirmed(match value {
                Some(v) => verified.confirm_value(&leaf::<H>(key, v)),
                None => verified.confirm_nonexistence(key),
            })?;
        }
        Ok(())
    }
}

struct NomtMultiProof<H> {
    proof: MultiProof,
    hasher: std::marker::PhantomData<H>,
}

impl<H: nomt::hasher::NodeHasher + ValueHasher> AuthProof for NomtMultiProof<H> {
    fn encoded_len(&self) -> usize {
        borsh::to_vec(&self.proof).map_or(0, |b| b.len())
    }

    fn verify(&self, root: &[u8; 32], claims: &[(KeyPath, Option<Value>)]) -> Result<(), String> {
        let verified = nomt::proof::verify_multi_proof::<H>(&self.proof, *root)
            .map_err(|e| format!("{e:?}"))?;
        for (key, value) in claims {
            confirmed(match value {
                Some(v) => verified.confirm_value(&leaf::<H>(key, v)),
                None => verified.confirm_nonexistence(key),
            })?;
        }
        Ok(())
    }
}

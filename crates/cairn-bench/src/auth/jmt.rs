//! JMT 0.12 under `auth` (`--features jmt`): the Jellyfish Merkle tree (Diem's design, kept by
//! Penumbra), a sparse 16-ary Merkle tree whose proofs are binary. JMT is a library over a
//! store its user supplies: it reads nodes and values through `TreeReader` and hands back, from
//! each update, the nodes to write and the nodes made stale. Two stores, as its docs and the
//! research notes suggest:
//!
//! - `jmt-memory`: nodes and values in hash maps (what its own `MockTreeStore` does), so that
//!   the figures are JMT's own cost with no I/O; nothing is durable.
//! - `jmt-cairn`: nodes and values in a plain durable Cairn table (node key → node, key hash →
//!   latest value), each commit's batch written as one logged write with the log fsynced, like
//!   Cairn's own authenticated table. This is how sov-db runs JMT over RocksDB.
//!
//! Both keep the latest version only (a node that serves the latest state, pruning as it goes):
//! a commit is `put_value_set` at the next version, then its batch applied: the new nodes
//! written, the nodes it made stale (`stale_node_index_batch`) deleted, the values replaced.
//! Nodes are stored in JMT's own Borsh encoding.
//!
//! JMT has no warm-up: the rows "with a warm-up" repeat the commit without one. Lookups read
//! the store's latest value of the key directly (one point read), as a node serving reads does. Proofs are
//! `get_with_proof` (a `SparseMerkleProof`, inclusion or exclusion) measured in their Borsh
//! encoding and verified with `SparseMerkleProof::verify`; JMT has no multiproof, so a proof of
//! several keys is the list of their proofs.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::RwLock;

use cairn::{Session, Table, TableConfig, Update};
use jmt::proof::SparseMerkleProof;
use jmt::storage::{LeafNode, Node, NodeKey, TreeReader, TreeUpdateBatch};
use jmt::{JellyfishMerkleTree, KeyHash, OwnedValue, RootHash, SimpleHasher, Version};

use super::{AuthEngine, AuthProof, Change, KeyPath, Value};
use crate::cli::AuthHashArg;
use crate::failure::{Context, Failure};

/// Where JMT keeps its nodes and values.
pub trait Store: TreeReader {
    /// Applies one update's batch: new nodes written, stale nodes deleted, values replaced.
    fn apply(&self, batch: &TreeUpdateBatch) -> Result<(), Failure>;
    /// The store, in words.
    fn describe(&self) -> &'static str;
}

/// Opens JMT over a store in memory.
pub fn open_memory(hash: AuthHashArg) -> Result<Box<dyn AuthEngine>, Failure> {
    open_over(MemStore::default(), "jmt-memory", hash)
}

/// Opens JMT over a durable Cairn table in `dir`.
pub fn open_cairn(dir: &Path, hash: AuthHashArg) -> Result<Box<dyn AuthEngine>, Failure> {
    open_over(CairnStore::open(dir)?, "jmt-cairn", hash)
}

fn open_over<S: Store + 'static>(
    store: S,
    name: &'static str,
    hash: AuthHashArg,
) -> Result<Box<dyn AuthEngine>, Failure> {
    Ok(match hash {
        AuthHashArg::Sha256 => Box::new(JmtAuth::<S, sha2::Sha256>::new(store, name)),
        AuthHashArg::Blake3 => Box::new(JmtAuth::<S, Blake3>::new(store, name)),
    })
}

/// BLAKE3 as JMT's hasher (JMT implements its hasher trait for `Digest` types; BLAKE3's
/// `Digest` impl is behind a preview feature, so this wraps it).
#[derive(Clone)]
pub struct Blake3(blake3::Hasher);

impl SimpleHasher for Blake3 {
    fn new() -> Self {
        Blake3(blake3::Hasher::new())
    }

    fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    fn finalize(self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

fn failed(what: &str) -> impl FnOnce(anyhow::Error) -> Failure + '_ {
    move |e| Failure(format!("jmt: {what}: {e:#}"))
}

/// The engine: the store, the version of the last commit and its root.
struct JmtAuth<S, H> {
    store: S,
    name: &'static str,
    version: Option<Version>,
    root: [u8; 32],
    hasher: std::marker::PhantomData<H>,
}

impl<S: Store, H: SimpleHasher> JmtAuth<S, H> {
    fn new(store: S, name: &'static str) -> Self {
        JmtAuth {
            store,
            name,
            version: None,
            root: JellyfishMerkleTree::<S, H>::EMPTY_ROOT.0,
            hasher: std::marker::PhantomData,
        }
    }

    fn tree(&self) -> JellyfishMerkleTree<'_, S, H> {
        JellyfishMerkleTree::new(&self.store)
    }

    fn proofs(&self, keys: &[KeyPath]) -> Result<JmtProof<H>, Failure> {
        let mut proofs = Vec::with_capacity(keys.len());
        if let Some(version) = self.version {
            for key in keys {
                let (_, proof) = self
                    .tree()
                    .get_with_proof(KeyHash(*key), version)
                    .map_err(failed("proving"))?;
                proofs.push(proof);
            }
        }
        Ok(JmtProof { proofs })
    }
}

impl<S: Store, H: SimpleHasher + 'static> AuthEngine for JmtAuth<S, H> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn settings(&self) -> String {
        format!(
            "{}; latest version only (stale nodes deleted at each commit); no warm-up (JMT has \
             none); proofs one per key (JMT has no multiproof)",
            self.store.describe()
        )
    }

    fn warm_up(&mut self, _keys: &[KeyPath]) -> Result<(), Failure> {
        Ok(())
    }

    fn commit(&mut self, changes: &[Change]) -> Result<[u8; 32], Failure> {
        if changes.is_empty() {
            return Ok(self.root);
        }
        let version = self.version.map_or(0, |v| v + 1);
        let set = changes
            .iter()
            .map(|(k, v)| (KeyHash(*k), v.map(|v| v.to_vec())));
        let (root, batch) = self
            .tree()
            .put_value_set(set, version)
            .map_err(failed("updating"))?;
        self.store.apply(&batch)?;
        self.version = Some(version);
        self.root = root.0;
        Ok(root.0)
    }

    fn lookups(&mut self, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
        let Some(version) = self.version else {
            return Ok(vec![None; keys.len()]);
        };
        keys.iter()
            .map(|key| {
                self.store
                    .get_value_option(version, KeyHash(*key))
                    .map_err(failed("reading"))
            })
            .collect()
    }

    fn prove(&mut self, key: &KeyPath) -> Result<Box<dyn AuthProof>, Failure> {
        Ok(Box::new(self.proofs(std::slice::from_ref(key))?))
    }

    fn prove_many(&mut self, keys: &[KeyPath]) -> Result<Box<dyn AuthProof>, Failure> {
        Ok(Box::new(self.proofs(keys)?))
    }
}

/// One `SparseMerkleProof` per key.
struct JmtProof<H: SimpleHasher> {
    proofs: Vec<SparseMerkleProof<H>>,
}

impl<H: SimpleHasher> AuthProof for JmtProof<H> {
    fn encoded_len(&self) -> usize {
        self.proofs
            .iter()
            .map(|p| borsh::to_vec(p).map_or(0, |b| b.len()))
            .sum()
    }

    fn verify(&self, root: &[u8; 32], claims: &[(KeyPath, Option<Value>)]) -> Result<(), String> {
        if claims.len() != self.proofs.len() {
            return Err(format!(
                "{} claims for {} proofs",
                claims.len(),
                self.proofs.len()
            ));
        }
        for (proof, (key, value)) in self.proofs.iter().zip(claims) {
            proof
                .verify(RootHash(*root), KeyHash(*key), value.as_ref())
                .map_err(|e| format!("{e:#}"))?;
        }
        Ok(())
    }
}

/// A value as the stores keep it: the version that wrote it and its bytes (latest only).
type Versioned = (Version, OwnedValue);

/// The value of `key_hash` as of `max_version`, from the latest one: an older version was
/// pruned, which is an error.
fn as_of(
    latest: Option<Versioned>,
    max_version: Version,
    key_hash: KeyHash,
) -> anyhow::Result<Option<OwnedValue>> {
    match latest {
        Some((version, value)) if version <= max_version => Ok(Some(value)),
        Some((version, _)) => Err(anyhow::anyhow!(
            "the value of {key_hash:?} as of version {max_version} was pruned (latest {version})"
        )),
        None => Ok(None),
    }
}

/// Nodes and latest values in hash maps.
#[derive(Default)]
struct MemStore {
    nodes: RwLock<HashMap<NodeKey, Node>>,
    values: RwLock<HashMap<KeyHash, Versioned>>,
}

impl TreeReader for MemStore {
    fn get_node_option(&self, node_key: &NodeKey) -> anyhow::Result<Option<Node>> {
        Ok(self
            .nodes
            .read()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .get(node_key)
            .cloned())
    }

    fn get_value_option(
        &self,
        max_version: Version,
        key_hash: KeyHash,
    ) -> anyhow::Result<Option<OwnedValue>> {
        let latest = self
            .values
            .read()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .get(&key_hash)
            .cloned();
        as_of(latest, max_version, key_hash)
    }

    fn get_rightmost_leaf(&self) -> anyhow::Result<Option<(NodeKey, LeafNode)>> {
        Err(anyhow::anyhow!("restore is not supported by this store"))
    }
}

impl Store for MemStore {
    fn apply(&self, batch: &TreeUpdateBatch) -> Result<(), Failure> {
        let poisoned = || Failure("jmt-memory: a lock was poisoned".to_string());
        let mut nodes = self.nodes.write().map_err(|_| poisoned())?;
        for stale in &batch.stale_node_index_batch {
            nodes.remove(&stale.node_key);
        }
        for (key, node) in batch.node_batch.nodes() {
            nodes.insert(key.clone(), node.clone());
        }
        let mut values = self.values.write().map_err(|_| poisoned())?;
        for ((version, key_hash), value) in batch.node_batch.values() {
            match value {
                Some(v) => values.insert(*key_hash, (*version, v.clone())),
                None => values.remove(key_hash),
            };
        }
        Ok(())
    }

    fn describe(&self) -> &'static str {
        "nodes and values in hash maps in memory (not durable)"
    }
}

/// Nodes and latest values in a plain durable Cairn table: key `n` ‖ Borsh(node key) → Borsh
/// (node), key `v` ‖ key hash → version (8 bytes, big-endian) ‖ value.
struct CairnStore {
    session: Session,
    table: Table,
}

impl CairnStore {
    fn open(dir: &Path) -> Result<CairnStore, Failure> {
        let session = super::cairn::logged_session(dir)?;
        let table = session
            .create_durable_table("jmt", TableConfig::default())
            .context(|| "creating JMT's table".to_string())?;
        Ok(CairnStore { session, table })
    }

    fn get(&self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        let found = self
            .table
            .lookup(key)
            .map_err(|e| anyhow::anyhow!("looking up: {e}"))?;
        Ok(found.value().map(<[u8]>::to_vec))
    }
}

fn node_key_bytes(key: &NodeKey) -> Vec<u8> {
    let mut bytes = vec![b'n'];
    borsh::to_writer(&mut bytes, key).expect("writing to a Vec does not fail");
    bytes
}

fn value_key_bytes(key_hash: &KeyHash) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(33);
    bytes.push(b'v');
    bytes.extend_from_slice(&key_hash.0);
    bytes
}

impl TreeReader for CairnStore {
    fn get_node_option(&self, node_key: &NodeKey) -> anyhow::Result<Option<Node>> {
        match self.get(&node_key_bytes(node_key))? {
            Some(bytes) => Ok(Some(borsh::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    fn get_value_option(
        &self,
        max_version: Version,
        key_hash: KeyHash,
    ) -> anyhow::Result<Option<OwnedValue>> {
        let latest = match self.get(&value_key_bytes(&key_hash))? {
            Some(bytes) if bytes.len() >= 8 => {
                let version = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
                Some((version, bytes[8..].to_vec()))
            }
            Some(_) => return Err(anyhow::anyhow!("a stored value is shorter than 8 bytes")),
            None => None,
        };
        as_of(latest, max_version, key_hash)
    }

    fn get_rightmost_leaf(&self) -> anyhow::Result<Option<(NodeKey, LeafNode)>> {
        Err(anyhow::anyhow!("restore is not supported by this store"))
    }
}

impl Store for CairnStore {
    fn apply(&self, batch: &TreeUpdateBatch) -> Result<(), Failure> {
        // One write per key: a node made stale and written again in the same batch stays.
        let mut writes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for stale in &batch.stale_node_index_batch {
            writes.insert(node_key_bytes(&stale.node_key), None);
        }
        for (key, node) in batch.node_batch.nodes() {
            let node = borsh::to_vec(node).map_err(|e| Failure(format!("encoding a node: {e}")))?;
            writes.insert(node_key_bytes(key), Some(node));
        }
        for ((version, key_hash), value) in batch.node_batch.values() {
            let stored = value.as_ref().map(|v| {
                let mut bytes = version.to_be_bytes().to_vec();
                bytes.extend_from_slice(v);
                bytes
            });
            writes.insert(value_key_bytes(key_hash), stored);
        }
        let updates: Vec<(&[u8], Update<'_>)> = writes
            .iter()
            .map(|(k, v)| match v {
                Some(v) => (&k[..], Update::Insert(v)),
                None => (&k[..], Update::Delete),
            })
            .collect();
        self.session
            .write(&[(&self.table, &updates[..])])
            .context(|| "writing JMT's batch".to_string())?;
        self.session
            .sync_log()
            .context(|| "syncing the log".to_string())
    }

    fn describe(&self) -> &'static str {
        "nodes and values in a plain durable Cairn table (each commit's batch one logged write, \
         log fsynced; default table settings)"
    }
}

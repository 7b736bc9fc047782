//! The Ethereum Merkle Patricia trie under `auth` (`--features alloy-trie`), rebuilt from sorted
//! leaves: the baseline for computing a root from a dump of the state (what an audit rebuild
//! does), not an incremental engine. The leaves (key path → value) live in a plain durable
//! Cairn table; a commit writes its updates as one logged write with the log fsynced, then
//! streams every leaf through a cursor, in key order, into alloy-trie's `HashBuilder` (Keccak-256,
//! as Ethereum; `--hash` does not apply), whose root it returns. A commit therefore costs O(N)
//! whatever its size; the load only writes (one rebuild would end it).
//!
//! Not built: an incremental MPT (reth's walker over stored branch nodes is in `reth-trie`, whose
//! registry crate is a placeholder; writing that walker is a project of its own).
//!
//! Proofs: a rebuild with a `ProofRetainer` for the keys asked, the nodes on each key's path
//! (RLP-encoded, their bytes summed as the proof's size), verified with alloy-trie's
//! `verify_proof`. The single-key proofs of one sampling are made by one rebuild (see
//! [`AuthEngine::prove_each`]); a multiproof is the union of its keys' path nodes.

use std::path::Path;

use alloy_trie::proof::{ProofNodes, ProofRetainer};
use alloy_trie::{HashBuilder, Nibbles};
use cairn::{Session, Table, TableConfig};

use super::{AuthEngine, AuthProof, Change, KeyPath, Value};
use crate::failure::{Context, Failure};

/// The engine: the leaves' table and the root as of the last rebuild (`None`: stale).
pub struct AlloyRebuild {
    session: Session,
    table: Table,
    root: Option<[u8; 32]>,
}

impl AlloyRebuild {
    /// A new session in `dir` with one plain durable table for the leaves.
    pub fn open(dir: &Path) -> Result<AlloyRebuild, Failure> {
        let session = super::cairn::logged_session(dir)?;
        let table = session
            .create_durable_table("leaves", TableConfig::default())
            .context(|| "creating the leaves' table".to_string())?;
        Ok(AlloyRebuild {
            session,
            table,
            root: None,
        })
    }

    fn write(&mut self, changes: &[Change]) -> Result<(), Failure> {
        if changes.is_empty() {
            return Ok(());
        }
        super::cairn::write_durably(&self.session, &self.table, changes)?;
        self.root = None;
        Ok(())
    }

    /// Streams every leaf into a hash builder retaining the proofs of `targets` (sorted):
    /// the root, and the retained nodes.
    fn rebuild(&mut self, targets: &[KeyPath]) -> Result<([u8; 32], ProofNodes), Failure> {
        let targets: Vec<Nibbles> = targets.iter().map(Nibbles::unpack).collect();
        let mut builder = HashBuilder::default().with_proof_retainer(ProofRetainer::new(targets));
        let cursor = self
            .table
            .cursor()
            .context(|| "opening a cursor".to_string())?;
        for entry in cursor {
            let entry = entry.context(|| "reading the leaves".to_string())?;
            builder.add_leaf(Nibbles::unpack(&entry.key), &entry.value);
        }
        let root = builder.root().0;
        self.root = Some(root);
        Ok((root, builder.take_proof_nodes()))
    }
}

impl AuthEngine for AlloyRebuild {
    fn name(&self) -> &'static str {
        "alloy-trie"
    }

    fn settings(&self) -> String {
        "Merkle Patricia trie (Keccak-256) rebuilt from every leaf at each commit by alloy-trie's \
         HashBuilder; leaves in a plain durable Cairn table (each commit's updates one logged \
         write, log fsynced), streamed by a cursor; no warm-up; proofs from a rebuild retaining \
         the asked keys' paths"
            .to_string()
    }

    fn load(&mut self, changes: &[Change]) -> Result<(), Failure> {
        self.write(changes)
    }

    fn warm_up(&mut self, _keys: &[KeyPath]) -> Result<(), Failure> {
        Ok(())
    }

    fn commit(&mut self, changes: &[Change]) -> Result<[u8; 32], Failure> {
        self.write(changes)?;
        match self.root {
            Some(root) => Ok(root),
            None => Ok(self.rebuild(&[])?.0),
        }
    }

    fn lookups(&mut self, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
        super::cairn::lookup_values(&self.table, keys)
    }

    fn runs_utxo(&self) -> bool {
        false
    }

    fn prove(&mut self, key: &KeyPath) -> Result<Box<dyn AuthProof>, Failure> {
        self.prove_many(std::slice::from_ref(key))
    }

    fn prove_many(&mut self, keys: &[KeyPath]) -> Result<Box<dyn AuthProof>, Failure> {
        let (_, nodes) = self.rebuild(keys)?;
        Ok(Box::new(MptProof { nodes }))
    }

    fn prove_each(&mut self, keys: &[KeyPath]) -> Result<Vec<Box<dyn AuthProof>>, Failure> {
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        let (_, nodes) = self.rebuild(&sorted)?;
        Ok(keys
            .iter()
            .map(|key| {
                let mut own = ProofNodes::default();
                own.extend(nodes.matching_nodes(&Nibbles::unpack(key)));
                Box::new(MptProof { nodes: own }) as Box<dyn AuthProof>
            })
            .collect())
    }
}

/// The RLP-encoded nodes on the paths of the proven keys.
struct MptProof {
    nodes: ProofNodes,
}

impl AuthProof for MptProof {
    fn encoded_len(&self) -> usize {
        self.nodes.values().map(|node| node.len()).sum()
    }

    fn verify(&self, root: &[u8; 32], claims: &[(KeyPath, Option<Value>)]) -> Result<(), String> {
        for (key, value) in claims {
            let path = Nibbles::unpack(key);
            let nodes = self.nodes.matching_nodes_sorted(&path);
            alloy_trie::proof::verify_proof(
                (*root).into(),
                path,
                value.map(|v| v.to_vec()),
                nodes.iter().map(|(_, node)| node),
            )
            .map_err(|e| format!("{e}"))?;
        }
        Ok(())
    }
}

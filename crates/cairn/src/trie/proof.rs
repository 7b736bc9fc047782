//! Proofs from a version's pages: a multiproof for key paths and a witness of the top levels,
//! from pages already loaded.

use cairn_proof::hash::bit;
use cairn_proof::{Hash, ProofNode, ProofWriter, ZERO};

use crate::error::{Error, Result};

use super::load::Loaded;
use super::page::{slot, with_bit, Node, PageId};
use super::TrieState;

/// A multiproof for sorted, distinct key paths, from pages loaded with [`load_paths`].
///
/// [`load_paths`]: super::load_paths
pub(crate) fn prove(
    state: &TrieState,
    loaded: &Loaded,
    paths: &[Hash],
) -> Result<cairn_proof::Proof> {
    let mut w = ProofWriter::new(state.kind);
    let read = Reader { state, loaded };
    read.prove(0, &ZERO, state.root, paths, &mut w)?;
    w.finish()
        .map_err(|e| Error::corrupt("trie", format!("proof is not one tree: {e}")))
}

/// A proof opening every node above depth `levels` (for a verifier's `TopWitness`), from
/// pages loaded down to that depth (the retained levels, or [`load_paths`] over them).
///
/// [`load_paths`]: super::load_paths
pub(crate) fn top_witness(
    state: &TrieState,
    loaded: &Loaded,
    levels: usize,
) -> Result<cairn_proof::Proof> {
    let mut w = ProofWriter::new(state.kind);
    let read = Reader { state, loaded };
    read.top(0, &ZERO, state.root, levels, &mut w)?;
    w.finish()
        .map_err(|e| Error::corrupt("trie", format!("witness is not one tree: {e}")))
}

pub(super) struct Reader<'a> {
    pub(super) state: &'a TrieState,
    pub(super) loaded: &'a Loaded,
}

impl Reader<'_> {
    pub(super) fn node(&self, depth: usize, path: &Hash) -> Result<Node> {
        let geometry = self.state.geometry;
        let id = PageId::on_path(geometry, path, geometry.level_of(depth));
        let page = match self.loaded.pages.get(&id) {
            Some(p) => p,
            None => match self.state.retained.get(&id) {
                Some(p) => &**p,
                None => {
                    return Err(Error::corrupt(
                        "trie",
                        format!("page {:?} was not loaded", id.key()),
                    ))
                }
            },
        };
        Ok(page.node(slot(geometry, depth, path)))
    }

    fn prove(
        &self,
        depth: usize,
        path: &Hash,
        here: Node,
        paths: &[Hash],
        w: &mut ProofWriter,
    ) -> Result<()> {
        match here {
            Node::Empty => w.push(ProofNode::Empty),
            _ if paths.is_empty() => w.push(ProofNode::Hash(here.hash())),
            Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(leaf)),
            Node::Internal(_) => {
                w.push(ProofNode::Internal);
                let split = paths.partition_point(|p| !bit(p, depth));
                for (side, part) in [(false, &paths[..split]), (true, &paths[split..])] {
                    let child_path = with_bit(path, depth, side);
                    let child = self.node(depth + 1, &child_path)?;
                    self.prove(depth + 1, &child_path, child, part, w)?;
                }
            }
        }
        Ok(())
    }

    fn top(
        &self,
        depth: usize,
        path: &Hash,
        here: Node,
        levels: usize,
        w: &mut ProofWriter,
    ) -> Result<()> {
        match here {
            Node::Empty => w.push(ProofNode::Empty),
            Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(leaf)),
            Node::Internal(h) if depth == levels => w.push(ProofNode::Hash(h)),
            Node::Internal(_) => {
                w.push(ProofNode::Internal);
                for side in [false, true] {
                    let child_path = with_bit(path, depth, side);
                    let child = self.node(depth + 1, &child_path)?;
                    self.top(depth + 1, &child_path, child, levels, w)?;
                }
            }
        }
        Ok(())
    }
}

//! An authenticated table's commits (its dirty keys looked up, hashed into leaves and
//! committed to the trie), proofs, warm-ups and the trie of a new union.

use std::sync::MutexGuard;

use cairn_proof::{Hash, Leaf, Proof};

use super::{check_key, LookupPlan, Lsm, TableState};
use crate::auth::{Auth, AuthStats, Commit};
use crate::config::Resolve;
use crate::error::Result;
use crate::lookup::LookupResult;
use crate::trie::Change;

/// Keys per commit when a union's trie is built by re-insertion.
const TRIE_BUILD_CHUNK: usize = 1 << 16;

impl Lsm {
    /// The work of [`crate::Table::commit`] (its doc gives the costs and errors).
    pub(crate) fn commit(&self) -> Result<Commit> {
        let mut auth = self.auth()?;
        let pending = {
            let mut state = self.lock_write()?;
            Self::take_dirty(&mut state, &self.inner.config.resolve)
        };
        self.commit_pending(&mut auth, pending)
    }

    /// The keys updated since the last commit and the lookup of their values, taken at one
    /// instant (under the write lock).
    pub(super) fn take_dirty(
        state: &mut TableState,
        resolve: &Resolve,
    ) -> Option<(Vec<Vec<u8>>, LookupPlan)> {
        if state.dirty.is_empty() {
            return None;
        }
        let keys: Vec<Vec<u8>> = std::mem::take(&mut state.dirty).into_iter().collect();
        let plan = Self::plan_lookups(state, &keys, resolve);
        Some((keys, plan))
    }

    /// Commits what [`Lsm::take_dirty`] took; an error breaks the table (the keys' changes
    /// never reached the trie, so a later root would be wrong).
    pub(super) fn commit_pending(
        &self,
        auth: &mut Auth,
        pending: Option<(Vec<Vec<u8>>, LookupPlan)>,
    ) -> Result<Commit> {
        let Some((keys, plan)) = pending else {
            return Ok(auth.current());
        };
        let result = self.commit_keys(auth, &keys, plan);
        if let Err(e) = &result {
            let mut state = self.inner.state.write().unwrap_or_else(|p| p.into_inner());
            state.broken.get_or_insert_with(|| e.with_causes());
        }
        result
    }

    fn commit_keys(&self, auth: &mut Auth, keys: &[Vec<u8>], plan: LookupPlan) -> Result<Commit> {
        let span = crate::observe::auth_commit(self.inner.id, keys.len());
        let timer = crate::observe::Timer::start();
        let commit = self.commit_changes(auth, keys, plan)?;
        span.record("version", commit.version);
        crate::observe::auth_commit_done(timer);
        Ok(commit)
    }

    /// The leaves of `keys` from their lookups (`plan`), committed to the trie.
    fn commit_changes(
        &self,
        auth: &mut Auth,
        keys: &[Vec<u8>],
        plan: LookupPlan,
    ) -> Result<Commit> {
        let kind = auth.trie.kind;
        let started = std::time::Instant::now();
        let found = self.finish_lookups(keys, plan)?;
        let mut changes = Vec::with_capacity(keys.len());
        let mut hashes = 0u64;
        for (key, result) in keys.iter().zip(found) {
            // Key path, value hash, and the blob's hash if any (the leaf hash is the trie's).
            hashes += match &result {
                LookupResult::NotFound => 1,
                LookupResult::Found(_) => 2,
                LookupResult::FoundWithBlob(..) => 3,
            };
            let leaf = match &result {
                LookupResult::NotFound => None,
                LookupResult::Found(v) => Some(Leaf::new(kind, key, v, None)),
                LookupResult::FoundWithBlob(v, blob) => {
                    Some(Leaf::new(kind, key, v, Some(&blob.read()?)))
                }
            };
            let key_path = match &leaf {
                Some(l) => l.key_path,
                None => kind.key_path(key),
            };
            changes.push(Change { key_path, leaf });
        }
        changes.sort_unstable_by_key(|a| a.key_path);
        auth.count_hashes(hashes);
        auth.count_values_time(started.elapsed());
        auth.commit(&changes)
    }

    /// The work of [`crate::Table::prove`] (its doc gives the costs and errors).
    pub(crate) fn prove<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<crate::VersionedProof> {
        let (mut auth, paths) = self.key_paths(keys)?;
        let Commit { version, root } = auth.current();
        let proof = auth.prove(&paths)?;
        Ok(crate::VersionedProof {
            version,
            root,
            proof,
        })
    }

    /// The work of [`crate::Table::last_commit`].
    pub(crate) fn last_commit(&self) -> Result<Commit> {
        let auth = self.auth()?;
        drop(self.read()?); // a closed or broken table answers nothing
        Ok(auth.current())
    }

    /// The work of [`crate::Table::prefetch`] (its doc gives the costs and errors).
    pub(crate) fn prefetch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<()> {
        let (mut auth, paths) = self.key_paths(keys)?;
        auth.prefetch(&paths)
    }

    /// The work of [`crate::Table::warm_up`] (its doc gives the costs and errors).
    pub(crate) fn warm_up<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<()> {
        let (mut auth, paths) = self.key_paths(keys)?;
        auth.warm_up(paths);
        Ok(())
    }

    /// The work of [`crate::Table::top_witness`] (its doc gives the costs and errors).
    pub(crate) fn top_witness(&self, levels: u8) -> Result<Proof> {
        let mut auth = self.auth()?;
        drop(self.read()?);
        auth.top_witness(levels as usize)
    }

    /// The work of [`crate::Table::auth_stats`] (its doc gives the costs and errors).
    pub(crate) fn trie_files(&self) -> Result<Vec<std::path::PathBuf>> {
        let auth = self.auth()?;
        drop(self.read()?);
        Ok(auth.segment_files())
    }

    pub(crate) fn auth_stats(&self) -> Result<AuthStats> {
        let auth = self.auth()?;
        drop(self.read()?);
        Ok(auth.stats())
    }

    /// Builds the trie of a new table (a union) by re-inserting its whole contents: one pass of
    /// a cursor over it, every key hashed into its leaf, committed in chunks of
    /// [`TRIE_BUILD_CHUNK`] keys (each sorted by key path, so memory stays at one chunk).
    ///
    /// Cost: O(n) entry reads (the union's inputs streamed once, the union's debt untouched),
    /// 3 hashes per key plus the node hashes of `⌈n / chunk⌉` commits, and the page writes of
    /// those commits. The cheaper merge of input tries that reuses disjoint subtrees is not
    /// built yet.
    pub(super) fn build_trie(&self) -> Result<()> {
        let mut auth = self.auth()?;
        let kind = auth.trie.kind;
        let mut chunk: Vec<Change> = Vec::with_capacity(TRIE_BUILD_CHUNK);
        let flush = |auth: &mut Auth, chunk: &mut Vec<Change>| -> Result<()> {
            chunk.sort_unstable_by_key(|c| c.key_path);
            auth.commit(chunk)?;
            chunk.clear();
            Ok(())
        };
        for entry in self.cursor()? {
            let entry = entry?;
            let blob = match &entry.blob {
                Some(b) => Some(b.read()?),
                None => None,
            };
            let leaf = Leaf::new(kind, &entry.key, &entry.value, blob.as_deref());
            chunk.push(Change {
                key_path: leaf.key_path,
                leaf: Some(leaf),
            });
            if chunk.len() == TRIE_BUILD_CHUNK {
                flush(&mut auth, &mut chunk)?;
            }
        }
        flush(&mut auth, &mut chunk)
    }

    /// The locked trie and the sorted, distinct key paths of `keys`.
    fn key_paths<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<(MutexGuard<'_, Auth>, Vec<Hash>)> {
        for key in keys {
            check_key(key.as_ref())?;
        }
        let auth = self.auth()?;
        drop(self.read()?); // a closed or broken table answers nothing
        let kind = auth.trie.kind;
        let mut paths: Vec<Hash> = keys.iter().map(|k| kind.key_path(k.as_ref())).collect();
        paths.sort_unstable();
        paths.dedup();
        Ok((auth, paths))
    }
}

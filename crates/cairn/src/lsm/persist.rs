//! Saving a table as a snapshot (an authenticated one with its trie) and opening a snapshot as
//! a new table.

use std::sync::Arc;

use super::{Lsm, TableState};
use crate::auth::Auth;
use crate::error::Result;
use crate::session_core::SessionCore;
use crate::snapshot::{self, SnapshotOverrides};

impl Lsm {
    /// Saves the table as snapshot `name`, which is not checked (a checkpoint's internal name).
    pub(crate) fn save_snapshot_as(&self, name: &str, label: &str) -> Result<()> {
        let _span = crate::observe::snapshot_save(name, label, self.inner.auth.is_some());
        self.inner.session.check_writable("saving a snapshot")?;
        if let Some(mut auth) = self.lock_auth()? {
            return self.save_authenticated(&mut auth, name, label);
        }
        // What is saved is planned first, without I/O: a closed or broken table writes nothing.
        let contents = self.snapshot_contents()?;
        snapshot::save_table(
            &self.inner.session,
            &self.inner.params,
            name,
            label,
            contents,
            None,
        )
    }

    /// Saves the table as checkpoint `name` *without* committing: an authenticated table's
    /// trie is saved at its last commit beside contents that may be newer, and the keys updated
    /// since (its dirty keys, taken at the same instant) are returned, for the caller to log
    /// after the checkpoint (the `durable` module's dirty-keys record), so that a table
    /// recovered from it commits them as the table would have. A checkpoint thus never makes a
    /// version of its own. Plain tables save as [`Lsm::save_snapshot_as`] and return none.
    pub(crate) fn save_checkpoint_as(&self, name: &str, label: &str) -> Result<Vec<Vec<u8>>> {
        self.inner.session.check_writable("saving a checkpoint")?;
        let Some(mut auth) = self.lock_auth()? else {
            self.save_snapshot_as(name, label)?;
            return Ok(Vec::new());
        };
        let _span = crate::observe::snapshot_save(name, label, true);
        let (dirty, contents) = {
            let mut state = self.lock_write()?;
            self.settle_flush(&mut state)?;
            let dirty: Vec<Vec<u8>> = state.dirty.iter().cloned().collect();
            (dirty, self.plan_snapshot(&state)?)
        };
        self.save_with_trie(&mut auth, name, label, contents)?;
        Ok(dirty)
    }

    /// Saves `contents` as snapshot `name` with the trie as it stands: its retained pages
    /// changed since the last snapshot written to the page log, its segments linked.
    fn save_with_trie(
        &self,
        auth: &mut Auth,
        name: &str,
        label: &str,
        mut contents: snapshot::SnapshotContents,
    ) -> Result<()> {
        let (meta, files) = auth.snapshot_meta()?;
        contents.auth = Some(meta);
        snapshot::save_table(
            &self.inner.session,
            &self.inner.params,
            name,
            label,
            contents,
            Some(files),
        )
    }

    /// Marks `keys` as updated since the last commit (a recovered checkpoint's dirty keys):
    /// the next commit rehashes them. Errors: [`crate::Error::TableClosed`],
    /// [`crate::Error::TableBroken`].
    pub(crate) fn mark_dirty(&self, keys: Vec<Vec<u8>>) -> Result<()> {
        if self.inner.auth.is_none() {
            return Ok(());
        }
        let mut state = self.lock_write()?;
        state.dirty.extend(keys);
        Ok(())
    }

    /// Saves an authenticated table: commits what changed (so the snapshot records the root of
    /// exactly the contents it saves), writes the retained trie pages changed since the last
    /// snapshot to the page log, and saves the table with the trie's segments in one snapshot.
    fn save_authenticated(&self, auth: &mut Auth, name: &str, label: &str) -> Result<()> {
        let (pending, contents) = {
            let mut state = self.lock_write()?;
            self.settle_flush(&mut state)?;
            let pending = Self::take_dirty(&mut state, &self.inner.config.resolve);
            (pending, self.plan_snapshot(&state)?)
        };
        self.commit_pending(auth, pending)?;
        self.save_with_trie(auth, name, label, contents)
    }

    /// The table's contents planned for a snapshot, at one instant.
    fn snapshot_contents(&self) -> Result<snapshot::SnapshotContents> {
        self.with_settled(|state| self.plan_snapshot(state))?
    }

    /// The contents of `state` planned for a snapshot: O(runs) reference counts, and the cut of
    /// a merge in progress whose progress is worth recording ([`snapshot::plan`]).
    fn plan_snapshot(&self, state: &TableState) -> Result<snapshot::SnapshotContents> {
        snapshot::plan(
            &self.inner.config,
            &state.levels,
            &state.write_buffer,
            state.union.as_ref(),
        )
    }

    /// Opens snapshot `name` as a new table of `session` (see [`crate::Session::open_snapshot`]).
    pub(crate) fn open_snapshot(
        session: Arc<SessionCore>,
        name: &str,
        label: &str,
        overrides: SnapshotOverrides,
    ) -> Result<Lsm> {
        let _span = crate::observe::snapshot_open(name, label);
        let restored = snapshot::restore(&session, name, label, overrides)?;
        let auth = match (&restored.auth, &restored.config.auth) {
            (Some(meta), Some(config)) => match Lsm::restore_auth(&session, name, meta, config) {
                Ok(auth) => Some(auth),
                Err(e) => {
                    // Release the table's runs opened so far, and remove their links now.
                    drop(restored);
                    session.try_remove_released();
                    return Err(e);
                }
            },
            _ => None,
        };
        Lsm::with_contents(
            session,
            restored.config,
            restored.params,
            (restored.write_buffer, imbl::OrdSet::new()),
            restored.levels,
            restored.union,
            auth,
        )
    }

    /// The trie of authenticated snapshot `name`: its segments (from `trie/`) and its retained
    /// pages, checked; corruption is reported as the snapshot's, naming `trie/`.
    fn restore_auth(
        session: &Arc<SessionCore>,
        name: &str,
        meta: &snapshot::AuthMeta,
        config: &crate::config::AuthConfig,
    ) -> Result<Auth> {
        let (manifest, segments) = snapshot::restore_trie(session, name)?;
        // The retained pages are all in the snapshot's own segment, the one of the top page.
        let trie_dir = session.snapshots_dir().join(name).join(snapshot::TRIE_DIR);
        let blame = manifest
            .top
            .and_then(|top| manifest.segments.iter().find(|s| s.id == top.segment))
            .map_or(trie_dir.clone(), |s| {
                trie_dir.join(crate::pagelog::segment_file_name(s.file_id))
            });
        Auth::restore(session.clone(), config, meta, &manifest, segments)
            .map_err(snapshot::blame_in(name, &blame))
    }
}

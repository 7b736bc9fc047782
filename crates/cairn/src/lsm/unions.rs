//! Starting a union of tables (a new table over frozen views of its inputs) and paying for its
//! work with union credits.

use std::sync::Arc;

use super::update::migrate_finished_union;
use super::Lsm;
use crate::auth::Auth;
use crate::error::{Error, Result};
use crate::schedule::Levels;
use crate::union::UnionLevel;
use crate::write_buffer::WriteBuffer;

impl Lsm {
    /// The work of [`crate::Table::incremental_unions`] (its doc gives the costs and errors).
    pub(crate) fn incremental_unions(tables: &[&Lsm]) -> Result<Lsm> {
        let Some(first) = tables.first() else {
            return Err(Error::InvalidConfig(
                "a union needs at least one table".into(),
            ));
        };
        let session = first.inner.session.clone();
        session.check_writable("a union")?;
        if tables
            .iter()
            .any(|t| !Arc::ptr_eq(&t.inner.session, &session))
        {
            return Err(Error::InvalidConfig(
                "every table of a union must belong to the same session".into(),
            ));
        }
        if !tables
            .iter()
            .all(|t| t.inner.config.auth.map(|a| a.hash) == first.inner.config.auth.map(|a| a.hash))
        {
            return Err(Error::InvalidConfig(
                "every table of a union must be authenticated alike (with the same hash) or \
                 not at all"
                    .into(),
            ));
        }
        if !tables
            .iter()
            .all(|t| t.inner.config.resolve == first.inner.config.resolve)
        {
            return Err(Error::InvalidConfig(
                "every table of a union must use the same resolve function".into(),
            ));
        }
        let views = tables
            .iter()
            .map(|t| t.view().map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let config = first.inner.config.clone();
        let params = first.inner.params.clone();
        let union = UnionLevel::for_table(session.fs().clone(), &config, &params, views);
        let auth = config
            .auth
            .as_ref()
            .map(|auth| Auth::new(session.clone(), auth));
        let table = Lsm::with_contents(
            session,
            config,
            params,
            (WriteBuffer::default(), imbl::OrdSet::new()),
            Levels::default(),
            Some(Arc::new(union)),
            auth,
        )?;
        if table.inner.auth.is_some() {
            table.build_trie()?;
        }
        Ok(table)
    }

    /// The work of [`crate::Table::remaining_union_debt`] (its doc gives the costs and errors).
    pub(crate) fn remaining_union_debt(&self) -> Result<u64> {
        let state = self.read()?;
        Ok(state.union.as_ref().map_or(0, |u| u.remaining_debt()))
    }

    /// The work of [`crate::Table::supply_union_credits`] (its doc gives the costs and errors).
    pub(crate) fn supply_union_credits(&self, credits: u64) -> Result<u64> {
        self.inner.session.check_writable("union work")?;
        let mut state = self.lock_write()?;
        let Some(union) = state.union.clone() else {
            return Ok(credits);
        };
        let session = &self.inner.session;
        let result = union.supply_credits(credits, || session.next_run_number());
        match result {
            Ok(leftover) => {
                migrate_finished_union(&mut state, self.inner.config.write_buffer_entries);
                Ok(leftover)
            }
            Err(e) => {
                state.broken = Some(e.with_causes());
                Err(e)
            }
        }
    }
}

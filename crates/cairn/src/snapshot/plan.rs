//! A snapshot's plan: a table's contents at one instant (runs, write buffer, a pending union),
//! taken under the table's read lock with O(runs) reference counts and no I/O.

use std::sync::Arc;

use super::format::{
    AuthMeta, UnionShape, ViewShape, LEVELS_MAX, RUNS_MAX, SNAPSHOT_LABEL_BYTES_MAX,
    UNION_DEPTH_MAX,
};
use crate::config::TableConfig;
use crate::error::{Error, Result};
use crate::run::Run;
use crate::schedule::{IncomingShape, LevelShape, Levels};
use crate::sorted::SortedRun;
use crate::union::{TableView, UnionContents, UnionLevel};
use crate::write_buffer::WriteBuffer;

/// The files of a snapshot being saved, in index order: runs to hard-link, or buffers to write
/// as runs. Runs shared between several places get one index.
#[derive(Default)]
pub(crate) struct SnapshotPlan {
    pub(super) items: Vec<PlanItem>,
    linked: std::collections::HashMap<*const Run, usize>,
    /// The sorted runs named so far: their parts' indices, in key order.
    pub(super) sorted: Vec<Vec<usize>>,
    sorted_names: std::collections::HashMap<*const SortedRun, usize>,
}

pub(super) enum PlanItem {
    Link(Arc<Run>),
    /// A write buffer (an O(1) clone of the persistent map) to write out as a run.
    Write(WriteBuffer),
}

impl SnapshotPlan {
    /// The index of part `run` (the same index every time it is named).
    fn name_part(&mut self, run: &Arc<Run>) -> usize {
        let items = &mut self.items;
        *self.linked.entry(Arc::as_ptr(run)).or_insert_with(|| {
            items.push(PlanItem::Link(run.clone()));
            items.len() - 1
        })
    }

    /// The index of sorted run `run` (the same index every time it is named); its parts are
    /// named too.
    pub(crate) fn name(&mut self, run: &Arc<SortedRun>) -> usize {
        if let Some(&i) = self.sorted_names.get(&Arc::as_ptr(run)) {
            return i;
        }
        let parts = run.parts().iter().map(|p| self.name_part(p)).collect();
        self.sorted.push(parts);
        self.sorted_names
            .insert(Arc::as_ptr(run), self.sorted.len() - 1);
        self.sorted.len() - 1
    }

    /// The index of a write buffer to be written as a run (`None` if it is empty).
    pub(crate) fn buffer(&mut self, entries: WriteBuffer) -> Option<usize> {
        if entries.is_empty() {
            return None;
        }
        self.items.push(PlanItem::Write(entries));
        Some(self.items.len() - 1)
    }

    /// Records a pending union (its inputs' views and the credits it was paid): each input's
    /// buffer and runs, a finished nested union as the input's oldest run, a pending one
    /// recursively. Each union's state is read once, as it may finish concurrently.
    pub(crate) fn union(&mut self, views: &[Arc<TableView>], produced: u64) -> UnionShape {
        let inputs = views
            .iter()
            .map(|view| {
                let buffer = self.buffer(view.buffer.clone());
                let mut runs: Vec<usize> = view.runs.iter().map(|r| self.name(r)).collect();
                let nested = match view.union.as_ref().map(|u| u.state()) {
                    Some((UnionContents::Pending(views), produced)) => {
                        Some(Box::new(self.union(&views, produced)))
                    }
                    Some((UnionContents::Done(Some(run)), _)) => {
                        runs.push(self.name(&run));
                        None
                    }
                    Some((UnionContents::Done(None), _)) | None => None,
                };
                ViewShape {
                    buffer,
                    runs,
                    union: nested,
                }
            })
            .collect();
        UnionShape { inputs, produced }
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }
}

/// What a table hands to [`save`]: its contents at one instant.
pub(crate) struct SnapshotContents {
    pub(crate) config: TableConfig,
    pub(crate) plan: SnapshotPlan,
    pub(crate) levels: Vec<LevelShape>,
    pub(crate) write_buffer: Option<usize>,
    pub(crate) union: Option<UnionShape>,
    /// The trie of an authenticated table (set by the table before saving).
    pub(crate) auth: Option<AuthMeta>,
}

impl SnapshotContents {
    /// Refuses, before anything is written, contents that the decoder would refuse: every limit
    /// [`SnapshotMeta::decode`] enforces (label size, runs, levels, union inputs and nesting) is
    /// checked here against what would be encoded, so a snapshot that saves always opens.
    ///
    /// Errors: [`Error::InvalidConfig`] for a label over [`SNAPSHOT_LABEL_BYTES_MAX`] bytes,
    /// [`Error::TableTooLarge`] for contents over a format limit.
    pub(crate) fn check_limits(&self, label: &str) -> Result<()> {
        if label.len() > SNAPSHOT_LABEL_BYTES_MAX {
            return Err(Error::InvalidConfig(format!(
                "snapshot label of {} bytes exceeds {SNAPSHOT_LABEL_BYTES_MAX}",
                label.len()
            )));
        }
        let too_large = |what: String| Err(Error::TableTooLarge(what));
        if self.plan.len() > RUNS_MAX as usize || self.plan.sorted.len() > RUNS_MAX as usize {
            return too_large(format!(
                "a snapshot holds at most {RUNS_MAX} runs; this table has {}",
                self.plan.len().max(self.plan.sorted.len())
            ));
        }
        if self.levels.len() > LEVELS_MAX as usize {
            return too_large(format!(
                "a snapshot holds at most {LEVELS_MAX} levels; this table has {}",
                self.levels.len()
            ));
        }
        for level in &self.levels {
            let merging = match &level.incoming {
                IncomingShape::Merging { inputs, .. } => inputs.len(),
                _ => 0,
            };
            let runs = merging.max(level.resident.len());
            if runs > RUNS_MAX as usize {
                return too_large(format!("a level of {runs} runs exceeds {RUNS_MAX}"));
            }
        }
        if let Some(union) = &self.union {
            check_union_limits(union, 0)?;
        }
        Ok(())
    }
}

/// The limits [`decode_union`] enforces, checked on a union about to be saved at `depth`.
fn check_union_limits(union: &UnionShape, depth: usize) -> Result<()> {
    if depth >= UNION_DEPTH_MAX {
        return Err(Error::TableTooLarge(format!(
            "a snapshot holds unions nested at most {UNION_DEPTH_MAX} deep; this table's are deeper"
        )));
    }
    if union.inputs.len() > RUNS_MAX as usize {
        return Err(Error::TableTooLarge(format!(
            "a snapshot holds unions of at most {RUNS_MAX} tables; this one has {}",
            union.inputs.len()
        )));
    }
    for input in &union.inputs {
        if input.runs.len() > RUNS_MAX as usize {
            return Err(Error::TableTooLarge(format!(
                "a union input of {} runs exceeds {RUNS_MAX}",
                input.runs.len()
            )));
        }
        if let Some(nested) = &input.union {
            check_union_limits(nested, depth + 1)?;
        }
    }
    Ok(())
}

/// A table's contents at one instant, as a snapshot plan (the table holds its read lock): O(runs)
/// reference counts and an O(1) clone of each write buffer; no I/O but the cut of a merge in
/// progress whose progress is worth recording ([`Levels::shape`]), whose error it returns.
pub(crate) fn plan(
    config: &TableConfig,
    levels: &Levels,
    write_buffer: &WriteBuffer,
    union: Option<&Arc<UnionLevel>>,
) -> Result<SnapshotContents> {
    let mut plan = SnapshotPlan::default();
    let mut levels = levels.shape(&mut |run| plan.name(run))?;
    let write_buffer = plan.buffer(write_buffer.clone());
    // The union's state is read once: it may finish concurrently (through a duplicate).
    let union = match union.map(|u| u.state()) {
        Some((UnionContents::Done(Some(run)), _)) => {
            // A finished union is saved as the last level it migrates to.
            levels.push(LevelShape {
                incoming: IncomingShape::Single(plan.name(&run)),
                resident: Vec::new(),
            });
            None
        }
        Some((UnionContents::Pending(views), produced)) => Some(plan.union(&views, produced)),
        Some((UnionContents::Done(None), _)) | None => None,
    };
    Ok(SnapshotContents {
        config: config.clone(),
        plan,
        levels,
        write_buffer,
        union,
        auth: None,
    })
}

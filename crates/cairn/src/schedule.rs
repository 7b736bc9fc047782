//! The merge schedule: lazy levelling with size ratio 4 and credit-paced incremental merges.
//!
//! Owns: `Levels` (the runs of a table below the write buffer, grouped in levels, with the merge
//! in progress on each level), the credit accounting that bounds the merge work of any single
//! update, and the counts of the merges each level started and finished and of the steps done
//! on them ([`LevelMergeStats`], kept as the merges run: O(levels) to read). May call: `merge`,
//! `run`, `sorted`, `fs` (handed to merges), `background` (handing it each new merge).
//! Must never touch: the write buffer, lookups, files directly.
//!
//! # Shape
//!
//! Level 1 receives every flushed write buffer as a run. Every level except the last is *tiered*:
//! it holds an incoming run (a single run or a merge in progress) plus up to T - 1 = 3 resident
//! runs. When a run arrives at a full tiered level, the level's completed incoming run and its
//! residents move down together as the inputs of the next level's merge. The last level is
//! *levelled*: arriving runs are merged into its single run, and deletes are dropped there. A
//! completed merge whose output is too small for its level (it fits the level above) is held back
//! and merged again with the next arrivals; a last-level run grown too large for its level is
//! promoted to a new level below.
//!
//! # Credits and the worst-case bound
//!
//! With `B` the write buffer size, runs arrive at level `l` at most once every
//! `N(l) = B * T^(l-1)` updates, which is the *nominal debt* of a merge started there. Every
//! update pays one nominal credit to the merge of every level; a merge converts `c` nominal credits
//! into `floor(c * debt / N(l))` merge steps, where its debt is the sum of its inputs' sizes. So a
//! merge is fully paid exactly when the next run can arrive, and never has to be finished in a
//! hurry. Steps are spent in batches of `merge_batch_size`.
//!
//! Input sizes are bounded: a run on tiered level `l` holds at most `S(l) = B * T^(l-1) *
//! (1 + (l-1)/T)` entries (T runs of level `l-1` plus a held-back run of at most `B * T^(l-2)`),
//! so a tiered merge's debt is at most `(1 + (l-1)/T) * N(l)`, and a levelled merge's (T runs of
//! level `l-1` plus a run of at most `B * T^l`) at most `(T + 1 + (l-2)/T) * N(l)`. Hence one
//! update performs at most, summed over levels `l = 2..=L`:
//!
//! ```text
//!   (merge_batch_size - 1)        unspent credits below the batch threshold
//! + ceil(debt / N(l))             steps one credit buys
//! + T                             overshoot: the last output key may consume an entry from
//!                                 each of up to T + 1 inputs
//! ```
//!
//! which [`merge_steps_per_update_max`] computes. Level 1 never merges. Separately, a full
//! write buffer is written out as a run over the `B / 4` updates after it, 4 entries each
//! (module `lsm`, `Flushing`). With [`MergeSchedule::OneShot`] a merge
//! is done entirely when it starts, so an update may merge the whole table.

use std::sync::{Arc, MutexGuard};

use crate::background::Background;
use crate::config::{DiskCachePolicy, MergeSchedule, Resolve, SIZE_RATIO};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::merge::{MergeKind, MergeProgress, MergingRun, SharedMerge, CUT_STEPS_MIN};
use crate::run::RunParams;
use crate::sorted::SortedRun;

/// The most merge steps a single update can perform on a table with `levels` levels, under the
/// incremental schedule (see the module documentation for the derivation).
pub fn merge_steps_per_update_max(levels: usize, merge_batch_size: u64) -> u64 {
    let t = SIZE_RATIO;
    let mut bound = 0u64;
    for level in 2..=levels as u64 {
        let ratio_ceil = if level == levels as u64 {
            t + 1 + (level - 2).div_ceil(t)
        } else {
            1 + (level - 1).div_ceil(t)
        };
        bound += merge_batch_size - 1 + ratio_ceil + t;
    }
    bound
}

/// What creating and running merges needs from the table and session.
pub(crate) struct MergeContext<'a> {
    pub(crate) fs: &'a Arc<dyn FileSystem>,
    pub(crate) params: &'a RunParams,
    pub(crate) next_run_number: &'a (dyn Fn() -> u64 + Sync),
    pub(crate) resolve: &'a Resolve,
    pub(crate) disk_cache: DiskCachePolicy,
    pub(crate) schedule: MergeSchedule,
    pub(crate) write_buffer_entries: u64,
    pub(crate) merge_batch_size: u64,
    /// A union lies below the levels: no merge may drop deletes.
    pub(crate) union_below: bool,
    /// The session is read-only: merges restored from a snapshot stay paused (their inputs
    /// are read; no output is written).
    pub(crate) read_only: bool,
    /// The session's background merge thread, if it has one: every new merge is handed to it.
    pub(crate) background: Option<&'a Background>,
    /// [`crate::TableConfig::part_entries`].
    pub(crate) part_entries: Option<u64>,
}

impl MergeContext<'_> {
    /// Shares a new merge, handing it to the background thread if there is one.
    fn share(&self, merge: MergingRun) -> Arc<SharedMerge> {
        let shared = Arc::new(SharedMerge::new(merge));
        if let Some(background) = self.background {
            background.register(&shared);
        }
        shared
    }

    /// The run parameters of a merge of `kind` into level `level` of a table with `levels`
    /// levels: a merge into the deepest level (one that drops deletes) sizes its output's filter
    /// by `TableConfig::last_level_bloom`, others by their level ([`RunParams::for_level`]).
    fn params_for(
        &self,
        kind: MergeKind,
        level: usize,
        levels: usize,
    ) -> std::borrow::Cow<'_, RunParams> {
        match kind {
            MergeKind::LastLevel => std::borrow::Cow::Owned(self.params.for_last_level()),
            MergeKind::MidLevel => self.params.for_level(level, levels),
        }
    }

    /// The kind of a merge on the last level: deletes are dropped unless a union lies below.
    fn last_level_kind(&self) -> MergeKind {
        if self.union_below {
            MergeKind::MidLevel
        } else {
            MergeKind::LastLevel
        }
    }

    /// Largest run of a tiered level: `B * T^(level-1)`; also the nominal debt of its merges.
    fn tiering_size(&self, level: usize) -> Result<u64> {
        SIZE_RATIO
            .checked_pow(level as u32 - 1)
            .and_then(|p| p.checked_mul(self.write_buffer_entries))
            .ok_or_else(|| Error::TableTooLarge(format!("level {level} is too deep")))
    }

    /// Largest run of a levelled level: `B * T^level`.
    fn levelling_size(&self, level: usize) -> Result<u64> {
        self.tiering_size(level)?
            .checked_mul(SIZE_RATIO)
            .ok_or_else(|| Error::TableTooLarge(format!("level {level} is too deep")))
    }
}

/// A level's merge as one table handle sees it: the merge itself is shared by every duplicate
/// of the table (work done through one is not done again through another), while the nominal
/// credits are the handle's own.
#[derive(Debug, Clone)]
struct LevelMerge {
    merge: Arc<SharedMerge>,
    nominal_debt: u64,
    nominal_credits: u64,
    /// Where the merge's pace was last set from, when its steps fell behind its credits: a
    /// merge restored from a snapshot (its steps restart from 0, at the credits it had been
    /// paid when saved) or one whose steps a log replay put off ([`Levels::defer_steps`]). The
    /// steps owed then are spread over the credits still to come (see [`LevelMerge::target`])
    /// instead of being done while the table opens.
    baseline: Option<Baseline>,
    /// Whether this handle has counted the merge as finished
    /// ([`LevelMergeStats::merges_finished`]): each merge counts once.
    finish_counted: bool,
}

/// The point a merge's pace is measured from: `credits` nominal credits paid and `steps` steps
/// done.
#[derive(Debug, Clone, Copy)]
struct Baseline {
    credits: u64,
    steps: u64,
}

impl LevelMerge {
    /// The merge steps due once `nominal_credits` are paid, for a merge of `debt` steps: in
    /// proportion to the credits; all of it once the nominal debt is paid. For a merge with a
    /// [`Baseline`] of `s0` steps at `c0` credits (restored from a snapshot, or its steps put off
    /// by a log replay): `s0` plus the steps left in proportion to the credits paid since `c0`
    /// over those left, so that it still finishes when its nominal debt is paid with no update
    /// doing more than `(D - s0) / (N - c0)` steps per credit (`N` the nominal debt) where it
    /// would have done `D / N`. (Paying the owed steps at the usual rate instead and leaving
    /// them to the background thread was measured: when the thread lags, the update paying the
    /// last credit completes the whole merge, 95 s in one restart of a 100M table; see
    /// `docs/design.md`, "Restart in seconds".)
    fn target(&self, debt: u64) -> u64 {
        if self.nominal_credits >= self.nominal_debt {
            return debt;
        }
        let Baseline { credits, steps } = self.baseline.unwrap_or(Baseline {
            credits: 0,
            steps: 0,
        });
        let paid = self.nominal_credits.saturating_sub(credits);
        let owed = self.nominal_debt.saturating_sub(credits);
        let left = debt.saturating_sub(steps);
        if owed == 0 {
            return debt;
        }
        steps.min(debt) + (paid as u128 * left as u128 / owed as u128) as u64
    }
}

#[derive(Debug, Clone)]
enum Incoming {
    Single(Arc<SortedRun>),
    Merging(Box<LevelMerge>),
    /// A finished last-level merge that dropped every entry (restored from a snapshot).
    Empty,
}

/// The structure of a table's levels with runs named by index, as a snapshot records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IncomingShape {
    /// A single run.
    Single(usize),
    /// A merge in progress: its inputs (newest first), kind, the handle's nominal credits and
    /// how far it had come (none recorded: it starts again from its first entry).
    Merging {
        last_level: bool,
        nominal_debt: u64,
        nominal_credits: u64,
        inputs: Vec<usize>,
        progress: Option<ShapeProgress>,
    },
    /// Nothing (a finished merge whose output was empty).
    Empty,
}

/// A merge's progress as a snapshot records it ([`crate::merge::MergeProgress`], its output so far
/// named by index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShapeProgress {
    /// The finished parts of the output, as one sorted run (`None`: nothing written yet).
    pub(crate) output: Option<usize>,
    /// Every input entry below this key is consumed, none at or above it (`None`: all are).
    pub(crate) next_key: Option<Vec<u8>>,
    pub(crate) steps_done: u64,
}

/// One level of a [`IncomingShape`]-described structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LevelShape {
    pub(crate) incoming: IncomingShape,
    /// Resident runs, newest first.
    pub(crate) resident: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Level {
    incoming: Incoming,
    /// Resident runs, newest first; at most T - 1.
    resident: Vec<Arc<SortedRun>>,
}

/// The levels of a table.
/// Cloning shares every run and every merge in progress (a duplicate of the table).
#[derive(Debug, Default, Clone)]
pub(crate) struct Levels {
    levels: Vec<Level>,
    /// Merges started through this handle and what they linked.
    counts: MergeCounts,
    /// Credits are paid but no steps done, except to finish a merge whose nominal debt is paid
    /// (see [`Levels::defer_steps`]).
    deferring: bool,
}

/// Merges started by a handle of a table, and the parts they linked instead of rewriting.
#[derive(Clone, Debug, Default)]
struct MergeCounts {
    started: u64,
    parts_linked: u64,
    entries_linked: u64,
    /// The merge work of each level (index 0 is level 1), as far as a level has had any.
    per_level: Vec<LevelMergeStats>,
}

impl MergeCounts {
    /// The counters of the level at index `idx` (level `idx + 1`).
    fn level(&mut self, idx: usize) -> &mut LevelMergeStats {
        if self.per_level.len() <= idx {
            self.per_level.resize(idx + 1, LevelMergeStats::default());
        }
        &mut self.per_level[idx]
    }

    /// Adds `steps` merge steps done on level index `idx`'s merge; returns them.
    fn steps(&mut self, idx: usize, steps: u64) -> u64 {
        self.level(idx).merge_steps += steps;
        steps
    }

    /// Counts `m` (on level index `idx`) as finished if it is and has not been counted yet.
    fn finished(&mut self, idx: usize, m: &mut LevelMerge, done: bool) {
        if done && !m.finish_counted {
            m.finish_counted = true;
            self.level(idx).merges_finished += 1;
        }
    }
}

/// The merge work done on one level of a table through one handle
/// ([`crate::TableStats::level_merges`]), since the handle was created, opened from a snapshot or
/// duplicated. Merges on level `l` take the runs arriving there as inputs and write the level's
/// new incoming run; level 1 never merges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelMergeStats {
    /// Merges started on this level (summed over the levels:
    /// [`crate::TableStats::merges_started`]).
    pub merges_started: u64,
    /// Merges on this level found finished, each counted once: when the handle's own steps
    /// finish one (an update's credits, a late merge completed as runs arrive,
    /// [`crate::Table::complete_merges`]), or, for one finished elsewhere (the session's
    /// background thread, a duplicate sharing it), at the next update that pays the level's
    /// credits or when its output is taken. A merge in progress when the handle was opened or
    /// duplicated counts when it finishes (one finished by then never does), so this may
    /// exceed `merges_started` by the merges in progress then; without background merges or
    /// duplicates, `merges_started - merges_finished` of a new table is the level's merge in
    /// progress (0 or 1).
    pub merges_finished: u64,
    /// Merge steps (input entries consumed) this handle performed on this level's merges
    /// (summed over the levels: [`crate::TableStats::merge_steps_total`]); steps done on the
    /// session's background thread are not included
    /// ([`crate::Session::background_merge_steps`] counts those, for every table).
    pub merge_steps: u64,
}

/// What [`Levels::stats`] reports.
#[derive(Clone, Debug, Default)]
pub(crate) struct LevelStats {
    pub(crate) runs: usize,
    pub(crate) parts: usize,
    pub(crate) merges_in_progress: usize,
    pub(crate) memory_bytes: usize,
    pub(crate) merges_started: u64,
    pub(crate) parts_linked: u64,
    pub(crate) entries_linked: u64,
    /// One entry per level, level 1 first.
    pub(crate) per_level: Vec<LevelMergeStats>,
}

impl Levels {
    /// Number of levels.
    pub(crate) fn level_count(&self) -> usize {
        self.levels.len()
    }

    /// Adds `run` as a new last level below the others (a finished union migrating in). A run
    /// too large for that level is promoted further down when runs next arrive there.
    ///
    /// The run is placed on the first level below the existing ones whose levelled size,
    /// `B * T^level`, holds it (with empty levels in between), so that the merges that later
    /// take it in have the debt the schedule expects.
    pub(crate) fn push_last_level(&mut self, run: Arc<SortedRun>, write_buffer_entries: u64) {
        let mut level = (self.levels.len() + 1).max(2);
        let fits = |level: usize| {
            SIZE_RATIO
                .checked_pow(level as u32)
                .and_then(|p| p.checked_mul(write_buffer_entries))
                .is_none_or(|size| run.entries() <= size)
        };
        while !fits(level) {
            level += 1;
        }
        while self.levels.len() + 1 < level {
            self.levels.push(Level {
                incoming: Incoming::Empty,
                resident: Vec::new(),
            });
        }
        self.levels.push(Level {
            incoming: Incoming::Single(run),
            resident: Vec::new(),
        });
    }

    /// Every run a lookup must consult, newest first: for a merge in progress, its inputs (read
    /// without waiting for merge work: [`SharedMerge::readable_runs`]).
    pub(crate) fn runs_newest_first(&self, out: &mut Vec<Arc<SortedRun>>) {
        for level in &self.levels {
            match &level.incoming {
                Incoming::Single(run) => out.push(run.clone()),
                Incoming::Merging(m) => m.merge.readable_runs(out),
                Incoming::Empty => {}
            }
            out.extend(level.resident.iter().cloned());
        }
    }

    /// Puts off (`true`) or resumes (`false`) the steps credits pay for, for a log replay: while
    /// put off, every update still pays its credits and a merge whose nominal debt is paid is
    /// still finished (as the schedule's shape needs), but no other step is done. On resuming,
    /// each merge behind its credits gets a [`Baseline`] there, so that the steps put off are
    /// spread over the credits still to come (or done ahead by the background thread) rather
    /// than done by the next update. A replay of `u` updates thus does the merge work of the
    /// levels whose merges finish within `u` updates (the upper ones, a small share of the
    /// work) and leaves the deep levels' steps to the updates after the open. O(levels).
    pub(crate) fn defer_steps(&mut self, on: bool) {
        let was = std::mem::replace(&mut self.deferring, on);
        if on || !was {
            return;
        }
        for level in &mut self.levels {
            let Incoming::Merging(m) = &mut level.incoming else {
                continue;
            };
            let merge = lock(&m.merge);
            if merge.is_done() {
                continue;
            }
            let done = merge.steps_done();
            if done < m.target(merge.debt()) {
                m.baseline = Some(Baseline {
                    credits: m.nominal_credits,
                    steps: done,
                });
            }
        }
    }

    /// Pays `credits` nominal credits to the merge of every level; returns the steps performed.
    pub(crate) fn supply_credits(&mut self, ctx: &MergeContext<'_>, credits: u64) -> Result<u64> {
        let mut steps = 0;
        let deferring = self.deferring;
        let counts = &mut self.counts;
        for (idx, level) in self.levels.iter_mut().enumerate() {
            let Incoming::Merging(m) = &mut level.incoming else {
                continue;
            };
            // The merge's lock is taken only when this update has work to do on it: the
            // progress it publishes is a lower bound of the steps done (by duplicates and the
            // background thread too), so no due work is ever skipped.
            let Some(published) = m.merge.published_steps() else {
                // Finished (here, through a duplicate or on the background thread).
                counts.finished(idx, m, true);
                continue;
            };
            m.nominal_credits = m
                .nominal_credits
                .saturating_add(credits)
                .min(m.nominal_debt);
            if deferring && m.nominal_credits < m.nominal_debt {
                continue;
            }
            let debt = m.merge.debt();
            let target = m.target(debt);
            let due = target.saturating_sub(published) >= ctx.merge_batch_size
                || (target == debt && published < debt);
            if !due {
                continue;
            }
            let mut merge = lock_for_work(&m.merge)?;
            if merge.is_done() {
                drop(merge);
                counts.finished(idx, m, true);
                continue;
            }
            // Work already done through a duplicate counts: only the shortfall is done here.
            let unspent = target.saturating_sub(merge.steps_done());
            if unspent >= ctx.merge_batch_size {
                steps += counts.steps(idx, merge.steps(unspent)?);
            }
            if target == debt && !merge.is_done() {
                steps += counts.steps(idx, merge.complete()?);
            }
            m.merge.publish(&merge);
            let done = merge.is_done();
            drop(merge);
            counts.finished(idx, m, done);
        }
        Ok(steps)
    }

    /// Finishes every merge in progress, top level first, and counts each as fully paid by this
    /// handle; returns the steps performed. No run moves between levels and no merge starts:
    /// the levels keep their shape, each merge in progress replaced by its output. Cost: every
    /// step left in those merges (at most the entries of their inputs, that is at most the
    /// table), in the memory of one merge at a time.
    pub(crate) fn complete_merges(&mut self) -> Result<u64> {
        let mut steps = 0;
        let counts = &mut self.counts;
        for (idx, level) in self.levels.iter_mut().enumerate() {
            let Incoming::Merging(m) = &mut level.incoming else {
                continue;
            };
            if m.merge.published_steps().is_none() {
                // Finished already (here, through a duplicate or on the background thread).
                m.nominal_credits = m.nominal_debt;
                counts.finished(idx, m, true);
                continue;
            }
            let mut merge = lock_for_work(&m.merge)?;
            if !merge.is_done() {
                steps += counts.steps(idx, merge.complete()?);
            }
            m.merge.publish(&merge);
            drop(merge);
            m.nominal_credits = m.nominal_debt;
            counts.finished(idx, m, true);
        }
        Ok(steps)
    }

    /// Adds a flushed write buffer as the newest run of level 1. Returns the merge steps this
    /// performed (none under the incremental schedule unless a merge was late).
    pub(crate) fn add_flushed_run(
        &mut self,
        ctx: &MergeContext<'_>,
        run: Arc<SortedRun>,
    ) -> Result<u64> {
        self.add_runs(ctx, 1, vec![run])
    }

    fn add_runs(
        &mut self,
        ctx: &MergeContext<'_>,
        level_number: usize,
        incoming: Vec<Arc<SortedRun>>,
    ) -> Result<u64> {
        let idx = level_number - 1;
        let mut steps = 0;
        if idx == self.levels.len() {
            let (mut incoming, s) = new_incoming(
                ctx,
                level_number,
                level_number,
                incoming,
                ctx.last_level_kind(),
            )?;
            self.count(idx, &mut incoming, s);
            self.levels.push(Level {
                incoming,
                resident: Vec::new(),
            });
            return Ok(s);
        }
        let is_last = idx + 1 == self.levels.len();
        let here_kind = if is_last {
            ctx.last_level_kind()
        } else {
            MergeKind::MidLevel
        };
        // The incoming merge must be complete by now; finish it if it is not (a late merge).
        let (done, s) = complete_incoming(&mut self.levels[idx].incoming)?;
        steps += self.counts.steps(idx, s);
        if let Incoming::Merging(m) = &mut self.levels[idx].incoming {
            self.counts.finished(idx, m, true);
        }
        let levelled = level_number > 1 && is_last;
        let mut move_down: Option<Vec<Arc<SortedRun>>> = None;
        let new_incoming_runs;
        let new_kind;
        if !levelled {
            let too_small = match &done {
                Some(r) => level_number > 1 && r.entries() <= ctx.tiering_size(level_number - 1)?,
                None => false,
            };
            let level = &mut self.levels[idx];
            if too_small {
                new_incoming_runs = incoming.into_iter().chain(done).collect();
                new_kind = here_kind;
            } else if level.resident.len() + usize::from(done.is_some()) >= SIZE_RATIO as usize {
                let bundle: Vec<_> = done.into_iter().chain(level.resident.drain(..)).collect();
                move_down = Some(bundle);
                new_incoming_runs = incoming;
                new_kind = MergeKind::MidLevel;
            } else {
                if let Some(r) = done {
                    level.resident.insert(0, r);
                }
                new_incoming_runs = incoming;
                new_kind = here_kind;
            }
        } else {
            match done {
                Some(r) if r.entries() > ctx.levelling_size(level_number)? => {
                    move_down = Some(vec![r]);
                    new_incoming_runs = incoming;
                    new_kind = MergeKind::MidLevel;
                }
                done => {
                    new_incoming_runs = incoming.into_iter().chain(done).collect();
                    new_kind = ctx.last_level_kind();
                }
            }
        }
        let levels = self.levels.len();
        let (mut new, s) = new_incoming(ctx, level_number, levels, new_incoming_runs, new_kind)?;
        steps += s;
        self.count(idx, &mut new, s);
        self.levels[idx].incoming = new;
        if let Some(bundle) = move_down {
            steps += self.add_runs(ctx, level_number + 1, bundle)?;
        }
        Ok(steps)
    }

    /// The structure of the levels, naming every run through `name` (which gives its index in
    /// the snapshot). A finished merge is recorded as its output; one in progress with its
    /// progress ([`MergingRun::progress`], which may cut its output: writing a part's filter,
    /// index and checksums). Errors: the I/O of a cut (the merge then fails, and the table
    /// with it).
    pub(crate) fn shape(
        &self,
        name: &mut dyn FnMut(&Arc<SortedRun>) -> usize,
    ) -> Result<Vec<LevelShape>> {
        let mut shapes = Vec::with_capacity(self.levels.len());
        for level in &self.levels {
            let incoming = match &level.incoming {
                Incoming::Single(run) => IncomingShape::Single(name(run)),
                Incoming::Empty => IncomingShape::Empty,
                Incoming::Merging(m) => {
                    let mut merge = lock(&m.merge);
                    match merge.output() {
                        Some(Some(run)) => IncomingShape::Single(name(run)),
                        Some(None) => IncomingShape::Empty,
                        None => {
                            let progress = match merge.progress(CUT_STEPS_MIN)? {
                                Some(p) => Some(ShapeProgress {
                                    output: SortedRun::new(p.parts)?.map(|run| name(&run)),
                                    next_key: p.next_key,
                                    steps_done: p.steps_done,
                                }),
                                None => None,
                            };
                            IncomingShape::Merging {
                                last_level: merge.kind() == MergeKind::LastLevel,
                                nominal_debt: m.nominal_debt,
                                nominal_credits: m.nominal_credits,
                                inputs: merge.inputs().iter().map(&mut *name).collect(),
                                progress,
                            }
                        }
                    }
                }
            };
            let resident = level.resident.iter().map(&mut *name).collect();
            shapes.push(LevelShape { incoming, resident });
        }
        Ok(shapes)
    }

    /// Rebuilds levels from a recorded structure over opened runs: merges in progress restart
    /// from their inputs and are caught up with the nominal credits they had been paid.
    /// Returns `Corrupt` if the structure names a run that does not exist.
    pub(crate) fn from_shape(
        ctx: &MergeContext<'_>,
        shapes: &[LevelShape],
        runs: &[Arc<SortedRun>],
    ) -> Result<Levels> {
        let run = |i: usize| {
            runs.get(i).cloned().ok_or_else(|| {
                Error::corrupt("snapshot metadata", format!("run {i} does not exist"))
            })
        };
        let mut levels = Vec::with_capacity(shapes.len());
        for (idx, shape) in shapes.iter().enumerate() {
            let incoming = match &shape.incoming {
                IncomingShape::Single(i) => Incoming::Single(run(*i)?),
                IncomingShape::Empty => Incoming::Empty,
                IncomingShape::Merging {
                    last_level,
                    nominal_debt,
                    nominal_credits,
                    inputs,
                    progress,
                } => {
                    let inputs = inputs.iter().map(|&i| run(i)).collect::<Result<Vec<_>>>()?;
                    if inputs.len() < 2 || *nominal_debt == 0 || nominal_credits > nominal_debt {
                        return Err(Error::corrupt("snapshot metadata", "inconsistent merge"));
                    }
                    let kind = if *last_level {
                        MergeKind::LastLevel
                    } else {
                        MergeKind::MidLevel
                    };
                    if ctx.read_only {
                        levels.push(Level {
                            incoming: Incoming::Merging(Box::new(LevelMerge {
                                merge: Arc::new(SharedMerge::new(MergingRun::paused(
                                    inputs,
                                    kind,
                                    ctx.resolve.clone(),
                                ))),
                                nominal_debt: *nominal_debt,
                                nominal_credits: *nominal_credits,
                                baseline: None,
                                finish_counted: false,
                            })),
                            resident: shape
                                .resident
                                .iter()
                                .map(|&i| run(i))
                                .collect::<Result<Vec<_>>>()?,
                        });
                        continue;
                    }
                    let params = ctx.params_for(kind, idx + 1, shapes.len());
                    let caching = ctx.disk_cache.caches_level(idx + 1);
                    // Resumed where the snapshot left it (no step is done again); without a
                    // recorded progress, the merge starts again from its first entry, and the
                    // steps its credits paid for are not replayed here, so that an open reads
                    // no data: they are spread over the credits still to come
                    // (`LevelMerge::target`), or done ahead by the background thread.
                    let progress = match progress {
                        Some(p) => Some(MergeProgress {
                            parts: match p.output {
                                Some(i) => run(i)?.parts().to_vec(),
                                None => Vec::new(),
                            },
                            next_key: p.next_key.clone(),
                            steps_done: p.steps_done,
                        }),
                        None => None,
                    };
                    let steps = progress.as_ref().map_or(0, |p| p.steps_done);
                    let mut merge = MergingRun::resume(
                        ctx.fs.clone(),
                        &params,
                        (ctx.next_run_number)(),
                        inputs,
                        kind,
                        ctx.resolve.clone(),
                        caching,
                        ctx.part_entries,
                        progress,
                    )?;
                    if ctx.schedule == MergeSchedule::OneShot || nominal_credits == nominal_debt {
                        merge.complete()?;
                    }
                    // A merge finished as it is restored happened before this handle counts.
                    let finish_counted = merge.is_done();
                    Incoming::Merging(Box::new(LevelMerge {
                        merge: ctx.share(merge),
                        nominal_debt: *nominal_debt,
                        nominal_credits: *nominal_credits,
                        baseline: Some(Baseline {
                            credits: *nominal_credits,
                            steps,
                        }),
                        finish_counted,
                    }))
                }
            };
            let resident = shape
                .resident
                .iter()
                .map(|&i| run(i))
                .collect::<Result<Vec<_>>>()?;
            levels.push(Level { incoming, resident });
        }
        Ok(Levels {
            levels,
            counts: MergeCounts::default(),
            deferring: false,
        })
    }

    /// The shared merge of the first level that has one in progress (for tests).
    #[cfg(test)]
    pub(crate) fn merge_in_progress(&self) -> Option<MergeInProgress> {
        self.levels.iter().find_map(|level| match &level.incoming {
            Incoming::Merging(m) if !lock(&m.merge).is_done() => Some(m.merge.clone()),
            _ => None,
        })
    }

    /// Counts a new incoming merge on level index `idx`, the parts it links and the `steps` its
    /// start performed (all of it under [`MergeSchedule::OneShot`]); a merge finished as it
    /// started (one-shot, or every part linked) counts as finished too.
    fn count(&mut self, idx: usize, incoming: &mut Incoming, steps: u64) {
        if let Incoming::Merging(m) = incoming {
            let merge = lock(&m.merge);
            let done = merge.is_done();
            self.counts.started += 1;
            self.counts.parts_linked += merge.links_planned();
            self.counts.entries_linked += merge.entries_linked();
            drop(merge);
            let level = self.counts.level(idx);
            level.merges_started += 1;
            level.merge_steps += steps;
            self.counts.finished(idx, m, done);
        }
    }

    /// Starts the merge counters again from 0 (a duplicate's, which count its own work): a
    /// merge in progress now will count as finished when this handle finds it so, one finished
    /// already never will.
    pub(crate) fn reset_counts(&mut self) {
        self.counts = MergeCounts::default();
        for level in &mut self.levels {
            if let Incoming::Merging(m) = &mut level.incoming {
                m.finish_counted = m.merge.published_steps().is_none();
            }
        }
    }

    /// Statistics of the runs a lookup consults and of the merges started.
    pub(crate) fn stats(&self) -> LevelStats {
        let mut runs = Vec::new();
        self.runs_newest_first(&mut runs);
        let merges_in_progress = self
            .levels
            .iter()
            .filter(|l| matches!(&l.incoming, Incoming::Merging(m) if !lock(&m.merge).is_done()))
            .count();
        LevelStats {
            runs: runs.len(),
            parts: runs.iter().map(|r| r.parts().len()).sum(),
            merges_in_progress,
            memory_bytes: runs.iter().map(|r| r.memory_bytes()).sum(),
            merges_started: self.counts.started,
            parts_linked: self.counts.parts_linked,
            entries_linked: self.counts.entries_linked,
            per_level: (0..self.levels.len().max(self.counts.per_level.len()))
                .map(|idx| {
                    let counted = self.counts.per_level.get(idx);
                    counted.copied().unwrap_or_default()
                })
                .collect(),
        }
    }
}

/// A merge in progress, shared (for tests that hold its lock).
#[cfg(test)]
pub(crate) type MergeInProgress = Arc<SharedMerge>;

/// Locks a shared merge to read it (its inputs, output and progress). A poisoned lock is
/// recovered: a panic inside a merge step (a user's resolve function) leaves the inputs
/// untouched and no output, so what a reader sees (the inputs, for lookups and snapshots) is
/// still right.
fn lock(merge: &SharedMerge) -> MutexGuard<'_, MergingRun> {
    merge.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks a shared merge to do work on it. A poisoned lock means a panic interrupted a step half
/// way (some inputs advanced, nothing written): going on would lose entries, so the table (and
/// every duplicate sharing the merge) gets [`Error::TableBroken`]. A merge that failed with an
/// error refuses further work by itself (see `MergingRun::steps`).
fn lock_for_work(merge: &SharedMerge) -> Result<MutexGuard<'_, MergingRun>> {
    merge.lock().map_err(|_| {
        Error::TableBroken("a panic interrupted a merge shared with this table".into())
    })
}

/// Finishes a level's incoming merge (if needed) and returns its run and the steps performed.
fn complete_incoming(incoming: &mut Incoming) -> Result<(Option<Arc<SortedRun>>, u64)> {
    match incoming {
        Incoming::Single(run) => Ok((Some(run.clone()), 0)),
        Incoming::Empty => Ok((None, 0)),
        Incoming::Merging(m) => {
            let mut merge = lock_for_work(&m.merge)?;
            let steps = merge.complete()?;
            m.merge.publish(&merge);
            let out = merge.output().cloned().flatten();
            Ok((out, steps))
        }
    }
}

/// Makes the incoming run of a level from the runs arriving there (newest first).
fn new_incoming(
    ctx: &MergeContext<'_>,
    level_number: usize,
    levels: usize,
    mut runs: Vec<Arc<SortedRun>>,
    kind: MergeKind,
) -> Result<(Incoming, u64)> {
    if runs.len() == 1 {
        if let Some(run) = runs.pop() {
            return Ok((Incoming::Single(run), 0));
        }
    }
    let merge = MergingRun::new(
        ctx.fs.clone(),
        &ctx.params_for(kind, level_number, levels),
        (ctx.next_run_number)(),
        runs,
        kind,
        ctx.resolve.clone(),
        ctx.disk_cache.caches_level(level_number),
        ctx.part_entries,
    )?;
    let mut merge = merge;
    let steps = match ctx.schedule {
        MergeSchedule::OneShot => merge.complete()?,
        MergeSchedule::Incremental => 0,
    };
    let m = Box::new(LevelMerge {
        merge: ctx.share(merge),
        nominal_debt: ctx.tiering_size(level_number)?,
        nominal_credits: 0,
        baseline: None,
        finish_counted: false,
    });
    Ok((Incoming::Merging(m), steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_grows_with_levels() {
        assert_eq!(merge_steps_per_update_max(1, 1), 0);
        // Level 2 as the last (levelled) level: T + 1 + 0 steps per credit, plus overshoot T.
        assert_eq!(merge_steps_per_update_max(2, 1), 5 + 4);
        assert!(merge_steps_per_update_max(5, 8) > merge_steps_per_update_max(4, 8));
    }
}

//! Group commit: the transactions of concurrent [`Ledger::transact`] calls committed together
//! as one version (`LedgerConfig::group`), with one trie commit per table, one history append
//! and one fsync for all of them.
//!
//! Owns: the commit queue (`Queue`), what a finished transaction hands to it (`Submission`),
//! and the commit of a group (steps 1 to 3 of the module doc of `ledger`, for each member's
//! transaction, then once for the version). May call: the ledger's state and commit steps (its
//! parent module), the window's undo records, the engine's transactions. Must never touch: the
//! history tree's nodes (the parent's `finish` writes them).
//!
//! **The queue** works as LevelDB's writers do: a transaction whose body has run joins the
//! queue; the one at the front is the *leader*: it takes the front of the queue (at most
//! `group` members, and a member with metadata only alone, since a version has one), commits
//! them under the commit lock and hands each member its outcome. Members that join while a
//! group commits wait, and form the next group: the busier the ledger, the larger the groups.
//!
//! **A group's commit**, under the commit lock, for version `v`:
//!
//! 1. each member's links (ordered tables) are written against the live tables; a member that
//!    writes a key an earlier member read or wrote, or reads a key an earlier member wrote, goes
//!    back to its caller, which runs its body again. So the transactions of one version
//!    *commute*: replayed in any order they give the same tables (what a client replaying a
//!    version needs, and what keeps each member's receipts true: two writes of one key in one
//!    version would leave the earlier writer's receipt showing the later value);
//! 2. with receipts asked, each member's reads are proved as of `v − 1`, before any member's
//!    engine commit (the live tables are `v − 1` until then);
//! 3. each member's transaction commits to the engine, with the pending record and (window on)
//!    the undo record of the group so far: a member whose reads are no longer current fails
//!    its validation and runs its body again. Validation also makes each committed member's
//!    reads the values of `v − 1`: any earlier member's write to them would have failed it;
//! 4. the version is finished once (steps 2 and 3 of the commit), and the receipts of each
//!    committed member's writes are made as of `v`.
//!
//! Bounds: one version per group, one trie commit per table touched, one history append; each
//! member's receipts cost what [`Ledger::transact_proved`]'s do. The undo record each member's
//! engine commit carries is the group's so far: O(members × keys) bytes for the version.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Condvar, Mutex};

use cairn::Durability;

use super::{Ledger, LedgerTx, Made, State, Touched};
use crate::error::{Error, Result};
use crate::links::Writes;
use crate::records::{undo_key, Pending, Undo, KEY_PENDING};

/// A transaction whose body has run, handed to the queue to be committed.
pub(super) struct Submission {
    /// `None` once committed (or refused by the engine).
    tx: Option<cairn::Transaction>,
    /// Writes to ordered tables, by table: their links are made at commit.
    ordered: BTreeMap<usize, Writes>,
    /// The stored keys written (links included once they are made).
    written: BTreeSet<(usize, Vec<u8>)>,
    /// The keys read and written (tracked when receipts were asked or groups are on).
    touched: Option<Touched>,
    /// Whether receipts were asked ([`Ledger::transact_proved`]).
    prove: bool,
    meta: Vec<u8>,
}

impl LedgerTx<'_> {
    /// What the queue commits: the transaction, its writes and what it touched.
    pub(super) fn into_submission(self, meta: &[u8], prove: bool) -> Submission {
        Submission {
            prove,
            tx: Some(self.tx),
            ordered: self.ordered,
            written: self.written,
            touched: self.touched,
            meta: meta.to_vec(),
        }
    }
}

/// What became of a submitted transaction.
pub(super) enum Outcome {
    /// Committed as part of a version.
    Made(Box<Made>),
    /// Not committed: run the body again. With the engine's conflict, or `None` when the
    /// transaction wrote a key an earlier member of its group wrote.
    Retry(Option<cairn::Error>),
    /// Not committed (or its version not finished): the caller's error.
    Failed(Error),
}

/// The commit queue: members waiting, and the outcomes of the groups committed.
#[derive(Default)]
pub(super) struct Queue {
    inner: Mutex<Inner>,
    turn: Condvar,
}

#[derive(Default)]
struct Inner {
    /// Members by ticket, in arrival order; the leader takes the submissions of the front
    /// and leaves the tickets until its group is done.
    waiting: VecDeque<(u64, Option<Submission>)>,
    /// Outcomes of members of finished groups, until they take them.
    done: BTreeMap<u64, Outcome>,
    next: u64,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic under the lock leaves the queue as it was between two steps.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Ledger {
    /// Commits `submission` with the transactions queued beside it (at most `group` of them
    /// in one version), waiting until it is committed or refused.
    pub(super) fn submit(&self, submission: Submission) -> Outcome {
        let mut inner = self.queue.lock();
        let ticket = inner.next;
        inner.next += 1;
        inner.waiting.push_back((ticket, Some(submission)));
        loop {
            if let Some(outcome) = inner.done.remove(&ticket) {
                return outcome;
            }
            if inner.waiting.front().is_some_and(|(t, _)| *t == ticket) {
                break;
            }
            inner = self
                .queue
                .turn
                .wait(inner)
                .unwrap_or_else(|p| p.into_inner());
        }
        // The leader: take the front of the queue.
        let mut members = Vec::new();
        for (_, submission) in inner.waiting.iter_mut() {
            if members.len() >= self.group {
                break;
            }
            let alone = submission.as_ref().is_some_and(|s| !s.meta.is_empty());
            if alone && !members.is_empty() {
                break;
            }
            members.extend(submission.take());
            if alone {
                break;
            }
        }
        drop(inner);
        let mut outcomes = self.commit_group(members);
        let mut inner = self.queue.lock();
        let mut mine = None;
        for outcome in outcomes.drain(..) {
            let Some((t, _)) = inner.waiting.pop_front() else {
                break;
            };
            if t == ticket {
                mine = Some(outcome);
            } else {
                inner.done.insert(t, outcome);
            }
        }
        drop(inner);
        self.queue.turn.notify_all();
        mine.unwrap_or_else(|| {
            Outcome::Failed(Error::Broken("the commit queue lost a member".into()))
        })
    }

    /// Commits `members` (in order) as the next version: see the module doc. One outcome per
    /// member, in order.
    fn commit_group(&self, mut members: Vec<Submission>) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = members.iter().map(|_| None).collect();
        let mut state = self.write_state();
        if let Some(broken) = &state.broken {
            return members
                .iter()
                .map(|_| Outcome::Failed(Error::Broken(broken.clone())))
                .collect();
        }
        let version = state.history.size() + 1;
        let meta = members.first().map(|m| m.meta.clone()).unwrap_or_default();
        // Step 1: links, and the members that touch a key an earlier member writes, or write
        // a key an earlier member touches.
        // Keys by table (looked up by borrowed slices: no copy per key checked).
        type Keys = BTreeMap<usize, BTreeSet<Vec<u8>>>;
        let has = |keys: &Keys, t: usize, key: &[u8]| keys.get(&t).is_some_and(|k| k.contains(key));
        let mut group_written = Keys::new();
        let mut group_read = Keys::new();
        let several = members.len() > 1;
        for (i, member) in members.iter_mut().enumerate() {
            if let Err(e) = self.write_member_links(member) {
                outcomes[i] = Some(Outcome::Failed(e));
                continue;
            }
            if !several {
                continue;
            }
            let read = member.touched.as_ref().map(|t| &t.read);
            let overlaps = member
                .written
                .iter()
                .any(|(t, k)| has(&group_written, *t, k) || has(&group_read, *t, k))
                || read.is_some_and(|read| {
                    read.iter()
                        .any(|(t, keys)| keys.iter().any(|k| has(&group_written, *t, k)))
                });
            if overlaps {
                outcomes[i] = Some(Outcome::Retry(None));
                continue;
            }
            for (t, keys) in read.into_iter().flatten() {
                group_read
                    .entry(*t)
                    .or_default()
                    .extend(keys.iter().cloned());
            }
            for (t, k) in &member.written {
                group_written.entry(*t).or_default().insert(k.clone());
            }
        }
        // Step 2: the reads, as of `v − 1`.
        let mut reads: Vec<Option<super::ProvedKeys>> = members.iter().map(|_| None).collect();
        for (i, member) in members.iter_mut().enumerate() {
            if outcomes[i].is_some() || version == 1 {
                continue;
            }
            let Some(touched) = member.touched.as_mut().filter(|_| member.prove) else {
                continue;
            };
            let read = std::mem::take(&mut touched.read);
            if read.is_empty() {
                continue;
            }
            match self.prove_keys(&state, version - 1, read) {
                Ok(proved) => reads[i] = Some(proved),
                Err(e) => outcomes[i] = Some(Outcome::Failed(e)),
            }
        }
        // Step 3: the engine commits.
        let mut undo = Undo::default();
        let mut committed_any = false;
        for (i, member) in members.iter_mut().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            match self.commit_member(&mut state, version, &meta, member, &mut undo) {
                Ok(None) => committed_any = true,
                Ok(Some(outcome)) => outcomes[i] = Some(outcome),
                Err(e) => {
                    // The ledger is broken (`commit_member` says so in the state): every
                    // member not refused yet fails with it.
                    let broken = Error::Broken(e.to_string());
                    outcomes[i] = Some(Outcome::Failed(e));
                    for outcome in outcomes.iter_mut().filter(|o| o.is_none()) {
                        *outcome = Some(Outcome::Failed(Error::Broken(broken.to_string())));
                    }
                    return outcomes.into_iter().flatten().collect();
                }
            }
        }
        if !committed_any {
            return outcomes.into_iter().flatten().collect();
        }
        // Step 4: the version, then the receipts of the writes.
        let committed = match self.finish(&mut state, version, &meta) {
            Ok(committed) => committed,
            Err(e) => {
                state.broken = Some(e.to_string());
                let message = e.to_string();
                let mut first = Some(e);
                return outcomes
                    .into_iter()
                    .map(|o| match o {
                        Some(o) => o,
                        None => Outcome::Failed(
                            first
                                .take()
                                .unwrap_or_else(|| Error::Broken(message.clone())),
                        ),
                    })
                    .collect();
            }
        };
        // Proved against the digest of `v − 1`: re-anchored to `v`'s, once for all members.
        let inclusion = if version > 1 && reads.iter().any(Option::is_some) {
            match state
                .history
                .prove_inclusion(&self.history, version - 2, version)
            {
                Ok(inclusion) => Some(inclusion),
                Err(e) => {
                    let message = e.to_string();
                    return outcomes
                        .into_iter()
                        .map(|o| {
                            o.unwrap_or_else(|| Outcome::Failed(Error::Broken(message.clone())))
                        })
                        .collect();
                }
            }
        } else {
            None
        };
        members
            .into_iter()
            .zip(outcomes)
            .zip(reads)
            .map(|((member, outcome), reads)| {
                if let Some(outcome) = outcome {
                    return outcome;
                }
                let Some(touched) = member.touched.filter(|_| member.prove) else {
                    return Outcome::Made(Box::new((committed.clone(), None)));
                };
                // The version is made: a failure to prove it is the caller's error.
                let writes = match self.prove_keys(&state, version, touched.written) {
                    Ok(writes) => writes,
                    Err(e) => return Outcome::Failed(e),
                };
                let reads = reads.map(|mut reads| {
                    if let Some(inclusion) = &inclusion {
                        reads.read.receipt.history_size = inclusion.size;
                        reads.read.receipt.history_path = inclusion.path.clone();
                    }
                    reads.read.digest = committed.digest;
                    reads
                });
                Outcome::Made(Box::new((committed.clone(), Some((reads, writes)))))
            })
            .collect()
    }

    /// Buffers the link updates of `member`'s writes to ordered tables (under the commit
    /// lock: against the tables as they are, earlier members of the group included).
    fn write_member_links(&self, member: &mut Submission) -> Result<()> {
        let Some(tx) = &mut member.tx else {
            return Ok(());
        };
        for (&t, writes) in &member.ordered {
            let table = &self.tables[t];
            for (key, stored) in crate::links::updates(table, writes)? {
                member.written.insert((t, key.clone()));
                match stored {
                    Some(bytes) => tx.insert(table, key, bytes)?,
                    None => tx.delete(table, key)?,
                }
            }
        }
        Ok(())
    }

    /// Step 3 for one member: its transaction, the pending record and the group's undo record
    /// so far, as one of the engine's commits. `Ok(None)`: committed; `Ok(Some(outcome))`:
    /// refused without harm (a conflict, or input the engine refused); `Err`: the ledger is
    /// broken (marked in `state`).
    fn commit_member(
        &self,
        state: &mut State,
        version: u64,
        meta: &[u8],
        member: &mut Submission,
        undo: &mut Undo,
    ) -> Result<Option<Outcome>> {
        let Some(mut tx) = member.tx.take() else {
            return Ok(Some(Outcome::Failed(Error::Broken(
                "a transaction was submitted twice".into(),
            ))));
        };
        // The group's undo record with this member's entries, kept if it commits.
        let mut with_mine = None;
        let mut made = || -> Result<()> {
            if self.keep > 0 && version > 1 {
                // Under the commit lock, the live tables hold `v − 1` for the keys this member
                // writes (no earlier member of the group wrote them, step 1).
                let mine = self.undo_of(std::mem::take(&mut member.written))?;
                let mut next = undo.clone();
                next.entries.extend(mine.entries);
                next.entries
                    .sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
                tx.insert(&self.history, undo_key(version), next.encode())?;
                with_mine = Some(next);
            }
            let pending = Pending {
                version,
                meta: meta.to_vec(),
            };
            tx.insert(&self.history, KEY_PENDING, pending.encode())?;
            Ok(())
        };
        if let Err(e) = made() {
            return Ok(Some(Outcome::Failed(e)));
        }
        match tx.commit() {
            // The version's last record (step 3) is durable after this one: its handle, which
            // the caller waits on or drops, covers both.
            Ok(durability) => {
                durability.into_iter().for_each(Durability::release);
                if let Some(next) = with_mine {
                    *undo = next;
                }
                Ok(None)
            }
            Err(e) if e.is_retryable() => Ok(Some(Outcome::Retry(Some(e)))),
            Err(e) => {
                // Unless the batch was refused as input, the record may have been logged:
                // only a reopen knows.
                if super::breaks(&e) {
                    state.broken = Some(e.to_string());
                    return Err(e.into());
                }
                Ok(Some(Outcome::Failed(e.into())))
            }
        }
    }
}

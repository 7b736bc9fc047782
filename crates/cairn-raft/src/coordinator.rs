//! The coordinator of writes across shards: routes a write's keys to their shards by key path
//! ([`cairn_proof::ShardMap`]), sends a write that touches one shard as one
//! [`Command::Write`], and runs two-phase commit (`crate::twopc`) for one that touches more.
//!
//! Owns: [`Coordinator`], [`ShardWriter`] (how it reaches a shard's Raft group), [`Outcome`].
//! May call: `command`, `format`, `node` (its errors), `cairn_proof`. Must never touch: a
//! ledger (it acts only through the shards' logs).
//!
//! The protocol, for a write touching shards `s₀ < s₁ < …` (the primary is `s₀`):
//!
//! 1. **Prepare** on every shard at once: each checks its expectations and holds its keys
//!    (its record durable on a quorum of that shard before it answers).
//! 2. **Decide at the primary**: `Commit` if every shard prepared, else `Abort`. The primary's
//!    first decision is the transaction's (a resolver's `Abort` may come first: then the
//!    coordinator's `Commit` answers `Decided { commit: false }` and it aborts).
//! 3. **Tell the others** what the primary decided; each makes or drops its writes and
//!    releases its keys.
//!
//! Each step is idempotent (a repeated command answers what the first did), so a step whose
//! answer was lost is sent again, up to the retry deadline. A coordinator that stops between
//! steps leaves keys held; [`Coordinator::resolve`], run by anyone for a transaction that has
//! stayed prepared, decides it at its primary (abort unless decided) and tells the others: no
//! transaction is ever half applied, and none stays held once resolved.
//!
//! Bounds: a cross-shard write costs three rounds of proposals (prepare, decide, tell), each a
//! Raft commit on the shards it touches, the first and last in parallel; a single-shard write
//! one. Retries end at [`Coordinator::retry_for`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_proof::ShardMap;

use crate::command::{Command, Expectation, Response, Write};
use crate::format::PreparedTx;
use crate::node::Error;

/// How a coordinator reaches shards: each call goes to the shard's Raft group through its
/// leader (finding it is the implementation's business).
pub trait ShardWriter: Send + Sync {
    /// Proposes `command` to shard `shard` and waits until it is committed and applied: what
    /// applying it answered.
    ///
    /// Errors: [`Error::Unknown`] (or another [`Error`]) when the outcome is not known.
    fn propose(
        &self,
        shard: u32,
        command: Command,
    ) -> impl Future<Output = Result<Response, Error>> + Send;

    /// The transactions prepared and not decided on shard `shard`, with their records, read
    /// linearizably.
    fn prepared(
        &self,
        shard: u32,
    ) -> impl Future<Output = Result<Vec<(String, PreparedTx)>, Error>> + Send;
}

/// What a write through a [`Coordinator`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Made: the version each shard made, as `(shard, version)` (a shard whose part was
    /// decided but whose answer was lost is left out: [`Coordinator::resolve`] finishes it).
    Committed {
        /// The versions made.
        versions: Vec<(u32, u64)>,
        /// The transaction's id, for a write across shards.
        tx: Option<String>,
    },
    /// Every expectation held and there was nothing to write.
    Unchanged,
    /// Expectation `index` (of the write's list) did not hold: nothing was written.
    Conflict {
        /// The index of a failed expectation.
        index: usize,
    },
    /// A key is held by transaction `tx`, not decided yet: nothing was written.
    Locked {
        /// The transaction holding it.
        tx: String,
    },
    /// The write can never apply: nothing was written.
    Refused {
        /// Why.
        reason: String,
    },
    /// The transaction across shards was aborted (a shard did not answer its prepare, or a
    /// resolver aborted it first): nothing was written.
    Aborted {
        /// Why.
        reason: String,
    },
}

/// One shard's part of a write: its expectations (with their indexes in the write's list)
/// and its writes.
#[derive(Default)]
struct Part {
    expects: Vec<(usize, Expectation)>,
    writes: Vec<Write>,
}

/// Routes writes to shards and runs two-phase commit for those across shards.
pub struct Coordinator<W> {
    map: ShardMap,
    writer: W,
    name: String,
    next: AtomicU64,
    retry_for: Duration,
}

impl<W: ShardWriter> Coordinator<W> {
    /// A coordinator over the shards of `map`, reached through `writer`. `name` makes its
    /// transaction ids unique: no two coordinators of a cluster may share one, ever (a random
    /// one per process start will do); at most 40 bytes.
    pub fn new(map: ShardMap, writer: W, name: impl Into<String>) -> Coordinator<W> {
        let mut name: String = name.into();
        name.truncate(40);
        Coordinator {
            map,
            writer,
            name,
            next: AtomicU64::new(0),
            retry_for: Duration::from_secs(5),
        }
    }

    /// How long a step of the protocol is sent again while its answer is lost (default 5 s).
    pub fn retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// The shards' map.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The shards' writer.
    pub fn writer(&self) -> &W {
        &self.writer
    }

    /// Writes `writes` if every one of `expects` holds, as one version on each shard touched,
    /// atomically across them.
    ///
    /// Errors: [`Error::Unknown`] (or the writer's error) when the outcome is not known: a
    /// single-shard write whose answer was lost, or a transaction whose primary's decision was
    /// not learned (a resolver finishes it; read before retrying).
    pub async fn transact(
        &self,
        expects: Vec<Expectation>,
        writes: Vec<Write>,
        meta: Vec<u8>,
    ) -> Result<Outcome, Error> {
        let mut parts: BTreeMap<u32, Part> = BTreeMap::new();
        for (i, e) in expects.into_iter().enumerate() {
            let shard = self.map.shard_of(&e.key);
            parts.entry(shard).or_default().expects.push((i, e));
        }
        for w in writes {
            let shard = self.map.shard_of(&w.key);
            parts.entry(shard).or_default().writes.push(w);
        }
        if parts.len() <= 1 {
            let (shard, part) = parts.pop_first().unwrap_or((0, Part::default()));
            return self.single(shard, part, meta).await;
        }
        self.across(parts, meta).await
    }

    async fn single(&self, shard: u32, part: Part, meta: Vec<u8>) -> Result<Outcome, Error> {
        let indexes: Vec<usize> = part.expects.iter().map(|(i, _)| *i).collect();
        let command = Command::Write {
            expects: part.expects.into_iter().map(|(_, e)| e).collect(),
            writes: part.writes,
            meta,
            prove: false,
        };
        Ok(match self.writer.propose(shard, command).await? {
            Response::Committed { version, .. } => Outcome::Committed {
                versions: vec![(shard, version)],
                tx: None,
            },
            Response::Unchanged { .. } => Outcome::Unchanged,
            Response::Conflict { index } => Outcome::Conflict {
                index: indexes.get(index).copied().unwrap_or(index),
            },
            Response::Locked { tx } => Outcome::Locked { tx },
            Response::Refused { reason } => Outcome::Refused { reason },
            other => unexpected(&other)?,
        })
    }

    async fn across(&self, parts: BTreeMap<u32, Part>, meta: Vec<u8>) -> Result<Outcome, Error> {
        let shards: Vec<u32> = parts.keys().copied().collect();
        let primary = shards[0];
        let tx = format!(
            "{}-{}",
            self.name,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        // Phase one, on every shard at once.
        let prepares = parts.iter().map(|(shard, part)| {
            let command = Command::Prepare {
                tx: tx.clone(),
                primary,
                shards: shards.clone(),
                expects: part.expects.iter().map(|(_, e)| e.clone()).collect(),
                writes: part.writes.clone(),
                meta: meta.clone(),
            };
            self.retrying(*shard, command)
        });
        let answers = futures_util::future::join_all(prepares).await;
        let mut refusal: Option<Outcome> = None;
        let mut lost = None;
        for ((shard, part), answer) in parts.iter().zip(answers) {
            let verdict = match answer {
                Ok(Response::Prepared { .. }) => continue,
                Ok(Response::Conflict { index }) => Outcome::Conflict {
                    index: part.expects.get(index).map_or(index, |(i, _)| *i),
                },
                Ok(Response::Locked { tx }) => Outcome::Locked { tx },
                Ok(Response::Refused { reason }) => Outcome::Refused { reason },
                Ok(Response::Decided { .. }) => Outcome::Aborted {
                    reason: format!("shard {shard} had decided the transaction already"),
                },
                Ok(other) => unexpected(&other)?,
                Err(e) => {
                    lost = Some(format!("shard {shard} did not answer its prepare: {e}"));
                    continue;
                }
            };
            refusal.get_or_insert(verdict);
        }
        // Phase two: decide at the primary, then tell the others. A decision whose answer
        // never came may have been made (a commit applied, its answer lost): unknown.
        let commit = refusal.is_none() && lost.is_none();
        let decided = (self.decide(primary, &tx, commit).await).map_err(|e| {
            Error::Unknown(format!(
                "transaction {tx:?}: the primary shard {primary}'s decision was not learned: {e}"
            ))
        })?;
        let mut versions = Vec::new();
        if let Some(v) = decided.1 {
            versions.push((primary, v));
        }
        for &shard in &shards[1..] {
            // A shard that does not answer keeps its keys held until a resolver tells it.
            if let Ok((_, Some(v))) = self.decide(shard, &tx, decided.0).await {
                versions.push((shard, v));
            }
        }
        Ok(match (decided.0, refusal, lost) {
            (true, _, _) => Outcome::Committed {
                versions,
                tx: Some(tx),
            },
            (false, Some(refusal), _) => refusal,
            (false, None, Some(reason)) => Outcome::Aborted { reason },
            (false, None, None) => Outcome::Aborted {
                reason: "a resolver aborted the transaction first".into(),
            },
        })
    }

    /// Sends shard `shard` a decision on `tx` (`commit` or not): the decision it holds (its
    /// first), and the version the commit made if it made one now.
    async fn decide(
        &self,
        shard: u32,
        tx: &str,
        commit: bool,
    ) -> Result<(bool, Option<u64>), Error> {
        let command = if commit {
            Command::Commit { tx: tx.into() }
        } else {
            Command::Abort { tx: tx.into() }
        };
        match self.retrying(shard, command).await? {
            Response::Committed { version, .. } => Ok((true, Some(version))),
            Response::Unchanged { .. } => Ok((true, None)),
            Response::Decided { commit } => Ok((commit, None)),
            Response::Refused { reason } => Err(Error::Raft(format!(
                "shard {shard} refused the decision on {tx:?}: {reason}"
            ))),
            other => unexpected(&other),
        }
    }

    /// Proposes `command` (idempotent: a step of the protocol) to `shard`, again while its
    /// answer is lost, until [`Coordinator::retry_for`] has passed.
    async fn retrying(&self, shard: u32, command: Command) -> Result<Response, Error> {
        let deadline = Instant::now() + self.retry_for;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.writer.propose(shard, command.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// Decides, at its primary, transaction `tx` found prepared with `record` (abort, unless
    /// the primary decided it already), and tells every shard it touches: whether it was
    /// committed. Run it for a transaction that has stayed prepared longer than its
    /// coordinator could need (a coordinator still running sees the abort and aborts too).
    ///
    /// Errors: a shard's answer lost past [`Coordinator::retry_for`] (run it again).
    pub async fn resolve(&self, tx: &str, record: &PreparedTx) -> Result<bool, Error> {
        let (commit, _) = self.decide(record.primary, tx, false).await?;
        for &shard in record.shards.iter().filter(|s| **s != record.primary) {
            self.decide(shard, tx, commit).await?;
        }
        Ok(commit)
    }

    /// The transactions prepared and not decided on `shard`, with their records.
    ///
    /// Errors: the writer's.
    pub async fn prepared(&self, shard: u32) -> Result<Vec<(String, PreparedTx)>, Error> {
        self.writer.prepared(shard).await
    }
}

fn unexpected<T>(r: &Response) -> Result<T, Error> {
    Err(Error::Raft(format!(
        "a shard answered {r:?}, which no step expects"
    )))
}

//! A linearizability checker for histories of operations on a key-value store, for the
//! replication tests: given what the clients saw (when each operation was invoked, when it
//! answered and what it answered), it decides whether one order of all the operations, which
//! respects real time, explains every answer under a plain sequential key-value store.
//!
//! Owns: the history ([`History`], [`Operation`], [`Op`], [`Ret`], [`Response`]), the check
//! ([`check`], [`check_with`], [`Options`], [`Outcome`], [`Violation`], [`Exhausted`]) and the
//! [`Recorder`] that builds a history from live clients. May call: `std` only. Must never
//! touch: Raft, the ledger, storage, the network: it judges what a test recorded, nothing else.
//!
//! # What is checked
//!
//! - **Model.** A map from keys to values, every key absent at first (or as
//!   [`Options::initial`] says). [`Op::Get`] answers the key's value; [`Op::Put`] sets or
//!   deletes it; [`Op::Cas`] sets it if it holds `expect` and answers whether it did (a failed
//!   Cas changes nothing); [`Op::Txn`] applies its writes, in order, if every expectation holds
//!   and answers whether it did.
//! - **Real time.** Operation `a` must come before `b` when `a` answered strictly before `b`
//!   was invoked (`a.response_ns < b.invoke_ns`); equal times count as overlapping.
//! - **Unknown outcomes.** An operation without a [`Response`] (a timeout, a killed client)
//!   answered at +∞: it may have taken effect at any point after its invocation, or never, and
//!   its answer is whatever the model gives. (Never is the same as last of all, so it suffices
//!   to place it anywhere after its invocation.)
//!
//! # Algorithm
//!
//! Operations are split into partitions: those on one key, or, when a [`Op::Txn`] touches
//! several keys, the connected components of keys touched together. A history is linearizable
//! iff each partition is (P-compositionality: Horn and Kroening, "Faster linearizability
//! checking via P-compositionality", 2015). Each partition is searched as by Wing and Gong, with
//! Lowe's memo ("Testing for linearizability", 2017), after Porcupine: the invocations and
//! responses sorted by time form a linked list; the search linearizes the first operation it
//! can among those invoked before the first response left in the list, lifts it out of the
//! list and starts again from the head; reaching that response means the prefix chosen is
//! wrong, so it undoes the last choice and tries the next candidate. Three refinements, each
//! argued where it is coded (the private `Search` and `Memo`):
//!
//! - the memo keeps the configurations (operations linearized, model state) the search failed
//!   from, and refuses a configuration that has one of them plus more operations of unknown
//!   outcome (those are optional, so that cannot help);
//! - an observer (a Get, or a failed Cas or Txn) whose answer fits the current state is
//!   linearized at once, its alternatives never tried: it changes nothing, so a linearization
//!   that places it later also works with it moved first;
//! - operations of unknown outcome are tried after the completed ones, and need no place in the
//!   end: the search stops once every completed operation is linearized.
//!
//! # Bounds and costs
//!
//! - **CPU.** At most [`Options::steps_max`] search steps per partition (a step looks at one
//!   node of the list, tries one operation, or undoes one), each `O(c/64 + k + a × u/64)` for
//!   `c` completed and `u` unknown-outcome operations and `k` keys in the partition, and `a`
//!   memo sets under one key (the memo key is hashed and compared), plus `O(N log N)` to sort
//!   and partition a history of `N` operations. A search that does not end in budget yields
//!   [`Outcome::Unknown`], never a hang; the whole check does at most
//!   `partitions × steps_max` steps.
//! - **Memory.** The memo of one partition is estimated at `8 × (c/64 + k + u/64) + 80` bytes
//!   a configuration and capped at [`Options::memo_bytes_max`] (it is freed before the next
//!   partition); the rest is `O(N)` plus the history's own keys and values.
//! - **A sketch.** 10,000 operations on 100 keys are 100 partitions of about 100 operations;
//!   with 16 clients about 16 overlap, so a linearizable history needs some 16 steps an
//!   operation when no choice is undone: a few hundred thousand steps of well under a
//!   microsecond, tens of milliseconds (measured: 9 to 18 ms on a loaded 2-core machine at the
//!   test profile's `opt-level = 1`; the same 10,000 on one key, 0.25 s in release).
//!
//! # Example
//!
//! ```
//! use cairn_raft::lincheck::{check, History, Op, Operation, Outcome, Ret};
//!
//! let x = b"x".to_vec();
//! let put = Op::Put { key: x.clone(), value: Some(b"1".to_vec()) };
//! let get = Op::Get { key: x };
//! // Client 1 writes x = 1 in [0, 10] ns; client 2 then reads x in [20, 30] ns and sees nothing.
//! let history = History::new(vec![
//!     Operation::completed(1, 0, 10, put, Ret::Put),
//!     Operation::completed(2, 20, 30, get, Ret::Get(None)),
//! ])?;
//! match check(&history) {
//!     Outcome::NotLinearizable(violation) => assert_eq!(violation.stuck_op, 1),
//!     other => panic!("a stale read was accepted: {other}"),
//! }
//! # Ok::<(), cairn_raft::lincheck::HistoryError>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// The default [`Options::steps_max`]: search steps allowed per partition.
pub const STEPS_MAX_DEFAULT: u64 = 10_000_000;

/// The default [`Options::memo_bytes_max`]: 1 GiB of memo per partition.
pub const MEMO_BYTES_MAX_DEFAULT: u64 = 1 << 30;

/// What one memo entry costs beyond its words: the boxed slice's pointer and length in the
/// table, the allocator's header, the table's control byte and slack.
const MEMO_ENTRY_OVERHEAD_BYTES: u64 = 80;

/// Operations listed by [`Violation::explain`] at most, so that a failing test prints a page,
/// not a book.
const EXPLAIN_OPERATIONS_MAX: usize = 200;

/// Operations of a [`Violation::longest_prefix`] shown in its message at most (the last ones).
const PREFIX_SHOWN_MAX: usize = 16;

/// Bytes of a key or value shown in messages at most; longer ones are cut.
const DISPLAY_BYTES_MAX: usize = 48;

/// A key and the value it must hold, or get (`None`: absent).
pub type KeyValue = (Vec<u8>, Option<Vec<u8>>);

/// What a client asked the store to do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Reads `key`; answers [`Ret::Get`] with its value.
    Get {
        /// The key read.
        key: Vec<u8>,
    },
    /// Sets `key` to `value` (`None` deletes it); answers [`Ret::Put`].
    Put {
        /// The key written.
        key: Vec<u8>,
        /// The new value; `None` deletes the key.
        value: Option<Vec<u8>>,
    },
    /// Sets `key` to `value` if it holds `expect`; answers [`Ret::Cas`]: whether it did.
    Cas {
        /// The key compared and written.
        key: Vec<u8>,
        /// The value the key must hold; `None`: it must be absent.
        expect: Option<Vec<u8>>,
        /// The new value; `None` deletes the key.
        value: Option<Vec<u8>>,
    },
    /// Applies `writes`, in order, if every key of `expects` holds its value, all at once;
    /// answers [`Ret::Txn`]: whether it did. A failed transaction changes nothing.
    Txn {
        /// Keys that must hold these values (`None`: be absent); empty for a blind write.
        expects: Vec<KeyValue>,
        /// The writes, in order: a later write of a key replaces an earlier one.
        writes: Vec<KeyValue>,
    },
}

impl Op {
    /// Every key the operation reads or writes, in order, with repeats.
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Op::Get { key } | Op::Put { key, .. } | Op::Cas { key, .. } => vec![key.as_slice()],
            Op::Txn { expects, writes } => expects
                .iter()
                .chain(writes)
                .map(|(key, _)| key.as_slice())
                .collect(),
        }
    }

    /// Whether `ret` is the kind of answer this operation gives ([`Ret::Get`] for a
    /// [`Op::Get`], and so on).
    pub fn answers_with(&self, ret: &Ret) -> bool {
        matches!(
            (self, ret),
            (Op::Get { .. }, Ret::Get(_))
                | (Op::Put { .. }, Ret::Put)
                | (Op::Cas { .. }, Ret::Cas(_))
                | (Op::Txn { .. }, Ret::Txn(_))
        )
    }
}

/// What the store answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ret {
    /// A [`Op::Get`]'s value (`None`: the key was absent).
    Get(Option<Vec<u8>>),
    /// A [`Op::Put`] was done.
    Put,
    /// Whether a [`Op::Cas`] found its expected value and wrote.
    Cas(bool),
    /// Whether a [`Op::Txn`]'s expectations held and it wrote.
    Txn(bool),
}

/// When an operation answered and what.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Response {
    /// When the client got the answer, in nanoseconds on the history's clock; not before the
    /// operation's `invoke_ns`.
    pub response_ns: u64,
    /// The answer, of the operation's kind.
    pub ret: Ret,
}

/// One operation of a history: who invoked what, when, and what came back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The client that invoked it (used in messages only).
    pub client: u64,
    /// When it was invoked, in nanoseconds on the history's clock.
    pub invoke_ns: u64,
    /// What it asked.
    pub op: Op,
    /// When and what it answered; `None` if its outcome is unknown (a timeout, a killed
    /// client): then it may have taken effect at any time after `invoke_ns`, or never.
    pub response: Option<Response>,
}

impl Operation {
    /// An operation that answered `ret` at `response_ns`.
    pub fn completed(client: u64, invoke_ns: u64, response_ns: u64, op: Op, ret: Ret) -> Self {
        let response = Some(Response { response_ns, ret });
        Operation {
            client,
            invoke_ns,
            op,
            response,
        }
    }

    /// An operation whose outcome is unknown.
    pub fn unknown(client: u64, invoke_ns: u64, op: Op) -> Self {
        Operation {
            client,
            invoke_ns,
            op,
            response: None,
        }
    }
}

/// Why a list of operations is not a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryError {
    /// Operation `index` answered before it was invoked.
    ResponseBeforeInvoke {
        /// The operation's place in the list.
        index: usize,
        /// Its invocation time.
        invoke_ns: u64,
        /// Its (earlier) response time.
        response_ns: u64,
    },
    /// Operation `index` answered with the wrong kind of [`Ret`] (say a [`Ret::Cas`] for a
    /// [`Op::Get`]).
    RetMismatch {
        /// The operation's place in the list.
        index: usize,
    },
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::ResponseBeforeInvoke {
                index,
                invoke_ns,
                response_ns,
            } => write!(
                f,
                "operation {index} answered at {response_ns} ns, before its invocation at \
                 {invoke_ns} ns"
            ),
            HistoryError::RetMismatch { index } => {
                write!(
                    f,
                    "operation {index} answered with another operation's kind of result"
                )
            }
        }
    }
}

impl Error for HistoryError {}

/// A list of operations, each answered no earlier than invoked and with its own kind of
/// result. The order of the list does not matter to the check; reports name operations by
/// their place in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    operations: Vec<Operation>,
}

impl History {
    /// Makes a history of `operations`, or says which one is malformed.
    pub fn new(operations: Vec<Operation>) -> Result<Self, HistoryError> {
        for (index, operation) in operations.iter().enumerate() {
            validate(index, operation)?;
        }
        Ok(History { operations })
    }

    /// The operations, in the order given.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// The operations, giving up the history.
    pub fn into_operations(self) -> Vec<Operation> {
        self.operations
    }
}

impl TryFrom<Vec<Operation>> for History {
    type Error = HistoryError;

    fn try_from(operations: Vec<Operation>) -> Result<Self, HistoryError> {
        History::new(operations)
    }
}

fn validate(index: usize, operation: &Operation) -> Result<(), HistoryError> {
    let Some(response) = &operation.response else {
        return Ok(());
    };
    if response.response_ns < operation.invoke_ns {
        return Err(HistoryError::ResponseBeforeInvoke {
            index,
            invoke_ns: operation.invoke_ns,
            response_ns: response.response_ns,
        });
    }
    if !operation.op.answers_with(&response.ret) {
        return Err(HistoryError::RetMismatch { index });
    }
    Ok(())
}

/// How a check runs: its budgets and the store's initial contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Search steps allowed per partition before giving up with [`Outcome::Unknown`]
    /// (default [`STEPS_MAX_DEFAULT`]). A step looks at one invocation or response, tries one
    /// operation, or undoes one.
    pub steps_max: u64,
    /// Estimated bytes of memo allowed per partition before giving up with
    /// [`Outcome::Unknown`] (default [`MEMO_BYTES_MAX_DEFAULT`]).
    pub memo_bytes_max: u64,
    /// The store's contents before the history; keys not here start absent.
    pub initial: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            steps_max: STEPS_MAX_DEFAULT,
            memo_bytes_max: MEMO_BYTES_MAX_DEFAULT,
            initial: BTreeMap::new(),
        }
    }
}

/// The verdict on a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Some order of the operations, respecting real time, explains every answer.
    Linearizable,
    /// No order does; the first partition (by its first operation) found to fail.
    NotLinearizable(Violation),
    /// No partition failed, but one ran out of budget before its search ended.
    Unknown(Exhausted),
}

impl Outcome {
    /// Whether the verdict is [`Outcome::Linearizable`].
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Outcome::Linearizable)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Linearizable => write!(f, "linearizable"),
            Outcome::NotLinearizable(violation) => write!(f, "{violation}"),
            Outcome::Unknown(exhausted) => write!(f, "{exhausted}"),
        }
    }
}

/// A partition with no linearization, and how far the search got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The partition's keys, sorted.
    pub keys: Vec<Vec<u8>>,
    /// The partition's operations, as places in the history, ascending.
    pub operations: Vec<usize>,
    /// The longest linearization of a part of the partition that the search found, in order
    /// (places in the history): it explains every answer in it.
    pub longest_prefix: Vec<usize>,
    /// The completed operation whose response the search reached, right after
    /// `longest_prefix`, without being able to place it: the answer nothing explains.
    pub stuck_op: usize,
}

impl Violation {
    /// A page that shows the partition's operations (at most 200, by invocation time), each
    /// with its place in `longest_prefix` and the stuck one marked. `history` must be the one
    /// checked; operations it lacks are left out.
    pub fn explain(&self, history: &History) -> String {
        let mut places: HashMap<usize, usize> = HashMap::new();
        for (place, index) in self.longest_prefix.iter().enumerate() {
            places.insert(*index, place + 1);
        }
        let mut shown: Vec<(usize, &Operation)> = self
            .operations
            .iter()
            .filter_map(|index| history.operations().get(*index).map(|op| (*index, op)))
            .collect();
        shown.sort_by_key(|(index, op)| (op.invoke_ns, *index));
        let mut page = format!("{self}\n");
        for (index, operation) in shown.iter().take(EXPLAIN_OPERATIONS_MAX) {
            let mark = match places.get(index) {
                Some(place) => format!("prefix #{place}"),
                None if *index == self.stuck_op => "<- stuck".to_string(),
                None => String::new(),
            };
            page.push_str(&format!("  op {index:>6}  {operation}  {mark}\n"));
        }
        if shown.len() > EXPLAIN_OPERATIONS_MAX {
            page.push_str(&format!(
                "  ... {} more\n",
                shown.len() - EXPLAIN_OPERATIONS_MAX
            ));
        }
        page
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not linearizable on keys ")?;
        write_keys(f, &self.keys)?;
        let prefix = &self.longest_prefix;
        let cut = prefix.len().saturating_sub(PREFIX_SHOWN_MAX);
        write!(
            f,
            " ({} operations): the longest linearizable prefix found is [",
            self.operations.len()
        )?;
        if cut > 0 {
            write!(f, "{cut} operations, then ")?;
        }
        for (i, index) in prefix[cut..].iter().enumerate() {
            let comma = if i == 0 { "" } else { ", " };
            write!(f, "{comma}{index}")?;
        }
        write!(
            f,
            "]; operation {} answered and cannot be placed after it",
            self.stuck_op
        )
    }
}

/// Which budget ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Budget {
    /// [`Options::steps_max`].
    Steps,
    /// [`Options::memo_bytes_max`].
    MemoBytes,
}

/// A partition whose search ran out of budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// The partition's keys, sorted.
    pub keys: Vec<Vec<u8>>,
    /// The partition's operations, as places in the history, ascending.
    pub operations: Vec<usize>,
    /// The budget that ran out.
    pub budget: Budget,
    /// The steps taken in the partition.
    pub steps: u64,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown: the search on keys ")?;
        write_keys(f, &self.keys)?;
        write!(
            f,
            " ({} operations) ran out of its {:?} budget after {} steps",
            self.operations.len(),
            self.budget,
            self.steps
        )
    }
}

/// Checks `history` with the default [`Options`]: every key absent at first, at most
/// [`STEPS_MAX_DEFAULT`] steps and [`MEMO_BYTES_MAX_DEFAULT`] bytes of memo per partition.
pub fn check(history: &History) -> Outcome {
    check_with(history, &Options::default())
}

/// Checks `history` with `options`. Partitions are searched in the order of their first
/// operation; the first that fails is reported, else the first that ran out of budget.
pub fn check_with(history: &History, options: &Options) -> Outcome {
    let operations = history.operations();
    let mut exhausted = None;
    for partition in partitions(operations) {
        let compiled = Compiled::new(operations, &partition, &options.initial);
        match Search::new(&compiled).run(options) {
            End::Linearizable => {}
            End::Stuck { prefix, stuck } => {
                let global = |local: usize| compiled.history_index[local];
                return Outcome::NotLinearizable(Violation {
                    longest_prefix: prefix.into_iter().map(global).collect(),
                    stuck_op: global(stuck),
                    keys: partition.keys,
                    operations: partition.ops,
                });
            }
            End::Exhausted { budget, steps } => {
                if exhausted.is_none() {
                    let keys = partition.keys;
                    let operations = partition.ops;
                    exhausted = Some(Exhausted {
                        keys,
                        operations,
                        budget,
                        steps,
                    });
                }
            }
        }
    }
    match exhausted {
        Some(exhausted) => Outcome::Unknown(exhausted),
        None => Outcome::Linearizable,
    }
}

/// Operations that share keys, directly or through others.
struct Partition {
    /// Places in the history, ascending.
    ops: Vec<usize>,
    /// Sorted, without repeats.
    keys: Vec<Vec<u8>>,
}

/// Splits the operations into partitions (connected components of the keys touched together),
/// ordered by their first operation. An operation touching no key (an empty [`Op::Txn`]) is a
/// partition of its own.
fn partitions(operations: &[Operation]) -> Vec<Partition> {
    let mut key_ids: HashMap<&[u8], usize> = HashMap::new();
    let mut sets = DisjointSets::default();
    let mut op_key: Vec<Option<usize>> = Vec::with_capacity(operations.len());
    for operation in operations {
        let mut first = None;
        for key in operation.op.keys() {
            let id = *key_ids.entry(key).or_insert_with(|| sets.add());
            match first {
                None => first = Some(id),
                Some(first) => sets.union(first, id),
            }
        }
        op_key.push(first);
    }
    let mut by_root: HashMap<usize, usize> = HashMap::new();
    let mut result: Vec<Partition> = Vec::new();
    for (index, key) in op_key.iter().enumerate() {
        let slot = match key {
            Some(key) => *by_root.entry(sets.find(*key)).or_insert(result.len()),
            None => result.len(),
        };
        if slot == result.len() {
            result.push(Partition {
                ops: Vec::new(),
                keys: Vec::new(),
            });
        }
        result[slot].ops.push(index);
    }
    for (key, id) in key_ids {
        if let Some(slot) = by_root.get(&sets.find(id)) {
            result[*slot].keys.push(key.to_vec());
        }
    }
    for partition in &mut result {
        partition.keys.sort();
    }
    result
}

/// Union-find over key ids, by size with path halving.
#[derive(Default)]
struct DisjointSets {
    parent: Vec<usize>,
    size: Vec<usize>,
}

impl DisjointSets {
    fn add(&mut self) -> usize {
        self.parent.push(self.parent.len());
        self.size.push(1);
        self.parent.len() - 1
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        let (big, small) = if self.size[a] >= self.size[b] {
            (a, b)
        } else {
            (b, a)
        };
        self.parent[small] = big;
        self.size[big] += self.size[small];
    }
}

/// An operation of a partition as the search applies it: keys are indices into the
/// partition's state, values are interned ids (0: absent), answers are `None` when unknown.
#[derive(Debug)]
enum Step {
    Get {
        key: usize,
        value: u64,
    },
    Put {
        key: usize,
        value: u64,
    },
    Cas {
        key: usize,
        expect: u64,
        value: u64,
        ret: Option<bool>,
    },
    Txn {
        expects: Box<[(usize, u64)]>,
        writes: Box<[(usize, u64)]>,
        ret: Option<bool>,
    },
}

impl Step {
    /// Whether the step is a completed one that never changes the state: a Get, or a Cas or
    /// Txn known to have failed.
    fn is_observer(&self) -> bool {
        matches!(
            self,
            Step::Get { .. }
                | Step::Cas {
                    ret: Some(false),
                    ..
                }
                | Step::Txn {
                    ret: Some(false),
                    ..
                }
        )
    }

    /// Applies the step to `state` if the model allows its answer there, logging each old
    /// value to `undo`; leaves both as they were and returns false if not.
    fn apply(&self, state: &mut [u64], undo: &mut Vec<(usize, u64)>) -> bool {
        match self {
            Step::Get { key, value } => state[*key] == *value,
            Step::Put { key, value } => {
                write(state, undo, *key, *value);
                true
            }
            Step::Cas {
                key,
                expect,
                value,
                ret,
            } => {
                let holds = state[*key] == *expect;
                apply_conditional(holds, *ret, || write(state, undo, *key, *value))
            }
            Step::Txn {
                expects,
                writes,
                ret,
            } => {
                let holds = expects.iter().all(|(key, value)| state[*key] == *value);
                apply_conditional(holds, *ret, || {
                    for (key, value) in writes.iter() {
                        write(state, undo, *key, *value);
                    }
                })
            }
        }
    }
}

/// A conditional write whose condition `holds` or not: allowed unless the known answer
/// `ret` disagrees; writes if the condition holds and the step is allowed.
fn apply_conditional(holds: bool, ret: Option<bool>, write: impl FnOnce()) -> bool {
    if ret.is_some_and(|ret| ret != holds) {
        return false;
    }
    if holds {
        write();
    }
    true
}

fn write(state: &mut [u64], undo: &mut Vec<(usize, u64)>, key: usize, value: u64) {
    undo.push((key, state[key]));
    state[key] = value;
}

/// A partition ready to search: its steps, their times, and the initial state.
struct Compiled {
    /// One per searched operation (unknown-outcome Gets are left out: they constrain nothing).
    steps: Vec<Step>,
    invoke_ns: Vec<u64>,
    /// `None` for an unknown outcome.
    response_ns: Vec<Option<u64>>,
    /// The searched operation's place in the history.
    history_index: Vec<usize>,
    /// The step's bit among the completed steps, or among those of unknown outcome.
    bit: Vec<usize>,
    completed_count: usize,
    unknown_count: usize,
    /// One value id per key of the partition.
    initial: Vec<u64>,
}

impl Compiled {
    fn new(
        operations: &[Operation],
        partition: &Partition,
        initial: &BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> Self {
        let mut interner = Interner::new(&partition.keys);
        let initial_state = partition
            .keys
            .iter()
            .map(|key| interner.value(initial.get(key).map(Vec::as_slice)))
            .collect();
        let mut compiled = Compiled {
            steps: Vec::new(),
            invoke_ns: Vec::new(),
            response_ns: Vec::new(),
            history_index: Vec::new(),
            bit: Vec::new(),
            completed_count: 0,
            unknown_count: 0,
            initial: initial_state,
        };
        for &index in &partition.ops {
            let Some(operation) = operations.get(index) else {
                continue;
            };
            let ret = operation.response.as_ref().map(|response| &response.ret);
            if let Some(step) = interner.step(&operation.op, ret) {
                compiled.steps.push(step);
                compiled.invoke_ns.push(operation.invoke_ns);
                compiled
                    .response_ns
                    .push(operation.response.as_ref().map(|r| r.response_ns));
                compiled.history_index.push(index);
                let count = match operation.response {
                    Some(_) => &mut compiled.completed_count,
                    None => &mut compiled.unknown_count,
                };
                compiled.bit.push(*count);
                *count += 1;
            }
        }
        compiled
    }
}

/// Maps a partition's keys to state indices and its values to small ids.
struct Interner<'h> {
    keys: HashMap<&'h [u8], usize>,
    values: HashMap<&'h [u8], u64>,
}

impl<'h> Interner<'h> {
    fn new(keys: &'h [Vec<u8>]) -> Self {
        let keys = keys
            .iter()
            .enumerate()
            .map(|(i, key)| (key.as_slice(), i))
            .collect();
        Interner {
            keys,
            values: HashMap::new(),
        }
    }

    fn key(&self, key: &[u8]) -> usize {
        // Every key of the partition's operations is one of its keys (see `partitions`).
        let index = self.keys.get(key).copied();
        debug_assert!(index.is_some(), "a key outside its partition");
        index.unwrap_or(0)
    }

    fn value(&mut self, value: Option<&'h [u8]>) -> u64 {
        let Some(value) = value else { return 0 };
        let next = self.values.len() as u64 + 1;
        *self.values.entry(value).or_insert(next)
    }

    fn pair(&mut self, (key, value): &'h KeyValue) -> (usize, u64) {
        (self.key(key), self.value(value.as_deref()))
    }

    /// The step for `op` answered `ret` (`None`: unknown), or `None` for a step that would
    /// constrain nothing (a Get of unknown outcome) or an answer of the wrong kind.
    fn step(&mut self, op: &'h Op, ret: Option<&'h Ret>) -> Option<Step> {
        let step = match (op, ret) {
            (Op::Get { .. }, None) => return None,
            (Op::Get { key }, Some(Ret::Get(value))) => Step::Get {
                key: self.key(key),
                value: self.value(value.as_deref()),
            },
            (Op::Put { key, value }, None | Some(Ret::Put)) => Step::Put {
                key: self.key(key),
                value: self.value(value.as_deref()),
            },
            (Op::Cas { key, expect, value }, None | Some(Ret::Cas(_))) => Step::Cas {
                key: self.key(key),
                expect: self.value(expect.as_deref()),
                value: self.value(value.as_deref()),
                ret: ret_bool(ret),
            },
            (Op::Txn { expects, writes }, None | Some(Ret::Txn(_))) => Step::Txn {
                expects: expects.iter().map(|pair| self.pair(pair)).collect(),
                writes: writes.iter().map(|pair| self.pair(pair)).collect(),
                ret: ret_bool(ret),
            },
            // `History::new` refuses answers of the wrong kind.
            _ => return None,
        };
        Some(step)
    }
}

fn ret_bool(ret: Option<&Ret>) -> Option<bool> {
    match ret {
        Some(Ret::Cas(done) | Ret::Txn(done)) => Some(*done),
        _ => None,
    }
}

/// A node of the search's lists: a sentinel (before the first entry and after the last), an
/// operation's invocation, or its response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    End,
    Call(usize),
    Return(usize),
}

/// The search's two doubly linked lists, from which a step's nodes are lifted when it is
/// linearized and put back, in reverse order, when that is undone (Knuth's dancing links):
///
/// - the invocations and responses of the completed steps, sorted by time (an invocation
///   before a response at the same time: operations that touch count as overlapping);
/// - the invocations of the steps of unknown outcome, sorted by time. They have no response,
///   so they stay candidates to the end; the search tries them only after the completed
///   candidates, since most never need a place.
struct List {
    nodes: Vec<Node>,
    next: Vec<usize>,
    prev: Vec<usize>,
    call_of: Vec<usize>,
    /// `None` for a step of unknown outcome: it has no response node.
    return_of: Vec<Option<usize>>,
}

impl List {
    /// The sentinel of the completed steps' list.
    const COMPLETED: usize = 0;
    /// The sentinel of the unknown-outcome steps' list.
    const UNKNOWN: usize = 1;

    fn new(compiled: &Compiled) -> Self {
        let count = compiled.steps.len();
        let mut completed: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * count);
        let mut unknown: Vec<(u64, u8, usize)> = Vec::new();
        for op in 0..count {
            match compiled.response_ns[op] {
                Some(response_ns) => {
                    completed.push((compiled.invoke_ns[op], 0, op));
                    completed.push((response_ns, 1, op));
                }
                None => unknown.push((compiled.invoke_ns[op], 0, op)),
            }
        }
        completed.sort_unstable();
        unknown.sort_unstable();
        let len = 2 + completed.len() + unknown.len();
        let mut list = List {
            nodes: vec![Node::End; 2],
            next: vec![0; len],
            prev: vec![0; len],
            call_of: vec![0; count],
            return_of: vec![None; count],
        };
        list.chain(Self::COMPLETED, &completed);
        list.chain(Self::UNKNOWN, &unknown);
        list
    }

    /// Appends `events`' nodes and links them in a ring through `sentinel`.
    fn chain(&mut self, sentinel: usize, events: &[(u64, u8, usize)]) {
        let mut last = sentinel;
        for &(_, kind, op) in events {
            let node = self.nodes.len();
            if kind == 0 {
                self.nodes.push(Node::Call(op));
                self.call_of[op] = node;
            } else {
                self.nodes.push(Node::Return(op));
                self.return_of[op] = Some(node);
            }
            self.next[last] = node;
            self.prev[node] = last;
            last = node;
        }
        self.next[last] = sentinel;
        self.prev[sentinel] = last;
    }

    fn remove(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = next;
        self.prev[next] = prev;
    }

    fn restore(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = node;
        self.prev[next] = node;
    }

    fn lift(&mut self, op: usize) {
        self.remove(self.call_of[op]);
        if let Some(node) = self.return_of[op] {
            self.remove(node);
        }
    }

    fn unlift(&mut self, op: usize) {
        if let Some(node) = self.return_of[op] {
            self.restore(node);
        }
        self.restore(self.call_of[op]);
    }
}

/// Where the search looks next. Each configuration is scanned in three passes: the completed
/// observers (Gets, failed Cas and Txn: they change no state), the other completed steps, then
/// those of unknown outcome.
#[derive(Clone, Copy, Debug)]
enum Cursor {
    /// At a node of the completed steps' list, looking for observers.
    Observers(usize),
    /// At a node of the completed steps' list, looking for the other steps.
    Writers(usize),
    /// At a node of the unknown-outcome steps' list, after the completed scan reached the
    /// response of `stuck`: only steps invoked by then are candidates.
    Unknown { node: usize, stuck: usize },
}

/// What the search sees at a cursor.
enum Look {
    /// A step to try.
    Candidate(usize),
    /// A node of another pass.
    Skip,
    /// The pass is over; the next starts here.
    Pass(Cursor),
    /// Every candidate was tried: the response of `stuck` (if any) cannot be passed.
    DeadEnd(Option<usize>),
}

/// A linearized step, where its writes start in the undo log, where the search was, and
/// whether it was forced (an observer: its configuration fails if the step's does).
struct Frame {
    op: usize,
    undo_len: usize,
    at: Cursor,
    forced: bool,
}

/// How one partition's search ended.
enum End {
    Linearizable,
    Stuck { prefix: Vec<usize>, stuck: usize },
    Exhausted { budget: Budget, steps: u64 },
}

/// What trying to linearize one step next did.
enum Tried {
    Linearized,
    /// The model refuses its answer here, or the configuration is known to fail.
    Refused,
    /// An observer whose configuration is known to fail: the current one fails too.
    Fails,
}

/// What undoing failed configurations reached.
enum Unwound {
    /// A step to try the next candidate after: the search was at this cursor.
    At(Cursor),
    /// The empty configuration failed: no linearization exists.
    Root,
    /// The memo is full.
    MemoFull,
}

/// The memo of configurations from which no linearization exists. Keyed by the completed
/// steps linearized and the model state; each key holds the sets of unknown-outcome steps
/// linearized with it, flat (`unknown_words` each) and an antichain: no set contains another.
/// A configuration fails if one with the same key and fewer unknown-outcome steps did, since
/// those steps are optional: any way on from the larger set is a way on from the smaller.
type Memo = HashMap<Box<[u64]>, Vec<u64>, BuildHasherDefault<WordHasher>>;

/// The WGL search of one partition: a depth-first search over configurations (the steps
/// linearized, in order, and the state they leave), whose frames are the steps linearized.
///
/// - **Memo.** A configuration is remembered as failed when every candidate from it was tried
///   (not when it is reached, so that the memo holds only failures, as the containment test
///   of [`Memo`] needs; a configuration cannot recur below itself, having fewer steps).
/// - **Observers.** An observer that is a candidate and whose answer fits the current state is
///   linearized at once and never traded for another candidate (a `forced` frame). Any
///   linearization that places it later still works with it moved first: all its real-time
///   predecessors are placed, and it changes no state. So if the configuration after it fails,
///   so does the one before.
/// - **Unknown outcomes last.** Only the order of trying changes: every candidate is still
///   tried before a configuration counts as failed.
struct Search<'c> {
    compiled: &'c Compiled,
    list: List,
    state: Vec<u64>,
    undo: Vec<(usize, u64)>,
    frames: Vec<Frame>,
    /// One bit per completed step: linearized or not.
    completed_done: Vec<u64>,
    /// One bit per step of unknown outcome: linearized or not.
    unknown_done: Vec<u64>,
    memo: Memo,
    memo_bytes: u64,
    /// The memo key being built: `completed_done` then `state`.
    scratch: Vec<u64>,
    /// Completed steps not yet linearized; the search succeeds at zero.
    completed_left: usize,
    steps: u64,
    /// The deepest dead end: the prefix then and the step whose response stopped it.
    deepest: Option<(Vec<usize>, usize)>,
}

impl<'c> Search<'c> {
    fn new(compiled: &'c Compiled) -> Self {
        Search {
            compiled,
            list: List::new(compiled),
            state: compiled.initial.clone(),
            undo: Vec::new(),
            frames: Vec::with_capacity(compiled.steps.len()),
            completed_done: vec![0; compiled.completed_count.div_ceil(64)],
            unknown_done: vec![0; compiled.unknown_count.div_ceil(64)],
            memo: Memo::default(),
            memo_bytes: 0,
            scratch: Vec::new(),
            completed_left: compiled.completed_count,
            steps: 0,
            deepest: None,
        }
    }

    fn run(mut self, options: &Options) -> End {
        if self.completed_left == 0 {
            return End::Linearizable;
        }
        let mut cursor = self.start();
        loop {
            if self.steps >= options.steps_max {
                return End::Exhausted {
                    budget: Budget::Steps,
                    steps: self.steps,
                };
            }
            self.steps += 1;
            match self.look(cursor) {
                Look::Candidate(op) => match self.try_linearize(op, cursor) {
                    Tried::Linearized if self.completed_left == 0 => return End::Linearizable,
                    Tried::Linearized => {
                        cursor = self.start();
                        continue;
                    }
                    Tried::Refused => {
                        cursor = self.advance(cursor);
                        continue;
                    }
                    Tried::Fails => {}
                },
                Look::Skip => {
                    cursor = self.advance(cursor);
                    continue;
                }
                Look::Pass(next) => {
                    cursor = next;
                    continue;
                }
                Look::DeadEnd(stuck) => self.note_dead_end(stuck),
            }
            match self.unwind(options.memo_bytes_max) {
                Unwound::At(at) => cursor = self.advance(at),
                Unwound::Root => return self.stuck(),
                Unwound::MemoFull => {
                    return End::Exhausted {
                        budget: Budget::MemoBytes,
                        steps: self.steps,
                    }
                }
            }
        }
    }

    fn start(&self) -> Cursor {
        Cursor::Observers(self.list.next[List::COMPLETED])
    }

    fn look(&self, cursor: Cursor) -> Look {
        match cursor {
            Cursor::Observers(node) => match self.list.nodes[node] {
                Node::Call(op) if self.compiled.steps[op].is_observer() => Look::Candidate(op),
                Node::Call(_) => Look::Skip,
                Node::Return(_) | Node::End => {
                    Look::Pass(Cursor::Writers(self.list.next[List::COMPLETED]))
                }
            },
            Cursor::Writers(node) => match self.list.nodes[node] {
                // Observers were all refused in the first pass, and the state is the same.
                Node::Call(op) if self.compiled.steps[op].is_observer() => Look::Skip,
                Node::Call(op) => Look::Candidate(op),
                Node::Return(stuck) => Look::Pass(Cursor::Unknown {
                    node: self.list.next[List::UNKNOWN],
                    stuck,
                }),
                // Unreachable while a completed step is left: its response comes first.
                Node::End => Look::DeadEnd(None),
            },
            Cursor::Unknown { node, stuck } => {
                let limit_ns = self.compiled.response_ns[stuck].unwrap_or(u64::MAX);
                match self.list.nodes[node] {
                    // Invoked no later than `stuck` answered (touching counts as overlapping).
                    Node::Call(op) if self.compiled.invoke_ns[op] <= limit_ns => {
                        Look::Candidate(op)
                    }
                    _ => Look::DeadEnd(Some(stuck)),
                }
            }
        }
    }

    fn advance(&self, cursor: Cursor) -> Cursor {
        match cursor {
            Cursor::Observers(node) => Cursor::Observers(self.list.next[node]),
            Cursor::Writers(node) => Cursor::Writers(self.list.next[node]),
            Cursor::Unknown { node, stuck } => Cursor::Unknown {
                node: self.list.next[node],
                stuck,
            },
        }
    }

    /// Linearizes step `op`, found at `at`, next if the model allows its answer and the
    /// resulting configuration is not known to fail.
    fn try_linearize(&mut self, op: usize, at: Cursor) -> Tried {
        let undo_len = self.undo.len();
        let step = &self.compiled.steps[op];
        if !step.apply(&mut self.state, &mut self.undo) {
            return Tried::Refused;
        }
        let forced = step.is_observer();
        self.flip(op);
        if self.known_to_fail() {
            self.flip(op);
            self.undo_to(undo_len);
            return if forced { Tried::Fails } else { Tried::Refused };
        }
        self.frames.push(Frame {
            op,
            undo_len,
            at,
            forced,
        });
        self.list.lift(op);
        if self.compiled.response_ns[op].is_some() {
            self.completed_left -= 1;
        }
        Tried::Linearized
    }

    /// Remembers the current configuration as failed and undoes it, and so on down through
    /// forced frames (whose parents fail with them), to the first configuration with more
    /// candidates to try.
    fn unwind(&mut self, memo_bytes_max: u64) -> Unwound {
        loop {
            if self.frames.is_empty() {
                return Unwound::Root;
            }
            if !self.remember_failure(memo_bytes_max) {
                return Unwound::MemoFull;
            }
            match self.backtrack() {
                Some(frame) if !frame.forced => return Unwound::At(frame.at),
                Some(_) => {}
                None => return Unwound::Root,
            }
        }
    }

    fn flip(&mut self, op: usize) {
        let bit = self.compiled.bit[op];
        let bits = match self.compiled.response_ns[op] {
            Some(_) => &mut self.completed_done,
            None => &mut self.unknown_done,
        };
        bits[bit / 64] ^= 1 << (bit % 64);
    }

    /// Builds the memo key of the current configuration in `scratch`.
    fn build_key(&mut self) {
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.completed_done);
        self.scratch.extend_from_slice(&self.state);
    }

    /// Whether the memo holds the current configuration or one it contains.
    fn known_to_fail(&mut self) -> bool {
        self.build_key();
        let Some(sets) = self.memo.get(self.scratch.as_slice()) else {
            return false;
        };
        let words = self.unknown_done.len();
        words == 0
            || sets
                .chunks_exact(words)
                .any(|set| is_subset(set, &self.unknown_done))
    }

    /// Adds the current configuration, fully searched, to the memo, dropping the sets it
    /// contains; false if that would pass `memo_bytes_max`.
    fn remember_failure(&mut self, memo_bytes_max: u64) -> bool {
        if self.known_to_fail() {
            return true;
        }
        let words = self.unknown_done.len();
        let set_bytes = 8 * words as u64;
        if let Some(sets) = self.memo.get_mut(self.scratch.as_slice()) {
            let before = sets.len();
            drop_supersets(sets, &self.unknown_done);
            let freed_bytes = 8 * (before - sets.len()) as u64;
            let memo_bytes = self
                .memo_bytes
                .saturating_add(set_bytes)
                .saturating_sub(freed_bytes);
            if memo_bytes > memo_bytes_max {
                return false;
            }
            sets.extend_from_slice(&self.unknown_done);
            self.memo_bytes = memo_bytes;
            return true;
        }
        let entry_bytes = 8 * self.scratch.len() as u64 + set_bytes + MEMO_ENTRY_OVERHEAD_BYTES;
        if self.memo_bytes.saturating_add(entry_bytes) > memo_bytes_max {
            return false;
        }
        self.memo_bytes = self.memo_bytes.saturating_add(entry_bytes);
        let key = self.scratch.clone().into_boxed_slice();
        self.memo.insert(key, self.unknown_done.clone());
        true
    }

    /// Undoes the last linearized step, if any, and returns its frame.
    fn backtrack(&mut self) -> Option<Frame> {
        let frame = self.frames.pop()?;
        self.undo_to(frame.undo_len);
        self.flip(frame.op);
        self.list.unlift(frame.op);
        if self.compiled.response_ns[frame.op].is_some() {
            self.completed_left += 1;
        }
        Some(frame)
    }

    fn undo_to(&mut self, undo_len: usize) {
        while self.undo.len() > undo_len {
            if let Some((key, value)) = self.undo.pop() {
                self.state[key] = value;
            }
        }
    }

    fn note_dead_end(&mut self, stuck: Option<usize>) {
        let Some(stuck) = stuck else { return };
        let deeper = match &self.deepest {
            None => true,
            Some((prefix, _)) => self.frames.len() > prefix.len(),
        };
        if deeper {
            self.deepest = Some((self.frames.iter().map(|f| f.op).collect(), stuck));
        }
    }

    fn stuck(self) -> End {
        match self.deepest {
            Some((prefix, stuck)) => End::Stuck { prefix, stuck },
            None => {
                // Unreachable (the first dead end is noted); name the first completed step.
                let stuck = self.compiled.response_ns.iter().position(Option::is_some);
                End::Stuck {
                    prefix: Vec::new(),
                    stuck: stuck.unwrap_or(0),
                }
            }
        }
    }
}

/// Whether every bit of `small` is set in `large` (slices of equal length).
fn is_subset(small: &[u64], large: &[u64]) -> bool {
    small.iter().zip(large).all(|(s, l)| s & !l == 0)
}

/// Removes from the flat `sets` (each `subset.len()` words) those that contain `subset`.
fn drop_supersets(sets: &mut Vec<u64>, subset: &[u64]) {
    let words = subset.len();
    if words == 0 {
        return;
    }
    let mut kept = 0;
    for index in 0..sets.len() / words {
        let range = index * words..(index + 1) * words;
        if !is_subset(subset, &sets[range.clone()]) {
            sets.copy_within(range, kept * words);
            kept += 1;
        }
    }
    sets.truncate(kept * words);
}

/// A fast hash of memo keys (words): a multiply-rotate per word and a final mix, so that the
/// table's low and high bits both depend on every word. Not for untrusted keys, which these
/// are not: collisions cost time only, the memo compares keys in full.
#[derive(Default)]
struct WordHasher(u64);

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        // The finaliser of MurmurHash3.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.add(word);
    }

    fn write_usize(&mut self, word: usize) {
        self.add(word as u64);
    }
}

/// Names recorders so that an [`OpId`] of one is refused by another.
static RECORDERS_MADE: AtomicU64 = AtomicU64::new(0);

/// Records a history from live clients: [`Recorder::invoke`] before sending an operation,
/// [`Recorder::complete`] (or [`Recorder::fail_unknown`]) after, [`Recorder::history`] at
/// the end. Times are nanoseconds since the recorder was made, on the monotonic clock.
/// Cheap to clone (an `Arc`), and clones share one history; safe to use from many threads.
/// It keeps every operation (about 100 bytes each, plus keys and values) until dropped.
///
/// ```
/// use cairn_raft::lincheck::{check, Op, Recorder, Ret};
///
/// let recorder = Recorder::new();
/// let id = recorder.invoke(7, Op::Get { key: b"x".to_vec() });
/// recorder.complete(id, Ret::Get(None)).expect("a Get answers a Get");
/// assert!(check(&recorder.history()).is_linearizable());
/// ```
#[derive(Clone, Debug)]
pub struct Recorder {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    id: u64,
    start: Instant,
    slots: Mutex<Vec<Slot>>,
}

#[derive(Debug)]
struct Slot {
    operation: Operation,
    /// Completed or given up as unknown: no further answer is taken.
    closed: bool,
}

/// An operation being recorded by a [`Recorder`]; its place in the recorded history is
/// [`OpId::index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId {
    recorder: u64,
    index: usize,
}

impl OpId {
    /// The operation's place in [`Recorder::history`] (what reports name it by).
    pub fn index(self) -> usize {
        self.index
    }
}

/// Why a [`Recorder`] refused an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The id came from another recorder.
    ForeignId(OpId),
    /// The operation was already completed or given up as unknown.
    AlreadyClosed(OpId),
    /// The answer is not of the operation's kind (say a [`Ret::Cas`] for a [`Op::Get`]).
    RetMismatch(OpId),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::ForeignId(id) => {
                write!(f, "operation id {id:?} belongs to another recorder")
            }
            RecordError::AlreadyClosed(id) => {
                write!(f, "operation {} already has an outcome", id.index)
            }
            RecordError::RetMismatch(id) => {
                write!(
                    f,
                    "operation {} answered with another operation's kind of result",
                    id.index
                )
            }
        }
    }
}

impl Error for RecordError {}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// A recorder with an empty history, its clock starting now.
    pub fn new() -> Self {
        let shared = Shared {
            id: RECORDERS_MADE.fetch_add(1, Ordering::Relaxed),
            start: Instant::now(),
            slots: Mutex::new(Vec::new()),
        };
        Recorder {
            shared: Arc::new(shared),
        }
    }

    /// Nanoseconds since the recorder was made (saturating after 584 years).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.shared.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records that `client` invokes `op` now; call it before sending the operation.
    pub fn invoke(&self, client: u64, op: Op) -> OpId {
        let mut slots = self.slots();
        let operation = Operation::unknown(client, self.now_ns(), op);
        slots.push(Slot {
            operation,
            closed: false,
        });
        OpId {
            recorder: self.shared.id,
            index: slots.len() - 1,
        }
    }

    /// Records that operation `id` answered `ret` now; call it after the answer came.
    pub fn complete(&self, id: OpId, ret: Ret) -> Result<(), RecordError> {
        let now_ns = self.now_ns();
        let mut slots = self.slots();
        let slot = open_slot(&mut slots, self.shared.id, id)?;
        if !slot.operation.op.answers_with(&ret) {
            return Err(RecordError::RetMismatch(id));
        }
        // The clock is monotonic; the max only guards the history's invariant.
        let response_ns = now_ns.max(slot.operation.invoke_ns);
        slot.operation.response = Some(Response { response_ns, ret });
        slot.closed = true;
        Ok(())
    }

    /// Records that operation `id`'s outcome is unknown (it timed out, its client died): it
    /// may take effect at any time after its invocation, or never.
    pub fn fail_unknown(&self, id: OpId) -> Result<(), RecordError> {
        let mut slots = self.slots();
        open_slot(&mut slots, self.shared.id, id)?.closed = true;
        Ok(())
    }

    /// The history so far, operations in the order invoked; those still waiting for an answer
    /// count as of unknown outcome.
    pub fn history(&self) -> History {
        let operations = self
            .slots()
            .iter()
            .map(|slot| slot.operation.clone())
            .collect();
        // Every answer was checked (kind, time) when recorded.
        let history = History { operations };
        debug_assert!(History::new(history.operations.clone()).is_ok());
        history
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A client that panicked mid-record left whole slots behind: the data stays valid.
        self.shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn open_slot(slots: &mut [Slot], recorder: u64, id: OpId) -> Result<&mut Slot, RecordError> {
    if id.recorder != recorder {
        return Err(RecordError::ForeignId(id));
    }
    match slots.get_mut(id.index) {
        Some(slot) if !slot.closed => Ok(slot),
        Some(_) => Err(RecordError::AlreadyClosed(id)),
        None => Err(RecordError::ForeignId(id)),
    }
}

/// Bytes shown in a message: printable ASCII as is, the rest escaped, long ones cut.
struct Shown<'b>(&'b [u8]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = self.0.len().min(DISPLAY_BYTES_MAX);
        write!(f, "\"{}\"", self.0[..cut].escape_ascii())?;
        if self.0.len() > cut {
            write!(f, "...({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// A value shown in a message, or `absent`.
struct ShownValue<'b>(Option<&'b [u8]>);

impl fmt::Display for ShownValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => write!(f, "{}", Shown(value)),
            None => write!(f, "absent"),
        }
    }
}

fn write_keys(f: &mut fmt::Formatter<'_>, keys: &[Vec<u8>]) -> fmt::Result {
    write!(f, "[")?;
    for (i, key) in keys.iter().take(8).enumerate() {
        let comma = if i == 0 { "" } else { ", " };
        write!(f, "{comma}{}", Shown(key))?;
    }
    if keys.len() > 8 {
        write!(f, ", ... {} keys", keys.len())?;
    }
    write!(f, "]")
}

fn write_pairs(f: &mut fmt::Formatter<'_>, pairs: &[KeyValue]) -> fmt::Result {
    write!(f, "[")?;
    for (i, (key, value)) in pairs.iter().enumerate() {
        let comma = if i == 0 { "" } else { ", " };
        write!(
            f,
            "{comma}{} = {}",
            Shown(key),
            ShownValue(value.as_deref())
        )?;
    }
    write!(f, "]")
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Get { key } => write!(f, "Get {}", Shown(key)),
            Op::Put { key, value } => {
                write!(f, "Put {} = {}", Shown(key), ShownValue(value.as_deref()))
            }
            Op::Cas { key, expect, value } => write!(
                f,
                "Cas {} from {} to {}",
                Shown(key),
                ShownValue(expect.as_deref()),
                ShownValue(value.as_deref())
            ),
            Op::Txn { expects, writes } => {
                write!(f, "Txn if ")?;
                write_pairs(f, expects)?;
                write!(f, " then ")?;
                write_pairs(f, writes)
            }
        }
    }
}

impl fmt::Display for Ret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ret::Get(value) => write!(f, "{}", ShownValue(value.as_deref())),
            Ret::Put => write!(f, "ok"),
            Ret::Cas(done) | Ret::Txn(done) => write!(f, "{done}"),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.response {
            Some(response) => write!(
                f,
                "client {} [{}, {}] ns: {} -> {}",
                self.client, self.invoke_ns, response.response_ns, self.op, response.ret
            ),
            None => write!(
                f,
                "client {} [{}, ?] ns: {} -> unknown",
                self.client, self.invoke_ns, self.op
            ),
        }
    }
}

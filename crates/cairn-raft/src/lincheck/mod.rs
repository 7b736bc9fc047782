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
//! wrong, so it undoes the last choice and tries the next candidate. Four refinements, each
//! argued where it is coded (the private `Search`, `Memo` and `Pairs`):
//!
//! - the memo keeps the configurations (operations linearized, model state) the search failed
//!   from, and refuses a configuration that has one of them plus more operations of unknown
//!   outcome (those are optional, so that cannot help);
//! - an observer (a Get, or a failed Cas or Txn) whose answer fits the current state is
//!   linearized at once, its alternatives never tried: it changes nothing, so a linearization
//!   that places it later also works with it moved first;
//! - operations of unknown outcome are tried after the completed ones, and need no place in the
//!   end: the search stops once every completed operation is linearized;
//! - for each value a completed operation must find (a Get's answer, the expectation of a Cas
//!   or Txn that wrote) the search counts the operations left that need it and that may write
//!   it; a configuration that loses such a value for good (it is not in the state and nobody
//!   left writes it) is refused at once, and a history with a read of a value nobody writes is
//!   refused before any search. Without it, a read near the end of a history of a value that
//!   cannot be there costs every order of what comes before it (a CI run saw 10 million steps
//!   spent on 55 operations).
//!
//! # Bounds and costs
//!
//! - **CPU.** At most [`Options::steps_max`] search steps per partition (a step looks at one
//!   node of the list, tries one operation, or undoes one), each `O(c/64 + k + a × u/64 + w)`
//!   for `c` completed and `u` unknown-outcome operations and `k` keys in the partition, `a`
//!   memo sets under one key (the memo key is hashed and compared) and `w` keys the operation
//!   tried writes or expects (the counts of needed values), plus `O(N log N)` to sort and
//!   partition a history of `N` operations and `O(N)` to count the values needed. A search that does not end in budget yields
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

mod search;
use search::{partitions, Compiled, End, Search};

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
    /// (places in the history): it explains every answer in it. The search ends a branch as
    /// soon as it loses for good a value some operation must still find, so this may stop
    /// short of where an exhaustive search would have got.
    pub longest_prefix: Vec<usize>,
    /// The completed operation that cannot be placed right after `longest_prefix`: the one
    /// whose response the search reached there, or one needing a value the prefix lost for
    /// good. Its answer is the one nothing explains.
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

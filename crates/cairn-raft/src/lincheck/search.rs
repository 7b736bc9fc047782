//! The search of [`super::check_with`]: splitting a history into partitions of keys touched
//! together, compiling a partition into dense state, and the Wing–Gong search with Lowe's memo
//! over it (the algorithm and its bounds are in the parent module's header).
//!
//! Owns: `Partition`, `Compiled`, `Pairs` (the values steps need), `Search` and the memo. May call: the parent's history types.
//! Must never touch: anything outside this module tree.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::*;

/// Operations that share keys, directly or through others.
pub(super) struct Partition {
    /// Places in the history, ascending.
    pub(super) ops: Vec<usize>,
    /// Sorted, without repeats.
    pub(super) keys: Vec<Vec<u8>>,
}

/// Splits the operations into partitions (connected components of the keys touched together),
/// ordered by their first operation. An operation touching no key (an empty [`Op::Txn`]) is a
/// partition of its own.
pub(super) fn partitions(operations: &[Operation]) -> Vec<Partition> {
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

    /// The (key, value) pairs the step must find to be placed: a completed Get's answer, the
    /// expectations of a Cas or Txn known to have written.
    fn needs(&self) -> Vec<(usize, u64)> {
        match self {
            Step::Get { key, value } => vec![(*key, *value)],
            Step::Cas {
                key,
                expect,
                ret: Some(true),
                ..
            } => vec![(*key, *expect)],
            Step::Txn {
                expects,
                ret: Some(true),
                ..
            } => expects.to_vec(),
            _ => Vec::new(),
        }
    }

    /// The (key, value) pairs the step may write: all its writes unless it is known to have
    /// failed.
    fn may_write(&self) -> Vec<(usize, u64)> {
        match self {
            Step::Get { .. }
            | Step::Cas {
                ret: Some(false), ..
            }
            | Step::Txn {
                ret: Some(false), ..
            } => Vec::new(),
            Step::Put { key, value } | Step::Cas { key, value, .. } => vec![(*key, *value)],
            Step::Txn { writes, .. } => writes.to_vec(),
        }
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
pub(super) struct Compiled {
    /// One per searched operation (unknown-outcome Gets are left out: they constrain nothing).
    steps: Vec<Step>,
    invoke_ns: Vec<u64>,
    /// `None` for an unknown outcome.
    response_ns: Vec<Option<u64>>,
    /// The searched operation's place in the history.
    pub(super) history_index: Vec<usize>,
    /// The step's bit among the completed steps, or among those of unknown outcome.
    bit: Vec<usize>,
    completed_count: usize,
    unknown_count: usize,
    /// One value id per key of the partition.
    initial: Vec<u64>,
    /// The values some completed step must find: see [`Pairs`].
    pairs: Pairs,
}

/// The (key, value) pairs that completed steps must find in the state to be placed (a Get's
/// answer, the expectations of a Cas or Txn that wrote), and for each step the pairs it needs
/// and the pairs it may write (only pairs some step needs). The search counts, per pair, the
/// steps not yet linearized that need it and that may write it: a configuration where a pair is
/// needed, not in the state, and written by no step left has no linearization (its value can
/// never come back), so the search refuses it at once instead of searching every order of the
/// steps before the needy one's response.
#[derive(Default)]
struct Pairs {
    /// Pair id to its key index and value id.
    pairs: Vec<(usize, u64)>,
    ids: HashMap<(usize, u64), usize>,
    /// Per step: the pairs it needs.
    needs: Vec<Box<[usize]>>,
    /// Per step: the pairs it may write.
    writes: Vec<Box<[usize]>>,
    /// Per pair: the steps that need it (to name one when the pair is lost).
    needed_by: Vec<Vec<usize>>,
}

impl Pairs {
    fn new(steps: &[Step]) -> Self {
        let mut pairs = Pairs::default();
        for (op, step) in steps.iter().enumerate() {
            let needs: Box<[usize]> = step
                .needs()
                .into_iter()
                .map(|pair| {
                    let next = pairs.pairs.len();
                    let id = *pairs.ids.entry(pair).or_insert(next);
                    if id == next {
                        pairs.pairs.push(pair);
                        pairs.needed_by.push(Vec::new());
                    }
                    pairs.needed_by[id].push(op);
                    id
                })
                .collect();
            pairs.needs.push(needs);
        }
        for step in steps {
            let writes = step
                .may_write()
                .into_iter()
                .filter_map(|pair| pairs.ids.get(&pair).copied())
                .collect();
            pairs.writes.push(writes);
        }
        pairs
    }

    fn id(&self, key: usize, value: u64) -> Option<usize> {
        self.ids.get(&(key, value)).copied()
    }
}

impl Compiled {
    pub(super) fn new(
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
            pairs: Pairs::default(),
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
        compiled.pairs = Pairs::new(&compiled.steps);
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
pub(super) enum End {
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
/// - **Lost values.** A configuration in which a value some step left needs is not in the
///   state and written by no step left has no linearization: whatever follows, that step
///   finds another value. It is refused like one the memo knows, and is a function of the
///   configuration (the counts follow from the steps linearized), so the memo stays exact; a
///   superset of unknown-outcome steps leaves fewer writers, so the memo's containment rule
///   still holds.
pub(super) struct Search<'c> {
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
    /// Per pair of [`Pairs`]: the steps not yet linearized that need it.
    needed_left: Vec<u32>,
    /// Per pair of [`Pairs`]: the steps not yet linearized that may write it.
    writers_left: Vec<u32>,
    steps: u64,
    /// The deepest dead end: the prefix then and the step whose response stopped it.
    deepest: Option<(Vec<usize>, usize)>,
}

impl<'c> Search<'c> {
    pub(super) fn new(compiled: &'c Compiled) -> Self {
        let pairs = &compiled.pairs;
        let mut needed_left = vec![0u32; pairs.pairs.len()];
        let mut writers_left = vec![0u32; pairs.pairs.len()];
        for (needs, writes) in pairs.needs.iter().zip(&pairs.writes) {
            for &pair in needs.iter() {
                needed_left[pair] += 1;
            }
            for &pair in writes.iter() {
                writers_left[pair] += 1;
            }
        }
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
            needed_left,
            writers_left,
            steps: 0,
            deepest: None,
        }
    }

    pub(super) fn run(mut self, options: &Options) -> End {
        if self.completed_left == 0 {
            return End::Linearizable;
        }
        if let Some(needy) = (0..self.needed_left.len()).find_map(|pair| self.lost(pair)) {
            // A value nobody writes, never in the state: no linearization at all.
            self.deepest = Some((Vec::new(), needy));
            return self.stuck();
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
                Look::DeadEnd(Some(stuck)) => {
                    let prefix = self.frames.iter().map(|f| f.op).collect();
                    self.note_dead_end(prefix, stuck);
                }
                Look::DeadEnd(None) => {}
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
        self.count(op, false);
        let lost = self.lost_by(op, undo_len);
        if lost.is_some() || self.known_to_fail() {
            self.count(op, true);
            self.flip(op);
            self.undo_to(undo_len);
            if let Some(needy) = lost {
                // A value some step must find is gone for good: note how far this got.
                let mut prefix: Vec<usize> = self.frames.iter().map(|f| f.op).collect();
                prefix.push(op);
                self.note_dead_end(prefix, needy);
            }
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

    /// Takes `op` out of the counts of [`Pairs`] (as linearized), or puts it back (`undo`).
    fn count(&mut self, op: usize, undo: bool) {
        let pairs = &self.compiled.pairs;
        for (counts, ids) in [
            (&mut self.needed_left, &pairs.needs[op]),
            (&mut self.writers_left, &pairs.writes[op]),
        ] {
            for &pair in ids.iter() {
                if undo {
                    counts[pair] += 1;
                } else {
                    counts[pair] -= 1;
                }
            }
        }
    }

    /// A step that needs `pair` if the pair is lost: needed, not in the state, and written by
    /// no step left.
    fn lost(&self, pair: usize) -> Option<usize> {
        let (key, value) = self.compiled.pairs.pairs[pair];
        if self.needed_left[pair] == 0 || self.writers_left[pair] > 0 || self.state[key] == value {
            return None;
        }
        // One that is not linearized yet: all needy steps are completed ones.
        self.compiled.pairs.needed_by[pair]
            .iter()
            .copied()
            .find(|&needy| {
                let bit = self.compiled.bit[needy];
                self.completed_done[bit / 64] & (1 << (bit % 64)) == 0
            })
    }

    /// A step left without the value it needs once `op` was applied (its old values logged in
    /// the undo log from `undo_len`): only the pairs `op` may write or overwrote can be lost
    /// by it, since the counts of the others did not fall and their keys kept their values.
    fn lost_by(&self, op: usize, undo_len: usize) -> Option<usize> {
        let pairs = &self.compiled.pairs;
        let overwritten = self.undo[undo_len..]
            .iter()
            .filter_map(|&(key, old)| pairs.id(key, old));
        pairs.writes[op]
            .iter()
            .copied()
            .chain(overwritten)
            .find_map(|pair| self.lost(pair))
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
        self.count(frame.op, true);
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

    /// Remembers `prefix` and the step `stuck` after it if the prefix is the longest yet.
    fn note_dead_end(&mut self, prefix: Vec<usize>, stuck: usize) {
        let deeper = match &self.deepest {
            None => true,
            Some((longest, _)) => prefix.len() > longest.len(),
        };
        if deeper {
            self.deepest = Some((prefix, stuck));
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

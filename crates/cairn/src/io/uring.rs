//! The io_uring backend: every read of a batch submitted to a ring together, the ring topped up
//! as completions arrive, and a conditional read submitted the moment the read it waits for
//! completes.

use std::collections::VecDeque;

use io_uring::{opcode, types, IoUring};

use super::aligned::AlignedBuf;
use super::batch::{layout_slots, Slot};
use super::gate::Ticket;
use super::plan::{condition, ReadConditions, ReadPlan, ReadRequest};
use super::progress::{chunk_len, is_transient, Next, Progress};
use super::{ALIGN_BYTES, QUEUE_DEPTH_MAX};
use crate::error::{Error, Result};

/// How often in a row `io_uring_enter` may fail transiently (`EINTR`, `EAGAIN`, `EBUSY`) before the
/// ring is given up as broken.
const ENTER_RETRY_MAX: u32 = 1000;

/// How a batch on a ring ended.
pub(super) enum Outcome {
    /// Every read completed; the ring is idle.
    Ok,
    /// A read failed; every other read was drained, the ring is idle and reusable.
    Failed(Error),
    /// The ring stopped working with reads possibly still in flight: the arena and the ring
    /// must be leaked.
    Broken(Error),
}

/// Creates a ring and checks it works: the kernel supports `IORING_OP_READ` and answers a NOP.
pub(super) fn probe() -> std::io::Result<IoUring> {
    let mut ring = IoUring::new(QUEUE_DEPTH_MAX as u32)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    if !probe.is_supported(opcode::Read::CODE) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks IORING_OP_READ",
        ));
    }
    let nop = opcode::Nop::new().build().user_data(u64::MAX);
    // SAFETY: a NOP references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| std::io::Error::other("fresh io_uring has a full submission queue"))?;
    let mut attempts = 0;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error().is_some_and(is_transient) && attempts < 100 => {
                attempts += 1;
            }
            Err(e) => return Err(e),
        }
    }
    // The ring is dropped on any error below, so a stray completion can never leak into a
    // later batch.
    let result = ring.completion().next().map(|cqe| cqe.result());
    match result {
        Some(result) if result >= 0 => Ok(ring),
        Some(result) => Err(std::io::Error::from_raw_os_error(-result)),
        None => Err(std::io::Error::other("io_uring NOP did not complete")),
    }
}

/// Creates a ring for the pool.
pub(super) fn new_ring() -> std::io::Result<IoUring> {
    IoUring::new(QUEUE_DEPTH_MAX as u32)
}

/// What [`read`] keeps of the reads it has issued and those waiting to be.
struct Flight {
    /// Each planned request's progress.
    progress: Vec<Progress>,
    /// Reads completed, skipped or settled without bytes: a condition planned later on one
    /// of them is decided when it is planned.
    finished: Vec<bool>,
    /// Reads to issue before new ones: retries of short or interrupted reads, and
    /// conditional reads found wanted.
    queued: VecDeque<(usize, usize)>,
    /// (earlier, later) for every conditional read, by earlier read (no allocation without).
    dependents: Vec<(usize, usize)>,
    in_flight: usize,
    /// The first failure; nothing new is issued after it.
    failure: Option<Error>,
    /// Requests from `limit` on are not issued here (see [`Planning::serial_from`]).
    limit: usize,
    /// Reads completed with bytes, not yet offered to [`ReadPlan::read_done`].
    ready: Vec<usize>,
}

/// Completed reads handed to [`ReadPlan::read_done`] between two looks at the completion
/// queue (about 1 us each for a lookup's page of small values; a lookup copies the value it
/// finds, so longer for large ones), so that a read released by a completion waits at most
/// that long to be submitted.
const READY_PER_TURN: usize = 8;

/// Where planning stands during [`read`]: whether the plan may have more, the arena bytes
/// its reads take so far, and the first read (planned in a later part) whose file has no
/// descriptor, from which the caller reads serially.
pub(super) struct Planning {
    pub(super) more: bool,
    pub(super) total: usize,
    pub(super) serial_from: Option<usize>,
}

/// Reads the planned requests through `ring` (all with a descriptor when called), asking
/// `plan` for more whenever every planned read is submitted: the submitted reads go to the
/// kernel first, then completions already there are taken, then the plan runs while the
/// device works. A conditional request is submitted, ahead of new ones, as soon as the read
/// it waits for completes and the plan wants it; otherwise it is marked skipped. A later
/// part with a file that has no descriptor stops planning: the reads from it on are left to
/// the caller (`state.serial_from`). Never returns with a read in flight unless it returns
/// [`Outcome::Broken`].
///
/// With a `ticket` (a session whose concurrent batches share a read budget, see
/// [`super::gate`]), a read is submitted only when the ticket takes room for it; a batch held
/// back goes on planning, searches the pages it has, and with nothing in flight sleeps until
/// there is room.
pub(super) fn read(
    ring: &mut IoUring,
    plan: &mut dyn ReadPlan,
    slots: &mut Vec<Slot>,
    arena: &mut AlignedBuf,
    state: &mut Planning,
    ticket: Option<&Ticket<'_>>,
) -> Outcome {
    let depth = QUEUE_DEPTH_MAX
        .min(ring.params().sq_entries() as usize)
        .max(1);
    // One base pointer for the whole loop: no reference to the arena's contents exists while
    // the kernel writes into it, and the arena is never replaced while reads are in flight.
    let base = arena.as_mut_ptr();
    let capacity = arena.len();
    let planned = plan.requests().len();
    let mut f = Flight {
        progress: vec![Progress::default(); planned],
        finished: vec![false; planned],
        queued: VecDeque::new(),
        dependents: Vec::new(),
        in_flight: 0,
        failure: None,
        limit: planned,
        ready: Vec::new(),
    };
    add_dependents(&*plan, 0, &mut f.dependents);
    f.settle_empty(plan, 0, slots, base);
    let mut next_new = 0usize;
    let mut enter_failures = 0u32;

    loop {
        // Whether the session's read budget held back the read now first in `queued`.
        let mut held = false;
        if f.failure.is_none() {
            let requests = plan.requests();
            let mut sq = ring.submission();
            while f.in_flight < depth {
                let job = match f.queued.pop_front() {
                    Some(job) => Some(job),
                    None => next_fd_request(requests, &*plan, slots, &mut next_new, f.limit)
                        .map(|i| (i, 0)),
                };
                let Some((i, start)) = job else { break };
                let (Some(request), Some(&slot)) = (requests.get(i), slots.get(i)) else {
                    continue; // unreachable: jobs index the requests
                };
                let Some(fd) = request.file.raw_fd() else {
                    continue; // unreachable: only requests with a descriptor are queued
                };
                if ticket.is_some_and(|ticket| !ticket.take_one()) {
                    // Held back by the session's read budget: the read goes first next time.
                    f.queued.push_front((i, start));
                    held = true;
                    break;
                }
                let count = chunk_len(start, slot.len);
                // `start < slot.len`, so the region lies inside the request's slot.
                let buf = base.wrapping_add(slot.start + start);
                let entry = opcode::Read::new(types::Fd(fd), buf, count as u32)
                    .offset(request.offset + start as u64)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the kernel writes at most `count` bytes at `buf`, which lie inside
                // the arena (slots are laid out within its `capacity`). The arena is not
                // freed, replaced or referenced before this read completes (this function
                // drains every completion before returning, and the caller leaks the arena
                // on `Outcome::Broken` or an unwind). The descriptor stays open because the
                // plan's requests hold its `Arc` for the whole call (planning only appends).
                if unsafe { sq.push(&entry) }.is_err() {
                    if let Some(ticket) = ticket {
                        ticket.untake_one();
                    }
                    f.queued.push_front((i, start));
                    break; // unreachable: at most `depth` entries are ever outstanding
                }
                if let Some(p) = f.progress.get_mut(i) {
                    p.issued_start = start;
                }
                f.in_flight += 1;
            }
        }
        let planning = state.more
            && f.failure.is_none()
            && (f.queued.is_empty() || held)
            && next_new >= f.limit
            && f.in_flight < depth;
        if planning {
            // Let the device start on what is submitted, take what has completed, then plan
            // the next part while the reads are in flight.
            if f.in_flight > 0 {
                if let Err(e) = submit_queued(ring, plan.requests()) {
                    return Outcome::Broken(e);
                }
                complete(ring, plan, slots, base, &mut f, ticket);
            }
            let from = plan.requests().len();
            state.more = plan.plan_more(capacity.saturating_sub(state.total) / ALIGN_BYTES);
            let laid_out = layout_slots(plan.requests(), slots, state.total).and_then(|t| {
                if t <= capacity {
                    Ok(t)
                } else {
                    // Only a plan that ignores the room it was given gets here.
                    Err(Error::io(
                        "read",
                        plan.requests()
                            .get(from)
                            .map(|r| r.file.path().to_path_buf())
                            .unwrap_or_default(),
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            "a read plan outgrew the arena it was given",
                        ),
                    ))
                }
            });
            match laid_out {
                Ok(total) => state.total = total,
                Err(e) => {
                    // Nothing of this part is issued; the reads in flight are drained.
                    slots.truncate(from);
                    f.failure = Some(e);
                    state.more = false;
                    continue;
                }
            }
            let planned = plan.requests().len();
            f.progress.resize(planned, Progress::default());
            f.finished.resize(planned, false);
            add_dependents(&*plan, from, &mut f.dependents);
            f.limit = planned;
            let requests = plan.requests();
            let no_fd = requests
                .get(from..)
                .unwrap_or_default()
                .iter()
                .zip(slots.get(from..).unwrap_or_default());
            if let Some(k) = no_fd
                .enumerate()
                .find(|(_, (r, s))| s.len > 0 && r.file.raw_fd().is_none())
                .map(|(k, _)| from + k)
            {
                f.limit = k;
                state.serial_from = Some(k);
                state.more = false;
            }
            // Conditions on reads of earlier parts that have already finished: decide now
            // (their completions released only the reads planned by then).
            if f.failure.is_none() {
                let late: Vec<(usize, usize)> = (from..planned)
                    .filter_map(|i| condition(&*plan, i).map(|j| (j, i)))
                    .filter(|&(j, i)| {
                        j < from && i < f.limit && f.finished.get(j).copied().unwrap_or(false)
                    })
                    .collect();
                f.settle_empty(plan, from, slots, base);
                for (j, i) in late {
                    let skipped = slots.get(j).is_some_and(|slot| slot.skipped);
                    if let Some(next) = decide(j, skipped, i, plan, slots, base, &mut f.queued) {
                        f.release(vec![next], plan, slots, base);
                    }
                }
            }
            continue;
        }
        if f.in_flight == 0 {
            // A read the budget held back is first in `queued`; without a budget nothing is
            // ever held back, and a queue with nothing in flight ends the call as before.
            let held_back = held && f.failure.is_none() && !f.queued.is_empty();
            match ticket {
                Some(ticket) if held_back => {
                    if f.ready.is_empty() {
                        ticket.wait_for_room();
                        continue;
                    }
                    // Search the pages that are in first; the next turn submits or sleeps.
                }
                _ => break,
            }
        }
        if f.failure.is_none() && !f.ready.is_empty() {
            // Nothing can be planned now (the plan is done or the ring is full) and reads
            // are in flight: hand a few completed pages to the plan instead of waiting,
            // sending any released reads to the device first and taking the completions
            // that came meanwhile after.
            if !ring.submission().is_empty() {
                if let Err(e) = submit_queued(ring, plan.requests()) {
                    return Outcome::Broken(e);
                }
            }
            let from = f.ready.len().saturating_sub(READY_PER_TURN);
            for i in f.ready.drain(from..) {
                if let Some(slot) = slots.get(i) {
                    // SAFETY: read `i` has completed and nothing is or will be in flight
                    // into its slot (slots are disjoint, and a completed read is not issued
                    // again), so these bytes of the arena are not written while the slice
                    // lives; they lie inside the arena (laid out by `layout_slots`).
                    let bytes = unsafe {
                        std::slice::from_raw_parts(base.wrapping_add(slot.start), slot.len)
                    };
                    plan.read_done(i, bytes);
                }
            }
            complete(ring, plan, slots, base, &mut f, ticket);
            continue;
        }
        match ring.submit_and_wait(1) {
            Ok(_) => enter_failures = 0,
            Err(e)
                if e.raw_os_error()
                    .is_some_and(|errno| is_transient(errno) || errno == libc::EBUSY) =>
            {
                enter_failures += 1;
                if enter_failures > ENTER_RETRY_MAX {
                    return Outcome::Broken(enter_error(plan.requests(), e));
                }
                std::thread::yield_now();
            }
            Err(e) => return Outcome::Broken(enter_error(plan.requests(), e)),
        }
        complete(ring, plan, slots, base, &mut f, ticket);
    }
    match f.failure {
        None => Outcome::Ok,
        Some(e) => Outcome::Failed(e),
    }
}

/// Sends the entries pushed so far to the kernel without waiting. A transient refusal
/// (`EAGAIN`, `EINTR`, `EBUSY`) leaves them queued for the next `io_uring_enter`; any other
/// failure is returned.
fn submit_queued(ring: &mut IoUring, requests: &[ReadRequest]) -> Result<()> {
    match ring.submit() {
        Err(e)
            if !e
                .raw_os_error()
                .is_some_and(|errno| is_transient(errno) || errno == libc::EBUSY) =>
        {
            Err(enter_error(requests, e))
        }
        _ => Ok(()),
    }
}

/// Appends to `dependents` the (earlier, later) pair of every conditional request from
/// `from` on, keeping it sorted by earlier read.
fn add_dependents(plan: &dyn ReadPlan, from: usize, dependents: &mut Vec<(usize, usize)>) {
    let before = dependents.len();
    dependents
        .extend((from..plan.requests().len()).filter_map(|i| condition(plan, i).map(|j| (j, i))));
    let appended = dependents
        .get(before.saturating_sub(1)..)
        .unwrap_or_default();
    if appended.windows(2).any(|w| w[0] > w[1]) {
        dependents.sort_unstable();
    }
}

/// Takes every completion the ring holds: a read done releases the reads that wait for it,
/// a short one is queued for its rest, a transient failure for a retry, and the first other
/// failure is recorded (no new reads are issued after it). The `ticket` learns how many
/// completed.
fn complete(
    ring: &mut IoUring,
    plan: &mut dyn ReadPlan,
    slots: &mut [Slot],
    base: *mut u8,
    f: &mut Flight,
    ticket: Option<&Ticket<'_>>,
) {
    let before = f.in_flight;
    complete_each(ring, plan, slots, base, f);
    if let Some(ticket) = ticket {
        ticket.completed(before - f.in_flight);
    }
}

/// The work of [`complete`], completion by completion.
fn complete_each(
    ring: &mut IoUring,
    plan: &mut dyn ReadPlan,
    slots: &mut [Slot],
    base: *mut u8,
    f: &mut Flight,
) {
    for cqe in ring.completion() {
        f.in_flight = f.in_flight.saturating_sub(1);
        let i = cqe.user_data() as usize;
        let (Some(request), Some(&slot), Some(p)) =
            (plan.requests().get(i), slots.get(i), f.progress.get_mut(i))
        else {
            continue; // unreachable: every entry carries its request index
        };
        let result = cqe.result();
        if result < 0 {
            let errno = -result;
            if is_transient(errno) && p.on_transient() {
                f.queued.push_back((i, p.issued_start));
            } else if f.failure.is_none() {
                f.failure = Some(Error::io(
                    "read",
                    request.file.path(),
                    std::io::Error::from_raw_os_error(errno),
                ));
            }
            continue;
        }
        let direct = request.file.is_direct();
        match p.on_read(p.issued_start, result as usize, slot.len, direct) {
            Ok(Next::Done) => {
                if f.failure.is_none() {
                    f.release(vec![(i, false)], plan, slots, base);
                }
            }
            Ok(Next::ReadFrom(from)) => f.queued.push_back((i, from)),
            Err(e) => {
                if f.failure.is_none() {
                    f.failure = Some(Error::io("read", request.file.path(), e));
                }
            }
        }
    }
}

/// The next unconditional request (from `*next`, below `limit`) that has a descriptor and
/// bytes to read.
fn next_fd_request(
    requests: &[ReadRequest],
    conditions: &dyn ReadConditions,
    slots: &[Slot],
    next: &mut usize,
    limit: usize,
) -> Option<usize> {
    while *next < limit {
        let (Some(request), Some(slot)) = (requests.get(*next), slots.get(*next)) else {
            break;
        };
        let i = *next;
        *next += 1;
        if slot.len > 0 && request.file.raw_fd().is_some() && condition(conditions, i).is_none() {
            return Some(i);
        }
    }
    None
}

impl Flight {
    /// The reads in `settled` are finished (`(read, skipped)`: completed, or skipped, or of
    /// no bytes): marks them so and decides each read waiting for them, queueing the wanted
    /// ones and marking the others skipped, along with every read that waits (directly or
    /// not) for a skipped one. A wanted read of no bytes counts as finished at once. Reads
    /// from `limit` on are left to the caller.
    fn release(
        &mut self,
        mut settled: Vec<(usize, bool)>,
        conditions: &mut dyn ReadConditions,
        slots: &mut [Slot],
        base: *mut u8,
    ) {
        while let Some((earlier, earlier_skipped)) = settled.pop() {
            if let Some(f) = self.finished.get_mut(earlier) {
                *f = true;
            }
            if !earlier_skipped && slots.get(earlier).is_some_and(|slot| slot.len > 0) {
                self.ready.push(earlier);
            }
            let from = self.dependents.partition_point(|&(e, _)| e < earlier);
            for &(_, later) in self.dependents[from..]
                .iter()
                .take_while(|&&(e, _)| e == earlier)
                .filter(|&&(_, later)| later < self.limit)
            {
                let queued = &mut self.queued;
                if let Some(next) = decide(
                    earlier,
                    earlier_skipped,
                    later,
                    conditions,
                    slots,
                    base,
                    queued,
                ) {
                    settled.push(next);
                }
            }
        }
    }

    /// Unconditional requests of no bytes in `from..limit` are finished as soon as they are
    /// planned: releases the reads that wait for them.
    fn settle_empty(
        &mut self,
        plan: &mut dyn ReadPlan,
        from: usize,
        slots: &mut [Slot],
        base: *mut u8,
    ) {
        let empty: Vec<(usize, bool)> = (from..self.limit)
            .filter(|&i| {
                slots.get(i).is_some_and(|slot| slot.len == 0) && condition(&*plan, i).is_none()
            })
            .map(|i| (i, false))
            .collect();
        if !empty.is_empty() {
            self.release(empty, plan, slots, base);
        }
    }
}

/// Decides read `later`, which waits for the finished read `earlier`: queues it if wanted,
/// else marks it skipped. Returns it as finished (`(later, skipped)`) unless it was queued.
fn decide(
    earlier: usize,
    earlier_skipped: bool,
    later: usize,
    conditions: &mut dyn ReadConditions,
    slots: &mut [Slot],
    base: *mut u8,
    queued: &mut VecDeque<(usize, usize)>,
) -> Option<(usize, bool)> {
    let wanted = !earlier_skipped
        && slots.get(earlier).is_some_and(|slot| {
            // SAFETY: read `earlier` has completed and nothing is or will be in flight into
            // its slot (slots are disjoint, and a completed read is not issued again), so
            // these bytes of the arena are not written while the slice lives; they lie
            // inside the arena (laid out by `layout_slots`).
            let bytes =
                unsafe { std::slice::from_raw_parts(base.wrapping_add(slot.start), slot.len) };
            conditions.wanted(later, bytes)
        });
    let slot = slots.get_mut(later)?;
    if !wanted {
        slot.skipped = true;
        Some((later, true))
    } else if slot.len == 0 {
        Some((later, false))
    } else {
        queued.push_back((later, 0));
        None
    }
}

fn enter_error(requests: &[ReadRequest], e: std::io::Error) -> Error {
    let path = requests
        .first()
        .map(|r| r.file.path().to_path_buf())
        .unwrap_or_default();
    Error::io("io_uring_enter", path, e)
}

//! Admission of io_uring reads across a session's concurrent batches: the oldest batch first.
//!
//! Owns: [`ReadGate`] and [`Ticket`]. May call: `std` only. Must never touch: rings, arenas or
//! any engine structure; the io_uring backend asks it before it submits and tells it what
//! completed.
//!
//! An application that keeps the lookups of several batches in flight (a pipelined block
//! producer: batch n+1, n+2, n+3 read while batch n is applied) reads them on several rings at
//! once, each with up to `QUEUE_DEPTH_MAX` reads in flight: three batches put about 768 reads
//! into one device's queue. The device serves no more reads per second at that depth than at
//! 128 to 256 (this project's virtual disk: 87k at 128, 90k at 256, 84k at 768, 2026-11-30),
//! and every read waits behind all the others, including those of batches that are needed
//! later: the batch the application waits for next finishes last among reads that started
//! with it, and the slowest of its 256 reads sets its time.
//!
//! With a budget, a batch that is not the oldest one reading submits only while the reads in
//! flight across every ring are fewer than the budget; the oldest batch (the one the
//! application will wait for first) is never held back. So the device's queue stays about as
//! deep as the budget, younger batches fill what the oldest leaves free, and the oldest one's
//! reads wait behind at most the budget's reads, not every batch's.
//!
//! # Bounds
//!
//! - Reads in flight across the session: at most `budget + QUEUE_DEPTH_MAX` (the oldest
//!   batch's ring may fill while younger batches hold the budget). A younger batch takes its
//!   reads from the budget one at a time with a compare-and-swap, so younger batches together
//!   never exceed it.
//! - No batch waits forever: the oldest never waits, and when it ends the next oldest becomes
//!   the oldest. A batch with nothing in flight that may not submit sleeps until the reads in
//!   flight fall below the budget or a batch ends (woken then; [`SLEEP_MAX`] bounds a look in
//!   case a wake-up were ever missed).
//! - Cost per batch: two short lock holds (entering and leaving), one atomic operation per
//!   read submitted and per completion round, a wake-up only when the reads in flight fall
//!   below the budget while a batch sleeps; none at all for a session without a budget.
//! - "Oldest" is the oldest read call: a lookup of several waves (more than 4,096 pages) or a
//!   union's lookups register each call anew, as the youngest. Among younger batches, none
//!   has priority over another.
//! - A read plan must never read through the same session's I/O from its own callbacks: the
//!   inner batch would be younger than the outer one, whose reads it could not reap, and might
//!   wait for room forever. No plan does.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The longest a held-back batch sleeps before it looks again (it is woken when room appears;
/// this only bounds the cost of a wake-up that were missed).
pub(super) const SLEEP_MAX: Duration = Duration::from_millis(2);

/// Shared by every io_uring batch of a session: the reads in flight and which batch is oldest.
#[derive(Debug)]
pub(super) struct ReadGate {
    /// Reads in flight across every ring beyond which a batch other than the oldest waits.
    budget: usize,
    in_flight: AtomicUsize,
    next_ticket: AtomicU64,
    /// Tickets of the batches reading now.
    reading: Mutex<BTreeSet<u64>>,
    /// The smallest ticket in `reading` (`u64::MAX` when none).
    oldest: AtomicU64,
    /// Batches asleep in [`Ticket::wait_for_room`].
    sleepers: AtomicUsize,
    wake_lock: Mutex<()>,
    wake: Condvar,
}

impl ReadGate {
    /// A gate that keeps about `budget` reads in flight across the session's batches (at
    /// least 1).
    pub(super) fn new(budget: usize) -> ReadGate {
        ReadGate {
            budget: budget.max(1),
            in_flight: AtomicUsize::new(0),
            next_ticket: AtomicU64::new(0),
            reading: Mutex::new(BTreeSet::new()),
            oldest: AtomicU64::new(u64::MAX),
            sleepers: AtomicUsize::new(0),
            wake_lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// The budget it was made with.
    pub(super) fn budget(&self) -> usize {
        self.budget
    }

    /// Reads counted in flight now.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Registers a batch that starts reading: younger than every batch registered before it.
    pub(super) fn enter(&self) -> Ticket<'_> {
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock, so that tickets enter `reading` in the order of their ids.
        let id = self.next_ticket.fetch_add(1, Ordering::SeqCst);
        reading.insert(id);
        let oldest = reading.first().copied().unwrap_or(u64::MAX);
        self.oldest.store(oldest, Ordering::SeqCst);
        Ticket {
            gate: self,
            id,
            outstanding: Cell::new(0),
        }
    }

    /// Takes `n` reads off the count, waking the sleepers if that brought it below the budget.
    fn release(&self, n: usize) {
        let before = self.in_flight.fetch_sub(n, Ordering::SeqCst);
        if before >= self.budget && before - n < self.budget {
            self.wake_sleepers();
        }
    }

    /// Wakes the batches asleep for room, if any.
    fn wake_sleepers(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this wake-up after a sleeper's last look at the counters.
            let _held = self.wake_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_all();
        }
    }
}

/// One batch's registration with the gate; leaving (dropping it) lets the next batch be the
/// oldest. Used by the one thread that reads the batch.
#[derive(Debug)]
pub(super) struct Ticket<'g> {
    gate: &'g ReadGate,
    id: u64,
    /// This batch's reads counted in the gate and not yet completed.
    outstanding: Cell<usize>,
}

impl Ticket<'_> {
    /// How many more reads this batch may submit now: unlimited for the oldest batch,
    /// otherwise what the budget leaves.
    pub(super) fn room(&self) -> usize {
        let gate = self.gate;
        if gate.oldest.load(Ordering::SeqCst) == self.id {
            return usize::MAX;
        }
        gate.budget
            .saturating_sub(gate.in_flight.load(Ordering::SeqCst))
    }

    /// Takes room for one read, if this batch may submit one now: always for the oldest
    /// batch, otherwise only while the reads in flight are below the budget (checked and
    /// counted in one step, so that younger batches together never pass it).
    pub(super) fn take_one(&self) -> bool {
        let gate = self.gate;
        let taken = if gate.oldest.load(Ordering::SeqCst) == self.id {
            gate.in_flight.fetch_add(1, Ordering::SeqCst);
            true
        } else {
            (gate.in_flight)
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < gate.budget).then_some(n + 1)
                })
                .is_ok()
        };
        if taken {
            self.outstanding.set(self.outstanding.get() + 1);
        }
        taken
    }

    /// Gives back room taken for a read that was not submitted after all.
    pub(super) fn untake_one(&self) {
        self.completed(1);
    }

    /// Counts `n` reads completed (at most those taken).
    pub(super) fn completed(&self, n: usize) {
        debug_assert!(n <= self.outstanding.get(), "more completions than reads");
        let n = n.min(self.outstanding.get());
        if n > 0 {
            self.outstanding.set(self.outstanding.get() - n);
            self.gate.release(n);
        }
    }

    /// Sleeps until this batch may submit (at once if it may now).
    pub(super) fn wait_for_room(&self) {
        if self.room() > 0 {
            return;
        }
        let gate = self.gate;
        gate.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut held = gate.wake_lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.room() == 0 {
            held = match gate.wake.wait_timeout(held, SLEEP_MAX) {
                Ok((held, _)) => held,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        drop(held);
        gate.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let gate = self.gate;
        // Reads still counted (a ring given up with reads in flight) stop counting: the ring
        // is gone, and its reads can no longer hold anyone back.
        let left = self.outstanding.replace(0);
        if left > 0 {
            gate.in_flight.fetch_sub(left, Ordering::SeqCst);
        }
        let was_oldest = {
            let mut reading = gate.reading.lock().unwrap_or_else(|p| p.into_inner());
            reading.remove(&self.id);
            let oldest = reading.first().copied().unwrap_or(u64::MAX);
            gate.oldest.swap(oldest, Ordering::SeqCst) == self.id
        };
        // A new oldest batch, or room the reads given up left: whoever sleeps looks again.
        if was_oldest || left > 0 {
            gate.wake_sleepers();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_oldest_batch_is_never_held_back() {
        let gate = ReadGate::new(4);
        let first = gate.enter();
        let second = gate.enter();
        assert_eq!(first.room(), usize::MAX);
        assert_eq!(second.room(), 4);
        for _ in 0..10 {
            assert!(first.take_one(), "the oldest may exceed the budget");
        }
        assert_eq!(second.room(), 0);
        assert!(!second.take_one());
        first.completed(7);
        assert_eq!(second.room(), 1);
        assert!(second.take_one());
        assert!(!second.take_one(), "the budget is full again");
        drop(first); // its 3 reads still counted stop counting; the second is the oldest now
        assert_eq!(second.room(), usize::MAX);
        second.wait_for_room();
        assert!(second.take_one());
        second.untake_one();
        second.completed(1);
        drop(second);
        assert_eq!(gate.in_flight.load(Ordering::SeqCst), 0);
        assert_eq!(gate.oldest.load(Ordering::SeqCst), u64::MAX);
    }

    #[test]
    fn a_held_back_batch_wakes_when_room_appears() {
        let gate = Arc::new(ReadGate::new(2));
        let first = gate.enter();
        assert!(first.take_one() && first.take_one());
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let second = gate.enter();
                second.wait_for_room();
                assert!(second.take_one());
                second.completed(1);
            })
        };
        std::thread::sleep(Duration::from_millis(5));
        first.completed(1);
        waiter.join().unwrap();
        drop(first);
        assert_eq!(gate.in_flight.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn many_batches_all_finish() {
        let gate = Arc::new(ReadGate::new(3));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let ticket = gate.enter();
                        let mut left = 5 + (t + round) % 7;
                        let mut in_flight = 0;
                        while left > 0 || in_flight > 0 {
                            while left > 0 && in_flight < 4 && ticket.take_one() {
                                left -= 1;
                                in_flight += 1;
                                let count = gate.in_flight.load(Ordering::SeqCst);
                                assert!(count <= 3 + 4, "{count} reads in flight");
                            }
                            if in_flight == 0 {
                                ticket.wait_for_room();
                                continue;
                            }
                            ticket.completed(1);
                            in_flight -= 1;
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(gate.in_flight.load(Ordering::SeqCst), 0);
    }
}

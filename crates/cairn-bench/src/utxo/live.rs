//! The benchmark's model of which UTxOs are live, in one bit per id.
//!
//! Owns: [`LiveSet`]. Ids `0..next_id` have been inserted; an id is live unless its bit in the
//! deleted bitmap is set. Memory is `next_id / 8` bytes (12.5 MB for 100M ids), so the model does
//! not distort the peak RSS the benchmark reports. Must never touch: the engine.

use std::ops::Range;

use crate::keys::SplitMix64;

/// Which ids are live: every id below `next_id` whose deleted bit is clear.
#[derive(Clone, Debug)]
pub struct LiveSet {
    /// Bit `id % 64` of word `id / 64` is set when `id` has been deleted.
    deleted: Vec<u64>,
    /// Ids `0..next_id` have been inserted.
    next_id: u64,
    /// Ids inserted and not deleted.
    live: u64,
}

impl LiveSet {
    /// The set after inserting ids `0..initial`.
    pub fn new(initial: u64) -> LiveSet {
        let mut set = LiveSet {
            deleted: Vec::new(),
            next_id: 0,
            live: 0,
        };
        set.insert_fresh(initial);
        set
    }

    /// The number of live ids.
    pub fn live(&self) -> u64 {
        self.live
    }

    /// Whether `id` was inserted and not deleted since.
    pub fn contains(&self, id: u64) -> bool {
        id < self.next_id && self.deleted[(id / 64) as usize] & (1 << (id % 64)) == 0
    }

    /// Records the insertion of `count` fresh ids and returns them.
    pub fn insert_fresh(&mut self, count: u64) -> Range<u64> {
        let ids = self.next_id..self.next_id + count;
        self.next_id = ids.end;
        self.live += count;
        self.deleted.resize(self.next_id.div_ceil(64) as usize, 0);
        ids
    }

    /// A live id chosen uniformly: uniform over `0..next_id`, rejecting deleted ids. The expected
    /// number of draws is `next_id / live` (close to 1 in the benchmark, where deletes only
    /// balance inserts). Panics if no id is live.
    pub fn pick_live(&self, rng: &mut SplitMix64) -> u64 {
        assert!(self.live > 0, "pick_live on an empty set");
        loop {
            let id = rng.below(self.next_id);
            if self.contains(id) {
                return id;
            }
        }
    }

    /// Appends `count` live ids chosen uniformly and independently (repeats allowed) to `out`.
    pub fn pick_live_many(&self, rng: &mut SplitMix64, count: usize, out: &mut Vec<u64>) {
        out.extend((0..count).map(|_| self.pick_live(rng)));
    }

    /// Chooses `count` distinct live ids uniformly, marks them deleted and appends them to `out`.
    /// Marking each id as soon as it is chosen is what makes the ids of one call distinct.
    /// Panics if fewer than `count` ids are live.
    pub fn delete_random(&mut self, rng: &mut SplitMix64, count: usize, out: &mut Vec<u64>) {
        assert!(count as u64 <= self.live, "deleting more ids than are live");
        for _ in 0..count {
            let id = self.pick_live(rng);
            self.deleted[(id / 64) as usize] |= 1 << (id % 64);
            self.live -= 1;
            out.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn sampler_never_returns_a_deleted_id() {
        let mut set = LiveSet::new(1_000);
        let mut rng = SplitMix64::new(1);
        let mut deleted = Vec::new();
        for _ in 0..3 {
            set.delete_random(&mut rng, 256, &mut deleted);
            set.insert_fresh(256);
        }
        let deleted: HashSet<u64> = deleted.into_iter().collect();
        assert_eq!(deleted.len(), 768);
        assert_eq!(set.live(), 1_000);
        let mut picked = Vec::new();
        set.pick_live_many(&mut rng, 100_000, &mut picked);
        assert!(picked.iter().all(|id| !deleted.contains(id) && *id < 1_768));
        assert!(deleted.iter().all(|id| !set.contains(*id)));
    }

    #[test]
    fn deletes_in_one_batch_are_distinct() {
        // Deleting all but one id of a small set forces many collisions.
        let mut set = LiveSet::new(300);
        let mut rng = SplitMix64::new(2);
        let mut batch = Vec::new();
        set.delete_random(&mut rng, 299, &mut batch);
        let distinct: HashSet<u64> = batch.iter().copied().collect();
        assert_eq!(distinct.len(), 299);
        assert_eq!(set.live(), 1);
        let survivor = (0..300).find(|id| !distinct.contains(id)).unwrap();
        assert_eq!(set.pick_live(&mut rng), survivor);
    }

    #[test]
    fn fresh_ids_follow_the_initial_ones() {
        let mut set = LiveSet::new(10);
        assert_eq!(set.insert_fresh(5), 10..15);
        assert!(set.contains(14) && !set.contains(15));
    }
}

//! The endpoint's next deadline, derived rather than kept (quinn's `TimerTable` idea): no
//! component stores "the next timer"; each reports the earliest of its own timers
//! (`SendSide::next_deadline`, `RecvSide::next_deadline`, `Peers::next_deadline`) and the
//! endpoint takes the minimum. A deadline that is not stored cannot be left stale by a path that
//! forgets to update it. Computing it walks the tables, so [`DeadlineCache`] keeps the answer
//! between changes, and the endpoint forgets it on every `&mut` entry (`endpoint.rs`).
//!
//! A walk of a table is a walk of every entry, and the answer is forgotten at every change:
//! with thousands of sends in flight (an MPI program that sends thousands of messages before
//! its peer receives them), each turn of the engine walked them all, each send's collections
//! too, and a receive took 26 us where it takes 2 (`perf`: `Collections::next_deadline` and
//! `SendSide::next_deadline`, a quarter of the engine's time). A large table therefore keeps
//! a [`DeadlineIndex`]: still derived, never trusted, only a guide to which entries to ask.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::slab::Key;
use crate::Nanos;

/// The earliest of the deadlines considered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Earliest(Option<Nanos>);

impl Earliest {
    /// Takes `deadline` into account (`None`: no timer runs).
    #[inline]
    pub(crate) fn consider(&mut self, deadline: Option<Nanos>) {
        if let Some(at) = deadline {
            self.0 = Some(self.0.map_or(at, |e| e.min(at)));
        }
    }

    pub(crate) fn get(self) -> Option<Nanos> {
        self.0
    }
}

/// The next deadline as last computed, valid until the state changes.
#[derive(Debug, Default)]
pub(crate) struct DeadlineCache(Cell<Option<Option<Nanos>>>);

impl DeadlineCache {
    /// The cached deadline, or `compute`'s answer, kept for the next call.
    pub(crate) fn get_or_compute(&self, compute: impl FnOnce() -> Option<Nanos>) -> Option<Nanos> {
        if let Some(cached) = self.0.get() {
            return cached;
        }
        let deadline = compute();
        self.0.set(Some(deadline));
        deadline
    }

    /// The state may change: the next question computes the deadline again.
    pub(crate) fn forget(&mut self) {
        self.0.set(None);
    }
}

/// Which entries of a table to ask for the earliest deadline, without walking it: a heap of
/// (deadline, entry) that may hold stale entries, checked against the table when they reach
/// the top, and the entries changed since the last question.
///
/// The table tells the index of every entry it hands out for changing (`touch`). Before an
/// answer, each touched entry's deadline is asked and pushed. So for every live entry with a
/// deadline, the heap holds one at least as early (an entry pushed when it last changed, or
/// one from before, earlier still): the top, once its deadline is confirmed by the table, is
/// the earliest. An entry whose deadline moved later, or went, or whose slot was freed, is
/// dropped when it reaches the top (and pushed again with its deadline, if it has one).
///
/// The heap holds each (deadline, entry) once: the deadline an entry was last pushed with is
/// kept (`pushed`), and a push of the same one is skipped. Without that, an entry whose
/// deadline moves later at every change (a peer's liveness probe, a keepalive from its last
/// frame) left a copy at every question, and each stale copy that reached the top pushed one
/// more of the current deadline: a ping-pong's heap held hundreds of copies of one peer, and
/// each question popped and pushed them all (10,000 instructions).
#[derive(Debug)]
pub(crate) struct DeadlineIndex<K> {
    heap: BinaryHeap<Reverse<(Nanos, u32)>>,
    /// By slot, the deadline the heap holds the entry's latest push with, plus one (0: none
    /// since it was popped or the heap was built again; zeroes, so that slots never used take
    /// no memory, as a table that grows as it fills takes none).
    pushed: Vec<Nanos>,
    touched: Vec<K>,
    is_touched: Vec<bool>,
}

/// Stale entries the heap may hold beyond the table's live ones before it is built again
/// from the table: bounds its memory when deadlines keep moving later (a stream's
/// retransmission timer, pushed again at every acknowledgement) while an earlier one stays on
/// top.
pub(crate) const STALE_DEADLINES_MAX: usize = 1024;

impl<K: Key> DeadlineIndex<K> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            heap: BinaryHeap::new(),
            pushed: vec![0; capacity],
            touched: Vec::new(),
            is_touched: vec![false; capacity],
        }
    }

    /// The entry `key` is being changed: its deadline may differ at the next question.
    #[inline]
    pub(crate) fn touch(&mut self, key: K) {
        let slot = key.slot() as usize;
        if let Some(touched) = self.is_touched.get_mut(slot) {
            if !*touched {
                *touched = true;
                self.touched.push(key);
            }
        }
    }

    /// Puts the entry in the heap with deadline `at`, unless it holds it so already (a
    /// deadline at the end of time, whose mark would read "none", is always pushed).
    fn push(&mut self, at: Nanos, slot: u32) {
        let mark = at.wrapping_add(1);
        let pushed = &mut self.pushed[slot as usize];
        if mark == 0 || *pushed != mark {
            *pushed = mark;
            self.heap.push(Reverse((at, slot)));
        }
    }

    /// Takes the top of the heap off (the caller peeked it).
    fn pop(&mut self) {
        if let Some(Reverse((at, slot))) = self.heap.pop() {
            let pushed = &mut self.pushed[slot as usize];
            if *pushed == at.wrapping_add(1) {
                *pushed = 0;
            }
        }
    }

    /// Pushes the deadline of every entry touched since the last question.
    fn push_touched(&mut self, deadline: &impl Fn(K) -> Option<Nanos>) {
        let mut touched = std::mem::take(&mut self.touched);
        for key in touched.drain(..) {
            self.is_touched[key.slot() as usize] = false;
            if let Some(at) = deadline(key) {
                self.push(at, key.slot());
            }
        }
        self.touched = touched;
    }

    /// Fills `due` (what it held is dropped), in slot order, with every entry whose deadline is
    /// at or before `now`: what a walk of the table that asks each entry finds, without the
    /// walk. Each is marked touched, as the caller is about to change it: its next deadline,
    /// or the one it keeps, is pushed at the next question. (Entries popped and not pushed
    /// again would be lost to the index while their timer still ran.)
    pub(crate) fn take_due(
        &mut self,
        now: Nanos,
        deadline: impl Fn(K) -> Option<Nanos>,
        due: &mut Vec<K>,
    ) {
        self.push_touched(&deadline);
        due.clear();
        while let Some(&Reverse((at, slot))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.pop();
            let key = K::from_slot(slot);
            match deadline(key) {
                Some(later) if later > now => self.push(later, slot),
                Some(_) if !self.is_touched[slot as usize] => {
                    self.touch(key);
                    due.push(key);
                }
                // Freed, or taken already through another copy of the same entry.
                _ => {}
            }
        }
        due.sort_unstable_by_key(|key| key.slot());
    }

    /// Pushes the touched entries, then builds the heap again from the table (`all` listing
    /// the `live` keys) when it holds more than `STALE_DEADLINES_MAX` stale entries. A table
    /// whose questions go elsewhere (the peers walked while few, `peers.rs`) calls it before
    /// `take_due`, which alone drops only the copies that came due.
    pub(crate) fn trim<I: Iterator<Item = K>>(
        &mut self,
        live: usize,
        deadline: &impl Fn(K) -> Option<Nanos>,
        all: impl FnOnce() -> I,
    ) {
        self.push_touched(deadline);
        if self.heap.len() > live + STALE_DEADLINES_MAX {
            // Only slots the heap holds have a record: a fill of the whole record would write
            // every page of it, those of slots never used too (a provider's 49,152 incoming
            // slots: 384 KiB resident after the first rebuild).
            for Reverse((_, slot)) in self.heap.drain() {
                self.pushed[slot as usize] = 0;
            }
            for key in all() {
                if let Some(at) = deadline(key) {
                    self.push(at, key.slot());
                }
            }
        }
    }

    /// Entries the heap holds, stale ones included.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.heap.len()
    }

    /// The earliest deadline of the table's `live` entries, `deadline` asking the table for an
    /// entry's (`None`: freed, or no timer), `all` listing the live keys (to build the heap
    /// again when it holds too many stale entries).
    pub(crate) fn earliest<I: Iterator<Item = K>>(
        &mut self,
        live: usize,
        deadline: impl Fn(K) -> Option<Nanos>,
        all: impl FnOnce() -> I,
    ) -> Option<Nanos> {
        self.trim(live, &deadline, all);
        // Each round confirms the top or drops it (pushing it again later, never earlier, than
        // it was): at most as many rounds as the heap holds entries.
        while let Some(&Reverse((at, slot))) = self.heap.peek() {
            let now_at = deadline(K::from_slot(slot));
            if now_at == Some(at) {
                return Some(at);
            }
            self.pop();
            if let Some(later) = now_at {
                self.push(later, slot);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_ignores_absent_timers() {
        let mut earliest = Earliest::default();
        assert_eq!(earliest.get(), None);
        earliest.consider(None);
        earliest.consider(Some(30));
        earliest.consider(Some(10));
        earliest.consider(None);
        earliest.consider(Some(20));
        assert_eq!(earliest.get(), Some(10));
    }

    /// The index answers what a walk of the table answers, through deadlines that move later,
    /// earlier, and go, and slots freed and used again.
    #[test]
    fn the_index_agrees_with_a_walk_of_the_table() {
        use crate::slab::SendKey;
        let mut table: Vec<Option<Nanos>> = vec![None; 8];
        let mut index = DeadlineIndex::<SendKey>::new(8);
        let walk = |table: &[Option<Nanos>]| table.iter().flatten().copied().min();
        let mut state = 0x9e37_79b9_u64;
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let slot = (state % 8) as usize;
            table[slot] = match (state >> 8) % 4 {
                0 => None,
                _ => Some((state >> 16) % 1000),
            };
            index.touch(SendKey::from_slot(slot as u32));
            let live = table.iter().filter(|d| d.is_some()).count();
            let answer = index.earliest(
                live,
                |key| table[key.slot() as usize],
                || (0..8).map(SendKey::from_slot),
            );
            assert_eq!(answer, walk(&table));
            assert!(index.heap.len() <= 8 + STALE_DEADLINES_MAX + 1);
        }
    }

    /// The due entries are those a walk finds due, each once, in slot order, through
    /// deadlines that move and entries the caller changes after taking them.
    #[test]
    fn the_due_entries_are_what_a_walk_finds_due() {
        use crate::slab::SendKey;
        let mut table: Vec<Option<Nanos>> = vec![None; 16];
        let mut index = DeadlineIndex::<SendKey>::new(16);
        let mut state = 0x2545_f491_u64;
        let mut due = Vec::new();
        for now in 0..5_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let slot = (state % 16) as usize;
            table[slot] = match (state >> 8) % 3 {
                0 => None,
                _ => Some(now + (state >> 16) % 50),
            };
            index.touch(SendKey::from_slot(slot as u32));
            index.take_due(now, |key| table[key.slot() as usize], &mut due);
            let walked: Vec<SendKey> = (0..16)
                .filter(|&s| table[s].is_some_and(|d| d <= now))
                .map(|s| SendKey::from_slot(s as u32))
                .collect();
            assert_eq!(due, walked);
            // The caller acts on them: half are rescheduled, half are finished.
            for (n, key) in due.iter().enumerate() {
                table[key.slot() as usize] = (n % 2 == 0).then_some(now + 7);
            }
        }
    }

    /// A rebuild of the heap writes the record of pushes only where the heap held entries:
    /// the pages of slots never used stay unwritten, as `new` left them.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_rebuild_leaves_the_record_of_slots_never_used_unwritten() {
        use crate::slab::SendKey;
        fn resident_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        const SLOTS: usize = 1 << 24; // a record of 128 MiB
        let mut table: Vec<Option<Nanos>> = vec![Some(0), Some(1)];
        let mut index = DeadlineIndex::<SendKey>::new(SLOTS);
        index.touch(SendKey::from_slot(0));
        let before = resident_kib();
        // Slot 0 stays on top while slot 1 moves later: its stale copies pile up until the
        // heap is built again.
        for step in 1..=(STALE_DEADLINES_MAX as u64 + 10) {
            table[1] = Some(step);
            index.touch(SendKey::from_slot(1));
            let answer = index.earliest(
                2,
                |key| table[key.slot() as usize],
                || (0..2).map(SendKey::from_slot),
            );
            assert_eq!(answer, Some(0));
        }
        assert!(
            index.held() < 2 + STALE_DEADLINES_MAX,
            "the heap was built again"
        );
        let grown = resident_kib().saturating_sub(before);
        assert!(grown < 32 * 1024, "{grown} KiB made resident");
    }

    #[test]
    fn the_cache_computes_once_until_forgotten() {
        let mut cache = DeadlineCache::default();
        let computed = Cell::new(0);
        let compute = || {
            computed.set(computed.get() + 1);
            Some(5)
        };
        assert_eq!(cache.get_or_compute(compute), Some(5));
        assert_eq!(cache.get_or_compute(compute), Some(5));
        assert_eq!(computed.get(), 1);
        cache.forget();
        assert_eq!(cache.get_or_compute(|| None), None);
        assert_eq!(
            cache.get_or_compute(compute),
            None,
            "no timer is an answer too"
        );
        assert_eq!(computed.get(), 1);
    }
}

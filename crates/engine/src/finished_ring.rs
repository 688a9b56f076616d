//! The ring of finished slots: the engine names each slot it completes, so a host with
//! thousands of operations in flight finds the finished ones without looking at every slot.
//!
//! A single-producer (the engine), single-consumer (one host that reads it: the libfabric
//! provider) ring of slot numbers. A host that never reads it (the library's own requests,
//! which each poll their slot) lets it fill; the engine then drops the name and marks the ring
//! as having lost some, and a reader that finds the mark looks at every slot once, as it would
//! without the ring. The ring may name a slot whose operation the host took back some other
//! way, or twice: a reader asks the slot itself before it believes the ring.

use crate::sync::{AtomicU32, AtomicUsize, Ordering};

pub(crate) struct FinishedRing {
    entries: Box<[AtomicU32]>,
    /// Next entry the host reads; only the host writes it.
    head: AtomicUsize,
    /// Next entry the engine writes; only the engine writes it.
    tail: AtomicUsize,
    /// 1 once the engine dropped a name for want of room, until the host takes the mark.
    lost: AtomicU32,
}

impl FinishedRing {
    /// A ring of twice `slots` names: every slot finished once, and as many names of slots
    /// taken back and finished again before the host read the ring.
    pub(crate) fn for_slots(slots: usize) -> Self {
        Self {
            entries: (0..2 * slots.max(1)).map(|_| AtomicU32::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lost: AtomicU32::new(0),
        }
    }

    /// Engine side: names `slot` as finished, or marks the ring as having lost a name.
    pub(crate) fn push(&self, slot: u32) {
        let tail = self.tail.load(Ordering::Relaxed);
        // Acquire pairs with the host's release in `pop`: entries before the head were read.
        let head = self.head.load(Ordering::Acquire);
        if tail - head >= self.entries.len() {
            self.lost.store(1, Ordering::Release);
            return;
        }
        self.entries[tail % self.entries.len()].store(slot, Ordering::Relaxed);
        // Release: the entry, and the slot's DONE state stored before it, are visible to the
        // host once it sees the new tail.
        self.tail.store(tail + 1, Ordering::Release);
    }

    /// Host side: the next slot named, if any.
    pub(crate) fn pop(&self) -> Option<u32> {
        let head = self.head.load(Ordering::Relaxed);
        if head == self.tail.load(Ordering::Acquire) {
            return None;
        }
        let slot = self.entries[head % self.entries.len()].load(Ordering::Relaxed);
        // Release: this read happens before the engine reuses the entry.
        self.head.store(head + 1, Ordering::Release);
        Some(slot)
    }

    /// Host side: true (once) if the engine dropped names since the last call.
    pub(crate) fn take_lost(&self) -> bool {
        // A load first: the host asks at every poll, and a swap would write the line each time.
        self.lost.load(Ordering::Acquire) == 1 && self.lost.swap(0, Ordering::AcqRel) == 1
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_come_out_in_order_and_a_full_ring_marks_the_loss() {
        let ring = FinishedRing::for_slots(2);
        for slot in [3, 1, 2, 0] {
            ring.push(slot);
        }
        ring.push(9);
        assert!(ring.take_lost());
        assert!(!ring.take_lost(), "the mark is taken once");
        let names: Vec<u32> = std::iter::from_fn(|| ring.pop()).collect();
        assert_eq!(names, [3, 1, 2, 0]);
        ring.push(5);
        assert_eq!((ring.pop(), ring.pop()), (Some(5), None));
        assert!(!ring.take_lost());
    }
}

//! The host descriptor table (EMP section 3.3): a fixed array of slots in engine memory, each
//! owned by the host or by the engine, handed over by a state word. The host fills a free slot,
//! flips it to POSTED and pushes its index on the submission ring; the engine posts it to the
//! protocol core and, when the operation completes, writes the result and flips the slot to DONE.
//! The host learns of completion by polling the slot's state: no interrupt, no system call.
//!
//! Slot layout (one 64-byte-aligned slot; `docs/runtime.md`, "Descriptor table", lists it):
//! `state: u32` (FREE, POSTED, DONE), then the descriptor: operation, peer, tag, scatter/gather
//! list of up to 16 (region, offset, length) segments, and the result (status peer, tag, length,
//! error code) written by the engine.

use crate::finished_ring::FinishedRing;
use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering, SharedRef, UnsafeCell};
use nicmsg_proto::{Claim, Context, SgList, TagMatch};
use std::net::SocketAddr;

/// EMP's descriptor count: enough outstanding operations for typical MPI codes.
pub const DEFAULT_SLOTS: usize = 640;
/// Peer value meaning "any" in a descriptor.
pub const ANY: u32 = u32::MAX;

/// What a posted operation's message is matched by, and what a send carries besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Envelope {
    /// The matching context: the application's, or the library's own (barrier).
    pub context: Context,
    /// A send's tag; the tag a receive or probe wants, in the bits `ignore` does not set.
    pub tag: u64,
    pub ignore: u64,
    /// A send's immediate data, delivered with the receive's completion.
    pub immediate: Option<u32>,
    /// The claimed message a `RecvClaimed` or `DiscardClaimed` names.
    pub claim: Option<Claim>,
    /// A send that completes only once its receiver holds the message
    /// (`nicmsg_proto::SendOptions::confirmed`).
    pub confirmed: bool,
    /// A send nobody waits for, whose bytes the host keeps until it completes
    /// (`nicmsg_proto::SendOptions::unwaited`).
    pub unwaited: bool,
}

impl Envelope {
    /// A send's envelope.
    pub fn send(context: Context, tag: u64) -> Self {
        Self {
            context,
            tag,
            ignore: 0,
            immediate: None,
            claim: None,
            confirmed: false,
            unwaited: false,
        }
    }

    /// A receive's or probe's envelope.
    pub fn matching(context: Context, tag: TagMatch) -> Self {
        let (tag, ignore) = tag.to_masked();
        Self {
            context,
            tag,
            ignore,
            immediate: None,
            claim: None,
            confirmed: false,
            unwaited: false,
        }
    }

    /// The envelope of a receive or discard of the message `claim` names.
    pub fn claimed(claim: Claim) -> Self {
        Self {
            claim: Some(claim),
            ..Self::default()
        }
    }

    /// The tags a receive or probe accepts.
    pub fn tag_match(&self) -> TagMatch {
        TagMatch::from_masked(self.tag, self.ignore)
    }
}

/// Owner/state of a slot.
pub mod state {
    /// Free, owned by the host.
    pub const FREE: u32 = 0;
    /// Filled by the host, owned by the engine.
    pub const POSTED: u32 = 1;
    /// Completed: result valid, owned by the host again.
    pub const DONE: u32 = 2;
}

/// What a descriptor asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum OpCode {
    #[default]
    Send = 1,
    Recv = 2,
    /// Blocking probe: completes when a matching message is available.
    Probe = 3,
    /// Non-blocking probe: completes at once, with `NotFound` if nothing matches.
    IProbe = 4,
    /// Matched probe (`claim.rs` of the protocol): a non-blocking probe that also takes the
    /// message it finds and reports the claim naming it.
    Claim = 5,
    /// Receive of the claimed message the envelope's claim names.
    RecvClaimed = 6,
    /// Drops the claimed message the envelope's claim names; completes at once.
    DiscardClaimed = 7,
}

/// What the engine reports of an operation in its descriptor. These are not the C ABI's result
/// codes: the API maps each outcome to its error (`nicmsg`'s `error::from_outcome`, a match
/// the compiler checks is complete), and the error to its C code in the one table of codes
/// (`nicmsg::Code`), so no number here has to agree with `include/nicmsg.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum ResultCode {
    #[default]
    Success,
    Truncated,
    PeerUnreachable,
    Cancelled,
    InvalidRank,
    TableFull,
    BadBuffer,
    /// A non-blocking probe found nothing (not an error).
    NotFound,
    /// The claim names no claimed message (received or discarded already, or its sender
    /// failed).
    UnknownClaim,
}

/// One operation as the host describes it, and its result as the engine reports it.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct Descriptor {
    pub op: OpCode,
    pub peer: u32,
    pub envelope: Envelope,
    pub buffer: SgList,
    /// Written by the engine before DONE.
    pub result: ResultCode,
    pub status_peer: u32,
    pub status_tag: u64,
    pub status_len: u64,
    pub status_immediate: Option<u32>,
    /// A `Claim`'s result: the claim naming the message it took.
    pub status_claim: Option<Claim>,
    /// For truncation: the receive buffer's length.
    pub buffer_len: u64,
    /// Open mode (peers by address): for a send, where it goes (`peer` is then ignored); for
    /// a receive, written by the engine: where the message came from.
    pub address: Option<SocketAddr>,
}

/// What the host reads back from a completed slot: the result and what describes it, without
/// the scatter/gather list (copying the whole descriptor back cost a 450-byte copy per
/// operation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    pub op: OpCode,
    pub peer: u32,
    pub result: ResultCode,
    pub status_peer: u32,
    pub status_tag: u64,
    pub status_len: u64,
    /// The received message's immediate data, if it carried any.
    pub status_immediate: Option<u32>,
    /// A `Claim`'s result: the claim naming the message it took.
    pub status_claim: Option<Claim>,
    pub buffer_len: u64,
    /// Open mode: the source of a received message.
    pub address: Option<SocketAddr>,
}

impl Outcome {
    fn of(d: &Descriptor) -> Self {
        Self {
            op: d.op,
            peer: d.peer,
            result: d.result,
            status_peer: d.status_peer,
            status_tag: d.status_tag,
            status_len: d.status_len,
            status_immediate: d.status_immediate,
            status_claim: d.status_claim,
            buffer_len: d.buffer_len,
            address: d.address,
        }
    }
}

#[repr(C, align(64))]
struct Slot {
    state: AtomicU32,
    descriptor: UnsafeCell<Descriptor>,
}

/// Command on the submission ring: a slot index, with this bit set for "cancel that slot".
pub const CANCEL_BIT: u32 = 1 << 31;

/// The table plus the single-producer (host) / single-consumer (engine) submission ring.
pub struct Table {
    slots: Box<[Slot]>,
    ring: Box<[AtomicU32]>,
    ring_head: AtomicUsize,
    ring_tail: AtomicUsize,
    /// Bumped by the engine after every completion: a futex word for blocking waits
    /// ([`Table::completion_count`], [`Table::wait_for_completion_after`]).
    completions: AtomicU32,
    /// Made readable after a completion for a host sleeping in its own poll loop.
    signal: crate::signal::CompletionSignal,
    /// Peers the engine has declared unreachable, a bit per rank: the host refuses sends to
    /// them at once instead of posting operations that can only fail.
    unreachable: Box<[AtomicU64]>,
    /// The slots the engine completed, in order, for a host that reads them
    /// ([`Table::next_finished`]).
    finished: FinishedRing,
}

// SAFETY: a slot's descriptor is accessed only by its current owner, as recorded in `state`
// with release/acquire ordering at every hand-over. (`Send` needs no such promise: the table
// owns plain data and atomics, so it is `Send` by itself.)
unsafe impl Sync for Table {}

impl Table {
    /// A table of `slots` descriptors for a job of `ranks` ranks.
    pub fn new(slots: usize, ranks: u32) -> Self {
        let slots: Box<[Slot]> = (0..slots)
            .map(|_| Slot {
                state: AtomicU32::new(state::FREE),
                descriptor: UnsafeCell::new(Descriptor::default()),
            })
            .collect();
        // Each slot has at most one post and one cancel outstanding.
        let ring = (0..2 * slots.len()).map(|_| AtomicU32::new(0)).collect();
        let finished = FinishedRing::for_slots(slots.len());
        Self {
            slots,
            ring,
            ring_head: AtomicUsize::new(0),
            ring_tail: AtomicUsize::new(0),
            completions: AtomicU32::new(0),
            signal: crate::signal::CompletionSignal::default(),
            unreachable: (0..(ranks as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            finished,
        }
    }

    /// The signal a host sleeping in its own poll loop arms: readable after the next
    /// completion. Arm it, then compare [`Table::completion_count`] with the count read before
    /// the last look at the slots: sleep only if it did not change.
    pub fn completion_signal(&self) -> &crate::signal::CompletionSignal {
        &self.signal
    }

    /// How many completions the engine has made (wrapping): a host reads it before checking
    /// its slot, then sleeps on it with [`Table::wait_for_completion_after`].
    pub fn completion_count(&self) -> u32 {
        self.completions.load(Ordering::SeqCst)
    }

    /// Host side: sleeps until the completion count is no longer `seen` (or a spurious
    /// wake-up). The engine wakes sleepers only when told some exist, so the caller announces
    /// itself first (see `ThreadEngine::block_until`).
    #[cfg(not(loom))]
    pub fn wait_for_completion_after(&self, seen: u32) {
        atomic_wait::wait(&self.completions, seen);
    }

    /// Engine side: wakes every host sleeping in [`Table::wait_for_completion_after`].
    #[cfg(not(loom))]
    pub fn wake_waiting_hosts(&self) {
        atomic_wait::wake_all(&self.completions);
    }

    /// Engine side, when it dies: counts a completion that did not happen, so that no host
    /// goes to sleep on the count it just read, and wakes those already asleep.
    #[cfg(not(loom))]
    pub fn wake_all_for_failure(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
        self.signal.notify();
        self.wake_waiting_hosts();
    }

    /// Engine side: `rank` is declared unreachable (for good).
    pub fn mark_unreachable(&self, rank: u32) {
        if let Some(word) = self.unreachable.get(rank as usize / 64) {
            word.fetch_or(1 << (rank % 64), Ordering::Release);
        }
    }

    /// Host side: the engine declared `rank` unreachable.
    pub fn is_unreachable(&self, rank: u32) -> bool {
        self.unreachable
            .get(rank as usize / 64)
            .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (rank % 64)) != 0)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn state(&self, slot: u32) -> u32 {
        self.slots[slot as usize].state.load(Ordering::Acquire)
    }

    /// Host side: fills a FREE slot and hands it to the engine.
    ///
    /// # Safety
    /// The caller is the single host thread and `slot` is FREE (owned by it).
    pub unsafe fn post(&self, slot: u32, descriptor: Descriptor) {
        // SAFETY: forwarded.
        unsafe { self.post_with(slot, |d| *d = descriptor) }
    }

    /// Host side: fills a FREE slot in place (the descriptor is not built elsewhere and copied
    /// in) and hands it to the engine. Every field the engine reads must be written by `fill`.
    ///
    /// # Safety
    /// The caller is the single host thread and `slot` is FREE (owned by it).
    pub unsafe fn post_with(&self, slot: u32, fill: impl FnOnce(&mut Descriptor)) {
        let entry = &self.slots[slot as usize];
        debug_assert_eq!(entry.state.load(Ordering::Relaxed), state::FREE);
        // SAFETY: FREE slots are the host's alone: the engine's last access to this one came
        // before it flipped the slot to DONE, which the host saw (acquire) before freeing it.
        entry.descriptor.with_mut(|d| fill(unsafe { &mut *d }));
        entry.state.store(state::POSTED, Ordering::Release);
        self.push(slot);
    }

    /// Host side: asks the engine to cancel the operation in `slot` (it may be too late).
    ///
    /// # Safety
    /// The caller is the single host thread.
    pub unsafe fn request_cancel(&self, slot: u32) {
        self.push(slot | CANCEL_BIT);
    }

    /// Host side: reads the result of a DONE slot and frees it.
    ///
    /// # Safety
    /// The caller is the single host thread and `state(slot)` returned DONE.
    pub unsafe fn take_result(&self, slot: u32) -> Outcome {
        let entry = &self.slots[slot as usize];
        // SAFETY: DONE slots are the host's again: the caller's `state` load (acquire) saw the
        // engine's DONE store (release), which follows its last access.
        let outcome = entry.descriptor.with(|d| Outcome::of(unsafe { &*d }));
        entry.state.store(state::FREE, Ordering::Release);
        outcome
    }

    fn push(&self, command: u32) {
        // Only the host writes the tail. Acquire on the head pairs with the engine's release in
        // `pop`: the engine has read every entry before the head, so they may be overwritten.
        let tail = self.ring_tail.load(Ordering::Relaxed);
        let head = self.ring_head.load(Ordering::Acquire);
        assert!(
            tail - head < self.ring.len(),
            "submission ring overflow: more commands than slots allow"
        );
        self.ring[tail % self.ring.len()].store(command, Ordering::Relaxed);
        // Release: the entry, and the descriptor a post filled before it, are visible to the
        // engine once it sees the new tail.
        self.ring_tail.store(tail + 1, Ordering::Release);
    }

    /// Engine side: true if a command waits.
    pub fn has_commands(&self) -> bool {
        self.ring_head.load(Ordering::Relaxed) != self.ring_tail.load(Ordering::Acquire)
    }

    /// Engine side: next command, if any.
    pub fn pop(&self) -> Option<u32> {
        // Only the engine writes the head. Acquire on the tail pairs with the host's release in
        // `push`: the entries before it, and the descriptors they name, are written.
        let head = self.ring_head.load(Ordering::Relaxed);
        if head == self.ring_tail.load(Ordering::Acquire) {
            return None;
        }
        let command = self.ring[head % self.ring.len()].load(Ordering::Relaxed);
        // Release: this read of the entry happens before the host reuses its place.
        self.ring_head.store(head + 1, Ordering::Release);
        Some(command)
    }

    /// Engine side: the descriptor of a POSTED slot.
    ///
    /// # Safety
    /// The caller is the engine and the slot is POSTED (owned by it).
    /// (A plain reference in a normal build; under loom, a guard that loom counts as a read
    /// until dropped.)
    pub unsafe fn descriptor(&self, slot: u32) -> SharedRef<'_, Descriptor> {
        // SAFETY: POSTED slots are the engine's alone; the host writes it again only after the
        // engine flips it to DONE, which the engine does after its last read. The host's writes
        // are visible: the engine took the slot from the ring, whose tail it loaded (acquire)
        // after the host stored it (release) behind the descriptor.
        unsafe { self.slots[slot as usize].descriptor.shared() }
    }

    /// Engine side: writes the result and hands the slot back to the host.
    ///
    /// # Safety
    /// The caller is the engine and the slot is POSTED (owned by it).
    pub unsafe fn complete(&self, slot: u32, fill: impl FnOnce(&mut Descriptor)) {
        let entry = &self.slots[slot as usize];
        // SAFETY: POSTED slots are the engine's alone (the caller's contract); the host reads
        // the result only after seeing the DONE store below (release), which follows this write.
        entry.descriptor.with_mut(|d| fill(unsafe { &mut *d }));
        entry.state.store(state::DONE, Ordering::Release);
        self.finished.push(slot);
        self.completions.fetch_add(1, Ordering::SeqCst);
        self.signal.notify();
    }

    /// Host side: the next slot the engine completed, in the order it did (`finished_ring.rs`).
    /// The slot may have been taken back since, or reused: ask its state before believing it.
    ///
    /// # Safety
    /// The caller is the single host thread that reads the finished slots.
    pub unsafe fn next_finished(&self) -> Option<u32> {
        self.finished.pop()
    }

    /// Host side: true (once) if slots completed since the last call were not named by
    /// [`Table::next_finished`] (nobody read the ring and it filled): the reader looks at every
    /// slot of its own once.
    ///
    /// # Safety
    /// As for [`Table::next_finished`].
    pub unsafe fn finished_lost(&self) -> bool {
        self.finished.take_lost()
    }
}

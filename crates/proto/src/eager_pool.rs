//! The buffers a receiver keeps for its senders' unexpected eager messages (BIP's
//! receiver-bounded buffers), of both credit classes (`credits.rs`): for each sender,
//! `eager_credits_per_peer` buffers of `eager_limit` bytes and `small_credits_per_peer` of
//! [`SMALL_MESSAGE_MAX`] bytes. All allocated at start-up; pages are touched only as messages
//! fill them. Which of a sender's buffers are in use is part of its state
//! (`Peer::eager_buffers_used`, `Peer::small_buffers_used`).
//!
//! A buffer is named by one slot number: the eager buffers of every sender first, then the
//! small ones.

use crate::credits::{CreditClass, SMALL_MESSAGE_MAX};
use crate::peers::Peers;
use crate::usage::TableUsage;
use crate::{Config, Rank};

/// The buffers of one class, `per_peer` of `len` bytes for each sender.
#[derive(Debug)]
struct Buffers {
    bytes: Vec<u8>,
    len: usize,
    per_peer: u32,
}

impl Buffers {
    fn new(senders: u32, per_peer: u32, len: usize) -> Self {
        Self {
            bytes: vec![0; senders as usize * per_peer as usize * len],
            len,
            per_peer,
        }
    }

    fn count(&self) -> u32 {
        (self.bytes.len() / self.len.max(1)) as u32
    }
}

#[derive(Debug)]
pub(crate) struct EagerPool {
    eager: Buffers,
    small: Buffers,
    usage: TableUsage,
}

impl EagerPool {
    /// The buffers for the `senders` ranks of a job.
    pub(crate) fn new(config: &Config, senders: u32) -> Self {
        let eager = Buffers::new(
            senders,
            config.eager_credits_per_peer,
            config.eager_limit as usize,
        );
        let small = Buffers::new(
            senders,
            config.small_credits_per_peer,
            SMALL_MESSAGE_MAX as usize,
        );
        let total = (eager.count() + small.count()) as usize;
        Self {
            eager,
            small,
            usage: TableUsage::new(total),
        }
    }

    fn buffers(&self, class: CreditClass) -> &Buffers {
        match class {
            CreditClass::Eager => &self.eager,
            CreditClass::Small => &self.small,
        }
    }

    /// The first slot of `class`.
    fn first_slot(&self, class: CreditClass) -> u32 {
        match class {
            CreditClass::Eager => 0,
            CreditClass::Small => self.eager.count(),
        }
    }

    /// The class of `slot` and its place among the buffers of that class.
    fn locate(&self, slot: u32) -> (CreditClass, u32) {
        if slot < self.eager.count() {
            (CreditClass::Eager, slot)
        } else {
            (CreditClass::Small, slot - self.eager.count())
        }
    }

    /// True if `peer` has a buffer of `class` free.
    pub(crate) fn has_free(&self, peer: Rank, class: CreditClass, peers: &Peers) -> bool {
        let used = used_by(peers, peer, class);
        (!used).trailing_zeros() < self.buffers(class).per_peer
    }

    /// Takes one of `peer`'s buffers of `class`; its slot, or `None` if all are in use
    /// (credits guarantee one unless the sender broke the protocol).
    pub(crate) fn assign(
        &mut self,
        peer: Rank,
        class: CreditClass,
        peers: &mut Peers,
    ) -> Option<u32> {
        let per_peer = self.buffers(class).per_peer;
        let used = used_mut(peers, peer, class);
        let free = (!*used).trailing_zeros();
        if free >= per_peer {
            return None;
        }
        *used |= 1 << free;
        self.usage.set(self.usage.in_use + 1);
        Some(self.first_slot(class) + peer * per_peer + free)
    }

    /// Frees buffer `slot` (its message was delivered, truncated, withdrawn or dropped).
    pub(crate) fn release(&mut self, slot: u32, peers: &mut Peers) {
        let (class, index) = self.locate(slot);
        let per_peer = self.buffers(class).per_peer;
        let (peer, bit) = (index / per_peer, index % per_peer);
        let used = used_mut(peers, peer, class);
        debug_assert!(*used & (1 << bit) != 0, "buffer {slot} not in use");
        *used &= !(1 << bit);
        self.usage.set(self.usage.in_use - 1);
    }

    /// The bytes of buffer `slot`.
    pub(crate) fn buffer(&self, slot: u32) -> &[u8] {
        let (class, index) = self.locate(slot);
        let buffers = self.buffers(class);
        let start = index as usize * buffers.len;
        &buffers.bytes[start..start + buffers.len]
    }

    /// Stores `bytes` at `offset` of buffer `slot`; the caller checked they fit the message,
    /// and the message its buffer.
    pub(crate) fn write(&mut self, slot: u32, offset: u64, bytes: &[u8]) {
        let (class, index) = self.locate(slot);
        let buffers = match class {
            CreditClass::Eager => &mut self.eager,
            CreditClass::Small => &mut self.small,
        };
        let start = index as usize * buffers.len + offset as usize;
        buffers.bytes[start..start + bytes.len()].copy_from_slice(bytes);
    }

    pub(crate) fn usage(&self) -> TableUsage {
        self.usage
    }
}

fn used_by(peers: &Peers, peer: Rank, class: CreditClass) -> u64 {
    match class {
        CreditClass::Eager => peers[peer].eager_buffers_used,
        CreditClass::Small => peers[peer].small_buffers_used,
    }
}

fn used_mut(peers: &mut Peers, peer: Rank, class: CreditClass) -> &mut u64 {
    match class {
        CreditClass::Eager => &mut peers[peer].eager_buffers_used,
        CreditClass::Small => &mut peers[peer].small_buffers_used,
    }
}

//! The buffers a receiver keeps for its senders' unexpected eager messages (BIP's
//! receiver-bounded buffers), of every credit class (`credits.rs`): for each sender,
//! `eager_credits_per_peer` buffers of `eager_limit` bytes, `small_credits_per_peer` of
//! 256 bytes and `medium_credits_per_peer` of 4 KiB. All allocated at start-up; pages are
//! touched only as messages fill them. Which of a sender's buffers are in use is part of its
//! state (`Peer::buffers_used`).
//!
//! A buffer is named by one slot number: the buffers of every sender of the first class
//! (eager), then those of the next, in the order of `CreditClass::ALL`.

use crate::copy::copy_bytes;
use crate::credits::{CreditClass, PerClass};
use crate::peers::Peers;
use crate::usage::TableUsage;
use crate::{Config, Rank};

/// The buffers of one class, `per_peer` of `len` bytes for each sender.
#[derive(Debug)]
struct Buffers {
    bytes: Vec<u8>,
    len: usize,
    per_peer: u32,
    /// The first slot of the class.
    first_slot: u32,
    count: u32,
}

impl Buffers {
    fn new(senders: u32, per_peer: u32, len: usize, first_slot: u32) -> Self {
        let count = senders * per_peer;
        Self {
            bytes: vec![0; count as usize * len],
            len,
            per_peer,
            first_slot,
            count,
        }
    }

    fn range(&self, index: u32) -> std::ops::Range<usize> {
        let start = index as usize * self.len;
        start..start + self.len
    }
}

#[derive(Debug)]
pub(crate) struct EagerPool {
    classes: PerClass<Buffers>,
    usage: TableUsage,
}

impl EagerPool {
    /// The buffers for the `senders` ranks of a job.
    pub(crate) fn new(config: &Config, senders: u32) -> Self {
        let mut first_slot = 0;
        let classes = CreditClass::ALL.map(|class| {
            let len = class.buffer_len(config) as usize;
            let buffers = Buffers::new(senders, class.per_peer(config), len, first_slot);
            first_slot += buffers.count;
            buffers
        });
        Self {
            classes: PerClass(classes),
            usage: TableUsage::new(first_slot as usize),
        }
    }

    /// The class of `slot` and its place among the buffers of that class.
    fn locate(&self, slot: u32) -> (CreditClass, u32) {
        let class = CreditClass::ALL
            .into_iter()
            .rev()
            .find(|&class| slot >= self.classes[class].first_slot)
            .unwrap_or(CreditClass::Eager);
        (class, slot - self.classes[class].first_slot)
    }

    /// True if `peer` has a buffer of `class` free.
    #[cfg(test)]
    pub(crate) fn has_free(&self, peer: Rank, class: CreditClass, peers: &Peers) -> bool {
        (!peers[peer].buffers_used[class]).trailing_zeros() < self.classes[class].per_peer
    }

    /// Takes one of `peer`'s buffers of `class`; its slot, or `None` if all are in use
    /// (credits guarantee one unless the sender broke the protocol).
    pub(crate) fn assign(
        &mut self,
        peer: Rank,
        class: CreditClass,
        peers: &mut Peers,
    ) -> Option<u32> {
        let buffers = &self.classes[class];
        let used = &mut peers[peer].buffers_used[class];
        let free = (!*used).trailing_zeros();
        if free >= buffers.per_peer {
            return None;
        }
        *used |= 1 << free;
        self.usage.set(self.usage.in_use + 1);
        Some(buffers.first_slot + peer * buffers.per_peer + free)
    }

    /// Frees buffer `slot` (its message was delivered, truncated, withdrawn or dropped).
    pub(crate) fn release(&mut self, slot: u32, peers: &mut Peers) {
        let (class, index) = self.locate(slot);
        let per_peer = self.classes[class].per_peer;
        let (peer, bit) = (index / per_peer, index % per_peer);
        let used = &mut peers[peer].buffers_used[class];
        debug_assert!(*used & (1 << bit) != 0, "buffer {slot} not in use");
        *used &= !(1 << bit);
        self.usage.set(self.usage.in_use - 1);
    }

    /// The bytes of buffer `slot`.
    pub(crate) fn buffer(&self, slot: u32) -> &[u8] {
        let (class, index) = self.locate(slot);
        let buffers = &self.classes[class];
        &buffers.bytes[buffers.range(index)]
    }

    /// Stores `bytes` at `offset` of buffer `slot`; the caller checked they fit the message,
    /// and the message its buffer.
    pub(crate) fn write(&mut self, slot: u32, offset: u64, bytes: &[u8]) {
        let (class, index) = self.locate(slot);
        let buffers = &mut self.classes[class];
        let start = buffers.range(index).start + offset as usize;
        copy_bytes(&mut buffers.bytes[start..start + bytes.len()], bytes);
    }

    pub(crate) fn usage(&self) -> TableUsage {
        self.usage
    }
}

//! The two classes of eager credits (BIP's receiver-bounded buffers) and their cumulative
//! counts as frames carry them.
//!
//! A receiver keeps, for each sender, `eager_credits_per_peer` buffers of `eager_limit` bytes
//! and `small_credits_per_peer` buffers of [`SMALL_MESSAGE_MAX`] bytes. A message of at most
//! that many bytes (one sent from the sender's copy, its send complete at once) spends a small
//! credit, every longer eager message an eager one; both ends tell the class from the
//! message's length alone, so no frame needs to say it (but a CANCEL, whose receiver may never
//! have seen the message: flag `SMALL_CREDIT`).
//!
//! Why two classes: a sender of short messages whose sends complete at once is held back only
//! by credits, and an eager credit is a buffer of the eager limit (256 KiB on the libfabric
//! provider), so eight of them were all a stream of 8-byte messages could have in flight. The
//! receiver, posting one receive at a time, ran dry between credit returns: 8-byte
//! `NPopenmpi -s` 4.0 us a message with 8 credits, 2.6 us with 32 (eager limit 64 KiB,
//! medians of five alternations). Thirty-two buffers of 256 bytes cost a receiver 8 KiB per
//! sender, not 8 MiB.
//!
//! A short message never falls back on an eager credit: the receiver could then not tell
//! which buffer it holds, and a small buffer might not be free for it.

use crate::state::Core;
use crate::Config;
use std::ops::{Index, IndexMut};

/// The longest message that spends a small credit: what a frame carries inline, so its send
/// completed from the sender's copy (`ops::sent_from_copy`).
pub const SMALL_MESSAGE_MAX: u64 = crate::transmit::INLINE_PAYLOAD_MAX as u64;

/// Which of a receiver's buffers an eager message may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreditClass {
    /// A buffer of `eager_limit` bytes.
    Eager = 0,
    /// A buffer of [`SMALL_MESSAGE_MAX`] bytes.
    Small = 1,
}

impl CreditClass {
    pub(crate) const ALL: [Self; 2] = [Self::Eager, Self::Small];

    /// The class an eager message of `len` bytes spends: small if it was sent from a copy.
    pub(crate) fn of(len: u64) -> Self {
        if crate::ops::sent_from_copy(len) {
            Self::Small
        } else {
            Self::Eager
        }
    }

    /// The buffers of this class a receiver keeps per sender: a sender's credits.
    pub(crate) fn per_peer(self, config: &Config) -> u32 {
        match self {
            Self::Eager => config.eager_credits_per_peer,
            Self::Small => config.small_credits_per_peer,
        }
    }
}

/// One value per credit class, indexed by the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PerClass<T>(pub [T; 2]);

impl<T> Index<CreditClass> for PerClass<T> {
    type Output = T;
    fn index(&self, class: CreditClass) -> &T {
        &self.0[class as usize]
    }
}

impl<T> IndexMut<CreditClass> for PerClass<T> {
    fn index_mut(&mut self, class: CreditClass) -> &mut T {
        &mut self.0[class as usize]
    }
}

/// Cumulative, wrapping counts of both classes: credits spent, returned, given or told. On the
/// wire (`aux`) the eager count is the low 16 bits and the small count the high 16. 16 bits
/// wrap safely for counts that are fresh, as at most 64 credits of a class are outstanding: a
/// count is taken only if it moves the sender's forward by no more than it has outstanding.
/// A frame delayed past some 65,000 later credits of its class could pass that test; it would
/// make the sender spend credits the receiver has not freed, which the receiver answers as
/// any message without a buffer (WAIT, a retry later): slower, never a lost message.
pub(crate) type CreditCounts = PerClass<u16>;

impl CreditCounts {
    pub(crate) fn from_aux(aux: u32) -> Self {
        PerClass([aux as u16, (aux >> 16) as u16])
    }

    pub(crate) fn to_aux(self) -> u32 {
        u32::from(self[CreditClass::Eager]) | (u32::from(self[CreditClass::Small]) << 16)
    }

    pub(crate) fn add_one(&mut self, class: CreditClass) {
        self[class] = self[class].wrapping_add(1);
    }

    /// How far `self` is ahead of `earlier` in `class`.
    pub(crate) fn ahead_of(self, earlier: Self, class: CreditClass) -> u16 {
        self[class].wrapping_sub(earlier[class])
    }
}

impl Core {
    /// Credits not settled with live peers, both classes, both directions: spent on messages
    /// to a peer and not returned, plus returned to a peer and not yet told. Zero once an
    /// exchange that lost no frame has gone quiet (the simulator checks it); a lost frame that
    /// carried a count leaves it unsettled until a later frame carries it again.
    pub(crate) fn credits_unsettled(&self) -> u64 {
        let mut unsettled = 0;
        for peer in self.peers.in_use() {
            let state = &self.peers[peer];
            if state.unreachable {
                continue;
            }
            for class in CreditClass::ALL {
                let spent = state.credits_spent.ahead_of(state.credits_returned, class);
                let untold = state.credits_given.ahead_of(state.credits_reported, class);
                unsettled += u64::from(spent) + u64::from(untold);
            }
        }
        unsettled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cross_the_wire_and_wrap_per_class() {
        let counts = PerClass([u16::MAX, 7]);
        assert_eq!(CreditCounts::from_aux(counts.to_aux()), counts);
        assert_eq!(counts.to_aux(), 0x0007_ffff, "eager low, small high");
        let mut later = counts;
        later.add_one(CreditClass::Eager);
        later.add_one(CreditClass::Small);
        assert_eq!(later[CreditClass::Eager], 0, "wraps");
        assert_eq!(later.ahead_of(counts, CreditClass::Eager), 1);
        assert_eq!(later.ahead_of(counts, CreditClass::Small), 1);
    }

    #[test]
    fn messages_sent_from_copies_spend_small_credits() {
        assert_eq!(CreditClass::of(0), CreditClass::Small);
        assert_eq!(CreditClass::of(SMALL_MESSAGE_MAX), CreditClass::Small);
        assert_eq!(CreditClass::of(SMALL_MESSAGE_MAX + 1), CreditClass::Eager);
    }
}

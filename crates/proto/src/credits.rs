//! The three classes of eager credits (BIP's receiver-bounded buffers) and their cumulative
//! counts as frames carry them.
//!
//! A receiver keeps, for each sender, `eager_credits_per_peer` buffers of `eager_limit` bytes,
//! `small_credits_per_peer` buffers of [`SMALL_MESSAGE_MAX`] bytes and
//! `medium_credits_per_peer` buffers of [`MEDIUM_MESSAGE_MAX`] bytes. A message of at most 256
//! bytes (one sent from the sender's copy, its send complete at once) spends a small credit, a
//! longer one of at most 4 KiB a medium credit, every longer eager message an eager one; both
//! ends tell the class from the message's length alone, so no frame needs to say it (but a
//! CANCEL, whose receiver may never have seen the message: flags `SMALL_CREDIT` and
//! `MEDIUM_CREDIT`).
//!
//! Why classes: a sender of short messages whose sends complete at once is held back only
//! by credits, and an eager credit is a buffer of the eager limit (256 KiB on the libfabric
//! provider), so eight of them were all a stream of 8-byte messages could have in flight. The
//! receiver, posting one receive at a time, ran dry between credit returns: 8-byte
//! `NPopenmpi -s` 4.0 us a message with 8 credits, 2.6 us with 32 (eager limit 64 KiB,
//! medians of five alternations). Thirty-two buffers of 256 bytes cost a receiver 8 KiB per
//! sender, not 8 MiB. Messages up to 4 KiB, the provider's inject size, are sent the same way
//! by Open MPI (its send completes at once, from the provider's copy), and streams of them
//! were bound by the eight eager credits alike. With 32 credits of their own, `NPopenmpi -s`
//! on the provider (medians of five alternations): 512 B 4.11 -> 3.42 us a message, 1 KiB
//! 4.06 -> 2.82, 4 KiB 4.79 -> 3.34 (ob1 2.03, 2.48, 3.56). Thirty-two buffers of 4 KiB cost
//! 128 KiB per sender.
//!
//! A message never falls back on a credit of another class: the receiver could then not tell
//! which buffer it holds, and a buffer of its class might not be free for it.

use crate::state::Core;
use crate::{Config, ConfigError};
use std::ops::{Index, IndexMut};

/// The longest message that spends a small credit: what a frame carries inline, so its send
/// completed from the sender's copy (`ops::sent_from_copy`).
pub const SMALL_MESSAGE_MAX: u64 = crate::transmit::INLINE_PAYLOAD_MAX as u64;

/// The longest message that spends a medium credit: the libfabric provider's inject size
/// (`NICMSG_INJECT_SIZE`), the longest message Open MPI sends without waiting for its
/// completion.
pub const MEDIUM_MESSAGE_MAX: u64 = 4096;

/// Which of a receiver's buffers an eager message may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreditClass {
    /// A buffer of `eager_limit` bytes.
    Eager = 0,
    /// A buffer of [`SMALL_MESSAGE_MAX`] bytes.
    Small = 1,
    /// A buffer of [`MEDIUM_MESSAGE_MAX`] bytes (or `eager_limit`, if less).
    Medium = 2,
}

/// How many credit classes there are.
const CLASSES: usize = 3;

impl CreditClass {
    pub(crate) const ALL: [Self; CLASSES] = [Self::Eager, Self::Small, Self::Medium];

    /// The class an eager message of `len` bytes spends: small if it was sent from a copy,
    /// medium up to [`MEDIUM_MESSAGE_MAX`].
    pub(crate) fn of(len: u64) -> Self {
        if crate::ops::sent_from_copy(len) {
            Self::Small
        } else if len <= MEDIUM_MESSAGE_MAX {
            Self::Medium
        } else {
            Self::Eager
        }
    }

    /// The buffers of this class a receiver keeps per sender: a sender's credits.
    pub(crate) fn per_peer(self, config: &Config) -> u32 {
        match self {
            Self::Eager => config.eager_credits_per_peer,
            Self::Small => config.small_credits_per_peer,
            Self::Medium => config.medium_credits_per_peer,
        }
    }

    /// The setting that gives this class's credits per peer.
    fn setting(self) -> &'static str {
        match self {
            Self::Eager => "eager_credits_per_peer",
            Self::Small => "small_credits_per_peer",
            Self::Medium => "medium_credits_per_peer",
        }
    }

    /// The bytes of one buffer of this class.
    pub(crate) fn buffer_len(self, config: &Config) -> u64 {
        match self {
            Self::Eager => config.eager_limit,
            Self::Small => SMALL_MESSAGE_MAX,
            Self::Medium => MEDIUM_MESSAGE_MAX.min(config.eager_limit),
        }
    }
}

/// Most credits of one class per peer: a receiver marks the buffers of a class in use one bit
/// each in a word (`Peer::buffers_used`).
pub(crate) const MAX_CREDITS_PER_CLASS: u32 = u64::BITS;

/// Every class has 1 to [`MAX_CREDITS_PER_CLASS`] credits per peer (`Config::validate`).
pub(crate) fn check_credits(config: &Config) -> Result<(), ConfigError> {
    for class in CreditClass::ALL {
        let credits = class.per_peer(config);
        if credits == 0 || credits > MAX_CREDITS_PER_CLASS {
            let setting = class.setting();
            return Err(ConfigError::Credits { setting, credits });
        }
    }
    Ok(())
}

/// One value per credit class, indexed by the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PerClass<T>(pub [T; CLASSES]);

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

/// Bits of one class's count on the wire: three fit `aux`.
pub(crate) const COUNT_BITS: u32 = 10;
/// The counts wrap at `1 << COUNT_BITS`.
pub(crate) const COUNT_MASK: u16 = (1 << COUNT_BITS) - 1;
const _: () = assert!(CLASSES as u32 * COUNT_BITS <= u32::BITS);
// A count must tell fresh from stale across every credit of a class outstanding at once.
const _: () = assert!(MAX_CREDITS_PER_CLASS < 1 << (COUNT_BITS - 1));

/// Cumulative counts of every class, wrapping at `1 << COUNT_BITS`: credits spent, returned,
/// given or told. On the wire (`aux`) class `c` is bits `10c..10c+10` (eager, small, medium
/// from the low end). Ten bits wrap safely for counts that are fresh, as at most 64 credits of
/// a class are outstanding: a count is taken only if it moves the sender's forward by no more
/// than it has outstanding. A frame delayed past some 960 later credits of its class could
/// pass that test; it would make the sender spend credits the receiver has not freed, until
/// the receiver's true count passes the one taken. The receiver keeps the header of each
/// eager message it then has no buffer for, discards its data and asks for it again once a
/// receive matches it (`receiver.rs`, `admit_message`): resends, never a lost message or a
/// hang (the test `credits_the_receiver_never_freed_cost_resends_never_a_hang`).
pub(crate) type CreditCounts = PerClass<u16>;

impl CreditCounts {
    pub(crate) fn from_aux(aux: u32) -> Self {
        let count = |class: CreditClass| (aux >> (class as u32 * COUNT_BITS)) as u16 & COUNT_MASK;
        PerClass(CreditClass::ALL.map(count))
    }

    pub(crate) fn to_aux(self) -> u32 {
        CreditClass::ALL.into_iter().fold(0, |aux, class| {
            aux | u32::from(self[class] & COUNT_MASK) << (class as u32 * COUNT_BITS)
        })
    }

    pub(crate) fn add_one(&mut self, class: CreditClass) {
        self[class] = self[class].wrapping_add(1) & COUNT_MASK;
    }

    /// How far `self` is ahead of `earlier` in `class`.
    pub(crate) fn ahead_of(self, earlier: Self, class: CreditClass) -> u16 {
        self[class].wrapping_sub(earlier[class]) & COUNT_MASK
    }
}

impl Core {
    /// Credits not settled with live peers, every class, both directions: spent on messages
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
        let counts = PerClass([COUNT_MASK, 7, 0x155]);
        assert_eq!(CreditCounts::from_aux(counts.to_aux()), counts);
        assert_eq!(
            counts.to_aux(),
            0x3ff | 7 << 10 | 0x155 << 20,
            "eager low, then small, then medium"
        );
        let mut later = counts;
        for class in CreditClass::ALL {
            later.add_one(class);
            assert_eq!(later.ahead_of(counts, class), 1);
            assert_eq!(counts.ahead_of(later, class), COUNT_MASK, "behind by one");
        }
        assert_eq!(later[CreditClass::Eager], 0, "wraps");
        assert_eq!(
            CreditCounts::from_aux(u32::MAX),
            PerClass([COUNT_MASK; 3]),
            "the bits above the counts are ignored"
        );
    }

    #[test]
    fn a_message_spends_the_class_its_length_says() {
        assert_eq!(CreditClass::of(0), CreditClass::Small);
        assert_eq!(CreditClass::of(SMALL_MESSAGE_MAX), CreditClass::Small);
        assert_eq!(CreditClass::of(SMALL_MESSAGE_MAX + 1), CreditClass::Medium);
        assert_eq!(CreditClass::of(MEDIUM_MESSAGE_MAX), CreditClass::Medium);
        assert_eq!(CreditClass::of(MEDIUM_MESSAGE_MAX + 1), CreditClass::Eager);
    }

    #[test]
    fn every_class_buffer_holds_every_eager_message_of_the_class() {
        for eager_limit in [1024, 4096, 8192, 256 << 10] {
            let config = Config {
                eager_limit,
                ..Config::default()
            };
            for len in [0, 1, 256, 257, 1024, 4095, 4096, 4097, 8192, 256 << 10] {
                if len <= eager_limit {
                    let class = CreditClass::of(len);
                    assert!(len <= class.buffer_len(&config), "{len} of {eager_limit}");
                }
            }
        }
    }
}

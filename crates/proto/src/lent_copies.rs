//! Send copies lent by the host: pieces of one registered region the core copies eager
//! messages above [`LENT_COPY_ABOVE`] into (shorter ones fit a short send's inline copy,
//! `ops::ShortCopy`, or are not worth it). A send copied so completes as soon as it starts,
//! like a short one, so a stream of such messages does not wait a round trip per message for
//! acknowledgements (TCP's socket buffer does the same for TCP). The piece stays the send's
//! until it ends: its frames, retransmissions included, read the copy. `SendSide` takes a
//! piece when a send is posted and gives it back when the send leaves the table.

use crate::transmit::INLINE_PAYLOAD_MAX;
use crate::{RegionId, SgList};

/// Messages up to this length are not copied into a lent piece (their sends complete when
/// acknowledged, or from a short copy). Shorter messages leave faster than a receiver takes
/// them: completing each at once let Open MPI's `NPopenmpi -s` at 1 KiB outrun its receiver,
/// whose buffers then filled and turned 13,471 messages into rendezvous ones (3.0 -> 4.9 us a
/// message). At 4 KiB it changed nothing; from 6,000 bytes it is faster (8 KiB: 8.4 -> 6.6 us,
/// 64 KiB: 34 -> 16 us).
pub const LENT_COPY_ABOVE: u64 = 4096;
const _: () = assert!(LENT_COPY_ABOVE >= INLINE_PAYLOAD_MAX as u64);

/// Most send copies a host may lend (`SendSide::lend_copies`): one bit each in a word.
pub const MAX_LENT_COPIES: u32 = u64::BITS;

/// The pieces of the lent region, and which are free.
pub(crate) struct LentCopies {
    region: RegionId,
    piece_len: u64,
    /// Free pieces, one bit each.
    free: u64,
}

impl LentCopies {
    /// `pieces` (at most [`MAX_LENT_COPIES`]) of `piece_len` bytes from the start of `region`;
    /// none if they could hold no message that is copied.
    pub(crate) fn new(region: RegionId, piece_len: u64, pieces: u32) -> Option<Self> {
        let pieces = pieces.min(MAX_LENT_COPIES);
        if pieces == 0 || piece_len <= LENT_COPY_ABOVE {
            return None;
        }
        Some(Self {
            region,
            piece_len,
            free: u64::MAX >> (MAX_LENT_COPIES - pieces),
        })
    }

    pub(crate) fn fits(&self, len: u64) -> bool {
        len > LENT_COPY_ABOVE && len <= self.piece_len
    }

    pub(crate) fn take(&mut self) -> Option<u8> {
        if self.free == 0 {
            return None;
        }
        let piece = self.free.trailing_zeros();
        self.free &= !(1 << piece);
        Some(piece as u8)
    }

    pub(crate) fn give_back(&mut self, piece: u8) {
        debug_assert_eq!(
            self.free & (1 << piece),
            0,
            "piece {piece} given back twice"
        );
        self.free |= 1 << piece;
    }

    /// The first `len` bytes of `piece`, as a buffer.
    pub(crate) fn buffer(&self, piece: u8, len: u64) -> SgList {
        SgList::contiguous(self.region, u64::from(piece) * self.piece_len, len)
    }
}

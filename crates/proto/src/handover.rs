//! Buffers handed to kept messages: when one of a sender's buffers comes free while a short
//! message of that sender waits as a kept header (a rendezvous message whose data was
//! discarded for want of a receive and a credit), the receiver keeps the credit back and gives
//! the buffer to that message instead, asking its sender to send it again as an eager one
//! (CTS with FROM_START and EAGER). The message is then in the buffer before its receive is
//! posted, and the receive completes from it at once.
//!
//! Why: a program that sends many short messages before it receives any (an "unsafe" MPI
//! program, which ob1 and TCP carry through their socket buffers) spends its credits on the
//! first 32 and sends the rest by rendezvous, whose data the receiver cannot keep. Each of
//! those then cost a round trip when its receive was posted, one receive at a time:
//! 1,500 16-byte messages each way before any receive took 66-286 ms on loopback under
//! Open MPI, now 32-80 ms (ob1: 6-10 ms). Handed buffers as the receives consume them, the
//! messages come in ahead of the receives, a buffer's worth at a time.
//!
//! The credit stays consistent: the sender counted the delivered message's credit as spent
//! and never learns it came back; the kept message, now eager, rides on it, and its delivery
//! returns it (as does its withdrawal: `cancel.rs`, whatever its sender's CANCEL says).
//! Messages of every buffer class up to the eager limit are taken so: Open MPI sends every
//! `MPI_Send` of up to 64 KiB from the provider's copy without waiting (injects up to 4 KiB,
//! buffered sends above), and 2,000 8 KiB messages each way before any receive took 0.21 s
//! when only small and medium buffers were handed over, each eager-class message a round
//! trip at its receive (ob1: 0.06 s). Both sides keep the frame count the RTS announced, and
//! the sender starts the message afresh as an eager one, its frames laid out as eager ones; so
//! only a message with as many frames either way is taken (`Geometry::cuts_alike_as_eager`:
//! 64 KiB in 1,424-byte frames needs one frame more eager, and its last bytes were never
//! sent while the receiver delivered it as whole).

use crate::credits::CreditClass;
use crate::ops::{Dest, RxPhase};
use crate::receiver::control;
use crate::state::Core;
use crate::*;
use nicmsg_wire::{Flags, FrameKind};

/// Unexpected messages looked at for one freed buffer. The queue holds up to
/// `max_incoming` entries and a buffer comes free with every eager delivery: the look stays
/// short, and a kept message further back waits for the next buffer or for its receive.
pub(crate) const HANDOVER_SCAN_LIMIT: usize = 128;

impl Core {
    /// A buffer of `class` for `peer` came free: hands it to the oldest kept message of that
    /// peer and class if there is one (true), so its credit is not returned.
    pub(crate) fn hand_over_buffer(&mut self, now: Nanos, peer: Rank, class: CreditClass) -> bool {
        // Before any look at the queue: this runs for every eager message delivered.
        if self.rx.rendezvous_incoming() == 0 {
            return false;
        }
        let Some(index) = self
            .rx
            .oldest_unexpected(peer, HANDOVER_SCAN_LIMIT, |entry| {
                self.can_take_as_eager(entry, class)
            })
        else {
            return false;
        };
        if !self.rx.take_as_eager(index, &mut self.peers) {
            return false;
        }
        self.counters.record(peer, |s| s.kept_taken_as_eager += 1);
        // Awaited until its frame comes, so that its sender's death frees the buffer.
        self.set_waiter(index, true);
        self.ask_to_resume(index);
        self.expect_resumption(now, index);
        true
    }

    /// A rendezvous message kept without a receive, with nothing of it in, of `class`
    /// (`hand_over_buffer`): one a buffer of that class can take whole.
    fn can_take_as_eager(&self, entry: &ops::Incoming, class: CreditClass) -> bool {
        let len = entry.geometry.total_len;
        !entry.is_eager()
            && entry.discarded
            && entry.dest == Dest::Nowhere
            && !entry.matched
            && entry.phase == RxPhase::Receiving
            && entry.contiguous == 0
            && !entry.has_frame(0)
            && entry.local_send.is_none()
            && len <= self.config.eager_limit
            && CreditClass::of(len) == class
            && entry.geometry.cuts_alike_as_eager()
    }

    /// The request to send a kept message again: CTS with FROM_START, and EAGER when the
    /// receiver took it as eager (`hand_over_buffer`).
    pub(crate) fn resume_request(&self, index: IncomingKey) -> ops::Control {
        let entry = &self.rx[index];
        let flags = if entry.taken_as_eager {
            Flags::FROM_START | Flags::EAGER
        } else {
            Flags::FROM_START
        };
        control(
            entry.peer,
            FrameKind::Cts,
            flags,
            entry.msg_id,
            entry.frames,
        )
    }
}

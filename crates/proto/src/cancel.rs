//! Cancel (MPI's `MPI_Cancel`). A receive or probe not matched yet, and a send that has not
//! left this rank, are cancelled on the spot. A send whose message may already be with its
//! receiver is withdrawn by asking the receiver:
//!
//! ```text
//! sender                                   receiver
//!   (no more frames of the message)
//!   CANCEL (EAGER if it took a credit) -->   no receive matched it: withdraw it (free its
//!                                            buffer, return the credit, mark the id finished,
//!                                            keep a tombstone); else leave it be
//!   <-- CANCEL-ACK + CANCELLED               withdrawn: the send completes `Cancelled`
//!   <-- CANCEL-ACK                           matched first: the send goes on and completes
//!   CLEANUP (after CANCELLED) ----------->   the tombstone is freed
//! ```
//!
//! The receiver's answer is the only thing that decides: an acknowledgement or a grant that
//! crosses the CANCEL is recorded but completes nothing. The tombstone gives a repeated CANCEL
//! (its answer lost) the same answer; it is repeated like MSG-ACK until CLEANUP comes, and
//! freed after `max_retries` in any case. A message withdrawn before it arrived leaves its id
//! finished with no entry behind; matching steps over such ids (`match_in_order`), so the
//! sender's later messages are matched in order as if it had never been sent.

use crate::credits::CreditClass;
use crate::ops::{CancelRequest, Dest, Incoming, RxPhase, SendPhase};
use crate::receiver::control;
use crate::state::Core;
use crate::window::IdPlace;
use crate::*;
use nicmsg_wire::{Flags, FrameHeader, FrameKind, Protocol, FRAME_HEADER_LEN};

impl Core {
    pub(crate) fn cancel_send(
        &mut self,
        now: Nanos,
        op: OpId,
    ) -> Result<CancelOutcome, CancelError> {
        let key = self
            .sends
            .key_checked(op.index, op.generation)
            .ok_or(CancelError::UnknownOp)?;
        let send = &self.sends[key];
        if send.completed_early {
            // Its success is reported (or about to be, if still queued): too late to cancel, and
            // once the host has taken the completion the handle is stale.
            let queued = self.outputs.is_completion_queued(op);
            return Err(if queued {
                CancelError::InProgress
            } else {
                CancelError::UnknownOp
            });
        }
        match send.phase {
            SendPhase::Local if self.local_message_claimed(key) => Err(CancelError::InProgress),
            SendPhase::Local => {
                self.cancel_local(key);
                Ok(CancelOutcome::Cancelled)
            }
            SendPhase::Queued => {
                let dst = send.dst;
                self.unlink_queued(dst, key);
                self.finish_send(key, Err(OpError::Cancelled));
                Ok(CancelOutcome::Cancelled)
            }
            SendPhase::Ending => Err(CancelError::InProgress),
            SendPhase::Streaming if send.peer_matched || send.cancel_refused => {
                Err(CancelError::InProgress)
            }
            SendPhase::Streaming => {
                if send.cancel.is_none() {
                    self.request_withdrawal(now, key);
                }
                Ok(CancelOutcome::Requested)
            }
        }
    }

    /// Stops the send's frames and asks its receiver to withdraw the message.
    fn request_withdrawal(&mut self, now: Nanos, index: SendKey) {
        let dst = self.sends[index].dst;
        let departure = self.departure(now, dst, FRAME_HEADER_LEN);
        let rto = self.peers[dst].rto.rto_ns();
        let op = &mut self.sends[index];
        op.cancel = Some(CancelRequest {
            deadline_ns: departure.timer_start() + rto,
            retries: 0,
        });
        op.extra_frame = None;
        let request = cancel_frame(op.dst, op.msg_id, op.credit);
        self.queue_control(request);
        self.counters.record_total(|s| s.cancels_requested += 1);
    }

    /// The CANCEL of `index` went unanswered: ask again, backed off.
    pub(crate) fn repeat_cancel(&mut self, now: Nanos, index: SendKey) {
        let max_ns = self.config.rto_max_ns;
        let op = &mut self.sends[index];
        let rto = self.peers[op.dst].rto;
        let Some(cancel) = op.cancel.as_mut() else {
            return;
        };
        cancel.retries += 1;
        cancel.deadline_ns = now + rto.backed_off_ns(cancel.retries, max_ns);
        let request = cancel_frame(op.dst, op.msg_id, op.credit);
        self.queue_control(request);
    }

    /// CANCEL-ACK: the receiver's decision on a withdrawal.
    pub(crate) fn on_cancel_ack(&mut self, now: Nanos, header: &FrameHeader) {
        let peer = header.src;
        let withdrawn = header.has_flag(Flags::CANCELLED);
        let Some(index) = self.active_send(peer, header.msg_id) else {
            // A repeat of an answer already taken: the receiver still holds a tombstone.
            let finished = self.peers[peer].send_window.place(header.msg_id) == IdPlace::Finished;
            if withdrawn && finished {
                self.queue_control(control(peer, FrameKind::Cleanup, 0, header.msg_id, 0));
            }
            return self.count_drop(Some(peer), DropReason::Duplicate);
        };
        let op = &mut self.sends[index];
        if op.cancel.take().is_none() {
            return self.count_drop(Some(peer), DropReason::Duplicate);
        }
        if withdrawn {
            self.queue_control(control(peer, FrameKind::Cleanup, 0, header.msg_id, 0));
            self.counters.record_total(|s| s.sends_withdrawn += 1);
            self.finish_send(index, Err(OpError::Cancelled));
            return;
        }
        op.cancel_refused = true;
        self.after_ack(now, index);
        self.sends.mark_ready(index);
    }

    /// CANCEL: withdraw the message unless a receive has matched it; answer either way.
    pub(crate) fn on_cancel(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        memory: &mut impl HostMemory,
    ) {
        let peer = header.src;
        let msg_id = header.msg_id;
        let answer = |cancelled: bool| {
            let flags = if cancelled { Flags::CANCELLED } else { 0 };
            control(peer, FrameKind::CancelAck, flags, msg_id, 0)
        };
        let place = self.peers[peer].recv_window.place(msg_id);
        if place == IdPlace::Beyond {
            return self.count_drop(Some(peer), DropReason::Invalid);
        }
        let returns_credit = credit_withdrawn(header);
        match self.rx.incoming_by_id(peer, msg_id) {
            Some(index) => {
                let entry = &self.rx[index];
                if entry.phase == RxPhase::Cancelled {
                    return self.queue_control(answer(true));
                }
                if entry.matched || entry.claimed {
                    return self.queue_control(answer(false));
                }
                self.withdraw(now, index, returns_credit);
                self.queue_control(answer(true));
                // Messages held behind it may now be matched.
                self.match_in_order(now, peer, memory);
            }
            // Delivered (matched and freed) before the CANCEL came.
            None if place == IdPlace::Finished => self.queue_control(answer(false)),
            // Never arrived (lost, or refused for want of room): withdrawn before it does.
            None => {
                let Some(index) = self.insert_tombstone(peer, msg_id) else {
                    // No room to remember the answer: the sender asks again, and meanwhile
                    // hears that this rank is alive (a CREDIT decides nothing). Silent, the
                    // CANCEL was often the only frame asking anything of this rank, and its
                    // sender declared this live rank unreachable after `peer_timeout_ns`.
                    self.queue_control(control(peer, FrameKind::Credit, 0, 0, 0));
                    return self.count_drop(Some(peer), DropReason::NoPostedReceive);
                };
                self.withdraw(now, index, returns_credit);
                self.queue_control(answer(true));
                self.match_in_order(now, peer, memory);
            }
        }
    }

    /// An entry for a message that never arrived, only to hold the withdrawal's answer.
    fn insert_tombstone(&mut self, peer: Rank, msg_id: u32) -> Option<IncomingKey> {
        let geometry = crate::geometry::Geometry {
            total_len: 0,
            frame_payload: self.config.frame_payload(),
            protocol: Protocol::Rendezvous,
        };
        let key = (Context::USER, 0);
        let entry = Incoming::new(peer, msg_id, key, geometry, self.config.ack_unit);
        let index = self.insert_remote(entry, 0)?;
        self.rx.index_incoming(peer, msg_id, index);
        Some(index)
    }

    /// Turns an unmatched message into a tombstone: its data and buffer go, its credit goes
    /// back, its id is finished, and matching will step over it.
    fn withdraw(&mut self, now: Nanos, index: IncomingKey, returns_credit: Option<CreditClass>) {
        self.set_waiter(index, false);
        let keepalive = self.config.keepalive_ns;
        let entry = &mut self.rx[index];
        let (peer, msg_id) = (entry.peer, entry.msg_id);
        // A message taken as eager holds a credit kept back from its sender, whose CANCEL,
        // sent before it heard, may say rendezvous (`handover.rs`).
        let returns_credit = returns_credit.or(entry
            .taken_as_eager
            .then(|| CreditClass::of(entry.geometry.total_len)));
        let in_unexpected = entry.in_unexpected;
        let buffer = std::mem::replace(&mut entry.dest, Dest::Discard);
        entry.phase = RxPhase::Cancelled;
        entry.deadline_ns = Some(now + keepalive);
        entry.retries = 0;
        if in_unexpected {
            self.rx.remove_unexpected(index);
        }
        if let Dest::Buffer(slot) = buffer {
            self.rx.release_eager_buffer(slot, &mut self.peers);
        }
        self.peers[peer].recv_window.finish(msg_id);
        if let Some(class) = returns_credit {
            self.return_credit(now, peer, class);
        }
        self.counters.record(peer, |s| s.messages_withdrawn += 1);
    }
}

fn cancel_frame(dst: Rank, msg_id: u32, credit: Option<CreditClass>) -> crate::ops::Control {
    let flags = match credit {
        None => 0,
        Some(CreditClass::Eager) => Flags::EAGER,
        Some(CreditClass::Small) => Flags::EAGER | Flags::SMALL_CREDIT,
        Some(CreditClass::Medium) => Flags::EAGER | Flags::MEDIUM_CREDIT,
    };
    control(dst, FrameKind::Cancel, flags, msg_id, 0)
}

/// The credit a CANCEL says its message holds (flags EAGER, SMALL_CREDIT and MEDIUM_CREDIT).
/// One naming two classes (no sender of ours sends it) returns none: a peer that lies about
/// its message's credit loses its own.
fn credit_withdrawn(header: &FrameHeader) -> Option<CreditClass> {
    if !header.has_flag(Flags::EAGER) {
        return None;
    }
    match (
        header.has_flag(Flags::SMALL_CREDIT),
        header.has_flag(Flags::MEDIUM_CREDIT),
    ) {
        (false, false) => Some(CreditClass::Eager),
        (true, false) => Some(CreditClass::Small),
        (false, true) => Some(CreditClass::Medium),
        (true, true) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(control: &crate::ops::Control) -> FrameHeader {
        FrameHeader {
            kind: control.kind,
            flags: control.flags,
            job: 1,
            src: 0,
            dst: control.dst,
            msg_id: control.msg_id,
            frame_index: 0,
            offset: 0,
            payload_len: 0,
            aux: 0,
            acked_id: 0,
        }
    }

    /// The CANCEL of a message names the credit it holds, whichever class, and the receiver
    /// reads back that class; one naming two classes, which no sender of ours sends, returns
    /// none.
    #[test]
    fn a_cancel_names_its_messages_credit_class() {
        let classes = [None].into_iter().chain(CreditClass::ALL.map(Some));
        for credit in classes {
            let frame = cancel_frame(1, 7, credit);
            assert_eq!(frame.flags & !FrameKind::Cancel.allowed_flags(), 0);
            assert_eq!(credit_withdrawn(&header_of(&frame)), credit, "{credit:?}");
        }
        let mut both = header_of(&cancel_frame(1, 7, Some(CreditClass::Small)));
        both.flags |= Flags::MEDIUM_CREDIT;
        assert_eq!(credit_withdrawn(&both), None);
    }
}

//! Piggybacked acknowledgements: the ACK_ALL of a whole eager message, and the credit it
//! returns, wait up to `ack_delay_ns` for an EAGER frame to the same peer and ride on it
//! (flags ACKED and CREDITS; `receiver.rs` reads them). A request answered by a reply then costs
//! no acknowledgement datagram: on the critical path of a ping-pong each hop is one frame, as
//! with raw UDP. A message whose send completed from the sender's copy (a short copy, or a
//! send copy the host lent) says so on its frames (`Flags::UNWAITED`): nobody waits for its
//! acknowledgement. Another eager message's send completes on it, and a sender that waits for
//! it before its next message (a blocking `MPI_Send` in a stream) would wait `ack_delay_ns` a
//! message: its acknowledgement waits only while frames have been going back to the peer
//! since one last had to leave on its own (`Peer::replies_follow`, TCP's ping-pong mode), and
//! leaves at once in a stream.
//!
//! A second whole message before any reply makes a stream. If the sender of either waits for
//! its acknowledgement, both leave at once (as TCP acknowledges every second segment), so a
//! stream of longer messages is acknowledged as promptly as before. If nobody waits (messages
//! sent from copies), the acknowledgements of consecutive messages gather into one
//! run ([`OwedAcks`]) that leaves with the next carrier, at its deadline
//! ([`stream_ack_delay_ns`] after its first message), or with a credit that cannot wait
//! (`credit_is_urgent`): a receiver slower than its sender then sends a frame per dozen
//! messages, not one or two per message. The receiver told "nobody waits" from the length
//! alone until wire version 5: a stream of messages copied into lent copies (4 KiB to 64 KiB)
//! then had a frame back per message, and a short send that could not complete early (every
//! early-send slot taken) waited the run's deadline for its acknowledgement.
//! A lost carrier is repaired as a lost ACK is: the sender retransmits and the duplicate is
//! acknowledged again.
//!
//! Runs: ACK_ALLs queued to one peer for consecutive message ids (a burst of eager messages
//! received together) leave as one frame, the first id in `msg_id` and the number of ids
//! after it in `frame_index` (at most `MAX_ACK_ALL_RUN`), instead of a datagram each: every
//! datagram costs both hosts a trip through the network stack, and in a burst of five
//! messages each way (the overlap pattern) those acknowledgements outnumbered the data.

use crate::receiver::control;
use crate::state::{Core, MAX_ACK_ALL_RUN};
use crate::*;
use nicmsg_wire::{Flags, FrameHeader, FrameKind};

impl Core {
    /// The eager message `msg_id` from `peer` is held whole. If its send completed from the
    /// sender's copy (`Flags::UNWAITED`), its acknowledgement may wait for a carrier; if the
    /// sender waits for this acknowledgement, it waits only if replies have been going back.
    pub(crate) fn acknowledge_eager(
        &mut self,
        now: Nanos,
        peer: Rank,
        msg_id: u32,
        sender_waits: bool,
    ) {
        if !sender_waits || self.peers[peer].replies_follow {
            self.owe_ack_all(now, peer, msg_id, sender_waits);
        } else {
            self.queue_ack_all(peer, msg_id);
        }
    }

    /// The eager message `msg_id` from `peer` is held whole: acknowledge it, now or with the
    /// next EAGER frame to `peer`. A second message before any reply is a stream: if its
    /// sender or an earlier one's waits, every owed acknowledgement leaves now; if nobody
    /// waits, the run grows until a carrier, its deadline or an urgent credit takes it.
    fn owe_ack_all(&mut self, now: Nanos, peer: Rank, msg_id: u32, sender_waits: bool) {
        if self.config.ack_delay_ns == 0 {
            return self.queue_ack_all(peer, msg_id);
        }
        let state = &mut self.peers[peer];
        let Some(owed) = state.ack_owed.take() else {
            state.ack_owed = Some(OwedAcks::new(msg_id, sender_waits));
            self.peers.arm_owed(peer, now + self.config.ack_delay_ns);
            return;
        };
        state.replies_follow = false;
        match owed.extended(msg_id, sender_waits) {
            Some(run) if !run.sender_waits => {
                if run.more == 1 {
                    // Now a stream nobody waits for: the run's deadline moves out.
                    let later = stream_ack_delay_ns(&self.config) - self.config.ack_delay_ns;
                    state.owed_deadline_ns = state.owed_deadline_ns.map(|d| d + later);
                }
                state.ack_owed = Some(run);
            }
            Some(run) => self.queue_ack_run(peer, run),
            None => {
                self.queue_ack_run(peer, owed);
                let next = OwedAcks::new(msg_id, sender_waits);
                if sender_waits {
                    self.queue_ack_run(peer, next);
                } else {
                    // A run of its own, its wait counted from its first message: the deadline
                    // it would inherit may already have moved out for the run before it, and
                    // moving it again with every run would carry the acknowledgements of a
                    // lossy stream past the sender's retransmission timeout. What else was
                    // owed leaves with the ACK_ALL just queued (it carries the credits).
                    let state = &mut self.peers[peer];
                    state.ack_owed = Some(next);
                    state.owed_deadline_ns = Some(now + self.config.ack_delay_ns);
                }
            }
        }
        self.peers.settle_owed(peer);
    }

    /// A credit was returned to `peer` (its `credits_given` grew): make sure a frame carries it.
    /// It waits up to `ack_delay_ns` for a carrier, unless the peer is short of credits
    /// ([`credit_is_urgent`](Core::credit_is_urgent)): then it leaves now, with the waiting
    /// ACK_ALL if there is one.
    pub(crate) fn owe_credit(&mut self, now: Nanos, peer: Rank) {
        let urgent = self.config.ack_delay_ns == 0 || self.credit_is_urgent(peer);
        let state = &mut self.peers[peer];
        if urgent {
            state.credit_requested = false;
        }
        // A queued credit carrier reads the count when it leaves.
        if state.credit_carriers_queued > 0 {
            return;
        }
        if urgent {
            return self.send_owed_now(peer);
        }
        // So does a waiting ACK_ALL.
        if state.ack_owed.is_none() {
            state.credit_owed = true;
            self.peers.arm_owed(peer, now + self.config.ack_delay_ns);
        }
    }

    /// Sends now what `peer` is owed: the waiting ACK_ALL, which carries the credit count, or
    /// else a CREDIT.
    fn send_owed_now(&mut self, peer: Rank) {
        let state = &mut self.peers[peer];
        state.credit_owed = false;
        match state.ack_owed.take() {
            Some(run) => self.queue_ack_run(peer, run),
            None => self.queue_control(control(peer, FrameKind::Credit, 0, 0, 0)),
        }
        self.peers.settle_owed(peer);
    }

    /// One ACK_ALL for `msg_id` alone. Its `frame_index` is 0, always: in an ACK_ALL it counts
    /// the messages after `msg_id` acknowledged with it (a run), never a frame's index.
    pub(crate) fn queue_ack_all(&mut self, peer: Rank, msg_id: u32) {
        self.queue_control(control(peer, FrameKind::Ack, Flags::ACK_ALL, msg_id, 0));
    }

    /// One ACK_ALL frame for a run of consecutive messages (`frame_index` more after the first).
    fn queue_ack_run(&mut self, peer: Rank, run: OwedAcks) {
        let ack = control(peer, FrameKind::Ack, Flags::ACK_ALL, run.first, run.more);
        self.queue_control(ack);
    }

    /// An EAGER frame to `peer` is being built: let it carry what is owed to the peer.
    /// Every EAGER frame carries the credit count (it costs nothing); a waiting ACK_ALL rides
    /// on the first one.
    pub(crate) fn piggyback_on(&mut self, peer: Rank, header: &mut FrameHeader) {
        let state = &mut self.peers[peer];
        header.flags |= Flags::CREDITS;
        header.aux = state.credits_given.to_aux();
        state.credits_reported = state.credits_given;
        state.credit_owed = false;
        // Frames go back to the peer: its next acknowledgement may wait for one.
        state.replies_follow = true;
        match state.ack_owed.take() {
            Some(OwedAcks { first, more: 0, .. }) => {
                header.flags |= Flags::ACKED;
                header.acked_id = first;
                self.counters.record(peer, |s| s.acks_piggybacked += 1);
            }
            // A frame acknowledges one message: a run leaves as its own ACK_ALL, next.
            Some(run) => self.queue_ack_run(peer, run),
            None => {}
        }
        self.peers.settle_owed(peer);
    }

    /// A control frame that carries the credit count left for `peer`.
    pub(crate) fn credits_carried(&mut self, peer: Rank) {
        let state = &mut self.peers[peer];
        state.credits_reported = state.credits_given;
        state.credit_owed = false;
        self.peers.settle_owed(peer);
    }

    /// Sends on their own the acknowledgements and credits whose wait is over, of the peers
    /// of `due` (those with a timer at `now`).
    pub(crate) fn expire_owed(&mut self, now: Nanos, due: &[Rank]) {
        for &peer in due {
            let state = &mut self.peers[peer];
            if state.owed_deadline_ns.is_none_or(|d| d > now) {
                continue;
            }
            state.owed_deadline_ns = None;
            if state.unreachable {
                state.ack_owed = None;
                state.credit_owed = false;
                continue;
            }
            if state.ack_owed.is_some() {
                // No reply carried it: a stream (`Peer::replies_follow`).
                state.replies_follow = false;
            } else if !state.credit_owed {
                continue;
            }
            self.send_owed_now(peer);
        }
    }

    /// Takes in what a frame from its peer (`header.src`, a rank) carries besides its own
    /// business, on every path a frame is received by: receiver-to-sender control frames
    /// carry the credit count, and so does an EAGER frame with CREDITS (the only kind the
    /// flag is allowed on); an EAGER frame with ACKED acknowledges a message of ours.
    pub(crate) fn take_in_credits_and_ack(&mut self, now: Nanos, header: &FrameHeader) {
        if crate::state::carries_credits(header.kind) || header.has_flag(Flags::CREDITS) {
            self.peers[header.src].update_credits(header.aux);
        }
        if header.has_flag(Flags::ACKED) {
            self.take_piggybacked_ack(now, header);
        }
    }

    /// An EAGER frame with ACKED: the whole eager message it names is acknowledged. A message
    /// already finished is ignored (the frame itself is fine); a rendezvous one is invalid.
    pub(crate) fn take_piggybacked_ack(&mut self, now: Nanos, header: &FrameHeader) {
        let peer = header.src;
        let Some(index) = self.active_send(peer, header.acked_id) else {
            return;
        };
        if !self.sends[index].is_eager() {
            return self.count_drop(Some(peer), DropReason::Invalid);
        }
        self.ack_whole(now, index);
        self.after_ack(now, index);
    }
}

/// How long a run of two or more acknowledgements nobody waits for may wait, from its first
/// message: a quarter of the shortest retransmission timeout (50 us by default), at least
/// `ack_delay_ns`. Its senders completed from their copies, so the wait costs them nothing but
/// the copies' slots, and it stays below half the timeout as `ack_delay_ns` must. A receiver
/// slower than its sender then sends a frame per dozen messages, not per five: 8-byte
/// `NPopenmpi -s` 3.06 and 3.42 us a message against 3.53 and 3.81 with `ack_delay_ns` (two
/// runs of five and six alternations; the receiver's datagrams 34,094 against 60,200).
fn stream_ack_delay_ns(config: &Config) -> Nanos {
    (config.rto_min_ns / 4).max(config.ack_delay_ns)
}

/// Whole eager messages from one peer, consecutive ids, whose ACK_ALLs wait together for a
/// carrier: `first` and the `more` after it, as one ACK_ALL frame of a run says them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwedAcks {
    pub first: u32,
    pub more: u32,
    /// The sender of one of them waits for its acknowledgement (a longer eager message).
    pub sender_waits: bool,
}

impl OwedAcks {
    fn new(first: u32, sender_waits: bool) -> Self {
        Self {
            first,
            more: 0,
            sender_waits,
        }
    }

    /// The run with `msg_id` after its last, or `None` if `msg_id` is not the next id or the
    /// run is as long as a frame says.
    fn extended(self, msg_id: u32, sender_waits: bool) -> Option<Self> {
        let next = self.first.wrapping_add(self.more).wrapping_add(1);
        (msg_id == next && self.more < MAX_ACK_ALL_RUN).then_some(Self {
            more: self.more + 1,
            sender_waits: self.sender_waits || sender_waits,
            ..self
        })
    }
}

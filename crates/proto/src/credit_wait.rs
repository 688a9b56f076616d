//! Waiting for eager credits. A sender that has spent its credits towards a peer whose
//! receiver falls behind holds the next eager message until a credit comes back, and asks the
//! peer for them (CREDIT with REQUEST, first after `ack_delay_ns`, then every retransmission
//! timeout while it waits). The peer answers at once:
//!
//! * with its count, and it returns its next credit at once instead of after `ack_delay_ns`
//!   (as it does whenever half of the sender's credits have come free without a frame saying
//!   so): a receiver that keeps up lets the stream stay eager;
//! * with WAIT when its buffers for the sender are all taken by messages it does not receive
//!   while a receive or probe of it waits for another message the sender may send: those
//!   buffers will not be freed before a later message gets through, so the sender sends by
//!   rendezvous at once (its header needs no buffer) and keeps doing so until a credit comes
//!   back.
//!
//! Which receivers are waited for: those that answered the sender's last rendezvous message
//! with WAIT (no receive posted when it arrived; `Peer::rendezvous_finds_receive`). For a
//! receiver whose receives are there when messages arrive (a window of sends into posted
//! receives), a short rendezvous message, whose RTS carries it whole, is taken at once like an
//! eager one, and waiting a round trip for credits cut such a stream's message rate by a third
//! (8 B `nicmsg bench bw`: 5.8 MB/s waiting, 8.4 going by rendezvous).
//!
//! Why wait at all: a stream of short messages whose receiver posts one receive at a time
//! (NetPIPE's stream, any MPI program that sends faster than it receives) keeps the
//! receiver's buffers busy, but they empty within a receive or two. Turning every message that
//! finds no credit into a rendezvous one at once sent each such message twice (RTS, answered by
//! WAIT, then the data again on the CTS): 34 us a message against TCP's 2 us.
//!
//! Why the wait is still bounded (`credit_wait_ns`): a receiver may hold its buffers while it
//! waits on a third rank that waits on this sender (a program that relies on buffering, which
//! MPI allows to deadlock but ob1 and TCP let through). The bound makes that cost a wait, not a
//! hang (sim workloads `credits` and `trickle`).
//!
//! Why a wait that ran out lets only a few messages by rendezvous, then waits again: a stream
//! whose receiver fell behind for a moment (descheduled for 2 ms) has hundreds of messages
//! queued. Sent all by rendezvous, each cost the receiver, posting one receive at a time, a
//! round trip (WAIT, then a resume), and the eager messages behind them, whose credits end the
//! shortage, were consumed only after all of them: about 11 ms later, by when the next wait had
//! run out. NetPIPE's 8-byte stream resent a third of its messages so. Letting as many of
//! them go per wait that runs out as the receiver keeps buffers of the waiting message's class
//! (`eager_credits_per_peer`, `small_credits_per_peer` or `medium_credits_per_peer`) keeps the
//! backlog at the receiver
//! as short as its buffers; a receiver that holds its buffers for good costs its
//! sender one wait per that many messages, still no hang. One that says so (WAIT) gets every
//! message by rendezvous at once.

use crate::credits::CreditClass;
use crate::receiver::control;
use crate::state::Core;
use crate::*;
use nicmsg_wire::{Flags, FrameKind};

/// Where a sender stands with the credits of one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreditWait {
    /// Credits are not short, or a shortage has not begun yet.
    Idle,
    /// The queue's head waits for a credit: the peer is asked again at `ask_again_at`, and the
    /// message goes by rendezvous at `give_up_at`.
    Waiting {
        ask_again_at: Nanos,
        give_up_at: Nanos,
    },
    /// The peer said its buffers are held for a later message: eager messages go by
    /// rendezvous until a credit comes back (`Peer::update_credits` makes it `Idle` again).
    Held,
    /// A wait ran out: the next `left` messages that find no credit go by rendezvous, then the
    /// next one waits for a credit again (module documentation).
    RanOut { left: u32 },
}

impl CreditWait {
    /// The wait's next timer, if it waits.
    pub(crate) fn deadline(self) -> Option<Nanos> {
        match self {
            CreditWait::Waiting {
                ask_again_at,
                give_up_at,
            } => Some(ask_again_at.min(give_up_at)),
            CreditWait::Idle | CreditWait::Held | CreditWait::RanOut { .. } => None,
        }
    }
}

impl Core {
    /// The eager message at the head of `dst`'s queue found no credit: true while it should
    /// wait for one, false when it should go by rendezvous.
    pub(crate) fn wait_for_credit(&mut self, now: Nanos, dst: Rank) -> bool {
        let wait_ns = self.config.credit_wait_ns;
        match self.peers[dst].credit_wait {
            _ if wait_ns == 0 => false,
            // The peer's receives have been there when rendezvous messages arrived: a short
            // one, whose RTS carries it whole, is taken at once like an eager one, and waiting
            // a round trip for credits would only slow the stream (a window of sends into
            // posted receives). Only a receiver that answered WAIT is waited for.
            CreditWait::Idle if self.peers[dst].rendezvous_finds_receive => false,
            CreditWait::Idle => {
                // The first request waits as long as a receiver may hold a credit back for a
                // carrier: one that returns credits at once (it holds many of them) makes the
                // request needless.
                self.peers[dst].credit_wait = CreditWait::Waiting {
                    ask_again_at: now + self.config.ack_delay_ns,
                    give_up_at: now + wait_ns,
                };
                self.counters.record(dst, |s| s.credit_waits += 1);
                true
            }
            CreditWait::Waiting { give_up_at, .. } if now < give_up_at => true,
            CreditWait::Waiting { .. } => {
                // This message is the first the run-out wait lets through.
                self.peers[dst].credit_wait = CreditWait::RanOut {
                    left: self.ran_out_messages(dst) - 1,
                };
                false
            }
            CreditWait::RanOut { left: 0 } => {
                // The messages a run-out wait let through are out: wait for a credit again.
                self.peers[dst].credit_wait = CreditWait::Idle;
                self.wait_for_credit(now, dst)
            }
            CreditWait::RanOut { left } => {
                self.peers[dst].credit_wait = CreditWait::RanOut { left: left - 1 };
                false
            }
            CreditWait::Held => false,
        }
    }

    /// How many messages a wait for `dst`'s credits that ran out lets go by rendezvous: as
    /// many as `dst` keeps buffers of the class the waiting message (the queue's head) spends.
    fn ran_out_messages(&self, dst: Rank) -> u32 {
        let class = match self.peers[dst].queue_head {
            Some(head) => CreditClass::of(self.sends[head].data.total_len()),
            None => CreditClass::Eager,
        };
        class.per_peer(&self.config).max(1)
    }

    /// Sends `dst` a CREDIT with REQUEST, and the next one a retransmission timeout later if
    /// the wait goes on (the request or its answer may be lost).
    fn ask_for_credits(&mut self, now: Nanos, dst: Rank) {
        let peer = &mut self.peers[dst];
        if let CreditWait::Waiting { ask_again_at, .. } = &mut peer.credit_wait {
            *ask_again_at = now + peer.rto.rto_ns();
        }
        self.queue_control(control(dst, FrameKind::Credit, Flags::REQUEST, 0, 0));
    }

    /// Runs the timers of credit waits: asks again, or gives up (the message goes by
    /// rendezvous). A wait whose message left the queue (cancelled) just ends. Only the peers
    /// of `due` (those with a timer at `now`) are looked at: a wait has a timer while it runs.
    pub(crate) fn expire_credit_waits(&mut self, now: Nanos, due: &[Rank]) {
        for &dst in due {
            let CreditWait::Waiting {
                ask_again_at,
                give_up_at,
            } = self.peers[dst].credit_wait
            else {
                continue;
            };
            if self.peers[dst].queue_head.is_none() {
                self.peers[dst].credit_wait = CreditWait::Idle;
            } else if give_up_at <= now {
                // Ran out before the queue runs: a head that cannot start now (message window
                // closed) must not leave a deadline in the past behind.
                self.peers[dst].credit_wait = CreditWait::RanOut {
                    left: self.ran_out_messages(dst),
                };
                self.start_queued_for(now, dst);
            } else if ask_again_at <= now {
                self.ask_for_credits(now, dst);
            }
        }
    }

    /// A CREDIT with WAIT from `peer`: its buffers for this rank are held while it waits for
    /// a later message. A waiting message goes by rendezvous now (the frame's caller starts
    /// the queue).
    pub(crate) fn on_credits_held(&mut self, peer: Rank) {
        let state = &mut self.peers[peer];
        if matches!(
            state.credit_wait,
            CreditWait::Waiting { .. } | CreditWait::RanOut { .. }
        ) {
            state.credit_wait = CreditWait::Held;
        }
    }

    /// A CREDIT with REQUEST from `peer` (out of credits, or probing): answer with the count
    /// now, with WAIT if its credits are held for good, and return the next credit at once.
    pub(crate) fn on_credit_request(&mut self, peer: Rank) {
        self.peers[peer].credit_requested = true;
        let flags = if self.holds_credits_while_waiting(peer) {
            Flags::WAIT
        } else {
            0
        };
        self.queue_control(control(peer, FrameKind::Credit, flags, 0, 0));
    }

    /// True if every buffer of a class of `peer` holds a message while a receive or probe waits for
    /// another message `peer` may send. A receive that one of the buffered messages matched
    /// would have taken it, so that receive waits for a later message: the buffers are not
    /// freed before the sender's next message arrives. (While an earlier message of the peer
    /// is still missing, the buffered ones cannot be matched yet either, and the answer costs
    /// the sender only one message by rendezvous.)
    ///
    /// Any class held whole counts: the request does not say which class the sender is
    /// short of, and a WAIT it did not need costs it only messages by rendezvous until its
    /// next credit (the answer carries the counts, and a credit in it ends the wait first).
    fn holds_credits_while_waiting(&self, peer: Rank) -> bool {
        let used = &self.peers[peer].buffers_used;
        let held = CreditClass::ALL
            .into_iter()
            .any(|class| used[class].count_ones() >= class.per_peer(&self.config));
        held && self.rx.awaits_from(peer)
    }

    /// Whether a credit just returned to `peer` should leave at once rather than wait
    /// `ack_delay_ns` for a reply to carry it: the peer asked for credits, or half of its
    /// credits have come free without a frame telling it so. A ping-pong's credit, one message
    /// at a time, still waits for the reply.
    ///
    /// Credits held in this rank's buffers do not make it urgent (they did before): a receiver
    /// slower than its sender holds most of the sender's credits all the time, and returned
    /// each in a datagram of its own as it took a message, which slowed the slower side
    /// further (8-byte `NPopenmpi -s`: 6.2 us a message, 4.4 with this rule). A sender left
    /// without credits meanwhile stalls nobody: more than half its credits are messages the
    /// receiver has yet to take.
    pub(crate) fn credit_is_urgent(&self, peer: Rank) -> bool {
        let state = &self.peers[peer];
        let half_untold = |class: CreditClass| {
            let untold = state.credits_given.ahead_of(state.credits_reported, class);
            u32::from(untold) >= (class.per_peer(&self.config) / 2).max(1)
        };
        state.credit_requested || CreditClass::ALL.into_iter().any(half_untold)
    }
}

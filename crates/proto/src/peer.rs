//! Per-peer state: connectionless as in EMP. No handshake creates it; it exists for every rank of
//! the job from start-up and is a few hundred bytes (see `PEER_STATE_BYTES`; a pair that finishes
//! an id 128 or more past its oldest unfinished one allocates the rest of that id window,
//! `window.rs`).

use crate::credit_wait::CreditWait;
use crate::credits::{CreditClass, CreditCounts, PerClass};
use crate::drain::Drain;
use crate::piggyback::OwedAcks;
use crate::rto::RtoEstimator;
use crate::slab::SendKey;
use crate::window::IdWindow;
use crate::Nanos;

#[derive(Debug, Clone)]
pub(crate) struct Peer {
    // --- this rank sending to the peer ---
    /// Next message id to assign.
    pub send_next: u32,
    pub send_window: IdWindow,
    /// Eager messages started towards the peer, ever, by credit class (wrapping).
    pub(crate) credits_spent: CreditCounts,
    /// Credits the peer has returned, ever (wrapping, cumulative so a lost CREDIT is repaired by
    /// any later frame).
    pub(crate) credits_returned: CreditCounts,
    /// Sends waiting to start, FIFO through `SendOp::next_queued`.
    pub queue_head: Option<SendKey>,
    pub queue_tail: Option<SendKey>,
    /// Whether the eager message at the head of the queue waits for a credit (`credit_wait.rs`).
    pub credit_wait: CreditWait,
    /// The last rendezvous message to the peer that was answered found its receive posted (no
    /// WAIT): the peer keeps up, so an eager message out of credits goes by rendezvous at once
    /// instead of waiting for one (`credit_wait.rs`).
    pub rendezvous_finds_receive: bool,
    /// The peer's link checks nothing (AF_XDP): frames to it cover their payload in their
    /// checksum even where this rank's link checks payloads (`Config::link_checks_payload`).
    pub link_unchecked: bool,
    // --- this rank receiving from the peer ---
    pub recv_window: IdWindow,
    /// Next message id whose header must be matched (MPI non-overtaking order).
    pub next_match: u32,
    /// The latest message id (in id order) of the peer whose first frame has arrived.
    pub latest_arrived: u32,
    /// Messages from the peer wait behind one that has not arrived, and count as one waiter on
    /// it (`Core::watch_gap`).
    pub gap_watched: bool,
    /// Eager messages from the peer this rank has finished with, ever: the credits returned.
    pub(crate) credits_given: CreditCounts,
    /// `credits_given` as the last frame that carried it to the peer said: the credits
    /// returned since are ones the peer cannot spend yet.
    pub(crate) credits_reported: CreditCounts,
    /// Buffers of each class in use by the peer's unexpected messages (bit per buffer).
    pub(crate) buffers_used: PerClass<u64>,
    /// Queued control frames to the peer that carry the credit count (ACK, CTS, MSG-ACK,
    /// CREDIT).
    pub credit_carriers_queued: u32,
    /// Whole eager messages from the peer, consecutive ids, whose ACK_ALLs have not left yet:
    /// they wait for a frame to the peer to carry them, or their deadline (`piggyback.rs`).
    pub ack_owed: Option<OwedAcks>,
    /// Credits returned to the peer that no frame has carried yet.
    pub credit_owed: bool,
    /// EAGER frames went to the peer since an acknowledgement owed to it last had to leave on
    /// its own (a ping-pong rather than a stream): only then does a longer eager message's
    /// acknowledgement, which its sender's completion waits for, wait for a reply to carry it
    /// (TCP's ping-pong mode).
    pub replies_follow: bool,
    /// The peer ran out of credits and asked for them (CREDIT with REQUEST): the next credit
    /// returned to it leaves at once instead of waiting `ack_delay_ns` for a carrier.
    pub credit_requested: bool,
    /// When the owed acknowledgement or credit goes out on its own.
    pub owed_deadline_ns: Option<Nanos>,
    // --- liveness ---
    pub rto: RtoEstimator,
    /// When frames handed to the kernel for this peer are expected to leave (`drain.rs`).
    pub drain: Drain,
    pub last_heard_ns: Nanos,
    pub probe_deadline_ns: Option<Nanos>,
    pub probe_retries: u32,
    /// Operations that wait on this peer with no timer of their own: posted receives naming it,
    /// matched incoming messages still arriving, and (one count) messages held behind a
    /// missing one (`gap_watched`).
    pub waiters: u32,
    /// Sends to the peer that have started (ids assigned) and not finished.
    pub sends_in_flight: u32,
    /// Since when a frame that asks the peer for an answer has gone without any frame coming
    /// back (`liveness.rs`); `None` when the peer answered since.
    pub silent_since: Option<Nanos>,
    /// The peer's host refused frames to it (ICMP port unreachable) this many times with
    /// nothing heard in between.
    pub refusals: u32,
    pub unreachable: bool,
}

impl Peer {
    pub fn new(rto_initial_ns: Nanos) -> Self {
        Self {
            send_next: 0,
            send_window: IdWindow::default(),
            credits_spent: CreditCounts::default(),
            credits_returned: CreditCounts::default(),
            queue_head: None,
            queue_tail: None,
            credit_wait: CreditWait::Idle,
            rendezvous_finds_receive: true,
            link_unchecked: false,
            recv_window: IdWindow::default(),
            next_match: 0,
            latest_arrived: 0,
            gap_watched: false,
            credits_given: CreditCounts::default(),
            credits_reported: CreditCounts::default(),
            buffers_used: PerClass::default(),
            credit_carriers_queued: 0,
            ack_owed: None,
            credit_owed: false,
            replies_follow: true,
            credit_requested: false,
            owed_deadline_ns: None,
            rto: RtoEstimator::new(rto_initial_ns),
            drain: Drain::default(),
            last_heard_ns: 0,
            probe_deadline_ns: None,
            probe_retries: 0,
            waiters: 0,
            sends_in_flight: 0,
            silent_since: None,
            refusals: 0,
            unreachable: false,
        }
    }

    /// The first frame of message `msg_id` arrived.
    pub(crate) fn note_arrival(&mut self, msg_id: u32) {
        if is_after(msg_id, self.latest_arrived) {
            self.latest_arrived = msg_id;
        }
    }

    /// True if a message of the peer arrived that cannot be matched before `next_match`,
    /// which has not (messages are matched in id order).
    pub(crate) fn arrived_beyond_next_match(&self) -> bool {
        is_after(self.latest_arrived, self.next_match)
    }

    /// Credits of `class` this rank may still spend on eager messages to the peer, of the
    /// `per_peer` the peer keeps buffers for.
    pub(crate) fn credits_available(&self, class: CreditClass, per_peer: u32) -> u32 {
        let outstanding = self.credits_spent.ahead_of(self.credits_returned, class);
        per_peer.saturating_sub(u32::from(outstanding))
    }

    /// Takes the cumulative credit counts of a frame (`aux`); an older (reordered) count of a
    /// class, or one beyond what was spent, is ignored. True if any credit came back.
    pub(crate) fn update_credits(&mut self, aux: u32) -> bool {
        let counts = CreditCounts::from_aux(aux);
        let mut advanced = false;
        for class in CreditClass::ALL {
            let advance = counts.ahead_of(self.credits_returned, class);
            let outstanding = self.credits_spent.ahead_of(self.credits_returned, class);
            if advance == 0 || advance > outstanding {
                continue;
            }
            self.credits_returned[class] = counts[class];
            advanced = true;
        }
        if advanced {
            // A credit came back: the next shortage is waited out again.
            self.credit_wait = CreditWait::Idle;
        }
        advanced
    }

    /// Room for another message id in flight.
    pub fn window_open(&self) -> bool {
        self.send_next.wrapping_sub(self.send_window.base) < crate::config::MSG_WINDOW
    }
}

/// True if message id `a` comes after `b`. Ids wrap; those of one peer that are alive at once
/// lie within `MSG_WINDOW` of each other, far less than half the id space.
fn is_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credits::{COUNT_BITS, COUNT_MASK};

    fn aux(eager: u16, small: u16) -> u32 {
        counts(eager, small).to_aux()
    }

    fn counts(eager: u16, small: u16) -> CreditCounts {
        PerClass([eager, small, 0])
    }

    /// Counts come back per class, cumulative: an older count (a reordered or duplicated
    /// frame) and one beyond what was spent (a broken or hostile peer) are ignored, class by
    /// class, across the wrap.
    #[test]
    fn credit_counts_are_taken_per_class_and_never_backwards_or_beyond_what_was_spent() {
        let mut peer = Peer::new(1_000);
        peer.credits_spent = counts(3, 2);
        assert!(peer.update_credits(aux(2, 0)));
        assert_eq!(peer.credits_available(CreditClass::Eager, 8), 7);
        assert_eq!(peer.credits_available(CreditClass::Small, 4), 2);
        assert!(!peer.update_credits(aux(1, 0)), "older");
        assert!(
            !peer.update_credits(aux(2, 3)),
            "small: beyond what was spent"
        );
        assert_eq!(peer.credits_returned, counts(2, 0));
        assert!(peer.update_credits(aux(9, 2)), "eager beyond, small taken");
        assert_eq!(peer.credits_returned, counts(2, 2));

        peer.credits_spent[CreditClass::Eager] = 1;
        peer.credits_returned[CreditClass::Eager] = COUNT_MASK;
        assert!(peer.update_credits(aux(0, 2)), "across the wrap");
        assert_eq!(peer.credits_returned[CreditClass::Eager], 0);
        assert!(
            !peer.update_credits(aux(COUNT_MASK, 2)),
            "older across the wrap"
        );

        peer.credits_spent[CreditClass::Medium] = 5;
        let medium = |count: u16| aux(0, 2) | u32::from(count) << (2 * COUNT_BITS);
        assert!(peer.update_credits(medium(4)), "medium taken");
        assert_eq!(peer.credits_returned, PerClass([0, 2, 4]));
        assert!(
            !peer.update_credits(medium(6)),
            "medium: beyond what was spent"
        );
        assert_eq!(peer.credits_available(CreditClass::Medium, 32), 31);
    }
}

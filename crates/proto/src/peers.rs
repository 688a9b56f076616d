//! The peers of one endpoint and their liveness: the per-peer state of every rank of the job
//! (`peer.rs`), and the bookkeeping that decides when a silent peer is probed or given up on
//! (the rule is in `liveness.rs`). Everything here touches peer state only; what a peer's fate
//! does to operations is the core's business.

use std::cell::RefCell;
use std::ops::{Index, IndexMut};

use crate::peer::Peer;
use crate::slab::Key;
use crate::timers::{DeadlineIndex, Earliest};
use crate::{Config, Nanos, Rank};

/// Peers whose earliest timer is found by asking each: the walk costs about 35 instructions a
/// peer and the index of deadlines about 300 a question (a heap push and pop after each
/// message), so two ranks walked in 100 instructions. The index still runs below this size
/// (touches are recorded, `take_due` reads it), so a job that grows past it needs no switch.
const PEERS_WALKED_MAX: Rank = 8;

/// A rank is its own slot in the index of the peers' deadlines.
impl Key for Rank {
    fn from_slot(slot: u32) -> Self {
        slot
    }

    fn slot(self) -> u32 {
        self
    }
}

/// Every rank's [`Peer`] state, by rank, with the liveness timers derived from it.
pub(crate) struct Peers {
    /// By rank, this rank's own entry included (messages to itself take ids from it).
    peers: Vec<Peer>,
    /// This rank: nothing is probed or awaited over the network from itself.
    rank: Rank,
    /// Silence before a peer something waits on is probed.
    keepalive_ns: Nanos,
    /// Unanswered silence before a peer is declared unreachable.
    peer_timeout_ns: Nanos,
    /// Ranks `0..in_use` may hold state: every rank in a job; in open mode the slots bound so
    /// far (the directory takes the lowest free slot), so the timer scan after every change
    /// covers the peers an endpoint has talked to, not all the slots it could hold (65 for the
    /// libfabric provider: 3 % of a ping-pong's time scanned idle slots).
    in_use: Rank,
    /// Which peers to ask for the earliest timer (`timers.rs`). Every change to a peer goes
    /// through `IndexMut`, which touches it. A walk of every peer after every change cost
    /// 35 instructions a peer: 1,150 a message in a job of 32 ranks, 36,000 in one of 1,024,
    /// where a ping-pong's whole message costs about 8,000.
    deadlines: RefCell<DeadlineIndex<Rank>>,
}

impl Peers {
    pub(crate) fn new(config: &Config, rank: Rank, size: u32) -> Self {
        Self {
            peers: vec![Peer::new(config.rto_initial_ns); size as usize],
            rank,
            keepalive_ns: config.keepalive_ns,
            peer_timeout_ns: config.peer_timeout_ns,
            in_use: size,
            deadlines: RefCell::new(DeadlineIndex::new(size as usize)),
        }
    }

    /// Open mode: only this endpoint's own slot holds state until slots are bound
    /// ([`restart`](Self::restart)).
    pub(crate) fn start_open(&mut self) {
        self.in_use = 1;
    }

    /// The ranks that may hold state.
    pub(crate) fn in_use(&self) -> std::ops::Range<Rank> {
        0..self.in_use
    }

    /// Open mode: the slot `peer` starts a conversation with a new peer (the core holds nothing
    /// for it any more); its last-heard time is left for liveness to restart from.
    pub(crate) fn restart(&mut self, peer: Rank, config: &Config) {
        self.in_use = self.in_use.max(peer + 1);
        self[peer] = Peer::new(config.rto_initial_ns);
    }

    /// True when `peer` is a rank of the job that has been declared unreachable.
    pub(crate) fn is_unreachable(&self, peer: Rank) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| p.unreachable)
    }

    // --- liveness ---

    /// A frame from `peer` arrived: it is alive, its silence and refusals are forgiven, and
    /// the next probe (if anything waits on it) is a keepalive away.
    pub(crate) fn heard_from(&mut self, now: Nanos, peer: Rank) {
        let keepalive = self.keepalive_ns;
        let state = &mut self[peer];
        state.last_heard_ns = now;
        state.probe_retries = 0;
        state.silent_since = None;
        state.refusals = 0;
        if state.waiters > 0 {
            state.probe_deadline_ns = Some(now + keepalive);
        }
    }

    /// A frame that asks `peer` for an answer leaves now. Only while something is awaited
    /// from the peer does its silence start: a frame asked of it otherwise (a credit wait's
    /// request, whose message may then be cancelled) and answered by a frame that was lost
    /// left the clock running from it, and a wait that began after `peer_timeout_ns` of
    /// quiet declared the live peer unreachable at once, before probing it.
    pub(crate) fn expect_answer(&mut self, now: Nanos, peer: Rank) {
        if !self.awaited(peer) {
            return;
        }
        let state = &mut self[peer];
        if state.silent_since.is_none() {
            state.silent_since = Some(now);
        }
    }

    /// Something is awaited from the peer: silence from it counts against it.
    fn awaited(&self, peer: Rank) -> bool {
        let state = &self[peer];
        state.waiters > 0 || state.sends_in_flight > 0
    }

    /// An operation with `peer` ended: when nothing is awaited from it any more, an earlier
    /// unanswered frame no longer counts (a later wait starts its own clock).
    pub(crate) fn awaited_less(&mut self, peer: Rank) {
        if !self.awaited(peer) {
            self[peer].silent_since = None;
        }
    }

    /// An operation now waits on `peer` without a timer of its own: probe it after silence.
    pub(crate) fn add_waiter(&mut self, peer: Rank) {
        if peer == self.rank {
            return; // no network, nothing to probe
        }
        let keepalive = self.keepalive_ns;
        let state = &mut self[peer];
        state.waiters += 1;
        if state.probe_deadline_ns.is_none() {
            // The last time heard stands in for `now`: a probe is due after keepalive silence.
            state.probe_deadline_ns = Some(state.last_heard_ns + keepalive);
        }
    }

    /// An operation waiting on `peer` ended (matched, completed or failed).
    pub(crate) fn remove_waiter(&mut self, peer: Rank) {
        if peer == self.rank {
            return;
        }
        let state = &mut self[peer];
        debug_assert!(state.waiters > 0, "waiter count of rank {peer} underflows");
        state.waiters = state.waiters.saturating_sub(1);
        if state.waiters == 0 {
            state.probe_deadline_ns = None;
            state.probe_retries = 0;
        }
        self.awaited_less(peer);
    }

    /// When `peer`'s silence would make it unreachable.
    pub(crate) fn silence_deadline(&self, peer: Rank) -> Option<Nanos> {
        let state = &self[peer];
        if state.unreachable || !self.awaited(peer) {
            return None;
        }
        Some(state.silent_since? + self.peer_timeout_ns)
    }

    /// True if `peer`'s liveness probe is due at `now`.
    pub(crate) fn probe_due(&self, now: Nanos, peer: Rank) -> bool {
        self[peer].probe_deadline_ns.is_some_and(|d| d <= now)
    }

    /// A probe to `peer` leaves now: the next follows, backed off up to `max_ns`, while the
    /// peer stays silent.
    pub(crate) fn probe_sent(&mut self, now: Nanos, peer: Rank, max_ns: Nanos) {
        let state = &mut self[peer];
        state.probe_retries += 1;
        let wait = state.rto.backed_off_ns(state.probe_retries, max_ns);
        state.probe_deadline_ns = Some(now + wait);
    }

    /// `peer` has been declared unreachable: nothing is awaited from it or owed to it any more.
    pub(crate) fn forget_waits(&mut self, peer: Rank) {
        let state = &mut self[peer];
        debug_assert!(state.unreachable, "only a dead peer's waits are forgotten");
        state.probe_deadline_ns = None;
        state.waiters = 0;
        state.gap_watched = false;
        state.silent_since = None;
        state.ack_owed = None;
        state.credit_owed = false;
        state.credit_requested = false;
        state.credit_wait = crate::credit_wait::CreditWait::Idle;
        state.owed_deadline_ns = None;
    }

    // --- acknowledgements and credits owed (`piggyback.rs`) ---

    /// Something owed to `peer` goes out on its own at `at` unless a frame carries it first
    /// (an earlier deadline stands).
    pub(crate) fn arm_owed(&mut self, peer: Rank, at: Nanos) {
        let state = &mut self[peer];
        if state.owed_deadline_ns.is_none() {
            state.owed_deadline_ns = Some(at);
        }
    }

    /// Disarms `peer`'s owed deadline once nothing is owed any more.
    pub(crate) fn settle_owed(&mut self, peer: Rank) {
        let state = &mut self[peer];
        if state.ack_owed.is_none() && !state.credit_owed {
            state.owed_deadline_ns = None;
        }
    }

    // --- timers ---

    /// The earliest timer of `peer`: a liveness probe, an owed acknowledgement, a credit
    /// wait's, or the end of a silence that would make it unreachable.
    fn deadline(&self, peer: Rank) -> Option<Nanos> {
        let state = &self[peer];
        let mut earliest = Earliest::default();
        earliest.consider(state.probe_deadline_ns);
        earliest.consider(state.owed_deadline_ns);
        earliest.consider(state.credit_wait.deadline());
        earliest.consider(self.silence_deadline(peer));
        earliest.get()
    }

    /// The earliest timer of any peer: a walk of a few, else from the index of deadlines
    /// (checked against a walk in debug builds).
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        if self.in_use <= PEERS_WALKED_MAX {
            return self.walk_next_deadline();
        }
        let earliest = self.deadlines.borrow_mut().earliest(
            self.in_use as usize,
            |peer| self.deadline(peer),
            || self.in_use(),
        );
        debug_assert_eq!(
            earliest,
            self.walk_next_deadline(),
            "the peers' deadline index is stale"
        );
        earliest
    }

    /// The earliest timer of any peer, by asking every one.
    fn walk_next_deadline(&self) -> Option<Nanos> {
        let mut earliest = Earliest::default();
        for peer in self.in_use() {
            earliest.consider(self.deadline(peer));
        }
        earliest.get()
    }

    /// Puts in `due`, by rank, the peers with a timer at or before `now` (those the core's
    /// timers act on), from the index of deadlines; checked against a walk in debug builds.
    pub(crate) fn take_due(&mut self, now: Nanos, due: &mut Vec<Rank>) {
        let deadline = |peer| self.deadline(peer);
        let mut index = self.deadlines.borrow_mut();
        // Walked few, `next_deadline` never asks the index, whose `earliest` bounds its stale
        // copies: without this, a deadline that moves later between timers (a silence clock
        // restarted every round trip) left a copy per timer until it came due.
        index.trim(self.in_use as usize, &deadline, || self.in_use());
        index.take_due(now, deadline, due);
        drop(index);
        debug_assert_eq!(
            *due,
            self.in_use()
                .filter(|&peer| self.deadline(peer).is_some_and(|d| d <= now))
                .collect::<Vec<_>>(),
            "the peers' deadline index missed a due peer"
        );
    }
}

/// A rank's state. Ranks are checked against the job's size where they enter the core (frame
/// headers, host commands), so a rank out of range here is a bug and panics.
impl Index<Rank> for Peers {
    type Output = Peer;

    fn index(&self, peer: Rank) -> &Peer {
        &self.peers[peer as usize]
    }
}

impl IndexMut<Rank> for Peers {
    /// The peer's timers may change: the index of deadlines asks it again.
    fn index_mut(&mut self, peer: Rank) -> &mut Peer {
        self.deadlines.get_mut().touch(peer);
        &mut self.peers[peer as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEPALIVE: Nanos = 1_000;
    const TIMEOUT: Nanos = 50_000;

    fn peers() -> Peers {
        let config = Config {
            keepalive_ns: KEEPALIVE,
            peer_timeout_ns: TIMEOUT,
            ..Config::default()
        };
        Peers::new(&config, 0, 3)
    }

    #[test]
    fn a_waiter_arms_a_probe_and_the_last_one_disarms_it() {
        let mut peers = peers();
        assert_eq!(peers.next_deadline(), None);
        peers.heard_from(100, 1);
        peers.add_waiter(1);
        assert_eq!(peers[1].probe_deadline_ns, Some(100 + KEEPALIVE));
        assert!(peers.probe_due(100 + KEEPALIVE, 1));
        peers.probe_sent(100 + KEEPALIVE, 1, KEEPALIVE);
        assert!(!peers.probe_due(100 + KEEPALIVE, 1));
        peers.remove_waiter(1);
        assert_eq!(peers[1].probe_deadline_ns, None);
        assert_eq!(peers[1].probe_retries, 0);
        assert_eq!(peers.next_deadline(), None);
    }

    /// Past the walked few, the earliest timer and the due peers come from the index: they
    /// are what a walk of every peer finds, through waits, frames heard, owed
    /// acknowledgements and probes in any order.
    #[test]
    fn the_index_answers_what_a_walk_of_the_peers_finds() {
        const SIZE: Rank = 20;
        let config = Config {
            keepalive_ns: KEEPALIVE,
            peer_timeout_ns: TIMEOUT,
            ..Config::default()
        };
        let mut peers = Peers::new(&config, 0, SIZE);
        let walk = |peers: &Peers| peers.in_use().filter_map(|p| peers.deadline(p)).min();
        let mut state = 0x9e37_79b9_u64;
        let mut due = Vec::new();
        for now in (0..20_000u64).map(|step| step * 37) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let peer = (state % u64::from(SIZE)) as Rank;
            match (state >> 8) % 6 {
                0 => peers.add_waiter(peer),
                1 if peers[peer].waiters > 0 => peers.remove_waiter(peer),
                2 => peers.heard_from(now, peer),
                3 => peers.arm_owed(peer, now + (state >> 16) % 5_000),
                4 => {
                    peers[peer].owed_deadline_ns = None;
                }
                _ => peers.expect_answer(now, peer),
            }
            assert_eq!(peers.next_deadline(), walk(&peers));
            if (state >> 20).is_multiple_of(4) {
                peers.take_due(now, &mut due);
                let walked: Vec<Rank> = peers
                    .in_use()
                    .filter(|&p| peers.deadline(p).is_some_and(|d| d <= now))
                    .collect();
                assert_eq!(due, walked);
                for &peer in &due {
                    peers.probe_sent(now, peer, KEEPALIVE);
                    peers[peer].owed_deadline_ns = None;
                }
            }
        }
    }

    /// Walked few, the index that `take_due` reads still holds few stale copies: a silence
    /// clock restarted every round trip, with timers firing between (another peer's owed
    /// acknowledgements), pushed a copy at each timer that stayed until it came due
    /// (200,000 with the default timeout and a timer every 50 us).
    #[test]
    fn the_walked_few_leave_no_pile_of_stale_deadlines() {
        let mut peers = peers();
        peers[1].sends_in_flight = 1;
        let mut due = Vec::new();
        for now in (0..20_000u64).map(|step| step * 10) {
            peers.expect_answer(now, 1);
            peers.heard_from(now + 3, 1);
            peers.expect_answer(now + 6, 1);
            peers.take_due(now + 6, &mut due);
            assert!(due.is_empty());
            assert_eq!(peers.next_deadline(), Some(now + 6 + TIMEOUT));
        }
        let held = peers.deadlines.borrow().held();
        assert!(
            held <= 2 * peers.in_use as usize + crate::timers::STALE_DEADLINES_MAX,
            "{held} copies held"
        );
    }

    #[test]
    fn nothing_waits_on_this_rank_itself() {
        let mut peers = peers();
        peers.add_waiter(0);
        assert_eq!(peers[0].waiters, 0);
        assert_eq!(peers.next_deadline(), None);
    }

    #[test]
    fn silence_counts_only_while_something_is_awaited() {
        let mut peers = peers();
        peers.expect_answer(10, 2);
        assert_eq!(peers.silence_deadline(2), None, "nothing awaited");
        peers.add_waiter(2);
        assert_eq!(
            peers.silence_deadline(2),
            None,
            "a frame asked of it while nothing was awaited does not count"
        );
        peers.expect_answer(10, 2);
        assert_eq!(peers.silence_deadline(2), Some(10 + TIMEOUT));
        assert_eq!(
            peers.next_deadline(),
            Some(KEEPALIVE),
            "the probe comes first"
        );
        peers.heard_from(20, 2);
        assert_eq!(peers.silence_deadline(2), None, "answered");
        peers.expect_answer(30, 2);
        peers.remove_waiter(2);
        assert_eq!(
            peers[2].silent_since, None,
            "the wait ended with the waiter"
        );
    }

    #[test]
    fn an_owed_deadline_stands_until_nothing_is_owed() {
        let mut peers = peers();
        peers[1].credit_owed = true;
        peers.arm_owed(1, 500);
        peers.arm_owed(1, 900);
        assert_eq!(peers.next_deadline(), Some(500));
        peers.settle_owed(1);
        assert_eq!(
            peers[1].owed_deadline_ns,
            Some(500),
            "a credit is still owed"
        );
        peers[1].credit_owed = false;
        peers.settle_owed(1);
        assert_eq!(peers.next_deadline(), None);
    }
}

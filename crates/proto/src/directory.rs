//! Peers added by address: an *open* endpoint has no job of ranks, only a bounded table of peer
//! slots, each bound to a socket address, filled as peers are sent to or heard from and reused
//! when they go (the socket-like datagram API, and a libfabric address vector, stand on it).
//!
//! A slot is a rank of the protocol core like any other (slot 0 is the endpoint itself), so
//! reliability, ordering, credits and liveness apply unchanged. What open mode adds is who a
//! slot is: each process picks a random nonzero *incarnation* when it opens, and its frames
//! carry it in the header's `src` field, and in `dst` the incarnation of the receiver as the
//! sender knows it (0 before it has heard from it). That tells apart, without a handshake:
//!
//! * a new peer (unknown address, `dst` 0): a fresh slot;
//! * a restarted peer (known address, another incarnation, `dst` 0): the old slot is retired
//!   (its operations fail as unreachable, as for a dead peer) and a fresh slot starts;
//! * a frame meant for an earlier incarnation of this endpoint (`dst` neither 0 nor this
//!   endpoint's incarnation): dropped, so a restarted receiver never takes the middle of a
//!   conversation its previous life began;
//! * a peer this endpoint forgot (unknown address, `dst` this endpoint's incarnation): it is
//!   told with RESET, so its pending operations fail at once and its next send starts afresh.
//!
//! Slots are reused only when the protocol core holds nothing for them (no send, no message,
//! no receive naming them): retired slots, or active ones silent for `quiet_ns` (longer than a
//! peer keeps retransmitting unanswered frames, so a live sender never loses its slot).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use crate::{Nanos, Rank};

/// Most peer slots of one open endpoint. Each costs its protocol state (`PEER_STATE_BYTES`)
/// and its share of the eager pool; the bound keeps a server's memory fixed however many
/// clients come and go, and the slot number fits the descriptor table's peer field.
pub const MAX_OPEN_PEERS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Never used, or reclaimed.
    Free,
    /// Bound to an address that sends or is sent to.
    Active,
    /// Given up on (unreachable, restarted, forgotten): kept until the core holds nothing for
    /// it, so late frames of that incarnation are answered with RESET instead of starting a
    /// conversation.
    Retired,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    address: Option<SocketAddr>,
    /// The peer's incarnation; 0 until a frame of it arrives.
    incarnation: u32,
    /// Last frame heard, or the slot's creation.
    last_heard_ns: Nanos,
}

const FREE_SLOT: Slot = Slot {
    state: SlotState::Free,
    address: None,
    incarnation: 0,
    last_heard_ns: 0,
};

/// What to do with a frame from a socket address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// A frame of the peer in this slot (active or retired; the core answers retired ones
    /// with RESET).
    Peer(Rank),
    /// The peer at this address restarted: `old` is retired and must be given up on; the frame
    /// belongs to `new` (none if the table is full).
    Restarted { old: Rank, new: Option<Rank> },
    /// A peer that knows this endpoint, which forgot it: the slot was made for telling it so
    /// (give it up, which sends RESET), and the frame is dropped.
    Forgotten(Rank),
    /// Meant for an earlier incarnation of this endpoint, or with no incarnation: dropped.
    Stale,
    /// No slot free for a new peer: dropped (the peer retransmits, and gets one when a slot
    /// frees, or gives up on this endpoint).
    Full,
}

/// The slots of an open endpoint and the addresses they are bound to.
pub(crate) struct Directory {
    /// This endpoint's incarnation.
    me: u32,
    /// By rank; slot 0 is this endpoint.
    slots: Vec<Slot>,
    /// Active slots by address (one per address).
    by_address: HashMap<SocketAddr, Rank>,
    /// Retired slots by address and incarnation.
    retired: HashMap<(SocketAddr, u32), Rank>,
    /// Slots bound to a new address since the driver last looked, for the transport (each
    /// rank at most once: `binding_queued`).
    bindings: VecDeque<Rank>,
    binding_queued: Vec<bool>,
    /// Slots just (re)bound, whose protocol state the core must start afresh before anything
    /// else touches them (`take_rebound`).
    rebound: Vec<Rank>,
    /// The address of this endpoint itself: sends to it take the core's local path.
    own_address: Option<SocketAddr>,
    /// Silence after which an active slot the core holds nothing for may be reused.
    quiet_ns: Nanos,
}

impl Directory {
    /// A directory of `capacity` peer slots (ranks 1..=capacity) for the incarnation `me`.
    pub(crate) fn new(me: u32, capacity: u32, quiet_ns: Nanos) -> Self {
        let slots = capacity as usize + 1;
        Self {
            me,
            slots: vec![FREE_SLOT; slots],
            by_address: HashMap::with_capacity(slots),
            retired: HashMap::with_capacity(slots),
            bindings: VecDeque::with_capacity(slots),
            binding_queued: vec![false; slots],
            rebound: Vec::with_capacity(slots),
            own_address: None,
            quiet_ns,
        }
    }

    pub(crate) fn incarnation(&self) -> u32 {
        self.me
    }

    pub(crate) fn set_own_address(&mut self, address: SocketAddr) {
        self.own_address = Some(address);
    }

    /// The incarnation frames to `peer` name in their `dst` field (0: not heard from yet).
    pub(crate) fn wire_name(&self, peer: Rank) -> u32 {
        self.slots.get(peer as usize).map_or(0, |s| s.incarnation)
    }

    pub(crate) fn address(&self, peer: Rank) -> Option<SocketAddr> {
        self.slots.get(peer as usize).and_then(|s| s.address)
    }

    /// True when the slot is bound to a live conversation (not free, not retired).
    pub(crate) fn is_active(&self, peer: Rank) -> bool {
        self.slots
            .get(peer as usize)
            .is_some_and(|s| s.state == SlotState::Active)
    }

    /// The slot to send to `address` through, made if there is none; `None` when the table is
    /// full. `is_idle` says whether the core holds nothing for a slot (for reuse).
    pub(crate) fn resolve_send(
        &mut self,
        now: Nanos,
        address: SocketAddr,
        is_idle: &dyn Fn(Rank) -> bool,
    ) -> Option<Rank> {
        if self.own_address == Some(address) {
            return Some(0);
        }
        if let Some(&peer) = self.by_address.get(&address) {
            return Some(peer);
        }
        self.allocate(now, address, 0, SlotState::Active, is_idle)
    }

    /// Classifies a frame from `from` whose header names `src` (the sender's incarnation) and
    /// `dst` (this endpoint's, as the sender knows it). A frame that may not open a
    /// conversation (`opens` false: a RESET, which gives up on one) never takes a slot: from a
    /// peer without one it is stale.
    pub(crate) fn resolve_arrival(
        &mut self,
        now: Nanos,
        (from, src, dst): (SocketAddr, u32, u32),
        opens: bool,
        is_idle: &dyn Fn(Rank) -> bool,
    ) -> Arrival {
        if src == 0 || (dst != 0 && dst != self.me) {
            return Arrival::Stale;
        }
        if let Some(&peer) = self.retired.get(&(from, src)) {
            return Arrival::Peer(peer);
        }
        if let Some(&peer) = self.by_address.get(&from) {
            let slot = &mut self.slots[peer as usize];
            if slot.incarnation == 0 || slot.incarnation == src {
                slot.incarnation = src;
                slot.last_heard_ns = now;
                return Arrival::Peer(peer);
            }
            if dst != 0 || !opens {
                // It knows this endpoint, yet is not the incarnation it talks with: a frame
                // of an earlier life of that peer that outlived its slot.
                return Arrival::Stale;
            }
            self.retire(peer);
            let new = self.allocate(now, from, src, SlotState::Active, is_idle);
            return Arrival::Restarted { old: peer, new };
        }
        if !opens {
            return Arrival::Stale;
        }
        if dst == self.me {
            return match self.allocate(now, from, src, SlotState::Retired, is_idle) {
                Some(peer) => Arrival::Forgotten(peer),
                None => Arrival::Full,
            };
        }
        match self.allocate(now, from, src, SlotState::Active, is_idle) {
            Some(peer) => Arrival::Peer(peer),
            None => Arrival::Full,
        }
    }

    /// The core gave up on `peer` (unreachable, RESET, restarted): its address is free for a
    /// new conversation, and late frames of its incarnation find the retired slot.
    pub(crate) fn retire(&mut self, peer: Rank) {
        let Some(slot) = self.slots.get_mut(peer as usize) else {
            return;
        };
        if slot.state != SlotState::Active {
            return;
        }
        slot.state = SlotState::Retired;
        if let Some(address) = slot.address {
            if self.by_address.get(&address) == Some(&peer) {
                self.by_address.remove(&address);
            }
            self.retired.insert((address, slot.incarnation), peer);
        }
    }

    /// The next slot bound to a new address, for the transport.
    pub(crate) fn poll_binding(&mut self) -> Option<(Rank, SocketAddr)> {
        while let Some(peer) = self.bindings.pop_front() {
            self.binding_queued[peer as usize] = false;
            if let Some(address) = self.slots[peer as usize].address {
                return Some((peer, address));
            }
        }
        None
    }

    /// A slot bound since the last call: the core resets its state.
    pub(crate) fn take_rebound(&mut self) -> Option<Rank> {
        self.rebound.pop()
    }

    /// Binds a slot (free, or the most reusable one) to `address`; the caller resets the
    /// core's state of the returned rank.
    fn allocate(
        &mut self,
        now: Nanos,
        address: SocketAddr,
        incarnation: u32,
        state: SlotState,
        is_idle: &dyn Fn(Rank) -> bool,
    ) -> Option<Rank> {
        let peer = self.reusable_slot(now, is_idle)?;
        self.unbind(peer);
        self.slots[peer as usize] = Slot {
            state,
            address: Some(address),
            incarnation,
            last_heard_ns: now,
        };
        match state {
            SlotState::Active => {
                self.by_address.insert(address, peer);
            }
            _ => {
                self.retired.insert((address, incarnation), peer);
            }
        }
        self.rebound.push(peer);
        if !self.binding_queued[peer as usize] {
            self.binding_queued[peer as usize] = true;
            self.bindings.push_back(peer);
        }
        Some(peer)
    }

    /// A free slot; else a retired one the core is done with; else the active one silent
    /// longest, if silent for `quiet_ns` and idle. A linear scan: it runs when a peer is new,
    /// not per frame.
    fn reusable_slot(&self, now: Nanos, is_idle: &dyn Fn(Rank) -> bool) -> Option<Rank> {
        let peers = 1..self.slots.len() as Rank;
        if let Some(peer) = peers
            .clone()
            .find(|&p| self.slots[p as usize].state == SlotState::Free)
        {
            return Some(peer);
        }
        if let Some(peer) = peers.clone().find(|&p| {
            self.slots[p as usize].state == SlotState::Retired
                && self.slots[p as usize].last_heard_ns < now
                && is_idle(p)
        }) {
            return Some(peer);
        }
        peers
            .filter(|&p| {
                let slot = &self.slots[p as usize];
                slot.state == SlotState::Active
                    && now.saturating_sub(slot.last_heard_ns) >= self.quiet_ns
                    && is_idle(p)
            })
            .min_by_key(|&p| self.slots[p as usize].last_heard_ns)
    }

    /// Forgets the slot's old binding in the address maps.
    fn unbind(&mut self, peer: Rank) {
        let slot = self.slots[peer as usize];
        let Some(address) = slot.address else {
            return;
        };
        match slot.state {
            SlotState::Active => {
                if self.by_address.get(&address) == Some(&peer) {
                    self.by_address.remove(&address);
                }
            }
            SlotState::Retired => {
                self.retired.remove(&(address, slot.incarnation));
            }
            SlotState::Free => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 0xA1;
    const QUIET: Nanos = 1_000;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 2], port))
    }

    fn idle(_: Rank) -> bool {
        true
    }

    fn busy(_: Rank) -> bool {
        false
    }

    #[test]
    fn a_new_peer_gets_a_slot_and_keeps_it() {
        let mut d = Directory::new(ME, 4, QUIET);
        let a = d.resolve_arrival(1, (addr(1), 7, 0), true, &idle);
        assert_eq!(a, Arrival::Peer(1));
        assert_eq!(
            d.resolve_arrival(2, (addr(1), 7, ME), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.wire_name(1), 7);
        assert_eq!(d.poll_binding(), Some((1, addr(1))));
        assert_eq!(d.poll_binding(), None);
        assert_eq!(d.resolve_send(3, addr(1), &idle), Some(1));
    }

    #[test]
    fn a_send_names_the_peer_once_it_answers() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(d.resolve_send(1, addr(5), &idle), Some(1));
        assert_eq!(d.wire_name(1), 0);
        assert_eq!(
            d.resolve_arrival(2, (addr(5), 9, ME), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.wire_name(1), 9);
    }

    #[test]
    fn frames_for_an_earlier_life_are_stale() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0x55), true, &idle),
            Arrival::Stale
        );
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 0, 0), true, &idle),
            Arrival::Stale
        );
    }

    #[test]
    fn a_restarted_peer_retires_its_old_slot() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        let a = d.resolve_arrival(2, (addr(1), 8, 0), true, &busy);
        assert_eq!(
            a,
            Arrival::Restarted {
                old: 1,
                new: Some(2)
            }
        );
        // A late frame of the old life reaches the retired slot (the core answers RESET).
        assert_eq!(
            d.resolve_arrival(3, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        // The old life, knowing this endpoint, is not mistaken for another restart.
        assert_eq!(
            d.resolve_arrival(3, (addr(1), 7, ME), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.resolve_send(4, addr(1), &idle), Some(2));
    }

    #[test]
    fn a_forgotten_peer_is_told() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(3), 7, ME), true, &idle),
            Arrival::Forgotten(1)
        );
        assert!(!d.is_active(1));
        // Its next frames find the retired slot; a fresh send makes a new one.
        assert_eq!(
            d.resolve_arrival(2, (addr(3), 7, ME), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.resolve_send(3, addr(3), &busy), Some(2));
    }

    #[test]
    fn slots_are_reused_only_when_idle_and_quiet() {
        let mut d = Directory::new(ME, 2, QUIET);
        assert_eq!(
            d.resolve_arrival(0, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(
            d.resolve_arrival(0, (addr(2), 8, 0), true, &idle),
            Arrival::Peer(2)
        );
        // Full: nobody quiet long enough.
        assert_eq!(
            d.resolve_arrival(10, (addr(3), 9, 0), true, &idle),
            Arrival::Full
        );
        // Quiet but busy: still full.
        assert_eq!(
            d.resolve_arrival(QUIET + 5, (addr(3), 9, 0), true, &busy),
            Arrival::Full
        );
        // Peer 2 spoke late; peer 1 is quiet and idle: it goes.
        assert_eq!(
            d.resolve_arrival(500, (addr(2), 8, ME), true, &idle),
            Arrival::Peer(2)
        );
        assert_eq!(
            d.resolve_arrival(QUIET + 5, (addr(3), 9, 0), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.resolve_send(QUIET + 6, addr(1), &busy), None);
        assert_eq!(d.address(1), Some(addr(3)));
    }

    #[test]
    fn a_retired_slot_is_reused_once_the_core_is_done_with_it() {
        let mut d = Directory::new(ME, 1, QUIET);
        assert_eq!(d.resolve_send(1, addr(1), &idle), Some(1));
        d.retire(1);
        assert_eq!(
            d.resolve_send(1, addr(2), &idle),
            None,
            "not in the same instant"
        );
        assert_eq!(
            d.resolve_send(2, addr(2), &busy),
            None,
            "not while the core holds it"
        );
        assert_eq!(d.resolve_send(2, addr(2), &idle), Some(1));
        assert_eq!(d.poll_binding(), Some((1, addr(2))));
    }

    #[test]
    fn a_reset_never_takes_a_slot() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), false, &idle),
            Arrival::Stale
        );
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, ME), false, &idle),
            Arrival::Stale
        );
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        // From its peer it is the peer's; from a restarted one it retires nothing.
        assert_eq!(
            d.resolve_arrival(2, (addr(1), 7, ME), false, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(
            d.resolve_arrival(2, (addr(1), 8, 0), false, &idle),
            Arrival::Stale
        );
        assert!(d.is_active(1));
    }

    #[test]
    fn the_own_address_is_the_local_rank() {
        let mut d = Directory::new(ME, 1, QUIET);
        d.set_own_address(addr(9));
        assert_eq!(d.resolve_send(1, addr(9), &idle), Some(0));
    }
}

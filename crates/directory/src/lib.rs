//! Peers added by address: an *open* endpoint has no job of ranks, only a bounded table of peer
//! slots, each bound to a socket address, filled as peers are sent to or heard from and reused
//! when they go (the socket-like datagram API, and a libfabric address vector, stand on it).
//!
//! A slot is a rank of the protocol core like any other (slot 0 is the endpoint itself), so
//! reliability, ordering, credits and liveness apply unchanged. What open mode adds is a name
//! for each *conversation*: every time a slot is bound, its endpoint names the conversation
//! with a fresh nonzero 32-bit number, carried in the `src` field of its frames; `dst` carries
//! the peer's name for it as last heard (0 before it has heard anything). Conversations, not
//! processes, are named, because a process that gives up on a peer and later sends to it again
//! starts over (message numbers from the start): were it still known by the old name, the peer
//! would take the new conversation's first message for a duplicate of the old one's, or its
//! answers would reach the old, given-up slot. Names tell apart, without a handshake:
//!
//! * a new peer (unknown address, `dst` 0): a fresh slot;
//! * a new conversation of a known peer, because it restarted or gave up on the old one (known
//!   address, another name, `dst` 0): the old slot is retired (its operations fail as
//!   unreachable, as for a dead peer) and a fresh slot starts;
//! * a frame of a conversation this endpoint has no record of (`dst` names none of its slots:
//!   it forgot it, or an earlier life of this process held it): the sender is told with RESET,
//!   so its pending operations fail at once and its next send starts afresh.
//!
//! A name is the endpoint's random `incarnation` XOR (slot number, and the slot's binding
//! count above it, 19 bits), so no two slots of one endpoint share a name (one slot repeats
//! its names only after 2^19 bindings), frames find their slot from `dst` in one step, and
//! another life of the process at that address names its conversations differently (but for
//! the chance of a 32-bit coincidence).
//!
//! Slots are reused only when the protocol core holds nothing for them (no send, no message,
//! no receive naming them), and only after `quiet_ns` (longer than a peer keeps retransmitting
//! unanswered frames): active slots silent that long, so a live sender never loses its slot;
//! slots retired from a conversation the peer took part in that long after, so every late
//! frame of it is answered with RESET. Were the record gone sooner, a late retransmission of a message the endpoint
//! took (its acknowledgement lost) would read as a new conversation and be taken again.
//!
//! Sans-I/O (no clock, socket or thread: time is handed in), and shared by the protocol core
//! (`nicmsg-proto`'s open mode, `crates/proto/src/open.rs`) and the LM station (`nicmsg-lm`)
//! for their peers added by address.

// No unsafe code here: the compiler holds it to that.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;

use rustc_hash::FxHashMap;

/// A peer slot: a rank of the protocol core (the same type as `nicmsg_proto::Rank`).
pub type Rank = u32;

/// Time in nanoseconds, handed in by the caller (the same type as `nicmsg_proto::Nanos`).
pub type Nanos = u64;

/// Most peer slots of one open endpoint. Each costs its protocol state
/// (`nicmsg_proto::PEER_STATE_BYTES`, and up to 4 KiB more for a peer that had more than 128
/// messages open at once: `crates/proto/src/window.rs`)
/// and its share of the eager pool; the bound keeps a server's memory fixed however many
/// clients come and go, and the slot number fits the descriptor table's peer field.
pub const MAX_OPEN_PEERS: u32 = 4096;

/// Low bits of a conversation name (after removing the incarnation) that hold the slot number:
/// slots 0..=MAX_OPEN_PEERS.
const SLOT_BITS: u32 = 13;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
const _: () = assert!(MAX_OPEN_PEERS <= SLOT_MASK);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Never used, or reclaimed.
    Free,
    /// Bound to an address that sends or is sent to.
    Active,
    /// Given up on (unreachable, restarted, forgotten): kept until the core holds nothing for
    /// it and its peer has stopped retransmitting, so late frames of that conversation are
    /// answered with RESET instead of starting another.
    Retired,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    address: Option<SocketAddr>,
    /// This endpoint's name for the conversation (the frames' `src`).
    mine: u32,
    /// The peer's name for it (the frames' `dst`); 0 until a frame of it arrives.
    theirs: u32,
    /// How many times the slot was bound: the high bits of its next name.
    bindings: u32,
    /// Last frame heard, or the slot's binding.
    last_heard_ns: Nanos,
    /// Retired slots: not reused before this instant.
    reusable_at_ns: Nanos,
}

const FREE_SLOT: Slot = Slot {
    state: SlotState::Free,
    address: None,
    mine: 0,
    theirs: 0,
    bindings: 0,
    last_heard_ns: 0,
    reusable_at_ns: 0,
};

/// What to do with a frame from a socket address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A frame of the conversation in this slot (active or retired; the core answers retired
    /// ones with RESET).
    Peer(Rank),
    /// The peer at this address started a new conversation: `old` is retired and must be given
    /// up on; the frame belongs to `new` (none if the table is full).
    Restarted { old: Rank, new: Option<Rank> },
    /// A frame of a conversation this endpoint has no record of: the slot was made for telling
    /// its sender so (give it up, which sends RESET), and the frame is dropped.
    Forgotten(Rank),
    /// With no name, or a RESET of nothing known: dropped.
    Stale,
    /// No slot free for a new peer: dropped (the peer retransmits, and gets one when a slot
    /// frees, or gives up on this endpoint).
    Full,
}

/// The slots of an open endpoint and the addresses they are bound to.
pub struct Directory {
    /// This endpoint's incarnation: the random part of its conversation names.
    incarnation: u32,
    /// By rank; slot 0 is this endpoint.
    slots: Vec<Slot>,
    /// Active slots by address (one per address). Looked up for every send and receive posted
    /// by address, so hashed with Fx (a tenth of SipHash's cost for an address). Fx is not
    /// keyed: whoever picks the source addresses of new conversations can make them collide,
    /// which costs each lookup probes, at most the table's size (`MAX_OPEN_PEERS`).
    by_address: FxHashMap<SocketAddr, Rank>,
    /// Retired slots by address and the peer's name for the conversation.
    retired: FxHashMap<(SocketAddr, u32), Rank>,
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
    /// A directory of `capacity` peer slots (ranks 1..=capacity) for the incarnation
    /// `incarnation` (random, nonzero).
    pub fn new(incarnation: u32, capacity: u32, quiet_ns: Nanos) -> Self {
        let slots = capacity as usize + 1;
        Self {
            incarnation,
            slots: vec![FREE_SLOT; slots],
            by_address: FxHashMap::with_capacity_and_hasher(slots, Default::default()),
            retired: FxHashMap::with_capacity_and_hasher(slots, Default::default()),
            bindings: VecDeque::with_capacity(slots),
            binding_queued: vec![false; slots],
            rebound: Vec::with_capacity(slots),
            own_address: None,
            quiet_ns,
        }
    }

    /// This endpoint's own address: sends to it resolve to rank 0 (the core's local path).
    pub fn set_own_address(&mut self, address: SocketAddr) {
        self.own_address = Some(address);
    }

    /// The address set by `set_own_address`, if any.
    pub fn own_address(&self) -> Option<SocketAddr> {
        self.own_address
    }

    /// The header's (`src`, `dst`) for a frame to `peer`: this endpoint's name for the
    /// conversation and the peer's (0: not heard from yet).
    pub fn wire_names(&self, peer: Rank) -> (u32, u32) {
        self.slots
            .get(peer as usize)
            .map_or((0, 0), |s| (s.mine, s.theirs))
    }

    /// The peer's name for the conversation in `peer` (0: not heard from yet).
    pub fn peer_name(&self, peer: Rank) -> u32 {
        self.wire_names(peer).1
    }

    /// The address the slot `peer` is bound to (also while retired), if any.
    pub fn address(&self, peer: Rank) -> Option<SocketAddr> {
        self.slots.get(peer as usize).and_then(|s| s.address)
    }

    /// True when the slot is bound to a live conversation (not free, not retired).
    pub fn is_active(&self, peer: Rank) -> bool {
        self.slots
            .get(peer as usize)
            .is_some_and(|s| s.state == SlotState::Active)
    }

    /// The slot to send to `address` through, made if there is none; `None` when the table is
    /// full. `is_idle` says whether the core holds nothing for a slot (for reuse).
    pub fn resolve_send(
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

    /// Classifies a frame from `from` whose header names `src` (the sender's name for the
    /// conversation) and `dst` (this endpoint's, as the sender knows it). A frame that may not
    /// open a conversation (`opens` false: a RESET, which gives up on one) never takes a slot:
    /// from a peer without one it is stale.
    pub fn resolve_arrival(
        &mut self,
        now: Nanos,
        (from, src, dst): (SocketAddr, u32, u32),
        opens: bool,
        is_idle: &dyn Fn(Rank) -> bool,
    ) -> Arrival {
        if src == 0 {
            return Arrival::Stale;
        }
        if dst != 0 {
            if let Some(peer) = self.slot_named(dst, from) {
                // The slot's own peer (every frame once the conversation is under way: no
                // lookup), or a new name for it that no conversation given up on holds. A
                // conversation given up on stays given up even if its peer, never having
                // heard this side, took the name of this side's next conversation for its
                // own: its retransmissions are answered with RESET, not taken again.
                let renames = self.slots[peer as usize].theirs != src;
                if !renames || !self.retired.contains_key(&(from, src)) {
                    self.heard(now, peer, src, opens);
                    return Arrival::Peer(peer);
                }
            }
        }
        if let Some(&peer) = self.retired.get(&(from, src)) {
            return Arrival::Peer(peer);
        }
        if !opens {
            return Arrival::Stale;
        }
        if dst != 0 {
            return match self.allocate(now, from, src, SlotState::Retired, is_idle) {
                Some(peer) => Arrival::Forgotten(peer),
                None => Arrival::Full,
            };
        }
        let Some(&peer) = self.by_address.get(&from) else {
            return match self.allocate(now, from, src, SlotState::Active, is_idle) {
                Some(peer) => Arrival::Peer(peer),
                None => Arrival::Full,
            };
        };
        let theirs = self.slots[peer as usize].theirs;
        if theirs == 0 || theirs == src {
            self.heard(now, peer, src, opens);
            return Arrival::Peer(peer);
        }
        self.retire(now, peer);
        let new = self.allocate(now, from, src, SlotState::Active, is_idle);
        Arrival::Restarted { old: peer, new }
    }

    /// The active slot of the conversation a frame from `from` naming `src` and `dst` belongs
    /// to, if `resolve_arrival` would take it as that slot's without opening, renaming or
    /// retiring anything; `None` otherwise. Changes nothing.
    pub fn peer_of_conversation(&self, from: SocketAddr, src: u32, dst: u32) -> Option<Rank> {
        if src == 0 || dst == 0 {
            return None;
        }
        let peer = self.slot_named(dst, from)?;
        let slot = &self.slots[peer as usize];
        (slot.state == SlotState::Active && slot.theirs == src).then_some(peer)
    }

    /// The slot whose conversation this endpoint named `name`, bound to `from`.
    fn slot_named(&self, name: u32, from: SocketAddr) -> Option<Rank> {
        let peer = (name ^ self.incarnation) & SLOT_MASK;
        let slot = self.slots.get(peer as usize)?;
        let named = slot.state != SlotState::Free
            && slot.mine == name
            && slot.address == Some(from)
            && peer != 0;
        named.then_some(peer)
    }

    /// A frame of the conversation in the active slot `peer` arrived, naming the peer's side
    /// `src`. The latest name wins: a frame that names this endpoint's side knows the
    /// conversation, so its `src` is the peer's name even if a stray frame was taken for it
    /// first. A RESET renames nothing: it ends the conversation.
    fn heard(&mut self, now: Nanos, peer: Rank, src: u32, opens: bool) {
        let slot = &mut self.slots[peer as usize];
        if slot.state != SlotState::Active {
            return;
        }
        if opens {
            slot.theirs = src;
        }
        slot.last_heard_ns = now;
    }

    /// The core gave up on `peer` (unreachable, RESET, restarted): its address is free for a
    /// new conversation, and late frames of the old one find the retired slot.
    pub fn retire(&mut self, now: Nanos, peer: Rank) {
        let Some(slot) = self.slots.get_mut(peer as usize) else {
            return;
        };
        if slot.state != SlotState::Active {
            return;
        }
        slot.state = SlotState::Retired;
        // A peer that never answered sent nothing that could arrive late: no need to wait.
        let linger = if slot.theirs == 0 { 1 } else { self.quiet_ns };
        slot.reusable_at_ns = now.saturating_add(linger);
        if let Some(address) = slot.address {
            if self.by_address.get(&address) == Some(&peer) {
                self.by_address.remove(&address);
            }
            if slot.theirs != 0 {
                self.retired.insert((address, slot.theirs), peer);
            }
        }
    }

    /// The next slot bound to a new address, for the transport.
    pub fn poll_binding(&mut self) -> Option<(Rank, SocketAddr)> {
        while let Some(peer) = self.bindings.pop_front() {
            self.binding_queued[peer as usize] = false;
            if let Some(address) = self.slots[peer as usize].address {
                return Some((peer, address));
            }
        }
        None
    }

    /// A slot bound since the last call: the core resets its state.
    pub fn take_rebound(&mut self) -> Option<Rank> {
        self.rebound.pop()
    }

    /// Binds a slot (free, or the most reusable one) to `address` under a fresh name; the
    /// caller resets the core's state of the returned rank.
    fn allocate(
        &mut self,
        now: Nanos,
        address: SocketAddr,
        theirs: u32,
        state: SlotState,
        is_idle: &dyn Fn(Rank) -> bool,
    ) -> Option<Rank> {
        let peer = self.reusable_slot(now, is_idle)?;
        self.unbind(peer);
        let (mine, bindings) = self.fresh_name(peer);
        self.slots[peer as usize] = Slot {
            state,
            address: Some(address),
            mine,
            theirs,
            bindings,
            last_heard_ns: now,
            // A slot made only to answer a forgotten conversation took nothing in; it may go
            // the moment after.
            reusable_at_ns: now.saturating_add(1),
        };
        match state {
            SlotState::Active => {
                self.by_address.insert(address, peer);
            }
            _ => {
                self.retired.insert((address, theirs), peer);
            }
        }
        self.rebound.push(peer);
        if !self.binding_queued[peer as usize] {
            self.binding_queued[peer as usize] = true;
            self.bindings.push_back(peer);
        }
        Some(peer)
    }

    /// The name of the slot's next conversation and the slot's binding count after it: never
    /// 0, and distinct from every other slot's (the slot number is in its low bits).
    fn fresh_name(&self, peer: Rank) -> (u32, u32) {
        let next = |bindings: u32| bindings.wrapping_add(1) & (u32::MAX >> SLOT_BITS);
        let name = |bindings: u32| self.incarnation ^ (peer | bindings << SLOT_BITS);
        let mut bindings = next(self.slots[peer as usize].bindings);
        if name(bindings) == 0 {
            // One binding count at most gives 0; the next does not.
            bindings = next(bindings);
        }
        (name(bindings), bindings)
    }

    /// A free slot; else a retired one the core and its peer are done with; else the active one silent
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
                && now >= self.slots[p as usize].reusable_at_ns
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
                if self.retired.get(&(address, slot.theirs)) == Some(&peer) {
                    self.retired.remove(&(address, slot.theirs));
                }
            }
            SlotState::Free => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 0xA1_0000;
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

    /// This endpoint's name for the conversation in `peer`.
    fn mine(d: &Directory, peer: Rank) -> u32 {
        d.wire_names(peer).0
    }

    #[test]
    fn a_new_peer_gets_a_slot_and_keeps_it() {
        let mut d = Directory::new(ME, 4, QUIET);
        let a = d.resolve_arrival(1, (addr(1), 7, 0), true, &idle);
        assert_eq!(a, Arrival::Peer(1));
        let name = mine(&d, 1);
        assert_eq!(
            d.resolve_arrival(2, (addr(1), 7, name), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.wire_names(1), (name, 7));
        assert_eq!(d.poll_binding(), Some((1, addr(1))));
        assert_eq!(d.poll_binding(), None);
        assert_eq!(d.resolve_send(3, addr(1), &idle), Some(1));
    }

    #[test]
    fn a_send_names_the_peer_once_it_answers() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(d.resolve_send(1, addr(5), &idle), Some(1));
        assert_eq!(d.peer_name(1), 0);
        assert_eq!(
            d.resolve_arrival(2, (addr(5), 9, mine(&d, 1)), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.peer_name(1), 9);
    }

    #[test]
    fn names_are_nonzero_and_distinct_per_slot_and_binding() {
        // The incarnation that would make slot 1's first name 0.
        let mut d = Directory::new(1 | 1 << SLOT_BITS, 3, QUIET);
        let mut seen = std::collections::HashSet::new();
        for round in 0..4u16 {
            for port in 1..=3 {
                let now = Nanos::from(round) * QUIET; // retired slots are reused after QUIET
                let peer = d.resolve_send(now, addr(round * 3 + port), &idle).unwrap();
                let name = mine(&d, peer);
                assert_ne!(name, 0);
                assert!(seen.insert(name), "name {name:#x} given twice");
            }
            for peer in 1..=3 {
                d.retire(Nanos::from(round) * QUIET, peer);
            }
        }
    }

    #[test]
    fn frames_without_a_name_are_stale_and_unknown_names_are_told() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 0, 0), true, &idle),
            Arrival::Stale
        );
        // It names a conversation of this endpoint it has no record of (an earlier life's).
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0x55), true, &idle),
            Arrival::Forgotten(1)
        );
    }

    #[test]
    fn a_new_conversation_of_a_known_peer_retires_the_old_slot() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        let old_name = mine(&d, 1);
        let a = d.resolve_arrival(2, (addr(1), 8, 0), true, &busy);
        assert_eq!(
            a,
            Arrival::Restarted {
                old: 1,
                new: Some(2)
            }
        );
        assert_ne!(mine(&d, 2), old_name);
        // A late frame of the old conversation reaches the retired slot (the core answers
        // RESET), whether it knew this side's name or not.
        assert_eq!(
            d.resolve_arrival(3, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(
            d.resolve_arrival(3, (addr(1), 7, old_name), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.resolve_send(4, addr(1), &idle), Some(2));
    }

    #[test]
    fn answers_to_a_given_up_conversation_do_not_reach_the_next_one() {
        // This endpoint gave up on a peer and sends to it again: the peer's answers to the
        // new conversation name the new slot, its late answers to the old one the old slot.
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(d.resolve_send(1, addr(1), &idle), Some(1));
        let old_name = mine(&d, 1);
        d.resolve_arrival(2, (addr(1), 7, old_name), true, &idle);
        d.retire(2, 1);
        assert_eq!(d.resolve_send(3, addr(1), &busy), Some(2));
        let new_name = mine(&d, 2);
        assert_ne!(new_name, old_name);
        assert_eq!(
            d.resolve_arrival(4, (addr(1), 9, new_name), true, &idle),
            Arrival::Peer(2)
        );
        assert_eq!(
            d.resolve_arrival(4, (addr(1), 7, old_name), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(d.peer_name(2), 9);
    }

    #[test]
    fn a_given_up_conversation_stays_given_up_when_its_peer_names_the_next_one() {
        // This side took a message of conversation 7 and gave it up before the peer heard
        // anything; the peer's conversation 7, still alive, then took this side's next
        // conversation's name for its own and retransmits under it.
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        d.retire(2, 1);
        assert_eq!(d.resolve_send(3, addr(1), &busy), Some(2));
        assert_eq!(
            d.resolve_arrival(4, (addr(1), 7, mine(&d, 2)), true, &idle),
            Arrival::Peer(1),
            "answered from the retired slot (RESET), not taken by the new one"
        );
        assert_eq!(d.peer_name(2), 0);
    }

    #[test]
    fn a_forgotten_peer_is_told() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(3), 7, 0x1234), true, &idle),
            Arrival::Forgotten(1)
        );
        assert!(!d.is_active(1));
        assert_eq!(d.peer_name(1), 7, "the RESET names its conversation");
        // Its next frames find the retired slot; a fresh send makes a new one.
        assert_eq!(
            d.resolve_arrival(2, (addr(3), 7, 0x1234), true, &idle),
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
            d.resolve_arrival(500, (addr(2), 8, mine(&d, 2)), true, &idle),
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
    fn a_retired_slot_is_reused_once_the_core_and_its_peer_are_done_with_it() {
        let mut d = Directory::new(ME, 1, QUIET);
        assert_eq!(d.resolve_send(1, addr(1), &idle), Some(1));
        d.resolve_arrival(2, (addr(1), 7, mine(&d, 1)), true, &idle);
        d.retire(10, 1);
        assert_eq!(
            d.resolve_send(10 + QUIET - 1, addr(2), &idle),
            None,
            "not while its peer may still retransmit"
        );
        // Until then its late frames are answered (RESET), not taken as a new conversation.
        assert_eq!(
            d.resolve_arrival(10 + QUIET - 1, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(
            d.resolve_send(10 + QUIET, addr(2), &busy),
            None,
            "not while the core holds it"
        );
        assert_eq!(d.resolve_send(10 + QUIET, addr(2), &idle), Some(1));
        assert_eq!(d.poll_binding(), Some((1, addr(2))));
    }

    #[test]
    fn a_slot_whose_peer_never_answered_is_reused_at_once() {
        let mut d = Directory::new(ME, 1, QUIET);
        assert_eq!(d.resolve_send(1, addr(1), &idle), Some(1));
        d.retire(10, 1);
        assert_eq!(d.resolve_send(11, addr(2), &idle), Some(1));
    }

    #[test]
    fn a_restarted_peer_never_gets_the_slot_just_retired() {
        let mut d = Directory::new(ME, 1, QUIET);
        d.resolve_arrival(1, (addr(1), 7, 0), true, &idle);
        assert_eq!(
            d.resolve_arrival(5 * QUIET, (addr(1), 8, 0), true, &idle),
            Arrival::Restarted { old: 1, new: None }
        );
    }

    #[test]
    fn a_reset_never_takes_a_slot() {
        let mut d = Directory::new(ME, 4, QUIET);
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), false, &idle),
            Arrival::Stale
        );
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0x55), false, &idle),
            Arrival::Stale
        );
        assert_eq!(
            d.resolve_arrival(1, (addr(1), 7, 0), true, &idle),
            Arrival::Peer(1)
        );
        // Naming the conversation it is the peer's; from a new one it retires nothing.
        assert_eq!(
            d.resolve_arrival(2, (addr(1), 7, mine(&d, 1)), false, &idle),
            Arrival::Peer(1)
        );
        assert_eq!(
            d.resolve_arrival(2, (addr(1), 8, 0), false, &idle),
            Arrival::Stale
        );
        assert!(d.is_active(1));
    }

    #[test]
    fn a_name_from_another_address_is_not_its_slot() {
        let mut d = Directory::new(ME, 4, QUIET);
        d.resolve_arrival(1, (addr(1), 7, 0), true, &idle);
        let name = mine(&d, 1);
        assert_eq!(
            d.resolve_arrival(2, (addr(2), 7, name), false, &idle),
            Arrival::Stale
        );
        assert_eq!(d.peer_name(1), 7);
    }

    #[test]
    fn the_own_address_is_the_local_rank() {
        let mut d = Directory::new(ME, 1, QUIET);
        d.set_own_address(addr(9));
        assert_eq!(d.resolve_send(1, addr(9), &idle), Some(0));
    }
}

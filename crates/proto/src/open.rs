//! Open mode: an endpoint whose peers are added by address at run time (the `nicmsg-directory`
//! crate, `crates/directory/src/lib.rs`, says how slots are named, bound and reused). Here:
//! creating one, resolving frames and sends to slots, and starting a reused slot's protocol
//! state afresh.

use std::net::SocketAddr;

use crate::state::Core;
use crate::*;
use nicmsg_directory::{Arrival, Directory};
use nicmsg_wire::FrameHeader;

/// How long an idle, silent slot of an open endpoint is kept before a new peer may take it,
/// in units of the peer timeout: a live peer retransmits unanswered frames for one peer timeout
/// before giving up, so after two its slot can no longer be in use.
const QUIET_PEER_TIMEOUTS: u64 = 2;

impl Core {
    /// An endpoint with `capacity` peer slots added by address; `incarnation` (nonzero, chosen
    /// at random by the caller) makes the names of this life's conversations its own.
    pub(crate) fn new_open(
        config: Config,
        job: u32,
        incarnation: u32,
        capacity: u32,
    ) -> Result<Self, ConfigError> {
        if capacity == 0 || capacity > MAX_OPEN_PEERS {
            return Err(ConfigError::ZeroLimit("open endpoint capacity in 1..=4096"));
        }
        if incarnation == 0 {
            return Err(ConfigError::ZeroLimit("open endpoint incarnation nonzero"));
        }
        let quiet_ns = config.peer_timeout_ns.saturating_mul(QUIET_PEER_TIMEOUTS);
        let mut core = Self::new(config, job, 0, capacity + 1)?;
        core.directory = Some(Directory::new(incarnation, capacity, quiet_ns));
        core.peers.start_open();
        Ok(core)
    }

    /// The header's `src` and `dst` for a frame to `peer`: ranks in a job, the conversation's
    /// names in open mode.
    pub(crate) fn wire_names(&self, peer: Rank) -> (u32, u32) {
        match &self.directory {
            None => (self.rank, peer),
            Some(directory) => directory.wire_names(peer),
        }
    }

    /// The header's `src` and `dst` for a frame from `peer`: the two names swapped.
    pub(crate) fn wire_names_from(&self, peer: Rank) -> (u32, u32) {
        let (to_src, to_dst) = self.wire_names(peer);
        (to_dst, to_src)
    }

    /// In a job: whether the header names this rank as its destination and another member of
    /// the job as its source.
    pub(crate) fn names_a_peer(&self, header: &FrameHeader) -> bool {
        header.dst == self.rank && header.src < self.size && header.src != self.rank
    }

    /// The slot a frame from `from` belongs to, or `None` (dropped and counted). In a job the
    /// header names its ranks; in open mode the directory decides, and a restarted or
    /// forgotten peer is given up on here.
    pub(crate) fn frame_source(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        from: Option<SocketAddr>,
        memory: &mut impl HostMemory,
    ) -> Option<Rank> {
        let Some(directory) = self.directory.as_mut() else {
            let named = self.names_a_peer(header);
            if !named {
                self.count_drop(None, DropReason::WrongRank);
            }
            return named.then_some(header.src);
        };
        let Some(from) = from else {
            self.count_drop(None, DropReason::WrongRank);
            return None;
        };
        // A RESET gives up on a conversation: it never opens one.
        let opens = header.kind != nicmsg_wire::FrameKind::Reset;
        let arrival = {
            let (sends, rx, peers) = (&self.sends, &self.rx, &self.peers);
            let idle = |peer: Rank| slot_is_idle(sends, rx, peers, peer);
            let names = (from, header.src, header.dst);
            directory.resolve_arrival(now, names, opens, &idle)
        };
        self.reset_rebound_slots();
        match arrival {
            Arrival::Peer(peer) => Some(peer),
            Arrival::Restarted { old, new } => {
                self.counters.record(old, |s| s.peers_restarted += 1);
                self.declare_unreachable(now, old, memory);
                if new.is_none() {
                    self.count_drop(None, DropReason::PeerTableFull);
                }
                new
            }
            Arrival::Forgotten(peer) => {
                self.declare_unreachable(now, peer, memory);
                self.count_drop(Some(peer), DropReason::DeadPeer);
                None
            }
            Arrival::Stale => {
                self.count_drop(None, DropReason::WrongRank);
                None
            }
            Arrival::Full => {
                self.count_drop(None, DropReason::PeerTableFull);
                None
            }
        }
    }

    /// Open mode: false when `peer` never spoke to this endpoint (its name is unknown):
    /// a RESET to it would read as a new conversation, and it holds nothing to give up.
    pub(crate) fn may_reset(&self, peer: Rank) -> bool {
        self.directory
            .as_ref()
            .is_none_or(|directory| directory.peer_name(peer) != 0)
    }

    /// The slot to send to `address` through (made if new).
    pub(crate) fn peer_for_address(
        &mut self,
        now: Nanos,
        address: SocketAddr,
    ) -> Result<Rank, PostError> {
        let Some(directory) = self.directory.as_mut() else {
            return Err(PostError::NotOpen);
        };
        let resolved = {
            let (sends, rx, peers) = (&self.sends, &self.rx, &self.peers);
            let idle = |peer: Rank| slot_is_idle(sends, rx, peers, peer);
            directory.resolve_send(now, address, &idle)
        };
        self.reset_rebound_slots();
        resolved.ok_or(PostError::TableFull {
            table: "peer",
            limit: self.size as usize - 1,
        })
    }

    /// Starts the protocol state of every slot the directory just bound afresh: a reused slot
    /// is idle (nothing of the core refers to it), so only its peer entry and queued control
    /// frames remain from its previous peer.
    fn reset_rebound_slots(&mut self) {
        let Some(directory) = self.directory.as_mut() else {
            return;
        };
        while let Some(peer) = directory.take_rebound() {
            self.peers.restart(peer, &self.config);
            self.outputs.drop_control_to(peer);
        }
    }
}

/// True when nothing of the core refers to `peer`: no send to it, no message from it, no
/// receive naming it, no eager buffer of it, no waiter on it.
fn slot_is_idle(
    sends: &crate::send_side::SendSide,
    rx: &crate::recv_side::RecvSide,
    peers: &crate::peers::Peers,
    peer: Rank,
) -> bool {
    let state = &peers[peer];
    if state.sends_in_flight != 0
        || state.waiters != 0
        || state.buffers_used != crate::credits::PerClass::default()
        || state.queue_head.is_some()
    {
        return false;
    }
    let sending = sends
        .occupied()
        .any(|key| sends.get(key).is_some_and(|op| op.dst == peer));
    let receiving = rx
        .incoming_keys()
        .any(|key| rx.incoming(key).is_some_and(|entry| entry.peer == peer));
    let naming = rx.recv_keys().any(|key| {
        rx.recv(key)
            .is_some_and(|op| op.source == crate::Source::Rank(peer))
    });
    !(sending || receiving || naming)
}

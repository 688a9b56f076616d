//! Detecting dead peers, and only dead ones.
//!
//! The rule: a peer is declared unreachable when a frame that asks it for an answer (data, an
//! RTS, END, CANCEL, a liveness probe) has gone unanswered, with no frame at all coming back,
//! for `peer_timeout_ns` while something is awaited from it (a send to it in flight, a receive
//! naming it, a message from it still arriving). Its engine answers these frames itself, also
//! while its application computes for minutes (an engine thread, or in inline mode the
//! standby thread that takes over while the application is away from the library), so a
//! computing peer is never declared dead; a dead or frozen process, or a cut network, is.
//!
//! Faster evidence comes from the peer's host: a frame sent to a port nobody listens on any
//! more is refused (ICMP port unreachable), which the transport reports through
//! [`Endpoint::handle_refused`]; `REFUSALS_BEFORE_UNREACHABLE` refusals in a row, with nothing
//! heard in between, declare the peer unreachable at once.
//!
//! Operations that wait on a peer without sending anything make the endpoint probe it with
//! CREDIT + REQUEST after `keepalive_ns` of silence. Sends retransmit, backed off up to
//! `rto_max_ns`, until the peer answers or is declared unreachable.
//!
//! Then every pending operation involving it completes with an error, later posts to it are
//! refused, and the peer is told with RESET (and told again whenever a frame of it arrives):
//! on RESET a rank fails its own operations with the sender, so a failure is seen by both
//! sides, and no send reports success for a message its peer dropped.

use crate::ops::{Dest, Incoming, RecvState, RxPhase};
use crate::receiver::control;
use crate::state::Core;
use crate::*;
use nicmsg_wire::{Flags, FrameKind};

/// Refused frames (ICMP port unreachable from the peer's host), with nothing heard from the
/// peer in between, that declare it unreachable. More than one: a refusal of a frame sent
/// before the peer's socket existed, or a forged one, must not kill a live peer on its own;
/// each refusal provokes a probe at once, so a dead peer is declared within a few round trips.
pub const REFUSALS_BEFORE_UNREACHABLE: u32 = 3;

impl Core {
    /// Declares unreachable or probes the peers of `due` (those with a timer at `now`).
    pub(crate) fn expire_peers(&mut self, now: Nanos, due: &[Rank], memory: &mut impl HostMemory) {
        for &peer in due {
            if self.peers.silence_deadline(peer).is_some_and(|d| d <= now) {
                self.declare_unreachable(now, peer, memory);
                continue;
            }
            if self.peers.probe_due(now, peer) {
                self.probe(now, peer);
            }
        }
    }

    /// Sends a liveness probe (CREDIT + REQUEST), which the peer's engine answers; the next
    /// one follows, backed off, while the peer stays silent.
    fn probe(&mut self, now: Nanos, peer: Rank) {
        let max_ns = self.config.rto_max_ns.min(self.config.keepalive_ns);
        self.peers.probe_sent(now, peer, max_ns);
        self.counters.record(peer, |s| s.liveness_probes += 1);
        self.queue_control(control(peer, FrameKind::Credit, Flags::REQUEST, 0, 0));
    }

    /// The transport learned that `peer`'s host refused a frame to it (ICMP port unreachable:
    /// no socket on its port, so its process is gone). A few in a row, with nothing heard in
    /// between, declare it unreachable; each one first provokes a probe, so the evidence
    /// builds within round trips, not timeouts. In open mode only a slot bound to a
    /// conversation can be refused: a slot never bound has no address to probe (its probe
    /// would leave with no names for a transport that has nowhere to send it), and nobody to
    /// declare unreachable.
    pub(crate) fn handle_refused(&mut self, now: Nanos, peer: Rank, memory: &mut impl HostMemory) {
        if peer >= self.size || peer == self.rank || self.peers[peer].unreachable {
            return;
        }
        if self.directory.as_ref().is_some_and(|d| !d.is_active(peer)) {
            return;
        }
        self.counters.record(peer, |s| s.frames_refused += 1);
        let state = &mut self.peers[peer];
        state.refusals += 1;
        if state.refusals >= REFUSALS_BEFORE_UNREACHABLE {
            self.declare_unreachable(now, peer, memory);
            return;
        }
        self.probe(now, peer);
    }

    /// RESET: the peer has declared this rank unreachable and dropped everything with it.
    pub(crate) fn on_reset(&mut self, now: Nanos, peer: Rank, memory: &mut impl HostMemory) {
        self.counters.record(peer, |s| s.resets_received += 1);
        self.declare_unreachable(now, peer, memory);
    }

    /// Gives up on `peer`: every pending operation involving it completes with
    /// `PeerUnreachable`; fully received messages from it stay deliverable; the peer is told.
    pub(crate) fn declare_unreachable(
        &mut self,
        now: Nanos,
        peer: Rank,
        memory: &mut impl HostMemory,
    ) {
        if self.peers[peer].unreachable {
            return;
        }
        self.peers[peer].unreachable = true;
        if let Some(directory) = self.directory.as_mut() {
            directory.retire(now, peer);
        }
        self.counters
            .record(peer, |s| s.peers_declared_unreachable += 1);
        let error = OpError::PeerUnreachable { peer };
        self.fail_sends_to(peer, error);
        // Incomplete messages go first, so that releasing the complete ones behind a gap
        // cannot match a receive to a message that will never finish.
        self.fail_incoming_from(peer, error);
        self.release_held_messages(now, peer, memory);
        self.fail_receives_naming(peer, error);
        self.peers.forget_waits(peer);
        self.outputs.drop_control_to(peer);
        self.peers[peer].credit_carriers_queued = 0;
        self.send_reset(peer);
    }

    /// Tells `peer` it is declared unreachable here (on declaring it, and in answer to any
    /// frame of it that still arrives).
    pub(crate) fn send_reset(&mut self, peer: Rank) {
        if !self.may_reset(peer) {
            return;
        }
        self.counters.record(peer, |s| s.resets_sent += 1);
        self.queue_control(control(peer, FrameKind::Reset, 0, 0, 0));
    }

    /// Complete eager messages of a dead peer that wait behind a message that will now never
    /// arrive: match them (in id order) as if the gap had closed, so nothing that arrived is lost.
    fn release_held_messages(&mut self, now: Nanos, peer: Rank, memory: &mut impl HostMemory) {
        let next = self.peers[peer].next_match;
        let mut held: Vec<(u32, u32)> = self
            .rx
            .incoming_keys()
            .filter_map(|i| {
                let entry = self.rx.incoming(i)?;
                let waiting = entry.peer == peer && entry.awaits_matching();
                let complete = entry.is_eager() && entry.phase == RxPhase::DataComplete;
                (waiting && complete).then(|| (entry.msg_id.wrapping_sub(next), entry.msg_id))
            })
            .collect();
        held.sort_unstable();
        for (_, msg_id) in held {
            let still_waiting = self
                .rx
                .incoming_by_id(peer, msg_id)
                .and_then(|i| self.rx.incoming(i))
                .is_some_and(Incoming::awaits_matching);
            if still_waiting {
                self.peers[peer].next_match = msg_id;
                self.match_in_order(now, peer, memory);
            }
        }
    }

    fn fail_sends_to(&mut self, peer: Rank, error: OpError) {
        let doomed: Vec<SendKey> = self
            .sends
            .occupied()
            .filter(|&i| self.sends.get(i).is_some_and(|op| op.dst == peer))
            .collect();
        for index in doomed {
            self.finish_send(index, Err(error));
        }
        let state = &mut self.peers[peer];
        state.queue_head = None;
        state.queue_tail = None;
        self.sends.forget_freed_ready();
    }

    fn fail_incoming_from(&mut self, peer: Rank, error: OpError) {
        let from_peer: Vec<IncomingKey> = self
            .rx
            .incoming_keys()
            .filter(|&i| self.rx.incoming(i).is_some_and(|e| e.peer == peer))
            .collect();
        for index in from_peer {
            let entry = &self.rx[index];
            let deliverable =
                entry.is_eager() && entry.phase == RxPhase::DataComplete && !entry.matched;
            if deliverable {
                continue;
            }
            if entry.phase == RxPhase::Receiving {
                if let (Dest::Recv(recv), _) | (_, Some(recv)) = (entry.dest, entry.recv) {
                    self.rx[index].waiter = false;
                    self.fail_recv(recv, error);
                }
            }
            self.rx[index].waiter = false;
            self.free_incoming(index);
        }
    }

    fn fail_receives_naming(&mut self, peer: Rank, error: OpError) {
        let named: Vec<RecvKey> = self
            .rx
            .recv_keys()
            .filter(|&i| {
                self.rx.recv(i).is_some_and(|op| {
                    op.source == Source::Rank(peer) && op.state == RecvState::Posted
                })
            })
            .collect();
        for index in named {
            self.rx.unpost(index);
            self.rx.unpost_probe(index);
            self.fail_recv(index, error);
        }
    }
}

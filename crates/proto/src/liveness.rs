//! Detecting dead peers. Sends detect silence through their own retransmission limits. Operations
//! that wait on a peer without sending anything (a posted receive naming it, a matched message
//! still arriving, a send blocked on its credits) make the endpoint probe the peer with CREDIT
//! REQUEST after `keepalive_ns` of silence; `max_retries` unanswered probes, with back-off,
//! declare it unreachable. Then every operation involving it completes with an error and the
//! rest of the endpoint carries on.

use crate::ops::{Dest, RecvState, RxPhase};
use crate::receiver::control;
use crate::*;
use nicmsg_wire::{Flags, FrameKind};

impl Endpoint {
    pub(crate) fn heard_from(&mut self, now: Nanos, peer: Rank) {
        let keepalive = self.config.keepalive_ns;
        let state = &mut self.peers[peer as usize];
        state.last_heard_ns = now;
        state.probe_retries = 0;
        if state.waiters > 0 {
            state.probe_deadline_ns = Some(now + keepalive);
        }
    }

    pub(crate) fn add_waiter(&mut self, peer: Rank) {
        let keepalive = self.config.keepalive_ns;
        let state = &mut self.peers[peer as usize];
        state.waiters += 1;
        if state.probe_deadline_ns.is_none() {
            // The last time heard stands in for `now`: a probe is due after keepalive silence.
            state.probe_deadline_ns = Some(state.last_heard_ns + keepalive);
        }
    }

    pub(crate) fn remove_waiter(&mut self, peer: Rank) {
        let state = &mut self.peers[peer as usize];
        debug_assert!(state.waiters > 0, "waiter count of rank {peer} underflows");
        state.waiters = state.waiters.saturating_sub(1);
        if state.waiters == 0 {
            state.probe_deadline_ns = None;
            state.probe_retries = 0;
        }
    }

    pub(crate) fn expire_peers(&mut self, now: Nanos, memory: &mut impl HostMemory) {
        for peer in 0..self.size {
            let state = &self.peers[peer as usize];
            if state.probe_deadline_ns.is_none_or(|d| d > now) {
                continue;
            }
            if state.probe_retries >= self.config.max_retries {
                self.declare_unreachable(now, peer, memory);
                continue;
            }
            let max_ns = self.config.rto_max_ns;
            let state = &mut self.peers[peer as usize];
            state.probe_retries += 1;
            let wait = state.rto.backed_off_ns(state.probe_retries, max_ns);
            state.probe_deadline_ns = Some(now + wait);
            self.stats.liveness_probes += 1;
            self.peer_stats[peer as usize].liveness_probes += 1;
            self.queue_control(control(peer, FrameKind::Credit, Flags::REQUEST, 0, 0));
        }
    }

    /// Gives up on `peer`: every pending operation involving it completes with
    /// `PeerUnreachable`; fully received messages from it stay deliverable.
    pub(crate) fn declare_unreachable(
        &mut self,
        now: Nanos,
        peer: Rank,
        memory: &mut impl HostMemory,
    ) {
        if self.peers[peer as usize].unreachable {
            return;
        }
        self.peers[peer as usize].unreachable = true;
        self.stats.peers_declared_unreachable += 1;
        self.peer_stats[peer as usize].peers_declared_unreachable += 1;
        let error = OpError::PeerUnreachable { peer };
        self.fail_sends_to(peer, error);
        // Incomplete messages go first, so that releasing the complete ones behind a gap
        // cannot match a receive to a message that will never finish.
        self.fail_incoming_from(peer, error);
        self.release_held_messages(now, peer, memory);
        self.fail_receives_naming(peer, error);
        let state = &mut self.peers[peer as usize];
        state.probe_deadline_ns = None;
        state.waiters = 0;
        self.control.retain(|c| c.dst != peer);
        self.peers[peer as usize].credit_carriers_queued = 0;
        self.control_usage.set(self.control.len());
    }

    /// Complete eager messages of a dead peer that wait behind a message that will now never
    /// arrive: match them (in id order) as if the gap had closed, so nothing that arrived is lost.
    fn release_held_messages(&mut self, now: Nanos, peer: Rank, memory: &mut impl HostMemory) {
        let next = self.peers[peer as usize].next_match;
        let mut held: Vec<(u32, u32)> = self
            .incoming
            .occupied()
            .filter_map(|i| {
                let entry = self.incoming.get(i)?;
                let waiting = entry.peer == peer && !entry.matched && !entry.in_unexpected;
                let complete = entry.is_eager() && entry.phase == RxPhase::DataComplete;
                (waiting && complete).then(|| (entry.msg_id.wrapping_sub(next), entry.msg_id))
            })
            .collect();
        held.sort_unstable();
        for (_, msg_id) in held {
            let still_waiting = self
                .incoming_index
                .get(&(peer, msg_id))
                .and_then(|&i| self.incoming.get(i))
                .is_some_and(|e| !e.matched && !e.in_unexpected);
            if still_waiting {
                self.peers[peer as usize].next_match = msg_id;
                self.match_in_order(now, peer, memory);
            }
        }
    }

    fn fail_sends_to(&mut self, peer: Rank, error: OpError) {
        let doomed: Vec<u32> = self
            .sends
            .occupied()
            .filter(|&i| self.sends.get(i).is_some_and(|op| op.dst == peer))
            .collect();
        for index in doomed {
            let op = self.sends.get_mut(index).expect("occupied");
            op.waiting_for_credit = false;
            self.finish_send(index, Err(error));
        }
        let state = &mut self.peers[peer as usize];
        state.queue_head = crate::peer::NONE;
        state.queue_tail = crate::peer::NONE;
        self.ready.retain(|&i| self.sends.get(i).is_some());
    }

    fn fail_incoming_from(&mut self, peer: Rank, error: OpError) {
        let from_peer: Vec<u32> = self
            .incoming
            .occupied()
            .filter(|&i| self.incoming.get(i).is_some_and(|e| e.peer == peer))
            .collect();
        for index in from_peer {
            let entry = self.incoming.get(index).expect("occupied");
            let deliverable =
                entry.is_eager() && entry.phase == RxPhase::DataComplete && !entry.matched;
            if deliverable {
                continue;
            }
            if entry.phase == RxPhase::Receiving {
                if let (Dest::Recv(recv), _) | (_, Some(recv)) = (entry.dest, entry.recv) {
                    self.incoming.get_mut(index).expect("occupied").waiter = false;
                    self.fail_recv(recv, error);
                }
            }
            self.incoming.get_mut(index).expect("occupied").waiter = false;
            self.free_incoming(index);
        }
    }

    fn fail_receives_naming(&mut self, peer: Rank, error: OpError) {
        let named: Vec<u32> = self
            .recvs
            .occupied()
            .filter(|&i| {
                self.recvs.get(i).is_some_and(|op| {
                    op.source == Source::Rank(peer) && op.state == RecvState::Posted
                })
            })
            .collect();
        for index in named {
            self.posted.retain(|&i| i != index);
            self.probes.retain(|&i| i != index);
            self.fail_recv(index, error);
        }
    }
}

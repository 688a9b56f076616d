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
        state.heard_since_probe = true;
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

    pub(crate) fn expire_peers(&mut self, now: Nanos) {
        for peer in 0..self.size {
            let state = &self.peers[peer as usize];
            if state.probe_deadline_ns.is_none_or(|d| d > now) {
                continue;
            }
            if state.probe_retries >= self.config.max_retries {
                self.declare_unreachable(peer);
                continue;
            }
            let max_ns = self.config.rto_max_ns;
            let state = &mut self.peers[peer as usize];
            state.probe_retries += 1;
            state.heard_since_probe = false;
            let wait = state.rto.backed_off_ns(state.probe_retries, max_ns);
            state.probe_deadline_ns = Some(now + wait);
            self.stats.liveness_probes += 1;
            self.peer_stats[peer as usize].liveness_probes += 1;
            self.queue_control(control(peer, FrameKind::Credit, Flags::REQUEST, 0, 0));
        }
    }

    /// Gives up on `peer`: every pending operation involving it completes with
    /// `PeerUnreachable`; fully received messages from it stay deliverable.
    pub(crate) fn declare_unreachable(&mut self, peer: Rank) {
        if self.peers[peer as usize].unreachable {
            return;
        }
        self.peers[peer as usize].unreachable = true;
        self.stats.peers_declared_unreachable += 1;
        let error = OpError::PeerUnreachable { peer };
        self.fail_sends_to(peer, error);
        self.fail_incoming_from(peer, error);
        self.fail_receives_naming(peer, error);
        let state = &mut self.peers[peer as usize];
        state.probe_deadline_ns = None;
        state.waiters = 0;
        self.control.retain(|c| c.dst != peer);
        self.control_usage.set(self.control.len());
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

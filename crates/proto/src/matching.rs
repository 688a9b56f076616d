//! MPI matching: posted receives and unexpected messages, both kept in order; messages of one
//! sender are matched in message-id order (non-overtaking); probe and cancel.

use crate::credits::CreditClass;
use crate::ops::{Dest, RecvOp, RecvState, RxPhase};
use crate::state::Core;
use crate::window::IdPlace;
use crate::*;

impl Core {
    pub(crate) fn post_receive(
        &mut self,
        now: Nanos,
        source: Source,
        (context, tag): (Context, TagMatch),
        buffer: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        let found = self.rx.find_unexpected(source, context, tag);
        if found.is_none() {
            if let Source::Rank(peer) = source {
                self.check_awaitable(peer)?;
            }
        }
        let (index, id) = self.insert_recv_op(OpKind::Recv, source, (context, tag), buffer)?;
        match found {
            Some(incoming) => {
                self.rx.remove_unexpected(incoming);
                self.bind(now, index, incoming, memory);
            }
            None => {
                self.rx.post(index);
                if let Source::Rank(peer) = source {
                    self.peers.add_waiter(peer);
                }
            }
        }
        Ok(id)
    }

    pub(crate) fn post_probe_op(
        &mut self,
        _now: Nanos,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> Result<OpId, PostError> {
        let (index, id) =
            self.insert_recv_op(OpKind::Probe, source, (context, tag), &SgList::default())?;
        if let Some(found) = self.rx.find_unexpected(source, context, tag) {
            let status = self.rx.status_of(found);
            self.rx.remove_recv(index);
            self.complete(id, Ok(status));
            return Ok(id);
        }
        if let Source::Rank(peer) = source {
            if let Err(error) = self.check_awaitable(peer) {
                self.rx.remove_recv(index);
                return Err(error);
            }
            self.peers.add_waiter(peer);
        }
        self.rx.post_probe(index);
        Ok(id)
    }

    /// A receive or probe naming `peer` may wait for it: the peer is not given up on, and in
    /// open mode its slot is bound to a conversation. A slot never bound names nobody yet: a
    /// receive naming it was taken by whichever peer the slot went to next, whose fresh state
    /// then lost count of the receive waiting on it (found by the `endpoint_frames` fuzz
    /// target). Receives name a peer by its address, which binds the slot first.
    fn check_awaitable(&self, peer: Rank) -> Result<(), PostError> {
        let unbound = peer != self.rank
            && self
                .directory
                .as_ref()
                .is_some_and(|directory| !directory.is_active(peer));
        if self.peers[peer].unreachable || unbound {
            return Err(PostError::PeerUnreachable { peer });
        }
        Ok(())
    }

    pub(crate) fn insert_recv_op(
        &mut self,
        kind: OpKind,
        source: Source,
        (context, tag): (Context, TagMatch),
        buffer: &SgList,
    ) -> Result<(RecvKey, OpId), PostError> {
        let make = || RecvOp {
            kind,
            source,
            context,
            tag,
            buffer: *buffer,
            state: RecvState::Posted,
        };
        let limit = self.config.max_recvs;
        let table_full = PostError::TableFull {
            table: "receive",
            limit,
        };
        let (key, generation) = self.rx.insert_recv(make).ok_or(table_full)?;
        let id = OpId {
            kind,
            index: key.slot(),
            generation,
        };
        Ok((key, id))
    }

    /// Matches the peer's messages whose headers have arrived, in message-id order, against
    /// posted receives; unmatched ones join the unexpected queue (in `buffer` mode). Messages
    /// their sender withdrew (`cancel.rs`) are stepped over: a tombstone, or an id finished
    /// with no entry (only a withdrawal finishes an id that never arrived).
    pub(crate) fn match_in_order(&mut self, now: Nanos, peer: Rank, memory: &mut impl HostMemory) {
        loop {
            let next = self.peers[peer].next_match;
            let Some(incoming) = self.rx.incoming_by_id(peer, next) else {
                let window = &self.peers[peer].recv_window;
                if peer != self.rank && window.place(next) == IdPlace::Finished {
                    self.step_over_match(peer);
                    continue;
                }
                return self.watch_gap(peer);
            };
            let entry = &self.rx[incoming];
            if entry.phase == RxPhase::Cancelled {
                self.step_over_match(peer);
                continue;
            }
            match self.rx.find_posted(peer, (entry.context, entry.tag)) {
                Some(position) => {
                    let recv = self.rx.take_posted(position);
                    if let Source::Rank(p) = self.rx[recv].source {
                        self.peers.remove_waiter(p);
                    }
                    self.bind(now, recv, incoming, memory);
                }
                None => {
                    self.rx.push_unexpected(incoming);
                    self.complete_probes_for(incoming);
                }
            }
            self.step_over_match(peer);
        }
    }

    /// Messages from `peer` that arrived wait behind one that has not: the peer is awaited,
    /// as by a receive naming it, so that if it died with that message in flight it is probed,
    /// declared unreachable and the waiting messages released (`liveness.rs`). Unwatched, they
    /// held their buffers for ever, and a wildcard receive that one of them would match
    /// waited for ever.
    fn watch_gap(&mut self, peer: Rank) {
        let state = &self.peers[peer];
        let behind_gap =
            peer != self.rank && !state.unreachable && state.arrived_beyond_next_match();
        if behind_gap == state.gap_watched {
            return;
        }
        self.peers[peer].gap_watched = behind_gap;
        if behind_gap {
            self.peers.add_waiter(peer);
        } else {
            self.peers.remove_waiter(peer);
        }
    }

    fn step_over_match(&mut self, peer: Rank) {
        let state = &mut self.peers[peer];
        state.next_match = state.next_match.wrapping_add(1);
    }

    /// Binds a receive to a matched message: checks the length, directs further data into the
    /// receive buffer, completes at once what is already complete.
    pub(crate) fn bind(
        &mut self,
        now: Nanos,
        recv: RecvKey,
        incoming: IncomingKey,
        memory: &mut impl HostMemory,
    ) {
        let buffer_len = self.rx[recv].buffer.total_len();
        let entry = &mut self.rx[incoming];
        entry.matched = true;
        let (peer, tag, message_len) = (entry.peer, entry.tag, entry.geometry.total_len);
        if message_len > buffer_len {
            let error = OpError::Truncated {
                source_rank: peer,
                tag,
                message_len,
                buffer_len,
                immediate: entry.immediate,
            };
            self.fail_recv(recv, error);
            if let Some(send) = self.rx[incoming].local_send {
                self.finish_local(incoming, send);
                return;
            }
            self.truncate_incoming(now, incoming, memory);
            return;
        }
        if self.rx[incoming].local_send.is_some() {
            self.deliver_local(incoming, recv, memory);
            return;
        }
        self.rx.bind(recv, incoming);
        let entry = &mut self.rx[incoming];
        if entry.is_eager() {
            if entry.phase == RxPhase::DataComplete {
                self.deliver_eager(now, incoming, memory);
            } else {
                let ask = entry.waits_to_be_asked();
                if entry.dest == Dest::Nowhere {
                    entry.dest = Dest::Recv(recv);
                }
                self.set_waiter(incoming, true);
                if ask {
                    // `drop` mode, or taken as eager and no longer asked for: ask the sender
                    // to resend now, not at its next timeout.
                    self.ask_to_resume(incoming);
                    self.expect_resumption(now, incoming);
                }
            }
            return;
        }
        entry.dest = Dest::Recv(recv);
        self.set_waiter(incoming, true);
        self.grant_first_window(now, incoming);
        if self.rx[incoming].discarded {
            // The RTS's data was discarded and its sender told to WAIT: the grant resumes it.
            self.expect_resumption(now, incoming);
        }
    }

    /// A receive too short for its message: the message is consumed without data.
    pub(crate) fn truncate_incoming(
        &mut self,
        now: Nanos,
        incoming: IncomingKey,
        memory: &mut impl HostMemory,
    ) {
        let entry = &mut self.rx[incoming];
        entry.truncated = true;
        if let Dest::Buffer(slot) = entry.dest {
            entry.dest = Dest::Discard;
            self.rx.release_eager_buffer(slot, &mut self.peers);
        }
        let entry = &mut self.rx[incoming];
        entry.dest = Dest::Discard;
        if entry.is_eager() {
            if entry.phase == RxPhase::DataComplete {
                self.deliver_eager(now, incoming, memory);
            } else {
                // Its entry waits for the rest of its frames with no receive left waiting:
                // awaited, so that it is freed if its sender dies with a frame of it lost.
                self.set_waiter(incoming, true);
                if self.rx[incoming].waits_to_be_asked() {
                    // Its sender was told WAIT with KEPT and repeats only as a safety net,
                    // up to `rto_max_ns << KEPT_REPEAT_DOUBLINGS` apart: ask for the frames
                    // now, as `bind` does for a receive that fits, or the send and this entry
                    // wait for that repeat (seconds by default).
                    self.ask_to_resume(incoming);
                    self.expect_resumption(now, incoming);
                }
            }
            return;
        }
        // Rendezvous: tell the sender at once; its data is never requested.
        entry.phase = RxPhase::MsgAcked;
        entry.deadline_ns = Some(now + self.config.keepalive_ns);
        let (peer, msg_id) = (entry.peer, entry.msg_id);
        self.peers[peer].recv_window.finish(msg_id);
        let msg_ack = crate::receiver::control(
            peer,
            nicmsg_wire::FrameKind::MsgAck,
            nicmsg_wire::Flags::TRUNCATED,
            msg_id,
            0,
        );
        self.queue_control(msg_ack);
    }

    /// An eager message whose every frame arrived and that is matched: copy it out of its
    /// buffer if it was unexpected, complete the receive, free it, and return its credit.
    pub(crate) fn deliver_eager(
        &mut self,
        now: Nanos,
        incoming: IncomingKey,
        memory: &mut impl HostMemory,
    ) {
        let entry = &self.rx[incoming];
        let (peer, len) = (entry.peer, entry.geometry.total_len as usize);
        match (entry.dest, entry.recv) {
            (Dest::Buffer(slot), Some(recv)) => {
                let buffer = &self.rx[recv].buffer;
                buffer.write_at(memory, 0, &self.rx.eager_buffer(slot)[..len]);
                self.counters.record(peer, |s| s.bytes_copied += len as u64);
                self.finish_recv_ok(recv, incoming);
            }
            (Dest::Recv(recv), _) => self.finish_recv_ok(recv, incoming),
            _ => {}
        }
        self.free_incoming(incoming);
        self.return_credit(now, peer, CreditClass::of(len as u64));
    }

    /// Completes a receive with its message's status.
    pub(crate) fn finish_recv_ok(&mut self, recv: RecvKey, incoming: IncomingKey) {
        let status = self.rx.status_of(incoming);
        let entry = &mut self.rx[incoming];
        if let Dest::Buffer(slot) = entry.dest {
            self.rx.release_eager_buffer(slot, &mut self.peers);
        }
        let entry = &mut self.rx[incoming];
        entry.dest = Dest::Discard;
        entry.recv = None;
        self.counters
            .record(status.peer, |s| s.messages_received += 1);
        let generation = self.rx.recv_generation(recv);
        self.rx.remove_recv(recv);
        self.complete(
            OpId {
                kind: OpKind::Recv,
                index: recv.slot(),
                generation,
            },
            Ok(status),
        );
    }

    pub(crate) fn fail_recv(&mut self, recv: RecvKey, error: OpError) {
        let generation = self.rx.recv_generation(recv);
        let Some(op) = self.rx.remove_recv(recv) else {
            return;
        };
        self.complete(
            OpId {
                kind: op.kind,
                index: recv.slot(),
                generation,
            },
            Err(error),
        );
    }

    /// Completes every posted probe that matches a message just queued as unexpected.
    fn complete_probes_for(&mut self, incoming: IncomingKey) {
        let status = self.rx.status_of(incoming);
        let context = self.rx[incoming].context;
        while let Some(probe) = self.rx.take_probe_for(status.peer, context, status.tag) {
            if let Source::Rank(p) = self.rx[probe].source {
                self.peers.remove_waiter(p);
            }
            let generation = self.rx.recv_generation(probe);
            self.rx.remove_recv(probe);
            self.complete(
                OpId {
                    kind: OpKind::Probe,
                    index: probe.slot(),
                    generation,
                },
                Ok(status),
            );
        }
    }

    pub(crate) fn cancel_recv(&mut self, op: OpId) -> Result<(), CancelError> {
        let key = self
            .rx
            .recv_key_checked(op.index, op.generation)
            .ok_or(CancelError::UnknownOp)?;
        let recv = &self.rx[key];
        if recv.kind != op.kind {
            return Err(CancelError::UnknownOp);
        }
        if let RecvState::Bound(_) = recv.state {
            return Err(CancelError::InProgress);
        }
        let source = recv.source;
        if op.kind == OpKind::Probe {
            self.rx.unpost_probe(key);
        } else {
            self.rx.unpost(key);
        }
        if let Source::Rank(peer) = source {
            self.peers.remove_waiter(peer);
        }
        self.fail_recv(key, OpError::Cancelled);
        Ok(())
    }
}

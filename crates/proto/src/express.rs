//! The express path of an eager message that arrives whole in one frame, in order, for a
//! receive already posted: the common case of request/reply traffic, where latency is measured.
//! The general path builds an incoming entry, indexes it, matches it, places its frame, and
//! tears it all down again within the same call; this one goes straight from the frame to the
//! receive's completion, with exactly the same outcome (same completion, acknowledgement owed,
//! credit returned, duplicate window, liveness bookkeeping), so anything that is not this case
//! takes the general path unchanged.

use crate::credits::CreditClass;
use crate::state::Core;
use crate::window::IdPlace;
use crate::*;
use nicmsg_wire::{FrameHeader, FrameKind, MsgHeader, Protocol};

impl Core {
    /// Delivers the frame if it is a whole eager message the next receive in MPI order takes
    /// without truncation; returns false (having changed nothing) otherwise.
    pub(crate) fn deliver_express(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        msg: Option<&MsgHeader>,
        payload: &[u8],
        memory: &mut impl HostMemory,
    ) -> bool {
        let Some(msg) = msg else { return false };
        let peer = header.src;
        if !self.is_whole_eager_message(header, msg, payload.len())
            || self.peers[peer].next_match != header.msg_id
            || self.rx.incoming_by_id(peer, header.msg_id).is_some()
            // A message already waiting behind this one is matched by the general path, in
            // the order that path completes them.
            || self
                .rx
                .incoming_by_id(peer, header.msg_id.wrapping_add(1))
                .is_some()
        {
            return false;
        }
        let Some(position) = self.rx.find_posted(peer, (Context(msg.context), msg.tag)) else {
            return false;
        };
        let recv = self.rx.posted_at(position);
        let buffer = &self.rx[recv].buffer;
        if buffer.total_len() < msg.total_len {
            return false;
        }
        buffer.write_at(memory, 0, payload);
        self.rx.take_posted(position);
        self.finish_express(now, header, msg, recv);
        // Ids withdrawn by their sender may lie next, with messages held behind them.
        let next = self.peers[peer].next_match;
        if self.peers[peer].recv_window.place(next) == IdPlace::Finished {
            self.match_in_order(now, peer, memory);
        }
        true
    }

    /// The general path's checks of a first frame (`admit_message`, `place_frame`), for a
    /// message of exactly one frame.
    fn is_whole_eager_message(&self, header: &FrameHeader, msg: &MsgHeader, len: usize) -> bool {
        let Some(geometry) = self.admissible(header, msg, len as u64) else {
            return false;
        };
        header.kind == FrameKind::Eager && msg.protocol == Protocol::Eager && geometry.frames() == 1
    }

    /// What matching, placing and delivering the message would have left behind.
    fn finish_express(&mut self, now: Nanos, header: &FrameHeader, msg: &MsgHeader, recv: RecvKey) {
        let peer = header.src;
        let len = msg.total_len;
        let source = self.rx[recv].source;
        // A receive from a named rank counted as a waiter on it until matched; the message's
        // own waiter count rises and falls again within the general path.
        if let Source::Rank(p) = source {
            self.peers.remove_waiter(p);
        }
        let state = &mut self.peers[peer];
        state.note_arrival(header.msg_id);
        state.next_match = state.next_match.wrapping_add(1);
        self.counters.record(peer, |s| {
            s.bytes_placed += len;
            s.messages_received += 1;
            s.messages_express += 1;
        });
        let sender_waits = !header.has_flag(nicmsg_wire::Flags::UNWAITED);
        self.acknowledge_eager(now, peer, header.msg_id, sender_waits);
        self.peers[peer].recv_window.finish(header.msg_id);
        let generation = self.rx.recv_generation(recv);
        self.rx.remove_recv(recv);
        let status = Status {
            peer,
            tag: msg.tag,
            len,
            immediate: msg.immediate,
        };
        let id = OpId {
            kind: OpKind::Recv,
            index: recv.slot(),
            generation,
        };
        self.complete(id, Ok(status));
        self.return_credit(now, peer, CreditClass::of(len));
    }
}

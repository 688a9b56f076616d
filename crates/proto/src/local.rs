//! Messages a rank sends to itself: no network. The message waits, like an unexpected
//! rendezvous message (in MPI order with the rank's other messages to itself), until a matching
//! receive takes it; its bytes are then copied once from the send buffer to the receive buffer
//! and both operations complete.

use crate::geometry::Geometry;
use crate::ops::{Incoming, SendOp, SendPhase};
use crate::state::Core;
use crate::*;
use nicmsg_wire::Protocol;

impl Core {
    pub(crate) fn start_local_send(
        &mut self,
        now: Nanos,
        (context, tag): (Context, Tag),
        immediate: Option<u32>,
        data: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        let geometry = Geometry {
            total_len: data.total_len(),
            frame_payload: self.config.frame_payload(),
            protocol: Protocol::Rendezvous,
        };
        let rank = self.rank;
        let msg_id = self.peers[rank].send_next;
        let ack_unit = self.config.ack_unit;
        let mut op = SendOp::new(
            rank,
            (context, tag),
            data,
            geometry,
            1,
            ack_unit,
            SendPhase::Local,
        );
        op.msg_id = msg_id;
        op.immediate = immediate;
        let limit = self.config.max_sends;
        let (send, generation) = self.sends.insert_with(|| op).ok_or(PostError::TableFull {
            table: "send",
            limit,
        })?;
        let key = (context, tag);
        let mut entry = Incoming::new(rank, msg_id, key, geometry, self.config.ack_unit);
        entry.local_send = Some(send);
        entry.immediate = immediate;
        // The incoming table keeps an entry per send beyond `max_incoming` for exactly this.
        let incoming = self
            .rx
            .insert_incoming(entry)
            .expect("room reserved for every send");
        let peer = &mut self.peers[rank];
        peer.send_next = peer.send_next.wrapping_add(1);
        peer.sends_in_flight += 1;
        self.rx.index_incoming(rank, msg_id, incoming);
        self.match_in_order(now, rank, memory);
        Ok(OpId {
            kind: OpKind::Send,
            index: send.slot(),
            generation,
        })
    }

    /// A receive matched a message to self: copy, complete both, free.
    pub(crate) fn deliver_local(
        &mut self,
        incoming: IncomingKey,
        recv: RecvKey,
        memory: &mut impl HostMemory,
    ) {
        let entry = &self.rx[incoming];
        let send = entry.local_send.expect("a local message");
        let source = self.sends[send].data;
        let target = self.rx[recv].buffer;
        let len = source.total_len();
        memory.copy_into(&source, &target, len);
        self.counters.record(self.rank, |s| s.bytes_copied += len);
        self.finish_recv_ok(recv, incoming);
        self.finish_local(incoming, send);
    }

    /// The local message was consumed (delivered or truncated): complete its send, free it.
    pub(crate) fn finish_local(&mut self, incoming: IncomingKey, send: SendKey) {
        self.free_incoming(incoming);
        self.finish_send(send, Ok(()));
    }

    /// Inserts an entry for a message from another rank, unless `max_incoming` of them are
    /// held already (the rest of the table is kept for messages to self), or fewer than
    /// `spare` entries would stay free after it.
    pub(crate) fn insert_remote(&mut self, entry: Incoming, spare: usize) -> Option<IncomingKey> {
        if !self.has_room_for_remote(spare) {
            return None;
        }
        self.rx.insert_incoming(entry)
    }

    /// True if [`insert_remote`](Self::insert_remote) takes one more entry, leaving `spare`.
    pub(crate) fn has_room_for_remote(&self, spare: usize) -> bool {
        let usage = self.rx.incoming_usage();
        let local = self.peers[self.rank].sends_in_flight as usize;
        usage.in_use + spare < usage.limit
            && usage.in_use.saturating_sub(local) + spare < self.config.max_incoming
    }

    /// A probe claimed the local send's message: a receive has it for MPI, too late to cancel.
    pub(crate) fn local_message_claimed(&self, send: SendKey) -> bool {
        let msg_id = self.sends[send].msg_id;
        self.rx
            .incoming_by_id(self.rank, msg_id)
            .is_some_and(|incoming| self.rx[incoming].claimed)
    }

    /// Cancels a local send not taken by a receive yet.
    pub(crate) fn cancel_local(&mut self, send: SendKey) {
        let msg_id = self.sends[send].msg_id;
        if let Some(incoming) = self.rx.incoming_by_id(self.rank, msg_id) {
            self.free_incoming(incoming);
        }
        self.finish_send(send, Err(OpError::Cancelled));
    }
}

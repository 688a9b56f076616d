//! Building outgoing frames: control frames from the control queue, data frames chosen from the
//! ready sends (retransmissions first, then repeated RTS/RSM, then new frames).

use crate::ops::Control;
use crate::state::Core;
use crate::*;
use nicmsg_wire::{emit_headers, seal, Flags, FrameHeader, FrameKind, MsgHeader};

impl Core {
    pub(crate) fn emit_control(&mut self, now: Nanos, control: Control, transmit: &mut Transmit) {
        let peer = &self.peers[control.dst];
        let carries_credits = crate::state::carries_credits(control.kind);
        let aux = if carries_credits {
            peer.credits_given.to_aux()
        } else {
            0
        };
        let (src, dst) = self.wire_names(control.dst);
        let header = FrameHeader {
            kind: control.kind,
            flags: control.flags,
            job: self.job,
            src,
            dst,
            msg_id: control.msg_id,
            frame_index: control.frame_index,
            offset: 0,
            payload_len: 0,
            aux,
            acked_id: 0,
        };
        if carries_credits {
            self.credits_carried(control.dst);
        }
        if asks_for_answer(&header) {
            self.peers.expect_answer(now, control.dst);
        }
        transmit.reset(control.dst);
        let len = emit_headers(&header, None, transmit.headers_buf()).expect("headers fit");
        transmit.set_headers_len(len);
        seal(&mut transmit.headers_buf()[..len], &[]);
        self.count_sent(control.dst, len, false, false);
    }

    /// Builds the next data frame into `transmit`; false if no send has one to go.
    pub(crate) fn next_data_frame(
        &mut self,
        now: Nanos,
        memory: &impl HostMemory,
        transmit: &mut Transmit,
    ) -> bool {
        let Some((index, frame, retransmit)) = self.sends.next_frame() else {
            return false;
        };
        self.build_data_frame(now, index, frame, retransmit, memory, transmit);
        self.record_frame_sent(now, index, frame, transmit.len());
        self.sends.frame_taken(index);
        true
    }

    /// Arms the frame's timers from its estimated departure, not from `now`: a frame queued
    /// behind others leaves later (`drain.rs`).
    fn record_frame_sent(&mut self, now: Nanos, index: SendKey, frame: u32, bytes: usize) {
        let max_ns = self.config.rto_max_ns;
        let dst = self.sends[index].dst;
        let departure = self.departure(now, dst, bytes);
        let rto = self.peers[dst].rto;
        let (op, timers) = self.sends.with_timers(index);
        op.collections
            .on_frame_sent(timers, frame, departure.at, |retries| {
                rto.backed_off_ns(retries, max_ns) + departure.slack
            });
        self.after_frame_sent(departure.timer_start(), index);
    }

    fn build_data_frame(
        &mut self,
        now: Nanos,
        index: SendKey,
        frame: u32,
        retransmit: bool,
        memory: &impl HostMemory,
        transmit: &mut Transmit,
    ) {
        let op = &self.sends[index];
        let peer = op.dst;
        let kind = op.kind_of(frame);
        let offset = op.geometry.offset(frame);
        let len = op.geometry.len(frame);
        let mut flags = if retransmit { Flags::RETRANSMIT } else { 0 };
        if self.config.link_checks_payload && !self.peers[peer].link_unchecked {
            flags |= Flags::LINK_CHECKED;
        }
        let mut aux = 0;
        if kind == FrameKind::Data && op.rsm_frame == Some(frame) {
            flags |= Flags::RSM;
            aux = op.rsm_window_end;
        }
        let (src, dst) = self.wire_names(op.dst);
        let mut header = FrameHeader {
            kind,
            flags,
            job: self.job,
            src,
            dst,
            msg_id: op.msg_id,
            frame_index: frame,
            offset,
            payload_len: len as u32,
            aux,
            acked_id: 0,
        };
        let msg = kind.has_msg_header().then_some(MsgHeader {
            total_len: op.geometry.total_len,
            tag: op.tag,
            frame_payload: op.geometry.frame_payload,
            protocol: op.geometry.protocol,
            ack_unit: op.ack_unit,
            context: op.context.0,
            immediate: op.immediate,
        });
        if kind == FrameKind::Eager {
            if op.completed_early || op.unwaited {
                header.flags |= Flags::UNWAITED;
            }
            self.piggyback_on(peer, &mut header);
        }
        transmit.reset(peer);
        let headers_len =
            emit_headers(&header, msg.as_ref(), transmit.headers_buf()).expect("headers fit");
        transmit.set_headers_len(headers_len);
        match self.sends.copy(index) {
            Some(copied) => transmit.set_inline(copied),
            None => self.sends[index]
                .data
                .for_each_piece(offset, len, |piece| transmit.push_piece(piece)),
        }
        transmit.seal(memory);
        self.count_sent(peer, headers_len + len as usize, true, retransmit);
        self.peers.expect_answer(now, peer);
    }

    fn count_sent(&mut self, dst: Rank, bytes: usize, data: bool, retransmit: bool) {
        self.counters.record(dst, |stats| {
            stats.frames_sent += 1;
            stats.bytes_sent += bytes as u64;
            stats.data_frames_sent += u64::from(data);
            stats.frames_retransmitted += u64::from(retransmit);
        });
    }
}

/// Control frames the peer must answer (its silence then counts against its liveness).
fn asks_for_answer(header: &FrameHeader) -> bool {
    match header.kind {
        FrameKind::End | FrameKind::Cancel => true,
        FrameKind::Credit => header.has_flag(Flags::REQUEST),
        _ => false,
    }
}

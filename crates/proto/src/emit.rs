//! Building outgoing frames: control frames from the control queue, data frames chosen from the
//! ready sends (retransmissions first, then repeated RTS/RSM, then new frames).

use crate::ops::{Control, SendOp};
use crate::state::Core;
use crate::*;
use nicmsg_wire::{emit_headers, seal, Flags, FrameHeader, FrameKind, MsgHeader};

/// Frames of one send emitted before the next ready send gets its turn: keeps one large message
/// from starving the others, yet sends each in long runs. A receiver predicts where the next
/// frames go from the last one that arrived (`placement.rs`) and the kernel coalesces runs of
/// frames (GRO): frames of several messages interleaved a few at a time defeat both. 64 frames
/// are about one coalesced 64 KB datagram and a quarter of a CTS window.
const FRAMES_PER_TURN: u32 = 64;

impl Core {
    pub(crate) fn emit_control(&mut self, now: Nanos, control: Control, transmit: &mut Transmit) {
        let peer = &self.peers[control.dst];
        let carries_credits = crate::state::carries_credits(control.kind);
        let aux = if carries_credits {
            peer.credits_given
        } else {
            0
        };
        let header = FrameHeader {
            kind: control.kind,
            flags: control.flags,
            job: self.job,
            src: self.rank,
            dst: control.dst,
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
        while let Some(&index) = self.ready.front() {
            let Some(op) = self.sends.get_mut(index) else {
                self.ready.pop_front();
                continue;
            };
            let Some((frame, retransmit)) = choose_frame(op) else {
                op.in_ready = false;
                self.ready.pop_front();
                continue;
            };
            self.build_data_frame(now, index, frame, retransmit, memory, transmit);
            self.record_frame_sent(now, index, frame, transmit.len());
            self.rotate_ready(index);
            return true;
        }
        false
    }

    /// Keeps the send at the head for `FRAMES_PER_TURN` frames, then moves it to the back.
    fn rotate_ready(&mut self, index: SendKey) {
        let op = &mut self.sends[index];
        op.turn_frames += 1;
        if !op.has_frame_to_send() {
            op.in_ready = false;
            op.turn_frames = 0;
            self.ready.pop_front();
        } else if op.turn_frames >= FRAMES_PER_TURN {
            op.turn_frames = 0;
            self.ready.pop_front();
            self.ready.push_back(index);
        }
    }

    /// Arms the frame's timers from its estimated departure, not from `now`: a frame queued
    /// behind others leaves later (`drain.rs`).
    fn record_frame_sent(&mut self, now: Nanos, index: SendKey, frame: u32, bytes: usize) {
        let max_ns = self.config.rto_max_ns;
        let dst = self.sends[index].dst;
        let departure = self.departure(now, dst, bytes);
        let rto = self.peers[dst].rto;
        let op = &mut self.sends[index];
        op.collections.on_frame_sent(
            &mut self.send_timers[index],
            frame,
            departure.at,
            |retries| rto.backed_off_ns(retries, max_ns) + departure.slack,
        );
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
        let kind = op.kind_of(frame);
        let offset = op.geometry.offset(frame);
        let len = op.geometry.len(frame);
        let mut flags = if retransmit { Flags::RETRANSMIT } else { 0 };
        let mut aux = 0;
        if kind == FrameKind::Data && op.rsm_frame == Some(frame) {
            flags |= Flags::RSM;
            aux = op.rsm_window_end;
        }
        let mut header = FrameHeader {
            kind,
            flags,
            job: self.job,
            src: self.rank,
            dst: op.dst,
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
        });
        if kind == FrameKind::Eager {
            self.piggyback_on(&mut header);
        }
        transmit.reset(header.dst);
        let headers_len =
            emit_headers(&header, msg.as_ref(), transmit.headers_buf()).expect("headers fit");
        transmit.set_headers_len(headers_len);
        let op = &self.sends[index];
        match op.copy {
            Some(copied) => transmit.set_inline(&self.send_copies[index][..usize::from(copied)]),
            None => op
                .data
                .for_each_piece(offset, len, |piece| transmit.push_piece(piece)),
        }
        transmit.seal(memory);
        self.count_sent(header.dst, headers_len + len as usize, true, retransmit);
        self.peers.expect_answer(now, header.dst);
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

/// Picks the next frame of a send: a resend of a timed-out collection, then a repeated
/// RTS/RSM/frame 0, then the next new frame the grant and the collection window allow.
fn choose_frame(op: &mut SendOp) -> Option<(u32, bool)> {
    if op.phase != crate::ops::SendPhase::Streaming || op.cancel.is_some() {
        return None;
    }
    if let Some(frame) = op
        .resend_cursor
        .next_frame(&mut op.collections, op.next_new)
    {
        return Some((frame, true));
    }
    if let Some(frame) = op.extra_frame.take() {
        return Some((frame, true));
    }
    let limit = op.granted.min(op.collections.window_end_frame());
    if op.next_new < limit {
        let frame = op.next_new;
        op.next_new += 1;
        return Some((frame, false));
    }
    None
}

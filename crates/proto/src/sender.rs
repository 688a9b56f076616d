//! Sending side: starting messages in order, eager (BIP short messages) and rendezvous
//! (RTS with first data, CTS windows, RSM, END, MSG-ACK, CLEANUP), acknowledgements and
//! retransmission timers.

use crate::credits::CreditClass;
use crate::geometry::Geometry;
use crate::ops::{Control, SendOp, SendPhase};
use crate::state::Core;
use crate::*;
use nicmsg_wire::{Flags, FrameHeader, FrameKind, Protocol, FRAME_HEADER_LEN};

/// Doublings of `rto_max_ns` between the safety repeats of a message its receiver keeps (WAIT
/// with KEPT): 5, at most 6.4 s apart by default. The receiver asks for the data itself once a
/// receive takes it, and repeats the request `max_retries` times (about 2 s of backed-off
/// retries by default); the sender's repeat only recovers what a longer outage lost.
pub const KEPT_REPEAT_DOUBLINGS: u32 = 5;

impl Core {
    pub(crate) fn start_send(
        &mut self,
        now: Nanos,
        dst: Rank,
        (context, tag): (Context, Tag),
        options: SendOptions,
        data: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        let len = data.total_len();
        let protocol = if len <= self.config.eager_limit {
            Protocol::Eager
        } else {
            Protocol::Rendezvous
        };
        let geometry = self.geometry_for(len, protocol);
        let frames = u32::try_from(geometry.frames()).map_err(|_| PostError::TooLong { len })?;
        let ack_unit = self.config.ack_unit;
        let limit = self.config.max_sends;
        let make = || {
            let mut op = SendOp::new(
                dst,
                (context, tag),
                data,
                geometry,
                frames,
                ack_unit,
                SendPhase::Queued,
            );
            op.immediate = options.immediate;
            op.unwaited = options.unwaited;
            op
        };
        let (index, generation) = self.sends.insert_with(make).ok_or(PostError::TableFull {
            table: "send",
            limit,
        })?;
        // A send copied completes as soon as it starts; a confirmed one waits for its
        // acknowledgement, so its frames read the host's bytes, as do an unwaited one's (the
        // host keeps them).
        if protocol == Protocol::Eager && !options.confirmed && !options.unwaited {
            if frames == 1 {
                self.sends.copy_short(index, memory);
            }
            self.sends.copy_to_lent(index, memory);
        }
        self.enqueue_for_start(dst, index);
        self.start_queued_for(now, dst);
        Ok(OpId {
            kind: OpKind::Send,
            index: index.slot(),
            generation,
        })
    }

    fn enqueue_for_start(&mut self, dst: Rank, send: SendKey) {
        let peer = &mut self.peers[dst];
        match peer.queue_tail {
            None => peer.queue_head = Some(send),
            Some(tail) => self.sends[tail].next_queued = Some(send),
        }
        peer.queue_tail = Some(send);
    }

    fn geometry_for(&self, len: u64, protocol: Protocol) -> Geometry {
        Geometry {
            total_len: len,
            frame_payload: self.config.frame_payload_for(len, protocol),
            protocol,
        }
    }

    /// Starts the sends at the head of `dst`'s queue, in order, while the message-id window
    /// allows. A message that cannot start blocks those behind it: message ids, and so MPI
    /// order, follow posting order. An eager message the receiver has no buffer left for waits
    /// for a credit (`credit_wait.rs`), and goes by rendezvous (its header alone is always
    /// taken) as soon as the receiver says its buffers are held for later messages, or after
    /// `credit_wait_ns`: a message the receiver waits for is never stuck behind unmatched ones.
    pub(crate) fn start_queued_for(&mut self, now: Nanos, dst: Rank) {
        loop {
            let Some(head) = self.peers[dst].queue_head else {
                return;
            };
            let op = &self.sends[head];
            let eager = op.is_eager();
            let peer = &self.peers[dst];
            let needs_credit = eager && self.config.unexpected == UnexpectedPolicy::Buffer;
            let class = CreditClass::of(op.data.total_len());
            let has_credit = peer.credits_available(class, class.per_peer(&self.config)) > 0;
            if !peer.window_open() {
                return;
            }
            let out_of_credit = needs_credit && !has_credit;
            if out_of_credit {
                if self.wait_for_credit(now, dst) {
                    return;
                }
                self.send_by_rendezvous(head, dst);
            }
            let needs_credit = needs_credit && has_credit;
            let eager = self.sends[head].is_eager();
            let granted = match (eager, out_of_credit) {
                (true, _) => self.sends[head].frames,
                // Sent by rendezvous because the receiver holds its buffers: it falls behind.
                (false, true) => 1,
                (false, false) => self.presumed_grant(head),
            };
            let peer = &mut self.peers[dst];
            let msg_id = peer.send_next;
            peer.send_next = peer.send_next.wrapping_add(1);
            peer.sends_in_flight += 1;
            if needs_credit {
                peer.credits_spent.add_one(class);
            }
            let op = &mut self.sends[head];
            peer.queue_head = op.next_queued.take();
            if peer.queue_head.is_none() {
                peer.queue_tail = None;
            }
            op.msg_id = msg_id;
            op.credit = needs_credit.then_some(class);
            op.phase = SendPhase::Streaming;
            op.granted = granted;
            self.sends.activate(dst, msg_id, head);
            self.sends.mark_ready(head);
            self.complete_early_if_copied(head);
        }
    }

    /// Frames of rendezvous message `index` that go before its CTS: the RTS alone, or, while
    /// the receiver keeps up (`Peer::rendezvous_finds_receive`), those holding the first
    /// `presumed_grant_bytes` (at most the eager limit), in whole acknowledgement collections,
    /// so that a CTS asking to start over resends them by collection (`on_cts`). Always fewer
    /// than a CTS window: the receiver's first grant must exceed them, or no RSM would ever
    /// ask for the next window.
    fn presumed_grant(&self, index: SendKey) -> u32 {
        let op = &self.sends[index];
        // No more than an eager message sends unasked: the eager limit shrinks as a job grows,
        // and so does what many senders may pour into one receiver at once.
        let bytes = self
            .config
            .presumed_grant_bytes
            .min(self.config.eager_limit);
        if bytes == 0 || !self.peers[op.dst].rendezvous_finds_receive {
            return 1;
        }
        let covering = Geometry {
            total_len: bytes.min(op.geometry.total_len),
            ..op.geometry
        }
        .frames() as u32;
        let below_first_grant = self.config.cts_window_frames.saturating_sub(1).max(1);
        covering
            .next_multiple_of(u32::from(op.ack_unit.max(1)))
            .min(below_first_grant)
            .min(op.frames)
    }

    /// An eager message for which the receiver has no buffer left goes as a rendezvous
    /// message: an RTS with its first bytes, which the receiver keeps (header at least) and
    /// matches in order, then data on its grant. A short message keeps its copy: one frame
    /// either way, since both protocols put as many bytes in frame 0.
    fn send_by_rendezvous(&mut self, index: SendKey, dst: Rank) {
        let op = &self.sends[index];
        let geometry = self.geometry_for(op.geometry.total_len, Protocol::Rendezvous);
        let frames = geometry.frames() as u32;
        debug_assert!(frames <= op.frames, "rendezvous never needs more frames");
        debug_assert!(
            op.copy.is_none() || frames == 1,
            "a copied message stays one frame"
        );
        let op = &mut self.sends[index];
        op.geometry = geometry;
        op.frames = frames;
        op.collections = crate::collections::Collections::new(op.ack_unit, frames);
        self.sends.reset_timers(index);
        self.counters.record(dst, |s| s.credit_stalls += 1);
    }

    pub(crate) fn unlink_queued(&mut self, dst: Rank, index: SendKey) {
        let next = self.sends.get(index).and_then(|op| op.next_queued);
        let mut previous = None;
        let mut cursor = self.peers[dst].queue_head;
        while let Some(at) = cursor.filter(|&at| at != index) {
            previous = Some(at);
            cursor = self.sends.get(at).and_then(|op| op.next_queued);
        }
        if cursor.is_none() {
            return;
        }
        match previous {
            None => self.peers[dst].queue_head = next,
            Some(previous) => self.sends[previous].next_queued = next,
        }
        let peer = &mut self.peers[dst];
        if peer.queue_tail == Some(index) {
            peer.queue_tail = previous;
        }
    }

    /// Completes a send and frees everything it held.
    pub(crate) fn finish_send(&mut self, index: SendKey, result: Result<(), OpError>) {
        let generation = self.sends.generation(index);
        let Some(op) = self.sends.remove(index) else {
            return;
        };
        if op.kept_repeats.is_some() {
            self.peers.remove_waiter(op.dst);
        }
        if matches!(op.phase, SendPhase::Streaming | SendPhase::Ending) {
            self.sends.deactivate(op.dst, op.msg_id);
            let peer = &mut self.peers[op.dst];
            peer.send_window.finish(op.msg_id);
            peer.sends_in_flight -= 1;
            self.peers.awaited_less(op.dst);
        }
        if op.phase == SendPhase::Local {
            self.peers[op.dst].sends_in_flight -= 1;
        }
        if result.is_ok() {
            self.counters.record(op.dst, |s| s.messages_sent += 1);
        }
        if op.completed_early {
            self.sends.early_send_ended();
            if result.is_err() {
                // Reported sent, but the peer died (or never acknowledged) first.
                self.counters
                    .record(op.dst, |s| s.early_sends_unconfirmed += 1);
            }
            return;
        }
        self.complete_send(index, generation, send_status(&op), result);
    }

    fn complete_send(
        &mut self,
        index: SendKey,
        generation: u32,
        status: Status,
        result: Result<(), OpError>,
    ) {
        let id = OpId {
            kind: OpKind::Send,
            index: index.slot(),
            generation,
        };
        self.complete(id, result.map(|()| status));
    }

    /// A short send that has started (message id, credit) completes now: its bytes are the
    /// core's copy, so the host's buffer is free, as with BIP's short messages and MPI's eager
    /// sends. Bounded so that sends the host no longer sees fill at most half the send table.
    fn complete_early_if_copied(&mut self, index: SendKey) {
        if self.sends.may_complete_early(index) {
            self.complete_early(index);
        }
    }

    /// Reports the send done while the core keeps it (until its acknowledgement, or the end of
    /// its handshake): the host no longer sees it.
    fn complete_early(&mut self, index: SendKey) {
        let status = send_status(&self.sends[index]);
        let generation = self.sends.generation(index);
        self.complete_send(index, generation, status, Ok(()));
        self.sends.completed_early(index);
        self.counters
            .record(status.peer, |s| s.sends_completed_early += 1);
    }

    pub(crate) fn active_send(&self, peer: Rank, msg_id: u32) -> Option<SendKey> {
        self.sends.active(peer, msg_id)
    }

    /// ACK from the receiver: a collection (or, with ACK_ALL, the whole message, and with a
    /// `frame_index` above 0 that many following messages too) arrived; with WAIT, the
    /// receiver is alive but has not accepted the message yet. A WAIT for a message taken as
    /// eager answered its RTS before the receiver took it: the receiver holds it in a buffer
    /// now. Taken, it postponed a lost eager frame's resending to `rto_max_ns`, while the
    /// receiver, having its first frame, asked for nothing.
    pub(crate) fn on_ack(&mut self, now: Nanos, header: &FrameHeader) {
        if header.has_flag(Flags::ACK_ALL) && header.frame_index > 0 {
            return self.on_ack_all_run(now, header);
        }
        let Some(index) = self.active_send(header.src, header.msg_id) else {
            self.count_drop(Some(header.src), DropReason::Duplicate);
            return;
        };
        let peer = header.src;
        if header.has_flag(Flags::WAIT) && self.sends[index].taken_as_eager {
            return self.count_drop(Some(peer), DropReason::Duplicate);
        }
        if header.has_flag(Flags::WAIT) {
            return self.on_wait(now, index, header.has_flag(Flags::KEPT));
        }
        self.end_wait(index);
        if header.has_flag(Flags::ACK_ALL) {
            self.ack_whole(now, index);
        } else {
            let (op, timers) = self.sends.with_timers(index);
            // Only frames that went out can be acknowledged.
            if header.frame_index >= op.next_new {
                self.count_drop(Some(header.src), DropReason::Invalid);
                return;
            }
            let c = op.collections.of_frame(header.frame_index);
            let acked = op.collections.ack(timers, c, now);
            // A collection acknowledged at its first sending (the clean signal Karn's rule
            // samples too) says the queue it waited in drains: those sent after it wait on.
            if acked.rtt_ns.is_some() {
                let rto = self.peers[peer].rto.rto_ns();
                op.collections.postpone_after(timers, c, now + rto);
            }
            if acked.newly_acked {
                let bytes = op.collection_bytes(c);
                self.peers[peer].drain.acknowledged(now, bytes);
            }
            if let Some(rtt_ns) = acked.rtt_ns {
                self.sample_rtt(peer, rtt_ns);
            }
        }
        self.after_ack(now, index);
    }

    /// ACK with WAIT: the receiver is alive but has no receive for the message yet. Its
    /// frames are asked again after `rto_max_ns`, or, when the receiver keeps the message and
    /// will ask for it itself (KEPT), after a pause that doubles with every WAIT up to
    /// `KEPT_REPEAT_DOUBLINGS`: the repeat is only a safety net then, and the send counts as a
    /// waiter on its peer meanwhile, so the peer's death is still found within
    /// `peer_timeout_ns`. Repeating every `rto_max_ns`, each of hundreds of held messages cost
    /// both sides a frame five times a second for as long as it waited.
    fn on_wait(&mut self, now: Nanos, index: SendKey, kept: bool) {
        let retry_ns = self.config.rto_max_ns;
        let op = &mut self.sends[index];
        op.told_to_wait = true;
        op.wait_answered = true;
        let dst = op.dst;
        let pause = if kept {
            // The pause doubles with every repeat (`expire_sends`), not with every WAIT: the
            // receiver answers WAIT to each frame it discards, and counted so, a message of
            // four frames waited 8 `rto_max_ns` for its first repeat and 32 for its second.
            let repeats = op.kept_repeats.unwrap_or(0);
            if op.kept_repeats.replace(repeats).is_none() {
                self.peers.add_waiter(dst);
            }
            retry_ns.saturating_mul(1 << repeats)
        } else {
            retry_ns
        };
        self.peers[dst].rendezvous_finds_receive = false;
        let (op, timers) = self.sends.with_timers(index);
        op.collections.postpone(timers, now + pause);
        if op.wait_deadline_ns.is_some() {
            op.wait_deadline_ns = Some(now + pause);
            op.wait_retries = 0;
        }
    }

    /// The receiver answered otherwise than WAIT (a grant, an acknowledgement): the send's
    /// timers count as timeouts again, and a kept message stops waiting on its peer.
    fn end_wait(&mut self, index: SendKey) {
        let op = &mut self.sends[index];
        op.wait_answered = false;
        if op.kept_repeats.take().is_some() {
            let dst = op.dst;
            self.peers.remove_waiter(dst);
        }
    }

    /// The whole message `index` is acknowledged (ACK_ALL, or piggybacked): every collection,
    /// and a round-trip sample when its last one alone was outstanding.
    pub(crate) fn ack_whole(&mut self, now: Nanos, index: SendKey) {
        let (op, timers) = self.sends.with_timers(index);
        if let Some(rtt_ns) = op.collections.ack_all(timers, now) {
            let peer = op.dst;
            self.sample_rtt(peer, rtt_ns);
        }
    }

    fn sample_rtt(&mut self, peer: Rank, rtt_ns: Nanos) {
        let (min_ns, max_ns) = (self.config.rto_min_ns, self.config.rto_max_ns);
        self.peers[peer].rto.sample(rtt_ns, min_ns, max_ns);
    }

    /// An ACK_ALL of a run (`piggyback.rs`): messages `msg_id` to `msg_id + frame_index`, each
    /// held whole by the receiver, taken as that many ACK_ALLs. A longer run than any sender
    /// makes is dropped and counted.
    fn on_ack_all_run(&mut self, now: Nanos, header: &FrameHeader) {
        if header.frame_index > crate::state::MAX_ACK_ALL_RUN {
            return self.count_drop(Some(header.src), DropReason::Invalid);
        }
        for step in 0..=header.frame_index {
            let one = FrameHeader {
                msg_id: header.msg_id.wrapping_add(step),
                frame_index: 0,
                ..*header
            };
            self.on_ack(now, &one);
        }
    }

    pub(crate) fn after_ack(&mut self, now: Nanos, index: SendKey) {
        let op = &mut self.sends[index];
        // While the receiver decides on a cancel, its answer alone completes the send: an
        // acknowledgement sent before it saw the CANCEL says nothing about withdrawal.
        if op.cancel.is_some() {
            return;
        }
        if !op.collections.all_acked() {
            self.sends.mark_ready(index);
            return;
        }
        if op.is_eager() {
            self.finish_send(index, Ok(()));
            return;
        }
        if op.phase == SendPhase::Streaming {
            self.note_receive_found(index);
            let op = &mut self.sends[index];
            op.phase = SendPhase::Ending;
            op.extra_frame = None;
            op.wait_retries = 0;
            let control = end_frame(op);
            // The END leaves behind every data frame still queued towards the peer (the other
            // messages of a stream): its answer is due a round trip after that, not after now.
            let departure = self.departure(now, control.dst, FRAME_HEADER_LEN);
            let rto = self.peers[control.dst].rto.rto_ns();
            let op = &mut self.sends[index];
            op.wait_deadline_ns = Some(departure.timer_start() + rto);
            self.queue_control(control);
            self.complete_early_if_delivered(index);
        }
    }

    /// The receiver has taken the rendezvous message `index` (granted it, or acknowledged it
    /// whole): unless it answered WAIT first, its receive was there when the message came
    /// (`Peer::rendezvous_finds_receive`).
    fn note_receive_found(&mut self, index: SendKey) {
        let op = &self.sends[index];
        if !op.told_to_wait {
            self.peers[op.dst].rendezvous_finds_receive = true;
        }
    }

    /// A rendezvous send whose every frame the matched receive acknowledged completes now: its
    /// buffer is read no more (no frame is sent again once acknowledged), so the application
    /// need not wait the round trip of END and MSG-ACK, which go on behind it. In a ping-pong
    /// the reply's RTS then finds its receive posted instead of waiting for the next round
    /// trip. Bounded with the early eager sends (`max_early_sends`).
    fn complete_early_if_delivered(&mut self, index: SendKey) {
        let op = &self.sends[index];
        if op.peer_matched && !op.completed_early && self.sends.has_early_room() {
            self.complete_early(index);
        }
    }

    /// CTS: the cumulative grant grew (or is repeated); FROM_START asks for frame 0 again.
    pub(crate) fn on_cts(&mut self, _now: Nanos, header: &FrameHeader) {
        let Some(index) = self.active_send(header.src, header.msg_id) else {
            self.count_drop(Some(header.src), DropReason::Duplicate);
            return;
        };
        let pre = self.config.rsm_pre_frames;
        let op = &mut self.sends[index];
        if op.phase != SendPhase::Streaming {
            return;
        }
        self.end_wait(index);
        if header.has_flag(Flags::EAGER) && self.can_send_as_eager(index) {
            self.send_as_eager(index);
        }
        let op = &mut self.sends[index];
        let first_cts = !op.peer_matched;
        if !op.is_eager() {
            // Only a receive that matched the message makes the receiver grant frames.
            op.peer_matched = true;
            self.note_receive_found(index);
        }
        let op = &mut self.sends[index];
        if op.is_eager() {
            // The receiver discarded our frames (`drop` mode) and now has a receive for them.
            if header.has_flag(Flags::FROM_START) {
                let (op, timers) = self.sends.with_timers(index);
                op.collections.resend_all_sent(timers, op.next_new);
                self.sends.mark_ready(index);
            }
            return;
        }
        if header.has_flag(Flags::FROM_START) && op.granted <= 1 {
            op.extra_frame = Some(0);
        } else if header.has_flag(Flags::FROM_START) && first_cts {
            // The frames sent before the CTS found no receive and were discarded: send every
            // one not acknowledged again now, not when its timer (postponed by the receiver's
            // WAIT) runs out. Once: later CTSs repeat the flag until frame 0 is in.
            let (op, timers) = self.sends.with_timers(index);
            op.collections.resend_all_sent(timers, op.next_new);
        }
        let op = &mut self.sends[index];
        let grant = header.frame_index.min(op.frames);
        if grant > op.granted {
            let previous = op.granted;
            op.granted = grant;
            op.rsm_window_end = grant;
            op.rsm_frame = (grant < op.frames).then(|| grant.saturating_sub(1 + pre).max(previous));
            op.wait_deadline_ns = None;
            op.wait_retries = 0;
            if op.extra_frame.is_some_and(|f| f != 0) {
                op.extra_frame = None;
            }
        }
        self.sends.mark_ready(index);
    }

    /// Whether a CTS with EAGER may turn send `index` eager: a rendezvous message no receive
    /// matched yet (the receiver asks so only of messages a buffer of theirs holds,
    /// `handover.rs`); any other is answered as a plain CTS.
    ///
    /// Also while a CANCEL of it waits for its answer: the receiver took it as eager whatever
    /// that answer will be, and a receive may bind it before the CANCEL comes, which is then
    /// refused. Taken as a plain CTS, the request marked the message matched, its frame went
    /// as DATA, which the receiver drops for a message it takes as eager, and the send and
    /// its receive waited for ever. No frame leaves before the answer (`choose_frame`), and
    /// the CANCEL repeated after this names the credit the message now rides on, which the
    /// receiver returns once either way (`cancel.rs`, `withdraw`).
    ///
    /// This rank's own eager limit is not asked: the receiver checked the message against
    /// its own, the one its buffers are cut for. The two agree in a job (`Config`); were they
    /// to differ, asking would leave a message the receiver took granted by plain CTS, and
    /// both waiting for ever.
    fn can_send_as_eager(&self, index: SendKey) -> bool {
        let op = &self.sends[index];
        // A receiver of this version asks only for a message that cuts alike (`handover.rs`);
        // one that asked for another would get a message whose last bytes never come.
        !op.is_eager() && !op.peer_matched && op.geometry.cuts_alike_as_eager()
    }

    /// The receiver kept this message without a receive and now holds a buffer for it, on a
    /// credit it kept back: the message goes again from its first frame as an eager one, cut
    /// as its RTS was, and completes on the eager acknowledgement. It spends no credit of its
    /// own. Started afresh, not resent: only the RTS had left, and a collection of several
    /// frames is resent only once all of them went.
    fn send_as_eager(&mut self, index: SendKey) {
        let op = &mut self.sends[index];
        op.geometry.protocol = Protocol::Eager;
        op.credit = Some(CreditClass::of(op.geometry.total_len));
        op.granted = op.frames;
        op.next_new = 0;
        op.collections = crate::collections::Collections::new(op.ack_unit, op.frames);
        op.resend_cursor = Default::default();
        op.wait_deadline_ns = None;
        op.wait_retries = 0;
        op.extra_frame = None;
        op.rsm_frame = None;
        op.taken_as_eager = true;
        self.sends.reset_timers(index);
    }

    /// MSG-ACK: the receiver holds the message (or consumed it as truncated). Complete, free,
    /// and tell the receiver with CLEANUP.
    pub(crate) fn on_msg_ack(&mut self, header: &FrameHeader) {
        let cleanup = Control {
            dst: header.src,
            kind: FrameKind::Cleanup,
            flags: 0,
            msg_id: header.msg_id,
            frame_index: 0,
        };
        match self.active_send(header.src, header.msg_id) {
            Some(index) if !self.sends[index].is_eager() => {
                self.queue_control(cleanup);
                self.finish_send(index, Ok(()));
            }
            Some(_) => self.count_drop(Some(header.src), DropReason::Invalid),
            None => {
                let window = &self.peers[header.src].send_window;
                if window.place(header.msg_id) == crate::window::IdPlace::Finished {
                    self.queue_control(cleanup);
                }
                self.count_drop(Some(header.src), DropReason::Duplicate);
            }
        }
    }

    /// Retransmits timed-out collections, repeats RTS/RSM/END/CANCEL whose answer is overdue.
    /// Retransmissions go on, backed off up to `rto_max_ns`, until the peer answers or the
    /// liveness rule declares it unreachable (`liveness.rs`).
    pub(crate) fn expire_sends(&mut self, now: Nanos) {
        // A buffer kept between timers: the timer path allocates only when more sends are due
        // at once than ever before.
        let mut due = std::mem::take(&mut self.due_sends);
        self.sends.take_due(now, &mut due);
        for &index in &due {
            if self.sends.deadline(index).is_none_or(|d| d > now) {
                continue;
            }
            if self.sends.get(index).is_some_and(|op| op.cancel.is_some()) {
                self.repeat_cancel(now, index);
                continue;
            }
            let max_ns = self.config.rto_max_ns;
            let op = &mut self.sends[index];
            let dst = op.dst;
            // A kept message's safety repeat: the next pause is twice as long (`on_wait`).
            if let Some(repeats) = op.kept_repeats.as_mut() {
                *repeats = (*repeats + 1).min(KEPT_REPEAT_DOUBLINGS);
            }
            // A send told WAIT repeats its RTS as a question, on schedule: neither that nor
            // the loss of one says the path is slower. Counted, a receiver holding hundreds
            // of messages kept its peer's timeout at `rto_max_ns`, and every frame lost
            // meanwhile, of any message, cost that long.
            if !self.sends[index].wait_answered {
                self.peers[dst].rto.on_timeout(now, max_ns);
            }
            let rto = self.peers[dst].rto;
            let (op, timers) = self.sends.with_timers(index);
            op.collections.expire(timers, now);
            if op.wait_deadline_ns.is_some_and(|d| d <= now) {
                op.wait_retries += 1;
                op.wait_deadline_ns = Some(now + rto.backed_off_ns(op.wait_retries, max_ns));
                match op.phase {
                    SendPhase::Ending => {
                        let control = end_frame(op);
                        self.queue_control(control);
                    }
                    // Not when the collection timer just marked the frame for resending:
                    // a kept message's repeat armed both to the same pause, and sent its
                    // RTS twice.
                    _ => {
                        let repeat = self.repeat_frame(index);
                        let op = &mut self.sends[index];
                        op.extra_frame =
                            repeat.filter(|&frame| !op.collections.resends_frame(frame));
                    }
                }
            }
            self.sends.mark_ready(index);
        }
        self.due_sends = due;
    }

    /// The frame to repeat when a CTS is overdue: the RTS before any CTS, else the RSM frame
    /// of the last window (the receiver answers a repeated RSM with its current grant).
    fn repeat_frame(&self, index: SendKey) -> Option<u32> {
        let op = self.sends.get(index)?;
        if !op.peer_matched {
            return Some(0);
        }
        op.rsm_frame.or(Some(op.granted - 1))
    }

    /// Arms the CTS wait once every granted frame is out and more are needed. `now` is where
    /// the frame's timers start (`Departure::timer_start`), so frames queued before it count.
    pub(crate) fn after_frame_sent(&mut self, now: Nanos, index: SendKey) {
        let op = &mut self.sends[index];
        let waiting_for_grant =
            !op.is_eager() && op.next_new >= op.granted && op.granted < op.frames;
        if waiting_for_grant && op.wait_deadline_ns.is_none() {
            let rto = self.peers[op.dst].rto;
            op.wait_deadline_ns =
                Some(now + rto.backed_off_ns(op.wait_retries, self.config.rto_max_ns));
        }
    }
}

fn end_frame(op: &SendOp) -> Control {
    Control {
        dst: op.dst,
        kind: FrameKind::End,
        flags: 0,
        msg_id: op.msg_id,
        frame_index: op.frames,
    }
}

/// What a send's completion reports.
fn send_status(op: &SendOp) -> Status {
    Status {
        peer: op.dst,
        tag: op.tag,
        len: op.geometry.total_len,
        immediate: op.immediate,
    }
}

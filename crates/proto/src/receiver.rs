//! Receiving side: frame validation and dispatch, placement of EAGER/RTS/DATA payload at its
//! offset, collection ACKs, duplicate detection, CTS grants with RSM pipelining, END/MSG-ACK/
//! CLEANUP, and eager credits.

use crate::credits::CreditClass;
use crate::geometry::Geometry;
use crate::ops::{Control, Dest, Incoming, LatestData, RxPhase};
use crate::state::Core;
use crate::window::IdPlace;
use crate::*;
use nicmsg_wire::{Flags, Frame, FrameHeader, FrameKind, MsgHeader, Protocol, WireError};

impl Core {
    pub(crate) fn receive_frame(
        &mut self,
        now: Nanos,
        from: Option<std::net::SocketAddr>,
        bytes: &[u8],
        memory: &mut impl HostMemory,
    ) {
        self.counters.record_total(|s| {
            s.frames_received += 1;
            s.bytes_received += bytes.len() as u64;
        });
        let frame = match Frame::parse(bytes) {
            Ok(frame) => frame,
            Err(WireError::BadChecksum { .. }) => {
                return self.count_drop(None, DropReason::BadChecksum)
            }
            Err(_) => return self.count_drop(None, DropReason::Malformed),
        };
        if !self.payload_check_trusted(&frame.header) {
            return self.count_drop(None, DropReason::BadChecksum);
        }
        let mut header = frame.header;
        if header.job != self.job {
            return self.count_drop(None, DropReason::WrongJob);
        }
        let Some(peer) = self.frame_source(now, &header, from, memory) else {
            return;
        };
        // From here on the header speaks in ranks (in open mode it named conversations).
        header.src = peer;
        header.dst = self.rank;
        self.counters.record_peer(peer, |s| {
            s.frames_received += 1;
            s.bytes_received += bytes.len() as u64;
        });
        if header.kind.is_reserved() {
            return self.count_drop(Some(peer), DropReason::Unsupported);
        }
        if self.peers[peer].unreachable {
            // It carries on as if this rank still took its frames: tell it again (a RESET
            // itself is not answered, so two ranks that gave up on each other fall silent).
            if header.kind != FrameKind::Reset {
                self.send_reset(peer);
            }
            return self.count_drop(Some(peer), DropReason::DeadPeer);
        }
        self.peers.heard_from(now, peer);
        self.take_in_credits_and_ack(now, &header);
        match header.kind {
            FrameKind::Eager | FrameKind::Rts | FrameKind::Data => {
                let payload = Payload::Bytes(frame.payload);
                self.on_data_frame(now, &header, frame.msg.as_ref(), payload, memory)
            }
            FrameKind::Ack => self.on_ack(now, &header),
            FrameKind::Cts => self.on_cts(now, &header),
            FrameKind::MsgAck => self.on_msg_ack(&header),
            FrameKind::End => self.on_end(now, &header),
            FrameKind::Cleanup => self.on_cleanup(&header),
            FrameKind::Credit => {
                if header.has_flag(Flags::REQUEST) {
                    self.on_credit_request(peer);
                }
                if header.has_flag(Flags::WAIT) {
                    self.on_credits_held(peer);
                }
            }
            FrameKind::Cancel => self.on_cancel(now, &header, memory),
            FrameKind::CancelAck => self.on_cancel_ack(now, &header),
            FrameKind::Reset => self.on_reset(now, peer, memory),
            _ => self.count_drop(Some(peer), DropReason::Unsupported),
        }
        // Credits and message ids towards a peer are only freed by its own frames, so only its
        // queue can have become startable.
        self.start_queued_for(now, peer);
    }

    /// False for a frame whose checksum leaves its payload to the link when this endpoint's
    /// link checks nothing: its payload is unverified, so it is dropped as if corrupt.
    pub(crate) fn payload_check_trusted(&self, header: &FrameHeader) -> bool {
        self.config.link_checks_payload || !header.has_flag(Flags::LINK_CHECKED)
    }

    /// An EAGER, RTS or DATA frame, its payload in hand or already where it belongs (a
    /// predicted frame the transport placed: `placement.rs`, `first_frame.rs`).
    pub(crate) fn on_data_frame(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        msg: Option<&MsgHeader>,
        payload: Payload<'_>,
        memory: &mut impl HostMemory,
    ) {
        let peer = header.src;
        match self.peers[peer].recv_window.place(header.msg_id) {
            IdPlace::Finished => return self.reacknowledge_finished(header),
            IdPlace::Beyond => return self.count_drop(Some(peer), DropReason::Invalid),
            IdPlace::Open => {}
        }
        if let Payload::Bytes(bytes) = payload {
            if self.deliver_express(now, header, msg, bytes, memory) {
                return;
            }
        }
        let index = match self.rx.incoming_by_id(peer, header.msg_id) {
            Some(index) => index,
            None => match msg {
                Some(msg) => match self.admit_message(now, header, msg, payload.len(), memory) {
                    Some(index) => index,
                    None => return,
                },
                None => return self.count_drop(Some(peer), DropReason::Invalid),
            },
        };
        self.place_frame(now, index, header, msg, payload, memory);
    }

    /// A frame of a message this rank already finished: acknowledge everything again so the
    /// sender stops retransmitting (its earlier ACK was lost), deliver nothing.
    fn reacknowledge_finished(&mut self, header: &FrameHeader) {
        self.count_drop(Some(header.src), DropReason::Duplicate);
        self.queue_ack_all(header.src, header.msg_id);
    }

    /// First frame of a message not seen before: create its state and match it in MPI order.
    /// Returns `None` (having answered WAIT) when the message cannot be taken now.
    fn admit_message(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        msg: &MsgHeader,
        len: u64,
        memory: &mut impl HostMemory,
    ) -> Option<IncomingKey> {
        let peer = header.src;
        let Some(geometry) = self.admissible(header, msg, len) else {
            self.count_drop(Some(peer), DropReason::Invalid);
            return None;
        };
        let key = (Context(msg.context), msg.tag);
        let mut entry = Incoming::new(peer, header.msg_id, key, geometry, msg.ack_unit);
        entry.immediate = msg.immediate;
        entry.unwaited = header.has_flag(Flags::UNWAITED);
        // A message held behind an earlier one of its sender (not its next to match) leaves
        // one entry free, for a message that can be matched at once. Held messages that filled
        // the table left no room for the one they wait for, whose every retransmission was
        // then answered WAIT: nothing behind it was ever matched, between live ranks. Refused,
        // a held message is sent again later.
        let held = header.msg_id != self.peers[peer].next_match;
        let Some(index) = self.insert_remote(entry, usize::from(held)) else {
            self.answer_wait(header, false);
            return None;
        };
        self.rx.index_incoming(peer, header.msg_id, index);
        self.peers[peer].note_arrival(header.msg_id);
        self.match_in_order(now, peer, memory);
        let entry = &self.rx[index];
        // In `buffer` mode an eager message that cannot be matched at once takes one of the
        // peer's buffers; credits guarantee one unless the sender spent a credit the receiver
        // never freed (a count taken from a frame stale by a whole wrap, a broken or hostile
        // peer). Without one its header stays, as in `drop` mode: its data is discarded, its
        // sender told to WAIT and asked to resend once a receive matches it. Refusing the
        // header instead would leave the sender retrying for ever whenever the receiver waits
        // for a later message while its buffers are held.
        let buffering = self.config.unexpected == UnexpectedPolicy::Buffer;
        if buffering && entry.is_eager() && entry.dest == Dest::Nowhere {
            self.rx.assign_eager_buffer(index, &mut self.peers);
        }
        Some(index)
    }

    /// The cut of a message whose header `admit_message` takes, from the frame that brings
    /// it (`len` payload bytes): its frames fit the frame counters, its acknowledgement unit
    /// the receiver's bitmap, an eager message the eager limit, and the frame lies where the
    /// header puts it. `None` for a header dropped as invalid. The express path and the
    /// prediction of first frames ask the same. Without the last check, an EAGER frame carrying
    /// less than the message it claims was dropped by `place_frame`, but its message stayed,
    /// matched a receive and held it until the peer was given up on (tests/hostile.rs,
    /// a_first_frame_that_disagrees_with_its_header_leaves_no_message).
    pub(crate) fn admissible(
        &self,
        header: &FrameHeader,
        msg: &MsgHeader,
        len: u64,
    ) -> Option<Geometry> {
        let geometry = Geometry::of(msg);
        let valid = u32::try_from(geometry.frames()).is_ok()
            && msg.ack_unit <= MAX_ACK_UNIT
            && (msg.protocol != Protocol::Eager || msg.total_len <= self.config.eager_limit)
            && geometry.agrees(header.frame_index, header.offset, len);
        valid.then_some(geometry)
    }

    /// Tells the sender of a frame that could not be taken to WAIT; with KEPT when this rank
    /// keeps the message's header and will ask for its data itself (`kept`), so the sender
    /// need not keep asking.
    pub(crate) fn answer_wait(&mut self, header: &FrameHeader, kept: bool) {
        self.count_drop(Some(header.src), DropReason::NoPostedReceive);
        let flags = if kept {
            Flags::WAIT | Flags::KEPT
        } else {
            Flags::WAIT
        };
        let wait = control(
            header.src,
            FrameKind::Ack,
            flags,
            header.msg_id,
            header.frame_index,
        );
        self.queue_control(wait);
    }

    pub(crate) fn place_frame(
        &mut self,
        now: Nanos,
        index: IncomingKey,
        header: &FrameHeader,
        msg: Option<&MsgHeader>,
        payload: Payload<'_>,
        memory: &mut impl HostMemory,
    ) {
        let peer = header.src;
        let entry = &self.rx[index];
        if entry.taken_as_eager && header.kind != FrameKind::Eager {
            return self.answer_stale_rendezvous(index, header);
        }
        let consistent = msg.is_none_or(|m| {
            m.tag == entry.tag
                && Context(m.context) == entry.context
                && m.total_len == entry.geometry.total_len
                && m.protocol == entry.geometry.protocol
        }) && entry.geometry.agrees(
            header.frame_index,
            header.offset,
            payload.len(),
        ) && (header.kind == FrameKind::Eager) == entry.is_eager();
        if !consistent || !entry.can_track(header.frame_index) {
            return self.count_drop(Some(peer), DropReason::Invalid);
        }
        let frame = header.frame_index;
        if entry.has_frame(frame) || entry.phase != RxPhase::Receiving {
            self.count_drop(Some(peer), DropReason::Duplicate);
            self.answer_duplicate(index, header);
            return;
        }
        if !self.store_payload(index, header.offset, payload, memory) {
            // Header kept, no receive yet: the data is resent once one is posted.
            self.rx[index].discarded = true;
            self.answer_wait(header, true);
            return;
        }
        let entry = &mut self.rx[index];
        entry.mark_frame(frame);
        let latest = LatestData {
            index,
            peer,
            msg_id: header.msg_id,
            frame,
        };
        if !entry.is_eager() {
            self.rx.set_latest_data(latest);
        } else if matches!(entry.dest, Dest::Recv(_)) && !entry.all_frames() {
            // Its other frames can land straight in the receive (`placement.rs`).
            self.rx.set_latest_eager(Some(latest));
        } else if self.rx.latest_eager().is_some_and(|l| l.index == index) {
            self.rx.set_latest_eager(None);
        }
        // The grant before the collection's acknowledgement: with room for one control frame
        // only, the grant is the one kept (`answer_duplicate`).
        if header.has_flag(Flags::RSM) {
            self.on_rsm(index, header.aux);
        } else {
            self.extend_grant(index);
        }
        let entry = &mut self.rx[index];
        // The frame that completes the message is answered by the ACK_ALL alone.
        if entry.collection_complete(frame) && !entry.all_frames() {
            let ack = control(peer, FrameKind::Ack, 0, header.msg_id, frame);
            self.queue_control(ack);
        }
        if self.rx[index].all_frames() {
            self.on_data_complete(now, index, memory);
        }
    }

    /// An RTS or DATA frame of a message taken as eager (`handover.rs`), sent before its
    /// sender heard so: a repeated RTS says the request to send it again was lost, and is
    /// answered with the request.
    fn answer_stale_rendezvous(&mut self, index: IncomingKey, header: &FrameHeader) {
        self.count_drop(Some(header.src), DropReason::Duplicate);
        if header.kind == FrameKind::Rts && self.rx[index].phase == RxPhase::Receiving {
            self.ask_to_resume(index);
        }
    }

    /// Writes payload where the message's bytes go. Returns false if the frame was not kept.
    fn store_payload(
        &mut self,
        index: IncomingKey,
        offset: u64,
        payload: Payload<'_>,
        memory: &mut impl HostMemory,
    ) -> bool {
        let entry = &self.rx[index];
        let peer = entry.peer;
        match (entry.dest, payload) {
            (Dest::Nowhere, _) => false,
            (Dest::Discard, _) => true,
            (Dest::Recv(recv), Payload::Bytes(bytes)) => {
                let buffer = &self.rx[recv].buffer;
                buffer.write_at(memory, offset, bytes);
                self.counters
                    .record(peer, |s| s.bytes_placed += bytes.len() as u64);
                true
            }
            (Dest::Recv(_), Payload::InPlace { len }) => {
                self.counters.record(peer, |s| s.bytes_placed_direct += len);
                true
            }
            (Dest::Buffer(slot), Payload::Bytes(bytes)) => {
                self.rx.write_eager(slot, offset, bytes);
                true
            }
            // Placed frames are only predicted for messages going straight to a receive.
            (Dest::Buffer(_), Payload::InPlace { .. }) => false,
        }
    }

    /// A repeated frame: re-acknowledge its collection if complete; a repeated RTS or RSM asks
    /// for the current grant again (its CTS was lost).
    ///
    /// The grant is queued before the acknowledgement. A full control queue drops the frames
    /// queued last, and the repeat that asks for a lost grant provokes the same pair in the
    /// same order each time: were the acknowledgement first, a queue with room for one frame
    /// dropped the grant at every repeat, and the message never went on (found by the
    /// `endpoint_frames` fuzz target, with `max_control_queue` 1). A lost acknowledgement is
    /// made up for by a later one, or the ACK_ALL of the whole message.
    fn answer_duplicate(&mut self, index: IncomingKey, header: &FrameHeader) {
        let entry = &self.rx[index];
        let peer = header.src;
        if entry.phase == RxPhase::MsgAcked {
            let flags = if entry.truncated { Flags::TRUNCATED } else { 0 };
            self.queue_control(control(peer, FrameKind::MsgAck, flags, header.msg_id, 0));
            return;
        }
        if header.kind == FrameKind::Rts || header.has_flag(Flags::RSM) {
            if header.has_flag(Flags::RSM) {
                self.on_rsm(index, header.aux);
            }
            self.send_grant(index);
        }
        let entry = &self.rx[index];
        if entry.all_frames() {
            self.queue_ack_all(peer, header.msg_id);
        } else if entry.collection_complete(header.frame_index) {
            self.queue_control(control(
                peer,
                FrameKind::Ack,
                0,
                header.msg_id,
                header.frame_index,
            ));
        }
    }

    /// RSM seen: grant the window after the one it closes (RMPP), bounded by what the receiver
    /// can track.
    fn on_rsm(&mut self, index: IncomingKey, window_end: u32) {
        let window = self.config.cts_window_frames;
        let entry = &mut self.rx[index];
        let target = window_end.saturating_add(window).min(entry.frames);
        entry.grant_target = entry.grant_target.max(target);
        if !self.extend_grant(index) {
            self.send_grant(index);
        }
    }

    /// Raises the grant towards its target as far as tracking allows; sends a CTS if it grew.
    fn extend_grant(&mut self, index: IncomingKey) -> bool {
        let entry = &mut self.rx[index];
        if !entry.matched || entry.grant_deferred || entry.dest == Dest::Discard || entry.is_eager()
        {
            return false;
        }
        let trackable = entry.contiguous.saturating_add(RX_TRACKED_FRAMES);
        let grant = entry.grant_target.min(trackable);
        if grant <= entry.granted {
            return false;
        }
        entry.granted = grant;
        self.send_grant(index);
        true
    }

    /// Sends the current cumulative grant (idempotent: duplicates are harmless).
    pub(crate) fn send_grant(&mut self, index: IncomingKey) {
        let entry = &self.rx[index];
        if entry.is_eager() || entry.phase != RxPhase::Receiving {
            return;
        }
        // Matched but deferred: to its sender as if kept, unmatched (`defer_first_grant`).
        if !entry.matched || entry.grant_deferred {
            let flags = Flags::WAIT | Flags::KEPT;
            let wait = control(entry.peer, FrameKind::Ack, flags, entry.msg_id, 0);
            self.queue_control(wait);
            return;
        }
        let flags = if entry.has_frame(0) {
            0
        } else {
            Flags::FROM_START
        };
        let cts = control(
            entry.peer,
            FrameKind::Cts,
            flags,
            entry.msg_id,
            entry.granted,
        );
        self.queue_control(cts);
    }

    /// Called when a receive is bound to a rendezvous message: grant the first window, or
    /// defer it while the grants in flight fill the budget (`defer_first_grant`).
    pub(crate) fn grant_first_window(&mut self, now: Nanos, index: IncomingKey) {
        let window = self.config.cts_window_frames;
        let entry = &mut self.rx[index];
        // An RTS neither kept nor discarded is the one being admitted: it is placed right
        // after matching, and `place_frame` then sends this grant. Granting now would ask for
        // the RTS again (FROM_START) although its data is about to be kept: one needless
        // frame and a repeated first window for every rendezvous message that finds its
        // receive posted.
        let rts_arriving = !entry.has_frame(0) && !entry.discarded;
        let first = u32::from(entry.has_frame(0) || rts_arriving);
        entry.grant_target = first
            .saturating_add(window)
            .min(entry.frames)
            .max(entry.granted);
        entry.granted = 0;
        entry.grant_deferred = false;
        if self.grant_budget_full(index) {
            self.defer_first_grant(now, index);
            return;
        }
        if rts_arriving {
            return;
        }
        if !self.extend_grant(index) {
            self.send_grant(index);
        }
    }

    /// Bytes granted and not yet arrived, over the rendezvous messages bound to receives.
    /// Counted from each message's first missing frame, so frames that came out of order count
    /// until the gap before them fills: never less than what is on its way.
    fn granted_in_flight(&self) -> u64 {
        let mut bytes = 0u64;
        for &index in self.rx.bound_incoming() {
            let Some(entry) = self.rx.incoming(index) else {
                continue;
            };
            if entry.is_eager() || entry.grant_deferred || entry.phase != RxPhase::Receiving {
                continue;
            }
            let geometry = &entry.geometry;
            bytes += geometry
                .bytes_before(entry.granted)
                .saturating_sub(geometry.bytes_before(entry.contiguous));
        }
        bytes
    }

    /// Whether granting `index`'s first window now would pass the budget: only while other
    /// grants are in flight (one message alone is always granted, or nothing would move).
    fn grant_budget_full(&self, index: IncomingKey) -> bool {
        let budget = self.config.grant_budget_bytes;
        if budget == 0 {
            return false;
        }
        let in_flight = self.granted_in_flight();
        if in_flight == 0 {
            return false;
        }
        let entry = &self.rx[index];
        let wanted = entry.geometry.bytes_before(entry.grant_target);
        in_flight.saturating_add(wanted) > budget
    }

    /// Defers `index`'s first grant: its sender is told WAIT, KEPT (it waits on this rank's
    /// liveness, and frames it sent before the CTS are kept if they come), and the grant
    /// leaves once the grants in flight leave room (`grant_deferred_if_room`), looked at when
    /// a message's data completes and on this deadline.
    fn defer_first_grant(&mut self, now: Nanos, index: IncomingKey) {
        let peer = self.rx[index].peer;
        self.counters.record(peer, |s| s.grants_deferred += 1);
        self.rx.defer_grant(index);
        self.rx[index].deadline_ns = Some(now + self.peers[peer].rto.rto_ns());
        self.send_grant(index);
    }

    /// Sends the deferred first grants, oldest first, while the budget has room for them.
    pub(crate) fn grant_deferred_if_room(&mut self, now: Nanos) {
        while let Some(index) = self.rx.oldest_deferred_grant() {
            if self.grant_budget_full(index) {
                return;
            }
            self.rx.take_deferred_grant(index);
            // Its sender waits (WAIT, KEPT): ask it to go on, again on the RTO until a frame
            // comes, as for a kept message matched late.
            self.expect_resumption(now, index);
            if !self.extend_grant(index) {
                self.send_grant(index);
            }
        }
    }

    fn on_data_complete(&mut self, now: Nanos, index: IncomingKey, memory: &mut impl HostMemory) {
        self.rx.unlist_bound(index);
        let entry = &mut self.rx[index];
        entry.phase = RxPhase::DataComplete;
        // A request to resume (`expect_resumption`) has nothing more to ask for.
        entry.deadline_ns = None;
        let (peer, msg_id, eager) = (entry.peer, entry.msg_id, entry.is_eager());
        let sender_waits = !entry.unwaited;
        if eager {
            self.acknowledge_eager(now, peer, msg_id, sender_waits);
        } else {
            self.queue_ack_all(peer, msg_id);
        }
        self.set_waiter(index, false);
        // Finished for duplicate detection now; END and CLEANUP find the entry by its index.
        self.peers[peer].recv_window.finish(msg_id);
        if eager {
            let entry = &self.rx[index];
            if entry.matched {
                self.deliver_eager(now, index, memory);
            }
            return;
        }
        if let Dest::Recv(recv) = self.rx[index].dest {
            self.finish_recv_ok(recv, index);
        }
        let rto = self.config.keepalive_ns;
        let entry = &mut self.rx[index];
        entry.deadline_ns = Some(now + rto);
        entry.retries = 0;
        // Its grant is no longer in flight: a deferred one may go.
        self.grant_deferred_if_room(now);
    }

    /// END: every frame was acknowledged; answer MSG-ACK and wait for CLEANUP.
    fn on_end(&mut self, now: Nanos, header: &FrameHeader) {
        let peer = header.src;
        let msg_ack = control(peer, FrameKind::MsgAck, 0, header.msg_id, 0);
        let Some(index) = self.rx.incoming_by_id(peer, header.msg_id) else {
            if self.peers[peer].recv_window.place(header.msg_id) == IdPlace::Finished {
                self.queue_control(msg_ack);
            }
            return self.count_drop(Some(peer), DropReason::Duplicate);
        };
        let keepalive = self.config.keepalive_ns;
        let entry = &mut self.rx[index];
        if entry.phase == RxPhase::Receiving || entry.is_eager() {
            return self.count_drop(Some(peer), DropReason::Invalid);
        }
        let flags = if entry.truncated { Flags::TRUNCATED } else { 0 };
        entry.phase = RxPhase::MsgAcked;
        entry.deadline_ns = Some(now + keepalive);
        self.queue_control(Control { flags, ..msg_ack });
    }

    /// CLEANUP: the sender knows the message is delivered (or withdrawn); free the receiver's
    /// state.
    fn on_cleanup(&mut self, header: &FrameHeader) {
        let Some(index) = self.rx.incoming_by_id(header.src, header.msg_id) else {
            return self.count_drop(Some(header.src), DropReason::Duplicate);
        };
        let entry = &self.rx[index];
        if entry.phase == RxPhase::Cancelled {
            return self.free_incoming(index);
        }
        if entry.is_eager() || entry.phase == RxPhase::Receiving {
            return self.count_drop(Some(header.src), DropReason::Invalid);
        }
        self.free_incoming(index);
    }

    /// Rendezvous messages (and withdrawn ones) whose CLEANUP is overdue: repeat MSG-ACK (or
    /// CANCEL-ACK) a bounded number of times, then free the state anyway (the data was
    /// delivered or withdrawn; only the sender's bookkeeping is unconfirmed).
    pub(crate) fn expire_incoming(&mut self, now: Nanos) {
        let mut due_incoming = std::mem::take(&mut self.due_incoming);
        self.rx.take_due(now, &mut due_incoming);
        for &index in &due_incoming {
            let due = self.rx.incoming(index).and_then(|e| e.deadline_ns);
            if due.is_none_or(|d| d > now) {
                continue;
            }
            if self.rx[index].grant_deferred {
                // Looked at again a round trip later, and the grants tried (below).
                let rto = self.peers[self.rx[index].peer].rto.rto_ns();
                self.rx[index].deadline_ns = Some(now + rto);
                continue;
            }
            if self.rx[index].phase == RxPhase::Receiving {
                self.repeat_resume_request(now, index);
                continue;
            }
            let max_retries = self.config.max_retries;
            let keepalive = self.config.keepalive_ns;
            let entry = &mut self.rx[index];
            entry.retries += 1;
            let (peer, msg_id, truncated) = (entry.peer, entry.msg_id, entry.truncated);
            if entry.retries > max_retries {
                self.free_incoming(index);
                continue;
            }
            entry.deadline_ns = Some(now + keepalive);
            let repeat = match entry.phase {
                RxPhase::Cancelled => {
                    control(peer, FrameKind::CancelAck, Flags::CANCELLED, msg_id, 0)
                }
                _ => {
                    let flags = if truncated { Flags::TRUNCATED } else { 0 };
                    control(peer, FrameKind::MsgAck, flags, msg_id, 0)
                }
            };
            self.queue_control(repeat);
        }
        self.due_incoming = due_incoming;
        self.grant_deferred_if_room(now);
    }

    /// Asks the sender of a message whose data was discarded (it was told to WAIT) to send it
    /// from the start: for an eager message a CTS with FROM_START, for a rendezvous message
    /// its grant (which says FROM_START while frame 0 is missing).
    pub(crate) fn ask_to_resume(&mut self, index: IncomingKey) {
        if !self.rx[index].is_eager() {
            return self.send_grant(index);
        }
        let cts = self.resume_request(index);
        self.queue_control(cts);
    }

    /// A sender told to WAIT tries again only after `rto_max_ns`; once a receive matched its
    /// message the receiver has asked it to resume, and repeats the request on the peer's RTO
    /// while nothing comes (`repeat_resume_request`), so a lost request costs a timeout, not
    /// `rto_max_ns`.
    pub(crate) fn expect_resumption(&mut self, now: Nanos, index: IncomingKey) {
        let rto = self.peers[self.rx[index].peer].rto.rto_ns();
        let entry = &mut self.rx[index];
        entry.deadline_ns = Some(now + rto);
        entry.retries = 0;
    }

    /// A request to resume (`expect_resumption`) brought nothing in an RTO: ask again,
    /// backing off, at most `max_retries` times; then leave it to the sender's own timeout.
    /// Once a frame came the sender is sending, and its retransmissions recover the rest.
    fn repeat_resume_request(&mut self, now: Nanos, index: IncomingKey) {
        let max_retries = self.config.max_retries;
        let max_ns = self.config.rto_max_ns;
        let entry = &self.rx[index];
        let waiting = entry.contiguous == 0 && !entry.has_frame(0);
        let retries = entry.retries + 1;
        let backoff = self.peers[entry.peer].rto.backed_off_ns(retries, max_ns);
        let entry = &mut self.rx[index];
        if !waiting || retries > max_retries {
            entry.deadline_ns = None;
            return;
        }
        entry.retries = retries;
        entry.deadline_ns = Some(now + backoff);
        self.ask_to_resume(index);
    }

    /// Forgets an incoming message (its buffer too) without completing anything.
    pub(crate) fn free_incoming(&mut self, index: IncomingKey) {
        self.set_waiter(index, false);
        let Some(entry) = self.rx.remove_incoming(index) else {
            return;
        };
        if let Dest::Buffer(slot) = entry.dest {
            self.rx.release_eager_buffer(slot, &mut self.peers);
        }
    }

    /// Returns one credit of `class` to the peer: the message left its buffer (or never needed
    /// one).
    pub(crate) fn return_credit(&mut self, now: Nanos, peer: Rank, class: CreditClass) {
        if self.config.unexpected != UnexpectedPolicy::Buffer {
            return;
        }
        if self.hand_over_buffer(now, peer, class) {
            return;
        }
        let state = &mut self.peers[peer];
        state.credits_given.add_one(class);
        // Credits are filled in when a frame leaves: a frame to the peer still waiting to leave
        // carries the new count; only otherwise is a CREDIT frame needed (see `piggyback.rs`).
        self.owe_credit(now, peer);
    }

    pub(crate) fn set_waiter(&mut self, index: IncomingKey, waiting: bool) {
        let Some(entry) = self.rx.incoming_mut(index) else {
            return;
        };
        if entry.waiter == waiting {
            return;
        }
        entry.waiter = waiting;
        let peer = entry.peer;
        if waiting {
            self.peers.add_waiter(peer);
        } else {
            self.peers.remove_waiter(peer);
        }
    }
}

/// A received frame's payload: bytes to copy, or bytes the transport already put at their final
/// place (a correctly guessed speculative placement).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Payload<'a> {
    Bytes(&'a [u8]),
    InPlace { len: u64 },
}

impl Payload<'_> {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Bytes(bytes) => bytes.len() as u64,
            Self::InPlace { len } => *len,
        }
    }
}

pub(crate) fn control(
    dst: Rank,
    kind: FrameKind,
    flags: u16,
    msg_id: u32,
    frame_index: u32,
) -> Control {
    Control {
        dst,
        kind,
        flags,
        msg_id,
        frame_index,
    }
}

//! The entries of the endpoint's tables: send operations, receive/probe operations, incoming
//! messages, and queued control frames.

use crate::collections::{Collections, ResendCursor};
use crate::config::RX_TRACKED_FRAMES;
use crate::credits::CreditClass;
use crate::geometry::Geometry;
use crate::memory::{HostMemory, SgList};
use crate::slab::{IncomingKey, RecvKey, SendKey};
use crate::transmit::INLINE_PAYLOAD_MAX;
use crate::{Context, Nanos, OpKind, Rank, Source, Tag, TagMatch};
use nicmsg_wire::FrameKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendPhase {
    /// Waiting in the peer's queue (credits or message-id window).
    Queued,
    /// Frames going out; waiting for grants and acknowledgements.
    Streaming,
    /// Every frame acknowledged, END sent, waiting for MSG-ACK (rendezvous only).
    Ending,
    /// A message to this rank itself, waiting for a matching receive (no network).
    Local,
}

#[derive(Debug, Clone)]
pub(crate) struct SendOp {
    pub dst: Rank,
    pub context: Context,
    pub tag: Tag,
    /// Delivered with the receiver's completion (`Status::immediate`).
    pub immediate: Option<u32>,
    pub data: SgList,
    pub geometry: Geometry,
    pub frames: u32,
    pub ack_unit: u8,
    pub phase: SendPhase,
    pub msg_id: u32,
    /// Next send in the peer's start queue.
    pub next_queued: Option<SendKey>,
    /// Frames the receiver allows (cumulative); all of them for eager.
    pub granted: u32,
    /// Next frame never sent.
    pub next_new: u32,
    pub collections: Collections,
    /// Frame carrying the RSM flag in the current window, and the window end it announces.
    pub rsm_frame: Option<u32>,
    pub rsm_window_end: u32,
    /// One frame to (re)send at once, outside collection order: RTS/RSM repeated to recover a
    /// lost CTS, or frame 0 after a CTS that asks to start over.
    pub extra_frame: Option<u32>,
    /// Deadline of the wait for a CTS, for MSG-ACK, or after a WAIT answer.
    pub wait_deadline_ns: Option<Nanos>,
    pub wait_retries: u32,
    /// Listed in the endpoint's ready queue.
    pub in_ready: bool,
    /// Position inside the collection being retransmitted.
    pub resend_cursor: ResendCursor,
    /// Frames sent in the current turn of the ready queue.
    pub turn_frames: u32,
    /// A short message's bytes were copied when it was posted (BIP's bounce buffer), into the
    /// endpoint's copy of this send (`SendSide::copy`): its frames carry them from
    /// there, so the send can complete as soon as it starts. The copy's length.
    pub copy: Option<u16>,
    /// A longer eager message's bytes were copied when it was posted into this piece of the
    /// send copies the host lent (`SendSide::lend_copies`); `data` now lists the copy, and
    /// the send completes as soon as it starts, as a short one does.
    pub lent_copy: Option<u8>,
    /// The send reported success when it started; its later end completes nothing.
    pub completed_early: bool,
    /// Nobody waits for the send's completion (`SendOptions::unwaited`): its frames say so.
    pub unwaited: bool,
    /// The message took one of the receiver's credits, of this class (withdrawing it gives it
    /// back).
    pub(crate) credit: Option<CreditClass>,
    /// The receiver has matched the message (a CTS came): too late to withdraw it.
    pub peer_matched: bool,
    /// The receiver answered WAIT: it had no receive for the message when it arrived.
    pub told_to_wait: bool,
    /// The receiver's last answer was WAIT: until another answer comes, the send's timers
    /// repeat its RTS as a question on schedule, and they back off no timeout.
    pub wait_answered: bool,
    /// The receiver keeps the message's header (WAIT with KEPT) and asks for its data itself:
    /// the send counts as one waiter on its peer (probed after silence, `liveness.rs`) and
    /// repeats its frame only as a safety net, after `rto_max_ns` doubled this many times
    /// (at most `KEPT_REPEAT_DOUBLINGS`).
    pub kept_repeats: Option<u32>,
    /// The host asked to cancel the started send; the receiver is asked to withdraw the
    /// message and no frame of it goes out until it answers (`cancel.rs`).
    pub cancel: Option<CancelRequest>,
    /// The receiver answered that a receive had matched the message: it completes normally.
    pub cancel_refused: bool,
    /// Sent by rendezvous, then again as eager into a buffer the receiver freed for it
    /// (`handover.rs`): the receiver holds it and tells it to WAIT no more.
    pub taken_as_eager: bool,
}

/// A CANCEL sent to the receiver and not answered yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CancelRequest {
    /// When the CANCEL is repeated if no CANCEL-ACK came.
    pub deadline_ns: Nanos,
    pub retries: u32,
}

/// Where the core keeps a short message's bytes.
pub(crate) type ShortCopy = [u8; INLINE_PAYLOAD_MAX];

/// Whether an eager message of `len` bytes is sent from the core's short copy, its send
/// complete at once (room for it allowing): what a frame carries inline. Its credit class
/// follows (`CreditClass::of`); whether its sender waits for the acknowledgement the frame
/// says itself (`Flags::UNWAITED`).
pub(crate) fn sent_from_copy(len: u64) -> bool {
    len <= INLINE_PAYLOAD_MAX as u64
}

/// Copies `data` out of host memory into `copy`; its length, or `None` if it is longer than a
/// frame carries inline or its memory cannot be read.
pub(crate) fn copy_short(
    data: &SgList,
    memory: &impl HostMemory,
    copy: &mut ShortCopy,
) -> Option<u16> {
    if !sent_from_copy(data.total_len()) {
        return None;
    }
    let len = data.total_len() as usize;
    data.read_into(memory, &mut copy[..len])
        .then_some(len as u16)
}

impl SendOp {
    pub fn new(
        dst: Rank,
        (context, tag): (Context, Tag),
        data: &SgList,
        geometry: Geometry,
        frames: u32,
        ack_unit: u8,
        phase: SendPhase,
    ) -> Self {
        Self {
            dst,
            context,
            tag,
            immediate: None,
            data: *data,
            geometry,
            frames,
            ack_unit,
            phase,
            msg_id: 0,
            next_queued: None,
            granted: 0,
            next_new: 0,
            collections: Collections::new(ack_unit, frames),
            rsm_frame: None,
            rsm_window_end: 0,
            extra_frame: None,
            wait_deadline_ns: None,
            wait_retries: 0,
            in_ready: false,
            resend_cursor: ResendCursor::default(),
            turn_frames: 0,
            copy: None,
            lent_copy: None,
            completed_early: false,
            unwaited: false,
            credit: None,
            peer_matched: false,
            told_to_wait: false,
            wait_answered: false,
            kept_repeats: None,
            cancel: None,
            cancel_refused: false,
            taken_as_eager: false,
        }
    }

    pub fn is_eager(&self) -> bool {
        self.geometry.protocol == nicmsg_wire::Protocol::Eager
    }

    /// A frame can go out now.
    pub fn has_frame_to_send(&self) -> bool {
        self.phase == SendPhase::Streaming
            && self.cancel.is_none()
            && (self.extra_frame.is_some()
                || self.collections.has_resend()
                || self.resend_cursor.busy()
                || self.next_new < self.granted.min(self.collections.window_end_frame()))
    }

    /// Bytes on the wire of collection `c`'s frames (headers included).
    pub fn collection_bytes(&self, c: u32) -> u64 {
        self.collections
            .frames_of(c)
            .map(|frame| {
                let headers = nicmsg_wire::headers_len(self.kind_of(frame)) as u64;
                self.geometry.len(frame) + headers
            })
            .sum()
    }

    /// Frame kind of frame `frame` as it goes out now: frame 0 of a rendezvous message is its
    /// RTS (with the message header) until a CTS says the receiver matched it, also when
    /// frames after it went before the CTS (`Config::presumed_grant_bytes`).
    pub fn kind_of(&self, frame: u32) -> FrameKind {
        if self.is_eager() {
            FrameKind::Eager
        } else if frame == 0 && !self.peer_matched {
            FrameKind::Rts
        } else {
            FrameKind::Data
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvState {
    /// In the posted queue (or the probe list), not matched.
    Posted,
    /// Matched to an incoming message still arriving.
    Bound(IncomingKey),
}

#[derive(Debug, Clone)]
pub(crate) struct RecvOp {
    pub kind: OpKind,
    pub source: Source,
    pub context: Context,
    pub tag: TagMatch,
    pub buffer: SgList,
    pub state: RecvState,
}

impl RecvOp {
    /// True if a message from `peer` in `context` with `tag` matches this receive or probe.
    pub fn accepts(&self, peer: Rank, context: Context, tag: Tag) -> bool {
        self.context == context && self.source.matches(peer) && self.tag.matches(tag)
    }
}

/// Where the bytes of an incoming message go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    /// Not matched yet and nowhere to keep data (rendezvous header, or `drop` policy).
    Nowhere,
    /// An unexpected-message buffer of the eager pool.
    Buffer(u32),
    /// Straight into a posted receive (zero copy).
    Recv(RecvKey),
    /// Matched by a receive that is too short: bytes are acknowledged and discarded.
    Discard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxPhase {
    Receiving,
    /// All bytes present. Eager: waits to be matched (if unexpected). Rendezvous: waits for END.
    DataComplete,
    /// MSG-ACK sent, waiting for CLEANUP (rendezvous only).
    MsgAcked,
    /// Withdrawn by its sender before any receive matched it (`cancel.rs`): never matched,
    /// kept so a repeated CANCEL gets the same answer, until CLEANUP.
    Cancelled,
}

const BITMAP_WORDS: usize = (RX_TRACKED_FRAMES / 64) as usize;

#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    pub peer: Rank,
    pub msg_id: u32,
    pub context: Context,
    pub tag: Tag,
    /// The sender's immediate data, reported with the receive's completion.
    pub immediate: Option<u32>,
    /// An eager message whose send completed from the sender's copy (flag `UNWAITED`): its
    /// acknowledgement may wait for a carrier (`piggyback.rs`).
    pub unwaited: bool,
    pub geometry: Geometry,
    pub frames: u32,
    pub ack_unit: u32,
    /// Every frame below this index has arrived.
    pub contiguous: u32,
    /// Bit i: frame `contiguous + i` has arrived.
    bitmap: [u64; BITMAP_WORDS],
    pub dest: Dest,
    /// The receive matched to it, if any.
    pub recv: Option<RecvKey>,
    /// A message from this rank to itself: the send holding its bytes.
    pub local_send: Option<SendKey>,
    /// Matched by a receive (so in MPI order, the next message of the peer may be matched).
    pub matched: bool,
    pub in_unexpected: bool,
    /// Taken off the unexpected queue by a claim (`claim.rs`): matched for MPI, not yet for
    /// the protocol; only a receive naming the claim takes it.
    pub claimed: bool,
    pub truncated: bool,
    /// Some frame was discarded for want of a receive (`drop` mode, or a rendezvous RTS).
    pub discarded: bool,
    /// Sent by rendezvous, kept without a receive, then taken as eager into a buffer freed
    /// for it (`handover.rs`): it holds a credit its sender does not know came back.
    pub taken_as_eager: bool,
    /// Frames granted to the sender so far (rendezvous).
    pub granted: u32,
    /// Matched, but its first grant waits until the receiver's grants in flight leave room
    /// (`Config::grant_budget_bytes`); meanwhile its sender is told WAIT, KEPT.
    pub grant_deferred: bool,
    /// Frames the receiver would grant if its tracking window allowed.
    pub grant_target: u32,
    pub phase: RxPhase,
    pub deadline_ns: Option<Nanos>,
    pub retries: u32,
    /// Counted in the peer's waiters (matched, still receiving).
    pub waiter: bool,
}

impl Incoming {
    pub fn new(
        peer: Rank,
        msg_id: u32,
        (context, tag): (Context, Tag),
        geometry: Geometry,
        ack_unit: u8,
    ) -> Self {
        Self {
            peer,
            msg_id,
            context,
            tag,
            immediate: None,
            unwaited: false,
            geometry,
            frames: geometry.frames() as u32,
            ack_unit: u32::from(ack_unit),
            contiguous: 0,
            bitmap: [0; BITMAP_WORDS],
            dest: Dest::Nowhere,
            recv: None,
            local_send: None,
            matched: false,
            in_unexpected: false,
            claimed: false,
            truncated: false,
            discarded: false,
            taken_as_eager: false,
            granted: 1,
            grant_deferred: false,
            grant_target: 1,
            phase: RxPhase::Receiving,
            deadline_ns: None,
            retries: 0,
            waiter: false,
        }
    }

    pub fn has_frame(&self, frame: u32) -> bool {
        if frame < self.contiguous {
            return true;
        }
        let distance = frame - self.contiguous;
        distance < RX_TRACKED_FRAMES
            && self.bitmap[(distance / 64) as usize] & (1 << (distance % 64)) != 0
    }

    /// True if the frame lies in the tracked range (else the sender broke the grant).
    pub fn can_track(&self, frame: u32) -> bool {
        frame < self.contiguous.saturating_add(RX_TRACKED_FRAMES)
    }

    pub fn mark_frame(&mut self, frame: u32) {
        let distance = frame - self.contiguous;
        self.bitmap[(distance / 64) as usize] |= 1 << (distance % 64);
        while self.bitmap[0] & 1 != 0 {
            self.shift_bitmap();
            self.contiguous += 1;
        }
    }

    fn shift_bitmap(&mut self) {
        for word in 0..BITMAP_WORDS {
            let carry = self.bitmap.get(word + 1).map_or(0, |next| next & 1);
            self.bitmap[word] = (self.bitmap[word] >> 1) | (carry << 63);
        }
    }

    pub fn collection_complete(&self, frame: u32) -> bool {
        let c = frame / self.ack_unit;
        let end = ((c + 1) * self.ack_unit).min(self.frames);
        (c * self.ack_unit..end).all(|f| self.has_frame(f))
    }

    pub fn all_frames(&self) -> bool {
        self.contiguous >= self.frames
    }

    /// Arrived, and neither matched, queued as unexpected nor claimed: held behind an
    /// earlier message of its sender that has not been matched yet.
    pub fn awaits_matching(&self) -> bool {
        !self.matched && !self.in_unexpected && !self.claimed
    }

    /// Its sender sends it again only once asked, which a receive that binds it does: its
    /// data was discarded (the sender was told to WAIT), or it was taken as eager and every
    /// request to send it was lost until the receiver stopped asking
    /// (`repeat_resume_request`). Unasked, the receive waited for the sender's safety repeat,
    /// up to `rto_max_ns << KEPT_REPEAT_DOUBLINGS` away (seconds by default).
    pub fn waits_to_be_asked(&self) -> bool {
        let unanswered = self.taken_as_eager && self.deadline_ns.is_none() && !self.has_frame(0);
        self.discarded || unanswered
    }

    pub fn is_eager(&self) -> bool {
        self.geometry.protocol == nicmsg_wire::Protocol::Eager
    }
}

/// The frame of a long message that arrived last: where a stream most likely goes on
/// (`placement.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LatestData {
    /// The incoming message's entry (checked against `peer` and `msg_id` before use: the entry
    /// may have been freed and reused since).
    pub index: IncomingKey,
    pub peer: Rank,
    pub msg_id: u32,
    pub frame: u32,
}

/// A control frame waiting to be sent. Credits (`aux`) are filled in when it leaves, so the
/// freshest count goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Control {
    pub dst: Rank,
    pub kind: FrameKind,
    pub flags: u16,
    pub msg_id: u32,
    pub frame_index: u32,
}

impl Control {
    /// An ACK_ALL without WAIT, as queued: the whole message `msg_id` is held.
    pub(crate) fn is_ack_all(&self) -> bool {
        self.kind == FrameKind::Ack && self.flags == nicmsg_wire::Flags::ACK_ALL
    }
}

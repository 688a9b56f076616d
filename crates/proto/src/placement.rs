//! Speculative direct placement: the core predicts which frames will arrive next and where their
//! payload belongs, so a transport can have the kernel scatter a datagram's payload straight to
//! its final place (header into the engine's buffer, payload into the user's). A frame that
//! arrives as predicted is then handled without copying it; anything else goes the normal way.

use crate::ops::{Dest, LatestData, RxPhase};
use crate::receiver::Payload;
use crate::state::Core;
use crate::*;
use nicmsg_wire::{
    Frame, FrameHeader, FrameKind, FrameView, MsgHeader, FRAME_HEADER_LEN, MSG_HEADER_LEN,
};

/// A frame expected to arrive, and where its payload belongs in host memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpectedFrame {
    pub peer: Rank,
    /// The frame's `src` header field: the peer's rank in a job, its name for the
    /// conversation in open mode (`crates/directory/src/lib.rs`).
    pub wire_src: u32,
    pub msg_id: u32,
    pub frame_index: u32,
    /// Byte offset of the payload in the message.
    pub offset: u64,
    /// Where the payload goes: one piece of the receive buffer.
    pub segment: Segment,
    /// A frame of an eager message (EAGER, whose every frame carries the message header),
    /// else of a rendezvous one (DATA, or its RTS when `first`).
    pub eager: bool,
    /// The RTS of a rendezvous message not known yet, read ahead of its datagram
    /// (`first_frame.rs`): it carries the message header, and its arrival matches the message.
    pub first: bool,
}

impl ExpectedFrame {
    /// Most bytes of headers before a predicted frame's payload (an EAGER frame's).
    pub const MAX_HEADER_LEN: usize = FRAME_HEADER_LEN + MSG_HEADER_LEN;

    /// Bytes of headers before the payload of such a frame.
    pub fn header_len(&self) -> usize {
        if self.eager || self.first {
            Self::MAX_HEADER_LEN
        } else {
            FRAME_HEADER_LEN
        }
    }

    /// The kind such a frame has on the wire.
    pub fn kind(&self) -> FrameKind {
        match (self.eager, self.first) {
            (true, _) => FrameKind::Eager,
            (false, true) => FrameKind::Rts,
            (false, false) => FrameKind::Data,
        }
    }

    /// Whether a datagram of `len` bytes whose headers are `head` is this frame: its kind,
    /// sender, message and index, and a payload of the predicted length. The engine asks it
    /// of the headers it scattered apart; the simulator and the fuzz target of the whole
    /// datagram (`head` may then be longer than the headers: only they are read).
    pub fn describes(&self, head: &[u8], len: usize) -> bool {
        let Some(head) = head.get(..self.header_len()) else {
            return false;
        };
        let Ok(frame) = FrameView::new_checked(head) else {
            return false;
        };
        frame.kind_code() == self.kind() as u8
            && frame.msg_id() == self.msg_id
            && frame.frame_index() == self.frame_index
            && frame.src() == self.wire_src
            && len == self.header_len() + self.segment.len as usize
    }
}

/// What became of a frame offered as placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacedOutcome {
    /// It was the predicted frame, intact: handled, nothing copied.
    Taken,
    /// Not the predicted frame (or not intact): the caller must put it back together and
    /// hand it to `handle_frame`.
    NotPredicted,
}

impl Core {
    /// Fills `out` with frames likely to arrive next (missing, already granted frames of
    /// messages being received straight into a posted buffer), in order; returns how many.
    ///
    /// A sender streams a message's frames in order, so the frames that come next are most
    /// likely those after the last one that arrived: that message is predicted first, from the
    /// frame after it (frames missing before it were lost and come back later, if at all); then
    /// the eager message arriving into a posted receive, likewise; then the other rendezvous
    /// messages in progress, from their first missing frame. A transport that places a run of
    /// coalesced frames needs the run's first frame right to place any of it.
    pub(crate) fn predict_frames(&self, out: &mut [ExpectedFrame]) -> usize {
        // Asked before every receive batch: nothing to walk unless a rendezvous message is
        // incoming or an eager one is arriving into a posted receive, however many eager
        // ones are held.
        let eager = self.rx.latest_eager();
        if self.rx.rendezvous_incoming() == 0 && eager.is_none() {
            return 0;
        }
        let latest = self.rx.latest_data();
        let mut count = 0;
        for from in [latest, eager].into_iter().flatten() {
            count = self.predict_message(from.index, from.frame + 1, out, count);
        }
        if self.rx.rendezvous_incoming() == 0 {
            return count;
        }
        debug_assert!(
            self.rx.incoming_keys().all(|index| {
                let receiving_into_recv = self.rx.incoming(index).is_some_and(|entry| {
                    matches!(entry.dest, Dest::Recv(_)) && entry.phase == RxPhase::Receiving
                });
                !receiving_into_recv || self.rx.bound_incoming().contains(&index)
            }),
            "an incoming message goes into a receive it is not listed as bound to"
        );
        for &index in self.rx.bound_incoming() {
            if count == out.len() {
                break;
            }
            let predicted = |l: Option<LatestData>| l.is_some_and(|l| l.index == index);
            if predicted(latest) || predicted(eager) {
                continue;
            }
            count = self.predict_message(index, 0, out, count);
        }
        count
    }

    /// Appends to `out[count..]` the missing, granted frames of incoming message `index` from
    /// frame `from` on; returns the new count.
    fn predict_message(
        &self,
        index: IncomingKey,
        from: u32,
        out: &mut [ExpectedFrame],
        mut count: usize,
    ) -> usize {
        let Some(entry) = self.rx.incoming(index) else {
            return count;
        };
        let Dest::Recv(recv) = entry.dest else {
            return count;
        };
        if entry.phase != RxPhase::Receiving {
            return count;
        }
        let Some(buffer) = self.rx.recv(recv).map(|r| &r.buffer) else {
            return count;
        };
        // Frame 0 is missing from a matched message when its data was not kept (an RTS that
        // came before its receive was posted): it comes again, as a DATA frame once the CTS is
        // in (an RTS resent before that is a wrong guess, put back together), or as an EAGER
        // frame like the others.
        let first = entry.contiguous.max(from);
        let (wire_src, _) = self.wire_names_from(entry.peer);
        let eager = entry.is_eager();
        // An eager message's frames all come unasked.
        let end = if eager {
            entry.frames
        } else {
            entry.granted.min(entry.frames)
        };
        for frame in first..end {
            if count == out.len() {
                break;
            }
            if entry.has_frame(frame) {
                continue;
            }
            let offset = entry.geometry.offset(frame);
            let len = entry.geometry.len(frame);
            if let Some(segment) = single_piece(buffer, offset, len) {
                out[count] = ExpectedFrame {
                    peer: entry.peer,
                    wire_src,
                    msg_id: entry.msg_id,
                    frame_index: frame,
                    offset,
                    segment,
                    eager,
                    first: false,
                };
                count += 1;
            }
        }
        count
    }

    /// Offers a datagram whose first `expected.header_len()` bytes are `header` and whose
    /// payload the transport already wrote where `expected` says. Verifies it is exactly that
    /// frame, from that peer (`from`: its address, which an open endpoint knows its peers by),
    /// and intact (checksum over the headers and the payload in place, or over the headers
    /// alone where the link checks the payload) before taking it.
    pub(crate) fn handle_placed_frame(
        &mut self,
        now: Nanos,
        from: Option<std::net::SocketAddr>,
        header: &[u8],
        datagram_len: usize,
        expected: &ExpectedFrame,
        memory: &mut impl HostMemory,
    ) -> PlacedOutcome {
        let Some((mut parsed, msg)) =
            self.verified_in_place(header, datagram_len, expected, memory)
        else {
            return PlacedOutcome::NotPredicted;
        };
        let Some(peer) = self.placed_frame_source(now, &parsed, from, expected, memory) else {
            return PlacedOutcome::NotPredicted;
        };
        // A message already known (a DATA frame, or an EAGER one after the first), or the RTS
        // of a new one (`first_frame.rs`).
        let known = self.rx.incoming_by_id(peer, parsed.msg_id);
        let still_lands = match known {
            Some(_) => !expected.first,
            None => expected.first && self.first_frame_still_lands(&parsed, msg.as_ref(), expected),
        };
        if !still_lands {
            return PlacedOutcome::NotPredicted;
        }
        // From here on the header speaks in ranks, as in `receive_frame`.
        parsed.src = peer;
        parsed.dst = self.rank;
        self.counters.record(peer, |s| {
            s.frames_received += 1;
            s.bytes_received += datagram_len as u64;
        });
        self.peers.heard_from(now, peer);
        // What an EAGER frame carries besides its data.
        self.take_in_credits_and_ack(now, &parsed);
        let payload = Payload::InPlace {
            len: expected.segment.len,
        };
        match known {
            Some(index) => self.place_frame(now, index, &parsed, msg.as_ref(), payload, memory),
            None => self.on_data_frame(now, &parsed, msg.as_ref(), payload, memory),
        }
        self.start_queued_for(now, peer);
        PlacedOutcome::Taken
    }

    /// The frame's headers, if the datagram is exactly the predicted frame and intact: its
    /// headers in `header`, its payload where the transport wrote it.
    fn verified_in_place(
        &self,
        header: &[u8],
        datagram_len: usize,
        expected: &ExpectedFrame,
        memory: &impl HostMemory,
    ) -> Option<(FrameHeader, Option<MsgHeader>)> {
        let headers = header.get(..expected.header_len())?;
        let segment = expected.segment;
        let start = segment.offset as usize;
        let payload = memory
            .region(segment.region)?
            .get(start..start + segment.len as usize)?;
        // Lengths, the checksum and the message header, as for any frame.
        let frame = Frame::parse_parts(headers, payload).ok()?;
        let parsed = frame.header;
        let as_expected = parsed.kind == expected.kind()
            && parsed.job == self.job
            && (parsed.src, parsed.dst) == self.wire_names_from(expected.peer)
            && parsed.msg_id == expected.msg_id
            && parsed.frame_index == expected.frame_index
            && parsed.offset == expected.offset
            && u64::from(parsed.payload_len) == segment.len
            && datagram_len == headers.len() + parsed.payload_len as usize
            && self.payload_check_trusted(&parsed);
        as_expected.then_some((parsed, frame.msg))
    }

    /// The peer an intact placed frame with the predicted names came from, or `None` to have
    /// it handled the ordinary way. In a job the names are ranks, checked already (the driver
    /// checked the datagram came from that rank's address). An open endpoint knows a peer by
    /// its address: the frame must come from the predicted slot's, and is then resolved as
    /// every frame is, so the directory hears it; a frame from anywhere else is left to the
    /// ordinary path untouched, which resolves it once.
    fn placed_frame_source(
        &mut self,
        now: Nanos,
        header: &FrameHeader,
        from: Option<std::net::SocketAddr>,
        expected: &ExpectedFrame,
        memory: &mut impl HostMemory,
    ) -> Option<Rank> {
        let peer = expected.peer;
        if self.peers[peer].unreachable {
            return None;
        }
        let Some(directory) = &self.directory else {
            return Some(peer);
        };
        if !directory.is_active(peer) || from.is_none() || directory.address(peer) != from {
            return None;
        }
        self.frame_source(now, header, from, memory)
            .filter(|&source| source == peer)
    }
}

/// The one segment piece covering `[offset, offset+len)` of a buffer, if it is one piece.
pub(crate) fn single_piece(buffer: &SgList, offset: u64, len: u64) -> Option<Segment> {
    let mut found = None;
    let mut pieces = 0;
    buffer.for_each_piece(offset, len, |piece| {
        pieces += 1;
        found = Some(piece);
    });
    (pieces == 1).then_some(found).flatten()
}

//! Speculative direct placement: the core predicts which frames will arrive next and where their
//! payload belongs, so a transport can have the kernel scatter a datagram's payload straight to
//! its final place (header into the engine's buffer, payload into the user's). A frame that
//! arrives as predicted is then handled without copying it; anything else goes the normal way.

use crate::ops::{Dest, RxPhase};
use crate::receiver::Payload;
use crate::state::Core;
use crate::*;
use nicmsg_wire::{checksum, FrameHeader, FrameKind, FrameView, FRAME_HEADER_LEN};

/// A frame expected to arrive, and where its payload belongs in host memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpectedFrame {
    pub peer: Rank,
    /// The frame's `src` header field: the peer's rank in a job, its name for the
    /// conversation in open mode (`directory.rs`).
    pub wire_src: u32,
    pub msg_id: u32,
    pub frame_index: u32,
    /// Byte offset of the payload in the message.
    pub offset: u64,
    /// Where the payload goes: one piece of the receive buffer.
    pub segment: Segment,
}

impl ExpectedFrame {
    /// Bytes of headers before the payload of such a frame (a DATA frame).
    pub const HEADER_LEN: usize = FRAME_HEADER_LEN;
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
    /// Fills `out` with frames likely to arrive next (missing, already granted frames of long
    /// messages being received straight into a posted buffer), in order; returns how many.
    ///
    /// A sender streams a message's frames in order, so the frames that come next are most
    /// likely those after the last one that arrived: that message is predicted first, from the
    /// frame after it (frames missing before it were lost and come back later, if at all); then
    /// the other messages in progress, from their first missing frame. A transport that places
    /// a run of coalesced frames needs the run's first frame right to place any of it.
    pub(crate) fn predict_frames(&self, out: &mut [ExpectedFrame]) -> usize {
        // Asked before every receive batch: nothing to walk unless a rendezvous message is
        // incoming (eager messages are never predicted), however many eager ones are held.
        if self.rx.rendezvous_incoming() == 0 {
            return 0;
        }
        let latest = self.rx.latest_data();
        let mut count = 0;
        if let Some(latest) = latest {
            count = self.predict_message(latest.index, latest.frame + 1, out, count);
        }
        for index in self.rx.incoming_keys() {
            if latest.is_some_and(|latest| latest.index == index) {
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
        if entry.is_eager() || entry.phase != RxPhase::Receiving {
            return count;
        }
        let Some(buffer) = self.rx.recv(recv).map(|r| &r.buffer) else {
            return count;
        };
        // Frame 0 travels as an RTS with a longer header: never predicted.
        let first = entry.contiguous.max(from).max(1);
        let (wire_src, _) = self.wire_names_from(entry.peer);
        let end = entry.granted.min(entry.frames);
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
                };
                count += 1;
            }
        }
        count
    }

    /// Offers a datagram whose first `ExpectedFrame::HEADER_LEN` bytes are `header` and whose
    /// payload the transport already wrote where `expected` says. Verifies it is exactly that
    /// frame, from that peer (`from`: its address, which an open endpoint knows its peers by),
    /// and intact (checksum over the header and the payload in place, or over the header alone
    /// where the link checks the payload) before taking it.
    pub(crate) fn handle_placed_frame(
        &mut self,
        now: Nanos,
        from: Option<std::net::SocketAddr>,
        header: &[u8],
        datagram_len: usize,
        expected: &ExpectedFrame,
        memory: &mut impl HostMemory,
    ) -> PlacedOutcome {
        let Some(bytes) = header.first_chunk::<FRAME_HEADER_LEN>() else {
            return PlacedOutcome::NotPredicted;
        };
        let Ok(mut parsed) = FrameHeader::parse(bytes) else {
            return PlacedOutcome::NotPredicted;
        };
        let as_expected = parsed.kind == FrameKind::Data
            && parsed.job == self.job
            && (parsed.src, parsed.dst) == self.wire_names_from(expected.peer)
            && parsed.msg_id == expected.msg_id
            && parsed.frame_index == expected.frame_index
            && parsed.offset == expected.offset
            && u64::from(parsed.payload_len) == expected.segment.len
            && datagram_len == FRAME_HEADER_LEN + parsed.payload_len as usize
            && self.payload_check_trusted(&parsed);
        if !as_expected || !self.intact_in_place(bytes, expected, memory) {
            return PlacedOutcome::NotPredicted;
        }
        let Some(peer) = self.placed_frame_source(now, &parsed, from, expected, memory) else {
            return PlacedOutcome::NotPredicted;
        };
        let Some(index) = self.rx.incoming_by_id(peer, parsed.msg_id) else {
            return PlacedOutcome::NotPredicted;
        };
        // From here on the header speaks in ranks, as in `receive_frame`.
        parsed.src = peer;
        parsed.dst = self.rank;
        self.counters.record(peer, |s| {
            s.frames_received += 1;
            s.bytes_received += datagram_len as u64;
        });
        self.peers.heard_from(now, peer);
        self.place_frame(
            now,
            index,
            &parsed,
            None,
            Payload::InPlace {
                len: expected.segment.len,
            },
            memory,
        );
        self.start_queued_for(now, peer);
        PlacedOutcome::Taken
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

    fn intact_in_place(
        &self,
        header: &[u8; FRAME_HEADER_LEN],
        expected: &ExpectedFrame,
        memory: &impl HostMemory,
    ) -> bool {
        let segment = expected.segment;
        let start = segment.offset as usize;
        let Some(payload) = memory
            .region(segment.region)
            .and_then(|r| r.get(start..start + segment.len as usize))
        else {
            return false;
        };
        let stored = FrameView::new_checked(&header[..]).map_or(0, |frame| frame.crc());
        checksum(header, &[payload]) == stored
    }
}

/// The one segment piece covering `[offset, offset+len)` of a buffer, if it is one piece.
fn single_piece(buffer: &SgList, offset: u64, len: u64) -> Option<Segment> {
    let mut found = None;
    let mut pieces = 0;
    buffer.for_each_piece(offset, len, |piece| {
        pieces += 1;
        found = Some(piece);
    });
    (pieces == 1).then_some(found).flatten()
}

//! Placing the first frame of a message to arrive (the RTS of a rendezvous message, or an
//! EAGER frame) straight into the receive it will match.
//!
//! `predict_frames` guesses only frames of messages already matched: the first frame is what
//! matches a message, so no receive is bound to it before its header is read. Yet an RTS
//! carries a whole frame of the message (about 64 KiB on loopback), and a stream of 1 MiB
//! messages copied it once per message: 6 % of every byte received, and the frames right
//! behind it in the same batch with it (12 % in all, `NPopenmpi -s`). A transport that can
//! read a datagram's headers before taking it (`recvmsg` with `MSG_PEEK`) asks here where its
//! payload goes, and the answer must be exact: MPI lets a receive buffer change only where the
//! message it gets lies, so a guess into a receive not yet bound may not be wrong.
//!
//! So only headers whose checksum covers them alone (the link checks the payload,
//! `Flags::LINK_CHECKED`) are believed, and they are known intact before the payload lands;
//! and an answer is given only when handling that frame now would put it there: the checks of
//! `on_data_frame`, `admit_message`, `match_in_order`, `bind` and `place_frame`, made without
//! changing anything. When the frame arrives placed, the same checks run again before anything
//! changes, and it then takes the ordinary path with its payload already in place.
//!
//! A transport that receives a run of one sender's frames as one datagram (UDP with GRO) has the
//! frames behind the first one in it guessed too: they are most likely the next frames of the
//! same message, sent in order, and once the first frame has bound the receive, a wrong guess
//! lands only inside the message that receive now gets (see `frames_behind_first`).

use crate::geometry::Geometry;
use crate::placement::single_piece;
use crate::state::Core;
use crate::window::IdPlace;
use crate::*;
use nicmsg_wire::{Frame, FrameHeader, FrameKind, MsgHeader, Protocol, MAX_HEADERS_LEN};
use std::net::SocketAddr;

/// What a look ahead saw of the next datagram, before it was received.
#[derive(Debug, Clone, Copy)]
pub struct LookAhead<'a> {
    /// Its first bytes (at least the headers of its first frame).
    pub head: &'a [u8],
    /// The length of its first frame: the whole datagram, or the first frame of a run the
    /// transport coalesced.
    pub frame_len: usize,
    /// Its whole length: frames of `frame_len` bytes, the last maybe shorter (how GRO
    /// coalesces a run).
    pub datagram_len: usize,
    /// Its source address (how an open endpoint knows its peers).
    pub from: Option<SocketAddr>,
}

impl Core {
    /// Where the payload of the datagram whose first bytes are `head` goes, if it is the first
    /// frame to arrive of a new message (its RTS, or any of its EAGER frames) that a posted
    /// receive takes at once, intact headers and all; `None` for anything else.
    /// `frame_len` is the length of the datagram's first frame (the whole datagram unless the
    /// transport coalesced a run: see [`predict_first_frames`](Self::predict_first_frames));
    /// `from` its source address (how an open endpoint knows its peers). Changes nothing.
    pub(crate) fn predict_first_frame(
        &self,
        head: &[u8],
        frame_len: usize,
        from: Option<SocketAddr>,
    ) -> Option<ExpectedFrame> {
        self.first_frame_prediction(head, frame_len, from)
            .map(|(first, ..)| first)
    }

    /// Fills `out` with where the frames of the datagram `look` saw go: its first frame, as
    /// [`predict_first_frame`](Self::predict_first_frame) says, then the frames of the same
    /// message behind it in a coalesced run. Returns how many; 0 when the first frame is not
    /// predicted. Changes nothing.
    pub(crate) fn predict_first_frames(
        &self,
        look: &LookAhead<'_>,
        out: &mut [ExpectedFrame],
    ) -> usize {
        let Some((slot, behind)) = out.split_first_mut() else {
            return 0;
        };
        let Some((first, geometry, buffer)) =
            self.first_frame_prediction(look.head, look.frame_len, look.from)
        else {
            return 0;
        };
        *slot = first;
        1 + frames_behind_first(&first, geometry, buffer, look, behind)
    }

    /// The first frame's prediction and its message's cut.
    fn first_frame_prediction(
        &self,
        head: &[u8],
        frame_len: usize,
        from: Option<SocketAddr>,
    ) -> Option<(ExpectedFrame, Geometry, &SgList)> {
        let (header, msg) = Frame::parse_link_checked_headers(head.get(..MAX_HEADERS_LEN)?).ok()?;
        let msg = msg?;
        if frame_len != MAX_HEADERS_LEN + header.payload_len as usize || header.job != self.job {
            return None;
        }
        let peer = self.known_source(&header, from)?;
        let (segment, buffer) = self.first_frame_destination(peer, &header, &msg)?;
        let first = ExpectedFrame {
            peer,
            wire_src: header.src,
            msg_id: header.msg_id,
            frame_index: header.frame_index,
            offset: header.offset,
            segment,
            eager: header.kind == FrameKind::Eager,
            first: true,
        };
        Some((first, Geometry::of(&msg), buffer))
    }

    /// The peer a frame comes from, as `frame_source` would resolve it without opening or
    /// renaming anything: in a job the header's rank; in open mode a conversation under way.
    fn known_source(&self, header: &FrameHeader, from: Option<SocketAddr>) -> Option<Rank> {
        match &self.directory {
            None => self.names_a_peer(header).then_some(header.src),
            Some(directory) => directory.peer_of_conversation(from?, header.src, header.dst),
        }
    }

    /// The piece of a posted receive where the frame `header` (`msg`) from `peer`, the first
    /// to arrive of a new message (its RTS, or any EAGER frame of it), puts its payload if
    /// handled now, and that receive's buffer; or `None` if handling it would do anything else
    /// (a duplicate, a message matched later or unexpected, a receive too short, no room for
    /// its state).
    fn first_frame_destination(
        &self,
        peer: Rank,
        header: &FrameHeader,
        msg: &MsgHeader,
    ) -> Option<(Segment, &SgList)> {
        let buffer = self.first_frame_receive(peer, header, msg)?;
        let segment = single_piece(buffer, header.offset, u64::from(header.payload_len))?;
        Some((segment, buffer))
    }

    /// The buffer of the posted receive that the frame `header` (`msg`) from `peer` binds if
    /// handled now, as the first frame to arrive of a new message, or `None` if handling it
    /// would do anything else.
    fn first_frame_receive(
        &self,
        peer: Rank,
        header: &FrameHeader,
        msg: &MsgHeader,
    ) -> Option<&SgList> {
        let state = &self.peers[peer];
        let new_and_next = state.recv_window.place(header.msg_id) == IdPlace::Open
            && state.next_match == header.msg_id
            && self.rx.incoming_by_id(peer, header.msg_id).is_none();
        if !new_and_next || state.unreachable || !self.payload_check_trusted(header) {
            return None;
        }
        let len = u64::from(header.payload_len);
        self.admissible(header, msg, len)?;
        // A rendezvous message is admitted by its RTS (frame 0); an eager one by whichever of
        // its frames comes first.
        let first = msg.protocol == Protocol::Eager || header.frame_index == 0;
        let admitted = first && len > 0 && self.has_room_for_remote(0);
        if !admitted {
            return None;
        }
        let position = self.rx.find_posted(peer, (Context(msg.context), msg.tag))?;
        let buffer = &self.rx[self.rx.posted_at(position)].buffer;
        (buffer.total_len() >= msg.total_len).then_some(buffer)
    }

    /// True if a predicted RTS that arrived placed, intact, with `header` (`msg`) would still
    /// be taken where it lies: checked again before anything changes.
    pub(crate) fn first_frame_still_lands(
        &self,
        header: &FrameHeader,
        msg: Option<&MsgHeader>,
        expected: &ExpectedFrame,
    ) -> bool {
        msg.and_then(|msg| self.first_frame_destination(expected.peer, header, msg))
            .is_some_and(|(segment, _)| segment == expected.segment)
    }
}

/// Fills `out` with the frames of `first`'s message that come behind it in the datagram
/// `look` saw, if the transport coalesced a run there; returns how many. GRO joins one
/// sender's datagrams of one length (the last may be shorter) in the order they came, and
/// a sender sends a message's frames in order, all of one length on the wire: so the
/// frames behind the first are guessed to be the message's next ones, as long as their
/// lengths fit the run. The kernel writes them as it writes the first frame, which binds
/// the receive when it is handled, before them; so a wrong guess lands only where the
/// message that receive gets lies, to be overwritten by its real frames, and is put back
/// together and handled the ordinary way.
fn frames_behind_first(
    first: &ExpectedFrame,
    geometry: Geometry,
    buffer: &SgList,
    look: &LookAhead<'_>,
    out: &mut [ExpectedFrame],
) -> usize {
    let (mut at, mut frame, mut count) = (look.frame_len, first.frame_index, 0);
    while count < out.len() && at < look.datagram_len {
        frame += 1;
        if u64::from(frame) >= geometry.frames() {
            break;
        }
        let offset = geometry.offset(frame);
        let len = geometry.len(frame);
        let Some(segment) = single_piece(buffer, offset, len) else {
            break;
        };
        let expected = ExpectedFrame {
            frame_index: frame,
            offset,
            segment,
            first: false,
            ..*first
        };
        let wire_len = expected.header_len() + len as usize;
        if wire_len != look.frame_len.min(look.datagram_len - at) {
            break;
        }
        out[count] = expected;
        count += 1;
        at += wire_len;
    }
    count
}

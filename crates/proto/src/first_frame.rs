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

use crate::state::Core;
use crate::window::IdPlace;
use crate::*;
use nicmsg_wire::{Frame, FrameHeader, FrameKind, MsgHeader, Protocol, MAX_HEADERS_LEN};
use std::net::SocketAddr;

impl Core {
    /// Where the payload of the datagram whose first bytes are `head` goes, if it is the first
    /// frame to arrive of a new message (its RTS, or any of its EAGER frames) that a posted
    /// receive takes at once, intact headers and all; `None` for anything else.
    /// `datagram_len` is the whole datagram's length; `from` its source address (how an open
    /// endpoint knows its peers). Changes nothing.
    pub(crate) fn predict_first_frame(
        &self,
        head: &[u8],
        datagram_len: usize,
        from: Option<SocketAddr>,
    ) -> Option<ExpectedFrame> {
        let (header, msg) = Frame::parse_link_checked_headers(head.get(..MAX_HEADERS_LEN)?).ok()?;
        let msg = msg?;
        if datagram_len != MAX_HEADERS_LEN + header.payload_len as usize || header.job != self.job {
            return None;
        }
        let peer = self.known_source(&header, from)?;
        let segment = self.first_frame_destination(peer, &header, &msg)?;
        Some(ExpectedFrame {
            peer,
            wire_src: header.src,
            msg_id: header.msg_id,
            frame_index: header.frame_index,
            offset: header.offset,
            segment,
            eager: header.kind == FrameKind::Eager,
            first: true,
        })
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
    /// handled now, or `None` if handling it would do anything else (a duplicate, a message
    /// matched later or unexpected, a receive too short, no room for its state).
    fn first_frame_destination(
        &self,
        peer: Rank,
        header: &FrameHeader,
        msg: &MsgHeader,
    ) -> Option<Segment> {
        let state = &self.peers[peer];
        let new_and_next = state.recv_window.place(header.msg_id) == IdPlace::Open
            && state.next_match == header.msg_id
            && self.rx.incoming_by_id(peer, header.msg_id).is_none();
        if !new_and_next || state.unreachable || !self.payload_check_trusted(header) {
            return None;
        }
        let geometry = self.admissible(msg)?;
        let len = u64::from(header.payload_len);
        // A rendezvous message is admitted by its RTS (frame 0); an eager one by whichever of
        // its frames comes first.
        let first = msg.protocol == Protocol::Eager || header.frame_index == 0;
        let admitted = first
            && geometry.agrees(header.frame_index, header.offset, len)
            && len > 0
            && self.has_room_for_remote();
        if !admitted {
            return None;
        }
        let position = self.rx.find_posted(peer, (Context(msg.context), msg.tag))?;
        let buffer = &self.rx[self.rx.posted_at(position)].buffer;
        if buffer.total_len() < msg.total_len {
            return None;
        }
        crate::placement::single_piece(buffer, header.offset, len)
    }

    /// True if a predicted RTS that arrived placed, intact, with `header` (`msg`) would still
    /// be taken where it lies: checked again before anything changes.
    pub(crate) fn first_frame_still_lands(
        &self,
        header: &FrameHeader,
        msg: Option<&MsgHeader>,
        expected: &ExpectedFrame,
    ) -> bool {
        msg.is_some_and(|msg| {
            self.first_frame_destination(expected.peer, header, msg) == Some(expected.segment)
        })
    }
}

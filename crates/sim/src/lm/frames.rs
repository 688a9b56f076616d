//! The frames of the LM simulation, as bytes (so loss, duplication, reordering and bit flips
//! reach them as they reach any frame): the real ADMISSION and LM-DATA frames of `nicmsg_wire`,
//! behind 42 bytes that stand for the Ethernet, IP and UDP headers a NIC writes in front of
//! every frame (so a frame's headers are as long as on AF_XDP, and land where they would).
//!
//! Two more control frames stand in for what the protocol core gives an LM transfer in the
//! engine: a grant (CTS: frames down to `frame_index` may be sent, their slots are posted) and
//! the receiver's "whole transfer delivered" (MSG-ACK).

use nicmsg_lm::admission::Control;
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::TransferKey;
use nicmsg_wire::admission::AdmissionRepr;
use nicmsg_wire::{
    emit_frame, emit_headers, seal, Frame, FrameHeader, FrameKind, FrameView, FRAME_HEADER_LEN,
};

/// Bytes in front of the frame header as the device writes a frame (Ethernet 14, IPv4 20,
/// UDP 8).
pub const LINK_HEADER_LEN: usize = 42;
/// All the headers in front of an LM-DATA frame's payload.
pub const HEADER_LEN: usize = LINK_HEADER_LEN + FRAME_HEADER_LEN;
/// The LM simulation's job number.
pub const JOB: u32 = 0x4c4d;
/// The link header's bytes (a recognisable pattern).
const LINK_BYTE: u8 = 0x42;

/// A frame as the receiving engine understands it after checking it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    Admission(Control),
    Data {
        /// The sender's number for the transfer.
        number: u32,
        /// The receiver's key, or 0 for a transfer not admitted.
        key: u32,
        index: u32,
        payload: &'a [u8],
    },
    /// Frames down to `floor` of the transfer keyed `key` have slots.
    Grant {
        key: u32,
        floor: u32,
    },
    /// Transfer `number` is delivered.
    Delivered {
        number: u32,
    },
}

fn header(kind: FrameKind, src: u32, dst: u32) -> FrameHeader {
    FrameHeader {
        kind,
        flags: 0,
        job: JOB,
        src,
        dst,
        msg_id: 0,
        frame_index: 0,
        offset: 0,
        payload_len: 0,
        aux: 0,
        acked_id: 0,
    }
}

fn with_link_header(header: &FrameHeader, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![LINK_BYTE; HEADER_LEN + payload.len()];
    emit_frame(header, None, payload, &mut bytes[LINK_HEADER_LEN..])
        .expect("the simulation's frames are valid");
    bytes
}

pub fn admission(src: u32, dst: u32, message: Control) -> Vec<u8> {
    let header = message
        .to_repr()
        .to_header(JOB, src, dst)
        .expect("admission control emits valid messages");
    with_link_header(&header, &[])
}

/// Frame `index` of a transfer laid out in a send buffer with header holes: its headers are
/// written into the hole before its payload, and the frame is that one contiguous piece (no
/// copy of the payload, as a NIC would send it with one descriptor).
pub fn data_in_place(
    buffer: &mut HoleBuffer,
    (src, dst): (u32, u32),
    number: u32,
    key: u32,
    index: u32,
) -> &[u8] {
    let geometry = buffer.geometry();
    let range = geometry.payload_range(buffer.len(), index);
    let mut h = header(FrameKind::LmData, src, dst);
    h.msg_id = number;
    h.aux = key;
    h.frame_index = index;
    h.offset = range.start as u64;
    h.payload_len = range.len() as u32;
    let mut frame_header = [0u8; FRAME_HEADER_LEN];
    emit_headers(&h, None, &mut frame_header).expect("the simulation's frames are valid");
    seal(&mut frame_header, &[buffer.piece(index)]);
    let hole = buffer.header_mut(index);
    hole[..LINK_HEADER_LEN].fill(LINK_BYTE);
    hole[LINK_HEADER_LEN..].copy_from_slice(&frame_header);
    buffer.frame(index)
}

pub fn grant(src: u32, dst: u32, key: TransferKey, floor: u32) -> Vec<u8> {
    let mut h = header(FrameKind::Cts, src, dst);
    h.aux = key.0;
    h.frame_index = floor;
    with_link_header(&h, &[])
}

pub fn delivered(src: u32, dst: u32, number: u32) -> Vec<u8> {
    let mut h = header(FrameKind::MsgAck, src, dst);
    h.msg_id = number;
    with_link_header(&h, &[])
}

/// What the packet filter reads of a frame without checking it (kind, key, index): the
/// steering rule's input. `None` for anything that is not LM-DATA with a key.
pub fn peek_transfer(bytes: &[u8]) -> Option<(TransferKey, u32)> {
    let view = FrameView::new_checked(bytes.get(LINK_HEADER_LEN..)?).ok()?;
    if view.kind_code() != FrameKind::LmData as u8 || view.aux() == 0 {
        return None;
    }
    Some((TransferKey(view.aux()), view.frame_index()))
}

/// Checks a whole frame (checksum included) from `src` to `dst`; `None` if it is damaged or
/// not for this job and pair.
pub fn parse(bytes: &[u8], src: u32, dst: u32) -> Option<Parsed<'_>> {
    let frame = Frame::parse(bytes.get(LINK_HEADER_LEN..)?).ok()?;
    let h = frame.header;
    if h.job != JOB || h.src != src || h.dst != dst {
        return None;
    }
    Some(match h.kind {
        FrameKind::Admission => {
            Parsed::Admission(Control::from_repr(AdmissionRepr::from_header(&h).ok()?))
        }
        FrameKind::LmData => Parsed::Data {
            number: h.msg_id,
            key: h.aux,
            index: h.frame_index,
            payload: frame.payload,
        },
        FrameKind::Cts => Parsed::Grant {
            key: h.aux,
            floor: h.frame_index,
        },
        FrameKind::MsgAck => Parsed::Delivered { number: h.msg_id },
        _ => return None,
    })
}

//! Helpers shared by the wire integration tests.

#![allow(dead_code)]

use nicmsg_wire::{
    checksum, Flags, FrameHeader, FrameKind, FrameView, MsgHeader, MsgHeaderView, Protocol,
    FRAME_HEADER_LEN,
};

/// Every frame kind, in wire order.
pub const ALL_KINDS: [FrameKind; 16] = FrameKind::ALL;

/// The protocol a message header must name on a frame of `kind`.
pub fn protocol_for(kind: FrameKind) -> Protocol {
    match kind {
        FrameKind::Eager => Protocol::Eager,
        _ => Protocol::Rendezvous,
    }
}

/// A frame header of `kind` with every field non-zero and every allowed flag set (but one).
pub fn header(kind: FrameKind, payload_len: usize) -> FrameHeader {
    FrameHeader {
        kind,
        // Every flag the kind allows but the one that leaves the payload unchecked: the
        // corruption tests need every byte covered (`LINK_CHECKED` has tests of its own).
        flags: kind.allowed_flags() & !Flags::LINK_CHECKED,
        job: 0x1234_5678,
        src: 3,
        dst: 0xfffe_0001,
        msg_id: 77,
        frame_index: 5,
        offset: 0x0000_0001_0000_0400,
        payload_len: u32::try_from(payload_len).unwrap(),
        aux: 0xdead_beef,
        acked_id: if kind.allowed_flags() & Flags::ACKED != 0 {
            0x0bad_cafe
        } else {
            0
        },
    }
}

/// A message header for `kind` if that kind carries one.
pub fn msg_for(kind: FrameKind) -> Option<MsgHeader> {
    kind.has_msg_header().then(|| MsgHeader {
        total_len: 1 << 40,
        tag: 0xabcd,
        frame_payload: 8192,
        protocol: protocol_for(kind),
        ack_unit: 16,
        context: 0x0301,
        immediate: Some(0x0706_0504),
    })
}

/// The payload used for kinds that may carry one.
pub const PAYLOAD: &[u8] = b"nicmsg payload \x00\x01\xfe\xff";

/// A complete valid frame of `kind`, with or without payload.
pub fn build(kind: FrameKind, with_payload: bool) -> Vec<u8> {
    let payload = if with_payload { PAYLOAD } else { &[] };
    build_with(
        &header(kind, payload.len()),
        msg_for(kind).as_ref(),
        payload,
    )
}

/// Writes exactly the given fields (even ones the parser refuses, which `emit_frame` would not
/// write) and a valid checksum, so a test reaches the check it aims at.
pub fn build_with(header: &FrameHeader, msg: Option<&MsgHeader>, payload: &[u8]) -> Vec<u8> {
    let headers_len = FRAME_HEADER_LEN + msg.map_or(0, |_| nicmsg_wire::MSG_HEADER_LEN);
    let mut out = vec![0u8; headers_len + payload.len()];
    header.emit((&mut out[..FRAME_HEADER_LEN]).try_into().unwrap());
    if let Some(msg) = msg {
        msg.emit(
            (&mut out[FRAME_HEADER_LEN..headers_len])
                .try_into()
                .unwrap(),
        );
    }
    out[headers_len..].copy_from_slice(payload);
    reseal(&mut out);
    out
}

/// Every valid sample frame: each kind, with payload where the kind may carry one, and without.
pub fn samples() -> Vec<(FrameKind, Vec<u8>)> {
    let mut frames = Vec::new();
    for kind in ALL_KINDS {
        frames.push((kind, build(kind, false)));
        if kind.may_carry_payload() {
            frames.push((kind, build(kind, true)));
        }
    }
    frames
}

/// Recomputes the checksum of a (possibly edited) frame in place, so that a test reaches the
/// check it aims at instead of stopping at the checksum. The CRC runs over the whole frame with
/// the CRC field read as zero, so where the headers end matters only on a frame whose payload
/// the link checks (`Flags::LINK_CHECKED`): then the message header is covered and the payload
/// is not.
pub fn reseal(bytes: &mut [u8]) {
    let split = FrameKind::from_u8(bytes[1])
        .map_or(FRAME_HEADER_LEN, nicmsg_wire::headers_len)
        .min(bytes.len());
    let (headers, rest) = bytes.split_at_mut(split);
    let crc = checksum(headers, &[rest]);
    view(headers).set_crc(crc);
}

/// The frame header of `bytes`, to edit a field.
pub fn view(bytes: &mut [u8]) -> FrameView<&mut [u8]> {
    FrameView::new_checked(bytes).expect("a frame header")
}

/// The message header that follows the frame header of `bytes`.
pub fn msg_view(bytes: &mut [u8]) -> MsgHeaderView<&mut [u8]> {
    MsgHeaderView::new_checked(&mut bytes[FRAME_HEADER_LEN..]).expect("a message header")
}

/// Bitwise CRC32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final XOR
/// 0xFFFFFFFF): an independent reference for the checksum definition.
pub fn crc32c_reference(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

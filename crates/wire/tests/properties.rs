//! Property tests of the wire format (proptest, default case count).

mod common;

use common::*;
use nicmsg_wire::{
    emit_frame, emit_headers, headers_len, seal, Flags, Frame, FrameHeader, FrameKind, MsgHeader,
    WireError, FRAME_HEADER_LEN, MAX_HEADERS_LEN, MSG_HEADER_LEN,
};
use proptest::prelude::*;
use proptest::sample::Index;

/// A valid frame: header, message header where the kind has one, payload where it may have one.
#[derive(Debug, Clone)]
struct ValidFrame {
    header: FrameHeader,
    msg: Option<MsgHeader>,
    payload: Vec<u8>,
}

impl ValidFrame {
    fn bytes(&self) -> Vec<u8> {
        build_with(&self.header, self.msg.as_ref(), &self.payload)
    }
}

fn arb_kind() -> impl Strategy<Value = FrameKind> {
    proptest::sample::select(&ALL_KINDS[..])
}

fn arb_msg(kind: FrameKind) -> impl Strategy<Value = MsgHeader> {
    (
        any::<u64>(),
        any::<u64>(),
        (MSG_HEADER_LEN as u32 + 1)..=u32::MAX,
        1..=u8::MAX,
        any::<u16>(),
        any::<Option<u32>>(),
    )
        .prop_map(
            move |(total_len, tag, frame_payload, ack_unit, context, immediate)| MsgHeader {
                total_len,
                tag,
                frame_payload,
                protocol: protocol_for(kind),
                ack_unit,
                context,
                immediate,
            },
        )
}

fn arb_frame() -> impl Strategy<Value = ValidFrame> {
    arb_kind().prop_flat_map(|kind| {
        let max_payload = if kind.may_carry_payload() { 300 } else { 0 };
        let msg = if kind.has_msg_header() {
            arb_msg(kind).prop_map(Some).boxed()
        } else {
            Just(None).boxed()
        };
        (
            any::<u16>(),
            any::<[u32; 6]>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..=max_payload),
            msg,
        )
            .prop_map(
                move |(flags, [job, src, dst, msg_id, frame_index, aux], offset, payload, msg)| {
                    ValidFrame {
                        header: FrameHeader {
                            kind,
                            flags: flags & kind.allowed_flags(),
                            job,
                            src,
                            dst,
                            msg_id,
                            frame_index,
                            offset,
                            payload_len: payload.len() as u32,
                            aux,
                            acked_id: if flags & kind.allowed_flags() & Flags::ACKED != 0 {
                                msg_id.rotate_left(7)
                            } else {
                                0
                            },
                        },
                        msg,
                        payload,
                    }
                },
            )
    })
}

proptest! {
    /// Every valid frame survives emit then parse unchanged, and re-emits to the same bytes.
    #[test]
    fn valid_frames_round_trip(frame in arb_frame()) {
        let bytes = frame.bytes();
        prop_assert_eq!(bytes.len(), headers_len(frame.header.kind) + frame.payload.len());
        let parsed = Frame::parse(&bytes).unwrap();
        prop_assert_eq!(parsed.header, frame.header);
        prop_assert_eq!(parsed.msg, frame.msg);
        prop_assert_eq!(parsed.payload, &frame.payload[..]);
        let again = build_with(&parsed.header, parsed.msg.as_ref(), parsed.payload);
        prop_assert_eq!(again, bytes);
    }

    /// The checksum field holds the CRC32C of the frame with that field zeroed (of its headers
    /// alone where the link checks the payload).
    #[test]
    fn checksum_matches_the_reference(frame in arb_frame()) {
        let mut bytes = frame.bytes();
        let stored = u32::from_le_bytes(bytes[44..48].try_into().unwrap());
        bytes[44..48].fill(0);
        if frame.header.has_flag(Flags::LINK_CHECKED) {
            bytes.truncate(headers_len(frame.header.kind));
        }
        prop_assert_eq!(stored, crc32c_reference(&bytes));
    }

    /// Arbitrary bytes never make the parser panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Frame::parse(&bytes);
    }

    /// Arbitrary bytes behind a plausible start (this version, a known kind, allowed flags) and with
    /// a repaired checksum reach the checks behind the checksum: the parser never panics, and
    /// whatever it accepts re-emits to exactly the input.
    #[test]
    fn resealed_arbitrary_bytes_are_canonical_when_accepted(
        kind in arb_kind(),
        mut bytes in proptest::collection::vec(any::<u8>(), FRAME_HEADER_LEN..MAX_HEADERS_LEN + 40),
        fix_length in any::<bool>(),
        fix_reserved in any::<bool>(),
        fix_protocol in any::<bool>(),
    ) {
        let headers = headers_len(kind);
        bytes[0] = nicmsg_wire::VERSION;
        bytes[1] = kind as u8;
        let flags = u16::from_le_bytes([bytes[2], bytes[3]]) & kind.allowed_flags();
        bytes[2..4].copy_from_slice(&flags.to_le_bytes());
        if fix_length && bytes.len() >= headers {
            if !kind.may_carry_payload() {
                bytes.truncate(headers);
            }
            let payload_len = (bytes.len() - headers) as u32;
            bytes[32..36].copy_from_slice(&payload_len.to_le_bytes());
        }
        if fix_reserved {
            bytes[40..44].fill(0);
            if kind.has_msg_header() && bytes.len() >= headers {
                bytes[FRAME_HEADER_LEN + 22..headers].fill(0);
            }
        }
        if fix_protocol && kind.has_msg_header() && bytes.len() >= headers {
            bytes[FRAME_HEADER_LEN + 20] = protocol_for(kind) as u8;
        }
        reseal(&mut bytes);
        let accepted = fix_length && fix_reserved && (fix_protocol || !kind.has_msg_header());
        match Frame::parse(&bytes) {
            Ok(frame) => {
                let again = build_with(&frame.header, frame.msg.as_ref(), frame.payload);
                prop_assert_eq!(again, bytes);
            }
            // With every field fixed up, only a short buffer or a message header's
            // frame_payload / ack_unit can still be refused.
            Err(e) if accepted && bytes.len() >= headers => {
                prop_assert!(matches!(e, WireError::FramePayloadTooSmall(_) | WireError::ZeroAckUnit), "{e:?}");
            }
            Err(_) => {}
        }
    }

    /// Any change to the bytes of a valid frame, re-checksummed or not, never panics the parser,
    /// and an accepted result is canonical.
    #[test]
    fn mutated_frames_never_panic(
        frame in arb_frame(),
        edits in proptest::collection::vec((any::<Index>(), any::<u8>()), 1..4),
        resealed in any::<bool>(),
    ) {
        let mut bytes = frame.bytes();
        for (at, value) in edits {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        if resealed {
            reseal(&mut bytes);
        }
        if let Ok(parsed) = Frame::parse(&bytes) {
            let again = build_with(&parsed.header, parsed.msg.as_ref(), parsed.payload);
            prop_assert_eq!(again, bytes);
        }
    }

    /// A single flipped bit anywhere in a valid frame is always rejected, but in the payload of
    /// a frame that leaves its payload to the link's check.
    #[test]
    fn single_bit_flips_are_rejected(frame in arb_frame(), bit in any::<Index>()) {
        let mut bytes = frame.bytes();
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        let in_headers = bit / 8 < headers_len(frame.header.kind);
        if in_headers || !frame.header.has_flag(Flags::LINK_CHECKED) {
            prop_assert!(Frame::parse(&bytes).is_err());
        } else {
            prop_assert!(Frame::parse(&bytes).is_ok());
        }
    }

    /// Building headers, then sealing with the payload split into arbitrary pieces (some empty),
    /// gives the same bytes as emitting the whole frame at once.
    #[test]
    fn emit_headers_and_seal_with_split_payload_equals_emit_frame(
        frame in arb_frame(),
        cuts in proptest::collection::vec(any::<Index>(), 0..8),
    ) {
        let expected = frame.bytes();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(frame.payload.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts {
            pieces.push(&frame.payload[start..cut]);
            start = cut;
        }
        pieces.push(&frame.payload[start..]);

        let mut headers = [0xa5u8; MAX_HEADERS_LEN];
        let len = emit_headers(&frame.header, frame.msg.as_ref(), &mut headers).unwrap();
        seal(&mut headers[..len], &pieces);
        let mut gathered = headers[..len].to_vec();
        for piece in &pieces {
            gathered.extend_from_slice(piece);
        }
        prop_assert_eq!(gathered, expected);
    }

    /// Emitting into any buffer shorter than the frame fails without writing; any longer buffer
    /// receives exactly the frame.
    #[test]
    fn emit_respects_the_buffer(frame in arb_frame(), have in 0usize..400) {
        let need = headers_len(frame.header.kind) + frame.payload.len();
        let mut out = vec![0x5au8; have];
        let result = emit_frame(&frame.header, frame.msg.as_ref(), &frame.payload, &mut out);
        if have < need {
            prop_assert_eq!(result, Err(WireError::BufferTooSmall { need, have }));
            prop_assert!(out.iter().all(|&b| b == 0x5a));
        } else {
            prop_assert_eq!(result, Ok(need));
            prop_assert_eq!(&out[..need], &frame.bytes()[..]);
            prop_assert!(out[need..].iter().all(|&b| b == 0x5a));
        }
    }
}

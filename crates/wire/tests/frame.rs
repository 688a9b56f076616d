//! Example-based tests of the wire format: round trips, the exact byte layout, every error path
//! and single-bit corruption.

mod common;

use common::*;
use nicmsg_wire::{
    checksum, emit_frame, emit_headers, headers_len, seal, Flags, Frame, FrameHeader, FrameKind,
    MsgHeader, Protocol, WireError, FRAME_HEADER_LEN, MAX_HEADERS_LEN, MSG_HEADER_LEN, VERSION,
};

// ---------------------------------------------------------------------------------------------
// Round trips

#[test]
fn every_kind_round_trips_with_and_without_payload() {
    for kind in ALL_KINDS {
        let payloads: &[&[u8]] = if kind.may_carry_payload() {
            &[&[], PAYLOAD]
        } else {
            &[&[]]
        };
        for &payload in payloads {
            let header = header(kind, payload.len());
            let msg = msg_for(kind);
            let bytes = build_with(&header, msg.as_ref(), payload);
            assert_eq!(bytes.len(), headers_len(kind) + payload.len(), "{kind:?}");
            let frame = Frame::parse(&bytes).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(frame.header, header, "{kind:?}");
            assert_eq!(frame.msg, msg, "{kind:?}");
            assert_eq!(frame.payload, payload, "{kind:?}");
            // The payload is borrowed in place, right after the headers.
            assert_eq!(frame.payload.as_ptr(), bytes[headers_len(kind)..].as_ptr());
        }
    }
}

#[test]
fn a_frame_in_two_places_parses_like_the_whole_and_is_checked_the_same() {
    // LM keeps a placed frame's headers aside and reads its payload where it landed.
    for kind in ALL_KINDS.into_iter().filter(|k| k.may_carry_payload()) {
        let header = header(kind, PAYLOAD.len());
        let msg = msg_for(kind);
        let bytes = build_with(&header, msg.as_ref(), PAYLOAD);
        let (headers, payload) = bytes.split_at(headers_len(kind));
        let whole = Frame::parse(&bytes).unwrap();
        assert_eq!(Frame::parse_parts(headers, payload), Ok(whole), "{kind:?}");
        let mut other = payload.to_vec();
        other[0] ^= 1;
        assert!(
            matches!(
                Frame::parse_parts(headers, &other),
                Err(WireError::BadChecksum { .. })
            ),
            "{kind:?}: a payload byte changed"
        );
        assert!(
            Frame::parse_parts(headers, &payload[1..]).is_err(),
            "{kind:?}: a payload too short"
        );
        assert!(
            Frame::parse_parts(&bytes[..headers.len() + 1], payload).is_err(),
            "{kind:?}: headers too long"
        );
    }
}

/// A frame of `kind` carrying `PAYLOAD` whose checksum leaves the payload to the link: its
/// headers, message header and bytes.
fn link_checked_frame(kind: FrameKind) -> (FrameHeader, Option<MsgHeader>, Vec<u8>) {
    let mut header = header(kind, PAYLOAD.len());
    header.flags |= Flags::LINK_CHECKED;
    let msg = msg_for(kind);
    let mut out = vec![0u8; MAX_HEADERS_LEN + PAYLOAD.len()];
    let len = emit_frame(&header, msg.as_ref(), PAYLOAD, &mut out).unwrap();
    out.truncate(len);
    (header, msg, out)
}

#[test]
fn a_link_checked_frame_covers_its_headers_and_leaves_the_payload_to_the_link() {
    for kind in [FrameKind::Eager, FrameKind::Rts, FrameKind::Data] {
        let (header, _, mut out) = link_checked_frame(kind);
        let len = out.len();
        let bytes = &mut out[..];
        assert_eq!(Frame::parse(bytes).unwrap().header, header, "{kind:?}");
        // The payload is not in the checksum: a changed byte is the link's to catch.
        bytes[len - 1] ^= 0x10;
        assert!(Frame::parse(bytes).is_ok(), "{kind:?}: payload left out");
        // Every header byte still is, the message header's included.
        for at in 0..headers_len(kind) {
            let mut flipped = bytes.to_vec();
            flipped[at] ^= 0x04;
            assert!(
                Frame::parse(&flipped).is_err(),
                "{kind:?}: header byte {at} changed"
            );
        }
    }
}

#[test]
fn the_headers_of_a_link_checked_frame_are_verified_without_its_payload() {
    // A receiver that reads a datagram's headers ahead of it decides from them alone where the
    // payload goes: every header byte must be checked, and nothing else accepted.
    for kind in [FrameKind::Eager, FrameKind::Rts, FrameKind::Data] {
        let (header, msg, out) = link_checked_frame(kind);
        let headers = &out[..headers_len(kind)];
        assert_eq!(
            Frame::parse_link_checked_headers(headers),
            Ok((header, msg)),
            "{kind:?}"
        );
        for at in 0..headers.len() {
            let mut flipped = headers.to_vec();
            flipped[at] ^= 0x04;
            assert!(
                Frame::parse_link_checked_headers(&flipped).is_err(),
                "{kind:?}: header byte {at} changed"
            );
        }
        assert!(
            Frame::parse_link_checked_headers(&out[..headers.len() + 1]).is_err(),
            "{kind:?}: a payload byte taken for a header"
        );
        assert!(Frame::parse_link_checked_headers(&headers[..headers.len() - 1]).is_err());
        // A checksum over the payload cannot be checked from the headers.
        let plain = build_with(&self::header(kind, PAYLOAD.len()), msg.as_ref(), PAYLOAD);
        assert_eq!(
            Frame::parse_link_checked_headers(&plain[..headers_len(kind)]),
            Err(WireError::PayloadNotLinkChecked),
            "{kind:?}"
        );
    }
}

#[test]
fn only_data_bearing_frames_may_leave_their_payload_to_the_link() {
    for kind in ALL_KINDS {
        let allowed = matches!(kind, FrameKind::Eager | FrameKind::Rts | FrameKind::Data);
        assert_eq!(
            kind.allowed_flags() & Flags::LINK_CHECKED != 0,
            allowed,
            "{kind:?}"
        );
    }
}

#[test]
fn emit_into_larger_buffer_writes_only_the_frame() {
    for (kind, bytes) in samples() {
        let frame = Frame::parse(&bytes).unwrap();
        let mut out = vec![0xa5u8; bytes.len() + 10];
        let len = emit_frame(&frame.header, frame.msg.as_ref(), frame.payload, &mut out).unwrap();
        assert_eq!(len, bytes.len(), "{kind:?}");
        assert_eq!(&out[..len], &bytes[..], "{kind:?}");
        assert!(
            out[len..].iter().all(|&b| b == 0xa5),
            "{kind:?}: wrote past the frame"
        );
    }
}

#[test]
fn emit_headers_then_seal_equals_emit_frame() {
    for (kind, bytes) in samples() {
        let frame = Frame::parse(&bytes).unwrap();
        let mut headers = [0xffu8; MAX_HEADERS_LEN];
        let len = emit_headers(&frame.header, frame.msg.as_ref(), &mut headers).unwrap();
        assert_eq!(len, headers_len(kind));
        // Before sealing, the checksum field is zero.
        assert_eq!(view(&mut headers).crc(), 0);
        let (first, second) = frame.payload.split_at(frame.payload.len() / 2);
        seal(&mut headers[..len], &[first, &[], second]);
        assert_eq!(&headers[..len], &bytes[..len], "{kind:?}");
    }
}

#[test]
fn kind_codes_are_stable() {
    let codes: Vec<u8> = ALL_KINDS.iter().map(|&k| k as u8).collect();
    assert_eq!(
        codes,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x40, 0x41, 0x50, 0x51]
    );
    for kind in ALL_KINDS {
        assert_eq!(FrameKind::from_u8(kind as u8), Ok(kind));
    }
    assert_eq!(Protocol::Eager as u8, 0);
    assert_eq!(Protocol::Rendezvous as u8, 1);
    assert_eq!(Protocol::from_u8(0), Ok(Protocol::Eager));
    assert_eq!(Protocol::from_u8(1), Ok(Protocol::Rendezvous));
}

#[test]
fn kind_properties() {
    use FrameKind::*;
    for kind in ALL_KINDS {
        assert_eq!(
            kind.has_msg_header(),
            matches!(kind, Eager | Rts),
            "{kind:?}"
        );
        assert_eq!(
            kind.may_carry_payload(),
            matches!(kind, Eager | Rts | Data | PdlProgram | PdlMessage | LmData),
            "{kind:?}"
        );
        assert_eq!(
            kind.is_reserved(),
            matches!(kind, PdlProgram | PdlMessage | Admission | LmData),
            "{kind:?}"
        );
        let expected_len = if kind.has_msg_header() { 80 } else { 48 };
        assert_eq!(headers_len(kind), expected_len, "{kind:?}");
        assert_eq!(header(kind, 0).headers_len(), expected_len, "{kind:?}");
    }
}

#[test]
fn flag_bits_and_allowed_flags_are_stable() {
    assert_eq!(
        [
            Flags::RSM,
            Flags::RETRANSMIT,
            Flags::ACK_ALL,
            Flags::WAIT,
            Flags::FROM_START,
            Flags::TRUNCATED,
            Flags::REQUEST,
            Flags::ACKED,
            Flags::CREDITS,
            Flags::EAGER,
            Flags::CANCELLED,
            Flags::LINK_CHECKED,
            Flags::SMALL_CREDIT,
            Flags::MEDIUM_CREDIT,
            Flags::UNWAITED,
            Flags::KEPT
        ],
        [
            0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x100, 0x200, 0x400, 0x800, 0x1000,
            0x2000, 0x4000, 0x8000
        ]
    );
    use FrameKind::*;
    let table: [(FrameKind, u16); 16] = [
        (Eager, 0x4982),
        (Rts, 0x802),
        (Cts, 0x210),
        (Data, 0x803),
        (Ack, 0x800c),
        (End, 0x02),
        (MsgAck, 0x20),
        (Cleanup, 0x02),
        (Credit, 0x48),
        (Cancel, 0x3200),
        (CancelAck, 0x400),
        (Reset, 0),
        (PdlProgram, 0),
        (PdlMessage, 0),
        (Admission, 0),
        (LmData, Flags::RETRANSMIT),
    ];
    for (kind, allowed) in table {
        assert_eq!(kind.allowed_flags(), allowed, "{kind:?}");
    }
    let h = header(Data, 0);
    assert!(h.has_flag(Flags::RSM) && h.has_flag(Flags::RETRANSMIT) && !h.has_flag(Flags::WAIT));
}

#[test]
fn sizes() {
    assert_eq!(VERSION, 9);
    assert_eq!(FRAME_HEADER_LEN, 48);
    assert_eq!(MSG_HEADER_LEN, 32);
    assert_eq!(MAX_HEADERS_LEN, 80);
}

// ---------------------------------------------------------------------------------------------
// Exact layout: any change to these bytes is a wire-format change.

#[test]
fn frame_header_layout_is_pinned() {
    // Every multi-byte field holds the byte offsets it occupies, so the little-endian bytes of
    // the emitted header read 0x04, 0x05, ... 0x27 from offset 4 to offset 39.
    let header = FrameHeader {
        kind: FrameKind::Data,
        flags: Flags::RSM | Flags::RETRANSMIT,
        job: 0x0706_0504,
        src: 0x0b0a_0908,
        dst: 0x0f0e_0d0c,
        msg_id: 0x1312_1110,
        frame_index: 0x1716_1514,
        offset: 0x1f1e_1d1c_1b1a_1918,
        payload_len: 0x2322_2120,
        aux: 0x2726_2524,
        acked_id: 0,
    };
    let mut bytes = [0xeeu8; FRAME_HEADER_LEN];
    header.emit(&mut bytes);
    #[rustfmt::skip]
    let expected: [u8; 48] = [
        0x09, 0x04, 0x03, 0x00,  // version 9, kind DATA (4), flags RSM|RETRANSMIT (LE)
        0x04, 0x05, 0x06, 0x07,  // job
        0x08, 0x09, 0x0a, 0x0b,  // src
        0x0c, 0x0d, 0x0e, 0x0f,  // dst
        0x10, 0x11, 0x12, 0x13,  // msg_id
        0x14, 0x15, 0x16, 0x17,  // frame_index
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,  // offset
        0x20, 0x21, 0x22, 0x23,  // payload_len
        0x24, 0x25, 0x26, 0x27,  // aux
        0x00, 0x00, 0x00, 0x00,  // acked_id (reserved: zero without ACKED)
        0x00, 0x00, 0x00, 0x00,  // checksum (zero until sealed)
    ];
    assert_eq!(bytes, expected);
    // The parser reads the same fields back from those offsets.
    assert_eq!(FrameHeader::parse(&bytes), Ok(header));
}

#[test]
fn views_read_fields_where_the_pinned_layout_puts_them() {
    // Every field holds a distinct value: each accessor must read exactly its own.
    let header = FrameHeader {
        kind: FrameKind::Eager,
        flags: Flags::RETRANSMIT | Flags::ACKED,
        job: 0x0403_0201,
        src: 0x0807_0605,
        dst: 0x0c0b_0a09,
        msg_id: 0x100f_0e0d,
        frame_index: 0,
        offset: 0,
        payload_len: 3,
        aux: 0x1817_1615,
        acked_id: 0x1c1b_1a19,
    };
    let msg = MsgHeader {
        total_len: 3,
        tag: 0x2423_2221,
        frame_payload: 1024,
        protocol: Protocol::Eager,
        ack_unit: 5,
        context: 0x2625,
        immediate: Some(0x2827_2a29),
    };
    let mut bytes = build_with(&header, Some(&msg), b"abc");
    let frame = view(&mut bytes);
    let got = (
        frame.version(),
        frame.kind(),
        frame.flags(),
        (frame.job(), frame.src(), frame.dst(), frame.msg_id()),
        (frame.frame_index(), frame.offset(), frame.payload_len()),
        (frame.aux(), frame.acked_id()),
        frame.declared_len(),
    );
    assert_eq!(
        got,
        (
            VERSION,
            Ok(FrameKind::Eager),
            header.flags,
            (header.job, header.src, header.dst, header.msg_id),
            (0, 0, 3),
            (header.aux, header.acked_id),
            Some(83)
        )
    );
    let parsed_msg = Frame::parse(&bytes).expect("valid").msg;
    assert_eq!(view(&mut bytes).crc(), {
        let mut zeroed = bytes.clone();
        view(&mut zeroed).set_crc(0);
        crc32c_reference(&zeroed)
    });
    let m = msg_view(&mut bytes);
    let got = (
        m.total_len(),
        m.tag(),
        m.frame_payload(),
        m.protocol_code(),
        m.ack_unit(),
        m.context(),
    );
    assert_eq!(got, (3, msg.tag, 1024, 0, 5, msg.context));
    assert_eq!(m.reserved(), &[0; 3]);
    assert_eq!(parsed_msg, Some(msg));
}

#[test]
fn msg_header_layout_is_pinned() {
    let msg = MsgHeader {
        total_len: 0x0706_0504_0302_0100,
        tag: 0x0f0e_0d0c_0b0a_0908,
        frame_payload: 0x1312_1110,
        protocol: Protocol::Rendezvous,
        ack_unit: 0x15,
        context: 0x1716,
        immediate: Some(0x1b1a_1918),
    };
    let mut bytes = [0xeeu8; MSG_HEADER_LEN];
    msg.emit(&mut bytes);
    #[rustfmt::skip]
    let expected: [u8; 32] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,  // total_len
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,  // tag
        0x10, 0x11, 0x12, 0x13,  // frame_payload
        0x01,                    // protocol: rendezvous
        0x15,                    // ack_unit
        0x16, 0x17,              // context
        0x18, 0x19, 0x1a, 0x1b,  // immediate
        0x01,                    // message flags: immediate present
        0x00, 0x00, 0x00,        // reserved
    ];
    assert_eq!(bytes, expected);
    assert_eq!(MsgHeader::parse(&bytes), Ok(msg));
}

#[test]
fn immediate_is_rejected_without_its_flag_and_flags_unknown_are_rejected() {
    let msg = MsgHeader {
        total_len: 1,
        tag: 1,
        frame_payload: 1024,
        protocol: Protocol::Eager,
        ack_unit: 1,
        context: 0,
        immediate: None,
    };
    let mut bytes = [0u8; MSG_HEADER_LEN];
    msg.emit(&mut bytes);
    assert_eq!(MsgHeader::parse(&bytes), Ok(msg));
    let mut stray_immediate = bytes;
    stray_immediate[24] = 7;
    assert_eq!(
        MsgHeader::parse(&stray_immediate),
        Err(WireError::ReservedNotZero)
    );
    let mut unknown_flag = bytes;
    unknown_flag[28] = 0x02;
    assert_eq!(
        MsgHeader::parse(&unknown_flag),
        Err(WireError::ReservedNotZero)
    );
}

#[test]
fn whole_eager_frame_is_pinned() {
    let header = FrameHeader {
        kind: FrameKind::Eager,
        flags: 0,
        job: 1,
        src: 2,
        dst: 3,
        msg_id: 4,
        frame_index: 0,
        offset: 0,
        payload_len: 3,
        aux: 0,
        acked_id: 0,
    };
    let msg = MsgHeader {
        total_len: 3,
        tag: 9,
        frame_payload: 1024,
        protocol: Protocol::Eager,
        ack_unit: 1,
        context: 0,
        immediate: None,
    };
    let bytes = build_with(&header, Some(&msg), b"abc");
    #[rustfmt::skip]
    let expected: [u8; 83] = [
        // frame header
        0x09, 0x01, 0x00, 0x00,  // version 9, kind EAGER, no flags
        0x01, 0x00, 0x00, 0x00,  // job 1
        0x02, 0x00, 0x00, 0x00,  // src 2
        0x03, 0x00, 0x00, 0x00,  // dst 3
        0x04, 0x00, 0x00, 0x00,  // msg_id 4
        0x00, 0x00, 0x00, 0x00,  // frame_index 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // offset 0
        0x03, 0x00, 0x00, 0x00,  // payload_len 3
        0x00, 0x00, 0x00, 0x00,  // aux 0
        0x00, 0x00, 0x00, 0x00,  // acked_id (zero: no ACKED flag)
        0x1a, 0xcf, 0x8c, 0x11,  // CRC32C 0x118ccf1a, little-endian
        // message header
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // total_len 3
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // tag 9
        0x00, 0x04, 0x00, 0x00,  // frame_payload 1024
        0x00,                    // protocol: eager
        0x01,                    // ack_unit 1
        0x00, 0x00,              // context 0
        0x00, 0x00, 0x00, 0x00,  // no immediate
        0x00,                    // message flags
        0x00, 0x00, 0x00,        // reserved
        // payload
        b'a', b'b', b'c',
    ];
    assert_eq!(bytes[..], expected[..]);
}

#[test]
fn checksum_is_crc32c_over_headers_with_zero_crc_then_payload() {
    // The standard CRC32C check value pins the polynomial and the conventions.
    assert_eq!(crc32c_reference(b"123456789"), 0xe306_9283);
    for (kind, bytes) in samples() {
        let mut zeroed = bytes.clone();
        view(&mut zeroed).set_crc(0);
        let expected = crc32c_reference(&zeroed);
        let stored = view(&mut bytes.clone()).crc();
        assert_eq!(stored, expected, "{kind:?}");
        let split = headers_len(kind);
        assert_eq!(
            checksum(&bytes[..split], &[&bytes[split..]]),
            expected,
            "{kind:?}"
        );
        // The stored value does not enter the computation.
        assert_eq!(
            checksum(&zeroed[..split], &[&zeroed[split..]]),
            expected,
            "{kind:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Error paths

#[test]
fn truncated_at_every_length_below_the_headers() {
    for (kind, bytes) in samples() {
        let need = headers_len(kind);
        for len in 0..need {
            let expected_need = if len < FRAME_HEADER_LEN {
                FRAME_HEADER_LEN
            } else {
                need
            };
            assert_eq!(
                Frame::parse(&bytes[..len]),
                Err(WireError::Truncated {
                    len,
                    need: expected_need
                }),
                "{kind:?} cut to {len} bytes"
            );
        }
    }
}

#[test]
fn truncated_payload_is_a_length_mismatch() {
    for (kind, bytes) in samples() {
        let headers = headers_len(kind);
        let declared = u32::try_from(bytes.len() - headers).unwrap();
        for len in headers..bytes.len() {
            assert_eq!(
                Frame::parse(&bytes[..len]),
                Err(WireError::LengthMismatch {
                    declared,
                    actual: len - headers
                }),
                "{kind:?} cut to {len} bytes"
            );
        }
    }
}

#[test]
fn trailing_bytes_are_a_length_mismatch() {
    for (kind, bytes) in samples() {
        let headers = headers_len(kind);
        let declared = u32::try_from(bytes.len() - headers).unwrap();
        let mut longer = bytes.clone();
        longer.push(0);
        reseal(&mut longer);
        assert_eq!(
            Frame::parse(&longer),
            Err(WireError::LengthMismatch {
                declared,
                actual: declared as usize + 1
            }),
            "{kind:?}"
        );
    }
}

#[test]
fn declared_payload_length_differs_from_actual() {
    for kind in ALL_KINDS.into_iter().filter(|k| k.may_carry_payload()) {
        let mut bytes = build(kind, true);
        let actual = PAYLOAD.len();
        for declared in [0, actual as u32 - 1, actual as u32 + 1, u32::MAX] {
            view(&mut bytes).set_payload_len(declared);
            reseal(&mut bytes);
            assert_eq!(
                Frame::parse(&bytes),
                Err(WireError::LengthMismatch { declared, actual }),
                "{kind:?} declaring {declared}"
            );
        }
    }
}

#[test]
fn wrong_version() {
    for (kind, bytes) in samples() {
        for version in (0..=u8::MAX).filter(|&v| v != VERSION) {
            let mut bad = bytes.clone();
            view(&mut bad).set_version(version);
            reseal(&mut bad);
            assert_eq!(
                Frame::parse(&bad),
                Err(WireError::UnsupportedVersion(version)),
                "{kind:?}"
            );
        }
    }
}

#[test]
fn unknown_kind() {
    let known: Vec<u8> = ALL_KINDS.iter().map(|&k| k as u8).collect();
    let bytes = build(FrameKind::Cts, false);
    for code in (0..=u8::MAX).filter(|c| !known.contains(c)) {
        assert_eq!(FrameKind::from_u8(code), Err(WireError::UnknownKind(code)));
        let mut bad = bytes.clone();
        view(&mut bad).set_kind_code(code);
        reseal(&mut bad);
        assert_eq!(
            Frame::parse(&bad),
            Err(WireError::UnknownKind(code)),
            "code {code:#x}"
        );
    }
}

#[test]
fn flags_not_allowed_for_the_kind() {
    for (kind, bytes) in samples() {
        for bit in 0..16 {
            let flag = 1u16 << bit;
            let flags = kind.allowed_flags() | flag;
            let mut frame = bytes.clone();
            view(&mut frame).set_flags(flags);
            reseal(&mut frame);
            let result = Frame::parse(&frame);
            if kind.allowed_flags() & flag != 0 {
                assert!(
                    result.is_ok(),
                    "{kind:?} with allowed flag {flag:#x}: {result:?}"
                );
            } else {
                assert_eq!(
                    result,
                    Err(WireError::BadFlags { flags }),
                    "{kind:?} flag {flag:#x}"
                );
            }
        }
        // Every allowed flag may also be absent (without ACKED, the acked id with it).
        let mut no_flags = bytes.clone();
        view(&mut no_flags).set_flags(0);
        view(&mut no_flags).set_acked_id(0);
        reseal(&mut no_flags);
        assert!(Frame::parse(&no_flags).is_ok(), "{kind:?} without flags");
    }
}

#[test]
fn frame_header_reserved_bytes_must_be_zero() {
    for (kind, mut bytes) in samples() {
        // Without ACKED the acked-id word is reserved on every kind.
        let flags = view(&mut bytes).flags() & !Flags::ACKED;
        view(&mut bytes).set_flags(flags);
        view(&mut bytes).set_acked_id(0);
        for byte in 0..4 {
            for value in [1u32, 0x80, 0xff] {
                let mut bad = bytes.clone();
                view(&mut bad).set_acked_id(value << (8 * byte));
                reseal(&mut bad);
                assert_eq!(
                    Frame::parse(&bad),
                    Err(WireError::ReservedNotZero),
                    "{kind:?} byte {byte}"
                );
            }
        }
    }
}

#[test]
fn msg_header_reserved_bytes_must_be_zero() {
    for kind in [FrameKind::Eager, FrameKind::Rts] {
        for with_payload in [false, true] {
            let bytes = build(kind, with_payload);
            for at in 0..msg_view(&mut bytes.clone()).reserved().len() {
                let mut bad = bytes.clone();
                msg_view(&mut bad).reserved_mut()[at] = 1;
                reseal(&mut bad);
                assert_eq!(
                    Frame::parse(&bad),
                    Err(WireError::ReservedNotZero),
                    "{kind:?} reserved byte {at}"
                );
            }
        }
    }
}

#[test]
fn payload_on_a_kind_that_carries_none() {
    for kind in ALL_KINDS.into_iter().filter(|k| !k.may_carry_payload()) {
        for payload_len in [1u32, 100, u32::MAX] {
            // Declared but absent, and declared and present: the header alone is refused.
            let mut bytes = build(kind, false);
            view(&mut bytes).set_payload_len(payload_len);
            reseal(&mut bytes);
            assert_eq!(
                Frame::parse(&bytes),
                Err(WireError::UnexpectedPayload(payload_len)),
                "{kind:?}"
            );
            if payload_len == 100 {
                bytes.extend_from_slice(&[7; 100]);
                reseal(&mut bytes);
                assert_eq!(Frame::parse(&bytes), Err(WireError::UnexpectedPayload(100)));
            }
        }
    }
}

#[test]
fn msg_header_protocol_must_match_the_kind() {
    for (kind, wrong) in [
        (FrameKind::Eager, Protocol::Rendezvous),
        (FrameKind::Rts, Protocol::Eager),
    ] {
        let mut msg = msg_for(kind).unwrap();
        msg.protocol = wrong;
        let bytes = build_with(&header(kind, 0), Some(&msg), &[]);
        assert_eq!(
            Frame::parse(&bytes),
            Err(WireError::ProtocolMismatch),
            "{kind:?}"
        );
    }
}

#[test]
fn unknown_protocol() {
    for kind in [FrameKind::Eager, FrameKind::Rts] {
        let bytes = build(kind, false);
        for code in 2..=u8::MAX {
            assert_eq!(
                Protocol::from_u8(code),
                Err(WireError::UnknownProtocol(code))
            );
            let mut bad = bytes.clone();
            msg_view(&mut bad).set_protocol_code(code);
            reseal(&mut bad);
            assert_eq!(
                Frame::parse(&bad),
                Err(WireError::UnknownProtocol(code)),
                "{kind:?}"
            );
        }
    }
}

#[test]
fn frame_payload_must_exceed_the_msg_header() {
    // The first frame of a message carries `frame_payload - MSG_HEADER_LEN` message bytes, so
    // anything up to MSG_HEADER_LEN is refused.
    for kind in [FrameKind::Eager, FrameKind::Rts] {
        for frame_payload in [0u32, 1, MSG_HEADER_LEN as u32 - 1, MSG_HEADER_LEN as u32] {
            let mut msg = msg_for(kind).unwrap();
            msg.frame_payload = frame_payload;
            let bytes = build_with(&header(kind, 0), Some(&msg), &[]);
            assert_eq!(
                Frame::parse(&bytes),
                Err(WireError::FramePayloadTooSmall(frame_payload)),
                "{frame_payload}"
            );
        }
        for frame_payload in [MSG_HEADER_LEN as u32 + 1, u32::MAX] {
            let mut msg = msg_for(kind).unwrap();
            msg.frame_payload = frame_payload;
            let bytes = build_with(&header(kind, 0), Some(&msg), &[]);
            assert_eq!(Frame::parse(&bytes).unwrap().msg, Some(msg));
        }
    }
}

#[test]
fn ack_unit_must_be_positive() {
    for kind in [FrameKind::Eager, FrameKind::Rts] {
        let mut msg = msg_for(kind).unwrap();
        msg.ack_unit = 0;
        let bytes = build_with(&header(kind, 0), Some(&msg), &[]);
        assert_eq!(
            Frame::parse(&bytes),
            Err(WireError::ZeroAckUnit),
            "{kind:?}"
        );
        msg.ack_unit = 1;
        let bytes = build_with(&header(kind, 0), Some(&msg), &[]);
        assert!(Frame::parse(&bytes).is_ok(), "{kind:?}");
    }
}

#[test]
fn bad_checksum() {
    for (kind, bytes) in samples() {
        let computed = view(&mut bytes.clone()).crc();
        for stored in [0, computed ^ 1, !computed, computed.rotate_left(8)] {
            let mut bad = bytes.clone();
            view(&mut bad).set_crc(stored);
            assert_eq!(
                Frame::parse(&bad),
                Err(WireError::BadChecksum { stored, computed }),
                "{kind:?}"
            );
        }
        // A changed field, message header or payload byte is caught by the checksum too.
        let at = if bytes.len() > FRAME_HEADER_LEN {
            bytes.len() - 1
        } else {
            4 // the job field
        };
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        assert!(
            matches!(Frame::parse(&bad), Err(WireError::BadChecksum { stored, .. }) if stored == computed),
            "{kind:?}"
        );
    }
}

#[test]
fn emit_into_a_buffer_too_small() {
    for (kind, bytes) in samples() {
        let frame = Frame::parse(&bytes).unwrap();
        let need = bytes.len();
        for have in 0..need {
            let mut out = vec![0x5au8; have];
            assert_eq!(
                emit_frame(&frame.header, frame.msg.as_ref(), frame.payload, &mut out),
                Err(WireError::BufferTooSmall { need, have }),
                "{kind:?}"
            );
            assert!(
                out.iter().all(|&b| b == 0x5a),
                "{kind:?}: wrote into a too-small buffer"
            );
        }
        let headers = headers_len(kind);
        for have in 0..headers {
            let mut out = vec![0x5au8; have];
            assert_eq!(
                emit_headers(&frame.header, frame.msg.as_ref(), &mut out),
                Err(WireError::BufferTooSmall {
                    need: headers,
                    have
                }),
                "{kind:?}"
            );
            assert!(
                out.iter().all(|&b| b == 0x5a),
                "{kind:?}: wrote into a too-small buffer"
            );
        }
    }
}

#[test]
fn emit_headers_refuses_a_missing_msg_header() {
    let mut out = [0u8; MAX_HEADERS_LEN];
    let result = emit_headers(&header(FrameKind::Eager, 0), None, &mut out);
    assert_eq!(result, Err(WireError::ProtocolMismatch));
}

#[test]
fn emit_headers_refuses_a_msg_header_on_other_kinds() {
    let mut out = [0u8; MAX_HEADERS_LEN];
    let msg = msg_for(FrameKind::Rts).unwrap();
    let result = emit_headers(&header(FrameKind::Data, 0), Some(&msg), &mut out);
    assert_eq!(result, Err(WireError::ProtocolMismatch));
}

#[test]
fn error_messages_are_informative() {
    let cases = [
        (
            WireError::Truncated { len: 3, need: 48 },
            "frame of 3 bytes is shorter than its 48-byte headers",
        ),
        (
            WireError::UnsupportedVersion(10),
            "unsupported wire version 10 (this build speaks version 9)",
        ),
        (WireError::UnknownKind(0xab), "unknown frame type 0xab"),
        (WireError::UnknownProtocol(9), "unknown message protocol 9"),
        (
            WireError::BadFlags { flags: 0x80 },
            "flags 0x0080 not allowed on this frame type",
        ),
        (WireError::ReservedNotZero, "reserved field is not zero"),
        (
            WireError::LengthMismatch {
                declared: 5,
                actual: 4,
            },
            "payload length 5 does not match the 4 bytes present",
        ),
        (
            WireError::UnexpectedPayload(2),
            "this frame type carries no payload, found 2 bytes",
        ),
        (
            WireError::ProtocolMismatch,
            "message header disagrees with the frame type",
        ),
        (
            WireError::FramePayloadTooSmall(3),
            "frame payload size 3 leaves no room after the 32-byte message header",
        ),
        (
            WireError::BadChecksum {
                stored: 1,
                computed: 0xdeadbeef,
            },
            "checksum mismatch: header says 0x00000001, computed 0xdeadbeef",
        ),
        (
            WireError::BufferTooSmall { need: 72, have: 10 },
            "output buffer of 10 bytes is too small for 72",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.to_string(), message);
    }
}

// ---------------------------------------------------------------------------------------------
// Corruption

#[test]
fn every_single_bit_flip_is_rejected() {
    for (kind, bytes) in samples() {
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let result = Frame::parse(&bad);
            assert!(
                result.is_err(),
                "{kind:?}: flip of bit {bit} accepted: {result:?}"
            );
        }
    }
}

#[test]
fn every_single_bit_flip_in_a_full_size_frame_is_rejected() {
    // A frame the size of a jumbo Ethernet payload: CRC32C still detects every single-bit error.
    let payload: Vec<u8> = (0..9000u32).map(|i| (i * 31 + 7) as u8).collect();
    let bytes = build_with(&header(FrameKind::Data, payload.len()), None, &payload);
    assert!(Frame::parse(&bytes).is_ok());
    let mut bad = bytes.clone();
    for bit in 0..bytes.len() * 8 {
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(Frame::parse(&bad).is_err(), "flip of bit {bit} accepted");
        bad[bit / 8] ^= 1 << (bit % 8);
    }
}

#[test]
fn emit_refuses_what_parse_would_refuse() {
    let mut out = [0u8; 256];
    let mut bad_flags = header(FrameKind::Ack, 0);
    bad_flags.flags = Flags::RSM;
    assert_eq!(
        emit_frame(&bad_flags, None, &[], &mut out),
        Err(WireError::BadFlags { flags: Flags::RSM })
    );
    let mut control_with_payload = header(FrameKind::Cts, 0);
    control_with_payload.payload_len = 4;
    assert_eq!(
        emit_frame(&control_with_payload, None, &[1, 2, 3, 4], &mut out),
        Err(WireError::UnexpectedPayload(4))
    );
    let eager = header(FrameKind::Eager, 3);
    assert_eq!(
        emit_frame(&eager, None, &[1, 2, 3], &mut out),
        Err(WireError::ProtocolMismatch)
    );
    let mut msg = msg_for(FrameKind::Eager).unwrap();
    msg.ack_unit = 0;
    assert_eq!(
        emit_frame(&eager, Some(&msg), &[1, 2, 3], &mut out),
        Err(WireError::ZeroAckUnit)
    );
    let msg = msg_for(FrameKind::Eager).unwrap();
    assert_eq!(
        emit_frame(&eager, Some(&msg), &[1, 2], &mut out),
        Err(WireError::LengthMismatch {
            declared: 3,
            actual: 2
        })
    );
}

#[test]
fn checksum_is_crc32c_of_the_frame_with_its_checksum_field_zeroed() {
    // Small frames take the CPU's CRC32C instruction, large ones the crate: both must give the
    // CRC32C of the whole frame, however the payload is cut into pieces.
    let mut headers: Vec<u8> = (0..72u8).map(|b| b.wrapping_mul(37)).collect();
    // The flags word must not say the link checks the payload (it would leave it out).
    headers[3] &= !((Flags::LINK_CHECKED >> 8) as u8);
    for len in [0usize, 1, 7, 8, 9, 63, 255, 256, 439, 440, 441, 1000, 1472] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        let mut whole = headers.clone();
        view(&mut whole).set_crc(0);
        whole.extend_from_slice(&payload);
        let expected = crc32c::crc32c(&whole);
        for cut in [0, len / 3, len / 2, len] {
            let (a, b) = payload.split_at(cut);
            assert_eq!(
                checksum(&headers, &[a, b]),
                expected,
                "len {len}, cut at {cut}"
            );
        }
        assert_eq!(
            checksum(&headers, &[&payload]),
            expected,
            "len {len}, one piece"
        );
    }
}

#[test]
fn frame_len_cuts_back_to_back_frames_apart() {
    let mut datagram = Vec::new();
    let mut lengths = Vec::new();
    for (kind, payload) in [
        (FrameKind::Eager, &b"abc"[..]),
        (FrameKind::Ack, &b""[..]),
        (FrameKind::Data, &b"0123456789"[..]),
    ] {
        let header = header(kind, payload.len());
        let bytes = build_with(&header, msg_for(kind).as_ref(), payload);
        lengths.push(bytes.len());
        datagram.extend_from_slice(&bytes);
    }
    let mut rest = &datagram[..];
    for expected in lengths {
        let len = nicmsg_wire::frame_len(rest).expect("a frame header");
        assert_eq!(len, expected);
        Frame::parse(&rest[..len]).expect("each piece is a whole frame");
        rest = &rest[len..];
    }
    assert!(rest.is_empty());
    assert_eq!(
        nicmsg_wire::frame_len(&datagram[..FRAME_HEADER_LEN - 1]),
        None
    );
    let mut unknown = datagram.clone();
    view(&mut unknown).set_kind_code(0x7f);
    assert_eq!(nicmsg_wire::frame_len(&unknown), None);
}

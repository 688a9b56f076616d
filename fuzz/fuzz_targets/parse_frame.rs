//! Fuzz target for the receive path: `Frame::parse` on arbitrary bytes.
//!
//! Oracle: parsing must never panic, and any frame it accepts must be canonical: emitting the
//! parsed frame again with `emit_frame` gives back exactly the input bytes, so every accepted bit
//! of the input is accounted for by a field of `FrameHeader`, `MsgHeader` or the payload.
//!
//! Random bytes almost never carry a matching CRC32C, and the message header is only checked
//! after the checksum, so each input is also tried a second time with its checksum field
//! repaired: that copy reaches every check behind the checksum, under the same oracle.
//!
//! Run: `cargo +nightly fuzz run parse_frame -- -max_total_time=600`

#![no_main]

use libfuzzer_sys::fuzz_target;
use nicmsg_wire::{checksum, emit_frame, Frame, FrameView, WireError, FRAME_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= FRAME_HEADER_LEN {
        let mut repaired = data.to_vec();
        // The checksum is over the whole frame with the CRC field read as zero, so it does not
        // depend on where the headers end: every byte after the frame header is "payload" here.
        let (headers, rest) = repaired.split_at_mut(FRAME_HEADER_LEN);
        let crc = checksum(headers, &[rest]);
        FrameView::new_checked(headers)
            .expect("a whole header")
            .set_crc(crc);
        check(&repaired);
    }
});

fn check(data: &[u8]) {
    let Ok(frame) = Frame::parse(data) else {
        return;
    };
    assert_eq!(frame.msg.is_some(), frame.header.kind.has_msg_header());
    assert_eq!(frame.payload.len(), frame.header.payload_len as usize);

    let mut out = vec![0u8; data.len()];
    let len = emit_frame(&frame.header, frame.msg.as_ref(), frame.payload, &mut out)
        .expect("a buffer of the input's size holds the re-emitted frame");
    assert_eq!(len, data.len(), "re-emitted length differs from the input");
    assert_eq!(&out[..], data, "re-emitted bytes differ from the input");

    // One byte short must be refused, not written past.
    let short = data.len() - 1;
    let mut small = vec![0u8; short];
    assert_eq!(
        emit_frame(&frame.header, frame.msg.as_ref(), frame.payload, &mut small),
        Err(WireError::BufferTooSmall {
            need: data.len(),
            have: short
        })
    );
    // Parsing the re-emitted bytes gives the same frame.
    assert_eq!(Frame::parse(&out), Ok(frame));
}

//! Where each frame of an LM transfer sits: in the message, in a send buffer with header
//! holes, and in a receive region that is defragmented in place.
//!
//! A message of `len` bytes is cut into frames of `frame_payload` bytes (the last may be
//! shorter; a 0-byte message is one empty frame). Every frame travels with `header_len` bytes
//! of headers in front of its payload (Ethernet, IP, UDP and the frame header, as the NIC
//! writes them).
//!
//! ```text
//! send buffer (holes):   [H|payload 0][H|payload 1][H|payload 2]   each frame one piece
//! receive region:        [H][payload 0      ][payload 1      ][payload 2]
//!                         ^ frame 0 lands here (its headers fill the hole)
//!                                         ^ frame 1 lands at its payload - H: its headers
//!                                           cover the last H bytes of payload 0, which
//!                                           frame 0, arriving after it, overwrites
//! ```
//!
//! Frames are sent last first, so frame k's headers always fall on bytes that frame k-1,
//! arriving later, overwrites with its payload; frame 0's fall into the hole before the
//! message. That needs `header_len <= frame_payload`, checked in [`Geometry::new`].

use core::ops::Range;

/// The largest message LM moves as one transfer: 1 GiB. Frame indices and offsets fit in
/// the frame header's fields with room to spare, and a receive region this size is still a
/// plausible allocation inside a transport's memory.
pub const MAX_TRANSFER_BYTES: u64 = 1 << 30;

/// The largest payload of one frame: a 9000-byte jumbo frame's, which is the largest MTU the
/// transports accept with room for their headers.
pub const MAX_FRAME_PAYLOAD: usize = 9000;

/// The most header bytes a frame may carry in front of its payload: Ethernet (14), IPv6 (40),
/// UDP (8) and the frame header (48) are 110; the receive side keeps a copy of this many bytes
/// for every frame whose tail a later landing may cover ([`crate::placement`]).
pub const MAX_HEADER_LEN: usize = 128;

/// Why a geometry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error("a frame must carry payload (frame_payload is 0)")]
    NoPayload,
    #[error("frame payload {0} B is above the limit of {MAX_FRAME_PAYLOAD} B")]
    PayloadTooLarge(usize),
    #[error(
        "headers of {header_len} B do not fit in the tail of a {frame_payload}-byte payload: \
         in-place defragmentation needs header_len <= frame_payload"
    )]
    HeadersLongerThanPayload {
        header_len: usize,
        frame_payload: usize,
    },
    #[error("headers of {0} B are above the limit of {MAX_HEADER_LEN} B")]
    HeadersTooLong(usize),
    #[error("a {0}-byte transfer is above the limit of {MAX_TRANSFER_BYTES} B")]
    TransferTooLarge(u64),
}

/// The cut of messages into frames, for one header length and payload size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    header_len: usize,
    frame_payload: usize,
}

impl Geometry {
    /// A geometry whose frames carry `frame_payload` bytes behind `header_len` bytes of
    /// headers.
    pub fn new(header_len: usize, frame_payload: usize) -> Result<Self, GeometryError> {
        if frame_payload == 0 {
            return Err(GeometryError::NoPayload);
        }
        if frame_payload > MAX_FRAME_PAYLOAD {
            return Err(GeometryError::PayloadTooLarge(frame_payload));
        }
        if header_len > MAX_HEADER_LEN {
            return Err(GeometryError::HeadersTooLong(header_len));
        }
        if header_len > frame_payload {
            return Err(GeometryError::HeadersLongerThanPayload {
                header_len,
                frame_payload,
            });
        }
        Ok(Self {
            header_len,
            frame_payload,
        })
    }

    pub fn header_len(&self) -> usize {
        self.header_len
    }

    pub fn frame_payload(&self) -> usize {
        self.frame_payload
    }

    /// Checks that a message of `len` bytes may be one transfer.
    pub fn check_len(&self, len: u64) -> Result<usize, GeometryError> {
        if len > MAX_TRANSFER_BYTES {
            return Err(GeometryError::TransferTooLarge(len));
        }
        Ok(len as usize)
    }

    /// Frames of a `len`-byte message (at least one: an empty message is one empty frame).
    pub fn frames(&self, len: usize) -> u32 {
        debug_assert!(len as u64 <= MAX_TRANSFER_BYTES);
        len.div_ceil(self.frame_payload).max(1) as u32
    }

    /// The bytes of the message that frame `index` carries.
    pub fn payload_range(&self, len: usize, index: u32) -> Range<usize> {
        assert!(
            index < self.frames(len),
            "frame {index} of a {len}-byte message"
        );
        let start = index as usize * self.frame_payload;
        start..(start + self.frame_payload).min(len)
    }

    /// Payload bytes of frame `index`.
    pub fn payload_len(&self, len: usize, index: u32) -> usize {
        self.payload_range(len, index).len()
    }

    /// The frames in the order an admitted sender transmits them: last first.
    pub fn send_order(&self, len: usize) -> impl Iterator<Item = u32> {
        (0..self.frames(len)).rev()
    }

    /// Bytes of a send buffer with a header hole before every frame's payload.
    pub fn send_buffer_len(&self, len: usize) -> usize {
        let frames = self.frames(len) as usize;
        (frames - 1) * self.send_stride()
            + self.header_len
            + self.payload_len(len, frames as u32 - 1)
    }

    /// Distance between two frames in a send buffer: a hole and a full payload.
    pub fn send_stride(&self) -> usize {
        self.header_len + self.frame_payload
    }

    /// Frame `index` in a send buffer: its hole, then its payload, as one piece.
    pub fn send_frame_range(&self, len: usize, index: u32) -> Range<usize> {
        let start = index as usize * self.send_stride();
        start..start + self.header_len + self.payload_len(len, index)
    }

    /// Where byte `offset` of the message sits in a send buffer with holes.
    pub fn send_offset(&self, offset: usize) -> usize {
        let (frame, within) = (offset / self.frame_payload, offset % self.frame_payload);
        frame * self.send_stride() + self.header_len + within
    }

    /// Bytes of a receive region: the hole for frame 0's headers, then the message.
    pub fn receive_region_len(&self, len: usize) -> usize {
        self.header_len + len
    }

    /// The message's bytes inside its receive region.
    pub fn receive_payload_range(&self, len: usize) -> Range<usize> {
        self.header_len..self.header_len + len
    }

    /// Where frame `index` lands in its receive region: its payload's final place less the
    /// length of its headers.
    pub fn landing_offset(&self, index: u32) -> usize {
        index as usize * self.frame_payload
    }

    /// The bytes of the receive region that frame `index` writes when it lands in place.
    pub fn landing_range(&self, len: usize, index: u32) -> Range<usize> {
        let start = self.landing_offset(index);
        start..start + self.header_len + self.payload_len(len, index)
    }

    /// The final place of frame `index`'s payload in its receive region.
    pub fn receive_frame_range(&self, len: usize, index: u32) -> Range<usize> {
        let range = self.payload_range(len, index);
        range.start + self.header_len..range.end + self.header_len
    }

    /// The bytes of the receive region that frame `index`'s headers cover when it lands: the
    /// last `header_len` bytes of frame `index - 1`'s payload, or the hole for frame 0.
    pub fn header_shadow_range(&self, index: u32) -> Range<usize> {
        let start = self.landing_offset(index);
        start..start + self.header_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_example_cuts_into_five_frames_sent_last_first() {
        // 7168 bytes at 1480 bytes a frame (the paper's figure 1, without its 8-byte UDP
        // header in the first fragment): four full frames and a short one.
        let g = Geometry::new(36, 1480).unwrap();
        assert_eq!(g.frames(7168), 5);
        assert_eq!(g.payload_len(7168, 4), 7168 - 4 * 1480);
        assert_eq!(g.send_order(7168).collect::<Vec<_>>(), [4, 3, 2, 1, 0]);
    }

    #[test]
    fn an_empty_message_is_one_empty_frame() {
        let g = Geometry::new(90, 1400).unwrap();
        assert_eq!(g.frames(0), 1);
        assert_eq!(g.payload_range(0, 0), 0..0);
        assert_eq!(g.send_buffer_len(0), 90);
        assert_eq!(g.landing_range(0, 0), 0..90);
    }

    #[test]
    fn each_frames_headers_cover_the_tail_of_the_previous_payload() {
        let g = Geometry::new(90, 1400).unwrap();
        let len = 5000;
        for index in 1..g.frames(len) {
            let previous = g.receive_frame_range(len, index - 1);
            let shadow = g.header_shadow_range(index);
            assert_eq!(shadow.end, previous.end);
            assert_eq!(shadow.len(), 90);
            let landing = g.landing_range(len, index);
            assert_eq!(landing.start + 90, g.receive_frame_range(len, index).start);
        }
        assert_eq!(g.header_shadow_range(0), 0..90);
        assert_eq!(g.landing_range(len, 3).end, g.receive_region_len(len));
    }

    #[test]
    fn send_offsets_skip_the_holes() {
        let g = Geometry::new(10, 100).unwrap();
        assert_eq!(g.send_offset(0), 10);
        assert_eq!(g.send_offset(99), 109);
        assert_eq!(g.send_offset(100), 120);
        assert_eq!(g.send_frame_range(250, 2), 220..280);
        assert_eq!(g.send_buffer_len(250), 280);
    }

    #[test]
    fn geometries_that_cannot_defragment_in_place_are_refused() {
        assert_eq!(Geometry::new(90, 0), Err(GeometryError::NoPayload));
        assert!(matches!(
            Geometry::new(91, 90),
            Err(GeometryError::HeadersLongerThanPayload { .. })
        ));
        assert!(Geometry::new(10, MAX_FRAME_PAYLOAD + 1).is_err());
        let g = Geometry::new(10, 100).unwrap();
        assert!(g.check_len(MAX_TRANSFER_BYTES + 1).is_err());
    }
}

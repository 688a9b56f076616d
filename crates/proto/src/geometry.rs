//! How a message is cut into frames.
//!
//! Every frame of a message has the same size on the wire. Frames that carry the message header
//! (every EAGER frame, and the RTS, which is frame 0 of a rendezvous) have `MSG_HEADER_LEN` fewer
//! payload bytes. A zero-byte message is one frame with no payload.

use nicmsg_wire::{MsgHeader, Protocol, MSG_HEADER_LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub total_len: u64,
    /// Payload bytes of a frame without message header.
    pub frame_payload: u32,
    pub protocol: Protocol,
}

impl Geometry {
    /// The cut of the message a message header describes.
    pub fn of(msg: &MsgHeader) -> Self {
        Self {
            total_len: msg.total_len,
            frame_payload: msg.frame_payload,
            protocol: msg.protocol,
        }
    }

    fn first_capacity(&self) -> u64 {
        u64::from(self.frame_payload) - MSG_HEADER_LEN as u64
    }

    fn rest_capacity(&self) -> u64 {
        match self.protocol {
            Protocol::Eager => self.first_capacity(),
            Protocol::Rendezvous => u64::from(self.frame_payload),
        }
    }

    /// Number of frames, at least one. Saturates at u32::MAX for absurd lengths; the caller
    /// rejects messages whose frame count does not fit.
    pub fn frames(&self) -> u64 {
        let first = self.first_capacity();
        if self.total_len <= first {
            return 1;
        }
        1 + (self.total_len - first).div_ceil(self.rest_capacity())
    }

    pub fn offset(&self, frame: u32) -> u64 {
        if frame == 0 {
            0
        } else {
            self.first_capacity() + u64::from(frame - 1) * self.rest_capacity()
        }
    }

    /// Payload bytes of the frames before `frame` (the whole message from its frame count on).
    pub fn bytes_before(&self, frame: u32) -> u64 {
        self.offset(frame).min(self.total_len)
    }

    pub fn len(&self, frame: u32) -> u64 {
        let capacity = if frame == 0 {
            self.first_capacity()
        } else {
            self.rest_capacity()
        };
        self.total_len
            .saturating_sub(self.offset(frame))
            .min(capacity)
    }

    /// True if the message, cut as it is, has as many frames cut as an eager one: a
    /// rendezvous message taken as eager (`handover.rs`) keeps the frame count its RTS
    /// announced, while its frames are laid out as eager ones, each carrying the message
    /// header. A rendezvous frame after the first carries `MSG_HEADER_LEN` bytes more, so a
    /// long message needs more frames eager (64 KiB in frames of 1,424 bytes: 47 by
    /// rendezvous, 48 eager) and cannot be taken so: its last bytes would never be sent.
    pub fn cuts_alike_as_eager(&self) -> bool {
        let eager = Self {
            protocol: Protocol::Eager,
            ..*self
        };
        eager.frames() == self.frames()
    }

    /// True if `offset` and `len` are exactly where frame `frame` lies (a received frame that
    /// disagrees is invalid and dropped).
    pub fn agrees(&self, frame: u32, offset: u64, len: u64) -> bool {
        u64::from(frame) < self.frames() && self.offset(frame) == offset && self.len(frame) == len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_long_rendezvous_message_does_not_cut_alike_as_eager() {
        let cut = |total_len| Geometry {
            total_len,
            frame_payload: 1424,
            protocol: Protocol::Rendezvous,
        };
        assert!(cut(4096).cuts_alike_as_eager());
        assert!(cut(8192).cuts_alike_as_eager());
        assert_eq!(cut(65536).frames(), 47);
        assert!(!cut(65536).cuts_alike_as_eager());
    }

    proptest! {
        #[test]
        fn frames_tile_the_message(total_len in 0u64..200_000, payload in 100u32..9000, eager: bool) {
            let protocol = if eager { Protocol::Eager } else { Protocol::Rendezvous };
            let geometry = Geometry { total_len, frame_payload: payload, protocol };
            let frames = geometry.frames() as u32;
            let mut next = 0u64;
            for frame in 0..frames {
                prop_assert_eq!(geometry.offset(frame), next);
                let len = geometry.len(frame);
                prop_assert!(len > 0 || total_len == 0);
                next += len;
            }
            prop_assert_eq!(next, total_len);
        }
    }
}

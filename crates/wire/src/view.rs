//! Typed views over frame bytes (smoltcp's `Packet<T: AsRef<[u8]>>`): every header field by
//! name, read (and, over mutable bytes, written) at its fixed offset, after one length check.
//! For looking at a frame before, or without, checking all of it: a driver reading the sender's
//! rank of a datagram, a transport cutting a datagram into frames, a test or fuzzer building a
//! malformed frame. [`crate::Frame::parse`] remains the only way to trust a frame: a view
//! checks lengths, not meaning. Field offsets are this crate's own; nothing outside names one.

use crate::header::{field, msg_field, read_u16, read_u32, read_u64};
use crate::{headers_len, FrameKind, WireError, FRAME_HEADER_LEN, MSG_HEADER_LEN};
use core::ops::Range;

/// The 48-byte frame header at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FrameView<T> {
    /// A view of `buffer`, which must hold at least a frame header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let len = buffer.as_ref().len();
        if len < FRAME_HEADER_LEN {
            return Err(WireError::Truncated {
                len,
                need: FRAME_HEADER_LEN,
            });
        }
        Ok(Self { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn u32_at(&self, range: Range<usize>) -> u32 {
        read_u32(self.bytes(), range)
    }

    pub fn version(&self) -> u8 {
        self.bytes()[field::VERSION]
    }

    /// The kind byte as it is (see [`kind`](Self::kind) for its meaning).
    pub fn kind_code(&self) -> u8 {
        self.bytes()[field::KIND]
    }

    pub fn kind(&self) -> Result<FrameKind, WireError> {
        FrameKind::from_u8(self.kind_code())
    }

    pub fn flags(&self) -> u16 {
        read_u16(self.bytes(), field::FLAGS)
    }

    pub fn job(&self) -> u32 {
        self.u32_at(field::JOB)
    }

    /// The rank the frame claims to come from.
    pub fn src(&self) -> u32 {
        self.u32_at(field::SRC)
    }

    pub fn dst(&self) -> u32 {
        self.u32_at(field::DST)
    }

    pub fn msg_id(&self) -> u32 {
        self.u32_at(field::MSG_ID)
    }

    pub fn frame_index(&self) -> u32 {
        self.u32_at(field::FRAME_INDEX)
    }

    pub fn offset(&self) -> u64 {
        read_u64(self.bytes(), field::OFFSET)
    }

    pub fn payload_len(&self) -> u32 {
        self.u32_at(field::PAYLOAD_LEN)
    }

    pub fn aux(&self) -> u32 {
        self.u32_at(field::AUX)
    }

    pub fn acked_id(&self) -> u32 {
        self.u32_at(field::ACKED_ID)
    }

    /// The checksum the frame carries.
    pub fn crc(&self) -> u32 {
        self.u32_at(field::CRC)
    }

    /// The frame's whole length as its header declares it (headers and payload); `None` if
    /// the kind is unknown.
    pub fn declared_len(&self) -> Option<usize> {
        let kind = self.kind().ok()?;
        headers_len(kind).checked_add(self.payload_len() as usize)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FrameView<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    fn set_u32_at(&mut self, range: Range<usize>, value: u32) {
        self.bytes_mut()[range].copy_from_slice(&value.to_le_bytes());
    }

    pub fn set_version(&mut self, value: u8) {
        self.bytes_mut()[field::VERSION] = value;
    }

    pub fn set_kind_code(&mut self, value: u8) {
        self.bytes_mut()[field::KIND] = value;
    }

    pub fn set_flags(&mut self, value: u16) {
        self.bytes_mut()[field::FLAGS].copy_from_slice(&value.to_le_bytes());
    }

    pub fn set_job(&mut self, value: u32) {
        self.set_u32_at(field::JOB, value);
    }

    pub fn set_src(&mut self, value: u32) {
        self.set_u32_at(field::SRC, value);
    }

    pub fn set_dst(&mut self, value: u32) {
        self.set_u32_at(field::DST, value);
    }

    pub fn set_msg_id(&mut self, value: u32) {
        self.set_u32_at(field::MSG_ID, value);
    }

    pub fn set_frame_index(&mut self, value: u32) {
        self.set_u32_at(field::FRAME_INDEX, value);
    }

    pub fn set_offset(&mut self, value: u64) {
        self.bytes_mut()[field::OFFSET].copy_from_slice(&value.to_le_bytes());
    }

    pub fn set_payload_len(&mut self, value: u32) {
        self.set_u32_at(field::PAYLOAD_LEN, value);
    }

    pub fn set_aux(&mut self, value: u32) {
        self.set_u32_at(field::AUX, value);
    }

    pub fn set_acked_id(&mut self, value: u32) {
        self.set_u32_at(field::ACKED_ID, value);
    }

    pub fn set_crc(&mut self, value: u32) {
        self.set_u32_at(field::CRC, value);
    }

    /// Recomputes the checksum over the headers and `payload` (a frame built or altered in
    /// place: [`crate::seal`] over its parts).
    pub fn seal(&mut self, headers_len: usize, payload: &[&[u8]]) {
        crate::seal(&mut self.bytes_mut()[..headers_len], payload);
    }
}

/// The 24-byte message header at the start of `buffer` (right after the frame header on EAGER
/// and RTS frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHeaderView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MsgHeaderView<T> {
    /// A view of `buffer`, which must hold at least a message header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let len = buffer.as_ref().len();
        if len < MSG_HEADER_LEN {
            return Err(WireError::Truncated {
                len,
                need: MSG_HEADER_LEN,
            });
        }
        Ok(Self { buffer })
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn total_len(&self) -> u64 {
        read_u64(self.bytes(), msg_field::TOTAL_LEN)
    }

    pub fn tag(&self) -> u64 {
        read_u64(self.bytes(), msg_field::TAG)
    }

    pub fn frame_payload(&self) -> u32 {
        read_u32(self.bytes(), msg_field::FRAME_PAYLOAD)
    }

    /// The protocol byte as it is.
    pub fn protocol_code(&self) -> u8 {
        self.bytes()[msg_field::PROTOCOL]
    }

    pub fn ack_unit(&self) -> u8 {
        self.bytes()[msg_field::ACK_UNIT]
    }

    pub fn context(&self) -> u16 {
        read_u16(self.bytes(), msg_field::CONTEXT)
    }

    /// The reserved bytes (zero in every valid frame).
    pub fn reserved(&self) -> &[u8] {
        &self.bytes()[msg_field::RESERVED]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MsgHeaderView<T> {
    pub fn set_protocol_code(&mut self, value: u8) {
        self.buffer.as_mut()[msg_field::PROTOCOL] = value;
    }

    pub fn reserved_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[msg_field::RESERVED]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every accessor reads the offsets `docs/wire-format.md` gives: in bytes numbered by their
    /// own offset, each field reads back as those numbers, little-endian.
    #[test]
    fn accessors_read_the_documented_offsets() {
        let bytes: Vec<u8> = (0..80u8).collect();
        let le32 = |at: u8| u32::from_le_bytes([at, at + 1, at + 2, at + 3]);
        let view = FrameView::new_checked(&bytes[..]).expect("long enough");
        assert_eq!(view.version(), 0);
        assert_eq!(view.kind_code(), 1);
        assert_eq!(view.flags(), u16::from_le_bytes([2, 3]));
        assert_eq!(view.job(), le32(4));
        assert_eq!(view.src(), le32(8));
        assert_eq!(view.dst(), le32(12));
        assert_eq!(view.msg_id(), le32(16));
        assert_eq!(view.frame_index(), le32(20));
        assert_eq!(
            view.offset(),
            u64::from_le_bytes([24, 25, 26, 27, 28, 29, 30, 31])
        );
        assert_eq!(view.payload_len(), le32(32));
        assert_eq!(view.aux(), le32(36));
        assert_eq!(view.acked_id(), le32(40));
        assert_eq!(view.crc(), le32(44));
        let msg = MsgHeaderView::new_checked(&bytes[48..]).expect("long enough");
        assert_eq!(
            msg.total_len(),
            u64::from_le_bytes([48, 49, 50, 51, 52, 53, 54, 55])
        );
        assert_eq!(
            msg.tag(),
            u64::from_le_bytes([56, 57, 58, 59, 60, 61, 62, 63])
        );
        assert_eq!(msg.frame_payload(), le32(64));
        assert_eq!(msg.protocol_code(), 68);
        assert_eq!(msg.ack_unit(), 69);
        assert_eq!(msg.context(), u16::from_le_bytes([70, 71]));
        assert_eq!(msg.reserved(), &[77, 78, 79]);
    }

    #[test]
    fn setters_write_what_getters_read_and_nothing_else() {
        let mut bytes = [0u8; 48];
        let mut view = FrameView::new_checked(&mut bytes[..]).expect("long enough");
        view.set_version(1);
        view.set_kind_code(4);
        view.set_flags(0x0102);
        view.set_job(3);
        view.set_src(5);
        view.set_dst(6);
        view.set_msg_id(7);
        view.set_frame_index(8);
        view.set_offset(1 << 40);
        view.set_payload_len(9);
        view.set_aux(10);
        view.set_acked_id(11);
        view.set_crc(12);
        let got = (
            view.version(),
            view.kind(),
            view.flags(),
            (
                view.job(),
                view.src(),
                view.dst(),
                view.msg_id(),
                view.frame_index(),
            ),
            view.offset(),
            (view.payload_len(), view.aux(), view.acked_id(), view.crc()),
        );
        assert_eq!(
            got,
            (
                1,
                Ok(FrameKind::Data),
                0x0102,
                (3, 5, 6, 7, 8),
                1 << 40,
                (9, 10, 11, 12)
            )
        );
        assert_eq!(view.declared_len(), Some(48 + 9));
    }

    #[test]
    fn short_buffers_are_refused() {
        assert_eq!(
            FrameView::new_checked(&[0u8; 47][..]),
            Err(WireError::Truncated { len: 47, need: 48 })
        );
        assert!(MsgHeaderView::new_checked(&[0u8; 23][..]).is_err());
    }
}

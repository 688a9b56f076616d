//! The frame header (48 bytes, on every frame) and the message header (32 bytes, after the frame
//! header on EAGER and RTS frames). Little-endian, every field naturally aligned, fixed offsets:
//! simple to parse in an XDP program and to build in place in front of a payload.

use crate::{FrameKind, Protocol, WireError};
use core::ops::Range;

/// Wire version carried in the first byte; a frame of any other version is rejected.
pub const VERSION: u8 = 9;
/// Size of the frame header in bytes.
pub const FRAME_HEADER_LEN: usize = 48;
/// Size of the message header in bytes.
pub const MSG_HEADER_LEN: usize = 32;

/// Byte ranges of the frame header fields (smoltcp style: one named range per field). Private
/// to this crate: everyone else reads fields through [`crate::FrameView`] or [`crate::Frame`].
pub(crate) mod field {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const JOB: Range<usize> = 4..8;
    pub const SRC: Range<usize> = 8..12;
    pub const DST: Range<usize> = 12..16;
    pub const MSG_ID: Range<usize> = 16..20;
    pub const FRAME_INDEX: Range<usize> = 20..24;
    pub const OFFSET: Range<usize> = 24..32;
    pub const PAYLOAD_LEN: Range<usize> = 32..36;
    pub const AUX: Range<usize> = 36..40;
    /// EAGER with the ACKED flag: the acknowledged message id; zero on every other frame.
    pub const ACKED_ID: Range<usize> = 40..44;
    pub const CRC: Range<usize> = 44..48;
}

/// Byte ranges of the message header fields, relative to its start (private, as `field`).
pub(crate) mod msg_field {
    use core::ops::Range;
    pub const TOTAL_LEN: Range<usize> = 0..8;
    pub const TAG: Range<usize> = 8..16;
    pub const FRAME_PAYLOAD: Range<usize> = 16..20;
    pub const PROTOCOL: usize = 20;
    pub const ACK_UNIT: usize = 21;
    pub const CONTEXT: Range<usize> = 22..24;
    pub const IMMEDIATE: Range<usize> = 24..28;
    pub const MSG_FLAGS: usize = 28;
    pub const RESERVED: Range<usize> = 29..32;
}

/// Where a packet filter (AF_XDP's placing filter, which runs before any parser) reads the
/// fields it steers by: byte offsets in the frame header, each a little-endian word but `KIND`.
pub mod filter_fields {
    pub const KIND: usize = super::field::KIND;
    pub const FRAME_INDEX: usize = super::field::FRAME_INDEX.start;
    pub const AUX: usize = super::field::AUX.start;
}

const _: () = assert!(field::CRC.end == FRAME_HEADER_LEN);
const _: () = assert!(msg_field::RESERVED.end == MSG_HEADER_LEN);

pub(crate) fn read_u16(bytes: &[u8], range: Range<usize>) -> u16 {
    u16::from_le_bytes([bytes[range.start], bytes[range.start + 1]])
}

pub(crate) fn read_u32(bytes: &[u8], range: Range<usize>) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[range]);
    u32::from_le_bytes(word)
}

pub(crate) fn read_u64(bytes: &[u8], range: Range<usize>) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[range]);
    u64::from_le_bytes(word)
}

/// The meaning of a frame header, independent of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub flags: u16,
    /// Job (session) id: frames of another job are rejected by the receiver.
    pub job: u32,
    pub src: u32,
    pub dst: u32,
    /// Per sender-receiver pair sequence number of the message this frame belongs to.
    pub msg_id: u32,
    /// EAGER/RTS/DATA: index of this frame in its message. ACK: index of the frame that completed
    /// (or re-acknowledges) a collection; with ACK_ALL, how many messages after `msg_id` are
    /// acknowledged whole too (a run). CTS: cumulative number of frames granted.
    pub frame_index: u32,
    /// EAGER/RTS/DATA: byte offset of the payload in the message.
    pub offset: u64,
    /// Bytes of payload after the headers.
    pub payload_len: u32,
    /// DATA with RSM: the grant limit the window was sent under. Receiver-to-sender control
    /// (ACK, CTS, MSG-ACK, CREDIT, CANCEL-ACK) and EAGER with CREDITS: the credits returned to
    /// the frame's receiver, three cumulative counts wrapping at 1024, ten bits each from the
    /// low end: eager credits (messages of more than 4 KiB), small credits (at most 256 bytes)
    /// and medium credits (257 bytes to 4 KiB).
    pub aux: u32,
    /// EAGER with ACKED: id of a message from the frame's receiver to its sender that the sender
    /// holds whole (a piggybacked ACK with ACK_ALL). Zero on every other frame (the bytes are
    /// reserved there and rejected if not zero).
    pub acked_id: u32,
}

impl FrameHeader {
    /// Checks the meaning of raw header bytes (not the checksum; see [`crate::Frame`]).
    pub fn parse(bytes: &[u8; FRAME_HEADER_LEN]) -> Result<Self, WireError> {
        if bytes[field::VERSION] != VERSION {
            return Err(WireError::UnsupportedVersion(bytes[field::VERSION]));
        }
        let kind = FrameKind::from_u8(bytes[field::KIND])?;
        let header = Self {
            kind,
            flags: read_u16(bytes, field::FLAGS),
            job: read_u32(bytes, field::JOB),
            src: read_u32(bytes, field::SRC),
            dst: read_u32(bytes, field::DST),
            msg_id: read_u32(bytes, field::MSG_ID),
            frame_index: read_u32(bytes, field::FRAME_INDEX),
            offset: read_u64(bytes, field::OFFSET),
            payload_len: read_u32(bytes, field::PAYLOAD_LEN),
            aux: read_u32(bytes, field::AUX),
            acked_id: read_u32(bytes, field::ACKED_ID),
        };
        header.check()?;
        Ok(header)
    }

    /// The rules a frame header must keep, checked when parsing and when emitting: only the
    /// flags meaningful on its kind, no payload on kinds that carry none, and the reserved word
    /// zero unless it holds a piggybacked acknowledgement.
    pub fn check(&self) -> Result<(), WireError> {
        if self.flags & !self.kind.allowed_flags() != 0 {
            return Err(WireError::BadFlags { flags: self.flags });
        }
        if self.acked_id != 0 && !self.has_flag(crate::Flags::ACKED) {
            return Err(WireError::ReservedNotZero);
        }
        if self.payload_len != 0 && !self.kind.may_carry_payload() {
            return Err(WireError::UnexpectedPayload(self.payload_len));
        }
        Ok(())
    }

    /// Writes the header with a zero checksum field; [`crate::seal`] fills the checksum in.
    /// Writes exactly what it is given: [`crate::emit_headers`] checks the rules first.
    pub fn emit(&self, bytes: &mut [u8; FRAME_HEADER_LEN]) {
        bytes[field::VERSION] = VERSION;
        bytes[field::KIND] = self.kind as u8;
        bytes[field::FLAGS].copy_from_slice(&self.flags.to_le_bytes());
        bytes[field::JOB].copy_from_slice(&self.job.to_le_bytes());
        bytes[field::SRC].copy_from_slice(&self.src.to_le_bytes());
        bytes[field::DST].copy_from_slice(&self.dst.to_le_bytes());
        bytes[field::MSG_ID].copy_from_slice(&self.msg_id.to_le_bytes());
        bytes[field::FRAME_INDEX].copy_from_slice(&self.frame_index.to_le_bytes());
        bytes[field::OFFSET].copy_from_slice(&self.offset.to_le_bytes());
        bytes[field::PAYLOAD_LEN].copy_from_slice(&self.payload_len.to_le_bytes());
        bytes[field::AUX].copy_from_slice(&self.aux.to_le_bytes());
        bytes[field::ACKED_ID].copy_from_slice(&self.acked_id.to_le_bytes());
        bytes[field::CRC].fill(0);
    }

    pub fn has_flag(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// Length of all headers on a frame of this kind.
    pub fn headers_len(&self) -> usize {
        headers_len(self.kind)
    }
}

/// Length of all headers on a frame of `kind`.
pub fn headers_len(kind: FrameKind) -> usize {
    if kind.has_msg_header() {
        FRAME_HEADER_LEN + MSG_HEADER_LEN
    } else {
        FRAME_HEADER_LEN
    }
}

/// The length of the frame at the start of `bytes` (headers and payload), read from its header
/// without checking anything else: for cutting a datagram that holds several frames back to
/// back into frames, each then checked whole. `None` if the header is cut short or names no
/// frame kind.
pub fn frame_len(bytes: &[u8]) -> Option<usize> {
    crate::FrameView::new_checked(bytes).ok()?.declared_len()
}

/// Message header flag: `immediate` holds the sender's immediate data.
const MSG_HAS_IMMEDIATE: u8 = 1 << 0;

/// Per-message information on the first frame(s) of a message (EMP figure 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHeader {
    /// Length of the whole message in bytes.
    pub total_len: u64,
    /// Matched against posted receives: 64 bits, as libfabric's tagged messages (Open MPI packs
    /// communicator, protocol bits and MPI tag into them); nicmsg's own API uses the low 32.
    pub tag: u64,
    /// Payload bytes of a frame without message header (DATA). Frames that carry the message
    /// header (every EAGER frame, and the RTS) carry `frame_payload - MSG_HEADER_LEN` bytes, so
    /// every frame of a message has the same size on the wire. Chosen by the sender per message.
    pub frame_payload: u32,
    pub protocol: Protocol,
    /// Frames per acknowledged collection for this message.
    pub ack_unit: u8,
    /// Matching context (MPI's communicator context): a message matches only receives of its
    /// own context, whatever their wildcards. 0 is the application's; the library's own
    /// traffic (barrier) travels in another, so no user receive ever sees it.
    pub context: u16,
    /// Four bytes the receiver gets with the message's completion, not in its buffer
    /// (libfabric's remote CQ data; Open MPI sends its source rank in it).
    pub immediate: Option<u32>,
}

impl MsgHeader {
    pub fn parse(bytes: &[u8; MSG_HEADER_LEN]) -> Result<Self, WireError> {
        let flags = bytes[msg_field::MSG_FLAGS];
        if bytes[msg_field::RESERVED].iter().any(|&b| b != 0) || flags & !MSG_HAS_IMMEDIATE != 0 {
            return Err(WireError::ReservedNotZero);
        }
        let immediate = read_u32(bytes, msg_field::IMMEDIATE);
        if flags & MSG_HAS_IMMEDIATE == 0 && immediate != 0 {
            return Err(WireError::ReservedNotZero);
        }
        let msg = Self {
            total_len: read_u64(bytes, msg_field::TOTAL_LEN),
            tag: read_u64(bytes, msg_field::TAG),
            frame_payload: read_u32(bytes, msg_field::FRAME_PAYLOAD),
            protocol: Protocol::from_u8(bytes[msg_field::PROTOCOL])?,
            ack_unit: bytes[msg_field::ACK_UNIT],
            context: read_u16(bytes, msg_field::CONTEXT),
            immediate: (flags & MSG_HAS_IMMEDIATE != 0).then_some(immediate),
        };
        msg.check()?;
        Ok(msg)
    }

    /// The rules a message header must keep, checked when parsing and when emitting.
    pub fn check(&self) -> Result<(), WireError> {
        if self.frame_payload as usize <= MSG_HEADER_LEN {
            return Err(WireError::FramePayloadTooSmall(self.frame_payload));
        }
        if self.ack_unit == 0 {
            return Err(WireError::ZeroAckUnit);
        }
        Ok(())
    }

    pub fn emit(&self, bytes: &mut [u8; MSG_HEADER_LEN]) {
        bytes[msg_field::TOTAL_LEN].copy_from_slice(&self.total_len.to_le_bytes());
        bytes[msg_field::TAG].copy_from_slice(&self.tag.to_le_bytes());
        bytes[msg_field::FRAME_PAYLOAD].copy_from_slice(&self.frame_payload.to_le_bytes());
        bytes[msg_field::PROTOCOL] = self.protocol as u8;
        bytes[msg_field::ACK_UNIT] = self.ack_unit;
        bytes[msg_field::CONTEXT].copy_from_slice(&self.context.to_le_bytes());
        let immediate = self.immediate.unwrap_or(0);
        bytes[msg_field::IMMEDIATE].copy_from_slice(&immediate.to_le_bytes());
        bytes[msg_field::MSG_FLAGS] = if self.immediate.is_some() {
            MSG_HAS_IMMEDIATE
        } else {
            0
        };
        bytes[msg_field::RESERVED].fill(0);
    }
}

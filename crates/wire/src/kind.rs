//! Frame types and header flags.
//!
//! The type byte is the second byte of every frame so that a filter (an XDP program, a switch rule)
//! can classify a frame after reading two bytes.

use crate::WireError;

/// What a frame is. The numeric values are the wire encoding and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// A whole short message, or one frame of it; carries the message header (BIP short message).
    Eager = 1,
    /// Request to send a long message; carries the message header and the first data (RMPP).
    Rts = 2,
    /// Clear to send: the receiver's cumulative grant of frames it will accept (RMPP).
    Cts = 3,
    /// One frame of a long message, placed at `offset`; may carry the RSM flag (RMPP).
    Data = 4,
    /// Acknowledges the collection of frames containing `frame_index` (EMP).
    Ack = 5,
    /// The sender has had every data frame acknowledged (RMPP).
    End = 6,
    /// The receiver holds the whole message (RMPP's ACK).
    MsgAck = 7,
    /// The sender knows the message is delivered; the receiver may free its state (RMPP).
    Cleanup = 8,
    /// Returns credits of every class (cumulative counts in `aux`); with `REQUEST`, asks the
    /// peer for one;
    /// with `WAIT`, says none will come back before a later message.
    Credit = 9,
    /// The sender withdraws message `msg_id`: the receiver drops it if no receive has matched
    /// it yet (MPI's cancel of a send), and answers with CANCEL-ACK either way.
    Cancel = 10,
    /// Answer to CANCEL: with `CANCELLED` the message is withdrawn and will never be delivered;
    /// without, a receive already matched it and the send completes normally.
    CancelAck = 11,
    /// The sender has declared the frame's receiver unreachable: it drops the receiver's frames
    /// and failed every operation with it, so the receiver must fail its own with the sender
    /// (a failure is seen by both sides, never by one only).
    Reset = 12,
    /// Reserved for PANIC: a protocol program being loaded onto a remote engine.
    PdlProgram = 0x40,
    /// Reserved for PANIC: a message addressed to a running protocol program.
    PdlMessage = 0x41,
    /// LM admission control: one of its messages (request, accept, reject, end, busy, free and
    /// their answers), in the header's fields ([`crate::admission`]). Carries no payload.
    Admission = 0x50,
    /// LM: frame `frame_index` of an admitted transfer, tagged with the receiver's transfer key
    /// in `aux` so a packet filter can land it in its own place (`msg_id` is the sender's
    /// transfer number, `offset` the payload's place in the transfer).
    LmData = 0x51,
}

impl FrameKind {
    /// Every frame kind, in wire order.
    pub const ALL: [FrameKind; 16] = [
        Self::Eager,
        Self::Rts,
        Self::Cts,
        Self::Data,
        Self::Ack,
        Self::End,
        Self::MsgAck,
        Self::Cleanup,
        Self::Credit,
        Self::Cancel,
        Self::CancelAck,
        Self::Reset,
        Self::PdlProgram,
        Self::PdlMessage,
        Self::Admission,
        Self::LmData,
    ];

    /// Decodes the type byte; unknown values are an error, never a guess.
    pub fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            1 => Self::Eager,
            2 => Self::Rts,
            3 => Self::Cts,
            4 => Self::Data,
            5 => Self::Ack,
            6 => Self::End,
            7 => Self::MsgAck,
            8 => Self::Cleanup,
            9 => Self::Credit,
            10 => Self::Cancel,
            11 => Self::CancelAck,
            12 => Self::Reset,
            0x40 => Self::PdlProgram,
            0x41 => Self::PdlMessage,
            0x50 => Self::Admission,
            0x51 => Self::LmData,
            other => return Err(WireError::UnknownKind(other)),
        })
    }

    /// Frames that open a message carry a [`crate::MsgHeader`] right after the frame header.
    pub fn has_msg_header(self) -> bool {
        matches!(self, Self::Eager | Self::Rts)
    }

    /// Frames that may carry message bytes after the headers.
    pub fn may_carry_payload(self) -> bool {
        matches!(
            self,
            Self::Eager
                | Self::Rts
                | Self::Data
                | Self::PdlProgram
                | Self::PdlMessage
                | Self::LmData
        )
    }

    /// The flags that are meaningful on this kind; any other set bit makes the frame malformed.
    pub fn allowed_flags(self) -> u16 {
        let retransmit = Flags::RETRANSMIT;
        match self {
            Self::Eager => {
                retransmit | Flags::ACKED | Flags::CREDITS | Flags::LINK_CHECKED | Flags::UNWAITED
            }
            Self::Rts => retransmit | Flags::LINK_CHECKED,
            Self::Data => retransmit | Flags::RSM | Flags::LINK_CHECKED,
            Self::Ack => Flags::ACK_ALL | Flags::WAIT | Flags::KEPT,
            Self::Cts => Flags::FROM_START | Flags::EAGER,
            Self::MsgAck => Flags::TRUNCATED,
            Self::End | Self::Cleanup => retransmit,
            Self::Credit => Flags::REQUEST | Flags::WAIT,
            Self::Cancel => Flags::EAGER | Flags::SMALL_CREDIT | Flags::MEDIUM_CREDIT,
            Self::CancelAck => Flags::CANCELLED,
            Self::Reset => 0,
            Self::LmData => retransmit,
            Self::PdlProgram | Self::PdlMessage | Self::Admission => 0,
        }
    }

    /// Kinds the protocol core does not act on: parsed (so the engine can route them to their
    /// consumer, LM's admission control and placement) and dropped by the core.
    pub fn is_reserved(self) -> bool {
        matches!(
            self,
            Self::PdlProgram | Self::PdlMessage | Self::Admission | Self::LmData
        )
    }
}

/// Header flag bits. Meanings depend on the frame kind; see [`FrameKind::allowed_flags`].
pub struct Flags;

impl Flags {
    /// DATA: the receiver should grant the next window on seeing this frame (RMPP's RSM).
    pub const RSM: u16 = 1 << 0;
    /// EAGER, RTS, DATA, END, CLEANUP: this is a retransmission (statistics only).
    pub const RETRANSMIT: u16 = 1 << 1;
    /// ACK: the whole message is held by the receiver; every collection is acknowledged.
    pub const ACK_ALL: u16 = 1 << 2;
    /// ACK: the receiver is alive but has not accepted the message yet (no posted receive, or
    /// an earlier message from the same sender is not matched yet); try again later.
    /// CREDIT: the receiver's buffers for the sender are all held by messages it does not
    /// receive now, while it waits for another message: send by rendezvous, not for credits.
    pub const WAIT: u16 = 1 << 3;
    /// CTS: the receiver did not keep the data of the RTS; send from frame 0.
    pub const FROM_START: u16 = 1 << 4;
    /// MSG-ACK: the matching receive was too short; the receiver consumed the message without
    /// data, so the sender stops sending.
    pub const TRUNCATED: u16 = 1 << 5;
    /// CREDIT: please answer with a CREDIT frame (liveness probe and lost-credit recovery).
    pub const REQUEST: u16 = 1 << 6;
    /// EAGER: the frame also acknowledges, whole, the message `acked_id` that its receiver sent
    /// to its sender (a piggybacked ACK with ACK_ALL: a reply carries the acknowledgement of the
    /// request, so the request costs no acknowledgement datagram of its own).
    pub const ACKED: u16 = 1 << 7;
    /// EAGER: `aux` carries the cumulative credits of every class returned to the frame's
    /// receiver, as on receiver-to-sender control frames (credits ride on replies too).
    pub const CREDITS: u16 = 1 << 8;
    /// CANCEL: the message was sent eager and so holds one of the receiver's credits (a small
    /// one with `SMALL_CREDIT`, a medium one with `MEDIUM_CREDIT`), which withdrawing it
    /// returns (the receiver may never have seen the message).
    /// CTS (with FROM_START, wire version 7): send this rendezvous message again as an eager
    /// one; the receiver, which kept its header without a receive, now holds a buffer for it
    /// on a credit it kept back instead of returning it. Since version 8 of a message of any
    /// credit class up to the eager limit (version 7: small and medium ones only, at most
    /// 4 KiB, and a sender refused it for a longer one).
    pub const EAGER: u16 = 1 << 9;
    /// CANCEL-ACK: the message is withdrawn; it was not delivered and never will be.
    pub const CANCELLED: u16 = 1 << 10;
    /// EAGER, RTS, DATA: the checksum covers the headers only; the payload is covered by the
    /// link's own check (the UDP checksum, which the receiving kernel verifies before a socket
    /// sees the datagram). A CRC32C of the payload costs as much as a copy of it on each side;
    /// a receiver whose link checks nothing drops such frames.
    pub const LINK_CHECKED: u16 = 1 << 11;
    /// CANCEL with EAGER: the credit the withdrawn message holds is a small message's (at
    /// most 256 bytes; the receiver keeps separate buffers for those and may never have seen
    /// the message to tell).
    pub const SMALL_CREDIT: u16 = 1 << 12;
    /// CANCEL with EAGER: the credit the withdrawn message holds is a medium message's (257
    /// bytes to 4 KiB). With `SMALL_CREDIT` too the CANCEL names no class, and withdrawing its
    /// message returns no credit.
    pub const MEDIUM_CREDIT: u16 = 1 << 13;
    /// EAGER: the message's send has completed already (its bytes are the sender's copy), so
    /// nobody waits for its acknowledgement, which may wait for a carrier and gather with the
    /// acknowledgements of the messages after it. Without it the sender's request waits, and
    /// a stream's acknowledgements leave at once.
    pub const UNWAITED: u16 = 1 << 14;
    /// ACK with WAIT: the receiver keeps the message's header and asks for its data itself (a
    /// CTS) once a receive takes it, so the sender repeats its frame only as a safety net,
    /// rarely, and watches the receiver's liveness meanwhile. Without it (the receiver had no
    /// room to keep the header) the sender tries again after `rto_max_ns`.
    pub const KEPT: u16 = 1 << 15;
}

/// Message protocol recorded in the message header; must agree with the frame kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Protocol {
    Eager = 0,
    Rendezvous = 1,
}

impl Protocol {
    pub fn from_u8(value: u8) -> Result<Self, WireError> {
        match value {
            0 => Ok(Self::Eager),
            1 => Ok(Self::Rendezvous),
            other => Err(WireError::UnknownProtocol(other)),
        }
    }
}

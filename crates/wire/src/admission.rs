//! LM's admission control messages, carried in the frame header of an ADMISSION frame.
//!
//! Every message fits the header's fields, so an ADMISSION frame has no payload and is
//! checked by the header's checksum like any control frame:
//!
//! ```text
//! field        use
//! aux          the operation (AdmissionOp), 1..=13
//! msg_id       admission's transfer number (Request, Accept, Reject, End, EndAck),
//!              the receiver's admission epoch (Busy, Free and their answers), or the
//!              sender's transfer number (Grant, Resend, Delivered); 0 on Reset
//! offset       Request: the transfer's length in bytes; Grant and Resend: the frame range
//!              (low 32 bits the lowest frame, high 32 bits the highest); 0 otherwise
//! frame_index  Accept, Grant, Resend: the receiver's key for the transfer's frames (0 on
//!              Grant and Resend for a transfer received by copy); 0 otherwise
//! ```
//!
//! Grant, Resend and Delivered are not admission control but the flow of one transfer's frames
//! (`nicmsg_lm::station`): they travel in ADMISSION frames so that everything of LM is two
//! frame kinds, routed past the protocol core together.
//!
//! Unused fields must be zero ([`AdmissionRepr::from_header`] refuses anything else), so a
//! frame means one thing only.

use crate::{FrameHeader, FrameKind, WireError};

/// What an ADMISSION frame says (the LM paper's table 1, with the answers reliability needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AdmissionOp {
    /// LM_REQ: may the sender's transfer be placed?
    Request = 1,
    /// LM_ACQ_OK.
    Accept = 2,
    /// LM_ACQ_REJ.
    Reject = 3,
    /// LM_ENDME.
    End = 4,
    /// The answer to End.
    EndAck = 5,
    /// LM_APPEND_ADDR for the frame's sender.
    Busy = 6,
    /// LM_REMOVE_ADDR for the frame's sender.
    Free = 7,
    /// The answer to Busy.
    BusyAck = 8,
    /// The answer to Free.
    FreeAck = 9,
    /// The receiver of a transfer: send its frames from the top of the range down to its
    /// bottom (they have places, or a buffer, waiting).
    Grant = 10,
    /// The receiver of a transfer: frames of the range are missing; send them again.
    Resend = 11,
    /// The receiver of a transfer: every byte is in, and handed to the application.
    Delivered = 12,
    /// Peers added by address: the sender of the frame answered has no record of the
    /// conversation it names (it forgot it, or an earlier life of it held it), or gave it up;
    /// the conversation is over, and what was pending in it fails.
    Reset = 13,
}

impl AdmissionOp {
    fn from_u32(value: u32) -> Option<Self> {
        Some(match value {
            1 => Self::Request,
            2 => Self::Accept,
            3 => Self::Reject,
            4 => Self::End,
            5 => Self::EndAck,
            6 => Self::Busy,
            7 => Self::Free,
            8 => Self::BusyAck,
            9 => Self::FreeAck,
            10 => Self::Grant,
            11 => Self::Resend,
            12 => Self::Delivered,
            13 => Self::Reset,
            _ => return None,
        })
    }
}

/// The meaning of an ADMISSION frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionRepr {
    pub op: AdmissionOp,
    /// The transfer number or the epoch.
    pub number: u32,
    /// Request: the transfer's length; Grant and Resend: the frame range (see the module).
    pub len: u64,
    /// Accept, Grant and Resend: the receiver's key.
    pub key: u32,
}

impl AdmissionRepr {
    /// Reads a parsed ADMISSION header; refuses unknown operations and stray fields.
    pub fn from_header(header: &FrameHeader) -> Result<Self, WireError> {
        if header.kind != FrameKind::Admission {
            return Err(WireError::ProtocolMismatch);
        }
        let op =
            AdmissionOp::from_u32(header.aux).ok_or(WireError::UnknownAdmissionOp(header.aux))?;
        let repr = Self {
            op,
            number: header.msg_id,
            len: header.offset,
            key: header.frame_index,
        };
        repr.check()?;
        Ok(repr)
    }

    /// The header of an ADMISSION frame from `src` to `dst` in `job` saying this.
    pub fn to_header(&self, job: u32, src: u32, dst: u32) -> Result<FrameHeader, WireError> {
        self.check()?;
        Ok(FrameHeader {
            kind: FrameKind::Admission,
            flags: 0,
            job,
            src,
            dst,
            msg_id: self.number,
            frame_index: self.key,
            offset: self.len,
            payload_len: 0,
            aux: self.op as u32,
            acked_id: 0,
        })
    }

    /// Only a request, grant or resend has a length (or range), and only an accept, grant or
    /// resend a key.
    fn check(&self) -> Result<(), WireError> {
        use AdmissionOp::{Accept, Grant, Request, Resend};
        let stray_len = self.len != 0 && !matches!(self.op, Request | Grant | Resend);
        let stray_key = self.key != 0 && !matches!(self.op, Accept | Grant | Resend);
        if stray_len || stray_key {
            return Err(WireError::ReservedNotZero);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{emit_frame, Frame, FRAME_HEADER_LEN};

    fn round_trip(repr: AdmissionRepr) -> AdmissionRepr {
        let header = repr.to_header(7, 1, 2).unwrap();
        let mut bytes = [0u8; FRAME_HEADER_LEN];
        emit_frame(&header, None, &[], &mut bytes).unwrap();
        let frame = Frame::parse(&bytes).unwrap();
        AdmissionRepr::from_header(&frame.header).unwrap()
    }

    #[test]
    fn every_operation_round_trips() {
        use AdmissionOp::{Accept, Grant, Request, Resend};
        for op in 1..=13 {
            let op = AdmissionOp::from_u32(op).unwrap();
            let repr = AdmissionRepr {
                op,
                number: 41,
                len: if matches!(op, Request | Grant | Resend) {
                    1 << 33
                } else {
                    0
                },
                key: if matches!(op, Accept | Grant | Resend) {
                    5
                } else {
                    0
                },
            };
            assert_eq!(round_trip(repr), repr);
        }
    }

    #[test]
    fn unknown_operations_and_stray_fields_are_refused() {
        let mut header = AdmissionRepr {
            op: AdmissionOp::End,
            number: 1,
            len: 0,
            key: 0,
        }
        .to_header(1, 0, 1)
        .unwrap();
        header.aux = 14;
        assert_eq!(
            AdmissionRepr::from_header(&header),
            Err(WireError::UnknownAdmissionOp(14))
        );
        header.aux = AdmissionOp::End as u32;
        header.offset = 3;
        assert_eq!(
            AdmissionRepr::from_header(&header),
            Err(WireError::ReservedNotZero)
        );
        header.kind = FrameKind::Ack;
        assert!(AdmissionRepr::from_header(&header).is_err());
    }
}

//! The station's frames as bytes: LM-DATA frames written into a send buffer's holes, and
//! ADMISSION frames for admission control and for the flow of a transfer (grant, resend,
//! delivered).
//!
//! Every frame a station hands out starts with `link_len` bytes the transport fills with its
//! link headers (Ethernet, IPv4, UDP on AF_XDP) or skips (a kernel UDP socket writes its own);
//! the frame header follows. An LM-DATA frame says in `offset` the transfer's length (its
//! frame's place is `frame_index` times the frame payload, which both ends share; the length
//! check below refuses a frame cut otherwise), so a receiver can take any frame of a transfer
//! it has not heard of, in any order.

use nicmsg_wire::admission::{AdmissionOp, AdmissionRepr};
use nicmsg_wire::{emit_headers, seal, Frame, FrameHeader, FrameKind, FRAME_HEADER_LEN};

use crate::admission::{Control, PeerId};
use crate::geometry::Geometry;
use crate::send_buffer::HoleBuffer;

/// What an LM-DATA frame's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataFrame {
    /// The sender's number for the transfer.
    pub number: u32,
    /// The receiver's key for a placed transfer, 0 for one received by copy.
    pub key: u32,
    pub index: u32,
    /// The transfer's length.
    pub len: usize,
}

/// The flow of one transfer, receiver to sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Send frames from `top` down to `bottom`: they have places waiting.
    Grant {
        number: u32,
        key: u32,
        top: u32,
        bottom: u32,
    },
    /// Frames from `top` down to `bottom` may be missing: send those already sent again.
    Resend {
        number: u32,
        key: u32,
        top: u32,
        bottom: u32,
    },
    /// Every byte is in.
    Delivered { number: u32 },
}

impl Flow {
    pub(crate) fn to_repr(self) -> AdmissionRepr {
        let (op, number, key, range) = match self {
            Flow::Grant {
                number,
                key,
                top,
                bottom,
            } => (AdmissionOp::Grant, number, key, range(top, bottom)),
            Flow::Resend {
                number,
                key,
                top,
                bottom,
            } => (AdmissionOp::Resend, number, key, range(top, bottom)),
            Flow::Delivered { number } => (AdmissionOp::Delivered, number, 0, 0),
        };
        AdmissionRepr {
            op,
            number,
            len: range,
            key,
        }
    }

    fn from_repr(repr: AdmissionRepr) -> Option<Self> {
        let (number, key) = (repr.number, repr.key);
        let (top, bottom) = ((repr.len >> 32) as u32, repr.len as u32);
        Some(match repr.op {
            AdmissionOp::Grant => Flow::Grant {
                number,
                key,
                top,
                bottom,
            },
            AdmissionOp::Resend => Flow::Resend {
                number,
                key,
                top,
                bottom,
            },
            AdmissionOp::Delivered => Flow::Delivered { number },
            _ => return None,
        })
    }
}

fn range(top: u32, bottom: u32) -> u64 {
    u64::from(top) << 32 | u64::from(bottom)
}

/// A checked frame for this station.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parsed<'a> {
    Control(Control),
    Flow(Flow),
    Data(DataFrame, &'a [u8]),
}

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// Damaged, or not a frame of this job between these two nodes.
    Malformed,
    /// A valid frame of a kind the station does not take.
    NotLm,
}

/// Checks a frame of `job`, already parsed (checksum and lengths), whose (`src`, `dst`) must
/// be `pair` where given (a job's node numbers; an open station's conversation layer matched
/// the names before).
pub(crate) fn check<'a>(
    frame: Frame<'a>,
    (pair, job): (Option<(u32, u32)>, u32),
    geometry: &Geometry,
) -> Result<Parsed<'a>, Dropped> {
    let h = frame.header;
    if h.job != job || pair.is_some_and(|pair| (h.src, h.dst) != pair) {
        return Err(Dropped::Malformed);
    }
    match h.kind {
        FrameKind::Admission => {
            let repr = AdmissionRepr::from_header(&h).map_err(|_| Dropped::Malformed)?;
            match Control::from_repr(repr) {
                Some(control) => Ok(Parsed::Control(control)),
                None => Flow::from_repr(repr)
                    .map(Parsed::Flow)
                    .ok_or(Dropped::Malformed),
            }
        }
        FrameKind::LmData => {
            let len = geometry
                .check_len(h.offset)
                .map_err(|_| Dropped::Malformed)?;
            let fits = h.frame_index < geometry.frames(len)
                && frame.payload.len() == geometry.payload_len(len, h.frame_index);
            if !fits {
                return Err(Dropped::Malformed);
            }
            let data = DataFrame {
                number: h.msg_id,
                key: h.aux,
                index: h.frame_index,
                len,
            };
            Ok(Parsed::Data(data, frame.payload))
        }
        _ => Err(Dropped::NotLm),
    }
}

fn header(kind: FrameKind, job: u32, (src, dst): (PeerId, PeerId)) -> FrameHeader {
    FrameHeader {
        kind,
        flags: 0,
        job,
        src,
        dst,
        msg_id: 0,
        frame_index: 0,
        offset: 0,
        payload_len: 0,
        aux: 0,
        acked_id: 0,
    }
}

/// Writes an ADMISSION frame saying `repr` behind `link_len` bytes of `out`; returns its
/// length (link bytes included).
pub(crate) fn write_control(
    out: &mut [u8],
    link_len: usize,
    job: u32,
    (src, dst): (PeerId, PeerId),
    repr: AdmissionRepr,
) -> usize {
    let header = repr
        .to_header(job, src, dst)
        .expect("the station emits valid admission frames");
    let frame = &mut out[link_len..link_len + FRAME_HEADER_LEN];
    emit_headers(&header, None, frame).expect("room for a frame header");
    seal(frame, &[]);
    link_len + FRAME_HEADER_LEN
}

/// Writes frame `index`'s headers into its hole in `buffer` (no payload byte is copied) and
/// returns the frame as it leaves, link bytes first.
pub(crate) fn write_data(
    buffer: &mut HoleBuffer,
    link_len: usize,
    job: u32,
    pair: (PeerId, PeerId),
    (number, key, index): (u32, u32, u32),
) -> &mut [u8] {
    let mut h = header(FrameKind::LmData, job, pair);
    h.msg_id = number;
    h.aux = key;
    h.frame_index = index;
    h.offset = buffer.len() as u64;
    h.payload_len = buffer.piece(index).len() as u32;
    let mut frame_header = [0u8; FRAME_HEADER_LEN];
    emit_headers(&h, None, &mut frame_header).expect("the station emits valid data frames");
    seal(&mut frame_header, &[buffer.piece(index)]);
    buffer.header_mut(index)[link_len..link_len + FRAME_HEADER_LEN].copy_from_slice(&frame_header);
    buffer.frame_mut(index)
}

//! # nicmsg wire format
//!
//! Every frame starts with a fixed 48-byte [`FrameHeader`] (version and type first); frames that
//! open a message (EAGER, RTS) carry a 32-byte [`MsgHeader`] after it; the payload follows. A
//! CRC32C over headers and payload (headers only where the link checks the payload:
//! [`Flags::LINK_CHECKED`]) lets a receiver drop corrupt frames. All integers are
//! little-endian and naturally aligned. The byte layout is documented in `docs/wire-format.md`.
//!
//! Receive with [`Frame::parse`] (checked, zero-copy, never panics); send with [`emit_headers`]
//! then [`seal`] (payload gathered from where it lies) or [`emit_frame`] (one buffer). Read or
//! edit single header fields of raw bytes through [`FrameView`] and [`MsgHeaderView`]; the
//! field offsets are this crate's alone. PANIC's messages start with a [`program::ProgramHeader`];
//! LM's admission control messages are ADMISSION frames ([`admission::AdmissionRepr`]).

pub mod admission;
mod error;
mod frame;
mod header;
mod kind;
pub mod program;
mod view;

pub use error::WireError;
pub use frame::{checksum, emit_frame, emit_headers, seal, Frame, MAX_HEADERS_LEN};
pub use header::{
    filter_fields, frame_len, headers_len, FrameHeader, MsgHeader, FRAME_HEADER_LEN,
    MSG_HEADER_LEN, VERSION,
};
pub use kind::{Flags, FrameKind, Protocol};
pub use view::{FrameView, MsgHeaderView};

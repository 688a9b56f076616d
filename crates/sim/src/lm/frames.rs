//! The frames of the LM simulation as the device sees them: the station's ADMISSION and
//! LM-DATA frames behind 42 bytes that stand for the Ethernet, IP and UDP headers a NIC writes
//! in front of every frame (so a frame's headers are as long as on AF_XDP, and land where
//! they would). Faults reach them as bytes.

use nicmsg_lm::TransferKey;
use nicmsg_wire::{FrameKind, FrameView, FRAME_HEADER_LEN};

/// Bytes in front of the frame header as the device writes a frame (Ethernet 14, IPv4 20,
/// UDP 8).
pub const LINK_HEADER_LEN: usize = 42;
/// All the headers in front of an LM-DATA frame's payload.
pub const HEADER_LEN: usize = LINK_HEADER_LEN + FRAME_HEADER_LEN;
/// The LM simulation's job number.
pub const JOB: u32 = 0x4c4d;
/// The link header's bytes (a recognisable pattern).
pub const LINK_BYTE: u8 = 0x42;

/// What the packet filter reads of a frame without checking it (kind, key, index): the
/// steering rule's input. `None` for anything that is not LM-DATA with a key.
pub fn peek_transfer(bytes: &[u8]) -> Option<(TransferKey, u32)> {
    let view = FrameView::new_checked(bytes.get(LINK_HEADER_LEN..)?).ok()?;
    if view.kind_code() != FrameKind::LmData as u8 || view.aux() == 0 {
        return None;
    }
    Some((TransferKey(view.aux()), view.frame_index()))
}

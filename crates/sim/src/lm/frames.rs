//! The frames of the LM simulation as the device sees them: the station's ADMISSION and
//! LM-DATA frames behind 42 bytes that stand for the Ethernet, IP and UDP headers a NIC writes
//! in front of every frame (so a frame's headers are as long as on AF_XDP, and land where
//! they would). Faults reach them as bytes.

use nicmsg_wire::FRAME_HEADER_LEN;

/// Bytes in front of the frame header as the device writes a frame (Ethernet 14, IPv4 20,
/// UDP 8).
pub const LINK_HEADER_LEN: usize = 42;
/// All the headers in front of an LM-DATA frame's payload.
pub const HEADER_LEN: usize = LINK_HEADER_LEN + FRAME_HEADER_LEN;
/// The LM simulation's job number.
pub const JOB: u32 = 0x4c4d;
/// The link header's bytes (a recognisable pattern).
pub const LINK_BYTE: u8 = 0x42;

use thiserror::Error;

/// Why a byte string is not a valid frame. Every parser path ends in a value or one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("frame of {len} bytes is shorter than its {need}-byte headers")]
    Truncated { len: usize, need: usize },
    #[error("unsupported wire version {0} (this build speaks version {ver})", ver = crate::VERSION)]
    UnsupportedVersion(u8),
    #[error("unknown frame type {0:#04x}")]
    UnknownKind(u8),
    #[error("unknown message protocol {0}")]
    UnknownProtocol(u8),
    #[error("flags {flags:#06x} not allowed on this frame type")]
    BadFlags { flags: u16 },
    #[error("reserved field is not zero")]
    ReservedNotZero,
    #[error("payload length {declared} does not match the {actual} bytes present")]
    LengthMismatch { declared: u32, actual: usize },
    #[error("this frame type carries no payload, found {0} bytes")]
    UnexpectedPayload(u32),
    #[error("message header disagrees with the frame type")]
    ProtocolMismatch,
    #[error("frame payload size {0} leaves no room after the 32-byte message header")]
    FramePayloadTooSmall(u32),
    #[error("acknowledgement unit must be at least one frame")]
    ZeroAckUnit,
    #[error("the frame's checksum covers its payload: its headers cannot be verified alone")]
    PayloadNotLinkChecked,
    #[error("checksum mismatch: header says {stored:#010x}, computed {computed:#010x}")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("unknown program operation {0}")]
    UnknownProgramOp(u8),
    #[error("program message flags {0:#04x} not defined")]
    UnknownProgramFlags(u8),
    #[error("unknown admission operation {0}")]
    UnknownAdmissionOp(u32),
    #[error("output buffer of {have} bytes is too small for {need}")]
    BufferTooSmall { need: usize, have: usize },
}

//! The header of PANIC's messages: what a message to an engine's programs asks for.
//!
//! PANIC traffic travels as ordinary reliable messages of the protocol (so a lost, duplicated
//! or reordered load or trigger is recovered like any other message, and a dead peer fails it
//! like any other), in contexts of its own that no application receive can match. Each such
//! message starts with this 20-byte header; the payload follows.
//!
//! ```text
//! offset  size  field
//!      0     1  op             ProgramOp
//!      1     1  flags          bit 0: `source_program` is set (the message comes from a program)
//!      2     2  trigger        the trigger to run (op Message, Run)
//!      4     4  program        the program addressed (Message, Unload, Run)
//!      8     4  source_program the sending program, if flag bit 0
//!     12     4  request        the host's request number, echoed in the engine's answer
//!     16     4  origin         the rank whose host or program the message comes from (a
//!                              message a program passes on to its host keeps its origin)
//! ```
//!
//! Messages to a host (a program's `REPLY`, a message a program passed on, an engine's answer
//! to a request) carry the same header, and their tag says what they are ([`reply_tag`],
//! [`answer_tag`]); an answer's payload is an [`Answer`].

use crate::WireError;
use std::path::{Path, PathBuf};

/// Length of [`ProgramHeader`] on the wire.
pub const PROGRAM_HEADER_LEN: usize = 20;

/// Byte offsets of the fields (this crate's alone).
mod field {
    use core::ops::Range;
    pub const OP: usize = 0;
    pub const FLAGS: usize = 1;
    pub const TRIGGER: Range<usize> = 2..4;
    pub const PROGRAM: Range<usize> = 4..8;
    pub const SOURCE_PROGRAM: Range<usize> = 8..12;
    pub const REQUEST: Range<usize> = 12..16;
    pub const ORIGIN: Range<usize> = 16..20;
}

const FROM_PROGRAM: u8 = 1;

/// What a message to an engine asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ProgramOp {
    /// Run `trigger` of `program` with the payload as the message.
    Message = 1,
    /// Load the module in the payload (replacing a loaded program of the same id).
    Load = 2,
    /// Unload `program`.
    Unload = 3,
    /// Start `program` (its initialisation block).
    Run = 4,
    /// List the loaded programs.
    List = 5,
    /// Take the display output kept by the engine.
    Output = 6,
}

impl ProgramOp {
    fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Self::Message,
            2 => Self::Load,
            3 => Self::Unload,
            4 => Self::Run,
            5 => Self::List,
            6 => Self::Output,
            _ => return None,
        })
    }

    /// Whether an engine answers the request (everything but a program's message).
    pub fn is_request(self) -> bool {
        self != Self::Message
    }
}

/// The header of a message to an engine's programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHeader {
    pub op: ProgramOp,
    pub trigger: u16,
    pub program: u32,
    /// The sending program, or `None` for a host.
    pub source_program: Option<u32>,
    /// The host's request number (0 for a program's message).
    pub request: u32,
    /// The rank the message comes from (its host or one of its programs).
    pub origin: u32,
}

impl ProgramHeader {
    /// Reads the header at the start of `bytes`; the payload is `bytes[PROGRAM_HEADER_LEN..]`.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let Some(bytes) = bytes.get(..PROGRAM_HEADER_LEN) else {
            return Err(WireError::Truncated {
                len: bytes.len(),
                need: PROGRAM_HEADER_LEN,
            });
        };
        let op = ProgramOp::from_u8(bytes[field::OP])
            .ok_or(WireError::UnknownProgramOp(bytes[field::OP]))?;
        let flags = bytes[field::FLAGS];
        if flags & !FROM_PROGRAM != 0 {
            return Err(WireError::UnknownProgramFlags(flags));
        }
        let source_program = read_u32(bytes, field::SOURCE_PROGRAM);
        Ok(Self {
            op,
            trigger: u16::from_le_bytes([
                bytes[field::TRIGGER.start],
                bytes[field::TRIGGER.start + 1],
            ]),
            program: read_u32(bytes, field::PROGRAM),
            source_program: (flags & FROM_PROGRAM != 0).then_some(source_program),
            request: read_u32(bytes, field::REQUEST),
            origin: read_u32(bytes, field::ORIGIN),
        })
    }

    /// Writes the header into the first [`PROGRAM_HEADER_LEN`] bytes of `into`.
    ///
    /// # Panics
    /// If `into` is shorter than the header (a bug of the caller, which sizes its buffer).
    pub fn emit(&self, into: &mut [u8]) {
        let bytes = &mut into[..PROGRAM_HEADER_LEN];
        bytes[field::OP] = self.op as u8;
        bytes[field::FLAGS] = if self.source_program.is_some() {
            FROM_PROGRAM
        } else {
            0
        };
        bytes[field::TRIGGER].copy_from_slice(&self.trigger.to_le_bytes());
        bytes[field::PROGRAM].copy_from_slice(&self.program.to_le_bytes());
        bytes[field::SOURCE_PROGRAM]
            .copy_from_slice(&self.source_program.unwrap_or(0).to_le_bytes());
        bytes[field::REQUEST].copy_from_slice(&self.request.to_le_bytes());
        bytes[field::ORIGIN].copy_from_slice(&self.origin.to_le_bytes());
    }
}

fn read_u32(bytes: &[u8], range: core::ops::Range<usize>) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[range]);
    u32::from_le_bytes(word)
}

/// Tags of messages to a host in the answers' context: a program's `REPLY` has its trigger as
/// tag (below 2^16); an engine's answer to request `n` has `ANSWER_TAG_BIT | n`.
pub const ANSWER_TAG_BIT: u32 = 1 << 31;

/// The tag of a program's `REPLY` with `trigger`, as the host receives it.
pub fn reply_tag(trigger: u16) -> u32 {
    u32::from(trigger)
}

/// The tag of an engine's answer to the host's request number `request` (below 2^31).
pub fn answer_tag(request: u32) -> u32 {
    ANSWER_TAG_BIT | (request & !ANSWER_TAG_BIT)
}

/// Length of an [`Answer`]'s fixed part; UTF-8 text follows (an error's reason, a listing, the
/// display output).
pub const ANSWER_LEN: usize = 8;

/// An engine's answer to a host's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// 0: done; otherwise the request failed and the text says why.
    pub status: u32,
    /// The program the request was about (a loaded program's id).
    pub program: u32,
}

impl Answer {
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() < ANSWER_LEN {
            return Err(WireError::Truncated {
                len: bytes.len(),
                need: ANSWER_LEN,
            });
        }
        Ok(Self {
            status: read_u32(bytes, 0..4),
            program: read_u32(bytes, 4..8),
        })
    }

    /// Writes the answer into the first [`ANSWER_LEN`] bytes of `into`.
    ///
    /// # Panics
    /// If `into` is shorter than [`ANSWER_LEN`].
    pub fn emit(&self, into: &mut [u8]) {
        into[0..4].copy_from_slice(&self.status.to_le_bytes());
        into[4..8].copy_from_slice(&self.program.to_le_bytes());
    }
}

/// Where the engine of rank `rank` of job `job` takes `nicmsg pdl` requests: a Unix datagram
/// socket `DIR/nicmsg-JOB-RANK.sock`. A request is a [`ProgramHeader`] and its payload, the
/// answer an [`Answer`] and its text.
pub fn control_socket_path(dir: &Path, job: u32, rank: u32) -> PathBuf {
    dir.join(format!("nicmsg-{job}-{rank}.sock"))
}

/// The directory of control sockets: `NICMSG_CONTROL_DIR`, else the temporary directory.
pub fn control_socket_dir() -> PathBuf {
    std::env::var_os("NICMSG_CONTROL_DIR").map_or_else(std::env::temp_dir, PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written() {
        for source_program in [None, Some(0), Some(0x8000_0001)] {
            let header = ProgramHeader {
                op: ProgramOp::Message,
                trigger: 0xbeef,
                program: 0x8123_4567,
                source_program,
                request: 77,
                origin: 3,
            };
            let mut bytes = [0u8; PROGRAM_HEADER_LEN + 3];
            header.emit(&mut bytes);
            assert_eq!(ProgramHeader::parse(&bytes), Ok(header));
        }
    }

    #[test]
    fn short_or_unknown_headers_are_refused() {
        assert!(matches!(
            ProgramHeader::parse(&[1; 19]),
            Err(WireError::Truncated { len: 19, need: 20 })
        ));
        let mut bytes = [0u8; PROGRAM_HEADER_LEN];
        assert!(matches!(
            ProgramHeader::parse(&bytes),
            Err(WireError::UnknownProgramOp(0))
        ));
        bytes[0] = ProgramOp::List as u8;
        bytes[1] = 0x80;
        assert!(matches!(
            ProgramHeader::parse(&bytes),
            Err(WireError::UnknownProgramFlags(0x80))
        ));
    }

    #[test]
    fn answers_and_replies_have_tags_apart() {
        assert_eq!(reply_tag(u16::MAX) & ANSWER_TAG_BIT, 0);
        assert_ne!(answer_tag(0) & ANSWER_TAG_BIT, 0);
        let answer = Answer {
            status: 3,
            program: 9,
        };
        let mut bytes = [0u8; ANSWER_LEN];
        answer.emit(&mut bytes);
        assert_eq!(Answer::parse(&bytes), Ok(answer));
        assert!(Answer::parse(&bytes[..7]).is_err());
    }
}

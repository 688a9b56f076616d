//! A whole frame: checked zero-copy view on receive, and emit/seal for building frames.
//!
//! The checksum is CRC32C (hardware accelerated by the `crc32c` crate) over every header byte,
//! with the checksum field taken as zero, followed by every payload byte. Computing it this way
//! lets a sender build the headers in one buffer and gather the payload straight from user memory.
//! A data frame with [`Flags::LINK_CHECKED`](crate::Flags::LINK_CHECKED) leaves its payload out:
//! the link checks it.

use crate::header::{field, read_u16, read_u32, FRAME_HEADER_LEN, MSG_HEADER_LEN};
use crate::{Flags, FrameHeader, FrameKind, MsgHeader, Protocol, WireError};

/// Largest header block on any frame: frame header plus message header.
pub const MAX_HEADERS_LEN: usize = FRAME_HEADER_LEN + MSG_HEADER_LEN;

/// A received frame whose every field has been checked: the checksum matches, the lengths agree
/// with the buffer, reserved fields are zero, flags fit the type. Borrows the payload in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: FrameHeader,
    /// Present exactly on EAGER and RTS frames.
    pub msg: Option<MsgHeader>,
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Parses and verifies any byte string: returns a frame or an error, never panics and never
    /// reads out of bounds.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, WireError> {
        let header = Self::parse_header(bytes)?;
        let headers_len = header.headers_len();
        if bytes.len() < headers_len {
            return Err(WireError::Truncated {
                len: bytes.len(),
                need: headers_len,
            });
        }
        let (headers, payload) = bytes.split_at(headers_len);
        Self::check_parts(header, headers, payload)
    }

    /// Parses and verifies a frame whose header block and payload lie in two places: a frame
    /// LM placed, whose headers were kept aside before the next landing covered them and whose
    /// payload is where it landed. `headers` is exactly the header block.
    pub fn parse_parts(headers: &'a [u8], payload: &'a [u8]) -> Result<Self, WireError> {
        let header = Self::parse_header_block(headers)?;
        Self::check_parts(header, headers, payload)
    }

    /// Parses and verifies the header block of a frame whose checksum leaves its payload to
    /// the link ([`Flags::LINK_CHECKED`]), before its payload is read: everything about the
    /// frame but the payload's own bytes is then known to be as sent. A receiver that reads a
    /// datagram's headers ahead of the datagram (`MSG_PEEK`) learns from this where the payload
    /// may go. `headers` is exactly the header block; frames whose checksum covers their
    /// payload are refused, as their headers cannot be verified alone.
    pub fn parse_link_checked_headers(
        headers: &'a [u8],
    ) -> Result<(FrameHeader, Option<MsgHeader>), WireError> {
        let header = Self::parse_header_block(headers)?;
        if !header.has_flag(Flags::LINK_CHECKED) {
            return Err(WireError::PayloadNotLinkChecked);
        }
        // The checksum leaves the payload out: none is needed to check it.
        check_checksum(headers, &[])?;
        let msg = Self::parse_msg_header(header, headers)?;
        Ok((header, msg))
    }

    /// The frame header of `headers`, which must be exactly its header block.
    fn parse_header_block(headers: &[u8]) -> Result<FrameHeader, WireError> {
        let header = Self::parse_header(headers)?;
        if headers.len() != header.headers_len() {
            return Err(WireError::LengthMismatch {
                declared: header.headers_len() as u32,
                actual: headers.len(),
            });
        }
        Ok(header)
    }

    fn parse_header(bytes: &[u8]) -> Result<FrameHeader, WireError> {
        let Some(frame_header) = bytes.first_chunk::<FRAME_HEADER_LEN>() else {
            return Err(WireError::Truncated {
                len: bytes.len(),
                need: FRAME_HEADER_LEN,
            });
        };
        FrameHeader::parse(frame_header)
    }

    /// The checks after the frame header: lengths, checksum, message header. `headers` is the
    /// whole header block of `header`.
    fn check_parts(
        header: FrameHeader,
        headers: &'a [u8],
        payload: &'a [u8],
    ) -> Result<Self, WireError> {
        if payload.len() != header.payload_len as usize {
            return Err(WireError::LengthMismatch {
                declared: header.payload_len,
                actual: payload.len(),
            });
        }
        check_checksum(headers, &[payload])?;
        let msg = Self::parse_msg_header(header, headers)?;
        Ok(Self {
            header,
            msg,
            payload,
        })
    }

    /// The message header of an EAGER or RTS frame (`None` for other kinds), from the header
    /// block `headers` of `header`.
    fn parse_msg_header(
        header: FrameHeader,
        headers: &[u8],
    ) -> Result<Option<MsgHeader>, WireError> {
        if !header.kind.has_msg_header() {
            return Ok(None);
        }
        let msg_bytes: &[u8; MSG_HEADER_LEN] =
            headers[FRAME_HEADER_LEN..]
                .try_into()
                .map_err(|_| WireError::Truncated {
                    len: headers.len(),
                    need: header.headers_len(),
                })?;
        let msg = MsgHeader::parse(msg_bytes)?;
        if msg.protocol != protocol_of(header.kind) {
            return Err(WireError::ProtocolMismatch);
        }
        Ok(Some(msg))
    }
}

/// Whether the checksum sealed in `headers` is the one of `headers` and `payload`.
fn check_checksum(headers: &[u8], payload: &[&[u8]]) -> Result<(), WireError> {
    let stored = read_u32(&headers[..FRAME_HEADER_LEN], field::CRC);
    let computed = checksum(headers, payload);
    if stored != computed {
        return Err(WireError::BadChecksum { stored, computed });
    }
    Ok(())
}

/// CRC32C over the header bytes with the checksum field read as zero, then the payload pieces
/// (none when the headers say the link checks them).
pub fn checksum(headers: &[u8], payload: &[&[u8]]) -> u32 {
    debug_assert!(headers.len() >= FRAME_HEADER_LEN);
    let payload = if payload_link_checked(headers) {
        &[]
    } else {
        payload
    };
    if let Some(crc) = small_frame_checksum(headers, payload) {
        return crc;
    }
    let mut crc = crc32c::crc32c(&headers[..field::CRC.start]);
    crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc = crc32c::crc32c_append(crc, &headers[field::CRC.end..]);
    for piece in payload {
        crc = crc32c::crc32c_append(crc, piece);
    }
    crc
}

/// True if the headers carry [`Flags::LINK_CHECKED`]: the checksum leaves the payload out.
/// Only a parsed frame's flags are known to be allowed on its kind; for raw bytes this reads
/// the bit as it is, which is what the sealed checksum was computed with.
fn payload_link_checked(headers: &[u8]) -> bool {
    headers.len() >= FRAME_HEADER_LEN && read_u16(headers, field::FLAGS) & Flags::LINK_CHECKED != 0
}

/// Frames up to this many bytes are checksummed by [`small_frame_checksum`].
const SMALL_FRAME_CHECKSUM: usize = 512;

/// The checksum of a small frame (a short message, a control frame) straight from its pieces
/// with the CPU's CRC32C instruction: a call into the `crc32c` crate costs a fixed setup of about
/// a hundred instructions, more than the 80 bytes of a ping-pong frame, and a frame has four
/// pieces (the header around its checksum field, then the payload). `None` for larger frames
/// or a CPU without the instruction, which the crate then handles.
fn small_frame_checksum(headers: &[u8], payload: &[&[u8]]) -> Option<u32> {
    let total = headers.len() + payload.iter().map(|p| p.len()).sum::<usize>();
    if total > SMALL_FRAME_CHECKSUM {
        return None;
    }
    hardware::checksum(headers, payload)
}

#[cfg(target_arch = "x86_64")]
mod hardware {
    use super::field;
    use core::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};

    /// The frame checksum with SSE 4.2's `crc32` instruction (the Castagnoli polynomial), or
    /// `None` without SSE 4.2.
    pub fn checksum(headers: &[u8], payload: &[&[u8]]) -> Option<u32> {
        if !std::arch::is_x86_feature_detected!("sse4.2") {
            return None;
        }
        // SAFETY: SSE 4.2 is present (checked above).
        Some(unsafe { checksum_sse42(headers, payload) })
    }

    /// # Safety
    /// The CPU has SSE 4.2.
    #[target_feature(enable = "sse4.2")]
    unsafe fn checksum_sse42(headers: &[u8], payload: &[&[u8]]) -> u32 {
        let mut state = !0u32;
        // SAFETY: `update` needs SSE 4.2, which this function's contract guarantees.
        unsafe {
            state = update(state, &headers[..field::CRC.start]);
            state = update(state, &[0u8; 4]);
            state = update(state, &headers[field::CRC.end..]);
            for piece in payload {
                state = update(state, piece);
            }
        }
        !state
    }

    /// Feeds `bytes` into a running CRC32C state (not inverted): eight bytes per instruction,
    /// then the tail byte by byte.
    ///
    /// # Safety
    /// The CPU has SSE 4.2.
    #[target_feature(enable = "sse4.2")]
    #[inline]
    unsafe fn update(state: u32, bytes: &[u8]) -> u32 {
        let words = bytes.len() / 8;
        let mut wide = u64::from(state);
        for word in 0..words {
            // SAFETY: `word * 8 + 8 <= bytes.len()`; unaligned reads are allowed.
            let value = unsafe { bytes.as_ptr().add(word * 8).cast::<u64>().read_unaligned() };
            wide = _mm_crc32_u64(wide, u64::from_le(value));
        }
        let mut state = wide as u32;
        for &byte in &bytes[words * 8..] {
            state = _mm_crc32_u8(state, byte);
        }
        state
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod hardware {
    pub fn checksum(_headers: &[u8], _payload: &[&[u8]]) -> Option<u32> {
        None
    }
}

/// Writes the headers of a frame into `out` and returns their length. The payload is not copied:
/// the caller sends it from where it lies, then calls [`seal`] with the same pieces.
pub fn emit_headers(
    header: &FrameHeader,
    msg: Option<&MsgHeader>,
    out: &mut [u8],
) -> Result<usize, WireError> {
    let len = header.headers_len();
    if out.len() < len {
        return Err(WireError::BufferTooSmall {
            need: len,
            have: out.len(),
        });
    }
    header.check()?;
    check_msg_header(header.kind, msg)?;
    let (frame_bytes, rest) = out.split_at_mut(FRAME_HEADER_LEN);
    header.emit(frame_bytes.try_into().expect("split at header length"));
    if let Some(msg) = msg {
        msg.emit(
            (&mut rest[..MSG_HEADER_LEN])
                .try_into()
                .expect("message header length"),
        );
    }
    Ok(len)
}

/// A message header is present exactly on EAGER and RTS frames, valid, and names the protocol
/// of its frame kind.
fn check_msg_header(kind: FrameKind, msg: Option<&MsgHeader>) -> Result<(), WireError> {
    match msg {
        None if kind.has_msg_header() => Err(WireError::ProtocolMismatch),
        Some(_) if !kind.has_msg_header() => Err(WireError::ProtocolMismatch),
        None => Ok(()),
        Some(msg) => {
            msg.check()?;
            if msg.protocol != protocol_of(kind) {
                return Err(WireError::ProtocolMismatch);
            }
            Ok(())
        }
    }
}

fn protocol_of(kind: FrameKind) -> Protocol {
    match kind {
        FrameKind::Eager => Protocol::Eager,
        _ => Protocol::Rendezvous,
    }
}

/// Fills in the checksum of headers already emitted, over those headers and the payload pieces.
pub fn seal(headers: &mut [u8], payload: &[&[u8]]) {
    let crc = checksum(headers, payload);
    headers[field::CRC].copy_from_slice(&crc.to_le_bytes());
}

/// Builds a complete frame into `out` (headers, copied payload, checksum); returns its length.
/// Convenient for control frames and tests; the data path uses [`emit_headers`] and [`seal`].
pub fn emit_frame(
    header: &FrameHeader,
    msg: Option<&MsgHeader>,
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, WireError> {
    let headers_len = header.headers_len();
    let total = headers_len + payload.len();
    if out.len() < total {
        return Err(WireError::BufferTooSmall {
            need: total,
            have: out.len(),
        });
    }
    if header.payload_len as usize != payload.len() {
        return Err(WireError::LengthMismatch {
            declared: header.payload_len,
            actual: payload.len(),
        });
    }
    emit_headers(header, msg, out)?;
    out[headers_len..total].copy_from_slice(payload);
    let (headers, body) = out[..total].split_at_mut(headers_len);
    seal(headers, &[body]);
    Ok(total)
}

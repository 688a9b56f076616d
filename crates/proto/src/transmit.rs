//! A frame ready to leave: headers built by the core, payload still in host memory, or, for a
//! short message the core copied when it was posted, inside the frame itself.

use crate::copy::copy_bytes;
use crate::memory::{HostMemory, Segment, MAX_SEGMENTS};
use crate::Rank;
use nicmsg_wire::{seal, MAX_HEADERS_LEN};

/// Payload bytes a frame carries inside the `Transmit` itself: as many as its list of pieces
/// takes, so carrying them makes no frame bigger.
pub const INLINE_PAYLOAD_MAX: usize = 256;
const _: () = assert!(INLINE_PAYLOAD_MAX <= MAX_SEGMENTS * core::mem::size_of::<Segment>());

/// One frame to send to `dst`: the header bytes followed by the payload, in order. A driver
/// hands the header, the inline payload and the pieces to the kernel as one iovec list (no
/// staging copy).
///
/// The payload is pieces of host memory, gathered by the driver, or bytes the core holds (a
/// short send copied at post time), never both. A driver keeps its frames in place and has the
/// core build each into one ([`Endpoint::poll_transmit_into`](crate::Endpoint::poll_transmit_into)):
/// building touches only the bytes a frame uses, while moving a 700-byte value costs a copy of all
/// of it.
#[derive(Debug, Clone)]
pub struct Transmit {
    pub dst: Rank,
    headers: [u8; MAX_HEADERS_LEN],
    headers_len: u8,
    pieces: [Segment; MAX_SEGMENTS],
    piece_count: u8,
    inline: [u8; INLINE_PAYLOAD_MAX],
    inline_len: u16,
}

impl Default for Transmit {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Transmit {
    pub fn new(dst: Rank) -> Self {
        Self {
            dst,
            headers: [0; MAX_HEADERS_LEN],
            headers_len: 0,
            pieces: [Segment::default(); MAX_SEGMENTS],
            piece_count: 0,
            inline: [0; INLINE_PAYLOAD_MAX],
            inline_len: 0,
        }
    }

    /// Makes this an empty frame to `dst`, to be built in place.
    pub(crate) fn reset(&mut self, dst: Rank) {
        self.dst = dst;
        self.headers_len = 0;
        self.piece_count = 0;
        self.inline_len = 0;
    }

    pub(crate) fn headers_buf(&mut self) -> &mut [u8; MAX_HEADERS_LEN] {
        &mut self.headers
    }

    pub(crate) fn set_headers_len(&mut self, len: usize) {
        self.headers_len = len as u8;
    }

    pub(crate) fn push_piece(&mut self, piece: Segment) {
        debug_assert_eq!(
            self.inline_len, 0,
            "a frame's payload is pieces or inline, not both"
        );
        self.pieces[usize::from(self.piece_count)] = piece;
        self.piece_count += 1;
    }

    /// Carries `payload` (at most [`INLINE_PAYLOAD_MAX`] bytes) inside the frame.
    pub(crate) fn set_inline(&mut self, payload: &[u8]) {
        debug_assert_eq!(
            self.piece_count, 0,
            "a frame's payload is pieces or inline, not both"
        );
        self.inline[..payload.len()].copy_from_slice(payload);
        self.inline_len = payload.len() as u16;
    }

    /// Fills in the checksum over the headers and the payload, inline or in host memory. Pieces
    /// were validated at post time; a region that disappeared since is checksummed as absent,
    /// so the receiver drops the frame.
    pub(crate) fn seal(&mut self, memory: &impl HostMemory) {
        let headers = &mut self.headers[..self.headers_len as usize];
        if self.inline_len > 0 || self.piece_count == 0 {
            seal(headers, &[&self.inline[..usize::from(self.inline_len)]]);
            return;
        }
        let count = usize::from(self.piece_count);
        let mut slices: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
        for (slot, piece) in slices.iter_mut().zip(&self.pieces[..count]) {
            let start = piece.offset as usize;
            *slot = memory
                .region(piece.region)
                .and_then(|region| region.get(start..start + piece.len as usize))
                .unwrap_or(&[]);
        }
        seal(headers, &slices[..count]);
    }

    /// The frame and message headers, checksum included.
    pub fn headers(&self) -> &[u8] {
        &self.headers[..self.headers_len as usize]
    }

    /// Payload carried inside the frame (empty unless the core copied a short message); it
    /// follows the headers, and a frame has either inline payload or pieces.
    pub fn inline_payload(&self) -> &[u8] {
        &self.inline[..usize::from(self.inline_len)]
    }

    /// Payload pieces, in order, in host memory.
    pub fn pieces(&self) -> &[Segment] {
        &self.pieces[..usize::from(self.piece_count)]
    }

    /// Length of the whole frame in bytes.
    pub fn len(&self) -> usize {
        self.headers_len as usize
            + self.inline_payload().len()
            + self.pieces().iter().map(|p| p.len as usize).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the whole frame into `out` (for backends without gather, and for tests). Returns
    /// the length, or `None` if `out` is too small or a piece's region is gone.
    pub fn gather_into(&self, memory: &impl HostMemory, out: &mut [u8]) -> Option<usize> {
        let total = self.len();
        if out.len() < total {
            return None;
        }
        let mut at = 0;
        for bytes in [self.headers(), self.inline_payload()] {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
        for piece in self.pieces() {
            let region = memory.region(piece.region)?;
            let start = piece.offset as usize;
            let bytes = region.get(start..start + piece.len as usize)?;
            copy_bytes(&mut out[at..at + bytes.len()], bytes);
            at += bytes.len();
        }
        Some(total)
    }
}

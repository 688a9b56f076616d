//! A frame ready to leave: headers built by the core, payload still in host memory.

use crate::memory::{HostMemory, Segment, MAX_SEGMENTS};
use crate::Rank;
use nicmsg_wire::MAX_HEADERS_LEN;

/// One frame to send to `dst`: the header bytes followed by the payload pieces, in order. A
/// driver hands the header and the pieces to the kernel as one iovec list (no staging copy).
#[derive(Debug, Clone)]
pub struct Transmit {
    pub dst: Rank,
    headers: [u8; MAX_HEADERS_LEN],
    headers_len: u8,
    pieces: [Segment; MAX_SEGMENTS],
    piece_count: u8,
}

impl Transmit {
    pub(crate) fn new(dst: Rank) -> Self {
        Self {
            dst,
            headers: [0; MAX_HEADERS_LEN],
            headers_len: 0,
            pieces: [Segment::default(); MAX_SEGMENTS],
            piece_count: 0,
        }
    }

    pub(crate) fn headers_buf(&mut self) -> &mut [u8; MAX_HEADERS_LEN] {
        &mut self.headers
    }

    pub(crate) fn set_headers_len(&mut self, len: usize) {
        self.headers_len = len as u8;
    }

    pub(crate) fn push_piece(&mut self, piece: Segment) {
        self.pieces[self.piece_count as usize] = piece;
        self.piece_count += 1;
    }

    /// The frame and message headers, checksum included.
    pub fn headers(&self) -> &[u8] {
        &self.headers[..self.headers_len as usize]
    }

    /// Payload pieces, in order, in host memory.
    pub fn pieces(&self) -> &[Segment] {
        &self.pieces[..self.piece_count as usize]
    }

    /// Length of the whole frame in bytes.
    pub fn len(&self) -> usize {
        self.headers_len as usize + self.pieces().iter().map(|p| p.len as usize).sum::<usize>()
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
        let headers = self.headers();
        out[..headers.len()].copy_from_slice(headers);
        let mut at = headers.len();
        for piece in self.pieces() {
            let region = memory.region(piece.region)?;
            let start = piece.offset as usize;
            let bytes = region.get(start..start + piece.len as usize)?;
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
        Some(total)
    }
}

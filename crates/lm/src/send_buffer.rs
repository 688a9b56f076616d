//! The sending side of LM: a message laid out in a send buffer with a header hole before every
//! frame's payload (the paper's application-level fragmentation, section 3.1).
//!
//! ```text
//! message:       [payload 0      ][payload 1      ][payload 2]
//! send buffer:   [H][payload 0      ][H][payload 1      ][H][payload 2]
//!                 ^ header_mut(0)    ^ header_mut(1)     ^ header_mut(2)
//!                \____ frame(0) ____/\____ frame(1) ____/\__ frame(2) _/
//! frames leave:  frame(2), frame(1), frame(0)            (frames_last_first)
//! ```
//!
//! The application writes its message straight into the payload pieces ([`HoleBuffer::write_at`],
//! [`HoleBuffer::pieces_mut`]); the library then writes each frame's headers into the hole in
//! front of its payload. Every frame is thus one contiguous slice, headers and payload together,
//! which a NIC sends with one descriptor: no gather list and no copy of the message into frames.
//! Frames go out last first so the receiver can defragment in place (see [`crate::geometry`]).
//!
//! A buffer lives on the heap ([`HoleBuffer::new`]) or in memory a transport lends
//! ([`HoleBuffer::in_memory`]): an AF_XDP socket's UMEM, from which each frame leaves as one
//! transmit descriptor where the application wrote it.

use core::fmt;
use core::ops::Range;

use crate::geometry::{Geometry, GeometryError};

/// Why a send buffer cannot be made or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendBufferError {
    #[error("cannot lay out a send buffer: {0}")]
    Geometry(#[from] GeometryError),
    #[error(
        "{len} B at message offset {offset} run past the end of the {message_len}-byte message"
    )]
    OutOfBounds {
        offset: usize,
        len: usize,
        message_len: usize,
    },
    #[error("the send buffer needs {needed} B, the memory lent for it holds {available} B")]
    MemoryTooSmall { needed: usize, available: usize },
}

/// Memory a transport lends for a send buffer, so frames leave from where they were written
/// (e.g. a piece of an AF_XDP socket's UMEM). Returned to the transport when dropped.
pub trait SendMemory: Send {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// Where a buffer's bytes are.
enum Backing {
    Heap(Vec<u8>),
    /// Lent memory, of which the buffer uses the first `used` bytes.
    Lent {
        memory: Box<dyn SendMemory>,
        used: usize,
    },
}

/// A message of `len` bytes in a send buffer with a header hole before each frame's payload.
pub struct HoleBuffer {
    /// The whole buffer, holes included, allocated once so frames never move while the
    /// transport still holds them.
    backing: Backing,
    geometry: Geometry,
    len: usize,
}

impl HoleBuffer {
    /// A zeroed send buffer for a message of `len` bytes cut by `geometry`.
    pub fn new(geometry: Geometry, len: u64) -> Result<Self, SendBufferError> {
        let len = geometry.check_len(len)?;
        Ok(Self {
            backing: Backing::Heap(vec![0; geometry.send_buffer_len(len)]),
            geometry,
            len,
        })
    }

    /// A zeroed send buffer in `memory`, which must hold at least
    /// [`Geometry::send_buffer_len`] bytes (on an error the memory is dropped, which gives it
    /// back to its transport).
    pub fn in_memory(
        geometry: Geometry,
        len: u64,
        mut memory: Box<dyn SendMemory>,
    ) -> Result<Self, SendBufferError> {
        let len = geometry.check_len(len)?;
        let used = geometry.send_buffer_len(len);
        let available = memory.bytes().len();
        if available < used {
            return Err(SendBufferError::MemoryTooSmall {
                needed: used,
                available,
            });
        }
        memory.bytes_mut()[..used].fill(0);
        Ok(Self {
            backing: Backing::Lent { memory, used },
            geometry,
            len,
        })
    }

    /// Whether the buffer is in memory a transport lent.
    pub fn is_lent(&self) -> bool {
        matches!(self.backing, Backing::Lent { .. })
    }

    /// The whole buffer, holes included.
    fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Heap(bytes) => bytes,
            Backing::Lent { memory, used } => &memory.bytes()[..*used],
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.backing {
            Backing::Heap(bytes) => bytes,
            Backing::Lent { memory, used } => &mut memory.bytes_mut()[..*used],
        }
    }

    /// Bytes of the message (holes not counted).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Frames of the message (at least one: an empty message is one empty frame).
    pub fn frames(&self) -> u32 {
        self.geometry.frames(self.len)
    }

    /// Writes `bytes` at message offset `offset`, skipping the holes it crosses.
    pub fn write_at(&mut self, offset: usize, bytes: &[u8]) -> Result<(), SendBufferError> {
        self.check_span(offset, bytes.len())?;
        let mut rest = bytes;
        for range in buffer_spans(self.geometry, offset, bytes.len()) {
            let (head, tail) = rest.split_at(range.len());
            self.bytes_mut()[range].copy_from_slice(head);
            rest = tail;
        }
        Ok(())
    }

    /// Reads message bytes from offset `offset` into `out`: the inverse of [`Self::write_at`].
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), SendBufferError> {
        self.check_span(offset, out.len())?;
        let mut rest = out;
        for range in buffer_spans(self.geometry, offset, rest.len()) {
            let (head, tail) = rest.split_at_mut(range.len());
            head.copy_from_slice(&self.bytes()[range]);
            rest = tail;
        }
        Ok(())
    }

    /// Each frame's payload piece, in message order, for the application to fill in place
    /// (e.g. by reading a file straight into them).
    pub fn pieces_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        let (geometry, len, frames) = (self.geometry, self.len, self.frames());
        let mut rest: &mut [u8] = self.bytes_mut();
        // Frames sit back to back, so splitting off each frame in turn lends them all at once
        // without overlapping borrows.
        (0..frames).map(move |index| {
            let frame_len = geometry.send_frame_range(len, index).len();
            let (frame, tail) = core::mem::take(&mut rest).split_at_mut(frame_len);
            rest = tail;
            &mut frame[geometry.header_len()..]
        })
    }

    /// Frame `index`'s payload piece: the message bytes it carries.
    pub fn piece(&self, index: u32) -> &[u8] {
        &self.bytes()[self.piece_range(index)]
    }

    pub fn piece_mut(&mut self, index: u32) -> &mut [u8] {
        let range = self.piece_range(index);
        &mut self.bytes_mut()[range]
    }

    /// The hole before frame `index`'s payload, for the library to write the frame's headers
    /// into.
    pub fn header_mut(&mut self, index: u32) -> &mut [u8] {
        let start = self.frame_range(index).start;
        let header_len = self.geometry.header_len();
        &mut self.bytes_mut()[start..start + header_len]
    }

    /// Frame `index` as it leaves: its hole (holding its headers once written), then its
    /// payload, as one contiguous slice.
    pub fn frame(&self, index: u32) -> &[u8] {
        &self.bytes()[self.frame_range(index)]
    }

    /// Frame `index`, for the transport to write its link headers into the front of the hole.
    pub fn frame_mut(&mut self, index: u32) -> &mut [u8] {
        let range = self.frame_range(index);
        &mut self.bytes_mut()[range]
    }

    /// Every frame in the order it is sent: last first, so the receiver's in-place
    /// defragmentation overwrites each frame's headers with the payload before it.
    pub fn frames_last_first(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.geometry
            .send_order(self.len)
            .map(move |index| (index, self.frame(index)))
    }

    /// Refuses message spans that do not lie inside the message: these come from the
    /// application, so they are errors rather than panics.
    fn check_span(&self, offset: usize, len: usize) -> Result<(), SendBufferError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(SendBufferError::OutOfBounds {
                offset,
                len,
                message_len: self.len,
            }),
        }
    }

    /// Frame `index` in the buffer. An index past the last frame is a bug in the library,
    /// which only asks for frames it counted, so it panics.
    fn frame_range(&self, index: u32) -> Range<usize> {
        let frames = self.frames();
        assert!(
            index < frames,
            "frame {index} is out of range: a {}-byte message has {frames} frames",
            self.len
        );
        self.geometry.send_frame_range(self.len, index)
    }

    /// Frame `index`'s payload in the buffer: its frame less the hole.
    fn piece_range(&self, index: u32) -> Range<usize> {
        let frame = self.frame_range(index);
        frame.start + self.geometry.header_len()..frame.end
    }
}

/// A buffer can be a gigabyte: show its shape, not its bytes.
impl fmt::Debug for HoleBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HoleBuffer")
            .field("geometry", &self.geometry)
            .field("len", &self.len)
            .field("frames", &self.frames())
            .finish_non_exhaustive()
    }
}

/// The buffer ranges holding message bytes `offset..offset + count`, in message order: one per
/// frame the span touches, since the holes split it at every frame boundary.
fn buffer_spans(
    geometry: Geometry,
    offset: usize,
    count: usize,
) -> impl Iterator<Item = Range<usize>> {
    let payload = geometry.frame_payload();
    let end = offset + count;
    let mut at = offset;
    core::iter::from_fn(move || {
        (at < end).then(|| {
            let piece_end = end.min((at / payload + 1) * payload);
            let start = geometry.send_offset(at);
            let range = start..start + (piece_end - at);
            at = piece_end;
            range
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(header_len: usize, frame_payload: usize, len: u64) -> HoleBuffer {
        HoleBuffer::new(Geometry::new(header_len, frame_payload).unwrap(), len).unwrap()
    }

    #[test]
    fn an_empty_message_is_one_frame_of_just_the_hole() {
        let mut b = buffer(10, 100, 0);
        assert!(b.is_empty());
        assert_eq!(b.frames(), 1);
        assert_eq!(b.frame(0), [0; 10]);
        assert!(b.piece(0).is_empty());
        b.header_mut(0).fill(7);
        assert_eq!(b.frame(0), [7; 10]);
        assert_eq!(b.pieces_mut().count(), 1);
        assert_eq!(b.write_at(0, &[]), Ok(()));
    }

    #[test]
    fn an_empty_message_without_headers_still_has_one_frame() {
        let mut b = buffer(0, 100, 0);
        assert!(b.frame(0).is_empty());
        assert_eq!(b.pieces_mut().map(|p| p.len()).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn an_exact_multiple_of_the_payload_fills_every_frame() {
        let mut b = buffer(4, 8, 24);
        assert_eq!(b.frames(), 3);
        for (i, piece) in b.pieces_mut().enumerate() {
            assert_eq!(piece.len(), 8);
            piece.fill(i as u8 + 1);
        }
        for index in 0..3 {
            b.header_mut(index).fill(0xee);
        }
        let mut frame = vec![0xee; 4];
        frame.extend([2; 8]);
        assert_eq!(b.frame(1), frame);
        assert_eq!(b.frame(2).len(), 12);
        let order: Vec<u32> = b.frames_last_first().map(|(i, _)| i).collect();
        assert_eq!(order, [2, 1, 0]);
    }

    #[test]
    fn a_write_spanning_three_frames_skips_the_holes() {
        let mut b = buffer(2, 4, 10);
        let data: Vec<u8> = (1..=8).collect();
        b.write_at(1, &data).unwrap();
        assert_eq!(b.piece(0), [0, 1, 2, 3]);
        assert_eq!(b.piece(1), [4, 5, 6, 7]);
        assert_eq!(b.piece(2), [8, 0]);
        assert_eq!(b.frame(1), [0, 0, 4, 5, 6, 7]);
        let mut back = [0; 8];
        b.read_at(1, &mut back).unwrap();
        assert_eq!(back.as_slice(), data);
    }

    #[test]
    fn a_write_past_the_end_is_refused_and_changes_nothing() {
        let mut b = buffer(2, 4, 10);
        assert_eq!(
            b.write_at(8, &[1, 2, 3]),
            Err(SendBufferError::OutOfBounds {
                offset: 8,
                len: 3,
                message_len: 10
            })
        );
        assert!(b.write_at(usize::MAX, &[1]).is_err());
        assert!(b.write_at(11, &[]).is_err());
        assert!(b.read_at(9, &mut [0; 2]).is_err());
        assert!((0..b.frames()).all(|i| b.piece(i).iter().all(|&x| x == 0)));
    }

    #[test]
    fn a_transfer_too_large_is_refused() {
        let g = Geometry::new(10, 100).unwrap();
        let err = HoleBuffer::new(g, crate::geometry::MAX_TRANSFER_BYTES + 1).unwrap_err();
        assert!(matches!(
            err,
            SendBufferError::Geometry(GeometryError::TransferTooLarge(_))
        ));
    }

    #[test]
    #[should_panic(expected = "frame 3 is out of range")]
    fn a_frame_past_the_last_panics() {
        buffer(2, 4, 10).frame(3);
    }
}

//! Host memory as the core sees it: registered regions named by id, and buffers described as
//! lists of segments (EMP's chained descriptors; scatter/gather for non-contiguous data).
//!
//! The core never holds a pointer. The driver lends it the memory in each call that reads or
//! writes message bytes, through [`HostMemory`]; a simulator uses vectors, a runtime its
//! registered (pinned) regions.

use crate::copy::copy_bytes;
use crate::PostError;

/// Most segments one buffer may have. Sixteen covers strided datatypes of practical use and keeps
/// a descriptor at a fixed size (EMP chained up to four descriptors; we allow more).
pub const MAX_SEGMENTS: usize = 16;

/// Name of a registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RegionId(pub u32);

/// A byte range of one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segment {
    pub region: RegionId,
    pub offset: u64,
    pub len: u64,
}

/// The memory the core may read (sends) or write (receives) in the current call.
pub trait HostMemory {
    fn region(&self, id: RegionId) -> Option<&[u8]>;
    fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]>;

    /// Copies the first `len` bytes of buffer `from` to the first `len` bytes of buffer `to`,
    /// both in this memory (a message to this rank itself into its receive; a send's bytes
    /// into a send copy the host lent the core); false, `to` left unspecified, if a range is
    /// not there. Here through a bounce buffer on the stack, as the two buffers are borrowed
    /// from one `self`; a host whose regions are raw memory copies directly.
    fn copy_into(&mut self, from: &SgList, to: &SgList, len: u64) -> bool {
        if len > from.total_len() || len > to.total_len() {
            return false;
        }
        let mut bounce = [0u8; COPY_BOUNCE_BYTES];
        let mut done = 0u64;
        while done < len {
            let chunk = &mut bounce[..(len - done).min(COPY_BOUNCE_BYTES as u64) as usize];
            if !from.read_range_into(self, done, chunk) || !to.write_at(self, done, chunk) {
                return false;
            }
            done += chunk.len() as u64;
        }
        true
    }
}

/// Bytes [`HostMemory::copy_into`] moves at a time by default: a page of stack, no
/// allocation.
const COPY_BOUNCE_BYTES: usize = 4096;

/// A buffer as an ordered list of at most [`MAX_SEGMENTS`] segments, stored inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SgList {
    segments: [Segment; MAX_SEGMENTS],
    count: u8,
    total_len: u64,
}

impl SgList {
    /// One contiguous range.
    pub fn contiguous(region: RegionId, offset: u64, len: u64) -> Self {
        Self::new(&[Segment {
            region,
            offset,
            len,
        }])
        .expect("one segment always fits")
    }

    pub fn new(segments: &[Segment]) -> Result<Self, PostError> {
        if segments.len() > MAX_SEGMENTS {
            return Err(PostError::TooManySegments {
                count: segments.len(),
                limit: MAX_SEGMENTS,
            });
        }
        let mut list = Self::default();
        list.segments[..segments.len()].copy_from_slice(segments);
        list.count = segments.len() as u8;
        list.total_len = segments.iter().map(|s| s.len).sum();
        Ok(list)
    }

    /// Makes this an empty list, to be filled with [`push`](Self::push) in place (a list is
    /// 400 bytes: building one elsewhere and copying it costs more than filling it where it
    /// lives).
    pub fn clear(&mut self) {
        self.count = 0;
        self.total_len = 0;
    }

    /// Appends a segment; fails when the list already has [`MAX_SEGMENTS`].
    pub fn push(&mut self, segment: Segment) -> Result<(), PostError> {
        let at = usize::from(self.count);
        if at == MAX_SEGMENTS {
            return Err(PostError::TooManySegments {
                count: at + 1,
                limit: MAX_SEGMENTS,
            });
        }
        self.segments[at] = segment;
        self.count += 1;
        self.total_len += segment.len;
        Ok(())
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments[..self.count as usize]
    }

    pub fn total_len(&self) -> u64 {
        self.total_len
    }

    /// Checks every segment lies inside its region, so later reads and writes cannot fail.
    pub fn validate(&self, memory: &impl HostMemory) -> Result<(), PostError> {
        for (index, segment) in self.segments().iter().enumerate() {
            let region_len = memory.region(segment.region).map(|r| r.len() as u64);
            let end = segment.offset.checked_add(segment.len);
            match (region_len, end) {
                (Some(region_len), Some(end)) if end <= region_len => {}
                _ => return Err(PostError::BadSegment { index }),
            }
        }
        Ok(())
    }

    /// Calls `visit` with each (segment piece) covering message bytes `[offset, offset+len)`.
    /// The caller guarantees the range lies within `total_len`.
    pub fn for_each_piece(&self, offset: u64, len: u64, mut visit: impl FnMut(Segment)) {
        let mut skip = offset;
        let mut remaining = len;
        for segment in self.segments() {
            if remaining == 0 {
                break;
            }
            if skip >= segment.len {
                skip -= segment.len;
                continue;
            }
            let take = (segment.len - skip).min(remaining);
            if take > 0 {
                visit(Segment {
                    region: segment.region,
                    offset: segment.offset + skip,
                    len: take,
                });
            }
            remaining -= take;
            skip = 0;
        }
        debug_assert_eq!(remaining, 0, "range beyond the buffer");
    }

    /// Copies the whole buffer into `out`, which must be exactly `total_len` bytes long.
    /// Returns false (leaving `out` partly written) if a region is gone.
    pub fn read_into(&self, memory: &impl HostMemory, out: &mut [u8]) -> bool {
        out.len() as u64 == self.total_len && self.read_range_into(memory, 0, out)
    }

    /// Copies `out.len()` bytes from message offset `offset` on into `out`; false if the
    /// range is not all in the buffer's memory.
    pub fn read_range_into<M: HostMemory + ?Sized>(
        &self,
        memory: &M,
        offset: u64,
        out: &mut [u8],
    ) -> bool {
        let Some(end) = offset.checked_add(out.len() as u64) else {
            return false;
        };
        if end > self.total_len {
            return false;
        }
        let mut read = 0usize;
        let mut complete = true;
        self.for_each_piece(offset, out.len() as u64, |piece| {
            let len = piece.len as usize;
            let start = piece.offset as usize;
            match memory
                .region(piece.region)
                .and_then(|r| r.get(start..start + len))
            {
                Some(bytes) => copy_bytes(&mut out[read..read + len], bytes),
                None => complete = false,
            }
            read += len;
        });
        complete
    }

    /// Copies `data` into the buffer at message offset `offset`. Returns false (writing nothing)
    /// if the range does not fit; segments were validated at post time.
    pub fn write_at<M: HostMemory + ?Sized>(
        &self,
        memory: &mut M,
        offset: u64,
        data: &[u8],
    ) -> bool {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return false;
        };
        if end > self.total_len {
            return false;
        }
        let mut written = 0usize;
        self.for_each_piece(offset, data.len() as u64, |piece| {
            let len = piece.len as usize;
            if let Some(region) = memory.region_mut(piece.region) {
                let start = piece.offset as usize;
                copy_bytes(
                    &mut region[start..start + len],
                    &data[written..written + len],
                );
            }
            written += len;
        });
        true
    }
}

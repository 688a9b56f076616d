//! An LM socket's memory in the placing socket's UMEM (the memory the kernel writes frames
//! into and sends them from):
//!
//! - receive regions where placed transfers land, or none at all for a socket without AF_XDP,
//!   whose receiver then takes every transfer by copy;
//! - send buffers ([`SendArea`]), from which frames leave through the transmit ring as they
//!   were written.

use std::sync::{Arc, Mutex, PoisonError};

use nicmsg_lm::send_buffer::SendMemory;
use nicmsg_lm::station::{RegionId, Regions};

use crate::socket::{UmemPart, CHUNK_BYTES, KERNEL_HEADROOM};

/// Regions in use at once: the placed transfer, a few given up and draining (the station's
/// `MAX_OPEN_TRANSFERS`), and the ones lent to the application.
pub const MAX_REGIONS: usize = 16;

/// Send buffers in the sending memory at once: a window of transfers to several peers, and
/// spares an application keeps for reuse. More are made on the heap.
pub const MAX_SEND_BUFFERS: usize = 64;
/// Send buffers start on a cache line.
const SEND_BUFFER_ALIGN: usize = 64;

/// The sending memory of a placing socket, cut into send buffers first-fit. A buffer gives
/// its bytes back when dropped, which may be on another thread than the socket's: the list of
/// buffers sits behind a mutex, taken once per buffer made or dropped, never per frame.
pub(crate) struct SendArea {
    memory: UmemPart,
    /// (start, len) of the buffers lent, in the sending memory.
    lent: Arc<Mutex<Vec<(usize, usize)>>>,
}

impl SendArea {
    pub(crate) fn new(memory: UmemPart) -> Self {
        Self {
            memory,
            lent: Arc::new(Mutex::new(Vec::with_capacity(MAX_SEND_BUFFERS))),
        }
    }

    /// `len` bytes of the sending memory, or `None` if no gap is that large or
    /// [`MAX_SEND_BUFFERS`] are lent.
    pub(crate) fn lend(&self, len: usize) -> Option<Box<dyn SendMemory>> {
        let mut lent = self.lent.lock().unwrap_or_else(PoisonError::into_inner);
        if lent.len() >= MAX_SEND_BUFFERS {
            return None;
        }
        let start = first_fit(&lent, len, self.memory.len())?;
        let at = lent.partition_point(|&(other, _)| other < start);
        lent.insert(at, (start, len));
        Some(Box::new(LentSend {
            part: self.memory.part(start, len),
            at: start,
            lent: Arc::clone(&self.lent),
        }))
    }
}

/// The lowest start, aligned, where `len` bytes fit between the buffers `lent` (sorted).
fn first_fit(lent: &[(usize, usize)], len: usize, capacity: usize) -> Option<usize> {
    let mut start = 0;
    for &(at, size) in lent {
        if start + len <= at {
            return Some(start);
        }
        start = (at + size).next_multiple_of(SEND_BUFFER_ALIGN);
    }
    (start + len <= capacity).then_some(start)
}

/// A send buffer's bytes in the sending memory.
struct LentSend {
    part: UmemPart,
    /// Its start in the sending memory: its key in the list of buffers lent.
    at: usize,
    lent: Arc<Mutex<Vec<(usize, usize)>>>,
}

impl SendMemory for LentSend {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the part is mapped while `self.part` lives and is this buffer's alone (cut
        // from the list under its lock); `&self` rules out a `&mut` slice of it meanwhile, and
        // the kernel only reads it.
        unsafe { std::slice::from_raw_parts(self.part.as_ptr(), self.part.len()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` rules out any other slice. The socket hands a
        // buffer back only once the kernel finished every frame it queued from it.
        unsafe { std::slice::from_raw_parts_mut(self.part.as_ptr(), self.part.len()) }
    }
}

impl Drop for LentSend {
    fn drop(&mut self) {
        let mut lent = self.lent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(at) = lent.binary_search_by_key(&self.at, |&(start, _)| start) {
            lent.remove(at);
        }
    }
}

/// The receive memory of an LM socket.
pub(crate) enum LmMemory {
    /// Regions in the UMEM of the placing socket.
    Umem(UmemRegions),
    /// No placing socket: no region, so every transfer is received by copy.
    None,
}

impl Regions for LmMemory {
    fn allocate(&mut self, len: usize) -> Option<RegionId> {
        match self {
            LmMemory::Umem(regions) => regions.allocate(len),
            LmMemory::None => None,
        }
    }

    fn bytes(&mut self, region: RegionId) -> &mut [u8] {
        match self {
            LmMemory::Umem(regions) => regions.bytes(region),
            LmMemory::None => unreachable!("no region was handed out"),
        }
    }

    fn free(&mut self, region: RegionId) {
        if let LmMemory::Umem(regions) = self {
            regions.free(region);
        }
    }
}

/// First-fit regions in the receiving part of a UMEM.
pub(crate) struct UmemRegions {
    base: *mut u8,
    len: usize,
    /// By id: (start, len) of the regions in use.
    used: Vec<Option<(usize, usize)>>,
}

// SAFETY: `base` points into the placing socket's UMEM, which the LM socket owns beside the
// station holding this (and drops after it); the mapping has no tie to a thread, and one
// thread drives a socket at a time, so the whole may move to another thread.
unsafe impl Send for UmemRegions {}

impl UmemRegions {
    /// Regions in `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` stays mapped as long as the regions are used, and nothing else makes
    /// references into it (the kernel writes into it where fill addresses point, which is
    /// what the station tracks).
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> Self {
        Self {
            base,
            len,
            used: Vec::with_capacity(MAX_REGIONS),
        }
    }

    /// The offset of a region in the UMEM: fill addresses are computed from it.
    pub(crate) fn start(&self, region: RegionId) -> usize {
        self.used[region.0 as usize].expect("a region in use").0
    }

    /// The lowest start at or above which `len` bytes are free, with the kernel's headroom
    /// below (frame 0's fill address is the region's start less it) and a chunk's room above
    /// (the last fill address must leave one).
    fn first_fit(&self, len: usize) -> Option<usize> {
        let mut taken: Vec<(usize, usize)> = self.used.iter().flatten().copied().collect();
        taken.sort_unstable();
        let mut start = KERNEL_HEADROOM.next_multiple_of(64);
        for (at, size) in taken {
            if start + len + CHUNK_BYTES <= at {
                return Some(start);
            }
            start = start.max((at + size).next_multiple_of(64) + KERNEL_HEADROOM);
        }
        (start + len + CHUNK_BYTES <= self.len).then_some(start)
    }
}

impl Regions for UmemRegions {
    fn allocate(&mut self, len: usize) -> Option<RegionId> {
        let start = self.first_fit(len)?;
        let id = match self.used.iter().position(Option::is_none) {
            Some(id) => id,
            None if self.used.len() < MAX_REGIONS => {
                self.used.push(None);
                self.used.len() - 1
            }
            None => return None,
        };
        self.used[id] = Some((start, len));
        Some(RegionId(id as u32))
    }

    fn bytes(&mut self, region: RegionId) -> &mut [u8] {
        let (start, len) = self.used[region.0 as usize].expect("a region in use");
        // SAFETY: inside the mapping (checked by `first_fit`), which outlives `self` (see
        // `new`); regions do not overlap, and `&mut self` means no other slice of this one.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(start), len) }
    }

    fn free(&mut self, region: RegionId) {
        let slot = &mut self.used[region.0 as usize];
        assert!(slot.is_some(), "a region freed once");
        *slot = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_buffers_fit_in_gaps_and_come_back_when_dropped() {
        let lent = [(0, 100), (1000, 50)];
        assert_eq!(first_fit(&lent, 500, 4096), Some(128));
        assert_eq!(first_fit(&lent, 900, 4096), Some(1088));
        assert_eq!(first_fit(&lent, 4000, 4096), None);
        assert_eq!(first_fit(&[], 4096, 4096), Some(0));
    }

    #[test]
    fn regions_fit_between_each_other_and_leave_the_headroom_free() {
        let mut memory = vec![0u8; 1 << 20];
        // SAFETY: the vector outlives the regions and is not touched meanwhile.
        let mut regions = unsafe { UmemRegions::new(memory.as_mut_ptr(), memory.len()) };
        let a = regions.allocate(100_000).unwrap();
        let b = regions.allocate(200_000).unwrap();
        assert!(regions.start(a) >= KERNEL_HEADROOM);
        assert!(regions.start(b) >= regions.start(a) + 100_000 + KERNEL_HEADROOM);
        regions.free(a);
        let c = regions.allocate(50_000).unwrap();
        assert_eq!(
            regions.start(c),
            regions.start(b).min(KERNEL_HEADROOM.next_multiple_of(64))
        );
        assert!(
            regions.allocate(1 << 20).is_none(),
            "larger than the memory"
        );
        regions.bytes(b).fill(7);
        assert!(regions.bytes(c).iter().all(|&byte| byte == 0));
    }
}

//! Registered memory as the engine sees it: a fixed table of (address, length) ranges that the
//! host fills in and the engine reads, implementing the protocol core's `HostMemory`.
//!
//! Each non-blocking operation registers its own buffer ranges exactly (not page-rounded), so a
//! receive buffer is the only thing its region covers and the engine's writes can never alias a
//! range the application still reads. Pages are not pinned: both transports copy (see
//! `docs/runtime.md`, Memory). The host publishes a slot with a release store of its length after
//! writing the address; the engine reads it with an acquire load.

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use nicmsg_proto::{HostMemory, RegionId, SgList};

/// Default number of regions: every segment of every descriptor of a full table (640 x 16 would
/// be the worst case; real operations use one or two segments).
pub const DEFAULT_REGIONS: usize = 4096;

struct Region {
    base: AtomicPtr<u8>,
    /// 0 while free; a region of 0 bytes is never registered (it needs no memory).
    len: AtomicUsize,
}

/// A fixed table of memory ranges shared between the host and the engine. (It is `Send` and
/// `Sync` as it is: it holds addresses in atomics and never dereferences them itself;
/// `RegistryMemory` does, under `register`'s contract.)
pub struct Registry {
    regions: Box<[Region]>,
    /// Regions `0..host_regions` are the host's to hand out; those after are the engine's own
    /// (buffers of PANIC's programs, `crate::programs`).
    host_regions: usize,
}

// Send and Sync without `unsafe impl`: a region is two atomics. The registry never
// dereferences the addresses it holds; the contract of `register` makes the host responsible
// for the memory staying valid while registered.

impl Registry {
    /// A registry of `capacity` regions, all the host's.
    pub fn new(capacity: usize) -> Self {
        Self::with_engine_regions(capacity, 0)
    }

    /// A registry of `host` regions for the host and `engine` more for the engine's own
    /// buffers, which the host never hands out.
    pub fn with_engine_regions(host: usize, engine: usize) -> Self {
        let regions = (0..host + engine)
            .map(|_| Region {
                base: AtomicPtr::new(std::ptr::null_mut()),
                len: AtomicUsize::new(0),
            })
            .collect();
        Self {
            regions,
            host_regions: host,
        }
    }

    /// The host's regions (ids `0..capacity()`).
    pub fn capacity(&self) -> usize {
        self.host_regions
    }

    /// The engine's own regions.
    pub fn engine_regions(&self) -> std::ops::Range<u32> {
        self.host_regions as u32..self.regions.len() as u32
    }

    /// Publishes `len` bytes at `base` in slot `id`, which the caller (the one host thread that
    /// owns slot allocation) knows to be free.
    ///
    /// # Safety
    /// Until `unregister(id)`, the memory must stay valid, must not be written by anyone else if
    /// the engine may write it (a receive), and must not be written at all if the engine reads
    /// it (a send).
    pub unsafe fn register(&self, id: RegionId, base: *mut u8, len: usize) {
        let region = &self.regions[id.0 as usize];
        debug_assert_eq!(
            region.len.load(Ordering::Relaxed),
            0,
            "slot {} in use",
            id.0
        );
        region.base.store(base, Ordering::Relaxed);
        region.len.store(len, Ordering::Release);
    }

    pub fn unregister(&self, id: RegionId) {
        self.regions[id.0 as usize].len.store(0, Ordering::Release);
    }

    /// Address of `len` bytes at `offset` in a registered region, if they lie inside it.
    pub fn address(&self, id: RegionId, offset: u64, len: u64) -> Option<*mut u8> {
        let (base, region_len) = self.slice(id)?;
        let end = offset.checked_add(len)?;
        (end <= region_len as u64).then(|| base.wrapping_add(offset as usize))
    }

    /// Length of a registered region.
    pub fn size(&self, id: RegionId) -> Option<usize> {
        self.slice(id).map(|(_, len)| len)
    }

    fn slice(&self, id: RegionId) -> Option<(*mut u8, usize)> {
        let region = self.regions.get(id.0 as usize)?;
        let len = region.len.load(Ordering::Acquire);
        if len == 0 {
            return None;
        }
        Some((region.base.load(Ordering::Relaxed), len))
    }
}

/// The engine's view: `HostMemory` over the registry.
pub struct RegistryMemory<'a>(pub &'a Registry);

impl HostMemory for RegistryMemory<'_> {
    fn region(&self, id: RegionId) -> Option<&[u8]> {
        let (base, len) = self.0.slice(id)?;
        // SAFETY: registered memory is valid for `len` bytes while registered (register's
        // contract) and the protocol core only reads regions of pending sends.
        Some(unsafe { std::slice::from_raw_parts(base, len) })
    }

    fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        let (base, len) = self.0.slice(id)?;
        // SAFETY: as above; a receive region is lent exclusively to the engine until the
        // receive completes, and the core only writes regions of pending receives.
        Some(unsafe { std::slice::from_raw_parts_mut(base, len) })
    }

    /// Straight from buffer to buffer, piece by piece, with no bounce buffer.
    fn copy_into(&mut self, from: &SgList, to: &SgList, len: u64) -> bool {
        if len > from.total_len() || len > to.total_len() {
            return false;
        }
        let registry = self.0;
        let (mut done, mut complete) = (0u64, true);
        from.for_each_piece(0, len, |source| {
            let source_at = registry.address(source.region, source.offset, source.len);
            let mut inner = 0usize;
            to.for_each_piece(done, source.len, |target| {
                let target_at = registry.address(target.region, target.offset, target.len);
                match (source_at, target_at) {
                    // SAFETY: both ranges lie in registered regions (checked by `address`),
                    // valid while registered; `inner + target.len <= source.len`.
                    (Some(source_at), Some(target_at)) => unsafe {
                        copy_between(source_at.add(inner), target_at, target.len as usize)
                    },
                    _ => complete = false,
                }
                inner += target.len as usize;
            });
            done += source.len;
        });
        complete
    }
}

/// Copies `len` bytes from `from` to `to` through `copy_bytes` (which avoids a slow case of
/// the processor's string copy), or as `memmove` where the ranges overlap, which distinct
/// buffers never do but registered regions may.
///
/// # Safety
/// Both ranges are valid for `len` bytes, for reading and for writing respectively, and
/// during the call nothing else writes to `from` or touches `to` (the disjoint case makes a
/// shared and an exclusive slice of them).
unsafe fn copy_between(from: *const u8, to: *mut u8, len: usize) {
    let (source, target) = (from as usize, to as usize);
    if source.saturating_add(len) <= target || target.saturating_add(len) <= source {
        // SAFETY: valid (the caller's contract) and disjoint (just checked).
        let (from, to) = unsafe {
            (
                std::slice::from_raw_parts(from, len),
                std::slice::from_raw_parts_mut(to, len),
            )
        };
        nicmsg_proto::copy_bytes(to, from);
    } else {
        // SAFETY: the caller's contract; `copy` allows the overlap.
        unsafe { std::ptr::copy(from, to, len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicmsg_proto::Segment;

    /// The direct copy between scattered buffers gives the bytes the protocol core's default
    /// (through a bounce buffer) gives, and refuses a length beyond either buffer.
    #[test]
    fn copies_between_scattered_buffers_as_the_bounce_copy_does() {
        let mut source: Vec<u8> = (0..10_000).map(|i| (i * 7) as u8).collect();
        let mut direct = vec![0u8; 12_000];
        let registry = Registry::new(4);
        // SAFETY: the vectors outlive the registry's use below and nothing else touches them.
        unsafe {
            registry.register(RegionId(0), source.as_mut_ptr(), source.len());
            registry.register(RegionId(1), direct.as_mut_ptr(), direct.len());
        }
        let piece = |region, offset, len| Segment {
            region: RegionId(region),
            offset,
            len,
        };
        let from = SgList::new(&[piece(0, 5000, 3000), piece(0, 100, 4000)]).unwrap();
        let to = SgList::new(&[
            piece(1, 9000, 2500),
            piece(1, 0, 1000),
            piece(1, 4000, 5000),
        ])
        .unwrap();
        let mut memory = RegistryMemory(&registry);
        assert!(memory.copy_into(&from, &to, 6500));
        assert!(
            !memory.copy_into(&from, &to, 7001),
            "longer than the source"
        );

        struct Vectors(Vec<Vec<u8>>);
        impl HostMemory for Vectors {
            fn region(&self, id: RegionId) -> Option<&[u8]> {
                self.0.get(id.0 as usize).map(Vec::as_slice)
            }
            fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
                self.0.get_mut(id.0 as usize).map(Vec::as_mut_slice)
            }
        }
        let mut bounced = Vectors(vec![source.clone(), vec![0u8; 12_000]]);
        assert!(bounced.copy_into(&from, &to, 6500));
        registry.unregister(RegionId(0));
        registry.unregister(RegionId(1));
        assert!(direct == bounced.0[1], "the two copies differ");
        assert!(direct[9000..11_500] == source[5000..7500]);
    }

    /// Overlapping ranges (one registered region sent into itself) are copied as `memmove`
    /// copies them; disjoint ones exactly.
    #[test]
    fn a_copy_between_overlapping_ranges_moves_as_memmove_does() {
        let original: Vec<u8> = (0..9000).map(|i| (i * 13) as u8).collect();
        for (from, to, len) in [(0usize, 16usize, 5000usize), (16, 0, 5000), (0, 4000, 4000)] {
            let mut bytes = original.clone();
            let mut expected = original.clone();
            expected.copy_within(from..from + len, to);
            let base = bytes.as_mut_ptr();
            // SAFETY: both ranges lie inside `bytes`.
            unsafe { copy_between(base.add(from), base.add(to), len) };
            assert!(bytes == expected, "from {from} to {to}, {len} bytes");
        }
    }
}

//! Where placed transfers land: receive regions, in memory the receiving device can write.
//!
//! The station decides when a region is needed and for how long; the memory is the caller's
//! (the AF_XDP transport carves regions out of its UMEM, the simulator and tests use the heap).

/// A receive region handed out by [`Regions::allocate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u32);

/// The memory receive regions come from.
pub trait Regions {
    /// A region of exactly `len` bytes, or `None` if there is no room (the transfer is then
    /// received by copy).
    fn allocate(&mut self, len: usize) -> Option<RegionId>;
    /// The region's bytes.
    fn bytes(&mut self, region: RegionId) -> &mut [u8];
    /// The region is no longer used by the station nor lent to the application.
    fn free(&mut self, region: RegionId);
}

/// Regions on the heap, at most `max_bytes` in use at once.
#[derive(Debug)]
pub struct HeapRegions {
    regions: Vec<Option<Vec<u8>>>,
    max_bytes: usize,
    used: usize,
}

impl HeapRegions {
    pub fn new(max_bytes: usize) -> Self {
        Self {
            regions: Vec::new(),
            max_bytes,
            used: 0,
        }
    }

    /// Bytes of the regions allocated and not freed.
    pub fn used(&self) -> usize {
        self.used
    }
}

impl Regions for HeapRegions {
    fn allocate(&mut self, len: usize) -> Option<RegionId> {
        if self.used + len > self.max_bytes {
            return None;
        }
        self.used += len;
        let region = vec![0; len];
        let at = match self.regions.iter().position(Option::is_none) {
            Some(at) => {
                self.regions[at] = Some(region);
                at
            }
            None => {
                self.regions.push(Some(region));
                self.regions.len() - 1
            }
        };
        Some(RegionId(at as u32))
    }

    fn bytes(&mut self, region: RegionId) -> &mut [u8] {
        self.regions[region.0 as usize]
            .as_mut()
            .expect("a region in use")
    }

    fn free(&mut self, region: RegionId) {
        let bytes = self.regions[region.0 as usize]
            .take()
            .expect("a region freed once");
        self.used -= bytes.len();
    }
}

//! The part of PANIC an application shares with its engine: segments of its memory that
//! programs read and write by id (`DELIVER`, `GET`), the lock and flag words, and the display
//! output. Everything else (the VM, its programs) belongs to the engine alone.

use super::display::Display;
use super::signals::Signals;
use crate::registry::Registry;
use nicmsg_proto::RegionId;
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// Shared segments an application may create at once, numbered 0 to `SEGMENTS - 1`. Programs
/// name them by number; a table of this many entries costs 4 KiB.
pub const SEGMENTS: usize = 256;

/// Shared between the application and its engine (in an `Arc`).
pub struct ProgramsShared {
    /// Segment `n` is region `n`: registered by the host, read and written by programs
    /// through `RegistryMemory`-style bounds-checked copies.
    segments: Registry,
    /// Engine copies into or out of a segment under way: `unshare` waits for them to end, so
    /// the host never frees memory the engine is still copying.
    segment_copies: AtomicU32,
    pub signals: Signals,
    pub display: Display,
}

impl Default for ProgramsShared {
    fn default() -> Self {
        Self {
            segments: Registry::new(SEGMENTS),
            segment_copies: AtomicU32::new(0),
            signals: Signals::default(),
            display: Display::default(),
        }
    }
}

impl ProgramsShared {
    /// Host: makes `len` bytes at `base` segment `id`.
    ///
    /// # Safety
    /// Until [`ProgramsShared::unshare`], the memory must stay valid, and the host may read or
    /// write it only in ways the programs' lock/flag protocol allows (programs write it at any
    /// time otherwise).
    pub unsafe fn share(&self, id: u16, base: *mut u8, len: usize) -> Result<(), SegmentRefused> {
        if usize::from(id) >= SEGMENTS {
            return Err(SegmentRefused::OutOfRange(id));
        }
        if self
            .segments
            .address(RegionId(u32::from(id)), 0, 1)
            .is_some()
        {
            return Err(SegmentRefused::InUse(id));
        }
        // SAFETY: the caller's contract is `register`'s.
        unsafe {
            self.segments
                .register(RegionId(u32::from(id)), base, len.max(1))
        };
        Ok(())
    }

    /// Host: programs no longer reach segment `id` once this returns: a copy the engine had
    /// begun has ended. (A Dekker handshake: the host withdraws the segment then looks for
    /// copies under way; the engine announces its copy then looks for the segment. With a
    /// sequentially consistent fence on each side, one of them sees the other.)
    pub fn unshare(&self, id: u16) {
        if usize::from(id) >= SEGMENTS {
            return;
        }
        self.segments.unregister(RegionId(u32::from(id)));
        fence(Ordering::SeqCst);
        while self.segment_copies.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
    }

    /// Engine: runs `copy` on the address of `len` bytes at `offset` of segment `id`, if they
    /// lie inside it; otherwise says whether the segment exists and its size.
    pub(crate) fn with_segment(
        &self,
        id: u16,
        offset: u64,
        len: u64,
        copy: impl FnOnce(*mut u8),
    ) -> Result<(), Option<u64>> {
        let region = RegionId(u32::from(id));
        self.segment_copies.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let found = match self.segments.address(region, offset, len) {
            Some(address) => {
                copy(address);
                Ok(())
            }
            None => Err(self.segments.size(region).map(|size| size as u64)),
        };
        self.segment_copies.fetch_sub(1, Ordering::SeqCst);
        found
    }
}

/// Why a segment cannot be shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentRefused {
    #[error("segment {0} is out of range (0 to {max})", max = SEGMENTS - 1)]
    OutOfRange(u16),
    #[error("segment {0} is already shared")]
    InUse(u16),
}

//! Registration cache with page pinning on demand (BIP): the first time a buffer's pages are
//! used for communication they are locked in memory (`mlock`) and remembered, so later
//! operations on the same buffers make no system call. The cache holds at most `capacity` pages;
//! the least recently used are unlocked beyond that. A failed `mlock` (limit reached) is counted
//! and the operation proceeds unpinned: the UDP backend does not need pinned pages, only the
//! DMA backends to come do.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinStats {
    pub hits: u64,
    pub pinned_pages: u64,
    pub unpinned_pages: u64,
    pub mlock_calls: u64,
    pub mlock_failures: u64,
}

pub struct PinCache {
    page: usize,
    capacity: usize,
    /// Page address -> last use. Fx hashing: a page address is looked up on every post, and
    /// SipHash costs about a hundred instructions a lookup (the keys are the process's own
    /// addresses, not input an attacker chooses).
    pages: FxHashMap<usize, u64>,
    order: VecDeque<(usize, u64)>,
    clock: u64,
    pub stats: PinStats,
}

impl PinCache {
    pub fn new(capacity: usize) -> Self {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        Self {
            page,
            capacity,
            pages: FxHashMap::default(),
            order: VecDeque::new(),
            clock: 0,
            stats: PinStats::default(),
        }
    }

    /// Makes sure the pages of `[addr, addr+len)` are pinned.
    pub fn pin(&mut self, addr: usize, len: usize) {
        if len == 0 || self.capacity == 0 {
            return;
        }
        self.clock += 1;
        let first = addr & !(self.page - 1);
        let end = (addr + len).div_ceil(self.page) * self.page;
        let mut run_start = None;
        let mut page = first;
        while page < end {
            if let Some(last_use) = self.pages.get_mut(&page) {
                *last_use = self.clock;
                self.stats.hits += 1;
                if let Some(start) = run_start.take() {
                    self.lock_run(start, page);
                }
            } else if run_start.is_none() {
                run_start = Some(page);
            }
            page += self.page;
        }
        if let Some(start) = run_start {
            self.lock_run(start, end);
        }
        self.evict();
    }

    fn lock_run(&mut self, start: usize, end: usize) {
        self.stats.mlock_calls += 1;
        // SAFETY: mlock only changes residency of pages the caller's buffer occupies.
        if unsafe { libc::mlock(start as *const libc::c_void, end - start) } != 0 {
            self.stats.mlock_failures += 1;
            return;
        }
        let mut page = start;
        while page < end {
            self.pages.insert(page, self.clock);
            self.order.push_back((page, self.clock));
            self.stats.pinned_pages += 1;
            page += self.page;
        }
    }

    fn evict(&mut self) {
        while self.pages.len() > self.capacity {
            let Some((page, stamp)) = self.order.pop_front() else {
                break;
            };
            match self.pages.get(&page) {
                Some(&last_use) if last_use == stamp => {
                    self.pages.remove(&page);
                    // SAFETY: unlocking a page this cache locked.
                    unsafe { libc::munlock(page as *const libc::c_void, self.page) };
                    self.stats.unpinned_pages += 1;
                }
                // Used again since: requeue with its newer stamp.
                Some(&last_use) => self.order.push_back((page, last_use)),
                None => {}
            }
        }
    }
}

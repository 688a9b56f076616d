//! The four single-producer/single-consumer rings an AF_XDP socket shares with the kernel:
//! fill (user → kernel: free chunks to receive into), rx (kernel → user: received frames),
//! tx (user → kernel: frames to send) and completion (kernel → user: chunks sent). Each is a
//! power-of-two array of descriptors with a producer and a consumer index, mapped from the
//! socket; indices only grow (wrapping) and are published with release/acquire ordering.

use std::io;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};

/// A mapped ring of `T` (a `u64` chunk address for fill and completion, an `xdp_desc` for rx
/// and tx).
pub struct Ring<T> {
    map: NonNull<libc::c_void>,
    map_len: usize,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    mask: u32,
    /// Our side's index (producer for fill/tx, consumer for rx/completion), not yet published
    /// entries included.
    local: u32,
    /// The other side's index as last read: reading the shared one costs a cache miss, so it is
    /// refreshed only when the cached one says the ring is full (or empty).
    remote: u32,
}

// SAFETY: the ring is driven by one thread at a time (`&mut self`); the mapping is process-wide.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `entries` (a power of two) at page offset `pgoff` of socket `fd`, whose
    /// layout `offsets` the kernel gave.
    pub fn map(
        fd: RawFd,
        pgoff: u64,
        entries: u32,
        offsets: &libc::xdp_ring_offset,
        producer_side: bool,
    ) -> io::Result<Self> {
        debug_assert!(entries.is_power_of_two());
        let map_len = offsets.desc as usize + entries as usize * std::mem::size_of::<T>();
        // SAFETY: a shared mapping of the socket's ring; the kernel checks offset and length.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = |offset: u64| {
            // SAFETY: the kernel's offsets lie inside the mapping it sized.
            NonNull::new(unsafe { map.cast::<u8>().add(offset as usize) }).expect("mapped")
        };
        let mut ring = Self {
            map: NonNull::new(map).expect("mmap returned a mapping"),
            map_len,
            producer: at(offsets.producer).cast(),
            consumer: at(offsets.consumer).cast(),
            flags: at(offsets.flags).cast(),
            descs: at(offsets.desc).cast(),
            mask: entries - 1,
            local: 0,
            remote: 0,
        };
        if producer_side {
            ring.local = ring.shared_producer().load(Ordering::Relaxed);
            ring.remote = ring.shared_consumer().load(Ordering::Acquire);
        } else {
            ring.local = ring.shared_consumer().load(Ordering::Relaxed);
            ring.remote = ring.shared_producer().load(Ordering::Acquire);
        }
        Ok(ring)
    }

    pub fn entries(&self) -> u32 {
        self.mask + 1
    }

    fn shared_producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping; the kernel only ever accesses it atomically.
        unsafe { self.producer.as_ref() }
    }

    fn shared_consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { self.consumer.as_ref() }
    }

    /// The kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) before it looks at this ring again.
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: as above.
        let flags = unsafe { self.flags.as_ref() }.load(Ordering::Acquire);
        flags & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, index: u32) -> *mut T {
        // SAFETY: masked into the ring's `entries` descriptors.
        unsafe { self.descs.as_ptr().add((index & self.mask) as usize) }
    }

    // --- producer side (fill, tx) ---

    /// Free entries, up to `wanted`; the consumer's index is read again only if the cached one
    /// leaves fewer.
    pub fn free(&mut self, wanted: u32) -> u32 {
        let size = self.entries();
        let mut free = size - self.local.wrapping_sub(self.remote);
        if free < wanted {
            self.remote = self.shared_consumer().load(Ordering::Acquire);
            free = size - self.local.wrapping_sub(self.remote);
        }
        free.min(wanted)
    }

    /// Writes one descriptor at the next free entry; [`publish`](Self::publish) hands it over.
    /// The caller checked [`free`](Self::free).
    pub fn push(&mut self, desc: T) {
        debug_assert!(self.entries() - self.local.wrapping_sub(self.remote) > 0);
        // SAFETY: the entry is free (ours) until published.
        unsafe { self.slot(self.local).write(desc) };
        self.local = self.local.wrapping_add(1);
    }

    /// Makes every pushed descriptor visible to the kernel.
    pub fn publish(&self) {
        self.shared_producer().store(self.local, Ordering::Release);
    }

    /// Descriptors pushed and not yet taken by the kernel.
    pub fn in_flight(&mut self) -> u32 {
        self.remote = self.shared_consumer().load(Ordering::Acquire);
        self.local.wrapping_sub(self.remote)
    }

    // --- consumer side (rx, completion) ---

    /// Descriptors ready to read, up to `wanted`.
    pub fn ready(&mut self, wanted: u32) -> u32 {
        let mut ready = self.remote.wrapping_sub(self.local);
        if ready < wanted {
            self.remote = self.shared_producer().load(Ordering::Acquire);
            ready = self.remote.wrapping_sub(self.local);
        }
        ready.min(wanted)
    }

    /// The `i`-th ready descriptor (`i` below what [`ready`](Self::ready) returned).
    pub fn peek(&self, i: u32) -> T {
        // SAFETY: the kernel published this entry (acquire in `ready`) and does not touch it
        // until we release it.
        unsafe { self.slot(self.local.wrapping_add(i)).read() }
    }

    /// Gives the first `count` ready entries back to the kernel.
    pub fn release(&mut self, count: u32) {
        self.local = self.local.wrapping_add(count);
        self.shared_consumer().store(self.local, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer referenced.
        unsafe { libc::munmap(self.map.as_ptr(), self.map_len) };
    }
}

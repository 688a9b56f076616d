//! Copies of message bytes through raw pointers, for memory of which no slice may be formed: a
//! PANIC program's shared segment, which the application and the engine may both touch while a
//! copy runs. It avoids the processor's slow copy distance as `nicmsg_proto::copy_bytes` does
//! (that module says why); it lives here because the protocol crate holds no `unsafe` code.

/// Bytes moved per iteration of the block loop, as in `nicmsg_proto::copy_bytes`.
const BLOCK: usize = 64;

/// One block in transit: bytes that may be uninitialised, as `copy_nonoverlapping` allows.
type Block = [std::mem::MaybeUninit<u8>; BLOCK];

/// Copies `len` bytes from `src` to `dst`: `memcpy`, unless the distance between them is one
/// at which the processor's string copy runs slowly, where it copies in 64-byte blocks.
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`: `src` is valid for reads and `dst` for writes of
/// `len` bytes, and the two ranges do not overlap.
#[inline]
pub unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize) {
    if nicmsg_proto::copies_by_blocks(dst as usize, src as usize, len) {
        // SAFETY: the caller's promise, passed on.
        unsafe { copy_raw_by_blocks(dst, src, len) }
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

#[cfg(test)]
thread_local! {
    /// Copies this thread made by blocks: which way a copy went, which its bytes cannot show.
    static BLOCK_COPIES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Each block is read into a register-sized array and written out, which the compiler emits as
/// vector loads and stores rather than recognising the loop as a `memcpy`. The array is of
/// `MaybeUninit` bytes: reading `[u8; 64]` would assert that the source is initialised, which
/// `copy_nonoverlapping`, whose contract [`copy_raw`] promises, does not ask.
///
/// # Safety
/// As [`copy_raw`].
#[inline(never)]
unsafe fn copy_raw_by_blocks(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(test)]
    BLOCK_COPIES.with(|count| count.set(count.get() + 1));
    let whole = len - len % BLOCK;
    for at in (0..whole).step_by(BLOCK) {
        // SAFETY: `at + BLOCK <= len`, so both blocks lie in the caller's ranges; unaligned
        // reads and writes need no alignment, and `MaybeUninit` bytes no initialised source.
        unsafe {
            let block = std::ptr::read_unaligned(src.add(at).cast::<Block>());
            std::ptr::write_unaligned(dst.add(at).cast::<Block>(), block);
        }
    }
    // SAFETY: the rest of the caller's ranges, from `whole` to `len`.
    unsafe { std::ptr::copy_nonoverlapping(src.add(whole), dst.add(whole), len - whole) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_copies() -> usize {
        BLOCK_COPIES.with(std::cell::Cell::get)
    }

    /// The same checks as `copy_bytes`': exact bytes, nothing beside them touched, and blocks
    /// exactly where `copy_bytes` takes them.
    #[test]
    fn copies_exactly_and_by_blocks_only_in_the_window() {
        nicmsg_proto::check_copies_at_every_distance(|to, from| {
            let before = block_copies();
            // SAFETY: `to` and `from` are slices of two live allocations, as long as each other.
            unsafe { copy_raw(to.as_mut_ptr(), from.as_ptr(), from.len()) };
            block_copies() - before == 1
        });
    }
}

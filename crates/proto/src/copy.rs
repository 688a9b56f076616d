//! Copying message bytes without the processor's slow case.
//!
//! Why: on AMD's Zen processors (the EPYCs the project measures on) the string copy that
//! glibc's `memcpy` uses from about 2 KiB (`rep movsb`) runs 15 to 25 times slower when the
//! destination lies 1 to 31 bytes past the source modulo 4 KiB: a 4 KiB copy takes 1.4-2.9 us
//! instead of 0.08, 64 KiB 34 us instead of 1.8. Message copies can meet that distance on every
//! message, by the layout of their buffers: the engine's buffers start on pages or a header's
//! length into them, and `malloc` puts large buffers 16 bytes into a page. A native 64 KiB
//! ping-pong was seen copying a 7,282-byte frame at distance 16 on every message. (Measured
//! with the glibc of Debian 12, 2.36; users cannot be asked to tune glibc, whose tunables are
//! read before any library of theirs loads.)
//!
//! [`copy_bytes`] takes `memcpy` everywhere but that window, and a plain loop of 64-byte
//! blocks in it, which the compiler turns into vector moves and which has no such case
//! (4 KiB: 0.08 us, 64 KiB: 1.9 us at any distance). Every copy of message bytes on the data
//! path goes through it; headers and other short copies need not, being below the window.

/// Distances (destination minus source, modulo [`PAGE`]) from 1 up to this one are copied by
/// blocks. The slow ones measured 1..=31 at every length from 3,000 bytes to 200,000; the
/// window is twice that, for processors of the family whose window may be a cache line wide,
/// since a block copy outside the window costs at most a third more than `memcpy`.
const SLOW_DISTANCE_MAX: usize = 63;

/// The period of the processor's address aliasing.
const PAGE: usize = 4096;

/// Copies shorter than this use `memcpy`'s vector code, which has no slow case.
const STRING_COPY_FROM: usize = 1024;

/// Bytes moved per iteration of the block loop: four vector registers' worth.
const BLOCK: usize = 64;

/// Copies `src` into `dst`, which must be as long.
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does.
#[inline]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    if copies_by_blocks(dst.as_ptr() as usize, src.as_ptr() as usize, src.len()) {
        copy_by_blocks(dst, src);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Appends `src` to `vec`, as `extend_from_slice` does, avoiding the slow case as
/// [`copy_bytes`] does.
pub fn extend_bytes(vec: &mut Vec<u8>, src: &[u8]) {
    vec.reserve(src.len());
    let end = vec.as_ptr() as usize + vec.len();
    if copies_by_blocks(end, src.as_ptr() as usize, src.len()) {
        let start = vec.len();
        // Zeroing first costs a twentieth of the slow copy it avoids.
        vec.resize(start + src.len(), 0);
        copy_by_blocks(&mut vec[start..], src);
    } else {
        vec.extend_from_slice(src);
    }
}

/// Whether `len` bytes are copied from `src` to `dst` by blocks: long enough for the string
/// copy, at a distance where it runs slowly. Public for the raw-pointer copy of memory no slice
/// may cover (`nicmsg_engine::copy_raw`), which this crate, free of `unsafe`, cannot hold.
pub fn copies_by_blocks(dst: usize, src: usize, len: usize) -> bool {
    len >= STRING_COPY_FROM && in_slow_window(dst, src)
}

/// Whether the string copy would run slowly from `src` to `dst`.
fn in_slow_window(dst: usize, src: usize) -> bool {
    let distance = dst.wrapping_sub(src) % PAGE;
    (1..=SLOW_DISTANCE_MAX).contains(&distance)
}

#[cfg(test)]
thread_local! {
    /// Copies this thread made by blocks: the tests' way to see which way a copy went, which
    /// its result cannot show (both ways copy the same bytes).
    static BLOCK_COPIES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A loop of fixed-size block copies. Each block goes through a local array, so the compiler
/// emits loads and stores of registers for it rather than recognising the loop as a `memcpy`.
#[inline(never)]
fn copy_by_blocks(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: lengths differ");
    #[cfg(test)]
    BLOCK_COPIES.with(|count| count.set(count.get() + 1));
    let mut to = dst.chunks_exact_mut(BLOCK);
    let mut from = src.chunks_exact(BLOCK);
    for (to, from) in (&mut to).zip(&mut from) {
        let block: [u8; BLOCK] = from.try_into().expect("chunks_exact gives whole blocks");
        to.copy_from_slice(&block);
    }
    to.into_remainder().copy_from_slice(from.remainder());
}

/// Checks a copy the way this module's tests check [`copy_bytes`]: every length around the
/// thresholds, at distances in and around the slow window, copies exactly the source and
/// nothing beside it, and goes by blocks exactly where [`copies_by_blocks`] says. `copy` copies
/// its source into its target and says whether it went by blocks. Shared with the engine's
/// raw-pointer copy (`nicmsg_engine::copy_raw`), whose tests cannot see this crate's: built for
/// this crate's tests and with the `copy-check` feature, which the engine asks for in its tests
/// only.
#[cfg(any(test, feature = "copy-check"))]
pub fn check_copies_at_every_distance(mut copy: impl FnMut(&mut [u8], &[u8]) -> bool) {
    let source: Vec<u8> = (0..3 * PAGE).map(|i| (i * 7 + 3) as u8).collect();
    let mut target = vec![0u8; 4 * PAGE];
    let lengths = [
        0,
        1,
        63,
        64,
        65,
        1023,
        1024,
        1025,
        2047,
        4096,
        4097,
        2 * PAGE + 13,
    ];
    for shift in [0usize, 1, 16, 31, 32, 63, 64, 65, 100, 4080] {
        for len in lengths {
            let from = &source[5..5 + len];
            let base = target.as_ptr() as usize;
            let src = from.as_ptr() as usize;
            // The start in `target` whose distance from `src` is `shift` modulo a page.
            let at = (src + shift).wrapping_sub(base) % PAGE;
            target.fill(0xAA);
            let went_by_blocks = copy(&mut target[at..at + len], from);
            assert_eq!(&target[at..at + len], from, "shift {shift}, length {len}");
            let by_blocks = len >= 1024 && (1..=63).contains(&shift);
            assert_eq!(
                went_by_blocks, by_blocks,
                "shift {shift}, length {len}: copied by blocks?"
            );
            assert!(target[..at].iter().all(|&b| b == 0xAA));
            assert!(target[at + len..].iter().all(|&b| b == 0xAA));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_copies() -> usize {
        BLOCK_COPIES.with(std::cell::Cell::get)
    }

    #[test]
    fn copies_exactly_at_every_distance_and_length() {
        check_copies_at_every_distance(|to, from| {
            let before = block_copies();
            copy_bytes(to, from);
            block_copies() - before == 1
        });
    }

    #[test]
    fn extending_appends_exactly_at_every_distance() {
        let source: Vec<u8> = (0..3 * PAGE).map(|i| (i * 5 + 1) as u8).collect();
        for skip in [0usize, 1, 15, 16, 17, 31, 48, 64, 200] {
            for len in [0usize, 100, 1024, 4096, 5000] {
                let mut vec = Vec::with_capacity(2 * PAGE + 64);
                vec.extend_from_slice(&source[..skip]);
                let end = vec.as_ptr() as usize + vec.len();
                // A source whose distance to the vector's end falls in the window.
                let at = (end + 4 * PAGE - 16).wrapping_sub(source.as_ptr() as usize) % PAGE;
                let from = &source[at..at + len];
                let before = block_copies();
                extend_bytes(&mut vec, from);
                assert_eq!(&vec[..skip], &source[..skip]);
                assert_eq!(&vec[skip..], from, "skip {skip}, length {len}");
                let by_blocks = len >= 1024;
                assert_eq!(
                    block_copies() - before,
                    usize::from(by_blocks),
                    "skip {skip}, length {len}"
                );
            }
        }
    }

    /// The distance `extend_bytes` tests is the one to where the bytes land: when the vector
    /// must grow, its new buffer's, not the old one's.
    #[test]
    fn extending_a_vector_that_grows_tests_its_new_buffer() {
        let source: Vec<u8> = (0..2 * PAGE).map(|i| (i * 3 + 2) as u8).collect();
        // Where the grown buffer lands is the allocator's choice; a sweep of every source
        // offset meets the window when it lands at one place, but other tests' threads share
        // the allocator, and once in a whole-workspace run no sweep case did. Every case is
        // checked; the window must be met in one of a few sweeps.
        let empty_sweeps = (0..4)
            .map(|_| sweep_extending_a_growing_vector(&source))
            .take_while(|&by_blocks| by_blocks == 0)
            .count();
        assert!(empty_sweeps < 4, "no source fell in the window in 4 sweeps");
    }

    /// Extends a vector that must grow with 2 KiB from every offset of a page of `source`,
    /// checking each copy went the way its destination asks; how many went by blocks.
    fn sweep_extending_a_growing_vector(source: &[u8]) -> usize {
        let (kept, len) = (8, 2048);
        let mut by_blocks = 0;
        for at in 0..PAGE {
            let mut vec = Vec::with_capacity(kept);
            vec.extend_from_slice(&source[..kept]);
            let from = &source[at..at + len];
            let before = block_copies();
            extend_bytes(&mut vec, from);
            assert_eq!(&vec[kept..], from, "source at {at}");
            let landed_at = vec.as_ptr() as usize + kept;
            let expected = in_slow_window(landed_at, from.as_ptr() as usize);
            assert_eq!(
                block_copies() - before,
                usize::from(expected),
                "source at {at}"
            );
            by_blocks += usize::from(expected);
        }
        by_blocks
    }

    #[test]
    fn the_window_is_the_distances_just_past_the_source() {
        assert!(!in_slow_window(1000, 1000));
        assert!(in_slow_window(1016, 1000));
        assert!(in_slow_window(1000 + PAGE + 1, 1000));
        assert!(!in_slow_window(1000 + 64, 1000));
        assert!(!in_slow_window(1000 - 16, 1000));
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn lengths_that_differ_panic() {
        let mut to = vec![0u8; 2048];
        let from = vec![1u8; 2049];
        copy_by_blocks(&mut to, &from);
    }
}

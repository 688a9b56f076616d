//! A fixed set of frame indices, one bit each, allocated once per transfer.

#[derive(Debug)]
pub(crate) struct Bits(Vec<u64>);

impl Bits {
    pub(crate) fn new(count: u32) -> Self {
        Self(vec![0; (count as usize).div_ceil(64)])
    }

    pub(crate) fn get(&self, index: u32) -> bool {
        self.0[index as usize / 64] & (1 << (index % 64)) != 0
    }

    pub(crate) fn set(&mut self, index: u32) {
        self.0[index as usize / 64] |= 1 << (index % 64);
    }

    pub(crate) fn clear(&mut self, index: u32) {
        self.0[index as usize / 64] &= !(1 << (index % 64));
    }
}

/// The frames of one transfer that are in: which, how many, and the highest one missing
/// (kept as frames come, since frames come last first and a receiver asks for that one).
#[derive(Debug)]
pub(crate) struct FrameSet {
    bits: Bits,
    frames: u32,
    count: u32,
    /// The highest frame not in (0 once every frame is).
    top_missing: u32,
}

impl FrameSet {
    pub(crate) fn new(frames: u32) -> Self {
        debug_assert!(frames > 0);
        Self {
            bits: Bits::new(frames),
            frames,
            count: 0,
            top_missing: frames - 1,
        }
    }

    pub(crate) fn contains(&self, index: u32) -> bool {
        self.bits.get(index)
    }

    /// Marks `index` in; false if it was already.
    pub(crate) fn insert(&mut self, index: u32) -> bool {
        if self.bits.get(index) {
            return false;
        }
        self.bits.set(index);
        self.count += 1;
        while self.count < self.frames && self.bits.get(self.top_missing) {
            self.top_missing -= 1;
        }
        true
    }

    pub(crate) fn is_full(&self) -> bool {
        self.count == self.frames
    }

    pub(crate) fn top_missing(&self) -> u32 {
        self.top_missing
    }

    /// The lowest frame of the run of missing frames from the highest one down: down to the
    /// next frame in, but not below `floor` and at most `longest` frames.
    pub(crate) fn missing_run_bottom(&self, floor: u32, longest: u32) -> u32 {
        let top = self.top_missing;
        let mut bottom = top;
        while bottom > floor && top - bottom + 1 < longest && !self.bits.get(bottom - 1) {
            bottom -= 1;
        }
        bottom
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_missing_frame_follows_arrivals_in_any_order() {
        let mut set = FrameSet::new(5);
        assert_eq!(set.top_missing(), 4);
        assert!(set.insert(2));
        assert_eq!(set.top_missing(), 4);
        assert!(set.insert(4) && set.insert(3));
        assert_eq!(set.top_missing(), 1);
        assert!(!set.insert(3), "in already");
        assert_eq!(set.missing_run_bottom(0, 10), 0, "frames 1 and 0 missing");
        assert_eq!(set.missing_run_bottom(1, 10), 1, "not below the floor");
        assert!(set.insert(0));
        assert_eq!(set.missing_run_bottom(0, 10), 1);
        assert!(set.insert(1));
        assert!(set.is_full() && set.contains(0));
    }
}

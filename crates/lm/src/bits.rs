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

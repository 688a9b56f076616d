//! Test randomness for the tests that need it (a module apart from `common`, which the
//! provider's tests share and which needs no random crate).

#![allow(dead_code)]

/// Test randomness, reproducible from the seed a test prints (ChaCha8).
pub struct Rng(rand_chacha::ChaCha8Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        use rand::SeedableRng;
        Self(rand_chacha::ChaCha8Rng::seed_from_u64(seed))
    }

    pub fn next(&mut self) -> u64 {
        rand::RngCore::next_u64(&mut self.0)
    }

    /// A number below `n` (0 for `n` of 0).
    pub fn below(&mut self, n: u64) -> u64 {
        use rand::Rng as _;
        self.0.gen_range(0..n.max(1))
    }

    pub fn u32(&mut self) -> u32 {
        rand::RngCore::next_u32(&mut self.0)
    }

    pub fn nonzero_u32(&mut self) -> u32 {
        self.u32().max(1)
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        rand::RngCore::fill_bytes(&mut self.0, &mut out);
        out
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

//! Seeded randomness. Every random choice of a run comes from a ChaCha8 generator seeded with the
//! run's seed; separate streams (network faults, application behaviour, buffer layouts) keep one
//! concern's draws from shifting another's when a parameter changes.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Stream numbers of the generators a run derives from its seed.
pub mod stream {
    /// Loss, duplication, corruption, delays, partitions.
    pub const NET: u64 = 1;
    /// The application scripts: sizes, tags, post times.
    pub const WORKLOAD: u64 = 2;
    /// Buffer layouts: segment splits, gaps, guard sizes.
    pub const LAYOUT: u64 = 3;
    /// Per-run configuration drawn from the seed, one stream each. Not from the seed's bits:
    /// a sweep picks each seed's workload from its low bits, and a choice from those bits
    /// gave some workloads that choice always and others never (odd seeds' payload-checking
    /// link never reached the even-numbered workloads of a sweep of all of them).
    /// The link checks payloads (`NetConfig::link_checks_payload`).
    pub const LINK_CHECKS: u64 = 4;
    /// RMPP's own windows (`run.rs`).
    pub const RMPP_WINDOWS: u64 = 5;
    /// Few small credits (`run.rs`).
    pub const SMALL_CREDITS: u64 = 6;
    /// Few medium credits (`run.rs`).
    pub const MEDIUM_CREDITS: u64 = 7;
    /// Small grant budgets (`run.rs`).
    pub const GRANT_BUDGET: u64 = 8;
    /// Each rank's engine (its transport's back-pressure): `ENGINE + rank`.
    pub const ENGINE: u64 = 1 << 32;
}

/// A deterministic random generator (never seeded from the OS or the clock).
#[derive(Debug, Clone)]
pub struct SimRng(ChaCha8Rng);

impl SimRng {
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        Self(rng)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.gen()
    }

    /// True with probability `p` (no draw when `p` is 0 or 1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.0.gen::<f64>() < p
        }
    }

    /// Uniform in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.0.gen_range(0..n)
        }
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            self.0.gen_range(lo..=hi)
        }
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        items.shuffle(&mut self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_draws_and_streams_differ() {
        let mut a = SimRng::new(7, stream::NET);
        let mut b = SimRng::new(7, stream::NET);
        let mut c = SimRng::new(7, stream::WORKLOAD);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }
}

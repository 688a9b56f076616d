//! The papers' measurement loops, written once against [`Messenger`] so that nicmsg and every
//! in-project baseline run exactly the same code. Rank 0 measures and returns the points; rank 1
//! plays the peer and returns nothing.

mod latency;
mod lm;
mod overhead;
mod overlap;
mod stream;

use std::time::Instant;

use crate::messenger::{Messenger, MAX_WINDOW};
use crate::model::{Pattern, Point};
use crate::stats::{summarize, thin};
use crate::BenchError;

/// Bytes a window of `bw`/`bibw` keeps in flight: enough to hide a round trip at several GB/s,
/// little enough that raw UDP's socket buffer holds it.
pub const WINDOW_BYTES: u64 = 8 << 20;

/// Messages per direction in one iteration of `overhead` and `overlap` (EMP's batches of five).
pub const BATCH: usize = 5;

/// How many repetitions a point gets.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Timed repetitions of small messages (round trips, windows, batches or iterations).
    pub reps: u64,
    /// Untimed repetitions before them.
    pub warmup: u64,
    /// Large messages get fewer repetitions: at most this many payload bytes per point.
    pub bytes_per_point: u64,
    /// Never fewer timed repetitions than this, whatever the size.
    pub min_reps: u64,
    /// `overlap`: computation per iteration to sweep, in microseconds.
    pub computes_us: Vec<f64>,
}

impl Plan {
    /// The papers' counts: 10,000 timed repetitions after 1,000 of warm-up (BIP, EMP); large
    /// messages capped at 1 GB of payload per point (still at least 200 repetitions).
    pub fn full() -> Plan {
        Plan {
            reps: 10_000,
            warmup: 1_000,
            bytes_per_point: 1 << 30,
            min_reps: 200,
            computes_us: vec![
                0.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0,
            ],
        }
    }

    /// `--quick`: enough to show that everything runs, not to be quoted.
    pub fn quick() -> Plan {
        Plan {
            reps: 200,
            warmup: 20,
            bytes_per_point: 64 << 20,
            min_reps: 10,
            computes_us: vec![0.0, 100.0, 1000.0],
        }
    }

    /// Timed repetitions for a repetition that moves `bytes_per_rep` payload bytes; both ranks
    /// compute the same number.
    pub fn reps_for(&self, bytes_per_rep: u64) -> u64 {
        let by_bytes = self.bytes_per_point / bytes_per_rep.max(1);
        self.reps.min(by_bytes).max(self.min_reps.min(self.reps))
    }

    /// Warm-up repetitions, scaled down like the timed ones.
    pub fn warmup_for(&self, bytes_per_rep: u64) -> u64 {
        let scale = self.reps_for(bytes_per_rep) as f64 / self.reps.max(1) as f64;
        ((self.warmup as f64 * scale).ceil() as u64).min(self.warmup)
    }

    /// Runs `repetition` for the warm-up, then for the timed repetitions of a point moving
    /// `bytes_per_rep` bytes each; returns the timed ones' durations in microseconds divided by
    /// `per_sample` (2 for half a round trip, the window for a time per message).
    pub fn time_repetitions(
        &self,
        bytes_per_rep: u64,
        per_sample: f64,
        mut repetition: impl FnMut() -> Result<(), BenchError>,
    ) -> Result<Vec<f64>, BenchError> {
        let warmup = self.warmup_for(bytes_per_rep);
        let reps = self.reps_for(bytes_per_rep);
        let mut samples = Vec::with_capacity(reps as usize);
        for rep in 0..warmup + reps {
            let start = Instant::now();
            repetition()?;
            if rep >= warmup {
                samples.push(micros_since(start) / per_sample);
            }
        }
        Ok(samples)
    }
}

/// Messages per window of `bw` and `bibw` for `size`-byte messages.
pub fn window_for(size: u64) -> usize {
    (WINDOW_BYTES / size.max(1)).clamp(2, MAX_WINDOW as u64) as usize
}

/// Runs `pattern` at `size`; rank 0 gets the point(s) (`overlap` has one per computation).
/// `report` is called with each point as soon as it is measured.
pub fn run(
    pattern: Pattern,
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    let mut emit = |point: Option<Point>| {
        if let Some(point) = point {
            report(point);
        }
    };
    match pattern {
        Pattern::Latency => emit(latency::measure(messenger, rank, size, plan, false)?),
        // RMPP measures offloading steps by ping-pong bandwidth: size over half the round trip.
        Pattern::Offload => emit(latency::measure(messenger, rank, size, plan, true)?),
        Pattern::Lm => emit(lm::measure(messenger, rank, size, plan)?),
        Pattern::Bw => emit(stream::one_way(
            messenger,
            rank,
            size,
            plan,
            window_for(size),
        )?),
        Pattern::Msgrate => emit(stream::one_way(messenger, rank, size, plan, MAX_WINDOW)?),
        Pattern::Bibw => emit(stream::both_ways(messenger, rank, size, plan)?),
        Pattern::Overhead => emit(overhead::measure(messenger, rank, size, plan)?),
        Pattern::Overlap => {
            let work = crate::compute::Work::calibrate();
            for &compute in &plan.computes_us {
                emit(overlap::measure(
                    messenger, rank, size, plan, &work, compute,
                )?);
            }
        }
        // Through `Comm::programs`, not the messenger: see `crate::panic`.
        other => {
            return Err(BenchError::Usage(format!(
                "{} runs through crate::panic",
                other.name()
            )))
        }
    }
    Ok(())
}

/// A point from per-repetition samples in microseconds.
pub(crate) fn point(size: u64, samples: &[f64]) -> Point {
    Point {
        size,
        time_us: summarize(samples),
        repetitions: samples.len() as u64,
        samples_us: thin(samples),
        ..Point::default()
    }
}

/// Microseconds since `start`.
fn micros_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetitions_shrink_with_size_but_not_below_the_floor() {
        let plan = Plan::full();
        assert_eq!(plan.reps_for(8), 10_000);
        assert_eq!(plan.reps_for(64 << 10), 10_000);
        assert_eq!(plan.reps_for(1 << 20), 1024);
        assert_eq!(plan.reps_for(64 << 20), 200);
        assert_eq!(plan.warmup_for(8), 1000);
        assert!(plan.warmup_for(1 << 20) <= 103);
    }

    #[test]
    fn windows_hold_a_bounded_number_of_bytes() {
        assert_eq!(window_for(0), MAX_WINDOW);
        assert_eq!(window_for(8), MAX_WINDOW);
        assert_eq!(window_for(1 << 20), 8);
        assert_eq!(window_for(4 << 20), 2);
    }
}

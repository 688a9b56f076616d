//! `overlap`: EMP's figure 6 and RMPP's figures 9-11. Each iteration posts five receives and
//! five sends of `size` bytes, computes for a given time, then waits for all ten. Swept over the
//! computation, it gives:
//! * throughput: payload sent and received per second of loop time (EMP's y axis);
//! * CPU fraction: share of the loop spent in the computation as it ran (EMP's x axis);
//! * availability: the computation's time alone (calibrated on a quiet core) over the loop's
//!   time, i.e. RMPP's "same work without communication / with communication": 1.0 when
//!   communication costs the host nothing and overlaps the work completely;
//! * effective bandwidth: availability x throughput (RMPP's figure 11).

use std::time::Instant;

use super::{micros_since, point, Plan, BATCH};
use crate::compute::Work;
use crate::messenger::Messenger;
use crate::model::{Overlap, Point};
use crate::stats::mbytes_per_sec;
use crate::BenchError;

/// Loop time aimed at per computation amount (both ranks derive the same iteration count
/// from it): long enough for stable ratios, short enough for a ten-point sweep.
const LOOP_BUDGET_US: f64 = 400_000.0;
/// Iterations per point, whatever the computation.
const MIN_ITERATIONS: u64 = 20;
const MAX_ITERATIONS: u64 = 2_000;

pub fn measure(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
    work: &Work,
    compute_us: f64,
) -> Result<Option<Point>, BenchError> {
    let len = size as usize;
    let iterations = iterations_for(plan, compute_us);
    for _ in 0..plan.warmup.min(MIN_ITERATIONS) {
        iteration(messenger, len, work, compute_us)?;
    }
    let mut samples = Vec::with_capacity(iterations as usize);
    let mut computing = 0.0;
    let loop_start = Instant::now();
    for _ in 0..iterations {
        let start = Instant::now();
        computing += iteration(messenger, len, work, compute_us)?;
        samples.push(micros_since(start));
    }
    let loop_us = micros_since(loop_start);
    if rank != 0 {
        return Ok(None);
    }
    let moved = (2 * BATCH) as f64 * size as f64 * iterations as f64;
    let throughput = mbytes_per_sec(moved, loop_us);
    let availability = (compute_us * iterations as f64 / loop_us).min(1.0);
    let mut point = point(size, &samples);
    point.compute_us = Some(compute_us);
    point.mbytes_per_sec = Some(throughput);
    point.overlap = Some(Overlap {
        cpu_fraction: (computing / loop_us).min(1.0),
        throughput_mbytes_per_sec: throughput,
        availability,
        effective_mbytes_per_sec: availability * throughput,
    });
    Ok(Some(point))
}

/// Same count on both ranks: the budget divided by the computation, within bounds.
fn iterations_for(plan: &Plan, compute_us: f64) -> u64 {
    let quick_scale = (plan.reps as f64 / 10_000.0).min(1.0);
    let by_budget = (LOOP_BUDGET_US * quick_scale / (compute_us + 50.0)) as u64;
    by_budget.clamp(MIN_ITERATIONS, MAX_ITERATIONS)
}

/// One iteration; returns the time the computation took inside it.
fn iteration(
    messenger: &mut dyn Messenger,
    len: usize,
    work: &Work,
    compute_us: f64,
) -> Result<f64, BenchError> {
    for slot in 0..BATCH {
        messenger.post_recv(slot, len)?;
    }
    for _ in 0..BATCH {
        messenger.post_send(len)?;
    }
    let start = Instant::now();
    if compute_us > 0.0 {
        work.run(compute_us);
    }
    let computing = micros_since(start);
    messenger.wait_all()?;
    Ok(computing)
}

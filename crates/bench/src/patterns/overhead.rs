//! `overhead`: EMP's table 2. Each iteration posts five receives and five sends of `size`
//! bytes (10 KB in the paper), computes long enough for the transfers to finish (three times an
//! exchange without computation, doubled while that proves too short), then waits.
//! Every post-send, post-receive and wait call is timed; the computation is not. What remains is
//! the host's cost per call: the asymptotic timings of the table. Both ranks compute for the
//! same time (the longer of their two estimates), as in the paper's symmetric loop.

use std::time::Instant;

use super::{micros_since, point, Plan, BATCH};
use crate::compute::Work;
use crate::messenger::Messenger;
use crate::model::{Overhead, Point};
use crate::stats::summarize;
use crate::BenchError;

/// The computation is this many times the batch's own exchange time (measured without
/// computation first), so the messages have landed when the wait starts.
const COMPUTE_FACTOR: f64 = 3.0;
/// Bounds of that computation, so one slow batch cannot make the run take minutes.
const COMPUTE_MIN_US: f64 = 20.0;
const COMPUTE_MAX_US: f64 = 5_000.0;
const NS_PER_US: f64 = 1_000.0;
/// A batch's wait counts as overlapped when it is at most this share of the computation:
/// the transfer then finished during it and the wait is the host's own cost.
const OVERLAPPED_WAIT_SHARE: f64 = 0.01;
/// Batches per step of lengthening the computation (their median decides).
const PROBE_BATCHES: u64 = 20;

/// Per-call times of one batch.
struct BatchTimes {
    post_send: [f64; BATCH],
    post_recv: [f64; BATCH],
    wait: f64,
}

pub fn measure(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
) -> Result<Option<Point>, BenchError> {
    let len = size as usize;
    let work = Work::calibrate();
    let bytes_per_rep = 2 * BATCH as u64 * size;
    let warmup = plan.warmup_for(bytes_per_rep).max(1);
    let reps = plan.reps_for(bytes_per_rep);

    let mut exchange = Vec::with_capacity(warmup as usize);
    for _ in 0..warmup {
        let start = Instant::now();
        batch(messenger, len, None)?;
        exchange.push(micros_since(start));
    }
    let own_estimate =
        (summarize(&exchange).median * COMPUTE_FACTOR).clamp(COMPUTE_MIN_US, COMPUTE_MAX_US);
    // Each rank measured its own exchange; with different computations the rank that computes
    // less would wait out the difference every batch and report it as wait overhead.
    let estimate = agree_on_micros(messenger, own_estimate)?;
    let compute = lengthen_until_overlapped(messenger, len, &work, estimate, warmup)?;
    let mut post_send = Vec::with_capacity(reps as usize * BATCH);
    let mut post_recv = Vec::with_capacity(reps as usize * BATCH);
    let mut wait = Vec::with_capacity(reps as usize);
    let mut per_message = Vec::with_capacity(reps as usize);
    for _ in 0..reps {
        let times = batch(messenger, len, Some((&work, compute)))?;
        post_send.extend_from_slice(&times.post_send);
        post_recv.extend_from_slice(&times.post_recv);
        let wait_per_message = times.wait / BATCH as f64;
        wait.push(wait_per_message);
        let posts: f64 = times.post_send.iter().chain(&times.post_recv).sum();
        per_message.push(posts / BATCH as f64 + wait_per_message);
    }
    if rank != 0 {
        return Ok(None);
    }
    let mut point = point(size, &per_message);
    point.compute_us = Some(compute);
    point.overhead = Some(Overhead {
        post_send_us: summarize(&post_send),
        post_recv_us: summarize(&post_recv),
        wait_us: summarize(&wait),
    });
    Ok(Some(point))
}

/// EMP's timings are asymptotic: the computation outlasts the transfers. Where progress runs
/// slower while the host computes (an engine thread sharing the host's core), the estimate
/// from an exchange without computation is too short and the wait would include the transfer;
/// so the computation doubles while the wait still takes more than [`OVERLAPPED_WAIT_SHARE`]
/// of it, up to [`COMPUTE_MAX_US`]. Both ranks take each step together.
fn lengthen_until_overlapped(
    messenger: &mut dyn Messenger,
    len: usize,
    work: &Work,
    mut compute: f64,
    batches: u64,
) -> Result<f64, BenchError> {
    let batches = batches.clamp(1, PROBE_BATCHES);
    while compute < COMPUTE_MAX_US {
        let mut waits = Vec::with_capacity(batches as usize);
        for _ in 0..batches {
            waits.push(batch(messenger, len, Some((work, compute)))?.wait);
        }
        let own_share = summarize(&waits).median / compute;
        let worst_share = agree_on_micros(messenger, own_share * NS_PER_US)? / NS_PER_US;
        if worst_share <= OVERLAPPED_WAIT_SHARE {
            break;
        }
        compute = (compute * 2.0).min(COMPUTE_MAX_US);
    }
    Ok(compute)
}

/// The larger of the two ranks' values, in whole nanoseconds of precision.
fn agree_on_micros(messenger: &mut dyn Messenger, micros: f64) -> Result<f64, BenchError> {
    Ok(messenger.agree_on_max((micros * NS_PER_US) as u64)? as f64 / NS_PER_US)
}

/// One batch: five receives, five sends, optional computation, wait.
fn batch(
    messenger: &mut dyn Messenger,
    len: usize,
    compute: Option<(&Work, f64)>,
) -> Result<BatchTimes, BenchError> {
    let mut times = BatchTimes {
        post_send: [0.0; BATCH],
        post_recv: [0.0; BATCH],
        wait: 0.0,
    };
    for (slot, time) in times.post_recv.iter_mut().enumerate() {
        let start = Instant::now();
        messenger.post_recv(slot, len)?;
        *time = micros_since(start);
    }
    for time in times.post_send.iter_mut() {
        let start = Instant::now();
        messenger.post_send(len)?;
        *time = micros_since(start);
    }
    if let Some((work, micros)) = compute {
        work.run(micros);
    }
    let start = Instant::now();
    messenger.wait_all()?;
    times.wait = micros_since(start);
    Ok(times)
}

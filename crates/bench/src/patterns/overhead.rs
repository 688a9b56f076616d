//! `overhead`: EMP's table 2. Each iteration posts five receives and five sends of `size`
//! bytes (10 KB in the paper), computes long enough for the transfers to finish, then waits.
//! Every post-send, post-receive and wait call is timed; the computation is not. What remains is
//! the host's cost per call: the asymptotic timings of the table.

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
    let compute =
        (summarize(&exchange).median * COMPUTE_FACTOR).clamp(COMPUTE_MIN_US, COMPUTE_MAX_US);

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

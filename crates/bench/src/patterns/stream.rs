//! `bw` and `msgrate`: a window of one-way messages closed by a return acknowledgement (EMP);
//! `bibw`: windows in both directions at once.

use std::time::Instant;

use super::{micros_since, point, window_for, Plan};
use crate::messenger::Messenger;
use crate::model::Point;
use crate::stats::mbytes_per_sec;
use crate::BenchError;

/// Rank 0 sends `window` messages, rank 1 answers with an empty acknowledgement once all have
/// arrived. A sample is the window's time divided by its messages.
pub fn one_way(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
    window: usize,
) -> Result<Option<Point>, BenchError> {
    let len = size as usize;
    let bytes_per_rep = size * window as u64;
    let warmup = plan.warmup_for(bytes_per_rep);
    let reps = plan.reps_for(bytes_per_rep);
    let mut samples = Vec::with_capacity(reps as usize);
    for rep in 0..warmup + reps {
        let start = Instant::now();
        if rank == 0 {
            for _ in 0..window {
                messenger.post_send(len)?;
            }
            messenger.wait_all()?;
            messenger.recv(0)?;
        } else {
            for slot in 0..window {
                messenger.post_recv(slot, len)?;
            }
            messenger.wait_all()?;
            messenger.send(0)?;
        }
        if rep >= warmup {
            samples.push(micros_since(start) / window as f64);
        }
    }
    Ok((rank == 0).then(|| with_rates(point(size, &samples), size, 1.0)))
}

/// Both ranks post a window of receives and a window of sends, then wait for all of them.
pub fn both_ways(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
) -> Result<Option<Point>, BenchError> {
    let len = size as usize;
    let window = window_for(size);
    let bytes_per_rep = 2 * size * window as u64;
    let warmup = plan.warmup_for(bytes_per_rep);
    let reps = plan.reps_for(bytes_per_rep);
    let mut samples = Vec::with_capacity(reps as usize);
    for rep in 0..warmup + reps {
        let start = Instant::now();
        for slot in 0..window {
            messenger.post_recv(slot, len)?;
        }
        for _ in 0..window {
            messenger.post_send(len)?;
        }
        messenger.wait_all()?;
        if rep >= warmup {
            samples.push(micros_since(start) / window as f64);
        }
    }
    Ok((rank == 0).then(|| with_rates(point(size, &samples), size, 2.0)))
}

/// Bandwidth and message rate from the median time per message; `directions` messages of
/// `size` bytes move in that time.
fn with_rates(mut point: Point, size: u64, directions: f64) -> Point {
    let per_message = point.time_us.median;
    point.mbytes_per_sec = Some(mbytes_per_sec(directions * size as f64, per_message));
    point.msgs_per_sec = Some(if per_message > 0.0 {
        directions * 1e6 / per_message
    } else {
        0.0
    });
    point
}

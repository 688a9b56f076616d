//! `bw` and `msgrate`: a window of one-way messages closed by a return acknowledgement (EMP);
//! `bibw`: windows in both directions at once.

use super::{point, window_for, Plan};
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
    let samples = plan.time_repetitions(size * window as u64, window as f64, || {
        if rank == 0 {
            for _ in 0..window {
                messenger.post_send(len)?;
            }
            messenger.wait_all()?;
            messenger.recv(0)
        } else {
            for slot in 0..window {
                messenger.post_recv(slot, len)?;
            }
            messenger.wait_all()?;
            messenger.send(0)
        }
    })?;
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
    let samples = plan.time_repetitions(2 * size * window as u64, window as f64, || {
        for slot in 0..window {
            messenger.post_recv(slot, len)?;
        }
        for _ in 0..window {
            messenger.post_send(len)?;
        }
        messenger.wait_all()
    })?;
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

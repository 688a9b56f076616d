//! `latency`: ping-pong, half the round trip per repetition (EMP, BIP, LM, PANIC); with
//! `bandwidth`, also size over half the round trip (RMPP's ping-pong bandwidth, `offload`).

use super::{point, Plan};
use crate::messenger::Messenger;
use crate::model::Point;
use crate::stats::mbytes_per_sec;
use crate::BenchError;

pub fn measure(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
    bandwidth: bool,
) -> Result<Option<Point>, BenchError> {
    let samples = ping_pong(messenger, rank, size, plan)?;
    if rank != 0 {
        return Ok(None);
    }
    let mut point = point(size, &samples);
    if bandwidth {
        point.mbytes_per_sec = Some(mbytes_per_sec(size as f64, point.time_us.median));
    }
    Ok(Some(point))
}

/// The timed ping-pong of `size`-byte messages: half a round trip per sample (rank 0 sends
/// first, rank 1 answers).
pub(super) fn ping_pong(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
) -> Result<Vec<f64>, BenchError> {
    let len = size as usize;
    plan.time_repetitions(2 * size, 2.0, || {
        if rank == 0 {
            messenger.send(len)?;
            messenger.recv(len)
        } else {
            messenger.recv(len)?;
            messenger.send(len)
        }
    })
}

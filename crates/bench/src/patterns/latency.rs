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
    let len = size as usize;
    let samples = plan.time_repetitions(2 * size, 2.0, || {
        if rank == 0 {
            messenger.send(len)?;
            messenger.recv(len)
        } else {
            messenger.recv(len)?;
            messenger.send(len)
        }
    })?;
    if rank != 0 {
        return Ok(None);
    }
    let mut point = point(size, &samples);
    if bandwidth {
        point.mbytes_per_sec = Some(mbytes_per_sec(size as f64, point.time_us.median));
    }
    Ok(Some(point))
}

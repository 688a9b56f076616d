//! `latency`: ping-pong, half the round trip per repetition (EMP, BIP, LM, PANIC); with
//! `bandwidth`, also size over half the round trip (RMPP's ping-pong bandwidth, `offload`).

use std::time::Instant;

use super::{micros_since, point, Plan};
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
    let bytes_per_rep = 2 * size;
    let warmup = plan.warmup_for(bytes_per_rep);
    let reps = plan.reps_for(bytes_per_rep);
    let mut samples = Vec::with_capacity(reps as usize);
    for rep in 0..warmup + reps {
        let start = Instant::now();
        if rank == 0 {
            messenger.send(len)?;
            messenger.recv(len)?;
        } else {
            messenger.recv(len)?;
            messenger.send(len)?;
        }
        if rep >= warmup {
            samples.push(micros_since(start) / 2.0);
        }
    }
    if rank != 0 {
        return Ok(None);
    }
    let mut point = point(size, &samples);
    if bandwidth {
        point.mbytes_per_sec = Some(mbytes_per_sec(size as f64, point.time_us.median));
    }
    Ok(Some(point))
}

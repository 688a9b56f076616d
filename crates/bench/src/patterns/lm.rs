//! `lm`: LM's figure 4 and table 3. A ping-pong as NetPIPE's (the paper's method): latency is
//! half the round trip, bandwidth the size over it. Around the repetitions, a looper
//! ([`crate::looper`], the paper's CPU method) on every CPU sees what the exchange took from
//! the whole machine, and rank 0's messenger says what it received and what of it was copied
//! in user space.

use std::time::Duration;

use super::{point, Plan};
use crate::looper::{IdleRates, Looper};
use crate::messenger::Messenger;
use crate::model::{Copies, CpuUse, Point};
use crate::stats::mbytes_per_sec;
use crate::BenchError;

/// Time for the previous point's last messages and wake-ups to settle before calibrating.
const SETTLE: Duration = Duration::from_millis(20);
/// How long the loopers count on a quiet machine for their idle rates.
const CALIBRATION: Duration = Duration::from_millis(200);
/// Rank 1 sleeps this much longer than rank 0 calibrates, so it is quiet throughout.
const MARGIN: Duration = Duration::from_millis(30);

pub fn measure(
    messenger: &mut dyn Messenger,
    rank: u32,
    size: u64,
    plan: &Plan,
) -> Result<Option<Point>, BenchError> {
    let looper = (rank == 0).then(Looper::start);
    let idle = calibrate_quietly(messenger, looper.as_ref())?;
    let copies_before = messenger.copies();
    let before = looper.as_ref().map(Looper::read);
    let samples = super::latency::ping_pong(messenger, rank, size, plan)?;
    let (Some(looper), Some(idle), Some(before)) = (looper, idle, before) else {
        return Ok(None);
    };
    let after = looper.read();
    let busy_cpus = idle.busy_cpus(&before, &after);
    let seconds = after.seconds_since(&before);
    let repetitions = plan.warmup_for(2 * size) + plan.reps_for(2 * size);
    let moved_mbytes = (2 * size * repetitions) as f64 / 1e6;
    let mut point = point(size, &samples);
    point.mbytes_per_sec = Some(mbytes_per_sec(size as f64, point.time_us.median));
    point.cpu = Some(CpuUse {
        busy_cpus,
        cpus: looper.cpus() as u32,
        us_per_mbyte: busy_cpus * seconds * 1e6 / moved_mbytes.max(1e-12),
    });
    point.copies = copies_since(copies_before, messenger.copies());
    Ok(Some(point))
}

/// Rank 0 takes the loopers' idle rates while rank 1 sleeps; then rank 1 says it is back.
fn calibrate_quietly(
    messenger: &mut dyn Messenger,
    looper: Option<&Looper>,
) -> Result<Option<IdleRates>, BenchError> {
    match looper {
        Some(looper) => {
            std::thread::sleep(SETTLE);
            let idle = looper.calibrate(CALIBRATION);
            messenger.recv(0)?;
            Ok(Some(idle))
        }
        None => {
            std::thread::sleep(SETTLE + CALIBRATION + MARGIN);
            messenger.send(0)?;
            Ok(None)
        }
    }
}

/// What arrived between two readings of a messenger's counters.
fn copies_since(before: Option<Copies>, after: Option<Copies>) -> Option<Copies> {
    let (before, after) = (before?, after?);
    Some(Copies {
        bytes_received: after.bytes_received - before.bytes_received,
        bytes_copied: after.bytes_copied - before.bytes_copied,
        transfers: after.transfers - before.transfers,
        transfers_placed: after.transfers_placed - before.transfers_placed,
    })
}

//! `panic-rtt`: PANIC figure 3, round trip against size (0 B to 4 KiB).
//!
//! * `api`: the plain API's ping-pong (`isend`/`irecv`), timed on rank 0's host;
//! * `mcp2mcp`: `bping` on rank 0's engine against `pong` on rank 1's, no host involved; each
//!   round trip timed by the program with `CLOCK` (the engine's clock at the start of the
//!   turn that handles the message) and read back through `DISPLAY`;
//! * `getdeliver`: the same with the payload taken from host memory (`GET`) and delivered into
//!   the other host's memory (`DELIVER`) on both sides, hosts not notified; timed by `CLOCK`;
//! * `app2app`: each host writes the payload into its segment and asks its program to send it
//!   (a message to its own engine); the other program delivers it and sets a flag, which that
//!   host busy-polls before sending it back; timed on rank 0's host.

use std::time::Instant;

use nicmsg::{Comm, Programs, Source, TagMatch};

use super::{
    load_here, poll_flag, send_done, wait_done, words, Waiting, APP2APP, BPING, DONE_TAG, GDPING,
    GDPONG, PONG,
};
use crate::model::Point;
use crate::patterns::{point, Plan};
use crate::BenchError;

/// Trigger that starts a timed run of `bping`/`gdping`, and of `app2app`'s send.
const START: u16 = 1;
/// Flag `bping`/`gdping` set at the end of a run, and `app2app` on an arrival.
const FLAG: u8 = 0;
/// The segment `gdping`, `gdpong` and `app2app` use; payload at 0, arrivals at 4096.
const SEGMENT: u16 = 3;
const SEGMENT_LEN: usize = 8192;
/// The API ping-pong's tag.
const PING_TAG: u32 = DONE_TAG + 1;

pub fn run(
    variant: &str,
    comm: &Comm,
    sizes: &[u64],
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    match variant {
        "api" => api(comm, sizes, plan, report),
        "mcp2mcp" => {
            let programs = comm.programs();
            let ping = engine_pair(comm, &programs, ("bping.pdl", BPING), ("pong.pdl", PONG))?;
            engine_timed(comm, &programs, ping, sizes, plan, report)
        }
        "getdeliver" => {
            let programs = comm.programs();
            let mut memory = payload_memory();
            let _segment = programs.share(SEGMENT, &mut memory)?;
            let ping = engine_pair(
                comm,
                &programs,
                ("gdping.pdl", GDPING),
                ("gdpong.pdl", GDPONG),
            )?;
            engine_timed(comm, &programs, ping, sizes, plan, report)
        }
        "app2app" => app2app(comm, sizes, plan, report),
        other => Err(BenchError::Usage(format!(
            "panic-rtt: no variant {other:?}"
        ))),
    }
}

/// Memory for the segment: a recognisable payload at 0, room for arrivals at 4096.
fn payload_memory() -> Vec<u8> {
    (0..SEGMENT_LEN).map(|i| (i % 251) as u8).collect()
}

/// Loads `first` on rank 0's engine and `second` on rank 1's, each by its own host; returns
/// the first's id (on rank 0; rank 1 gets the second's).
fn engine_pair(
    comm: &Comm,
    programs: &Programs<'_>,
    first: (&str, &str),
    second: (&str, &str),
) -> Result<nicmsg::ProgramId, BenchError> {
    let me = comm.rank();
    let (name, source) = if me == 0 { first } else { second };
    let id = load_here(programs, me, name, source)?;
    comm.barrier()?;
    Ok(id)
}

/// Rank 0 asks its program for warm-up and timed runs of round trips and collects the times
/// the program displayed; rank 1's host only waits (its engine answers).
fn engine_timed(
    comm: &Comm,
    programs: &Programs<'_>,
    ping: nicmsg::ProgramId,
    sizes: &[u64],
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    for &size in sizes {
        if comm.rank() != 0 {
            wait_done(comm)?;
            continue;
        }
        let mut samples = Vec::new();
        let mut host_timed_us = None;
        for (count, keep) in [
            (plan.warmup_for(2 * size), false),
            (plan.reps_for(2 * size), true),
        ] {
            if count == 0 {
                continue;
            }
            let started = Instant::now();
            programs.send(0, ping, START, &words(size as i64, count as i64))?;
            poll_flag(comm, programs, ping, FLAG, Waiting::Api)?;
            if keep {
                host_timed_us = Some(started.elapsed().as_secs_f64() * 1e6 / count as f64);
            }
            let mut values = Vec::with_capacity(count as usize);
            while values.len() < count as usize {
                let taken = programs.output(0, Some(ping))?;
                if taken.is_empty() {
                    return Err(BenchError::Usage(format!(
                        "{} of {count} round trips displayed",
                        values.len()
                    )));
                }
                values.extend(taken.into_iter().map(|shown| shown.value as f64 / 1e3));
            }
            if keep {
                samples = values;
            }
        }
        let mut point = point(size, &samples);
        point.host_timed_us = host_timed_us;
        report(point);
        send_done(comm)?;
    }
    Ok(())
}

/// The plain API's ping-pong: the whole round trip per sample.
fn api(
    comm: &Comm,
    sizes: &[u64],
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    let max = sizes.iter().copied().max().unwrap_or(0) as usize;
    let data = vec![0x5au8; max];
    let mut buffer = vec![0u8; max];
    let me = comm.rank();
    for &size in sizes {
        let len = size as usize;
        let samples = plan.time_repetitions(2 * size, 1.0, || {
            if me == 0 {
                let reply =
                    comm.irecv(&mut buffer[..len], Source::Rank(1), TagMatch::Tag(PING_TAG))?;
                comm.send(&data[..len], 1, PING_TAG)?;
                reply.wait()?;
            } else {
                comm.recv(&mut buffer[..len], Source::Rank(0), TagMatch::Tag(PING_TAG))?;
                comm.send(&data[..len], 0, PING_TAG)?;
            }
            Ok(())
        })?;
        if me == 0 {
            report(point(size, &samples));
        }
    }
    Ok(())
}

/// Host and program together: the payload goes from host memory to host memory through the
/// programs, and each host is told of its arrival by a flag and starts the way back.
fn app2app(
    comm: &Comm,
    sizes: &[u64],
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    let programs = comm.programs();
    let me = comm.rank();
    let peer = 1 - me;
    let mut memory = payload_memory();
    let segment = programs.share(SEGMENT, &mut memory)?;
    let id = load_here(&programs, me, "app2app.pdl", APP2APP)?;
    comm.barrier()?;
    let payload: Vec<u8> = (0..4096).map(|i| (i % 241) as u8).collect();
    for &size in sizes {
        let len = size as usize;
        let go = words(size as i64, i64::from(peer));
        let samples = plan.time_repetitions(2 * size, 1.0, || {
            if me == 0 {
                segment.write(0, &payload[..len])?;
                programs.send(0, id, START, &go)?;
                poll_flag(comm, &programs, id, FLAG, Waiting::Busy)
            } else {
                poll_flag(comm, &programs, id, FLAG, Waiting::Busy)?;
                segment.write(0, &payload[..len])?;
                programs.send(1, id, START, &go)?;
                Ok(())
            }
        })?;
        if me == 0 {
            report(point(size, &samples));
        }
        comm.barrier()?;
    }
    drop(segment);
    Ok(())
}

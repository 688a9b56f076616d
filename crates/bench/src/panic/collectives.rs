//! `panic-collectives`: the barrier and the 8-byte sum all-reduce completed on the engines
//! (`examples/pdl/barrier.pdl`, `allreduce.pdl`) against the same operations driven by the
//! hosts over the plain API: `comm.barrier()`, and an all-reduce written with sends and
//! receives using the programs' algorithm (every rank to rank 0, the sum back to every rank).
//!
//! Per operation: the latency on rank 0's host, and the CPU time its thread used meanwhile
//! (`CLOCK_THREAD_CPUTIME_ID` before and after). A host waits for the engine's flag the way the
//! API does (`wait_flag`: spin 50 us, then nap) with the engine thread; with the inline engine
//! it must run the engine itself, so it polls.

use nicmsg::{Comm, Source, TagMatch};

use super::{load_here, poll_flag, thread_cpu_us, Waiting, ALLREDUCE, BARRIER, DONE_TAG};
use crate::model::Point;
use crate::patterns::{point, Plan};
use crate::stats::summarize;
use crate::BenchError;

const ENTER: u16 = 50;
const START: u16 = 40;
const DONE: u8 = 0;
const RESULTS: u16 = 1;
const CONTRIB_TAG: u32 = DONE_TAG + 20;
const RESULT_TAG: u32 = DONE_TAG + 21;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Barrier,
    Allreduce,
}

pub fn run(
    variant: &str,
    comm: &Comm,
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    let (op, engine) = match variant {
        "engine-barrier" => (Op::Barrier, true),
        "host-barrier" => (Op::Barrier, false),
        "engine-allreduce" => (Op::Allreduce, true),
        "host-allreduce" => (Op::Allreduce, false),
        other => {
            return Err(BenchError::Usage(format!(
                "panic-collectives: no variant {other:?}"
            )))
        }
    };
    let programs = comm.programs();
    let me = comm.rank();
    let ranks = i64::from(comm.size());
    let mut results = [0u8; 8];
    let segment = programs.share(RESULTS, &mut results)?;
    let program = if engine {
        Some(match op {
            Op::Barrier => load_here(&programs, me, "barrier.pdl", BARRIER)?,
            Op::Allreduce => load_here(&programs, me, "allreduce.pdl", ALLREDUCE)?,
        })
    } else {
        None
    };
    comm.barrier()?;
    let size = if op == Op::Barrier { 0 } else { 8 };
    let mut round = 0i64;
    let mut cpu = Vec::new();
    let mut one = || -> Result<(), BenchError> {
        round += 1;
        let mine = 1000 * round + i64::from(me);
        let cpu_before = thread_cpu_us();
        let sum = match (op, program) {
            (Op::Barrier, Some(id)) => {
                programs.send(me, id, ENTER, &[])?;
                poll_flag(comm, &programs, id, DONE, Waiting::Api)?;
                None
            }
            (Op::Barrier, None) => {
                comm.barrier()?;
                None
            }
            (Op::Allreduce, Some(id)) => {
                programs.send(me, id, START, &mine.to_le_bytes())?;
                poll_flag(comm, &programs, id, DONE, Waiting::Api)?;
                let mut sum = [0u8; 8];
                segment.read(0, &mut sum)?;
                Some(i64::from_le_bytes(sum))
            }
            (Op::Allreduce, None) => Some(host_allreduce(comm, mine)?),
        };
        cpu.push(thread_cpu_us() - cpu_before);
        if let Some(sum) = sum {
            let expected = 1000 * round * ranks + ranks * (ranks - 1) / 2;
            if sum != expected {
                return Err(BenchError::Usage(format!(
                    "all-reduce {round}: {sum}, expected {expected}"
                )));
            }
        }
        Ok(())
    };
    let samples = plan.time_repetitions(size, 1.0, &mut one)?;
    let timed = &cpu[cpu.len() - samples.len()..];
    if me == 0 {
        let mut point = point(size, &samples);
        point.host_cpu_us = Some(summarize(timed));
        report(point);
    }
    comm.barrier()?;
    drop(segment);
    Ok(())
}

/// The programs' algorithm over the plain API: every rank sends its value to rank 0, which
/// adds them and sends the sum to every rank.
fn host_allreduce(comm: &Comm, mine: i64) -> Result<i64, BenchError> {
    let mut sum = [0u8; 8];
    if comm.rank() != 0 {
        let result = comm.irecv(&mut sum, Source::Rank(0), TagMatch::Tag(RESULT_TAG))?;
        comm.send(&mine.to_le_bytes(), 0, CONTRIB_TAG)?;
        result.wait()?;
        return Ok(i64::from_le_bytes(sum));
    }
    let mut total = mine;
    for _ in 1..comm.size() {
        let mut value = [0u8; 8];
        comm.recv(&mut value, Source::Any, TagMatch::Tag(CONTRIB_TAG))?;
        total += i64::from_le_bytes(value);
    }
    let bytes = total.to_le_bytes();
    for rank in 1..comm.size() {
        comm.send(&bytes, rank, RESULT_TAG)?;
    }
    Ok(total)
}

//! PANIC's measurements (issue 17; the paper's figures 3 and 5, and the engine-resident
//! collectives and look-up against the same done by the hosts): programs compiled at run time
//! from PDL sources kept here (and `examples/pdl/`), loaded through `Comm::programs`.
//!
//! * `panic-rtt` ([`rtt`]): round trip against size for `mcp2mcp`, `getdeliver`, `app2app`
//!   and the plain API;
//! * `panic-cost` ([`cost`]): the engine's handling of one program message, by phase, against
//!   the statements executed (in-process, the engine's own code and timestamps);
//! * `panic-collectives` ([`collectives`]): barrier and all-reduce on the engines against
//!   `comm.barrier()` and a send/receive all-reduce: latency and the host thread's CPU time;
//! * `panic-kv` ([`kv`]): a key-value look-up answered by the engine against one answered by
//!   the host.
//!
//! Rank 0 measures and reports points; rank 1 plays its part and waits for rank 0's "done"
//! (a plain message), which with the inline engine keeps it driving its engine meanwhile.

mod collectives;
mod cost;
mod kv;
mod rtt;

use std::time::{Duration, Instant};

use nicmsg::{Comm, EngineMode, ProgramId, Programs, Source, TagMatch};

use crate::model::{Pattern, Point};
use crate::patterns::Plan;
use crate::BenchError;

pub const PONG: &str = include_str!("../../../../examples/pdl/pong.pdl");
pub const KVLOOKUP: &str = include_str!("../../../../examples/pdl/kvlookup.pdl");
pub const BARRIER: &str = include_str!("../../../../examples/pdl/barrier.pdl");
pub const ALLREDUCE: &str = include_str!("../../../../examples/pdl/allreduce.pdl");
pub const BPING: &str = include_str!("pdl/bping.pdl");
pub const GDPING: &str = include_str!("pdl/gdping.pdl");
pub const GDPONG: &str = include_str!("pdl/gdpong.pdl");
pub const APP2APP: &str = include_str!("pdl/app2app.pdl");

/// Tag of the plain messages that end a step ("done") and of the API's ping-pong.
const DONE_TAG: u32 = 7001;
/// A tag nothing is ever sent with: the inline engine's host polls it to run turns.
const NEVER_TAG: u32 = 7999;
/// Longest a step may wait before the series fails (a hang is a failure with a reason).
const STEP_LIMIT: Duration = Duration::from_secs(120);

/// Runs `pattern`'s `variant` on this rank; rank 0 reports the points.
pub fn run(
    pattern: Pattern,
    variant: &str,
    comm: &Comm,
    sizes: &[u64],
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    match pattern {
        Pattern::PanicRtt => rtt::run(variant, comm, sizes, plan, report),
        Pattern::PanicCost => cost::run(comm, sizes, plan, report),
        Pattern::PanicCollectives => collectives::run(variant, comm, plan, report),
        Pattern::PanicKv => kv::run(variant, comm, plan, report),
        other => Err(BenchError::Usage(format!(
            "{} is not a PANIC pattern",
            other.name()
        ))),
    }
}

/// Points `panic-cost` reports per size: one per statement count.
pub fn cost_points_per_size(quick: bool, reps: Option<u64>) -> usize {
    cost::statements(reps.unwrap_or(if quick { 200 } else { 10_000 })).len()
}

/// A PDL source compiled into a module, or the compiler's messages.
pub fn module(name: &str, source: &str) -> Result<Vec<u8>, BenchError> {
    let compiled = nicmsg_pdl::compile(source)
        .map_err(|errors| BenchError::Usage(nicmsg_pdl::render_all(name, source, &errors)))?;
    compiled
        .encode()
        .map_err(|error| BenchError::Usage(format!("{name}: {error}")))
}

/// Loads `source` on this rank's engine (under the id of its name) and starts it.
fn load_here(
    programs: &Programs<'_>,
    me: u32,
    name: &str,
    source: &str,
) -> Result<ProgramId, BenchError> {
    let id = programs.load(me, &module(name, source)?)?;
    programs.run(me, id)?;
    Ok(id)
}

/// How a host waits for a program's flag with the engine thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// Busy-polls the flag (yielding the core after a few microseconds, as the library's own
    /// waits do: `nicmsg_engine::sharing::relax`): app2app's host, as in the paper.
    Busy,
    /// The API's `wait_flag`: spins 50 us, then naps, leaving the cores to the engines.
    Api,
}

/// Waits for flag `flag` of `program` and clears it. The inline engine runs only inside the
/// host's calls, so its host polls a receive that never matches (each poll is an engine turn);
/// with the engine thread the host waits as `waiting` says.
fn poll_flag(
    comm: &Comm,
    programs: &Programs<'_>,
    program: ProgramId,
    flag: u8,
    waiting: Waiting,
) -> Result<(), BenchError> {
    let inline = comm.engine_mode() == EngineMode::Inline;
    if !inline && waiting == Waiting::Api {
        programs.wait_flag(program, flag)?;
        programs.clear_flag(program, flag)?;
        return Ok(());
    }
    let started = Instant::now();
    let mut polls = 0u64;
    loop {
        if programs.flag(program, flag)? {
            programs.clear_flag(program, flag)?;
            return Ok(());
        }
        if inline {
            comm.iprobe(Source::Rank(comm.rank()), TagMatch::Tag(NEVER_TAG))?;
        } else {
            nicmsg_engine::sharing::relax(started.elapsed().as_nanos() as u64);
        }
        polls += 1;
        if polls.is_multiple_of(4096) && started.elapsed() > STEP_LIMIT {
            return Err(BenchError::Stalled(STEP_LIMIT));
        }
    }
}

/// Rank 0 tells rank 1 that a step is over.
fn send_done(comm: &Comm) -> Result<(), BenchError> {
    comm.send(&[], 1, DONE_TAG)?;
    Ok(())
}

/// Rank 1 waits (driving its inline engine meanwhile) until rank 0 says the step is over.
fn wait_done(comm: &Comm) -> Result<(), BenchError> {
    comm.recv(&mut [], Source::Rank(0), TagMatch::Tag(DONE_TAG))?;
    Ok(())
}

/// Two little-endian words, the (length, count) or (length, peer) arguments of the programs.
fn words(a: i64, b: i64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    bytes
}

/// The CPU time of the calling thread, in microseconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_us() -> f64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the struct passed; the clock exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as f64 * 1e6 + time.tv_nsec as f64 / 1e3
}

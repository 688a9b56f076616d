//! Workloads: the application side of every rank, as small deterministic state machines that
//! post operations at virtual times (through [`World`]'s host commands) and react to
//! completions. Each workload designs its traffic so that every message sent is eventually
//! received, so the ledger can demand exactly that.

use crate::ledger::OpRef;
use crate::node::{ProgramsSetup, SimMode};
use crate::rng::SimRng;
use crate::workloads;
use crate::world::World;
use nicmsg_proto::{OpError, Rank, Status};

/// The application of a run.
pub trait Workload {
    /// Called once at virtual time 0.
    fn start(&mut self, w: &mut World);
    /// A wake-up the workload scheduled with [`World::wake_at`].
    fn on_wake(&mut self, _w: &mut World, _rank: Rank, _token: u64) {}
    /// An operation of `rank` completed (already checked by the ledger).
    fn on_completion(
        &mut self,
        _w: &mut World,
        _rank: Rank,
        _op: OpRef,
        _result: Result<Status, OpError>,
    ) {
    }
    /// Workload-specific checks at the end of the run.
    fn finish(&mut self, _w: &mut World) {}
}

/// Message sizes every workload draws from: around the frame payload, the eager limit, and
/// multi-frame and multi-megabyte rendezvous messages.
pub const SIZES: [u64; 12] = [
    0,
    1,
    7,
    1000,
    1400,
    1500,
    4096,
    8192,
    8193,
    65536,
    1 << 20,
    3 << 20,
];
/// The sizes below one megabyte.
pub const SMALL_SIZES: &[u64] = &[0, 1, 7, 1000, 1400, 1500, 4096, 8192, 8193, 65536];
pub const LARGE_SIZES: &[u64] = &[1 << 20, 3 << 20];

/// Draws a message size: mostly below a megabyte; a large one with probability `large_p` while
/// `budget` lasts.
pub fn draw_size(rng: &mut SimRng, large_p: f64, budget: &mut u32) -> u64 {
    if *budget > 0 && rng.chance(large_p) {
        *budget -= 1;
        rng.pick(LARGE_SIZES)
    } else {
        rng.pick(SMALL_SIZES)
    }
}

/// `base * scale`, at least 1.
pub fn scaled(base: usize, scale: f64) -> usize {
    ((base as f64 * scale).round() as usize).max(1)
}

/// What a workload is built from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadParams {
    pub ranks: u32,
    /// Multiplies the number of messages (1.0 = default).
    pub scale: f64,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    PingPong,
    Streams,
    AllToAll,
    AnySource,
    Probe,
    Cancel,
    Truncation,
    Scatter,
    PeerDeath,
    Library,
    Credits,
    Trickle,
    Unsafe,
    Programs,
    ProgramsDeath,
    ProgramsHost,
    ProgramsHostDeath,
}

impl WorkloadKind {
    /// Every workload; the last three need engine mode ([`WorkloadKind::needs_engine`]).
    pub const ALL: [WorkloadKind; 17] = [
        WorkloadKind::PingPong,
        WorkloadKind::Streams,
        WorkloadKind::AllToAll,
        WorkloadKind::AnySource,
        WorkloadKind::Probe,
        WorkloadKind::Cancel,
        WorkloadKind::Truncation,
        WorkloadKind::Scatter,
        WorkloadKind::PeerDeath,
        WorkloadKind::Library,
        WorkloadKind::Credits,
        WorkloadKind::Trickle,
        WorkloadKind::Unsafe,
        WorkloadKind::Programs,
        WorkloadKind::ProgramsDeath,
        WorkloadKind::ProgramsHost,
        WorkloadKind::ProgramsHostDeath,
    ];

    /// The messaging workloads, which run in both modes.
    pub const MESSAGING: [WorkloadKind; 13] = [
        WorkloadKind::PingPong,
        WorkloadKind::Streams,
        WorkloadKind::AllToAll,
        WorkloadKind::AnySource,
        WorkloadKind::Probe,
        WorkloadKind::Cancel,
        WorkloadKind::Truncation,
        WorkloadKind::Scatter,
        WorkloadKind::PeerDeath,
        WorkloadKind::Library,
        WorkloadKind::Credits,
        WorkloadKind::Trickle,
        WorkloadKind::Unsafe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::PingPong => "pingpong",
            WorkloadKind::Streams => "streams",
            WorkloadKind::AllToAll => "alltoall",
            WorkloadKind::AnySource => "anysource",
            WorkloadKind::Probe => "probe",
            WorkloadKind::Cancel => "cancel",
            WorkloadKind::Truncation => "truncation",
            WorkloadKind::Scatter => "scatter",
            WorkloadKind::PeerDeath => "peer-death",
            WorkloadKind::Library => "library",
            WorkloadKind::Credits => "credits",
            WorkloadKind::Trickle => "trickle",
            WorkloadKind::Unsafe => "unsafe",
            WorkloadKind::Programs => "programs",
            WorkloadKind::ProgramsDeath => "programs-death",
            WorkloadKind::ProgramsHost => "programs-host",
            WorkloadKind::ProgramsHostDeath => "programs-host-death",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn description(self) -> &'static str {
        match self {
            WorkloadKind::PingPong => {
                "2 ranks bounce messages of every size; receives posted before or after arrival"
            }
            WorkloadKind::Streams => {
                "every pair streams mixed sizes (0 B..3 MiB) on 3 tags, receives early or late"
            }
            WorkloadKind::AllToAll => {
                "every rank exchanges with every other rank in rounds (16 by default)"
            }
            WorkloadKind::AnySource => {
                "a sink receives with ANY source and/or ANY tag in three phases"
            }
            WorkloadKind::Probe => {
                "a receiver probes (blocking, polling, cancelled) then receives what it saw"
            }
            WorkloadKind::Cancel => {
                "cancel of unmatched receives and probes, of queued sends, racing cancels"
            }
            WorkloadKind::Truncation => {
                "receive buffers shorter than the message: Truncated, buffer untouched"
            }
            WorkloadKind::Scatter => "every buffer in 2..16 segments with gaps, in shuffled order",
            WorkloadKind::PeerDeath => {
                "one rank dies mid-run; ops with it fail cleanly, the others complete"
            }
            WorkloadKind::Library => {
                "ANY/ANY receives and probes posted first, beside the library's own messages"
            }
            WorkloadKind::Credits => {
                "bursts beyond the eager credits, then a later tag and a barrier waited for first"
            }
            WorkloadKind::Trickle => {
                "NetPIPE's stream: a burst of short sends, then one by one, received one at a time \
                 (credit waits)"
            }
            WorkloadKind::Unsafe => {
                "an unsafe MPI program: every rank sends many short messages to its peers before \
                 it receives any, some withdrawn by cancel, then receives them in order"
            }
            WorkloadKind::Programs => {
                "PANIC: PDL programs loaded, run, messaged and unloaded on every engine (engine mode)"
            }
            WorkloadKind::ProgramsDeath => {
                "PANIC with a rank dying mid-run: requests to it fail, not hang (engine mode)"
            }
            WorkloadKind::ProgramsHostDeath => {
                "programs-host with a rank dying before the last barrier: the others wait, unharmed (engine mode)"
            }
            WorkloadKind::ProgramsHost => {
                "PANIC with its host: segments, locks, flags, PASS/DROP, barrier, all-reduce, replace, programs off (engine mode)"
            }
        }
    }

    pub fn default_ranks(self) -> u32 {
        match self {
            WorkloadKind::PingPong
            | WorkloadKind::Cancel
            | WorkloadKind::Truncation
            | WorkloadKind::Trickle => 2,
            WorkloadKind::Streams | WorkloadKind::Probe | WorkloadKind::Scatter => 3,
            WorkloadKind::AnySource | WorkloadKind::Library => 4,
            WorkloadKind::Credits | WorkloadKind::Unsafe => 3,
            WorkloadKind::PeerDeath => 6,
            WorkloadKind::AllToAll => 16,
            WorkloadKind::Programs
            | WorkloadKind::ProgramsDeath
            | WorkloadKind::ProgramsHost
            | WorkloadKind::ProgramsHostDeath => 4,
        }
    }

    /// Ranks used given a requested count: fixed for two-party workloads, at least the minimum
    /// a workload needs otherwise.
    pub fn ranks(self, requested: Option<u32>) -> u32 {
        match self {
            WorkloadKind::PingPong
            | WorkloadKind::Cancel
            | WorkloadKind::Truncation
            | WorkloadKind::Trickle => 2,
            WorkloadKind::PeerDeath => requested.unwrap_or(6).max(3),
            WorkloadKind::Unsafe => requested.unwrap_or(3).clamp(2, 4),
            WorkloadKind::Programs
            | WorkloadKind::ProgramsDeath
            | WorkloadKind::ProgramsHost
            | WorkloadKind::ProgramsHostDeath => requested.unwrap_or(4).clamp(4, 64),
            other => requested.unwrap_or(other.default_ranks()).max(2),
        }
    }

    pub fn build(self, params: &WorkloadParams, rng: &mut SimRng) -> Box<dyn Workload> {
        match self {
            WorkloadKind::PingPong => Box::new(workloads::pingpong::PingPong::new(params, rng)),
            WorkloadKind::Streams => Box::new(workloads::streams::Streams::new(
                workloads::streams::StreamsConfig::streams(params),
                rng,
            )),
            WorkloadKind::Scatter => Box::new(workloads::streams::Streams::new(
                workloads::streams::StreamsConfig::scatter(params),
                rng,
            )),
            WorkloadKind::Truncation => Box::new(workloads::streams::Streams::new(
                workloads::streams::StreamsConfig::truncation(params),
                rng,
            )),
            WorkloadKind::PeerDeath => Box::new(workloads::streams::Streams::new(
                workloads::streams::StreamsConfig::peer_death(params),
                rng,
            )),
            WorkloadKind::AllToAll => Box::new(workloads::alltoall::AllToAll::new(params, rng)),
            WorkloadKind::AnySource => Box::new(workloads::anysource::AnySource::new(params, rng)),
            WorkloadKind::Probe => Box::new(workloads::probe::Probe::new(params, rng)),
            WorkloadKind::Cancel => Box::new(workloads::cancel::Cancel::new(params, rng)),
            WorkloadKind::Library => Box::new(workloads::library::Library::new(params, rng)),
            WorkloadKind::Credits => Box::new(workloads::credits::Credits::new(params, rng)),
            WorkloadKind::Trickle => Box::new(workloads::trickle::Trickle::new(params, rng)),
            WorkloadKind::Unsafe => {
                Box::new(workloads::unsafe_sends::UnsafeSends::new(params, rng))
            }
            WorkloadKind::Programs => {
                Box::new(workloads::programs::Programs::new(params, rng, false))
            }
            WorkloadKind::ProgramsDeath => {
                Box::new(workloads::programs::Programs::new(params, rng, true))
            }
            WorkloadKind::ProgramsHost => Box::new(workloads::programs_host::ProgramsHost::new(
                params, rng, false,
            )),
            WorkloadKind::ProgramsHostDeath => Box::new(
                workloads::programs_host::ProgramsHost::new(params, rng, true),
            ),
        }
    }

    /// How rank `rank` of `ranks` hosts programs in a run of `seed`: as a process does by
    /// default, except in `programs-host`, whose last rank has programs turned off or requests
    /// from other ranks refused (half of the seeds each), and `programs-host-death`, whose last
    /// rank refuses requests from other ranks.
    pub fn programs_setup(self, rank: Rank, ranks: u32, seed: u64) -> ProgramsSetup {
        match self {
            WorkloadKind::ProgramsHost if rank + 1 == ranks => {
                workloads::programs_host::setup_of_last(seed, false)
            }
            WorkloadKind::ProgramsHostDeath if rank + 1 == ranks => {
                workloads::programs_host::setup_of_last(seed, true)
            }
            _ => ProgramsSetup::default(),
        }
    }

    /// Whether the workload needs the engine (`--mode engine`): PANIC's programs run in the
    /// engine, which core mode does not have.
    pub fn needs_engine(self) -> bool {
        matches!(
            self,
            WorkloadKind::Programs
                | WorkloadKind::ProgramsDeath
                | WorkloadKind::ProgramsHost
                | WorkloadKind::ProgramsHostDeath
        )
    }

    /// The workloads `all` means in `mode`: every one in engine mode, the messaging ones in
    /// core mode.
    pub fn for_mode(mode: SimMode) -> Vec<WorkloadKind> {
        match mode {
            SimMode::Engine => Self::ALL.to_vec(),
            SimMode::Core => Self::MESSAGING.to_vec(),
        }
    }
}

//! The results of a benchmark run, as written to `results.json`.
//!
//! Every measured quantity is a time in microseconds summarised by its median, min, max and 99th
//! percentile over all repetitions ([`Summary`]); rates (MB/s, messages/s) are derived from the
//! median and stored beside it so that readers of the JSON need not know each pattern's formula.

use serde::{Deserialize, Serialize};

/// One `nicmsg bench` invocation: the machine, the link, and one [`Series`] per pattern and
/// system.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub environment: Environment,
    pub series: Vec<Series>,
}

/// Where the numbers were measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Environment {
    /// `uname -sr`.
    pub kernel: String,
    /// CPU model name from /proc/cpuinfo.
    pub cpu: String,
    /// Online cores.
    pub cores: u32,
    /// "loopback", or "netns" (two namespaces joined by veth through a bridge).
    pub link: String,
    /// Link MTU in bytes (loopback: the MTU nicmsg was told to use).
    pub mtu: u32,
    /// Egress rate limit of each link in bit/s (`--link gige`: 1e9), if any.
    pub rate_bits_per_sec: Option<u64>,
    /// Random loss per received frame in percent, if any.
    pub loss_percent: Option<f64>,
    /// `git describe --always --dirty` of the source tree the binary was built from.
    pub commit: String,
    /// Start of the run, seconds since the Unix epoch.
    pub started_unix: u64,
    /// The `nicmsg bench` command line.
    pub command: String,
    /// `--quick`: fewer repetitions, fewer sizes; numbers only show that everything runs.
    pub quick: bool,
}

/// The measurement patterns (`nicmsg bench PATTERN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Latency,
    Bw,
    Bibw,
    Msgrate,
    Overhead,
    Overlap,
    Offload,
    /// LM figure 4 and table 3: ping-pong latency and bandwidth with the CPU use a looper
    /// sees, and the bytes copied in user space per byte received.
    Lm,
    /// PANIC figure 3: round trips engine to engine, host memory to host memory by programs,
    /// host and program together, and the plain API.
    #[serde(rename = "panic-rtt")]
    PanicRtt,
    /// PANIC figure 5: the engine's handling of a program message, by phase, against the
    /// statements the activation executes.
    #[serde(rename = "panic-cost")]
    PanicCost,
    /// Barrier and all-reduce completed on the engines against the same over the plain API.
    #[serde(rename = "panic-collectives")]
    PanicCollectives,
    /// A key-value look-up answered by the engine against one answered by the host.
    #[serde(rename = "panic-kv")]
    PanicKv,
    /// MPI over Open MPI's transports and nicmsg's libfabric provider: `NPopenmpi`'s ping-pong,
    /// half the round trip (and size / that, NetPIPE's bandwidth) per size.
    #[serde(rename = "mpi-latency")]
    MpiLatency,
    /// `NPopenmpi -s`: a stream of one-way MPI messages, one message's share of the stream.
    #[serde(rename = "mpi-bw")]
    MpiBw,
    /// MPI_Irecv/MPI_Isend, computation, MPI_Waitall (`crates/bench/tests/mpi/overlap.c`):
    /// `overlap` over MPI.
    #[serde(rename = "mpi-overlap")]
    MpiOverlap,
}

impl Pattern {
    /// Every pattern, in the order of the papers' sections (the report's order: latency first),
    /// then MPI's.
    pub const ALL: [Pattern; 15] = [
        Pattern::Latency,
        Pattern::Bw,
        Pattern::Bibw,
        Pattern::Msgrate,
        Pattern::Overhead,
        Pattern::Overlap,
        Pattern::Offload,
        Pattern::Lm,
        Pattern::PanicRtt,
        Pattern::PanicCost,
        Pattern::PanicCollectives,
        Pattern::PanicKv,
        Pattern::MpiLatency,
        Pattern::MpiBw,
        Pattern::MpiOverlap,
    ];

    /// What `--suite papers` runs: every pattern but MPI's, which need Open MPI and run as
    /// `--suite mpi`.
    pub const PAPERS: &'static [Pattern] = Pattern::ALL.split_at(Pattern::FIRST_MPI).0;

    /// What `--suite mpi` runs: Open MPI on nicmsg's provider against Open MPI on TCP and UCX.
    pub const MPI: &'static [Pattern] = Pattern::ALL.split_at(Pattern::FIRST_MPI).1;

    /// Where MPI's patterns start in [`Pattern::ALL`].
    const FIRST_MPI: usize = 12;

    /// MPI's patterns: run under `mpirun` by [`crate::mpi`], not under nicmsg's launcher.
    pub fn is_mpi(self) -> bool {
        Pattern::MPI.contains(&self)
    }

    /// PANIC's patterns: nicmsg's programs alone, no baselines.
    pub fn is_panic(self) -> bool {
        matches!(
            self,
            Pattern::PanicRtt | Pattern::PanicCost | Pattern::PanicCollectives | Pattern::PanicKv
        )
    }

    /// The name used on the command line, in `results.json` and for file names.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Latency => "latency",
            Pattern::Bw => "bw",
            Pattern::Bibw => "bibw",
            Pattern::Msgrate => "msgrate",
            Pattern::Overhead => "overhead",
            Pattern::Overlap => "overlap",
            Pattern::Offload => "offload",
            Pattern::Lm => "lm",
            Pattern::PanicRtt => "panic-rtt",
            Pattern::PanicCost => "panic-cost",
            Pattern::PanicCollectives => "panic-collectives",
            Pattern::PanicKv => "panic-kv",
            Pattern::MpiLatency => "mpi-latency",
            Pattern::MpiBw => "mpi-bw",
            Pattern::MpiOverlap => "mpi-overlap",
        }
    }

    /// The pattern called `name`.
    pub fn from_name(name: &str) -> Option<Pattern> {
        Pattern::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Whether a system could be measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Outcome {
    /// Measured; the points are in [`Series::points`].
    Measured,
    /// An external peer whose program is not installed; `install` says how to get it.
    NotInstalled { install: String },
    /// The system does not implement this pattern (e.g. raw UDP has no reliability for `bw`
    /// under loss); `reason` says why.
    Unsupported { reason: String },
    /// It ran and failed; `error` has the cause and the tail of its output.
    Failed { error: String },
}

/// One system under one pattern: e.g. nicmsg (inline engine) under `latency`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    pub pattern: Pattern,
    /// Short stable name: `nicmsg-inline`, `nicmsg-thread`, `tcp-blocking`, `tcp-busy`,
    /// `udp-busy`, `netpipe`, `fi-udp-rxd`, `fi-tcp-rxm`, `ucx-tcp`, or for `offload`
    /// variants such as `nicmsg-thread-pre5`.
    pub system: String,
    /// Human label for legends and tables.
    pub label: String,
    /// The exact command(s) that produced the numbers.
    pub command: String,
    pub outcome: Outcome,
    pub points: Vec<Point>,
}

/// One x value of a series: a message size, or for `overlap` a (size, computation) pair.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Point {
    /// Message size in bytes.
    pub size: u64,
    /// `overlap`: computation per iteration in microseconds (the swept variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_us: Option<f64>,
    /// The pattern's main time: `latency`: half the round trip; `bw`/`bibw`/`msgrate`: one
    /// message's share of a window (window time / messages in it); `overhead`: post-send +
    /// post-receive + wait per message; `overlap`: one iteration.
    pub time_us: Summary,
    /// Bandwidth from the median time, in MB/s (10^6 bytes per second), payload only; for
    /// `bibw` both directions together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbytes_per_sec: Option<f64>,
    /// Messages per second from the median time (`msgrate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msgs_per_sec: Option<f64>,
    /// `overhead`: per-call times of post-send, post-receive and wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// `overlap`: what the computation got and what the network got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// `panic-cost`: statements the activation executed (the x axis of PANIC's figure 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statements: Option<u64>,
    /// `panic-cost`: the engine's handling of one message, by phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// `panic-rtt`, `mcp2mcp` and `getdeliver` (timed by the programs' `CLOCK`): the timed
    /// run's time on rank 0's host over its round trips, which also counts starting the run
    /// and seeing its end once, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_timed_us: Option<f64>,
    /// `panic-collectives`: CPU time of the host's thread per operation (`time_us` is its
    /// latency), in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu_us: Option<Summary>,
    /// `lm`: the CPU the timed repetitions took, as a looper saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// `lm`: what rank 0 received during the timed repetitions and what of it was copied in
    /// user space (systems that count it: the LM socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<Copies>,
    /// Repetitions behind the summary.
    pub repetitions: u64,
    /// Every sample in microseconds, in measurement order (may be thinned to at most
    /// [`MAX_SAMPLES_KEPT`] evenly spaced samples; the summary uses all of them).
    pub samples_us: Vec<f64>,
}

/// How many samples per point are written to the JSON (a 4 MiB sweep with 10,000 repetitions
/// per size would otherwise write megabytes of numbers nobody reads).
pub const MAX_SAMPLES_KEPT: usize = 10_000;

/// Median, min, max and 99th percentile of a set of samples, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub p99: f64,
    pub mean: f64,
}

/// EMP table 2: per-call times in microseconds (medians over batches).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Overhead {
    pub post_send_us: Summary,
    pub post_recv_us: Summary,
    pub wait_us: Summary,
}

/// EMP figure 6, RMPP figures 9-11: one amount of computation per iteration.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Overlap {
    /// Fraction of the loop's time spent in the computation (0..1): EMP figure 6's x axis.
    pub cpu_fraction: f64,
    /// Payload sent plus received per second of loop time, MB/s: EMP figure 6's y axis.
    pub throughput_mbytes_per_sec: f64,
    /// Time of the same computation alone divided by its time during communication (0..1):
    /// RMPP's processor availability.
    pub availability: f64,
    /// availability x throughput (RMPP figure 11), MB/s.
    pub effective_mbytes_per_sec: f64,
}

/// LM section 4: CPU use by the "looper" method, over the whole machine (both ranks and the
/// kernel's work for them).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CpuUse {
    /// CPUs' worth of time the loopers lost while the repetitions ran (0 to `cpus`).
    pub busy_cpus: f64,
    /// CPUs the loopers ran on.
    pub cpus: u32,
    /// CPU time per MB of payload moved (both directions), in microseconds.
    pub us_per_mbyte: f64,
}

/// LM's goal: bytes received without a copy in user space.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Copies {
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Of them, bytes copied in user space on the way to the application.
    pub bytes_copied: u64,
    /// Transfers received.
    pub transfers: u64,
    /// Of them, transfers admitted and placed (LM's zero-copy path).
    pub transfers_placed: u64,
}

impl Copies {
    /// Bytes copied in user space per byte received.
    pub fn copied_per_byte(&self) -> f64 {
        self.bytes_copied as f64 / self.bytes_received.max(1) as f64
    }
}

/// PANIC figure 5: where the engine's time for one program message goes, in microseconds
/// (per-message samples summarised; `Point::time_us` is the whole handling).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Copy out of the inbox, header parsed and checked: the engine's demultiplexing.
    pub demux_us: Summary,
    /// The VM's dispatch and activation, segment copies excluded.
    pub interpret_us: Summary,
    /// The activation's `DELIVER` into the host's segment.
    pub deliver_us: Summary,
    /// Instructions the activation executed.
    pub instructions: u32,
    /// One read of the monotonic clock (each phase includes about one), median.
    pub clock_read_us: f64,
}

#[cfg(test)]
mod pattern_names {
    use super::Pattern;

    /// The command line, file names and `results.json` must agree on every pattern's name.
    #[test]
    fn names_round_trip_and_match_the_json() {
        for pattern in Pattern::ALL {
            assert_eq!(Pattern::from_name(pattern.name()), Some(pattern));
            assert_eq!(
                serde_json::to_value(pattern).unwrap(),
                serde_json::Value::String(pattern.name().into())
            );
        }
        assert_eq!(Pattern::from_name("pingpong"), None);
    }

    /// The suites split `ALL` where MPI's patterns start: the split must stay there.
    #[test]
    fn the_mpi_suite_is_exactly_the_mpi_patterns() {
        assert!(Pattern::MPI.iter().all(|p| p.name().starts_with("mpi-")));
        assert!(!Pattern::PAPERS.iter().any(|p| p.name().starts_with("mpi-")));
    }
}

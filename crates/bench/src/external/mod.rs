//! External peers: installed benchmark programs run beside nicmsg as baselines.
//!
//! | system       | program        | package        | transport                       |
//! |--------------|----------------|----------------|---------------------------------|
//! | `netpipe`    | `NPtcp`        | `netpipe-tcp`  | TCP                             |
//! | `fi-udp-rxd` | `fi_pingpong`  | `libfabric-bin`| libfabric `udp;ofi_rxd` (RDM)   |
//! | `fi-tcp-rxm` | `fi_pingpong`  | `libfabric-bin`| libfabric `tcp;ofi_rxm` (RDM)   |
//! | `ucx-tcp`    | `ucx_perftest` | `ucx-utils`    | UCX with `UCX_TLS=tcp`          |
//!
//! # How a run goes
//!
//! The runner calls [`run`] in both ranks of a 2-rank job at about the same time. Rank 0 runs
//! the tool's server, rank 1 its client against rank 0's address; rank 1 parses the output and
//! returns the [`Series`], rank 0 returns `None`. Each tool's server serves one test and exits,
//! so both ranks walk the same list of sizes and run one server/client pair per size: this is
//! also what lets every tool measure exactly the sizes asked for (see the tool modules).
//!
//! * **Ports.** Pair `i` of a (peer, pattern) uses port `base + 1000 x peer + 100 x pattern +
//!   i % 100`, which both ranks compute alike. A distinct port per size means a client can only
//!   ever reach the server of its own size, never the previous size's server that is still
//!   exiting. `base` is [`DEFAULT_BASE_PORT`], below Linux's ephemeral range so that no
//!   outgoing connection holds it, or the environment variable [`PORT_ENV`].
//! * **Start-up order.** A client whose connection is refused (its server is not up yet) is
//!   started again every [`CONNECT_RETRY_INTERVAL`] until the context's timeout has passed.
//! * **Bounds.** Every process runs for at most the context's timeout and is then killed. A
//!   server whose client never comes is killed at the timeout, and rank 0 then stops serving
//!   the remaining sizes (their client has failed too). Rank 1 stops at its first failure and
//!   returns [`Outcome::Failed`] with the tool's last output lines and the points measured so
//!   far.
//! * **CPUs.** Busy-polling tools on one shared CPU measure the scheduler tick, not the
//!   network; unless the rank is pinned already, the server's tool runs on the first allowed
//!   CPU and the client's on the second (recorded as `taskset -c N`; see `tool_cpus`).
//! * **Sizes.** Sorted, duplicates removed, sizes a tool cannot do left out (NetPIPE: 0; `-2`:
//!   above the socket buffers). `quick` keeps at most [`QUICK_MAX_SIZES`] of them, spread over
//!   the range.
//! * **Iterations.** `ctx.iterations` when given; otherwise per size about
//!   [`BYTES_PER_SIZE`] of payload per direction, between [`MIN_ITERATIONS`] and
//!   [`MAX_PINGPONG_ITERATIONS`] (ping-pong) or [`MAX_STREAM_ITERATIONS`] (streams), so that a
//!   4 MiB sweep takes seconds to a minute per tool; `quick`: [`QUICK_BYTES_PER_SIZE`] between
//!   [`QUICK_MIN_ITERATIONS`] and [`QUICK_MAX_ITERATIONS`].
//!
//! # What the numbers are
//!
//! The tools print one aggregate per size, not per-message samples. [`Summary::median`] holds
//! the tool's central value (UCX latency: its 50th percentile; every other case: the tool's
//! mean, NetPIPE's lowest mean of 3 trials), [`Summary::mean`] the tool's mean, and
//! `min`, `max` and `p99` repeat the median because the tools report no spread (plots then draw
//! no error bar rather than an invented one). `samples_us` holds that one value, `repetitions`
//! the timed iterations behind it. Latency is half the round trip for all four tools. `bw` is a
//! streamed window for UCX (`tag_bw`) but a ping-pong bandwidth for NetPIPE and fi_pingpong
//! (they have no working stream mode; the series label says so), so its `time_us` there is the
//! half round trip. For `bibw` (NetPIPE `-2`) `time_us` is one exchange (one message each way)
//! and the rates count both directions. `mbytes_per_sec` = size / median (10^6 B/s) for every
//! point with size > 0, `msgs_per_sec` = 10^6 / median for `bw`, `bibw` and `msgrate`.

mod fabric;
mod netpipe;
pub(crate) mod process;
mod ucx;

use std::env;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::model::{Outcome, Pattern, Point, Series, Summary};
use process::{CommandLine, Exit, WorkDir};

/// NetPIPE's result files and trials, which `NPopenmpi` shares with `NPtcp` ([`crate::mpi`]).
pub(crate) use netpipe::{parse_result_line as netpipe_result, TRIALS as NETPIPE_TRIALS};

/// First port of the block of ports the external peers use (see the module doc).
pub const DEFAULT_BASE_PORT: u16 = 23000;
/// Environment variable that moves the block of ports; both ranks must see the same value.
pub const PORT_ENV: &str = "NICMSG_BENCH_EXTERNAL_PORT";
/// Ports per peer in the block.
const PORTS_PER_PEER: u16 = 1000;
/// Ports per pattern within a peer's ports: one per size, sizes beyond this wrap around.
const PORTS_PER_PATTERN: u16 = 100;
/// Ports the whole block spans.
const PORT_SPAN: u16 = 4 * PORTS_PER_PEER;

/// Pause between a client's refused connection and its next attempt.
pub const CONNECT_RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// Output that means "no server listening (yet)": worth starting the client again.
const CONNECT_REFUSED: [&str; 4] = [
    "Connection refused",
    "Cannot Connect",
    "No route to host",
    "Network is unreachable",
];

/// Payload per direction aimed at for each size: 32 iterations at 4 MiB, 131,072 at 1 KiB
/// (capped). At 1 Gbit/s a ping-pong of this much takes about 2 s per size.
pub const BYTES_PER_SIZE: u64 = 128 << 20;
/// Fewest timed iterations per size.
pub const MIN_ITERATIONS: u64 = 20;
/// Most round trips per size: 10,000 give a stable mean within a second or two per size.
pub const MAX_PINGPONG_ITERATIONS: u64 = 10_000;
/// Most messages per size in a stream, where each costs about a microsecond.
pub const MAX_STREAM_ITERATIONS: u64 = 100_000;
/// `quick`: payload per direction per size.
pub const QUICK_BYTES_PER_SIZE: u64 = 4 << 20;
/// `quick`: fewest iterations per size.
pub const QUICK_MIN_ITERATIONS: u64 = 10;
/// `quick`: most iterations per size.
pub const QUICK_MAX_ITERATIONS: u64 = 200;
/// `quick`: most sizes measured (each costs a server and client start-up).
pub const QUICK_MAX_SIZES: usize = 4;

/// Lines of a failed tool's output kept in [`Outcome::Failed`].
const OUTPUT_TAIL_LINES: usize = 12;
/// Characters of a failed tool's output kept in [`Outcome::Failed`].
const OUTPUT_TAIL_CHARS: usize = 1500;

/// An installed benchmark program and the transport it is run over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExternalPeer {
    /// NetPIPE's `NPtcp`: TCP sockets.
    NetPipe,
    /// libfabric `fi_pingpong` over `udp;ofi_rxd`: reliable datagrams over UDP.
    FiUdpRxd,
    /// libfabric `fi_pingpong` over `tcp;ofi_rxm`: reliable messages over TCP.
    FiTcpRxm,
    /// UCX `ucx_perftest` over its tcp transport.
    UcxTcp,
}

impl ExternalPeer {
    pub fn all() -> [ExternalPeer; 4] {
        [
            ExternalPeer::NetPipe,
            ExternalPeer::FiUdpRxd,
            ExternalPeer::FiTcpRxm,
            ExternalPeer::UcxTcp,
        ]
    }

    /// The stable name used in [`Series::system`].
    pub fn system(&self) -> &'static str {
        match self {
            ExternalPeer::NetPipe => "netpipe",
            ExternalPeer::FiUdpRxd => "fi-udp-rxd",
            ExternalPeer::FiTcpRxm => "fi-tcp-rxm",
            ExternalPeer::UcxTcp => "ucx-tcp",
        }
    }

    /// The peer whose [`system`](Self::system) is `name`.
    pub fn from_system(name: &str) -> Option<ExternalPeer> {
        ExternalPeer::all().into_iter().find(|p| p.system() == name)
    }

    /// Legend label (a series may add how the pattern was measured).
    pub fn label(&self) -> &'static str {
        match self {
            ExternalPeer::NetPipe => "NetPIPE (TCP)",
            ExternalPeer::FiUdpRxd => "libfabric udp;ofi_rxd",
            ExternalPeer::FiTcpRxm => "libfabric tcp;ofi_rxm",
            ExternalPeer::UcxTcp => "UCX (tcp)",
        }
    }

    /// The program run on both ranks.
    pub fn program(&self) -> &'static str {
        match self {
            ExternalPeer::NetPipe => "NPtcp",
            ExternalPeer::FiUdpRxd | ExternalPeer::FiTcpRxm => "fi_pingpong",
            ExternalPeer::UcxTcp => "ucx_perftest",
        }
    }

    /// How to install [`program`](Self::program) on Debian.
    pub fn install_hint(&self) -> &'static str {
        match self {
            ExternalPeer::NetPipe => "apt-get install netpipe-tcp",
            ExternalPeer::FiUdpRxd | ExternalPeer::FiTcpRxm => "apt-get install libfabric-bin",
            ExternalPeer::UcxTcp => "apt-get install ucx-utils",
        }
    }

    /// Whether [`program`](Self::program) is an executable file on PATH.
    pub fn is_installed(&self) -> bool {
        find_on_path(self.program()).is_some()
    }

    /// Position in [`all`](Self::all), for the port layout.
    fn index(&self) -> u16 {
        match self {
            ExternalPeer::NetPipe => 0,
            ExternalPeer::FiUdpRxd => 1,
            ExternalPeer::FiTcpRxm => 2,
            ExternalPeer::UcxTcp => 3,
        }
    }
}

/// What one rank knows about the job it is in.
#[derive(Debug, Clone)]
pub struct PeerContext {
    /// 0: runs the servers; 1: runs the clients and returns the series.
    pub rank: u32,
    /// Rank 0's address, which the clients connect to.
    pub server_ip: IpAddr,
    /// This rank's address. The tools' servers listen on all interfaces and pick their data
    /// interfaces themselves, so it is not passed to them.
    pub my_ip: IpAddr,
    /// Fewer sizes and iterations: shows that everything runs, in seconds.
    pub quick: bool,
    /// Timed iterations per size, overriding the defaults (see the module doc).
    pub iterations: Option<u64>,
    /// Limit for every process started, and for a client's attempts to reach its server.
    pub timeout: Duration,
}

/// A failure that is not the tool's: the tool's own failures become [`Outcome::Failed`].
#[derive(Debug, Error)]
pub enum ExternalError {
    #[error("external peers run on rank 0 (server) and rank 1 (client), not on rank {0}")]
    Rank(u32),
    #[error("bad port for the external peers: {0}")]
    Port(String),
    #[error("cannot create a scratch directory for {system}: {source}")]
    WorkDir {
        system: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Whether `peer` measures `pattern`; the reason when it does not.
pub fn supports(peer: ExternalPeer, pattern: Pattern) -> Result<(), String> {
    match peer {
        ExternalPeer::NetPipe => netpipe::supports(pattern),
        ExternalPeer::FiUdpRxd | ExternalPeer::FiTcpRxm => fabric::supports(pattern),
        ExternalPeer::UcxTcp => ucx::supports(pattern),
    }
}

/// Runs `pattern` for `sizes` (bytes) with the ports from [`base_port`]. Rank 0: serves,
/// returns `Ok(None)`. Rank 1: returns `Ok(Some(series))`, whose outcome says whether the tool
/// was measured, not installed, does not support the pattern, or failed.
pub fn run(
    peer: ExternalPeer,
    pattern: Pattern,
    sizes: &[u64],
    ctx: &PeerContext,
) -> Result<Option<Series>, ExternalError> {
    run_on_port(peer, pattern, sizes, ctx, base_port()?)
}

/// [`run`] with the block of ports starting at `base_port` (tests run several peers at once).
pub fn run_on_port(
    peer: ExternalPeer,
    pattern: Pattern,
    sizes: &[u64],
    ctx: &PeerContext,
    base_port: u16,
) -> Result<Option<Series>, ExternalError> {
    run_program(peer, peer.program(), pattern, sizes, ctx, base_port)
}

/// The first port of the block: [`PORT_ENV`] when set, else [`DEFAULT_BASE_PORT`].
pub fn base_port() -> Result<u16, ExternalError> {
    match env::var(PORT_ENV) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| ExternalError::Port(format!("{PORT_ENV}={text:?} is not a port"))),
        Err(env::VarError::NotPresent) => Ok(DEFAULT_BASE_PORT),
        Err(env::VarError::NotUnicode(_)) => {
            Err(ExternalError::Port(format!("{PORT_ENV} is not text")))
        }
    }
}

/// The port of pair `index` of (`peer`, `pattern`).
fn port(base: u16, peer: ExternalPeer, pattern: Pattern, index: usize) -> u16 {
    let pattern_index: u16 = match pattern {
        Pattern::Latency => 0,
        Pattern::Bw => 1,
        Pattern::Bibw => 2,
        Pattern::Msgrate => 3,
        Pattern::Overhead => 4,
        Pattern::Overlap => 5,
        Pattern::Offload => 6,
        // No external peer runs PANIC's patterns (`supports` refuses them).
        _ => 7,
    };
    let within = (index % usize::from(PORTS_PER_PATTERN)) as u16;
    base + peer.index() * PORTS_PER_PEER + pattern_index * PORTS_PER_PATTERN + within
}

/// Which side of the tool a rank runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Client,
}

impl Role {
    fn of(rank: u32) -> Result<Role, ExternalError> {
        match rank {
            0 => Ok(Role::Server),
            1 => Ok(Role::Client),
            other => Err(ExternalError::Rank(other)),
        }
    }
}

/// How a tool moves messages, which sets how many iterations fit the time budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traffic {
    /// One message in flight: each iteration is a round trip.
    PingPong,
    /// Many messages in flight one way: each iteration is about a microsecond for small ones.
    Stream,
}

/// One server/client pair: one size of one pattern.
#[derive(Debug, Clone)]
struct Job {
    pattern: Pattern,
    size: u64,
    /// Timed iterations asked of the tool (NetPIPE splits them over its trials).
    iterations: u64,
    port: u16,
    server_ip: IpAddr,
    /// CPUs for the server's and the client's tool, see [`tool_cpus`].
    cpus: Option<[usize; 2]>,
}

/// What a tool reported for one size.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Measured {
    time: Summary,
    repetitions: u64,
}

impl Measured {
    /// A tool that reports one value, its mean.
    fn single(us: f64, repetitions: u64) -> Measured {
        Measured::with_mean(us, us, repetitions)
    }

    /// A central value (the median where the tool gives one) and a mean; with no spread
    /// reported, min, max and p99 repeat the central value.
    fn with_mean(central_us: f64, mean_us: f64, repetitions: u64) -> Measured {
        Measured {
            time: Summary {
                median: central_us,
                min: central_us,
                max: central_us,
                p99: central_us,
                mean: mean_us,
            },
            repetitions,
        }
    }
}

/// The body of [`run_on_port`], with the program name separate so that tests can name one that
/// does not exist.
fn run_program(
    peer: ExternalPeer,
    program: &str,
    pattern: Pattern,
    sizes: &[u64],
    ctx: &PeerContext,
    base_port: u16,
) -> Result<Option<Series>, ExternalError> {
    let role = Role::of(ctx.rank)?;
    if base_port.checked_add(PORT_SPAN - 1).is_none() || base_port == 0 {
        return Err(ExternalError::Port(format!(
            "base port {base_port}: the block of {PORT_SPAN} ports must end by 65535"
        )));
    }
    let not_run =
        |outcome: Outcome| (role == Role::Client).then(|| empty_series(peer, pattern, outcome));
    if let Err(reason) = supports(peer, pattern) {
        return Ok(not_run(Outcome::Unsupported { reason }));
    }
    if find_on_path(program).is_none() {
        let install = peer.install_hint().to_string();
        return Ok(not_run(Outcome::NotInstalled { install }));
    }
    let jobs = plan(peer, pattern, sizes, ctx, base_port);
    let dir =
        WorkDir::create(&format!("{}-rank{}", peer.system(), ctx.rank)).map_err(|source| {
            ExternalError::WorkDir {
                system: peer.system(),
                source,
            }
        })?;
    match role {
        Role::Server => {
            serve(peer, program, &jobs, ctx, dir.path());
            Ok(None)
        }
        Role::Client => Ok(Some(measure(
            peer,
            program,
            pattern,
            &jobs,
            ctx,
            dir.path(),
        ))),
    }
}

fn empty_series(peer: ExternalPeer, pattern: Pattern, outcome: Outcome) -> Series {
    Series {
        pattern,
        system: peer.system().to_string(),
        label: series_label(peer, pattern),
        command: String::new(),
        outcome,
        points: Vec::new(),
    }
}

/// The legend label, saying how the pattern was measured where that is not the obvious way.
fn series_label(peer: ExternalPeer, pattern: Pattern) -> String {
    let base = peer.label();
    match (peer, pattern) {
        (ExternalPeer::UcxTcp, Pattern::Latency) => format!("{base}, tag_lat"),
        (ExternalPeer::UcxTcp, _) => format!("{base}, tag_bw"),
        (ExternalPeer::NetPipe, Pattern::Bibw) => format!("{base}, -2 both directions"),
        (_, Pattern::Bw) => format!("{base}, ping-pong bandwidth"),
        _ => base.to_string(),
    }
}

/// The pairs both ranks run, computed from shared inputs only so that the ranks agree.
fn plan(
    peer: ExternalPeer,
    pattern: Pattern,
    sizes: &[u64],
    ctx: &PeerContext,
    base_port: u16,
) -> Vec<Job> {
    let traffic = match peer {
        ExternalPeer::NetPipe => netpipe::traffic(pattern),
        ExternalPeer::FiUdpRxd | ExternalPeer::FiTcpRxm => fabric::traffic(pattern),
        ExternalPeer::UcxTcp => ucx::traffic(pattern),
    };
    let cpus = tool_cpus();
    let min_size = match peer {
        ExternalPeer::NetPipe => netpipe::MIN_SIZE,
        _ => 0,
    };
    let mut usable: Vec<u64> = sizes.iter().copied().filter(|&s| s >= min_size).collect();
    usable.sort_unstable();
    usable.dedup();
    if ctx.quick {
        usable = spread(&usable, QUICK_MAX_SIZES);
    }
    usable
        .into_iter()
        .enumerate()
        .map(|(i, size)| Job {
            pattern,
            size,
            iterations: iterations(traffic, size, ctx),
            port: port(base_port, peer, pattern, i),
            server_ip: ctx.server_ip,
            cpus,
        })
        .collect()
}

/// At most `max` of `sizes` (sorted), evenly spread, keeping the first and the last.
fn spread(sizes: &[u64], max: usize) -> Vec<u64> {
    if sizes.len() <= max {
        return sizes.to_vec();
    }
    if max < 2 {
        return sizes[..max].to_vec();
    }
    (0..max)
        .map(|i| sizes[i * (sizes.len() - 1) / (max - 1)])
        .collect()
}

/// Timed iterations for one size (see the module doc).
fn iterations(traffic: Traffic, size: u64, ctx: &PeerContext) -> u64 {
    if let Some(n) = ctx.iterations {
        return n.max(1);
    }
    let (budget, min, max) = match (ctx.quick, traffic) {
        (true, _) => (
            QUICK_BYTES_PER_SIZE,
            QUICK_MIN_ITERATIONS,
            QUICK_MAX_ITERATIONS,
        ),
        (false, Traffic::PingPong) => (BYTES_PER_SIZE, MIN_ITERATIONS, MAX_PINGPONG_ITERATIONS),
        (false, Traffic::Stream) => (BYTES_PER_SIZE, MIN_ITERATIONS, MAX_STREAM_ITERATIONS),
    };
    (budget / size.max(1)).clamp(min, max)
}

/// The server's and the client's command for one pair, pinned as [`tool_cpus`] says.
fn commands(peer: ExternalPeer, program: &str, job: &Job) -> (CommandLine, CommandLine) {
    let (server, client) = match peer {
        ExternalPeer::NetPipe => netpipe::commands(program, job),
        ExternalPeer::FiUdpRxd | ExternalPeer::FiTcpRxm => fabric::commands(program, peer, job),
        ExternalPeer::UcxTcp => ucx::commands(program, job),
    };
    let cpu = |side: usize| job.cpus.map(|cpus| cpus[side]);
    (server.on_cpu(cpu(0)), client.on_cpu(cpu(1)))
}

/// The CPUs the server's and the client's tool are pinned to. Two busy-polling processes
/// (ucx_perftest, fi_pingpong) that share one CPU hand it over only at scheduler ticks, and a
/// round trip then takes milliseconds: ucx_perftest measured 4,000 us instead of 4 us with
/// both on one CPU, at random when left to the scheduler. When this thread may run on several
/// CPUs (the runner did not pin the rank), the server gets the first allowed CPU and the
/// client the second; when the rank is pinned to one CPU, the tools inherit that and are left
/// alone. Both ranks compute the same pair when started alike, so rank 1 records rank 0's
/// pinning correctly.
fn tool_cpus() -> Option<[usize; 2]> {
    let allowed = crate::affinity::allowed_cpus();
    (allowed.len() >= 2).then(|| [allowed[0], allowed[1]])
}

/// The client's result; `Ok(None)` when the tool skipped a size it cannot do.
fn parse(
    peer: ExternalPeer,
    job: &Job,
    output: &str,
    dir: &Path,
) -> Result<Option<Measured>, String> {
    match peer {
        ExternalPeer::NetPipe => netpipe::parse(job, output, dir),
        ExternalPeer::FiUdpRxd | ExternalPeer::FiTcpRxm => fabric::parse(job, output).map(Some),
        ExternalPeer::UcxTcp => ucx::parse(job, output).map(Some),
    }
}

/// Rank 0: runs the server of each pair in turn. Stops at the first server that fails or
/// times out: its client has failed or is gone too, and waiting a full timeout for each of the
/// remaining sizes would only hold the job up.
fn serve(peer: ExternalPeer, program: &str, jobs: &[Job], ctx: &PeerContext, dir: &Path) {
    for job in jobs {
        let (server, _) = commands(peer, program, job);
        let log = format!("server-{}", job.size);
        match process::run_bounded(&server, dir, &log, ctx.timeout) {
            Ok(done) if done.exit == Exit::Success => {}
            _ => break,
        }
    }
}

/// Rank 1: runs the client of each pair and collects the points; stops at the first failure.
fn measure(
    peer: ExternalPeer,
    program: &str,
    pattern: Pattern,
    jobs: &[Job],
    ctx: &PeerContext,
    dir: &Path,
) -> Series {
    let mut series = empty_series(peer, pattern, Outcome::Measured);
    let mut commands_run = Vec::new();
    for job in jobs {
        let (server, client) = commands(peer, program, job);
        commands_run.push(format!("server: {server}; client: {client}"));
        let result = run_client(&client, job, ctx, dir)
            .and_then(|output| parse(peer, job, &output, dir).map_err(|e| with_tail(&e, &output)));
        match result {
            Ok(Some(measured)) => series.points.push(point(job, measured)),
            Ok(None) => {}
            Err(error) => {
                series.outcome = Outcome::Failed {
                    error: format!("size {}: {error}", job.size),
                };
                break;
            }
        }
    }
    series.command = commands_run.join("\n");
    series
}

/// Runs one client until it has reached its server. The server may start after it (the ranks
/// start independently, and rank 0 starts each size's server only when the previous one has
/// exited), so a refused connection is retried every [`CONNECT_RETRY_INTERVAL`] until the
/// context's timeout has passed. Returns the client's output.
fn run_client(
    client: &CommandLine,
    job: &Job,
    ctx: &PeerContext,
    dir: &Path,
) -> Result<String, String> {
    let deadline = Instant::now() + ctx.timeout;
    let log = format!("client-{}", job.size);
    loop {
        let done = process::run_bounded(client, dir, &log, ctx.timeout)
            .map_err(|e| format!("cannot run {}: {e}", client.program))?;
        match done.exit {
            Exit::Success => return Ok(done.output),
            Exit::TimedOut => {
                let what = format!("killed after the timeout of {:?}", ctx.timeout);
                return Err(with_tail(&what, &done.output));
            }
            Exit::Failed(how) => {
                let refused = CONNECT_REFUSED.iter().any(|m| done.output.contains(m));
                if !refused || Instant::now() + CONNECT_RETRY_INTERVAL >= deadline {
                    let what = format!("{} ended with {how}", client.program);
                    return Err(with_tail(&what, &done.output));
                }
                thread::sleep(CONNECT_RETRY_INTERVAL);
            }
        }
    }
}

/// `what`, followed by the last lines of the tool's output, which say why.
fn with_tail(what: &str, output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(OUTPUT_TAIL_LINES)..].join("\n");
    if tail.is_empty() {
        return format!("{what} (no output)");
    }
    let skip = tail.chars().count().saturating_sub(OUTPUT_TAIL_CHARS);
    let tail: String = tail.chars().skip(skip).collect();
    format!("{what}; output:\n{tail}")
}

/// The model's point for one measured size.
fn point(job: &Job, measured: Measured) -> Point {
    let t = measured.time.median;
    let valid = t.is_finite() && t > 0.0;
    // -2: each exchange moves one message each way; the rates count both.
    let directions = if job.pattern == Pattern::Bibw {
        2.0
    } else {
        1.0
    };
    let rated = matches!(job.pattern, Pattern::Bw | Pattern::Bibw | Pattern::Msgrate);
    Point {
        size: job.size,
        time_us: measured.time,
        mbytes_per_sec: (valid && job.size > 0).then(|| directions * job.size as f64 / t),
        msgs_per_sec: (valid && rated).then(|| directions * 1e6 / t),
        repetitions: measured.repetitions,
        samples_us: vec![t],
        ..Point::default()
    }
}

/// `program` itself when it names a path, else the first executable of that name on PATH.
pub(crate) fn find_on_path(program: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ctx(rank: u32) -> PeerContext {
        PeerContext {
            rank,
            server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            my_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            quick: false,
            iterations: None,
            timeout: Duration::from_secs(5),
        }
    }

    const NO_SUCH_PROGRAM: &str = "nicmsg-bench-no-such-program";

    #[test]
    fn names_are_stable_and_round_trip() {
        let systems: Vec<_> = ExternalPeer::all().iter().map(|p| p.system()).collect();
        assert_eq!(systems, ["netpipe", "fi-udp-rxd", "fi-tcp-rxm", "ucx-tcp"]);
        for peer in ExternalPeer::all() {
            assert_eq!(ExternalPeer::from_system(peer.system()), Some(peer));
            assert!(peer.install_hint().starts_with("apt-get install "));
        }
        assert_eq!(ExternalPeer::from_system("nicmsg-inline"), None);
    }

    #[test]
    fn not_installed_is_a_series_on_rank_1_and_nothing_on_rank_0() {
        let peer = ExternalPeer::UcxTcp;
        let sizes = [8, 1024];
        let server = run_program(
            peer,
            NO_SUCH_PROGRAM,
            Pattern::Latency,
            &sizes,
            &ctx(0),
            23000,
        );
        assert!(server.unwrap().is_none());
        let series = run_program(
            peer,
            NO_SUCH_PROGRAM,
            Pattern::Latency,
            &sizes,
            &ctx(1),
            23000,
        )
        .unwrap()
        .unwrap();
        assert_eq!(series.system, "ucx-tcp");
        assert_eq!(
            series.outcome,
            Outcome::NotInstalled {
                install: "apt-get install ucx-utils".into()
            }
        );
        assert!(series.points.is_empty());
    }

    #[test]
    fn unsupported_patterns_say_why() {
        for peer in ExternalPeer::all() {
            let series = run_on_port(peer, Pattern::Overlap, &[8], &ctx(1), 23000)
                .unwrap()
                .unwrap();
            assert!(
                matches!(series.outcome, Outcome::Unsupported { ref reason } if !reason.is_empty())
            );
            assert!(run_on_port(peer, Pattern::Overlap, &[8], &ctx(0), 23000)
                .unwrap()
                .is_none());
        }
        assert!(supports(ExternalPeer::UcxTcp, Pattern::Msgrate).is_ok());
        assert!(supports(ExternalPeer::NetPipe, Pattern::Bibw).is_ok());
        assert!(supports(ExternalPeer::FiUdpRxd, Pattern::Msgrate).is_err());
        assert!(supports(ExternalPeer::UcxTcp, Pattern::Bibw).is_err());
    }

    #[test]
    fn other_ranks_and_bad_ports_are_errors() {
        let r = run_on_port(
            ExternalPeer::NetPipe,
            Pattern::Latency,
            &[8],
            &ctx(2),
            23000,
        );
        assert!(matches!(r, Err(ExternalError::Rank(2))));
        let r = run_on_port(
            ExternalPeer::NetPipe,
            Pattern::Latency,
            &[8],
            &ctx(1),
            65000,
        );
        assert!(matches!(r, Err(ExternalError::Port(_))));
    }

    #[test]
    fn ports_are_distinct_per_peer_pattern_and_size() {
        let mut seen = std::collections::HashSet::new();
        for peer in ExternalPeer::all() {
            for pattern in [
                Pattern::Latency,
                Pattern::Bw,
                Pattern::Bibw,
                Pattern::Msgrate,
            ] {
                for i in 0..40 {
                    assert!(seen.insert(port(DEFAULT_BASE_PORT, peer, pattern, i)));
                }
            }
        }
        assert_eq!(
            port(23000, ExternalPeer::UcxTcp, Pattern::Offload, 99),
            26699
        );
    }

    #[test]
    fn plan_sorts_dedups_drops_impossible_sizes_and_thins_quick_runs() {
        let sizes = [4096, 0, 1, 2, 4096, 1400, 4194304];
        let c = ctx(1);
        let jobs = plan(ExternalPeer::NetPipe, Pattern::Latency, &sizes, &c, 23000);
        let got: Vec<u64> = jobs.iter().map(|j| j.size).collect();
        assert_eq!(got, [1, 2, 1400, 4096, 4194304]);
        assert_eq!(jobs[0].port, 23000);
        assert_eq!(jobs[4].port, 23004);
        let jobs = plan(ExternalPeer::UcxTcp, Pattern::Latency, &sizes, &c, 23000);
        assert_eq!(jobs[0].size, 0);

        let quick = PeerContext {
            quick: true,
            ..ctx(1)
        };
        let many: Vec<u64> = (0..=22).map(|e| 1u64 << e).collect();
        let jobs = plan(ExternalPeer::UcxTcp, Pattern::Latency, &many, &quick, 23000);
        let got: Vec<u64> = jobs.iter().map(|j| j.size).collect();
        assert_eq!(got.len(), QUICK_MAX_SIZES);
        assert_eq!((got[0], got[got.len() - 1]), (1, 4 << 20));
    }

    #[test]
    fn iterations_shrink_with_size_within_bounds() {
        let c = ctx(1);
        assert_eq!(
            iterations(Traffic::PingPong, 8, &c),
            MAX_PINGPONG_ITERATIONS
        );
        assert_eq!(iterations(Traffic::Stream, 8, &c), MAX_STREAM_ITERATIONS);
        assert_eq!(iterations(Traffic::PingPong, 1 << 20, &c), 128);
        assert_eq!(iterations(Traffic::PingPong, 16 << 20, &c), MIN_ITERATIONS);
        let quick = PeerContext {
            quick: true,
            ..ctx(1)
        };
        assert_eq!(iterations(Traffic::Stream, 0, &quick), QUICK_MAX_ITERATIONS);
        assert_eq!(
            iterations(Traffic::PingPong, 4 << 20, &quick),
            QUICK_MIN_ITERATIONS
        );
        let fixed = PeerContext {
            iterations: Some(7),
            ..ctx(1)
        };
        assert_eq!(iterations(Traffic::PingPong, 4 << 20, &fixed), 7);
    }

    #[test]
    fn points_derive_rates_from_the_median() {
        let job = |pattern| Job {
            pattern,
            size: 1000,
            iterations: 10,
            port: 23000,
            server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            cpus: None,
        };
        let p = point(&job(Pattern::Latency), Measured::with_mean(2.0, 3.0, 10));
        assert_eq!(p.mbytes_per_sec, Some(500.0));
        assert_eq!(p.msgs_per_sec, None);
        assert_eq!(
            (p.time_us.min, p.time_us.p99, p.time_us.mean),
            (2.0, 2.0, 3.0)
        );
        assert_eq!(p.samples_us, [2.0]);
        let p = point(&job(Pattern::Bibw), Measured::single(4.0, 10));
        assert_eq!(p.mbytes_per_sec, Some(500.0));
        assert_eq!(p.msgs_per_sec, Some(500_000.0));
    }

    #[test]
    fn a_failed_tool_keeps_the_tail_of_its_output() {
        let output: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let error = with_tail("NPtcp ended with exit status: 3", &output);
        assert!(error.starts_with("NPtcp ended with exit status: 3; output:\n"));
        assert!(error.ends_with("line 99") && !error.contains("line 87\n"));
        assert_eq!(with_tail("x", ""), "x (no output)");
    }

    #[test]
    fn a_client_that_never_reaches_a_server_fails_within_the_timeout() {
        // `false` stands in for a client: it fails without a refused connection, so it is not
        // retried; `sh -c 'echo Connection refused; exit 1'` is retried until the deadline.
        let dir = WorkDir::create("external-test").unwrap();
        let job = Job {
            pattern: Pattern::Latency,
            size: 8,
            iterations: 1,
            port: 23000,
            server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            cpus: None,
        };
        let short = PeerContext {
            timeout: Duration::from_millis(500),
            ..ctx(1)
        };
        let start = Instant::now();
        let err = run_client(&CommandLine::new("false"), &job, &short, dir.path()).unwrap_err();
        assert!(err.starts_with("false ended with exit status: 1"), "{err}");
        assert!(start.elapsed() < Duration::from_millis(400));

        let refused = CommandLine::new("sh").args(["-c", "echo Connection refused; exit 1"]);
        let start = Instant::now();
        let err = run_client(&refused, &job, &short, dir.path()).unwrap_err();
        assert!(err.contains("Connection refused"), "{err}");
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3));
    }

    #[test]
    fn finds_programs_on_path() {
        assert!(find_on_path("sh").is_some());
        assert!(find_on_path(NO_SUCH_PROGRAM).is_none());
        assert!(find_on_path("/bin/sh").is_some());
    }
}

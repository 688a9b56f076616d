//! The rank side of `nicmsg bench`: `nicmsg-bench bench-worker`, started by the launcher on two
//! ranks for one pattern and one system. Rank 0 (rank 1 for external peers, whose client side
//! measures) appends each point to the progress file as one JSON line as soon as it is measured,
//! and writes the whole [`Series`] to the result file at the end.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nicmsg_bootstrap::{exchange, job_from_env, JobEnv};

use crate::external::{self, PeerContext};
use crate::messenger::{
    LmMessenger, Messenger, NicmsgMessenger, TcpMessenger, UdpMessenger, Waiting,
    XdpFloorMessenger, LARGEST_DATAGRAM,
};
use crate::model::{Outcome, Pattern, Point, Series};
use crate::patterns::{self, Plan};
use crate::system::System;
use crate::BenchError;

/// How long the ranks wait for each other's addresses.
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest time one process of an external tool (one size) may run before it is killed.
const EXTERNAL_TIMEOUT: Duration = Duration::from_secs(60);

/// Arguments of `nicmsg-bench bench-worker` (given by `nicmsg bench`, not by people).
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    #[arg(long, value_parser = parse_pattern)]
    pub pattern: Pattern,
    #[arg(long)]
    pub system: System,
    /// Stable name of the series (e.g. nicmsg-thread-pre5).
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub label: String,
    /// Comma-separated sizes in bytes.
    #[arg(long, value_parser = crate::sizes::parse_sizes)]
    pub sizes: crate::sizes::Sizes,
    #[arg(long)]
    pub quick: bool,
    /// Override of the timed repetitions at small sizes.
    #[arg(long)]
    pub reps: Option<u64>,
    /// Link MTU: raw UDP cuts messages into datagrams of MTU - 28 bytes.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// nicmsg settings for this series, `NAME=VALUE` (e.g. `NICMSG_RSM_PRE=5`), set in this
    /// process's environment before the communicator starts.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// PANIC patterns: the mechanism measured (`mcp2mcp`, `engine-barrier`, ...).
    #[arg(long)]
    pub variant: Option<String>,
    /// The command that started the job, recorded in the series.
    #[arg(long, default_value = "")]
    pub command: String,
    #[arg(long)]
    pub progress: PathBuf,
    #[arg(long)]
    pub result: PathBuf,
}

/// Parses a pattern name (`latency`, `bw`, ...).
pub fn parse_pattern(text: &str) -> Result<Pattern, String> {
    Pattern::from_name(text).ok_or_else(|| format!("unknown pattern {text:?}"))
}

/// Runs the worker; the exit status is 0 when this rank did its part.
pub fn main(args: &WorkerArgs) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!(
                "nicmsg-bench bench-worker ({} {:?}): {error}",
                args.name, args.pattern
            );
            1
        }
    }
}

fn run(args: &WorkerArgs) -> Result<(), BenchError> {
    apply_env(&args.env)?;
    let job = job_from_env()?;
    if job.size != 2 {
        return Err(BenchError::Usage(format!(
            "benchmarks run on 2 ranks, this job has {}",
            job.size
        )));
    }
    let mut series = Series {
        pattern: args.pattern,
        system: args.name.clone(),
        label: args.label.clone(),
        command: args.command.clone(),
        outcome: Outcome::Measured,
        points: Vec::new(),
    };
    if let System::External(peer) = args.system {
        return run_external(args, &job, peer);
    }
    if !(args.system == System::Nicmsg && thread_engine()) {
        pin_to_own_core(job.rank);
    }
    let plan = plan_for(args);
    if args.pattern.is_panic() {
        return run_panic(args, &plan, series);
    }
    let max_len = args.sizes.0.iter().copied().max().unwrap_or(0) as usize;
    let (mut messenger, rank) = connect(args, &job, max_len)?;
    let mut progress = open_progress(args, rank)?;
    for &size in &args.sizes.0 {
        let mut report = |point: Point| {
            if let Some(file) = progress.as_mut() {
                append_point(file, &point);
            }
            series.points.push(point);
        };
        if let Err(error) = patterns::run(
            args.pattern,
            &mut *messenger,
            rank,
            size,
            &plan,
            &mut report,
        ) {
            series.outcome = Outcome::Failed {
                error: format!("at {size} bytes: {error}"),
            };
            break;
        }
    }
    if rank == 0 {
        write_result(args, &series)?;
    }
    drop(messenger);
    match series.outcome {
        Outcome::Failed { error } => Err(BenchError::Usage(error)),
        _ => Ok(()),
    }
}

/// PANIC's patterns: nicmsg's programs through `Comm::programs` (see [`crate::panic`]).
fn run_panic(args: &WorkerArgs, plan: &Plan, mut series: Series) -> Result<(), BenchError> {
    let messenger = NicmsgMessenger::new(0)?;
    let comm = messenger.comm();
    let rank = comm.rank();
    let mut progress = open_progress(args, rank)?;
    let variant = args.variant.as_deref().unwrap_or_default();
    let mut report = |point: Point| {
        if let Some(file) = progress.as_mut() {
            append_point(file, &point);
        }
        series.points.push(point);
    };
    let result = crate::panic::run(
        args.pattern,
        variant,
        comm,
        &args.sizes.0,
        plan,
        &mut report,
    );
    if let Err(error) = result {
        series.outcome = Outcome::Failed {
            error: error.to_string(),
        };
    }
    if rank == 0 {
        write_result(args, &series)?;
    }
    drop(messenger);
    match series.outcome {
        Outcome::Failed { error } => Err(BenchError::Usage(error)),
        _ => Ok(()),
    }
}

/// Sets the series' nicmsg settings (the worker is still single-threaded here).
fn apply_env(settings: &[String]) -> Result<(), BenchError> {
    for setting in settings {
        let (name, value) = setting
            .split_once('=')
            .ok_or_else(|| BenchError::Usage(format!("--env {setting:?}: expected NAME=VALUE")))?;
        std::env::set_var(name, value);
    }
    Ok(())
}

/// Whether this rank's nicmsg runs its engine on a thread of its own.
fn thread_engine() -> bool {
    std::env::var("NICMSG_ENGINE").map_or(true, |mode| mode != "inline")
}

/// Pins this rank's (single) busy thread to the `rank`-th CPU it may use, so that the two
/// ranks' spinning threads never share a core (see [`crate::affinity`]); the external peers'
/// tools are pinned the same way. Not done for nicmsg's thread engine, whose application and
/// engine threads must be free to spread.
fn pin_to_own_core(rank: u32) {
    let allowed = crate::affinity::process_cpus();
    if allowed.len() >= 2 {
        crate::affinity::pin_current_thread(allowed[rank as usize % allowed.len()]);
    }
}

fn plan_for(args: &WorkerArgs) -> Plan {
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(reps) = args.reps {
        plan.reps = reps.max(1);
        plan.warmup = plan.warmup.min(reps.max(1));
        plan.min_reps = plan.min_reps.min(plan.reps);
    }
    plan
}

/// Builds this rank's end of the system under test.
fn connect(
    args: &WorkerArgs,
    job: &JobEnv,
    max_len: usize,
) -> Result<(Box<dyn Messenger>, u32), BenchError> {
    let bind_ip = job.bind_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let rank = job.rank;
    Ok(match args.system {
        System::Nicmsg => {
            let messenger = NicmsgMessenger::new(max_len)?;
            (Box::new(messenger), rank)
        }
        System::TcpBlocking | System::TcpBusy => {
            let waiting = if args.system == System::TcpBusy {
                Waiting::Busy
            } else {
                Waiting::Blocking
            };
            let listener = TcpListener::bind((bind_ip, 0)).map_err(BenchError::io("binding"))?;
            let addr = listener
                .local_addr()
                .map_err(BenchError::io("local address"))?;
            let table = exchange(job, addr, BOOTSTRAP_TIMEOUT)?;
            let listener = (rank == 0).then_some(listener);
            let messenger = TcpMessenger::connect(rank, listener, table[0], waiting, max_len)?;
            (Box::new(messenger), rank)
        }
        System::UdpBusy | System::UdpFrag => {
            let (socket, table) = bind_udp_and_exchange(job, bind_ip)?;
            socket
                .connect(table[1 - rank as usize])
                .map_err(BenchError::io("connecting"))?;
            let (datagram, waiting) = match args.system {
                System::UdpBusy => (frame_payload(args.mtu), Waiting::Busy),
                _ => (LARGEST_DATAGRAM, Waiting::Blocking),
            };
            let messenger = UdpMessenger::new(socket, datagram, waiting, max_len)?;
            (Box::new(messenger), rank)
        }
        System::Lm | System::LmSendto | System::LmCopy => {
            // The LM socket binds its own address: a port is picked by binding once, and
            // given back just before the socket takes it.
            let (probe, table) = bind_udp_and_exchange(job, bind_ip)?;
            drop(probe);
            let udp_payload = frame_payload(args.mtu);
            let placing =
                args.system != System::LmCopy && LmMessenger::can_place_at(bind_ip, udp_payload);
            let ring = args.system == System::Lm;
            let addresses = [table[0], table[1]];
            let messenger =
                LmMessenger::open(rank, addresses, udp_payload, (placing, ring), max_len)?;
            (Box::new(messenger), rank)
        }
        System::XdpFloor => {
            let (socket, table) = bind_udp_and_exchange(job, bind_ip)?;
            let addresses = [table[0], table[1]];
            let payload = frame_payload(args.mtu);
            let messenger = XdpFloorMessenger::open(rank, socket, addresses, payload, max_len)?;
            // Both programs attached before either rank sends: a frame that reaches the peer
            // first goes to its kernel, and the floor has no recovery.
            exchange(job, addresses[rank as usize], BOOTSTRAP_TIMEOUT)?;
            (Box::new(messenger), rank)
        }
        System::External(_) => unreachable!("handled by run_external"),
        System::Mpi(_) => {
            return Err(BenchError::Usage(
                "the MPI systems run under mpirun, not as benchmark workers".into(),
            ))
        }
    })
}

/// A UDP socket on any free port of `bind_ip`, and every rank's address (the ranks swap them).
fn bind_udp_and_exchange(
    job: &JobEnv,
    bind_ip: IpAddr,
) -> Result<(UdpSocket, Vec<SocketAddr>), BenchError> {
    let socket = UdpSocket::bind((bind_ip, 0)).map_err(BenchError::io("binding"))?;
    let addr = socket
        .local_addr()
        .map_err(BenchError::io("local address"))?;
    let table = exchange(job, addr, BOOTSTRAP_TIMEOUT)?;
    Ok((socket, table))
}

/// External peers: rank 0 serves, rank 1 runs the client and records the series.
fn run_external(
    args: &WorkerArgs,
    job: &JobEnv,
    peer: external::ExternalPeer,
) -> Result<(), BenchError> {
    let bind_ip = job.bind_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    // Only the IPs matter: the tools pick their own ports.
    let table = exchange(job, SocketAddr::new(bind_ip, 0), BOOTSTRAP_TIMEOUT)?;
    let ctx = PeerContext {
        rank: job.rank,
        server_ip: table[0].ip(),
        my_ip: bind_ip,
        quick: args.quick,
        iterations: args.reps,
        timeout: EXTERNAL_TIMEOUT,
    };
    let series = external::run(peer, args.pattern, &args.sizes.0, &ctx)
        .map_err(|error| BenchError::Usage(error.to_string()))?;
    if let Some(mut series) = series {
        series.system = args.name.clone();
        if let Some(mut file) = open_progress(args, 0)? {
            for point in &series.points {
                append_point(&mut file, point);
            }
        }
        write_result(args, &series)?;
    }
    Ok(())
}

/// One point as one JSON line of the progress file (best effort: the result file has them all).
fn append_point(file: &mut File, point: &Point) {
    let _ = writeln!(file, "{}", serde_json::to_string(point).unwrap_or_default());
}

fn open_progress(args: &WorkerArgs, rank: u32) -> Result<Option<File>, BenchError> {
    if rank != 0 {
        return Ok(None);
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.progress)
        .map(Some)
        .map_err(BenchError::io("opening the progress file"))
}

fn write_result(args: &WorkerArgs, series: &Series) -> Result<(), BenchError> {
    let text = serde_json::to_string(series).expect("a series serialises");
    std::fs::write(&args.result, text).map_err(BenchError::io("writing the result file"))
}

/// The UDP payload that fills one link frame of `mtu` bytes.
fn frame_payload(mtu: u32) -> usize {
    nicmsg_udp::max_datagram_for_mtu(mtu as usize, false)
}

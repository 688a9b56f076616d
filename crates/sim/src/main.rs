//! Command line of the simulator: sweeps of many seeds, or the replay of one.

// No unsafe code here: the compiler holds it to that.
#![forbid(unsafe_code)]

use clap::Parser;
use nicmsg_proto::UnexpectedPolicy;
use nicmsg_sim::lm::open::OpenLmSpec;
use nicmsg_sim::lm::{sweep_lm, LmRun, LmSpec, LmStats};
use nicmsg_sim::open::{run_open, OpenSpec};
use nicmsg_sim::report::{fmt_ns, render_failure};
use nicmsg_sim::{
    run_catching, sweep, Limits, NetConfig, ProtoParams, RunSpec, SimMode, SweepOptions, SweepPlan,
    WorkloadKind,
};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "nicmsg-sim",
    about = "Deterministic network simulator for the nicmsg engine",
    long_about = "Runs each rank's nicmsg engine (or its protocol core alone) over a simulated lossy network in virtual time and checks \
                  delivery, ordering, completion and resource invariants. Every run is a pure function of \
                  its seed and parameters; each violation is printed with the command that replays it."
)]
struct Cli {
    /// Replay this one seed (with every loss rate and policy given).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Number of seeds to sweep.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed of the sweep.
    #[arg(long, default_value_t = 0)]
    seed_start: u64,
    /// Workload name, comma-separated names, or `all` (seed s then runs workload s mod count;
    /// in core mode, `all` leaves out the workloads that need the engine).
    #[arg(long, default_value = "all")]
    workload: String,
    /// Ranks for the workloads that take a rank count (ping-pong, cancel, truncation use 2).
    #[arg(long)]
    ranks: Option<u32>,
    /// Unexpected-message policy of the endpoints: buffer, drop, or both (each seed twice).
    #[arg(long, default_value = "buffer")]
    unexpected: String,
    /// What each rank runs: `engine` (descriptor table, driver and protocol core over a
    /// simulated transport, as a process does) or `core` (the protocol core alone: faster).
    #[arg(long, value_enum, default_value_t = SimMode::Engine)]
    mode: SimMode,
    /// Every engine is a busy one: it looks at its socket 20-100 us after frames arrive, sees
    /// runs of a sender's frames coalesced (as UDP with GRO) and reads headers ahead from data
    /// frames on; so frames queue up, and first frames and the frames behind them are placed
    /// from looks ahead far more often than in the default mix.
    #[arg(long)]
    busy_engines: bool,
    /// Messages per workload, as a multiple of the default.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Frame loss probabilities, comma-separated; each seed runs with each.
    #[arg(long, value_delimiter = ',', default_value = "0,0.01,0.05")]
    loss: Vec<f64>,
    /// Frame duplication probability.
    #[arg(long, default_value_t = 0.01)]
    dup: f64,
    /// Fraction of frames given an extra random delay (reordering).
    #[arg(long, default_value_t = 0.05)]
    reorder: f64,
    /// Largest extra delay of a reordered frame, in ns.
    #[arg(long, default_value_t = NetConfig::default().reorder_max_ns)]
    reorder_max_ns: u64,
    /// Probability that a frame gets 1 to 3 bits flipped.
    #[arg(long, default_value_t = 0.01)]
    corrupt: f64,
    /// Probability that a run gets a random partition (two groups cut apart for a while).
    #[arg(long, default_value_t = 0.05)]
    partition: f64,
    /// Longest random partition, in ns.
    #[arg(long, default_value_t = NetConfig::default().partition_max_ns)]
    partition_max_ns: u64,
    /// One-way delay in ns.
    #[arg(long, default_value_t = NetConfig::default().delay_ns)]
    delay_ns: u64,
    /// Jitter (uniform extra delay) in ns.
    #[arg(long, default_value_t = NetConfig::default().jitter_ns)]
    jitter_ns: u64,
    /// Link bandwidth in bit/s.
    #[arg(long, default_value_t = NetConfig::default().bandwidth_bps)]
    bandwidth_bps: u64,
    /// MTU of the network and of the endpoints (bytes, headers included).
    #[arg(long, default_value_t = NetConfig::default().mtu)]
    mtu: u32,
    #[arg(long, default_value_t = ProtoParams::default().rto_initial_ns)]
    rto_initial_ns: u64,
    #[arg(long, default_value_t = ProtoParams::default().rto_min_ns)]
    rto_min_ns: u64,
    #[arg(long, default_value_t = ProtoParams::default().rto_max_ns)]
    rto_max_ns: u64,
    #[arg(long, default_value_t = ProtoParams::default().keepalive_ns)]
    keepalive_ns: u64,
    #[arg(long, default_value_t = ProtoParams::default().max_retries)]
    max_retries: u32,
    /// Silence of an awaited peer, in ns, after which it is declared unreachable.
    #[arg(long, default_value_t = ProtoParams::default().peer_timeout_ns)]
    peer_timeout_ns: u64,
    /// Virtual time after which a run with pending operations is a hang.
    #[arg(long, default_value_t = Limits::default().max_virtual_ns)]
    max_virtual_ns: u64,
    /// Events after which a run with pending operations is a hang.
    #[arg(long, default_value_t = Limits::default().max_events)]
    max_events: u64,
    /// How long endpoints may keep timers armed after the last operation completed, in ns.
    #[arg(long, default_value_t = Limits::default().quiesce_ns)]
    quiesce_ns: u64,
    /// Worker threads (runs are spread over them; each run is single-threaded).
    #[arg(long)]
    jobs: Option<usize>,
    /// Stop after the first failing run.
    #[arg(long)]
    fail_fast: bool,
    /// Failing runs listed in the summary.
    #[arg(long, default_value_t = 20)]
    show: usize,
    /// Print every event of the run (only with --seed and one loss rate and policy).
    #[arg(long)]
    trace: bool,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 5.0)]
    progress: f64,
    /// List the workloads and exit.
    #[arg(long)]
    list: bool,
    /// Run LM's admission control and in-place placement (`nicmsg-lm`) instead of the engine's
    /// workloads: nodes send transfers of 1 to 300 frames, placed where admitted (see
    /// docs/simulator.md, "LM"). Takes the seeds, the network options and --ranks (nodes).
    /// With --open: open LM stations (peers added by address), clients and servers, with
    /// --restart and --open-slots.
    #[arg(long)]
    lm: bool,
    /// With --lm: probability that one node dies during a run.
    #[arg(long, default_value_t = 0.0)]
    death: f64,
    /// Run open endpoints (peers added by address, as the datagram sockets use them) instead
    /// of the engine's workloads: clients send datagrams by address to a server (see
    /// docs/simulator.md, "Open endpoints"). Takes the seeds, the network options and --ranks.
    #[arg(long)]
    open: bool,
    /// With --open: probability that each node restarts once (a new process at its address).
    #[arg(long, default_value_t = 0.0)]
    restart: f64,
    /// With --open: the server's peer slots (fewer than the clients makes them share).
    /// Default: 8, and with --lm --open enough for every peer to restart once.
    #[arg(long)]
    open_slots: Option<u32>,
}

/// The workloads named; `all` is every workload the mode can run (PANIC's need the engine).
fn parse_workloads(text: &str, mode: SimMode) -> Result<Vec<WorkloadKind>, String> {
    if text == "all" {
        return Ok(WorkloadKind::for_mode(mode));
    }
    text.split(',')
        .map(|name| {
            let kind = WorkloadKind::from_name(name.trim()).ok_or_else(|| {
                let names: Vec<&str> = WorkloadKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown workload {name:?}; known: {} or all",
                    names.join(", ")
                )
            })?;
            if kind.needs_engine() && mode != SimMode::Engine {
                return Err(format!(
                    "workload {} runs programs in the engine: it needs --mode engine",
                    kind.name()
                ));
            }
            Ok(kind)
        })
        .collect()
}

/// The network the options describe, with `loss`.
fn net_config(cli: &Cli, loss: f64) -> NetConfig {
    NetConfig {
        loss,
        dup: cli.dup,
        reorder: cli.reorder,
        reorder_max_ns: cli.reorder_max_ns,
        corrupt: cli.corrupt,
        delay_ns: cli.delay_ns,
        jitter_ns: cli.jitter_ns,
        bandwidth_bps: cli.bandwidth_bps,
        mtu: cli.mtu,
        partition: cli.partition,
        partition_max_ns: cli.partition_max_ns,
        partitions: Vec::new(),
        // Chosen per seed by the sweep.
        link_checks_payload: false,
    }
}

fn parse_policies(text: &str) -> Result<Vec<UnexpectedPolicy>, String> {
    match text {
        "buffer" => Ok(vec![UnexpectedPolicy::Buffer]),
        "drop" => Ok(vec![UnexpectedPolicy::Drop]),
        "both" => Ok(vec![UnexpectedPolicy::Buffer, UnexpectedPolicy::Drop]),
        other => Err(format!(
            "--unexpected must be buffer, drop or both, not {other:?}"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.list {
        for kind in WorkloadKind::ALL {
            println!(
                "{:<14} {:>2} ranks  {}",
                kind.name(),
                kind.default_ranks(),
                kind.description()
            );
        }
        return ExitCode::SUCCESS;
    }
    let (workloads, policies) = match (
        parse_workloads(&cli.workload, cli.mode),
        parse_policies(&cli.unexpected),
    ) {
        (Ok(w), Ok(p)) => (w, p),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for &p in cli
        .loss
        .iter()
        .chain([cli.dup, cli.reorder, cli.corrupt, cli.partition].iter())
    {
        if !(0.0..=1.0).contains(&p) {
            eprintln!("error: probabilities must lie in 0..=1, got {p}");
            return ExitCode::from(2);
        }
    }
    let seeds: Vec<u64> = match cli.seed {
        Some(seed) => vec![seed],
        None => (cli.seed_start..cli.seed_start.saturating_add(cli.seeds)).collect(),
    };
    if cli.lm && cli.open {
        return run_lm_open_sweep(&cli, &seeds);
    }
    if cli.lm {
        return run_lm_sweep(&cli, &seeds);
    }
    if cli.open {
        return run_open_sweep(&cli, &seeds);
    }
    let mut template = RunSpec::new(0, workloads[0]);
    template.ranks = cli.ranks;
    template.scale = cli.scale;
    template.mode = cli.mode;
    template.busy_engines = cli.busy_engines;
    template.net = net_config(&cli, 0.0);
    template.proto = ProtoParams {
        rto_initial_ns: cli.rto_initial_ns,
        rto_min_ns: cli.rto_min_ns,
        rto_max_ns: cli.rto_max_ns,
        keepalive_ns: cli.keepalive_ns,
        max_retries: cli.max_retries,
        peer_timeout_ns: cli.peer_timeout_ns,
    };
    template.limits = Limits {
        max_virtual_ns: cli.max_virtual_ns,
        max_events: cli.max_events,
        quiesce_ns: cli.quiesce_ns,
    };
    let plan = SweepPlan {
        seeds,
        workloads,
        losses: cli.loss.clone(),
        policies,
        template,
    };

    if plan.len() == 1 {
        // One run: details, and the trace if asked.
        let mut spec = plan.spec(0);
        spec.trace = cli.trace;
        let result = run_catching(&spec);
        println!(
            "seed {} workload {} ranks {} loss {} unexpected {:?}: {} messages ({} delivered, {} truncated, {} cancelled, {} failed), {} operations",
            result.seed,
            result.workload.name(),
            result.ranks,
            result.loss,
            result.unexpected,
            result.messages.sent,
            result.messages.delivered,
            result.messages.truncated,
            result.messages.cancelled,
            result.messages.failed,
            result.messages.ops
        );
        println!(
            "virtual time {}, {} events, quiesced {}, digest {:016x}",
            fmt_ns(result.virtual_ns),
            result.events,
            result.quiesced,
            result.digest
        );
        println!("stats: {:?}", result.stats);
        println!("network: {:?}", result.net);
        println!("peak usage: {:?}", result.peak);
        if result.violation_count > 0 {
            print!("{}", render_failure(&result));
            return ExitCode::FAILURE;
        }
        println!("no violations");
        return ExitCode::SUCCESS;
    }
    if cli.trace {
        eprintln!("error: --trace needs a single run (--seed, one loss rate, one policy)");
        return ExitCode::from(2);
    }
    let jobs = cli.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let options = SweepOptions {
        jobs,
        progress: cli.progress > 0.0,
        progress_every: Duration::from_secs_f64(cli.progress.max(0.1)),
        fail_fast: cli.fail_fast,
        keep_failures: cli.show,
    };
    eprintln!("nicmsg-sim: {} runs on {jobs} thread(s)", plan.len());
    let summary = sweep(&plan, &options);
    print!("{}", summary.render());
    if summary.violations > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--open`: open endpoints, each seed with each loss rate, one after another.
fn run_open_sweep(cli: &Cli, seeds: &[u64]) -> ExitCode {
    let started = std::time::Instant::now();
    let (mut runs, mut failed, mut received, mut ok, mut errors, mut restarts) = (0, 0, 0, 0, 0, 0);
    let mut placed = 0;
    for &seed in seeds {
        for &loss in &cli.loss {
            let mut spec = OpenSpec::new(seed, net_config(cli, loss));
            spec.clients = cli.ranks.map_or(spec.clients, |r| r.max(2) - 1);
            spec.datagrams = scaled(cli, spec.datagrams);
            spec.restart = cli.restart;
            spec.server_slots = cli.open_slots.unwrap_or(8).max(1);
            let result = run_open(&spec);
            runs += 1;
            received += result.received;
            ok += result.sends_ok;
            errors += result.sends_failed;
            restarts += result.restarts;
            placed += result.bytes_placed;
            if !result.violations.is_empty() {
                failed += 1;
                if failed <= cli.show {
                    println!("FAILED: {}", spec.replay_command());
                    for violation in &result.violations {
                        println!("  {violation}");
                    }
                }
            }
        }
    }
    println!(
        "{runs} runs, {failed} with violations, {:.1} s: {received} datagrams received, {ok} sends succeeded, {errors} failed, {restarts} restarts, {placed} bytes placed (odd seeds place; seeds 2 and 3 of every 4 run on a link that checks payloads)",
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--lm --open`: open LM stations, each seed with each loss rate, one after another.
fn run_lm_open_sweep(cli: &Cli, seeds: &[u64]) -> ExitCode {
    let spec = |seed, net| {
        let mut spec = OpenLmSpec::new(seed, net);
        spec.nodes = cli.ranks.unwrap_or(spec.nodes).max(2);
        spec.transfers = scaled(cli, spec.transfers);
        spec.restart = cli.restart;
        spec.slots = cli.open_slots;
        spec
    };
    run_lm_specs(cli, seeds, "--lm --open", spec, |total| {
        format!(
            "{} transfers, {} delivered ({} placed, {} one-copy); {} restarts, {} RESETs sent, {} transfers taken by two lives of a receiver; frames: {} placed, {} copied ({} damaged landings, {} resends asked); bytes of placed transfers: {} placed, {} copied; {} admitted transfers on clean networks without restarts copied nothing",
            total.transfers,
            total.delivered,
            total.placed_transfers,
            total.one_copy_transfers,
            total.restarts,
            total.resets_sent,
            total.taken_by_two_lives,
            total.placed_frames,
            total.copied_frames,
            total.damaged_landings,
            total.resends_asked,
            total.placed_bytes,
            total.copied_bytes_placed,
            total.clean_admitted,
        )
    })
}

/// `--lm`: LM's sweep, each seed with each loss rate, one after another.
fn run_lm_sweep(cli: &Cli, seeds: &[u64]) -> ExitCode {
    let spec = |seed, net| {
        let mut spec = LmSpec::new(seed, net);
        spec.nodes = cli.ranks.unwrap_or(spec.nodes).max(2);
        spec.transfers = scaled(cli, spec.transfers);
        spec.death = cli.death;
        spec
    };
    run_lm_specs(cli, seeds, "--lm", spec, |total| {
        format!(
            "{} transfers ({} placed, {} one-copy); frames: {} placed, {} copied ({} held for their slot, {} damaged landings, {} resends asked, {} frames resent); bytes of placed transfers: {} placed, {} copied, {} restored from shadows; {} admitted transfers on clean networks copied nothing",
            total.transfers,
            total.placed_transfers,
            total.one_copy_transfers,
            total.placed_frames,
            total.copied_frames,
            total.held_for_slot,
            total.damaged_landings,
            total.resends_asked,
            total.frames_resent,
            total.placed_bytes,
            total.copied_bytes_placed,
            total.restored_bytes,
            total.clean_admitted,
        )
    })
}

/// LM's runs (`flags`: `--lm`, `--lm --open`), each seed with each loss rate, one after
/// another: `spec` makes a run from its seed and network, `totals` tells what the runs did.
/// Prints progress, the summary and the first failing runs.
fn run_lm_specs<S: LmRun>(
    cli: &Cli,
    seeds: &[u64],
    flags: &str,
    spec: impl Fn(u64, NetConfig) -> S,
    totals: impl Fn(&LmStats) -> String,
) -> ExitCode {
    let mut specs = Vec::new();
    for &seed in seeds {
        for &loss in &cli.loss {
            specs.push(spec(seed, net_config(cli, loss)));
        }
    }
    eprintln!("nicmsg-sim {flags}: {} runs", specs.len());
    let started = std::time::Instant::now();
    let mut done = 0usize;
    let mut last = std::time::Instant::now();
    let (failures, total) = sweep_lm(&specs, &mut |_| {
        done += 1;
        if cli.progress > 0.0 && last.elapsed().as_secs_f64() >= cli.progress {
            last = std::time::Instant::now();
            eprintln!("  {done}/{} runs", specs.len());
        }
    });
    println!(
        "{} runs, {} violations, {:.1} s: {}",
        specs.len(),
        failures.len(),
        started.elapsed().as_secs_f64(),
        totals(&total),
    );
    for failure in failures.iter().take(cli.show) {
        println!("FAILED: {}", failure.spec.replay_command());
        for violation in failure.violations.list() {
            println!("  {violation}");
        }
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `count` of the workload's default, times `--scale`, at least 1.
fn scaled(cli: &Cli, count: u32) -> u32 {
    ((count as f64 * cli.scale).round() as u32).max(1)
}

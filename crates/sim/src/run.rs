//! One run: build the ranks' machines, the network and the workload from a [`RunSpec`], drive
//! them in virtual time until everything completed and the ranks went quiet (or a bound is hit),
//! then check the end-of-run invariants.
//!
//! The loop: virtual time jumps to the earliest of the next queued event (frame arrival,
//! workload wake-up, death) and the earliest timer of a rank. The rank concerned takes it (in
//! engine mode a frame waits in its transport's inbox); then every rank touched is serviced
//! until it has nothing more to do: engine turns (or the core's `poll_transmit`), frames to the
//! network, completions to the ledger (which checks each) and the workload (which reacts,
//! possibly posting more); then its next deadline is read again.

use crate::content::mix;
use crate::invariants::Violation;
use crate::ledger::{dead_by, engine_context};
use crate::net::{Event, NetConfig, NetStats, Network};
use crate::node::{EngineTotals, Node, Output, SimMode};
use crate::report::{add_stats, fmt_ns};
use crate::rng::{stream, SimRng};
use crate::trace;
use crate::workload::{Workload, WorkloadKind, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{Config, Endpoint, Nanos, Rank, Stats, UnexpectedPolicy, Usage};

/// Protocol settings for simulation: shorter timers than the defaults so that recovery and
/// failure detection happen in milliseconds of virtual time. Everything else is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoParams {
    pub rto_initial_ns: Nanos,
    pub rto_min_ns: Nanos,
    pub rto_max_ns: Nanos,
    pub keepalive_ns: Nanos,
    pub max_retries: u32,
    pub peer_timeout_ns: Nanos,
}

impl Default for ProtoParams {
    fn default() -> Self {
        Self {
            rto_initial_ns: 200_000,
            rto_min_ns: 100_000,
            rto_max_ns: 20_000_000,
            keepalive_ns: 50_000_000,
            max_retries: 16,
            // Far above the longest random partition (`NetConfig::partition_max_ns`, 20 ms): a
            // cut network heals before anyone is declared dead.
            peer_timeout_ns: 500_000_000,
        }
    }
}

impl ProtoParams {
    pub fn config(&self, mtu: u32, unexpected: UnexpectedPolicy) -> Config {
        Config {
            mtu,
            unexpected,
            rto_initial_ns: self.rto_initial_ns,
            rto_min_ns: self.rto_min_ns,
            rto_max_ns: self.rto_max_ns,
            keepalive_ns: self.keepalive_ns,
            max_retries: self.max_retries,
            peer_timeout_ns: self.peer_timeout_ns,
            // The acknowledgement delay must stay well below the shortest timeout.
            ack_delay_ns: Config::default().ack_delay_ns.min(self.rto_min_ns / 4),
            credit_wait_ns: Config::default().credit_wait_ns.min(10 * self.rto_min_ns),
            ..Config::default()
        }
    }
}

/// A third of the seeds run with RMPP's own window, 16 frames per CTS, and its RSM anywhere
/// from the window's end to 15 frames before it, instead of the defaults, and with the
/// library's eager limit for small jobs (64 KiB): windows much smaller than a message, and
/// than what goes before its CTS (at most the eager limit), exercise the RSM pipeline and its
/// recovery.
fn rmpp_windows_on_a_third_of_the_seeds(seed: u64, config: Config) -> Config {
    let mut rng = SimRng::new(seed, stream::RMPP_WINDOWS);
    if !rng.chance(1.0 / 3.0) {
        return config;
    }
    Config {
        cts_window_frames: 16,
        rsm_pre_frames: rng.below(16) as u32,
        eager_limit: 64 << 10,
        ..config
    }
}

/// Half the seeds give messages of at most 256 bytes 2 to 6 small credits instead of the
/// default 32, and half (drawn apart) give messages of 257 bytes to 4 KiB 2 to 8 medium
/// credits, so that the workloads' bursts of such messages run out of them as they run out of
/// eager credits (waits, requests, WAIT and rendezvous for every class).
fn few_small_and_medium_credits_on_half_the_seeds(seed: u64, mut config: Config) -> Config {
    let mut small = SimRng::new(seed, stream::SMALL_CREDITS);
    if small.chance(0.5) {
        config.small_credits_per_peer = small.range(2, 6) as u32;
    }
    let mut medium = SimRng::new(seed, stream::MEDIUM_CREDITS);
    if medium.chance(0.5) {
        config.medium_credits_per_peer = medium.range(2, 8) as u32;
    }
    config
}

/// Half the seeds bound the bytes a receiver grants and has not received to 4 to 64 KiB
/// instead of 4 MiB, so that the workloads' concurrent rendezvous messages find the budget
/// full and have their first grants deferred, then sent as others complete (WAIT, KEPT, and
/// the resumption), under loss, duplication and reordering of every frame involved.
fn small_grant_budgets_on_half_the_seeds(seed: u64, mut config: Config) -> Config {
    let mut rng = SimRng::new(seed, stream::GRANT_BUDGET);
    if rng.chance(0.5) {
        config.grant_budget_bytes = rng.range(4 << 10, 64 << 10);
    }
    config
}

/// True if no frame of the run can have been lost: no loss, corruption or partition, and no
/// rank died (frames to the dead are refused). Duplication and reordering lose nothing.
fn lost_no_frame(spec: &RunSpec, deaths: &[Option<Nanos>]) -> bool {
    let net = &spec.net;
    net.loss == 0.0
        && net.corrupt == 0.0
        && net.partition == 0.0
        && net.partitions.is_empty()
        && deaths.iter().all(Option::is_none)
}

/// Bounds that turn a hang into a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Virtual time a run may reach while operations are pending.
    pub max_virtual_ns: Nanos,
    /// Events (frames, timers, wake-ups) a run may process.
    pub max_events: u64,
    /// After the last operation completed, how long endpoints may keep timers running.
    pub quiesce_ns: Nanos,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_virtual_ns: 60_000_000_000,
            max_events: 20_000_000,
            quiesce_ns: 2_000_000_000,
        }
    }
}

/// Everything that determines a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    pub seed: u64,
    pub workload: WorkloadKind,
    /// Ranks requested (`None`: the workload's default).
    pub ranks: Option<u32>,
    pub unexpected: UnexpectedPolicy,
    /// Multiplies the number of messages of the workload.
    pub scale: f64,
    pub net: NetConfig,
    pub proto: ProtoParams,
    pub limits: Limits,
    /// What each rank runs: the whole engine, or the protocol core alone.
    pub mode: SimMode,
    /// Every engine looks late, sees coalesced runs and looks ahead from data frames on
    /// (`--busy-engines`); else a third, a half and two thirds of them, drawn per engine.
    pub busy_engines: bool,
    /// Print every event (for replays).
    pub trace: bool,
}

impl RunSpec {
    pub fn new(seed: u64, workload: WorkloadKind) -> Self {
        Self {
            seed,
            workload,
            ranks: None,
            unexpected: UnexpectedPolicy::Buffer,
            scale: 1.0,
            net: NetConfig::default(),
            proto: ProtoParams::default(),
            limits: Limits::default(),
            mode: SimMode::default(),
            busy_engines: false,
            trace: false,
        }
    }

    pub fn replay_command(&self) -> String {
        crate::report::replay_command(self)
    }
}

/// What became of the messages of one run or of many (each message counted once), and how
/// many operations were posted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts {
    pub ops: u64,
    pub sent: u64,
    pub delivered: u64,
    pub truncated: u64,
    pub cancelled: u64,
    /// Not delivered because a peer died.
    pub failed: u64,
}

impl MessageCounts {
    pub fn add(&mut self, other: &MessageCounts) {
        self.ops += other.ops;
        self.sent += other.sent;
        self.delivered += other.delivered;
        self.truncated += other.truncated;
        self.cancelled += other.cancelled;
        self.failed += other.failed;
    }
}

/// Outcome and counters of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub seed: u64,
    pub workload: WorkloadKind,
    pub loss: f64,
    pub unexpected: UnexpectedPolicy,
    pub ranks: u32,
    pub replay: String,
    pub violations: Vec<Violation>,
    pub violation_count: usize,
    /// Sum of every endpoint's counters.
    pub stats: Stats,
    /// Sum of every engine's counters (engine mode).
    pub engine: EngineTotals,
    pub net: NetStats,
    pub messages: MessageCounts,
    pub events: u64,
    pub virtual_ns: Nanos,
    /// Everything ended: no operation pending, no frame in flight, no timer armed.
    pub quiesced: bool,
    /// Highest peak of each table over the endpoints.
    pub peak: Usage,
    /// Hash of every event (time, kind, ranks, frame checksum): equal for equal runs.
    pub digest: u64,
    /// Endpoint lookups of regions already released (informational; writes are violations).
    pub released_reads: u64,
}

impl RunResult {
    fn empty(spec: &RunSpec, ranks: u32) -> Self {
        Self {
            seed: spec.seed,
            workload: spec.workload,
            loss: spec.net.loss,
            unexpected: spec.unexpected,
            ranks,
            replay: spec.replay_command(),
            violations: Vec::new(),
            violation_count: 0,
            stats: Stats::default(),
            engine: EngineTotals::default(),
            net: NetStats::default(),
            messages: MessageCounts::default(),
            events: 0,
            virtual_ns: 0,
            quiesced: false,
            peak: Usage::default(),
            digest: 0,
            released_reads: 0,
        }
    }

    /// A run that could not be carried out (bad configuration, or a panic in the endpoint).
    pub fn failed(spec: &RunSpec, kind: &'static str, detail: String) -> Self {
        let mut result = Self::empty(spec, spec.workload.ranks(spec.ranks));
        result.violations.push(Violation {
            at: 0,
            kind,
            detail,
        });
        result.violation_count = 1;
        result
    }
}

struct Sim {
    world: World,
    workload: Box<dyn Workload>,
    timers: Vec<Option<Nanos>>,
    events: u64,
    digest: u64,
}

/// Runs one simulation. Panics inside the endpoint propagate; see [`crate::sweep::run_catching`].
pub fn run(spec: &RunSpec) -> RunResult {
    let ranks = spec.workload.ranks(spec.ranks);
    if spec.workload.needs_engine() && spec.mode != SimMode::Engine {
        return RunResult::failed(
            spec,
            "config",
            format!(
                "workload {} runs programs in the engine: it needs --mode engine",
                spec.workload.name()
            ),
        );
    }
    let config = Config {
        link_checks_payload: spec.net.link_checks_payload,
        ..small_grant_budgets_on_half_the_seeds(
            spec.seed,
            few_small_and_medium_credits_on_half_the_seeds(
                spec.seed,
                rmpp_windows_on_a_third_of_the_seeds(
                    spec.seed,
                    spec.proto.config(spec.net.mtu, spec.unexpected),
                ),
            ),
        )
    };
    if let Err(error) = config.validate() {
        return RunResult::failed(
            spec,
            "config",
            format!("invalid endpoint configuration: {error}"),
        );
    }
    let job = (mix(spec.seed) as u32) | 1;
    let mut nodes = Vec::with_capacity(ranks as usize);
    for rank in 0..ranks {
        let rng = SimRng::new(spec.seed, stream::ENGINE + u64::from(rank));
        match Endpoint::new(config.clone(), job, rank, ranks) {
            Ok(endpoint) => {
                let programs = spec.workload.programs_setup(rank, ranks, spec.seed);
                nodes.push(Node::new(
                    spec.mode,
                    endpoint,
                    rng,
                    programs,
                    spec.busy_engines,
                ))
            }
            Err(error) => {
                return RunResult::failed(
                    spec,
                    "config",
                    format!("Endpoint::new({rank}/{ranks}): {error}"),
                )
            }
        }
    }
    let net = Network::new(spec.net.clone(), ranks, spec.seed);
    let mut workload_rng = SimRng::new(spec.seed, stream::WORKLOAD);
    let params = WorkloadParams {
        ranks,
        scale: spec.scale,
        seed: spec.seed,
    };
    let workload = spec.workload.build(&params, &mut workload_rng);
    let world = World::new(
        spec.mode,
        nodes,
        net,
        job,
        spec.net.mtu,
        workload_rng,
        SimRng::new(spec.seed, stream::LAYOUT),
        spec.trace,
    );
    if spec.trace {
        for p in world.net.partitions() {
            trace::line(
                0,
                format!(
                    "partition {:?} from {} until {}",
                    p.pairs,
                    fmt_ns(p.from),
                    fmt_ns(p.until)
                ),
            );
        }
    }
    let mut sim = Sim {
        world,
        workload,
        timers: vec![None; ranks as usize],
        events: 0,
        digest: 0,
    };
    sim.workload.start(&mut sim.world);
    sim.drain_dirty();
    let quiesced = sim.main_loop(&spec.limits);
    sim.finish(spec, ranks, quiesced)
}

impl Sim {
    fn note(&mut self, values: [u64; 4]) {
        for v in values {
            self.digest = mix(self.digest ^ v);
        }
    }

    /// Earliest armed timer of a live endpoint (lowest rank on ties).
    fn next_timer(&self) -> Option<(Nanos, Rank)> {
        let mut best: Option<(Nanos, Rank)> = None;
        for (rank, timer) in self.timers.iter().enumerate() {
            if let Some(t) = *timer {
                if best.is_none_or_later(t) {
                    best = Some((t, rank as Rank));
                }
            }
        }
        best
    }

    fn app_done(&self) -> bool {
        self.world.wakes_pending == 0 && self.world.ledger.pending_live(&self.world.deaths) == 0
    }

    /// Returns whether the run quiesced (nothing pending, in flight, or armed).
    fn main_loop(&mut self, limits: &Limits) -> bool {
        let mut quiet_since: Option<Nanos> = None;
        let mut same_instant = 0u64;
        loop {
            let done = self.app_done();
            if done {
                quiet_since.get_or_insert(self.world.now);
            } else {
                quiet_since = None;
            }
            let next_event = self.world.net.peek_time();
            let next_timer = self.next_timer();
            let next = match (next_event, next_timer) {
                (None, None) => {
                    if !done {
                        let pending = self.world.ledger.pending_live(&self.world.deaths);
                        self.world.violation(
                            "hang",
                            format!(
                                "deadlock: {pending} operation(s) pending, {} wake-up(s) due, but no frame in flight and no timer armed",
                                self.world.wakes_pending
                            ),
                        );
                        return false;
                    }
                    return true;
                }
                (Some(e), None) => e,
                (None, Some((t, _))) => t,
                (Some(e), Some((t, _))) => e.min(t),
            };
            if let Some(since) = quiet_since {
                if next > since.saturating_add(limits.quiesce_ns) {
                    return false;
                }
            }
            if next > limits.max_virtual_ns {
                let pending = self.world.ledger.pending_live(&self.world.deaths);
                self.world.violation(
                    "hang",
                    format!(
                        "virtual time limit {} reached with {pending} operation(s) pending",
                        fmt_ns(limits.max_virtual_ns)
                    ),
                );
                return false;
            }
            self.events += 1;
            if self.events > limits.max_events {
                let pending = self.world.ledger.pending_live(&self.world.deaths);
                self.world.violation(
                    "hang",
                    format!(
                        "event limit {} reached with {pending} operation(s) pending",
                        limits.max_events
                    ),
                );
                return false;
            }
            if next > self.world.now {
                self.world.now = next;
                same_instant = 0;
            } else {
                same_instant += 1;
                if same_instant > 2_000_000 {
                    self.world.violation("livelock", "two million events without virtual time advancing (a timer that is always due?)");
                    return false;
                }
            }
            let now = self.world.now;
            match next_timer {
                Some((t, rank)) if next_event.is_none_or_at_least(t) => {
                    self.note([now, 1, rank as u64, 0]);
                    if self.world.trace {
                        trace::line(now, format!("rank {rank} timeout (due {})", fmt_ns(t)));
                    }
                    let world = &mut self.world;
                    world.nodes[rank as usize]
                        .handle_timeout(now, &mut world.arenas[rank as usize]);
                    self.world.dirty.insert(rank);
                }
                _ => {
                    let (_, event) = self.world.net.pop().expect("an event is due");
                    self.dispatch(event);
                }
            }
            self.drain_dirty();
        }
    }

    fn dispatch(&mut self, event: Event) {
        let now = self.world.now;
        match event {
            Event::Frame(frame) => {
                let crc = nicmsg_wire::FrameView::new_checked(&frame.bytes[..])
                    .map_or(0, |view| u64::from(view.crc()));
                self.note([
                    now,
                    2,
                    (frame.src as u64) << 32 | frame.dst as u64,
                    crc ^ (frame.bytes.len() as u64) << 32,
                ]);
                let dst = frame.dst as usize;
                if self.world.deaths[dst].is_some() {
                    self.world.net.stats.dead_drops += 1;
                    self.refuse(frame.src, frame.dst);
                    return;
                }
                self.world.net.stats.delivered += 1;
                if frame.corrupted {
                    self.world.net.stats.corrupted_delivered += 1;
                }
                if self.world.trace {
                    trace::line(
                        now,
                        format!(
                            "{}->{} recv {}{}{}",
                            frame.src,
                            frame.dst,
                            trace::describe_frame(&frame.bytes),
                            if frame.corrupted { " CORRUPTED" } else { "" },
                            if frame.duplicate { " (duplicate)" } else { "" }
                        ),
                    );
                }
                let world = &mut self.world;
                let node = &mut world.nodes[dst];
                if node.handle_frame(now, frame.src, frame.bytes, &mut world.arenas[dst]) {
                    world.dirty.insert(frame.dst);
                } else {
                    self.timers[dst] = node.next_deadline();
                }
            }
            Event::Wake { rank, token } => {
                self.note([now, 3, rank as u64, token]);
                self.world.wakes_pending -= 1;
                if self.world.deaths[rank as usize].is_none() {
                    self.workload.on_wake(&mut self.world, rank, token);
                }
            }
            Event::Refused { rank, peer } => {
                self.note([now, 5, rank as u64, peer as u64]);
                if self.world.deaths[rank as usize].is_some() {
                    return;
                }
                if self.world.trace {
                    trace::line(
                        now,
                        format!("rank {rank} told: rank {peer}'s port is closed"),
                    );
                }
                let world = &mut self.world;
                world.nodes[rank as usize].handle_refused(
                    now,
                    peer,
                    &mut world.arenas[rank as usize],
                );
                world.dirty.insert(rank);
            }
            Event::Death { rank } => {
                self.note([now, 4, rank as u64, 0]);
                if self.world.trace {
                    trace::line(now, format!("rank {rank} DIES"));
                }
                self.world.deaths[rank as usize] = Some(now);
                self.timers[rank as usize] = None;
                // An engine that looks at its socket late leaves frames there unread: the
                // damaged ones among them never reached an endpoint.
                let unread = self.world.nodes[rank as usize].discard_unread();
                self.world.net.stats.corrupted_delivered -= unread;
            }
        }
    }

    /// The dead rank's host answers a frame with ICMP port unreachable, which reaches the
    /// sender a network delay later (never during a partition: then nothing comes back).
    fn refuse(&mut self, sender: Rank, dead: Rank) {
        let at = self.world.now + self.world.net.config().delay_ns;
        if self.world.net.cut(dead, sender, self.world.now) {
            return;
        }
        self.world.net.stats.refusals += 1;
        self.world.net.schedule(
            at,
            Event::Refused {
                rank: sender,
                peer: dead,
            },
        );
    }

    fn drain_dirty(&mut self) {
        while let Some(rank) = self.world.dirty.pop_first() {
            if self.world.deaths[rank as usize].is_none() {
                self.service(rank);
            }
        }
    }

    /// Frames and completions of one rank until it has none, then its next timer.
    fn service(&mut self, rank: Rank) {
        let r = rank as usize;
        loop {
            let now = self.world.now;
            let mut out = Output::default();
            let world = &mut self.world;
            let progressed = match world.nodes[r].step(now, &world.arenas[r], &mut out) {
                Ok(progressed) => progressed,
                Err(problem) => {
                    self.world
                        .violation("livelock", format!("rank {rank}: {problem}; rank stopped"));
                    self.world.deaths[r] = Some(now);
                    return;
                }
            };
            for (dst, bytes) in out.frames {
                self.world.emit(rank, dst, bytes);
            }
            for (id, code) in out.refused {
                self.world.violation(
                    "post-refused",
                    format!("rank {rank}: the engine refused {id:?} when it took it: {code:?}"),
                );
                let world = &mut self.world;
                world.ledger.abandon(&mut world.arenas[r], rank, id);
            }
            for completion in out.completions {
                if let Some(op) = self.world.record_completion(rank, completion) {
                    self.workload
                        .on_completion(&mut self.world, rank, op, completion.result);
                }
                if self.world.deaths[r].is_some() {
                    return;
                }
            }
            if !progressed {
                break;
            }
        }
        self.world.dirty.remove(&rank);
        self.timers[r] = self.world.nodes[r].next_deadline();
    }

    fn finish(mut self, spec: &RunSpec, ranks: u32, quiesced: bool) -> RunResult {
        self.workload.finish(&mut self.world);
        let now = self.world.now;
        let world = &mut self.world;
        world
            .ledger
            .final_checks(&mut world.violations, &world.deaths, now);
        let all_completed = world.ledger.pending_live(&world.deaths) == 0;
        let mut stats = Stats::default();
        let mut engine = EngineTotals::default();
        let mut peak = Usage::default();
        let mut bad_reads = 0;
        for rank in 0..ranks {
            let r = rank as usize;
            if let Some(node) = world.nodes[r].engine() {
                let totals = node.totals();
                engine.add(&totals);
                if totals.first_frames_refused > 0 {
                    world.violations.push(
                        now,
                        "first-frame-refused",
                        format!(
                            "rank {rank}: {} first frame(s) predicted into a receive and refused there: their payload went where no message of theirs lies",
                            totals.first_frames_refused
                        ),
                    );
                }
                let outstanding = node.host().outstanding();
                if all_completed && world.deaths[r].is_none() && outstanding != 0 {
                    world.violations.push(
                        now,
                        "leftover-state",
                        format!("rank {rank}: {outstanding} descriptor(s) not handed back after every operation completed"),
                    );
                }
            }
            let endpoint = world.nodes[r].endpoint();
            add_stats(&mut stats, endpoint.stats());
            let mut usage = endpoint.usage();
            if let Some(node) = world.nodes[r].engine() {
                // The engine keeps its programs' inboxes posted: an idle engine holds exactly
                // these receives, and nothing else of the programs'.
                let held = node.engine_receives();
                if world.deaths[r].is_none() && all_completed && usage.recvs.in_use < held {
                    world.violations.push(
                        now,
                        "leftover-state",
                        format!(
                            "rank {rank}: the engine keeps {} receive(s) posted, but its programs' {held} inboxes must stay posted",
                            usage.recvs.in_use
                        ),
                    );
                }
                usage.recvs.in_use = usage.recvs.in_use.saturating_sub(held);
            }
            max_peaks(&mut peak, &usage);
            if !usage.within_limits() {
                world.violations.push(
                    now,
                    "limits",
                    format!("rank {rank}: a table exceeded its limit: {usage:?}"),
                );
            }
            if world.deaths[r].is_some() {
                continue;
            }
            if all_completed && !usage.is_empty() {
                world.violations.push(
                    now,
                    "leftover-state",
                    format!(
                        "rank {rank}: state remains after every operation completed{}: {}",
                        if quiesced {
                            " and the run went quiet"
                        } else {
                            " (timers still armed after the quiesce bound)"
                        },
                        describe_usage(&usage)
                    ),
                );
            }
            let settles = all_completed && quiesced && lost_no_frame(spec, &world.deaths);
            let unsettled = if settles {
                endpoint.credits_unsettled()
            } else {
                0
            };
            if unsettled != 0 {
                world.violations.push(
                    now,
                    "credits-unsettled",
                    format!("rank {rank}: {unsettled} credit(s) spent and not returned, or returned and not told, after a run that lost no frame went quiet"),
                );
            }
            if usage.completions.in_use != 0 {
                world.violations.push(
                    now,
                    "leftover-state",
                    format!("rank {rank}: completions not taken: {usage:?}"),
                );
            }
            for peer in 0..ranks {
                if peer != rank
                    && !dead_by(&world.deaths, peer, now)
                    && endpoint.is_peer_unreachable(peer)
                {
                    world.violations.push(
                        now,
                        "false-unreachable",
                        format!("rank {rank} declared live rank {peer} unreachable"),
                    );
                }
            }
            let (bad, first) = world.arenas[r].bad_writes();
            if bad > 0 {
                world.violations.push(
                    now,
                    "memory",
                    format!("rank {rank}: {bad} write(s) to memory of completed operations (first: region {first:?})"),
                );
            }
            bad_reads += world.arenas[r].bad_reads();
        }
        // A corrupted source or destination field fails the engine's source check first. A
        // damaged copy placed where its frame's real payload already lay is a duplicate.
        let checksum_drops = stats.drops.bad_checksum
            + stats.drops.malformed
            + engine.spoofed_frames
            + engine.damaged_copies_over_their_frame;
        if checksum_drops != world.net.stats.corrupted_delivered {
            world.violations.push(
                now,
                "corruption",
                format!(
                    "{} corrupted frame(s) reached the ranks but {} were dropped as malformed, bad checksum or of a wrong source",
                    world.net.stats.corrupted_delivered, checksum_drops
                ),
            );
        }
        if engine.transport_errors != 0 {
            world.violations.push(
                now,
                "transport",
                format!(
                    "{} transport error(s) from a transport that never fails",
                    engine.transport_errors
                ),
            );
        }
        let mut result = RunResult::empty(spec, ranks);
        let ledger = &world.ledger;
        let counts = &mut result.messages;
        counts.ops = ledger.ops.len() as u64;
        counts.sent = ledger.msgs.len() as u64;
        for msg in &ledger.msgs {
            match (msg.consumed, ledger.ops[msg.send_op].result) {
                (Some(c), _) if c.truncated => counts.truncated += 1,
                (Some(_), _) => counts.delivered += 1,
                // A message to an engine, which took it (the workload checks its answer).
                (None, Some(Ok(_))) if engine_context(msg.context) => counts.delivered += 1,
                (None, Some(Err(nicmsg_proto::OpError::Cancelled))) => counts.cancelled += 1,
                (None, _) => counts.failed += 1,
            }
        }
        result.violations = world.violations.kept.clone();
        result.violation_count = world.violations.total;
        result.stats = stats;
        result.engine = engine;
        result.net = world.net.stats;
        result.events = self.events;
        result.virtual_ns = now;
        result.quiesced = quiesced;
        result.peak = peak;
        result.digest = self.digest;
        result.released_reads = bad_reads;
        result
    }
}

fn max_peaks(acc: &mut Usage, usage: &Usage) {
    for (a, u) in [
        (&mut acc.sends, &usage.sends),
        (&mut acc.recvs, &usage.recvs),
        (&mut acc.incoming, &usage.incoming),
        (&mut acc.eager_buffers, &usage.eager_buffers),
        (&mut acc.control_queue, &usage.control_queue),
        (&mut acc.completions, &usage.completions),
    ] {
        a.peak = a.peak.max(u.peak);
        a.limit = a.limit.max(u.limit);
    }
}

fn describe_usage(usage: &Usage) -> String {
    let mut parts = Vec::new();
    for (name, table) in [
        ("sends", usage.sends),
        ("recvs", usage.recvs),
        ("incoming", usage.incoming),
        ("eager_buffers", usage.eager_buffers),
        ("control_queue", usage.control_queue),
    ] {
        if table.in_use > 0 {
            parts.push(format!("{name} {}", table.in_use));
        }
    }
    parts.join(", ")
}

trait OptionTime {
    fn is_none_or_later(&self, t: Nanos) -> bool;
}

impl OptionTime for Option<(Nanos, Rank)> {
    fn is_none_or_later(&self, t: Nanos) -> bool {
        match self {
            None => true,
            Some((best, _)) => t < *best,
        }
    }
}

trait OptionAtLeast {
    fn is_none_or_at_least(&self, t: Nanos) -> bool;
}

impl OptionAtLeast for Option<Nanos> {
    fn is_none_or_at_least(&self, t: Nanos) -> bool {
        match self {
            None => true,
            Some(e) => *e >= t,
        }
    }
}

//! LM in the simulator: admission control and in-place placement (`nicmsg_lm`) between nodes
//! over the seeded network, under loss, duplication, reordering, corruption and a death.
//!
//! Each node sends transfers of random sizes (one frame to a few hundred) to random others.
//! A transfer of two frames or more asks its receiver to be placed; admitted, it is sent last
//! frame first as the receiver grants slots, and the receiver's device lands each frame at the
//! address at the head of its fill queue whenever the steering rule lets it, else the frame
//! goes the ordinary way and is copied. The engine sees landed frames later than the device
//! wrote them (a random number of events later), as a real engine polls its ring. In half the
//! runs the stations number their transfers from just below `u32::MAX`, so numbers cross the
//! wrap.
//!
//! Checked after every run ([`Violations`]): every transfer between live nodes is delivered
//! exactly once with every byte right; no frame wrote outside its slot; the fill queue's mirror
//! never lost step with the device; when the network is clean and no ordinary chunk stood in
//! the queue, admitted transfers copied no byte; at the end no receiver is placing, no
//! placement slot waits in a queue, every admission message was answered, and no node thinks a
//! live receiver busy. Runs are a pure function of their seed.

mod frames;
mod node;
pub mod open;

use std::fmt;

use nicmsg_lm::fill::WHOLE_FRAME_BUFFERS;
use nicmsg_lm::station::{Station, StationStats};
use nicmsg_lm::Geometry;
use nicmsg_proto::Nanos;

use crate::content::mix;
use crate::net::{Event, Network};
use crate::rng::SimRng;
use crate::NetConfig;
use node::{Device, Node, Outgoing, SimRegions, Stack};

/// The longest virtual time of one run: far more than any run needs (a dead receiver's
/// transfers are given up within about a second, an expired lease frees a receiver in two).
pub const MAX_VIRTUAL_NS: Nanos = 30_000_000_000;
/// Events of one run before it is called a hang.
pub const MAX_EVENTS: u64 = 20_000_000;

/// One LM run.
#[derive(Debug, Clone)]
pub struct LmSpec {
    pub seed: u64,
    pub nodes: u32,
    /// Transfers each node sends.
    pub transfers: u32,
    pub net: NetConfig,
    /// Probability that one node dies during the run.
    pub death: f64,
}

impl LmSpec {
    pub fn new(seed: u64, net: NetConfig) -> Self {
        Self {
            seed,
            nodes: 3,
            transfers: 6,
            net,
            death: 0.0,
        }
    }
}

/// An LM run's parameters: a job's ([`LmSpec`]) or open stations' ([`open::OpenLmSpec`]).
/// The sweep ([`sweep_lm`]) and the reports of failing runs take either.
pub trait LmRun: Clone {
    /// Runs it.
    fn run(&self) -> LmResult<Self>;
    /// The command that replays this run.
    fn replay_command(&self) -> String;
}

impl LmRun for LmSpec {
    fn run(&self) -> LmResult {
        run_lm(self)
    }

    fn replay_command(&self) -> String {
        let n = &self.net;
        format!(
            "cargo run --release -p nicmsg-sim -- --lm --seed {} --ranks {} --loss {} --dup {} --reorder {} --corrupt {} --partition {} --death {}",
            self.seed, self.nodes, n.loss, n.dup, n.reorder, n.corrupt, n.partition, self.death
        )
    }
}

/// What the runs did, added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LmStats {
    pub transfers: u64,
    pub placed_transfers: u64,
    pub one_copy_transfers: u64,
    pub placed_frames: u64,
    pub copied_frames: u64,
    pub placed_bytes: u64,
    /// Bytes of placed transfers that came by copy (reordered, lost or ahead of their slot).
    pub copied_bytes_placed: u64,
    pub restored_bytes: u64,
    pub ring_frames: u64,
    pub kernel_frames: u64,
    pub held_for_slot: u64,
    pub damaged_landings: u64,
    pub dropped_damaged: u64,
    pub duplicates: u64,
    pub resends_asked: u64,
    pub frames_resent: u64,
    /// Admitted transfers of clean runs with no ordinary chunk ahead, and the bytes they copied.
    pub clean_admitted: u64,
    /// Transfers received (open stations: every life's).
    pub delivered: u64,
    /// Open stations: nodes that restarted, and RESETs sent.
    pub restarts: u64,
    pub resets_sent: u64,
    /// Open stations: transfers taken by two lives of a receiver (a late copy from a peer
    /// that never heard the first life, which a new life cannot tell from a new transfer).
    pub taken_by_two_lives: u64,
    pub events: u64,
    pub virtual_ns: Nanos,
}

impl LmStats {
    pub fn add(&mut self, o: &LmStats) {
        self.transfers += o.transfers;
        self.placed_transfers += o.placed_transfers;
        self.one_copy_transfers += o.one_copy_transfers;
        self.placed_frames += o.placed_frames;
        self.copied_frames += o.copied_frames;
        self.placed_bytes += o.placed_bytes;
        self.copied_bytes_placed += o.copied_bytes_placed;
        self.restored_bytes += o.restored_bytes;
        self.ring_frames += o.ring_frames;
        self.kernel_frames += o.kernel_frames;
        self.held_for_slot += o.held_for_slot;
        self.damaged_landings += o.damaged_landings;
        self.dropped_damaged += o.dropped_damaged;
        self.duplicates += o.duplicates;
        self.resends_asked += o.resends_asked;
        self.frames_resent += o.frames_resent;
        self.clean_admitted += o.clean_admitted;
        self.delivered += o.delivered;
        self.restarts += o.restarts;
        self.resets_sent += o.resets_sent;
        self.taken_by_two_lives += o.taken_by_two_lives;
        self.events += o.events;
        self.virtual_ns = self.virtual_ns.max(o.virtual_ns);
    }
}

/// What went wrong in a run, one sentence each.
#[derive(Debug, Default)]
pub struct Violations(Vec<String>);

impl Violations {
    pub fn push(&mut self, what: String) {
        // A broken run can repeat one fault thousands of times: the first few tell it.
        if self.0.len() < 20 {
            self.0.push(what);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn list(&self) -> &[String] {
        &self.0
    }
}

/// The outcome of one run (a job's; open stations' is [`open::OpenLmResult`]).
#[derive(Debug)]
pub struct LmResult<S = LmSpec> {
    pub spec: S,
    pub violations: Violations,
    pub stats: LmStats,
}

/// What a transfer carries, which its every byte is a function of (with its offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Label {
    /// A job's: sender, receiver and the sender's number for it at that receiver (which the
    /// receiver knows it by).
    Job { from: u32, to: u32, number: u32 },
    /// An open station's: sender, the sender's life and its tag for the transfer (a sender's
    /// numbers start over with each conversation, so the transfer says this itself, in its
    /// first [`STAMP_LEN`] bytes).
    Open { from: u32, life: u32, tag: u32 },
}

/// Bytes at the start of an open station's transfer that say what it carries.
pub const STAMP_LEN: usize = 12;

impl Label {
    pub fn from(self) -> u32 {
        match self {
            Label::Job { from, .. } | Label::Open { from, .. } => from,
        }
    }

    pub fn byte(self, offset: usize) -> u8 {
        let (a, b, c) = match self {
            Label::Job { from, to, number } => (from, to, number),
            Label::Open { from, life, tag } => {
                if offset < STAMP_LEN {
                    let word = [from, life, tag][offset / 4];
                    return word.to_le_bytes()[offset % 4];
                }
                (from, life, tag)
            }
        };
        let word =
            mix(u64::from(a) << 48 ^ u64::from(b) << 40 ^ u64::from(c) << 20 ^ (offset / 8) as u64);
        (word >> ((offset % 8) * 8)) as u8
    }

    /// What an open station's transfer says it carries.
    pub fn read_stamp(bytes: &[u8]) -> Option<Label> {
        let word = |at: usize| {
            let bytes = bytes.get(at..at + 4)?;
            Some(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
        };
        Some(Label::Open {
            from: word(0)?,
            life: word(4)?,
            tag: word(8)?,
        })
    }

    pub fn first_wrong_byte(self, message: &[u8]) -> Option<usize> {
        message
            .iter()
            .enumerate()
            .find(|&(i, &b)| b != self.byte(i))
            .map(|(i, _)| i)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Job { from, number, .. } => write!(f, "{from}/{number}"),
            Label::Open { from, life, tag } => write!(f, "{from}.{life}/{tag}"),
        }
    }
}

/// A station's counters, added to `t`.
fn add_station(t: &mut LmStats, s: &StationStats) {
    t.placed_transfers += s.placed_transfers;
    t.one_copy_transfers += s.one_copy_transfers;
    t.placed_frames += s.placed_frames;
    t.copied_frames += s.copied_frames;
    t.placed_bytes += s.placed_bytes;
    t.copied_bytes_placed += s.copied_bytes_placed;
    t.restored_bytes += s.restored_bytes;
    t.held_for_slot += s.held_for_slot;
    t.damaged_landings += s.damaged_landings;
    t.dropped_damaged += s.dropped_malformed;
    t.duplicates += s.duplicates;
    t.resends_asked += s.resends_asked;
    t.frames_resent += s.frames_resent;
}

/// Transfer sizes, in frames of the run's payload and a few bytes more or less: one frame
/// (ordinary), the edges of two, and up to a few hundred frames.
fn transfer_len(rng: &mut SimRng, payload: usize) -> usize {
    match rng.below(8) {
        0 => rng.below(payload as u64 + 1) as usize,
        1 => payload + 1,
        2 => 2 * payload,
        3 => 2 * payload - 1,
        4 => rng.range(3, 12) as usize * payload + rng.below(payload as u64) as usize,
        5 => 47 * payload,
        6 => rng.range(100, 300) as usize * payload - rng.below(payload as u64) as usize,
        _ => rng.range(2, 40) as usize * payload,
    }
}

/// The device's buffer size: half the runs write a frame at one address, the others across a
/// run of two or three buffers (AF_XDP with scatter-gather at MTU 9000: 3840-byte buffers).
fn device_buffer(rng: &mut SimRng, mtu: u32) -> u32 {
    match rng.below(4) {
        0 => mtu / 3 + 1,
        1 => mtu / 2 + 1,
        _ => WHOLE_FRAME_BUFFERS,
    }
}

/// The stations of a run: their geometry at `mtu`, window and device, drawn.
fn draw_stations(rng: &mut SimRng, mtu: u32) -> (Geometry, u32, Device) {
    let header_len = frames::HEADER_LEN;
    let payload = mtu as usize - header_len;
    let geometry = Geometry::new(header_len, payload).expect("the simulation's MTU fits LM");
    let window = [1, 2, 8, 32, 128][rng.below(5) as usize];
    let buffer_bytes = device_buffer(rng, mtu);
    let ordinary_chunks = match buffer_bytes {
        // A device whose frames span buffers has the kernel's path for every other frame
        // (AF_XDP): ordinary chunks would be one buffer, which a frame of a run can never take.
        WHOLE_FRAME_BUFFERS => [0, 0, 4, 16][rng.below(4) as usize],
        _ => 0,
    };
    let device = Device {
        ordinary_chunks,
        buffer_bytes,
    };
    (geometry, window, device)
}

/// Where every station's transfer numbers start: in half the runs just below `u32::MAX`, so
/// a run's few transfers to a receiver cross the wrap a long-running node crosses after 2^32.
/// Drawn from the seed, not from the run's generator, which would change every run's draws.
fn first_number(seed: u64) -> u32 {
    let draw = mix(seed ^ 0x5752_4150);
    match draw % 2 {
        0 => 1,
        _ => u32::MAX - (draw >> 1) as u32 % 3,
    }
}

/// Runs one seed.
pub fn run_lm(spec: &LmSpec) -> LmResult {
    let mut rng = SimRng::new(spec.seed, 0x4c4d);
    let (geometry, window, device) = draw_stations(&mut rng, spec.net.mtu);
    let payload = geometry.frame_payload();
    let mut plans = Vec::new();
    for from in 0..spec.nodes {
        for _ in 0..spec.transfers {
            let to = (from + 1 + rng.below(u64::from(spec.nodes - 1)) as u32) % spec.nodes;
            let len = transfer_len(&mut rng, payload);
            let start = rng.below(2_000_000);
            plans.push(Outgoing::new(to, len, start));
        }
    }
    let mut nodes: Vec<Node> = (0..spec.nodes)
        .map(|me| {
            let numbers = (window, first_number(spec.seed));
            Node::new(me, spec.nodes, geometry, numbers, device)
        })
        .collect();
    for (at, plan) in plans.into_iter().enumerate() {
        nodes[at / spec.transfers as usize].outgoing.push(plan);
    }
    let network = Network::new(spec.net.clone(), spec.nodes, spec.seed);
    let death = rng.chance(spec.death).then(|| {
        (
            rng.below(u64::from(spec.nodes)) as u32,
            rng.below(3_000_000),
        )
    });
    let mut world = World::new(nodes, network, rng);
    if let Some((rank, at)) = death {
        world.network.schedule(at, Event::Death { rank });
    }
    world.run();
    world.check_end(spec, device.ordinary_chunks);
    LmResult {
        spec: spec.clone(),
        violations: world.violations,
        stats: world.stats,
    }
}

/// The token of a wake-up that restarts its node (an engine's turn is 0).
const RESTART: u64 = 1;

/// A run's nodes over its network, in virtual time.
struct World<S: Stack> {
    nodes: Vec<Node<S>>,
    network: Network,
    rng: SimRng,
    stats: LmStats,
    violations: Violations,
    now: Nanos,
    /// Virtual time after which a run still busy is a hang.
    max_virtual_ns: Nanos,
}

impl<S: Stack> World<S> {
    fn new(nodes: Vec<Node<S>>, network: Network, rng: SimRng) -> Self {
        Self {
            nodes,
            network,
            rng,
            stats: LmStats::default(),
            violations: Violations::default(),
            now: 0,
            max_virtual_ns: MAX_VIRTUAL_NS,
        }
    }

    fn run(&mut self) {
        loop {
            let timer = self
                .nodes
                .iter()
                .filter(|n| n.alive)
                .filter_map(|n| n.next_timer().map(|t| (t, n.me)))
                .min();
            let next = match (self.network.peek_time(), timer) {
                (None, None) => return,
                (Some(t), None) => t,
                (None, Some((t, _))) => t,
                (Some(a), Some((b, _))) => a.min(b),
            };
            self.now = self.now.max(next);
            self.stats.events += 1;
            if self.now > self.max_virtual_ns || self.stats.events > MAX_EVENTS {
                self.violations.push(format!(
                    "hang: still busy after {} events and {} ns",
                    self.stats.events, self.now
                ));
                return;
            }
            if self.network.peek_time() == Some(next) {
                let (_, event) = self.network.pop().expect("peeked");
                self.handle_event(event);
            } else if let Some((_, me)) = timer {
                self.nodes[me as usize].timers(self.now, &mut self.violations);
                self.flush(me);
            }
        }
    }

    fn handle_event(&mut self, event: Event) {
        match event {
            Event::Frame(frame) => {
                let dst = frame.dst as usize;
                if !self.nodes[dst].alive {
                    return;
                }
                let node = &mut self.nodes[dst];
                node.arrive(
                    self.now,
                    frame.src,
                    &frame.bytes,
                    &mut self.stats,
                    &mut self.violations,
                );
                self.maybe_engine_turn(frame.dst);
                self.flush(frame.dst);
            }
            Event::Wake {
                rank,
                token: RESTART,
            } => {
                self.nodes[rank as usize].restart(self.now);
                self.stats.restarts += 1;
            }
            Event::Wake { rank, .. } => {
                if self.nodes[rank as usize].alive {
                    self.nodes[rank as usize].engine_turn(self.now, &mut self.violations);
                    self.flush(rank);
                }
            }
            Event::Death { rank } => self.nodes[rank as usize].alive = false,
            // This simulation's nodes are told nothing by a dead host's kernel: a dead receiver
            // is found by its silence (retransmissions given up, leases expired).
            Event::Refused { .. } => {}
        }
    }

    /// The engine runs now, or a little later (a wake-up is then due), so that landed frames
    /// and frames copied the ordinary way interleave as they do on a machine.
    fn maybe_engine_turn(&mut self, me: u32) {
        if self.rng.chance(0.7) {
            let node = &mut self.nodes[me as usize];
            node.engine_turn(self.now, &mut self.violations);
        } else if self.nodes[me as usize].has_ring_work() {
            let later = self.now + self.rng.range(200, 20_000);
            self.network
                .schedule(later, Event::Wake { rank: me, token: 0 });
        }
    }

    /// Puts what `me` has to send on the network.
    fn flush(&mut self, me: u32) {
        let out = std::mem::take(&mut self.nodes[me as usize].out);
        for (to, bytes) in out {
            let _ = self.network.send(self.now, me, to, bytes);
        }
    }

    /// The stations' counters (every life's), added up into the run's.
    fn add_station_stats(&mut self) {
        for node in &self.nodes {
            add_station(&mut self.stats, node.station().stats());
            self.stats.add(&node.ended_lives);
        }
    }

    /// On a clean network with no ordinary chunk ahead in the fill queue, admitted transfers
    /// copy no byte.
    fn check_clean(&mut self, clean: bool, ordinary_chunks: u32) {
        if clean && ordinary_chunks == 0 {
            self.stats.clean_admitted += self.stats.placed_transfers;
            if self.stats.copied_bytes_placed > 0 {
                self.violations.push(format!(
                    "clean network: admitted transfers copied {} B",
                    self.stats.copied_bytes_placed
                ));
            }
        }
    }
}

impl World<Station<SimRegions>> {
    fn check_end(&mut self, spec: &LmSpec, ordinary_chunks: u32) {
        self.stats.virtual_ns = self.now;
        self.add_station_stats();
        let alive: Vec<bool> = self.nodes.iter().map(|n| n.alive).collect();
        for node in &self.nodes {
            for out in &node.outgoing {
                self.stats.transfers += 1;
                if !(alive[node.me as usize] && alive[out.to as usize]) {
                    continue;
                }
                let received = out
                    .delivered_as()
                    .and_then(|label| self.nodes[out.to as usize].received_len(&label));
                if received != Some(out.len) {
                    self.violations.push(format!(
                        "transfer of {} B from {} to {} not delivered (gave up: {}, received: {received:?})",
                        out.len,
                        node.me,
                        out.to,
                        out.gave_up()
                    ));
                }
            }
        }
        let found: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .flat_map(|node| node_at_end(node, spec, &alive))
            .collect();
        for what in found {
            self.violations.push(what);
        }
        self.check_clean(spec.net.is_clean(), ordinary_chunks);
    }
}

/// What is wrong with a live node of a job at the end of a run.
fn node_at_end(node: &Node, spec: &LmSpec, alive: &[bool]) -> Vec<String> {
    let mut found = station_at_end(node.me, node.station(), spec.net.corrupt);
    for peer in (0..spec.nodes).filter(|&p| p != node.me && alive[p as usize]) {
        if node.station().admission().is_busy(peer) {
            found.push(format!(
                "node {} thinks node {peer} busy at the end",
                node.me
            ));
        }
    }
    found
}

/// What is wrong with node `me`'s station at the end of a run, a job's or an open one: a
/// transfer still placed, placement slots waiting, admission messages unanswered, frames
/// dropped as malformed on a network that corrupts none.
fn station_at_end(me: u32, station: &Station<SimRegions>, corrupt: f64) -> Vec<String> {
    let mut found = Vec::new();
    if station.active_placements() > 0 || station.admission().placing().is_some() {
        found.push(format!("node {me} still places a transfer"));
    }
    if station.placement_slots_waiting() > 0 {
        found.push(format!("node {me}: placement slots left in its fill queue"));
    }
    if station.admission().poll_timeout().is_some() {
        found.push(format!(
            "node {me}: admission messages unanswered at the end"
        ));
    }
    if corrupt == 0.0 && station.stats().dropped_malformed > 0 {
        found.push(format!(
            "node {me}: {} frames dropped as malformed with no corruption",
            station.stats().dropped_malformed
        ));
    }
    found
}

/// Runs many seeds (each with each loss rate), one after another, a job's or open stations';
/// returns the failures and the totals. `progress` is called after every run.
pub fn sweep_lm<S: LmRun>(
    specs: &[S],
    progress: &mut dyn FnMut(&LmResult<S>),
) -> (Vec<LmResult<S>>, LmStats) {
    let mut failures = Vec::new();
    let mut total = LmStats::default();
    for spec in specs {
        let result = spec.run();
        total.add(&result.stats);
        progress(&result);
        if !result.violations.is_empty() {
            failures.push(result);
        }
    }
    (failures, total)
}

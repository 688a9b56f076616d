//! Open LM stations in the simulator (`--lm --open`): stations whose peers are socket
//! addresses (`nicmsg_lm::open`), over the seeded network with the same device as the job's
//! nodes (the steering rule, landings the engine sees late, void slots, runs of buffers).
//!
//! Nodes 0..servers are servers, the others clients, each at 10.0.0.N:7000. Each client sends
//! transfers of random sizes (one frame to a few hundred) to random servers, at random times;
//! a server answers some of what it receives with a transfer back to the address it heard it
//! from (a peer it learnt only from its frames). With probability `restart` each node restarts
//! once during the run: its station is replaced by a fresh one at the same address with
//! another incarnation, and its pending sends go with the old life (they never report).
//! Servers keep `slots` peers at once: fewer than their clients make them share (a full
//! table turns new peers away; a slot quiet for `QUIET_NS` is reused).
//!
//! Every transfer carries (sender, sender's life, tag) in its first bytes, and every byte is
//! a function of them. Checked after every run ([`Violations`]):
//!
//! 1. every transfer received is byte-exact, from the node it names, one its sender started,
//!    of the length it sent;
//! 2. no transfer is received twice, across every life of its receiver;
//! 3. every send reported delivered was received;
//! 4. every send reports (none is pending when the run has nothing left to do), and a send
//!    reports delivered unless a peer restarted under it: its sender restarted (the send went
//!    with the old life), or its receiver restarted after the sender's life began and before
//!    the send reported (a conversation with the receiver's earlier life ends with RESET, and
//!    its sends fail by design), or the servers share slots, or a partition still cuts them;
//! 5. the device's checks (no frame written outside its slot, the fill queue's mirror in
//!    step) and at the end, as for a job: no transfer still placed, no placement slot
//!    waiting, no admission message unanswered (open stations send no BUSY views);
//! 6. on a clean network with no restarts and no ordinary chunk ahead, placed transfers copy
//!    no byte.
//!
//! Runs are a pure function of their seed.

use std::net::SocketAddr;

use nicmsg_lm::fill::Slot;
use nicmsg_lm::open::{OpenEvent, OpenSendError, OpenStation};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{Landing, LandingError, SendError, Station, StationConfig};
use nicmsg_proto::Nanos;

use super::node::{Answers, Node, Outgoing, SimRegions, Stack, StackEvent};
use super::{
    draw_stations, first_number, station_at_end, transfer_len, Label, LmResult, LmRun, World,
    STAMP_LEN,
};
use crate::content::mix;
use crate::net::{Event, Network};
use crate::rng::SimRng;
use crate::NetConfig;

/// The longest virtual time of one run: clients turned away by a full table wait out a
/// silence limit (5 s) per transfer, and a slot is reused after `QUIET_NS` (10 s).
pub const MAX_VIRTUAL_NS: Nanos = 300_000_000_000;
/// Restarts happen in this window, among the transfers.
const RESTART_WINDOW_NS: (Nanos, Nanos) = (500_000, 12_000_000);
/// Clients start their transfers in this window.
const START_WINDOW_NS: Nanos = 10_000_000;
/// How often a server answers a transfer it received.
const ANSWER_CHANCE: f64 = 0.3;

/// One run of open stations.
#[derive(Debug, Clone)]
pub struct OpenLmSpec {
    pub seed: u64,
    pub nodes: u32,
    /// Transfers each client sends.
    pub transfers: u32,
    pub net: NetConfig,
    /// Probability that each node restarts once during the run.
    pub restart: f64,
    /// The servers' peer slots (`None`: enough for everyone, [`OpenLmSpec::enough_slots`]).
    pub slots: Option<u32>,
}

impl OpenLmSpec {
    pub fn new(seed: u64, net: NetConfig) -> Self {
        Self {
            seed,
            nodes: 5,
            transfers: 6,
            net,
            restart: 0.0,
            slots: None,
        }
    }

    /// Nodes 0..servers are servers: a third of the nodes, at least one.
    pub fn servers(&self) -> u32 {
        self.nodes.div_ceil(3)
    }

    /// Slots that hold every peer with room for a second conversation each (a peer that
    /// restarted, while the slot of its old conversation stays retired for `QUIET_NS`).
    pub fn enough_slots(&self) -> u32 {
        2 * (self.nodes - 1)
    }

    fn server_slots(&self) -> u32 {
        self.slots.unwrap_or(self.enough_slots()).max(1)
    }

    fn shares(&self) -> bool {
        self.server_slots() < self.enough_slots()
    }
}

impl LmRun for OpenLmSpec {
    fn run(&self) -> OpenLmResult {
        run_lm_open(self)
    }

    fn replay_command(&self) -> String {
        let n = &self.net;
        let slots = self
            .slots
            .map_or(String::new(), |s| format!(" --open-slots {s}"));
        format!(
            "cargo run --release -p nicmsg-sim -- --lm --open --seed {} --ranks {} --loss {} --dup {} --reorder {} --corrupt {} --partition {} --mtu {} --restart {}{slots}",
            self.seed, self.nodes, n.loss, n.dup, n.reorder, n.corrupt, n.partition, n.mtu, self.restart
        )
    }
}

/// The outcome of one run.
pub type OpenLmResult = LmResult<OpenLmSpec>;

/// Node `node`'s address: 10.0.0.N+1:7000.
pub fn address(node: u32) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, node as u8 + 1], 7000))
}

/// The node at `address` (the inverse of [`address`]).
fn node_at(address: SocketAddr) -> u32 {
    match address {
        SocketAddr::V4(v4) if v4.port() == 7000 => u32::from(v4.ip().octets()[3]) - 1,
        _ => unreachable!("a frame from or to {address}, no node's address"),
    }
}

/// The incarnation of `node`'s `life`: random-looking and nonzero (conversations are named
/// the incarnation XOR the slot, so incarnations that differ only in their low bits would
/// name different lives' conversations alike), drawn from the seed through the mixer.
fn incarnation(seed: u64, node: u32, life: u32) -> u32 {
    let mut draw = mix(seed ^ mix(0x4f50_454e_0000_0000 | u64::from(node) << 16 | u64::from(life)));
    loop {
        let incarnation = (draw ^ draw >> 32) as u32;
        if incarnation != 0 {
            return incarnation;
        }
        draw = mix(draw);
    }
}

/// An open station at a node's address, through its lives.
pub struct OpenStack {
    station: OpenStation<SimRegions>,
    me: u32,
    life: u32,
    seed: u64,
    config: StationConfig,
    capacity: u32,
    /// The open counters of the lives that ended.
    resets_sent_before: u64,
}

impl OpenStack {
    fn new(me: u32, seed: u64, config: StationConfig, capacity: u32) -> Self {
        Self {
            station: Self::open(me, seed, 1, config, capacity),
            me,
            life: 1,
            seed,
            config,
            capacity,
            resets_sent_before: 0,
        }
    }

    fn open(
        me: u32,
        seed: u64,
        life: u32,
        config: StationConfig,
        capacity: u32,
    ) -> OpenStation<SimRegions> {
        let names = (address(me), capacity, incarnation(seed, me, life));
        OpenStation::new(config, names, SimRegions::new(me))
    }

    /// RESETs sent by every life.
    pub fn resets_sent(&self) -> u64 {
        self.resets_sent_before + self.station.stats().resets_sent
    }
}

impl Stack for OpenStack {
    fn station(&self) -> &Station<SimRegions> {
        self.station.station()
    }

    fn station_mut(&mut self) -> &mut Station<SimRegions> {
        self.station.station_mut()
    }

    fn arrive(&mut self, now: Nanos, from: u32, frame: &[u8]) {
        self.station.arrive(now, address(from), frame);
    }

    fn take_landed(
        &mut self,
        now: Nanos,
        from: u32,
        slot: Slot,
        landing: Landing<'_>,
    ) -> Result<(), LandingError> {
        self.station.take_landed(now, address(from), slot, landing)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.station.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.station.handle_timeout(now);
    }

    fn poll_event(&mut self) -> Option<StackEvent> {
        Some(match self.station.poll_event()? {
            OpenEvent::Received {
                from,
                number,
                message,
            } => StackEvent::Received {
                from: node_at(from),
                number,
                message,
            },
            OpenEvent::Sent { id, outcome, .. } => StackEvent::Sent {
                id: id.0,
                ok: outcome.is_ok(),
            },
        })
    }

    fn poll_transmit(&mut self) -> Option<(u32, &mut [u8])> {
        let (to, frame) = self.station.poll_transmit()?;
        Some((node_at(to), frame))
    }

    fn label(&self, me: u32, _to: u32, tag: u32) -> Label {
        Label::Open {
            from: me,
            life: self.life,
            tag,
        }
    }

    fn received_label(&self, _me: u32, _from: u32, _number: u32, bytes: &[u8]) -> Option<Label> {
        Label::read_stamp(bytes)
    }

    fn send(&mut self, now: Nanos, to: u32, buffer: HoleBuffer) -> Option<u64> {
        match self.station.send(now, address(to), buffer) {
            Ok(id) => Some(id.0),
            Err((OpenSendError::Station(SendError::Busy) | OpenSendError::TableFull, _)) => None,
            Err((error, _)) => panic!("the simulation sends only what a station takes: {error}"),
        }
    }

    fn restart(&mut self) {
        self.resets_sent_before += self.station.stats().resets_sent;
        self.life += 1;
        self.station = Self::open(self.me, self.seed, self.life, self.config, self.capacity);
    }
}

/// Runs one seed.
pub fn run_lm_open(spec: &OpenLmSpec) -> OpenLmResult {
    assert!(spec.nodes >= 2, "a server and a client at least");
    let mut rng = SimRng::new(spec.seed, 0x004f_4c4d);
    let (geometry, window, device) = draw_stations(&mut rng, spec.net.mtu);
    let payload = geometry.frame_payload();
    let servers = spec.servers();
    let mut nodes: Vec<Node<OpenStack>> = (0..spec.nodes)
        .map(|me| {
            let config = device.station_config((0, 2), geometry, (window, first_number(spec.seed)));
            let capacity = match me < servers {
                true => spec.server_slots(),
                false => spec.enough_slots(),
            };
            let stack = OpenStack::new(me, spec.seed, config, capacity);
            let mut node = Node::with_stack(me, stack, device);
            if me < servers {
                node.answers = Some(Answers {
                    rng: SimRng::new(spec.seed, 0x414e_5300 + u64::from(me)),
                    chance: ANSWER_CHANCE,
                    payload,
                });
            }
            node
        })
        .collect();
    for node in nodes.iter_mut().skip(servers as usize) {
        for _ in 0..spec.transfers {
            let to = rng.below(u64::from(servers)) as u32;
            let len = transfer_len(&mut rng, payload).max(STAMP_LEN);
            let start = rng.below(START_WINDOW_NS);
            node.outgoing.push(Outgoing::new(to, len, start));
        }
    }
    let mut restarts = Vec::new();
    for node in 0..spec.nodes {
        if rng.chance(spec.restart) {
            restarts.push((node, rng.range(RESTART_WINDOW_NS.0, RESTART_WINDOW_NS.1)));
        }
    }
    let network = Network::new(spec.net.clone(), spec.nodes, spec.seed);
    let mut world = World::new(nodes, network, rng);
    world.max_virtual_ns = MAX_VIRTUAL_NS;
    for &(rank, at) in &restarts {
        let restart = Event::Wake {
            rank,
            token: super::RESTART,
        };
        world.network.schedule(at, restart);
    }
    world.run();
    world.check_open_end(spec, device.ordinary_chunks);
    OpenLmResult {
        spec: spec.clone(),
        violations: world.violations,
        stats: world.stats,
    }
}

impl World<OpenStack> {
    fn check_open_end(&mut self, spec: &OpenLmSpec, ordinary_chunks: u32) {
        self.stats.virtual_ns = self.now;
        self.add_station_stats();
        let mut found = Vec::new();
        for node in &self.nodes {
            self.stats.resets_sent += node.stack().resets_sent();
            self.stats.taken_by_two_lives += node.taken_by_two_lives;
            self.stats.transfers += node.outgoing.len() as u64;
            self.stats.delivered += node.transfers_received().count() as u64;
            found.extend(self.sends_at_end(spec, node));
            found.extend(self.received_at_end(node));
            found.extend(station_at_end(node.me, node.station(), spec.net.corrupt));
        }
        for what in found {
            self.violations.push(what);
        }
        let restarted = self.nodes.iter().any(|n| n.restarted.is_some());
        self.check_clean(spec.net.is_clean() && !restarted, ordinary_chunks);
    }

    /// Checks 3 and 4 of the module's list for `node`'s sends.
    fn sends_at_end(&self, spec: &OpenLmSpec, node: &Node<OpenStack>) -> Vec<String> {
        let mut found = Vec::new();
        for out in &node.outgoing {
            let to = &self.nodes[out.to as usize];
            let what = match out.label {
                Some(label) => format!("transfer {label} ({} B to {})", out.len, out.to),
                None => format!("a transfer of {} B from {} to {}", out.len, node.me, out.to),
            };
            if out.dropped() {
                continue;
            }
            if out.pending() {
                found.push(format!("{what}: never reported (a silent hang)"));
                continue;
            }
            if let Some(label) = out.delivered_as() {
                let received = to.received_len(&label);
                if received != Some(out.len) {
                    found.push(format!(
                        "{what}: reported delivered, received: {received:?}"
                    ));
                }
                continue;
            }
            // Given up: allowed only where a peer restarted under it, slots are shared, or a
            // partition still cuts the pair.
            let started = out.started.expect("a send that reported started");
            let ended = out.ended.expect("a send that reported ended");
            let life_began = node.restarted.filter(|&at| at <= started).unwrap_or(0);
            let receiver_restarted = to
                .restarted
                .is_some_and(|at| at > life_began && at <= ended);
            let cut = self.network.cut(node.me, out.to, self.now);
            if !(receiver_restarted || spec.shares() || cut) {
                found.push(format!(
                    "{what}: failed, with neither peer restarted under it, slots for everyone and no partition"
                ));
            }
        }
        found
    }

    /// Checks 1 and 2's other half: every transfer `node` received is one its sender started,
    /// to it, of that length.
    fn received_at_end(&self, node: &Node<OpenStack>) -> Vec<String> {
        let mut found = Vec::new();
        for (label, len) in node.transfers_received() {
            let sent = self
                .nodes
                .get(label.from() as usize)
                .and_then(|from| from.outgoing.iter().find(|o| o.label == Some(*label)));
            match sent {
                Some(out) if out.to == node.me && out.len == *len => {}
                Some(out) => found.push(format!(
                    "node {}: transfer {label} received ({len} B), sent to {} ({} B)",
                    node.me, out.to, out.len
                )),
                None => found.push(format!(
                    "node {}: transfer {label} received ({len} B), never sent",
                    node.me
                )),
            }
        }
        found
    }
}

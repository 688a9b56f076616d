//! Open endpoints in the simulator: peers added by address (`nicmsg_proto`'s directory), as the
//! datagram sockets use them, under loss, duplication, reordering, corruption and restarts.
//!
//! Node 0 is a server that keeps receives from anyone posted; the other nodes are clients that
//! send it datagrams one after another, by address, each carrying (client, life, number) and
//! bytes derived from them. With probability `restart`, the server and each client restart
//! once at a random time: the process ends and a new one opens at the same address, with a new
//! incarnation (its pending operations vanish with it).
//!
//! Checked after every run ([`OpenResult::violations`]): every datagram received is
//! intact; no life of the server receives one datagram twice, nor a client's datagrams out of
//! order; every send that completed successfully was received by some life of the server;
//! every send of a client still running at the end completed (no hang); and in a run without
//! restarts, every send succeeded. Runs are a pure function of their seed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use nicmsg_proto::{
    Completion, Config, Context, Endpoint, ExpectedFrame, HostMemory, Nanos, OpId, PlacedOutcome,
    Rank, SgList, Source, TagMatch,
};

use crate::content::mix;
use crate::memory::Arena;
use crate::net::{Event, Network};
use crate::rng::{stream, SimRng};
use crate::NetConfig;

/// The job id of every open endpoint of a run.
const JOB: u32 = 0x6F70;
/// Receives the server keeps posted: several clients' datagrams may arrive at once.
const SERVER_RECEIVES: usize = 4;
/// Longest datagram: a few rendezvous windows at the simulated MTU.
const MAX_DATAGRAM: usize = 40_000;
/// Shortest: above the core's early-completion size, so a successful send means delivered.
const MIN_DATAGRAM: usize = 300;
/// The longest virtual time of one run.
pub const MAX_VIRTUAL_NS: Nanos = 60_000_000_000;
/// Events of one run before it is called a hang.
const MAX_EVENTS: u64 = 10_000_000;
/// Frames predicted per delivery: the engine's receive batch.
const PREDICTED_FRAMES: usize = 64;
/// Room for the header (client, life, number) at the start of every datagram.
const HEADER: usize = 12;

/// One run.
#[derive(Debug, Clone)]
pub struct OpenSpec {
    pub seed: u64,
    pub clients: u32,
    /// Datagrams each client sends.
    pub datagrams: u32,
    /// Peer slots of the server: fewer than clients makes them share.
    pub server_slots: u32,
    pub net: NetConfig,
    /// Probability that each node restarts once during the run.
    pub restart: f64,
    /// Deliver frames as the engine does with speculative placement (`deliver`): payloads
    /// the endpoint predicted are written straight into the posted receive. Odd seeds.
    pub place: bool,
}

impl OpenSpec {
    pub fn new(seed: u64, net: NetConfig) -> Self {
        Self {
            seed,
            clients: 3,
            datagrams: 8,
            server_slots: 8,
            net: NetConfig {
                // Seeds 2 and 3 of every 4, across both placement choices.
                link_checks_payload: seed % 4 >= 2,
                ..net
            },
            restart: 0.0,
            place: seed % 2 == 1,
        }
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        let n = &self.net;
        format!(
            "cargo run --release -p nicmsg-sim -- --open --seed {} --ranks {} --open-slots {} --loss {} --dup {} --reorder {} --corrupt {} --restart {}",
            self.seed, self.clients + 1, self.server_slots, n.loss, n.dup, n.reorder, n.corrupt, self.restart
        )
    }
}

/// The outcome of one run.
#[derive(Debug)]
pub struct OpenResult {
    pub spec: OpenSpec,
    pub violations: Vec<String>,
    pub received: u64,
    pub sends_ok: u64,
    pub sends_failed: u64,
    pub restarts: u32,
    /// Payload bytes the endpoints took in place (placing runs only).
    pub bytes_placed: u64,
}

fn address(node: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1 + node as u8], 7000))
}

/// The node at `address` (the inverse of [`address`]).
fn node_at(address: SocketAddr) -> Option<usize> {
    match address {
        SocketAddr::V4(v4) if v4.port() == 7000 => Some(v4.ip().octets()[3] as usize - 1),
        _ => None,
    }
}

/// The bytes of datagram `number` of `client`'s `life`.
fn datagram(client: u32, life: u32, number: u32, len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len)
        .map(|i| {
            mix(u64::from(client) << 48
                ^ u64::from(life) << 32
                ^ u64::from(number) << 16
                ^ i as u64) as u8
        })
        .collect();
    bytes[0..4].copy_from_slice(&client.to_le_bytes());
    bytes[4..8].copy_from_slice(&life.to_le_bytes());
    bytes[8..12].copy_from_slice(&number.to_le_bytes());
    bytes
}

/// One process at a node's address.
struct Life {
    endpoint: Endpoint,
    memory: Arena,
    number: u32,
    /// Slot -> address, as the transport keeps it.
    bound: BTreeMap<Rank, SocketAddr>,
    /// Server: posted receives. Client: the send in flight and its datagram number.
    receives: Vec<(OpId, nicmsg_proto::RegionId)>,
    sending: Option<(OpId, u32)>,
    next_datagram: u32,
}

impl Life {
    fn open(config: &Config, incarnation: u32, slots: u32, number: u32) -> Self {
        Self {
            endpoint: Endpoint::new_open(config.clone(), JOB, incarnation, slots)
                .expect("valid open endpoint"),
            memory: Arena::new(0),
            number,
            bound: BTreeMap::new(),
            receives: Vec::new(),
            sending: None,
            next_datagram: 0,
        }
    }
}

/// What a run records to check afterwards.
#[derive(Default)]
struct Ledger {
    /// (client, life, number) of each successful send.
    sent_ok: BTreeSet<(u32, u32, u32)>,
    /// By server life: every datagram received, in order.
    received: BTreeMap<u32, Vec<(u32, u32, u32)>>,
    violations: Vec<String>,
    sends_failed: u64,
}

/// Runs one seed.
pub fn run_open(spec: &OpenSpec) -> OpenResult {
    let mut rng = SimRng::new(spec.seed, stream::WORKLOAD);
    let nodes = spec.clients as usize + 1;
    let config = Config {
        mtu: spec.net.mtu,
        rto_initial_ns: 200_000,
        rto_min_ns: 100_000,
        rto_max_ns: 20_000_000,
        keepalive_ns: 20_000_000,
        peer_timeout_ns: 500_000_000,
        link_checks_payload: spec.net.link_checks_payload,
        ..Config::default()
    };
    let mut net = Network::new(spec.net.clone(), nodes as u32, spec.seed);
    let mut incarnations = 0u32;
    let mut open = |rng: &mut SimRng, slots: u32, number: u32| {
        incarnations += 1;
        let incarnation = (rng.next_u64() as u32 ^ incarnations) | 1;
        Life::open(&config, incarnation, slots, number)
    };
    let slots = |node: usize| if node == 0 { spec.server_slots } else { 2 };
    let mut lives: Vec<Life> = (0..nodes).map(|n| open(&mut rng, slots(n), 0)).collect();
    let restart_at: Vec<Option<Nanos>> = (0..nodes)
        .map(|_| {
            rng.chance(spec.restart)
                .then(|| rng.range(1_000_000, 400_000_000))
        })
        .collect();
    let mut restarted = vec![false; nodes];
    let mut ledger = Ledger::default();
    let mut now: Nanos = 0;
    for _ in 0..SERVER_RECEIVES {
        post_server_receive(&mut lives[0], now);
    }
    let mut events = 0u64;
    loop {
        for node in 0..nodes {
            if node > 0 && !start_next_send(&mut lives[node], node as u32, now, spec, &mut rng) {
                ledger.sends_failed += 1;
            }
            flush(&mut lives, node, now, &mut net, &mut ledger);
        }
        // A send that completed in this pass lets its client start the next one at once.
        let startable = lives[1..]
            .iter()
            .any(|l| l.sending.is_none() && l.next_datagram < spec.datagrams);
        if startable {
            events += 1;
            if events > MAX_EVENTS {
                ledger
                    .violations
                    .push("clients keep failing to start".into());
                break;
            }
            continue;
        }
        let next_restart = (0..nodes)
            .filter(|&n| !restarted[n])
            .filter_map(|n| restart_at[n].map(|t| (t, n)))
            .min();
        let next_timer = lives.iter().filter_map(|l| l.endpoint.poll_timeout()).min();
        let next_frame = net.peek_time();
        let Some(next) = [next_timer, next_frame, next_restart.map(|r| r.0)]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        events += 1;
        if next > MAX_VIRTUAL_NS || events > MAX_EVENTS {
            ledger
                .violations
                .push(format!("no end by {} s", next as f64 / 1e9));
            break;
        }
        now = now.max(next);
        if let Some((_, node)) = next_restart.filter(|r| r.0 == next) {
            restarted[node] = true;
            let number = lives[node].number + 1;
            lives[node] = open(&mut rng, slots(node), number);
            if node == 0 {
                for _ in 0..SERVER_RECEIVES {
                    post_server_receive(&mut lives[0], now);
                }
            }
            continue;
        }
        if next_frame == Some(next) {
            if let Some((_, Event::Frame(frame))) = net.pop() {
                let life = &mut lives[frame.dst as usize];
                let from = address(frame.src as usize);
                deliver(life, now, from, &frame.bytes, spec.place);
            }
            continue;
        }
        for life in lives.iter_mut() {
            if life.endpoint.poll_timeout().is_some_and(|t| t <= now) {
                life.endpoint.handle_timeout(now, &mut life.memory);
            }
        }
    }
    check_end(spec, &lives, &restarted, &mut ledger);
    OpenResult {
        spec: spec.clone(),
        received: ledger.received.values().map(|v| v.len() as u64).sum(),
        sends_ok: ledger.sent_ok.len() as u64,
        sends_failed: ledger.sends_failed,
        restarts: restarted.iter().filter(|&&r| r).count() as u32,
        bytes_placed: lives
            .iter()
            .map(|life| life.endpoint.stats().bytes_placed_direct)
            .sum(),
        violations: ledger.violations,
    }
}

/// Hands a frame to the endpoint. With `place`, as the engine's transport with speculative
/// placement: a frame the endpoint predicted (a DATA frame, or the first frame of a message
/// from its headers read ahead) has its payload written at the predicted place first (as the
/// kernel would scatter it) and is offered as placed; a frame refused or not predicted is then
/// handled as bytes.
fn deliver(life: &mut Life, now: Nanos, from: SocketAddr, bytes: &[u8], place: bool) {
    if place {
        let mut expected = [ExpectedFrame::default(); PREDICTED_FRAMES];
        let guess = life
            .endpoint
            .predicted_place(bytes, Some(from), &mut expected);
        if let Some(guess) = guess {
            let (header, payload) = bytes.split_at(guess.header_len());
            let start = guess.segment.offset as usize;
            if let Some(region) = life.memory.region_mut(guess.segment.region) {
                region[start..start + payload.len()].copy_from_slice(payload);
            }
            let (endpoint, memory) = (&mut life.endpoint, &mut life.memory);
            let outcome =
                endpoint.handle_placed_frame_from(now, from, header, bytes.len(), &guess, memory);
            if outcome == PlacedOutcome::Taken {
                return;
            }
        }
    }
    life.endpoint
        .handle_frame_from(now, from, bytes, &mut life.memory);
}

fn post_server_receive(life: &mut Life, now: Nanos) {
    let region = life.memory.alloc(vec![0; MAX_DATAGRAM]);
    let buffer = SgList::contiguous(region, 0, MAX_DATAGRAM as u64);
    let op = life
        .endpoint
        .post_recv(
            now,
            Source::Any,
            Context::USER,
            TagMatch::Any,
            &buffer,
            &mut life.memory,
        )
        .expect("room for the server's receives");
    life.receives.push((op, region));
}

/// Starts the client's next datagram if it has none in flight; false if the post was refused
/// at once (no slot for the server: counted as a failed send, and the client goes on).
fn start_next_send(
    life: &mut Life,
    client: u32,
    now: Nanos,
    spec: &OpenSpec,
    rng: &mut SimRng,
) -> bool {
    if life.sending.is_some() || life.next_datagram >= spec.datagrams {
        return true;
    }
    let number = life.next_datagram;
    life.next_datagram += 1;
    let len = rng.range(MIN_DATAGRAM as u64, MAX_DATAGRAM as u64) as usize;
    let region = life
        .memory
        .alloc(datagram(client, life.number, number, len.max(HEADER)));
    let buffer = SgList::contiguous(region, 0, len as u64);
    let sent = life
        .endpoint
        .peer_for_address(now, address(0))
        .and_then(|peer| {
            life.endpoint
                .post_send(now, peer, Context::USER, 0, &buffer, &mut life.memory)
        });
    match sent {
        Ok(op) => {
            life.sending = Some((op, number));
            true
        }
        Err(_) => false,
    }
}

/// Sends what the node's endpoint has, binds new slots, and takes its completions.
fn flush(lives: &mut [Life], node: usize, now: Nanos, net: &mut Network, ledger: &mut Ledger) {
    let life = &mut lives[node];
    while let Some((peer, address)) = life.endpoint.poll_binding() {
        life.bound.insert(peer, address);
    }
    while let Some(transmit) = life.endpoint.poll_transmit(now, &life.memory) {
        let mut bytes = vec![0; transmit.len()];
        if transmit.gather_into(&life.memory, &mut bytes).is_none() {
            ledger
                .violations
                .push(format!("node {node}: a frame could not be gathered"));
            continue;
        }
        let Some(to) = life.bound.get(&transmit.dst) else {
            ledger.violations.push(format!(
                "node {node}: a frame to slot {} before it was bound",
                transmit.dst
            ));
            continue;
        };
        let dst = node_at(*to).expect("a node's address");
        net.send(now, node as Rank, dst as Rank, bytes);
    }
    while let Some(completion) = life.endpoint.poll_completion() {
        if node == 0 {
            server_completion(life, completion, now, ledger);
        } else {
            client_completion(life, node as u32, completion, ledger);
        }
    }
}

fn server_completion(life: &mut Life, completion: Completion, now: Nanos, ledger: &mut Ledger) {
    let Some(at) = life.receives.iter().position(|r| r.0 == completion.op) else {
        return;
    };
    let (_, region) = life.receives.swap_remove(at);
    if let Ok(status) = completion.result {
        let bytes = life.memory.bytes(region).expect("live region")[..status.len as usize].to_vec();
        record_datagram(life.number, &bytes, ledger);
    }
    life.memory.release(region);
    post_server_receive(life, now);
}

fn record_datagram(server_life: u32, bytes: &[u8], ledger: &mut Ledger) {
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    if bytes.len() < HEADER {
        ledger
            .violations
            .push(format!("a datagram of {} bytes", bytes.len()));
        return;
    }
    let key = (word(0), word(4), word(8));
    if bytes != datagram(key.0, key.1, key.2, bytes.len()) {
        ledger
            .violations
            .push(format!("datagram {key:?} arrived damaged"));
        return;
    }
    let seen = ledger.received.entry(server_life).or_default();
    if seen.contains(&key) {
        ledger
            .violations
            .push(format!("server life {server_life} received {key:?} twice"));
    }
    if let Some(last) = seen.iter().rev().find(|k| (k.0, k.1) == (key.0, key.1)) {
        if last.2 > key.2 {
            ledger.violations.push(format!(
                "server life {server_life}: {key:?} overtook {last:?}"
            ));
        }
    }
    seen.push(key);
}

fn client_completion(life: &mut Life, client: u32, completion: Completion, ledger: &mut Ledger) {
    let Some((op, number)) = life.sending else {
        return;
    };
    if op != completion.op {
        return;
    }
    life.sending = None;
    match completion.result {
        Ok(_) => {
            ledger.sent_ok.insert((client, life.number, number));
        }
        Err(_) => ledger.sends_failed += 1,
    }
}

fn check_end(spec: &OpenSpec, lives: &[Life], restarted: &[bool], ledger: &mut Ledger) {
    let received: BTreeSet<_> = ledger.received.values().flatten().copied().collect();
    for key in &ledger.sent_ok {
        if !received.contains(key) {
            ledger
                .violations
                .push(format!("send {key:?} succeeded but no server received it"));
        }
    }
    for (node, life) in lives.iter().enumerate().skip(1) {
        if life.sending.is_some() || life.next_datagram < spec.datagrams {
            ledger
                .violations
                .push(format!("client {node} did not finish its sends"));
        }
    }
    let any_restart = restarted.iter().any(|&r| r);
    let clean = spec.net.partitions.is_empty() && spec.net.partition == 0.0;
    if !any_restart && clean && ledger.sends_failed > 0 && spec.server_slots >= spec.clients {
        ledger.violations.push(format!(
            "{} sends failed in a run without restarts",
            ledger.sends_failed
        ));
    }
}

//! Fuzz target for the protocol state machine: `nicmsg_proto::Endpoint` driven by host
//! commands, time and frames from peers that lie.
//!
//! The input is read as a script (`arbitrary::Unstructured`): first a configuration with small
//! tables, windows and credits (so that every limit is reachable), then a scenario, then up to
//! `MAX_ACTIONS` actions. A scenario is one endpoint (a job of 2 to 4 ranks, or an open endpoint
//! with 1 to 3 slots) whose every peer is played by the fuzzer, or two endpoints (ranks of one
//! job, or two open endpoints) that talk through a network in which the fuzzer delivers, drops,
//! duplicates, reorders and rewrites frames, and into which it injects frames of its own.
//!
//! Frames played by the fuzzer are built valid with the wire crate's emitter (right job, ranks
//! or conversation names, kinds, message headers cut as the protocol cuts them, checksums
//! sealed), mostly as answers to the frames the endpoint sent (its message ids, frame indexes,
//! grants), then have fields rewritten (ids, indexes, offsets, lengths, flags, credit counts,
//! message headers) and are sealed again, so they pass the checksum and reach deep states.
//! Actions are also posts of sends and receives (sizes on every class and frame boundary, tags,
//! masks, any source, scattered buffers), probes, claims, cancels, time advances with
//! `handle_timeout`, refusals, and deliveries through the speculative placement path.
//!
//! Oracle:
//! * nothing panics, and every loop is bounded: `poll_transmit` runs dry, and after at most a
//!   few rounds of `handle_timeout` at one instant `poll_timeout` lies in the future;
//! * `usage()` stays within the configured limits after every action;
//! * every frame an endpoint sends parses, and names its job and (in a job) its ranks;
//! * every completion names an operation that was posted, and each operation completes at most
//!   once; `Cancelled` only after a cancel; a send's status is its own; a receive's status fits
//!   its buffer and its criteria;
//! * the core never writes outside a receive buffer (guard bytes around and between its
//!   segments), nor past the message's length in it, nor into a truncated or cancelled
//!   receive's buffer, nor into a receive buffer after its completion, nor into a send buffer;
//! * with two endpoints and no frame rewritten or injected in their conversation: a receive
//!   that completes holds exactly the bytes of a message sent to it, each message is received
//!   at most once, a message is never received when its send completed `Cancelled`, and a send
//!   buffer is overwritten as soon as its send completes (so bytes read from it later reach the
//!   receiver and are caught); while neither gave up on the other, MPI's non-overtaking order
//!   holds (a receive that took a message would not have taken an earlier one of its sender
//!   that no earlier receive took).
//!
//! Run: `cargo +nightly fuzz run endpoint_frames -- -max_total_time=1200 -rss_limit_mb=2048`
//! from `fuzz/` (`docs/protocol.md`, "Testing and fuzzing"). `NICMSG_FUZZ_TRACE=1` prints what
//! an input does (to read a crash), `NICMSG_FUZZ_STATS=1` what a corpus reaches.

#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use nicmsg_proto::{
    Claim, Completion, Config, Context, Endpoint, ExpectedFrame, HostMemory, Nanos, OpError, OpId,
    OpKind, PlacedOutcome, Rank, RegionId, Segment, SendOptions, SgList, Source, Status, Tag,
    TagMatch, UnexpectedPolicy, MEDIUM_MESSAGE_MAX, SMALL_MESSAGE_MAX,
};
use nicmsg_wire::{
    seal, Flags, Frame, FrameHeader, FrameKind, FrameView, MsgHeader, Protocol, FRAME_HEADER_LEN,
    MSG_HEADER_LEN,
};
use std::collections::VecDeque;
use std::net::SocketAddr;

const JOB: u32 = 7;
/// Actions per input.
const MAX_ACTIONS: usize = 300;
/// Frames one `poll_transmit` drain may return before it counts as never running dry.
const MAX_DRAIN: usize = 20_000;
/// Rounds of `handle_timeout` at one instant after which a deadline still due is a spin.
const MAX_TIMEOUT_ROUNDS: usize = 64;
/// Frames kept in flight between two endpoints; more are lost.
const MAX_IN_FLIGHT: usize = 2_000;
/// Frames each fake peer remembers of those sent to it.
const RECENT: usize = 32;
/// Guard bytes around buffers.
const GUARD: usize = 16;
/// Guard byte values: around receive buffers, between send segments.
const RECV_FILL: u8 = 0xA5;
const SEND_GAP: u8 = 0x5A;
/// A send buffer once its send completed (the host may reuse it).
const POISON: u8 = 0xDB;

/// `NICMSG_FUZZ_TRACE=1` prints what an input does (to read a crash).
fn tracing() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("NICMSG_FUZZ_TRACE").is_some())
}

macro_rules! trace {
    ($($arg:tt)*) => {
        if tracing() {
            eprintln!($($arg)*);
        }
    };
}

/// `NICMSG_FUZZ_STATS=1` counts what the inputs reached, printed after each input (to see
/// how deep a corpus goes: `-runs=0` over it, and read the last line).
fn counting() -> bool {
    static STATS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STATS.get_or_init(|| std::env::var_os("NICMSG_FUZZ_STATS").is_some())
}

thread_local! {
    static COUNTS: std::cell::RefCell<std::collections::BTreeMap<String, u64>> =
        Default::default();
}

fn tally(what: impl FnOnce() -> String) {
    if counting() {
        COUNTS.with(|c| *c.borrow_mut().entry(what()).or_default() += 1);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(Some(mut world)) = World::new(&mut u) {
        world.run(&mut u);
        world.finish();
        if counting() {
            for (i, n) in world.nodes.iter().enumerate() {
                let d = n.ep.stats().drops;
                tally(|| format!("mode {:?} pair {}", world.mode as u8, world.pair()));
                let _ = i;
                for (name, v) in [
                    ("malformed", d.malformed),
                    ("bad_checksum", d.bad_checksum),
                    ("wrong_job", d.wrong_job),
                    ("wrong_rank", d.wrong_rank),
                    ("duplicate", d.duplicate),
                    ("no_posted_receive", d.no_posted_receive),
                    ("invalid", d.invalid),
                    ("dead_peer", d.dead_peer),
                    ("unsupported", d.unsupported),
                    ("peer_table_full", d.peer_table_full),
                ] {
                    for _ in 0..v {
                        tally(|| format!("drop {name}"));
                    }
                }
                for _ in 0..n.ep.stats().frames_received {
                    tally(|| "frames received".into());
                }
            }
            COUNTS.with(|c| eprintln!("stats: {:?}", c.borrow()));
        }
    }
});

// ---------------------------------------------------------------------------------------------
// Host memory

struct Mem(Vec<Vec<u8>>);

impl HostMemory for Mem {
    fn region(&self, id: RegionId) -> Option<&[u8]> {
        self.0.get(id.0 as usize).map(|r| r.as_slice())
    }
    fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        self.0.get_mut(id.0 as usize).map(|r| r.as_mut_slice())
    }
}

impl Mem {
    fn push(&mut self, bytes: Vec<u8>) -> RegionId {
        self.0.push(bytes);
        RegionId(self.0.len() as u32 - 1)
    }
}

/// Byte `i` of the message with serial `serial`.
fn pattern(serial: u64, i: usize) -> u8 {
    let mut x = serial
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((i as u64 / 8).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 29;
    (x >> ((i % 8) * 8)) as u8
}

// ---------------------------------------------------------------------------------------------
// Operations and their records

#[derive(Clone)]
enum OpDetail {
    Send {
        serial: u64,
        dst: Rank,
        tag: Tag,
        len: u64,
        region: RegionId,
        data: SgList,
    },
    Recv {
        /// `None` for a receive of a claim.
        criteria: Option<(Source, Context, TagMatch)>,
        /// When the message it gets was taken, and by what criteria: its own post, or its
        /// claim's (`None` for a claim made up).
        order: Option<Order>,
        context: Option<Context>,
        region: RegionId,
        buffer: SgList,
    },
    Probe {
        criteria: (Source, Context, TagMatch),
    },
}

struct OpRec {
    id: OpId,
    detail: OpDetail,
    done: bool,
    cancel_requested: bool,
    /// Receive: the buffer's region as it was when the receive completed.
    snapshot: Option<Vec<u8>>,
}

/// A message some endpoint of the world sent, for the two-endpoint oracle.
struct SentMsg {
    from: usize,
    /// The receiving endpoint (`None`: to a fake peer).
    to: Option<usize>,
    context: Context,
    tag: Tag,
    len: usize,
    immediate: Option<u32>,
    serial: u64,
    /// Its bytes reached a receive.
    received: bool,
    /// Taken by a receive or claim (ordering oracle): when, and with which criteria.
    consumer: Option<Order>,
    /// A cancel of its send was accepted: it may have been withdrawn.
    withdrawn: bool,
    cancelled: bool,
}

/// What a receive or probe accepts.
type Criteria = (Source, Context, TagMatch);
/// When (the world's post sequence) a receive or claim took its message, and its criteria.
type Order = (u64, Criteria);

// ---------------------------------------------------------------------------------------------
// Peers played by the fuzzer

/// Who a fake peer is: a rank of the job, or an address with its name for the conversation.
#[derive(Clone, Copy)]
enum Identity {
    Rank(Rank),
    Address { address: SocketAddr, name: u32 },
}

/// A message a fake peer sends (or that the endpoint it plays sent, for a shadow).
#[derive(Clone, Copy)]
struct FakeMsg {
    id: u32,
    msg: MsgHeader,
    serial: u64,
}

/// A peer of one endpoint (`target`) played by the fuzzer, or a shadow of the other endpoint
/// (frames in its name are injections into their conversation).
struct Fake {
    target: usize,
    identity: Identity,
    /// Plays the other real endpoint: its frames taint the conversation.
    shadow: bool,
    /// Open mode: the target's name for the conversation, as its frames say.
    their_name: u32,
    next_id: u32,
    msgs: VecDeque<FakeMsg>,
    /// Frames the target sent to this peer, newest last.
    recent: VecDeque<(FrameHeader, Option<MsgHeader>)>,
    /// Eager messages of the target seen by class: credits this peer may return.
    credits: [u16; 3],
    seen_eager: VecDeque<u32>,
}

impl Fake {
    fn new(target: usize, identity: Identity, shadow: bool) -> Self {
        Self {
            target,
            identity,
            shadow,
            their_name: 0,
            next_id: 0,
            msgs: VecDeque::new(),
            recent: VecDeque::new(),
            credits: [0; 3],
            seen_eager: VecDeque::new(),
        }
    }

    fn address(&self) -> Option<SocketAddr> {
        match self.identity {
            Identity::Rank(_) => None,
            Identity::Address { address, .. } => Some(address),
        }
    }

    fn credits_aux(&self) -> u32 {
        u32::from(self.credits[0] & 0x3FF)
            | u32::from(self.credits[1] & 0x3FF) << 10
            | u32::from(self.credits[2] & 0x3FF) << 20
    }

    /// A frame the target sent to this peer.
    fn heard(&mut self, header: FrameHeader, msg: Option<MsgHeader>) {
        if let Identity::Address { .. } = self.identity {
            if header.src != 0 {
                self.their_name = header.src;
            }
        }
        if header.kind == FrameKind::Eager && header.frame_index == 0 {
            if let Some(m) = msg {
                if !self.seen_eager.contains(&header.msg_id) {
                    if self.seen_eager.len() == 64 {
                        self.seen_eager.pop_front();
                    }
                    self.seen_eager.push_back(header.msg_id);
                    let class = if m.total_len <= SMALL_MESSAGE_MAX {
                        1
                    } else if m.total_len <= MEDIUM_MESSAGE_MAX {
                        2
                    } else {
                        0
                    };
                    self.credits[class] = self.credits[class].wrapping_add(1) & 0x3FF;
                }
            }
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((header, msg));
    }

    /// A frame the endpoint this shadow plays sent to the target (a message it started).
    fn saw_sent(&mut self, header: &FrameHeader, msg: Option<&MsgHeader>) {
        if let Identity::Address { .. } = self.identity {
            // The played endpoint's name for the conversation, as its frames say.
            if let Identity::Address { address, .. } = self.identity {
                self.identity = Identity::Address {
                    address,
                    name: header.src,
                };
            }
            if header.dst != 0 {
                self.their_name = header.dst;
            }
        }
        if let Some(msg) = msg {
            if header.frame_index == 0 && !self.msgs.iter().any(|m| m.id == header.msg_id) {
                self.remember(FakeMsg {
                    id: header.msg_id,
                    msg: *msg,
                    serial: 0,
                });
            }
        }
        self.next_id = self.next_id.max(header.msg_id.wrapping_add(1));
    }

    fn remember(&mut self, m: FakeMsg) {
        if self.msgs.len() == 16 {
            self.msgs.pop_front();
        }
        self.msgs.push_back(m);
    }
}

// ---------------------------------------------------------------------------------------------
// Endpoints

struct Node {
    ep: Endpoint,
    mem: Mem,
    /// Its rank (0 in open mode).
    rank: Rank,
    address: SocketAddr,
    ops: Vec<OpRec>,
    claims: Vec<(Claim, Option<Order>)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Job,
    Open,
}

struct Packet {
    to: usize,
    from: SocketAddr,
    bytes: Vec<u8>,
}

struct World {
    config: Config,
    mode: Mode,
    size: u32,
    nodes: Vec<Node>,
    fakes: Vec<Fake>,
    net: VecDeque<Packet>,
    now: Nanos,
    /// Messages sent by the endpoints.
    sent: Vec<SentMsg>,
    serial: u64,
    /// Some frame of the two endpoints' conversation was rewritten or injected: the data oracle
    /// no longer holds.
    tainted: bool,
    /// Counts posts and claims: the order in which receives took messages.
    seq: u64,
}

fn addr(n: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, n], 7000 + u16::from(n)))
}

fn pick<T: Copy>(u: &mut Unstructured, items: &[T]) -> Result<T> {
    u.choose(items).copied()
}

impl World {
    fn new(u: &mut Unstructured) -> Result<Option<Self>> {
        let config = read_config(u)?;
        if config.validate().is_err() {
            return Ok(None);
        }
        trace!("{config:?}");
        let scenario = u.int_in_range(0u8..=3)?;
        let mode = if scenario & 1 == 0 {
            Mode::Job
        } else {
            Mode::Open
        };
        let pair = scenario & 2 != 0;
        let mut nodes = Vec::new();
        let mut fakes = Vec::new();
        let size;
        match (mode, pair) {
            (Mode::Job, false) => {
                size = u.int_in_range(2u32..=4)?;
                let rank = u.int_in_range(0..=size - 1)?;
                nodes.push(Node::job(&config, rank, size));
                for r in (0..size).filter(|&r| r != rank) {
                    fakes.push(Fake::new(0, Identity::Rank(r), false));
                }
            }
            (Mode::Job, true) => {
                size = u.int_in_range(2u32..=3)?;
                nodes.push(Node::job(&config, 0, size));
                nodes.push(Node::job(&config, 1, size));
                for target in 0..2 {
                    fakes.push(Fake::new(target, Identity::Rank(1 - target as u32), true));
                    if size == 3 {
                        fakes.push(Fake::new(target, Identity::Rank(2), false));
                    }
                }
            }
            (Mode::Open, false) => {
                let capacity = u.int_in_range(1u32..=3)?;
                size = capacity + 1;
                let incarnation = u.arbitrary::<u32>()? | 1;
                nodes.push(Node::open(&config, incarnation, capacity, addr(1)));
                for f in 0..u.int_in_range(1u8..=3)? {
                    let name = u.arbitrary::<u32>()? | 1;
                    let address = addr(10 + f);
                    fakes.push(Fake::new(0, Identity::Address { address, name }, false));
                }
            }
            (Mode::Open, true) => {
                let capacity = u.int_in_range(1u32..=2)?;
                size = capacity + 1;
                let a = u.arbitrary::<u32>()? | 1;
                let b = u.arbitrary::<u32>()? | 1;
                nodes.push(Node::open(&config, a, capacity, addr(1)));
                nodes.push(Node::open(&config, b, capacity, addr(2)));
                for target in 0..2 {
                    let other = addr(2 - target as u8);
                    let shadow = Identity::Address {
                        address: other,
                        name: 0,
                    };
                    fakes.push(Fake::new(target, shadow, true));
                    let name = u.arbitrary::<u32>()? | 1;
                    let stranger = Identity::Address {
                        address: addr(10),
                        name,
                    };
                    fakes.push(Fake::new(target, stranger, false));
                }
            }
        }
        let mut world = Self {
            config,
            mode,
            size,
            nodes,
            fakes,
            net: VecDeque::new(),
            now: 0,
            sent: Vec::new(),
            serial: 1,
            tainted: false,
            seq: 0,
        };
        // Lent send copies, sometimes (eager sends then complete as they start).
        for node in &mut world.nodes {
            if u.ratio(1u8, 4u8)? {
                let pieces = u.int_in_range(1u32..=4)?;
                let piece_len = world.config.eager_limit.max(1);
                let region = node
                    .mem
                    .push(vec![0; (piece_len * u64::from(pieces)) as usize]);
                node.ep.lend_send_copies(region, piece_len, pieces);
            }
        }
        Ok(Some(world))
    }
}

fn read_config(u: &mut Unstructured) -> Result<Config> {
    let mut c = Config {
        mtu: pick(u, &[1472, 200, 600, 9000, 121])?,
        eager_limit: pick(u, &[8192, 2048, 512, 300, 64, 0])?,
        eager_credits_per_peer: u.int_in_range(1..=4)?,
        small_credits_per_peer: u.int_in_range(1..=4)?,
        medium_credits_per_peer: u.int_in_range(1..=4)?,
        credit_wait_ns: pick(u, &[0, 50_000, 2_000_000])?,
        cts_window_frames: pick(u, &[256, 1, 2, 4, 16, 64])?,
        presumed_grant_bytes: pick(u, &[0, 4096, 256 << 10, 1000])?,
        grant_budget_bytes: pick(u, &[2 << 20, 0, 4096, 20_000])?,
        ack_unit: u.int_in_range(1..=8)?,
        unexpected: if u.ratio(1u8, 3u8)? {
            UnexpectedPolicy::Drop
        } else {
            UnexpectedPolicy::Buffer
        },
        adaptive_frames: u.arbitrary()?,
        rto_initial_ns: 1_000_000,
        rto_min_ns: 200_000,
        rto_max_ns: 20_000_000,
        max_retries: pick(u, &[12, 1, 3])?,
        keepalive_ns: 20_000_000,
        peer_timeout_ns: pick(u, &[100_000_000, 20_000_000])?,
        max_sends: u.int_in_range(2..=10)?,
        max_early_sends: 1,
        max_recvs: u.int_in_range(1..=10)?,
        max_incoming: u.int_in_range(1..=10)?,
        ack_delay_ns: pick(u, &[20_000, 0])?,
        max_control_queue: pick(u, &[64, 1, 4, 1024])?,
        link_checks_payload: u.arbitrary()?,
        ..Config::default()
    };
    c.max_early_sends = u.int_in_range(1..=c.max_sends - 1)?;
    c.rsm_pre_frames = u.int_in_range(0..=c.cts_window_frames - 1)?;
    Ok(c)
}

impl Node {
    fn job(config: &Config, rank: Rank, size: u32) -> Self {
        Self {
            ep: Endpoint::new(config.clone(), JOB, rank, size).expect("valid job"),
            mem: Mem(Vec::new()),
            rank,
            address: addr(1 + rank as u8),
            ops: Vec::new(),
            claims: Vec::new(),
        }
    }

    fn open(config: &Config, incarnation: u32, capacity: u32, address: SocketAddr) -> Self {
        let mut ep =
            Endpoint::new_open(config.clone(), JOB, incarnation, capacity).expect("valid open");
        ep.set_own_address(address);
        Self {
            ep,
            mem: Mem(Vec::new()),
            rank: 0,
            address,
            ops: Vec::new(),
            claims: Vec::new(),
        }
    }

    fn op(&mut self, id: OpId) -> Option<&mut OpRec> {
        self.ops.iter_mut().find(|r| r.id == id)
    }

    /// Records an operation `what` (the call) just posted; its handle must name no other.
    fn track(&mut self, id: OpId, detail: OpDetail, what: &str) {
        assert!(self.op(id).is_none(), "{what} reused a live handle: {id:?}");
        self.ops.push(OpRec {
            id,
            detail,
            done: false,
            cancel_requested: false,
            snapshot: None,
        });
    }
}

/// Splits `len` bytes into up to `pieces` segments of `region`, starting at `GUARD`, with
/// `GUARD` bytes between them; returns the segments and the region's length.
fn scatter(u: &mut Unstructured, len: u64, region: RegionId) -> Result<(Vec<Segment>, usize)> {
    let pieces = if len >= 2 && u.ratio(1u8, 4u8)? {
        u.int_in_range(2u64..=len.min(4))?
    } else {
        1
    };
    let mut cuts = Vec::new();
    for _ in 1..pieces {
        cuts.push(u.int_in_range(1..=len - 1)?);
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut segments = Vec::new();
    let mut start = 0;
    let mut at = GUARD as u64;
    for end in cuts.into_iter().chain([len]) {
        segments.push(Segment {
            region,
            offset: at,
            len: end - start,
        });
        at += end - start + GUARD as u64;
        start = end;
    }
    Ok((segments, at as usize))
}

// ---------------------------------------------------------------------------------------------
// The script

impl World {
    fn run(&mut self, u: &mut Unstructured) {
        for _ in 0..MAX_ACTIONS {
            if u.is_empty() {
                break;
            }
            if self.action(u).is_err() {
                break;
            }
            self.settle_outputs();
            self.check();
        }
    }

    fn pair(&self) -> bool {
        self.nodes.len() == 2
    }

    fn action(&mut self, u: &mut Unstructured) -> Result<()> {
        let node = u.int_in_range(0..=self.nodes.len() - 1)?;
        let action = u.int_in_range(0u8..=99)?;
        trace!("t={} endpoint {node} action {action}", self.now);
        match action {
            0..=11 => self.post_send(u, node),
            12..=21 => self.post_recv(u, node),
            22..=23 => self.post_probe(u, node),
            24..=25 => self.iprobe(u, node),
            26..=28 => self.claim(u, node),
            29..=30 => self.take_claim(u, node),
            31..=35 => self.cancel(u, node),
            36..=45 => self.advance(u),
            46..=69 => self.inject(u, node),
            70..=89 if self.pair() => self.network(u),
            70..=89 => self.inject(u, node),
            90..=91 => {
                let peer = u.int_in_range(0..=self.size)?;
                let now = self.now;
                let n = &mut self.nodes[node];
                trace!("  refused by {peer}");
                n.ep.handle_refused(now, peer, &mut n.mem);
                Ok(())
            }
            92..=93 => {
                let len = u.int_in_range(0usize..=200)?;
                let bytes = u.bytes(len)?.to_vec();
                self.deliver_bytes(node, None, &bytes, false);
                Ok(())
            }
            94..=95 => self.rename(u),
            _ => {
                self.deliver_all(u)?;
                Ok(())
            }
        }
    }

    // --- host commands ---

    fn destination(&mut self, u: &mut Unstructured, node: usize) -> Result<Rank> {
        if self.mode == Mode::Job {
            return u.int_in_range(0..=self.size);
        }
        let choice = u.int_in_range(0u8..=9)?;
        let address = match choice {
            0..=5 if self.pair() => self.nodes[1 - node].address,
            0..=6 => {
                let fakes: Vec<SocketAddr> = self
                    .fakes
                    .iter()
                    .filter(|f| f.target == node && !f.shadow)
                    .filter_map(Fake::address)
                    .collect();
                if fakes.is_empty() {
                    return u.int_in_range(0..=self.size);
                }
                pick(u, &fakes)?
            }
            7 => self.nodes[node].address,
            _ => return u.int_in_range(0..=self.size),
        };
        let now = self.now;
        Ok(self.nodes[node]
            .ep
            .peer_for_address(now, address)
            .unwrap_or(self.size))
    }

    fn message_len(&self, u: &mut Unstructured) -> Result<u64> {
        let c = &self.config;
        let fp = u64::from(c.frame_payload());
        let base = pick(
            u,
            &[
                0,
                1,
                8,
                SMALL_MESSAGE_MAX,
                SMALL_MESSAGE_MAX + 1,
                MEDIUM_MESSAGE_MAX,
                MEDIUM_MESSAGE_MAX + 1,
                c.eager_limit,
                c.eager_limit + 1,
                fp - MSG_HEADER_LEN as u64,
                fp,
                2 * fp,
                c.presumed_grant_bytes,
                1000,
                20_000,
            ],
        )?;
        let delta = u.int_in_range(0u8..=4)?;
        let len = match delta {
            0 => base.saturating_sub(1),
            1 => base + 1,
            4 => u.int_in_range(0..=70_000)?,
            _ => base,
        };
        Ok(len.min(70_000))
    }

    fn post_send(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let dst = self.destination(u, node)?;
        let len = self.message_len(u)?;
        let context = Context(pick(u, &[0, 0, 0, 1, 5])?);
        let tag = pick(u, &[0, 1, 2, 1 << 40, u64::MAX])?;
        let options = SendOptions {
            immediate: if u.ratio(1u8, 4u8)? {
                Some(u.arbitrary()?)
            } else {
                None
            },
            confirmed: u.ratio(1u8, 5u8)?,
            unwaited: u.ratio(1u8, 5u8)?,
        };
        let serial = self.serial;
        self.serial += 1;
        let n = &mut self.nodes[node];
        let region = RegionId(n.mem.0.len() as u32);
        let (segments, region_len) = scatter(u, len, region)?;
        let mut bytes = vec![SEND_GAP; region_len];
        let mut at = 0usize;
        for s in &segments {
            for i in 0..s.len as usize {
                bytes[s.offset as usize + i] = pattern(serial, at + i);
            }
            at += s.len as usize;
        }
        n.mem.push(bytes);
        let data = SgList::new(&segments).expect("at most 4 segments");
        let now = self.now;
        let posted = if options == SendOptions::default() && u.arbitrary()? {
            n.ep.post_send(now, dst, context, tag, &data, &mut n.mem)
        } else {
            n.ep.post_send_with(now, dst, (context, tag), options, &data, &mut n.mem)
        };
        trace!("  send {len} bytes to {dst} ({context:?}, tag {tag}, {options:?}): {posted:?}");
        let Ok(id) = posted else {
            return Ok(());
        };
        let detail = OpDetail::Send {
            serial,
            dst,
            tag,
            len,
            region,
            data,
        };
        n.track(id, detail, "post_send");
        let to = self.node_of_peer(node, dst);
        self.sent.push(SentMsg {
            from: node,
            to,
            context,
            tag,
            len: len as usize,
            immediate: options.immediate,
            serial,
            received: false,
            consumer: None,
            withdrawn: false,
            cancelled: false,
        });
        Ok(())
    }

    /// The endpoint that `peer` of endpoint `node` is, if it is one of the world's.
    fn node_of_peer(&self, node: usize, peer: Rank) -> Option<usize> {
        match self.mode {
            Mode::Job => self.nodes.iter().position(|n| n.rank == peer),
            Mode::Open => {
                if peer == 0 {
                    return Some(node);
                }
                let address = self.nodes[node].ep.peer_address(peer)?;
                self.nodes.iter().position(|n| n.address == address)
            }
        }
    }

    fn criteria(&mut self, u: &mut Unstructured) -> Result<(Source, Context, TagMatch)> {
        let source = if u.ratio(1u8, 2u8)? {
            Source::Any
        } else {
            Source::Rank(u.int_in_range(0..=self.size)?)
        };
        let context = Context(pick(u, &[0, 0, 0, 1, 5])?);
        let tag = match u.int_in_range(0u8..=4)? {
            0 | 1 => TagMatch::Tag(pick(u, &[0, 1, 2, 1 << 40, u64::MAX])?),
            2 => TagMatch::Any,
            _ => TagMatch::Masked {
                tag: pick(u, &[0, 1, 2, 1 << 40])?,
                ignore: pick(u, &[1, 3, 0xFFFF, u64::MAX >> 1])?,
            },
        };
        Ok((source, context, tag))
    }

    /// A receive buffer of about `len` bytes in a fresh region of `node`.
    fn recv_buffer(&mut self, u: &mut Unstructured, node: usize) -> Result<(RegionId, SgList)> {
        let len = if u.ratio(1u8, 3u8)? {
            70_000
        } else {
            self.message_len(u)?
        };
        let n = &mut self.nodes[node];
        let region = RegionId(n.mem.0.len() as u32);
        let (segments, region_len) = scatter(u, len, region)?;
        n.mem.push(vec![RECV_FILL; region_len]);
        Ok((region, SgList::new(&segments).expect("at most 4 segments")))
    }

    fn post_recv(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let criteria = self.criteria(u)?;
        let (region, buffer) = self.recv_buffer(u, node)?;
        let now = self.now;
        let n = &mut self.nodes[node];
        let (source, context, tag) = criteria;
        let posted =
            n.ep.post_recv(now, source, context, tag, &buffer, &mut n.mem);
        trace!(
            "  recv {} bytes {criteria:?}: {posted:?}",
            buffer.total_len()
        );
        self.seq += 1;
        if let Ok(id) = posted {
            let detail = OpDetail::Recv {
                criteria: Some(criteria),
                order: Some((self.seq, criteria)),
                context: Some(context),
                region,
                buffer,
            };
            n.track(id, detail, "post_recv");
        }
        Ok(())
    }

    fn post_probe(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let criteria = self.criteria(u)?;
        let now = self.now;
        let n = &mut self.nodes[node];
        let (source, context, tag) = criteria;
        let posted = n.ep.post_probe(now, source, context, tag);
        trace!("  probe {criteria:?}: {posted:?}");
        if let Ok(id) = posted {
            n.track(id, OpDetail::Probe { criteria }, "post_probe");
        }
        Ok(())
    }

    fn iprobe(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let (source, context, tag) = self.criteria(u)?;
        if let Some(status) = self.nodes[node].ep.iprobe(source, context, tag) {
            self.check_match(node, &status, (source, context, tag), "iprobe");
        }
        Ok(())
    }

    fn claim(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let (source, context, tag) = self.criteria(u)?;
        let seen = self.nodes[node].ep.iprobe(source, context, tag);
        let claimed = self.nodes[node].ep.claim(source, context, tag);
        assert_eq!(
            seen,
            claimed.map(|(s, _)| s),
            "a claim takes the message iprobe sees"
        );
        trace!("  claim {:?}: {claimed:?}", (source, context, tag));
        self.seq += 1;
        if let Some((status, claim)) = claimed {
            let criteria = (source, context, tag);
            self.check_match(node, &status, criteria, "claim");
            let order = (self.seq, criteria);
            self.nodes[node].claims.push((claim, Some(order)));
            if self.pair() && !self.tainted {
                self.consume(node, &status, order);
            }
        }
        Ok(())
    }

    fn take_claim(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let (claim, order) = if self.nodes[node].claims.is_empty() || u.ratio(1u8, 8u8)? {
            (Claim::from_bits(u.arbitrary()?), None)
        } else {
            let claims = self.nodes[node].claims.clone();
            pick(u, &claims)?
        };
        let discard = u.ratio(1u8, 4u8)?;
        let now = self.now;
        if discard {
            let n = &mut self.nodes[node];
            let discarded = n.ep.discard_claimed(now, claim, &mut n.mem);
            trace!("  discard {claim:?}: {discarded:?}");
            return Ok(());
        }
        let (region, buffer) = self.recv_buffer(u, node)?;
        let n = &mut self.nodes[node];
        let posted = n.ep.post_recv_claimed(now, claim, &buffer, &mut n.mem);
        trace!(
            "  recv {} bytes of {claim:?}: {posted:?}",
            buffer.total_len()
        );
        if let Ok(id) = posted {
            let detail = OpDetail::Recv {
                criteria: None,
                order,
                context: None,
                region,
                buffer,
            };
            n.track(id, detail, "post_recv_claimed");
        }
        Ok(())
    }

    fn cancel(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let now = self.now;
        let n = &mut self.nodes[node];
        let id = if n.ops.is_empty() || u.ratio(1u8, 10u8)? {
            OpId {
                kind: pick(u, &[OpKind::Send, OpKind::Recv, OpKind::Probe])?,
                index: u.int_in_range(0..=12)?,
                generation: u.int_in_range(0..=3)?,
            }
        } else {
            let i = u.int_in_range(0..=n.ops.len() - 1)?;
            n.ops[i].id
        };
        let outcome = n.ep.cancel(now, id);
        trace!("  cancel {id:?}: {outcome:?}");
        let known = n.op(id);
        match (outcome, known) {
            (Ok(_), Some(rec)) => {
                assert!(!rec.done, "cancel of {id:?} accepted after it completed");
                rec.cancel_requested = true;
                if let OpDetail::Send { serial, .. } = rec.detail {
                    if let Some(m) = self.sent.iter_mut().find(|m| m.serial == serial) {
                        m.withdrawn = true;
                    }
                }
            }
            (Ok(_), None) => panic!("cancel accepted for {id:?}, which was never posted"),
            (Err(_), _) => {}
        }
        Ok(())
    }

    // --- time ---

    fn advance(&mut self, u: &mut Unstructured) -> Result<()> {
        let c = &self.config;
        let next = self.nodes.iter().filter_map(|n| n.ep.poll_timeout()).min();
        let delta = match u.int_in_range(0u8..=9)? {
            0 => 0,
            1 => 1_000,
            2 => c.ack_delay_ns.max(1),
            3 => c.rto_min_ns,
            4 => c.rto_initial_ns,
            5 => c.keepalive_ns,
            6 => c.peer_timeout_ns,
            7 => u.int_in_range(0..=2 * c.peer_timeout_ns)?,
            _ => next.map_or(1_000, |t| t.saturating_sub(self.now)),
        };
        self.now += delta;
        trace!("  time +{delta} = {}", self.now);
        self.run_timers();
        Ok(())
    }

    /// `handle_timeout` on every endpoint whose deadline passed, until none has.
    fn run_timers(&mut self) {
        for i in 0..self.nodes.len() {
            let mut rounds = 0;
            while let Some(deadline) = self.nodes[i].ep.poll_timeout() {
                if deadline > self.now {
                    break;
                }
                rounds += 1;
                assert!(
                    rounds <= MAX_TIMEOUT_ROUNDS,
                    "deadline {deadline} stays due at {} after {MAX_TIMEOUT_ROUNDS} rounds of handle_timeout",
                    self.now
                );
                let now = self.now;
                let n = &mut self.nodes[i];
                n.ep.handle_timeout(now, &mut n.mem);
                self.drain(i);
            }
        }
    }

    // --- outputs ---

    /// Drains every endpoint's frames and completions.
    fn settle_outputs(&mut self) {
        for i in 0..self.nodes.len() {
            self.drain(i);
        }
    }

    fn drain(&mut self, i: usize) {
        let now = self.now;
        let mut frames = Vec::new();
        {
            let n = &mut self.nodes[i];
            let mut count = 0;
            while let Some(transmit) = n.ep.poll_transmit(now, &n.mem) {
                count += 1;
                assert!(count <= MAX_DRAIN, "poll_transmit never runs dry");
                let mut bytes = vec![0; transmit.len()];
                let len = transmit
                    .gather_into(&n.mem, &mut bytes)
                    .expect("a frame's pieces lie in host memory");
                assert_eq!(len, bytes.len());
                frames.push((transmit.dst, bytes));
            }
        }
        for (dst, bytes) in frames {
            self.route(i, dst, bytes);
        }
        let mut count = 0;
        while let Some(completion) = self.nodes[i].ep.poll_completion() {
            count += 1;
            assert!(count <= 100_000, "poll_completion never runs dry");
            self.completed(i, completion);
        }
    }

    /// A frame endpoint `i` sent to its peer `dst`.
    fn route(&mut self, i: usize, dst: Rank, bytes: Vec<u8>) {
        let frame = match Frame::parse(&bytes) {
            Ok(frame) => frame,
            Err(e) => panic!("endpoint {i} sent a frame that does not parse: {e:?}"),
        };
        let header = frame.header;
        trace!(
            "  {i} sends to {dst}: {header:?} {:?} +{}",
            frame.msg,
            frame.payload.len()
        );
        assert_eq!(header.job, JOB, "a frame names another job");
        let node = &self.nodes[i];
        let to_address = match self.mode {
            Mode::Job => {
                assert_eq!(header.src, node.rank, "a frame names another source");
                assert_eq!(header.dst, dst, "a frame names another destination");
                assert_ne!(dst, node.rank, "a frame to the endpoint itself");
                None
            }
            Mode::Open => {
                assert_ne!(dst, 0, "a frame to the endpoint itself");
                let address = node.ep.peer_address(dst);
                assert!(
                    address.is_some(),
                    "a frame to slot {dst}, bound to no address"
                );
                address
            }
        };
        // To the other endpoint?
        let to_node = match self.mode {
            Mode::Job => self.nodes.iter().position(|n| n.rank == dst),
            Mode::Open => self
                .nodes
                .iter()
                .position(|n| Some(n.address) == to_address),
        };
        if let Some(j) = to_node {
            assert_ne!(j, i);
            for f in &mut self.fakes {
                if f.target == j && f.shadow {
                    f.saw_sent(&header, frame.msg.as_ref());
                }
                if f.target == i && f.shadow {
                    f.heard(header, frame.msg);
                }
            }
            if self.net.len() >= MAX_IN_FLIGHT {
                self.net.pop_front();
            }
            let from = self.nodes[i].address;
            self.net.push_back(Packet { to: j, from, bytes });
            return;
        }
        let fake = self.fakes.iter_mut().find(|f| {
            f.target == i
                && match f.identity {
                    Identity::Rank(r) => to_address.is_none() && r == dst,
                    Identity::Address { address, .. } => Some(address) == to_address,
                }
        });
        if let Some(fake) = fake {
            fake.heard(header, frame.msg);
        }
    }

    fn completed(&mut self, i: usize, c: Completion) {
        let clean = self.pair() && !self.tainted;
        trace!("  {i} completes {:?}: {:?}", c.op, c.result);
        tally(|| {
            let result = match c.result {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("{e:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap_or("")
                    .to_string(),
            };
            format!("completed {:?} {result} clean={clean}", c.op.kind)
        });
        let Some(pos) = self.nodes[i].ops.iter().position(|r| r.id == c.op) else {
            panic!("completion of {:?}, never posted on endpoint {i}", c.op);
        };
        let rec = &self.nodes[i].ops[pos];
        assert!(!rec.done, "{:?} completed twice: {:?}", c.op, c.result);
        if c.result == Err(OpError::Cancelled) {
            assert!(
                rec.cancel_requested,
                "{:?} completed Cancelled uncancelled",
                c.op
            );
        }
        let detail = rec.detail.clone();
        match detail {
            OpDetail::Send {
                serial,
                dst,
                tag,
                len,
                region,
                data,
            } => {
                match c.result {
                    Ok(status) => {
                        assert_eq!((status.peer, status.tag, status.len), (dst, tag, len));
                    }
                    Err(OpError::PeerUnreachable { peer }) => assert_eq!(peer, dst),
                    Err(OpError::Cancelled) => {
                        if let Some(k) = self.sent.iter().position(|m| m.serial == serial) {
                            self.sent[k].cancelled = true;
                            if clean && self.sent[k].received {
                                self.reassign_received(k);
                            }
                        }
                    }
                    Err(e) => panic!("a send completed {e:?}"),
                }
                // The host may reuse the buffer now: bytes read from it later are wrong.
                let n = &mut self.nodes[i];
                let bytes = &mut n.mem.0[region.0 as usize];
                check_send_region(bytes, &data, serial, false);
                bytes.fill(POISON);
            }
            OpDetail::Recv {
                criteria,
                order,
                region,
                buffer,
                context,
            } => {
                let bytes = self.nodes[i].mem.0[region.0 as usize].clone();
                check_guards(&bytes, &buffer);
                let capacity = buffer.total_len();
                match c.result {
                    Ok(status) => {
                        assert!(status.len <= capacity, "a receive got more than its buffer");
                        check_beyond(&bytes, &buffer, status.len);
                        if let Some(criteria) = criteria {
                            self.check_match(i, &status, criteria, "receive");
                        }
                        if clean {
                            let data = read_buffer(&bytes, &buffer, status.len);
                            self.check_received(i, context, order, &status, &data);
                        }
                    }
                    Err(
                        error @ OpError::Truncated {
                            message_len,
                            buffer_len,
                            ..
                        },
                    ) => {
                        assert_eq!(buffer_len, capacity);
                        assert!(message_len > capacity, "truncated though it fit");
                        check_beyond(&bytes, &buffer, 0);
                        // A claimed message was taken by its claim already.
                        if let (true, Some(order), Some(_)) = (clean, order, criteria) {
                            let status = error.truncated_status().expect("a truncation");
                            self.consume(i, &status, order);
                        }
                    }
                    Err(OpError::Cancelled) => check_beyond(&bytes, &buffer, 0),
                    Err(OpError::PeerUnreachable { .. }) => {}
                }
                self.nodes[i].ops[pos].snapshot = Some(bytes);
            }
            OpDetail::Probe { criteria } => {
                if let Ok(status) = c.result {
                    self.check_match(i, &status, criteria, "probe");
                }
            }
        }
        self.nodes[i].ops[pos].done = true;
    }

    /// A status found for criteria: it meets them.
    fn check_match(
        &self,
        i: usize,
        status: &Status,
        (source, _context, tag): (Source, Context, TagMatch),
        what: &str,
    ) {
        assert!(
            source.matches(status.peer),
            "{what}: status from {} for source {source:?}",
            status.peer
        );
        assert!(
            tag.matches(status.tag),
            "{what}: tag {} for {tag:?}",
            status.tag
        );
        assert!(
            status.peer < self.size,
            "{what}: status names rank {}",
            status.peer
        );
        let _ = i;
    }

    /// A receive of endpoint `i` completed with `data`: exactly a message sent to it.
    fn check_received(
        &mut self,
        i: usize,
        context: Option<Context>,
        order: Option<Order>,
        status: &Status,
        data: &[u8],
    ) {
        let Some(from) = self.node_of_peer(i, status.peer) else {
            return;
        };
        let holds = |m: &SentMsg| {
            m.from == from
                && m.to == Some(i)
                && context.is_none_or(|c| c == m.context)
                && m.tag == status.tag
                && m.len as u64 == status.len
                && m.immediate == status.immediate
                && !m.received
                && (0..m.len).all(|k| data[k] == pattern(m.serial, k))
        };
        // Messages alike to the byte (empty ones) are told apart by their fate: one whose send
        // completed Cancelled is the last candidate.
        let found = (self.sent.iter().position(|m| holds(m) && !m.cancelled))
            .or_else(|| self.sent.iter().position(holds))
            .map(|k| &mut self.sent[k]);
        let Some(m) = found else {
            panic!(
                "endpoint {i} received {} bytes (tag {}, from {}) that no unreceived message holds",
                status.len, status.tag, status.peer
            );
        };
        m.received = true;
        if m.consumer.is_none() {
            m.consumer = order;
        }
        tally(|| {
            format!(
                "verified receive of {} bytes",
                if m.len > 8192 { "many" } else { "few" }
            )
        });
        assert!(
            !m.cancelled,
            "message {} received after its send completed Cancelled",
            m.serial
        );
    }

    /// Message `k` was withdrawn, but a receive got bytes taken for its: they were another
    /// message's, alike to the byte (short ones may be), not received yet; else the withdrawn
    /// message was delivered.
    fn reassign_received(&mut self, k: usize) {
        let m = &self.sent[k];
        let alike = |o: &SentMsg| {
            o.serial != m.serial
                && !o.received
                && !o.cancelled
                && (o.from, o.to, o.context, o.tag, o.len, o.immediate)
                    == (m.from, m.to, m.context, m.tag, m.len, m.immediate)
                && (0..m.len).all(|b| pattern(o.serial, b) == pattern(m.serial, b))
        };
        let Some(other) = self.sent.iter().position(alike) else {
            panic!(
                "send {} completed Cancelled, but its message was received",
                m.serial
            );
        };
        self.sent[other].received = true;
        self.sent[k].received = false;
        if self.sent[other].consumer.is_none() {
            self.sent[other].consumer = self.sent[k].consumer.take();
        }
    }

    /// A receive or claim of endpoint `i` took the message `status` describes (bytes unseen):
    /// the earliest such message not taken yet.
    fn consume(&mut self, i: usize, status: &Status, order: Order) {
        let Some(from) = self.node_of_peer(i, status.peer) else {
            return;
        };
        let context = order.1 .1;
        let alike = |m: &SentMsg| {
            m.from == from
                && m.to == Some(i)
                && m.context == context
                && m.tag == status.tag
                && m.len as u64 == status.len
                && m.immediate == status.immediate
                && m.consumer.is_none()
        };
        let found = (self.sent.iter().position(|m| alike(m) && !m.cancelled))
            .or_else(|| self.sent.iter().position(alike))
            .map(|k| &mut self.sent[k]);
        match found {
            Some(m) => m.consumer = Some(order),
            None => panic!(
                "endpoint {i} took a message ({status:?}) that no message not taken yet matches"
            ),
        }
    }

    /// MPI's non-overtaking rule, between two endpoints that never gave up on each other: a
    /// receive (or claim) that took a message and would have taken an earlier one of the same
    /// sender in the same context found that one taken already, by a receive posted earlier.
    fn check_order(&self) {
        if !self.pair() || self.tainted {
            return;
        }
        let gave_up = self.nodes.iter().any(|n| {
            let s = n.ep.stats();
            s.peers_declared_unreachable > 0 || s.peers_restarted > 0
        });
        if gave_up {
            return;
        }
        // Messages alike in all a receive reports besides their bytes (empty ones, or taken
        // by truncated receives or claims, which show none) cannot be told apart: which
        // receive took which is a guess, right only when the receives completed in the order
        // they took them. Only messages with no such twin are checked.
        let key = |m: &SentMsg| (m.from, m.to, m.context, m.tag, m.len, m.immediate);
        let pinned: Vec<bool> = self
            .sent
            .iter()
            .map(|m| self.sent.iter().filter(|o| key(o) == key(m)).count() == 1)
            .collect();
        for (k, later) in self.sent.iter().enumerate() {
            let Some((seq, (_, _, tag))) = later.consumer else {
                continue;
            };
            if !pinned[k] {
                continue;
            }
            for (e, earlier) in self.sent[..k].iter().enumerate() {
                let same_stream = earlier.from == later.from
                    && earlier.to == later.to
                    && earlier.context == later.context;
                if !same_stream || !pinned[e] || earlier.withdrawn || !tag.matches(earlier.tag) {
                    continue;
                }
                // Taken by an earlier receive that has not completed yet (a rendezvous
                // message still arriving) counts too: which message it holds is unseen.
                let taken_before = earlier.consumer.is_some_and(|(s, _)| s < seq)
                    || self.pending_receive_for(earlier, seq);
                assert!(
                    taken_before,
                    "message {} overtook message {} of the same sender: taken by post {seq}, the earlier one by {:?}",
                    later.serial,
                    earlier.serial,
                    earlier.consumer.map(|c| c.0)
                );
            }
        }
    }

    /// True if a receive posted before `seq` that has not completed may hold `m`.
    fn pending_receive_for(&self, m: &SentMsg, seq: u64) -> bool {
        let Some(to) = m.to else {
            return false;
        };
        self.nodes[to].ops.iter().any(|rec| match rec.detail {
            OpDetail::Recv {
                order: Some((s, (source, context, tag))),
                criteria: Some(_),
                ..
            } => {
                let from_sender = match source {
                    Source::Any => true,
                    Source::Rank(r) => self.node_of_peer(to, r) == Some(m.from),
                };
                !rec.done && s < seq && context == m.context && tag.matches(m.tag) && from_sender
            }
            _ => false,
        })
    }

    // --- the network between two endpoints ---

    fn network(&mut self, u: &mut Unstructured) -> Result<()> {
        if self.net.is_empty() {
            return self.advance(u);
        }
        let pos = if u.ratio(3u8, 4u8)? {
            0
        } else {
            u.int_in_range(0..=self.net.len() - 1)?
        };
        match u.int_in_range(0u8..=9)? {
            0..=5 => {
                let p = self.net.remove(pos).expect("in range");
                let place = u.ratio(1u8, 3u8)?;
                self.deliver_bytes(p.to, Some(p.from), &p.bytes, place);
            }
            6 => {
                self.net.remove(pos);
            }
            7 => {
                let p = &self.net[pos];
                let copy = Packet {
                    to: p.to,
                    from: p.from,
                    bytes: p.bytes.clone(),
                };
                self.net.push_back(copy);
            }
            8 => {
                // Rewritten in flight, the checksum sealed again (or not). What still parses
                // is a frame the sender never sent (a corrupt one is dropped unread, but for
                // a payload the link was trusted to check).
                let mut p = self.net.remove(pos).expect("in range");
                let original = p.bytes.clone();
                mutate_bytes(u, &mut p.bytes)?;
                self.tainted |= p.bytes != original && Frame::parse(&p.bytes).is_ok();
                self.deliver_bytes(p.to, Some(p.from), &p.bytes, false);
            }
            _ => {
                // Delayed: to the back.
                let p = self.net.remove(pos).expect("in range");
                self.net.push_back(p);
            }
        }
        Ok(())
    }

    /// Delivers every frame in flight, in order, and what they provoke, a few rounds.
    fn deliver_all(&mut self, u: &mut Unstructured) -> Result<()> {
        let place = u.ratio(1u8, 2u8)?;
        for _ in 0..16 {
            if self.net.is_empty() {
                break;
            }
            let batch: Vec<Packet> = self.net.drain(..).collect();
            for p in batch {
                self.deliver_bytes(p.to, Some(p.from), &p.bytes, place);
            }
            self.settle_outputs();
        }
        Ok(())
    }

    /// Hands a datagram to endpoint `to`, from `from` (the ordinary path, or through a
    /// predicted placement as the engine's transport does when `place`).
    fn deliver_bytes(&mut self, to: usize, from: Option<SocketAddr>, bytes: &[u8], place: bool) {
        let now = self.now;
        if tracing() {
            match Frame::parse(bytes) {
                Ok(f) => trace!(
                    "  -> {to} from {from:?} place={place}: {:?} {:?} +{}",
                    f.header,
                    f.msg,
                    f.payload.len()
                ),
                Err(e) => trace!("  -> {to} from {from:?}: {} bytes, {e:?}", bytes.len()),
            }
        }
        let n = &mut self.nodes[to];
        if place {
            let mut expected = [ExpectedFrame::default(); 16];
            if let Some(guess) = n.ep.predicted_place(bytes, from, &mut expected) {
                if bytes.len() >= guess.header_len() {
                    let (header, payload) = bytes.split_at(guess.header_len());
                    let start = guess.segment.offset as usize;
                    let region = n
                        .mem
                        .region_mut(guess.segment.region)
                        .expect("a predicted segment lies in host memory");
                    let len = payload.len().min(guess.segment.len as usize);
                    // What lay there: put back if the frame is not taken, so that whatever a
                    // buffer holds afterwards was written by the core.
                    let before = region[start..start + len].to_vec();
                    region[start..start + len].copy_from_slice(&payload[..len]);
                    let outcome = match from {
                        Some(from) if self.mode == Mode::Open => n.ep.handle_placed_frame_from(
                            now,
                            from,
                            header,
                            bytes.len(),
                            &guess,
                            &mut n.mem,
                        ),
                        _ => {
                            n.ep.handle_placed_frame(now, header, bytes.len(), &guess, &mut n.mem)
                        }
                    };
                    tally(|| format!("placed {outcome:?}"));
                    if outcome == PlacedOutcome::Taken {
                        return;
                    }
                    let region = n
                        .mem
                        .region_mut(guess.segment.region)
                        .expect("a predicted segment lies in host memory");
                    region[start..start + len].copy_from_slice(&before);
                }
            }
        }
        match from {
            Some(from) => n.ep.handle_frame_from(now, from, bytes, &mut n.mem),
            None => n.ep.handle_frame(now, bytes, &mut n.mem),
        }
    }

    // --- frames from peers played by the fuzzer ---

    fn rename(&mut self, u: &mut Unstructured) -> Result<()> {
        // A fake peer restarts: a new name for its conversations, messages from id 0.
        if self.fakes.is_empty() {
            return Ok(());
        }
        let f = u.int_in_range(0..=self.fakes.len() - 1)?;
        let fake = &mut self.fakes[f];
        if fake.shadow {
            return Ok(());
        }
        if let Identity::Address { address, .. } = fake.identity {
            let name = u.arbitrary::<u32>()? | 1;
            fake.identity = Identity::Address { address, name };
            fake.their_name = 0;
        }
        fake.next_id = 0;
        fake.msgs.clear();
        fake.recent.clear();
        Ok(())
    }

    fn inject(&mut self, u: &mut Unstructured, node: usize) -> Result<()> {
        let candidates: Vec<usize> = (0..self.fakes.len())
            .filter(|&f| self.fakes[f].target == node)
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let f = pick(u, &candidates)?;
        let serial = self.serial;
        self.serial += 1;
        let mut frame = build_frame(u, &self.config, &mut self.fakes[f], serial)?;
        let (src, dst) = match self.fakes[f].identity {
            Identity::Rank(r) => (r, self.nodes[node].rank),
            Identity::Address { name, .. } => (name, self.fakes[f].their_name),
        };
        frame.header.src = src;
        frame.header.dst = dst;
        let mut bytes = frame.encode();
        if u.ratio(1u8, 3u8)? {
            mutate_bytes(u, &mut bytes)?;
        }
        // A frame in the other endpoint's name that parses may be taken as its.
        let parses = Frame::parse(&bytes).is_ok();
        if self.fakes[f].shadow && parses {
            self.tainted = true;
        }
        let from = self.fakes[f].address();
        let from = if self.mode == Mode::Open && u.ratio(1u8, 20u8)? {
            None
        } else {
            from.or(Some(addr(99)))
        };
        // A spoofed source in a job is the other endpoint's voice too.
        if self.mode == Mode::Job && self.pair() {
            if let Ok(view) = FrameView::new_checked(&bytes[..]) {
                if self.nodes.iter().any(|n| n.rank == view.src()) && parses {
                    self.tainted = true;
                }
            }
        }
        let place = u.ratio(1u8, 4u8)?;
        self.deliver_bytes(node, from, &bytes, place);
        Ok(())
    }

    // --- checks ---

    fn check(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            let usage = n.ep.usage();
            assert!(
                usage.within_limits(),
                "endpoint {i} beyond its limits: {usage:?}"
            );
            assert_eq!(
                usage.completions.in_use, 0,
                "completions left after a drain"
            );
        }
    }

    /// Lets the world run out its timers and frames for a while, then checks the buffers.
    fn finish(&mut self) {
        for _ in 0..64 {
            if self.pair() {
                let batch: Vec<Packet> = self.net.drain(..).collect();
                for p in batch {
                    self.deliver_bytes(p.to, Some(p.from), &p.bytes, false);
                }
            }
            self.settle_outputs();
            self.check();
            let next = self.nodes.iter().filter_map(|n| n.ep.poll_timeout()).min();
            match next {
                Some(t) if self.net.is_empty() => {
                    self.now = self.now.max(t);
                    self.run_timers();
                }
                Some(_) => {}
                None if self.net.is_empty() => break,
                None => {}
            }
            self.settle_outputs();
            self.check();
        }
        self.check_order();
        for n in &self.nodes {
            for rec in &n.ops {
                match &rec.detail {
                    OpDetail::Send {
                        serial,
                        region,
                        data,
                        ..
                    } => {
                        check_send_region(&n.mem.0[region.0 as usize], data, *serial, rec.done);
                    }
                    OpDetail::Recv { region, buffer, .. } => {
                        let bytes = &n.mem.0[region.0 as usize];
                        check_guards(bytes, buffer);
                        if let Some(snapshot) = &rec.snapshot {
                            assert!(
                                snapshot == bytes,
                                "a receive buffer was written after its receive completed"
                            );
                        }
                    }
                    OpDetail::Probe { .. } => {}
                }
            }
        }
    }
}

/// The send buffer holds what the host put there: the message between gap bytes, or (once the
/// send completed, `poisoned`) the poison.
fn check_send_region(bytes: &[u8], data: &SgList, serial: u64, poisoned: bool) {
    if poisoned {
        assert!(
            bytes.iter().all(|&b| b == POISON),
            "a send buffer was written after its send completed"
        );
        return;
    }
    let mut expected = vec![SEND_GAP; bytes.len()];
    let mut at = 0usize;
    for s in data.segments() {
        for k in 0..s.len as usize {
            expected[s.offset as usize + k] = pattern(serial, at + k);
        }
        at += s.len as usize;
    }
    assert!(expected == bytes, "the core wrote into a send buffer");
}

/// Bytes of the region outside the buffer's segments are untouched.
fn check_guards(bytes: &[u8], buffer: &SgList) {
    let mut inside = vec![false; bytes.len()];
    for s in buffer.segments() {
        for b in &mut inside[s.offset as usize..(s.offset + s.len) as usize] {
            *b = true;
        }
    }
    for (k, (&b, &inside)) in bytes.iter().zip(&inside).enumerate() {
        assert!(
            inside || b == RECV_FILL,
            "byte {k} outside a receive buffer's segments was written"
        );
    }
}

/// Buffer bytes from message offset `len` on are untouched.
fn check_beyond(bytes: &[u8], buffer: &SgList, len: u64) {
    let total = buffer.total_len();
    if len >= total {
        return;
    }
    buffer.for_each_piece(len, total - len, |piece| {
        let start = piece.offset as usize;
        assert!(
            bytes[start..start + piece.len as usize]
                .iter()
                .all(|&b| b == RECV_FILL),
            "a receive buffer was written past the message it received"
        );
    });
}

fn read_buffer(bytes: &[u8], buffer: &SgList, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    buffer.for_each_piece(0, len, |piece| {
        let start = piece.offset as usize;
        out.extend_from_slice(&bytes[start..start + piece.len as usize]);
    });
    out
}

// ---------------------------------------------------------------------------------------------
// Frame building

struct Built {
    header: FrameHeader,
    msg: Option<MsgHeader>,
    payload: Vec<u8>,
    /// Keep `payload_len` as set, not the payload's length.
    lie_about_len: bool,
}

impl Built {
    fn encode(&self) -> Vec<u8> {
        let mut header = self.header;
        if !self.lie_about_len {
            header.payload_len = self.payload.len() as u32;
        }
        let headers_len = header.headers_len();
        let mut out = vec![0u8; headers_len + self.payload.len()];
        header.emit((&mut out[..FRAME_HEADER_LEN]).try_into().expect("48 bytes"));
        if let (Some(msg), true) = (self.msg, headers_len > FRAME_HEADER_LEN) {
            msg.emit(
                (&mut out[FRAME_HEADER_LEN..headers_len])
                    .try_into()
                    .expect("32 bytes"),
            );
        }
        out[headers_len..].copy_from_slice(&self.payload);
        let (headers, body) = out.split_at_mut(headers_len);
        seal(headers, &[body]);
        out
    }
}

fn control_header(kind: FrameKind, msg_id: u32, frame_index: u32) -> FrameHeader {
    FrameHeader {
        kind,
        flags: 0,
        job: JOB,
        src: 0,
        dst: 0,
        msg_id,
        frame_index,
        offset: 0,
        payload_len: 0,
        aux: 0,
        acked_id: 0,
    }
}

/// Flags for `kind`: none, all allowed, or a random subset of them.
fn flags_for(u: &mut Unstructured, kind: FrameKind) -> Result<u16> {
    let allowed = kind.allowed_flags();
    Ok(match u.int_in_range(0u8..=3)? {
        0 => 0,
        1 => allowed,
        _ => u.arbitrary::<u16>()? & allowed,
    })
}

/// Frame `frame` of a message cut as `msg` says, with its payload.
fn data_frame(msg: &MsgHeader, id: u32, frame: u32, serial: u64) -> Built {
    let first = u64::from(msg.frame_payload) - MSG_HEADER_LEN as u64;
    let rest = match msg.protocol {
        Protocol::Eager => first,
        Protocol::Rendezvous => u64::from(msg.frame_payload),
    };
    let offset = if frame == 0 {
        0
    } else {
        first + u64::from(frame - 1) * rest
    };
    let capacity = if frame == 0 { first } else { rest };
    let len = msg
        .total_len
        .saturating_sub(offset)
        .min(capacity)
        .min(70_000);
    let kind = match (msg.protocol, frame) {
        (Protocol::Eager, _) => FrameKind::Eager,
        (Protocol::Rendezvous, 0) => FrameKind::Rts,
        (Protocol::Rendezvous, _) => FrameKind::Data,
    };
    let payload = (0..len as usize)
        .map(|k| pattern(serial, offset as usize + k))
        .collect();
    Built {
        header: FrameHeader {
            offset,
            ..control_header(kind, id, frame)
        },
        msg: kind.has_msg_header().then_some(*msg),
        payload,
        lie_about_len: false,
    }
}

fn frames_of(msg: &MsgHeader) -> u64 {
    let first = u64::from(msg.frame_payload)
        .saturating_sub(MSG_HEADER_LEN as u64)
        .max(1);
    if msg.total_len <= first {
        return 1;
    }
    let rest = match msg.protocol {
        Protocol::Eager => first,
        Protocol::Rendezvous => u64::from(msg.frame_payload).max(1),
    };
    1 + (msg.total_len - first).div_ceil(rest)
}

/// The answer a peer gives to a frame of `kind`.
fn answer_kind(u: &mut Unstructured, kind: FrameKind) -> Result<FrameKind> {
    use FrameKind::*;
    let answers: &[FrameKind] = match kind {
        Eager => &[Ack, Ack, Credit, CancelAck],
        Rts => &[Cts, Cts, Ack, MsgAck],
        Data => &[Ack, Cts, MsgAck],
        End => &[MsgAck],
        MsgAck => &[Cleanup],
        Cts => &[Data, End, Cancel],
        Ack => &[End, Data, Eager],
        Cancel => &[CancelAck],
        Credit => &[Credit],
        Cleanup => &[Ack, MsgAck],
        CancelAck => &[Cleanup],
        Reset => &[Reset],
        _ => &[Ack],
    };
    pick(u, answers)
}

const CONTROL_KINDS: [FrameKind; 9] = [
    FrameKind::Ack,
    FrameKind::Cts,
    FrameKind::End,
    FrameKind::MsgAck,
    FrameKind::Cleanup,
    FrameKind::Credit,
    FrameKind::Cancel,
    FrameKind::CancelAck,
    FrameKind::Reset,
];

/// A frame from `fake` to its target, valid but for what the fuzzer rewrites.
fn build_frame(
    u: &mut Unstructured,
    config: &Config,
    fake: &mut Fake,
    serial: u64,
) -> Result<Built> {
    let mut built = match u.int_in_range(0u8..=9)? {
        // A new message of the fake peer.
        0..=2 => {
            let len = pick(
                u,
                &[
                    0,
                    1,
                    100,
                    SMALL_MESSAGE_MAX,
                    SMALL_MESSAGE_MAX + 1,
                    MEDIUM_MESSAGE_MAX + 1,
                    config.eager_limit,
                    config.eager_limit + 1,
                    20_000,
                ],
            )?;
            let eager = len <= config.eager_limit && !u.ratio(1u8, 6u8)?;
            let protocol = if eager {
                Protocol::Eager
            } else {
                Protocol::Rendezvous
            };
            let msg = MsgHeader {
                total_len: len,
                tag: pick(u, &[0, 1, 2, 1 << 40, u64::MAX])?,
                frame_payload: config.frame_payload_for(len, protocol),
                protocol,
                ack_unit: if u.ratio(1u8, 2u8)? {
                    config.ack_unit
                } else {
                    u.int_in_range(1..=8)?
                },
                context: pick(u, &[0, 0, 1, 5])?,
                immediate: if u.ratio(1u8, 4u8)? {
                    Some(u.arbitrary()?)
                } else {
                    None
                },
            };
            let id = if u.ratio(7u8, 8u8)? {
                let id = fake.next_id;
                fake.next_id = fake.next_id.wrapping_add(1);
                id
            } else {
                fake.next_id.wrapping_add(u.int_in_range(0..=3)?)
            };
            fake.remember(FakeMsg { id, msg, serial });
            let mut built = data_frame(&msg, id, 0, serial);
            if protocol == Protocol::Eager && u.ratio(1u8, 3u8)? {
                built.header.flags |= Flags::UNWAITED;
            }
            built
        }
        // More of a message the fake peer sends.
        3..=4 if !fake.msgs.is_empty() => {
            let msgs: Vec<FakeMsg> = fake.msgs.iter().copied().collect();
            let m = pick(u, &msgs)?;
            let frames = frames_of(&m.msg).min(u64::from(u32::MAX)) as u32;
            let frame = if u.ratio(3u8, 4u8)? {
                u.int_in_range(0..=frames.saturating_sub(1))?
            } else {
                u.int_in_range(0..=frames.saturating_add(2))?
            };
            let mut built = data_frame(&m.msg, m.id, frame, m.serial);
            if built.header.kind == FrameKind::Data && u.ratio(1u8, 3u8)? {
                built.header.flags |= Flags::RSM;
                built.header.aux = u.int_in_range(0..=frames.saturating_add(4))?;
            }
            if u.ratio(1u8, 8u8)? {
                built.header.flags |= Flags::RETRANSMIT;
            }
            built
        }
        // An answer to a frame the target sent.
        5..=7 if !fake.recent.is_empty() => {
            let back = u.int_in_range(0..=fake.recent.len() - 1)?;
            let (heard, heard_msg) = fake.recent[fake.recent.len() - 1 - back];
            let kind = if u.ratio(3u8, 4u8)? {
                answer_kind(u, heard.kind)?
            } else {
                pick(u, &CONTROL_KINDS)?
            };
            let frame_index = match u.int_in_range(0u8..=5)? {
                0..=2 => heard.frame_index,
                3 => heard.frame_index.wrapping_add(1),
                4 => heard_msg.map_or(0, |m| frames_of(&m) as u32),
                _ => u.int_in_range(0..=600)?,
            };
            match kind {
                FrameKind::Data | FrameKind::Eager => {
                    // The next frames of the fake's message the target asked for.
                    match fake.msgs.iter().find(|m| m.id == heard.msg_id).copied() {
                        Some(m) => data_frame(&m.msg, m.id, frame_index.min(1 << 20), m.serial),
                        None => control_header_built(kind, heard.msg_id, frame_index),
                    }
                }
                _ => {
                    let mut built = control_header_built(kind, heard.msg_id, frame_index);
                    built.header.flags = flags_for(u, kind)?;
                    built
                }
            }
        }
        // A control frame about a message of either side.
        _ => {
            let kind = pick(u, &CONTROL_KINDS)?;
            let id = match u.int_in_range(0u8..=3)? {
                0 => fake.next_id.wrapping_sub(1),
                1 => fake.recent.back().map_or(0, |(h, _)| h.msg_id),
                2 => u.int_in_range(0..=4)?,
                _ => u.arbitrary()?,
            };
            let frame_index = pick(u, &[0, 1, 2, 3, 16, 255, 256, 511, 512, u32::MAX])?;
            let mut built = control_header_built(kind, id, frame_index);
            built.header.flags = flags_for(u, kind)?;
            built
        }
    };
    // Credits returned, on the frames that carry them.
    let carries = matches!(
        built.header.kind,
        FrameKind::Ack
            | FrameKind::Cts
            | FrameKind::MsgAck
            | FrameKind::Credit
            | FrameKind::CancelAck
    ) || (built.header.kind == FrameKind::Eager && u.ratio(1u8, 3u8)?);
    if carries {
        if built.header.kind == FrameKind::Eager {
            built.header.flags |= Flags::CREDITS;
        }
        built.header.aux = match u.int_in_range(0u8..=5)? {
            0..=2 => fake.credits_aux(),
            3 => 0,
            4 => fake.credits_aux().wrapping_sub(1),
            _ => u.arbitrary()?,
        };
    }
    // A piggybacked acknowledgement on an EAGER frame.
    if built.header.kind == FrameKind::Eager && u.ratio(1u8, 4u8)? {
        if let Some((h, _)) = fake
            .recent
            .iter()
            .rev()
            .find(|(h, _)| h.kind == FrameKind::Eager)
        {
            built.header.flags |= Flags::ACKED;
            built.header.acked_id = h.msg_id;
        }
    }
    // Rewritten fields.
    for _ in 0..u.int_in_range(0u8..=3)? {
        rewrite(u, &mut built)?;
    }
    Ok(built)
}

fn control_header_built(kind: FrameKind, msg_id: u32, frame_index: u32) -> Built {
    Built {
        header: control_header(kind, msg_id, frame_index),
        msg: None,
        payload: Vec::new(),
        lie_about_len: false,
    }
}

/// An interesting value near `v`.
fn near32(u: &mut Unstructured, v: u32) -> Result<u32> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => 0,
        1 => u32::MAX,
        2 => v.wrapping_add(1),
        3 => v.wrapping_sub(1),
        4 => v.wrapping_add(u.int_in_range(2..=8)?),
        5 => v.wrapping_sub(u.int_in_range(2..=8)?),
        6 => v.wrapping_add(1024),
        7 => v.wrapping_add(pick(u, &[511, 512, 513, 1023, 1025, 1 << 31])?),
        _ => u.arbitrary()?,
    })
}

fn near64(u: &mut Unstructured, v: u64) -> Result<u64> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => 0,
        1 => u64::MAX,
        2 => v.wrapping_add(1),
        3 => v.wrapping_sub(1),
        4 => v.wrapping_add(u64::from(u.int_in_range(2u32..=2000)?)),
        5 => v.wrapping_sub(u64::from(u.int_in_range(2u32..=2000)?)),
        6 => pick(u, &[1 << 32, (1 << 32) - 1, u64::MAX / 2, 1 << 40])?,
        _ => u.arbitrary()?,
    })
}

/// Rewrites one field of a frame, keeping it parseable more often than not.
fn rewrite(u: &mut Unstructured, b: &mut Built) -> Result<()> {
    let h = &mut b.header;
    match u.int_in_range(0u8..=15)? {
        0 | 1 => h.msg_id = near32(u, h.msg_id)?,
        2 | 3 => h.frame_index = near32(u, h.frame_index)?,
        4 => h.offset = near64(u, h.offset)?,
        5 => {
            // Payload cut or grown.
            let len = b.payload.len();
            let new = match u.int_in_range(0u8..=3)? {
                0 => len.saturating_sub(1),
                1 => len + 1,
                2 => 0,
                _ => u.int_in_range(0..=len + 64)?,
            };
            b.payload.resize(new, 0x77);
        }
        6 => {
            h.flags = if u.ratio(1u8, 8u8)? {
                u.arbitrary()?
            } else {
                h.flags ^ (u.arbitrary::<u16>()? & h.kind.allowed_flags())
            }
        }
        7 => h.aux = near32(u, h.aux)?,
        8 => {
            h.acked_id = u.arbitrary()?;
            if h.kind == FrameKind::Eager {
                h.flags |= Flags::ACKED;
            }
        }
        9 => {
            let kind = pick(u, &FrameKind::ALL)?;
            h.kind = kind;
            h.flags &= kind.allowed_flags();
            if !kind.may_carry_payload() {
                b.payload.clear();
            }
            if kind.has_msg_header() && b.msg.is_none() {
                b.msg = Some(MsgHeader {
                    total_len: u64::from(h.frame_index),
                    tag: 0,
                    frame_payload: 1424,
                    protocol: if kind == FrameKind::Eager {
                        Protocol::Eager
                    } else {
                        Protocol::Rendezvous
                    },
                    ack_unit: 3,
                    context: 0,
                    immediate: None,
                });
            }
        }
        10 => {
            b.lie_about_len = true;
            h.payload_len = near32(u, b.payload.len() as u32)?;
        }
        11 => h.job = near32(u, h.job)?,
        _ => {
            if let Some(m) = &mut b.msg {
                match u.int_in_range(0u8..=5)? {
                    0 => m.total_len = near64(u, m.total_len)?,
                    1 => m.frame_payload = near32(u, m.frame_payload)?.max(33),
                    2 => m.ack_unit = u.int_in_range(1..=255)?,
                    3 => m.tag = u.arbitrary()?,
                    4 => m.context = u.arbitrary()?,
                    _ => {
                        m.immediate = match m.immediate {
                            Some(_) => None,
                            None => Some(u.arbitrary()?),
                        }
                    }
                }
            } else {
                h.msg_id = near32(u, h.msg_id)?;
            }
        }
    }
    Ok(())
}

/// Rewrites bytes of a frame's headers, and mostly seals the checksum again (else the frame
/// is corrupt, unless the rewrites cancelled out or touched only a payload the checksum leaves
/// to the link).
fn mutate_bytes(u: &mut Unstructured, bytes: &mut [u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    for _ in 0..u.int_in_range(1u8..=3)? {
        let at = u.int_in_range(0..=bytes.len().min(MSG_HEADER_LEN + FRAME_HEADER_LEN) - 1)?;
        bytes[at] ^= u.int_in_range(1u8..=255)?;
    }
    if u.ratio(1u8, 6u8)? || bytes.len() < FRAME_HEADER_LEN {
        return Ok(());
    }
    let headers_len = match FrameView::new_checked(&bytes[..])
        .ok()
        .and_then(|v| v.kind().ok())
    {
        Some(kind) if kind.has_msg_header() && bytes.len() >= FRAME_HEADER_LEN + MSG_HEADER_LEN => {
            FRAME_HEADER_LEN + MSG_HEADER_LEN
        }
        _ => FRAME_HEADER_LEN,
    };
    let (headers, body) = bytes.split_at_mut(headers_len);
    seal(headers, &[body]);
    Ok(())
}

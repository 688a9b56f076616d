//! One node of the LM simulation: an LM station (`nicmsg_lm::station`, the code a process
//! runs), a device that lands frames at the addresses of the station's fill queue by the
//! steering rule, and a receive ring the station reads later than the device wrote it, as a
//! real engine polls its ring. The station is a job's ([`Station`]) or an open one
//! (`OpenStation`, in `open.rs`): both are a [`Stack`] to the node.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use nicmsg_lm::fill::{Arrival, Slot, Steer};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{
    Event, HeapRegions, Landing, LandingError, Received, RegionId, Regions, SendError, Station,
    StationConfig,
};
use nicmsg_lm::{Geometry, TransferKey};
use nicmsg_proto::Nanos;

use super::frames::{self, LINK_BYTE, LINK_HEADER_LEN};
use super::{Label, LmStats, Violations};

/// Capacity of an ordinary chunk (AF_XDP's 2 KiB chunks hold any frame of a 1500-byte link).
pub const ORDINARY_CHUNK: u32 = 2048;
/// Slots of the device's fill queue.
pub const FILL_SLOTS: usize = 512;
/// A send the station refused for now (too many in flight) is tried again this much later.
const SEND_AGAIN_NS: Nanos = 1_000_000;

/// What a node's station is to it: a job's [`Station`], whose peers are node numbers, or an
/// open station, whose peers are addresses (node numbers here, translated by the stack).
pub trait Stack {
    fn station(&self) -> &Station<SimRegions>;
    fn station_mut(&mut self) -> &mut Station<SimRegions>;
    /// A frame from node `from` that came the ordinary way (from its frame header on).
    fn arrive(&mut self, now: Nanos, from: u32, frame: &[u8]);
    /// A frame from node `from` the device wrote into `slot`.
    fn take_landed(
        &mut self,
        now: Nanos,
        from: u32,
        slot: Slot,
        landing: Landing<'_>,
    ) -> Result<(), LandingError>;
    fn poll_timeout(&self) -> Option<Nanos>;
    fn handle_timeout(&mut self, now: Nanos);
    fn poll_event(&mut self) -> Option<StackEvent>;
    /// The next frame to send, and the node it goes to.
    fn poll_transmit(&mut self) -> Option<(u32, &mut [u8])>;
    /// What this node's transfer `tag` to `to` carries.
    fn label(&self, me: u32, to: u32, tag: u32) -> Label;
    /// What a transfer this node received from `from` (numbered `number` in its
    /// conversation) carries, if anything tells.
    fn received_label(&self, me: u32, from: u32, number: u32, bytes: &[u8]) -> Option<Label>;
    /// Sends a transfer: the send's id, or `None` if the station refused it for now (to try
    /// again later).
    fn send(&mut self, now: Nanos, to: u32, buffer: HoleBuffer) -> Option<u64>;
    /// A new process at this node's address: a station that knows nothing.
    fn restart(&mut self) {
        unreachable!("only open stations restart");
    }
}

/// What a node's station tells it, in node numbers.
pub enum StackEvent {
    Received {
        from: u32,
        number: u32,
        message: Received,
    },
    Sent {
        id: u64,
        ok: bool,
    },
}

impl Stack for Station<SimRegions> {
    fn station(&self) -> &Station<SimRegions> {
        self
    }

    fn station_mut(&mut self) -> &mut Station<SimRegions> {
        self
    }

    fn arrive(&mut self, now: Nanos, from: u32, frame: &[u8]) {
        Station::arrive(self, now, from, frame);
    }

    fn take_landed(
        &mut self,
        now: Nanos,
        from: u32,
        slot: Slot,
        landing: Landing<'_>,
    ) -> Result<(), LandingError> {
        Station::take_landed(self, now, from, slot, landing)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        Station::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Nanos) {
        Station::handle_timeout(self, now);
    }

    fn poll_event(&mut self) -> Option<StackEvent> {
        Some(match Station::poll_event(self)? {
            Event::Received {
                from,
                number,
                message,
            } => StackEvent::Received {
                from,
                number,
                message,
            },
            Event::Sent { id, outcome, .. } => StackEvent::Sent {
                id: u64::from(id.to) << 32 | u64::from(id.number),
                ok: outcome.is_ok(),
            },
        })
    }

    fn poll_transmit(&mut self) -> Option<(u32, &mut [u8])> {
        Station::poll_transmit(self)
    }

    /// A job's transfers are named by their numbers, which the receiver knows them by.
    fn label(&self, me: u32, to: u32, _tag: u32) -> Label {
        let number = self.next_number(to).expect("a peer");
        Label::Job {
            from: me,
            to,
            number,
        }
    }

    fn received_label(&self, me: u32, from: u32, number: u32, _bytes: &[u8]) -> Option<Label> {
        Some(Label::Job {
            from,
            to: me,
            number,
        })
    }

    fn send(&mut self, now: Nanos, to: u32, buffer: HoleBuffer) -> Option<u64> {
        match Station::send(self, now, to, buffer) {
            Ok(id) => Some(u64::from(id.to) << 32 | u64::from(id.number)),
            Err((SendError::Busy, _)) => None,
            Err((error, _)) => panic!("the simulation sends only what a station takes: {error}"),
        }
    }
}

/// One planned transfer.
#[derive(Debug)]
pub struct Outgoing {
    pub to: u32,
    pub len: usize,
    pub start: Nanos,
    /// An answer to a transfer received: its life's own (dropped if it ends first).
    pub reply: bool,
    /// When the station took it, and when it reported.
    pub started: Option<Nanos>,
    pub ended: Option<Nanos>,
    /// What it carries, from when it started.
    pub label: Option<Label>,
    state: SendState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendState {
    NotStarted,
    Sending(u64),
    Delivered,
    GaveUp,
    /// Its sender restarted while it was pending: it went with the old life, unreported.
    Dropped,
}

impl Outgoing {
    pub fn new(to: u32, len: usize, start: Nanos) -> Self {
        Self {
            to,
            len,
            start,
            reply: false,
            started: None,
            ended: None,
            label: None,
            state: SendState::NotStarted,
        }
    }

    /// What it carries, once delivered.
    pub fn delivered_as(&self) -> Option<Label> {
        self.label.filter(|_| self.state == SendState::Delivered)
    }

    pub fn gave_up(&self) -> bool {
        self.state == SendState::GaveUp
    }

    pub fn dropped(&self) -> bool {
        self.state == SendState::Dropped
    }

    pub fn pending(&self) -> bool {
        matches!(self.state, SendState::NotStarted | SendState::Sending(_))
    }
}

/// Receive regions on the heap, each filled when allocated with a pattern no message has, so
/// that a byte the transfer never wrote shows.
pub struct SimRegions {
    node: u32,
    allocated: u64,
    heap: HeapRegions,
}

impl SimRegions {
    pub fn new(node: u32) -> Self {
        Self {
            node,
            allocated: 0,
            heap: HeapRegions::new(usize::MAX),
        }
    }
}

impl Regions for SimRegions {
    fn allocate(&mut self, len: usize) -> Option<RegionId> {
        let region = self.heap.allocate(len)?;
        self.allocated += 1;
        let seed = u64::from(self.node) << 32 | self.allocated;
        for (i, byte) in self.heap.bytes(region).iter_mut().enumerate() {
            *byte = (crate::content::mix(seed ^ i as u64) | 1) as u8;
        }
        Some(region)
    }

    fn bytes(&mut self, region: RegionId) -> &mut [u8] {
        self.heap.bytes(region)
    }

    fn free(&mut self, region: RegionId) {
        self.heap.free(region);
    }
}

/// A node's device: the fill queue's size, its ordinary chunks and its buffers (a frame
/// longer takes a run of fill addresses, as AF_XDP with scatter-gather does).
#[derive(Debug, Clone, Copy)]
pub struct Device {
    pub ordinary_chunks: u32,
    pub buffer_bytes: u32,
}

impl Device {
    /// The ordinary chunk's capacity: one device buffer, and room for any frame of the run's
    /// MTU (a chunk too small for the data frames would hold every slot behind it for good).
    fn chunk(self, geometry: Geometry) -> u32 {
        let largest_frame = (geometry.header_len() + geometry.frame_payload()) as u32;
        ORDINARY_CHUNK.max(largest_frame)
    }

    /// A station's settings for this device: node `me` of `nodes`, `window` and
    /// `first_number` as the run drew them.
    pub fn station_config(
        self,
        (me, nodes): (u32, u32),
        geometry: Geometry,
        (window, first_number): (u32, u32),
    ) -> StationConfig {
        let mut config = StationConfig::new(me, nodes, frames::JOB, geometry);
        config.window = window;
        config.first_number = first_number;
        config.fill_slots = FILL_SLOTS;
        config.device_buffer_bytes = self.buffer_bytes;
        config.ordinary_chunks = self.ordinary_chunks;
        config.chunk_capacity = self.chunk(geometry).min(self.buffer_bytes);
        config
    }
}

/// A server's answers: to a transfer received, with probability `chance`, a transfer back
/// (of the sizes the run's transfers have, up to 200 us later).
pub struct Answers {
    pub rng: crate::rng::SimRng,
    pub chance: f64,
    pub payload: usize,
}

/// A frame the device handed to the station through the receive ring.
#[derive(Debug)]
struct RingEntry {
    slot: Slot,
    src: u32,
    len: usize,
    /// A frame that landed in a transfer's region: its frame header, as the packet filter
    /// kept it when it steered the frame. In the region it is overwritten by the next frame
    /// to land (that is the point of LM), possibly before the station looks; its payload is
    /// not.
    kept: Option<Vec<u8>>,
}

pub struct Node<S: Stack = Station<SimRegions>> {
    pub me: u32,
    pub alive: bool,
    stack: S,
    ring: VecDeque<RingEntry>,
    chunks: Vec<Vec<u8>>,
    /// Transfers received, by every life of the node: what they carried, and their length.
    received: BTreeMap<Label, usize>,
    /// Transfers received, by the life of this node that took them: exactly once is promised
    /// within a life. A restarted receiver cannot tell a late copy of a transfer its earlier
    /// life took, sent by a peer that never heard from it (so names no conversation of it),
    /// from a new conversation's first transfer (`docs/dgram.md`, the same for the engine's
    /// datagram sockets); such transfers are counted in `taken_by_two_lives`.
    received_in_life: BTreeSet<(u32, Label)>,
    pub taken_by_two_lives: u64,
    pub outgoing: Vec<Outgoing>,
    /// Frames to put on the network: (destination, bytes).
    pub out: Vec<(u32, Vec<u8>)>,
    /// A server's answers to what it receives.
    pub answers: Option<Answers>,
    /// The node's lives so far (1 until it restarts), and when it last restarted.
    pub life: u32,
    pub restarted: Option<Nanos>,
    /// The counters of the node's stations that ended with their lives.
    pub ended_lives: LmStats,
}

impl Node {
    /// Node `me` of a job of `nodes`, numbering its transfers to each receiver from
    /// `first_number`, over `device`.
    pub fn new(
        me: u32,
        nodes: u32,
        geometry: Geometry,
        numbers: (u32, u32),
        device: Device,
    ) -> Self {
        let config = device.station_config((me, nodes), geometry, numbers);
        let station = Station::new(config, SimRegions::new(me));
        Node::with_stack(me, station, device)
    }
}

impl<S: Stack> Node<S> {
    /// Node `me` around `stack`, whose device is `device`.
    pub fn with_stack(me: u32, stack: S, device: Device) -> Self {
        let geometry = stack.station().config().geometry;
        let chunk = device.chunk(geometry).min(device.buffer_bytes);
        Self {
            me,
            alive: true,
            stack,
            ring: VecDeque::new(),
            chunks: vec![vec![0; chunk as usize]; device.ordinary_chunks as usize],
            received: BTreeMap::new(),
            received_in_life: BTreeSet::new(),
            taken_by_two_lives: 0,
            outgoing: Vec::new(),
            out: Vec::new(),
            answers: None,
            life: 1,
            restarted: None,
            ended_lives: LmStats::default(),
        }
    }

    pub fn station(&self) -> &Station<SimRegions> {
        self.stack.station()
    }

    pub fn stack(&self) -> &S {
        &self.stack
    }

    pub fn has_ring_work(&self) -> bool {
        !self.ring.is_empty()
    }

    /// Every transfer received, by every life: what it carried, and its length.
    pub fn transfers_received(&self) -> impl Iterator<Item = (&Label, &usize)> {
        self.received.iter()
    }

    /// The length of the transfer that carried `label`, if it was received.
    pub fn received_len(&self, label: &Label) -> Option<usize> {
        self.received.get(label).copied()
    }

    /// The process at this node's address ends and a new one starts: its station, device
    /// ring and pending sends go with the old life (they never report), and the answers it
    /// had not started yet.
    pub fn restart(&mut self, now: Nanos) {
        super::add_station(&mut self.ended_lives, self.stack.station().stats());
        self.stack.restart();
        self.life += 1;
        self.restarted = Some(now);
        self.ring.clear();
        self.out.clear();
        for out in &mut self.outgoing {
            let unstarted_reply = out.reply && out.state == SendState::NotStarted;
            if unstarted_reply || matches!(out.state, SendState::Sending(_)) {
                out.state = SendState::Dropped;
            }
        }
    }

    /// The earliest time this node has something to do by itself.
    pub fn next_timer(&self) -> Option<Nanos> {
        let starts = self
            .outgoing
            .iter()
            .filter(|o| o.state == SendState::NotStarted)
            .map(|o| o.start)
            .min();
        [starts, self.stack.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// A frame from `src` reaches this node's device.
    pub fn arrive(
        &mut self,
        now: Nanos,
        src: u32,
        bytes: &[u8],
        stats: &mut LmStats,
        v: &mut Violations,
    ) {
        let arrival = Arrival::of_frame(bytes, LINK_HEADER_LEN);
        match self.stack.station_mut().fill_queue_mut().steer(arrival) {
            Steer::Kernel => {
                stats.kernel_frames += 1;
                if let Some(frame) = bytes.get(LINK_HEADER_LEN..) {
                    self.stack.arrive(now, src, frame);
                }
                self.after_station(now, v);
            }
            Steer::Ring => {
                stats.ring_frames += 1;
                let slot = self
                    .stack
                    .station_mut()
                    .fill_queue_mut()
                    .device_take(bytes.len() as u32);
                self.land(slot, bytes, v);
                let kept = match slot {
                    Slot::Ordinary { .. } => None,
                    _ => bytes
                        .get(LINK_HEADER_LEN..frames::HEADER_LEN)
                        .map(<[u8]>::to_vec),
                };
                self.ring.push_back(RingEntry {
                    slot,
                    src,
                    len: bytes.len(),
                    kept,
                });
            }
        }
    }

    /// The device writes the frame where the slot points.
    fn land(&mut self, slot: Slot, bytes: &[u8], v: &mut Violations) {
        match slot {
            Slot::Ordinary { chunk, capacity } => {
                assert!(
                    bytes.len() <= capacity as usize,
                    "the rule let an oversize frame in"
                );
                self.chunks[chunk as usize][..bytes.len()].copy_from_slice(bytes);
            }
            Slot::Placement {
                transfer, index, ..
            } => self.land_in_region(transfer, (index, 0), bytes, v),
            Slot::Void {
                transfer,
                index,
                skip,
                ..
            } => self.land_in_region(transfer, (index, skip), bytes, v),
        }
    }

    /// Writes the frame `skip` bytes past frame `index`'s place in `key`'s region.
    fn land_in_region(
        &mut self,
        key: TransferKey,
        (index, skip): (u32, u32),
        bytes: &[u8],
        v: &mut Violations,
    ) {
        let me = self.me;
        let station = self.stack.station_mut();
        let geometry = station.config().geometry;
        let Some(region) = station.region_of(key) else {
            v.push(format!(
                "node {me}: a slot points into the freed region of {key:?}"
            ));
            return;
        };
        let start = geometry.landing_offset(index) + skip as usize;
        let end = start + bytes.len();
        if end > region.len() {
            v.push(format!(
                "node {me}: frame of {} B at slot {index} of {key:?} writes past its region",
                bytes.len()
            ));
            return;
        }
        region[start..end].copy_from_slice(bytes);
    }

    /// The engine's turn: takes what landed, from the receive ring, in order.
    pub fn engine_turn(&mut self, now: Nanos, v: &mut Violations) {
        while let Some(entry) = self.ring.pop_front() {
            let taken = self.stack.station_mut().next_landing();
            if taken != Some(entry.slot) {
                v.push(format!(
                    "node {}: the fill queue's mirror lost step",
                    self.me
                ));
                return;
            }
            let landing = match (&entry.kept, entry.slot) {
                (None, Slot::Ordinary { chunk, .. }) => {
                    Landing::Chunk(&self.chunks[chunk as usize][LINK_HEADER_LEN..entry.len])
                }
                (Some(kept), _) => Landing::Region {
                    kept,
                    frame_len: entry.len - LINK_HEADER_LEN,
                },
                (None, _) => unreachable!("a region's frame keeps its headers"),
            };
            if let Err(error) = self.stack.take_landed(now, entry.src, entry.slot, landing) {
                v.push(format!("node {}: {error}", self.me));
            }
        }
        self.after_station(now, v);
    }

    /// Starts this node's transfers whose time has come, and runs the station's timers.
    pub fn timers(&mut self, now: Nanos, v: &mut Violations) {
        for at in 0..self.outgoing.len() {
            let out = &self.outgoing[at];
            if out.state == SendState::NotStarted && out.start <= now {
                self.start(now, at);
            }
        }
        self.stack.handle_timeout(now);
        self.after_station(now, v);
    }

    fn start(&mut self, now: Nanos, at: usize) {
        let (to, len) = (self.outgoing[at].to, self.outgoing[at].len);
        let geometry = self.stack.station().config().geometry;
        let mut buffer = HoleBuffer::new(geometry, len as u64).expect("a transfer the run sized");
        let label = self.stack.label(self.me, to, at as u32);
        for (index, piece) in buffer.pieces_mut().enumerate() {
            let start = geometry.payload_range(len, index as u32).start;
            for (i, byte) in piece.iter_mut().enumerate() {
                *byte = label.byte(start + i);
            }
        }
        let out = &mut self.outgoing[at];
        match self.stack.send(now, to, buffer) {
            Some(id) => {
                out.state = SendState::Sending(id);
                out.started = Some(now);
                out.label = Some(label);
            }
            None => out.start = now + SEND_AGAIN_NS,
        }
    }

    /// Takes the station's events and frames.
    fn after_station(&mut self, now: Nanos, v: &mut Violations) {
        while self.stack.station_mut().poll_fill().is_some() {
            // The simulated device reads the station's mirror itself.
        }
        while let Some(event) = self.stack.poll_event() {
            match event {
                StackEvent::Received {
                    from,
                    number,
                    message,
                } => self.take_received(now, from, number, message, v),
                StackEvent::Sent { id, ok } => {
                    let Some(out) = self
                        .outgoing
                        .iter_mut()
                        .find(|o| o.state == SendState::Sending(id))
                    else {
                        v.push(format!(
                            "node {}: a send it did not start finished",
                            self.me
                        ));
                        continue;
                    };
                    out.ended = Some(now);
                    out.state = match ok {
                        true => SendState::Delivered,
                        false => SendState::GaveUp,
                    };
                }
            }
        }
        while let Some((to, frame)) = self.stack.poll_transmit() {
            let mut bytes = frame.to_vec();
            bytes[..LINK_HEADER_LEN].fill(LINK_BYTE);
            self.out.push((to, bytes));
        }
    }

    fn take_received(
        &mut self,
        now: Nanos,
        from: u32,
        number: u32,
        message: Received,
        v: &mut Violations,
    ) {
        let me = self.me;
        let bytes: Vec<u8> = match message {
            Received::Copied(bytes) => bytes,
            Received::Placed { region, range } => {
                let station = self.stack.station_mut();
                let bytes = station.regions().bytes(region)[range].to_vec();
                station.release(region);
                bytes
            }
        };
        let Some(label) = self.stack.received_label(me, from, number, &bytes) else {
            v.push(format!(
                "node {me}: a transfer of {} B from {from} that carries no label",
                bytes.len()
            ));
            return;
        };
        if !self.received_in_life.insert((self.life, label)) {
            v.push(format!(
                "node {me}: transfer {label} delivered twice in one life"
            ));
        } else if self.received.insert(label, bytes.len()).is_some() {
            self.taken_by_two_lives += 1;
        }
        if let Some(bad) = label.first_wrong_byte(&bytes) {
            v.push(format!(
                "node {me}: transfer {label} ({} B) wrong at byte {bad}",
                bytes.len()
            ));
        }
        if label.from() != from {
            v.push(format!("node {me}: transfer {label} came from node {from}"));
        }
        if let Some(answers) = &mut self.answers {
            if answers.rng.chance(answers.chance) {
                let len = super::transfer_len(&mut answers.rng, answers.payload);
                let delay = answers.rng.below(200_000);
                let mut reply = Outgoing::new(from, len, now + delay);
                reply.reply = true;
                self.outgoing.push(reply);
            }
        }
    }
}

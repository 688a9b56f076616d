//! One node of the LM simulation: an LM station (`nicmsg_lm::station`, the code a process
//! runs), a device that lands frames at the addresses of the station's fill queue by the
//! steering rule, and a receive ring the station reads later than the device wrote it, as a
//! real engine polls its ring.

use std::collections::{BTreeMap, VecDeque};

use nicmsg_lm::fill::{Arrival, Slot, Steer};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{
    Event, HeapRegions, Landing, Received, RegionId, Regions, SendError, SendId, Station,
    StationConfig,
};
use nicmsg_lm::{Geometry, TransferKey};
use nicmsg_proto::Nanos;

use super::frames::{self, LINK_BYTE, LINK_HEADER_LEN};
use super::{Catalogue, LmStats, Violations};

/// Capacity of an ordinary chunk (AF_XDP's 2 KiB chunks hold any frame of a 1500-byte link).
pub const ORDINARY_CHUNK: u32 = 2048;
/// Slots of the device's fill queue.
pub const FILL_SLOTS: usize = 512;
/// A send the station refused for now (too many in flight) is tried again this much later.
const SEND_AGAIN_NS: Nanos = 1_000_000;

/// One planned transfer.
#[derive(Debug)]
pub struct Outgoing {
    pub to: u32,
    pub len: usize,
    pub start: Nanos,
    state: SendState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendState {
    NotStarted,
    Sending(SendId),
    Delivered(SendId),
    GaveUp,
}

impl Outgoing {
    pub fn new(to: u32, len: usize, start: Nanos) -> Self {
        Self {
            to,
            len,
            start,
            state: SendState::NotStarted,
        }
    }

    /// The station's number for it, once delivered.
    pub fn delivered_as(&self) -> Option<u32> {
        match self.state {
            SendState::Delivered(id) => Some(id.number),
            _ => None,
        }
    }

    pub fn gave_up(&self) -> bool {
        self.state == SendState::GaveUp
    }
}

/// Receive regions on the heap, each filled when allocated with a pattern no message has, so
/// that a byte the transfer never wrote shows.
pub struct SimRegions {
    node: u32,
    allocated: u64,
    heap: HeapRegions,
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

pub struct Node {
    pub me: u32,
    pub alive: bool,
    station: Station<SimRegions>,
    ring: VecDeque<RingEntry>,
    chunks: Vec<Vec<u8>>,
    /// Transfers received: (sender, its number) and length.
    received: BTreeMap<(u32, u32), usize>,
    pub outgoing: Vec<Outgoing>,
    /// Frames to put on the network: (destination, bytes).
    pub out: Vec<(u32, Vec<u8>)>,
}

impl Node {
    /// A node whose device has `ordinary_chunks` chunks and buffers of `device_buffer_bytes`
    /// (a frame longer takes a run of fill addresses, as AF_XDP with scatter-gather does),
    /// numbering its transfers to each receiver from `first_number`.
    pub fn new(
        me: u32,
        nodes: u32,
        geometry: Geometry,
        (window, first_number): (u32, u32),
        (ordinary_chunks, device_buffer_bytes): (u32, u32),
    ) -> Self {
        let mut config = StationConfig::new(me, nodes, frames::JOB, geometry);
        config.window = window;
        config.first_number = first_number;
        config.fill_slots = FILL_SLOTS;
        config.device_buffer_bytes = device_buffer_bytes;
        config.ordinary_chunks = ordinary_chunks;
        // An ordinary chunk is one device buffer, and takes any frame of the run's MTU: a
        // chunk too small for the data frames would hold every slot behind it for good.
        let largest_frame = (geometry.header_len() + geometry.frame_payload()) as u32;
        let chunk = ORDINARY_CHUNK.max(largest_frame);
        config.chunk_capacity = chunk.min(device_buffer_bytes);
        let regions = SimRegions {
            node: me,
            allocated: 0,
            heap: HeapRegions::new(usize::MAX),
        };
        Self {
            me,
            alive: true,
            station: Station::new(config, regions),
            ring: VecDeque::new(),
            chunks: vec![vec![0; chunk as usize]; ordinary_chunks as usize],
            received: BTreeMap::new(),
            outgoing: Vec::new(),
            out: Vec::new(),
        }
    }

    pub fn station(&self) -> &Station<SimRegions> {
        &self.station
    }

    pub fn has_ring_work(&self) -> bool {
        !self.ring.is_empty()
    }

    /// The length of transfer `number` from `from`, if it was received.
    pub fn received_len(&self, from: u32, number: u32) -> Option<usize> {
        self.received.get(&(from, number)).copied()
    }

    /// The earliest time this node has something to do by itself.
    pub fn next_timer(&self) -> Option<Nanos> {
        let starts = self
            .outgoing
            .iter()
            .filter(|o| o.state == SendState::NotStarted)
            .map(|o| o.start)
            .min();
        [starts, self.station.poll_timeout()]
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
        match self.station.fill_queue_mut().steer(arrival) {
            Steer::Kernel => {
                stats.kernel_frames += 1;
                if let Some(frame) = bytes.get(LINK_HEADER_LEN..) {
                    self.station.arrive(now, src, frame);
                }
                self.after_station(v);
            }
            Steer::Ring => {
                stats.ring_frames += 1;
                let slot = self
                    .station
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
        let geometry = self.station.config().geometry;
        let Some(region) = self.station.region_of(key) else {
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
            let taken = self.station.next_landing();
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
            if let Err(error) = self
                .station
                .take_landed(now, entry.src, entry.slot, landing)
            {
                v.push(format!("node {}: {error}", self.me));
            }
        }
        self.after_station(v);
    }

    /// Starts this node's transfers whose time has come, and runs the station's timers.
    pub fn timers(&mut self, now: Nanos, v: &mut Violations) {
        for at in 0..self.outgoing.len() {
            let out = &self.outgoing[at];
            if out.state == SendState::NotStarted && out.start <= now {
                self.start(now, at);
            }
        }
        self.station.handle_timeout(now);
        self.after_station(v);
    }

    fn start(&mut self, now: Nanos, at: usize) {
        let (to, len) = (self.outgoing[at].to, self.outgoing[at].len);
        let geometry = self.station.config().geometry;
        let mut buffer = HoleBuffer::new(geometry, len as u64).expect("a transfer the run sized");
        let number = self.station.next_number(to).expect("a peer");
        for (index, piece) in buffer.pieces_mut().enumerate() {
            let start = geometry.payload_range(len, index as u32).start;
            for (i, byte) in piece.iter_mut().enumerate() {
                *byte = Catalogue::byte(self.me, to, number, start + i);
            }
        }
        match self.station.send(now, to, buffer) {
            Ok(id) => self.outgoing[at].state = SendState::Sending(id),
            Err((SendError::Busy, _)) => self.outgoing[at].start = now + SEND_AGAIN_NS,
            Err((error, _)) => panic!("the simulation sends only what a station takes: {error}"),
        }
    }

    /// Takes the station's events and frames.
    fn after_station(&mut self, v: &mut Violations) {
        while self.station.poll_fill().is_some() {
            // The simulated device reads the station's mirror itself.
        }
        while let Some(event) = self.station.poll_event() {
            match event {
                Event::Received {
                    from,
                    number,
                    message,
                } => self.received(from, number, message, v),
                Event::Sent { id, outcome, .. } => {
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
                    out.state = match outcome {
                        Ok(()) => SendState::Delivered(id),
                        Err(_) => SendState::GaveUp,
                    };
                }
            }
        }
        while let Some((to, frame)) = self.station.poll_transmit() {
            let mut bytes = frame.to_vec();
            bytes[..LINK_HEADER_LEN].fill(LINK_BYTE);
            self.out.push((to, bytes));
        }
    }

    fn received(&mut self, from: u32, number: u32, message: Received, v: &mut Violations) {
        let me = self.me;
        let bytes: Vec<u8> = match message {
            Received::Copied(bytes) => bytes,
            Received::Placed { region, range } => {
                let bytes = self.station.regions().bytes(region)[range].to_vec();
                self.station.release(region);
                bytes
            }
        };
        if self.received.insert((from, number), bytes.len()).is_some() {
            v.push(format!(
                "node {me}: transfer {from}/{number} delivered twice"
            ));
        }
        if let Some(bad) = Catalogue::first_wrong_byte(from, me, number, &bytes) {
            v.push(format!(
                "node {me}: transfer {from}/{number} ({} B) wrong at byte {bad}",
                bytes.len()
            ));
        }
    }
}

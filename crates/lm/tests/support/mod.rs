//! The LM station tests' network: stations joined by a wire that a test's filter may drop
//! frames from, with a simulated device that applies the steering rule and writes each frame
//! where its slot points (no ordinary chunks: like the AF_XDP socket, every frame not steered
//! to a slot goes the ordinary way). Every transfer's bytes depend on their position, so a
//! misplaced byte shows.
#![allow(dead_code)] // each test file uses part of it

use std::collections::{BTreeSet, VecDeque};

use nicmsg_lm::admission::LEASE_NS;
use nicmsg_lm::fill::{Arrival, Slot, Steer};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{
    Event, HeapRegions, Landing, Received, Regions, SendError, SendId, Station, StationConfig,
};
use nicmsg_lm::Geometry;
use nicmsg_wire::{FrameKind, FrameView, FRAME_HEADER_LEN};

pub const LINK: usize = 42;
pub const HEADER: usize = LINK + FRAME_HEADER_LEN;
pub const PAYLOAD: usize = 256;
pub const JOB: u32 = 7;

pub fn geometry() -> Geometry {
    Geometry::new(HEADER, PAYLOAD).unwrap()
}

/// The bytes of transfer `number` from `from` to `to`: position-dependent, so a misplaced
/// byte shows.
pub fn byte(from: u32, to: u32, number: u32, at: usize) -> u8 {
    let x = (u64::from(from) << 40 | u64::from(to) << 32 | u64::from(number)) ^ at as u64;
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// A frame on the wire: (from, to, link bytes + frame).
pub type Wire = (u32, u32, Vec<u8>);

pub struct Net {
    pub nodes: Vec<Station<HeapRegions>>,
    pub now: u64,
    pub wire: VecDeque<Wire>,
    /// Per node: transfers received (from, number, bytes).
    pub received: Vec<Vec<(u32, u32, Vec<u8>)>>,
    /// Per node: sends finished (id, ok).
    pub sent: Vec<Vec<(SendId, bool)>>,
    /// Frames the filter dropped on the wire.
    pub dropped: Vec<Wire>,
}

impl Net {
    pub fn new(nodes: u32) -> Self {
        Self::numbering_from(nodes, 1)
    }

    /// `nodes` stations, each numbering its transfers to each receiver from `first`.
    pub fn numbering_from(nodes: u32, first: u32) -> Self {
        let nodes: Vec<_> = (0..nodes)
            .map(|me| {
                let mut config = StationConfig::new(me, nodes, JOB, geometry());
                config.window = 16;
                config.fill_slots = 256;
                config.first_number = first;
                Station::new(config, HeapRegions::new(64 << 20))
            })
            .collect();
        let n = nodes.len();
        Self {
            nodes,
            now: 1_000,
            wire: VecDeque::new(),
            received: vec![Vec::new(); n],
            sent: vec![Vec::new(); n],
            dropped: Vec::new(),
        }
    }

    pub fn send(&mut self, from: u32, to: u32, len: usize) -> SendId {
        self.try_send(from, to, len).expect("send taken")
    }

    /// A send, or `None` if the station refuses it for now (`SendError::Busy`).
    pub fn try_send(&mut self, from: u32, to: u32, len: usize) -> Option<SendId> {
        let geometry = geometry();
        let mut buffer = HoleBuffer::new(geometry, len as u64).unwrap();
        let number = self.nodes[from as usize].next_number(to).unwrap();
        for (index, piece) in buffer.pieces_mut().enumerate() {
            let start = geometry.payload_range(len, index as u32).start;
            for (i, b) in piece.iter_mut().enumerate() {
                *b = byte(from, to, number, start + i);
            }
        }
        let now = self.now;
        let sent = self.nodes[from as usize].send(now, to, buffer);
        self.collect();
        match sent {
            Ok(id) => {
                assert_eq!(id.number, number, "numbered as announced");
                Some(id)
            }
            Err((SendError::Busy, _)) => None,
            Err((error, _)) => panic!("send refused: {error}"),
        }
    }

    /// Takes every node's output: frames onto the wire, events into the logs.
    pub fn collect(&mut self) {
        for me in 0..self.nodes.len() {
            let node = &mut self.nodes[me];
            while node.poll_fill().is_some() {}
            while let Some((to, frame)) = node.poll_transmit() {
                self.wire.push_back((me as u32, to, frame.to_vec()));
            }
            while let Some(event) = node.poll_event() {
                match event {
                    Event::Received {
                        from,
                        number,
                        message,
                    } => {
                        let bytes = match message {
                            Received::Copied(bytes) => bytes,
                            Received::Placed { region, range } => {
                                let bytes = node.regions().bytes(region)[range].to_vec();
                                node.release(region);
                                bytes
                            }
                        };
                        self.received[me].push((from, number, bytes));
                    }
                    Event::Sent { id, outcome, .. } => self.sent[me].push((id, outcome.is_ok())),
                }
            }
        }
    }

    /// A frame reaches `to`'s device: into the head slot if the steering rule lets it (and
    /// the engine sees the landing at once), else the ordinary way.
    pub fn deliver(&mut self, from: u32, to: u32, bytes: &[u8]) {
        let now = self.now;
        let node = &mut self.nodes[to as usize];
        let arrival = Arrival::of_frame(bytes, LINK);
        match node.fill_queue_mut().steer(arrival) {
            Steer::Kernel => {
                if let Some(frame) = bytes.get(LINK..) {
                    node.arrive(now, from, frame);
                }
            }
            Steer::Ring => {
                let (slot, kept) = land_on_device(node, bytes);
                node.take_landed(
                    now,
                    from,
                    slot,
                    Landing::Region {
                        kept: &kept,
                        frame_len: bytes.len() - LINK,
                    },
                )
                .expect("a landing that matches its slot");
            }
        }
        self.collect();
    }

    /// Moves frames until the wire is empty, passing each through `filter` (false: lost);
    /// then runs timers, up to `until`.
    pub fn run(&mut self, until: u64, filter: &mut dyn FnMut(&Wire) -> bool) {
        loop {
            while let Some(wire) = self.wire.pop_front() {
                if filter(&wire) {
                    self.deliver(wire.0, wire.1, &wire.2);
                } else {
                    self.dropped.push(wire);
                }
            }
            if !run_timers(&mut self.nodes, &mut self.now, until) {
                return;
            }
            self.collect();
        }
    }

    pub fn settle(&mut self) {
        let until = self.now + 10 * LEASE_NS;
        self.run(until, &mut |_| true);
    }

    /// Checks that every transfer `to` received from `from` is right, and returns their
    /// numbers.
    pub fn check_received(&self, to: u32) -> Vec<(u32, u32)> {
        let mut seen = Vec::new();
        for (from, number, bytes) in &self.received[to as usize] {
            if *number >= 1000 {
                // A third node's frames make transfers of its own: not checked.
                continue;
            }
            for (at, b) in bytes.iter().enumerate() {
                assert_eq!(
                    *b,
                    byte(*from, to, *number, at),
                    "byte {at} of transfer {from}/{number} at {to} is wrong"
                );
            }
            assert!(
                !seen.contains(&(*from, *number)),
                "transfer {from}/{number} delivered twice at {to}"
            );
            seen.push((*from, *number));
        }
        seen
    }

    pub fn sent_ok(&self, id: SendId, from: u32) -> Option<bool> {
        self.sent[from as usize]
            .iter()
            .find(|(sent, _)| *sent == id)
            .map(|(_, ok)| *ok)
    }

    /// Checks that every send in `sent` completed, and that each of them, and nothing else,
    /// was delivered exactly once, byte for byte.
    pub fn assert_each_delivered_once(&self, sent: &[(u32, SendId)]) {
        let mut delivered = BTreeSet::new();
        for (to, log) in self.received.iter().enumerate() {
            let to = to as u32;
            for (from, number, bytes) in log {
                assert!(
                    delivered.insert((*from, to, *number)),
                    "transfer {from}/{number} delivered twice at {to}"
                );
                let wrong = bytes
                    .iter()
                    .enumerate()
                    .find(|&(at, b)| *b != byte(*from, to, *number, at));
                assert_eq!(wrong, None, "transfer {from}/{number} at {to}: wrong byte");
            }
        }
        for &(from, id) in sent {
            let outcome = self.sent[from as usize]
                .iter()
                .find(|(done, _)| *done == id)
                .map(|(_, ok)| *ok);
            assert_eq!(outcome, Some(true), "send {from}->{id:?} completed");
            assert!(
                delivered.remove(&(from, id.to, id.number)),
                "send {from}->{id:?} completed but was never delivered"
            );
        }
        assert!(delivered.is_empty(), "delivered, never sent: {delivered:?}");
    }
}

/// Whether a frame on the wire is LM-DATA of transfer `number` from `from` to `to`.
pub fn is_data_of(wire: &Wire, from: u32, to: u32, number: u32) -> bool {
    let view = FrameView::new_checked(&wire.2[LINK..]).unwrap();
    wire.0 == from
        && wire.1 == to
        && view.kind_code() == FrameKind::LmData as u8
        && view.msg_id() == number
}

/// The device writes `bytes` (link headers first) where the head slot of `node`'s fill queue
/// points, the steering rule having sent it there, and the engine sees it on the ring: the
/// slot, and the frame's headers as the packet filter keeps them.
pub fn land_on_device(node: &mut Station<HeapRegions>, bytes: &[u8]) -> (Slot, Vec<u8>) {
    let slot = node.fill_queue_mut().device_take(bytes.len() as u32);
    let (key, index, skip) = match slot {
        Slot::Placement {
            transfer, index, ..
        } => (transfer, index, 0),
        Slot::Void {
            transfer,
            index,
            skip,
            ..
        } => (transfer, index, skip),
        Slot::Ordinary { .. } => panic!("no ordinary chunks here"),
    };
    let start = geometry().landing_offset(index) + skip as usize;
    let region = node
        .region_of(key)
        .expect("a slot points into a live region");
    assert!(
        start + bytes.len() <= region.len(),
        "the rule let a frame write past its region"
    );
    region[start..start + bytes.len()].copy_from_slice(bytes);
    let landed = node.next_landing().expect("the device took a slot");
    assert_eq!(landed, slot, "mirror in step");
    (slot, bytes[LINK..HEADER].to_vec())
}

/// What has timers: a station of a job, or an open one.
pub trait Timed {
    fn poll_timeout(&self) -> Option<u64>;
    fn handle_timeout(&mut self, now: u64);
}

impl Timed for Station<HeapRegions> {
    fn poll_timeout(&self) -> Option<u64> {
        Station::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: u64) {
        Station::handle_timeout(self, now)
    }
}

impl Timed for nicmsg_lm::open::OpenStation<HeapRegions> {
    fn poll_timeout(&self) -> Option<u64> {
        nicmsg_lm::open::OpenStation::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: u64) {
        nicmsg_lm::open::OpenStation::handle_timeout(self, now)
    }
}

/// Runs the earliest timers of `nodes` if due by `until` (the clock `now` moves to them):
/// false if none is, the clock then at `until`.
pub fn run_timers<N: Timed>(nodes: &mut [N], now: &mut u64, until: u64) -> bool {
    match nodes.iter().filter_map(|n| n.poll_timeout()).min() {
        Some(at) if at <= until => {
            *now = (*now).max(at);
            for node in nodes.iter_mut() {
                if node.poll_timeout().is_some_and(|t| t <= *now) {
                    node.handle_timeout(*now);
                }
            }
            true
        }
        _ => {
            *now = (*now).max(until);
            false
        }
    }
}

//! Transfer numbers across the wrap: a long-running sender passes 2^32 transfers to one
//! receiver, and its numbers go on from `u32::MAX` to 0. Stations here start numbering a few
//! below `u32::MAX` (`StationConfig::first_number`) to get there in a few transfers. Checked:
//! every transfer is delivered exactly once byte for byte, every send completes only once its
//! receiver delivered it, and a new transfer is never taken for an old one. The harness is
//! `station_hostile.rs`'s, cut down: a simulated device that applies the steering rule and
//! writes each frame where its slot points, no ordinary chunks.

use std::collections::{BTreeSet, VecDeque};

use nicmsg_lm::admission::LEASE_NS;
use nicmsg_lm::fill::{Arrival, Slot, Steer};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{
    Event, HeapRegions, Landing, Received, Regions, SendError, SendId, Station, StationConfig,
    MAX_IN_FLIGHT_PER_PEER,
};
use nicmsg_lm::Geometry;
use nicmsg_wire::{FrameKind, FrameView, FRAME_HEADER_LEN};

const LINK: usize = 42;
const HEADER: usize = LINK + FRAME_HEADER_LEN;
const PAYLOAD: usize = 256;
const JOB: u32 = 7;

const A: u32 = 0;
const R: u32 = 1;
const C: u32 = 2;
/// A transfer of several frames, placed when its receiver admits it.
const LEN: usize = 20 * PAYLOAD - 17;
/// A transfer of one frame, always by copy.
const SHORT: usize = 100;

fn geometry() -> Geometry {
    Geometry::new(HEADER, PAYLOAD).unwrap()
}

/// The bytes of transfer `number` from `from` to `to`: position-dependent, so a misplaced
/// byte shows.
fn byte(from: u32, to: u32, number: u32, at: usize) -> u8 {
    let x = (u64::from(from) << 40 | u64::from(to) << 32 | u64::from(number)) ^ at as u64;
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// A frame on the wire: (from, to, link bytes + frame).
type Wire = (u32, u32, Vec<u8>);

struct Net {
    nodes: Vec<Station<HeapRegions>>,
    now: u64,
    wire: VecDeque<Wire>,
    /// Per node: transfers received (from, number, bytes).
    received: Vec<Vec<(u32, u32, Vec<u8>)>>,
    /// Per node: sends finished (id, ok).
    sent: Vec<Vec<(SendId, bool)>>,
}

impl Net {
    /// `nodes` stations, each numbering its transfers to each receiver from `first`.
    fn new(nodes: u32, first: u32) -> Self {
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
        }
    }

    /// A send, or `None` if the station refuses it for now (`SendError::Busy`).
    fn try_send(&mut self, from: u32, to: u32, len: usize) -> Option<SendId> {
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
    fn collect(&mut self) {
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
    fn deliver(&mut self, from: u32, to: u32, bytes: &[u8]) {
        let now = self.now;
        let node = &mut self.nodes[to as usize];
        let arrival = Arrival::of_frame(bytes, LINK);
        match node.fill_queue_mut().steer(arrival) {
            Steer::Kernel => node.arrive(now, from, &bytes[LINK..]),
            Steer::Ring => {
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
                region[start..start + bytes.len()].copy_from_slice(bytes);
                let kept = bytes[LINK..HEADER].to_vec();
                let landed = node.next_landing().expect("the device took a slot");
                assert_eq!(landed, slot, "mirror in step");
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
    fn run(&mut self, until: u64, filter: &mut dyn FnMut(&Wire) -> bool) {
        loop {
            while let Some(wire) = self.wire.pop_front() {
                if filter(&wire) {
                    self.deliver(wire.0, wire.1, &wire.2);
                }
            }
            let next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
            match next {
                Some(at) if at <= until => {
                    self.now = self.now.max(at);
                    let now = self.now;
                    for node in &mut self.nodes {
                        if node.poll_timeout().is_some_and(|t| t <= now) {
                            node.handle_timeout(now);
                        }
                    }
                    self.collect();
                }
                _ => {
                    self.now = self.now.max(until);
                    return;
                }
            }
        }
    }

    fn settle(&mut self) {
        let until = self.now + 10 * LEASE_NS;
        self.run(until, &mut |_| true);
    }

    /// Checks that every send in `sent` completed, and that each of them, and nothing else,
    /// was delivered exactly once, byte for byte.
    fn assert_each_delivered_once(&self, sent: &[(u32, SendId)]) {
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
fn is_data_of(wire: &Wire, from: u32, to: u32, number: u32) -> bool {
    let view = FrameView::new_checked(&wire.2[LINK..]).unwrap();
    wire.0 == from
        && wire.1 == to
        && view.kind_code() == FrameKind::LmData as u8
        && view.msg_id() == number
}

/// Whether the numbers of `sent` to `to` crossed the wrap: some before it, and 0.
fn crossed_the_wrap(sent: &[(u32, SendId)], to: u32) -> bool {
    let numbers: Vec<u32> = sent
        .iter()
        .filter(|(_, id)| id.to == to)
        .map(|(_, id)| id.number)
        .collect();
    numbers.contains(&u32::MAX) && numbers.contains(&0)
}

/// Loses about one frame in `one_in`, of every kind, by a fixed pseudo-random sequence.
fn lossy(one_in: u64) -> impl FnMut(&Wire) -> bool {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    move |_| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        !(x >> 33).is_multiple_of(one_in)
    }
}

/// Two senders to one receiver, and the receiver back to one of them, numbered from just
/// below the wrap: placed transfers of several frames and one-frame ones by copy, several in
/// flight at once, under loss.
#[test]
fn many_transfers_across_the_wrap_are_delivered_exactly_once_under_loss() {
    let mut net = Net::new(3, u32::MAX - 5);
    let sizes = [LEN, SHORT, 3 * PAYLOAD + 5, 1, PAYLOAD, 7 * PAYLOAD, SHORT];
    let mut lose = lossy(8);
    let mut sent = Vec::new();
    for round in 0..40 {
        for (from, to) in [(A, R), (C, R), (R, A)] {
            for k in 0..3 {
                let len = sizes[(round * 3 + k + from as usize) % sizes.len()];
                if let Some(id) = net.try_send(from, to, len) {
                    sent.push((from, id));
                }
            }
        }
        let until = net.now + 3_000_000;
        net.run(until, &mut lose);
    }
    let until = net.now + 2 * LEASE_NS;
    net.run(until, &mut lose);
    net.settle();
    assert!(sent.len() > 300, "sends taken: {}", sent.len());
    assert!(crossed_the_wrap(&sent, R) && crossed_the_wrap(&sent, A));
    net.assert_each_delivered_once(&sent);
    let stats = *net.nodes[R as usize].stats();
    assert!(
        stats.placed_transfers > 10 && stats.one_copy_transfers > 10,
        "both paths taken: {stats:?}"
    );
    assert!(stats.resends_asked > 0, "frames were lost: {stats:?}");
}

/// Frames of the transfers in `holding` (from, number), all to `R`, kept off the wire.
struct Hold {
    holding: Vec<(u32, u32)>,
    held: Vec<Wire>,
}

impl Hold {
    /// Moves frames until the wire is empty, holding those of the held transfers; time
    /// stands still, so nobody retries.
    fn run(&mut self, net: &mut Net) {
        let now = net.now;
        let (holding, held) = (&self.holding, &mut self.held);
        net.run(now, &mut |w| {
            if holding.iter().any(|&(from, n)| is_data_of(w, from, R, n)) {
                held.push(w.clone());
                return false;
            }
            true
        });
    }

    /// Lets the held transfer `which` go on: its frames are put back on the wire.
    fn release(&mut self, net: &mut Net, which: (u32, u32)) {
        self.holding.retain(|&h| h != which);
        let (go, keep) = self
            .held
            .drain(..)
            .partition(|w| is_data_of(w, which.0, R, which.1));
        self.held = keep;
        net.wire.extend(go);
    }
}

/// A long transfer numbered just before the wrap stays unfinished while short transfers to
/// the same receiver, numbered past it, finish, and other long ones after the wrap are
/// held a while too. The sender must measure the span of its unfinished numbers from the
/// oldest, the one before the wrap, not the smallest: measured from the smallest, it numbered
/// transfers more than the receiver's window past the old one, the receiver took the old one
/// for delivered, and its send completed with nothing delivered.
#[test]
fn a_slow_transfer_overtaken_by_many_short_ones_across_the_wrap_is_not_lost() {
    let mut net = Net::new(3, u32::MAX - 2);
    // C's transfer keeps R busy placing, so A's long ones go by copy.
    let c = net.try_send(C, R, LEN).expect("the first send");
    let mut hold = Hold {
        holding: vec![(C, c.number)],
        held: Vec::new(),
    };
    hold.run(&mut net);
    assert!(
        net.nodes[R as usize].admission().placing().is_some(),
        "R places C's transfer"
    );
    let mut sent = vec![(C, c)];
    let mut first_long = None;
    let mut refused = 0;
    for i in 0..200 {
        let long = i % 10 == 0;
        let len = if long { LEN } else { SHORT };
        let Some(id) = net.try_send(A, R, len) else {
            // Another long one may finish (the oldest after the first): the oldest
            // unfinished, before the wrap, stays.
            refused += 1;
            let first = first_long.expect("a long one is unfinished");
            let next = hold
                .holding
                .iter()
                .copied()
                .find(|&(from, n)| from == A && n != first);
            if let Some(next) = next {
                hold.release(&mut net, next);
            }
            hold.run(&mut net);
            continue;
        };
        sent.push((A, id));
        if long {
            first_long.get_or_insert(id.number);
            hold.holding.push((A, id.number));
        }
        hold.run(&mut net);
        if !long {
            let done = net.sent[A as usize].iter().any(|&(d, ok)| d == id && ok);
            assert!(done, "a short send completes at once");
        }
    }
    let first = first_long.unwrap();
    assert!(
        first > u32::MAX - 3,
        "the first long one is before the wrap"
    );
    assert!(crossed_the_wrap(&sent, R));
    assert!(refused > 0, "the span limit held the sender back");
    let newest = sent.iter().map(|(_, id)| id.number).filter(|&n| n < first);
    let span = newest.max().unwrap().wrapping_sub(first);
    assert!(
        span < MAX_IN_FLIGHT_PER_PEER,
        "numbered {span} past an unfinished transfer"
    );
    // The held frames arrive at last, and everything goes on.
    for which in hold.holding.clone() {
        hold.release(&mut net, which);
    }
    net.settle();
    net.assert_each_delivered_once(&sent);
}

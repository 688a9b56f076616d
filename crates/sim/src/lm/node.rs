//! One node of the LM simulation: a sender of transfers, and a receiver with a device that
//! lands frames at the addresses of its fill queue (the steering rule of `nicmsg_lm::fill`)
//! and an engine that processes what landed later than it landed, as a real engine does.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use nicmsg_lm::admission::{Admission, Admit, Asked, Control, Event as AdmissionEvent};
use nicmsg_lm::fill::{Arrival, FillQueue, Slot, Steer};
use nicmsg_lm::placement::{Copied, Landed, Placement};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::{Geometry, TransferKey};
use nicmsg_proto::Nanos;

use super::frames::{self, Parsed, HEADER_LEN};
use super::{Catalogue, LmStats, Violations};

/// Capacity of an ordinary chunk (AF_XDP's 2 KiB chunks hold any frame of a 1500-byte link).
pub const ORDINARY_CHUNK: u32 = 2048;
/// Slots of the device's fill queue.
pub const FILL_SLOTS: usize = 512;
/// Transfers of this many frames or more ask to be placed; shorter ones go the ordinary way.
pub const LM_MIN_FRAMES: u32 = 2;
/// Retransmissions of a transfer before its sender gives it up (its receiver is dead).
pub const MAX_SENDS: u32 = 60;

/// One outgoing transfer.
#[derive(Debug)]
pub struct Outgoing {
    pub to: u32,
    pub len: usize,
    pub number: u32,
    pub start: Nanos,
    state: SendState,
    /// The admission's number for it, while it asks or is admitted.
    asked: Option<u32>,
    key: u32,
    admitted: bool,
    /// Frames from the top down to this one were sent (admitted transfers are sent as granted).
    sent_floor: u32,
    retry_at: Nanos,
    sends: u32,
    /// The message in a send buffer with header holes, filled when the transfer starts.
    buffer: Option<HoleBuffer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendState {
    NotStarted,
    Asking,
    Sending,
    Delivered,
    GaveUp,
}

impl Outgoing {
    pub fn new(to: u32, len: usize, number: u32, start: Nanos) -> Self {
        Self {
            to,
            len,
            number,
            start,
            state: SendState::NotStarted,
            asked: None,
            key: 0,
            admitted: false,
            sent_floor: u32::MAX,
            retry_at: 0,
            sends: 0,
            buffer: None,
        }
    }

    pub fn is_delivered(&self) -> bool {
        self.state == SendState::Delivered
    }

    pub fn gave_up(&self) -> bool {
        self.state == SendState::GaveUp
    }
}

/// A transfer placed (or once placed) at this receiver.
#[derive(Debug)]
struct Placed {
    from: u32,
    placement: Placement,
    region: Vec<u8>,
    /// The sender's number, learnt from the first intact frame.
    number: Option<u32>,
    state: PlacedState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlacedState {
    Active,
    Delivered,
    /// Given up with slots left in the queue: the region waits until they drain.
    Quarantined,
}

/// A transfer received the ordinary way (one copy).
#[derive(Debug)]
struct OneCopy {
    buffer: Vec<u8>,
    got: Vec<bool>,
    count: u32,
}

/// A frame the device handed to the engine through the receive ring.
#[derive(Debug)]
struct RingEntry {
    slot: Slot,
    src: u32,
    len: usize,
    /// A frame that landed in a transfer's region: its headers, as the packet filter kept them
    /// when it steered the frame. In the region they are overwritten by the next frame to land
    /// (that is the point of LM), possibly before the engine looks; its payload is not.
    headers: Option<Vec<u8>>,
}

#[derive(Debug)]
pub struct Node {
    pub me: u32,
    pub alive: bool,
    geometry: Geometry,
    window: u32,
    admission: Admission,
    fill: FillQueue,
    ring: VecDeque<RingEntry>,
    chunks: Vec<Vec<u8>>,
    free_chunks: Vec<u32>,
    placed: BTreeMap<TransferKey, Placed>,
    next_key: u32,
    one_copy: BTreeMap<(u32, u32), OneCopy>,
    delivered: BTreeSet<(u32, u32)>,
    pub outgoing: Vec<Outgoing>,
    /// Frames to put on the network: (destination, bytes).
    pub out: Vec<(u32, Vec<u8>)>,
    catalogue: Rc<Catalogue>,
}

impl Node {
    pub fn new(
        me: u32,
        nodes: u32,
        geometry: Geometry,
        window: u32,
        ordinary_chunks: u32,
        catalogue: Rc<Catalogue>,
    ) -> Self {
        let mut fill = FillQueue::new(FILL_SLOTS);
        for chunk in 0..ordinary_chunks {
            fill.post(Slot::Ordinary {
                chunk,
                capacity: ORDINARY_CHUNK,
            })
            .expect("room for the ordinary chunks");
        }
        Self {
            me,
            alive: true,
            geometry,
            window,
            admission: Admission::new(me, nodes),
            fill,
            ring: VecDeque::new(),
            chunks: vec![vec![0; ORDINARY_CHUNK as usize]; ordinary_chunks as usize],
            free_chunks: Vec::new(),
            placed: BTreeMap::new(),
            next_key: 0,
            one_copy: BTreeMap::new(),
            delivered: BTreeSet::new(),
            outgoing: Vec::new(),
            out: Vec::new(),
            catalogue,
        }
    }

    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    pub fn has_ring_work(&self) -> bool {
        !self.ring.is_empty()
    }

    pub fn is_delivered(&self, from: u32, number: u32) -> bool {
        self.delivered.contains(&(from, number))
    }

    /// Placement slots of transfers that still wait in the fill queue (a clogged queue).
    pub fn placement_slots_waiting(&self) -> usize {
        self.placed
            .values()
            .filter(|p| p.state != PlacedState::Quarantined)
            .map(|p| p.placement.slots_in_queue() as usize)
            .sum()
    }

    pub fn active_placements(&self) -> usize {
        self.placed
            .values()
            .filter(|p| p.state == PlacedState::Active)
            .count()
    }

    /// The earliest time this node has something to do by itself.
    pub fn next_timer(&self) -> Option<Nanos> {
        let sends = self
            .outgoing
            .iter()
            .filter_map(|o| match o.state {
                SendState::NotStarted => Some(o.start),
                SendState::Sending => Some(o.retry_at),
                _ => None,
            })
            .min();
        [sends, self.admission.poll_timeout()]
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
        let arrival = match frames::peek_transfer(bytes) {
            Some((transfer, index)) => Arrival::Transfer {
                transfer,
                index,
                len: bytes.len() as u32,
            },
            None => Arrival::Ordinary {
                len: bytes.len() as u32,
            },
        };
        match self.fill.steer(arrival) {
            Steer::Kernel => {
                stats.kernel_frames += 1;
                self.handle_frame(now, src, bytes, stats, v);
            }
            Steer::Ring => {
                stats.ring_frames += 1;
                let slot = self.fill.device_take();
                self.land(slot, bytes, v);
                let headers = match slot {
                    Slot::Ordinary { .. } => None,
                    _ => Some(bytes[..bytes.len().min(HEADER_LEN)].to_vec()),
                };
                self.ring.push_back(RingEntry {
                    slot,
                    src,
                    len: bytes.len(),
                    headers,
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
            }
            | Slot::Void {
                transfer, index, ..
            } => {
                let Some(placed) = self.placed.get_mut(&transfer) else {
                    v.push(format!(
                        "node {}: a slot points into the freed region of {transfer:?}",
                        self.me
                    ));
                    return;
                };
                let start = placed.placement.geometry().landing_offset(index);
                let end = start + bytes.len();
                if end > placed.region.len() {
                    v.push(format!(
                        "node {}: frame of {} B at slot {index} of {transfer:?} writes past its region",
                        self.me,
                        bytes.len()
                    ));
                    return;
                }
                placed.region[start..end].copy_from_slice(bytes);
            }
        }
    }

    /// The engine's turn: takes what landed, from the receive ring, in order.
    pub fn engine_turn(&mut self, now: Nanos, stats: &mut LmStats, v: &mut Violations) {
        while let Some(entry) = self.ring.pop_front() {
            let taken = self.fill.engine_take();
            if taken != Some(entry.slot) {
                v.push(format!(
                    "node {}: the fill queue's mirror lost step",
                    self.me
                ));
                return;
            }
            self.take_from_ring(now, entry, stats, v);
        }
        self.refill();
    }

    fn take_from_ring(
        &mut self,
        now: Nanos,
        entry: RingEntry,
        stats: &mut LmStats,
        v: &mut Violations,
    ) {
        match entry.slot {
            Slot::Ordinary { chunk, .. } => {
                let bytes = self.chunks[chunk as usize][..entry.len].to_vec();
                self.handle_frame(now, entry.src, &bytes, stats, v);
                self.free_chunks.push(chunk);
            }
            Slot::Placement {
                transfer, index, ..
            } => {
                let landed = self.read_landed(transfer, index, &entry);
                self.take_placed(now, entry.src, transfer, index, &landed, stats, v);
            }
            Slot::Void {
                transfer, index, ..
            } => {
                let landed = self.read_landed(transfer, index, &entry);
                self.handle_frame(now, entry.src, &landed, stats, v);
                self.free_if_drained(transfer);
            }
        }
    }

    /// A frame that landed in slot `index` of `key`'s region: the headers the filter kept, and
    /// the rest from where it landed.
    fn read_landed(&self, key: TransferKey, index: u32, entry: &RingEntry) -> Vec<u8> {
        let placed = &self.placed[&key];
        let start = placed.placement.geometry().landing_offset(index);
        let mut frame = entry
            .headers
            .clone()
            .expect("a region's frame keeps its headers");
        let rest = start + frame.len()..start + entry.len;
        frame.extend_from_slice(&placed.region[rest]);
        frame
    }

    /// A frame landed in the placement slot of frame `index` of `key`.
    #[allow(clippy::too_many_arguments)]
    fn take_placed(
        &mut self,
        now: Nanos,
        src: u32,
        key: TransferKey,
        index: u32,
        landed: &[u8],
        stats: &mut LmStats,
        v: &mut Violations,
    ) {
        let me = self.me;
        let placed = self
            .placed
            .get_mut(&key)
            .expect("a slot's transfer is kept");
        let check = frames::parse(landed, src, me);
        let intact = matches!(
            check,
            Some(Parsed::Data { key: k, index: i, .. }) if k == key.0 && i == index && src == placed.from
        );
        if let Some(Parsed::Data { number, .. }) = check.filter(|_| intact) {
            if *placed.number.get_or_insert(number) != number {
                v.push(format!("node {me}: transfer {key:?} carries two numbers"));
            }
        }
        if placed.state != PlacedState::Active {
            // Landed after the transfer was given up or delivered: its bytes go the ordinary way.
            let region = &mut placed.region;
            placed.placement.landed(index, false, region);
            self.handle_frame(now, src, landed, stats, v);
            self.free_if_drained(key);
            return;
        }
        let region = &mut placed.region;
        match placed.placement.landed(index, intact, region) {
            Landed::Placed => {
                stats.placed_frames += 1;
                self.admission.progress(now, key);
                self.after_progress(key, stats, v);
            }
            Landed::Damaged => stats.damaged_landings += 1,
        }
    }

    /// Everything the engine does with a checked frame that came the ordinary way.
    fn handle_frame(
        &mut self,
        now: Nanos,
        src: u32,
        bytes: &[u8],
        stats: &mut LmStats,
        v: &mut Violations,
    ) {
        let Some(parsed) = frames::parse(bytes, src, self.me) else {
            stats.dropped_damaged += 1;
            return;
        };
        match parsed {
            Parsed::Admission(message) => self.handle_control(now, src, message),
            Parsed::Data {
                number,
                key,
                index,
                payload,
            } => self.data_by_copy(now, src, number, key, index, payload, stats, v),
            Parsed::Grant { key, floor } => self.granted(now, src, key, floor),
            Parsed::Delivered { number } => self.transfer_delivered(now, src, number),
        }
    }

    fn handle_control(&mut self, now: Nanos, src: u32, message: Control) {
        let geometry = self.geometry;
        let window = self.window;
        let me = self.me;
        let (placed, fill, next_key) = (&mut self.placed, &mut self.fill, &mut self.next_key);
        let mut admitted = None;
        let mut admit = |request: Admit| -> Option<TransferKey> {
            let frames = geometry.frames(request.len as usize);
            if frames < LM_MIN_FRAMES || placed.values().any(|p| p.state == PlacedState::Active) {
                return None;
            }
            *next_key += 1;
            let key = TransferKey(*next_key);
            let mut placement = Placement::new(key, geometry, request.len, window).ok()?;
            let region = region_fill(me, key, placement.region_len());
            if placement.post_slots(fill, &region, &mut |_| {}).is_err() {
                return None;
            }
            placed.insert(
                key,
                Placed {
                    from: request.peer,
                    placement,
                    region,
                    number: None,
                    state: PlacedState::Active,
                },
            );
            admitted = Some(key);
            Some(key)
        };
        self.admission.handle(now, src, message, &mut admit);
        self.take_admission_events(now);
        if let Some(key) = admitted {
            // The window is posted: the sender may send it (after the Accept, sent above).
            let floor = self.placed[&key].placement.grant_floor();
            self.out
                .push((src, frames::grant(self.me, src, key, floor)));
        }
    }

    /// Acts on what admission control decided, and sends its messages.
    fn take_admission_events(&mut self, now: Nanos) {
        while let Some(event) = self.admission.poll_event() {
            match event {
                AdmissionEvent::Admitted { transfer, key } => {
                    self.start_admitted(now, transfer, key)
                }
                AdmissionEvent::Refused { transfer, .. } => self.start_ordinary(now, transfer),
                AdmissionEvent::Ended { key, .. } => self.placement_ended(key),
            }
        }
        while let Some((to, message)) = self.admission.poll_transmit() {
            let bytes = frames::admission(self.me, to, message);
            self.out.push((to, bytes));
        }
    }

    fn placement_ended(&mut self, key: TransferKey) {
        let Some(placed) = self.placed.get_mut(&key) else {
            return;
        };
        if placed.state == PlacedState::Active {
            placed.placement.abort(&mut self.fill);
        }
        placed.state = PlacedState::Quarantined;
        self.free_if_drained(key);
    }

    fn free_if_drained(&mut self, key: TransferKey) {
        let drained = self.fill.slots_of(key) == 0
            && self
                .placed
                .get(&key)
                .is_some_and(|p| p.state == PlacedState::Quarantined);
        if drained {
            self.placed.remove(&key);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn data_by_copy(
        &mut self,
        now: Nanos,
        src: u32,
        number: u32,
        key: u32,
        index: u32,
        payload: &[u8],
        stats: &mut LmStats,
        v: &mut Violations,
    ) {
        if self.delivered.contains(&(src, number)) {
            stats.duplicates += 1;
            self.out
                .push((src, frames::delivered(self.me, src, number)));
            return;
        }
        let active = self
            .placed
            .get_mut(&TransferKey(key))
            .filter(|p| p.state == PlacedState::Active && p.from == src);
        if let Some(placed) = active {
            if index >= placed.placement.frames()
                || payload.len()
                    != placed
                        .placement
                        .geometry()
                        .payload_len(placed.placement.len(), index)
            {
                v.push(format!(
                    "node {}: an intact frame does not fit its transfer",
                    self.me
                ));
                return;
            }
            placed.number.get_or_insert(number);
            let region = &mut placed.region;
            match placed.placement.arrived_by_copy(index, payload, region) {
                Copied::Copied => stats.copied_frames += 1,
                Copied::Duplicate => stats.duplicates += 1,
                Copied::HeldForSlot => stats.held_for_slot += 1,
            }
            self.admission.progress(now, TransferKey(key));
            self.after_progress(TransferKey(key), stats, v);
            return;
        }
        self.one_copy_frame(src, number, index, payload, stats, v);
    }

    /// A frame of a transfer not placed here: reassembled in a buffer of its own.
    fn one_copy_frame(
        &mut self,
        src: u32,
        number: u32,
        index: u32,
        payload: &[u8],
        stats: &mut LmStats,
        v: &mut Violations,
    ) {
        let Some(len) = self.catalogue.len_of(src, number) else {
            v.push(format!(
                "node {}: data of unknown transfer {src}/{number}",
                self.me
            ));
            return;
        };
        let g = self.geometry;
        if index >= g.frames(len) || payload.len() != g.payload_len(len, index) {
            v.push(format!(
                "node {}: frame {index} does not fit transfer {src}/{number}",
                self.me
            ));
            return;
        }
        let entry = self
            .one_copy
            .entry((src, number))
            .or_insert_with(|| OneCopy {
                buffer: vec![0; len],
                got: vec![false; g.frames(len) as usize],
                count: 0,
            });
        if entry.got[index as usize] {
            stats.duplicates += 1;
            return;
        }
        entry.got[index as usize] = true;
        entry.count += 1;
        entry.buffer[g.payload_range(len, index)].copy_from_slice(payload);
        stats.copied_frames += 1;
        if entry.count as usize == entry.got.len() {
            let entry = self.one_copy.remove(&(src, number)).expect("just filled");
            stats.one_copy_transfers += 1;
            self.deliver(src, number, &entry.buffer, v);
        }
    }

    /// After a frame of a placed transfer: deliver it if complete, post more slots, grant.
    fn after_progress(&mut self, key: TransferKey, stats: &mut LmStats, v: &mut Violations) {
        let me = self.me;
        let placed = self
            .placed
            .get_mut(&key)
            .expect("progress of a kept transfer");
        if placed.placement.is_complete() {
            placed.placement.finish(&mut self.fill);
            placed.state = PlacedState::Delivered;
            let (from, number) = (
                placed.from,
                placed.number.expect("a complete transfer had frames"),
            );
            stats.placed_transfers += 1;
            stats.copied_bytes_placed += placed.placement.stats().copied_bytes;
            stats.placed_bytes += placed.placement.stats().placed_bytes;
            stats.restored_bytes += placed.placement.stats().restored_bytes;
            let message = placed.region[placed
                .placement
                .geometry()
                .receive_payload_range(placed.placement.len())]
            .to_vec();
            self.deliver(from, number, &message, v);
            return;
        }
        let posted = placed
            .placement
            .post_slots(&mut self.fill, &placed.region, &mut |_| {})
            .unwrap_or(0);
        if posted > 0 {
            let floor = placed.placement.grant_floor();
            let to = placed.from;
            self.out.push((to, frames::grant(me, to, key, floor)));
        }
    }

    fn deliver(&mut self, from: u32, number: u32, message: &[u8], v: &mut Violations) {
        if !self.delivered.insert((from, number)) {
            v.push(format!(
                "node {}: transfer {from}/{number} delivered twice",
                self.me
            ));
        }
        if let Some(bad) = Catalogue::first_wrong_byte(from, number, message) {
            v.push(format!(
                "node {}: transfer {from}/{number} ({} B) wrong at byte {bad}",
                self.me,
                message.len()
            ));
        }
        self.out
            .push((from, frames::delivered(self.me, from, number)));
    }

    /// Ordinary chunks come back to the fill queue only while nothing is placed, so the
    /// placement slots of the next admitted transfer find few ordinary slots ahead of them.
    fn refill(&mut self) {
        if self.active_placements() > 0 {
            return;
        }
        while let Some(chunk) = self.free_chunks.pop() {
            self.fill
                .post(Slot::Ordinary {
                    chunk,
                    capacity: ORDINARY_CHUNK,
                })
                .expect("room for a chunk that was in the queue");
        }
    }

    // ---- sending ----

    /// Starts and retransmits this node's transfers whose time has come.
    pub fn timers(&mut self, now: Nanos) {
        self.admission.handle_timeout(now);
        self.take_admission_events(now);
        for at in 0..self.outgoing.len() {
            let out = &self.outgoing[at];
            match out.state {
                SendState::NotStarted if out.start <= now => self.start(now, at),
                SendState::Sending if out.retry_at <= now => self.retransmit(now, at),
                _ => {}
            }
        }
        self.take_admission_events(now);
    }

    fn start(&mut self, now: Nanos, at: usize) {
        let (to, len) = (self.outgoing[at].to, self.outgoing[at].len);
        let mut buffer =
            HoleBuffer::new(self.geometry, len as u64).expect("a transfer the run sized");
        let message = Catalogue::bytes_range(self.me, self.outgoing[at].number, 0..len);
        buffer
            .write_at(0, &message)
            .expect("the message fits its buffer");
        self.outgoing[at].buffer = Some(buffer);
        if self.geometry.frames(len) < LM_MIN_FRAMES {
            self.send_ordinary(now, at);
            return;
        }
        match self.admission.request(now, to, len as u64) {
            Asked::Pending(transfer) => {
                let out = &mut self.outgoing[at];
                out.state = SendState::Asking;
                out.asked = Some(transfer);
            }
            Asked::Refused(_) => self.send_ordinary(now, at),
        }
    }

    fn find_asked(&self, transfer: u32) -> Option<usize> {
        self.outgoing.iter().position(|o| o.asked == Some(transfer))
    }

    fn start_admitted(&mut self, now: Nanos, transfer: u32, key: TransferKey) {
        let Some(at) = self.find_asked(transfer) else {
            return;
        };
        let out = &mut self.outgoing[at];
        if out.state != SendState::Asking {
            return;
        }
        out.state = SendState::Sending;
        out.key = key.0;
        out.admitted = true;
        out.retry_at = now + rto(out.len);
        // An admission always posts the top frame's slot first: send it at once, and the rest
        // as grants say their slots are posted (a grant that overtook the Accept was dropped).
        let top = self.geometry.frames(out.len) - 1;
        out.sent_floor = top;
        self.send_frames(at, vec![top]);
    }

    fn start_ordinary(&mut self, now: Nanos, transfer: u32) {
        if let Some(at) = self.find_asked(transfer) {
            self.outgoing[at].asked = None;
            self.send_ordinary(now, at);
        }
    }

    fn send_ordinary(&mut self, now: Nanos, at: usize) {
        let out = &mut self.outgoing[at];
        out.state = SendState::Sending;
        out.key = 0;
        out.sends = 1;
        out.retry_at = now + rto(out.len);
        let frames = self.geometry.frames(out.len);
        self.send_frames(at, (0..frames).collect());
    }

    fn granted(&mut self, now: Nanos, src: u32, key: u32, floor: u32) {
        let found = self.outgoing.iter().position(|o| {
            o.to == src && o.key == key && o.admitted && o.state == SendState::Sending
        });
        let Some(at) = found else {
            return;
        };
        let out = &mut self.outgoing[at];
        let top = out.sent_floor.min(self.geometry.frames(out.len));
        if floor >= top {
            return;
        }
        out.sent_floor = floor;
        // The receiver makes progress: the retransmission waits for it to stall.
        out.retry_at = now + rto(out.len);
        self.send_frames(at, (floor..top).rev().collect());
    }

    fn retransmit(&mut self, now: Nanos, at: usize) {
        let out = &mut self.outgoing[at];
        out.sends += 1;
        if out.sends > MAX_SENDS {
            // Its receiver is gone: so is everything this node asked of it.
            out.state = SendState::GaveUp;
            out.asked = None;
            let to = out.to;
            self.admission.peer_gone(now, to);
            self.take_admission_events(now);
            return;
        }
        out.retry_at = now + rto(out.len) * u64::from(out.sends.min(8));
        let frames = self.geometry.frames(out.len);
        // Every frame again, last first if admitted: those in already are dropped as
        // duplicates, a missing one lands in its slot if that is at the head of the queue and
        // is copied if it has none.
        let order: Vec<u32> = if out.admitted {
            out.sent_floor = 0;
            (0..frames).rev().collect()
        } else {
            (0..frames).collect()
        };
        self.send_frames(at, order);
    }

    fn send_frames(&mut self, at: usize, order: Vec<u32>) {
        let me = self.me;
        let out = &mut self.outgoing[at];
        let buffer = out
            .buffer
            .as_mut()
            .expect("a started transfer has its buffer");
        for index in order {
            let frame = frames::data_in_place(buffer, (me, out.to), out.number, out.key, index);
            self.out.push((out.to, frame.to_vec()));
        }
    }

    fn transfer_delivered(&mut self, now: Nanos, src: u32, number: u32) {
        let Some(at) = self
            .outgoing
            .iter()
            .position(|o| o.to == src && o.number == number)
        else {
            return;
        };
        let out = &mut self.outgoing[at];
        if out.state != SendState::Sending {
            return;
        }
        out.state = SendState::Delivered;
        out.buffer = None;
        if let (true, Some(transfer)) = (out.admitted, out.asked) {
            self.admission.finished(now, transfer);
            self.take_admission_events(now);
        }
    }
}

/// A retransmission interval that covers the transfer's time on a 10 Gbit/s link twice.
fn rto(len: usize) -> Nanos {
    2_000_000 + (len as u64 + 64 * HEADER_LEN as u64) * 8
}

/// A new region's bytes: a pattern no message has, so an unwritten byte shows.
fn region_fill(node: u32, key: TransferKey, len: usize) -> Vec<u8> {
    let seed = u64::from(node) << 32 | u64::from(key.0);
    (0..len)
        .map(|i| (crate::content::mix(seed ^ i as u64) | 1) as u8)
        .collect()
}

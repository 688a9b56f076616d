//! The receiving side of a station: admitted transfers placed in their regions, everything
//! else received by copy, and what the receiver tells the sender (grants, resends, delivered).

use std::collections::VecDeque;
use std::ops::Range;

use nicmsg_wire::Frame;

use crate::admission::{Admit, Nanos, PeerId, LEASE_NS};
use crate::bits::FrameSet;
use crate::fill::{FillQueue, Slot, TransferKey, MAX_OPEN_TRANSFERS};
use crate::placement::{Copied, Landed, Placement};
use crate::Geometry;

use super::frames::{self, DataFrame, Dropped, Flow, Parsed};
use super::{
    Event, Posted, RegionId, Regions, Station, MAX_ONE_COPY, MAX_ONE_COPY_BYTES, MIN_PLACED_FRAMES,
    MIN_WINDOW_UNDER_LOSS,
};

/// A transfer received whole.
#[derive(Debug)]
pub enum Received {
    /// Placed: the message is `range` of the region, lent until [`Station::release`].
    Placed {
        region: RegionId,
        range: Range<usize>,
    },
    /// Received by copy into a buffer of its own.
    Copied(Vec<u8>),
}

/// A frame the device put on the receive ring, as the host read it there.
#[derive(Debug, Clone, Copy)]
pub enum Landing<'a> {
    /// In an ordinary chunk: the frame from its frame header on.
    Chunk(&'a [u8]),
    /// In a region: the frame header the packet filter kept (the next landing may have
    /// covered it in the region), and the frame's length from its frame header on.
    Region { kept: &'a [u8], frame_len: usize },
}

/// A receive ring entry that does not match the mirror of the fill queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LandingError {
    #[error("the receive ring's entry does not match the fill queue's mirror")]
    Desync,
}

/// An admitted transfer at its receiver.
#[derive(Debug)]
pub(crate) struct Placed {
    from: PeerId,
    pub(crate) placement: Placement,
    pub(crate) region: RegionId,
    /// The sender's number, learnt from the first intact frame.
    number: Option<u32>,
    /// Given up with slots left in the queue: the region waits until they drain.
    quarantined: bool,
    /// Frames were dropped as held for their slot and some frame with a slot is still
    /// missing: a frame that comes twice is then answered with a RESEND, not a grant.
    dropped_held: bool,
    /// The highest missing frame when the window was last halved for a hole: one halving
    /// per hole, however many frames it holds back.
    shrunk_at: Option<u32>,
    /// Frames taken since the window last grew.
    taken_since_growth: u32,
    asks: Asks,
}

impl Placed {
    pub(crate) fn is_from(&self, peer: PeerId) -> bool {
        self.from == peer
    }

    pub(crate) fn is_active(&self) -> bool {
        !self.quarantined
    }
}

/// A transfer received by copy.
#[derive(Debug)]
pub(crate) struct OneCopy {
    buffer: Vec<u8>,
    got: FrameSet,
    /// The sender may send from here up.
    granted: u32,
    /// The lowest frame in: below it, frames are still on their way, not missing.
    lowest_in: u32,
    last_heard: Nanos,
    asks: Asks,
}

impl OneCopy {
    pub(crate) fn lease_deadline(&self) -> Nanos {
        self.last_heard + LEASE_NS
    }

    /// What to tell the sender after a frame: the frames missing between frames already in
    /// (a hole: a frame below them came first, so they were lost), or, after half a window of
    /// progress or a frame that came twice (the sender did not hear the last grant), how far
    /// down it may send.
    fn next_flow(
        &mut self,
        number: u32,
        window: u32,
        duplicate: bool,
        (now, gap): (Nanos, Nanos),
    ) -> Option<Flow> {
        let top = self.got.top_missing();
        if top > self.lowest_in {
            if !self.asks.may_ask(now, top, gap) {
                return None;
            }
            return Some(Flow::Resend {
                number,
                key: 0,
                top,
                bottom: self.got.missing_run_bottom(self.lowest_in, window),
            });
        }
        let floor = top.saturating_sub(window - 1);
        let progressed = floor + window / 2 <= self.granted || (floor == 0 && self.granted > 0);
        let regrant = duplicate && self.asks.may_ask(now, top, gap);
        if !progressed && !regrant {
            return None;
        }
        self.granted = self.granted.min(floor);
        Some(Flow::Grant {
            number,
            key: 0,
            top,
            bottom: floor,
        })
    }
}

/// When a receiver last asked for a missing frame, so it asks once per gap.
#[derive(Debug, Default, Clone, Copy)]
struct Asks {
    last: Option<(u32, Nanos)>,
}

impl Asks {
    fn may_ask(&mut self, now: Nanos, top: u32, gap: Nanos) -> bool {
        if let Some((asked, at)) = self.last {
            if asked == top && now < at + gap {
                return false;
            }
        }
        self.last = Some((top, now));
        true
    }
}

/// What admitting a transfer touches, borrowed apart from admission control, which decides.
struct PlaceTable<'a, R: Regions> {
    config: &'a super::StationConfig,
    fill: &'a mut FillQueue,
    regions: &'a mut R,
    placed: &'a mut std::collections::BTreeMap<TransferKey, Placed>,
    next_key: &'a mut u32,
    fill_out: &'a mut VecDeque<Posted>,
}

impl<R: Regions> PlaceTable<'_, R> {
    /// The key after the last one handed out, skipping 0 (the key of frames not admitted)
    /// and keys still held: keys wrap after 2^32 admissions, and a placement given up keeps
    /// its key until its slots drain. At most `MAX_OPEN_TRANSFERS` are held, so this ends.
    fn fresh_key(&self) -> TransferKey {
        let mut key = *self.next_key;
        loop {
            key = key.wrapping_add(1).max(1);
            if !self.placed.contains_key(&TransferKey(key)) {
                return TransferKey(key);
            }
        }
    }

    /// Admits a request if nothing else is placed and a region and slots are there for it.
    fn try_admit(&mut self, request: Admit) -> Option<TransferKey> {
        let geometry = self.config.geometry;
        let len = geometry.check_len(request.len).ok()?;
        let busy = self.placed.values().any(Placed::is_active);
        if geometry.frames(len) < MIN_PLACED_FRAMES
            || busy
            || self.placed.len() >= MAX_OPEN_TRANSFERS
        {
            return None;
        }
        let key = self.fresh_key();
        let mut placement = Placement::new(key, geometry, len as u64, self.config.window).ok()?;
        let region = self.regions.allocate(placement.region_len())?;
        let posted = post_slots(
            &mut placement,
            region,
            (self.fill, self.regions, self.fill_out),
        );
        if posted.is_err() {
            self.regions.free(region);
            return None;
        }
        *self.next_key = key.0;
        self.placed.insert(
            key,
            Placed {
                from: request.peer,
                placement,
                region,
                number: None,
                quarantined: false,
                dropped_held: false,
                shrunk_at: None,
                taken_since_growth: 0,
                asks: Asks::default(),
            },
        );
        Some(key)
    }
}

impl<R: Regions> Station<R> {
    /// A frame from `from` that came the ordinary way (the kernel's socket), from its frame
    /// header on. Anything malformed is dropped and counted.
    pub fn arrive(&mut self, now: Nanos, from: PeerId, frame: &[u8]) {
        match Frame::parse(frame) {
            Ok(frame) => self.arrive_parsed(now, from, frame),
            Err(_) => self.stats.dropped_malformed += 1,
        }
    }

    /// A frame that landed where any frame may (an ordinary chunk, a slot given up): in a job,
    /// it arrives from `from`; on an open station its sender is the conversation layer's to
    /// find from its names, so it is handed back ([`take_handed_back`](Self::take_handed_back)).
    fn arrive_or_hand_back(&mut self, now: Nanos, from: PeerId, frame: &[u8]) {
        if !self.config.open {
            self.arrive(now, from, frame);
        } else if self.handed_back.len() < super::MAX_HANDED_BACK {
            self.handed_back.push_back(frame.to_vec());
        } else {
            self.stats.dropped_handed_back += 1;
        }
    }

    /// Open stations: the next frame that landed where any frame may, for the conversation
    /// layer to take as if it came the ordinary way. Taken after every landing.
    pub fn take_handed_back(&mut self) -> Option<Vec<u8>> {
        self.handed_back.pop_front()
    }

    /// The peer whose transfer a placement slot of `key` belongs to.
    pub fn placed_from(&self, key: TransferKey) -> Option<PeerId> {
        self.placed.get(&key).map(|placed| placed.from)
    }

    /// [`arrive`](Self::arrive) for a frame parsed already (checksum and lengths).
    pub fn arrive_parsed(&mut self, now: Nanos, from: PeerId, frame: Frame<'_>) {
        if !self.is_peer(from) {
            self.stats.dropped_malformed += 1;
            return;
        }
        let who = (self.expected_pair(from), self.config.job);
        match frames::check(frame, who, &self.config.geometry) {
            Ok(Parsed::Control(control)) => self.handle_control(now, from, control),
            Ok(Parsed::Flow(flow)) => self.handle_flow(now, from, flow),
            Ok(Parsed::Data(data, payload)) => self.data_by_copy(now, from, data, payload),
            Err(Dropped::Malformed) => self.stats.dropped_malformed += 1,
            Err(Dropped::NotLm) => self.stats.dropped_not_lm += 1,
        }
    }

    fn handle_flow(&mut self, now: Nanos, from: PeerId, flow: Flow) {
        match flow {
            Flow::Grant {
                number,
                key,
                top,
                bottom,
            } => self.on_grant(now, from, (number, key), (top, bottom)),
            Flow::Resend {
                number,
                key,
                top,
                bottom,
            } => self.on_resend(now, from, (number, key), (top, bottom)),
            Flow::Delivered { number } => self.on_delivered(now, from, number),
        }
    }

    fn handle_control(&mut self, now: Nanos, from: PeerId, control: crate::admission::Control) {
        let mut admitted = None;
        let mut table = PlaceTable {
            config: &self.config,
            fill: &mut self.fill,
            regions: &mut self.regions,
            placed: &mut self.placed,
            next_key: &mut self.next_key,
            fill_out: &mut self.fill_out,
        };
        let mut admit = |request: Admit| {
            let key = table.try_admit(request)?;
            admitted = Some(key);
            Some(key)
        };
        self.admission.handle(now, from, control, &mut admit);
        self.take_admission_events(now);
        if let Some(key) = admitted {
            // The window is posted: the sender may send it (after the Accept, sent above).
            self.grant_placed(key);
        }
    }

    pub(super) fn placement_ended(&mut self, key: TransferKey) {
        let Some(placed) = self.placed.get_mut(&key) else {
            return;
        };
        if placed.is_active() {
            placed.placement.abort(&mut self.fill);
            placed.quarantined = true;
            self.voided = true;
        }
        self.free_if_drained(key);
        self.refill();
    }

    fn free_if_drained(&mut self, key: TransferKey) {
        let drained =
            self.fill.slots_of(key) == 0 && self.placed.get(&key).is_some_and(|p| p.quarantined);
        if drained {
            let placed = self.placed.remove(&key).expect("checked above");
            self.regions.free(placed.region);
        }
    }

    /// A frame of a transfer that came the ordinary way.
    fn data_by_copy(&mut self, now: Nanos, from: PeerId, data: DataFrame, payload: &[u8]) {
        if self.delivered[from as usize].contains(data.number) {
            self.stats.duplicates += 1;
            self.send_flow(
                from,
                Flow::Delivered {
                    number: data.number,
                },
            );
            return;
        }
        let key = TransferKey(data.key);
        let placed = self
            .placed
            .get(&key)
            .filter(|p| p.is_active() && p.from == from && p.placement.len() == data.len);
        if data.key != 0 && placed.is_some() {
            self.copy_into_region(now, key, data, payload);
        } else {
            self.copy_into_buffer(now, from, data, payload);
        }
    }

    /// A frame of a placed transfer that came the ordinary way (the caller checked that it
    /// is from the transfer's sender).
    fn copy_into_region(&mut self, now: Nanos, key: TransferKey, data: DataFrame, payload: &[u8]) {
        let placed = self.placed.get_mut(&key).expect("checked by the caller");
        if *placed.number.get_or_insert(data.number) != data.number {
            self.stats.dropped_malformed += 1;
            return;
        }
        let region = self.regions.bytes(placed.region);
        let copied = placed
            .placement
            .arrived_by_copy(data.index, payload, region);
        match copied {
            Copied::Copied => {
                self.stats.copied_frames += 1;
                self.stats.copied_bytes_placed += payload.len() as u64;
            }
            Copied::Duplicate => self.stats.duplicates += 1,
            Copied::HeldForSlot => self.stats.held_for_slot += 1,
        }
        if copied == Copied::HeldForSlot && self.blocked_ahead_of(payload.len()) {
            // Its slot waits behind one no frame of this transfer can take: were it held
            // again and again, the transfer would never end. It goes on by copy.
            self.admission.give_up_placing(now, key);
            self.take_admission_events(now);
            return;
        }
        self.admission.progress(now, key);
        self.after_placed_progress(now, key, copied);
    }

    /// Whether the fill queue's next slot is a void one too short for a frame of `payload`
    /// bytes: the rest of a void run a shorter frame took the start of (a device with
    /// scatter-gather fills a run's addresses one buffer at a time). Only shorter frames (a
    /// control frame, a transfer's last) can take it, and while none comes, every slot behind
    /// it waits.
    fn blocked_ahead_of(&self, payload: usize) -> bool {
        let frame = (self.config.geometry.header_len() + payload) as u32;
        matches!(self.fill.head(), Some(Slot::Void { capacity, .. }) if *capacity < frame)
    }

    /// A frame took the placement slot of frame `index` of `key`; its payload is in the
    /// region, its frame header in `kept`.
    fn take_placed(
        &mut self,
        now: Nanos,
        from: PeerId,
        key: TransferKey,
        index: u32,
        kept: &[u8],
        frame_len: usize,
    ) -> Result<(), super::LandingError> {
        let geometry = self.config.geometry;
        let who = (self.expected_pair(from), self.config.job);
        let Some(placed) = self.placed.get_mut(&key) else {
            self.stats.mirror_desyncs += 1;
            return Err(super::LandingError::Desync);
        };
        let region = self.regions.bytes(placed.region);
        let payload = landed_payload(region, &geometry, index, (kept.len(), frame_len));
        let check = Frame::parse_parts(kept, payload)
            .ok()
            .and_then(|frame| frames::check(frame, who, &geometry).ok());
        let intact = match check {
            Some(Parsed::Data(d, _)) => {
                d.key == key.0
                    && d.index == index
                    && d.len == placed.placement.len()
                    && from == placed.from
                    && *placed.number.get_or_insert(d.number) == d.number
            }
            _ => false,
        };
        if placed.quarantined {
            // Landed after the transfer was given up: its bytes go the ordinary way.
            let frame = intact.then(|| [kept, payload].concat());
            placed.placement.landed(index, false, region);
            self.reroute(now, from, key, frame.as_deref());
            return Ok(());
        }
        let landed = placed.placement.landed(index, intact, region);
        match landed {
            Landed::Placed => {
                self.stats.placed_frames += 1;
                self.admission.progress(now, key);
            }
            Landed::Damaged => self.stats.damaged_landings += 1,
        }
        // Damaged: the frame must come again, by copy (it has a place: it is asked for like
        // a frame lost).
        let seen = match landed {
            Landed::Placed => Copied::Copied,
            Landed::Damaged => Copied::HeldForSlot,
        };
        self.after_placed_progress(now, key, seen);
        Ok(())
    }

    /// After a frame of a placed transfer (`seen`: placed or copied, held for its slot, or
    /// in already): deliver the transfer if complete; else post more slots and grant them.
    /// A frame held for its slot shows a hole (the frame of the slot ahead was lost or
    /// damaged: ask for it and those behind it, which were dropped too); a frame in already
    /// shows a sender that did not hear the last grant (grant again).
    fn after_placed_progress(&mut self, now: Nanos, key: TransferKey, seen: Copied) {
        let placed = self
            .placed
            .get_mut(&key)
            .expect("progress of a kept transfer");
        if placed.placement.is_complete() {
            self.deliver_placed(now, key);
            return;
        }
        grow_window(placed, seen);
        // Slots are posted, and granted, half a window at a time: one grant per landing
        // would double the frames on the wire.
        let half_empty = placed.placement.slots_in_queue() <= placed.placement.window() / 2;
        let posted = if half_empty {
            let fill = (&mut self.fill, &mut self.regions, &mut self.fill_out);
            post_slots(&mut placed.placement, placed.region, fill).unwrap_or(0)
        } else {
            0
        };
        if posted > 0 {
            self.grant_placed(key);
        }
        let placed = &mut self.placed.get_mut(&key).expect("still kept");
        let top = placed.placement.highest_missing();
        let gap = self.config.resend_gap_ns;
        if seen == Copied::Copied || posted > 0 || !placed.asks.may_ask(now, top, gap) {
            return;
        }
        // Held for its slot: the frame of the slot ahead is missing, and so is every frame
        // held behind it. In twice: the sender probes a silence, or did not hear the last
        // grant; ask again for frames dropped as held (the last RESEND may have been lost),
        // else grant again (the frames may be on their way).
        let run = placed.placement.missing_run(2 * self.config.window);
        placed.dropped_held = run.is_some() && (placed.dropped_held || seen == Copied::HeldForSlot);
        let (true, Some((top, bottom))) = (placed.dropped_held, run) else {
            self.grant_placed(key);
            return;
        };
        shrink_window_for_hole(placed, top);
        let flow = Flow::Resend {
            number: placed.number.unwrap_or(0),
            key: key.0,
            top,
            bottom,
        };
        // To the transfer's sender, whoever the frame claimed to be from.
        let to = placed.from;
        self.send_flow(to, flow);
    }

    fn grant_placed(&mut self, key: TransferKey) {
        let placed = &self.placed[&key];
        let flow = Flow::Grant {
            number: placed.number.unwrap_or(0),
            key: key.0,
            top: placed.placement.highest_missing(),
            bottom: placed.placement.grant_floor(),
        };
        let to = placed.from;
        self.send_flow(to, flow);
    }

    fn deliver_placed(&mut self, now: Nanos, key: TransferKey) {
        let mut placed = self
            .placed
            .remove(&key)
            .expect("a complete transfer is kept");
        placed.placement.finish(&mut self.fill);
        let stats = *placed.placement.stats();
        self.stats.placed_transfers += 1;
        self.stats.placed_bytes += stats.placed_bytes;
        self.stats.restored_bytes += stats.restored_bytes;
        let range = placed
            .placement
            .geometry()
            .receive_payload_range(placed.placement.len());
        let number = placed.number.expect("a complete transfer had frames");
        self.deliver(
            placed.from,
            number,
            Received::Placed {
                region: placed.region,
                range,
            },
        );
        self.admission.complete(now, key);
        self.take_admission_events(now);
        self.refill();
    }

    /// A frame of a transfer not placed here: into a buffer of its own.
    fn copy_into_buffer(&mut self, now: Nanos, from: PeerId, data: DataFrame, payload: &[u8]) {
        let id = (from, data.number);
        if !self.one_copy.contains_key(&id) && !self.start_one_copy(now, id, data) {
            self.stats.dropped_no_memory += 1;
            return;
        }
        let geometry = self.config.geometry;
        let window = self.config.window;
        let gap = self.config.resend_gap_ns;
        let entry = self.one_copy.get_mut(&id).expect("started above");
        if entry.buffer.len() != data.len {
            self.stats.dropped_malformed += 1;
            return;
        }
        entry.last_heard = now;
        let duplicate = !entry.got.insert(data.index);
        if duplicate {
            self.stats.duplicates += 1;
        } else {
            entry.lowest_in = entry.lowest_in.min(data.index);
            entry.buffer[geometry.payload_range(data.len, data.index)].copy_from_slice(payload);
            self.stats.copied_frames += 1;
            self.stats.copied_bytes_one_copy += payload.len() as u64;
        }
        if entry.got.is_full() {
            let entry = self.one_copy.remove(&id).expect("just filled");
            self.stats.one_copy_transfers += 1;
            self.deliver(from, data.number, Received::Copied(entry.buffer));
            return;
        }
        let flow = entry.next_flow(data.number, window, duplicate, (now, gap));
        if let Some(flow) = flow {
            self.send_flow(from, flow);
        }
    }

    /// Takes on a transfer received by copy, if the limits allow.
    fn start_one_copy(&mut self, now: Nanos, id: (PeerId, u32), data: DataFrame) -> bool {
        // At most MAX_ONE_COPY entries to sum, once per transfer taken on.
        let held: usize = self.one_copy.values().map(|entry| entry.buffer.len()).sum();
        if self.one_copy.len() >= MAX_ONE_COPY || held + data.len > MAX_ONE_COPY_BYTES {
            return false;
        }
        let frames = self.config.geometry.frames(data.len);
        self.one_copy.insert(
            id,
            OneCopy {
                buffer: vec![0; data.len],
                got: FrameSet::new(frames),
                granted: frames.saturating_sub(self.config.window),
                lowest_in: frames,
                last_heard: now,
                asks: Asks::default(),
            },
        );
        true
    }

    /// Forgets transfers by copy whose sender went silent (it gave up, or is gone).
    pub(super) fn expire_one_copy(&mut self, now: Nanos) {
        let expired = &mut self.stats.one_copy_expired;
        self.one_copy.retain(|_, entry| {
            let alive = entry.lease_deadline() > now;
            *expired += u64::from(!alive);
            alive
        });
    }

    fn deliver(&mut self, from: PeerId, number: u32, message: Received) {
        self.delivered[from as usize].insert(number);
        self.events.push_back(Event::Received {
            from,
            number,
            message,
        });
        self.send_flow(from, Flow::Delivered { number });
    }

    /// The oldest slot the device took, which the next receive ring entry filled, for a
    /// device whose takes the mirror follows ([`FillQueue::device_take`]: a simulated one).
    pub fn next_landing(&mut self) -> Option<Slot> {
        self.fill.engine_take()
    }

    /// The oldest slot, which the next receive ring entry filled, for a device that counts
    /// its own takes (the packet filter's cursor): the entry itself says the device took it.
    /// `len` is the frame's length, link headers included: a frame shorter than a void run
    /// took only the start of it ([`FillQueue::device_take`]).
    pub fn next_device_landing(&mut self, len: u32) -> Option<Slot> {
        self.fill.head()?;
        self.fill.device_take(len);
        self.fill.engine_take()
    }

    /// The receive ring's next entry, from `from`, which filled `slot` (from
    /// [`next_landing`](Self::next_landing)).
    pub fn take_landed(
        &mut self,
        now: Nanos,
        from: PeerId,
        slot: Slot,
        landing: Landing<'_>,
    ) -> Result<(), super::LandingError> {
        match (slot, landing) {
            (Slot::Ordinary { chunk, .. }, Landing::Chunk(frame)) => {
                self.arrive_or_hand_back(now, from, frame);
                self.free_chunks.push(chunk);
                self.refill();
                Ok(())
            }
            (
                Slot::Placement {
                    transfer, index, ..
                },
                Landing::Region { kept, frame_len },
            ) => self.take_placed(now, from, transfer, index, kept, frame_len),
            (
                Slot::Void {
                    transfer,
                    index,
                    skip,
                    ..
                },
                Landing::Region { kept, frame_len },
            ) => {
                let frame = self.region_frame(transfer, (index, skip), kept, frame_len);
                self.reroute(now, from, transfer, Some(&frame));
                Ok(())
            }
            _ => {
                self.stats.mirror_desyncs += 1;
                Err(super::LandingError::Desync)
            }
        }
    }

    /// A frame that landed in a void slot (`skip` bytes past frame `index`'s place), put
    /// together to go the ordinary way (rare: the transfer was given up while its slots
    /// waited).
    fn region_frame(
        &mut self,
        key: TransferKey,
        (index, skip): (u32, u32),
        kept: &[u8],
        frame_len: usize,
    ) -> Vec<u8> {
        let geometry = self.config.geometry;
        let Some(placed) = self.placed.get(&key) else {
            return Vec::new();
        };
        let region = self.regions.bytes(placed.region);
        let start = geometry.landing_offset(index) + skip as usize + geometry.header_len();
        let len = frame_len.saturating_sub(kept.len());
        let payload = region.get(start..start + len).unwrap_or(&[]);
        [kept, payload].concat()
    }

    /// A landing the ordinary path takes after all (its transfer was given up): the frame, if
    /// it is one, arrives as if received by copy, and the transfer's slots drain.
    fn reroute(&mut self, now: Nanos, from: PeerId, key: TransferKey, frame: Option<&[u8]>) {
        if let Some(frame) = frame {
            self.arrive_or_hand_back(now, from, frame);
        }
        self.free_if_drained(key);
        self.refill();
    }

    /// Ordinary chunks go back to the fill queue only while nothing is placed, so the next
    /// admitted transfer's slots find few ordinary ones ahead of them.
    pub(super) fn refill(&mut self) {
        if self.placed.values().any(Placed::is_active) {
            return;
        }
        while let Some(chunk) = self.free_chunks.pop() {
            let slot = Slot::Ordinary {
                chunk,
                capacity: self.config.chunk_capacity,
            };
            if self.fill.post(slot).is_err() {
                self.free_chunks.push(chunk);
                return;
            }
            self.fill_out.push_back(Posted { slot, region: None });
        }
    }
}

/// Grows a placement's window, shrunk by [`shrink_window_for_hole`], by one slot for every
/// window of frames taken, back to the station's window: additive increase, so that under
/// steady loss the window stays near the run of frames between losses instead of regrowing
/// to the full window after every hole (each hole costs the frames in flight behind it). A
/// clean transfer keeps the full window throughout.
fn grow_window(placed: &mut Placed, seen: Copied) {
    let placement = &mut placed.placement;
    let window = placement.window();
    if seen != Copied::Copied || window >= placement.max_window() {
        return;
    }
    placed.taken_since_growth += 1;
    if placed.taken_since_growth >= window {
        placed.taken_since_growth = 0;
        placement.set_window(window + 1);
    }
}

/// Halves a placement's window when the receiver asks for a hole it has not asked for
/// before, down to [`MIN_WINDOW_UNDER_LOSS`]: every frame the sender sent behind the lost
/// one was dropped as held for its slot and is sent again, so a smaller window wastes less.
/// Only a RESEND shrinks it: frames merely out of order, which the grants absorb, do not.
fn shrink_window_for_hole(placed: &mut Placed, hole: u32) {
    if placed.shrunk_at == Some(hole) {
        return;
    }
    placed.shrunk_at = Some(hole);
    let window = placed.placement.window();
    placed
        .placement
        .set_window((window / 2).max(MIN_WINDOW_UNDER_LOSS));
}

/// Posts `placement`'s next slots, into `region`, to the fill queue's mirror and to the
/// host's list of fill addresses to post.
fn post_slots<R: Regions>(
    placement: &mut Placement,
    region: RegionId,
    (fill, regions, fill_out): (&mut FillQueue, &mut R, &mut VecDeque<Posted>),
) -> Result<u32, crate::fill::FillError> {
    placement.post_slots(fill, regions.bytes(region), &mut |slot| {
        fill_out.push_back(Posted {
            slot,
            region: Some(region),
        })
    })
}

/// The payload of frame `index` where it landed in `region`: after the frame's headers, of
/// the frame's length less the headers the filter kept (`(kept_len, frame_len)`); empty if the
/// region is too short (a damaged landing, which the frame check then refuses).
fn landed_payload<'a>(
    region: &'a [u8],
    geometry: &Geometry,
    index: u32,
    (kept_len, frame_len): (usize, usize),
) -> &'a [u8] {
    let start = geometry.landing_offset(index) + geometry.header_len();
    let len = frame_len.saturating_sub(kept_len);
    region.get(start..start + len).unwrap_or(&[])
}

//! # A station: LM transfers between nodes, end to end
//!
//! The other modules of this crate are LM's mechanisms one by one; a station puts them
//! together into what a node runs: it sends transfers from send buffers with header holes,
//! asks admission for each transfer of two frames or more, places admitted transfers in
//! receive regions by the fill queue it mirrors, receives everything else by copy, and makes
//! it all reliable. Sans-I/O like the rest: time is an argument, frames come in as bytes and
//! leave through [`Station::poll_transmit`], fill slots leave through [`Station::poll_fill`],
//! so the simulator (`nicmsg-sim --lm`) runs the code a process runs over AF_XDP.
//!
//! ## The flow of one transfer
//!
//! Frames are sent last first, admitted or not, each frame of a transfer once unless asked
//! again. The receiver paces the sender and asks for what is missing, in ADMISSION frames
//! (`nicmsg_wire::admission`):
//!
//! | message | receiver says | the sender |
//! |---|---|---|
//! | GRANT (top, bottom) | frames from `bottom` up have a place waiting (a placement slot, or room in the copy buffer) | sends the frames not sent yet down to `bottom` |
//! | RESEND (top, bottom) | frame `top` is missing (a lower frame came first, a landing was damaged, or a frame came twice) | sends again the frames it had sent in that range |
//! | DELIVERED | every byte is in, and handed to the application | completes the send; an admitted transfer ends its admission |
//!
//! An admitted sender sends the top frame at once (admission posts its slot first) and the
//! rest as grants come; one sent by copy sends a window at once. A sender that hears nothing
//! for its retry interval sends again what may be missing; after [`SILENCE_LIMIT_NS`] with
//! nothing heard the receiver is taken for gone (the send fails, admission forgets it).
//!
//! Calls, in order, like the protocol endpoint's: [`Station::send`] from the host;
//! [`Station::arrive`] for every frame from the ordinary path (the kernel's socket);
//! [`Station::next_landing`] then [`Station::take_landed`] for every entry of the receive
//! ring; [`Station::handle_timeout`] at [`Station::poll_timeout`]; then
//! [`Station::poll_fill`], [`Station::poll_transmit`] and [`Station::poll_event`] until
//! they return `None`.

mod dedup;
mod frames;
mod receiving;
mod regions;
mod sending;

use std::collections::{BTreeMap, VecDeque};

use nicmsg_wire::admission::AdmissionRepr;
use nicmsg_wire::FRAME_HEADER_LEN;

use crate::admission::{Admission, Event as AdmissionEvent, Nanos, PeerId};
use crate::fill::{FillQueue, Slot, TransferKey, MAX_FILL_SLOTS, WHOLE_FRAME_BUFFERS};
use crate::geometry::{Geometry, MAX_HEADER_LEN};
use crate::placement::MAX_WINDOW;
use crate::send_buffer::HoleBuffer;

pub use dedup::DEDUP_WINDOW;
pub use receiving::{Landing, LandingError, Received};
pub use regions::{HeapRegions, RegionId, Regions};
pub use sending::{SendError, SendFailed, SendId};

use dedup::DeliveredWindow;
use frames::Flow;
use receiving::{OneCopy, Placed};
use sending::Sending;

/// Transfers a station sends at once: admission's table of outgoing transfers is this size.
pub const MAX_SENDING: usize = crate::admission::MAX_OUTGOING;
/// How far ahead of its oldest unfinished transfer to one receiver a sender may number a new
/// one (so at most this many are unfinished): half the receiver's window of remembered
/// numbers, so a number it forgets is always of a finished transfer (`dedup`).
pub const MAX_IN_FLIGHT_PER_PEER: u32 = DEDUP_WINDOW / 2;
/// Silence from a receiver, while a send to it waits for an answer, before it is taken for
/// gone. Seconds, not retry intervals: a receiver that starts late, or a process descheduled
/// on a loaded machine, is silent for hundreds of milliseconds while alive (half a second
/// failed the benchmarks' LM ranks under load). Within it a sender probes every 16 ms at most
/// (`MAX_BACKOFF` intervals), so a dead receiver costs about 300 one-frame probes.
pub const SILENCE_LIMIT_NS: Nanos = 5_000_000_000;
/// Transfers received by copy at once, and the bytes their buffers may take: a sender that
/// would need more is dropped and counted, and retransmits later.
pub const MAX_ONE_COPY: usize = 64;
pub const MAX_ONE_COPY_BYTES: usize = 256 << 20;
/// Control frames waiting to leave; more are dropped (every one is repeated if it matters).
pub const MAX_QUEUED_CONTROL: usize = 1024;
/// Open stations: frames that landed where any frame may, waiting for the conversation layer
/// (it takes them after each landing, so one is the usual; more are dropped and counted).
pub const MAX_HANDED_BACK: usize = 64;
/// Transfers of fewer frames are sent by copy without asking: one frame has nothing to
/// defragment.
pub const MIN_PLACED_FRAMES: u32 = 2;
/// The smallest window a placement shrinks to under loss. Every frame sent behind a lost one
/// in the window is dropped as held for its slot and sent again, so a loss costs up to a
/// window of frames; at 8 a transfer still has several frames on the wire per round trip.
pub const MIN_WINDOW_UNDER_LOSS: u32 = 8;

/// How a station runs.
#[derive(Debug, Clone, Copy)]
pub struct StationConfig {
    pub me: PeerId,
    pub peers: u32,
    /// The job number every frame carries.
    pub job: u32,
    /// Frame cut and header length (link headers and the frame header).
    pub geometry: Geometry,
    /// Placement slots waiting at once, and frames a sender by copy may have ahead.
    pub window: u32,
    /// The device's fill queue: slots, each a run of addresses ([`crate::fill::Slot::addresses`]).
    pub fill_slots: usize,
    /// The device's buffer size: a frame longer fills several consecutive fill addresses
    /// (AF_XDP with scatter-gather); [`WHOLE_FRAME_BUFFERS`] if a frame never spans buffers.
    pub device_buffer_bytes: u32,
    /// Ordinary chunks kept in the fill queue while nothing is placed, for a device that
    /// has no other way for frames (the simulator's); 0 where the packet filter sends every
    /// other frame to the kernel's socket.
    pub ordinary_chunks: u32,
    pub chunk_capacity: u32,
    /// A sender's first retry interval; it grows while the receiver stays silent.
    pub retry_ns: Nanos,
    /// A receiver asks again for the same missing frame only after this long: longer than
    /// a resent window takes to arrive, or it would ask for frames on their way.
    pub resend_gap_ns: Nanos,
    /// The number of a sender's first transfer to each receiver, and the first a receiver
    /// takes from each sender (the ones before it count as delivered): every station of a job
    /// must use the same. 1 unless a test or the simulator starts just below `u32::MAX`, to
    /// reach in a few transfers the wrap a long-running node reaches after 2^32.
    pub first_number: u32,
    /// Peers added by address (`crate::open`): frames carry each conversation's names in
    /// `src` and `dst` ([`Station::poll_transmit_to`]) instead of node numbers, which the
    /// conversation layer checked before a frame reaches the station, and a receiver tells no
    /// one it is busy (it knows only the peers it talks to; a sender that asks is refused).
    pub open: bool,
}

impl StationConfig {
    pub fn new(me: PeerId, peers: u32, job: u32, geometry: Geometry) -> Self {
        Self {
            me,
            peers,
            job,
            geometry,
            window: MAX_WINDOW,
            fill_slots: MAX_FILL_SLOTS,
            device_buffer_bytes: WHOLE_FRAME_BUFFERS,
            ordinary_chunks: 0,
            chunk_capacity: 2048,
            retry_ns: 2_000_000,
            resend_gap_ns: 2_000_000,
            first_number: 1,
            open: false,
        }
    }
}

/// What the station's host must act on.
#[derive(Debug)]
pub enum Event {
    /// A whole transfer from `from`, its sender's number `number`.
    Received {
        from: PeerId,
        number: u32,
        message: Received,
    },
    /// A send finished; its buffer comes back.
    Sent {
        id: SendId,
        buffer: HoleBuffer,
        outcome: Result<(), SendFailed>,
    },
}

/// A fill slot to post to the device, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    pub slot: Slot,
    /// The region a placement slot points into; its place there is the geometry's landing
    /// offset of the slot's frame.
    pub region: Option<RegionId>,
}

/// What the station did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StationStats {
    pub transfers_sent: u64,
    pub transfers_failed: u64,
    pub placed_transfers: u64,
    pub one_copy_transfers: u64,
    /// Payload bytes that landed in place.
    pub placed_bytes: u64,
    /// Payload bytes copied in user space into the region of a placed transfer (frames that
    /// came the ordinary way: ahead of their slot, retransmitted, or after a damaged landing).
    /// The admitted path's goal is 0.
    pub copied_bytes_placed: u64,
    /// Payload bytes copied in user space into the buffers of transfers received by copy.
    pub copied_bytes_one_copy: u64,
    /// Bytes of a frame's tail kept aside and written back after the next landing.
    pub restored_bytes: u64,
    pub placed_frames: u64,
    pub copied_frames: u64,
    pub duplicates: u64,
    pub held_for_slot: u64,
    pub damaged_landings: u64,
    pub frames_sent: u64,
    pub frames_resent: u64,
    pub grants_sent: u64,
    pub resends_asked: u64,
    pub dropped_malformed: u64,
    pub dropped_not_lm: u64,
    pub dropped_no_memory: u64,
    pub dropped_control: u64,
    pub one_copy_expired: u64,
    pub mirror_desyncs: u64,
    /// Open stations: frames to a peer slot bound to no one, dropped.
    pub dropped_unreachable: u64,
    /// Open stations: frames that landed where any frame may, dropped because the
    /// conversation layer had not taken the ones before (`MAX_HANDED_BACK`).
    pub dropped_handed_back: u64,
}

/// A frame waiting to leave.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Control {
        to: PeerId,
        repr: AdmissionRepr,
    },
    /// Frames `top` down to `bottom` of a transfer being sent.
    Frames {
        id: SendId,
        top: u32,
        bottom: u32,
    },
}

/// The next frame [`Station::poll_transmit`] writes.
enum Next {
    Control { to: PeerId, repr: AdmissionRepr },
    Data { at: usize, index: u32 },
}

/// One node's LM: sender and receiver of transfers.
pub struct Station<R: Regions> {
    config: StationConfig,
    /// Bytes in front of the frame header in every frame.
    link_len: usize,
    admission: Admission,
    fill: FillQueue,
    regions: R,
    sending: Vec<Sending>,
    /// Per receiver, the next transfer number (it wraps: `dedup`).
    next_number: Vec<u32>,
    placed: BTreeMap<TransferKey, Placed>,
    next_key: u32,
    one_copy: BTreeMap<(PeerId, u32), OneCopy>,
    delivered: Vec<DeliveredWindow>,
    free_chunks: Vec<u32>,
    transmit: VecDeque<Pending>,
    /// Control frames in `transmit`.
    queued_controls: usize,
    scratch: [u8; MAX_HEADER_LEN],
    fill_out: VecDeque<Posted>,
    /// Placement slots became void since [`Station::take_voided`] was last asked.
    voided: bool,
    events: VecDeque<Event>,
    stats: StationStats,
    /// Open stations: frames that landed where any frame may, for the conversation layer.
    handed_back: VecDeque<Vec<u8>>,
}

impl<R: Regions> Station<R> {
    /// A station; its ordinary chunks are posted at once.
    pub fn new(config: StationConfig, regions: R) -> Self {
        let header_len = config.geometry.header_len();
        assert!(
            header_len >= FRAME_HEADER_LEN,
            "headers of {header_len} B hold no frame header"
        );
        assert!(
            config.me < config.peers,
            "node {} of {}",
            config.me,
            config.peers
        );
        let largest_frame = header_len + config.geometry.frame_payload();
        assert!(
            config.ordinary_chunks == 0
                || (config.device_buffer_bytes as usize >= largest_frame
                    && config.chunk_capacity as usize >= largest_frame),
            "ordinary chunks must take any frame, {largest_frame} B: a frame that fits none \
             (longer than a chunk, or spanning device buffers) could never drain one, and the \
             slots behind it would wait for ever"
        );
        let peers = config.peers as usize;
        let mut station = Self {
            config,
            link_len: header_len - FRAME_HEADER_LEN,
            admission: Admission::new(config.me, config.peers).telling_others(!config.open),
            fill: FillQueue::new(config.fill_slots, config.device_buffer_bytes),
            regions,
            sending: Vec::with_capacity(MAX_SENDING),
            next_number: vec![config.first_number; peers],
            placed: BTreeMap::new(),
            next_key: 0,
            one_copy: BTreeMap::new(),
            delivered: vec![DeliveredWindow::starting_at(config.first_number); peers],
            free_chunks: (0..config.ordinary_chunks).rev().collect(),
            transmit: VecDeque::new(),
            queued_controls: 0,
            scratch: [0; MAX_HEADER_LEN],
            fill_out: VecDeque::new(),
            voided: false,
            events: VecDeque::new(),
            stats: StationStats::default(),
            handed_back: VecDeque::new(),
        };
        station.refill();
        station
    }

    pub fn config(&self) -> &StationConfig {
        &self.config
    }

    pub fn stats(&self) -> &StationStats {
        &self.stats
    }

    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    pub fn regions(&mut self) -> &mut R {
        &mut self.regions
    }

    /// The fill queue's mirror. The device's side of it ([`FillQueue::steer`],
    /// [`FillQueue::device_take`]) is for a simulated device; a real one is the packet filter.
    pub fn fill_queue_mut(&mut self) -> &mut FillQueue {
        &mut self.fill
    }

    /// Whether placement slots not taken yet became void (a transfer given up) since last
    /// asked: a packet filter that holds records of the queue must then rewrite them
    /// ([`fill_slots`](Self::fill_slots)).
    pub fn take_voided(&mut self) -> bool {
        std::mem::take(&mut self.voided)
    }

    /// Slots in the fill queue, oldest first (taken by the device or not).
    pub fn fill_slots(&self) -> impl Iterator<Item = &Slot> {
        self.fill.slots()
    }

    /// The bytes of the region of `key`'s transfer (where a simulated device writes).
    pub fn region_of(&mut self, key: TransferKey) -> Option<&mut [u8]> {
        let region = self.placed.get(&key)?.region;
        Some(self.regions.bytes(region))
    }

    /// A region lent with [`Received::Placed`] comes back.
    pub fn release(&mut self, region: RegionId) {
        self.regions.free(region);
    }

    /// Transfers placed now (admitted and not given up).
    pub fn active_placements(&self) -> usize {
        self.placed.values().filter(|p| p.is_active()).count()
    }

    /// Placement slots of active transfers still in the fill queue.
    pub fn placement_slots_waiting(&self) -> usize {
        self.placed
            .values()
            .filter(|p| p.is_active())
            .map(|p| p.placement.slots_in_queue() as usize)
            .sum()
    }

    /// Transfers being sent or asking.
    pub fn sending(&self) -> usize {
        self.sending.len()
    }

    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let sends = self.sending.iter().filter_map(Sending::deadline).min();
        let one_copy = self.one_copy.values().map(OneCopy::lease_deadline).min();
        [sends, one_copy, self.admission.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    pub fn handle_timeout(&mut self, now: Nanos) {
        self.admission.handle_timeout(now);
        self.take_admission_events(now);
        // Giving up a send tells admission, and takes its events (`give_up`).
        self.retry_sends(now);
        self.expire_one_copy(now);
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn poll_fill(&mut self) -> Option<Posted> {
        self.fill_out.pop_front()
    }

    /// The next frame to send, to the peer given: `link_len` bytes for the link headers (the
    /// transport writes them, hence `mut`), then the frame. A data frame is its place in the
    /// send buffer (headers written into its hole, the payload not copied).
    pub fn poll_transmit(&mut self) -> Option<(PeerId, &mut [u8])> {
        let me = self.config.me;
        self.poll_transmit_to(&|to| Some((me, to)))
    }

    /// [`poll_transmit`](Self::poll_transmit) with the (`src`, `dst`) each frame carries given
    /// by `names_to` (a job's node numbers, an open station's conversation names); a frame to a
    /// peer it names nothing for (an open station's slot bound to no one) is dropped and
    /// counted.
    pub fn poll_transmit_to(
        &mut self,
        names_to: &dyn Fn(PeerId) -> Option<(u32, u32)>,
    ) -> Option<(PeerId, &mut [u8])> {
        let (job, link_len) = (self.config.job, self.link_len);
        let (next, pair) = loop {
            let next = self.next_transmission()?;
            let to = match next {
                Next::Control { to, .. } => to,
                Next::Data { at, .. } => self.sending[at].id().to,
            };
            if let Some(pair) = names_to(to) {
                break (next, pair);
            }
            self.stats.dropped_unreachable += 1;
        };
        match next {
            Next::Control { to, repr } => {
                let len = frames::write_control(&mut self.scratch, link_len, job, pair, repr);
                Some((to, &mut self.scratch[..len]))
            }
            Next::Data { at, index } => {
                self.stats.frames_sent += 1;
                let sending = &mut self.sending[at];
                let (id, key) = (sending.id(), sending.key());
                let frame = frames::write_data(
                    sending.buffer_mut(),
                    link_len,
                    job,
                    pair,
                    (id.number, key, index),
                );
                Some((id.to, frame))
            }
        }
    }

    /// Pops the next frame to send off the queue (ranges one frame at a time, skipping
    /// transfers finished meanwhile).
    fn next_transmission(&mut self) -> Option<Next> {
        loop {
            match self.transmit.pop_front()? {
                Pending::Control { to, repr } => {
                    self.queued_controls -= 1;
                    return Some(Next::Control { to, repr });
                }
                Pending::Frames { id, top, bottom } => {
                    if top > bottom {
                        self.transmit.push_front(Pending::Frames {
                            id,
                            top: top - 1,
                            bottom,
                        });
                    }
                    match self.sending_at(id) {
                        Some(at) if top < self.sending[at].frames() => {
                            return Some(Next::Data { at, index: top })
                        }
                        _ => continue,
                    }
                }
            }
        }
    }

    fn send_control(&mut self, to: PeerId, repr: AdmissionRepr) {
        if self.queued_controls >= MAX_QUEUED_CONTROL {
            self.stats.dropped_control += 1;
            return;
        }
        self.queued_controls += 1;
        self.transmit.push_back(Pending::Control { to, repr });
    }

    fn send_flow(&mut self, to: PeerId, flow: Flow) {
        match flow {
            Flow::Grant { .. } => self.stats.grants_sent += 1,
            Flow::Resend { .. } => self.stats.resends_asked += 1,
            Flow::Delivered { .. } => {}
        }
        self.send_control(to, flow.to_repr());
    }

    /// Acts on what admission control decided, and queues its messages.
    fn take_admission_events(&mut self, now: Nanos) {
        while let Some(event) = self.admission.poll_event() {
            match event {
                AdmissionEvent::Admitted { transfer, key } => {
                    self.start_admitted(now, transfer, key)
                }
                AdmissionEvent::Refused { transfer, .. } => self.start_refused(now, transfer),
                AdmissionEvent::Ended { key, .. } => self.placement_ended(key),
            }
        }
        while let Some((to, message)) = self.admission.poll_transmit() {
            self.send_control(to, message.to_repr());
        }
    }

    fn is_peer(&self, peer: PeerId) -> bool {
        peer < self.config.peers && peer != self.config.me
    }

    /// The (`src`, `dst`) a frame from `from` must carry, where the station checks it: in a job.
    /// On an open station the conversation layer matched the names to the peer already.
    fn expected_pair(&self, from: PeerId) -> Option<(u32, u32)> {
        (!self.config.open).then_some((from, self.config.me))
    }

    /// Gives up on everything with `peer` and starts its state afresh, for a conversation that
    /// ended (the peer restarted, or told this station it forgot it) or a slot bound to a new
    /// one: sends to it fail (`reason`), transfers from it are dropped (a placement is voided),
    /// control frames queued for it are dropped, and numbering starts over both ways.
    pub fn forget_peer(&mut self, now: Nanos, peer: PeerId, reason: SendFailed) {
        if !self.is_peer(peer) {
            return;
        }
        // Backwards, so that swap_remove moves only entries already looked at.
        for at in (0..self.sending.len()).rev() {
            if self.sending[at].id().to == peer {
                self.fail_send(at, reason);
            }
        }
        self.admission.reset_peer(now, peer);
        self.take_admission_events(now);
        let before = self.one_copy.len();
        self.one_copy.retain(|&(from, _), _| from != peer);
        self.stats.one_copy_expired += (before - self.one_copy.len()) as u64;
        // Frame ranges of its sends go too: numbering starts over, so a later send to the
        // slot has the same id as a failed one and would send the failed one's ranges as its
        // own (before admission answered, unrequested).
        let mut controls_dropped = 0;
        self.transmit.retain(|pending| match pending {
            Pending::Control { to, .. } => {
                controls_dropped += usize::from(*to == peer);
                *to != peer
            }
            Pending::Frames { id, .. } => id.to != peer,
        });
        self.queued_controls -= controls_dropped;
        let first = self.config.first_number;
        self.next_number[peer as usize] = first;
        self.delivered[peer as usize] = DeliveredWindow::starting_at(first);
    }

    /// Whether the station holds nothing for `peer`: no transfer to or from it, no admission
    /// business, no control frame waiting. A conversation layer reuses only such a peer's slot.
    pub fn holds_nothing_for(&self, peer: PeerId) -> bool {
        let sends = self.sending.iter().any(|s| s.id().to == peer);
        let copies = self.one_copy.keys().any(|&(from, _)| from == peer);
        let placed = self
            .placed
            .values()
            .any(|p| p.is_active() && p.is_from(peer));
        let controls = self
            .transmit
            .iter()
            .any(|pending| matches!(pending, Pending::Control { to, .. } if *to == peer));
        !(sends || copies || placed || controls) && self.admission.holds_nothing_for(peer)
    }
}

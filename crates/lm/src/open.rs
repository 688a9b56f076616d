//! # Peers added by address: an open station
//!
//! A [`Station`] of a job knows its nodes by number from the start. Applications written
//! against sockets have no job: a server binds an address, and any client sends to it. An
//! [`OpenStation`] is a station whose peers are socket addresses, bound to its peer slots as
//! they are sent to or heard from, up to a fixed number at once, and reused when they go
//! (`nicmsg_directory`, the same rules the protocol core's datagram sockets follow).
//!
//! Each binding of a slot is a *conversation*, named by each side with a fresh 32-bit name
//! that its frames carry in `src`; `dst` carries the other side's name as last heard (0 before
//! it has heard anything). Names, not numbers, tell apart what a frame belongs to:
//!
//! * a new peer, or a known one that restarted (another name, `dst` 0): a fresh slot, and what
//!   was pending with the old conversation fails ([`SendFailed::ConversationEnded`]);
//! * a frame of a conversation this station has no record of (it forgot it, or an earlier
//!   life of this process held it): answered with RESET, an ADMISSION frame, so the sender's
//!   pending transfers fail at once and its next transfer starts a new conversation;
//! * a late frame of a conversation given up on: answered with RESET from the retired slot,
//!   never taken as a new conversation (a late retransmission of a transfer already
//!   delivered would otherwise be delivered again).
//!
//! Transfer numbers, admission and placement run per slot as in a job, so within one
//! conversation every transfer is delivered once, whole, or its send fails. A receiver does
//! not tell others when it places a transfer (it knows only the peers it talks to): a sender
//! asks, and is refused while the receiver is busy. Sans-I/O like the station: time is an
//! argument, the host moves the frames.

use std::collections::VecDeque;
use std::net::SocketAddr;

use nicmsg_directory::{Arrival, Directory};
use nicmsg_wire::admission::{AdmissionOp, AdmissionRepr};
use nicmsg_wire::{emit_headers, seal, Frame, FrameKind, FRAME_HEADER_LEN};

use crate::admission::{Nanos, PeerId};
use crate::fill::Slot;
use crate::geometry::MAX_HEADER_LEN;
use crate::send_buffer::HoleBuffer;
use crate::station::{
    Event, Landing, LandingError, Received, Regions, SendError, SendFailed, SendId, Station,
    StationConfig, MAX_SENDING, SILENCE_LIMIT_NS,
};

/// Most peers an open station keeps state for at once: each costs its numbering, its window of
/// delivered transfers and admission's entries, a few hundred bytes; the bound keeps a server's
/// memory fixed however many clients come and go.
pub const MAX_OPEN_PEERS: u32 = 4096;
/// How long a slot keeps its conversation after the peer was last heard (an active one, before
/// it may be reused for another peer) or after it was given up (a retired one, answering late
/// frames with RESET): longer than a sender keeps retransmitting to a silent receiver
/// ([`SILENCE_LIMIT_NS`]), so no late frame of a conversation finds its slot taken by another.
pub const QUIET_NS: Nanos = 2 * SILENCE_LIMIT_NS;
/// RESET frames waiting to leave; more are dropped (the peer's next frame asks again).
pub const MAX_QUEUED_RESETS: usize = 1024;

/// A send of an open station, unique for the station's life (numbers start over with each
/// conversation, so a peer's number does not name a send across restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpenSendId(pub u64);

/// What the host of an open station must act on.
#[derive(Debug)]
pub enum OpenEvent {
    /// A whole transfer from `from`, its number in that conversation `number`.
    Received {
        from: SocketAddr,
        number: u32,
        message: Received,
    },
    /// A send finished; its buffer comes back.
    Sent {
        id: OpenSendId,
        to: SocketAddr,
        buffer: HoleBuffer,
        outcome: Result<(), SendFailed>,
    },
}

/// Why an open station refused a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenSendError {
    #[error(transparent)]
    Station(#[from] SendError),
    #[error("every peer slot holds a conversation that is not done yet; retry later")]
    TableFull,
    #[error("a transfer to this station's own address")]
    ToSelf,
}

/// What the conversation layer counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenStats {
    /// Frames with no conversation name, or a RESET of nothing known: dropped.
    pub stale: u64,
    /// Frames of a new peer while every slot was busy: dropped (the peer retransmits).
    pub table_full: u64,
    /// Peers that started a new conversation at a known address (restarted, or gave up on the
    /// old one): the old one's pending transfers failed.
    pub restarts: u64,
    /// Frames of conversations this station had no record of, answered with RESET.
    pub forgotten: u64,
    /// Late frames of conversations given up on, answered with RESET.
    pub late_frames: u64,
    pub resets_sent: u64,
    pub resets_dropped: u64,
    /// RESETs taken: a peer ended a conversation, and its pending transfers failed.
    pub resets_taken: u64,
    /// Frames not parsed as a frame at all.
    pub malformed: u64,
}

/// A station whose peers are socket addresses (see the module documentation).
pub struct OpenStation<R: Regions> {
    station: Station<R>,
    directory: Directory,
    /// Sends in flight: the station's id, the open id and the destination.
    sends: Vec<(SendId, OpenSendId, SocketAddr)>,
    next_send: u64,
    events: VecDeque<OpenEvent>,
    /// RESET frames to send: to whom, with (`src`, `dst`).
    resets: VecDeque<(SocketAddr, (u32, u32))>,
    scratch: [u8; MAX_HEADER_LEN],
    link_len: usize,
    stats: OpenStats,
}

impl<R: Regions> OpenStation<R> {
    /// An open station at `local` keeping state for up to `capacity` peers at once, naming
    /// its conversations from `incarnation` (random and nonzero, different for every life of
    /// the process at that address). `config` gives the job number, geometry and the
    /// station's other settings; its node and peer numbers are the slots'.
    pub fn new(
        mut config: StationConfig,
        (local, capacity, incarnation): (SocketAddr, u32, u32),
        regions: R,
    ) -> Self {
        assert!(
            (1..=MAX_OPEN_PEERS).contains(&capacity),
            "open stations keep 1..={MAX_OPEN_PEERS} peers"
        );
        assert!(incarnation != 0, "an incarnation is nonzero");
        config.me = 0;
        config.peers = capacity + 1;
        config.open = true;
        let mut directory = Directory::new(incarnation, capacity, QUIET_NS);
        directory.set_own_address(local);
        Self {
            station: Station::new(config, regions),
            directory,
            sends: Vec::with_capacity(MAX_SENDING),
            next_send: 1,
            events: VecDeque::new(),
            resets: VecDeque::new(),
            scratch: [0; MAX_HEADER_LEN],
            link_len: config.geometry.header_len() - FRAME_HEADER_LEN,
            stats: OpenStats::default(),
        }
    }

    /// The station underneath: its counters, fill queue, regions and landings. Frames must
    /// come in through [`arrive`](Self::arrive) and [`take_landed`](Self::take_landed), and
    /// sends go through [`send`](Self::send), or the conversation layer is bypassed.
    pub fn station(&self) -> &Station<R> {
        &self.station
    }

    /// As [`station`](Self::station), for the device's side: fill slots, the mirror, regions.
    pub fn station_mut(&mut self) -> &mut Station<R> {
        &mut self.station
    }

    pub fn stats(&self) -> &OpenStats {
        &self.stats
    }

    /// Whether the send `id` has not reported yet: in flight, or its [`OpenEvent::Sent`]
    /// waiting to be polled.
    pub fn is_pending(&self, id: OpenSendId) -> bool {
        let in_flight = self.sends.iter().any(|&(_, open, _)| open == id);
        in_flight
            || self
                .events
                .iter()
                .any(|event| matches!(event, OpenEvent::Sent { id: done, .. } if *done == id))
    }

    /// The address bound to peer slot `peer` (a placed transfer's sender).
    pub fn address_of(&self, peer: PeerId) -> Option<SocketAddr> {
        self.directory.address(peer)
    }

    /// Sends the transfer in `buffer` to `to`, starting a conversation with it if there is
    /// none; the buffer comes back with [`OpenEvent::Sent`].
    pub fn send(
        &mut self,
        now: Nanos,
        to: SocketAddr,
        buffer: HoleBuffer,
    ) -> Result<OpenSendId, (OpenSendError, HoleBuffer)> {
        let station = &self.station;
        let peer = self
            .directory
            .resolve_send(now, to, &|p| station.holds_nothing_for(p));
        self.start_rebound(now);
        // The failures of a conversation the slot held before go out under their own ids
        // before a send of the new one may take the same station id (numbers start over).
        self.collect_events(now);
        let peer = match peer {
            Some(0) => return Err((OpenSendError::ToSelf, buffer)),
            Some(peer) => peer,
            None => return Err((OpenSendError::TableFull, buffer)),
        };
        let sent = self.station.send(now, peer, buffer);
        let outcome = match sent {
            Ok(id) => {
                let open = OpenSendId(self.next_send);
                self.next_send += 1;
                self.sends.push((id, open, to));
                Ok(open)
            }
            Err((error, buffer)) => Err((OpenSendError::Station(error), buffer)),
        };
        self.collect_events(now);
        outcome
    }

    /// A frame from `from` that came the ordinary way, from its frame header on.
    pub fn arrive(&mut self, now: Nanos, from: SocketAddr, frame: &[u8]) {
        let Ok(parsed) = Frame::parse(frame) else {
            self.stats.malformed += 1;
            return;
        };
        let h = parsed.header;
        let is_reset = h.kind == FrameKind::Admission
            && AdmissionRepr::from_header(&h).is_ok_and(|repr| repr.op == AdmissionOp::Reset);
        let station = &self.station;
        let arrival = self
            .directory
            .resolve_arrival(now, (from, h.src, h.dst), !is_reset, &|p| {
                station.holds_nothing_for(p)
            });
        self.start_rebound(now);
        match arrival {
            Arrival::Peer(peer) if !self.directory.is_active(peer) => {
                // A late frame of a conversation given up on: its sender is told, unless the
                // frame tells the same.
                if !is_reset {
                    self.stats.late_frames += 1;
                    self.queue_reset(from, peer, h.src);
                }
            }
            Arrival::Peer(peer) if is_reset => {
                self.stats.resets_taken += 1;
                self.end_conversation(now, peer, SendFailed::ConversationEnded);
            }
            Arrival::Peer(peer) => self.station.arrive_parsed(now, peer, parsed),
            Arrival::Restarted { old, new } => {
                self.stats.restarts += 1;
                self.end_conversation(now, old, SendFailed::ConversationEnded);
                match new {
                    Some(peer) => self.station.arrive_parsed(now, peer, parsed),
                    None => self.stats.table_full += 1,
                }
            }
            Arrival::Forgotten(peer) => {
                self.stats.forgotten += 1;
                self.queue_reset(from, peer, h.src);
            }
            Arrival::Stale => self.stats.stale += 1,
            Arrival::Full => self.stats.table_full += 1,
        }
        self.collect_events(now);
    }

    /// A frame the device wrote into `slot` (its headers as the packet filter kept them, and
    /// its sender's address): a placed frame is checked against its transfer's sender; a
    /// frame that landed where any frame may is taken as if it came the ordinary way.
    pub fn take_landed(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        slot: Slot,
        landing: Landing<'_>,
    ) -> Result<(), LandingError> {
        // A placed frame's sender is its transfer's; one from another address is taken for
        // damaged (a peer that is not this slot's is the placement's number past the last).
        let peer = slot
            .transfer()
            .and_then(|key| self.station.placed_from(key))
            .filter(|&peer| self.directory.address(peer) == Some(from))
            .unwrap_or(self.station.config().peers);
        let taken = self.station.take_landed(now, peer, slot, landing);
        while let Some(frame) = self.station.take_handed_back() {
            self.arrive(now, from, &frame);
        }
        self.collect_events(now);
        taken
    }

    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.station.poll_timeout()
    }

    pub fn handle_timeout(&mut self, now: Nanos) {
        self.station.handle_timeout(now);
        self.collect_events(now);
    }

    pub fn poll_event(&mut self) -> Option<OpenEvent> {
        self.events.pop_front()
    }

    /// The next frame to send and where to: as [`Station::poll_transmit`], RESETs first.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, &mut [u8])> {
        if let Some((to, (src, dst))) = self.resets.pop_front() {
            self.stats.resets_sent += 1;
            let len = self.write_reset(src, dst);
            return Some((to, &mut self.scratch[..len]));
        }
        let directory = &self.directory;
        // Names straight from the directory: a frame carries its conversation's as they are
        // when it leaves (the peer's is learnt from its frames).
        let names_to = |peer| directory.address(peer).map(|_| directory.wire_names(peer));
        let (peer, frame) = self.station.poll_transmit_to(&names_to)?;
        let to = directory
            .address(peer)
            .expect("a reachable peer has an address");
        Some((to, frame))
    }

    /// Slots bound to a new conversation start with nothing of the old one.
    fn start_rebound(&mut self, now: Nanos) {
        while let Some(peer) = self.directory.take_rebound() {
            self.station
                .forget_peer(now, peer, SendFailed::ConversationEnded);
        }
    }

    /// The conversation in `peer` is over: its slot retires (answering late frames with
    /// RESET) and what was pending in it fails for `reason`.
    fn end_conversation(&mut self, now: Nanos, peer: PeerId, reason: SendFailed) {
        self.directory.retire(now, peer);
        self.station.forget_peer(now, peer, reason);
    }

    /// Tells `to` that the conversation it named `theirs` is over, from slot `peer`.
    fn queue_reset(&mut self, to: SocketAddr, peer: PeerId, theirs: u32) {
        if self.resets.len() == MAX_QUEUED_RESETS {
            self.stats.resets_dropped += 1;
            return;
        }
        let mine = self.directory.wire_names(peer).0;
        self.resets.push_back((to, (mine, theirs)));
    }

    fn write_reset(&mut self, src: u32, dst: u32) -> usize {
        let repr = AdmissionRepr {
            op: AdmissionOp::Reset,
            number: 0,
            len: 0,
            key: 0,
        };
        let header = repr
            .to_header(self.station.config().job, src, dst)
            .expect("a RESET is a valid admission frame");
        let frame = &mut self.scratch[self.link_len..self.link_len + FRAME_HEADER_LEN];
        emit_headers(&header, None, frame).expect("room for a frame header");
        seal(frame, &[]);
        self.link_len + FRAME_HEADER_LEN
    }

    /// Takes the station's events, with addresses for slots. A send that failed for silence
    /// ends its conversation (the peer is gone: the slot retires, and the other transfers with
    /// it fail too), which may add events: taken in the same loop.
    fn collect_events(&mut self, now: Nanos) {
        while let Some(event) = self.station.poll_event() {
            match event {
                Event::Received {
                    from,
                    number,
                    message,
                } => {
                    let Some(from) = self.directory.address(from) else {
                        // Not reached (slots are bound before anything arrives through them,
                        // and never unbound); a placed one's region must not stay lent.
                        if let Received::Placed { region, .. } = message {
                            self.station.release(region);
                        }
                        continue;
                    };
                    self.events.push_back(OpenEvent::Received {
                        from,
                        number,
                        message,
                    });
                }
                Event::Sent {
                    id,
                    buffer,
                    outcome,
                } => {
                    if outcome == Err(SendFailed::PeerUnreachable) {
                        self.end_conversation(now, id.to, SendFailed::PeerUnreachable);
                    }
                    let Some(at) = self.sends.iter().position(|(sent, ..)| *sent == id) else {
                        continue;
                    };
                    // In order: a station id repeats only once the earlier send is gone.
                    let (_, open, to) = self.sends.remove(at);
                    self.events.push_back(OpenEvent::Sent {
                        id: open,
                        to,
                        buffer,
                        outcome,
                    });
                }
            }
        }
    }
}

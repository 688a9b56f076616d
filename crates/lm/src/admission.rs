//! Admission control: the paper's table 1 and figure 3, made reliable.
//!
//! A receiver places at most one transfer at a time in place (its device's fill queue holds
//! the addresses of one transfer's frames), so a sender asks before it sends a transfer that
//! way, and every node learns which receivers are busy so it does not ask them in vain.
//!
//! | paper | here | from, to | meaning |
//! |---|---|---|---|
//! | LM_REQ | [`Control::Request`] | sender, receiver | may I send `len` bytes to be placed? |
//! | LM_ACQ_OK | [`Control::Accept`] | receiver, sender | yes; tag its frames with this key |
//! | LM_ACQ_REJ | [`Control::Reject`] | receiver, sender | no: send it the ordinary way |
//! | LM_ENDME | [`Control::End`] | sender, receiver | the transfer is over (or given up) |
//! | LM_APPEND_ADDR | [`Control::Busy`] | receiver, every node | I am placing a transfer |
//! | LM_REMOVE_ADDR | [`Control::Free`] | receiver, every node | I am not any more |
//!
//! What the paper leaves out and a network needs: every message is retransmitted until it is
//! answered ([`Control::EndAck`] and [`Control::NoticeAck`] answer the last three), and every
//! one is idempotent, so losing, duplicating or reordering them changes nothing:
//!
//! * transfer numbers grow per sender; a receiver rejects a request for a transfer no newer
//!   than the newest it has seen from that sender unless it is the one it is placing (a late
//!   duplicate cannot admit a finished transfer again);
//! * `Busy` and `Free` carry the receiver's admission epoch; a node keeps the newest, and for
//!   the same epoch `Free` wins (a `Busy` overtaken by its `Free` cannot mark a receiver busy
//!   for ever);
//! * transfer numbers and epochs wrap past `u32::MAX` (a long-running node passes 2^32 of
//!   them), so "newer" is serial-number order (`crate::serial`): compared by size, after the
//!   wrap every request was stale (its sender was never placed again) and every notice old;
//! * a request unanswered after [`MAX_TRIES`] sends is given up (the sender sends the ordinary
//!   way), and so is an admitted transfer whose sender makes no progress for
//!   [`LEASE_NS`]: a dead sender cannot hold a receiver.
//!
//! The paper admits one transfer in the whole cluster (a node asks only if no receiver is
//! busy); here one per receiver, since a fill queue belongs to one receiver. A sender that
//! finds its receiver busy, or is rejected, sends the ordinary way at once: no transfer waits.
//!
//! Calls, in order (like the protocol endpoint's): [`Admission::request`] and
//! [`Admission::finished`] from the sender's host, [`Admission::handle`] for every control
//! message received, [`Admission::progress`] when a placed transfer's frames arrive,
//! [`Admission::handle_timeout`] at [`Admission::poll_timeout`], then
//! [`Admission::poll_event`] and [`Admission::poll_transmit`] until they return `None`.

use std::collections::VecDeque;

use nicmsg_wire::admission::{AdmissionOp, AdmissionRepr};

use crate::fill::TransferKey;
use crate::serial;

/// A node's peers are numbered `0..peers` (ranks, or the slots of peers added by address).
pub type PeerId = u32;

/// Nanoseconds of the caller's clock.
pub type Nanos = u64;

/// First retransmission of an unanswered message: a few round trips on a LAN.
pub const RETRY_NS: Nanos = 1_000_000;
/// Sends of one message before it is given up: with doubling intervals, about a quarter of
/// a second, after which the peer is most likely gone (its liveness is the protocol's to
/// decide).
pub const MAX_TRIES: u32 = 8;
/// An admitted transfer whose frames stop coming for this long is given up, so a dead or
/// vanished sender frees its receiver.
pub const LEASE_NS: Nanos = 2_000_000_000;
/// Outgoing transfers asking or ending at once, per node: the sender's table is fixed.
pub const MAX_OUTGOING: usize = 64;
/// The most peers a node tracks.
pub const MAX_PEERS: u32 = 65_536;

/// The admission control messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// LM_REQ: the sender's transfer `transfer` of `len` bytes asks to be placed.
    Request { transfer: u32, len: u64 },
    /// LM_ACQ_OK: placed; the frames carry `key`.
    Accept { transfer: u32, key: TransferKey },
    /// LM_ACQ_REJ: send it the ordinary way.
    Reject { transfer: u32 },
    /// LM_ENDME: the sender is done with `transfer` (sent and acknowledged, or given up).
    End { transfer: u32 },
    /// The answer to `End`.
    EndAck { transfer: u32 },
    /// LM_APPEND_ADDR for the sending node: it places a transfer (its `epoch`-th).
    Busy { epoch: u32 },
    /// LM_REMOVE_ADDR for the sending node: its `epoch`-th placement is over.
    Free { epoch: u32 },
    /// The answer to `Busy` (`busy`) or `Free`.
    NoticeAck { epoch: u32, busy: bool },
}

impl Control {
    /// The message as an ADMISSION frame says it (`nicmsg_wire::admission`).
    pub fn to_repr(self) -> AdmissionRepr {
        let (op, number, len, key) = match self {
            Control::Request { transfer, len } => (AdmissionOp::Request, transfer, len, 0),
            Control::Accept { transfer, key } => (AdmissionOp::Accept, transfer, 0, key.0),
            Control::Reject { transfer } => (AdmissionOp::Reject, transfer, 0, 0),
            Control::End { transfer } => (AdmissionOp::End, transfer, 0, 0),
            Control::EndAck { transfer } => (AdmissionOp::EndAck, transfer, 0, 0),
            Control::Busy { epoch } => (AdmissionOp::Busy, epoch, 0, 0),
            Control::Free { epoch } => (AdmissionOp::Free, epoch, 0, 0),
            Control::NoticeAck { epoch, busy: true } => (AdmissionOp::BusyAck, epoch, 0, 0),
            Control::NoticeAck { epoch, busy: false } => (AdmissionOp::FreeAck, epoch, 0, 0),
        };
        AdmissionRepr {
            op,
            number,
            len,
            key,
        }
    }

    /// The admission control message an ADMISSION frame says (already checked by
    /// `AdmissionRepr::from_header`); `None` for the transfer flow's operations (Grant,
    /// Resend, Delivered), which are the station's (`crate::station`), and for Reset, which is
    /// the conversation layer's (`crate::open`).
    pub fn from_repr(repr: AdmissionRepr) -> Option<Self> {
        let number = repr.number;
        Some(match repr.op {
            AdmissionOp::Request => Control::Request {
                transfer: number,
                len: repr.len,
            },
            AdmissionOp::Accept => Control::Accept {
                transfer: number,
                key: TransferKey(repr.key),
            },
            AdmissionOp::Reject => Control::Reject { transfer: number },
            AdmissionOp::End => Control::End { transfer: number },
            AdmissionOp::EndAck => Control::EndAck { transfer: number },
            AdmissionOp::Busy => Control::Busy { epoch: number },
            AdmissionOp::Free => Control::Free { epoch: number },
            AdmissionOp::BusyAck => Control::NoticeAck {
                epoch: number,
                busy: true,
            },
            AdmissionOp::FreeAck => Control::NoticeAck {
                epoch: number,
                busy: false,
            },
            AdmissionOp::Grant
            | AdmissionOp::Resend
            | AdmissionOp::Delivered
            | AdmissionOp::Reset => return None,
        })
    }
}

/// Why a transfer goes the ordinary way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The receiver said it is placing another transfer; the sender did not ask.
    KnownBusy,
    /// The receiver rejected the request.
    Rejected,
    /// No answer after [`MAX_TRIES`] requests, or the receiver is gone.
    NoAnswer,
    /// The sender has [`MAX_OUTGOING`] transfers asking or ending already.
    TooMany,
}

/// What a request became at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// The request is on its way; an [`Event::Admitted`] or [`Event::Refused`] follows.
    Pending(u32),
    /// Send the ordinary way now.
    Refused(Refusal),
}

/// What the node's engine must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Sender: transfer `transfer` is admitted; send it last frame first, tagged `key`.
    Admitted { transfer: u32, key: TransferKey },
    /// Sender: send `transfer` the ordinary way.
    Refused { transfer: u32, why: Refusal },
    /// Receiver: the transfer `key` from `peer` ended; if frames are missing it was given up
    /// (its placement aborts).
    Ended { peer: PeerId, key: TransferKey },
}

/// Admission control's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    pub requests_sent: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub known_busy: u64,
    pub no_answer: u64,
    pub leases_expired: u64,
    /// Placements the station gave up because its fill queue was blocked ahead of them.
    pub placements_given_up: u64,
    pub retransmissions: u64,
    pub stale_requests: u64,
    pub dropped_malformed: u64,
}

/// The request the receiver's engine decides on: may it place `len` bytes from `peer`?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admit {
    pub peer: PeerId,
    pub len: u64,
}

/// One node's admission control.
#[derive(Debug)]
pub struct Admission {
    me: PeerId,
    peers: u32,
    next_transfer: u32,
    outgoing: Vec<Outgoing>,
    /// Receiver: the transfer placed now.
    placing: Option<Placing>,
    epoch: u32,
    /// Receiver: per peer, the newest transfer number it asked about.
    newest_request: Vec<Option<u32>>,
    /// Receiver: per peer, the `Busy`/`Free` notice it has not acknowledged yet.
    notices: Vec<Option<Notice>>,
    /// Every node: per peer, what it said of itself last (epoch, busy).
    views: Vec<(u32, bool)>,
    events: VecDeque<Event>,
    transmit: VecDeque<(PeerId, Control)>,
    /// The most messages `transmit` holds: a notice to every peer and a message per outgoing
    /// transfer, twice over.
    transmit_bound: usize,
    /// Whether other nodes are told when this receiver places or stops (BUSY and FREE).
    tells_others: bool,
    stats: AdmissionStats,
}

#[derive(Debug, Clone, Copy)]
struct Outgoing {
    transfer: u32,
    to: PeerId,
    len: u64,
    state: OutgoingState,
    tries: u32,
    deadline: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutgoingState {
    Asking,
    /// Admitted, sending; the entry stays until `finished`.
    Sending,
    Ending,
}

#[derive(Debug, Clone, Copy)]
struct Placing {
    peer: PeerId,
    transfer: u32,
    key: TransferKey,
    lease_deadline: Nanos,
}

#[derive(Debug, Clone, Copy)]
struct Notice {
    epoch: u32,
    busy: bool,
    tries: u32,
    deadline: Nanos,
}

impl Admission {
    /// Node `me` of `peers` nodes. Allocates its tables here, none later.
    pub fn new(me: PeerId, peers: u32) -> Self {
        assert!(peers <= MAX_PEERS && me < peers, "node {me} of {peers}");
        let n = peers as usize;
        Self {
            me,
            peers,
            next_transfer: 1,
            outgoing: Vec::with_capacity(MAX_OUTGOING),
            placing: None,
            epoch: 0,
            newest_request: vec![None; n],
            notices: vec![None; n],
            views: vec![(0, false); n],
            events: VecDeque::with_capacity(MAX_OUTGOING + 2),
            transmit: VecDeque::with_capacity(2 * (n + MAX_OUTGOING)),
            transmit_bound: 2 * (n + MAX_OUTGOING),
            tells_others: true,
            stats: AdmissionStats::default(),
        }
    }

    /// Whether this receiver tells the other nodes when it places a transfer and when it stops
    /// (the paper's LM_APPEND_ADDR and LM_REMOVE_ADDR; on by default). A node with peers added
    /// by address knows only those it talks to, and many of its slots are bound to no one:
    /// its senders ask, and are refused while it is busy.
    pub fn telling_others(mut self, tell: bool) -> Self {
        self.tells_others = tell;
        self
    }

    /// Forgets everything of `peer` and starts its state afresh, for a peer slot bound to a new
    /// conversation: as [`peer_gone`](Self::peer_gone), and the newest transfer number it asked
    /// about, its view and the messages queued for it go too (a new conversation numbers its
    /// requests from the start).
    pub fn reset_peer(&mut self, now: Nanos, peer: PeerId) {
        if peer >= self.peers {
            return;
        }
        self.peer_gone(now, peer);
        self.newest_request[peer as usize] = None;
        self.views[peer as usize] = (0, false);
        self.transmit.retain(|&(to, _)| to != peer);
    }

    /// Receiver: gives up placing `key` (its frames cannot reach their slots: the station's
    /// fill queue is blocked ahead of them); the transfer goes on by copy, and the receiver
    /// is free for the next.
    pub fn give_up_placing(&mut self, now: Nanos, key: TransferKey) {
        if self.placing.is_some_and(|p| p.key == key) {
            self.stats.placements_given_up += 1;
            self.end_placing(now, None);
        }
    }

    /// Whether admission has nothing going on with `peer`: no transfer asked of it or placed
    /// from it, no notice unanswered, no message queued for it.
    pub fn holds_nothing_for(&self, peer: PeerId) -> bool {
        let placing = self.placing.is_some_and(|p| p.peer == peer);
        let outgoing = self.outgoing.iter().any(|o| o.to == peer);
        let notice = self.notices.get(peer as usize).is_some_and(Option::is_some);
        let queued = self.transmit.iter().any(|&(to, _)| to == peer);
        !(placing || outgoing || notice || queued)
    }

    pub fn stats(&self) -> &AdmissionStats {
        &self.stats
    }

    /// Whether `peer` said it is placing a transfer (the paper's LM_RECV_ADDR list).
    pub fn is_busy(&self, peer: PeerId) -> bool {
        self.views[peer as usize].1
    }

    /// Receiver: the transfer placed now, and from whom.
    pub fn placing(&self) -> Option<(PeerId, TransferKey)> {
        self.placing.map(|p| (p.peer, p.key))
    }

    /// Sender: asks `to` to place `len` bytes.
    pub fn request(&mut self, now: Nanos, to: PeerId, len: u64) -> Asked {
        assert!(to < self.peers && to != self.me, "request to {to}");
        if self.is_busy(to) {
            self.stats.known_busy += 1;
            return Asked::Refused(Refusal::KnownBusy);
        }
        if self.outgoing.len() == MAX_OUTGOING {
            return Asked::Refused(Refusal::TooMany);
        }
        let transfer = self.next_transfer;
        self.next_transfer = self.next_transfer.wrapping_add(1).max(1);
        self.outgoing.push(Outgoing {
            transfer,
            to,
            len,
            state: OutgoingState::Asking,
            tries: 1,
            deadline: retry_deadline(now, 1),
        });
        self.stats.requests_sent += 1;
        self.send(to, Control::Request { transfer, len });
        Asked::Pending(transfer)
    }

    /// Sender: the admitted `transfer` is sent and acknowledged (or given up): tells the
    /// receiver, until it answers.
    pub fn finished(&mut self, now: Nanos, transfer: u32) {
        let Some(out) = self.outgoing.iter_mut().find(|o| o.transfer == transfer) else {
            return;
        };
        assert_eq!(
            out.state,
            OutgoingState::Sending,
            "finishing a transfer not admitted"
        );
        out.state = OutgoingState::Ending;
        out.tries = 1;
        out.deadline = retry_deadline(now, 1);
        let to = out.to;
        self.send(to, Control::End { transfer });
    }

    /// Receiver: frames of the placed transfer `key` arrived: its lease runs again.
    pub fn progress(&mut self, now: Nanos, key: TransferKey) {
        if let Some(placing) = self.placing.as_mut().filter(|p| p.key == key) {
            placing.lease_deadline = now + LEASE_NS;
        }
    }

    /// Receiver: every byte of the placed transfer `key` is in. The placement ends now,
    /// without waiting for the sender's END: its next request may arrive first (the END lost
    /// or late), and would be refused for a receiver that is no longer busy.
    pub fn complete(&mut self, now: Nanos, key: TransferKey) {
        if self.placing.is_some_and(|p| p.key == key) {
            self.end_placing(now, None);
        }
    }

    /// A control message from `from`. `admit` is the engine's decision on a request it may
    /// accept (a region and fill slots prepared, and the key its frames will carry), or `None`.
    pub fn handle(
        &mut self,
        now: Nanos,
        from: PeerId,
        message: Control,
        admit: &mut dyn FnMut(Admit) -> Option<TransferKey>,
    ) {
        if from >= self.peers || from == self.me {
            self.stats.dropped_malformed += 1;
            return;
        }
        match message {
            Control::Request { transfer, len } => self.on_request(now, from, transfer, len, admit),
            Control::Accept { transfer, key } => self.on_accept(from, transfer, key),
            Control::Reject { transfer } => self.on_reject(from, transfer),
            Control::End { transfer } => self.on_end(now, from, transfer),
            Control::EndAck { transfer } => self.on_end_ack(from, transfer),
            Control::Busy { epoch } => self.on_notice(from, epoch, true),
            Control::Free { epoch } => self.on_notice(from, epoch, false),
            Control::NoticeAck { epoch, busy } => self.on_notice_ack(from, epoch, busy),
        }
    }

    /// `peer` is gone (the protocol declared it dead): nothing more is asked of it or sent to it,
    /// and a transfer it was sending is given up.
    pub fn peer_gone(&mut self, now: Nanos, peer: PeerId) {
        self.notices[peer as usize] = None;
        self.views[peer as usize].1 = false;
        // Backwards, so that swap_remove moves only entries already looked at.
        for at in (0..self.outgoing.len()).rev() {
            let out = self.outgoing[at];
            if out.to != peer {
                continue;
            }
            self.outgoing.swap_remove(at);
            if out.state != OutgoingState::Ending {
                self.refuse(out.transfer, Refusal::NoAnswer);
            }
        }
        if self.placing.is_some_and(|p| p.peer == peer) {
            self.end_placing(now, Some(peer));
        }
    }

    /// The earliest time [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let outgoing = self
            .outgoing
            .iter()
            .filter(|o| o.state != OutgoingState::Sending)
            .map(|o| o.deadline);
        let notices = self.notices.iter().flatten().map(|n| n.deadline);
        let lease = self.placing.map(|p| p.lease_deadline);
        outgoing.chain(notices).chain(lease).min()
    }

    /// Retransmits what is unanswered, gives up what was tried enough, ends expired leases.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.retry_outgoing(now);
        self.retry_notices(now);
        if self.placing.is_some_and(|p| p.lease_deadline <= now) {
            self.stats.leases_expired += 1;
            self.end_placing(now, None);
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn poll_transmit(&mut self) -> Option<(PeerId, Control)> {
        self.transmit.pop_front()
    }

    fn send(&mut self, to: PeerId, message: Control) {
        // Bounded: a full queue drops the message, which its retransmission (or the peer's)
        // replaces.
        if self.transmit.len() < self.transmit_bound {
            self.transmit.push_back((to, message));
        }
    }

    fn on_request(
        &mut self,
        now: Nanos,
        from: PeerId,
        transfer: u32,
        len: u64,
        admit: &mut dyn FnMut(Admit) -> Option<TransferKey>,
    ) {
        if let Some(placing) = self
            .placing
            .filter(|p| p.peer == from && p.transfer == transfer)
        {
            self.send(
                from,
                Control::Accept {
                    transfer,
                    key: placing.key,
                },
            );
            return;
        }
        let newest = &mut self.newest_request[from as usize];
        if newest.is_some_and(|newest| !serial::is_before(newest, transfer)) {
            self.stats.stale_requests += 1;
            self.send(from, Control::Reject { transfer });
            return;
        }
        *newest = Some(transfer);
        let key = if self.placing.is_none() {
            admit(Admit { peer: from, len })
        } else {
            None
        };
        let Some(key) = key else {
            self.stats.rejected += 1;
            self.send(from, Control::Reject { transfer });
            return;
        };
        self.stats.admitted += 1;
        self.placing = Some(Placing {
            peer: from,
            transfer,
            key,
            lease_deadline: now + LEASE_NS,
        });
        self.epoch = self.epoch.wrapping_add(1);
        self.notify_all(now, true, Some(from));
        self.send(from, Control::Accept { transfer, key });
    }

    fn on_accept(&mut self, from: PeerId, transfer: u32, key: TransferKey) {
        if key.0 == 0 {
            // Key 0 tags the frames of transfers not admitted: an accept with it is malformed.
            // Taken, the station sent the transfer by copy while this table kept it admitted,
            // and never finished it (only a transfer sent with a key ends its admission): each
            // such accept held an entry for good, and MAX_OUTGOING of them stopped the sender
            // from ever asking again (`accepts_with_key_zero_do_not_wedge_the_senders_admission`).
            self.stats.dropped_malformed += 1;
            return;
        }
        let found = self
            .outgoing
            .iter_mut()
            .find(|o| o.transfer == transfer && o.to == from);
        match found {
            Some(out) if out.state == OutgoingState::Asking => {
                out.state = OutgoingState::Sending;
                self.events.push_back(Event::Admitted { transfer, key });
            }
            Some(_) => {}
            None => {
                // Accepted after it was given up: the receiver holds a placement nobody will
                // fill. End it (the receiver answers an unknown end too).
                self.send(from, Control::End { transfer });
            }
        }
    }

    fn on_reject(&mut self, from: PeerId, transfer: u32) {
        let asking = self.outgoing.iter().position(|o| {
            o.transfer == transfer && o.to == from && o.state == OutgoingState::Asking
        });
        if let Some(at) = asking {
            self.outgoing.swap_remove(at);
            self.refuse(transfer, Refusal::Rejected);
        }
    }

    fn on_end(&mut self, now: Nanos, from: PeerId, transfer: u32) {
        if self
            .placing
            .is_some_and(|p| p.peer == from && p.transfer == transfer)
        {
            self.end_placing(now, None);
        }
        self.send(from, Control::EndAck { transfer });
    }

    fn on_end_ack(&mut self, from: PeerId, transfer: u32) {
        self.outgoing.retain(|o| {
            !(o.transfer == transfer && o.to == from && o.state == OutgoingState::Ending)
        });
    }

    fn on_notice(&mut self, from: PeerId, epoch: u32, busy: bool) {
        let view = &mut self.views[from as usize];
        let newer = serial::is_before(view.0, epoch) || (epoch == view.0 && !busy);
        if newer {
            *view = (epoch, busy);
        }
        self.send(from, Control::NoticeAck { epoch, busy });
    }

    fn on_notice_ack(&mut self, from: PeerId, epoch: u32, busy: bool) {
        let notice = &mut self.notices[from as usize];
        if notice.is_some_and(|n| n.epoch == epoch && n.busy == busy) {
            *notice = None;
        }
    }

    /// Receiver: the placed transfer is over (ended, given up, or its sender gone); every node
    /// but `gone` hears it.
    fn end_placing(&mut self, now: Nanos, gone: Option<PeerId>) {
        let placing = self.placing.take().expect("ending a placement");
        self.events.push_back(Event::Ended {
            peer: placing.peer,
            key: placing.key,
        });
        self.notify_all(now, false, gone);
    }

    /// Tells every other node but `except` (the admitted sender, which learns it from the answer
    /// to its request, or a sender that is gone) that this receiver is busy or free, until each
    /// answers.
    fn notify_all(&mut self, now: Nanos, busy: bool, except: Option<PeerId>) {
        if !self.tells_others {
            return;
        }
        let epoch = self.epoch;
        for peer in 0..self.peers {
            if peer == self.me || Some(peer) == except {
                continue;
            }
            self.notices[peer as usize] = Some(Notice {
                epoch,
                busy,
                tries: 1,
                deadline: retry_deadline(now, 1),
            });
            self.send(peer, Self::notice_message(epoch, busy));
        }
    }

    fn notice_message(epoch: u32, busy: bool) -> Control {
        if busy {
            Control::Busy { epoch }
        } else {
            Control::Free { epoch }
        }
    }

    fn retry_outgoing(&mut self, now: Nanos) {
        // Backwards, so that swap_remove moves only entries already looked at.
        for at in (0..self.outgoing.len()).rev() {
            let out = self.outgoing[at];
            if out.state == OutgoingState::Sending || out.deadline > now {
                continue;
            }
            if out.tries >= MAX_TRIES {
                self.outgoing.swap_remove(at);
                if out.state == OutgoingState::Asking {
                    self.stats.no_answer += 1;
                    self.refuse(out.transfer, Refusal::NoAnswer);
                }
                continue;
            }
            let entry = &mut self.outgoing[at];
            entry.tries += 1;
            entry.deadline = retry_deadline(now, entry.tries);
            self.stats.retransmissions += 1;
            let message = match out.state {
                OutgoingState::Asking => Control::Request {
                    transfer: out.transfer,
                    len: out.len,
                },
                _ => Control::End {
                    transfer: out.transfer,
                },
            };
            self.send(out.to, message);
        }
    }

    fn retry_notices(&mut self, now: Nanos) {
        for peer in 0..self.peers {
            let Some(mut notice) = self.notices[peer as usize] else {
                continue;
            };
            if notice.deadline > now {
                continue;
            }
            if notice.tries >= MAX_TRIES {
                // The peer does not answer; its liveness is the protocol's to decide, and a
                // stale view of this node costs it only a rejected request.
                self.notices[peer as usize] = None;
                continue;
            }
            notice.tries += 1;
            notice.deadline = retry_deadline(now, notice.tries);
            self.notices[peer as usize] = Some(notice);
            self.stats.retransmissions += 1;
            self.send(peer, Self::notice_message(notice.epoch, notice.busy));
        }
    }

    fn refuse(&mut self, transfer: u32, why: Refusal) {
        self.events.push_back(Event::Refused { transfer, why });
    }
}

/// When the `tries`-th send of a message is given up on: [`RETRY_NS`] after the first,
/// doubling after each.
fn retry_deadline(now: Nanos, tries: u32) -> Nanos {
    now + (RETRY_NS << (tries - 1).min(16))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delivers every queued message between the nodes, in order, with no loss.
    fn settle(nodes: &mut [Admission], now: Nanos, keys: &mut u32) {
        loop {
            let mut moved = false;
            for from in 0..nodes.len() {
                while let Some((to, message)) = nodes[from].poll_transmit() {
                    moved = true;
                    nodes[to as usize].handle(now, from as u32, message, &mut |_| {
                        *keys += 1;
                        Some(TransferKey(*keys))
                    });
                }
            }
            if !moved {
                return;
            }
        }
    }

    #[test]
    fn a_request_is_admitted_and_everyone_learns_the_receiver_is_busy_then_free() {
        let mut nodes: Vec<_> = (0..3).map(|me| Admission::new(me, 3)).collect();
        let mut keys = 0;
        let Asked::Pending(transfer) = nodes[0].request(0, 1, 65536) else {
            panic!("asked");
        };
        settle(&mut nodes, 0, &mut keys);
        assert_eq!(
            nodes[0].poll_event(),
            Some(Event::Admitted {
                transfer,
                key: TransferKey(1)
            })
        );
        assert!(nodes[2].is_busy(1));
        assert_eq!(
            nodes[2].request(0, 1, 10),
            Asked::Refused(Refusal::KnownBusy)
        );
        nodes[0].finished(0, transfer);
        settle(&mut nodes, 0, &mut keys);
        assert_eq!(
            nodes[1].poll_event(),
            Some(Event::Ended {
                peer: 0,
                key: TransferKey(1)
            })
        );
        assert!(!nodes[2].is_busy(1));
        assert_eq!(nodes[0].poll_timeout(), None, "everything answered");
        assert_eq!(nodes[1].poll_timeout(), None);
    }

    #[test]
    fn a_second_sender_is_rejected_while_a_transfer_is_placed() {
        let mut nodes: Vec<_> = (0..3).map(|me| Admission::new(me, 3)).collect();
        let mut keys = 0;
        nodes[0].request(0, 1, 100);
        let Asked::Pending(second) = nodes[2].request(0, 1, 100) else {
            panic!("asked before it heard");
        };
        settle(&mut nodes, 0, &mut keys);
        assert_eq!(
            nodes[2].poll_event(),
            Some(Event::Refused {
                transfer: second,
                why: Refusal::Rejected
            })
        );
    }

    #[test]
    fn a_late_duplicate_request_cannot_admit_a_finished_transfer() {
        let mut receiver = Admission::new(1, 2);
        let mut admitted = 0;
        let mut admit = |_: Admit| {
            admitted += 1;
            Some(TransferKey(9))
        };
        receiver.handle(
            0,
            0,
            Control::Request {
                transfer: 4,
                len: 1,
            },
            &mut admit,
        );
        receiver.handle(0, 0, Control::End { transfer: 4 }, &mut admit);
        receiver.handle(
            0,
            0,
            Control::Request {
                transfer: 4,
                len: 1,
            },
            &mut admit,
        );
        assert_eq!(admitted, 1);
        assert_eq!(receiver.placing(), None);
    }

    #[test]
    fn requests_after_the_wrap_of_transfer_numbers_are_newer() {
        let mut receiver = Admission::new(1, 2);
        let mut admitted = Vec::new();
        let mut admit = |request: Admit| {
            admitted.push(request.len);
            Some(TransferKey(9))
        };
        // The sender's numbers skip 0: u32::MAX is followed by 1.
        for (transfer, len) in [(u32::MAX - 1, 1), (u32::MAX, 2), (1, 3), (u32::MAX, 4)] {
            let request = Control::Request { transfer, len };
            receiver.handle(0, 0, request, &mut admit);
            receiver.handle(0, 0, Control::End { transfer }, &mut admit);
        }
        assert_eq!(
            admitted,
            [1, 2, 3],
            "the late duplicate of u32::MAX is stale"
        );
    }

    #[test]
    fn notices_after_the_wrap_of_epochs_are_newer() {
        let mut node = Admission::new(0, 2);
        // The receiver's epochs count up to the wrap (in steps here, each less than 2^31).
        for epoch in [1 << 30, 2 << 30, 3 << 30, u32::MAX] {
            node.handle(0, 1, Control::Busy { epoch }, &mut |_| None);
            assert!(node.is_busy(1), "epoch {epoch}");
        }
        node.handle(0, 1, Control::Free { epoch: u32::MAX }, &mut |_| None);
        node.handle(0, 1, Control::Busy { epoch: 0 }, &mut |_| None);
        assert!(node.is_busy(1), "epoch 0 follows u32::MAX");
        node.handle(0, 1, Control::Free { epoch: 0 }, &mut |_| None);
        node.handle(0, 1, Control::Busy { epoch: u32::MAX }, &mut |_| None);
        assert!(!node.is_busy(1), "a late busy from before the wrap is old");
    }

    #[test]
    fn every_message_survives_its_frame() {
        let messages = [
            Control::Request {
                transfer: 3,
                len: 1 << 40,
            },
            Control::Accept {
                transfer: 3,
                key: TransferKey(9),
            },
            Control::Reject { transfer: 3 },
            Control::End { transfer: 3 },
            Control::EndAck { transfer: 3 },
            Control::Busy { epoch: 2 },
            Control::Free { epoch: 2 },
            Control::NoticeAck {
                epoch: 2,
                busy: true,
            },
            Control::NoticeAck {
                epoch: 2,
                busy: false,
            },
        ];
        for message in messages {
            let header = message.to_repr().to_header(1, 0, 1).unwrap();
            let repr = AdmissionRepr::from_header(&header).unwrap();
            assert_eq!(Control::from_repr(repr), Some(message));
        }
    }

    #[test]
    fn a_sender_gone_mid_transfer_frees_its_receiver_from_then_on() {
        let mut receiver = Admission::new(1, 3);
        receiver.handle(
            0,
            0,
            Control::Request {
                transfer: 1,
                len: 1,
            },
            &mut |_| Some(TransferKey(1)),
        );
        while receiver.poll_transmit().is_some() {}
        let now = 5 * LEASE_NS;
        receiver.peer_gone(now, 0);
        assert_eq!(receiver.placing(), None);
        assert_eq!(
            receiver.poll_transmit(),
            Some((2, Control::Free { epoch: 1 })),
            "the other node hears it is free"
        );
        assert_eq!(
            receiver.poll_timeout(),
            Some(now + RETRY_NS),
            "retried from now on"
        );
    }

    #[test]
    fn a_free_overtaking_its_busy_leaves_the_receiver_free() {
        let mut node = Admission::new(0, 2);
        node.handle(0, 1, Control::Free { epoch: 3 }, &mut |_| None);
        node.handle(0, 1, Control::Busy { epoch: 3 }, &mut |_| None);
        assert!(!node.is_busy(1));
        node.handle(0, 1, Control::Busy { epoch: 4 }, &mut |_| None);
        assert!(node.is_busy(1));
    }

    #[test]
    fn an_unanswered_request_is_given_up_and_a_silent_sender_loses_its_lease() {
        let mut sender = Admission::new(0, 2);
        let Asked::Pending(transfer) = sender.request(0, 1, 10) else {
            panic!("asked");
        };
        let mut now = 0;
        while let Some(deadline) = sender.poll_timeout() {
            now = deadline;
            sender.handle_timeout(now);
        }
        assert!(now < 1_000_000_000, "given up within a second");
        assert_eq!(
            sender.poll_event(),
            Some(Event::Refused {
                transfer,
                why: Refusal::NoAnswer
            })
        );
        assert_eq!(sender.stats().retransmissions, u64::from(MAX_TRIES - 1));

        let mut receiver = Admission::new(1, 2);
        receiver.handle(
            0,
            0,
            Control::Request {
                transfer: 1,
                len: 1,
            },
            &mut |_| Some(TransferKey(1)),
        );
        receiver.handle_timeout(LEASE_NS);
        assert_eq!(receiver.placing(), None);
        assert_eq!(receiver.stats().leases_expired, 1);
    }
}

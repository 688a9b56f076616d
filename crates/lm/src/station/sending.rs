//! The sending side of a station: transfers from send buffers with header holes, last frame
//! first, as far down as the receiver grants, again when it asks or stays silent.

use crate::admission::{Asked, Nanos, PeerId};
use crate::fill::TransferKey;
use crate::send_buffer::HoleBuffer;

use super::{
    Event, Pending, Regions, Station, MAX_IN_FLIGHT_PER_PEER, MAX_SENDING, MIN_PLACED_FRAMES,
    SILENCE_LIMIT_NS,
};

/// Frame ranges waiting to leave: a few per transfer being sent; more are dropped (the
/// receiver asks again, or the sender's retry sends them).
const MAX_QUEUED_RANGES: usize = 4 * MAX_SENDING;
/// The longest retry interval, in multiples of the first.
const MAX_BACKOFF: u32 = 8;

/// A send: to whom, and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendId {
    pub to: PeerId,
    pub number: u32,
}

/// Why [`Station::send`] refused a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("node {0} is not a peer of this station")]
    NoSuchPeer(PeerId),
    #[error("the send buffer is cut for another frame size or header length")]
    Geometry,
    #[error("too many transfers in flight (at most {MAX_SENDING}, and to one receiver at most {MAX_IN_FLIGHT_PER_PEER} numbers from the oldest unfinished on); wait for one to finish")]
    Busy,
}

/// Why a send failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendFailed {
    #[error("the receiver did not answer for {} s", SILENCE_LIMIT_NS / 1_000_000_000)]
    PeerUnreachable,
    /// Open stations: the conversation with the receiver ended before the transfer was
    /// delivered (it restarted, or had forgotten the conversation and said so).
    #[error(
        "the receiver restarted or forgot this conversation before the transfer was delivered"
    )]
    ConversationEnded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for admission's answer.
    Asking,
    Sending,
}

/// One transfer being sent.
#[derive(Debug)]
pub(crate) struct Sending {
    id: SendId,
    buffer: HoleBuffer,
    frames: u32,
    /// Admission's number for it, if it asked.
    asked: Option<u32>,
    /// The receiver's key if admitted, else 0.
    key: u32,
    state: State,
    /// Frames from here up have been sent at least once (`frames`: none yet).
    sent_floor: u32,
    /// The highest frame the receiver may still miss, as it last said.
    known_top: u32,
    retry_at: Nanos,
    /// Retries in a row with nothing heard: the interval grows with them.
    silent: u32,
    /// When the receiver was last heard (or the send started).
    heard_at: Nanos,
}

impl Sending {
    pub(crate) fn id(&self) -> SendId {
        self.id
    }

    pub(crate) fn frames(&self) -> u32 {
        self.frames
    }

    pub(crate) fn key(&self) -> u32 {
        self.key
    }

    pub(crate) fn buffer_mut(&mut self) -> &mut HoleBuffer {
        &mut self.buffer
    }

    /// When it retries, if it is sending (admission times the asking).
    pub(crate) fn deadline(&self) -> Option<Nanos> {
        (self.state == State::Sending).then_some(self.retry_at)
    }

    fn heard(&mut self, now: Nanos, retry_ns: Nanos) {
        self.silent = 0;
        self.heard_at = now;
        self.retry_at = now + retry_ns;
    }
}

impl<R: Regions> Station<R> {
    /// Sends the transfer in `buffer` to `to`. Its frames are written from the buffer in place;
    /// the buffer comes back with [`Event::Sent`].
    pub fn send(
        &mut self,
        now: Nanos,
        to: PeerId,
        buffer: HoleBuffer,
    ) -> Result<SendId, (SendError, HoleBuffer)> {
        if !self.is_peer(to) {
            return Err((SendError::NoSuchPeer(to), buffer));
        }
        if buffer.geometry() != self.config.geometry {
            return Err((SendError::Geometry, buffer));
        }
        let number = self.next_number[to as usize];
        // The span of numbers unfinished, not only their count, stays within
        // MAX_IN_FLIGHT_PER_PEER: the receiver takes every number more than DEDUP_WINDOW below
        // the newest it delivered for delivered (`dedup`). Counting only, a long transfer
        // overtaken by 64 short ones to the same receiver fell out of that window, its late
        // frames were answered DELIVERED and the send completed with nothing delivered
        // (`a_slow_transfer_overtaken_by_many_short_ones_is_not_lost`).
        let too_far = self.oldest_unfinished_age(to, number) >= MAX_IN_FLIGHT_PER_PEER;
        if self.sending.len() == MAX_SENDING || too_far {
            return Err((SendError::Busy, buffer));
        }
        // Numbers wrap: a long-running sender passes 2^32 transfers to one receiver, and the
        // receiver compares them as serial numbers (`dedup`).
        self.next_number[to as usize] = number.wrapping_add(1);
        let id = SendId { to, number };
        let frames = buffer.frames();
        let len = buffer.len() as u64;
        self.sending.push(Sending {
            id,
            buffer,
            frames,
            asked: None,
            key: 0,
            state: State::Asking,
            sent_floor: frames,
            known_top: frames - 1,
            retry_at: 0,
            silent: 0,
            heard_at: now,
        });
        let at = self.sending.len() - 1;
        if frames < MIN_PLACED_FRAMES {
            self.start_sending(now, at, 0);
            return Ok(id);
        }
        match self.admission.request(now, to, len) {
            Asked::Pending(transfer) => self.sending[at].asked = Some(transfer),
            Asked::Refused(_) => self.start_sending(now, at, 0),
        }
        self.take_admission_events(now);
        Ok(id)
    }

    /// How many numbers before `next` the oldest unfinished transfer to `to` is (0 if none).
    /// Counted back from the next number, which every unfinished one is before: across the
    /// wrap the oldest is not the smallest (`u32::MAX` is older than 0), and taking the
    /// smallest let a transfer numbered before the wrap fall out of the receiver's window.
    fn oldest_unfinished_age(&self, to: PeerId, next: u32) -> u32 {
        self.sending
            .iter()
            .filter(|s| s.id.to == to)
            .map(|s| next.wrapping_sub(s.id.number))
            .max()
            .unwrap_or(0)
    }

    /// The number the next transfer to `to` will have (its receiver's name for it).
    pub fn next_number(&self, to: PeerId) -> Option<u32> {
        self.next_number.get(to as usize).copied()
    }

    pub(crate) fn sending_at(&self, id: SendId) -> Option<usize> {
        self.sending.iter().position(|s| s.id == id)
    }

    fn asked_at(&self, transfer: u32) -> Option<usize> {
        self.sending
            .iter()
            .position(|s| s.asked == Some(transfer) && s.state == State::Asking)
    }

    pub(super) fn start_admitted(&mut self, now: Nanos, transfer: u32, key: TransferKey) {
        if let Some(at) = self.asked_at(transfer) {
            self.start_sending(now, at, key.0);
        }
    }

    pub(super) fn start_refused(&mut self, now: Nanos, transfer: u32) {
        if let Some(at) = self.asked_at(transfer) {
            self.sending[at].asked = None;
            self.start_sending(now, at, 0);
        }
    }

    /// Admitted, the top frame goes at once (admission posts its slot first) and the rest as
    /// grants come; by copy, a window at once.
    fn start_sending(&mut self, now: Nanos, at: usize, key: u32) {
        let window = self.config.window;
        let retry_ns = self.config.retry_ns;
        let s = &mut self.sending[at];
        s.state = State::Sending;
        s.key = key;
        s.heard(now, retry_ns);
        let top = s.frames - 1;
        let bottom = if key != 0 {
            top
        } else {
            s.frames.saturating_sub(window)
        };
        s.sent_floor = bottom;
        let id = s.id;
        self.queue_frames(id, top, bottom);
    }

    fn queue_frames(&mut self, id: SendId, top: u32, bottom: u32) {
        let ranges = self.transmit.len() - self.queued_controls;
        if ranges >= MAX_QUEUED_RANGES {
            return;
        }
        self.transmit.push_back(Pending::Frames { id, top, bottom });
    }

    /// The transfer a GRANT or RESEND is about: by the key if the receiver placed it, else
    /// by its number.
    fn flow_target(&self, from: PeerId, number: u32, key: u32) -> Option<usize> {
        self.sending.iter().position(|s| {
            s.state == State::Sending
                && s.id.to == from
                && if key != 0 {
                    s.key == key
                } else {
                    s.id.number == number
                }
        })
    }

    /// GRANT: send the frames not sent yet down to the range's bottom.
    pub(super) fn on_grant(
        &mut self,
        now: Nanos,
        from: PeerId,
        (number, key): (u32, u32),
        range: (u32, u32),
    ) {
        if let Some((at, _)) = self.answered(now, from, (number, key), range.0) {
            self.send_granted(at, range.1);
        }
    }

    /// RESEND: send again the frames of the range already sent, and those not sent yet (the
    /// range's places wait: a grant may have been lost).
    pub(super) fn on_resend(
        &mut self,
        now: Nanos,
        from: PeerId,
        (number, key): (u32, u32),
        range: (u32, u32),
    ) {
        let Some((at, top)) = self.answered(now, from, (number, key), range.0) else {
            return;
        };
        let id = self.sending[at].id;
        if let Some(bottom) = self.resend_bottom(at, top, range.1) {
            self.stats.frames_resent += u64::from(top - bottom + 1);
            self.queue_frames(id, top, bottom);
        }
        self.send_granted(at, range.1);
    }

    /// The send a GRANT or RESEND from `from` answers, heard from (any answer shows the
    /// receiver alive; its own limits bound how long it may take), and the highest frame the
    /// receiver misses, as it says.
    fn answered(
        &mut self,
        now: Nanos,
        from: PeerId,
        (number, key): (u32, u32),
        top: u32,
    ) -> Option<(usize, u32)> {
        let at = self.flow_target(from, number, key)?;
        let retry_ns = self.config.retry_ns;
        let s = &mut self.sending[at];
        s.heard(now, retry_ns);
        let top = top.min(s.frames - 1);
        s.known_top = s.known_top.min(top);
        Some((at, top))
    }

    /// Sends the frames not sent yet down to `bottom`.
    fn send_granted(&mut self, at: usize, bottom: u32) {
        let s = &mut self.sending[at];
        if bottom < s.sent_floor {
            let (id, top) = (s.id, s.sent_floor - 1);
            s.sent_floor = bottom;
            self.queue_frames(id, top, bottom);
        }
    }

    /// The lowest frame to send again from `top`: not below `asked` nor below what was sent,
    /// and at most two windows (a resend is the answer to a loss, not a new transfer).
    fn resend_bottom(&self, at: usize, top: u32, asked: u32) -> Option<u32> {
        let s = &self.sending[at];
        let bottom = asked
            .max(s.sent_floor)
            .max(top.saturating_sub(2 * self.config.window - 1));
        (bottom <= top && top >= s.sent_floor).then_some(bottom)
    }

    pub(super) fn on_delivered(&mut self, now: Nanos, from: PeerId, number: u32) {
        let id = SendId { to: from, number };
        let Some(at) = self.sending_at(id) else {
            return;
        };
        if self.sending[at].state != State::Sending {
            return;
        }
        let s = self.sending.swap_remove(at);
        if let (true, Some(transfer)) = (s.key != 0, s.asked) {
            self.admission.finished(now, transfer);
            self.take_admission_events(now);
        }
        self.stats.transfers_sent += 1;
        self.events.push_back(Event::Sent {
            id,
            buffer: s.buffer,
            outcome: Ok(()),
        });
    }

    /// Every send whose receiver stayed silent for its interval sends again what may be
    /// missing, or fails.
    pub(super) fn retry_sends(&mut self, now: Nanos) {
        // Backwards, so that swap_remove moves only entries already looked at.
        for at in (0..self.sending.len()).rev() {
            let s = &mut self.sending[at];
            if s.deadline().is_none_or(|t| t > now) {
                continue;
            }
            if now.saturating_sub(s.heard_at) >= SILENCE_LIMIT_NS {
                self.give_up(now, at);
                continue;
            }
            s.silent = s.silent.saturating_add(1);
            s.retry_at = now + self.config.retry_ns * u64::from(s.silent.min(MAX_BACKOFF));
            // A probe: the highest frame the receiver may miss (or the lowest sent, if it
            // has all of those). Its answer, a grant or a resend, says what is missing.
            let probe = s.known_top.max(s.sent_floor).min(s.frames - 1);
            let id = s.id;
            self.stats.frames_resent += 1;
            self.queue_frames(id, probe, probe);
        }
    }

    fn give_up(&mut self, now: Nanos, at: usize) {
        let to = self.sending[at].id.to;
        self.fail_send(at, SendFailed::PeerUnreachable);
        // Its receiver is gone: so is everything admission asked of it.
        self.admission.peer_gone(now, to);
        self.take_admission_events(now);
    }

    /// Ends the send at `at` with `reason`; its buffer comes back.
    pub(super) fn fail_send(&mut self, at: usize, reason: SendFailed) {
        let s = self.sending.swap_remove(at);
        self.stats.transfers_failed += 1;
        self.events.push_back(Event::Sent {
            id: s.id,
            buffer: s.buffer,
            outcome: Err(reason),
        });
    }
}

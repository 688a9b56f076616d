//! Sender-side reliability of one message: frames are acknowledged per collection of `unit`
//! consecutive frames (EMP). Each fully sent, unacknowledged collection has a retransmission
//! deadline; at most [`MAX_INFLIGHT_COLLECTIONS`] collections are unacknowledged at a time.
//!
//! The deadlines live in [`CollectionTimers`], kept by the endpoint beside its send table rather
//! than inside each send: they are 1.5 KB, which every post would otherwise build and move, while
//! a short message uses one of them.

use crate::config::MAX_INFLIGHT_COLLECTIONS;
use crate::Nanos;

const WINDOW: u32 = MAX_INFLIGHT_COLLECTIONS as u32;
const _: () = assert!(MAX_INFLIGHT_COLLECTIONS == 64, "bitmaps are u64");

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Timer {
    /// When the collection's last frame was last sent.
    sent_at_ns: Nanos,
    /// Retransmission deadline; `None` until every frame of the collection has been sent.
    deadline_ns: Option<Nanos>,
    retries: u32,
}

/// Result of an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acked {
    /// A round-trip sample (Karn: only from collections never retransmitted).
    pub rtt_ns: Option<Nanos>,
    pub newly_acked: bool,
}

/// The retransmission timers of one send's collections in flight, by collection modulo the
/// window.
#[derive(Debug, Clone)]
pub(crate) struct CollectionTimers([Timer; MAX_INFLIGHT_COLLECTIONS]);

impl Default for CollectionTimers {
    fn default() -> Self {
        Self([Timer::default(); MAX_INFLIGHT_COLLECTIONS])
    }
}

impl CollectionTimers {
    /// Clears the timers a new send of `collections` collections starts with (the others are
    /// cleared as its window advances onto them).
    pub fn reset(&mut self, collections: &Collections) {
        let first_window = collections.count().min(WINDOW) as usize;
        self.0[..first_window].fill(Timer::default());
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Collections {
    unit: u32,
    frames: u32,
    /// Oldest collection not acknowledged.
    base: u32,
    /// Bit i: collection base+i acknowledged.
    acked: u64,
    /// Bit i: collection base+i must be resent.
    resend: u64,
}

impl Collections {
    pub fn new(unit: u8, frames: u32) -> Self {
        Self {
            unit: u32::from(unit),
            frames,
            base: 0,
            acked: 0,
            resend: 0,
        }
    }

    pub fn count(&self) -> u32 {
        self.frames.div_ceil(self.unit)
    }

    pub fn of_frame(&self, frame: u32) -> u32 {
        frame / self.unit
    }

    /// Frames of collection `c`.
    pub fn frames_of(&self, c: u32) -> core::ops::Range<u32> {
        c * self.unit..((c + 1) * self.unit).min(self.frames)
    }

    pub fn all_acked(&self) -> bool {
        self.base >= self.count()
    }

    /// First frame beyond the in-flight window: frames from here wait for acknowledgements.
    pub fn window_end_frame(&self) -> u32 {
        (self.base + WINDOW)
            .saturating_mul(self.unit)
            .min(self.frames)
    }

    fn slot(c: u32) -> usize {
        (c % WINDOW) as usize
    }

    fn bit(&self, c: u32) -> Option<u64> {
        let distance = c.checked_sub(self.base)?;
        (distance < WINDOW).then(|| 1u64 << distance)
    }

    /// Records that `frame` was sent at `now`; arms the collection's timer when its last frame
    /// went out.
    pub fn on_frame_sent(
        &mut self,
        timers: &mut CollectionTimers,
        frame: u32,
        now: Nanos,
        timeout_ns: impl Fn(u32) -> Nanos,
    ) {
        let c = self.of_frame(frame);
        let Some(bit) = self.bit(c) else { return };
        if self.acked & bit != 0 || frame + 1 != self.frames_of(c).end {
            return;
        }
        let timer = &mut timers.0[Self::slot(c)];
        timer.sent_at_ns = now;
        timer.deadline_ns = Some(now + timeout_ns(timer.retries));
    }

    pub fn ack(&mut self, timers: &mut CollectionTimers, c: u32, now: Nanos) -> Acked {
        let Some(bit) = self.bit(c) else {
            return Acked {
                rtt_ns: None,
                newly_acked: false,
            };
        };
        if self.acked & bit != 0 {
            return Acked {
                rtt_ns: None,
                newly_acked: false,
            };
        }
        let timer = timers.0[Self::slot(c)];
        let rtt_ns = match timer.deadline_ns {
            Some(_) if timer.retries == 0 => Some(now.saturating_sub(timer.sent_at_ns)),
            _ => None,
        };
        self.acked |= bit;
        self.resend &= !bit;
        self.advance(timers);
        Acked {
            rtt_ns,
            newly_acked: true,
        }
    }

    /// The whole message is acknowledged (ACK_ALL). A round-trip sample when only its last
    /// collection was outstanding and was sent once: the common case of a message of one
    /// collection, whose acknowledgement is always ACK_ALL. Without it a stream of short
    /// messages gave no sample at all, so once timeouts had doubled the peer's timeout nothing
    /// brought it down again, and every frame lost later cost up to `rto_max_ns`.
    pub fn ack_all(&mut self, timers: &CollectionTimers, now: Nanos) -> Option<Nanos> {
        let last_outstanding = self.base + 1 == self.count() && self.acked == 0;
        let timer = timers.0[Self::slot(self.base)];
        let sample = (last_outstanding && timer.deadline_ns.is_some() && timer.retries == 0)
            .then(|| now.saturating_sub(timer.sent_at_ns));
        self.base = self.count();
        self.acked = 0;
        self.resend = 0;
        sample
    }

    fn advance(&mut self, timers: &mut CollectionTimers) {
        while self.acked & 1 != 0 {
            timers.0[Self::slot(self.base)] = Timer::default();
            self.acked >>= 1;
            self.resend >>= 1;
            self.base += 1;
        }
    }

    /// Earliest armed deadline of an unacknowledged collection.
    pub fn next_deadline(&self, timers: &CollectionTimers) -> Option<Nanos> {
        self.unacked_armed(timers)
            .filter_map(|(_, t)| t.deadline_ns)
            .min()
    }

    fn unacked_armed<'a>(
        &'a self,
        timers: &'a CollectionTimers,
    ) -> impl Iterator<Item = (u32, &'a Timer)> + 'a {
        let end = (self.base + WINDOW).min(self.count());
        (self.base..end)
            .filter(|&c| self.acked & (1 << (c - self.base)) == 0)
            .map(|c| (c, &timers.0[Self::slot(c)]))
            .filter(|(_, t)| t.deadline_ns.is_some())
    }

    /// Marks every collection whose deadline passed for resending and bumps its retry count.
    /// Returns the highest retry count reached (the caller compares with `max_retries`).
    pub fn expire(&mut self, timers: &mut CollectionTimers, now: Nanos) -> u32 {
        let mut highest = 0;
        let end = (self.base + WINDOW).min(self.count());
        for c in self.base..end {
            let bit = 1u64 << (c - self.base);
            let timer = &mut timers.0[Self::slot(c)];
            if self.acked & bit != 0 || timer.deadline_ns.is_none_or(|d| d > now) {
                continue;
            }
            timer.retries += 1;
            timer.deadline_ns = None;
            highest = highest.max(timer.retries);
            self.resend |= bit;
        }
        highest
    }

    /// Collection `c` was just acknowledged: every unacknowledged collection after it was sent
    /// after it, queued behind it on the way, so none is overdue before `at` (now plus a
    /// timeout). Postpones their deadlines to `at` (retry counts kept). The estimated departure
    /// that armed them may have been optimistic (a learned drain rate runs ahead of a burst);
    /// acknowledgements that keep coming say the queue is draining. A collection before `c`
    /// is not postponed: a later one arriving first suggests it was lost.
    pub fn postpone_after(&mut self, timers: &mut CollectionTimers, c: u32, at: Nanos) {
        let end = (self.base + WINDOW).min(self.count());
        for later in (c + 1).max(self.base)..end {
            if self.acked & (1 << (later - self.base)) != 0 {
                continue;
            }
            if let Some(deadline) = timers.0[Self::slot(later)].deadline_ns.as_mut() {
                *deadline = (*deadline).max(at);
            }
        }
    }

    /// The peer said "alive, not accepted yet": postpone every armed deadline to `at` without
    /// counting a retry.
    pub fn postpone(&mut self, timers: &mut CollectionTimers, at: Nanos) {
        let end = (self.base + WINDOW).min(self.count());
        for c in self.base..end {
            let timer = &mut timers.0[Self::slot(c)];
            timer.retries = 0;
            if let Some(deadline) = timer.deadline_ns.as_mut() {
                *deadline = (*deadline).max(at);
            }
        }
    }

    /// Marks every sent, unacknowledged collection for resending now, keeping retry counts.
    pub fn resend_all_sent(&mut self, timers: &mut CollectionTimers, sent_limit: u32) {
        let end = (self.base + WINDOW).min(self.count());
        for c in self.base..end {
            let bit = 1u64 << (c - self.base);
            if self.acked & bit == 0 && self.frames_of(c).end <= sent_limit {
                self.resend |= bit;
                timers.0[Self::slot(c)].deadline_ns = None;
            }
        }
    }

    /// Oldest collection marked for resending, removing the mark.
    pub fn take_resend(&mut self) -> Option<u32> {
        if self.resend == 0 {
            return None;
        }
        let distance = self.resend.trailing_zeros();
        self.resend &= !(1 << distance);
        Some(self.base + distance)
    }

    /// Whether `frame` is in a collection marked for resending (so it goes again anyway).
    pub fn resends_frame(&self, frame: u32) -> bool {
        self.bit(self.of_frame(frame))
            .is_some_and(|bit| self.resend & bit != 0)
    }

    pub fn has_resend(&self) -> bool {
        self.resend != 0
    }
}

/// Walks the frames of the collections marked for resending, one frame per call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ResendCursor {
    /// Next frame to resend and the end of its collection.
    current: Option<(u32, u32)>,
}

impl ResendCursor {
    pub fn busy(&self) -> bool {
        self.current.is_some()
    }

    /// Next frame to retransmit; `sent_limit` is the first frame never sent (never resent).
    pub fn next_frame(&mut self, collections: &mut Collections, sent_limit: u32) -> Option<u32> {
        loop {
            if let Some((next, end)) = self.current {
                if next < end {
                    self.current = Some((next + 1, end));
                    return Some(next);
                }
                self.current = None;
            }
            let c = collections.take_resend()?;
            let frames = collections.frames_of(c);
            self.current = Some((frames.start, frames.end.min(sent_limit)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_arms_on_last_frame_and_expires() {
        let mut collections = Collections::new(3, 7);
        let mut timers = CollectionTimers::default();
        timers.reset(&collections);
        assert_eq!(collections.count(), 3);
        for frame in 0..7 {
            collections.on_frame_sent(&mut timers, frame, 100, |_| 50);
        }
        assert_eq!(collections.next_deadline(&timers), Some(150));
        assert!(collections.ack(&mut timers, 1, 120).newly_acked);
        assert_eq!(collections.expire(&mut timers, 150), 1);
        assert_eq!(collections.take_resend(), Some(0));
        assert_eq!(collections.take_resend(), Some(2));
        assert_eq!(collections.take_resend(), None);
        assert!(
            collections.ack(&mut timers, 0, 200).rtt_ns.is_none(),
            "Karn: no sample after a retry"
        );
        collections.ack(&mut timers, 2, 200);
        assert!(collections.all_acked());
    }

    #[test]
    fn a_whole_message_acknowledgement_samples_its_one_collection_sent_once() {
        let mut timers = CollectionTimers::default();
        let mut one = Collections::new(3, 2);
        timers.reset(&one);
        one.on_frame_sent(&mut timers, 0, 100, |_| 50);
        one.on_frame_sent(&mut timers, 1, 110, |_| 50);
        assert_eq!(one.ack_all(&timers, 140), Some(30));
        assert!(one.all_acked());

        let mut resent = Collections::new(3, 2);
        timers.reset(&resent);
        resent.on_frame_sent(&mut timers, 1, 100, |_| 50);
        resent.expire(&mut timers, 150);
        resent.on_frame_sent(&mut timers, 1, 160, |_| 50);
        assert_eq!(
            resent.ack_all(&timers, 170),
            None,
            "Karn: no sample after a retry"
        );

        let mut several = Collections::new(1, 3);
        timers.reset(&several);
        for frame in 0..3 {
            several.on_frame_sent(&mut timers, frame, 100, |_| 50);
        }
        assert_eq!(
            several.ack_all(&timers, 130),
            None,
            "which collection's round trip it ends is unknown"
        );
    }

    #[test]
    fn window_limits_frames_in_flight() {
        let collections = Collections::new(2, 1000);
        assert_eq!(collections.window_end_frame(), 128);
    }
}

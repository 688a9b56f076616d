//! When a frame handed to the kernel actually leaves: the link towards a peer drains at the
//! rate acknowledgements come back, so a frame queued behind a burst (a GSO run, a CTS window
//! in a rate-limited qdisc) departs later than the moment it was sent. Retransmission timers
//! run from that estimated departure, not from the hand-over: otherwise every collection deep
//! in a queue times out although it is on its way (spurious retransmissions, each one more
//! load on the same queue), as on a 1 Gbit/s link where a 256-frame window is 3 ms of queue.
//!
//! The rate is learned from acknowledged bytes over intervals in which enough data was
//! acknowledged to say something about the link (not about an idle application): the fastest
//! recent sample wins, and the estimate drifts slower by an eighth per sample otherwise, so it
//! follows a link that became slower. Before the first sample the link is taken as infinitely
//! fast (frames depart when sent), which is the behaviour without this estimate.

use crate::{Nanos, Rank};

/// Shortest interval a rate sample covers: long enough to average over several collections.
const SAMPLE_INTERVAL_NS: Nanos = 500_000;
/// Fewest acknowledged bytes for an interval to count: below it the sender, not the link, set
/// the pace (a sample would teach a rate far below the link's).
const SAMPLE_MIN_BYTES: u64 = 32 * 1024;
/// An interval longer than this had idle time in it: start a new one instead of sampling.
const SAMPLE_MAX_NS: Nanos = 20 * SAMPLE_INTERVAL_NS;

/// One direction's drain estimate, per peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Drain {
    /// When the frames handed over so far are expected to have left.
    free_at_ns: Nanos,
    /// Time the link takes per KiB; 0 until the first sample (no queueing assumed).
    ns_per_kib: u64,
    /// Start of the current sampling interval and the bytes acknowledged before it.
    mark_ns: Nanos,
    mark_acked: u64,
    acked: u64,
}

impl Drain {
    /// A frame of `bytes` is handed over at `now`; returns when it is expected to leave.
    pub fn depart(&mut self, now: Nanos, bytes: usize) -> Nanos {
        let cost = (bytes as u64).saturating_mul(self.ns_per_kib) / 1024;
        self.free_at_ns = self.free_at_ns.max(now).saturating_add(cost);
        self.free_at_ns
    }

    /// `bytes` of data frames were acknowledged at `now` (first acknowledgements only).
    pub fn acknowledged(&mut self, now: Nanos, bytes: u64) {
        self.acked = self.acked.wrapping_add(bytes);
        let elapsed = now.saturating_sub(self.mark_ns);
        if elapsed < SAMPLE_INTERVAL_NS {
            return;
        }
        let delivered = self.acked.wrapping_sub(self.mark_acked);
        if elapsed <= SAMPLE_MAX_NS && delivered >= SAMPLE_MIN_BYTES {
            let sample = elapsed.saturating_mul(1024) / delivered;
            self.ns_per_kib = if self.ns_per_kib == 0 {
                sample
            } else {
                sample.min(self.ns_per_kib + self.ns_per_kib / 8)
            };
        }
        self.mark_ns = now;
        self.mark_acked = self.acked;
    }

    /// The estimated link rate in bytes per second, if one was learned.
    #[cfg(test)]
    pub fn bytes_per_sec(&self) -> Option<u64> {
        (self.ns_per_kib > 0).then(|| 1024 * 1_000_000_000 / self.ns_per_kib)
    }
}

/// When a frame handed over now is expected to leave, and how much later it may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Departure {
    /// Estimated departure: the start of a round-trip sample.
    pub at: Nanos,
    /// Allowance for the estimate being early: a quarter of the queueing delay (a token
    /// bucket's bursts make the learned rate optimistic).
    pub slack: Nanos,
}

impl Departure {
    /// Where a timeout waiting for the frame's answer starts.
    pub fn timer_start(&self) -> Nanos {
        self.at + self.slack
    }
}

impl crate::state::Core {
    /// Estimated departure of a frame of `bytes` to `dst` handed over at `now`.
    pub(crate) fn departure(&mut self, now: Nanos, dst: Rank, bytes: usize) -> Departure {
        let at = self.peers[dst].drain.depart(now, bytes);
        Departure {
            at,
            slack: (at - now) / 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_behind_a_burst_depart_later_once_the_rate_is_known() {
        let mut drain = Drain::default();
        assert_eq!(
            drain.depart(1_000, 1024),
            1_000,
            "no rate yet: leaves when sent"
        );
        // 1 Gbit/s: 128 KiB acknowledged per millisecond.
        for ms in 1..=4 {
            drain.acknowledged(ms * 1_000_000, 128 * 1024);
        }
        let rate = drain.bytes_per_sec().expect("learned");
        assert!((120_000_000..140_000_000).contains(&rate), "{rate}");
        let first = drain.depart(10_000_000, 1024);
        let last = (1..64).fold(first, |_, _| drain.depart(10_000_000, 1024));
        assert!(last - first > 400_000, "64 KiB at 1 Gbit/s take ~0.5 ms");
        assert!(
            drain.depart(20_000_000, 1024) < 20_010_000,
            "an idle link drains"
        );
    }

    #[test]
    fn an_idle_or_trickling_sender_teaches_no_rate() {
        let mut drain = Drain::default();
        for ms in 1..=50 {
            drain.acknowledged(ms * 1_000_000, 1024);
        }
        assert_eq!(drain.bytes_per_sec(), None);
        drain.acknowledged(500_000_000, 1 << 20);
        assert_eq!(drain.bytes_per_sec(), None, "a long gap is no sample");
    }
}

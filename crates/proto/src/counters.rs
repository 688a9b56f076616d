//! The endpoint's counters: totals, and the same counters per peer. Most events count in both,
//! and this is the one place that knows it.

use crate::stats::{DropReason, Stats};
use crate::Rank;

/// Counters of one endpoint, in total and for each peer.
pub(crate) struct Counters {
    total: Stats,
    /// By rank; every rank of the job has an entry from start-up.
    per_peer: Vec<Stats>,
}

impl Counters {
    pub(crate) fn new(size: u32) -> Self {
        Self {
            total: Stats::default(),
            per_peer: vec![Stats::default(); size as usize],
        }
    }

    /// Counts an event with `peer` in the totals and in the peer's counters.
    #[inline]
    pub(crate) fn record(&mut self, peer: Rank, count: impl Fn(&mut Stats)) {
        count(&mut self.total);
        count(&mut self.per_peer[peer as usize]);
    }

    /// Counts an event in the totals only (no peer known, or not a per-peer counter).
    #[inline]
    pub(crate) fn record_total(&mut self, count: impl FnOnce(&mut Stats)) {
        count(&mut self.total);
    }

    /// Counts an event in `peer`'s counters only (its total was counted already).
    #[inline]
    pub(crate) fn record_peer(&mut self, peer: Rank, count: impl FnOnce(&mut Stats)) {
        count(&mut self.per_peer[peer as usize]);
    }

    /// A dropped frame, from `peer` if its sender is known to be a rank of the job.
    pub(crate) fn drop_frame(&mut self, peer: Option<Rank>, reason: DropReason) {
        self.total.drops.count(reason);
        if let Some(stats) = peer.and_then(|p| self.per_peer.get_mut(p as usize)) {
            stats.drops.count(reason);
        }
    }

    pub(crate) fn total(&self) -> &Stats {
        &self.total
    }

    /// `peer`'s counters; `None` for a rank outside the job.
    pub(crate) fn peer(&self, peer: Rank) -> Option<&Stats> {
        self.per_peer.get(peer as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_with_a_peer_counts_in_both() {
        let mut counters = Counters::new(3);
        counters.record(2, |s| s.messages_sent += 1);
        counters.record_total(|s| s.control_overflows += 1);
        counters.record_peer(1, |s| s.frames_received += 1);
        assert_eq!(counters.total().messages_sent, 1);
        assert_eq!(counters.peer(2).map(|s| s.messages_sent), Some(1));
        assert_eq!(counters.peer(0).map(|s| s.messages_sent), Some(0));
        assert_eq!(counters.total().control_overflows, 1);
        assert_eq!(counters.total().frames_received, 0);
        assert_eq!(counters.peer(1).map(|s| s.frames_received), Some(1));
    }

    #[test]
    fn drops_from_outside_the_job_count_only_in_total() {
        let mut counters = Counters::new(2);
        counters.drop_frame(Some(7), DropReason::WrongRank);
        counters.drop_frame(Some(1), DropReason::Duplicate);
        counters.drop_frame(None, DropReason::Malformed);
        assert_eq!(counters.total().drops.total(), 3);
        assert_eq!(counters.peer(1).map(|s| s.drops.duplicate), Some(1));
        assert_eq!(counters.peer(7), None);
    }
}

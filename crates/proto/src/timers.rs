//! The endpoint's next deadline, derived rather than kept (quinn's `TimerTable` idea): no
//! component stores "the next timer"; each reports the earliest of its own timers
//! (`SendSide::next_deadline`, `RecvSide::next_deadline`, `Peers::next_deadline`) and the
//! endpoint takes the minimum. A deadline that is not stored cannot be left stale by a path that
//! forgets to update it. Computing it walks the tables, so [`DeadlineCache`] keeps the answer
//! between changes, and the endpoint forgets it on every `&mut` entry (`endpoint.rs`).

use std::cell::Cell;

use crate::Nanos;

/// The earliest of the deadlines considered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Earliest(Option<Nanos>);

impl Earliest {
    /// Takes `deadline` into account (`None`: no timer runs).
    #[inline]
    pub(crate) fn consider(&mut self, deadline: Option<Nanos>) {
        if let Some(at) = deadline {
            self.0 = Some(self.0.map_or(at, |e| e.min(at)));
        }
    }

    pub(crate) fn get(self) -> Option<Nanos> {
        self.0
    }
}

/// The next deadline as last computed, valid until the state changes.
#[derive(Debug, Default)]
pub(crate) struct DeadlineCache(Cell<Option<Option<Nanos>>>);

impl DeadlineCache {
    /// The cached deadline, or `compute`'s answer, kept for the next call.
    pub(crate) fn get_or_compute(&self, compute: impl FnOnce() -> Option<Nanos>) -> Option<Nanos> {
        if let Some(cached) = self.0.get() {
            return cached;
        }
        let deadline = compute();
        self.0.set(Some(deadline));
        deadline
    }

    /// The state may change: the next question computes the deadline again.
    pub(crate) fn forget(&mut self) {
        self.0.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_ignores_absent_timers() {
        let mut earliest = Earliest::default();
        assert_eq!(earliest.get(), None);
        earliest.consider(None);
        earliest.consider(Some(30));
        earliest.consider(Some(10));
        earliest.consider(None);
        earliest.consider(Some(20));
        assert_eq!(earliest.get(), Some(10));
    }

    #[test]
    fn the_cache_computes_once_until_forgotten() {
        let mut cache = DeadlineCache::default();
        let computed = Cell::new(0);
        let compute = || {
            computed.set(computed.get() + 1);
            Some(5)
        };
        assert_eq!(cache.get_or_compute(compute), Some(5));
        assert_eq!(cache.get_or_compute(compute), Some(5));
        assert_eq!(computed.get(), 1);
        cache.forget();
        assert_eq!(cache.get_or_compute(|| None), None);
        assert_eq!(
            cache.get_or_compute(compute),
            None,
            "no timer is an answer too"
        );
        assert_eq!(computed.get(), 1);
    }
}

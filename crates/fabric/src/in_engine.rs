//! The operations an endpoint has in its engine, and which of them finished.
//!
//! The engine names every slot it completes (`nicmsg_engine`'s finished ring), so a poll takes
//! the finished operations by their slots instead of asking each operation in flight. Open
//! MPI polls its queue in a loop while it waits: with 1,200 operations in flight each poll
//! asked each of them (a third of a rank's time), and with 16,000 sends waiting for a rank
//! that takes them one sender at a time, looking at all of them after every completion took a
//! sixth of each sender's time. When the engine's record may have missed some (nobody read it
//! and it filled, or the engine thread failed), every operation is asked once, as before.

use std::collections::VecDeque;
use std::net::SocketAddr;

use nicmsg::tagged::{Delivery, TaggedEndpoint};
use nicmsg::{Error, Request};

use crate::held::Owner;

/// An operation in the engine.
pub(crate) struct Pending {
    // Field order is drop order: the request lets go of the copy before the copy goes.
    pub request: Request<'static>,
    /// A send's copy of the application's bytes (`fi_inject`: the buffer is reusable at once),
    /// back to the endpoint's pool when the send completes.
    pub copy: Option<Vec<u8>>,
    pub owner: Owner,
    /// A send's destination (its share of the room, `held_sends.rs`); `None` for a receive.
    pub to: Option<SocketAddr>,
}

/// What is left of a finished operation once taken out ([`InEngine::take`]): its request is
/// gone.
pub(crate) struct Retired {
    /// As [`Pending::copy`].
    pub copy: Option<Vec<u8>>,
    pub owner: Owner,
    /// As [`Pending::to`].
    pub to: Option<SocketAddr>,
}

/// Where the operation of a slot is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    Nowhere,
    /// In `reported`, at this index.
    Reported(u32),
    /// In `unreported`, at this index.
    Unreported(u32),
}

/// A finished operation, still kept: its slot, its result and what its completion reports.
/// The caller takes the operation itself with [`InEngine::take`]: an operation is a few
/// hundred bytes, and carried out in this, it was copied four times a completion (an 8-byte
/// ping-pong's `memmove` went from 1 % to 2.6 % of its samples, and each half round trip took
/// 0.15 us longer).
pub(crate) struct Finished {
    slot: u32,
    pub result: Result<(), Error>,
    pub delivery: Delivery,
}

#[derive(Default)]
pub(crate) struct InEngine {
    /// Operations whose completion the application reads.
    reported: Vec<Pending>,
    /// Operations whose completion nobody reads (injects, buffered sends the provider
    /// reported itself). Kept apart so that a sender of short messages, which only injects,
    /// lets them go without touching the completions the application waits for.
    unreported: Vec<Pending>,
    /// Where each slot's operation is, by slot.
    kept: Vec<Kept>,
    /// Slots the engine named as finished and not looked at yet (some may name an operation
    /// taken back since, or a new one in the same slot: each is asked before it is believed).
    finished: VecDeque<u32>,
    /// The engine's completion count when the ring was last read (`None`: never): while it
    /// stays so, the engine completed nothing since, and a poll reads nothing. Open MPI polls
    /// in a loop while it waits; reading the ring and asking whether it lost names at every
    /// poll took 3 % of an 8-byte ping-pong's time.
    collected_at: Option<u32>,
}

impl InEngine {
    /// Operations in the engine, reported or not.
    pub(crate) fn len(&self) -> usize {
        self.reported.len() + self.unreported.len()
    }

    /// Operations in the engine whose completion nobody reads.
    pub(crate) fn unreported_len(&self) -> usize {
        self.unreported.len()
    }

    /// Every operation in the engine (to count sends by destination, to find one to cancel).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.reported.iter().chain(&self.unreported)
    }

    /// Keeps an operation just posted.
    pub(crate) fn push(&mut self, pending: Pending) {
        let slot = pending.request.slot() as usize;
        if slot >= self.kept.len() {
            self.kept.resize(slot + 1, Kept::Nowhere);
        }
        self.kept[slot] = if pending.owner.reads_nothing() {
            self.unreported.push(pending);
            Kept::Unreported(self.unreported.len() as u32 - 1)
        } else {
            self.reported.push(pending);
            Kept::Reported(self.reported.len() as u32 - 1)
        };
    }

    /// Reads the slots the engine finished since the last call; every operation's slot when
    /// that record may be incomplete.
    /// Every poll asks, and most find the count unchanged: that is answered here, inline.
    #[inline]
    pub(crate) fn collect(&mut self, endpoint: &TaggedEndpoint) {
        // Read before the ring: the engine names a slot before it counts the completion, so
        // a completion counted after this read is read at the next call at the latest. (A
        // failed engine thread bumps the count too.)
        let count = endpoint.completion_count();
        if self.collected_at == Some(count) {
            return;
        }
        self.collected_at = Some(count);
        self.collect_names(endpoint);
    }

    /// [`collect`](Self::collect) once the engine completed something since the last call.
    fn collect_names(&mut self, endpoint: &TaggedEndpoint) {
        if endpoint.finished_slots_incomplete() {
            let every = self.reported.iter().chain(&self.unreported);
            self.finished
                .extend(every.map(|pending| pending.request.slot()));
        }
        while let Some(slot) = endpoint.next_finished_slot() {
            self.finished.push_back(slot);
        }
    }

    /// The next finished operation of those collected, taken out; with `reported` false, only
    /// those nobody reads (the others stay for the next call that takes them).
    /// Most polls collected nothing: that is answered here, inline.
    #[inline]
    pub(crate) fn next_finished(&mut self, reported: bool) -> Option<Finished> {
        if self.finished.is_empty() {
            return None;
        }
        self.next_finished_named(reported)
    }

    /// [`next_finished`](Self::next_finished) with slots collected.
    fn next_finished_named(&mut self, reported: bool) -> Option<Finished> {
        for _ in 0..self.finished.len() {
            let slot = self.finished.pop_front()?;
            let kept = self
                .kept
                .get(slot as usize)
                .copied()
                .unwrap_or(Kept::Nowhere);
            let pending = match kept {
                Kept::Nowhere => continue,
                Kept::Reported(_) if !reported => {
                    self.finished.push_back(slot);
                    continue;
                }
                Kept::Reported(index) => &mut self.reported[index as usize],
                Kept::Unreported(index) => &mut self.unreported[index as usize],
            };
            if let Some((result, delivery)) = pending.request.delivery_if_done() {
                return Some(Finished {
                    slot,
                    result,
                    delivery,
                });
            }
        }
        None
    }

    /// Takes out the operation [`next_finished`](Self::next_finished) found: what is left of
    /// it once finished ([`Retired`]). The operation itself is dropped where it is kept rather
    /// than moved out: it is a few hundred bytes, and moving it (out of its list, then to the
    /// caller) was three `memcpy` calls a completion.
    pub(crate) fn take(&mut self, finished: &Finished) -> Retired {
        let slot = finished.slot as usize;
        let (list, kept_at, index): (_, fn(u32) -> Kept, u32) = match self.kept[slot] {
            Kept::Reported(index) => (&mut self.reported, Kept::Reported, index),
            Kept::Unreported(index) => (&mut self.unreported, Kept::Unreported, index),
            Kept::Nowhere => unreachable!("a finished operation is kept until taken"),
        };
        let index = index as usize;
        let pending = &mut list[index];
        // The request was taken back from the engine when `next_finished` found it done (or
        // abandoned with a failed engine), so it no longer reads the copy: taking the copy out
        // before the request is dropped keeps the order `Pending`'s fields have.
        let retired = Retired {
            copy: pending.copy.take(),
            owner: pending.owner,
            to: pending.to,
        };
        // swap_remove, without moving the removed operation out: the last one fills the hole.
        let last = list.len() - 1;
        if index != last {
            list.swap(index, last);
            self.kept[list[index].request.slot() as usize] = kept_at(index as u32);
        }
        list.truncate(last);
        self.kept[slot] = Kept::Nowhere;
        retired
    }
}

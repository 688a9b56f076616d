//! Sends held by the provider (`held.rs` says why operations are held), and how the engine's
//! room for sends is shared between destinations.
//!
//! **Order per destination, not across.** A held send waits behind the sends held before it
//! to the same destination: MPI's non-overtaking order, and libfabric's `FI_ORDER_SAS`, are
//! between one pair of endpoints. Sends to other destinations have no order to keep, and once
//! held in one queue they waited behind every send held before them, whatever its
//! destination. With the room full of rendezvous sends to one peer that posts its receives
//! only later, a short send to a third rank waited behind them, and if that third rank is what
//! the first waits for, the job hung (`tests/mpi/held_behind.c`: 300 sends of 100 KiB to rank
//! 1, then one to rank 2, which rank 1 waits for, at 256 slots). Now each destination has its
//! own queue, and room that frees goes to the oldest held send whose destination may take it.
//!
//! **Each destination's share.** Per-destination queues alone do not help when one
//! destination's sends take the whole room, since room frees only as they complete. So the
//! last quarter of the room is shared: while more than a quarter is free, any destination may
//! put another send into the engine; past that, a destination may only while it has fewer
//! there than the room left free beyond a reserve ([`SendShares::fits`]). One destination
//! alone takes three quarters of the room, a second about half of the rest of the last
//! quarter, a third half of what is left, and so on. The whole room is not shared so, because
//! a receiver may take nonblocking sends in any order of tags, so a send held while sends
//! posted before it wait in the engine for their receives may be the one the receiver waits
//! for. With one destination held to half the room, 100 rendezvous sends to one rank at 256
//! slots (153 sends of room) left 23 held, and a receiver that took them last first hung
//! (`tests/mpi/held_reverse.c`), where all 100 had gone into the engine before destinations
//! had shares.
//!
//! **The reserve.** The last sixteenth of the room (`SendShares::reserve`: 762 of the
//! provider's 12,192 sends, 9 of 153 at 256 slots) takes only sends to destinations with
//! nothing in the engine. Without it, halving the rest from one flooding destination to the
//! next left no room at all once about log2(room / 4) destinations flooded at once (11 of
//! 12,192; 5 of 153), and a send to a destination with nothing in the engine (a barrier's
//! message the flooded ranks wait for) waited for ever. Now the first send of a destination
//! finds room while fewer destinations than the reserve holds hold one there, however many
//! flood. A destination needs no more of the reserve: its send leaves the engine once its
//! receiver takes it, and its next send enters.
//!
//! **Counted only when it matters.** While more than a quarter of the room is free, every
//! destination may take more: nothing is counted, and a send's fast path looks at no map. From
//! three quarters of the room taken on, the sends in the engine are counted by destination
//! ([`SendShares::count_if_due`]), until half of it is free again.

use std::collections::{BTreeSet, VecDeque};
use std::ffi::c_void;
use std::net::SocketAddr;

use rustc_hash::FxHashMap;

use crate::held::{Owner, SendTarget, MAX_HELD_BYTES, MAX_HELD_SENDS};

/// A held send's bytes.
pub enum HeldBytes {
    /// The provider's copy (an inject's, or a buffered send's).
    Copy(Vec<u8>),
    /// The application's buffers, valid until the send completes.
    Borrowed(Vec<libc::iovec>),
}

impl HeldBytes {
    /// Bytes of the provider's memory this holds.
    fn copied(&self) -> usize {
        match self {
            HeldBytes::Copy(copy) => copy.len(),
            HeldBytes::Borrowed(_) => 0,
        }
    }
}

/// A send waiting for room: its bytes, where it goes, and whose it is.
pub struct HeldSend {
    pub bytes: HeldBytes,
    pub target: SendTarget,
    pub owner: Owner,
}

/// The place a held send taken out to be posted had among the held: where it goes back if
/// the engine had no room after all.
pub struct Place(u64);

/// How many destinations' oldest held sends a look for room goes through: past them, the
/// room waits for the next look. As many as an open endpoint keeps peers
/// (`nicmsg_proto::MAX_OPEN_PEERS`): a destination that fits behind a first 64 at their
/// shares waited while they did, and if they waited for it, for ever. The look runs only
/// while there is room, and stops at the first that fits.
const FRONTS_LOOKED_AT: usize = nicmsg_proto::MAX_OPEN_PEERS as usize;

/// The held sends of one endpoint: a queue per destination, oldest first.
#[derive(Default)]
pub struct HeldSends {
    queues: FxHashMap<SocketAddr, VecDeque<(u64, HeldSend)>>,
    /// The order of each destination's oldest held send, oldest first.
    fronts: BTreeSet<(u64, SocketAddr)>,
    next_order: u64,
    len: usize,
    bytes: usize,
}

impl HeldSends {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether sends to `to` are held: a new one waits behind them.
    pub fn holds_for(&self, to: SocketAddr) -> bool {
        self.len > 0 && self.queues.get(&to).is_some_and(|queue| !queue.is_empty())
    }

    /// Holds `send` behind the others to its destination; gives it back if the bounds are
    /// reached.
    pub fn hold(&mut self, send: HeldSend) -> Result<(), HeldSend> {
        let bytes = self.bytes + send.bytes.copied();
        if self.len >= MAX_HELD_SENDS || bytes > MAX_HELD_BYTES {
            return Err(send);
        }
        self.bytes = bytes;
        self.len += 1;
        let order = self.next_order;
        self.next_order += 1;
        let to = send.target.to;
        let queue = self.queues.entry(to).or_default();
        if queue.is_empty() {
            self.fronts.insert((order, to));
        }
        queue.push_back((order, send));
        Ok(())
    }

    /// Takes out the oldest held send whose destination `fits` (the first held to it): the
    /// one to post as room frees.
    pub fn take_fitting(&mut self, fits: impl Fn(SocketAddr) -> bool) -> Option<(Place, HeldSend)> {
        let &(_, to) = self
            .fronts
            .iter()
            .take(FRONTS_LOOKED_AT)
            .find(|&&(_, to)| fits(to))?;
        let (order, send) = self.take_at(to, 0);
        Some((Place(order), send))
    }

    /// Takes out the send at `at` in `to`'s queue (which holds it), keeping the fronts, the
    /// counts and the map of queues (no empty queue stays) right.
    fn take_at(&mut self, to: SocketAddr, at: usize) -> (u64, HeldSend) {
        let queue = self
            .queues
            .get_mut(&to)
            .expect("a held destination has its queue");
        let (order, send) = queue.remove(at).expect("the queue holds the send");
        if at == 0 {
            self.fronts.remove(&(order, to));
            match queue.front() {
                Some(&(next, _)) => {
                    self.fronts.insert((next, to));
                }
                None => {
                    self.queues.remove(&to);
                }
            }
        }
        self.len -= 1;
        self.bytes -= send.bytes.copied();
        (order, send)
    }

    /// Puts back, as the oldest to its destination, a send the engine had no room for after
    /// all.
    pub fn put_back(&mut self, Place(order): Place, send: HeldSend) {
        let to = send.target.to;
        self.len += 1;
        self.bytes += send.bytes.copied();
        let queue = self.queues.entry(to).or_default();
        if let Some(&(front, _)) = queue.front() {
            self.fronts.remove(&(front, to));
        }
        self.fronts.insert((order, to));
        queue.push_front((order, send));
    }

    /// What standard error is told when a send is refused for want of room to hold it: how
    /// many sends and bytes are held, against the bounds. Either bound refuses a send (1,024
    /// buffered sends of 64 KiB reach the bytes' bound), and the notice named 65,536 sends
    /// whichever it was.
    pub fn full_notice(&self) -> String {
        format!(
            "nicmsg: a libfabric endpoint holds {} sends ({} KiB of copies) waiting for room in \
             its engine, at most {MAX_HELD_SENDS} sends and {} KiB; further sends are refused \
             with -FI_EAGAIN until some complete",
            self.len,
            self.bytes >> 10,
            MAX_HELD_BYTES >> 10
        )
    }

    /// Takes out the held send posted with `context` (never the provider's own, whose context
    /// is null), for a cancel.
    /// The oldest, should a context name several (libfabric leaves that to the application).
    pub fn withdraw(&mut self, context: *mut c_void) -> Option<HeldSend> {
        if context.is_null() {
            return None;
        }
        let (_, to, at) = self
            .queues
            .iter()
            .filter_map(|(&to, queue)| {
                let at = queue
                    .iter()
                    .position(|(_, send)| send.owner.context == context)?;
                Some((queue[at].0, to, at))
            })
            .min_by_key(|&(order, _, _)| order)?;
        Some(self.take_at(to, at).1)
    }
}

/// The sends in the engine by destination, counted while no more than a quarter of the room
/// for sends is free (see the module documentation).
#[derive(Debug)]
pub struct SendShares {
    counts: Option<FxHashMap<SocketAddr, usize>>,
    /// The room for sends that is shared (a quarter of it): while more than this is free,
    /// any destination may take more.
    shared: usize,
    /// Of the shared room, what only destinations with nothing in the engine may take (a
    /// sixteenth of the room; see the module documentation).
    reserve: usize,
}

impl SendShares {
    /// The shares of a room for `room` sends.
    pub fn new(room: usize) -> Self {
        Self {
            counts: None,
            shared: room / 4,
            reserve: room / 16,
        }
    }

    /// Whether the sends in the engine must be counted by destination, with `free` of the
    /// room for `room` sends free: from the shared quarter on, and on until half of the room
    /// is free again (a stream at the edge does not count them afresh at every send).
    fn counting_due(&self, room: usize, free: usize) -> bool {
        if self.counting() {
            free <= room / 2
        } else {
            free <= self.shared
        }
    }

    /// Whether the sends in the engine are being counted.
    pub fn counting(&self) -> bool {
        self.counts.is_some()
    }

    /// Starts or stops counting as due ([`counting_due`](Self::counting_due)) with `free` of
    /// the room for `room` sends free; `in_engine` gives the destinations of the sends in the
    /// engine, asked only when counting starts.
    pub fn count_if_due<I: Iterator<Item = SocketAddr>>(
        &mut self,
        room: usize,
        free: usize,
        in_engine: impl FnOnce() -> I,
    ) {
        let due = self.counting_due(room, free);
        if due == self.counting() {
            return;
        }
        if due {
            self.start(in_engine());
        } else {
            self.stop();
        }
    }

    /// Starts counting, from the destinations of the sends in the engine now.
    fn start(&mut self, in_engine: impl Iterator<Item = SocketAddr>) {
        let mut counts = FxHashMap::default();
        for to in in_engine {
            *counts.entry(to).or_insert(0) += 1;
        }
        self.counts = Some(counts);
    }

    fn stop(&mut self) {
        self.counts = None;
    }

    /// A send to `to` went into the engine.
    pub fn sent(&mut self, to: SocketAddr) {
        if let Some(counts) = &mut self.counts {
            *counts.entry(to).or_insert(0) += 1;
        }
    }

    /// A send to `to` left the engine.
    pub fn done(&mut self, to: SocketAddr) {
        if let Some(counts) = &mut self.counts {
            if let Some(count) = counts.get_mut(&to) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(&to);
                }
            }
        }
    }

    /// Whether one more send to `to` is within its share while `free` of the room for sends
    /// is free: more than the shared quarter is free; or `to` has nothing in the engine and
    /// any room is free (the reserve); or `to` has fewer sends in the engine than the room
    /// free beyond the reserve. Counting must have started when the shared quarter was
    /// reached ([`counting_due`](Self::counting_due)).
    pub fn fits(&self, to: SocketAddr, free: usize) -> bool {
        if free > self.shared {
            return true;
        }
        debug_assert!(self.counting(), "the shared room is reached uncounted");
        let in_engine = self
            .counts
            .as_ref()
            .map_or(0, |counts| counts.get(&to).copied().unwrap_or(0));
        if in_engine == 0 {
            return free > 0;
        }
        in_engine < free.saturating_sub(self.reserve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::held::Kind;
    use nicmsg::tagged::{SendOptions, Space};
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn to(port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
    }

    fn send_to(port: u16, len: usize) -> HeldSend {
        HeldSend {
            bytes: HeldBytes::Copy(vec![7; len]),
            target: SendTarget {
                to: to(port),
                space_tag: (Space::Tagged, 1),
                options: SendOptions::default(),
            },
            owner: Owner {
                context: std::ptr::null_mut(),
                buf: std::ptr::null_mut(),
                kind: Kind {
                    is_send: true,
                    tagged: true,
                    wanted: true,
                },
            },
        }
    }

    fn taken_order(held: &mut HeldSends, fits: impl Fn(SocketAddr) -> bool) -> Vec<(u16, usize)> {
        std::iter::from_fn(|| held.take_fitting(&fits))
            .map(|(_, send)| (send.target.to.port(), send.bytes.copied()))
            .collect()
    }

    #[test]
    fn held_sends_leave_oldest_first_within_their_bounds() {
        let mut held = HeldSends::default();
        for len in [1, 2, 3] {
            assert!(held.hold(send_to(9, len)).is_ok());
        }
        let (place, first) = held.take_fitting(|_| true).expect("held");
        assert_eq!(first.bytes.copied(), 1);
        held.put_back(place, first);
        assert_eq!(taken_order(&mut held, |_| true), [(9, 1), (9, 2), (9, 3)]);
        assert!(held.is_empty());
        let mut full = HeldSends::default();
        for _ in 0..MAX_HELD_BYTES / 4096 {
            assert!(full.hold(send_to(9, 4096)).is_ok());
        }
        assert!(full.hold(send_to(9, 1)).is_err(), "past the byte bound");
    }

    /// A destination that may not take more waits, in order, while the others go, oldest
    /// first: the short send to a third rank no longer waits behind a flood to another.
    #[test]
    fn a_send_to_another_destination_passes_a_destination_at_its_share() {
        let mut held = HeldSends::default();
        for (port, len) in [(1, 10), (1, 11), (2, 20), (1, 12), (3, 30), (2, 21)] {
            assert!(held.hold(send_to(port, len)).is_ok());
        }
        assert!(held.holds_for(to(1)) && held.holds_for(to(3)) && !held.holds_for(to(4)));
        assert_eq!(
            taken_order(&mut held, |to| to.port() != 1),
            [(2, 20), (3, 30), (2, 21)]
        );
        assert_eq!(held.len(), 3);
        let (place, oldest) = held.take_fitting(|_| true).expect("port 1's oldest");
        assert_eq!(oldest.bytes.copied(), 10);
        held.put_back(place, oldest);
        assert_eq!(
            taken_order(&mut held, |_| true),
            [(1, 10), (1, 11), (1, 12)]
        );
        assert!(held.is_empty() && held.queues.is_empty() && held.fronts.is_empty());
    }

    #[test]
    fn a_cancel_takes_a_held_send_out_of_the_middle_or_the_front() {
        let mut held = HeldSends::default();
        let contexts: Vec<*mut c_void> = (1..=4usize).map(|n| n as *mut c_void).collect();
        for (n, port) in [1, 1, 2, 1].into_iter().enumerate() {
            let mut send = send_to(port, n + 1);
            send.owner.context = contexts[n];
            assert!(held.hold(send).is_ok());
        }
        assert!(held.withdraw(std::ptr::null_mut()).is_none());
        let second = held.withdraw(contexts[1]).expect("the second, to port 1");
        assert_eq!(second.bytes.copied(), 2);
        let first = held.withdraw(contexts[0]).expect("port 1's front");
        assert_eq!(first.bytes.copied(), 1);
        assert_eq!(taken_order(&mut held, |_| true), [(2, 3), (1, 4)]);
        assert!(held.withdraw(contexts[0]).is_none(), "gone already");
    }

    #[test]
    fn a_cancel_of_a_context_named_twice_takes_the_oldest() {
        let mut held = HeldSends::default();
        let context = 7usize as *mut c_void;
        for (port, len) in [(3, 1), (2, 2), (1, 3)] {
            let mut send = send_to(port, len);
            send.owner.context = context;
            assert!(held.hold(send).is_ok());
        }
        let lens: Vec<usize> = std::iter::from_fn(|| held.withdraw(context))
            .map(|send| send.bytes.copied())
            .collect();
        assert_eq!(lens, [1, 2, 3]);
    }

    #[test]
    fn the_notice_of_a_refused_send_names_the_bound_it_reached() {
        let mut held = HeldSends::default();
        while held.hold(send_to(9, 64 << 10)).is_ok() {}
        let notice = held.full_notice();
        assert!(
            notice.contains("holds 1024 sends (65536 KiB of copies)"),
            "{notice}"
        );
        assert!(
            notice.contains("at most 65536 sends and 65536 KiB"),
            "{notice}"
        );
    }

    /// Room for `room` sends, and the destinations of the sends in the engine, counted as
    /// the endpoint counts them ([`SendShares::count_if_due`]).
    struct Room {
        room: usize,
        shares: SendShares,
        in_engine: Vec<SocketAddr>,
    }

    impl Room {
        fn new(room: usize) -> Self {
            Self {
                room,
                shares: SendShares::new(room),
                in_engine: Vec::new(),
            }
        }

        fn fits(&mut self, port: u16) -> bool {
            let free = self.room - self.in_engine.len();
            let in_engine = &self.in_engine;
            self.shares
                .count_if_due(self.room, free, || in_engine.iter().copied());
            free > 0 && self.shares.fits(to(port), free)
        }

        /// Sends to `port` while they fit; how many went in.
        fn flood(&mut self, port: u16) -> usize {
            let mut sent = 0;
            while self.fits(port) {
                self.shares.sent(to(port));
                self.in_engine.push(to(port));
                sent += 1;
            }
            sent
        }

        fn complete(&mut self, port: u16, sends: usize) {
            for _ in 0..sends {
                let at = self
                    .in_engine
                    .iter()
                    .position(|&to| to.port() == port)
                    .unwrap();
                self.shares.done(self.in_engine.remove(at));
            }
        }

        fn count(&self, port: u16) -> Option<usize> {
            self.shares.counts.as_ref()?.get(&to(port)).copied()
        }
    }

    /// One destination takes three quarters of the room; a second about half of the last
    /// quarter less the reserve, a third half of what is left; a destination with nothing in
    /// the engine fits while any room is free. Counting starts at the last quarter and ends
    /// at half the room.
    #[test]
    fn one_destination_takes_three_quarters_and_the_last_quarter_is_shared() {
        let mut room = Room::new(100);
        assert_eq!(room.shares.reserve, 6);
        assert_eq!((room.flood(1), room.flood(2), room.flood(3)), (75, 10, 5));
        assert!(room.fits(4), "a newcomer fits");
        room.complete(1, 20);
        assert!(room.fits(1), "below the last quarter");
        assert!(
            room.shares.counting(),
            "counted until half the room is free"
        );
        room.complete(1, 55);
        assert_eq!(room.count(1), None, "a destination at 0 is forgotten");
        assert!(room.fits(1));
        assert!(!room.shares.counting(), "more than half the room is free");
    }

    /// However many destinations flood, the reserve keeps room for the first send of as many
    /// destinations as it holds: without it, the room was gone after about log2(room / 4)
    /// flooding destinations, and a send to a destination with nothing in the engine (which
    /// the flooded ranks may wait for) waited for ever.
    #[test]
    fn a_destination_with_nothing_in_the_engine_finds_room_past_many_floods() {
        let mut room = Room::new(12_192);
        let reserve = room.shares.reserve;
        assert_eq!(reserve, 762);
        let floods: Vec<usize> = (1..=40).map(|port| room.flood(port)).collect();
        assert_eq!(floods[0], 9_144, "the first destination's three quarters");
        let flooders_in_reserve = floods.iter().filter(|&&sent| sent == 1).count();
        assert!(flooders_in_reserve < 40, "{floods:?}");
        let free = room.room - room.in_engine.len();
        // The flooders left the reserve but for one send each of the last ones, which came
        // with nothing in the engine.
        assert!(
            free + flooders_in_reserve >= reserve,
            "{free} free: {floods:?}"
        );
        for newcomer in 1_000..1_000 + free as u16 {
            assert!(room.fits(newcomer), "newcomer {newcomer}");
            assert_eq!(room.flood(newcomer), 1, "one send each, from the reserve");
        }
        assert!(!room.fits(5_000), "the reserve is used up");
        // The first flooder's sends complete: room for everyone again.
        room.complete(1, 9_144);
        assert!(room.fits(5_000));
    }
}

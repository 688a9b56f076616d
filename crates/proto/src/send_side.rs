//! The send side of one endpoint: the send table and what hangs off it (each send's
//! retransmission timers and short-message copy), the index of started sends by message id,
//! the ready queue that schedules data frames, and the count of sends completed early. The
//! protocol that drives sends (start, grants, acknowledgements, END) is in `sender.rs`; this
//! module keeps their state consistent: a send's side data is reset when it is inserted, and
//! scheduling never hands out a frame of a send that has none to go.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::{Index, IndexMut};

use rustc_hash::FxHashMap;

use crate::collections::CollectionTimers;
use crate::lent_copies::LentCopies;
use crate::ops::{copy_short, SendOp, SendPhase, ShortCopy};
use crate::slab::{SendKey, SideTable, Slab};
use crate::timers::DeadlineIndex;
use crate::transmit::INLINE_PAYLOAD_MAX;
use crate::usage::TableUsage;
use crate::{HostMemory, Nanos, Rank, RegionId};

/// Frames of one send emitted before the next ready send gets its turn: keeps one large message
/// from starving the others, yet sends each in long runs. A receiver predicts where the next
/// frames go from the last one that arrived (`placement.rs`) and the kernel coalesces runs of
/// frames (GRO): frames of several messages interleaved a few at a time defeat both. 64 frames
/// are about one coalesced 64 KB datagram and a quarter of a CTS window.
const FRAMES_PER_TURN: u32 = 64;

/// The send operations of one endpoint and their scheduling.
pub(crate) struct SendSide {
    sends: Slab<SendKey, SendOp>,
    /// Retransmission timers of each send's collections (`collections.rs`).
    timers: SideTable<SendKey, CollectionTimers>,
    /// The bytes of each short send (`SendOp::copy`).
    copies: SideTable<SendKey, ShortCopy>,
    /// Started sends by (destination, message id). Fx hashing: a lookup on every frame costs a
    /// few instructions instead of SipHash's ~100; the map never holds more entries than the
    /// table, so even keys chosen to collide cost a bounded probe.
    active: FxHashMap<(Rank, u32), SendKey>,
    /// Sends with a frame to transmit, served round-robin, `FRAMES_PER_TURN` frames a turn.
    ready: VecDeque<SendKey>,
    /// Send copies the host lent for longer eager messages (`lend_copies`).
    lent: Option<LentCopies>,
    /// Sends completed when they started (short copied messages) and not yet acknowledged.
    completed_early: usize,
    /// Most such sends at a time (`Config::max_early_sends`).
    completed_early_limit: usize,
    /// Which sends to ask for the earliest deadline (`timers.rs`): told of every send handed
    /// out for changing (`insert_with`, `with_timers`, `reset_timers`, `IndexMut`), the only
    /// ways to change what `deadline` reads.
    deadlines: RefCell<DeadlineIndex<SendKey>>,
}

impl SendSide {
    pub(crate) fn new(max_sends: usize, max_early_sends: usize) -> Self {
        Self {
            sends: Slab::with_limit(max_sends),
            timers: SideTable::new(CollectionTimers::default()),
            copies: SideTable::new([0; INLINE_PAYLOAD_MAX]),
            lent: None,
            active: FxHashMap::default(),
            ready: VecDeque::new(),
            completed_early: 0,
            completed_early_limit: max_early_sends,
            deadlines: RefCell::new(DeadlineIndex::new(max_sends)),
        }
    }

    // --- the table ---

    /// Stores the send `make` builds (built in place) with its timers cleared; its key and
    /// generation, or `None` when the table is full.
    #[inline(always)]
    pub(crate) fn insert_with(&mut self, make: impl FnOnce() -> SendOp) -> Option<(SendKey, u32)> {
        let (key, generation) = self.sends.insert_with(make)?;
        self.timers.cover(key);
        self.copies.cover(key);
        self.timers[key].reset(&self.sends[key].collections);
        self.deadlines.get_mut().touch(key);
        Some((key, generation))
    }

    /// Removes a send; the caller has taken it out of the active index (`deactivate`). A key
    /// left in the ready queue is skipped when its turn comes.
    pub(crate) fn remove(&mut self, key: SendKey) -> Option<SendOp> {
        let op = self.sends.remove(key)?;
        if let (Some(piece), Some(lent)) = (op.lent_copy, self.lent.as_mut()) {
            lent.give_back(piece);
        }
        Some(op)
    }

    pub(crate) fn get(&self, key: SendKey) -> Option<&SendOp> {
        self.sends.get(key)
    }

    /// The key of the send a host handle names, if it still names one.
    pub(crate) fn key_checked(&self, index: u32, generation: u32) -> Option<SendKey> {
        self.sends.key_checked(index, generation)
    }

    /// The send a host handle names, if it still names one.
    pub(crate) fn get_checked(&self, index: u32, generation: u32) -> Option<&SendOp> {
        self.sends.get_checked(index, generation)
    }

    pub(crate) fn generation(&self, key: SendKey) -> u32 {
        self.sends.generation(key)
    }

    /// Keys of live sends, in slot order.
    pub(crate) fn occupied(&self) -> impl Iterator<Item = SendKey> + '_ {
        self.sends.occupied()
    }

    pub(crate) fn usage(&self) -> TableUsage {
        self.sends.usage
    }

    /// A send and its collections' timers, to change both.
    pub(crate) fn with_timers(&mut self, key: SendKey) -> (&mut SendOp, &mut CollectionTimers) {
        self.deadlines.get_mut().touch(key);
        (&mut self.sends[key], &mut self.timers[key])
    }

    /// Clears a send's timers for its collections as they are now (its geometry changed).
    pub(crate) fn reset_timers(&mut self, key: SendKey) {
        self.deadlines.get_mut().touch(key);
        self.timers[key].reset(&self.sends[key].collections);
    }

    // --- short copies ---

    /// Copies a short send's bytes out of host memory into the core (BIP's bounce buffer), if
    /// they fit in one frame: its frames carry them from there.
    pub(crate) fn copy_short(&mut self, key: SendKey, memory: &impl HostMemory) {
        let op = &mut self.sends[key];
        op.copy = copy_short(&op.data, memory, &mut self.copies[key]);
    }

    /// The bytes copied for a short send, if it was copied.
    pub(crate) fn copy(&self, key: SendKey) -> Option<&[u8]> {
        let len = self.sends[key].copy?;
        Some(&self.copies[key][..usize::from(len)])
    }

    /// Takes `pieces` pieces of `piece_len` bytes of host region `region` (at most
    /// [`crate::lent_copies::MAX_LENT_COPIES`]) for copies of eager messages above
    /// `LENT_COPY_ABOVE`. Replaces any earlier loan; only before the first send.
    pub(crate) fn lend_copies(&mut self, region: RegionId, piece_len: u64, pieces: u32) {
        self.lent = LentCopies::new(region, piece_len, pieces);
    }

    /// Copies an eager send above `LENT_COPY_ABOVE` bytes into a free lent piece, if one is free,
    /// the message fits it, and the send could complete early; its frames then read the copy.
    pub(crate) fn copy_to_lent(&mut self, key: SendKey, memory: &mut impl HostMemory) {
        let len = self.sends[key].data.total_len();
        if !self.has_early_room() {
            return;
        }
        let Some(lent) = self.lent.as_mut().filter(|lent| lent.fits(len)) else {
            return;
        };
        let Some(piece) = lent.take() else {
            return;
        };
        let copy = lent.buffer(piece, len);
        let op = &mut self.sends[key];
        if !memory.copy_into(&op.data, &copy, len) {
            lent.give_back(piece);
            return;
        }
        op.data = copy;
        op.lent_copy = Some(piece);
    }

    // --- started sends by message id ---

    /// The send to `dst` started under `msg_id`.
    pub(crate) fn activate(&mut self, dst: Rank, msg_id: u32, key: SendKey) {
        let previous = self.active.insert((dst, msg_id), key);
        debug_assert!(previous.is_none(), "message id {msg_id} to {dst} reused");
    }

    /// The send to `dst` under `msg_id` finished.
    pub(crate) fn deactivate(&mut self, dst: Rank, msg_id: u32) {
        self.active.remove(&(dst, msg_id));
    }

    /// The started send to `peer` with `msg_id`, if any.
    pub(crate) fn active(&self, peer: Rank, msg_id: u32) -> Option<SendKey> {
        self.active.get(&(peer, msg_id)).copied()
    }

    // --- scheduling ---

    /// Lists the send in the ready queue if it has a frame to go and is not listed yet.
    pub(crate) fn mark_ready(&mut self, key: SendKey) {
        let Some(op) = self.sends.get_mut(key) else {
            return;
        };
        if !op.in_ready && op.has_frame_to_send() {
            op.in_ready = true;
            self.ready.push_back(key);
        }
    }

    /// True if some send is listed as having a frame to go.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next data frame to send: the send at the head of the ready queue and its frame, and
    /// whether the frame is a retransmission. Sends with nothing to go leave the queue. Call
    /// [`frame_taken`](Self::frame_taken) once the frame is built.
    pub(crate) fn next_frame(&mut self) -> Option<(SendKey, u32, bool)> {
        while let Some(&key) = self.ready.front() {
            let Some(op) = self.sends.get_mut(key) else {
                self.ready.pop_front();
                continue;
            };
            let Some((frame, retransmit)) = choose_frame(op) else {
                op.in_ready = false;
                self.ready.pop_front();
                continue;
            };
            return Some((key, frame, retransmit));
        }
        None
    }

    /// The send at the head of the ready queue sent a frame: it keeps the head for
    /// `FRAMES_PER_TURN` frames, then moves to the back; a send with nothing more leaves.
    pub(crate) fn frame_taken(&mut self, key: SendKey) {
        debug_assert_eq!(self.ready.front(), Some(&key), "frames come from the head");
        let op = &mut self.sends[key];
        op.turn_frames += 1;
        if !op.has_frame_to_send() {
            op.in_ready = false;
            op.turn_frames = 0;
            self.ready.pop_front();
        } else if op.turn_frames >= FRAMES_PER_TURN {
            op.turn_frames = 0;
            self.ready.pop_front();
            self.ready.push_back(key);
        }
    }

    /// Drops the keys of freed sends from the ready queue.
    pub(crate) fn forget_freed_ready(&mut self) {
        let sends = &self.sends;
        self.ready.retain(|&key| sends.get(key).is_some());
    }

    // --- sends completed early ---

    /// True if the send may report success now: its bytes are the core's copy, and fewer than
    /// `max_early_sends` sends the host no longer sees wait for their acknowledgement.
    pub(crate) fn may_complete_early(&self, key: SendKey) -> bool {
        let op = &self.sends[key];
        (op.copy.is_some() || op.lent_copy.is_some()) && self.has_early_room()
    }

    /// True if fewer than `max_early_sends` sends the host no longer sees are still in the
    /// table (waiting for their acknowledgement, or for the end of their handshake).
    pub(crate) fn has_early_room(&self) -> bool {
        self.completed_early < self.completed_early_limit
    }

    /// The send reported success when it started; its later end completes nothing.
    pub(crate) fn completed_early(&mut self, key: SendKey) {
        debug_assert!(self.completed_early < self.completed_early_limit);
        self.sends[key].completed_early = true;
        self.completed_early += 1;
    }

    /// A send that completed early ended (acknowledged, or failed after the report).
    pub(crate) fn early_send_ended(&mut self) {
        debug_assert!(self.completed_early > 0, "early send count underflows");
        self.completed_early -= 1;
    }

    // --- timers ---

    /// When the send needs attention: its CANCEL's answer is overdue, or a collection's
    /// retransmission or its wait for a CTS or MSG-ACK is due.
    pub(crate) fn deadline(&self, key: SendKey) -> Option<Nanos> {
        deadline_of(&self.sends, &self.timers, key)
    }

    /// The earliest deadline of any send, from the index of deadlines (`timers.rs`); checked
    /// against a walk of every send in debug builds.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        let earliest = self.deadlines.borrow_mut().earliest(
            self.sends.usage.in_use,
            |key| self.deadline(key),
            || self.sends.occupied(),
        );
        debug_assert_eq!(
            earliest,
            self.walk_next_deadline(),
            "the deadline index is stale"
        );
        earliest
    }

    /// Puts in `due`, in slot order, the sends whose deadline is at or before `now` (those
    /// `expire_sends` acts on), from the index of deadlines; checked against a walk of every
    /// send in debug builds. A rank with 16,000 sends waiting for their receivers walked all
    /// of them at each timer, a sixth of its time.
    pub(crate) fn take_due(&mut self, now: Nanos, due: &mut Vec<SendKey>) {
        let deadlines = self.deadlines.get_mut();
        deadlines.take_due(now, |key| deadline_of(&self.sends, &self.timers, key), due);
        debug_assert_eq!(
            *due,
            self.sends
                .occupied()
                .filter(|&key| self.deadline(key).is_some_and(|d| d <= now))
                .collect::<Vec<_>>(),
            "the deadline index missed a due send"
        );
    }

    /// The earliest deadline of any send, by asking every one.
    fn walk_next_deadline(&self) -> Option<Nanos> {
        self.sends
            .occupied()
            .filter_map(|key| self.deadline(key))
            .min()
    }
}

/// [`SendSide::deadline`], of the tables apart (the index of deadlines borrows the side).
fn deadline_of(
    sends: &Slab<SendKey, SendOp>,
    timers: &SideTable<SendKey, CollectionTimers>,
    key: SendKey,
) -> Option<Nanos> {
    let op = sends.get(key)?;
    if let Some(cancel) = op.cancel {
        // Nothing of the message is resent while the receiver decides.
        return Some(cancel.deadline_ns);
    }
    let collections = op.collections.next_deadline(&timers[key]);
    match (collections, op.wait_deadline_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A live send by its key (a key that names none is a bug in this crate and panics).
impl Index<SendKey> for SendSide {
    type Output = SendOp;

    fn index(&self, key: SendKey) -> &SendOp {
        &self.sends[key]
    }
}

impl IndexMut<SendKey> for SendSide {
    fn index_mut(&mut self, key: SendKey) -> &mut SendOp {
        self.deadlines.get_mut().touch(key);
        &mut self.sends[key]
    }
}

/// Picks the next frame of a send: a resend of a timed-out collection, then a repeated
/// RTS/RSM/frame 0, then the next new frame the grant and the collection window allow.
fn choose_frame(op: &mut SendOp) -> Option<(u32, bool)> {
    if op.phase != SendPhase::Streaming || op.cancel.is_some() {
        return None;
    }
    if let Some(frame) = op
        .resend_cursor
        .next_frame(&mut op.collections, op.next_new)
    {
        return Some((frame, true));
    }
    if let Some(frame) = op.extra_frame.take() {
        return Some((frame, true));
    }
    let limit = op.granted.min(op.collections.window_end_frame());
    if op.next_new < limit {
        let frame = op.next_new;
        op.next_new += 1;
        return Some((frame, false));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Geometry;
    use crate::slab::Key;
    use crate::{Context, SgList};
    use nicmsg_wire::Protocol;

    /// A streaming eager send of `frames` frames, all granted.
    fn streaming(frames: u32) -> SendOp {
        let geometry = Geometry {
            total_len: u64::from(frames) * 1000,
            frame_payload: 1000,
            protocol: Protocol::Eager,
        };
        let data = SgList::default();
        let mut op = SendOp::new(
            1,
            (Context::USER, 0),
            &data,
            geometry,
            frames,
            4,
            SendPhase::Streaming,
        );
        op.granted = frames;
        op
    }

    #[test]
    fn frames_go_round_robin_a_turn_at_a_time() {
        let mut side = SendSide::new(4, 2);
        let (a, _) = side.insert_with(|| streaming(FRAMES_PER_TURN + 1)).unwrap();
        let (b, _) = side.insert_with(|| streaming(1)).unwrap();
        side.mark_ready(a);
        side.mark_ready(b);
        side.mark_ready(a);
        for frame in 0..FRAMES_PER_TURN {
            assert_eq!(side.next_frame(), Some((a, frame, false)));
            side.frame_taken(a);
        }
        assert_eq!(side.next_frame(), Some((b, 0, false)), "a's turn is over");
        side.frame_taken(b);
        assert_eq!(side.next_frame(), Some((a, FRAMES_PER_TURN, false)));
        side.frame_taken(a);
        assert_eq!(side.next_frame(), None);
        assert!(!side.has_ready());
    }

    #[test]
    fn a_freed_send_is_skipped_and_forgotten() {
        let mut side = SendSide::new(2, 1);
        let (a, _) = side.insert_with(|| streaming(1)).unwrap();
        let (b, _) = side.insert_with(|| streaming(1)).unwrap();
        side.mark_ready(a);
        side.mark_ready(b);
        side.remove(a);
        assert_eq!(side.next_frame().map(|(key, ..)| key), Some(b));
        side.remove(b);
        side.forget_freed_ready();
        assert!(!side.has_ready());
        assert_eq!(side.usage().in_use, 0);
    }

    #[test]
    fn started_sends_are_found_by_message_id() {
        let mut side = SendSide::new(2, 1);
        let (a, generation) = side.insert_with(|| streaming(1)).unwrap();
        assert_eq!(side.key_checked(a.slot(), generation), Some(a));
        side.activate(1, 7, a);
        assert_eq!(side.active(1, 7), Some(a));
        assert_eq!(side.active(2, 7), None);
        side.deactivate(1, 7);
        assert_eq!(side.active(1, 7), None);
    }

    #[test]
    fn early_completions_are_bounded() {
        let mut side = SendSide::new(3, 1);
        let (a, _) = side.insert_with(|| streaming(1)).unwrap();
        let (b, _) = side.insert_with(|| streaming(1)).unwrap();
        assert!(!side.may_complete_early(a), "not copied");
        side[a].copy = Some(10);
        side[b].copy = Some(10);
        assert_eq!(side.copy(a).map(<[u8]>::len), Some(10));
        assert!(side.may_complete_early(a));
        side.completed_early(a);
        assert!(side[a].completed_early);
        assert!(!side.may_complete_early(b), "the limit is reached");
        side.early_send_ended();
        assert!(side.may_complete_early(b));
    }

    #[test]
    fn the_next_deadline_is_the_earliest_send_timer() {
        let mut side = SendSide::new(3, 1);
        assert_eq!(side.next_deadline(), None);
        let (a, _) = side.insert_with(|| streaming(1)).unwrap();
        let (b, _) = side.insert_with(|| streaming(1)).unwrap();
        side[a].wait_deadline_ns = Some(500);
        let (op, timers) = side.with_timers(b);
        op.collections.on_frame_sent(timers, 0, 100, |_| 200);
        assert_eq!(side.deadline(b), Some(300));
        assert_eq!(side.next_deadline(), Some(300));
        side.remove(b);
        assert_eq!(side.next_deadline(), Some(500));
    }
}

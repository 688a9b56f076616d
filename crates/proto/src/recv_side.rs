//! The receive side of one endpoint: posted receives and probes, incoming messages with their
//! index by message id, the unexpected queue, the eager pool that buffers unexpected eager
//! data, and where the last long-message frame landed (for placement). The protocol that drives
//! them (admission, placement, grants, matching in MPI order) is in `receiver.rs` and
//! `matching.rs`; this module keeps the tables and queues consistent with each other: an
//! incoming message leaves its index and the unexpected queue when it is removed, a message is
//! in the unexpected queue exactly when it says so.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::{Index, IndexMut};

use rustc_hash::FxHashMap;

use crate::credits::CreditClass;
use crate::eager_pool::EagerPool;
use crate::ops::{Dest, Incoming, LatestData, RecvOp};
use crate::peers::Peers;
use crate::posted::PostedQueue;
use crate::sender_lists::SenderLists;
use crate::slab::{IncomingKey, RecvKey, Slab};
use crate::timers::DeadlineIndex;
use crate::usage::TableUsage;
use crate::{Config, Context, Nanos, Rank, Source, Status, Tag, TagMatch};

/// The queue of the application's posted receives.
const ORDINARY: usize = 0;
/// The queue of the engine's standing receives.
const STANDING: usize = 1;

/// The posted queue a receive in `context` waits in.
fn queue_of(context: Context) -> usize {
    if context.always_received() {
        STANDING
    } else {
        ORDINARY
    }
}

/// Where a posted receive waits: its queue, and the receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PostedAt {
    queue: usize,
    key: RecvKey,
}

/// Receives, probes and incoming messages of one endpoint, and the queues that match them.
pub(crate) struct RecvSide {
    recvs: Slab<RecvKey, RecvOp>,
    /// Unmatched receives in the order they were posted, in two queues: the application's
    /// (`ORDINARY`) and the engine's standing receives (`STANDING`, contexts that are
    /// [`Context::always_received`]). A receive only takes messages of its own context, so
    /// splitting them keeps MPI's order, and a message for the application does not scan
    /// past the engine's inboxes, which are posted first and always there.
    posted: [PostedQueue; 2],
    /// Posted (blocking) probes.
    probes: VecDeque<RecvKey>,
    incoming: Slab<IncomingKey, Incoming>,
    /// Incoming messages sent by rendezvous (a message's protocol never changes): the ones
    /// placement walks for frames to predict, so a receiver holding only eager messages (one
    /// that falls behind a stream) walks none of them before every receive batch (the one
    /// eager message it predicts is `latest_eager`).
    rendezvous_incoming: usize,
    /// Incoming messages bound to a receive whose data is not all in (each once; some may have
    /// left their receive since, and are skipped): the only ones whose frames go into a
    /// receive, so placement walks these, not every incoming message. A receiver holding
    /// 1,500 kept messages (a sender that ran 1,500 messages ahead of its receives) walked
    /// all of them before every receive batch, a third of its time.
    bound: Vec<IncomingKey>,
    /// Rendezvous messages whose first grant waits for room in the grant budget, oldest first
    /// (some may have gone since, and are skipped).
    deferred_grants: VecDeque<IncomingKey>,
    /// Incoming messages by (sender, message id); Fx hashing as for the send side's index.
    by_id: FxHashMap<(Rank, u32), IncomingKey>,
    /// Unexpected messages in matching order, all and each sender's (`sender_lists.rs`).
    unexpected: SenderLists<IncomingKey>,
    /// Unexpected eager data, in buffers of both credit classes (`eager_pool.rs`).
    eager_pool: EagerPool,
    /// Where the stream of long-message frames was last (`placement.rs`).
    latest_data: Option<LatestData>,
    /// The frame that arrived last of an eager message going straight into a posted receive
    /// and not yet whole: its other frames are predicted (`placement.rs`). `None` while no
    /// such message is in progress, so receivers of short messages predict nothing.
    latest_eager: Option<LatestData>,
    /// Which incoming messages to ask for the earliest deadline (`timers.rs`): told of every
    /// message inserted or handed out for changing (`incoming_mut`, `IndexMut`, and this
    /// module's own changes), the only ways to change `deadline_ns`. A receiver holding
    /// 1,500 kept messages walked them all at every turn.
    deadlines: RefCell<DeadlineIndex<IncomingKey>>,
}

impl RecvSide {
    /// The tables of an endpoint in a job of `size` ranks. They and their queues grow as they
    /// fill, up to the limits of `config` (`slab.rs`).
    pub(crate) fn new(config: &Config, size: u32) -> Self {
        Self {
            recvs: Slab::with_limit(config.max_recvs),
            posted: [PostedQueue::new(size), PostedQueue::new(size)],
            probes: VecDeque::new(),
            // Room for a local message per send beyond the remote ones (`insert_remote`).
            incoming: Slab::with_limit(config.max_incoming + config.max_sends),
            rendezvous_incoming: 0,
            bound: Vec::new(),
            deferred_grants: VecDeque::new(),
            by_id: FxHashMap::default(),
            unexpected: SenderLists::new(size),
            eager_pool: EagerPool::new(config, size),
            latest_data: None,
            latest_eager: None,
            deadlines: RefCell::new(DeadlineIndex::new(config.max_incoming + config.max_sends)),
        }
    }

    // --- receives and probes ---

    /// Stores the receive or probe `make` builds; its key and generation, or `None` when full.
    pub(crate) fn insert_recv(&mut self, make: impl FnOnce() -> RecvOp) -> Option<(RecvKey, u32)> {
        self.recvs.insert_with(make)
    }

    /// Removes a receive or probe; the caller took it off the posted queue or probe list.
    pub(crate) fn remove_recv(&mut self, key: RecvKey) -> Option<RecvOp> {
        self.recvs.remove(key)
    }

    pub(crate) fn recv(&self, key: RecvKey) -> Option<&RecvOp> {
        self.recvs.get(key)
    }

    pub(crate) fn recv_generation(&self, key: RecvKey) -> u32 {
        self.recvs.generation(key)
    }

    /// The key of the receive a host handle names, if it still names one.
    pub(crate) fn recv_key_checked(&self, index: u32, generation: u32) -> Option<RecvKey> {
        self.recvs.key_checked(index, generation)
    }

    /// The receive a host handle names, if it still names one.
    pub(crate) fn recv_checked(&self, index: u32, generation: u32) -> Option<&RecvOp> {
        self.recvs.get_checked(index, generation)
    }

    /// Keys of live receives and probes, in slot order.
    pub(crate) fn recv_keys(&self) -> impl Iterator<Item = RecvKey> + '_ {
        self.recvs.occupied()
    }

    pub(crate) fn recv_usage(&self) -> TableUsage {
        self.recvs.usage
    }

    /// Queues an unmatched receive behind those of its queue posted before it.
    pub(crate) fn post(&mut self, key: RecvKey) {
        let op = &self.recvs[key];
        self.posted[queue_of(op.context)].push_back(key, op.source);
    }

    /// Where the first receive (in posting order) that takes a message from `peer` with this
    /// context and tag waits.
    pub(crate) fn find_posted(
        &self,
        peer: Rank,
        (context, tag): (Context, Tag),
    ) -> Option<PostedAt> {
        let queue = queue_of(context);
        let key = self.posted[queue]
            .first_taking(peer, |key| self.recvs[key].accepts(peer, context, tag))?;
        Some(PostedAt { queue, key })
    }

    /// True if the application has a receive posted and not matched yet.
    pub(crate) fn has_application_posted(&self) -> bool {
        !self.posted[ORDINARY].is_empty()
    }

    /// The posted receive at `at` (from [`find_posted`](Self::find_posted)).
    pub(crate) fn posted_at(&self, at: PostedAt) -> RecvKey {
        at.key
    }

    /// Takes the posted receive at `at` off its queue: it matched.
    pub(crate) fn take_posted(&mut self, at: PostedAt) -> RecvKey {
        let source = self.recvs[at.key].source;
        self.posted[at.queue].remove(at.key, source);
        at.key
    }

    /// Takes a receive off its posted queue, wherever it is in it (cancelled or failed).
    pub(crate) fn unpost(&mut self, key: RecvKey) {
        let Some(op) = self.recvs.get(key) else {
            return;
        };
        self.posted[queue_of(op.context)].remove(key, op.source);
    }

    /// True if a posted receive or a blocking probe may take a message from `peer` (one naming
    /// it, or any source), apart from the engine's standing receives
    /// ([`Context::always_received`]).
    pub(crate) fn awaits_from(&self, peer: Rank) -> bool {
        let accepts = |&key: &RecvKey| {
            let op = &self.recvs[key];
            op.source.matches(peer) && !op.context.always_received()
        };
        self.posted[ORDINARY].has_any_from(peer) || self.probes.iter().any(accepts)
    }

    /// Lists a blocking probe until a message it matches arrives.
    pub(crate) fn post_probe(&mut self, key: RecvKey) {
        self.probes.push_back(key);
    }

    /// Takes a probe off the list, wherever it is (cancelled or failed).
    pub(crate) fn unpost_probe(&mut self, key: RecvKey) {
        self.probes.retain(|&i| i != key);
    }

    /// Takes off the list the first posted probe (in posting order) that a message from `peer`
    /// in `context` with `tag` satisfies.
    pub(crate) fn take_probe_for(
        &mut self,
        peer: Rank,
        context: Context,
        tag: Tag,
    ) -> Option<RecvKey> {
        let position = self
            .probes
            .iter()
            .position(|&i| self.recvs[i].accepts(peer, context, tag))?;
        self.probes.remove(position)
    }

    // --- incoming messages ---

    /// Stores an incoming message (not indexed yet: see [`index_incoming`](Self::index_incoming));
    /// `None` when the table is full.
    pub(crate) fn insert_incoming(&mut self, entry: Incoming) -> Option<IncomingKey> {
        let rendezvous = !entry.is_eager();
        let key = self.incoming.insert(entry).map(|(key, _)| key)?;
        self.deadlines.get_mut().touch(key);
        self.rendezvous_incoming += usize::from(rendezvous);
        Some(key)
    }

    /// Incoming messages sent by rendezvous.
    pub(crate) fn rendezvous_incoming(&self) -> usize {
        self.rendezvous_incoming
    }

    /// Makes the message `key` findable by its sender and message id.
    pub(crate) fn index_incoming(&mut self, peer: Rank, msg_id: u32, key: IncomingKey) {
        debug_assert_eq!(
            self.incoming.get(key).map(|e| (e.peer, e.msg_id)),
            Some((peer, msg_id))
        );
        self.by_id.insert((peer, msg_id), key);
    }

    /// The incoming message `msg_id` from `peer`, if this rank holds it.
    pub(crate) fn incoming_by_id(&self, peer: Rank, msg_id: u32) -> Option<IncomingKey> {
        self.by_id.get(&(peer, msg_id)).copied()
    }

    /// Removes an incoming message with its index entry and its place in the unexpected
    /// queue; the caller releases its eager buffer, if it has one.
    pub(crate) fn remove_incoming(&mut self, key: IncomingKey) -> Option<Incoming> {
        let entry = self.incoming.remove(key)?;
        self.rendezvous_incoming -= usize::from(!entry.is_eager());
        self.by_id.remove(&(entry.peer, entry.msg_id));
        if entry.in_unexpected {
            self.unexpected.remove(key, entry.peer);
        }
        remove_first(&mut self.bound, key);
        Some(entry)
    }

    pub(crate) fn incoming_generation(&self, key: IncomingKey) -> u32 {
        self.incoming.generation(key)
    }

    /// The key of the incoming message a claim names, if it still names one.
    pub(crate) fn incoming_key_checked(&self, index: u32, generation: u32) -> Option<IncomingKey> {
        self.incoming.key_checked(index, generation)
    }

    pub(crate) fn incoming(&self, key: IncomingKey) -> Option<&Incoming> {
        self.incoming.get(key)
    }

    pub(crate) fn incoming_mut(&mut self, key: IncomingKey) -> Option<&mut Incoming> {
        self.deadlines.get_mut().touch(key);
        self.incoming.get_mut(key)
    }

    /// Keys of live incoming messages, in slot order.
    pub(crate) fn incoming_keys(&self) -> impl Iterator<Item = IncomingKey> + '_ {
        self.incoming.occupied()
    }

    pub(crate) fn incoming_usage(&self) -> TableUsage {
        self.incoming.usage
    }

    /// What a receive of the message `key` reports.
    pub(crate) fn status_of(&self, key: IncomingKey) -> Status {
        let entry = &self.incoming[key];
        Status {
            peer: entry.peer,
            tag: entry.tag,
            len: entry.geometry.total_len,
            immediate: entry.immediate,
        }
    }

    // --- unexpected messages ---

    /// Queues a matched-in-order message no receive took.
    pub(crate) fn push_unexpected(&mut self, key: IncomingKey) {
        debug_assert!(!self.incoming[key].in_unexpected);
        self.unexpected.push_back(key, self.incoming[key].peer);
        self.incoming[key].in_unexpected = true;
    }

    /// Takes a message off the unexpected queue (a receive took it, or it was withdrawn).
    pub(crate) fn remove_unexpected(&mut self, key: IncomingKey) {
        self.unexpected.remove(key, self.incoming[key].peer);
        self.incoming[key].in_unexpected = false;
    }

    /// Binds the receive `recv` to the incoming message `incoming` it matched.
    pub(crate) fn bind(&mut self, recv: RecvKey, incoming: IncomingKey) {
        self.recvs[recv].state = crate::ops::RecvState::Bound(incoming);
        self.incoming[incoming].recv = Some(recv);
        if !self.bound.contains(&incoming) {
            self.bound.push(incoming);
        }
    }

    /// Incoming messages bound to a receive since they came whose data is not all in (some
    /// may have left their receive).
    pub(crate) fn bound_incoming(&self) -> &[IncomingKey] {
        &self.bound
    }

    /// `key`'s data is all in: placement has no frame of it to predict, and it has no grant
    /// in flight, so it leaves the bound list though its entry stays for the END handshake.
    /// Kept on until freed, 12,000 short rendezvous messages into posted receives were walked
    /// at every match (the grant budget's sum), every receive batch (placement) and every
    /// removal: 60 % of the receiving rank's time.
    pub(crate) fn unlist_bound(&mut self, key: IncomingKey) {
        remove_first(&mut self.bound, key);
    }

    /// Queues `key`'s first grant behind the others deferred.
    pub(crate) fn defer_grant(&mut self, key: IncomingKey) {
        self.incoming[key].grant_deferred = true;
        self.deferred_grants.push_back(key);
    }

    /// The oldest message whose first grant still waits, dropping the entries of messages
    /// gone or granted since.
    pub(crate) fn oldest_deferred_grant(&mut self) -> Option<IncomingKey> {
        while let Some(&key) = self.deferred_grants.front() {
            if self.incoming.get(key).is_some_and(|e| e.grant_deferred) {
                return Some(key);
            }
            self.deferred_grants.pop_front();
        }
        None
    }

    /// Takes the oldest deferred grant off the queue (after `oldest_deferred_grant`).
    pub(crate) fn take_deferred_grant(&mut self, key: IncomingKey) {
        debug_assert_eq!(self.deferred_grants.front(), Some(&key));
        self.deferred_grants.pop_front();
        self.incoming[key].grant_deferred = false;
    }

    /// The unexpected messages, in matching order (the watchdog's account of what waits).
    pub(crate) fn unexpected_entries(&self) -> impl Iterator<Item = &Incoming> + '_ {
        self.unexpected.iter().map(|key| &self.incoming[key])
    }

    /// The first unexpected message (in matching order) a receive with these criteria takes.
    pub(crate) fn find_unexpected(
        &self,
        source: Source,
        context: Context,
        tag: TagMatch,
    ) -> Option<IncomingKey> {
        let takes = |&i: &IncomingKey| {
            let entry = &self.incoming[i];
            entry.context == context && source.matches(entry.peer) && tag.matches(entry.tag)
        };
        match source {
            Source::Rank(sender) => self.unexpected.of_sender(sender).find(takes),
            Source::Any => self.unexpected.iter().find(takes),
        }
    }

    /// The first of the oldest `limit` unexpected messages that is from `peer` and `fits`.
    pub(crate) fn oldest_unexpected(
        &self,
        peer: Rank,
        limit: usize,
        fits: impl Fn(&Incoming) -> bool,
    ) -> Option<IncomingKey> {
        self.unexpected.iter().take(limit).find(|&i| {
            let entry = &self.incoming[i];
            entry.peer == peer && fits(entry)
        })
    }

    /// Turns the kept rendezvous message `key` into an eager one going into a buffer of its
    /// peer (`handover.rs`); false, changing nothing, if no buffer of its class is free.
    pub(crate) fn take_as_eager(&mut self, key: IncomingKey, peers: &mut Peers) -> bool {
        debug_assert!(!self.incoming[key].is_eager());
        if !self.assign_eager_buffer(key, peers) {
            return false;
        }
        self.rendezvous_incoming -= 1;
        self.deadlines.get_mut().touch(key);
        let entry = &mut self.incoming[key];
        entry.geometry.protocol = nicmsg_wire::Protocol::Eager;
        entry.discarded = false;
        entry.taken_as_eager = true;
        true
    }

    // --- the eager pool ---

    /// True if `peer` has a buffer free for an eager message of `len` bytes.
    #[cfg(test)]
    pub(crate) fn has_free_eager_buffer(&self, peer: Rank, len: u64, peers: &Peers) -> bool {
        self.eager_pool.has_free(peer, CreditClass::of(len), peers)
    }

    /// Gives the message `key` one of its sender's buffers of its class; false if none is free
    /// (credits guarantee one unless the sender broke the protocol).
    pub(crate) fn assign_eager_buffer(&mut self, key: IncomingKey, peers: &mut Peers) -> bool {
        let entry = &self.incoming[key];
        let class = CreditClass::of(entry.geometry.total_len);
        let Some(slot) = self.eager_pool.assign(entry.peer, class, peers) else {
            return false;
        };
        self.incoming[key].dest = Dest::Buffer(slot);
        true
    }

    /// Frees an eager buffer (its message was delivered, truncated, withdrawn or dropped).
    pub(crate) fn release_eager_buffer(&mut self, slot: u32, peers: &mut Peers) {
        self.eager_pool.release(slot, peers);
    }

    /// The bytes of eager buffer `slot`.
    pub(crate) fn eager_buffer(&self, slot: u32) -> &[u8] {
        self.eager_pool.buffer(slot)
    }

    /// Stores `bytes` at `offset` of eager buffer `slot`.
    pub(crate) fn write_eager(&mut self, slot: u32, offset: u64, bytes: &[u8]) {
        self.eager_pool.write(slot, offset, bytes);
    }

    pub(crate) fn eager_usage(&self) -> TableUsage {
        self.eager_pool.usage()
    }

    // --- placement ---

    /// A frame of a long message arrived: its stream most likely goes on from there.
    pub(crate) fn set_latest_data(&mut self, latest: LatestData) {
        self.latest_data = Some(latest);
    }

    /// Where the last long-message frame arrived, if that message is still held (its entry
    /// may have been freed and reused since).
    pub(crate) fn latest_data(&self) -> Option<LatestData> {
        self.latest_data.filter(|latest| self.still_held(latest))
    }

    /// A frame of an eager message going straight into a posted receive arrived and the
    /// message misses frames (`Some`), or the message predicted so far is whole (`None`).
    pub(crate) fn set_latest_eager(&mut self, latest: Option<LatestData>) {
        self.latest_eager = latest;
    }

    /// Where the last frame of an eager message still arriving into a posted receive landed,
    /// if that message is still held.
    pub(crate) fn latest_eager(&self) -> Option<LatestData> {
        self.latest_eager.filter(|latest| self.still_held(latest))
    }

    fn still_held(&self, latest: &LatestData) -> bool {
        self.incoming
            .get(latest.index)
            .is_some_and(|e| e.peer == latest.peer && e.msg_id == latest.msg_id)
    }

    // --- timers ---

    /// Puts in `due`, in slot order, the incoming messages whose deadline is at or before
    /// `now` (those `expire_incoming` acts on), from the index of deadlines; checked against a
    /// walk of every message in debug builds.
    pub(crate) fn take_due(&mut self, now: Nanos, due: &mut Vec<IncomingKey>) {
        let incoming = &self.incoming;
        let deadline = |key| incoming.get(key).and_then(|e: &Incoming| e.deadline_ns);
        self.deadlines.get_mut().take_due(now, deadline, due);
        debug_assert_eq!(
            *due,
            self.incoming
                .occupied()
                .filter(|&key| deadline(key).is_some_and(|d| d <= now))
                .collect::<Vec<_>>(),
            "the deadline index missed a due message"
        );
    }

    /// The earliest deadline of any incoming message (a CLEANUP overdue), from the index of
    /// deadlines (`timers.rs`); checked against a walk of every message in debug builds.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        let deadline = |key| self.incoming.get(key).and_then(|e| e.deadline_ns);
        let earliest =
            self.deadlines
                .borrow_mut()
                .earliest(self.incoming.usage.in_use, deadline, || {
                    self.incoming.occupied()
                });
        debug_assert_eq!(
            earliest,
            self.incoming.occupied().filter_map(deadline).min(),
            "the deadline index is stale"
        );
        earliest
    }
}

/// A live receive or probe by its key (a key that names none is a bug in this crate).
impl Index<RecvKey> for RecvSide {
    type Output = RecvOp;

    fn index(&self, key: RecvKey) -> &RecvOp {
        &self.recvs[key]
    }
}

impl IndexMut<RecvKey> for RecvSide {
    fn index_mut(&mut self, key: RecvKey) -> &mut RecvOp {
        &mut self.recvs[key]
    }
}

/// A live incoming message by its key (a key that names none is a bug in this crate).
impl Index<IncomingKey> for RecvSide {
    type Output = Incoming;

    fn index(&self, key: IncomingKey) -> &Incoming {
        &self.incoming[key]
    }
}

impl IndexMut<IncomingKey> for RecvSide {
    fn index_mut(&mut self, key: IncomingKey) -> &mut Incoming {
        self.deadlines.get_mut().touch(key);
        &mut self.incoming[key]
    }
}

/// Removes `key` from the bound list, looking from the front (the list holds the messages
/// bound to receives, few at a time).
fn remove_first(queue: &mut Vec<IncomingKey>, key: IncomingKey) {
    if let Some(at) = queue.iter().position(|&k| k == key) {
        queue.swap_remove(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Geometry;
    use crate::ops::RecvState;
    use crate::{OpKind, SgList};
    use nicmsg_wire::Protocol;

    fn config() -> Config {
        Config {
            eager_credits_per_peer: 2,
            small_credits_per_peer: 2,
            medium_credits_per_peer: 2,
            ..Config::default()
        }
    }

    fn message(peer: Rank, msg_id: u32, tag: Tag) -> Incoming {
        message_of(peer, msg_id, tag, 10)
    }

    fn message_of(peer: Rank, msg_id: u32, tag: Tag, total_len: u64) -> Incoming {
        let geometry = Geometry {
            total_len,
            frame_payload: 1000,
            protocol: Protocol::Eager,
        };
        Incoming::new(peer, msg_id, (Context::USER, tag), geometry, 1)
    }

    fn receive(kind: OpKind, source: Source, tag: TagMatch) -> RecvOp {
        RecvOp {
            kind,
            source,
            context: Context::USER,
            tag,
            buffer: SgList::default(),
            state: RecvState::Posted,
        }
    }

    #[test]
    fn a_removed_message_leaves_its_index_and_the_unexpected_queue() {
        let mut side = RecvSide::new(&config(), 3);
        let key = side.insert_incoming(message(1, 5, 9)).unwrap();
        side.index_incoming(1, 5, key);
        side.push_unexpected(key);
        let any = (Source::Any, Context::USER, TagMatch::Any);
        assert_eq!(side.find_unexpected(any.0, any.1, any.2), Some(key));
        assert_eq!(side.incoming_by_id(1, 5), Some(key));
        assert_eq!(side.status_of(key).len, 10);
        assert!(side.remove_incoming(key).is_some_and(|e| e.in_unexpected));
        assert_eq!(side.incoming_by_id(1, 5), None);
        assert_eq!(side.find_unexpected(any.0, any.1, any.2), None);
        assert_eq!(side.incoming_usage().in_use, 0);
    }

    #[test]
    fn receives_match_in_posting_order() {
        let mut side = RecvSide::new(&config(), 3);
        let tagged = receive(OpKind::Recv, Source::Rank(1), TagMatch::Tag(4));
        let any = receive(OpKind::Recv, Source::Any, TagMatch::Any);
        let (first, _) = side.insert_recv(|| tagged).unwrap();
        let (second, _) = side.insert_recv(|| any).unwrap();
        side.post(first);
        side.post(second);
        let at = |key| PostedAt {
            queue: ORDINARY,
            key,
        };
        assert_eq!(side.find_posted(2, (Context::USER, 4)), Some(at(second)));
        assert_eq!(side.find_posted(1, (Context::USER, 4)), Some(at(first)));
        assert_eq!(side.take_posted(at(first)), first);
        assert_eq!(side.find_posted(1, (Context::USER, 4)), Some(at(second)));
        side.unpost(second);
        assert_eq!(side.find_posted(1, (Context::USER, 4)), None);
    }

    #[test]
    fn the_engines_standing_receives_wait_apart_from_the_applications() {
        let mut side = RecvSide::new(&config(), 3);
        let inbox = RecvOp {
            context: Context::PROGRAM_MESSAGES,
            ..receive(OpKind::Recv, Source::Any, TagMatch::Any)
        };
        let (standing, _) = side.insert_recv(|| inbox).unwrap();
        let any = receive(OpKind::Recv, Source::Any, TagMatch::Any);
        let (ordinary, _) = side.insert_recv(|| any).unwrap();
        side.post(standing);
        side.post(ordinary);
        let user = side.find_posted(1, (Context::USER, 4)).unwrap();
        assert_eq!(user.queue, ORDINARY, "no standing receive takes it");
        assert_eq!(side.posted_at(user), ordinary);
        let program = side.find_posted(1, (Context::PROGRAM_MESSAGES, 4)).unwrap();
        assert_eq!(side.posted_at(program), standing);
        assert!(side.awaits_from(1), "the application's receive waits");
        side.unpost(ordinary);
        assert!(!side.awaits_from(1), "a standing receive is not a wait");
        assert_eq!(side.find_posted(1, (Context::USER, 4)), None);
        assert_eq!(side.take_posted(program), standing);
        assert_eq!(side.find_posted(1, (Context::PROGRAM_MESSAGES, 4)), None);
    }

    #[test]
    fn probes_are_satisfied_in_order_and_only_by_matching_messages() {
        let mut side = RecvSide::new(&config(), 3);
        let (a, _) = side
            .insert_recv(|| receive(OpKind::Probe, Source::Rank(2), TagMatch::Any))
            .unwrap();
        let (b, _) = side
            .insert_recv(|| receive(OpKind::Probe, Source::Any, TagMatch::Any))
            .unwrap();
        side.post_probe(a);
        side.post_probe(b);
        assert_eq!(side.take_probe_for(1, Context::USER, 0), Some(b));
        assert_eq!(side.take_probe_for(1, Context::USER, 0), None);
        assert_eq!(side.take_probe_for(2, Context::USER, 0), Some(a));
    }

    #[test]
    fn eager_buffers_are_bounded_per_peer_and_class_and_hold_their_bytes() {
        let config = config();
        let mut peers = Peers::new(&config, 0, 3);
        let mut side = RecvSide::new(&config, 3);
        let classes = [10, 1000, 5000]; // small, medium, eager
        let mut keys = Vec::new();
        for (class, len) in classes.into_iter().enumerate() {
            let ids = 3 * class as u32..3 * class as u32 + 3;
            let of_class: Vec<_> = ids
                .map(|id| side.insert_incoming(message_of(1, id, 0, len)).unwrap())
                .collect();
            assert!(side.assign_eager_buffer(of_class[0], &mut peers));
            assert!(side.assign_eager_buffer(of_class[1], &mut peers));
            assert!(!side.has_free_eager_buffer(1, len, &peers), "{len}");
            assert!(!side.assign_eager_buffer(of_class[2], &mut peers));
            assert!(
                side.has_free_eager_buffer(2, len, &peers),
                "buffers are per peer"
            );
            for later in &classes[class + 1..] {
                assert!(
                    side.has_free_eager_buffer(1, *later, &peers),
                    "{len}: each class has buffers of its own"
                );
            }
            keys.push(of_class[1]);
        }
        for (key, len) in keys.into_iter().zip(classes) {
            let Dest::Buffer(slot) = side[key].dest else {
                panic!("a buffer was assigned")
            };
            assert!(side.eager_buffer(slot).len() >= len as usize);
            side.write_eager(slot, len - 3, b"abc");
            let end = len as usize;
            assert_eq!(&side.eager_buffer(slot)[end - 5..end], b"\0\0abc");
            assert_eq!(side.eager_usage().in_use, 6);
            side.release_eager_buffer(slot, &mut peers);
            assert!(side.has_free_eager_buffer(1, len, &peers));
            side.assign_eager_buffer(key, &mut peers);
        }
        assert_eq!(side.eager_usage().peak, 6);
    }

    #[test]
    fn latest_data_of_a_freed_message_is_forgotten() {
        let mut side = RecvSide::new(&config(), 3);
        let key = side.insert_incoming(message(1, 5, 0)).unwrap();
        let latest = LatestData {
            index: key,
            peer: 1,
            msg_id: 5,
            frame: 3,
        };
        side.set_latest_data(latest);
        assert_eq!(side.latest_data(), Some(latest));
        side.remove_incoming(key);
        side.insert_incoming(message(2, 6, 0)).unwrap();
        assert_eq!(
            side.latest_data(),
            None,
            "the slot was reused by another message"
        );
    }

    #[test]
    fn the_next_deadline_is_the_earliest_incoming_timer() {
        let mut side = RecvSide::new(&config(), 3);
        assert_eq!(side.next_deadline(), None);
        let a = side.insert_incoming(message(1, 1, 0)).unwrap();
        let b = side.insert_incoming(message(1, 2, 0)).unwrap();
        side[a].deadline_ns = Some(70);
        side[b].deadline_ns = Some(40);
        assert_eq!(side.next_deadline(), Some(40));
        side.remove_incoming(b);
        assert_eq!(side.next_deadline(), Some(70));
    }
}

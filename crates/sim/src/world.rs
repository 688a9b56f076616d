//! The simulated world: every rank's machine ([`Node`]: the engine, or the protocol core alone)
//! and memory, the network, the ledger, and the host commands workloads use. Host commands post
//! to the rank's node, record the operation in the ledger and mark the rank for servicing; the
//! event loop ([`crate::run`]) services it.

use crate::content::Pattern;
use crate::invariants::Violations;
use crate::ledger::{dead_by, Ledger, OpRecord, OpRef};
use crate::memory::{recv_buffer, send_buffer, send_buffer_bytes, Arena, Layout};
use crate::net::{Event, Network};
use crate::node::{Node, SimMode};
use crate::rng::SimRng;
use crate::trace;
use nicmsg_proto::{
    CancelError, CancelOutcome, Claim, Completion, Context, Nanos, PostError, Rank, SendOptions,
    Source, Status, Tag, TagMatch,
};
use nicmsg_wire::Frame;
use std::collections::BTreeSet;

/// A message a rank claimed ([`World::claim`]): its status, the claim naming it, and its
/// place in the rank's matching order.
#[derive(Debug, Clone, Copy)]
pub struct Claimed {
    pub status: Status,
    claim: Claim,
    context: Context,
    post_index: u64,
}

/// What a receive takes: the next message a pattern matches, or a claimed one.
enum Wanted {
    Match(Source, (Context, TagMatch)),
    Claimed(Claimed),
}

pub struct World {
    pub now: Nanos,
    pub size: u32,
    pub job: u32,
    pub mtu: u32,
    pub mode: SimMode,
    pub nodes: Vec<Node>,
    pub arenas: Vec<Arena>,
    pub ledger: Ledger,
    pub net: Network,
    pub violations: Violations,
    /// The workload's random stream (sizes, tags, times).
    pub rng: SimRng,
    layout_rng: SimRng,
    /// When each rank died, once it has.
    pub deaths: Vec<Option<Nanos>>,
    pub(crate) dirty: BTreeSet<Rank>,
    pub(crate) wakes_pending: usize,
    pub trace: bool,
}

impl World {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        mode: SimMode,
        nodes: Vec<Node>,
        net: Network,
        job: u32,
        mtu: u32,
        rng: SimRng,
        layout_rng: SimRng,
        trace: bool,
    ) -> Self {
        let size = nodes.len() as u32;
        Self {
            mode,
            now: 0,
            size,
            job,
            mtu,
            nodes,
            arenas: (0..size).map(Arena::new).collect(),
            ledger: Ledger::with_confirm_floor(size, 2 * net.config().delay_ns),
            net,
            violations: Violations::default(),
            rng,
            layout_rng,
            deaths: vec![None; size as usize],
            dirty: BTreeSet::new(),
            wakes_pending: 0,
            trace,
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn is_dead(&self, rank: Rank) -> bool {
        self.deaths[rank as usize].is_some()
    }

    pub fn violation(&mut self, kind: &'static str, detail: impl Into<String>) {
        self.violations.push(self.now, kind, detail);
    }

    pub fn op(&self, op: OpRef) -> &OpRecord {
        &self.ledger.ops[op]
    }

    /// Calls the workload's `on_wake(rank, token)` at virtual time `at` (not before now).
    pub fn wake_at(&mut self, rank: Rank, at: Nanos, token: u64) {
        self.wakes_pending += 1;
        self.net
            .schedule(at.max(self.now), Event::Wake { rank, token });
    }

    pub fn wake_after(&mut self, rank: Rank, delay: Nanos, token: u64) {
        self.wake_at(rank, self.now + delay, token);
    }

    /// `rank` stops processing forever at `at`.
    pub fn kill_at(&mut self, rank: Rank, at: Nanos) {
        self.net.schedule(at.max(self.now), Event::Death { rank });
    }

    /// A refused post is a violation unless it names a peer that is dead.
    fn check_refusal(&mut self, rank: Rank, what: &str, error: PostError) {
        if let PostError::PeerUnreachable { peer } = error {
            if dead_by(&self.deaths, peer, self.now) {
                return;
            }
        }
        self.violation(
            "post-refused",
            format!("rank {rank}: {what} refused: {error}"),
        );
    }

    /// Posts a send of a fresh `len`-byte message; its contents name (rank, dst, seq).
    pub fn send(
        &mut self,
        rank: Rank,
        dst: Rank,
        tag: Tag,
        len: u64,
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        self.send_in(rank, dst, (Context::USER, tag), len, layout)
    }

    /// [`send`](Self::send) in a matching context of choice (the library's, say).
    pub fn send_in(
        &mut self,
        rank: Rank,
        dst: Rank,
        (context, tag): (Context, Tag),
        len: u64,
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        if self.is_dead(rank) {
            return Err(PostError::PeerUnreachable { peer: rank });
        }
        let r = rank as usize;
        let seq = self.ledger.next_seq(rank, dst);
        let pattern = Pattern::message(rank, dst, seq);
        let buffer = send_buffer(
            &mut self.arenas[r],
            &mut self.layout_rng,
            layout,
            pattern,
            len,
        );
        self.dirty.insert(rank);
        let options = send_options(rank, dst, seq);
        let posted = self.nodes[r].post_send(
            self.now,
            dst,
            (context, tag),
            options,
            (&buffer, &mut self.arenas[r]),
        );
        match posted {
            Ok(id) => {
                if self.trace {
                    trace::line(self.now, format!("rank {rank} post_send dst {dst} context {} tag {tag} {options:?} len {len} seq {seq} -> {id:?}", context.0));
                }
                let key = (context, tag);
                Ok(self
                    .ledger
                    .add_send(&mut self.violations, self.now, rank, id, dst, key, buffer))
            }
            Err(error) => {
                self.arenas[r].release(buffer.region);
                self.check_refusal(rank, &format!("send to {dst} tag {tag} len {len}"), error);
                Err(error)
            }
        }
    }

    /// Posts a send of `bytes` chosen by the workload, in one of PANIC's contexts (a request or
    /// a message to an engine's programs, which the engine consumes: see
    /// [`crate::ledger::engine_context`]).
    pub fn send_bytes(
        &mut self,
        rank: Rank,
        dst: Rank,
        (context, tag): (Context, Tag),
        bytes: &[u8],
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        assert!(
            crate::ledger::engine_context(context),
            "only messages to engines carry bytes the ledger does not generate"
        );
        if self.is_dead(rank) {
            return Err(PostError::PeerUnreachable { peer: rank });
        }
        let r = rank as usize;
        let buffer = send_buffer_bytes(&mut self.arenas[r], &mut self.layout_rng, layout, bytes);
        self.dirty.insert(rank);
        let seq = self.ledger.next_seq(rank, dst);
        let posted = self.nodes[r].post_send(
            self.now,
            dst,
            (context, tag),
            send_options(rank, dst, seq),
            (&buffer, &mut self.arenas[r]),
        );
        match posted {
            Ok(id) => {
                if self.trace {
                    trace::line(self.now, format!("rank {rank} post_send dst {dst} context {} tag {tag} len {} (to the engine) -> {id:?}", context.0, bytes.len()));
                }
                Ok(self.ledger.add_send(
                    &mut self.violations,
                    self.now,
                    rank,
                    id,
                    dst,
                    (context, tag),
                    buffer,
                ))
            }
            Err(error) => {
                self.arenas[r].release(buffer.region);
                self.check_refusal(
                    rank,
                    &format!("send to engine {dst} context {} tag {tag}", context.0),
                    error,
                );
                Err(error)
            }
        }
    }

    /// Posts a receive into a fresh `capacity`-byte buffer surrounded by guard bytes.
    pub fn recv(
        &mut self,
        rank: Rank,
        source: Source,
        tag: TagMatch,
        capacity: u64,
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        self.recv_in(rank, source, (Context::USER, tag), capacity, layout)
    }

    /// [`recv`](Self::recv) in a matching context of choice.
    pub fn recv_in(
        &mut self,
        rank: Rank,
        source: Source,
        (context, tag): (Context, TagMatch),
        capacity: u64,
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        let wanted = Wanted::Match(source, (context, tag));
        self.post_receive(rank, wanted, capacity, layout)
    }

    /// Posts a receive of `capacity` bytes in a buffer of `layout` and records it in the
    /// ledger: in matching order now, or where its claim was made.
    fn post_receive(
        &mut self,
        rank: Rank,
        wanted: Wanted,
        capacity: u64,
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        if self.is_dead(rank) {
            return Err(PostError::PeerUnreachable { peer: rank });
        }
        let r = rank as usize;
        let buffer = recv_buffer(&mut self.arenas[r], &mut self.layout_rng, layout, capacity);
        self.dirty.insert(rank);
        let (node, arena) = (&mut self.nodes[r], &mut self.arenas[r]);
        let (posted, source, (context, tag), claimed_at) = match wanted {
            Wanted::Match(source, pattern) => {
                let posted = node.post_recv(self.now, source, pattern, &buffer, arena);
                (posted, source, pattern, None)
            }
            Wanted::Claimed(claimed) => {
                let posted = node.post_recv_claimed(self.now, claimed.claim, (&buffer, arena));
                let source = Source::Rank(claimed.status.peer);
                let pattern = (claimed.context, TagMatch::Tag(claimed.status.tag));
                (posted, source, pattern, Some(claimed))
            }
        };
        let id = match posted {
            Ok(id) => id,
            Err(error) => {
                self.arenas[r].release(buffer.region);
                self.check_refusal(rank, &format!("receive from {source:?} tag {tag:?}"), error);
                return Err(error);
            }
        };
        if self.trace {
            let claim = claimed_at.map_or(String::new(), |c| format!(" claim {:?}", c.claim));
            trace::line(self.now, format!("rank {rank} post_recv src {source:?} context {} tag {tag:?}{claim} capacity {capacity} -> {id:?}", context.0));
        }
        let v = &mut self.violations;
        let op = match claimed_at {
            None => self
                .ledger
                .add_recv(v, self.now, rank, id, source, (context, tag), buffer),
            Some(claimed) => self.ledger.add_recv_matched_at(
                v,
                self.now,
                (rank, id),
                source,
                (context, tag),
                buffer,
                claimed.post_index,
            ),
        };
        Ok(op)
    }

    /// Posts a blocking probe.
    pub fn probe(&mut self, rank: Rank, source: Source, tag: TagMatch) -> Result<OpRef, PostError> {
        self.probe_in(rank, source, (Context::USER, tag))
    }

    /// [`probe`](Self::probe) in a matching context of choice.
    pub fn probe_in(
        &mut self,
        rank: Rank,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> Result<OpRef, PostError> {
        if self.is_dead(rank) {
            return Err(PostError::PeerUnreachable { peer: rank });
        }
        self.dirty.insert(rank);
        match self.nodes[rank as usize].post_probe(self.now, source, (context, tag)) {
            Ok(id) => {
                if self.trace {
                    trace::line(
                        self.now,
                        format!("rank {rank} post_probe src {source:?} tag {tag:?} -> {id:?}"),
                    );
                }
                Ok(self.ledger.add_probe(
                    &mut self.violations,
                    self.now,
                    rank,
                    id,
                    source,
                    (context, tag),
                ))
            }
            Err(error) => {
                self.check_refusal(rank, &format!("probe of {source:?} tag {tag:?}"), error);
                Err(error)
            }
        }
    }

    /// Non-blocking probe; a reported status is checked against the messages outstanding.
    pub fn iprobe(&mut self, rank: Rank, source: Source, tag: TagMatch) -> Option<Status> {
        self.iprobe_in(rank, source, (Context::USER, tag))
    }

    /// [`iprobe`](Self::iprobe) in a matching context of choice.
    pub fn iprobe_in(
        &mut self,
        rank: Rank,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> Option<Status> {
        if self.is_dead(rank) {
            return None;
        }
        let found = self.nodes[rank as usize].iprobe(self.now, source, (context, tag));
        if self.mode == SimMode::Engine {
            // The engine's turn may have sent frames and finished operations.
            self.dirty.insert(rank);
        }
        if self.trace {
            trace::line(
                self.now,
                format!("rank {rank} iprobe src {source:?} tag {tag:?} -> {found:?}"),
            );
        }
        if let Some(status) = found {
            self.check_probed(rank, (source, context, tag), status, "iprobe");
        }
        found
    }

    /// A probe's answer must be a message it matches that is outstanding.
    fn check_probed(
        &mut self,
        rank: Rank,
        (source, context, tag): (Source, Context, TagMatch),
        status: Status,
        what: &str,
    ) {
        if !source.matches(status.peer) || !crate::ledger::accepts(tag, status.tag) {
            self.violation("match", format!("rank {rank}: {what}({source:?}, {tag:?}) returned {status:?} which it does not match"));
        } else if let Err(problem) = self.ledger.check_available(self.now, rank, context, status) {
            self.violation(
                "probe",
                format!(
                    "rank {rank}: {what}({source:?}, {tag:?}) returned {status:?} but {problem}"
                ),
            );
        }
    }

    /// Matched probe (MPI_Improbe): takes the message a receive would take now; checked as a
    /// non-blocking probe's answer. The claim holds its place in matching order until
    /// [`recv_claimed`](Self::recv_claimed) receives it.
    pub fn claim(&mut self, rank: Rank, source: Source, tag: TagMatch) -> Option<Claimed> {
        if self.is_dead(rank) {
            return None;
        }
        let context = Context::USER;
        let found = self.nodes[rank as usize].claim(self.now, source, (context, tag));
        // The engine's turn may have sent frames and finished operations; the core changed.
        self.dirty.insert(rank);
        if self.trace {
            trace::line(
                self.now,
                format!("rank {rank} claim src {source:?} tag {tag:?} -> {found:?}"),
            );
        }
        let (status, claim) = found?;
        self.check_probed(rank, (source, context, tag), status, "claim");
        Some(Claimed {
            status,
            claim,
            context,
            post_index: self.ledger.next_post_index(rank),
        })
    }

    /// Receives a claimed message (MPI_Mrecv) into a buffer of `capacity` bytes; the ledger
    /// checks it as a receive of exactly that source and tag posted when the claim was made.
    pub fn recv_claimed(
        &mut self,
        rank: Rank,
        claimed: Claimed,
        capacity: u64,
        layout: Layout,
    ) -> Result<OpRef, PostError> {
        self.post_receive(rank, Wanted::Claimed(claimed), capacity, layout)
    }

    /// Cancels an operation; the answer is checked against the ledger.
    pub fn cancel(&mut self, op: OpRef) -> Result<CancelOutcome, CancelError> {
        let rank = self.ledger.ops[op].rank;
        if self.is_dead(rank) {
            return Err(CancelError::UnknownOp);
        }
        let id = self.ledger.ops[op].id;
        let answer = self.nodes[rank as usize].cancel(self.now, id);
        if self.trace {
            trace::line(self.now, format!("rank {rank} cancel {id:?} -> {answer:?}"));
        }
        match (self.mode, answer) {
            (SimMode::Engine, Ok(_)) => self.ledger.note_cancel_asked(op),
            _ => self
                .ledger
                .note_cancel(&mut self.violations, self.now, op, answer),
        }
        self.dirty.insert(rank);
        answer
    }

    /// Whether a cancel's answer accepts it: `Cancelled` from the core; in engine mode, where
    /// a cancel is a request through the table, any `Ok` (the completion then must be
    /// `Cancelled`, which the workload checks).
    pub fn cancel_accepted(&self, answer: Result<CancelOutcome, CancelError>) -> bool {
        matches!(
            (self.mode, answer),
            (_, Ok(CancelOutcome::Cancelled)) | (SimMode::Engine, Ok(CancelOutcome::Requested))
        )
    }

    /// Checks and records one completion taken from `rank`'s endpoint.
    pub(crate) fn record_completion(
        &mut self,
        rank: Rank,
        completion: Completion,
    ) -> Option<OpRef> {
        if self.trace {
            trace::line(
                self.now,
                format!(
                    "rank {rank} completion {:?} {:?}",
                    completion.op, completion.result
                ),
            );
        }
        self.ledger.complete(
            &mut self.violations,
            &mut self.arenas[rank as usize],
            &self.deaths,
            self.now,
            rank,
            completion,
        )
    }

    /// Checks a frame `rank` sent to `dst` and hands it to the network; `None`: its bytes could
    /// not be gathered from the rank's memory.
    pub(crate) fn emit(&mut self, rank: Rank, dst: Rank, bytes: Option<Vec<u8>>) {
        let Some(bytes) = bytes else {
            self.violation(
                "transmit-memory",
                format!("rank {rank}: frame to {dst} refers to memory that is not registered (buffer of a completed operation?)"),
            );
            return;
        };
        let len = bytes.len();
        if dst >= self.size || dst == rank {
            self.violation(
                "frame",
                format!("rank {rank}: frame addressed to rank {dst}"),
            );
            return;
        }
        if len > self.mtu as usize {
            self.violation(
                "mtu",
                format!(
                    "rank {rank}: frame of {len} bytes to {dst} exceeds the MTU of {}",
                    self.mtu
                ),
            );
        }
        match Frame::parse(&bytes) {
            Ok(frame) => {
                let h = frame.header;
                if h.src != rank || h.dst != dst || h.job != self.job {
                    self.violation(
                        "frame",
                        format!("rank {rank}: frame to {dst} has header src {} dst {} job {} (job is {})", h.src, h.dst, h.job, self.job),
                    );
                }
            }
            Err(error) => self.violation(
                "frame",
                format!("rank {rank}: emitted a frame to {dst} that does not parse: {error}"),
            ),
        }
        let summary = if self.trace {
            Some(trace::describe_frame(&bytes))
        } else {
            None
        };
        let fate = self.net.send(self.now, rank, dst, bytes);
        if let Some(summary) = summary {
            trace::line(
                self.now,
                format!(
                    "{rank}->{dst} send {summary} {}",
                    trace::describe_fate(&fate)
                ),
            );
        }
    }
}

/// What the simulator's sender attaches to message `seq` from `src` to `dst`, as the ledger
/// expects it ([`crate::ledger::immediate_of`], [`crate::ledger::confirmed_of`],
/// [`crate::ledger::unwaited_of`]).
fn send_options(src: Rank, dst: Rank, seq: u64) -> SendOptions {
    SendOptions {
        immediate: crate::ledger::immediate_of(src, dst, seq),
        confirmed: crate::ledger::confirmed_of(src, dst, seq),
        unwaited: crate::ledger::unwaited_of(src, dst, seq),
    }
}

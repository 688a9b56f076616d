//! The ledger: every operation posted and every message sent in a run, and what became of them.
//! Completions are checked against it as they arrive; the end-of-run checks read it.
//!
//! Messages are numbered per (source, destination) pair in send-post order (`seq`); their bytes
//! are [`Pattern::message`]`(src, dst, seq)`. A receive is matched to the message whose bytes it
//! holds, so a wrong, duplicated, or cancelled message is recognised, not just counted.

use crate::content::Pattern;
use crate::invariants::Violations;
use crate::memory::{check_recv, holds_message, read_message, Arena, Buffer, Expect};
use nicmsg_proto::{
    CancelError, CancelOutcome, Completion, Context, Nanos, OpError, OpId, OpKind, Rank, Source,
    Status, Tag, TagMatch,
};
use std::collections::{BTreeMap, HashMap};

/// Index of an operation in the ledger.
pub type OpRef = usize;
/// Index of a message in the ledger.
pub type MsgRef = usize;

/// What became of a cancel request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelState {
    NotRequested,
    /// `cancel` returned Ok: the completion must be `Cancelled`, a cancelled send's message must
    /// never be delivered.
    Accepted,
    /// `cancel` returned `InProgress`: the operation completes normally.
    Refused,
    /// `cancel` of a started send returned `Requested`: the completion is `Cancelled` (the
    /// message must never be delivered) or normal (it must be delivered).
    Requested,
}

#[derive(Debug, Clone)]
pub enum OpDetail {
    Send {
        dst: Rank,
        context: Context,
        tag: Tag,
        msg: MsgRef,
        buffer: Buffer,
    },
    Recv {
        source: Source,
        context: Context,
        tag: TagMatch,
        buffer: Buffer,
        capacity: u64,
        post_index: u64,
    },
    Probe {
        source: Source,
        context: Context,
        tag: TagMatch,
    },
}

#[derive(Debug, Clone)]
pub struct OpRecord {
    pub rank: Rank,
    pub id: OpId,
    pub posted_at: Nanos,
    pub detail: OpDetail,
    pub cancel: CancelState,
    pub result: Option<Result<Status, OpError>>,
    pub completed_at: Option<Nanos>,
    /// Receive: the message it consumed (delivered or truncated).
    pub got: Option<MsgRef>,
    /// Receive in an engine's context ([`engine_context`]): the bytes it delivered, for the
    /// workload to check.
    pub received: Option<Vec<u8>>,
}

impl OpRecord {
    pub fn is_pending(&self) -> bool {
        self.result.is_none()
    }

    pub fn describe(&self) -> String {
        let what = match &self.detail {
            OpDetail::Send {
                dst,
                context,
                tag,
                msg,
                buffer,
            } => {
                format!(
                    "send to {dst}{} tag {tag} msg#{msg} len {}",
                    fmt_context(*context),
                    buffer.sg.total_len()
                )
            }
            OpDetail::Recv {
                source,
                context,
                tag,
                capacity,
                ..
            } => {
                format!(
                    "recv from {}{} tag {} capacity {capacity}",
                    fmt_source(*source),
                    fmt_context(*context),
                    fmt_tag(*tag)
                )
            }
            OpDetail::Probe {
                source,
                context,
                tag,
            } => {
                format!(
                    "probe from {}{} tag {}",
                    fmt_source(*source),
                    fmt_context(*context),
                    fmt_tag(*tag)
                )
            }
        };
        let cancel = match self.cancel {
            CancelState::NotRequested => "",
            CancelState::Accepted => " (cancel accepted)",
            CancelState::Refused => " (cancel refused)",
            CancelState::Requested => " (cancel requested)",
        };
        format!(
            "rank {} {what} posted at {}{cancel} (op {:?} #{} gen {})",
            self.rank,
            crate::report::fmt_ns(self.posted_at),
            self.id.kind,
            self.id.index,
            self.id.generation
        )
    }
}

pub fn fmt_source(source: Source) -> String {
    match source {
        Source::Rank(r) => r.to_string(),
        Source::Any => "ANY".into(),
    }
}

/// Empty for the user context, which most operations are in.
pub fn fmt_context(context: Context) -> String {
    if context == Context::USER {
        String::new()
    } else {
        format!(" context {}", context.0)
    }
}

pub fn fmt_tag(tag: TagMatch) -> String {
    match tag {
        TagMatch::Tag(t) => t.to_string(),
        TagMatch::Any => "ANY".into(),
        TagMatch::Masked { tag, ignore } => format!("{tag:#x} ignoring {ignore:#x}"),
    }
}

/// Whether a receive or probe of `wanted` may take a message tagged `tag`: the ledger's own
/// statement of the rule, not the protocol's [`TagMatch::matches`], so a wrong match in the
/// protocol is caught rather than agreed with.
pub fn accepts(wanted: TagMatch, tag: Tag) -> bool {
    match wanted {
        TagMatch::Any => true,
        TagMatch::Tag(exact) => exact == tag,
        TagMatch::Masked {
            tag: pattern,
            ignore,
        } => (0..64)
            .filter(|bit| ignore >> bit & 1 == 0)
            .all(|bit| (pattern >> bit & 1) == (tag >> bit & 1)),
    }
}

/// The immediate data the simulator's sender attaches to message `seq` from `src` to `dst`:
/// every other message carries some (a value that names the message), the rest none, so
/// every workload checks that each receive and probe reports its own message's.
pub fn immediate_of(src: Rank, dst: Rank, seq: u64) -> Option<u32> {
    (seq % 2 == 1).then(|| (src << 24) ^ (dst << 16) ^ (seq as u32).wrapping_mul(0x9e37_79b9))
}

/// Whether the simulator's sender asks message `seq` from `src` to `dst` to complete only once
/// its receiver holds it (`SendOptions::confirmed`, libfabric's `FI_DELIVERY_COMPLETE`): every
/// third message, so every workload mixes them with sends that may complete from the core's
/// copy, and the ledger checks each completes no sooner than a round trip after it was posted.
pub fn confirmed_of(_src: Rank, _dst: Rank, seq: u64) -> bool {
    seq % 3 == 2
}

/// Whether the simulator's sender posts message `seq` from `src` to `dst` as one its host
/// keeps and waits for nothing from (`SendOptions::unwaited`, libfabric's provider sending a
/// copy it buffered): every sixth message, half of those not confirmed. The core does not copy
/// it, so it too completes no sooner than a round trip, and its frames say UNWAITED, so its
/// acknowledgement may be held back for a carrier.
pub fn unwaited_of(_src: Rank, _dst: Rank, seq: u64) -> bool {
    seq % 6 == 1
}

/// Messages of one sender to one receiver that one receive pattern orders: (source,
/// destination, context, tag).
type Stream = (Rank, Rank, Context, Tag);

/// What a completed receive was posted with.
#[derive(Debug, Clone, Copy)]
struct Receive {
    source: Source,
    context: Context,
    tag: TagMatch,
    buffer: Buffer,
    capacity: u64,
    post_index: u64,
}

/// How a message was consumed by a receive.
#[derive(Debug, Clone, Copy)]
pub struct Consumed {
    pub by: OpRef,
    pub at: Nanos,
    pub truncated: bool,
    /// Post order of the receive at the destination (for the non-overtaking check).
    pub post_index: u64,
}

#[derive(Debug, Clone)]
pub struct MsgRecord {
    pub src: Rank,
    pub dst: Rank,
    pub seq: u64,
    pub context: Context,
    pub tag: Tag,
    pub len: u64,
    /// What its send attached ([`immediate_of`]).
    pub immediate: Option<u32>,
    /// Its send completes only once the receiver holds it ([`confirmed_of`]), or, unwaited,
    /// once it is acknowledged ([`unwaited_of`]): never from a copy.
    pub not_from_copy: bool,
    pub send_op: OpRef,
    pub consumed: Option<Consumed>,
}

impl MsgRecord {
    pub fn pattern(&self) -> Pattern {
        Pattern::message(self.src, self.dst, self.seq)
    }

    pub fn describe(&self) -> String {
        format!(
            "message {}->{} seq {}{} tag {} len {}",
            self.src,
            self.dst,
            self.seq,
            fmt_context(self.context),
            self.tag,
            self.len
        )
    }
}

fn op_key(id: OpId) -> (u8, u32, u32) {
    let kind = match id.kind {
        OpKind::Send => 0,
        OpKind::Recv => 1,
        OpKind::Probe => 2,
    };
    (kind, id.index, id.generation)
}

/// Whether messages in `context` are PANIC's: to or from an engine's programs rather than
/// between applications. A host's sends there are consumed by an engine, and what a host
/// receives there was sent by one, so their bytes are not the ledger's patterns: the workload
/// checks them (every request answered once, replies' bytes), and the ledger checks the rest
/// (completions, matching, guard bytes, truncation).
pub fn engine_context(context: Context) -> bool {
    context == Context::PROGRAM_MESSAGES
        || context == Context::PROGRAM_REQUESTS
        || context == Context::PROGRAM_ANSWERS
}

/// Death times of ranks, as they happen.
pub fn dead_by(deaths: &[Option<Nanos>], rank: Rank, now: Nanos) -> bool {
    deaths
        .get(rank as usize)
        .copied()
        .flatten()
        .is_some_and(|t| t <= now)
}

/// A receive whose message is identified at the end of the run: a truncated one (no bytes), or
/// one whose bytes match several outstanding messages (empty messages).
#[derive(Debug, Clone)]
struct Deferred {
    op: OpRef,
    src: Rank,
    dst: Rank,
    context: Context,
    tag: Tag,
    len: u64,
    /// The immediate data the completion reported.
    immediate: Option<u32>,
    post_index: u64,
    at: Nanos,
    /// Messages its bytes matched (`None`: truncated, no bytes).
    candidates: Option<Vec<MsgRef>>,
}

#[derive(Debug, Default)]
pub struct Ledger {
    size: u32,
    pub ops: Vec<OpRecord>,
    pub msgs: Vec<MsgRecord>,
    pending: Vec<HashMap<(u8, u32, u32), OpRef>>,
    incomplete: Vec<usize>,
    /// Messages of each (src, dst) pair in seq order, and the first not yet consumed/cancelled.
    pair_msgs: Vec<Vec<MsgRef>>,
    pair_open: Vec<usize>,
    recv_posts: Vec<u64>,
    deferred: Vec<Deferred>,
    /// The shortest time in which a confirmed send to another rank can complete: a frame
    /// there and its acknowledgement back, each at least the network's base delay.
    confirm_floor_ns: Nanos,
}

impl Ledger {
    pub fn new(size: u32) -> Self {
        let n = size as usize;
        Self {
            size,
            ops: Vec::new(),
            msgs: Vec::new(),
            pending: vec![HashMap::new(); n],
            incomplete: vec![0; n],
            pair_msgs: vec![Vec::new(); n * n],
            pair_open: vec![0; n * n],
            recv_posts: vec![0; n],
            deferred: Vec::new(),
            confirm_floor_ns: 0,
        }
    }

    /// A ledger for a network whose shortest round trip is `round_trip_ns` (twice its base
    /// one-way delay): a confirmed send that completes sooner was completed from a copy, not by
    /// its acknowledgement.
    pub fn with_confirm_floor(size: u32, round_trip_ns: Nanos) -> Self {
        Self {
            confirm_floor_ns: round_trip_ns,
            ..Self::new(size)
        }
    }

    fn pair(&self, src: Rank, dst: Rank) -> usize {
        src as usize * self.size as usize + dst as usize
    }

    /// Sequence number the next message from `src` to `dst` gets.
    pub fn next_seq(&self, src: Rank, dst: Rank) -> u64 {
        self.pair_msgs[self.pair(src, dst)].len() as u64
    }

    /// Operations not yet completed on ranks that are alive.
    pub fn pending_live(&self, deaths: &[Option<Nanos>]) -> usize {
        (0..self.size)
            .filter(|&r| deaths[r as usize].is_none())
            .map(|r| self.incomplete[r as usize])
            .sum()
    }

    pub fn pending_ops(&self, rank: Rank) -> usize {
        self.incomplete[rank as usize]
    }

    fn add_op(
        &mut self,
        v: &mut Violations,
        now: Nanos,
        rank: Rank,
        id: OpId,
        detail: OpDetail,
    ) -> OpRef {
        let op = self.ops.len();
        let expected_kind = match detail {
            OpDetail::Send { .. } => OpKind::Send,
            OpDetail::Recv { .. } => OpKind::Recv,
            OpDetail::Probe { .. } => OpKind::Probe,
        };
        if id.kind != expected_kind {
            v.push(
                now,
                "op-id",
                format!(
                    "rank {rank}: posting a {expected_kind:?} returned an id of kind {:?}",
                    id.kind
                ),
            );
        }
        if let Some(previous) = self.pending[rank as usize].insert(op_key(id), op) {
            v.push(
                now,
                "op-id",
                format!(
                    "rank {rank}: new operation got the id of a pending one: {}",
                    self.ops[previous].describe()
                ),
            );
            self.incomplete[rank as usize] -= 1;
        }
        self.incomplete[rank as usize] += 1;
        self.ops.push(OpRecord {
            rank,
            id,
            posted_at: now,
            detail,
            cancel: CancelState::NotRequested,
            result: None,
            completed_at: None,
            got: None,
            received: None,
        });
        op
    }

    /// Records a posted send; its message takes the next seq of the pair.
    #[allow(clippy::too_many_arguments)]
    pub fn add_send(
        &mut self,
        v: &mut Violations,
        now: Nanos,
        rank: Rank,
        id: OpId,
        dst: Rank,
        (context, tag): (Context, Tag),
        buffer: Buffer,
    ) -> OpRef {
        let msg = self.msgs.len();
        let pair = self.pair(rank, dst);
        let seq = self.pair_msgs[pair].len() as u64;
        let op = self.add_op(
            v,
            now,
            rank,
            id,
            OpDetail::Send {
                dst,
                context,
                tag,
                msg,
                buffer,
            },
        );
        self.msgs.push(MsgRecord {
            src: rank,
            dst,
            seq,
            context,
            tag,
            len: buffer.sg.total_len(),
            immediate: immediate_of(rank, dst, seq),
            not_from_copy: confirmed_of(rank, dst, seq) || unwaited_of(rank, dst, seq),
            send_op: op,
            consumed: None,
        });
        self.pair_msgs[pair].push(msg);
        op
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add_recv(
        &mut self,
        v: &mut Violations,
        now: Nanos,
        rank: Rank,
        id: OpId,
        source: Source,
        (context, tag): (Context, TagMatch),
        buffer: Buffer,
    ) -> OpRef {
        let post_index = self.next_post_index(rank);
        self.add_recv_matched_at(
            v,
            now,
            (rank, id),
            source,
            (context, tag),
            buffer,
            post_index,
        )
    }

    /// The place in `rank`'s matching order of a receive posted now, or of a claim made now
    /// (MPI matches a claimed message when it is claimed, not when its receive is posted).
    pub fn next_post_index(&mut self, rank: Rank) -> u64 {
        let post_index = self.recv_posts[rank as usize];
        self.recv_posts[rank as usize] += 1;
        post_index
    }

    /// A receive that takes its place in matching order at `post_index`: the receive of a
    /// claim, placed where the claim was made.
    #[allow(clippy::too_many_arguments)]
    pub fn add_recv_matched_at(
        &mut self,
        v: &mut Violations,
        now: Nanos,
        (rank, id): (Rank, OpId),
        source: Source,
        (context, tag): (Context, TagMatch),
        buffer: Buffer,
        post_index: u64,
    ) -> OpRef {
        let capacity = buffer.sg.total_len();
        self.add_op(
            v,
            now,
            rank,
            id,
            OpDetail::Recv {
                source,
                context,
                tag,
                buffer,
                capacity,
                post_index,
            },
        )
    }

    pub fn add_probe(
        &mut self,
        v: &mut Violations,
        now: Nanos,
        rank: Rank,
        id: OpId,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> OpRef {
        let detail = OpDetail::Probe {
            source,
            context,
            tag,
        };
        self.add_op(v, now, rank, id, detail)
    }

    /// The message's send was cancelled for sure: accepted, or withdrawn on request.
    fn send_cancelled(&self, msg: MsgRef) -> bool {
        let send = &self.ops[self.msgs[msg].send_op];
        match send.cancel {
            CancelState::Accepted => true,
            CancelState::Requested => send.result == Some(Err(OpError::Cancelled)),
            _ => false,
        }
    }

    /// Messages of the pair not consumed and not cancelled, in seq order.
    fn open_msgs(&mut self, src: Rank, dst: Rank) -> impl Iterator<Item = MsgRef> + '_ {
        let pair = self.pair(src, dst);
        let list = &self.pair_msgs[pair];
        let mut open = self.pair_open[pair];
        while open < list.len()
            && (self.msgs[list[open]].consumed.is_some() || self.send_cancelled(list[open]))
        {
            open += 1;
        }
        self.pair_open[pair] = open;
        let msgs = &self.msgs;
        let ops = &self.ops;
        self.pair_msgs[pair][open..]
            .iter()
            .copied()
            .filter(move |&m| {
                let send = &ops[msgs[m].send_op];
                let cancelled = send.cancel == CancelState::Accepted
                    || (send.cancel == CancelState::Requested
                        && send.result == Some(Err(OpError::Cancelled)));
                msgs[m].consumed.is_none() && !cancelled
            })
    }

    /// Checks a cancel's answer against what the ledger knows of the operation.
    pub fn note_cancel(
        &mut self,
        v: &mut Violations,
        now: Nanos,
        op: OpRef,
        answer: Result<CancelOutcome, CancelError>,
    ) {
        let record = &self.ops[op];
        let pending = record.is_pending();
        let is_send = matches!(record.detail, OpDetail::Send { .. });
        match (pending, answer) {
            (true, Ok(CancelOutcome::Cancelled)) => self.ops[op].cancel = CancelState::Accepted,
            (true, Ok(CancelOutcome::Requested)) if is_send => {
                self.ops[op].cancel = CancelState::Requested
            }
            (true, Ok(CancelOutcome::Requested)) => v.push(
                now,
                "cancel",
                format!("cancel of a receive or probe answered Requested: {}", record.describe()),
            ),
            (true, Err(CancelError::InProgress)) => self.ops[op].cancel = CancelState::Refused,
            (true, Err(CancelError::UnknownOp)) => v.push(
                now,
                "cancel",
                format!("cancel answered UnknownOp for an operation that has not completed: {}", record.describe()),
            ),
            (false, Err(CancelError::UnknownOp)) => {}
            (false, other) => v.push(
                now,
                "cancel",
                format!(
                    "cancel of an already completed operation answered {other:?} instead of UnknownOp (stale handle not detected): {}",
                    record.describe()
                ),
            ),
        }
    }

    /// A cancel asked through the descriptor table (engine mode): the answer is the completion,
    /// `Cancelled` (it did not happen) or normal (too late), each checked as after a send's
    /// `Requested`.
    pub fn note_cancel_asked(&mut self, op: OpRef) {
        let record = &mut self.ops[op];
        if record.is_pending() && record.cancel == CancelState::NotRequested {
            record.cancel = CancelState::Requested;
        }
    }

    /// An operation the engine refused when it took it (reported as a violation by the
    /// caller): no longer pending, its memory released.
    pub fn abandon(&mut self, arena: &mut Arena, rank: Rank, id: OpId) {
        let Some(op) = self.pending[rank as usize].remove(&op_key(id)) else {
            return;
        };
        self.incomplete[rank as usize] -= 1;
        match &self.ops[op].detail {
            OpDetail::Send { buffer, .. } | OpDetail::Recv { buffer, .. } => {
                arena.release(buffer.region)
            }
            OpDetail::Probe { .. } => {}
        }
    }

    /// Records and checks a completion. Returns the operation, or `None` when it was not pending.
    pub fn complete(
        &mut self,
        v: &mut Violations,
        arena: &mut Arena,
        deaths: &[Option<Nanos>],
        now: Nanos,
        rank: Rank,
        completion: Completion,
    ) -> Option<OpRef> {
        let Some(op) = self.pending[rank as usize].remove(&op_key(completion.op)) else {
            v.push(
                now,
                "completion",
                format!(
                    "rank {rank}: completion {:?} for an operation that is not pending (second completion, or never posted)",
                    completion
                ),
            );
            return None;
        };
        self.incomplete[rank as usize] -= 1;
        let result = completion.result;
        self.ops[op].result = Some(result);
        self.ops[op].completed_at = Some(now);
        let describe = self.ops[op].describe();
        match (self.ops[op].cancel, result) {
            (CancelState::Accepted, Err(OpError::Cancelled)) => {}
            (CancelState::Requested, Err(OpError::Cancelled)) => {
                if let OpDetail::Send { msg, .. } = self.ops[op].detail {
                    if let Some(by) = self.msgs[msg].consumed {
                        v.push(
                            now,
                            "cancel",
                            format!(
                                "send completed Cancelled but its message was received by {}: {describe}",
                                self.ops[by.by].describe()
                            ),
                        );
                    }
                }
            }
            (CancelState::Requested, Ok(_)) => {}
            (CancelState::Accepted, other) => v.push(
                now,
                "cancel",
                format!(
                    "cancel was accepted but the operation completed with {other:?}: {describe}"
                ),
            ),
            (_, Err(OpError::Cancelled)) => v.push(
                now,
                "cancel",
                format!("completed Cancelled although no cancel was accepted: {describe}"),
            ),
            _ => {}
        }
        if let Err(OpError::PeerUnreachable { peer }) = result {
            if !dead_by(deaths, peer, now) {
                v.push(
                    now,
                    "false-unreachable",
                    format!("peer {peer} declared unreachable but it is alive: {describe}"),
                );
            }
        }
        let detail = self.ops[op].detail.clone();
        match detail {
            OpDetail::Send { dst, tag, msg, buffer, .. } => {
                match result {
                    Ok(status) => {
                        let want = Status {
                            peer: dst,
                            tag,
                            len: self.msgs[msg].len,
                            immediate: self.msgs[msg].immediate,
                        };
                        if status != want {
                            v.push(now, "status", format!("send completed with {status:?}, expected {want:?}: {describe}"));
                        }
                        let took = now - self.ops[op].posted_at;
                        if self.msgs[msg].not_from_copy && dst != rank && took < self.confirm_floor_ns {
                            v.push(now, "confirmed", format!("confirmed send completed {took} ns after it was posted, less than a round trip ({} ns): from a copy, not on delivery: {describe}", self.confirm_floor_ns));
                        }
                    }
                    Err(OpError::PeerUnreachable { peer }) if peer != dst => v.push(
                        now,
                        "status",
                        format!("send failed with PeerUnreachable for rank {peer}, not its destination: {describe}"),
                    ),
                    Err(_) => {}
                }
                arena.release(buffer.region);
            }
            OpDetail::Recv { source, context, tag, buffer, capacity, post_index } => {
                let receive = Receive { source, context, tag, buffer, capacity, post_index };
                self.complete_recv(v, arena, now, rank, op, receive, result);
                arena.release(buffer.region);
            }
            OpDetail::Probe { source, context, tag } => match result {
                Ok(status) => {
                    if !source.matches(status.peer) || !accepts(tag, status.tag) {
                        v.push(now, "match", format!("probe completed with {status:?} which it does not match: {describe}"));
                    }
                    if let Err(problem) = self.check_available(now, rank, context, status) {
                        v.push(now, "probe", format!("probe reported {status:?} but {problem}: {describe}"));
                    }
                }
                Err(OpError::Truncated { .. }) => {
                    v.push(now, "status", format!("probe completed with {result:?}: {describe}"))
                }
                Err(OpError::PeerUnreachable { peer }) if !source.matches(peer) => v.push(
                    now,
                    "status",
                    format!("probe failed with PeerUnreachable for rank {peer} it does not wait on: {describe}"),
                ),
                Err(_) => {}
            },
        }
        Some(op)
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_recv(
        &mut self,
        v: &mut Violations,
        arena: &Arena,
        now: Nanos,
        rank: Rank,
        op: OpRef,
        receive: Receive,
        result: Result<Status, OpError>,
    ) {
        let Receive {
            source,
            context,
            tag,
            buffer,
            capacity,
            post_index,
        } = receive;
        let describe = self.ops[op].describe();
        match result {
            Ok(status) => {
                // A host's own engine answers it: only PANIC's messages may come from this rank.
                if status.peer >= self.size || (status.peer == rank && !engine_context(context)) {
                    v.push(
                        now,
                        "status",
                        format!(
                            "receive completed from impossible rank {}: {describe}",
                            status.peer
                        ),
                    );
                    return;
                }
                if !source.matches(status.peer) || !accepts(tag, status.tag) {
                    v.push(
                        now,
                        "match",
                        format!("receive got {status:?} which it does not match: {describe}"),
                    );
                }
                if status.len > capacity {
                    v.push(now, "truncation", format!("receive completed Ok with {status:?} longer than its buffer: {describe}"));
                    return;
                }
                if engine_context(context) {
                    if let Err(problem) =
                        check_recv(arena, &buffer, Expect::Opaque { len: status.len })
                    {
                        v.push(now, "memory", format!("{problem}: {describe}"));
                    }
                    self.ops[op].received = read_message(arena, &buffer, status.len);
                    return;
                }
                let open: Vec<MsgRef> = self.open_msgs(status.peer, rank).collect();
                let matching: Vec<MsgRef> = open
                    .into_iter()
                    .filter(|&m| {
                        let msg = &self.msgs[m];
                        msg.context == context && msg.tag == status.tag && msg.len == status.len
                    })
                    .filter(|&m| holds_message(arena, &buffer, self.msgs[m].pattern(), status.len))
                    .collect();
                if matching.len() > 1 {
                    // Bytes cannot tell these apart (empty or identical): settled at the end in
                    // receive post order, like truncations.
                    if let Err(problem) = check_recv(arena, &buffer, Expect::OutsideOnly) {
                        v.push(now, "memory", format!("{problem}: {describe}"));
                    }
                    self.deferred.push(Deferred {
                        op,
                        src: status.peer,
                        dst: rank,
                        context,
                        tag: status.tag,
                        len: status.len,
                        immediate: status.immediate,
                        post_index,
                        at: now,
                        candidates: Some(matching),
                    });
                    return;
                }
                let found = matching.first().copied();
                let Some(msg) = found else {
                    // Tell a duplicate or a cancelled message from plain garbage.
                    let pair = self.pair(status.peer, rank);
                    let other = self.pair_msgs[pair].iter().copied().find(|&m| {
                        self.msgs[m].tag == status.tag
                            && self.msgs[m].len == status.len
                            && holds_message(arena, &buffer, self.msgs[m].pattern(), status.len)
                    });
                    let why = match other {
                        Some(m) if self.msgs[m].context != context => format!(
                            "it is {}, of another context: a receive took a message it must never see",
                            self.msgs[m].describe()
                        ),
                        Some(m) if self.msgs[m].consumed.is_some() => {
                            let by = self.msgs[m].consumed.expect("checked");
                            format!(
                                "it is {} which was already consumed by {} at {} (delivered twice)",
                                self.msgs[m].describe(),
                                self.ops[by.by].describe(),
                                crate::report::fmt_ns(by.at)
                            )
                        }
                        Some(m) => format!("it is {} whose send was cancelled", self.msgs[m].describe()),
                        None => format!(
                            "the bytes match no undelivered message from {} with tag {} and length {}",
                            status.peer, status.tag, status.len
                        ),
                    };
                    v.push(
                        now,
                        "delivery",
                        format!("receive completed with {status:?} but {why}: {describe}"),
                    );
                    if let Err(problem) = check_recv(arena, &buffer, Expect::OutsideOnly) {
                        v.push(now, "memory", format!("{problem}: {describe}"));
                    }
                    return;
                };
                let pattern = self.msgs[msg].pattern();
                if let Err(problem) = check_recv(
                    arena,
                    &buffer,
                    Expect::Delivered {
                        pattern,
                        len: status.len,
                    },
                ) {
                    v.push(
                        now,
                        "content",
                        format!("{problem} ({}): {describe}", self.msgs[msg].describe()),
                    );
                }
                if status.immediate != self.msgs[msg].immediate {
                    v.push(
                        now,
                        "immediate",
                        format!(
                            "receive reported immediate data {:?}, its message carried {:?} ({}): {describe}",
                            status.immediate,
                            self.msgs[msg].immediate,
                            self.msgs[msg].describe()
                        ),
                    );
                }
                self.msgs[msg].consumed = Some(Consumed {
                    by: op,
                    at: now,
                    truncated: false,
                    post_index,
                });
                self.ops[op].got = Some(msg);
            }
            Err(OpError::Truncated {
                source_rank,
                tag: got_tag,
                message_len,
                buffer_len,
                immediate,
            }) => {
                if buffer_len != capacity || message_len <= capacity {
                    v.push(
                        now,
                        "truncation",
                        format!("truncation reports message {message_len} / buffer {buffer_len} bytes but the buffer holds {capacity}: {describe}"),
                    );
                }
                if !source.matches(source_rank) || !accepts(tag, got_tag) {
                    v.push(now, "match", format!("truncated receive names {source_rank}/{got_tag} which it does not match: {describe}"));
                }
                if let Err(problem) = check_recv(arena, &buffer, Expect::Untouched) {
                    v.push(
                        now,
                        "memory",
                        format!("truncated receive wrote its buffer: {problem}: {describe}"),
                    );
                }
                if source_rank >= self.size || source_rank == rank || engine_context(context) {
                    if !engine_context(context) {
                        v.push(
                            now,
                            "status",
                            format!(
                                "truncated receive names impossible rank {source_rank}: {describe}"
                            ),
                        );
                    }
                    return;
                }
                // Which message it consumed is settled at the end of the run: a truncated receive
                // carries no bytes, and an earlier receive of the same source and tag may still be
                // filling (completions need not come in matching order).
                self.deferred.push(Deferred {
                    op,
                    src: source_rank,
                    dst: rank,
                    context,
                    tag: got_tag,
                    len: message_len,
                    immediate,
                    post_index,
                    at: now,
                    candidates: None,
                });
            }
            Err(OpError::Cancelled) => {
                if let Err(problem) = check_recv(arena, &buffer, Expect::Untouched) {
                    v.push(
                        now,
                        "memory",
                        format!("cancelled receive wrote its buffer: {problem}: {describe}"),
                    );
                }
            }
            Err(OpError::PeerUnreachable { peer }) => {
                if !source.matches(peer) {
                    v.push(now, "status", format!("receive failed for unreachable rank {peer} it does not receive from: {describe}"));
                }
                if let Err(problem) = check_recv(arena, &buffer, Expect::OutsideOnly) {
                    v.push(now, "memory", format!("{problem}: {describe}"));
                }
            }
        }
    }

    /// A probe's status must name a message that was sent to `rank` and is not consumed (or was
    /// consumed at this very instant, by a completion handled just before).
    pub fn check_available(
        &self,
        now: Nanos,
        rank: Rank,
        context: Context,
        status: Status,
    ) -> Result<(), String> {
        if status.peer >= self.size || (status.peer == rank && !engine_context(context)) {
            return Err(format!("rank {} cannot have sent it", status.peer));
        }
        if engine_context(context) {
            return Ok(()); // an engine's message, which the ledger does not know
        }
        let pair = self.pair(status.peer, rank);
        let exists = self.pair_msgs[pair].iter().any(|&m| {
            let msg = &self.msgs[m];
            msg.context == context
                && msg.tag == status.tag
                && msg.len == status.len
                && msg.immediate == status.immediate
                && !self.send_cancelled(m)
                && msg.consumed.is_none_or_at(now)
        });
        if exists {
            Ok(())
        } else {
            Err("no such message is outstanding".into())
        }
    }

    /// Assigns the deferred receives to messages: per (source, destination, tag), in receive post
    /// order, each takes the oldest outstanding message of its length (among those its bytes
    /// matched). Receives identified by their bytes when they completed keep their message.
    fn resolve_deferred(&mut self, v: &mut Violations) {
        let mut deferred = std::mem::take(&mut self.deferred);
        deferred.sort_by_key(|d| (d.dst, d.post_index));
        for d in deferred {
            // Non-overtaking: a receive posted after one that took message `seq` of this stream
            // takes a later message. An earlier message may legitimately stay unconsumed (its
            // matched receive failed when the sender died), so skip past it.
            let pair = self.pair(d.src, d.dst);
            let floor = self.pair_msgs[pair]
                .iter()
                .map(|&m| &self.msgs[m])
                .filter(|m| m.context == d.context && m.tag == d.tag)
                .filter(|m| {
                    m.consumed
                        .as_ref()
                        .is_some_and(|c| c.post_index < d.post_index)
                })
                .map(|m| m.seq)
                .max();
            let open: Vec<MsgRef> = self.open_msgs(d.src, d.dst).collect();
            let found = open.into_iter().find(|&m| {
                self.msgs[m].context == d.context
                    && self.msgs[m].tag == d.tag
                    && self.msgs[m].len == d.len
                    && self.msgs[m].immediate == d.immediate
                    && floor.is_none_or(|f| self.msgs[m].seq > f)
                    && d.candidates.as_ref().is_none_or_contains(m)
            });
            match found {
                Some(msg) => {
                    let truncated = d.candidates.is_none();
                    self.msgs[msg].consumed = Some(Consumed { by: d.op, at: d.at, truncated, post_index: d.post_index });
                    self.ops[d.op].got = Some(msg);
                }
                None => v.push(
                    d.at,
                    "delivery",
                    format!(
                        "{} receive got a message ({}, tag {}, {} bytes) that is not outstanding (delivered twice?): {}",
                        if d.candidates.is_none() { "truncated" } else { "completed" },
                        d.src,
                        d.tag,
                        d.len,
                        self.ops[d.op].describe()
                    ),
                ),
            }
        }
    }

    /// End-of-run checks on operations and messages.
    pub fn final_checks(&mut self, v: &mut Violations, deaths: &[Option<Nanos>], now: Nanos) {
        self.resolve_deferred(v);
        // Every operation of a live rank completed.
        let stuck: Vec<&OpRecord> = self
            .ops
            .iter()
            .filter(|o| o.is_pending() && deaths[o.rank as usize].is_none())
            .collect();
        if !stuck.is_empty() {
            let list: Vec<String> = stuck.iter().take(6).map(|o| o.describe()).collect();
            v.push(
                now,
                "no-completion",
                format!(
                    "{} operation(s) never completed, e.g. {}",
                    stuck.len(),
                    list.join("; ")
                ),
            );
        }
        // Every message whose send succeeded was received (unless an end died).
        let mut lost = Vec::new();
        for msg in &self.msgs {
            let send = &self.ops[msg.send_op];
            let ends_alive =
                deaths[msg.src as usize].is_none() && deaths[msg.dst as usize].is_none();
            match send.result {
                Some(Ok(_)) if engine_context(msg.context) => {} // an engine took it
                Some(Ok(_)) if ends_alive && msg.consumed.is_none() => lost.push(msg),
                Some(Err(OpError::Cancelled)) if msg.consumed.is_some() => v.push(
                    now,
                    "cancel",
                    format!(
                        "{} was received although its send was cancelled",
                        msg.describe()
                    ),
                ),
                Some(Err(OpError::Truncated { .. }))
                    if !msg.consumed.is_some_and(|c| c.truncated) =>
                {
                    v.push(
                        now,
                        "truncation",
                        format!(
                            "send of {} reported Truncated but no receive truncated it",
                            msg.describe()
                        ),
                    )
                }
                _ => {}
            }
        }
        if !lost.is_empty() {
            let list: Vec<String> = lost.iter().take(6).map(|m| m.describe()).collect();
            v.push(
                now,
                "lost-message",
                format!(
                    "{} message(s) whose send completed Ok were never received, e.g. {}",
                    lost.len(),
                    list.join("; ")
                ),
            );
        }
        // MPI non-overtaking: per (src, dst, context, tag), receives in post order got messages
        // in send order.
        let mut groups: BTreeMap<Stream, Vec<(u64, u64)>> = BTreeMap::new();
        for msg in &self.msgs {
            if let Some(c) = msg.consumed {
                groups
                    .entry((msg.src, msg.dst, msg.context, msg.tag))
                    .or_default()
                    .push((c.post_index, msg.seq));
            }
        }
        for ((src, dst, _, tag), mut list) in groups {
            list.sort_unstable();
            if let Some(w) = list.windows(2).find(|w| w[1].1 <= w[0].1) {
                v.push(
                    now,
                    "order",
                    format!(
                        "messages {src}->{dst} tag {tag} overtook each other: receive #{} got seq {} but the later receive #{} got seq {}",
                        w[0].0, w[0].1, w[1].0, w[1].1
                    ),
                );
            }
        }
    }
}

trait CandidateSet {
    fn is_none_or_contains(&self, m: MsgRef) -> bool;
}

impl CandidateSet for Option<&Vec<MsgRef>> {
    fn is_none_or_contains(&self, m: MsgRef) -> bool {
        self.is_none_or_else(|c| c.contains(&m))
    }
}

trait OptionExt<T> {
    fn is_none_or_else(&self, f: impl FnOnce(&T) -> bool) -> bool;
}

impl<T> OptionExt<T> for Option<T> {
    fn is_none_or_else(&self, f: impl FnOnce(&T) -> bool) -> bool {
        match self {
            None => true,
            Some(x) => f(x),
        }
    }
}

trait ConsumedAt {
    fn is_none_or_at(&self, now: Nanos) -> bool;
}

impl ConsumedAt for Option<Consumed> {
    fn is_none_or_at(&self, now: Nanos) -> bool {
        match self {
            None => true,
            Some(c) => c.at == now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{recv_buffer, send_buffer, Layout};
    use crate::rng::{stream, SimRng};

    struct Bench {
        ledger: Ledger,
        arenas: Vec<Arena>,
        rng: SimRng,
        v: Violations,
        next_index: u32,
        deaths: Vec<Option<Nanos>>,
    }

    impl Bench {
        fn new() -> Self {
            Self {
                ledger: Ledger::new(2),
                arenas: vec![Arena::new(0), Arena::new(1)],
                rng: SimRng::new(1, stream::LAYOUT),
                v: Violations::default(),
                next_index: 0,
                deaths: vec![None, None],
            }
        }

        fn id(&mut self, kind: OpKind) -> OpId {
            self.next_index += 1;
            OpId {
                kind,
                index: self.next_index,
                generation: 0,
            }
        }

        /// Rank 0 sends `len` bytes to rank 1 with `tag`; returns the send's id.
        fn send(&mut self, tag: Tag, len: u64) -> OpId {
            let seq = self.ledger.next_seq(0, 1);
            let buffer = send_buffer(
                &mut self.arenas[0],
                &mut self.rng,
                Layout::Contiguous,
                Pattern::message(0, 1, seq),
                len,
            );
            let id = self.id(OpKind::Send);
            let key = (Context::USER, tag);
            self.ledger.add_send(&mut self.v, 0, 0, id, 1, key, buffer);
            id
        }

        fn recv(&mut self, tag: Tag, capacity: u64) -> (OpId, Buffer) {
            let buffer = recv_buffer(
                &mut self.arenas[1],
                &mut self.rng,
                Layout::Contiguous,
                capacity,
            );
            let id = self.id(OpKind::Recv);
            self.ledger.add_recv(
                &mut self.v,
                0,
                1,
                id,
                Source::Rank(0),
                (Context::USER, TagMatch::Tag(tag)),
                buffer,
            );
            (id, buffer)
        }

        /// Completes the send of message `seq`, made by `send(5, 100)`, Ok.
        fn send_done(&mut self, (send, seq): (OpId, u64), now: Nanos) {
            let status = Status {
                peer: 1,
                tag: 5,
                len: 100,
                immediate: immediate_of(0, 1, seq),
            };
            self.complete(0, send, Ok(status), now);
        }

        /// Writes message `seq` into the receive buffer and completes the receive Ok.
        fn deliver(&mut self, recv: (OpId, Buffer), seq: u64, tag: Tag, len: u64, now: Nanos) {
            let mut bytes = vec![0u8; len as usize];
            Pattern::message(0, 1, seq).fill_into(0, &mut bytes);
            assert!(recv.1.sg.write_at(&mut self.arenas[1], 0, &bytes));
            let completion = Completion {
                op: recv.0,
                result: Ok(Status {
                    peer: 0,
                    tag,
                    len,
                    immediate: immediate_of(0, 1, seq),
                }),
            };
            self.ledger.complete(
                &mut self.v,
                &mut self.arenas[1],
                &self.deaths,
                now,
                1,
                completion,
            );
        }

        fn complete(&mut self, rank: Rank, op: OpId, result: Result<Status, OpError>, now: Nanos) {
            let completion = Completion { op, result };
            self.ledger.complete(
                &mut self.v,
                &mut self.arenas[rank as usize],
                &self.deaths,
                now,
                rank,
                completion,
            );
        }

        fn kinds(mut self) -> Vec<&'static str> {
            self.ledger.final_checks(&mut self.v, &self.deaths, 1_000);
            self.v.kept.iter().map(|v| v.kind).collect()
        }
    }

    #[test]
    fn in_order_delivery_passes() {
        let mut b = Bench::new();
        let s0 = b.send(5, 100);
        let s1 = b.send(5, 100);
        let r0 = b.recv(5, 100);
        let r1 = b.recv(5, 200);
        b.deliver(r1, 1, 5, 100, 10); // completions may come out of matching order
        b.deliver(r0, 0, 5, 100, 11);
        b.send_done((s0, 0), 12);
        b.send_done((s1, 1), 12);
        assert_eq!(b.kinds(), Vec::<&str>::new());
    }

    #[test]
    fn overtaking_is_caught() {
        let mut b = Bench::new();
        b.send(5, 100);
        b.send(5, 100);
        let r0 = b.recv(5, 100);
        let r1 = b.recv(5, 100);
        b.deliver(r0, 1, 5, 100, 10);
        b.deliver(r1, 0, 5, 100, 11);
        assert!(b.kinds().contains(&"order"));
    }

    #[test]
    fn duplicate_delivery_and_lost_message_are_caught() {
        let mut b = Bench::new();
        let s0 = b.send(5, 100);
        let s1 = b.send(5, 100);
        let r0 = b.recv(5, 100);
        let r1 = b.recv(5, 100);
        b.deliver(r0, 0, 5, 100, 10);
        b.deliver(r1, 0, 5, 100, 11);
        b.send_done((s0, 0), 12);
        b.send_done((s1, 1), 12);
        let kinds = b.kinds();
        assert!(kinds.contains(&"delivery"), "{kinds:?}");
        assert!(kinds.contains(&"lost-message"), "{kinds:?}");
    }

    #[test]
    fn corrupted_bytes_and_guard_writes_are_caught() {
        let mut b = Bench::new();
        b.send(5, 100);
        let r0 = b.recv(5, 100);
        let mut bytes = vec![0u8; 100];
        Pattern::message(0, 1, 0).fill_into(0, &mut bytes);
        bytes[50] ^= 4;
        assert!(r0.1.sg.write_at(&mut b.arenas[1], 0, &bytes));
        b.complete(
            1,
            r0.0,
            Ok(Status {
                peer: 0,
                tag: 5,
                len: 100,
                immediate: None,
            }),
            10,
        );
        assert!(b.kinds().contains(&"delivery"));

        let mut b = Bench::new();
        b.send(5, 10);
        let r0 = b.recv(5, 100);
        // Correct message, but a byte beyond it (inside the buffer) is written too.
        let mut bytes = vec![0u8; 11];
        Pattern::message(0, 1, 0).fill_into(0, &mut bytes[..10]);
        assert!(r0.1.sg.write_at(&mut b.arenas[1], 0, &bytes));
        b.complete(
            1,
            r0.0,
            Ok(Status {
                peer: 0,
                tag: 5,
                len: 10,
                immediate: None,
            }),
            10,
        );
        assert!(b.kinds().contains(&"content"));
    }

    #[test]
    fn empty_messages_and_truncations_are_settled_in_post_order() {
        let mut b = Bench::new();
        let sends = [b.send(5, 0), b.send(5, 0), b.send(6, 100), b.send(6, 100)];
        let e0 = b.recv(5, 10);
        let e1 = b.recv(5, 10);
        let t0 = b.recv(6, 50);
        let t1 = b.recv(6, 50);
        // Completions in reverse order: indistinguishable, so not an ordering violation.
        b.deliver(e1, 1, 5, 0, 10);
        b.deliver(e0, 0, 5, 0, 10);
        // Each names its own message's immediate data (messages 2 and 3, in post order).
        let truncated = |seq| {
            Err(OpError::Truncated {
                source_rank: 0,
                tag: 6,
                message_len: 100,
                buffer_len: 50,
                immediate: immediate_of(0, 1, seq),
            })
        };
        b.complete(1, t1.0, truncated(3), 11);
        b.complete(1, t0.0, truncated(2), 12);
        let shapes = [(5, 0), (5, 0), (6, 100), (6, 100)];
        for (seq, (send, (tag, len))) in sends.into_iter().zip(shapes).enumerate() {
            let immediate = immediate_of(0, 1, seq as u64);
            let status = Status {
                peer: 1,
                tag,
                len,
                immediate,
            };
            b.complete(0, send, Ok(status), 13);
        }
        assert_eq!(b.kinds(), Vec::<&str>::new());
    }

    #[test]
    fn completions_and_cancels_are_checked() {
        let mut b = Bench::new();
        let r0 = b.recv(5, 10);
        // Cancelled without an accepted cancel; then completed a second time.
        b.complete(1, r0.0, Err(OpError::Cancelled), 10);
        b.complete(1, r0.0, Err(OpError::Cancelled), 11);
        // Unreachable while alive.
        let r1 = b.recv(5, 10);
        b.complete(1, r1.0, Err(OpError::PeerUnreachable { peer: 0 }), 12);
        // Never completed.
        b.recv(7, 10);
        let kinds = b.kinds();
        for kind in ["cancel", "completion", "false-unreachable", "no-completion"] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
    }
}

//! One turn of the offload engine: take host commands from the descriptor table, feed received
//! frames and timeouts to the protocol core, transmit what it produces, and hand completions
//! back through the table. Used by the engine thread (`thread` mode) and directly by the host
//! inside test/wait (`inline` mode).

use crate::outbox::Outbox;
use crate::programs::control::{ControlSocket, CONTROL_CHECK_NS};
use crate::programs::{Post, Programs};
use crate::registry::{Registry, RegistryMemory};
use crate::table::{Descriptor, OpCode, ResultCode, Table, ANY, CANCEL_BIT};
use crate::transport::{Origin, Peeked, PlacementTarget, Received, Transport, MAX_FRAME_PIECES};
use nicmsg_proto::{
    Claim, Completion, Context, Endpoint, Nanos, OpError, OpId, OpKind, PostError, SgList, Source,
    Stats, TagMatch, Transmit,
};
use nicmsg_proto::{ExpectedFrame, LookAhead, PlacedOutcome, SendOptions};
use nicmsg_wire::FrameView;

use crate::send_copies::SendCopies;
use std::sync::Arc;

/// Host commands taken per turn: bounds the time a burst of posts keeps frames waiting.
const MAX_COMMANDS_PER_TURN: usize = 64;
/// Receive batches per turn: bounds the time receiving keeps sends and the table waiting.
const MAX_RECEIVE_BATCHES_PER_TURN: usize = 4;
/// Frames handed to the transport in one call (one sendmmsg).
pub const SEND_BATCH: usize = 64;
/// Frames predicted per receive batch (the transport's receive batch).
const PLACEMENT_BATCH: usize = 64;
/// Datagrams whose first frame is this many bytes long are worth reading the headers of ahead,
/// when nothing is predicted, to place the first frame of a message (and the frames of it
/// coalesced behind it) straight into its posted receive (`nicmsg_proto`'s `first_frame.rs`):
/// the look is a system call (about 1 us), the copy it saves costs more from about this size
/// on (a 64 KiB frame: 5 us or more). Runs of shorter frames are not looked at: placing the
/// 8 KiB frames of 64 KiB messages this way (a look and a receive of one run per message)
/// made a stream of them slower, 31.5 us a message against 27.8 (`NPopenmpi -s`, medians of
/// eight alternations), though it took the copies from 99.9 % of the bytes to 30 %.
pub const FIRST_FRAME_PEEK_MIN_BYTES: usize = 16 << 10;
/// Looks ahead in a row that find only shorter datagrams before the engine stops looking, until
/// a datagram of [`FIRST_FRAME_PEEK_MIN_BYTES`] is copied again: between two long messages come
/// a short frame or two (the END of the last, an acknowledgement), while a stream of short
/// messages has none long, and then costs a system call per batch only this many times.
const SHORT_PEEKS_BEFORE_STOPPING: u32 = 8;
/// Frames of the common small send (a reply and its acknowledgement): below this the send
/// scratch is sized for it rather than for a full batch.
const SMALL_SEND_BATCH: usize = 4;
/// Send batches per turn, for the same fairness reason.
const MAX_SEND_BATCHES_PER_TURN: usize = 8;
/// Turns in a row that may put off an expired protocol timer while datagrams wait in the
/// socket after the turn's receive. Those datagrams are most often the acknowledgements that
/// make it moot: after a computation, an inline engine finds the peer's whole message and its
/// acknowledgements queued, and reading a few batches a turn (large frames come one a
/// receive), it resent 1.7 % of the frames of a 1 MiB overlap pattern for nothing. Bounded, so
/// a flood of frames delays no timer for long; each such turn received something, so no wait
/// sleeps over the timer meanwhile.
const MAX_TIMEOUTS_PUT_OFF: u32 = 16;
/// How often the engine looks for refusals (ICMP port unreachable) the kernel may not have
/// reported (`Transport::take_refused`): one system call per 10 ms, and a dead peer found
/// within 10 ms of its host refusing a frame.
const REFUSAL_CHECK_NS: Nanos = 10_000_000;
/// Refusals handed to the protocol core per turn: a few declare a peer dead; a burst of frames
/// refused beyond this says nothing more.
const MAX_REFUSALS_PER_TURN: usize = 64;
/// The table slot recorded for operations of the engine's own programs (`crate::programs`):
/// no host slot is behind them.
const PROGRAMS_SLOT: u32 = u32::MAX - 1;

/// Engine-side counters beyond the protocol's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub turns: u64,
    pub commands: u64,
    /// Frames whose source address is not the job member the header names.
    pub spoofed_frames: u64,
    /// Frames of completed sends dropped before they left (their buffer went back to the
    /// application).
    pub orphan_frames: u64,
    pub transport_errors: u64,
    /// Speculative placement: frames predicted in receive plans, frames that arrived where
    /// predicted and were taken, and frames offered as placed that the core refused.
    pub frames_predicted: u64,
    pub frames_placed: u64,
    pub placements_refused: u64,
    /// Datagrams whose headers were read ahead of them, and those that were the first frame of
    /// a message predicted into its receive (`FIRST_FRAME_PEEK_MIN_BYTES`).
    pub datagrams_peeked: u64,
    pub first_frames_predicted: u64,
    /// Frames planned behind such a first frame, in the run the transport coalesced with it
    /// into one datagram.
    pub frames_behind_first: u64,
    /// First frames predicted that the core then refused: their payload went into a receive
    /// that does not get their message. The prediction is exact, so this stays 0 (the
    /// simulator counts anything else as a violation).
    pub first_frames_refused: u64,
    /// Datagrams on the control socket (`nicmsg pdl`) that were not requests.
    pub malformed_control: u64,
}

pub struct Driver<T: Transport> {
    endpoint: Endpoint,
    transport: T,
    table: Arc<Table>,
    registry: Arc<Registry>,
    /// Table slot and generation of each proto operation, by kind and index.
    send_slots: Box<[(u32, u32)]>,
    recv_slots: Box<[(u32, u32)]>,
    /// Proto operation of each table slot.
    slot_ops: Box<[Option<OpId>]>,
    /// Frames produced but not yet taken by the transport (back-pressure).
    unsent: Outbox,
    /// The memory lent to the core for send copies (`lend_send_copies`).
    send_copies: Option<SendCopies>,
    /// Speculative placement: frames predicted for the next receive batch, and their targets.
    placement: bool,
    expected: Box<[ExpectedFrame]>,
    targets: Box<[PlacementTarget]>,
    /// Turns in a row that put off a due timer ([`MAX_TIMEOUTS_PUT_OFF`]).
    timeouts_put_off: u32,
    /// Read the headers of the next datagram ahead when nothing is predicted, while this is
    /// not 0: looks left before stopping ([`SHORT_PEEKS_BEFORE_STOPPING`]).
    peeks_left: u32,
    peek_min_bytes: usize,
    /// When each table slot was posted, and when the watchdog last reported it.
    posted_at: Box<[Nanos]>,
    reported_at: Box<[Nanos]>,
    stats: EngineStats,
    /// Peers declared unreachable as last reported in the log.
    unreachable_reported: u64,
    /// When to look for refusals next, whatever the kernel reported.
    next_refusal_check: Nanos,
    /// PANIC's programs, if the host gave them ([`Driver::set_programs`]).
    programs: Option<Programs>,
    /// The socket `nicmsg pdl` reaches the programs through, and when to look at it next.
    control: Option<ControlSocket>,
    next_control_check: Nanos,
}

impl<T: Transport> Driver<T> {
    pub fn new(
        endpoint: Endpoint,
        transport: T,
        table: Arc<Table>,
        registry: Arc<Registry>,
    ) -> Self {
        let config = endpoint.config();
        Self {
            send_slots: vec![(u32::MAX, 0); config.max_sends].into_boxed_slice(),
            recv_slots: vec![(u32::MAX, 0); config.max_recvs].into_boxed_slice(),
            slot_ops: vec![None; table.len()].into_boxed_slice(),
            placement: true,
            expected: vec![ExpectedFrame::default(); PLACEMENT_BATCH].into_boxed_slice(),
            targets: vec![
                PlacementTarget {
                    header_len: 0,
                    dest: std::ptr::null_mut(),
                    len: 0
                };
                PLACEMENT_BATCH
            ]
            .into_boxed_slice(),
            timeouts_put_off: 0,
            peeks_left: 0,
            peek_min_bytes: FIRST_FRAME_PEEK_MIN_BYTES,
            posted_at: vec![0; table.len()].into_boxed_slice(),
            reported_at: vec![0; table.len()].into_boxed_slice(),
            unsent: Outbox::with_capacity(SEND_BATCH * MAX_SEND_BATCHES_PER_TURN),
            stats: EngineStats::default(),
            unreachable_reported: 0,
            next_refusal_check: 0,
            programs: None,
            send_copies: None,
            control: None,
            next_control_check: 0,
            endpoint,
            transport,
            table,
            registry,
        }
    }

    /// Hosts PANIC's programs in this engine: it posts their receives at its next turn.
    pub fn set_programs(&mut self, programs: Programs) {
        self.programs = Some(programs);
    }

    /// Serves `nicmsg pdl` requests from this socket (looked at every `CONTROL_CHECK_NS`).
    pub fn set_control(&mut self, control: ControlSocket) {
        self.control = Some(control);
    }

    pub fn programs(&self) -> Option<&Programs> {
        self.programs.as_ref()
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Lends the protocol core send copies (`send_copies.rs`). Before the first send.
    pub fn lend_send_copies(&mut self) {
        self.send_copies = SendCopies::lend(&self.registry, &mut self.endpoint);
    }

    /// Turns the speculative header/payload split on or off (`NICMSG_PLACEMENT`).
    pub fn set_placement(&mut self, enabled: bool) {
        self.placement = enabled;
    }

    /// Datagrams from `bytes` on have their headers read ahead ([`FIRST_FRAME_PEEK_MIN_BYTES`],
    /// the default); the simulator lowers it so its small frames take that path too.
    pub fn set_peek_min_bytes(&mut self, bytes: usize) {
        self.peek_min_bytes = bytes;
    }

    pub fn table_arc(&self) -> &Arc<Table> {
        &self.table
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, to feed it (the simulator's transport takes the network's frames).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub fn protocol_stats(&self) -> &Stats {
        self.endpoint.stats()
    }

    /// Next protocol deadline.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.endpoint.poll_timeout()
    }

    /// One bounded turn of work. Returns true if anything happened (the caller keeps spinning).
    pub fn turn(&mut self, now: Nanos) -> bool {
        self.stats.turns += 1;
        let mut busy = self.take_commands(now);
        // New sends leave before the receive poll: a reply posted by the host is on the
        // critical path of its peer, a receive poll that finds nothing is not.
        busy |= self.transmit(now);
        let received = self.receive(now);
        busy |= received.any;
        busy |= self.take_refusals(now);
        if self.timeout_is_due(now, received.drained) {
            let mut memory = RegistryMemory(&self.registry);
            self.endpoint.handle_timeout(now, &mut memory);
            busy = true;
        }
        busy |= self.transmit(now);
        busy |= self.hand_back_completions();
        if self.run_programs(now) {
            busy = true;
            self.transmit(now);
            self.hand_back_completions();
        }
        self.report_unreachable_peers();
        busy
    }

    /// True if a protocol timer expired and may run now: not while datagrams wait that may
    /// acknowledge what the timer would resend ([`MAX_TIMEOUTS_PUT_OFF`]): the turn's receive
    /// stopped early (`drained` false: a completion to hand back, its batches used up) and a
    /// look finds one. A transport that cannot look runs its timers as it always did.
    fn timeout_is_due(&mut self, now: Nanos, drained: bool) -> bool {
        if self
            .endpoint
            .poll_timeout()
            .is_none_or(|deadline| deadline > now)
        {
            self.timeouts_put_off = 0;
            return false;
        }
        let put_off = self.timeouts_put_off < MAX_TIMEOUTS_PUT_OFF
            && !drained
            && matches!(self.transport.peek(&mut [0u8; 1]), Peeked::Datagram { .. });
        if put_off {
            self.timeouts_put_off += 1;
            return false;
        }
        self.timeouts_put_off = 0;
        true
    }

    /// Lets PANIC's programs handle what they received, and posts what they asked for.
    /// Returns true if anything was done.
    fn run_programs(&mut self, now: Nanos) -> bool {
        let Some(programs) = self.programs.as_mut() else {
            return false;
        };
        if now >= self.next_control_check {
            self.next_control_check = now + CONTROL_CHECK_NS;
            if let Some(control) = self.control.as_mut() {
                let malformed =
                    control.serve(|header, payload| programs.control(header, payload, now));
                self.stats.malformed_control += malformed as u64;
            }
        }
        if !programs.has_work() {
            return false;
        }
        programs.handle_received(now);
        while let Some(post) = self.programs.as_mut().and_then(Programs::poll_post) {
            self.post_for_programs(now, post);
            // A send that completed at once freed its protocol index, which the next post may
            // reuse: hand its completion back first (as `take_commands` does).
            self.hand_back_completions();
        }
        true
    }

    fn post_for_programs(&mut self, now: Nanos, post: Post) {
        let mut memory = RegistryMemory(&self.registry);
        let posted = match post {
            Post::Recv {
                context,
                region,
                len,
            } => self.endpoint.post_recv(
                now,
                Source::Any,
                context,
                TagMatch::Any,
                &SgList::contiguous(region, 0, len),
                &mut memory,
            ),
            Post::Send {
                rank,
                context,
                tag,
                region,
                len,
            } => self.endpoint.post_send(
                now,
                rank,
                context,
                u64::from(tag),
                &SgList::contiguous(region, 0, len),
                &mut memory,
            ),
        };
        let programs = self.programs.as_mut().expect("posting for programs");
        match posted {
            Ok(op) => {
                programs.posted(op);
                let entry = (PROGRAMS_SLOT, op.generation);
                match op.kind {
                    OpKind::Send => self.send_slots[op.index as usize] = entry,
                    OpKind::Recv | OpKind::Probe => self.recv_slots[op.index as usize] = entry,
                }
            }
            Err(error) => {
                tracing::debug!(?error, "a PANIC post was refused");
                programs.post_failed();
            }
        }
    }

    /// The part of a turn a post needs at once: take the commands just posted and send what
    /// they produced (no receive poll, no timers). Inline mode runs it inside the posting call,
    /// so a message leaves when it is posted, not at the next wait: a send followed by a long
    /// computation is on the wire during the computation. Returns true if frames were sent.
    pub fn start_posted(&mut self, now: Nanos) -> bool {
        self.take_commands(now);
        let sent = self.transmit(now);
        self.hand_back_completions();
        sent
    }

    /// A poller saw an error condition on the transport: look for refusals at the next turn.
    pub fn socket_error(&mut self) {
        self.transport.note_socket_error();
    }

    /// Hands the protocol core the frames peers' hosts refused since the last look (evidence
    /// that a peer's process is gone, `Endpoint::handle_refused`).
    fn take_refusals(&mut self, now: Nanos) -> bool {
        if now >= self.next_refusal_check {
            self.next_refusal_check = now + REFUSAL_CHECK_NS;
            self.transport.note_socket_error();
        }
        if !self.transport.refusals_may_be_queued() {
            return false;
        }
        let mut ranks = [0u32; MAX_REFUSALS_PER_TURN];
        let mut count = 0;
        self.transport.take_refused(&mut |rank| {
            if count < ranks.len() {
                ranks[count] = rank;
                count += 1;
            }
        });
        let mut memory = RegistryMemory(&self.registry);
        for &rank in &ranks[..count] {
            self.endpoint.handle_refused(now, rank, &mut memory);
        }
        count > 0
    }

    fn take_commands(&mut self, now: Nanos) -> bool {
        let mut taken = 0;
        while taken < MAX_COMMANDS_PER_TURN {
            let Some(command) = self.table.pop() else {
                break;
            };
            taken += 1;
            if command & CANCEL_BIT != 0 {
                self.cancel(now, command & !CANCEL_BIT);
            } else {
                self.post(now, command);
            }
            // An operation that completed at once freed its protocol index, which the next
            // post may reuse: hand its completion back before that can happen.
            self.hand_back_completions();
        }
        self.stats.commands += taken as u64;
        taken > 0
    }

    fn post(&mut self, now: Nanos, slot: u32) {
        // SAFETY: the slot came from the ring, so the host flipped it to POSTED: ours now.
        let descriptor = unsafe { self.table.descriptor(slot) };
        let source = match (descriptor.op, descriptor.address) {
            // Open mode: a directed receive or probe names its source by address; the slot
            // bound to it (made if new: its messages may not have come yet).
            (OpCode::Recv | OpCode::Probe | OpCode::IProbe | OpCode::Claim, Some(address)) => self
                .endpoint
                .peer_for_address(now, address)
                .map(Source::Rank),
            _ if descriptor.peer == ANY => Ok(Source::Any),
            _ => Ok(Source::Rank(descriptor.peer)),
        };
        let envelope = descriptor.envelope;
        let (context, tag) = (envelope.context, envelope.tag_match());
        let mut memory = RegistryMemory(&self.registry);
        let posted = match descriptor.op {
            OpCode::Send => match descriptor.address {
                // Open mode: the peer slot bound to that address, made if new.
                Some(address) => self.endpoint.peer_for_address(now, address),
                None => Ok(descriptor.peer),
            }
            .and_then(|dst| {
                let options = SendOptions {
                    immediate: envelope.immediate,
                    confirmed: envelope.confirmed,
                    unwaited: envelope.unwaited,
                };
                self.endpoint.post_send_with(
                    now,
                    dst,
                    (context, envelope.tag),
                    options,
                    &descriptor.buffer,
                    &mut memory,
                )
            }),
            OpCode::Recv => source.and_then(|source| {
                self.endpoint
                    .post_recv(now, source, context, tag, &descriptor.buffer, &mut memory)
            }),
            OpCode::Probe => {
                source.and_then(|source| self.endpoint.post_probe(now, source, context, tag))
            }
            OpCode::IProbe | OpCode::Claim => match source {
                Ok(source) => {
                    let claiming = descriptor.op == OpCode::Claim;
                    return self.answer_probe(slot, source, (context, tag), claiming);
                }
                Err(error) => Err(error),
            },
            OpCode::RecvClaimed => {
                envelope
                    .claim
                    .ok_or(PostError::UnknownClaim)
                    .and_then(|claim| {
                        self.endpoint
                            .post_recv_claimed(now, claim, &descriptor.buffer, &mut memory)
                    })
            }
            OpCode::DiscardClaimed => return self.discard_claimed(now, slot, envelope.claim),
        };
        match posted {
            Ok(op) => {
                self.slot_ops[slot as usize] = Some(op);
                self.posted_at[slot as usize] = now;
                self.reported_at[slot as usize] = now;
                let entry = (slot, op.generation);
                match op.kind {
                    OpKind::Send => self.send_slots[op.index as usize] = entry,
                    OpKind::Recv | OpKind::Probe => self.recv_slots[op.index as usize] = entry,
                }
            }
            // SAFETY: as above.
            Err(error) => unsafe {
                self.table.complete(slot, |d| {
                    d.result = post_error_code(error);
                    if let PostError::PeerUnreachable { peer } = error {
                        d.status_peer = peer;
                    }
                })
            },
        }
    }

    /// A non-blocking probe completes in the turn that takes it: with the status of the first
    /// matching message, or `NotFound`. A matched probe (`claiming`) also takes the message and
    /// reports the claim naming it.
    fn answer_probe(
        &mut self,
        slot: u32,
        source: Source,
        (context, tag): (Context, TagMatch),
        claiming: bool,
    ) {
        let found = if claiming {
            let claimed = self.endpoint.claim(source, context, tag);
            claimed.map(|(status, claim)| (status, Some(claim)))
        } else {
            let probed = self.endpoint.iprobe(source, context, tag);
            probed.map(|status| (status, None))
        };
        let address = found.and_then(|(status, _)| self.endpoint.peer_address(status.peer));
        // SAFETY: the slot is ours (POSTED) until this hands it back.
        unsafe {
            self.table.complete(slot, |d| match found {
                Some((status, claim)) => {
                    fill_status(d, &status);
                    d.status_claim = claim;
                    d.address = address;
                }
                None => d.result = ResultCode::NotFound,
            })
        };
    }

    /// Drops a claimed message; completes in the turn that takes it.
    fn discard_claimed(&mut self, now: Nanos, slot: u32, claim: Option<Claim>) {
        let mut memory = RegistryMemory(&self.registry);
        let discarded = claim
            .ok_or(PostError::UnknownClaim)
            .and_then(|claim| self.endpoint.discard_claimed(now, claim, &mut memory));
        // SAFETY: the slot is ours (POSTED) until this hands it back.
        unsafe {
            self.table.complete(slot, |d| {
                d.result = match discarded {
                    Ok(()) => ResultCode::Success,
                    Err(error) => post_error_code(error),
                }
            })
        };
    }

    /// Hang diagnosis: of the operations pending longer than `threshold_ns`, a line for each of
    /// the `named` oldest saying what it waits for, and how many more there are. An operation
    /// is reported again once its age has doubled since its last report (`is_due_again`), so
    /// one that waits hours for a good reason costs a few lines, not one a threshold. Only
    /// those named are described: a description walks the unexpected messages, and 3,000 of
    /// them over 1,000 messages stalled the application's call 11.5 ms a look.
    pub fn watchdog(
        &mut self,
        now: Nanos,
        threshold_ns: Nanos,
        named: usize,
    ) -> (Vec<String>, usize) {
        let mut overdue = Vec::new();
        for (slot, op) in self.slot_ops.iter().enumerate() {
            let Some(op) = op else { continue };
            let age = now.saturating_sub(self.posted_at[slot]);
            let (posted, reported) = (self.posted_at[slot], self.reported_at[slot]);
            if age < threshold_ns
                || !crate::runner::is_due_again(now, (posted, reported), threshold_ns)
            {
                continue;
            }
            self.reported_at[slot] = now;
            overdue.push((age, *op));
        }
        overdue.sort_by_key(|&(age, _)| std::cmp::Reverse(age));
        let lines = overdue
            .iter()
            .take(named)
            .map(|&(age, op)| {
                let state = self
                    .endpoint
                    .describe(op)
                    .unwrap_or_else(|| "completing".into());
                format!("pending for {:.1} s: {state}", age as f64 / 1e9)
            })
            .collect();
        (lines, overdue.len().saturating_sub(named))
    }

    /// Counters of every peer, indexed by rank.
    pub fn peer_stats(&self) -> Vec<Stats> {
        (0..self.endpoint.size())
            .filter_map(|rank| self.endpoint.peer_stats(rank).copied())
            .collect()
    }

    fn cancel(&mut self, now: Nanos, slot: u32) {
        if let Some(op) = self.slot_ops.get(slot as usize).copied().flatten() {
            // Refused (already moving bytes, or finished): the operation completes normally.
            let _ = self.endpoint.cancel(now, op);
        }
    }

    fn receive(&mut self, now: Nanos) -> ReceiveTurn {
        let mut turn = ReceiveTurn {
            any: false,
            drained: false,
        };
        for _ in 0..MAX_RECEIVE_BATCHES_PER_TURN {
            let mut planned = self.plan_placements();
            // Only an application receive posted can take a first frame the engine predicts
            // (its programs' standing receives are left out): a rank that only sends looks at
            // nothing, or its acknowledgements would use up the short looks.
            if planned == 0 && self.peeks_left > 0 && self.endpoint.has_posted_receives() {
                match self.plan_first_frame() {
                    FirstFrame::NothingWaits => {
                        turn.drained = true;
                        break;
                    }
                    FirstFrame::Planned(frames) => planned = frames,
                    FirstFrame::NotPlanned => {}
                }
            }
            let (peek_min_bytes, mut large_copied) = (self.peek_min_bytes, false);
            let endpoint = &mut self.endpoint;
            let registry = &self.registry;
            let stats = &mut self.stats;
            let expected = &self.expected[..planned];
            let looks_expected =
                |slot: usize, head: &[u8], len: usize| expected[slot].describes(head, len);
            let open = endpoint.is_open();
            // Returns whether a placed frame was taken (else the transport offers it again as
            // bytes); the answer for bytes is not read.
            let mut deliver = |origin: Origin, received: Received<'_>| -> bool {
                let mut memory = RegistryMemory(registry);
                let (slot, header, len) = match received {
                    Received::Bytes(bytes) => {
                        large_copied |= bytes.len() >= peek_min_bytes;
                        deliver_bytes(endpoint, stats, now, origin, bytes, &mut memory);
                        return false;
                    }
                    Received::Placed { slot, header, len } => (slot, header, len),
                };
                let expected = &expected[slot];
                let outcome = match (open, origin.address) {
                    // Peers are added by address: the endpoint's directory checks the datagram
                    // came from the predicted peer's.
                    (true, Some(from)) => endpoint.handle_placed_frame_from(
                        now,
                        from,
                        header,
                        len,
                        expected,
                        &mut memory,
                    ),
                    (false, _) if origin.rank == Some(expected.peer) => {
                        endpoint.handle_placed_frame(now, header, len, expected, &mut memory)
                    }
                    // From elsewhere: the ordinary path counts it as spoofed.
                    _ => return false,
                };
                let taken = outcome == PlacedOutcome::Taken;
                if taken {
                    stats.frames_placed += 1;
                } else {
                    stats.placements_refused += 1;
                    stats.first_frames_refused += u64::from(expected.first);
                }
                taken
            };
            // SAFETY: the targets are parts of registered receive buffers lent to the engine,
            // for frames not yet received (so nobody reads them), one frame each (disjoint).
            let received = unsafe {
                self.transport.receive_placed(
                    &self.targets[..planned],
                    &looks_expected,
                    &mut deliver,
                )
            };
            if large_copied {
                self.peeks_left = SHORT_PEEKS_BEFORE_STOPPING;
            }
            match received {
                Ok(0) => {
                    turn.drained = true;
                    break;
                }
                Ok(_) => {
                    turn.any = true;
                    // Answer at once (ACKs, CTS): a sender waits for them, and a full turn of
                    // receive batches would delay them past its retransmission timeout.
                    self.transmit(now);
                    // A finished operation goes to the host before the next poll: the host's
                    // answer to it (a reply) is what the peer waits for.
                    if self.hand_back_completions() {
                        break;
                    }
                }
                Err(error) => {
                    self.stats.transport_errors += 1;
                    let count = self.stats.transport_errors;
                    crate::errors::log_transport_error(count, "receive", &error);
                    // Nothing more comes from this receive: timers run as usual.
                    turn.drained = true;
                    break;
                }
            }
        }
        turn
    }

    /// Asks the protocol core which frames come next and resolves where their payload goes.
    fn plan_placements(&mut self) -> usize {
        if !self.placement {
            return 0;
        }
        let predicted = self.endpoint.predict_frames(&mut self.expected);
        self.resolve_targets(predicted)
    }

    /// Resolves where the payloads of the first `predicted` expected frames go, in order, up
    /// to the first whose segment is not registered; returns how many are planned.
    fn resolve_targets(&mut self, predicted: usize) -> usize {
        let mut planned = 0;
        for index in 0..predicted {
            let expected = self.expected[index];
            let segment = expected.segment;
            let Some(dest) = self
                .registry
                .address(segment.region, segment.offset, segment.len)
            else {
                break;
            };
            self.targets[planned] = PlacementTarget {
                header_len: expected.header_len(),
                dest,
                len: segment.len as usize,
            };
            planned += 1;
        }
        self.stats.frames_predicted += planned as u64;
        planned
    }

    /// Reads the headers of the next datagram ahead of it and, if it is the first frame of a
    /// message (its RTS, or an EAGER frame) that a posted receive takes at once, plans its
    /// payload straight into that receive (`nicmsg_proto`'s `first_frame.rs`) as plan entry 0,
    /// and the frames of the same message behind it where the transport coalesced a run.
    fn plan_first_frame(&mut self) -> FirstFrame {
        if !self.placement {
            return FirstFrame::NotPlanned;
        }
        let mut head = [0u8; ExpectedFrame::MAX_HEADER_LEN];
        let (origin, frame_len, datagram_len, head_len) = match self.transport.peek(&mut head) {
            Peeked::Nothing => return FirstFrame::NothingWaits,
            Peeked::Unknown => return FirstFrame::NotPlanned,
            Peeked::Datagram {
                origin,
                frame_len,
                datagram_len,
                head_len,
            } => (origin, frame_len, datagram_len, head_len.min(head.len())),
        };
        self.stats.datagrams_peeked += 1;
        if frame_len < self.peek_min_bytes {
            // Looking ahead at short frames costs more than their copies. This one is received
            // alone: the datagram behind it (the RTS after an END) is looked at too.
            self.peeks_left -= 1;
            self.transport.receive_one_next();
            return FirstFrame::NotPlanned;
        }
        self.peeks_left = SHORT_PEEKS_BEFORE_STOPPING;
        if frame_len > self.transport.max_frame() {
            // The transport drops it (a peer's frames longer than ours): nothing may be
            // planned for it, or its payload would land in a receive it never binds.
            return FirstFrame::NotPlanned;
        }
        // A long datagram that is not such a first frame is received in a batch with those
        // behind it (a receiver behind its sender copies them all anyway); one that is, alone.
        let look = LookAhead {
            head: &head[..head_len],
            frame_len,
            datagram_len,
            from: origin.address,
        };
        let predicted = self
            .endpoint
            .predict_first_frames(&look, &mut self.expected);
        // In a job the datagram must come from the rank its header names (as for every frame).
        if predicted == 0
            || (!self.endpoint.is_open() && origin.rank != Some(self.expected[0].peer))
        {
            return FirstFrame::NotPlanned;
        }
        let planned = self.resolve_targets(predicted);
        if planned == 0 {
            return FirstFrame::NotPlanned;
        }
        self.stats.first_frames_predicted += 1;
        self.stats.frames_behind_first += planned as u64 - 1;
        self.transport.receive_one_next();
        FirstFrame::Planned(planned)
    }

    fn transmit(&mut self, now: Nanos) -> bool {
        self.bind_new_peers();
        let mut any = false;
        for _ in 0..MAX_SEND_BATCHES_PER_TURN {
            let memory = RegistryMemory(&self.registry);
            let endpoint = &mut self.endpoint;
            while self.unsent.len() < SEND_BATCH && endpoint.has_transmit() {
                let built = self
                    .unsent
                    .push_with(|transmit| endpoint.poll_transmit_into(now, &memory, transmit));
                if !built {
                    break;
                }
            }
            if self.unsent.is_empty() {
                break;
            }
            any = true;
            let taken = self.send_unsent();
            if taken == 0 {
                break;
            }
        }
        any
    }

    /// Once a send completes its buffer goes back to the application (which may reuse it at
    /// once): frames of it still waiting to leave (retransmissions) must not be read from it.
    fn forget_frames_of(&mut self, slot: u32) {
        if self.unsent.is_empty() {
            return;
        }
        // SAFETY: the slot is ours until `complete` hands it back, which happens after this.
        let regions = unsafe { self.table.descriptor(slot) }.buffer.segments();
        let mut ids = [nicmsg_proto::RegionId(0); nicmsg_proto::MAX_SEGMENTS];
        for (id, segment) in ids.iter_mut().zip(regions) {
            *id = segment.region;
        }
        self.forget_frames_in(&ids[..regions.len()]);
    }

    /// Drops the waiting frames that read any of `regions`.
    fn forget_frames_in(&mut self, regions: &[nicmsg_proto::RegionId]) {
        if self.unsent.is_empty() {
            return;
        }
        let dropped = self.unsent.retain(|transmit| {
            !transmit
                .pieces()
                .iter()
                .any(|piece| regions.contains(&piece.region))
        });
        self.stats.orphan_frames += dropped as u64;
    }

    /// Offers the waiting frames to the transport, gathered from registered memory, and
    /// removes those it took. Returns how many it took.
    fn send_unsent(&mut self) -> usize {
        if let Some(taken) = self.try_send_unsent() {
            return taken;
        }
        // A frame whose memory is no longer registered (cannot happen through the API, which
        // unregisters only completed sends, whose frames `forget_frames_of` dropped): drop it.
        let memory = RegistryMemory(&self.registry);
        let dropped = self
            .unsent
            .retain(|transmit| gather_check(transmit, &memory));
        self.stats.orphan_frames += dropped as u64;
        self.try_send_unsent().unwrap_or(0)
    }

    /// One gather pass and one send; `None` if a frame's memory is gone.
    fn try_send_unsent(&mut self) -> Option<usize> {
        if self.unsent.len() == 1 {
            self.try_send_up_to::<1>()
        } else if self.unsent.len() <= SMALL_SEND_BATCH {
            self.try_send_up_to::<SMALL_SEND_BATCH>()
        } else {
            self.try_send_up_to::<SEND_BATCH>()
        }
    }

    /// `try_send_unsent` with room for `N` frames: the scratch of slices is filled before use,
    /// which costs as much as the frames it could hold.
    fn try_send_up_to<const N: usize>(&mut self) -> Option<usize> {
        let memory = RegistryMemory(&self.registry);
        let count = self.unsent.len().min(N);
        let mut pieces: [[&[u8]; MAX_FRAME_PIECES]; N] = [[&[]; MAX_FRAME_PIECES]; N];
        let mut frames: [(u32, &[&[u8]]); N] = [(0, &[]); N];
        for ((transmit, slices), frame) in self
            .unsent
            .iter()
            .take(count)
            .zip(pieces.iter_mut())
            .zip(frames.iter_mut())
        {
            let used = gather(transmit, &memory, slices)?;
            *frame = (transmit.dst, &slices[..used]);
        }
        let taken = match self.transport.send(&frames[..count]) {
            Ok(taken) => taken.min(count),
            Err(error) => {
                self.stats.transport_errors += 1;
                let count = self.stats.transport_errors;
                crate::errors::log_transport_error(count, "send", &error);
                0
            }
        };
        self.unsent.drop_front(taken);
        Some(taken)
    }

    fn hand_back_completions(&mut self) -> bool {
        if !self.endpoint.has_completions() {
            return false;
        }
        // A host that sees a send fail with PeerUnreachable finds the rank marked unreachable
        // too, so its next send there is refused at once instead of posted to fail later.
        self.report_unreachable_peers();
        while let Some(completion) = self.endpoint.poll_completion() {
            self.complete(completion);
        }
        true
    }

    /// Open mode: tells the transport where the endpoint's newly bound peer slots are, before
    /// any frame to them leaves. A transport that cannot send to addresses refuses; the frames
    /// to such a slot are then dropped by the transport (and the peer declared unreachable).
    fn bind_new_peers(&mut self) {
        while let Some((peer, address)) = self.endpoint.poll_binding() {
            if let Err(error) = self.transport.bind_peer(peer, address) {
                self.stats.transport_errors += 1;
                let count = self.stats.transport_errors;
                crate::errors::log_transport_error(count, "bind a peer", &error);
            }
        }
    }

    /// When peers were declared unreachable since the last look: tells the host (which then
    /// refuses sends to them) and the log, once.
    fn report_unreachable_peers(&mut self) {
        let declared = self.endpoint.stats().peers_declared_unreachable;
        if declared == self.unreachable_reported {
            return;
        }
        self.unreachable_reported = declared;
        if self.endpoint.is_open() {
            // Slots are reused for other peers: the host's per-rank refusal does not apply
            // (a send to the address again starts a new conversation).
            tracing::info!(
                declared,
                "peer(s) given up on: they stopped answering or restarted"
            );
            return;
        }
        let rank = self.endpoint.rank();
        let dead: Vec<u32> = (0..self.endpoint.size())
            .filter(|&p| self.endpoint.is_peer_unreachable(p))
            .collect();
        for &peer in &dead {
            self.table.mark_unreachable(peer);
        }
        tracing::warn!(
            rank,
            ?dead,
            "peer(s) declared unreachable: they stopped answering"
        );
    }

    fn complete(&mut self, completion: Completion) {
        let op = completion.op;
        let (slot, generation) = match op.kind {
            OpKind::Send => self.send_slots[op.index as usize],
            OpKind::Recv | OpKind::Probe => self.recv_slots[op.index as usize],
        };
        assert_eq!(
            generation, op.generation,
            "completion of {op:?} maps to a reused slot"
        );
        if slot == PROGRAMS_SLOT {
            self.complete_for_programs(completion);
            return;
        }
        self.slot_ops[slot as usize] = None;
        if op.kind == OpKind::Send {
            self.forget_frames_of(slot);
        }
        // Open mode: the peer's address for the host (no address in a job).
        let peer = match completion.result {
            Ok(status) => Some(status.peer),
            Err(OpError::Truncated { source_rank, .. }) => Some(source_rank),
            Err(_) => None,
        };
        let address = peer.and_then(|peer| self.endpoint.peer_address(peer));
        // SAFETY: the slot has been ours since it was posted.
        unsafe {
            self.table.complete(slot, |d| {
                if d.address.is_none() {
                    d.address = address;
                }
                complete_descriptor(d, op, completion.result)
            })
        };
    }
}

/// Writes an operation's result into its descriptor.
fn complete_descriptor(
    d: &mut Descriptor,
    op: OpId,
    result: Result<nicmsg_proto::Status, OpError>,
) {
    match result {
        Ok(status) => fill_status(d, &status),
        Err(error @ OpError::Truncated { buffer_len, .. }) => {
            if let Some(status) = error.truncated_status() {
                fill_status(d, &status);
            }
            d.buffer_len = buffer_len;
            d.result = ResultCode::Truncated;
        }
        Err(OpError::PeerUnreachable { peer }) => {
            tracing::debug!(peer, ?op, "operation failed: peer unreachable");
            d.status_peer = peer;
            d.result = ResultCode::PeerUnreachable;
        }
        Err(OpError::Cancelled) => d.result = ResultCode::Cancelled,
    }
}

impl<T: Transport> Driver<T> {
    /// A completion of one of the programs' operations: frames of a completed send still
    /// waiting to leave are dropped before its buffer is reused, as for the host's sends.
    fn complete_for_programs(&mut self, completion: Completion) {
        let programs = self
            .programs
            .as_ref()
            .expect("programs' operations need programs");
        if let Some(region) = programs.region_of(completion.op) {
            if completion.op.kind == OpKind::Send {
                self.forget_frames_in(&[region]);
            }
        }
        let programs = self.programs.as_mut().expect("checked above");
        let taken = programs.complete(completion.op, completion.result);
        debug_assert!(taken, "{:?} is not the programs'", completion.op);
    }
}

/// What reading the next datagram's headers ahead gave (`Driver::plan_first_frame`).
enum FirstFrame {
    /// Nothing waits to be received.
    NothingWaits,
    /// Plan entry 0 is the first frame of a message, waiting, and the entries up to this
    /// many the frames behind it in the same datagram.
    Planned(usize),
    /// Receive as usual.
    NotPlanned,
}

/// What one turn's receive did.
struct ReceiveTurn {
    /// It took at least one datagram.
    any: bool,
    /// It stopped because the socket was empty (or failed), not early.
    drained: bool,
}

/// A received datagram taken the ordinary way (not placed). In a job the transport names the
/// rank whose address sent it, and the frame must claim that rank; an open endpoint's
/// directory decides who sent it from the address.
fn deliver_bytes(
    endpoint: &mut Endpoint,
    stats: &mut EngineStats,
    now: Nanos,
    origin: Origin,
    bytes: &[u8],
    memory: &mut RegistryMemory<'_>,
) {
    if endpoint.is_open() {
        match origin.address {
            Some(from) => endpoint.handle_frame_from(now, from, bytes, memory),
            None => stats.spoofed_frames += 1,
        }
        return;
    }
    let claimed = FrameView::new_checked(bytes).ok().map(|frame| frame.src());
    if origin.rank.is_none() || claimed != origin.rank {
        stats.spoofed_frames += 1;
        return;
    }
    endpoint.handle_frame(now, bytes, memory);
}

fn fill_status(descriptor: &mut Descriptor, status: &nicmsg_proto::Status) {
    descriptor.result = ResultCode::Success;
    descriptor.status_peer = status.peer;
    descriptor.status_tag = status.tag;
    descriptor.status_len = status.len;
    descriptor.status_immediate = status.immediate;
}

fn post_error_code(error: PostError) -> ResultCode {
    match error {
        PostError::InvalidRank { .. } => ResultCode::InvalidRank,
        PostError::TableFull { .. } => ResultCode::TableFull,
        PostError::BadSegment { .. }
        | PostError::TooManySegments { .. }
        | PostError::TooLong { .. } => ResultCode::BadBuffer,
        PostError::PeerUnreachable { .. } => ResultCode::PeerUnreachable,
        PostError::NotOpen => ResultCode::InvalidRank,
        PostError::UnknownClaim => ResultCode::UnknownClaim,
    }
}

/// Resolves a frame's pieces to byte slices; `None` if a piece's region is gone.
fn gather<'a>(
    transmit: &'a Transmit,
    memory: &'a RegistryMemory<'_>,
    out: &mut [&'a [u8]; MAX_FRAME_PIECES],
) -> Option<usize> {
    out[0] = transmit.headers();
    let inline = transmit.inline_payload();
    if !inline.is_empty() {
        out[1] = inline;
        return Some(2);
    }
    for (index, piece) in transmit.pieces().iter().enumerate() {
        let region = nicmsg_proto::HostMemory::region(memory, piece.region)?;
        let start = piece.offset as usize;
        out[index + 1] = region.get(start..start + piece.len as usize)?;
    }
    Some(1 + transmit.pieces().len())
}

fn gather_check(transmit: &Transmit, memory: &RegistryMemory<'_>) -> bool {
    let mut scratch = [&[][..]; MAX_FRAME_PIECES];
    gather(transmit, memory, &mut scratch).is_some()
}

//! One simulated rank's machine, in one of two modes ([`SimMode`]):
//!
//! * `engine` (the default): what a process runs, minus threads and sockets. The rank's host
//!   posts descriptors through a real [`HostTable`], and a real [`Driver`] takes them, runs the
//!   protocol core, and talks to the network through a [`SimTransport`]. The driver's own logic
//!   (slot/operation mapping, dropping frames of completed sends, placement planning, the
//!   source check, refusals, back-pressure) runs under every seeded fault. The engine hosts
//!   PANIC's programs as a process's does ([`nicmsg_engine::programs`]): their inboxes are
//!   posted at the first turn and stay posted, and `CLOCK` reads the virtual time.
//! * `core`: the simulator calls the protocol core directly. Faster, and a cancel is answered
//!   at once, so the ledger checks the core's cancel answers exactly (in `engine` mode a cancel
//!   is a request whose answer is the completion, as for an application).

use crate::memory::{Arena, Buffer};
use crate::rng::SimRng;
use crate::transport::SimTransport;
use nicmsg_engine::programs::{
    Programs, ProgramsConfig, ProgramsShared, ENGINE_REGIONS, MESSAGE_INBOXES, REQUEST_INBOXES,
};
use nicmsg_engine::{
    Driver, Envelope, HostError, HostTable, OpCode, Outcome, Posted, Registry, ResultCode, Table,
    ANY,
};
use nicmsg_proto::{
    CancelError, CancelOutcome, Claim, Completion, Context, Endpoint, Nanos, OpError, OpId, OpKind,
    PostError, Rank, SendOptions, Source, Status, Tag, TagMatch,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a rank runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SimMode {
    /// The protocol core alone.
    Core,
    /// Host table, driver and protocol core over a simulated transport.
    #[default]
    Engine,
}

impl SimMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Core => "core",
            Self::Engine => "engine",
        }
    }
}

/// The engines' own counters (engine mode), summed over ranks and runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineTotals {
    pub turns: u64,
    pub commands: u64,
    pub spoofed_frames: u64,
    pub orphan_frames: u64,
    pub transport_errors: u64,
    pub frames_predicted: u64,
    pub frames_placed: u64,
    pub placements_refused: u64,
    /// First frames of messages predicted from their headers read ahead (`first_frame.rs`).
    pub first_frames_predicted: u64,
    /// Frames behind them in a coalesced run, predicted with them.
    pub frames_behind_first: u64,
    pub first_frames_refused: u64,
    pub partial_sends: u64,
    /// Damaged copies of frames taken as duplicates (`SimTransport::note_damaged_copy`).
    pub damaged_copies_over_their_frame: u64,
}

impl EngineTotals {
    pub fn add(&mut self, other: &EngineTotals) {
        self.turns += other.turns;
        self.commands += other.commands;
        self.spoofed_frames += other.spoofed_frames;
        self.orphan_frames += other.orphan_frames;
        self.transport_errors += other.transport_errors;
        self.frames_predicted += other.frames_predicted;
        self.frames_placed += other.frames_placed;
        self.placements_refused += other.placements_refused;
        self.first_frames_predicted += other.first_frames_predicted;
        self.frames_behind_first += other.frames_behind_first;
        self.first_frames_refused += other.first_frames_refused;
        self.partial_sends += other.partial_sends;
        self.damaged_copies_over_their_frame += other.damaged_copies_over_their_frame;
    }
}

/// A third of the engines look at their socket between 20 and 100 us after a frame arrives
/// (`EngineNode::poll_lag`): long enough for a sender's frames to queue up, below the
/// shortest retransmission timeout (`rto_min_ns`, 200 us).
const MIN_POLL_LAG: Nanos = 20_000;
const POLL_LAG_SPREAD: u64 = 80_000;

/// Datagrams from this length on are looked at ahead in a third of the engines: data frames at
/// the simulator's MTUs, not control frames (48 to 80 bytes).
const PEEK_FROM_DATA_FRAMES: usize = 256;

/// Engine turns one service may take in one instant before the run is declared livelocked: a
/// turn that always finds work (a timer always due, a frame that never leaves).
const MAX_TURNS_PER_SERVICE: u64 = 1_000_000;

pub enum Node {
    Core(Box<Endpoint>),
    Engine(Box<EngineNode>),
}

/// How a rank's engine hosts programs (`ProgramsConfig::enabled` and `remote_requests`, what
/// `NICMSG_PROGRAMS` and `NICMSG_PROGRAMS_REMOTE` set in a process): both on unless a workload
/// says otherwise ([`crate::WorkloadKind::programs_setup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramsSetup {
    pub enabled: bool,
    pub remote_requests: bool,
}

impl Default for ProgramsSetup {
    fn default() -> Self {
        Self {
            enabled: true,
            remote_requests: true,
        }
    }
}

pub struct EngineNode {
    driver: Driver<SimTransport>,
    host: HostTable,
    /// What the rank's application shares with its engine's programs (display output, signals,
    /// segments).
    programs_shared: Arc<ProgramsShared>,
    size: u32,
    /// Operations posted and not yet taken back, by slot: the host's handle, and the id the
    /// ledger knows the operation by (kind, slot, posts of that slot so far).
    pending: BTreeMap<u32, (Posted, OpId)>,
    posts_per_slot: Vec<u32>,
    /// The table's completion counter when completions were last looked for.
    completions_seen: u32,
    /// How long frames wait in the socket before the engine looks, for an engine that is
    /// busy elsewhere (its rank computing, or descheduled); `None`: it looks at once. Frames
    /// then queue up behind each other, and the engine receives them in runs and batches.
    poll_lag: Option<Nanos>,
    /// When such an engine next looks at its socket.
    poll_at: Option<Nanos>,
}

/// What one service step produced.
#[derive(Default)]
pub struct Output {
    /// Frames to the network: (destination, bytes), or `None` when the frame could not be
    /// gathered from the rank's memory (core mode; a violation).
    pub frames: Vec<(Rank, Option<Vec<u8>>)>,
    pub completions: Vec<Completion>,
    /// Operations the engine refused when it took them (the core's `PostError`, reported
    /// through the descriptor's result code): the host would see an error completion.
    pub refused: Vec<(OpId, ResultCode)>,
}

impl Node {
    /// A rank's node; in engine mode its programs are set up as `programs` says, and `busy`
    /// makes its engine a busy one (`RunSpec::busy_engines`).
    pub fn new(
        mode: SimMode,
        endpoint: Endpoint,
        rng: SimRng,
        programs: ProgramsSetup,
        busy: bool,
    ) -> Self {
        match mode {
            SimMode::Core => Self::Core(Box::new(endpoint)),
            SimMode::Engine => {
                Self::Engine(Box::new(EngineNode::new(endpoint, rng, programs, busy)))
            }
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        match self {
            Self::Core(endpoint) => endpoint,
            Self::Engine(node) => node.driver.endpoint(),
        }
    }

    pub fn engine(&self) -> Option<&EngineNode> {
        match self {
            Self::Core(_) => None,
            Self::Engine(node) => Some(node),
        }
    }

    pub fn post_send(
        &mut self,
        now: Nanos,
        dst: Rank,
        (context, tag): (Context, Tag),
        options: SendOptions,
        (buffer, arena): (&Buffer, &mut Arena),
    ) -> Result<OpId, PostError> {
        match self {
            Self::Core(endpoint) => {
                endpoint.post_send_with(now, dst, (context, tag), options, &buffer.sg, arena)
            }
            Self::Engine(node) => {
                node.check_destination(dst)?;
                let envelope = Envelope {
                    immediate: options.immediate,
                    confirmed: options.confirmed,
                    unwaited: options.unwaited,
                    ..Envelope::send(context, tag)
                };
                node.post(now, OpCode::Send, dst, envelope, Some((buffer, arena)))
            }
        }
    }

    pub fn post_recv(
        &mut self,
        now: Nanos,
        source: Source,
        (context, tag): (Context, TagMatch),
        buffer: &Buffer,
        arena: &mut Arena,
    ) -> Result<OpId, PostError> {
        match self {
            Self::Core(endpoint) => {
                endpoint.post_recv(now, source, context, tag, &buffer.sg, arena)
            }
            Self::Engine(node) => {
                let peer = node.source_word(source)?;
                let envelope = Envelope::matching(context, tag);
                node.post(now, OpCode::Recv, peer, envelope, Some((buffer, arena)))
            }
        }
    }

    pub fn post_probe(
        &mut self,
        now: Nanos,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> Result<OpId, PostError> {
        match self {
            Self::Core(endpoint) => endpoint.post_probe(now, source, context, tag),
            Self::Engine(node) => {
                let peer = node.source_word(source)?;
                let envelope = Envelope::matching(context, tag);
                node.post(now, OpCode::Probe, peer, envelope, None)
            }
        }
    }

    /// Non-blocking probe. In engine mode an IPROBE descriptor, which the engine completes in
    /// the turn that takes it, as inside the API's `iprobe`.
    pub fn iprobe(
        &mut self,
        now: Nanos,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> Option<Status> {
        match self {
            Self::Core(endpoint) => endpoint.iprobe(source, context, tag),
            Self::Engine(node) => {
                let outcome = node.answer_now(now, OpCode::IProbe, source, (context, tag))?;
                Some(status_of(&outcome))
            }
        }
    }

    /// Matched probe: takes the message a receive would take now. In engine mode a CLAIM
    /// descriptor, answered in the turn that takes it, as an IPROBE.
    pub fn claim(
        &mut self,
        now: Nanos,
        source: Source,
        (context, tag): (Context, TagMatch),
    ) -> Option<(Status, Claim)> {
        match self {
            Self::Core(endpoint) => endpoint.claim(source, context, tag),
            Self::Engine(node) => {
                let outcome = node.answer_now(now, OpCode::Claim, source, (context, tag))?;
                Some((status_of(&outcome), outcome.status_claim?))
            }
        }
    }

    /// Receives a claimed message.
    pub fn post_recv_claimed(
        &mut self,
        now: Nanos,
        claim: Claim,
        (buffer, arena): (&Buffer, &mut Arena),
    ) -> Result<OpId, PostError> {
        match self {
            Self::Core(endpoint) => endpoint.post_recv_claimed(now, claim, &buffer.sg, arena),
            Self::Engine(node) => {
                let envelope = Envelope::claimed(claim);
                node.post(
                    now,
                    OpCode::RecvClaimed,
                    ANY,
                    envelope,
                    Some((buffer, arena)),
                )
            }
        }
    }

    pub fn cancel(&mut self, now: Nanos, op: OpId) -> Result<CancelOutcome, CancelError> {
        match self {
            Self::Core(endpoint) => endpoint.cancel(now, op),
            Self::Engine(node) => node.request_cancel(op),
        }
    }

    /// A frame arrives. Returns whether the rank is to be serviced now; if not, its next
    /// deadline moved (an engine that looks at its socket later).
    pub fn handle_frame(
        &mut self,
        now: Nanos,
        source: Rank,
        bytes: Vec<u8>,
        arena: &mut Arena,
    ) -> bool {
        match self {
            Self::Core(endpoint) => {
                endpoint.handle_frame(now, &bytes, arena);
                true
            }
            Self::Engine(node) => node.arrive(now, source, bytes),
        }
    }

    /// The timer returned by `next_deadline` is due (in engine mode the driver's turn, which
    /// the service runs next, handles it).
    pub fn handle_timeout(&mut self, now: Nanos, arena: &mut Arena) {
        if let Self::Core(endpoint) = self {
            endpoint.handle_timeout(now, arena);
        }
    }

    pub fn handle_refused(&mut self, now: Nanos, peer: Rank, arena: &mut Arena) {
        match self {
            Self::Core(endpoint) => endpoint.handle_refused(now, peer, arena),
            Self::Engine(node) => node.driver.transport_mut().refuse(peer),
        }
    }

    /// The rank died: frames waiting for its engine are never read. Returns how many of them
    /// were damaged on the way.
    pub fn discard_unread(&mut self) -> u64 {
        match self {
            Self::Core(_) => 0,
            Self::Engine(node) => node.driver.transport_mut().discard_unread(),
        }
    }

    pub fn next_deadline(&self) -> Option<Nanos> {
        match self {
            Self::Core(endpoint) => endpoint.poll_timeout(),
            Self::Engine(node) => node.next_deadline(),
        }
    }

    /// One step of servicing: frames to send and completions to hand to the host. Returns
    /// `Err` if the engine turned too often in one instant (livelock).
    pub fn step(&mut self, now: Nanos, arena: &Arena, out: &mut Output) -> Result<bool, String> {
        match self {
            Self::Core(endpoint) => {
                let mut progressed = false;
                while let Some(transmit) = endpoint.poll_transmit(now, arena) {
                    progressed = true;
                    let mut bytes = vec![0u8; transmit.len()];
                    let gathered = transmit.gather_into(arena, &mut bytes) == Some(bytes.len());
                    out.frames.push((transmit.dst, gathered.then_some(bytes)));
                    if out.frames.len() > 10_000_000 {
                        return Err(
                            "poll_transmit returned ten million frames in one instant".into()
                        );
                    }
                }
                while let Some(completion) = endpoint.poll_completion() {
                    progressed = true;
                    out.completions.push(completion);
                }
                Ok(progressed)
            }
            Self::Engine(node) => node.step(now, out),
        }
    }
}

impl EngineNode {
    fn new(endpoint: Endpoint, mut rng: SimRng, programs: ProgramsSetup, busy: bool) -> Self {
        let config = endpoint.config();
        // Room for every operation the core takes: the table never refuses first.
        let slots = config.max_sends + config.max_recvs;
        let size = endpoint.size();
        let mtu = config.mtu as usize;
        let table = Arc::new(Table::new(slots.max(1), size));
        // Every segment of every slot: the simulator's buffers use up to all 16.
        // And the regions the engine keeps for PANIC's buffers, as a process's registry.
        let registry = Arc::new(Registry::with_engine_regions(
            slots.max(1) * nicmsg_proto::MAX_SEGMENTS,
            ENGINE_REGIONS + nicmsg_engine::SEND_COPY_REGIONS,
        ));
        let host = HostTable::new(Arc::clone(&table), Arc::clone(&registry));
        let rank = endpoint.rank();
        // Most engines read datagrams' headers ahead when nothing is predicted (the default
        // waits for frames longer than the simulator's): every datagram, or from data frames
        // on, so that control frames are the short looks that end the looking.
        let peek_min_bytes = match rng.below(3) {
            _ if busy => Some(PEEK_FROM_DATA_FRAMES),
            0 => None,
            1 => Some(0),
            _ => Some(PEEK_FROM_DATA_FRAMES),
        };
        // Half of them see runs of frames as one datagram when they look ahead, as UDP with
        // GRO receives them, and place the frames behind a message's first one too.
        let coalesce_runs = rng.chance(0.5) || busy;
        let lags = rng.below(3) == 0 || busy;
        let poll_lag = lags.then(|| MIN_POLL_LAG + rng.below(POLL_LAG_SPREAD));
        let mut transport = SimTransport::new(mtu, rng);
        if coalesce_runs {
            transport.coalesce_runs();
        }
        let mut driver = Driver::new(endpoint, transport, table, Arc::clone(&registry));
        if let Some(bytes) = peek_min_bytes {
            driver.set_peek_min_bytes(bytes);
        }
        driver.lend_send_copies();
        let programs_shared = Arc::new(ProgramsShared::default());
        let config = ProgramsConfig {
            enabled: programs.enabled,
            remote_requests: programs.remote_requests,
            traps_on_stderr: false,
            vm: nicmsg_vm::VmConfig::new(rank, size),
        };
        driver.set_programs(Programs::new(
            config,
            Arc::clone(&programs_shared),
            registry,
        ));
        Self {
            driver,
            host,
            programs_shared,
            size,
            pending: BTreeMap::new(),
            posts_per_slot: vec![0; slots.max(1)],
            completions_seen: 0,
            poll_lag,
            poll_at: None,
        }
    }

    /// A frame arrives in the socket; returns whether the engine looks at once.
    fn arrive(&mut self, now: Nanos, source: Rank, bytes: Vec<u8>) -> bool {
        self.driver.transport_mut().arrive(source, bytes);
        let Some(lag) = self.poll_lag else {
            return true;
        };
        self.poll_at.get_or_insert(now + lag);
        false
    }

    fn next_deadline(&self) -> Option<Nanos> {
        match (self.driver.next_deadline(), self.poll_at) {
            (Some(timer), Some(poll)) => Some(timer.min(poll)),
            (timer, poll) => timer.or(poll),
        }
    }

    pub fn driver(&self) -> &Driver<SimTransport> {
        &self.driver
    }

    /// The engine's programs (always hosted in engine mode).
    pub fn programs(&self) -> &Programs {
        self.driver
            .programs()
            .expect("the simulator's engines host programs")
    }

    /// What the rank's application shares with its programs: the display log, signals.
    pub fn programs_shared(&self) -> &ProgramsShared {
        &self.programs_shared
    }

    /// Receives the engine itself keeps posted (PANIC's inboxes), which the endpoint counts
    /// among its receives: an idle engine has exactly these.
    pub fn engine_receives(&self) -> usize {
        MESSAGE_INBOXES + REQUEST_INBOXES
    }

    pub fn totals(&self) -> EngineTotals {
        let stats = self.driver.stats();
        EngineTotals {
            turns: stats.turns,
            commands: stats.commands,
            spoofed_frames: stats.spoofed_frames,
            orphan_frames: stats.orphan_frames,
            transport_errors: stats.transport_errors,
            frames_predicted: stats.frames_predicted,
            frames_placed: stats.frames_placed,
            placements_refused: stats.placements_refused,
            first_frames_predicted: stats.first_frames_predicted,
            frames_behind_first: stats.frames_behind_first,
            first_frames_refused: stats.first_frames_refused,
            partial_sends: self.driver.transport().partial_sends,
            damaged_copies_over_their_frame: self
                .driver
                .transport()
                .damaged_copies_over_their_frame,
        }
    }

    pub fn host(&self) -> &HostTable {
        &self.host
    }

    /// As the API's communicator: sends to a rank outside the job or one the engine declared
    /// unreachable are refused at once.
    fn check_destination(&self, dst: Rank) -> Result<(), PostError> {
        if dst >= self.size {
            return Err(PostError::InvalidRank {
                rank: dst,
                size: self.size,
            });
        }
        if self.host.is_unreachable(dst) {
            return Err(PostError::PeerUnreachable { peer: dst });
        }
        Ok(())
    }

    fn source_word(&self, source: Source) -> Result<u32, PostError> {
        match source {
            Source::Any => Ok(ANY),
            Source::Rank(rank) if rank >= self.size => Err(PostError::InvalidRank {
                rank,
                size: self.size,
            }),
            Source::Rank(rank) => Ok(rank),
        }
    }

    fn post(
        &mut self,
        _now: Nanos,
        op: OpCode,
        peer: u32,
        envelope: Envelope,
        buffer: Option<(&Buffer, &mut Arena)>,
    ) -> Result<OpId, PostError> {
        let ranges = buffer.map_or_else(Vec::new, |(buffer, arena)| arena.ranges(&buffer.sg));
        // SAFETY: the ranges lie in the rank's arena, whose regions are released only when the
        // ledger records the operation's completion, after the host took it back here.
        let posted =
            unsafe { self.host.post(op, peer, envelope, &ranges) }.map_err(
                |error| match error {
                    HostError::TableFull { table, limit } => PostError::TableFull { table, limit },
                    HostError::TooManySegments { count, limit } => {
                        PostError::TooManySegments { count, limit }
                    }
                },
            )?;
        let slot = posted.slot;
        self.posts_per_slot[slot as usize] += 1;
        let id = OpId {
            kind: match op {
                OpCode::Send => OpKind::Send,
                OpCode::Recv | OpCode::RecvClaimed => OpKind::Recv,
                OpCode::Probe | OpCode::IProbe | OpCode::Claim | OpCode::DiscardClaimed => {
                    OpKind::Probe
                }
            },
            index: slot,
            generation: self.posts_per_slot[slot as usize],
        };
        self.pending.insert(slot, (posted, id));
        Ok(id)
    }

    /// Posts an operation the engine answers in the turn that takes it (IPROBE, CLAIM) and
    /// takes its answer; `None` if it found nothing.
    fn answer_now(
        &mut self,
        now: Nanos,
        op: OpCode,
        source: Source,
        key: (Context, TagMatch),
    ) -> Option<Outcome> {
        let peer = self.source_word(source).ok()?;
        let id = self
            .post(now, op, peer, Envelope::matching(key.0, key.1), None)
            .ok()?;
        self.driver.start_posted(now);
        let (posted, _) = self.pending.remove(&id.index).expect("just posted");
        let outcome = match self.host.take(posted) {
            Ok(outcome) => outcome,
            Err(posted) => {
                // Not answered in the turn that took it: a defect, reported by the ledger as a
                // missing completion if it never comes.
                self.pending.insert(id.index, (posted, id));
                return None;
            }
        };
        (outcome.result == ResultCode::Success).then_some(outcome)
    }

    fn request_cancel(&mut self, op: OpId) -> Result<CancelOutcome, CancelError> {
        match self.pending.get(&op.index) {
            Some((posted, id)) if *id == op => {
                self.host.request_cancel(posted);
                Ok(CancelOutcome::Requested)
            }
            _ => Err(CancelError::UnknownOp),
        }
    }

    fn step(&mut self, now: Nanos, out: &mut Output) -> Result<bool, String> {
        // Serviced now, for whatever reason: its turns take everything waiting.
        self.poll_at = None;
        let mut progressed = false;
        let mut turns = 0u64;
        while self.driver.turn(now) {
            progressed = true;
            turns += 1;
            if turns > MAX_TURNS_PER_SERVICE {
                return Err(format!(
                    "the engine found work in {MAX_TURNS_PER_SERVICE} turns in one instant"
                ));
            }
            self.collect(out);
        }
        self.collect(out);
        Ok(progressed || !out.frames.is_empty() || !out.completions.is_empty())
    }

    /// Frames the driver sent and operations it finished (taken back, as the host would).
    fn collect(&mut self, out: &mut Output) {
        out.frames.extend(
            self.driver
                .transport_mut()
                .take_sent()
                .map(|(dst, bytes)| (dst, Some(bytes))),
        );
        let completions = self.driver.table().completion_count();
        if completions == self.completions_seen {
            return;
        }
        self.completions_seen = completions;
        let done: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, (posted, _))| self.host.is_done(posted))
            .map(|(&slot, _)| slot)
            .collect();
        for slot in done {
            let (posted, id) = self.pending.remove(&slot).expect("listed");
            let outcome = self.host.take(posted).expect("done");
            match result_of(&outcome) {
                Some(result) => out.completions.push(Completion { op: id, result }),
                None => out.refused.push((id, outcome.result)),
            }
        }
    }
}

/// The completion a finished descriptor reports, as the protocol core would have; `None` for
/// a post the core refused.
fn result_of(outcome: &Outcome) -> Option<Result<Status, OpError>> {
    let status = status_of(outcome);
    Some(match outcome.result {
        ResultCode::Success => Ok(status),
        ResultCode::Truncated => Err(OpError::Truncated {
            source_rank: outcome.status_peer,
            tag: outcome.status_tag,
            message_len: outcome.status_len,
            buffer_len: outcome.buffer_len,
            immediate: outcome.status_immediate,
        }),
        ResultCode::PeerUnreachable => Err(OpError::PeerUnreachable {
            peer: outcome.status_peer,
        }),
        ResultCode::Cancelled => Err(OpError::Cancelled),
        ResultCode::InvalidRank
        | ResultCode::TableFull
        | ResultCode::BadBuffer
        | ResultCode::NotFound
        | ResultCode::UnknownClaim => return None,
    })
}

/// The message a finished descriptor reports.
fn status_of(outcome: &Outcome) -> Status {
    Status {
        peer: outcome.status_peer,
        tag: outcome.status_tag,
        len: outcome.status_len,
        immediate: outcome.status_immediate,
    }
}

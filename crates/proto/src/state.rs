//! The protocol state of one rank (`Core`): the components it is made of, host commands, and
//! the poll/handle calls the public [`crate::Endpoint`] forwards to. Each component keeps its
//! state private behind a small API: `SendSide` (`send_side.rs`), `RecvSide` (`recv_side.rs`),
//! `Peers` (`peers.rs`), `Outputs` (`outputs.rs`), `Counters` (`counters.rs`). The protocol
//! logic orchestrates them, one concern per file, each an `impl Core` block of its own:
//! `sender.rs`, `receiver.rs`, `matching.rs`, `express.rs`, `local.rs`, `cancel.rs`,
//! `liveness.rs`, `piggyback.rs`, `emit.rs`, `placement.rs`, `diagnostics.rs`.

use crate::counters::Counters;
use crate::ops::Control;
use crate::outputs::Outputs;
use crate::peer::Peer;
use crate::peers::Peers;
use crate::recv_side::RecvSide;
use crate::send_side::SendSide;
use crate::timers::Earliest;
use crate::*;

/// Bytes of per-peer protocol state: message-id windows both ways, credit counters, the start
/// queue, the RTT estimator and liveness fields (`docs/protocol.md` lists them).
pub const PEER_STATE_BYTES: usize = core::mem::size_of::<Peer>();

/// The protocol state of one rank, behind [`crate::Endpoint`], which alone reaches it mutably
/// (and so knows when the next deadline may have changed).
pub(crate) struct Core {
    pub(crate) config: Config,
    pub(crate) job: u32,
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    /// Every rank's state and liveness (`peers.rs`).
    pub(crate) peers: Peers,
    /// Counters in total and per peer (`counters.rs`).
    pub(crate) counters: Counters,
    /// Sends, their timers and copies, and their scheduling (`send_side.rs`).
    pub(crate) sends: SendSide,
    /// Receives, probes, incoming messages, matching queues, the eager pool (`recv_side.rs`).
    pub(crate) rx: RecvSide,
    /// The sends and incoming messages a timer found due (`expire_sends`,
    /// `expire_incoming`), kept between timers so the timer path allocates nothing.
    pub(crate) due_sends: Vec<SendKey>,
    pub(crate) due_incoming: Vec<IncomingKey>,
    /// The peers a timer found due (`Peers::take_due`), kept for the same reason.
    pub(crate) due_peers: Vec<Rank>,
    /// Control frames to send and completions to hand out (`outputs.rs`).
    pub(crate) outputs: Outputs,
    /// Open mode: peers added by address (`crates/directory/src/lib.rs`, `open.rs`); `None` in
    /// a job.
    pub(crate) directory: Option<nicmsg_directory::Directory>,
}

/// Receiver-to-sender control frames, which carry the cumulative credit count in `aux`.
pub(crate) fn carries_credits(kind: nicmsg_wire::FrameKind) -> bool {
    use nicmsg_wire::FrameKind::*;
    matches!(kind, Ack | Cts | MsgAck | Credit | CancelAck)
}

/// Most messages one ACK_ALL acknowledges after its own `msg_id` (its `frame_index`: a run of
/// consecutive ids held whole, see `piggyback.rs`). Bounds the work a frame asks of its
/// receiver; a burst of eager messages is rarely longer.
pub(crate) const MAX_ACK_ALL_RUN: u32 = 63;

impl Core {
    /// Creates the endpoint of `rank` in a job of `size` ranks; `job` tags every frame so frames
    /// of another job are rejected. All tables are allocated here, none later.
    pub(crate) fn new(
        config: Config,
        job: u32,
        rank: Rank,
        size: u32,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if size == 0 || size > MAX_RANKS || rank >= size {
            return Err(ConfigError::Rank { rank, size });
        }
        let completions_limit = config.max_sends + config.max_recvs;
        Ok(Self {
            job,
            rank,
            size,
            peers: Peers::new(&config, rank, size),
            counters: Counters::new(size),
            sends: SendSide::new(config.max_sends, config.max_early_sends),
            rx: RecvSide::new(&config, size),
            due_sends: Vec::new(),
            due_incoming: Vec::new(),
            due_peers: Vec::new(),
            outputs: Outputs::new(config.max_control_queue, completions_limit),
            directory: None,
            config,
        })
    }

    pub(crate) fn rank(&self) -> Rank {
        self.rank
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn lend_send_copies(&mut self, region: RegionId, piece_len: u64, pieces: u32) {
        self.sends.lend_copies(region, piece_len, pieces);
    }

    /// Posts a send of the bytes described by `data` to `dst` with `tag` in `context`. The
    /// bytes must stay unchanged until the completion. Short messages may complete before the
    /// receive is posted (unless `options.confirmed`); a message to this rank itself completes
    /// when a receive takes it.
    pub(crate) fn post_send(
        &mut self,
        now: Nanos,
        dst: Rank,
        (context, tag): (Context, Tag),
        options: SendOptions,
        data: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        self.check_peer(dst)?;
        data.validate(memory)?;
        if dst == self.rank {
            let immediate = options.immediate;
            return self.start_local_send(now, (context, tag), immediate, data, memory);
        }
        self.start_send(now, dst, (context, tag), options, data, memory)
    }

    /// Posts a receive into `buffer` of a message in `context`; may match (and complete from)
    /// an already-buffered message.
    pub(crate) fn post_recv(
        &mut self,
        now: Nanos,
        source: Source,
        context: Context,
        tag: TagMatch,
        buffer: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        if let Source::Rank(peer) = source {
            self.check_rank(peer)?;
        }
        buffer.validate(memory)?;
        self.post_receive(now, source, (context, tag), buffer, memory)
    }

    /// Non-blocking probe: the status of the first matching message in `context` available to
    /// a receive.
    pub(crate) fn iprobe(&self, source: Source, context: Context, tag: TagMatch) -> Option<Status> {
        self.rx
            .find_unexpected(source, context, tag)
            .map(|index| self.rx.status_of(index))
    }

    /// Blocking probe as an operation: completes when a matching message is available.
    pub(crate) fn post_probe(
        &mut self,
        now: Nanos,
        source: Source,
        context: Context,
        tag: TagMatch,
    ) -> Result<OpId, PostError> {
        if let Source::Rank(peer) = source {
            self.check_rank(peer)?;
        }
        self.post_probe_op(now, source, (context, tag))
    }

    /// Cancels a pending operation (MPI's `MPI_Cancel`). A receive or probe not matched yet,
    /// or a send that has not left this rank, completes `Cancelled`. A send whose message may
    /// be with its receiver is withdrawn if no receive matched it there yet: it then completes
    /// `Cancelled`, else normally ([`CancelOutcome::Requested`]; see `cancel.rs`). Refused for
    /// a matched receive, and a send whose receiver matched it or which reported success.
    pub(crate) fn cancel(&mut self, now: Nanos, op: OpId) -> Result<CancelOutcome, CancelError> {
        match op.kind {
            OpKind::Send => self.cancel_send(now, op),
            OpKind::Recv | OpKind::Probe => self.cancel_recv(op).map(|()| CancelOutcome::Cancelled),
        }
    }

    /// Feeds one received datagram. Anything malformed is dropped and counted.
    pub(crate) fn handle_frame(
        &mut self,
        now: Nanos,
        from: Option<std::net::SocketAddr>,
        bytes: &[u8],
        memory: &mut impl HostMemory,
    ) {
        self.receive_frame(now, from, bytes, memory);
    }

    /// Runs every timer due at `now`. Memory is lent because a timeout can declare a peer
    /// unreachable, which hands its fully received messages to waiting receives.
    pub(crate) fn handle_timeout(&mut self, now: Nanos, memory: &mut impl HostMemory) {
        self.expire_sends(now);
        self.expire_incoming(now);
        // After the sends and incoming messages: what they changed of their peers counts.
        let mut due_peers = std::mem::take(&mut self.due_peers);
        self.peers.take_due(now, &mut due_peers);
        self.expire_peers(now, &due_peers, memory);
        self.expire_owed(now, &due_peers);
        self.expire_credit_waits(now, &due_peers);
        self.due_peers = due_peers;
    }

    /// Builds the next frame in place in `transmit` (whatever it held is replaced); false,
    /// leaving it unspecified, when there is none.
    pub(crate) fn poll_transmit_into(
        &mut self,
        now: Nanos,
        memory: &impl HostMemory,
        transmit: &mut Transmit,
    ) -> bool {
        self.next_transmit(now, memory, transmit)
    }

    /// True if [`poll_transmit_into`](Self::poll_transmit_into) may have a frame (a control frame or a
    /// send with frames to go).
    pub(crate) fn has_transmit(&self) -> bool {
        self.outputs.has_control() || self.sends.has_ready()
    }

    fn next_transmit(
        &mut self,
        now: Nanos,
        memory: &impl HostMemory,
        transmit: &mut Transmit,
    ) -> bool {
        if let Some(mut control) = self.outputs.pop_control() {
            let mut carriers = 1;
            if control.is_ack_all() {
                carriers += self.outputs.take_ack_all_run(&mut control, MAX_ACK_ALL_RUN);
            }
            if carries_credits(control.kind) {
                self.peers[control.dst].credit_carriers_queued -= carriers;
            }
            self.emit_control(now, control, transmit);
            return true;
        }
        self.next_data_frame(now, memory, transmit)
    }

    /// True if [`poll_completion`](Self::poll_completion) has something.
    pub(crate) fn has_completions(&self) -> bool {
        self.outputs.has_completions()
    }

    /// Next finished operation, if any.
    pub(crate) fn poll_completion(&mut self) -> Option<Completion> {
        self.outputs.pop_completion()
    }

    /// The earliest timer of any send, incoming message or peer, derived from the components
    /// (none stores it, so none can leave it stale; `timers.rs`). Their walks are plain loops:
    /// chained and flattened iterators cost three times as many instructions, and this runs
    /// after every state change.
    pub(crate) fn compute_deadline(&self) -> Option<Nanos> {
        let mut earliest = Earliest::default();
        earliest.consider(self.sends.next_deadline());
        earliest.consider(self.rx.next_deadline());
        earliest.consider(self.peers.next_deadline());
        earliest.get()
    }

    pub(crate) fn stats(&self) -> &Stats {
        self.counters.total()
    }

    pub(crate) fn peer_stats(&self, peer: Rank) -> Option<&Stats> {
        self.counters.peer(peer)
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage {
            sends: self.sends.usage(),
            recvs: self.rx.recv_usage(),
            incoming: self.rx.incoming_usage(),
            eager_buffers: self.rx.eager_usage(),
            control_queue: self.outputs.control_usage(),
            completions: self.outputs.completion_usage(),
        }
    }

    /// True when the peer has been declared unreachable.
    pub(crate) fn is_peer_unreachable(&self, peer: Rank) -> bool {
        self.peers.is_unreachable(peer)
    }

    // --- shared helpers ---

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<(), PostError> {
        if rank >= self.size {
            return Err(PostError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    fn check_peer(&self, rank: Rank) -> Result<(), PostError> {
        self.check_rank(rank)?;
        let unbound = self
            .directory
            .as_ref()
            .is_some_and(|d| rank != self.rank && !d.is_active(rank));
        if self.peers[rank].unreachable || unbound {
            return Err(PostError::PeerUnreachable { peer: rank });
        }
        Ok(())
    }

    pub(crate) fn complete(&mut self, op: OpId, result: Result<Status, OpError>) {
        self.outputs.complete(op, result);
    }

    /// Queues a control frame; when the queue is full the frame is dropped and counted (every
    /// control frame is recovered by a retransmission of whatever provoked it).
    pub(crate) fn queue_control(&mut self, control: Control) {
        if !self.outputs.has_control_room() {
            self.counters.record_total(|s| s.control_overflows += 1);
            return;
        }
        if carries_credits(control.kind) {
            self.peers[control.dst].credit_carriers_queued += 1;
        }
        self.outputs.push_control(control);
    }

    pub(crate) fn count_drop(&mut self, peer: Option<Rank>, reason: DropReason) {
        self.counters.drop_frame(peer, reason);
    }
}

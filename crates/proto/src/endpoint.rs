//! The public face of the protocol core: [`Endpoint`]. It owns the state ([`Core`], private)
//! and is the only way to reach it mutably, so it always knows when the next deadline may
//! have changed: the answer of [`Endpoint::poll_timeout`] is cached between changes and cannot
//! go stale (every `&mut` entry point passes through one function that forgets it).

use crate::state::Core;
use crate::timers::DeadlineCache;
use crate::*;

/// The protocol state machine of one rank. A driver calls, in a loop (see the crate
/// documentation):
///
/// 1. host commands: [`post_send`](Self::post_send), [`post_recv`](Self::post_recv),
///    [`post_probe`](Self::post_probe), [`iprobe`](Self::iprobe), [`cancel`](Self::cancel);
/// 2. inputs: [`handle_frame`](Self::handle_frame) for every received datagram (or
///    [`handle_placed_frame`](Self::handle_placed_frame) for one a transport placed),
///    [`handle_refused`](Self::handle_refused) for a frame a peer's host refused, and
///    [`handle_timeout`](Self::handle_timeout) once [`poll_timeout`](Self::poll_timeout)
///    passes;
/// 3. outputs: [`poll_transmit`](Self::poll_transmit) (or
///    [`poll_transmit_into`](Self::poll_transmit_into)) until it has nothing, then
///    [`poll_completion`](Self::poll_completion) until it has nothing;
/// 4. sleep until the next datagram or [`poll_timeout`](Self::poll_timeout).
pub struct Endpoint {
    core: Core,
    /// `poll_timeout`'s answer, computed once after each change: a driver asks for it on every
    /// turn, and computing it walks the tables.
    deadline: DeadlineCache,
}

impl Endpoint {
    /// Creates the endpoint of `rank` in a job of `size` ranks; `job` tags every frame so frames
    /// of another job are rejected. All tables are allocated here, none later.
    pub fn new(config: Config, job: u32, rank: Rank, size: u32) -> Result<Self, ConfigError> {
        Ok(Self {
            core: Core::new(config, job, rank, size)?,
            deadline: DeadlineCache::default(),
        })
    }

    /// An *open* endpoint: no job of ranks, but up to `capacity` peers added by address as
    /// they are sent to ([`peer_for_address`](Self::peer_for_address)) or heard from
    /// ([`handle_frame_from`](Self::handle_frame_from)), each a rank (slot) from 1; this
    /// endpoint is rank 0. `incarnation` (nonzero, random) makes the names of this endpoint's
    /// conversations its own, so a restarted peer is told from the one before
    /// (`crates/directory/src/lib.rs`). `job` tags every frame, as in a job: open endpoints of
    /// one service share it.
    pub fn new_open(
        config: Config,
        job: u32,
        incarnation: u32,
        capacity: u32,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            core: Core::new_open(config, job, incarnation, capacity)?,
            deadline: DeadlineCache::default(),
        })
    }

    /// True for an endpoint whose peers are added by address.
    pub fn is_open(&self) -> bool {
        self.core.directory.is_some()
    }

    /// Open mode: this endpoint's own address (sends to it stay local).
    pub fn set_own_address(&mut self, address: std::net::SocketAddr) {
        if let Some(directory) = self.changing().directory.as_mut() {
            directory.set_own_address(address);
        }
    }

    /// Frames to `peer` cover their payload in their checksum: the peer receives through a
    /// link that checks nothing (AF_XDP), so it takes no frame that leaves its payload to the
    /// link. Only matters where this endpoint's own link checks payloads
    /// (`Config::link_checks_payload`); a job learns it from the address exchange.
    pub fn cover_payloads_to(&mut self, peer: Rank) {
        if peer < self.core.size() {
            self.changing().peers[peer].link_unchecked = true;
        }
    }

    /// Open mode: the rank to send to `address` through, made if new (an error when every
    /// slot is in use, or in a job).
    pub fn peer_for_address(
        &mut self,
        now: Nanos,
        address: std::net::SocketAddr,
    ) -> Result<Rank, PostError> {
        self.changing().peer_for_address(now, address)
    }

    /// Open mode: the address this endpoint is bound to, once told (`set_own_address`).
    pub fn own_address(&self) -> Option<std::net::SocketAddr> {
        self.core.directory.as_ref().and_then(|d| d.own_address())
    }

    /// Open mode: the address the slot `peer` is bound to.
    pub fn peer_address(&self, peer: Rank) -> Option<std::net::SocketAddr> {
        self.core.directory.as_ref().and_then(|d| d.address(peer))
    }

    /// Open mode: the next slot bound to a new address since the last call, for the transport
    /// to send that slot's frames to.
    pub fn poll_binding(&mut self) -> Option<(Rank, std::net::SocketAddr)> {
        self.core.directory.as_mut().and_then(|d| d.poll_binding())
    }

    /// The state, to change: the cached deadline is forgotten. Every `&mut` entry point goes
    /// through here.
    fn changing(&mut self) -> &mut Core {
        self.deadline.forget();
        &mut self.core
    }

    pub fn rank(&self) -> Rank {
        self.core.rank()
    }

    /// The job's id: frames of other jobs are dropped.
    pub fn job(&self) -> u32 {
        self.core.job
    }

    pub fn size(&self) -> u32 {
        self.core.size()
    }

    pub fn config(&self) -> &Config {
        self.core.config()
    }

    // --- 1. host commands ---

    /// Lends the core `pieces` pieces of `piece_len` bytes from the start of host region
    /// `region` (at most [`crate::MAX_LENT_COPIES`]) for copies of eager messages longer than
    /// [`crate::LENT_COPY_ABOVE`]: such a send then completes as soon as it starts, and its
    /// frames read the copy (`lent_copies.rs`). The region must stay registered, and written
    /// by nobody else, for the endpoint's life. Before the first send.
    pub fn lend_send_copies(&mut self, region: RegionId, piece_len: u64, pieces: u32) {
        self.core.lend_send_copies(region, piece_len, pieces);
    }

    /// Posts a send of the bytes described by `data` to `dst` with `tag` in `context`. The
    /// bytes must stay unchanged until the completion. Short messages, and longer eager ones
    /// copied into lent send copies, may complete before the receive is posted; a message to
    /// this rank itself completes when a receive takes it.
    #[must_use = "a refused post sends nothing"]
    pub fn post_send(
        &mut self,
        now: Nanos,
        dst: Rank,
        context: Context,
        tag: Tag,
        data: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        self.changing().post_send(
            now,
            dst,
            (context, tag),
            SendOptions::default(),
            data,
            memory,
        )
    }

    /// [`post_send`](Self::post_send) with [`SendOptions`]: immediate data, and whether the
    /// send may complete from the core's copy before the receiver holds the message.
    #[must_use = "a refused post sends nothing"]
    pub fn post_send_with(
        &mut self,
        now: Nanos,
        dst: Rank,
        (context, tag): (Context, Tag),
        options: SendOptions,
        data: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        self.changing()
            .post_send(now, dst, (context, tag), options, data, memory)
    }

    /// Posts a receive into `buffer` of a message in `context`; may match (and complete from)
    /// an already-buffered message. A receive naming a peer given up on, or (open mode) a slot
    /// not bound to an address, is refused with `PeerUnreachable` unless a message of it is
    /// already here.
    #[must_use = "a refused post receives nothing"]
    pub fn post_recv(
        &mut self,
        now: Nanos,
        source: Source,
        context: Context,
        tag: TagMatch,
        buffer: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        self.changing()
            .post_recv(now, source, context, tag, buffer, memory)
    }

    /// Non-blocking probe: the status of the first matching message in `context` available to
    /// a receive.
    pub fn iprobe(&self, source: Source, context: Context, tag: TagMatch) -> Option<Status> {
        self.core.iprobe(source, context, tag)
    }

    /// Matched probe (MPI's `MPI_Improbe`, libfabric's `FI_PEEK | FI_CLAIM`): takes the first
    /// message in `context` a receive would take now, so that only a receive naming the
    /// returned claim gets it ([`post_recv_claimed`](Self::post_recv_claimed)); `None` if no
    /// such message is here. See `claim.rs`.
    pub fn claim(
        &mut self,
        source: Source,
        context: Context,
        tag: TagMatch,
    ) -> Option<(Status, Claim)> {
        self.changing().claim(source, context, tag)
    }

    /// Receives a claimed message (MPI's `MPI_Mrecv`) into `buffer`; completes as a receive.
    /// `UnknownClaim` if the claim names no claimed message.
    #[must_use = "a refused post receives nothing"]
    pub fn post_recv_claimed(
        &mut self,
        now: Nanos,
        claim: Claim,
        buffer: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        self.changing()
            .post_recv_claimed(now, claim, buffer, memory)
    }

    /// Drops a claimed message unread (`FI_CLAIM | FI_DISCARD`); its sender completes
    /// normally. `UnknownClaim` if the claim names no claimed message.
    pub fn discard_claimed(
        &mut self,
        now: Nanos,
        claim: Claim,
        memory: &mut impl HostMemory,
    ) -> Result<(), PostError> {
        self.changing().discard_claimed(now, claim, memory)
    }

    /// Blocking probe as an operation: completes when a matching message is available.
    #[must_use = "a refused post probes nothing"]
    pub fn post_probe(
        &mut self,
        now: Nanos,
        source: Source,
        context: Context,
        tag: TagMatch,
    ) -> Result<OpId, PostError> {
        self.changing().post_probe(now, source, context, tag)
    }

    /// Cancels a pending operation (MPI's `MPI_Cancel`). A receive or probe not matched yet,
    /// or a send that has not left this rank, completes `Cancelled`. A send whose message may
    /// be with its receiver is withdrawn if no receive matched it there yet: it then completes
    /// `Cancelled`, else normally ([`CancelOutcome::Requested`]; see `cancel.rs`). Refused for
    /// a matched receive, and a send whose receiver matched it or which reported success.
    pub fn cancel(&mut self, now: Nanos, op: OpId) -> Result<CancelOutcome, CancelError> {
        self.changing().cancel(now, op)
    }

    // --- 2. inputs ---

    /// Feeds one received datagram. Anything malformed is dropped and counted.
    pub fn handle_frame(&mut self, now: Nanos, bytes: &[u8], memory: &mut impl HostMemory) {
        self.changing().handle_frame(now, None, bytes, memory);
    }

    /// A datagram from the socket address `from`: in open mode, how frames reach the endpoint
    /// (the address decides the peer); in a job, the same as [`handle_frame`](Self::handle_frame).
    pub fn handle_frame_from(
        &mut self,
        now: Nanos,
        from: std::net::SocketAddr,
        bytes: &[u8],
        memory: &mut impl HostMemory,
    ) {
        self.changing().handle_frame(now, Some(from), bytes, memory);
    }

    /// A frame the transport placed at a predicted place ([`predict_frames`](Self::predict_frames)):
    /// its header is `header`, its payload already lies where `expected` says. See
    /// `placement.rs`.
    pub fn handle_placed_frame(
        &mut self,
        now: Nanos,
        header: &[u8],
        datagram_len: usize,
        expected: &ExpectedFrame,
        memory: &mut impl HostMemory,
    ) -> PlacedOutcome {
        self.changing()
            .handle_placed_frame(now, None, header, datagram_len, expected, memory)
    }

    /// [`handle_placed_frame`](Self::handle_placed_frame) on an open endpoint: `from` is the
    /// address the datagram came from, which must be the predicted peer's.
    pub fn handle_placed_frame_from(
        &mut self,
        now: Nanos,
        from: std::net::SocketAddr,
        header: &[u8],
        datagram_len: usize,
        expected: &ExpectedFrame,
        memory: &mut impl HostMemory,
    ) -> PlacedOutcome {
        self.changing()
            .handle_placed_frame(now, Some(from), header, datagram_len, expected, memory)
    }

    /// The transport learned that `peer`'s host refused a frame to it (ICMP port unreachable):
    /// evidence that its process is gone (`liveness.rs`).
    pub fn handle_refused(&mut self, now: Nanos, peer: Rank, memory: &mut impl HostMemory) {
        self.changing().handle_refused(now, peer, memory);
    }

    /// Runs every timer due at `now`. Memory is lent because a timeout can declare a peer
    /// unreachable, which hands its fully received messages to waiting receives.
    pub fn handle_timeout(&mut self, now: Nanos, memory: &mut impl HostMemory) {
        self.changing().handle_timeout(now, memory);
    }

    // --- 3. outputs ---

    /// Next frame to send, if any: control frames first, then data frames round-robin.
    pub fn poll_transmit(&mut self, now: Nanos, memory: &impl HostMemory) -> Option<Transmit> {
        let mut transmit = Transmit::new(0);
        self.poll_transmit_into(now, memory, &mut transmit)
            .then_some(transmit)
    }

    /// [`poll_transmit`](Self::poll_transmit) building the frame in place in `transmit`
    /// (whatever it held is replaced); false, leaving it unspecified, when there is none.
    pub fn poll_transmit_into(
        &mut self,
        now: Nanos,
        memory: &impl HostMemory,
        transmit: &mut Transmit,
    ) -> bool {
        // Timers are armed by frames going out; an idle poll (every turn of a spinning engine)
        // must not throw the cached deadline away.
        if !self.core.has_transmit() {
            return false;
        }
        self.changing().poll_transmit_into(now, memory, transmit)
    }

    /// True if [`poll_transmit`](Self::poll_transmit) may have a frame (a control frame or a
    /// send with frames to go).
    pub fn has_transmit(&self) -> bool {
        self.core.has_transmit()
    }

    /// True if [`poll_completion`](Self::poll_completion) has something.
    pub fn has_completions(&self) -> bool {
        self.core.has_completions()
    }

    /// Next finished operation, if any. Taking it changes no timer.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.core.poll_completion()
    }

    /// When `handle_timeout` must next be called, if any timer runs.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.deadline
            .get_or_compute(|| self.core.compute_deadline())
    }

    /// Which frames are likely next and where their payload belongs (`placement.rs`).
    pub fn predict_frames(&self, out: &mut [ExpectedFrame]) -> usize {
        self.core.predict_frames(out)
    }

    /// True if the application has a receive posted that no message matched yet: only then
    /// can the first frame of a message be predicted ([`predict_first_frame`](Self::predict_first_frame)).
    pub fn has_posted_receives(&self) -> bool {
        self.core.rx.has_application_posted()
    }

    /// Where the payload of the next datagram goes, read from its first bytes `head` before it
    /// is received (`frame_len`: the length of its first frame, the whole datagram unless the
    /// transport coalesced a run; `from`: its source address), if it is the first frame of a
    /// new message (an RTS or EAGER frame) that a posted receive takes at once
    /// (`first_frame.rs`). Offer it placed there like a predicted frame.
    pub fn predict_first_frame(
        &self,
        head: &[u8],
        frame_len: usize,
        from: Option<std::net::SocketAddr>,
    ) -> Option<ExpectedFrame> {
        self.core.predict_first_frame(head, frame_len, from)
    }

    /// Where the payload of the whole datagram `bytes` from `from` goes, if the endpoint
    /// expects it: one of the frames it predicts ([`predict_frames`](Self::predict_frames),
    /// into `expected`, whose length bounds how many are asked), else the first frame of a
    /// message a posted receive takes at once ([`predict_first_frame`](Self::predict_first_frame)).
    /// For a caller that holds each datagram before it offers it placed (the simulator, the
    /// fuzz target); the engine predicts before the datagrams come, in batches.
    pub fn predicted_place(
        &self,
        bytes: &[u8],
        from: Option<std::net::SocketAddr>,
        expected: &mut [ExpectedFrame],
    ) -> Option<ExpectedFrame> {
        let count = self.predict_frames(expected);
        assert!(
            count <= expected.len(),
            "more frames predicted than asked for"
        );
        let predicted = expected[..count]
            .iter()
            .copied()
            .find(|frame| frame.describes(bytes, bytes.len()));
        predicted.or_else(|| {
            let head = &bytes[..bytes.len().min(ExpectedFrame::MAX_HEADER_LEN)];
            self.predict_first_frame(head, bytes.len(), from)
        })
    }

    /// Fills `out` with where the frames of the datagram a look ahead saw go, before it is
    /// received: its first frame, as [`predict_first_frame`](Self::predict_first_frame) says,
    /// then the frames of the same message behind it where the transport coalesced a run of
    /// frames into one datagram (`first_frame.rs`). Returns how many; offer each placed.
    pub fn predict_first_frames(&self, look: &LookAhead<'_>, out: &mut [ExpectedFrame]) -> usize {
        self.core.predict_first_frames(look, out)
    }

    // --- observation ---

    pub fn stats(&self) -> &Stats {
        self.core.stats()
    }

    pub fn peer_stats(&self, peer: Rank) -> Option<&Stats> {
        self.core.peer_stats(peer)
    }

    /// Each table's occupancy, peak and limit.
    pub fn usage(&self) -> Usage {
        self.core.usage()
    }

    /// Credits of every class not settled with live peers (spent and not returned, or
    /// returned and not yet told): zero once an exchange that lost no frame has gone quiet.
    pub fn credits_unsettled(&self) -> u64 {
        self.core.credits_unsettled()
    }

    /// True when the peer has been declared unreachable.
    pub fn is_peer_unreachable(&self, peer: Rank) -> bool {
        self.core.is_peer_unreachable(peer)
    }

    /// What a pending operation waits for, or `None` if it is not pending (hang diagnosis).
    pub fn describe(&self, op: OpId) -> Option<String> {
        self.core.describe(op)
    }
}

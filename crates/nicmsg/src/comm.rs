//! The communicator: one rank's handle on the job. Operations are descriptors in the engine's
//! table; buffers are registered for the time they are lent.

use crate::backend::Backend;
use crate::options::{EngineMode, Options};
use crate::request::Request;
use crate::{Error, Status, MAX_TAG};
use nicmsg_engine::programs::control::{self, ControlSocket};
use nicmsg_engine::programs::{Programs, ProgramsConfig, ProgramsShared};
use nicmsg_engine::{
    Driver, Envelope, HostError, HostTable, InlineEngine, OpCode, Outcome, Posted, Registry,
    Snapshot, Table, ThreadEngine, ANY,
};
use nicmsg_proto::{Context, Endpoint, MAX_SEGMENTS};

/// How long a host waiting for a program's flag sleeps between looks, once past its spin: a
/// flag is set by an engine turn, and a nap of this length costs no core.
const PROGRAM_WAIT_NAP_US: u64 = 20;
use nicmsg_udp::{UdpOptions, UdpTransport};
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// Which sender a receive or probe accepts.
pub use nicmsg_proto::Source;

/// Which tag a receive or probe accepts (tags are at most [`MAX_TAG`](crate::MAX_TAG)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagMatch {
    Tag(u32),
    Any,
}

impl From<TagMatch> for nicmsg_proto::TagMatch {
    fn from(tag: TagMatch) -> Self {
        match tag {
            TagMatch::Tag(tag) => Self::Tag(u64::from(tag)),
            TagMatch::Any => Self::Any,
        }
    }
}

enum Engine {
    /// Progress inside the application's calls, and a standby thread while it is away.
    Inline(InlineEngine<Backend>),
    Thread(ThreadEngine<Backend>),
}

/// One rank's communicator. Not shareable between threads (one host thread drives the
/// descriptor table, as in EMP), but it may be moved to another thread.
pub struct Comm {
    rank: u32,
    size: u32,
    options: Options,
    /// The engine's table, for the host's polls of a slot's state (without borrowing `host`).
    table: Arc<Table>,
    /// The host half of the table protocol: free slots and regions, posting, taking back.
    host: RefCell<HostTable>,
    engine: RefCell<Engine>,
    barrier_epoch: Cell<u32>,
    /// When the inline engine's watchdog last looked (engine clock), for hosts that poll
    /// instead of waiting (the libfabric provider under MPI: `fi_cq_read` in a loop).
    last_watchdog: Cell<u64>,
    /// PANIC: shared with the engine's programs.
    programs_shared: Arc<ProgramsShared>,
    program_requests: Cell<u32>,
    transport_name: &'static str,
    /// Open mode: the bound address.
    local_address: Option<SocketAddr>,
    _single_host_thread: PhantomData<Cell<()>>,
}

impl Comm {
    /// Joins the job described by the environment (`nicmsg run`, mpirun, srun, or
    /// `NICMSG_RANK`/`NICMSG_SIZE`/`NICMSG_BOOTSTRAP`), with options from `NICMSG_*`. Under a
    /// PMIx launcher (`mpirun`, `srun --mpi=pmix`) without `NICMSG_BOOTSTRAP`, the addresses
    /// are exchanged through PMIx (`nicmsg_bootstrap::Bootstrap`).
    pub fn init() -> Result<Self, Error> {
        Self::init_with(Options::from_env()?)
    }

    pub fn init_with(mut options: Options) -> Result<Self, Error> {
        crate::logging::init();
        // Under a PMIx launcher through PMIx, else through rank 0's TCP service.
        let mut bootstrap = nicmsg_bootstrap::Bootstrap::from_env(options.bootstrap_timeout)?;
        let job = bootstrap.job().clone();
        if options.eager_limit_auto {
            let credits = options.protocol.eager_credits_per_peer;
            options.protocol.eager_limit = crate::options::eager_limit_for(job.size, credits);
        }
        let protocol = &mut options.protocol;
        protocol.small_credits_per_peer =
            crate::options::small_credits_for(job.size, protocol.small_credits_per_peer);
        protocol.medium_credits_per_peer =
            crate::options::medium_credits_for(job.size, protocol.medium_credits_per_peer);
        options.check_for_job(job.size)?;
        options.size_protocol_tables();
        let bind_ip = bootstrap
            .bind_ip()?
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let udp = UdpTransport::bind(udp_options(&options, SocketAddr::new(bind_ip, 0)))
            .map_err(|error| bind_failed(error, bind_ip, job.bind_ip.is_some()))?;
        let opened = crate::backend::open(udp, options.transport)?;
        let me = opened.address();
        let peers = bootstrap.exchange_addresses(me)?;
        let backend = crate::backend::connect(opened, &peers, job.rank, options.transport)?;
        tracing::info!(
            rank = job.rank,
            size = job.size,
            address = %me.data,
            transport = backend.name(),
            frame = options.protocol.mtu,
            "joined the job"
        );
        let mut endpoint = Endpoint::new(
            options.protocol_for(backend.as_ref()),
            job.job,
            job.rank,
            job.size,
        )
        .map_err(|e| Error::Config(e.to_string()))?;
        for (rank, peer) in peers.iter().enumerate() {
            if !peer.checks_payload {
                endpoint.cover_payloads_to(rank as u32);
            }
        }
        Self::start(options, endpoint, backend)
    }

    /// An *open* communicator at `bind`: no job, peers added by address as they are sent to or
    /// heard from, up to `capacity` at once (the datagram socket, `crate::dgram`, stands on
    /// it). Rank 0 is this endpoint; every peer is a slot rank whose address a completion
    /// reports. Over UDP (the AF_XDP transport needs each peer's Ethernet address, which a
    /// peer known only by its IP address does not give). PANIC's programs are off.
    pub(crate) fn open(
        mut options: Options,
        bind: SocketAddr,
        capacity: u32,
    ) -> Result<Self, Error> {
        crate::logging::init();
        // Every open endpoint of a service must agree on the eager limit (a receiver refuses
        // larger eager messages), whatever its capacity: the protocol's default, not one
        // sized for a job.
        if options.eager_limit_auto {
            options.protocol.eager_limit = nicmsg_proto::Config::default().eager_limit;
        }
        options.size_frames_for(bind);
        options.check_for_job(capacity + 1)?;
        options.size_protocol_tables();
        options.programs = false;
        let udp = UdpTransport::bind(udp_options(&options, bind))?;
        let local = udp.local_addr();
        let mut endpoint = Endpoint::new_open(
            options.protocol_for(&udp),
            OPEN_JOB,
            nicmsg_engine::incarnation::fresh(local),
            capacity,
        )
        .map_err(|e| Error::Config(e.to_string()))?;
        endpoint.set_own_address(local);
        tracing::info!(address = %local, capacity, frame = options.protocol.mtu, "open endpoint bound");
        let mut comm = Self::start(options, endpoint, Box::new(udp))?;
        comm.local_address = Some(local);
        Ok(comm)
    }

    /// Open mode: the address this endpoint is bound to.
    pub(crate) fn local_address(&self) -> Option<SocketAddr> {
        self.local_address
    }

    /// Open mode: starts sending the concatenation of `pieces` to the endpoint at `address`.
    pub(crate) fn isend_to_address<'a>(
        &'a self,
        pieces: &[&'a [u8]],
        address: SocketAddr,
        tag: u32,
    ) -> Result<Request<'a>, Error> {
        let envelope = Envelope::send(Context::USER, u64::from(tag));
        self.isend_enveloped(pieces, address, envelope)
    }

    /// Open mode: starts sending `pieces` to `address` with a full envelope (the tagged
    /// interface's 64-bit tags, contexts and immediate data).
    pub(crate) fn isend_enveloped<'a>(
        &'a self,
        pieces: &[&'a [u8]],
        address: SocketAddr,
        envelope: Envelope,
    ) -> Result<Request<'a>, Error> {
        let ranges = ranges(pieces.iter().map(|p| (p.as_ptr() as *mut u8, p.len())))?;
        self.post_to(
            OpCode::Send,
            (0, Some(address)),
            envelope,
            ranges.as_slice(),
        )
    }

    /// Open mode: starts a receive into `pieces` of a message `envelope` accepts, from the
    /// endpoint at `from` or from anyone.
    pub(crate) fn irecv_enveloped<'a>(
        &'a self,
        pieces: impl IntoIterator<Item = &'a mut [u8]>,
        from: Option<SocketAddr>,
        envelope: Envelope,
    ) -> Result<Request<'a>, Error> {
        self.post_receive(OpCode::Recv, pieces, from, envelope)
    }

    /// Open mode: starts the receive of the claimed message `claim` names into `pieces`.
    pub(crate) fn irecv_claimed<'a>(
        &'a self,
        pieces: impl IntoIterator<Item = &'a mut [u8]>,
        claim: nicmsg_proto::Claim,
    ) -> Result<Request<'a>, Error> {
        self.post_receive(OpCode::RecvClaimed, pieces, None, Envelope::claimed(claim))
    }

    /// Posts a receive operation (`Recv`, `RecvClaimed`) into `pieces`.
    fn post_receive<'a>(
        &'a self,
        op: OpCode,
        pieces: impl IntoIterator<Item = &'a mut [u8]>,
        from: Option<SocketAddr>,
        envelope: Envelope,
    ) -> Result<Request<'a>, Error> {
        let ranges = ranges(pieces.into_iter().map(|p| (p.as_mut_ptr(), p.len())))?;
        self.post_to(op, (ANY, from), envelope, ranges.as_slice())
    }

    /// An operation that completes in the turn that takes it (`IProbe`, `Claim`,
    /// `DiscardClaimed`): the engine's report, or `None` if a probe found nothing. For a probe:
    /// of the message a receive from `peer` (or, in open mode, from the address `from`) with
    /// `envelope` would take, if one is there.
    pub(crate) fn immediate_outcome(
        &self,
        op: OpCode,
        (peer, from): (u32, Option<SocketAddr>),
        envelope: Envelope,
    ) -> Result<Option<Outcome>, Error> {
        debug_assert!(matches!(
            op,
            OpCode::IProbe | OpCode::Claim | OpCode::DiscardClaimed
        ));
        let request = self.post_to(op, (peer, from), envelope, &[])?;
        match request.wait_outcome() {
            (Ok(()), outcome) if outcome.result == nicmsg_engine::ResultCode::NotFound => Ok(None),
            (Ok(()), outcome) => Ok(Some(outcome)),
            (Err(error), _) => Err(error),
        }
    }

    fn start(options: Options, endpoint: Endpoint, backend: Backend) -> Result<Self, Error> {
        let (rank, size, job) = (endpoint.rank(), endpoint.size(), endpoint.job());
        let transport_name = backend.name();
        let table = Arc::new(Table::new(options.slots, size));
        let registry = Arc::new(Registry::with_engine_regions(
            options.regions,
            nicmsg_engine::programs::ENGINE_REGIONS + nicmsg_engine::SEND_COPY_REGIONS,
        ));
        let mut driver = Driver::new(endpoint, backend, Arc::clone(&table), Arc::clone(&registry));
        driver.lend_send_copies();
        driver.set_placement(options.placement);
        let programs_shared = Arc::new(ProgramsShared::default());
        let mut vm = nicmsg_vm::VmConfig::new(rank, size);
        vm.budget = options.program_budget;
        let config = ProgramsConfig {
            enabled: options.programs,
            remote_requests: options.programs_remote,
            traps_on_stderr: true,
            vm,
        };
        driver.set_programs(Programs::new(
            config,
            Arc::clone(&programs_shared),
            Arc::clone(&registry),
        ));
        if options.programs {
            // `nicmsg pdl` from a shell: without the socket, programs still work through the
            // API, so a failure to bind is only reported.
            match ControlSocket::bind(&control::control_socket_dir(), job, rank) {
                Ok(control) => driver.set_control(control),
                Err(error) => tracing::warn!(%error, "no control socket for nicmsg pdl"),
            }
        }
        // The CPUs are read (once) only when the engine is the library's to choose, or for an
        // inline engine's standby.
        let mut cpus = None;
        let mut cpus_of_process = || {
            *cpus.get_or_insert_with(|| {
                let share = crate::options::CpuShare::of_this_process();
                tracing::info!(
                    usable_cpus = share.usable,
                    online_cpus = share.online,
                    local_ranks = share.local_ranks,
                    "CPUs this rank may run on"
                );
                share
            })
        };
        let mode = options.engine_to_run(&mut cpus_of_process);
        tracing::info!(?mode, chosen = options.engine_auto, "engine starting");
        let engine = match mode {
            EngineMode::Inline => {
                let standby = cpus_of_process().standby_cpu();
                tracing::info!(?standby, "standby thread's CPU");
                Engine::Inline(InlineEngine::start(driver, standby)?)
            }
            EngineMode::Thread => Engine::Thread(ThreadEngine::spawn(driver, options.idle)?),
        };
        Ok(Self {
            rank,
            size,
            host: RefCell::new(HostTable::new(Arc::clone(&table), registry)),
            barrier_epoch: Cell::new(0),
            last_watchdog: Cell::new(0),
            programs_shared,
            program_requests: Cell::new(0),
            table,
            engine: RefCell::new(engine),
            transport_name,
            options,
            local_address: None,
            _single_host_thread: PhantomData,
        })
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The engine mode running (`NICMSG_ENGINE=auto` resolved).
    pub fn engine_mode(&self) -> EngineMode {
        match &*self.engine.borrow() {
            Engine::Inline(_) => EngineMode::Inline,
            Engine::Thread(_) => EngineMode::Thread,
        }
    }

    /// The transport frames take: `"udp"` or `"xdp"`.
    pub fn transport(&self) -> &'static str {
        self.transport_name
    }

    /// Starts sending `buffer` to `dest` with `tag`. The buffer stays borrowed until the request
    /// completes. A short message (one frame, up to 256 bytes) is copied by the engine and its
    /// request completes as soon as it starts, before the peer acknowledges it (MPI's eager
    /// send); should the peer then be declared unreachable before acknowledging, the loss is
    /// counted in `NICMSG_STATS` as an unconfirmed early send. Longer sends complete when the
    /// peer holds the whole message.
    pub fn isend<'a>(
        &'a self,
        buffer: &'a [u8],
        dest: u32,
        tag: u32,
    ) -> Result<Request<'a>, Error> {
        self.isend_vectored(&[buffer], dest, tag)
    }

    /// Scatter/gather send: the message is the concatenation of `pieces`.
    pub fn isend_vectored<'a>(
        &'a self,
        pieces: &[&'a [u8]],
        dest: u32,
        tag: u32,
    ) -> Result<Request<'a>, Error> {
        self.check_dest(dest)?;
        check_tag(tag)?;
        let ranges = ranges(pieces.iter().map(|p| (p.as_ptr() as *mut u8, p.len())))?;
        let envelope = Envelope::send(Context::USER, u64::from(tag));
        self.post(OpCode::Send, dest, envelope, ranges.as_slice())
    }

    /// Starts receiving into `buffer` a message from `source` with `tag` (either may be `Any`).
    pub fn irecv<'a>(
        &'a self,
        buffer: &'a mut [u8],
        source: Source,
        tag: TagMatch,
    ) -> Result<Request<'a>, Error> {
        self.irecv_vectored([buffer], source, tag)
    }

    /// Scatter receive: the message fills `pieces` in order.
    pub fn irecv_vectored<'a>(
        &'a self,
        pieces: impl IntoIterator<Item = &'a mut [u8]>,
        source: Source,
        tag: TagMatch,
    ) -> Result<Request<'a>, Error> {
        let peer = self.source_word(source)?;
        let envelope = user_matching(tag)?;
        let ranges = ranges(pieces.into_iter().map(|p| (p.as_mut_ptr(), p.len())))?;
        self.post(OpCode::Recv, peer, envelope, ranges.as_slice())
    }

    /// Blocking send.
    pub fn send(&self, buffer: &[u8], dest: u32, tag: u32) -> Result<Status, Error> {
        self.isend(buffer, dest, tag)?.wait()
    }

    /// Blocking receive.
    pub fn recv(&self, buffer: &mut [u8], source: Source, tag: TagMatch) -> Result<Status, Error> {
        self.irecv(buffer, source, tag)?.wait()
    }

    /// Non-blocking probe: the message a receive with this pattern would get, if one is there.
    pub fn iprobe(&self, source: Source, tag: TagMatch) -> Result<Option<Status>, Error> {
        let peer = self.source_word(source)?;
        let found = self.immediate_outcome(OpCode::IProbe, (peer, None), user_matching(tag)?)?;
        Ok(found.map(|outcome| Status::from(&outcome)))
    }

    /// Blocking probe.
    pub fn probe(&self, source: Source, tag: TagMatch) -> Result<Status, Error> {
        let peer = self.source_word(source)?;
        self.post(OpCode::Probe, peer, user_matching(tag)?, &[])?
            .wait()
    }

    /// Blocks until every rank has entered the barrier (dissemination algorithm, zero-byte
    /// messages in the library's own matching context: no receive or probe of the
    /// application, however wild its source and tag, ever sees them).
    pub fn barrier(&self) -> Result<(), Error> {
        let epoch = self.barrier_epoch.get();
        self.barrier_epoch.set(epoch.wrapping_add(1));
        let mut distance = 1;
        while distance < self.size {
            let to = (self.rank + distance) % self.size;
            let from = (self.rank + self.size - distance) % self.size;
            // Successive barriers alternate tags, so a rank already in the next barrier cannot
            // satisfy a slower peer's current one.
            let tag = u64::from(epoch % 2);
            let mut empty = [0u8; 0];
            let none = [(empty.as_mut_ptr(), 0)];
            let wanted = Envelope::matching(Context::LIBRARY, nicmsg_proto::TagMatch::Tag(tag));
            let recv = self.post(OpCode::Recv, from, wanted, &none)?;
            let send = self.post(
                OpCode::Send,
                to,
                Envelope::send(Context::LIBRARY, tag),
                &none,
            )?;
            send.wait()?;
            recv.wait()?;
            distance *= 2;
        }
        Ok(())
    }

    /// Waits for all requests; returns each one's result, in order.
    #[must_use = "each operation's result (an error included) is given only here"]
    pub fn waitall<'a>(
        &self,
        requests: impl IntoIterator<Item = Request<'a>>,
    ) -> Vec<Result<Status, Error>> {
        requests.into_iter().map(Request::wait).collect()
    }

    /// Waits until one of `requests` completes; removes it and returns its index and result
    /// (None if `requests` is empty). Should the engine stop, a request is removed and returned
    /// with `Error::EngineFailed`, as its `wait` would return (and so is each of the others at
    /// the next calls): the index always names the request the result is for.
    #[must_use = "the completed request is removed from the list: its result is given only here"]
    pub fn waitany(
        &self,
        requests: &mut Vec<Request<'_>>,
    ) -> Option<(usize, Result<Status, Error>)> {
        if requests.is_empty() {
            return None;
        }
        let started = self.start_waiting();
        loop {
            // One turn of progress for the round, then a look at each request.
            self.progress_once();
            for index in 0..requests.len() {
                let done = requests[index].outcome_if_done();
                if let Some(result) = done.map(|(result, o)| result.map(|()| Status::from(&o))) {
                    // Finished by `test`: dropping it does nothing more.
                    drop(requests.remove(index));
                    return Some((index, result));
                }
            }
            // Should the engine have failed, this returns at once, and the next round's test
            // of the first request reports the failure as that request's result.
            let _ = self.wait_a_little(started, requests[0].slot());
        }
    }

    /// The start of a wait on several requests, for [`wait_a_little`](Self::wait_a_little).
    pub(crate) fn start_waiting(&self) -> u64 {
        nicmsg_engine::clock::monotonic_ns()
    }

    /// One round of a wait on several requests that found none complete: spins for
    /// `wait_spin_ns` after `started`, then sleeps until the next completion (any completion
    /// wakes it, whichever request it is for; `slot` is one of them). Fails only if the engine
    /// thread died.
    pub(crate) fn wait_a_little(&self, started: u64, slot: u32) -> Result<(), Error> {
        self.check_engine()?;
        let waited = nicmsg_engine::clock::monotonic_ns().saturating_sub(started);
        if waited < self.options.wait_spin_ns {
            nicmsg_engine::sharing::relax(waited);
        } else {
            self.block_briefly(slot);
        }
        Ok(())
    }

    /// Protocol and engine counters, as they are now (in thread mode the engine copies them
    /// at its next turn, within a turn's work or an idle poll). Fails with
    /// `Error::EngineFailed` if the engine thread is gone: its counters went with it, and
    /// all-zero counters would read as "nothing happened".
    pub fn stats(&self) -> Result<Snapshot, Error> {
        match &*self.engine.borrow() {
            Engine::Inline(engine) => Ok(Snapshot::of(&engine.enter())),
            Engine::Thread(engine) => engine.stats().ok_or(Error::EngineFailed),
        }
    }

    /// Operations posted and not yet completed (and taken). An operation failed because the
    /// engine stopped counts as completed.
    #[must_use]
    pub fn outstanding(&self) -> usize {
        self.host.borrow().outstanding()
    }

    /// The engine stopped before `posted` completed: see [`HostTable::abandon`].
    pub(crate) fn abandon(&self, posted: Posted) {
        self.host.borrow_mut().abandon(posted);
    }

    /// Tests only: behave as if the engine thread had died (it keeps running, but every wait
    /// and test now sees it failed).
    #[cfg(test)]
    pub(crate) fn fail_engine_for_test(&self) {
        if let Engine::Thread(engine) = &*self.engine.borrow() {
            engine.declare_failed_for_test();
        }
    }

    /// Tests only: keeps the engine borrowed until the guard is dropped, so any call that
    /// runs or looks at the engine meanwhile panics (as a bug inside the library would).
    #[cfg(test)]
    pub(crate) fn hold_engine_for_test(&self) -> impl Sized + '_ {
        self.engine.borrow_mut()
    }

    // --- internals used by Request ---

    /// A send's destination: in the job, and not declared unreachable (a send to it could
    /// only fail; receives naming it still get what it sent before it was).
    fn check_dest(&self, dest: u32) -> Result<(), Error> {
        if dest >= self.size {
            return Err(Error::InvalidRank {
                rank: dest,
                size: self.size,
            });
        }
        if self.table.is_unreachable(dest) {
            return Err(Error::PeerUnreachable { peer: dest });
        }
        Ok(())
    }

    fn source_word(&self, source: Source) -> Result<u32, Error> {
        match source {
            Source::Any => Ok(ANY),
            Source::Rank(rank) if rank >= self.size => Err(Error::InvalidRank {
                rank,
                size: self.size,
            }),
            Source::Rank(rank) => Ok(rank),
        }
    }

    /// Registers the ranges, fills a slot and hands it to the engine.
    pub(crate) fn post(
        &self,
        op: OpCode,
        peer: u32,
        envelope: Envelope,
        ranges: &[(*mut u8, usize)],
    ) -> Result<Request<'_>, Error> {
        self.post_to(op, (peer, None), envelope, ranges)
    }

    /// [`post`](Self::post), with the address of a send on an open endpoint.
    fn post_to(
        &self,
        op: OpCode,
        (peer, address): (u32, Option<SocketAddr>),
        envelope: Envelope,
        ranges: &[(*mut u8, usize)],
    ) -> Result<Request<'_>, Error> {
        // SAFETY: the ranges are a buffer borrowed by the Request for its whole life (shared
        // for a send, exclusive for a receive); it takes the operation back, which unregisters
        // them, before it releases the borrow.
        let posted = unsafe {
            self.host
                .borrow_mut()
                .post_to(op, (peer, address), envelope, ranges)
        }
        .map_err(|error| match error {
            HostError::TableFull { table, limit } => Error::TableFull { table, limit },
            HostError::TooManySegments { .. } => Error::BadBuffer("more than 16 segments"),
        })?;
        if let Engine::Inline(engine) = &*self.engine.borrow() {
            engine.enter().start_posted();
        }
        Ok(Request::new(self, posted))
    }

    /// The next slot the engine completed, in the order it did (`Table::next_finished`); the
    /// slot may have been taken back or reused since. One reader only: the entries a reader
    /// takes, another never sees.
    pub(crate) fn next_finished_slot(&self) -> Option<u32> {
        // SAFETY: the host side is this thread (a `Comm` is not `Sync`); the caller is the one
        // reader, as documented.
        unsafe { self.table.next_finished() }
    }

    /// True if [`next_finished_slot`](Self::next_finished_slot) may have missed operations
    /// that finished: the engine dropped names (nobody read them and the ring filled), or its
    /// thread failed, which fails its operations without completing their slots.
    pub(crate) fn finished_slots_incomplete(&self) -> bool {
        // SAFETY: as above.
        let lost = unsafe { self.table.finished_lost() };
        lost || self.check_engine().is_err()
    }

    pub(crate) fn is_done(&self, slot: u32) -> bool {
        self.table.state(slot) == nicmsg_engine::table::state::DONE
    }

    /// Takes back a finished operation (its memory unregistered, its slot free); hands it
    /// back while the engine still has it.
    pub(crate) fn take(&self, posted: Posted) -> Result<Outcome, Posted> {
        self.host.borrow_mut().take(posted)
    }

    pub(crate) fn request_cancel(&self, posted: &Posted) {
        self.host.borrow_mut().request_cancel(posted);
    }

    /// The error, if any, a completed descriptor reports.
    pub(crate) fn result_of(&self, descriptor: &Outcome) -> Result<(), Error> {
        let protocol = &self.options.protocol;
        let (table, limit) = match descriptor.op {
            OpCode::Send => ("protocol send", protocol.max_sends),
            _ => ("protocol receive", protocol.max_recvs),
        };
        crate::error::from_outcome(descriptor, self.size, table, limit)
    }

    /// One round of a wait for something no slot stands for (a program's flag): an inline
    /// engine runs a turn; otherwise the caller spins for `wait_spin_ns` after `started`, then
    /// naps (the engine thread does the work).
    pub(crate) fn progress_or_nap(&self, started: u64) {
        let now = nicmsg_engine::clock::monotonic_ns();
        if matches!(&*self.engine.borrow(), Engine::Inline(_)) {
            self.progress_at(now);
        }
        let waited = now.saturating_sub(started);
        if waited < self.options.wait_spin_ns {
            nicmsg_engine::sharing::relax(waited);
        } else {
            std::thread::sleep(std::time::Duration::from_micros(PROGRAM_WAIT_NAP_US));
        }
    }

    /// PANIC: this rank's part of the programs' state (segments, signals, display output).
    pub(crate) fn programs_shared(&self) -> &ProgramsShared {
        &self.programs_shared
    }

    /// PANIC: a request number for an engine's answer (below 2^31, see `answer_tag`).
    pub(crate) fn next_program_request(&self) -> u32 {
        let request = self.program_requests.get();
        self.program_requests.set((request + 1) & 0x7fff_ffff);
        request
    }

    /// PANIC: the programs of this rank's engine and of the job's other engines.
    pub fn programs(&self) -> crate::programs::Programs<'_> {
        crate::programs::Programs::new(self)
    }

    /// A descriptor that becomes readable after the engine completes one of this
    /// communicator's operations, for a host that sleeps in its own poll loop (libfabric's
    /// `FI_WAIT_FD`). Before each sleep: read [`completion_count`](Self::completion_count),
    /// look at the requests, [`arm_completion_fd`](Self::arm_completion_fd), and sleep only if
    /// the count has not changed since. Inline, the completions that wake the host are the
    /// standby's, once the host has been away (`NICMSG_ENGINE`, docs/runtime.md).
    pub(crate) fn completion_fd(&self) -> Result<std::os::fd::RawFd, Error> {
        Ok(self.table.completion_signal().fd()?)
    }

    /// How many completions the engine has made (wrapping).
    /// Inline: every poll of the libfabric provider asks.
    #[inline]
    pub(crate) fn completion_count(&self) -> u32 {
        self.table.completion_count()
    }

    /// Arms the completion descriptor: the next completion makes it readable.
    pub(crate) fn arm_completion_fd(&self) {
        self.table.completion_signal().arm();
    }

    /// Wakes a host sleeping on the completion descriptor, as a completion would: for a
    /// completion the caller made itself (a send it finished by copying the bytes).
    pub(crate) fn wake_completion_fd(&self) {
        self.table.completion_signal().notify();
    }

    pub(crate) fn progress_once(&self) {
        self.progress_at(nicmsg_engine::clock::monotonic_ns());
    }

    /// `progress_once` with the monotonic clock already read (a clock read is a good part of
    /// an idle turn's cost).
    pub(crate) fn progress_at(&self, monotonic_ns: u64) {
        if let Engine::Inline(engine) = &*self.engine.borrow() {
            let now = engine.clock().since_start(monotonic_ns);
            let mut driver = engine.enter();
            driver.turn_at(now);
            self.watch_for_hangs(&mut driver, now);
        }
    }

    /// `NICMSG_WATCHDOG` for an inline engine: at most once a period, reports the operations
    /// pending longer than the threshold (the engine thread does this itself). A host that
    /// polls in a loop of its own (an MPI wait over the provider) hangs inside this call, so
    /// it is the one place the report can come from.
    fn watch_for_hangs(&self, driver: &mut nicmsg_engine::driver::Driver<Backend>, now: u64) {
        let Some(threshold) = self.options.idle.watchdog_ns else {
            return;
        };
        if now.saturating_sub(self.last_watchdog.get()) < nicmsg_engine::runner::WATCHDOG_PERIOD_NS
        {
            return;
        }
        self.last_watchdog.set(now);
        nicmsg_engine::runner::report_hangs(driver, now, threshold);
    }

    /// Waits until `slot` is DONE: spins for `wait_spin_ns`, then blocks (inline: in the
    /// poller until a datagram or the next deadline; thread: on the completion futex). Fails
    /// only if the engine thread died. One clock read per round of spinning.
    pub(crate) fn wait_done(&self, slot: u32) -> Result<(), Error> {
        if self.is_done(slot) {
            return Ok(());
        }
        if let Engine::Inline(engine) = &*self.engine.borrow() {
            self.wait_inline(engine, slot);
            return Ok(());
        }
        let spin_start = nicmsg_engine::clock::monotonic_ns();
        let spin_until = spin_start + self.options.wait_spin_ns;
        while !self.is_done(slot) {
            self.check_engine()?;
            let now = nicmsg_engine::clock::monotonic_ns();
            if now < spin_until {
                // An engine thread may share this core: the wait soon offers it the core (see
                // `nicmsg_engine::sharing::relax`).
                nicmsg_engine::sharing::relax(now - spin_start);
                continue;
            }
            self.block_briefly(slot);
        }
        Ok(())
    }

    /// Inline: this thread is the engine for the whole wait (the standby stays away). Spins
    /// turns until `wait_spin_ns` have passed since the last turn that did work (the engine
    /// thread's idle rule), then sleeps in the poller until a datagram or the next deadline;
    /// reports hangs as the engine thread does when `NICMSG_WATCHDOG` is set.
    ///
    /// Counting from the last work rather than from the start of the wait matters to long
    /// waits that serve traffic meanwhile (a rank whose engine answers PANIC programs while
    /// its host waits): counted from the start, every message after the first 50 us found
    /// the engine asleep in the poller and paid a wake-up.
    fn wait_inline(&self, engine: &InlineEngine<Backend>, slot: u32) {
        let mut driver = engine.enter();
        let spin_start = driver.now();
        let mut last_work = spin_start;
        loop {
            let now = driver.now();
            let busy = driver.turn(now);
            if self.is_done(slot) {
                return;
            }
            if busy {
                last_work = now;
            }
            if busy || now - last_work < self.options.wait_spin_ns {
                std::hint::spin_loop();
                continue;
            }
            self.watch_for_hangs(&mut driver, now);
            driver.idle(&self.options.idle);
        }
    }

    /// An error if the engine thread is gone (a bug in the engine): nothing will complete.
    pub(crate) fn check_engine(&self) -> Result<(), Error> {
        match &*self.engine.borrow() {
            Engine::Thread(engine) if engine.failed() => Err(Error::EngineFailed),
            _ => Ok(()),
        }
    }

    fn block_briefly(&self, slot: u32) {
        match &*self.engine.borrow() {
            Engine::Inline(engine) => {
                let mut driver = engine.enter();
                let now = driver.now();
                if driver.turn(now) {
                    return;
                }
                driver.idle(&self.options.idle);
            }
            Engine::Thread(engine) => engine.block_until(|| self.is_done(slot)),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        let idle = self.options.idle;
        let final_stats = match self.engine.get_mut() {
            Engine::Thread(engine) => engine.stop().map(|driver| Snapshot::of(&driver)),
            Engine::Inline(engine) => {
                let mut driver = engine.enter();
                driver.linger(&idle);
                Some(Snapshot::of(&driver))
            }
        };
        if let (true, Some(snapshot)) = (self.options.print_stats, final_stats) {
            let who = match self.local_address {
                Some(address) => address.to_string(),
                None => format!("rank {}", self.rank),
            };
            crate::report::print_stats(&who, &snapshot);
        }
    }
}

/// Buffer pieces as (address, length) on the stack: posting allocates nothing.
struct Ranges {
    items: [(*mut u8, usize); MAX_SEGMENTS],
    count: usize,
}

impl Ranges {
    fn as_slice(&self) -> &[(*mut u8, usize)] {
        &self.items[..self.count]
    }
}

fn ranges(pieces: impl Iterator<Item = (*mut u8, usize)>) -> Result<Ranges, Error> {
    let mut out = Ranges {
        items: [(std::ptr::null_mut(), 0); MAX_SEGMENTS],
        count: 0,
    };
    for piece in pieces {
        if out.count == MAX_SEGMENTS {
            return Err(Error::BadBuffer("more than 16 segments"));
        }
        out.items[out.count] = piece;
        out.count += 1;
    }
    Ok(out)
}

fn check_tag(tag: u32) -> Result<(), Error> {
    if tag > MAX_TAG {
        return Err(Error::InvalidTag(tag));
    }
    Ok(())
}

/// The envelope of an application's receive or probe.
fn user_matching(tag: TagMatch) -> Result<Envelope, Error> {
    if let TagMatch::Tag(tag) = tag {
        check_tag(tag)?;
    }
    Ok(Envelope::matching(Context::USER, tag.into()))
}

/// The UDP socket the options ask for, at `bind`.
/// The data socket's bind failure with the address it was bound to and where that came from:
/// the kernel's words alone ("Cannot assign requested address (os error 99)" for an
/// `NICMSG_BIND_IP` this host does not have) name neither. The kind stays, so the C code is
/// still `NICMSG_ERR_IO`.
fn bind_failed(error: std::io::Error, ip: IpAddr, from_environment: bool) -> Error {
    let source = if from_environment {
        " (NICMSG_BIND_IP: it must be an address of this host)"
    } else {
        ""
    };
    Error::Io(std::io::Error::new(
        error.kind(),
        format!("cannot bind the data socket to {ip}{source}: {error}"),
    ))
}

fn udp_options(options: &Options, bind: SocketAddr) -> UdpOptions {
    UdpOptions {
        bind,
        max_frame: options.protocol.mtu as usize,
        gso: options.gso,
        gro: options.gro,
        ..UdpOptions::default()
    }
}

/// The job id every open endpoint's frames carry: open endpoints talk to each other, and
/// frames of a launched job (whose ids are random) are dropped.
pub(crate) const OPEN_JOB: u32 = 0x6F70_656E;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A job of one rank with its engine on a thread of its own.
    pub(crate) fn solo_thread() -> Comm {
        // Every test sets the same values, so running them in parallel threads is harmless.
        std::env::set_var("NICMSG_RANK", "0");
        std::env::set_var("NICMSG_SIZE", "1");
        let options = Options {
            engine: EngineMode::Thread,
            ..Options::default()
        };
        Comm::init_with(options).expect("a one-rank job needs no network")
    }

    /// `NICMSG_ENGINE` unset: a rank whose thread may run on one CPU only (as Open MPI binds a
    /// rank) starts the inline engine; the same rank with the host's CPUs to itself starts the
    /// thread where the host has two or more.
    #[test]
    fn an_engine_left_to_choose_follows_the_cpus_the_rank_may_run_on() {
        std::env::set_var("NICMSG_RANK", "0");
        std::env::set_var("NICMSG_SIZE", "1");
        let auto = Options::from_lookup(|_| None).unwrap();
        let bound = {
            let auto = auto.clone();
            std::thread::spawn(move || {
                // SAFETY: cpu_set_t is plain bits (zeroed: an empty set); both calls read or
                // write one of this size, and only this thread is restricted.
                unsafe {
                    let size = std::mem::size_of::<libc::cpu_set_t>();
                    let mut allowed: libc::cpu_set_t = std::mem::zeroed();
                    assert_eq!(libc::sched_getaffinity(0, size, &mut allowed), 0);
                    // The first CPU this process may use (not always CPU 0 in a container).
                    let first = (0..libc::CPU_SETSIZE as usize)
                        .find(|&cpu| libc::CPU_ISSET(cpu, &allowed))
                        .expect("some CPU is allowed");
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(first, &mut one);
                    assert_eq!(
                        libc::sched_setaffinity(0, size, &one),
                        0,
                        "bind to CPU {first}"
                    );
                }
                Comm::init_with(auto).unwrap().engine_mode()
            })
            .join()
            .unwrap()
        };
        assert_eq!(bound, EngineMode::Inline, "bound to one CPU");
        let free = Comm::init_with(auto).unwrap().engine_mode();
        let cpus = crate::options::CpuShare::of_this_process();
        let expected = if cpus.has_room_for_engine_threads() {
            EngineMode::Thread
        } else {
            EngineMode::Inline
        };
        assert_eq!(free, expected, "{cpus:?}");
    }

    #[test]
    fn stats_come_from_a_live_engine_and_fail_with_a_dead_one() {
        let comm = solo_thread();
        let data = [7u8; 100];
        let mut inbox = [0u8; 100];
        let receive = comm
            .irecv(&mut inbox, Source::Rank(0), TagMatch::Tag(1))
            .unwrap();
        comm.send(&data, 0, 1).unwrap();
        receive.wait().unwrap();
        let stats = comm.stats().expect("a live engine answers");
        assert!(stats.engine.commands >= 2, "{:?}", stats.engine);
        comm.fail_engine_for_test();
        assert!(matches!(comm.stats(), Err(Error::EngineFailed)));
    }

    #[test]
    fn waitany_reports_a_dead_engine_as_the_result_of_the_request_it_names() {
        let comm = solo_thread();
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        let mut requests = vec![
            comm.irecv(&mut a, Source::Any, TagMatch::Tag(1)).unwrap(),
            comm.irecv(&mut b, Source::Any, TagMatch::Tag(2)).unwrap(),
        ];
        assert_eq!(comm.outstanding(), 2);
        comm.fail_engine_for_test();
        for left in [1, 0] {
            let (index, result) = comm.waitany(&mut requests).expect("requests remain");
            assert_eq!(index, 0);
            assert!(matches!(result, Err(Error::EngineFailed)), "{result:?}");
            assert_eq!(requests.len(), left, "the request reported is removed");
        }
        assert!(comm.waitany(&mut requests).is_none());
        assert_eq!(
            comm.outstanding(),
            0,
            "failed operations are no longer outstanding"
        );
    }
}

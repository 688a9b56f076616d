//! PANIC on the engine: the protocol VM (`nicmsg-vm`) hosted by the driver.
//!
//! PANIC's traffic is ordinary reliable messages of the protocol in contexts of their own
//! (`Context::PROGRAM_MESSAGES`, `PROGRAM_REQUESTS`, `PROGRAM_ANSWERS`), each starting with a
//! [`ProgramHeader`]. The engine keeps receives posted in the first two, into buffers of its
//! own (regions of the registry the host never hands out); when one completes, the driver asks
//! [`Programs`] to handle it at the end of its turn ([`Programs::handle_received`]): a message
//! runs its program's trigger in the VM, a request (load, unload, run, list, output) is carried
//! out and answered. What programs send (`SEND`, `REPLY`, a message passed on to the host) and
//! the answers are copied into the engine's send buffers and posted as sends
//! ([`Programs::poll_post`]); a buffer returns to the pool when its send completes.
//!
//! So a lost, duplicated or reordered load or trigger is recovered like any message, a peer
//! that dies fails PANIC's sends like any send, and the simulator's faults reach PANIC through
//! the same protocol code. The application's side (segments, locks and flags, display output)
//! is [`ProgramsShared`].

pub mod control;
pub mod display;
mod host;
pub mod shared;
pub mod signals;

use crate::registry::Registry;
use host::EngineHost;
use nicmsg_proto::{Context, Nanos, OpError, OpId, RegionId, Status};
use nicmsg_vm::{LoadError, Message, Outcome, ProgramId, Source, Verdict, Vm, VmConfig};
use nicmsg_wire::program::{
    answer_tag, reply_tag, Answer, ProgramHeader, ProgramOp, ANSWER_LEN, PROGRAM_HEADER_LEN,
};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

pub use display::{Display, Shown, DISPLAY_CAPACITY};
pub use shared::{ProgramsShared, SegmentRefused, SEGMENTS};
pub use signals::{SignalError, Signals, SIGNAL_PROGRAMS};

/// Receives kept posted for programs' messages: messages that arrive while all are being
/// handled wait in the protocol's unexpected queue (flow-controlled by its credits).
pub const MESSAGE_INBOXES: usize = 8;
/// Receives kept posted for requests (loads carry whole modules, so these are large; requests
/// are rare).
pub const REQUEST_INBOXES: usize = 1;
/// Send buffers for programs' messages and the engine's answers. A message is handled only
/// while at least [`SENDS_RESERVED`] are free (so a program's sends are not refused for want of
/// a buffer in normal operation) and a request only while one is free (for its answer).
pub const SEND_BUFFERS: usize = 64;
/// Free send buffers needed before a message is handled: the sends one activation typically
/// makes (a barrier's fan-out to 8 peers).
pub const SENDS_RESERVED: usize = 8;
/// Programs' sends (`SEND`, `REPLY`) in flight to one rank at most, all programs together;
/// [`PROGRAM_SENDS_IN_FLIGHT_PER_RANK`] for one program. One more traps (`SendRefused`). The
/// send buffers are shared by every program, and a send holds its buffer until the
/// destination takes the message: a rank that never takes what programs send it (a hostile
/// host that loads programs replying to it and never receives the replies) would otherwise pin
/// them all, and no program of the engine would run again (`tests/programs_hostile.rs` in
/// `nicmsg`). Half the buffers: such a rank leaves the other half to everyone else.
pub const SENDS_IN_FLIGHT_PER_RANK: usize = SEND_BUFFERS / 2;
/// Sends of one program in flight to one rank at most: one program's burst to a slow rank
/// cannot take the whole of [`SENDS_IN_FLIGHT_PER_RANK`] and make other programs' sends to that
/// rank trap (they would otherwise only have waited for free buffers).
pub const PROGRAM_SENDS_IN_FLIGHT_PER_RANK: usize = SEND_BUFFERS / 4;
/// The largest program message: its header and a program's largest transfer.
pub const MESSAGE_BUFFER_LEN: usize =
    PROGRAM_HEADER_LEN + nicmsg_pdl::limits::MAX_TRANSFER_BYTES as usize;
/// The largest request: its header and the largest module.
pub const REQUEST_BUFFER_LEN: usize = PROGRAM_HEADER_LEN + nicmsg_vm::limits::MAX_MODULE_BYTES;
/// Registry regions the engine keeps for these buffers.
pub const ENGINE_REGIONS: usize = MESSAGE_INBOXES + REQUEST_INBOXES + SEND_BUFFERS;

/// An answer's status (`Answer::status`): what became of a request.
pub mod status {
    pub const DONE: u32 = 0;
    /// The engine runs no programs (`NICMSG_PROGRAMS=off`).
    pub const DISABLED: u32 = 1;
    /// Loading from other ranks is turned off (`NICMSG_PROGRAMS_REMOTE=off`).
    pub const REMOTE_REFUSED: u32 = 2;
    /// The module was rejected (decoding, verification, room): the text says why.
    pub const LOAD_FAILED: u32 = 3;
    /// No such program, or the program cannot do that now.
    pub const REFUSED: u32 = 4;
    /// The program's initialisation block trapped.
    pub const TRAPPED: u32 = 5;
}

/// How the engine's programs are set up.
#[derive(Debug, Clone)]
pub struct ProgramsConfig {
    /// Whether the engine runs programs at all; when not, it still answers requests (with
    /// [`status::DISABLED`]) so no host waits for an answer forever.
    pub enabled: bool,
    /// Whether other ranks may load, unload and start programs here.
    pub remote_requests: bool,
    /// Whether a trap is also printed on stderr (a process: the place a user looks), beside
    /// the log and the counts. The simulator, which runs thousands of traps on purpose, counts
    /// them instead.
    pub traps_on_stderr: bool,
    pub vm: VmConfig,
}

/// Engine-side counts of PANIC's traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramsStats {
    pub messages: u64,
    pub requests: u64,
    /// Messages or requests with a header that does not parse, or in the wrong context.
    pub malformed: u64,
    /// Requests from other ranks refused (remote requests turned off).
    pub remote_refused: u64,
    /// Messages whose program refused them (unknown program or trigger, not started,
    /// disabled): dropped.
    pub refused: u64,
    /// Activations that trapped (the program is disabled; see `nicmsg pdl list`).
    pub traps: u64,
    /// Messages programs passed on to their host.
    pub passed: u64,
    /// Sends of programs and answers that failed (their peer died, or the post was refused).
    pub sends_failed: u64,
    /// Signals (locks, flags) programs could not use: too many programs with signals.
    pub signals_refused: u64,
}

/// Where the time of the last program message went, when [`Programs::set_phase_timing`] is
/// on (PANIC's figure 5: demultiplexing, interpreting, delivering). Each interval is read
/// from the monotonic clock, so each includes about one clock read (some 20 ns with the TSC).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// From the start of the message's handling to the VM's call: the copy out of its inbox,
    /// the header parsed and checked against its context (the engine's demultiplexing).
    pub demux_ns: u64,
    /// The VM's dispatch (finding the program and the trigger, running the activation), less
    /// `deliver_ns`.
    pub interpret_ns: u64,
    /// Inside the activation's copies into and out of host segments (`DELIVER`, `GET`).
    pub deliver_ns: u64,
    /// Instructions the activation executed.
    pub instructions: u32,
}

/// What the driver posts for the programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    Recv {
        context: Context,
        region: RegionId,
        len: u64,
    },
    Send {
        rank: u32,
        context: Context,
        tag: u32,
        region: RegionId,
        len: u64,
    },
}

/// One engine buffer: registered in the registry, used only through its address there (so no
/// reference to it is held while the protocol core writes it).
struct Buffer {
    memory: Vec<u8>,
    region: RegionId,
    /// The operation using it, while posted.
    op: Option<OpId>,
    /// An inbox's context (`PROGRAM_MESSAGES` or `PROGRAM_REQUESTS`); sends have `USER`.
    context: Context,
}

/// A buffer filled for a send, not yet posted.
#[derive(Debug, Clone, Copy)]
struct Queued {
    buffer: usize,
    rank: u32,
    context: Context,
    tag: u32,
    len: usize,
}

/// PANIC's engine side: the VM and the buffers and queues around it.
pub struct Programs {
    vm: Option<Vm>,
    shared: Arc<ProgramsShared>,
    registry: Arc<Registry>,
    remote_requests: bool,
    traps_on_stderr: bool,
    rank: u32,
    /// Inboxes first (`MESSAGE_INBOXES` then `REQUEST_INBOXES`), then the send buffers.
    buffers: Vec<Buffer>,
    free_sends: Vec<usize>,
    /// Per buffer, the rank a program's send in it goes to and the program, while it is in
    /// flight (queued or posted): what [`SENDS_IN_FLIGHT_PER_RANK`] is checked against.
    program_send_to: Vec<Option<(u32, u32)>>,
    /// Each inbox's posted receive, per context (messages, requests), in the order they were
    /// posted: the protocol matches messages to identical receives in that order, so handling
    /// inboxes in it handles messages in the order they were sent (a later message may
    /// complete first when an earlier one lost a frame).
    in_order: [VecDeque<usize>; 2],
    /// The status of each inbox whose receive completed, until it is handled.
    completed: Vec<Option<Status>>,
    /// Inboxes to post (again).
    unposted: VecDeque<usize>,
    queued: VecDeque<Queued>,
    /// The buffer of the post `poll_post` handed out last, until `posted` says its op.
    posting: Option<usize>,
    stats: ProgramsStats,
    /// Whether message handling reads the clock around its phases (off in normal operation:
    /// one branch per message).
    phase_timing: bool,
    phases: PhaseTimes,
}

impl Programs {
    /// The engine's programs, with buffers registered in `registry`'s engine regions (which
    /// must number [`ENGINE_REGIONS`] at least).
    pub fn new(
        config: ProgramsConfig,
        shared: Arc<ProgramsShared>,
        registry: Arc<Registry>,
    ) -> Self {
        let regions = registry.engine_regions();
        assert!(
            regions.len() >= ENGINE_REGIONS,
            "the registry keeps {} regions for the engine, PANIC needs {ENGINE_REGIONS}",
            regions.len()
        );
        let contexts = std::iter::repeat_n(
            (Context::PROGRAM_MESSAGES, MESSAGE_BUFFER_LEN),
            MESSAGE_INBOXES,
        )
        .chain(std::iter::repeat_n(
            (Context::PROGRAM_REQUESTS, REQUEST_BUFFER_LEN),
            REQUEST_INBOXES,
        ))
        .chain(std::iter::repeat_n(
            (Context::USER, MESSAGE_BUFFER_LEN),
            SEND_BUFFERS,
        ));
        let mut buffers: Vec<Buffer> = contexts
            .zip(regions)
            .map(|((context, len), region)| Buffer {
                memory: vec![0; len],
                region: RegionId(region),
                op: None,
                context,
            })
            .collect();
        for buffer in &mut buffers {
            // SAFETY: the buffer's heap memory lives until `Drop` unregisters it (moving the
            // Vec does not move its heap memory), and the engine alone uses it: receives are
            // written by the protocol core while posted and read here only after they
            // complete; sends are written here only while not posted.
            unsafe {
                registry.register(
                    buffer.region,
                    buffer.memory.as_mut_ptr(),
                    buffer.memory.len(),
                )
            };
        }
        let inboxes = MESSAGE_INBOXES + REQUEST_INBOXES;
        Self {
            rank: config.vm.rank,
            vm: config.enabled.then(|| Vm::new(config.vm)),
            shared,
            registry,
            remote_requests: config.remote_requests,
            traps_on_stderr: config.traps_on_stderr,
            buffers,
            free_sends: (inboxes..inboxes + SEND_BUFFERS).rev().collect(),
            program_send_to: vec![None; inboxes + SEND_BUFFERS],
            in_order: [VecDeque::new(), VecDeque::new()],
            completed: vec![None; inboxes],
            unposted: (0..inboxes).collect(),
            queued: VecDeque::new(),
            posting: None,
            stats: ProgramsStats::default(),
            phase_timing: false,
            phases: PhaseTimes::default(),
        }
    }

    /// Times the phases of every program message from now on (for benchmarks: it costs four
    /// clock reads per message); [`Programs::phases`] has the last message's.
    pub fn set_phase_timing(&mut self, on: bool) {
        self.phase_timing = on;
    }

    /// The phases of the last program message handled while phase timing was on.
    pub fn phases(&self) -> PhaseTimes {
        self.phases
    }

    pub fn stats(&self) -> &ProgramsStats {
        &self.stats
    }

    /// The VM (for counters and inspection), if programs are enabled.
    pub fn vm(&self) -> Option<&Vm> {
        self.vm.as_ref()
    }

    /// Whether the driver has something to do for the programs: received buffers to handle
    /// or posts to make. One branch per turn when PANIC is idle.
    pub fn has_work(&self) -> bool {
        !self.unposted.is_empty() || !self.queued.is_empty() || self.can_handle()
    }

    fn can_handle(&self) -> bool {
        self.next_to_handle().is_some()
    }

    /// The inbox to handle next, if its receive completed (oldest first, requests before
    /// messages) and enough send buffers are free for what handling it sends.
    fn next_to_handle(&self) -> Option<usize> {
        [(1, 1), (0, SENDS_RESERVED)]
            .into_iter()
            .filter(|&(_, needed)| self.free_sends.len() >= needed)
            .find_map(|(queue, _)| {
                let &inbox = self.in_order[queue].front()?;
                self.completed[inbox].is_some().then_some(inbox)
            })
    }

    fn order_queue(&self, inbox: usize) -> usize {
        usize::from(self.buffers[inbox].context == Context::PROGRAM_REQUESTS)
    }

    /// The next post the driver must make; then it reports the operation with
    /// [`Programs::posted`] (or the failure with [`Programs::post_failed`]).
    pub fn poll_post(&mut self) -> Option<Post> {
        debug_assert!(self.posting.is_none(), "the last post was not reported");
        if let Some(inbox) = self.unposted.pop_front() {
            let buffer = &self.buffers[inbox];
            self.posting = Some(inbox);
            return Some(Post::Recv {
                context: buffer.context,
                region: buffer.region,
                len: buffer.memory.len() as u64,
            });
        }
        let queued = self.queued.pop_front()?;
        self.posting = Some(queued.buffer);
        Some(Post::Send {
            rank: queued.rank,
            context: queued.context,
            tag: queued.tag,
            region: self.buffers[queued.buffer].region,
            len: queued.len as u64,
        })
    }

    /// The post last handed out is operation `op`.
    pub fn posted(&mut self, op: OpId) {
        let buffer = self.posting.take().expect("a post was handed out");
        self.buffers[buffer].op = Some(op);
        if self.is_inbox(buffer) {
            let queue = self.order_queue(buffer);
            self.in_order[queue].push_back(buffer);
        }
    }

    /// The post last handed out was refused: a send's buffer returns to the pool (counted);
    /// an inbox is posted again at the next turn.
    pub fn post_failed(&mut self) {
        let buffer = self.posting.take().expect("a post was handed out");
        self.release(buffer);
    }

    /// The buffer region of one of the programs' operations.
    pub fn region_of(&self, op: OpId) -> Option<RegionId> {
        self.buffers
            .iter()
            .find(|b| b.op == Some(op))
            .map(|b| b.region)
    }

    /// Whether `op` is one of the programs' operations, and if so takes its completion.
    pub fn complete(&mut self, op: OpId, result: Result<Status, OpError>) -> bool {
        let Some(buffer) = self.buffers.iter().position(|b| b.op == Some(op)) else {
            return false;
        };
        self.buffers[buffer].op = None;
        match result {
            Ok(status) if self.is_inbox(buffer) => self.completed[buffer] = Some(status),
            Ok(_) => {
                self.program_send_to[buffer] = None;
                self.free_sends.push(buffer);
            }
            Err(error) => {
                tracing::debug!(?error, ?op, "a PANIC operation failed");
                if self.is_inbox(buffer) {
                    let queue = self.order_queue(buffer);
                    self.in_order[queue].retain(|&inbox| inbox != buffer);
                }
                self.release(buffer);
            }
        }
        true
    }

    fn is_inbox(&self, buffer: usize) -> bool {
        buffer < MESSAGE_INBOXES + REQUEST_INBOXES
    }

    /// A buffer whose operation failed or was refused goes back where it came from.
    fn release(&mut self, buffer: usize) {
        if self.is_inbox(buffer) {
            self.unposted.push_back(buffer);
        } else {
            self.stats.sends_failed += 1;
            self.program_send_to[buffer] = None;
            self.free_sends.push(buffer);
        }
    }

    /// Handles the received messages and requests that send buffers allow, at `now` (the
    /// engine's clock, for `CLOCK`). Returns true if it handled any.
    pub fn handle_received(&mut self, now: Nanos) -> bool {
        let mut any = false;
        while let Some(inbox) = self.next_to_handle() {
            let queue = self.order_queue(inbox);
            self.in_order[queue].pop_front();
            let status = self.completed[inbox]
                .take()
                .expect("checked by next_to_handle");
            self.handle(inbox, status, now);
            self.unposted.push_back(inbox);
            any = true;
        }
        any
    }

    fn handle(&mut self, inbox: usize, status: Status, now: Nanos) {
        let started = self.phase_timing.then(crate::clock::monotonic_ns);
        let len = (status.len as usize).min(self.buffers[inbox].memory.len());
        let context = self.buffers[inbox].context;
        // SAFETY: the inbox's receive completed and the inbox is posted again only after this
        // handling (`handle_received`); meanwhile only send buffers and segments are written.
        let bytes = unsafe { self.inbox_bytes(inbox, len) };
        let header = match ProgramHeader::parse(bytes) {
            Ok(header)
                if (header.op == ProgramOp::Message) == (context == Context::PROGRAM_MESSAGES) =>
            {
                header
            }
            _ => {
                self.stats.malformed += 1;
                return;
            }
        };
        let payload = &bytes[PROGRAM_HEADER_LEN..];
        if header.op == ProgramOp::Message {
            self.stats.messages += 1;
            self.run_message(&header, payload, status.peer, now, started);
        } else {
            self.stats.requests += 1;
            self.run_request(&header, payload, status.peer, now);
        }
    }

    /// The first `len` bytes of an inbox whose receive has completed, read in place (no copy:
    /// the message is handled straight from where the protocol core wrote it). The slice is not
    /// tied to `self`, so the handling may change `self` while it reads the message.
    ///
    /// # Safety
    /// The inbox must not be posted again (nor otherwise written) while the slice is used.
    unsafe fn inbox_bytes<'m>(&self, inbox: usize, len: usize) -> &'m [u8] {
        let buffer = &self.buffers[inbox];
        let address = self
            .registry
            .address(buffer.region, 0, len as u64)
            .expect("engine buffers stay registered");
        // SAFETY: the receive completed, so the protocol core no longer writes the buffer; its
        // heap memory lives as long as `self` (the `Vec` is never resized), and the caller
        // keeps it unposted while the slice is used.
        unsafe { std::slice::from_raw_parts(address, len) }
    }

    /// The VM and what one activation of it reaches through the engine (split borrows of
    /// `self`).
    fn activation(&mut self, now: Nanos) -> (Option<&mut Vm>, EngineHost<'_>) {
        let host = EngineHost {
            now,
            rank: self.rank,
            shared: &self.shared,
            registry: &self.registry,
            buffers: &self.buffers,
            free_sends: &mut self.free_sends,
            program_send_to: &mut self.program_send_to,
            queued: &mut self.queued,
            stats: &mut self.stats,
            time_copies: false,
            copy_ns: 0,
        };
        (self.vm.as_mut(), host)
    }

    /// Runs a program message; `started` is when its handling began, if phases are timed.
    fn run_message(
        &mut self,
        header: &ProgramHeader,
        payload: &[u8],
        peer: u32,
        now: Nanos,
        started: Option<Nanos>,
    ) {
        if self.vm.is_none() {
            self.stats.refused += 1;
            return;
        }
        // The buffer a `PASS` needs, kept from the program's sends: without it, a program that
        // sends as many messages as there are free buffers and passes would lose the message.
        let for_pass = self.free_sends.pop();
        let message = Message {
            program: ProgramId(header.program),
            trigger: header.trigger,
            payload,
            source: Source {
                rank: peer,
                program: header.source_program.map(ProgramId),
            },
        };
        let (vm, mut host) = self.activation(now);
        let vm = vm.expect("checked above");
        host.time_copies = started.is_some();
        let dispatched = started.map(|_| crate::clock::monotonic_ns());
        let outcome = vm.dispatch(&message, &mut host);
        if let (Some(started), Some(dispatched)) = (started, dispatched) {
            let done = crate::clock::monotonic_ns();
            let copies = host.copy_ns;
            self.phases = PhaseTimes {
                demux_ns: dispatched - started,
                interpret_ns: (done - dispatched).saturating_sub(copies),
                deliver_ns: copies,
                instructions: outcome.instructions(),
            };
        }
        self.free_sends.extend(for_pass);
        match outcome {
            Outcome::Refused(refusal) => {
                tracing::debug!(%refusal, peer, "PANIC message refused");
                self.stats.refused += 1;
            }
            Outcome::Trapped(trap) => self.report_trap(&trap),
            _ if outcome.verdict() == Verdict::Passed => {
                self.stats.passed += 1;
                let passed = ProgramHeader {
                    origin: peer,
                    ..*header
                };
                self.queue_to_host(self.rank, reply_tag(header.trigger), &passed, &[payload]);
            }
            _ => {}
        }
    }

    fn report_trap(&mut self, trap: &nicmsg_vm::Trap) {
        self.stats.traps += 1;
        tracing::warn!(rank = self.rank, %trap, "PANIC program disabled");
        if !self.traps_on_stderr {
            return;
        }
        eprintln!(
            "nicmsg: rank {}: {trap}; the program is disabled",
            self.rank
        );
    }

    fn run_request(&mut self, header: &ProgramHeader, payload: &[u8], peer: u32, now: Nanos) {
        let mut text = String::new();
        // The answer's buffer, kept from what a started program's initialisation block sends:
        // otherwise it could take the last one and the host would wait for the answer forever.
        let for_answer = self.free_sends.pop();
        let (code, program) = self.decide(header, payload, peer, now, &mut text);
        self.free_sends.extend(for_answer);
        let answer = ProgramHeader {
            op: header.op,
            trigger: 0,
            program,
            source_program: None,
            request: header.request,
            origin: self.rank,
        };
        let mut fixed = [0u8; ANSWER_LEN];
        Answer {
            status: code,
            program,
        }
        .emit(&mut fixed);
        self.queue_to_host(
            peer,
            answer_tag(header.request),
            &answer,
            &[&fixed, text.as_bytes()],
        );
    }

    /// What a request from `peer` comes to: its status and program, with what it has to say
    /// written into `text`.
    fn decide(
        &mut self,
        header: &ProgramHeader,
        payload: &[u8],
        peer: u32,
        now: Nanos,
        text: &mut String,
    ) -> (u32, u32) {
        if peer != self.rank && !self.remote_requests {
            self.stats.remote_refused += 1;
            text.push_str("requests from other ranks are turned off here (NICMSG_PROGRAMS_REMOTE)");
            (status::REMOTE_REFUSED, header.program)
        } else if self.vm.is_none() {
            text.push_str("this engine runs no programs (NICMSG_PROGRAMS=off)");
            (status::DISABLED, header.program)
        } else {
            self.carry_out(header, payload, now, text)
        }
    }

    /// A request from this rank's control socket (`nicmsg pdl`, `control.rs`), carried out as
    /// if this rank's host had sent it; a message (`nicmsg pdl send`) runs its trigger at once.
    /// Returns the answer's bytes: an [`Answer`] and its text.
    pub fn control(&mut self, header: &ProgramHeader, payload: &[u8], now: Nanos) -> Vec<u8> {
        let mut text = String::new();
        let (code, program) = if header.op != ProgramOp::Message {
            self.decide(header, payload, self.rank, now, &mut text)
        } else if self.free_sends.len() < SENDS_RESERVED {
            text.push_str("the engine's send buffers are busy: try again");
            (status::REFUSED, header.program)
        } else {
            self.stats.messages += 1;
            self.run_message(header, payload, self.rank, now, None);
            (status::DONE, header.program)
        };
        let mut answer = vec![0u8; ANSWER_LEN];
        Answer {
            status: code,
            program,
        }
        .emit(&mut answer);
        answer.extend_from_slice(text.as_bytes());
        answer
    }

    /// Carries out a request (programs enabled); returns its status and program, and writes
    /// what it has to say into `text`.
    fn carry_out(
        &mut self,
        header: &ProgramHeader,
        payload: &[u8],
        now: Nanos,
        text: &mut String,
    ) -> (u32, u32) {
        let id = ProgramId(header.program);
        match header.op {
            // Trigger 1 asks for the id in `program` (a program others address by number,
            // as figure 2's `TO 415`); otherwise the module's name gives the id.
            ProgramOp::Load => self.load((header.trigger == 1).then_some(id), payload, text),
            ProgramOp::Unload => {
                let vm = self.vm.as_mut().expect("enabled");
                match vm.unload(id) {
                    Ok(()) => (status::DONE, id.0),
                    Err(refusal) => {
                        let _ = write!(text, "{refusal}");
                        (status::REFUSED, id.0)
                    }
                }
            }
            ProgramOp::Run => {
                let (vm, mut host) = self.activation(now);
                let outcome = vm.expect("enabled").run(id, &mut host);
                match outcome {
                    Outcome::Refused(refusal) => {
                        let _ = write!(text, "{refusal}");
                        (status::REFUSED, id.0)
                    }
                    Outcome::Trapped(trap) => {
                        let _ = write!(text, "{trap}");
                        self.report_trap(&trap);
                        (status::TRAPPED, id.0)
                    }
                    _ => (status::DONE, id.0),
                }
            }
            ProgramOp::List => {
                self.list(text);
                (status::DONE, 0)
            }
            ProgramOp::Output => {
                let only = (header.trigger != 0).then_some(header.program);
                self.output(only, text);
                (status::DONE, header.program)
            }
            ProgramOp::Message => unreachable!("messages are not requests"),
        }
    }

    fn load(&mut self, id: Option<ProgramId>, module: &[u8], text: &mut String) -> (u32, u32) {
        let vm = self.vm.as_mut().expect("enabled");
        let first = match id {
            Some(id) => vm.load_as(id, module),
            None => vm.load(module),
        };
        let loaded = match first {
            Err(LoadError::IdInUse(id)) => vm.replace(id, module),
            other => other,
        };
        match loaded {
            Ok(handle) => {
                let name = vm
                    .program(handle.id)
                    .map(|info| info.name)
                    .unwrap_or_default();
                let _ = write!(text, "{name}");
                (status::DONE, handle.id.0)
            }
            Err(error) => {
                let _ = write!(text, "{error}");
                (status::LOAD_FAILED, 0)
            }
        }
    }

    fn list(&self, text: &mut String) {
        let vm = self.vm.as_ref().expect("enabled");
        for info in vm.programs() {
            let state = match info.state {
                nicmsg_vm::ProgramState::Loaded => "loaded".to_string(),
                nicmsg_vm::ProgramState::Ready => "running".to_string(),
                nicmsg_vm::ProgramState::Disabled(trap) => format!("disabled: {trap}"),
            };
            let _ = writeln!(
                text,
                "{} {} {} triggers={:?} instructions={} data={} activations={} executed={}",
                info.handle.id,
                info.name,
                state,
                info.triggers,
                info.instructions,
                info.data_bytes,
                info.stats.activations,
                info.stats.instructions,
            );
        }
    }

    /// Display output, one `program value` line each, as much as fits one answer.
    fn output(&self, only: Option<u32>, text: &mut String) {
        /// A line is at most 11 + 1 + 20 + 1 bytes.
        const LINE: usize = 33;
        let room = (MESSAGE_BUFFER_LEN - PROGRAM_HEADER_LEN - ANSWER_LEN) / LINE;
        let (shown, _dropped) = self.shared.display.take(only, room);
        for value in shown {
            let _ = writeln!(text, "{value}");
        }
    }

    /// Queues a message to the host of `rank` in the answers' context: header, then `parts`
    /// (truncated to one buffer). Only called with a send buffer free (`can_handle`).
    fn queue_to_host(&mut self, rank: u32, tag: u32, header: &ProgramHeader, parts: &[&[u8]]) {
        let Some(buffer) = self.free_sends.pop() else {
            self.stats.sends_failed += 1;
            return;
        };
        let address = self
            .registry
            .address(self.buffers[buffer].region, 0, MESSAGE_BUFFER_LEN as u64)
            .expect("engine buffers stay registered");
        // SAFETY: a free send buffer is not posted, so nothing else reads or writes it.
        let memory = unsafe { std::slice::from_raw_parts_mut(address, MESSAGE_BUFFER_LEN) };
        header.emit(memory);
        let mut len = PROGRAM_HEADER_LEN;
        for part in parts {
            let take = part.len().min(MESSAGE_BUFFER_LEN - len);
            nicmsg_proto::copy_bytes(&mut memory[len..len + take], &part[..take]);
            len += take;
        }
        self.queued.push_back(Queued {
            buffer,
            rank,
            context: Context::PROGRAM_ANSWERS,
            tag,
            len,
        });
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        for buffer in &self.buffers {
            self.registry.unregister(buffer.region);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicmsg_proto::OpKind;

    const COUNTER: &str = "PROGRAM counter: VAR v; TRIGGERS 1;
        BEGIN v = 0 END;
        MESSAGE 1: BEGIN RECEIVE v LEN 8; DISPLAY v END;
        END.";

    /// Programs of rank 0 of 2, with the driver's part played by the test: it makes the posts
    /// (made-up operation ids), and completes sends at once.
    struct Engine {
        programs: Programs,
        shared: Arc<ProgramsShared>,
        registry: Arc<Registry>,
        next_op: u32,
        /// Receives posted, in post order: (op, region, context).
        inboxes: VecDeque<(OpId, RegionId, Context)>,
        /// Whether sends stay in flight (not completed) once posted, and those posted so far:
        /// (op, context, tag).
        hold_sends: bool,
        sends: Vec<(OpId, Context, u32)>,
    }

    impl Engine {
        fn new() -> Self {
            let registry = Arc::new(Registry::with_engine_regions(4, ENGINE_REGIONS));
            let shared = Arc::new(ProgramsShared::default());
            let config = ProgramsConfig {
                enabled: true,
                remote_requests: true,
                traps_on_stderr: false,
                // Ranks enough for `FAN` to fill the send buffers within the per-rank limit.
                vm: VmConfig::new(0, 8),
            };
            let programs = Programs::new(config, Arc::clone(&shared), Arc::clone(&registry));
            let mut engine = Self {
                programs,
                shared,
                registry,
                next_op: 0,
                inboxes: VecDeque::new(),
                hold_sends: false,
                sends: Vec::new(),
            };
            engine.turn();
            engine
        }

        /// The end of a driver's turn: handle what arrived, make the posts.
        fn turn(&mut self) {
            self.programs.handle_received(0);
            while let Some(post) = self.programs.poll_post() {
                self.next_op += 1;
                let (kind, inbox, send) = match post {
                    Post::Recv {
                        context, region, ..
                    } => (OpKind::Recv, Some((region, context)), None),
                    Post::Send { context, tag, .. } => (OpKind::Send, None, Some((context, tag))),
                };
                let op = OpId {
                    kind,
                    index: self.next_op,
                    generation: 1,
                };
                self.programs.posted(op);
                if let Some((context, tag)) = send {
                    self.sends.push((op, context, tag));
                }
                match inbox {
                    Some((region, context)) => self.inboxes.push_back((op, region, context)),
                    None if self.hold_sends => {}
                    None => {
                        let sent = Status {
                            peer: 1,
                            tag: 0,
                            len: 0,
                            immediate: None,
                        };
                        assert!(self.programs.complete(op, Ok(sent)));
                    }
                }
            }
        }

        /// The receive posted `nth` among those of `context` still posted.
        fn inbox(&mut self, context: Context, nth: usize) -> (OpId, RegionId) {
            let at = self
                .inboxes
                .iter()
                .enumerate()
                .filter(|(_, inbox)| inbox.2 == context)
                .nth(nth)
                .map(|(at, _)| at)
                .expect("posted");
            let (op, region, _) = self.inboxes.remove(at).expect("listed");
            (op, region)
        }

        /// The protocol core writes a message from rank 1 into a receive and completes it.
        fn arrive(
            &mut self,
            (op, region): (OpId, RegionId),
            header: ProgramHeader,
            payload: &[u8],
        ) {
            let len = PROGRAM_HEADER_LEN + payload.len();
            let address = self.registry.address(region, 0, len as u64).expect("inbox");
            // SAFETY: the inbox's receive is posted and the test plays the protocol core, the
            // only writer of a posted inbox.
            let memory = unsafe { std::slice::from_raw_parts_mut(address, len) };
            header.emit(memory);
            memory[PROGRAM_HEADER_LEN..].copy_from_slice(payload);
            let status = Status {
                peer: 1,
                tag: u64::from(header.trigger),
                len: len as u64,
                immediate: None,
            };
            assert!(self.programs.complete(op, Ok(status)));
        }

        fn request(&mut self, op: ProgramOp, program: u32, payload: &[u8]) {
            self.numbered_request(op, program, payload, 1);
        }

        fn numbered_request(&mut self, op: ProgramOp, program: u32, payload: &[u8], request: u32) {
            let inbox = self.inbox(Context::PROGRAM_REQUESTS, 0);
            let header = ProgramHeader {
                op,
                trigger: 0,
                program,
                source_program: None,
                request,
                origin: 1,
            };
            self.arrive(inbox, header, payload);
            self.turn();
        }

        fn displayed(&self) -> Vec<i64> {
            let (shown, _) = self.shared.display.take(None, usize::MAX);
            shown.iter().map(|s| s.value).collect()
        }
    }

    fn message(value: i64) -> (ProgramHeader, [u8; 8]) {
        let header = ProgramHeader {
            op: ProgramOp::Message,
            trigger: 1,
            program: nicmsg_pdl::program_id("counter"),
            source_program: None,
            request: 0,
            origin: 1,
        };
        (header, value.to_le_bytes())
    }

    #[test]
    fn messages_are_handled_in_the_order_their_inboxes_were_posted() {
        let mut engine = Engine::new();
        let module = nicmsg_pdl::compile(COUNTER).unwrap().encode().unwrap();
        engine.request(ProgramOp::Load, 0, &module);
        engine.request(ProgramOp::Run, nicmsg_pdl::program_id("counter"), &[]);
        assert_eq!(engine.programs.stats().requests, 2);
        // Rank 1 sends 0 then 1: the protocol matches them to the first two inboxes in post
        // order, and completes the second first (a frame of the first was lost).
        let first = engine.inbox(Context::PROGRAM_MESSAGES, 0);
        let second = engine.inbox(Context::PROGRAM_MESSAGES, 0);
        let (header, payload) = message(1);
        engine.arrive(second, header, &payload);
        engine.turn();
        assert_eq!(engine.displayed(), [0i64; 0], "the later message waits");
        let (header, payload) = message(0);
        engine.arrive(first, header, &payload);
        engine.turn();
        assert_eq!(engine.displayed(), [0, 1], "in the order rank 1 sent them");
        // The inboxes went back in the order they were handled, and keep working.
        for value in 2..2 + MESSAGE_INBOXES as i64 {
            let inbox = engine.inbox(Context::PROGRAM_MESSAGES, 0);
            let (header, payload) = message(value);
            engine.arrive(inbox, header, &payload);
        }
        engine.turn();
        let rest: Vec<i64> = (2..2 + MESSAGE_INBOXES as i64).collect();
        assert_eq!(engine.displayed(), rest);
        assert_eq!(engine.programs.stats().messages, 2 + MESSAGE_INBOXES as u64);
    }

    /// Sends `n` messages (the 8 bytes of the message), spread over ranks 1 to 7, then passes
    /// the message on to the host.
    const FAN: &str = "PROGRAM fan: VAR i, n; TRIGGERS 1;
        BEGIN i = 0 END;
        MESSAGE 1: BEGIN
          RECEIVE n LEN 8; i = 0;
          WHILE i < n DO BEGIN SEND i LEN 8 AS 2 TO 77 AT 1 + i MOD 7; i = i + 1 END;
          PASS
        END;
        END.";
    /// Sends a message in its initialisation block.
    const INITSEND: &str = "PROGRAM initsend: VAR v; TRIGGERS 1;
        BEGIN v = 0; SEND v LEN 8 AS 2 TO 77 AT 1 END;
        MESSAGE 1: BEGIN v = 1 END;
        END.";

    /// An engine with `fan` and `initsend` loaded, `fan` started, and sends held in flight.
    fn fan_engine() -> Engine {
        let mut engine = Engine::new();
        for (source, request) in [(FAN, 1), (INITSEND, 2)] {
            let module = nicmsg_pdl::compile(source).unwrap().encode().unwrap();
            engine.numbered_request(ProgramOp::Load, 0, &module, request);
        }
        engine.numbered_request(ProgramOp::Run, nicmsg_pdl::program_id("fan"), &[], 3);
        engine.hold_sends = true;
        engine
    }

    /// Makes `fan` send `n` messages and pass its message on.
    fn fan(engine: &mut Engine, n: usize) {
        let header = ProgramHeader {
            op: ProgramOp::Message,
            trigger: 1,
            program: nicmsg_pdl::program_id("fan"),
            source_program: None,
            request: 0,
            origin: 1,
        };
        let inbox = engine.inbox(Context::PROGRAM_MESSAGES, 0);
        engine.arrive(inbox, header, &(n as i64).to_le_bytes());
        engine.turn();
    }

    #[test]
    fn a_passed_message_is_never_lost_for_want_of_a_send_buffer() {
        let mut engine = fan_engine();
        // Every send buffer but SENDS_RESERVED in flight, one of them the message passed on.
        fan(&mut engine, SEND_BUFFERS - SENDS_RESERVED - 1);
        assert_eq!(engine.programs.free_sends.len(), SENDS_RESERVED);
        // Sends as many as are free, then passes: the program must trap at a send rather than
        // the pass find no buffer and the message vanish.
        fan(&mut engine, SENDS_RESERVED);
        let stats = *engine.programs.stats();
        assert_eq!(stats.sends_failed, 0, "{stats:?}");
        assert_eq!((stats.passed, stats.traps), (1, 1), "{stats:?}");
    }

    /// Sends `n` messages to rank 1.
    const ONE_RANK: &str = "PROGRAM onerank: VAR i, n; TRIGGERS 1;
        BEGIN i = 0 END;
        MESSAGE 1: BEGIN
          RECEIVE n LEN 8; i = 0;
          WHILE i < n DO BEGIN SEND i LEN 8 AS 2 TO 77 AT 1; i = i + 1 END
        END;
        END.";

    #[test]
    fn a_rank_that_takes_nothing_holds_at_most_its_share_of_the_send_buffers() {
        let mut engine = Engine::new();
        let names = ["onerank", "tworank", "threerank"];
        for (request, name) in (1..).zip(names) {
            let source = ONE_RANK.replace("onerank", name);
            let module = nicmsg_pdl::compile(&source).unwrap().encode().unwrap();
            engine.numbered_request(ProgramOp::Load, 0, &module, request);
            engine.numbered_request(
                ProgramOp::Run,
                nicmsg_pdl::program_id(name),
                &[],
                10 + request,
            );
        }
        // Rank 1 takes nothing: every send to it stays in flight.
        engine.hold_sends = true;
        for (traps, name) in (1..).zip(names) {
            let header = ProgramHeader {
                op: ProgramOp::Message,
                trigger: 1,
                program: nicmsg_pdl::program_id(name),
                source_program: None,
                request: 0,
                origin: 1,
            };
            let inbox = engine.inbox(Context::PROGRAM_MESSAGES, 0);
            engine.arrive(inbox, header, &(SEND_BUFFERS as i64).to_le_bytes());
            engine.turn();
            let stats = *engine.programs.stats();
            assert_eq!(stats.traps, traps, "{name}: {stats:?}");
            let in_flight =
                (traps as usize * PROGRAM_SENDS_IN_FLIGHT_PER_RANK).min(SENDS_IN_FLIGHT_PER_RANK);
            assert_eq!(
                engine.programs.free_sends.len(),
                SEND_BUFFERS - in_flight,
                "{name}: the sends to rank 1 stay in flight, the rest are free for others"
            );
        }
    }

    #[test]
    fn a_start_is_answered_even_when_its_initialisation_block_takes_the_last_send_buffer() {
        let mut engine = fan_engine();
        fan(&mut engine, SEND_BUFFERS - SENDS_RESERVED - 1);
        // 6 sends and the pass leave one buffer free: enough for a request to be handled.
        fan(&mut engine, SENDS_RESERVED - 2);
        assert_eq!(engine.programs.free_sends.len(), 1);
        engine.numbered_request(ProgramOp::Run, nicmsg_pdl::program_id("initsend"), &[], 4);
        let answered = engine
            .sends
            .iter()
            .any(|&(_, context, tag)| context == Context::PROGRAM_ANSWERS && tag == answer_tag(4));
        let stats = *engine.programs.stats();
        assert!(answered, "the start was not answered: {stats:?}");
        assert_eq!(stats.sends_failed, 0, "{stats:?}");
    }
}

//! PANIC end to end (engine mode only): hosts load PDL modules into engines, their own and
//! other ranks', start them, message them, and read what they reply and display, through
//! requests built as the application's API builds them (`crates/nicmsg/src/programs.rs`: the
//! answer's receive in `PROGRAM_ANSWERS` with tag `answer_tag(request)` posted first, then the
//! header and payload sent in `PROGRAM_REQUESTS`; messages in `PROGRAM_MESSAGES` with the
//! trigger as tag; replies received in `PROGRAM_ANSWERS` with `reply_tag(trigger)`). The modules
//! are compiled once, when the simulator first needs them, with `nicmsg-pdl`.
//!
//! Every rank's host runs a script, in four phases that all hosts finish before the next
//! begins (the workload is the application of every rank, so it can wait for all):
//!
//! 1. **Load.** Host `r` loads `counter` (by name) into engine `r + 1` and starts it; rank 0
//!    loads figure 2's partner `pong` as program 415 into engine 1 and starts it, and loads
//!    figure 2's `ping` into its own engine; rank 2 loads and starts `spin` (a `WHILE 1 DO`
//!    trigger) and `spininit` (a `WHILE 1 DO` initialisation block: its start is answered
//!    `TRAPPED`); the last rank sends garbage, corrupted, truncated and empty modules, each
//!    answered `LOAD_FAILED`; rank 0 starts a program that is not loaded (`REFUSED`).
//! 2. **Traffic.** Rank 0 starts ping, which makes 100 round trips with pong on the engines
//!    alone and then displays its 200 `CLOCK` stamps and stops; the host polls its display log
//!    for them. Every host sends numbered values to the counter of every engine (its own
//!    included), which displays them and counts them per sender; then asks each counter for its
//!    count and sum (a `REPLY` to the host, checked byte for byte); and sends messages of 0 to
//!    4096 random bytes to pong, whose replies must carry the same bytes. Hostile traffic:
//!    messages to a program that does not exist and to a trigger a program lacks (dropped and
//!    counted), two malformed messages (counted), and a message that makes `spin` loop until
//!    its budget traps it, then another one, refused because the program is disabled.
//! 3. **Collect.** Host `r` takes the display output of engine `r + 1`'s counter with
//!    `Output` requests until one comes back empty; rank 1 lists engine 2's programs.
//! 4. **Unload.** Everything is unloaded (ping stopped itself, so unloading it is refused; a
//!    second unload of a counter is refused).
//!
//! Checked: every answer arrives once, from the engine asked, with the request's number and
//! the expected status and program; replies carry the expected bytes; each counter displayed
//! every value of every sender exactly once, in the order it was sent; ping's 200 stamps are
//! in order within the run's time; the engines counted exactly the refused, malformed and
//! trapped messages expected, and no program send failed; no answer or reply is left over
//! unreceived at the end; every program is unloaded.
//!
//! `programs-death` is the same with the last rank killed at a random time of phase 2:
//! requests and messages to it must fail with `PeerUnreachable` (at the post or at the
//! completion) rather than hang, and everything among the live ranks must hold as before (a
//! counter got some of the dead host's values, each once and in order: a send completed early
//! may be lost with its sender).

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_engine::programs::{status, Shown, MESSAGE_BUFFER_LEN};
use nicmsg_proto::{Context, Nanos, OpError, Rank, Source, Status, TagMatch};
use nicmsg_wire::program::{
    answer_tag, reply_tag, Answer, ProgramHeader, ProgramOp, ANSWER_LEN, PROGRAM_HEADER_LEN,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::OnceLock;

/// Figure 2 and its partner, as the examples have them.
const PING_SOURCE: &str = include_str!("../../../../examples/pdl/ping.pdl");
const PONG_SOURCE: &str = include_str!("../../../../examples/pdl/pong.pdl");
/// Counts and displays what each rank sends it, and tells a host its own count and sum.
const COUNTER_SOURCE: &str = "
PROGRAM counter:
CONST BUMP = 1, ASK = 3, ANSWER = 4;
VAR v, count[64], sum[64], out[2];
TRIGGERS BUMP, ASK;
BEGIN
  v = 0
END;
MESSAGE BUMP: BEGIN
  RECEIVE v LEN 8;
  count[MSGSRC] = count[MSGSRC] + 1;
  sum[MSGSRC] = sum[MSGSRC] + v;
  DISPLAY v
END;
MESSAGE ASK: BEGIN
  out[0] = count[MSGSRC];
  out[1] = sum[MSGSRC];
  REPLY out LEN 16 AS ANSWER
END;
END.
";
/// A runaway trigger: the budget must stop it.
const SPIN_SOURCE: &str = "
PROGRAM spin:
VAR x;
TRIGGERS 7;
BEGIN
  x = 0
END;
MESSAGE 7: BEGIN
  WHILE 1 DO x = x + 1
END;
END.
";
/// A runaway initialisation block: its start must be answered `TRAPPED`.
const SPININIT_SOURCE: &str = "
PROGRAM spininit:
VAR x;
TRIGGERS 7;
BEGIN
  WHILE 1 DO x = x + 1
END;
MESSAGE 7: BEGIN
  x = 0
END;
END.
";

/// Pong's id (figure 2 sends `TO 415`) and triggers.
const PONG_ID: u32 = 415;
const PONG_TRIGGER: u16 = 12;
const PING_TRIGGER: u16 = 10;
const BUMP: u16 = 1;
const ASK: u16 = 3;
const ANSWER: u16 = 4;
const SPIN_TRIGGER: u16 = 7;
/// Ping's round trips and the values it displays (a send and a receive stamp each).
const PING_ROUNDS: usize = 100;
/// No program has this id.
const NOBODY: u32 = 0x1234;
/// Ranks the counter counts (its arrays' length).
const MAX_RANKS: u32 = 64;
/// How often rank 0's host looks for ping's output, and for how long.
const POLL_NS: Nanos = 1_000_000;
const MAX_POLLS: u32 = 20_000;

// Wake-up tokens.
const NEXT_STEP: u64 = 0;
const POLL_PING: u64 = 1;
const CHECK_PHASE: u64 = 2;

struct Modules {
    ping: Vec<u8>,
    pong: Vec<u8>,
    counter: Vec<u8>,
    spin: Vec<u8>,
    spininit: Vec<u8>,
}

/// The modules, compiled once per process.
fn modules() -> &'static Modules {
    static MODULES: OnceLock<Modules> = OnceLock::new();
    MODULES.get_or_init(|| {
        let compile = |name: &str, source: &str| {
            nicmsg_pdl::compile(source)
                .unwrap_or_else(|errors| {
                    panic!("{name}: {}", nicmsg_pdl::render_all(name, source, &errors))
                })
                .encode()
                .unwrap_or_else(|error| panic!("{name}: {error}"))
        };
        Modules {
            ping: compile("ping.pdl", PING_SOURCE),
            pong: compile("pong.pdl", PONG_SOURCE),
            counter: compile("counter", COUNTER_SOURCE),
            spin: compile("spin", SPIN_SOURCE),
            spininit: compile("spininit", SPININIT_SOURCE),
        }
    })
}

fn id_of(name: &str) -> u32 {
    nicmsg_pdl::program_id(name)
}

/// What an answer must say.
#[derive(Debug, Clone)]
enum Want {
    /// This status, about this program.
    Status(u32, u32),
    /// `LOAD_FAILED`, with a reason.
    LoadFailed,
    /// Done, and the listing holds these lines' beginnings (id left out).
    Listing(Vec<String>),
}

/// One step of a host's script.
#[derive(Debug, Clone)]
enum Action {
    Request {
        to: Rank,
        op: ProgramOp,
        program: u32,
        trigger: u16,
        payload: Vec<u8>,
        want: Want,
    },
    /// A message to a program; with `reply`, the reply the program must send this host:
    /// (trigger, replying program, bytes).
    Message {
        to: Rank,
        program: u32,
        trigger: u16,
        payload: Vec<u8>,
        reply: Option<(u16, u32, Vec<u8>)>,
    },
    /// Bytes that are no valid message, in the messages' context.
    Malformed { to: Rank, bytes: Vec<u8> },
    /// `Output` requests for `program` on `from` until one answers with nothing.
    Collect { from: Rank, program: u32 },
    /// Rank 0: start ping, then wait for its display output in the local log.
    RunPing,
}

impl Action {
    fn target(&self) -> Rank {
        match self {
            Action::Request { to, .. }
            | Action::Message { to, .. }
            | Action::Malformed { to, .. } => *to,
            Action::Collect { from, .. } => *from,
            Action::RunPing => 0,
        }
    }
}

/// What a host waits for in the step under way.
#[derive(Debug, Default)]
struct Running {
    /// The request's number, for an answer.
    request: u32,
    /// Operations posted and not completed.
    waiting: Vec<OpRef>,
    /// The receive of the answer or reply, once completed.
    received: Option<Result<Status, OpError>>,
    received_op: Option<OpRef>,
    /// An operation failed because the target died (or could not be posted to it).
    unreachable: bool,
    /// Ping: polls made so far, and when it was started.
    polls: u32,
    ping_values: Vec<i64>,
    started_at: Nanos,
}

struct Host {
    script: VecDeque<Action>,
    running: Option<(Action, Running)>,
    next_request: u32,
    finished_phase: bool,
}

pub struct Programs {
    ranks: u32,
    deaths: bool,
    /// The scripts of each phase, per rank.
    phases: Vec<Vec<Vec<Action>>>,
    phase: usize,
    hosts: Vec<Host>,
    /// Values each engine's counter displayed, as collected, in order.
    collected: BTreeMap<Rank, Vec<i64>>,
    /// Values each host sends each counter.
    bumps: u64,
    ping_checked: bool,
    /// Expected engine counts: (refused, malformed, traps) per rank.
    expected: Vec<(u64, u64, u64)>,
    /// Requests and messages that failed because their target died.
    unreachable: u64,
    /// When the last rank dies (`programs-death`).
    kill_at: Option<Nanos>,
    /// It was dead when phase 3 began, so requests to it must fail.
    dead_before_collect: bool,
}

/// A counter value: sender, engine, sequence number.
fn bump_value(src: Rank, engine: Rank, seq: u64) -> i64 {
    ((u64::from(src) << 40) | (u64::from(engine) << 24) | seq) as i64
}

impl Programs {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng, deaths: bool) -> Self {
        let n = params.ranks;
        assert!(
            (4..=MAX_RANKS).contains(&n),
            "programs needs 4 to {MAX_RANKS} ranks"
        );
        let m = modules();
        let bumps = scaled(5, params.scale) as u64;
        let echoes = scaled(3, params.scale);
        let mut phases = vec![vec![Vec::new(); n as usize]; 4];
        let counter = id_of("counter");
        let request = |to, op, program, trigger, payload: &[u8], want| Action::Request {
            to,
            op,
            program,
            trigger,
            payload: payload.to_vec(),
            want,
        };
        let done = |program| Want::Status(status::DONE, program);
        // Phase 1: load.
        for r in 0..n {
            let next = (r + 1) % n;
            let script = &mut phases[0][r as usize];
            script.push(request(
                next,
                ProgramOp::Load,
                0,
                0,
                &m.counter,
                done(counter),
            ));
            script.push(request(
                next,
                ProgramOp::Run,
                counter,
                0,
                &[],
                done(counter),
            ));
        }
        phases[0][0].extend([
            request(1, ProgramOp::Load, PONG_ID, 1, &m.pong, done(PONG_ID)),
            request(1, ProgramOp::Run, PONG_ID, 0, &[], done(PONG_ID)),
            request(0, ProgramOp::Load, 0, 0, &m.ping, done(id_of("ping"))),
            request(
                n - 1,
                ProgramOp::Run,
                77,
                0,
                &[],
                Want::Status(status::REFUSED, 77),
            ),
        ]);
        phases[0][2].extend([
            request(2, ProgramOp::Load, 0, 0, &m.spin, done(id_of("spin"))),
            request(
                2,
                ProgramOp::Run,
                id_of("spin"),
                0,
                &[],
                done(id_of("spin")),
            ),
            request(
                2,
                ProgramOp::Load,
                0,
                0,
                &m.spininit,
                done(id_of("spininit")),
            ),
            request(
                2,
                ProgramOp::Run,
                id_of("spininit"),
                0,
                &[],
                Want::Status(status::TRAPPED, id_of("spininit")),
            ),
        ]);
        let garbage: Vec<u8> = (0..rng.range(1, 300))
            .map(|_| rng.next_u64() as u8)
            .collect();
        let mut corrupted = m.counter.clone();
        let at = rng.below(corrupted.len() as u64) as usize;
        corrupted[at] ^= rng.range(1, 255) as u8;
        let truncated = m.counter[..rng.below(m.counter.len() as u64) as usize].to_vec();
        for (i, module) in [garbage, corrupted, truncated, Vec::new()]
            .iter()
            .enumerate()
        {
            let to = i as u32 % n;
            phases[0][(n - 1) as usize].push(request(
                to,
                ProgramOp::Load,
                0,
                0,
                module,
                Want::LoadFailed,
            ));
        }
        // Phase 2: traffic.
        phases[1][0].push(Action::RunPing);
        for r in 0..n {
            let script = &mut phases[1][r as usize];
            for seq in 0..bumps {
                for engine in 0..n {
                    let value = bump_value(r, engine, seq);
                    script.push(Action::Message {
                        to: engine,
                        program: counter,
                        trigger: BUMP,
                        payload: value.to_le_bytes().to_vec(),
                        reply: None,
                    });
                }
            }
            for engine in 0..n {
                let sum: i64 = (0..bumps).map(|seq| bump_value(r, engine, seq)).sum();
                let mut answer = (bumps as i64).to_le_bytes().to_vec();
                answer.extend_from_slice(&sum.to_le_bytes());
                script.push(Action::Message {
                    to: engine,
                    program: counter,
                    trigger: ASK,
                    payload: Vec::new(),
                    reply: Some((ANSWER, counter, answer)),
                });
            }
            for _ in 0..echoes {
                let len = if rng.chance(0.2) {
                    rng.pick(&[0, 1, 4095, 4096])
                } else {
                    rng.range(0, 4096)
                };
                let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                script.push(Action::Message {
                    to: 1,
                    program: PONG_ID,
                    trigger: PONG_TRIGGER,
                    payload: bytes.clone(),
                    reply: Some((PING_TRIGGER, PONG_ID, bytes)),
                });
            }
        }
        let mut expected = vec![(0u64, 0u64, 0u64); n as usize];
        let hostile = |to, program, trigger| Action::Message {
            to,
            program,
            trigger,
            payload: vec![0xAB; 8],
            reply: None,
        };
        phases[1][0].extend([
            hostile(2, NOBODY, 1),
            hostile(2, NOBODY, 2),
            hostile(1, counter, 99),
        ]);
        expected[2].0 += 2;
        expected[1].0 += 1;
        let spin = id_of("spin");
        phases[1][1].extend([
            hostile(2, spin, SPIN_TRIGGER),
            hostile(2, spin, SPIN_TRIGGER),
        ]);
        expected[2].2 += 2; // spin's trap, and spininit's at its start
        expected[2].0 += 1; // the message to spin once disabled
        let mut wrong_context = [0u8; PROGRAM_HEADER_LEN];
        ProgramHeader {
            op: ProgramOp::Load,
            trigger: 0,
            program: counter,
            source_program: None,
            request: 0,
            origin: 1,
        }
        .emit(&mut wrong_context);
        phases[1][1].extend([
            Action::Malformed {
                to: 0,
                bytes: wrong_context.to_vec(),
            },
            Action::Malformed {
                to: 0,
                bytes: vec![ProgramOp::Message as u8, 0, 1],
            },
        ]);
        expected[0].1 += 2;
        // Phase 3: collect.
        for r in 0..n {
            phases[2][r as usize].push(Action::Collect {
                from: (r + 1) % n,
                program: counter,
            });
        }
        phases[2][1].push(request(
            2,
            ProgramOp::List,
            0,
            0,
            &[],
            Want::Listing(vec![
                "spin disabled".into(),
                "spininit disabled".into(),
                "counter running".into(),
            ]),
        ));
        // Phase 4: unload.
        for r in 0..n {
            let next = (r + 1) % n;
            phases[3][r as usize].extend([
                request(next, ProgramOp::Unload, counter, 0, &[], done(counter)),
                request(
                    next,
                    ProgramOp::Unload,
                    counter,
                    0,
                    &[],
                    Want::Status(status::REFUSED, counter),
                ),
            ]);
        }
        let ping = id_of("ping");
        phases[3][0].extend([
            request(
                0,
                ProgramOp::Unload,
                ping,
                0,
                &[],
                Want::Status(status::REFUSED, ping),
            ),
            request(1, ProgramOp::Unload, PONG_ID, 0, &[], done(PONG_ID)),
        ]);
        phases[3][2].extend([
            request(2, ProgramOp::Unload, spin, 0, &[], done(spin)),
            request(
                2,
                ProgramOp::Unload,
                id_of("spininit"),
                0,
                &[],
                done(id_of("spininit")),
            ),
        ]);
        let hosts = (0..n)
            .map(|_| Host {
                script: VecDeque::new(),
                running: None,
                next_request: 1,
                finished_phase: false,
            })
            .collect();
        Self {
            ranks: n,
            deaths,
            phases,
            phase: 0,
            hosts,
            collected: BTreeMap::new(),
            bumps,
            ping_checked: false,
            expected,
            unreachable: 0,
            kill_at: None,
            dead_before_collect: false,
        }
    }

    fn dying(&self) -> Rank {
        self.ranks - 1
    }

    fn start_phase(&mut self, w: &mut World) {
        for rank in 0..self.ranks {
            let host = &mut self.hosts[rank as usize];
            host.script = self.phases[self.phase][rank as usize].clone().into();
            host.finished_phase = false;
            if w.is_dead(rank) {
                host.finished_phase = true;
                continue;
            }
            let think = w.rng.range(0, 30_000);
            w.wake_after(rank, think, NEXT_STEP);
        }
        if self.phase == 2 {
            self.dead_before_collect = w.is_dead(self.dying());
        }
        if self.phase == 1 && self.deaths {
            // Phase 2 lasts a few milliseconds of virtual time.
            let at = w.now() + w.rng.range(0, 2_000_000);
            self.kill_at = Some(at);
            w.kill_at(self.dying(), at);
            // The phase may then wait for the dead host alone: look again after its death.
            w.wake_at(0, at + 1, CHECK_PHASE);
        }
    }

    fn check_phase(&mut self, w: &mut World) {
        let all = (0..self.ranks).all(|r| self.hosts[r as usize].finished_phase || w.is_dead(r));
        if all && self.phase + 1 < self.phases.len() {
            self.phase += 1;
            self.start_phase(w);
        }
    }

    /// Starts the host's next step, or notes the phase done.
    fn next_step(&mut self, w: &mut World, rank: Rank) {
        if w.is_dead(rank) {
            return;
        }
        let Some(action) = self.hosts[rank as usize].script.pop_front() else {
            self.hosts[rank as usize].finished_phase = true;
            self.check_phase(w);
            return;
        };
        let mut running = Running {
            started_at: w.now(),
            ..Running::default()
        };
        self.post(w, rank, &action, &mut running);
        self.hosts[rank as usize].running = Some((action, running));
        self.maybe_done(w, rank);
    }

    fn layout(w: &mut World) -> Layout {
        Layout::draw(&mut w.rng, 0.2)
    }

    /// Posts what a step needs: as the API, the receive of the answer or reply first.
    fn post(&mut self, w: &mut World, rank: Rank, action: &Action, running: &mut Running) {
        let host = &mut self.hosts[rank as usize];
        match action {
            Action::Request {
                to,
                op,
                program,
                trigger,
                payload,
                ..
            } => {
                let request = host.next_request;
                host.next_request += 1;
                running.request = request;
                self.request(w, rank, *to, (*op, *program, *trigger), payload, running);
            }
            Action::Collect { from, program } => {
                let request = host.next_request;
                host.next_request += 1;
                running.request = request;
                self.request(
                    w,
                    rank,
                    *from,
                    (ProgramOp::Output, *program, 1),
                    &[],
                    running,
                );
            }
            Action::RunPing => {
                let request = host.next_request;
                host.next_request += 1;
                running.request = request;
                let ping = id_of("ping");
                self.request(w, rank, 0, (ProgramOp::Run, ping, 0), &[], running);
            }
            Action::Message {
                to,
                program,
                trigger,
                payload,
                reply,
            } => {
                if let Some((reply_trigger, _, bytes)) = reply {
                    // The API receives replies from any source; with deaths, from the engine
                    // asked, so that its death fails the receive.
                    let source = if self.deaths {
                        Source::Rank(*to)
                    } else {
                        Source::Any
                    };
                    let capacity = (PROGRAM_HEADER_LEN + bytes.len()) as u64;
                    let layout = Self::layout(w);
                    let key = (
                        Context::PROGRAM_ANSWERS,
                        TagMatch::Tag(u64::from(reply_tag(*reply_trigger))),
                    );
                    match w.recv_in(rank, source, key, capacity, layout) {
                        Ok(op) => {
                            running.waiting.push(op);
                            running.received_op = Some(op);
                        }
                        Err(_) => running.unreachable = true,
                    }
                }
                let header = ProgramHeader {
                    op: ProgramOp::Message,
                    trigger: *trigger,
                    program: *program,
                    source_program: None,
                    request: 0,
                    origin: rank,
                };
                let bytes = with_header(&header, &[payload]);
                let layout = Self::layout(w);
                let key = (Context::PROGRAM_MESSAGES, u64::from(*trigger));
                match w.send_bytes(rank, *to, key, &bytes, layout) {
                    Ok(op) => running.waiting.push(op),
                    Err(_) => running.unreachable = true,
                }
            }
            Action::Malformed { to, bytes } => {
                let layout = Self::layout(w);
                match w.send_bytes(rank, *to, (Context::PROGRAM_MESSAGES, 1), bytes, layout) {
                    Ok(op) => running.waiting.push(op),
                    Err(_) => running.unreachable = true,
                }
            }
        }
    }

    /// A request as `Programs::request` makes it: the answer's receive (from the engine asked,
    /// tag `answer_tag(request)`, room for the largest answer), then the header and payload.
    fn request(
        &mut self,
        w: &mut World,
        rank: Rank,
        to: Rank,
        (op, program, trigger): (ProgramOp, u32, u16),
        payload: &[u8],
        running: &mut Running,
    ) {
        let header = ProgramHeader {
            op,
            trigger,
            program,
            source_program: None,
            request: running.request,
            origin: rank,
        };
        let key = (
            Context::PROGRAM_ANSWERS,
            TagMatch::Tag(u64::from(answer_tag(running.request))),
        );
        let layout = Self::layout(w);
        match w.recv_in(
            rank,
            Source::Rank(to),
            key,
            MESSAGE_BUFFER_LEN as u64,
            layout,
        ) {
            Ok(op) => {
                running.waiting.push(op);
                running.received_op = Some(op);
            }
            Err(_) => {
                running.unreachable = true;
                return;
            }
        }
        let bytes = with_header(&header, &[payload]);
        let layout = Self::layout(w);
        match w.send_bytes(rank, to, (Context::PROGRAM_REQUESTS, 0), &bytes, layout) {
            Ok(op) => running.waiting.push(op),
            Err(_) => running.unreachable = true,
        }
    }

    /// When every operation of the step completed: checks it, and goes on.
    fn maybe_done(&mut self, w: &mut World, rank: Rank) {
        let Some((action, running)) = self.hosts[rank as usize].running.take() else {
            return;
        };
        if !running.waiting.is_empty() {
            self.hosts[rank as usize].running = Some((action, running));
            return;
        }
        if running.unreachable {
            // The ledger checked that the target is dead; a live one is a violation there.
            if !w.is_dead(action.target()) {
                w.violation(
                    "programs",
                    format!(
                        "rank {rank}: {action:?} failed although rank {} is alive",
                        action.target()
                    ),
                );
            }
            self.unreachable += 1;
            self.schedule_next(w, rank);
            return;
        }
        let received = running.received_op.and_then(|op| w.op(op).received.clone());
        let mut follow = None;
        match &action {
            Action::Request { to, op, want, .. } => {
                if let Some((answer, text)) = self.answer(w, rank, *to, *op, &running, received) {
                    check_want(w, rank, &action, want, answer, &text);
                }
            }
            Action::Collect { from, program } => {
                if let Some((answer, text)) =
                    self.answer(w, rank, *from, ProgramOp::Output, &running, received)
                {
                    if answer.status != status::DONE {
                        w.violation(
                            "programs",
                            format!(
                                "rank {rank}: output of engine {from} answered status {}",
                                answer.status
                            ),
                        );
                    }
                    let values = self.collected.entry(*from).or_default();
                    let before = values.len();
                    for line in text.lines() {
                        match Shown::parse(line) {
                            Some(shown) if shown.program == *program => values.push(shown.value),
                            _ => w.violation(
                                "programs",
                                format!("rank {rank}: output of engine {from} for program {program:#x} has line {line:?}"),
                            ),
                        }
                    }
                    if values.len() > before {
                        follow = Some(action.clone());
                    }
                }
            }
            Action::RunPing => {
                if let Some((answer, text)) =
                    self.answer(w, rank, 0, ProgramOp::Run, &running, received)
                {
                    check_want(
                        w,
                        rank,
                        &action,
                        &Want::Status(status::DONE, id_of("ping")),
                        answer,
                        &text,
                    );
                }
                // Now wait for the output.
                let started = running.started_at;
                self.hosts[rank as usize].running = Some((
                    Action::RunPing,
                    Running {
                        started_at: started,
                        polls: 1,
                        ..Running::default()
                    },
                ));
                w.wake_after(rank, POLL_NS, POLL_PING);
                return;
            }
            Action::Message { to, reply, .. } => {
                if let Some((trigger, program, bytes)) = reply {
                    check_reply(
                        w,
                        rank,
                        *to,
                        (*trigger, *program, bytes),
                        &running,
                        received,
                    );
                }
            }
            Action::Malformed { .. } => {}
        }
        if let Some(action) = follow {
            self.hosts[rank as usize].script.push_front(action);
        }
        self.schedule_next(w, rank);
    }

    fn schedule_next(&mut self, w: &mut World, rank: Rank) {
        if w.rng.chance(0.5) {
            self.next_step(w, rank);
        } else {
            let think = w.rng.range(1, 20_000);
            w.wake_after(rank, think, NEXT_STEP);
        }
    }

    /// Checks an engine's answer to a request of `rank` to `to`; returns it and its text.
    fn answer(
        &self,
        w: &mut World,
        rank: Rank,
        to: Rank,
        op: ProgramOp,
        running: &Running,
        received: Option<Vec<u8>>,
    ) -> Option<(Answer, String)> {
        let status = match running.received {
            Some(Ok(status)) => status,
            other => {
                w.violation("programs", format!("rank {rank}: the answer of engine {to} to request {} completed with {other:?}", running.request));
                return None;
            }
        };
        let bytes = received.unwrap_or_default();
        let (Ok(header), Ok(answer)) = (
            ProgramHeader::parse(&bytes),
            Answer::parse(bytes.get(PROGRAM_HEADER_LEN..).unwrap_or_default()),
        ) else {
            w.violation("programs", format!("rank {rank}: the answer of engine {to} to request {} does not parse ({} bytes)", running.request, bytes.len()));
            return None;
        };
        let want = ProgramHeader {
            op,
            trigger: 0,
            program: answer.program,
            source_program: None,
            request: running.request,
            origin: to,
        };
        if header != want
            || status.peer != to
            || status.tag != u64::from(answer_tag(running.request))
        {
            w.violation(
                "programs",
                format!("rank {rank}: answer {header:?} with {status:?} to request {} ({op:?}) of engine {to}: expected {want:?}", running.request),
            );
        }
        let text = String::from_utf8_lossy(&bytes[PROGRAM_HEADER_LEN + ANSWER_LEN..]).into_owned();
        Some((answer, text))
    }

    fn poll_ping(&mut self, w: &mut World, rank: Rank) {
        let Some((Action::RunPing, mut running)) = self.hosts[rank as usize].running.take() else {
            return;
        };
        let ping = id_of("ping");
        let engine = w.nodes[rank as usize].engine().expect("engine mode");
        let (shown, dropped) = engine
            .programs_shared()
            .display
            .take(Some(ping), usize::MAX);
        if dropped != 0 {
            w.violation(
                "programs",
                format!("rank {rank}: the display log dropped {dropped} value(s)"),
            );
        }
        running.ping_values.extend(shown.iter().map(|s| s.value));
        if running.ping_values.len() < 2 * PING_ROUNDS {
            running.polls += 1;
            if running.polls > MAX_POLLS {
                w.violation(
                    "programs",
                    format!(
                        "rank {rank}: ping displayed {} of {} values in {} of virtual time",
                        running.ping_values.len(),
                        2 * PING_ROUNDS,
                        crate::report::fmt_ns(w.now() - running.started_at)
                    ),
                );
                self.schedule_next(w, rank);
                return;
            }
            self.hosts[rank as usize].running = Some((Action::RunPing, running));
            w.wake_after(rank, POLL_NS, POLL_PING);
            return;
        }
        self.ping_checked = true;
        let values = &running.ping_values;
        // timesent[i], timerec[i] for each round trip: each reply comes after its ping, and
        // the next ping is sent when (the same instant as) the reply arrives.
        let mut problems = Vec::new();
        if values.len() != 2 * PING_ROUNDS {
            problems.push(format!("{} values", values.len()));
        }
        if values[0] < running.started_at as i64 || values[values.len() - 1] > w.now() as i64 {
            problems.push("stamps outside the run".to_string());
        }
        for i in 0..values.len() - 1 {
            let ok = if i % 2 == 0 {
                values[i] < values[i + 1]
            } else {
                values[i] == values[i + 1]
            };
            if !ok {
                problems.push(format!("value {i} ({}) then {}", values[i], values[i + 1]));
            }
        }
        if !problems.is_empty() {
            w.violation(
                "programs",
                format!(
                    "rank {rank}: ping's display output is wrong: {}",
                    problems.join(", ")
                ),
            );
        }
        self.schedule_next(w, rank);
    }

    /// Every value a counter displayed, sender by sender: in order, each once, all of them
    /// (a prefix of them for a host that died).
    /// Checks what `engine`'s counter displayed; the number of values of dead hosts it never
    /// displayed (lost with their sender, or released to the engine only once the host was
    /// declared dead, after the counter was unloaded, and refused).
    fn check_counter(&self, w: &mut World, engine: Rank, values: &[i64]) -> u64 {
        let mut per_source: BTreeMap<Rank, Vec<u64>> = BTreeMap::new();
        for &value in values {
            let value = value as u64;
            let (src, at, seq) = (
                (value >> 40) as Rank,
                (value >> 24) as u16 as Rank,
                value & 0xFF_FFFF,
            );
            if src >= self.ranks || at != engine {
                w.violation(
                    "programs",
                    format!("engine {engine}'s counter displayed {value:#x}, which nobody sent it"),
                );
                continue;
            }
            per_source.entry(src).or_default().push(seq);
        }
        let mut undisplayed_of_dead = 0;
        for src in 0..self.ranks {
            let got = per_source.remove(&src).unwrap_or_default();
            if w.is_dead(src) {
                undisplayed_of_dead += self.bumps.saturating_sub(got.len() as u64);
            }
            let complete = (0..self.bumps).collect::<Vec<_>>();
            // A host that died may have lost messages whose sends completed early (before
            // its peer had them): what arrived is in order and once, but may have gaps.
            let ok = if w.is_dead(src) {
                got.windows(2).all(|pair| pair[0] < pair[1])
                    && got.iter().all(|&seq| seq < self.bumps)
            } else {
                got == complete
            };
            if !ok {
                w.violation(
                    "programs",
                    format!("engine {engine}'s counter displayed values {got:?} from rank {src}, which sent 0..{}", self.bumps),
                );
            }
        }
        undisplayed_of_dead
    }
}

fn with_header(header: &ProgramHeader, parts: &[&[u8]]) -> Vec<u8> {
    let mut bytes = vec![0u8; PROGRAM_HEADER_LEN];
    header.emit(&mut bytes);
    for part in parts {
        bytes.extend_from_slice(part);
    }
    bytes
}

fn check_want(w: &mut World, rank: Rank, action: &Action, want: &Want, answer: Answer, text: &str) {
    let ok = match want {
        Want::Status(status, program) => answer.status == *status && answer.program == *program,
        Want::LoadFailed => {
            answer.status == status::LOAD_FAILED && answer.program == 0 && !text.is_empty()
        }
        Want::Listing(lines) => {
            answer.status == status::DONE
                && lines.iter().all(|line| {
                    text.lines().any(|l| {
                        l.split_once(' ')
                            .is_some_and(|(_, rest)| rest.starts_with(line.as_str()))
                    })
                })
        }
    };
    if !ok {
        let what = match action {
            Action::Request {
                to, op, program, ..
            } => format!("{op:?} of {program:#x} on engine {to}"),
            other => format!("{other:?}"),
        };
        w.violation(
            "programs",
            format!("rank {rank}: {what} answered {answer:?} {text:?}, expected {want:?}"),
        );
    }
}

/// A program's reply to this host: its header names the program and the engine, its payload
/// is the expected bytes.
fn check_reply(
    w: &mut World,
    rank: Rank,
    to: Rank,
    (trigger, program, bytes): (u16, u32, &[u8]),
    running: &Running,
    received: Option<Vec<u8>>,
) {
    let Some(Ok(status)) = running.received else {
        w.violation(
            "programs",
            format!(
                "rank {rank}: the reply of engine {to} completed with {:?}",
                running.received
            ),
        );
        return;
    };
    let got = received.unwrap_or_default();
    let want = ProgramHeader {
        op: ProgramOp::Message,
        trigger,
        program,
        source_program: Some(program),
        request: 0,
        origin: to,
    };
    let header = ProgramHeader::parse(&got);
    if header != Ok(want) || status.peer != to || got.get(PROGRAM_HEADER_LEN..) != Some(bytes) {
        w.violation(
            "programs",
            format!(
                "rank {rank}: reply {header:?} from {} with {} payload bytes; expected {want:?} from {to} with {} bytes{}",
                status.peer,
                got.len().saturating_sub(PROGRAM_HEADER_LEN),
                bytes.len(),
                match got.get(PROGRAM_HEADER_LEN..) {
                    Some(payload) if payload.len() == bytes.len() && bytes.len() <= 16 => {
                        format!(": got {payload:?}, expected {bytes:?}")
                    }
                    Some(payload) if payload.len() == bytes.len() => " (which differ)".to_string(),
                    _ => String::new(),
                }
            ),
        );
    }
}

impl Workload for Programs {
    fn start(&mut self, w: &mut World) {
        self.start_phase(w);
    }

    fn on_wake(&mut self, w: &mut World, rank: Rank, token: u64) {
        match token {
            NEXT_STEP => self.next_step(w, rank),
            POLL_PING => self.poll_ping(w, rank),
            _ => self.check_phase(w),
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        let Some((_, running)) = self.hosts[rank as usize].running.as_mut() else {
            return;
        };
        let Some(at) = running.waiting.iter().position(|&o| o == op) else {
            return;
        };
        running.waiting.swap_remove(at);
        if let Err(OpError::PeerUnreachable { .. }) = result {
            running.unreachable = true;
        } else if result.is_err() {
            w.violation(
                "programs",
                format!(
                    "rank {rank}: {} completed with {result:?}",
                    w.op(op).describe()
                ),
            );
        }
        if Some(op) == running.received_op {
            running.received = Some(result);
        }
        self.maybe_done(w, rank);
    }

    fn finish(&mut self, w: &mut World) {
        let live = |w: &World, r: Rank| !w.is_dead(r);
        for rank in 0..self.ranks {
            if !live(w, rank) {
                continue;
            }
            let host = &self.hosts[rank as usize];
            if self.phase + 1 != self.phases.len() || !host.finished_phase {
                w.violation(
                    "programs",
                    format!(
                        "rank {rank}: the host stopped in phase {} of {} at {:?}",
                        self.phase + 1,
                        self.phases.len(),
                        host.running.as_ref().map(|(a, _)| a)
                    ),
                );
            }
        }
        if !self.ping_checked {
            w.violation("programs", "ping's output was never checked");
        }
        for engine in 0..self.ranks {
            if !live(w, engine) {
                continue;
            }
            let node = w.nodes[engine as usize].engine().expect("engine mode");
            // Values nobody collected (a dead host's): from the log itself.
            let (rest, _) = node.programs_shared().display.take(None, usize::MAX);
            let stats = *node.programs().stats();
            let loaded: Vec<String> = node
                .programs()
                .vm()
                .map(|vm| vm.programs().map(|p| p.name.to_string()).collect())
                .unwrap_or_default();
            let mut values = self.collected.remove(&engine).unwrap_or_default();
            if !rest.is_empty() && !self.deaths {
                w.violation(
                    "programs",
                    format!(
                        "engine {engine}: {} displayed value(s) left after they were collected",
                        rest.len()
                    ),
                );
            }
            values.extend(
                rest.iter()
                    .filter(|s| s.program == id_of("counter"))
                    .map(|s| s.value),
            );
            let undisplayed_of_dead = self.check_counter(w, engine, &values);
            let (refused, malformed, traps) = self.expected[engine as usize];
            let failed_ok = self.deaths || stats.sends_failed == 0;
            // A dead host's message that waited behind one lost with it is released once the
            // host is declared dead, possibly after the counter was unloaded: refused then.
            let late_refusals = stats.refused.saturating_sub(refused);
            if stats.refused < refused
                || late_refusals > undisplayed_of_dead
                || stats.malformed != malformed
                || stats.traps != traps
                || stats.remote_refused != 0
                || !failed_ok
            {
                w.violation(
                    "programs",
                    format!("engine {engine}: counted {stats:?}; expected {refused} refused, {malformed} malformed, {traps} traps{}", if self.deaths { "" } else { ", no failed send" }),
                );
            }
            if !self.deaths && !loaded.is_empty() {
                w.violation(
                    "programs",
                    format!("engine {engine}: programs still loaded at the end: {loaded:?}"),
                );
            }
            // An answer or a reply nobody received: one sent twice.
            if let Some(status) = w.iprobe_in(
                engine,
                Source::Any,
                (Context::PROGRAM_ANSWERS, TagMatch::Any),
            ) {
                w.violation(
                    "programs",
                    format!("rank {engine}: an answer or reply nobody asked for is left: {status:?} (sent twice?)"),
                );
            }
        }
        if self.dead_before_collect && self.unreachable == 0 {
            // Phases 3 and 4 address it: someone must have seen it unreachable.
            w.violation("programs", "no request to the dead rank failed");
        }
    }
}

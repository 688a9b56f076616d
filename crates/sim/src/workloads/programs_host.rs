//! PANIC with its host (engine mode only): what `programs` leaves out. Requests, messages and
//! replies are built as in [`super::programs`] (and as the application's API builds them); the
//! host's side of the engine (shared segments, locks and flags) is the rank's
//! `ProgramsShared`, which the workload uses as an application does.
//!
//! In four phases, each begun when every host finished the previous one:
//!
//! 1. **Setup.** Every host shares segment 1 (24 bytes; rank 0 writes the filter's token at
//!    offset 0) and, when every engine runs programs, loads and starts `barrier.pdl` and
//!    `allreduce.pdl` in its own engine. Rank 0 loads `filter.pdl` (which reads the token in
//!    its initialisation block) and `burst` (a trigger that sends 100 messages in one
//!    activation); rank 1 loads `tally` (displays what it gets); rank 2 shares segment 2 (64
//!    bytes) and loads `store` (`DELIVER`/`GET` on it) and `gate` (a lock and a flag). The last
//!    rank's engine has programs turned off in half of the runs (every request to it, its own host's
//!    included, answered `DISABLED`; a message to it refused) or requests from other ranks
//!    refused in the others (answered `REMOTE_REFUSED`, its own host's carried out).
//! 2. **Traffic.** Rank 1 sends the filter messages with the token (passed on to rank 0's host
//!    in `PROGRAM_ANSWERS`, tag `reply_tag(30)`, the header as sent), with a wrong token and
//!    too short (dropped); rank 0 receives the passed ones. Rank 0 triggers `burst`: it runs
//!    out of the engine's send buffers and traps; the messages it sent reach `tally` once each,
//!    in order. Rank 2 reads and writes segment 2 through `store` (the host sees the engine's
//!    writes, the program the host's), makes it write outside the segment (trapped, then a
//!    message refused), replaces it by loading it again (fresh variables, running again),
//!    unshares the segment and makes it read (trapped); and with `gate`: the host sets lock 0,
//!    the program sees it, clears it and sets flag 1, which the host waits for and clears.
//!    When every engine runs programs, all hosts run 3 barriers and 2 all-reduces on the
//!    engines, waiting for their flags.
//! 3. **Check.** Rank 0 lists its engine (`burst` disabled for want of send buffers) and reads
//!    the filter's counts in segment 1; rank 2 lists its engine (`store` disabled: no segment).
//! 4. **Unload.** Everything is unloaded; segment 1 unshared.
//!
//! Checked (violation kind `programs`): every answer's status and program; replies byte for
//! byte; the passed messages' header, tag, source and payload; the filter's counts; the
//! all-reduce sums in every host's segment; no barrier released before every host entered it;
//! `tally` got 0..k in order, k between `SENDS_RESERVED` and `SEND_BUFFERS`; the locks and
//! flags as the protocol says; every engine counted exactly the traps, refusals, remote
//! refusals and passed messages expected, no send failed, no program left loaded.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::node::ProgramsSetup;
use crate::rng::SimRng;
use crate::workload::{Workload, WorkloadParams};
use crate::world::World;
use nicmsg_engine::programs::{status, MESSAGE_BUFFER_LEN, SENDS_RESERVED, SEND_BUFFERS};
use nicmsg_proto::{Context, Nanos, OpError, Rank, Source, Status, TagMatch};
use nicmsg_wire::program::{
    answer_tag, reply_tag, Answer, ProgramHeader, ProgramOp, ANSWER_LEN, PROGRAM_HEADER_LEN,
};
use std::collections::VecDeque;
use std::sync::OnceLock;

const FILTER_SOURCE: &str = include_str!("../../../../examples/pdl/filter.pdl");
const BARRIER_SOURCE: &str = include_str!("../../../../examples/pdl/barrier.pdl");
const ALLREDUCE_SOURCE: &str = include_str!("../../../../examples/pdl/allreduce.pdl");
/// Displays every value it gets; a negative one ends a series (flag 0).
const TALLY_SOURCE: &str = "
PROGRAM tally:
VAR v;
TRIGGERS 1;
BEGIN
  v = 0
END;
MESSAGE 1: BEGIN
  RECEIVE v LEN 8;
  DISPLAY v;
  IF v < 0 THEN SETFLAG 0
END;
END.
";
/// Sends -1 to `tally`: after the burst's messages from the same engine (same context and
/// tag, so never overtaking them), it ends their series.
const RELAY_SOURCE: &str = "
PROGRAM relay:
VAR v;
TRIGGERS 80;
BEGIN
  v = 0
END;
MESSAGE 80: BEGIN
  v = 0 - 1;
  SEND v LEN 8 AS 1 TO tally AT 1
END;
END.
";
/// Sends more messages in one activation than the engine has send buffers.
const BURST_SOURCE: &str = "
PROGRAM burst:
VAR i;
TRIGGERS 80;
BEGIN
  i = 0
END;
MESSAGE 80: BEGIN
  i = 0;
  WHILE i < 100 DO BEGIN
    SEND i LEN 8 AS 1 TO tally AT 1;
    i = i + 1
  END
END;
END.
";
/// The paper's lock/flag protocol: tells whether the host holds lock 0; clears it and sets
/// flag 1 when asked.
const GATE_SOURCE: &str = "
PROGRAM gate:
CONST ASK = 60, OPEN = 61, STATE = 62, OPENED = 1;
VAR v;
TRIGGERS ASK, OPEN;
BEGIN
  v = 0
END;
MESSAGE ASK: BEGIN
  v = LOCKED(0);
  REPLY v LEN 8 AS STATE
END;
MESSAGE OPEN: BEGIN
  CLEARLOCK 0;
  SETFLAG OPENED
END;
END.
";
/// Writes 16 bytes into segment 2 at an offset (PUT), reads 16 back with a count of reads
/// (READ).
const STORE_SOURCE: &str = "
PROGRAM store:
CONST SEG = 2, PUT = 70, READ = 71, DATA = 72;
VAR off, reads, out[3], buf[2];
TRIGGERS PUT, READ;
BEGIN
  reads = 0
END;
MESSAGE PUT: BEGIN
  RECEIVE off LEN 8;
  RECEIVE buf OFFSET 8 LEN 16;
  DELIVER buf OFFSET off INTO SEG LEN 16
END;
MESSAGE READ: BEGIN
  RECEIVE off LEN 8;
  reads = reads + 1;
  out[0] = reads;
  GET out[1] FROM SEG OFFSET off LEN 16;
  REPLY out LEN 24 AS DATA
END;
END.
";

const FILTER_GUARDED: u16 = 30;
const BARRIER_ENTER: u16 = 50;
const ALLREDUCE_START: u16 = 40;
const BURST_TRIGGER: u16 = 80;
/// The burst's trigger: the host's two messages have the same tag, so the relay's is never
/// handled first.
const RELAY_TRIGGER: u16 = BURST_TRIGGER;
const GATE_ASK: u16 = 60;
const GATE_OPEN: u16 = 61;
const GATE_STATE: u16 = 62;
const GATE_OPENED: u8 = 1;
const STORE_PUT: u16 = 70;
const STORE_READ: u16 = 71;
const STORE_DATA: u16 = 72;
/// Segment 1: the filter's token and counts (rank 0), the all-reduce's result (everyone).
const RESULTS: u16 = 1;
const RESULTS_LEN: usize = 24;
/// Segment 2 (rank 2): `store`'s.
const STORE_SEG: u16 = 2;
const STORE_LEN: usize = 64;
const BARRIERS: usize = 3;
/// How long hosts wait, with deaths, to see that the last barrier releases nobody.
const NO_RELEASE_NS: Nanos = 3_000_000;
const ALLREDUCES: usize = 2;
/// How often a host looks at a flag, and how long it waits at most.
const FLAG_POLL_NS: Nanos = 20_000;
const MAX_FLAG_POLLS: u32 = 100_000;

// Wake-up tokens.
const NEXT_STEP: u64 = 0;
const POLL_FLAG: u64 = 1;
const CHECK_PHASE: u64 = 2;

/// The last rank's engine: programs off in half of the runs (a bit of the seed's hash, not its
/// parity: a sweep of two workloads gives each one seeds of one parity), remote requests off in
/// the others and with deaths (the collectives need it).
pub fn setup_of_last(seed: u64, deaths: bool) -> ProgramsSetup {
    if crate::content::mix(seed) & (1 << 17) != 0 && !deaths {
        ProgramsSetup {
            enabled: false,
            remote_requests: true,
        }
    } else {
        ProgramsSetup {
            enabled: true,
            remote_requests: false,
        }
    }
}

struct Modules {
    filter: Vec<u8>,
    barrier: Vec<u8>,
    allreduce: Vec<u8>,
    tally: Vec<u8>,
    burst: Vec<u8>,
    relay: Vec<u8>,
    gate: Vec<u8>,
    store: Vec<u8>,
}

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
            filter: compile("filter.pdl", FILTER_SOURCE),
            barrier: compile("barrier.pdl", BARRIER_SOURCE),
            allreduce: compile("allreduce.pdl", ALLREDUCE_SOURCE),
            tally: compile("tally", TALLY_SOURCE),
            burst: compile("burst", BURST_SOURCE),
            relay: compile("relay", RELAY_SOURCE),
            gate: compile("gate", GATE_SOURCE),
            store: compile("store", STORE_SOURCE),
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
    /// Done, and some line of the listing holds each of these texts.
    Listing(Vec<Vec<&'static str>>),
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
    /// A message to a program; with `reply`, what it must reply: (trigger, program, bytes).
    Message {
        to: Rank,
        program: u32,
        trigger: u16,
        payload: Vec<u8>,
        reply: Option<(u16, u32, Vec<u8>)>,
    },
    /// Messages the filter of engine `from` must pass on to this host, in order: the header
    /// and payload each was sent with.
    Passed {
        from: Rank,
        messages: Vec<(ProgramHeader, Vec<u8>)>,
    },
    Share {
        segment: u16,
        bytes: Vec<u8>,
    },
    Unshare {
        segment: u16,
    },
    SetLock {
        program: u32,
        lock: u8,
    },
    CheckLock {
        program: u32,
        lock: u8,
        held: bool,
    },
    /// Waits until the flag is set, then clears it; `barrier` names the barrier it ends.
    WaitFlag {
        program: u32,
        flag: u8,
        barrier: Option<usize>,
    },
    /// Enters a barrier (a message to the own engine's barrier, its time noted).
    Enter {
        round: usize,
    },
    /// Waits `wait_ns`, then the flag must still be clear (a barrier a dead rank never
    /// entered).
    NoFlag {
        program: u32,
        flag: u8,
        wait_ns: Nanos,
    },
    /// The host dies (its engine with it).
    Die,
    /// Two messages without replies, sent at once.
    Both(Box<Action>, Box<Action>),
    /// Waits until the data of the own engine's `barrier` counts `count` arrivals (rank 0, the
    /// barrier's root, with deaths: every live rank's arrival handled, the dead one's awaited).
    WaitArrivals {
        count: i64,
    },
    CheckSegment {
        segment: u16,
        offset: usize,
        bytes: Vec<u8>,
    },
}

#[derive(Debug, Default)]
struct Running {
    request: u32,
    waiting: Vec<OpRef>,
    /// Receives of the step, in post order, and their results.
    receives: Vec<OpRef>,
    results: Vec<Option<Result<Status, OpError>>>,
    polls: u32,
}

struct Host {
    script: VecDeque<Action>,
    running: Option<(Action, Running)>,
    next_request: u32,
    finished_phase: bool,
    /// The memory of each shared segment (kept until the end: programs may write it while
    /// shared).
    segments: Vec<(u16, Vec<u8>)>,
}

pub struct ProgramsHost {
    ranks: u32,
    /// Whether the last engine runs programs (else the collectives are left out).
    last_enabled: bool,
    /// `programs-host-death`: the last rank dies instead of entering the last barrier.
    deaths: bool,
    phases: Vec<Vec<Vec<Action>>>,
    phase: usize,
    hosts: Vec<Host>,
    /// When each host entered and left each barrier.
    entered: Vec<Vec<Option<Nanos>>>,
    released: Vec<Vec<Option<Nanos>>>,
    /// Expected engine counts per rank: (traps, refused, remote refused, passed).
    expected: Vec<(u64, u64, u64, u64)>,
}

impl ProgramsHost {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng, deaths: bool) -> Self {
        let n = params.ranks;
        assert!((4..=64).contains(&n), "programs-host needs 4 to 64 ranks");
        let m = modules();
        let last = n - 1;
        let last_setup = setup_of_last(params.seed, deaths);
        let mut phases = vec![vec![Vec::new(); n as usize]; 4];
        let mut expected = vec![(0u64, 0u64, 0u64, 0u64); n as usize];
        let request = |to, op, program, trigger, payload: &[u8], want| Action::Request {
            to,
            op,
            program,
            trigger,
            payload: payload.to_vec(),
            want,
        };
        let done = |program| Want::Status(status::DONE, program);
        let load = |to, module: &[u8], name: &str| {
            [
                request(to, ProgramOp::Load, 0, 0, module, done(id_of(name))),
                request(to, ProgramOp::Run, id_of(name), 0, &[], done(id_of(name))),
            ]
        };
        let message = |to, program, trigger, payload: Vec<u8>, reply| Action::Message {
            to,
            program,
            trigger,
            payload,
            reply,
        };
        let unload = |to, name: &str| {
            request(
                to,
                ProgramOp::Unload,
                id_of(name),
                0,
                &[],
                done(id_of(name)),
            )
        };
        let (filter, barrier, allreduce) = (id_of("filter"), id_of("barrier"), id_of("allreduce"));
        let (tally, burst, gate, store) = (
            id_of("tally"),
            id_of("burst"),
            id_of("gate"),
            id_of("store"),
        );

        let relay = id_of("relay");
        // Phase 1: setup.
        let token = rng.range(1, u64::MAX) as i64;
        for r in 0..n {
            if r == last && !last_setup.enabled {
                continue;
            }
            let script = &mut phases[0][r as usize];
            let mut results = vec![0u8; RESULTS_LEN];
            if r == 0 {
                results[..8].copy_from_slice(&token.to_le_bytes());
            }
            script.push(Action::Share {
                segment: RESULTS,
                bytes: results,
            });
            if last_setup.enabled {
                script.extend(load(r, &m.barrier, "barrier"));
                script.extend(load(r, &m.allreduce, "allreduce"));
            }
        }
        phases[0][0].extend(load(0, &m.filter, "filter"));
        phases[0][0].extend(load(0, &m.burst, "burst"));
        phases[0][0].extend(load(0, &m.relay, "relay"));
        phases[0][1].extend(load(1, &m.tally, "tally"));
        let store_bytes: Vec<u8> = (0..STORE_LEN).map(|_| rng.next_u64() as u8).collect();
        phases[0][2].push(Action::Share {
            segment: STORE_SEG,
            bytes: store_bytes.clone(),
        });
        phases[0][2].extend(load(2, &m.store, "store"));
        phases[0][2].extend(load(2, &m.gate, "gate"));
        if last_setup.enabled {
            // Requests from other ranks refused, the own host's carried out.
            phases[0][0].extend([
                request(
                    last,
                    ProgramOp::Load,
                    0,
                    0,
                    &m.tally,
                    Want::Status(status::REMOTE_REFUSED, 0),
                ),
                request(
                    last,
                    ProgramOp::Run,
                    barrier,
                    0,
                    &[],
                    Want::Status(status::REMOTE_REFUSED, barrier),
                ),
            ]);
            expected[last as usize].2 += 2;
            phases[2][last as usize].push(request(
                last,
                ProgramOp::List,
                0,
                0,
                &[],
                Want::Listing(vec![vec!["barrier running"], vec!["allreduce running"]]),
            ));
        } else {
            phases[0][last as usize].extend([
                request(
                    last,
                    ProgramOp::Load,
                    0,
                    0,
                    &m.tally,
                    Want::Status(status::DISABLED, 0),
                ),
                request(
                    last,
                    ProgramOp::List,
                    0,
                    0,
                    &[],
                    Want::Status(status::DISABLED, 0),
                ),
            ]);
            phases[0][0].push(request(
                last,
                ProgramOp::Run,
                gate,
                0,
                &[],
                Want::Status(status::DISABLED, gate),
            ));
            // From every rank that has nothing else to do (its engine must run, its inboxes
            // posted, like anyone's), and from rank 1.
            for r in (1..2).chain(3..last) {
                phases[1][r as usize].push(message(last, tally, 1, vec![0; 8], None));
                expected[last as usize].1 += 1;
            }
        }

        // Phase 2: traffic.
        // The filter: rank 1 sends good and bad messages to engine 0, rank 0 gets the good.
        let mut passed = Vec::new();
        let (mut good, mut bad) = (0i64, 0i64);
        let mut first_kinds = [0, 1, 2];
        rng.shuffle(&mut first_kinds);
        // Every filter message has this header (rank 1's host to `filter`).
        let filter_message = ProgramHeader {
            op: ProgramOp::Message,
            trigger: FILTER_GUARDED,
            program: filter,
            source_program: None,
            request: 0,
            origin: 1,
        };
        for seq in 0..rng.range(3, 10) {
            let header = filter_message;
            // With the token, with a wrong one, or too short to hold one.
            // Each kind at least once, in a random order.
            let kind = match first_kinds.get(seq as usize) {
                Some(&kind) => kind,
                None => rng.below(4),
            };
            let mut payload = match kind {
                0 => (token ^ 1).to_le_bytes().to_vec(),
                1 => vec![0xA5; rng.below(8) as usize],
                _ => token.to_le_bytes().to_vec(),
            };
            let passes = kind >= 2;
            if kind != 1 {
                payload.extend_from_slice(&seq.to_le_bytes());
            }
            if passes {
                good += 1;
                passed.push((header, payload.clone()));
            } else {
                bad += 1;
            }
            phases[1][1].push(message(0, filter, FILTER_GUARDED, payload, None));
        }
        // The series ends with a message that passes: rank 0 waits for the passed ones only,
        // and messages to one program are never overtaken, so when the last one is passed on
        // every dropped one before it reached the filter too (a short one's send completes
        // from its copy, so rank 1's host cannot tell; under loss it may arrive a timeout
        // after the phase would otherwise have ended).
        let mut payload = token.to_le_bytes().to_vec();
        payload.extend_from_slice(&u64::MAX.to_le_bytes());
        good += 1;
        passed.push((filter_message, payload.clone()));
        phases[1][1].push(message(0, filter, FILTER_GUARDED, payload, None));
        expected[0].3 += good as u64;
        phases[1][0].push(Action::Passed {
            from: 0,
            messages: passed,
        });
        // The burst: out of send buffers, trapped. The relay's message waits for free send
        // buffers, then ends the series tally displays; rank 1 waits for it.
        // Sent together, so that the relay's message arrives while the burst holds every
        // buffer.
        phases[1][0].push(Action::Both(
            Box::new(message(0, burst, BURST_TRIGGER, Vec::new(), None)),
            Box::new(message(0, relay, RELAY_TRIGGER, Vec::new(), None)),
        ));
        phases[1][1].push(Action::WaitFlag {
            program: tally,
            flag: 0,
            barrier: None,
        });
        expected[0].0 += 1;
        // Segments, through store.
        let read = |offset: u64, reads: i64, bytes: &[u8]| {
            let mut reply = reads.to_le_bytes().to_vec();
            reply.extend_from_slice(bytes);
            message(
                2,
                store,
                STORE_READ,
                offset.to_le_bytes().to_vec(),
                Some((STORE_DATA, store, reply)),
            )
        };
        let put = |offset: u64, bytes: &[u8]| {
            let mut payload = offset.to_le_bytes().to_vec();
            payload.extend_from_slice(bytes);
            message(2, store, STORE_PUT, payload, None)
        };
        let at = rng.below((STORE_LEN - 16) as u64 + 1);
        let written: Vec<u8> = (0..16).map(|_| rng.next_u64() as u8).collect();
        let mut after = store_bytes.clone();
        after[at as usize..at as usize + 16].copy_from_slice(&written);
        let first = rng.below((STORE_LEN - 16) as u64 + 1);
        let script = &mut phases[1][2];
        script.extend([
            read(first, 1, &store_bytes[first as usize..first as usize + 16]),
            put(at, &written),
            Action::CheckSegment {
                segment: STORE_SEG,
                offset: at as usize,
                bytes: written.clone(),
            },
            read(at, 2, &written),
            // Beyond the segment's end: trapped, and the next message refused.
            put(rng.range((STORE_LEN - 15) as u64, 4096), &written),
            message(2, store, STORE_READ, 0u64.to_le_bytes().to_vec(), None),
            // Loaded again while loaded (and disabled): replaced, with fresh variables.
            request(2, ProgramOp::Load, 0, 0, &m.store, done(store)),
            request(2, ProgramOp::Run, store, 0, &[], done(store)),
            read(at, 1, &written),
            Action::Unshare { segment: STORE_SEG },
            // No segment any more: trapped.
            message(2, store, STORE_READ, 0u64.to_le_bytes().to_vec(), None),
        ]);
        expected[2].0 += 2;
        expected[2].1 += 1;
        // Locks and flags, through gate.
        let ask = |locked: i64| {
            message(
                2,
                gate,
                GATE_ASK,
                Vec::new(),
                Some((GATE_STATE, gate, locked.to_le_bytes().to_vec())),
            )
        };
        script.extend([
            ask(0),
            Action::SetLock {
                program: gate,
                lock: 0,
            },
            ask(1),
            message(2, gate, GATE_OPEN, Vec::new(), None),
            Action::WaitFlag {
                program: gate,
                flag: GATE_OPENED,
                barrier: None,
            },
            Action::CheckLock {
                program: gate,
                lock: 0,
                held: false,
            },
            ask(0),
            Action::SetLock {
                program: gate,
                lock: 0,
            },
            ask(1),
        ]);
        // The collectives, among all ranks.
        if last_setup.enabled {
            let values: Vec<Vec<i64>> = (0..ALLREDUCES)
                .map(|_| (0..n).map(|_| rng.next_u64() as i64 >> 8).collect())
                .collect();
            for r in 0..n {
                let script = &mut phases[1][r as usize];
                for round in 0..BARRIERS {
                    if deaths && round + 1 == BARRIERS {
                        // The last rank dies instead of entering the last barrier: the
                        // others' engines wait for it for good, their hosts see no release.
                        if r == last {
                            script.push(Action::Die);
                        } else if r == 0 {
                            script.extend([
                                Action::Enter { round },
                                Action::WaitArrivals {
                                    count: i64::from(n - 1),
                                },
                                Action::NoFlag {
                                    program: barrier,
                                    flag: 0,
                                    wait_ns: NO_RELEASE_NS,
                                },
                            ]);
                        } else {
                            script.extend([
                                Action::Enter { round },
                                Action::NoFlag {
                                    program: barrier,
                                    flag: 0,
                                    wait_ns: NO_RELEASE_NS,
                                },
                            ]);
                        }
                        continue;
                    }
                    script.push(Action::Enter { round });
                    script.push(Action::WaitFlag {
                        program: barrier,
                        flag: 0,
                        barrier: Some(round),
                    });
                }
                if deaths {
                    continue;
                }
                for contributions in &values {
                    let sum = contributions.iter().fold(0i64, |a, &v| a.wrapping_add(v));
                    script.extend([
                        message(
                            r,
                            allreduce,
                            ALLREDUCE_START,
                            contributions[r as usize].to_le_bytes().to_vec(),
                            None,
                        ),
                        Action::WaitFlag {
                            program: allreduce,
                            flag: 0,
                            barrier: None,
                        },
                        Action::CheckSegment {
                            segment: RESULTS,
                            offset: 0,
                            bytes: sum.to_le_bytes().to_vec(),
                        },
                    ]);
                }
            }
        }

        // Phase 3: check.
        let mut counts = good.to_le_bytes().to_vec();
        counts.extend_from_slice(&bad.to_le_bytes());
        phases[2][0].extend([
            request(
                0,
                ProgramOp::List,
                0,
                0,
                &[],
                Want::Listing(
                    [
                        vec!["burst disabled", "send buffers"],
                        vec!["filter running"],
                    ]
                    .into_iter()
                    // Still waiting for the dead rank's arrival, not disturbed by its death.
                    .chain(deaths.then(|| vec!["barrier running"]))
                    .collect(),
                ),
            ),
            Action::CheckSegment {
                segment: RESULTS,
                offset: 8,
                bytes: counts,
            },
        ]);
        phases[2][2].push(request(
            2,
            ProgramOp::List,
            0,
            0,
            &[],
            Want::Listing(vec![
                vec!["store disabled", "segment"],
                vec!["gate running"],
            ]),
        ));

        // Phase 4: unload.
        phases[3][0].extend([unload(0, "filter"), unload(0, "burst"), unload(0, "relay")]);
        phases[3][1].push(unload(1, "tally"));
        phases[3][2].extend([unload(2, "store"), unload(2, "gate")]);
        for r in 0..n {
            if r == last && !last_setup.enabled {
                continue;
            }
            let script = &mut phases[3][r as usize];
            if last_setup.enabled {
                script.extend([unload(r, "barrier"), unload(r, "allreduce")]);
            }
            script.push(Action::Unshare { segment: RESULTS });
        }
        let hosts = (0..n)
            .map(|_| Host {
                script: VecDeque::new(),
                running: None,
                next_request: 1,
                finished_phase: false,
                segments: Vec::new(),
            })
            .collect();
        Self {
            ranks: n,
            last_enabled: last_setup.enabled,
            deaths,
            phases,
            phase: 0,
            hosts,
            entered: vec![vec![None; n as usize]; BARRIERS],
            released: vec![vec![None; n as usize]; BARRIERS],
            expected,
        }
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
    }

    fn check_phase(&mut self, w: &mut World) {
        let all = (0..self.ranks).all(|r| self.hosts[r as usize].finished_phase || w.is_dead(r));
        if all && self.phase + 1 < self.phases.len() {
            self.phase += 1;
            self.start_phase(w);
        }
    }

    fn next_step(&mut self, w: &mut World, rank: Rank) {
        if w.is_dead(rank) {
            return;
        }
        let Some(action) = self.hosts[rank as usize].script.pop_front() else {
            self.hosts[rank as usize].finished_phase = true;
            self.check_phase(w);
            return;
        };
        let mut running = Running::default();
        self.post(w, rank, &action, &mut running);
        self.hosts[rank as usize].running = Some((action, running));
        self.maybe_done(w, rank);
    }

    fn layout(w: &mut World) -> Layout {
        Layout::draw(&mut w.rng, 0.2)
    }

    /// A receive in `PROGRAM_ANSWERS`, noted in `running`.
    fn receive(
        w: &mut World,
        rank: Rank,
        from: Rank,
        tag: u32,
        capacity: usize,
        running: &mut Running,
    ) {
        let layout = Self::layout(w);
        let key = (Context::PROGRAM_ANSWERS, TagMatch::Tag(u64::from(tag)));
        match w.recv_in(rank, Source::Rank(from), key, capacity as u64, layout) {
            Ok(op) => {
                running.waiting.push(op);
                running.receives.push(op);
                running.results.push(None);
            }
            Err(error) => w.violation(
                "programs",
                format!("rank {rank}: receive from {from} refused: {error:?}"),
            ),
        }
    }

    fn send(
        w: &mut World,
        rank: Rank,
        to: Rank,
        (context, tag): (Context, u32),
        bytes: &[u8],
        running: &mut Running,
    ) {
        let layout = Self::layout(w);
        let key = (context, u64::from(tag));
        match w.send_bytes(rank, to, key, bytes, layout) {
            Ok(op) => running.waiting.push(op),
            Err(error) => w.violation(
                "programs",
                format!("rank {rank}: send to {to} refused: {error:?}"),
            ),
        }
    }

    fn post(&mut self, w: &mut World, rank: Rank, action: &Action, running: &mut Running) {
        match action {
            Action::Request {
                to,
                op,
                program,
                trigger,
                payload,
                ..
            } => {
                let host = &mut self.hosts[rank as usize];
                running.request = host.next_request;
                host.next_request += 1;
                let header = ProgramHeader {
                    op: *op,
                    trigger: *trigger,
                    program: *program,
                    source_program: None,
                    request: running.request,
                    origin: rank,
                };
                Self::receive(
                    w,
                    rank,
                    *to,
                    answer_tag(running.request),
                    MESSAGE_BUFFER_LEN,
                    running,
                );
                let bytes = with_header(&header, payload);
                Self::send(
                    w,
                    rank,
                    *to,
                    (Context::PROGRAM_REQUESTS, 0),
                    &bytes,
                    running,
                );
            }
            Action::Message {
                to,
                program,
                trigger,
                payload,
                reply,
            } => {
                if let Some((reply_trigger, _, bytes)) = reply {
                    Self::receive(
                        w,
                        rank,
                        *to,
                        reply_tag(*reply_trigger),
                        PROGRAM_HEADER_LEN + bytes.len(),
                        running,
                    );
                }
                Self::message(w, rank, *to, *program, *trigger, payload, running);
            }
            Action::Enter { round } => {
                self.entered[*round][rank as usize] = Some(w.now());
                let barrier = id_of("barrier");
                Self::message(w, rank, rank, barrier, BARRIER_ENTER, &[], running);
            }
            Action::Passed { from, messages } => {
                for (_, payload) in messages {
                    Self::receive(
                        w,
                        rank,
                        *from,
                        reply_tag(FILTER_GUARDED),
                        PROGRAM_HEADER_LEN + payload.len(),
                        running,
                    );
                }
            }
            Action::Share { segment, bytes } => {
                let host = &mut self.hosts[rank as usize];
                host.segments.push((*segment, bytes.clone()));
                let memory = &mut host.segments.last_mut().expect("pushed").1;
                let engine = w.nodes[rank as usize].engine().expect("engine mode");
                // SAFETY: the memory is the host's own and is never resized or freed while
                // shared (it is kept until the workload is dropped, after the run); the
                // simulator is single-threaded, so the engine never writes it while the
                // workload reads it.
                let shared = unsafe {
                    engine
                        .programs_shared()
                        .share(*segment, memory.as_mut_ptr(), memory.len())
                };
                if let Err(error) = shared {
                    w.violation("programs", format!("rank {rank}: {error}"));
                }
            }
            Action::Unshare { segment } => {
                let engine = w.nodes[rank as usize].engine().expect("engine mode");
                engine.programs_shared().unshare(*segment);
            }
            Action::SetLock { program, lock } => {
                let engine = w.nodes[rank as usize].engine().expect("engine mode");
                if let Err(error) = engine.programs_shared().signals.set_lock(*program, *lock) {
                    w.violation("programs", format!("rank {rank}: {error}"));
                }
            }
            Action::CheckLock {
                program,
                lock,
                held,
            } => {
                let engine = w.nodes[rank as usize].engine().expect("engine mode");
                let got = engine.programs_shared().signals.lock(*program, *lock);
                if got != Ok(*held) {
                    w.violation(
                        "programs",
                        format!(
                            "rank {rank}: lock {lock} of {program:#x} is {got:?}, expected {held}"
                        ),
                    );
                }
            }
            Action::CheckSegment {
                segment,
                offset,
                bytes,
            } => {
                let host = &mut self.hosts[rank as usize];
                let memory = host
                    .segments
                    .iter_mut()
                    .rev()
                    .find(|(s, _)| s == segment)
                    .map(|(_, memory)| memory)
                    .expect("the script shares the segment first");
                // SAFETY: see `Share`: the engine does not run meanwhile.
                let got = unsafe {
                    std::slice::from_raw_parts(memory.as_mut_ptr().add(*offset), bytes.len())
                };
                if got != bytes.as_slice() {
                    w.violation(
                        "programs",
                        format!("rank {rank}: segment {segment} holds {got:?} at {offset}, expected {bytes:?}"),
                    );
                }
            }
            Action::NoFlag { wait_ns, .. } => w.wake_after(rank, *wait_ns, POLL_FLAG),
            Action::Die => {
                w.kill_at(rank, w.now());
                // The phase may then wait for the dead host alone: look again after its death.
                w.wake_after(0, 1, CHECK_PHASE);
            }
            Action::WaitArrivals { .. } => {}
            Action::Both(first, second) => {
                self.post(w, rank, first, running);
                self.post(w, rank, second, running);
            }
            Action::WaitFlag { .. } => {}
        }
    }

    fn message(
        w: &mut World,
        rank: Rank,
        to: Rank,
        program: u32,
        trigger: u16,
        payload: &[u8],
        running: &mut Running,
    ) {
        let header = ProgramHeader {
            op: ProgramOp::Message,
            trigger,
            program,
            source_program: None,
            request: 0,
            origin: rank,
        };
        let bytes = with_header(&header, payload);
        Self::send(
            w,
            rank,
            to,
            (Context::PROGRAM_MESSAGES, u32::from(trigger)),
            &bytes,
            running,
        );
    }

    /// Polls a flag the step waits for: set, it is cleared and the step ends.
    fn poll_flag(&mut self, w: &mut World, rank: Rank) {
        let Some((action, mut running)) = self.hosts[rank as usize].running.take() else {
            return;
        };
        if let Action::WaitArrivals { count } = action {
            let engine = w.nodes[rank as usize].engine().expect("engine mode");
            let data = engine
                .programs()
                .vm()
                .and_then(|vm| vm.data(nicmsg_vm::ProgramId(id_of("barrier"))));
            let counted = data
                .and_then(|data| data.get(..8))
                .map(|bytes| i64::from_le_bytes(bytes.try_into().expect("8 bytes")));
            if counted == Some(count) {
                self.schedule_next(w, rank);
                return;
            }
            running.polls += 1;
            if running.polls > MAX_FLAG_POLLS {
                w.violation(
                    "programs",
                    format!(
                        "rank {rank}: the barrier counts {counted:?} arrivals, expected {count}"
                    ),
                );
                self.schedule_next(w, rank);
                return;
            }
            self.hosts[rank as usize].running = Some((action, running));
            w.wake_after(rank, FLAG_POLL_NS, POLL_FLAG);
            return;
        }
        if let Action::NoFlag { program, flag, .. } = action {
            let engine = w.nodes[rank as usize].engine().expect("engine mode");
            let set = engine.programs_shared().signals.flag(program, flag);
            if set != Ok(false) {
                w.violation(
                    "programs",
                    format!("rank {rank}: flag {flag} of {program:#x} is {set:?} although a rank never entered the barrier"),
                );
            }
            self.schedule_next(w, rank);
            return;
        }
        let Action::WaitFlag {
            program,
            flag,
            barrier,
        } = action
        else {
            self.hosts[rank as usize].running = Some((action, running));
            return;
        };
        let engine = w.nodes[rank as usize].engine().expect("engine mode");
        let signals = &engine.programs_shared().signals;
        if signals.flag(program, flag) == Ok(true) {
            let _ = signals.clear_flag(program, flag);
            if let Some(round) = barrier {
                self.released[round][rank as usize] = Some(w.now());
            }
            self.schedule_next(w, rank);
            return;
        }
        running.polls += 1;
        if running.polls > MAX_FLAG_POLLS {
            w.violation(
                "programs",
                format!("rank {rank}: flag {flag} of {program:#x} never set ({action:?})"),
            );
            self.schedule_next(w, rank);
            return;
        }
        self.hosts[rank as usize].running = Some((action, running));
        w.wake_after(rank, FLAG_POLL_NS, POLL_FLAG);
    }

    fn maybe_done(&mut self, w: &mut World, rank: Rank) {
        let Some((action, running)) = self.hosts[rank as usize].running.take() else {
            return;
        };
        if !running.waiting.is_empty() {
            self.hosts[rank as usize].running = Some((action, running));
            return;
        }
        match action {
            Action::WaitFlag { .. } | Action::WaitArrivals { .. } => {
                self.hosts[rank as usize].running = Some((action, running));
                self.poll_flag(w, rank);
                return;
            }
            // Woken when it has waited long enough.
            Action::NoFlag { .. } => {
                self.hosts[rank as usize].running = Some((action, running));
                return;
            }
            // Nothing more from this host.
            Action::Die => return,
            _ => {}
        }
        let received: Vec<Received> = running
            .receives
            .iter()
            .zip(&running.results)
            .map(|(&op, result)| (*result, w.op(op).received.clone().unwrap_or_default()))
            .collect();
        match &action {
            Action::Request { to, op, want, .. } => {
                if let Some((answer, text)) =
                    answer(w, rank, *to, *op, running.request, &received[0])
                {
                    check_want(w, rank, &action, want, answer, &text);
                }
            }
            Action::Message {
                to,
                reply: Some((trigger, program, bytes)),
                ..
            } => {
                let want = ProgramHeader {
                    op: ProgramOp::Message,
                    trigger: *trigger,
                    program: *program,
                    source_program: Some(*program),
                    request: 0,
                    origin: *to,
                };
                check_received(w, rank, *to, &want, bytes, &received[0]);
            }
            Action::Passed { from, messages } => {
                for ((header, payload), got) in messages.iter().zip(&received) {
                    check_received(w, rank, *from, header, payload, got);
                }
            }
            _ => {}
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
}

/// A receive's result (once completed) and the bytes it delivered.
type Received = (Option<Result<Status, OpError>>, Vec<u8>);

fn with_header(header: &ProgramHeader, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8; PROGRAM_HEADER_LEN];
    header.emit(&mut bytes);
    bytes.extend_from_slice(payload);
    bytes
}

/// An engine's answer to request `request` of `rank`: from `to`, with the request's number.
fn answer(
    w: &mut World,
    rank: Rank,
    to: Rank,
    op: ProgramOp,
    request: u32,
    (result, bytes): &Received,
) -> Option<(Answer, String)> {
    let Some(Ok(status)) = result else {
        w.violation(
            "programs",
            format!("rank {rank}: the answer of engine {to} to request {request} completed with {result:?}"),
        );
        return None;
    };
    let (Ok(header), Ok(answer)) = (
        ProgramHeader::parse(bytes),
        Answer::parse(bytes.get(PROGRAM_HEADER_LEN..).unwrap_or_default()),
    ) else {
        w.violation(
            "programs",
            format!("rank {rank}: the answer of engine {to} to request {request} does not parse"),
        );
        return None;
    };
    let want = ProgramHeader {
        op,
        trigger: 0,
        program: answer.program,
        source_program: None,
        request,
        origin: to,
    };
    if header != want || status.peer != to || status.tag != u64::from(answer_tag(request)) {
        w.violation(
            "programs",
            format!("rank {rank}: answer {header:?} with {status:?} to request {request} of engine {to}: expected {want:?}"),
        );
    }
    let text = String::from_utf8_lossy(&bytes[PROGRAM_HEADER_LEN + ANSWER_LEN..]).into_owned();
    Some((answer, text))
}

fn check_want(w: &mut World, rank: Rank, action: &Action, want: &Want, answer: Answer, text: &str) {
    let ok = match want {
        Want::Status(status, program) => answer.status == *status && answer.program == *program,
        Want::Listing(lines) => {
            answer.status == status::DONE
                && lines
                    .iter()
                    .all(|parts| text.lines().any(|l| parts.iter().all(|p| l.contains(p))))
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

/// A reply or a passed message from engine `from`: its header and payload as expected.
fn check_received(
    w: &mut World,
    rank: Rank,
    from: Rank,
    want: &ProgramHeader,
    payload: &[u8],
    (result, got): &Received,
) {
    let Some(Ok(status)) = result else {
        w.violation(
            "programs",
            format!("rank {rank}: a message from engine {from} completed with {result:?}"),
        );
        return;
    };
    let header = ProgramHeader::parse(got);
    if header != Ok(*want) || status.peer != from || got.get(PROGRAM_HEADER_LEN..) != Some(payload)
    {
        w.violation(
            "programs",
            format!(
                "rank {rank}: got {header:?} from {} with payload {:?}; expected {want:?} from {from} with {payload:?}",
                status.peer,
                got.get(PROGRAM_HEADER_LEN..)
            ),
        );
    }
}

impl Workload for ProgramsHost {
    fn start(&mut self, w: &mut World) {
        self.start_phase(w);
    }

    fn on_wake(&mut self, w: &mut World, rank: Rank, token: u64) {
        match token {
            NEXT_STEP => self.next_step(w, rank),
            POLL_FLAG => self.poll_flag(w, rank),
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
        if result.is_err() {
            w.violation(
                "programs",
                format!(
                    "rank {rank}: {} completed with {result:?}",
                    w.op(op).describe()
                ),
            );
        }
        if let Some(i) = running.receives.iter().position(|&o| o == op) {
            running.results[i] = Some(result);
        }
        self.maybe_done(w, rank);
    }

    fn finish(&mut self, w: &mut World) {
        for rank in 0..self.ranks {
            let host = &self.hosts[rank as usize];
            if w.is_dead(rank) {
                continue;
            }
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
        // No barrier released anyone before everyone entered it.
        if self.last_enabled {
            for round in 0..BARRIERS {
                let entered = &self.entered[round];
                let released = &self.released[round];
                let last_in = entered.iter().flatten().max();
                let first_out = released.iter().flatten().min();
                // With deaths, the last barrier releases nobody (the hosts checked their flags).
                let ok = if self.deaths && round + 1 == BARRIERS {
                    released.iter().all(Option::is_none)
                } else {
                    entered.iter().all(Option::is_some)
                        && released.iter().all(Option::is_some)
                        && first_out >= last_in
                };
                if !ok {
                    w.violation(
                        "programs",
                        format!(
                            "barrier {round}: entered at {entered:?}, released at {released:?}"
                        ),
                    );
                }
            }
        }
        // The burst's messages: 0..k once each and in order, k what the free buffers allowed;
        // then the relay's -1.
        let node = w.nodes[1].engine().expect("engine mode");
        let (shown, _) = node
            .programs_shared()
            .display
            .take(Some(id_of("tally")), usize::MAX);
        let values: Vec<i64> = shown.iter().map(|s| s.value).collect();
        let k = values.len().saturating_sub(1);
        if !(SENDS_RESERVED..=SEND_BUFFERS).contains(&k)
            || values[..k].iter().zip(0..).any(|(&v, i)| v != i)
            || values.last() != Some(&-1)
        {
            w.violation(
                "programs",
                format!("tally got {values:?} from the burst; expected 0..k with k in {SENDS_RESERVED}..={SEND_BUFFERS}, then -1"),
            );
        }
        for engine in 0..self.ranks {
            if w.is_dead(engine) {
                continue;
            }
            let node = w.nodes[engine as usize].engine().expect("engine mode");
            let stats = *node.programs().stats();
            let loaded: Vec<String> = node
                .programs()
                .vm()
                .map(|vm| vm.programs().map(|p| p.name.to_string()).collect())
                .unwrap_or_default();
            let (traps, refused, remote_refused, passed) = self.expected[engine as usize];
            // With deaths: rank 0's barrier may have released the dying rank from the
            // barrier before last without that send's acknowledgement.
            let failures_allowed = u64::from(self.deaths && engine == 0);
            if stats.traps != traps
                || stats.refused != refused
                || stats.remote_refused != remote_refused
                || stats.passed != passed
                || stats.malformed != 0
                || stats.sends_failed > failures_allowed
                || stats.signals_refused != 0
            {
                w.violation(
                    "programs",
                    format!("engine {engine}: counted {stats:?}; expected {traps} traps, {refused} refused, {remote_refused} remote refused, {passed} passed, at most {failures_allowed} failed send(s), nothing else"),
                );
            }
            if !loaded.is_empty() {
                w.violation(
                    "programs",
                    format!("engine {engine}: programs still loaded at the end: {loaded:?}"),
                );
            }
            if let Some(status) = w.iprobe_in(
                engine,
                Source::Any,
                (Context::PROGRAM_ANSWERS, TagMatch::Any),
            ) {
                w.violation(
                    "programs",
                    format!("rank {engine}: a message nobody asked for is left: {status:?}"),
                );
            }
        }
    }
}

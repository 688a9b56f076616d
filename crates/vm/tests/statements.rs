//! Every statement and expression of PDL, compiled with nicmsg-pdl, loaded, and run end to end
//! through a test host; and every run-time check, trapping with its reason.

mod common;

use common::{module, Sent, TestHost};
use nicmsg_vm::{
    Destination, Message, Outcome, ProgramId, ProgramState, SegmentError, SendRefused, Source,
    TrapKind, Verdict, Vm, VmConfig,
};

const RANK: u32 = 1;
const RANKS: u32 = 3;

/// A program `t` with `decls`, an initialisation block `init` and trigger 1's block `on1`.
fn program(decls: &str, init: &str, on1: &str) -> Vec<u8> {
    module(&format!(
        "PROGRAM t: {decls}\nTRIGGERS 1;\nBEGIN {init} END;\nMESSAGE 1: BEGIN {on1} END;\nEND."
    ))
}

fn vm() -> Vm {
    Vm::new(VmConfig::new(RANK, RANKS))
}

fn id() -> ProgramId {
    ProgramId::of_name("t")
}

/// Loads and starts `module`; returns the VM and the outcome of the initialisation block.
fn start(module: &[u8], host: &mut TestHost) -> (Vm, Outcome) {
    let mut vm = vm();
    vm.load(module).expect("loads");
    let outcome = vm.run(id(), host);
    (vm, outcome)
}

/// Runs `body` as the initialisation block and returns what it displayed.
fn shown(decls: &str, body: &str) -> Vec<i64> {
    let mut host = TestHost::default();
    let (_, outcome) = start(&program(decls, body, ""), &mut host);
    assert!(matches!(outcome, Outcome::Awaiting { .. }), "{outcome:?}");
    host.shown_by(id())
}

/// A message for trigger 1 from program 77 on rank 2.
fn message(payload: &[u8]) -> Message<'_> {
    Message {
        program: id(),
        trigger: 1,
        payload,
        source: Source {
            rank: 2,
            program: Some(ProgramId(77)),
        },
    }
}

/// Starts a program whose trigger 1 runs `body`, sends it `payload`, and returns the outcome
/// and the host.
fn on_message(decls: &str, body: &str, payload: &[u8]) -> (Outcome, TestHost, Vm) {
    let mut host = TestHost::default().with_segment(3, 64);
    let (mut vm, _) = start(&program(decls, "", body), &mut host);
    let outcome = vm.dispatch(&message(payload), &mut host);
    (outcome, host, vm)
}

fn trap_of(outcome: Outcome) -> TrapKind {
    match outcome {
        Outcome::Trapped(trap) => trap.kind,
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn assignments_to_scalars_and_array_elements_with_constant_and_run_time_indices() {
    assert_eq!(
        shown(
            "VAR x, a[4], i; CONST k = 2;",
            "x := 5; a[0] = x; i = 3; a[i] = 40 + x; a[k] = a[i] - 1; \
             DISPLAY x; DISPLAY a[0]; DISPLAY a[i]; DISPLAY a[2]; DISPLAY a[1]"
        ),
        [5, 5, 45, 44, 0]
    );
}

#[test]
fn arithmetic_wraps_divides_toward_zero_and_compares_signed() {
    assert_eq!(
        shown(
            "VAR x, y, big;",
            "x = 7; y = -2; big = 9223372036854775807; \
             DISPLAY x + y; DISPLAY x - y; DISPLAY x * y; DISPLAY x / y; DISPLAY x MOD y; \
             DISPLAY -x MOD 3; DISPLAY -x; DISPLAY +x; DISPLAY big + 1; DISPLAY (x + y) * 2"
        ),
        [5, 9, -14, -3, 1, -1, -7, 7, i64::MIN, 10]
    );
    assert_eq!(
        shown(
            "VAR x, y;",
            "x = 3; y = -4; \
             DISPLAY x = 3; DISPLAY x == 4; DISPLAY x <> y; DISPLAY x != 3; DISPLAY y < x; \
             DISPLAY x <= 3; DISPLAY y > x; DISPLAY x >= 4"
        ),
        [1, 0, 1, 0, 1, 1, 0, 0]
    );
}

#[test]
fn logic_is_short_circuit_and_gives_0_or_1() {
    // The right operand of AND after a false left one, and of OR after a true one, is not
    // evaluated: its division by zero would trap.
    assert_eq!(
        shown(
            "VAR x, z;",
            "x = 5; z = 0; \
             DISPLAY x AND 7; DISPLAY x AND z; DISPLAY z AND 1 / z; \
             DISPLAY z OR 9; DISPLAY z OR z; DISPLAY x OR 1 / z; \
             DISPLAY NOT x; DISPLAY NOT z; DISPLAY NOT NOT x"
        ),
        [1, 0, 0, 1, 0, 1, 0, 1, 1]
    );
}

#[test]
fn if_else_while_and_blocks() {
    assert_eq!(
        shown(
            "VAR i, sum;",
            "i = 0; sum = 0; \
             WHILE i < 10 DO BEGIN sum = sum + i; i = i + 1 END; DISPLAY sum; \
             IF sum > 40 THEN DISPLAY 1 ELSE DISPLAY 2; \
             IF sum < 40 THEN DISPLAY 3; ELSE BEGIN DISPLAY 4; DISPLAY 5 END; \
             IF 0 THEN DISPLAY 6; \
             WHILE 0 DO DISPLAY 7; \
             BEGIN BEGIN DISPLAY 8 END END"
        ),
        [45, 1, 4, 5, 8]
    );
}

#[test]
fn clock_rank_nranks_msglen_and_msgsrc() {
    let mut host = TestHost {
        now: 123_456_789,
        ..TestHost::default()
    };
    let bytes = program(
        "",
        "DISPLAY CLOCK; DISPLAY RANK; DISPLAY NRANKS; DISPLAY MSGLEN; DISPLAY MSGSRC",
        "DISPLAY MSGLEN; DISPLAY MSGSRC",
    );
    let (mut vm, _) = start(&bytes, &mut host);
    // In the initialisation block there is no message: MSGLEN 0, MSGSRC this rank.
    assert_eq!(host.shown_by(id()), [123_456_789, 1, 3, 0, 1]);
    let _ = vm.dispatch(&message(b"eleven byte"), &mut host);
    assert_eq!(host.shown_by(id())[5..], [11, 2]);
}

#[test]
fn send_to_a_program_by_name_or_id_on_a_rank_or_this_one() {
    let (outcome, host, _) = on_message(
        "VAR buf[4];",
        "buf[0] = 1; buf[1] = 2; buf[2] = 3; \
         SEND buf LEN 24 AS 9 TO other AT 2; \
         SEND buf[1] LEN 8 AS 10 TO 415; \
         SEND buf[2] LEN 0 AS 11 TO 5 AT MSGSRC",
        b"",
    );
    // Three stores of two instructions, three sends of six (five operands, SEND), AWAIT.
    assert_eq!(outcome, Outcome::Awaiting { instructions: 25 });
    let word = |v: i64| v.to_le_bytes().to_vec();
    let expected = |rank, to, trigger, payload| Sent {
        from: id(),
        rank,
        to: Destination::Program(to),
        trigger,
        payload,
    };
    assert_eq!(
        host.outbox,
        [
            expected(
                2,
                ProgramId::of_name("other"),
                9,
                [word(1), word(2), word(3)].concat()
            ),
            expected(RANK, ProgramId(415), 10, word(2)),
            expected(2, ProgramId(5), 11, vec![]),
        ]
    );
}

#[test]
fn reply_goes_to_the_sending_program_or_to_the_sending_host() {
    let bytes = program("VAR v;", "", "v = 42; REPLY v LEN 8 AS 6");
    let mut host = TestHost::default();
    let (mut vm, _) = start(&bytes, &mut host);
    let _ = vm.dispatch(&message(b""), &mut host);
    let from_host = Message {
        source: Source {
            rank: 0,
            program: None,
        },
        ..message(b"")
    };
    let _ = vm.dispatch(&from_host, &mut host);
    let to: Vec<(u32, Destination, u16)> = host
        .outbox
        .iter()
        .map(|s| (s.rank, s.to, s.trigger))
        .collect();
    assert_eq!(
        to,
        [
            (2, Destination::Program(ProgramId(77)), 6),
            (0, Destination::Host, 6)
        ]
    );
    assert_eq!(host.outbox[0].payload, 42i64.to_le_bytes());
}

#[test]
fn receive_copies_the_payload_and_reads_zeros_past_its_end() {
    let (_, host, _) = on_message(
        "VAR a[3];",
        "a[2] = -1; RECEIVE a LEN 24; DISPLAY a[0]; DISPLAY a[1]; DISPLAY a[2]; \
         RECEIVE a[1] OFFSET 8 LEN 8; DISPLAY a[1]; RECEIVE a OFFSET 100 LEN 8; DISPLAY a[0]",
        &[7i64.to_le_bytes(), 8i64.to_le_bytes()].concat()[..12],
    );
    // 12 bytes: a[0] = 7, a[1] = the low 4 bytes of 8, a[2] = 0 (past the end).
    assert_eq!(host.shown_by(id()), [7, 8, 0, 8, 0]);
}

#[test]
fn deliver_and_get_move_bytes_between_variables_and_a_shared_segment() {
    let mut host = TestHost::default().with_segment(3, 64);
    host.set_word(3, 32, 1234);
    let bytes = program(
        "VAR a[4], b[2];",
        "a[0] = 10; a[1] = 11; a[2] = 12; \
         DELIVER a[1] OFFSET 8 INTO 3 LEN 16; \
         GET b FROM 3 OFFSET 32 LEN 8; DISPLAY b[0]; \
         GET b[1] FROM 3 OFFSET 8 LEN 8; DISPLAY b[1]",
        "",
    );
    let _ = start(&bytes, &mut host);
    assert_eq!(
        (host.word(3, 0), host.word(3, 8), host.word(3, 16)),
        (0, 11, 12)
    );
    assert_eq!(host.shown_by(id()), [1234, 11]);
}

#[test]
fn locks_and_flags_are_the_programs_half_of_the_handshake() {
    let mut host = TestHost::default();
    host.set_lock(id(), 5);
    let bytes = program(
        "",
        "DISPLAY LOCKED(5); DISPLAY LOCKED(6); CLEARLOCK 5; DISPLAY LOCKED(5); \
         SETFLAG 63; SETFLAG 0",
        "",
    );
    let _ = start(&bytes, &mut host);
    assert_eq!(host.shown_by(id()), [1, 0, 0]);
    assert_eq!(host.locks[&id()], 0);
    assert!(host.flag(id(), 63) && host.flag(id(), 0) && !host.flag(id(), 1));
}

#[test]
fn await_stop_drop_and_pass_end_the_activation_with_their_verdict() {
    let decls = "VAR n;";
    let body = "n = n + 1; \
                IF MSGLEN = 1 THEN AWAIT; IF MSGLEN = 2 THEN DROP; IF MSGLEN = 3 THEN PASS; \
                IF MSGLEN = 4 THEN STOP; DISPLAY n";
    let mut host = TestHost::default();
    let (mut vm, _) = start(&program(decls, "", body), &mut host);
    let mut verdicts = Vec::new();
    for payload in [&b"a"[..], b"bb", b"ccc", b""] {
        let outcome = vm.dispatch(&message(payload), &mut host);
        verdicts.push((outcome.verdict(), std::mem::discriminant(&outcome)));
    }
    let kinds: Vec<Verdict> = verdicts.iter().map(|v| v.0).collect();
    assert_eq!(
        kinds,
        [
            Verdict::Consumed,
            Verdict::Dropped,
            Verdict::Passed,
            Verdict::Consumed
        ]
    );
    // Nothing after AWAIT, DROP or PASS ran; the fourth activation reached its end.
    assert_eq!(host.shown_by(id()), [4]);
    let stats = vm.program(id()).unwrap().stats;
    assert_eq!((stats.activations, stats.dropped, stats.passed), (5, 1, 1));

    let outcome = vm.dispatch(&message(b"dddd"), &mut host);
    assert!(matches!(outcome, Outcome::Stopped { .. }), "{outcome:?}");
    assert_eq!(outcome.verdict(), Verdict::Consumed);
    assert!(vm.program(id()).is_none(), "STOP unloads the program");
    assert_eq!(vm.free().instructions, vm.config().code_pool_instructions);
}

#[test]
fn variables_keep_their_values_between_activations() {
    let bytes = program("VAR n;", "n = 100", "n = n + MSGLEN; DISPLAY n");
    let mut host = TestHost::default();
    let (mut vm, _) = start(&bytes, &mut host);
    for payload in [&b"x"[..], b"yy", b"zzz"] {
        let _ = vm.dispatch(&message(payload), &mut host);
    }
    assert_eq!(host.shown_by(id()), [101, 103, 106]);
}

#[test]
fn run_time_checks_trap_with_their_reason_and_disable_the_program() {
    let cases: Vec<(&str, &str, TrapKind)> = vec![
        ("VAR z;", "DISPLAY 1 / z", TrapKind::DivisionByZero),
        ("VAR z;", "DISPLAY 1 MOD z", TrapKind::DivisionByZero),
        (
            "VAR a[4], i;",
            "i = 4; DISPLAY a[i]",
            TrapKind::IndexOutOfBounds { index: 4, words: 4 },
        ),
        (
            "VAR a[4], i;",
            "i = -1; a[i] = 0",
            TrapKind::IndexOutOfBounds {
                index: -1,
                words: 4,
            },
        ),
        (
            "VAR a[4], n;",
            "n = 5000; SEND a LEN n AS 1 TO 1",
            TrapKind::LengthOutOfRange { len: 5000 },
        ),
        (
            "VAR a[4], i;",
            "i = 3; SEND a[i] LEN 16 AS 1 TO 1",
            TrapKind::TransferOutOfBounds {
                index: 3,
                len: 16,
                bytes: 32,
            },
        ),
        (
            "VAR a[4], t;",
            "t = 65536; SEND a LEN 8 AS t TO 1",
            TrapKind::TriggerOutOfRange(65536),
        ),
        (
            "VAR a[4], p;",
            "p = -1; SEND a LEN 8 AS 1 TO p",
            TrapKind::ProgramOutOfRange(-1),
        ),
        (
            "VAR a[4];",
            "SEND a LEN 8 AS 1 TO 1 AT NRANKS",
            TrapKind::RankOutOfRange { rank: 3, ranks: 3 },
        ),
        (
            "VAR a[4], s;",
            "s = 70000; DELIVER a OFFSET 0 INTO s LEN 8",
            TrapKind::SegmentOutOfRange(70000),
        ),
        (
            "VAR a[4], o;",
            "o = -8; GET a FROM 3 OFFSET o LEN 8",
            TrapKind::NegativeOffset(-8),
        ),
        (
            "VAR a[4], o;",
            "o = -8; RECEIVE a OFFSET o LEN 8",
            TrapKind::NegativeOffset(-8),
        ),
        ("VAR n;", "n = 64; SETFLAG n", TrapKind::LockOutOfRange(64)),
        (
            "VAR n;",
            "n = -1; CLEARLOCK n",
            TrapKind::LockOutOfRange(-1),
        ),
        (
            "VAR n;",
            "n = 99; DISPLAY LOCKED(n)",
            TrapKind::LockOutOfRange(99),
        ),
        (
            "VAR a[4];",
            "DELIVER a OFFSET 0 INTO 9 LEN 8",
            TrapKind::Segment(SegmentError::NoSuchSegment(9)),
        ),
        (
            "VAR a[4];",
            "GET a FROM 3 OFFSET 60 LEN 8",
            TrapKind::Segment(SegmentError::OutOfBounds {
                segment: 3,
                offset: 60,
                len: 8,
                size: 64,
            }),
        ),
    ];
    for (decls, body, expected) in cases {
        let (outcome, host, mut vm) = on_message(decls, body, b"");
        assert_eq!(trap_of(outcome), expected, "{body}");
        assert_eq!(outcome.verdict(), Verdict::Dropped);
        assert!(host.outbox.is_empty(), "{body}: nothing sent");
        // Disabled: further messages are refused and counted; the program stays loaded.
        let info = vm.program(id()).expect("stays loaded");
        assert!(matches!(info.state, ProgramState::Disabled(_)), "{body}");
        let again = vm.dispatch(&message(b""), &mut TestHost::default());
        assert_eq!(again, Outcome::Refused(nicmsg_vm::Refusal::Disabled(id())));
        assert_eq!(vm.program(id()).unwrap().stats.disabled, 1);
    }
}

#[test]
fn a_trap_reports_the_code_offset_of_the_instruction() {
    let source =
        "PROGRAM t: VAR z; TRIGGERS 1; BEGIN END; MESSAGE 1: BEGIN DISPLAY 1 / z END; END.";
    let compiled = nicmsg_pdl::compile(source).unwrap();
    let listing = nicmsg_pdl::disasm(&compiled);
    let div_line = listing
        .lines()
        .find(|l| l.contains("DIV"))
        .expect("a DIV in the listing");
    let offset = u32::from_str_radix(div_line.split_whitespace().next().unwrap(), 16).unwrap();
    let mut host = TestHost::default();
    let (mut vm, _) = start(&compiled.encode().unwrap(), &mut host);
    let Outcome::Trapped(trap) = vm.dispatch(&message(b""), &mut host) else {
        panic!("expected a trap");
    };
    assert_eq!(trap.pc, offset, "{listing}");
    assert_eq!(trap.program, id());
    assert_eq!(trap.instructions, 3, "PUSH, LOAD, and the DIV that trapped");
    assert!(trap.to_string().contains("division by zero"), "{trap}");
}

#[test]
fn a_refused_send_traps_with_the_hosts_reason() {
    let mut host = TestHost {
        refuse_sends: Some("queue full"),
        ..TestHost::default()
    };
    let bytes = program("VAR a;", "SEND a LEN 8 AS 1 TO 1", "");
    let (_, outcome) = start(&bytes, &mut host);
    assert_eq!(
        trap_of(outcome),
        TrapKind::SendRefused(SendRefused("queue full"))
    );
}

//! PANIC through the Rust API in one process: a one-rank job whose engine runs the paper's
//! programs (figure 2's ping against a pong, figure 4's delivertest), answers requests, refuses
//! bad modules with reasons, and stops a runaway program while messaging goes on. In both
//! engine modes. The multi-rank runs are in `jobs.rs`.

use nicmsg::{Comm, EngineMode, Error, Options, ProgramId, Source, TagMatch};
use std::time::{Duration, Instant};

fn solo(engine: EngineMode) -> Comm {
    std::env::set_var("NICMSG_RANK", "0");
    std::env::set_var("NICMSG_SIZE", "1");
    let options = Options {
        engine,
        ..Options::default()
    };
    Comm::init_with(options).expect("a one-rank job needs no network")
}

const MODES: [EngineMode; 2] = [EngineMode::Thread, EngineMode::Inline];

fn example(name: &str) -> String {
    let path = format!(
        "{}/../../examples/pdl/{name}.pdl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn module(source: &str) -> Vec<u8> {
    let compiled = nicmsg_pdl::compile(source)
        .unwrap_or_else(|errors| panic!("{}", nicmsg_pdl::render_all("test.pdl", source, &errors)));
    compiled.encode().expect("a compiled module encodes")
}

/// Polls `done` for up to 10 s, letting an inline engine run meanwhile.
fn eventually(comm: &Comm, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        // A zero-byte self-message is a cheap way to give an inline engine a few turns.
        let mut none = [0u8; 0];
        let receive = comm
            .irecv(&mut none, Source::Rank(0), TagMatch::Tag(1))
            .unwrap();
        comm.send(&[], 0, 1).unwrap();
        receive.wait().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn figure_2_ping_records_100_round_trips_against_a_pong() {
    for mode in MODES {
        let comm = solo(mode);
        let programs = comm.programs();
        let pong = programs
            .load_as(0, ProgramId(415), &module(&example("pong")))
            .unwrap();
        assert_eq!(pong, ProgramId(415));
        programs.run(0, pong).unwrap();
        // Figure 2 unchanged but for the node: this job has one rank.
        let ping_source = example("ping").replace("AT 1", "AT 0");
        let ping = programs.load(0, &module(&ping_source)).unwrap();
        assert_eq!(ping, ProgramId::of_name("ping"));
        programs.run(0, ping).unwrap();
        let mut shown = Vec::new();
        eventually(&comm, "ping's 200 values", || {
            shown.extend(programs.output(0, Some(ping)).unwrap());
            shown.len() >= 200
        });
        assert_eq!(shown.len(), 200, "{mode:?}");
        for pair in shown.chunks(2) {
            let (sent, received) = (pair[0].value, pair[1].value);
            assert!(
                sent > 0 && received >= sent,
                "{mode:?}: {sent} then {received}"
            );
        }
        // STOP unloaded ping; pong stays.
        let listing = programs.list(0).unwrap();
        assert!(
            listing.contains("pong") && !listing.contains("ping "),
            "{listing}"
        );
    }
}

#[test]
fn figure_4_delivertest_writes_into_a_host_segment() {
    for mode in MODES {
        let comm = solo(mode);
        let programs = comm.programs();
        let mut memory = [0u8; 64];
        let segment = programs.share(2, &mut memory).unwrap();
        let id = programs.load(0, &module(&example("delivertest"))).unwrap();
        programs.run(0, id).unwrap();
        programs.send(0, id, 10, b"go").unwrap();
        let mut words = [0u8; 24];
        eventually(&comm, "the delivery", || {
            segment.read(0, &mut words).unwrap();
            words[0] == 2
        });
        let word = |i: usize| i64::from_le_bytes(words[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!([word(0), word(1), word(2)], [2, 3, 4], "{mode:?}");
        drop(segment);
    }
}

/// The other two copies through a segment: the host's `Segment::write`, and a program's `GET`
/// out of it (then `DELIVER`ed back further on, which the test above already checks). Long
/// enough for `copy_raw`'s block copy, should the addresses fall in its window.
#[test]
fn a_program_gets_what_the_host_wrote_into_a_segment() {
    const LEN: usize = 2048;
    const BACK: usize = 2 * LEN + 16;
    let source = "PROGRAM getback:\n\
                  VAR buf[256];\n\
                  TRIGGERS 10;\n\
                  BEGIN AWAIT END;\n\
                  MESSAGE 10: BEGIN\n\
                  GET buf FROM 2 OFFSET 8 LEN 2048;\n\
                  DELIVER buf OFFSET 4112 INTO 2 LEN 2048;\n\
                  AWAIT\n\
                  END;\n\
                  END.\n";
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 1) as u8).collect();
    for mode in MODES {
        let comm = solo(mode);
        let programs = comm.programs();
        let mut memory = vec![0u8; BACK + LEN];
        let segment = programs.share(2, &mut memory).unwrap();
        segment.write(8, &pattern).unwrap();
        let id = programs.load(0, &module(source)).unwrap();
        programs.run(0, id).unwrap();
        programs.send(0, id, 10, b"go").unwrap();
        let mut back = vec![0u8; LEN];
        eventually(&comm, "the copy back", || {
            segment.read(BACK, &mut back).unwrap();
            back[LEN - 1] != 0
        });
        assert!(
            back == pattern,
            "{mode:?}: the bytes got and delivered back differ"
        );
        drop(segment);
    }
}

/// An empty slice's address is dangling, and the engine gives every segment at least one byte:
/// sharing one would let a program's `DELIVER` write through that address.
#[test]
fn an_empty_segment_is_refused() {
    let comm = solo(EngineMode::Thread);
    let refused = comm.programs().share(2, &mut []).map(|_| ());
    assert!(matches!(refused, Err(Error::BadBuffer(_))), "{refused:?}");
}

#[test]
fn replies_reach_the_host_and_flags_wake_it() {
    for mode in MODES {
        let comm = solo(mode);
        let programs = comm.programs();
        let source = "PROGRAM echo: VAR n, buf[16]; TRIGGERS 1;
            BEGIN AWAIT END;
            MESSAGE 1: BEGIN
              n = n + 1;
              RECEIVE buf LEN MSGLEN;
              REPLY buf LEN MSGLEN AS 2;
              SETFLAG 5
            END; END.";
        let echo = programs.load(0, &module(source)).unwrap();
        programs.run(0, echo).unwrap();
        programs.send(0, echo, 1, b"hello engine").unwrap();
        programs.wait_flag(echo, 5).unwrap();
        let mut buffer = [0u8; 64];
        let reply = programs.receive(2, &mut buffer).unwrap();
        assert_eq!(&buffer[..reply.len], b"hello engine", "{mode:?}");
        assert_eq!((reply.origin, reply.program, reply.trigger), (0, echo, 2));
        programs.clear_flag(echo, 5).unwrap();
        assert!(!programs.flag(echo, 5).unwrap());
        // A request and its reply in one call (the reply's receive is posted first).
        let reply = programs
            .call((0, echo, 1), b"again", 2, &mut buffer)
            .unwrap();
        assert_eq!(&buffer[..reply.len], b"again", "{mode:?}");
    }
}

#[test]
fn bad_requests_are_refused_with_their_reason() {
    for mode in MODES {
        let comm = solo(mode);
        let programs = comm.programs();
        let refused = programs.load(0, b"not a module").unwrap_err();
        assert!(
            matches!(&refused, Error::Program { rank: 0, reason, .. } if !reason.is_empty()),
            "{refused}"
        );
        let missing = programs.unload(0, ProgramId(99)).unwrap_err();
        assert!(missing.to_string().contains("99"), "{missing}");
        assert!(matches!(
            programs.run(0, ProgramId(98)),
            Err(Error::Program { .. })
        ));
        // Messages for no program are dropped (counted), not an error of the sender.
        programs.send(0, ProgramId(97), 1, b"x").unwrap();
    }
}

#[test]
fn a_runaway_program_is_stopped_and_messaging_goes_on() {
    for mode in MODES {
        let comm = solo(mode);
        let programs = comm.programs();
        let spin = "PROGRAM spin: VAR i; TRIGGERS 1;
            BEGIN AWAIT END;
            MESSAGE 1: BEGIN WHILE 1 DO i = i + 1 END; END.";
        let id = programs.load(0, &module(spin)).unwrap();
        programs.run(0, id).unwrap();
        programs.send(0, id, 1, b"").unwrap();
        eventually(&comm, "the trap", || {
            programs.list(0).unwrap().contains("disabled")
        });
        let listing = programs.list(0).unwrap();
        assert!(listing.contains("budget"), "{listing}");
        let mut buffer = [0u8; 10];
        let receive = comm
            .irecv(&mut buffer, Source::Rank(0), TagMatch::Tag(3))
            .unwrap();
        comm.send(b"still here", 0, 3).unwrap();
        receive.wait().unwrap();
        assert_eq!(&buffer, b"still here");
        // A trap in the initialisation block is the answer to `run`.
        let spin_init = "PROGRAM spininit: VAR i; BEGIN WHILE 1 DO i = i + 1 END; END.";
        let id = programs.load(0, &module(spin_init)).unwrap();
        let trapped = programs.run(0, id).unwrap_err();
        assert!(trapped.to_string().contains("budget"), "{trapped}");
    }
}

#[test]
fn an_engine_without_programs_says_so() {
    std::env::set_var("NICMSG_RANK", "0");
    std::env::set_var("NICMSG_SIZE", "1");
    let options = Options {
        programs: false,
        ..Options::default()
    };
    let comm = Comm::init_with(options).unwrap();
    let refused = comm
        .programs()
        .load(0, &module(&example("pong")))
        .unwrap_err();
    assert!(refused.to_string().contains("NICMSG_PROGRAMS"), "{refused}");
}

//! Loading, starting, unloading and replacing programs at run time; the bounded pools; the
//! instruction budget; refused messages.

mod common;

use common::{module, TestHost};
use nicmsg_vm::{
    LoadError, Message, Outcome, ProgramId, ProgramState, Refusal, Source, TrapKind, Verdict, Vm,
    VmConfig,
};

/// A program `name` whose trigger 1 adds the message length to `n` and displays it, with an
/// array of `words` words to take data memory.
fn counter(name: &str, words: usize) -> Vec<u8> {
    module(&format!(
        "PROGRAM {name}: VAR n, pad[{words}]; TRIGGERS 1;\n\
         BEGIN n = 1000 END;\n\
         MESSAGE 1: BEGIN n = n + MSGLEN; pad[{last}] = n; DISPLAY n END;\nEND.",
        last = words - 1
    ))
}

fn message(program: ProgramId, trigger: u16, payload: &[u8]) -> Message<'_> {
    Message {
        program,
        trigger,
        payload,
        source: Source {
            rank: 0,
            program: None,
        },
    }
}

fn vm() -> Vm {
    Vm::new(VmConfig::new(0, 2))
}

#[test]
fn a_runaway_program_is_stopped_by_the_budget_and_the_others_go_on() {
    let mut vm = Vm::new(VmConfig {
        budget: 10_000,
        ..VmConfig::new(0, 2)
    });
    let mut host = TestHost::default();
    let runaway = vm
        .load(&module(
            "PROGRAM runaway: VAR x; TRIGGERS 1; MESSAGE 1: BEGIN WHILE 1 DO x = x + 1 END; END.",
        ))
        .unwrap();
    let good = vm.load(&counter("good", 1)).unwrap();
    for id in [runaway.id, good.id] {
        assert!(matches!(vm.run(id, &mut host), Outcome::Awaiting { .. }));
    }

    let outcome = vm.dispatch(&message(runaway.id, 1, b""), &mut host);
    let Outcome::Trapped(trap) = outcome else {
        panic!("expected a trap: {outcome:?}");
    };
    assert_eq!(trap.kind, TrapKind::BudgetExhausted { budget: 10_000 });
    assert_eq!(trap.instructions, 10_000);
    assert_eq!(outcome.verdict(), Verdict::Dropped);
    // The loop ran: x counts its iterations, 7 instructions each (PUSH 1, JZ, LOAD, PUSH,
    // ADD, STORE, LOOP), so 10,000 instructions are 1,428 whole iterations.
    let x = i64::from_le_bytes(vm.data(runaway.id).unwrap()[..8].try_into().unwrap());
    assert_eq!(x, 10_000 / 7);

    // Disabled, it stays loaded for inspection and refuses messages at no cost.
    let info = vm.program(runaway.id).unwrap();
    assert_eq!(info.state, ProgramState::Disabled(trap));
    assert_eq!(
        vm.dispatch(&message(runaway.id, 1, b""), &mut host),
        Outcome::Refused(Refusal::Disabled(runaway.id))
    );
    // The other program runs as before.
    assert!(matches!(
        vm.dispatch(&message(good.id, 1, b"abc"), &mut host),
        Outcome::Awaiting { .. }
    ));
    assert_eq!(host.shown_by(good.id), [1003]);
    let stats = vm.stats();
    assert_eq!((stats.traps, stats.disabled), (1, 1));

    // Replacing it with a fixed program brings the id back.
    let fixed = vm
        .replace(
            runaway.id,
            &module("PROGRAM runaway: TRIGGERS 1; MESSAGE 1: BEGIN DISPLAY 7 END; END."),
        )
        .unwrap();
    assert_eq!(fixed.id, runaway.id);
    assert_ne!(fixed.generation, runaway.generation);
    let _ = vm.run(fixed.id, &mut host);
    let _ = vm.dispatch(&message(fixed.id, 1, b""), &mut host);
    assert_eq!(host.shown_by(fixed.id), [7]);
}

#[test]
fn unload_and_replace_move_nothing_but_the_program_concerned() {
    let mut vm = vm();
    let mut host = TestHost::default();
    let ids: Vec<ProgramId> = ["a", "b", "c"]
        .iter()
        .map(|name| vm.load(&counter(name, 50)).unwrap().id)
        .collect();
    for &id in &ids {
        let _ = vm.run(id, &mut host);
        let _ = vm.dispatch(&message(id, 1, &[0; 5]), &mut host);
    }
    let data_of = |vm: &Vm, id| vm.data(id).unwrap().to_vec();
    let (b_before, c_before) = (data_of(&vm, ids[1]), data_of(&vm, ids[2]));

    // Unloading the first program slides b and c down in both pools; their variables and
    // code stay intact.
    let free_before = vm.free();
    vm.unload(ids[0]).unwrap();
    assert_eq!(vm.free().data_bytes, free_before.data_bytes + 51 * 8);
    assert_eq!(data_of(&vm, ids[1]), b_before);
    assert_eq!(data_of(&vm, ids[2]), c_before);
    for &id in &ids[1..] {
        let _ = vm.dispatch(&message(id, 1, &[0; 2]), &mut host);
    }
    assert_eq!(host.shown_by(ids[1]), [1005, 1007]);
    assert_eq!(host.shown_by(ids[2]), [1005, 1007]);
    assert_eq!(
        vm.dispatch(&message(ids[0], 1, b""), &mut host),
        Outcome::Refused(Refusal::UnknownProgram(ids[0]))
    );

    // Replacing b (larger now) keeps c's state; the new b starts afresh.
    let new_b = vm.replace(ids[1], &counter("b", 500)).unwrap();
    assert_eq!(
        vm.program(ids[1]).unwrap().state,
        ProgramState::Loaded,
        "a replaced program waits for run"
    );
    assert_eq!(
        vm.dispatch(&message(ids[1], 1, b""), &mut host),
        Outcome::Refused(Refusal::NotStarted(ids[1]))
    );
    let _ = vm.run(new_b.id, &mut host);
    let _ = vm.dispatch(&message(ids[1], 1, &[0; 1]), &mut host);
    let _ = vm.dispatch(&message(ids[2], 1, &[0; 1]), &mut host);
    assert_eq!(host.shown_by(ids[1]), [1005, 1007, 1001]);
    assert_eq!(host.shown_by(ids[2]), [1005, 1007, 1008]);
    let listed: Vec<String> = vm.programs().map(|p| p.name).collect();
    assert_eq!(listed.len(), 2);

    // A program loaded into the freed space starts with zeroed variables.
    let again = vm.load(&counter("a", 50)).unwrap();
    assert!(vm.data(again.id).unwrap().iter().all(|&b| b == 0));
}

#[test]
fn a_failed_replace_leaves_the_old_program_running() {
    let mut vm = vm();
    let mut host = TestHost::default();
    let a = vm.load(&counter("a", 1)).unwrap();
    let _ = vm.run(a.id, &mut host);
    let _ = vm.dispatch(&message(a.id, 1, b"xy"), &mut host);

    let mut corrupt = counter("a", 1);
    *corrupt.last_mut().unwrap() ^= 0xFF;
    assert!(matches!(
        vm.replace(a.id, &corrupt),
        Err(LoadError::Module(_))
    ));
    assert!(matches!(
        vm.replace(ProgramId(3), &counter("a", 1)),
        Err(LoadError::NotLoaded(ProgramId(3)))
    ));
    let _ = vm.dispatch(&message(a.id, 1, b"z"), &mut host);
    assert_eq!(host.shown_by(a.id), [1002, 1003]);
    assert_eq!(vm.program(a.id).unwrap().handle, a);
}

#[test]
fn the_pools_are_bounded_and_a_refused_load_changes_nothing() {
    let mut vm = Vm::new(VmConfig {
        program_slots: 2,
        code_pool_instructions: 100,
        data_pool_bytes: 1024,
        ..VmConfig::new(0, 1)
    });
    let small = counter("small", 10);
    vm.load(&small).unwrap();
    assert_eq!(
        vm.load(&small),
        Err(LoadError::IdInUse(ProgramId::of_name("small")))
    );
    // Data: 1024 - 88 bytes are left.
    assert_eq!(
        vm.load(&counter("big", 200)),
        Err(LoadError::DataPoolFull {
            need: 201 * 8,
            free: 1024 - 88
        })
    );
    // Code: a long program needs more than the 100 instructions of the pool.
    let long = module(&format!(
        "PROGRAM long: VAR x; BEGIN {} END; END.",
        "x = x + 1;".repeat(30)
    ));
    assert!(matches!(
        vm.load(&long),
        Err(LoadError::CodePoolFull { need: 121, .. })
    ));
    vm.load_as(ProgramId(1), &small).unwrap();
    assert_eq!(
        vm.load_as(ProgramId(2), &small),
        Err(LoadError::NoFreeSlot { slots: 2 })
    );
    assert_eq!(
        vm.load_as(ProgramId(0x8000_0000), &small),
        Err(LoadError::NotExplicit(ProgramId(0x8000_0000)))
    );
    assert_eq!(vm.programs().count(), 2);
    // Unloading makes room again.
    vm.unload(ProgramId(1)).unwrap();
    vm.load_as(ProgramId(2), &small).unwrap();
    assert_eq!(
        vm.unload(ProgramId(1)),
        Err(Refusal::UnknownProgram(ProgramId(1)))
    );
}

#[test]
fn messages_for_unknown_programs_or_triggers_or_programs_not_started_are_counted_and_dropped() {
    let mut vm = vm();
    let mut host = TestHost::default();
    let a = vm.load(&counter("a", 1)).unwrap();
    let outcomes = [
        vm.dispatch(&message(a.id, 1, b""), &mut host),
        vm.run(a.id, &mut host),
        vm.run(a.id, &mut host),
        vm.dispatch(&message(a.id, 2, b""), &mut host),
        vm.dispatch(&message(ProgramId(9), 1, b""), &mut host),
        vm.run(ProgramId(9), &mut host),
    ];
    assert_eq!(
        outcomes,
        [
            Outcome::Refused(Refusal::NotStarted(a.id)),
            Outcome::Awaiting { instructions: 3 },
            Outcome::Refused(Refusal::AlreadyStarted(a.id)),
            Outcome::Refused(Refusal::UnknownTrigger {
                program: a.id,
                trigger: 2
            }),
            Outcome::Refused(Refusal::UnknownProgram(ProgramId(9))),
            Outcome::Refused(Refusal::UnknownProgram(ProgramId(9))),
        ]
    );
    for outcome in &outcomes[3..] {
        assert_eq!(outcome.verdict(), Verdict::Dropped);
        assert_eq!(outcome.instructions(), 0);
    }
    let stats = vm.stats();
    assert_eq!(
        (
            stats.not_started,
            stats.unknown_trigger,
            stats.unknown_program,
            stats.activations
        ),
        (1, 1, 2, 1)
    );
    let per_program = vm.program(a.id).unwrap().stats;
    assert_eq!(
        (per_program.not_started, per_program.unknown_trigger),
        (1, 1)
    );
    assert!(host.calls.is_empty(), "nothing reached the host");
}

#[test]
fn program_info_describes_a_loaded_program() {
    let mut vm = vm();
    let a = vm
        .load(&module(
            "PROGRAM info: VAR a[3]; TRIGGERS 9, 4; BEGIN END; \
             MESSAGE 9: BEGIN END; MESSAGE 4: BEGIN END; END.",
        ))
        .unwrap();
    let info = vm.program(a.id).unwrap();
    assert_eq!(info.name, "info");
    assert_eq!(info.triggers, [4, 9]);
    assert_eq!(info.data_bytes, 24);
    assert_eq!(info.instructions, 3, "three AWAITs");
    assert_eq!(info.state, ProgramState::Loaded);
    assert_eq!(a.id.to_string(), format!("{:#010x}", a.id.0));
    assert_eq!(ProgramId(415).to_string(), "415");
}

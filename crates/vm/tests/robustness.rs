//! The VM never panics: random bytes and random instruction sequences as modules (nearly all
//! refused, with a reason), and random compiled programs run on random messages (they finish,
//! trap with a reason, or are stopped by the budget).

mod common;

use common::TestHost;
use nicmsg_pdl::isa::{Instr, Opcode};
use nicmsg_pdl::module::TriggerEntry;
use nicmsg_pdl::Module;
use nicmsg_vm::{Message, ProgramId, Source, Vm, VmConfig};
use proptest::prelude::*;

const BUDGET: u32 = 5_000;

fn vm() -> Vm {
    Vm::new(VmConfig {
        budget: BUDGET,
        ..VmConfig::new(1, 3)
    })
}

fn host() -> TestHost {
    TestHost::default()
        .with_segment(1, 64)
        .with_segment(2, 4096)
}

/// Loads `bytes`; if they load, runs the init block and sends `payload` to every trigger.
fn exercise(bytes: &[u8], payload: &[u8]) {
    let mut vm = vm();
    let mut host = host();
    let Ok(handle) = vm.load(bytes) else {
        return;
    };
    let outcomes = [vm.run(handle.id, &mut host)];
    let triggers = vm
        .program(handle.id)
        .map(|p| p.triggers)
        .unwrap_or_default();
    for outcome in outcomes.into_iter().chain(triggers.iter().map(|&trigger| {
        let message = Message {
            program: handle.id,
            trigger,
            payload,
            source: Source {
                rank: 2,
                program: Some(ProgramId(5)),
            },
        };
        vm.dispatch(&message, &mut host)
    })) {
        assert!(outcome.instructions() <= BUDGET, "{outcome:?}");
    }
}

/// A random instruction with operands drawn near the interesting edges.
fn instr() -> impl Strategy<Value = Instr> {
    let operand = prop_oneof![0u32..64, Just(u32::MAX), any::<u32>()];
    (
        prop::sample::select(Opcode::ALL.to_vec()),
        any::<i64>(),
        operand.clone(),
        operand,
    )
        .prop_map(|(op, imm, a, b)| {
            let mut code = vec![op as u8];
            match op.operands() {
                nicmsg_pdl::isa::Operands::None => {}
                nicmsg_pdl::isa::Operands::Imm64 => code.extend(imm.to_le_bytes()),
                nicmsg_pdl::isa::Operands::U32 => code.extend(a.to_le_bytes()),
                nicmsg_pdl::isa::Operands::Region => {
                    code.extend((a & !7).to_le_bytes());
                    code.extend((b % 64 * 8).to_le_bytes());
                }
            }
            Instr::decode(&code, 0).expect("built to decode").0
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_refused_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        exercise(&bytes, b"");
    }

    #[test]
    fn random_instruction_sequences_are_refused_or_run_within_the_budget(
        instrs in prop::collection::vec(instr(), 1..24),
        trigger_entry in 0usize..24,
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut code = Vec::new();
        let mut starts = Vec::new();
        for i in &instrs {
            starts.push(code.len() as u32);
            i.encode(&mut code);
        }
        let entry = starts[trigger_entry % starts.len()];
        let module = Module {
            name: "random".to_string(),
            data_len: 64,
            stack_depth: 32,
            init_entry: 0,
            triggers: vec![TriggerEntry { trigger: 1, entry }],
            symbols: Vec::new(),
            code,
        };
        exercise(&module.encode().expect("a valid format"), &payload);
    }

    #[test]
    fn random_compiled_programs_finish_trap_or_spend_their_budget(
        stmts in prop::collection::vec(statement(), 1..10),
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let body = stmts.join(";\n");
        let source = format!(
            "PROGRAM p: VAR x, i, a[4], buf[8]; TRIGGERS 1;\nBEGIN x = MSGLEN END;\n\
             MESSAGE 1: BEGIN {body} END;\nEND."
        );
        let module = match nicmsg_pdl::compile(&source) {
            Ok(m) => m,
            Err(e) => panic!("{}", nicmsg_pdl::render_all("p.pdl", &source, &e)),
        };
        exercise(&module.encode().unwrap(), &payload);
    }
}

/// Statements whose run-time operands may be anything: traps are expected, panics are not.
fn statement() -> impl Strategy<Value = String> {
    let e = prop::sample::select(vec![
        "x",
        "i",
        "a[i]",
        "a[x MOD 4]",
        "MSGLEN",
        "MSGSRC",
        "CLOCK",
        "x / i",
        "x MOD 3",
        "-x",
        "NRANKS",
        "RANK",
        "LOCKED(i MOD 64)",
        "buf[7]",
        "x * 4611686018427387904",
    ]);
    (e.clone(), e).prop_flat_map(|(a, b)| {
        prop::sample::select(vec![
            format!("x = {a}"),
            format!("i = {b}"),
            format!("a[{a}] = {b}"),
            format!("WHILE x < {a} DO x = x + 1"),
            format!("IF {a} THEN i = {b} ELSE AWAIT"),
            format!("SEND buf LEN {a} AS {b} TO {a} AT {b}"),
            format!("SEND buf[1] LEN 8 AS 1 TO p AT {a}"),
            format!("REPLY buf LEN MSGLEN AS 3"),
            format!("RECEIVE buf OFFSET {a} LEN {b}"),
            format!("RECEIVE buf LEN MSGLEN"),
            format!("DELIVER a OFFSET {a} INTO {b} LEN 16"),
            format!("GET buf FROM 2 OFFSET {a} LEN 64"),
            format!("DISPLAY {a}"),
            format!("SETFLAG {a}"),
            format!("CLEARLOCK {b}"),
            "IF MSGLEN = 3 THEN DROP".to_string(),
            "IF MSGLEN = 4 THEN PASS".to_string(),
            "IF MSGLEN = 5 THEN STOP".to_string(),
            "WHILE 1 DO x = x + 1".to_string(),
        ])
    })
}

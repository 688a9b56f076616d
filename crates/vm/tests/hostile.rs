//! Hand-made hostile modules, as they could arrive in a PDL-PROGRAM frame: one for every
//! verifier rule and every rule of the module format, each refused by `Vm::load` with its
//! reason, leaving the VM as it was.

use nicmsg_pdl::isa::{Instr, IsaError, Region};
use nicmsg_pdl::module::{Symbol, TriggerEntry, HEADER_LEN};
use nicmsg_pdl::{verify, Module, ModuleError, VerifyError};
use nicmsg_vm::limits::MAX_MODULE_BYTES;
use nicmsg_vm::{LoadError, Vm, VmConfig};

/// The bytes of `instrs`, one after another.
fn asm(instrs: &[Instr]) -> Vec<u8> {
    let mut code = Vec::new();
    for i in instrs {
        i.encode(&mut code);
    }
    code
}

/// A module with `code`, 16 bytes of data, a stack of 4 words and the init entry at 0.
fn with_code(code: Vec<u8>) -> Module {
    Module {
        name: "hostile".to_string(),
        data_len: 16,
        stack_depth: 4,
        init_entry: 0,
        triggers: Vec::new(),
        symbols: Vec::new(),
        code,
    }
}

/// Loads `bytes` into a fresh VM and returns the error; checks the VM is left empty.
fn refused(bytes: &[u8]) -> LoadError {
    let mut vm = Vm::new(VmConfig::new(0, 1));
    let free = vm.free();
    let error = vm
        .load(bytes)
        .expect_err("a hostile module must be refused");
    assert_eq!(vm.free(), free, "a refused load takes nothing");
    assert_eq!(vm.programs().count(), 0);
    assert!(!error.to_string().is_empty());
    error
}

/// The verifier's error for a module whose format is fine.
fn verifier_refuses(module: &Module) -> VerifyError {
    let bytes = module.encode().expect("the format is valid");
    match refused(&bytes) {
        LoadError::Verify(e) => {
            assert_eq!(
                verify(module),
                Err(e.clone()),
                "the VM applies the verifier"
            );
            e
        }
        other => panic!("expected a verifier error, got {other}"),
    }
}

#[test]
fn a_well_formed_module_is_the_baseline() {
    let module = with_code(asm(&[Instr::Push(1), Instr::Store(8), Instr::Await]));
    let mut vm = Vm::new(VmConfig::new(0, 1));
    vm.load(&module.encode().unwrap()).expect("loads");
}

#[test]
fn rule_1_unknown_opcodes_and_cut_instructions() {
    assert_eq!(
        verifier_refuses(&with_code(vec![0xFF])),
        VerifyError::Decode(IsaError::UnknownOpcode { pc: 0, byte: 0xFF })
    );
    let mut cut = asm(&[Instr::Await, Instr::Push(7)]);
    cut.truncate(4);
    assert_eq!(
        verifier_refuses(&with_code(cut)),
        VerifyError::Decode(IsaError::Truncated {
            pc: 1,
            opcode: "PUSH"
        })
    );
}

#[test]
fn rule_2_entries_on_instruction_boundaries() {
    let mut module = with_code(asm(&[Instr::Push(1), Instr::Display, Instr::Await]));
    module.triggers = vec![TriggerEntry {
        trigger: 3,
        entry: 4,
    }];
    let e = verifier_refuses(&module);
    assert_eq!(
        e,
        VerifyError::EntryNotAtBoundary {
            what: "trigger 3".to_string(),
            entry: 4
        }
    );
    assert!(
        e.to_string().contains("not at an instruction boundary"),
        "{e}"
    );
}

#[test]
fn rule_3_direct_jumps_to_boundaries_forward_only_and_loop_back_only() {
    // JZ into the middle of the PUSH after it.
    let module = with_code(asm(&[
        Instr::Push(0), // 0
        Instr::Jz(16),  // 9
        Instr::Push(1), // 14
        Instr::Display, // 23
        Instr::Await,   // 24
    ]));
    assert_eq!(
        verifier_refuses(&module),
        VerifyError::BadTarget {
            pc: 9,
            opcode: "JZ",
            target: 16
        }
    );
    // A jump past the end of the code.
    let module = with_code(asm(&[Instr::Jmp(1000), Instr::Await]));
    assert!(matches!(
        verifier_refuses(&module),
        VerifyError::BadTarget { target: 1000, .. }
    ));
    // JMP back.
    let module = with_code(asm(&[
        Instr::Push(1), // 0
        Instr::Jz(19),  // 9
        Instr::Jmp(0),  // 14
        Instr::Await,   // 19
    ]));
    assert_eq!(
        verifier_refuses(&module),
        VerifyError::WrongDirection {
            pc: 14,
            opcode: "JMP",
            target: 0,
            direction: "back"
        }
    );
    // LOOP forward.
    let module = with_code(asm(&[Instr::Loop(5), Instr::Await]));
    assert_eq!(
        verifier_refuses(&module),
        VerifyError::WrongDirection {
            pc: 0,
            opcode: "LOOP",
            target: 5,
            direction: "forward"
        }
    );
}

#[test]
fn rule_4_static_memory_references_inside_the_programs_own_data() {
    let cases = [
        (Instr::Load(16), "LOAD", 16, 8),
        (Instr::Load(4), "LOAD", 4, 8),
        (Instr::Load(u32::MAX), "LOAD", u32::MAX, 8),
    ];
    for (instr, opcode, offset, len) in cases {
        let module = with_code(asm(&[instr, Instr::Display, Instr::Await]));
        assert_eq!(
            verifier_refuses(&module),
            VerifyError::DataOutOfBounds {
                pc: 0,
                opcode,
                offset,
                len,
                data_len: 16
            }
        );
    }
    let module = with_code(asm(&[
        Instr::Push(0),
        Instr::Push(5),
        Instr::Store(12),
        Instr::Await,
    ]));
    assert!(matches!(
        verifier_refuses(&module),
        VerifyError::DataOutOfBounds {
            opcode: "STORE",
            offset: 12,
            ..
        }
    ));
    // Regions: past the end, misaligned, empty, wrapping around.
    for region in [
        Region { offset: 8, len: 16 },
        Region { offset: 4, len: 8 },
        Region { offset: 0, len: 0 },
        Region {
            offset: u32::MAX - 7,
            len: 16,
        },
    ] {
        let module = with_code(asm(&[
            Instr::Push(0),
            Instr::Push(8),
            Instr::Push(1),
            Instr::Push(0),
            Instr::Deliver(region),
            Instr::Await,
        ]));
        assert!(
            matches!(
                verifier_refuses(&module),
                VerifyError::DataOutOfBounds {
                    opcode: "DELIVER",
                    ..
                }
            ),
            "{region:?}"
        );
    }
}

#[test]
fn rule_5_stack_discipline() {
    assert_eq!(
        verifier_refuses(&with_code(asm(&[Instr::Add, Instr::Await]))),
        VerifyError::StackUnderflow {
            pc: 0,
            opcode: "ADD",
            pops: 2,
            depth: 0
        }
    );
    let mut module = with_code(asm(&[
        Instr::Push(1),
        Instr::Push(2),
        Instr::Add,
        Instr::Display,
        Instr::Await,
    ]));
    module.stack_depth = 1;
    assert_eq!(
        verifier_refuses(&module),
        VerifyError::StackOverflow {
            pc: 9,
            depth: 2,
            declared: 1
        }
    );
    // Two ways into DISPLAY at 23: from the JZ with an empty stack, from the PUSH with one
    // word.
    let module = with_code(asm(&[
        Instr::Push(1), // 0
        Instr::Jz(23),  // 9
        Instr::Push(5), // 14
        Instr::Display, // 23
        Instr::Await,   // 24
    ]));
    assert_eq!(
        verifier_refuses(&module),
        VerifyError::DepthMismatch {
            pc: 23,
            first: 0,
            second: 1
        }
    );
    // A declared depth past the limit: refused by the format already, and by the verifier
    // for a module built in memory.
    let mut deep = with_code(asm(&[Instr::Await]));
    deep.stack_depth = 33;
    assert_eq!(verify(&deep), Err(VerifyError::DeclaredStackTooDeep(33)));
    let mut bytes = with_code(asm(&[Instr::Await])).encode().unwrap();
    bytes[24..26].copy_from_slice(&33u16.to_le_bytes());
    assert_eq!(
        refused(&fix_checksum(bytes)),
        LoadError::Module(ModuleError::StackTooDeep(33))
    );
}

#[test]
fn rule_6_activations_end_with_an_empty_stack() {
    for end in [Instr::Await, Instr::Stop, Instr::Drop, Instr::Pass] {
        let module = with_code(asm(&[Instr::Push(1), end]));
        assert_eq!(
            verifier_refuses(&module),
            VerifyError::StackNotEmptyAtEnd {
                pc: 9,
                opcode: end.opcode().mnemonic(),
                depth: 1
            }
        );
    }
}

#[test]
fn rule_7_no_unreachable_code_and_no_falling_off_the_end() {
    assert_eq!(
        verifier_refuses(&with_code(asm(&[Instr::Await, Instr::Await]))),
        VerifyError::Unreachable { pc: 1 }
    );
    assert_eq!(
        verifier_refuses(&with_code(asm(&[Instr::Push(1), Instr::Display]))),
        VerifyError::FallsOffEnd { pc: 9 }
    );
    // A LOOP to itself never ends and never falls through: it verifies, and the budget stops
    // it at run time.
    let spin = with_code(asm(&[Instr::Loop(0)]));
    Vm::new(VmConfig::new(0, 1))
        .load(&spin.encode().unwrap())
        .expect("an endless LOOP verifies: the budget stops it at run time");
}

/// The checksum of `bytes` recomputed, so a patched module reaches the checks behind it.
fn fix_checksum(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[8..12].fill(0);
    let crc = crc32c::crc32c(&bytes);
    bytes[8..12].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// A valid module with two triggers and two symbols, and the offsets of its tables.
fn base() -> (Vec<u8>, usize, usize, usize) {
    let module = Module {
        name: "base".to_string(),
        data_len: 32,
        stack_depth: 2,
        init_entry: 0,
        triggers: vec![
            TriggerEntry {
                trigger: 1,
                entry: 0,
            },
            TriggerEntry {
                trigger: 2,
                entry: 0,
            },
        ],
        symbols: vec![
            Symbol {
                name: "x".to_string(),
                offset: 0,
                len: 8,
                array: false,
            },
            Symbol {
                name: "buf".to_string(),
                offset: 8,
                len: 24,
                array: true,
            },
        ],
        code: asm(&[Instr::Await]),
    };
    let bytes = module.encode().unwrap();
    let triggers = HEADER_LEN + 4;
    let symbols = triggers + 16;
    let code = symbols + (10 + 1) + (10 + 3);
    assert_eq!(code + 1, bytes.len());
    (bytes, triggers, symbols, code)
}

fn patched(at: usize, with: &[u8]) -> Vec<u8> {
    let (mut bytes, ..) = base();
    bytes[at..at + with.len()].copy_from_slice(with);
    fix_checksum(bytes)
}

#[test]
fn format_rules_each_refused_with_its_reason() {
    let (bytes, triggers, symbols, _) = base();
    Vm::new(VmConfig::new(0, 1))
        .load(&bytes)
        .expect("the base loads");
    let module_error = |bytes: &[u8]| match refused(bytes) {
        LoadError::Module(e) => e,
        other => panic!("expected a format error, got {other}"),
    };

    assert!(matches!(
        module_error(&bytes[..10]),
        ModuleError::Truncated {
            what: "the header",
            ..
        }
    ));
    assert!(matches!(
        module_error(&bytes[..bytes.len() - 1]),
        ModuleError::Checksum { .. }
    ));
    assert!(matches!(
        module_error(&fix_checksum(bytes[..bytes.len() - 1].to_vec())),
        ModuleError::Truncated {
            what: "the code",
            ..
        }
    ));
    assert_eq!(
        module_error(&patched(0, b"ELF\x7f")),
        ModuleError::BadMagic(*b"ELF\x7f")
    );
    assert_eq!(
        module_error(&patched(4, &2u16.to_le_bytes())),
        ModuleError::UnsupportedVersion(2)
    );
    let mut flipped = bytes.clone();
    *flipped.last_mut().unwrap() ^= 1;
    assert!(matches!(
        module_error(&flipped),
        ModuleError::Checksum { .. }
    ));
    assert_eq!(
        module_error(&patched(6, &[1, 0])),
        ModuleError::Reserved("flags")
    );
    assert_eq!(
        module_error(&patched(31, &[1])),
        ModuleError::Reserved("header byte 31")
    );
    let mut longer = bytes.clone();
    longer.push(0x40);
    assert_eq!(
        module_error(&fix_checksum(longer)),
        ModuleError::TrailingBytes { extra: 1 }
    );
    assert_eq!(
        module_error(&patched(12, &12u32.to_le_bytes())),
        ModuleError::BadDataLen(12)
    );
    assert_eq!(
        module_error(&patched(12, &(1u32 << 20).to_le_bytes())),
        ModuleError::BadDataLen(1 << 20)
    );
    assert_eq!(
        module_error(&patched(16, &0u32.to_le_bytes())),
        ModuleError::BadCodeLen(0)
    );
    assert_eq!(
        module_error(&patched(26, &65u16.to_le_bytes())),
        ModuleError::TooMany {
            what: "triggers",
            count: 65,
            max: 64
        }
    );
    assert_eq!(
        module_error(&patched(28, &300u16.to_le_bytes())),
        ModuleError::TooMany {
            what: "symbols",
            count: 300,
            max: 256
        }
    );
    assert!(matches!(
        module_error(&patched(HEADER_LEN, b"Ba")),
        ModuleError::BadName {
            what: "program",
            ..
        }
    ));
    assert!(matches!(
        module_error(&patched(HEADER_LEN, &[0xC3, 0x28])),
        ModuleError::BadName {
            reason: "not UTF-8",
            ..
        }
    ));
    assert!(matches!(
        module_error(&patched(20, &1u32.to_le_bytes())),
        ModuleError::EntryOutsideCode { entry: 1, .. }
    ));
    assert!(matches!(
        module_error(&patched(triggers + 4, &7u32.to_le_bytes())),
        ModuleError::EntryOutsideCode { entry: 7, .. }
    ));
    assert_eq!(
        module_error(&patched(triggers + 8, &1u16.to_le_bytes())),
        ModuleError::TriggersNotSorted(1)
    );
    assert_eq!(
        module_error(&patched(triggers + 2, &[0, 1])),
        ModuleError::Reserved("trigger entry bytes 2-3")
    );
    // Symbol x (8 bytes at 0): moved past the data, made 16 bytes without being an array.
    assert!(matches!(
        module_error(&patched(symbols, &32u32.to_le_bytes())),
        ModuleError::BadSymbol { .. }
    ));
    assert!(matches!(
        module_error(&patched(symbols + 4, &16u32.to_le_bytes())),
        ModuleError::BadSymbol { .. }
    ));
    assert_eq!(
        module_error(&patched(symbols + 8, &[0x80])),
        ModuleError::SymbolFlags("x".to_string())
    );
    // A name length that disagrees with the table (buf's 3 made 1): the rest is misread,
    // and the module ends up 2 bytes longer than its fields say.
    assert_eq!(
        module_error(&patched(symbols + 11 + 9, &[1, b'x'])),
        ModuleError::TrailingBytes { extra: 2 }
    );
}

#[test]
fn a_symbol_listed_twice_is_refused() {
    let module = Module {
        symbols: vec![
            Symbol {
                name: "x".to_string(),
                offset: 0,
                len: 8,
                array: false,
            };
            2
        ],
        ..with_code(asm(&[Instr::Await]))
    };
    assert_eq!(
        module.encode(),
        Err(ModuleError::DuplicateSymbol("x".to_string()))
    );
    // The same bytes written by hand: the module with distinct names, then one renamed.
    let distinct = Module {
        symbols: vec![
            Symbol {
                name: "x".to_string(),
                offset: 0,
                len: 8,
                array: false,
            },
            Symbol {
                name: "y".to_string(),
                offset: 8,
                len: 8,
                array: false,
            },
        ],
        ..with_code(asm(&[Instr::Await]))
    };
    let mut bytes = distinct.encode().unwrap();
    let y = bytes.len() - 2; // the name `y`, then the code's AWAIT
    bytes[y] = b'x';
    assert_eq!(
        refused(&fix_checksum(bytes)),
        LoadError::Module(ModuleError::DuplicateSymbol("x".to_string()))
    );
}

#[test]
fn modules_longer_than_any_valid_one_are_refused_unread() {
    let huge = vec![0u8; MAX_MODULE_BYTES + 1];
    assert_eq!(
        refused(&huge),
        LoadError::TooLarge {
            len: MAX_MODULE_BYTES + 1,
            max: MAX_MODULE_BYTES
        }
    );
    assert!(matches!(
        refused(&[]),
        LoadError::Module(ModuleError::Truncated { .. })
    ));
}

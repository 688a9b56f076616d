//! Fuzz target for the VM: decode, verify and interpret arbitrary module bytes and messages.
//!
//! The first byte chooses how the rest is read:
//!
//! * even: the rest is a whole module, with its checksum field repaired (random bytes almost
//!   never carry a matching CRC32C) so the input reaches the format checks behind it, the
//!   verifier and the interpreter;
//! * odd: the rest is `[data words, init entry, trigger entry (u16 each), payload length,
//!   payload, code]`, wrapped in a well-formed header, so the verifier sees real code and what
//!   it accepts runs.
//!
//! Oracle: nothing panics; a refused load leaves the VM's pools as they were; a loaded program
//! runs its initialisation block and then gets the payload on each of its triggers, and no
//! activation executes more than the budget; a program that stopped is unloaded.
//!
//! Run: `cargo +nightly fuzz run vm_run -- -max_total_time=600` from the repository's root
//! (seeding with the compiled examples: docs/vm.md, "Tests and fuzzing")

#![no_main]

use libfuzzer_sys::fuzz_target;
use nicmsg_pdl::module::{TriggerEntry, HEADER_LEN};
use nicmsg_pdl::Module;
use nicmsg_vm::{
    Host, Message, Outcome, Outgoing, ProgramId, SegmentError, SendRefused, Source, Vm, VmConfig,
};

const BUDGET: u32 = 20_000;

/// A host with one 256-byte segment (id 1) and every other effect accepted and dropped.
struct FuzzHost {
    segment: [u8; 256],
    clock: i64,
}

impl FuzzHost {
    fn range(&self, s: u16, offset: u64, len: usize) -> Result<std::ops::Range<usize>, SegmentError> {
        let end = offset.checked_add(len as u64).filter(|&e| e <= 256);
        match (s, end) {
            (1, Some(end)) => Ok(offset as usize..end as usize),
            (1, None) => Err(SegmentError::OutOfBounds { segment: 1, offset, len, size: 256 }),
            _ => Err(SegmentError::NoSuchSegment(s)),
        }
    }
}

impl Host for FuzzHost {
    fn now_ns(&mut self) -> i64 {
        self.clock += 7;
        self.clock
    }
    fn send(&mut self, m: Outgoing<'_>) -> Result<(), SendRefused> {
        assert!(m.payload.len() <= 4096);
        if m.trigger == 13 {
            return Err(SendRefused("unlucky"));
        }
        Ok(())
    }
    fn display(&mut self, _: ProgramId, _: i64) {}
    fn deliver(&mut self, _: ProgramId, s: u16, offset: u64, bytes: &[u8]) -> Result<(), SegmentError> {
        let range = self.range(s, offset, bytes.len())?;
        self.segment[range].copy_from_slice(bytes);
        Ok(())
    }
    fn get(&mut self, _: ProgramId, s: u16, offset: u64, into: &mut [u8]) -> Result<(), SegmentError> {
        let range = self.range(s, offset, into.len())?;
        into.copy_from_slice(&self.segment[range]);
        Ok(())
    }
    fn locked(&mut self, _: ProgramId, lock: u8) -> bool {
        assert!(lock <= 63);
        lock % 2 == 0
    }
    fn clear_lock(&mut self, _: ProgramId, lock: u8) {
        assert!(lock <= 63);
    }
    fn set_flag(&mut self, _: ProgramId, flag: u8) {
        assert!(flag <= 63);
    }
}

fn repair_checksum(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= HEADER_LEN {
        bytes[8..12].fill(0);
        let crc = crc32c::crc32c(&bytes);
        bytes[8..12].copy_from_slice(&crc.to_le_bytes());
    }
    bytes
}

/// The module and the payload an input stands for.
fn read(data: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (&mode, rest) = data.split_first()?;
    if mode % 2 == 0 {
        return Some((repair_checksum(rest.to_vec()), rest.iter().rev().take(64).copied().collect()));
    }
    if rest.len() < 6 {
        return None;
    }
    let words = u32::from(rest[0] % 64);
    let init_entry = u32::from(u16::from_le_bytes([rest[1], rest[2]]));
    let trigger_entry = u32::from(u16::from_le_bytes([rest[3], rest[4]]));
    let payload_len = usize::from(rest[5]).min(rest.len() - 6);
    let payload = rest[6..6 + payload_len].to_vec();
    let code = rest[6 + payload_len..].to_vec();
    let module = Module {
        name: "fuzz".to_string(),
        data_len: words * 8,
        stack_depth: 32,
        init_entry,
        triggers: vec![
            TriggerEntry { trigger: 1, entry: trigger_entry },
            TriggerEntry { trigger: 2, entry: 0 },
        ],
        symbols: Vec::new(),
        code,
    };
    // A header the format refuses (entries outside the code, no code) is not interesting here.
    Some((module.encode().ok()?, payload))
}

fuzz_target!(|data: &[u8]| {
    let Some((module, payload)) = read(data) else {
        return;
    };
    let mut vm = Vm::new(VmConfig {
        program_slots: 2,
        code_pool_instructions: 1 << 16,
        data_pool_bytes: 1 << 16,
        budget: BUDGET,
        ..VmConfig::new(1, 4)
    });
    let mut host = FuzzHost { segment: [0; 256], clock: 0 };
    let free = vm.free();
    let handle = match vm.load(&module) {
        Ok(handle) => handle,
        Err(error) => {
            assert_eq!(vm.free(), free, "a refused load takes nothing: {error}");
            return;
        }
    };
    let mut outcomes = vec![vm.run(handle.id, &mut host)];
    for trigger in [1u16, 2, 3] {
        for source in [Some(ProgramId(5)), None] {
            let message = Message {
                program: handle.id,
                trigger,
                payload: &payload,
                source: Source { rank: 3, program: source },
            };
            outcomes.push(vm.dispatch(&message, &mut host));
        }
    }
    for outcome in outcomes {
        assert!(outcome.instructions() <= BUDGET, "{outcome:?}");
        if matches!(outcome, Outcome::Stopped { .. }) {
            assert!(vm.program(handle.id).is_none(), "STOP unloads");
            assert_eq!(vm.free(), free, "and returns all its memory");
        }
    }
    let _ = vm.unload(handle.id);
    assert_eq!(vm.free(), free);
});

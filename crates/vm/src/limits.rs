//! The VM's limits: how many programs, how much program memory, how many instructions per
//! activation. Each default is a named constant with the reason for its value; an engine may
//! choose others in [`crate::VmConfig`]. Everything is allocated once, in [`crate::Vm::new`],
//! from these numbers: loading a program takes memory from the pools and never allocates on the
//! dispatch path.

use nicmsg_pdl::limits::{MAX_CODE_BYTES, MAX_NAME_LEN, MAX_TRIGGERS, MAX_VARIABLES};
use nicmsg_pdl::module::{HEADER_LEN, TRIGGER_ENTRY_LEN};

/// Default number of program slots: programs loaded at once on one engine. A job's protocol is
/// a handful of programs (each example of `examples/pdl` is one or two per rank), and a frame
/// finds its program by a binary search over the loaded ids, so 32 is generous and cheap.
pub const DEFAULT_PROGRAM_SLOTS: usize = 32;

/// Default size of the code pool, in instructions (16 bytes each once decoded, so 2 MiB). A
/// module of the largest size ([`MAX_CODE_BYTES`], 64 KiB) has at most one instruction per
/// byte, so the pool holds two programs of the largest size, or hundreds of real ones (figure
/// 2's ping is 51 instructions).
pub const DEFAULT_CODE_POOL_INSTRUCTIONS: usize = 2 * MAX_CODE_BYTES as usize;

/// Default size of the data pool, in bytes (1 MiB): sixteen programs with the largest data
/// section (64 KiB), or a hundred of figure 2's ping (9,800 bytes). The paper's NIC had 256 KiB
/// for everything.
pub const DEFAULT_DATA_POOL_BYTES: usize = 1 << 20;

/// Default instruction budget of one activation. A program that spends it traps and is
/// disabled, so normal messaging never waits long behind a program: at the interpreter's
/// measured speed (about 1.5 ns per instruction, `docs/vm.md`) 100,000 instructions are about
/// 0.15 ms of the engine's time. Real programs need far less: figure 2's final loop displays 200
/// values in about 2,000 instructions, and a loop over all ranks of a job (the barrier's
/// release) costs about 15 instructions per rank, so jobs of thousands of ranks fit.
pub const DEFAULT_BUDGET: u32 = 100_000;

/// The largest module [`crate::Vm::load`] reads: a header, the longest name, the largest
/// trigger and symbol tables and the largest code. Longer input is refused before it is
/// decoded, so the bytes of a hostile load frame cost nothing past this bound.
pub const MAX_MODULE_BYTES: usize = HEADER_LEN
    + MAX_NAME_LEN
    + MAX_TRIGGERS * TRIGGER_ENTRY_LEN
    + MAX_VARIABLES * (10 + MAX_NAME_LEN)
    + MAX_CODE_BYTES as usize;

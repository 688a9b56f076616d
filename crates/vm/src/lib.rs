//! # The PANIC protocol VM
//!
//! Runs PDL programs ([`nicmsg_pdl`]) on the offload engine, triggered by messages, as the
//! paper's NIC-resident VM does (section 3.1): a **loader** that verifies every module and
//! places it in bounded pools of program memory, and an **interpreter** that runs one
//! activation at a time within an instruction budget.
//!
//! The VM is sans-I/O, like `nicmsg-proto`: it reads no clock, opens nothing, starts no thread
//! and allocates nothing on the dispatch path. Everything a program does outside its own
//! memory (the clock, sends, display output, shared segments, locks and flags) goes through the
//! [`Host`] trait, which the engine implements; the tests and the simulator implement it with
//! plain data, so runs are deterministic.
//!
//! # Calls, in order
//!
//! 1. [`Vm::new`] with a [`VmConfig`] (rank, job size, pool sizes, budget): the pools are
//!    allocated here, once.
//! 2. [`Vm::load`] (or [`Vm::load_as`] for an explicit id) with a module's bytes, from the local
//!    host or a PDL-PROGRAM frame: decoded, verified, placed; a [`LoadError`] says why not.
//! 3. [`Vm::run`]: starts the program (its initialisation block).
//! 4. [`Vm::dispatch`] for each PDL-MESSAGE frame: runs the trigger's block and returns an
//!    [`Outcome`], whose [`Outcome::verdict`] says what the engine does with the frame (the
//!    program consumed it, dropped it, or passes it on to the host) and which reports traps.
//! 5. [`Vm::replace`], [`Vm::unload`] at any time between activations; [`Vm::program`],
//!    [`Vm::programs`], [`Vm::stats`] to inspect (`nicmsg pdl list`).
//!
//! `AWAIT` ends an activation and the program waits: the next message for it runs its
//! trigger's block from the start, and only the program's variables carry over (the verifier
//! proves the operand stack empty there). A trap (the budget spent, a check failed) disables
//! the program, which stays loaded for inspection until it is unloaded or replaced. `STOP`
//! unloads it. See `docs/vm.md`.
//!
//! # Example
//!
//! ```
//! use nicmsg_vm::{Host, Message, Outcome, Outgoing, ProgramId, SegmentError, SendRefused,
//!                 Source, Verdict, Vm, VmConfig};
//!
//! /// A host that records what programs display and send, and has no segments.
//! #[derive(Default)]
//! struct Recorder { shown: Vec<i64>, sent: Vec<(u32, u16, Vec<u8>)> }
//!
//! impl Host for Recorder {
//!     fn now_ns(&mut self) -> i64 { 0 }
//!     fn send(&mut self, m: Outgoing<'_>) -> Result<(), SendRefused> {
//!         self.sent.push((m.rank, m.trigger, m.payload.to_vec()));
//!         Ok(())
//!     }
//!     fn display(&mut self, _: ProgramId, value: i64) { self.shown.push(value) }
//!     fn deliver(&mut self, _: ProgramId, s: u16, _: u64, _: &[u8]) -> Result<(), SegmentError> {
//!         Err(SegmentError::NoSuchSegment(s))
//!     }
//!     fn get(&mut self, _: ProgramId, s: u16, _: u64, _: &mut [u8]) -> Result<(), SegmentError> {
//!         Err(SegmentError::NoSuchSegment(s))
//!     }
//!     fn locked(&mut self, _: ProgramId, _: u8) -> bool { false }
//!     fn clear_lock(&mut self, _: ProgramId, _: u8) {}
//!     fn set_flag(&mut self, _: ProgramId, _: u8) {}
//! }
//!
//! // Compiled on the host; the engine gets the bytes from a file or a PDL-PROGRAM frame.
//! let source = "PROGRAM echo: VAR n, buf[8]; TRIGGERS 1;
//!               MESSAGE 1: BEGIN
//!                 n = n + 1; DISPLAY n;
//!                 RECEIVE buf LEN MSGLEN;
//!                 REPLY buf LEN MSGLEN AS 2
//!               END; END.";
//! let module = nicmsg_pdl::compile(source).unwrap().encode().unwrap();
//!
//! let mut vm = Vm::new(VmConfig::new(0, 2));
//! let mut host = Recorder::default();
//! let echo = vm.load(&module).unwrap();
//! assert_eq!(echo.id, ProgramId::of_name("echo"));
//! assert!(matches!(vm.run(echo.id, &mut host), Outcome::Awaiting { .. }));
//!
//! let message = Message {
//!     program: echo.id,
//!     trigger: 1,
//!     payload: b"hello",
//!     source: Source { rank: 1, program: Some(ProgramId(7)) },
//! };
//! let outcome = vm.dispatch(&message, &mut host);
//! assert_eq!(outcome.verdict(), Verdict::Consumed);
//! assert_eq!(host.shown, [1]);
//! assert_eq!(host.sent, [(1, 2, b"hello".to_vec())]);
//! ```

#![forbid(unsafe_code)]

mod host;
mod interp;
pub mod limits;
mod vm;

pub use host::{Destination, Host, Outgoing, ProgramId, SegmentError, SegmentId, SendRefused};
pub use interp::TrapKind;
pub use vm::{
    LoadError, Message, Outcome, ProgramHandle, ProgramInfo, ProgramState, Refusal, Room, Source,
    Stats, Trap, Verdict, Vm, VmConfig,
};

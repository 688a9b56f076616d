//! The host interface: everything a program does outside its own memory goes through [`Host`],
//! which the engine implements (and the tests and the simulator implement with plain data), so
//! the VM itself reads no clock, opens nothing and stays deterministic.

use std::fmt;

use thiserror::Error;

/// A program's id on an engine: frames are addressed to programs by id.
///
/// A program loaded by name gets [`ProgramId::of_name`] (top bit set); one loaded with an
/// explicit id ([`crate::Vm::load_as`]) has an id below 2^31, so the two never meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProgramId(pub u32);

impl ProgramId {
    /// The id of a program loaded by its name: [`nicmsg_pdl::program_id`], which is also what
    /// `SEND ... TO name` compiles to.
    pub fn of_name(name: &str) -> ProgramId {
        ProgramId(nicmsg_pdl::program_id(name))
    }

    /// Whether the id is one given explicitly at load time (below 2^31).
    pub fn is_explicit(self) -> bool {
        self.0 & 0x8000_0000 == 0
    }
}

impl fmt::Display for ProgramId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_explicit() {
            write!(f, "{}", self.0)
        } else {
            write!(f, "{:#010x}", self.0)
        }
    }
}

/// A shared segment's id: the application creates segments and programs name them by id
/// (`DELIVER ... INTO id`, `GET ... FROM id`).
pub type SegmentId = u16;

/// Where a message goes: a program, or the host of a rank (a `REPLY` to a message that a host
/// sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Destination {
    Program(ProgramId),
    Host,
}

/// A message a program sends (`SEND` or `REPLY`), handed to [`Host::send`]. The engine frames
/// it as a PDL message and sends it reliably, like every control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// The sending program (the receiver's `REPLY` goes back to it).
    pub from: ProgramId,
    /// The destination rank (this rank included: a program may send to its own engine).
    pub rank: u32,
    pub to: Destination,
    pub trigger: u16,
    pub payload: &'a [u8],
}

/// Why the host refused a message (`SEND`, `REPLY`): the activation traps with this reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the engine refused the message: {0}")]
pub struct SendRefused(pub &'static str);

/// Why a segment access (`DELIVER`, `GET`) failed: the activation traps with this reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SegmentError {
    #[error("no shared segment {0}")]
    NoSuchSegment(SegmentId),
    #[error("{len} bytes at offset {offset} are outside segment {segment} ({size} bytes)")]
    OutOfBounds {
        segment: SegmentId,
        offset: u64,
        len: usize,
        size: u64,
    },
    #[error("segment {0} is not shared with this program")]
    Denied(SegmentId),
}

/// What the VM needs from the engine. Every method is called during an activation, from
/// [`crate::Vm::run`] or [`crate::Vm::dispatch`], and must not block: the engine answers from
/// its own state (its clock, its send queue, the shared segments and the lock/flag words) and
/// reports what it cannot do as an error, which traps the activation.
///
/// Locks and flags are the paper's synchronisation without interrupts (section 3.3): each
/// program has 64 locks and 64 flags (numbers 0 to 63, checked by the VM); the host sets locks
/// and clears flags, programs clear locks and set flags. The host keeps them where its
/// application can poll or wait on them.
pub trait Host {
    /// The engine's clock in nanoseconds, for `CLOCK`. Any origin; it should not go back.
    fn now_ns(&mut self) -> i64;

    /// Sends a message (`SEND`, `REPLY`). The VM has checked the rank (below the job's size),
    /// the trigger and the length; the engine queues the message or refuses it (a full queue).
    fn send(&mut self, message: Outgoing<'_>) -> Result<(), SendRefused>;

    /// Appends a value to the program's display output (`DISPLAY`), which the host reads
    /// (`nicmsg pdl output`). The engine bounds the buffer it keeps, dropping what overflows.
    fn display(&mut self, program: ProgramId, value: i64);

    /// Copies `bytes` into shared segment `segment` at `offset` (`DELIVER`), checking that the
    /// segment exists, is shared with `program` and is large enough.
    fn deliver(
        &mut self,
        program: ProgramId,
        segment: SegmentId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), SegmentError>;

    /// Fills `into` from shared segment `segment` at `offset` (`GET`), with the same checks.
    fn get(
        &mut self,
        program: ProgramId,
        segment: SegmentId,
        offset: u64,
        into: &mut [u8],
    ) -> Result<(), SegmentError>;

    /// Whether the host holds lock `lock` (0 to 63) of `program` (`LOCKED(n)`).
    fn locked(&mut self, program: ProgramId, lock: u8) -> bool;

    /// Clears lock `lock` of `program` (`CLEARLOCK n`), releasing a host waiting on it.
    fn clear_lock(&mut self, program: ProgramId, lock: u8);

    /// Sets flag `flag` of `program` (`SETFLAG n`); the host polls or waits for it.
    fn set_flag(&mut self, program: ProgramId, flag: u8);
}

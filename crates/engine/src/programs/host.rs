//! What the VM's programs reach through the engine during one activation ([`nicmsg_vm::Host`]):
//! the engine's clock, its send buffers (a program's `SEND` and `REPLY` are copied into one and
//! queued for posting), the shared segments, the locks and flags, the display output.

use super::{
    Buffer, ProgramsShared, ProgramsStats, Queued, MESSAGE_BUFFER_LEN,
    PROGRAM_SENDS_IN_FLIGHT_PER_RANK, SENDS_IN_FLIGHT_PER_RANK, SEND_BUFFERS,
};
use crate::registry::Registry;
use nicmsg_proto::{Context, Nanos};
use nicmsg_vm::{Destination, Host, Outgoing, ProgramId, SegmentError, SegmentId, SendRefused};
use nicmsg_wire::program::{reply_tag, ProgramHeader, ProgramOp, PROGRAM_HEADER_LEN};
use std::collections::VecDeque;

pub(super) struct EngineHost<'a> {
    pub(super) now: Nanos,
    pub(super) rank: u32,
    pub(super) shared: &'a ProgramsShared,
    pub(super) registry: &'a Registry,
    pub(super) buffers: &'a [Buffer],
    pub(super) free_sends: &'a mut Vec<usize>,
    pub(super) program_send_to: &'a mut [Option<(u32, u32)>],
    pub(super) queued: &'a mut VecDeque<Queued>,
    pub(super) stats: &'a mut ProgramsStats,
    /// Whether segment copies are timed ([`super::Programs::set_phase_timing`]), and their
    /// time so far in this activation.
    pub(super) time_copies: bool,
    pub(super) copy_ns: u64,
}

impl EngineHost<'_> {
    /// Runs `copy`, adding its time to `copy_ns` when copies are timed.
    fn timed<R>(&mut self, copy: impl FnOnce(&Self) -> R) -> R {
        if !self.time_copies {
            return copy(self);
        }
        let started = crate::clock::monotonic_ns();
        let result = copy(self);
        self.copy_ns += crate::clock::monotonic_ns() - started;
        result
    }
}

impl EngineHost<'_> {
    /// True if `message` would exceed the sends in flight one rank may hold (all programs
    /// together, or its program alone): a rank that does not take its messages must not pin
    /// every buffer of the engine. Counted only when so many sends are in flight at all that a
    /// bound could be reached, which a program's ordinary send never meets.
    fn over_rank_share(&self, message: &Outgoing<'_>) -> bool {
        let in_flight = SEND_BUFFERS - self.free_sends.len();
        if in_flight < PROGRAM_SENDS_IN_FLIGHT_PER_RANK {
            return false;
        }
        let (mut to_rank, mut from_program) = (0, 0);
        for &(rank, program) in self.program_send_to.iter().flatten() {
            if rank == message.rank {
                to_rank += 1;
                from_program += usize::from(program == message.from.0);
            }
        }
        to_rank >= SENDS_IN_FLIGHT_PER_RANK || from_program >= PROGRAM_SENDS_IN_FLIGHT_PER_RANK
    }
}

impl Host for EngineHost<'_> {
    fn now_ns(&mut self) -> i64 {
        self.now as i64
    }

    fn send(&mut self, message: Outgoing<'_>) -> Result<(), SendRefused> {
        if self.over_rank_share(&message) {
            return Err(SendRefused(
                "too many of the engine's send buffers are in flight to that rank",
            ));
        }
        let Some(buffer) = self.free_sends.pop() else {
            return Err(SendRefused(
                "all of the engine's send buffers are in flight",
            ));
        };
        let (context, tag, program) = match message.to {
            Destination::Program(program) => (
                Context::PROGRAM_MESSAGES,
                u32::from(message.trigger),
                program.0,
            ),
            Destination::Host => (
                Context::PROGRAM_ANSWERS,
                reply_tag(message.trigger),
                message.from.0,
            ),
        };
        let header = ProgramHeader {
            op: ProgramOp::Message,
            trigger: message.trigger,
            program,
            source_program: Some(message.from.0),
            request: 0,
            origin: self.rank,
        };
        let len = PROGRAM_HEADER_LEN + message.payload.len();
        if len > MESSAGE_BUFFER_LEN {
            self.free_sends.push(buffer);
            return Err(SendRefused("message longer than a program may send"));
        }
        let address = self
            .registry
            .address(self.buffers[buffer].region, 0, len as u64)
            .expect("engine buffers stay registered");
        // SAFETY: a free send buffer is not posted, so nothing else reads or writes it.
        let memory = unsafe { std::slice::from_raw_parts_mut(address, len) };
        header.emit(memory);
        nicmsg_proto::copy_bytes(&mut memory[PROGRAM_HEADER_LEN..], message.payload);
        self.program_send_to[buffer] = Some((message.rank, message.from.0));
        self.queued.push_back(Queued {
            buffer,
            rank: message.rank,
            context,
            tag,
            len,
        });
        Ok(())
    }

    fn display(&mut self, program: ProgramId, value: i64) {
        self.shared.display.push(super::Shown {
            program: program.0,
            value,
        });
    }

    fn deliver(
        &mut self,
        _program: ProgramId,
        segment: SegmentId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), SegmentError> {
        self.timed(|host| {
            host.shared
                .with_segment(segment, offset, bytes.len() as u64, |address| {
                    // SAFETY: `with_segment` checked the range lies in the shared segment, which
                    // the host keeps valid until `unshare`, and `unshare` waits for this copy
                    // to end.
                    unsafe { crate::copy_raw(address, bytes.as_ptr(), bytes.len()) }
                })
        })
        .map_err(|size| segment_error(segment, offset, bytes.len(), size))
    }

    fn get(
        &mut self,
        _program: ProgramId,
        segment: SegmentId,
        offset: u64,
        into: &mut [u8],
    ) -> Result<(), SegmentError> {
        let len = into.len();
        self.timed(|host| {
            host.shared
                .with_segment(segment, offset, len as u64, |address| {
                    // SAFETY: as in `deliver`; `into` is the VM's own memory, apart from segments.
                    unsafe { crate::copy_raw(into.as_mut_ptr(), address, len) }
                })
        })
        .map_err(|size| segment_error(segment, offset, len, size))
    }

    fn locked(&mut self, program: ProgramId, lock: u8) -> bool {
        self.shared.signals.lock(program.0, lock).unwrap_or(false)
    }

    fn clear_lock(&mut self, program: ProgramId, lock: u8) {
        if !self.shared.signals.clear_lock(program.0, lock) {
            self.stats.signals_refused += 1;
        }
    }

    fn set_flag(&mut self, program: ProgramId, flag: u8) {
        if !self.shared.signals.set_flag(program.0, flag) {
            self.stats.signals_refused += 1;
        }
    }
}

fn segment_error(segment: SegmentId, offset: u64, len: usize, size: Option<u64>) -> SegmentError {
    match size {
        None => SegmentError::NoSuchSegment(segment),
        Some(size) => SegmentError::OutOfBounds {
            segment,
            offset,
            len,
            size,
        },
    }
}

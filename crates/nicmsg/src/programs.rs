//! PANIC from the application: load programs into engines (this rank's or another's), start,
//! unload and list them, send them messages, receive their replies, share memory segments
//! with them, and synchronise with them through locks and flags (`docs/pdl.md`).
//!
//! Requests travel as messages to the engine of the rank named (its own included) and are
//! answered by that engine, so they work the same for every rank and fail, rather than hang,
//! if the rank dies.

use crate::comm::Comm;
use crate::{Error, Status};
use nicmsg_engine::programs::{ProgramsShared, Shown, MESSAGE_BUFFER_LEN, REQUEST_BUFFER_LEN};
use nicmsg_engine::{Envelope, OpCode};
use nicmsg_proto::{Context, TagMatch};
use nicmsg_wire::program::{
    answer_tag, reply_tag, Answer, ProgramHeader, ProgramOp, ANSWER_LEN, PROGRAM_HEADER_LEN,
};
use std::marker::PhantomData;

pub use nicmsg_engine::programs::{SegmentRefused, SignalError, SEGMENTS};

/// A program's id on an engine (`nicmsg pdl disasm` prints it): the id a program loaded by
/// name gets is [`ProgramId::of_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProgramId(pub u32);

impl ProgramId {
    /// The id of the program named `name` (`PROGRAM name:`), as every engine gives it.
    pub fn of_name(name: &str) -> Self {
        Self(nicmsg_pdl::program_id(name))
    }
}

impl std::fmt::Display for ProgramId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nicmsg_vm::ProgramId(self.0).fmt(f)
    }
}

/// What a program sent to this host (`REPLY`), or passed on to it (`PASS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The rank the message came from (for a passed message, the rank that sent it to the
    /// program).
    pub origin: u32,
    /// The program that replied or passed it on.
    pub program: ProgramId,
    pub trigger: u16,
    /// Bytes written into the buffer.
    pub len: usize,
}

/// A value a program displayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Displayed {
    pub program: ProgramId,
    pub value: i64,
}

/// The application's handle on PANIC ([`Comm::programs`]).
pub struct Programs<'a> {
    comm: &'a Comm,
}

impl<'a> Programs<'a> {
    pub(crate) fn new(comm: &'a Comm) -> Self {
        Self { comm }
    }

    fn shared(&self) -> &'a ProgramsShared {
        self.comm.programs_shared()
    }

    /// Loads a module (the output of `nicmsg pdl compile`) into the engine of `rank`,
    /// replacing a loaded program of the same id; returns the id. The program is not started
    /// ([`Programs::run`]).
    pub fn load(&self, rank: u32, module: &[u8]) -> Result<ProgramId, Error> {
        if module.len() > REQUEST_BUFFER_LEN - PROGRAM_HEADER_LEN {
            return Err(Error::BadBuffer("module larger than an engine accepts"));
        }
        let (answer, _) = self.request(rank, ProgramOp::Load, (0, 0), module)?;
        Ok(ProgramId(answer.program))
    }

    /// Loads a module as program `id` (below 2^31), the number other programs address it by
    /// (`SEND ... TO 415`), replacing a program loaded under that id.
    pub fn load_as(&self, rank: u32, id: ProgramId, module: &[u8]) -> Result<ProgramId, Error> {
        if module.len() > REQUEST_BUFFER_LEN - PROGRAM_HEADER_LEN {
            return Err(Error::BadBuffer("module larger than an engine accepts"));
        }
        let (answer, _) = self.request(rank, ProgramOp::Load, (id.0, 1), module)?;
        Ok(ProgramId(answer.program))
    }

    /// Starts `program` on the engine of `rank`: runs its initialisation block.
    pub fn run(&self, rank: u32, program: ProgramId) -> Result<(), Error> {
        self.request(rank, ProgramOp::Run, (program.0, 0), &[])
            .map(drop)
    }

    /// Unloads `program` from the engine of `rank`.
    pub fn unload(&self, rank: u32, program: ProgramId) -> Result<(), Error> {
        self.request(rank, ProgramOp::Unload, (program.0, 0), &[])
            .map(drop)
    }

    /// The programs loaded on the engine of `rank`, one line each (id, name, state, triggers,
    /// sizes, counts).
    pub fn list(&self, rank: u32) -> Result<String, Error> {
        self.request(rank, ProgramOp::List, (0, 0), &[])
            .map(|(_, text)| text)
    }

    /// Takes the values programs displayed on the engine of `rank` (only `program`'s if
    /// given), oldest first; as many as one answer holds (about 120), so call again until
    /// it returns none.
    pub fn output(&self, rank: u32, program: Option<ProgramId>) -> Result<Vec<Displayed>, Error> {
        self.output_at_most(rank, program, usize::MAX)
    }

    /// [`output`](Self::output) for a caller with room for `max` values (the C ABI's): this
    /// rank's engine keeps the rest for the next call. Another rank's engine sends what one
    /// answer holds, whatever `max`.
    pub(crate) fn output_at_most(
        &self,
        rank: u32,
        program: Option<ProgramId>,
        max: usize,
    ) -> Result<Vec<Displayed>, Error> {
        if rank == self.comm.rank() {
            return Ok(self.take_output(program, max));
        }
        let (filter, only) = program.map_or((0, 0), |p| (p.0, 1));
        let (_, text) = self.request(rank, ProgramOp::Output, (filter, only), &[])?;
        Ok(text
            .lines()
            .filter_map(Shown::parse)
            .map(displayed)
            .collect())
    }

    /// This engine's display output, taken without a message (at most `max` values).
    fn take_output(&self, program: Option<ProgramId>, max: usize) -> Vec<Displayed> {
        let (shown, _) = self.shared().display.take(program.map(|p| p.0), max);
        shown.into_iter().map(displayed).collect()
    }

    /// Sends `payload` to `program` on the engine of `rank`, triggering `trigger`. Returns
    /// once the engine there holds the message.
    pub fn send(
        &self,
        rank: u32,
        program: ProgramId,
        trigger: u16,
        payload: &[u8],
    ) -> Result<(), Error> {
        let mut head = [0u8; PROGRAM_HEADER_LEN];
        let sent = self
            .post_message(rank, program, trigger, payload, &mut head)?
            .wait();
        sent.map(drop)
    }

    /// Posts the send of a message to a program; `head` holds its header until it completes.
    fn post_message<'r>(
        &'r self,
        rank: u32,
        program: ProgramId,
        trigger: u16,
        payload: &'r [u8],
        head: &'r mut [u8; PROGRAM_HEADER_LEN],
    ) -> Result<crate::Request<'r>, Error> {
        if payload.len() > MESSAGE_BUFFER_LEN - PROGRAM_HEADER_LEN {
            return Err(Error::BadBuffer(
                "message longer than a program can take (4 KiB)",
            ));
        }
        ProgramHeader {
            op: ProgramOp::Message,
            trigger,
            program: program.0,
            source_program: None,
            request: 0,
            origin: self.comm.rank(),
        }
        .emit(head);
        let pieces = [
            (head.as_mut_ptr(), head.len()),
            (payload.as_ptr().cast_mut(), payload.len()),
        ];
        self.comm.post(
            OpCode::Send,
            rank,
            Envelope::send(Context::PROGRAM_MESSAGES, u64::from(trigger)),
            &pieces,
        )
    }

    /// Waits for a program's `REPLY` (or a message passed on with `PASS`) with `trigger`, and
    /// writes its payload into `buffer`.
    pub fn receive(&self, trigger: u16, buffer: &mut [u8]) -> Result<Reply, Error> {
        let mut head = [0u8; PROGRAM_HEADER_LEN];
        let receive = self.post_receive(trigger, buffer, &mut head)?;
        finish_receive(receive.wait()?, &head)
    }

    /// A request and its answer in one call: sends `payload` to `program` on the engine of
    /// `rank` as `trigger` and waits for the `REPLY` with `reply_trigger`, whose receive is
    /// posted first (so the answer lands in `buffer` at once, and the send and the answer
    /// overlap) — an engine-answered look-up in one round trip.
    pub fn call(
        &self,
        (rank, program, trigger): (u32, ProgramId, u16),
        payload: &[u8],
        reply_trigger: u16,
        buffer: &mut [u8],
    ) -> Result<Reply, Error> {
        let mut reply_head = [0u8; PROGRAM_HEADER_LEN];
        let receive = self.post_receive(reply_trigger, buffer, &mut reply_head)?;
        let mut head = [0u8; PROGRAM_HEADER_LEN];
        let sent = self
            .post_message(rank, program, trigger, payload, &mut head)
            .and_then(crate::Request::wait);
        let received = receive.wait();
        sent?;
        finish_receive(received?, &reply_head)
    }

    /// Posts the receive of a program's reply: its header into `head`, its payload into
    /// `buffer`.
    fn post_receive<'r>(
        &'r self,
        trigger: u16,
        buffer: &'r mut [u8],
        head: &'r mut [u8; PROGRAM_HEADER_LEN],
    ) -> Result<crate::Request<'r>, Error> {
        let pieces = [
            (head.as_mut_ptr(), head.len()),
            (buffer.as_mut_ptr(), buffer.len()),
        ];
        self.comm.post(
            OpCode::Recv,
            nicmsg_engine::ANY,
            Envelope::matching(
                Context::PROGRAM_ANSWERS,
                TagMatch::Tag(u64::from(reply_tag(trigger))),
            ),
            &pieces,
        )
    }

    /// Shares `memory` (not empty) with the programs of this rank's engine as segment `id` (0 to
    /// [`SEGMENTS`] - 1): `DELIVER ... INTO id` writes it, `GET ... FROM id` reads it, until the
    /// returned [`Segment`] is dropped. The memory stays borrowed meanwhile; read and write it
    /// through the segment, when the programs' locks and flags say it is the host's turn.
    pub fn share<'m>(&self, id: u16, memory: &'m mut [u8]) -> Result<Segment<'m>, Error>
    where
        'a: 'm,
    {
        // The engine registers a segment of at least one byte: an empty one would let a
        // program write a byte past `memory` (a dangling address for an empty slice).
        if memory.is_empty() {
            return Err(Error::BadBuffer("an empty segment"));
        }
        // SAFETY: `memory` stays borrowed by the Segment, which unshares it (waiting for a copy
        // of the engine under way) before the borrow ends.
        unsafe { self.shared().share(id, memory.as_mut_ptr(), memory.len()) }
            .map_err(|refused| Error::InvalidArgument(refused.to_string()))?;
        Ok(Segment {
            shared: self.shared(),
            id,
            base: memory.as_mut_ptr(),
            len: memory.len(),
            _memory: PhantomData,
        })
    }

    /// Takes lock `lock` (0 to 63) of `program`: the program sees `LOCKED(lock)` until it
    /// clears it (`CLEARLOCK`).
    pub fn set_lock(&self, program: ProgramId, lock: u8) -> Result<(), Error> {
        self.shared()
            .signals
            .set_lock(program.0, lock)
            .map_err(signal_error)
    }

    /// Whether the program still holds the host's lock `lock` (it has not cleared it).
    pub fn lock(&self, program: ProgramId, lock: u8) -> Result<bool, Error> {
        self.shared()
            .signals
            .lock(program.0, lock)
            .map_err(signal_error)
    }

    /// Whether flag `flag` of `program` is set (`SETFLAG`).
    pub fn flag(&self, program: ProgramId, flag: u8) -> Result<bool, Error> {
        self.shared()
            .signals
            .flag(program.0, flag)
            .map_err(signal_error)
    }

    /// Clears flag `flag` of `program`.
    pub fn clear_flag(&self, program: ProgramId, flag: u8) -> Result<(), Error> {
        self.shared()
            .signals
            .clear_flag(program.0, flag)
            .map_err(signal_error)
    }

    /// Waits until flag `flag` of `program` is set, running the engine meanwhile if it is
    /// inline; fails if the engine stops.
    pub fn wait_flag(&self, program: ProgramId, flag: u8) -> Result<(), Error> {
        let started = nicmsg_engine::clock::monotonic_ns();
        while !self.flag(program, flag)? {
            self.comm.check_engine()?;
            self.comm.progress_or_nap(started);
        }
        Ok(())
    }

    /// Sends a request to the engine of `rank` and waits for its answer.
    fn request(
        &self,
        rank: u32,
        op: ProgramOp,
        (program, trigger): (u32, u16),
        payload: &[u8],
    ) -> Result<(Answer, String), Error> {
        let request = self.comm.next_program_request();
        let header = ProgramHeader {
            op,
            trigger,
            program,
            source_program: None,
            request,
            origin: self.comm.rank(),
        };
        let mut head = [0u8; PROGRAM_HEADER_LEN];
        header.emit(&mut head);
        let mut answer = vec![0u8; MESSAGE_BUFFER_LEN];
        let into = [(answer.as_mut_ptr(), answer.len())];
        let receive = self.comm.post(
            OpCode::Recv,
            rank,
            Envelope::matching(
                Context::PROGRAM_ANSWERS,
                TagMatch::Tag(u64::from(answer_tag(request))),
            ),
            &into,
        )?;
        let pieces = [
            (head.as_mut_ptr(), head.len()),
            (payload.as_ptr().cast_mut(), payload.len()),
        ];
        let sent = self
            .comm
            .post(
                OpCode::Send,
                rank,
                Envelope::send(Context::PROGRAM_REQUESTS, 0),
                &pieces,
            )?
            .wait();
        let received = receive.wait();
        sent?;
        let Status { len, .. } = received?;
        let len = (len as usize).min(answer.len());
        let fixed = answer.get(PROGRAM_HEADER_LEN..len).unwrap_or_default();
        let parsed = Answer::parse(fixed)
            .map_err(|_| Error::BadBuffer("an engine's answer without a valid header"))?;
        let text = String::from_utf8_lossy(&fixed[ANSWER_LEN..]).into_owned();
        if parsed.status != nicmsg_engine::programs::status::DONE {
            return Err(Error::Program {
                rank,
                status: parsed.status,
                reason: text,
            });
        }
        Ok((parsed, text))
    }
}

/// Memory shared with the programs of this rank's engine, until dropped.
pub struct Segment<'m> {
    shared: &'m ProgramsShared,
    id: u16,
    base: *mut u8,
    len: usize,
    _memory: PhantomData<&'m mut [u8]>,
}

impl Segment<'_> {
    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `into.len()` bytes at `offset` out of the segment.
    pub fn read(&self, offset: usize, into: &mut [u8]) -> Result<(), Error> {
        self.check(offset, into.len())?;
        // SAFETY: the range lies in the shared memory (checked), which this Segment borrows;
        // the engine may write it concurrently only if the programs' protocol allows it.
        unsafe { nicmsg_engine::copy_raw(into.as_mut_ptr(), self.base.add(offset), into.len()) };
        Ok(())
    }

    /// Copies `bytes` into the segment at `offset`.
    pub fn write(&self, offset: usize, bytes: &[u8]) -> Result<(), Error> {
        self.check(offset, bytes.len())?;
        // SAFETY: as in `read`.
        unsafe { nicmsg_engine::copy_raw(self.base.add(offset), bytes.as_ptr(), bytes.len()) };
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::BadBuffer("range outside the segment")),
        }
    }
}

impl Drop for Segment<'_> {
    fn drop(&mut self) {
        self.shared.unshare(self.id);
    }
}

/// The reply a completed receive holds, from its header.
fn finish_receive(status: Status, head: &[u8; PROGRAM_HEADER_LEN]) -> Result<Reply, Error> {
    let header = ProgramHeader::parse(head)
        .map_err(|_| Error::BadBuffer("a program's reply without a valid header"))?;
    Ok(Reply {
        origin: header.origin,
        program: ProgramId(header.source_program.unwrap_or(header.program)),
        trigger: header.trigger,
        len: (status.len as usize).saturating_sub(PROGRAM_HEADER_LEN),
    })
}

/// A lock or flag out of range is the caller's argument; more programs than the words kept
/// for them is a full table.
fn signal_error(error: SignalError) -> Error {
    match error {
        SignalError::OutOfRange(_) => Error::InvalidArgument(error.to_string()),
        SignalError::TooManyPrograms => Error::TableFull {
            table: "programs' locks and flags",
            limit: nicmsg_engine::programs::SIGNAL_PROGRAMS,
        },
    }
}

fn displayed(shown: Shown) -> Displayed {
    Displayed {
        program: ProgramId(shown.program),
        value: shown.value,
    }
}

//! nicmsg through its public API: `isend`/`irecv`/`wait`/`test`.

use nicmsg::{Comm, Request, Source, TagMatch};

use super::{Buffers, Messenger, MAX_WINDOW};
use crate::BenchError;

/// The tag of every benchmark message (matching is in posting order, as in MPI).
const TAG: u32 = 1;

/// nicmsg between ranks 0 and 1.
///
/// Requests borrow the communicator and their buffers until they complete. Neither moves while a
/// request exists (the communicator is boxed; the send buffer is allocated once at the largest
/// size; a receive slot only grows while it is idle), and [`Drop`] ends every request before
/// the communicator and buffers go, so requests can be kept as `Request<'static>` inside the
/// messenger.
pub struct NicmsgMessenger {
    comm: &'static Comm,
    /// Owner of `comm` (dropped last, which also prints `NICMSG_STATS`).
    _comm_box: Box<Comm>,
    peer: u32,
    buffers: Buffers,
    slot_busy: [bool; MAX_WINDOW],
    pending: Vec<Request<'static>>,
}

impl NicmsgMessenger {
    /// Joins the job (`Comm::init`) and prepares a send buffer of `max_len` bytes.
    pub fn new(max_len: usize) -> Result<Self, BenchError> {
        let comm_box = Box::new(Comm::init()?);
        // SAFETY: the box's heap address is stable and outlives every use (see the type's doc).
        let comm: &'static Comm = unsafe { &*(&*comm_box as *const Comm) };
        if comm.size() != 2 {
            return Err(BenchError::Usage(format!(
                "benchmarks run on 2 ranks, this job has {}",
                comm.size()
            )));
        }
        Ok(Self {
            comm,
            _comm_box: comm_box,
            peer: 1 - comm.rank(),
            buffers: Buffers::new(max_len),
            slot_busy: [false; MAX_WINDOW],
            pending: Vec::with_capacity(2 * MAX_WINDOW),
        })
    }

    pub fn rank(&self) -> u32 {
        self.comm.rank()
    }

    /// The communicator, for engine mode and counters.
    pub fn comm(&self) -> &Comm {
        self.comm
    }

    fn finish_all(&mut self) {
        self.slot_busy = [false; MAX_WINDOW];
    }
}

impl Messenger for NicmsgMessenger {
    fn buffers(&mut self) -> &mut Buffers {
        &mut self.buffers
    }

    fn post_send(&mut self, len: usize) -> Result<(), BenchError> {
        let bytes = self.buffers.outgoing(len)?;
        // SAFETY: the send buffer is never resized or dropped while requests exist (it lives as
        // long as the messenger, whose drop ends `pending` first).
        let data: &'static [u8] = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), len) };
        self.pending.push(self.comm.isend(data, self.peer, TAG)?);
        Ok(())
    }

    fn post_recv(&mut self, slot: usize, len: usize) -> Result<(), BenchError> {
        let buffer = self
            .buffers
            .incoming(slot, len, self.slot_busy.get(slot) == Some(&true))?;
        // SAFETY: the slot is idle, so no request refers to it; it is not resized until
        // `wait_all`/`test_all` have completed the request made here.
        let data: &'static mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(buffer.as_mut_ptr(), buffer.len()) };
        self.slot_busy[slot] = true;
        let request = self
            .comm
            .irecv(data, Source::Rank(self.peer), TagMatch::Tag(TAG))?;
        self.pending.push(request);
        Ok(())
    }

    fn wait_all(&mut self) -> Result<(), BenchError> {
        let mut first_error = None;
        for request in self.pending.drain(..) {
            if let Err(error) = request.wait() {
                first_error.get_or_insert(error);
            }
        }
        self.finish_all();
        match first_error {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    fn test_all(&mut self) -> Result<bool, BenchError> {
        let mut index = 0;
        while index < self.pending.len() {
            match self.pending[index].test() {
                None => index += 1,
                Some(result) => {
                    // A finished request is done with; drop it (order no longer matters).
                    drop(self.pending.swap_remove(index));
                    result?;
                }
            }
        }
        if self.pending.is_empty() {
            self.finish_all();
            return Ok(true);
        }
        Ok(false)
    }
}

impl Drop for NicmsgMessenger {
    fn drop(&mut self) {
        // Requests first: dropping one cancels or waits for it while its buffer still exists.
        self.pending.clear();
    }
}

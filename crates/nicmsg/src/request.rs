//! A non-blocking operation in flight. It borrows its buffer until it completes; dropping an
//! unfinished request cancels it if it can and waits for it, so the engine never touches memory
//! the application got back.

use crate::comm::Comm;
use crate::{Error, Status};
use nicmsg_engine::{Outcome, Posted};

#[must_use = "dropping an unfinished Request cancels it and blocks until the engine lets go of \
              its buffer; complete it with wait or test"]
pub struct Request<'a> {
    comm: &'a Comm,
    /// The operation's slot, polled while waiting.
    slot: u32,
    /// The operation in the engine's hands; `None` once taken back (or abandoned).
    posted: Option<Posted>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(comm: &'a Comm, posted: Posted) -> Self {
        Self {
            comm,
            slot: posted.slot,
            posted: Some(posted),
        }
    }

    /// The operation's descriptor slot: what `TaggedEndpoint::next_finished_slot` names.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    pub(crate) fn comm(&self) -> &'a Comm {
        self.comm
    }

    /// The result if the operation has completed (no system call in thread mode). Once it
    /// returns `Some`, the request is finished: the result is not given again.
    #[must_use = "a completed operation's result is given once; dropping it loses the status \
                  and any error"]
    pub fn test(&mut self) -> Option<Result<Status, Error>> {
        self.test_outcome()
            .map(|(result, outcome)| result.map(|()| Status::from(&outcome)))
    }

    /// [`test`](Self::test) with the engine's whole report of the operation, given with an
    /// error too (a truncated receive's lengths).
    pub(crate) fn test_outcome(&mut self) -> Option<(Result<(), Error>, Outcome)> {
        self.comm.progress_once();
        self.outcome_if_done()
    }

    /// The result if the operation has completed, without running the engine: for a caller
    /// that tests many requests after one turn of progress (an inline engine's turn reads
    /// the socket; one per request would cost a system call each).
    pub(crate) fn outcome_if_done(&mut self) -> Option<(Result<(), Error>, Outcome)> {
        if self.posted.is_none() {
            let error = Error::BadBuffer("request already completed");
            return Some((Err(error), Outcome::default()));
        }
        if !self.comm.is_done(self.slot) {
            if let Err(error) = self.comm.check_engine() {
                self.abandon();
                return Some((Err(error), Outcome::default()));
            }
            return None;
        }
        let outcome = self.take();
        Some((self.comm.result_of(&outcome), outcome))
    }

    /// Blocks until the operation completes.
    pub fn wait(mut self) -> Result<Status, Error> {
        if let Err(error) = self.comm.wait_done(self.slot) {
            self.abandon();
            return Err(error);
        }
        self.finish()
    }

    /// Asks the engine to cancel the operation (MPI's `MPI_Cancel`); complete it with `wait` or
    /// `test` as usual. It then completes with `Error::Cancelled` (it did not happen: a send's
    /// message is withdrawn from its receiver and never delivered), or normally if it was too
    /// late (a receive that matched a message, a send that a receive matched or that had
    /// completed). Cancelling a send on the wire asks the receiver: one round trip.
    pub fn cancel(&self) {
        if let Some(posted) = &self.posted {
            self.comm.request_cancel(posted);
        }
    }

    pub(crate) fn wait_outcome(mut self) -> (Result<(), Error>, Outcome) {
        if let Err(error) = self.comm.wait_done(self.slot) {
            self.abandon();
            return (Err(error), Outcome::default());
        }
        let descriptor = self.take();
        (self.comm.result_of(&descriptor), descriptor)
    }

    /// The engine is gone: the slot and its memory can never be handed back, so they are left
    /// registered (the communicator is unusable anyway) and the request is marked finished.
    fn abandon(&mut self) {
        if let Some(posted) = self.posted.take() {
            self.comm.abandon(posted);
        }
    }

    /// Takes the finished operation back (called once its slot is DONE).
    fn take(&mut self) -> Outcome {
        let posted = self.posted.take().expect("a request is taken back once");
        match self.comm.take(posted) {
            Ok(outcome) => outcome,
            Err(_) => unreachable!("taken back only after its slot is done"),
        }
    }

    fn finish(&mut self) -> Result<Status, Error> {
        let descriptor = self.take();
        self.comm.result_of(&descriptor)?;
        Ok(Status::from(&descriptor))
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.posted.is_none() {
            return;
        }
        self.cancel();
        if self.comm.wait_done(self.slot).is_ok() {
            self.take();
        } else {
            self.abandon();
        }
    }
}

//! A non-blocking operation in flight. It borrows its buffer until it completes; dropping an
//! unfinished request cancels it if it can and waits for it, so the engine never touches memory
//! the application got back.

use crate::comm::Comm;
use crate::{Error, Status};
use nicmsg_engine::Outcome;
use nicmsg_proto::MAX_SEGMENTS;

#[must_use = "dropping an unfinished Request cancels it and blocks until the engine lets go of \
              its buffer; complete it with wait or test"]
pub struct Request<'a> {
    comm: &'a Comm,
    slot: u32,
    regions: [u32; MAX_SEGMENTS],
    region_count: usize,
    finished: bool,
    /// A cancel was asked for: the submission ring has room for one per slot, so asking again
    /// must not push another.
    cancel_requested: std::cell::Cell<bool>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(
        comm: &'a Comm,
        slot: u32,
        regions: [u32; MAX_SEGMENTS],
        region_count: usize,
    ) -> Self {
        Self {
            comm,
            slot,
            regions,
            region_count,
            finished: false,
            cancel_requested: std::cell::Cell::new(false),
        }
    }

    pub(crate) fn slot(&self) -> u32 {
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
        if self.finished {
            return Some(Err(Error::BadBuffer("request already completed")));
        }
        self.comm.progress_once();
        if !self.comm.is_done(self.slot) {
            if let Err(error) = self.comm.check_engine() {
                self.abandon();
                return Some(Err(error));
            }
            return None;
        }
        Some(self.finish())
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
        if !self.finished && !self.cancel_requested.replace(true) {
            self.comm.request_cancel(self.slot);
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
        self.finished = true;
        self.comm.abandon(self.slot);
    }

    fn take(&mut self) -> Outcome {
        self.finished = true;
        self.comm
            .take(self.slot, &self.regions[..self.region_count])
    }

    fn finish(&mut self) -> Result<Status, Error> {
        let descriptor = self.take();
        self.comm.result_of(&descriptor)?;
        Ok(Status::from(&descriptor))
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.finished {
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

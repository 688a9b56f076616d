//! The long-lived objects behind C handles (a communicator, a datagram socket), kept so that a
//! call made with a handle after it was finalized or closed (a second `nicmsg_finalize`
//! included) returns `NICMSG_ERR_ARG` instead of reading freed memory.
//!
//! Finalizing drops the object but leaves its shell allocated for the rest of the process: a
//! few dozen bytes per communicator or socket ever made, which a program makes once or a few
//! times. Requests are not kept so: there are millions of them, and the calls that complete
//! one set the caller's pointer to NULL, as MPI sets `MPI_REQUEST_NULL`.

use crate::capi::{Turn, NICMSG_ERR_ARG};
use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};

/// An object, its thread turn flag ([`Turn`]) and whether it is gone.
pub(crate) struct Handle<T> {
    /// Read through shared references while a thread has the turn; dropped in place, under
    /// the turn, by [`Handle::retire`]. Never touched once `gone` is set.
    object: UnsafeCell<ManuallyDrop<T>>,
    busy: AtomicBool,
    /// Finalized or closed: the object was dropped; only the shell remains.
    gone: AtomicBool,
}

impl<T> Handle<T> {
    pub(crate) fn new(object: T) -> Self {
        Self {
            object: UnsafeCell::new(ManuallyDrop::new(object)),
            busy: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        }
    }

    /// The object with the calling thread's turn on it: `NICMSG_ERR_BUSY` while another
    /// thread is inside a call on it, `NICMSG_ERR_ARG` once it is gone.
    pub(crate) fn enter(&'static self) -> Result<(&'static T, Turn), c_int> {
        let turn = Turn::take(&self.busy)?;
        if self.is_gone() {
            return Err(NICMSG_ERR_ARG);
        }
        // SAFETY: not gone, and it cannot go while this turn is held (only `retire`, which
        // takes the turn, drops it); the reference lives as long as the caller's use of the
        // handle, which the C contract keeps within the object's life.
        let object: &ManuallyDrop<T> = unsafe { &*self.object.get() };
        Ok((object, turn))
    }

    /// True once the object was finalized or closed.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The turn flag, for tests that hold the turn as another thread would.
    #[cfg(test)]
    pub(crate) fn busy_flag(&'static self) -> &'static AtomicBool {
        &self.busy
    }

    /// Drops the object, whose turn the caller holds (`turn`, from [`Handle::enter`]); the
    /// shell stays, and every later call finds it gone.
    ///
    /// # Safety
    /// No reference to the object obtained from [`Handle::enter`] may be used afterwards.
    pub(crate) unsafe fn retire(&self, turn: Turn) {
        self.gone.store(true, Ordering::Release);
        // SAFETY: the caller holds the turn, so no other thread is inside a call on the
        // object; `gone` is set first, so no later call reaches it; dropped exactly once,
        // since a second retire cannot get past `enter`.
        unsafe { ManuallyDrop::drop(&mut *self.object.get()) };
        drop(turn);
    }
}

/// The handle behind a C pointer, or `NICMSG_ERR_ARG` for NULL.
///
/// # Safety
/// `pointer` is null or was made by `Box::into_raw` of a handle (which is never freed).
pub(crate) unsafe fn from_pointer<H>(pointer: *const H) -> Result<&'static H, c_int> {
    // SAFETY: null, or a live allocation for the rest of the process (this function's
    // contract).
    unsafe { pointer.as_ref::<'static>() }.ok_or(NICMSG_ERR_ARG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::NICMSG_ERR_BUSY;
    use std::sync::Arc;

    /// Holds a count on its `Arc` until dropped.
    struct Counted(#[allow(dead_code)] Arc<()>);

    #[test]
    fn a_retired_handle_turns_every_call_away_and_drops_its_object_once() {
        let alive = Arc::new(());
        let handle: &'static Handle<Counted> =
            Box::leak(Box::new(Handle::new(Counted(alive.clone()))));
        let (_, turn) = handle.enter().map_err(|_| ()).unwrap();
        assert_eq!(handle.enter().err(), Some(NICMSG_ERR_BUSY));
        // SAFETY: the reference from `enter` is not used after.
        unsafe { handle.retire(turn) };
        assert_eq!(Arc::strong_count(&alive), 1, "the object was dropped");
        assert!(handle.is_gone());
        assert_eq!(handle.enter().err(), Some(NICMSG_ERR_ARG));
        assert_eq!(handle.enter().err(), Some(NICMSG_ERR_ARG), "and again");
    }
}

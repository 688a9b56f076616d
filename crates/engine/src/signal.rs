//! A descriptor that becomes readable when the engine completes an operation, for a host that
//! sleeps in its own poll loop (libfabric's `FI_WAIT_FD` wait object, an application's epoll)
//! instead of in the library.
//!
//! The host arms the signal just before it sleeps, then looks at the completion count once
//! more; the engine, after every completion, makes the descriptor readable if the signal is
//! armed, and disarms it. Both sides store before they load, in one total order (`SeqCst` on
//! the count and on the flag), so a completion the host's second look misses finds the signal
//! armed. Nothing is made until a host asks for the descriptor; until then a completion costs
//! one load.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The signal (an eventfd) and whether a host sleeps on it.
#[derive(Debug, Default)]
pub struct CompletionSignal {
    fd: OnceLock<OwnedFd>,
    armed: AtomicBool,
}

impl CompletionSignal {
    /// Host side: the descriptor, made on first use. Readable after a completion that found
    /// the signal armed, until the next [`arm`](Self::arm).
    pub fn fd(&self) -> io::Result<RawFd> {
        if let Some(fd) = self.fd.get() {
            return Ok(fd.as_raw_fd());
        }
        // SAFETY: plain system call; the descriptor is owned right after.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let made = unsafe { OwnedFd::from_raw_fd(raw) };
        // Two hosts racing: one descriptor wins, the other is closed.
        Ok(self.fd.get_or_init(|| made).as_raw_fd())
    }

    /// Host side, about to sleep on the descriptor: clears it and arms the signal. The caller
    /// then checks for completions once more (the count, `Table::completion_count`) and sleeps
    /// only if none came since it last looked.
    pub fn arm(&self) {
        if let Some(fd) = self.fd.get() {
            let mut count = 0u64;
            // SAFETY: reading 8 bytes into a u64 from our non-blocking eventfd (it may be
            // empty: EAGAIN, ignored).
            unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        }
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Engine side, after a completion was counted: wakes a host sleeping on the descriptor.
    #[inline]
    pub fn notify(&self) {
        if self.armed.load(Ordering::SeqCst) && self.armed.swap(false, Ordering::SeqCst) {
            self.ring();
        }
    }

    fn ring(&self) {
        if let Some(fd) = self.fd.get() {
            let one = 1u64;
            // SAFETY: writing 8 bytes from a u64 to our eventfd (it cannot overflow at one
            // write per arming).
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut poll, 1, 0) == 1 }
    }

    #[test]
    fn a_completion_wakes_an_armed_host_once() {
        let signal = CompletionSignal::default();
        signal.notify(); // no descriptor yet: nothing happens
        let fd = signal.fd().unwrap();
        assert_eq!(signal.fd().unwrap(), fd, "one descriptor");
        signal.notify();
        assert!(!readable(fd), "not armed: no wake-up");
        signal.arm();
        signal.notify();
        assert!(readable(fd));
        signal.notify();
        signal.arm();
        assert!(!readable(fd), "arming clears it");
    }
}

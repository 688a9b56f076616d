//! Blocking until a datagram arrives, the host rings the doorbell, or a timeout passes: epoll over
//! the transport's descriptors and an eventfd. Only used when idle; the busy path never enters it.

use std::io;
use std::os::fd::RawFd;

pub struct Poller {
    epoll: RawFd,
    doorbell: RawFd,
}

impl Poller {
    /// A poller that wakes when any of `transport_fds` is readable (or the doorbell rings).
    pub fn new(transport_fds: &[RawFd]) -> io::Result<Self> {
        // SAFETY: plain syscalls; every returned descriptor is checked and owned by `Self`.
        unsafe {
            let epoll = check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?;
            let doorbell = match check(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)) {
                Ok(fd) => fd,
                Err(error) => {
                    libc::close(epoll);
                    return Err(error);
                }
            };
            let poller = Self { epoll, doorbell };
            for &fd in transport_fds {
                poller.add(fd)?;
            }
            poller.add(doorbell)?;
            Ok(poller)
        }
    }

    fn add(&self, fd: RawFd) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: valid descriptors and a valid event structure.
        check(unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, fd, &mut event) })?;
        Ok(())
    }

    /// Sleeps until readable, rung, or `timeout_ns` passes. Clears the doorbell. Returns true
    /// if a transport descriptor reported an error condition (`EPOLLERR`: its error queue holds
    /// something, such as a peer's refusal; see `Transport::note_socket_error`).
    pub fn wait(&self, timeout_ns: u64) -> bool {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // Round up: epoll counts milliseconds, and waking early only costs another turn.
        let timeout_ms = timeout_ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32;
        // SAFETY: `events` outlives the call; the count matches its length.
        let ready = unsafe { libc::epoll_wait(self.epoll, events.as_mut_ptr(), 4, timeout_ms) };
        let mut count = 0u64;
        // SAFETY: reading 8 bytes into a u64 from our non-blocking eventfd.
        unsafe { libc::read(self.doorbell, (&mut count as *mut u64).cast(), 8) };
        let ready = usize::try_from(ready).unwrap_or(0).min(events.len());
        events[..ready]
            .iter()
            .any(|event| event.events & libc::EPOLLERR as u32 != 0)
    }

    /// Wakes a `wait` in progress (or makes the next one return at once).
    pub fn ring(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a u64 to our eventfd.
        unsafe { libc::write(self.doorbell, (&one as *const u64).cast(), 8) };
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: both descriptors are owned by this poller.
        unsafe {
            libc::close(self.doorbell);
            libc::close(self.epoll);
        }
    }
}

fn check(result: i32) -> io::Result<RawFd> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

//! Blocking until a datagram arrives, the host rings the doorbell, or a timeout passes: epoll over
//! the transport's descriptors and an eventfd. Only used when idle; the busy path never enters it.
//!
//! The transport's descriptors are in the epoll set only while some thread may sleep on it
//! (holds a [`Watch`]). A socket in an epoll set calls back into it for every datagram queued
//! on it, on the sender's path (loopback, veth): measured on a loopback ping-pong, 0.19 us a
//! datagram of a half round trip of 1.9 us, paid even while nobody sleeps. A thread spinning
//! in the library reads the socket itself and needs no such call; a thread about to sleep
//! watches, and the kernel reports a datagram that came before the watch began at once.

use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;

pub struct Poller {
    epoll: RawFd,
    doorbell: RawFd,
    transport_fds: Vec<RawFd>,
    /// Threads holding a [`Watch`]: the transport's descriptors are in the epoll set exactly
    /// while this is above 0. A lock, not an atomic, so that adding and removing them follows
    /// the count in order; taken only on the way into and out of a sleep.
    watchers: Mutex<usize>,
}

impl Poller {
    /// A poller that wakes when the doorbell rings or, while watched, when any of
    /// `transport_fds` is readable.
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
            let poller = Self {
                epoll,
                doorbell,
                transport_fds: transport_fds.to_vec(),
                watchers: Mutex::new(0),
            };
            poller.control(libc::EPOLL_CTL_ADD, doorbell)?;
            // Fail now, not at the first sleep, on descriptors epoll cannot watch.
            for &fd in transport_fds {
                poller.control(libc::EPOLL_CTL_ADD, fd)?;
                poller.control(libc::EPOLL_CTL_DEL, fd)?;
            }
            Ok(poller)
        }
    }

    fn control(&self, op: libc::c_int, fd: RawFd) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: valid descriptors and a valid event structure.
        check(unsafe { libc::epoll_ctl(self.epoll, op, fd, &mut event) })?;
        Ok(())
    }

    /// Puts the transport's descriptors in the epoll set (if no other thread has) until the
    /// returned guard is dropped; sleep through [`Watch::wait`]. A thread that sleeps again
    /// and again (the standby while the application is away) keeps one watch across them.
    pub fn watch(&self) -> Watch<'_> {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        if *watchers == 0 {
            for &fd in &self.transport_fds {
                // Cannot fail on a descriptor `new` added once (an error would leave only the
                // doorbell and timeout to wake the sleeper, a late turn, not a hang).
                let _ = self.control(libc::EPOLL_CTL_ADD, fd);
            }
        }
        *watchers += 1;
        Watch { poller: self }
    }

    fn unwatch(&self) {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        *watchers -= 1;
        if *watchers == 0 {
            for &fd in &self.transport_fds {
                let _ = self.control(libc::EPOLL_CTL_DEL, fd);
            }
        }
    }

    /// Sleeps until rung or `timeout_ns` passes, and until readable if the caller watches.
    /// Clears the doorbell. Returns true if a transport descriptor reported an error condition
    /// (`EPOLLERR`: its error queue holds something, such as a peer's refusal; see
    /// `Transport::note_socket_error`).
    fn sleep(&self, timeout_ns: u64) -> bool {
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

    /// Sleeps until rung or `timeout_ns` passes, not watching the transport (a poller made
    /// with no transport descriptors: a doorbell).
    pub fn wait_for_ring(&self, timeout_ns: u64) {
        self.sleep(timeout_ns);
    }

    /// Wakes a `wait` in progress (or makes the next one return at once).
    pub fn ring(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a u64 to our eventfd.
        unsafe { libc::write(self.doorbell, (&one as *const u64).cast(), 8) };
    }
}

/// A thread that may sleep on the poller: the transport's descriptors stay in its epoll set
/// while any watch lives.
pub struct Watch<'a> {
    poller: &'a Poller,
}

impl Watch<'_> {
    /// Sleeps until readable, rung, or `timeout_ns` passes; see [`Poller`]'s `sleep`.
    pub fn wait(&self, timeout_ns: u64) -> bool {
        self.poller.sleep(timeout_ns)
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.poller.unwatch();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// A timeout no test waits out: a sleep that returns in well under it was woken.
    const LONG_NS: u64 = 2_000_000_000;

    fn socket_pair() -> (UdpSocket, UdpSocket) {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_nonblocking(true).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.connect(receiver.local_addr().unwrap()).unwrap();
        (receiver, sender)
    }

    fn returns_before(timeout: Duration, sleep: impl FnOnce()) -> bool {
        let began = Instant::now();
        sleep();
        began.elapsed() < timeout
    }

    #[test]
    fn a_watched_sleep_wakes_for_a_datagram_sent_before_the_watch_began() {
        let (receiver, sender) = socket_pair();
        let poller = Poller::new(&[receiver.as_raw_fd()]).unwrap();
        sender.send(b"early").unwrap();
        let watch = poller.watch();
        assert!(returns_before(Duration::from_secs(1), || {
            watch.wait(LONG_NS);
        }));
    }

    #[test]
    fn a_watched_sleep_wakes_for_a_datagram_sent_while_it_sleeps() {
        let (receiver, sender) = socket_pair();
        let poller = Poller::new(&[receiver.as_raw_fd()]).unwrap();
        let watch = poller.watch();
        let send = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            sender.send(b"late").unwrap();
        });
        assert!(returns_before(Duration::from_secs(1), || {
            watch.wait(LONG_NS);
        }));
        send.join().unwrap();
    }

    #[test]
    fn the_transport_leaves_the_set_only_when_the_last_watch_ends() {
        let (receiver, sender) = socket_pair();
        let poller = Poller::new(&[receiver.as_raw_fd()]).unwrap();
        let first = poller.watch();
        drop(poller.watch());
        sender.send(b"for the first").unwrap();
        assert!(returns_before(Duration::from_secs(1), || {
            first.wait(LONG_NS);
        }));
        drop(first);
        // Nobody watches: the datagram still queued wakes nothing; the timeout ends the sleep.
        assert!(!returns_before(Duration::from_millis(15), || {
            poller.wait_for_ring(20_000_000);
        }));
        // A new watch sees it at once.
        assert!(returns_before(Duration::from_secs(1), || {
            poller.watch().wait(LONG_NS);
        }));
    }

    #[test]
    fn a_ring_wakes_a_sleep_with_or_without_a_watch() {
        let (receiver, _sender) = socket_pair();
        let poller = Poller::new(&[receiver.as_raw_fd()]).unwrap();
        poller.ring();
        assert!(returns_before(Duration::from_secs(1), || {
            poller.wait_for_ring(LONG_NS);
        }));
        poller.ring();
        assert!(returns_before(Duration::from_secs(1), || {
            poller.watch().wait(LONG_NS);
        }));
    }
}

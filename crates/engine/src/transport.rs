//! What the engine needs from a wire backend. Each transport implements it beside its own code
//! (`crates/udp/src/engine.rs`, `crates/xdp/src/engine.rs`, the simulator's
//! `crates/sim/src/transport.rs`); the API picks one at start-up (`crates/nicmsg/src/backend.rs`)
//! and the engine drives it as a `Box<dyn Transport>`. Where another goes:
//! `docs/architecture.md`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Most pieces of one outgoing frame: its headers plus one payload piece per buffer segment.
pub const MAX_FRAME_PIECES: usize = 1 + nicmsg_proto::MAX_SEGMENTS;

/// Where the payload of the datagram expected in one receive slot should go: its first
/// `header_len` bytes are headers, kept in the transport's buffer, the `len` after them go to
/// `dest`.
#[derive(Debug, Clone, Copy)]
pub struct PlacementTarget {
    pub header_len: usize,
    pub dest: *mut u8,
    pub len: usize,
}

// SAFETY: a target is an address in registered memory handed to whichever thread runs the
// engine; it is only dereferenced by the kernel inside `receive_placed`, under that call's
// contract.
unsafe impl Send for PlacementTarget {}

/// A datagram as offered to the engine.
#[derive(Debug, Clone, Copy)]
pub enum Received<'a> {
    Bytes(&'a [u8]),
    /// Its payload already lies at the target of plan entry `slot`; `header` is the rest.
    Placed {
        slot: usize,
        header: &'a [u8],
        len: usize,
    },
}

/// Who sent a datagram, as the transport knows it: the job's rank its source address belongs
/// to (`None`: not a member), and the source address itself where the transport has it (an
/// open endpoint, whose peers are added by address, needs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Origin {
    pub rank: Option<u32>,
    pub address: Option<SocketAddr>,
}

impl Origin {
    pub fn rank(rank: Option<u32>) -> Self {
        Self {
            rank,
            address: None,
        }
    }
}

/// What waits at the head of a transport's receive queue ([`Transport::peek`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peeked {
    /// Nothing: a receive now would bring nothing either.
    Nothing,
    /// A datagram from `origin` whose first frame is `frame_len` bytes long, `datagram_len`
    /// in all (a transport that receives a run of frames as one datagram gives the first
    /// frame's length and the run's; the frames after the first are `frame_len` long but the
    /// last), its first `head_len` bytes copied out.
    Datagram {
        origin: Origin,
        frame_len: usize,
        datagram_len: usize,
        head_len: usize,
    },
    /// The transport cannot tell (it cannot look ahead, or the look failed): receive as usual.
    Unknown,
}

impl Peeked {
    /// The look at a datagram a transport holds in memory (the simulator's, a test's): its
    /// first bytes copied into `head`.
    pub fn held(origin: Origin, bytes: &[u8], head: &mut [u8]) -> Self {
        Self::held_run(origin, bytes, bytes.len(), head)
    }

    /// The look at a run of datagrams held in memory that a receive takes as one coalesced
    /// datagram of `run_len` bytes, `first` its first: its first bytes copied into `head`.
    pub fn held_run(origin: Origin, first: &[u8], run_len: usize, head: &mut [u8]) -> Self {
        let head_len = head.len().min(first.len());
        head[..head_len].copy_from_slice(&first[..head_len]);
        Self::Datagram {
            origin,
            frame_len: first.len(),
            datagram_len: run_len,
            head_len,
        }
    }
}

pub trait Transport: Send {
    /// Which transport carries the frames, for logs and counters.
    fn name(&self) -> &'static str;

    /// Sends `frames` (destination rank, pieces gathered in order into one datagram) without
    /// copying them; returns how many the backend took. Taking fewer is back-pressure: the
    /// caller offers the rest again later.
    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize>;

    /// Receives one batch without blocking; calls `deliver(origin, bytes)` for each datagram.
    fn receive(&mut self, deliver: &mut dyn FnMut(Origin, &[u8])) -> io::Result<usize>;

    /// Like `receive`, but the payload of the datagram landing in receive slot `i` (for
    /// `i < plan.len()`) is scattered straight to `plan[i]` (speculative header/payload split).
    /// Such a datagram is offered as `Received::Placed` when `looks_expected(i, head, len)` says
    /// its header is the guessed one; if `deliver` then returns false (or the header was not the
    /// guessed one) the transport puts the datagram back together and offers it as bytes.
    /// A transport without scatter support may ignore the plan (the default).
    ///
    /// # Safety
    /// Every target must be valid for writes of its length, not overlap another, and not be
    /// accessed by anyone else during the call (wrong guesses overwrite it).
    unsafe fn receive_placed(
        &mut self,
        plan: &[PlacementTarget],
        looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
        deliver: &mut dyn FnMut(Origin, Received<'_>) -> bool,
    ) -> io::Result<usize> {
        let _ = (plan, looks_expected);
        self.receive(&mut |source, bytes| {
            deliver(source, Received::Bytes(bytes));
        })
    }

    /// Copies the first bytes of the next datagram waiting into `head` without taking it, so
    /// the engine can decide where its payload goes before receiving it (the RTS of a message
    /// whose receive is posted: `nicmsg_proto`'s `first_frame.rs`). The next receive then gets
    /// that datagram first. A transport that cannot look ahead says `Unknown` (the default).
    fn peek(&mut self, head: &mut [u8]) -> Peeked {
        let _ = head;
        Peeked::Unknown
    }

    /// The next receive takes at most one datagram: the one [`peek`](Self::peek) saw, so the
    /// datagrams behind it are looked at before they are received. Without it a batch would
    /// take the RTS waiting behind a short frame the engine looked at. The default ignores it.
    fn receive_one_next(&mut self) {}

    /// Descriptors of which one becomes readable when datagrams arrive (for blocking waits):
    /// one per path frames may come in by.
    fn readable_fds(&self) -> Vec<RawFd>;

    /// Largest frame the backend carries.
    fn max_frame(&self) -> usize;

    /// True if every datagram this transport hands over had its payload verified on the way
    /// (the kernel drops a UDP datagram whose checksum fails), so frames may leave their
    /// payload out of their own checksum (`Config::link_checks_payload`). False for a path
    /// that checks nothing, such as AF_XDP's rings (the default).
    fn checks_payload(&self) -> bool {
        false
    }

    /// Frames to `rank` go to `address` from now on (an open endpoint binding a peer slot).
    /// A transport that cannot reach peers by address refuses.
    fn bind_peer(&mut self, rank: u32, address: SocketAddr) -> io::Result<()> {
        let _ = (rank, address);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the {} transport takes no peers by address", self.name()),
        ))
    }

    /// The poller saw an error condition on the backend's descriptors (`EPOLLERR`), or it is
    /// time for a periodic look: read the error queue at the next `take_refused`.
    fn note_socket_error(&mut self) {}

    /// True if `take_refused` may have something (cheap: no system call), so a driver skips the
    /// call on its hot path otherwise.
    fn refusals_may_be_queued(&self) -> bool {
        false
    }

    /// Calls `refused(rank)` for each frame a peer's host refused (ICMP port unreachable: the
    /// peer's process is gone) since the last call; returns how many.
    fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        let _ = refused;
        0
    }

    /// One line on which path frames take and the backend's own counters, for `NICMSG_STATS`.
    fn summary(&self) -> String {
        String::new()
    }
}

/// The engine drives whichever transport the API chose at start-up through one box: a call per
/// batch of frames, so the indirection costs nothing measurable.
impl<T: Transport + ?Sized> Transport for Box<T> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        (**self).send(frames)
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Origin, &[u8])) -> io::Result<usize> {
        (**self).receive(deliver)
    }

    unsafe fn receive_placed(
        &mut self,
        plan: &[PlacementTarget],
        looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
        deliver: &mut dyn FnMut(Origin, Received<'_>) -> bool,
    ) -> io::Result<usize> {
        // SAFETY: forwarded from this function's contract.
        unsafe { (**self).receive_placed(plan, looks_expected, deliver) }
    }

    fn peek(&mut self, head: &mut [u8]) -> Peeked {
        (**self).peek(head)
    }

    fn receive_one_next(&mut self) {
        (**self).receive_one_next()
    }

    fn readable_fds(&self) -> Vec<RawFd> {
        (**self).readable_fds()
    }

    fn max_frame(&self) -> usize {
        (**self).max_frame()
    }

    fn checks_payload(&self) -> bool {
        (**self).checks_payload()
    }

    fn bind_peer(&mut self, rank: u32, address: SocketAddr) -> io::Result<()> {
        (**self).bind_peer(rank, address)
    }

    fn note_socket_error(&mut self) {
        (**self).note_socket_error()
    }

    fn refusals_may_be_queued(&self) -> bool {
        (**self).refusals_may_be_queued()
    }

    fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        (**self).take_refused(refused)
    }

    fn summary(&self) -> String {
        (**self).summary()
    }
}

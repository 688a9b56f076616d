//! What the engine needs from a wire backend. UDP is the first; AF_XDP and shared memory follow.

use std::io;
use std::os::fd::RawFd;

/// Most pieces of one outgoing frame: its headers plus one payload piece per buffer segment.
pub const MAX_FRAME_PIECES: usize = 1 + nicmsg_proto::MAX_SEGMENTS;

pub trait Transport: Send {
    /// Sends `frames` (destination rank, pieces gathered in order into one datagram) without
    /// copying them; returns how many the backend took. Taking fewer is back-pressure: the
    /// caller offers the rest again later.
    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize>;

    /// Receives one batch without blocking; calls `deliver(source_rank, bytes)` for each
    /// datagram, with the rank the source address belongs to (`None`: not a member of the job).
    fn receive(&mut self, deliver: &mut dyn FnMut(Option<u32>, &[u8])) -> io::Result<usize>;

    /// A descriptor that becomes readable when datagrams arrive (for blocking waits).
    fn readable_fd(&self) -> RawFd;

    /// Largest frame the backend carries.
    fn max_frame(&self) -> usize;
}

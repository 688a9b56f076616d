//! Counters of one transport. Plain integers: the transport is driven by one thread through
//! `&mut self`, so no atomics.

/// Datagrams dropped on the send side, by reason. A dropped datagram counts as taken (the caller
/// does not retry it); the protocol retransmits what it needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendErrors {
    /// `ECONNREFUSED`: an earlier datagram drew an ICMP port unreachable. Unconnected UDP sockets
    /// see this only when the kernel reports a pending socket error on a later send.
    pub refused: u64,
    /// `EMSGSIZE`: larger than the kernel allows on the path (e.g. with path-MTU discovery set to
    /// "do", or above the protocol maximum).
    pub msg_size: u64,
    /// `EHOSTUNREACH`, `ENETUNREACH`, `EHOSTDOWN`, `ENETDOWN`: no route or link.
    pub unreachable: u64,
    /// `EACCES`, `EPERM`: refused by a firewall rule or a broadcast address.
    pub denied: u64,
    /// Rejected before the kernel: the rank has no address (see `set_peers`).
    pub unknown_peer: u64,
    /// Rejected before the kernel: more than [`MAX_PIECES`](crate::MAX_PIECES) pieces.
    pub too_many_pieces: u64,
    /// Rejected before the kernel: longer than the transport's `max_frame`.
    pub oversize: u64,
    /// Any other per-datagram error (e.g. `EAFNOSUPPORT` for an IPv6 peer on an IPv4 socket).
    pub other: u64,
    /// errno of the latest error counted in `other` (0 if none), for diagnostics.
    pub last_other_errno: i32,
}

impl SendErrors {
    /// All datagrams dropped on the send side.
    pub fn total(&self) -> u64 {
        self.refused
            + self.msg_size
            + self.unreachable
            + self.denied
            + self.unknown_peer
            + self.too_many_pieces
            + self.oversize
            + self.other
    }
}

/// Counters since the transport was bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams a peer's host refused (ICMP port unreachable), read from the error queue.
    pub refusals: u64,
    /// `sendmmsg` calls, failed ones included.
    pub send_syscalls: u64,
    /// `recvmmsg` calls, failed and empty ones included.
    pub recv_syscalls: u64,
    /// Looks at the next datagram's headers ahead of it (`peek_next`), one system call each.
    pub peeks: u64,
    /// Datagrams the kernel accepted (each segment of a GSO datagram counts as one).
    pub datagrams_sent: u64,
    /// GSO datagrams the kernel accepted (runs of frames sent with one `UDP_SEGMENT` message).
    pub gso_datagrams: u64,
    /// GSO sends the kernel refused (`EIO`/`EINVAL`), after which GSO is off for the socket.
    pub gso_refused: u64,
    /// Bytes of the accepted datagrams (UDP payload).
    pub bytes_sent: u64,
    /// Datagrams received whole (truncated ones excluded); each frame of a coalesced (GRO)
    /// datagram counts as one.
    pub datagrams_received: u64,
    /// Coalesced datagrams received (`UDP_GRO`), each split into the frames it carried.
    pub gro_datagrams: u64,
    /// Times receiving went one datagram at a time (`UDP_GRO` off) after a long stretch of
    /// single frames, and back to batches for a burst or a run (`mode.rs`).
    pub to_single_frames: u64,
    pub to_batches: u64,
    /// Times it stayed in batches because a datagram was queued when `UDP_GRO` went off.
    pub single_frames_deferred: u64,
    /// Bytes of the datagrams received whole.
    pub bytes_received: u64,
    /// Datagrams dropped on the send side, by reason.
    pub send_errors: SendErrors,
    /// Sends stopped by `EAGAIN` (socket send buffer full); the rest stayed with the caller.
    pub send_would_block: u64,
    /// Sends stopped by `ENOBUFS`/`ENOMEM` (device queue or memory); the rest stayed with the
    /// caller.
    pub send_no_buffers: u64,
    /// `recvmmsg` calls that found nothing (`EAGAIN`).
    pub recv_would_block: u64,
    /// Errors reported by `recvmmsg` that are not fatal to the socket (a pending ICMP-derived
    /// error, memory pressure); the call is retried or reported as empty.
    pub recv_errors: u64,
    /// Datagrams (or segments of a coalesced one) longer than `max_frame`, received and
    /// discarded: cut by the kernel to the receive slot (`MSG_TRUNC`), or, with GRO's larger
    /// slots, received whole and refused. A peer with a larger MTU sends these.
    pub truncated: u64,
}

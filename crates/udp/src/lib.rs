//! # nicmsg UDP transport (Linux)
//!
//! One non-blocking UDP socket with batched system calls and no copy on the send side:
//!
//! - **Send**: a [`SendBatch`] gathers frames (a header slice, then payload slices straight from
//!   user memory) into preallocated `mmsghdr`/`iovec` arrays and hands them to the kernel with
//!   as few `sendmmsg` calls as possible. The batch borrows the transport mutably and the bytes
//!   for its whole life, so the borrow checker guarantees the memory the iovecs point at outlives
//!   the system call. [`UdpTransport::send_batch`] does the same for a slice of frames. Runs of
//!   equal-length frames to one peer go out as one GSO datagram (`UDP_SEGMENT`), which the
//!   kernel cuts into the same datagrams after a single trip down the stack.
//! - **Receive**: [`UdpTransport::recv_batch`] makes one `recvmmsg` into preallocated slots of
//!   `max_frame` bytes; [`UdpTransport::received`] reads them back. With `UDP_GRO` a slot takes
//!   a whole coalesced run (64 KiB) and is split back into its frames, each read as a datagram
//!   of its own; a receive plan chains the frames it expects through one slot, so their payload
//!   still lands straight in user memory. After a long stretch of receives of one frame each
//!   (a ping-pong) the socket receives one datagram a call with `UDP_GRO` off, which costs
//!   each datagram less, and goes back to batches at the first backlog (`mode.rs`).
//! - **Fast path**: no allocation, no lock, no blocking. All buffers are allocated by
//!   [`UdpTransport::bind`]. The file descriptor is exposed for `epoll`/`poll`.
//! - **Errors**: `EAGAIN`/`ENOBUFS` stop a send and leave the rest to the caller; per-datagram
//!   errors (`ECONNREFUSED`, `EMSGSIZE`, ...) drop that datagram and are counted in
//!   [`UdpStats`]; nothing panics on network conditions.
//!
//! Frame size: `max_frame` is the largest UDP payload, see [`max_datagram_for_mtu`] (1472 for a
//! 1500-byte Ethernet MTU, 8972 for jumbo 9000, up to 65507 over IPv4 loopback or a veth with a
//! 65535 MTU). Message size is not limited here: the protocol core cuts messages into frames.
//! Datagrams larger than the link MTU are fragmented by IP (the kernel's default path-MTU
//! behaviour); size `max_frame` to the MTU to avoid that.

mod addr;
mod engine;
mod mode;
mod offload;
mod recv;
mod refused;
mod stats;
mod transport;

pub use addr::{canonical, RawAddr, RAW_ADDR_LEN};
pub use recv::Placement;
pub use refused::MAX_REFUSALS_PER_DRAIN;
pub use stats::{SendErrors, UdpStats};
pub use transport::{force_buffer_sizes, PeekedDatagram, SendBatch, UdpOptions, UdpTransport};

/// Frames per `sendmmsg` by default. One system call costs about a microsecond; 64 frames make
/// that a few percent of the per-frame cost, and the scratch (64 `mmsghdr` + 64 × 17 `iovec`,
/// about 21 KiB) stays in cache. Also about one send window's worth of frames for a few peers.
pub const SEND_BATCH: usize = 64;

/// Datagrams per `recvmmsg` by default. Same reasoning as [`SEND_BATCH`]; the receive buffers
/// take `RECV_BATCH × max_frame` bytes (94 KiB at 1472, 4 MiB at 65507).
pub const RECV_BATCH: usize = 64;

/// Largest batch accepted in [`UdpOptions`]: the kernel silently caps the vector length of
/// `sendmmsg`/`recvmmsg` at `UIO_MAXIOV` (1024).
pub const MAX_BATCH: usize = 1024;

/// Most pieces (iovecs) in one datagram: the header, then up to the 16 payload segments a
/// protocol buffer may have (`nicmsg_proto::MAX_SEGMENTS`); a frame's payload never spans more
/// segments than its message buffer has.
pub const MAX_PIECES: usize = 17;

/// Default `max_frame`: a 1500-byte Ethernet MTU less the IPv4 and UDP headers.
pub const DEFAULT_MAX_FRAME: usize = 1472;

/// Default socket buffer request (`SO_SNDBUF`/`SO_RCVBUF`): 4 MiB holds about 2800 frames of 1472
/// bytes (the kernel counts about twice the payload per datagram), so a burst of full send
/// windows from several peers is absorbed while the engine is busy elsewhere. The kernel default
/// (about 208 KiB) drops datagrams under such bursts.
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// Largest UDP payload over IPv4: 65535 (IP total length) − 20 (IP header) − 8 (UDP header).
pub const MAX_UDP_PAYLOAD_V4: usize = 65507;

/// Largest UDP payload over IPv6 without jumbograms: 65535 (IPv6 payload length, which excludes
/// the 40-byte fixed header) − 8 (UDP header).
pub const MAX_UDP_PAYLOAD_V6: usize = 65527;

const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
const UDP_HEADER: usize = 8;

/// Largest UDP payload that fits one link frame of `mtu` bytes without IP fragmentation.
///
/// Rule: `mtu − IP header − 8` (UDP header), where the IP header is 20 bytes for IPv4 (no
/// options) and 40 for IPv6 (no extension headers), capped at the protocol maximum
/// ([`MAX_UDP_PAYLOAD_V4`] = 65507, [`MAX_UDP_PAYLOAD_V6`] = 65527); 0 if the MTU cannot hold
/// the headers. Examples: MTU 1500 → 1472 (IPv4) / 1452 (IPv6); 9000 → 8972 / 8952;
/// 65535 → 65507 / 65487; loopback's 65536 → 65507 / 65488.
pub fn max_datagram_for_mtu(mtu: usize, ipv6: bool) -> usize {
    if ipv6 {
        mtu.saturating_sub(IPV6_HEADER + UDP_HEADER)
            .min(MAX_UDP_PAYLOAD_V6)
    } else {
        mtu.saturating_sub(IPV4_HEADER + UDP_HEADER)
            .min(MAX_UDP_PAYLOAD_V4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_sizes_for_common_mtus() {
        assert_eq!(max_datagram_for_mtu(1500, false), 1472);
        assert_eq!(max_datagram_for_mtu(1500, true), 1452);
        assert_eq!(max_datagram_for_mtu(9000, false), 8972);
        assert_eq!(max_datagram_for_mtu(9000, true), 8952);
        assert_eq!(max_datagram_for_mtu(65535, false), 65507);
        assert_eq!(max_datagram_for_mtu(65535, true), 65487);
        assert_eq!(max_datagram_for_mtu(65536, false), 65507);
        assert_eq!(max_datagram_for_mtu(1 << 20, true), MAX_UDP_PAYLOAD_V6);
        assert_eq!(max_datagram_for_mtu(20, false), 0);
    }
}

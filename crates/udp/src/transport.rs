//! The socket, send batches and receive slots.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

use crate::addr::{canonical, RawAddr, RAW_ADDR_LEN};
use crate::stats::{SendErrors, UdpStats};
use crate::{
    DEFAULT_MAX_FRAME, DEFAULT_SOCKET_BUFFER_BYTES, MAX_BATCH, MAX_PIECES, MAX_UDP_PAYLOAD_V4,
    MAX_UDP_PAYLOAD_V6, RECV_BATCH, SEND_BATCH,
};

/// Receive slots start on cache-line boundaries, so a frame's header and payload copies out of
/// a slot are aligned.
const RECV_SLOT_ALIGN: usize = 64;

/// Non-fatal errors one `recv_batch` call absorbs before reporting the error. A pending socket
/// error is cleared by the call that returns it, so a second one in a row is already unusual;
/// more means the error is persistent and the caller must hear of it.
const RECV_ERROR_RETRIES: usize = 8;

/// How to open a [`UdpTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpOptions {
    /// Local address. An IPv6 address gives an IPv6 socket, which also reaches IPv4 peers
    /// through IPv4-mapped addresses unless the system sets `bindv6only`.
    pub bind: SocketAddr,
    /// Largest datagram (UDP payload) sent or received, e.g. 1472, 8972 or 65507; see
    /// [`max_datagram_for_mtu`](crate::max_datagram_for_mtu). Receive slots have this size;
    /// a longer incoming datagram is counted as truncated and discarded.
    pub max_frame: usize,
    /// Datagrams per `recvmmsg`, 1 to [`MAX_BATCH`].
    pub recv_batch: usize,
    /// Frames per `sendmmsg` (capacity of a [`SendBatch`]), 1 to [`MAX_BATCH`].
    pub send_batch: usize,
    /// `SO_SNDBUF`/`SO_RCVBUF` request in bytes; 0 keeps the system default. Set with
    /// `SO_*BUFFORCE` when the process may (root or `CAP_NET_ADMIN`), so `net.core.*mem_max`
    /// does not cap it; otherwise with the plain options, which the kernel caps silently.
    pub socket_buffer_bytes: usize,
}

impl Default for UdpOptions {
    fn default() -> Self {
        Self {
            bind: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            max_frame: DEFAULT_MAX_FRAME,
            recv_batch: RECV_BATCH,
            send_batch: SEND_BATCH,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
        }
    }
}

impl UdpOptions {
    fn validate(&self) -> io::Result<()> {
        let limit = if self.bind.is_ipv6() {
            MAX_UDP_PAYLOAD_V6
        } else {
            MAX_UDP_PAYLOAD_V4
        };
        let invalid = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if self.max_frame == 0 || self.max_frame > limit {
            return invalid(format!("max_frame {} not in 1..={limit}", self.max_frame));
        }
        for (name, value) in [
            ("recv_batch", self.recv_batch),
            ("send_batch", self.send_batch),
        ] {
            if value == 0 || value > MAX_BATCH {
                return invalid(format!("{name} {value} not in 1..={MAX_BATCH}"));
            }
        }
        Ok(())
    }
}

/// A peer's address in the kernel's layout.
#[derive(Clone, Copy)]
struct Peer {
    raw: RawAddr,
    len: libc::socklen_t,
}

/// Why a frame is dropped before it reaches the kernel.
#[derive(Clone, Copy, Debug)]
enum Reject {
    UnknownPeer,
    TooManyPieces,
    Oversize,
}

/// Preallocated `sendmmsg` arguments: one `mmsghdr` and [`MAX_PIECES`] iovecs per slot.
struct SendSlots {
    msgs: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
    /// Per queued slot: `Some` if the frame is dropped instead of sent.
    rejected: Vec<Option<Reject>>,
    /// Slots filled by the current [`SendBatch`].
    queued: usize,
}

// SAFETY: the raw pointers in `msgs` and `iovecs` are scratch. They are written by
// `SendBatch::push` and `send_queued` while the batch mutably borrows the transport and
// immutably borrows the bytes, read only by the kernel within that borrow, and never
// dereferenced by Rust code. Moving or sharing the arrays across threads is therefore harmless.
unsafe impl Send for SendSlots {}
// SAFETY: as above; `&SendSlots` gives access to nothing.
unsafe impl Sync for SendSlots {}

impl SendSlots {
    fn new(batch: usize) -> Self {
        Self {
            msgs: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            iovecs: vec![empty_iovec(); batch * MAX_PIECES],
            rejected: vec![None; batch],
            queued: 0,
        }
    }
}

/// Preallocated `recvmmsg` arguments and buffers: slot `i` receives into
/// `buf[i * stride..][..max_frame]`, its source address into `names[i]`.
/// A receive slot's iovecs: its own buffer alone, or, for a placed receive, the header part of
/// its buffer, the destination in user memory, and the rest of its buffer for anything longer.
const IOVECS_PER_SLOT: usize = 3;

/// Where the payload of the datagram that lands in a receive slot should go: the first
/// `header_len` bytes into the slot's own buffer, the next `len` bytes to `dest`, anything
/// beyond back into the slot's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub header_len: usize,
    pub dest: *mut u8,
    pub len: usize,
}

struct RecvSlots {
    msgs: Vec<libc::mmsghdr>,
    /// Placement of each slot in the last receive, if any.
    placements: Vec<Option<Placement>>,
    iovecs: Vec<libc::iovec>,
    names: Vec<RawAddr>,
    buf: Vec<u8>,
    stride: usize,
    /// Slots of the last `recv_batch` holding whole datagrams, in arrival order.
    ready: Vec<u32>,
    /// Slots the kernel wrote in the last `recvmmsg`; their value-result fields are reset
    /// before the next one.
    dirty: usize,
}

// SAFETY: `msgs` points into `iovecs`, `names` and `buf`, heap storage owned by the same struct
// that never grows or moves; the pointers are used only by the kernel inside `recvmmsg` while
// the transport is mutably borrowed. Rust code reads the buffers only through `&self`.
unsafe impl Send for RecvSlots {}
// SAFETY: as above; `&RecvSlots` only allows reading the buffers.
unsafe impl Sync for RecvSlots {}

impl RecvSlots {
    /// Points every slot's iovecs at its own buffer, or at the split of its placement.
    fn apply_plan(&mut self, plan: &[Placement], max_frame: usize) {
        let buf = self.buf.as_mut_ptr();
        for slot in 0..self.msgs.len() {
            let base = buf.wrapping_add(slot * self.stride);
            let iovecs = &mut self.iovecs[slot * IOVECS_PER_SLOT..(slot + 1) * IOVECS_PER_SLOT];
            let placement = plan
                .get(slot)
                .copied()
                .filter(|p| p.header_len <= max_frame);
            self.placements[slot] = placement;
            let count = match placement {
                None => {
                    iovecs[0] = libc::iovec {
                        iov_base: base.cast(),
                        iov_len: max_frame,
                    };
                    1
                }
                Some(p) => {
                    let rest = max_frame - p.header_len;
                    iovecs[0] = libc::iovec {
                        iov_base: base.cast(),
                        iov_len: p.header_len,
                    };
                    iovecs[1] = libc::iovec {
                        iov_base: p.dest.cast(),
                        iov_len: p.len,
                    };
                    iovecs[2] = libc::iovec {
                        iov_base: base.wrapping_add(p.header_len).cast(),
                        iov_len: rest,
                    };
                    3
                }
            };
            self.msgs[slot].msg_hdr.msg_iovlen = count;
        }
    }

    fn new(batch: usize, max_frame: usize) -> Self {
        let stride = max_frame.next_multiple_of(RECV_SLOT_ALIGN);
        let mut slots = Self {
            msgs: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            iovecs: vec![empty_iovec(); batch * IOVECS_PER_SLOT],
            names: vec![RawAddr::zeroed(); batch],
            placements: vec![None; batch],
            buf: vec![0u8; batch * stride],
            stride,
            ready: Vec::with_capacity(batch),
            dirty: 0,
        };
        // Pointers are taken once from the heap buffers (`as_mut_ptr` creates no reference, so
        // later shared reads of `buf` leave them valid); the buffers are never resized.
        let buf = slots.buf.as_mut_ptr();
        for slot in 0..batch {
            let iov = &mut slots.iovecs[slot * IOVECS_PER_SLOT];
            iov.iov_base = buf.wrapping_add(slot * stride).cast();
            iov.iov_len = max_frame;
        }
        let iovecs = slots.iovecs.as_mut_ptr();
        let names = slots.names.as_mut_ptr();
        for (slot, msg) in slots.msgs.iter_mut().enumerate() {
            msg.msg_hdr.msg_iov = iovecs.wrapping_add(slot * IOVECS_PER_SLOT);
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_name = names.wrapping_add(slot).cast();
            msg.msg_hdr.msg_namelen = RAW_ADDR_LEN;
        }
        slots
    }
}

/// A non-blocking UDP socket with batched, zero-copy sends and batched receives.
///
/// Driven by one thread (`&mut self`); `Send`, so it may be moved to that thread.
pub struct UdpTransport {
    socket: OwnedFd,
    local: SocketAddr,
    ipv6: bool,
    max_frame: usize,
    /// Index = rank.
    peers: Vec<Peer>,
    /// Canonical address → rank, sorted by address, for [`UdpTransport::peer_of`].
    by_addr: Vec<(SocketAddr, u32)>,
    send: SendSlots,
    recv: RecvSlots,
    stats: UdpStats,
}

impl fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpTransport")
            .field("fd", &self.fd())
            .field("local", &self.local)
            .field("max_frame", &self.max_frame)
            .field("peers", &self.peers.len())
            .field("send_batch", &self.send.msgs.len())
            .field("recv_batch", &self.recv.msgs.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl UdpTransport {
    /// Opens a non-blocking UDP socket (IPv4 or IPv6, after `options.bind`), sets its buffer
    /// sizes, binds it and allocates every buffer the transport will use.
    pub fn bind(options: UdpOptions) -> io::Result<Self> {
        options.validate()?;
        let ipv6 = options.bind.is_ipv6();
        let family = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: plain system call; the descriptor is owned right after.
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns; closed on every exit path.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        if options.socket_buffer_bytes > 0 {
            let bytes = options.socket_buffer_bytes.min(i32::MAX as usize / 2) as libc::c_int;
            set_buffer_size(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, bytes);
            set_buffer_size(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, bytes);
        }
        let (raw, len) = RawAddr::from_socket_addr(options.bind, ipv6);
        // SAFETY: `raw` holds a valid address of `len` bytes.
        let rc = unsafe { libc::bind(fd, ptr::from_ref(&raw).cast(), len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let local = sock_name(fd)?;
        Ok(Self {
            socket,
            local,
            ipv6,
            max_frame: options.max_frame,
            peers: Vec::new(),
            by_addr: Vec::new(),
            send: SendSlots::new(options.send_batch),
            recv: RecvSlots::new(options.recv_batch, options.max_frame),
            stats: UdpStats::default(),
        })
    }

    /// The bound address (with the port the kernel chose if `bind` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The socket, for `epoll`/`poll` (readable: `recv_batch` has data; writable: room to send
    /// after a would-block). Stays owned by the transport.
    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Largest datagram sent or received.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// The send and receive buffer sizes the kernel granted, as it reports them (it doubles the
    /// request to account for bookkeeping).
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        let fd = self.fd();
        let send = get_int_option(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)?;
        let recv = get_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?;
        Ok((send as usize, recv as usize))
    }

    /// Sets the rank → address table (index = rank). Allocates; call at setup, not on the fast
    /// path. When two ranks share an address, [`peer_of`](Self::peer_of) gives the lower.
    pub fn set_peers(&mut self, peers: &[SocketAddr]) {
        self.peers = peers
            .iter()
            .map(|&addr| {
                let (raw, len) = RawAddr::from_socket_addr(addr, self.ipv6);
                Peer { raw, len }
            })
            .collect();
        let mut by_addr: Vec<(SocketAddr, u32)> = peers
            .iter()
            .enumerate()
            .map(|(rank, &addr)| (canonical(addr), rank as u32))
            .collect();
        by_addr.sort_unstable();
        by_addr.dedup_by_key(|entry| entry.0);
        self.by_addr = by_addr;
    }

    /// Number of ranks in the peer table.
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// The rank whose address is `addr` (compared in [`canonical`] form), by binary search.
    pub fn peer_of(&self, addr: &SocketAddr) -> Option<u32> {
        let key = canonical(*addr);
        self.by_addr
            .binary_search_by(|entry| entry.0.cmp(&key))
            .ok()
            .map(|at| self.by_addr[at].1)
    }

    /// Starts a batch of frames to send. See [`SendBatch`].
    pub fn batch<'a>(&mut self) -> SendBatch<'_, 'a> {
        self.send.queued = 0;
        SendBatch {
            transport: self,
            _bytes: PhantomData,
        }
    }

    /// Sends `frames` (rank, pieces) in order, with as few `sendmmsg` calls as possible (one
    /// per `send_batch` frames). Returns how many frames were taken, sent or dropped for an
    /// error counted in [`stats`](Self::stats); fewer than `frames.len()` when the socket would
    /// block (`EAGAIN`, `ENOBUFS`): the caller keeps `frames[taken..]` and retries when the
    /// socket is writable. `Err` only when the socket itself is unusable (`EBADF`, `EFAULT`).
    pub fn send_batch(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        let mut batch = self.batch();
        let mut taken = 0;
        while taken < frames.len() {
            for &(rank, pieces) in &frames[taken..] {
                if !batch.push(rank, pieces) {
                    break;
                }
            }
            let queued = batch.len();
            let sent = batch.send()?;
            taken += sent;
            if sent < queued {
                break;
            }
        }
        Ok(taken)
    }

    /// One `recvmmsg` into the internal buffers, without blocking. Returns the number of whole
    /// datagrams now readable with [`received`](Self::received); 0 exactly when the socket had
    /// nothing (`EAGAIN`). Datagrams longer than `max_frame` are counted as truncated and
    /// skipped; if a call brings only those, the next is made. Non-fatal errors (a pending
    /// ICMP-derived error, memory pressure) are counted and the call retried.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        // SAFETY: an empty plan places nothing outside the transport's own buffers.
        unsafe { self.recv_batch_placed(&[]) }
    }

    /// Like `recv_batch`, but the datagram landing in slot `i` (for `i < plan.len()`) has its
    /// bytes after `plan[i].header_len` scattered straight to `plan[i].dest` (the speculative
    /// header/payload split: a guessed frame lands at its final place with no copy). Check each
    /// datagram with `placed(i)`; if it is not the one guessed, `gather_placed(i)` copies its bytes
    /// back together before `received(i)` may be used.
    ///
    /// # Safety
    /// Every `dest` must be valid for writes of `len` bytes, not overlap another, and not be
    /// read or written by anyone else during the call. Memory at a wrong guess's destination is
    /// overwritten with that datagram's bytes.
    pub unsafe fn recv_batch_placed(&mut self, plan: &[Placement]) -> io::Result<usize> {
        self.recv.apply_plan(plan, self.max_frame);
        self.recv.ready.clear();
        loop {
            let filled = self.recv_into_slots()?;
            if filled == 0 {
                return Ok(0);
            }
            for (slot, msg) in self.recv.msgs[..filled].iter().enumerate() {
                // A placed slot holds more than `max_frame` bytes: longer datagrams are oversized too.
                let oversized = msg.msg_len as usize > self.max_frame;
                if msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || oversized {
                    self.stats.truncated += 1;
                } else {
                    self.recv.ready.push(slot as u32);
                    self.stats.datagrams_received += 1;
                    self.stats.bytes_received += u64::from(msg.msg_len);
                }
            }
            if !self.recv.ready.is_empty() {
                return Ok(self.recv.ready.len());
            }
        }
    }

    /// Number of datagrams readable from the last [`recv_batch`](Self::recv_batch).
    pub fn received_count(&self) -> usize {
        self.recv.ready.len()
    }

    /// The `i`-th datagram of the last [`recv_batch`](Self::recv_batch): its source address (in
    /// [`canonical`] form) and its bytes. Panics if `i` is not below the count it returned.
    pub fn received(&self, i: usize) -> (SocketAddr, &[u8]) {
        let slot = self.recv.ready[i] as usize;
        let msg = &self.recv.msgs[slot];
        let addr = self.recv.names[slot]
            .socket_addr(msg.msg_hdr.msg_namelen)
            .unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)));
        let start = slot * self.recv.stride;
        (addr, &self.recv.buf[start..start + msg.msg_len as usize])
    }

    /// The rank that sent the `i`-th datagram of the last `recv_batch`, if it is a known peer.
    /// For the `i`-th datagram: bytes of its payload scattered to its placement's destination,
    /// and the datagram's whole length, if its slot had a placement (and it was not gathered).
    pub fn placed(&self, i: usize) -> Option<(usize, usize)> {
        let slot = self.recv.ready[i] as usize;
        let placement = self.recv.placements[slot]?;
        let total = self.recv.msgs[slot].msg_len as usize;
        Some((
            total
                .saturating_sub(placement.header_len)
                .min(placement.len),
            total,
        ))
    }

    /// The first bytes of the `i`-th datagram, as far as they stayed in the transport's buffer
    /// (the header part of a placed datagram).
    pub fn received_head(&self, i: usize) -> &[u8] {
        let slot = self.recv.ready[i] as usize;
        let total = self.recv.msgs[slot].msg_len as usize;
        let kept = match self.recv.placements[slot] {
            Some(placement) => total.min(placement.header_len),
            None => total,
        };
        let start = slot * self.recv.stride;
        &self.recv.buf[start..start + kept]
    }

    /// Puts the `i`-th datagram back together in the transport's buffer (copying its scattered
    /// part back from the placement's destination), so `received(i)` returns it whole. For a
    /// guess that proved wrong.
    ///
    /// # Safety
    /// The placement's destination must still be valid for reads.
    pub unsafe fn gather_placed(&mut self, i: usize) {
        let slot = self.recv.ready[i] as usize;
        let Some(placement) = self.recv.placements[slot].take() else {
            return;
        };
        let total = self.recv.msgs[slot].msg_len as usize;
        let scattered = total
            .saturating_sub(placement.header_len)
            .min(placement.len);
        let rest = total.saturating_sub(placement.header_len + scattered);
        let start = slot * self.recv.stride + placement.header_len;
        // The tail went to the slot right after the header part: move it behind the gap first.
        self.recv
            .buf
            .copy_within(start..start + rest, start + scattered);
        // SAFETY: the caller keeps the destination readable; it does not overlap our buffer.
        let part = unsafe { std::slice::from_raw_parts(placement.dest, scattered) };
        self.recv.buf[start..start + scattered].copy_from_slice(part);
    }

    /// The receive slot (index into the last plan) the `i`-th datagram landed in.
    pub fn received_slot(&self, i: usize) -> usize {
        self.recv.ready[i] as usize
    }

    pub fn received_rank(&self, i: usize) -> Option<u32> {
        self.peer_of(&self.received(i).0)
    }

    /// Counters since `bind`.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// The receive path: one `recvmmsg` into the slots. Returns how many slots the kernel
    /// filled, 0 when the socket is empty.
    fn recv_into_slots(&mut self) -> io::Result<usize> {
        let slots = &mut self.recv;
        for msg in &mut slots.msgs[..slots.dirty] {
            msg.msg_hdr.msg_namelen = RAW_ADDR_LEN;
            msg.msg_hdr.msg_flags = 0;
            msg.msg_len = 0;
        }
        slots.dirty = 0;
        let mut errors = 0;
        loop {
            self.stats.recv_syscalls += 1;
            // SAFETY: every `mmsghdr` points at its own iovec, name and buffer slot of
            // `max_frame` bytes (set up in `RecvSlots::new`), all owned by `slots` and not
            // otherwise borrowed during the call.
            let rc = unsafe {
                libc::recvmmsg(
                    self.socket.as_raw_fd(),
                    slots.msgs.as_mut_ptr(),
                    slots.msgs.len() as _,
                    libc::MSG_DONTWAIT as _,
                    ptr::null_mut(),
                )
            };
            if rc >= 0 {
                slots.dirty = rc as usize;
                return Ok(rc as usize);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error().unwrap_or(0) {
                libc::EINTR => {}
                libc::EAGAIN => {
                    self.stats.recv_would_block += 1;
                    return Ok(0);
                }
                libc::EBADF | libc::ENOTSOCK | libc::EFAULT | libc::EINVAL => return Err(err),
                _ => {
                    self.stats.recv_errors += 1;
                    errors += 1;
                    if errors > RECV_ERROR_RETRIES {
                        return Err(err);
                    }
                }
            }
        }
    }

    /// Hands the first `queued` send slots to the kernel. See [`SendBatch::send`].
    fn send_queued(&mut self, queued: usize) -> io::Result<usize> {
        let iovecs = self.send.iovecs.as_mut_ptr();
        for (slot, msg) in self.send.msgs[..queued].iter_mut().enumerate() {
            msg.msg_hdr.msg_iov = iovecs.wrapping_add(slot * MAX_PIECES);
            msg.msg_len = 0;
        }
        let mut at = 0;
        while at < queued {
            if let Some(reason) = self.send.rejected[at] {
                let errors = &mut self.stats.send_errors;
                match reason {
                    Reject::UnknownPeer => errors.unknown_peer += 1,
                    Reject::TooManyPieces => errors.too_many_pieces += 1,
                    Reject::Oversize => errors.oversize += 1,
                }
                at += 1;
                continue;
            }
            let end = self.send.rejected[at..queued]
                .iter()
                .position(Option::is_some)
                .map_or(queued, |n| at + n);
            self.stats.send_syscalls += 1;
            // SAFETY: slots `at..end` were filled by `SendBatch::push` in this batch: names point
            // into `self.peers`, iovecs into `self.send.iovecs`, and those into bytes the batch
            // borrows; none is moved or mutated during the call, and the kernel only reads them
            // (writing `msg_len` back into the slots).
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    self.send.msgs.as_mut_ptr().add(at),
                    (end - at) as _,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if rc > 0 {
                let sent = rc as usize;
                for msg in &self.send.msgs[at..at + sent] {
                    self.stats.bytes_sent += u64::from(msg.msg_len);
                }
                self.stats.datagrams_sent += sent as u64;
                at += sent;
                continue;
            }
            if rc == 0 {
                // Only for an empty vector, which cannot happen here; do not spin on it.
                self.stats.send_would_block += 1;
                return Ok(at);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error().unwrap_or(0) {
                libc::EINTR => {}
                libc::EAGAIN => {
                    self.stats.send_would_block += 1;
                    return Ok(at);
                }
                libc::ENOBUFS | libc::ENOMEM => {
                    self.stats.send_no_buffers += 1;
                    return Ok(at);
                }
                libc::EBADF | libc::ENOTSOCK | libc::EFAULT => return Err(err),
                errno => {
                    // `sendmmsg` fails as a whole only when its first datagram fails: drop that
                    // one and go on with the rest.
                    count_send_error(&mut self.stats.send_errors, errno);
                    at += 1;
                }
            }
        }
        Ok(queued)
    }
}

fn count_send_error(errors: &mut SendErrors, errno: i32) {
    match errno {
        libc::ECONNREFUSED => errors.refused += 1,
        libc::EMSGSIZE => errors.msg_size += 1,
        libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN | libc::ENETDOWN => {
            errors.unreachable += 1
        }
        libc::EACCES | libc::EPERM => errors.denied += 1,
        _ => {
            errors.other += 1;
            errors.last_other_errno = errno;
        }
    }
}

/// Frames on their way to one `sendmmsg`, gathered from borrowed memory without copying.
///
/// The batch mutably borrows the transport and borrows every pushed byte slice for `'a`, so the
/// memory the iovecs point at cannot change or go away before [`send`](Self::send) returns.
/// Frames still queued when the batch is dropped are discarded unsent.
///
/// ```no_run
/// # use nicmsg_udp::{UdpOptions, UdpTransport};
/// # let mut udp = UdpTransport::bind(UdpOptions::default()).unwrap();
/// let (header, payload) = ([0u8; 24], vec![7u8; 1000]);
/// let mut batch = udp.batch();
/// batch.push(1, &[&header, &payload[..500]]);
/// batch.push(2, &[&header, &payload[500..]]);
/// let taken = batch.send().unwrap(); // frames before `taken` are done; retry the rest later
/// ```
///
/// Bytes that do not outlive the batch are refused at compile time:
///
/// ```compile_fail
/// # use nicmsg_udp::{UdpOptions, UdpTransport};
/// # let mut udp = UdpTransport::bind(UdpOptions::default()).unwrap();
/// let mut batch = udp.batch();
/// {
///     let payload = vec![0u8; 100];
///     batch.push(0, &[&payload]); // error: `payload` does not live long enough
/// }
/// batch.send().unwrap();
/// ```
pub struct SendBatch<'t, 'a> {
    transport: &'t mut UdpTransport,
    _bytes: PhantomData<&'a [u8]>,
}

impl<'a> SendBatch<'_, 'a> {
    /// Queues one datagram for `rank`, gathered from `pieces` in order (the header first, then
    /// payload slices straight from user memory; at most [`MAX_PIECES`]). Nothing is copied but
    /// the slice pointers. Returns false, queuing nothing, when the batch is full: call
    /// [`send`](Self::send) first.
    ///
    /// A frame for a rank without an address, with too many pieces or longer than `max_frame`
    /// is queued as a drop: it is counted in the send errors and taken when its turn comes.
    pub fn push(&mut self, rank: u32, pieces: &[&'a [u8]]) -> bool {
        let transport = &mut *self.transport;
        let send = &mut transport.send;
        let slot = send.queued;
        if slot == send.msgs.len() {
            return false;
        }
        send.rejected[slot] = match transport.peers.get(rank as usize) {
            None => Some(Reject::UnknownPeer),
            Some(_) if pieces.len() > MAX_PIECES => Some(Reject::TooManyPieces),
            Some(_) if pieces.iter().map(|p| p.len()).sum::<usize>() > transport.max_frame => {
                Some(Reject::Oversize)
            }
            Some(peer) => {
                let iovecs = &mut send.iovecs[slot * MAX_PIECES..][..pieces.len()];
                for (iov, piece) in iovecs.iter_mut().zip(pieces) {
                    iov.iov_base = piece.as_ptr().cast_mut().cast();
                    iov.iov_len = piece.len();
                }
                let hdr = &mut send.msgs[slot].msg_hdr;
                hdr.msg_name = ptr::from_ref(&peer.raw).cast_mut().cast();
                hdr.msg_namelen = peer.len;
                hdr.msg_iovlen = pieces.len() as _;
                None
            }
        };
        send.queued += 1;
        true
    }

    /// Frames queued.
    pub fn len(&self) -> usize {
        self.transport.send.queued
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Frames one batch holds (`send_batch` of the options).
    pub fn capacity(&self) -> usize {
        self.transport.send.msgs.len()
    }

    pub fn is_full(&self) -> bool {
        self.len() == self.capacity()
    }

    /// Sends the queued frames with as few `sendmmsg` calls as possible and empties the batch
    /// (it may be refilled). Returns how many frames, from the first pushed, were taken: sent,
    /// or dropped for a per-datagram error (`ECONNREFUSED`, `EMSGSIZE`, ...) counted in the
    /// stats. Fewer than queued when the socket would block (`EAGAIN`, `ENOBUFS`): the frames
    /// from that index on were not sent and the caller retries them later. `Err` only when the
    /// socket itself is unusable (`EBADF`, `EFAULT`), in which case the count is lost.
    pub fn send(&mut self) -> io::Result<usize> {
        let queued = mem::take(&mut self.transport.send.queued);
        self.transport.send_queued(queued)
    }
}

impl Drop for SendBatch<'_, '_> {
    fn drop(&mut self) {
        // The slots point at bytes whose borrow ends here.
        self.transport.send.queued = 0;
    }
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: `mmsghdr` is a C struct of integers and raw pointers; all-zero (null pointers,
    // zero lengths) is valid.
    unsafe { mem::zeroed() }
}

fn empty_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: ptr::null_mut(),
        iov_len: 0,
    }
}

/// Requests a buffer size, forcibly if the process may exceed `net.core.*mem_max`, otherwise
/// with the plain option (capped by the kernel). Failures are ignored: the default still works.
fn set_buffer_size(fd: RawFd, force: libc::c_int, plain: libc::c_int, bytes: libc::c_int) {
    if set_int_option(fd, libc::SOL_SOCKET, force, bytes).is_err() {
        let _ = set_int_option(fd, libc::SOL_SOCKET, plain, bytes);
    }
}

fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live `c_int` and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            ptr::from_ref(&value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live `c_int` and its size.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, ptr::from_mut(&mut value).cast(), &mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn sock_name(fd: RawFd) -> io::Result<SocketAddr> {
    let mut raw = RawAddr::zeroed();
    let mut len = RAW_ADDR_LEN;
    // SAFETY: `raw` has room for `len` bytes.
    let rc = unsafe { libc::getsockname(fd, ptr::from_mut(&mut raw).cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    raw.socket_addr(len)
        .ok_or_else(|| io::Error::other("getsockname gave an unknown address family"))
}

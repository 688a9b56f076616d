//! The socket, send batches and receive slots.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

use crate::addr::{canonical, RawAddr, RAW_ADDR_LEN};
use crate::mode::Mode;
use crate::offload::{
    gro_segment_size, receive_control_into, set_segment_size, ControlBuffer, UDP_GRO,
};
use crate::recv::{empty_iovec, zeroed_mmsghdr, Placement, RecvSlots};
use crate::stats::{SendErrors, UdpStats};
use crate::{
    DEFAULT_MAX_FRAME, DEFAULT_SOCKET_BUFFER_BYTES, MAX_BATCH, MAX_PIECES, MAX_UDP_PAYLOAD_V4,
    MAX_UDP_PAYLOAD_V6, RECV_BATCH, SEND_BATCH,
};

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
    /// Send runs of equal-length frames to one peer as one UDP GSO datagram (`UDP_SEGMENT`):
    /// the kernel cuts it into the same datagrams on the wire, for one trip down the stack
    /// instead of one per frame. Turned off for good by the first GSO send the kernel refuses
    /// (no checksum offload on the route, or frames larger than the path MTU); the frames are
    /// then sent one datagram each.
    pub gso: bool,
    /// Receive runs of frames the kernel kept together (a peer's GSO datagram) as one
    /// datagram (`UDP_GRO`), split into its frames here: one trip up the stack instead of one
    /// per frame. Receive slots then take 64 KiB each instead of `max_frame`.
    pub gro: bool,
}

impl Default for UdpOptions {
    fn default() -> Self {
        Self {
            bind: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            max_frame: DEFAULT_MAX_FRAME,
            recv_batch: RECV_BATCH,
            send_batch: SEND_BATCH,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            gso: true,
            gro: true,
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

/// One frame queued in a [`SendBatch`].
#[derive(Clone, Copy)]
struct QueuedFrame {
    /// `Some` if the frame is dropped instead of sent.
    rejected: Option<Reject>,
    rank: u32,
    /// Its iovecs: `SendSlots::iovecs[first_iovec..][..iovecs]`.
    first_iovec: usize,
    iovecs: usize,
    len: usize,
}

/// Preallocated `sendmmsg` arguments. The frames' iovecs are contiguous and in order, so a run
/// of frames sent as one GSO datagram is one range of iovecs: a wire message is built over
/// them with no copy.
struct SendSlots {
    frames: Vec<QueuedFrame>,
    iovecs: Vec<libc::iovec>,
    /// Iovecs taken by the frames queued so far.
    iovecs_used: usize,
    /// The `sendmmsg` vector: one entry per datagram (GSO or plain) of the current call.
    wire: Vec<libc::mmsghdr>,
    wire_control: Vec<ControlBuffer>,
    /// Frames carried by each entry of `wire`.
    wire_frames: Vec<usize>,
    /// Frames queued by the current [`SendBatch`].
    queued: usize,
    /// GSO still allowed (see [`UdpOptions::gso`]).
    gso: bool,
}

// SAFETY: the raw pointers in `wire` and `iovecs` are scratch. They are written by
// `SendBatch::push` and `send_queued` while the batch mutably borrows the transport and
// immutably borrows the bytes, read only by the kernel within that borrow, and never
// dereferenced by Rust code. Moving or sharing the arrays across threads is therefore harmless.
unsafe impl Send for SendSlots {}
// SAFETY: as above; `&SendSlots` gives access to nothing.
unsafe impl Sync for SendSlots {}

impl SendSlots {
    fn new(batch: usize, gso: bool) -> Self {
        Self {
            frames: vec![
                QueuedFrame {
                    rejected: None,
                    rank: 0,
                    first_iovec: 0,
                    iovecs: 0,
                    len: 0,
                };
                batch
            ],
            iovecs: vec![empty_iovec(); batch * MAX_PIECES],
            iovecs_used: 0,
            wire: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            wire_control: vec![ControlBuffer::EMPTY; batch],
            wire_frames: vec![0; batch],
            queued: 0,
            gso,
        }
    }

    /// How many frames from `start` (none rejected, all before `end`) go out as one datagram:
    /// a run to one peer whose frames all have the first one's length, but for a shorter last
    /// one, within the kernel's GSO limits; 1 when GSO is off. Returns the frames and the
    /// iovecs they take.
    fn gso_run(&self, start: usize, end: usize, max_datagram: usize) -> (usize, usize) {
        let first = self.frames[start];
        let (mut count, mut bytes, mut iovecs) = (1, first.len, first.iovecs);
        if !self.gso {
            return (count, iovecs);
        }
        for frame in &self.frames[start + 1..end] {
            // A zero-length datagram is no segment: it goes alone.
            let fits = frame.rank == first.rank
                && frame.len > 0
                && frame.len <= first.len
                && count < MAX_GSO_SEGMENTS
                && bytes + frame.len <= max_datagram
                && iovecs + frame.iovecs <= MAX_IOVECS_PER_DATAGRAM;
            if !fits {
                break;
            }
            count += 1;
            bytes += frame.len;
            iovecs += frame.iovecs;
            if frame.len < first.len {
                break;
            }
        }
        (count, iovecs)
    }
}

/// Most segments in one GSO datagram (`UDP_MAX_SEGMENTS` of the kernel, 64 before Linux 6.9).
const MAX_GSO_SEGMENTS: usize = 64;
/// Most iovecs in one message (`UIO_MAXIOV`).
const MAX_IOVECS_PER_DATAGRAM: usize = 1024;

/// What a look at the next datagram waiting saw ([`UdpTransport::peek_next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeekedDatagram {
    /// Its source address, canonical.
    pub from: SocketAddr,
    /// The length of its first frame: the whole datagram, or the first segment of a run the
    /// kernel coalesced (GRO).
    pub frame_len: usize,
    /// The whole datagram's length: more than `frame_len` for a coalesced run.
    pub datagram_len: usize,
    /// How many of its first bytes were copied.
    pub head_len: usize,
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
    /// The kernel reported a socket error (an ICMP error answered a datagram): its error queue
    /// may hold refusals for [`take_refused`](Self::take_refused).
    errors_queued: bool,
}

impl fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpTransport")
            .field("fd", &self.fd())
            .field("local", &self.local)
            .field("max_frame", &self.max_frame)
            .field("peers", &self.peers.len())
            .field("send_batch", &self.send.frames.len())
            .field("gso", &self.send.gso)
            .field("recv_batch", &self.recv.len())
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
            force_buffer_sizes(fd, options.socket_buffer_bytes);
        }
        let (raw, len) = RawAddr::from_socket_addr(options.bind, ipv6);
        // SAFETY: `raw` holds a valid address of `len` bytes.
        let rc = unsafe { libc::bind(fd, ptr::from_ref(&raw).cast(), len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let local = sock_name(fd)?;
        // Without kernel support (before Linux 5.0) frames simply arrive one datagram each.
        let gro = options.gro && set_int_option(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok();
        // Without it, a peer's dead port is found by its silence only.
        let _ = crate::refused::enable(fd, ipv6);
        Ok(Self {
            socket,
            local,
            ipv6,
            max_frame: options.max_frame,
            peers: Vec::new(),
            by_addr: Vec::new(),
            send: SendSlots::new(options.send_batch, options.gso),
            recv: RecvSlots::new(options.recv_batch, options.max_frame, gro),
            stats: UdpStats::default(),
            errors_queued: false,
        })
    }

    /// True if [`take_refused`](Self::take_refused) will read the error queue.
    pub fn refusals_may_be_queued(&self) -> bool {
        self.errors_queued
    }

    /// The socket reported an error (`EPOLLERR` from a poller): read its error queue at the
    /// next [`take_refused`](Self::take_refused).
    pub fn note_socket_error(&mut self) {
        self.errors_queued = true;
    }

    /// Calls `refused(rank)` for every datagram a peer's host refused (ICMP port unreachable:
    /// no socket on the peer's port any more) since the last look, read from the socket's error
    /// queue if a receive reported an error or [`note_socket_error`](Self::note_socket_error)
    /// asked for a look; free otherwise (no system call). The kernel does not always say: a
    /// refusal pending when a `sendmmsg` sends several datagrams fails one of them, which the
    /// call then reports as a short count, not an error. So a driver also looks now and then,
    /// and whenever its poller sees `EPOLLERR`.
    pub fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        if !std::mem::take(&mut self.errors_queued) {
            return 0;
        }
        let mut count = 0;
        let fd = self.fd();
        let by_addr = &self.by_addr;
        crate::refused::drain(fd, &mut |addr| {
            let key = canonical(addr);
            if let Ok(i) = by_addr.binary_search_by(|entry| entry.0.cmp(&key)) {
                count += 1;
                refused(by_addr[i].1);
            }
        });
        self.stats.refusals += count as u64;
        count
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

    /// Frames to `rank` go to `address` from now on: an open endpoint binding a peer slot (a
    /// new peer, or a slot reused for another). Grows the table up to `rank` (ranks in between
    /// stay without an address); runs when a peer is new, not per frame.
    pub fn bind_peer(&mut self, rank: u32, address: SocketAddr) {
        let index = rank as usize;
        if self.peers.len() <= index {
            let unbound = Peer {
                raw: RawAddr::zeroed(),
                len: 0,
            };
            self.peers.resize(index + 1, unbound);
        }
        let (raw, len) = RawAddr::from_socket_addr(address, self.ipv6);
        self.peers[index] = Peer { raw, len };
        self.by_addr.retain(|entry| entry.1 != rank);
        let key = canonical(address);
        let at = self.by_addr.partition_point(|entry| entry.0 < key);
        if self.by_addr.get(at).is_none_or(|entry| entry.0 != key) {
            self.by_addr.insert(at, (key, rank));
        } else {
            self.by_addr[at].1 = rank;
        }
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
        self.send.iovecs_used = 0;
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
        self.recv.apply_plan(plan);
        loop {
            self.recv.reset();
            let filled = self.recv_into_slots();
            // One slot offered for the plan's large frames or for the datagram the engine
            // looked at (asked for once: it is taken now, or the socket had nothing).
            let one_slot = self.recv.plan_takes_one_slot();
            self.recv.one_datagram_next = false;
            let filled = filled?;
            if filled == 0 {
                let switch = self.recv.mode.after_receive(0);
                debug_assert!(switch.is_none(), "an empty socket never switches");
                return Ok(0);
            }
            let (frames, bytes, truncated, coalesced) = self.recv.split(filled);
            self.stats.truncated += truncated as u64;
            self.stats.datagrams_received += frames as u64;
            self.stats.bytes_received += bytes as u64;
            self.stats.gro_datagrams += coalesced as u64;
            if frames > 0 {
                // One slot offered (`slots_to_offer`): what that brings says nothing of how
                // the peers send.
                if !one_slot {
                    if let Some(mode) = self.recv.mode.after_receive(frames) {
                        self.switch_mode(mode);
                    }
                }
                return Ok(frames);
            }
            // Only datagrams longer than a frame, dropped: the plan was for them (a frame the
            // engine looked at and found too long is never planned, but a guess may be wrong),
            // so the next receive places nothing where the plan said.
            self.recv.apply_plan(&[]);
        }
    }

    /// Copies the first bytes of the next datagram waiting into `head` without taking it
    /// (`MSG_PEEK`); `None` when the socket has nothing. A pending error (ICMP-derived) is
    /// cleared by the look as by a receive, so it is noted here for `take_refused` as the
    /// receive path does, and returned.
    pub fn peek_next(&mut self, head: &mut [u8]) -> io::Result<Option<PeekedDatagram>> {
        let mut name = RawAddr::zeroed();
        let mut iov = libc::iovec {
            iov_base: head.as_mut_ptr().cast(),
            iov_len: head.len(),
        };
        // SAFETY: an all-zero `msghdr` is valid (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_name = (&mut name as *mut RawAddr).cast();
        msg.msg_namelen = RAW_ADDR_LEN;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let mut control = ControlBuffer::EMPTY;
        if self.recv.can_coalesce() {
            receive_control_into(&mut msg, &mut control);
        }
        self.stats.peeks += 1;
        // SAFETY: `msg` points at `name`, `iov` and `head`, all valid and ours for the call.
        let rc = unsafe {
            libc::recvmsg(
                self.socket.as_raw_fd(),
                &mut msg,
                libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            let errno = err.raw_os_error().unwrap_or(0);
            if errno == libc::EAGAIN {
                // An empty look is an empty poll, as `recv_batch_placed` counts one.
                let switch = self.recv.mode.after_receive(0);
                debug_assert!(switch.is_none(), "an empty socket never switches");
                return Ok(None);
            }
            if reports_refusal(errno) {
                self.errors_queued = true;
            }
            return Err(err);
        }
        // SAFETY: with GRO possible, `msg` was pointed at `control` for this receive.
        let segment = self
            .recv
            .can_coalesce()
            .then(|| unsafe { gro_segment_size(&msg) })
            .flatten();
        let datagram_len = rc as usize;
        let frame_len = segment.map_or(datagram_len, |segment| segment.min(datagram_len));
        Ok(Some(PeekedDatagram {
            from: name.source_addr(msg.msg_namelen),
            frame_len,
            datagram_len,
            head_len: frame_len.min(head.len()),
        }))
    }

    /// The next receive offers the kernel one slot, whatever its plan: it takes the datagram
    /// [`peek_next`](Self::peek_next) saw and no more.
    pub fn receive_one_datagram_next(&mut self) {
        self.recv.one_datagram_next = true;
    }

    /// Number of datagrams readable from the last [`recv_batch`](Self::recv_batch).
    pub fn received_count(&self) -> usize {
        self.recv.ready.len()
    }

    /// The `i`-th datagram of the last [`recv_batch`](Self::recv_batch): its source address (in
    /// [`canonical`] form) and its bytes. Panics if `i` is not below the count it returned.
    /// The frames of a datagram the kernel coalesced (GRO) count as datagrams of their own.
    pub fn received(&self, i: usize) -> (SocketAddr, &[u8]) {
        let (name, len) = self.recv.name(self.recv.ready[i].slot);
        (name.source_addr(len), self.recv.bytes(i))
    }

    /// For the `i`-th datagram, if it exactly filled a plan entry (its length is the entry's
    /// header and payload length) and was not gathered: the plan index, the payload bytes at the
    /// entry's destination, and the datagram's length. Datagrams that did not fit their guess
    /// were put back together already.
    pub fn placed(&self, i: usize) -> Option<(usize, usize, usize)> {
        self.recv.placed(i)
    }

    /// The first bytes of the `i`-th datagram, as far as they stayed in the transport's buffer
    /// (the header part of a placed datagram).
    pub fn received_head(&self, i: usize) -> &[u8] {
        self.recv.head(i)
    }

    /// Puts the `i`-th datagram back together in the transport's buffer (copying its scattered
    /// part back from the placement's destination), so `received(i)` returns it whole. For a
    /// guess whose header proved wrong.
    ///
    /// # Safety
    /// The placement's destination must still be valid for reads.
    pub unsafe fn gather_placed(&mut self, i: usize) {
        self.recv.gather_frame(i);
    }

    /// The rank that sent the `i`-th datagram of the last `recv_batch`, if it is a known peer.
    pub fn received_rank(&self, i: usize) -> Option<u32> {
        self.peer_of(&self.received(i).0)
    }

    /// Whether received datagrams may be coalesced runs (`UDP_GRO` is on now: only while runs
    /// arrive, see `mode.rs`).
    pub fn gro(&self) -> bool {
        self.recv.coalescing()
    }

    /// Counters since `bind`.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// Receives in `mode` from now on (see `mode.rs`): `UDP_GRO` on for batches, off for
    /// single frames where the socket can coalesce at all. Single frames only if the socket's
    /// queue is empty right after `UDP_GRO` went off: a datagram queued coalesced before the
    /// switch would be read without the segment size that splits it, so the socket stays in
    /// batches for it. A failed switch of `UDP_GRO` leaves everything as it was; should
    /// turning it back on fail, the socket receives single frames, as the kernel then has it.
    fn switch_mode(&mut self, mode: Mode) {
        let fd = self.fd();
        let batches = mode == Mode::Batches;
        if self.recv.can_coalesce() {
            let gro = libc::c_int::from(batches);
            if set_int_option(fd, libc::SOL_UDP, UDP_GRO, gro).is_err() {
                self.recv.mode.stay();
                return;
            }
            if !batches
                && queued_bytes(fd) != Some(0)
                && set_int_option(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok()
            {
                self.stats.single_frames_deferred += 1;
                self.recv.mode.stay();
                return;
            }
        }
        if batches {
            self.stats.to_batches += 1;
        } else {
            self.stats.to_single_frames += 1;
        }
        self.recv.mode.switched(mode);
    }

    /// The receive path: one `recvmmsg` into the slots. Returns how many slots the kernel
    /// filled, 0 when the socket is empty.
    fn recv_into_slots(&mut self) -> io::Result<usize> {
        let mut errors = 0;
        loop {
            self.stats.recv_syscalls += 1;
            let offered = self.recv.slots_to_offer();
            let msgs = &mut self.recv.msgs_mut()[..offered];
            // SAFETY: every `mmsghdr` points at its own iovecs, name, control buffer and buffer
            // slot (set up by `RecvSlots`), all owned by the slots and not otherwise borrowed
            // during the call, or at plan destinations the caller lent for this call.
            let rc = unsafe {
                libc::recvmmsg(
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as _,
                    libc::MSG_DONTWAIT as _,
                    ptr::null_mut(),
                )
            };
            if rc >= 0 {
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
                // An ICMP error answered an earlier datagram: the call reported it once (and
                // cleared it); the error queue tells which peer.
                errno if reports_refusal(errno) => self.errors_queued = true,
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

    /// Hands the first `queued` frames to the kernel, runs of them as GSO datagrams. See
    /// [`SendBatch::send`].
    fn send_queued(&mut self, queued: usize) -> io::Result<usize> {
        let mut at = 0;
        let mut retried_at = None;
        while at < queued {
            if let Some(reason) = self.send.frames[at].rejected {
                let errors = &mut self.stats.send_errors;
                match reason {
                    Reject::UnknownPeer => errors.unknown_peer += 1,
                    Reject::TooManyPieces => errors.too_many_pieces += 1,
                    Reject::Oversize => errors.oversize += 1,
                }
                at += 1;
                continue;
            }
            let end = self.send.frames[at..queued]
                .iter()
                .position(|frame| frame.rejected.is_some())
                .map_or(queued, |n| at + n);
            let datagrams = self.build_wire(at, end);
            self.stats.send_syscalls += 1;
            // SAFETY: `wire[..datagrams]` was just built over frames `at..end` pushed in this
            // batch: names point into `self.peers`, iovecs into `self.send.iovecs` and those into
            // bytes the batch borrows, controls into `self.send.wire_control`; none is moved or
            // mutated during the call, and the kernel only reads them (writing `msg_len` back).
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    self.send.wire.as_mut_ptr(),
                    datagrams as _,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if rc > 0 {
                at += self.count_sent(rc as usize);
                continue;
            }
            if rc == 0 {
                // Only for an empty vector, which cannot happen here; do not spin on it.
                self.stats.send_would_block += 1;
                return Ok(at);
            }
            let err = io::Error::last_os_error();
            let first_run = self.send.wire_frames[0];
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
                libc::EIO | libc::EINVAL if first_run > 1 => {
                    // The route cannot segment (no checksum offload) or a frame exceeds the
                    // path MTU: send these and all later frames one datagram each.
                    self.send.gso = false;
                    self.stats.gso_refused += 1;
                }
                // An ICMP error that answered an earlier datagram (to any peer), reported by
                // this call and cleared by it: nothing is wrong with this datagram, send it
                // again (once: a second refusal in a row is its own).
                libc::ECONNREFUSED if retried_at != Some(at) => {
                    self.errors_queued = true;
                    retried_at = Some(at);
                }
                errno => {
                    // `sendmmsg` fails as a whole only when its first datagram fails: drop that
                    // one (every frame of it) and go on with the rest.
                    for _ in 0..first_run {
                        count_send_error(&mut self.stats.send_errors, errno);
                    }
                    at += first_run;
                }
            }
        }
        Ok(queued)
    }

    /// Fills the `sendmmsg` vector with datagrams over frames `start..end` (none rejected): one
    /// per GSO run. Returns how many entries it filled.
    fn build_wire(&mut self, start: usize, end: usize) -> usize {
        let max_datagram = if self.ipv6 {
            MAX_UDP_PAYLOAD_V6
        } else {
            MAX_UDP_PAYLOAD_V4
        };
        let send = &mut self.send;
        let iovecs = send.iovecs.as_mut_ptr();
        let (mut at, mut count) = (start, 0);
        while at < end && count < send.wire.len() {
            let (run, run_iovecs) = send.gso_run(at, end, max_datagram);
            let first = send.frames[at];
            let peer = &self.peers[first.rank as usize];
            let msg = &mut send.wire[count];
            msg.msg_len = 0;
            let hdr = &mut msg.msg_hdr;
            hdr.msg_name = ptr::from_ref(&peer.raw).cast_mut().cast();
            hdr.msg_namelen = peer.len;
            hdr.msg_iov = iovecs.wrapping_add(first.first_iovec);
            hdr.msg_iovlen = run_iovecs as _;
            if run > 1 {
                set_segment_size(hdr, &mut send.wire_control[count], first.len as u16);
            } else {
                hdr.msg_control = ptr::null_mut();
                hdr.msg_controllen = 0;
            }
            send.wire_frames[count] = run;
            count += 1;
            at += run;
        }
        count
    }

    /// Counts the first `datagrams` entries of the last `sendmmsg`, which the kernel took.
    /// Returns how many frames they carried.
    fn count_sent(&mut self, datagrams: usize) -> usize {
        let mut frames = 0;
        for (msg, &run) in self.send.wire[..datagrams]
            .iter()
            .zip(&self.send.wire_frames)
        {
            self.stats.bytes_sent += u64::from(msg.msg_len);
            frames += run;
            if run > 1 {
                self.stats.gso_datagrams += 1;
            }
        }
        self.stats.datagrams_sent += frames as u64;
        frames
    }
}

/// Whether a receive call's error is an ICMP error answering an earlier datagram (reported once,
/// and cleared, by the call): the socket's error queue then tells which peer.
fn reports_refusal(errno: i32) -> bool {
    matches!(
        errno,
        libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENETDOWN
            | libc::EMSGSIZE
    )
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
        if slot == send.frames.len() {
            return false;
        }
        let len = pieces.iter().map(|p| p.len()).sum::<usize>();
        let rejected = match transport.peers.get(rank as usize) {
            None => Some(Reject::UnknownPeer),
            Some(peer) if peer.len == 0 => Some(Reject::UnknownPeer),
            Some(_) if pieces.len() > MAX_PIECES => Some(Reject::TooManyPieces),
            Some(_) if len > transport.max_frame => Some(Reject::Oversize),
            Some(_) => None,
        };
        let first_iovec = send.iovecs_used;
        let iovecs = if rejected.is_none() { pieces.len() } else { 0 };
        for (iov, piece) in send.iovecs[first_iovec..][..iovecs].iter_mut().zip(pieces) {
            iov.iov_base = piece.as_ptr().cast_mut().cast();
            iov.iov_len = piece.len();
        }
        send.iovecs_used += iovecs;
        send.frames[slot] = QueuedFrame {
            rejected,
            rank,
            first_iovec,
            iovecs,
            len,
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
        self.transport.send.frames.len()
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
        let result = self.transport.send_queued(queued);
        self.transport.send.iovecs_used = 0;
        result
    }
}

impl Drop for SendBatch<'_, '_> {
    fn drop(&mut self) {
        // The slots point at bytes whose borrow ends here.
        self.transport.send.queued = 0;
        self.transport.send.iovecs_used = 0;
    }
}

/// Requests a buffer size, forcibly if the process may exceed `net.core.*mem_max`, otherwise
/// with the plain option (capped by the kernel). Failures are ignored: the default still works.
/// Sets a socket's send and receive buffers to `bytes` each, past the system's limits where
/// the process may (`SO_*BUFFORCE`, root or `CAP_NET_ADMIN`), else as far as the limits allow.
/// Best effort: a socket keeps working with smaller buffers, it only drops sooner under bursts.
pub fn force_buffer_sizes(fd: RawFd, bytes: usize) {
    let bytes = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    for (force, plain) in [
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
    ] {
        if set_int_option(fd, libc::SOL_SOCKET, force, bytes).is_err() {
            let _ = set_int_option(fd, libc::SOL_SOCKET, plain, bytes);
        }
    }
}

/// The length of the first datagram queued on the socket (`FIONREAD`), 0 when none is.
fn queued_bytes(fd: RawFd) -> Option<usize> {
    let mut bytes: libc::c_int = 0;
    // SAFETY: `FIONREAD` writes one `c_int` through the pointer, to a live local.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, ptr::from_mut(&mut bytes)) };
    (rc == 0).then_some(bytes as usize)
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

//! The transport: two paths for the same datagrams, each used where it is fastest.
//!
//! - **The ring** (AF_XDP): short frames sent alone — a request, a reply, an acknowledgement —
//!   are framed here and go out through the socket's transmit ring; short frames arriving are
//!   steered by the program into its receive ring, where polling costs no system call. This is
//!   the latency path.
//! - **The kernel** (a UDP socket bound to the same address): streams of frames go out as UDP
//!   GSO datagrams (one trip down the stack per 64 KB); long frames arriving are passed on by
//!   the program, merged by the kernel's GRO and read with `recvmmsg`, payload placed straight
//!   into receive buffers. Copy-mode AF_XDP handles every frame on its own, which costs a
//!   stream several times what the kernel's offloads do. The program counts the frames it
//!   passes in a counter mapped into this process, so the socket is read only when something
//!   waits there, not on every poll.
//!
//! A GSO datagram may reach the program unsegmented (generic mode on a veth, which passes GSO
//! datagrams whole): a short run of small frames then lands in the ring as one datagram holding
//! several frames, which the caller cuts apart by their own headers.
//!
//! The socket also keeps the port reserved in the kernel, and reaches peers that need the
//! kernel's routing (off the subnet, or with no known Ethernet address).

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;

use nicmsg_udp::UdpTransport;
use rustc_hash::FxHashMap;

use crate::bpf::{AttachMode, Counter, Link, Program, SocketMap};
use crate::interface::Interface;
use crate::packet::{parse, HeaderTemplate, Station, HEADERS_LEN};
use crate::program::{redirect_program, Steering};
use crate::socket::{XskSocket, MAX_FRAME_BYTES};

/// Frames taken from the receive ring per call: the same batch the UDP transport reads per
/// `recvmmsg`, so a turn of the engine does the same bounded amount of work either way.
pub const RECEIVE_BATCH: u32 = 64;
/// Longest UDP payload that travels through the ring (both ways): a frame's 80 bytes of
/// headers and a message of up to 432 bytes, which covers the short messages sent alone
/// (requests, replies, acknowledgements, credits). Longer frames are a stream's, or a message
/// large enough that the kernel path's extra microsecond is small beside it.
pub const RING_MAX_PAYLOAD: usize = 512;
/// Most frames in one send for them to go through the ring: a reply and its acknowledgement.
/// A longer batch is a stream, which the kernel sends as GSO datagrams far more cheaply.
const RING_MAX_BATCH: usize = 2;
/// Every this many receive calls, the UDP socket is polled even if the program counted nothing
/// for it: frames it passes uncounted (a receive queue without a socket) reach the socket too,
/// and this bounds how long they wait.
const KERNEL_POLL_INTERVAL: u32 = 64;
/// Empty reads of the UDP socket, while the program's count says frames are owed, after which
/// they are taken as dropped by the kernel (a full socket buffer): the protocol resends them,
/// and the socket is no longer read on every poll for their sake.
const KERNEL_OWED_EMPTY_POLLS: u32 = 256;
/// The socket's receive queue. One queue is what a veth (and a NIC steered to one queue) uses;
/// frames on other queues are passed to the kernel and arrive through the UDP socket.
const QUEUE: u32 = 0;
/// Entries of the queue → socket map: room for a socket per queue of a multi-queue NIC.
const MAP_QUEUES: u32 = 64;

/// Why the transport could not open; the UDP transport comes back with it, to be used instead.
pub struct OpenError {
    pub udp: UdpTransport,
    pub reason: String,
}

impl fmt::Debug for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Counters since `open`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    pub frames_sent: u64,
    /// Frames sent through the UDP socket (streams, long frames, peers off the link).
    pub frames_sent_by_kernel: u64,
    pub frames_received: u64,
    /// Frames that arrived through the UDP socket (long frames the program passed on).
    pub frames_received_by_kernel: u64,
    /// Frames the program passed to the kernel that never reached the socket.
    pub frames_lost_in_kernel: u64,
    /// Received frames that are not well-formed IPv4/UDP.
    pub malformed: u64,
    /// Frames longer than a frame may be, dropped before sending.
    pub oversize: u64,
    /// Sends cut short because every transmit chunk was in flight.
    pub ring_full: u64,
    /// Wake-up calls made to send.
    pub wakeups: u64,
}

/// How frames reach one rank.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Framed here and sent through the ring.
    Direct(HeaderTemplate),
    /// Through the UDP socket.
    Kernel,
}

/// An AF_XDP socket with its steering program, and the UDP socket beside it.
pub struct XdpTransport {
    // Drop order: the link first, so the program stops steering before the socket closes.
    _link: Link,
    _program: Program,
    _map: SocketMap,
    /// Frames the program passed to the kernel, and how many of them were read so far.
    passed: Counter,
    passed_read: u64,
    empty_kernel_polls: u32,
    socket: XskSocket,
    udp: UdpTransport,
    interface: Interface,
    local: Station,
    max_frame: usize,
    /// Index = rank.
    routes: Vec<Route>,
    /// Source address → rank, for frames taken from the ring.
    ranks: FxHashMap<SocketAddrV4, u32>,
    identification: u16,
    receive_calls: u32,
    stats: XdpStats,
}

impl fmt::Debug for XdpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpTransport")
            .field("interface", &self.interface.name)
            .field("local", &self.local)
            .field("max_frame", &self.max_frame)
            .field("stats", &self.stats)
            .finish()
    }
}

impl XdpTransport {
    /// Attaches to the interface that holds `udp`'s address, keeping `udp` beside the socket.
    /// On any failure (no Ethernet interface has the address, an MTU too large for a chunk, no
    /// privilege to load the program, a queue already taken) `udp` comes back with the reason.
    pub fn open(udp: UdpTransport) -> Result<Self, Box<OpenError>> {
        match Self::attach(&udp) {
            Ok(parts) => Ok(Self::assemble(udp, parts)),
            Err(reason) => Err(Box::new(OpenError { udp, reason })),
        }
    }

    fn attach(udp: &UdpTransport) -> Result<Attached, String> {
        let SocketAddr::V4(local) = udp.local_addr() else {
            return Err("AF_XDP framing is IPv4 only".into());
        };
        if local.ip().is_unspecified() || local.ip().is_loopback() {
            return Err(format!(
                "{} is not the address of one Ethernet interface",
                local.ip()
            ));
        }
        let interface = Interface::with_address(*local.ip())
            .map_err(|e| format!("cannot list interfaces: {e}"))?
            .ok_or_else(|| format!("no Ethernet interface has address {}", local.ip()))?;
        let largest = interface.mtu as usize + 14;
        if largest > MAX_FRAME_BYTES {
            return Err(format!(
                "{} has MTU {}: frames of {largest} bytes do not fit a {MAX_FRAME_BYTES}-byte \
                 chunk",
                interface.name, interface.mtu
            ));
        }
        let map = SocketMap::create(MAP_QUEUES).map_err(|e| {
            format!("cannot create a BPF map ({e}; loading XDP programs needs root or CAP_BPF)")
        })?;
        let socket = XskSocket::open(interface.index, QUEUE)
            .map_err(|e| format!("cannot open an AF_XDP socket on {}: {e}", interface.name))?;
        map.insert(QUEUE, socket.fd())
            .map_err(|e| format!("cannot register the AF_XDP socket: {e}"))?;
        let passed =
            Counter::create().map_err(|e| format!("cannot create a mapped BPF counter: {e}"))?;
        let steering = Steering {
            ip: *local.ip(),
            port: local.port(),
            sockets_map_fd: map.fd(),
            ring_max_udp_len: (RING_MAX_PAYLOAD + 8) as u16,
            passed_counter_fd: passed.fd(),
        };
        let program = Program::load(&redirect_program(&steering), "nicmsg_steer")
            .map_err(|e| e.to_string())?;
        let link = program
            .attach(interface.index, AttachMode::Generic)
            .map_err(|e| format!("cannot attach the XDP program to {}: {e}", interface.name))?;
        Ok(Attached {
            link,
            program,
            map,
            passed,
            socket,
            interface,
            local,
        })
    }

    fn assemble(udp: UdpTransport, parts: Attached) -> Self {
        // A frame must fit the link (its MTU less the IPv4 and UDP headers) and the UDP
        // socket's slots.
        let max_frame = udp.max_frame().min(parts.interface.mtu as usize - 28);
        Self {
            _link: parts.link,
            _program: parts.program,
            _map: parts.map,
            passed: parts.passed,
            passed_read: 0,
            empty_kernel_polls: 0,
            socket: parts.socket,
            udp,
            local: Station {
                mac: parts.interface.mac,
                addr: parts.local,
            },
            interface: parts.interface,
            max_frame,
            routes: Vec::new(),
            ranks: FxHashMap::default(),
            identification: 0,
            receive_calls: 0,
            stats: XdpStats::default(),
        }
    }

    /// Closes the AF_XDP socket and detaches the program; the UDP socket carries on alone.
    pub fn into_udp(self) -> UdpTransport {
        self.udp
    }

    /// The Ethernet address peers send to.
    pub fn link_address(&self) -> [u8; 6] {
        self.local.mac
    }

    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.local.addr)
    }

    pub fn interface(&self) -> &Interface {
        &self.interface
    }

    /// Sets the peer table (index = rank): each peer's data address and Ethernet address. Peers
    /// on the interface's subnet with a known Ethernet address are reached directly, the others
    /// through the UDP socket. Allocates; call at setup.
    pub fn set_peers(&mut self, peers: &[(SocketAddr, Option<[u8; 6]>)]) {
        let addresses: Vec<SocketAddr> = peers.iter().map(|(addr, _)| *addr).collect();
        self.udp.set_peers(&addresses);
        self.routes = peers
            .iter()
            .map(|&(addr, mac)| self.route(addr, mac))
            .collect();
        self.ranks = peers
            .iter()
            .enumerate()
            .filter_map(|(rank, (addr, _))| canonical_v4(*addr).map(|v4| (v4, rank as u32)))
            .rev() // the lower rank wins when two share an address, as in the UDP transport
            .collect();
    }

    fn route(&self, addr: SocketAddr, mac: Option<[u8; 6]>) -> Route {
        match (canonical_v4(addr), mac) {
            (Some(v4), Some(mac))
                if self.interface.on_link(*v4.ip()) && *v4.ip() != *self.local.addr.ip() =>
            {
                let to = Station { mac, addr: v4 };
                Route::Direct(HeaderTemplate::new(&self.local, &to))
            }
            _ => Route::Kernel,
        }
    }

    /// True if some peer shares this rank's IP address: frames between the two go through the
    /// kernel's loopback, never through the interface, so the ring would not see them.
    pub fn shares_address_with_a_peer(&self, my_rank: u32) -> bool {
        self.ranks
            .iter()
            .any(|(addr, &rank)| rank != my_rank && addr.ip() == self.local.addr.ip())
    }

    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// The AF_XDP socket (readable when frames wait in the receive ring) and the UDP socket
    /// (readable when frames the program passed on wait there).
    pub fn fds(&self) -> [RawFd; 2] {
        [self.socket.fd(), self.udp.fd()]
    }

    pub fn stats(&self) -> &XdpStats {
        &self.stats
    }

    /// Frames the program has passed to the kernel so far (its counter).
    pub fn passed_to_kernel(&self) -> u64 {
        self.passed.read()
    }

    /// The kernel's counters of the AF_XDP socket.
    pub fn socket_statistics(&self) -> io::Result<libc::xdp_statistics> {
        self.socket.statistics()
    }

    /// Sends `frames` (rank, pieces) in order; returns how many were taken (sent, or dropped and
    /// counted). Short frames sent alone go through the ring, the others through the UDP socket
    /// (see the module documentation). Fewer than all are taken when every transmit chunk is
    /// in flight or the UDP socket would block: the caller offers the rest again.
    pub fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        let alone = frames.len() <= RING_MAX_BATCH;
        let mut taken = 0;
        while taken < frames.len() {
            let by_ring = |&(rank, pieces): &(u32, &[&[u8]])| {
                alone && self.is_direct(rank) && payload_len(pieces) <= RING_MAX_PAYLOAD
            };
            let first_by_ring = by_ring(&frames[taken]);
            let run = frames[taken..]
                .iter()
                .take_while(|frame| by_ring(frame) == first_by_ring)
                .count();
            let run_frames = &frames[taken..taken + run];
            let sent = if first_by_ring {
                self.send_direct(run_frames)
            } else {
                let sent = self.udp.send_batch(run_frames)?;
                self.stats.frames_sent_by_kernel += sent as u64;
                sent
            };
            taken += sent;
            if sent < run {
                break;
            }
        }
        self.socket.flush()?;
        Ok(taken)
    }

    fn is_direct(&self, rank: u32) -> bool {
        matches!(self.routes.get(rank as usize), Some(Route::Direct(_)))
    }

    /// Frames to direct peers into the transmit ring; returns how many were taken.
    fn send_direct(&mut self, frames: &[(u32, &[&[u8]])]) -> usize {
        for (taken, &(rank, pieces)) in frames.iter().enumerate() {
            let Some(Route::Direct(template)) = self.routes.get(rank as usize).copied() else {
                unreachable!("only direct frames are passed here");
            };
            let len = payload_len(pieces);
            if len > self.max_frame {
                self.stats.oversize += 1;
                continue;
            }
            let Some((chunk, bytes)) = self.socket.tx_chunk() else {
                self.stats.ring_full += 1;
                return taken;
            };
            template.write(bytes, len, self.identification);
            let mut at = HEADERS_LEN;
            for piece in pieces {
                bytes[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
            self.socket.queue_send(chunk, at);
            self.identification = self.identification.wrapping_add(1);
            self.stats.frames_sent += 1;
        }
        frames.len()
    }

    /// Hands every frame waiting in the receive ring (up to a batch) to `deliver`, with the
    /// rank its source address belongs to (`None`: not a member of the job); returns how many.
    /// Sends what still waits in the transmit ring first.
    pub fn receive_ring(
        &mut self,
        deliver: &mut dyn FnMut(nicmsg_engine::Origin, &[u8]),
    ) -> io::Result<usize> {
        if self.socket.has_unsent() {
            self.socket.flush()?;
        }
        let ranks = &self.ranks;
        let stats = &mut self.stats;
        let mut delivered = 0;
        self.socket
            .receive(RECEIVE_BATCH, |frame| match parse(frame) {
                Ok(datagram) => {
                    stats.frames_received += 1;
                    delivered += 1;
                    let origin = nicmsg_engine::Origin {
                        rank: ranks.get(&datagram.source).copied(),
                        address: Some(datagram.source.into()),
                    };
                    deliver(origin, datagram.payload);
                }
                Err(_) => stats.malformed += 1,
            });
        Ok(delivered)
    }

    /// True if the UDP socket should be read now: the program passed frames to the kernel that
    /// have not been read yet, or the periodic poll is due. Call once per receive poll, and
    /// report what the read brought with [`kernel_read`](Self::kernel_read).
    pub fn kernel_due(&mut self) -> bool {
        self.receive_calls = self.receive_calls.wrapping_add(1);
        self.passed.read() != self.passed_read
            || self.receive_calls.is_multiple_of(KERNEL_POLL_INTERVAL)
    }

    /// Records that a read of the UDP socket brought `frames` frames.
    pub fn kernel_read(&mut self, frames: usize) {
        self.stats.frames_received_by_kernel += frames as u64;
        let passed = self.passed.read();
        if frames > 0 {
            self.empty_kernel_polls = 0;
            // Frames the program did not count (see KERNEL_POLL_INTERVAL) do not run ahead.
            self.passed_read = (self.passed_read + frames as u64).min(passed);
            return;
        }
        if self.passed_read == passed {
            return;
        }
        self.empty_kernel_polls += 1;
        if self.empty_kernel_polls >= KERNEL_OWED_EMPTY_POLLS {
            self.stats.frames_lost_in_kernel += passed - self.passed_read;
            self.passed_read = passed;
            self.empty_kernel_polls = 0;
        }
    }

    /// The UDP socket beside the ring, for reading it with a placement plan.
    pub fn kernel_socket(&mut self) -> &mut UdpTransport {
        &mut self.udp
    }

    /// The kernel's UDP socket beside the ring, to read from.
    pub fn kernel_socket_ref(&self) -> &UdpTransport {
        &self.udp
    }

    /// Counters of the UDP socket beside the ring.
    pub fn kernel_stats(&self) -> &nicmsg_udp::UdpStats {
        self.udp.stats()
    }

    /// Both paths: the UDP socket when due, then the ring. Returns the count.
    pub fn receive(
        &mut self,
        deliver: &mut dyn FnMut(nicmsg_engine::Origin, &[u8]),
    ) -> io::Result<usize> {
        let mut delivered = 0;
        if self.kernel_due() {
            let count = self.udp.recv_batch()?;
            for index in 0..count {
                let rank = self.udp.received_rank(index);
                let (address, bytes) = self.udp.received(index);
                let origin = nicmsg_engine::Origin {
                    rank,
                    address: Some(address),
                };
                deliver(origin, bytes);
            }
            self.kernel_read(count);
            delivered += count;
        }
        Ok(delivered + self.receive_ring(deliver)?)
    }
}

fn payload_len(pieces: &[&[u8]]) -> usize {
    pieces.iter().map(|p| p.len()).sum()
}

/// The parts `open` sets up before the transport is assembled.
struct Attached {
    link: Link,
    program: Program,
    map: SocketMap,
    passed: Counter,
    socket: XskSocket,
    interface: Interface,
    local: SocketAddrV4,
}

/// An IPv4 address, or an IPv4-mapped IPv6 one, as IPv4.
fn canonical_v4(addr: SocketAddr) -> Option<SocketAddrV4> {
    match addr {
        SocketAddr::V4(v4) => Some(v4),
        SocketAddr::V6(v6) => v6
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, v6.port())),
    }
    .filter(|v4| !IpAddr::V4(*v4.ip()).is_unspecified())
}

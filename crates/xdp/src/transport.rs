//! The transport: frames to on-link peers go out through the AF_XDP socket's transmit ring,
//! framed here; frames from everyone arrive through its receive ring, steered by the program.
//! A UDP socket bound to the same address stays open beside it: it keeps the port reserved in
//! the kernel, sends to peers that need the kernel's routing (off the subnet, or with no known
//! Ethernet address), and receives whatever the program leaves to the kernel.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;

use nicmsg_udp::UdpTransport;
use rustc_hash::FxHashMap;

use crate::bpf::{AttachMode, Link, Program, SocketMap};
use crate::interface::Interface;
use crate::packet::{parse, HeaderTemplate, Station, HEADERS_LEN};
use crate::program::redirect_program;
use crate::socket::{XskSocket, MAX_FRAME_BYTES};

/// Frames taken from the receive ring per call: the same batch the UDP transport reads per
/// `recvmmsg`, so a turn of the engine does the same bounded amount of work either way.
pub const RECEIVE_BATCH: u32 = 64;
/// Every this many receive calls, the UDP socket is polled too. Frames reach it only when the
/// program passes them on (a receive queue without a socket, a frame it does not recognise), so
/// a system call per poll would buy nothing; this bounds how long such a frame waits.
const KERNEL_POLL_INTERVAL: u32 = 64;
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
    /// Frames to peers sent through the UDP socket (no on-link route).
    pub frames_sent_by_kernel: u64,
    pub frames_received: u64,
    /// Frames that arrived through the UDP socket instead of the ring.
    pub frames_received_by_kernel: u64,
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
        let program = Program::load(
            &redirect_program(map.fd(), *local.ip(), local.port()),
            "nicmsg_steer",
        )
        .map_err(|e| e.to_string())?;
        let link = program
            .attach(interface.index, AttachMode::Native)
            .or_else(|_| program.attach(interface.index, AttachMode::Generic))
            .map_err(|e| format!("cannot attach the XDP program to {}: {e}", interface.name))?;
        Ok(Attached {
            link,
            program,
            map,
            socket,
            interface,
            local,
        })
    }

    fn assemble(udp: UdpTransport, parts: Attached) -> Self {
        let Attached {
            link,
            program,
            map,
            socket,
            interface,
            local,
        } = parts;
        // A frame must fit the link (its MTU less the IPv4 and UDP headers) and the UDP
        // socket's slots.
        let max_frame = udp.max_frame().min(interface.mtu as usize - 28);
        Self {
            _link: link,
            _program: program,
            _map: map,
            socket,
            udp,
            local: Station {
                mac: interface.mac,
                addr: local,
            },
            interface,
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

    /// The AF_XDP socket: readable when frames wait in the receive ring.
    pub fn fd(&self) -> RawFd {
        self.socket.fd()
    }

    pub fn stats(&self) -> &XdpStats {
        &self.stats
    }

    /// The kernel's counters of the AF_XDP socket.
    pub fn socket_statistics(&self) -> io::Result<libc::xdp_statistics> {
        self.socket.statistics()
    }

    /// Sends `frames` (rank, pieces) in order; returns how many were taken (sent, or dropped and
    /// counted). Fewer than all when every transmit chunk is in flight or the UDP socket would
    /// block: the caller offers the rest again.
    pub fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        let mut taken = 0;
        while taken < frames.len() {
            let direct = frames[taken..]
                .iter()
                .take_while(|(rank, _)| self.is_direct(*rank))
                .count();
            if direct > 0 {
                let sent = self.send_direct(&frames[taken..taken + direct]);
                taken += sent;
                if sent < direct {
                    break;
                }
                continue;
            }
            let by_kernel = frames[taken..]
                .iter()
                .take_while(|(rank, _)| !self.is_direct(*rank))
                .count();
            let sent = self.udp.send_batch(&frames[taken..taken + by_kernel])?;
            self.stats.frames_sent_by_kernel += sent as u64;
            taken += sent;
            if sent < by_kernel {
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
            let len: usize = pieces.iter().map(|p| p.len()).sum();
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
    /// rank its source address belongs to (`None`: not a member of the job); every
    /// [`KERNEL_POLL_INTERVAL`] calls also those waiting at the UDP socket. Returns the count.
    pub fn receive(&mut self, deliver: &mut dyn FnMut(Option<u32>, &[u8])) -> io::Result<usize> {
        let ranks = &self.ranks;
        let stats = &mut self.stats;
        let mut delivered = 0;
        self.socket
            .receive(RECEIVE_BATCH, |frame| match parse(frame) {
                Ok(datagram) => {
                    stats.frames_received += 1;
                    delivered += 1;
                    deliver(ranks.get(&datagram.source).copied(), datagram.payload);
                }
                Err(_) => stats.malformed += 1,
            });
        self.receive_calls = self.receive_calls.wrapping_add(1);
        if delivered == 0 && self.receive_calls.is_multiple_of(KERNEL_POLL_INTERVAL) {
            let count = self.udp.recv_batch()?;
            for index in 0..count {
                let rank = self.udp.received_rank(index);
                let (_, bytes) = self.udp.received(index);
                deliver(rank, bytes);
            }
            self.stats.frames_received_by_kernel += count as u64;
            delivered += count;
        }
        Ok(delivered)
    }
}

/// The parts `open` sets up before the transport is assembled.
struct Attached {
    link: Link,
    program: Program,
    map: SocketMap,
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

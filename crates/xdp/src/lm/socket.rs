//! An LM socket: a station (`nicmsg_lm::station`) on real sockets. Frames arrive through a
//! kernel UDP socket (the ordinary path) or, for an admitted transfer, land in place through
//! an AF_XDP socket whose fill addresses the station chooses and whose placing filter lets
//! only each address's own frame take it.
//!
//! Frames leave straight from their send buffers, headers written into the holes and no
//! payload copied in user space. A send buffer made by [`LmSocket::send_buffer`] lies in the
//! AF_XDP socket's UMEM: each of its frames, Ethernet, IPv4 and UDP headers written into the
//! front of its hole, is one descriptor on the transmit ring, and one wake-up of the kernel
//! sends a batch of them. Frames of heap buffers, frames to peers whose Ethernet address the
//! kernel has not resolved yet (or that are reached through a router or loopback), and every
//! frame of a socket without AF_XDP go through the kernel's UDP socket, one `sendto` each.
//!
//! One thread drives a socket: [`LmSocket::progress`] does one turn (receive, land, time,
//! post fill addresses, send) and [`LmSocket::wait`] sleeps until there is work.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use nicmsg_lm::admission::PeerId;
use nicmsg_lm::geometry::MAX_HEADER_LEN;
use nicmsg_lm::open::{OpenEvent, OpenSendError, OpenSendId, OpenStation, MAX_OPEN_PEERS};
use nicmsg_lm::send_buffer::{HoleBuffer, SendBufferError};
use nicmsg_lm::station::{
    Event, Landing, Posted, RegionId, Regions, SendError, SendId, Station, StationConfig,
    StationStats,
};
use nicmsg_lm::{Geometry, Slot};
use nicmsg_wire::FRAME_HEADER_LEN;
use rustc_hash::FxHashMap;

use super::core::Core;
use super::memory::{LmMemory, SendArea, UmemRegions};
use super::runs::{FillRuns, Run};
use crate::bpf::{AttachMode, Counter, Link, Program, SocketMap};
use crate::interface::Interface;
use crate::neighbours;
use crate::packet::{HeaderTemplate, Station as LinkStation, ETHER_LEN, HEADERS_LEN};
use crate::placing::{
    placing_program, PlacingSteering, PlacingTable, BUFFER_BYTES, PLACING_POSITIONS,
};
use crate::socket::{Binding, ReceiveMode, XskSocket, KERNEL_HEADROOM, MAX_FRAME_BYTES};

/// Frames taken from the kernel's socket and from the receive ring per turn: a turn stays
/// short, so sends and timers are not starved by a flood.
const RECEIVE_BATCH: usize = 64;
/// Rounds of the receive ring spent waiting for the landings the filter made before a frame
/// it passed: enough for a ring the kernel is still publishing (`RECEIVE_BATCH` landings a
/// round), and a bound if it never does (a redirect the kernel dropped).
const MAX_LANDING_ROUNDS: usize = 256;
/// The kernel socket's buffers: a window of frames from every peer fits.
const SOCKET_BUFFER_BYTES: usize = 32 << 20;
/// The largest datagram read from the kernel's socket (an LM frame is one link frame).
const MAX_DATAGRAM: usize = 9216;
/// Where a frame's IPv4 source address and UDP source port are in the headers the placing
/// filter keeps (Ethernet 14, then IPv4 with its source at 12, then UDP).
const KEPT_SOURCE_IP: std::ops::Range<usize> = 26..30;
const KEPT_SOURCE_PORT: std::ops::Range<usize> = 34..36;
/// How long a peer whose Ethernet address the kernel has not resolved is sent to through the
/// kernel's socket before the neighbour table is read again: first soon (the kernel resolves a
/// link neighbour within a millisecond of the first datagram, and every frame sent by `sendto`
/// meanwhile may overtake the ring's frames once the route changes), then less often, up to
/// the longest interval (reading the table costs a file read).
const FIRST_RESOLVE_INTERVAL: Duration = Duration::from_millis(1);
const LONGEST_RESOLVE_INTERVAL: Duration = Duration::from_millis(50);
/// The longest link frame LM places: a 9000-byte MTU's (with its Ethernet header), three AF_XDP
/// buffers, and the longest the transmit ring sends as a chain.
const MAX_PLACED_FRAME: usize = crate::socket::MAX_CHAIN_BYTES;
/// The longest sleep in [`LmSocket::wait`] while a finished send waits for the kernel to be
/// done with its frames on the transmit ring (the completion ring wakes no one).
const COMPLETION_WAIT: Duration = Duration::from_millis(1);

/// Routes to peers kept at once: an open socket learns addresses as clients come and go, and
/// forgets them all past this many (each is looked up again in the neighbour table when used).
const MAX_ROUTES: usize = MAX_OPEN_PEERS as usize;

/// How an LM socket is opened.
#[derive(Debug, Clone)]
pub struct LmSocketConfig {
    /// Every node's address, this one's at `me`.
    pub peers: Vec<SocketAddrV4>,
    pub me: PeerId,
    pub job: u32,
    /// UDP payload per frame: 1472 on a 1500-byte link, 8972 on a 9000-byte one (placed
    /// across three AF_XDP buffers with scatter-gather: kernel 6.6 or later).
    pub udp_payload: usize,
    /// Receive memory for placed transfers, in the UMEM of an AF_XDP socket (the largest
    /// transfer placed needs its length and a little more); 0 opens no AF_XDP socket, and
    /// this node receives every transfer by copy through the kernel's socket.
    pub placing_bytes: usize,
    /// Memory for send buffers in the same UMEM, whose frames leave through the AF_XDP
    /// transmit ring ([`LmSocket::send_buffer`]); 0, or `placing_bytes` 0, makes every send
    /// buffer on the heap and sends every frame with a `sendto`.
    pub sending_bytes: usize,
}

/// How an LM socket with peers added by address is opened ([`LmSocket::open_by_address`]).
#[derive(Debug, Clone)]
pub struct LmOpenConfig {
    /// The address the socket binds (an IPv4 address of an Ethernet interface, to place).
    pub local: SocketAddrV4,
    /// Peers kept at once (1..=`MAX_OPEN_PEERS`); a quiet peer's slot is reused.
    pub capacity: u32,
    /// The number every frame carries: the same on every socket that talks to this one.
    pub job: u32,
    /// As [`LmSocketConfig`].
    pub udp_payload: usize,
    pub placing_bytes: usize,
    pub sending_bytes: usize,
}

/// What an LM socket counted beyond its station.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LmSocketStats {
    pub station: StationStats,
    /// Frames to the port that the placing filter passed to the kernel (not their address's).
    pub passed_to_kernel: u64,
    /// Datagrams from an address that is no peer's, dropped.
    pub unknown_sources: u64,
    /// Landings at another address than their fill slot's: the filter's cursor and the
    /// kernel's count of taken addresses disagree.
    pub desyncs: u64,
    /// Whether frames are placed with AF_XDP in zero-copy mode, as the kernel reports it
    /// (false: copy mode, the kernel copies each frame once into the UMEM).
    pub zero_copy: bool,
    /// Data frames sent through the AF_XDP transmit ring from where they lie in the UMEM.
    pub ring_frames: u64,
    /// Control frames (headers only) copied into a transmit chunk and sent through the ring.
    pub ring_controls: u64,
    /// Frames sent through the kernel's UDP socket (`sendto`).
    pub kernel_frames: u64,
    /// Send buffers made on the heap because the sending memory had no room.
    pub heap_send_buffers: u64,
    /// Frames the kernel dropped on their way into the placing socket: no fill address
    /// posted, or the receive ring full (`XDP_STATISTICS`).
    pub ring_drops: u64,
}

/// The AF_XDP side of a socket that places transfers.
struct PlacingSide {
    // Field order is drop order: the program is detached before the socket closes.
    _link: Link,
    _program: Program,
    _map: SocketMap,
    table: PlacingTable,
    passed: Counter,
    xsk: XskSocket,
    /// Fill addresses posted and not yet seen landed, a run for each slot, oldest first, with
    /// the positions the table is indexed by.
    runs: FillRuns,
    local: SocketAddrV4,
    interface: Interface,
}

/// Where a socket binds and how its frames are cut, either kind of station.
struct Setup {
    local: SocketAddrV4,
    job: u32,
    udp_payload: usize,
    placing_bytes: usize,
    sending_bytes: usize,
}

/// How frames reach a peer.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Through the transmit ring, with these link headers.
    Ring(HeaderTemplate),
    /// Through the kernel's socket until `retry_at`, when the neighbour table is read again.
    Unresolved {
        retry_at: Instant,
        interval: Duration,
    },
    /// Through the kernel's socket for good: loopback, a router's way, or no AF_XDP socket.
    Kernel,
}

/// Where frames out were sent, counted.
#[derive(Debug, Clone, Copy, Default)]
struct SendCounts {
    ring_frames: u64,
    ring_controls: u64,
    kernel_frames: u64,
}

/// One node's LM over real sockets.
pub struct LmSocket {
    // The station holds pointers into the placing socket's UMEM: it goes first.
    core: Core,
    placing: Option<PlacingSide>,
    udp: UdpSocket,
    local: SocketAddrV4,
    started: Instant,
    datagram: Vec<u8>,
    unknown_sources: u64,
    desyncs: u64,
    send_area: Option<SendArea>,
    /// By peer address, made when first sent to.
    /// Looked up for every frame sent: hashed with Fx (SipHash would cost each frame more
    /// than the index into a job's list that this replaced).
    routes: FxHashMap<SocketAddrV4, Route>,
    /// The IPv4 identification of the next frame sent through the ring.
    identification: u16,
    /// Finished sends held until the kernel is done with their buffers' frames.
    held: VecDeque<Held>,
    /// The last turn left frames in the station because the transmit ring was full.
    ring_full: bool,
    sent: SendCounts,
    heap_send_buffers: u64,
    /// Print the counters on stderr when the socket closes (`NICMSG_STATS`).
    report_on_close: bool,
}

/// An event of either kind of socket, held back while its buffer's frames are on the ring.
enum Held {
    Job(Event),
    Open(OpenEvent),
}

impl Drop for LmSocket {
    fn drop(&mut self) {
        if self.report_on_close {
            eprintln!("nicmsg LM socket {}:\n{}", self.local, self.stats());
        }
    }
}

impl LmSocket {
    /// Binds the node's address; with `placing_bytes`, also opens the AF_XDP socket on the
    /// interface holding it and attaches the placing filter (root or CAP_BPF and
    /// CAP_NET_ADMIN).
    pub fn open(config: LmSocketConfig) -> io::Result<Self> {
        let local = *config
            .peers
            .get(config.me as usize)
            .ok_or_else(|| invalid("`me` is not an index of `peers`"))?;
        let peers = u32::try_from(config.peers.len()).map_err(|_| invalid("too many peers"))?;
        let link = Setup {
            local,
            job: config.job,
            udp_payload: config.udp_payload,
            placing_bytes: config.placing_bytes,
            sending_bytes: config.sending_bytes,
        };
        let (me, list) = (config.me, config.peers);
        Self::open_with(link, move |mut station_config, memory, _| {
            station_config.me = me;
            station_config.peers = peers;
            Core::Job {
                station: Box::new(Station::new(station_config, memory)),
                peers: list,
            }
        })
    }

    /// A socket with peers added by address, as a datagram server or client uses one: no
    /// job of listed nodes; any socket may send to it, and it to any address (see
    /// `nicmsg_lm::open`). Events come from [`poll_open_event`](Self::poll_open_event), sends
    /// go through [`send_to`](Self::send_to).
    pub fn open_by_address(config: LmOpenConfig) -> io::Result<Self> {
        if !(1..=MAX_OPEN_PEERS).contains(&config.capacity) {
            return Err(invalid(&format!(
                "an open LM socket keeps 1..={MAX_OPEN_PEERS} peers"
            )));
        }
        let link = Setup {
            local: config.local,
            job: config.job,
            udp_payload: config.udp_payload,
            placing_bytes: config.placing_bytes,
            sending_bytes: config.sending_bytes,
        };
        let capacity = config.capacity;
        Self::open_with(link, move |station_config, memory, local| {
            let incarnation = nicmsg_engine::incarnation::fresh(SocketAddr::V4(local));
            Core::Open(Box::new(OpenStation::new(
                station_config,
                (SocketAddr::V4(local), capacity, incarnation),
                memory,
            )))
        })
    }

    /// Binds, opens the placing side if asked, and makes the station with `core` from a
    /// configuration of the link's geometry (its node and peer numbers for `core` to set).
    fn open_with(
        config: Setup,
        core: impl FnOnce(StationConfig, LmMemory, SocketAddrV4) -> Core,
    ) -> io::Result<Self> {
        let geometry = Geometry::new(
            HEADERS_LEN + FRAME_HEADER_LEN,
            config.udp_payload.saturating_sub(FRAME_HEADER_LEN),
        )
        .map_err(|error| invalid(&error.to_string()))?;
        if config.placing_bytes > 0 && !Self::can_place(config.udp_payload) {
            return Err(invalid(&format!(
                "frames of {} bytes are longer than LM places (a {}-byte link frame at \
                 most): receive by copy (placing_bytes 0)",
                HEADERS_LEN + config.udp_payload,
                MAX_PLACED_FRAME
            )));
        }
        let udp = UdpSocket::bind(config.local)?;
        // Port 0 took a free port: the filter and the peers need the one taken.
        let SocketAddr::V4(local) = udp.local_addr()? else {
            return Err(invalid("an LM socket binds an IPv4 address"));
        };
        nicmsg_udp::force_buffer_sizes(udp.as_raw_fd(), SOCKET_BUFFER_BYTES);
        let mut placing = match config.placing_bytes {
            0 => None,
            bytes => Some(open_placing(
                local,
                (bytes, config.sending_bytes),
                spans_buffers(config.udp_payload),
            )?),
        };
        let send_area = match placing.as_ref() {
            Some(side) if config.sending_bytes > 0 => {
                Some(SendArea::new(side.xsk.sending_memory()))
            }
            _ => None,
        };
        let memory = match placing.as_mut() {
            Some(side) => {
                let umem = side.xsk.receiving_memory();
                // SAFETY: the UMEM lives in `placing`, which the socket drops after the
                // station; nothing else takes slices of it while the station runs.
                LmMemory::Umem(unsafe { UmemRegions::new(umem.as_mut_ptr(), umem.len()) })
            }
            None => LmMemory::None,
        };
        let mut station_config = StationConfig::new(0, 2, config.job, geometry);
        station_config.device_buffer_bytes = BUFFER_BYTES as u32;
        // Every slot may be a run of addresses: the fill ring holds that many of the longest.
        let longest = geometry.header_len() + geometry.frame_payload();
        station_config.fill_slots = PLACING_POSITIONS / longest.div_ceil(BUFFER_BYTES);
        Ok(Self {
            core: core(station_config, memory, local),
            placing,
            udp,
            local,
            started: Instant::now(),
            datagram: vec![0; MAX_DATAGRAM],
            unknown_sources: 0,
            desyncs: 0,
            send_area,
            routes: FxHashMap::default(),
            identification: 0,
            held: VecDeque::new(),
            ring_full: false,
            sent: SendCounts::default(),
            heap_send_buffers: 0,
            report_on_close: super::report::report_asked(),
        })
    }

    /// Whether frames of `udp_payload` bytes can be placed: a frame, its link headers
    /// included, up to a 9000-byte link's. One longer than an AF_XDP chunk's
    /// [`MAX_FRAME_BYTES`] spans buffers, which needs a socket bound with scatter-gather
    /// (kernel 6.6 or later; [`open`](Self::open) fails where the kernel refuses it).
    pub fn can_place(udp_payload: usize) -> bool {
        HEADERS_LEN + udp_payload <= MAX_PLACED_FRAME
    }

    /// How transfers are cut into frames (send buffers must be made with it).
    pub fn geometry(&self) -> Geometry {
        self.core.station().config().geometry
    }

    /// A zeroed send buffer for a message of `len` bytes, for the application to fill in
    /// place: in the sending memory, so its frames leave through the transmit ring, while
    /// there is room; on the heap otherwise (counted in `heap_send_buffers`). Reuse buffers
    /// that come back with [`Event::Sent`]: making one zeroes it.
    pub fn send_buffer(&mut self, len: usize) -> Result<HoleBuffer, SendBufferError> {
        let geometry = self.geometry();
        let len = len as u64;
        let needed = geometry.send_buffer_len(geometry.check_len(len)?);
        if let Some(memory) = self.send_area.as_ref().and_then(|area| area.lend(needed)) {
            return HoleBuffer::in_memory(geometry, len, memory);
        }
        self.heap_send_buffers += 1;
        HoleBuffer::new(geometry, len)
    }

    /// Sends the transfer in `buffer` (made with [`send_buffer`](Self::send_buffer), or with
    /// [`geometry`](Self::geometry) on the heap, and filled in place) to node `to` of a job's
    /// socket; the buffer comes back with [`Event::Sent`].
    pub fn send(
        &mut self,
        to: PeerId,
        buffer: HoleBuffer,
    ) -> Result<SendId, (SendError, HoleBuffer)> {
        let now = self.now();
        let Core::Job { station, .. } = &mut self.core else {
            return Err((SendError::NoSuchPeer(to), buffer));
        };
        let sent = station.send(now, to, buffer);
        self.flush_outputs();
        sent
    }

    /// Sends the transfer in `buffer` to the socket at `to`, on a socket opened by address;
    /// the buffer comes back with [`OpenEvent::Sent`].
    pub fn send_to(
        &mut self,
        to: SocketAddrV4,
        buffer: HoleBuffer,
    ) -> Result<OpenSendId, (OpenSendError, HoleBuffer)> {
        let now = self.now();
        let Core::Open(open) = &mut self.core else {
            return Err((OpenSendError::Station(SendError::NoSuchPeer(0)), buffer));
        };
        let sent = open.send(now, SocketAddr::V4(to), buffer);
        self.flush_outputs();
        sent
    }

    /// The next thing that happened on a job's socket. A finished send whose buffer still has
    /// frames on the transmit ring waits (with what came after it) until the kernel is done
    /// with them.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = match self.held.front() {
            Some(Held::Job(_)) => match self.held.pop_front() {
                Some(Held::Job(event)) => event,
                _ => unreachable!("the front is a job's event"),
            },
            Some(Held::Open(_)) => return None,
            None => match &mut self.core {
                Core::Job { station, .. } => station.poll_event()?,
                Core::Open(_) => return None,
            },
        };
        let lends_ring_memory = matches!(&event, Event::Sent { buffer, .. } if buffer.is_lent());
        if lends_ring_memory && self.reclaim_ring() > 0 {
            self.held.push_front(Held::Job(event));
            return None;
        }
        Some(event)
    }

    /// [`poll_event`](Self::poll_event) for a socket opened by address.
    pub fn poll_open_event(&mut self) -> Option<OpenEvent> {
        let event = match self.held.front() {
            Some(Held::Open(_)) => match self.held.pop_front() {
                Some(Held::Open(event)) => event,
                _ => unreachable!("the front is an open socket's event"),
            },
            Some(Held::Job(_)) => return None,
            None => match &mut self.core {
                Core::Open(open) => open.poll_event()?,
                Core::Job { .. } => return None,
            },
        };
        let lends_ring_memory =
            matches!(&event, OpenEvent::Sent { buffer, .. } if buffer.is_lent());
        if lends_ring_memory && self.reclaim_ring() > 0 {
            self.held.push_front(Held::Open(event));
            return None;
        }
        Some(event)
    }

    /// The bytes of a region lent with a placed transfer.
    pub fn region(&mut self, region: RegionId) -> &[u8] {
        self.core.station_mut().regions().bytes(region)
    }

    /// A lent region comes back.
    pub fn release(&mut self, region: RegionId) {
        self.core.station_mut().release(region);
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// The station's counters: cheap, for a loop that watches them.
    pub fn station_stats(&self) -> &StationStats {
        self.core.station().stats()
    }

    /// An open socket's conversation counters (new peers, restarts, RESETs); `None` for a
    /// job's.
    pub fn open_stats(&self) -> Option<nicmsg_lm::open::OpenStats> {
        match &self.core {
            Core::Open(open) => Some(*open.stats()),
            Core::Job { .. } => None,
        }
    }

    /// Every counter, the kernel's drops on the way into the placing socket included (read
    /// with a system call).
    pub fn stats(&self) -> LmSocketStats {
        LmSocketStats {
            station: *self.core.station().stats(),
            passed_to_kernel: self.placing.as_ref().map_or(0, |p| p.passed.read()),
            unknown_sources: self.unknown_sources,
            desyncs: self.desyncs,
            zero_copy: self
                .placing
                .as_ref()
                .is_some_and(|side| side.xsk.is_zero_copy()),
            ring_frames: self.sent.ring_frames,
            ring_controls: self.sent.ring_controls,
            kernel_frames: self.sent.kernel_frames,
            heap_send_buffers: self.heap_send_buffers,
            ring_drops: self.placing.as_ref().map_or(0, |side| {
                side.xsk.statistics().map_or(0, |kernel| {
                    kernel.rx_dropped + kernel.rx_ring_full + kernel.rx_fill_ring_empty_descs
                })
            }),
        }
    }

    /// The node (a job's) or peer slot (an open socket's) whose transfer this one places
    /// now, if any.
    pub fn placing_from(&self) -> Option<PeerId> {
        self.core
            .station()
            .admission()
            .placing()
            .map(|(peer, _)| peer)
    }

    /// Whether the send `id` of a socket opened by address has not reported yet through
    /// [`poll_open_event`](Self::poll_open_event).
    pub fn is_sending(&self, id: OpenSendId) -> bool {
        let held = self.held.iter().any(
            |event| matches!(event, Held::Open(OpenEvent::Sent { id: done, .. }) if *done == id),
        );
        let pending = match &self.core {
            Core::Open(open) => open.is_pending(id),
            Core::Job { .. } => false,
        };
        held || pending
    }

    /// Whether transfers sent are all finished (delivered or failed).
    pub fn is_idle(&self) -> bool {
        self.core.station().sending() == 0 && self.held.is_empty()
    }

    /// One turn: frames from the kernel's socket, landings from the receive ring, timers,
    /// then fill addresses and frames out. An error is a broken socket or a fill queue out of
    /// step with the kernel (counted in `desyncs`).
    pub fn progress(&mut self) -> io::Result<()> {
        // One clock read a turn: a turn is short (`RECEIVE_BATCH` frames from each path).
        let now = self.now();
        self.take_landings(now)?;
        self.receive_ordinary(now)?;
        if self.core.poll_timeout().is_some_and(|at| at <= now) {
            self.core.handle_timeout(now);
        }
        self.flush_outputs();
        Ok(())
    }

    /// Sleeps until a frame arrives, a timer is due, or `max` passed.
    pub fn wait(&self, max: Duration) {
        if self.ring_full {
            // Frames wait for room on the transmit ring, which only this thread's turns make.
            return;
        }
        let now = self.now();
        let timer = self
            .core
            .poll_timeout()
            .map(|at| Duration::from_nanos(at.saturating_sub(now)));
        let mut timeout = timer.map_or(max, |t| t.min(max));
        if !self.held.is_empty() {
            timeout = timeout.min(COMPLETION_WAIT);
        }
        let mut fds = [self.udp.as_raw_fd(), -1].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let mut count = 1;
        if let Some(side) = &self.placing {
            fds[1].fd = side.xsk.fd();
            count = 2;
        }
        let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` holds at least `count` valid entries.
        unsafe { libc::poll(fds.as_mut_ptr(), count, millis) };
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Frames the kernel's socket holds: every frame but the placed ones.
    fn receive_ordinary(&mut self, now: u64) -> io::Result<()> {
        for _ in 0..RECEIVE_BATCH {
            let (len, from) = match receive_nonblocking(&self.udp, &mut self.datagram) {
                Ok(Some(received)) => received,
                Ok(None) => return Ok(()),
                Err(error) => return Err(error),
            };
            let SocketAddr::V4(from) = from else {
                self.unknown_sources += 1;
                continue;
            };
            self.see_earlier_landings(now)?;
            if !self.core.arrive(now, from, &self.datagram[..len]) {
                self.unknown_sources += 1;
            }
        }
        Ok(())
    }

    /// Takes every landing the placing filter made before the frame just read from the
    /// kernel's socket passed it, so the station judges that frame by the fill queue as it
    /// was. A frame whose slot the filter gave to an earlier copy of it (the sender probed a
    /// silence, or answered a grant twice) would otherwise look held for its slot, and the
    /// receiver would ask for a whole run of frames it already has.
    fn see_earlier_landings(&mut self, now: u64) -> io::Result<()> {
        let Some(cursor) = self.placing.as_ref().map(|side| side.table.cursor()) else {
            return Ok(());
        };
        // The kernel publishes redirected frames in the receive ring at the end of the poll
        // that passed this one: a few rounds at most.
        for _ in 0..MAX_LANDING_ROUNDS {
            if self
                .placing
                .as_ref()
                .is_none_or(|side| side.runs.taken() >= cursor)
            {
                break;
            }
            self.take_landings(now)?;
        }
        Ok(())
    }

    /// Frames that landed where the station's fill slots pointed.
    fn take_landings(&mut self, now: u64) -> io::Result<()> {
        let Some(side) = self.placing.as_mut() else {
            return Ok(());
        };
        let mut landed = [(0usize, 0usize, false); RECEIVE_BATCH];
        let mut count = 0;
        side.xsk
            .take_landed(RECEIVE_BATCH as u32, |at, len, continues| {
                landed[count] = (at, len, continues);
                count += 1;
            });
        for &(at, len, continues) in &landed[..count] {
            let side = self.placing.as_mut().expect("checked above");
            let frame = match side.runs.land(at, len, continues) {
                Ok(Some(frame)) => frame,
                Ok(None) => continue,
                Err(error) => {
                    self.desyncs += 1;
                    return Err(io::Error::other(format!(
                        "{error}: the placing filter's cursor and the kernel disagree"
                    )));
                }
            };
            // The filter cleared the record of the frame's first address; the rest of a void
            // run it filled still hold theirs, which must not outlive it.
            for position in frame.position + 1..frame.position + u64::from(frame.addresses) {
                side.table.clear(position);
            }
            let kept = side.table.kept_headers(frame.position);
            let Some(slot) = self
                .core
                .station_mut()
                .next_device_landing(frame.len as u32)
            else {
                self.desyncs += 1;
                return Err(io::Error::other(
                    "a landing with no fill slot posted for it",
                ));
            };
            if frame.len < HEADERS_LEN {
                self.desyncs += 1;
                return Err(io::Error::other("a landing shorter than its headers"));
            }
            let source = SocketAddrV4::new(
                Ipv4Addr::from(<[u8; 4]>::try_from(&kept[KEPT_SOURCE_IP]).expect("4 bytes")),
                u16::from_be_bytes(kept[KEPT_SOURCE_PORT].try_into().expect("2 bytes")),
            );
            let landing = Landing::Region {
                kept: &kept[HEADERS_LEN..],
                frame_len: frame.len - HEADERS_LEN,
            };
            if self.core.take_landed(now, source, slot, landing).is_err() {
                self.desyncs += 1;
                return Err(io::Error::other("a landing does not match its fill slot"));
            }
        }
        Ok(())
    }

    /// Fill addresses to the kernel and the filter, then frames to the wire.
    fn flush_outputs(&mut self) {
        self.post_fills();
        self.rewrite_voided();
        self.transmit();
    }

    fn post_fills(&mut self) {
        let geometry = self.core.station().config().geometry;
        let Some(side) = self.placing.as_mut() else {
            return;
        };
        let before = side.runs.len();
        while let Some(Posted { slot, region }) = self.core.station_mut().poll_fill() {
            // The station posts ordinary chunks only when configured with some (a simulated
            // device's); this socket's other frames go to the kernel.
            let (Slot::Placement { index, .. }, Some(region), LmMemory::Umem(regions)) =
                (slot, region, self.core.station_mut().regions())
            else {
                debug_assert!(false, "only placement slots are posted here");
                continue;
            };
            let address =
                (regions.start(region) + geometry.landing_offset(index) - KERNEL_HEADROOM) as u64;
            let run = Run {
                address,
                addresses: slot.addresses(BUFFER_BYTES as u32),
            };
            for piece in 0..u64::from(run.addresses) {
                let room = side.xsk.post_fill(address + piece * BUFFER_BYTES as u64);
                assert!(room, "the station posts at most the fill ring's size");
            }
            side.runs.post(run);
        }
        if side.runs.len() == before {
            return;
        }
        // Addresses first, then their records: a record the filter sees has its whole run. One
        // publish for the batch: a publish (and record) a run, simpler, made the LM socket
        // slower (`nicmsg bench lm --netns`, three alternations: 742-798 against 823-829 MB/s
        // at 65,507 B, 890-919 against 924-941 at 1 MiB), the kernel's side of the ring
        // seeing the producer move once a slot.
        side.xsk.publish_fill();
        // The station's slots not yet seen landed are the runs, in the same order.
        let new_runs = self
            .core
            .station()
            .fill_slots()
            .zip(side.runs.runs())
            .skip(before);
        for (slot, (position, run)) in new_runs {
            // The filter moves past a run at once: only its first address has a record.
            for continued in 1..u64::from(run.addresses) {
                side.table.clear(position + continued);
            }
            side.table.record(position, slot);
        }
    }

    /// Placement slots the station gave up (their transfer ended early) become void ones for
    /// the filter too, so any frame that fits drains them and the queue moves on. Every
    /// address of a void run gets a record, for the rest of the run from there: a shorter
    /// frame may take the run's start.
    fn rewrite_voided(&mut self) {
        let Some(side) = self.placing.as_mut() else {
            return;
        };
        if !self.core.station_mut().take_voided() {
            return;
        }
        let cursor = side.table.cursor();
        for (slot, (first, run)) in self.core.station().fill_slots().zip(side.runs.runs()) {
            let &Slot::Void {
                transfer,
                index,
                capacity,
                skip,
            } = slot
            else {
                continue;
            };
            for piece in 0..run.addresses {
                let position = first + u64::from(piece);
                let before = piece * BUFFER_BYTES as u32;
                if position < cursor || before >= capacity {
                    continue;
                }
                let rest = Slot::Void {
                    transfer,
                    index,
                    capacity: capacity - before,
                    skip: skip + before,
                };
                side.table.record(position, &rest);
                if side.table.cursor() > position {
                    // The filter took the position meanwhile, perhaps before this write: its
                    // record must not outlive it.
                    side.table.clear(position);
                }
            }
        }
    }

    /// Frames to the wire: through the transmit ring where the route and the frame allow,
    /// else through the kernel's socket; then one wake-up of the kernel for the ring's batch.
    fn transmit(&mut self) {
        self.reclaim_ring();
        let mut queued = false;
        self.ring_full = false;
        while self.ring_has_room(&mut queued) {
            let Some((address, frame)) = self.core.poll_transmit() else {
                break;
            };
            if self.routes.len() >= MAX_ROUTES && !self.routes.contains_key(&address) {
                self.routes.clear();
            }
            let ring_side = self.placing.as_ref().filter(|_| self.send_area.is_some());
            let route = self
                .routes
                .entry(address)
                .or_insert_with(|| first_route(ring_side, self.local, address));
            let route = refresh_route(route, self.placing.as_ref(), address);
            let ring = match (route, self.placing.as_mut()) {
                (Route::Ring(template), Some(side)) => {
                    self.identification = self.identification.wrapping_add(1);
                    queue_on_ring(side, &template, frame, self.identification, &mut self.sent)
                }
                _ => false,
            };
            queued |= ring;
            if !ring {
                self.sent.kernel_frames += 1;
                // A full socket buffer or an unreachable peer loses the frame like the
                // network would; the station sends again what matters.
                let _ = self.udp.send_to(&frame[HEADERS_LEN..], address);
            }
        }
        if queued {
            self.flush_ring();
        }
    }

    /// Whether the transmit ring can take the next frame, after waking the kernel to send
    /// what it holds if it cannot. Frames wait in the station while the ring is full
    /// (`ring_full`, and [`wait`](Self::wait) does not sleep): sent by `sendto` instead, they
    /// would overtake the ring's frames, each would miss its fill slot at the receiver, and
    /// the receiver would drop it and ask for a window again.
    fn ring_has_room(&mut self, queued: &mut bool) -> bool {
        let Some(side) = self.placing.as_mut() else {
            return true;
        };
        if side.xsk.can_queue() {
            return true;
        }
        if std::mem::take(queued) {
            let _ = side.xsk.flush();
        }
        if side.xsk.can_queue() {
            return true;
        }
        self.ring_full = true;
        false
    }

    /// Wakes the kernel to send the ring's frames; a socket that cannot send any more loses
    /// them like the network would (the station sends again what matters).
    fn flush_ring(&mut self) {
        if let Some(side) = self.placing.as_mut() {
            let _ = side.xsk.flush();
            side.xsk.reclaim_sent();
        }
    }

    /// Takes what the kernel finished from the completion ring; returns the frames from the
    /// sending memory still unfinished.
    fn reclaim_ring(&mut self) -> u32 {
        let Some(side) = self.placing.as_mut() else {
            return 0;
        };
        if side.xsk.frames_in_flight() > 0 && side.xsk.has_unsent() {
            let _ = side.xsk.flush();
        }
        side.xsk.reclaim_sent();
        side.xsk.frames_in_flight()
    }
}

/// The route to `peer` at opening: the ring for a peer on the placing socket's link whose
/// Ethernet address is resolved (or will be), the kernel's socket for the others and for
/// every peer of a socket without sending memory (`placing` `None`), whose frames all go by
/// `sendto`.
fn first_route(placing: Option<&PlacingSide>, local: SocketAddrV4, peer: SocketAddrV4) -> Route {
    match placing {
        Some(side) if side.interface.on_link(*peer.ip()) && peer.ip() != local.ip() => {
            Route::Unresolved {
                retry_at: Instant::now(),
                interval: FIRST_RESOLVE_INTERVAL,
            }
        }
        _ => Route::Kernel,
    }
}

/// Reads the neighbour table for a peer not yet resolved whose retry time has come.
fn refresh_route(route: &mut Route, placing: Option<&PlacingSide>, peer: SocketAddrV4) -> Route {
    let (Route::Unresolved { retry_at, interval }, Some(side)) = (*route, placing) else {
        return *route;
    };
    let now = Instant::now();
    if now < retry_at {
        return *route;
    }
    *route = match neighbours::ethernet_address(*peer.ip(), &side.interface.name) {
        Ok(Some(mac)) => {
            let from = LinkStation {
                mac: side.interface.mac,
                addr: side.local,
            };
            Route::Ring(HeaderTemplate::new(&from, &LinkStation { mac, addr: peer }))
        }
        Ok(None) => Route::Unresolved {
            retry_at: now + interval,
            interval: (interval * 2).min(LONGEST_RESOLVE_INTERVAL),
        },
        // No neighbour table to read (a restricted /proc): the kernel's socket for good.
        Err(_) => Route::Kernel,
    };
    *route
}

/// Puts `frame` (link headers first) on the transmit ring: a frame in the sending memory as
/// it lies, a control frame copied into a transmit chunk. False if it must go another way (a
/// heap buffer's frame, or a full ring).
fn queue_on_ring(
    side: &mut PlacingSide,
    template: &HeaderTemplate,
    frame: &mut [u8],
    identification: u16,
    sent: &mut SendCounts,
) -> bool {
    let udp_payload = frame.len() - HEADERS_LEN;
    if let Some(address) = side.xsk.sending_address(frame) {
        template.write(frame, udp_payload, identification);
        if !side.xsk.queue_frame(address, frame.len()) {
            return false;
        }
        sent.ring_frames += 1;
        return true;
    }
    if frame.len() > MAX_HEADER_LEN {
        return false;
    }
    let Some((chunk, bytes)) = side.xsk.tx_chunk() else {
        return false;
    };
    bytes[..frame.len()].copy_from_slice(frame);
    template.write(bytes, udp_payload, identification);
    side.xsk.queue_send(chunk, frame.len());
    sent.ring_controls += 1;
    true
}

/// Opens the AF_XDP socket on the interface holding `local`'s address and attaches the
/// placing filter for `local`'s port.
fn open_placing(
    local: SocketAddrV4,
    (bytes, sending_bytes): (usize, usize),
    scatter_gather: bool,
) -> io::Result<PlacingSide> {
    let interface = Interface::with_address(*local.ip())?.ok_or_else(|| {
        invalid("no Ethernet interface holds the address (AF_XDP placement needs one)")
    })?;
    let mode = ReceiveMode::Placing {
        bytes,
        sending_bytes,
        scatter_gather,
    };
    let xsk = XskSocket::open_with(interface.index, 0, mode, Binding::ZeroCopyElseCopy).map_err(
        |error| match error.raw_os_error() {
            Some(libc::EINVAL | libc::EOPNOTSUPP) if scatter_gather => io::Error::new(
                error.kind(),
                format!(
                    "{error}: frames longer than an AF_XDP chunk need a socket bound with \
                     scatter-gather (XDP_USE_SG, kernel 6.6 or later); place at an MTU of \
                     {} or less, or receive by copy",
                    MAX_FRAME_BYTES - ETHER_LEN
                ),
            ),
            _ => error,
        },
    )?;
    let map = SocketMap::create(1)?;
    map.insert(0, xsk.fd())?;
    let passed = Counter::create()?;
    let table = PlacingTable::create()?;
    let program = Program::load(
        &placing_program(&PlacingSteering {
            ip: *local.ip(),
            port: local.port(),
            sockets_map_fd: map.fd(),
            queue: 0,
            table_fd: table.fd(),
            passed_counter_fd: passed.fd(),
            scatter_gather,
        }),
        "nicmsg_lm",
    )?;
    // Native: the filter's cursor needs one queue's frames one at a time.
    let link = program.attach(interface.index, AttachMode::Native)?;
    Ok(PlacingSide {
        _link: link,
        _program: program,
        _map: map,
        table,
        passed,
        xsk,
        runs: FillRuns::default(),
        local,
        interface,
    })
}

/// Whether frames of `udp_payload` bytes are longer than one AF_XDP buffer, so the placing
/// socket needs scatter-gather.
fn spans_buffers(udp_payload: usize) -> bool {
    HEADERS_LEN + udp_payload > BUFFER_BYTES
}

/// One datagram if one is there, without blocking (the socket itself blocks, so sends wait
/// for buffer room instead of failing).
fn receive_nonblocking(
    udp: &UdpSocket,
    buffer: &mut [u8],
) -> io::Result<Option<(usize, SocketAddr)>> {
    // SAFETY: an all-zero sockaddr_storage is a valid value (plain integers).
    let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut address_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the buffer and the address storage are valid for the lengths passed.
    let len = unsafe {
        libc::recvfrom(
            udp.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            libc::MSG_DONTWAIT,
            std::ptr::from_mut(&mut address).cast(),
            &mut address_len,
        )
    };
    if len < 0 {
        let error = io::Error::last_os_error();
        return match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            // An ICMP refusal of an earlier send: the station's retries deal with the peer.
            io::ErrorKind::ConnectionRefused => Ok(None),
            _ => Err(error),
        };
    }
    if address.ss_family as i32 != libc::AF_INET {
        return Ok(Some((len as usize, SocketAddr::from(([0, 0, 0, 0], 0)))));
    }
    // SAFETY: the kernel wrote an IPv4 address (checked just above).
    let v4: libc::sockaddr_in = unsafe { std::ptr::read(std::ptr::from_ref(&address).cast()) };
    let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
    Ok(Some((
        len as usize,
        SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(v4.sin_port))),
    )))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

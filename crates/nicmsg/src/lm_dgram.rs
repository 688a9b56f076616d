//! Datagram sockets over LM's zero-copy path: the socket-like API of [`crate::dgram`] (reliable
//! datagrams addressed by IP address and port, no launcher or ranks) on an LM socket
//! (`nicmsg_xdp::LmSocket` opened by address), where a datagram of two frames or more is placed
//! by in-place defragmentation when its receiver admits it, and lent to the application where
//! it landed.
//!
//! ```no_run
//! use nicmsg::lm_dgram::LmDgramSocket;
//! let mut server = LmDgramSocket::bind("10.0.0.1:7000")?;
//! loop {
//!     let datagram = server.recv_lent()?; // where the NIC wrote it: no copy in user space
//!     let (from, bytes) = (datagram.from(), datagram.to_vec());
//!     drop(datagram); // the region goes back to the socket
//!     server.send_to(&bytes, from)?;
//! }
//! # Ok::<(), nicmsg::Error>(())
//! ```
//!
//! Datagrams are not ordered among themselves unless each is waited for before the next is
//! sent ([`LmDgramSocket::send_to`] waits; [`LmDgramSocket::isend_buffer_to`] does not).
//!
//! A sender fills a buffer with header holes in place ([`LmDgramSocket::send_buffer`], then
//! `HoleBuffer::write_at` or `pieces_mut`) and hands it over with
//! [`send_buffer_to`](LmDgramSocket::send_buffer_to), or lets [`send_to`](LmDgramSocket::send_to)
//! copy a slice into one. Every datagram arrives once, whole, in one piece, or its send fails
//! with an error (its receiver stopped answering, restarted, or forgot the conversation).
//!
//! Progress is made inside the socket's calls, on the caller's thread (there is no engine
//! thread): a server waits in `recv_from`, a client in `send_to`. Placing needs an IPv4
//! address of an Ethernet interface and the right to attach an XDP program (root, or CAP_BPF
//! and CAP_NET_ADMIN); elsewhere (loopback, no privilege) the socket receives every datagram by
//! copy through its kernel UDP socket, and [`LmDgramSocket::places`] says which runs.

use std::collections::VecDeque;
use std::net::{SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::time::Duration;

use nicmsg_lm::open::{OpenEvent, OpenSendError, OpenSendId, OpenStats};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{Received, RegionId, SendError, SendFailed};
use nicmsg_xdp::{LmOpenConfig, LmSocket, LmSocketStats};

use crate::Error;

/// The largest datagram: what a receiver's default placing memory holds in one region, and
/// far below what one received by copy may take (`nicmsg_lm::station::MAX_ONE_COPY_BYTES`).
pub const MAX_LM_DATAGRAM_BYTES: usize = 64 << 20;

/// Memory for placed datagrams unless told otherwise: the largest datagram, a region of a few
/// smaller ones lent at the same time, and the margin a region needs before its first frame.
pub const DEFAULT_PLACING_BYTES: usize = MAX_LM_DATAGRAM_BYTES + (8 << 20);

/// Memory for send buffers unless told otherwise: the largest datagram and its header holes
/// (90 bytes a frame of 1,382 at MTU 1500), whose frames leave through the AF_XDP transmit
/// ring; a larger buffer, or one made while the memory is lent, is made on the heap and sent
/// by `sendto`.
pub const DEFAULT_SENDING_BYTES: usize = MAX_LM_DATAGRAM_BYTES + MAX_LM_DATAGRAM_BYTES / 8;

/// The number every frame of these sockets carries (a job number of its own, so that frames
/// of nicmsg's other sockets on the same port are told apart and dropped).
pub const LM_DGRAM_JOB: u32 = 0x4c4d_4447;

/// Datagrams received and not taken yet: each holds a placed region or a buffer, so an
/// application that stops taking them stops the socket placing (it runs out of regions) and
/// then receiving by copy (the station's copy memory is bounded): the bound is a safeguard.
const MAX_WAITING: usize = 4096;

/// How long a wait spins before it sleeps: as the engine's waits (`NICMSG_SPIN_US`), longer
/// than a round trip on a local link, short beside a computation.
const SPIN: Duration = Duration::from_micros(50);

/// Finished sends kept for [`LmDgramSocket::wait_sent`]: far more than the station has in
/// flight (64); the oldest of a program that never waits are forgotten past it.
pub const MAX_FINISHED: usize = 4096;

/// The longest sleep of a wait between turns: a turn also runs timers, and a socket whose
/// frames wait for room on the transmit ring does not sleep at all.
const TURN_WAIT: Duration = Duration::from_millis(5);

/// How an LM datagram socket is opened.
#[derive(Debug, Clone, Copy)]
pub struct LmDgramOptions {
    /// Peers kept at once; a quiet peer's slot is reused (as `NICMSG_DGRAM_PEERS`).
    pub peers: u32,
    /// The link's MTU: frames are one UDP datagram of it (1500, or 9000 with scatter-gather on
    /// kernel 6.6 and later). Every socket that talks to this one must use the same.
    pub mtu: usize,
    /// Try to place (an AF_XDP socket and the placing filter on the interface); if that fails,
    /// receive by copy. With `required`, fail instead.
    pub place: bool,
    pub required: bool,
    pub placing_bytes: usize,
    pub sending_bytes: usize,
}

impl Default for LmDgramOptions {
    fn default() -> Self {
        Self {
            peers: crate::dgram::DEFAULT_PEERS,
            mtu: 1500,
            place: true,
            required: false,
            placing_bytes: DEFAULT_PLACING_BYTES,
            sending_bytes: DEFAULT_SENDING_BYTES,
        }
    }
}

/// A reliable datagram socket over LM (see the module documentation). One thread drives it;
/// it may be moved to another thread.
pub struct LmDgramSocket {
    socket: LmSocket,
    /// Datagrams received and not taken, oldest first.
    waiting: VecDeque<(SocketAddr, Received)>,
    /// Sends finished and not waited for yet, oldest first.
    finished: VecDeque<Finished>,
    /// Regions of lent datagrams given back, released at the next call (a lent datagram
    /// borrows the socket's memory, so it cannot release its region itself).
    given_back: Vec<RegionId>,
    places: bool,
    /// This socket's number among the process's sockets: a datagram taken out of one
    /// ([`LmDatagram`]) names its region by index, which another socket must not free.
    id: u64,
}

/// The next socket's number ([`LmDgramSocket::id`]).
static NEXT_SOCKET: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl LmDgramSocket {
    /// Binds to `address` (an IPv4 address and a port) with the default options.
    pub fn bind(address: impl ToSocketAddrs) -> Result<Self, Error> {
        Self::bind_with(address, LmDgramOptions::default())
    }

    pub fn bind_with(address: impl ToSocketAddrs, options: LmDgramOptions) -> Result<Self, Error> {
        let local = ipv4(address)?;
        let udp_payload = options
            .mtu
            .checked_sub(28)
            .filter(|_| (576..=9000).contains(&options.mtu))
            .ok_or_else(|| Error::Config(format!("MTU {} outside 576..=9000", options.mtu)))?;
        let config = |placing_bytes: usize| LmOpenConfig {
            local,
            capacity: options.peers,
            job: LM_DGRAM_JOB,
            udp_payload,
            placing_bytes,
            sending_bytes: if placing_bytes > 0 {
                options.sending_bytes
            } else {
                0
            },
        };
        let placing = options.place && options.placing_bytes > 0;
        let (socket, places) = match LmSocket::open_by_address(config(if placing {
            options.placing_bytes
        } else {
            0
        })) {
            Ok(socket) => (socket, placing),
            Err(error) if placing && !options.required => {
                tracing::info!(%local, %error, "LM datagram socket: not placing, receiving by copy");
                (LmSocket::open_by_address(config(0))?, false)
            }
            Err(error) => return Err(error.into()),
        };
        Ok(Self {
            socket,
            waiting: VecDeque::new(),
            finished: VecDeque::new(),
            given_back: Vec::new(),
            places,
            id: NEXT_SOCKET.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The address peers send to.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.socket.local_addr())
    }

    /// Whether datagrams to this socket are placed (an AF_XDP socket with the placing filter
    /// runs), or all received by copy.
    pub fn places(&self) -> bool {
        self.places
    }

    /// A zeroed send buffer for a datagram of `len` bytes, for the application to fill in
    /// place (`write_at`, `pieces_mut`); in the memory the transmit ring sends from while
    /// there is room. Give it back by sending it; a buffer that comes back from
    /// [`send_buffer_to`](Self::send_buffer_to) may be filled and sent again.
    pub fn send_buffer(&mut self, len: usize) -> Result<HoleBuffer, Error> {
        if len > MAX_LM_DATAGRAM_BYTES {
            return Err(Error::BadBuffer(
                "datagram longer than MAX_LM_DATAGRAM_BYTES",
            ));
        }
        self.socket
            .send_buffer(len)
            .map_err(|error| Error::Config(error.to_string()))
    }

    /// Sends the datagram in `buffer` to `to` and waits until it is delivered. The buffer
    /// comes back either way, to be filled and sent again (but for a socket that broke, whose
    /// station keeps it: an empty one comes back).
    pub fn send_buffer_to(
        &mut self,
        buffer: HoleBuffer,
        to: impl ToSocketAddrs,
    ) -> (HoleBuffer, Result<(), Error>) {
        match self.isend_buffer_to(buffer, to) {
            Ok(id) => self.wait_sent(id),
            Err(unsent) => (unsent.buffer, Err(unsent.error)),
        }
    }

    /// Starts sending the datagram in `buffer` to `to` and returns at once, but while the
    /// station has no room for another send (64 in flight, or 32 to one receiver: it then
    /// makes progress until one finishes). Take its outcome and buffer with
    /// [`wait_sent`](Self::wait_sent); sends whose outcome nobody takes are forgotten past
    /// [`MAX_FINISHED`] finished ones. Datagrams in flight at once may arrive in any order
    /// (each is placed or copied on its own, as UDP's datagrams are not ordered); one sent
    /// after another was delivered arrives after it.
    pub fn isend_buffer_to(
        &mut self,
        buffer: HoleBuffer,
        to: impl ToSocketAddrs,
    ) -> Result<LmSendId, Box<LmUnsent>> {
        let to = match ipv4(to) {
            Ok(to) => to,
            Err(error) => return Err(Box::new(LmUnsent { error, buffer })),
        };
        let mut buffer = buffer;
        loop {
            match self.socket.send_to(to, buffer) {
                Ok(id) => return Ok(LmSendId(id)),
                Err((OpenSendError::Station(SendError::Busy), back)) => buffer = back,
                Err((error, buffer)) => {
                    let error = refusal(error);
                    return Err(Box::new(LmUnsent { error, buffer }));
                }
            }
            if let Err(error) = self.turn() {
                return Err(Box::new(LmUnsent { error, buffer }));
            }
        }
    }

    /// Waits until the send `id` ([`isend_buffer_to`](Self::isend_buffer_to)) is delivered
    /// or has failed; its buffer comes back either way (an empty one if the socket broke,
    /// or if the send's outcome was forgotten: never waited for, past [`MAX_FINISHED`]).
    pub fn wait_sent(&mut self, id: LmSendId) -> (HoleBuffer, Result<(), Error>) {
        loop {
            if let Some(at) = self.finished.iter().position(|sent| sent.id == id.0) {
                let sent = self.finished.remove(at).expect("found");
                let address = SocketAddr::V4(sent.to);
                let outcome = sent
                    .outcome
                    .map_err(|_| Error::AddressUnreachable { address });
                return (sent.buffer, outcome);
            }
            let pending = self.socket.is_sending(id.0);
            let turned = if pending { self.turn() } else { Ok(()) };
            if !pending || turned.is_err() {
                let empty = HoleBuffer::new(self.socket.geometry(), 0)
                    .expect("an empty buffer fits any geometry");
                let error = turned.err().unwrap_or(Error::BadBuffer(
                    "no such send: its outcome was taken already, or forgotten",
                ));
                return (empty, Err(error));
            }
        }
    }

    /// Sends `bytes` to `to` (copied into a send buffer) and waits until delivered.
    pub fn send_to(&mut self, bytes: &[u8], to: impl ToSocketAddrs) -> Result<(), Error> {
        let buffer = self.send_buffer_with(bytes)?;
        self.send_buffer_to(buffer, to).1
    }

    /// Starts sending `bytes` to `to` (copied into a send buffer) and returns at once, as
    /// [`isend_buffer_to`](Self::isend_buffer_to) does; [`wait_sent`](Self::wait_sent) takes
    /// its outcome.
    pub fn isend_to(&mut self, bytes: &[u8], to: impl ToSocketAddrs) -> Result<LmSendId, Error> {
        let buffer = self.send_buffer_with(bytes)?;
        self.isend_buffer_to(buffer, to)
            .map_err(|unsent| unsent.error)
    }

    /// A send buffer holding a copy of `bytes`.
    fn send_buffer_with(&mut self, bytes: &[u8]) -> Result<HoleBuffer, Error> {
        let mut buffer = self.send_buffer(bytes.len())?;
        buffer
            .write_at(0, bytes)
            .map_err(|_| Error::BadBuffer("the send buffer is shorter than the datagram"))?;
        Ok(buffer)
    }

    /// Waits for the next datagram from anyone and copies it into `buffer`; returns its length
    /// and sender. A datagram longer than `buffer` is consumed and reported as
    /// [`Error::Truncated`] with its length (nothing written).
    pub fn recv_from(&mut self, buffer: &mut [u8]) -> Result<(usize, SocketAddr), Error> {
        let datagram = self.recv_lent()?;
        let (len, from) = (datagram.len(), datagram.from());
        if len > buffer.len() {
            return Err(Error::Truncated {
                source_rank: 0,
                tag: 0,
                message_len: len as u64,
                buffer_len: buffer.len() as u64,
            });
        }
        nicmsg_proto::copy_bytes(&mut buffer[..len], &datagram);
        Ok((len, from))
    }

    /// Waits for the next datagram from anyone and lends it where it was received: a placed
    /// datagram in the region the NIC (or, in AF_XDP's copy mode, the kernel) wrote it to, with
    /// no byte copied in user space; one received by copy in its buffer. Dropping the
    /// [`LmLent`] gives the region back.
    pub fn recv_lent(&mut self) -> Result<LmLent<'_>, Error> {
        let LmDatagram { from, received, .. } = self.take_next()?;
        let Self {
            socket, given_back, ..
        } = self;
        let (bytes, region) = match received {
            Received::Placed { region, range } => {
                (Bytes::Region(&socket.region(region)[range]), Some(region))
            }
            Received::Copied(bytes) => (Bytes::Owned(bytes), None),
        };
        Ok(LmLent {
            from,
            bytes,
            region,
            given_back,
        })
    }

    /// Waits for the next datagram and takes it out of the socket, for a caller that cannot
    /// hold a borrow of the socket meanwhile (the C ABI): its bytes through
    /// [`bytes_of`](Self::bytes_of), its region back with [`give_back`](Self::give_back).
    pub fn take_next(&mut self) -> Result<LmDatagram, Error> {
        while self.waiting.is_empty() {
            self.turn()?;
        }
        let (from, received) = self.waiting.pop_front().expect("one is waiting");
        Ok(LmDatagram {
            from,
            received,
            socket: self.id,
        })
    }

    /// The bytes of a datagram taken from this socket with [`take_next`](Self::take_next)
    /// (empty for one taken from another socket, whose region this one does not have).
    pub fn bytes_of<'a>(&'a mut self, datagram: &'a LmDatagram) -> &'a [u8] {
        match &datagram.received {
            Received::Placed { .. } if datagram.socket != self.id => &[],
            Received::Placed { region, range } => &self.socket.region(*region)[range.clone()],
            Received::Copied(bytes) => bytes,
        }
    }

    /// A datagram taken from this socket with [`take_next`](Self::take_next) is done with: a
    /// placed one's region goes back to the socket. One taken from another socket is dropped
    /// here without touching this socket's regions (its own socket never gets it back).
    pub fn give_back(&mut self, datagram: LmDatagram) {
        match datagram.received {
            Received::Placed { region, .. } if datagram.socket == self.id => {
                self.socket.release(region)
            }
            _ => {}
        }
    }

    /// Like [`recv_lent`](Self::recv_lent) without waiting: `None` if no datagram is there.
    pub fn try_recv_lent(&mut self) -> Result<Option<LmLent<'_>>, Error> {
        self.recv_lent_timeout(Duration::ZERO)
    }

    /// Like [`recv_lent`](Self::recv_lent), waiting at most `timeout`: `None` if no datagram
    /// came meanwhile.
    pub fn recv_lent_timeout(&mut self, timeout: Duration) -> Result<Option<LmLent<'_>>, Error> {
        let until = std::time::Instant::now() + timeout;
        if self.waiting.is_empty() {
            self.progress()?;
        }
        while self.waiting.is_empty() && std::time::Instant::now() < until {
            self.turn()?;
        }
        if self.waiting.is_empty() {
            return Ok(None);
        }
        self.recv_lent().map(Some)
    }

    /// The socket's counters: placed and copied datagrams and bytes (bytes copied into placed
    /// regions: 0 is the goal), frames sent and resent, and which AF_XDP mode runs.
    pub fn stats(&self) -> LmSocketStats {
        self.socket.stats()
    }

    /// The conversation counters: new peers, restarts, RESETs.
    pub fn peer_stats(&self) -> OpenStats {
        self.socket.open_stats().unwrap_or_default()
    }

    /// Turns of the socket until one takes an event: spinning for [`SPIN`] (an answer on its
    /// way arrives within it, and waking from a sleep costs tens of microseconds), then
    /// sleeping until there is work.
    fn turn(&mut self) -> Result<(), Error> {
        let started = std::time::Instant::now();
        while started.elapsed() < SPIN {
            if self.progress()? {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        self.socket.wait(TURN_WAIT);
        self.progress().map(drop)
    }

    /// One turn without waiting; true if it took an event.
    fn progress(&mut self) -> Result<bool, Error> {
        for region in self.given_back.drain(..) {
            self.socket.release(region);
        }
        self.socket.progress()?;
        let mut took = false;
        while let Some(event) = self.socket.poll_open_event() {
            took = true;
            match event {
                OpenEvent::Received { from, message, .. } => {
                    if self.waiting.len() < MAX_WAITING {
                        self.waiting.push_back((from, message));
                    } else if let Received::Placed { region, .. } = message {
                        // Not taken for too long: dropped (its sender was told it arrived).
                        self.socket.release(region);
                    }
                }
                OpenEvent::Sent {
                    id,
                    to,
                    buffer,
                    outcome,
                } => {
                    if self.finished.len() == MAX_FINISHED {
                        // Never waited for: forgotten, its buffer freed.
                        self.finished.pop_front();
                    }
                    let SocketAddr::V4(to) = to else {
                        continue;
                    };
                    self.finished.push_back(Finished {
                        id,
                        to,
                        outcome,
                        buffer,
                    });
                }
            }
        }
        Ok(took)
    }
}

/// A send started with [`LmDgramSocket::isend_buffer_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LmSendId(OpenSendId);

impl LmSendId {
    /// The number the C ABI hands out for it.
    pub fn as_raw(self) -> u64 {
        self.0 .0
    }

    /// The send numbered `raw` ([`as_raw`](Self::as_raw)); a number no send has is reported
    /// by [`LmDgramSocket::wait_sent`] as no such send.
    pub fn from_raw(raw: u64) -> Self {
        Self(OpenSendId(raw))
    }
}

/// A send refused: why, and the buffer back.
#[derive(Debug)]
pub struct LmUnsent {
    pub error: Error,
    pub buffer: HoleBuffer,
}

/// A send finished and not waited for yet.
struct Finished {
    id: OpenSendId,
    to: SocketAddrV4,
    outcome: Result<(), SendFailed>,
    buffer: HoleBuffer,
}

/// A datagram taken out of its socket ([`LmDgramSocket::take_next`]).
pub struct LmDatagram {
    from: SocketAddr,
    received: Received,
    /// The socket it was taken from ([`LmDgramSocket::id`]).
    socket: u64,
}

impl LmDatagram {
    /// Who sent it.
    pub fn from(&self) -> SocketAddr {
        self.from
    }

    /// Whether it was placed (landed where it is, no byte copied in user space).
    pub fn was_placed(&self) -> bool {
        matches!(self.received, Received::Placed { .. })
    }
}

impl Drop for LmDgramSocket {
    /// Lingers as the engine does (`IdleConfig::lingered_enough`: quiet for 50 ms, at most
    /// 2 s): a peer whose last datagram's DELIVERED was lost sends again within its retry
    /// interval (2 ms, doubling), and must be answered, or its send fails after its silence
    /// limit although the datagram was taken.
    fn drop(&mut self) {
        let idle = nicmsg_engine::runner::IdleConfig::default();
        let nanos = |since: std::time::Instant| since.elapsed().as_nanos() as u64;
        let began = std::time::Instant::now();
        let mut last_change = began;
        let mut seen = *self.socket.station_stats();
        while !idle.lingered_enough(nanos(began), nanos(last_change), self.socket.is_idle()) {
            if self.socket.progress().is_err() {
                return;
            }
            // Events of a closing socket go nowhere: a placed datagram's region is let go.
            while let Some(event) = self.socket.poll_open_event() {
                if let OpenEvent::Received {
                    message: Received::Placed { region, .. },
                    ..
                } = event
                {
                    self.socket.release(region);
                }
            }
            let now = *self.socket.station_stats();
            if now != seen || !self.socket.is_idle() {
                (seen, last_change) = (now, std::time::Instant::now());
            }
            self.socket.wait(Duration::from_millis(1));
        }
    }
}

/// Where a lent datagram's bytes are.
enum Bytes<'a> {
    /// In its placed region.
    Region(&'a [u8]),
    Owned(Vec<u8>),
}

/// A received datagram, lent where it arrived ([`LmDgramSocket::recv_lent`]); dropping it
/// gives a placed datagram's region back (to the socket's next call).
pub struct LmLent<'a> {
    from: SocketAddr,
    bytes: Bytes<'a>,
    region: Option<RegionId>,
    given_back: &'a mut Vec<RegionId>,
}

impl LmLent<'_> {
    /// Who sent it.
    pub fn from(&self) -> SocketAddr {
        self.from
    }

    /// Whether it was placed (landed where it is, no byte copied in user space).
    pub fn was_placed(&self) -> bool {
        self.region.is_some()
    }
}

impl std::ops::Deref for LmLent<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Owned(bytes) => bytes,
            Bytes::Region(bytes) => bytes,
        }
    }
}

impl Drop for LmLent<'_> {
    fn drop(&mut self) {
        if let Some(region) = self.region.take() {
            self.given_back.push(region);
        }
    }
}

fn ipv4(address: impl ToSocketAddrs) -> Result<SocketAddrV4, Error> {
    let addresses = address.to_socket_addrs()?;
    addresses
        .filter_map(|address| match address {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(_) => None,
        })
        .next()
        .ok_or_else(|| Error::Config("LM datagram sockets take IPv4 addresses".into()))
}

fn refusal(error: OpenSendError) -> Error {
    match error {
        OpenSendError::TableFull => Error::TableFull {
            table: "peers (LmDgramOptions::peers)",
            limit: 0,
        },
        other => Error::InvalidArgument(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram given back to another socket than its own freed that socket's region of the
    /// same number, which could be lent or under a placement.
    #[test]
    fn a_datagram_is_given_back_only_to_its_own_socket() {
        let options = LmDgramOptions {
            place: false,
            ..LmDgramOptions::default()
        };
        let mut a = LmDgramSocket::bind_with("127.0.0.1:0", options).expect("bind");
        let mut b = LmDgramSocket::bind_with("127.0.0.1:0", options).expect("bind");
        let token = LmDatagram {
            from: b.local_addr(),
            received: Received::Placed {
                region: RegionId(0),
                range: 0..4,
            },
            socket: b.id,
        };
        assert_ne!(a.id, b.id);
        // Read `a`'s region 0 (a socket that receives by copy has none: a panic).
        assert!(a.bytes_of(&token).is_empty(), "another socket's region");
        // Freed `a`'s region 0 (on a placing socket, one lent or under a placement).
        a.give_back(token);
        let copied = LmDatagram {
            from: a.local_addr(),
            received: Received::Copied(vec![1, 2, 3]),
            socket: a.id,
        };
        assert_eq!(
            b.bytes_of(&copied),
            &[1, 2, 3],
            "a copied datagram is its own bytes"
        );
        b.give_back(copied);
    }
}

#[cfg(test)]
mod sends {
    use super::*;

    /// Sends started without waiting are each delivered once, and each reports; their
    /// buffers come back.
    #[test]
    fn datagrams_sent_without_waiting_all_arrive_and_report() {
        let options = LmDgramOptions {
            place: false,
            ..LmDgramOptions::default()
        };
        let mut client = LmDgramSocket::bind_with("127.0.0.1:0", options).expect("bind");
        let server = LmDgramSocket::bind_with("127.0.0.1:0", options).expect("bind");
        let to = server.local_addr();
        let receiver = std::thread::spawn(move || {
            let mut server = server;
            let mut got: Vec<Vec<u8>> = (0..40)
                .map(|_| server.recv_lent().unwrap().to_vec())
                .collect();
            got.sort();
            got
        });
        let mut ids = Vec::new();
        for n in 0..40u8 {
            let len = 1 + usize::from(n) * 700;
            let mut buffer = client.send_buffer(len).expect("a buffer");
            buffer.write_at(0, &vec![n; len]).expect("fits");
            ids.push(client.isend_buffer_to(buffer, to).expect("started"));
        }
        for id in ids {
            let (buffer, sent) = client.wait_sent(id);
            sent.expect("delivered");
            assert!(!buffer.is_empty(), "the buffer comes back");
        }
        let (_, again) = client.wait_sent(LmSendId(OpenSendId(1)));
        assert!(again.is_err(), "an outcome is taken once");
        let mut expected: Vec<Vec<u8>> = (0..40u8)
            .map(|n| vec![n; 1 + usize::from(n) * 700])
            .collect();
        expected.sort();
        assert_eq!(receiver.join().unwrap(), expected);
    }
}

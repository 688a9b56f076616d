//! A socket-like API: reliable datagrams addressed by IP address and port, as LM offered
//! socket-coded applications. No launcher, no ranks: a server binds, any client sends.
//!
//! ```no_run
//! use nicmsg::dgram::DgramSocket;
//! let server = DgramSocket::bind("0.0.0.0:7000")?;
//! let mut buffer = vec![0u8; 1 << 20];
//! loop {
//!     let (len, from) = server.recv_from(&mut buffer)?;
//!     server.send_to(&buffer[..len], from)?; // echo
//! }
//! # Ok::<(), nicmsg::Error>(())
//! ```
//!
//! Every datagram arrives once, whole, in the order sent per sender, or its send fails with an
//! error (the peer stopped answering, or restarted): the engine retransmits, acknowledges and
//! detects dead peers as for every nicmsg message, on its own thread. Datagrams of up to
//! [`MAX_DATAGRAM_BYTES`] go as one message (eager up to the eager limit, rendezvous beyond,
//! straight into the receive buffer when it is posted first).
//!
//! Peers come and go: the socket keeps state for at most `capacity` peers at once (default
//! [`DEFAULT_PEERS`], `NICMSG_DGRAM_PEERS`), and a peer's slot is reused once it has been quiet
//! and nothing is pending with it. A peer that restarts at the same address is a new peer: what
//! was pending with its old life fails as unreachable.

use crate::comm::Comm;
use crate::{Error, Options, Request, Source, Status, TagMatch};
use std::cell::RefCell;
use std::net::{SocketAddr, ToSocketAddrs};

/// Largest datagram: one message, received into one buffer, so the bound is what a receiver
/// can be asked to hold at once (and what LM's admitted transfers allow).
pub const MAX_DATAGRAM_BYTES: usize = 1 << 30;

/// Peers a socket keeps state for at once unless `NICMSG_DGRAM_PEERS` says otherwise: each
/// costs its protocol state and a share of the eager pool (8 credits of the eager limit, 32 of
/// 4 KiB and 32 of 256 bytes: address space whose pages are touched only as unexpected
/// messages fill them).
pub const DEFAULT_PEERS: u32 = 64;

/// Buffers a socket keeps for lending once given back ([`DgramSocket::recv_lent`]): enough for
/// an application holding a few datagrams at once; more are allocated and freed.
const LENT_POOL: usize = 4;

/// Largest buffer the lending pool keeps (1 MiB): a larger one, lent for a large datagram, is
/// freed when given back. Kept, four datagrams of up to `MAX_DATAGRAM_BYTES` each, which any
/// sender may announce, held 4 GiB for the socket's life.
const LENT_POOL_MAX_BYTES: usize = 1 << 20;

/// The tag every datagram carries: datagrams have no tags.
const DATAGRAM_TAG: u32 = 0;

/// A reliable datagram socket (see the module documentation). Not shareable between threads,
/// like [`Comm`]; it may be moved to another thread.
pub struct DgramSocket {
    comm: Comm,
    /// Buffers given back by [`Lent`], for the next lending.
    pool: RefCell<Vec<Vec<u8>>>,
}

impl DgramSocket {
    /// Binds to `address` (port 0: any free port), with options from `NICMSG_*`.
    pub fn bind(address: impl ToSocketAddrs) -> Result<Self, Error> {
        Self::bind_with(address, Options::from_env()?)
    }

    /// Binds with explicit options. The watchdog stays off unless `NICMSG_WATCHDOG` (or
    /// `options.watchdog_auto` false) asks for it: a server's receive from anyone waits for
    /// ever by design, and would be reported as a hang.
    pub fn bind_with(address: impl ToSocketAddrs, mut options: Options) -> Result<Self, Error> {
        if options.watchdog_auto {
            options.idle.watchdog_ns = None;
        }
        let address = address
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| Error::Config("no address to bind to".into()))?;
        let capacity = options.dgram_peers;
        let comm = Comm::open(options, address, capacity)?;
        Ok(Self {
            comm,
            pool: RefCell::new(Vec::with_capacity(LENT_POOL)),
        })
    }

    /// The address peers send to.
    pub fn local_addr(&self) -> SocketAddr {
        self.comm
            .local_address()
            .expect("an open communicator is bound")
    }

    /// Sends `buffer` to `to` and waits until it is delivered (or, for a short datagram, until
    /// the engine holds a copy of it; see [`Comm::isend`]).
    pub fn send_to(&self, buffer: &[u8], to: impl ToSocketAddrs) -> Result<(), Error> {
        self.isend_to(buffer, to)?.wait().map(|_| ())
    }

    /// Starts sending `buffer` to `to`; the buffer stays borrowed until the request completes.
    pub fn isend_to<'a>(
        &'a self,
        buffer: &'a [u8],
        to: impl ToSocketAddrs,
    ) -> Result<Request<'a>, Error> {
        self.isend_vectored_to(&[buffer], to)
    }

    /// Sends the concatenation of `pieces` as one datagram (no copy into a staging buffer).
    pub fn isend_vectored_to<'a>(
        &'a self,
        pieces: &[&'a [u8]],
        to: impl ToSocketAddrs,
    ) -> Result<Request<'a>, Error> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        if len > MAX_DATAGRAM_BYTES {
            return Err(Error::BadBuffer("datagram longer than MAX_DATAGRAM_BYTES"));
        }
        let to = resolve(to)?;
        self.comm.isend_to_address(pieces, to, DATAGRAM_TAG)
    }

    /// Waits for the next datagram from anyone and copies it into `buffer`; returns its length
    /// and sender. A datagram longer than `buffer` is consumed and reported as
    /// [`Error::Truncated`] (nothing written), so size buffers with [`peek_from`](Self::peek_from).
    pub fn recv_from(&self, buffer: &mut [u8]) -> Result<(usize, SocketAddr), Error> {
        let status = self.irecv_from(buffer)?.wait()?;
        Ok((status.len as usize, self.sender(&status)))
    }

    /// Starts a receive of the next datagram from anyone; its [`Status`] names the sender in
    /// `address`.
    pub fn irecv_from<'a>(&'a self, buffer: &'a mut [u8]) -> Result<Request<'a>, Error> {
        self.comm.irecv(buffer, Source::Any, TagMatch::Any)
    }

    /// Waits until a datagram is there and says its length and sender without taking it: the
    /// next [`recv_from`](Self::recv_from) gets it (if no other receive is pending).
    pub fn peek_from(&self) -> Result<(usize, SocketAddr), Error> {
        let status = self.comm.probe(Source::Any, TagMatch::Any)?;
        Ok((status.len as usize, self.sender(&status)))
    }

    /// Like [`peek_from`](Self::peek_from), without waiting.
    pub fn try_peek_from(&self) -> Result<Option<(usize, SocketAddr)>, Error> {
        let found = self.comm.iprobe(Source::Any, TagMatch::Any)?;
        Ok(found.map(|status| (status.len as usize, self.sender(&status))))
    }

    /// Receives the next datagram into a buffer the socket lends ([`Lent`], back to the
    /// socket's pool when dropped): the caller copies and sizes nothing. The bytes are written
    /// once, by the engine, into the lent buffer (straight from the network for datagrams
    /// beyond the eager limit, whose receive is posted before their data arrives).
    pub fn recv_lent(&self) -> Result<Lent<'_>, Error> {
        let (len, _) = self.peek_from()?;
        // The length is the sender's word (an RTS may announce up to 2^64 bytes): one longer
        // than any socket sends is not allocated for, which aborted the process, but consumed
        // and reported as `Truncated`, as `recv_from` reports a datagram too long for its
        // buffer (tests/hostile.rs, a_dgram_echo_survives_strangers_blasting_the_server).
        let len = if len > MAX_DATAGRAM_BYTES { 0 } else { len };
        let mut buffer = self.pool.borrow_mut().pop().unwrap_or_default();
        if buffer.len() < len {
            buffer.resize(len, 0);
        }
        let received = self.recv_from(&mut buffer[..len]);
        match received {
            Ok((len, from)) => Ok(Lent {
                socket: self,
                buffer,
                len,
                from,
            }),
            Err(error) => {
                self.give_back(buffer);
                Err(error)
            }
        }
    }

    /// The engine's counters (as `NICMSG_STATS` prints them).
    pub fn stats(&self) -> Result<crate::Snapshot, Error> {
        self.comm.stats()
    }

    fn give_back(&self, buffer: Vec<u8>) {
        let mut pool = self.pool.borrow_mut();
        if pool.len() < LENT_POOL && buffer.capacity() <= LENT_POOL_MAX_BYTES {
            pool.push(buffer);
        }
    }

    fn sender(&self, status: &Status) -> SocketAddr {
        // A datagram to its own address stays inside the endpoint (no address recorded).
        status.address.unwrap_or_else(|| self.local_addr())
    }
}

/// A received datagram in a buffer the socket lent ([`DgramSocket::recv_lent`]); dropping it
/// gives the buffer back.
pub struct Lent<'a> {
    socket: &'a DgramSocket,
    buffer: Vec<u8>,
    len: usize,
    from: SocketAddr,
}

impl Lent<'_> {
    /// Who sent it.
    pub fn from(&self) -> SocketAddr {
        self.from
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buffer[..self.len]
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.socket.give_back(std::mem::take(&mut self.buffer));
    }
}

fn resolve(to: impl ToSocketAddrs) -> Result<SocketAddr, Error> {
    to.to_socket_addrs()?
        .next()
        .ok_or_else(|| Error::Config("the destination resolves to no address".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lending_pool_keeps_no_large_buffer() {
        let socket = DgramSocket::bind("127.0.0.1:0").expect("bind");
        socket.give_back(vec![0; LENT_POOL_MAX_BYTES + 1]);
        assert!(socket.pool.borrow().is_empty(), "a large buffer is freed");
        socket.give_back(vec![0; 4096]);
        assert_eq!(socket.pool.borrow().len(), 1, "a small one is kept");
    }
}

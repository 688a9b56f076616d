#![allow(dead_code)] // each example uses part of it

//! The datagram examples' socket: nicmsg's datagram socket over the engine (the default), or
//! over LM's zero-copy path (`--lm`, `nicmsg::lm_dgram`). Both take the same datagrams, so a
//! server of one kind serves clients of the other only if both sides choose alike: the two
//! speak different frames.

use nicmsg::dgram::DgramSocket;
use nicmsg::lm_dgram::LmDgramSocket;
use nicmsg::Error;
use std::net::SocketAddr;

/// Either socket, boxed: each is a few hundred bytes, and a program has one.
pub enum AnyDgram {
    Engine(Box<DgramSocket>),
    Lm(Box<LmDgramSocket>),
}

impl AnyDgram {
    /// Binds `address`; over LM with `lm` (placing where the address is an Ethernet
    /// interface's and the process may attach XDP programs, else by copy).
    pub fn bind(address: &str, lm: bool) -> Result<Self, Error> {
        Ok(if lm {
            Self::Lm(Box::new(LmDgramSocket::bind(address)?))
        } else {
            Self::Engine(Box::new(DgramSocket::bind(address)?))
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        match self {
            Self::Engine(socket) => socket.local_addr(),
            Self::Lm(socket) => socket.local_addr(),
        }
    }

    /// A line saying which path runs, for the examples' first output.
    pub fn path(&self) -> &'static str {
        match self {
            Self::Engine(_) => "engine",
            Self::Lm(socket) if socket.places() => "LM, placing",
            Self::Lm(_) => "LM, by copy",
        }
    }

    pub fn send_to(&mut self, bytes: &[u8], to: SocketAddr) -> Result<(), Error> {
        match self {
            Self::Engine(socket) => socket.send_to(bytes, to),
            Self::Lm(socket) => socket.send_to(bytes, to),
        }
    }

    /// Sends each of `pieces` to `to` as a datagram of its own: all at once on the engine
    /// (it paces them), one after another over LM (each send waits for its delivery).
    pub fn send_each(&mut self, pieces: &[&[u8]], to: SocketAddr) -> Result<(), Error> {
        match self {
            Self::Engine(socket) => {
                let requests = pieces
                    .iter()
                    .map(|piece| socket.isend_to(piece, to))
                    .collect::<Result<Vec<_>, _>>()?;
                requests
                    .into_iter()
                    .try_for_each(|request| request.wait().map(drop))
            }
            Self::Lm(socket) => pieces
                .iter()
                .try_for_each(|piece| socket.send_to(piece, to)),
        }
    }

    pub fn recv_from(&mut self, buffer: &mut [u8]) -> Result<(usize, SocketAddr), Error> {
        match self {
            Self::Engine(socket) => socket.recv_from(buffer),
            Self::Lm(socket) => socket.recv_from(buffer),
        }
    }

    /// The next datagram, lent to `take` where the socket received it (no copy).
    pub fn with_next<T>(&mut self, take: impl FnOnce(SocketAddr, &[u8]) -> T) -> Result<T, Error> {
        match self {
            Self::Engine(socket) => {
                let datagram = socket.recv_lent()?;
                Ok(take(datagram.from(), &datagram))
            }
            Self::Lm(socket) => {
                let datagram = socket.recv_lent()?;
                Ok(take(datagram.from(), &datagram))
            }
        }
    }

    /// Sends the next datagram back to its sender: from the lent buffer on the engine; over
    /// LM copied once into a send buffer (its frames leave from where it lies, headers in
    /// holes between the pieces).
    pub fn echo_next(&mut self) -> Result<(), Error> {
        match self {
            Self::Engine(socket) => {
                let datagram = socket.recv_lent()?;
                socket.send_to(&datagram, datagram.from())
            }
            Self::Lm(socket) => {
                let (from, buffer) = {
                    let datagram = socket.recv_lent()?;
                    (datagram.from(), datagram.to_vec())
                };
                let mut send = socket.send_buffer(buffer.len())?;
                send.write_at(0, &buffer)
                    .map_err(|_| Error::BadBuffer("the send buffer is too short"))?;
                socket.send_buffer_to(send, from).1
            }
        }
    }
}

//! The systems measured by the in-project patterns, behind one interface: nicmsg, TCP
//! (blocking and busy-polling) and raw busy-polling UDP.
//!
//! The interface is MPI's non-blocking core, reduced to what the papers' loops use: post a send
//! of `len` bytes, post a receive of `len` bytes into one of [`MAX_WINDOW`] receive slots, wait
//! for (or test) everything posted. Messages between the two ranks match in posting order.
//! Each messenger owns its buffers, so a pattern only says how many bytes go where.

mod nicmsg_messenger;
mod tcp;
mod udp;

pub use nicmsg_messenger::NicmsgMessenger;
pub use tcp::{TcpMessenger, TcpWaiting};
pub use udp::{UdpMessenger, IP_UDP_HEADERS};

use crate::BenchError;

/// Most operations of each kind a pattern keeps in flight (windows of `bw`, `msgrate`).
pub const MAX_WINDOW: usize = 64;

/// How long a wait may see no progress at all before it gives up: far above any transfer of a
/// window on a working link, short enough that a dead peer ends the run.
pub const STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// One end of a two-rank benchmark.
pub trait Messenger {
    /// Starts sending `len` bytes to the peer.
    fn post_send(&mut self, len: usize) -> Result<(), BenchError>;
    /// Starts receiving a `len`-byte message from the peer into receive slot `slot`
    /// (`< MAX_WINDOW`, not in use).
    fn post_recv(&mut self, slot: usize, len: usize) -> Result<(), BenchError>;
    /// Blocks until everything posted has completed.
    fn wait_all(&mut self) -> Result<(), BenchError>;
    /// Makes progress once; `true` when everything posted has completed (and is then
    /// forgotten, as after [`Messenger::wait_all`]).
    fn test_all(&mut self) -> Result<bool, BenchError>;

    /// Blocking send.
    fn send(&mut self, len: usize) -> Result<(), BenchError> {
        self.post_send(len)?;
        self.wait_all()
    }

    /// Blocking receive.
    fn recv(&mut self, len: usize) -> Result<(), BenchError> {
        self.post_recv(0, len)?;
        self.wait_all()
    }
}

/// A messenger's memory: one send buffer of the largest size (every send reads its first `len`
/// bytes) and one receive buffer per window slot, grown on first use.
struct Buffers {
    send: Vec<u8>,
    slots: Vec<Vec<u8>>,
}

impl Buffers {
    fn new(max_len: usize) -> Buffers {
        Buffers {
            send: vec![0x5a; max_len.max(1)],
            slots: (0..MAX_WINDOW).map(|_| Vec::new()).collect(),
        }
    }

    /// The bytes of a `len`-byte send.
    fn outgoing(&self, len: usize) -> Result<&[u8], BenchError> {
        self.send.get(..len).ok_or_else(|| {
            BenchError::Usage(format!(
                "send of {len} bytes above the largest size {}",
                self.send.len()
            ))
        })
    }

    /// Receive slot `slot`, at least `len` bytes long; `busy` says whether a posted receive
    /// still uses it (then it must not move).
    fn incoming(&mut self, slot: usize, len: usize, busy: bool) -> Result<&mut [u8], BenchError> {
        if slot >= MAX_WINDOW {
            return Err(BenchError::Usage(format!(
                "receive slot {slot} out of range (at most {MAX_WINDOW} in flight)"
            )));
        }
        if busy {
            return Err(BenchError::Usage(format!("receive slot {slot} is in use")));
        }
        let buffer = &mut self.slots[slot];
        if buffer.len() < len {
            buffer.resize(len, 0);
        }
        Ok(&mut buffer[..len])
    }
}

//! Raw UDP: the practical floor of the kernel path. No reliability, no flow control, no
//! headers: a message is cut into datagrams of at most `datagram` bytes, sent with one `send`
//! each and received in order with non-blocking `recv` calls, spinning (`udp-busy`: datagrams
//! of one link MTU) or sleeping in `poll(2)` (`udp-frag`: datagrams of up to 65,507 bytes that
//! the kernel cuts into IP fragments, LM's "standard UDP"). A lost datagram ends the run with
//! [`BenchError::Lost`] (which is why this is a floor, not a messaging layer).

use std::collections::VecDeque;
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{Buffers, Messenger, Waiting, MAX_WINDOW};
use crate::BenchError;

/// The largest UDP payload over IPv4 (65,535 less the headers): the kernel sends it as IP
/// fragments of one link frame each and reassembles it before the socket sees it.
pub const LARGEST_DATAGRAM: usize = nicmsg_udp::MAX_UDP_PAYLOAD_V4;
/// Longest sleep in `poll(2)` before the loss limit is looked at again.
const POLL_SLICE_MS: i32 = 100;
/// Silence after which a missing datagram is declared lost: far above any gap between the
/// datagrams of a window on a working link.
const LOSS_LIMIT: Duration = Duration::from_secs(2);
/// Socket buffers forced (as root) so that a window of large messages fits in flight.
const SOCKET_BUFFER: usize = 32 << 20;

struct Incoming {
    slot: usize,
    len: usize,
    /// Bytes received so far (a zero-length message is one empty datagram).
    done: usize,
}

/// One connected UDP socket between ranks 0 and 1.
pub struct UdpMessenger {
    socket: UdpSocket,
    datagram: usize,
    waiting: Waiting,
    buffers: Buffers,
    incoming: VecDeque<Incoming>,
}

impl UdpMessenger {
    /// `socket` is bound and connected to the peer; datagrams carry at most `datagram` bytes.
    pub fn new(
        socket: UdpSocket,
        datagram: usize,
        waiting: Waiting,
        max_len: usize,
    ) -> Result<Self, BenchError> {
        socket
            .set_nonblocking(true)
            .map_err(BenchError::io("making the socket non-blocking"))?;
        // Large buffers, forced past the sysctl limits when running as root.
        nicmsg_udp::force_buffer_sizes(socket.as_raw_fd(), SOCKET_BUFFER);
        Ok(Self {
            socket,
            datagram: datagram.clamp(1, LARGEST_DATAGRAM),
            waiting,
            buffers: Buffers::new(max_len),
            incoming: VecDeque::with_capacity(MAX_WINDOW),
        })
    }

    /// Receives what has arrived for the posted receives; `true` if anything did.
    fn receive_some(&mut self) -> Result<bool, BenchError> {
        let mut moved = false;
        while let Some(head) = self.incoming.front_mut() {
            let chunk = (head.len - head.done).min(self.datagram);
            let target = &mut self.buffers.slots[head.slot][head.done..head.done + chunk];
            match self.socket.recv(target) {
                Ok(n) => {
                    moved = true;
                    if n != chunk {
                        return Err(BenchError::OutOfStep {
                            expected: chunk as u64,
                            got: n as u64,
                        });
                    }
                    head.done += n;
                    if head.done == head.len {
                        self.incoming.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BenchError::io("receiving a datagram")(e)),
            }
        }
        Ok(moved)
    }
}

impl Messenger for UdpMessenger {
    fn buffers(&mut self) -> &mut Buffers {
        &mut self.buffers
    }

    fn post_send(&mut self, len: usize) -> Result<(), BenchError> {
        let bytes = self.buffers.outgoing(len)?;
        if len == 0 {
            return send_datagram(&self.socket, &[]);
        }
        for chunk in bytes.chunks(self.datagram) {
            send_datagram(&self.socket, chunk)?;
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: usize, len: usize) -> Result<(), BenchError> {
        let busy = self.incoming.iter().any(|r| r.slot == slot);
        self.buffers.incoming(slot, len, busy)?;
        self.incoming.push_back(Incoming { slot, len, done: 0 });
        Ok(())
    }

    fn wait_all(&mut self) -> Result<(), BenchError> {
        let mut last_progress = Instant::now();
        while !self.incoming.is_empty() {
            if self.receive_some()? {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > LOSS_LIMIT {
                return Err(BenchError::Lost(LOSS_LIMIT));
            } else if self.waiting == Waiting::Blocking {
                let fd = self.socket.as_raw_fd();
                super::sleep_until_ready(fd, libc::POLLIN, POLL_SLICE_MS)?;
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    fn test_all(&mut self) -> Result<bool, BenchError> {
        self.receive_some()?;
        Ok(self.incoming.is_empty())
    }
}

/// Sends one datagram, spinning while the socket buffer is full (the only back-pressure UDP has).
fn send_datagram(socket: &UdpSocket, bytes: &[u8]) -> Result<(), BenchError> {
    loop {
        match socket.send(bytes) {
            Ok(_) => return Ok(()),
            // Send buffer full: the only back-pressure UDP has.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BenchError::io("sending a datagram")(e)),
        }
    }
}

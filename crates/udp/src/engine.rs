//! The engine's view of this transport: `nicmsg_engine::Transport` for [`UdpTransport`],
//! including the speculative header/payload split (a receive plan's payloads land straight in
//! user memory; wrong guesses are put back together before anyone reads them).

use crate::{UdpTransport, RECV_BATCH};
use nicmsg_engine::{Origin, Peeked, PlacementTarget, Received, Transport};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

impl UdpTransport {
    /// Who sent a datagram from `address`: the rank it belongs to, if a peer's, and the address.
    fn origin_of(&self, address: SocketAddr) -> Origin {
        Origin {
            rank: self.peer_of(&address),
            address: Some(address),
        }
    }
}

impl Transport for UdpTransport {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        self.send_batch(frames)
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Origin, &[u8])) -> io::Result<usize> {
        let count = self.recv_batch()?;
        for index in 0..count {
            let (address, bytes) = self.received(index);
            deliver(self.origin_of(address), bytes);
        }
        Ok(count)
    }

    unsafe fn receive_placed(
        &mut self,
        plan: &[PlacementTarget],
        looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
        deliver: &mut dyn FnMut(Origin, Received<'_>) -> bool,
    ) -> io::Result<usize> {
        let planned = &plan[..plan.len().min(RECV_BATCH)];
        // SAFETY: forwarded from this function's contract.
        let count = unsafe { self.recv_batch_placed(planned) }?;
        // First put every wrong guess back together, before any frame is handled: handling a
        // frame writes its payload to its place, which may be where a wrong guess landed.
        for index in 0..count {
            let Some((entry, _, len)) = self.placed(index) else {
                continue;
            };
            if !looks_expected(entry, self.received_head(index), len) {
                // SAFETY: the target is still valid (contract).
                unsafe { self.gather_placed(index) };
            }
        }
        for index in 0..count {
            // The source's address is decoded once, for both.
            let origin = self.origin_of(self.received(index).0);
            if let Some((entry, _, len)) = self.placed(index) {
                let header = self.received_head(index);
                let placed = Received::Placed {
                    slot: entry,
                    header,
                    len,
                };
                if deliver(origin, placed) {
                    continue;
                }
                // SAFETY: as above; refused (not intact): handle it the ordinary way.
                unsafe { self.gather_placed(index) };
            }
            let (_, bytes) = self.received(index);
            deliver(origin, Received::Bytes(bytes));
        }
        Ok(count)
    }

    fn peek(&mut self, head: &mut [u8]) -> Peeked {
        match self.peek_next(head) {
            Ok(Some(peeked)) => Peeked::Datagram {
                origin: self.origin_of(peeked.from),
                frame_len: peeked.frame_len,
                datagram_len: peeked.datagram_len,
                head_len: peeked.head_len,
            },
            Ok(None) => Peeked::Nothing,
            Err(_) => Peeked::Unknown,
        }
    }

    fn receive_one_next(&mut self) {
        self.receive_one_datagram_next();
    }

    fn readable_fds(&self) -> Vec<RawFd> {
        vec![self.fd()]
    }

    fn max_frame(&self) -> usize {
        UdpTransport::max_frame(self)
    }

    /// The kernel verifies the UDP checksum of every datagram before the socket sees it (over
    /// IPv6 it is mandatory; over IPv4 nicmsg's senders always fill it in, as the kernel does
    /// unless told not to), or it never left memory (loopback).
    fn checks_payload(&self) -> bool {
        true
    }

    fn bind_peer(&mut self, rank: u32, address: std::net::SocketAddr) -> io::Result<()> {
        UdpTransport::bind_peer(self, rank, address);
        Ok(())
    }

    fn note_socket_error(&mut self) {
        UdpTransport::note_socket_error(self)
    }

    fn refusals_may_be_queued(&self) -> bool {
        UdpTransport::refusals_may_be_queued(self)
    }

    fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        UdpTransport::take_refused(self, refused)
    }

    fn summary(&self) -> String {
        let s = self.stats();
        format!(
            "transport udp: datagrams sent {}, received {}, receive calls {}, looks ahead {}, \
             received longer than a frame ({} bytes) and dropped {}, dropped on send {}",
            s.datagrams_sent,
            s.datagrams_received,
            s.recv_syscalls,
            s.peeks,
            UdpTransport::max_frame(self),
            s.truncated,
            s.send_errors.total()
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{UdpOptions, UdpTransport};
    use nicmsg_engine::Transport;

    /// A datagram longer than the transport's frames (from a peer with a larger MTU) is dropped
    /// and counted, and `NICMSG_STATS` shows the count, with GRO's large receive slots and
    /// without (the kernel cuts it).
    #[test]
    fn datagrams_longer_than_a_frame_are_counted_in_the_summary() {
        for gro in [false, true] {
            let mut receiver = UdpTransport::bind(UdpOptions {
                bind: "127.0.0.1:0".parse().unwrap(),
                max_frame: 100,
                gro,
                ..UdpOptions::default()
            })
            .expect("bind");
            let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            sender.send_to(&[7u8; 300], receiver.local_addr()).unwrap();
            sender.send_to(&[8u8; 60], receiver.local_addr()).unwrap();
            let mut received = 0;
            for _ in 0..2000 {
                received += receiver.recv_batch().expect("receive");
                if received > 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(received, 1, "the short datagram arrives (gro {gro})");
            assert_eq!(receiver.stats().truncated, 1, "gro {gro}");
            let summary = Transport::summary(&receiver);
            assert!(
                summary.contains("received longer than a frame (100 bytes) and dropped 1"),
                "{summary}"
            );
        }
    }
}

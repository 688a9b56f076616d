//! The UDP transport as the engine's wire backend.

use nicmsg_engine::Transport;
use nicmsg_udp::UdpTransport;
use std::io;
use std::os::fd::RawFd;

pub struct UdpBackend(pub UdpTransport);

impl Transport for UdpBackend {
    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        self.0.send_batch(frames)
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Option<u32>, &[u8])) -> io::Result<usize> {
        let count = self.0.recv_batch()?;
        for index in 0..count {
            let rank = self.0.received_rank(index);
            let (_, bytes) = self.0.received(index);
            deliver(rank, bytes);
        }
        Ok(count)
    }

    fn readable_fd(&self) -> RawFd {
        self.0.fd()
    }

    fn max_frame(&self) -> usize {
        self.0.max_frame()
    }
}

//! The engine's view of this transport: `nicmsg_engine::Transport` for [`XdpTransport`]. Frames
//! come from the AF_XDP ring and from the kernel's UDP socket of the same port (frames the XDP
//! program passed on, and peers on this host); refusals come back to that socket.

use crate::XdpTransport;
use nicmsg_engine::{Origin, PlacementTarget, Received, Transport};
use std::io;
use std::os::fd::RawFd;

impl Transport for XdpTransport {
    fn name(&self) -> &'static str {
        "xdp"
    }

    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        XdpTransport::send(self, frames)
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Origin, &[u8])) -> io::Result<usize> {
        XdpTransport::receive(self, deliver)
    }

    unsafe fn receive_placed(
        &mut self,
        plan: &[PlacementTarget],
        looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
        deliver: &mut dyn FnMut(Origin, Received<'_>) -> bool,
    ) -> io::Result<usize> {
        // The kernel's socket first, with the plan: the plan's targets are for frames not
        // received yet, which a frame from the ring, placed by copying, could otherwise be.
        let mut count = 0;
        if self.kernel_due() {
            // SAFETY: forwarded from this function's contract.
            count = unsafe {
                Transport::receive_placed(self.kernel_socket(), plan, looks_expected, deliver)
            }?;
            self.kernel_read(count);
        }
        // Frames from the ring land in the socket's own memory: nothing to place.
        let from_ring = self.receive_ring(&mut |source, bytes| {
            for frame in Frames(bytes) {
                deliver(source, Received::Bytes(frame));
            }
        })?;
        Ok(count + from_ring)
    }

    fn readable_fds(&self) -> Vec<RawFd> {
        self.fds().to_vec()
    }

    fn max_frame(&self) -> usize {
        XdpTransport::max_frame(self)
    }

    // Frames sent through the ring are refused to the kernel's socket of the same port.
    fn note_socket_error(&mut self) {
        self.kernel_socket().note_socket_error()
    }

    fn refusals_may_be_queued(&self) -> bool {
        self.kernel_socket_ref().refusals_may_be_queued()
    }

    fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        self.kernel_socket().take_refused(refused)
    }

    fn summary(&self) -> String {
        let s = self.stats();
        let kernel = self.socket_statistics().ok();
        format!(
            "transport xdp on {}: frames sent through the ring {}, through the kernel {}; \
             received through the ring {}, through the kernel {} (passed there {}, \
             lost there {}, longer than a frame and dropped there {}), \
             malformed {}, oversize {}, transmit ring full {}, receive ring drops {}",
            self.interface().name,
            s.frames_sent,
            s.frames_sent_by_kernel,
            s.frames_received,
            s.frames_received_by_kernel,
            self.passed_to_kernel(),
            s.frames_lost_in_kernel,
            self.kernel_stats().truncated,
            s.malformed,
            s.oversize,
            s.ring_full,
            kernel.map_or(0, |k| k.rx_dropped + k.rx_ring_full)
        )
    }
}

/// The frames of a datagram that may hold several back to back (a GSO datagram the kernel did
/// not segment), cut apart by the lengths their headers give. Whatever does not parse as a
/// frame header is handed on whole, for the protocol core to reject and count.
struct Frames<'a>(&'a [u8]);

impl<'a> Iterator for Frames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.is_empty() {
            return None;
        }
        let len = nicmsg_wire::frame_len(self.0)
            .filter(|&len| len > 0 && len <= self.0.len())
            .unwrap_or(self.0.len());
        let (frame, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::Frames;
    use nicmsg_wire::{emit_frame, Flags, FrameHeader, FrameKind};

    fn ack(msg_id: u32) -> Vec<u8> {
        let header = FrameHeader {
            kind: FrameKind::Ack,
            flags: Flags::ACK_ALL,
            job: 1,
            src: 0,
            dst: 1,
            msg_id,
            frame_index: 0,
            offset: 0,
            payload_len: 0,
            aux: 0,
            acked_id: 0,
        };
        let mut out = vec![0u8; 64];
        let len = emit_frame(&header, None, &[], &mut out).expect("emit");
        out.truncate(len);
        out
    }

    #[test]
    fn a_datagram_of_several_frames_is_cut_at_their_lengths() {
        let frames = [ack(1), ack(2), ack(3)];
        let datagram = frames.concat();
        let cut: Vec<&[u8]> = Frames(&datagram).collect();
        assert_eq!(cut, frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    }

    #[test]
    fn what_does_not_parse_is_handed_on_whole() {
        let mut datagram = ack(1);
        datagram.extend_from_slice(b"not a frame header");
        let cut: Vec<&[u8]> = Frames(&datagram).collect();
        assert_eq!(cut.len(), 2);
        assert_eq!(cut[1], b"not a frame header");
        let garbage = vec![0xffu8; 100];
        assert_eq!(Frames(&garbage).collect::<Vec<_>>(), [&garbage[..]]);
    }
}

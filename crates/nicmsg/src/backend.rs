//! The engine's wire backend: the UDP transport, or the AF_XDP transport where the rank's
//! address is on an Ethernet interface the library may attach its program to.

use nicmsg_engine::{PlacementTarget, Received, Transport, PLACED_HEADER_LEN};
use nicmsg_udp::{Placement, UdpTransport, RECV_BATCH};
use nicmsg_xdp::XdpTransport;
use std::io;
use std::os::fd::RawFd;

pub enum Backend {
    Udp(Box<UdpTransport>),
    Xdp(Box<XdpTransport>),
}

impl Backend {
    /// Which transport carries the frames, for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Udp(_) => "udp",
            Backend::Xdp(_) => "xdp",
        }
    }
}

impl Transport for Backend {
    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        match self {
            Backend::Udp(udp) => udp.send_batch(frames),
            Backend::Xdp(xdp) => xdp.send(frames),
        }
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Option<u32>, &[u8])) -> io::Result<usize> {
        match self {
            Backend::Udp(udp) => receive_udp(udp, deliver),
            Backend::Xdp(xdp) => xdp.receive(deliver),
        }
    }

    unsafe fn receive_placed(
        &mut self,
        plan: &[PlacementTarget],
        looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
        deliver: &mut dyn FnMut(Option<u32>, Received<'_>) -> bool,
    ) -> io::Result<usize> {
        match self {
            // SAFETY: forwarded from this function's contract.
            Backend::Udp(udp) => unsafe { receive_placed_udp(udp, plan, looks_expected, deliver) },
            Backend::Xdp(xdp) => {
                // The kernel's socket first, with the plan: the plan's targets are for frames
                // not received yet, which a frame from the ring, placed by copying, could
                // otherwise be.
                let mut count = 0;
                if xdp.kernel_due() {
                    // SAFETY: forwarded from this function's contract.
                    count = unsafe {
                        receive_placed_udp(xdp.kernel_socket(), plan, looks_expected, deliver)
                    }?;
                    xdp.kernel_read(count);
                }
                // Frames from the ring land in the socket's own memory: nothing to place.
                let from_ring = xdp.receive_ring(&mut |source, bytes| {
                    for frame in Frames(bytes) {
                        deliver(source, Received::Bytes(frame));
                    }
                })?;
                Ok(count + from_ring)
            }
        }
    }

    fn note_socket_error(&mut self) {
        match self {
            Backend::Udp(udp) => udp.note_socket_error(),
            // Frames sent through the ring are refused to the kernel's socket of the same port.
            Backend::Xdp(xdp) => xdp.kernel_socket().note_socket_error(),
        }
    }

    fn refusals_may_be_queued(&self) -> bool {
        match self {
            Backend::Udp(udp) => udp.refusals_may_be_queued(),
            Backend::Xdp(xdp) => xdp.kernel_socket_ref().refusals_may_be_queued(),
        }
    }

    fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        match self {
            Backend::Udp(udp) => udp.take_refused(refused),
            Backend::Xdp(xdp) => xdp.kernel_socket().take_refused(refused),
        }
    }

    fn readable_fds(&self) -> Vec<RawFd> {
        match self {
            Backend::Udp(udp) => vec![udp.fd()],
            Backend::Xdp(xdp) => xdp.fds().to_vec(),
        }
    }

    fn max_frame(&self) -> usize {
        match self {
            Backend::Udp(udp) => udp.max_frame(),
            Backend::Xdp(xdp) => xdp.max_frame(),
        }
    }

    fn summary(&self) -> String {
        match self {
            Backend::Udp(udp) => {
                let s = udp.stats();
                format!(
                    "transport udp: datagrams sent {}, received {}, receive calls {}, \
                     received longer than a frame ({} bytes) and dropped {}, dropped on send {}",
                    s.datagrams_sent,
                    s.datagrams_received,
                    s.recv_syscalls,
                    udp.max_frame(),
                    s.truncated,
                    s.send_errors.total()
                )
            }
            Backend::Xdp(xdp) => {
                let s = xdp.stats();
                let kernel = xdp.socket_statistics().ok();
                format!(
                    "transport xdp on {}: frames sent through the ring {}, through the kernel {}; \
                     received through the ring {}, through the kernel {} (passed there {}, \
                     lost there {}, longer than a frame and dropped there {}), \
                     malformed {}, oversize {}, transmit ring full {}, receive ring drops {}",
                    xdp.interface().name,
                    s.frames_sent,
                    s.frames_sent_by_kernel,
                    s.frames_received,
                    s.frames_received_by_kernel,
                    xdp.passed_to_kernel(),
                    s.frames_lost_in_kernel,
                    xdp.kernel_stats().truncated,
                    s.malformed,
                    s.oversize,
                    s.ring_full,
                    kernel.map_or(0, |k| k.rx_dropped + k.rx_ring_full)
                )
            }
        }
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

fn receive_udp(
    udp: &mut UdpTransport,
    deliver: &mut dyn FnMut(Option<u32>, &[u8]),
) -> io::Result<usize> {
    let count = udp.recv_batch()?;
    for index in 0..count {
        let rank = udp.received_rank(index);
        let (_, bytes) = udp.received(index);
        deliver(rank, bytes);
    }
    Ok(count)
}

/// # Safety
/// As [`Transport::receive_placed`].
unsafe fn receive_placed_udp(
    udp: &mut UdpTransport,
    plan: &[PlacementTarget],
    looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
    deliver: &mut dyn FnMut(Option<u32>, Received<'_>) -> bool,
) -> io::Result<usize> {
    let mut placements = [Placement {
        header_len: PLACED_HEADER_LEN,
        dest: std::ptr::null_mut(),
        len: 0,
    }; RECV_BATCH];
    let planned = plan.len().min(RECV_BATCH);
    for (placement, target) in placements.iter_mut().zip(&plan[..planned]) {
        placement.dest = target.dest;
        placement.len = target.len;
    }
    // SAFETY: forwarded from this function's contract.
    let count = unsafe { udp.recv_batch_placed(&placements[..planned]) }?;
    // First put every wrong guess back together, before any frame is handled: handling a
    // frame writes its payload to its place, which may be where a wrong guess landed.
    for index in 0..count {
        let Some((entry, _, len)) = udp.placed(index) else {
            continue;
        };
        if !looks_expected(entry, udp.received_head(index), len) {
            // SAFETY: the target is still valid (contract).
            unsafe { udp.gather_placed(index) };
        }
    }
    for index in 0..count {
        let rank = udp.received_rank(index);
        if let Some((entry, _, len)) = udp.placed(index) {
            let header = udp.received_head(index);
            let placed = Received::Placed {
                slot: entry,
                header,
                len,
            };
            if deliver(rank, placed) {
                continue;
            }
            // SAFETY: as above; refused (not intact): handle it the ordinary way.
            unsafe { udp.gather_placed(index) };
        }
        let (_, bytes) = udp.received(index);
        deliver(rank, Received::Bytes(bytes));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::{Backend, Frames};
    use nicmsg_engine::Transport;
    use nicmsg_udp::{UdpOptions, UdpTransport};

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
            let summary = Backend::Udp(Box::new(receiver)).summary();
            assert!(
                summary.contains("received longer than a frame (100 bytes) and dropped 1"),
                "{summary}"
            );
        }
    }
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

//! The UDP transport as the engine's wire backend.

use nicmsg_engine::{PlacementTarget, Received, Transport, PLACED_HEADER_LEN};
use nicmsg_udp::{Placement, UdpTransport, RECV_BATCH};
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

    unsafe fn receive_placed(
        &mut self,
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
        let count = unsafe { self.0.recv_batch_placed(&placements[..planned]) }?;
        // First put every wrong guess back together, before any frame is handled: handling a
        // frame writes its payload to its place, which may be where a wrong guess landed.
        for index in 0..count {
            let Some((entry, _, len)) = self.0.placed(index) else {
                continue;
            };
            if !looks_expected(entry, self.0.received_head(index), len) {
                // SAFETY: the target is still valid (contract).
                unsafe { self.0.gather_placed(index) };
            }
        }
        for index in 0..count {
            let rank = self.0.received_rank(index);
            if let Some((entry, _, len)) = self.0.placed(index) {
                let header = self.0.received_head(index);
                let placed = Received::Placed {
                    slot: entry,
                    header,
                    len,
                };
                if deliver(rank, placed) {
                    continue;
                }
                // SAFETY: as above; refused (not intact): handle it the ordinary way.
                unsafe { self.0.gather_placed(index) };
            }
            let (_, bytes) = self.0.received(index);
            deliver(rank, Received::Bytes(bytes));
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

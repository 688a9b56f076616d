//! Injected sends held by the provider while its endpoint has no room for them in the engine.
//!
//! Open MPI injects every `MPI_Send` of at most 4 KiB (`fi_tinject`): the call returns at once
//! and reports nothing, so the send is done for the program. A message its receiver has not
//! asked for yet waits at the sender once the receiver's buffers for it are full, and each such
//! send keeps one of the endpoint's operations in flight ([`MAX_SENDS_IN_FLIGHT`]). Two ranks
//! that each send more such messages than that before receiving (a program that relies on
//! buffering, which MPI calls unsafe but Open MPI on TCP runs) then both got `-FI_EAGAIN` for
//! ever: each spun in `MPI_Send`, and neither posted the receives the other waited for.
//! `mpirun -n 2` of 2,000 8-byte sends each way, then 2,000 receives: Open MPI on TCP 12 ms,
//! on the provider a hang.
//!
//! Now such sends wait here, copied, in posting order, up to [`MAX_HELD_SENDS`] and
//! [`MAX_HELD_BYTES`], and go to the engine as sends in flight complete. Sends posted behind
//! them wait too (the others are refused with `-FI_EAGAIN` until the held ones have gone), so
//! nothing overtakes a held send and MPI's order per sender and tag holds. Receives keep the
//! rest of the endpoint's operations: a rank whose sends all wait for its peer can still post
//! the receives its peer waits for.

use std::collections::VecDeque;
use std::net::SocketAddr;

use nicmsg::tagged::{SendOptions, Space};

/// Most sends an endpoint keeps in the engine at once, of its `MAX_IN_FLIGHT` operations: the
/// rest stay for receives and probes (see the module documentation).
pub const MAX_SENDS_IN_FLIGHT: usize = 384;

/// Most injected sends held at once. Past it an inject answers `-FI_EAGAIN`, as it did when
/// the engine had no room.
pub const MAX_HELD_SENDS: usize = 65_536;

/// Most bytes of injected sends held at once (each at most the 4 KiB inject size): as much
/// as a TCP connection's largest socket buffers, per endpoint.
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// An injected send waiting for room: its own copy of the bytes, and where it goes.
pub struct HeldSend {
    pub copy: Vec<u8>,
    pub to: SocketAddr,
    pub space_tag: (Space, u64),
    pub options: SendOptions,
}

/// The held sends of one endpoint, oldest first.
#[derive(Default)]
pub struct HeldSends {
    queue: VecDeque<HeldSend>,
    bytes: usize,
}

impl HeldSends {
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Holds `send` behind the others; gives it back if the bounds are reached.
    pub fn hold(&mut self, send: HeldSend) -> Result<(), HeldSend> {
        let bytes = self.bytes + send.copy.len();
        if self.queue.len() >= MAX_HELD_SENDS || bytes > MAX_HELD_BYTES {
            return Err(send);
        }
        self.bytes = bytes;
        self.queue.push_back(send);
        Ok(())
    }

    /// The oldest held send, taken out.
    pub fn take_oldest(&mut self) -> Option<HeldSend> {
        let send = self.queue.pop_front()?;
        self.bytes -= send.copy.len();
        Some(send)
    }

    /// Puts back, as the oldest, a send the engine had no room for after all.
    pub fn put_back(&mut self, send: HeldSend) {
        self.bytes += send.copy.len();
        self.queue.push_front(send);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn send(len: usize) -> HeldSend {
        HeldSend {
            copy: vec![7; len],
            to: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9)),
            space_tag: (Space::Tagged, 1),
            options: SendOptions::default(),
        }
    }

    #[test]
    fn held_sends_leave_oldest_first_within_their_bounds() {
        let mut held = HeldSends::default();
        for len in [1, 2, 3] {
            assert!(held.hold(send(len)).is_ok());
        }
        let first = held.take_oldest().expect("held");
        assert_eq!(first.copy.len(), 1);
        held.put_back(first);
        let lens: Vec<usize> = std::iter::from_fn(|| held.take_oldest())
            .map(|s| s.copy.len())
            .collect();
        assert_eq!(lens, [1, 2, 3]);
        assert!(held.is_empty());
        let mut full = HeldSends::default();
        for _ in 0..MAX_HELD_BYTES / 4096 {
            assert!(full.hold(send(4096)).is_ok());
        }
        assert!(full.hold(send(1)).is_err(), "past the byte bound");
    }
}

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
//!
//! **Buffered sends.** Open MPI sends every `MPI_Send` above 4 KiB with `fi_tsend` and waits
//! for its completion. The engine completes such a send (up to 64 KiB) as soon as it has
//! copied it, but into one of its 32 send copies, and past the receiver's 16 credits the copies
//! stay taken until the receiver takes the messages. Two ranks that each sent about fifty
//! 8 KiB messages before receiving then both waited in `MPI_Send` for ever, where Open MPI on
//! TCP finishes (it buffers every message up to its 64 KiB eager limit): `mpirun -n 2` of 200
//! 8 KiB sends each way, then 200 receives, hung. Now the provider copies such a send
//! ([`BUFFERED_SEND_ABOVE`] < length <= [`BUFFERED_SEND_MAX`], completion semantics not asked
//! for) as it copies an inject, reports its completion at once, and holds or sends the copy
//! like an inject's. The copy replaces the engine's (the engine is told not to copy it again),
//! so such a send is still copied once. A send that asks for `FI_TRANSMIT_COMPLETE` or
//! `FI_DELIVERY_COMPLETE` is never buffered: it completes once the receiver holds it.

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

/// Sends longer than this are buffered (shorter ones are Open MPI's injects, held above, or
/// complete from the engine's own short copies or on their acknowledgement): the provider's
/// inject size (`NICMSG_INJECT_SIZE` in `provider.c`).
pub const BUFFERED_SEND_ABOVE: usize = 4096;

/// The longest send buffered: Open MPI's eager limit on TCP (64 KiB), above which its TCP
/// transport waits for the receiver too, and the engine's longest send copy.
pub const BUFFERED_SEND_MAX: usize = 64 << 10;

/// Most completions of buffered sends reported but not yet read by the application: past it a
/// send is posted as any other (completed by the engine's copy, or when its receiver takes
/// it), so an application that sends without reading its queue does not grow this list.
pub const MAX_UNREAD_BUFFERED: usize = 4096;

/// Whether a send of `len` bytes that asks for no completion semantics is buffered.
pub fn is_buffered(len: usize) -> bool {
    len > BUFFERED_SEND_ABOVE && len <= BUFFERED_SEND_MAX
}

/// An injected or buffered send waiting for room: its own copy of the bytes, and where it goes.
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

//! The systems measured by the in-project patterns, behind one interface: nicmsg, TCP
//! (blocking and busy-polling) and raw busy-polling UDP.
//!
//! The interface is MPI's non-blocking core, reduced to what the papers' loops use: post a send
//! of `len` bytes, post a receive of `len` bytes into one of [`MAX_WINDOW`] receive slots, wait
//! for (or test) everything posted. Messages between the two ranks match in posting order.
//! Each messenger owns its buffers, so a pattern only says how many bytes go where.

mod lm;
mod nicmsg_messenger;
mod tcp;
mod udp;
mod xdp_floor;

pub use lm::LmMessenger;
pub use nicmsg_messenger::NicmsgMessenger;
pub use tcp::TcpMessenger;
pub use udp::{UdpMessenger, LARGEST_DATAGRAM};
pub use xdp_floor::XdpFloorMessenger;

use crate::model::Copies;
use crate::BenchError;

/// What a wait does when nothing is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Sleeps in `poll(2)`, like a blocking socket (the papers' base case).
    Blocking,
    /// Retries at once, burning the core like an OS-bypass library.
    Busy,
}

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

    /// What this rank received so far and what of it was copied in user space, for systems
    /// that count it.
    fn copies(&self) -> Option<Copies> {
        None
    }

    /// The messenger's memory, for [`Messenger::agree_on_max`].
    fn buffers(&mut self) -> &mut Buffers;

    /// Both ranks call this with a value of their own (each with nothing else in flight);
    /// both get the larger of the two. Used where a pattern derives a setting from its own
    /// measurement but the two ranks must use the same one.
    fn agree_on_max(&mut self, value: u64) -> Result<u64, BenchError> {
        let len = std::mem::size_of::<u64>();
        self.buffers().send[..len].copy_from_slice(&value.to_le_bytes());
        self.post_recv(0, len)?;
        self.post_send(len)?;
        self.wait_all()?;
        let buffers = self.buffers();
        buffers.send[..len].fill(SEND_FILL);
        let theirs = buffers.slots[0][..len]
            .try_into()
            .map(u64::from_le_bytes)
            .expect("a slot of the length received");
        Ok(value.max(theirs))
    }

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

/// Sleeps in `poll(2)` until `fd` has one of `events` or `timeout_ms` passed.
fn sleep_until_ready(
    fd: std::os::fd::RawFd,
    events: libc::c_short,
    timeout_ms: i32,
) -> Result<(), BenchError> {
    let mut pollfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pollfd, 1, timeout_ms) };
    if rc < 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(BenchError::io("poll")(error));
        }
    }
    Ok(())
}

/// The byte every send carries (the payload's content does not matter to any pattern).
const SEND_FILL: u8 = 0x5a;

/// A messenger's memory: one send buffer of the largest size (every send reads its first `len`
/// bytes; at least one `u64` for [`Messenger::agree_on_max`]) and one receive buffer per window
/// slot, grown on first use.
pub struct Buffers {
    send: Vec<u8>,
    slots: Vec<Vec<u8>>,
}

impl Buffers {
    fn new(max_len: usize) -> Buffers {
        Buffers {
            send: vec![SEND_FILL; max_len.max(std::mem::size_of::<u64>())],
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Runs `each(rank, messenger)` on both ends of a loopback TCP pair at once.
    fn on_both_ranks<T: Send + 'static>(each: fn(u32, &mut dyn Messenger) -> T) -> (T, T) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = listener.local_addr().expect("address");
        let rank1 = std::thread::spawn(move || {
            let mut messenger =
                TcpMessenger::connect(1, None, server, Waiting::Busy, 64).expect("rank 1 connects");
            each(1, &mut messenger)
        });
        let mut messenger = TcpMessenger::connect(0, Some(listener), server, Waiting::Busy, 64)
            .expect("rank 0 accepts");
        let answer0 = each(0, &mut messenger);
        (answer0, rank1.join().expect("rank 1"))
    }

    #[test]
    fn both_ranks_agree_on_the_larger_value_and_sends_keep_their_fill() {
        let (answer0, answer1) = on_both_ranks(|rank, messenger| {
            let agreed = messenger.agree_on_max(if rank == 0 { 7 } else { 1 << 40 });
            let fill_kept = messenger
                .buffers()
                .send
                .iter()
                .all(|&byte| byte == SEND_FILL);
            (agreed.expect("exchange"), fill_kept)
        });
        assert_eq!(answer0, (1 << 40, true));
        assert_eq!(answer1, (1 << 40, true));
    }
}

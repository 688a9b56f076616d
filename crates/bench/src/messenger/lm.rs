//! LM's path (`nicmsg_xdp::LmSocket`): messages leave from send buffers with header holes, last
//! frame first, through the AF_XDP socket's transmit ring (buffers in its UMEM) or a `sendto`
//! a frame (buffers on the heap); admitted transfers land in place through the AF_XDP socket
//! and LM's placing filter, the others come by one copy through the kernel's socket. A receive takes the message where it landed (the socket lends the region, as the
//! datagram API's `recv_lent` does) and gives it back at once: the pattern reads no payload.
//! A wait turns the socket for a while, then sleeps in `poll(2)` on both sockets (as LM's
//! receivers sleep until the interrupt).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{Event, Received, SendError, StationStats};
use nicmsg_wire::FRAME_HEADER_LEN;
use nicmsg_xdp::{LmSocket, LmSocketConfig, HEADERS_LEN};

use super::{Buffers, Messenger, MAX_WINDOW, STALL_LIMIT};
use crate::model::Copies;
use crate::BenchError;

/// The job number in LM frames (both ranks agree; nothing else listens on their ports).
const JOB: u32 = 0x4c4d;
/// Placing memory beyond twice the largest message: room for the header hole before each
/// region and for one region being given back while the next is placed.
const PLACING_SLACK: usize = 1 << 20;
/// Longest sleep of a wait before the stall limit is looked at again.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// How long a wait keeps turning the socket with nothing happening before it sleeps: longer
/// than the gap between the frames of a transfer, so a stream is taken without a wake-up per
/// frame (what nicmsg's engine thread does before its futex, and the kernel's busy polling).
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);
/// Send buffers kept for reuse: a window's worth (a point sends one size, so after the first
/// window no send allocates).
const SPARE_BUFFERS: usize = MAX_WINDOW;

/// Send buffers of the largest message the sending memory holds: the lm pattern is a
/// ping-pong, one send in flight and its buffer reused; a send beyond them gets a heap buffer
/// (a `sendto` a frame, counted by the socket).
const RING_SEND_BUFFERS: usize = 4;

/// Sending memory for [`RING_SEND_BUFFERS`] of the largest message's send buffers (holes
/// included).
fn sending_bytes(udp_payload: usize, max_len: usize) -> usize {
    let frame_payload = udp_payload.saturating_sub(FRAME_HEADER_LEN).max(1);
    let frames = max_len.div_ceil(frame_payload).max(1);
    let per_buffer = (frames * (HEADERS_LEN + udp_payload)).next_multiple_of(64);
    RING_SEND_BUFFERS * per_buffer
}

/// One rank's LM socket, talking to the other rank.
pub struct LmMessenger {
    socket: LmSocket,
    peer: u32,
    buffers: Buffers,
    /// Send buffers that came back, for sends of their length.
    spare: Vec<HoleBuffer>,
    /// Sends given to the socket and not yet finished.
    sending: usize,
    /// Sends posted while the socket had too many in flight, oldest first (their lengths).
    queued: VecDeque<usize>,
    /// Receives posted, in order: (slot, length).
    receiving: VecDeque<(usize, usize)>,
    /// Messages that arrived before their receive was posted, in order.
    early: VecDeque<Arrived>,
}

impl LmMessenger {
    /// Rank `rank`'s end: `addresses` are both ranks' (rank 0's first). With `placing`, the
    /// socket also places admitted transfers through AF_XDP (root, an Ethernet interface
    /// holding the address); without it every transfer comes by copy. With `ring` too, send
    /// buffers lie in the AF_XDP socket's UMEM and frames leave through its transmit ring.
    pub fn open(
        rank: u32,
        addresses: [SocketAddr; 2],
        udp_payload: usize,
        (placing, ring): (bool, bool),
        max_len: usize,
    ) -> Result<Self, BenchError> {
        let peers = addresses
            .iter()
            .map(|address| match address {
                SocketAddr::V4(v4) => Ok(*v4),
                SocketAddr::V6(_) => Err(BenchError::Usage(
                    "the LM socket runs over IPv4 only".into(),
                )),
            })
            .collect::<Result<Vec<SocketAddrV4>, _>>()?;
        let socket = LmSocket::open(LmSocketConfig {
            peers,
            me: rank,
            job: JOB,
            udp_payload,
            placing_bytes: if placing {
                2 * max_len + PLACING_SLACK
            } else {
                0
            },
            sending_bytes: if placing && ring {
                sending_bytes(udp_payload, max_len)
            } else {
                0
            },
        })
        .map_err(BenchError::io("opening the LM socket"))?;
        Ok(Self {
            socket,
            peer: 1 - rank,
            buffers: Buffers::new(max_len),
            spare: Vec::with_capacity(SPARE_BUFFERS),
            sending: 0,
            queued: VecDeque::with_capacity(MAX_WINDOW),
            receiving: VecDeque::with_capacity(MAX_WINDOW),
            early: VecDeque::with_capacity(MAX_WINDOW),
        })
    }

    /// Whether the LM socket can place at `ip` (an interface of a namespace, not loopback)
    /// with frames of `udp_payload` bytes ([`LmSocket::can_place`]: up to MTU 9000, whose
    /// frames span three AF_XDP buffers).
    pub fn can_place_at(ip: IpAddr, udp_payload: usize) -> bool {
        !ip.is_loopback() && LmSocket::can_place(udp_payload)
    }

    /// A send buffer for `len` bytes: a spare one of that length, or a new one (spares of
    /// other lengths are dropped first: a point sends one length, and their room in the
    /// sending memory is the next point's).
    fn buffer_for(&mut self, len: usize) -> Result<HoleBuffer, BenchError> {
        if let Some(at) = self.spare.iter().position(|b| b.len() == len) {
            return Ok(self.spare.swap_remove(at));
        }
        self.spare.clear();
        self.socket
            .send_buffer(len)
            .map_err(|error| BenchError::Usage(format!("a {len}-byte LM send: {error}")))
    }

    /// Hands queued sends to the socket while it takes them.
    fn start_queued(&mut self) -> Result<(), BenchError> {
        while let Some(&len) = self.queued.front() {
            let mut buffer = self.buffer_for(len)?;
            // The head a receiver keeps (`HEAD`): what `agree_on_max` exchanges.
            let head = len.min(HEAD);
            buffer
                .write_at(0, &self.buffers.send[..head])
                .map_err(|error| BenchError::Usage(format!("an LM send's head: {error}")))?;
            match self.socket.send(self.peer, buffer) {
                Ok(_) => {
                    self.queued.pop_front();
                    self.sending += 1;
                }
                Err((SendError::Busy, buffer)) => {
                    self.keep_spare(buffer);
                    return Ok(());
                }
                Err((error, _)) => return Err(BenchError::Usage(format!("LM send: {error}"))),
            }
        }
        Ok(())
    }

    fn keep_spare(&mut self, buffer: HoleBuffer) {
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(buffer);
        }
    }

    /// One turn of the socket and what it finished; `true` if anything moved: a frame in or
    /// out, or a send or receive finished. A transfer's frames flow for many turns before
    /// its message completes, and a wait that slept meanwhile would pay a wake-up for the
    /// next frame or grant.
    fn turn(&mut self) -> Result<bool, BenchError> {
        let before = frame_activity(self.socket.station_stats());
        self.socket
            .progress()
            .map_err(BenchError::io("LM socket progress"))?;
        let mut moved = frame_activity(self.socket.station_stats()) != before;
        while let Some(event) = self.socket.poll_event() {
            moved = true;
            match event {
                Event::Sent {
                    buffer, outcome, ..
                } => {
                    self.sending -= 1;
                    self.keep_spare(buffer);
                    outcome.map_err(|error| BenchError::Usage(format!("LM send: {error}")))?;
                }
                Event::Received { message, .. } => self.take(message)?,
            }
        }
        self.start_queued()?;
        Ok(moved)
    }

    /// A whole message: the region it landed in is given back at once (the pattern reads
    /// no payload), and the message matched with the oldest posted receive or kept until one
    /// is posted.
    fn take(&mut self, message: Received) -> Result<(), BenchError> {
        let arrived = match message {
            Received::Placed { region, range } => {
                let arrived = Arrived::of(&self.socket.region(region)[range]);
                self.socket.release(region);
                arrived
            }
            Received::Copied(bytes) => Arrived::of(&bytes),
        };
        match self.receiving.pop_front() {
            Some((slot, len)) => self.complete(slot, len, &arrived),
            None if self.early.len() < MAX_WINDOW => {
                self.early.push_back(arrived);
                Ok(())
            }
            None => Err(BenchError::Usage(format!(
                "more than {MAX_WINDOW} messages arrived with no receive posted"
            ))),
        }
    }

    /// Receive `slot` of `len` bytes takes `arrived`.
    fn complete(&mut self, slot: usize, len: usize, arrived: &Arrived) -> Result<(), BenchError> {
        if arrived.len != len {
            return Err(BenchError::OutOfStep {
                expected: len as u64,
                got: arrived.len as u64,
            });
        }
        let head = arrived.len.min(HEAD);
        self.buffers.slots[slot][..head].copy_from_slice(&arrived.head[..head]);
        Ok(())
    }

    fn idle(&self) -> bool {
        self.sending == 0 && self.queued.is_empty() && self.receiving.is_empty()
    }
}

/// Frames the station has taken in or sent out so far, of every kind it counts: a change
/// between two turns means the socket is busy with a transfer.
fn frame_activity(stats: &StationStats) -> u64 {
    stats.placed_frames
        + stats.copied_frames
        + stats.duplicates
        + stats.held_for_slot
        + stats.damaged_landings
        + stats.frames_sent
        + stats.grants_sent
        + stats.resends_asked
        + stats.dropped_control
}

/// Bytes of a message kept for its receive slot: one `u64`, which
/// [`Messenger::agree_on_max`] reads. The rest stays where it landed, as an application of
/// the LM path reads it.
const HEAD: usize = std::mem::size_of::<u64>();

/// What the messenger keeps of a message that arrived.
struct Arrived {
    len: usize,
    head: [u8; HEAD],
}

impl Arrived {
    fn of(bytes: &[u8]) -> Arrived {
        let mut head = [0; HEAD];
        let kept = bytes.len().min(HEAD);
        head[..kept].copy_from_slice(&bytes[..kept]);
        Arrived {
            len: bytes.len(),
            head,
        }
    }
}

impl Messenger for LmMessenger {
    fn buffers(&mut self) -> &mut Buffers {
        &mut self.buffers
    }

    fn post_send(&mut self, len: usize) -> Result<(), BenchError> {
        // The pattern's bytes are the messenger's own send buffers' (zeroed) but for the
        // head (`start_queued`): only the length matters, and writing them would be the
        // application's work, not LM's.
        self.buffers.outgoing(len)?;
        self.queued.push_back(len);
        self.start_queued()
    }

    fn post_recv(&mut self, slot: usize, len: usize) -> Result<(), BenchError> {
        let busy = self.receiving.iter().any(|&(s, _)| s == slot);
        self.buffers.incoming(slot, len, busy)?;
        match self.early.pop_front() {
            Some(arrived) => self.complete(slot, len, &arrived),
            None => {
                self.receiving.push_back((slot, len));
                Ok(())
            }
        }
    }

    fn wait_all(&mut self) -> Result<(), BenchError> {
        let mut last_progress = Instant::now();
        while !self.idle() {
            if self.turn()? {
                last_progress = Instant::now();
                continue;
            }
            let quiet = last_progress.elapsed();
            if quiet > STALL_LIMIT {
                // What the socket did says where it stuck (a frame that never gets through,
                // a peer that never answers).
                return Err(BenchError::Usage(format!(
                    "no progress for {STALL_LIMIT:?}; the LM socket's counters: {:?}",
                    self.socket.stats()
                )));
            }
            if quiet > SPIN_BEFORE_SLEEP {
                self.socket.wait(WAIT_SLICE);
            }
        }
        Ok(())
    }

    fn test_all(&mut self) -> Result<bool, BenchError> {
        self.turn()?;
        Ok(self.idle())
    }

    fn copies(&self) -> Option<Copies> {
        let station = self.socket.station_stats();
        Some(Copies {
            bytes_received: station.placed_bytes
                + station.copied_bytes_one_copy
                + station.copied_bytes_placed,
            bytes_copied: station.copied_bytes_one_copy + station.copied_bytes_placed,
            transfers: station.placed_transfers + station.one_copy_transfers,
            transfers_placed: station.placed_transfers,
        })
    }
}

//! The floor under any LM path on this link: frames of one link MTU through a copy-mode AF_XDP
//! socket's rings, both ways, and nothing else. No protocol (no acknowledgement, admission,
//! grant or recovery), no placement, no payload written or read in user space: a frame's
//! payload is whatever its send chunk held, and only the headers, the message length, the
//! frame's index and a message's first 8 bytes are written. It spins, never sleeps.
//!
//! What it measures is the kernel's own work per frame in copy mode (on the sending side an
//! skb built and the frame copied into it, on the receiving side the XDP program and the copy
//! into the UMEM), which every LM implementation over copy-mode AF_XDP pays and can only add
//! to. A lost frame ends the run with an error; the frames in flight stay below a veth's
//! receive queue, so a veth loses none. A frame must fit one AF_XDP chunk (no scatter-gather
//! here, as in LM's placing socket): at MTUs beyond that (9000) frames are of a chunk's size.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use nicmsg_xdp::{
    ethernet_address, redirect_program, AttachMode, Counter, HeaderTemplate, Interface, Link,
    Program, SocketMap, Station, Steering, XskSocket, HEADERS_LEN, MAX_FRAME_BYTES, RECEIVE_BATCH,
};

use super::{Buffers, Messenger, MAX_WINDOW};
use crate::BenchError;

/// Bytes of every frame's payload before the message's: the message's length and the frame's
/// index (little-endian `u32`s). A frame of LM's carries 48 bytes of header here.
const FRAME_PREFIX: usize = 8;
/// Bytes of a message carried for its receive slot: one `u64`, which
/// [`Messenger::agree_on_max`] reads (the rest of the payload is not looked at).
const HEAD: usize = std::mem::size_of::<u64>();
/// Frames handed to the kernel and not finished, at most: a veth's queue to its peer holds
/// 256 frames (`VETH_RING_SIZE`) and drops the rest; LM's window is 128 slots.
const MAX_FRAMES_IN_FLIGHT: u32 = 128;
/// Silence after which a frame that has not come is taken as lost.
const LOSS_LIMIT: Duration = Duration::from_secs(2);
/// How long to wait for the kernel to resolve the peer's Ethernet address.
const NEIGHBOUR_LIMIT: Duration = Duration::from_secs(2);
/// Port the datagram that makes the kernel resolve the peer's address goes to (discard).
const RESOLVE_PORT: u16 = 9;
/// The receive queue: a veth has one.
const QUEUE: u32 = 0;

/// A message being sent: its length and the next frame to queue.
struct Outgoing {
    len: usize,
    next: u32,
}

/// One rank's raw ring, talking to the other rank.
pub struct XdpFloorMessenger {
    socket: XskSocket,
    _link: Link,
    _program: Program,
    _map: SocketMap,
    _passed: Counter,
    /// Keeps the port reserved in the kernel.
    _udp: UdpSocket,
    template: HeaderTemplate,
    /// Message bytes a frame carries.
    frame_data: usize,
    identification: u16,
    buffers: Buffers,
    sending: VecDeque<Outgoing>,
    /// Receives posted, in order: (slot, length).
    receiving: VecDeque<(usize, usize)>,
    /// Messages whole before their receive was posted: (length, head).
    early: VecDeque<(usize, [u8; HEAD])>,
    /// The message arriving: its length, the next frame index due, its head.
    arriving: Option<(usize, u32, [u8; HEAD])>,
    /// Messages a receive poll found whole, handed on after it (kept: no allocation a poll).
    whole: Vec<(usize, [u8; HEAD])>,
    /// Whether a frame broke the order (the floor has no recovery).
    broken: Option<String>,
    last_progress: Instant,
}

impl XdpFloorMessenger {
    /// Rank `rank`'s end at `addresses[rank]` (both ranks' addresses, IPv4 on an Ethernet
    /// interface; root), where `udp` is bound: it keeps the port and sends the datagram that
    /// resolves the peer's Ethernet address. Call [`Self::open`] on both ranks, and let both
    /// finish it, before either sends: a frame sent before the peer's program is attached
    /// goes to its kernel.
    pub fn open(
        rank: u32,
        udp: UdpSocket,
        addresses: [SocketAddr; 2],
        udp_payload: usize,
        max_len: usize,
    ) -> Result<Self, BenchError> {
        let v4 = |address: SocketAddr| match address {
            SocketAddr::V4(v4) => Ok(v4),
            SocketAddr::V6(_) => Err(BenchError::Usage("the AF_XDP floor is IPv4 only".into())),
        };
        let me = v4(addresses[rank as usize])?;
        let peer = v4(addresses[1 - rank as usize])?;
        let interface = Interface::with_address(*me.ip())
            .map_err(BenchError::io("listing interfaces"))?
            .ok_or_else(|| {
                BenchError::Usage(format!(
                    "no Ethernet interface has {} (use --netns)",
                    me.ip()
                ))
            })?;
        let peer_mac = resolve(&udp, *peer.ip(), &interface.name)?;
        let socket = XskSocket::open(interface.index, QUEUE)
            .map_err(BenchError::io("opening an AF_XDP socket"))?;
        let map = SocketMap::create(1).map_err(BenchError::io("creating the socket map"))?;
        map.insert(QUEUE, socket.fd())
            .map_err(BenchError::io("registering the AF_XDP socket"))?;
        let passed = Counter::create().map_err(BenchError::io("creating a counter"))?;
        let steering = Steering {
            ip: *me.ip(),
            port: me.port(),
            sockets_map_fd: map.fd(),
            ring_max_udp_len: u16::MAX,
            passed_counter_fd: passed.fd(),
        };
        let program = Program::load(&redirect_program(&steering), "nicmsg_floor")
            .map_err(BenchError::io("loading the steering program"))?;
        // Native, as LM's placing filter: on a veth the program runs in the queue's NAPI poll.
        let link = program
            .attach(interface.index, AttachMode::Native)
            .map_err(BenchError::io("attaching the steering program"))?;
        let template = HeaderTemplate::new(
            &Station {
                mac: interface.mac,
                addr: me,
            },
            &Station {
                mac: peer_mac,
                addr: peer,
            },
        );
        Ok(Self {
            socket,
            _link: link,
            _program: program,
            _map: map,
            _passed: passed,
            _udp: udp,
            template,
            frame_data: udp_payload.min(MAX_FRAME_BYTES - HEADERS_LEN) - FRAME_PREFIX,
            identification: 0,
            buffers: Buffers::new(max_len),
            sending: VecDeque::with_capacity(MAX_WINDOW),
            receiving: VecDeque::with_capacity(MAX_WINDOW),
            early: VecDeque::with_capacity(MAX_WINDOW),
            arriving: None,
            whole: Vec::with_capacity(RECEIVE_BATCH as usize),
            broken: None,
            last_progress: Instant::now(),
        })
    }

    /// Queues the frames of the messages posted, as far as the frames in flight allow, and
    /// wakes the kernel. Returns whether any frame was queued.
    fn pump_sends(&mut self) -> Result<bool, BenchError> {
        let mut queued = false;
        // Finished sends are reclaimed once a pump, not once a frame.
        let mut in_flight = self.socket.send_chunks_in_flight();
        while let Some(outgoing) = self.sending.front() {
            let (len, index) = (outgoing.len, outgoing.next);
            if in_flight >= MAX_FRAMES_IN_FLIGHT {
                break;
            }
            let Some((chunk, bytes)) = self.socket.tx_chunk() else {
                break;
            };
            let data = (len - (index as usize * self.frame_data).min(len)).min(self.frame_data);
            let udp_payload = FRAME_PREFIX + data;
            self.identification = self.identification.wrapping_add(1);
            self.template.write(bytes, udp_payload, self.identification);
            let prefix = &mut bytes[HEADERS_LEN..HEADERS_LEN + FRAME_PREFIX];
            prefix[..4].copy_from_slice(&(len as u32).to_le_bytes());
            prefix[4..].copy_from_slice(&index.to_le_bytes());
            if index == 0 {
                let head = len.min(HEAD);
                let start = HEADERS_LEN + FRAME_PREFIX;
                bytes[start..start + head].copy_from_slice(&self.buffers.send[..head]);
            }
            self.socket.queue_send(chunk, HEADERS_LEN + udp_payload);
            queued = true;
            in_flight += 1;
            let frames = frames_of(len, self.frame_data);
            let outgoing = self.sending.front_mut().expect("looked at above");
            outgoing.next += 1;
            if outgoing.next == frames {
                self.sending.pop_front();
            }
        }
        if queued || self.socket.has_unsent() {
            self.socket
                .flush()
                .map_err(BenchError::io("waking the kernel to send"))?;
        }
        Ok(queued)
    }

    /// Takes the frames in the receive ring. Returns whether there were any.
    fn take_frames(&mut self) -> bool {
        let mut frames = std::mem::take(&mut self.arriving);
        let mut whole = std::mem::take(&mut self.whole);
        let mut broken = None;
        let frame_data = self.frame_data;
        let taken = self.socket.receive(RECEIVE_BATCH, |frame| {
            let Some(prefix) = frame.get(HEADERS_LEN..HEADERS_LEN + FRAME_PREFIX) else {
                return; // not the floor's (the kernel's own datagram, say)
            };
            let len = u32::from_le_bytes(prefix[..4].try_into().expect("4 bytes")) as usize;
            let index = u32::from_le_bytes(prefix[4..].try_into().expect("4 bytes"));
            let (len, due, head) = match frames.take() {
                None if index == 0 => {
                    let mut head = [0; HEAD];
                    let start = HEADERS_LEN + FRAME_PREFIX;
                    let kept = len.min(HEAD).min(frame.len().saturating_sub(start));
                    head[..kept].copy_from_slice(&frame[start..start + kept]);
                    (len, 0, head)
                }
                Some(arriving) if arriving.1 == index && arriving.0 == len => arriving,
                other => {
                    broken = Some(format!(
                        "frame {index} of a {len}-byte message came while {other:?} was due: \
                         a frame was lost (the floor has no recovery)"
                    ));
                    return;
                }
            };
            if due + 1 == frames_of(len, frame_data) {
                whole.push((len, head));
            } else {
                frames = Some((len, due + 1, head));
            }
        });
        self.arriving = frames;
        if broken.is_some() {
            self.broken = broken;
        }
        for &(len, head) in &whole {
            self.arrived(len, head);
        }
        whole.clear();
        self.whole = whole;
        taken > 0
    }

    /// A whole message: to the oldest posted receive, or kept until one is posted.
    fn arrived(&mut self, len: usize, head: [u8; HEAD]) {
        match self.receiving.pop_front() {
            Some((slot, expected)) => self.complete(slot, expected, len, head),
            None => self.early.push_back((len, head)),
        }
    }

    fn complete(&mut self, slot: usize, expected: usize, len: usize, head: [u8; HEAD]) {
        if len != expected {
            self.broken = Some(format!(
                "a {len}-byte message for a {expected}-byte receive"
            ));
            return;
        }
        let kept = len.min(HEAD);
        self.buffers.slots[slot][..kept].copy_from_slice(&head[..kept]);
    }

    fn turn(&mut self) -> Result<(), BenchError> {
        let sent = self.pump_sends()?;
        let received = self.take_frames();
        if let Some(why) = self.broken.take() {
            return Err(BenchError::Usage(why));
        }
        if sent || received {
            self.last_progress = Instant::now();
        } else if self.last_progress.elapsed() > LOSS_LIMIT {
            return Err(BenchError::Usage(format!(
                "nothing moved for {LOSS_LIMIT:?}: a frame was lost (the floor has no recovery)"
            )));
        }
        Ok(())
    }

    fn idle(&self) -> bool {
        self.sending.is_empty() && self.receiving.is_empty()
    }
}

/// Frames of a message of `len` bytes, `frame_data` message bytes a frame (an empty message
/// takes one).
fn frames_of(len: usize, frame_data: usize) -> u32 {
    len.div_ceil(frame_data).max(1) as u32
}

/// The Ethernet address of `peer`: one datagram to its discard port makes the kernel resolve
/// it, then the neighbour table has it.
fn resolve(udp: &UdpSocket, peer: Ipv4Addr, interface: &str) -> Result<[u8; 6], BenchError> {
    let deadline = Instant::now() + NEIGHBOUR_LIMIT;
    let discard = SocketAddr::new(IpAddr::V4(peer), RESOLVE_PORT);
    udp.send_to(&[0], discard)
        .map_err(BenchError::io("sending to the peer"))?;
    loop {
        if let Some(mac) =
            ethernet_address(peer, interface).map_err(BenchError::io("reading the ARP table"))?
        {
            return Ok(mac);
        }
        if Instant::now() > deadline {
            return Err(BenchError::Usage(format!(
                "the kernel did not resolve {peer}'s Ethernet address on {interface}"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Messenger for XdpFloorMessenger {
    fn buffers(&mut self) -> &mut Buffers {
        &mut self.buffers
    }

    fn post_send(&mut self, len: usize) -> Result<(), BenchError> {
        self.buffers.outgoing(len)?;
        self.sending.push_back(Outgoing { len, next: 0 });
        self.pump_sends().map(|_| ())
    }

    fn post_recv(&mut self, slot: usize, len: usize) -> Result<(), BenchError> {
        let busy = self.receiving.iter().any(|&(s, _)| s == slot);
        self.buffers.incoming(slot, len, busy)?;
        match self.early.pop_front() {
            Some((arrived, head)) => self.complete(slot, len, arrived, head),
            None => self.receiving.push_back((slot, len)),
        }
        match self.broken.take() {
            Some(why) => Err(BenchError::Usage(why)),
            None => Ok(()),
        }
    }

    fn wait_all(&mut self) -> Result<(), BenchError> {
        self.last_progress = Instant::now();
        while !self.idle() {
            self.turn()?;
        }
        Ok(())
    }

    fn test_all(&mut self) -> Result<bool, BenchError> {
        self.turn()?;
        Ok(self.idle())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_needs_an_address_on_an_ethernet_interface() {
        let addresses = [
            "127.0.0.1:1".parse().expect("address"),
            "127.0.0.1:2".parse().expect("address"),
        ];
        let udp = UdpSocket::bind("127.0.0.1:0").expect("a loopback port");
        let error = XdpFloorMessenger::open(0, udp, addresses, 1472, 64)
            .err()
            .expect("loopback has no Ethernet address");
        assert!(
            error.to_string().contains("no Ethernet interface"),
            "{error}"
        );
    }
}

//! LM's in-place defragmentation on the real kernel: an AF_XDP socket in unaligned-chunk mode
//! (copy mode on veth) is given, for each frame of a transfer, the address where that frame's
//! payload lands in its final place less its 90 bytes of headers (`nicmsg_lm::Placement`); the
//! sender in the other namespace sends the frames last first as slots are granted; each
//! frame's headers land on the tail of the previous frame's place and are overwritten by it.
//! Checked: the kernel wrote every frame exactly where its slot pointed, the region then holds
//! the message byte for byte, and user space copied no byte of it. 1 frame to 8 MiB.
//!
//! The sender is a kernel UDP socket (its frames are those of any sender); the grants travel
//! over a channel between the two threads, standing for the protocol's CTS. Needs root and
//! `ip`; skips itself (saying why) otherwise.
//!
//! Two filters: the plain steering program (every frame for the port to the ring: only the
//! admitted sender may send, the paper's condition), and LM's placing filter
//! (`nicmsg_xdp::placing_program`), which lets a frame take the head address only if it is
//! that address's frame and keeps its headers; a third sender then floods the same port with
//! frames that look almost right (another transfer, a wrong index, a short copy, another kind)
//! while transfers are placed, and every one of them must go the ordinary way (the kernel's
//! socket) with no placed byte touched.

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use common::{address_of, enter, Pair};
use nicmsg_lm::fill::{FillQueue, Slot, TransferKey, WHOLE_FRAME_BUFFERS};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::{Geometry, Placement};
use nicmsg_wire::{emit_headers, seal, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use nicmsg_xdp::{
    placing_program, redirect_program, AttachMode, Binding, Counter, Interface, PlacingSteering,
    PlacingTable, Program, ReceiveMode, SocketMap, Steering, XskSocket, HEADERS_LEN,
    KERNEL_HEADROOM,
};

const PORT: u16 = 7481;
/// Payload per frame at MTU 1500: 1472 bytes of UDP payload less the frame header.
const PAYLOAD: usize = 1472 - FRAME_HEADER_LEN;
/// Where the receive region starts in the UMEM: frame 0's fill address is this less the
/// kernel's headroom, so it must be at least that.
const REGION_AT: usize = 4096;
const LARGEST: usize = 8 << 20;
const WINDOW: u32 = 128;
const DEADLINE: Duration = Duration::from_secs(20);
const SIZES: [usize; 7] = [1, PAYLOAD, PAYLOAD + 1, 65_536, 1 << 20, 5_000_003, LARGEST];

fn message(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 131 + seed * 7) % 251) as u8)
        .collect()
}

#[test]
fn frames_sent_last_first_land_in_place_through_an_unaligned_umem() {
    run_pair("nmlm", Filter::Plain);
}

#[test]
fn the_placing_filter_sends_a_third_senders_frames_the_ordinary_way() {
    run_pair("nmls", Filter::Placing);
}

/// Which XDP program steers the receiver's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    /// Every frame for the port to the ring.
    Plain,
    /// LM's rule, with a third sender flooding the port meanwhile.
    Placing,
}

/// A volley the receiver asks the third sender for: frames aimed at the head slot (frame
/// `index` of `transfer`, `payload` bytes), each wrong in one way only.
#[derive(Debug)]
struct Aim {
    transfer: u32,
    index: u32,
    payload: usize,
    /// Told how many frames the third sender had sent once the volley was out.
    sent: mpsc::Sender<u64>,
}

/// Frames aimed at a head slot per volley (`aimed_volley`).
const VOLLEY: u64 = 5;

/// Frames the third sender sent, and whether it should stop.
#[derive(Default)]
struct Intruder {
    sent: AtomicU64,
    stop: AtomicBool,
    /// The transfer being placed (the intruder forges frames of it).
    transfer: AtomicU64,
}

fn run_pair(prefix: &str, filter: Filter) {
    let Some(pair) = Pair::create(prefix) else {
        return;
    };
    let (grants_tx, grants_rx) = mpsc::channel::<(usize, u32)>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (aim_tx, aim_rx) = mpsc::channel::<Aim>();
    let intruder = Arc::new(Intruder::default());
    let receiver_ns = pair.names[0].clone();
    let receiver_intruder = Arc::clone(&intruder);
    let receiver = thread::spawn(move || {
        enter(&receiver_ns);
        receive_all(filter, (&grants_tx, &ready_tx, &aim_tx), &receiver_intruder)
    });
    let sender_ns = pair.names[1].clone();
    let sender = thread::spawn(move || {
        enter(&sender_ns);
        send_all(&grants_rx, &ready_rx);
    });
    let third = (filter == Filter::Placing).then(|| {
        let ns = pair.names[1].clone();
        let intruder = Arc::clone(&intruder);
        thread::spawn(move || {
            enter(&ns);
            intrude(&intruder, &aim_rx);
        })
    });
    sender.join().expect("sender");
    let report = receiver.join().expect("receiver");
    if let Some(third) = third {
        third.join().expect("third sender");
    }
    for line in &report {
        eprintln!("{line}");
    }
    drop(pair);
}

/// The receiving side: one socket, one transfer after another into the same region.
fn receive_all(
    filter: Filter,
    (grants, ready, aim): (
        &mpsc::Sender<(usize, u32)>,
        &mpsc::Sender<()>,
        &mpsc::Sender<Aim>,
    ),
    intruder: &Intruder,
) -> Vec<String> {
    let local = address_of(0);
    let interface = Interface::with_address(local)
        .expect("interfaces")
        .expect("eth0 holds the address");
    let ordinary = UdpSocket::bind(SocketAddrV4::new(local, PORT)).expect("port");
    ordinary.set_nonblocking(true).expect("nonblocking");
    // Room for every frame the third sender sends, so the kernel's socket drops none.
    nicmsg_udp::force_buffer_sizes(std::os::fd::AsRawFd::as_raw_fd(&ordinary), 32 << 20);
    let geometry = Geometry::new(HEADERS_LEN + FRAME_HEADER_LEN, PAYLOAD).expect("geometry");
    let bytes = REGION_AT + geometry.receive_region_len(LARGEST) + 2 * nicmsg_xdp::CHUNK_BYTES;
    let socket = XskSocket::open_with(
        interface.index,
        0,
        ReceiveMode::Placing {
            bytes,
            sending_bytes: 0,
            scatter_gather: false,
        },
        Binding::ZeroCopyElseCopy,
    )
    .expect("an unaligned-chunk AF_XDP socket");
    let map = SocketMap::create(1).expect("xskmap");
    map.insert(0, socket.fd()).expect("socket in the map");
    let passed = Counter::create().expect("counter");
    let table = PlacingTable::create().expect("placing table");
    let program = match filter {
        Filter::Plain => redirect_program(&Steering {
            ip: local,
            port: PORT,
            sockets_map_fd: map.fd(),
            ring_max_udp_len: u16::MAX,
            passed_counter_fd: passed.fd(),
        }),
        Filter::Placing => placing_program(&PlacingSteering {
            ip: local,
            port: PORT,
            sockets_map_fd: map.fd(),
            queue: 0,
            table_fd: table.fd(),
            passed_counter_fd: passed.fd(),
            scatter_gather: false,
        }),
    };
    let program = Program::load(&program, "nicmsg_lm").expect("load");
    // Native: the placing filter's cursor needs one queue's frames one at a time.
    let _link = program
        .attach(interface.index, AttachMode::Native)
        .expect("attach");
    ready.send(()).expect("sender waits");
    let mut receiver = Receiver {
        socket,
        placing: (filter == Filter::Placing).then(|| PlacingSide {
            table,
            aim: aim.clone(),
        }),
        posted: 0,
        taken: 0,
        ordinary,
        ordinary_received: 0,
        passed,
        volleys: 0,
    };
    let mut report = Vec::new();
    for (seed, &len) in SIZES.iter().enumerate() {
        let key = TransferKey(seed as u32 + 1);
        intruder.transfer.store(u64::from(key.0), Ordering::Release);
        let started = Instant::now();
        let stats = receiver.place_one(geometry, key, len, grants);
        let region = &receiver.socket.receiving_memory()
            [REGION_AT..REGION_AT + geometry.receive_region_len(len)];
        let expected = message(len, seed);
        let got = &region[geometry.receive_payload_range(len)];
        let wrong = got.iter().zip(&expected).position(|(a, b)| a != b);
        assert_eq!(wrong, None, "transfer of {len} B: wrong byte in place");
        assert_eq!(stats.copied_bytes, 0, "{len} B: user space copied");
        assert_eq!(stats.placed_bytes, len as u64);
        report.push(format!(
            "{len} B: {} frames placed by the kernel, 0 B copied in user space, {:.1} ms",
            geometry.frames(len),
            started.elapsed().as_secs_f64() * 1e3
        ));
    }
    intruder.stop.store(true, Ordering::Release);
    grants.send((usize::MAX, 0)).ok();
    match filter {
        Filter::Plain => assert_eq!(receiver.passed.read(), 0, "every frame went to the ring"),
        Filter::Placing => {
            let sent = wait_for_passed(&receiver.passed, intruder);
            receiver.drain_ordinary();
            assert!(sent > 0, "the third sender sent nothing");
            assert_eq!(
                receiver.ordinary_received, sent,
                "the kernel's socket has every frame the filter passed"
            );
            report.push(format!(
                "third sender: {sent} frames ({} of them in volleys aimed at a head slot), \
                 all {} passed to the kernel by the filter, {} read from the kernel socket, \
                 none taken into the ring",
                receiver.volleys * VOLLEY,
                receiver.passed.read(),
                receiver.ordinary_received
            ));
        }
    }
    report
}

/// Waits until the filter has passed every frame the third sender sent (it stopped), and
/// returns how many that was: none of them may have taken a placing address.
fn wait_for_passed(passed: &Counter, intruder: &Intruder) -> u64 {
    let started = Instant::now();
    loop {
        let sent = intruder.sent.load(Ordering::Acquire);
        let done = intruder.stop.load(Ordering::Acquire) && passed.read() == sent;
        if done && started.elapsed() > Duration::from_millis(100) {
            return sent;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the filter passed {} of {sent} intruding frames",
            passed.read()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// What the receiver has only with the placing filter.
struct PlacingSide {
    table: PlacingTable,
    /// Asks the third sender for aimed volleys.
    aim: mpsc::Sender<Aim>,
}

/// The receiving socket and what it has posted.
struct Receiver {
    socket: XskSocket,
    /// None with the plain program.
    placing: Option<PlacingSide>,
    /// Fill addresses posted and taken so far: the positions the table is indexed by.
    posted: u64,
    taken: u64,
    /// The port's kernel socket: frames the filter passed arrive here.
    ordinary: UdpSocket,
    ordinary_received: u64,
    /// Frames of the port the program passed to the kernel.
    passed: Counter,
    volleys: u64,
}

impl Receiver {
    /// Places one transfer: posts a window of slots (mirror and fill ring together), grants
    /// them, and checks every landing against the slot it took (and, with the placing filter,
    /// against the headers the filter kept).
    fn place_one(
        &mut self,
        geometry: Geometry,
        key: TransferKey,
        len: usize,
        grants: &mpsc::Sender<(usize, u32)>,
    ) -> nicmsg_lm::placement::PlacementStats {
        let mut placement = Placement::new(key, geometry, len as u64, WINDOW).expect("placement");
        let mut fill = FillQueue::new(4096, WHOLE_FRAME_BUFFERS);
        let region_len = placement.region_len();
        let started = Instant::now();
        let posted = self.post(&mut placement, &mut fill);
        self.aim_at_head(&fill, key);
        self.grant(&placement, posted, len, grants);
        while !placement.is_complete() {
            assert!(
                started.elapsed() < DEADLINE,
                "{len} B: frames stopped landing"
            );
            self.drain_ordinary();
            let mut landed = Vec::new();
            self.socket
                .take_landed(64, |position, bytes, _| landed.push((position, bytes)));
            for (position, bytes) in landed {
                let slot = fill.device_take(bytes as u32);
                assert_eq!(fill.engine_take(), Some(slot));
                let Slot::Placement {
                    index,
                    len: slot_len,
                    ..
                } = slot
                else {
                    panic!("only placement slots were posted");
                };
                let expected_at = REGION_AT + geometry.landing_offset(index);
                assert_eq!(
                    (position, bytes),
                    (expected_at, slot_len as usize),
                    "{len} B: frame {index} landed elsewhere"
                );
                self.check_kept_headers(key, index);
                self.taken += 1;
                let memory = self.socket.receiving_memory();
                let region = &mut memory[REGION_AT..REGION_AT + region_len];
                placement.landed(index, true, region);
            }
            self.post_and_grant(&mut placement, &mut fill, len, grants);
        }
        placement.finish(&mut fill);
        *placement.stats()
    }

    /// With the placing filter: the frame that took position `taken` was frame `index` of
    /// `key`, by the headers the filter kept (its own were overwritten by the next landing).
    fn check_kept_headers(&self, key: TransferKey, index: u32) {
        let Some(PlacingSide { table, .. }) = &self.placing else {
            return;
        };
        assert!(
            table.cursor() > self.taken,
            "a landing the filter did not count"
        );
        let kept = table.kept_headers(self.taken);
        let header: &[u8; FRAME_HEADER_LEN] =
            kept[HEADERS_LEN..].try_into().expect("a frame header");
        let header = FrameHeader::parse(header).expect("kept headers parse");
        assert_eq!(
            (header.kind, header.aux, header.frame_index),
            (FrameKind::LmData, key.0, index),
            "kept headers of position {}",
            self.taken
        );
    }

    fn post_and_grant(
        &mut self,
        placement: &mut Placement,
        fill: &mut FillQueue,
        len: usize,
        grants: &mpsc::Sender<(usize, u32)>,
    ) {
        let posted = self.post(placement, fill);
        self.grant(placement, posted, len, grants);
    }

    /// With the placing filter, before the sender may send: has the third sender aim a volley
    /// at the head slot, and checks that every frame of it went to the kernel and none took
    /// the slot.
    fn aim_at_head(&mut self, fill: &FillQueue, key: TransferKey) {
        let Some(PlacingSide { aim, .. }) = &self.placing else {
            return;
        };
        let Some(&Slot::Placement { index, len, .. }) = fill.head() else {
            panic!("a placement slot heads the queue");
        };
        let payload = len as usize - HEADERS_LEN - FRAME_HEADER_LEN;
        let (sent_tx, sent_rx) = mpsc::channel();
        aim.send(Aim {
            transfer: key.0,
            index,
            payload,
            sent: sent_tx,
        })
        .expect("third sender listens");
        let sent = sent_rx.recv_timeout(DEADLINE).expect("the volley was sent");
        let started = Instant::now();
        // Every frame the third sender sent, the volley included, is passed or took a slot.
        while self.passed.read() < sent {
            assert!(started.elapsed() < DEADLINE, "the volley was not passed");
            self.drain_ordinary();
            thread::sleep(Duration::from_micros(100));
        }
        let Some(PlacingSide { table, .. }) = &self.placing else {
            unreachable!("aimed only with the placing filter");
        };
        assert_eq!(
            table.cursor(),
            self.taken,
            "a forged frame took the head slot"
        );
        self.volleys += 1;
    }

    /// Posts the placement's next slots: fill addresses, then (placing filter) their records.
    fn post(&mut self, placement: &mut Placement, fill: &mut FillQueue) -> u32 {
        let geometry = *placement.geometry();
        let region_len = placement.region_len();
        let mut slots = Vec::new();
        let memory = self.socket.receiving_memory();
        let region = &memory[REGION_AT..REGION_AT + region_len];
        let posted = placement
            .post_slots(fill, region, &mut |slot| slots.push(slot))
            .expect("fill queue room");
        for slot in &slots {
            let Slot::Placement { index, .. } = *slot else {
                continue;
            };
            let address = REGION_AT + geometry.landing_offset(index) - KERNEL_HEADROOM;
            assert!(self.socket.post_fill(address as u64), "fill ring room");
        }
        // Addresses first, then their records: a record the filter sees has its address.
        self.socket.publish_fill();
        for slot in &slots {
            if let Some(PlacingSide { table, .. }) = &self.placing {
                table.record(self.posted, slot);
            }
            self.posted += 1;
        }
        posted
    }

    fn grant(
        &self,
        placement: &Placement,
        posted: u32,
        len: usize,
        grants: &mpsc::Sender<(usize, u32)>,
    ) {
        if posted > 0 {
            let floor = placement.grant_floor();
            grants.send((len, floor)).expect("sender listens");
        }
    }

    /// Reads what the kernel's socket holds: frames the filter passed.
    fn drain_ordinary(&mut self) {
        let mut buffer = [0u8; 2048];
        while self.ordinary.recv(&mut buffer).is_ok() {
            self.ordinary_received += 1;
        }
    }
}

/// The sending side: a kernel UDP socket sends each transfer's frames from a send buffer with
/// header holes, last first, as far down as the receiver granted.
fn send_all(grants: &mpsc::Receiver<(usize, u32)>, ready: &mpsc::Receiver<()>) {
    let socket = UdpSocket::bind(SocketAddrV4::new(address_of(1), PORT)).expect("bind");
    socket
        .connect(SocketAddrV4::new(address_of(0), PORT))
        .expect("connect");
    ready.recv_timeout(DEADLINE).expect("receiver ready");
    let geometry = Geometry::new(FRAME_HEADER_LEN, PAYLOAD).expect("geometry");
    for (seed, &len) in SIZES.iter().enumerate() {
        let mut buffer = HoleBuffer::new(geometry, len as u64).expect("send buffer");
        buffer.write_at(0, &message(len, seed)).expect("fits");
        let mut next = geometry.frames(len);
        while next > 0 {
            let (granted_len, floor) = grants.recv_timeout(DEADLINE).expect("a grant");
            assert_eq!(granted_len, len, "grants are for the transfer in flight");
            while next > floor {
                next -= 1;
                let frame = frame_in_place(&mut buffer, seed as u32 + 1, next);
                socket.send(frame).expect("send");
            }
        }
    }
}

/// The third sender: floods the receiver's port with frames that must not take a placing
/// address: ordinary datagrams, LM-DATA of another transfer, of the placed transfer with an
/// index beyond its frames or a short payload, and a frame of the right transfer and index
/// with another kind. Paced so the kernel's socket keeps up.
fn intrude(intruder: &Intruder, aims: &mpsc::Receiver<Aim>) {
    let socket = UdpSocket::bind(SocketAddrV4::new(address_of(1), PORT + 1)).expect("bind");
    socket
        .connect(SocketAddrV4::new(address_of(0), PORT))
        .expect("connect");
    // Only once the filter is attached (the first transfer is named), so each frame is counted.
    let started = Instant::now();
    while intruder.transfer.load(Ordering::Acquire) == 0 {
        assert!(started.elapsed() < DEADLINE, "no transfer began");
        thread::sleep(Duration::from_millis(1));
    }
    let mut round = 0u32;
    while !intruder.stop.load(Ordering::Acquire) {
        let key = intruder.transfer.load(Ordering::Relaxed) as u32;
        socket.send(&flood_frame(round, key)).expect("send");
        intruder.sent.fetch_add(1, Ordering::Release);
        if let Ok(aim) = aims.try_recv() {
            for frame in aimed_volley(&aim) {
                socket.send(&frame).expect("send");
                intruder.sent.fetch_add(1, Ordering::Release);
            }
            aim.sent.send(intruder.sent.load(Ordering::Acquire)).ok();
        }
        round = round.wrapping_add(1);
        if round.is_multiple_of(8) {
            thread::sleep(Duration::from_micros(200));
        }
    }
}

/// One frame of the flood: indices across the placed transfer's frames, so forgeries meet its
/// head slots.
fn flood_frame(round: u32, key: u32) -> Vec<u8> {
    let frames = Geometry::new(FRAME_HEADER_LEN, PAYLOAD)
        .expect("geometry")
        .frames(SIZES[key as usize - 1]);
    let index = round.wrapping_mul(7919) % frames;
    match round % 4 {
        0 => vec![0xEE; 1 + (round as usize * 37) % PAYLOAD],
        1 => forged(FrameKind::LmData, key.wrapping_add(1000), index, PAYLOAD),
        2 => forged(FrameKind::LmData, key, index, PAYLOAD - 1),
        _ => forged(FrameKind::Data, key, index, PAYLOAD),
    }
}

/// Frames that match the aimed-at slot in everything but one thing each (transfer, length,
/// kind, index, being a frame at all): a filter that skips any one check lets one through.
fn aimed_volley(aim: &Aim) -> Vec<Vec<u8>> {
    let &Aim {
        transfer,
        index,
        payload,
        ..
    } = aim;
    let other_index = if index > 0 { index - 1 } else { index + 1 };
    let volley = vec![
        forged(
            FrameKind::LmData,
            transfer.wrapping_add(1000),
            index,
            payload,
        ),
        forged(FrameKind::LmData, transfer, index, payload - 1),
        forged(FrameKind::Data, transfer, index, payload),
        forged(FrameKind::LmData, transfer, other_index, payload),
        vec![0xEE; FRAME_HEADER_LEN + payload],
    ];
    assert_eq!(volley.len() as u64, VOLLEY);
    volley
}

fn forged(kind: FrameKind, aux: u32, index: u32, payload: usize) -> Vec<u8> {
    let header = FrameHeader {
        kind,
        flags: 0,
        job: 1,
        src: 2,
        dst: 0,
        msg_id: aux,
        frame_index: index,
        offset: u64::from(index) * PAYLOAD as u64,
        payload_len: payload as u32,
        aux,
        acked_id: 0,
    };
    let mut frame = vec![0x5A; FRAME_HEADER_LEN + payload];
    let (head, body) = frame.split_at_mut(FRAME_HEADER_LEN);
    let head: &mut [u8; FRAME_HEADER_LEN] = head.try_into().expect("header room");
    emit_headers(&header, None, head).expect("valid header");
    seal(head, &[body]);
    frame
}

/// Writes frame `index`'s header into its hole and returns the frame as one piece.
fn frame_in_place(buffer: &mut HoleBuffer, key: u32, index: u32) -> &[u8] {
    let range = buffer.geometry().payload_range(buffer.len(), index);
    let header = FrameHeader {
        kind: FrameKind::LmData,
        flags: 0,
        job: 1,
        src: 1,
        dst: 0,
        msg_id: key,
        frame_index: index,
        offset: range.start as u64,
        payload_len: range.len() as u32,
        aux: key,
        acked_id: 0,
    };
    let mut bytes = [0u8; FRAME_HEADER_LEN];
    emit_headers(&header, None, &mut bytes).expect("valid header");
    seal(&mut bytes, &[buffer.piece(index)]);
    buffer.header_mut(index).copy_from_slice(&bytes);
    buffer.frame(index)
}

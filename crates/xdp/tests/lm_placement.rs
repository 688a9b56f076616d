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

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{address_of, enter, Pair};
use nicmsg_lm::fill::{FillQueue, Slot, TransferKey};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::{Geometry, Placement};
use nicmsg_wire::{emit_headers, seal, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use nicmsg_xdp::{
    redirect_program, AttachMode, Counter, Interface, Program, ReceiveMode, SocketMap, Steering,
    XskSocket, HEADERS_LEN, KERNEL_HEADROOM,
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
    let Some(pair) = Pair::create("nmlm") else {
        return;
    };
    let (grants_tx, grants_rx) = mpsc::channel::<(usize, u32)>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let receiver_ns = pair.names[0].clone();
    let receiver = thread::spawn(move || {
        enter(&receiver_ns);
        receive_all(&grants_tx, &ready_tx)
    });
    let sender_ns = pair.names[1].clone();
    let sender = thread::spawn(move || {
        enter(&sender_ns);
        send_all(&grants_rx, &ready_rx);
    });
    sender.join().expect("sender");
    let report = receiver.join().expect("receiver");
    for line in &report {
        eprintln!("{line}");
    }
    drop(pair);
}

/// The receiving side: one socket, one transfer after another into the same region.
fn receive_all(grants: &mpsc::Sender<(usize, u32)>, ready: &mpsc::Sender<()>) -> Vec<String> {
    let local = address_of(0);
    let interface = Interface::with_address(local)
        .expect("interfaces")
        .expect("eth0 holds the address");
    let _port = UdpSocket::bind(SocketAddrV4::new(local, PORT)).expect("port");
    let geometry = Geometry::new(HEADERS_LEN + FRAME_HEADER_LEN, PAYLOAD).expect("geometry");
    let bytes = REGION_AT + geometry.receive_region_len(LARGEST) + 2 * nicmsg_xdp::CHUNK_BYTES;
    let mut socket = XskSocket::open_with(interface.index, 0, ReceiveMode::Placing { bytes })
        .expect("an unaligned-chunk AF_XDP socket");
    let map = SocketMap::create(1).expect("xskmap");
    map.insert(0, socket.fd()).expect("socket in the map");
    let passed = Counter::create().expect("counter");
    let steering = Steering {
        ip: local,
        port: PORT,
        sockets_map_fd: map.fd(),
        ring_max_udp_len: u16::MAX,
        passed_counter_fd: passed.fd(),
    };
    let program = Program::load(&redirect_program(&steering), "nicmsg_lm").expect("load");
    let _link = program
        .attach(interface.index, AttachMode::Generic)
        .expect("attach");
    ready.send(()).expect("sender waits");
    let mut report = Vec::new();
    for (seed, &len) in SIZES.iter().enumerate() {
        let key = TransferKey(seed as u32 + 1);
        let started = Instant::now();
        let stats = place_one(&mut socket, geometry, key, len, grants);
        let region =
            &socket.receiving_memory()[REGION_AT..REGION_AT + geometry.receive_region_len(len)];
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
    assert_eq!(passed.read(), 0, "every frame went to the ring");
    grants.send((usize::MAX, 0)).ok();
    report
}

/// Places one transfer: posts a window of slots (mirror and fill ring together), grants them,
/// and checks every landing against the slot it took.
fn place_one(
    socket: &mut XskSocket,
    geometry: Geometry,
    key: TransferKey,
    len: usize,
    grants: &mpsc::Sender<(usize, u32)>,
) -> nicmsg_lm::placement::PlacementStats {
    let mut placement = Placement::new(key, geometry, len as u64, WINDOW).expect("placement");
    let mut fill = FillQueue::new(4096);
    let region_len = placement.region_len();
    let started = Instant::now();
    post_and_grant(socket, &mut placement, &mut fill, len, grants);
    while !placement.is_complete() {
        assert!(
            started.elapsed() < DEADLINE,
            "{len} B: frames stopped landing"
        );
        let mut landed = Vec::new();
        socket.take_landed(64, |position, bytes| landed.push((position, bytes)));
        for (position, bytes) in landed {
            let slot = fill.device_take();
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
            let memory = socket.receiving_memory();
            let region = &mut memory[REGION_AT..REGION_AT + region_len];
            placement.landed(index, true, region);
        }
        post_and_grant(socket, &mut placement, &mut fill, len, grants);
    }
    placement.finish(&mut fill);
    *placement.stats()
}

fn post_and_grant(
    socket: &mut XskSocket,
    placement: &mut Placement,
    fill: &mut FillQueue,
    len: usize,
    grants: &mpsc::Sender<(usize, u32)>,
) {
    let geometry = *placement.geometry();
    let region_len = placement.region_len();
    let mut addresses = Vec::new();
    let memory = socket.receiving_memory();
    let region = &memory[REGION_AT..REGION_AT + region_len];
    let posted = placement
        .post_slots(fill, region, &mut |slot| {
            if let Slot::Placement { index, .. } = slot {
                addresses
                    .push((REGION_AT + geometry.landing_offset(index) - KERNEL_HEADROOM) as u64);
            }
        })
        .expect("fill queue room");
    for address in addresses {
        assert!(socket.post_fill(address), "fill ring room");
    }
    socket.publish_fill();
    if posted > 0 {
        let floor = placement.grant_floor();
        grants.send((len, floor)).expect("sender listens");
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

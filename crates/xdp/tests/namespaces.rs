//! Two AF_XDP transports in two network namespaces joined by a veth pair: the kernel's verifier
//! accepts the program, short frames travel through the rings and long ones through the
//! kernel (counted by the program), a GSO stream arrives whole, and a peer on plain UDP talks to
//! one on AF_XDP. Needs root and `ip`; skips itself (saying why) otherwise.
//!
//! Each transport is opened on a thread that entered its namespace (`setns`): sockets, the
//! interface lookup and the program's attachment all happen in the namespace of the thread that
//! makes them.

mod common;

use common::{address_of, enter, Pair};
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nicmsg_udp::{UdpOptions, UdpTransport};
use nicmsg_xdp::{XdpTransport, RING_MAX_PAYLOAD};

const PORT: u16 = 7471;
const DEADLINE: Duration = Duration::from_secs(5);

fn bind(rank: usize) -> UdpTransport {
    UdpTransport::bind(UdpOptions {
        bind: SocketAddr::V4(SocketAddrV4::new(address_of(rank), PORT)),
        ..UdpOptions::default()
    })
    .expect("bind")
}

/// What one side of a test does once its transport knows its peer.
enum Side {
    Xdp(Box<XdpTransport>),
    Udp(Box<UdpTransport>),
}

impl Side {
    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> usize {
        match self {
            Side::Xdp(t) => t.send(frames),
            Side::Udp(t) => t.send_batch(frames),
        }
        .expect("send")
    }

    /// Receives until `want` frames arrived from rank `from`; returns their bytes.
    fn receive(&mut self, from: u32, want: usize) -> Vec<Vec<u8>> {
        let start = Instant::now();
        let mut out = Vec::new();
        while out.len() < want && start.elapsed() < DEADLINE {
            let mut deliver = |origin: nicmsg_engine::Origin, bytes: &[u8]| {
                assert_eq!(origin.rank, Some(from), "frame from an unknown source");
                out.push(bytes.to_vec());
            };
            match self {
                Side::Xdp(t) => t.receive(&mut deliver).expect("receive"),
                Side::Udp(t) => {
                    let n = t.recv_batch().expect("receive");
                    for i in 0..n {
                        deliver(
                            nicmsg_engine::Origin::rank(t.received_rank(i)),
                            t.received(i).1,
                        );
                    }
                    n
                }
            };
        }
        out
    }
}

/// Opens both sides in their namespaces (rank 0 on AF_XDP, rank 1 on AF_XDP or plain UDP),
/// exchanges addresses, and runs `script(rank, side)` on each thread.
fn run(pair: &Pair, rank1_on_xdp: bool, script: fn(usize, &mut Side)) {
    let (to_main, from_threads) = mpsc::channel();
    let (to_threads, from_main): (Vec<_>, Vec<_>) = (0..2).map(|_| mpsc::channel()).unzip();
    let mut handles = Vec::new();
    for (rank, table) in from_main.into_iter().enumerate() {
        let name = pair.names[rank].clone();
        let to_main = to_main.clone();
        handles.push(thread::spawn(move || {
            enter(&name);
            let udp = bind(rank);
            let mut side = if rank == 0 || rank1_on_xdp {
                let xdp = XdpTransport::open(udp).unwrap_or_else(|e| panic!("AF_XDP: {e:?}"));
                to_main.send((rank, Some(xdp.link_address()))).unwrap();
                Side::Xdp(Box::new(xdp))
            } else {
                let mac = nicmsg_xdp::Interface::with_address(address_of(rank))
                    .unwrap()
                    .map(|i| i.mac);
                to_main.send((rank, mac)).unwrap();
                Side::Udp(Box::new(udp))
            };
            let macs: Vec<Option<[u8; 6]>> = table.recv().unwrap();
            let addresses = (0..2).map(|r| SocketAddr::V4(SocketAddrV4::new(address_of(r), PORT)));
            let peers: Vec<(SocketAddr, Option<[u8; 6]>)> = addresses.zip(macs).collect();
            match &mut side {
                Side::Xdp(t) => t.set_peers(&peers),
                Side::Udp(t) => t.set_peers(&peers.iter().map(|p| p.0).collect::<Vec<_>>()),
            }
            script(rank, &mut side);
            side
        }));
    }
    let mut macs = [None; 2];
    for _ in 0..2 {
        let (rank, mac) = from_threads.recv().expect("a side opened");
        macs[rank] = mac;
    }
    for to_thread in &to_threads {
        to_thread.send(macs.to_vec()).unwrap();
    }
    for handle in handles {
        handle.join().expect("a side failed");
    }
}

fn frame(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

impl Side {
    fn xdp(&self) -> &XdpTransport {
        match self {
            Side::Xdp(t) => t,
            Side::Udp(_) => panic!("this side is on UDP"),
        }
    }
}

#[test]
fn short_frames_take_the_ring_and_long_ones_the_kernel() {
    let Some(pair) = Pair::create("nicmsg-xdp-test-a") else {
        return;
    };
    run(&pair, true, |rank, side| {
        let short = frame(64, 1);
        let long = frame(RING_MAX_PAYLOAD + 200, 2);
        if rank == 0 {
            // Alone and short: through the ring; long: through the kernel.
            assert_eq!(side.send(&[(1, &[&short[..32], &short[32..]])]), 1);
            assert_eq!(side.send(&[(1, &[&long])]), 1);
            let stats = *side.xdp().stats();
            assert_eq!(stats.frames_sent, 1, "{stats:?}");
            assert_eq!(stats.frames_sent_by_kernel, 1, "{stats:?}");
            return;
        }
        let got = side.receive(0, 2);
        assert!(got.contains(&short) && got.contains(&long), "{got:?}");
        let stats = *side.xdp().stats();
        assert_eq!(
            stats.frames_received, 1,
            "the short frame by the ring: {stats:?}"
        );
        assert_eq!(
            stats.frames_received_by_kernel, 1,
            "the long one by the kernel: {stats:?}"
        );
        assert_eq!(side.xdp().passed_to_kernel(), 1, "the program counted it");
    });
}

#[test]
fn a_stream_arrives_whole_and_in_the_kernel_path() {
    let Some(pair) = Pair::create("nicmsg-xdp-test-b") else {
        return;
    };
    run(&pair, true, |rank, side| {
        // 64 equal frames in one call: a stream, sent as GSO datagrams.
        let frames: Vec<Vec<u8>> = (0..64).map(|i| frame(1400, i as u8)).collect();
        if rank == 0 {
            let batch: Vec<[&[u8]; 1]> = frames.iter().map(|f| [&f[..]]).collect();
            let batch: Vec<(u32, &[&[u8]])> = batch.iter().map(|p| (1, &p[..])).collect();
            assert_eq!(side.send(&batch), 64);
            assert_eq!(side.xdp().stats().frames_sent_by_kernel, 64);
            return;
        }
        let mut got = side.receive(0, 64);
        got.sort();
        let mut expected = frames.clone();
        expected.sort();
        assert_eq!(got, expected, "every frame once, intact");
    });
}

#[test]
fn a_rank_on_udp_and_a_rank_on_af_xdp_talk() {
    let Some(pair) = Pair::create("nicmsg-xdp-test-c") else {
        return;
    };
    run(&pair, false, |rank, side| {
        let short = frame(100, 3);
        let long = frame(1300, 4);
        let peer = 1 - rank as u32;
        // Rank 0 (AF_XDP) speaks first; rank 1 (UDP) answers what it got.
        if rank == 0 {
            side.send(&[(peer, &[&short])]);
            side.send(&[(peer, &[&long])]);
            let answers = side.receive(peer, 2);
            assert!(answers.contains(&short) && answers.contains(&long));
        } else {
            for bytes in side.receive(peer, 2) {
                side.send(&[(peer, &[&bytes])]);
            }
        }
    });
}

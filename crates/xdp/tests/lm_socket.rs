//! LM end to end on real sockets (`nicmsg_xdp::LmSocket`): a receiver in one namespace places
//! admitted transfers through its AF_XDP socket and placing filter; a sender in the other
//! namespace sends transfers of 1 B to 64 MiB from send buffers with header holes in its
//! AF_XDP socket's UMEM, through the transmit ring; a third node beside it sends to the same
//! receiver at the same time from heap buffers through a kernel UDP socket, and is refused
//! placement while the receiver is busy (its transfers come by copy). Every byte is checked;
//! the receiver's counters show what was placed and what copied. Run clean and under 5 % loss
//! (nftables on the bridge between the namespaces, which every frame crosses, whether the
//! kernel's stack or the transmit ring sent it), at MTU 1500 and at MTU 9000 (each frame placed
//! across three AF_XDP buffers, scatter-gather). Needs root, `ip` and `nft`; skips itself
//! (saying why) otherwise.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{address_of, enter, Pair};
use nicmsg_lm::station::{Event, Received};
use nicmsg_xdp::{LmSocket, LmSocketConfig, LmSocketStats, HEADERS_LEN, MAX_FRAME_BYTES};

const JOB: u32 = 0x4c4d;
const LARGEST: usize = 64 << 20;
/// The frame header's length: a frame's payload is the UDP payload less it.
const FRAME_HEADER: usize = 48;
/// Transfers of the sender, the second and third one frame and one byte more: `frame` is one
/// frame's payload.
fn sender_sizes(frame: usize) -> [usize; 8] {
    [
        1,
        frame,
        frame + 1,
        65_536,
        1 << 20,
        5_000_003,
        8 << 20,
        LARGEST,
    ]
}
const SENDER_TRANSFERS: u32 = 8;
const THIRD_SIZES: [usize; 4] = [3_000, 65_536, 1 << 20, 4 << 20];
const DEADLINE: Duration = Duration::from_secs(120);

const RECEIVER: u32 = 0;
const SENDER: u32 = 1;
const THIRD: u32 = 2;

/// Per (sender, its number for the transfer): the length received and whether it was placed.
type Arrivals = BTreeMap<(u32, u32), (usize, bool)>;

fn byte(from: u32, number: u32, offset: usize) -> u8 {
    ((offset * 131 + from as usize * 7 + number as usize * 13) % 251) as u8
}

fn peers() -> Vec<SocketAddrV4> {
    vec![
        SocketAddrV4::new(address_of(0), 7490),
        SocketAddrV4::new(address_of(1), 7491),
        SocketAddrV4::new(address_of(1), 7492),
    ]
}

/// The link's MTU and the UDP payload of a frame on it.
#[derive(Debug, Clone, Copy)]
struct Link {
    mtu: u32,
    udp_payload: usize,
}

const MTU_1500: Link = Link {
    mtu: 1500,
    udp_payload: 1472,
};
const MTU_9000: Link = Link {
    mtu: 9000,
    udp_payload: 8972,
};

#[test]
fn transfers_of_1_byte_to_64_mib_are_placed_with_a_third_sender_clean() {
    run("nmls", 0, MTU_1500);
}

#[test]
fn transfers_of_1_byte_to_64_mib_are_placed_with_a_third_sender_under_5_percent_loss() {
    run("nmll", 5, MTU_1500);
}

#[test]
fn jumbo_frames_are_placed_across_buffers_clean() {
    run("nmjs", 0, MTU_9000);
}

#[test]
fn jumbo_frames_are_placed_across_buffers_under_5_percent_loss() {
    run("nmjl", 5, MTU_9000);
}

/// Whether the running kernel is at least `major.minor` (from `uname`'s release).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: an all-zero utsname is valid; uname fills it.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a valid utsname to write.
    if unsafe { libc::uname(&mut name) } != 0 {
        return false;
    }
    // SAFETY: uname wrote a NUL-terminated release string.
    let release = unsafe { std::ffi::CStr::from_ptr(name.release.as_ptr()) };
    let mut parts = release
        .to_string_lossy()
        .split(['.', '-'])
        .map(|part| part.parse::<u32>().unwrap_or(0))
        .collect::<Vec<_>>()
        .into_iter();
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

fn run(prefix: &str, loss_percent: u32, link: Link) {
    let spans_buffers = HEADERS_LEN + link.udp_payload > MAX_FRAME_BYTES;
    if spans_buffers && !kernel_at_least(6, 6) {
        eprintln!("skipped: frames longer than an AF_XDP chunk need XDP_USE_SG (kernel 6.6)");
        return;
    }
    let Some(pair) = Pair::create_bridged(prefix) else {
        return;
    };
    if link.mtu != 1500 && !pair.set_mtu(link.mtu) {
        eprintln!("skipped: the links cannot take MTU {}", link.mtu);
        return;
    }
    let sender_sizes = sender_sizes(link.udp_payload - FRAME_HEADER);
    if loss_percent > 0 && !pair.drop_on_bridge(loss_percent) {
        eprintln!("skipped: `nft` cannot add the loss rules here");
        return;
    }
    let senders_done = Arc::new(AtomicBool::new(false));
    let big_placed = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (ns, done, big) = (
            pair.names[0].clone(),
            Arc::clone(&senders_done),
            Arc::clone(&big_placed),
        );
        thread::spawn(move || {
            enter(&ns);
            receive(&done, &big, link)
        })
    };
    // The receiver's filter must be attached before anything is sent.
    thread::sleep(Duration::from_millis(300));
    let sender = {
        let ns = pair.names[1].clone();
        thread::spawn(move || {
            enter(&ns);
            send(SENDER, &sender_sizes, None, link)
        })
    };
    let third = {
        let (ns, big) = (pair.names[1].clone(), Arc::clone(&big_placed));
        thread::spawn(move || {
            enter(&ns);
            send(THIRD, &THIRD_SIZES, Some(&big), link)
        })
    };
    let (sent, sender_stats) = sender.join().expect("sender");
    let (third_sent, third_stats) = third.join().expect("third");
    for (who, s) in [("sender", sender_stats), ("third", third_stats)] {
        eprintln!(
            "{who}: {} transfers sent, {} frames sent, {} resent; by the transmit ring {} \
             data frames and {} control frames, by sendto {} frames; {} heap buffers",
            s.station.transfers_sent,
            s.station.frames_sent,
            s.station.frames_resent,
            s.ring_frames,
            s.ring_controls,
            s.kernel_frames,
            s.heap_send_buffers
        );
    }
    assert!(
        sender_stats.ring_frames >= sender_stats.station.frames_sent / 2,
        "the sender's data left through the transmit ring: {sender_stats:?}"
    );
    assert_eq!(sender_stats.heap_send_buffers, 0, "{sender_stats:?}");
    if loss_percent == 0 {
        // On a clean link nothing is lost: what the sender sends again is its probes of a
        // silence, and the frames of the rare hole veth makes by reordering a sender that
        // moved between CPUs. A receiver that took the copy of a frame already landed for
        // one held for its slot asked for whole runs again: half the frames or more twice.
        let (sent, resent) = (
            sender_stats.station.frames_sent,
            sender_stats.station.frames_resent,
        );
        assert!(
            resent * 20 <= sent,
            "{resent} of {sent} frames sent again on a clean link: {sender_stats:?}"
        );
    }
    assert_eq!(third_stats.ring_frames, 0, "{third_stats:?}");
    senders_done.store(true, Ordering::Release);
    let (received, stats) = receiver.join().expect("receiver");
    report(link, loss_percent, (&sent, &third_sent), &received, &stats);
    let s = stats.station;
    for (from, sizes) in [(SENDER, &sent), (THIRD, &third_sent)] {
        for (number, &len) in sizes.iter().enumerate() {
            let got = received.get(&(from, number as u32 + 1));
            assert_eq!(
                got.map(|r| r.0),
                Some(len),
                "node {from}'s transfer {} of {len} B",
                number + 1
            );
        }
    }
    let largest = received[&(SENDER, SENDER_TRANSFERS)];
    assert!(largest.1, "the 64 MiB transfer was placed");
    assert_eq!(
        s.copied_bytes_placed, 0,
        "admitted transfers copied nothing: {s:?}"
    );
    assert!(s.placed_bytes >= LARGEST as u64, "{s:?}");
    assert!(
        s.one_copy_transfers > 0,
        "the third node was served by copy: {s:?}"
    );
    assert_eq!(stats.desyncs, 0);
    drop(pair);
}

fn open(me: u32, (placing_bytes, sending_bytes): (usize, usize), link: Link) -> LmSocket {
    LmSocket::open(LmSocketConfig {
        peers: peers(),
        me,
        job: JOB,
        udp_payload: link.udp_payload,
        placing_bytes,
        sending_bytes,
    })
    .expect("an LM socket")
}

/// Sends `sizes` one after another; a node given `wait_for` starts when it is set (the
/// receiver places the sender's largest transfer), so that it is refused placement. The
/// sender sends through the transmit ring from buffers in its UMEM (the placing memory it
/// opens is not used: nobody sends to it), the third node from heap buffers by `sendto`
/// (one XDP program per interface: they share a namespace).
fn send(
    me: u32,
    sizes: &[usize],
    wait_for: Option<&AtomicBool>,
    link: Link,
) -> (Vec<usize>, LmSocketStats) {
    let mut socket = match me {
        SENDER => open(me, (1 << 20, LARGEST + LARGEST / 8), link),
        _ => open(me, (0, 0), link),
    };
    let started = Instant::now();
    while wait_for.is_some_and(|flag| !flag.load(Ordering::Acquire)) {
        assert!(started.elapsed() < DEADLINE, "node {me}: never started");
        thread::sleep(Duration::from_millis(1));
    }
    let mut sent = Vec::new();
    for (at, &len) in sizes.iter().enumerate() {
        let number = at as u32 + 1;
        let mut buffer = socket.send_buffer(len).expect("a send buffer");
        let geometry = socket.geometry();
        for (index, piece) in buffer.pieces_mut().enumerate() {
            let start = geometry.payload_range(len, index as u32).start;
            for (i, b) in piece.iter_mut().enumerate() {
                *b = byte(me, number, start + i);
            }
        }
        socket
            .send(RECEIVER, buffer)
            .map_err(|(e, _)| e)
            .expect("send");
        loop {
            assert!(
                started.elapsed() < DEADLINE,
                "node {me}: transfer of {len} B stuck"
            );
            socket.progress().expect("progress");
            match socket.poll_event() {
                Some(Event::Sent { outcome, .. }) => {
                    outcome.expect("delivered");
                    break;
                }
                Some(_) => {}
                None => socket.wait(Duration::from_millis(5)),
            }
        }
        sent.push(len);
    }
    (sent, socket.stats())
}

/// Receives until both senders are done; returns (len, placed) per (sender, number). Sets
/// `big_placed` once every transfer of the sender but its last is in and the last is placed.
fn receive(
    senders_done: &AtomicBool,
    big_placed: &AtomicBool,
    link: Link,
) -> (Arrivals, LmSocketStats) {
    let mut socket = open(RECEIVER, (2 * (LARGEST + (1 << 20)), 0), link);
    let mut received = BTreeMap::new();
    let mut placed_before_big = u64::MAX;
    let started = Instant::now();
    while !senders_done.load(Ordering::Acquire) {
        assert!(started.elapsed() < DEADLINE, "the senders never finished");
        socket.progress().expect("progress");
        let earlier = (1..SENDER_TRANSFERS).all(|n| received.contains_key(&(SENDER, n)));
        if earlier
            && socket.placing_from() == Some(SENDER)
            && socket.station_stats().placed_frames > placed_before_big
        {
            big_placed.store(true, Ordering::Release);
        }
        let Some(event) = socket.poll_event() else {
            socket.wait(Duration::from_millis(5));
            continue;
        };
        let Event::Received {
            from,
            number,
            message,
        } = event
        else {
            continue;
        };
        let (len, placed) = match message {
            Received::Copied(bytes) => (check(from, number, &bytes), false),
            Received::Placed { region, range } => {
                let len = check(from, number, &socket.region(region)[range]);
                socket.release(region);
                (len, true)
            }
        };
        assert!(
            received.insert((from, number), (len, placed)).is_none(),
            "delivered twice"
        );
        if (from, number) == (SENDER, SENDER_TRANSFERS - 1) {
            placed_before_big = socket.station_stats().placed_frames;
        }
    }
    (received, socket.stats())
}

fn check(from: u32, number: u32, bytes: &[u8]) -> usize {
    let wrong = bytes
        .iter()
        .enumerate()
        .position(|(i, &b)| b != byte(from, number, i));
    assert_eq!(
        wrong,
        None,
        "node {from}'s transfer {number} ({} B): wrong byte",
        bytes.len()
    );
    bytes.len()
}

fn report(
    link: Link,
    loss: u32,
    (sent, third): (&[usize], &[usize]),
    received: &Arrivals,
    stats: &LmSocketStats,
) {
    let s = &stats.station;
    let placed: Vec<usize> = received.values().filter(|r| r.1).map(|r| r.0).collect();
    eprintln!(
        "MTU {}, {loss} % loss: sender {} transfers ({} B largest), third {} transfers; placed {} \
         transfers ({placed:?} B), {} by copy; bytes placed {}, copied into placed regions {}, \
         copied for transfers by copy {}; frames placed {}, copied {}, held for their slot {}, \
         grants sent {}, resends asked {}, passed to the kernel \
         by the filter {}, dropped by the kernel on the way to the AF_XDP socket {}; AF_XDP \
         bound in {} mode",
        link.mtu,
        sent.len(),
        sent.iter().max().unwrap_or(&0),
        third.len(),
        s.placed_transfers,
        s.one_copy_transfers,
        s.placed_bytes,
        s.copied_bytes_placed,
        s.copied_bytes_one_copy,
        s.placed_frames,
        s.copied_frames,
        s.held_for_slot,
        s.grants_sent,
        s.resends_asked,
        stats.passed_to_kernel,
        stats.ring_drops,
        if stats.zero_copy { "zero-copy" } else { "copy" },
    );
}

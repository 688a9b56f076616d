//! Two transports on the loopback interface.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::{Duration, Instant};

use nicmsg_udp::{PeekedDatagram, UdpOptions, UdpTransport, MAX_PIECES, MAX_UDP_PAYLOAD_V4};

const DEADLINE: Duration = Duration::from_secs(2);

fn loopback_v4() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
}

fn bind(max_frame: usize, send_batch: usize) -> UdpTransport {
    UdpTransport::bind(UdpOptions {
        bind: loopback_v4(),
        max_frame,
        send_batch,
        ..UdpOptions::default()
    })
    .expect("bind on loopback")
}

/// Rank 0 and rank 1 on 127.0.0.1, each knowing both addresses.
fn pair(max_frame: usize, send_batch: usize) -> (UdpTransport, UdpTransport) {
    let mut a = bind(max_frame, send_batch);
    let mut b = bind(max_frame, send_batch);
    let peers = [a.local_addr(), b.local_addr()];
    a.set_peers(&peers);
    b.set_peers(&peers);
    (a, b)
}

/// Receives until `want` datagrams arrived (or the deadline passed), copying them out.
fn recv_n(t: &mut UdpTransport, want: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < want && start.elapsed() < DEADLINE {
        let n = t.recv_batch().expect("recv_batch");
        for i in 0..n {
            let (from, bytes) = t.received(i);
            out.push((from, bytes.to_vec()));
        }
        if n == 0 {
            std::thread::yield_now();
        }
    }
    out
}

/// Receives one batch by `plan` (waiting up to a second for it to arrive); how many datagrams.
///
/// # Safety
/// As `recv_batch_placed`: the plan's destinations are valid and untouched meanwhile.
unsafe fn recv_placed_batch(receiver: &mut UdpTransport, plan: &[nicmsg_udp::Placement]) -> usize {
    for _ in 0..1000 {
        // SAFETY: forwarded from this function's contract.
        let count = unsafe { receiver.recv_batch_placed(plan) }.unwrap();
        if count > 0 {
            return count;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    0
}

/// A plan guessing frames of 24 bytes of header and `frame` bytes of payload, one after
/// another over `dest`.
fn plan_over(dest: &mut [u8], frame: usize) -> Vec<nicmsg_udp::Placement> {
    dest.chunks_mut(frame)
        .map(|piece| nicmsg_udp::Placement {
            header_len: 24,
            dest: piece.as_mut_ptr(),
            len: frame,
        })
        .collect()
}

/// Sends `payload` to rank 1 in frames of `header` and `chunk` bytes of it, in one batch;
/// how many frames the transport took.
fn send_in_frames(sender: &mut UdpTransport, header: &[u8], payload: &[u8], chunk: usize) -> usize {
    let pieces: Vec<[&[u8]; 2]> = payload.chunks(chunk).map(|c| [header, c]).collect();
    let frames: Vec<(u32, &[&[u8]])> = pieces.iter().map(|p| (1, &p[..])).collect();
    sender.send_batch(&frames).unwrap()
}

/// Deterministic bytes for frame `seq`.
fn pattern(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}

#[test]
fn batches_of_gathered_datagrams_arrive_concatenated() {
    let (mut a, mut b) = pair(1472, 64);
    // Three sendmmsg calls of at most 64, and few enough datagrams (about 1.2 KiB of receive
    // buffer each) to fit the kernel's default 208 KiB receive buffer, should the 4 MiB request
    // be capped on a machine where the test is not root.
    const FRAMES: usize = 130;
    // Frame `seq`: an 8-byte header holding `seq`, then `seq % 17` payload pieces (0 to 16) of
    // varied lengths, some empty, cut from one user buffer.
    let user = pattern(1, 4096);
    let headers: Vec<[u8; 8]> = (0..FRAMES).map(|s| (s as u64).to_le_bytes()).collect();
    let mut piece_lists: Vec<Vec<&[u8]>> = Vec::new();
    for (seq, header) in headers.iter().enumerate() {
        let mut pieces: Vec<&[u8]> = vec![header];
        let mut at = seq * 5;
        for p in 0..seq % MAX_PIECES {
            let len = (seq + p * 13) % 80;
            pieces.push(&user[at..at + len]);
            at += len + 1;
        }
        piece_lists.push(pieces);
    }
    let frames: Vec<(u32, &[&[u8]])> = piece_lists.iter().map(|p| (1, &p[..])).collect();
    assert_eq!(a.send_batch(&frames).unwrap(), FRAMES);
    let stats = a.stats();
    assert_eq!(stats.datagrams_sent, FRAMES as u64);
    assert_eq!(stats.send_errors.total(), 0);
    if stats.send_would_block == 0 {
        assert_eq!(stats.send_syscalls, FRAMES.div_ceil(64) as u64);
    }

    let got = recv_n(&mut b, FRAMES);
    assert_eq!(got.len(), FRAMES);
    let mut seen = [false; FRAMES];
    for (from, bytes) in &got {
        assert_eq!(*from, a.local_addr());
        assert_eq!(b.peer_of(from), Some(0));
        let seq = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert!(!seen[seq], "duplicate {seq}");
        seen[seq] = true;
        assert_eq!(*bytes, piece_lists[seq].concat(), "frame {seq}");
    }
    let expected_bytes: usize = piece_lists.iter().map(|p| p.concat().len()).sum();
    assert_eq!(b.stats().datagrams_received, FRAMES as u64);
    assert_eq!(b.stats().bytes_received, expected_bytes as u64);
    assert_eq!(a.stats().bytes_sent, expected_bytes as u64);

    // And back, through the batch builder.
    let reply = pattern(9, 1000);
    let mut batch = b.batch();
    assert!(batch.push(0, &[b"re", &reply[..500], &reply[500..]]));
    assert!(batch.push(0, &[b"re"]));
    assert_eq!(batch.send().unwrap(), 2);
    drop(batch);
    let got = recv_n(&mut a, 2);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, [&b"re"[..], &reply].concat());
    assert_eq!(got[1].1, b"re");
    assert_eq!(a.received_rank(1), Some(1));
}

#[test]
fn zero_length_payloads_and_datagrams() {
    let (mut a, mut b) = pair(1472, 64);
    let header = [0xABu8; 8];
    let none: &[u8] = &[];
    let frames: [(u32, &[&[u8]]); 3] = [(1, &[&header, none]), (1, &[]), (1, &[none, none])];
    assert_eq!(a.send_batch(&frames).unwrap(), 3);
    let got = recv_n(&mut b, 3);
    let mut lens: Vec<usize> = got.iter().map(|(_, bytes)| bytes.len()).collect();
    lens.sort();
    assert_eq!(lens, [0, 0, 8]);
    assert_eq!(b.stats().datagrams_received, 3);
}

#[test]
fn max_size_datagrams_on_loopback() {
    let (mut a, mut b) = pair(MAX_UDP_PAYLOAD_V4, 64);
    let user = pattern(3, 2 * MAX_UDP_PAYLOAD_V4);
    let header = [0x5Au8; 51];
    // Header plus 16 payload pieces of 4091 bytes: 51 + 16 * 4091 = 65507.
    let piece = (MAX_UDP_PAYLOAD_V4 - header.len()) / 16;
    assert_eq!(header.len() + 16 * piece, MAX_UDP_PAYLOAD_V4);
    for round in 0..4 {
        let base = round * 1000;
        let mut pieces: Vec<&[u8]> = vec![&header];
        pieces.extend((0..16).map(|p| &user[base + p * piece..base + (p + 1) * piece]));
        assert_eq!(pieces.len(), MAX_PIECES);
        assert_eq!(a.send_batch(&[(1, &pieces)]).unwrap(), 1);
        let got = recv_n(&mut b, 1);
        assert_eq!(got.len(), 1, "round {round}");
        assert_eq!(got[0].1.len(), MAX_UDP_PAYLOAD_V4);
        assert_eq!(got[0].1, pieces.concat());
    }
    // One byte more is refused before the kernel, and the next frame still goes.
    let big = vec![1u8; MAX_UDP_PAYLOAD_V4 + 1];
    let frames: [(u32, &[&[u8]]); 2] = [(1, &[&big]), (1, &[&big[..10]])];
    assert_eq!(a.send_batch(&frames).unwrap(), 2);
    assert_eq!(a.stats().send_errors.oversize, 1);
    assert_eq!(a.stats().datagrams_sent, 5);
    assert_eq!(recv_n(&mut b, 1)[0].1, &big[..10]);
    assert_eq!(b.stats().truncated, 0);
}

#[test]
fn empty_socket_would_block() {
    let mut t = bind(1472, 64);
    assert_eq!(t.recv_batch().unwrap(), 0);
    assert_eq!(t.recv_batch().unwrap(), 0);
    assert_eq!(t.received_count(), 0);
    let stats = t.stats();
    assert_eq!(stats.recv_would_block, 2);
    assert_eq!(stats.recv_syscalls, 2);
    assert_eq!(stats.datagrams_received, 0);
    // Non-blocking: the descriptor has O_NONBLOCK.
    // SAFETY: fcntl on our own open descriptor.
    let flags = unsafe { libc::fcntl(t.fd(), libc::F_GETFL) };
    assert_ne!(flags & libc::O_NONBLOCK, 0);
}

#[test]
fn peer_lookup() {
    let mut t = bind(1472, 64);
    let v6: SocketAddr = "[fd00::7]:7000".parse().unwrap();
    let peers: Vec<SocketAddr> = vec![
        "10.0.0.3:7000".parse().unwrap(),
        "10.0.0.1:7000".parse().unwrap(),
        "10.0.0.1:7001".parse().unwrap(),
        v6,
        "10.0.0.3:7000".parse().unwrap(), // same address as rank 0: lookups give rank 0
    ];
    t.set_peers(&peers);
    assert_eq!(t.peer_count(), 5);
    for (rank, addr) in peers.iter().enumerate().take(4) {
        assert_eq!(t.peer_of(addr), Some(rank as u32));
    }
    assert_eq!(t.peer_of(&peers[4]), Some(0));
    // An IPv4-mapped source (as a dual-stack socket reports it) is the IPv4 peer.
    assert_eq!(
        t.peer_of(&"[::ffff:10.0.0.1]:7001".parse().unwrap()),
        Some(2)
    );
    // The flow label does not matter.
    let labelled = SocketAddr::V6(SocketAddrV6::new("fd00::7".parse().unwrap(), 7000, 5, 0));
    assert_eq!(t.peer_of(&labelled), Some(3));
    assert_eq!(t.peer_of(&"10.0.0.2:7000".parse().unwrap()), None);
    assert_eq!(t.peer_of(&"10.0.0.1:7002".parse().unwrap()), None);
    t.set_peers(&[]);
    assert_eq!(t.peer_of(&peers[0]), None);
}

#[test]
fn a_closed_port_is_reported_as_refused_and_costs_no_other_datagram() {
    let (mut t, mut live) = pair(1472, 64);
    // Bound, then closed at once (after the pair, which could otherwise get its port again).
    let closed = bind(1472, 64).local_addr();
    t.set_peers(&[closed, live.local_addr()]);
    let payload = [1u8; 100];
    let mut refused = Vec::new();
    let mut rounds = 0;
    // The ICMP answer comes a moment after the datagram (and the kernel may delay or drop
    // some under its global ICMP rate limit): keep sending until one is reported.
    let start = Instant::now();
    while refused.is_empty() && start.elapsed() < DEADLINE {
        rounds += 1;
        let frames: [(u32, &[&[u8]]); 2] = [(0, &[&payload]), (1, &[&payload[..1]])];
        assert_eq!(t.send_batch(&frames).unwrap(), 2);
        // A pending refusal is reported once by the next receive, or consumed by the next
        // datagram of a `sendmmsg` (which then reports nothing): the error queue is the only
        // record, read when the caller says so (a poller's EPOLLERR, or a periodic look).
        assert_eq!(t.recv_batch().unwrap(), 0);
        t.note_socket_error();
        t.take_refused(&mut |rank| refused.push(rank));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!refused.is_empty(), "the closed port was never reported");
    assert!(refused.iter().all(|&rank| rank == 0), "{refused:?}");
    assert_eq!(t.stats().refusals, refused.len() as u64);
    // A refusal reported by a send is not that datagram's: the live peer got every one.
    assert_eq!(recv_n(&mut live, rounds).len(), rounds);
    assert_eq!(t.stats().datagrams_sent, 2 * rounds as u64);
    assert_eq!(t.stats().send_errors.total(), 0);
}

#[test]
fn per_datagram_errors_drop_only_that_datagram() {
    let (mut a, mut b) = pair(1472, 64);
    // Rank 2 is an IPv6 address, which an IPv4 socket cannot reach: the kernel refuses that
    // datagram alone (EAFNOSUPPORT). Rank 7 has no address.
    a.set_peers(&[
        a.local_addr(),
        b.local_addr(),
        "[fd00::1]:9".parse().unwrap(),
    ]);
    let p = [5u8; 10];
    let too_many: Vec<&[u8]> = vec![&p; MAX_PIECES + 1];
    let frames: [(u32, &[&[u8]]); 6] = [
        (1, &[&p[..1]]),
        (2, &[&p]),
        (1, &[&p[..2]]),
        (7, &[&p]),
        (1, &too_many),
        (1, &[&p[..3]]),
    ];
    assert_eq!(a.send_batch(&frames).unwrap(), 6);
    let errors = &a.stats().send_errors;
    assert_eq!(errors.other, 1);
    assert_eq!(errors.last_other_errno, libc::EAFNOSUPPORT);
    assert_eq!(errors.unknown_peer, 1);
    assert_eq!(errors.too_many_pieces, 1);
    assert_eq!(errors.total(), 3);
    assert_eq!(a.stats().datagrams_sent, 3);
    let mut lens: Vec<usize> = recv_n(&mut b, 3).iter().map(|(_, d)| d.len()).collect();
    lens.sort();
    assert_eq!(lens, [1, 2, 3]);
}

#[test]
fn batch_capacity_and_chunking() {
    let (mut a, mut b) = pair(1472, 4);
    let p = [9u8; 4];
    let mut batch = a.batch();
    assert_eq!(batch.capacity(), 4);
    for _ in 0..4 {
        assert!(batch.push(1, &[&p]));
    }
    assert!(batch.is_full());
    assert!(!batch.push(1, &[&p]));
    assert_eq!(batch.send().unwrap(), 4);
    assert!(batch.is_empty());
    // Frames still queued when the batch is dropped are not sent.
    assert!(batch.push(1, &[&p]));
    drop(batch);
    assert_eq!(a.batch().send().unwrap(), 0);
    assert_eq!(a.stats().datagrams_sent, 4);
    assert_eq!(a.stats().send_syscalls, 1);

    // Ten frames through a batch of four: three system calls.
    let pieces: [&[u8]; 1] = [&p];
    let frames: Vec<(u32, &[&[u8]])> = (0..10).map(|_| (1, &pieces[..])).collect();
    assert_eq!(a.send_batch(&frames).unwrap(), 10);
    assert_eq!(a.stats().send_syscalls, 4);
    assert_eq!(recv_n(&mut b, 14).len(), 14);
}

#[test]
fn truncated_datagrams_are_counted_and_skipped() {
    let mut small = UdpTransport::bind(UdpOptions {
        bind: loopback_v4(),
        max_frame: 100,
        ..UdpOptions::default()
    })
    .unwrap();
    let mut big = bind(1472, 64);
    big.set_peers(&[small.local_addr()]);
    let data = [3u8; 200];
    let frames: [(u32, &[&[u8]]); 3] = [(0, &[&data]), (0, &[&data[..100]]), (0, &[&data])];
    assert_eq!(big.send_batch(&frames).unwrap(), 3);
    let got = recv_n(&mut small, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.len(), 100);
    assert_eq!(small.recv_batch().unwrap(), 0);
    assert_eq!(small.stats().truncated, 2);
    assert_eq!(small.stats().datagrams_received, 1);
}

/// A datagram longer than `max_frame` (a peer with a larger MTU) is dropped and counted on
/// every receive path: with the kernel cutting it (no GRO: slots of `max_frame` bytes), with
/// GRO's 64 KiB slots (received whole, then refused), and into a placement plan.
#[test]
fn oversize_datagrams_are_counted_on_every_receive_path() {
    use nicmsg_udp::Placement;
    for gro in [false, true] {
        for placed in [false, true] {
            let mut receiver = UdpTransport::bind(UdpOptions {
                bind: loopback_v4(),
                max_frame: 100,
                gro,
                ..UdpOptions::default()
            })
            .unwrap();
            let sender = std::net::UdpSocket::bind(loopback_v4()).unwrap();
            let to = receiver.local_addr();
            sender.send_to(&[1u8; 101], to).unwrap();
            sender.send_to(&[2u8; 1400], to).unwrap();
            sender.send_to(&[3u8; 100], to).unwrap();
            let mut dest = vec![0u8; 52];
            let plan = [Placement {
                header_len: 48,
                dest: dest.as_mut_ptr(),
                len: dest.len(),
            }];
            let start = Instant::now();
            let mut got = 0;
            while got == 0 && start.elapsed() < DEADLINE {
                got = if placed {
                    // SAFETY: `dest` is ours and untouched during the call.
                    unsafe { receiver.recv_batch_placed(&plan) }.unwrap()
                } else {
                    receiver.recv_batch().unwrap()
                };
            }
            let what = format!("gro {gro}, placed {placed}");
            assert_eq!(got, 1, "{what}: only the 100-byte datagram is taken");
            // SAFETY: the plan's destination is still ours.
            unsafe { receiver.gather_placed(0) };
            assert_eq!(receiver.received(0).1, &[3u8; 100][..], "{what}");
            assert_eq!(receiver.stats().truncated, 2, "{what}");
            assert_eq!(receiver.stats().datagrams_received, 1, "{what}");
        }
    }
}

#[test]
fn options_are_checked() {
    let bad = |options: UdpOptions| UdpTransport::bind(options).unwrap_err().kind();
    let base = UdpOptions {
        bind: loopback_v4(),
        ..UdpOptions::default()
    };
    for options in [
        UdpOptions {
            max_frame: 0,
            ..base.clone()
        },
        UdpOptions {
            max_frame: MAX_UDP_PAYLOAD_V4 + 1,
            ..base.clone()
        },
        UdpOptions {
            recv_batch: 0,
            ..base.clone()
        },
        UdpOptions {
            send_batch: nicmsg_udp::MAX_BATCH + 1,
            ..base.clone()
        },
    ] {
        assert_eq!(bad(options), std::io::ErrorKind::InvalidInput);
    }
    let t = UdpTransport::bind(base).unwrap();
    assert_eq!(t.local_addr().ip(), Ipv4Addr::LOCALHOST);
    assert_ne!(t.local_addr().port(), 0);
    let (send, recv) = t.buffer_sizes().unwrap();
    assert!(send > 0 && recv > 0);
}

#[test]
fn ipv6_and_dual_stack() {
    let any6 = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0));
    let lo6 = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 0, 0, 0));
    let bind6 = |bind| {
        UdpTransport::bind(UdpOptions {
            bind,
            ..UdpOptions::default()
        })
    };
    let (Ok(mut dual), Ok(mut v6)) = (bind6(any6), bind6(lo6)) else {
        eprintln!("no IPv6 on this machine: skipped");
        return;
    };
    let mut v4 = bind(1472, 64);
    let dual_port = dual.local_addr().port();
    let dual_v4 = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, dual_port));
    let dual_v6 = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, dual_port, 0, 0));
    // Ranks: 0 = the dual-stack socket, 1 = the IPv4 socket, 2 = the IPv6 socket.
    let peers = [dual_v6, v4.local_addr(), v6.local_addr()];
    dual.set_peers(&peers);
    v6.set_peers(&peers);
    v4.set_peers(&[dual_v4, v4.local_addr()]);

    assert_eq!(v6.send_batch(&[(0, &[b"from v6"])]).unwrap(), 1);
    assert_eq!(v4.send_batch(&[(0, &[b"from v4"])]).unwrap(), 1);
    let got = recv_n(&mut dual, 2);
    assert_eq!(got.len(), 2);
    for (from, bytes) in &got {
        match &bytes[..] {
            b"from v6" => assert_eq!(dual.peer_of(from), Some(2)),
            b"from v4" => {
                // Reported as plain IPv4, not as ::ffff:127.0.0.1.
                assert_eq!(*from, v4.local_addr());
                assert_eq!(dual.peer_of(from), Some(1));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // The dual-stack socket reaches the IPv4 peer through a mapped address.
    assert_eq!(dual.send_batch(&[(1, &[b"to v4"])]).unwrap(), 1);
    assert_eq!(dual.stats().datagrams_sent, 1);
    assert_eq!(recv_n(&mut v4, 1)[0].1, b"to v4");
}

#[test]
fn transport_is_send_and_pieces_match_the_protocol() {
    fn assert_send<T: Send>() {}
    assert_send::<UdpTransport>();
    assert_eq!(MAX_PIECES, 1 + nicmsg_proto::MAX_SEGMENTS);
}

/// The speculative split: a datagram landing in a slot with a placement has its payload written
/// straight to the destination; a wrong guess can be put back together.
#[test]
fn placed_receive_scatters_and_gathers_back() {
    use nicmsg_udp::Placement;
    let mut options = UdpOptions {
        bind: "127.0.0.1:0".parse().unwrap(),
        max_frame: 2000,
        ..UdpOptions::default()
    };
    let mut receiver = UdpTransport::bind(options.clone()).unwrap();
    options.bind = "127.0.0.1:0".parse().unwrap();
    let mut sender = UdpTransport::bind(options).unwrap();
    sender.set_peers(&[receiver.local_addr()]);
    receiver.set_peers(&[sender.local_addr()]);
    let header = [7u8; 48];
    let payload: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    let long: Vec<u8> = (0..1500).map(|i| (i * 3) as u8).collect();
    let frames: [(u32, &[&[u8]]); 2] = [(0, &[&header, &payload]), (0, &[&header, &long])];
    assert_eq!(sender.send_batch(&frames).unwrap(), 2);
    let mut dest_a = vec![0u8; 1000];
    let mut dest_b = vec![0u8; 1000];
    let plan = [
        Placement {
            header_len: 48,
            dest: dest_a.as_mut_ptr(),
            len: 1000,
        },
        Placement {
            header_len: 48,
            dest: dest_b.as_mut_ptr(),
            len: 1000,
        },
    ];
    let mut count = 0;
    for _ in 0..1000 {
        // SAFETY: both destinations are our own vectors, untouched during the call.
        count = unsafe { receiver.recv_batch_placed(&plan) }.unwrap();
        if count > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(count, 2, "both datagrams in one batch");
    assert_eq!(receiver.placed(0), Some((0, 1000, 1048)));
    assert_eq!(receiver.received_head(0), &header[..]);
    assert_eq!(
        dest_a, payload,
        "the guessed payload went straight to its place"
    );
    assert_eq!(
        receiver.placed(1),
        None,
        "a datagram longer than its guess is not placed"
    );
    let (_, whole) = receiver.received(1);
    assert_eq!(&whole[..48], &header[..]);
    assert_eq!(
        &whole[48..],
        &long[..],
        "a wrong guess is put back together"
    );
}

/// A run of equal frames crosses the kernel as one GSO datagram, arrives as one GRO datagram,
/// and is read back as its frames; a plan chaining them puts every payload straight in place,
/// and a chain that guessed a length wrong is put back together from that frame on.
#[test]
fn gso_run_arrives_as_frames_placed_through_one_chain() {
    use nicmsg_udp::Placement;
    let (mut sender, mut receiver) = pair(1472, 64);
    let header = [9u8; 24];
    let payload: Vec<u8> = (0..5000).map(|i| (i * 7) as u8).collect();
    for guess_len in [1000, 900] {
        let pieces: Vec<[&[u8]; 2]> = payload
            .chunks(1000)
            .map(|chunk| [&header[..], chunk])
            .collect();
        let frames: Vec<(u32, &[&[u8]])> = pieces.iter().map(|p| (1, &p[..])).collect();
        assert_eq!(sender.send_batch(&frames).unwrap(), 5);
        assert_eq!(sender.stats().send_syscalls, sender.stats().gso_datagrams);
        let mut dest = vec![0u8; 5000];
        let plan: Vec<Placement> = (0..5)
            .map(|i| Placement {
                header_len: 24,
                dest: dest[i * 1000..].as_mut_ptr(),
                len: if i == 2 { guess_len } else { 1000 },
            })
            .collect();
        // SAFETY: the destinations are disjoint parts of our own vector, untouched meanwhile.
        let count = unsafe { recv_placed_batch(&mut receiver, &plan) };
        assert_eq!(count, 5, "the run is read back as its five frames");
        for i in 0..5 {
            let (_, whole_or_head) = receiver.received(i);
            if guess_len == 1000 || i < 2 {
                assert_eq!(receiver.placed(i), Some((i, 1000, 1024)));
                assert_eq!(receiver.received_head(i), &header[..]);
                assert_eq!(&dest[i * 1000..][..1000], &payload[i * 1000..][..1000]);
            } else {
                assert_eq!(
                    receiver.placed(i),
                    None,
                    "frame {i} lies past the wrong guess"
                );
                assert_eq!(whole_or_head.len(), 1024);
                assert_eq!(&whole_or_head[24..], &payload[i * 1000..][..1000]);
            }
        }
    }
    if receiver.gro() {
        assert_eq!(receiver.stats().gro_datagrams, 2);
    }
    assert_eq!(receiver.stats().datagrams_received, 10);
}

/// Frames too large for two to share a coalesced datagram (loopback's 64 KiB frames) are
/// planned one per slot even with GRO on, so every frame of a batch is placed, not only the
/// first.
#[test]
fn frames_too_large_to_coalesce_are_placed_one_per_receive() {
    let (mut sender, mut receiver) = pair(65_000, 64);
    let header = [5u8; 24];
    let payload: Vec<u8> = (0..120_000).map(|i| (i * 13) as u8).collect();
    assert_eq!(send_in_frames(&mut sender, &header, &payload, 40_000), 3);
    let mut dest = vec![0u8; 120_000];
    let plan = plan_over(&mut dest, 40_000);
    // Large guessed frames are read one per receive, each guessed afresh from what came
    // before (here: the rest of the plan), so a datagram between them shifts no guess.
    for i in 0..3 {
        // SAFETY: the destinations are disjoint parts of our own vector, untouched meanwhile.
        let count = unsafe { recv_placed_batch(&mut receiver, &plan[i..]) };
        assert_eq!(count, 1, "frame {i} alone");
        assert_eq!(receiver.placed(0), Some((0, 40_000, 40_024)), "frame {i}");
        assert_eq!(receiver.received_head(0), &header[..]);
    }
    assert_eq!(dest, payload);
}

/// Large frames that still share a coalesced datagram (20 KB each, three in one) are read one
/// coalesced datagram a receive, the plan laid over it: a batch would place the first
/// datagram's run and copy every datagram behind it, whose slots the plan does not reach.
#[test]
fn large_coalesced_frames_are_placed_one_datagram_a_receive() {
    let (mut sender, mut receiver) = pair(65_000, 64);
    if !receiver.gro() {
        eprintln!("skipped: this kernel does not coalesce UDP (UDP_GRO)");
        return;
    }
    let header = [5u8; 24];
    let payload: Vec<u8> = (0..100_000).map(|i| (i * 17) as u8).collect();
    assert_eq!(send_in_frames(&mut sender, &header, &payload, 20_000), 5);
    std::thread::sleep(Duration::from_millis(20));
    let mut dest = vec![0u8; 100_000];
    let plan = plan_over(&mut dest, 20_000);
    let mut next = 0;
    while next < plan.len() {
        // SAFETY: the destinations are disjoint parts of our own vector, untouched meanwhile.
        let count = unsafe { recv_placed_batch(&mut receiver, &plan[next..]) };
        assert!((1..=3).contains(&count), "one coalesced datagram: {count}");
        for frame in 0..count {
            assert_eq!(
                receiver.placed(frame),
                Some((frame, 20_000, 20_024)),
                "frame {}",
                next + frame
            );
        }
        next += count;
    }
    assert_eq!(dest, payload);
}

#[test]
fn a_datagram_between_large_guessed_frames_is_read_alone_and_shifts_no_guess() {
    let (mut sender, mut receiver) = pair(65_000, 64);
    let header = [5u8; 24];
    let control = [9u8; 40];
    let payload: Vec<u8> = (0..80_000).map(|i| (i * 7) as u8).collect();
    let (first, second) = payload.split_at(40_000);
    let pieces: [&[&[u8]]; 3] = [
        &[&control[..]],
        &[&header[..], first],
        &[&header[..], second],
    ];
    let frames: Vec<(u32, &[&[u8]])> = pieces.iter().map(|&p| (1, p)).collect();
    assert_eq!(sender.send_batch(&frames).unwrap(), 3);
    let mut dest = vec![0u8; 80_000];
    let plan = plan_over(&mut dest, 40_000);
    // SAFETY: as above.
    assert_eq!(unsafe { recv_placed_batch(&mut receiver, &plan) }, 1);
    assert_eq!(
        receiver.placed(0),
        None,
        "the small datagram is no guessed frame"
    );
    // SAFETY: its scattered bytes went to the first destination, still ours.
    unsafe { receiver.gather_placed(0) };
    assert_eq!(receiver.received(0).1, &control[..]);
    for i in 0..2 {
        // SAFETY: as above.
        assert_eq!(unsafe { recv_placed_batch(&mut receiver, &plan[i..]) }, 1);
        assert_eq!(receiver.placed(0), Some((0, 40_000, 40_024)), "frame {i}");
    }
    assert_eq!(dest, payload);
}

#[test]
fn a_plan_mixing_a_short_last_frame_with_large_ones_goes_one_per_slot() {
    use nicmsg_udp::Placement;
    let (mut sender, mut receiver) = pair(65_000, 64);
    let header = [5u8; 24];
    let payload: Vec<u8> = (0..41_000).map(|i| (i * 11) as u8).collect();
    let (short, large) = payload.split_at(1_000);
    let pieces: [&[&[u8]]; 2] = [&[&header[..], short], &[&header[..], large]];
    let frames: Vec<(u32, &[&[u8]])> = pieces.iter().map(|&p| (1, p)).collect();
    assert_eq!(sender.send_batch(&frames).unwrap(), 2);
    let mut dest = vec![0u8; 41_000];
    let (short_dest, large_dest) = dest.split_at_mut(1_000);
    let plan = [
        Placement {
            header_len: 24,
            dest: short_dest.as_mut_ptr(),
            len: 1_000,
        },
        Placement {
            header_len: 24,
            dest: large_dest.as_mut_ptr(),
            len: 40_000,
        },
    ];
    // Laid out from the short frame as one coalesced slot, the large one would be copied.
    for i in 0..2 {
        // SAFETY: as above.
        assert_eq!(unsafe { recv_placed_batch(&mut receiver, &plan[i..]) }, 1);
        let len = plan[i].len;
        assert_eq!(receiver.placed(0), Some((0, len, len + 24)), "frame {i}");
    }
    assert_eq!(dest, payload);
}

/// Sends `frames` (rank 1) as one batch: a run of equal frames goes as one GSO datagram. Waits
/// until every datagram is queued, so the receives that follow find a backlog.
fn send_run(sender: &mut UdpTransport, frames: &[Vec<u8>]) {
    let pieces: Vec<[&[u8]; 1]> = frames.iter().map(|f| [&f[..]]).collect();
    let batch: Vec<(u32, &[&[u8]])> = pieces.iter().map(|p| (1, &p[..])).collect();
    assert_eq!(sender.send_batch(&batch).unwrap(), frames.len());
    std::thread::sleep(Duration::from_millis(20));
}

/// Receives as many datagrams as `expected` holds and asserts they are those, in order.
fn receive_in_order(receiver: &mut UdpTransport, expected: &[Vec<u8>], what: &str) {
    let got: Vec<Vec<u8>> = recv_n(receiver, expected.len())
        .into_iter()
        .map(|(_, bytes)| bytes)
        .collect();
    assert_eq!(got, expected, "{what}");
}

/// Sends `frames` as one batch and, once they have all crossed, receives them; asserts they
/// arrive whole and in order.
fn send_run_and_receive(
    sender: &mut UdpTransport,
    receiver: &mut UdpTransport,
    frames: &[Vec<u8>],
) {
    send_run(sender, frames);
    receive_in_order(receiver, frames, "the run arrives whole, in order");
}

/// Sends one frame and receives it, then finds the socket empty (as an engine's next poll does).
fn ping_one(sender: &mut UdpTransport, receiver: &mut UdpTransport, seq: usize) {
    let frame = pattern(seq, 100);
    assert_eq!(sender.send_batch(&[(1, &[&frame[..]])]).unwrap(), 1);
    let got = recv_n(receiver, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, frame);
    assert_eq!(receiver.recv_batch().unwrap(), 0);
}

/// Batch receives cost every datagram (`UDP_GRO`, a second slot tried), so after a long
/// stretch of receives of one frame each the socket receives one datagram at a time with
/// `UDP_GRO` off, and goes back to batches when a run arrives (cut up by the kernel
/// meanwhile): the run's frames arrive whole either way, and the next run arrives coalesced.
#[test]
fn single_frames_are_received_one_at_a_time_and_runs_in_batches() {
    let (mut sender, mut receiver) = pair(1472, 64);
    for seq in 0..300 {
        ping_one(&mut sender, &mut receiver, seq);
    }
    assert_eq!(
        receiver.stats().to_single_frames,
        1,
        "{:?}",
        receiver.stats()
    );
    assert!(!receiver.gro());
    let calls = receiver.stats().recv_syscalls;
    let run: Vec<Vec<u8>> = (0..5).map(|seq| pattern(1000 + seq, 1000)).collect();
    send_run_and_receive(&mut sender, &mut receiver, &run);
    assert_eq!(receiver.stats().gro_datagrams, 0, "cut up while off");
    assert_eq!(receiver.stats().to_batches, 1, "{:?}", receiver.stats());
    assert_eq!(
        receiver.stats().recv_syscalls - calls,
        5,
        "one frame a call until four show a backlog, then the fifth in a batch"
    );
    let has_gro = receiver.gro();
    send_run_and_receive(&mut sender, &mut receiver, &run);
    if has_gro {
        assert_eq!(
            receiver.stats().gro_datagrams,
            1,
            "coalesced in batches again"
        );
    }
}

/// Single frames wait while a datagram is queued: one the kernel coalesced before `UDP_GRO`
/// went off would be read without the segment size that splits it. Receiving one datagram a
/// call, the receive that ends the stretch of single frames leaves a coalesced run queued.
#[test]
fn single_frames_wait_while_a_coalesced_run_is_queued() {
    let one_per_call = |max_frame| {
        UdpTransport::bind(UdpOptions {
            bind: loopback_v4(),
            max_frame,
            recv_batch: 1,
            ..UdpOptions::default()
        })
        .expect("bind on loopback")
    };
    let (mut sender, mut receiver) = (bind(1472, 64), one_per_call(1472));
    let peers = [sender.local_addr(), receiver.local_addr()];
    sender.set_peers(&peers);
    receiver.set_peers(&peers);
    if !receiver.gro() {
        eprintln!("skipped: this kernel does not coalesce UDP (UDP_GRO)");
        return;
    }
    for seq in 0..255 {
        ping_one(&mut sender, &mut receiver, seq);
    }
    // The 256th single frame, with a run queued behind it (coalesced: GRO is still on).
    let mut expected = vec![pattern(255, 100)];
    assert_eq!(sender.send_batch(&[(1, &[&expected[0][..]])]).unwrap(), 1);
    let run: Vec<Vec<u8>> = (0..5).map(|seq| pattern(1000 + seq, 1000)).collect();
    send_run(&mut sender, &run);
    expected.extend(run);
    receive_in_order(&mut receiver, &expected, "every frame whole, in order");
    assert_eq!(
        receiver.stats().single_frames_deferred,
        1,
        "{:?}",
        receiver.stats()
    );
    assert_eq!(receiver.stats().to_single_frames, 0);
    assert_eq!(
        receiver.stats().gro_datagrams,
        1,
        "the run was split by its segment size"
    );
}

/// A look ahead (`peek_next`) copies the next datagram's first bytes and gives its first
/// frame's length and source without taking it: the receive after it gets that datagram. A
/// run the kernel coalesced (GRO) gives its first frame's length and the run's.
#[test]
fn a_look_ahead_gives_the_next_frame_and_leaves_it_to_the_receive() {
    let (mut sender, mut receiver) = pair(1472, 64);
    let mut head = [0u8; 32];
    assert_eq!(receiver.peek_next(&mut head).unwrap(), None, "nothing yet");
    let header = [3u8; 24];
    let payload: Vec<u8> = (0..5000).map(|i| (i * 11) as u8).collect();
    assert_eq!(send_in_frames(&mut sender, &header, &payload, 1000), 5);
    let start = Instant::now();
    let peeked = loop {
        if let Some(peeked) = receiver.peek_next(&mut head).unwrap() {
            break peeked;
        }
        assert!(start.elapsed() < DEADLINE, "the run arrives");
        std::thread::yield_now();
    };
    // Sent as one GSO datagram, the run stays one where the socket coalesces.
    let run = if receiver.gro() { 5 } else { 1 };
    let first = PeekedDatagram {
        from: sender.local_addr(),
        frame_len: 1024,
        datagram_len: run * 1024,
        head_len: 32,
    };
    assert_eq!(peeked, first, "the first frame, and the run it starts");
    assert_eq!(&head[..24], &header[..]);
    assert_eq!(&head[24..], &payload[..8]);
    let again = receiver.peek_next(&mut head).unwrap();
    assert_eq!(again, Some(peeked), "a look takes nothing");
    let received = recv_n(&mut receiver, 5);
    assert_eq!(received.len(), 5);
    for (i, (from, bytes)) in received.iter().enumerate() {
        assert_eq!(*from, sender.local_addr());
        assert_eq!(&bytes[24..], &payload[i * 1000..][..1000], "frame {i}");
    }
    assert_eq!(receiver.stats().peeks, 3);
}

/// Asked to, a receive takes one datagram (the one looked at) and leaves the next queued.
#[test]
fn a_receive_asked_for_one_datagram_leaves_the_next() {
    let (mut sender, mut receiver) = pair(1472, 64);
    for len in [100, 700] {
        let payload = pattern(len, len);
        assert_eq!(sender.send_batch(&[(1, &[&payload[..]][..])]).unwrap(), 1);
    }
    let start = Instant::now();
    while receiver.peek_next(&mut [0u8; 8]).unwrap().is_none() {
        assert!(start.elapsed() < DEADLINE, "the datagrams arrive");
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    receiver.receive_one_datagram_next();
    assert_eq!(receiver.recv_batch().unwrap(), 1, "one datagram");
    assert_eq!(receiver.received(0).1, &pattern(100, 100)[..]);
    assert_eq!(
        receiver.recv_batch().unwrap(),
        1,
        "the next, asked for once"
    );
    assert_eq!(receiver.received(0).1, &pattern(700, 700)[..]);
}

/// Waits until a datagram is there to look at; what the look gave.
fn peek_when_there(receiver: &mut UdpTransport, head: &mut [u8]) -> PeekedDatagram {
    let start = Instant::now();
    loop {
        if let Some(peeked) = receiver.peek_next(head).unwrap() {
            return peeked;
        }
        assert!(start.elapsed() < DEADLINE, "a datagram arrives");
        std::thread::yield_now();
    }
}

/// A receive that brings only a datagram longer than a frame (dropped) and then receives again
/// must not offer its plan to the next datagram: that one would land in memory the plan lent
/// for the dropped one (a receive the engine looked ahead into). With GRO a slot holds 64 KiB,
/// so the kernel takes the long datagram whole before the transport drops it.
#[test]
fn a_dropped_long_datagram_leaves_the_plan_to_no_other() {
    let mut receiver = bind(1472, 64);
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (long, next) = (vec![0x11u8; 4000], vec![0x22u8; 1000]);
    sender.send_to(&long, receiver.local_addr()).unwrap();
    sender.send_to(&next, receiver.local_addr()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let peeked = peek_when_there(&mut receiver, &mut [0u8; 88]);
    assert_eq!((peeked.frame_len, peeked.datagram_len), (4000, 4000));
    let mut lent = vec![0xEEu8; 4000 - 88];
    let plan = [nicmsg_udp::Placement {
        header_len: 88,
        dest: lent.as_mut_ptr(),
        len: lent.len(),
    }];
    receiver.receive_one_datagram_next();
    // SAFETY: the destination is our own vector, untouched meanwhile.
    let count = unsafe { recv_placed_batch(&mut receiver, &plan) };
    assert_eq!(count, 1, "the next datagram");
    assert_eq!(receiver.placed(0), None);
    assert_eq!(receiver.received(0).1, &next[..]);
    assert!(
        !lent.contains(&0x22),
        "the next datagram landed where the plan said"
    );
}

/// A look ahead clears a pending ICMP error as a receive does: the refusal is still found.
#[test]
fn a_refusal_reported_to_a_look_ahead_is_found() {
    for look in [false, true] {
        let mut transport = bind(1472, 64);
        let gone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let gone_address = gone.local_addr().unwrap();
        drop(gone);
        transport.set_peers(&[transport.local_addr(), gone_address]);
        let payload = [1u8; 10];
        assert_eq!(
            transport.send_batch(&[(1, &[&payload[..]][..])]).unwrap(),
            1
        );
        std::thread::sleep(Duration::from_millis(50));
        if look {
            assert!(transport.peek_next(&mut [0u8; 8]).is_err(), "the error");
        }
        assert_eq!(transport.recv_batch().unwrap(), 0);
        let mut refused = Vec::new();
        transport.take_refused(&mut |rank| refused.push(rank));
        assert_eq!(refused, [1], "look ahead {look}");
    }
}

/// Receives the engine asked to take one datagram say nothing of how the peers send: they do
/// not switch the socket to single frames.
#[test]
fn receives_of_one_datagram_asked_for_do_not_switch_the_receive_mode() {
    let mut receiver = bind(1472, 64);
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..300 {
        sender.send_to(&[1u8; 100], receiver.local_addr()).unwrap();
        sender.send_to(&[2u8; 100], receiver.local_addr()).unwrap();
        std::thread::sleep(Duration::from_micros(200));
        let mut received = 0;
        while received < 2 {
            peek_when_there(&mut receiver, &mut [0u8; 8]);
            receiver.receive_one_datagram_next();
            received += receiver.recv_batch().unwrap();
        }
    }
    assert_eq!(receiver.stats().to_single_frames, 0);
}

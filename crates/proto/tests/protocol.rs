mod support;

use nicmsg_proto::*;
use nicmsg_wire::{Flags, FrameKind};
use proptest::prelude::*;
use std::cell::Cell;
use std::rc::Rc;
use support::{class_credits, Net};

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

fn test_config() -> Config {
    Config {
        rto_initial_ns: 100_000,
        rto_min_ns: 50_000,
        rto_max_ns: 5_000_000,
        keepalive_ns: 20_000_000,
        ..Config::default()
    }
}

/// Sends one message of `len` bytes from 0 to 1 and returns the receive's completion and bytes.
fn transfer(net: &mut Net, len: usize, recv_first: bool) -> (Completion, Completion, Vec<u8>) {
    let data = pattern(len, 3);
    let send_region = net.region(0, data.clone());
    let recv_region = net.region(1, vec![0; len]);
    let post_recv = |net: &mut Net| {
        let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
        e.post_recv(
            net.now,
            Source::Rank(0),
            Context::USER,
            TagMatch::Tag(5),
            &SgList::contiguous(recv_region, 0, len as u64),
            m,
        )
        .unwrap()
    };
    let recv_op = if recv_first {
        Some(post_recv(net))
    } else {
        None
    };
    let send_op = net.endpoints[0]
        .post_send(
            net.now,
            1,
            Context::USER,
            5,
            &SgList::contiguous(send_region, 0, len as u64),
            &mut net.memories[0],
        )
        .unwrap();
    net.run(net.now + 1_000_000);
    let recv_op = recv_op.unwrap_or_else(|| post_recv(net));
    net.run(net.now + 60_000_000_000);
    let find =
        |list: &[Completion], op: OpId| *list.iter().find(|c| c.op == op).expect("completed");
    let send = find(&net.completions[0], send_op);
    let recv = find(&net.completions[1], recv_op);
    (
        send,
        recv,
        net.memories[1].0[recv_region.0 as usize].clone(),
    )
}

#[test]
fn eager_and_rendezvous_without_loss() {
    for len in [0, 1, 1000, 1400, 1401, 8192, 8193, 100_000, 3 << 20] {
        for recv_first in [true, false] {
            let mut net = Net::new(2, test_config());
            let (send, recv, bytes) = transfer(&mut net, len, recv_first);
            assert_eq!(send.result.map(|s| s.len), Ok(len as u64), "len {len}");
            assert_eq!(
                recv.result,
                Ok(Status {
                    peer: 0,
                    tag: 5,
                    len: len as u64,
                    immediate: None,
                }),
                "len {len}"
            );
            assert!(bytes == pattern(len, 3), "bytes differ for len {len}");
            if recv_first {
                // Nothing is lost, and an RTS that finds its receive keeps its data: no frame
                // goes twice (a needless FROM_START once resent every RTS).
                let sent_twice = net.endpoints[0].stats().frames_retransmitted;
                assert_eq!(sent_twice, 0, "len {len}: frames retransmitted");
            }
            for endpoint in &net.endpoints {
                assert!(
                    endpoint.usage().is_empty(),
                    "state left: {:?}",
                    endpoint.usage()
                );
            }
        }
    }
}

#[test]
fn truncation_writes_nothing() {
    let mut net = Net::new(2, test_config());
    for len in [100usize, 50_000] {
        let send_region = net.region(0, pattern(len, 1));
        let recv_region = net.region(1, vec![0xAA; len]);
        let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
        let recv = e
            .post_recv(
                0,
                Source::Any,
                Context::USER,
                TagMatch::Any,
                &SgList::contiguous(recv_region, 0, len as u64 / 2),
                m,
            )
            .unwrap();
        let send = net.endpoints[0]
            .post_send(
                0,
                1,
                Context::USER,
                9,
                &SgList::contiguous(send_region, 0, len as u64),
                &mut net.memories[0],
            )
            .unwrap();
        net.run(net.now + 10_000_000_000);
        let recv_done = net.completions[1].iter().find(|c| c.op == recv).unwrap();
        assert!(matches!(recv_done.result, Err(OpError::Truncated { .. })));
        assert!(net.completions[0]
            .iter()
            .any(|c| c.op == send && c.result.is_ok()));
        assert!(net.memories[1].0[recv_region.0 as usize]
            .iter()
            .all(|&b| b == 0xAA));
        assert!(
            net.endpoints[1].usage().is_empty(),
            "{:?}",
            net.endpoints[1].usage()
        );
        assert!(
            net.endpoints[0].usage().is_empty(),
            "{:?}",
            net.endpoints[0].usage()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]
    #[test]
    fn any_size_survives_loss(len in 0usize..300_000, loss in 0.0f64..0.3, seed: u64, recv_first: bool, drop_mode: bool) {
        let mut config = test_config();
        if drop_mode {
            config.unexpected = UnexpectedPolicy::Drop;
        }
        let mut net = Net::new(2, config);
        net.seed(seed);
        net.loss = loss;
        let (send, recv, bytes) = transfer(&mut net, len, recv_first);
        prop_assert_eq!(send.result.map(|s| s.len), Ok(len as u64));
        prop_assert_eq!(recv.result.map(|s| s.len), Ok(len as u64));
        prop_assert!(bytes == pattern(len, 3));
        net.loss = 0.0;
        net.run(net.now + 60_000_000_000);
        for endpoint in &net.endpoints {
            prop_assert!(endpoint.usage().is_empty(), "state left: {:?}", endpoint.usage());
        }
    }
}

#[test]
fn lossy_rendezvous_retransmits_and_counts() {
    let mut config = test_config();
    config.unexpected = UnexpectedPolicy::Buffer;
    let mut net = Net::new(2, config);
    net.seed(42);
    net.loss = 0.2;
    let (send, recv, bytes) = transfer(&mut net, 1 << 20, false);
    assert!(send.result.is_ok() && recv.result.is_ok());
    assert!(bytes == pattern(1 << 20, 3));
    let stats = net.endpoints[0].stats();
    eprintln!(
        "frames {} sender {:?}\nreceiver {:?}",
        net.frames,
        stats,
        net.endpoints[1].stats()
    );
    assert!(stats.frames_retransmitted > 0);
    assert!(stats.data_frames_sent > (1 << 20) / 1424);
}

/// A full control queue drops the frames queued last, which their provoker's repeat recovers.
/// A repeated RSM is answered with a grant and a collection acknowledgement; with room for
/// one frame, the acknowledgement went and the grant was dropped at every repeat, so a
/// rendezvous message never got past its first window (found by the `endpoint_frames` fuzz
/// target).
#[test]
fn a_control_queue_of_one_frame_still_carries_a_rendezvous_message() {
    for window in [1, 16, 256] {
        let config = Config {
            max_control_queue: 1,
            cts_window_frames: window,
            rsm_pre_frames: window / 2,
            ..test_config()
        };
        let mut net = Net::new(2, config);
        let (send, recv, bytes) = transfer(&mut net, 1 << 20, true);
        assert!(
            send.result.is_ok() && recv.result.is_ok(),
            "window {window}"
        );
        assert!(bytes == pattern(1 << 20, 3), "window {window}");
        assert!(
            net.endpoints[1].stats().control_overflows > 0,
            "the queue overflowed"
        );
    }
}

/// With `link_checks_payload` every data frame says so and its checksum covers its headers
/// only, and messages of both protocols still arrive intact under loss.
#[test]
fn frames_leave_their_payload_to_a_link_that_checks_it() {
    use nicmsg_wire::{Flags, FrameKind};
    let config = Config {
        link_checks_payload: true,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    net.seed(7);
    net.loss = 0.05;
    let data_frames = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let seen = data_frames.clone();
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let frame = nicmsg_wire::Frame::parse(bytes).expect("every frame parses");
        let kind = frame.header.kind;
        if matches!(kind, FrameKind::Eager | FrameKind::Rts | FrameKind::Data) {
            assert!(frame.header.has_flag(Flags::LINK_CHECKED), "{kind:?}");
            seen.set(seen.get() + 1);
        } else {
            assert!(!frame.header.has_flag(Flags::LINK_CHECKED), "{kind:?}");
        }
        false
    }));
    for len in [0, 100, 5000, 300_000] {
        let (send, recv, bytes) = transfer(&mut net, len, len % 2 == 0);
        assert!(send.result.is_ok() && recv.result.is_ok(), "{len} bytes");
        assert!(bytes == pattern(len, 3), "{len} bytes arrive intact");
    }
    assert!(data_frames.get() > 300_000 / 1424);
    let drops = net.endpoints[1].stats().drops;
    assert_eq!((drops.bad_checksum, drops.malformed), (0, 0), "{drops:?}");
}

/// A receiver whose link checks nothing refuses frames that leave their payload unchecked, as
/// corrupt ones: nothing unverified is delivered.
#[test]
fn a_receiver_whose_link_checks_nothing_refuses_unchecked_payloads() {
    let trusting = Config {
        link_checks_payload: true,
        ..test_config()
    };
    let mut net = Net::new(2, trusting);
    net.endpoints[1] = Endpoint::new(test_config(), 7, 1, 2).unwrap();
    let data = pattern(3000, 1);
    let send_region = net.region(0, data);
    let recv_region = net.region(1, vec![0; 3000]);
    let now = net.now;
    net.endpoints[1]
        .post_recv(
            now,
            Source::Rank(0),
            Context::USER,
            TagMatch::Tag(5),
            &SgList::contiguous(recv_region, 0, 3000),
            &mut net.memories[1],
        )
        .unwrap();
    net.endpoints[0]
        .post_send(
            now,
            1,
            Context::USER,
            5,
            &SgList::contiguous(send_region, 0, 3000),
            &mut net.memories[0],
        )
        .unwrap();
    net.run(net.now + 2_000_000);
    assert!(
        net.completions[1].is_empty(),
        "nothing unverified completes"
    );
    let drops = net.endpoints[1].stats().drops;
    assert!(drops.bad_checksum > 0 && drops.bad_checksum == drops.total());
    assert!(net.bytes(1, recv_region).iter().all(|&b| b == 0));
}

/// A job whose rank 2 receives through a link that checks nothing (AF_XDP) beside ranks on
/// UDP: frames to rank 2 cover their payload, frames between the others leave it to the link,
/// and every message arrives in every direction.
#[test]
fn frames_to_a_peer_whose_link_checks_nothing_cover_their_payload() {
    use nicmsg_wire::{Flags, FrameKind};
    let checked = Config {
        link_checks_payload: true,
        ..test_config()
    };
    let mut net = Net::new(3, checked);
    net.endpoints[2] = Endpoint::new(test_config(), 7, 2, 3).unwrap();
    net.endpoints[0].cover_payloads_to(2);
    net.endpoints[1].cover_payloads_to(2);
    net.filter = Some(Box::new(|bytes: &[u8]| {
        let frame = nicmsg_wire::Frame::parse(bytes).expect("every frame parses");
        let h = frame.header;
        if matches!(h.kind, FrameKind::Eager | FrameKind::Rts | FrameKind::Data) {
            let leaves_payload = h.src != 2 && h.dst != 2;
            assert_eq!(h.has_flag(Flags::LINK_CHECKED), leaves_payload, "{h:?}");
        }
        false
    }));
    let mut expected = Vec::new();
    for (from, to) in [(0u32, 2u32), (1, 2), (2, 0), (0, 1), (1, 0)] {
        for len in [100usize, 40_000] {
            let data = pattern(len, (from * 3 + to) as u8);
            let send = net.send(from, to, 9, data.clone());
            let (recv, region) = net.recv(to, Source::Rank(from), TagMatch::Tag(9), len);
            expected.push((from, send, to, recv, region, data));
        }
    }
    net.run(net.now + 1_000_000_000);
    for (from, send, to, recv, region, data) in expected {
        assert!(
            matches!(net.result(from, send), Some(Ok(_))),
            "{from} -> {to}"
        );
        assert!(
            matches!(net.result(to, recv), Some(Ok(_))),
            "{from} -> {to}"
        );
        assert!(
            net.bytes(to, region) == data,
            "{from} -> {to}: {} bytes",
            data.len()
        );
    }
    for rank in 0..3 {
        assert_eq!(
            net.endpoints[rank].stats().drops.bad_checksum,
            0,
            "rank {rank}"
        );
    }
}

/// Kinds of the frames rank 0 sends, in order, as the network saw them.
fn record_frames_from_0(
    net: &mut Net,
) -> std::rc::Rc<std::cell::RefCell<Vec<nicmsg_wire::FrameKind>>> {
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let frame = nicmsg_wire::Frame::parse(bytes).expect("every frame parses");
        if frame.header.src == 0 {
            log.borrow_mut().push(frame.header.kind);
        }
        false
    }));
    seen
}

/// While the receiver keeps up, a rendezvous message's first `presumed_grant_bytes` follow its
/// RTS before any CTS and are taken by the receive the RTS matched.
#[test]
fn data_before_the_cts_is_taken_by_a_posted_receive() {
    use nicmsg_wire::FrameKind;
    let mut net = Net::new(2, test_config());
    let seen = record_frames_from_0(&mut net);
    let len = 100_000;
    let (send, recv, bytes) = transfer(&mut net, len, true);
    assert!(send.result.is_ok() && recv.result.is_ok());
    assert!(bytes == pattern(len, 3));
    let kinds = seen.borrow();
    let frames = len.div_ceil(1424);
    assert_eq!(kinds[0], FrameKind::Rts);
    assert_eq!(
        kinds.iter().filter(|&&k| k == FrameKind::Data).count(),
        frames - 1,
        "every frame once: {kinds:?}"
    );
    let stats = net.endpoints[1].stats();
    assert_eq!(stats.drops.total(), 0, "{:?}", stats.drops);
}

/// Without a posted receive the frames sent before the CTS are discarded; once the receive is
/// posted the first CTS has them sent again at once (not after the WAIT-postponed timers), and
/// the next message, the receiver having fallen behind, waits for its CTS.
#[test]
fn data_before_the_cts_that_finds_no_receive_is_sent_again_at_once() {
    use nicmsg_wire::FrameKind;
    let mut net = Net::new(2, test_config());
    let seen = record_frames_from_0(&mut net);
    let len = 100_000;
    let data = pattern(len, 3);
    let send = net.send(0, 1, 5, data.clone());
    net.run(net.now + 1_000_000);
    assert!(net.result(0, send).is_none());
    let sent_before_receive = seen.borrow().len();
    assert!(sent_before_receive > 3, "frames went before the CTS");
    let posted_at = net.now;
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let took = net.run_until(100_000_000, |n| n.result(1, recv).is_some());
    assert!(matches!(net.result(1, recv), Some(Ok(_))));
    assert!(net.bytes(1, region) == data);
    assert!(
        took < 2_000_000,
        "received {took} ns after the receive was posted (posted at {posted_at})"
    );
    // The receiver fell behind: the next message's frames wait for its CTS.
    net.run(net.now + 10_000_000);
    seen.borrow_mut().clear();
    let next = net.send(0, 1, 6, pattern(len, 4));
    net.run(net.now + 1_000_000);
    assert_eq!(
        *seen.borrow(),
        vec![FrameKind::Rts],
        "only the RTS before a CTS"
    );
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(6), len);
    net.run(net.now + 100_000_000);
    assert!(matches!(net.result(0, next), Some(Ok(_))));
    assert!(matches!(net.result(1, recv), Some(Ok(_))));
    assert!(net.bytes(1, region) == pattern(len, 4));
}

/// RMPP's small windows (16 frames, RSM at the window end or 15 frames before it) with data
/// sent before the CTS: the first grant still exceeds what went before it, so the RSM asks for
/// every next window and long messages complete, posted first or not, under loss. (A presumed
/// grant as large as the first CTS window hung here: no RSM was ever sent.)
#[test]
fn data_before_the_cts_keeps_small_windows_moving() {
    for pre in [0, 15] {
        for recv_first in [true, false] {
            // An eager limit of 64 KiB lets 46 frames go before the CTS, beyond the window.
            let config = Config {
                cts_window_frames: 16,
                rsm_pre_frames: pre,
                eager_limit: 64 << 10,
                ..test_config()
            };
            let mut net = Net::new(2, config);
            net.seed(u64::from(pre) + 3);
            net.loss = 0.02;
            let len = 1 << 20;
            let (send, recv, bytes) = transfer(&mut net, len, recv_first);
            assert!(send.result.is_ok() && recv.result.is_ok(), "pre {pre}");
            assert!(bytes == pattern(len, 3), "pre {pre}");
        }
    }
}

#[test]
fn sender_out_of_credits_sends_by_rendezvous() {
    // A medium and an eager message: not copied (a copied short send completes at once).
    for len in [1000, MEDIUM_MESSAGE_MAX as usize + 1] {
        sender_out_of_credits_sends_by_rendezvous_at(len);
    }
}

fn sender_out_of_credits_sends_by_rendezvous_at(len: usize) {
    let config = Config {
        eager_credits_per_peer: 2,
        medium_credits_per_peer: 2,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    let sends: Vec<OpId> = (0..6u8).map(|i| net.send(0, 1, 1, vec![i; len])).collect();
    net.run(net.now + 100_000_000);
    assert_eq!(
        net.endpoints[0].stats().credit_stalls,
        4,
        "two went eager on the two credits, four by rendezvous"
    );
    let done = |net: &Net| {
        sends
            .iter()
            .filter(|&&op| net.result(0, op).is_some())
            .count()
    };
    assert_eq!(done(&net), 2, "the eager two are held by the receiver");
    let recvs: Vec<_> = (0..6)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), len))
        .collect();
    net.run(net.now + 10_000_000_000);
    for (i, (op, region)) in recvs.iter().enumerate() {
        assert!(net.result(1, *op).unwrap().is_ok());
        assert_eq!(
            net.memories[1].0[region.0 as usize],
            vec![i as u8; len],
            "MPI order"
        );
    }
    assert!(sends.iter().all(|&op| net.result(0, op)
        == Some(Ok(Status {
            peer: 1,
            tag: 1,
            len: len as u64,
            immediate: None,
        }))));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(
        net.endpoints.iter().all(|e| e.credits_unsettled() == 0),
        "{len}: every credit returned in its class"
    );
}

/// More unmatched eager messages than credits (of any class), then one with another tag
/// whose receive is posted first: MPI requires that receive to complete (non-overtaking orders
/// only messages that match the same receive), so the sender out of credits must not hold it
/// back.
#[test]
fn a_receive_for_a_later_tag_completes_behind_unmatched_messages_beyond_the_credits() {
    for len in [8usize, 1000, 4000, 5000] {
        let mut net = Net::new(2, test_config());
        let credits = class_credits(&test_config(), len);
        let (wanted, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(2), len);
        let earlier: Vec<OpId> = (0..credits + 4)
            .map(|i| net.send(0, 1, 1, vec![i as u8; len]))
            .collect();
        let later = net.send(0, 1, 2, vec![0xAB; len]);
        // The receiver says its buffers of the class are held (WAIT): the later message goes
        // by rendezvous well before a credit wait could run out.
        net.run(net.now + test_config().credit_wait_ns / 2);
        assert_eq!(
            net.result(1, wanted),
            Some(Ok(Status {
                peer: 0,
                tag: 2,
                len: len as u64,
                immediate: None,
            })),
            "{len} bytes"
        );
        assert_eq!(net.memories[1].0[region.0 as usize], vec![0xAB; len]);
        assert!(net.result(0, later).is_some_and(|r| r.is_ok()));
        let drained: Vec<_> = earlier
            .iter()
            .map(|_| net.recv(1, Source::Rank(0), TagMatch::Any, len))
            .collect();
        net.run(net.now + 10_000_000_000);
        for (i, (op, region)) in drained.iter().enumerate() {
            assert_eq!(net.result(1, *op).map(|r| r.map(|s| s.tag)), Some(Ok(1)));
            assert_eq!(net.memories[1].0[region.0 as usize], vec![i as u8; len]);
        }
        assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
        let unsettled = |e: &Endpoint| e.credits_unsettled() == 0;
        assert!(
            net.endpoints.iter().all(unsettled),
            "{len}: credits of its class"
        );
    }
}

/// Counts, from now on, the EAGER frames whose sender says nobody waits for their
/// acknowledgement (`Flags::UNWAITED`); drops none.
fn count_unwaited_frames(net: &mut Net) -> Rc<Cell<u32>> {
    let unwaited = Rc::new(Cell::new(0u32));
    let seen = unwaited.clone();
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        if header.kind == FrameKind::Eager && header.has_flag(Flags::UNWAITED) {
            seen.set(seen.get() + 1);
        }
        false
    }));
    unwaited
}

/// A confirmed send (`SendOptions::confirmed`, libfabric's `FI_DELIVERY_COMPLETE`) completes
/// only once its receiver holds the message, never from the core's copies: neither a short
/// one (8 bytes, which fits a short copy) nor one of 6,000 bytes (which fits the send copies
/// the host lent). It completes a round trip after it starts, where an unconfirmed one
/// completes at once; its frames never say UNWAITED; and to a receiver that dies first it
/// fails, where an unconfirmed one was already reported sent (and is counted unconfirmed).
#[test]
fn a_confirmed_send_completes_only_once_the_receiver_holds_it() {
    for len in [8, 6000] {
        confirmed_send_completes_only_once_the_receiver_holds_it(len);
    }
}

/// `ranks` endpoints on frames of 9,000 bytes, rank 0 lent four send copies of `len` bytes,
/// and a count of the UNWAITED frames from now on.
fn net_with_send_copies(ranks: u32, len: usize) -> (Net, Rc<Cell<u32>>) {
    let mut net = Net::new(
        ranks,
        Config {
            mtu: 9000,
            ..test_config()
        },
    );
    let copies = net.region(0, vec![0; len * 4]);
    net.endpoints[0].lend_send_copies(copies, len as u64, 4);
    let unwaited = count_unwaited_frames(&mut net);
    (net, unwaited)
}

fn confirmed_send_completes_only_once_the_receiver_holds_it(len: usize) {
    let (mut net, unwaited) = net_with_send_copies(3, len);
    let post = |net: &mut Net, to: Rank, confirmed: bool| {
        let region = net.region(0, pattern(len, to as u8));
        let (e, m) = (&mut net.endpoints[0], &mut net.memories[0]);
        let data = SgList::contiguous(region, 0, len as u64);
        let options = SendOptions {
            confirmed,
            ..SendOptions::default()
        };
        e.post_send_with(net.now, to, (Context::USER, 1), options, &data, m)
            .expect("posted")
    };
    let early = post(&mut net, 1, false);
    let waited = post(&mut net, 1, true);
    net.run(net.now);
    assert!(
        net.result(0, early).is_some_and(|r| r.is_ok()),
        "{len} B: from the copy"
    );
    assert!(
        net.result(0, waited).is_none(),
        "{len} B: not before the receiver has it"
    );
    let took = net.run_until(10_000_000, |net| net.result(0, waited).is_some());
    assert!(net.result(0, waited).is_some_and(|r| r.is_ok()));
    assert!(
        took >= 2 * net.delay_ns,
        "{len} B: a round trip, not {took} ns"
    );
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
    let (second, second_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
    net.run(net.now + 10_000_000);
    assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
    assert!(net.result(1, second).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), &pattern(len, 1)[..]);
    assert_eq!(net.bytes(1, second_region), &pattern(len, 1)[..]);
    assert_eq!(
        unwaited.get(),
        1,
        "{len} B: only the unconfirmed send's frame"
    );
    let reported_sent = post(&mut net, 2, false);
    let failed = post(&mut net, 2, true);
    // Rank 2 dies before either message reaches it: its frames vanish.
    net.endpoints[2] = Endpoint::new(test_config(), 99, 2, 3).unwrap();
    net.run(net.now + 60_000_000_000);
    assert!(net.result(0, reported_sent).is_some_and(|r| r.is_ok()));
    assert_eq!(
        net.result(0, failed),
        Some(Err(OpError::PeerUnreachable { peer: 2 })),
        "{len} B"
    );
    assert_eq!(net.endpoints[0].stats().early_sends_unconfirmed, 1);
}

/// An unwaited send (`SendOptions::unwaited`: the host keeps the bytes and reported the send
/// done itself, as libfabric's provider does for the sends it buffers) is not copied by the
/// core, even where a send copy is free: it completes once the receiver has it, and its frames
/// say UNWAITED, so the receiver may hold the acknowledgement back for a carrier.
#[test]
fn an_unwaited_send_is_not_copied_and_says_nobody_waits() {
    for len in [8, 6000] {
        let (mut net, unwaited) = net_with_send_copies(2, len);
        let region = net.region(0, pattern(len, 5));
        let data = SgList::contiguous(region, 0, len as u64);
        let options = SendOptions {
            unwaited: true,
            ..SendOptions::default()
        };
        let (e, m) = (&mut net.endpoints[0], &mut net.memories[0]);
        let send = e
            .post_send_with(net.now, 1, (Context::USER, 1), options, &data, m)
            .expect("posted");
        net.run(net.now);
        assert!(
            net.result(0, send).is_none(),
            "{len} B: not completed from a copy"
        );
        let (recv, into) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
        net.run_until(10_000_000, |net| net.result(0, send).is_some());
        assert!(net.result(0, send).is_some_and(|r| r.is_ok()), "{len} B");
        assert!(net.result(1, recv).is_some_and(|r| r.is_ok()), "{len} B");
        assert_eq!(net.bytes(1, into), &pattern(len, 5)[..]);
        assert_eq!(unwaited.get(), 1, "{len} B: its frame says UNWAITED");
        assert_eq!(net.endpoints[0].stats().sends_completed_early, 0);
    }
}

#[test]
fn dead_peer_fails_pending_operations_only() {
    let mut net = Net::new(3, test_config());
    let (waiting_recv, _) = net.recv(0, Source::Rank(2), TagMatch::Any, 10);
    let big_send = net.send(0, 2, 3, vec![1; 200_000]);
    net.run(net.now + 1_000);
    // Rank 2 dies: it is never driven again and its frames vanish.
    net.endpoints[2] = Endpoint::new(test_config(), 99, 2, 3).unwrap();
    net.run(net.now + 60_000_000_000);
    assert_eq!(
        net.result(0, waiting_recv),
        Some(Err(OpError::PeerUnreachable { peer: 2 }))
    );
    assert_eq!(
        net.result(0, big_send),
        Some(Err(OpError::PeerUnreachable { peer: 2 }))
    );
    assert!(net.endpoints[0].is_peer_unreachable(2));
    // The survivors still talk.
    let ok_send = net.send(0, 1, 4, vec![9; 5000]);
    let (ok_recv, _) = net.recv(1, Source::Any, TagMatch::Any, 5000);
    net.run(net.now + 10_000_000_000);
    assert!(net.result(0, ok_send).unwrap().is_ok());
    assert!(net.result(1, ok_recv).unwrap().is_ok());
    assert!(
        net.endpoints[0].usage().is_empty(),
        "{:?}",
        net.endpoints[0].usage()
    );
}

/// A message held behind one lost with its sender, which then died, is released once the
/// sender is declared unreachable: the receiver awaits the missing message as it awaits a
/// receive naming the peer. Before, nothing was awaited from the dead rank, so a wildcard
/// receive that the held message matches waited for ever, and the message held its buffer.
#[test]
fn a_message_held_behind_one_lost_with_its_dead_sender_is_released() {
    let mut net = Net::new(2, test_config());
    lose_first(&mut net, FrameKind::Eager, 1);
    net.send(0, 1, 1, vec![1; 100]);
    net.send(0, 1, 2, vec![2; 100]);
    net.run(net.now + 30_000);
    assert!(
        net.endpoints[1].stats().messages_received == 0,
        "the second waits"
    );
    // Rank 0 dies before its retransmission: it is never driven again, its frames vanish.
    net.endpoints[0] = Endpoint::new(test_config(), 99, 0, 2).unwrap();
    let (recv, region) = net.recv(1, Source::Any, TagMatch::Tag(2), 100);
    net.run(net.now + 60_000_000_000);
    assert!(net.endpoints[1].is_peer_unreachable(0));
    assert_eq!(
        net.result(1, recv),
        Some(Ok(Status {
            peer: 0,
            tag: 2,
            len: 100,
            immediate: None,
        }))
    );
    assert_eq!(net.bytes(1, region), vec![2; 100]);
    assert!(
        net.endpoints[1].usage().is_empty(),
        "{:?}",
        net.endpoints[1].usage()
    );
}

#[test]
fn probe_and_cancel() {
    let mut net = Net::new(2, test_config());
    assert_eq!(
        net.endpoints[1].iprobe(Source::Any, Context::USER, TagMatch::Any),
        None
    );
    let now = net.now;
    let probe = net.endpoints[1]
        .post_probe(now, Source::Rank(0), Context::USER, TagMatch::Tag(8))
        .unwrap();
    let (never, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1234), 4);
    net.send(0, 1, 8, vec![5; 3000]);
    net.send(0, 1, 9, vec![6; 30_000]);
    net.run(net.now + 1_000_000_000);
    assert_eq!(
        net.result(1, probe),
        Some(Ok(Status {
            peer: 0,
            tag: 8,
            len: 3000,
            immediate: None,
        }))
    );
    assert_eq!(
        net.endpoints[1].iprobe(Source::Any, Context::USER, TagMatch::Tag(9)),
        Some(Status {
            peer: 0,
            tag: 9,
            len: 30_000,
            immediate: None,
        })
    );
    let now = net.now;
    assert_eq!(
        net.endpoints[1].cancel(now, never),
        Ok(CancelOutcome::Cancelled)
    );
    assert_eq!(
        net.endpoints[1].cancel(now, never),
        Err(CancelError::UnknownOp)
    );
    net.run(net.now + 1_000);
    assert_eq!(net.result(1, never), Some(Err(OpError::Cancelled)));
    let (a, _) = net.recv(1, Source::Any, TagMatch::Any, 30_000);
    let (b, _) = net.recv(1, Source::Any, TagMatch::Any, 30_000);
    net.run(net.now + 10_000_000_000);
    assert_eq!(net.result(1, a).unwrap().unwrap().tag, 8);
    assert_eq!(net.result(1, b).unwrap().unwrap().tag, 9);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

#[test]
fn hostile_frames_are_dropped_and_counted() {
    let mut net = Net::new(2, test_config());
    let mut memory = support::Memory(Vec::new());
    let endpoint = &mut net.endpoints[1];
    endpoint.handle_frame(0, &[], &mut memory);
    endpoint.handle_frame(0, &[1, 2, 3], &mut memory);
    endpoint.handle_frame(0, &[0xFF; 200], &mut memory);
    let drops = endpoint.stats().drops;
    assert_eq!(drops.total(), 3);
    assert_eq!(drops.malformed, 3);
}

#[test]
fn scatter_gather_segments() {
    let mut net = Net::new(2, test_config());
    for len in [3000usize, 60_000] {
        let data = pattern(len, 9);
        let src = net.region(0, data.clone());
        let third = len as u64 / 3;
        let segments = [
            Segment {
                region: src,
                offset: 0,
                len: third,
            },
            Segment {
                region: src,
                offset: third,
                len: len as u64 - third,
            },
        ];
        let now = net.now;
        let sop = net.endpoints[0]
            .post_send(
                now,
                1,
                Context::USER,
                2,
                &SgList::new(&segments).unwrap(),
                &mut net.memories[0],
            )
            .unwrap();
        let dst = net.region(1, vec![0xEE; len + 300]);
        let pieces = [
            Segment {
                region: dst,
                offset: 0,
                len: 100,
            },
            Segment {
                region: dst,
                offset: 200,
                len: len as u64 - 100,
            },
        ];
        let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
        let rop = e
            .post_recv(
                now,
                Source::Any,
                Context::USER,
                TagMatch::Any,
                &SgList::new(&pieces).unwrap(),
                m,
            )
            .unwrap();
        net.run(net.now + 10_000_000_000);
        assert!(net.result(0, sop).unwrap().is_ok());
        assert!(net.result(1, rop).unwrap().is_ok());
        let got = &net.memories[1].0[dst.0 as usize];
        assert_eq!(&got[..100], &data[..100]);
        assert!(got[100..200].iter().all(|&b| b == 0xEE), "gap untouched");
        assert_eq!(&got[200..200 + len - 100], &data[100..]);
        assert!(
            got[len + 100..].iter().all(|&b| b == 0xEE),
            "tail untouched"
        );
    }
}

/// Makes rank 1 answer a rendezvous message from rank 0 with WAIT (no receive posted when it
/// arrives), then receives it: rank 0 then knows rank 1 falls behind, and waits for its
/// credits instead of sending by rendezvous at once.
fn show_receiver_behind(net: &mut Net) {
    let long = net.send(0, 1, 99, vec![3; 16_000]);
    net.run(net.now + 1_000_000);
    let (recv, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(99), 16_000);
    net.run(net.now + 100_000_000);
    assert!(net.result(0, long).is_some_and(|r| r.is_ok()));
    assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
}

/// Two ranks with 2 eager credits each, rank 1 shown to fall behind; and the longest credit
/// wait.
fn net_with_receiver_behind() -> (Net, Nanos) {
    net_with_receiver_behind_at(2)
}

/// Two ranks with `credits` credits of every class, rank 1 shown to fall behind; and the
/// longest credit wait.
fn net_with_receiver_behind_at(credits: u32) -> (Net, Nanos) {
    net_with_receiver_behind_given(Config {
        eager_credits_per_peer: credits,
        small_credits_per_peer: credits,
        medium_credits_per_peer: credits,
        ..test_config()
    })
}

/// Two ranks with `config`, rank 1 shown to fall behind; and the longest credit wait.
fn net_with_receiver_behind_given(config: Config) -> (Net, Nanos) {
    let wait_ns = config.credit_wait_ns;
    let mut net = Net::new(2, config);
    show_receiver_behind(&mut net);
    (net, wait_ns)
}

/// A window of short sends into receives already posted (the `bw` pattern): the receiver keeps
/// up, so once the credits are spent the rest go by rendezvous at once, each RTS carrying its
/// message whole into its receive, instead of waiting a round trip for credits.
#[test]
fn a_window_into_posted_receives_does_not_wait_for_credits() {
    let config = Config {
        small_credits_per_peer: 2,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    const MESSAGES: u8 = 20;
    let recvs: Vec<_> = (0..MESSAGES)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), 100))
        .collect();
    let sends: Vec<OpId> = (0..MESSAGES)
        .map(|i| net.send(0, 1, 1, vec![i; 100]))
        .collect();
    let elapsed = net.run_until(10_000_000, |net| {
        recvs.iter().all(|&(op, _)| net.result(1, op).is_some())
    });
    for (i, &(op, region)) in recvs.iter().enumerate() {
        assert!(net.result(1, op).is_some_and(|r| r.is_ok()));
        assert_eq!(net.bytes(1, region), &vec![i as u8; 100][..], "MPI order");
    }
    let stats = net.endpoints[0].stats();
    assert_eq!(stats.credit_waits, 0);
    assert_eq!(stats.credit_stalls, u64::from(MESSAGES) - 2);
    assert!(
        elapsed <= 2 * net.delay_ns + 2_000,
        "every message arrived within one crossing: {elapsed} ns"
    );
    sends_end_and_state_is_freed(&mut net, &sends);
}

/// Every send of `sends` (from rank 0) succeeds once the network settles, and both ranks free
/// all their state.
fn sends_end_and_state_is_freed(net: &mut Net, sends: &[OpId]) {
    net.run(net.now + 100_000_000);
    assert!(sends
        .iter()
        .all(|&op| net.result(0, op).is_some_and(|r| r.is_ok())));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// Rank 1 receives `messages` messages of 1000 bytes with tag 1 from rank 0, posting each
/// receive after the last completed, and checks they are message 0, 1, ... in MPI order.
fn receive_one_at_a_time(net: &mut Net, messages: u8) {
    receive_one_at_a_time_of(net, messages, 1000);
}

/// The same for messages of `len` bytes.
fn receive_one_at_a_time_of(net: &mut Net, messages: u8, len: usize) {
    for i in 0..messages {
        let (op, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
        net.run_until(10_000_000, |net| net.result(1, op).is_some());
        assert!(net.result(1, op).is_some_and(|r| r.is_ok()), "message {i}");
        assert_eq!(net.bytes(1, region), &vec![i; len][..], "MPI order");
    }
}

/// NetPIPE's stream: the sender queues many short messages, the receiver posts one receive at
/// a time, each after the last completed. Once the receiver has shown it falls behind (a
/// rendezvous message answered WAIT), the sender out of credits waits for them instead of
/// turning each message into a rendezvous one, and the receiver returns each credit at once
/// because the sender asked: every message goes eager, in order.
#[test]
fn a_stream_of_short_messages_waits_for_credits_and_stays_eager() {
    let (mut net, wait_ns) = net_with_receiver_behind();
    const MESSAGES: u8 = 20;
    let sends: Vec<OpId> = (0..MESSAGES)
        .map(|i| net.send(0, 1, 1, vec![i; 1000]))
        .collect();
    let started = net.now;
    receive_one_at_a_time(&mut net, MESSAGES);
    let elapsed = net.now - started;
    let stats = net.endpoints[0].stats();
    assert_eq!(stats.credit_stalls, 0, "no message went by rendezvous");
    assert!(stats.credit_waits > 0, "the sender ran out of credits");
    // A credit asked for leaves at once: each message costs at most a round trip, not a
    // round trip plus `ack_delay_ns`, and no wait ran out.
    let round_trip = 2 * net.delay_ns;
    assert!(
        elapsed <= MESSAGES as u64 * round_trip && elapsed < MESSAGES as u64 * wait_ns,
        "{elapsed} ns for {MESSAGES} messages"
    );
    sends_end_and_state_is_freed(&mut net, &sends);
}

/// A receiver away for longer than the credit wait: the wait runs out, and only as many
/// messages as the sender has credits go by rendezvous before the next waits again. Sent all
/// by rendezvous, a stream's backlog held the eager messages whose credits end the shortage
/// behind hundreds of rendezvous ones (NetPIPE's 8-byte stream resent a third of its messages).
/// Every message still arrives, in order, once the receiver is back.
#[test]
fn a_credit_wait_that_runs_out_lets_a_few_messages_by_rendezvous_then_waits_again() {
    // A medium and an eager message, their classes given different counts: a wait lets by
    // as many as the waiting message's class has.
    for (len, credits) in [(1000, 2), (MEDIUM_MESSAGE_MAX as usize + 1, 3)] {
        let (mut net, wait_ns) = net_with_receiver_behind_given(Config {
            eager_credits_per_peer: 3,
            small_credits_per_peer: 2,
            medium_credits_per_peer: 2,
            ..test_config()
        });
        let counts = |net: &Net| {
            let stats = net.endpoints[0].stats();
            (stats.credit_stalls, stats.credit_waits)
        };
        let (stalls, waits) = counts(&net);
        const MESSAGES: u8 = 20;
        let sends: Vec<OpId> = (0..MESSAGES)
            .map(|i| net.send(0, 1, 1, vec![i; len]))
            .collect();
        net.run(net.now + wait_ns + wait_ns / 2);
        assert_eq!(
            counts(&net),
            (stalls + credits, waits + 2),
            "{len} bytes: one wait ran out: as many messages by rendezvous as the class has \
             credits, then a second wait"
        );
        // A wait later, the second ran out too: as many again, no more.
        net.run(net.now + wait_ns);
        assert_eq!(counts(&net).0, stalls + 2 * credits, "{len} bytes");
        receive_one_at_a_time_of(&mut net, MESSAGES, len);
        sends_end_and_state_is_freed(&mut net, &sends);
    }
}

/// A receiver whose buffers for a sender are all held by messages it does not receive, while it
/// waits for a later message, answers the sender's request for credits with WAIT: the later
/// message goes by rendezvous at once, not after the longest credit wait.
#[test]
fn a_receiver_holding_its_buffers_for_a_later_message_says_so() {
    let (mut net, wait_ns) = net_with_receiver_behind();
    let (wanted, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(2), 1000);
    let held: Vec<OpId> = (0..2u8).map(|i| net.send(0, 1, 1, vec![i; 1000])).collect();
    net.send(0, 1, 2, vec![7; 1000]);
    let elapsed = net.run_until(wait_ns * 2, |net| net.result(1, wanted).is_some());
    assert!(net.result(1, wanted).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), &[7; 1000][..]);
    assert!(
        elapsed < wait_ns / 4,
        "the later message took {elapsed} ns (longest credit wait {wait_ns} ns)"
    );
    let stats = net.endpoints[0].stats();
    assert_eq!((stats.credit_waits, stats.credit_stalls), (1, 1));
    // The held messages are still received, in order.
    for i in 0..2u8 {
        let (op, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 1000);
        net.run(net.now + 100_000_000);
        assert!(net.result(1, op).is_some_and(|r| r.is_ok()));
        assert_eq!(net.bytes(1, region), &vec![i; 1000][..]);
    }
    sends_end_and_state_is_freed(&mut net, &held);
}

/// A blocking sender streaming eager messages of several frames (not copied, so each send
/// completes on its acknowledgement): once an acknowledgement had to leave on its own, with no
/// reply to carry it, the receiver acknowledges the next ones at once instead of holding each
/// for `ack_delay_ns` (which made such a stream 3x slower than its ping-pong).
#[test]
fn a_stream_of_multi_frame_eager_sends_is_acknowledged_at_once() {
    let config = test_config();
    let ack_delay_ns = config.ack_delay_ns;
    let mut net = Net::new(2, config);
    const MESSAGES: u64 = 10;
    let mut times = Vec::new();
    for i in 0..MESSAGES as u8 {
        let (recv, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 4000);
        let send = net.send(0, 1, 1, vec![i; 4000]);
        times.push(net.run_until(10_000_000, |net| net.result(0, send).is_some()));
        assert!(net.result(0, send).is_some_and(|r| r.is_ok()));
        assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
    }
    let round_trip = 2 * net.delay_ns;
    assert!(
        times[1..].iter().all(|&t| t <= round_trip + 2_000),
        "after the first, each send completes within a round trip, not a round trip plus {ack_delay_ns} ns: {times:?}"
    );
}

/// Eager sends too long for a short copy are copied into the send copies the host lent: each
/// completes as soon as it starts (no round trip for its acknowledgement), the host may reuse
/// its buffer at once, and under loss the receiver still gets the bytes as they were posted,
/// retransmissions read from the copy. At most as many complete early as there are copies.
#[test]
fn eager_sends_copied_into_lent_copies_complete_at_once_and_arrive_intact() {
    const PIECES: u32 = 4;
    const MESSAGES: u8 = 12;
    let len = 6000usize;
    for loss in [0.0, 0.1] {
        let mut net = Net::new(2, test_config());
        net.seed(7);
        net.loss = loss;
        let copies = net.region(0, vec![0; len * PIECES as usize]);
        net.endpoints[0].lend_send_copies(copies, len as u64, PIECES);
        let mut sends = Vec::new();
        for i in 0..MESSAGES {
            let send = net.send(0, 1, 1, pattern(len, i));
            let buffer = RegionId(net.memories[0].0.len() as u32 - 1);
            sends.push((send, buffer));
        }
        net.run(net.now);
        let done_at_once = sends
            .iter()
            .filter(|(send, _)| net.result(0, *send).is_some())
            .count();
        assert_eq!(done_at_once, PIECES as usize, "loss {loss}: one per copy");
        // The host reuses the buffers of the completed sends at once.
        for (send, buffer) in &sends {
            if net.result(0, *send).is_some() {
                net.memories[0].0[buffer.0 as usize].fill(0xEE);
            }
        }
        let mut recvs = Vec::new();
        for _ in 0..MESSAGES {
            recvs.push(net.recv(1, Source::Rank(0), TagMatch::Tag(1), len));
        }
        net.run(net.now + 1_000_000_000);
        for (i, (recv, region)) in recvs.into_iter().enumerate() {
            assert!(
                net.result(1, recv).is_some_and(|r| r.is_ok()),
                "loss {loss}: {i}"
            );
            assert_eq!(
                net.bytes(1, region),
                &pattern(len, i as u8)[..],
                "loss {loss}: {i}"
            );
        }
        for (send, _) in &sends {
            assert!(net.result(0, *send).is_some_and(|r| r.is_ok()));
        }
        assert!(net.endpoints[0].stats().sends_completed_early >= u64::from(PIECES));
        assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    }
}

/// A burst of one-frame eager messages into receives already posted, 6,000 bytes each (too
/// long for a short copy): when they are sent from copies the host lent, the senders completed
/// at once and say so (`Flags::UNWAITED`), so their acknowledgements gather into runs and the
/// receiver sends far fewer frames than messages; sent from the host's buffers, each sender
/// waits, and its acknowledgement leaves at once. Until wire version 5 the receiver judged by
/// length alone and answered a copied stream of 4 KiB to 64 KiB messages frame for frame.
#[test]
fn acknowledgements_wait_only_for_senders_that_completed_from_copies() {
    const MESSAGES: u32 = 24;
    let len = 6000usize;
    let frames_back = |lend: bool| {
        let mut net = Net::new(
            2,
            Config {
                mtu: 9000,
                eager_credits_per_peer: MESSAGES,
                ..test_config()
            },
        );
        if lend {
            let copies = net.region(0, vec![0; len * MESSAGES as usize]);
            net.endpoints[0].lend_send_copies(copies, len as u64, MESSAGES);
        }
        let recvs: Vec<_> = (0..MESSAGES)
            .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), len))
            .collect();
        let unwaited = count_unwaited_frames(&mut net);
        let sends: Vec<OpId> = (0..MESSAGES)
            .map(|i| net.send(0, 1, 1, pattern(len, i as u8)))
            .collect();
        net.run(net.now + 100_000_000);
        for (i, (recv, region)) in recvs.into_iter().enumerate() {
            assert!(net.result(1, recv).is_some_and(|r| r.is_ok()), "{i}");
            assert_eq!(net.bytes(1, region), &pattern(len, i as u8)[..], "{i}");
        }
        sends_end_and_state_is_freed(&mut net, &sends);
        let expected = if lend { MESSAGES } else { 0 };
        assert_eq!(unwaited.get(), expected, "frames saying nobody waits");
        net.endpoints[1].stats().frames_sent
    };
    let (copied, waited) = (frames_back(true), frames_back(false));
    assert!(
        copied * 4 <= u64::from(MESSAGES),
        "{copied} frames back for {MESSAGES} messages sent from copies"
    );
    assert!(
        waited * 2 >= u64::from(MESSAGES),
        "{waited} frames back for {MESSAGES} messages whose senders wait"
    );
}

/// A burst of short messages (sent from copies, so nobody waits for their acknowledgements)
/// of which every third is lost: the others complete in pairs of consecutive ids, each pair a
/// run of its own. Each run may wait `stream_ack_delay_ns` (a quarter of `rto_min_ns`) from its
/// first message, far below the sender's retransmission timeout, so nothing but the lost
/// messages is sent again. The deadline a run inherited from the run before it must not grow
/// by another stream delay with every pair: ten pairs pushed the last run's acknowledgement
/// past the timeout, and the sender resent messages the receiver held.
#[test]
fn runs_after_a_gap_wait_no_longer_than_one_run() {
    const MESSAGES: u32 = 30;
    let config = Config {
        ack_delay_ns: 2_000,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    let first_sendings = Rc::new(Cell::new(0u32));
    let seen = first_sendings.clone();
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        if header.kind != FrameKind::Eager || header.has_flag(Flags::RETRANSMIT) {
            return false;
        }
        seen.set(seen.get() + 1);
        seen.get().is_multiple_of(3)
    }));
    let sends: Vec<OpId> = (0..MESSAGES)
        .map(|i| net.send(0, 1, 1, pattern(8, i as u8)))
        .collect();
    net.run(net.now + 1_000_000);
    let recvs: Vec<_> = (0..MESSAGES)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), 8))
        .collect();
    net.run(net.now + 100_000_000);
    for (i, (recv, region)) in recvs.into_iter().enumerate() {
        assert!(net.result(1, recv).is_some_and(|r| r.is_ok()), "{i}");
        assert_eq!(net.bytes(1, region), &pattern(8, i as u8)[..], "{i}");
    }
    sends_end_and_state_is_freed(&mut net, &sends);
    let lost = u64::from(MESSAGES / 3);
    let stats = net.endpoints[0].stats();
    assert_eq!(
        stats.frames_retransmitted,
        lost,
        "frames resent for {lost} lost; receiver dropped {} duplicates",
        net.endpoints[1].stats().drops.duplicate
    );
}

/// A rendezvous send completes once the matched receive acknowledged all its data (two round
/// trips: RTS, CTS, data, ACK), not after END and MSG-ACK as well: its buffer is read no more.
/// The handshake goes on behind it and frees everything.
#[test]
fn a_delivered_rendezvous_send_completes_before_its_end_handshake() {
    let mut net = Net::new(2, test_config());
    let len = 16_000;
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
    let send = net.send(0, 1, 1, pattern(len, 5));
    let elapsed = net.run_until(10_000_000, |net| net.result(0, send).is_some());
    assert!(net.result(0, send).is_some_and(|r| r.is_ok()));
    assert!(
        elapsed <= 4 * net.delay_ns,
        "the send took {elapsed} ns, more than two round trips"
    );
    net.run(net.now + 100_000_000);
    assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), &pattern(len, 5)[..]);
    assert_eq!(net.endpoints[0].stats().sends_completed_early, 1);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

#[test]
fn per_peer_state_is_small_and_fixed() {
    let bytes = std::hint::black_box(PEER_STATE_BYTES);
    assert!(
        bytes <= 336,
        "per-peer state grew to {bytes} bytes; update docs/protocol.md"
    );
}

/// Loses the first `count` frames of `kind`: each lost control frame must be recovered.
fn lose_first(net: &mut Net, kind: nicmsg_wire::FrameKind, count: u32) {
    let mut remaining = count;
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let hit = kind_of(bytes) == kind as u8 && remaining > 0;
        remaining -= u32::from(hit);
        hit
    }));
}

/// One-frame messages, each acknowledged whole (ACK_ALL), teach their sender the round trip
/// again after losses backed its timeout off. Before, only acknowledgements of single
/// collections gave samples: once eight losses in a row had doubled the timeout to 25.6 ms,
/// a stream of short messages never brought it down, and every later loss cost that long.
/// Under Open MPI, 1,500 16-byte messages each way across namespaces with 5 % loss took
/// 22-28 s so (every lost frame cost `rto_max_ns`), 0.5-0.8 s with samples.
#[test]
fn one_frame_messages_bring_a_backed_off_timeout_down() {
    let config = Config {
        rto_max_ns: 50_000_000,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    let message = |net: &mut Net| -> Nanos {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(7), 100);
        let send = net.send(0, 1, 7, pattern(100, 1));
        let took = net.run_until(1_000_000_000, |net| net.result(1, recv).is_some());
        assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
        assert_eq!(net.bytes(1, region), pattern(100, 1));
        net.run(net.now + 1_000_000);
        assert!(net.result(0, send).is_some_and(|r| r.is_ok()));
        took
    };
    lose_first(&mut net, FrameKind::Eager, 8);
    let backed_off = message(&mut net);
    assert!(backed_off > 25_000_000, "eight timeouts: {backed_off} ns");
    for _ in 0..20 {
        message(&mut net);
    }
    lose_first(&mut net, FrameKind::Eager, 1);
    let took = message(&mut net);
    assert!(
        took < 2_000_000,
        "a loss after 20 clean round trips took {took} ns to recover"
    );
}

/// The repeats of messages a receiver holds without a receive (told WAIT) are questions asked
/// on schedule, not losses: they leave the peer's timeout alone. Before, each repeat that
/// fired doubled it, so a receiver holding messages kept its sender's timeout at
/// `rto_max_ns`, and any frame lost meanwhile, of any message, cost that long.
#[test]
fn messages_held_without_a_receive_leave_the_timeout_alone() {
    let mut net = Net::new(2, test_config());
    let rto_max = test_config().rto_max_ns;
    let held: Vec<OpId> = (0..4)
        .map(|_| net.send(0, 1, 1, pattern(20_000, 2)))
        .collect();
    net.run(net.now + 6 * rto_max);
    assert!(held.iter().all(|&op| net.result(0, op).is_none()));
    assert!(
        net.endpoints[1].stats().drops.no_posted_receive >= 8,
        "WAIT, repeated"
    );
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(2), 100);
    lose_first(&mut net, FrameKind::Eager, 1);
    net.send(0, 1, 2, pattern(100, 1));
    let took = net.run_until(rto_max, |net| net.result(1, recv).is_some());
    assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), pattern(100, 1));
    assert!(
        took < rto_max / 4,
        "a loss beside held messages took {took} ns to recover"
    );
}

/// A message its receiver keeps without a receive (WAIT with KEPT) is asked again only as a
/// safety net, at pauses that double from `rto_max_ns` up to `rto_max_ns <<
/// KEPT_REPEAT_DOUBLINGS`: held for 60 `rto_max_ns`, four messages cost their sender 20
/// repeats (five each), not 240 (one per `rto_max_ns` each, as before). Once a receive is posted the receiver's request brings each
/// at once, and a receiver that died meanwhile is still found (the sends wait on its
/// liveness).
#[test]
fn messages_kept_without_a_receive_are_asked_again_rarely() {
    let config = test_config();
    let rto_max = config.rto_max_ns;
    let mut net = Net::new(2, config);
    let held: Vec<OpId> = (0..4)
        .map(|i| net.send(0, 1, 1, pattern(20_000, i)))
        .collect();
    // Repeats counted by their RTS: `frames_retransmitted` counts every frame sent before a
    // grant with it (seven here). A repeat sends its RTS once: its collection's retransmission
    // and the grant wait's repeat fall due together (`expire_sends`), and the RTS went twice.
    let rts_sent = Rc::new(Cell::new(0u64));
    let counting = Rc::clone(&rts_sent);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        counting.set(counting.get() + u64::from(kind_of(bytes) == FrameKind::Rts as u8));
        false
    }));
    net.run(net.now + 60 * rto_max);
    net.filter = None;
    let repeats = rts_sent.get() - 4;
    assert!(held.iter().all(|&op| net.result(0, op).is_none()));
    let bound = 4 * (KEPT_REPEAT_DOUBLINGS as u64 + 60 / (1 << KEPT_REPEAT_DOUBLINGS) + 1);
    assert!(repeats <= bound, "{repeats} repeats, at most {bound}");
    let started = net.now;
    for i in 0..4 {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 20_000);
        net.run_until(rto_max, |net| net.result(1, recv).is_some());
        assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
        assert_eq!(net.bytes(1, region), pattern(20_000, i));
    }
    assert!(net.now - started < rto_max, "each came at once");
    net.run(net.now + 60_000_000_000);
    assert!(held.iter().all(|&op| net.result(0, op)
        == Some(Ok(Status {
            peer: 1,
            tag: 1,
            len: 20_000,
            immediate: None,
        }))));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// The safety net: every request to resume a kept message (the receiver's CTS, repeated
/// `max_retries` times) is lost, and the sender's own repeat, backed off, brings it.
#[test]
fn a_kept_message_whose_every_request_to_resume_is_lost_still_arrives() {
    let mut net = Net::new(2, test_config());
    let send = net.send(0, 1, 1, pattern(20_000, 1));
    net.run(net.now + 1_000_000);
    let cut = std::rc::Rc::new(std::cell::Cell::new(true));
    let cutting = std::rc::Rc::clone(&cut);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        cutting.get() && kind_of(bytes) == FrameKind::Cts as u8
    }));
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 20_000);
    net.run(net.now + 30 * test_config().rto_max_ns);
    assert!(net.result(1, recv).is_none(), "every grant lost");
    cut.set(false);
    net.run(net.now + 60_000_000_000);
    assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), pattern(20_000, 1));
    assert!(net.result(0, send).is_some_and(|r| r.is_ok()));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// A receiver that dies while it keeps messages is declared unreachable: the kept sends wait
/// on its liveness, not on their repeats.
#[test]
fn kept_messages_of_a_receiver_that_dies_fail() {
    let config = test_config();
    let mut net = Net::new(2, config.clone());
    let send = net.send(0, 1, 1, pattern(20_000, 1));
    net.run(net.now + 1_000_000);
    net.endpoints[1] = Endpoint::new(config.clone(), 99, 1, 2).unwrap();
    net.run(net.now + 2 * config.peer_timeout_ns);
    assert_eq!(
        net.result(0, send),
        Some(Err(OpError::PeerUnreachable { peer: 1 }))
    );
    assert!(net.endpoints[0].usage().is_empty());
}

#[test]
fn every_lost_control_frame_is_recovered() {
    use nicmsg_wire::FrameKind::*;
    for kind in [Eager, Rts, Cts, Data, Ack, End, MsgAck, Cleanup, Credit] {
        for count in [1, 3] {
            for (len, recv_first) in [
                (100usize, false),
                (5000, true),
                (200_000, true),
                (200_000, false),
            ] {
                let mut net = Net::new(2, test_config());
                lose_first(&mut net, kind, count);
                let (send, recv, bytes) = transfer(&mut net, len, recv_first);
                assert!(
                    send.result.is_ok() && recv.result.is_ok(),
                    "{kind:?} x{count} len {len}"
                );
                assert!(bytes == pattern(len, 3), "{kind:?} len {len}");
                net.run(net.now + 60_000_000_000);
                for endpoint in &net.endpoints {
                    assert!(
                        endpoint.usage().is_empty(),
                        "{kind:?} x{count} len {len}: {:?}",
                        endpoint.usage()
                    );
                }
            }
        }
    }
}

/// Takes every frame of `kind` off the network from now on and keeps a copy of it, for a test
/// to hand over itself.
fn capture_frames_of_kind(
    net: &mut Net,
    kind: nicmsg_wire::FrameKind,
) -> std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>> {
    let captured: std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>> = Default::default();
    let sink = std::rc::Rc::clone(&captured);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let taken = kind_of(bytes) == kind as u8;
        if taken {
            sink.borrow_mut().push(bytes.to_vec());
        }
        taken
    }));
    captured
}

/// Lets every frame through again and runs until the send from rank 0 and the receive on
/// rank 1 are done: both succeed, the receive holds `data`, nothing is left in any table.
/// Returns rank 1's counters.
fn deliver_the_rest(
    net: &mut Net,
    (send_op, recv_op): (OpId, OpId),
    recv_region: RegionId,
    data: &[u8],
) -> Stats {
    net.filter = None;
    net.run(net.now + 60_000_000_000);
    assert!(net.result(0, send_op).unwrap().is_ok());
    assert_eq!(
        net.result(1, recv_op).unwrap().unwrap().len,
        data.len() as u64
    );
    assert!(
        net.memories[1].0[recv_region.0 as usize] == data,
        "bytes differ"
    );
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    *net.endpoints[1].stats()
}

/// Speculative placement: DATA frames whose payload is put at its predicted place are taken
/// without a copy; a frame whose payload in place is corrupt is refused (then handled normally).
#[test]
fn predicted_frames_are_taken_in_place() {
    let len = 100_000usize;
    let mut net = Net::new(2, test_config());
    let captured = capture_frames_of_kind(&mut net, nicmsg_wire::FrameKind::Data);
    let data = pattern(len, 3);
    let (recv_op, recv_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let send_op = net.send(0, 1, 5, data.clone());
    net.run(net.now + 2_000_000);
    let frames = std::mem::take(&mut *captured.borrow_mut());
    assert!(!frames.is_empty(), "the first window went out");
    let mut expected = [ExpectedFrame::default(); 64];
    let mut taken = 0;
    for (n, frame) in frames.iter().enumerate() {
        let count = net.endpoints[1].predict_frames(&mut expected);
        let index = nicmsg_wire::FrameView::new_checked(&frame[..])
            .unwrap()
            .frame_index();
        let guess = expected[..count]
            .iter()
            .find(|e| e.frame_index == index)
            .copied();
        let Some(guess) = guess else {
            let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
            e.handle_frame(net.now, frame, m);
            continue;
        };
        let (header, payload) = frame.split_at(guess.header_len());
        let region = &mut net.memories[1].0[guess.segment.region.0 as usize];
        let start = guess.segment.offset as usize;
        region[start..start + payload.len()].copy_from_slice(payload);
        if n == 0 {
            region[start] ^= 0xFF; // corrupt in place: must be refused
            let outcome = net.endpoints[1].handle_placed_frame(
                net.now,
                header,
                frame.len(),
                &guess,
                &mut net.memories[1],
            );
            assert_eq!(outcome, PlacedOutcome::NotPredicted);
            net.memories[1].0[guess.segment.region.0 as usize][start] ^= 0xFF;
        }
        let outcome = net.endpoints[1].handle_placed_frame(
            net.now,
            header,
            frame.len(),
            &guess,
            &mut net.memories[1],
        );
        assert_eq!(outcome, PlacedOutcome::Taken);
        taken += 1;
    }
    assert!(taken > 0, "some frames were predicted");
    let stats = deliver_the_rest(&mut net, (send_op, recv_op), recv_region, &data);
    assert!(stats.bytes_placed_direct > 0, "{stats:?}");
}

/// Speculative placement of an eager message: once its first frame has matched the posted
/// receive, its other frames are predicted (with the message header they carry) and taken in
/// place, nothing copied; a corrupt one is refused.
#[test]
fn an_eager_messages_later_frames_are_taken_in_place() {
    let config = test_config();
    let len = config.eager_limit as usize;
    let mut net = Net::new(2, config);
    let captured = capture_frames_of_kind(&mut net, nicmsg_wire::FrameKind::Eager);
    let data = pattern(len, 9);
    let (recv_op, recv_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let send_op = net.send(0, 1, 5, data.clone());
    net.run(net.now + 50_000);
    let mut frames = std::mem::take(&mut *captured.borrow_mut());
    frames.sort_by_key(|frame| {
        nicmsg_wire::FrameView::new_checked(&frame[..])
            .unwrap()
            .frame_index()
    });
    frames.dedup();
    assert!(frames.len() > 2, "an eager message of several frames");
    let mut expected = [ExpectedFrame::default(); 64];
    let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
    assert_eq!(
        e.predict_frames(&mut expected),
        0,
        "nothing before the message"
    );
    e.handle_frame(net.now, &frames[0], m);
    for (n, frame) in frames.iter().enumerate().skip(1) {
        let count = net.endpoints[1].predict_frames(&mut expected);
        let guess = expected[..count]
            .iter()
            .find(|e| e.frame_index == n as u32)
            .copied()
            .unwrap_or_else(|| panic!("frame {n} predicted: {:?}", &expected[..count]));
        assert!(guess.eager);
        let (header, payload) = frame.split_at(guess.header_len());
        let region = &mut net.memories[1].0[guess.segment.region.0 as usize];
        let start = guess.segment.offset as usize;
        region[start..start + payload.len()].copy_from_slice(payload);
        let offer = |net: &mut Net| {
            net.endpoints[1].handle_placed_frame(
                net.now,
                header,
                frame.len(),
                &guess,
                &mut net.memories[1],
            )
        };
        if n == 1 {
            net.memories[1].0[guess.segment.region.0 as usize][start] ^= 0xFF;
            assert_eq!(
                offer(&mut net),
                PlacedOutcome::NotPredicted,
                "corrupt in place"
            );
            net.memories[1].0[guess.segment.region.0 as usize][start] ^= 0xFF;
        }
        assert_eq!(offer(&mut net), PlacedOutcome::Taken, "frame {n}");
    }
    let (e, _) = (&mut net.endpoints[1], &mut net.memories[1]);
    assert_eq!(
        e.predict_frames(&mut expected),
        0,
        "nothing once it is whole"
    );
    let stats = deliver_the_rest(&mut net, (send_op, recv_op), recv_region, &data);
    let first_payload = frames[0].len() - ExpectedFrame::MAX_HEADER_LEN;
    assert_eq!(
        stats.bytes_placed_direct,
        (len - first_payload) as u64,
        "{stats:?}"
    );
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// Two ranks whose frames leave their payload to the link (so headers read ahead can be
/// verified alone), and the frames of `kind` rank 1 would get, held back.
fn net_capturing_link_checked(
    kind: nicmsg_wire::FrameKind,
) -> (Net, std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>) {
    let config = Config {
        link_checks_payload: true,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    let captured = capture_frames_of_kind(&mut net, kind);
    (net, captured)
}

/// The RTS of a message, read ahead of its datagram (`first_frame.rs`), is predicted only into
/// the receive that handling it now would bind, and exactly there: not before that receive is
/// posted, not into a receive too short for the message, not with a header byte changed or a
/// length that disagrees, and not a second time. Taken in place, it delivers the message like
/// any RTS, its payload never copied.
#[test]
fn a_first_frame_read_ahead_is_predicted_only_into_the_receive_it_binds() {
    let len = 100_000usize;
    let (mut net, captured) = net_capturing_link_checked(nicmsg_wire::FrameKind::Rts);
    let data = pattern(len, 4);
    let send_op = net.send(0, 1, 5, data.clone());
    net.run(net.now + 50_000);
    let rts = captured.borrow()[0].clone();
    let head = &rts[..ExpectedFrame::MAX_HEADER_LEN];
    let predict = |net: &Net| net.endpoints[1].predict_first_frame(head, rts.len(), None);
    assert_eq!(predict(&net), None, "no receive posted");
    let (other_tag, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(6), len);
    assert_eq!(predict(&net), None, "the receive posted takes another tag");
    let (short, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len - 1);
    assert_eq!(
        predict(&net),
        None,
        "the receive posted is too short: truncation"
    );
    let now = net.now;
    for op in [other_tag, short] {
        assert_eq!(
            net.endpoints[1].cancel(now, op),
            Ok(CancelOutcome::Cancelled)
        );
    }
    let (recv_op, recv_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let guess = predict(&net).expect("predicted into the receive posted");
    assert!(guess.first && !guess.eager);
    assert_eq!((guess.frame_index, guess.offset), (0, 0));
    assert_eq!(guess.segment.region, recv_region);
    assert_eq!(guess.segment.offset, 0);
    assert_eq!(guess.header_len() + guess.segment.len as usize, rts.len());
    let e = &net.endpoints[1];
    assert_eq!(
        e.predict_first_frame(head, rts.len() + 1, None),
        None,
        "longer"
    );
    for at in 0..head.len() {
        let mut changed = head.to_vec();
        changed[at] ^= 0x01;
        assert_eq!(
            e.predict_first_frame(&changed, rts.len(), None),
            None,
            "header byte {at} changed"
        );
    }
    let (header, payload) = rts.split_at(guess.header_len());
    net.memories[1].0[recv_region.0 as usize][..payload.len()].copy_from_slice(payload);
    let outcome = net.endpoints[1].handle_placed_frame(
        net.now,
        header,
        rts.len(),
        &guess,
        &mut net.memories[1],
    );
    assert_eq!(outcome, PlacedOutcome::Taken);
    assert_eq!(
        predict(&net),
        None,
        "the message is known now: a copy is a duplicate"
    );
    let stats = deliver_the_rest(&mut net, (send_op, recv_op), recv_region, &data);
    assert!(
        stats.bytes_placed_direct >= payload.len() as u64,
        "the RTS's payload counts as placed: {stats:?}"
    );
}

/// A transport that receives a run of one sender's frames as one datagram (UDP with GRO) has
/// the frames behind a first frame predicted with it (`first_frame.rs`): the next frames of
/// the same message, into the receive the first binds, as far as their lengths fit the run.
/// Taken in place one after the other, they deliver the message with none of it copied.
#[test]
fn frames_behind_a_first_frame_in_a_coalesced_run_are_predicted_with_it() {
    let len = 8_000usize;
    let (mut net, captured) = net_capturing_link_checked(nicmsg_wire::FrameKind::Eager);
    let data = pattern(len, 8);
    let send_op = net.send(0, 1, 5, data.clone());
    net.run(net.now + 50_000);
    let frames: Vec<Vec<u8>> = captured.borrow().clone();
    assert!(frames.len() >= 4, "an eager message of several frames");
    let run_len: usize = frames.iter().map(Vec::len).sum();
    let look = |datagram_len: usize| LookAhead {
        head: &frames[0][..ExpectedFrame::MAX_HEADER_LEN],
        frame_len: frames[0].len(),
        datagram_len,
        from: None,
    };
    let mut out = [ExpectedFrame::default(); 64];
    let predict = |net: &Net, look: &LookAhead<'_>, out: &mut [ExpectedFrame]| {
        net.endpoints[1].predict_first_frames(look, out)
    };
    assert_eq!(predict(&net, &look(run_len), &mut out), 0, "no receive");
    let (recv_op, recv_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let three = frames[..3].iter().map(Vec::len).sum();
    assert_eq!(predict(&net, &look(three), &mut out), 3, "a run of three");
    assert_eq!(
        predict(&net, &look(frames[0].len() + 10), &mut out),
        1,
        "a run whose second frame is not the message's next"
    );
    assert_eq!(
        predict(&net, &look(run_len), &mut out[..2]),
        2,
        "room for two"
    );
    let count = predict(&net, &look(run_len), &mut out);
    assert_eq!(count, frames.len(), "the whole message in one run");
    let mut offset = 0;
    for (index, (expected, frame)) in out[..count].iter().zip(&frames).enumerate() {
        assert_eq!(expected.frame_index, index as u32);
        assert_eq!(expected.first, index == 0);
        assert!(expected.eager);
        assert_eq!(
            (expected.segment.region, expected.segment.offset),
            (recv_region, offset)
        );
        assert_eq!(
            expected.header_len() + expected.segment.len as usize,
            frame.len()
        );
        offset += expected.segment.len;
    }
    // As the kernel scatters the run, then each frame is offered as placed, in order.
    for (expected, frame) in out[..count].iter().zip(&frames) {
        let payload = &frame[expected.header_len()..];
        let start = expected.segment.offset as usize;
        net.memories[1].0[recv_region.0 as usize][start..start + payload.len()]
            .copy_from_slice(payload);
    }
    for (expected, frame) in out[..count].iter().zip(&frames) {
        let header = &frame[..expected.header_len()];
        let outcome = net.endpoints[1].handle_placed_frame(
            net.now,
            header,
            frame.len(),
            expected,
            &mut net.memories[1],
        );
        assert_eq!(
            outcome,
            PlacedOutcome::Taken,
            "frame {}",
            expected.frame_index
        );
    }
    let stats = deliver_the_rest(&mut net, (send_op, recv_op), recv_region, &data);
    assert_eq!(stats.bytes_copied, 0, "nothing copied: {stats:?}");
}

/// An RTS that came before its receive was posted has its data dropped (the receiver keeps
/// the header); once the receive is posted, frame 0 comes again, as a DATA frame, and is
/// predicted into the receive like the frames after it.
#[test]
fn frame_0_sent_again_after_its_receive_was_posted_is_predicted() {
    let len = 100_000usize;
    let mut net = Net::new(2, test_config());
    let data = pattern(len, 7);
    let send_op = net.send(0, 1, 5, data.clone());
    net.run(net.now + 20_000);
    let mut expected = [ExpectedFrame::default(); 64];
    assert_eq!(
        net.endpoints[1].predict_frames(&mut expected),
        0,
        "no receive yet"
    );
    let (recv_op, recv_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let count = net.endpoints[1].predict_frames(&mut expected);
    let frame_0 = expected[..count]
        .iter()
        .find(|e| e.frame_index == 0)
        .copied()
        .expect("frame 0 predicted");
    assert!(!frame_0.eager && !frame_0.first, "a DATA frame");
    assert_eq!((frame_0.offset, frame_0.segment.region), (0, recv_region));
    deliver_the_rest(&mut net, (send_op, recv_op), recv_region, &data);
}

/// MPI matches a sender's messages in the order it sent them: the RTS of a second message,
/// read ahead while the first has not arrived, is not predicted into the receive the first
/// will take.
#[test]
fn a_first_frame_is_not_predicted_ahead_of_an_earlier_message_of_its_sender() {
    let len = 100_000usize;
    let (mut net, captured) = net_capturing_link_checked(nicmsg_wire::FrameKind::Rts);
    let (first, second) = (pattern(len, 5), pattern(len, 6));
    let first_send = net.send(0, 1, 5, first.clone());
    let second_send = net.send(0, 1, 5, second.clone());
    net.run(net.now + 50_000);
    let rts: Vec<Vec<u8>> = captured.borrow().clone();
    let msg_id = |frame: &[u8]| nicmsg_wire::FrameView::new_checked(frame).unwrap().msg_id();
    let later = rts
        .iter()
        .find(|f| msg_id(f) != msg_id(&rts[0]))
        .expect("two RTS");
    let (recv_op, recv_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    let head = |frame: &[u8]| frame[..ExpectedFrame::MAX_HEADER_LEN].to_vec();
    let e = &net.endpoints[1];
    assert_eq!(
        e.predict_first_frame(&head(later), later.len(), None),
        None,
        "the first message takes this receive"
    );
    assert!(e
        .predict_first_frame(&head(&rts[0]), rts[0].len(), None)
        .is_some());
    let (second_recv, second_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(5), len);
    net.filter = None;
    net.run(net.now + 60_000_000_000);
    for (send, recv, region, data) in [
        (first_send, recv_op, recv_region, &first),
        (second_send, second_recv, second_region, &second),
    ] {
        assert!(net.result(0, send).unwrap().is_ok());
        assert!(net.result(1, recv).unwrap().is_ok());
        assert!(net.bytes(1, region) == &data[..], "in the order sent");
    }
}

#[test]
fn messages_to_self_match_in_order_probe_truncate_and_cancel() {
    let mut net = Net::new(2, test_config());
    let first = net.send(0, 0, 3, pattern(20_000, 1));
    let second = net.send(0, 0, 3, pattern(10, 2));
    assert_eq!(
        net.endpoints[0].iprobe(Source::Rank(0), Context::USER, TagMatch::Tag(3)),
        Some(Status {
            peer: 0,
            tag: 3,
            len: 20_000,
            immediate: None,
        })
    );
    let cancelled = net.send(0, 0, 4, pattern(5, 3));
    let now = net.now;
    assert_eq!(
        net.endpoints[0].cancel(now, cancelled),
        Ok(CancelOutcome::Cancelled)
    );
    let (a, region_a) = net.recv(0, Source::Any, TagMatch::Tag(3), 20_000);
    let (b, _) = net.recv(0, Source::Rank(0), TagMatch::Any, 4);
    net.run(net.now + 1_000);
    assert_eq!(
        net.result(0, a),
        Some(Ok(Status {
            peer: 0,
            tag: 3,
            len: 20_000,
            immediate: None,
        }))
    );
    assert!(
        net.memories[0].0[region_a.0 as usize] == pattern(20_000, 1),
        "first message first"
    );
    assert!(matches!(
        net.result(0, b),
        Some(Err(OpError::Truncated {
            message_len: 10,
            ..
        }))
    ));
    assert!(net.result(0, first).unwrap().is_ok());
    assert!(net.result(0, second).unwrap().is_ok());
    assert_eq!(net.result(0, cancelled), Some(Err(OpError::Cancelled)));
    // A receive posted first is matched by a later send at once.
    let (c, region_c) = net.recv(0, Source::Rank(0), TagMatch::Tag(6), 3000);
    net.send(0, 0, 6, pattern(3000, 9));
    net.run(net.now + 1_000);
    assert!(net.result(0, c).unwrap().is_ok());
    assert!(net.memories[0].0[region_c.0 as usize] == pattern(3000, 9));
    assert!(
        net.endpoints[0].usage().is_empty(),
        "{:?}",
        net.endpoints[0].usage()
    );
}

/// A request answered within `ack_delay_ns` costs no acknowledgement datagram: the reply carries
/// it (ACKED), and the short request completed at once from the core's copy, so the sender may
/// reuse its buffer immediately without changing what is delivered.
#[test]
fn reply_carries_the_acknowledgement_and_short_sends_complete_at_once() {
    let mut net = Net::new(2, test_config());
    let request = pattern(8, 1);
    let request_region = net.region(0, request.clone());
    let reply_region = net.region(1, pattern(8, 2));
    let inbox = [net.region(0, vec![0; 8]), net.region(1, vec![0; 8])];
    for rank in [0, 1] {
        let (e, m) = (&mut net.endpoints[rank], &mut net.memories[rank]);
        let buffer = SgList::contiguous(inbox[rank], 0, 8);
        e.post_recv(0, Source::Any, Context::USER, TagMatch::Any, &buffer, m)
            .unwrap();
    }
    let send = SgList::contiguous(request_region, 0, 8);
    let request_op = net.endpoints[0]
        .post_send(0, 1, Context::USER, 1, &send, &mut net.memories[0])
        .unwrap();
    let done = net.endpoints[0]
        .poll_completion()
        .expect("completed at once");
    assert_eq!((done.op, done.result.map(|s| s.len)), (request_op, Ok(8)));
    // The host owns its buffer again: overwriting it must not change the message.
    net.memories[0].0[request_region.0 as usize].fill(0xEE);
    // The request arrives after one link delay; reply well within the acknowledgement delay.
    net.run(net.delay_ns + 1_000);
    let reply = SgList::contiguous(reply_region, 0, 8);
    net.endpoints[1]
        .post_send(net.now, 0, Context::USER, 2, &reply, &mut net.memories[1])
        .unwrap();
    net.run(net.now + 1_000_000_000);
    assert_eq!(net.memories[1].0[inbox[1].0 as usize], request);
    assert_eq!(net.memories[0].0[inbox[0].0 as usize], pattern(8, 2));
    let (requester, replier) = (net.endpoints[0].stats(), net.endpoints[1].stats());
    assert_eq!(replier.acks_piggybacked, 1);
    assert_eq!(
        replier.frames_sent, 1,
        "the reply alone, acknowledging the request"
    );
    assert_eq!(
        requester.frames_sent, 2,
        "the request, then the reply's acknowledgement after the delay"
    );
    assert_eq!(requester.sends_completed_early, 1);
    for endpoint in &net.endpoints {
        assert!(endpoint.usage().is_empty(), "{:?}", endpoint.usage());
    }
}

/// The kind byte of a frame the test network carries.
fn kind_of(bytes: &[u8]) -> u8 {
    nicmsg_wire::FrameView::new_checked(bytes)
        .expect("a frame header")
        .kind_code()
}

/// Whole eager messages received together are acknowledged by one ACK_ALL for the run of
/// their ids (`frame_index` counts the ids after `msg_id`), not a datagram each, and every
/// send completes on it.
#[test]
fn a_burst_of_whole_eager_messages_is_acknowledged_by_one_frame() {
    const BURST: usize = 5;
    // Above the inline size: each send completes only on its acknowledgement.
    const LEN: usize = 1000;
    let mut net = Net::new(2, test_config());
    let receives: Vec<_> = (0..BURST)
        .map(|tag| net.recv(1, Source::Rank(0), TagMatch::Tag(tag as Tag), LEN))
        .collect();
    let eager = capture_frames_of_kind(&mut net, nicmsg_wire::FrameKind::Eager);
    let sends: Vec<_> = (0..BURST)
        .map(|tag| net.send(0, 1, tag as Tag, pattern(LEN, tag as u8)))
        .collect();
    net.run(net.now + 1_000);
    assert_eq!(
        eager.borrow().len(),
        BURST,
        "one frame a message, held back"
    );
    let acks: std::rc::Rc<std::cell::RefCell<Vec<(u16, u32, u32)>>> = Default::default();
    let log = std::rc::Rc::clone(&acks);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        if header.kind == nicmsg_wire::FrameKind::Ack {
            log.borrow_mut()
                .push((header.flags, header.msg_id, header.frame_index));
        }
        false
    }));
    // The burst arrives before the receiver transmits anything.
    for bytes in eager.borrow().iter() {
        net.endpoints[1].handle_frame(net.now, bytes, &mut net.memories[1]);
    }
    net.run(net.now + 1_000_000);
    let first_id = acks.borrow().first().map(|ack| ack.1).expect("an ACK");
    assert_eq!(
        *acks.borrow(),
        [(nicmsg_wire::Flags::ACK_ALL, first_id, BURST as u32 - 1)],
        "one ACK_ALL for the run"
    );
    for (tag, (send, (recv, region))) in sends.iter().zip(&receives).enumerate() {
        assert!(net.result(0, *send).unwrap().is_ok(), "send {tag}");
        assert!(net.result(1, *recv).unwrap().is_ok(), "receive {tag}");
        assert_eq!(
            net.bytes(1, *region),
            pattern(LEN, tag as u8),
            "bytes {tag}"
        );
    }
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// An ACK_ALL whose run is longer than any sender makes is dropped and counted; one within it
/// acknowledges the messages actually sent (the other ids count as duplicates).
#[test]
fn an_ack_all_run_beyond_the_limit_is_dropped() {
    let mut net = Net::new(2, test_config());
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 1000);
    let send = net.send(0, 1, 1, pattern(1000, 1));
    let acks = capture_frames_of_kind(&mut net, nicmsg_wire::FrameKind::Ack);
    net.run(net.now + 1_000_000);
    assert!(net.result(1, recv).unwrap().is_ok());
    assert_eq!(
        net.result(0, send),
        None,
        "its acknowledgement was held back"
    );
    let real = acks.borrow()[0].clone();
    let with_run = |run: u32| {
        let mut bytes = real.clone();
        let mut view = nicmsg_wire::FrameView::new_checked(&mut bytes[..]).unwrap();
        view.set_frame_index(run);
        let len = bytes.len();
        nicmsg_wire::seal(&mut bytes[..len], &[]);
        bytes
    };
    let invalid_before = net.endpoints[0].stats().drops.invalid;
    net.endpoints[0].handle_frame(net.now, &with_run(64), &mut net.memories[0]);
    net.run(net.now + 1_000);
    assert_eq!(net.endpoints[0].stats().drops.invalid, invalid_before + 1);
    assert_eq!(
        net.result(0, send),
        None,
        "a run too long acknowledges nothing"
    );
    net.endpoints[0].handle_frame(net.now, &with_run(3), &mut net.memories[0]);
    net.run(net.now + 1_000);
    assert!(net.result(0, send).unwrap().is_ok());
    assert_eq!(net.bytes(1, region), pattern(1000, 1));
}

/// `drop` mode: the data of a message that came while no receive waited is asked for again
/// (CTS with FROM_START) when one is posted. If that request is lost, the receiver repeats it
/// after a timeout; the sender, told to WAIT, would try again only after `rto_max_ns`.
#[test]
fn a_lost_request_for_a_dropped_message_is_repeated() {
    a_lost_request_to_resume_is_repeated(UnexpectedPolicy::Drop, 100);
}

/// The same for a rendezvous message whose RTS found no receive (in the default mode): its
/// sender was told to WAIT, and the first grant, which asks for it from the start, is lost.
#[test]
fn a_lost_first_grant_to_a_waiting_sender_is_repeated() {
    a_lost_request_to_resume_is_repeated(UnexpectedPolicy::Buffer, 20_000);
}

/// A message of `len` bytes from 0 to 1, sent before its receive is posted: its data is
/// discarded and its sender told to WAIT; the receiver's first request to resume (a CTS with
/// FROM_START) is lost. The message must arrive a timeout or so after the receive is posted.
fn a_lost_request_to_resume_is_repeated(unexpected: UnexpectedPolicy, len: usize) {
    let config = Config {
        unexpected,
        rto_max_ns: 50_000_000,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    let send = net.send(0, 1, 7, pattern(len, 1));
    net.run(net.now + 200_000);
    assert!(
        net.endpoints[1].stats().drops.no_posted_receive > 0,
        "dropped, WAIT"
    );
    let requests = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = std::rc::Rc::clone(&requests);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        let request = header.kind == nicmsg_wire::FrameKind::Cts
            && header.has_flag(nicmsg_wire::Flags::FROM_START);
        if request {
            seen.set(seen.get() + 1);
        }
        // The first request is lost.
        request && seen.get() == 1
    }));
    let posted_at = net.now;
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(7), len);
    let took = net.run_until(40_000_000, |net| net.result(1, recv).is_some());
    assert!(net.result(1, recv).unwrap().is_ok());
    assert_eq!(net.bytes(1, region), pattern(len, 1));
    assert_eq!(requests.get(), 2, "asked twice");
    assert!(
        took < 5_000_000,
        "delivered {took} ns after the receive was posted at {posted_at}, not after the sender's rto_max"
    );
    net.filter = None;
    net.run(net.now + 60_000_000_000);
    assert!(net.result(0, send).unwrap().is_ok());
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// NetPIPE's stream into a receiver slower than its sender, posting one receive at a time:
/// every class's credits come back before the sender runs dry, so it asks for them at most
/// once (when its first window fills, before the receiver has taken any) and nothing goes by
/// rendezvous. Short messages, whose senders do not wait for acknowledgements, also get their
/// credits and acknowledgements back together, one frame per half a window of credits, not
/// one per message: returning each credit at once while the sender's messages filled the
/// receiver's buffers (the rule before) cost the slower side a datagram a message, and
/// `NPopenmpi -s` at 8 bytes 6.2 us a message against 4.4. (Longer messages are acknowledged
/// as they arrive, their senders waiting, and those acknowledgements carry the credits too.)
#[test]
fn a_slow_receiver_returns_credits_half_a_window_at_a_time() {
    for len in [8, 1000, 6000] {
        slow_receiver_returns_credits_half_a_window_at_a_time(len);
    }
}

fn slow_receiver_returns_credits_half_a_window_at_a_time(len: usize) {
    let credits = 8;
    let (mut net, _) = net_with_receiver_behind_at(credits);
    let requests = Rc::new(Cell::new(0u32));
    let asked = requests.clone();
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        if header.kind == FrameKind::Credit && header.has_flag(Flags::REQUEST) {
            asked.set(asked.get() + 1);
        }
        false
    }));
    const MESSAGES: u32 = 120;
    let sends: Vec<OpId> = (0..MESSAGES)
        .map(|i| net.send(0, 1, 1, pattern(len, i as u8)))
        .collect();
    let sent_before = net.endpoints[1].stats().frames_sent;
    for i in 0..MESSAGES {
        let (op, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
        net.run_until(10_000_000, |net| net.result(1, op).is_some());
        assert_eq!(net.bytes(1, region), pattern(len, i as u8), "MPI order");
        // The receiver's application takes a while over each message.
        net.run(net.now + 4_000);
    }
    let frames = net.endpoints[1].stats().frames_sent - sent_before;
    assert!(
        len as u64 > SMALL_MESSAGE_MAX || frames <= u64::from(MESSAGES / (credits / 2)) + 2,
        "{len} B: {frames} frames back for {MESSAGES} messages at {credits} credits"
    );
    assert_eq!(
        net.endpoints[0].stats().credit_stalls,
        0,
        "{len} B: all went eager"
    );
    assert!(
        requests.get() <= 1,
        "{len} B: the sender asked for credits {} times",
        requests.get()
    );
    sends_end_and_state_is_freed(&mut net, &sends);
}

/// A duplicate frame of a finished message is acknowledged with ACK_ALL, and an ACK_ALL's
/// `frame_index` counts the messages after it that it acknowledges too (a run). Message 0's
/// acknowledgements are lost, so its frames come again; messages 1 and 2 are lost twice.
/// Re-acknowledging message 0's frame 2 must not acknowledge messages 1 and 2: their sender
/// would stop resending them, and they would never arrive.
#[test]
fn re_acknowledging_a_duplicate_frame_acknowledges_only_its_message() {
    let mut net = Net::new(2, test_config());
    let payload = net.endpoints[0].config().frame_payload() as usize;
    let lens = [3 * payload - 100, 1000, 1000];
    let recvs: Vec<_> = lens
        .iter()
        .map(|&len| net.recv(1, Source::Rank(0), TagMatch::Tag(1), len))
        .collect();
    let (acks_dropped, sends_dropped) = (Rc::new(Cell::new(0)), Rc::new(Cell::new([0u32; 3])));
    let (acks, sends) = (acks_dropped.clone(), sends_dropped.clone());
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        let id = header.msg_id as usize;
        if header.src == 1 && header.kind == FrameKind::Ack && id == 0 && acks.get() < 2 {
            acks.set(acks.get() + 1);
            return true;
        }
        let mut counts = sends.get();
        if header.src == 0 && header.kind == FrameKind::Eager && (1..3).contains(&id) {
            counts[id] += 1;
            sends.set(counts);
            return counts[id] <= 2;
        }
        false
    }));
    let sends: Vec<OpId> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| net.send(0, 1, 1, pattern(len, i as u8)))
        .collect();
    net.run(net.now + 100_000_000);
    assert_eq!(
        acks_dropped.get(),
        2,
        "message 0's first acknowledgements were lost"
    );
    let counts = sends_dropped.get();
    assert!(
        counts[1..].iter().all(|&n| n > 2),
        "resent after two losses: {counts:?}"
    );
    for (i, &(op, region)) in recvs.iter().enumerate() {
        assert!(
            net.result(1, op).is_some_and(|r| r.is_ok()),
            "message {i} arrives"
        );
        assert_eq!(net.bytes(1, region), &pattern(lens[i], i as u8)[..]);
    }
    sends_end_and_state_is_freed(&mut net, &sends);
}

/// Acknowledgement runs of short messages, with a gap in their ids (a long message between
/// them is acknowledged its own way) and a reply that carries what is owed: every short
/// message is acknowledged once, in time, so nothing is sent twice.
#[test]
fn acknowledgement_runs_around_a_gap_and_a_reply_lose_nothing() {
    let mut net = Net::new(2, test_config());
    let lens = [8, 100, 20_000, 8, 200];
    let recvs: Vec<_> = lens
        .iter()
        .map(|&len| net.recv(1, Source::Rank(0), TagMatch::Tag(1), len))
        .collect();
    let sends: Vec<OpId> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| net.send(0, 1, 1, pattern(len, i as u8)))
        .collect();
    // The short messages are in; a reply from the receiver carries what it still owes the
    // sender, before the run's deadline sends it.
    net.run(net.now + net.delay_ns + 2_000);
    assert!([0, 1, 3, 4]
        .iter()
        .all(|&i| net.result(1, recvs[i].0).is_some()));
    let reply = net.send(1, 0, 2, vec![7; 8]);
    let (back, _) = net.recv(0, Source::Rank(1), TagMatch::Tag(2), 8);
    net.run(net.now + 10_000_000);
    for (i, &(op, region)) in recvs.iter().enumerate() {
        assert!(net.result(1, op).is_some_and(|r| r.is_ok()), "message {i}");
        assert_eq!(net.bytes(1, region), &pattern(lens[i], i as u8)[..]);
    }
    assert!(net.result(0, back).is_some_and(|r| r.is_ok()));
    assert!(net.result(1, reply).is_some_and(|r| r.is_ok()));
    assert_eq!(
        net.endpoints[0].stats().frames_retransmitted,
        0,
        "every acknowledgement arrived before a timeout"
    );
    sends_end_and_state_is_freed(&mut net, &sends);
}

/// A receiver shown to fall behind, its small buffers for the sender all held by messages no
/// receive wants, while its receive waits for a later short message: asked for credits, it
/// answers WAIT, and the later message goes by rendezvous at once instead of waiting out the
/// credit wait.
#[test]
fn small_buffers_held_for_good_are_said_so_and_the_later_message_goes_at_once() {
    let (mut net, wait_ns) = net_with_receiver_behind_at(2);
    let (wanted, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(2), 8);
    let held: Vec<OpId> = (0..4u8).map(|i| net.send(0, 1, 1, vec![i; 8])).collect();
    let later = net.send(0, 1, 2, vec![0xAB; 8]);
    let elapsed = net.run_until(wait_ns, |net| net.result(1, wanted).is_some());
    assert!(
        elapsed < wait_ns / 2,
        "the wanted message took {elapsed} ns (credit wait {wait_ns} ns)"
    );
    assert_eq!(net.bytes(1, region), &[0xAB; 8][..]);
    let drained: Vec<_> = (0..4)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), 8))
        .collect();
    net.run(net.now + 100_000_000);
    for (i, &(op, region)) in drained.iter().enumerate() {
        assert!(net.result(1, op).is_some_and(|r| r.is_ok()));
        assert_eq!(net.bytes(1, region), &[i as u8; 8][..], "MPI order");
    }
    assert!(net.result(0, later).is_some_and(|r| r.is_ok()));
    sends_end_and_state_is_freed(&mut net, &held);
}

/// A sender that spends credits its receiver never freed (a count taken from a frame stale by
/// a whole wrap of the ten-bit counts, a broken or hostile peer) costs resends, never a hang:
/// the receiver keeps the header of an eager message it has no buffer for, as in `drop` mode,
/// and asks for its data once a receive matches it. Here the receiver waits for a tag-2
/// message while tag-1 messages hold its medium buffers, and a forged CREDIT gives the sender
/// four credits more. Refused whole instead, the messages behind were told WAIT for ever and
/// the tag-2 receive never completed.
#[test]
fn credits_the_receiver_never_freed_cost_resends_never_a_hang() {
    use nicmsg_wire::{emit_frame, Flags, FrameHeader, FRAME_HEADER_LEN};
    const LEN: usize = 1000; // a medium message
    const MEDIUM_SHIFT: u32 = 20;
    let config = Config {
        medium_credits_per_peer: 4,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    // The latest frame that told rank 0 the credits rank 1 returned.
    let latest: Rc<Cell<Option<FrameHeader>>> = Rc::default();
    let seen = latest.clone();
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let header = FrameHeader::parse(bytes[..FRAME_HEADER_LEN].try_into().unwrap()).unwrap();
        let carries = matches!(header.kind, FrameKind::Ack | FrameKind::Credit)
            || header.has_flag(Flags::CREDITS);
        if header.src == 1 && carries {
            seen.set(Some(header));
        }
        false
    }));
    let (wanted, wanted_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(2), LEN);
    let mut sends: Vec<OpId> = (0..4u8).map(|i| net.send(0, 1, 1, vec![i; LEN])).collect();
    net.run(net.now + 2_000_000);

    let mut forged = latest
        .get()
        .expect("rank 1 acknowledged the messages it holds");
    let medium = (forged.aux >> MEDIUM_SHIFT) & 0x3ff;
    forged.aux = (forged.aux & !(0x3ff << MEDIUM_SHIFT)) | ((medium + 4) & 0x3ff) << MEDIUM_SHIFT;
    forged.kind = FrameKind::Credit;
    (
        forged.flags,
        forged.msg_id,
        forged.frame_index,
        forged.acked_id,
    ) = (0, 0, 0, 0);
    let mut bytes = [0u8; FRAME_HEADER_LEN];
    emit_frame(&forged, None, &[], &mut bytes).unwrap();
    net.endpoints[0].handle_frame(net.now, &bytes, &mut net.memories[0]);

    sends.extend((4..8u8).map(|i| net.send(0, 1, 1, vec![i; LEN])));
    sends.push(net.send(0, 1, 2, vec![0xab; LEN]));
    net.run(net.now + 1_000_000_000);
    assert!(
        net.result(1, wanted).is_some_and(|r| r.is_ok()),
        "the tag-2 receive completes behind messages without buffers"
    );
    assert_eq!(net.memories[1].0[wanted_region.0 as usize], vec![0xab; LEN]);
    let recvs: Vec<_> = (0..8)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN))
        .collect();
    net.run(net.now + 1_000_000_000);
    for (i, (op, region)) in recvs.iter().enumerate() {
        assert!(net.result(1, *op).is_some_and(|r| r.is_ok()), "message {i}");
        assert_eq!(
            net.memories[1].0[region.0 as usize],
            vec![i as u8; LEN],
            "MPI order"
        );
    }
    assert!(sends
        .iter()
        .all(|&op| net.result(0, op).is_some_and(|r| r.is_ok())));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// A class's buffers in use are one bit each in a word: more than 64 credits of any class (or
/// none) is refused when the endpoint is made, never a buffer shared by two messages, and the
/// error says the bound.
#[test]
fn more_than_64_credits_of_any_class_are_refused() {
    let classes: [fn(&mut Config) -> &mut u32; 3] = [
        |c| &mut c.eager_credits_per_peer,
        |c| &mut c.small_credits_per_peer,
        |c| &mut c.medium_credits_per_peer,
    ];
    for (class, credits) in classes.iter().enumerate() {
        for (count, accepted) in [(64, true), (65, false), (0, false)] {
            let mut config = test_config();
            *credits(&mut config) = count;
            let made = Endpoint::new(config, 1, 0, 2);
            assert_eq!(made.is_ok(), accepted, "class {class}, {count} credits");
            if let Err(error) = made {
                let said = error.to_string();
                assert!(
                    said.ends_with(&format!("must be 1..=64, got {count}")),
                    "{said}"
                );
            }
        }
    }
}

/// A request for credits sent while nothing is awaited from the peer, its answer lost, does
/// not start the peer's silence: a wait that begins long after starts its own clock. Before,
/// the request (sent by a credit wait whose message was then cancelled) left the peer's
/// silence running from it, and the first receive naming the peer ten seconds later
/// declared the live peer unreachable at once, without a single probe.
#[test]
fn a_request_for_credits_nobody_awaits_does_not_count_against_a_later_wait() {
    let (mut net, _) = net_with_receiver_behind();
    let held: Vec<OpId> = (0..2u8).map(|i| net.send(0, 1, 1, vec![i; 1000])).collect();
    net.run(net.now + 10_000_000);
    assert!(held.iter().all(|&op| net.result(0, op).is_some()));
    // Rank 1 answers the request for credits; the answer is lost.
    net.filter = Some(Box::new(|bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        header.kind == FrameKind::Credit && header.src == 1
    }));
    let waiting = net.send(0, 1, 1, vec![9; 1000]);
    net.run(net.now + 200_000);
    let stats = net.endpoints[0].stats();
    assert_eq!((stats.credit_waits, stats.liveness_probes), (1, 0));
    let now = net.now;
    assert_eq!(
        net.endpoints[0].cancel(now, waiting),
        Ok(CancelOutcome::Cancelled)
    );
    net.filter = None;
    // Quiet for longer than the peer timeout (no timer runs: time simply passes), then rank 0
    // waits on rank 1 again.
    net.run(net.now + 1_000_000);
    net.now += 2 * Config::default().peer_timeout_ns;
    let (recv, _) = net.recv(0, Source::Rank(1), TagMatch::Tag(5), 10);
    net.run(net.now + 1_000_000);
    assert!(
        !net.endpoints[0].is_peer_unreachable(1),
        "rank 1 answers: it was only asked once nothing was awaited from it"
    );
    net.send(1, 0, 5, vec![5; 10]);
    net.run(net.now + 10_000_000);
    assert!(net.result(0, recv).is_some_and(|r| r.is_ok()));
}

/// A CANCEL the receiver has no room to decide on (its incoming table is full, so it cannot
/// keep the withdrawal's tombstone) is still answered: the receiver is alive, and the sender
/// asks again until there is room. Before, the receiver stayed silent, and the sender, whose
/// CANCEL was the only frame asking anything of it, declared the live receiver unreachable
/// after `peer_timeout_ns`.
#[test]
fn a_cancel_the_receiver_has_no_room_for_yet_is_answered() {
    let config = Config {
        max_incoming: 2,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    let held: Vec<OpId> = (0..2u8).map(|i| net.send(0, 1, 1, vec![i; 1000])).collect();
    let refused = net.send(0, 1, 2, vec![2; 1000]);
    net.run(net.now + 1_000_000);
    assert!(held.iter().all(|&op| net.result(0, op).is_some()));
    let now = net.now;
    assert_eq!(
        net.endpoints[0].cancel(now, refused),
        Ok(CancelOutcome::Requested)
    );
    net.run(net.now + 2 * Config::default().peer_timeout_ns);
    assert!(
        !net.endpoints[0].is_peer_unreachable(1),
        "rank 1 is alive and answers"
    );
    assert_eq!(
        net.result(0, refused),
        None,
        "undecided while rank 1 has no room"
    );
    for i in 0..2u8 {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 1000);
        net.run(net.now + 1_000_000);
        assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
        assert_eq!(net.bytes(1, region), &vec![i; 1000][..]);
    }
    net.run(net.now + 100_000_000);
    assert_eq!(net.result(0, refused), Some(Err(OpError::Cancelled)));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// Messages held behind a lost one never take the receiver's last incoming entry: the lost
/// one, sent again, must find room, or nothing behind it could ever be matched. Before, the
/// messages behind it filled the table, its retransmissions were answered WAIT for ever, and
/// a receive for it (or for any message behind it) never completed, between two live ranks.
#[test]
fn messages_held_behind_a_lost_one_leave_it_room() {
    let config = Config {
        max_incoming: 2,
        ..test_config()
    };
    let mut net = Net::new(2, config);
    lose_first(&mut net, FrameKind::Eager, 1);
    let sends: Vec<OpId> = (0..3u8).map(|i| net.send(0, 1, 1, vec![i; 1000])).collect();
    net.run(net.now + 1_000_000);
    for i in 0..3u8 {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 1000);
        net.run_until(1_000_000_000, |net| net.result(1, recv).is_some());
        assert!(
            net.result(1, recv).is_some_and(|r| r.is_ok()),
            "message {i}"
        );
        assert_eq!(net.bytes(1, region), &vec![i; 1000][..], "MPI order");
    }
    sends_end_and_state_is_freed(&mut net, &sends);
}

/// An eager message a too-short receive truncated while its frames were still arriving, whose
/// sender then died with a frame of it lost, is freed once the sender is declared unreachable:
/// the receiver awaits the rest of it. Before, nothing was awaited from the dead rank: the
/// receive had completed (`Truncated`) and the message's entry was held for ever.
#[test]
fn a_truncated_message_whose_sender_died_mid_way_is_freed() {
    let mut net = Net::new(2, test_config());
    net.filter = Some(Box::new(|bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("parses").header;
        header.kind == FrameKind::Eager && header.frame_index == 1
    }));
    let (recv, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 10);
    net.send(0, 1, 1, vec![1; 4000]);
    net.run(net.now + 30_000);
    assert!(matches!(
        net.result(1, recv),
        Some(Err(OpError::Truncated { .. }))
    ));
    // Rank 0 dies before it sends the lost frame again.
    net.endpoints[0] = Endpoint::new(test_config(), 99, 0, 2).unwrap();
    net.run(net.now + 60_000_000_000);
    assert!(net.endpoints[1].is_peer_unreachable(0));
    assert!(
        net.endpoints[1].usage().is_empty(),
        "{:?}",
        net.endpoints[1].usage()
    );
}

/// A receive too short for an eager message its receiver kept without its data (`drop` mode:
/// WAIT with KEPT) completes Truncated at once; the message's entry then needs its frames to
/// end, and its sender has stopped asking (its repeats are a safety net, `rto_max_ns` doubled
/// up to `KEPT_REPEAT_DOUBLINGS` times apart). The receiver must ask for them, as it does for
/// a receive that fits: otherwise the send and the entry waited for that repeat, up to 32
/// `rto_max_ns` (6.4 s by default).
#[test]
fn a_kept_eager_message_truncated_by_its_receive_is_asked_for() {
    let config = Config {
        unexpected: UnexpectedPolicy::Drop,
        ..test_config()
    };
    let rto_max = config.rto_max_ns;
    let mut net = Net::new(2, config);
    let send = net.send(0, 1, 1, pattern(4000, 1));
    // Several WAITs and safety repeats: the sender's pause has grown.
    net.run(net.now + 50 * rto_max);
    assert!(net.result(0, send).is_none(), "kept, not received");
    let (recv, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), 100);
    let took = net.run_until(64 * rto_max, |net| {
        net.result(0, send).is_some() && net.endpoints.iter().all(|e| e.usage().is_empty())
    });
    assert!(matches!(
        net.result(1, recv),
        Some(Err(OpError::Truncated { .. }))
    ));
    assert_eq!(net.result(0, send).map(|r| r.is_ok()), Some(true));
    assert!(
        took < rto_max,
        "the truncated message's sender finished {took} ns after the receive"
    );
}

/// A kept message's safety repeats come after `rto_max_ns`, then twice that, and so on up to
/// `rto_max_ns << KEPT_REPEAT_DOUBLINGS` (docs/protocol.md): one doubling per repeat. The
/// pause doubled with every WAIT, and the receiver answers WAIT to each frame it discards: a
/// 4-frame eager message's first repeat came after 8 `rto_max_ns`, its second after 32.
#[test]
fn a_kept_messages_repeats_double_once_per_repeat() {
    for (policy, len) in [
        (UnexpectedPolicy::Drop, 4000),
        (UnexpectedPolicy::Buffer, 20_000),
    ] {
        let config = Config {
            unexpected: policy,
            ..test_config()
        };
        let rto_max = config.rto_max_ns;
        let mut net = Net::new(2, config);
        net.send(0, 1, 1, pattern(len, 1));
        let mut gaps = Vec::new();
        let mut last = (net.now, 0);
        while gaps.len() < 4 {
            net.run_until(100 * rto_max, |net| {
                net.endpoints[0].stats().frames_retransmitted > last.1
            });
            let repeats = net.endpoints[0].stats().frames_retransmitted;
            assert!(repeats > last.1, "{policy:?}: no repeat");
            // Every frame of the repeat leaves at once.
            net.run(net.now + rto_max / 10);
            gaps.push((net.now - last.0 + rto_max / 2) / rto_max);
            last = (net.now, net.endpoints[0].stats().frames_retransmitted);
        }
        assert_eq!(
            gaps,
            [1, 2, 4, 8],
            "{policy:?}: repeats' gaps in rto_max_ns"
        );
    }
}

/// A message of `len` bytes (at least 4) that says its number `i` in its first bytes.
fn numbered(len: usize, i: u32) -> Vec<u8> {
    let mut data = pattern(len, i as u8);
    data[..4].copy_from_slice(&i.to_le_bytes());
    data
}

/// Sends `count` numbered messages of `len` bytes from rank 0 to rank 1 (tag 1) before any
/// receive, and runs until the sender's credit waits ran out: past the receiver's credits
/// they go by rendezvous and are kept without their data.
fn send_beyond_credits(net: &mut Net, count: u32, len: usize) -> Vec<OpId> {
    let sends = (0..count)
        .map(|i| net.send(0, 1, 1, numbered(len, i)))
        .collect();
    net.run(net.now + 50_000_000);
    sends
}

/// A program that sends many short messages before it receives any: past the receiver's
/// credits they go by rendezvous and are kept without their data. As the receives consume the
/// buffered ones, each freed buffer is handed to the next kept message (`handover.rs`), which
/// its sender sends again as an eager one, so the receives find their messages in. Before,
/// every kept message cost its receive a round trip of its own: 240 receives took 4.18 ms of
/// 20 us round trips, now 0.15 ms.
#[test]
fn messages_kept_for_want_of_credits_come_in_ahead_of_their_receives() {
    // One frame from the sender's copy, and three frames of a medium buffer.
    for len in [16, 4096] {
        kept_messages_come_in_ahead_of_their_receives(len);
    }
}

fn kept_messages_come_in_ahead_of_their_receives(len: usize) {
    const MESSAGES: u32 = 240;
    let config = test_config();
    let credits = class_credits(&config, len) as u32;
    let mut net = Net::new(2, config);
    let round_trip = 2 * net.delay_ns;
    let sends = send_beyond_credits(&mut net, MESSAGES, len);
    assert!(net.endpoints[0].stats().credit_stalls > 0);
    let started = net.now;
    for i in 0..MESSAGES {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), len);
        net.run_until(100 * round_trip, |net| net.result(1, recv).is_some());
        assert!(
            net.result(1, recv).is_some_and(|r| r.is_ok()),
            "receive {i}"
        );
        assert_eq!(net.bytes(1, region), numbered(len, i), "message {i}");
    }
    let receiving = net.now - started;
    let taken = net.endpoints[1].stats().kept_taken_as_eager;
    assert!(
        taken >= u64::from(MESSAGES - 2 * credits),
        "{len} B: {taken} kept messages taken as eager"
    );
    assert!(
        receiving < u64::from(MESSAGES) * round_trip / 4,
        "{len} B: {MESSAGES} receives took {receiving} ns, round trip {round_trip} ns"
    );
    net.run(net.now + 1_000_000_000);
    for &send in &sends {
        assert!(net.result(0, send).is_some_and(|r| r.is_ok()));
    }
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(net.endpoints.iter().all(|e| e.credits_unsettled() == 0));
}

/// Whether a frame the test network carries is a CTS asking for a kept message as eager.
fn is_eager_request(bytes: &[u8]) -> bool {
    let header = nicmsg_wire::Frame::parse(bytes).expect("a frame").header;
    header.kind == FrameKind::Cts && header.flags & Flags::EAGER != 0
}

/// A kept message taken as eager whose every request is lost and whose sender then withdraws
/// it (its CANCEL, sent before it heard, says rendezvous): the credit kept back for it comes
/// back all the same. Requests lost for the others are repeated (or answer the sender's
/// repeated RTS), and every message arrives once, in order.
#[test]
fn kept_messages_taken_as_eager_survive_lost_requests_and_a_cancel() {
    const MESSAGES: u32 = 48;
    // Not sent from a copy (those complete at once, and cannot be cancelled): a medium one.
    const LEN: usize = 1000;
    let config = test_config();
    let credits = class_credits(&config, LEN) as u32;
    let mut net = Net::new(2, config);
    let sends = send_beyond_credits(&mut net, MESSAGES, LEN);
    // Every request to send a kept message as eager is lost while the first is received.
    net.filter = Some(Box::new(is_eager_request));
    let (recv, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
    net.run(net.now + 1_000_000);
    assert!(net.result(1, recv).is_some_and(|r| r.is_ok()));
    assert_eq!(net.endpoints[1].stats().kept_taken_as_eager, 1);
    let withdrawn = sends[credits as usize];
    let now = net.now;
    assert_eq!(
        net.endpoints[0].cancel(now, withdrawn),
        Ok(CancelOutcome::Requested)
    );
    net.run(net.now + 1_000_000);
    assert_eq!(net.result(0, withdrawn), Some(Err(OpError::Cancelled)));
    // From now on only the first two requests are lost.
    let lost = Rc::new(Cell::new(0u32));
    let counting = Rc::clone(&lost);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let drop = is_eager_request(bytes) && counting.get() < 2;
        counting.set(counting.get() + u32::from(drop));
        drop
    }));
    for i in (1..MESSAGES).filter(|&i| i != credits) {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
        net.run_until(100_000_000, |net| net.result(1, recv).is_some());
        assert!(
            net.result(1, recv).is_some_and(|r| r.is_ok()),
            "receive {i}"
        );
        assert_eq!(net.bytes(1, region), numbered(LEN, i), "message {i}");
    }
    assert_eq!(lost.get(), 2);
    net.filter = None;
    net.run(net.now + 1_000_000_000);
    for (i, &send) in sends.iter().enumerate() {
        if send != withdrawn {
            assert!(net.result(0, send).is_some_and(|r| r.is_ok()), "send {i}");
        }
    }
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(
        net.endpoints.iter().all(|e| e.credits_unsettled() == 0),
        "the credit kept back for the withdrawn message came back"
    );
}

/// Every request the receiver sends for a kept message it took as eager is lost, up to its
/// `max_retries`: the sender's own safety repeat (its RTS) is answered with the request again,
/// and the message arrives. Dropped as invalid, that RTS left the message and its receive
/// waiting for ever, between live ranks.
#[test]
fn a_kept_message_taken_as_eager_whose_requests_are_all_lost_arrives() {
    const LEN: usize = 16;
    let config = test_config();
    let (credits, max_retries) = (class_credits(&config, LEN) as u32, config.max_retries);
    let mut net = Net::new(2, config);
    send_beyond_credits(&mut net, credits + 1, LEN);
    let lost = Rc::new(Cell::new(0u32));
    let counting = Rc::clone(&lost);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let drop = is_eager_request(bytes) && counting.get() <= max_retries;
        counting.set(counting.get() + u32::from(drop));
        drop
    }));
    for i in 0..=credits {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
        net.run_until(10_000_000_000, |net| net.result(1, recv).is_some());
        assert!(
            net.result(1, recv).is_some_and(|r| r.is_ok()),
            "receive {i}"
        );
        assert_eq!(net.bytes(1, region), numbered(LEN, i), "message {i}");
    }
    assert_eq!(
        lost.get(),
        max_retries + 1,
        "every request of the receiver lost"
    );
    assert_eq!(net.endpoints[1].stats().kept_taken_as_eager, 1);
    net.run(net.now + 1_000_000_000);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(net.endpoints.iter().all(|e| e.credits_unsettled() == 0));
}

/// Holds every frame of the kinds in `kinds` off the network from now on, for a test to hand
/// over itself in an order of its choosing.
fn hold_frames_of_kinds(
    net: &mut Net,
    kinds: &'static [FrameKind],
) -> Rc<std::cell::RefCell<Vec<Vec<u8>>>> {
    let held: Rc<std::cell::RefCell<Vec<Vec<u8>>>> = Default::default();
    let sink = Rc::clone(&held);
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        let taken = kinds.iter().any(|&kind| kind_of(bytes) == kind as u8);
        if taken {
            sink.borrow_mut().push(bytes.to_vec());
        }
        taken
    }));
    held
}

/// The sender withdraws a kept message just as its receiver takes it as eager, and the
/// receive is posted (it binds the message) before the CANCEL comes: the CANCEL is refused,
/// and the sender, which heard the request to send it as eager while it waited for that
/// answer, must still send it so. Taken as a plain CTS, the request marked the message
/// matched; its frame then went as DATA, which the receiver drops for a message it takes as
/// eager, and the send and the receive waited for ever, between live ranks.
#[test]
fn a_kept_message_taken_as_eager_whose_cancel_is_refused_arrives() {
    // Not sent from a copy (those complete at once, and cannot be cancelled): a medium one.
    const LEN: usize = 1000;
    let config = test_config();
    let credits = class_credits(&config, LEN) as u32;
    let mut net = Net::new(2, config);
    let sends = send_beyond_credits(&mut net, credits + 1, LEN);
    let kept = sends[credits as usize];
    assert!(net.result(0, kept).is_none(), "the last one is kept");
    let held = hold_frames_of_kinds(&mut net, &[FrameKind::Cts, FrameKind::Cancel]);
    // The first receive frees a buffer, which goes to the kept message: CTS with EAGER.
    let (first, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
    net.run(net.now + 1_000_000);
    assert!(net.result(1, first).is_some_and(|r| r.is_ok()));
    assert_eq!(net.endpoints[1].stats().kept_taken_as_eager, 1);
    let now = net.now;
    assert_eq!(
        net.endpoints[0].cancel(now, kept),
        Ok(CancelOutcome::Requested)
    );
    // Every receive is posted before the CANCEL arrives: the last binds the kept message.
    let receives: Vec<(OpId, RegionId)> = (1..=credits)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN))
        .collect();
    net.run(net.now + 1_000_000);
    let frames = held.take();
    let request = frames
        .iter()
        .find(|f| is_eager_request(f))
        .expect("a request to send the kept message as eager");
    let cancel = frames
        .iter()
        .find(|f| kind_of(f) == FrameKind::Cancel as u8)
        .expect("the CANCEL");
    // The request reaches the sender while it waits for the CANCEL's answer, then the CANCEL
    // reaches the receiver, which refuses it.
    let now = net.now;
    net.endpoints[0].handle_frame(now, request, &mut net.memories[0]);
    net.endpoints[1].handle_frame(now, cancel, &mut net.memories[1]);
    net.filter = None;
    net.run(net.now + 2_000_000_000);
    assert!(
        net.result(0, kept).is_some_and(|r| r.is_ok()),
        "the send whose cancel was refused completes: {:?}",
        net.result(0, kept)
    );
    for (i, &(recv, region)) in receives.iter().enumerate() {
        let i = i as u32 + 1;
        assert!(
            net.result(1, recv).is_some_and(|r| r.is_ok()),
            "receive {i}"
        );
        assert_eq!(net.bytes(1, region), numbered(LEN, i), "message {i}");
    }
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(net.endpoints.iter().all(|e| e.credits_unsettled() == 0));
}

/// A kept message taken as eager whose every request was lost until the receiver stopped
/// asking (`max_retries`): when its receive is posted the receiver asks again, as it does
/// when a receive binds a kept message it did not take as eager, and the message arrives
/// within round trips, not at its sender's next safety repeat (`rto_max_ns` doubled up to
/// `KEPT_REPEAT_DOUBLINGS` times).
#[test]
fn a_receive_asks_again_for_a_kept_message_taken_as_eager_the_receiver_stopped_asking_for() {
    const LEN: usize = 16;
    let config = test_config();
    let credits = class_credits(&config, LEN) as u32;
    let mut net = Net::new(2, config);
    let round_trip = 2 * net.delay_ns;
    send_beyond_credits(&mut net, credits + 1, LEN);
    net.filter = Some(Box::new(is_eager_request));
    let (first, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
    // Long enough for every request, and the answers to the sender's repeats, to be lost.
    net.run(net.now + 100_000_000);
    assert!(net.result(1, first).is_some_and(|r| r.is_ok()));
    assert_eq!(net.endpoints[1].stats().kept_taken_as_eager, 1);
    net.filter = None;
    let receives: Vec<(OpId, RegionId)> = (1..=credits)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN))
        .collect();
    let (last, region) = receives[receives.len() - 1];
    let took = net.run_until(1_000_000_000, |net| net.result(1, last).is_some());
    assert!(net.result(1, last).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), numbered(LEN, credits));
    assert!(
        took < 10 * round_trip,
        "the kept message's receive took {took} ns, round trip {round_trip} ns"
    );
    net.run(net.now + 1_000_000_000);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(net.endpoints.iter().all(|e| e.credits_unsettled() == 0));
}

/// As `a_kept_message_taken_as_eager_whose_cancel_is_refused_arrives`, with the message claimed
/// (a matched probe) before the CANCEL comes, then received into a buffer too short for it:
/// the CANCEL is refused, the sender sends the message as eager all the same, the receive
/// completes `Truncated`, and the credit kept back for it comes back.
#[test]
fn a_claimed_kept_message_taken_as_eager_whose_cancel_is_refused_is_consumed() {
    const LEN: usize = 1000;
    let config = test_config();
    let credits = class_credits(&config, LEN) as u32;
    let mut net = Net::new(2, config);
    for i in 0..credits {
        net.send(0, 1, 1, pattern(LEN, i as u8));
    }
    let kept = net.send(0, 1, 2, pattern(LEN, 99));
    net.run(net.now + 50_000_000);
    let held = hold_frames_of_kinds(&mut net, &[FrameKind::Cts, FrameKind::Cancel]);
    let (first, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
    net.run(net.now + 1_000_000);
    assert!(net.result(1, first).is_some_and(|r| r.is_ok()));
    assert_eq!(net.endpoints[1].stats().kept_taken_as_eager, 1);
    let now = net.now;
    assert_eq!(
        net.endpoints[0].cancel(now, kept),
        Ok(CancelOutcome::Requested)
    );
    let (status, claim) = net.endpoints[1]
        .claim(Source::Rank(0), Context::USER, TagMatch::Tag(2))
        .expect("the kept message is claimed");
    assert_eq!(status.len, LEN as u64);
    net.run(net.now + 1_000_000);
    let frames = held.take();
    let request = frames.iter().find(|f| is_eager_request(f)).unwrap();
    let cancel = frames
        .iter()
        .find(|f| kind_of(f) == FrameKind::Cancel as u8)
        .unwrap();
    let now = net.now;
    net.endpoints[0].handle_frame(now, request, &mut net.memories[0]);
    net.endpoints[1].handle_frame(now, cancel, &mut net.memories[1]);
    net.filter = None;
    net.run(net.now + 1_000_000);
    let region = net.region(1, vec![0; 8]);
    let now = net.now;
    let (endpoint, memory) = (&mut net.endpoints[1], &mut net.memories[1]);
    let short = endpoint
        .post_recv_claimed(now, claim, &SgList::contiguous(region, 0, 8), memory)
        .unwrap();
    net.run(net.now + 2_000_000_000);
    assert!(
        net.result(0, kept).is_some_and(|r| r.is_ok()),
        "{:?}",
        net.result(0, kept)
    );
    assert!(matches!(
        net.result(1, short),
        Some(Err(OpError::Truncated { message_len, .. })) if message_len == LEN as u64
    ));
    for i in 1..credits {
        let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
        net.run(net.now + 1_000_000);
        assert!(
            net.result(1, recv).is_some_and(|r| r.is_ok()),
            "receive {i}"
        );
        assert_eq!(net.bytes(1, region), pattern(LEN, i as u8), "message {i}");
    }
    net.run(net.now + 1_000_000_000);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(net.endpoints.iter().all(|e| e.credits_unsettled() == 0));
}

/// Whether a frame the test network carries is an ACK with WAIT.
fn is_wait(bytes: &[u8]) -> bool {
    let header = nicmsg_wire::Frame::parse(bytes).expect("a frame").header;
    header.kind == FrameKind::Ack && header.flags & Flags::WAIT != 0
}

/// A WAIT the receiver sent for a kept message's RTS comes again (a duplicate delayed on the
/// way) after its sender has sent the message again as an eager one of several frames
/// (`handover.rs`), one of those frames lost: the receiver holds the message in a buffer and never tells it to wait, so the
/// WAIT is stale and must not hold back the lost frame's retransmission. Taken, it postponed
/// the frame to `rto_max_ns` (seconds by default), and with frame 0 in, the receiver, which
/// asks again only while nothing of the message came, and its receive waited that long.
#[test]
fn a_stale_wait_does_not_hold_back_a_message_taken_as_eager() {
    // Three frames at the default MTU, in one acknowledgement collection.
    const LEN: usize = 4096;
    let config = test_config();
    let (credits, rto_max_ns) = (class_credits(&config, LEN) as u32, config.rto_max_ns);
    let mut net = Net::new(2, config);
    let waits = Rc::new(std::cell::RefCell::new(Vec::new()));
    let sink = Rc::clone(&waits);
    // WAITs go through; a copy of the last comes again later, as a delayed duplicate.
    net.filter = Some(Box::new(move |bytes: &[u8]| {
        if is_wait(bytes) {
            sink.borrow_mut().push(bytes.to_vec());
        }
        false
    }));
    let sends: Vec<OpId> = (0..=credits)
        .map(|i| net.send(0, 1, 1, pattern(LEN, i as u8)))
        .collect();
    net.run(net.now + 20_000_000);
    let kept = sends[credits as usize];
    assert!(net.result(0, kept).is_none(), "the last one is kept");
    let stale_wait = waits.borrow().last().cloned().expect("a WAIT for the RTS");
    // The first receive frees a buffer, which goes to the kept message; its request is held.
    let requests = capture_frames_of_kind(&mut net, FrameKind::Cts);
    let (first, _) = net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN);
    net.run(net.now + 1_000_000);
    assert!(net.result(1, first).is_some_and(|r| r.is_ok()));
    assert_eq!(net.endpoints[1].stats().kept_taken_as_eager, 1);
    let request = requests.take().into_iter().find(|f| is_eager_request(f));
    let request = request.expect("a request to send the kept message as eager");
    // The sender hears the request and sends the message's frames; the last is lost.
    net.filter = Some(Box::new(|bytes: &[u8]| {
        let header = nicmsg_wire::Frame::parse(bytes).expect("a frame").header;
        header.kind == FrameKind::Eager && header.frame_index == 2
    }));
    let now = net.now;
    net.endpoints[0].handle_frame(now, &request, &mut net.memories[0]);
    net.run(net.now + 1_000);
    // Then the WAIT, delayed on the way, comes.
    let now = net.now;
    net.endpoints[0].handle_frame(now, &stale_wait, &mut net.memories[0]);
    net.filter = None;
    let receives: Vec<(OpId, RegionId)> = (1..=credits)
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Tag(1), LEN))
        .collect();
    let (last, region) = receives[receives.len() - 1];
    let took = net.run_until(10 * rto_max_ns, |net| net.result(1, last).is_some());
    assert!(net.result(1, last).is_some_and(|r| r.is_ok()));
    assert_eq!(net.bytes(1, region), pattern(LEN, credits as u8));
    assert!(
        took < rto_max_ns / 4,
        "the lost frame came {took} ns later, rto_max_ns {rto_max_ns}"
    );
    net.run(net.now + 1_000_000_000);
    assert!(net.result(0, kept).is_some_and(|r| r.is_ok()));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    assert!(net.endpoints.iter().all(|e| e.credits_unsettled() == 0));
}

/// A receiver grants no more than `grant_budget_bytes` at once over all its rendezvous
/// messages: 600 of 100,000 bytes matched together were granted together, 60 MB into a 4 MiB
/// socket, and the overflow and its resends, all due at the same backed-off timeout, stalled
/// a run for seconds. With a budget of 48 KiB, eight messages of 40 KiB matched at once go a
/// few at a time, the rest first told WAIT and then granted as the others complete; all
/// arrive whole, with and without every third frame lost.
#[test]
fn first_grants_past_the_budget_wait_for_room_and_every_message_arrives() {
    for lossy in [false, true] {
        let config = Config {
            grant_budget_bytes: 48 << 10,
            ..test_config()
        };
        let mut net = Net::new(2, config);
        if lossy {
            let mut count = 0u32;
            net.filter = Some(Box::new(move |_| {
                count += 1;
                count.is_multiple_of(3)
            }));
        }
        let len = 40 << 10;
        let receives: Vec<(OpId, RegionId)> = (0..8)
            .map(|tag| net.recv(1, Source::Rank(0), TagMatch::Tag(tag), len))
            .collect();
        let sends: Vec<OpId> = (0..8)
            .map(|tag| net.send(0, 1, tag, pattern(len, tag as u8)))
            .collect();
        net.run_until(2_000_000_000, |net| {
            receives.iter().all(|&(op, _)| net.result(1, op).is_some())
                && sends.iter().all(|&op| net.result(0, op).is_some())
        });
        for (tag, &(op, region)) in receives.iter().enumerate() {
            assert!(
                matches!(net.result(1, op), Some(Ok(_))),
                "lossy {lossy}: receive {tag}: {:?}",
                net.result(1, op)
            );
            assert_eq!(
                net.bytes(1, region),
                &pattern(len, tag as u8)[..],
                "tag {tag}"
            );
        }
        let deferred = net.endpoints[1].stats().grants_deferred;
        assert!(
            deferred >= 4,
            "lossy {lossy}: only {deferred} first grants deferred"
        );
    }
}

//! Valid MPI programs the protocol core must carry without hanging, losing a message or showing
//! the library's own traffic to the application: wildcard receives beside library messages,
//! cancel of sends already on the wire, failures seen by both sides, and claims (matched probes).

mod support;

use nicmsg_proto::*;
use support::{class_credits, Net};

fn config() -> Config {
    Config {
        rto_initial_ns: 100_000,
        rto_min_ns: 50_000,
        rto_max_ns: 5_000_000,
        keepalive_ns: 20_000_000,
        peer_timeout_ns: 1_000_000_000,
        ..Config::default()
    }
}

/// Longer than the eager limit: rendezvous.
const LONG: usize = 100_000;

fn status(peer: Rank, tag: Tag, len: usize) -> Option<Result<Status, OpError>> {
    Some(Ok(Status {
        peer,
        tag,
        len: len as u64,
        immediate: None,
    }))
}

#[test]
fn wildcard_receives_and_probes_never_take_library_messages() {
    let mut net = Net::new(2, config());
    let (wild, wild_region) = net.recv(1, Source::Any, TagMatch::Any, 64);
    let probe = net.endpoints[1]
        .post_probe(net.now, Source::Any, Context::USER, TagMatch::Any)
        .unwrap();
    let library = net.send_in(0, 1, Context::LIBRARY, 5, Vec::new());
    net.run(net.now + 10_000_000);
    assert_eq!(
        net.result(1, wild),
        None,
        "a user wildcard took a library message"
    );
    assert_eq!(
        net.result(1, probe),
        None,
        "a user probe saw a library message"
    );
    assert_eq!(
        net.endpoints[1].iprobe(Source::Any, Context::USER, TagMatch::Any),
        None
    );
    let (barrier, _) = net.recv_in(1, Source::Rank(0), Context::LIBRARY, TagMatch::Any, 0);
    net.run(net.now + 10_000_000);
    assert_eq!(net.result(1, barrier), status(0, 5, 0));
    assert!(net.result(0, library).is_some_and(|r| r.is_ok()));
    net.send(0, 1, 7, vec![9; 64]);
    net.run(net.now + 10_000_000);
    assert_eq!(net.result(1, wild), status(0, 7, 64));
    assert_eq!(net.bytes(1, wild_region), &[9; 64][..]);
    // The posted receive took it first (MPI): the probe waits for another one.
    assert_eq!(net.result(1, probe), None);
    net.send(0, 1, 8, vec![9; 16]);
    net.run(net.now + 10_000_000);
    assert_eq!(net.result(1, probe), status(0, 8, 16));
    let (last, _) = net.recv(1, Source::Any, TagMatch::Any, 16);
    net.run(net.now + 10_000_000);
    assert_eq!(net.result(1, last), status(0, 8, 16));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// A receiver takes the last of thousands of one sender's nonblocking sends before all the
/// others: a program MPI calls safe, since the sends do not wait for their receives. The
/// sender has them all unfinished at once, so its message-id window must reach past them:
/// with a window of 4,096 the last message never left the sender.
#[test]
fn the_last_of_thousands_of_unmatched_messages_is_taken_first() {
    const MESSAGES: u32 = 6_000;
    let mut net = Net::new(
        2,
        Config {
            max_sends: MESSAGES as usize + 64,
            max_incoming: MESSAGES as usize + 64,
            max_recvs: MESSAGES as usize,
            ..config()
        },
    );
    let sends: Vec<OpId> = (0..MESSAGES)
        .map(|i| net.send(0, 1, i.into(), i.to_le_bytes().to_vec()))
        .collect();
    let (last, region) = net.recv(1, Source::Rank(0), TagMatch::Tag((MESSAGES - 1).into()), 4);
    net.run(net.now + 2_000_000_000);
    assert_eq!(net.result(1, last), status(0, (MESSAGES - 1).into(), 4));
    assert_eq!(net.bytes(1, region), &(MESSAGES - 1).to_le_bytes()[..]);
    let rest: Vec<_> = (0..MESSAGES - 1)
        .rev()
        .map(|i| (i, net.recv(1, Source::Rank(0), TagMatch::Tag(i.into()), 4)))
        .collect();
    net.run(net.now + 2_000_000_000);
    for (i, (op, region)) in rest {
        assert_eq!(net.result(1, op), status(0, i.into(), 4));
        assert_eq!(net.bytes(1, region), &i.to_le_bytes()[..]);
    }
    assert!(sends
        .iter()
        .all(|&send| net.result(0, send).is_some_and(|r| r.is_ok())));
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

#[test]
fn a_library_message_sent_after_unmatched_user_messages_is_received() {
    let mut net = Net::new(2, config());
    let user: Vec<OpId> = (0..20).map(|i| net.send(0, 1, 1, vec![i; 300])).collect();
    let library = net.send_in(0, 1, Context::LIBRARY, 0, Vec::new());
    let (barrier, _) = net.recv_in(1, Source::Rank(0), Context::LIBRARY, TagMatch::Tag(0), 0);
    net.run(net.now + 1_000_000_000);
    assert_eq!(net.result(1, barrier), status(0, 0, 0));
    assert!(net.result(0, library).is_some_and(|r| r.is_ok()));
    let drained: Vec<_> = user
        .iter()
        .map(|_| net.recv(1, Source::Any, TagMatch::Any, 300))
        .collect();
    net.run(net.now + 1_000_000_000);
    for (i, (op, region)) in drained.into_iter().enumerate() {
        assert_eq!(net.result(1, op), status(0, 1, 300));
        assert_eq!(net.bytes(1, region), &vec![i as u8; 300][..], "MPI order");
    }
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

/// Cancels `op` of `rank` now.
fn cancel(net: &mut Net, rank: u32, op: OpId) -> Result<CancelOutcome, CancelError> {
    let now = net.now;
    net.endpoints[rank as usize].cancel(now, op)
}

#[test]
fn an_unmatched_rendezvous_send_is_withdrawn_and_never_delivered() {
    for loss in [0.0, 0.2] {
        let mut net = Net::new(2, config());
        net.loss = loss;
        let withdrawn = net.send(0, 1, 3, vec![1; LONG]);
        net.run(net.now + 50_000_000);
        assert_eq!(net.result(0, withdrawn), None, "waits for a receive");
        assert_eq!(cancel(&mut net, 0, withdrawn), Ok(CancelOutcome::Requested));
        net.run(net.now + 2_000_000_000);
        assert_eq!(
            net.result(0, withdrawn),
            Some(Err(OpError::Cancelled)),
            "loss {loss}"
        );
        assert_eq!(
            net.endpoints[1].iprobe(Source::Any, Context::USER, TagMatch::Any),
            None,
            "a withdrawn message is not offered"
        );
        // The next message of the pair is matched, not stuck behind the withdrawn one.
        let (any, region) = net.recv(1, Source::Any, TagMatch::Any, LONG);
        net.send(0, 1, 4, vec![2; 10]);
        net.run(net.now + 2_000_000_000);
        assert_eq!(net.result(1, any), status(0, 4, 10), "loss {loss}");
        assert_eq!(&net.bytes(1, region)[..10], &[2; 10]);
        net.run(net.now + 5_000_000_000);
        assert!(
            net.endpoints.iter().all(|e| e.usage().is_empty()),
            "tombstones freed (loss {loss})"
        );
    }
}

/// For both credit classes: a short message's credit is a small buffer's, and the receiver,
/// which never saw the message, learns the class from the CANCEL. (A short send completes at
/// once from its copy, and is then too late to cancel, unless the sends allowed to complete
/// early are all taken: none are allowed here.)
#[test]
fn a_withdrawn_eager_send_returns_its_credit() {
    withdrawn_eager_send_returns_its_credit(1000, config());
    withdrawn_eager_send_returns_its_credit(MEDIUM_MESSAGE_MAX as usize + 1, config());
    let no_early_sends = Config {
        max_early_sends: 0,
        ..config()
    };
    withdrawn_eager_send_returns_its_credit(SMALL_MESSAGE_MAX as usize, no_early_sends);
}

fn withdrawn_eager_send_returns_its_credit(len: usize, config: Config) {
    let credits = class_credits(&config, len);
    let mut net = Net::new(2, config);
    // Cancelled before any of its frames left: the receiver never sees the message.
    let withdrawn = net.send(0, 1, 3, vec![1; len]);
    assert_eq!(cancel(&mut net, 0, withdrawn), Ok(CancelOutcome::Requested));
    net.run(net.now + 100_000_000);
    assert_eq!(net.result(0, withdrawn), Some(Err(OpError::Cancelled)));
    // Every credit is back: as many unmatched eager messages as credits go eager.
    let held: Vec<OpId> = (0..credits)
        .map(|i| net.send(0, 1, 5, vec![i as u8; len]))
        .collect();
    net.run(net.now + 100_000_000);
    assert_eq!(net.endpoints[0].stats().credit_stalls, 0);
    assert!(held
        .iter()
        .all(|&op| net.result(0, op).is_some_and(|r| r.is_ok())));
    // A buffered one can be withdrawn too... once it completed, it is too late.
    let late = held[0];
    assert_eq!(cancel(&mut net, 0, late), Err(CancelError::UnknownOp));
    let drained: Vec<_> = held
        .iter()
        .map(|_| net.recv(1, Source::Rank(0), TagMatch::Any, len))
        .collect();
    net.run(net.now + 100_000_000);
    for (i, (op, region)) in drained.into_iter().enumerate() {
        assert_eq!(net.result(1, op), status(0, 5, len));
        assert_eq!(net.bytes(1, region), &vec![i as u8; len][..]);
    }
    net.run(net.now + 5_000_000_000);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

#[test]
fn a_send_its_receiver_matched_first_completes_normally() {
    let mut net = Net::new(2, config());
    let (recv, region) = net.recv(1, Source::Rank(0), TagMatch::Tag(3), LONG);
    let send = net.send(0, 1, 3, vec![7; LONG]);
    // The RTS reaches the receiver after one delay; its grant is on the way back.
    net.run(net.now + net.delay_ns + net.delay_ns / 2);
    assert_eq!(cancel(&mut net, 0, send), Ok(CancelOutcome::Requested));
    net.run(net.now + 1_000_000_000);
    assert_eq!(net.result(0, send), status(1, 3, LONG));
    assert_eq!(net.result(1, recv), status(0, 3, LONG));
    assert_eq!(net.bytes(1, region), &vec![7; LONG][..]);
    assert_eq!(cancel(&mut net, 0, send), Err(CancelError::UnknownOp));
    net.run(net.now + 5_000_000_000);
    assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
}

#[test]
fn a_rank_declared_unreachable_is_told_and_fails_its_own_operations() {
    let mut net = Net::new(2, config());
    let (pending, _) = net.recv(1, Source::Rank(0), TagMatch::Any, 8);
    let (_, _) = net.recv(0, Source::Rank(1), TagMatch::Any, 8);
    // Rank 0's host reports rank 1's port closed, three times in a row.
    for _ in 0..liveness_refusals() {
        let now = net.now;
        let (e, m) = (&mut net.endpoints[0], &mut net.memories[0]);
        e.handle_refused(now, 1, m);
    }
    assert!(net.endpoints[0].is_peer_unreachable(1));
    net.run(net.now + 10_000_000);
    assert!(net.endpoints[1].is_peer_unreachable(0), "told by RESET");
    assert_eq!(
        net.result(1, pending),
        Some(Err(OpError::PeerUnreachable { peer: 0 }))
    );
    let refused = {
        let region = net.region(1, vec![0; 4]);
        let now = net.now;
        let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
        e.post_send(
            now,
            0,
            Context::USER,
            1,
            &SgList::contiguous(region, 0, 4),
            m,
        )
    };
    assert_eq!(refused, Err(PostError::PeerUnreachable { peer: 0 }));
    net.run(net.now + 1_000_000_000);
    assert_eq!(net.endpoints[1].stats().resets_received, 1);
}

fn liveness_refusals() -> u32 {
    3
}

#[test]
fn refusals_count_only_in_a_row() {
    let mut net = Net::new(2, config());
    let (waiting, _) = net.recv(0, Source::Rank(1), TagMatch::Any, 8);
    for _ in 0..liveness_refusals() - 1 {
        let now = net.now;
        let (e, m) = (&mut net.endpoints[0], &mut net.memories[0]);
        e.handle_refused(now, 1, m);
    }
    // The refusals provoked probes, which rank 1 answers: it is alive.
    net.run(net.now + 1_000_000);
    let now = net.now;
    let (e, m) = (&mut net.endpoints[0], &mut net.memories[0]);
    e.handle_refused(now, 1, m);
    assert!(!net.endpoints[0].is_peer_unreachable(1));
    net.send(1, 0, 2, vec![3; 8]);
    net.run(net.now + 10_000_000);
    assert_eq!(net.result(0, waiting), status(1, 2, 8));
}

#[test]
fn an_answering_peer_is_never_declared_unreachable_and_a_silent_one_is_after_the_timeout() {
    let config = config();
    let mut net = Net::new(2, config.clone());
    // Rank 1 waits on rank 0, which sends nothing for a minute (its application computes) but
    // whose engine answers the probes.
    let (waiting, _) = net.recv(1, Source::Rank(0), TagMatch::Any, 8);
    let long_send = net.send(1, 0, 9, vec![1; LONG]);
    net.run(60_000_000_000);
    assert!(!net.endpoints[1].is_peer_unreachable(0));
    assert_eq!(net.result(1, waiting), None);
    assert_eq!(net.result(1, long_send), None, "no receive posted yet");
    // Rank 0 dies: it answers nothing any more. Rank 1 next asks it something within a
    // retransmission (5 ms here) or a probe interval (20 ms), and declares it unreachable
    // the peer timeout (1 s) after that.
    let died = net.now;
    net.endpoints[0] = Endpoint::new(config.clone(), 99, 0, 2).unwrap();
    net.run(died + config.peer_timeout_ns - 1_000_000);
    assert!(
        !net.endpoints[1].is_peer_unreachable(0),
        "not before the timeout"
    );
    net.run(died + config.peer_timeout_ns + config.keepalive_ns + 1_000_000);
    assert!(net.endpoints[1].is_peer_unreachable(0));
    let unreachable = Some(Err(OpError::PeerUnreachable { peer: 0 }));
    assert_eq!(net.result(1, waiting), unreachable);
    assert_eq!(net.result(1, long_send), unreachable);
    assert_eq!(net.endpoints[1].stats().peers_declared_unreachable, 1);
}

/// A rank waiting on itself has no peer to probe: messages to self use no network. Before, a
/// receive naming the rank itself made it probe itself every keepalive, and drop its own
/// probes as addressed to the wrong rank.
#[test]
fn a_rank_never_probes_itself() {
    let mut net = Net::new(2, config());
    let (own, region) = net.recv(0, Source::Rank(0), TagMatch::Any, 8);
    net.run(10_000_000_000);
    let stats = net.endpoints[0].stats();
    assert_eq!(stats.liveness_probes, 0);
    assert_eq!(stats.frames_sent, 0);
    assert_eq!(net.result(0, own), None, "still waiting, not failed");
    net.send(0, 0, 3, vec![5; 8]);
    net.run(net.now + 1_000);
    assert_eq!(net.result(0, own), status(0, 3, 8));
    assert_eq!(net.bytes(0, region), &[5; 8][..]);
}

/// Claims `rank`'s first message matching `source` and `tag` now (MPI_Improbe).
fn claim(net: &mut Net, rank: u32, source: Source, tag: TagMatch) -> Option<(Status, Claim)> {
    net.endpoints[rank as usize].claim(source, Context::USER, tag)
}

/// Receives the claimed message into a new buffer of `len` bytes (MPI_Mrecv).
fn recv_claimed(net: &mut Net, rank: u32, claim: Claim, len: usize) -> (OpId, RegionId) {
    let region = net.region(rank, vec![0; len]);
    let (e, m) = (
        &mut net.endpoints[rank as usize],
        &mut net.memories[rank as usize],
    );
    let buffer = SgList::contiguous(region, 0, len as u64);
    let op = e.post_recv_claimed(net.now, claim, &buffer, m).unwrap();
    (op, region)
}

#[test]
fn a_claimed_message_goes_only_to_the_receive_naming_its_claim() {
    for len in [0, 100, LONG] {
        for loss in [0.0, 0.2] {
            let mut net = Net::new(2, config());
            net.loss = loss;
            let first = net.send(0, 1, 4, vec![1; len]);
            let second = net.send(0, 1, 4, vec![2; len]);
            net.run(net.now + 20_000_000);
            let (found, claimed) = claim(&mut net, 1, Source::Any, TagMatch::Any).unwrap();
            assert_eq!(Some(Ok(found)), status(0, 4, len), "the first message");
            // A receive posted after the claim takes the next message, not the claimed one.
            let (later, later_region) = net.recv(1, Source::Rank(0), TagMatch::Tag(4), len);
            assert_eq!(
                net.endpoints[1].iprobe(Source::Any, Context::USER, TagMatch::Any),
                None,
                "a probe saw a claimed message"
            );
            let (mrecv, mrecv_region) = recv_claimed(&mut net, 1, claimed, len);
            net.run(net.now + 2_000_000_000);
            assert_eq!(
                net.result(1, mrecv),
                status(0, 4, len),
                "len {len} loss {loss}"
            );
            assert_eq!(net.result(1, later), status(0, 4, len));
            assert_eq!(
                net.bytes(1, mrecv_region),
                &vec![1; len][..],
                "the claimed bytes"
            );
            assert_eq!(net.bytes(1, later_region), &vec![2; len][..]);
            assert!(net.result(0, first).is_some_and(|r| r.is_ok()));
            assert!(net.result(0, second).is_some_and(|r| r.is_ok()));
            assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
        }
    }
}

#[test]
fn a_claim_is_received_once_and_a_discarded_claim_completes_its_sender() {
    for len in [10, LONG] {
        let mut net = Net::new(2, config());
        let kept = net.send(0, 1, 1, vec![7; len]);
        let dropped = net.send(0, 1, 2, vec![8; len]);
        net.run(net.now + 20_000_000);
        let (_, keep) = claim(&mut net, 1, Source::Rank(0), TagMatch::Tag(1)).unwrap();
        let (_, drop) = claim(&mut net, 1, Source::Rank(0), TagMatch::Tag(2)).unwrap();
        assert_eq!(claim(&mut net, 1, Source::Any, TagMatch::Any), None);
        let now = net.now;
        let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
        e.discard_claimed(now, drop, m).unwrap();
        assert_eq!(
            e.discard_claimed(now, drop, m),
            Err(PostError::UnknownClaim)
        );
        let (op, region) = recv_claimed(&mut net, 1, keep, len);
        let (e, m) = (&mut net.endpoints[1], &mut net.memories[1]);
        let empty = SgList::default();
        assert_eq!(
            e.post_recv_claimed(now, keep, &empty, m),
            Err(PostError::UnknownClaim),
            "a claim is received once"
        );
        net.run(net.now + 2_000_000_000);
        assert_eq!(net.result(1, op), status(0, 1, len));
        assert_eq!(net.bytes(1, region), &vec![7; len][..]);
        assert!(net.result(0, kept).is_some_and(|r| r.is_ok()));
        assert!(
            net.result(0, dropped).is_some_and(|r| r.is_ok()),
            "the sender of a discarded message completes"
        );
        assert_eq!(
            net.endpoints[1].peer_stats(0).unwrap().messages_discarded,
            1
        );
        assert!(net.endpoints.iter().all(|e| e.usage().is_empty()));
    }
}

#[test]
fn a_claimed_message_cannot_be_withdrawn_and_a_short_claim_receive_truncates() {
    let mut net = Net::new(2, config());
    let send = net.send(0, 1, 3, vec![5; LONG]);
    net.run(net.now + 20_000_000);
    let (_, claimed) = claim(&mut net, 1, Source::Any, TagMatch::Tag(3)).unwrap();
    assert_eq!(cancel(&mut net, 0, send), Ok(CancelOutcome::Requested));
    net.run(net.now + 50_000_000);
    assert_eq!(net.result(0, send), None, "the claimed message stays");
    let (op, _) = recv_claimed(&mut net, 1, claimed, 10);
    net.run(net.now + 2_000_000_000);
    assert!(matches!(
        net.result(1, op),
        Some(Err(OpError::Truncated { message_len, buffer_len: 10, .. })) if message_len == LONG as u64
    ));
    assert!(
        net.result(0, send).is_some_and(|r| r.is_ok()),
        "matched: not cancelled"
    );
}

#[test]
fn a_message_to_self_can_be_claimed() {
    let mut net = Net::new(1, config());
    let send = net.send(0, 0, 9, vec![3; 50]);
    let (found, claimed) = claim(&mut net, 0, Source::Any, TagMatch::Any).unwrap();
    assert_eq!(Some(Ok(found)), status(0, 9, 50));
    assert_eq!(cancel(&mut net, 0, send), Err(CancelError::InProgress));
    let (op, region) = recv_claimed(&mut net, 0, claimed, 50);
    net.run(net.now + 1_000_000);
    assert_eq!(net.result(0, op), status(0, 9, 50));
    assert_eq!(net.bytes(0, region), &[3; 50][..]);
    assert!(net.result(0, send).is_some_and(|r| r.is_ok()));
}

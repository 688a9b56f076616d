//! The paper's programs and the examples of issue 17, run between VMs whose hosts forward
//! every SEND: figure 2's ping against its partner pong, figure 4's delivertest, the engine's
//! key-value look-up, the token filter, the barrier and the all-reduce.

mod common;

use common::{example, module, Net};
use nicmsg_vm::{Destination, Outcome, ProgramId, ProgramState, Verdict};

/// One hop of the test network, in virtual nanoseconds.
const HOP_NS: i64 = 2_500;

#[test]
fn figure_2_ping_records_100_round_trips_with_clock_and_displays_them() {
    let mut net = Net::new(2, HOP_NS);
    let ping = net
        .node(0)
        .vm
        .load(&example("ping.pdl"))
        .expect("ping loads");
    assert_eq!(ping.id, ProgramId::of_name("ping"));
    // Ping sends TO 415: its partner is loaded with that explicit id.
    let pong = net
        .node(1)
        .vm
        .load_as(ProgramId(415), &example("pong.pdl"))
        .expect("pong loads");
    assert!(matches!(net.run(1, pong.id), Outcome::Awaiting { .. }));
    let start = net.now;
    // Ping's initialisation block stamps the clock and sends the first ping.
    assert!(matches!(net.run(0, ping.id), Outcome::Awaiting { .. }));

    let delivered = net.settle(1_000);
    assert_eq!(delivered, 200, "100 pings and 100 pongs");
    // The last answer made ping display and STOP, which unloaded it.
    let last = net.outcomes.last().expect("outcomes").1;
    assert!(matches!(last, Outcome::Stopped { .. }), "{last:?}");
    assert!(net.node(0).vm.program(ping.id).is_none(), "STOP unloads");
    for (_, outcome) in &net.outcomes {
        assert_ne!(outcome.verdict(), Verdict::Dropped, "{outcome:?}");
    }

    // DISPLAY timesent[i]; DISPLAY timerec[i], for i in 0..100: each round trip is two hops.
    let shown = net.node(0).host.shown_by(ping.id);
    assert_eq!(shown.len(), 200);
    for (i, pair) in shown.chunks(2).enumerate() {
        let (sent, received) = (pair[0], pair[1]);
        assert_eq!(received - sent, 2 * HOP_NS, "round trip {i}");
        assert_eq!(sent, start + 2 * HOP_NS * i as i64, "round trip {i} starts");
    }
    // Pong's host never saw a message, and pong is still waiting for more.
    assert!(net.to_hosts.is_empty());
    let pong_info = net.node(1).vm.program(pong.id).expect("pong stays");
    assert_eq!(pong_info.state, ProgramState::Ready);
    assert_eq!(pong_info.stats.activations, 101, "init and 100 pings");
}

#[test]
fn figure_4_delivertest_delivers_into_a_host_segment_on_a_message_from_another_vm() {
    let mut net = Net::new(2, HOP_NS);
    net.node(1).host = std::mem::take(&mut net.node(1).host).with_segment(2, 64);
    let target = net.node(1).vm.load(&example("delivertest.pdl")).unwrap();
    assert!(matches!(net.run(1, target.id), Outcome::Awaiting { .. }));
    // Nothing is delivered until trigger 10 arrives.
    assert!(net.node(1).host.segments[&2].iter().all(|&b| b == 0));

    // A program on rank 0 triggers it, as the paper's host did from the other card.
    let trigger =
        module("PROGRAM kick: VAR x; BEGIN SEND x LEN 8 AS 10 TO delivertest AT 1 END; END.");
    let kick = net.node(0).vm.load(&trigger).unwrap();
    assert!(matches!(net.run(0, kick.id), Outcome::Awaiting { .. }));
    assert_eq!(net.settle(10), 1);
    let (rank, outcome) = net.outcomes[0];
    assert_eq!(rank, 1);
    // Two statements: the DELIVER (four pushes and the instruction) and the AWAIT.
    assert_eq!(outcome, Outcome::Awaiting { instructions: 6 });
    let host = &net.node(1).host;
    assert_eq!(
        (host.word(2, 0), host.word(2, 8), host.word(2, 16)),
        (2, 3, 4)
    );
    assert!(host.segments[&2][24..].iter().all(|&b| b == 0));
    assert_eq!(host.calls, ["deliver"]);
}

#[test]
fn the_key_value_lookup_is_answered_by_the_engine_without_its_host() {
    let mut net = Net::new(2, HOP_NS);
    // Rank 1's host fills the table: key k at slot k MOD 1024, (key, value) per 16 bytes, and
    // key 1025 collides with key 1, one slot further.
    net.node(1).host = std::mem::take(&mut net.node(1).host).with_segment(1, 16 * 1024);
    for (slot, key, value) in [(1usize, 1i64, 100i64), (2, 1025, 200), (7, 7, 700)] {
        net.node(1).host.set_word(1, slot * 16, key);
        net.node(1).host.set_word(1, slot * 16 + 8, value);
    }
    let kv = net.node(1).vm.load(&example("kvlookup.pdl")).unwrap();
    let _ = net.run(1, kv.id);

    // Requests from rank 0's host; the answers come back to that host.
    for key in [1i64, 1025, 7, 99] {
        let outcome = net.host_send(0, 1, kv.id, 20, &key.to_le_bytes());
        assert_eq!(outcome.verdict(), Verdict::Consumed, "{outcome:?}");
    }
    net.settle(100);
    let answers: Vec<Vec<i64>> = net
        .to_hosts
        .iter()
        .map(|m| {
            assert_eq!((m.rank, m.to, m.trigger), (0, Destination::Host, 21));
            m.payload
                .chunks(8)
                .map(|w| i64::from_le_bytes(w.try_into().unwrap()))
                .collect()
        })
        .collect();
    assert_eq!(
        answers,
        vec![vec![1, 100], vec![1025, 200], vec![7, 700], vec![99]]
    );
    // A malformed request is dropped by the program, and counted.
    let outcome = net.host_send(0, 1, kv.id, 20, b"short");
    assert!(matches!(outcome, Outcome::Dropped { .. }));
    let info = net.node(1).vm.program(kv.id).unwrap();
    assert_eq!((info.stats.dropped, info.stats.activations), (1, 6));
    // The host application of rank 1 was never woken: the engine only read its table and
    // sent the answers (no delivery, flag or display).
    assert!(net
        .node(1)
        .host
        .calls
        .iter()
        .all(|c| ["get", "send"].contains(c)));
    // served = 3, missed = 1: the program's variables (key, slot, probes, entry[2],
    // result[2], served, missed) as words.
    let data = net.node(1).vm.data(kv.id).unwrap();
    let word = |i: usize| i64::from_le_bytes(data[8 * i..8 * i + 8].try_into().unwrap());
    assert_eq!((word(7), word(8)), (3, 1));
}

#[test]
fn the_filter_passes_frames_with_the_token_and_drops_the_others() {
    let mut net = Net::new(2, HOP_NS);
    net.node(1).host = std::mem::take(&mut net.node(1).host).with_segment(1, 24);
    net.node(1).host.set_word(1, 0, 0x5EC2E7);
    let filter = net.node(1).vm.load(&example("filter.pdl")).unwrap();
    let _ = net.run(1, filter.id);

    let good = 0x5EC2E7i64.to_le_bytes();
    let mut with_body = good.to_vec();
    with_body.extend_from_slice(b"payload");
    let frames: [&[u8]; 5] = [&good, b"bad token", &with_body, b"", &7i64.to_le_bytes()];
    let verdicts: Vec<Verdict> = frames
        .iter()
        .map(|f| net.host_send(0, 1, filter.id, 30, f).verdict())
        .collect();
    use Verdict::*;
    assert_eq!(verdicts, [Passed, Dropped, Passed, Dropped, Dropped]);
    let host = &net.node(1).host;
    assert_eq!(
        (host.word(1, 8), host.word(1, 16)),
        (2, 3),
        "passed, dropped"
    );
    let stats = net.node(1).vm.program(filter.id).unwrap().stats;
    assert_eq!((stats.passed, stats.dropped), (2, 3));
}

#[test]
fn the_barrier_completes_on_the_engines() {
    const RANKS: u32 = 4;
    let mut net = Net::new(RANKS, HOP_NS);
    let barrier = ProgramId::of_name("barrier");
    for rank in 0..RANKS {
        net.node(rank).vm.load(&example("barrier.pdl")).unwrap();
        let _ = net.run(rank, barrier);
    }
    for round in 0..3 {
        // Every host but the last enters: nobody is released.
        for rank in 0..RANKS - 1 {
            let _ = net.host_send(rank, rank, barrier, 50, b"");
        }
        net.settle(100);
        for rank in 0..RANKS {
            assert!(!net.node(rank).host.flag(barrier, 0), "round {round}");
        }
        let _ = net.host_send(RANKS - 1, RANKS - 1, barrier, 50, b"");
        net.settle(100);
        for rank in 0..RANKS {
            assert!(net.node(rank).host.flag(barrier, 0), "round {round}");
            // The host clears the flag (the host's half of the lock/flag model).
            net.node(rank).host.flags.clear();
        }
    }
}

#[test]
fn the_all_reduce_sums_on_the_engines_and_delivers_to_every_host() {
    const RANKS: u32 = 5;
    let mut net = Net::new(RANKS, HOP_NS);
    let allreduce = ProgramId::of_name("allreduce");
    for rank in 0..RANKS {
        let host = std::mem::take(&mut net.node(rank).host).with_segment(1, 8);
        net.node(rank).host = host;
        net.node(rank).vm.load(&example("allreduce.pdl")).unwrap();
        let _ = net.run(rank, allreduce);
    }
    for round in 1..=3i64 {
        for rank in 0..RANKS {
            let value = round * 1000 + i64::from(rank);
            let _ = net.host_send(rank, rank, allreduce, 40, &value.to_le_bytes());
        }
        net.settle(1_000);
        let expected: i64 = (0..RANKS).map(|r| round * 1000 + i64::from(r)).sum();
        for rank in 0..RANKS {
            let host = &mut net.node(rank).host;
            assert!(host.flag(allreduce, 0), "round {round}, rank {rank}");
            assert_eq!(host.word(1, 0), expected, "round {round}, rank {rank}");
            host.flags.clear();
        }
    }
}

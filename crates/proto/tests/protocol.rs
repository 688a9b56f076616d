mod support;

use nicmsg_proto::*;
use proptest::prelude::*;
use support::Net;

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
            TagMatch::Tag(5),
            SgList::contiguous(recv_region, 0, len as u64),
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
            5,
            SgList::contiguous(send_region, 0, len as u64),
            &net.memories[0],
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
                    len: len as u64
                }),
                "len {len}"
            );
            assert!(bytes == pattern(len, 3), "bytes differ for len {len}");
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
                TagMatch::Any,
                SgList::contiguous(recv_region, 0, len as u64 / 2),
                m,
            )
            .unwrap();
        let send = net.endpoints[0]
            .post_send(
                0,
                1,
                9,
                SgList::contiguous(send_region, 0, len as u64),
                &net.memories[0],
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

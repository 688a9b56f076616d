//! The watchdog's account of a pending operation (`Endpoint::describe`): what a user reads when
//! a job hangs, so each line must carry the fact that explains the hang.

mod support;

use nicmsg_proto::*;
use support::Net;

fn quiet_config() -> Config {
    Config {
        rto_initial_ns: 100_000,
        rto_min_ns: 50_000,
        keepalive_ns: 20_000_000,
        ..Config::default()
    }
}

/// A receive whose message came with another tag names that message: the mismatch is in
/// the line itself.
#[test]
fn a_receive_names_the_message_that_came_with_another_tag() {
    let mut net = Net::new(2, quiet_config());
    net.send(1, 0, 41, vec![7; 4]);
    net.run(net.now + 5_000_000);
    let (recv, _) = net.recv(0, Source::Rank(1), TagMatch::Tag(42), 4);
    net.run(net.now + 5_000_000);
    assert!(net.result(0, recv).is_none(), "tag 42 must not take tag 41");

    let line = net.endpoints[0]
        .describe(recv)
        .expect("the receive is pending");
    assert!(
        line.starts_with("receive from rank 1 with tag 42 into 4 bytes: posted, no matching"),
        "{line}"
    );
    assert!(
        line.ends_with(
            "1 message from the peers it accepts waits unmatched: 41 from rank 1 (4 bytes)"
        ),
        "{line}"
    );
}

/// Messages from peers the receive does not accept are not its business; a message of
/// another communicator is named as such; past three, the rest are counted.
#[test]
fn only_messages_from_accepted_peers_are_named_and_a_long_list_is_cut() {
    let mut net = Net::new(3, quiet_config());
    net.send_in(2, 0, Context(9), 5, vec![1; 8]);
    for tag in 10..15 {
        net.send(1, 0, tag, vec![2; 16]);
    }
    net.run(net.now + 5_000_000);

    let (from_one, _) = net.recv(0, Source::Rank(1), TagMatch::Tag(99), 16);
    let (from_two, _) = net.recv(0, Source::Rank(2), TagMatch::Tag(5), 8);
    net.run(net.now + 5_000_000);

    let line = net.endpoints[0].describe(from_one).expect("pending");
    assert!(
        line.ends_with(
            "5 messages from the peers it accepts wait unmatched: 10 from rank 1 (16 bytes), \
             11 from rank 1 (16 bytes), 12 from rank 1 (16 bytes), and 2 more"
        ),
        "{line}"
    );
    let line = net.endpoints[0].describe(from_two).expect("pending");
    assert!(
        line.ends_with("5 from rank 2 (8 bytes) in another communicator (context 9)"),
        "{line}"
    );
}

/// A receive with no message anywhere says only that; wide tags (a libfabric tag that packs
/// a communicator above the MPI tag) read in hexadecimal.
#[test]
fn a_lone_receive_says_nothing_came_and_wide_tags_read_in_hex() {
    let mut net = Net::new(2, quiet_config());
    let wide = (3u64 << 32) | 42;
    let (recv, _) = net.recv(0, Source::Any, TagMatch::Tag(wide), 4);
    net.run(net.now + 1_000_000);
    let line = net.endpoints[0].describe(recv).expect("pending");
    assert_eq!(
        line,
        "receive from any rank with tag 0x000000030000002a into 4 bytes: posted, no matching message has arrived"
    );
}

//! Open LM stations over the simulated network (`--lm --open`): clients and servers at
//! socket addresses, conversations that start, end and restart. Every transfer received is
//! byte-exact, one its sender started, received once in each life of its receiver;
//! every send reported delivered was; every send reports, and delivered unless a peer
//! restarted under it or slots are shared; nothing is left placed at the end; on a clean
//! network placed transfers copy nothing. A few seconds in release.

#[path = "support/lm.rs"]
mod support;

use nicmsg_sim::lm::open::OpenLmSpec;
use nicmsg_sim::NetConfig;
use support::run;

fn specs(
    seeds: std::ops::Range<u64>,
    losses: &[f64],
    net: NetConfig,
    restart: f64,
    slots: Option<u32>,
) -> Vec<OpenLmSpec> {
    support::specs(seeds, losses, net, |seed, net| {
        let mut spec = OpenLmSpec::new(seed, net);
        spec.restart = restart;
        spec.slots = slots;
        spec
    })
}

fn faulty() -> NetConfig {
    NetConfig {
        dup: 0.02,
        reorder: 0.1,
        corrupt: 0.01,
        partition: 0.05,
        ..NetConfig::default()
    }
}

#[test]
fn clean_network_delivers_everything_and_placed_transfers_copy_nothing() {
    let stats = run(&specs(0..60, &[0.0], NetConfig::default(), 0.0, None));
    assert_eq!(stats.delivered, stats.transfers, "{stats:?}");
    assert!(stats.clean_admitted > 50, "{stats:?}");
}

#[test]
fn lossy_network_delivers_everything_once_and_intact() {
    let stats = run(&specs(0..40, &[0.05, 0.2], faulty(), 0.0, None));
    assert_eq!(stats.delivered, stats.transfers, "{stats:?}");
    assert!(stats.placed_transfers > 50, "{stats:?}");
}

/// Two slots for four peers: clients share the servers' slots (a full table turns them away,
/// a quiet slot is reused), and nodes restart.
#[test]
fn shared_slots_and_restarts_lose_and_repeat_nothing() {
    let stats = run(&specs(0..60, &[0.0, 0.05], faulty(), 0.5, Some(2)));
    assert!(stats.restarts > 20 && stats.resets_sent > 0, "{stats:?}");
}

/// Restarts with slots for everyone, under every fault. It found two faults:
/// `--lm --open --seed 234 --loss 0 --dup 0.02 --reorder 0.1 --corrupt 0.01 --partition 0.05
/// --restart 0.5` hung: a placement given up left the rest of a void run at the head of the
/// fill queue, shorter than any frame of the next placed transfer, whose frames were then held
/// for their slots for ever (the station now gives such a placement up, and the transfer goes
/// on by copy). `--seed 14 --loss 0.2` delivered a transfer twice, to two lives of the server:
/// the client had never heard the first life, so its retransmission named no conversation
/// (as documented: exactly once within a life; counted in `taken_by_two_lives`).
#[test]
fn restarts_lose_and_repeat_nothing() {
    let stats = run(&specs(0..60, &[0.0, 0.05, 0.2], faulty(), 0.5, None));
    assert!(stats.restarts > 50 && stats.resets_sent > 0, "{stats:?}");
}

/// The two seeds that found the faults above, as they ran: the hang (placement behind the
/// rest of a void run) and the transfer taken by two lives of its receiver, now counted.
#[test]
fn the_seeds_that_found_faults_pass() {
    let mut hang = specs(234..235, &[0.0], faulty(), 0.5, None);
    hang.extend(specs(14..15, &[0.2], faulty(), 0.5, None));
    let stats = run(&hang);
    assert!(stats.restarts > 0, "{stats:?}");
}

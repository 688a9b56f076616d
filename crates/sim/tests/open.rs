//! Open endpoints (peers added by address) in the simulator: clients send datagrams by address
//! to a server under loss, duplication, reordering and corruption; with restarts; with more
//! clients than the server has slots. Every run must end with no violation.

use nicmsg_sim::open::{run_open, OpenSpec};
use nicmsg_sim::NetConfig;

fn net(loss: f64) -> NetConfig {
    NetConfig {
        loss,
        dup: 0.02,
        reorder: 0.05,
        corrupt: 0.01,
        ..NetConfig::default()
    }
}

fn sweep(seeds: u64, configure: impl Fn(&mut OpenSpec)) -> (u64, u64) {
    let (mut sends_ok, mut sends_failed) = (0, 0);
    for seed in 0..seeds {
        for loss in [0.0, 0.05, 0.2] {
            let mut spec = OpenSpec::new(seed, net(loss));
            configure(&mut spec);
            let result = run_open(&spec);
            assert!(
                result.violations.is_empty(),
                "{}\n{:#?}",
                spec.replay_command(),
                result.violations
            );
            sends_ok += result.sends_ok;
            sends_failed += result.sends_failed;
        }
    }
    (sends_ok, sends_failed)
}

#[test]
fn datagrams_by_address_under_loss_duplication_reordering_and_corruption() {
    let (ok, failed) = sweep(60, |_| {});
    assert_eq!(failed, 0, "no send may fail without restarts");
    assert!(ok > 0);
}

#[test]
fn peers_restart_at_their_addresses() {
    let (ok, _) = sweep(60, |spec| spec.restart = 0.5);
    assert!(ok > 0);
}

#[test]
fn more_clients_than_server_slots() {
    let (ok, failed) = sweep(40, |spec| {
        spec.clients = 5;
        spec.server_slots = 2;
    });
    assert!(
        ok > 0 && failed > 0,
        "some clients wait out a full table: {ok} ok, {failed} failed"
    );
}

/// Clients that give up on a server still holding their slot, and then send to it again, start
/// a new conversation: it must not be taken for the old one (the server took a datagram twice
/// when conversations were named by process, 5 runs of 400 here).
#[test]
fn restarts_and_shared_slots_together() {
    let (ok, _) = sweep(80, |spec| {
        spec.clients = 5;
        spec.server_slots = 2;
        spec.restart = 0.3;
    });
    assert!(ok > 0);
}

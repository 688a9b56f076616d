//! Determinism: a run is a pure function of its seed and parameters, so a failure replays from
//! the command line it prints.

use nicmsg_proto::UnexpectedPolicy;
use nicmsg_sim::{run_catching, NetConfig, ProtoParams, RunSpec, WorkloadKind};

fn spec(seed: u64, workload: WorkloadKind, unexpected: UnexpectedPolicy) -> RunSpec {
    let mut spec = RunSpec::new(seed, workload);
    spec.unexpected = unexpected;
    spec.scale = 0.5;
    spec.net = NetConfig {
        loss: 0.05,
        dup: 0.02,
        reorder: 0.1,
        corrupt: 0.02,
        partition: 0.5,
        ..NetConfig::default()
    };
    spec.limits.max_virtual_ns = 20_000_000_000;
    spec
}

#[test]
fn same_seed_gives_identical_results() {
    for (i, workload) in WorkloadKind::ALL.into_iter().enumerate() {
        let unexpected = if i % 2 == 0 {
            UnexpectedPolicy::Buffer
        } else {
            UnexpectedPolicy::Drop
        };
        let spec = spec(7 + i as u64, workload, unexpected);
        let first = run_catching(&spec);
        // The second run on another thread: nothing may depend on the thread or on wall time.
        let again =
            std::thread::scope(|s| s.spawn(|| run_catching(&spec)).join().expect("run thread"));
        assert_eq!(first, again, "{} is not deterministic", workload.name());
        assert!(
            first.events > 0 && first.stats.frames_sent > 0,
            "{} did nothing",
            workload.name()
        );
    }
}

#[test]
fn different_seeds_give_different_runs() {
    let a = run_catching(&spec(1, WorkloadKind::Streams, UnexpectedPolicy::Buffer));
    let b = run_catching(&spec(2, WorkloadKind::Streams, UnexpectedPolicy::Buffer));
    assert_ne!(a.digest, b.digest);
}

#[test]
fn replay_command_names_every_non_default_parameter() {
    let mut spec = spec(42, WorkloadKind::PeerDeath, UnexpectedPolicy::Drop);
    spec.ranks = Some(8);
    spec.mode = nicmsg_sim::SimMode::Core;
    spec.proto = ProtoParams {
        max_retries: 5,
        ..ProtoParams::default()
    };
    let command = spec.replay_command();
    for part in [
        "--seed 42",
        "--workload peer-death",
        "--unexpected drop",
        "--loss 0.05",
        "--dup 0.02",
        "--reorder 0.1",
        "--corrupt 0.02",
        "--partition 0.5",
        "--ranks 8",
        "--mode core",
        "--scale 0.5",
        "--max-retries 5",
        "--max-virtual-ns 20000000000",
    ] {
        assert!(command.contains(part), "{command:?} lacks {part:?}");
    }
}

#[test]
fn checker_flags_a_peer_given_up_while_alive() {
    // With a peer timeout as short as a retransmission and half the frames lost, endpoints
    // give up on live peers: the simulator must report it (this checks the checker, not the
    // protocol).
    let mut spec = spec(3, WorkloadKind::PingPong, UnexpectedPolicy::Buffer);
    spec.net.loss = 0.5;
    spec.proto = ProtoParams {
        rto_max_ns: 1_000_000,
        keepalive_ns: 1_000_000,
        peer_timeout_ns: 1_000_000,
        ..ProtoParams::default()
    };
    let result = run_catching(&spec);
    assert!(
        result
            .violations
            .iter()
            .any(|v| v.kind == "false-unreachable"),
        "expected a false-unreachable violation, got {:?}",
        result.violations
    );
}

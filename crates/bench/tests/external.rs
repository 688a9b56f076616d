//! The external peers against the real tools on 127.0.0.1: rank 0 and rank 1 as two threads of
//! this process, as the runner runs them in two processes.
//!
//! They need NPtcp, fi_pingpong and ucx_perftest installed (`apt-get install netpipe-tcp
//! libfabric-bin ucx-utils`), so they are ignored by default:
//! `cargo test -p nicmsg-bench --test external -- --ignored`.
//! The paths that need no tool (not installed, unsupported) are unit tests of the module.

use std::net::{IpAddr, Ipv4Addr};
use std::thread;
use std::time::Duration;

use nicmsg_bench::external::{self, ExternalPeer, PeerContext};
use nicmsg_bench::model::{Outcome, Pattern, Series};

/// Generous for a loaded 2-core machine; a quick run takes about a second per size.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Latency tests use the default block; the all-patterns test a block of its own, so that
/// tests running at the same time never share a port.
const LATENCY_BASE_PORT: u16 = external::DEFAULT_BASE_PORT;
const PATTERNS_BASE_PORT: u16 = 28000;

fn context(rank: u32) -> PeerContext {
    PeerContext {
        rank,
        server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        my_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        quick: true,
        iterations: None,
        timeout: TIMEOUT,
    }
}

/// Runs both ranks at once and returns rank 1's series.
fn run_pair(peer: ExternalPeer, pattern: Pattern, sizes: &[u64], base_port: u16) -> Series {
    let sizes_server = sizes.to_vec();
    let server = thread::spawn(move || {
        external::run_on_port(peer, pattern, &sizes_server, &context(0), base_port)
    });
    let series = external::run_on_port(peer, pattern, sizes, &context(1), base_port)
        .expect("rank 1 runs")
        .expect("rank 1 returns the series");
    let served = server.join().expect("rank 0 does not panic");
    assert!(
        served.expect("rank 0 runs").is_none(),
        "rank 0 returns no series"
    );
    series
}

/// Checks a measured series: every size there, times and rates positive and not absurd.
fn check_measured(series: &Series, sizes: &[u64]) {
    assert_eq!(series.outcome, Outcome::Measured, "{series:#?}");
    let got: Vec<u64> = series.points.iter().map(|p| p.size).collect();
    assert_eq!(got, sizes, "{series:#?}");
    for p in &series.points {
        let t = p.time_us.median;
        assert!(t > 0.0 && t < 1e6, "time {t} us for {} bytes", p.size);
        assert!(p.repetitions > 0);
        assert_eq!(p.mbytes_per_sec.is_some(), p.size > 0);
    }
    let program = ExternalPeer::from_system(&series.system).unwrap().program();
    for line in series.command.lines() {
        assert!(line.starts_with("server: "), "{line}");
        assert!(
            line.contains("; client: ") && line.contains(program),
            "{line}"
        );
    }
    assert_eq!(series.command.lines().count(), sizes.len());
}

fn latency(peer: ExternalPeer) {
    let sizes = [8, 1024];
    let series = run_pair(peer, Pattern::Latency, &sizes, LATENCY_BASE_PORT);
    check_measured(&series, &sizes);
    // A half round trip on loopback: microseconds, well under 10 ms even on a busy machine.
    for p in &series.points {
        assert!(p.time_us.median < 10_000.0, "{series:#?}");
    }
}

#[test]
#[ignore = "needs NPtcp (apt-get install netpipe-tcp)"]
fn netpipe_latency_on_loopback() {
    latency(ExternalPeer::NetPipe);
}

#[test]
#[ignore = "needs fi_pingpong (apt-get install libfabric-bin)"]
fn fi_udp_rxd_latency_on_loopback() {
    latency(ExternalPeer::FiUdpRxd);
}

#[test]
#[ignore = "needs fi_pingpong (apt-get install libfabric-bin)"]
fn fi_tcp_rxm_latency_on_loopback() {
    latency(ExternalPeer::FiTcpRxm);
}

#[test]
#[ignore = "needs ucx_perftest (apt-get install ucx-utils)"]
fn ucx_tcp_latency_on_loopback() {
    latency(ExternalPeer::UcxTcp);
}

/// Every pattern each peer supports, on a small and a large size, with the rates the pattern
/// calls for.
#[test]
#[ignore = "needs NPtcp, fi_pingpong and ucx_perftest"]
fn every_supported_pattern_on_loopback() {
    let sizes = [64, 65536];
    for peer in ExternalPeer::all() {
        for pattern in [Pattern::Bw, Pattern::Bibw, Pattern::Msgrate] {
            if external::supports(peer, pattern).is_err() {
                continue;
            }
            let series = run_pair(peer, pattern, &sizes, PATTERNS_BASE_PORT);
            check_measured(&series, &sizes);
            for p in &series.points {
                assert!(p.msgs_per_sec.unwrap() > 0.0, "{series:#?}");
            }
        }
    }
}

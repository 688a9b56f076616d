//! Runs one rank of an external peer, as `nicmsg bench` does, and prints rank 1's series as
//! JSON: a way to try a tool by hand, e.g. across two network namespaces.
//!
//! ```text
//! external_peer SYSTEM PATTERN RANK SERVER_IP MY_IP [--quick] [--iterations N] [--sizes A,B,..]
//!               [--timeout SECONDS]
//! # loopback, two shells (or `&`):
//! cargo run -p nicmsg-bench --example external_peer -- ucx-tcp latency 0 127.0.0.1 127.0.0.1
//! cargo run -p nicmsg-bench --example external_peer -- ucx-tcp latency 1 127.0.0.1 127.0.0.1
//! ```
//!
//! Default sizes: 1 B to 4 MiB in powers of two, 0, and the frame-boundary sizes the runner
//! adds.

use std::process::ExitCode;
use std::time::Duration;

use nicmsg_bench::external::{self, ExternalPeer, PeerContext};
use nicmsg_bench::model::Pattern;

/// Default limit for every process the peer starts.
const TIMEOUT: Duration = Duration::from_secs(60);
/// Sizes the runner adds to the powers of two: around the Ethernet MTU and a page.
const EXTRA_SIZES: [u64; 7] = [1400, 1472, 1500, 1600, 4000, 4096, 4200];

fn usage() -> ExitCode {
    eprintln!(
        "usage: external_peer SYSTEM PATTERN RANK SERVER_IP MY_IP [--quick] [--iterations N] \
         [--sizes A,B,..] [--timeout SECONDS]\n  SYSTEM: netpipe | fi-udp-rxd | fi-tcp-rxm | ucx-tcp\n  \
         PATTERN: latency | bw | bibw | msgrate"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        return usage();
    }
    let Some(peer) = ExternalPeer::from_system(&args[0]) else {
        return usage();
    };
    let Ok(pattern) = serde_json::from_value::<Pattern>(serde_json::json!(args[1])) else {
        return usage();
    };
    let (Ok(rank), Ok(server_ip), Ok(my_ip)) = (args[2].parse(), args[3].parse(), args[4].parse())
    else {
        return usage();
    };
    let mut ctx = PeerContext {
        rank,
        server_ip,
        my_ip,
        quick: false,
        iterations: None,
        timeout: TIMEOUT,
    };
    let mut sizes: Vec<u64> = std::iter::once(0)
        .chain((0..=22).map(|e| 1u64 << e))
        .chain(EXTRA_SIZES)
        .collect();
    let mut rest = args[5..].iter();
    while let Some(flag) = rest.next() {
        match (flag.as_str(), rest.clone().next()) {
            ("--quick", _) => ctx.quick = true,
            ("--iterations", Some(n)) => {
                ctx.iterations = n.parse().ok();
                rest.next();
            }
            ("--timeout", Some(secs)) => {
                let Some(limit) = secs
                    .parse()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                else {
                    return usage();
                };
                ctx.timeout = limit;
                rest.next();
            }
            ("--sizes", Some(list)) => {
                sizes = list.split(',').filter_map(|s| s.parse().ok()).collect();
                rest.next();
            }
            _ => return usage(),
        }
    }
    match external::run(peer, pattern, &sizes, &ctx) {
        Ok(Some(series)) => {
            println!("{}", serde_json::to_string_pretty(&series).unwrap());
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("external_peer: {e}");
            ExitCode::FAILURE
        }
    }
}

//! libfabric's `fi_pingpong` (Debian package `libfabric-bin`, libfabric 1.17), over the
//! utility providers layered on the kernel's sockets: `udp;ofi_rxd` (reliable datagrams over
//! UDP, the closest relative of nicmsg) and `tcp;ofi_rxm` (reliable messages over TCP
//! connections).
//!
//! Provider selection: `-p "udp;ofi_rxd" -e rdm` (the provider name as `fi_info` lists it, core
//! provider first, and the RDM endpoint type those utility providers offer); `FI_PROVIDER` is
//! not needed. A server (`-B PORT`, no address) serves one test and exits; the client names the
//! server's address and `-P PORT`. The port is the out-of-band TCP control port; the data
//! endpoints pick their own. One pair runs per size (`-S SIZE`, exact sizes, 0 included).
//!
//! What the number is: fi_pingpong prints `usec/xfer` = elapsed / (iterations x 2), the mean
//! half round trip over all iterations (no warm-up in 1.17, so `tcp;ofi_rxm`'s connection
//! set-up on the first message is inside the mean), and `MB/sec` = size / that time (10^6
//! B/s), a ping-pong bandwidth. Its `Mxfers/sec` is just 1 / `usec/xfer`, so it gives no
//! message rate with several messages in flight.

use super::process::CommandLine;
use super::{ExternalPeer, Job, Measured, Traffic};
use crate::model::Pattern;

/// The provider string for `-p`.
pub fn provider(peer: ExternalPeer) -> &'static str {
    match peer {
        ExternalPeer::FiTcpRxm => "tcp;ofi_rxm",
        _ => "udp;ofi_rxd",
    }
}

pub fn supports(pattern: Pattern) -> Result<(), String> {
    match pattern {
        Pattern::Latency | Pattern::Bw => Ok(()),
        Pattern::Bibw => Err("fi_pingpong only bounces one message back and forth".into()),
        Pattern::Msgrate => Err("fi_pingpong's Mxfers/sec is 1 / its ping-pong latency, \
                                 not a rate with many messages in flight"
            .into()),
        Pattern::Overhead => {
            Err("fi_pingpong times whole transfers, not the post/wait calls".into())
        }
        Pattern::Overlap => Err("fi_pingpong has no computation to overlap".into()),
        Pattern::Offload => Err("fi_pingpong has no protocol-offload variants".into()),
        p if p.is_panic() => Err("PANIC measures nicmsg\'s programs, which only nicmsg has".into()),
        p if p.is_mpi() => Err("the MPI patterns run MPI programs under mpirun".into()),
        _ => unreachable!("every pattern is listed"),
    }
}

/// fi_pingpong only does ping-pong, for `bw` too.
pub fn traffic(_pattern: Pattern) -> Traffic {
    Traffic::PingPong
}

pub fn commands(program: &str, peer: ExternalPeer, job: &Job) -> (CommandLine, CommandLine) {
    let common = [
        "-p".to_string(),
        provider(peer).into(),
        "-e".into(),
        "rdm".into(),
        "-S".into(),
        job.size.to_string(),
        "-I".into(),
        job.iterations.to_string(),
    ];
    let v6: &[&str] = if job.server_ip.is_ipv6() {
        &["-6"]
    } else {
        &[]
    };
    let server = CommandLine::new(program)
        .args(&common)
        .args(v6)
        .args(["-B".to_string(), job.port.to_string()]);
    let client = CommandLine::new(program).args(&common).args(v6).args([
        "-P".to_string(),
        job.port.to_string(),
        job.server_ip.to_string(),
    ]);
    (server, client)
}

pub fn parse(job: &Job, output: &str) -> Result<Measured, String> {
    let usec = parse_usec_per_xfer(output).ok_or("no result line (bytes ... usec/xfer)")?;
    Ok(Measured::single(usec, job.iterations))
}

/// `usec/xfer` of the last result line: `bytes #sent #ack total time MB/sec usec/xfer
/// Mxfers/sec`, e.g. `1k 1k =1k 1.9m 0.02s 105.26 9.73 0.10`. The line is recognised by its
/// shape (8 fields, time ending in `s`, three numbers after it), not by the header text.
pub fn parse_usec_per_xfer(output: &str) -> Option<f64> {
    output.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() != 8 || !fields[4].ends_with('s') {
            return None;
        }
        let numbers: Vec<f64> = fields[5..]
            .iter()
            .map(|f| f.parse::<f64>())
            .collect::<Result<_, _>>()
            .ok()?;
        let usec = numbers[1];
        (usec.is_finite() && usec > 0.0).then_some(usec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// `fi_pingpong -p "udp;ofi_rxd" -e rdm -S 1024 -I 1000 -P 47600 127.0.0.1`.
    const CLIENT_1K: &str = "bytes   #sent   #ack     total       time     MB/sec    \
        usec/xfer   Mxfers/sec\n1k      1k      =1k      1.9m        0.02s    105.26       \
        9.73       0.10\n";
    /// The same with `-S 4194304 -I 100`.
    const CLIENT_4M: &str = "bytes   #sent   #ack     total       time     MB/sec    \
        usec/xfer   Mxfers/sec\n4m      100     =100     800m        1.66s    505.24    \
        8301.61       0.00\n";
    /// A client started before its server.
    const REFUSED: &str = "[error] util/pingpong.c:408 : failed to connect: Connection \
        refused\n";

    fn job(size: u64, ip: IpAddr) -> Job {
        Job {
            pattern: Pattern::Latency,
            size,
            iterations: 1000,
            port: 23201,
            server_ip: ip,
            cpus: None,
        }
    }

    #[test]
    fn parses_usec_per_xfer() {
        assert_eq!(parse_usec_per_xfer(CLIENT_1K), Some(9.73));
        assert_eq!(parse_usec_per_xfer(CLIENT_4M), Some(8301.61));
        assert_eq!(parse_usec_per_xfer(REFUSED), None);
        assert_eq!(parse_usec_per_xfer(""), None);
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let m = parse(&job(1024, v4), CLIENT_1K).unwrap();
        assert_eq!((m.time.median, m.repetitions), (9.73, 1000));
        assert!(parse(&job(1024, v4), REFUSED).is_err());
    }

    #[test]
    fn commands_select_the_provider_and_the_exact_size() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let (server, client) = commands("fi_pingpong", ExternalPeer::FiUdpRxd, &job(0, v4));
        assert_eq!(
            server.to_string(),
            "fi_pingpong -p 'udp;ofi_rxd' -e rdm -S 0 -I 1000 -B 23201"
        );
        assert_eq!(
            client.to_string(),
            "fi_pingpong -p 'udp;ofi_rxd' -e rdm -S 0 -I 1000 -P 23201 10.0.0.1"
        );
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let (_, client) = commands("fi_pingpong", ExternalPeer::FiTcpRxm, &job(8, v6));
        assert_eq!(
            client.to_string(),
            "fi_pingpong -p 'tcp;ofi_rxm' -e rdm -S 8 -I 1000 -6 -P 23201 ::1"
        );
    }
}

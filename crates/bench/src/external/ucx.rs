//! UCX's `ucx_perftest` (Debian package `ucx-utils`, UCX 1.13) over its TCP transport.
//!
//! `UCX_TLS=tcp` on both sides restricts UCP to the tcp transport (no shared memory, which
//! would otherwise win between two processes on one host); the devices are UCX's default (all
//! interfaces that are up). The server is `ucx_perftest -p PORT` with no host: it takes the test
//! parameters from the client over its out-of-band TCP connection on PORT, runs one test and
//! exits, so one pair runs per size (`-s SIZE`, exact sizes, 0 included). `-n` sets the timed
//! iterations and `-w` the untimed warm-up iterations before them.
//!
//! What the numbers are (final row: iterations, latency 50th percentile / average / overall,
//! bandwidth average / overall in MiB/s, message rate average / overall):
//! * `tag_lat` (`latency`): ping-pong; UCX divides round-trip times by 2, so all latency
//!   columns are half round trips. The percentile is over UCX's window of the most recent
//!   per-iteration samples; "overall" is elapsed / iterations / 2 over the whole run.
//! * `tag_bw` (`bw`, `msgrate`): a stream of tagged sends with many in flight; "overall" is
//!   elapsed / iterations, one message's share, the model's `bw` time. Its percentile column is
//!   the cost of one send call, not a message's share, so it is not used.
//!
//! `ucx_perftest` 1.13 has no bidirectional test (no option for it in `-h`).

use super::process::CommandLine;
use super::{Job, Measured, Traffic};
use crate::model::Pattern;

/// Warm-up iterations are the timed iterations divided by this (at least 1).
pub const WARMUP_DIVISOR: u64 = 10;

pub fn supports(pattern: Pattern) -> Result<(), String> {
    match pattern {
        Pattern::Latency | Pattern::Bw | Pattern::Msgrate => Ok(()),
        Pattern::Bibw => Err("ucx_perftest 1.13 has no bidirectional test".into()),
        Pattern::Overhead => Err(
            "ucx_perftest's overhead column is the time of one send call \
                                  in a stream, not the post-send/post-receive/wait split"
                .into(),
        ),
        Pattern::Overlap => Err("ucx_perftest has no computation to overlap".into()),
        Pattern::Offload => Err("ucx_perftest has no protocol-offload variants".into()),
        p if p.is_panic() => Err("PANIC measures nicmsg\'s programs, which only nicmsg has".into()),
        p if p.is_mpi() => Err("the MPI patterns run MPI programs under mpirun".into()),
        _ => unreachable!("every pattern is listed"),
    }
}

/// The ucx_perftest test for a pattern.
fn test(pattern: Pattern) -> &'static str {
    match pattern {
        Pattern::Latency => "tag_lat",
        _ => "tag_bw",
    }
}

pub fn traffic(pattern: Pattern) -> Traffic {
    match pattern {
        Pattern::Latency => Traffic::PingPong,
        _ => Traffic::Stream,
    }
}

pub fn warmup(iterations: u64) -> u64 {
    (iterations / WARMUP_DIVISOR).max(1)
}

pub fn commands(program: &str, job: &Job) -> (CommandLine, CommandLine) {
    let v6: &[&str] = if job.server_ip.is_ipv6() {
        &["-6"]
    } else {
        &[]
    };
    let server = CommandLine::new(program)
        .env("UCX_TLS", "tcp")
        .args(["-p".to_string(), job.port.to_string()])
        .args(v6);
    let client = CommandLine::new(program)
        .env("UCX_TLS", "tcp")
        .args([job.server_ip.to_string(), "-p".into(), job.port.to_string()])
        .args(v6)
        .args([
            "-t".to_string(),
            test(job.pattern).into(),
            "-s".into(),
            job.size.to_string(),
            "-n".into(),
            job.iterations.to_string(),
            "-w".into(),
            warmup(job.iterations).to_string(),
        ]);
    (server, client)
}

/// The final row of a ucx_perftest table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub iterations: f64,
    pub percentile_us: f64,
    /// "overall": elapsed / iterations (/ 2 for ping-pong) over the whole run.
    pub overall_us: f64,
}

pub fn parse(job: &Job, output: &str) -> Result<Measured, String> {
    let row = parse_row(output).ok_or("no result row in ucx_perftest's output")?;
    if row.overall_us <= 0.0 {
        return Err(format!("implausible time {} us", row.overall_us));
    }
    let repetitions = row.iterations as u64;
    Ok(match job.pattern {
        Pattern::Latency => Measured::with_mean(row.percentile_us, row.overall_us, repetitions),
        _ => Measured::single(row.overall_us, repetitions),
    })
}

/// The last row whose last 8 fields are numbers (`Final:` or nothing before them, depending on
/// `-f`); the table's borders and headers never end in 8 numbers.
pub fn parse_row(output: &str) -> Option<Row> {
    output.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let tail = fields.get(fields.len().checked_sub(8)?..)?;
        let n: Vec<f64> = tail
            .iter()
            .map(|f| f.parse::<f64>())
            .collect::<Result<_, _>>()
            .ok()?;
        n.iter().all(|x| x.is_finite()).then_some(Row {
            iterations: n[0],
            percentile_us: n[1],
            overall_us: n[3],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    /// `UCX_TLS=tcp ucx_perftest 127.0.0.1 -p 47620 -t tag_lat -s 1024 -n 10000 -w 1000`.
    const TAG_LAT: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                 10000      4.901     4.771     4.771      204.67     204.67      209580      209580
";
    /// `... -t tag_bw -s 65536 -n 2000 -w 100`.
    const TAG_BW: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                  2000      4.517    31.827    31.827     1963.74    1963.74       31420       31420
";
    /// `-f`: only the final row, without `Final:`.
    const FINAL_ONLY: &str = "\
|     Test     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                        1000      4.351     4.810     4.810        0.00       0.00      207901      207901
";
    /// A client started before its server.
    const REFUSED: &str = "[1795265422.152617] [vm:3741 :0]        perftest.c:405  UCX  ERROR \
        client failed. connect() failed: Connection refused\n";

    fn job(pattern: Pattern) -> Job {
        Job {
            pattern,
            size: 65536,
            iterations: 2000,
            port: 23301,
            server_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            cpus: None,
        }
    }

    #[test]
    fn parses_the_final_row() {
        let row = parse_row(TAG_LAT).unwrap();
        assert_eq!(
            row,
            Row {
                iterations: 10000.0,
                percentile_us: 4.901,
                overall_us: 4.771
            }
        );
        assert_eq!(parse_row(FINAL_ONLY).unwrap().percentile_us, 4.351);
        assert_eq!(parse_row(REFUSED), None);
        assert_eq!(parse_row(""), None);
    }

    #[test]
    fn latency_uses_the_median_and_bw_the_overall_share() {
        let lat = parse(&job(Pattern::Latency), TAG_LAT).unwrap();
        assert_eq!((lat.time.median, lat.time.mean), (4.901, 4.771));
        assert_eq!(lat.repetitions, 10000);
        let bw = parse(&job(Pattern::Bw), TAG_BW).unwrap();
        assert_eq!((bw.time.median, bw.time.mean), (31.827, 31.827));
        assert!(parse(&job(Pattern::Bw), REFUSED).is_err());
    }

    #[test]
    fn commands() {
        let (server, client) = super::commands("ucx_perftest", &job(Pattern::Msgrate));
        assert_eq!(server.to_string(), "UCX_TLS=tcp ucx_perftest -p 23301");
        assert_eq!(
            client.to_string(),
            "UCX_TLS=tcp ucx_perftest 10.0.0.1 -p 23301 -t tag_bw -s 65536 -n 2000 -w 200"
        );
    }
}

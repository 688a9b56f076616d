//! NetPIPE 3.7's TCP module, `NPtcp` (Debian package `netpipe-tcp`).
//!
//! One server/client pair per message size: `-l S -u S -p 0` makes NetPIPE measure exactly the
//! size S (no perturbation sizes S-3, S+3), which is how the runner's irregular sizes (1400,
//! 1472, ...) are measured exactly; NetPIPE's own sweep would pick its own sizes. The receiver
//! (no `-h`) is the server, the transmitter (`-h SERVER`) the client; the transmitter writes
//! the result file (`-o`), one line `bytes Mbps seconds`.
//!
//! What the number is: NetPIPE runs [`TRIALS`] trials of `-n` round trips each, takes each
//! trial's elapsed time / (2 x round trips), i.e. the mean half round trip, and reports the
//! *lowest* of the trials' means. In `-2` (both directions at once) each side sends and then
//! receives one message per iteration and the time is elapsed / iterations, one exchange.
//!
//! Not used: streaming (`-s`). NPtcp re-opens its socket between streaming trials and in
//! about half of the runs tried on loopback the transmitter died with "error writing or
//! reading synchronization string: Connection reset by peer", after which the receiver hung
//! until killed; so `bw` uses the ping-pong bandwidth, NetPIPE's classic curve, and says so in
//! the label.

use std::path::Path;

use super::process::CommandLine;
use super::{Job, Measured, Traffic};
use crate::model::Pattern;

/// Trials per size in this build of NetPIPE (`TRIALS` is 3 unless built with `FINAL`; an
/// strace of `NPtcp -n 1000` shows 3 x 1000 writes plus the start-up handshake).
pub const TRIALS: u64 = 3;

/// `-b` for `-2`: both sides write a whole message before reading, so a message must fit in
/// the socket buffers; NetPIPE lowers its upper size to what the buffers allow (the kernel caps
/// the request at `net.core.wmem_max`) and sizes above that are left out of the series.
pub const BIDIR_SOCKET_BUFFER: u64 = 8 << 20;

/// NetPIPE rejects `-l 0` ("Need a starting value >= 1").
pub const MIN_SIZE: u64 = 1;

/// The message NPtcp prints when it lowers the upper size for `-2` below the size asked for.
const UPPER_LIMIT_LOWERED: &str = "upper limit is being set to";

pub fn supports(pattern: Pattern) -> Result<(), String> {
    match pattern {
        Pattern::Latency | Pattern::Bw | Pattern::Bibw => Ok(()),
        Pattern::Msgrate => Err("NetPIPE keeps one message in flight; it has no windowed \
                                 message-rate test"
            .into()),
        Pattern::Overhead => Err("NetPIPE times whole transfers, not the post/wait calls".into()),
        Pattern::Overlap => Err("NetPIPE has no computation to overlap".into()),
        Pattern::Offload => Err("NetPIPE has no protocol-offload variants".into()),
        p if p.is_panic() => Err("PANIC measures nicmsg\'s programs, which only nicmsg has".into()),
        p if p.is_mpi() => Err("the MPI patterns run MPI programs under mpirun".into()),
        _ => unreachable!("every pattern is listed"),
    }
}

/// Every NetPIPE mode used here is a lock-step exchange.
pub fn traffic(_pattern: Pattern) -> Traffic {
    Traffic::PingPong
}

/// `-n`: the round trips per trial, so that all trials together make about `iterations`.
pub fn repeats(iterations: u64) -> u64 {
    iterations.div_ceil(TRIALS).max(1)
}

/// The transmitter's result file, one per size so that a stale file can never be read.
fn result_file(size: u64) -> String {
    format!("np-{size}.out")
}

pub fn commands(program: &str, job: &Job) -> (CommandLine, CommandLine) {
    let mut common = vec![
        "-P".to_string(),
        job.port.to_string(),
        "-l".into(),
        job.size.to_string(),
        "-u".into(),
        job.size.to_string(),
        "-p".into(),
        "0".into(),
        "-n".into(),
        repeats(job.iterations).to_string(),
    ];
    if job.pattern == Pattern::Bibw {
        common.extend(["-2".into(), "-b".into(), BIDIR_SOCKET_BUFFER.to_string()]);
    }
    let server = CommandLine::new(program).args(&common);
    let client = CommandLine::new(program)
        .args(["-h".to_string(), job.server_ip.to_string()])
        .args(&common)
        .args(["-o".to_string(), result_file(job.size)]);
    (server, client)
}

/// Reads the client's result from its result file in `dir`. `Ok(None)`: NetPIPE skipped the
/// size because it exceeds the socket buffers (`-2` only).
pub fn parse(job: &Job, output: &str, dir: &Path) -> Result<Option<Measured>, String> {
    let file = std::fs::read_to_string(dir.join(result_file(job.size))).unwrap_or_default();
    // With -2 NetPIPE counts the bytes of both directions.
    let bytes = if job.pattern == Pattern::Bibw {
        2 * job.size
    } else {
        job.size
    };
    match parse_result_line(&file, bytes) {
        Some(seconds) => {
            let us = seconds * 1e6;
            Ok(Some(Measured::single(us, TRIALS * repeats(job.iterations))))
        }
        None if output.contains(UPPER_LIMIT_LOWERED) => Ok(None),
        None => Err(format!(
            "no result for {bytes} bytes in {}",
            result_file(job.size)
        )),
    }
}

/// The time in seconds of the line for `bytes` in a NetPIPE result file (`bytes Mbps
/// seconds`). The time is recomputed from the Mbps column (printed with 6 decimals, Mbps =
/// bits / (seconds x 2^20)) because the seconds column is rounded to 10 ns; the seconds column
/// is the fallback when Mbps is 0.
pub fn parse_result_line(file: &str, bytes: u64) -> Option<f64> {
    file.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let size: u64 = fields.next()?.parse().ok()?;
        let mbps: f64 = fields.next()?.parse().ok()?;
        let seconds: f64 = fields.next()?.parse().ok()?;
        if size != bytes {
            return None;
        }
        if mbps > 0.0 && mbps.is_finite() {
            Some(size as f64 * 8.0 / (mbps * 1024.0 * 1024.0))
        } else if seconds > 0.0 {
            Some(seconds)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    /// `NPtcp -h 127.0.0.1 -l 1024 -u 1024 -p 0 -n 100 -o np.out`, stdout and stderr.
    const CLIENT_OUTPUT: &str = "Using no perturbations\n\nSending output to np.out\n\
        Send and receive buffers are 16384 and 131072 bytes\n\
        (A bug in Linux doubles the requested buffer sizes)\nNow starting the main loop\n  \
        0:    1024 bytes    100 times -->   1548.58 Mbps in       5.04 usec\n";
    /// The np.out of that run.
    const RESULT_FILE: &str = "    1024 1548.582231   0.00000504\n";
    /// np.out of `-2 -l 65536 -u 65536`: the size column counts both directions.
    const BIDIR_RESULT_FILE: &str = "  131072 58449.052397   0.00001711\n";
    /// `-2 -l 4194304 -u 4194304` without `-b`: NetPIPE lowers the limit and measures nothing.
    const BIDIR_TOO_BIG: &str = "Passing data in both directions simultaneously.\n\
        Output is for the combined bandwidth.\nThe socket buffer size limits the maximum test \
        size.\n\nUsing no perturbations\n\nSending output to x.out\nSend and receive buffers \
        are 16384 and 131072 bytes\n(A bug in Linux doubles the requested buffer sizes)\n\
        Now starting the main loop\nThe upper limit is being set to 147456 Bytes\n\
        due to socket buffer size limitations\n\n";

    fn job(pattern: Pattern, size: u64) -> Job {
        Job {
            pattern,
            size,
            iterations: 1000,
            port: 23001,
            server_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            cpus: None,
        }
    }

    #[test]
    fn result_line_time_comes_from_the_precise_mbps_column() {
        let seconds = parse_result_line(RESULT_FILE, 1024).unwrap();
        assert!((seconds * 1e6 - 5.045).abs() < 0.001, "{seconds}");
        assert_eq!(parse_result_line(RESULT_FILE, 1023), None);
        assert_eq!(parse_result_line("garbage\n", 1024), None);
        // Mbps 0: the seconds column.
        assert_eq!(
            parse_result_line("8 0.000000 0.00000600\n", 8),
            Some(0.000006)
        );
    }

    #[test]
    fn parses_the_result_file_of_a_run() {
        let dir = super::super::process::WorkDir::create("netpipe-test").unwrap();
        std::fs::write(dir.path().join("np-1024.out"), RESULT_FILE).unwrap();
        let m = parse(&job(Pattern::Latency, 1024), CLIENT_OUTPUT, dir.path())
            .unwrap()
            .unwrap();
        assert!((m.time.median - 5.045).abs() < 0.001);
        assert_eq!(m.repetitions, 3 * 334);

        std::fs::write(dir.path().join("np-65536.out"), BIDIR_RESULT_FILE).unwrap();
        let m = parse(&job(Pattern::Bibw, 65536), "", dir.path())
            .unwrap()
            .unwrap();
        assert!((m.time.median - 17.11).abs() < 0.01);
    }

    #[test]
    fn a_size_over_the_socket_buffers_is_left_out_and_a_missing_file_is_an_error() {
        let dir = super::super::process::WorkDir::create("netpipe-test").unwrap();
        let big = job(Pattern::Bibw, 4 << 20);
        assert_eq!(parse(&big, BIDIR_TOO_BIG, dir.path()).unwrap(), None);
        assert!(parse(&job(Pattern::Latency, 8), CLIENT_OUTPUT, dir.path()).is_err());
    }

    #[test]
    fn commands_measure_exactly_one_size() {
        let (server, client) = commands("NPtcp", &job(Pattern::Latency, 1400));
        assert_eq!(
            server.to_string(),
            "NPtcp -P 23001 -l 1400 -u 1400 -p 0 -n 334"
        );
        assert_eq!(
            client.to_string(),
            "NPtcp -h 10.0.0.1 -P 23001 -l 1400 -u 1400 -p 0 -n 334 -o np-1400.out"
        );
        let (server, _) = commands("NPtcp", &job(Pattern::Bibw, 8));
        assert!(server.to_string().ends_with("-2 -b 8388608"));
    }
}

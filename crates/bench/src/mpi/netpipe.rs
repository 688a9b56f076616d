//! NetPIPE's MPI module, `NPopenmpi` (Debian package `netpipe-openmpi`), for `mpi-latency`
//! (ping-pong) and `mpi-bw` (`-s`, a one-way stream).
//!
//! One `mpirun` per size and run: `-l S -u S -p 0` measures exactly the size S (no
//! perturbations), `-n N` sets the round trips (or streamed messages) of each of NetPIPE's
//! [`TRIALS`] trials, `-o FILE` gets the result line `bytes Mbps seconds`. NetPIPE reports the
//! lowest of its trials' mean times: for a ping-pong half the round trip, for a stream one
//! message's share (elapsed / messages). That number is one sample; the point is the median,
//! min and max of the samples of [`super::FULL_RUNS`] runs.

use super::{Job, Options};
use crate::external::{netpipe_result as parse_result_line, NETPIPE_TRIALS as TRIALS};
use crate::model::{Pattern, Point};
use crate::stats::summarize;

/// The program.
pub const PROGRAM: &str = "NPopenmpi";
/// NetPIPE rejects sizes below 1 byte.
pub const MIN_SIZE: u64 = 1;
/// The size of the path check's short run.
const CHECK_SIZE: u64 = 8;
/// Round trips per trial of the path check.
const CHECK_REPEATS: u64 = 10;

/// The result file of a size, one per size so a stale file is never read.
fn result_file(size: u64) -> String {
    format!("np-{size}.out")
}

/// NetPIPE's arguments for one size, `repeats` per trial.
pub fn args(pattern: Pattern, size: u64, repeats: u64) -> Vec<String> {
    let mut words: Vec<String> = vec![
        PROGRAM.into(),
        "-l".into(),
        size.to_string(),
        "-u".into(),
        size.to_string(),
        "-p".into(),
        "0".into(),
        "-n".into(),
        repeats.to_string(),
    ];
    if pattern == Pattern::MpiBw {
        words.push("-s".into());
    }
    words.extend(["-o".to_string(), result_file(size)]);
    words
}

/// Whether a run's iterations are round trips (latency) or one-way messages (stream).
fn is_stream(pattern: Pattern) -> bool {
    pattern == Pattern::MpiBw
}

/// Iterations (round trips, or messages) of one run: `--reps`, else as many as
/// [`super::BYTES_PER_RUN`] and [`super::TIME_PER_RUN`] allow, the time estimated from
/// `estimate_us`, the last time measured per iteration (a probe's count when none is).
pub fn iterations(pattern: Pattern, size: u64, estimate_us: Option<f64>, opts: &Options) -> u64 {
    if let Some(reps) = opts.reps {
        return reps.max(1);
    }
    let (bytes, time) = if opts.quick {
        (super::QUICK_BYTES_PER_RUN, super::QUICK_TIME_PER_RUN)
    } else {
        (super::BYTES_PER_RUN, super::TIME_PER_RUN)
    };
    let max = if is_stream(pattern) {
        super::MAX_STREAM_ITERATIONS
    } else {
        super::MAX_PINGPONG_ITERATIONS
    };
    let by_bytes = bytes / size.max(1);
    let by_time = match estimate_us {
        Some(us) if us > 0.0 => (time.as_secs_f64() * 1e6 / us) as u64,
        _ => super::PROBE_ITERATIONS,
    };
    by_bytes.min(by_time).clamp(super::MIN_ITERATIONS, max)
}

/// The time of one iteration from NetPIPE's number: a round trip is two half round trips.
fn per_iteration_us(pattern: Pattern, reported_us: f64) -> f64 {
    if is_stream(pattern) {
        reported_us
    } else {
        2.0 * reported_us
    }
}

/// What NetPIPE printed for one size on its standard output: `  0:  1024 bytes  300 times -->
/// 1548.58 Mbps in  5.04 usec` gives (1024, 300, 5.04). `times` is per trial.
pub fn parse_progress_line(output: &str) -> Option<(u64, u64, f64)> {
    output.lines().rev().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = |i: usize| words.get(i).copied();
        if at(2)? != "bytes" || at(4)? != "times" || at(5)? != "-->" || at(10)? != "usec" {
            return None;
        }
        Some((
            at(1)?.parse().ok()?,
            at(3)?.parse().ok()?,
            at(9)?.parse().ok()?,
        ))
    })
}

/// One run's sample in microseconds and the iterations behind it, from the result file in
/// the job's directory (NetPIPE's precise number) or else its standard output.
pub fn parse_run(file: &str, output: &str, size: u64, repeats: u64) -> Result<(f64, u64), String> {
    let progress = parse_progress_line(output).filter(|p| p.0 == size);
    let repeats = progress.map_or(repeats, |p| p.1);
    let us = parse_result_line(file, size)
        .map(|seconds| seconds * 1e6)
        .or(progress.map(|p| p.2))
        .filter(|us| us.is_finite() && *us > 0.0)
        .ok_or_else(|| format!("NetPIPE printed no result for {size} bytes"))?;
    Ok((us, repeats * TRIALS))
}

/// The point of one size from its runs' samples.
pub fn point(pattern: Pattern, size: u64, samples: &[f64], repetitions: u64) -> Point {
    let time = summarize(samples);
    let valid = time.median.is_finite() && time.median > 0.0;
    Point {
        size,
        time_us: time,
        mbytes_per_sec: valid.then(|| size as f64 / time.median),
        msgs_per_sec: (valid && is_stream(pattern)).then(|| 1e6 / time.median),
        repetitions,
        samples_us: samples.to_vec(),
        ..Point::default()
    }
}

/// Runs the sizes: the path check, then [`Options::runs`] runs per size.
pub(super) fn run(
    job: &mut Job,
    pattern: Pattern,
    sizes: &[u64],
    opts: &Options,
    report: &mut dyn FnMut(Point),
) -> Result<(), String> {
    let mut sizes: Vec<u64> = sizes.iter().copied().filter(|&s| s >= MIN_SIZE).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let check = job.check(&args(pattern, CHECK_SIZE, CHECK_REPEATS))?;
    job.commands.push(check);
    // The last (size, time per iteration) measured, for sizing the next run.
    let mut last: Option<(u64, f64)> = None;
    for size in sizes {
        let mut samples = Vec::new();
        let mut repetitions = 0;
        let mut recorded = None;
        for run in 0..opts.runs() {
            let estimate = last.map(|(at, us)| us * (size as f64 / at as f64).max(1.0));
            let total = iterations(pattern, size, estimate, opts);
            let repeats = total.div_ceil(TRIALS).max(1);
            let file = job.path().join(result_file(size));
            let _ = std::fs::remove_file(&file);
            let command = job.command(&[], &args(pattern, size, repeats));
            // The last run's command: its -n comes from the runs before it.
            recorded = Some(job.record(&command));
            let output = job
                .run(&command, &format!("np-{size}-{run}"))
                .map_err(|e| format!("size {size}: {e}"))?;
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let (us, reps) = parse_run(&text, &output, size, repeats)
                .map_err(|e| format!("size {size}: {e}"))?;
            samples.push(us);
            repetitions += reps;
            last = Some((size, per_iteration_us(pattern, us)));
        }
        if let Some(command) = recorded {
            job.commands.push(format!(
                "{command}  # the last of {} runs (-n sized per run by the ones before)",
                samples.len()
            ));
        }
        report(point(pattern, size, &samples, repetitions));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `mpirun -n 2 ... NPopenmpi -l 8 -u 8 -p 0 -n 300 -o np-8.out`, both ranks' output.
    const OUTPUT_8: &str = "Using no perturbations\n\nSending output to np-8.out\n1: vm\n\
        Using no perturbations\n\nSending output to np-8.out\n0: vm\n\
        Now starting the main loop\n  0:       8 bytes    300 times -->     16.70 Mbps in       \
        3.65 usec\n";
    /// Its result file.
    const FILE_8: &str = "       8 16.699282   0.00000365\n";
    /// `-s -l 1048576 -u 1048576 -n 200`: one message's share of the stream.
    const STREAM_1M: &str =
        "  0: 1048576 bytes    200 times -->  65927.44 Mbps in     121.35 usec\n";

    fn opts(quick: bool) -> Options {
        Options {
            quick,
            reps: None,
            timeout: Duration::from_secs(60),
            mtu: None,
        }
    }

    #[test]
    fn progress_lines_give_size_repeats_and_time() {
        assert_eq!(parse_progress_line(OUTPUT_8), Some((8, 300, 3.65)));
        assert_eq!(parse_progress_line(STREAM_1M), Some((1 << 20, 200, 121.35)));
        assert_eq!(parse_progress_line("Using no perturbations\n"), None);
        assert_eq!(parse_progress_line(""), None);
    }

    #[test]
    fn a_run_is_read_from_the_file_then_the_output() {
        let (us, reps) = parse_run(FILE_8, OUTPUT_8, 8, 300).unwrap();
        // From the Mbps column: 8 x 8 bits / (16.699282 x 2^20 bit/s).
        assert!((us - 3.6546).abs() < 0.001, "{us}");
        assert_eq!(reps, 900);
        let (us, reps) = parse_run("", STREAM_1M, 1 << 20, 200).unwrap();
        assert_eq!((us, reps), (121.35, 600));
        assert!(parse_run("", "", 8, 300).is_err());
        // A line for another size is not this size's result.
        assert!(parse_run("", OUTPUT_8, 16, 300).is_err());
    }

    #[test]
    fn arguments_measure_one_size() {
        assert_eq!(
            args(Pattern::MpiLatency, 4096, 100).join(" "),
            "NPopenmpi -l 4096 -u 4096 -p 0 -n 100 -o np-4096.out"
        );
        assert_eq!(
            args(Pattern::MpiBw, 8, 5).join(" "),
            "NPopenmpi -l 8 -u 8 -p 0 -n 5 -s -o np-8.out"
        );
    }

    #[test]
    fn iterations_follow_bytes_and_time_within_bounds() {
        let full = opts(false);
        // Nothing measured yet: a probe.
        assert_eq!(iterations(Pattern::MpiLatency, 8, None, &full), 60);
        // 8 B at 10 us a round trip: 40,000 fit 0.4 s, capped.
        assert_eq!(
            iterations(Pattern::MpiLatency, 8, Some(10.0), &full),
            30_000
        );
        // The thread engine's milliseconds: the floor.
        assert_eq!(iterations(Pattern::MpiLatency, 8, Some(8000.0), &full), 50);
        assert_eq!(iterations(Pattern::MpiLatency, 8, Some(1e6), &full), 30);
        // 4 MiB: 32 by bytes.
        assert_eq!(iterations(Pattern::MpiBw, 4 << 20, Some(1.0), &full), 32);
        assert_eq!(iterations(Pattern::MpiBw, 8, Some(0.5), &full), 100_000);
        let quick = opts(true);
        assert_eq!(
            iterations(Pattern::MpiLatency, 1 << 20, Some(100.0), &quick),
            30
        );
        let fixed = Options {
            reps: Some(7),
            ..opts(false)
        };
        assert_eq!(iterations(Pattern::MpiLatency, 8, None, &fixed), 7);
    }

    #[test]
    fn points_are_the_median_of_the_runs() {
        let p = point(Pattern::MpiLatency, 1000, &[2.0, 4.0, 3.0], 900);
        assert_eq!(
            (p.time_us.median, p.time_us.min, p.time_us.max),
            (3.0, 2.0, 4.0)
        );
        assert!((p.mbytes_per_sec.unwrap() - 1000.0 / 3.0).abs() < 1e-9);
        assert_eq!(p.msgs_per_sec, None);
        assert_eq!(p.samples_us, [2.0, 4.0, 3.0]);
        let p = point(Pattern::MpiBw, 1000, &[4.0], 30);
        assert_eq!(p.msgs_per_sec, Some(250_000.0));
    }
}

//! `mpi-overlap`: the `overlap` pattern over MPI. The program is
//! `crates/bench/tests/mpi/overlap.c` ([`SOURCE`], built into `nicmsg-bench`), compiled with
//! `mpicc` in the series' scratch directory at run time. Each iteration posts [`BATCH`]
//! `MPI_Irecv` and [`BATCH`] `MPI_Isend`, computes for *c* microseconds, and waits with
//! `MPI_Waitall`; one `mpirun` per message size sweeps *c*.
//!
//! The figures are taken from the median iteration, *t* (the median of the computation's own
//! time per iteration, *w*): on a machine shared with other work, a stall of a few hundred
//! milliseconds in one iteration would otherwise decide a whole point (the loop totals are
//! kept: `time_us.mean` is the loop's time per iteration, so *c* / mean is RMPP's ratio of
//! total durations):
//!
//! * throughput = 2 x [`BATCH`] x size / *t* (sent and received, EMP figure 6);
//! * CPU fraction = *w* / *t*;
//! * availability = *c* / *t*, RMPP's "the same work without communication over with
//!   communication" (figure 9): the computation's rate is measured once, on a quiet core and
//!   without any communication library, and every system's runs compute at it, so *c*
//!   microseconds of it take *c* alone and every system does the same work (see
//!   [`shared_rate`]);
//! * effective bandwidth = availability x throughput (RMPP figure 11).

use super::{Job, Options};
use crate::external::process::{self, CommandLine, Exit};
use crate::model::{Overlap, Point, Summary};
use crate::patterns::Plan;
use std::sync::OnceLock;

/// The program's source.
pub const SOURCE: &str = include_str!("../../tests/mpi/overlap.c");
/// Where the source lives in the repository, for the record.
pub const SOURCE_PATH: &str = "crates/bench/tests/mpi/overlap.c";
/// Messages each way per iteration: EMP's batches of five, as `overlap`.
pub const BATCH: u64 = crate::patterns::BATCH as u64;
/// Loop time aimed at per amount of computation, as `overlap`'s.
pub const BUDGET_US: u64 = 400_000;
/// `--quick`: loop time per amount of computation.
pub const QUICK_BUDGET_US: u64 = 20_000;
/// Fewest and most timed iterations per amount of computation.
pub const MIN_ITERATIONS: u64 = 20;
pub const MAX_ITERATIONS: u64 = 2_000;
/// Untimed iterations before each amount (they size the timed loop).
pub const WARMUP: u64 = 20;
pub const QUICK_WARMUP: u64 = 5;
/// `mpicc`'s time limit.
const COMPILE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);
/// `./overlap calibrate`'s time limit (it takes about a tenth of a second).
const CALIBRATE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The computation's rate (units a microsecond) every system's runs use, measured by the
/// first series that needs it.
static SHARED_RATE: OnceLock<f64> = OnceLock::new();

/// One line the program printed for one amount of computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub size: u64,
    pub batch: u64,
    pub compute_us: f64,
    pub iterations: u64,
    pub loop_us: f64,
    /// The computation's time inside the loop, in total and its median per iteration.
    pub computing_us: f64,
    pub computing_median_us: f64,
    /// Per iteration.
    pub time: Summary,
}

impl Line {
    /// The model's point: the iteration's times and the overlap figures of the median
    /// iteration.
    pub fn point(&self) -> Point {
        let iteration = self.time.median;
        let per = |value: f64| {
            if iteration > 0.0 {
                value / iteration
            } else {
                0.0
            }
        };
        let throughput = per(2.0 * self.batch as f64 * self.size as f64);
        // The calibration is good to a few percent: a ratio above 1 is 1.
        let availability = per(self.compute_us).min(1.0);
        let cpu_fraction = per(self.computing_median_us).min(1.0);
        Point {
            size: self.size,
            compute_us: Some(self.compute_us),
            time_us: self.time,
            mbytes_per_sec: Some(throughput),
            overlap: Some(Overlap {
                cpu_fraction,
                throughput_mbytes_per_sec: throughput,
                availability,
                effective_mbytes_per_sec: availability * throughput,
            }),
            repetitions: self.iterations,
            ..Point::default()
        }
    }
}

/// The `point ...` lines of the program's output (other lines, and other ranks' noise such as
/// nicmsg's counters, are skipped). An error when a point line is malformed.
pub fn parse(output: &str) -> Result<Vec<Line>, String> {
    output
        .lines()
        .filter_map(|line| line.trim().strip_prefix("point "))
        .map(parse_point)
        .collect()
}

fn parse_point(text: &str) -> Result<Line, String> {
    let field = |name: &str| -> Result<f64, String> {
        text.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| format!("no {name}= in {text:?}"))?
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("bad {name}= in {text:?}"))
    };
    Ok(Line {
        size: field("size")? as u64,
        batch: field("batch")? as u64,
        compute_us: field("compute_us")?,
        iterations: field("iterations")? as u64,
        loop_us: field("loop_us")?,
        computing_us: field("computing_us")?,
        computing_median_us: field("computing_median_us")?,
        time: Summary {
            median: field("median_us")?,
            min: field("min_us")?,
            max: field("max_us")?,
            p99: field("p99_us")?,
            mean: field("mean_us")?,
        },
    })
}

/// The computation amounts swept: `overlap`'s.
pub fn computes(quick: bool) -> Vec<f64> {
    if quick {
        Plan::quick().computes_us
    } else {
        Plan::full().computes_us
    }
}

/// The program's arguments for one size.
pub fn args(size: u64, opts: &Options) -> Vec<String> {
    let (budget, warmup) = if opts.quick {
        (QUICK_BUDGET_US, QUICK_WARMUP)
    } else {
        (BUDGET_US, WARMUP)
    };
    let (min, max) = match opts.reps {
        Some(reps) => (reps.max(1), reps.max(1)),
        None => (MIN_ITERATIONS, MAX_ITERATIONS),
    };
    let computes: Vec<String> = computes(opts.quick)
        .iter()
        .map(|c| format!("{c}"))
        .collect();
    vec![
        "./overlap".into(),
        size.to_string(),
        BATCH.to_string(),
        budget.to_string(),
        min.to_string(),
        max.to_string(),
        warmup.to_string(),
        computes.join(","),
    ]
}

/// Writes the source into the job's directory and compiles it there.
fn compile(job: &mut Job) -> Result<(), String> {
    std::fs::write(job.path().join("overlap.c"), SOURCE)
        .map_err(|e| format!("cannot write overlap.c: {e}"))?;
    let command = CommandLine::new("mpicc").args(["-O2", "-o", "overlap", "overlap.c"]);
    let done = process::run_bounded(&command, job.path(), "mpicc", COMPILE_LIMIT)
        .map_err(|e| format!("cannot run mpicc: {e}"))?;
    if done.exit != Exit::Success {
        return Err(super::tail(&format!("{command} failed"), &done.output));
    }
    job.commands
        .push(format!("{command}  # overlap.c is {SOURCE_PATH}"));
    Ok(())
}

/// The computation's rate for every system compared: `./overlap calibrate` run once per
/// process (before any system's first run), then handed to each run (`OVERLAP_UNITS_PER_US`).
/// Each run used to calibrate itself before `MPI_Init`, and the rate moved by a few percent
/// from run to run, more than the systems differ: in one suite run, at 1,600 us of
/// computation, Open MPI on TCP and on nicmsg spent the same share of the iteration computing
/// (0.977) but their availabilities read 1.000 (capped) and 0.970.
fn shared_rate(job: &Job) -> Result<f64, String> {
    if let Some(&rate) = SHARED_RATE.get() {
        return Ok(rate);
    }
    let command = CommandLine::new("./overlap").args(["calibrate"]);
    let done = process::run_bounded(&command, job.path(), "calibrate", CALIBRATE_LIMIT)
        .map_err(|e| format!("cannot run {command}: {e}"))?;
    if done.exit != Exit::Success {
        return Err(super::tail(&format!("{command} failed"), &done.output));
    }
    let rate = parse_calibration(&done.output)
        .ok_or_else(|| super::tail(&format!("{command} printed no rate"), &done.output))?;
    Ok(*SHARED_RATE.get_or_init(|| rate))
}

/// The rate of a `calibration units_per_us=...` line, if there is one with a positive rate.
fn parse_calibration(output: &str) -> Option<f64> {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix("calibration units_per_us="))
        .and_then(|rate| rate.parse::<f64>().ok())
        .filter(|&rate| rate > 0.0 && rate.is_finite())
}

/// Compiles the program, checks the path, then one `mpirun` per size.
pub(super) fn run(
    job: &mut Job,
    sizes: &[u64],
    opts: &Options,
    report: &mut dyn FnMut(Point),
) -> Result<(), String> {
    compile(job)?;
    let check: Vec<String> = ["./overlap", "64", "1", "1000", "1", "1", "0", "0"]
        .map(String::from)
        .to_vec();
    let check = job.check(&check)?;
    job.commands.push(check);
    let rate = shared_rate(job)?;
    let shared = ["-x".to_string(), format!("OVERLAP_UNITS_PER_US={rate:.6}")];
    for &size in sizes {
        let command = job.command(&shared, &args(size, opts));
        job.commands.push(job.record(&command));
        let output = job
            .run(&command, &format!("overlap-{size}"))
            .map_err(|e| format!("size {size}: {e}"))?;
        let lines = parse(&output).map_err(|e| format!("size {size}: {e}"))?;
        if lines.len() != computes(opts.quick).len() {
            return Err(super::tail(
                &format!("size {size}: {} points printed", lines.len()),
                &output,
            ));
        }
        for line in lines {
            report(line.point());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Rank 0's output of `./overlap 10240 5 400000 20 2000 20 0,100,1000` on ob1, with
    /// nicmsg's counters from another run mixed in (as a nicmsg run prints them).
    const OUTPUT: &str = "calibration units_per_us=2022.440702\n\
        point size=10240 batch=5 compute_us=0.000 iterations=2000 loop_us=51916.352 \
        computing_us=49.570 computing_median_us=0.025 median_us=24.767 min_us=12.866 \
        max_us=853.585 p99_us=47.014 mean_us=25.926\n\
        nicmsg stats 127.0.0.1:40123:   peer  frames_tx     bytes_tx\n\
        point size=10240 batch=5 compute_us=100.000 iterations=2000 loop_us=254999.761 \
        computing_us=206374.911 computing_median_us=100.412 median_us=126.943 \
        min_us=108.752 max_us=371.918 p99_us=166.293 mean_us=127.470\n\
        point size=10240 batch=5 compute_us=1000.000 iterations=374 loop_us=387295.100 \
        computing_us=375891.696 computing_median_us=1000.105 median_us=1029.228 \
        min_us=1000.274 max_us=2710.274 p99_us=1087.497 mean_us=1035.509\n";

    #[test]
    fn the_calibration_line_gives_the_shared_rate() {
        assert_eq!(parse_calibration(OUTPUT), Some(2022.440702));
        for output in [
            "",
            "calibration units_per_us=0\n",
            "calibration units_per_us=-3\n",
            "calibration units_per_us=fast\n",
        ] {
            assert_eq!(parse_calibration(output), None, "{output:?}");
        }
    }

    #[test]
    fn parses_every_point_line() {
        let lines = parse(OUTPUT).unwrap();
        assert_eq!(lines.len(), 3);
        let first = lines[0];
        assert_eq!(
            (first.size, first.batch, first.iterations),
            (10240, 5, 2000)
        );
        assert_eq!(first.compute_us, 0.0);
        assert_eq!(first.time.median, 24.767);
        assert_eq!(first.time.p99, 47.014);
        assert_eq!(lines[2].compute_us, 1000.0);
        assert_eq!(parse("calibration units_per_us=1\n").unwrap(), vec![]);
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(parse("point size=8 batch=5\n")
            .unwrap_err()
            .contains("compute_us"));
        let bad = OUTPUT.replace("loop_us=51916.352", "loop_us=nan");
        assert!(parse(&bad).unwrap_err().contains("bad loop_us"));
    }

    #[test]
    fn points_carry_rmpp_availability_and_throughput() {
        let lines = parse(OUTPUT).unwrap();
        let idle = lines[0].point();
        let o = idle.overlap.unwrap();
        // 10 x 10,240 B in the median iteration's 24.767 us.
        assert!(
            (o.throughput_mbytes_per_sec - 4134.53).abs() < 0.01,
            "{o:?}"
        );
        assert_eq!(o.availability, 0.0);
        let busy = lines[2].point();
        let o = busy.overlap.unwrap();
        // 1000 us of work in the median iteration's 1029.228 us; the loop's total (a stall of
        // 2.7 ms included) stays in the mean.
        assert!((o.availability - 0.971602).abs() < 1e-6, "{o:?}");
        assert!((o.cpu_fraction - 0.971704).abs() < 1e-6, "{o:?}");
        assert_eq!(busy.time_us.mean, 1035.509);
        assert!(
            (o.effective_mbytes_per_sec - o.availability * o.throughput_mbytes_per_sec).abs()
                < 1e-9
        );
        // A computation that ran faster than calibrated is not more than available.
        let fast = Line {
            compute_us: 1100.0,
            ..lines[2]
        };
        assert_eq!(fast.point().overlap.unwrap().availability, 1.0);
        assert_eq!(busy.compute_us, Some(1000.0));
        assert_eq!(busy.repetitions, 374);
        assert_eq!(busy.mbytes_per_sec, Some(o.throughput_mbytes_per_sec));
    }

    #[test]
    fn arguments_sweep_overlaps_computations() {
        let opts = Options {
            quick: true,
            reps: None,
            timeout: Duration::from_secs(60),
            mtu: None,
        };
        assert_eq!(
            args(10240, &opts).join(" "),
            "./overlap 10240 5 20000 20 2000 5 0,100,1000"
        );
        let fixed = Options {
            reps: Some(50),
            quick: false,
            ..opts
        };
        let words = args(8, &fixed);
        assert_eq!(&words[4..6], ["50", "50"]);
        assert_eq!(words[7], "0,10,25,50,100,200,400,800,1600,3200");
    }
}

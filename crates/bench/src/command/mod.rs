//! `nicmsg bench`: the papers' measurements for nicmsg and its baselines, one system after the
//! other on the same link, with a live table, `results.json`, plots and (with `--suite papers`)
//! `bench-report.md`. See `docs/benchmarks.md`.
//!
//! This is the program `nicmsg-bench` ([`main_with_args`]). `nicmsg bench ARGS` runs it from the
//! `nicmsg` executable's directory (it replaces itself with `nicmsg-bench ARGS`), so that the
//! launcher links neither the benchmarks nor the plotting library. `nicmsg-bench` runs every
//! series under the launcher's library (`nicmsg_cli::run`), in its own process, and the ranks as
//! `nicmsg-bench bench-worker ...` ([`crate::worker`]).

pub mod args;
mod environment;
mod job;
mod live;
pub mod plan;

use std::ffi::OsString;
use std::fs;
use std::path::Path;

use clap::Parser;
use nicmsg_cli::run::EXIT_LAUNCHER_ERROR;
use nicmsg_cli::signals;

use crate::model::{Outcome, Pattern, Report, Series};
use crate::system::System;
use crate::worker::WorkerArgs;

pub use args::BenchArgs;
use live::Live;
use plan::{series_for, skipped, SeriesPlan};

/// The first argument that makes `nicmsg-bench` one rank of a benchmark job.
pub const WORKER_COMMAND: &str = "bench-worker";

/// Command line of `nicmsg bench` (of `nicmsg-bench`).
#[derive(Debug, Parser)]
#[command(
    name = "nicmsg bench",
    about = "Measure nicmsg beside TCP, raw UDP and installed peers (latency, bandwidth, \
             overhead, overlap, offload), with a live table, JSON, plots and a report"
)]
struct BenchCli {
    #[command(flatten)]
    args: BenchArgs,
}

/// Command line of `nicmsg-bench bench-worker`.
#[derive(Debug, Parser)]
#[command(
    name = "nicmsg-bench bench-worker",
    bin_name = "nicmsg-bench bench-worker",
    about = "One rank of a benchmark job"
)]
struct WorkerCli {
    #[command(flatten)]
    args: WorkerArgs,
}

/// Runs `nicmsg-bench` with `args` (the first is the program name) and returns its exit status.
///
/// `bench-worker ARGS` runs one rank of a benchmark job (started by the benchmark itself);
/// anything else is the command line of `nicmsg bench`, which installs the SIGINT/SIGTERM/SIGHUP
/// handlers of [`nicmsg_cli::signals`] first (Ctrl-C stops the running series and keeps the
/// results measured so far). The command line, as given, is recorded in `results.json`:
/// `nicmsg bench` passes its own as the program name (`target/release/nicmsg bench`).
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|first| first == WORKER_COMMAND) {
        return match WorkerCli::try_parse_from(&args[1..]) {
            Ok(cli) => crate::worker::main(&cli.args),
            Err(e) => {
                let _ = e.print();
                e.exit_code()
            }
        };
    }
    let command_line = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    match BenchCli::try_parse_from(args) {
        Ok(cli) => {
            signals::install();
            bench(&cli.args, command_line)
        }
        Err(e) => {
            let _ = e.print();
            e.exit_code()
        }
    }
}

/// Runs the benchmarks; returns the exit status (0 unless something could not run at all or a
/// nicmsg series failed).
pub fn bench(args: &BenchArgs, command_line: String) -> i32 {
    if args.replot {
        return replot(args);
    }
    if args.loss.is_some() && !args.netns() {
        eprintln!("nicmsg bench: --loss needs --netns (or --link)");
        return EXIT_LAUNCHER_ERROR;
    }
    let plans = match plan_all(args) {
        Ok(plans) => plans,
        Err(error) => {
            eprintln!("nicmsg bench: {error}");
            return EXIT_LAUNCHER_ERROR;
        }
    };
    if let Err(error) = fs::create_dir_all(&args.out) {
        eprintln!(
            "nicmsg bench: cannot create {}: {error}",
            args.out.display()
        );
        return EXIT_LAUNCHER_ERROR;
    }
    let scratch = args.out.join("work");
    let _ = fs::create_dir_all(&scratch);

    let mut report = Report {
        environment: environment(args, command_line),
        series: Vec::new(),
    };
    let live = Live::new(plans.iter().map(|p| planned_points(p, args)).sum());
    let mut nicmsg_failed = false;
    let mut current: Option<Pattern> = None;
    for plan in &plans {
        if current != Some(plan.pattern) {
            live.header(plan.pattern);
            current = Some(plan.pattern);
        }
        let (series, interrupted) = run_one(plan, args, &scratch, &live);
        nicmsg_failed |= is_nicmsg_series(plan) && !matches!(series.outcome, Outcome::Measured);
        live.finish_series(&series, planned_points(plan, args));
        report.series.push(series);
        // Written after every series: an interrupted run keeps what it measured.
        let _ = write_json(&report, &args.out);
        if interrupted || signals::take().is_some() {
            live.print("interrupted; results so far are in results.json".to_owned());
            break;
        }
    }
    live.done();
    let _ = fs::remove_dir_all(&scratch);
    let written = write_json(&report, &args.out).map_err(|e| format!("writing results.json: {e}"));
    match written.and_then(|()| finish(&report, args)) {
        Ok(()) => i32::from(nicmsg_failed),
        Err(error) => {
            eprintln!("nicmsg bench: {error}");
            1
        }
    }
}

/// A series of nicmsg itself, whose failure fails the run: nicmsg's own, and Open MPI on
/// nicmsg's provider when it could run (a missing Open MPI or provider is a skip, not a failure).
fn is_nicmsg_series(plan: &SeriesPlan) -> bool {
    match plan.system {
        System::Nicmsg => true,
        System::Mpi(system) => system.engine().is_some() && plan.skip.is_none(),
        _ => false,
    }
}

fn plan_all(args: &BenchArgs) -> Result<Vec<SeriesPlan>, String> {
    let mut plans = Vec::new();
    for pattern in args.patterns() {
        plans.extend(series_for(pattern, args)?);
    }
    Ok(plans)
}

fn planned_points(plan: &SeriesPlan, args: &BenchArgs) -> u64 {
    let per_size = if matches!(plan.pattern, Pattern::Overlap | Pattern::MpiOverlap) {
        let plan = if args.quick {
            crate::patterns::Plan::quick()
        } else {
            crate::patterns::Plan::full()
        };
        plan.computes_us.len() as u64
    } else if plan.pattern == Pattern::PanicCost {
        crate::panic::cost_points_per_size(args.quick, args.reps) as u64
    } else {
        1
    };
    plan.sizes.len() as u64 * per_size
}

fn run_one(plan: &SeriesPlan, args: &BenchArgs, scratch: &Path, live: &Live) -> (Series, bool) {
    if let Some(outcome) = &plan.skip {
        return (skipped(plan, outcome.clone()), false);
    }
    live.start(plan.pattern, &plan.name);
    let on_point = |point: &crate::model::Point| live.point(plan.pattern, &plan.name, point);
    if let System::Mpi(system) = plan.system {
        // Under mpirun, from this process: Open MPI's launcher places the ranks itself.
        let opts = crate::mpi::Options {
            quick: args.quick,
            reps: args.reps,
            timeout: args.job_timeout(),
            mtu: args.mtu,
        };
        let (mut series, interrupted) =
            crate::mpi::run(system, plan.pattern, &plan.sizes, &opts, &on_point);
        series.label.clone_from(&plan.label);
        return (series, interrupted);
    }
    job::run_series(plan, args, scratch, &on_point)
}

fn environment(args: &BenchArgs, command_line: String) -> crate::model::Environment {
    let mut env = environment::probe(command_line);
    env.link = if args.link.is_some() {
        "netns, 1 Gbit/s (tc tbf)".to_owned()
    } else if args.netns() {
        "netns".to_owned()
    } else {
        "loopback".to_owned()
    };
    env.mtu = args.mtu();
    env.rate_bits_per_sec = args.link.map(|_| 1_000_000_000);
    env.loss_percent = args.loss.map(|l| l.basis_points as f64 / 100.0);
    env.quick = args.quick;
    env
}

/// `--replot`: the files and summary of a finished run, from its results.json.
fn replot(args: &BenchArgs) -> i32 {
    let path = args.out.join("results.json");
    let report = fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str::<Report>(&text).map_err(|e| e.to_string()));
    match report.and_then(|report| finish(&report, args)) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("nicmsg bench --replot: {}: {error}", path.display());
            EXIT_LAUNCHER_ERROR
        }
    }
}

fn write_json(report: &Report, out: &Path) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(report).expect("the report serialises");
    fs::write(out.join("results.json"), text)
}

/// Plots and report from the results (written already, or read by `--replot`); prints the
/// summary, the targets and where the files are.
fn finish(report: &Report, args: &BenchArgs) -> Result<(), String> {
    use crate::{plot, report as markdown};
    let plots = match plot::write_plots(report, &args.out) {
        Ok(plots) => plots,
        // The numbers matter more than the pictures: say why there are none and go on.
        Err(error) => {
            eprintln!("nicmsg bench: no plots: {error}");
            Vec::new()
        }
    };
    let report_file = markdown::write_markdown(report, &plots, &args.out)
        .map_err(|e| format!("writing {}: {e}", markdown::MARKDOWN_FILE))?;
    // The summary ends with the targets (targets::evaluate) judged met, missed or not measured.
    println!("\n{}", markdown::terminal_summary(report));
    println!("\nresults: {}", args.out.join("results.json").display());
    println!("report:  {}", report_file.display());
    println!("plots:   {} files in {}", plots.len(), args.out.display());
    Ok(())
}

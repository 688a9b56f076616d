//! Runs one series as a two-rank job under the launcher (`nicmsg run -n 2 [--netns ...] --
//! nicmsg-bench bench-worker ...`, run in this process through `nicmsg_cli::run`) and follows its
//! progress file while it runs.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nicmsg_cli::run::{self, RunArgs};

use super::args::BenchArgs;
use super::plan::SeriesPlan;
use crate::model::{Outcome, Point, Series};

/// How often the progress file is read while the job runs.
const TAIL_INTERVAL: Duration = Duration::from_millis(100);

/// Runs `plan`; `on_point` sees each point as it is measured. Failures of the job become a
/// series with [`Outcome::Failed`] (and the points measured before). The flag says whether the
/// launcher was interrupted (Ctrl-C, SIGTERM): the whole benchmark should stop then.
pub fn run_series(
    plan: &SeriesPlan,
    args: &BenchArgs,
    scratch: &Path,
    on_point: &(dyn Fn(&Point) + Sync),
) -> (Series, bool) {
    let progress = scratch.join(format!("{}-{:?}.progress", plan.name, plan.pattern));
    let result = scratch.join(format!("{}-{:?}.json", plan.name, plan.pattern));
    let _ = fs::remove_file(&progress);
    let _ = fs::remove_file(&result);
    let run_args = run_args(plan, args, &progress, &result);
    let command = describe(&run_args);

    let stop = Arc::new(AtomicBool::new(false));
    let outcome = thread::scope(|scope| {
        let tail = scope.spawn(|| follow(&progress, &stop, on_point));
        let outcome = run::run(&run_args);
        stop.store(true, Ordering::Release);
        let points = tail.join().unwrap_or_default();
        (outcome, points)
    });
    let (launch, points) = outcome;
    let interrupted = matches!(launch, Ok(run::Outcome::Interrupted(_)));
    let mut series = read_result(&result).unwrap_or_else(|| Series {
        pattern: plan.pattern,
        system: plan.name.clone(),
        label: plan.label.clone(),
        command: String::new(),
        outcome: Outcome::Failed {
            error: match &launch {
                Ok(outcome) => format!("the job ended without a result ({outcome:?})"),
                Err(error) => format!("the job did not start: {error}"),
            },
        },
        points,
    });
    if series.command.is_empty() {
        series.command = command;
    } else {
        series.command = format!("{command}\n  which ran: {}", series.command);
    }
    (series, interrupted)
}

/// The launcher's arguments for this series.
fn run_args(plan: &SeriesPlan, args: &BenchArgs, progress: &Path, result: &Path) -> RunArgs {
    // This program (`nicmsg-bench`) is also the ranks' program.
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("nicmsg-bench"));
    let sizes: Vec<String> = plan.sizes.iter().map(u64::to_string).collect();
    let mut command: Vec<OsString> = vec![
        exe.into(),
        super::WORKER_COMMAND.into(),
        "--pattern".into(),
        plan.pattern.name().into(),
        "--system".into(),
        plan.system.name().into(),
        "--name".into(),
        plan.name.clone().into(),
        "--label".into(),
        plan.label.clone().into(),
        "--sizes".into(),
        sizes.join(",").into(),
        "--mtu".into(),
        args.mtu().to_string().into(),
        "--progress".into(),
        progress.into(),
        "--result".into(),
        result.into(),
    ];
    if args.quick {
        command.push("--quick".into());
    }
    if let Some(reps) = args.reps {
        command.push("--reps".into());
        command.push(reps.to_string().into());
    }
    if let Some(variant) = plan.variant {
        command.push("--variant".into());
        command.push(variant.into());
    }
    for setting in &plan.env {
        command.push("--env".into());
        command.push(setting.into());
    }
    RunArgs {
        ranks: 2,
        netns: args.netns(),
        mtu: (args.netns() || args.mtu.is_some()).then(|| args.mtu()),
        rate: args.link.map(|_| nicmsg_cli::units::Rate {
            bits_per_sec: 1_000_000_000,
        }),
        loss: args.loss,
        timeout: Some(args.job_timeout()),
        job: None,
        engine: plan.engine,
        command,
    }
}

/// The equivalent `nicmsg run` command line, for the record.
fn describe(run_args: &RunArgs) -> String {
    let mut words = vec!["nicmsg run -n 2".to_owned()];
    if run_args.netns {
        words.push("--netns".to_owned());
    }
    if let Some(mtu) = run_args.mtu {
        words.push(format!("--mtu {mtu}"));
    }
    if let Some(rate) = run_args.rate {
        words.push(format!("--rate {}bit", rate.bits_per_sec));
    }
    if let Some(loss) = run_args.loss {
        words.push(format!("--loss {}%", loss.basis_points as f64 / 100.0));
    }
    if let Some(engine) = run_args.engine {
        words.push(format!("--engine {}", super::plan::engine_name(engine)));
    }
    words.push("--".to_owned());
    words.push("nicmsg-bench".to_owned());
    words.extend(
        run_args.command[1..]
            .iter()
            .take_while(|w| *w != "--progress")
            .map(|w| shell_word(&w.to_string_lossy())),
    );
    words.join(" ")
}

fn shell_word(word: &str) -> String {
    if word.is_empty() || word.contains(|c: char| c.is_whitespace() || "()'\"$;&|".contains(c)) {
        format!("'{}'", word.replace('\'', "'\\''"))
    } else {
        word.to_owned()
    }
}

/// Reads new lines of the progress file until `stop`; returns every point seen. The file is
/// opened once (when the worker has created it) and read on from where the last look ended.
fn follow(path: &Path, stop: &AtomicBool, on_point: &(dyn Fn(&Point) + Sync)) -> Vec<Point> {
    let mut points = Vec::new();
    let mut reader: Option<BufReader<fs::File>> = None;
    // A line whose newline has not been written yet stays here until the next look.
    let mut line = String::new();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if reader.is_none() {
            reader = fs::File::open(path).ok().map(BufReader::new);
        }
        if let Some(reader) = reader.as_mut() {
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if !line.ends_with('\n') {
                    break;
                }
                if let Ok(point) = serde_json::from_str::<Point>(line.trim()) {
                    on_point(&point);
                    points.push(point);
                }
                line.clear();
            }
        }
        if stopping {
            return points;
        }
        thread::sleep(TAIL_INTERVAL);
    }
}

fn read_result(path: &Path) -> Option<Series> {
    let text = fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

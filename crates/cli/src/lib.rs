//! # nicmsg launcher
//!
//! The `nicmsg` command, as a library so that tests and other tools can drive it:
//!
//! * `nicmsg run -n N [--netns] [--mtu BYTES] [--rate RATE] [--loss PERCENT] [--timeout SECONDS]
//!   [--engine inline|thread] [--] PROGRAM ARGS...` starts a job of `N` ranks ([`run::run`]);
//! * `nicmsg check`, run as the program of a job, tests bootstrap and connectivity
//!   ([`check::check`]);
//! * `nicmsg bench [PATTERN...] [--suite papers|mpi] ...` runs the benchmarks: the program
//!   `nicmsg-bench` (crate `nicmsg-bench`) from this executable's directory ([`bench`]), so that
//!   the launcher links neither the benchmarks nor the plotting library;
//! * `nicmsg cleanup` removes namespaces left behind by launchers that were killed;
//! * `nicmsg pdl compile FILE [-o OUT]` and `nicmsg pdl disasm MODULE` compile PANIC's PDL
//!   programs and list modules ([`pdl`]; the compiler is crate `nicmsg-pdl`, with no runtime
//!   dependency); `nicmsg pdl load|unload|run|send|list|output --job ID --rank R` act on a
//!   running rank's programs through its engine's control socket ([`pdl_control`]).
//!
//! The environment given to the ranks, the namespace topology and the cleanup guarantees are
//! described in `docs/launcher.md`. Linux only.

pub mod bench;
pub mod check;
pub mod limits;
pub mod netns;
pub mod output;
pub mod pdl;
pub mod pdl_control;
pub mod run;
pub mod signals;
pub mod units;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

pub use run::{run, LaunchError, Outcome, RankStatus, RunArgs};

/// Command line of `nicmsg`.
#[derive(Debug, Parser)]
#[command(
    name = "nicmsg",
    version,
    about = "Launch and check nicmsg jobs, compile engine programs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Start N ranks of PROGRAM on this machine (optionally each in its own network namespace).
    Run(RunArgs),
    /// Test the job environment: address exchange, then UDP to every rank (run it under
    /// `nicmsg run`, mpirun or srun).
    Check(check::CheckArgs),
    /// Measure nicmsg beside TCP, raw UDP and installed peers (latency, bandwidth, overhead,
    /// overlap, offload), with a live table, JSON, plots and a report (`nicmsg bench --help`).
    #[command(disable_help_flag = true)]
    Bench(bench::Forwarded),
    /// One rank of a benchmark job (`nicmsg-bench bench-worker`; the commands recorded in
    /// older reports start ranks this way).
    #[command(hide = true, disable_help_flag = true)]
    BenchWorker(bench::Forwarded),
    /// Remove network namespaces left behind by launchers that no longer run (needs root).
    Cleanup,
    /// PANIC's engine programs: compile PDL into modules, list modules (`nicmsg pdl --help`).
    Pdl(pdl::PdlArgs),
}

/// Runs `nicmsg` with `args` (the first is the program name) and returns its exit status.
///
/// For `run`, installs the SIGINT/SIGTERM/SIGHUP handlers of [`signals`] first. `bench` and
/// `bench-worker` replace this process with `nicmsg-bench` ([`bench::exec`]), passing every
/// argument after the subcommand as it is; they return only when that fails.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // Before clap, so that the benchmark's arguments reach it untouched (`--help`, `--`).
    if let Some(subcommand) = args.get(1).and_then(|a| bench::forwarded(a)) {
        return bench::exec(subcommand, &args[0], &args[2..]);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match cli.command {
        Cmd::Run(args) => {
            signals::install();
            match run::run(&args) {
                Ok(outcome) => outcome.exit_code(),
                Err(e) => {
                    eprintln!("nicmsg run: {e}");
                    run::EXIT_LAUNCHER_ERROR
                }
            }
        }
        Cmd::Check(args) => match check::check(&args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("nicmsg check: {e}");
                1
            }
        },
        Cmd::Bench(forwarded) => bench::exec(bench::Subcommand::Bench, &args[0], &forwarded.args),
        Cmd::BenchWorker(forwarded) => {
            bench::exec(bench::Subcommand::BenchWorker, &args[0], &forwarded.args)
        }
        Cmd::Cleanup => cleanup(),
        Cmd::Pdl(args) => pdl::pdl(&args),
    }
}

fn cleanup() -> i32 {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("nicmsg cleanup: needs root (it deletes network namespaces)");
        return run::EXIT_LAUNCHER_ERROR;
    }
    let Some(ip) = netns::find_tool("ip") else {
        eprintln!("nicmsg cleanup: the `ip` command is not installed (apt-get install iproute2)");
        return run::EXIT_LAUNCHER_ERROR;
    };
    match netns::remove_stale(&ip) {
        Ok(removed) if removed.is_empty() => {
            println!("nothing to clean up");
            0
        }
        Ok(removed) => {
            for ns in removed {
                println!("removed namespace {ns}");
            }
            0
        }
        Err(e) => {
            eprintln!("nicmsg cleanup: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command_of(args: &[&str]) -> Vec<String> {
        match Cli::try_parse_from(args).expect("parses").command {
            Cmd::Run(run) => run
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn the_program_comes_after_dashes_or_as_the_first_word_and_keeps_its_options() {
        let expected = [
            "prog",
            "-x",
            "--size",
            "1M",
            "-n",
            "3",
            "--",
            "--frobnicate",
        ];
        let after_dashes = command_of(&[
            "nicmsg",
            "run",
            "-n",
            "4",
            "--",
            "prog",
            "-x",
            "--size",
            "1M",
            "-n",
            "3",
            "--",
            "--frobnicate",
        ]);
        assert_eq!(after_dashes, expected);
        let first_word = command_of(&[
            "nicmsg",
            "run",
            "-n",
            "4",
            "--timeout",
            "5",
            "prog",
            "-x",
            "--size",
            "1M",
            "-n",
            "3",
            "--",
            "--frobnicate",
        ]);
        assert_eq!(first_word, expected);
    }

    #[test]
    fn an_unknown_option_before_the_program_is_refused() {
        for args in [
            &["nicmsg", "run", "--frobnicate"][..],
            &["nicmsg", "run", "-n", "2", "--frobnicate", "--", "true"],
            &["nicmsg", "run", "-n", "2", "-z", "true"],
        ] {
            let error = Cli::try_parse_from(args).expect_err("refused");
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{args:?}: {error}"
            );
        }
    }
}

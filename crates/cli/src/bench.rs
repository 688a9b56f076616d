//! `nicmsg bench ARGS`: runs the benchmark program, `nicmsg-bench ARGS`, from this executable's
//! directory. The benchmarks (with the whole library stack and the plotting library) are their
//! own program so that the launcher links none of them; `nicmsg bench` stays the way to run them.
//!
//! The launcher replaces itself with the benchmark (`execv`): same process, so the exit status,
//! the signals (Ctrl-C) and the terminal are the benchmark's own, with nothing in between. Its
//! program name is `nicmsg bench` (this program's name and the subcommand), so that the
//! benchmark's usage and the command line it records read as typed.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

use crate::run::EXIT_LAUNCHER_ERROR;

/// The benchmark program's file name.
pub const PROGRAM: &str = "nicmsg-bench";

/// The arguments of a forwarded subcommand, unparsed (the benchmark parses them).
#[derive(Debug, Clone, Args)]
pub struct Forwarded {
    /// The benchmark's patterns and options, passed on as they are (`nicmsg bench --help`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The subcommands that `nicmsg-bench` carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subcommand {
    /// `nicmsg bench ARGS`: `nicmsg-bench ARGS`.
    Bench,
    /// `nicmsg bench-worker ARGS`: `nicmsg-bench bench-worker ARGS`, one rank of a benchmark
    /// job (reports made before the benchmark had its own program record ranks this way).
    BenchWorker,
}

impl Subcommand {
    fn name(self) -> &'static str {
        match self {
            Subcommand::Bench => "bench",
            Subcommand::BenchWorker => "bench-worker",
        }
    }
}

/// The forwarded subcommand `word` names, if any.
pub fn forwarded(word: &OsStr) -> Option<Subcommand> {
    [Subcommand::Bench, Subcommand::BenchWorker]
        .into_iter()
        .find(|s| word == s.name())
}

/// Where the benchmark program should be: beside the running `nicmsg` (symbolic links
/// resolved).
pub fn program_path() -> std::io::Result<PathBuf> {
    Ok(std::env::current_exe()?.with_file_name(PROGRAM))
}

/// Replaces this process with `nicmsg-bench`, given `args` (what followed the subcommand);
/// `argv0` is this program's name as it was started. Returns only on failure, with the status
/// of a launcher error after saying why (and, when the program is missing, how to build it).
pub fn exec(subcommand: Subcommand, argv0: &OsStr, args: &[OsString]) -> i32 {
    let who = format!("nicmsg {}", subcommand.name());
    let program = match program_path() {
        Ok(program) => program,
        Err(error) => {
            eprintln!("{who}: cannot find this program's own path to look for {PROGRAM}: {error}");
            return EXIT_LAUNCHER_ERROR;
        }
    };
    if !program.is_file() {
        eprintln!("{who}: {}", missing(&program));
        return EXIT_LAUNCHER_ERROR;
    }
    let mut command = Command::new(&program);
    match subcommand {
        Subcommand::Bench => {
            let mut name = argv0.to_owned();
            name.push(" bench");
            command.arg0(name);
        }
        Subcommand::BenchWorker => {
            command.arg(subcommand.name());
        }
    }
    let error = command.args(args).exec();
    eprintln!("{who}: cannot run {}: {error}", program.display());
    EXIT_LAUNCHER_ERROR
}

/// What to say when the benchmark program is not beside the launcher.
fn missing(program: &Path) -> String {
    let release = program
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|dir| dir != "debug");
    let build = if release {
        "cargo build --release -p nicmsg-cli -p nicmsg-bench"
    } else {
        "cargo build -p nicmsg-cli -p nicmsg-bench"
    };
    format!(
        "{} is missing: the benchmarks are a program of their own, run from nicmsg's \
         directory. Build it with `{build}` in the source tree (as the README does), or put \
         {PROGRAM} next to nicmsg",
        program.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarded_subcommands() {
        assert_eq!(forwarded(OsStr::new("bench")), Some(Subcommand::Bench));
        assert_eq!(
            forwarded(OsStr::new("bench-worker")),
            Some(Subcommand::BenchWorker)
        );
        assert_eq!(forwarded(OsStr::new("run")), None);
        assert_eq!(forwarded(OsStr::new("benchmark")), None);
    }

    #[test]
    fn the_build_command_matches_the_profile() {
        let release = missing(Path::new("/x/target/release/nicmsg-bench"));
        assert!(release.contains("cargo build --release -p nicmsg-cli -p nicmsg-bench"));
        let debug = missing(Path::new("/x/target/debug/nicmsg-bench"));
        assert!(debug.contains("`cargo build -p nicmsg-cli -p nicmsg-bench`"));
    }
}

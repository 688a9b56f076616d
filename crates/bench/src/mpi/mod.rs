//! MPI: Open MPI 4.1 on nicmsg's libfabric provider against Open MPI on its own TCP transport
//! and on UCX over TCP, measured by the same MPI programs (`nicmsg bench --suite mpi`).
//!
//! | system | Open MPI's path | transport |
//! |---|---|---|
//! | `ompi-ob1-tcp` | `--mca pml ob1 --mca btl tcp,self` | kernel TCP |
//! | `ompi-ucx-tcp` | `--mca pml ucx`, `UCX_TLS=tcp` | UCX's tcp transport |
//! | `ompi-nicmsg-inline` | `--mca pml cm --mca mtl ofi`, provider `nicmsg` | nicmsg, `NICMSG_ENGINE=inline` |
//! | `ompi-nicmsg-thread` | the same | nicmsg, `NICMSG_ENGINE=thread` |
//!
//! Every run is `mpirun -n 2` on this host, started from this process (not under nicmsg's
//! launcher: Open MPI's own launcher places the ranks and exchanges their addresses). The
//! patterns:
//!
//! * `mpi-latency`: `NPopenmpi` ping-pong ([`netpipe`]): half the round trip, and size over
//!   it (NetPIPE's bandwidth), per size;
//! * `mpi-bw`: `NPopenmpi -s`, a one-way stream: one message's share of the stream;
//! * `mpi-overlap`: `tests/mpi/overlap.c` ([`overlap`]), compiled with `mpicc` at run time:
//!   `MPI_Irecv`/`MPI_Isend`, computation, `MPI_Waitall`, swept over the computation, with
//!   RMPP's processor availability.
//!
//! # Each system carries what it claims
//!
//! Before its measurements every series runs one short job with the selection made verbose
//! ([`MpiSystem::check_args`]) and looks for the lines that prove the path
//! ([`MpiSystem::evidence`]): the PML chosen, the BTL or UCX lane used, and for nicmsg the
//! provider's counters printed at exit (`NICMSG_STATS=1`: frames and messages that nicmsg
//! carried). A series whose check fails is recorded as failed with the check's output, never
//! measured on another path by mistake.
//!
//! # Repetitions
//!
//! NetPIPE prints one number per size (the lowest of its 3 trials' mean times), so each size
//! is run [`FULL_RUNS`] times (`--quick`: [`QUICK_RUNS`]), one `mpirun` each, and the point's
//! median, min and max are over those runs (`samples_us` holds them all). The round trips or
//! messages of a run are sized by bytes ([`BYTES_PER_RUN`]) and by time ([`TIME_PER_RUN`],
//! estimated from the runs already made), so a slow system does not stall the sweep.

pub mod netpipe;
pub mod overlap;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nicmsg_cli::run::Engine;

use crate::external::find_on_path;
use crate::external::process::{self, CommandLine, Exit, WorkDir};
use crate::model::{Outcome, Pattern, Point, Series};

/// NetPIPE runs per size (each a separate `mpirun`); the point is their median.
pub const FULL_RUNS: usize = 3;
/// `--quick`: one run per size.
pub const QUICK_RUNS: usize = 1;
/// Payload per direction aimed at per run.
pub const BYTES_PER_RUN: u64 = 128 << 20;
/// `--quick`: payload per direction per run.
pub const QUICK_BYTES_PER_RUN: u64 = 4 << 20;
/// Time aimed at for a run's timed iterations, from the previous runs' times.
pub const TIME_PER_RUN: Duration = Duration::from_millis(400);
/// `--quick`: time per run.
pub const QUICK_TIME_PER_RUN: Duration = Duration::from_millis(50);
/// Fewest iterations (round trips, or messages of a stream) of a run.
pub const MIN_ITERATIONS: u64 = 30;
/// Most round trips of a run.
pub const MAX_PINGPONG_ITERATIONS: u64 = 30_000;
/// Most messages of a stream.
pub const MAX_STREAM_ITERATIONS: u64 = 100_000;
/// Iterations of a run when nothing has been measured yet: few, so that a slow system (the
/// thread engine on two cores takes milliseconds per message) costs seconds, not minutes.
pub const PROBE_ITERATIONS: u64 = 60;
/// Longest time one `mpirun` may take before it is stopped.
pub const RUN_LIMIT: Duration = Duration::from_secs(180);

/// How Open MPI's packages are installed on Debian, for the "not installed" outcome.
pub const INSTALL_MPI: &str = "apt-get install openmpi-bin";
pub const INSTALL_NETPIPE: &str = "apt-get install netpipe-openmpi";
pub const INSTALL_MPICC: &str = "apt-get install libopenmpi-dev";
/// How to build nicmsg's provider so that [`provider_library`] finds it.
pub const BUILD_PROVIDER: &str =
    "cargo build --release -p nicmsg-fabric (libnicmsg_fi.so beside nicmsg-bench)";
/// Overrides where the provider library is looked for.
pub const PROVIDER_ENV: &str = "NICMSG_FI_LIBRARY";
/// The provider's file name as cargo builds it.
pub const PROVIDER_BUILT: &str = "libnicmsg_fi.so";
/// The name libfabric's `FI_PROVIDER_PATH` expects (docs/mpi.md).
pub const PROVIDER_FILE: &str = "libnicmsg-fi.so";
/// How recorded commands name the run's scratch directory (which holds `fi/libnicmsg-fi.so`
/// and the compiled overlap program): recorded commands carry no machine paths.
pub const WORK_PLACEHOLDER: &str = "$WORK";

/// An Open MPI configuration measured by the MPI patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpiSystem {
    /// Open MPI's ob1 PML over its TCP BTL (and `self`), on loopback.
    Ob1Tcp,
    /// Open MPI's UCX PML with UCX restricted to its tcp transport on loopback.
    UcxTcp,
    /// Open MPI's cm PML and ofi MTL on nicmsg's provider, inline engine.
    NicmsgInline,
    /// The same with the engine on its own thread.
    NicmsgThread,
}

impl MpiSystem {
    /// Running order: the baselines first, so that nicmsg's rows can show ratios at once.
    pub const ALL: [MpiSystem; 4] = [
        MpiSystem::Ob1Tcp,
        MpiSystem::UcxTcp,
        MpiSystem::NicmsgInline,
        MpiSystem::NicmsgThread,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MpiSystem::Ob1Tcp => "ompi-ob1-tcp",
            MpiSystem::UcxTcp => "ompi-ucx-tcp",
            MpiSystem::NicmsgInline => "ompi-nicmsg-inline",
            MpiSystem::NicmsgThread => "ompi-nicmsg-thread",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            MpiSystem::Ob1Tcp => "Open MPI, ob1 over TCP",
            MpiSystem::UcxTcp => "Open MPI, UCX over TCP",
            MpiSystem::NicmsgInline => "Open MPI on nicmsg (inline engine)",
            MpiSystem::NicmsgThread => "Open MPI on nicmsg (thread engine)",
        }
    }

    /// nicmsg's engine mode, for the nicmsg systems.
    pub fn engine(self) -> Option<Engine> {
        match self {
            MpiSystem::NicmsgInline => Some(Engine::Inline),
            MpiSystem::NicmsgThread => Some(Engine::Thread),
            _ => None,
        }
    }

    /// `mpirun`'s options that select the system's path (`provider_dir` holds
    /// `libnicmsg-fi.so`).
    pub fn transport_args(self, provider_dir: &str) -> Vec<String> {
        let words: Vec<String> = match self {
            MpiSystem::Ob1Tcp => [
                "--mca",
                "pml",
                "ob1",
                "--mca",
                "btl",
                "tcp,self",
                "--mca",
                "btl_tcp_if_include",
                "lo",
            ]
            .map(String::from)
            .to_vec(),
            // Open MPI 4.1 only takes UCX on InfiniBand devices unless told otherwise.
            MpiSystem::UcxTcp => [
                "--mca",
                "pml",
                "ucx",
                "--mca",
                "pml_ucx_tls",
                "any",
                "--mca",
                "pml_ucx_devices",
                "any",
                "-x",
                "UCX_TLS=tcp",
                "-x",
                "UCX_NET_DEVICES=lo",
            ]
            .map(String::from)
            .to_vec(),
            MpiSystem::NicmsgInline | MpiSystem::NicmsgThread => {
                let mode = match self.engine() {
                    Some(Engine::Thread) => "thread",
                    _ => "inline",
                };
                vec![
                    "-x".into(),
                    format!("FI_PROVIDER_PATH={provider_dir}"),
                    "-x".into(),
                    format!("NICMSG_ENGINE={mode}"),
                    "--mca".into(),
                    "pml".into(),
                    "cm".into(),
                    "--mca".into(),
                    "mtl".into(),
                    "ofi".into(),
                    "--mca".into(),
                    "mtl_ofi_provider_include".into(),
                    "nicmsg".into(),
                ]
            }
        };
        words
    }

    /// Options that make the selection say what it chose (added to the check's job only).
    pub fn check_args(self) -> Vec<String> {
        let words: &[&str] = match self {
            MpiSystem::Ob1Tcp => &[
                "--mca",
                "pml_base_verbose",
                "10",
                "--mca",
                "btl_base_verbose",
                "10",
            ],
            MpiSystem::UcxTcp => &[
                "--mca",
                "pml_base_verbose",
                "10",
                "-x",
                "UCX_LOG_LEVEL=info",
            ],
            MpiSystem::NicmsgInline | MpiSystem::NicmsgThread => &[
                "--mca",
                "pml_base_verbose",
                "10",
                "--mca",
                "mtl_base_verbose",
                "10",
                "-x",
                "NICMSG_STATS=1",
            ],
        };
        words.iter().map(|w| w.to_string()).collect()
    }

    /// What the check's output must show that the path was taken: a text, and on how many
    /// lines (each of the two ranks prints its own).
    pub fn evidence(self) -> &'static [(&'static str, usize)] {
        match self {
            MpiSystem::Ob1Tcp => &[
                ("select: component ob1 selected", 2),
                ("Using tcp btl for send", 2),
            ],
            MpiSystem::UcxTcp => &[("select: component ucx selected", 2), ("tag(tcp/lo)", 2)],
            // The ofi MTL names the provider's domain ("udp"), not the provider; the counters
            // are nicmsg's own, one table per process, each named by its endpoint's address
            // ("nicmsg stats 127.0.0.1:40123:  total ...").
            MpiSystem::NicmsgInline | MpiSystem::NicmsgThread => &[
                ("select: component cm selected", 2),
                ("select: component ofi selected", 2),
                (NICMSG_TOTALS, 2),
            ],
        }
    }

    /// The system called `name`.
    pub fn from_name(name: &str) -> Option<MpiSystem> {
        MpiSystem::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for MpiSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The end of the totals line of nicmsg's counters (`NICMSG_STATS=1`), whatever names the
/// endpoint before it.
const NICMSG_TOTALS: &str = ":  total ";

/// The provider library to load: `$NICMSG_FI_LIBRARY`, else `libnicmsg_fi.so` beside this
/// program (where `cargo build -p nicmsg-fabric` puts it).
pub fn provider_library() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(PROVIDER_ENV) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let exe = std::env::current_exe().ok()?;
    let built = exe.parent()?.join(PROVIDER_BUILT);
    built.is_file().then_some(built)
}

/// Why `system` cannot run `pattern` here (a program or the provider is missing), if so.
pub fn skip(system: MpiSystem, pattern: Pattern) -> Option<Outcome> {
    let installed = |program: &str| find_on_path(program).is_some();
    skip_with(system, pattern, installed, provider_library().is_some())
}

/// [`skip`] with what is installed given.
fn skip_with(
    system: MpiSystem,
    pattern: Pattern,
    installed: impl Fn(&str) -> bool,
    provider_built: bool,
) -> Option<Outcome> {
    let mut missing = Vec::new();
    if !installed("mpirun") {
        missing.push(format!("mpirun: {INSTALL_MPI}"));
    }
    match pattern {
        Pattern::MpiOverlap if !installed("mpicc") => {
            missing.push(format!("mpicc: {INSTALL_MPICC}"));
        }
        Pattern::MpiLatency | Pattern::MpiBw if !installed(netpipe::PROGRAM) => {
            missing.push(format!("{}: {INSTALL_NETPIPE}", netpipe::PROGRAM));
        }
        _ => {}
    }
    if system.engine().is_some() && !provider_built {
        missing.push(format!(
            "nicmsg's provider {PROVIDER_BUILT} (or ${PROVIDER_ENV}): {BUILD_PROVIDER}"
        ));
    }
    (!missing.is_empty()).then(|| Outcome::NotInstalled {
        install: missing.join("; "),
    })
}

/// How a series is run.
#[derive(Debug, Clone)]
pub struct Options {
    pub quick: bool,
    /// Iterations of every run, instead of sizing them by bytes and time (`--reps`).
    pub reps: Option<u64>,
    /// Limit for the whole series.
    pub timeout: Duration,
    /// nicmsg's frame size (`--mtu`, as `NICMSG_MTU`); without it, the provider's default
    /// (loopback's MTU on a loopback address).
    pub mtu: Option<u32>,
}

impl Options {
    fn runs(&self) -> usize {
        if self.quick {
            QUICK_RUNS
        } else {
            FULL_RUNS
        }
    }
}

/// A series' scratch directory, the provider in it, and its `mpirun` invocations.
struct Job {
    system: MpiSystem,
    dir: WorkDir,
    deadline: Instant,
    /// Every command run, as recorded (the scratch directory as [`WORK_PLACEHOLDER`]).
    commands: Vec<String>,
    /// A signal (Ctrl-C) arrived: nothing more is started.
    interrupted: bool,
    /// `NICMSG_MTU` for nicmsg's systems.
    mtu: Option<u32>,
}

impl Job {
    fn new(system: MpiSystem, opts: &Options) -> Result<Job, String> {
        let dir = WorkDir::create(&format!("mpi-{}", system.name()))
            .map_err(|e| format!("cannot create a scratch directory: {e}"))?;
        if system.engine().is_some() {
            let library = provider_library().ok_or_else(|| format!("{BUILD_PROVIDER} first"))?;
            let fi = dir.path().join("fi");
            std::fs::create_dir_all(&fi)
                .and_then(|()| std::fs::copy(&library, fi.join(PROVIDER_FILE)))
                .map_err(|e| format!("cannot copy {}: {e}", library.display()))?;
        }
        Ok(Job {
            system,
            dir,
            deadline: Instant::now() + opts.timeout,
            commands: Vec::new(),
            interrupted: false,
            mtu: opts.mtu,
        })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `mpirun -n 2` of `program` on this system, with `extra` options before the program.
    fn command(&self, extra: &[String], program: &[String]) -> CommandLine {
        let provider_dir = self.path().join("fi");
        let mut args: Vec<String> = Vec::new();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            args.push("--allow-run-as-root".into());
        }
        args.extend(["--oversubscribe", "-n", "2"].map(String::from));
        args.extend(self.system.transport_args(&provider_dir.to_string_lossy()));
        if let Some(mtu) = self.mtu.filter(|_| self.system.engine().is_some()) {
            args.extend(["-x".to_string(), format!("NICMSG_MTU={mtu}")]);
        }
        args.extend(extra.iter().cloned());
        args.extend(program.iter().cloned());
        CommandLine::new("mpirun").args(args)
    }

    /// The command as recorded: no machine paths.
    fn record(&self, command: &CommandLine) -> String {
        command
            .to_string()
            .replace(&*self.path().to_string_lossy(), WORK_PLACEHOLDER)
    }

    /// Runs `command` in the scratch directory within the series' time; its output on success.
    fn run(&mut self, command: &CommandLine, log: &str) -> Result<String, String> {
        self.interrupted |= nicmsg_cli::signals::take().is_some();
        if self.interrupted {
            return Err("interrupted".into());
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("the series' time limit (--job-timeout) has passed".into());
        }
        let done = process::run_bounded(command, self.path(), log, left.min(RUN_LIMIT))
            .map_err(|e| format!("cannot run mpirun: {e}"))?;
        self.interrupted |= nicmsg_cli::signals::take().is_some();
        if self.interrupted {
            return Err("interrupted".into());
        }
        match done.exit {
            Exit::Success => Ok(done.output),
            Exit::TimedOut => Err(tail(
                &format!("stopped after {:?}", left.min(RUN_LIMIT)),
                &done.output,
            )),
            Exit::Failed(how) => Err(tail(&format!("mpirun ended with {how}"), &done.output)),
        }
    }

    /// The path check: a short run of `program` with the selection verbose; the evidence found.
    fn check(&mut self, program: &[String]) -> Result<String, String> {
        let command = self.command(&self.system.check_args(), program);
        let recorded = self.record(&command);
        let output = self.run(&command, "check")?;
        let missing: Vec<String> = self
            .system
            .evidence()
            .iter()
            .filter(|(text, lines)| output.lines().filter(|l| l.contains(text)).count() < *lines)
            .map(|(text, lines)| format!("{text:?} on {lines} lines"))
            .collect();
        if !missing.is_empty() {
            return Err(tail(
                &format!(
                    "the path check ({recorded}) did not show {}",
                    missing.join(", ")
                ),
                &output,
            ));
        }
        Ok(format!(
            "path check: {recorded}\n  showed: {}",
            evidence_lines(&output, self.system.evidence()).join(" | ")
        ))
    }
}

/// The first line of `output` holding each text of `evidence`, without the `[host:pid]` and
/// `[time]` prefixes Open MPI and UCX put before their lines.
fn evidence_lines(output: &str, evidence: &[(&str, usize)]) -> Vec<String> {
    evidence
        .iter()
        .filter_map(|(needle, _)| {
            let mut line = output.lines().find(|l| l.contains(needle))?.trim();
            while let Some((_, rest)) = line.strip_prefix('[').and_then(|r| r.split_once(']')) {
                if !rest.contains(needle) {
                    break;
                }
                line = rest.trim_start();
            }
            Some(line.chars().take(160).collect())
        })
        .collect()
}

/// `what` and the last lines of `output`.
fn tail(what: &str, output: &str) -> String {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
    if tail.is_empty() {
        what.to_string()
    } else {
        format!("{what}; output:\n{tail}")
    }
}

/// Runs `pattern` on `system` for `sizes`; `on_point` sees each point as it is measured.
/// Returns the series and whether a signal (Ctrl-C) stopped it.
pub fn run(
    system: MpiSystem,
    pattern: Pattern,
    sizes: &[u64],
    opts: &Options,
    on_point: &dyn Fn(&Point),
) -> (Series, bool) {
    let mut series = Series {
        pattern,
        system: system.name().to_string(),
        label: system.label().to_string(),
        command: String::new(),
        outcome: Outcome::Measured,
        points: Vec::new(),
    };
    if let Some(outcome) = skip(system, pattern) {
        series.outcome = outcome;
        return (series, false);
    }
    let mut job = match Job::new(system, opts) {
        Ok(job) => job,
        Err(error) => {
            series.outcome = Outcome::Failed { error };
            return (series, false);
        }
    };
    let mut report = |point: Point| {
        on_point(&point);
        series.points.push(point);
    };
    let result = match pattern {
        Pattern::MpiOverlap => overlap::run(&mut job, sizes, opts, &mut report),
        _ => netpipe::run(&mut job, pattern, sizes, opts, &mut report),
    };
    let interrupted = job.interrupted || nicmsg_cli::signals::take().is_some();
    series.command = job.commands.join("\n");
    if let Err(error) = result {
        series.outcome = Outcome::Failed { error };
    }
    (series, interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of the path checks' verbose output, as Open MPI and UCX print them.
    const CHECK_OUTPUT: &str = "\
[vm:23226] select: component ob1 selected
[vm:23226] mca: bml: Using tcp btl for send to [[13903,1],1] on node vm
[1795674376.681639] [vm:23057:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(tcp/lo)
nicmsg stats 127.0.0.1:40123:  total        144        12304
";

    #[test]
    fn evidence_is_quoted_without_prefixes() {
        let lines = evidence_lines(
            CHECK_OUTPUT,
            &[
                ("select: component ob1 selected", 1),
                ("Using tcp btl for send", 1),
                ("tag(tcp/lo)", 1),
                (NICMSG_TOTALS, 1),
                ("not there", 1),
            ],
        );
        assert_eq!(
            lines,
            [
                "select: component ob1 selected",
                "mca: bml: Using tcp btl for send to [[13903,1],1] on node vm",
                "ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(tcp/lo)",
                "nicmsg stats 127.0.0.1:40123:  total        144        12304",
            ]
        );
    }

    #[test]
    fn names_round_trip_and_only_nicmsg_has_an_engine() {
        for system in MpiSystem::ALL {
            assert_eq!(MpiSystem::from_name(system.name()), Some(system));
            assert_eq!(system.engine().is_some(), system.name().contains("nicmsg"));
            assert!(!system.evidence().is_empty());
        }
        let args = MpiSystem::NicmsgThread.transport_args("DIR").join(" ");
        assert!(args.starts_with("-x FI_PROVIDER_PATH=DIR -x NICMSG_ENGINE=thread --mca pml cm"));
        assert!(MpiSystem::UcxTcp
            .transport_args("")
            .contains(&"UCX_TLS=tcp".to_string()));
    }

    #[test]
    fn what_is_missing_is_a_skip_that_says_how_to_get_it() {
        let all = |_: &str| true;
        assert_eq!(
            skip_with(MpiSystem::NicmsgInline, Pattern::MpiBw, all, true),
            None
        );
        let no_provider = skip_with(MpiSystem::NicmsgInline, Pattern::MpiLatency, all, false);
        assert_eq!(
            no_provider,
            Some(Outcome::NotInstalled {
                install: format!(
                    "nicmsg's provider {PROVIDER_BUILT} (or ${PROVIDER_ENV}): {BUILD_PROVIDER}"
                )
            })
        );
        // Open MPI's own transports need no provider.
        assert_eq!(
            skip_with(MpiSystem::Ob1Tcp, Pattern::MpiLatency, all, false),
            None
        );
        let no_mpicc = |program: &str| program != "mpicc";
        let Some(Outcome::NotInstalled { install }) =
            skip_with(MpiSystem::UcxTcp, Pattern::MpiOverlap, no_mpicc, true)
        else {
            panic!("mpicc is missing");
        };
        assert_eq!(install, format!("mpicc: {INSTALL_MPICC}"));
        assert_eq!(
            skip_with(MpiSystem::UcxTcp, Pattern::MpiBw, no_mpicc, true),
            None
        );
        let nothing = |_: &str| false;
        let Some(Outcome::NotInstalled { install }) =
            skip_with(MpiSystem::Ob1Tcp, Pattern::MpiLatency, nothing, true)
        else {
            panic!("nothing is installed");
        };
        assert_eq!(
            install,
            format!("mpirun: {INSTALL_MPI}; NPopenmpi: {INSTALL_NETPIPE}")
        );
    }
}

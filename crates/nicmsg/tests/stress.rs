//! The MPI-semantics stress test of the C ABI (`examples/c/stress.c`) at small scale.
//!
//! Each phase of the program is a test of its own (`phase::credits`, ...), run on 4 and 8 ranks
//! over loopback (UDP) in both engine modes, so a failure names the phase and the
//! configurations it fails in. All phases together also run in one job over network
//! namespaces with 5% packet loss, on AF_XDP (the default there) and on UDP (root, `ip` and
//! `nft` needed; skipped, saying why, otherwise). A hang fails: the program's watchdog stops a
//! phase that makes no progress (saying where each rank was), the launcher's `--timeout` the
//! job. The full scale is `scripts/stress.sh`.
//!
//! One phase alone, with its output: `cargo test -p nicmsg --test stress phase::credits --
//! --nocapture`.

mod common;

use common::{compile_c, launcher, netns_available};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// The program's phases, in its order (`stress --help` lists them; a test checks the two agree).
const PHASES: [&str; 14] = [
    "sizes",
    "mixed",
    "wildcard",
    "barrier",
    "credits",
    "creditbarrier",
    "probe",
    "probeany",
    "cancel_recv",
    "cancel_send",
    "cancel_rndv",
    "truncate",
    "waitany",
    "compute",
];

/// The small scale: well under a second per phase on 2 cores, up to a few seconds for the
/// computation. `--keep-going` reports every kind of failure of a phase, not just the first;
/// the program's watchdog (`--timeout`, per phase) is far above what a phase takes.
const SMALL_SCALE: [&str; 9] = [
    "--rounds",
    "20",
    "--max-size",
    "256K",
    "--compute-seconds",
    "3",
    "--timeout",
    "15",
    "--keep-going",
];

/// The peer timeout of the `compute` phase's jobs, in seconds: the smallest the library takes,
/// a third of the computation.
const COMPUTE_PEER_TIMEOUT_S: &str = "1";

/// Where a job runs.
struct Config {
    ranks: u32,
    /// `--engine`; None: the launcher's choice.
    engine: Option<&'static str>,
    /// One network namespace per rank, 5% of received packets dropped.
    netns: bool,
    /// `NICMSG_TRANSPORT`; None: the library's choice (AF_XDP in namespaces).
    transport: Option<&'static str>,
}

impl Config {
    const fn loopback(ranks: u32, engine: &'static str) -> Self {
        Self {
            ranks,
            engine: Some(engine),
            netns: false,
            transport: None,
        }
    }

    fn name(&self) -> String {
        let mut name = format!("{} ranks", self.ranks);
        if let Some(engine) = self.engine {
            name += &format!(", {engine}");
        }
        name += if self.netns {
            ", netns 5% loss"
        } else {
            ", loopback"
        };
        if let Some(transport) = self.transport {
            name += &format!(", {transport}");
        }
        name
    }
}

const LOOPBACK: [Config; 4] = [
    Config::loopback(4, "inline"),
    Config::loopback(4, "thread"),
    Config::loopback(8, "inline"),
    Config::loopback(8, "thread"),
];

/// The stress program, compiled once per test process.
fn stress_program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| compile_c("examples/c/stress.c", "c-stress"))
}

/// One job's result, with everything the ranks and the launcher printed.
struct Outcome {
    what: String,
    passed: bool,
    seconds: f64,
    output: String,
}

/// Runs the stress program at small scale in `config`: the given phases (None: all), with the
/// launcher stopping the job after `job_timeout` seconds.
fn run(config: &Config, phases: Option<&str>, job_timeout: u32) -> Outcome {
    let mut command = Command::new(launcher());
    command.args(["run", "-n", &config.ranks.to_string()]);
    command.args(["--timeout", &job_timeout.to_string()]);
    if let Some(engine) = config.engine {
        command.args(["--engine", engine]);
    }
    if config.netns {
        command.args(["--netns", "--loss", "5%"]);
        // The counters at exit say which transport each rank used.
        command.env("NICMSG_STATS", "1");
    }
    if let Some(transport) = config.transport {
        command.env("NICMSG_TRANSPORT", transport);
    }
    if phases == Some("compute") {
        // Far below the computation (`--compute-seconds`): a rank whose engine stopped
        // answering while its application computes would be declared dead, as before the
        // inline engine had its standby thread.
        command.env("NICMSG_PEER_TIMEOUT", COMPUTE_PEER_TIMEOUT_S);
    }
    command.arg("--").arg(stress_program()).args(SMALL_SCALE);
    if let Some(phases) = phases {
        command.args(["--phases", phases]);
    }
    let started = Instant::now();
    let output = command.output().expect("run the launcher");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    Outcome {
        what: format!("{} ({})", phases.unwrap_or("all phases"), config.name()),
        passed: output.status.success() && stdout.contains("stress: passed"),
        seconds: started.elapsed().as_secs_f64(),
        output: format!("exit: {}\n{stdout}{stderr}", output.status),
    }
}

/// Fails with the output of every job that failed.
fn assert_all_passed(outcomes: &[Outcome]) {
    for outcome in outcomes {
        let verdict = if outcome.passed { "passed" } else { "FAILED" };
        eprintln!("{}: {verdict} in {:.1} s", outcome.what, outcome.seconds);
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed).collect();
    let report: String = failed
        .iter()
        .map(|o| format!("\n===== {} =====\n{}", o.what, o.output))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} stress jobs failed: {}{report}",
        failed.len(),
        outcomes.len(),
        failed
            .iter()
            .map(|o| o.what.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    );
}

/// Runs one phase in every loopback configuration (all of them, also after a failure: which
/// configurations fail tells what is wrong, e.g. only the inline engine).
fn check_phase(phase: &str) {
    let outcomes: Vec<Outcome> = LOOPBACK
        .iter()
        .map(|config| run(config, Some(phase), 60))
        .collect();
    assert_all_passed(&outcomes);
}

mod phase {
    use super::check_phase;

    macro_rules! phase_tests {
        ($($phase:ident),* $(,)?) => {
            $(
                #[test]
                fn $phase() {
                    check_phase(stringify!($phase));
                }
            )*
        };
    }

    phase_tests!(
        sizes,
        mixed,
        wildcard,
        barrier,
        credits,
        creditbarrier,
        probe,
        probeany,
        cancel_recv,
        cancel_send,
        cancel_rndv,
        truncate,
        waitany,
        compute,
    );
}

#[test]
fn every_phase_of_the_program_has_a_test() {
    let help = Command::new(stress_program())
        .arg("--help")
        .output()
        .expect("run stress --help");
    let text = String::from_utf8_lossy(&help.stdout);
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("phases:"))
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(listed, PHASES, "stress --help lists other phases:\n{text}");
}

/// All phases in one job over namespaces with 5% loss.
fn all_phases_over_namespaces(transport: Option<&'static str>) {
    if let Some(reason) = netns_available() {
        eprintln!("skipped: {reason}");
        return;
    }
    let config = Config {
        ranks: 4,
        engine: None,
        netns: true,
        transport,
    };
    let outcome = run(&config, None, 600);
    let used = outcome.output.matches("transport xdp on eth0").count();
    let expected = if transport == Some("udp") { 0 } else { 4 };
    assert_all_passed(&[outcome]);
    assert_eq!(
        used, expected,
        "ranks on AF_XDP: {used}, expected {expected}"
    );
}

#[test]
fn all_phases_over_namespaces_with_loss_on_af_xdp() {
    all_phases_over_namespaces(None);
}

#[test]
fn all_phases_over_namespaces_with_loss_on_udp() {
    all_phases_over_namespaces(Some("udp"));
}

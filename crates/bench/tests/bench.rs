//! `nicmsg bench --quick`: every pattern and every baseline runs and writes its files. These
//! are smoke tests, not benchmarks: the numbers of a quick run are not looked at.
//!
//! They run the benchmark as the README does, `nicmsg bench ...`: the launcher (built here from
//! the nicmsg-cli package) beside this package's `nicmsg-bench`, which it runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nicmsg_bench::model::{Outcome, Pattern, Report};

const NICMSG_BENCH: &str = env!("CARGO_BIN_EXE_nicmsg-bench");

/// The `nicmsg` launcher beside `nicmsg-bench`, built (once per test process) in the profile of
/// this test run.
fn nicmsg() -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    let dir = Path::new(NICMSG_BENCH).parent().expect("target/<profile>");
    BUILD.call_once(|| {
        let mut command = Command::new(env!("CARGO"));
        command.args(["build", "-q", "-p", "nicmsg-cli", "--bin", "nicmsg"]);
        if dir.ends_with("release") {
            command.arg("--release");
        }
        let status = command.status().expect("run cargo build");
        assert!(status.success(), "building the launcher failed");
    });
    let launcher = dir.join("nicmsg");
    assert!(
        launcher.exists(),
        "{} missing after the build",
        launcher.display()
    );
    launcher
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nicmsg-bench-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn bench(args: &[&str], out: &Path) -> Report {
    let nicmsg = nicmsg();
    let output = Command::new(&nicmsg)
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run nicmsg bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "nicmsg bench {args:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let report = read_report(out);
    // The command line as typed, though `nicmsg-bench` recorded it.
    let typed = format!("{} bench {}", nicmsg.display(), args.join(" "));
    assert!(
        report.environment.command.starts_with(&typed),
        "{:?} does not start with {typed:?}",
        report.environment.command
    );
    report
}

fn read_report(out: &Path) -> Report {
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    serde_json::from_str(&text).expect("results.json is a report")
}

/// Every series of the in-project systems measured something; external peers either ran or
/// say why not. An external peer may also fail on its own (libfabric's `udp;ofi_rxd` once hung
/// at 1 MiB until the bench killed it): the run reports its error and goes on, and that is
/// what this checks of it; the test is about nicmsg's series. So may raw UDP, the unreliable
/// floor: one datagram the kernel drops ends its run (a veth's backlog overflowed once with
/// the machine's two cores busy with three tests and more).
fn check_series(report: &Report) {
    for series in &report.series {
        // The AF_XDP floor needs the namespaces' veth, which the quick suite does not make.
        let external = [
            "netpipe",
            "fi-udp-rxd",
            "fi-tcp-rxm",
            "ucx-tcp",
            "xdp-floor",
            "udp-busy",
            "udp-frag",
        ]
        .contains(&series.system.as_str());
        match &series.outcome {
            Outcome::Measured => assert!(
                !series.points.is_empty(),
                "{} {:?}: measured but no points",
                series.system,
                series.pattern
            ),
            Outcome::NotInstalled { install } if external => assert!(!install.is_empty()),
            Outcome::Unsupported { reason } if external => assert!(!reason.is_empty()),
            Outcome::Failed { error } if external => {
                assert!(
                    !error.is_empty(),
                    "{}: failed without saying why",
                    series.system
                );
                eprintln!("{} {:?} failed: {error}", series.system, series.pattern);
            }
            other => panic!("{} {:?}: {other:?}", series.system, series.pattern),
        }
        assert!(!series.command.is_empty() || !matches!(series.outcome, Outcome::Measured));
    }
}

#[test]
fn papers_suite_quick_runs_every_pattern_and_writes_every_file() {
    let out = out_dir("papers");
    let report = bench(&["--suite", "papers", "--quick"], &out);
    check_series(&report);
    let patterns = [
        Pattern::Latency,
        Pattern::Bw,
        Pattern::Bibw,
        Pattern::Msgrate,
        Pattern::Overhead,
        Pattern::Overlap,
        Pattern::Offload,
    ];
    for pattern in patterns {
        for system in ["nicmsg-inline", "nicmsg-thread"] {
            assert!(
                report
                    .series
                    .iter()
                    .any(|s| s.pattern == pattern && s.system == system),
                "{system} missing from {pattern:?}"
            );
        }
    }
    for pattern in &patterns[..6] {
        for system in ["udp-busy", "tcp-busy", "tcp-blocking"] {
            assert!(
                report
                    .series
                    .iter()
                    .any(|s| s.pattern == *pattern && s.system == system),
                "{system} missing from {pattern:?}"
            );
        }
    }
    // LM's figure 4: standard UDP, the LM socket and nicmsg's default path, with the looper's
    // CPU figures; the LM socket counts what it copied.
    for system in ["udp-frag", "nicmsg-lm", "nicmsg-inline", "nicmsg-thread"] {
        let series = report
            .series
            .iter()
            .find(|s| s.pattern == Pattern::Lm && s.system == system)
            .unwrap_or_else(|| panic!("{system} missing from Lm"));
        assert!(
            series.points.iter().all(|p| p.cpu.is_some()),
            "{system}: every lm point has the looper's CPU figures"
        );
        if system == "nicmsg-lm" {
            assert!(series.points.iter().all(|p| p.copies.is_some()));
        }
    }
    // PANIC's patterns: every mechanism in both engine modes, the engine's handling once.
    let panic = [
        (Pattern::PanicRtt, "nicmsg-inline-mcp2mcp"),
        (Pattern::PanicRtt, "nicmsg-thread-getdeliver"),
        (Pattern::PanicRtt, "nicmsg-thread-app2app"),
        (Pattern::PanicRtt, "nicmsg-inline-api"),
        (Pattern::PanicCost, "nicmsg-engine-handling"),
        (Pattern::PanicCollectives, "nicmsg-thread-engine-allreduce"),
        (Pattern::PanicCollectives, "nicmsg-inline-host-barrier"),
        (Pattern::PanicKv, "nicmsg-inline-engine"),
        (Pattern::PanicKv, "nicmsg-thread-host"),
    ];
    for (pattern, system) in panic {
        assert!(
            report
                .series
                .iter()
                .any(|s| s.pattern == pattern && s.system == system),
            "{system} missing from {pattern:?}"
        );
    }
    assert!(report.environment.quick);
    assert!(!report.environment.kernel.is_empty());
    for file in [
        "bench-report.md",
        "latency.png",
        "latency.svg",
        "bw.png",
        "bw.svg",
        "panic-rtt.png",
        "panic-cost.png",
        "panic-collectives.png",
        "panic-kv.png",
    ] {
        let path = out.join(file);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{} missing or empty", path.display());
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Builds nicmsg's libfabric provider in this test run's profile, so that `libnicmsg_fi.so`
/// lies beside `nicmsg-bench`, where the MPI patterns look for it.
fn build_provider() {
    let dir = Path::new(NICMSG_BENCH).parent().expect("target/<profile>");
    let mut command = Command::new(env!("CARGO"));
    command.args(["build", "-q", "-p", "nicmsg-fabric"]);
    if dir.ends_with("release") {
        command.arg("--release");
    }
    let status = command.status().expect("run cargo build");
    assert!(status.success(), "building the provider failed");
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[test]
fn mpi_suite_quick_runs_open_mpi_on_nicmsg_and_on_its_baselines() {
    let missing: Vec<&str> = ["mpirun", "mpicc", "NPopenmpi"]
        .into_iter()
        .filter(|program| !on_path(program))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "skipped: {} not installed (apt-get install openmpi-bin libopenmpi-dev \
             netpipe-openmpi)",
            missing.join(", ")
        );
        return;
    }
    build_provider();
    let out = out_dir("mpi");
    let report = bench(&["--suite", "mpi", "--quick"], &out);
    for &pattern in Pattern::MPI {
        for system in [
            "ompi-ob1-tcp",
            "ompi-ucx-tcp",
            "ompi-nicmsg-inline",
            "ompi-nicmsg-thread",
        ] {
            let series = report
                .series
                .iter()
                .find(|s| s.pattern == pattern && s.system == system)
                .unwrap_or_else(|| panic!("{system} missing from {pattern:?}"));
            assert_eq!(
                series.outcome,
                Outcome::Measured,
                "{system} {pattern:?}: {:?}",
                series.outcome
            );
            assert!(!series.points.is_empty(), "{system} {pattern:?}: no points");
            // Each series proved its path before measuring, and records no machine paths.
            assert!(
                series.command.contains("path check: mpirun"),
                "{}",
                series.command
            );
            assert!(!series.command.contains("/tmp/"), "{}", series.command);
        }
    }
    let overlap = report
        .series
        .iter()
        .find(|s| s.pattern == Pattern::MpiOverlap && s.system == "ompi-nicmsg-inline")
        .expect("overlap measured");
    assert!(overlap.points.iter().all(|p| p.overlap.is_some()));
    let text = std::fs::read_to_string(out.join("bench-report.md")).expect("report written");
    assert!(
        text.contains("| MPI 8 B latency vs ompi-ob1-tcp |"),
        "{text}"
    );
    assert!(!text.contains("8 B latency vs udp-busy"), "{text}");
    for file in [
        "mpi-latency.png",
        "mpi-bw.svg",
        "mpi-overlap-availability.png",
    ] {
        let len = std::fs::metadata(out.join(file))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 0, "{file} missing or empty");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn latency_over_namespaces_with_in_project_baselines() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: --netns needs root");
        return;
    }
    let out = out_dir("netns");
    let report = bench(
        &[
            "latency",
            "--quick",
            "--netns",
            "--baselines",
            "udp-busy,tcp-busy",
            "--sizes",
            "8,4K,256K",
        ],
        &out,
    );
    check_series(&report);
    assert_eq!(report.environment.link, "netns");
    let nicmsg = report
        .series
        .iter()
        .find(|s| s.system == "nicmsg-inline")
        .expect("nicmsg-inline measured");
    let sizes: Vec<u64> = nicmsg.points.iter().map(|p| p.size).collect();
    assert_eq!(sizes, vec![8, 4096, 256 << 10]);
    assert!(nicmsg
        .points
        .iter()
        .all(|p| p.time_us.median > 0.0 && p.repetitions > 0));
    let _ = std::fs::remove_dir_all(&out);
}

/// Both ways to start the benchmark: `nicmsg bench ARGS` and `nicmsg-bench ARGS`, with the
/// usage line each one prints.
fn both_programs() -> [(Command, &'static str); 2] {
    let mut through_launcher = Command::new(nicmsg());
    through_launcher.arg("bench");
    [
        (
            through_launcher,
            "Usage: nicmsg bench [OPTIONS] [PATTERN]...",
        ),
        (
            Command::new(NICMSG_BENCH),
            "Usage: nicmsg-bench [OPTIONS] [PATTERN]...",
        ),
    ]
}

#[test]
fn bad_arguments_are_refused_with_a_clear_message() {
    for (mut command, _) in both_programs() {
        let output = command
            .args(["latency", "--baselines", "mpich"])
            .output()
            .expect("run nicmsg bench");
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.starts_with("nicmsg bench: unknown system \"mpich\""),
            "{stderr}"
        );
    }
    for (mut command, _) in both_programs() {
        let output = command.args(["--sizes", "x"]).output().expect("run");
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("invalid value 'x' for '--sizes <LIST>'"),
            "{stderr}"
        );
    }
    for (mut command, usage) in both_programs() {
        let output = command.arg("--help").output().expect("run");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(usage),
            "{stdout}"
        );
        assert!(stdout.contains("--suite <SUITE>"), "{stdout}");
    }
}

#[test]
fn ctrl_c_stops_the_running_series_and_keeps_the_results() {
    let out = out_dir("interrupt");
    // A series that would run for hours.
    let mut child = Command::new(nicmsg())
        .args(["bench", "latency", "--sizes", "8", "--reps", "1000000000"])
        .args(["--baselines", "none", "--engines", "inline", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nicmsg bench");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = String::new();
    while !seen.contains("== Latency ==") {
        assert!(stdout.read_line(&mut seen).expect("read") > 0, "{seen}");
    }
    // The ranks are running once their progress file exists.
    let progress = out.join("work").join("nicmsg-inline-Latency.progress");
    let start = Instant::now();
    while !progress.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no progress file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill has no memory preconditions; the pid is our child's, not yet waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let interrupted = Instant::now();
    let status = child.wait().expect("wait");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
    seen.push_str(&rest);
    assert!(interrupted.elapsed() < Duration::from_secs(20));
    // As before the benchmark had its own program: the unfinished nicmsg series failed.
    assert_eq!(status.code(), Some(1), "{seen}");
    assert!(
        seen.contains("interrupted; results so far are in results.json"),
        "{seen}"
    );
    let report = read_report(&out);
    assert_eq!(report.series.len(), 1);
    assert!(matches!(report.series[0].outcome, Outcome::Failed { .. }));
    let _ = std::fs::remove_dir_all(&out);
}

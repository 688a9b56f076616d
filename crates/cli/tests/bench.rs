//! `nicmsg bench --quick`: every pattern and every baseline runs and writes its files. These
//! are smoke tests, not benchmarks: the numbers of a quick run are not looked at.

use std::path::{Path, PathBuf};
use std::process::Command;

use nicmsg_bench::model::{Outcome, Pattern, Report};

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nicmsg-bench-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn bench(args: &[&str], out: &Path) -> Report {
    let output = Command::new(env!("CARGO_BIN_EXE_nicmsg"))
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
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    serde_json::from_str(&text).expect("results.json is a report")
}

/// Every series of the in-project systems measured something; external peers either ran or
/// say why not.
fn check_series(report: &Report) {
    for series in &report.series {
        let external =
            ["netpipe", "fi-udp-rxd", "fi-tcp-rxm", "ucx-tcp"].contains(&series.system.as_str());
        match &series.outcome {
            Outcome::Measured => assert!(
                !series.points.is_empty(),
                "{} {:?}: measured but no points",
                series.system,
                series.pattern
            ),
            Outcome::NotInstalled { install } if external => assert!(!install.is_empty()),
            Outcome::Unsupported { reason } if external => assert!(!reason.is_empty()),
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
    assert!(report.environment.quick);
    assert!(!report.environment.kernel.is_empty());
    for file in [
        "bench-report.md",
        "latency.png",
        "latency.svg",
        "bw.png",
        "bw.svg",
    ] {
        let path = out.join(file);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{} missing or empty", path.display());
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

#[test]
fn bad_arguments_are_refused_with_a_clear_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_nicmsg"))
        .args(["bench", "latency", "--baselines", "mpich"])
        .output()
        .expect("run nicmsg bench");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown system"), "{stderr}");
}

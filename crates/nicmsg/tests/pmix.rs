//! A nicmsg program under a PMIx launcher: Open MPI's `mpirun -n 4` starts the `alltoall`
//! example with no `NICMSG_*` variable but `NICMSG_LOG=info`, and the ranks must find each
//! other through PMIx (the log says so, rank by rank) and verify every byte of the all-to-all.
//! Skips itself, saying why, where Open MPI's `mpirun` (openmpi-bin) or the PMIx client
//! library (libpmix2) is not installed.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the job may run before it counts as hung (it takes a few seconds).
const RUN_LIMIT: Duration = Duration::from_secs(180);
const RANKS: u32 = 4;

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn pmix_library_installed() -> bool {
    Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libpmix\\.so\\.2 '"])
        .status()
        .is_ok_and(|status| status.success())
}

/// Waits for `child` at most `limit`; kills it past that.
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().expect("output");
            panic!(
                "{what} hung for {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn mpirun_bootstraps_through_pmix_without_nicmsg_variables() {
    if !installed("mpirun") {
        eprintln!("skipped: Open MPI's mpirun is not installed (openmpi-bin)");
        return;
    }
    if !pmix_library_installed() {
        eprintln!("skipped: the PMIx client library libpmix.so.2 is not installed (libpmix2)");
        return;
    }
    let program = common::example("alltoall");
    let mut command = Command::new("mpirun");
    command
        .args(["--allow-run-as-root", "--oversubscribe", "-n"])
        .arg(RANKS.to_string())
        .args(["-x", "NICMSG_LOG"])
        .arg(&program)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Nothing of nicmsg's own bootstrap (nor any other setting) reaches the ranks.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NICMSG_") {
            command.env_remove(&name);
        }
    }
    command.env("NICMSG_LOG", "info");
    let output = finish(
        command.spawn().expect("mpirun starts"),
        RUN_LIMIT,
        "mpirun -n 4 alltoall",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        output.status.success(),
        "mpirun -n 4 alltoall failed ({}):\n{context}",
        output.status
    );
    assert!(
        stdout.contains("alltoall: 6 rounds verified"),
        "no success line:\n{context}"
    );
    for rank in 0..RANKS {
        for line in [
            format!("bootstrap via PMIx: rank {rank} of {RANKS} in namespace "),
            format!("rank {rank}: bind address chosen after the PMIx fence of host records"),
            format!("rank {rank}: addresses of all {RANKS} ranks exchanged via PMIx fence"),
        ] {
            assert!(
                stderr.contains(&line),
                "rank {rank} did not log {line:?}:\n{context}"
            );
        }
    }
    assert_eq!(
        stderr
            .matches("all 4 ranks share this host's network namespace")
            .count(),
        RANKS as usize,
        "every rank binds loopback on one machine:\n{context}"
    );
    assert!(
        !stderr.contains("TCP service"),
        "rank 0's TCP service was used:\n{context}"
    );
}

//! `nicmsg bench ARGS` runs `nicmsg-bench ARGS` from the launcher's directory, in the launcher's
//! own process. Here a copy of the launcher sits in a directory of its own, beside a stand-in
//! `nicmsg-bench` script that records what it got. The real benchmark, through `nicmsg bench`, is
//! tested in crates/bench/tests/bench.rs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, PoisonError};

const NICMSG: &str = env!("CARGO_BIN_EXE_nicmsg");

/// A program being written while another test thread forks is open in the child too, until the
/// child execs, and executing it meanwhile fails with ETXTBSY ("Text file busy"). The tests
/// write their programs and start processes under this lock, so no fork sees a file open.
static WRITE_OR_FORK: Mutex<()> = Mutex::new(());

fn write_or_fork() -> MutexGuard<'static, ()> {
    WRITE_OR_FORK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh directory holding a copy of the launcher (a copy, not a link: the launcher looks
/// beside its resolved path).
fn launcher_alone(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nicmsg-forward-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("make the directory");
    let _lock = write_or_fork();
    fs::copy(NICMSG, dir.join("nicmsg")).expect("copy the launcher");
    dir
}

/// A `nicmsg-bench` in `dir` that writes its pid and its arguments, one a line, to `got`, and
/// exits with `status`.
fn stand_in(dir: &Path, status: i32) {
    let script = format!(
        "#!/bin/sh\n{{ echo \"$$\"; for a in \"$@\"; do printf '%s\\n' \"$a\"; done; }} > \"{}\"\nexit {status}\n",
        dir.join("got").display()
    );
    let path = dir.join("nicmsg-bench");
    let _lock = write_or_fork();
    fs::write(&path, script).expect("write the stand-in");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn run(dir: &Path, args: &[&str]) -> (Output, u32) {
    let lock = write_or_fork();
    let child = Command::new(dir.join("nicmsg"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start nicmsg");
    drop(lock);
    let pid = child.id();
    (child.wait_with_output().expect("wait for nicmsg"), pid)
}

/// The stand-in's pid and arguments.
fn got(dir: &Path) -> (u32, Vec<String>) {
    let text = fs::read_to_string(dir.join("got")).expect("the stand-in ran");
    let mut lines = text.lines();
    let pid = lines.next().expect("pid").parse().expect("a pid");
    (pid, lines.map(str::to_owned).collect())
}

#[test]
fn bench_passes_every_argument_and_the_exit_status_and_keeps_the_process() {
    let dir = launcher_alone("args");
    stand_in(&dir, 3);
    let args = [
        "latency",
        "--sizes",
        "8,1K",
        "--help",
        "--",
        "two words",
        "-x",
        "",
    ];
    let mut line = vec!["bench"];
    line.extend(args);
    let (output, pid) = run(&dir, &line);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let (their_pid, their_args) = got(&dir);
    assert_eq!(their_args, args);
    // The same process: signals to `nicmsg bench` reach the benchmark itself.
    assert_eq!(their_pid, pid);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn bench_worker_runs_the_benchmarks_worker() {
    let dir = launcher_alone("worker");
    stand_in(&dir, 0);
    let (output, _) = run(&dir, &["bench-worker", "--pattern", "latency"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(got(&dir).1, ["bench-worker", "--pattern", "latency"]);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_benchmark_program_is_named_with_how_to_build_it() {
    let dir = launcher_alone("missing");
    let (output, _) = run(&dir, &["bench", "latency"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("nicmsg bench: ")
            && stderr.contains(&dir.join("nicmsg-bench").display().to_string())
            && stderr.contains("-p nicmsg-bench"),
        "{stderr}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_launchers_own_help_still_lists_bench() {
    let lock = write_or_fork();
    let child = Command::new(NICMSG)
        .arg("--help")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    drop(lock);
    let output = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with("bench ")),
        "{stdout}"
    );
    assert!(!stdout.contains("bench-worker"), "{stdout}");
}

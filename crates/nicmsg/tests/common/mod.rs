//! What the tests that run real jobs share: building the programs (examples, the C library, the
//! launcher), compiling a C program against `include/nicmsg.h`, launching a job, running a
//! program within a time limit, and whether a tool or network namespaces can be used here.
//! The provider's tests (`crates/fabric`) include this file too.

// Each test crate uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Directory of the binaries cargo built for this test run (examples, the C library).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// Builds (once per test process) what the jobs run: this package's examples and C library, and
/// the launcher of the nicmsg-cli package, in the profile of this test run.
pub fn build_job_programs() {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let mut command = Command::new(env!("CARGO"));
        command.args([
            "build",
            "-q",
            "-p",
            "nicmsg",
            "--lib",
            "--examples",
            "-p",
            "nicmsg-cli",
            "--bin",
            "nicmsg",
        ]);
        if target_dir().ends_with("release") {
            command.arg("--release");
        }
        let status = command.status().expect("run cargo build");
        assert!(status.success(), "building the job programs failed");
    });
}

pub fn example(name: &str) -> PathBuf {
    build_job_programs();
    let path = target_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing after the build",
        path.display()
    );
    path
}

pub fn launch(args: &[&str], program: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(launcher());
    command.args(args).arg("--").arg(program);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run the launcher")
}

/// The `nicmsg` launcher, built from the nicmsg-cli package.
pub fn launcher() -> PathBuf {
    build_job_programs();
    target_dir().join("nicmsg")
}

pub fn assert_job_ok(output: &Output, what: &str, expect: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(expect),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// Compiles a C program of the repository (`source`, relative to its root) against the header
/// and the library, warnings as errors, into `name` in the target directory.
pub fn compile_c(source: &str, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    build_job_programs();
    let library_dir = target_dir();
    assert!(
        library_dir.join("libnicmsg.so").exists(),
        "libnicmsg.so not built in {}",
        library_dir.display()
    );
    let binary = library_dir.join(name);
    let status = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(root.join(source))
        .arg(format!("-I{}", root.join("include").display()))
        .arg(format!("-L{}", library_dir.display()))
        .arg(format!("-Wl,-rpath,{}", library_dir.display()))
        .args(["-lnicmsg", "-o"])
        .arg(&binary)
        .status()
        .expect("run cc");
    assert!(status.success(), "{source} does not compile cleanly");
    binary
}

/// Why jobs over network namespaces cannot run here (`nicmsg run --netns` with `--loss` or
/// `--rate`), or None if they can.
pub fn netns_available() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        return Some("not root");
    }
    if !["ip", "tc", "nft"].into_iter().all(installed) {
        return Some("ip, tc or nft missing (apt-get install iproute2 nftables)");
    }
    None
}

/// Whether `program` is on the `PATH`.
pub fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// How long the output of a program killed at its limit is waited for: its own children (an
/// `mpirun`'s ranks) may hold its pipes open after it died.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(5);

/// Waits for `child` at most `limit`, reading its output meanwhile (a program that filled a
/// pipe nobody reads would look hung); past the limit, kills it and fails the test with what
/// it printed, instead of hanging the suite.
pub fn finish(child: Child, limit: Duration, what: &str) -> Output {
    let pid = child.id();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    if let Ok(output) = finished.recv_timeout(limit) {
        return output.expect("output");
    }
    // SAFETY: kill touches no memory; `pid` is the child, which its waiter has not reaped.
    unsafe { libc_kill(pid as i32, SIGKILL) };
    let printed = finished
        .recv_timeout(DRAIN_AFTER_KILL)
        .ok()
        .and_then(Result::ok);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let (stdout, stderr) = printed.map_or_else(Default::default, |output| {
        (text(&output.stdout), text(&output.stderr))
    });
    panic!("{what} hung for {limit:?}:\n{stdout}\n{stderr}");
}

/// `SIGKILL` (9 on every Linux architecture).
const SIGKILL: i32 = 9;

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// Starts rank `rank` of a job of `size` over loopback UDP as this test binary run again with
/// only `test` (which plays the rank when `role` is set in its environment), with `extra`
/// variables; its stderr lines arrive on the receiver as they come, so a hung rank still shows
/// where it was.
pub fn spawn_rank(
    test: &str,
    role: &str,
    (rank, size, job): (u32, u32, u32),
    bootstrap: &str,
    extra: &[(&str, &str)],
) -> (Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let exe = std::env::current_exe().expect("this test binary");
    let mut child = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(role, "1")
        .env("NICMSG_RANK", rank.to_string())
        .env("NICMSG_SIZE", size.to_string())
        .env("NICMSG_JOB", job.to_string())
        .env("NICMSG_BOOTSTRAP", bootstrap)
        .env("NICMSG_TRANSPORT", "udp")
        .env("NICMSG_BIND_IP", "127.0.0.1")
        .envs(extra.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a rank");
    let (lines, stderr) = std::sync::mpsc::channel();
    let pipe = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    (child, stderr)
}

/// The number `name=` on the line of `output` that holds `prefix` (a child rank's counters,
/// printed after its harness may have printed its test's name on the same line).
pub fn stat_of(output: &str, prefix: &str, name: &str) -> u64 {
    output
        .lines()
        .filter_map(|line| line.find(prefix).map(|at| &line[at..]))
        .flat_map(|line| line.split_whitespace())
        .find_map(|word| word.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {prefix} of:\n{output}"))
}
